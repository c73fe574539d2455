/* SPDX-License-Identifier: BSD-3-Clause */
/* The agent: its reactor, its backends, notifications. */
#include "internal.h"

#include <stdio.h>
#include <string.h>

void nxl_agent_config_init_size(nxl_agent_config_t *cfg, size_t size)
{
    /* the caller's struct: size bytes, fewer or more fields than ours */
    memset(cfg, 0, size);
    cfg->size = size;
    cfg->log_level = -1;
    if (size >= offsetof(nxl_agent_config_t, peer_recovery) + sizeof(cfg->peer_recovery))
        cfg->peer_recovery = 1;
}

/* programs built against headers before the macro: their struct ended
 * before the TLS fields (-version-info 3) */
void(nxl_agent_config_init)(nxl_agent_config_t *cfg)
{
    nxl_agent_config_init_size(cfg, offsetof(nxl_agent_config_t, tls_cert_file));
}

/* One reactor event delivers completed futures and queued notifications,
 * so that no user callback runs inside a transport's progress call. */
static void deliver_cb(nxlt_timer_t *t, void *arg)
{
    nxl_agent_t *a = arg;
    nxli_deliver_turn(a);
    if (a->notif_cb) {
        /* operations the notification callbacks start that complete at
         * once (a reply) are delivered right after them, in this same pass
         * as an event activated now would be, without activating one */
        a->draining = true;
        nxl_notifs_drain(a, a->notif_cb, a->notif_arg);
        a->draining = false;
        if (a->drain_queued) {
            a->drain_queued = false;
            nxli_deliver_turn(a);
        }
    }
    if (!STAILQ_EMPTY(&a->pevents) || a->suspects)
        nxli_peer_deliver(a);
}

/* Direct delivery (include/nxl/transport.h). Not inside a callback or a
 * delivery (the contract: never inside the call that started an
 * operation; a delivery's own rules for what its callbacks complete), nor
 * for a foreign thread's call (mt/act.c sorts out its own) */
int nxlt_deliver_hold(nxlt_ctx_t *ctx)
{
    nxl_agent_t *a = ctx->agent;
    if (a->direct || a->cb_depth > 0 || a->delivering || a->draining || a->acting)
        return 0;
    a->direct = true;
    return 1;
}

int nxlt_deliver_release(nxlt_ctx_t *ctx, int now)
{
    nxl_agent_t *a = ctx->agent;
    a->direct = false;
    if (!a->direct_due)
        return 0;
    a->direct_due = false;
    if (!now) {
        nxlt_timer_activate(a->ev_deliver);
        return 0;
    }
    a->st.deliveries_direct++;
    deliver_cb(a->ev_deliver, a);
    return 1;
}

#define CFG_HAS(f) (cfg->size >= offsetof(nxl_agent_config_t, f) + sizeof(cfg->f))
#define CFG_OR(f, dflt) (CFG_HAS(f) && cfg->f ? (size_t)cfg->f : (size_t)(dflt))
/* a configured string, else the environment's, NULL when empty */
static const char *cfg_str(const char *given, bool has, const char *env)
{
    const char *v = has && given ? given : getenv(env);
    return v && *v ? v : NULL;
}

/* a size from the environment: bytes, or with a suffix k, m, g (KiB,
 * MiB, GiB); @p dflt when unset, 0 or not a size */
static size_t env_size(const char *name, size_t dflt)
{
    const char *v = getenv(name);
    char *e;
    if (!v || !*v)
        return dflt;
    unsigned long long n = strtoull(v, &e, 10);
    int shift = 0;
    if (*e == 'k' || *e == 'K')
        shift = 10, e++;
    else if (*e == 'm' || *e == 'M')
        shift = 20, e++;
    else if (*e == 'g' || *e == 'G')
        shift = 30, e++;
    if (*e || !n || n > (SIZE_MAX >> shift))
        return dflt;
    return (size_t)n << shift;
}

/* the configuration's settings and limits, defaults for those absent (an
 * older caller's smaller config) or 0 */
