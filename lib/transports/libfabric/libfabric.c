/* SPDX-License-Identifier: BSD-3-Clause */
/* The libfabric transport: DRAM to and from other agents (and within the
 * agent), through one reliable-datagram (FI_EP_RDM) endpoint per agent,
 * driven by the reactor.
 *
 * Progress. One completion queue serves sends, receives and RMA. When the
 * provider gives the CQ a wait fd (FI_WAIT_FD, fi_control(FI_GETWAIT)),
 * the fd sits in the reactor: on wake-up the CQ is read until empty, then
 * fi_trywait() says whether it is safe to sleep; when it is not, progress
 * continues from a zero-delay timer on the next turn (a bounded number of
 * times), so the loop stays fair and an idle agent sleeps. Providers with
 * no wait fd (shm), or one that never stops being readable (net), are
 * progressed from a reactor timer instead: often while something is in
 * flight, backing off to `poll_max` while idle. The agent's busy-poll
 * window spins on the CQ after activity in both modes.
 *
 * A transfer posts one fi_writemsg/fi_readmsg per element (split where an
 * element exceeds the provider's max_msg_size), each with FI_COMPLETION;
 * writes carry FI_DELIVERY_COMPLETE when the provider offers it, so that a
 * write's completion means its data is at the target. The transfer is done
 * when every element completed; only then is its notification sent, with
 * fi_send, into receive buffers the target keeps pre-posted. When the
 * provider refuses a post (-FI_EAGAIN) or the transmit queue is full, the
 * rest of the transfer waits in a queue and resumes as completions free
 * room.
 *
 * Deregistration. A region the application gives up is revoked at every
 * peer this agent is connected to, with a message of the transport's own
 * ('R', wire.h) sent in order with what is posted to that peer: the peer's
 * engine refuses posts into it from then on, which the one-message WRITE
 * (checked only against this agent's registrations) relies on.
 *
 * Failure. Error completions fail their transfer with fi_cq_strerror's
 * text; connection errors fail every operation to that peer at once. A
 * peer whose operations stop completing for `stall_timeout` is declared
 * lost (a dead shm peer or a cut TCP link says nothing). Reports happen
 * only from the reactor's callbacks, never inside a call of the engine:
 * libfabric reports failures as completions, and the CQ is read only from
 * the loop. */
#include "config.h"
#include <nxl/transport.h>

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <stddef.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <poll.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <unistd.h>
#include <dlfcn.h>
#include <pthread.h>

#include "wire.h" /* conn info and keys as they travel */

/* libfabric is loaded when a LIBFABRIC transport is first probed or
 * created, not when libnxl is: Debian's libfabric pulls in libpsm2 and
 * libinfinipath, whose constructors look for their hardware for about
 * 0.2 s at every process start here. Six functions are real symbols; the
 * rest of the API is inline calls through the objects' ops tables. */
#ifndef NXL_LIBFABRIC_SONAME
#define NXL_LIBFABRIC_SONAME "libfabric.so.1"
#endif
static struct {
    int (*getinfo)(uint32_t, const char *, const char *, uint64_t, const struct fi_info *,
                   struct fi_info **);
    void (*freeinfo)(struct fi_info *);
    struct fi_info *(*dupinfo)(const struct fi_info *);
    int (*fabric)(struct fi_fabric_attr *, struct fid_fabric **, void *);
    const char *(*strerror)(int);
    uint32_t (*version)(void);
    char why[200];
    int ok;
} lf_sym;
static pthread_once_t lf_sym_once = PTHREAD_ONCE_INIT;

static void lf_sym_load(void)
{
    void *h = dlopen(NXL_LIBFABRIC_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(lf_sym.why, sizeof(lf_sym.why), "%s", dlerror());
        return;
    }
    *(void **)&lf_sym.getinfo = dlsym(h, "fi_getinfo");
    *(void **)&lf_sym.freeinfo = dlsym(h, "fi_freeinfo");
    *(void **)&lf_sym.dupinfo = dlsym(h, "fi_dupinfo");
    *(void **)&lf_sym.fabric = dlsym(h, "fi_fabric");
    *(void **)&lf_sym.strerror = dlsym(h, "fi_strerror");
    *(void **)&lf_sym.version = dlsym(h, "fi_version");
    if (!lf_sym.getinfo || !lf_sym.freeinfo || !lf_sym.dupinfo || !lf_sym.fabric ||
        !lf_sym.strerror || !lf_sym.version) {
        snprintf(lf_sym.why, sizeof(lf_sym.why), "%s lacks fi_getinfo, fi_fabric or another "
                 "of the functions nxl calls", NXL_LIBFABRIC_SONAME);
        dlclose(h);
        return;
    }
    lf_sym.ok = 1; /* stays loaded for the life of the process */
}

static int lf_loaded(void)
{
    pthread_once(&lf_sym_once, lf_sym_load);
    return lf_sym.ok;
}

#define fi_getinfo(...) lf_sym.getinfo(__VA_ARGS__)
#define fi_freeinfo(i) lf_sym.freeinfo(i)
#define fi_dupinfo(i) lf_sym.dupinfo(i)
#define fi_fabric(...) lf_sym.fabric(__VA_ARGS__)
#define fi_strerror(e) lf_sym.strerror(e)
#define fi_version() lf_sym.version()
#define lf_allocinfo() lf_sym.dupinfo(NULL)

#define LF_API_VERSION FI_VERSION(1, 10)
#define LF_CAPS                                                                                    \
    (FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_SEND | FI_RECV)
/* the MR modes nxl supports; FI_MR_RAW (keys larger than 64 bits) and
 * FI_MR_HMEM (device memory) are not among them */
#define LF_MR_MODES                                                                                \
    (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT)

#define NRX 32                                /* receive buffers kept posted */
#define AMW_MAX 16384                         /* a one-message WRITE: most data it carries */
/* ... by default (am_write_max): none. Its op completes when its send does,
 * before the target has copied the data, and a WRITE must complete only
 * once its bytes are in the target's memory; an acknowledgement would need
 * the target to reach the initiator, which it may never have loaded */
#define AMW_DEFAULT 0
#define AMW_ELEMS 64                          /* ... and most elements */
/* a notification: [u16 name length][name][message]; a WRITE with its
 * notification in one message: [u8 'W'][u8 name length][name][u32 message
 * length][message][u32 n][n x (u64 address, u32 length)][data]; a region
 * revoked: [u8 'R'][u8 name length][name]... (wire.h) */
#define RXSZ (2 + 255 + 4 + NXL_NOTIF_MAX + 4 + 12 * AMW_ELEMS + AMW_MAX)
#define AMW_TAG 'W'
#define CI_AMW 1                              /* connection info flag: takes 'W' messages */
#define CI_REVOKE 2                           /* ... tells its peers of deregistrations (wire.h) */
#define NOTIF_CAP 64                          /* notification sends in flight */
#define CQ_BATCH 32
#define DRAIN_BATCHES 64                      /* CQ reads per turn before the loop gets one */
#define TRY_ROUNDS 16                         /* fi_trywait refusals before yielding */
#define WATCH_MS 100
#define SPIN_SLICE_US 50
#define POLL_MIN_US 1000                      /* timer mode: after activity (the loop's resolution) */
#define POLL_ACTIVE_MAX_US 1000               /* timer mode, something in flight */
#define POLL_MAX_MS 250                       /* timer mode, idle, by default */
#define POLL_MAX_BELL_MS 1000                 /* the same, when this agent has a doorbell */
#define RING_US 50                            /* a peer's doorbell rings at most this often */
#define BELL_WINDOW_US (4 * RING_US)          /* then both poll every loop turn this long */
#define RETRY_US 1000                         /* a post refused with nothing in flight */
#define DESTROY_WAIT_MS 2000                  /* teardown: longest wait for the provider */
#define PROBE_AFTER_US 50000                  /* posts refused this long: probe the peer's address */
#define PROBE_EVERY_US 250000                 /* ... and again at most this often */
#define PROBE_WAIT_S 2                        /* a probe's connect given up (no conclusion) */
#define LF_PEER_CLOSED "the agent, of this process, was destroyed (its endpoint closed)"

enum { CTX_OP = 0x6f70, CTX_RX = 0x7278 };

typedef struct lf_ctx {
    uint32_t kind;
} lf_ctx_t;

typedef struct lf_state lf_t;
typedef struct lf_conn lf_conn_t;

/* one piece to post: what an element becomes once it has to wait */
typedef struct lf_seg {
    void *laddr;
    void *desc;
    uint64_t raddr;         /* as the provider addresses it: virtual address or offset */
    uint64_t key;
    size_t len;
} lf_seg_t;

typedef struct lf_rx {
    lf_ctx_t c;
    unsigned char *buf;
    bool posted;
} lf_rx_t;

typedef struct lf_op {
    lf_ctx_t c;
    lf_t *u;
    nxlt_op_t *op;              /* NULL once reported to the engine */
    lf_conn_t *conn;
    bool is_xfer;
    nxl_op_t dir;
    /* elements: the engine's while inside post, a copy once queued */
    const nxlt_iov_t *iov;
    lf_seg_t *segs;
    size_t n, next, off;
    size_t posted, completed;   /* provider operations (elements, pieces, the notification) */
    int err;                    /* first error: a positive FI_* errno */
    char *errtxt;
    unsigned char *msg;         /* the notification, as sent */
    size_t msg_len;
    struct fid_mr *msg_mr;      /* FI_MR_LOCAL */
    bool want_notif, notif_posted, notif_counted;
    bool stopped;               /* post nothing more of it */
    bool queued;                /* on the wait queue */
    bool checkq;                /* on the check queue */
    bool side;                  /* the transport's own message (a revoke): no engine op */
    LIST_ENTRY(lf_op) link;
    TAILQ_ENTRY(lf_op) wlink;
    TAILQ_ENTRY(lf_op) clink;
} lf_op_t;

/* One address vector entry per peer endpoint, shared by the connections
 * to it: shm 1.17 unmaps a peer's region when any one of two entries for
 * the same address is removed. */
typedef struct lf_addr {
    fi_addr_t fa;
    int refs;
    size_t len;
    LIST_ENTRY(lf_addr) link;
    unsigned char name[];
} lf_addr_t;

struct lf_conn {
    lf_t *u;
    fi_addr_t addr;
    lf_addr_t *av_entry;        /* NULL: loopback */
    bool self;                  /* our own endpoint: loopback by memcpy */
    char *name;
    int refs;                   /* the engine's, plus one per op */
    bool failed, stalled, unloaded;
    bool peer_closed;           /* an agent of this process whose shm endpoint is gone */
    int fail_deferred;          /* a post was refused for a lost peer: fail it from the loop */
    int err;
    char *why;
    unsigned inflight;          /* ops not reported yet */
    uint64_t progress_us;       /* last completion (or first post) of an op on it */
    struct sockaddr_un bell;    /* the peer's doorbell (timer mode), if it has one */
    socklen_t bell_len;         /* 0: none, or it could not be rung */
    uint64_t rung_us;           /* when it was last rung */
    uint64_t heard_us;          /* when a notification of it came while we polled often */
    uint64_t hold_until_us;     /* post nothing before (rxm_hold); 0: no hold */
    unsigned tx_out;            /* provider operations to it in flight */
    uint64_t refused_us;        /* posts to it refused (-FI_EAGAIN) with none in flight since */
    uint64_t probed_us;         /* its address last probed (probe_start) */
    struct event *ev_probe;     /* a probe under way: a connect to its address */
    bool am_write;              /* it takes a WRITE with its notification as one message */
    bool revokes;               /* it tells this agent of the regions it deregisters */
    LIST_ENTRY(lf_conn) link;
};

/* A peer address whose connection failed lately (rxm_hold) */
typedef struct lf_hold {
    uint64_t until_us;
    size_t len;
    LIST_ENTRY(lf_hold) link;
    unsigned char name[];
} lf_hold_t;

typedef struct lf_md {
    struct fid_mr *mr;
    void *desc;
    uint64_t key;
    uintptr_t base;
    size_t len;
} lf_md_t;

typedef struct lf_rkey {
    uint64_t key;
    uint64_t base;
    bool virt;
} lf_rkey_t;

struct lf_state {
    nxlt_ctx_t *ctx;
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_cntr *rma_cntr;  /* timer mode: peers' writes and reads into our memory */
    uint64_t rma_seen;
    struct fid_ep *ep;
    bool ep_closed;
    struct lf_shm_ep *shm_ep;   /* shm: this endpoint among the process's (shm_eps) */
    unsigned long shm_gen_seen; /* shm_gen when this agent last looked */
    unsigned char name[256];    /* our endpoint's address (fi_getname) */
    size_t name_len;
    char prov[64];
    uint32_t addr_format;
    /* memory registration */
    bool mr_local, mr_virt, mr_prov_key, mr_endpoint;
    uint64_t next_key;
    size_t max_msg;
    size_t am_write_max;        /* one-message WRITEs up to this many bytes (0: never) */
    size_t amw_msg_max;         /* ... whose whole message is at most this long */
    bool dc;                    /* FI_DELIVERY_COMPLETE on writes */
    /* progress */
    int wait_fd;                /* -1: timer mode */
    const char *mode_why;
    struct event *ev_fd, *ev_kick, *ev_watch, *ev_poll, *ev_retry, *ev_bell;
    int bell_fd;                /* timer mode: our doorbell, a datagram socket; -1: none */
    char bell_name[48];         /* its abstract address (bell_name[0] == 0) */
    size_t bell_name_len;
    uint64_t busy_until_us;
    uint64_t poll_us, poll_max_us;
    bool hit;                   /* an op completed or a notification came */
    bool in_progress;
    bool quiescing;             /* teardown: post nothing more */
    /* operations */
    size_t tx_cap, tx_inflight, notif_inflight;
    unsigned inflight;          /* ops not reported */
    LIST_HEAD(, lf_op) ops;
    TAILQ_HEAD(, lf_op) waitq;
    TAILQ_HEAD(, lf_op) checkq;
    LIST_HEAD(, lf_conn) conns;
    LIST_HEAD(, lf_addr) addrs;
    LIST_HEAD(, lf_hold) holds;
    uint64_t hold_us;           /* rxm: how long a failed peer's address is held (0: never) */
    /* receives */
    lf_rx_t rx[NRX];
    unsigned char *rxmem;
    struct fid_mr *rx_mr;
    void *rx_desc;
    unsigned rx_unposted;
    uint64_t stall_us;
    unsigned long ctx_less_errors;
    char desc[320];
};

