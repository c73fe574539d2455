/* SPDX-License-Identifier: BSD-3-Clause */
/* LIBFABRIC rails: one transfer striped over several endpoints to the same
 * peer, as the UCX transport's rails (ucx/rails.c) do with its workers.
 *
 * Where: the rails parameter names network interfaces ("rails=eth0,eth1");
 * each is a rail: the provider's entry on that interface (as the iface
 * parameter picks one), with a fabric, domain, address vector, completion
 * queue and RDM endpoint of its own, the CQ's wait fd watched by the
 * agent's loop. The main endpoint (provider, domain, iface) stays as it
 * was: notifications, the transport's own messages, small transfers.
 * Rails need a CQ with a wait fd (tcp;ofi_rxm, the sockets provider).
 *
 * Metadata: with rails, the connection info carries each rail's endpoint
 * name (wire.h: flag LF_CI_RAILS, a block after the doorbell; an agent
 * without rails sends none, so peers of older versions still load it),
 * and a region is registered in every rail's domain too, its key followed
 * by one key per rail (wire.h). Rail i of one side is connected to rail i
 * of the other (fi_av_insert in rail i's address vector); a peer with
 * fewer rails (or none) gets fewer (or the main path only).
 *
 * Splitting: a READ or WRITE of at least rail_min bytes, to a peer with
 * rails, between regions known to every rail, is cut into one contiguous
 * byte range per rail (across the transfer's elements), each rail's share
 * in proportion to its observed throughput (../common/railshare.h, as
 * UCX's). Each piece is its rail's fi_writemsg/fi_readmsg calls, with
 * FI_COMPLETION (and FI_DELIVERY_COMPLETE on writes where the rail's
 * provider offers it, as on the main path); the piece is done when all of
 * them completed.
 *
 * Completion: the op counts its pieces (rail_pieces); the last piece done
 * joins them: then, and only then, its notification goes on the main
 * endpoint (nxl_lf_try_post with nothing left but the notification), so
 * that a WRITE still completes (and notifies) only with every byte at the
 * target, and the engine's future completes once (op.c counts rail_pieces
 * as work in flight). Completed pieces stamp the connection's progress, so
 * a long striped transfer does not look stalled.
 *
 * Failover: a rail whose piece fails (an error completion, a post refused
 * outright), or whose piece is not done after RAIL_STALL_MIN_US or 4 times
 * what its measured rate predicts (whichever is longer; at most half the
 * stall timeout, which gives up the whole connection), is taken out for
 * that peer: its pieces are detached from their ops (a late completion
 * frees only the piece) and their byte ranges posted again on the rails
 * left (a rail to a peer whose connection failed is let go the same way,
 * its ops reported already); with FI_AV_REMOVE_CLEANUP (util.c), the
 * peer's address is removed from the rail's address vector, which closes
 * rxm's connection on that rail and hands back what it held (so a write of
 * the old rail does not land after the op completed). Over TCP its
 * sockets to the peer's rail address are set to reset on that close
 * (SO_LINGER 0, rail_drop_unsent): what the kernel still held of the
 * piece's writes is dropped, not sent when a cut link comes back, over
 * bytes written since. With no rail left the op fails.
 *
 * Retries (as UCX's, ../common/railshare.h): a rail taken out is tried
 * again after NXL_RAIL_RETRY_MIN_MS, then after twice as long each time a
 * try fails, NXL_RAIL_RETRY_MAX_MS at most (the rails' timer wakes the
 * loop for it). A try: the peer's rail address inserted again (where
 * taking the rail out removed it; the connection info's names are kept
 * with the connection); over TCP a connect of our own to that address
 * first (lf_reach_t: a link still down fails the try without rxm), from
 * the port of the rail's old connection (a peer still holding that
 * connection, its reset lost on the cut link, has it reset so: rxm there
 * refuses a new connection from us while it stands); then a probe: a READ
 * of one byte where a striped transfer went last, into a byte registered
 * for it, through within NXL_RAIL_PROBE_US (one the provider holds then
 * is canceled by removing the address again). Then the rail carries
 * pieces again, its share by its throughput as measured before; its
 * back-off starts again once a piece of it completes. A rail taken out
 * before any striped transfer went to the peer comes back without a probe.
 *
 * Deadlines: the abort of a connection at a deadline (conn.c, conn_abort;
 * with FI_AV_REMOVE_CLEANUP) closes its rails' connections too (their
 * addresses removed): the provider hands back the pieces it holds
 * (canceled), each aborted op completes once its last piece is back, with
 * NXL_ERR_TIMEOUT, and the rails are tried again as rails taken out are.
 * Over sockets the rails are not aborted: a striped op's TIMEOUT waits for
 * its pieces' stall (their rails taken out). */
#include "lf.h"
#include "../common/railshare.h"
#include "../common/tcpsock.h" /* the rails' TCP connections, by their peer */

#define RAIL_MIN_DEFAULT (256u << 10)
#define RAIL_STALL_MIN_US 1000000 /* a piece not done after this long may be on a dead rail */
#define RAIL_TICK_US 5000         /* while pieces are in flight: retries, stalls */
#define RAIL_CQ_BATCH 32
#define PROBE_ABORTED "its connection aborted at a deadline"
#define REACH_OLD_US 200000 /* a connect from the old port: then again from any port */

typedef struct lf_rail {
    char dev[IF_NAMESIZE + 1];
    struct fi_info *info;
    lf_fids_t fids;
    int wait_fd;
    nxlt_io_t *io;
    unsigned char name[256];    /* its endpoint's address */
    size_t name_len;
    bool dc;                    /* FI_DELIVERY_COMPLETE on writes */
    bool mr_prov_key, mr_endpoint;
    size_t max_msg;
    nxl_rail_rate_t rate;
} lf_rail_t;

/* a transfer's share on one rail: a byte range of its elements */
typedef struct lf_piece {
    lf_op_t *o;                 /* NULL: detached (its rail was taken out) */
    lf_conn_t *c;               /* held (refs) */
    unsigned rail;
    size_t start, bytes, sent;  /* its range in the transfer, and how much of it is posted */
    unsigned out;               /* provider operations in flight */
    bool blocked;               /* a post was refused (-FI_EAGAIN): the tick posts the rest */
    bool aborted;               /* its connection aborted at a deadline: what comes back of it
                                 * ends it, its rail stays as it is */
    bool probe;                 /* a rail's probe (rail_retry), not a transfer's piece */
    unsigned char buf[8];       /* ... the byte it reads, */
    struct fid_mr *mr;          /* ... registered in its rail's domain */
    int err;                    /* a post refused outright, or an error completion */
    uint64_t t0;
    LIST_ENTRY(lf_piece) link;
} lf_piece_t;

/* Over TCP, a try starts with a connect of our own to the peer's rail
 * address (its listener), from the loop: rxm is asked to connect only to a
 * rail that answers (rxm 1.17 asked while the link is down does not
 * connect again once it is back; asked while the peer holds our old
 * connection, it is refused) */
typedef struct lf_reach {
    lf_conn_t *c;               /* held (refs) */
    unsigned rail;
    int fd;
    nxlt_io_t *io;
    bool from_old;              /* from the old connection's port (rail_retry) */
    uint64_t t0;
} lf_reach_t;