static void cfg_read(nxl_agent_t *a, const nxl_agent_config_t *cfg)
{
    a->name = strdup(cfg->name);
    /* the registration cache (mem.c): on unless NXL_REG_CACHE is "0" */
    const char *rc = getenv("NXL_REG_CACHE");
    a->reg_cache = !(rc && strcmp(rc, "0") == 0);
    /* lazy registration of host memory (lazyreg.c) */
    const char *ar = getenv("NXL_AUTO_REGISTER");
    a->auto_register = CFG_HAS(auto_register) && cfg->auto_register
                           ? cfg->auto_register > 0
                           : ar && strcmp(ar, "1") == 0;
    a->auto_limit = CFG_HAS(auto_register_limit) && cfg->auto_register_limit
                        ? cfg->auto_register_limit
                        : env_size("NXL_AUTO_REGISTER_LIMIT", (size_t)4 << 30);
    const char *ae = getenv("NXL_AUTO_REGISTER_EVENTS");
    a->auto_events = !(ae && strcmp(ae, "0") == 0);
    a->log_level = cfg->log_level < 0 ? nxli_log_level_env() : (nxl_log_level_t)cfg->log_level;
    a->log_cb = cfg->log_cb;
    a->log_arg = cfg->log_arg;
    a->busy_poll_us = cfg->busy_poll_us;
    a->io_timeout_ms = cfg->size > offsetof(nxl_agent_config_t, io_timeout_ms) && cfg->io_timeout_ms
                           ? cfg->io_timeout_ms
                           : 10000;
    const char *eps = cfg->etcd_endpoints ? cfg->etcd_endpoints : getenv("NXL_ETCD_ENDPOINTS");
    bool has_etcd_fields = cfg->size >= offsetof(nxl_agent_config_t, etcd_lease_ttl_s) +
                                            sizeof(cfg->etcd_lease_ttl_s);
    a->etcd_endpoints = eps && *eps ? strdup(eps) : NULL;
    a->etcd_prefix = strdup(has_etcd_fields && cfg->etcd_prefix ? cfg->etcd_prefix
                                                                 : "/nxl/agents/");
    a->etcd_ttl_s = has_etcd_fields && cfg->etcd_lease_ttl_s ? cfg->etcd_lease_ttl_s : 10;
    a->max_frame = CFG_OR(max_frame_bytes, NXLI_MD_MAX_BYTES);
    if (a->max_frame > NXLI_MD_MAX_BYTES)
        a->max_frame = NXLI_MD_MAX_BYTES;
    a->max_clients = CFG_OR(max_md_clients, 256);
    a->max_clients_per_host = CFG_OR(max_md_clients_per_host, 32);
    a->max_peers = CFG_OR(max_peers, 65536);
    a->max_notifs = CFG_OR(max_queued_notifs, 1u << 20);
    a->peer_recovery = !CFG_HAS(peer_recovery) || cfg->peer_recovery;
    nxli_peer_init(a);
    LIST_INIT(&a->remotes);
    LIST_INIT(&a->xfers);
    LIST_INIT(&a->kv_xfers);
    LIST_INIT(&a->prepped);
    LIST_INIT(&a->ops);
    LIST_INIT(&a->tfutures);
    TAILQ_INIT(&a->pending);
    TAILQ_INIT(&a->deliver);
    TAILQ_INIT(&a->deadlines);
    TAILQ_INIT(&a->acted);
    STAILQ_INIT(&a->notifs);
    STAILQ_INIT(&a->notif_spares);
}

/* the loop: the application's libevent base, one of the agent's own, or
 * an epoll set (NXL_LOOP_FD), and the agent's timers on it */