static nxl_status_t try_post(lf_op_t *o, bool first);
static void op_check(lf_op_t *o);
static void conn_fail(lf_conn_t *c, int err, const char *text, bool stalled);
static void post_refused(lf_conn_t *c);
static void progress(lf_t *u, bool woke);
static bool remote_activity(lf_t *u);

/* ------------------------------------------------------------ helpers */

static const char *param(const nxl_param_t *p, size_t n, const char *k)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(p[i].key, k))
            return p[i].value;
    return NULL;
}

/* "10s", "500ms", "0": milliseconds, or -1 */
static long long parse_ms(const char *v)
{
    char *end;
    double d = strtod(v, &end);
    if (end == v || d < 0 || (*end && strcmp(end, "s") && strcmp(end, "ms")))
        return -1;
    return (long long)(strcmp(end, "ms") ? d * 1000 : d);
}

/* a post refused at once: sockets answers ENOENT when it cannot reach the
 * peer's address anymore */
static bool post_disconnect(int err)
{
    return err == FI_ENOENT || err == FI_ECONNREFUSED || err == FI_ECONNRESET ||
           err == FI_ENOTCONN || err == FI_EHOSTUNREACH || err == FI_ESHUTDOWN || err == EPIPE;
}

static bool is_disconnect(int err)
{
    switch (err) {
    case FI_ECONNRESET:
    case FI_ECONNREFUSED:
    case FI_ECONNABORTED:
    case FI_ENOTCONN:
    case FI_EHOSTUNREACH:
    case FI_ETIMEDOUT:
    case FI_ESHUTDOWN:
    case EPIPE:
    case FI_EADDRNOTAVAIL:
        return true;
    default:
        return false;
    }
}

/* "<fi_strerror(err)>: <detail>", the provider's detail only when it says
 * more than the error's name (tcp's is strerror of the same errno) */
static void err_text(int err, const char *detail, char *out, size_t cap)
{
    const char *name = fi_strerror(err);
    if (detail && detail[0] && strcmp(detail, name))
        snprintf(out, cap, "%s: %s", name, detail);
    else
        snprintf(out, cap, "%s", name);
}

static void kick(lf_t *u)
{
    static const struct timeval zero = {0, 0};
    if (!evtimer_pending(u->ev_kick, NULL))
        evtimer_add(u->ev_kick, &zero);
}

static void watch_start(lf_t *u)
{
    if (!evtimer_pending(u->ev_watch, NULL)) {
        struct timeval tv = {0, WATCH_MS * 1000};
        evtimer_add(u->ev_watch, &tv);
    }
}

static void check_later(lf_op_t *o)
{
    if (!o->checkq) {
        o->checkq = true;
        TAILQ_INSERT_TAIL(&o->u->checkq, o, clink);
    }
    kick(o->u);
}

static void mr_mode_str(uint64_t m, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s%s%s%s%s%s", m & FI_MR_VIRT_ADDR ? "virtual addresses" : "offsets",
             m & FI_MR_PROV_KEY ? ", provider keys" : ", requested keys",
             m & FI_MR_LOCAL ? ", local descriptors" : "",
             m & FI_MR_ENDPOINT ? ", bound to the endpoint" : "",
             m & FI_MR_ALLOCATED ? ", allocated memory" : "", m & FI_MR_RAW ? ", raw keys" : "");
}

/* ------------------------------------------------ shm endpoints of this process */

/* libfabric 1.17's shm provider reaches a peer of the same process through
 * that peer's own mapping of its region (smr_map_to_region finds the peer,
 * by name, in the provider's list of the process's endpoints), and closing
 * an endpoint unmaps its region (smr_free) under every other endpoint of
 * the process that knows it: their next post to it, or their progress
 * answering a command it left in their queue (inside fi_cq_read), faults.
 * A peer in another process has a mapping of its own, which outlives the
 * peer's close. So while another shm endpoint of this process is open, a
 * destroyed agent's endpoint is retired instead of closed: kept open (its
 * region mapped), never progressed again, with its completion queue,
 * address vector, domain and receive buffers, until the last shm endpoint
 * of the process closes and closes the retired ones after itself. The
 * agents still open learn of it (shm_gen) at their next post or loop turn
 * and fail their operations to it with NXL_ERR_REMOTE_DISCONNECT; an
 * address of this process that is not open anymore is refused at
 * load_conn (the provider would map the closed region). */
typedef struct lf_shm_ep {
    LIST_ENTRY(lf_shm_ep) link;
    bool live;
    /* retired: what stays open */
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_cntr *cntr;
    struct fid_ep *ep;
    struct fid_mr *rx_mr;
    unsigned char *rxmem;
    size_t len;
    unsigned char name[256];
} lf_shm_ep_t;
typedef LIST_HEAD(lf_shm_list, lf_shm_ep) lf_shm_list_t;

static pthread_mutex_t shm_lock = PTHREAD_MUTEX_INITIALIZER;
static lf_shm_list_t shm_eps = LIST_HEAD_INITIALIZER(shm_eps);
static unsigned shm_live;   /* open (not retired) entries of shm_eps */
static unsigned long shm_gen; /* bumped at every retirement */

/* Is this shm address ("[fi_shm://]PID:D:E") one of this process's? */
static bool shm_name_ours(const unsigned char *name, size_t len)
{
    char own[32];
    if (len >= 9 && !memcmp(name, "fi_shm://", 9)) {
        name += 9;
        len -= 9;
    }
    int k = snprintf(own, sizeof(own), "%ld:", (long)getpid());
    return k > 0 && len > (size_t)k && !memcmp(name, own, (size_t)k);
}

/* An address of this process whose endpoint is not open anymore? */
static bool shm_name_closed(const unsigned char *name, size_t len)
{
    if (!shm_name_ours(name, len))
        return false;
    bool open = false;
    lf_shm_ep_t *e;
    pthread_mutex_lock(&shm_lock);
    LIST_FOREACH(e, &shm_eps, link)
    if (e->live && e->len == len && !memcmp(e->name, name, len)) {
        open = true;
        break;
    }
    pthread_mutex_unlock(&shm_lock);
    return !open;
}

static bool shm_register(lf_t *u)
{
    lf_shm_ep_t *e = calloc(1, sizeof(*e));
    if (!e || u->name_len > sizeof(e->name)) {
        free(e);
        return false;
    }
    e->live = true;
    e->len = u->name_len;
    memcpy(e->name, u->name, u->name_len);
    pthread_mutex_lock(&shm_lock);
    LIST_INSERT_HEAD(&shm_eps, e, link);
    shm_live++;
    u->shm_gen_seen = shm_gen;
    pthread_mutex_unlock(&shm_lock);
    u->shm_ep = e;
    return true;
}

/* Connections to agents of this process whose endpoints were retired since
 * this agent last looked: failed from the loop (fail_deferred). */
static void shm_notice_closed(lf_t *u)
{
    if (!u->shm_ep)
        return;
    unsigned long g = __atomic_load_n(&shm_gen, __ATOMIC_ACQUIRE);
    if (g == u->shm_gen_seen)
        return;
    u->shm_gen_seen = g;
    lf_conn_t *c;
    LIST_FOREACH(c, &u->conns, link)
    {
        if (c->self || !c->av_entry || c->failed || c->fail_deferred)
            continue;
        if (shm_name_closed(c->av_entry->name, c->av_entry->len)) {
            c->peer_closed = true;
            c->fail_deferred = FI_ESHUTDOWN;
            kick(u);
        }
    }
}

/* Teardown of an shm endpoint: with another one of this process open, the
 * endpoint and what it needs are handed to its entry, which stays on
 * shm_eps (true); the last one takes the retired entries into @p reap, to
 * close after itself (false). */
static bool shm_unregister(lf_t *u, lf_shm_list_t *reap)
{
    lf_shm_ep_t *e = u->shm_ep, *r;
    u->shm_ep = NULL;
    pthread_mutex_lock(&shm_lock);
    e->live = false;
    bool retire = --shm_live > 0;
    if (retire) {
        e->fabric = u->fabric;
        e->domain = u->domain;
        e->av = u->av;
        e->cq = u->cq;
        e->cntr = u->rma_cntr;
        e->ep = u->ep;
        e->rx_mr = u->rx_mr;
        e->rxmem = u->rxmem;
        u->fabric = NULL;
        u->domain = NULL;
        u->av = NULL;
        u->cq = NULL;
        u->rma_cntr = NULL;
        u->ep = NULL;
        u->rx_mr = NULL;
        u->rxmem = NULL;
        __atomic_add_fetch(&shm_gen, 1, __ATOMIC_RELEASE);
    } else {
        LIST_REMOVE(e, link);
        while ((r = LIST_FIRST(&shm_eps))) {
            LIST_REMOVE(r, link);
            LIST_INSERT_HEAD(reap, r, link);
        }
    }
    pthread_mutex_unlock(&shm_lock);
    if (!retire)
        free(e);
    return retire;
}

static void shm_close_retired(lf_shm_list_t *reap)
{
    lf_shm_ep_t *r;
    while ((r = LIST_FIRST(reap))) {
        LIST_REMOVE(r, link);
        if (r->ep)
            fi_close(&r->ep->fid);
        if (r->rx_mr)
            fi_close(&r->rx_mr->fid);
        if (r->cntr)
            fi_close(&r->cntr->fid);
        if (r->cq)
            fi_close(&r->cq->fid);
        if (r->av)
            fi_close(&r->av->fid);
        if (r->domain)
            fi_close(&r->domain->fid);
        if (r->fabric)
            fi_close(&r->fabric->fid);
        free(r->rxmem);
        free(r);
    }
}

/* ------------------------------------------------------------- connections */

