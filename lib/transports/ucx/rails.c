/* SPDX-License-Identifier: BSD-3-Clause */
/* Rails: one transfer striped over several network paths to the same peer.
 *
 * Where: in the UCX transport. The rails parameter names devices
 * ("rails=eth0,eth1"); each is a rail: a UCP context of its own with
 * UCX_NET_DEVICES set to that device alone (and the transport's tls and
 * keepalive), its own worker, and that worker's event fd watched by the
 * agent's loop beside the main worker's. The main worker (the devices
 * parameter) stays as it was: connections, notifications, the transport's
 * own messages, small transfers. UCX keeps one endpoint on one lane for
 * RMA, and its device list is per context: a context per rail is what
 * pins a rail to its device.
 *
 * Metadata: the connection info carries, with CI_RAILS (wire.h), one worker
 * address per rail before the main worker's; a region is registered with
 * every rail's context too, and its packed key is followed by a trailer of
 * one UCX key per rail: ['R'][u8 n][n x ([u16 length][key])] (UCX reads
 * its own key by its length and ignores what follows). Rail i of one side
 * is connected to rail i of the other; a peer with fewer rails (or none)
 * gets fewer (or the main path only).
 *
 * Splitting: a READ or WRITE of at least rail_min bytes, to a peer with
 * rails, between regions known to every rail, is cut into one contiguous
 * byte range per rail (across the transfer's elements), each rail's share
 * in proportion to its observed throughput: the bytes per second of its
 * pieces, from post to the completion of the rail's flush, in a moving
 * mean weighted by bytes (a piece of b bytes counts b / (seen + b), seen
 * the bytes behind the mean, 4 MiB at most: small pieces, where latency
 * counts more than rate, move it little). A rail not measured yet counts as the mean of the others (all
 * equal at first); every rail keeps at least 1/(16n) of a transfer, so that
 * a rail that was slow once is measured again and regains its share.
 * Smaller transfers take the main path, one rail.
 *
 * Completion: each piece is its rail's puts or gets, then a flush of that
 * rail's endpoint (the data at the target). The op counts its pieces; the
 * last flush to complete completes it: its notification, if any, goes on
 * the main endpoint only then, so that a WRITE still completes (and
 * notifies) only once every byte is at the target, and the engine's future
 * completes once. The connection failing (its main endpoint, or the stall
 * timeout) reports every op on it and closes its rails.
 *
 * Failover: a rail whose endpoint fails (UCX's error handler), or whose
 * piece is not done after RAIL_STALL_MIN_US or 4 times what its measured
 * rate predicts (whichever is longer; at most half the stall timeout,
 * which would give up the whole connection), is taken out for that peer:
 * its endpoint is closed by force, its pieces are detached from their ops
 * (a late completion frees only the piece) and their byte ranges posted
 * again on the rails left (the op keeps its elements for that). With no
 * rail left the op fails. The main endpoint (the devices parameter) is
 * failed over the same way while a rail is up: at the end of this file.
 *
 * Retries: a rail taken out is tried again after RAIL_RETRY_MIN_MS, then
 * after twice as long each time a try fails, RAIL_RETRY_MAX_MS at most (a
 * timer of the transport's wakes the loop for it): a new endpoint (the
 * peer's rail addresses are kept with the connection), every key of the
 * peer's unpacked on it, and a probe: a GET of one byte where a striped
 * transfer went last, then a flush, through within RAIL_PROBE_US. Then
 * the rail carries pieces again (its throughput as measured before); its
 * back-off starts again once a piece of it completes. */
#include "config.h"
#include "ucx.h"
#include "../common/railshare.h" /* throughput, shares, stall limit, retries: as LIBFABRIC's */

#define RAIL_MIN_DEFAULT (256u << 10)
#define KEY_TAG 'R'
#define RAIL_STALL_MIN_US 1000000 /* a piece not done after this long may be on a dead rail */
#define RAIL_RETRY_MIN_MS NXL_RAIL_RETRY_MIN_MS /* retries, probes: ../common/railshare.h */
#define RAIL_RETRY_MAX_MS NXL_RAIL_RETRY_MAX_MS
#define RAIL_PROBE_US NXL_RAIL_PROBE_US

typedef struct ucx_rail {
    ucx_t *u;
    unsigned idx;               /* its index in the rails */
    char dev[64];
    ucp_context_h ucp;
    ucp_worker_h w;
    int efd;
    nxlt_io_t *ev;
    void *addr;
    size_t addr_len;
    nxl_rail_rate_t rate;       /* observed throughput */
} ucx_rail_t;

/* a transfer's share on one rail: its puts or gets, then the rail's flush */
typedef struct ucx_piece {
    ucx_op_t *o;                /* NULL: detached (its rail was taken out) */
    ucx_conn_t *c;
    unsigned rail;
    size_t start, bytes;        /* its byte range in the transfer */
    bool done;                  /* its flush failed and came back: waits for take_out */
    bool probe;                 /* a rail's probe (rail_retry), not a transfer's piece */
    bool notif;                 /* o's notification, the main endpoint out (main_out) */
    unsigned char buf[8];       /* ... the byte it reads */
    uint64_t t0;
    LIST_ENTRY(ucx_piece) link;
} ucx_piece_t;

/* a connection's rails, beyond its endpoints (ucx.h) */
struct ucx_conn_rails {
    void *addr[NXL_UCX_RAILS_MAX];      /* the peer's rails' worker addresses */
    size_t addr_len[NXL_UCX_RAILS_MAX];
    ucp_ep_h probe_ep[NXL_UCX_RAILS_MAX]; /* a rail taken out, connected again: not used
                                         * until its probe is through */
    ucx_piece_t *probe[NXL_UCX_RAILS_MAX]; /* that probe (a GET of a byte, a flush) */
    unsigned probe_ok;                  /* probes through: rails to put back (the loop) */
    uint64_t retry_at[NXL_UCX_RAILS_MAX]; /* a rail taken out: when it is tried again */
    unsigned backoff_ms[NXL_UCX_RAILS_MAX]; /* the wait after its next failed try */
    unsigned tries[NXL_UCX_RAILS_MAX];  /* tries since it was taken out */
    uint64_t ok_us[NXL_UCX_RAILS_MAX];  /* when a piece of each last completed */
    ucx_rkey_t *probe_k;                /* a key of the peer's, and an address in it, */
    uint64_t probe_raddr;               /* that a striped transfer used: probes read there */
};

struct ucx_rails {
    unsigned n;
    size_t min;
    ucx_rail_t r[NXL_UCX_RAILS_MAX];
    LIST_HEAD(, ucx_piece) pieces; /* flushes UCX holds */
    unsigned nclosing;          /* endpoint closes UCX holds */
    nxlt_timer_t *timer;        /* the next retry, probe or stall check due */
};

/* ------------------------------------------------------------ progress */

/* Progresses a rail's worker until idle, then arms it; still busy after a
 * few tries: the main worker's kick (progress() calls us) tries again. */
static void rail_progress(ucx_t *u, ucx_rail_t *r)
{
    for (int tries = 0; tries < 4; tries++) {
        while (ucp_worker_progress(r->w))
            ;
        ucs_status_t st = ucp_worker_arm(r->w);
        if (st == UCS_OK)
            return;
        if (st != UCS_ERR_BUSY)
            break;
    }
    nxl_ucx_kick(u);
}

static void on_rail_efd(nxlt_io_t *io, int fd, unsigned ready, void *arg)
{
    ucx_t *u = arg;
    for (unsigned i = 0; i < u->rails->n; i++)
        if (u->rails->r[i].ev == io)
            rail_progress(u, &u->rails->r[i]);
    nxl_ucx_deferred_failures(u);
}

static void rails_check(ucx_t *u);
static uint64_t main_retry(ucx_t *u, ucx_conn_t *c, uint64_t now);

void nxl_ucx_rails_progress(ucx_t *u)
{
    if (!u->rails)
        return;
    for (unsigned i = 0; i < u->rails->n; i++)
        rail_progress(u, &u->rails->r[i]);
    rails_check(u);
}

static void on_rail_timer(nxlt_timer_t *t, void *arg)
{
    ucx_t *u = arg;
    nxl_ucx_rails_progress(u);
    nxl_ucx_deferred_failures(u);
}

/* ------------------------------------------------------------ life */

static ucs_status_t rail_am_notif(void *arg, const void *header, size_t hlen, void *data,
                                  size_t len, const ucp_am_recv_param_t *param);
static ucs_status_t rail_am_main_out(void *arg, const void *header, size_t hlen, void *data,
                                     size_t len, const ucp_am_recv_param_t *param);