static nxl_status_t base_make(nxl_agent_t *a, const nxl_agent_config_t *cfg, bool threaded)
{
    int kind = CFG_HAS(loop) ? cfg->loop : NXL_LOOP_LIBEVENT;
    const char *refuse = NULL;
    /* $NXL_LOOP chooses where the configuration leaves the choice open:
     * the default loop, no base of the application's, not threaded */
    const char *env = getenv("NXL_LOOP");
    if (kind == NXL_LOOP_LIBEVENT && !cfg->base && !threaded && env && *env) {
        if (strcmp(env, "fd") == 0) {
            kind = NXL_LOOP_FD;
        } else if (strcmp(env, "libevent") != 0) {
            nxli_set_create_error("nxl_agent_create: NXL_LOOP is \"%.32s\"; it is \"libevent\" "
                                  "(the default) or \"fd\" (NXL_LOOP_FD)", env);
            return NXL_ERR_INVALID_PARAM;
        }
    }
    if (kind != NXL_LOOP_LIBEVENT && kind != NXL_LOOP_FD)
        refuse = "loop is NXL_LOOP_LIBEVENT or NXL_LOOP_FD";
    else if (threaded && cfg->base)
        refuse = "a threaded agent runs an event base of its own on its reactor thread; leave "
                 "base NULL, or embed the agent without threaded";
    else if (threaded && kind == NXL_LOOP_FD)
        refuse = "a threaded agent runs its own loop on its reactor thread: there is no "
                 "descriptor for another loop to watch; choose threaded or NXL_LOOP_FD";
    else if (cfg->base && kind == NXL_LOOP_FD)
        refuse = "base is a libevent base, and loop NXL_LOOP_FD runs no libevent base; "
                 "leave base NULL with NXL_LOOP_FD";
    if (refuse) {
        nxli_set_create_error("nxl_agent_create: %s", refuse);
        return NXL_ERR_INVALID_PARAM;
    }
    char why[256];
    a->loop_kind = kind;
    /* a threaded agent's reactor sleeps in the loop's epoll set, whose
     * timerfd and watches a foreign thread's call changes (mt/reactor.c) */
    if (!(a->loop = nxli_loop_new(a, threaded ? NXL_LOOP_FD : kind, cfg->base, why,
                                  sizeof(why)))) {
        nxli_set_create_error("nxl_agent_create: %s", why);
        return NXL_ERR_BACKEND;
    }
    a->base = a->loop->base;
    if (!(a->ev_deliver = nxli_timer_new(a, deliver_cb, a)) ||
        !(a->ev_deliver_next = nxli_timer_new(a, deliver_cb, a))) {
        nxli_set_create_error("nxl_agent_create: the agent's loop could not make a timer");
        return NXL_ERR_BACKEND;
    }
    return NXL_SUCCESS;
}

/* what the configuration (or the environment) asks for beyond the base:
 * authentication, TLS for the metadata exchange (all three files, or
 * none), metrics, the metadata listener, the reactor thread */
static nxl_status_t services_start(nxl_agent_t *a, const nxl_agent_config_t *cfg, bool threaded)
{
    nxl_status_t st = NXL_SUCCESS;
    const char *sec = cfg_str(cfg->auth_secret, CFG_HAS(auth_secret), "NXL_AUTH_SECRET");
    const char *kf = cfg_str(cfg->auth_key_file, CFG_HAS(auth_key_file), "NXL_AUTH_KEY_FILE");
    const char *tc = cfg_str(cfg->tls_cert_file, CFG_HAS(tls_cert_file), "NXL_TLS_CERT_FILE");
    const char *tk = cfg_str(cfg->tls_key_file, CFG_HAS(tls_key_file), "NXL_TLS_KEY_FILE");
    const char *tca = cfg_str(cfg->tls_ca_file, CFG_HAS(tls_ca_file), "NXL_TLS_CA_FILE");
    const char *maddr = CFG_HAS(metrics_addr) ? cfg->metrics_addr : NULL;
    if (!maddr)
        maddr = getenv("NXL_METRICS_ADDR");
    if (sec || kf)
        st = nxli_auth_init(a, sec, kf);
    if (st == NXL_SUCCESS && (tc || tk || tca))
        st = nxli_tls_init(a, tc, tk, tca);
    if (st == NXL_SUCCESS && maddr && *maddr)
        st = nxli_metrics_start(a, maddr);
    if (st == NXL_SUCCESS && cfg->listen_addr)
        st = nxli_exchange_listen(a, cfg->listen_addr, cfg->listen_port);
    if (st == NXL_SUCCESS && threaded)
        st = nxli_thread_start(a);
    if (st != NXL_SUCCESS)
        nxli_set_create_error("%s", a->err);
    return st;
}

