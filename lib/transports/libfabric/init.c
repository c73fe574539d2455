/* SPDX-License-Identifier: BSD-3-Clause */
/* LIBFABRIC: create, quiesce, destroy, the parameter and ops tables */
#include "lf.h"
#include "../common/pstr.h"

static void destroy(void *state);

static nxl_status_t fail(lf_t *u, const char *call, int r, const char *try)
{
    nxlt_error(u->ctx, "LIBFABRIC: %s failed on provider %s (fabric %s, domain %s): %s; %s", call,
               u->prov, u->info ? u->info->fabric_attr->name : "?",
               u->info ? u->info->domain_attr->name : "?", fi_strerror(r < 0 ? -r : r), try);
    destroy(u);
    return NXL_ERR_BACKEND;
}

/* the indices of 'progress' and 'delivery_complete' in their lists */
enum { PM_AUTO, PM_FD, PM_TIMER };
enum { DC_AUTO, DC_YES, DC_NO };

/* what create() was given */
typedef struct lf_opts {
    const char *prov, *domain, *iface;
    uint64_t stall_ms;
    uint64_t poll_max_ms; /* 0: not given */
    uint64_t am_max;
    bool am_given;
    int pm, dcm;
    int thp;              /* thp_collapse: NXLT_THP_* */
} lf_opts_t;

static nxl_status_t opts_read(nxlt_ctx_t *ctx, const nxl_param_t *params, size_t n,
                              lf_opts_t *o)
{
    static const char *const modes[] = {"auto", "fd", "timer", NULL};
    static const char *const dcs[] = {"auto", "yes", "no", NULL};
    *o = (lf_opts_t){.stall_ms = 10000, .am_max = AMW_DEFAULT, .pm = PM_AUTO, .dcm = DC_AUTO,
                      .thp = NXLT_THP_AUTO};
    o->prov = nxlt_param(params, n, "provider");
    o->domain = nxlt_param(params, n, "domain");
    o->iface = nxlt_param(params, n, "iface");
    o->am_given = nxlt_param(params, n, "am_write_max") != NULL;
    nxl_status_t st;
    if ((st = nxlt_param_duration(ctx, params, n, "stall_timeout", 0, UINT64_MAX / 1000,
                                  &o->stall_ms)) != NXL_SUCCESS ||
        (st = nxlt_param_duration(ctx, params, n, "poll_max", 1, UINT64_MAX / 1000,
                                  &o->poll_max_ms)) != NXL_SUCCESS ||
        (st = nxlt_param_choice(ctx, params, n, "progress", modes, &o->pm)) != NXL_SUCCESS ||
        (st = nxlt_param_size(ctx, params, n, "am_write_max", 0, AMW_MAX, &o->am_max)) !=
            NXL_SUCCESS ||
        (st = nxlt_param_choice(ctx, params, n, "delivery_complete", dcs, &o->dcm)) !=
            NXL_SUCCESS ||
        (st = nxlt_thp_param(ctx, params, n, &o->thp)) != NXL_SUCCESS)
        return st;
    if (o->prov && !*o->prov)
        o->prov = NULL;
    return NXL_SUCCESS;
}

/* The agent's state for the provider entry @p fi (taken), before anything
 * is opened; NULL when out of memory. */
