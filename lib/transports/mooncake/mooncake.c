/* SPDX-License-Identifier: BSD-3-Clause */
/* The MOONCAKE transport: host memory (DRAM) between agents through
 * Mooncake's Transfer Engine (kvcache-ai/Mooncake), over its TCP transport.
 *
 * Each instance creates one engine with the P2P handshake (no metadata
 * server: segments are named ip:port, and a peer's segment is fetched from
 * the peer itself by openSegment) and installs the engine's "tcp"
 * transport. Regions are registered with registerLocalMemory (the peer's
 * engine refuses addresses outside them). The connection info carries the
 * engine's segment name and the port of a small notification socket; a
 * region's key its address and length. A transfer is one batch
 * (allocateBatchID, submitTransfer, or submitTransferWithNotify when it
 * carries a notification: the engine sends it once the batch completed,
 * inside the getTransferStatus call that sees it complete).
 *
 * The engine gives no completion descriptor: its status is polled, from
 * the reactor, by one timer per instance, armed only while transfers are
 * in flight: poll_min_us after a post or a poll that saw progress,
 * doubling up to poll_max_us while nothing moves; nothing is armed while
 * idle. Notifications arrive in the engine's queue (getNotifsFromEngine)
 * with nothing that wakes a loop: the sender writes one byte on a TCP
 * socket of this transport to the receiver (its "doorbell") once the
 * engine has delivered the notification, and the receiver drains the
 * queue when that byte arrives. The same socket tells of a peer's death:
 * it closes, and transfers to that peer not done within a second are
 * given up (NXL_ERR_REMOTE_DISCONNECT); later ones are refused.
 *
 * The cancel rule: a transfer is reported, whatever its status, only once
 * every request of it handed to the engine has ended there. The engine's
 * C API cancels nothing (closeSegment does nothing, freeBatchID refuses a
 * batch with a request running), and its TCP transport writes a READ's
 * buffer until the request ends. A peer given up (lost, stall_timeout)
 * has the engine's connections to it shut down (conn_abort), which ends
 * those requests; so has the peer of a transfer whose deadline passed
 * (dl_abort: every transfer to that peer ends with NXL_ERR_TIMEOUT, the
 * peer is not lost). To make that prompt, a peer has at most one request
 * per engine connection in the engine (submit_more): none waits in the
 * engine's queue, where a cut does not reach. A transfer canceled with
 * nxl_future_cancel waits for its requests. Teardown waits, bounded, then
 * destroys the engine (its thread joined) before reporting what is left.
 *
 * Notifications are strings for the engine: their bytes travel in base64.
 * openSegment (in load_conn) and a standalone notification
 * (genNotifyInEngine) are synchronous calls to the peer (one round trip).
 *
 * libtransfer_engine.so is loaded at run time ($NXL_MOONCAKE_LIB, else the
 * dynamic linker's search): libnxl never links it. */
#include "config.h"

#include <nxl/transport.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "../../common/base64.h"
#include "../common/dlload.h"
#include "../common/pstr.h"
#include "../common/tcpsock.h"
#include "te_abi.h"

#ifdef NXL_HAVE_TE_HEADER /* configure --with-mooncake: te_abi.h checked against the API */
#include <stddef.h>
#include <transfer_engine_c.h>
_Static_assert(sizeof(nxl_te_req_t) == sizeof(struct transfer_request) &&
                   offsetof(nxl_te_req_t, source) == offsetof(struct transfer_request, source) &&
                   offsetof(nxl_te_req_t, target_id) == offsetof(struct transfer_request, target_id) &&
                   offsetof(nxl_te_req_t, target_offset) ==
                       offsetof(struct transfer_request, target_offset) &&
                   offsetof(nxl_te_req_t, length) == offsetof(struct transfer_request, length),
               "te_abi.h: struct transfer_request");
_Static_assert(sizeof(nxl_te_notify_t) == sizeof(notify_msg_t) &&
                   offsetof(nxl_te_notify_t, msg) == offsetof(notify_msg_t, msg),
               "te_abi.h: notify_msg_t");
_Static_assert(sizeof(nxl_te_status_t) == sizeof(transfer_status_t) &&
                   offsetof(nxl_te_status_t, transferred_bytes) ==
                       offsetof(transfer_status_t, transferred_bytes),
               "te_abi.h: transfer_status_t");
_Static_assert(NXL_TE_OPCODE_READ == OPCODE_READ && NXL_TE_OPCODE_WRITE == OPCODE_WRITE &&
                   NXL_TE_COMPLETED == STATUS_COMPLETED && NXL_TE_FAILED == STATUS_FAILED &&
                   NXL_TE_WAITING == STATUS_WAITING && NXL_TE_PENDING == STATUS_PENDING &&
                   NXL_TE_TIMEOUT == STATUS_TIMEOUT && NXL_TE_INVALID_BATCH == INVALID_BATCH,
               "te_abi.h: the constants");
#endif

#define CONN_MAGIC 0x31434b4du /* "MKC1" */
#define KEY_MAGIC 0x314b4b4du  /* "MKK1" */
#define DEF_POLL_MIN_US 20
#define DEF_POLL_MAX_US 1000
#define DEF_WINDOW 512
#define DEAD_GRACE_US 1000000u      /* a dead peer's transfers: given up after this */
#define ZOMBIE_POLL_US 100000u      /* transfers given up, still in the engine */
#define ABORT_POLL_US 2000u         /* ... while their peer's connections are aborted */
#define HOLD_US 1000000u            /* after an abort at a deadline: the engine's reconnect cooldown */
#define THROTTLE_POLL_US 100u       /* polled at least this often while requests wait for a lane */
#define QUEUE_PER_LANE 1u           /* without a deadline: requests queued in the engine per lane */
#define ROUND_WAIT_US 100000u       /* a re-cut waits this long for the engine's round to fill */
#define QUIESCE_MAX_US 10000000u    /* teardown waits this long for the engine, */
#define QUIESCE_IDLE_US 1000000u    /* or this long without a request ending */
#define SEG_MAX 128

#ifndef TAILQ_FOREACH_SAFE /* glibc's sys/queue.h lacks it */
#define TAILQ_FOREACH_SAFE(var, head, field, tvar)                                             \
    for ((var) = TAILQ_FIRST(head); (var) && ((tvar) = TAILQ_NEXT(var, field), 1); (var) = (tvar))
#endif

/* ------------------------------------------------------------ the library */

typedef struct mc_lib {
    nxl_te_create_fn create;
    nxl_te_install_fn install;
    nxl_te_local_fn local;
    nxl_te_open_fn open_seg;
    nxl_te_destroy_fn destroy;
    nxl_te_reg_fn reg;
    nxl_te_unreg_fn unreg;
    nxl_te_alloc_batch_fn alloc_batch;
    nxl_te_submit_fn submit;
    nxl_te_submit_notify_fn submit_notify;
    nxl_te_get_notifs_fn get_notifs;
    nxl_te_free_notifs_fn free_notifs;
    nxl_te_gen_notify_fn gen_notify;
    nxl_te_status_fn status;
    nxl_te_free_batch_fn free_batch;
    const char *name;
} mc_lib_t;

static nxlt_dlonce_t lib_once = NXLT_DLONCE_INIT;
static mc_lib_t lib;

static void lib_load(void)
{
    static const char *const names[] = {"libtransfer_engine.so"};
    /* the engine logs through glog, every INFO line to stderr unless told
     * otherwise (MC_LOG_LEVEL): warnings and errors only, unless the user
     * chose */
    setenv("MC_LOG_LEVEL", "WARNING", 0);
    char e[512];
    void *h = nxlt_dl_open("NXL_MOONCAKE_LIB", names, 1, &lib.name, e, sizeof(e));
    if (!h) {
        if (nxlt_dl_cut_enoent(e))
            snprintf(lib_once.why, sizeof(lib_once.why),
                     "%s not found: set NXL_MOONCAKE_LIB or build with tests/mooncake/build",
                     lib.name);
        else
            snprintf(lib_once.why, sizeof(lib_once.why),
                     "%s does not load (%.180s): set NXL_MOONCAKE_LIB or build with "
                     "tests/mooncake/build",
                     lib.name, e);
        return;
    }
    const nxlt_dlsym_t need[] = {
        {(void **)&lib.create, "createTransferEngine"},
        {(void **)&lib.install, "installTransport"},
        {(void **)&lib.local, "getLocalIpAndPort"},
        {(void **)&lib.open_seg, "openSegment"},
        {(void **)&lib.destroy, "destroyTransferEngine"},
        {(void **)&lib.reg, "registerLocalMemory"},
        {(void **)&lib.unreg, "unregisterLocalMemory"},
        {(void **)&lib.alloc_batch, "allocateBatchID"},
        {(void **)&lib.submit, "submitTransfer"},
        {(void **)&lib.submit_notify, "submitTransferWithNotify"},
        {(void **)&lib.get_notifs, "getNotifsFromEngine"},
        {(void **)&lib.free_notifs, "freeNotifsMsgBuf"},
        {(void **)&lib.gen_notify, "genNotifyInEngine"},
        {(void **)&lib.status, "getTransferStatus"},
        {(void **)&lib.free_batch, "freeBatchID"},
    };
    const char *lacks = nxlt_dl_syms(h, need, sizeof(need) / sizeof(*need));
    if (lacks) {
        snprintf(lib_once.why, sizeof(lib_once.why), "%s lacks %s (a Transfer Engine too old?)",
                 lib.name, lacks);
        return;
    }
    lib_once.ok = true; /* never closed: the engine's threads live in it */
}

