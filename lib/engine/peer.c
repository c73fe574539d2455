/* SPDX-License-Identifier: BSD-3-Clause */
/* The peer lifecycle: what the agent remembers of each remote agent past
 * one incarnation, the events UP, CHANGED, DOWN and BACK delivered to the
 * application's callback, the recovery of a lost peer (fetched again with
 * backoff), and the re-binding of prepared lists and transfers to a peer's
 * current incarnation (nxl.h, "Peer lifecycle"). Everything here runs on
 * the reactor (or a thread acting for it). */
#include "internal.h"

#include <string.h>
#include <unistd.h>

#define RETRY_FIRST_MS 50
#define RETRY_MAX_MS 2000

static void suspects_run(nxl_agent_t *a, bool act);

static nxli_peer_t *peer_find(nxl_agent_t *a, const char *name)
{
    nxli_peer_t *p;
    LIST_FOREACH(p, &a->peers, link)
    if (!strcmp(p->name, name))
        return p;
    return NULL;
}

void nxli_peer_init(nxl_agent_t *a)
{
    LIST_INIT(&a->peers);
    STAILQ_INIT(&a->pevents);
    /* this incarnation's number: what tells peers a restarted agent from
     * the one they knew (0 is "none": older metadata) */
    uint64_t b = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (f) {
        if (fread(&b, sizeof(b), 1, f) != 1)
            b = 0;
        fclose(f);
    }
    if (!b)
        b = nxli_now_us() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)a;
    a->boot = b ? b : 1;
}

void nxli_peer_cleanup(nxl_agent_t *a)
{
    nxli_peer_t *p;
    while ((p = LIST_FIRST(&a->peers))) {
        LIST_REMOVE(p, link);
        if (p->retry)
            nxlt_timer_free(p->retry);
        free(p->host);
        free(p->name);
        free(p);
    }
    nxli_pevent_t *e;
    while ((e = STAILQ_FIRST(&a->pevents))) {
        STAILQ_REMOVE_HEAD(&a->pevents, link);
        free(e);
    }
    suspects_run(a, false);
}

/* ---- events */

static void emit(nxl_agent_t *a, nxli_peer_t *p, nxl_peer_kind_t kind, const char *why,
                 size_t nregions)
{
    static const char *const names[] = {"UP", "CHANGED", "DOWN", "BACK"};
    nxli_log(a, NXL_LOG_INFO, "peer '%s' %s (incarnation %llu)%s%s", p->name, names[kind],
             (unsigned long long)p->inc, why ? ": " : "", why ? why : "");
    if (!a->peer_cb)
        return; /* not kept (nxl_agent_on_peer) */
    size_t nl = strlen(p->name) + 1, wl = why ? strlen(why) + 1 : 1;
    nxli_pevent_t *e = malloc(sizeof(*e) + nl + wl);
    if (!e) {
        nxli_log(a, NXL_LOG_ERROR, "out of memory: event %s of peer '%s' dropped", names[kind],
                 p->name);
        return;
    }
    memcpy(e->buf, p->name, nl);
    memcpy(e->buf + nl, why ? why : "", wl);
    e->ev = (nxl_peer_event_t){
        .size = sizeof(e->ev),
        .peer = e->buf,
        .kind = kind,
        .incarnation = p->inc,
        .status = kind == NXL_PEER_DOWN ? NXL_ERR_REMOTE_DISCONNECT : NXL_SUCCESS,
        .why = e->buf + nl,
        .nregions = nregions,
    };
    bool was_empty = STAILQ_EMPTY(&a->pevents);
    STAILQ_INSERT_TAIL(&a->pevents, e, link);
    if (!was_empty || !a->ev_deliver)
        return;
    /* delivered as futures are: never inside the call that caused it; one
     * raised by a callback of this turn on the next turn */
    if (a->delivering || a->draining)
        nxlt_timer_start(a->ev_deliver_next, 0);
    else
        nxli_deliver_wake(a);
}