static lf_t *state_new(nxlt_ctx_t *ctx, const lf_opts_t *o, struct fi_info *fi, bool dc)
{
    lf_t *u = calloc(1, sizeof(*u));
    if (!u)
        return NULL;
    u->ctx = ctx;
    u->wait_fd = -1;
    u->bell_fd = -1;
    u->net.stall_us = o->stall_ms * 1000;
    u->poll_max_us = (o->poll_max_ms ? o->poll_max_ms : POLL_MAX_MS) * 1000;
    u->poll_us = POLL_MIN_US;
    u->am_write_max = (size_t)o->am_max;
    /* shm sends a message above its inject size (4 KiB) by another path,
     * slower for this than a CMA write and a small message: by default a
     * one-message WRITE there fits in an inject (nxl-libfabric(7)) */
    u->amw_msg_max = RXSZ;
    if (!o->am_given && !strcmp(fi->fabric_attr->prov_name, "shm") && fi->tx_attr->inject_size)
        u->amw_msg_max = fi->tx_attr->inject_size;
    /* shm writes one-sided (CMA) and completes them once written, unless
     * asked for delivery completion, which sends the write through the
     * target's command queue instead: not by default there */
    u->dc = dc && !(o->dcm == DC_AUTO && !strcmp(fi->fabric_attr->prov_name, "shm"));
    LIST_INIT(&u->ops);
    LIST_INIT(&u->conns);
    LIST_INIT(&u->addrs);
    LIST_INIT(&u->holds);
    TAILQ_INIT(&u->waitq);
    TAILQ_INIT(&u->checkq);
    u->info = fi;
    snprintf(u->prov, sizeof(u->prov), "%s", fi->fabric_attr->prov_name);
    u->hold_us = nxl_lf_rxm_hold_us(u->prov);
    u->abort_shut = !strcmp(u->prov, "sockets");
    /* thp_collapse=auto: on shm, whose large messages and RMA go by
     * cross-memory attach (the kernel pins each page of both sides) */
    u->thp = o->thp == NXLT_THP_AUTO && strcmp(u->prov, "shm") ? NXLT_THP_OFF : o->thp;
    u->can_abort = (strstr(u->prov, "ofi_rxm") && nxl_lf_av_remove_cleanup()) || u->abort_shut;
    u->addr_format = fi->addr_format;
    uint64_t mm = (uint64_t)fi->domain_attr->mr_mode;
    u->mr_local = mm & FI_MR_LOCAL;
    u->mr_virt = mm & FI_MR_VIRT_ADDR;
    u->mr_prov_key = mm & FI_MR_PROV_KEY;
    u->mr_endpoint = mm & FI_MR_ENDPOINT;
    u->max_msg = fi->ep_attr->max_msg_size ? fi->ep_attr->max_msg_size : (1ull << 30);
    if (u->max_msg > (1ull << 30))
        u->max_msg = 1ull << 30;
    u->tx_cap = fi->tx_attr->size ? fi->tx_attr->size : 256;
    return u;
}

/* fabric, domain and address vector of u->info; on failure @p u is
 * destroyed (fail), the sentence ending in @p fabric_try for fi_fabric */
static nxl_status_t domain_open(lf_t *u, struct fi_av_attr *aa, const char *fabric_try)
{
    struct fi_info *fi = u->info;
    int r;
    if ((r = fi_fabric(fi->fabric_attr, &u->fids.fabric, NULL)))
        return fail(u, "fi_fabric", r, fabric_try);
    if ((r = fi_domain(u->fids.fabric, fi, &u->fids.domain, NULL)))
        return fail(u, "fi_domain", r, "try another 'domain' or 'iface'");
    if ((r = fi_av_open(u->fids.domain, aa, &u->fids.av, NULL)))
        return fail(u, "fi_av_open", r, "the provider refused an address vector");
    return NXL_SUCCESS;
}

/* From a timer, an agent learns that peers write into its memory (shm
 * needs the target's progress for that) by a counter of remote RMA events:
 * take an entry with FI_RMA_EVENT if there is, and open its fabric, domain
 * and address vector instead. */
static nxl_status_t rma_event_repick(lf_t *u, struct fi_av_attr *aa)
{
    struct fi_info *fi = u->info, *h, *ev = NULL;
    if ((fi->caps & FI_RMA_EVENT) || !(h = nxl_lf_base_hints(u->prov, fi->domain_attr->name)))
        return NXL_SUCCESS;
    h->caps |= FI_RMA_EVENT;
    h->tx_attr->op_flags = fi->tx_attr->op_flags;
    free(h->fabric_attr->name);
    h->fabric_attr->name = strdup(fi->fabric_attr->name);
    bool found = !fi_getinfo(LF_API_VERSION, NULL, NULL, 0, h, &ev) && ev &&
                 !strcmp(ev->fabric_attr->prov_name, u->prov);
    fi_freeinfo(h);
    if (!found) {
        if (ev)
            fi_freeinfo(ev);
        return NXL_SUCCESS;
    }
    fi_close(&u->fids.av->fid);
    fi_close(&u->fids.domain->fid);
    fi_close(&u->fids.fabric->fid);
    u->fids.av = NULL;
    u->fids.domain = NULL;
    u->fids.fabric = NULL;
    fi_freeinfo(u->info);
    u->info = fi_dupinfo(ev);
    fi_freeinfo(ev);
    if (!u->info)
        return fail(u, "fi_dupinfo", -FI_ENOMEM, "out of memory");
    return domain_open(u, aa, "check the provider's installation");
}

