/* SPDX-License-Identifier: BSD-3-Clause */
#include "config.h"
#include "ucx.h"
#include "../common/pstr.h"

/* off unless asked for: the acknowledgement needs UCX's reply endpoint (am.c) */
#define AM_WRITE_MAX_DEFAULT 4096
#define AM_READ_MAX_DEFAULT 4096
#define POLLED_MAX_DEFAULT 4096 /* am.c, "a peer that polls" */
#define POLLED_SLOW_DEFAULT 10 /* ... its answers' average time (us) that sends them back */
#define SHM_FIFO_DEFAULT "256" /* elements of UCX's shared-memory receive FIFO (UCX: 64) */
#define DESTROY_WAIT_MS 2000 /* destroy: longest wait for UCX to return its requests */
#define CMA_CHUNK_DEFAULT (1u << 20) /* bytes a system call copies at most */
#define CMA_SPLIT_DEFAULT (512u << 10) /* calls of this many bytes share the copy (cmasplit.c) */
/* UCX's keepalive: each interval UCX checks its endpoints (over shared
 * memory it reads the peer's /proc/PID/stat and wakes it), one wake-up of
 * this process and one of each peer's. Peers on this host are watched by
 * their pidfd (cma.c), TCP peers' deaths reset their sockets: the keepalive
 * is left to notice an idle peer lost otherwise. 10 s: 0.4 wake-ups a
 * second idle with one peer (1 s: 2.4-2.8) */
#define KEEPALIVE_DEFAULT "10s"

/* ------------------------------------------------------------ life */

static void list_tls(ucx_t *u)
{
    char *buf = NULL;
    size_t bl = 0;
    FILE *f = open_memstream(&buf, &bl);
    if (!f)
        return;
    ucp_context_print_info(u->ucp, f);
    fclose(f);
    char *save, *line;
    size_t o = 0;
    u->desc[0] = 0;
    for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *p = strstr(line, "resource");
        char *t = strstr(line, "flags ");
        if (!p || !t)
            continue;
        t = strrchr(t, ' ');
        if (t && o < sizeof(u->desc) - 1)
            o += (size_t)snprintf(u->desc + o, sizeof(u->desc) - o, "%s%s", o ? ", " : "",
                                  t + 1);
    }
    free(buf);
}

#ifdef NXL_UCX_CUDA
#define UCX_MEM_MASK ((1u << NXL_DRAM) | (1u << NXL_VRAM))
#define UCX_CUDA_BUILD "built against a UCX with CUDA: VRAM too where its CUDA transports load"
#else
#define UCX_MEM_MASK (1u << NXL_DRAM)
#define UCX_CUDA_BUILD "built against a UCX without CUDA: VRAM goes through the CUDA transport"
#endif

static int probe(char *why, size_t cap)
{
    snprintf(why, cap, "UCX %s: DRAM, remote and loopback, notifications; %s",
             ucp_get_version_string(), UCX_CUDA_BUILD);
    return 1;
}

/* does this UCX, as loaded, move CUDA memory? (its memory types) */
static void query_cuda(ucx_t *u)
{
    ucp_context_attr_t at = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};
    u->cuda = false;
#ifdef NXL_UCX_CUDA
    if (ucp_context_query(u->ucp, &at) == UCS_OK)
        u->cuda = (at.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
#endif
    size_t l = strlen(u->desc);
    snprintf(u->desc + l, sizeof(u->desc) - l, "%sVRAM %s", l ? "; " : "",
             u->cuda ? "too (UCX has CUDA)"
#ifdef NXL_UCX_CUDA
                     : "no (this UCX has CUDA, but its CUDA memory type is not loaded here)"
#else
                     : "no (this UCX has no CUDA)"
#endif
    );
    (void)at;
}

static void destroy(void *state);

/* whether a UCX_TLS-style list tl (NULL: all) asks for any of the
 * transports named in in[]: a list naming them or "all" does; one that
 * leaves transports out ("^...") does unless it names one of out[] (the
 * aliases that take all of them away). By substring, as UCX's own aliases
 * ("sm", "shm") cover the transports' names. */
static bool tls_asks(const char *tl, const char *const in[], const char *const out[])
{
    if (!tl)
        return true;
    bool neg = tl[0] == '^';
    for (const char *const *w = neg ? out : in; *w; w++)
        if (strstr(tl, *w))
            return !neg;
    return neg || strstr(tl, "all");
}

/* The parameters UCX reads from the environment: shared memory's error
 * handling and receive FIFO. *tl: the UCX transports asked for (the tls
 * parameter, else UCX_TLS, else NULL: all). */