static const mc_lib_t *lib_get(char *why, size_t cap)
{
    return nxlt_dlonce_get(&lib_once, lib_load, why, cap) ? &lib : NULL;
}

/* ------------------------------------------------------------ state */

typedef struct mc mc_t;

typedef struct mc_conn {
    mc_t *m;
    char agent[64];
    char seg[SEG_MAX];  /* the peer's segment name, ip:port */
    uint16_t dport;     /* its engine's TCP data port (0: not known) */
    int32_t sid;        /* its segment id in our engine */
    int fd;             /* to the peer's notification socket (-1: closed) */
    nxlt_io_t *io;
    bool dead;          /* the socket closed, or the connection was unloaded */
    bool unloaded;
    bool aborting;      /* its connections cut in this poll's turn already */
    bool dl_abort;      /* cut at a deadline: cut again on each poll until inflight is 0 */
    uint64_t hold_us;   /* nothing of it handed to the engine before this (after a dl_abort) */
    size_t inflight;    /* its requests handed to the engine, not seen ended */
    size_t dl_ops;      /* transfers to it posted with a deadline, not finished */
    struct mc_op *flush; /* after a dl_abort: the flush (flush_new) waiting or in the engine */
    uint64_t flush_raddr; /* an address of the peer's that a request last read or wrote */
    uint64_t live_us;   /* while aborting: when a new connection to its engine was first seen */
    uint64_t dead_us;
    char dead_why[160];
    unsigned refs;      /* transfers holding it, and 1 while loaded */
    LIST_ENTRY(mc_conn) l; /* while loaded */
} mc_conn_t;

typedef struct mc_op {
    nxlt_op_t *op;
    mc_conn_t *conn;
    uint64_t batch;     /* NXL_TE_INVALID_BATCH: nothing in the engine */
    size_t n, sub, next; /* requests; handed to the engine; the first not seen ended */
    nxl_te_req_t *rq;   /* the requests (until all are handed over) */
    nxl_te_notify_t nt; /* its notification (nt.msg malloc'd), or none */
    bool notif;         /* a notification follows the batch */
    bool given_up;      /* failed by nxl (peer lost, stall): reported once the engine ends it */
    bool dl;            /* its deadline passed (on_deadline) */
    bool has_dl;        /* posted with a deadline (counted in conn->dl_ops) */
    bool read;
    bool is_flush;      /* nxl's own (flush_new): no op, no buffer of the application's */
    bool some_ok;       /* a request of it completed in the engine */
    nxl_status_t st;    /* the first failure */
    char why[240];
    uint64_t post_us, moved_us;
    TAILQ_ENTRY(mc_op) q;
} mc_op_t;
TAILQ_HEAD(mc_opq, mc_op);

typedef struct mc_sock { /* a peer's connection to our notification socket */
    mc_t *m;
    int fd;
    nxlt_io_t *io;
    char from[64];      /* the peer's agent name, from its hello */
    uint8_t rb[512];    /* what is read and not parsed yet */
    size_t rl;
    LIST_ENTRY(mc_sock) l;
} mc_sock_t;

typedef struct mc_reg {
    void *addr;
    size_t len;
} mc_reg_t;

typedef struct mc_key {
    uint32_t magic;
    uint32_t pad;
    uint64_t addr, len;
} mc_key_t;

struct mc {
    nxlt_ctx_t *ctx;
    const mc_lib_t *L;
    void *eng;
    char ip[64];
    char seg[SEG_MAX];
    uint16_t dport;     /* the engine's TCP data port (0: not known) */
    int lfd;
    uint16_t lport;
    nxlt_io_t *lio;
    nxlt_timer_t *tm;   /* "poll on the next turn" */
    int tfd;            /* the poll's delay: a timerfd (microseconds, not the loop's clock) */
    nxlt_io_t *tio;
    bool armed;
    struct mc_opq ops;
    LIST_HEAD(, mc_sock) socks;
    LIST_HEAD(, mc_conn) conns;
    uint64_t min_us, max_us, cur_us, stall_us;
    size_t window, inflight; /* requests in the engine at most, and now */
    size_t lanes;       /* the engine's connections per peer */
    size_t peer_max;    /* requests to one peer in the engine at most (peer_window) */
    size_t peer_nodl;   /* the same without a deadline in flight to it (peer_window 0) */
    bool peer_fixed;    /* peer_window given: peer_max holds always, not only with deadlines */
    bool throttled;     /* requests wait for room among a peer's lanes (submit_more) */
    uint8_t scratch[8]; /* where the flushes' READs land */
    char desc[256];
};

/* ------------------------------------------------------------ helpers */

static int set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* The notification socket: a peer connects to it when it loads this
 * agent's connection, and writes, in order:
 *   'h' u16 n, n bytes   its agent's name (first, once)
 *   'n'                  a doorbell: notifications wait in the engine's queue
 *   'r' struct mc_revoke a region it deregistered (nxlt_remote_revoked)
 * Integers are in host order (one machine's words, or the same ABI's). */
#define MSG_HELLO 'h'
#define MSG_BELL 'n'
#define MSG_REVOKE 'r'

typedef struct mc_revoke {
    uint32_t type;
    uint32_t pad;
    uint64_t dev, addr, len;
} mc_revoke_t;

/* writes all of it on a non-blocking socket (a few bytes: waits at most
 * 100 ms for room); 0 or -1 */
static int send_all(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len) {
        ssize_t r = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (r > 0) {
            p += r;
            len -= (size_t)r;
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd pf = {.fd = fd, .events = POLLOUT};
            if (poll(&pf, 1, 100) == 1)
                continue;
        }
        return -1;
    }
    return 0;
}

/* the first IPv4 address of an interface that is up and not loopback */
static void default_ip(char *out, size_t cap)
{
    snprintf(out, cap, "127.0.0.1");
    struct ifaddrs *ifs;
    if (getifaddrs(&ifs))
        return;
    for (struct ifaddrs *i = ifs; i; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) &&
            !(i->ifa_flags & IFF_LOOPBACK)) {
            inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, out, cap);
            break;
        }
    freeifaddrs(ifs);
}

/* the host part of a segment name ip:port ([v6]:port) */
static void seg_host(const char *seg, char *out, size_t cap)
{
    const char *c = strrchr(seg, ':');
    size_t n = c ? (size_t)(c - seg) : strlen(seg);
    if (n >= 2 && seg[0] == '[' && seg[n - 1] == ']') {
        seg++;
        n -= 2;
    }
    snprintf(out, cap, "%.*s", (int)n, seg);
}

/* a socket's port and IPv4 address (an IPv4-mapped IPv6 one too); false
 * for other families */
static bool sa_v4(const struct sockaddr_storage *ss, struct in_addr *a, uint16_t *port)
{
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *s = (const struct sockaddr_in *)ss;
        *a = s->sin_addr;
        *port = ntohs(s->sin_port);
        return true;
    }
    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)ss;
        *port = ntohs(s->sin6_port);
        if (IN6_IS_ADDR_V4MAPPED(&s->sin6_addr)) {
            memcpy(a, s->sin6_addr.s6_addr + 12, 4);
            return true;
        }
        a->s_addr = htonl(INADDR_ANY); /* [::]: every address */
        return IN6_IS_ADDR_UNSPECIFIED(&s->sin6_addr);
    }
    return false;
}

/* the TCP ports this process listens on */
typedef struct {
    uint16_t port[64];
    int n;
} ports_t;

static unsigned add_listener(int fd, void *arg)
{
    ports_t *p = arg;
    int on = 0;
    socklen_t ol = sizeof(on);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    struct in_addr a;
    uint16_t port;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &ol) || !on ||
        getsockname(fd, (struct sockaddr *)&ss, &sl) || !sa_v4(&ss, &a, &port) ||
        p->n >= (int)(sizeof(p->port) / sizeof(*p->port)))
        return 0;
    p->port[p->n++] = port;
    return 1;
}

/* The engine's TCP data port: the listener its TCP transport opened (a
 * port of this process listening after installTransport and not before)
 * that is not its handshake's (the segment's port). 0 when that is not one
 * port (another engine created meanwhile): its connections cannot be
 * aborted then (conn_abort). */
static uint16_t data_port(const ports_t *before, const char *seg)
{
    ports_t now = {.n = 0};
    nxl_each_tcp_socket(add_listener, &now);
    const char *c = strrchr(seg, ':');
    long hs = c ? strtol(c + 1, NULL, 10) : -1;
    uint16_t found = 0;
    for (int i = 0; i < now.n; i++) {
        bool old = now.port[i] == hs;
        for (int j = 0; j < before->n && !old; j++)
            old = before->port[j] == now.port[i];
        if (old || now.port[i] == found)
            continue;
        if (found)
            return 0;
        found = now.port[i];
    }
    return found;
}

typedef struct {
    struct in_addr host;
    uint16_t port;
} peer_addr_t;