nxl_status_t nxl_agent_create(const nxl_agent_config_t *cfg, nxl_agent_t **out)
{
    if (out)
        *out = NULL;
    if (!cfg || !out) {
        nxli_set_create_error("nxl_agent_create: config and out pointer are required");
        return NXL_ERR_INVALID_PARAM;
    }
    if (cfg->size < offsetof(nxl_agent_config_t, io_timeout_ms) || cfg->size > sizeof(*cfg)) {
        nxli_set_create_error("nxl_agent_create: config size %zu is not one this library knows; "
                              "initialise it with nxl_agent_config_init()", cfg->size);
        return NXL_ERR_INVALID_PARAM;
    }
    if (!cfg->name || !*cfg->name || strlen(cfg->name) >= NXLI_NAME_MAX) {
        nxli_set_create_error("nxl_agent_create: an agent needs a name of 1 to %d bytes",
                              NXLI_NAME_MAX - 1);
        return NXL_ERR_INVALID_PARAM;
    }
    nxl_agent_t *a = calloc(1, sizeof(*a));
    if (!a) {
        nxli_set_create_error("nxl_agent_create: out of memory");
        return NXL_ERR_UNKNOWN;
    }
    cfg_read(a, cfg);
    bool threaded = CFG_HAS(threaded) && cfg->threaded;
    nxl_status_t st = NXL_SUCCESS;
    if (!threaded) {
        if (!(a->pool = calloc(1, sizeof(*a->pool)))) {
            nxli_set_create_error("nxl_agent_create: out of memory");
            st = NXL_ERR_UNKNOWN;
        } else {
            a->pool->open = true;
        }
    }
    if (st == NXL_SUCCESS)
        st = base_make(a, cfg, threaded);
    if (st == NXL_SUCCESS)
        st = services_start(a, cfg, threaded);
    if (st != NXL_SUCCESS) {
        nxl_agent_destroy(a);
        return st;
    }
    nxli_log(a, NXL_LOG_INFO, "agent '%s' created (%s%s%s)", a->name,
             a->thr                      ? "its own epoll set, run by its reactor thread"
             : a->loop_kind == NXL_LOOP_FD ? "its own epoll set, for another loop"
             : a->loop->own_base         ? "own event base"
                                         : "embedded event base", a->listen_port ? ", metadata listener up" : "",
             a->thr ? ", reactor on its own thread" : "");
    *out = a;
    return NXL_SUCCESS;
}
#undef CFG_OR
#undef CFG_HAS

void nxl_agent_destroy(nxl_agent_t *a)
{
    if (!a)
        return;
    if (a->thr) {
        nxli_thread_destroy(a); /* teardown on the reactor thread, join, free */
        return;
    }
    nxli_agent_teardown(a);
    nxli_agent_free(a);
}

/* Everything but the event base, its events and the struct: callbacks of
 * pending futures run here (on the reactor thread in threaded mode). */
void nxli_agent_teardown(nxl_agent_t *a)
{
    /* transports that move data on their own (the kernel, worker threads)
     * stop first, so that no callback sees its buffer still in use */
    for (int i = 0; i < a->nbackends; i++)
        if (a->backends[i]->ops->quiesce)
            a->backends[i]->ops->quiesce(a->backends[i]->state);
    /* pending futures complete with CANCELED, their callbacks run here */
    nxli_futures_cancel_all(a);
    /* KV transfers left: their READs, staging and futures, while the
     * transfers and registrations they hold are still there */
    nxli_kv_cleanup(a);
    nxli_etcd_cleanup(a, true);
    nxli_exchange_cleanup(a);
    nxli_peer_cleanup(a);
    nxli_metrics_cleanup(a);
    nxli_auth_free(a);
    nxli_tls_free(a);
    nxli_xfers_cleanup(a);
    nxli_remote_cleanup(a);
    nxli_mem_cleanup(a);
    for (int i = a->nbackends - 1; i >= 0; i--) {
        nxl_backend_t *b = a->backends[i];
        b->ops->destroy(b->state);
        free(b);
    }
    /* ops a transport left behind have no future anymore */
    while (!LIST_EMPTY(&a->ops))
        nxli_op_free(LIST_FIRST(&a->ops));
    nxli_deliver(a);
    nxli_notif_t *n;
    while ((n = STAILQ_FIRST(&a->notifs))) {
        STAILQ_REMOVE_HEAD(&a->notifs, link);
        free(n);
    }
    while ((n = STAILQ_FIRST(&a->notif_spares))) {
        STAILQ_REMOVE_HEAD(&a->notif_spares, link);
        free(n);
    }
    a->nnotif_spares = 0;
    /* futures the application still holds outlive the agent (rule 4):
     * from now on they are its alone, called directly */
    nxl_future_t *f;
    while ((f = LIST_FIRST(&a->tfutures))) {
        LIST_REMOVE(f, alink);
        f->mt = false;
    }
    nxli_pool_close(a);
}