static nxl_status_t params_shm(nxlt_ctx_t *ctx, const nxl_param_t *params, size_t n,
                               const char **tl_out)
{
    /* Peer error handling is on for every endpoint; UCX then refuses its
     * shared-memory transports unless they handle errors too. */
    const char *seh = nxlt_param(params, n, "shm_error_handling");
    const char *tl = nxlt_param(params, n, "tls");
    if (!tl)
        tl = getenv("UCX_TLS");
    *tl_out = tl;
    static const char *const shm_in[] = {"sm", "shm", "mm", "posix", "sysv", NULL};
    static const char *const shm_out[] = {"sm", "shm", NULL};
    bool shm = tls_asks(tl, shm_in, shm_out);
    if (shm && (!seh || !strcmp(seh, "y") || !strcmp(seh, "yes") || !strcmp(seh, "1"))) {
        setenv("UCX_POSIX_ERROR_HANDLING", "y", 0);
        setenv("UCX_SYSV_ERROR_HANDLING", "y", 0);
    }
    /* UCX never destroys its shared-memory endpoint to a peer that died
     * with that peer's receive FIFO full: the flush that discarding it
     * needs ignores UCT_FLUSH_FLAG_CANCEL and waits for room a dead reader
     * never makes. The endpoint then keeps the peer's segments mapped
     * (resident memory) and UCP's requests on it, for the life of the
     * worker. UCX's FIFO of 64 elements was full in the soak's traffic (16
     * transfers in flight), and with targets replaced every 2 s the new
     * ones stalled after about ten; with 256 or 1024 neither happened.
     * 256 is the default (as a default: UCX_POSIX_FIFO_SIZE and
     * UCX_SYSV_FIFO_SIZE already set in the environment are left alone):
     * with 1024, UCX 1.13 aborts ("Shared memory error" in its GET request
     * handler) when an agent of the same process is destroyed with READs
     * in flight to it (check_ucx destroy_inflight). Both ends must use the
     * same size: UCX maps a peer's FIFO with its own. */
    const char *fifo = nxlt_param(params, n, "shm_fifo_size");
    if (!fifo && shm) {
        setenv("UCX_POSIX_FIFO_SIZE", SHM_FIFO_DEFAULT, 0);
        setenv("UCX_SYSV_FIFO_SIZE", SHM_FIFO_DEFAULT, 0);
    } else if (fifo && strcmp(fifo, "ucx")) {
        uint64_t v = 0;
        nxl_status_t ns = nxlt_param_uint(ctx, params, n, "shm_fifo_size", 2, 65536, &v);
        if (ns != NXL_SUCCESS)
            return ns;
        if (v & (v - 1)) {
            nxlt_error(ctx, "UCX: shm_fifo_size=%s: a power of two from 2 to 65536 (or \"ucx\" "
                       "for UCX's own default)", fifo);
            return NXL_ERR_INVALID_PARAM;
        }
        char vs[24];
        snprintf(vs, sizeof(vs), "%llu", (unsigned long long)v);
        if (shm) {
            setenv("UCX_POSIX_FIFO_SIZE", vs, 1);
            setenv("UCX_SYSV_FIFO_SIZE", vs, 1);
        }
    }
    return NXL_SUCCESS;
}

