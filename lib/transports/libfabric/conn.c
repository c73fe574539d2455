/* SPDX-License-Identifier: BSD-3-Clause */
/* LIBFABRIC: connections: peers' addresses, the rxm hold after a failure,
 * probing a peer whose posts are refused, failing a connection */
#include "lf.h"
#include "../common/tcpsock.h" /* this process's TCP sockets, by their peer */

void nxl_lf_conn_put(lf_conn_t *c)
{
    if (--c->refs)
        return;
    lf_addr_t *e = c->av_entry;
    if (e && --e->refs == 0) {
        /* with FI_AV_REMOVE_CLEANUP (util.c), removing the address would
         * close rxm's connection under the peer, which still knows this
         * agent and sends to it (a peer invalidated or unloaded here is not
         * gone): the address then stays in the AV until the endpoint
         * closes, and a reload finds it there (fi_av_insert of an address
         * the AV holds gives the same fi_addr). Only a deadline's abort
         * removes it (conn.c, nxl_lf_on_deadline). */
        if (c->u->fids.av && !c->u->ep_closed && !nxl_lf_av_remove_cleanup())
            fi_av_remove(c->u->fids.av, &e->fa, 1, 0);
        LIST_REMOVE(e, link);
        free(e);
    }
    nxl_lf_shm_watch_end(c);
    LIST_REMOVE(c, link);
    free(c->name);
    free(c->why);
    free(c->rx);
    free(c);
}

/* ofi_rxm learns that a peer closed a connection (a shutdown event on its
 * connection-management queue) only when it next reads that queue, which
 * fi_cq_read does at most every FI_OFI_RXM_CM_PROGRESS_INTERVAL (10 ms by
 * default). The error completions of the operations on the connection come
 * at once, though: a send posted to that peer in between (the application
 * reloads it at once and sends) goes onto the connection rxm still thinks
 * is up, and is lost when rxm then closes it, without a completion. So
 * after a connection failure, posts to the peer's address wait for that
 * interval and a little more (from the reactor, reading the CQ meanwhile),
 * and rxm has closed the old connection before the next send opens a new
 * one. */
uint64_t nxl_lf_rxm_hold_us(const char *prov)
{
    if (!strstr(prov, "ofi_rxm"))
        return 0;
    const char *v = getenv("FI_OFI_RXM_CM_PROGRESS_INTERVAL");
    char *end;
    long long us = v ? strtoll(v, &end, 10) : 10000;
    if (v && (end == v || *end || us < 0))
        us = 10000;
    return us ? (uint64_t)us + 5000 : 0;
}

/* the hold on a peer address, 0 if none (expired ones are dropped) */
static uint64_t hold_find(lf_t *u, const unsigned char *name, size_t len)
{
    uint64_t now = nxlt_now_us(), until = 0;
    lf_hold_t *h, *hn;
    for (h = LIST_FIRST(&u->holds); h; h = hn) {
        hn = LIST_NEXT(h, link);
        if (h->until_us <= now) {
            LIST_REMOVE(h, link);
            free(h);
        } else if (h->len == len && !memcmp(h->name, name, len)) {
            until = h->until_us;
        }
    }
    return until;
}

static void hold_start(lf_t *u, lf_conn_t *failed)
{
    lf_addr_t *e = failed->av_entry;
    if (!u->hold_us || !e)
        return;
    uint64_t until = nxlt_now_us() + u->hold_us;
    hold_find(u, e->name, e->len); /* drops expired ones */
    lf_hold_t *h;
    LIST_FOREACH(h, &u->holds, link)
    if (h->len == e->len && !memcmp(h->name, e->name, e->len))
        break;
    if (!h && (h = malloc(sizeof(*h) + e->len))) {
        h->len = e->len;
        memcpy(h->name, e->name, e->len);
        LIST_INSERT_HEAD(&u->holds, h, link);
    }
    if (h)
        h->until_us = until;
    lf_conn_t *c;
    LIST_FOREACH(c, &u->conns, link)
    if (c->av_entry == e)
        c->hold_until_us = until;
}