/* a connection's rails, beyond lf_conn_t's: what a retry needs */
struct lf_conn_rails {
    unsigned char name[LF_RAILS_MAX][256]; /* the peer's rails' endpoint names */
    size_t name_len[LF_RAILS_MAX];
    unsigned removed;                   /* a bit per rail whose peer address we removed */
    uint64_t retry_at[LF_RAILS_MAX];    /* a rail taken out: when it is tried again */
    unsigned backoff_ms[LF_RAILS_MAX];  /* the wait after its next failed try */
    unsigned tries[LF_RAILS_MAX];       /* tries since it was taken out */
    lf_piece_t *probe[LF_RAILS_MAX];    /* a try's probe under way */
    struct lf_reach *reach[LF_RAILS_MAX]; /* ... or the connect to its listener before it */
    struct sockaddr_storage old_local[LF_RAILS_MAX]; /* the local address of the rail's */
    socklen_t old_len[LF_RAILS_MAX];    /* ... connection when it was taken out (0: none) */
    bool have_probe;                    /* where a striped transfer went last: */
    uint64_t probe_raddr;               /* ... its address as the provider takes it, */
    unsigned probe_nrails;              /* ... and the region's keys in the peer's rails */
    uint64_t probe_key[LF_RAILS_MAX];
};

struct lf_rails {
    unsigned n;
    size_t min;
    bool closed;                /* quiesce closed the rails' endpoints */
    uint64_t next_key;
    nxlt_timer_t *tm;
    uint64_t tm_at;             /* when tm is due, while pending */
    lf_rail_t r[LF_RAILS_MAX];
    LIST_HEAD(, lf_piece) pieces;
};

/* the tick at @p at_us at the latest */
static void rails_tick_at(lf_t *u, uint64_t at_us)
{
    struct lf_rails *rs = u->rails;
    if (!rs->tm || rs->closed || (nxlt_timer_pending(rs->tm) && rs->tm_at <= at_us))
        return;
    uint64_t now = nxlt_now_us();
    nxlt_timer_start(rs->tm, at_us > now ? at_us - now : 0);
    rs->tm_at = at_us;
}

static void rails_tick_soon(lf_t *u, uint64_t us) { rails_tick_at(u, nxlt_now_us() + us); }

/* ------------------------------------------------------------ life */

static nxl_status_t rail_fail(lf_t *u, lf_rail_t *r, const char *call, int err)
{
    nxlt_error(u->ctx, "LIBFABRIC: rail '%s' (rails parameter) could not start: %s failed on "
               "provider %s: %s (is it a network interface the provider lists, 'fi_info -p "
               "\"%s\"'?)", r->dev, call, u->prov, fi_strerror(err < 0 ? -err : err), u->prov);
    return NXL_ERR_BACKEND;
}

static void on_rail_fd(nxlt_io_t *io, int fd, unsigned ready, void *arg);
static void reach_end(lf_reach_t *r);

static nxl_status_t rail_open(lf_t *u, lf_rail_t *r)
{
    bool dc;
    nxl_status_t st = nxl_lf_pick(u->ctx, u->prov, NULL, r->dev, !u->dc, &r->info, &dc);
    if (st != NXL_SUCCESS)
        return st;
    struct fi_info *fi = r->info;
    if (strcmp(fi->fabric_attr->prov_name, u->prov) || fi->addr_format != u->addr_format) {
        nxlt_error(u->ctx, "LIBFABRIC: rail '%s' (rails parameter) has provider %s, the main "
                   "endpoint %s: name interfaces of the main endpoint's provider", r->dev,
                   fi->fabric_attr->prov_name, u->prov);
        return NXL_ERR_INVALID_PARAM;
    }
    r->dc = dc;
    uint64_t mm = (uint64_t)fi->domain_attr->mr_mode;
    r->mr_prov_key = mm & FI_MR_PROV_KEY;
    r->mr_endpoint = mm & FI_MR_ENDPOINT;
    r->max_msg = fi->ep_attr->max_msg_size ? fi->ep_attr->max_msg_size : (1ull << 30);
    if (r->max_msg > (1ull << 30))
        r->max_msg = 1ull << 30;
    struct fi_av_attr aa = {.type = fi->domain_attr->av_type == FI_AV_UNSPEC
                                        ? FI_AV_TABLE
                                        : fi->domain_attr->av_type};
    size_t txs = fi->tx_attr->size ? fi->tx_attr->size : 256;
    struct fi_cq_attr ca = {.size = txs + 64, .format = FI_CQ_FORMAT_CONTEXT,
                            .wait_obj = FI_WAIT_FD};
    int e;
    if ((e = fi_fabric(fi->fabric_attr, &r->fids.fabric, NULL)))
        return rail_fail(u, r, "fi_fabric", e);
    if ((e = fi_domain(r->fids.fabric, fi, &r->fids.domain, NULL)))
        return rail_fail(u, r, "fi_domain", e);
    if ((e = fi_av_open(r->fids.domain, &aa, &r->fids.av, NULL)))
        return rail_fail(u, r, "fi_av_open", e);
    if ((e = fi_cq_open(r->fids.domain, &ca, &r->fids.cq, NULL)))
        return rail_fail(u, r, "fi_cq_open with FI_WAIT_FD", e);
    if ((e = fi_control(&r->fids.cq->fid, FI_GETWAIT, &r->wait_fd)) || r->wait_fd < 0) {
        nxlt_error(u->ctx, "LIBFABRIC: rail '%s': provider %s gives its completion queue no wait "
                   "fd, which rails need (tcp;ofi_rxm has one)", r->dev, u->prov);
        r->wait_fd = -1;
        return NXL_ERR_NOT_SUPPORTED;
    }
    fi->tx_attr->op_flags = 0;
    if ((e = fi_endpoint(r->fids.domain, fi, &r->fids.ep, NULL)))
        return rail_fail(u, r, "fi_endpoint", e);
    if ((e = fi_ep_bind(r->fids.ep, &r->fids.av->fid, 0)) ||
        (e = fi_ep_bind(r->fids.ep, &r->fids.cq->fid, FI_TRANSMIT | FI_RECV)))
        return rail_fail(u, r, "fi_ep_bind", e);
    if ((e = fi_enable(r->fids.ep)))
        return rail_fail(u, r, "fi_enable", e);
    r->name_len = sizeof(r->name);
    if ((e = fi_getname(&r->fids.ep->fid, r->name, &r->name_len)))
        return rail_fail(u, r, "fi_getname", e);
    r->io = nxlt_io_new(u->ctx, r->wait_fd, on_rail_fd, u);
    if (!r->io || nxlt_io_start(r->io, NXLT_IO_READ)) {
        nxlt_error(u->ctx, "LIBFABRIC: rail '%s': watching its completion queue failed", r->dev);
        return NXL_ERR_BACKEND;
    }
    return NXL_SUCCESS;
}

static void on_tick(nxlt_timer_t *t, void *arg);

/* The rails and rail_min parameters: an endpoint per rail. On failure the
 * caller destroys u (and the rails opened). */