/* The transport's own parameters, into u; tl as params_shm found it */
static nxl_status_t params_read(ucx_t *u, const nxl_param_t *params, size_t n, const char *tl)
{
    static const char *const cma_words[] = {"auto", "on", "off", "y", "yes", "1", "n", "no", "0",
                                            NULL};
    static const int cma_modes[] = {CMA_AUTO, CMA_ON,  CMA_OFF, CMA_ON, CMA_ON,
                                    CMA_ON,   CMA_OFF, CMA_OFF, CMA_OFF};
    nxlt_ctx_t *ctx = u->ctx;
    uint64_t stall_ms = 10000, am_max = AM_WRITE_MAX_DEFAULT, am_rmax = AM_READ_MAX_DEFAULT,
             polled = POLLED_MAX_DEFAULT, polled_slow = POLLED_SLOW_DEFAULT,
             chunk = CMA_CHUNK_DEFAULT, cmax = 0,
             split = CMA_SPLIT_DEFAULT;
    int cma = 0, thp = NXLT_THP_AUTO;
    nxl_status_t ns = nxlt_param_duration(ctx, params, n, "stall_timeout", 0, UINT64_MAX,
                                          &stall_ms);
    if (ns == NXL_SUCCESS)
        ns = nxlt_param_uint(ctx, params, n, "am_write_max", 0, 1u << 20, &am_max);
    if (ns == NXL_SUCCESS)
        ns = nxlt_param_uint(ctx, params, n, "am_read_max", 0, 1u << 20, &am_rmax);
    if (ns == NXL_SUCCESS)
        ns = nxlt_param_uint(ctx, params, n, "polled_max", 0, 1u << 20, &polled);
    if (ns == NXL_SUCCESS)
        ns = nxlt_param_uint(ctx, params, n, "polled_slow", 0, 1000000, &polled_slow);
    if (ns == NXL_SUCCESS)
        ns = nxlt_param_choice(ctx, params, n, "cma", cma_words, &cma);
    if (ns == NXL_SUCCESS)
        ns = nxlt_param_uint(ctx, params, n, "cma_chunk", 1, 1u << 30, &chunk);
    if (ns == NXL_SUCCESS)
        ns = nxlt_param_uint(ctx, params, n, "cma_max", 0, UINT64_MAX, &cmax);
    if (ns == NXL_SUCCESS)
        ns = nxlt_param_uint(ctx, params, n, "cma_split", 0, 1u << 30, &split);
    if (ns == NXL_SUCCESS)
        ns = nxlt_thp_param(ctx, params, n, &thp);
    if (ns != NXL_SUCCESS)
        return ns;
    u->thp = thp;
    u->thp_alloc = thp; /* as given: with or without cross-memory attach */
    if (thp != NXLT_THP_OFF)
        u->huge_unit = nxl_ucx_huge_unit(); /* not a read of /proc at each nxl_mem_alloc() */
    u->net.stall_us = stall_ms > UINT64_MAX / 1000 ? UINT64_MAX : stall_ms * 1000;
    u->am_write_max = (size_t)am_max;
    u->am_read_max = (size_t)am_rmax;
    u->polled_max = (size_t)polled;
    u->polled_slow_us = (unsigned)polled_slow;
    u->cma_mode = cma_modes[cma];
    u->cma_chunk = (size_t)chunk;
    u->cma_max = (size_t)cmax;
    u->cma_split = (size_t)split;
    /* cma=auto follows the UCX transports asked for: with shared memory
     * left out (tls=tcp: a network, or hosts in network namespaces, to go
     * through) nothing goes around it */
    static const char *const cma_in[] = {"sm", "shm", "cma", "mm", "posix", "sysv", NULL};
    static const char *const cma_out[] = {"sm", "shm", "cma", NULL};
    bool cma_tls = tls_asks(tl, cma_in, cma_out);
    if (u->cma_mode == CMA_AUTO && !cma_tls)
        u->cma_mode = CMA_OFF;
    /* thp_collapse=auto: for cross-memory attach, whose copies pin the
     * pages of both sides one by one (none asked for without it) */
    if (u->thp == NXLT_THP_AUTO && u->cma_mode == CMA_OFF)
        u->thp = NXLT_THP_OFF;
    return NXL_SUCCESS;
}

/* ucp_init failed: a sentence with what UCX does find here with its
 * defaults */
static void context_failed(ucx_t *u, ucs_status_t st, const char *tls, const char *dev)
{
    ucp_params_t dp = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_AM};
    ucp_config_t *dc = NULL;
    u->desc[0] = 0;
    if (ucp_config_read(NULL, NULL, &dc) == UCS_OK) {
        ucp_config_modify(dc, "TLS", "all");
        ucp_config_modify(dc, "NET_DEVICES", "all");
        if (ucp_init(&dp, dc, &u->ucp) == UCS_OK) {
            list_tls(u);
            ucp_cleanup(u->ucp);
        }
        ucp_config_release(dc);
    }
    nxlt_error(u->ctx, "UCX: ucp_init failed: %s — no usable UCX transport with tls=%s, "
               "devices=%s; UCX finds here: %s. Check the 'tls'/'devices' parameters and "
               "UCX_TLS / UCX_NET_DEVICES ('ucx_info -d' lists devices)",
               ucs_status_string(st),
               tls ? tls : getenv("UCX_TLS") ? getenv("UCX_TLS") : "all",
               dev ? dev : getenv("UCX_NET_DEVICES") ? getenv("UCX_NET_DEVICES") : "all",
               u->desc[0] ? u->desc : "nothing");
}

/* The UCP context: UCX's configuration with the tls, devices and keepalive
 * parameters. On failure nothing of UCX is left in u. */