static void conn_put(lf_conn_t *c)
{
    if (--c->refs)
        return;
    lf_addr_t *e = c->av_entry;
    if (e && --e->refs == 0) {
        if (c->u->av && !c->u->ep_closed)
            fi_av_remove(c->u->av, &e->fa, 1, 0);
        LIST_REMOVE(e, link);
        free(e);
    }
    LIST_REMOVE(c, link);
    free(c->name);
    free(c->why);
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
static uint64_t rxm_hold_us(const char *prov)
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

/* false while @p c is held; the retry timer then comes back at its end */
static bool hold_over(lf_conn_t *c)
{
    uint64_t now = nxlt_now_us();
    if (!c->hold_until_us || now >= c->hold_until_us) {
        c->hold_until_us = 0;
        return true;
    }
    uint64_t left = c->hold_until_us - now;
    struct timeval tv = {(time_t)(left / 1000000), (suseconds_t)(left % 1000000)};
    evtimer_del(c->u->ev_retry);
    evtimer_add(c->u->ev_retry, &tv);
    return false;
}

/* conn info: wire.h */
static nxl_status_t conn_info(void *state, void **buf, size_t *len)
{
    lf_t *u = state;
    size_t bl = u->bell_fd >= 0 ? u->bell_name_len : 0;
    size_t l = lf_ci_size(u->prov, u->name_len, bl);
    unsigned char *b = l ? malloc(l) : NULL;
    if (!b)
        return NXL_ERR_UNKNOWN;
    lf_ci_pack(b, u->addr_format, u->prov, u->name, u->name_len, CI_AMW | CI_REVOKE,
               u->bell_name, bl);
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

static nxl_status_t load_conn(void *state, const char *agent, const void *info, size_t len,
                              void **out)
{
    lf_t *u = state;
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
    lf_conn_t *c = calloc(1, sizeof(*c));
    if (!c || !(c->name = strdup(agent))) {
        free(c);
        return NXL_ERR_UNKNOWN;
    }
    c->u = u;
    c->refs = 1;
    c->addr = FI_ADDR_UNSPEC;
    c->am_write = ci.flags & CI_AMW;
    c->revokes = ci.flags & CI_REVOKE;
    if (ci.bell_len && u->bell_fd >= 0) {
        c->bell.sun_family = AF_UNIX;
        memcpy(c->bell.sun_path, ci.bell, ci.bell_len);
        c->bell_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + ci.bell_len);
    }
    if (nl == u->name_len && !memcmp(name, u->name, nl)) {
        c->self = true;
    } else if (u->shm_ep && shm_name_closed(name, nl)) {
        /* not inserted: the provider would map the closed region */
        c->failed = true;
        c->peer_closed = true;
        c->err = FI_ESHUTDOWN;
        c->why = strdup(LF_PEER_CLOSED);
    } else {
        lf_addr_t *e;
        LIST_FOREACH(e, &u->addrs, link)
        if (e->len == nl && !memcmp(e->name, name, nl))
            break;
        if (!e) {
            e = calloc(1, sizeof(*e) + nl);
            int r = e ? fi_av_insert(u->av, name, 1, &e->fa, 0, NULL) : -FI_ENOMEM;
            if (r != 1) {
                nxlt_error(u->ctx, "LIBFABRIC: fi_av_insert of agent '%s''s address failed: %s; "
                           "the address may belong to another fabric or domain (check "
                           "'provider', 'domain' and 'iface' on both sides)", agent,
                           fi_strerror(r < 0 ? -r : FI_EINVAL));
                free(e);
                free(c->name);
                free(c);
                return NXL_ERR_BACKEND;
            }
            e->len = nl;
            memcpy(e->name, name, nl);
            LIST_INSERT_HEAD(&u->addrs, e, link);
        }
        e->refs++;
        c->av_entry = e;
        c->addr = e->fa;
        c->hold_until_us = hold_find(u, name, nl);
    }
    LIST_INSERT_HEAD(&u->conns, c, link);
    *out = c;
    return NXL_SUCCESS;
}

static void unload_conn(void *state, void *conn)
{
    lf_conn_t *c = conn;
    c->unloaded = true;
    conn_put(c);
}

/* ------------------------------------------------------------------ memory */

static nxl_status_t mr_reg(lf_t *u, void *addr, size_t len, uint64_t access, struct fid_mr **mr,
                           uint64_t *key, const char *what)
{
    uint64_t want = u->mr_prov_key ? 0 : ++u->next_key;
    int r = fi_mr_reg(u->domain, addr, len, access, 0, want, 0, mr, NULL);
    if (!r && u->mr_endpoint) {
        r = fi_mr_bind(*mr, &u->ep->fid, 0);
        if (!r)
            r = fi_mr_enable(*mr);
        if (r) {
            fi_close(&(*mr)->fid);
            *mr = NULL;
        }
    }
    if (r) {
        nxlt_error(u->ctx, "LIBFABRIC: fi_mr_reg of %s 0x%lx+%zu failed on provider %s: %s (is "
                   "the range mapped? for RDMA providers, is the locked-memory limit, ulimit -l, "
                   "large enough?)", what, (unsigned long)(uintptr_t)addr, len, u->prov,
                   fi_strerror(-r));
        return NXL_ERR_BACKEND;
    }
    if (key) {
        *key = fi_mr_key(*mr);
        if (*key == FI_KEY_NOTAVAIL) {
            fi_close(&(*mr)->fid);
            *mr = NULL;
            nxlt_error(u->ctx, "LIBFABRIC: provider %s gives raw memory keys (FI_MR_RAW), which "
                       "nxl does not support yet; choose another provider", u->prov);
            return NXL_ERR_NOT_SUPPORTED;
        }
    }
    return NXL_SUCCESS;
}

static nxl_status_t reg(void *state, nxl_mem_t type, const nxl_desc_t *d, void **out)
{
    lf_t *u = state;
    if (type != NXL_DRAM) {
        nxlt_error(u->ctx, "LIBFABRIC: %s memory is not supported (DRAM only: no provider with "
                   "FI_HMEM here)", nxl_mem_name(type));
        return NXL_ERR_NOT_SUPPORTED;
    }
    lf_md_t *m = calloc(1, sizeof(*m));
    if (!m)
        return NXL_ERR_UNKNOWN;
    nxl_status_t st = mr_reg(u, (void *)d->addr, d->len,
                             FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE, &m->mr,
                             &m->key, nxl_mem_name(type));
    if (st != NXL_SUCCESS) {
        free(m);
        return st;
    }
    m->desc = fi_mr_desc(m->mr);
    m->base = d->addr;
    m->len = d->len;
    *out = m;
    return NXL_SUCCESS;
}

static void dereg(void *state, void *md)
{
    lf_md_t *m = md;
    fi_close(&m->mr->fid);
    free(m);
}

/* packed key: "LFK1", u32 flags (1: virtual addressing), u64 key, u64 base */
static nxl_status_t pack_key(void *state, void *md, void **buf, size_t *len)
{
    lf_t *u = state;
    lf_md_t *m = md;
    unsigned char *b = malloc(24);
    if (!b)
        return NXL_ERR_UNKNOWN;
    lf_key_pack(b, &(lf_wkey_t){.virt = u->mr_virt, .key = m->key, .base = m->base});
    *buf = b;
    *len = LF_KEY_LEN;
    return NXL_SUCCESS;
}

static nxl_status_t load_key(void *state, void *conn, const void *buf, size_t len, void **rkey)
{
    lf_t *u = state;
    lf_conn_t *c = conn;
    lf_wkey_t w;
    const char *bad = lf_key_parse(buf, len, &w);
    if (bad) {
        nxlt_error(u->ctx, "LIBFABRIC: load_key: a memory key of agent '%s' is malformed (%zu "
                   "bytes: %s)", c->name, len, bad);
        return NXL_ERR_MISMATCH;
    }
    lf_rkey_t *k = calloc(1, sizeof(*k));
    if (!k)
        return NXL_ERR_UNKNOWN;
    k->virt = w.virt;
    k->key = w.key;
    k->base = w.base;
    *rkey = k;
    return NXL_SUCCESS;
}

static void unload_key(void *state, void *rkey)
{
    free(rkey);
}

/* ------------------------------------------------------------- operations */

static nxl_status_t map_err(const lf_op_t *o)
{
    if (o->conn->failed || o->conn->fail_deferred || is_disconnect(o->err))
        return NXL_ERR_REMOTE_DISCONNECT;
    if (o->err == FI_ECANCELED)
        return NXL_ERR_CANCELED;
    return NXL_ERR_BACKEND;
}

/* Tells the engine (once); the op lives on until the provider is done with it. */
static void op_report(lf_op_t *o, nxl_status_t st, const char *why)
{
    if (!o->op)
        return;
    nxlt_op_t *op = o->op;
    o->op = NULL;
    o->u->inflight--;
    o->conn->inflight--;
    o->conn->progress_us = nxlt_now_us();
    o->u->hit = true;
    nxlt_op_done(op, st, st == NXL_SUCCESS ? NULL : why);
}

static void op_free(lf_op_t *o)
{
    lf_t *u = o->u;
    if (o->queued)
        TAILQ_REMOVE(&u->waitq, o, wlink);
    if (o->checkq)
        TAILQ_REMOVE(&u->checkq, o, clink);
    LIST_REMOVE(o, link);
    if (o->side) {
        u->inflight--;
        o->conn->inflight--;
    }
    if (o->msg_mr)
        fi_close(&o->msg_mr->fid);
    conn_put(o->conn);
    free(o->segs);
    free(o->msg);
    free(o->errtxt);
    free(o);
}

static void op_fail_sentence(lf_op_t *o, char *why, size_t cap)
{
    lf_conn_t *c = o->conn;
    const char *what = o->is_xfer ? (o->dir == NXL_WRITE ? "WRITE" : "READ") : "notification";
    if (c->stalled)
        snprintf(why, cap, "LIBFABRIC: no operation to agent '%s' completed within %llu ms "
                 "(link down, or the peer died or hung); the connection is given up — reload its "
                 "metadata once it is reachable", c->name,
                 (unsigned long long)(o->u->stall_us / 1000));
    else if (c->failed || c->fail_deferred)
        snprintf(why, cap, "LIBFABRIC: %s to agent '%s' failed: the connection failed (%s); "
                 "the peer is gone or unreachable — reload its metadata once it is back", what,
                 c->name,
                 c->failed && c->why ? c->why
                                     : fi_strerror(c->failed ? c->err : c->fail_deferred));
    else if (o->errtxt && !strncmp(o->errtxt, fi_strerror(o->err), strlen(fi_strerror(o->err))))
        snprintf(why, cap, "LIBFABRIC: %s to agent '%s' failed on provider %s: %s", what,
                 c->name, o->u->prov, o->errtxt); /* an error completion's text: err_text */
    else
        snprintf(why, cap, "LIBFABRIC: %s to agent '%s' failed on provider %s: %s (%s)", what,
                 c->name, o->u->prov, fi_strerror(o->err), o->errtxt ? o->errtxt : "no detail");
}

/* Reports the op when it is finished, and frees it when the provider
 * holds nothing of it anymore. */
static void op_check(lf_op_t *o)
{
    lf_t *u = o->u;
    if (o->op) {
        bool idle = o->posted == o->completed;
        if (nxlt_op_canceled(o->op)) {
            o->stopped = true;
            if (idle)
                op_report(o, NXL_ERR_CANCELED, "LIBFABRIC: canceled");
        } else if ((o->err || o->conn->failed) && (idle || o->conn->failed)) {
            char why[512];
            op_fail_sentence(o, why, sizeof(why));
            o->stopped = true;
            op_report(o, map_err(o), why);
        } else if (idle && o->next == o->n && (!o->want_notif || o->notif_counted)) {
            op_report(o, NXL_SUCCESS, NULL);
        }
    }
    if (!o->op && o->posted == o->completed)
        op_free(o);
    (void)u;
}

static void segs_copy_rest(lf_op_t *o);

/* one element (or piece) as the provider addresses it */
static void seg_at(const lf_op_t *o, size_t i, lf_seg_t *s)
{
    if (o->segs) {
        *s = o->segs[i];
        return;
    }
    const nxlt_iov_t *v = &o->iov[i];
    const lf_md_t *m = v->lmd;
    const lf_rkey_t *k = v->rkey;
    s->laddr = v->laddr;
    s->desc = m ? m->desc : NULL;
    s->raddr = k->virt ? v->raddr : v->raddr - k->base;
    s->key = k->key;
    s->len = v->len;
}

/* Timer mode has no fd to sleep on: an idle agent polls its CQ every
 * poll_max. A peer that posts to it rings its doorbell (a datagram to an
 * abstract unix socket named in its connection info) at most every RING_US:
 * the ring wakes the agent, which then reads its CQ on every loop turn for
 * BELL_WINDOW_US (a window, as busy polling opens one, of one read per turn)
 * before backing off to the timer. A post within RING_US of the last ring
 * finds the target still in that window. The poster opens the same window
 * for itself, to see its completions without waiting for the timer. So a
 * notification that reaches us within RING_US of its sending (we were
 * polling every turn) says its sender is in a window: a post to it within
 * RING_US needs no ring (a ping-pong rings only when it slows down). A ring
 * that cannot be delivered (the peer in another network namespace, or gone)
 * turns ringing off for that peer; the poll remains. */
static void bell_window(lf_t *u, uint64_t now)
{
    if (u->busy_until_us < now + BELL_WINDOW_US)
        u->busy_until_us = now + BELL_WINDOW_US;
    kick(u);
}

static void ring(lf_conn_t *c)
{
    if (!c->bell_len)
        return;
    uint64_t now = nxlt_now_us();
    bell_window(c->u, now);
    if (now - c->rung_us < RING_US || now - c->heard_us < RING_US)
        return;
    c->rung_us = now;
    if (sendto(c->u->bell_fd, "", 1, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&c->bell,
               c->bell_len) < 0 &&
        errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOBUFS) {
        nxlt_log(c->u->ctx, NXL_LOG_DEBUG, "LIBFABRIC: agent '%s''s doorbell cannot be rung "
                 "(%s): it will notice this agent's operations by polling", c->name,
                 strerror(errno));
        c->bell_len = 0;
    }
}

static void on_bell(evutil_socket_t fd, short what, void *arg)
{
    lf_t *u = arg;
    char b[64];
    while (recv(fd, b, sizeof(b), MSG_DONTWAIT) >= 0)
        ;
    u->hit = true; /* back to polling often */
    bell_window(u, nxlt_now_us());
    progress(u, true);
}

/* Our doorbell: an abstract unix datagram socket, in timer mode only. */
static void bell_open(lf_t *u)
{
    static unsigned seq;
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return;
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    unsigned rnd = (unsigned)(nxlt_now_us() * 2654435761u);
    int n = snprintf(a.sun_path + 1, sizeof(a.sun_path) - 1, "nxl-lf-%d-%u-%08x", (int)getpid(),
                     __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED), rnd);
    socklen_t al = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
    if (bind(fd, (struct sockaddr *)&a, al) ||
        !(u->ev_bell = event_new(nxlt_base(u->ctx), fd, EV_READ | EV_PERSIST, on_bell, u)) ||
        event_add(u->ev_bell, NULL)) {
        nxlt_log(u->ctx, NXL_LOG_DEBUG, "LIBFABRIC: no doorbell (%s): peers' operations are "
                 "noticed by polling only", strerror(errno));
        if (u->ev_bell)
            event_free(u->ev_bell);
        u->ev_bell = NULL;
        close(fd);
        return;
    }
    u->bell_fd = fd;
    memcpy(u->bell_name, a.sun_path, 1 + (size_t)n);
    u->bell_name_len = 1 + (size_t)n;
}

/* Posts what it can of the op. first: inside the engine's post call, where
 * a refusal of the very first element fails the call instead.
 * Returns NXL_SUCCESS (posted, finished or waiting for completions),
 * NXL_IN_PROG (blocked: no room; the caller queues it), or an error with
 * nothing posted (first only). */