/* The CQ: with a wait fd for the reactor, unless told otherwise (@p pm) or
 * the provider has none; then a timer progresses it (wait_fd -1). */
static nxl_status_t cq_open(lf_t *u, struct fi_av_attr *aa, int pm)
{
    bool want_timer = pm == PM_TIMER;
    if (pm == PM_AUTO && !strcmp(u->prov, "net")) {
        want_timer = true;
        u->mode_why = "provider net's wait fd never stops being readable";
    }
    size_t cq_size = u->tx_cap + NRX + 64;
    struct fi_cq_attr ca = {.size = cq_size, .format = FI_CQ_FORMAT_MSG,
                            .wait_obj = want_timer ? FI_WAIT_NONE : FI_WAIT_FD};
    int r = want_timer ? 1 : fi_cq_open(u->fids.domain, &ca, &u->fids.cq, NULL);
    if (r == 0) {
        int fd = -1;
        int cr = fi_control(&u->fids.cq->fid, FI_GETWAIT, &fd);
        if (cr == 0 && fd >= 0) {
            u->wait_fd = fd;
        } else {
            fi_close(&u->fids.cq->fid);
            u->fids.cq = NULL;
            r = cr ? cr : -FI_ENOSYS;
        }
    }
    if (r) {
        if (pm == PM_FD)
            return fail(u, "fi_cq_open with FI_WAIT_FD", r,
                        "this provider has no wait fd: use progress=timer (or auto)");
        if (!u->mode_why)
            u->mode_why = want_timer ? "asked for" : "the provider gives its CQ no wait fd";
        nxl_status_t st = rma_event_repick(u, aa);
        if (st != NXL_SUCCESS)
            return st;
        ca.wait_obj = FI_WAIT_NONE;
        r = fi_cq_open(u->fids.domain, &ca, &u->fids.cq, NULL);
        if (!r && (u->info->caps & FI_RMA_EVENT)) {
            struct fi_cntr_attr cta = {.events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_NONE};
            if (fi_cntr_open(u->fids.domain, &cta, &u->fids.rma_cntr, NULL))
                u->fids.rma_cntr = NULL;
        }
    }
    if (r)
        return fail(u, "fi_cq_open", r, "the provider refused a completion queue");
    return NXL_SUCCESS;
}

/* the endpoint, bound, enabled and named */
static nxl_status_t ep_open(lf_t *u)
{
    struct fi_info *fi = u->info;
    int r;
    /* writes ask for delivery completion one by one; sends need not */
    fi->tx_attr->op_flags = 0;
    if ((r = fi_endpoint(u->fids.domain, fi, &u->fids.ep, NULL)))
        return fail(u, "fi_endpoint", r, "the provider refused an RDM endpoint");
    if ((r = fi_ep_bind(u->fids.ep, &u->fids.av->fid, 0)) ||
        (r = fi_ep_bind(u->fids.ep, &u->fids.cq->fid, FI_TRANSMIT | FI_RECV)))
        return fail(u, "fi_ep_bind", r, "the provider refused to bind its endpoint");
    if (u->fids.rma_cntr &&
        fi_ep_bind(u->fids.ep, &u->fids.rma_cntr->fid, FI_REMOTE_WRITE | FI_REMOTE_READ)) {
        fi_close(&u->fids.rma_cntr->fid);
        u->fids.rma_cntr = NULL;
    }
    if (!strcmp(u->prov, "shm"))
        nxl_lf_shm_clear_stale(u);
    if ((r = fi_enable(u->fids.ep)))
        return fail(u, "fi_enable", r, "the endpoint could not start (address in use?)");
    u->name_len = sizeof(u->name);
    if ((r = fi_getname(&u->fids.ep->fid, u->name, &u->name_len)))
        return fail(u, "fi_getname", r, "the endpoint has no address");
    if (!strcmp(u->prov, "shm") && !nxl_lf_shm_register(u)) {
        nxlt_error(u->ctx, "LIBFABRIC: out of memory");
        destroy(u);
        return NXL_ERR_UNKNOWN;
    }
    return NXL_SUCCESS;
}