/* is the socket fd connected to the peer's address? */
static bool to_peer(int fd, const peer_addr_t *p)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    struct in_addr a;
    uint16_t port;
    return !getpeername(fd, (struct sockaddr *)&ss, &sl) && sa_v4(&ss, &a, &port) &&
           port == p->port && a.s_addr == p->host.s_addr;
}

static unsigned shut_if_peer(int fd, void *arg)
{
    return to_peer(fd, arg) && !shutdown(fd, SHUT_RDWR);
}

/* an engine connection of this process to the peer that is established
 * (a new one: not one cut already, which is past ESTABLISHED) */
static unsigned live_if_peer(int fd, void *arg)
{
    struct tcp_info ti;
    socklen_t tl = sizeof(ti);
    return to_peer(fd, arg) && !getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) &&
           ti.tcpi_state == TCP_ESTABLISHED;
}

static bool peer_addr(const mc_conn_t *c, peer_addr_t *p)
{
    char host[64];
    p->port = c->dport;
    seg_host(c->seg, host, sizeof(host));
    return c->dport && inet_pton(AF_INET, host, &p->host) == 1;
}

/* Aborts the engine's connections to a peer given up (Mooncake's TCP
 * transport, tcp_transport_session_impl.h): it connects to the peer's data
 * port and keeps every socket it uses in asio. shutdown() of such a socket
 * (not close: the descriptor stays the engine's) ends the request on it:
 * a READ's body read sees the end of the stream, a WRITE's send fails, and
 * the session reports the request FAILED only from the handler of its
 * last buffer operation, once no buffer is held. A request queued behind
 * them goes on a new connection: aborted on the next poll. Every
 * connection to that peer's engine from this process is cut, another
 * agent's here too. Returns the connections cut; -1: the peer's data port
 * is not known. */
static int conn_abort(mc_conn_t *c)
{
    peer_addr_t p;
    if (!peer_addr(c, &p))
        return -1;
    c->live_us = 0;
    return (int)nxl_each_tcp_socket(shut_if_peer, &p);
}

/* Cuts again, on a poll while an aborted peer has requests in the engine:
 * those that were queued there behind the connections cut. The engine
 * hands them to new connections, one round of connections at a time
 * (tcp_transport_lane_impl.h: runGroupPump connects its lanes one after
 * the other, kMaxConcurrentLaneProbes, each taking a request). A lane cut
 * while a sibling is still usable starts the engine's reconnect cooldown
 * (1 s) before the next round: cutting on every poll caught rounds half
 * filled, and each such cut could cost a cooldown, so that the queue
 * drained a lane or two a second (t_stopped_cancel saw up to 4 s with 28
 * requests queued). Cut when the round holds what is left (as many new
 * connections as the requests left, or as the lanes), or when it has not
 * filled within ROUND_WAIT_US. Nothing to cut while no new connection is
 * up (the engine waits for its cooldown). */
static void conn_recut(mc_t *m, mc_conn_t *c)
{
    peer_addr_t p;
    if (!peer_addr(c, &p))
        return;
    size_t live = nxl_each_tcp_socket(live_if_peer, &p);
    size_t want = c->inflight < m->lanes ? c->inflight : m->lanes;
    uint64_t now = nxlt_now_us();
    if (!live) {
        c->live_us = 0;
        return;
    }
    if (!c->live_us)
        c->live_us = now;
    if (live < want && now - c->live_us < ROUND_WAIT_US)
        return;
    conn_abort(c);
}

/* The engine's TCP connections per peer, read as its TcpTransport does
 * (MC_TCP_LANES_PER_PEER, else MC_TCP_MAX_CONNECTIONS_PER_PEER: 1 to 16;
 * 4 when not given or not valid) */
static size_t engine_lanes(void)
{
    const char *v = getenv("MC_TCP_LANES_PER_PEER");
    if (!v)
        v = getenv("MC_TCP_MAX_CONNECTIONS_PER_PEER");
    if (!v || !*v || strspn(v, "0123456789") != strlen(v) || strlen(v) > 2)
        return 4;
    long n = strtol(v, NULL, 10);
    return n >= 1 && n <= 16 ? (size_t)n : 4;
}

/* Polls in @p us (0: on the next turn). The delay is a timerfd of our own,
 * watched as a descriptor: a libevent base's timers run on its coarse
 * monotonic clock (4 ms steps here), far coarser than the poll. */
static void poll_arm(mc_t *m, uint64_t us)
{
    m->armed = true;
    if (!us) {
        nxlt_timer_start(m->tm, 0);
        return;
    }
    struct itimerspec it = {.it_value = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000}};
    if (timerfd_settime(m->tfd, 0, &it, NULL))
        nxlt_timer_start(m->tm, us);
}

static void conn_put(mc_conn_t *c)
{
    if (--c->refs)
        return;
    nxlt_io_free(c->io);
    if (c->fd >= 0)
        close(c->fd);
    free(c);
}

static void conn_dead(mc_conn_t *c, const char *why)
{
    if (!c->dead) {
        c->dead = true;
        c->dead_us = nxlt_now_us();
        snprintf(c->dead_why, sizeof(c->dead_why), "%s", why);
    }
    nxlt_io_free(c->io);
    c->io = NULL;
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    /* transfers on it are reported within the grace period */
    if (!TAILQ_EMPTY(&c->m->ops))
        poll_arm(c->m, 0);
}

/* has the peer closed its end (it died)? Looked at when the engine says a
 * transfer failed, before the socket's own event is handled */
static void conn_check(mc_conn_t *c)
{
    if (c->fd < 0)
        return;
    char b;
    ssize_t r = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        char why[120];
        snprintf(why, sizeof(why), "its notification socket closed (%s)",
                 r == 0 ? "end of stream" : strerror(errno));
        conn_dead(c, why);
    }
}