void nxli_agent_free(nxl_agent_t *a)
{
    if (a->loop) {
        nxlt_timer_free(a->ev_deliver);
        nxlt_timer_free(a->ev_deliver_next);
        if (a->ev_deadline)
            nxlt_timer_free(a->ev_deadline);
        nxli_loop_free(a->loop);
    }
    free(a->adapter);
    free(a->etcd_endpoints);
    free(a->etcd_prefix);
    free(a->name);
    free(a);
}

const char *nxl_agent_name(const nxl_agent_t *a) { return a->name; }
struct event_base *nxl_agent_base(nxl_agent_t *a) { return a->base; }
uint16_t nxl_agent_listen_port(const nxl_agent_t *a) { return a->listen_port; }

static nxl_status_t loop_guard(nxl_agent_t *a, const char *call)
{
    if (a->cb_depth > 0 || a->loop_depth > 0) {
        nxli_err(a, "%s: the reactor is already running on this thread (called from a "
                    "callback?); it cannot be re-entered", call);
        return NXL_ERR_NOT_ALLOWED;
    }
    return NXL_SUCCESS;
}

/* threaded mode: the agent's own thread runs the reactor */
static nxl_status_t threaded_refuse(nxl_agent_t *a, const char *call)
{
    char why[NXLI_ERR_MAX];
    snprintf(why, sizeof(why), "%s: agent '%s' runs its reactor on a thread of its own "
             "(threaded mode); wait for futures with nxl_future_wait() or their callbacks "
             "instead", call, a->name);
    if (a && nxli_thread_foreign(a))
        nxli_thread_set_error(a, why);
    else
        nxli_err(a, "%s", why);
    return NXL_ERR_NOT_ALLOWED;
}

/* what nxl_agent_run and nxl_agent_run_once check before they turn the
 * loop */
static nxl_status_t loop_may_run(nxl_agent_t *a, const char *call)
{
    return a->thr ? threaded_refuse(a, call) : loop_guard(a, call);
}

/* after their turns of the loop: the loop's result @p rc */
static nxl_status_t loop_ran(nxl_agent_t *a, int rc, const char *call)
{
    a->loop_depth--;
    if (rc < 0) {
        if (a->loop_kind == NXL_LOOP_FD)
            return NXL_ERR_BACKEND; /* the sentence is the loop's */
        nxli_err(a, "%s: event_base_loop failed (is the application's loop running this base "
                    "already?)", call);
        return NXL_ERR_NOT_ALLOWED;
    }
    return NXL_SUCCESS;
}

nxl_status_t nxl_agent_run(nxl_agent_t *a)
{
    nxl_status_t st = loop_may_run(a, "nxl_agent_run");
    if (st != NXL_SUCCESS)
        return st;
    a->stopping = false;
    a->loop_depth++;
    int rc = 0;
    while (!a->stopping && rc == 0)
        rc = a->loop->ops->run_once(a->loop, -1);
    return loop_ran(a, rc, "nxl_agent_run");
}