nxl_status_t nxl_lf_rails_open(lf_t *u, const nxl_param_t *params, size_t n)
{
    const char *list = nxlt_param(params, n, "rails");
    if (!list || !*list)
        return NXL_SUCCESS;
    uint64_t min = RAIL_MIN_DEFAULT;
    nxl_status_t st = nxlt_param_uint(u->ctx, params, n, "rail_min", 1, UINT64_MAX, &min);
    if (st != NXL_SUCCESS)
        return st;
    if (u->wait_fd < 0) {
        nxlt_error(u->ctx, "LIBFABRIC: rails=%s: rails need progress on the completion queue's "
                   "wait fd (progress=fd; provider tcp;ofi_rxm), this endpoint is progressed "
                   "from a timer (%s)", list, u->mode_why ? u->mode_why : "?");
        return NXL_ERR_NOT_SUPPORTED;
    }
    struct lf_rails *rs = calloc(1, sizeof(*rs));
    if (!rs)
        return NXL_ERR_UNKNOWN;
    rs->min = (size_t)min;
    LIST_INIT(&rs->pieces);
    for (unsigned i = 0; i < LF_RAILS_MAX; i++)
        rs->r[i].wait_fd = -1;
    u->rails = rs;
    if (!(rs->tm = nxlt_timer_new(u->ctx, on_tick, u)))
        return NXL_ERR_UNKNOWN;
    for (const char *p = list; *p;) {
        size_t l = strcspn(p, ",");
        if (l == 0 || l > IF_NAMESIZE || rs->n == LF_RAILS_MAX) {
            nxlt_error(u->ctx, "LIBFABRIC: rails=%s: a comma-separated list of 2 to %d network "
                       "interfaces", list, LF_RAILS_MAX);
            return NXL_ERR_INVALID_PARAM;
        }
        lf_rail_t *r = &rs->r[rs->n++];
        memcpy(r->dev, p, l);
        if ((st = rail_open(u, r)) != NXL_SUCCESS)
            return st;
        p += l + (p[l] == ',');
    }
    if (rs->n < 2) {
        nxlt_error(u->ctx, "LIBFABRIC: rails=%s: name 2 to %d network interfaces (one is the "
                   "main endpoint's job: iface)", list, LF_RAILS_MAX);
        return NXL_ERR_INVALID_PARAM;
    }
    size_t at = strlen(u->desc);
    snprintf(u->desc + at, sizeof(u->desc) - at, ", rails %s", list);
    nxlt_log(u->ctx, NXL_LOG_INFO, "LIBFABRIC: %u rails (%s): transfers of %zu B and more to "
             "peers with rails are striped over them", rs->n, list, rs->min);
    return NXL_SUCCESS;
}

static unsigned rail_drain(lf_t *u, lf_rail_t *r);

static void piece_free(lf_piece_t *p)
{
    if (p->mr)
        fi_close(&p->mr->fid);
    LIST_REMOVE(p, link);
    nxl_lf_conn_put(p->c);
    free(p);
}

/* The rails' endpoints closed, after what they hold completed (a bounded
 * wait); their pieces detached and freed: the ops are then reported
 * CANCELED by quiesce. */
void nxl_lf_rails_quiesce(lf_t *u)
{
    struct lf_rails *rs = u->rails;
    if (!rs || rs->closed)
        return;
    uint64_t until = nxlt_now_us() + DESTROY_WAIT_MS * 1000ull;
    for (;;) {
        bool live = false;
        lf_piece_t *p;
        LIST_FOREACH(p, &rs->pieces, link)
        if (p->out && !p->c->failed && (p->c->rail_live >> p->rail & 1))
            live = true;
        if (!live || nxlt_now_us() >= until)
            break;
        unsigned k = 0;
        for (unsigned i = 0; i < rs->n; i++)
            if (rs->r[i].fids.cq)
                k += rail_drain(u, &rs->r[i]);
        if (!k)
            usleep(100);
    }
    rs->closed = true;
    if (rs->tm)
        nxlt_timer_stop(rs->tm);
    lf_conn_t *c, *cn;
    for (c = LIST_FIRST(&u->conns); c; c = cn) {
        c->refs++;
        for (unsigned i = 0; c->rx && i < c->nrails; i++)
            if (c->rx->reach[i])
                reach_end(c->rx->reach[i]);
        cn = LIST_NEXT(c, link);
        nxl_lf_conn_put(c);
    }
    for (unsigned i = 0; i < rs->n; i++) {
        lf_rail_t *r = &rs->r[i];
        nxlt_io_free(r->io);
        r->io = NULL;
        if (r->fids.ep)
            fi_close(&r->fids.ep->fid);
        r->fids.ep = NULL;
    }
    while (!LIST_EMPTY(&rs->pieces)) {
        lf_piece_t *p = LIST_FIRST(&rs->pieces);
        if (p->o)
            p->o->rail_pieces--;
        if (p->probe && p->c->rx && p->c->rx->probe[p->rail] == p)
            p->c->rx->probe[p->rail] = NULL;
        piece_free(p);
    }
}

void nxl_lf_rails_destroy(lf_t *u)
{
    struct lf_rails *rs = u->rails;
    if (!rs)
        return;
    nxl_lf_rails_quiesce(u);
    if (rs->tm)
        nxlt_timer_free(rs->tm);
    for (unsigned i = 0; i < rs->n; i++) {
        nxl_lf_close_fids(&rs->r[i].fids);
        if (rs->r[i].info)
            fi_freeinfo(rs->r[i].info);
    }
    free(rs);
    u->rails = NULL;
}

/* ------------------------------------------------- connection info */

size_t nxl_lf_rails_info_len(lf_t *u)
{
    if (!u->rails)
        return 0;
    size_t lens[LF_RAILS_MAX];
    for (unsigned i = 0; i < u->rails->n; i++)
        lens[i] = u->rails->r[i].name_len;
    return lf_ci_rails_size(u->rails->n, lens);
}

void nxl_lf_rails_info_pack(lf_t *u, unsigned char *b)
{
    size_t lens[LF_RAILS_MAX];
    const unsigned char *names[LF_RAILS_MAX];
    for (unsigned i = 0; i < u->rails->n; i++) {
        lens[i] = u->rails->r[i].name_len;
        names[i] = u->rails->r[i].name;
    }
    lf_ci_rails_pack(b, u->rails->n, names, lens);
}

/* Rail i of ours to the peer's rail i (its address in our rail's AV) */
void nxl_lf_rails_connect(lf_t *u, lf_conn_t *c, const lf_ci_t *ci)
{
    struct lf_rails *rs = u->rails;
    c->nrails = 0;
    c->rail_live = 0;
    if (!rs || rs->closed || c->self || !ci->nrails)
        return;
    unsigned n = ci->nrails < rs->n ? ci->nrails : rs->n;
    for (unsigned i = 0; i < n; i++) {
        int r = ci->rail_name_len[i] >= rs->r[i].name_len
                    ? fi_av_insert(rs->r[i].fids.av, ci->rail_name[i], 1, &c->rail_addr[i], 0,
                                   NULL)
                    : -FI_EINVAL;
        if (r != 1) {
            nxlt_log(u->ctx, NXL_LOG_WARN, "LIBFABRIC: rail '%s' does not reach agent '%s' "
                     "(fi_av_insert: %s): %u rail(s) to it", rs->r[i].dev, c->name,
                     fi_strerror(r < 0 ? -r : FI_EINVAL), i);
            break;
        }
        c->nrails = i + 1;
    }
    if (c->nrails < 2) { /* one rail is the main path's job */
        c->nrails = 0;
        return;
    }
    c->rail_live = (1u << c->nrails) - 1;
    /* kept for retries (without: a rail taken out stays out) */
    if ((c->rx = calloc(1, sizeof(*c->rx))))
        for (unsigned i = 0; i < c->nrails; i++) {
            size_t l = ci->rail_name_len[i] < sizeof(c->rx->name[i]) ? ci->rail_name_len[i]
                                                                      : sizeof(c->rx->name[i]);
            if (l < ci->rail_name_len[i]) { /* (not an address we know of) */
                free(c->rx);
                c->rx = NULL;
                break;
            }
            memcpy(c->rx->name[i], ci->rail_name[i], l);
            c->rx->name_len[i] = l;
            c->rx->backoff_ms[i] = NXL_RAIL_RETRY_MIN_MS;
        }
    nxlt_log(u->ctx, NXL_LOG_INFO, "LIBFABRIC: %u rails to agent '%s'", c->nrails, c->name);
}

/* ----------------------------------------------------------- memory */

/* [base, base + len) registered in rail r's domain: 0, or a negative
 * FI_* error (-FI_ENOKEY: the provider gives no key, raw keys) */