static nxl_status_t rail_open(ucx_t *u, ucx_rail_t *r, const nxl_param_t *params, size_t n)
{
    ucp_config_t *cfg;
    ucs_status_t st = ucp_config_read(NULL, NULL, &cfg);
    if (st != UCS_OK)
        goto fail;
    const char *tls = nxlt_param(params, n, "tls"), *ka = nxlt_param(params, n, "keepalive");
    if ((tls && (st = ucp_config_modify(cfg, "TLS", tls)) != UCS_OK) ||
        (st = ucp_config_modify(cfg, "NET_DEVICES", r->dev)) != UCS_OK ||
        (st = ucp_config_modify(cfg, "KEEPALIVE_INTERVAL", ka ? ka : "10s")) != UCS_OK) {
        ucp_config_release(cfg);
        goto fail;
    }
    ucp_params_t up = {
        .field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED,
        .features = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP,
        .mt_workers_shared = 0,
    };
    st = ucp_init(&up, cfg, &r->ucp);
    ucp_config_release(cfg);
    if (st != UCS_OK) {
        r->ucp = NULL;
        goto fail;
    }
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = nxlt_threaded(u->ctx) ? UCS_THREAD_MODE_SERIALIZED
                                                                   : UCS_THREAD_MODE_SINGLE};
    st = ucp_worker_create(r->ucp, &wp, &r->w);
    if (st != UCS_OK) {
        r->w = NULL;
        goto fail;
    }
    /* notifications come on a rail while the sender's main endpoint is
     * out, and the word that it is (below: main_out); they name their
     * sender, as on the main worker */
    ucp_am_handler_param_t ap = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                      UCP_AM_HANDLER_PARAM_FIELD_ARG,
        .id = NXL_UCX_AM_NOTIF,
        .cb = rail_am_notif,
        .arg = r,
    };
    if ((st = ucp_worker_set_am_recv_handler(r->w, &ap)) != UCS_OK)
        goto fail;
    ap.id = NXL_UCX_AM_MAIN_OUT;
    ap.cb = rail_am_main_out;
    if ((st = ucp_worker_set_am_recv_handler(r->w, &ap)) != UCS_OK)
        goto fail;
    ucp_address_t *a;
    if ((st = ucp_worker_get_efd(r->w, &r->efd)) != UCS_OK ||
        (st = ucp_worker_get_address(r->w, &a, &r->addr_len)) != UCS_OK)
        goto fail;
    r->addr = malloc(r->addr_len);
    if (r->addr)
        memcpy(r->addr, a, r->addr_len);
    ucp_worker_release_address(r->w, a);
    r->ev = nxlt_io_new(u->ctx, r->efd, on_rail_efd, u);
    if (!r->addr || !r->ev || nxlt_io_start(r->ev, NXLT_IO_READ)) {
        st = UCS_ERR_NO_MEMORY;
        goto fail;
    }
    return NXL_SUCCESS;
fail:
    nxlt_error(u->ctx, "UCX: rail '%s' (rails parameter) could not start: %s (is it a network "
               "device UCX finds with tls=%s? 'ucx_info -d' lists them)", r->dev,
               ucs_status_string(st), nxlt_param(params, n, "tls") ? nxlt_param(params, n, "tls")
                                      : "all");
    return NXL_ERR_BACKEND;
}

/* The rails and rail_min parameters: a context and a worker per rail. */
nxl_status_t nxl_ucx_rails_open(ucx_t *u, const nxl_param_t *params, size_t n)
{
    const char *list = nxlt_param(params, n, "rails");
    if (!list || !*list)
        return NXL_SUCCESS;
    uint64_t min = RAIL_MIN_DEFAULT;
    nxl_status_t ns = nxlt_param_uint(u->ctx, params, n, "rail_min", 1, UINT64_MAX, &min);
    if (ns != NXL_SUCCESS)
        return ns;
    struct ucx_rails *rs = calloc(1, sizeof(*rs));
    if (!rs)
        return NXL_ERR_UNKNOWN;
    rs->min = (size_t)min;
    LIST_INIT(&rs->pieces);
    u->rails = rs;
    if (!(rs->timer = nxlt_timer_new(u->ctx, on_rail_timer, u)))
        return NXL_ERR_UNKNOWN;
    for (const char *p = list; *p;) {
        size_t l = strcspn(p, ",");
        if (l == 0 || l >= sizeof(rs->r[0].dev) || rs->n == NXL_UCX_RAILS_MAX) {
            nxlt_error(u->ctx, "UCX: rails=%s: a comma-separated list of 1 to %d network "
                       "devices", list, NXL_UCX_RAILS_MAX);
            return NXL_ERR_INVALID_PARAM;
        }
        ucx_rail_t *r = &rs->r[rs->n++];
        r->u = u;
        r->idx = rs->n - 1;
        memcpy(r->dev, p, l);
        r->efd = -1;
        if ((ns = rail_open(u, r, params, n)) != NXL_SUCCESS)
            return ns; /* the caller destroys u, and the rails opened */
        p += l + (p[l] == ',');
    }
    return NXL_SUCCESS;
}

void nxl_ucx_rails_destroy(ucx_t *u)
{
    struct ucx_rails *rs = u->rails;
    if (!rs)
        return;
    ucx_conn_t *c;
    LIST_FOREACH(c, &u->conns, link)
    nxl_ucx_rails_close(c);
    /* the closes (and flushes) UCX still holds: a moment to return them */
    uint64_t until = nxlt_now_us() + 200000;
    while (nxlt_now_us() < until) {
        unsigned k = 0;
        for (unsigned i = 0; i < rs->n; i++)
            if (rs->r[i].w)
                k += ucp_worker_progress(rs->r[i].w);
        if (!k && LIST_EMPTY(&rs->pieces) && !rs->nclosing)
            break;
        if (!k)
            usleep(1000);
    }
    if (rs->timer)
        nxlt_timer_free(rs->timer);
    for (unsigned i = 0; i < rs->n; i++) {
        ucx_rail_t *r = &rs->r[i];
        nxlt_io_free(r->ev);
        if (r->w)
            ucp_worker_destroy(r->w);
        free(r->addr);
    }
    /* flushes that never came back: their requests died with the workers
     * (their ops are freed with the transport's) */
    while (!LIST_EMPTY(&rs->pieces)) {
        ucx_piece_t *pc = LIST_FIRST(&rs->pieces);
        LIST_REMOVE(pc, link);
        free(pc);
    }
    for (unsigned i = 0; i < rs->n; i++)
        if (rs->r[i].ucp)
            ucp_cleanup(rs->r[i].ucp);
    free(rs);
    u->rails = NULL;
}

/* ------------------------------------------------- connection info */

size_t nxl_ucx_rails_info_len(ucx_t *u)
{
    if (!u->rails)
        return 0;
    size_t l = 3;
    for (unsigned i = 0; i < u->rails->n; i++)
        l += 2 + u->rails->r[i].addr_len;
    return l;
}

void nxl_ucx_rails_info_pack(ucx_t *u, unsigned char *w)
{
    ucx_ci_put(w, nxl_ucx_rails_info_len(u), 2);
    w[2] = (unsigned char)u->rails->n;
    w += 3;
    for (unsigned i = 0; i < u->rails->n; i++) {
        ucx_rail_t *r = &u->rails->r[i];
        ucx_ci_put(w, r->addr_len, 2);
        memcpy(w + 2, r->addr, r->addr_len);
        w += 2 + r->addr_len;
    }
}

/* The rails block at *info (CI_RAILS): *info and *len then say the main
 * worker's address. -1 when it is malformed. */
int nxl_ucx_rails_info_parse(const void **info, size_t *len, const void **rails,
                             size_t *rails_len)
{
    const unsigned char *b = *info;
    if (*len < 3)
        return -1;
    size_t bl = (size_t)ucx_ci_get(b, 2);
    if (bl < 3 || bl >= *len)
        return -1;
    /* every address inside the block */
    size_t at = 3;
    for (unsigned i = 0; i < b[2]; i++) {
        if (at + 2 > bl)
            return -1;
        at += 2 + (size_t)ucx_ci_get(b + at, 2);
        if (at > bl)
            return -1;
    }
    if (at != bl)
        return -1;
    *rails = b;
    *rails_len = bl;
    *info = b + bl;
    *len -= bl;
    return 0;
}

static void rail_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    ucx_conn_t *c = arg;
    for (unsigned i = 0; i < c->nrails; i++)
        if (c->rail_ep[i] == ep || (c->rx && c->rx->probe_ep[i] == ep))
            c->rail_failed |= 1u << i; /* taken out from the loop (nxl_ucx_rails_progress) */
    nxl_ucx_kick(c->u);
}