void nxli_peer_deliver(nxl_agent_t *a)
{
    suspects_run(a, true);
    /* the events queued before this pass; one a callback raises waits for
     * the next turn (emit started a timer for it) */
    STAILQ_HEAD(, nxli_pevent) batch = STAILQ_HEAD_INITIALIZER(batch);
    STAILQ_CONCAT(&batch, &a->pevents);
    nxli_pevent_t *e;
    while ((e = STAILQ_FIRST(&batch))) {
        STAILQ_REMOVE_HEAD(&batch, link);
        if (a->peer_cb) {
            a->cb_depth++;
            a->peer_cb(a, &e->ev, a->peer_arg);
            a->cb_depth--;
        }
        free(e);
    }
}

void nxl_agent_on_peer(nxl_agent_t *a, nxl_peer_cb cb, void *arg)
{
    if (nxli_thread_foreign(a)) {
        nxli_rpc_agent_on_peer(a, cb, arg);
        return;
    }
    a->peer_cb = cb;
    a->peer_arg = arg;
    if (cb && !STAILQ_EMPTY(&a->pevents))
        nxlt_timer_activate(a->ev_deliver);
}

/* ---- transfers that found the peer unreachable */

void nxli_peer_unreachable(nxl_agent_t *a, nxli_remote_t *r, const char *why)
{
    if (!a->acting) {
        /* why may be the agent's error, which completions overwrite */
        char w[NXLI_ERR_MAX], name[NXLI_NAME_MAX];
        snprintf(w, sizeof(w), "%s", why);
        snprintf(name, sizeof(name), "%s", r->name);
        nxli_remote_lost(a, name, w);
        snprintf(a->err, sizeof(a->err), "%s", w);
        return;
    }
    /* a foreign thread settles its call's futures: the peer's other
     * transfers and the events are the reactor's, on its next delivery */
    size_t nl = strlen(r->name) + 1;
    nxli_suspect_t *s = malloc(sizeof(*s) + nl);
    if (!s || !(s->why = strdup(why))) {
        free(s);
        return; /* the next failure on the reactor marks it */
    }
    memcpy(s->name, r->name, nl);
    s->boot = r->boot;
    s->next = a->suspects;
    a->suspects = s;
    nxlt_timer_activate(a->ev_deliver);
}

static void suspects_run(nxl_agent_t *a, bool act)
{
    nxli_suspect_t *s;
    while ((s = a->suspects)) {
        a->suspects = s->next;
        nxli_remote_t *r = act ? nxli_remote_find(a, s->name) : NULL;
        if (r && r->boot == s->boot) /* not replaced meanwhile */
            nxli_remote_lost(a, s->name, s->why);
        free(s->why);
        free(s);
    }
}

/* ---- recovery */

static void retry_arm(nxl_agent_t *a, nxli_peer_t *p);

static void recover_done(nxl_future_t *f, nxl_status_t st, void *arg)
{
    nxli_peer_t *p = arg;
    nxl_agent_t *a = f->agent;
    p->fetching = false;
    p->fetch = NULL;
    /* canceled: the agent is being destroyed, or the application gave the
     * peer up (nxli_peer_forget) */
    if (st != NXL_ERR_CANCELED && p->down && !p->app_down) {
        nxli_log(a, NXL_LOG_DEBUG, "peer '%s': fetching it again from %s:%u failed (%s)",
                 p->name, p->host, p->port, nxl_future_error(f));
        retry_arm(a, p);
    }
    nxl_future_release(f);
}

static void retry_cb(nxlt_timer_t *t, void *arg)
{
    nxli_peer_t *p = arg;
    nxl_agent_t *a = p->a;
    NXLI_UNUSED(t);
    if (!p->down || p->fetching || !p->host)
        return;
    p->fetching = true;
    if (nxl_md_fetch(a, p->name, p->host, p->port, recover_done, p, &p->fetch) != NXL_SUCCESS) {
        p->fetch = NULL;
        p->fetching = false;
        retry_arm(a, p);
    }
}