/* the loop's watches and timers: the CQ's fd or the doorbell, the timers */
static nxl_status_t events_start(lf_t *u, bool poll_max_given)
{
    nxlt_on_deadline(u->ctx, nxl_lf_on_deadline); /* aborts (conn.c) */
    u->tm_kick = nxlt_timer_new(u->ctx, nxl_lf_on_kick, u);
    u->tm_watch = nxlt_timer_new(u->ctx, nxl_lf_on_watch, u);
    u->tm_poll = nxlt_timer_new(u->ctx, nxl_lf_on_poll, u);
    u->tm_retry = nxlt_timer_new(u->ctx, nxl_lf_on_retry, u);
    if (u->wait_fd >= 0)
        u->io_fd = nxlt_io_new(u->ctx, u->wait_fd, nxl_lf_on_fd, u);
    if (!u->tm_kick || !u->tm_watch || !u->tm_poll || !u->tm_retry ||
        (u->wait_fd >= 0 && (!u->io_fd || nxlt_io_start(u->io_fd, NXLT_IO_READ)))) {
        nxlt_error(u->ctx, "LIBFABRIC: setting up the completion queue in the reactor failed");
        destroy(u);
        return NXL_ERR_BACKEND;
    }
    if (u->wait_fd < 0) {
        nxl_lf_bell_open(u);
        if (u->bell_fd >= 0 && !poll_max_given)
            u->poll_max_us = (uint64_t)POLL_MAX_BELL_MS * 1000;
    }
    nxl_lf_kick(u);
    return NXL_SUCCESS;
}

/* describe()'s line and the log line of what was chosen; @p mm: the MR
 * mode of the entry first picked */
static void announce(lf_t *u, uint64_t mm)
{
    struct fi_info *fi = u->info;
    uint32_t ver = fi_version();
    char mrs[160];
    nxl_lf_mr_mode_str(mm, mrs, sizeof(mrs));
    snprintf(u->desc, sizeof(u->desc), "libfabric %u.%u: provider %s, fabric %s, domain %s, %s",
             FI_MAJOR(ver), FI_MINOR(ver), u->prov, fi->fabric_attr->name, fi->domain_attr->name,
             u->wait_fd >= 0 ? "progress on the CQ wait fd" : "progress from a timer");
    nxlt_log(u->ctx, NXL_LOG_INFO, "LIBFABRIC: libfabric %u.%u, provider %s, fabric %s, domain "
             "%s; MR mode: %s; writes complete %s; progress: %s%s%s; stall timeout %llu ms; "
             "one-message WRITE + notification up to %zu B (messages up to %zu B)",
             FI_MAJOR(ver), FI_MINOR(ver), u->prov, fi->fabric_attr->name,
             fi->domain_attr->name, mrs,
             u->dc ? "on delivery (FI_DELIVERY_COMPLETE)"
                   : !strcmp(u->prov, "shm") ? "once written (shm's one-sided CMA path)"
                                             : "on the provider's default (transmit)",
             u->wait_fd >= 0 ? "the CQ's wait fd in the reactor, fi_trywait before sleeping"
                             : u->bell_fd >= 0
                                   ? "a reactor timer, backing off to poll_max while idle, "
                                     "and a doorbell peers ring"
                                   : "a reactor timer, backing off to poll_max while idle",
             u->mode_why ? " — " : "", u->mode_why ? u->mode_why : "",
             (unsigned long long)(u->net.stall_us / 1000), u->am_write_max, u->amw_msg_max);
}

static nxl_status_t create(nxlt_ctx_t *ctx, const nxl_param_t *params, size_t n, void **out)
{
    if (!nxl_lf_loaded()) {
        nxlt_error(ctx, "LIBFABRIC: libfabric could not be loaded (%s); install it (apt-get "
                   "install libfabric1) or rebuild with --with-libfabric=PATH", nxl_lf_sym.why);
        return NXL_ERR_BACKEND;
    }
    lf_opts_t o;
    nxl_status_t st = opts_read(ctx, params, n, &o);
    if (st != NXL_SUCCESS)
        return st;
    struct fi_info *fi;
    bool dc;
    st = nxl_lf_pick(ctx, o.prov, o.domain, o.iface, o.dcm == DC_NO, &fi, &dc);
    if (st != NXL_SUCCESS)
        return st;
    lf_t *u = state_new(ctx, &o, fi, dc);
    if (!u) {
        fi_freeinfo(fi);
        return NXL_ERR_UNKNOWN;
    }
    uint64_t mm = (uint64_t)fi->domain_attr->mr_mode;
    if (mm & FI_MR_RAW) {
        nxlt_error(ctx, "LIBFABRIC: provider %s needs raw memory keys (FI_MR_RAW), which nxl does "
                   "not support yet; choose another provider", u->prov);
        destroy(u);
        return NXL_ERR_NOT_SUPPORTED;
    }
    struct fi_av_attr aa = {.type = fi->domain_attr->av_type == FI_AV_UNSPEC
                                        ? FI_AV_TABLE
                                        : fi->domain_attr->av_type};
    /* each step destroys u when it fails */
    if ((st = domain_open(u, &aa, "check the provider's installation ('fi_info -v')")) !=
            NXL_SUCCESS ||
        (st = cq_open(u, &aa, o.pm)) != NXL_SUCCESS || (st = ep_open(u)) != NXL_SUCCESS)
        return st;
    if ((st = nxl_lf_rx_start(u)) != NXL_SUCCESS) {
        destroy(u);
        return st;
    }
    if ((st = events_start(u, o.poll_max_ms != 0)) != NXL_SUCCESS)
        return st;
    announce(u, mm);
    if ((st = nxl_lf_rails_open(u, params, n)) != NXL_SUCCESS) {
        destroy(u);
        return st;
    }
    *out = u;
    return NXL_SUCCESS;
}