/* false while @p c is held; the retry timer then comes back at its end
 * (moved while pending from a post on another thread, NXLT_CAP_ANY_THREAD,
 * it may fire up to 10 ms late: transport.h) */
bool nxl_lf_hold_over(lf_conn_t *c)
{
    uint64_t now = nxlt_now_us();
    if (!c->hold_until_us || now >= c->hold_until_us) {
        c->hold_until_us = 0;
        return true;
    }
    nxlt_timer_stop(c->u->tm_retry);
    nxlt_timer_start(c->u->tm_retry, c->hold_until_us - now);
    return false;
}

/* conn info: wire.h */
nxl_status_t nxl_lf_conn_info(void *state, void **buf, size_t *len)
{
    lf_t *u = state;
    size_t bl = u->bell_fd >= 0 ? u->bell_name_len : 0;
    size_t l = lf_ci_size(u->prov, u->name_len, bl), rl = nxl_lf_rails_info_len(u);
    unsigned char *b = l ? malloc(l + rl) : NULL;
    if (!b)
        return NXL_ERR_UNKNOWN;
    lf_ci_pack(b, u->addr_format, u->prov, u->name, u->name_len,
               CI_AMW | CI_REVOKE | (rl ? LF_CI_RAILS : 0), u->bell_name, bl);
    if (rl)
        nxl_lf_rails_info_pack(u, b + l); /* only with rails: older peers refuse the flag */
    l += rl;
    *buf = b;
    *len = l;
    return NXL_SUCCESS;
}

/* NULL when a peer's endpoint name of @p nl bytes holds what fi_av_insert()
 * reads of an address in this agent's format, which it takes without a
 * length: a string's NUL, a socket address of its family's size, and for
 * the other formats (fixed-size, and the peer's provider and format are
 * this agent's) as many bytes as this agent's own name; else what is wrong */
static const char *name_short(const lf_t *u, const unsigned char *name, size_t nl)
{
    size_t need;
    switch (u->addr_format) {
    case FI_ADDR_STR:
        return memchr(name, 0, nl) ? NULL : "an address string without its NUL";
    case FI_SOCKADDR_IN:
        need = sizeof(struct sockaddr_in);
        break;
    case FI_SOCKADDR_IN6:
        need = sizeof(struct sockaddr_in6);
        break;
    case FI_SOCKADDR: {
        sa_family_t fam;
        if (nl < sizeof(fam))
            return "a socket address shorter than its family";
        memcpy(&fam, name + offsetof(struct sockaddr, sa_family), sizeof(fam));
        need = fam == AF_INET ? sizeof(struct sockaddr_in)
               : fam == AF_INET6 ? sizeof(struct sockaddr_in6)
                                 : u->name_len;
        break;
    }
    default:
        need = u->name_len;
        break;
    }
    return nl < need ? "an endpoint name shorter than an address of its format" : NULL;
}

/* the peer's connection info, parsed and checked against this agent's */
static nxl_status_t ci_read(lf_t *u, const char *agent, const void *info, size_t len,
                            lf_ci_t *out)
{
    lf_ci_t ci;
    const char *bad = lf_ci_parse(info, len, &ci);
    if (bad) {
        nxlt_error(u->ctx, "LIBFABRIC: load_conn: the connection info of agent '%s' is malformed "
                   "(%zu bytes: %s); is it the same nxl version?", agent, len, bad);
        return NXL_ERR_MISMATCH;
    }
    if (strcmp(ci.prov, u->prov) || ci.af != u->addr_format) {
        nxlt_error(u->ctx, "LIBFABRIC: load_conn: agent '%s' uses provider '%s' (address format "
                   "%u), this agent '%s' (%u); create both with the same 'provider' parameter "
                   "(or FI_PROVIDER)", agent, ci.prov, ci.af, u->prov, u->addr_format);
        return NXL_ERR_BACKEND;
    }
    const unsigned char *name = ci.name;
    uint16_t nl = ci.name_len;
    const char *why = name_short(u, name, nl);
    if (why) {
        nxlt_error(u->ctx, "LIBFABRIC: load_conn: the connection info of agent '%s' is malformed "
                   "(%s: %u bytes, this agent's own is %zu)", agent, why, nl, u->name_len);
        return NXL_ERR_MISMATCH;
    }
    *out = ci;
    return NXL_SUCCESS;
}