/* one byte on the peer's notification socket: "drain your queue" */
static void ring(mc_conn_t *c)
{
    if (c->fd < 0)
        return;
    ssize_t r;
    do
        r = send(c->fd, (char[]){MSG_BELL}, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (r < 0 && errno == EINTR);
    /* EAGAIN: the peer has bytes enough to read already */
    if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
        conn_dead(c, "its notification socket failed");
}

static void drain_notifs(mc_t *m)
{
    int n = 0;
    if (!m->eng) /* destroyed by quiesce */
        return;
    nxl_te_notify_t *v = m->L->get_notifs(m->eng, &n);
    if (!v)
        return;
    for (int i = 0; i < n; i++) {
        size_t len = 0;
        void *msg = v[i].msg ? nxli_b64_decode(v[i].msg, &len) : NULL;
        if (!msg) {
            nxlt_log(m->ctx, NXL_LOG_WARN, "MOONCAKE: a notification from %s that is not ours "
                     "(not base64): dropped", v[i].name ? v[i].name : "?");
            continue;
        }
        nxlt_notif_recv(m->ctx, v[i].name ? v[i].name : "", msg, len);
        free(msg);
    }
    m->L->free_notifs(v, n);
}

/* ------------------------------------------------------------ polling */

static void op_fail(mc_op_t *o, nxl_status_t st, const char *fmt, const char *arg)
{
    if (o->st != NXL_SUCCESS)
        return;
    o->st = st;
    snprintf(o->why, sizeof(o->why), fmt, arg);
}

/* @p k requests of @p o ended in the engine (or went with it). A peer
 * whose connections were cut at a deadline gets nothing more for HOLD_US
 * once none of its requests is left: after a cut, the engine's TCP
 * transport opens no connection to the peer for 1 s
 * (tcp_transport_lane_impl.h, kReconnectRoundCooldown): a request handed
 * to it meanwhile would wait in its queue, on no socket that a later
 * deadline could cut; held here, its deadline ends it at once. */
static void ended(mc_t *m, mc_op_t *o, size_t k)
{
    mc_conn_t *c = o->conn;
    m->inflight -= k;
    c->inflight -= k;
    if (!c->inflight && c->dl_abort) {
        c->dl_abort = false;
        c->hold_us = nxlt_now_us() + HOLD_US;
    }
}

static void op_finish(mc_t *m, mc_op_t *o)
{
    TAILQ_REMOVE(&m->ops, o, q);
    ended(m, o, o->sub - o->next);
    free(o->rq);
    free(o->nt.msg);
    /* every request handed over has ended (the engine holds no buffer of
     * it), or the engine is gone */
    if (o->batch != NXL_TE_INVALID_BATCH && m->eng)
        m->L->free_batch(m->eng, o->batch);
    if (o->st == NXL_SUCCESS && o->conn->unloaded) {
        o->st = NXL_ERR_REMOTE_DISCONNECT;
        snprintf(o->why, sizeof(o->why), "MOONCAKE: the connection to %s was unloaded",
                 o->conn->agent);
    }
    if (o->st == NXL_SUCCESS && o->notif)
        ring(o->conn);
    if (o->st != NXL_SUCCESS)
        nxlt_log(m->ctx, NXL_LOG_DEBUG, "%s", o->why);
    if (o->op)
        nxlt_op_done(o->op, o->st, o->st == NXL_SUCCESS ? NULL : o->why);
    if (o->is_flush && o->conn->flush == o) {
        o->conn->flush = NULL;
        /* connections found cut, and none of the flush got through: the
         * engine's cooldown again. One that got through went on a lane
         * usable after the cut, or on a new one, the cooldown over: a
         * second hold (with the first, and the cooldown the flush waited
         * for, 3 s) made the transfers waiting behind it see no progress
         * for their stall_timeout (t_deadline_mixed) */
        if (o->st != NXL_SUCCESS && !o->conn->dead && !o->some_ok) {
            o->conn->hold_us = nxlt_now_us() + HOLD_US;
            nxlt_log(m->ctx, NXL_LOG_INFO, "MOONCAKE: connections to '%s' cut while idle at a "
                     "deadline's abort are closed now; the next post to it waits %u ms more",
                     o->conn->agent, HOLD_US / 1000);
        }
    }
    if (o->has_dl)
        o->conn->dl_ops--;
    conn_put(o->conn);
    free(o);
}

/* Fails the op: nothing more of it starts, and it is reported (on_poll,
 * op_finish) once every request handed to the engine has ended there (the
 * cancel rule: the engine may write a READ's buffer, or read a WRITE's,
 * until then). Its peer's connections are aborted where @p abort (the peer
 * is lost: conn_abort), on every poll while the op waits. */
static void op_give_up(mc_t *m, mc_op_t *o, nxl_status_t st, const char *why, bool abort)
{
    if (o->given_up)
        return;
    o->given_up = true;
    op_fail(o, st, "%s", why);
    o->n = o->sub;
    if (!abort || o->next >= o->sub || o->conn->aborting)
        return;
    o->conn->aborting = true;
    if (conn_abort(o->conn) < 0)
        nxlt_log(m->ctx, NXL_LOG_WARN, "MOONCAKE: %s: its engine's connections cannot be "
                 "aborted (its data port is not known): the transfer is reported when the "
                 "engine ends it", o->conn->agent);
}

static mc_op_t *op_new(mc_t *m, nxlt_op_t *op, mc_conn_t *c);

/* A cut (dl_abort) also shuts the engine's idle connections to the peer,
 * and the engine does not see it: it hands the next request to such a
 * connection, where it fails (TcpTransport::runGroupPump takes an IDLE
 * lane whose asio socket is open; nothing reads an idle socket). Before
 * anything else goes to the peer, nxl hands the engine @p k one-byte
 * READs of its own (into m->scratch, from an address of the peer's that
 * a transfer used): the connections cut while idle take them and fail,
 * and close; the others, or new ones, complete them. Queued first, sent
 * after the hold (submit_more); the peer's transfers wait for its end,
 * and for the engine's cooldown again if one failed (op_finish). One per
 * lane, whatever the cut found: our count of requests in flight says
 * nothing of which lanes were busy (the engine's status is read in order:
 * a request that ended behind one still running counts as in flight, its
 * lane idle), nor of the lanes that a re-cut (conn_recut) finds idle; a
 * lane cut while idle and not flushed failed the next transfer
 * (t_deadline_mixed). With one connection per peer, the flush after a cut
 * that found it busy also starts the engine's cooldown: the engine fails
 * it (runGroupPump: every connection of the round tried, none usable, no
 * cooldown started). */
static mc_op_t *flush_new(mc_t *m, mc_conn_t *c, size_t k)
{
    mc_op_t *o = op_new(m, NULL, c);
    if (!o)
        return NULL;
    o->is_flush = o->read = true;
    if (!(o->rq = calloc(k, sizeof(*o->rq))) ||
        (o->batch = m->L->alloc_batch(m->eng, k)) == NXL_TE_INVALID_BATCH || !o->batch) {
        nxlt_log(m->ctx, NXL_LOG_WARN, "MOONCAKE: no flush of the connections to '%s' (out of "
                 "memory or batches): the next request%s to it may fail", c->agent,
                 k == 1 ? "" : "s");
        free(o->rq);
        conn_put(c);
        free(o);
        return NULL;
    }
    for (size_t i = 0; i < k; i++) {
        o->rq[i].opcode = NXL_TE_OPCODE_READ;
        o->rq[i].source = m->scratch;
        o->rq[i].target_id = c->sid;
        o->rq[i].target_offset = c->flush_raddr;
        o->rq[i].length = 1;
    }
    o->n = k;
    TAILQ_INSERT_HEAD(&m->ops, o, q);
    return o;
}

/* A transfer's deadline passed (on_deadline) with requests of it in the
 * engine, which cannot cancel them: its peer's connections are cut
 * (conn_abort), and cut again on each poll until the engine has ended
 * every request to that peer (submit_more leaves none waiting in its
 * queue). Every transfer to the peer with anything left goes with them:
 * the timed-out one (its future completes with NXL_ERR_TIMEOUT and the
 * engine's sentence), the others with NXL_ERR_TIMEOUT and a sentence
 * saying so; each is reported once its requests ended (the cancel rule).
 * The peer is not lost: the next post after HOLD_US reconnects. */
static void dl_abort(mc_t *m, mc_conn_t *c)
{
    unsigned n = 0;
    size_t reqs = c->inflight;
    mc_op_t *o;
    TAILQ_FOREACH(o, &m->ops, q) {
        if (o->conn != c || o->given_up || o->batch == NXL_TE_INVALID_BATCH || o->next >= o->n)
            continue;
        char b[sizeof(o->why)];
        snprintf(b, sizeof(b), "MOONCAKE: a %s to %.60s ended with its connection, cut at the "
                 "deadline of another transfer to it: the peer did not answer (stopped, hung or "
                 "overloaded); its buffers are free", o->read ? "READ" : "WRITE", c->agent);
        op_give_up(m, o, NXL_ERR_TIMEOUT, b, false);
        n++;
    }
    c->dl_abort = c->inflight > 0;
    c->aborting = true;
    if (!c->flush)
        c->flush = flush_new(m, c, m->lanes);
    int cut = conn_abort(c);
    nxlt_log(m->ctx, NXL_LOG_INFO, "MOONCAKE: a deadline passed with %zu request%s to '%s' in "
             "the engine: %d connection%s to its engine cut, %u transfer%s to it end with them; "
             "the next post to it waits %u ms (the engine's reconnect cooldown)",
             reqs, reqs == 1 ? "" : "s", c->agent, cut, cut == 1 ? "" : "s", n,
             n == 1 ? "" : "s", HOLD_US / 1000);
}

/* the engine's hook: the deadline of @p op passed (nxlt_op_canceled reads
 * 1 from now on); on_poll aborts what holds it */
static void on_deadline(void *state, nxlt_op_t *op)
{
    mc_t *m = state;
    mc_op_t *o;
    TAILQ_FOREACH(o, &m->ops, q)
        if (o->op == op) {
            o->dl = true;
            poll_arm(m, 0);
            break;
        }
}

static const char *st_name(int s)
{
    switch (s) {
    case NXL_TE_INVALID: return "INVALID";
    case NXL_TE_CANCELED: return "CANCELED";
    case NXL_TE_TIMEOUT: return "TIMEOUT";
    case NXL_TE_FAILED: return "FAILED";
    default: return "unknown";
    }
}

static bool submit_more(mc_t *m);

/* polls one op's tasks; true when it moved */
static bool op_poll(mc_t *m, mc_op_t *o)
{
    bool moved = false;
    while (o->batch != NXL_TE_INVALID_BATCH && m->eng && o->next < o->sub) {
        nxl_te_status_t s = {0};
        int rc = m->L->status(m->eng, o->batch, o->next, &s);
        if (rc) {
            char b[32];
            snprintf(b, sizeof(b), "%d", rc);
            op_fail(o, NXL_ERR_BACKEND, "MOONCAKE: getTransferStatus failed (%s)", b);
            ended(m, o, o->sub - o->next);
            o->n = o->sub = o->next; /* the engine knows nothing more of it */
            break;
        }
        if (s.status == NXL_TE_WAITING || s.status == NXL_TE_PENDING)
            break;
        if (s.status == NXL_TE_COMPLETED)
            o->some_ok = true;
        if (s.status != NXL_TE_COMPLETED) {
            char b[sizeof(o->why)];
            /* once per op (its first failed request): a kill's end of stream
             * may trail the engine's reset by a few ms, the wait for it is
             * bounded (10 x 1 ms) and not paid again for each request */
            if (!o->conn->dead && o->st == NXL_SUCCESS && !o->is_flush) {
                conn_check(o->conn);
                if (!o->conn->dead)
                    for (int i = 0; i < 10 && !o->conn->dead; i++) {
                        struct pollfd pf = {.fd = o->conn->fd, .events = POLLIN};
                        if (poll(&pf, 1, 1) == 1)
                            conn_check(o->conn);
                    }
            }
            snprintf(b, sizeof(b), "MOONCAKE: a transfer to %.30s ended %s%s%s", o->conn->agent,
                     st_name(s.status), o->conn->dead ? ": " : "",
                     o->conn->dead ? o->conn->dead_why : "");
            op_fail(o, o->conn->dead ? NXL_ERR_REMOTE_DISCONNECT : NXL_ERR_BACKEND, "%s", b);
        }
        o->next++;
        ended(m, o, 1);
        moved = true;
    }
    if (moved)
        o->moved_us = nxlt_now_us();
    return moved;
}

static void on_poll(nxlt_timer_t *t, void *arg)
{
    mc_t *m = arg;
    m->armed = false;
    uint64_t now = nxlt_now_us();
    bool moved = false, live = false, aborting = false;
    mc_op_t *o, *tmp;
    TAILQ_FOREACH(o, &m->ops, q) /* each peer's connections cut once a turn */
        o->conn->aborting = false;
    TAILQ_FOREACH(o, &m->ops, q) { /* deadlines passed: abort what holds them */
        if (!o->dl)
            continue;
        if (o->sub < o->n)
            o->n = o->sub; /* start nothing more of it */
        if (op_poll(m, o))
            moved = true;
        mc_conn_t *c = o->conn;
        if (!o->given_up && o->next < o->sub && c->dport && !c->dead && !c->dl_abort) {
            dl_abort(m, c);
            aborting = true;
        }
    }
    TAILQ_FOREACH_SAFE(o, &m->ops, q, tmp) {
        if (op_poll(m, o))
            moved = true;
        if (o->batch == NXL_TE_INVALID_BATCH || o->next >= o->n) {
            op_finish(m, o);
            continue;
        }
        if (o->given_up) {
            /* waits for the engine; a lost peer's connections are cut
             * again (requests that were queued behind the ones cut) */
            if (((o->conn->dead && !o->conn->unloaded) || o->conn->dl_abort) &&
                o->conn->dport) {
                if (!o->conn->aborting) {
                    o->conn->aborting = true;
                    conn_recut(m, o->conn);
                }
                aborting = true;
            }
            continue;
        }
        if (o->conn->dead && now > o->conn->dead_us && now - o->conn->dead_us >= DEAD_GRACE_US) {
            char b[240];
            snprintf(b, sizeof(b), "MOONCAKE: %s lost: %s", o->conn->agent, o->conn->dead_why);
            /* an unloaded peer may live on: its engine ends the requests */
            op_give_up(m, o, NXL_ERR_REMOTE_DISCONNECT, b, !o->conn->unloaded);
            if (!o->conn->unloaded && o->conn->dport)
                aborting = true;
            continue;
        }
        if (o->is_flush)
            continue; /* the peer's transfers wait for it, and their stall_timeout */
        if (m->stall_us && now > o->moved_us && now - o->moved_us >= m->stall_us) {
            char b[240];
            snprintf(b, sizeof(b), "MOONCAKE: no progress to %s for %llu ms (stall_timeout)",
                     o->conn->agent, (unsigned long long)(m->stall_us / 1000));
            conn_dead(o->conn, "stall_timeout");
            op_give_up(m, o, NXL_ERR_REMOTE_DISCONNECT, b, true);
            if (o->conn->dport)
                aborting = true;
            continue;
        }
        live = true;
    }
    if (submit_more(m))
        moved = true;
    if (TAILQ_EMPTY(&m->ops))
        return; /* idle: nothing armed */
    if (!live) {
        poll_arm(m, aborting ? ABORT_POLL_US : ZOMBIE_POLL_US);
        return;
    }
    if (moved)
        m->cur_us = m->min_us;
    else if ((m->cur_us *= 2) > m->max_us)
        m->cur_us = m->max_us;
    if (aborting && m->cur_us > ABORT_POLL_US)
        m->cur_us = ABORT_POLL_US;
    /* a connection of the engine's idles until the next request arrives */
    if (m->throttled && m->cur_us > THROTTLE_POLL_US)
        m->cur_us = THROTTLE_POLL_US;
    /* a dead peer's grace period ends on time */
    poll_arm(m, m->cur_us);
    (void)t;
}

static void on_tfd(nxlt_io_t *io, int fd, unsigned ready, void *arg)
{
    uint64_t n;
    if (read(fd, &n, sizeof(n)) != sizeof(n))
        return; /* disarmed or re-armed meanwhile */
    on_poll(NULL, arg);
}

/* ------------------------------------------------------------ sockets */

static void sock_close(mc_sock_t *s)
{
    LIST_REMOVE(s, l);
    nxlt_io_free(s->io);
    close(s->fd);
    free(s);
}

/* handles the complete messages in s->rb, in order; -1: not our protocol */
static int sock_parse(mc_sock_t *s)
{
    mc_t *m = s->m;
    size_t i = 0;
    bool bell = false;
    while (i < s->rl) {
        uint8_t *p = s->rb + i;
        size_t left = s->rl - i;
        if (p[0] == MSG_BELL) {
            bell = true;
            i++;
        } else if (p[0] == MSG_HELLO) {
            uint16_t n;
            if (left < 3)
                break;
            memcpy(&n, p + 1, 2);
            if (n >= sizeof(s->from))
                return -1;
            if (left < 3u + n)
                break;
            memcpy(s->from, p + 3, n);
            s->from[n] = 0;
            i += 3u + n;
        } else if (p[0] == MSG_REVOKE) {
            mc_revoke_t r;
            if (left < 1 + sizeof(r))
                break;
            memcpy(&r, p + 1, sizeof(r));
            i += 1 + sizeof(r);
            if (bell) { /* notifications sent before the word come first */
                drain_notifs(m);
                bell = false;
            }
            if (s->from[0])
                nxlt_remote_revoked(m->ctx, s->from, (nxl_mem_t)r.type, r.dev, r.addr, r.len);
        } else
            return -1;
    }
    memmove(s->rb, s->rb + i, s->rl - i);
    s->rl -= i;
    if (bell)
        drain_notifs(m);
    return 0;
}

static void on_sock(nxlt_io_t *io, int fd, unsigned ready, void *arg)
{
    mc_sock_t *s = arg;
    mc_t *m = s->m;
    ssize_t r = recv(fd, s->rb + s->rl, sizeof(s->rb) - s->rl, MSG_DONTWAIT);
    if (r > 0) {
        s->rl += (size_t)r;
        if (sock_parse(s)) {
            nxlt_log(m->ctx, NXL_LOG_WARN, "MOONCAKE: a connection to the notification socket "
                     "that does not speak its protocol: closed");
            sock_close(s);
        }
        return;
    }
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    /* the peer closed: what it sent before is in the queue already */
    drain_notifs(m);
    sock_close(s);
}

static void on_accept(nxlt_io_t *io, int fd, unsigned ready, void *arg)
{
    mc_t *m = arg;
    int c = accept(fd, NULL, NULL);
    if (c < 0)
        return;
    mc_sock_t *s = calloc(1, sizeof(*s));
    if (!s || set_nonblock(c) || !(s->io = nxlt_io_new(m->ctx, c, on_sock, s)) ||
        nxlt_io_start(s->io, NXLT_IO_READ)) {
        if (s)
            nxlt_io_free(s->io);
        free(s);
        close(c);
        return;
    }
    s->m = m;
    s->fd = c;
    LIST_INSERT_HEAD(&m->socks, s, l);
}

/* the peer's end of our connection: readable only when it closed */
static void on_conn_io(nxlt_io_t *io, int fd, unsigned ready, void *arg)
{
    mc_conn_t *c = arg;
    char b[64];
    ssize_t r = recv(fd, b, sizeof(b), MSG_DONTWAIT);
    if (r > 0 || (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)))
        return;
    char why[120];
    snprintf(why, sizeof(why), "its notification socket closed (%s)",
             r == 0 ? "end of stream" : strerror(errno));
    conn_dead(c, why);
}