/* An endpoint from our rail i to the peer's (its address in c->rx) */
static ucs_status_t rail_ep_create(ucx_t *u, ucx_conn_t *c, unsigned i, ucp_ep_h *ep)
{
    ucp_ep_params_t p = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .address = (const ucp_address_t *)c->rx->addr[i],
        .err_mode = UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = {.cb = rail_ep_error, .arg = c},
    };
    void *before = nxl_ucx_socks_before(); /* tcpreset.c */
    u->in_ucx++;
    ucs_status_t st = ucp_ep_create(u->rails->r[i].w, &p, ep);
    u->in_ucx--;
    nxl_ucx_socks_after(before, &c->rail_socks[i]);
    if (st != UCS_OK)
        *ep = NULL;
    return st;
}

/* Endpoints from our rails to the peer's (rail i to rail i) */
void nxl_ucx_rails_connect(ucx_t *u, ucx_conn_t *c, const void *rails, size_t len)
{
    if (!u->rails || !rails || c->self || c->local)
        return;
    const unsigned char *b = rails;
    unsigned n = b[2] < u->rails->n ? b[2] : u->rails->n;
    size_t at = 3;
    struct ucx_conn_rails *rx = c->rx ? c->rx : calloc(1, sizeof(*rx));
    if (!rx)
        return;
    c->rx = rx;
    for (unsigned i = 0; i < n; i++) {
        size_t al = (size_t)ucx_ci_get(b + at, 2);
        unsigned char *addr = malloc(al + UCX_ADDR_PAD);
        if (!addr)
            break;
        memcpy(addr, b + at + 2, al);
        memset(addr + al, 0xff, UCX_ADDR_PAD);
        at += 2 + al;
        rx->addr[i] = addr; /* kept: a rail taken out connects again (rail_retry) */
        rx->addr_len[i] = al;
        rx->backoff_ms[i] = RAIL_RETRY_MIN_MS;
        ucs_status_t st = rail_ep_create(u, c, i, &c->rail_ep[i]);
        if (st != UCS_OK) {
            nxlt_log(u->ctx, NXL_LOG_WARN, "UCX: rail '%s' does not reach agent '%s' (%s): "
                     "%u rail(s) to it", u->rails->r[i].dev, c->name, ucs_status_string(st), i);
            c->rail_ep[i] = NULL;
            break;
        }
        c->nrails = i + 1;
    }
    if (c->nrails < 2) { /* one rail is the main path's job */
        nxl_ucx_rails_close(c);
        return;
    }
    nxlt_log(u->ctx, NXL_LOG_INFO, "UCX: %u rails to agent '%s'", c->nrails, c->name);
}

static void rail_close_cb(void *req, ucs_status_t st, void *arg)
{
    struct ucx_rails *rs = arg;
    rs->nclosing--;
    ucp_request_free(req);
}

/* Closes a rail's endpoint by force (a flushing close would wait on a
 * peer that may be gone) */
static void rail_ep_close(ucx_t *u, ucp_ep_h ep)
{
    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                        UCP_OP_ATTR_FIELD_FLAGS,
        .flags = UCP_EP_CLOSE_FLAG_FORCE,
        .cb.send = rail_close_cb,
        .user_data = u->rails,
    };
    u->in_ucx++;
    ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &p);
    u->in_ucx--;
    if (UCS_PTR_IS_PTR(r))
        u->rails->nclosing++; /* until rail_close_cb */
}

/* Closes c's rail endpoints, by force: they are closed when the connection
 * fails, is unloaded or the transport goes, after its transfers were
 * reported (quiesce waits for those in flight); a flushing close would
 * wait on a peer that may be gone. */
void nxl_ucx_rails_close(ucx_conn_t *c)
{
    ucx_t *u = c->u;
    bool closed = false;
    struct ucx_conn_rails *rx = c->rx;
    for (unsigned i = 0; i < NXL_UCX_RAILS_MAX; i++) {
        if (rx && rx->probe[i])
            rx->probe[i]->c = NULL; /* detached: freed when UCX calls back, or at destroy */
        if (rx && rx->probe_ep[i]) {
            rail_ep_close(u, rx->probe_ep[i]);
            closed = true;
        }
        if (rx)
            free(rx->addr[i]);
        if (!c->rail_ep[i])
            continue;
        rail_ep_close(u, c->rail_ep[i]);
        c->rail_ep[i] = NULL;
        closed = true;
    }
    free(rx);
    c->rx = NULL;
    c->nrails = 0;
    c->rail_failed = 0;
    if (closed)
        nxl_ucx_kick(u);
}

/* ----------------------------------------------------------- memory */

void nxl_ucx_rails_reg(ucx_t *u, ucx_md_t *m, void *addr, size_t len)
{
    if (!u->rails)
        return;
    for (unsigned i = 0; i < u->rails->n; i++) {
        if (nxl_ucx_mem_map(u->rails->r[i].ucp, NXL_DRAM, addr, len, &m->rail_memh[i]) !=
            UCS_OK) {
            nxlt_log(u->ctx, NXL_LOG_WARN, "UCX: a region 0x%lx+%zu could not be registered "
                     "with rail '%s': its transfers take the main path", (unsigned long)addr,
                     len, u->rails->r[i].dev);
            break;
        }
        m->nrails = i + 1;
    }
}

void nxl_ucx_rails_dereg(ucx_t *u, ucx_md_t *m)
{
    if (!u->rails) /* the rails are gone (destroy): their registrations with them */
        m->nrails = 0;
    for (unsigned i = 0; i < m->nrails; i++)
        ucp_mem_unmap(u->rails->r[i].ucp, m->rail_memh[i]);
    m->nrails = 0;
}

/* Appends the trailer of rail keys to the key at *buf (*len bytes) */
nxl_status_t nxl_ucx_rails_pack_key(ucx_t *u, ucx_md_t *m, void **buf, size_t *len)
{
    if (!u->rails || !m->nrails)
        return NXL_SUCCESS;
    void *rb[NXL_UCX_RAILS_MAX];
    size_t rl[NXL_UCX_RAILS_MAX], total = *len + 2;
    unsigned n = 0;
    for (; n < m->nrails; n++) {
        if (ucp_rkey_pack(u->rails->r[n].ucp, m->rail_memh[n], &rb[n], &rl[n]) != UCS_OK ||
            rl[n] > 65535) {
            nxlt_error(u->ctx, "UCX: ucp_rkey_pack failed on rail '%s'", u->rails->r[n].dev);
            break;
        }
        total += 2 + rl[n];
    }
    nxl_status_t ns = n == m->nrails ? NXL_SUCCESS : NXL_ERR_BACKEND;
    unsigned char *b = ns == NXL_SUCCESS ? realloc(*buf, total) : NULL;
    if (b) {
        unsigned char *w = b + *len;
        *w++ = KEY_TAG;
        *w++ = (unsigned char)n;
        for (unsigned i = 0; i < n; i++) {
            ucx_ci_put(w, rl[i], 2);
            memcpy(w + 2, rb[i], rl[i]);
            w += 2 + rl[i];
        }
        *buf = b;
        *len = total;
    } else if (ns == NXL_SUCCESS) {
        ns = NXL_ERR_UNKNOWN;
    }
    for (unsigned i = 0; i < n; i++)
        ucp_rkey_buffer_release(rb[i]);
    return ns;
}

/* k's key for rail i (at k->rail_at[i] in k->packed) on ep */
static ucs_status_t rail_key_unpack(ucp_ep_h ep, ucx_rkey_t *k, unsigned i)
{
    const unsigned char *b = k->packed + k->rail_at[i];
    size_t kl = (size_t)ucx_ci_get(b, 2);
    unsigned char *copy = malloc(kl + UCX_RKEY_PAD);
    if (!copy)
        return UCS_ERR_NO_MEMORY;
    memcpy(copy, b + 2, kl);
    memset(copy + kl, 0xff, UCX_RKEY_PAD);
    ucs_status_t st = ucp_ep_rkey_unpack(ep, copy, &k->rail_rk[i]);
    free(copy);
    if (st != UCS_OK)
        k->rail_rk[i] = NULL;
    return st;
}

/* The trailer after UCX's key (at bytes into buf): each rail's key on its
 * endpoint. A key without one, or one that does not unpack, leaves the
 * region to the main path. */