static nxl_status_t context_open(ucx_t *u, const nxl_param_t *params, size_t n)
{
    nxlt_ctx_t *ctx = u->ctx;
    ucp_config_t *cfg;
    ucs_status_t st = ucp_config_read(NULL, NULL, &cfg);
    if (st != UCS_OK) {
        nxlt_error(ctx, "UCX: ucp_config_read failed: %s (check UCX_* environment variables)",
                   ucs_status_string(st));
        return NXL_ERR_BACKEND;
    }
    const char *tls = nxlt_param(params, n, "tls"), *dev = nxlt_param(params, n, "devices");
    const char *ka = nxlt_param(params, n, "keepalive");
    if ((tls && (st = ucp_config_modify(cfg, "TLS", tls)) != UCS_OK) ||
        (dev && (st = ucp_config_modify(cfg, "NET_DEVICES", dev)) != UCS_OK) ||
        (st = ucp_config_modify(cfg, "KEEPALIVE_INTERVAL", ka ? ka : KEEPALIVE_DEFAULT)) != UCS_OK) {
        nxlt_error(ctx, "UCX: a parameter was refused by ucp_config_modify: %s",
                   ucs_status_string(st));
        ucp_config_release(cfg);
        return NXL_ERR_INVALID_PARAM;
    }
    ucp_params_t up = {
        .field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED,
        .features = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP,
        .mt_workers_shared = 0,
    };
    st = ucp_init(&up, cfg, &u->ucp);
    ucp_config_release(cfg);
    if (st != UCS_OK) {
        context_failed(u, st, tls, dev);
        return NXL_ERR_BACKEND;
    }
    list_tls(u);
    query_cuda(u);
    return NXL_SUCCESS;
}

/* The worker, its address and its event fd. On failure the caller
 * destroys u. */
static nxl_status_t worker_open(ucx_t *u)
{
    /* a threaded agent calls the worker from the threads that post
     * (NXLT_CAP_ANY_THREAD), one at a time */
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = nxlt_threaded(u->ctx) ? UCS_THREAD_MODE_SERIALIZED
                                                                   : UCS_THREAD_MODE_SINGLE};
    ucs_status_t st = ucp_worker_create(u->ucp, &wp, &u->w);
    if (st == UCS_OK)
        st = ucp_worker_get_efd(u->w, &u->efd);
    if (st == UCS_OK) {
        ucp_address_t *a;
        st = ucp_worker_get_address(u->w, &a, &u->addr_len);
        if (st == UCS_OK) {
            u->addr = malloc(u->addr_len);
            if (u->addr)
                memcpy(u->addr, a, u->addr_len);
            ucp_worker_release_address(u->w, a);
        }
    }
    if (st != UCS_OK) {
        nxlt_error(u->ctx, "UCX: the worker could not start: %s (UCX found: %s); check UCX_TLS "
                   "and UCX_NET_DEVICES", ucs_status_string(st),
                   u->desc[0] ? u->desc : "nothing");
        return NXL_ERR_BACKEND;
    }
    return NXL_SUCCESS;
}

/* The worker's messages, and its event fd watched by the agent's loop (with
 * the transport's timers): the transport listens.
 * On failure the caller destroys u. */
static nxl_status_t listen_open(ucx_t *u)
{
    static const struct {
        unsigned id;
        ucp_am_recv_callback_t cb;
    } handlers[] = {
        {NXL_UCX_AM_NOTIF, nxl_ucx_am_recv},
        {NXL_UCX_AM_WRITE, nxl_ucx_am_recv_write},
        {NXL_UCX_AM_REVOKE, nxl_ucx_am_recv_revoke},
        {NXL_UCX_AM_WRITE_ACK, nxl_ucx_am_recv_ack},
        {NXL_UCX_AM_READ, nxl_ucx_am_recv_read},
        {NXL_UCX_AM_READ_REPLY, nxl_ucx_am_recv_read_reply},
    };
    ucs_status_t st = UCS_OK;
    for (size_t i = 0; i < sizeof(handlers) / sizeof(*handlers) && st == UCS_OK; i++) {
        ucp_am_handler_param_t ap = {
            .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                          UCP_AM_HANDLER_PARAM_FIELD_ARG,
            .id = handlers[i].id,
            .cb = handlers[i].cb,
            .arg = u,
        };
        st = ucp_worker_set_am_recv_handler(u->w, &ap);
    }
    nxlt_on_deadline(u->ctx, nxl_ucx_on_deadline); /* aborts (conn.c) */
    u->ev_efd = nxlt_io_new(u->ctx, u->efd, nxl_ucx_on_efd, u);
    u->ev_kick = nxlt_timer_new(u->ctx, nxl_ucx_on_kick, u);
    u->ev_arm = nxlt_timer_new(u->ctx, nxl_ucx_on_arm, u);
    u->ev_chain = nxlt_timer_new(u->ctx, nxl_ucx_on_chain, u);
    u->ev_watch = nxlt_timer_new(u->ctx, nxl_ucx_on_watch, u);
    u->ev_cma = nxlt_timer_new(u->ctx, nxl_ucx_on_cma, u);
    u->ev_cma_now = nxlt_timer_new(u->ctx, nxl_ucx_on_cma_now, u);
    if (st != UCS_OK || !u->addr || !u->ev_efd || !u->ev_kick || !u->ev_arm || !u->ev_chain ||
        !u->ev_watch || !u->ev_cma || !u->ev_cma_now || nxlt_io_start(u->ev_efd, NXLT_IO_READ)) {
        nxlt_error(u->ctx, "UCX: setting up the worker in the reactor failed (%s)",
                   ucs_status_string(st));
        return NXL_ERR_BACKEND;
    }
    return NXL_SUCCESS;
}