static int rail_mr(lf_t *u, lf_rail_t *r, void *base, size_t len, struct fid_mr **out,
                   uint64_t *key)
{
    struct fid_mr *mr = NULL;
    uint64_t want = r->mr_prov_key ? 0 : ++u->rails->next_key;
    int e = fi_mr_reg(r->fids.domain, base, len,
                      FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE, 0, want, 0, &mr, NULL);
    if (!e && r->mr_endpoint && ((e = fi_mr_bind(mr, &r->fids.ep->fid, 0)) ||
                                 (e = fi_mr_enable(mr))))
        fi_close(&mr->fid);
    *key = e ? FI_KEY_NOTAVAIL : fi_mr_key(mr);
    if (!e && *key == FI_KEY_NOTAVAIL) {
        fi_close(&mr->fid);
        e = -FI_ENOKEY;
    }
    *out = e ? NULL : mr;
    return e;
}

void nxl_lf_rails_reg(lf_t *u, lf_md_t *m)
{
    struct lf_rails *rs = u->rails;
    m->nrails = 0;
    if (!rs || rs->closed)
        return;
    for (unsigned i = 0; i < rs->n; i++) {
        lf_rail_t *r = &rs->r[i];
        struct fid_mr *mr;
        uint64_t key;
        int e = rail_mr(u, r, (void *)m->base, m->len, &mr, &key);
        if (e) {
            nxlt_log(u->ctx, NXL_LOG_WARN, "LIBFABRIC: a region 0x%lx+%zu could not be registered "
                     "with rail '%s' (%s): its transfers take the main path",
                     (unsigned long)m->base, m->len, r->dev,
                     e != -FI_ENOKEY ? fi_strerror(-e) : "raw keys");
            nxl_lf_rails_dereg(u, m);
            return;
        }
        m->rail_mr[i] = mr;
        m->rail_desc[i] = fi_mr_desc(mr);
        m->rail_key[i] = key;
        m->nrails = i + 1;
    }
}

void nxl_lf_rails_dereg(lf_t *u, lf_md_t *m)
{
    for (unsigned i = 0; i < m->nrails; i++)
        fi_close(&m->rail_mr[i]->fid);
    m->nrails = 0;
}

void nxl_lf_rails_key(lf_t *u, lf_md_t *m, lf_wkey_t *w)
{
    w->nrails = u->rails && !u->rails->closed ? m->nrails : 0;
    for (unsigned i = 0; i < w->nrails; i++)
        w->rail_key[i] = m->rail_key[i];
}

/* A key without rail keys (or with fewer than the connection's rails)
 * leaves the region to the main path */
void nxl_lf_rails_load_key(lf_conn_t *c, const lf_wkey_t *w, lf_rkey_t *k)
{
    k->nrails = w->nrails < c->nrails ? w->nrails : c->nrails;
    for (unsigned i = 0; i < k->nrails; i++)
        k->rail_key[i] = w->rail_key[i];
}

/* --------------------------------------------------------- striping */

/* The last piece done: what op.c does once an op's last element completed
 * (the notification, then the report) */
static void op_pieces_done(lf_op_t *o)
{
    if (o->op && !o->err && !o->stopped && o->want_notif && !o->notif_posted &&
        !nxlt_op_canceled(o->op) && !o->queued && nxl_lf_try_post(o, false) == NXL_IN_PROG)
        nxl_lf_enqueue(o);
    if (!o->queued)
        nxl_lf_op_check(o);
}

/* Piece p over without the rest of it (its op stopped, or its connection
 * aborted): nothing of the provider holds it any more */
static void piece_end(lf_piece_t *p)
{
    lf_op_t *o = p->o;
    p->o = NULL;
    piece_free(p);
    if (o && --o->rail_pieces == 0)
        op_pieces_done(o);
}

/* Posts what it can of piece p; a refusal for room waits for the tick, one
 * outright (p->err) takes its rail out from the loop */
static void piece_post(lf_t *u, lf_piece_t *p)
{
    lf_op_t *o = p->o;
    lf_conn_t *c = p->c;
    lf_rail_t *r = &u->rails->r[p->rail];
    p->blocked = false;
    if (!o || p->err || p->aborted || o->stopped || !(c->rail_live >> p->rail & 1))
        return;
    /* the element and offset where the rest starts */
    size_t el = 0, off = p->start + p->sent;
    while (el < o->rail_n && off >= o->rail_iov[el].len)
        off -= o->rail_iov[el++].len;
    while (p->sent < p->bytes && el < o->rail_n) {
        const nxlt_iov_t *v = &o->rail_iov[el];
        const lf_md_t *m = v->lmd;
        const lf_rkey_t *k = v->rkey;
        size_t l = v->len - off;
        if (l > p->bytes - p->sent)
            l = p->bytes - p->sent;
        if (l > r->max_msg)
            l = r->max_msg;
        struct iovec iov = {.iov_base = (char *)v->laddr + off, .iov_len = l};
        struct fi_rma_iov riov = {.addr = (k->virt ? v->raddr : v->raddr - k->base) + off,
                                  .len = l, .key = k->rail_key[p->rail]};
        void *desc = m->rail_desc[p->rail];
        struct fi_msg_rma msg = {.msg_iov = &iov, .desc = &desc, .iov_count = 1,
                                 .addr = c->rail_addr[p->rail], .rma_iov = &riov,
                                 .rma_iov_count = 1, .context = p};
        ssize_t e = o->dir == NXL_WRITE
                        ? fi_writemsg(r->fids.ep, &msg,
                                      FI_COMPLETION | (r->dc ? FI_DELIVERY_COMPLETE : 0))
                        : fi_readmsg(r->fids.ep, &msg, FI_COMPLETION);
        if (e == -FI_EAGAIN) {
            p->blocked = true; /* the tick (or the rail's next completion) posts the rest */
            rails_tick_soon(u, RAIL_TICK_US);
            return;
        }
        if (e) {
            p->err = (int)-e; /* taken out from the loop */
            c->rail_failed |= 1u << p->rail;
            rails_tick_soon(u, 0);
            return;
        }
        p->out++;
        p->sent += l;
        off += l;
        if (off == v->len)
            el++, off = 0;
    }
}

/* Posts bytes [start, start + total) of o's transfer over c's live rails;
 * o->rail_pieces counts each piece. 0, or -1 (out of memory: nothing
 * posted). Inside or outside the engine's calls: reports nothing. */
static int post_range(lf_t *u, lf_op_t *o, size_t start, size_t total)
{
    struct lf_rails *rs = u->rails;
    lf_conn_t *c = o->conn;
    unsigned n = c->nrails;
    size_t share[LF_RAILS_MAX];
    nxl_rail_rate_t rates[LF_RAILS_MAX];
    for (unsigned i = 0; i < n; i++)
        rates[i] = rs->r[i].rate;
    nxl_rail_shares(rates, n, c->rail_live, total, share);
    char say[LF_RAILS_MAX * 48] = "";
    for (unsigned i = 0, l = 0; i < n && l < sizeof(say); i++)
        l += (unsigned)snprintf(say + l, sizeof(say) - l, "%s%s %zu", i ? ", " : "",
                                rs->r[i].dev, share[i]);
    nxlt_log(u->ctx, NXL_LOG_DEBUG, "LIBFABRIC: a %s of %zu bytes (from byte %zu) to agent '%s' "
             "over rails: %s", o->dir == NXL_READ ? "READ" : "WRITE", total, start, c->name, say);
    lf_piece_t *pcs[LF_RAILS_MAX] = {0};
    for (unsigned i = 0; i < n; i++)
        if (share[i] && !(pcs[i] = calloc(1, sizeof(lf_piece_t)))) {
            for (unsigned k = 0; k < i; k++)
                free(pcs[k]);
            return -1;
        }
    size_t at = start;
    for (unsigned i = 0; i < n; i++) {
        lf_piece_t *p = pcs[i];
        if (!p)
            continue;
        p->o = o;
        p->c = c;
        c->refs++;
        p->rail = i;
        p->start = at;
        p->bytes = share[i];
        p->t0 = nxlt_now_us();
        at += share[i];
        LIST_INSERT_HEAD(&rs->pieces, p, link);
        o->rail_pieces++;
        piece_post(u, p);
    }
    rails_tick_soon(u, RAIL_TICK_US);
    return 0;
}