void nxl_ucx_rails_load_key(ucx_t *u, ucx_conn_t *c, const unsigned char *buf, size_t len,
                            size_t at, ucx_rkey_t *k)
{
    k->nrails = 0;
    if (!c->nrails || at + 2 > len || buf[at] != KEY_TAG)
        return;
    unsigned n = buf[at + 1] < c->nrails ? buf[at + 1] : c->nrails;
    at += 2;
    for (unsigned i = 0; i < n; i++) {
        if (at + 2 > len)
            break;
        size_t kl = (size_t)ucx_ci_get(buf + at, 2);
        if (at + 2 + kl > len || !ucx_rkey_need(buf + at + 2, kl))
            break;
        k->rail_at[i] = (uint32_t)at; /* the same in k->packed, a copy of buf */
        /* a rail taken out: its key is unpacked when it is back (rail_retry) */
        ucp_ep_h ep = c->rail_ep[i] ? c->rail_ep[i] : c->rx ? c->rx->probe_ep[i] : NULL;
        k->rail_rk[i] = NULL;
        if (ep && rail_key_unpack(ep, k, i) != UCS_OK)
            break;
        k->nrails = i + 1;
        at += 2 + kl;
    }
    if (k->nrails < n) {
        nxlt_log(u->ctx, NXL_LOG_WARN, "UCX: a key of agent '%s' has %u of %u rails: its "
                 "transfers take the main path", c->name, k->nrails, n);
        nxl_ucx_rails_unload_key(k);
    }
}

void nxl_ucx_rails_unload_key(ucx_rkey_t *k)
{
    if (k->conn && k->conn->rx && k->conn->rx->probe_k == k)
        k->conn->rx->probe_k = NULL;
    for (unsigned i = 0; i < k->nrails; i++)
        if (k->rail_rk[i])
            ucp_rkey_destroy(k->rail_rk[i]);
    k->nrails = 0;
}

/* --------------------------------------------------------- striping */

/* The last piece done: the op is done as a flush of the main path would
 * have done it (rma.c, flush_done) */
static void op_pieces_done(ucx_op_t *o)
{
    if (o->st != UCS_OK || !o->notif || o->aborted || (o->op && nxlt_op_canceled(o->op)))
        nxl_ucx_op_finish(o, o->st);
    else
        nxl_ucx_send_notif(o);
}

static int post_range(ucx_t *u, ucx_op_t *o, size_t start, size_t total);
static void retry_later(ucx_t *u, ucx_conn_t *c, unsigned i);
static void notif_again(ucx_op_t *o, unsigned left);

static void piece_done(void *req, ucs_status_t st, void *arg)
{
    ucx_piece_t *pc = arg;
    ucx_op_t *o = pc->o;
    if (req)
        ucp_request_free(req);
    LIST_REMOVE(pc, link);
    if (!o) { /* detached: its bytes went again on another rail */
        free(pc);
        return;
    }
    ucx_t *u = o->u;
    if (st == UCS_OK && pc->c->rx) {
        pc->c->rx->backoff_ms[pc->rail] = RAIL_RETRY_MIN_MS; /* it carries pieces */
        pc->c->rx->ok_us[pc->rail] = nxlt_now_us();
    }
    if (st == UCS_OK && pc->bytes) {
        /* a moving mean weighted by bytes: a piece of b bytes counts
         * b / (seen + b), small ones (latency more than rate) little */
        nxl_rail_rate_add(&u->rails->r[pc->rail].rate, pc->bytes, nxlt_now_us() - pc->t0);
    } else if (st != UCS_OK && pc->c->rail_ep[pc->rail] && !pc->c->failed) {
        /* its rail failed: taken out, and this piece posted again (rails_check) */
        pc->c->rail_failed |= 1u << pc->rail;
        pc->done = true;
        LIST_INSERT_HEAD(&u->rails->pieces, pc, link);
        nxl_ucx_kick(u);
        return;
    } else if (st != UCS_OK && o->st == UCS_OK) {
        o->st = st;
    }
    free(pc);
    if (--o->pieces == 0)
        op_pieces_done(o);
}

/* Rail i of c out: its endpoint closed, its pieces posted again on the
 * rails left (or failed, with none left) */
static void take_out(ucx_t *u, ucx_conn_t *c, unsigned i, const char *why)
{
    struct ucx_rails *rs = u->rails;
    c->rail_failed &= ~(1u << i);
    if (!c->rail_ep[i])
        return;
    ucp_ep_h ep = c->rail_ep[i];
    c->rail_ep[i] = NULL;
    unsigned left = 0;
    for (unsigned k = 0; k < c->nrails; k++)
        left += c->rail_ep[k] != NULL;
    nxlt_log(u->ctx, NXL_LOG_WARN, "UCX: rail '%s' to agent '%s' taken out (%s); its pieces go "
             "again on the %u rail(s) left", rs->r[i].dev, c->name, why, left);
    if (left) /* its pieces start again on the rails left: not a stall of the peer */
        c->net.progress_us = nxl_ucx_coarse_us();
    ucx_piece_t *pc, *next;
    ucx_op_t *o;
    for (pc = LIST_FIRST(&rs->pieces); pc; pc = next) {
        next = LIST_NEXT(pc, link);
        if (pc->c != c || pc->rail != i || !(o = pc->o))
            continue;
        pc->o = NULL; /* detached; freed when (if) UCX calls back, or at destroy */
        if (pc->notif) { /* sent again on another rail (its bytes here dropped: below) */
            notif_again(o, left);
            continue;
        }
        o->pieces++; /* held while its range is posted again */
        if (left == 0 || !o->op) {
            if (o->st == UCS_OK)
                o->st = UCS_ERR_ENDPOINT_TIMEOUT;
        } else if (post_range(u, o, pc->start, pc->bytes) != 0 && o->st == UCS_OK) {
            o->st = UCS_ERR_NO_MEMORY;
        }
        /* the detached piece's count, and the hold */
        o->pieces -= 2;
        if (pc->done) { /* its flush came back already: nothing of UCX holds it */
            LIST_REMOVE(pc, link);
            free(pc);
        }
        if (o->pieces == 0)
            op_pieces_done(o);
    }
    /* over TCP, what the kernel still holds of its pieces is dropped, not
     * sent when the link is back (tcpreset.c) */
    nxl_ucx_socks_reset(&c->rail_socks[i]);
    rail_ep_close(u, ep);
    if (c->rx) {
        c->rx->tries[i] = 0;
        retry_later(u, c, i);
    }
    nxl_ucx_kick(u);
    if (!left && c->main_out && !c->failed) /* every path down: the peer lost */
        nxl_ucx_conn_fail(c, UCS_ERR_ENDPOINT_TIMEOUT, true);
}

/* ------------------------------------------------------------ retries */

/* A rail taken out is tried again RAIL_RETRY_MIN_MS later, then after
 * twice as long each time a try fails, RAIL_RETRY_MAX_MS at most: a new
 * endpoint to the peer's rail, the keys unpacked on it, and a probe (a
 * GET of one byte where a striped transfer read or wrote last, and a
 * flush); once the probe is through, the rail carries pieces again. */
static void retry_later(ucx_t *u, ucx_conn_t *c, unsigned i)
{
    struct ucx_conn_rails *rx = c->rx;
    nxl_rail_retry_later(&rx->retry_at[i], &rx->backoff_ms[i], nxlt_now_us());
}

/* a try failed: its endpoint closed, the next one later */
static void probe_fail(ucx_t *u, ucx_conn_t *c, unsigned i, const char *why)
{
    struct ucx_conn_rails *rx = c->rx;
    if (rx->probe[i]) {
        rx->probe[i]->c = NULL; /* detached: freed when UCX calls back, or at destroy */
        rx->probe[i] = NULL;
    }
    rx->probe_ok &= ~(1u << i);
    c->rail_failed &= ~(1u << i);
    if (rx->probe_ep[i])
        rail_ep_close(u, rx->probe_ep[i]);
    rx->probe_ep[i] = NULL;
    unsigned wait = rx->backoff_ms[i];
    retry_later(u, c, i);
    nxlt_log(u->ctx, NXL_LOG_DEBUG, "UCX: rail '%s' to agent '%s' still out (try %u: %s); "
             "tried again in %u ms", u->rails->r[i].dev, c->name, rx->tries[i], why, wait);
}

static void probe_done(void *req, ucs_status_t st, void *arg)
{
    ucx_piece_t *pc = arg;
    if (req)
        ucp_request_free(req);
    LIST_REMOVE(pc, link);
    ucx_conn_t *c = pc->c;
    unsigned i = pc->rail;
    free(pc);
    if (!c) /* detached: that try is over */
        return;
    c->rx->probe[i] = NULL;
    if (st == UCS_OK)
        c->rx->probe_ok |= 1u << i; /* back, from the loop (rails_check) */
    else
        c->rail_failed |= 1u << i;
    nxl_ucx_kick(c->u);
}