static nxl_status_t create(nxlt_ctx_t *ctx, const nxl_param_t *params, size_t n, void **out)
{
    const char *tl;
    nxl_status_t ns = params_shm(ctx, params, n, &tl);
    if (ns != NXL_SUCCESS)
        return ns;
    ucx_t *u = calloc(1, sizeof(*u));
    if (!u)
        return NXL_ERR_UNKNOWN;
    u->ctx = ctx;
    TAILQ_INIT(&u->cma_q);
    u->efd = -1;
    LIST_INIT(&u->conns);
    LIST_INIT(&u->ops);
    LIST_INIT(&u->acks);
    LIST_INIT(&u->sides);
    ns = params_read(u, params, n, tl);
    if (ns == NXL_SUCCESS)
        ns = context_open(u, params, n);
    if (ns != NXL_SUCCESS) {
        free(u);
        return ns;
    }
    ns = worker_open(u);
    if (ns == NXL_SUCCESS)
        ns = listen_open(u);
    if (ns == NXL_SUCCESS)
        ns = nxl_ucx_rails_open(u, params, n);
    if (ns != NXL_SUCCESS) {
        destroy(u);
        return ns;
    }
    nxl_ucx_cma_init(u);
    /* our answers say how long we poll after them (am.c, "a peer that
     * polls"); not polling: today's answers, without a header */
    unsigned bp = nxlt_busy_poll_us(ctx);
    ucx_ci_put(u->poll_hdr, bp, 4);
    u->poll_hlen = bp ? 4 : 0;
    nxl_ucx_live_add(u);
    nxl_ucx_kick(u);
    nxlt_log(ctx, NXL_LOG_INFO, "UCX %s transport up; UCX transports: %s (%s); cross-memory "
             "attach to peers on this host: %s", ucp_get_version_string(), u->desc,
             strstr(u->desc, "rc") || strstr(u->desc, "ud") || strstr(u->desc, "dc")
                 ? "with RDMA"
                 : "shared memory and TCP, no RDMA",
             !u->cma_here || !u->cma_liov ? "off" : u->cma_mode == CMA_ON ? "on" : "auto");
    *out = u;
    return NXL_SUCCESS;
}

/* Does UCX still hold requests of ours that it will return? Close
 * requests, and flushes or notifications of ops on endpoints that were not
 * closed by force (those UCX 1.13 may keep forever). */
static bool holds_requests(ucx_t *u)
{
    if (u->nclosing)
        return true;
    if (!LIST_EMPTY(&u->sides))
        return true;
    ucx_op_t *o;
    LIST_FOREACH(o, &u->ops, link)
    if (!o->conn->forced && !o->queued)
        return true;
    return false;
}

/* o is with UCX: a put or get, its flush, its notification, an AM_WRITE
 * not sent yet (not: copies queued for cross-memory attach, ops waiting for
 * a new endpoint, AM_WRITEs sent, whose acknowledgement is the peer's,
 * pieces on the rails' workers, rails.c) */
static bool op_with_ucx(const ucx_op_t *o)
{
    return !o->queued && !o->wire_wait && !(o->amw && o->amw_sent) && !o->pieces;
}

/* Ops UCX has not given back on the endpoints the teardown closed by force
 * (quiesce). ucp_ep_close_nbx(FORCE) discards the endpoint's transport
 * endpoints in the background (ucp_worker_discard_uct_ep), and UCX 1.13
 * completes the endpoint's requests (its software gets, over TCP and over
 * shared memory without cross-memory attach, and the flushes that wait
 * for them) as it does; over TCP and shared memory here they came back
 * within the close or the first progress (0.0-0.2 ms). */
static bool holds_torn(ucx_t *u)
{
    ucx_op_t *o;
    LIST_FOREACH(o, &u->ops, link)
    if (o->conn->torn && op_with_ucx(o))
        return true;
    return false;
}

/* Progresses the worker, asleep on its fd between rounds, until @p held
 * reads false or @p until (nxlt_now_us) passed: false then */