static nxl_status_t try_post(lf_op_t *o, bool first)
{
    lf_t *u = o->u;
    lf_conn_t *c = o->conn;
    if (u->quiescing)
        o->stopped = true;
    if (!o->stopped && !hold_over(c))
        return NXL_IN_PROG;
    while (o->next < o->n) {
        if (o->stopped)
            return NXL_SUCCESS;
        if (u->tx_inflight >= u->tx_cap)
            return NXL_IN_PROG;
        lf_seg_t s;
        seg_at(o, o->next, &s);
        size_t piece = s.len - o->off;
        if (piece > u->max_msg)
            piece = u->max_msg;
        struct iovec iov = {.iov_base = (char *)s.laddr + o->off, .iov_len = piece};
        struct fi_rma_iov riov = {.addr = s.raddr + o->off, .len = piece, .key = s.key};
        void *desc = s.desc;
        struct fi_msg_rma m = {
            .msg_iov = &iov,
            .desc = &desc,
            .iov_count = 1,
            .addr = c->addr,
            .rma_iov = &riov,
            .rma_iov_count = 1,
            .context = o,
        };
        ssize_t r = o->dir == NXL_WRITE
                        ? fi_writemsg(u->ep, &m, FI_COMPLETION | (u->dc ? FI_DELIVERY_COMPLETE : 0))
                        : fi_readmsg(u->ep, &m, FI_COMPLETION);
        if (r == -FI_EAGAIN) {
            post_refused(c);
            return NXL_IN_PROG;
        }
        if (r) {
            if (post_disconnect((int)-r) && !c->fail_deferred) {
                c->fail_deferred = (int)-r;
                kick(u);
            }
            if (first && o->posted == 0) {
                nxlt_error(u->ctx, "LIBFABRIC: %s to agent '%s' failed at once on provider %s: "
                           "%s%s", o->dir == NXL_WRITE ? "fi_writemsg" : "fi_readmsg", c->name,
                           u->prov, fi_strerror((int)-r),
                           post_disconnect((int)-r) ? " (the peer is gone or unreachable; reload "
                                                      "its metadata once it is back)" : "");
                return post_disconnect((int)-r) ? NXL_ERR_REMOTE_DISCONNECT : NXL_ERR_BACKEND;
            }
            if (!o->err) {
                o->err = (int)-r;
                o->errtxt = strdup(o->dir == NXL_WRITE ? "fi_writemsg refused it"
                                                       : "fi_readmsg refused it");
            }
            o->stopped = true;
            return NXL_SUCCESS;
        }
        o->posted++;
        u->tx_inflight++;
        c->tx_out++;
        c->refused_us = 0;
        ring(c);
        o->off += piece;
        if (o->off == s.len) {
            o->off = 0;
            o->next++;
        }
    }
    if (!o->want_notif || o->notif_posted || o->stopped)
        return NXL_SUCCESS;
    /* the notification only once every write completed: its data is there */
    if (o->completed < o->posted || o->err)
        return NXL_SUCCESS;
    if (u->tx_inflight >= u->tx_cap || u->notif_inflight >= NOTIF_CAP)
        return NXL_IN_PROG;
    ssize_t r = fi_send(u->ep, o->msg, o->msg_len, o->msg_mr ? fi_mr_desc(o->msg_mr) : NULL,
                        c->addr, o);
    if (r == -FI_EAGAIN) {
        post_refused(c);
        return NXL_IN_PROG;
    }
    if (r) {
        if (post_disconnect((int)-r) && !c->fail_deferred) {
            c->fail_deferred = (int)-r;
            kick(u);
        }
        if (first && o->posted == 0) {
            nxlt_error(u->ctx, "LIBFABRIC: fi_send of a notification to agent '%s' failed at "
                       "once on provider %s: %s", c->name, u->prov, fi_strerror((int)-r));
            return post_disconnect((int)-r) ? NXL_ERR_REMOTE_DISCONNECT : NXL_ERR_BACKEND;
        }
        if (!o->err) {
            o->err = (int)-r;
            o->errtxt = strdup("fi_send of the notification refused it");
        }
        o->stopped = true;
        return NXL_SUCCESS;
    }
    o->notif_posted = true;
    o->posted++;
    u->tx_inflight++;
    c->tx_out++;
    c->refused_us = 0;
    u->notif_inflight++;
    ring(c);
    return NXL_SUCCESS;
}

static void enqueue(lf_op_t *o)
{
    lf_t *u = o->u;
    if (o->queued)
        return;
    segs_copy_rest(o);
    o->queued = true;
    TAILQ_INSERT_TAIL(&u->waitq, o, wlink);
}

/* Once an op has to wait, the engine's element list may go away (the
 * transfer released): keep what is left to post in our own array. */
static void segs_copy_rest(lf_op_t *o)
{
    if (o->segs || !o->iov || o->next >= o->n) {
        o->iov = NULL;
        return;
    }
    size_t left = o->n - o->next;
    lf_seg_t *s = malloc(left * sizeof(*s));
    if (!s) {
        o->err = FI_ENOMEM;
        o->errtxt = strdup("out of memory queueing the rest of the transfer");
        o->stopped = true;
        o->iov = NULL;
        return;
    }
    for (size_t i = 0; i < left; i++)
        seg_at(o, o->next + i, &s[i]);
    o->segs = s;
    o->n = left;
    o->next = 0;
    o->iov = NULL;
}

/* Posts queued ops while there is room, in order. */
static void resume(lf_t *u)
{
    lf_op_t *o;
    while ((o = TAILQ_FIRST(&u->waitq))) {
        if (o->op && nxlt_op_canceled(o->op))
            o->stopped = true;
        if (!o->stopped && !o->conn->failed) {
            if (try_post(o, false) == NXL_IN_PROG)
                break;
        }
        TAILQ_REMOVE(&u->waitq, o, wlink);
        o->queued = false;
        op_check(o);
    }
    if (!TAILQ_EMPTY(&u->waitq) && u->tx_inflight == 0 && !evtimer_pending(u->ev_retry, NULL)) {
        /* refused with nothing of ours in flight (a connection being set
         * up): look again shortly, not in a spin */
        struct timeval tv = {0, RETRY_US};
        evtimer_add(u->ev_retry, &tv);
    }
}

/* The op sends @p b (malloc'd, the op's now) as its message once its
 * writes are done; false (and @p b freed) when it cannot be registered. */
static bool op_msg_attach(lf_op_t *o, unsigned char *b, size_t len)
{
    o->msg = b;
    o->msg_len = len;
    o->want_notif = true;
    if (o->u->mr_local && !o->conn->self &&
        mr_reg(o->u, b, len, FI_SEND, &o->msg_mr, NULL, "a notification buffer") != NXL_SUCCESS) {
        free(b);
        o->msg = NULL;
        return false;
    }
    return true;
}

static lf_op_t *op_new(lf_t *u, nxlt_op_t *op, lf_conn_t *c, const void *msg, size_t len,
                       bool with_notif)
{
    lf_op_t *o = calloc(1, sizeof(*o));
    if (!o)
        return NULL;
    o->c.kind = CTX_OP;
    o->u = u;
    o->op = op;
    o->conn = c;
    if (with_notif) {
        const char *me = nxl_agent_name(nxlt_agent(u->ctx));
        size_t nl = strlen(me);
        if (nl > 255)
            nl = 255;
        unsigned char *b = malloc(2 + nl + len);
        if (!b) {
            free(o);
            return NULL;
        }
        b[0] = (unsigned char)(nl >> 8);
        b[1] = (unsigned char)nl;
        memcpy(b + 2, me, nl);
        if (len)
            memcpy(b + 2 + nl, msg, len);
        if (!op_msg_attach(o, b, 2 + nl + len)) {
            free(o);
            return NULL;
        }
    }
    c->refs++;
    if (c->inflight++ == 0)
        c->progress_us = nxlt_now_us();
    u->inflight++;
    LIST_INSERT_HEAD(&u->ops, o, link);
    watch_start(u);
    return o;
}

/* undoes op_new for a call that fails */
static void op_unstart(lf_op_t *o)
{
    o->u->inflight--;
    o->conn->inflight--;
    o->op = NULL;
    op_free(o);
}

static nxl_status_t check_conn(lf_t *u, lf_conn_t *c, const char *call)
{
    if (u->ep_closed) {
        nxlt_error(u->ctx, "LIBFABRIC: %s: the transport is shutting down", call);
        return NXL_ERR_NOT_ALLOWED;
    }
    shm_notice_closed(u);
    if (!c->failed && !c->fail_deferred)
        return NXL_SUCCESS;
    nxlt_error(u->ctx, "LIBFABRIC: %s: the connection to agent '%s' failed earlier (%s); reload "
               "its metadata once it is back", call, c->name,
               c->stalled       ? "no completion within the stall timeout"
               : c->why         ? c->why
               : c->peer_closed ? LF_PEER_CLOSED
                                : fi_strerror(c->failed ? c->err : c->fail_deferred));
    return NXL_ERR_REMOTE_DISCONNECT;
}

/* loopback: the data moves now, the report comes from the loop */
static void self_xfer(const nxlt_xfer_t *x)
{
    for (size_t i = 0; i < x->n; i++) {
        const nxlt_iov_t *v = &x->iov[i];
        if (x->op == NXL_WRITE)
            memmove((void *)(uintptr_t)v->raddr, v->laddr, v->len);
        else
            memmove(v->laddr, (const void *)(uintptr_t)v->raddr, v->len);
    }
}

/* A small WRITE with a notification as one message (AMW_TAG): one send
 * instead of writes, their completions, then the send; the target copies
 * the data into place, after checking every element against its
 * registrations, and then delivers the notification. NULL: not this one.
 * Off unless asked for (am_write_max): the op completes when the send
 * does, which is before the target copied the data (README). */
static unsigned char *amw_build(lf_t *u, const nxlt_xfer_t *x, size_t *len)
{
    size_t data = 0;
    if (x->n > AMW_ELEMS)
        return NULL;
    for (size_t i = 0; i < x->n; i++)
        if ((data += x->iov[i].len) > u->am_write_max)
            return NULL;
    const char *me = nxl_agent_name(nxlt_agent(u->ctx));
    size_t nl = strlen(me);
    if (nl > 255)
        nl = 255;
    size_t total = 2 + nl + 4 + x->notif_len + 4 + 12 * x->n + data;
    if (total > RXSZ || total > u->max_msg || total > u->amw_msg_max)
        return NULL;
    unsigned char *b = malloc(total), *w = b;
    if (!b)
        return NULL;
    *w++ = AMW_TAG;
    *w++ = (unsigned char)nl;
    memcpy(w, me, nl), w += nl;
    lf_put_be(w, x->notif_len, 4), w += 4;
    memcpy(w, x->notif, x->notif_len), w += x->notif_len;
    lf_put_be(w, x->n, 4), w += 4;
    for (size_t i = 0; i < x->n; i++, w += 12) {
        lf_put_be(w, x->iov[i].raddr, 8);
        lf_put_be(w + 8, x->iov[i].len, 4);
    }
    for (size_t i = 0; i < x->n; i++)
        memcpy(w, x->iov[i].laddr, x->iov[i].len), w += x->iov[i].len;
    *len = total;
    return b;
}

static nxl_status_t post(void *state, nxlt_op_t *op, const nxlt_xfer_t *x)
{
    lf_t *u = state;
    lf_conn_t *c = x->conn;
    nxl_status_t st = check_conn(u, c, "post");
    if (st != NXL_SUCCESS)
        return st;
    size_t amw_len = 0;
    /* only to a peer that tells of its deregistrations (a post into a region
     * it gave up is then refused here, not dropped there) */
    unsigned char *amw = x->op == NXL_WRITE && x->notif && c->am_write && c->revokes &&
                                 !c->self && u->am_write_max
                             ? amw_build(u, x, &amw_len)
                             : NULL;
    lf_op_t *o = op_new(u, op, c, x->notif, x->notif_len, x->notif != NULL && !amw);
    if (o && amw && !op_msg_attach(o, amw, amw_len)) {
        op_unstart(o);
        o = NULL;
    } else if (!o) {
        free(amw);
    }
    if (!o) {
        nxlt_error(u->ctx, "LIBFABRIC: post: out of memory (or the notification buffer could not "
                   "be registered)");
        return NXL_ERR_UNKNOWN;
    }
    o->is_xfer = true;
    o->dir = x->op;
    o->n = amw ? 0 : x->n; /* the message carries the elements */
    if (c->self) {
        self_xfer(x);
        o->next = o->n;
        check_later(o);
        return NXL_SUCCESS;
    }
    o->iov = x->iov;
    if (!TAILQ_EMPTY(&u->waitq)) {
        enqueue(o); /* behind those already waiting */
        kick(u);
        return NXL_SUCCESS;
    }
    st = try_post(o, true);
    if (st != NXL_SUCCESS && st != NXL_IN_PROG) {
        op_unstart(o);
        return st;
    }
    if (st == NXL_IN_PROG)
        enqueue(o);
    o->iov = NULL; /* the engine's array is ours only during this call */
    if (o->stopped)
        check_later(o);
    kick(u);
    return NXL_SUCCESS;
}