/* the probe through (or none to make): rail i carries pieces again */
static void put_back(ucx_t *u, ucx_conn_t *c, unsigned i)
{
    struct ucx_conn_rails *rx = c->rx;
    c->rail_ep[i] = rx->probe_ep[i];
    rx->probe_ep[i] = NULL;
    unsigned live = 0;
    for (unsigned k = 0; k < c->nrails; k++)
        live += c->rail_ep[k] != NULL;
    nxlt_log(u->ctx, NXL_LOG_INFO, "UCX: rail '%s' to agent '%s' is back (try %u%s): %u "
             "rail(s) carry its transfers", u->rails->r[i].dev, c->name, rx->tries[i],
             rx->probe_k ? "" : ", without a probe: no striped transfer to read from yet",
             live);
}

/* a try: a new endpoint, the keys on it, the probe */
static void rail_retry(ucx_t *u, ucx_conn_t *c, unsigned i)
{
    struct ucx_conn_rails *rx = c->rx;
    rx->tries[i]++;
    ucs_status_t st = rail_ep_create(u, c, i, &rx->probe_ep[i]);
    if (st != UCS_OK) {
        probe_fail(u, c, i, ucs_status_string(st));
        return;
    }
    ucx_rkey_t *k;
    LIST_FOREACH(k, &c->rkeys, link)
    if (i < k->nrails) {
        if (k->rail_rk[i])
            ucp_rkey_destroy(k->rail_rk[i]); /* unpacked on the endpoint closed */
        k->rail_rk[i] = NULL;
        if ((st = rail_key_unpack(rx->probe_ep[i], k, i)) != UCS_OK) {
            probe_fail(u, c, i, "a key does not unpack on it");
            return;
        }
    }
    if (!(k = rx->probe_k) || i >= k->nrails) {
        put_back(u, c, i);
        return;
    }
    ucx_piece_t *pc = calloc(1, sizeof(*pc));
    if (!pc) {
        probe_fail(u, c, i, "out of memory");
        return;
    }
    pc->probe = true;
    pc->c = c;
    pc->rail = i;
    pc->t0 = nxlt_now_us();
    LIST_INSERT_HEAD(&u->rails->pieces, pc, link);
    rx->probe[i] = pc;
    ucp_request_param_t p = {0};
    u->in_ucx++;
    ucs_status_ptr_t q = ucp_get_nbx(rx->probe_ep[i], pc->buf, 1, rx->probe_raddr,
                                     k->rail_rk[i], &p);
    if (UCS_PTR_IS_ERR(q)) {
        probe_done(NULL, UCS_PTR_STATUS(q), pc);
    } else {
        if (UCS_PTR_IS_PTR(q))
            ucp_request_free(q); /* the flush waits for it */
        ucp_request_param_t fp = {
            .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
            .cb.send = probe_done,
            .user_data = pc,
        };
        q = ucp_ep_flush_nbx(rx->probe_ep[i], &fp);
        if (!UCS_PTR_IS_PTR(q))
            probe_done(NULL, UCS_PTR_STATUS(q), pc);
    }
    u->in_ucx--;
}

/* ------------------------------------------------ aborts at a deadline */

/* UCX holds nothing of c's rails any more (their closes completed): the
 * pieces of its aborted ops are detached (a late callback frees only the
 * piece), the ops done with UCX once their last piece is; then the abort
 * may complete (conn.c) */
static void rails_aborted(ucx_conn_t *c)
{
    ucx_t *u = c->u;
    ucx_piece_t *pc, *next;
    ucx_op_t *o;
    for (pc = LIST_FIRST(&u->rails->pieces); pc; pc = next) {
        next = LIST_NEXT(pc, link);
        if (pc->c != c || !(o = pc->o) || !o->aborted)
            continue;
        pc->o = NULL;
        if (pc->notif) { /* UCX let go of it with the rail's close */
            nxl_ucx_op_finish(o, UCS_ERR_CANCELED);
            continue;
        }
        if (pc->done) { /* its flush came back already */
            LIST_REMOVE(pc, link);
            free(pc);
        }
        if (--o->pieces == 0)
            op_pieces_done(o); /* the op waits for the abort (rma.c, op_finish) */
    }
    nxl_ucx_abort_done(c);
}

static void rail_abort_cb(void *req, ucs_status_t st, void *arg)
{
    ucx_conn_t *c = arg;
    c->u->rails->nclosing--;
    ucp_request_free(req);
    if (--c->rail_aborts == 0)
        rails_aborted(c);
    nxl_ucx_conn_put(c);
}

/* At a deadline (conn.c, conn_abort, before the main endpoint's close):
 * c's rail endpoints are closed by force too, so that UCX lets go of the
 * aborted ops' pieces; the abort completes once these closes did too
 * (c->rail_aborts). The rails are tried again as rails taken out are. */
void nxl_ucx_rails_abort(ucx_conn_t *c)
{
    ucx_t *u = c->u;
    struct ucx_conn_rails *rx = c->rx;
    if (!rx)
        return;
    unsigned n = 0;
    for (unsigned i = 0; i < c->nrails; i++) {
        c->rail_failed &= ~(1u << i);
        if (rx->probe_ep[i]) /* a try under way: over, it is tried again below */
            probe_fail(u, c, i, "its connection aborted at a deadline");
        if (!c->rail_ep[i])
            continue;
        ucp_ep_h ep = c->rail_ep[i];
        c->rail_ep[i] = NULL;
        ucp_request_param_t p = {
            .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                            UCP_OP_ATTR_FIELD_FLAGS,
            .flags = UCP_EP_CLOSE_FLAG_FORCE,
            .cb.send = rail_abort_cb,
            .user_data = c,
        };
        u->in_ucx++;
        ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &p);
        u->in_ucx--;
        if (UCS_PTR_IS_PTR(r)) {
            u->rails->nclosing++;
            c->rail_aborts++;
            c->refs++; /* until rail_abort_cb */
        }
        rx->tries[i] = 0;
        retry_later(u, c, i);
        n++;
    }
    if (n)
        nxlt_log(u->ctx, NXL_LOG_INFO, "UCX: %u rail(s) to agent '%s' closed by force with its "
                 "connection, at a deadline; tried again as rails taken out are", n, c->name);
    if (!c->rail_aborts)
        rails_aborted(c);
    nxl_ucx_kick(u);
}

/* the limit on a piece's time before its rail is taken out */
static uint64_t piece_limit(ucx_t *u, ucx_piece_t *pc)
{
    uint64_t cap = u->net.stall_us ? u->net.stall_us / 2 : UINT64_MAX;
    return nxl_rail_stall_us(&u->rails->r[pc->rail].rate, pc->bytes, RAIL_STALL_MIN_US, cap);
}

/* Rails that failed, or whose oldest piece stalls, are taken out; rails
 * out are tried again when due; the timer set for what is due next */
static void rails_check(ucx_t *u)
{
    struct ucx_rails *rs = u->rails;
    uint64_t now = nxlt_now_us(), next = UINT64_MAX;
    ucx_conn_t *c;
    LIST_FOREACH(c, &u->conns, link)
    {
        uint64_t m = main_retry(u, c, now);
        if (m < next)
            next = m;
    }
    LIST_FOREACH(c, &u->conns, link)
    for (unsigned i = 0; i < c->nrails; i++) {
        struct ucx_conn_rails *rx = c->rx;
        if (c->rail_failed & (1u << i)) {
            if (rx && rx->probe_ep[i])
                probe_fail(u, c, i, "its endpoint failed");
            else
                take_out(u, c, i, "its endpoint failed");
        }
        if (!rx || c->failed || c->unloaded)
            continue;
        if ((rx->probe_ok & (1u << i)) && rx->probe_ep[i]) {
            rx->probe_ok &= ~(1u << i);
            put_back(u, c, i);
        }
        if (rx->probe[i] && now - rx->probe[i]->t0 > RAIL_PROBE_US)
            probe_fail(u, c, i, "its probe not through after 1 s");
        if (!c->rail_ep[i] && !rx->probe_ep[i] && now >= rx->retry_at[i])
            rail_retry(u, c, i);
        if (rx->probe[i] && rx->probe[i]->t0 + RAIL_PROBE_US < next)
            next = rx->probe[i]->t0 + RAIL_PROBE_US;
        else if (!c->rail_ep[i] && !rx->probe_ep[i] && rx->retry_at[i] < next)
            next = rx->retry_at[i];
    }
    ucx_piece_t *pc;
again:
    LIST_FOREACH(pc, &rs->pieces, link)
    {
        if (!pc->o || !pc->c->rail_ep[pc->rail] || pc->c->failed)
            continue;
        uint64_t lim = piece_limit(u, pc);
        if (now > pc->t0 && now - pc->t0 > lim) { /* (pieces posted again after now: not) */
            char why[96];
            snprintf(why, sizeof(why), "a piece of %zu bytes not done after %llu ms", pc->bytes,
                     (unsigned long long)((now - pc->t0) / 1000));
            take_out(u, pc->c, pc->rail, why);
            goto again; /* the list changed */
        }
        if (pc->t0 + lim + 1000 < next)
            next = pc->t0 + lim + 1000;
    }
    if (next != UINT64_MAX)
        nxlt_timer_start(rs->timer, next > now ? next - now : 0);
}