/* The address vector entry of a peer's endpoint name, shared by the
 * connections to it: found, or inserted; NULL (with the sentence) when the
 * provider refuses it. */
static lf_addr_t *av_entry(lf_t *u, const char *agent, const unsigned char *name, size_t nl)
{
    lf_addr_t *e;
    LIST_FOREACH(e, &u->addrs, link)
    if (e->len == nl && !memcmp(e->name, name, nl))
        return e;
    e = calloc(1, sizeof(*e) + nl);
    int r = e ? fi_av_insert(u->fids.av, name, 1, &e->fa, 0, NULL) : -FI_ENOMEM;
    if (r != 1) {
        nxlt_error(u->ctx, "LIBFABRIC: fi_av_insert of agent '%s''s address failed: %s; the "
                   "address may belong to another fabric or domain (check 'provider', 'domain' "
                   "and 'iface' on both sides)", agent, fi_strerror(r < 0 ? -r : FI_EINVAL));
        free(e);
        return NULL;
    }
    e->len = nl;
    memcpy(e->name, name, nl);
    LIST_INSERT_HEAD(&u->addrs, e, link);
    return e;
}

nxl_status_t nxl_lf_load_conn(void *state, const char *agent, const void *info, size_t len,
                              void **out)
{
    lf_t *u = state;
    lf_ci_t ci;
    nxl_status_t st = ci_read(u, agent, info, len, &ci);
    if (st != NXL_SUCCESS)
        return st;
    const unsigned char *name = ci.name;
    uint16_t nl = ci.name_len;
    lf_conn_t *c = calloc(1, sizeof(*c));
    if (!c || !(c->name = strdup(agent))) {
        free(c);
        return NXL_ERR_UNKNOWN;
    }
    c->u = u;
    c->refs = 1;
    c->addr = FI_ADDR_UNSPEC;
    c->pidfd = -1;
    c->am_write = ci.flags & CI_AMW;
    c->revokes = ci.flags & CI_REVOKE;
    if (ci.bell_len && u->bell_fd >= 0) {
        c->bell.sun_family = AF_UNIX;
        memcpy(c->bell.sun_path, ci.bell, ci.bell_len);
        c->bell_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + ci.bell_len);
    }
    if (nl == u->name_len && !memcmp(name, u->name, nl)) {
        c->self = true;
    } else if (u->shm_ep && nxl_lf_shm_name_closed(name, nl)) {
        /* not inserted: the provider would map the closed region */
        c->failed = true;
        c->peer_closed = true;
        c->err = FI_ESHUTDOWN;
        c->why = strdup(LF_PEER_CLOSED);
    } else {
        lf_addr_t *e = av_entry(u, agent, name, nl);
        if (!e) {
            free(c->name);
            free(c);
            return NXL_ERR_BACKEND;
        }
        e->refs++;
        c->av_entry = e;
        c->addr = e->fa;
        c->hold_until_us = hold_find(u, name, nl);
        nxl_lf_rails_connect(u, c, &ci);
        nxl_lf_shm_watch_peer(u, c, name, nl);
    }
    LIST_INSERT_HEAD(&u->conns, c, link);
    *out = c;
    return NXL_SUCCESS;
}

void nxl_lf_unload_conn(void *state, void *conn)
{
    lf_conn_t *c = conn;
    c->unloaded = true;
    nxl_lf_conn_put(c);
}