static bool progress_while(ucx_t *u, bool (*held)(ucx_t *), uint64_t until)
{
    uint64_t now;
    while (held(u) && (now = nxlt_now_us()) < until) {
        for (int k = 0; k < 64 && ucp_worker_progress(u->w); k++)
            ;
        if (!held(u))
            break;
        int ms = (int)((until - now) / 1000) + 1;
        if (ucp_worker_arm(u->w) != UCS_OK)
            ms = 1; /* busy (sends queued on shared memory): look again soon */
        struct pollfd pf = {.fd = u->efd, .events = POLLIN};
        poll(&pf, 1, ms < 50 ? ms : 50);
    }
    return !held(u);
}

/* Transfers still in flight to a peer that is alive and progressed, on
 * endpoints not closed: another process, an agent of this process run by
 * another thread (one on this thread cannot answer while this one tears
 * down), or this agent itself: without UCX's self transport (tls without
 * "self", e.g. tcp) a put to itself is written by this worker as it
 * progresses, and the engine unmaps the memory it allocated once the
 * transports are quiet (before, the destroy's last progress wrote into it
 * after: SIGSEGV in ucp_put_handler; check_ucx t_destroy_loopback). */
static bool live_ops(ucx_t *u)
{
    ucx_op_t *o;
    LIST_FOREACH(o, &u->ops, link)
    if (o->op && !o->queued && o->conn->ep && !o->conn->failed && !o->conn->fail_deferred &&
        (!o->conn->local || o->conn->self || nxl_ucx_live_elsewhere(o->conn)))
        return true;
    return false;
}

/* First in the agent's teardown: transfers in flight are let finish, at
 * most DESTROY_WAIT_MS, before the endpoints are closed by force under
 * them. Over TCP a put is emulated: the target writes it and answers, and
 * UCX 1.13 aborts the target's process (ucp_request_try_send: "unexpected
 * error: Endpoint timeout", from ucp_put_handler) when that answer finds
 * the initiator's endpoint gone. Then every op not reported yet is
 * reported CANCELED (its callback runs after this returns), and the
 * endpoints that still hold some (a peer stopped or hung) are closed by
 * force here, and the worker progressed until UCX gave their requests
 * back (holds_torn; at most DESTROY_WAIT_MS more): no callback runs while
 * UCX may still write a READ's reply into its buffer. Not those to
 * another agent of this process (the engine's unload closes them by
 * force): not progressed while this one tears down, it never takes what
 * fills its shared-memory FIFO, and UCX keeps those requests until the
 * worker is destroyed (check_ucx t_destroy_inflight). Left to the
 * engine's unload (a flushing close, which a stopped peer never answers),
 * UCX 1.13 kept the gets until ucp_worker_destroy(), which aborted the
 * process (ucp_ep_destroy_base: "Assertion `ucs_hlist_is_empty(
 * &ucp_ep_ext_gen(ep)->proto_reqs)' failed"). */
static void quiesce(void *state)
{
    ucx_t *u = state;
    uint64_t until = nxlt_now_us() + DESTROY_WAIT_MS * 1000ull;
    while (u->w) {
        if (!live_ops(u) || nxlt_now_us() >= until)
            break;
        nxl_ucx_rails_progress(u);
        if (ucp_worker_progress(u->w))
            continue;
        if (ucp_worker_arm(u->w) != UCS_OK)
            continue; /* events came in meanwhile, or sends queued: progress again */
        struct pollfd pf = {.fd = u->efd, .events = POLLIN};
        poll(&pf, 1, 10);
    }
    ucx_op_t *o;
    LIST_FOREACH(o, &u->ops, link)
    if (o->op) {
        nxlt_op_t *op = o->op;
        o->op = NULL;
        nxl_netop_unstart(&u->net, &o->conn->net);
        nxlt_op_done(op, NXL_ERR_CANCELED, "UCX: transport destroyed");
    }
    if (!u->w)
        return;
    unsigned n = 0;
    for (;;) {
        ucx_conn_t *c = NULL;
        LIST_FOREACH(o, &u->ops, link)
        if (op_with_ucx(o) && o->conn->ep && !o->conn->self && !o->conn->local) {
            c = o->conn;
            break;
        }
        if (!c)
            break;
        ucp_ep_h ep = c->ep;
        c->ep = NULL;
        c->forced = true;
        c->torn = true;
        nxl_ucx_ep_close(u, ep, true); /* (its callbacks may free ops) */
        n++;
    }
    uint64_t t0 = nxlt_now_us();
    if (n && !progress_while(u, holds_torn, t0 + DESTROY_WAIT_MS * 1000ull))
        nxlt_log(u->ctx, NXL_LOG_WARN, "UCX: teardown: %u endpoint%s closed by force with "
                 "transfers in flight; UCX did not give all their requests back within %d ms",
                 n, n == 1 ? "" : "s", DESTROY_WAIT_MS);
    else if (n)
        nxlt_log(u->ctx, NXL_LOG_DEBUG, "UCX: teardown: %u endpoint%s with transfers in flight "
                 "closed by force; UCX gave their requests back in %.1f ms", n,
                 n == 1 ? "" : "s", (nxlt_now_us() - t0) / 1000.0);
}