nxl_status_t nxl_agent_run_once(nxl_agent_t *a, int timeout_ms)
{
    nxl_status_t st = loop_may_run(a, "nxl_agent_run_once");
    if (st != NXL_SUCCESS)
        return st;
    a->loop_depth++;
    int rc = a->loop->ops->run_once(a->loop, timeout_ms);
    /* NXL_LOOP_FD: while a transport polls (a zero-delay timer comes due
     * again after each turn: UCX's spin after activity), further turns run
     * here for up to one slice, as libevent's loop would run them, instead
     * of a return to the application's loop, its epoll_wait(0) on the
     * backend fd and this call again for every pass */
    if (a->loop_kind == NXL_LOOP_FD && rc == 0) {
        uint64_t end = nxli_now_us() + NXLI_FD_SLICE_US;
        while (rc == 0 && !a->stopping && a->loop->ops->timeout_ms(a->loop) == 0 &&
               nxli_now_us() < end)
            rc = a->loop->ops->run_once(a->loop, 0);
    }
    return loop_ran(a, rc, "nxl_agent_run_once");
}

void nxl_agent_stop(nxl_agent_t *a)
{
    if (a->thr)
        return; /* the reactor thread runs until nxl_agent_destroy() */
    a->stopping = true;
    a->loop->ops->stop(a->loop);
}

/* what an NXL_LOOP_FD agent offers another loop; @p call for the sentence */
static bool fd_loop(nxl_agent_t *a, const char *call)
{
    if (a->loop_kind == NXL_LOOP_FD && !a->thr)
        return true;
    char why[NXLI_ERR_MAX];
    snprintf(why, sizeof(why), "%s: agent '%s' runs on %s, not on NXL_LOOP_FD: make it with "
             "nxl_agent_config_t.loop = NXL_LOOP_FD to drive it from another loop", call,
             a->name, a->thr ? "a reactor thread of its own (threaded mode)" : "a libevent base");
    if (nxli_thread_foreign(a)) /* the caller's sentence, not the reactor's */
        nxli_thread_set_error(a, why);
    else
        nxli_err(a, "%s", why);
    return false;
}

int nxl_agent_backend_fd(nxl_agent_t *a)
{
    return fd_loop(a, "nxl_agent_backend_fd") ? a->loop->epfd : -1;
}

int nxl_agent_backend_timeout(nxl_agent_t *a)
{
    if (a->loop_kind != NXL_LOOP_FD || a->thr)
        return -1;
    return a->loop->ops->timeout_ms(a->loop);
}

nxl_status_t nxl_agent_attach(nxl_agent_t *a, const char *who)
{
    if (!fd_loop(a, "nxl_agent_attach"))
        return NXL_ERR_NOT_ALLOWED;
    if (!who) {
        free(a->adapter);
        a->adapter = NULL;
        return NXL_SUCCESS;
    }
    if (a->adapter) {
        nxli_err(a, "nxl_agent_attach: agent '%s' is driven by the %s adapter already; detach it "
                    "first (one loop drives an agent)", a->name, a->adapter);
        return NXL_ERR_NOT_ALLOWED;
    }
    if (!(a->adapter = strdup(who))) {
        nxli_err(a, "nxl_agent_attach: out of memory");
        return NXL_ERR_UNKNOWN;
    }
    return NXL_SUCCESS;
}

/* ---- backends */

size_t nxl_plugins_available(nxl_plugin_info_t *out, size_t cap)
{
    size_t n;
    const nxli_transport_t *t = nxli_transports(&n);
    for (size_t i = 0; i < n && i < cap; i++) {
        memset(&out[i], 0, sizeof(out[i]));
        out[i].name = t[i].name;
        if (!t[i].ops) {
            snprintf(out[i].reason, sizeof(out[i].reason), "%s", t[i].reason);
            continue;
        }
        out[i].mem_mask = t[i].ops->mem_mask;
        out[i].available =
            t[i].ops->probe ? t[i].ops->probe(out[i].reason, sizeof(out[i].reason)) : 1;
    }
    return n;
}