static nxl_status_t notif_send(void *state, nxlt_op_t *op, void *conn, const void *msg,
                               size_t len)
{
    lf_t *u = state;
    lf_conn_t *c = conn;
    nxl_status_t st = check_conn(u, c, "notif_send");
    if (st != NXL_SUCCESS)
        return st;
    lf_op_t *o = op_new(u, op, c, msg, len, true);
    if (!o) {
        nxlt_error(u->ctx, "LIBFABRIC: notif_send: out of memory (or the notification buffer "
                   "could not be registered)");
        return NXL_ERR_UNKNOWN;
    }
    if (c->self) {
        check_later(o);
        return NXL_SUCCESS;
    }
    if (!TAILQ_EMPTY(&u->waitq)) {
        enqueue(o);
        kick(u);
        return NXL_SUCCESS;
    }
    st = try_post(o, true);
    if (st != NXL_SUCCESS && st != NXL_IN_PROG) {
        op_unstart(o);
        return st;
    }
    if (st == NXL_IN_PROG)
        enqueue(o);
    if (o->stopped)
        check_later(o);
    kick(u);
    return NXL_SUCCESS;
}

/* Sends @p b (malloc'd, taken) to @p c as a message of the transport's own,
 * in order with the operations posted to it: behind those waiting for
 * room, ahead of anything posted later. Nothing is reported of it; a peer
 * lost meanwhile just does not get it. */
static void side_send(lf_t *u, lf_conn_t *c, unsigned char *b, size_t len, const char *what)
{
    lf_op_t *o = calloc(1, sizeof(*o));
    if (o) {
        o->c.kind = CTX_OP;
        o->u = u;
        o->conn = c;
        o->side = true;
    }
    if (!o || !op_msg_attach(o, b, len)) {
        if (!o)
            free(b);
        free(o);
        nxlt_log(u->ctx, NXL_LOG_ERROR, "LIBFABRIC: out of memory (or its buffer could not be "
                 "registered): agent '%s' was not sent %s", c->name, what);
        return;
    }
    c->refs++;
    if (c->inflight++ == 0)
        c->progress_us = nxlt_now_us();
    u->inflight++;
    LIST_INSERT_HEAD(&u->ops, o, link);
    watch_start(u);
    if (!TAILQ_EMPTY(&u->waitq)) {
        enqueue(o);
    } else if (try_post(o, false) == NXL_IN_PROG) {
        enqueue(o);
    } else if (o->stopped) {
        /* a peer that is gone (closed in order, say) needs no word */
        nxlt_log(u->ctx, o->err && !post_disconnect(o->err) ? NXL_LOG_WARN : NXL_LOG_INFO,
                 "LIBFABRIC: agent '%s' was not sent %s: %s", c->name, what,
                 o->err ? fi_strerror(o->err) : "the transport is shutting down");
        check_later(o);
    }
    kick(u);
}

/* The application gave the region up. A one-message WRITE (amw_recv)
 * checks its elements here and drops one into the region silently for its
 * initiator, which has seen its send complete: so every peer this agent is
 * connected to is told (wire.h), ahead of anything this agent sends it
 * afterwards (messages keep their order, FI_ORDER_SAS), and its engine
 * refuses lists, transfers and posts into the region from then on. RMA
 * into it fails at the provider's key check meanwhile. */
static void lf_revoke(void *state, nxl_mem_t type, const nxl_desc_t *d, void *md)
{
    lf_t *u = state;
    (void)md;
    if (u->ep_closed || u->quiescing)
        return;
    const char *me = nxl_agent_name(nxlt_agent(u->ctx));
    size_t nl = strlen(me);
    if (nl > 255)
        nl = 255;
    size_t len = lf_rv_size(nl);
    lf_conn_t *c;
    LIST_FOREACH(c, &u->conns, link)
    {
        if (c->self || c->failed || c->fail_deferred || c->unloaded)
            continue;
        unsigned char *b = malloc(len);
        if (!b) {
            nxlt_log(u->ctx, NXL_LOG_ERROR, "LIBFABRIC: out of memory: agent '%s' was not told "
                     "of a deregistered region", c->name);
            continue;
        }
        lf_rv_pack(b, me, nl, (unsigned)type, d->dev_id, d->addr, d->len);
        side_send(u, c, b, len, "word of a deregistered region");
    }
}

/* ---------------------------------------------------------------- receives */

static void rx_post(lf_t *u, lf_rx_t *rx)
{
    if (u->ep_closed)
        return;
    ssize_t r = fi_recv(u->ep, rx->buf, RXSZ, u->rx_desc, FI_ADDR_UNSPEC, rx);
    if (r == 0) {
        rx->posted = true;
        return;
    }
    if (r != -FI_EAGAIN)
        nxlt_log(u->ctx, NXL_LOG_WARN, "LIBFABRIC: fi_recv failed: %s; retrying",
                 fi_strerror((int)-r));
    u->rx_unposted++;
}

static void rx_repost_all(lf_t *u)
{
    if (!u->rx_unposted)
        return;
    u->rx_unposted = 0;
    for (unsigned i = 0; i < NRX; i++)
        if (!u->rx[i].posted)
            rx_post(u, &u->rx[i]);
}

/* A WRITE with its notification in one message: every element checked
 * against this agent's registrations before a byte is written; then the
 * notification. A message that fails a check is dropped whole, with a log
 * line: its initiator has seen its send complete (README: the one-message
 * WRITE's guarantee). */
static void amw_recv(lf_t *u, const unsigned char *b, size_t len)
{
    const unsigned char *end = b + len;
    char from[256] = "?";
    const char *bad = NULL;
    size_t nl = len >= 2 ? b[1] : 0;
    if (nl == 0 || len < 2 + nl + 4) {
        bad = "malformed header";
        goto drop;
    }
    memcpy(from, b + 2, nl);
    from[nl] = 0;
    b += 2 + nl;
    uint64_t ml = lf_get_be(b, 4);
    b += 4;
    if ((size_t)(end - b) < ml + 4) {
        bad = "notification longer than the message";
        goto drop;
    }
    const unsigned char *msg = b;
    b += ml;
    uint64_t n = lf_get_be(b, 4);
    b += 4;
    if ((size_t)(end - b) / 12 < n) {
        bad = "more elements than the message holds";
        goto drop;
    }
    const unsigned char *el = b, *payload = b + 12 * n;
    size_t at = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t ra = lf_get_be(el + 12 * i, 8), l = lf_get_be(el + 12 * i + 8, 4);
        if ((size_t)(end - payload) - at < l) {
            bad = "elements longer than the message";
            goto drop;
        }
        if (!nxlt_mem_registered(u->ctx, NXL_DRAM, 0, ra, l)) {
            bad = "an element outside every region registered here (deregistered meanwhile?)";
            goto drop;
        }
        at += l;
    }
    at = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t ra = lf_get_be(el + 12 * i, 8), l = lf_get_be(el + 12 * i + 8, 4);
        memcpy((void *)(uintptr_t)ra, payload + at, l);
        at += l;
    }
    u->hit = true;
    nxlt_notif_recv(u->ctx, from, msg, ml);
    return;
drop:
    nxlt_log(u->ctx, NXL_LOG_ERROR, "LIBFABRIC: a WRITE of %zu bytes from agent '%s' was dropped, "
             "and its notification with it: %s", len, from, bad);
}

static void rx_done(lf_t *u, lf_rx_t *rx, size_t len)
{
    rx->posted = false;
    const unsigned char *b = rx->buf;
    if (len >= 1 && b[0] == AMW_TAG) {
        amw_recv(u, b, len);
        rx_post(u, rx);
        return;
    }
    if (len >= 1 && b[0] == LF_RV_TAG) {
        lf_rv_t rv;
        const char *bad = lf_rv_parse(b, len, &rv);
        if (bad)
            nxlt_log(u->ctx, NXL_LOG_WARN, "LIBFABRIC: malformed region revocation of %zu bytes "
                     "dropped: %s", len, bad);
        else
            nxlt_remote_revoked(u->ctx, rv.from, (nxl_mem_t)rv.type, rv.dev, rv.addr, rv.len);
        u->hit = true;
        rx_post(u, rx);
        return;
    }
    size_t nl = len >= 2 ? (size_t)b[0] << 8 | b[1] : 0;
    if (len < 2 || nl == 0 || nl > 255 || 2 + nl > len) {
        nxlt_log(u->ctx, NXL_LOG_WARN, "LIBFABRIC: malformed notification of %zu bytes dropped",
                 len);
    } else {
        char from[256];
        memcpy(from, b + 2, nl);
        from[nl] = 0;
        u->hit = true;
        uint64_t now = nxlt_now_us();
        if (u->bell_fd >= 0 && u->busy_until_us > now) {
            lf_conn_t *c;
            LIST_FOREACH(c, &u->conns, link)
            if (c->bell_len && !strcmp(c->name, from))
                c->heard_us = now;
        }
        nxlt_notif_recv(u->ctx, from, b + 2 + nl, len - 2 - nl);
    }
    rx_post(u, rx);
}

/* ---------------------------------------------------------------- progress */

static void op_elem_done(lf_op_t *o, int err, const char *text)
{
    lf_t *u = o->u;
    if (u->tx_inflight)
        u->tx_inflight--;
    if (o->conn->tx_out)
        o->conn->tx_out--;
    o->conn->progress_us = nxlt_now_us();
    if (err) {
        if (!o->err) {
            o->err = err;
            free(o->errtxt);
            o->errtxt = text ? strdup(text) : NULL;
        }
        o->stopped = true;
        /* o is not counted complete yet: conn_fail reports it but cannot free it */
        if (is_disconnect(err) && !o->conn->failed && !o->conn->self)
            conn_fail(o->conn, err, text, false);
    }
    o->completed++;
    if (o->notif_posted && !o->notif_counted && o->completed == o->posted) {
        /* the notification is the last thing posted of an op */
        o->notif_counted = true;
        u->notif_inflight--;
    }
    /* writes done: the notification may go now */
    if (o->op && !o->stopped && o->want_notif && !o->notif_posted && o->next == o->n &&
        o->completed == o->posted && !nxlt_op_canceled(o->op)) {
        if (!o->queued && try_post(o, false) == NXL_IN_PROG)
            enqueue(o);
    }
    if (!o->queued)
        op_check(o);
}

static void on_err_entry(lf_t *u, struct fi_cq_err_entry *e)
{
    char text[256] = "";
    const char *s = fi_cq_strerror(u->cq, e->prov_errno, e->err_data, text, sizeof(text));
    if (s != text)
        snprintf(text, sizeof(text), "%s", s ? s : "");
    lf_ctx_t *c = e->op_context;
    int err = e->err ? e->err : FI_EOTHER;
    if (!c) {
        /* rxm reports some failures without an operation: nothing to
         * attribute them to; stalled operations are caught by the watch */
        char full[320];
        err_text(err, text, full, sizeof(full));
        if (u->ctx_less_errors++ < 5)
            nxlt_log(u->ctx, NXL_LOG_WARN, "LIBFABRIC: provider %s reported an error with no "
                     "operation attached: %s", u->prov, full);
        return;
    }
    if (c->kind == CTX_RX) {
        lf_rx_t *rx = (lf_rx_t *)c;
        rx->posted = false;
        if (err != FI_ECANCELED) {
            char full[320];
            err_text(err, text, full, sizeof(full));
            nxlt_log(u->ctx, NXL_LOG_WARN, "LIBFABRIC: a notification receive failed: %s%s", full,
                     err == FI_ETRUNC ? "; a notification longer than the buffers was dropped"
                                      : "");
            rx_post(u, rx);
        }
        return;
    }
    lf_op_t *o = (lf_op_t *)c;
    /* nxl cancels nothing itself: a provider that cancels an operation
     * (rxm, when the peer's connection shuts down: ENOTCONN) lost the peer */
    int perr = e->prov_errno < 0 ? -e->prov_errno : e->prov_errno;
    if (err == FI_ECANCELED || is_disconnect(perr))
        err = is_disconnect(perr) ? perr : FI_ECONNABORTED;
    /* sockets fails a send with EIO in one place only: its progress engine
     * found the connection to the peer closed ("Peer disconnected") */
    else if (err == FI_EIO && !strcmp(u->prov, "sockets"))
        err = FI_ECONNRESET;
    /* a flushed operation's detail is the errno of whatever ran last */
    char full[320];
    err_text(err, e->err == FI_ECANCELED ? "the provider canceled the operation: its connection "
                                           "to the peer shut down" : text, full, sizeof(full));
    op_elem_done(o, err, full);
}

/* Reads the CQ until it is empty or the turn's budget is spent; returns
 * how many entries were handled (*more: the budget ran out). */
static unsigned drain(lf_t *u, bool *more)
{
    struct fi_cq_msg_entry e[CQ_BATCH];
    unsigned n = 0;
    *more = false;
    if (u->ep_closed)
        return 0;
    for (int b = 0; b < DRAIN_BATCHES; b++) {
        ssize_t r = fi_cq_read(u->cq, e, CQ_BATCH);
        if (r == -FI_EAGAIN)
            return n;
        if (r == -FI_EAVAIL) {
            struct fi_cq_err_entry err;
            memset(&err, 0, sizeof(err));
            if (fi_cq_readerr(u->cq, &err, 0) == 1) {
                on_err_entry(u, &err);
                n++;
            }
            continue;
        }
        if (r < 0) {
            nxlt_log(u->ctx, NXL_LOG_ERROR, "LIBFABRIC: fi_cq_read failed: %s",
                     fi_strerror((int)-r));
            return n;
        }
        for (ssize_t i = 0; i < r; i++) {
            lf_ctx_t *c = e[i].op_context;
            if (!c)
                continue;
            if (c->kind == CTX_RX)
                rx_done(u, (lf_rx_t *)c, e[i].len);
            else
                op_elem_done((lf_op_t *)c, 0, NULL);
        }
        n += (unsigned)r;
        if (r < CQ_BATCH)
            return n;
    }
    *more = true;
    return n;
}