/* Each rail's share of total bytes (in proportion to its throughput, at
 * least 1/(16n) each), summing to total; 0 for rails taken out */
static void shares(ucx_t *u, ucx_conn_t *c, size_t total, size_t *share)
{
    nxl_rail_rate_t r[NXL_UCX_RAILS_MAX];
    unsigned live = 0;
    for (unsigned i = 0; i < c->nrails; i++) {
        r[i] = u->rails->r[i].rate;
        if (c->rail_ep[i])
            live |= 1u << i;
    }
    nxl_rail_shares(r, c->nrails, live, total, share);
}

/* Posts bytes [start, start + total) of o's transfer (its elements in
 * o->iov) over c's live rails; o->pieces counts each piece. 0, or -1 (out
 * of memory: nothing posted). Inside or outside the engine's calls. */
static int post_range(ucx_t *u, ucx_op_t *o, size_t start, size_t total)
{
    ucx_conn_t *c = o->conn;
    unsigned n = c->nrails;
    size_t share[NXL_UCX_RAILS_MAX];
    shares(u, c, total, share);
    char say[NXL_UCX_RAILS_MAX * 48] = "";
    for (unsigned r = 0, l = 0; r < n && l < sizeof(say); r++)
        l += (unsigned)snprintf(say + l, sizeof(say) - l, "%s%s %zu", r ? ", " : "",
                                u->rails->r[r].dev, share[r]);
    nxlt_log(u->ctx, NXL_LOG_DEBUG, "UCX: a %s of %zu bytes (from byte %zu) to agent '%s' over "
             "rails: %s", o->read ? "READ" : "WRITE", total, start, c->name, say);
    ucx_piece_t *pcs[NXL_UCX_RAILS_MAX] = {0};
    for (unsigned r = 0; r < n; r++)
        if (share[r] && !(pcs[r] = calloc(1, sizeof(ucx_piece_t)))) {
            for (unsigned k = 0; k < r; k++)
                free(pcs[k]);
            return -1;
        }
    /* the element and offset where start falls */
    size_t el = 0, off = start;
    while (el < o->n && off >= o->iov[el].len)
        off -= o->iov[el++].len;
    size_t at = start;
    u->in_ucx++;
    for (unsigned r = 0; r < n; r++) {
        if (!pcs[r])
            continue;
        ucx_piece_t *pc = pcs[r];
        ucp_ep_h ep = c->rail_ep[r];
        pc->o = o;
        pc->c = c;
        pc->rail = r;
        pc->start = at;
        pc->bytes = share[r];
        pc->t0 = nxlt_now_us();
        at += share[r];
        for (size_t left = share[r]; left && el < o->n;) {
            const nxlt_iov_t *v = &o->iov[el];
            size_t l = v->len - off < left ? v->len - off : left;
            ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_MEMH,
                                     .memh = ((ucx_md_t *)v->lmd)->rail_memh[r]};
            ucp_rkey_h rk = ((ucx_rkey_t *)v->rkey)->rail_rk[r];
            void *la = (char *)v->laddr + off;
            ucs_status_ptr_t q = !o->read ? ucp_put_nbx(ep, la, l, v->raddr + off, rk, &p)
                                          : ucp_get_nbx(ep, la, l, v->raddr + off, rk, &p);
            if (UCS_PTR_IS_ERR(q))
                c->rail_failed |= 1u << r; /* its flush fails too: posted again from the loop */
            else if (UCS_PTR_IS_PTR(q))
                ucp_request_free(q); /* the flush below waits for it */
            left -= l;
            off += l;
            if (off == v->len)
                el++, off = 0;
        }
        LIST_INSERT_HEAD(&u->rails->pieces, pc, link);
        o->pieces++;
        ucp_request_param_t fp = {
            .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
            .cb.send = piece_done,
            .user_data = pc,
        };
        ucs_status_ptr_t q = ucp_ep_flush_nbx(ep, &fp);
        if (!UCS_PTR_IS_PTR(q))
            piece_done(NULL, UCS_PTR_STATUS(q), pc);
    }
    u->in_ucx--;
    return 0;
}

/* Striped when x is large enough and every element has its rails: 1 (the
 * op is posted), 0 (the main path's: nothing done), -1 (out of memory) */
int nxl_ucx_rails_post(ucx_t *u, nxlt_op_t *op, ucx_conn_t *c, const nxlt_xfer_t *x)
{
    if (!u->rails || c->nrails < 2 || x->ltype != NXL_DRAM || x->rtype != NXL_DRAM)
        return 0;
    /* aborted at a deadline, its new main endpoint not through: the main
     * path's (what waits for the endpoint waits there, rma.c) */
    if (!c->main_out && (c->aborted || c->wiring || c->abort_req || !c->ep))
        return 0;
    unsigned n = c->nrails, live = 0;
    for (unsigned r = 0; r < n; r++)
        live += c->rail_ep[r] != NULL;
    if (live == 0)
        return 0;
    size_t total = 0;
    for (size_t i = 0; i < x->n; i++) {
        const nxlt_iov_t *v = &x->iov[i];
        if (((ucx_md_t *)v->lmd)->nrails < n || ((ucx_rkey_t *)v->rkey)->nrails < n)
            return 0;
        total += v->len;
    }
    if (total < u->rails->min && !c->main_out) /* the main endpoint out: every size */
        return 0;
    /* where a rail's probe reads a byte (rail_retry) */
    c->rx->probe_k = x->iov[0].rkey;
    c->rx->probe_raddr = x->iov[0].raddr;
    ucx_op_t *o = nxl_ucx_op_new(u, op, c, nxl_agent_name(nxlt_agent(u->ctx)), x->notif,
                                 x->notif_len, x->notif != NULL);
    if (!o)
        return -1;
    /* the elements, kept with the op: a rail taken out has its range posted again */
    if (nxl_ucx_op_keep_iov(o, x) != 0) {
        nxl_ucx_op_drop(o);
        return -1;
    }
    o->pieces = 1; /* held until every piece is posted */
    if (post_range(u, o, 0, total) != 0) {
        nxl_ucx_op_drop(o);
        return -1;
    }
    if (--o->pieces == 0)
        op_pieces_done(o);
    nxl_ucx_kick(u);
    return 1;
}

/* ------------------------------------------- the main endpoint out
 *
 * The main endpoint (the devices parameter) carries a connection's
 * notifications, the transport's own messages and the transfers below
 * rail_min. When an op on it is not done after RAIL_STALL_MIN_US (at most
 * half the stall timeout, as a rail's piece) while a rail to the peer is
 * up, the main endpoint is taken out as a rail is (main_out): what the
 * kernel still holds of its TCP socket is dropped (tcpreset.c: not sent
 * once the link is back, so that nothing moved below lands twice), the
 * endpoint is closed by force, and its ops are moved onto the rails: their
 * elements (kept with every main-path op of a connection with rails) are
 * posted again as a striped transfer of any size, their notification sent
 * on a rail once those pieces' flushes are through (the bytes at the
 * target before the notification, as on the main path). Until the main
 * endpoint is back every transfer and notification to the peer goes over
 * the rails. UCX's requests on the closed endpoint still name the ops:
 * an op is freed at the last of its two ends (main_held, moved_done). The
 * one-message paths answer on the main endpoints: not used while it is
 * out, nor afterwards until the peer's own message is heard again.
 *
 * The side whose op stalls tells the peer on a rail (NXL_UCX_AM_MAIN_OUT):
 * the peer's notifications complete into its kernel's socket buffer and
 * never stall, and its main endpoint shares the connection reset here; it
 * takes its own main endpoint out (from the loop), and both answer over
 * the rail that last carried something (a piece, or a message of the
 * peer's: rail_best). A stall is detected by the rails' rule (1 s or 4
 * times what the fastest rail's rate predicts, at most half the stall
 * timeout); UCX's error on the main endpoint takes it out too (from the
 * loop: main_due), what UCX failed before that failing.
 *
 * The main endpoint is tried again as a rail is (nxl_rail_retry_later): a
 * new endpoint to the peer's worker, the keys unpacked on it, and the
 * first message of a new endpoint (conn.c), with the drained mark: the
 * peer renews nothing for it. Once UCX completed that message (within
 * RAIL_PROBE_US) the main endpoint carries again. A try that fails (or
 * UCX's error on it) is closed by force from the loop, and the next one
 * waits. With no rail left either, the connection fails (the peer DOWN),
 * as the stall timeout does with no rails. While the main endpoint is
 * out, deadlines abort nothing on the connection (conn.c): the rails'
 * stall rule takes out a rail that holds a piece. */