static void destroy(void *state)
{
    ucx_t *u = state;
    quiesce(u);
    if (u->thp_state) {
        char thp[256];
        nxlt_thp_stop(&u->thp_state, thp, sizeof(thp));
        nxlt_log(u->ctx, NXL_LOG_DEBUG, "UCX: registered DRAM onto 2 MiB pages: %s", thp);
    }
    if (u->huge_allocs)
        nxlt_log(u->ctx, NXL_LOG_DEBUG, "UCX: nxl_mem_alloc collapsed onto 2 MiB pages at once: "
                 "%llu allocations, %llu bytes", (unsigned long long)u->huge_allocs,
                 (unsigned long long)u->huge_bytes);
    nxl_ucx_rails_destroy(u);
    /* copies not done: nothing of theirs is in UCX or the kernel */
    while (!TAILQ_EMPTY(&u->cma_q))
        nxl_ucx_op_free(TAILQ_FIRST(&u->cma_q));
    ucx_conn_t *c, *next;
    for (c = LIST_FIRST(&u->conns); c; c = next) {
        next = LIST_NEXT(c, link);
        nxl_ucx_cma_close(c);
        if (c->ep) {
            c->forced = !c->self;
            nxl_ucx_ep_close(u, c->ep, c->forced);
            c->ep = NULL;
        }
    }
    if (u->w) {
        /* UCX returns the requests it holds (closes, flushes and
         * notifications of ops already reported) as the worker progresses:
         * wait for them, asleep on the worker's fd, up to a deadline (a
         * peer that vanished without a word may never answer a close) */
        progress_while(u, holds_requests, nxlt_now_us() + DESTROY_WAIT_MS * 1000ull);
        if (holds_requests(u))
            nxlt_log(u->ctx, NXL_LOG_WARN, "UCX: %u endpoint closes or flushes still pending "
                     "after %d ms at teardown (a peer that does not answer); giving up on "
                     "them", u->nclosing,
                     DESTROY_WAIT_MS);
        /* closes a silent peer never acknowledged: give them back to UCX
         * before the worker goes (it asserts on requests still owned) */
        while (u->nclosing)
            ucp_request_free(u->closing[--u->nclosing]);
        while (!LIST_EMPTY(&u->sides)) {
            ucx_side_t *m = LIST_FIRST(&u->sides);
            LIST_REMOVE(m, link);
            ucp_request_free(m->req);
            free(m);
        }
    }
    nxl_ucx_later_free(u);
    free(u->closing);
    nxlt_io_free(u->ev_efd);
    nxlt_timer_free(u->ev_kick);
    nxlt_timer_free(u->ev_arm);
    nxlt_timer_free(u->ev_chain);
    nxlt_timer_free(u->ev_watch);
    nxlt_timer_free(u->ev_cma);
    nxlt_timer_free(u->ev_cma_now);
    nxl_ucx_split_fini(u);
    free(u->cma_liov);
    if (u->w)
        ucp_worker_destroy(u->w);
    /* ops UCX never called back for: their requests died with the worker */
    while (!LIST_EMPTY(&u->ops))
        nxl_ucx_op_free(LIST_FIRST(&u->ops));
    while (u->spare_ops) {
        ucx_op_t *o = u->spare_ops;
        u->spare_ops = o->next_free;
        free(o->iov);
        free(o->buf);
        free(o);
    }
    while (!LIST_EMPTY(&u->conns)) {
        c = LIST_FIRST(&u->conns);
        LIST_REMOVE(c, link);
        free(c->peer_addr);
        free(c->name);
        free(c);
    }
    if (u->ucp)
        ucp_cleanup(u->ucp);
    if (u->is_live)
        nxl_ucx_live_remove(u);
    free(u->addr);
    free(u);
}

static const char *describe(void *state)
{
    return ((ucx_t *)state)->desc;
}

/* What create() takes: the engine refuses other keys, nxl_info -v lists
 * these (keep them with create()'s parsing) */