static void retry_arm(nxl_agent_t *a, nxli_peer_t *p)
{
    if (!p->retry && !(p->retry = nxli_timer_new(a, retry_cb, p))) {
        nxli_log(a, NXL_LOG_ERROR, "peer '%s': no timer for its recovery; load it again "
                 "yourself", p->name);
        return;
    }
    p->backoff_ms = !p->backoff_ms ? RETRY_FIRST_MS
                    : p->backoff_ms >= RETRY_MAX_MS / 2 ? RETRY_MAX_MS
                                                        : 2 * p->backoff_ms;
    /* jitter: between half and all of it, so that many agents that lost
     * the same peer do not ask it at the same moment */
    uint64_t x = nxli_now_us() * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)p;
    x ^= x >> 29;
    unsigned half = p->backoff_ms / 2, ms = half + (unsigned)(x % (half + 1));
    nxlt_timer_start(p->retry, (uint64_t)ms * 1000u);
}

static void recovery_stop(nxli_peer_t *p)
{
    if (p->retry)
        nxlt_timer_stop(p->retry);
    p->backoff_ms = 0;
}

void nxli_peer_origin(nxl_agent_t *a, const char *name, const char *host, uint16_t port)
{
    nxli_peer_t *p = peer_find(a, name);
    if (!p)
        return;
    if (host) {
        if (!p->host || strcmp(p->host, host)) {
            char *h = strdup(host);
            if (!h)
                return;
            free(p->host);
            p->host = h;
        }
        p->port = port;
        p->etcd = false;
    } else {
        free(p->host);
        p->host = NULL;
        p->etcd = true;
    }
}

bool nxli_peer_forget(nxl_agent_t *a, const char *name)
{
    nxli_peer_t *p = peer_find(a, name);
    if (!p || !p->down || p->app_down)
        return false;
    p->app_down = true;
    recovery_stop(p);
    if (p->fetch)
        nxl_future_cancel(p->fetch); /* its answer would load the peer again */
    nxli_log(a, NXL_LOG_INFO, "peer '%s', lost, given up (nxl_md_invalidate)", name);
    return true;
}

bool nxli_peer_lost(nxl_agent_t *a, const char *name)
{
    const nxli_peer_t *p = peer_find(a, name);
    return p && p->down && !p->app_down;
}

bool nxli_peer_awaited(nxl_agent_t *a, const char *name)
{
    const nxli_peer_t *p = peer_find(a, name);
    return p && p->down && !p->app_down && p->etcd && a->peer_recovery;
}

/* ---- the peer's states */

void nxli_peer_loaded(nxl_agent_t *a, nxli_remote_t *r, bool had_old, bool new_inc, bool changed)
{
    nxli_peer_t *p = peer_find(a, r->name);
    if (!p) {
        if (!(p = calloc(1, sizeof(*p))) || !(p->name = strdup(r->name))) {
            free(p);
            nxli_log(a, NXL_LOG_ERROR, "out of memory: peer '%s' is not followed", r->name);
            return;
        }
        p->a = a;
        p->boot = r->boot;
        p->inc = 1;
        LIST_INSERT_HEAD(&a->peers, p, link);
        emit(a, p, NXL_PEER_UP, NULL, r->nregs);
        return;
    }
    if (p->down || !had_old) {
        /* metadata without the number: a new process for all we know */
        bool fresh = (r->boot || p->boot) ? r->boot != p->boot : true;
        p->down = p->app_down = false;
        recovery_stop(p);
        if (fresh)
            p->inc++;
        p->boot = r->boot;
        emit(a, p, NXL_PEER_BACK, NULL, r->nregs);
    } else if (new_inc) {
        emit(a, p, NXL_PEER_DOWN, "replaced by a new incarnation of the agent (it restarted); "
                                  "transfers in flight to the old one failed", 0);
        p->inc++;
        p->boot = r->boot;
        emit(a, p, NXL_PEER_BACK, NULL, r->nregs);
    } else if (changed) {
        emit(a, p, NXL_PEER_CHANGED, NULL, r->nregs);
    }
}