static void retry_later(lf_t *u, lf_conn_t *c, unsigned i);

/* The peer's rail i address as a socket address, over TCP: its length, or
 * 0 (not TCP, or not an IP address) */
static socklen_t rail_sockaddr(lf_t *u, lf_conn_t *c, unsigned i, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof(*ss));
    if (!c->rx || !strstr(u->prov, "tcp") || c->rx->name_len[i] > sizeof(*ss) ||
        c->rx->name_len[i] < sizeof(sa_family_t))
        return 0;
    memcpy(ss, c->rx->name[i], c->rx->name_len[i]);
    if (ss->ss_family == AF_INET && c->rx->name_len[i] >= sizeof(struct sockaddr_in))
        return sizeof(struct sockaddr_in);
    if (ss->ss_family == AF_INET6 && c->rx->name_len[i] >= sizeof(struct sockaddr_in6))
        return sizeof(struct sockaddr_in6);
    return 0;
}

/* SO_LINGER 0 on @p fd when it is connected to @p arg (a struct
 * sockaddr_storage): its close resets it */
struct drop_arg {
    struct sockaddr_storage peer, local; /* the peer's address; the connection's own */
    socklen_t local_len;
};

static unsigned linger0_if_peer(int fd, void *arg)
{
    struct drop_arg *d = arg;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    memset(&ss, 0, sizeof(ss));
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) || !nxl_same_sockaddr(&ss, &d->peer))
        return 0;
    d->local_len = sizeof(d->local);
    if (getsockname(fd, (struct sockaddr *)&d->local, &d->local_len))
        d->local_len = 0;
    return nxl_tcp_reset(fd, false);
}

/* Before rail i's connection to c is closed (its address removed): over
 * TCP, what the kernel still holds of its writes is dropped with it (the
 * close resets the connection) rather than sent after, when a cut link
 * comes back or a stopped peer continues, over bytes written since */
static void rail_drop_unsent(lf_t *u, lf_conn_t *c, unsigned i)
{
    struct drop_arg d = {.local_len = 0};
    if (!rail_sockaddr(u, c, i, &d.peer))
        return;
    nxl_each_tcp_socket(linger0_if_peer, &d);
    if (d.local_len) { /* its port: the first try connects from it (rail_retry) */
        memcpy(&c->rx->old_local[i], &d.local, sizeof(d.local));
        c->rx->old_len[i] = d.local_len;
    }
}

/* Rail i to c out: its pieces detached and their ranges posted again on
 * the rails left (or their ops failed, with none left); its connection on
 * that rail closed where the provider can (FI_AV_REMOVE_CLEANUP); tried
 * again later */
static void take_out(lf_t *u, lf_conn_t *c, unsigned i, const char *why)
{
    struct lf_rails *rs = u->rails;
    c->rail_failed &= ~(1u << i);
    if (!(c->rail_live >> i & 1))
        return;
    c->rail_live &= ~(1u << i);
    unsigned left = (unsigned)__builtin_popcount(c->rail_live);
    if (c->failed)
        nxlt_log(u->ctx, NXL_LOG_INFO, "LIBFABRIC: rail '%s' to agent '%s' let go (%s)",
                 rs->r[i].dev, c->name, why);
    else
        nxlt_log(u->ctx, NXL_LOG_WARN, "LIBFABRIC: rail '%s' to agent '%s' taken out (%s); its "
                 "pieces go again on the %u rail(s) left", rs->r[i].dev, c->name, why, left);
    c->refs++;
    lf_piece_t *p, *next;
    lf_op_t *o;
    for (p = LIST_FIRST(&rs->pieces); p; p = next) {
        next = LIST_NEXT(p, link);
        if (p->c != c || p->rail != i || p->aborted || !(o = p->o))
            continue;
        p->o = NULL;
        if (left == 0 || o->stopped || !o->op || c->failed) {
            if (!o->err) {
                o->err = FI_EIO;
                o->errtxt = strdup(left ? "its transfer stopped" : "every rail to the peer "
                                   "failed (the last one taken out)");
                o->stopped = true;
            }
        } else if (post_range(u, o, p->start, p->bytes) != 0 && !o->err) {
            o->err = FI_ENOMEM;
            o->errtxt = strdup("out of memory posting a rail's piece again");
            o->stopped = true;
        }
        o->rail_pieces--;
        if (!p->out) /* nothing of the provider holds it */
            piece_free(p);
        if (o->rail_pieces == 0)
            op_pieces_done(o);
    }
    if (u->can_abort && !rs->closed && !(c->rx && (c->rx->removed >> i & 1))) {
        rail_drop_unsent(u, c, i);
        fi_av_remove(rs->r[i].fids.av, &c->rail_addr[i], 1, 0);
        if (c->rx)
            c->rx->removed |= 1u << i;
    }
    if (c->rx && !c->failed && !c->unloaded) {
        c->rx->tries[i] = 0;
        retry_later(u, c, i);
    }
    nxl_lf_conn_put(c);
}

/* One of piece p's provider operations came back (err 0: completed) */
static void probe_event(lf_t *u, lf_piece_t *p, int err, const char *text);

static void piece_event(lf_t *u, lf_piece_t *p, int err, const char *text)
{
    if (p->probe) {
        probe_event(u, p, err, text);
        return;
    }
    p->out--;
    lf_op_t *o = p->o;
    if (o && p->aborted) { /* handed back (or done) after its connection's abort */
        if (!p->out)
            piece_end(p);
        return;
    }
    if (!o) {
        if (!p->out)
            piece_free(p);
        return;
    }
    if (err) {
        if (!p->err)
            p->err = err;
        char why[360];
        snprintf(why, sizeof(why), "an error completion: %s", text);
        take_out(u, p->c, p->rail, why); /* frees p once nothing holds it */
        return;
    }
    if (!p->out && p->sent < p->bytes && o->stopped) { /* (canceled): the rest not posted */
        piece_end(p);
        return;
    }
    if (p->out || p->sent < p->bytes)
        return;
    /* done: every byte of it at the target (a WRITE) or here (a READ) */
    lf_rail_t *r = &u->rails->r[p->rail];
    uint64_t now = nxlt_now_us();
    nxl_rail_rate_add(&r->rate, p->bytes, now - p->t0);
    p->c->net.progress_us = now;
    if (p->c->rx)
        p->c->rx->backoff_ms[p->rail] = NXL_RAIL_RETRY_MIN_MS; /* it carries pieces */
    piece_free(p);
    if (--o->rail_pieces == 0)
        op_pieces_done(o);
}

/* Reads rail r's CQ until empty; how many entries it handled */
static unsigned rail_drain(lf_t *u, lf_rail_t *r)
{
    struct fi_cq_entry e[RAIL_CQ_BATCH];
    unsigned n = 0;
    if (u->rails->closed)
        return 0;
    for (int b = 0; b < DRAIN_BATCHES; b++) {
        ssize_t k = fi_cq_read(r->fids.cq, e, RAIL_CQ_BATCH);
        if (k == -FI_EAGAIN)
            break;
        if (k == -FI_EAVAIL) {
            struct fi_cq_err_entry ee;
            memset(&ee, 0, sizeof(ee));
            if (fi_cq_readerr(r->fids.cq, &ee, 0) != 1)
                break;
            n++;
            if (!ee.op_context)
                continue;
            char text[256] = "";
            const char *s = fi_cq_strerror(r->fids.cq, ee.prov_errno, ee.err_data, text,
                                           sizeof(text));
            char full[320];
            nxl_lf_err_text(ee.err ? ee.err : FI_EOTHER, s == text ? text : s ? s : "", full,
                            sizeof(full));
            piece_event(u, ee.op_context, ee.err ? ee.err : FI_EOTHER, full);
            continue;
        }
        if (k < 0) {
            nxlt_log(u->ctx, NXL_LOG_ERROR, "LIBFABRIC: rail '%s': fi_cq_read failed: %s",
                     r->dev, fi_strerror((int)-k));
            break;
        }
        for (ssize_t j = 0; j < k; j++)
            if (e[j].op_context)
                piece_event(u, e[j].op_context, 0, NULL);
        n += (unsigned)k;
        if (k < RAIL_CQ_BATCH)
            break;
    }
    return n;
}