/* A peer whose endpoint is gone, over tcp;ofi_rxm: rxm tears the
 * connection down when it reads the peer's shutdown; a post after that
 * opens a new one, and when the peer's listener refuses it, rxm frees the
 * connection without a word (rxm_process_reject) and answers every later
 * post with -FI_EAGAIN, each of which starts another connect: the
 * operations would wait for the stall timeout. (A peer killed while a
 * transfer to it was being set up, or idle, ends that way; one killed with
 * operations on the connection fails them at once.) So while posts to a
 * peer are refused with nothing of ours in flight to it, its address is
 * probed from the reactor: a TCP connect to its listener, which a live
 * peer accepts (and drops, as a connection that says nothing) and a gone
 * one refuses. */
void nxl_lf_post_refused(lf_conn_t *c)
{
    if (!c->tx_out && !c->refused_us)
        c->refused_us = nxlt_now_us();
}

/* a peer's endpoint address as a socket address (its listener's, for tcp
 * and sockets); 0 when it is not an IP one */
static socklen_t addr_sockaddr(const lf_addr_t *e, struct sockaddr_storage *ss)
{
    if (!e || e->len > sizeof(*ss) || e->len < sizeof(sa_family_t))
        return 0;
    memset(ss, 0, sizeof(*ss));
    memcpy(ss, e->name, e->len);
    if (ss->ss_family == AF_INET && e->len >= sizeof(struct sockaddr_in))
        return sizeof(struct sockaddr_in);
    if (ss->ss_family == AF_INET6 && e->len >= sizeof(struct sockaddr_in6))
        return sizeof(struct sockaddr_in6);
    return 0;
}

/* the peer's listener, when its address is an IP socket address */
static socklen_t probe_addr(const lf_conn_t *c, struct sockaddr_storage *ss)
{
    return strstr(c->u->prov, "tcp") ? addr_sockaddr(c->av_entry, ss) : 0;
}

static void probe_refused(lf_conn_t *c, const struct sockaddr_storage *ss)
{
    char host[INET6_ADDRSTRLEN] = "?", why[200];
    unsigned port = 0;
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const void *)ss;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
        port = ntohs(a->sin_port);
    } else {
        const struct sockaddr_in6 *a = (const void *)ss;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
        port = ntohs(a->sin6_port);
    }
    snprintf(why, sizeof(why), "its address %s port %u refuses connections: the peer's endpoint "
             "is gone (its process exited or its agent was destroyed)", host, port);
    if (!c->failed)
        nxl_lf_conn_fail(c, FI_ECONNREFUSED, why, false);
}

void nxl_lf_probe_end(lf_conn_t *c)
{
    if (!c->probe_io)
        return;
    nxlt_io_free(c->probe_io);
    nxlt_timer_free(c->probe_tm);
    close(c->probe_fd);
    c->probe_io = NULL;
    c->probe_tm = NULL;
}

/* the connect answered (@p timed_out false) or PROBE_WAIT_S passed */
static void probe_done(lf_conn_t *c, bool timed_out)
{
    int err = 0;
    socklen_t el = sizeof(err);
    if (!timed_out && getsockopt(c->probe_fd, SOL_SOCKET, SO_ERROR, &err, &el))
        err = errno;
    struct sockaddr_storage ss;
    socklen_t sl = probe_addr(c, &ss);
    nxl_lf_probe_end(c);
    if (!timed_out && err == ECONNREFUSED && sl && !c->tx_out)
        probe_refused(c, &ss);
    nxl_lf_conn_put(c);
}

static void on_probe(nxlt_io_t *io, int fd, unsigned ready, void *arg) { probe_done(arg, false); }
static void on_probe_wait(nxlt_timer_t *t, void *arg) { probe_done(arg, true); }