static void run_checkq(lf_t *u)
{
    lf_op_t *o;
    while ((o = TAILQ_FIRST(&u->checkq))) {
        TAILQ_REMOVE(&u->checkq, o, clink);
        o->checkq = false;
        if (o->conn->self && o->op && o->want_notif && !o->notif_counted &&
            !nxlt_op_canceled(o->op)) {
            /* loopback notification: after the data, which moved at post */
            o->notif_counted = true;
            u->hit = true;
            nxlt_notif_recv(u->ctx, nxl_agent_name(nxlt_agent(u->ctx)), o->msg + 2 + o->msg[1],
                            o->msg_len - 2 - o->msg[1]);
        }
        op_check(o);
    }
}

/* Busy polling: spins on the CQ for a short slice, until something
 * completes or anything else in the loop is ready to run. */
static void spin(lf_t *u, unsigned bp)
{
    struct event_base *base = nxlt_base(u->ctx);
    if (event_base_get_num_events(base, EVENT_BASE_COUNT_ACTIVE))
        return;
    uint64_t end = nxlt_now_us() + SPIN_SLICE_US;
    if (end > u->busy_until_us)
        end = u->busy_until_us;
    u->hit = false;
    for (unsigned i = 1;; i++) {
        bool more;
        /* a peer's RMA into our memory is activity too, though the CQ shows none */
        bool remote = !(i & 15) && remote_activity(u);
        if (drain(u, &more) || u->hit) {
            resume(u);
            u->busy_until_us = nxlt_now_us() + bp;
            return;
        }
        if (remote)
            u->busy_until_us = nxlt_now_us() + bp;
        if (!(i & 15) &&
            (nxlt_now_us() >= end || event_base_get_num_events(base, EVENT_BASE_COUNT_ACTIVE)))
            return;
    }
}

static void poll_schedule(lf_t *u, bool active)
{
    bool busy = u->inflight || !TAILQ_EMPTY(&u->waitq);
    if (active)
        u->poll_us = POLL_MIN_US;
    else
        u->poll_us = u->poll_us * 2 > u->poll_max_us ? u->poll_max_us : u->poll_us * 2;
    if (busy && u->poll_us > POLL_ACTIVE_MAX_US)
        u->poll_us = POLL_ACTIVE_MAX_US;
    struct timeval tv = {(time_t)(u->poll_us / 1000000), (suseconds_t)(u->poll_us % 1000000)};
    evtimer_del(u->ev_poll);
    evtimer_add(u->ev_poll, &tv);
}

/* Did a peer touch our memory since we last looked? (Serving a peer's
 * READ or delivery-complete WRITE puts nothing in our CQ.) From a timer,
 * the RMA-event counter says; in fd mode, the wait fd being readable. */
static bool remote_activity(lf_t *u)
{
    if (u->rma_cntr) {
        uint64_t c = fi_cntr_read(u->rma_cntr);
        bool changed = c != u->rma_seen;
        u->rma_seen = c;
        return changed;
    }
    if (u->wait_fd >= 0) {
        struct pollfd pf = {.fd = u->wait_fd, .events = POLLIN};
        return poll(&pf, 1, 0) > 0;
    }
    return false;
}

/* woke: called because the CQ's wait fd was readable */
static void progress(lf_t *u, bool woke)
{
    if (u->in_progress || u->ep_closed)
        return;
    u->in_progress = true;
    shm_notice_closed(u);
    lf_conn_t *c, *cn;
    for (c = LIST_FIRST(&u->conns); c; c = cn) {
        cn = LIST_NEXT(c, link);
        if (c->fail_deferred && !c->failed) {
            char why[160];
            if (c->peer_closed)
                snprintf(why, sizeof(why), "%s", LF_PEER_CLOSED);
            else
                snprintf(why, sizeof(why), "a post was refused: %s",
                         fi_strerror(c->fail_deferred));
            c->refs++;
            conn_fail(c, c->fail_deferred, why, false);
            cn = LIST_NEXT(c, link);
            conn_put(c);
        }
    }
    bool more;
    unsigned n = drain(u, &more);
    resume(u);
    rx_repost_all(u);
    run_checkq(u);
    unsigned bp = nxlt_busy_poll_us(u->ctx);
    /* A peer's RMA into our memory: on the wait fd (tcp), it extends the
     * busy-poll window (a READ or a delivery-complete WRITE waits for us);
     * from a timer (shm's one-sided writes) it only keeps the poll short —
     * spinning on shm's progress would take the region lock the peer's
     * posts need (a 4 KiB WRITE took 250 us instead of 9) */
    bool remote = u->rma_cntr ? remote_activity(u) : woke;
    if ((n || (remote && u->wait_fd >= 0)) && bp)
        u->busy_until_us = nxlt_now_us() + bp;
    if (more) {
        kick(u);
    } else if (u->busy_until_us && nxlt_now_us() < u->busy_until_us) {
        /* from a timer, one CQ read per loop turn (shm's region lock, above) */
        if (!n && u->wait_fd >= 0)
            spin(u, bp);
        kick(u); /* busy-poll window: keep polling from the loop */
    } else if (u->wait_fd < 0) {
        poll_schedule(u, n > 0 || u->hit || remote);
        u->hit = false;
    } else if (u->hit || event_base_get_num_events(nxlt_base(u->ctx), EVENT_BASE_COUNT_ACTIVE)) {
        /* something is ready for the loop (a delivery): let it run first;
         * the next turn reads the CQ again and then decides to sleep */
        u->hit = false;
        kick(u);
    } else {
        struct fid *f = &u->cq->fid;
        int tries;
        for (tries = 0; tries < TRY_ROUNDS; tries++) {
            int r = fi_trywait(u->fabric, &f, 1);
            if (r == 0 || r == -FI_ENOSYS)
                break; /* safe to sleep on the fd */
            if (drain(u, &more)) {
                resume(u);
                run_checkq(u);
                kick(u); /* deliver first */
                break;
            }
        }
        if (tries == TRY_ROUNDS)
            kick(u);
    }
    u->in_progress = false;
}

static void on_fd(evutil_socket_t fd, short what, void *arg) { progress(arg, true); }
static void on_kick(evutil_socket_t fd, short what, void *arg) { progress(arg, false); }
static void on_poll(evutil_socket_t fd, short what, void *arg) { progress(arg, false); }
static void on_retry(evutil_socket_t fd, short what, void *arg) { progress(arg, false); }

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
static void post_refused(lf_conn_t *c)
{
    if (!c->tx_out && !c->refused_us)
        c->refused_us = nxlt_now_us();
}

/* the peer's listener, when its address is an IP socket address */
static socklen_t probe_addr(const lf_conn_t *c, struct sockaddr_storage *ss)
{
    const lf_addr_t *e = c->av_entry;
    if (!e || !strstr(c->u->prov, "tcp") || e->len > sizeof(*ss) || e->len < sizeof(sa_family_t))
        return 0;
    memset(ss, 0, sizeof(*ss));
    memcpy(ss, e->name, e->len);
    if (ss->ss_family == AF_INET && e->len >= sizeof(struct sockaddr_in))
        return sizeof(struct sockaddr_in);
    if (ss->ss_family == AF_INET6 && e->len >= sizeof(struct sockaddr_in6))
        return sizeof(struct sockaddr_in6);
    return 0;
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
        conn_fail(c, FI_ECONNREFUSED, why, false);
}

static void probe_end(lf_conn_t *c)
{
    if (!c->ev_probe)
        return;
    close(event_get_fd(c->ev_probe));
    event_free(c->ev_probe);
    c->ev_probe = NULL;
}

static void on_probe(evutil_socket_t fd, short what, void *arg)
{
    lf_conn_t *c = arg;
    int err = 0;
    socklen_t el = sizeof(err);
    if (!(what & EV_TIMEOUT) && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el))
        err = errno;
    struct sockaddr_storage ss;
    socklen_t sl = probe_addr(c, &ss);
    probe_end(c);
    if (!(what & EV_TIMEOUT) && err == ECONNREFUSED && sl && !c->tx_out)
        probe_refused(c, &ss);
    conn_put(c);
}

static void probe_start(lf_conn_t *c)
{
    lf_t *u = c->u;
    struct sockaddr_storage ss;
    socklen_t sl = probe_addr(c, &ss);
    if (!sl || c->ev_probe)
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
    struct timeval tv = {PROBE_WAIT_S, 0};
    if (errno != EINPROGRESS ||
        !(c->ev_probe = event_new(nxlt_base(u->ctx), fd, EV_WRITE, on_probe, c)) ||
        event_add(c->ev_probe, &tv)) {
        if (c->ev_probe)
            event_free(c->ev_probe);
        c->ev_probe = NULL;
        close(fd);
        return;
    }
    c->refs++; /* until on_probe */
}

/* While ops are in flight: progress now and then, and declare lost a peer
 * whose operations stopped completing. */
static void on_watch(evutil_socket_t fd, short what, void *arg)
{
    lf_t *u = arg;
    progress(u, false);
    uint64_t now = nxlt_now_us();
    lf_conn_t *c, *next;
    for (c = LIST_FIRST(&u->conns); c; c = next) {
        next = LIST_NEXT(c, link);
        if (c->inflight && !c->failed && !c->self && u->stall_us &&
            now - c->progress_us > u->stall_us) {
            c->refs++;
            conn_fail(c, FI_ETIMEDOUT, NULL, true);
            next = LIST_NEXT(c, link);
            conn_put(c);
        } else if (c->inflight && !c->failed && !c->tx_out && c->refused_us &&
                   now - c->refused_us >= PROBE_AFTER_US && !c->ev_probe &&
                   now - c->probed_us >= PROBE_EVERY_US) {
            c->refs++;
            probe_start(c);
            next = LIST_NEXT(c, link);
            conn_put(c);
        }
    }
    /* ops canceled while waiting for room */
    lf_op_t *o, *on;
    for (o = TAILQ_FIRST(&u->waitq); o; o = on) {
        on = TAILQ_NEXT(o, wlink);
        if (o->op && nxlt_op_canceled(o->op)) {
            o->stopped = true;
            TAILQ_REMOVE(&u->waitq, o, wlink);
            o->queued = false;
            op_check(o);
        }
    }
    if (u->inflight)
        watch_start(u);
}

static void conn_fail(lf_conn_t *c, int err, const char *text, bool stalled)
{
    lf_t *u = c->u;
    if (c->failed)
        return;
    c->failed = true;
    c->stalled = stalled;
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
                 (unsigned long long)(u->stall_us / 1000));
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
        op_check(o);
    }
    conn_put(c);
}

/* --------------------------------------------------------- life and death */

static int probe(char *why, size_t cap)
{
    if (!lf_loaded()) {
        snprintf(why, cap, "libfabric could not be loaded: %s", lf_sym.why);
        return 0;
    }
    uint32_t v = fi_version();
    snprintf(why, cap, "libfabric %u.%u: DRAM, remote and loopback, notifications; no VRAM "
             "(FI_HMEM not used yet)", FI_MAJOR(v), FI_MINOR(v));
    return 1;
}

static struct fi_info *base_hints(const char *prov, const char *domain)
{
    struct fi_info *h = lf_allocinfo();
    if (!h)
        return NULL;
    h->ep_attr->type = FI_EP_RDM;
    h->caps = LF_CAPS;
    h->mode = 0;
    h->addr_format = FI_FORMAT_UNSPEC;
    h->domain_attr->mr_mode = LF_MR_MODES;
    h->domain_attr->threading = FI_THREAD_DOMAIN;
    h->domain_attr->resource_mgmt = FI_RM_ENABLED;
    /* no RMA ordering needed (the notification waits for the writes'
     * completions): shm then writes one-sided (CMA) */
    h->tx_attr->msg_order = FI_ORDER_SAS;
    h->rx_attr->msg_order = FI_ORDER_SAS;
    if (prov)
        h->fabric_attr->prov_name = strdup(prov);
    if (domain)
        h->domain_attr->name = strdup(domain);
    return h;
}

/* Does this entry live on interface iface? The domain is named after it
 * (tcp, sockets), or its source address is one of the interface's. */
static bool on_iface(const struct fi_info *i, const char *iface)
{
    if (!iface)
        return true;
    if (i->domain_attr && i->domain_attr->name && !strcmp(i->domain_attr->name, iface))
        return true;
    if (!i->src_addr || (i->addr_format != FI_SOCKADDR_IN && i->addr_format != FI_SOCKADDR_IN6))
        return false;
    struct ifaddrs *ifs, *p;
    bool found = false;
    if (getifaddrs(&ifs))
        return false;
    const struct sockaddr *sa = i->src_addr;
    for (p = ifs; p && !found; p = p->ifa_next) {
        if (!p->ifa_addr || strcmp(p->ifa_name, iface) || p->ifa_addr->sa_family != sa->sa_family)
            continue;
        if (sa->sa_family == AF_INET)
            found = !memcmp(&((const struct sockaddr_in *)sa)->sin_addr,
                            &((const struct sockaddr_in *)p->ifa_addr)->sin_addr,
                            sizeof(struct in_addr));
        else
            found = !memcmp(&((const struct sockaddr_in6 *)sa)->sin6_addr,
                            &((const struct sockaddr_in6 *)p->ifa_addr)->sin6_addr,
                            sizeof(struct in6_addr));
    }
    freeifaddrs(ifs);
    return found;
}