static unsigned rail_best(const ucx_conn_t *c);

static unsigned rails_live(const ucx_conn_t *c)
{
    unsigned n = 0;
    for (unsigned i = 0; i < c->nrails; i++)
        n += c->rail_ep[i] != NULL;
    return n;
}

/* o waits on its connection's main endpoint */
static bool on_main(const ucx_op_t *o, const ucx_conn_t *c)
{
    return o->conn == c && o->op && !o->pieces && !o->queued && !o->wire_wait && !o->aborted &&
           !o->main_held;
}

/* a UCX callback of the main endpoint's for o: true when o was moved
 * onto the rails (nothing more to do there; freed if the rails are done) */
bool nxl_ucx_main_moved(ucx_op_t *o)
{
    if (!o->main_held)
        return false;
    o->main_held = false;
    if (o->moved_done)
        nxl_ucx_op_free(o);
    return true;
}

static void rail_notif_done(void *req, ucs_status_t st, void *arg)
{
    ucx_piece_t *pc = arg;
    ucx_op_t *o = pc->o;
    if (req)
        ucp_request_free(req);
    LIST_REMOVE(pc, link);
    if (!o) { /* detached: sent again on another rail */
        free(pc);
        return;
    }
    ucx_conn_t *c = pc->c;
    unsigned i = pc->rail;
    free(pc);
    if (st == UCS_OK && c->rx)
        c->rx->ok_us[i] = nxlt_now_us();
    if (st != UCS_OK && c->rail_ep[i] && !c->failed) {
        /* its rail failed: taken out from the loop; sent again on another
         * one (the failed send's bytes were not delivered) */
        c->rail_failed |= 1u << i;
        nxl_ucx_kick(o->u);
        unsigned left = rails_live(c) - 1;
        if (left) {
            ucp_ep_h keep = c->rail_ep[i];
            c->rail_ep[i] = NULL; /* not chosen again */
            notif_again(o, left);
            c->rail_ep[i] = keep;
            return;
        }
    }
    nxl_ucx_op_finish(o, st);
}

/* o's notification on the live rail that last completed a piece (as a
 * piece: taken out with its rail when it stalls, sent again on another):
 * false when the main endpoint is not out, or no rail is up */
bool nxl_ucx_rails_notif(ucx_op_t *o)
{
    ucx_conn_t *c = o->conn;
    if (!c->main_out)
        return false;
    unsigned i = rail_best(c);
    if (i == NXL_UCX_RAILS_MAX)
        return false;
    ucx_t *u = o->u;
    ucx_piece_t *pc = calloc(1, sizeof(*pc));
    if (!pc)
        return false;
    pc->o = o;
    pc->c = c;
    pc->rail = i;
    pc->notif = true;
    pc->t0 = nxlt_now_us();
    LIST_INSERT_HEAD(&u->rails->pieces, pc, link);
    o->rail_notif = true;
    u->in_ucx++;
    ucs_status_ptr_t r = nxl_ucx_am_send(c->rail_ep[i], NXL_UCX_AM_NOTIF, NULL, 0, o->notif,
                                         o->notif_len, 0, rail_notif_done, pc);
    u->in_ucx--;
    if (!UCS_PTR_IS_PTR(r))
        rail_notif_done(NULL, UCS_PTR_STATUS(r), pc);
    nxl_ucx_kick(u);
    return true;
}

/* o's notification, its rail taken out (@p left rails up) */
static void notif_again(ucx_op_t *o, unsigned left)
{
    if (!left || !o->op || !nxl_ucx_rails_notif(o))
        nxl_ucx_op_finish(o, o->op ? UCS_ERR_ENDPOINT_TIMEOUT : UCS_ERR_CANCELED);
}

/* o (moved off the main endpoint) posted again on the rails */
static void main_move(ucx_t *u, ucx_conn_t *c, ucx_op_t *o)
{
    if (o->amw) { /* a one-message WRITE or READ: its answer would come on the main path */
        if (!o->amw_acked)
            LIST_REMOVE(o, ack_link);
        o->amw_acked = true;
        o->amw = o->amr = false;
        o->notif = NULL; /* the message (a WRITE with a notification is not sent so here) */
        o->notif_len = 0;
    }
    size_t total = 0;
    bool railed = o->n > 0;
    for (size_t i = 0; i < o->n; i++) {
        const nxlt_iov_t *v = &o->iov[i];
        total += v->len;
        railed &= ((ucx_md_t *)v->lmd)->nrails >= c->nrails &&
                  ((ucx_rkey_t *)v->rkey)->nrails >= c->nrails;
    }
    if (o->n == 0 && o->notif) { /* a notification alone */
        if (!nxl_ucx_rails_notif(o))
            nxl_ucx_op_finish(o, UCS_ERR_ENDPOINT_TIMEOUT);
        return;
    }
    if (!railed || !total) {
        if (!o->why)
            o->why = strdup("UCX: the main path to the peer stalled, and this transfer's "
                            "regions are not registered with every rail");
        nxl_ucx_op_finish(o, UCS_ERR_ENDPOINT_TIMEOUT);
        return;
    }
    o->t0 = nxl_ucx_coarse_us();
    o->pieces = 1; /* held while posted */
    if (post_range(u, o, 0, total) != 0 && o->st == UCS_OK)
        o->st = UCS_ERR_NO_MEMORY;
    if (--o->pieces == 0)
        op_pieces_done(o);
}

/* the live rail of c that last carried something (a piece, a message
 * of the peer's), or NXL_UCX_RAILS_MAX when none is up */
static unsigned rail_best(const ucx_conn_t *c)
{
    unsigned i = NXL_UCX_RAILS_MAX;
    for (unsigned k = 0; k < c->nrails; k++)
        if (c->rail_ep[k] && (i == NXL_UCX_RAILS_MAX || c->rx->ok_us[k] > c->rx->ok_us[i]))
            i = k;
    return i;
}

/* The peer is told on a rail (NXL_UCX_AM_MAIN_OUT, our name): a link cut
 * on the main path is seen by the side whose ops stall there, while the
 * other side's notifications complete into its kernel's socket buffer and
 * never stall; its main endpoint shares the connection ours reset. */
static void main_out_tell(ucx_t *u, ucx_conn_t *c)
{
    unsigned i = rail_best(c);
    const char *me = nxl_agent_name(nxlt_agent(u->ctx));
    size_t nl = strlen(me);
    ucx_side_t *m = i < NXL_UCX_RAILS_MAX && nl < 256 ? malloc(sizeof(*m) + 2 + nl) : NULL;
    if (!m)
        return;
    m->len = 2 + nl;
    nxl_ucx_name_put(m->buf, me, nl);
    nxl_ucx_side_send(u, c->rail_ep[i], NXL_UCX_AM_MAIN_OUT, m);
}

static void main_out(ucx_t *u, ucx_conn_t *c, const char *why, bool tell);

/* the connection to agent @p from that has rails (not failed, not unloaded;
 * its main endpoint may be out), or NULL */
static ucx_conn_t *rails_conn_named(ucx_t *u, const char *from)
{
    ucx_conn_t *c;
    LIST_FOREACH(c, &u->conns, link)
    if (c->nrails && c->rx && !c->failed && !c->unloaded && !strcmp(c->name, from))
        return c;
    return NULL;
}

/* a message of the peer's on rail r: that rail carries (rail_best) */
static ucx_conn_t *rail_heard(ucx_rail_t *r, const void *data, size_t len)
{
    char from[256];
    ucx_conn_t *c = nxl_ucx_name_get(data, len, from) ? rails_conn_named(r->u, from) : NULL;
    if (c && r->idx < c->nrails)
        c->rx->ok_us[r->idx] = nxlt_now_us();
    return c;
}

static ucs_status_t rail_am_notif(void *arg, const void *header, size_t hlen, void *data,
                                  size_t len, const ucp_am_recv_param_t *param)
{
    ucx_rail_t *r = arg;
    if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV))
        rail_heard(r, data, len);
    return nxl_ucx_am_recv(r->u, header, hlen, data, len, param);
}

static ucs_status_t rail_am_main_out(void *arg, const void *header, size_t hlen, void *data,
                                     size_t len, const ucp_am_recv_param_t *param)
{
    ucx_rail_t *r = arg;
    ucx_t *u = r->u;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)
        return UCS_OK;
    ucx_conn_t *c = rail_heard(r, data, len);
    if (!c || c->main_out || !c->ep || c->wiring || c->aborted || c->abort_req ||
        c->renew_due || !rails_live(c))
        return UCS_OK;
    c->main_due = UCS_ERR_CANCELED; /* taken out from the loop (nxl_ucx_main_due), not
                                     * inside UCX's call */
    nxl_ucx_kick(u);
    return UCS_OK;
}