/* ------------------------------------------------------------ the table */

static int probe(char *why, size_t cap)
{
    if (!lib_get(why, cap))
        return 0;
    snprintf(why, cap, "Mooncake Transfer Engine (%s): DRAM between agents over its TCP "
             "transport, P2P handshake", lib.name);
    return 1;
}

static void quiesce(void *state);

static void destroy(void *state)
{
    mc_t *m = state;
    if (!m)
        return;
    quiesce(m); /* every op reported, the engine holds none */
    mc_sock_t *s;
    while ((s = LIST_FIRST(&m->socks)))
        sock_close(s);
    nxlt_io_free(m->lio);
    if (m->lfd >= 0)
        close(m->lfd);
    nxlt_timer_free(m->tm);
    nxlt_io_free(m->tio);
    if (m->tfd >= 0)
        close(m->tfd);
    if (m->eng)
        m->L->destroy(m->eng);
    free(m);
}

static nxl_status_t create(nxlt_ctx_t *ctx, const nxl_param_t *params, size_t n, void **out)
{
    char why[300];
    const mc_lib_t *L = lib_get(why, sizeof(why));
    if (!L) { /* known but not usable here, as every transport says it */
        nxlt_error(ctx, "MOONCAKE: %s", why);
        return NXL_ERR_BACKEND;
    }
    uint64_t pmin = DEF_POLL_MIN_US, pmax = DEF_POLL_MAX_US, stall_ms = 30000;
    uint64_t window = DEF_WINDOW, peer_window = 0;
    nxl_status_t st;
    if ((st = nxlt_param_uint(ctx, params, n, "window", 1, 1024, &window)) != NXL_SUCCESS ||
        (st = nxlt_param_uint(ctx, params, n, "peer_window", 0, 1024, &peer_window)) !=
            NXL_SUCCESS ||
        (st = nxlt_param_uint(ctx, params, n, "poll_min_us", 1, 1000000, &pmin)) != NXL_SUCCESS ||
        (st = nxlt_param_uint(ctx, params, n, "poll_max_us", 1, 1000000, &pmax)) != NXL_SUCCESS ||
        (st = nxlt_param_duration(ctx, params, n, "stall_timeout", 0, 3600000, &stall_ms)) !=
            NXL_SUCCESS)
        return st;
    if (pmax < pmin) {
        nxlt_error(ctx, "MOONCAKE: poll_max_us (%llu) is below poll_min_us (%llu)",
                   (unsigned long long)pmax, (unsigned long long)pmin);
        return NXL_ERR_INVALID_PARAM;
    }
    mc_t *m = calloc(1, sizeof(*m));
    if (!m) {
        nxlt_error(ctx, "MOONCAKE: out of memory");
        return NXL_ERR_BACKEND;
    }
    m->ctx = ctx;
    m->L = L;
    m->lfd = -1;
    m->tfd = -1;
    m->min_us = m->cur_us = pmin;
    m->max_us = pmax;
    m->stall_us = stall_ms * 1000;
    m->window = window;
    TAILQ_INIT(&m->ops);
    LIST_INIT(&m->socks);
    LIST_INIT(&m->conns);
    const char *ip = nxlt_param(params, n, "ip");
    if (ip && *ip)
        snprintf(m->ip, sizeof(m->ip), "%s", ip);
    else
        default_ip(m->ip, sizeof(m->ip));

    /* the notification socket, on the engine's address */
    struct sockaddr_in sa = {.sin_family = AF_INET};
    if (inet_pton(AF_INET, m->ip, &sa.sin_addr) != 1) {
        nxlt_error(ctx, "MOONCAKE: ip=%s: an IPv4 address of this host", m->ip);
        free(m);
        return NXL_ERR_INVALID_PARAM;
    }
    socklen_t sl = sizeof(sa);
    if ((m->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
        bind(m->lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(m->lfd, 64) ||
        getsockname(m->lfd, (struct sockaddr *)&sa, &sl) || set_nonblock(m->lfd)) {
        nxlt_error(ctx, "MOONCAKE: its notification socket on %s: %s", m->ip, strerror(errno));
        destroy(m);
        return NXL_ERR_BACKEND;
    }
    m->lport = ntohs(sa.sin_port);
    if (!(m->lio = nxlt_io_new(ctx, m->lfd, on_accept, m)) ||
        nxlt_io_start(m->lio, NXLT_IO_READ) || !(m->tm = nxlt_timer_new(ctx, on_poll, m))) {
        destroy(m);
        return NXL_ERR_BACKEND;
    }
    if ((m->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)) < 0 ||
        !(m->tio = nxlt_io_new(ctx, m->tfd, on_tfd, m)) || nxlt_io_start(m->tio, NXLT_IO_READ)) {
        nxlt_error(ctx, "MOONCAKE: its poll timer (timerfd): %s", strerror(errno));
        destroy(m);
        return NXL_ERR_BACKEND;
    }

    /* the TCP transport's pooled connections (a few per peer, reused): by
     * default it opens one connection per request */
    setenv("MC_TCP_ENABLE_CONNECTION_POOL", "1", 0);
    m->lanes = engine_lanes();
    m->peer_max = peer_window ? (size_t)peer_window : m->lanes;
    m->peer_nodl = m->lanes * (1 + QUEUE_PER_LANE);
    m->peer_fixed = peer_window != 0;
    ports_t before = {.n = 0};
    nxl_each_tcp_socket(add_listener, &before);
    m->eng = L->create("P2PHANDSHAKE", m->ip, m->ip, 0, 0);
    if (!m->eng) {
        nxlt_error(ctx, "MOONCAKE: createTransferEngine(P2PHANDSHAKE, %s) failed (its log says "
                   "why: MC_LOG_LEVEL=INFO)", m->ip);
        destroy(m);
        return NXL_ERR_BACKEND;
    }
    if (!L->install(m->eng, "tcp", NULL)) {
        nxlt_error(ctx, "MOONCAKE: installTransport(tcp) failed");
        destroy(m);
        return NXL_ERR_BACKEND;
    }
    char seg[SEG_MAX] = "";
    L->local(m->eng, seg, sizeof(seg));
    if (!seg[0] || strlen(seg) >= SEG_MAX - 1) {
        nxlt_error(ctx, "MOONCAKE: the engine names no segment for itself");
        destroy(m);
        return NXL_ERR_BACKEND;
    }
    snprintf(m->seg, sizeof(m->seg), "%s", seg);
    if (!(m->dport = data_port(&before, m->seg)))
        nxlt_log(ctx, NXL_LOG_WARN, "MOONCAKE: the engine's TCP data port is not known (another "
                 "engine was created meanwhile?): a peer cannot abort its connections to this "
                 "one when it gives them up, and waits for the engine instead");
    snprintf(m->desc, sizeof(m->desc), "Mooncake TE (%s): tcp, segment %s, notifications on "
             "port %u, polled every %llu-%llu us while busy", lib.name, m->seg, m->lport,
             (unsigned long long)m->min_us, (unsigned long long)m->max_us);
    nxlt_on_deadline(ctx, on_deadline); /* aborts (dl_abort) */
    *out = m;
    return NXL_SUCCESS;
}

static nxl_status_t reg(void *state, nxl_mem_t type, const nxl_desc_t *d, void **md)
{
    mc_t *m = state;
    if (!d->len) {
        nxlt_error(m->ctx, "MOONCAKE: an empty region");
        return NXL_ERR_INVALID_PARAM;
    }
    mc_reg_t *r = malloc(sizeof(*r));
    if (!r) {
        nxlt_error(m->ctx, "MOONCAKE: out of memory");
        return NXL_ERR_BACKEND;
    }
    r->addr = (void *)(uintptr_t)d->addr;
    r->len = d->len;
    int rc = m->L->reg(m->eng, r->addr, r->len, "cpu:0", 1);
    if (rc) {
        nxlt_error(m->ctx, "MOONCAKE: registerLocalMemory(%p, %zu) failed (%d)", r->addr, r->len,
                   rc);
        free(r);
        return NXL_ERR_BACKEND;
    }
    *md = r;
    return NXL_SUCCESS;
}

static void dereg(void *state, void *md)
{
    mc_t *m = state;
    mc_reg_t *r = md;
    if (m->eng && m->L->unreg(m->eng, r->addr))
        nxlt_log(m->ctx, NXL_LOG_WARN, "MOONCAKE: unregisterLocalMemory(%p) failed", r->addr);
    free(r);
}

static nxl_status_t pack_key(void *state, void *md, void **buf, size_t *len)
{
    mc_t *m = state;
    mc_reg_t *r = md;
    mc_key_t *k = calloc(1, sizeof(*k));
    if (!k) {
        nxlt_error(m->ctx, "MOONCAKE: out of memory");
        return NXL_ERR_BACKEND;
    }
    k->magic = KEY_MAGIC;
    k->addr = (uintptr_t)r->addr;
    k->len = r->len;
    *buf = k;
    *len = sizeof(*k);
    return NXL_SUCCESS;
}

static nxl_status_t load_key(void *state, void *conn, const void *buf, size_t len, void **rkey)
{
    mc_t *m = state;
    mc_key_t *k = malloc(sizeof(*k));
    if (!k) {
        nxlt_error(m->ctx, "MOONCAKE: out of memory");
        return NXL_ERR_BACKEND;
    }
    if (len != sizeof(*k) || (memcpy(k, buf, sizeof(*k)), k->magic != KEY_MAGIC)) {
        free(k);
        nxlt_error(m->ctx, "MOONCAKE: a region key that is not MOONCAKE's");
        return NXL_ERR_MISMATCH;
    }
    *rkey = k;
    return NXL_SUCCESS;
}

static void unload_key(void *state, void *rkey)
{
    free(rkey);
}

/* conn info: magic, notification port, the segment name's length and the
 * name (with its NUL), the engine's TCP data port (0: not known) */
static nxl_status_t conn_info(void *state, void **buf, size_t *len)
{
    mc_t *m = state;
    size_t sl = strlen(m->seg) + 1;
    uint8_t *b = malloc(8 + sl + 2);
    if (!b) {
        nxlt_error(m->ctx, "MOONCAKE: out of memory");
        return NXL_ERR_BACKEND;
    }
    uint32_t magic = htonl(CONN_MAGIC);
    uint16_t port = htons(m->lport), slen = htons((uint16_t)sl);
    memcpy(b, &magic, 4);
    memcpy(b + 4, &port, 2);
    memcpy(b + 6, &slen, 2);
    memcpy(b + 8, m->seg, sl);
    uint16_t dport = htons(m->dport);
    memcpy(b + 8 + sl, &dport, 2);
    *buf = b;
    *len = 8 + sl + 2;
    return NXL_SUCCESS;
}

static nxl_status_t load_conn(void *state, const char *agent, const void *info, size_t len,
                              void **out)
{
    mc_t *m = state;
    const uint8_t *b = info;
    uint32_t magic;
    uint16_t port, sl;
    if (len < 9 || (memcpy(&magic, b, 4), ntohl(magic) != CONN_MAGIC)) {
        nxlt_error(m->ctx, "MOONCAKE: %s's connection info is not MOONCAKE's", agent);
        return NXL_ERR_MISMATCH;
    }
    memcpy(&port, b + 4, 2);
    memcpy(&sl, b + 6, 2);
    sl = ntohs(sl);
    if (sl < 2 || sl > SEG_MAX - 1 || (len != 8u + sl && len != 8u + sl + 2) || b[8 + sl - 1] ||
        memchr(b + 8, 0, sl - 1)) {
        nxlt_error(m->ctx, "MOONCAKE: %s's connection info is malformed", agent);
        return NXL_ERR_MISMATCH;
    }
    mc_conn_t *c = calloc(1, sizeof(*c));
    if (!c) {
        nxlt_error(m->ctx, "MOONCAKE: out of memory");
        return NXL_ERR_BACKEND;
    }
    c->m = m;
    c->fd = -1;
    c->refs = 1;
    snprintf(c->agent, sizeof(c->agent), "%s", agent);
    memcpy(c->seg, b + 8, sl);
    if (len == 8u + sl + 2) { /* an older peer's lacks it */
        memcpy(&c->dport, b + 8 + sl, 2);
        c->dport = ntohs(c->dport);
    }

    /* the notification socket first: a peer that is gone fails fast here */
    char host[64];
    seg_host(c->seg, host, sizeof(host));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = port};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        nxlt_error(m->ctx, "MOONCAKE: %s's segment %s has no IPv4 address", agent, c->seg);
        free(c);
        return NXL_ERR_MISMATCH;
    }
    int one = 1;
    if ((c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) < 0) {
        nxlt_error(m->ctx, "MOONCAKE: socket: %s", strerror(errno));
        free(c);
        return NXL_ERR_BACKEND;
    }
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    int rc = connect(c->fd, (struct sockaddr *)&sa, sizeof(sa));
    if (rc && errno == EINPROGRESS) {
        /* bounded: one round trip, or the peer is not there */
        struct pollfd p = {.fd = c->fd, .events = POLLOUT};
        int err = 0;
        socklen_t el = sizeof(err);
        rc = poll(&p, 1, 3000);
        if (rc == 1 && !getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el) && !err)
            rc = 0;
        else
            errno = rc == 0 ? ETIMEDOUT : err ? err : errno;
        rc = rc ? -1 : 0;
    }
    if (rc) {
        nxlt_error(m->ctx, "MOONCAKE: %s (%s:%u): %s", agent, host, ntohs(port),
                   strerror(errno));
        close(c->fd);
        free(c);
        return NXL_ERR_REMOTE_DISCONNECT;
    }
    c->sid = m->L->open_seg(m->eng, c->seg);
    if (c->sid < 0) {
        nxlt_error(m->ctx, "MOONCAKE: openSegment(%s) of %s failed (%d)", c->seg, agent, c->sid);
        close(c->fd);
        free(c);
        return NXL_ERR_REMOTE_DISCONNECT;
    }
    const char *me = nxl_agent_name(nxlt_agent(m->ctx));
    uint8_t hello[3 + 64];
    uint16_t hn = (uint16_t)strnlen(me, 63);
    hello[0] = MSG_HELLO;
    memcpy(hello + 1, &hn, 2);
    memcpy(hello + 3, me, hn);
    if (send_all(c->fd, hello, 3u + hn)) {
        nxlt_error(m->ctx, "MOONCAKE: %s (%s:%u): %s", agent, host, ntohs(port),
                   strerror(errno));
        close(c->fd);
        free(c);
        return NXL_ERR_REMOTE_DISCONNECT;
    }
    if (!(c->io = nxlt_io_new(m->ctx, c->fd, on_conn_io, c)) ||
        nxlt_io_start(c->io, NXLT_IO_READ)) {
        nxlt_io_free(c->io);
        close(c->fd);
        free(c);
        return NXL_ERR_BACKEND;
    }
    LIST_INSERT_HEAD(&m->conns, c, l);
    *out = c;
    return NXL_SUCCESS;
}