static bool link_local(const struct fi_info *i)
{
    return i->fabric_attr && i->fabric_attr->name && !strncasecmp(i->fabric_attr->name, "fe80", 4);
}

/* the entry to use: tcp;ofi_rxm first unless a provider was asked for,
 * the first one on iface, link-local IPv6 last */
static struct fi_info *choose(struct fi_info *list, const char *domain, const char *iface,
                              bool asked)
{
    struct fi_info *best = NULL;
    int best_score = -1;
    for (struct fi_info *i = list; i; i = i->next) {
        if (!on_iface(i, iface) ||
            (domain && (!i->domain_attr->name || strcmp(i->domain_attr->name, domain))))
            continue;
        int score = 10;
        if (!asked && !strcmp(i->fabric_attr->prov_name, "tcp;ofi_rxm"))
            score += 4;
        if (!asked && !strcmp(i->fabric_attr->prov_name, "net"))
            score -= 2; /* its wait fd never sleeps */
        if (link_local(i))
            score -= 5;
        if (score > best_score) {
            best = i;
            best_score = score;
        }
    }
    return best;
}

/* What libfabric offers here, for a sentence: "tcp;ofi_rxm (eth0, lo), shm (shm)". */
static void list_offers(struct fi_info *list, char *out, size_t cap)
{
    size_t o = 0;
    out[0] = 0;
    for (struct fi_info *i = list; i && o < cap - 1; i = i->next) {
        const char *p = i->fabric_attr->prov_name, *d = i->domain_attr->name;
        bool seen = false;
        for (struct fi_info *j = list; j != i && !seen; j = j->next)
            seen = !strcmp(j->fabric_attr->prov_name, p) && !strcmp(j->domain_attr->name, d);
        if (seen)
            continue;
        bool same_prov = false;
        for (struct fi_info *j = list; j != i && !same_prov; j = j->next)
            same_prov = !strcmp(j->fabric_attr->prov_name, p);
        if (!same_prov)
            o += (size_t)snprintf(out + o, cap - o, "%s%s [%s", o ? "], " : "", p, d);
        else
            o += (size_t)snprintf(out + o, cap - o, " %s", d);
    }
    if (o && o < cap - 1)
        snprintf(out + o, cap - o, "]");
}

/* No provider matched: say what libfabric has and which hint to relax. */
static void explain_none(nxlt_ctx_t *ctx, const char *prov, const char *domain, const char *iface,
                         int r)
{
    char offers[400] = "nothing", hint[200] = "";
    struct fi_info *h, *info = NULL;
    /* everything RDM with RMA and messages, ignoring our other wishes */
    if ((h = lf_allocinfo())) {
        h->ep_attr->type = FI_EP_RDM;
        h->caps = FI_MSG | FI_RMA;
        h->mode = ~0ULL;
        h->domain_attr->mr_mode = LF_MR_MODES | FI_MR_RAW | FI_MR_HMEM | FI_MR_RMA_EVENT;
        if (!fi_getinfo(LF_API_VERSION, NULL, NULL, 0, h, &info)) {
            list_offers(info, offers, sizeof(offers));
            fi_freeinfo(info);
        }
        fi_freeinfo(h);
    }
    /* the first relaxation that finds something */
    struct {
        const char *what;
        const char *prov, *domain;
        bool any_mode, raw, no_rma;
    } tries[] = {
        {"drop 'iface'/'domain'", prov, NULL, false, false, false},
        {"drop 'provider' (and check FI_PROVIDER)", NULL, domain, false, false, false},
        {"nothing: the provider needs FI_MR_RAW keys, which nxl does not support", prov, domain,
         false, true, false},
        {"nothing: the provider needs mode bits (FI_CONTEXT...) nxl does not offer", prov, domain,
         true, false, false},
        {"nothing: the provider has no RMA (FI_RMA) on RDM endpoints; nxl needs it", prov, domain,
         false, false, true},
    };
    for (size_t t = 0; t < sizeof(tries) / sizeof(*tries) && !hint[0]; t++) {
        if (t == 0 && !domain && !iface)
            continue;
        if (t == 1 && !prov)
            continue;
        if (!(h = base_hints(tries[t].prov, tries[t].domain)))
            break;
        if (tries[t].any_mode)
            h->mode = ~0ULL;
        if (tries[t].raw)
            h->domain_attr->mr_mode |= FI_MR_RAW;
        if (tries[t].no_rma)
            h->caps = FI_MSG | FI_SEND | FI_RECV;
        info = NULL;
        if (!fi_getinfo(LF_API_VERSION, NULL, NULL, 0, h, &info)) {
            if (t > 1 || choose(info, tries[t].domain, t == 0 ? NULL : iface, true))
                snprintf(hint, sizeof(hint), "relax: %s", tries[t].what);
            fi_freeinfo(info);
        }
        fi_freeinfo(h);
    }
    const char *env = getenv("FI_PROVIDER");
    nxlt_error(ctx, "LIBFABRIC: fi_getinfo found no provider with RDM endpoints, RMA and "
               "messages for provider=%s, domain=%s, iface=%s%s%s (%s); libfabric offers here "
               "(RDM, RMA): %s; %s",
               prov ? prov : "any", domain ? domain : "any", iface ? iface : "any",
               env ? ", FI_PROVIDER=" : "", env ? env : "", r ? fi_strerror(-r) : "none matched",
               offers, hint[0] ? hint : "check the parameters against 'fi_info -t FI_EP_RDM'");
}

static void destroy(void *state);

static nxl_status_t fail(lf_t *u, const char *call, int r, const char *try)
{
    nxlt_error(u->ctx, "LIBFABRIC: %s failed on provider %s (fabric %s, domain %s): %s; %s", call,
               u->prov, u->info ? u->info->fabric_attr->name : "?",
               u->info ? u->info->domain_attr->name : "?", fi_strerror(r < 0 ? -r : r), try);
    destroy(u);
    return NXL_ERR_BACKEND;
}

/* shm names its endpoint after the process ("fi_shm://PID:D:E") and creates
 * /dev/shm/PID:D:E exclusively at fi_enable. A process killed with SIGKILL
 * leaves its region behind, and once pids wrap around (pid_max is 32768 by
 * default) a process given the same pid cannot start its endpoint (EBUSY).
 * A region named with this process's pid that exists before this process
 * enabled its endpoint is such a leftover: removed, and logged. */
static void shm_clear_stale(lf_t *u)
{
    char name[256], own[32], path[300];
    size_t len = sizeof(name) - 1;
    if (fi_getname(&u->ep->fid, name, &len) || len >= sizeof(name))
        return;
    name[len] = 0;
    const char *n = strncmp(name, "fi_shm://", 9) ? name : name + 9;
    int k = snprintf(own, sizeof(own), "%ld:", (long)getpid());
    if (strncmp(n, own, (size_t)k) || strchr(n, '/'))
        return;
    snprintf(path, sizeof(path), "/dev/shm/%s", n);
    if (!unlink(path))
        nxlt_log(u->ctx, NXL_LOG_INFO,
                 "LIBFABRIC: removed %s, left by a process that had this pid (killed before shm "
                 "could remove it)", path);
}