void nxl_lf_probe_start(lf_conn_t *c)
{
    lf_t *u = c->u;
    struct sockaddr_storage ss;
    socklen_t sl = probe_addr(c, &ss);
    if (!sl || c->probe_io)
        return;
    c->probed_us = nxlt_now_us();
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return;
    if (!connect(fd, (struct sockaddr *)&ss, sl)) {
        close(fd); /* it listens */
        return;
    }
    if (errno == ECONNREFUSED) {
        close(fd);
        probe_refused(c, &ss);
        return;
    }
    if (errno != EINPROGRESS || !(c->probe_io = nxlt_io_new(u->ctx, fd, on_probe, c)) ||
        !(c->probe_tm = nxlt_timer_new(u->ctx, on_probe_wait, c)) ||
        nxlt_io_start(c->probe_io, NXLT_IO_WRITE | NXLT_IO_ONCE)) {
        nxlt_io_free(c->probe_io);
        nxlt_timer_free(c->probe_tm);
        c->probe_io = NULL;
        c->probe_tm = NULL;
        close(fd);
        return;
    }
    c->probe_fd = fd;
    nxlt_timer_start(c->probe_tm, (uint64_t)PROBE_WAIT_S * 1000000);
    c->refs++; /* until probe_done */
}

/* ---- aborts at a deadline
 *
 * A transfer's deadline passed (the engine's hook, nxl_lf_on_deadline)
 * while the provider still holds its buffers: writes a stopped or hung
 * peer does not take, reads it does not answer. The connection to that
 * peer is closed, and the provider hands back every operation queued or
 * under way on it as an error completion. Each aborted op completes once
 * all its provider operations did: the timed-out one (its future completes
 * with NXL_ERR_TIMEOUT), and the others on that connection with
 * NXL_ERR_TIMEOUT and a sentence saying they went with it (or with
 * success, where every provider operation of one completed before the
 * close); none fails the connection. The next post opens a new connection
 * (the peer's metadata is still good; no DOWN). The peer's own operations
 * to this agent on that connection fail at the peer.
 *
 * Over tcp;ofi_rxm: with FI_AV_REMOVE_CLEANUP (util.c), removing the
 * peer's address from the address vector makes rxm close its msg
 * endpoint, and the tcp provider's close hands back every operation on it
 * (FI_ECANCELED; what it had not written from a buffer is dropped, the
 * socket closed), which rxm passes to this agent's CQ. The address is
 * inserted again at once. rxm without the variable has no such close:
 * there the TIMEOUT still waits for the peer to answer or for the stall
 * timeout.
 *
 * Over sockets (1.17), fi_av_remove leaves the connection working, but
 * the provider watches its connections' sockets: one whose read finds the
 * end of the stream, or whose send fails with EPIPE, is marked
 * disconnected, and its progress thread then fails every operation posted
 * on it with FI_EIO, sent or waiting for the peer's answer
 * (sock_pe_progress_tx_entry: progress.c takes that for the connection's
 * loss), releases it and closes the socket (sock_ep_remove_conn): a READ's
 * data, which comes only on that connection, is not read after. The next
 * post to the address finds the connection gone (sock_ep_lookup_conn) and
 * connects again. So the abort shuts down (never closes: the descriptors
 * are the provider's) the TCP connections of this process whose peer is
 * the peer's endpoint address (sock_abort): the progress thread, woken by
 * the socket, reads the end at once. Until the operations aborted are all
 * handed back (at most SHUT_HOLD_US), posts to that address wait, so that
 * no post of this agent finds the connection half torn down (the provider
 * closes its socket from whichever thread notices first, while its
 * progress thread may still be writing to it). Limits: the connection the
 * provider uses to a peer is the one the peer opened to this agent when
 * the peer sent first; it cannot be told from other peers' connections
 * (its peer address is an ephemeral port), so it is left alone, and the
 * TIMEOUT waits for the peer or for the stall timeout, as without the
 * abort. And another agent of this process with connections to the same
 * peer's address loses them too: its operations on them fail with the
 * connection (NXL_ERR_REMOTE_DISCONNECT). */

void nxl_lf_on_deadline(void *state, nxlt_op_t *op)
{
    lf_t *u = state;
    if (!u->can_abort)
        return;
    u->deadline_due = true;
    nxl_lf_kick(u);
}