/* c's main endpoint out: closed, its ops onto the rails; the peer told
 * (@p tell) */
/* From the loop, or a post (rma.c): c's main endpoint taken out if its
 * failure (UCX's error, or the peer's word) waits for it (c->main_due) */
void nxl_ucx_main_due(ucx_conn_t *c)
{
    ucs_status_t st = c->main_due;
    if (st == UCS_OK)
        return;
    c->main_due = UCS_OK;
    if (!c->main_out && c->ep && !c->failed && !c->unloaded && !c->wiring && !c->aborted &&
        !c->abort_req && rails_live(c))
        main_out(c->u, c, st == UCS_ERR_CANCELED ? "the peer took its main endpoint to us out"
                                                 : ucs_status_string(st),
                 st != UCS_ERR_CANCELED);
    else if (st != UCS_ERR_CANCELED && !c->main_out && !c->failed)
        nxl_ucx_conn_fail(c, st, false); /* no rail up meanwhile: as without rails */
}

static void main_out(ucx_t *u, ucx_conn_t *c, const char *why, bool tell)
{
    c->main_due = UCS_OK;
    size_t n = 0, k = 0;
    ucx_op_t *o;
    LIST_FOREACH(o, &u->ops, link)
    n += on_main(o, c);
    ucx_op_t **mv = n ? malloc(n * sizeof(*mv)) : NULL;
    if (n && !mv)
        return; /* the stall timeout decides, as without rails */
    LIST_FOREACH(o, &u->ops, link)
    if (on_main(o, c)) {
        /* UCX's request on the main endpoint still names it (not a
         * one-message WRITE or READ sent, waiting for its answer) */
        o->main_held = !(o->amw && o->amw_sent);
        mv[k++] = o;
    }
    c->main_out = true;
    c->heard = false; /* the one-message paths wait for the peer's word again */
    c->fence = c->fence_only = false;
    c->main_tries = 0;
    if (!c->main_backoff_ms)
        c->main_backoff_ms = RAIL_RETRY_MIN_MS;
    nxl_rail_retry_later(&c->main_retry_at, &c->main_backoff_ms, nxlt_now_us());
    nxlt_log(u->ctx, NXL_LOG_WARN, "UCX: the main endpoint to agent '%s' taken out (%s): its "
             "%zu operation(s) and every transfer and notification to it go over the %u "
             "rail(s) up until it is back", c->name, why, n, rails_live(c));
    c->net.progress_us = nxl_ucx_coarse_us(); /* its ops start again: not a stall of the peer */
    if (tell)
        main_out_tell(u, c);
    c->refs++;
    /* over TCP what the kernel holds of it is dropped, never delivered
     * after what is posted again on the rails (tcpreset.c) */
    nxl_ucx_socks_reset_unacked(&c->socks);
    if (c->ep) {
        c->forced = true;
        nxl_ucx_ep_close(u, c->ep, true);
        c->ep = NULL;
    }
    for (size_t i = 0; i < n; i++)
        main_move(u, c, mv[i]);
    free(mv);
    nxl_ucx_conn_put(c);
    nxl_ucx_kick(u);
}

/* From the watch (worker.c), while ops are in flight: c's main endpoint
 * stalled while a rail is up? */
void nxl_ucx_main_check(ucx_t *u, ucx_conn_t *c, uint64_t now)
{
    if (!u->rails || c->main_out || c->nrails < 2 || c->failed || c->fail_deferred ||
        c->unloaded || !c->ep || c->wiring || c->aborted || c->abort_req || c->renew_due ||
        !rails_live(c))
        return;
    /* the rule of a rail's piece, at the fastest rail's measured rate (the
     * main path has none of its own) */
    uint64_t cap = u->net.stall_us ? u->net.stall_us / 2 : UINT64_MAX;
    const nxl_rail_rate_t *rate = &u->rails->r[0].rate;
    for (unsigned i = 1; i < c->nrails; i++)
        if (u->rails->r[i].rate.bps > rate->bps)
            rate = &u->rails->r[i].rate;
    uint64_t lo = RAIL_STALL_MIN_US < cap ? RAIL_STALL_MIN_US : cap;
    ucx_op_t *o;
    LIST_FOREACH(o, &u->ops, link)
    {
        if (!on_main(o, c) || now <= o->t0 || now - o->t0 <= lo)
            continue;
        size_t bytes = 0;
        for (size_t i = 0; i < o->n; i++)
            bytes += o->iov[i].len;
        if (now - o->t0 <= nxl_rail_stall_us(rate, bytes, RAIL_STALL_MIN_US, cap))
            continue;
        char why[96];
        snprintf(why, sizeof(why), "an operation on it not done after %llu ms",
                 (unsigned long long)((now - o->t0) / 1000));
        main_out(u, c, why, true);
        return;
    }
}

/* conn.c: UCX failed c's main endpoint (@p status): true when a rail is up,
 * the endpoint then taken out (or its try over), not the connection */
bool nxl_ucx_main_fail(ucx_conn_t *c, ucs_status_t status)
{
    ucx_t *u = c->u;
    if (!u->rails || c->nrails < 2 || c->unloaded || c->self || c->local || !rails_live(c))
        return false;
    /* closed from the loop (main_retry): not inside UCX's error callback,
     * whose caller goes on with the endpoint (UCX 1.13 asserted in
     * wireup_ep.c:494 on a try's endpoint closed there) */
    if (c->main_out) { /* a try's endpoint failed */
        if (c->ep)
            c->main_try_failed = status;
        nxl_ucx_kick(u);
        return true;
    }
    if (c->wiring || c->aborted || c->abort_req || c->renew_due || !c->ep)
        return false;
    c->main_due = status;
    nxl_ucx_kick(u);
    return true;
}

/* a try of the main endpoint over, failed: closed by force, the next later */
static void main_try_fail(ucx_t *u, ucx_conn_t *c, const char *why)
{
    nxl_ucx_main_try_over(c);
    if (c->ep) {
        nxl_ucx_socks_reset_unacked(&c->socks);
        c->forced = true;
        nxl_ucx_ep_close(u, c->ep, true);
        c->ep = NULL;
    }
    unsigned wait = c->main_backoff_ms;
    nxl_rail_retry_later(&c->main_retry_at, &c->main_backoff_ms, nxlt_now_us());
    nxlt_log(u->ctx, NXL_LOG_DEBUG, "UCX: the main endpoint to agent '%s' still out (try %u: "
             "%s); tried again in %u ms", c->name, c->main_tries, why, wait);
    nxl_ucx_kick(u);
}

/* conn.c: the try's message completed (@p st) */
void nxl_ucx_main_hello(ucx_conn_t *c, ucs_status_t st)
{
    ucx_t *u = c->u;
    if (!c->main_out || !c->wiring)
        return;
    if (st != UCS_OK) {
        main_try_fail(u, c, ucs_status_string(st));
        return;
    }
    c->wiring = false;
    c->main_out = false;
    c->main_backoff_ms = RAIL_RETRY_MIN_MS;
    nxlt_log(u->ctx, NXL_LOG_INFO, "UCX: the main endpoint to agent '%s' is back (try %u): it "
             "carries notifications and transfers below rail_min again", c->name, c->main_tries);
    nxl_ucx_kick(u);
}

/* From rails_check: c's main endpoint out: tried when due, a try not
 * through after RAIL_PROBE_US failed; the time due next */
static uint64_t main_retry(ucx_t *u, ucx_conn_t *c, uint64_t now)
{
    nxl_ucx_main_due(c);
    if (!c->main_out || c->failed || c->unloaded)
        return UINT64_MAX;
    if (c->main_try_failed != UCS_OK) {
        ucs_status_t st = c->main_try_failed;
        c->main_try_failed = UCS_OK;
        if (c->ep)
            main_try_fail(u, c, ucs_status_string(st));
    }
    if (c->ep) { /* a try under way, since main_retry_at */
        if (now - c->main_retry_at > RAIL_PROBE_US)
            main_try_fail(u, c, "its first message not through after 1 s");
        else
            return c->main_retry_at + RAIL_PROBE_US;
    }
    if (c->ep || now < c->main_retry_at)
        return c->ep ? UINT64_MAX : c->main_retry_at;
    c->main_tries++;
    c->main_retry_at = now;
    ucs_status_t st = nxl_ucx_main_try(c);
    if (st != UCS_OK) {
        main_try_fail(u, c, ucs_status_string(st));
        return c->main_retry_at;
    }
    return c->main_out && c->ep ? now + RAIL_PROBE_US : UINT64_MAX;
}