void nxli_peer_down(nxl_agent_t *a, const char *name, const char *why, bool by_app)
{
    nxli_peer_t *p = peer_find(a, name);
    if (!p || p->down)
        return;
    p->down = true;
    p->app_down = by_app;
    emit(a, p, NXL_PEER_DOWN, why, 0);
    if (a->peer_recovery && !by_app && p->host)
        retry_arm(a, p);
}

/* ---- re-binding */

static nxl_status_t down_refused(nxl_agent_t *a, const nxli_remote_t *r, const char *call,
                                 nxl_status_t st)
{
    nxli_err(a, "%s: agent '%s' is down (lost, or invalidated): nothing was done; what was "
                "made against it is re-bound when it is loaded again (nxl_agent_on_peer(): "
                "BACK)", call, r->name);
    return st;
}

/* g, a region of an earlier incarnation, in cur: same type, device,
 * address and length */
static const nxli_rregion_t *same_region(const nxli_remote_t *cur, const nxli_rregion_t *g)
{
    const nxli_rregion_t *h = nxli_rregion_find(cur, g->type, g->dev, g->addr, g->len);
    return h && h->addr == g->addr && h->len == g->len ? h : NULL;
}

#define NOT_THERE "does not have (not registered at that address with that length)"

/* where bytes [addr, addr + len) of g, a region of an earlier incarnation,
 * are in cur: the same region, else the region with g's label at g's place
 * (same type and device) when they fit in it; NULL with the reason in how */
static const nxli_rregion_t *rebound(const nxli_remote_t *cur, const nxli_rregion_t *g,
                                     uintptr_t addr, size_t len, char *how, size_t cap)
{
    const nxli_rregion_t *h = same_region(cur, g);
    if (h)
        return h;
    if (!g->label) {
        snprintf(how, cap, NOT_THERE);
        return NULL;
    }
    h = nxli_rregion_labelled(cur, g->type, g->dev, g->label, g->label_at);
    if (!h) {
        snprintf(how, cap, "does not have, nor a region labelled '%s' at place %zu (the label "
                           "is gone, or names fewer regions now)", g->label, g->label_at);
        return NULL;
    }
    size_t off = addr - g->addr;
    if (off > h->len || len > h->len - off) {
        snprintf(how, cap, "labels '%s' at place %zu with region 0x%lx+%zu only, too short for "
                           "the element (bytes %zu to %zu of the region: it shrank)", g->label,
                 g->label_at, (unsigned long)h->addr, h->len, off, off + len);
        return NULL;
    }
    return h;
}

/* the bytes of strided run u past its base */
static size_t run_span(const nxli_srun_t *u)
{
    return (u->ocount - 1) * u->ostride + (u->count - 1) * u->stride + u->len;
}

static nxl_status_t gone_refused(nxl_agent_t *a, const char *call, const char *what, size_t i,
                                 const nxli_rregion_t *g, const nxli_remote_t *cur,
                                 const char *how)
{
    nxli_err(a, "%s: element %zu uses %s region 0x%lx+%zu (dev %llu) of agent '%s', which its "
                "current incarnation %s; the %s stays invalid (prepare and make it again from "
                "regions the agent has now)", call, i, nxl_mem_name(g->type),
             (unsigned long)g->addr, g->len, (unsigned long long)g->dev, cur->name, how, what);
    return NXL_ERR_NOT_FOUND;
}