_Static_assert(CMA_CHUNK_DEFAULT == 1048576, "ucx_params says cma_chunk=1048576");
_Static_assert(CMA_SPLIT_DEFAULT == 524288, "ucx_params says cma_split=524288");
static const nxl_param_info_t ucx_params[] = {
    {"tls", NULL, "UCX transports, as UCX_TLS (\"shm,self\", \"tcp\"); not given: UCX_TLS or all"},
    {"devices", NULL, "network devices, as UCX_NET_DEVICES; not given: UCX_NET_DEVICES or all"},
    {"keepalive", KEEPALIVE_DEFAULT, "keepalive interval, as UCX_KEEPALIVE_INTERVAL: an idle peer "
     "lost is noticed within it (peers on this host at once, through their pidfd)"},
    {"shm_error_handling", "y",
     "y: set UCX_POSIX_ERROR_HANDLING and UCX_SYSV_ERROR_HANDLING (shared memory with peer "
     "error handling); anything else leaves them alone"},
    {"shm_fifo_size", SHM_FIFO_DEFAULT,
     "shared-memory receive FIFO elements, a power of two (UCX_POSIX/SYSV_FIFO_SIZE; when not "
     "given, those set in the environment win); \"ucx\": UCX's own (64)"},
    {"stall_timeout", "10s", "give a peer up when none of its transfers completed for this long "
     "(\"500ms\", \"0\" never)"},
    {"am_write_max", PSTR(AM_WRITE_MAX_DEFAULT),
     "WRITEs up to this many bytes go as one message: with a notification, and without one "
     "where cross-memory attach and UCX's own mapping do not take them (\"0\" off)"},
    {"am_read_max", PSTR(AM_READ_MAX_DEFAULT),
     "READs (without a notification) up to this many bytes go as a request the target "
     "answers with the bytes in one message (\"0\" off)"},
    {"polled_max", PSTR(POLLED_MAX_DEFAULT),
     "WRITEs and READs one at a time up to this many bytes (and am_write_max, am_read_max), "
     "to a peer on this host that polls (its busy_poll_us), go as messages while it does, "
     "not by cross-memory attach (\"0\" never)"},
    {"polled_slow", PSTR(POLLED_SLOW_DEFAULT),
     "microseconds: when such messages' answers take longer on average (the peer or this agent "
     "not getting its CPU), small transfers go back to cross-memory attach for a while "
     "(\"0\": never)"},
    {"cma", "auto", "cross-memory attach to peers on this host: auto (when tls includes shared "
     "memory), on, off"},
    {"cma_chunk", "1048576", "bytes one process_vm_writev/readv copies at most"},
    {"cma_max", "0", "transfers of more bytes go through UCX instead of cross-memory attach "
     "(0: no limit)"},
    {"cma_split", "524288", "a process_vm_writev/readv of at least this many bytes is cut in "
     "pieces copied by this thread and a copy thread of the agent's, on the CPUs of this thread "
     "and of the peer's process (0: never)"},
    {"thp_collapse", "auto", "registered DRAM regions onto 2 MiB pages in place (MADV_COLLAPSE): "
     "auto (with cross-memory attach, in the background), background, sync (before the "
     "registration returns), off; not off: nxl_mem_alloc's DRAM of 2 MiB or more is shared "
     "memory on 2 MiB pages (auto: collapsed before it returns up to 1 GiB)"},
    {"rails", NULL, "network devices, one rail each (\"eth0,eth1\"): READs and WRITEs of at "
     "least rail_min bytes to a peer with rails are striped over them, in proportion to each "
     "rail's observed throughput"},
    {"rail_min", "262144", "transfers of fewer bytes take the main path (the devices "
     "parameter), one rail"},
};

NXLT_MODULE_EXPORT const nxlt_ops_t nxlt_ucx_ops = {
    NXLT_OPS_HEAD("UCX", UCX_MEM_MASK,
                  NXLT_CAP_REMOTE | NXLT_CAP_LOCAL | NXLT_CAP_NOTIF | NXLT_CAP_CANCEL_WAITS |
                      NXLT_CAP_ANY_THREAD,
                  ucx_params),
    .probe = probe,
    .create = create,
    .destroy = destroy,
    .reg = nxl_ucx_reg,
    .dereg = nxl_ucx_dereg,
    .revoke = nxl_ucx_mem_revoke,
    .pack_key = nxl_ucx_pack_key,
    .mem_alloc = nxl_ucx_mem_alloc,
    .mem_free = nxl_ucx_mem_free,
    .conn_info = nxl_ucx_conn_info,
    .load_conn = nxl_ucx_load_conn,
    .load_key = nxl_ucx_load_key,
    .unload_key = nxl_ucx_unload_key,
    .unload_conn = nxl_ucx_unload_conn,
    .post = nxl_ucx_post,
    .notif_send = nxl_ucx_notif_send,
    .describe = describe,
    .quiesce = quiesce,
};