/* ------------------------------------------------------------ retries */

/* rail i to c tried again after its back-off, which doubles (railshare.h) */
static void retry_later(lf_t *u, lf_conn_t *c, unsigned i)
{
    nxl_rail_retry_later(&c->rx->retry_at[i], &c->rx->backoff_ms[i], nxlt_now_us());
    rails_tick_at(u, c->rx->retry_at[i]);
}

/* a try failed: its probe let go (one the provider holds canceled by
 * removing the address, where the provider can: only then, rxm 1.17
 * crashes on the removal of an address whose connect failed), the next
 * one later */
static void probe_fail(lf_t *u, lf_conn_t *c, unsigned i, const char *why)
{
    struct lf_rails *rs = u->rails;
    struct lf_conn_rails *rx = c->rx;
    lf_piece_t *p = rx->probe[i];
    bool held = p && p->out;
    rx->probe[i] = NULL;
    if (p && !p->out)
        piece_free(p); /* otherwise when the provider hands it back */
    if (held && u->can_abort && !rs->closed && !(rx->removed >> i & 1)) {
        fi_av_remove(rs->r[i].fids.av, &c->rail_addr[i], 1, 0);
        rx->removed |= 1u << i;
    }
    unsigned wait = rx->backoff_ms[i];
    retry_later(u, c, i);
    nxlt_log(u->ctx, NXL_LOG_DEBUG, "LIBFABRIC: rail '%s' to agent '%s' still out (try %u: %s); "
             "tried again in %u ms", rs->r[i].dev, c->name, rx->tries[i], why, wait);
}

/* the probe through (or none to make): rail i carries pieces again */
static void put_back(lf_t *u, lf_conn_t *c, unsigned i)
{
    c->rail_live |= 1u << i;
    nxlt_log(u->ctx, NXL_LOG_INFO, "LIBFABRIC: rail '%s' to agent '%s' is back (try %u%s): %u "
             "rail(s) carry its transfers", u->rails->r[i].dev, c->name, c->rx->tries[i],
             c->rx->have_probe ? "" : ", without a probe: no striped transfer to read from yet",
             (unsigned)__builtin_popcount(c->rail_live));
}

/* Posts probe p (a READ of one byte): 0, or a negative FI_* error;
 * refused for room (rxm connecting): the tick posts it again */
static int probe_post(lf_t *u, lf_piece_t *p)
{
    lf_conn_t *c = p->c;
    struct lf_conn_rails *rx = c->rx;
    lf_rail_t *r = &u->rails->r[p->rail];
    p->blocked = false;
    struct iovec iov = {.iov_base = p->buf, .iov_len = 1};
    struct fi_rma_iov riov = {.addr = rx->probe_raddr, .len = 1,
                              .key = rx->probe_key[p->rail]};
    void *desc = fi_mr_desc(p->mr);
    struct fi_msg_rma msg = {.msg_iov = &iov, .desc = &desc, .iov_count = 1,
                             .addr = c->rail_addr[p->rail], .rma_iov = &riov,
                             .rma_iov_count = 1, .context = p};
    ssize_t e = fi_readmsg(r->fids.ep, &msg, FI_COMPLETION);
    if (e == -FI_EAGAIN) {
        p->blocked = true;
        rails_tick_soon(u, RAIL_TICK_US);
        return 0;
    }
    if (!e)
        p->out++;
    return (int)e;
}

/* The rest of a try of rail i to c (its address answered): the peer's
 * rail address inserted again (where it was removed), then the probe; no
 * striped transfer to the peer yet (nothing to read): the rail back at
 * once */
static void rail_probe(lf_t *u, lf_conn_t *c, unsigned i)
{
    struct lf_rails *rs = u->rails;
    struct lf_conn_rails *rx = c->rx;
    char why[128];
    if (!rx->have_probe || i >= rx->probe_nrails) {
        put_back(u, c, i);
        return;
    }
    lf_piece_t *p = calloc(1, sizeof(*p));
    if (!p) {
        probe_fail(u, c, i, "out of memory");
        return;
    }
    uint64_t key;
    int e = rail_mr(u, &rs->r[i], p->buf, sizeof(p->buf), &p->mr, &key);
    if (e) {
        free(p);
        snprintf(why, sizeof(why), "its byte could not be registered: %s", fi_strerror(-e));
        probe_fail(u, c, i, why);
        return;
    }
    p->probe = true;
    p->c = c;
    c->refs++;
    p->rail = i;
    p->bytes = 1;
    p->t0 = nxlt_now_us();
    LIST_INSERT_HEAD(&rs->pieces, p, link);
    rx->probe[i] = p;
    if ((e = probe_post(u, p))) {
        snprintf(why, sizeof(why), "its probe was refused: %s", fi_strerror(-e));
        probe_fail(u, c, i, why);
        return;
    }
    rails_tick_at(u, p->t0 + NXL_RAIL_PROBE_US);
}

static void reach_end(lf_reach_t *r)
{
    lf_conn_t *c = r->c;
    c->rx->reach[r->rail] = NULL;
    nxlt_io_free(r->io);
    close(r->fd);
    free(r);
    nxl_lf_conn_put(c);
}

/* the connect to the rail's address: done (or failed), or given up */
static void reach_done(lf_reach_t *r, bool timed_out)
{
    lf_conn_t *c = r->c;
    lf_t *u = c->u;
    unsigned i = r->rail;
    int err = 0;
    socklen_t el = sizeof(err);
    if (!timed_out && getsockopt(r->fd, SOL_SOCKET, SO_ERROR, &err, &el))
        err = errno;
    c->refs++;
    reach_end(r);
    if (c->failed || c->unloaded || u->rails->closed) {
        /* nothing more of it */
    } else if (timed_out || err) {
        char why[128];
        snprintf(why, sizeof(why), "its address %s", timed_out ? "did not answer within 1 s"
                                                                : strerror(err));
        probe_fail(u, c, i, why);
    } else {
        rail_probe(u, c, i);
    }
    nxl_lf_conn_put(c);
}

static void on_reach(nxlt_io_t *io, int fd, unsigned ready, void *arg) { reach_done(arg, false); }

/* A try of rail i to c: over TCP first a connect to its address (see
 * lf_reach_t), then the rest (rail_probe) */
/* A nonblocking connect to the peer's rail i address (@p ss, @p sl) from
 * the port the rail's old connection had (@p from_old, where known): into
 * *fd; 1 connected, 0 under way, or -errno */
static int reach_connect(lf_conn_t *c, unsigned i, const struct sockaddr_storage *ss,
                         socklen_t sl, bool from_old, int *fd)
{
    struct lf_conn_rails *rx = c->rx;
    *fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (*fd < 0)
        return -errno;
    if (from_old && rx->old_len[i]) {
        int one = 1;
        setsockopt(*fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(*fd, (struct sockaddr *)&rx->old_local[i], rx->old_len[i])) { /* (taken) */
            close(*fd);
            return reach_connect(c, i, ss, sl, false, fd);
        }
    }
    if (!connect(*fd, (const struct sockaddr *)ss, sl))
        return 1;
    int e = errno;
    if (e == EINPROGRESS)
        return 0;
    close(*fd);
    *fd = -1;
    return -e;
}