nxl_status_t nxli_prepped_rebind(nxl_prepped_t *p, const char *call)
{
    nxl_agent_t *a = p->agent;
    nxli_remote_t *r = p->remote;
    if (!r || !r->invalid || r->self)
        return NXL_SUCCESS;
    nxli_remote_t *cur = nxli_remote_find(a, r->name);
    /* a foreign thread hands the call to the reactor, which re-binds */
    if (!cur || nxli_thread_foreign(a))
        return down_refused(a, r, call, NXL_ERR_NOT_FOUND);
    char how[NXLI_LABEL_MAX + 200];
    size_t m = p->runs ? p->nruns : p->n;
    /* every element (or run) checked first: nothing changes on failure */
    const nxli_rregion_t **nr = malloc((m + 1) * sizeof(*nr));
    uintptr_t *na = malloc((m + 1) * sizeof(*na));
    if (!nr || !na) {
        free(nr);
        free(na);
        nxli_err(a, "%s: out of memory", call);
        return NXL_ERR_UNKNOWN;
    }
    for (size_t i = 0; i < m; i++) {
        const nxli_rregion_t *g = p->runs ? p->runs[i].region : p->e[i].region;
        uintptr_t at = p->runs ? p->runs[i].base : p->e[i].addr;
        size_t len = p->runs ? run_span(&p->runs[i]) : p->e[i].len;
        const nxli_rregion_t *h = rebound(cur, g, at, len, how, sizeof(how));
        if (!h) {
            free(nr);
            free(na);
            return gone_refused(a, call, "prepared list", p->runs ? p->runs[i].first : i, g,
                                cur, how);
        }
        nr[i] = h;
        na[i] = h->addr + (at - g->addr);
    }
    bool moved = false;
    for (size_t i = 0; i < m; i++) {
        if (p->runs) {
            moved |= p->runs[i].base != na[i];
            p->runs[i].region = (void *)nr[i];
            p->runs[i].base = na[i];
        } else {
            moved |= p->e[i].addr != na[i];
            p->e[i].region = (void *)nr[i];
            p->e[i].addr = na[i];
        }
    }
    if (p->runs && p->nruns)
        p->runs[p->nruns] = p->runs[p->nruns - 1]; /* the sentinel */
    free(nr);
    free(na);
    cur->refs++;
    p->remote = cur;
    nxli_remote_put(r);
    if (moved)
        nxli_log(a, NXL_LOG_DEBUG, "a prepared list of %zu elements re-bound to agent '%s' by "
                 "label, at new addresses", p->n, cur->name);
    return NXL_SUCCESS;
}

/* the region of r that element i's key comes from (regions revoked too) */
static const nxli_rregion_t *key_region(const nxli_remote_t *r, int bi, const void *key)
{
    for (size_t k = 0; k < r->nregs; k++)
        if (r->regs[k]->rkey[bi] == key)
            return r->regs[k];
    for (size_t k = 0; k < r->ngone; k++)
        if (r->gone[k]->rkey[bi] == key)
            return r->gone[k];
    return NULL;
}