static nxl_status_t create(nxlt_ctx_t *ctx, const nxl_param_t *params, size_t n, void **out)
{
    if (!lf_loaded()) {
        nxlt_error(ctx, "LIBFABRIC: libfabric could not be loaded (%s); install it (apt-get "
                   "install libfabric1) or rebuild with --with-libfabric=PATH", lf_sym.why);
        return NXL_ERR_BACKEND;
    }
    static const char *const known[] = {"provider", "domain",   "iface",
                                        "stall_timeout", "progress", "poll_max",
                                        "delivery_complete", "am_write_max"};
    for (size_t i = 0; i < n; i++) {
        bool ok = false;
        for (size_t k = 0; k < sizeof(known) / sizeof(*known); k++)
            ok |= !strcmp(params[i].key, known[k]);
        if (!ok) {
            nxlt_error(ctx, "LIBFABRIC: unknown parameter '%s' (known: provider, domain, iface, "
                       "stall_timeout, progress, poll_max, delivery_complete, am_write_max)",
                       params[i].key);
            return NXL_ERR_INVALID_PARAM;
        }
    }
    const char *prov = param(params, n, "provider"), *domain = param(params, n, "domain");
    const char *iface = param(params, n, "iface"), *pm = param(params, n, "progress");
    long long stall_ms = 10000, poll_max_ms = -1;
    const char *v;
    if ((v = param(params, n, "stall_timeout")) && (stall_ms = parse_ms(v)) < 0) {
        nxlt_error(ctx, "LIBFABRIC: stall_timeout '%s' is not a time (e.g. 10s, 500ms, 0 = never)",
                   v);
        return NXL_ERR_INVALID_PARAM;
    }
    if ((v = param(params, n, "poll_max")) && ((poll_max_ms = parse_ms(v)) < 1)) {
        nxlt_error(ctx, "LIBFABRIC: poll_max '%s' is not a time of 1 ms or more (e.g. 250ms)", v);
        return NXL_ERR_INVALID_PARAM;
    }
    if (pm && strcmp(pm, "auto") && strcmp(pm, "fd") && strcmp(pm, "timer")) {
        nxlt_error(ctx, "LIBFABRIC: progress '%s' is not one of auto, fd, timer", pm);
        return NXL_ERR_INVALID_PARAM;
    }
    long long am_max = AMW_DEFAULT;
    if ((v = param(params, n, "am_write_max"))) {
        char *e;
        am_max = strtoll(v, &e, 10);
        if (e == v || *e || am_max < 0 || am_max > AMW_MAX) {
            nxlt_error(ctx, "LIBFABRIC: am_write_max '%s' is not a byte count up to %d (0 turns "
                       "one-message WRITEs off)", v, AMW_MAX);
            return NXL_ERR_INVALID_PARAM;
        }
    }
    const char *dcp = param(params, n, "delivery_complete");
    if (dcp && strcmp(dcp, "auto") && strcmp(dcp, "yes") && strcmp(dcp, "no")) {
        nxlt_error(ctx, "LIBFABRIC: delivery_complete '%s' is not one of auto, yes, no", dcp);
        return NXL_ERR_INVALID_PARAM;
    }
    if (prov && !*prov)
        prov = NULL;

    /* which provider: first with FI_DELIVERY_COMPLETE on writes, then without */
    struct fi_info *h = base_hints(prov, domain), *list = NULL;
    if (!h)
        return NXL_ERR_UNKNOWN;
    bool no_dc = dcp && !strcmp(dcp, "no");
    h->tx_attr->op_flags = no_dc ? 0 : FI_DELIVERY_COMPLETE;
    int r = fi_getinfo(LF_API_VERSION, NULL, NULL, 0, h, &list);
    struct fi_info *pick = r ? NULL : choose(list, domain, iface, prov != NULL);
    bool dc = pick != NULL && !no_dc;
    if (!pick) {
        if (list)
            fi_freeinfo(list);
        list = NULL;
        h->tx_attr->op_flags = 0;
        r = fi_getinfo(LF_API_VERSION, NULL, NULL, 0, h, &list);
        pick = r ? NULL : choose(list, domain, iface, prov != NULL);
    }
    fi_freeinfo(h);
    if (!pick) {
        if (list)
            fi_freeinfo(list);
        explain_none(ctx, prov, domain, iface, r);
        return NXL_ERR_BACKEND;
    }
    lf_t *u = calloc(1, sizeof(*u));
    if (!u) {
        fi_freeinfo(list);
        return NXL_ERR_UNKNOWN;
    }
    u->ctx = ctx;
    u->wait_fd = -1;
    u->bell_fd = -1;
    u->stall_us = (uint64_t)stall_ms * 1000;
    u->poll_max_us = (uint64_t)(poll_max_ms < 0 ? POLL_MAX_MS : poll_max_ms) * 1000;
    u->poll_us = POLL_MIN_US;
    u->am_write_max = (size_t)am_max;
    /* shm sends a message above its inject size (4 KiB) by another path,
     * slower for this than a CMA write and a small message: by default a
     * one-message WRITE there fits in an inject (README) */
    u->amw_msg_max = RXSZ;
    if (!param(params, n, "am_write_max") && !strcmp(pick->fabric_attr->prov_name, "shm") &&
        pick->tx_attr->inject_size)
        u->amw_msg_max = pick->tx_attr->inject_size;
    /* shm writes one-sided (CMA) and completes them once written, unless
     * asked for delivery completion, which sends the write through the
     * target's command queue instead: not by default there */
    u->dc = dc && !(!dcp || !strcmp(dcp, "auto") ? !strcmp(pick->fabric_attr->prov_name, "shm")
                                                 : false);
    LIST_INIT(&u->ops);
    LIST_INIT(&u->conns);
    LIST_INIT(&u->addrs);
    LIST_INIT(&u->holds);
    TAILQ_INIT(&u->waitq);
    TAILQ_INIT(&u->checkq);
    u->info = fi_dupinfo(pick);
    fi_freeinfo(list);
    if (!u->info) {
        free(u);
        return NXL_ERR_UNKNOWN;
    }
    struct fi_info *fi = u->info;
    snprintf(u->prov, sizeof(u->prov), "%s", fi->fabric_attr->prov_name);
    u->hold_us = rxm_hold_us(u->prov);
    u->addr_format = fi->addr_format;
    uint64_t mm = (uint64_t)fi->domain_attr->mr_mode;
    if (mm & FI_MR_RAW) {
        nxlt_error(ctx, "LIBFABRIC: provider %s needs raw memory keys (FI_MR_RAW), which nxl does "
                   "not support yet; choose another provider", u->prov);
        destroy(u);
        return NXL_ERR_NOT_SUPPORTED;
    }
    u->mr_local = mm & FI_MR_LOCAL;
    u->mr_virt = mm & FI_MR_VIRT_ADDR;
    u->mr_prov_key = mm & FI_MR_PROV_KEY;
    u->mr_endpoint = mm & FI_MR_ENDPOINT;
    u->max_msg = fi->ep_attr->max_msg_size ? fi->ep_attr->max_msg_size : (1ull << 30);
    if (u->max_msg > (1ull << 30))
        u->max_msg = 1ull << 30;
    u->tx_cap = fi->tx_attr->size ? fi->tx_attr->size : 256;

    if ((r = fi_fabric(fi->fabric_attr, &u->fabric, NULL)))
        return fail(u, "fi_fabric", r, "check the provider's installation ('fi_info -v')");
    if ((r = fi_domain(u->fabric, fi, &u->domain, NULL)))
        return fail(u, "fi_domain", r, "try another 'domain' or 'iface'");
    struct fi_av_attr aa = {.type = fi->domain_attr->av_type == FI_AV_UNSPEC
                                        ? FI_AV_TABLE
                                        : fi->domain_attr->av_type};
    if ((r = fi_av_open(u->domain, &aa, &u->av, NULL)))
        return fail(u, "fi_av_open", r, "the provider refused an address vector");

    /* the CQ: with a wait fd for the reactor, unless told otherwise */
    bool want_timer = pm && !strcmp(pm, "timer");
    if (!want_timer && (!pm || !strcmp(pm, "auto")) && !strcmp(u->prov, "net")) {
        want_timer = true;
        u->mode_why = "provider net's wait fd never stops being readable";
    }
    size_t cq_size = u->tx_cap + NRX + 64;
    struct fi_cq_attr ca = {.size = cq_size, .format = FI_CQ_FORMAT_MSG,
                            .wait_obj = want_timer ? FI_WAIT_NONE : FI_WAIT_FD};
    r = want_timer ? 1 : fi_cq_open(u->domain, &ca, &u->cq, NULL);
    if (r == 0) {
        int fd = -1;
        int cr = fi_control(&u->cq->fid, FI_GETWAIT, &fd);
        if (cr == 0 && fd >= 0) {
            u->wait_fd = fd;
        } else {
            fi_close(&u->cq->fid);
            u->cq = NULL;
            r = cr ? cr : -FI_ENOSYS;
        }
    }
    if (r) {
        if (pm && !strcmp(pm, "fd"))
            return fail(u, "fi_cq_open with FI_WAIT_FD", r,
                        "this provider has no wait fd: use progress=timer (or auto)");
        if (!u->mode_why)
            u->mode_why = want_timer ? "asked for" : "the provider gives its CQ no wait fd";
        /* From a timer, an agent learns that peers write into its memory
         * (shm needs the target's progress for that) by a counter of
         * remote RMA events: take an entry with FI_RMA_EVENT if there is. */
        if (!(fi->caps & FI_RMA_EVENT) && (h = base_hints(u->prov, fi->domain_attr->name))) {
            struct fi_info *ev = NULL;
            h->caps |= FI_RMA_EVENT;
            h->tx_attr->op_flags = fi->tx_attr->op_flags;
            free(h->fabric_attr->name);
            h->fabric_attr->name = strdup(fi->fabric_attr->name);
            if (!fi_getinfo(LF_API_VERSION, NULL, NULL, 0, h, &ev) && ev &&
                !strcmp(ev->fabric_attr->prov_name, u->prov)) {
                fi_close(&u->av->fid);
                fi_close(&u->domain->fid);
                fi_close(&u->fabric->fid);
                u->av = NULL;
                u->domain = NULL;
                u->fabric = NULL;
                fi_freeinfo(u->info);
                u->info = fi = fi_dupinfo(ev);
                fi_freeinfo(ev);
                ev = NULL;
                if (!fi)
                    return fail(u, "fi_dupinfo", -FI_ENOMEM, "out of memory");
                if ((r = fi_fabric(fi->fabric_attr, &u->fabric, NULL)))
                    return fail(u, "fi_fabric", r, "check the provider's installation");
                if ((r = fi_domain(u->fabric, fi, &u->domain, NULL)))
                    return fail(u, "fi_domain", r, "try another 'domain' or 'iface'");
                if ((r = fi_av_open(u->domain, &aa, &u->av, NULL)))
                    return fail(u, "fi_av_open", r, "the provider refused an address vector");
            }
            if (ev)
                fi_freeinfo(ev);
            fi_freeinfo(h);
        }
        ca.wait_obj = FI_WAIT_NONE;
        r = fi_cq_open(u->domain, &ca, &u->cq, NULL);
        if (!r && (fi->caps & FI_RMA_EVENT)) {
            struct fi_cntr_attr cta = {.events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_NONE};
            if (fi_cntr_open(u->domain, &cta, &u->rma_cntr, NULL))
                u->rma_cntr = NULL;
        }
    }
    if (r)
        return fail(u, "fi_cq_open", r, "the provider refused a completion queue");
    /* writes ask for delivery completion one by one; sends need not */
    fi->tx_attr->op_flags = 0;
    if ((r = fi_endpoint(u->domain, fi, &u->ep, NULL)))
        return fail(u, "fi_endpoint", r, "the provider refused an RDM endpoint");
    if ((r = fi_ep_bind(u->ep, &u->av->fid, 0)) ||
        (r = fi_ep_bind(u->ep, &u->cq->fid, FI_TRANSMIT | FI_RECV)))
        return fail(u, "fi_ep_bind", r, "the provider refused to bind its endpoint");
    if (u->rma_cntr &&
        fi_ep_bind(u->ep, &u->rma_cntr->fid, FI_REMOTE_WRITE | FI_REMOTE_READ)) {
        fi_close(&u->rma_cntr->fid);
        u->rma_cntr = NULL;
    }
    if (!strcmp(u->prov, "shm"))
        shm_clear_stale(u);
    if ((r = fi_enable(u->ep)))
        return fail(u, "fi_enable", r, "the endpoint could not start (address in use?)");
    u->name_len = sizeof(u->name);
    if ((r = fi_getname(&u->ep->fid, u->name, &u->name_len)))
        return fail(u, "fi_getname", r, "the endpoint has no address");
    if (!strcmp(u->prov, "shm") && !shm_register(u)) {
        nxlt_error(ctx, "LIBFABRIC: out of memory");
        destroy(u);
        return NXL_ERR_UNKNOWN;
    }

    /* receive buffers for notifications */
    u->rxmem = malloc((size_t)NRX * RXSZ);
    if (!u->rxmem) {
        nxlt_error(ctx, "LIBFABRIC: out of memory for notification buffers");
        destroy(u);
        return NXL_ERR_UNKNOWN;
    }
    if (u->mr_local) {
        if (mr_reg(u, u->rxmem, (size_t)NRX * RXSZ, FI_RECV, &u->rx_mr, NULL,
                   "the notification buffers") != NXL_SUCCESS) {
            destroy(u);
            return NXL_ERR_BACKEND;
        }
        u->rx_desc = fi_mr_desc(u->rx_mr);
    }
    for (unsigned i = 0; i < NRX; i++) {
        u->rx[i].c.kind = CTX_RX;
        u->rx[i].buf = u->rxmem + (size_t)i * RXSZ;
        rx_post(u, &u->rx[i]);
    }

    struct event_base *base = nxlt_base(ctx);
    u->ev_kick = evtimer_new(base, on_kick, u);
    u->ev_watch = evtimer_new(base, on_watch, u);
    u->ev_poll = evtimer_new(base, on_poll, u);
    u->ev_retry = evtimer_new(base, on_retry, u);
    if (u->wait_fd >= 0)
        u->ev_fd = event_new(base, u->wait_fd, EV_READ | EV_PERSIST, on_fd, u);
    if (!u->ev_kick || !u->ev_watch || !u->ev_poll || !u->ev_retry ||
        (u->wait_fd >= 0 && (!u->ev_fd || event_add(u->ev_fd, NULL)))) {
        nxlt_error(ctx, "LIBFABRIC: setting up the completion queue in the reactor failed");
        destroy(u);
        return NXL_ERR_BACKEND;
    }
    if (u->wait_fd < 0) {
        bell_open(u);
        if (u->bell_fd >= 0 && poll_max_ms < 0)
            u->poll_max_us = (uint64_t)POLL_MAX_BELL_MS * 1000;
    }
    kick(u);

    uint32_t ver = fi_version();
    char mrs[160];
    mr_mode_str(mm, mrs, sizeof(mrs));
    snprintf(u->desc, sizeof(u->desc), "libfabric %u.%u: provider %s, fabric %s, domain %s, %s",
             FI_MAJOR(ver), FI_MINOR(ver), u->prov, fi->fabric_attr->name, fi->domain_attr->name,
             u->wait_fd >= 0 ? "progress on the CQ wait fd" : "progress from a timer");
    nxlt_log(ctx, NXL_LOG_INFO, "LIBFABRIC: libfabric %u.%u, provider %s, fabric %s, domain %s; "
             "MR mode: %s; writes complete %s; progress: %s%s%s; stall timeout %lld ms; "
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
             u->mode_why ? " — " : "", u->mode_why ? u->mode_why : "", stall_ms,
             u->am_write_max, u->amw_msg_max);
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
    if (u->ep && !u->ep_closed) {
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
            if (drain(u, &more))
                continue;
            struct fid *f = &u->cq->fid;
            if (u->wait_fd >= 0 && fi_trywait(u->fabric, &f, 1) == 0) {
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
    LIST_FOREACH(o, &u->ops, link)
    if (o->op) {
        o->stopped = true;
        op_report(o, NXL_ERR_CANCELED, "LIBFABRIC: the agent is being destroyed");
    }
    /* an shm endpoint is closed (or retired) in destroy: shm_unregister */
    if (u->ep && !u->ep_closed && !u->shm_ep) {
        fi_close(&u->ep->fid);
        u->ep = NULL;
    }
    u->ep_closed = true;
}

static void destroy(void *state)
{
    lf_t *u = state;
    quiesce(u);
    lf_shm_list_t reap = LIST_HEAD_INITIALIZER(reap);
    if (u->shm_ep && !shm_unregister(u, &reap) && u->ep) {
        fi_close(&u->ep->fid);
        u->ep = NULL;
    }
    if (u->ev_fd)
        event_free(u->ev_fd);
    if (u->ev_kick)
        event_free(u->ev_kick);
    if (u->ev_watch)
        event_free(u->ev_watch);
    if (u->ev_poll)
        event_free(u->ev_poll);
    if (u->ev_bell)
        event_free(u->ev_bell);
    if (u->bell_fd >= 0)
        close(u->bell_fd);
    if (u->ev_retry)
        event_free(u->ev_retry);
    while (!LIST_EMPTY(&u->ops)) {
        lf_op_t *o = LIST_FIRST(&u->ops);
        o->completed = o->posted;
        op_free(o);
    }
    /* connections the engine still holds are freed with it (unload_conn
     * already ran for every remote at teardown) */
    while (!LIST_EMPTY(&u->conns)) {
        lf_conn_t *c = LIST_FIRST(&u->conns);
        probe_end(c);
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
    if (u->rx_mr)
        fi_close(&u->rx_mr->fid);
    if (u->rma_cntr)
        fi_close(&u->rma_cntr->fid);
    if (u->cq)
        fi_close(&u->cq->fid);
    if (u->av)
        fi_close(&u->av->fid);
    if (u->domain)
        fi_close(&u->domain->fid);
    if (u->fabric)
        fi_close(&u->fabric->fid);
    if (u->info)
        fi_freeinfo(u->info);
    free(u->rxmem);
    free(u);
    shm_close_retired(&reap);
}

static const char *describe(void *state)
{
    return ((lf_t *)state)->desc;
}

/* What create() takes: the engine refuses other keys, nxl_info -v lists
 * these (keep them with create()'s parsing) */
#define PSTR_(x) #x
#define PSTR(x) PSTR_(x)
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
};

NXLT_MODULE_EXPORT const nxlt_ops_t nxlt_libfabric_ops = {
    .abi_version = NXLT_ABI_VERSION,
    .name = "LIBFABRIC",
    .mem_mask = 1u << NXL_DRAM,
    .caps = NXLT_CAP_REMOTE | NXLT_CAP_LOCAL | NXLT_CAP_NOTIF | NXLT_CAP_CANCEL_WAITS |
            NXLT_CAP_PARAMS,
    .params = lf_params,
    .nparams = sizeof(lf_params) / sizeof(*lf_params),
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
    .revoke = lf_revoke,
};