/* 1 when @p fd is connected to @p arg (a struct sockaddr_storage) and was
 * shut down */
static unsigned shut_if_peer(int fd, void *arg)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    memset(&ss, 0, sizeof(ss));
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) || !nxl_same_sockaddr(&ss, arg))
        return 0;
    return !shutdown(fd, SHUT_RDWR);
}

/* sockets: shuts down this process's connections to @p e's address;
 * returns how many */
static unsigned sock_abort(lf_addr_t *e)
{
    struct sockaddr_storage ss;
    if (!addr_sockaddr(e, &ss))
        return 0;
    return nxl_each_tcp_socket(shut_if_peer, &ss);
}

/* the ops an abort of @p e takes: the application's, and over sockets
 * anything else the provider holds on the connection (a revocation, an op
 * reported already), whose failure would otherwise fail the connection */
static bool abort_takes(const lf_t *u, const lf_op_t *o, const lf_addr_t *e)
{
    return o->conn->av_entry == e && !o->aborted &&
           (o->op || (u->abort_shut && o->posted > o->completed));
}

/* rxm: closes the connection by removing the address, and inserts it again */
static void av_abort(lf_t *u, lf_addr_t *e)
{
    fi_addr_t old = e->fa, fa;
    fi_av_remove(u->fids.av, &old, 1, 0);
    int r = fi_av_insert(u->fids.av, e->name, 1, &fa, 0, NULL);
    lf_conn_t *c;
    LIST_FOREACH(c, &u->conns, link)
    if (c->av_entry == e) {
        if (r == 1) {
            c->addr = fa;
        } else if (!c->failed) {
            c->refs++;
            nxl_lf_conn_fail(c, r < 0 ? -r : FI_EINVAL,
                             "its address could not be inserted again after its connection "
                             "was closed at a deadline", false);
            nxl_lf_conn_put(c);
            break; /* the list may have changed */
        }
    }
    if (r == 1)
        e->fa = fa;
}

static void conn_abort(lf_t *u, lf_addr_t *e)
{
    unsigned n = 0, shut = 0;
    size_t held = 0;
    lf_op_t *o;
    LIST_FOREACH(o, &u->ops, link)
    if (abort_takes(u, o, e)) {
        n++;
        held += o->posted - o->completed;
    }
    if (u->abort_shut && !(shut = sock_abort(e))) {
        nxlt_log(u->ctx, NXL_LOG_INFO, "LIBFABRIC: a deadline passed with %u operation%s to the "
                 "peer at this address held by the sockets provider, on no connection this "
                 "process opened to that address (the provider uses the one the peer opened, "
                 "which cannot be told from other peers'): the TIMEOUT waits for the peer or "
                 "the stall timeout", n, n == 1 ? "" : "s");
        return;
    }
    LIST_FOREACH(o, &u->ops, link)
    if (abort_takes(u, o, e)) {
        o->aborted = true;
        o->stopped = true;
    }
    if (u->abort_shut)
        nxlt_log(u->ctx, NXL_LOG_INFO, "LIBFABRIC: a deadline passed with %u operation%s to the "
                 "peer at this address held by the sockets provider: its %u connection%s to the "
                 "address shut down, and the next post reconnects", n, n == 1 ? "" : "s", shut,
                 shut == 1 ? "" : "s");
    else
        nxlt_log(u->ctx, NXL_LOG_INFO, "LIBFABRIC: a deadline passed with %u operation%s to the "
                 "peer at this address held by the provider: its connection is closed, and the "
                 "next post reconnects", n, n == 1 ? "" : "s");
    if (u->abort_shut) {
        /* posts to the address wait for the provider to hand them back */
        e->shut_left += (unsigned)held;
        uint64_t until = nxlt_now_us() + SHUT_HOLD_US;
        lf_conn_t *c;
        LIST_FOREACH(c, &u->conns, link)
        if (c->av_entry == e && e->shut_left && c->hold_until_us < until)
            c->hold_until_us = until;
    } else {
        av_abort(u, e);
        nxl_lf_rails_abort(u, e); /* the rails' connections to it too (rails.c) */
    }
    /* not posted yet: nothing of them is with the provider */
    lf_op_t *on;
    for (o = TAILQ_FIRST(&u->waitq); o; o = on) {
        on = TAILQ_NEXT(o, wlink);
        if (o->aborted) {
            TAILQ_REMOVE(&u->waitq, o, wlink);
            o->queued = false;
            nxl_lf_op_check(o);
        }
    }
}