static void unload_conn(void *state, void *conn)
{
    mc_conn_t *c = conn;
    LIST_REMOVE(c, l);
    c->unloaded = true;
    conn_dead(c, "the connection was unloaded");
    conn_put(c);
}

static mc_op_t *op_new(mc_t *m, nxlt_op_t *op, mc_conn_t *c)
{
    mc_op_t *o = calloc(1, sizeof(*o));
    if (!o) {
        nxlt_error(m->ctx, "MOONCAKE: out of memory");
        return NULL;
    }
    o->op = op;
    o->conn = c;
    c->refs++;
    if (op && nxlt_op_deadline_ms(op)) {
        o->has_dl = true;
        c->dl_ops++;
    }
    o->batch = NXL_TE_INVALID_BATCH;
    o->post_us = o->moved_us = nxlt_now_us();
    return o;
}

static void op_queue(mc_t *m, mc_op_t *o, bool now)
{
    TAILQ_INSERT_TAIL(&m->ops, o, q);
    if (now)
        poll_arm(m, 0);
    else if (!m->armed || m->cur_us > m->min_us) {
        m->cur_us = m->min_us;
        poll_arm(m, m->min_us);
    }
}

static nxl_status_t refuse_dead(mc_t *m, mc_conn_t *c)
{
    nxlt_error(m->ctx, "MOONCAKE: %s lost: %s", c->agent, c->dead_why);
    return NXL_ERR_REMOTE_DISCONNECT;
}