/* Does the provider still hold operations to peers that may answer? */
static bool holds_live_ops(lf_t *u)
{
    lf_op_t *o;
    LIST_FOREACH(o, &u->ops, link)
    if (o->posted != o->completed && !o->conn->failed)
        return true;
    return false;
}

/* Closes the endpoint: the provider stops using application memory, and
 * every op not reported yet is reported CANCELED. Operations the provider
 * holds are waited for first, a bounded time (rxm crashed closing an
 * endpoint with RMA in flight): nothing more is posted meanwhile. */
static void quiesce(void *state)
{
    lf_t *u = state;
    lf_op_t *o;
    if (u->fids.ep && !u->ep_closed) {
        u->quiescing = true;
        LIST_FOREACH(o, &u->ops, link)
        o->stopped = true;
        while ((o = TAILQ_FIRST(&u->waitq))) {
            TAILQ_REMOVE(&u->waitq, o, wlink);
            o->queued = false;
        }
        uint64_t until = nxlt_now_us() + DESTROY_WAIT_MS * 1000ull;
        while (holds_live_ops(u) && nxlt_now_us() < until) {
            bool more;
            if (nxl_lf_drain(u, &more))
                continue;
            struct fid *f = &u->fids.cq->fid;
            if (u->wait_fd >= 0 && fi_trywait(u->fids.fabric, &f, 1) == 0) {
                struct pollfd pf = {.fd = u->wait_fd, .events = POLLIN};
                poll(&pf, 1, 10);
            } else {
                usleep(50);
            }
        }
        if (holds_live_ops(u))
            nxlt_log(u->ctx, NXL_LOG_WARN, "LIBFABRIC: operations still in flight after %d ms at "
                     "teardown (a peer that does not answer); closing the endpoint under them",
                     DESTROY_WAIT_MS);
    }
    nxl_lf_rails_quiesce(u); /* the rails' endpoints closed, their pieces gone */
    LIST_FOREACH(o, &u->ops, link)
    if (o->op) {
        o->stopped = true;
        nxl_lf_op_report(o, NXL_ERR_CANCELED, "LIBFABRIC: the agent is being destroyed");
    }
    /* an shm endpoint is closed (or retired) in destroy: shm_unregister */
    if (u->fids.ep && !u->ep_closed && !u->shm_ep) {
        fi_close(&u->fids.ep->fid);
        u->fids.ep = NULL;
    }
    u->ep_closed = true;
}