/* A try of rail i to c: the peer's rail address inserted again (where it
 * was removed); over TCP a connect to it first (lf_reach_t), from the
 * port of the rail's old connection where known: a peer that still holds
 * that connection (the reset of its close lost on a link down) answers a
 * SYN on it with an ACK that this side answers with a reset, which ends
 * it there (rxm would refuse a new connection from us while it stands);
 * then the rest (rail_probe) */
static void rail_retry(lf_t *u, lf_conn_t *c, unsigned i)
{
    struct lf_rails *rs = u->rails;
    struct lf_conn_rails *rx = c->rx;
    rx->tries[i]++;
    if (rx->removed >> i & 1) {
        fi_addr_t fa;
        int r = fi_av_insert(rs->r[i].fids.av, rx->name[i], 1, &fa, 0, NULL);
        if (r != 1) {
            char why[128];
            snprintf(why, sizeof(why), "fi_av_insert: %s", fi_strerror(r < 0 ? -r : FI_EINVAL));
            probe_fail(u, c, i, why);
            return;
        }
        c->rail_addr[i] = fa;
        rx->removed &= ~(1u << i);
    }
    struct sockaddr_storage ss;
    socklen_t sl = rail_sockaddr(u, c, i, &ss);
    int fd, k = sl ? reach_connect(c, i, &ss, sl, true, &fd) : 1;
    if (k == 1) {
        if (sl)
            close(fd);
        rx->old_len[i] = 0;
        rail_probe(u, c, i);
        return;
    }
    if (k < 0) {
        char why[128];
        snprintf(why, sizeof(why), "its address: %s", strerror(-k));
        probe_fail(u, c, i, why);
        return;
    }
    lf_reach_t *r = calloc(1, sizeof(*r));
    if (!r || !(r->io = nxlt_io_new(u->ctx, fd, on_reach, r)) ||
        nxlt_io_start(r->io, NXLT_IO_WRITE | NXLT_IO_ONCE)) {
        if (r)
            nxlt_io_free(r->io);
        free(r);
        close(fd);
        probe_fail(u, c, i, "out of memory");
        return;
    }
    r->c = c;
    c->refs++;
    r->rail = i;
    r->fd = fd;
    r->from_old = rx->old_len[i] != 0;
    r->t0 = nxlt_now_us();
    rx->reach[i] = r;
    rails_tick_at(u, r->t0 + (r->from_old ? REACH_OLD_US : NXL_RAIL_PROBE_US));
}

/* A connect from the old port not through after REACH_OLD_US: the peer
 * held the old connection (this one reset it), or the link is still
 * down; again from any port, in the time left */
static void reach_again(lf_reach_t *r)
{
    lf_conn_t *c = r->c;
    lf_t *u = c->u;
    struct sockaddr_storage ss;
    socklen_t sl = rail_sockaddr(u, c, r->rail, &ss);
    nxlt_io_free(r->io);
    r->io = NULL;
    close(r->fd);
    r->from_old = false;
    int k = reach_connect(c, r->rail, &ss, sl, false, &r->fd);
    if (k == 0 && (r->io = nxlt_io_new(u->ctx, r->fd, on_reach, r)) &&
        !nxlt_io_start(r->io, NXLT_IO_WRITE | NXLT_IO_ONCE)) {
        rails_tick_at(u, r->t0 + NXL_RAIL_PROBE_US);
        return;
    }
    reach_done(r, k != 1); /* through at once, or failed (closes r->fd, -1 included) */
}

/* One of probe p's came back (err 0: the byte read) */
static void probe_event(lf_t *u, lf_piece_t *p, int err, const char *text)
{
    p->out--;
    lf_conn_t *c = p->c;
    unsigned i = p->rail;
    bool mine = c->rx && c->rx->probe[i] == p;
    if (mine) {
        c->rx->probe[i] = NULL;
        if (err || c->failed || c->unloaded) {
            char why[360];
            snprintf(why, sizeof(why), "its probe failed: %s", err ? text : "the connection is "
                     "gone");
            probe_fail(u, c, i, why);
        } else {
            put_back(u, c, i);
        }
    }
    if (!p->out)
        piece_free(p);
}

/* Rails out, of connections still in use, tried again when due; probes
 * not through in time failed. The next time something is due (UINT64_MAX:
 * nothing) */
static uint64_t rails_retries(lf_t *u, uint64_t now)
{
    uint64_t next = UINT64_MAX;
    lf_conn_t *c;
    LIST_FOREACH(c, &u->conns, link)
    {
        struct lf_conn_rails *rx = c->rx;
        if (!rx || c->failed || c->unloaded)
            continue;
        for (unsigned i = 0; i < c->nrails; i++) {
            if (c->rail_live >> i & 1)
                continue;
            if (rx->reach[i] && rx->reach[i]->from_old && now - rx->reach[i]->t0 > REACH_OLD_US)
                reach_again(rx->reach[i]);
            if (rx->reach[i] && now - rx->reach[i]->t0 > NXL_RAIL_PROBE_US)
                reach_done(rx->reach[i], true);
            if (rx->probe[i] && now - rx->probe[i]->t0 > NXL_RAIL_PROBE_US)
                probe_fail(u, c, i, "its probe not through after 1 s");
            if (!rx->probe[i] && !rx->reach[i] && now >= rx->retry_at[i])
                rail_retry(u, c, i);
            if (c->rail_live >> i & 1)
                continue;
            uint64_t at = rx->reach[i]   ? rx->reach[i]->t0 + (rx->reach[i]->from_old
                                                                   ? REACH_OLD_US
                                                                   : NXL_RAIL_PROBE_US)
                          : rx->probe[i] ? rx->probe[i]->t0 + NXL_RAIL_PROBE_US
                                         : rx->retry_at[i];
            if (at < next)
                next = at;
        }
    }
    return next;
}

/* At a deadline (conn.c, conn_abort, after the main connection's close):
 * the rails' connections to the peer at @p e closed too, by removing its
 * rail addresses (FI_AV_REMOVE_CLEANUP: the provider hands back what it
 * holds, canceled); the pieces of the aborted ops end as they come back,
 * the op with NXL_ERR_TIMEOUT (op.c); the rails tried again as rails taken
 * out are. */