/* a notification's bytes as the engine's string, with our agent's name */
static nxl_status_t make_notify(mc_t *m, const void *msg, size_t len, nxl_te_notify_t *nt)
{
    nt->name = (char *)nxl_agent_name(nxlt_agent(m->ctx));
    nt->msg = nxli_b64_encode(msg, len);
    if (!nt->msg) {
        nxlt_error(m->ctx, "MOONCAKE: out of memory");
        return NXL_ERR_BACKEND;
    }
    return NXL_SUCCESS;
}

/* Hands the engine what the window allows of the ops waiting, in order:
 * its TCP transport queues at most 1024 requests per peer (and 1024
 * waiting admission), and fails the rest. The last part of a transfer
 * that carries a notification goes with it (submitTransferWithNotify), so
 * that the engine sends it once every part has completed.
 *
 * While a transfer posted with a deadline is in flight to a peer whose
 * connections can be cut (its data port known), that peer has at most one
 * request per engine connection to it (m->lanes) in the engine, so that
 * none waits in the engine's queue: when a deadline cuts the connections
 * (dl_abort), the engine ends every request of that peer at once. A
 * request queued there behind them would wait for the engine's reconnect
 * cooldown (1 s, on no socket), then for the next cut. Transfers without
 * deadlines keep a request queued behind each connection (m->peer_nodl:
 * the engine starts it as the one before ends, without waiting for our
 * poll), and no more: each request queued there to a stopped peer waits
 * for a round of new connections (conn_recut), and up to window (512)
 * queued held a cancel's or a lost peer's abort for seconds. The
 * peer_window parameter sets a limit that holds always (m->peer_max). */
static bool submit_more(mc_t *m)
{
    bool any = false;
    uint64_t now = nxlt_now_us();
    m->throttled = false;
    for (mc_op_t *o = TAILQ_FIRST(&m->ops); o && m->inflight < m->window;
         o = TAILQ_NEXT(o, q)) {
        if (o->batch == NXL_TE_INVALID_BATCH || o->sub >= o->n)
            continue;
        if (o->conn->dead) {
            op_fail(o, NXL_ERR_REMOTE_DISCONNECT, "MOONCAKE: %s", o->conn->dead_why);
            o->n = o->sub;
            continue;
        }
        if (o->op && o->st == NXL_SUCCESS && nxlt_op_canceled(o->op)) {
            o->n = o->sub; /* canceled: start nothing more of it */
            continue;
        }
        mc_conn_t *c = o->conn;
        if (c->dl_abort || c->hold_us > now || (c->flush && c->flush != o))
            continue;
        size_t k = o->n - o->sub;
        if (k > m->window - m->inflight)
            k = m->window - m->inflight;
        if (c->dport) {
            /* without a deadline a request waits queued behind each lane:
             * the lanes do not idle until our next poll, which need not
             * come sooner than usual (THROTTLE_POLL_US took the engine's
             * CPU: READ of 4 MiB blocks 15% slower) */
            bool tight = m->peer_fixed || c->dl_ops;
            size_t max = tight ? m->peer_max : m->peer_nodl;
            if (c->inflight >= max) {
                m->throttled |= tight;
                continue;
            }
            if (k > max - c->inflight) {
                k = max - c->inflight;
                m->throttled |= tight;
            }
        }
        bool last = o->sub + k == o->n;
        int rc = last && o->nt.msg
                     ? m->L->submit_notify(m->eng, o->batch, o->rq + o->sub, k, o->nt)
                     : m->L->submit(m->eng, o->batch, o->rq + o->sub, k);
        if (rc) {
            char b[120];
            snprintf(b, sizeof(b), "%s of %zu request%s to %.40s failed (%d)",
                     last && o->nt.msg ? "submitTransferWithNotify" : "submitTransfer", k,
                     k == 1 ? "" : "s", o->conn->agent, rc);
            op_fail(o, NXL_ERR_BACKEND, "MOONCAKE: %s", b);
            o->n = o->sub; /* what was submitted still ends in the engine */
            continue;
        }
        if (!o->is_flush)
            c->flush_raddr = o->rq[o->sub + k - 1].target_offset;
        o->sub += k;
        m->inflight += k;
        c->inflight += k;
        any = true;
        if (last) {
            free(o->rq);
            o->rq = NULL;
        }
    }
    return any;
}