nxl_status_t nxl_backend_create(nxl_agent_t *a, const char *name, const nxl_param_t *params,
                                size_t nparams, nxl_backend_t **out)
{
    if (a && nxli_thread_foreign(a))
        return nxli_rpc_backend_create(a, name, params, nparams, out);
    if (out)
        *out = NULL;
    if (!name) {
        nxli_err(a, "nxl_backend_create: no transport name given");
        return NXL_ERR_INVALID_PARAM;
    }
    const nxli_transport_t *found = nxli_transport_find(name);
    if (!found) {
        size_t n;
        const nxli_transport_t *t = nxli_transports(&n);
        char list[128] = "";
        for (size_t i = 0; i < n; i++)
            if (t[i].ops)
                snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s",
                         list[0] ? ", " : "", t[i].name);
        nxli_err(a, "nxl_backend_create: no transport '%s' in this build (usable: %s; modules "
                    "searched in %s); see nxl_plugins_available() and configure's summary",
                 name, list[0] ? list : "none", nxli_transports_searched());
        return NXL_ERR_NOT_FOUND;
    }
    if (!found->ops) {
        if (found->path)
            nxli_err(a, "nxl_backend_create: transport %s cannot be used: %s (module %s)",
                     found->name, found->reason, found->path);
        else if (found->module_missing)
            nxli_err(a, "nxl_backend_create: transport %s was built as the module libnxl-%s.so, "
                        "which is in none of %s: install it, or point NXL_PLUGIN_DIR at the "
                        "folder holding it", found->name, found->id, nxli_transports_searched());
        else
            nxli_err(a, "nxl_backend_create: transport %s cannot be used: %s", found->name,
                     found->reason);
        return found->st;
    }
    const nxlt_ops_t *ops = found->ops;
    if (ops->abi_version != NXLT_ABI_VERSION) {
        nxli_err(a, "nxl_backend_create: transport %s speaks ABI %u, the engine %u", ops->name,
                 ops->abi_version, NXLT_ABI_VERSION);
        return NXL_ERR_MISMATCH;
    }
    if (nxl_backend_get(a, ops->name)) {
        nxli_err(a, "nxl_backend_create: agent '%s' already has a %s transport", a->name,
                 ops->name);
        return NXL_ERR_NOT_ALLOWED;
    }
    if (a->nbackends == NXLI_MAX_BACKENDS) {
        nxli_err(a, "nxl_backend_create: an agent holds at most %d transports", NXLI_MAX_BACKENDS);
        return NXL_ERR_NOT_ALLOWED;
    }
    for (size_t i = 0; i < nparams; i++)
        if (!params[i].key || !params[i].value) {
            nxli_err(a, "nxl_backend_create(%s): parameter %zu has a NULL key or value", ops->name,
                     i);
            return NXL_ERR_INVALID_PARAM;
        }
    /* the transport's own table, when it has one, is the list of keys */
    size_t nknown;
    const nxl_param_info_t *known = nxli_ops_params(ops, &nknown);
    for (size_t i = 0; known && i < nparams; i++) {
        size_t k = 0;
        while (k < nknown && strcmp(known[k].key, params[i].key))
            k++;
        if (k < nknown)
            continue;
        char list[400] = "";
        for (k = 0; k < nknown; k++)
            snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", k ? ", " : "",
                     known[k].key);
        nxli_err(a, "nxl_backend_create(%s): unknown parameter '%s' (%s takes: %s; `nxl_info -v` "
                    "lists them with their defaults)", ops->name, params[i].key, ops->name, list);
        return NXL_ERR_INVALID_PARAM;
    }
    nxl_backend_t *b = calloc(1, sizeof(*b));
    if (!b) {
        nxli_err(a, "nxl_backend_create: out of memory");
        return NXL_ERR_UNKNOWN;
    }
    b->agent = a;
    b->ops = ops;
    b->index = a->nbackends;
    b->ctx.agent = a;
    b->ctx.backend = b;
    a->err[0] = 0;
    nxl_status_t st = ops->create(&b->ctx, params, nparams, &b->state);
    if (st != NXL_SUCCESS) {
        if (!a->err[0])
            nxli_err(a, "nxl_backend_create: transport %s failed to start (%s)", ops->name,
                     nxl_strerror(st));
        free(b);
        return st;
    }
    NXLI_TLOCK(a);
    a->backends[a->nbackends++] = b;
    a->mem_gen++; /* connection info changed */
    NXLI_TUNLOCK(a);
    nxli_log(a, NXL_LOG_INFO, "transport %s is up%s%s", ops->name,
             ops->describe ? ": " : "", ops->describe ? ops->describe(b->state) : "");
    if (out)
        *out = b;
    return NXL_SUCCESS;
}