void nxl_lf_rails_abort(lf_t *u, lf_addr_t *e)
{
    struct lf_rails *rs = u->rails;
    if (!rs || rs->closed || !u->can_abort || u->abort_shut)
        return;
    lf_conn_t *c, *cn;
    for (c = LIST_FIRST(&u->conns); c; c = cn) {
        if (c->av_entry != e || !c->nrails || c->failed) {
            cn = LIST_NEXT(c, link);
            continue;
        }
        c->refs++;
        unsigned n = 0;
        for (unsigned i = 0; i < c->nrails; i++) {
            if (c->rx && c->rx->reach[i]) { /* a try under way: over, tried again later */
                reach_end(c->rx->reach[i]);
                probe_fail(u, c, i, PROBE_ABORTED);
                continue;
            }
            if (c->rx && c->rx->probe[i]) {
                probe_fail(u, c, i, PROBE_ABORTED);
                continue;
            }
            if (!(c->rail_live >> i & 1))
                continue; /* out: its retry stands */
            c->rail_live &= ~(1u << i);
            c->rail_failed &= ~(1u << i);
            if (!(c->rx && (c->rx->removed >> i & 1))) {
                rail_drop_unsent(u, c, i);
                fi_av_remove(rs->r[i].fids.av, &c->rail_addr[i], 1, 0);
            }
            if (c->rx) {
                c->rx->removed |= 1u << i;
                c->rx->tries[i] = 0;
                retry_later(u, c, i);
            }
            n++;
        }
        /* the pieces: what the provider holds ends as it comes back */
        lf_piece_t *p, *next;
        for (p = LIST_FIRST(&rs->pieces); p; p = next) {
            next = LIST_NEXT(p, link);
            lf_op_t *o = p->o;
            if (p->c != c || p->probe || !o || p->aborted)
                continue;
            p->aborted = true;
            if (!o->err) {
                o->err = FI_ECANCELED;
                o->errtxt = strdup(PROBE_ABORTED);
            }
            o->stopped = true;
            if (!p->out)
                piece_end(p); /* (next is not freed: piece_end frees only p) */
        }
        if (n)
            nxlt_log(u->ctx, NXL_LOG_INFO, "LIBFABRIC: %u rail(s) to agent '%s' closed with its "
                     "connection, at a deadline; tried again as rails taken out are", n,
                     c->name);
        cn = LIST_NEXT(c, link);
        nxl_lf_conn_put(c); /* (may free c: an unloaded one its pieces held) */
    }
    rails_tick_soon(u, 0); /* the provider's cancellations read at once */
}

/* Pieces (and probes) refused for room, failed rails, stalled pieces;
 * then the retries. The next time a retry or probe is due */
static uint64_t rails_check(lf_t *u)
{
    struct lf_rails *rs = u->rails;
    lf_piece_t *p, *pn;
    for (p = LIST_FIRST(&rs->pieces); p; p = pn) {
        pn = LIST_NEXT(p, link);
        if (!p->blocked)
            continue;
        if (p->probe) {
            int e = p->c->rx && p->c->rx->probe[p->rail] == p ? probe_post(u, p) : 0;
            if (e) {
                char why[128];
                snprintf(why, sizeof(why), "its probe was refused: %s", fi_strerror(-e));
                probe_fail(u, p->c, p->rail, why); /* frees p only */
            } else if (!p->out && !(p->c->rx && p->c->rx->probe[p->rail] == p)) {
                piece_free(p); /* a probe given up before it was posted */
            }
        } else if (p->o && (p->o->stopped || p->aborted) && !p->out) {
            piece_end(p); /* its op stopped: the rest not posted */
        } else {
            piece_post(u, p);
        }
    }
    lf_conn_t *c;
again:
    LIST_FOREACH(c, &u->conns, link)
    for (unsigned i = 0; c->rail_failed && i < c->nrails; i++)
        if (c->rail_failed >> i & 1) {
            take_out(u, c, i, "a post was refused");
            goto again; /* the lists may have changed */
        }
    uint64_t now = nxlt_now_us(), cap = u->net.stall_us ? u->net.stall_us / 2 : UINT64_MAX;
    LIST_FOREACH(p, &rs->pieces, link)
    {
        if (!p->o || p->aborted || !(p->c->rail_live >> p->rail & 1))
            continue;
        if (p->c->failed) { /* its ops were reported: what the rail holds of them is let go */
            take_out(u, p->c, p->rail, "the connection to the peer failed");
            goto again;
        }
        uint64_t lim = nxl_rail_stall_us(&rs->r[p->rail].rate, p->bytes, RAIL_STALL_MIN_US, cap);
        if (now > p->t0 && now - p->t0 > lim) {
            char why[96];
            snprintf(why, sizeof(why), "a piece of %zu bytes not done after %llu ms", p->bytes,
                     (unsigned long long)((now - p->t0) / 1000));
            take_out(u, p->c, p->rail, why);
            goto again;
        }
    }
    return rails_retries(u, now);
}

/* Drains rail r until fi_trywait says its CQ's fd may be slept on: true,
 * or false when the provider kept refusing (the next loop turn tries again) */
static bool rail_poll(lf_t *u, lf_rail_t *r)
{
    for (int tries = 0; tries < TRY_ROUNDS; tries++) {
        if (u->rails->closed)
            return true;
        rail_drain(u, r);
        struct fid *f = &r->fids.cq->fid;
        int e = fi_trywait(r->fids.fabric, &f, 1);
        if (e == 0 || e == -FI_ENOSYS)
            return true;
    }
    return false;
}

/* Polls every rail (@p only: that one), then checks; the tick again on the
 * next loop turn while a provider is busy, in RAIL_TICK_US while pieces
 * are out */
static void rails_progress(lf_t *u, const lf_rail_t *only)
{
    struct lf_rails *rs = u->rails;
    if (!rs || rs->closed)
        return;
    bool idle = true;
    for (unsigned i = 0; i < rs->n; i++)
        if (!only || only == &rs->r[i])
            idle &= rail_poll(u, &rs->r[i]);
    uint64_t next = rails_check(u);
    if (!idle)
        rails_tick_soon(u, 0);
    else if (!LIST_EMPTY(&rs->pieces))
        rails_tick_soon(u, RAIL_TICK_US);
    if (next != UINT64_MAX)
        rails_tick_at(u, next);
}

static void on_tick(nxlt_timer_t *t, void *arg) { rails_progress(arg, NULL); }

/* a rail's CQ fd readable */
static void on_rail_fd(nxlt_io_t *io, int fd, unsigned ready, void *arg)
{
    lf_t *u = arg;
    for (unsigned i = 0; i < u->rails->n; i++)
        if (u->rails->r[i].io == io)
            rails_progress(u, &u->rails->r[i]);
}

/* Striped when x is large enough and every element has its rails: 1 (the
 * op is posted), 0 (the main path's: nothing done), -1 (out of memory) */
int nxl_lf_rails_post(lf_t *u, nxlt_op_t *op, lf_conn_t *c, const nxlt_xfer_t *x)
{
    struct lf_rails *rs = u->rails;
    if (!rs || rs->closed || c->nrails < 2 || c->self || u->quiescing ||
        x->ltype != NXL_DRAM || x->rtype != NXL_DRAM)
        return 0;
    size_t total = 0;
    for (size_t i = 0; i < x->n; i++) {
        const nxlt_iov_t *v = &x->iov[i];
        const lf_md_t *m = v->lmd;
        if (!m || m->nrails < c->nrails || ((const lf_rkey_t *)v->rkey)->nrails < c->nrails)
            return 0;
        total += v->len;
    }
    if (total < rs->min)
        return 0;
    if (c->rx) { /* where a rail's probe reads a byte (rail_retry): the last transfer's */
        const lf_rkey_t *k = x->iov[0].rkey;
        c->rx->have_probe = true;
        c->rx->probe_raddr = k->virt ? x->iov[0].raddr : x->iov[0].raddr - k->base;
        c->rx->probe_nrails = k->nrails;
        memcpy(c->rx->probe_key, k->rail_key, sizeof(c->rx->probe_key));
    }
    if (!c->rail_live) /* every rail out (the probe above reads where this one goes) */
        return 0;
    lf_op_t *o = nxl_lf_op_new(u, op, c, x->notif, x->notif_len, x->notif != NULL);
    if (!o)
        return -1;
    o->is_xfer = true;
    o->dir = x->op;
    o->n = 0; /* nothing of it on the main endpoint but its notification */
    /* the elements, kept with the op: a rail taken out has its range posted again */
    if (!(o->rail_iov = malloc(x->n * sizeof(*o->rail_iov)))) {
        nxl_lf_op_unstart(o);
        return -1;
    }
    memcpy(o->rail_iov, x->iov, x->n * sizeof(*o->rail_iov));
    o->rail_n = x->n;
    if (post_range(u, o, 0, total) != 0) {
        nxl_lf_op_unstart(o);
        return -1;
    }
    return 1;
}