/* sockets: one provider operation of an op aborted there was handed back;
 * the last one ends the hold on posts to its address */
void nxl_lf_shut_done(lf_op_t *o)
{
    lf_t *u = o->u;
    lf_addr_t *e = o->conn->av_entry;
    if (!u->abort_shut || !o->aborted || !e || !e->shut_left || --e->shut_left)
        return;
    lf_conn_t *c;
    LIST_FOREACH(c, &u->conns, link)
    if (c->av_entry == e)
        c->hold_until_us = 0;
    nxl_lf_kick(u);
}

/* From progress, after a deadline passed: the peers that hold a
 * timed-out op are aborted */
void nxl_lf_deadlines(lf_t *u)
{
    u->deadline_due = false;
    lf_addr_t *e;
    LIST_FOREACH(e, &u->addrs, link)
    {
        lf_op_t *o;
        LIST_FOREACH(o, &u->ops, link)
        if (o->conn->av_entry == e && o->op && !o->aborted && !o->conn->failed &&
            !o->conn->self && (o->posted > o->completed || o->rail_pieces) &&
            nxlt_op_canceled(o->op))
            break;
        if (o)
            conn_abort(u, e);
    }
}

void nxl_lf_conn_fail(lf_conn_t *c, int err, const char *text, bool stalled)
{
    lf_t *u = c->u;
    if (c->failed)
        return;
    c->failed = true;
    c->stalled = stalled;
    nxl_lf_shm_watch_end(c); /* posted nothing more: its process no longer matters */
    if (!c->self)
        hold_start(u, c);
    c->err = err;
    free(c->why);
    c->why = text ? strdup(text) : NULL;
    /* A failure of the application's: a transfer or notification of its
     * fails with it. A connection that ends with nothing of the
     * application's on it (the peer closed it, and only the transport's
     * own message, a revocation, found out), or while this agent is being
     * destroyed, is no failure of anyone's: an info line. */
    bool affects = false;
    lf_op_t *o, *next;
    LIST_FOREACH(o, &u->ops, link)
    if (o->conn == c && o->op)
        affects = true;
    nxl_log_level_t lvl = affects && !u->quiescing ? NXL_LOG_WARN : NXL_LOG_INFO;
    if (stalled)
        nxlt_log(u->ctx, lvl, "LIBFABRIC: no operation to agent '%s' completed for %llu ms; "
                 "declaring the connection lost", c->name,
                 (unsigned long long)(u->net.stall_us / 1000));
    else if (affects)
        nxlt_log(u->ctx, lvl, "LIBFABRIC: connection to agent '%s' failed: %s", c->name,
                 text ? text : fi_strerror(err));
    else
        nxlt_log(u->ctx, lvl, "LIBFABRIC: connection to agent '%s' ended (%s), with no transfer "
                 "or notification on it", c->name, text ? text : fi_strerror(err));
    /* every op to it is reported now; each is freed when the provider
     * hands back what it holds of it (or at destroy) */
    c->refs++;
    for (o = LIST_FIRST(&u->ops); o; o = next) {
        next = LIST_NEXT(o, link);
        if (o->conn != c)
            continue;
        o->stopped = true;
        if (o->queued) {
            TAILQ_REMOVE(&u->waitq, o, wlink);
            o->queued = false;
        }
        /* op_check may free o, never next: it frees only o */
        nxl_lf_op_check(o);
    }
    nxl_lf_conn_put(c);
}