static void destroy(void *state)
{
    lf_t *u = state;
    quiesce(u);
    if (u->thp_state) {
        char thp[256];
        nxlt_thp_stop(&u->thp_state, thp, sizeof(thp));
        nxlt_log(u->ctx, NXL_LOG_DEBUG, "LIBFABRIC: registered DRAM onto 2 MiB pages: %s", thp);
    }
    lf_shm_list_t reap = LIST_HEAD_INITIALIZER(reap);
    if (u->shm_ep && !nxl_lf_shm_unregister(u, &reap) && u->fids.ep) {
        fi_close(&u->fids.ep->fid);
        u->fids.ep = NULL;
    }
    nxlt_io_free(u->io_fd);
    nxlt_timer_free(u->tm_kick);
    nxlt_timer_free(u->tm_watch);
    nxlt_timer_free(u->tm_poll);
    nxlt_io_free(u->io_bell);
    if (u->bell_fd >= 0)
        close(u->bell_fd);
    nxlt_timer_free(u->tm_retry);
    nxl_lf_rails_destroy(u);
    while (!LIST_EMPTY(&u->ops)) {
        lf_op_t *o = LIST_FIRST(&u->ops);
        o->completed = o->posted;
        nxl_lf_op_free(o);
    }
    /* connections the engine still holds are freed with it (unload_conn
     * already ran for every remote at teardown) */
    while (!LIST_EMPTY(&u->conns)) {
        lf_conn_t *c = LIST_FIRST(&u->conns);
        nxl_lf_probe_end(c);
        nxl_lf_shm_watch_end(c);
        LIST_REMOVE(c, link);
        free(c->name);
        free(c->why);
        free(c);
    }
    while (!LIST_EMPTY(&u->addrs)) {
        lf_addr_t *e = LIST_FIRST(&u->addrs);
        LIST_REMOVE(e, link);
        free(e);
    }
    while (!LIST_EMPTY(&u->holds)) {
        lf_hold_t *h = LIST_FIRST(&u->holds);
        LIST_REMOVE(h, link);
        free(h);
    }
    /* the endpoint is closed (or retired) above: fids.ep is NULL */
    nxl_lf_close_fids(&u->fids);
    if (u->info)
        fi_freeinfo(u->info);
    free(u->rxmem);
    free(u);
    nxl_lf_shm_close_retired(&reap);
}

static const char *describe(void *state)
{
    return ((lf_t *)state)->desc;
}

/* What create() takes: the engine refuses other keys, nxl_info -v lists
 * these (keep them with opts_read) */
static const nxl_param_info_t lf_params[] = {
    {"provider", NULL, "libfabric provider (\"tcp;ofi_rxm\" when present, \"shm\", \"sockets\", "
     "\"verbs;ofi_rxm\", \"efa\"); FI_PROVIDER too"},
    {"domain", NULL, "a domain by name (lo, eth0 for the TCP providers; a device for RDMA ones)"},
    {"iface", NULL, "a network interface: the domain named after it, or whose source address is "
     "one of its addresses"},
    {"stall_timeout", "10s", "give a peer up when none of its operations completed for this long "
     "(\"500ms\", \"0\" never)"},
    {"progress", "auto", "auto (the CQ's wait fd where it works, else a timer), fd, timer"},
    {"poll_max", NULL, "timer progress: longest idle sleep (1s with the doorbell, else 250ms)"},
    {"delivery_complete", "auto", "auto (yes where offered, except shm), yes, no"},
    {"am_write_max", PSTR(AMW_DEFAULT), "WRITEs with a notification up to this many bytes (and "
     "64 elements) go as one message (on shm, when not given, also within its inject size; "
     "\"0\" off)"},
    {"rails", NULL, "network interfaces (\"eth0,eth1\", 2 to " PSTR(LF_RAILS_MAX) "): an "
     "endpoint of the provider on each; large transfers to a peer with rails are striped over "
     "them, weighted by each one's measured throughput, and a rail that fails is taken out"},
    {"rail_min", "262144", "transfers of at least this many bytes are striped over the rails"},
    {"thp_collapse", "auto", "registered DRAM regions onto 2 MiB pages in place (MADV_COLLAPSE): "
     "auto (on shm, in the background), background, sync (before the registration returns), "
     "off"},
};

NXLT_MODULE_EXPORT const nxlt_ops_t nxlt_libfabric_ops = {
    NXLT_OPS_HEAD("LIBFABRIC", 1u << NXL_DRAM,
                  NXLT_CAP_REMOTE | NXLT_CAP_LOCAL | NXLT_CAP_NOTIF | NXLT_CAP_CANCEL_WAITS |
                      NXLT_CAP_ANY_THREAD,
                  lf_params),
    .probe = nxl_lf_probe,
    .create = create,
    .destroy = destroy,
    .reg = nxl_lf_reg,
    .dereg = nxl_lf_dereg,
    .pack_key = nxl_lf_pack_key,
    .conn_info = nxl_lf_conn_info,
    .load_conn = nxl_lf_load_conn,
    .load_key = nxl_lf_load_key,
    .unload_key = nxl_lf_unload_key,
    .unload_conn = nxl_lf_unload_conn,
    .post = nxl_lf_post,
    .notif_send = nxl_lf_notif_send,
    .describe = describe,
    .quiesce = quiesce,
    .revoke = nxl_lf_revoke,
};