static nxl_status_t post(void *state, nxlt_op_t *op, const nxlt_xfer_t *x)
{
    mc_t *m = state;
    mc_conn_t *c = x->conn;
    if (c->dead)
        return refuse_dead(m, c);
    if (!m->eng) {
        nxlt_error(m->ctx, "MOONCAKE: the agent is going");
        return NXL_ERR_CANCELED;
    }
    mc_op_t *o = op_new(m, op, c);
    if (!o)
        return NXL_ERR_BACKEND;
    nxl_status_t st = NXL_SUCCESS;
    if (!x->n && !x->notif) {
        op_queue(m, o, true);
        return NXL_SUCCESS;
    }
    if (x->notif && (st = make_notify(m, x->notif, x->notif_len, &o->nt)) != NXL_SUCCESS)
        goto fail;
    if (!x->n) {
        /* a notification alone */
        int rc = m->L->gen_notify(m->eng, (uint64_t)c->sid, o->nt);
        if (rc) {
            nxlt_error(m->ctx, "MOONCAKE: genNotifyInEngine to %s failed (%d)", c->agent, rc);
            st = NXL_ERR_REMOTE_DISCONNECT;
            goto fail;
        }
        ring(c); /* the engine has delivered it: the peer may drain its queue */
        op_queue(m, o, true);
        return NXL_SUCCESS;
    }
    if (!(o->rq = calloc(x->n, sizeof(*o->rq)))) {
        nxlt_error(m->ctx, "MOONCAKE: out of memory");
        st = NXL_ERR_BACKEND;
        goto fail;
    }
    for (size_t i = 0; i < x->n; i++) {
        o->rq[i].opcode = x->op == NXL_READ ? NXL_TE_OPCODE_READ : NXL_TE_OPCODE_WRITE;
        o->rq[i].source = x->iov[i].laddr;
        o->rq[i].target_id = c->sid;
        o->rq[i].target_offset = x->iov[i].raddr;
        o->rq[i].length = x->iov[i].len;
    }
    o->batch = m->L->alloc_batch(m->eng, x->n);
    if (o->batch == NXL_TE_INVALID_BATCH || !o->batch) {
        o->batch = NXL_TE_INVALID_BATCH;
        nxlt_error(m->ctx, "MOONCAKE: allocateBatchID(%zu) failed", x->n);
        st = NXL_ERR_BACKEND;
        goto fail;
    }
    o->n = x->n;
    o->notif = x->notif != NULL;
    o->read = x->op == NXL_READ;
    op_queue(m, o, false);
    submit_more(m);
    if (!o->sub && o->st != NXL_SUCCESS) {
        /* nothing of it started: the post fails */
        nxlt_error(m->ctx, "%s", o->why);
        st = o->st;
        TAILQ_REMOVE(&m->ops, o, q);
        m->L->free_batch(m->eng, o->batch);
        goto fail;
    }
    return NXL_SUCCESS;
fail:
    free(o->nt.msg);
    free(o->rq);
    if (o->has_dl)
        c->dl_ops--;
    conn_put(c);
    free(o);
    return st;
}

static nxl_status_t notif_send(void *state, nxlt_op_t *op, void *conn, const void *msg,
                               size_t len)
{
    nxlt_xfer_t x = {.op = NXL_WRITE, .conn = conn, .notif = msg, .notif_len = len};
    return post(state, op, &x);
}

/* Teardown: waits (sleeping) until the engine has ended every request
 * handed to it, at most QUIESCE_MAX_US and no longer than QUIESCE_IDLE_US
 * without one ending (a stopped peer), then destroys the engine if any is
 * left: its TCP transport cancels every session and joins its thread
 * (TcpTransport::shutdownConnectionLanes), so nothing touches a buffer
 * after that. Every op is reported (CANCELED unless it failed) only then. */
static void quiesce(void *state)
{
    mc_t *m = state;
    uint64_t now = nxlt_now_us(), end = now + QUIESCE_MAX_US, moved = now;
    mc_op_t *o, *tmp;
    TAILQ_FOREACH(o, &m->ops, q)
        o->n = o->sub; /* start nothing more */
    for (;;) {
        bool left = false;
        TAILQ_FOREACH_SAFE(o, &m->ops, q, tmp) {
            if (op_poll(m, o))
                moved = nxlt_now_us();
            if (o->batch == NXL_TE_INVALID_BATCH || o->next >= o->n) {
                if (o->st == NXL_SUCCESS) {
                    o->st = NXL_ERR_CANCELED;
                    snprintf(o->why, sizeof(o->why), "MOONCAKE: the agent is going");
                }
                o->notif = false;
                op_finish(m, o);
            } else
                left = true;
        }
        now = nxlt_now_us();
        if (!left || now > end || now - moved > QUIESCE_IDLE_US)
            break;
        usleep(200);
    }
    if (!TAILQ_EMPTY(&m->ops) && m->eng) {
        size_t reqs = 0;
        TAILQ_FOREACH(o, &m->ops, q)
            reqs += o->sub - o->next;
        nxlt_log(m->ctx, NXL_LOG_WARN, "MOONCAKE: %zu request%s still in the engine after %llu "
                 "ms: the engine is destroyed now (its connections closed, its thread joined)",
                 reqs, reqs == 1 ? "" : "s",
                 (unsigned long long)((now - (end - QUIESCE_MAX_US)) / 1000));
        m->L->destroy(m->eng);
        m->eng = NULL;
    }
    TAILQ_FOREACH_SAFE(o, &m->ops, q, tmp) {
        o->batch = NXL_TE_INVALID_BATCH; /* went with the engine (its memory left) */
        if (o->st == NXL_SUCCESS) {
            o->st = NXL_ERR_CANCELED;
            snprintf(o->why, sizeof(o->why), "MOONCAKE: the agent is going (its transfer was "
                     "ended by the engine's destruction)");
        }
        o->notif = false;
        op_finish(m, o);
    }
    if (m->tm)
        nxlt_timer_stop(m->tm);
    struct itimerspec off = {{0, 0}, {0, 0}};
    if (m->tfd >= 0)
        timerfd_settime(m->tfd, 0, &off, NULL);
    m->armed = false;
}

/* The engine's TCP transport checks a WRITE's or READ's addresses against
 * the target's registrations (refusing the rest), but a peer learns of a
 * deregistration only when a transfer fails: tell every peer loaded, on
 * the socket its notifications' doorbells travel, ahead of anything sent
 * later (a reply that the deregistration is done). */
static void revoke_region(void *state, nxl_mem_t type, const nxl_desc_t *d, void *md)
{
    mc_t *m = state;
    uint8_t msg[1 + sizeof(mc_revoke_t)];
    mc_revoke_t r = {.type = (uint32_t)type, .dev = d->dev_id, .addr = d->addr, .len = d->len};
    msg[0] = MSG_REVOKE;
    memcpy(msg + 1, &r, sizeof(r));
    for (mc_conn_t *c = LIST_FIRST(&m->conns); c; c = LIST_NEXT(c, l))
        if (c->fd >= 0 && send_all(c->fd, msg, sizeof(msg)))
            conn_dead(c, "its notification socket failed");
}

static const char *describe(void *state)
{
    return ((mc_t *)state)->desc;
}

static const nxl_param_info_t mc_params[] = {
    {"ip", NULL, "the IPv4 address the engine and the notification socket listen on; not "
                 "given: the first non-loopback address of an interface that is up, else "
                 "127.0.0.1"},
    {"poll_min_us", PSTR(DEF_POLL_MIN_US), "the status poll's first interval after a post or "
                                           "progress, in microseconds"},
    {"poll_max_us", PSTR(DEF_POLL_MAX_US), "its longest interval while transfers are in flight "
                                           "(it doubles up to it while nothing moves)"},
    {"window", PSTR(DEF_WINDOW), "requests handed to the engine at once, at most (1 to 1024: its "
                                 "TCP transport queues 1024 per peer and fails more)"},
    {"peer_window", "0", "requests to one peer handed to the engine at once, at most (0: while a "
                         "transfer with a deadline is in flight to it, one per connection the "
                         "engine keeps to it, MC_TCP_LANES_PER_PEER, so that a deadline's abort "
                         "ends them all at once, and two per connection otherwise; more: always "
                         "that, and a deadline may come up to about 1 s late)"},
    {"stall_timeout", "30s", "a transfer with no progress for this long is given up and its "
                             "peer considered lost (0: never)"},
};

NXLT_MODULE_EXPORT const nxlt_ops_t nxlt_mooncake_ops = {
    NXLT_OPS_HEAD("MOONCAKE", 1u << NXL_DRAM,
                  NXLT_CAP_REMOTE | NXLT_CAP_NOTIF | NXLT_CAP_CANCEL_WAITS, mc_params),
    .probe = probe,
    .create = create,
    .destroy = destroy,
    .reg = reg,
    .dereg = dereg,
    .pack_key = pack_key,
    .conn_info = conn_info,
    .load_conn = load_conn,
    .load_key = load_key,
    .unload_key = unload_key,
    .unload_conn = unload_conn,
    .post = post,
    .notif_send = notif_send,
    .describe = describe,
    .quiesce = quiesce,
    .revoke = revoke_region,
};