const char *nxl_backend_name(const nxl_backend_t *b) { return b->ops->name; }

nxl_backend_t *nxl_backend_get(nxl_agent_t *a, const char *name)
{
    if (a && nxli_thread_foreign(a))
        return nxli_rpc_backend_get(a, name);
    for (int i = 0; i < a->nbackends; i++)
        if (!strcasecmp(a->backends[i]->ops->name, name))
            return a->backends[i];
    return NULL;
}

/* ---- notifications */

void nxlt_notif_recv(nxlt_ctx_t *ctx, const char *from, const void *msg, size_t len)
{
    nxl_agent_t *a = ctx->agent;
    if (a->nnotifs >= a->max_notifs) {
        /* nobody drains: bounded; the first drop and then every 1024th is logged */
        if (a->st.notifs_dropped++ % 1024 == 0)
            nxli_log(a, NXL_LOG_WARN, "notification from '%s' dropped: %zu are waiting for "
                     "nxl_notifs_drain() (max_queued_notifs); %llu dropped so far", from,
                     a->nnotifs, (unsigned long long)a->st.notifs_dropped);
        return;
    }
    size_t fl = strlen(from) + 1, need = fl + len;
    nxli_notif_t *n = STAILQ_FIRST(&a->notif_spares);
    if (n && n->cap >= need) {
        STAILQ_REMOVE_HEAD(&a->notif_spares, link);
        a->nnotif_spares--;
    } else if (!(n = malloc(sizeof(*n) + (need > NXLI_NOTIF_KEEP ? need : NXLI_NOTIF_KEEP)))) {
        nxli_log(a, NXL_LOG_ERROR, "out of memory: notification from '%s' dropped", from);
        return;
    } else {
        n->cap = need > NXLI_NOTIF_KEEP ? need : NXLI_NOTIF_KEEP;
    }
    n->from = n->buf;
    memcpy(n->from, from, fl);
    n->msg = n->buf + fl;
    memcpy(n->msg, msg, len);
    n->len = len;
    a->st.notifs_received++;
    bool was_empty = STAILQ_EMPTY(&a->notifs);
    a->nnotifs++;
    STAILQ_INSERT_TAIL(&a->notifs, n, link);
    /* the first one wakes the delivery (a drain takes the rest with it) */
    if (a->notif_cb && was_empty)
        nxli_deliver_wake(a);
}

size_t nxl_notifs_drain(nxl_agent_t *a, nxl_notif_cb cb, void *arg)
{
    if (a && nxli_thread_foreign(a))
        return nxli_rpc_notifs_drain(a, cb, arg);
    size_t k = 0;
    nxli_notif_t *n;
    while ((n = STAILQ_FIRST(&a->notifs))) {
        STAILQ_REMOVE_HEAD(&a->notifs, link);
        a->nnotifs--;
        if (cb) {
            a->cb_depth++;
            cb(a, n->from, n->msg, n->len, arg);
            a->cb_depth--;
        }
        if (n->cap <= NXLI_NOTIF_KEEP && a->nnotif_spares < NXLI_NOTIF_SPARES) {
            STAILQ_INSERT_HEAD(&a->notif_spares, n, link);
            a->nnotif_spares++;
        } else {
            free(n);
        }
        k++;
    }
    return k;
}

void nxl_agent_on_notif(nxl_agent_t *a, nxl_notif_cb cb, void *arg)
{
    if (nxli_thread_foreign(a)) {
        nxli_rpc_agent_on_notif(a, cb, arg);
        return;
    }
    a->notif_cb = cb;
    a->notif_arg = arg;
    if (cb && !STAILQ_EMPTY(&a->notifs))
        nxlt_timer_activate(a->ev_deliver);
}