nxl_status_t nxli_xfer_rebind(nxl_xfer_t *x, const char *call)
{
    nxl_agent_t *a = x->agent;
    nxli_remote_t *r = x->remote;
    if (!r->invalid || r->self)
        return NXL_SUCCESS;
    nxli_remote_t *cur = nxli_remote_find(a, r->name);
    if (!cur || nxli_thread_foreign(a))
        return down_refused(a, r, call, NXL_ERR_REMOTE_DISCONNECT);
    int bi = x->backend->index;
    if (!cur->conn[bi]) {
        nxli_err(a, "%s: the current incarnation of agent '%s' does not connect through %s, "
                    "the transfer's transport; it stays invalid (make it again)", call,
                 cur->name, x->backend->ops->name);
        return NXL_ERR_NOT_FOUND;
    }
    char how[NXLI_LABEL_MAX + 200];
    if (x->rruns) {
        /* a strided transfer: its remote runs hold the regions, the keys
         * are taken from them at each post */
        const nxli_rregion_t **nr = malloc((x->nrruns + 1) * sizeof(*nr));
        if (!nr) {
            nxli_err(a, "%s: out of memory", call);
            return NXL_ERR_UNKNOWN;
        }
        for (size_t k = 0; k < x->nrruns; k++) {
            const nxli_srun_t *u = &x->rruns[k];
            const nxli_rregion_t *g = u->region,
                                 *h = rebound(cur, g, u->base, run_span(u), how, sizeof(how));
            if (h && !h->rkey[bi])
                snprintf(how, sizeof(how), "did not register with the transfer's transport");
            if (!h || !h->rkey[bi]) {
                free(nr);
                return gone_refused(a, call, "transfer", u->first, g, cur, how);
            }
            nr[k] = h;
        }
        for (size_t k = 0; k < x->nrruns; k++) {
            nxli_srun_t *u = &x->rruns[k];
            u->base = nr[k]->addr + (u->base - ((const nxli_rregion_t *)u->region)->addr);
            u->region = (void *)nr[k];
        }
        if (x->nrruns)
            x->rruns[x->nrruns] = x->rruns[x->nrruns - 1]; /* the sentinel */
        free(nr);
        cur->refs++;
        x->remote = cur;
        x->gone_seen = cur->ngone;
        nxli_remote_put(r);
        nxli_log(a, NXL_LOG_DEBUG, "a strided transfer of %zu elements re-bound to agent '%s'",
                 x->n, cur->name);
        return NXL_SUCCESS;
    }
    /* each element's new key and address, all checked before any changes */
    void **nk = malloc((x->n + 1) * sizeof(*nk));
    uint64_t *na = malloc((x->n + 1) * sizeof(*na));
    if (!nk || !na) {
        free(nk);
        free(na);
        nxli_err(a, "%s: out of memory", call);
        return NXL_ERR_UNKNOWN;
    }
    const void *lastk = NULL;
    const nxli_rregion_t *g = NULL, *h = NULL;
    for (size_t i = 0; i < x->n; i++) {
        const void *k = x->iov[i].rkey;
        if (i == 0 || k != lastk) {
            g = key_region(r, bi, k);
            if (!g) {
                free(nk);
                free(na);
                nxli_err(a, "%s: element %zu: its region of agent '%s' is not known any more; "
                            "the transfer stays invalid (make it again)", call, i, r->name);
                return NXL_ERR_NOT_FOUND;
            }
            lastk = k;
            h = NULL;
        }
        uint64_t ra = x->iov[i].raddr;
        const nxli_rregion_t *hi = h && h->addr == g->addr && h->len == g->len
                                       ? h /* the same region: every element fits */
                                   : rebound(cur, g, (uintptr_t)ra, x->iov[i].len, how,
                                             sizeof(how));
        if (hi && !hi->rkey[bi])
            snprintf(how, sizeof(how), "did not register with the transfer's transport");
        if (!hi || !hi->rkey[bi]) {
            free(nk);
            free(na);
            return gone_refused(a, call, "transfer", i, g, cur, how);
        }
        h = hi;
        nk[i] = h->rkey[bi];
        na[i] = h->addr + (ra - g->addr);
    }
    bool moved = false;
    for (size_t i = 0; i < x->n; i++) {
        moved |= x->iov[i].raddr != na[i];
        x->iov[i].rkey = nk[i];
        x->iov[i].raddr = na[i];
    }
    free(nk);
    free(na);
    cur->refs++;
    x->remote = cur;
    x->gone_seen = cur->ngone;
    nxli_remote_put(r);
    nxli_log(a, NXL_LOG_DEBUG, "a transfer of %zu elements re-bound to agent '%s'%s", x->n,
             cur->name, moved ? " by label, at new addresses" : "");
    return NXL_SUCCESS;
}
