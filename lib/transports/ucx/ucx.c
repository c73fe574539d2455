/* SPDX-License-Identifier: BSD-3-Clause */
/* The UCX transport: DRAM to and from other agents and within the agent,
 * through one UCP worker driven by the reactor.
 *
 * Progress: the worker's event fd sits in the reactor. On wake-up the worker
 * is progressed until idle and re-armed; when arming answers UCS_ERR_BUSY
 * (shared-memory transports with queued sends) it is retried a bounded
 * number of times, then progress continues from a zero-delay timer on the
 * next reactor turn, so the loop stays fair and an idle agent sleeps.
 *
 * A transfer posts one put or get per element, then flushes the endpoint;
 * the flush completing means the data is at the target, and only then is
 * the notification sent as an active message. While operations are in
 * flight a slow timer keeps progressing the worker so that UCX's keepalive
 * notices a dead peer even when no fd wakes us.
 *
 * Same host: UCX 1.13 moves puts and gets into memory it did not allocate
 * as messages the target must progress. To a peer on this host (same boot
 * id and pid namespace, advertised in the connection info and proved by
 * reading a cookie out of the peer) the transport copies itself, one-sided,
 * with process_vm_writev / process_vm_readv into the peer's registered
 * regions ("cross-memory attach", as UCX's own cma transport does for
 * rendezvous): in slices of the reactor's time, the notification (a UCX
 * message) only after the last byte landed. The peer is held by a pidfd:
 * checked before every system call, so that a pid that died is never
 * written to again (a recycled pid is another process), and watched in
 * the reactor, so that its transfers fail as soon as it exits. A kernel
 * that refuses (ptrace rules) sends the transfers back to UCX. */
#include "config.h"
#include <nxl/transport.h>

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <ucp/api/ucp.h>
#include <unistd.h>
#include <ucs/debug/log_def.h>

#define NXL_UCX_AM_NOTIF 0x6e78 /* "nx" */
#define NXL_UCX_AM_WRITE 0x6e79 /* a small WRITE and its notification in one message */
#include "wire.h" /* connection info: CI_MAGIC, a flags byte, UCX's worker address */
#define NXL_UCX_AM_REVOKE 0x6e7b /* a region was deregistered: peers stop using it */
#define NXL_UCX_AM_WRITE_ACK 0x6e7c /* an AM_WRITE was copied into place (or dropped) */
/* off unless asked for: the acknowledgement needs UCX's reply endpoint (below) */
#define AM_WRITE_MAX_DEFAULT 0
#define SHM_FIFO_DEFAULT "256" /* elements of UCX's shared-memory receive FIFO (UCX: 64) */
#define ARM_TRIES 16
#define WATCH_MS 100
#define SPIN_SLICE_US 50 /* busy polling: longest spin before the loop gets a turn */
#define BUSY_SPIN_US 2000 /* arm answering BUSY, nothing moving: progressed at once this long */
#define BUSY_BACKOFF_MIN_US 100 /* ... then from a timer, its delay doubling */
#define BUSY_BACKOFF_MAX_US 5000 /* ... up to this */
#define DESTROY_WAIT_MS 2000 /* destroy: longest wait for UCX to return its requests */
#define CMA_SLICE_US 200 /* cross-memory attach: longest run of copies before the loop's turn */
#define CMA_CHUNK_DEFAULT (1u << 20) /* bytes a system call copies at most */
#define CMA_PID_CHECK_US 20 /* a peer's pidfd polled before a copy when older than this */
#ifndef IOV_MAX
#define IOV_MAX 1024
#endif

#define CMA_MAGIC 0x6e786c636d610001ull /* "nxlcma", 0, 1: before the cookie's random value */
enum { CMA_OFF, CMA_AUTO, CMA_ON };        /* the cma parameter */
enum { CMA_NONE, CMA_READY, CMA_REFUSED }; /* a connection's cross-memory attach */

typedef struct ucx_conn ucx_conn_t;

/* a message of the transport's own (a region revoked): its bytes live
 * until UCX is done with them */
typedef struct ucx_side {
    struct ucx_state *u;
    void *req;
    LIST_ENTRY(ucx_side) link;
    size_t len;
    unsigned char buf[];
} ucx_side_t;

typedef struct ucx_state {
    nxlt_ctx_t *ctx;
    ucp_context_h ucp;
    ucp_worker_h w;
    void *addr;
    size_t addr_len;
    int efd;
    struct event *ev_efd, *ev_kick, *ev_watch;
    bool watch_on;              /* ev_watch armed: it re-arms itself while ops are in flight */
    unsigned inflight;          /* ops not done yet */
    uint64_t busy_until_us;
    LIST_HEAD(, ucx_conn) conns;
    LIST_HEAD(, ucx_op) ops;
    LIST_HEAD(, ucx_side) sides; /* own messages UCX still holds */
    void **closing;             /* endpoint close requests in flight */
    unsigned nclosing, capclosing;
    char desc[256];
    bool cuda;                  /* this UCX moves CUDA memory (ucp_context_query) */
    unsigned busy_rounds;       /* statistics: arm returned BUSY and we yielded */
    uint64_t busy_idle_us;      /* since when arm answers BUSY with nothing moving (0: not) */
    unsigned backoff_us;        /* the kick timer's delay meanwhile (0: none) */
    bool kick_later;            /* ev_kick is pending with that delay */
    bool backoff_said;          /* the backoff was logged */
    bool hit;                   /* an op completed or a notification came: the engine has work */
    uint64_t stall_us;          /* ops to a peer with none completing this long: peer lost */
    unsigned in_ucx;            /* >0 inside a UCX call made for the engine (post, close...) */
    size_t am_write_max;        /* WRITEs with a notification up to this size go as one message */
    uint64_t am_seq;            /* the last AM_WRITE's number (its acknowledgement names it) */
    LIST_HEAD(, ucx_op) acks;   /* AM_WRITEs waiting for their acknowledgement */
    struct ucx_md **regs;       /* registered regions, sorted by address: AM_WRITE targets */
    size_t nregs, capregs;
    pthread_t thread;           /* the agent's reactor thread (where UCX logs for us) */
    int cma_mode;               /* CMA_OFF, CMA_AUTO, CMA_ON */
    bool cma_here;              /* our identity is known: advertised in the connection info */
    ucx_ci_cma_t cma_me;
    volatile uint64_t cma_cookie[2]; /* CMA_MAGIC and a random value: peers read them to
                                      * prove they reach this process */
    size_t cma_chunk;           /* bytes a system call copies at most */
    size_t cma_max;             /* larger transfers go through UCX (0: no limit) */
    TAILQ_HEAD(, ucx_op) cma_q; /* transfers being copied, in order */
    struct ucx_op *spare_ops;   /* done, for reuse (OP_SPARES) */
    unsigned nspare_ops;
    struct event *ev_cma;       /* continues the copies on the next turn */
    struct event *ev_cma_now;   /* copies posted by callbacks, after them in the same pass */
    bool cma_now_on;            /* ev_cma_now is active */
    bool cma_now_used;          /* ev_cma_now was activated since ev_cma last ran */
    uint64_t cma_burst_end;     /* copies inside calls stop here... */
    bool cma_defer;             /* ... and then wait for the loop's turn */
    bool cma_refusal_said;      /* the first refusal is a warning, later ones info */
    struct iovec *cma_liov, *cma_riov; /* IOV_MAX each */
    uint64_t cma_xfers, cma_bytes; /* statistics */
    bool is_live;               /* on live_list */
    unsigned long live_gen_seen; /* live_gen when this agent last looked */
    LIST_ENTRY(ucx_state) live; /* every instance of the process */
} ucx_t;

struct ucx_conn {
    ucx_t *u;
    ucp_ep_h ep;
    char *name;
    int refs;                   /* the engine's, plus one per op */
    bool failed;
    bool unloaded;
    bool stalled;               /* failed by our stall timeout, not by UCX */
    bool local;                 /* the peer is another agent of this process */
    void *peer_addr;            /* local: its worker address (finds it on live_list) */
    bool peer_destroyed;        /* local: that agent was destroyed (local_gone) */
    size_t peer_addr_len;
    bool am_write;              /* the peer takes AM_WRITE messages and acknowledges them */
    bool forced;                /* its endpoint was closed by force: UCX 1.13 may never
                                 * complete a flush that was pending on it */
    bool fail_deferred;         /* UCX failed it inside one of our calls: handled from the loop */
    ucs_status_t why;
    unsigned inflight;          /* ops reported to the engine not yet */
    uint64_t progress_us;       /* last completion (or first post) of an op on it (coarse_us) */
    int cma;                    /* CMA_NONE, CMA_READY, CMA_REFUSED */
    int pidfd;                  /* the peer's process, while cma is CMA_READY (or -1) */
    pid_t pid;
    uint64_t pid_seen_us;       /* when its pidfd last said the process is alive */
    struct event *ev_pid;       /* the peer's process exited */
    LIST_ENTRY(ucx_conn) link;
};

/* a remote region's key: UCX's, and whether UCX maps it here itself
 * (memory it allocated, on shared memory: its puts are one-sided) */
typedef struct ucx_rkey {
    ucp_rkey_h rk;
    int mapped; /* -1 not asked yet */
} ucx_rkey_t;

typedef struct ucx_md {
    ucp_mem_h memh;
    void *addr;
    size_t len;
    bool vram;
} ucx_md_t;

/* ---- the regions a peer may write with AM_WRITE: those registered here */

static size_t regs_lower(ucx_t *u, uintptr_t addr) /* first with start > addr */
{
    size_t lo = 0, hi = u->nregs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if ((uintptr_t)u->regs[mid]->addr <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int regs_add(ucx_t *u, ucx_md_t *m)
{
    if (u->nregs == u->capregs) {
        size_t cap = u->capregs ? u->capregs * 2 : 16;
        ucx_md_t **v = realloc(u->regs, cap * sizeof(*v));
        if (!v)
            return -1;
        u->regs = v;
        u->capregs = cap;
    }
    size_t k = regs_lower(u, (uintptr_t)m->addr);
    memmove(u->regs + k + 1, u->regs + k, (u->nregs - k) * sizeof(*u->regs));
    u->regs[k] = m;
    u->nregs++;
    return 0;
}

static void regs_remove(ucx_t *u, ucx_md_t *m)
{
    for (size_t k = 0; k < u->nregs; k++)
        if (u->regs[k] == m) {
            memmove(u->regs + k, u->regs + k + 1, (u->nregs - k - 1) * sizeof(*u->regs));
            u->nregs--;
            return;
        }
}

/* Does [addr, addr+len) lie inside one registered region? The last region
 * starting at or below addr holds it, unless regions nest: then one
 * further down may. */
static bool regs_hold(ucx_t *u, uint64_t addr, uint64_t len)
{
    for (size_t k = regs_lower(u, (uintptr_t)addr); k-- > 0;) {
        const ucx_md_t *m = u->regs[k];
        uintptr_t a = (uintptr_t)m->addr;
        if (addr >= a && len <= m->len && addr - a <= m->len - len)
            return true;
    }
    return false;
}

typedef struct ucx_op {
    ucx_t *u;
    nxlt_op_t *op;
    ucx_conn_t *conn;
    ucs_status_t st;            /* first error */
    void *notif;                /* [u16 name length][name][message] (in buf), or NULL */
    size_t notif_len;
    LIST_ENTRY(ucx_op) link;
    /* cross-memory attach: the elements, and how far the copies got */
    nxlt_iov_t *iov;            /* iov_cap entries, kept with the op */
    size_t n, at, off;
    bool read, queued;
    TAILQ_ENTRY(ucx_op) cq;
    char *why;                  /* a sentence of its own for a failure (malloc'd) */
    unsigned char *buf;         /* buf_cap bytes, kept with the op: the message it sends */
    size_t buf_cap, iov_cap;
    struct ucx_op *next_free;   /* on the instance's spares */
    /* an AM_WRITE: done when UCX sent it and the target acknowledged it */
    bool amw, amw_sent, amw_acked;
    ucs_status_t amw_st;        /* what the acknowledgement said */
    unsigned char amw_hdr[8];   /* its number, the message's header */
    LIST_ENTRY(ucx_op) ack_link; /* on u->acks while amw && !amw_acked */
} ucx_op_t;

/* Ops done are kept for the next ones, with their buffers up to these sizes */
#define OP_SPARES 256
#define OP_SPARE_BUF (16u << 10)
#define OP_SPARE_IOV 64


/* ----------------------------------------------- instances and UCX's log
 *
 * UCX prints its warnings and errors to standard output by default: into
 * the embedding application's output. Its lines go through nxl's log
 * instead (the agent's level and callback), to the agent whose thread runs
 * the UCX call that logs, unless the user set UCX_LOG_LEVEL (or
 * UCX_LOG_FILE) and so asked for UCX's own printing. The handler stays
 * installed for the life of the process; with no agent left, lines go to
 * standard error when $NXL_LOG_LEVEL asks for them. */

static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static LIST_HEAD(, ucx_state) live_list = LIST_HEAD_INITIALIZER(live_list);
static unsigned long live_gen; /* bumped as an instance leaves live_list */
static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static bool log_user_asked;

static nxl_log_level_t ucs_to_nxl(ucs_log_level_t l)
{
    switch (l) {
    case UCS_LOG_LEVEL_FATAL:
    case UCS_LOG_LEVEL_ERROR:
        return NXL_LOG_ERROR;
    case UCS_LOG_LEVEL_WARN:
        return NXL_LOG_WARN;
    case UCS_LOG_LEVEL_DIAG:
    case UCS_LOG_LEVEL_INFO:
        return NXL_LOG_INFO;
    case UCS_LOG_LEVEL_DEBUG:
        return NXL_LOG_DEBUG;
    default:
        return NXL_LOG_TRACE;
    }
}

static ucs_log_func_rc_t log_handler(const char *file, unsigned line, const char *function,
                                     ucs_log_level_t level,
                                     const ucs_log_component_config_t *comp_conf,
                                     const char *fmt, va_list ap)
{
    if (log_user_asked)
        return UCS_LOG_FUNC_RC_CONTINUE;
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    nxl_log_level_t nl = ucs_to_nxl(level);
    pthread_mutex_lock(&live_lock);
    ucx_t *u, *to = NULL;
    pthread_t me = pthread_self();
    LIST_FOREACH(u, &live_list, live)
    if (pthread_equal(u->thread, me)) {
        to = u;
        break;
    }
    pthread_mutex_unlock(&live_lock);
    if (to) {
        nxlt_log(to->ctx, nl, "UCX %s:%u: %s", base, line, msg);
    } else {
        const char *e = getenv("NXL_LOG_LEVEL");
        int want = !e ? 0 : !strcasecmp(e, "error") ? 1 : !strcasecmp(e, "warn") ? 2
                   : !strcasecmp(e, "info") ? 3 : !strcasecmp(e, "debug") ? 4
                   : !strcasecmp(e, "trace") ? 5 : atoi(e);
        if ((int)nl <= want)
            fprintf(stderr, "nxl: UCX %s:%u: %s\n", base, line, msg);
    }
    return UCS_LOG_FUNC_RC_STOP;
}

static void log_install(void)
{
    log_user_asked = getenv("UCX_LOG_LEVEL") || getenv("UCX_LOG_FILE");
    ucs_log_push_handler(log_handler);
}

static void live_add(ucx_t *u)
{
    pthread_once(&log_once, log_install);
    u->thread = pthread_self();
    pthread_mutex_lock(&live_lock);
    LIST_INSERT_HEAD(&live_list, u, live);
    u->is_live = true;
    pthread_mutex_unlock(&live_lock);
}

static void live_remove(ucx_t *u)
{
    pthread_mutex_lock(&live_lock);
    LIST_REMOVE(u, live);
    __atomic_add_fetch(&live_gen, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&live_lock);
}

/* Is the local peer of c alive and progressed by another thread than this
 * one (its own reactor thread, or another thread of the application)? */
static bool live_elsewhere(const ucx_conn_t *c)
{
    bool found = false;
    pthread_mutex_lock(&live_lock);
    ucx_t *u;
    LIST_FOREACH(u, &live_list, live)
    if (c->peer_addr && u->addr && u->addr_len == c->peer_addr_len &&
        !memcmp(u->addr, c->peer_addr, c->peer_addr_len)) {
        found = !pthread_equal(u->thread, pthread_self());
        break;
    }
    pthread_mutex_unlock(&live_lock);
    return found;
}

/* Is this worker address one of this process's own instances? */
static bool live_is_local(const void *addr, size_t len)
{
    bool found = false;
    pthread_mutex_lock(&live_lock);
    ucx_t *u;
    LIST_FOREACH(u, &live_list, live)
    if (u->addr && u->addr_len == len && !memcmp(u->addr, addr, len)) {
        found = true;
        break;
    }
    pthread_mutex_unlock(&live_lock);
    return found;
}

/* ------------------------------------------------------------ progress */

/* The monotonic clock to a few milliseconds, for the stall timeout: reading
 * it costs a fraction of the precise one's (a paravirtual clock here) */
static uint64_t coarse_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* progress on the next turn (one already set for later is brought forward) */
static void kick(ucx_t *u)
{
    static const struct timeval zero = {0, 0};
    if (u->kick_later || !evtimer_pending(u->ev_kick, NULL)) {
        u->kick_later = false;
        evtimer_add(u->ev_kick, &zero);
    }
}

/* Busy polling without a reactor turn per round: each turn costs an
 * epoll_wait(), more than a message over shared memory takes. Spins on the
 * worker for a short slice, until UCX reports work, one of our operations
 * completes or a notification arrives (UCX does not count every completion:
 * a flush completes with a count of 0), or anything else in the loop is
 * ready to run (a delivery the engine queued outside this call, another
 * transport's event): then the loop gets its turn. */
static void spin(ucx_t *u, unsigned bp)
{
    struct event_base *base = nxlt_base(u->ctx);
    if (event_base_get_num_events(base, EVENT_BASE_COUNT_ACTIVE))
        return;
    uint64_t now = nxlt_now_us(), end = now + SPIN_SLICE_US;
    if (end > u->busy_until_us)
        end = u->busy_until_us;
    u->hit = false;
    for (unsigned i = 1;; i++) {
        if (ucp_worker_progress(u->w) || u->hit) {
            while (ucp_worker_progress(u->w))
                ;
            /* the clock as last read (16 rounds ago at most): no read
             * between the message and its delivery */
            u->busy_until_us = now + bp;
            return;
        }
        if (!(i & 15) && ((now = nxlt_now_us()) >= end ||
                          event_base_get_num_events(base, EVENT_BASE_COUNT_ACTIVE)))
            return;
    }
}

static void conn_fail(ucx_conn_t *c, ucs_status_t status, bool stalled);

/* Another agent of this process that this one is connected to was
 * destroyed since this one last looked: its connection fails from the
 * loop (over shared memory nothing else would say so: its process lives
 * on, and UCX's keepalive asks the process). */
static void local_gone(ucx_t *u)
{
    unsigned long g = __atomic_load_n(&live_gen, __ATOMIC_ACQUIRE);
    if (g == u->live_gen_seen)
        return;
    u->live_gen_seen = g;
    ucx_conn_t *c;
    LIST_FOREACH(c, &u->conns, link)
    if (c->local && c->peer_addr && !c->failed && !c->fail_deferred &&
        !live_is_local(c->peer_addr, c->peer_addr_len)) {
        c->peer_destroyed = true;
        c->fail_deferred = true;
        c->why = UCS_ERR_CONNECTION_RESET;
        kick(u);
    }
}

/* Endpoint failures UCX reported inside a call of ours (it runs the error
 * handler inside ucp_put_nbx over TCP, say) are handled here, from the
 * loop: failing the connection reports its ops to the engine, which must
 * not happen inside the engine's own call into this transport. */
static void deferred_failures(ucx_t *u)
{
    local_gone(u);
    ucx_conn_t *c;
    LIST_FOREACH(c, &u->conns, link)
    if (c->fail_deferred && !c->failed)
        conn_fail(c, c->why, false);
}

/* Arming answered BUSY ARM_TRIES times: sends are queued for room in a
 * peer's shared-memory FIFO, and progress continues on the next turn until
 * the peer made room. A peer that died with its FIFO full never does, and
 * UCX 1.13 never gives up on those sends, nor on the flush that
 * discarding the endpoint needs (it ignores UCT_FLUSH_FLAG_CANCEL): arming
 * then answers BUSY for the life of the worker, and a kick each turn is a
 * reactor spinning at 100% for good. So when nothing moved (n: what
 * progress did) and no op of ours is in flight for BUSY_SPIN_US, the
 * worker is progressed from a timer instead, its delay doubling from
 * BUSY_BACKOFF_MIN_US to BUSY_BACKOFF_MAX_US; anything that moves, an op
 * started or an arm that succeeds brings back the zero delay. What that
 * costs: a message from a peer that arrives while the worker cannot sleep
 * on its fd waits for the timer. */
static void busy_kick(ucx_t *u, unsigned n)
{
    if (n || u->inflight) {
        u->busy_idle_us = 0;
        u->backoff_us = 0;
        kick(u);
        return;
    }
    uint64_t now = nxlt_now_us();
    if (!u->busy_idle_us)
        u->busy_idle_us = now;
    if (now - u->busy_idle_us < BUSY_SPIN_US) {
        kick(u);
        return;
    }
    u->backoff_us = !u->backoff_us ? BUSY_BACKOFF_MIN_US
                    : u->backoff_us >= BUSY_BACKOFF_MAX_US / 2 ? BUSY_BACKOFF_MAX_US
                    : u->backoff_us * 2;
    struct timeval tv = {0, (suseconds_t)u->backoff_us};
    evtimer_add(u->ev_kick, &tv);
    u->kick_later = true;
    if (u->backoff_us == BUSY_BACKOFF_MAX_US && !u->backoff_said) {
        u->backoff_said = true;
        nxlt_log(u->ctx, NXL_LOG_WARN, "UCX: the worker cannot sleep on its event fd: "
                 "ucp_worker_arm keeps answering BUSY with nothing moving (as it does for good "
                 "once a shared-memory peer died with its receive FIFO full); it is progressed "
                 "every %d ms while idle, and a message arriving meanwhile waits for that",
                 BUSY_BACKOFF_MAX_US / 1000);
    }
}

static void progress(ucx_t *u)
{
    unsigned n = 0;
    deferred_failures(u);
    /* backing off (busy_kick): one look, not ARM_TRIES */
    for (int tries = 0, max = u->backoff_us ? 1 : ARM_TRIES; tries < max; tries++) {
        unsigned k;
        while ((k = ucp_worker_progress(u->w)))
            n += k;
        unsigned bp = nxlt_busy_poll_us(u->ctx);
        if (n && bp)
            u->busy_until_us = nxlt_now_us() + bp;
        if (u->busy_until_us && nxlt_now_us() < u->busy_until_us) {
            if (!n)
                spin(u, bp);
            kick(u); /* busy-poll window: keep polling from the loop */
            return;
        }
        /* Something is ready for the loop (a completion or a notification
         * to deliver): let it run first. Arming costs several system calls
         * and right after traffic mostly answers BUSY; delivering first
         * took ~15 us off each one-way trip here. The next turn arms. */
        if (u->hit || event_base_get_num_events(nxlt_base(u->ctx), EVENT_BASE_COUNT_ACTIVE)) {
            u->hit = false;
            kick(u);
            return;
        }
        ucs_status_t st = ucp_worker_arm(u->w);
        if (st == UCS_OK) {
            u->busy_idle_us = 0;
            u->backoff_us = 0;
            return;
        }
        if (st != UCS_ERR_BUSY) {
            nxlt_log(u->ctx, NXL_LOG_ERROR, "UCX: ucp_worker_arm failed: %s",
                     ucs_status_string(st));
            kick(u);
            return;
        }
    }
    /* still busy: hand back to the loop and continue on the next turn */
    u->busy_rounds++;
    busy_kick(u, n);
}

static void on_efd(evutil_socket_t fd, short what, void *arg) { progress(arg); }
static void on_kick(evutil_socket_t fd, short what, void *arg) { progress(arg); }

/* While ops are in flight: progress now and then (UCX's keepalive runs from
 * progress), and declare lost a peer whose ops stopped completing: over TCP
 * a cut link raises no error until the kernel gives up, minutes later. */
static void on_watch(evutil_socket_t fd, short what, void *arg)
{
    ucx_t *u = arg;
    progress(u);
    uint64_t now = coarse_us();
    ucx_conn_t *c;
    LIST_FOREACH(c, &u->conns, link)
    if (c->inflight && !c->failed && u->stall_us && now - c->progress_us > u->stall_us)
        conn_fail(c, UCS_ERR_ENDPOINT_TIMEOUT, true);

    /* armed while ops are in flight; the first op after an idle period
     * re-arms it (an op started meanwhile keeps it going: no timer is
     * added and removed for each op of a one-at-a-time stream) */
    u->watch_on = u->inflight > 0;
    if (u->watch_on) {
        struct timeval tv = {0, WATCH_MS * 1000};
        evtimer_add(u->ev_watch, &tv);
    }
}

static void op_started(ucx_t *u)
{
    if (u->inflight++ == 0 && !u->watch_on) {
        u->watch_on = true;
        struct timeval tv = {0, WATCH_MS * 1000};
        evtimer_add(u->ev_watch, &tv);
    }
}

/* -------------------------------------------------------- connections */

static void cma_close(ucx_conn_t *c)
{
    if (c->ev_pid)
        event_free(c->ev_pid);
    c->ev_pid = NULL;
    if (c->pidfd >= 0)
        close(c->pidfd);
    c->pidfd = -1;
    if (c->cma == CMA_READY)
        c->cma = CMA_NONE;
}

static void conn_put(ucx_conn_t *c)
{
    if (--c->refs)
        return;
    cma_close(c);
    LIST_REMOVE(c, link);
    free(c->peer_addr);
    free(c->name);
    free(c);
}

static void close_forget(ucx_t *u, void *req)
{
    for (unsigned i = 0; i < u->nclosing; i++)
        if (u->closing[i] == req) {
            u->closing[i] = u->closing[--u->nclosing];
            return;
        }
}

static void close_cb(void *req, ucs_status_t st, void *arg)
{
    ucx_t *u = arg;
    close_forget(u, req);
    ucp_request_free(req);
}

static void ep_close(ucx_t *u, ucp_ep_h ep, bool force)
{
    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                        UCP_OP_ATTR_FIELD_FLAGS,
        .flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0,
        .cb.send = close_cb,
        .user_data = u,
    };
    u->in_ucx++;
    ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &p);
    u->in_ucx--;
    if (UCS_PTR_IS_PTR(r)) {
        if (u->nclosing == u->capclosing) {
            unsigned cap = u->capclosing ? u->capclosing * 2 : 8;
            void **v = realloc(u->closing, cap * sizeof(*v));
            if (!v) {
                ucp_request_free(r); /* completes on its own, unobserved */
                kick(u);
                return;
            }
            u->closing = v;
            u->capclosing = cap;
        }
        u->closing[u->nclosing++] = r;
    }
    kick(u);
}

static void side_done(void *req, ucs_status_t st, void *arg)
{
    ucx_side_t *m = arg;
    LIST_REMOVE(m, link);
    ucp_request_free(req);
    free(m);
}

/* Sends a message of the transport's own on @p ep (no op behind it: its
 * failure is only logged). m->buf holds len bytes; m is taken. */
static void side_send(ucx_t *u, ucp_ep_h ep, unsigned id, ucx_side_t *m)
{
    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                        UCP_OP_ATTR_FIELD_FLAGS,
        .flags = UCP_AM_SEND_FLAG_EAGER,
        .cb.send = side_done,
        .user_data = m,
    };
    m->u = u;
    LIST_INSERT_HEAD(&u->sides, m, link);
    u->in_ucx++;
    ucs_status_ptr_t r = ucp_am_send_nbx(ep, id, NULL, 0, m->buf, m->len, &p);
    u->in_ucx--;
    if (UCS_PTR_IS_PTR(r)) {
        m->req = r;
    } else {
        if (UCS_PTR_IS_ERR(r))
            nxlt_log(u->ctx, NXL_LOG_WARN, "UCX: a message of the transport (id 0x%x) could not "
                     "be sent: %s", id, ucs_status_string(UCS_PTR_STATUS(r)));
        LIST_REMOVE(m, link);
        free(m);
    }
    kick(u);
}

static void op_report(ucx_op_t *o, ucs_status_t st);
static void op_free(ucx_op_t *o);

static void ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    ucx_conn_t *c = arg;
    if (c->u->in_ucx) {
        if (!c->fail_deferred) {
            c->fail_deferred = true;
            c->why = status;
        }
        kick(c->u);
        return;
    }
    conn_fail(c, status, false);
}

static bool pidfd_exited(int fd);

static void conn_fail(ucx_conn_t *c, ucs_status_t status, bool stalled)
{
    if (c->failed)
        return;
    if (c->peer_destroyed || (c->pidfd >= 0 && pidfd_exited(c->pidfd))) {
        /* a peer on this host: say what happened to it */
        char why[300];
        if (c->peer_destroyed)
            snprintf(why, sizeof(why), "UCX: transfer to agent '%s' failed: that agent, of this "
                     "process, was destroyed", c->name);
        else
            snprintf(why, sizeof(why), "UCX: transfer to agent '%s' failed: its process (pid %d) "
                     "exited (reload its metadata once it is back)", c->name, (int)c->pid);
        ucx_op_t *o;
        LIST_FOREACH(o, &c->u->ops, link)
        if (o->conn == c && o->op && !o->why)
            o->why = strdup(why);
    }
    c->failed = true;
    c->stalled = stalled;
    c->why = status;
    if (stalled)
        nxlt_log(c->u->ctx, NXL_LOG_WARN, "UCX: no transfer to agent '%s' completed for %llu ms; "
                 "declaring the connection lost", c->name,
                 (unsigned long long)(c->u->stall_us / 1000));
    else
        nxlt_log(c->u->ctx, NXL_LOG_WARN, "UCX: connection to agent '%s' failed: %s", c->name,
                 ucs_status_string(status));
    /* UCX 1.13 does not always complete a flush pending on a failed
     * endpoint: report every op on it now; each is freed when (if) UCX
     * calls back, or when the transport is destroyed. */
    ucx_op_t *o, *next;
    LIST_FOREACH(o, &c->u->ops, link)
    if (o->conn == c)
        op_report(o, status);
    if (stalled && c->ep) {
        /* stop UCX retrying: its requests on the endpoint end as canceled */
        ep_close(c->u, c->ep, true);
        c->ep = NULL;
        c->forced = true;
    }
    /* AM_WRITEs sent, their acknowledgement not come: UCX is done with them
     * (c itself stays: the caller goes on using it; one left is freed with
     * the transport) */
    for (o = LIST_FIRST(&c->u->ops); o; o = next) {
        next = LIST_NEXT(o, link);
        if (o->conn == c && o->amw && o->amw_sent && !o->amw_acked && c->refs > 1)
            op_free(o);
    }
}

/* ---- cross-memory attach: who we are, and may we reach a peer
 *
 * A peer advertises its boot id, pid namespace, pid and the address and
 * value of a cookie of its own. Same boot id and pid namespace: its pid
 * means the same process here. A pidfd on it, then a process_vm_readv of
 * the cookie, prove that the pid is that process (a recycled pid would
 * not hold the cookie there) and that the kernel lets us attach. */

static int pidfd_open_(pid_t pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    (void)pid;
    errno = ENOSYS;
    return -1;
#endif
}

/* has the process behind the pidfd exited? */
static bool pidfd_exited(int fd)
{
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    return poll(&pf, 1, 0) > 0;
}

static bool cma_identity(ucx_ci_cma_t *me, char *why, size_t cap)
{
    char b[64] = "";
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, b, sizeof(b) - 1) : -1;
    if (fd >= 0)
        close(fd);
    size_t k = 0;
    for (ssize_t i = 0; i < n && k < 32; i++) {
        char ch = b[i];
        int v = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
        if (v < 0)
            continue;
        me->boot[k / 2] = (unsigned char)(k % 2 ? me->boot[k / 2] | v : v << 4);
        k++;
    }
    if (k != 32) {
        snprintf(why, cap, "/proc/sys/kernel/random/boot_id unreadable");
        return false;
    }
    struct stat st;
    if (stat("/proc/self/ns/pid", &st) != 0) {
        snprintf(why, cap, "/proc/self/ns/pid: %s", strerror(errno));
        return false;
    }
    me->ns_dev = (uint64_t)st.st_dev;
    me->ns_ino = (uint64_t)st.st_ino;
    me->pid = (uint32_t)getpid();
    int pf = pidfd_open_(getpid());
    if (pf < 0) {
        snprintf(why, cap, "pidfd_open: %s", strerror(errno));
        return false;
    }
    close(pf);
    return true;
}

/* Yama's ptrace_scope, in words, for the sentence of a refusal */
static const char *ptrace_scope_words(char *buf, size_t cap)
{
    int fd = open("/proc/sys/kernel/yama/ptrace_scope", O_RDONLY | O_CLOEXEC);
    char b[8] = "";
    ssize_t n = fd >= 0 ? read(fd, b, sizeof(b) - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return "Yama is not active here (no /proc/sys/kernel/yama/ptrace_scope)";
    switch (b[0]) {
    case '0':
        return "/proc/sys/kernel/yama/ptrace_scope is 0 (the classic rules)";
    case '1':
        return "/proc/sys/kernel/yama/ptrace_scope is 1: only a process's ancestors may attach, "
               "or a process it named with prctl(PR_SET_PTRACER, ...)";
    case '2':
        return "/proc/sys/kernel/yama/ptrace_scope is 2: only with CAP_SYS_PTRACE";
    default:
        snprintf(buf, cap, "/proc/sys/kernel/yama/ptrace_scope is %c: attaching is off", b[0]);
        return buf;
    }
}

/* The kernel refused to let us reach the peer: its transfers go through
 * UCX from now on. Said once as a warning, then as info. */
static void cma_refused(ucx_t *u, ucx_conn_t *c, int err, const char *when)
{
    char sb[96];
    nxlt_log(u->ctx, u->cma_refusal_said ? NXL_LOG_INFO : NXL_LOG_WARN,
             "UCX: cross-memory attach to agent '%s' (pid %d, this host) refused %s: "
             "process_vm_readv/writev: %s; its transfers go through UCX instead. The kernel "
             "allows it to a process of the same uid that stayed dumpable, or with "
             "CAP_SYS_PTRACE; %s. Parameter cma=off stops trying",
             c->name, (int)c->pid, when, strerror(err), ptrace_scope_words(sb, sizeof(sb)));
    u->cma_refusal_said = true;
    cma_close(c);
    c->cma = CMA_REFUSED;
}

static void on_pid_exit(evutil_socket_t fd, short what, void *arg)
{
    ucx_conn_t *c = arg;
    nxlt_log(c->u->ctx, NXL_LOG_INFO, "UCX: the process of agent '%s' (pid %d) exited",
             c->name, (int)c->pid);
    if (!c->failed)
        conn_fail(c, UCS_ERR_CONNECTION_RESET, false); /* says the process exited */
    cma_close(c);
}

static void cma_connect(ucx_t *u, ucx_conn_t *c, const ucx_ci_cma_t *p)
{
    if (memcmp(p->boot, u->cma_me.boot, 16) || p->ns_dev != u->cma_me.ns_dev ||
        p->ns_ino != u->cma_me.ns_ino) {
        nxlt_log(u->ctx, NXL_LOG_DEBUG, "UCX: agent '%s' is on another host or in another pid "
                 "namespace: no cross-memory attach", c->name);
        return;
    }
    c->pid = (pid_t)p->pid;
    if (c->pid <= 0 || c->pid == (pid_t)u->cma_me.pid)
        return; /* this process's own agents are live ones (c->local): a stale info */
    int fd = pidfd_open_(c->pid);
    if (fd < 0) {
        nxlt_log(u->ctx, NXL_LOG_INFO, "UCX: agent '%s': pidfd_open(%d): %s; no cross-memory "
                 "attach (the process is gone?)", c->name, (int)c->pid, strerror(errno));
        return;
    }
    /* the magic and the random value side by side: what only an nxl
     * agent's own memory holds, at an address only it announced */
    uint64_t v[2] = {0, 0};
    struct iovec l = {v, sizeof(v)}, r = {(void *)(uintptr_t)p->cookie_addr, sizeof(v)};
    ssize_t k = process_vm_readv(c->pid, &l, 1, &r, 1, 0);
    int err = errno;
    if (k < 0 && (err == EPERM || err == EACCES)) {
        close(fd);
        cma_refused(u, c, err, "at connection");
        return;
    }
    if (k != (ssize_t)sizeof(v) || v[0] != CMA_MAGIC || v[1] != p->cookie || pidfd_exited(fd)) {
        close(fd);
        nxlt_log(u->ctx, NXL_LOG_WARN, "UCX: pid %d on this host is not agent '%s' any more "
                 "(%s): no cross-memory attach; its metadata is stale?", (int)c->pid, c->name,
                 k < 0 ? strerror(err) : "its cookie is not there");
        return;
    }
    c->pidfd = fd;
    c->cma = CMA_READY;
    c->ev_pid = event_new(nxlt_base(u->ctx), fd, EV_READ, on_pid_exit, c);
    if (!c->ev_pid || event_add(c->ev_pid, NULL)) {
        cma_close(c); /* not watched: not used */
        return;
    }
    nxlt_log(u->ctx, NXL_LOG_DEBUG, "UCX: agent '%s' (pid %d) is reached by cross-memory attach",
             c->name, (int)c->pid);
}

static nxl_status_t load_conn(void *state, const char *agent, const void *info, size_t len,
                              void **out)
{
    ucx_t *u = state;
    unsigned flags;
    ucx_ci_cma_t pc;
    if (ucx_ci_parse(info, len, &flags, &pc, &info, &len) != 0) {
        nxlt_error(u->ctx, "UCX: the connection info of agent '%s' is not this transport's "
                   "(%zu bytes, no nxl UCX header): a different nxl version?", agent, len);
        return NXL_ERR_MISMATCH;
    }
    /* UCX unpacks its worker address without a length either: it gets a
     * copy followed by UCX_ADDR_PAD bytes of 0xff, where an address cut
     * short reads "no more devices" (0xff is UCX's null resource, and every
     * length, flag and "last" bit set) before it leaves the copy. A forged
     * address is still UCX's to parse (README "Trust"). */
    unsigned char *addr = malloc(len + UCX_ADDR_PAD);
    ucx_conn_t *c = addr ? calloc(1, sizeof(*c)) : NULL;
    if (!c || !(c->name = strdup(agent))) {
        free(c);
        free(addr);
        return NXL_ERR_UNKNOWN;
    }
    memcpy(addr, info, len);
    memset(addr + len, 0xff, UCX_ADDR_PAD);
    /* a peer that copies them but sends no acknowledgement (an older nxl)
     * would leave the WRITE complete before its bytes are there: not those */
    c->am_write = (flags & CI_AM_WRITE) && (flags & CI_AM_ACK);
    c->u = u;
    c->refs = 1;
    c->pidfd = -1;
    ucp_ep_params_t ep = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .address = (const ucp_address_t *)addr,
        .err_mode = UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = {.cb = ep_error, .arg = c},
    };
    u->in_ucx++;
    ucs_status_t st = ucp_ep_create(u->w, &ep, &c->ep);
    u->in_ucx--;
    free(addr); /* UCX keeps nothing of it past ucp_ep_create */
    if (st != UCS_OK) {
        nxlt_error(u->ctx, "UCX: ucp_ep_create to agent '%s' failed: %s (no UCX transport of "
                   "this agent reaches it: check UCX_TLS / UCX_NET_DEVICES on both sides)",
                   agent, ucs_status_string(st));
        free(c->name);
        free(c);
        return NXL_ERR_BACKEND;
    }
    c->local = live_is_local(info, len);
    if (c->local && (c->peer_addr = malloc(len))) {
        memcpy(c->peer_addr, info, len);
        c->peer_addr_len = len;
    }
    LIST_INSERT_HEAD(&u->conns, c, link);
    /* not to another agent of this process: the process outlives the
     * agent, and its memory stays mapped after the agent is gone */
    if ((flags & CI_CMA) && u->cma_mode != CMA_OFF && u->cma_here && !c->local)
        cma_connect(u, c, &pc);
    kick(u);
    *out = c;
    return NXL_SUCCESS;
}

static void unload_conn(void *state, void *conn)
{
    ucx_conn_t *c = conn;
    c->unloaded = true;
    cma_close(c);
    /* a peer known dead, or another agent of this process (which is not
     * progressed while this one tears down), would never answer a flushing
     * close: those are closed at once */
    if (c->ep) {
        c->forced = c->failed || c->fail_deferred || c->local;
        ep_close(c->u, c->ep, c->forced);
    }
    c->ep = NULL;
    conn_put(c);
}

/* ------------------------------------------------------------- memory */

/* VRAM (only in a build against a UCX with CUDA, NXL_UCX_CUDA): mapped
 * with its memory type, so that UCX's CUDA transports serve it to peers;
 * where this UCX cannot (no CUDA memory type at run time) it is declined
 * (NXL_ERR_NOT_SUPPORTED), and the engine leaves it to the other
 * transports. VRAM is never an AM_WRITE target (written with memcpy). */
static nxl_status_t reg(void *state, nxl_mem_t type, const nxl_desc_t *d, void **out)
{
    ucx_t *u = state;
    *out = NULL;
    if (type == NXL_VRAM && !u->cuda) {
        nxlt_error(u->ctx, "UCX: cannot register VRAM 0x%lx+%zu: this UCX has no CUDA memory "
                   "support here (ucp_context_query); the CUDA transport serves VRAM",
                   (unsigned long)d->addr, d->len);
        return NXL_ERR_NOT_SUPPORTED;
    }
    ucx_md_t *m = calloc(1, sizeof(*m));
    if (!m)
        return NXL_ERR_UNKNOWN;
    ucp_mem_map_params_t mp = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
        .address = (void *)d->addr,
        .length = d->len,
    };
    if (type == NXL_VRAM) {
        mp.field_mask |= UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
        mp.memory_type = UCS_MEMORY_TYPE_CUDA;
        m->vram = true;
    }
    ucs_status_t st = ucp_mem_map(u->ucp, &mp, &m->memh);
    if (st != UCS_OK) {
        nxlt_error(u->ctx, "UCX: ucp_mem_map of %s 0x%lx+%zu failed: %s (is the range mapped? "
                   "is the locked-memory limit, ulimit -l, large enough for RDMA devices?)",
                   nxl_mem_name(type), (unsigned long)d->addr, d->len, ucs_status_string(st));
        free(m);
        return NXL_ERR_BACKEND;
    }
    m->addr = (void *)d->addr;
    m->len = d->len;
    if (!m->vram && regs_add(u, m) != 0) {
        ucp_mem_unmap(u->ucp, m->memh);
        free(m);
        return NXL_ERR_UNKNOWN;
    }
    *out = m;
    return NXL_SUCCESS;
}

static void dereg(void *state, void *md)
{
    ucx_t *u = state;
    ucx_md_t *m = md;
    if (!m)
        return;
    if (!m->vram)
        regs_remove(u, m);
    ucp_mem_unmap(u->ucp, m->memh);
    free(m);
}

static void put_u64(unsigned char *b, uint64_t v)
{
    for (int k = 0; k < 8; k++)
        b[k] = (unsigned char)(v >> (56 - 8 * k));
}

static uint64_t get_u64(const unsigned char *b)
{
    uint64_t v = 0;
    for (int k = 0; k < 8; k++)
        v = v << 8 | b[k];
    return v;
}

/* The application gave the region up. UCX does not check the address of a
 * put or get at the target (on shared memory and TCP, into malloc'd
 * memory, its software RMA copies wherever the initiator says), so the
 * peers this agent is connected to are told, ahead of anything this agent
 * sends them afterwards on the same endpoint:
 *   [u16 name length][name][u8 type][u64 dev][u64 addr][u64 len]
 * Small WRITEs into it are dropped here from now on. */
static void mem_revoke(void *state, nxl_mem_t type, const nxl_desc_t *d, void *md)
{
    ucx_t *u = state;
    regs_remove(u, md);
    const char *me = nxl_agent_name(nxlt_agent(u->ctx));
    size_t nl = strlen(me), len = 2 + nl + 1 + 24;
    ucx_conn_t *c;
    LIST_FOREACH(c, &u->conns, link)
    {
        if (!c->ep || c->failed || c->fail_deferred || c->unloaded)
            continue;
        ucx_side_t *m = malloc(sizeof(*m) + len);
        if (!m) {
            nxlt_log(u->ctx, NXL_LOG_ERROR, "UCX: out of memory: agent '%s' was not told of a "
                     "deregistered region", c->name);
            continue;
        }
        unsigned char *w = m->buf;
        *w++ = (unsigned char)(nl >> 8), *w++ = (unsigned char)nl;
        memcpy(w, me, nl), w += nl;
        *w++ = (unsigned char)type;
        put_u64(w, d->dev_id), put_u64(w + 8, d->addr), put_u64(w + 16, d->len);
        m->len = len;
        side_send(u, c->ep, NXL_UCX_AM_REVOKE, m);
    }
}

static ucs_status_t am_recv_revoke(void *arg, const void *header, size_t hlen, void *data,
                                   size_t len, const ucp_am_recv_param_t *param)
{
    ucx_t *u = arg;
    const unsigned char *b = data;
    size_t nl = len >= 2 ? (size_t)b[0] << 8 | b[1] : 0;
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) || nl == 0 || nl >= 256 ||
        len != 2 + nl + 1 + 24) {
        nxlt_log(u->ctx, NXL_LOG_WARN, "UCX: malformed region revocation of %zu bytes dropped",
                 len);
        return UCS_OK;
    }
    char from[256];
    memcpy(from, b + 2, nl);
    from[nl] = 0;
    b += 2 + nl;
    nxlt_remote_revoked(u->ctx, from, (nxl_mem_t)b[0], get_u64(b + 1), get_u64(b + 9),
                        get_u64(b + 17));
    u->hit = true;
    return UCS_OK;
}

static nxl_status_t mem_alloc(void *state, nxl_mem_t type, size_t len, uint64_t dev, void **ptr,
                              void **md)
{
    ucx_t *u = state;
    if (type != NXL_DRAM) {
        /* VRAM is allocated by the CUDA transport and registered here */
        nxlt_error(u->ctx, "UCX: allocates DRAM only, not %s (the CUDA transport allocates "
                   "VRAM)", nxl_mem_name(type));
        return NXL_ERR_NOT_SUPPORTED;
    }
    ucx_md_t *m = calloc(1, sizeof(*m));
    if (!m)
        return NXL_ERR_UNKNOWN;
    ucp_mem_map_params_t mp = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_FLAGS,
        .address = NULL,
        .length = len,
        .flags = UCP_MEM_MAP_ALLOCATE,
    };
    ucs_status_t st = ucp_mem_map(u->ucp, &mp, &m->memh);
    ucp_mem_attr_t attr = {.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH};
    if (st == UCS_OK)
        st = ucp_mem_query(m->memh, &attr);
    if (st != UCS_OK) {
        nxlt_error(u->ctx, "UCX: ucp_mem_map(ALLOCATE, %zu bytes) failed: %s", len,
                   ucs_status_string(st));
        free(m);
        return NXL_ERR_BACKEND;
    }
    m->addr = attr.address;
    m->len = len;
    if (regs_add(u, m) != 0) {
        ucp_mem_unmap(u->ucp, m->memh);
        free(m);
        return NXL_ERR_UNKNOWN;
    }
    *ptr = attr.address;
    *md = m;
    return NXL_SUCCESS;
}

static void mem_free(void *state, void *ptr, void *md)
{
    dereg(state, md); /* unmapping memory UCX allocated frees it */
}

static nxl_status_t pack_key(void *state, void *md, void **buf, size_t *len)
{
    ucx_t *u = state;
    ucx_md_t *m = md;
    void *rb;
    size_t rl;
    ucs_status_t st = ucp_rkey_pack(u->ucp, m->memh, &rb, &rl);
    if (st != UCS_OK) {
        nxlt_error(u->ctx, "UCX: ucp_rkey_pack failed: %s", ucs_status_string(st));
        return NXL_ERR_BACKEND;
    }
    *buf = malloc(rl);
    if (*buf)
        memcpy(*buf, rb, rl);
    *len = rl;
    ucp_rkey_buffer_release(rb);
    return *buf ? NXL_SUCCESS : NXL_ERR_UNKNOWN;
}

static nxl_status_t load_key(void *state, void *conn, const void *buf, size_t len, void **rkey)
{
    ucx_t *u = state;
    ucx_conn_t *c = conn;
    /* UCX takes no length: check what it will read, and give it a padded
     * copy (wire.h) */
    if (!ucx_rkey_need(buf, len)) {
        nxlt_error(u->ctx, "UCX: a memory key of agent '%s' is malformed: %zu bytes, fewer "
                   "than the UCX key they begin says it holds (cut short or corrupt "
                   "metadata)", c->name, len);
        return NXL_ERR_MISMATCH;
    }
    ucx_rkey_t *k = calloc(1, sizeof(*k));
    unsigned char *copy = k ? malloc(len + UCX_RKEY_PAD) : NULL;
    if (!copy) {
        free(k);
        return NXL_ERR_UNKNOWN;
    }
    memcpy(copy, buf, len);
    memset(copy + len, 0xff, UCX_RKEY_PAD);
    ucs_status_t st = ucp_ep_rkey_unpack(c->ep, copy, &k->rk);
    free(copy);
    if (st != UCS_OK) {
        nxlt_error(u->ctx, "UCX: ucp_ep_rkey_unpack of a key of agent '%s' failed: %s", c->name,
                   ucs_status_string(st));
        free(k);
        return NXL_ERR_BACKEND;
    }
    k->mapped = -1;
    *rkey = k;
    return NXL_SUCCESS;
}

static void unload_key(void *state, void *rkey)
{
    ucx_rkey_t *k = rkey;
    ucp_rkey_destroy(k->rk);
    free(k);
}

static nxl_status_t conn_info(void *state, void **buf, size_t *len)
{
    ucx_t *u = state;
    unsigned flags = CI_AM_WRITE | CI_AM_ACK | (u->cma_here ? CI_CMA : 0);
    unsigned char *b = malloc(ucx_ci_hdr(flags) + u->addr_len);
    if (!b)
        return NXL_ERR_UNKNOWN;
    ucx_ci_cma_t me = u->cma_me;
    me.cookie_addr = (uintptr_t)u->cma_cookie;
    me.cookie = u->cma_cookie[1];
    ucx_ci_pack(b, flags, &me, u->addr, u->addr_len);
    *buf = b;
    *len = ucx_ci_hdr(flags) + u->addr_len;
    return NXL_SUCCESS;
}

/* ---------------------------------------------------------- operations */

static nxl_status_t map_status(ucx_conn_t *c, ucs_status_t st)
{
    if (st == UCS_OK)
        return NXL_SUCCESS;
    if (c->failed || c->unloaded || st == UCS_ERR_CONNECTION_RESET ||
        st == UCS_ERR_ENDPOINT_TIMEOUT || st == UCS_ERR_UNREACHABLE || st == UCS_ERR_CANCELED)
        return NXL_ERR_REMOTE_DISCONNECT;
    return NXL_ERR_BACKEND;
}

static void op_done(ucx_op_t *o, nxl_status_t ns, const char *why)
{
    if (!o->op)
        return;
    nxlt_op_t *op = o->op;
    o->op = NULL;
    o->u->inflight--;
    o->conn->inflight--;
    o->conn->progress_us = coarse_us();
    o->u->hit = true;
    nxlt_op_done(op, ns, why);
}

/* Tells the engine (once); the op itself lives on until UCX is done with it. */
static void op_report(ucx_op_t *o, ucs_status_t st)
{
    if (!o->op)
        return;
    if (st != UCS_OK && o->st == UCS_OK)
        o->st = st;
    char why[512];
    nxl_status_t ns = map_status(o->conn, o->st);
    if (ns != NXL_SUCCESS)
        snprintf(why, sizeof(why), "UCX: transfer to agent '%s' failed: %s%s", o->conn->name,
                 ucs_status_string(o->conn->failed ? o->conn->why : o->st),
                 ns == NXL_ERR_REMOTE_DISCONNECT
                     ? " (the peer is gone or unreachable; reload its metadata once it is back)"
                     : "");
    if (ns != NXL_SUCCESS && o->conn->stalled)
        snprintf(why, sizeof(why), "UCX: no transfer to agent '%s' completed within %llu ms "
                 "(link down, or the peer hung); the connection is given up — reload its "
                 "metadata once it is reachable", o->conn->name,
                 (unsigned long long)(o->u->stall_us / 1000));
    else if (ns != NXL_SUCCESS && o->why)
        snprintf(why, sizeof(why), "%s", o->why);
    op_done(o, ns, ns == NXL_SUCCESS ? NULL : why);
}

static void op_free(ucx_op_t *o)
{
    ucx_t *u = o->u;
    if (o->queued)
        TAILQ_REMOVE(&u->cma_q, o, cq);
    if (o->amw && !o->amw_acked)
        LIST_REMOVE(o, ack_link);
    free(o->why);
    LIST_REMOVE(o, link);
    conn_put(o->conn);
    if (u->nspare_ops >= OP_SPARES) {
        free(o->iov);
        free(o->buf);
        free(o);
        return;
    }
    if (o->buf_cap > OP_SPARE_BUF) {
        free(o->buf);
        o->buf = NULL;
        o->buf_cap = 0;
    }
    if (o->iov_cap > OP_SPARE_IOV) {
        free(o->iov);
        o->iov = NULL;
        o->iov_cap = 0;
    }
    o->next_free = u->spare_ops;
    u->spare_ops = o;
    u->nspare_ops++;
}

/* a spare op, cleared but for its buffers, or a new one */
static ucx_op_t *op_get(ucx_t *u)
{
    ucx_op_t *o = u->spare_ops;
    if (!o)
        return calloc(1, sizeof(*o));
    u->spare_ops = o->next_free;
    u->nspare_ops--;
    ucx_op_t keep = {.buf = o->buf, .buf_cap = o->buf_cap, .iov = o->iov, .iov_cap = o->iov_cap};
    *o = keep;
    return o;
}

/* o's message buffer, of at least len bytes; NULL when out of memory */
static unsigned char *op_buf(ucx_op_t *o, size_t len)
{
    if (o->buf_cap < len) {
        unsigned char *b = malloc(len);
        if (!b)
            return NULL;
        free(o->buf);
        o->buf = b;
        o->buf_cap = len;
    }
    return o->buf;
}

/* UCX finished with the op: report it if nobody did, then free it. */
static void op_finish(ucx_op_t *o, ucs_status_t st)
{
    op_report(o, st);
    op_free(o);
}

static void am_done(void *req, ucs_status_t st, void *arg)
{
    op_finish(arg, st);
    ucp_request_free(req);
}

static void send_notif(ucx_op_t *o)
{
    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                        UCP_OP_ATTR_FIELD_FLAGS,
        .flags = UCP_AM_SEND_FLAG_EAGER,
        .cb.send = am_done,
        .user_data = o,
    };
    if (!o->conn->ep) {
        op_finish(o, UCS_ERR_CANCELED); /* the connection was given up meanwhile */
        return;
    }
    ucx_t *u = o->u;
    ucs_status_ptr_t r =
        ucp_am_send_nbx(o->conn->ep, NXL_UCX_AM_NOTIF, NULL, 0, o->notif, o->notif_len, &p);
    if (!UCS_PTR_IS_PTR(r))
        op_finish(o, UCS_PTR_STATUS(r));
    else
        kick(u); /* UCX holds it: progress completes it */
}

static void flush_done(void *req, ucs_status_t st, void *arg)
{
    ucx_op_t *o = arg;
    if (req)
        ucp_request_free(req);
    /* canceled (NXLT_CAP_CANCEL_WAITS): the flush saw every put and get of
     * it through, so its buffers are free now; its notification stays */
    if (st != UCS_OK || o->st != UCS_OK || !o->notif || (o->op && nxlt_op_canceled(o->op)))
        op_finish(o, st);
    else
        send_notif(o);
}

static ucx_op_t *op_new(ucx_t *u, nxlt_op_t *op, ucx_conn_t *c, const char *me, const void *msg,
                        size_t len, bool with_notif)
{
    ucx_op_t *o = op_get(u);
    if (!o)
        return NULL;
    o->u = u;
    if (with_notif) {
        size_t nl = strlen(me);
        o->notif_len = 2 + nl + len;
        unsigned char *b = op_buf(o, o->notif_len);
        if (!b) {
            free(o->buf);
            free(o->iov);
            free(o);
            return NULL;
        }
        o->notif = b;
        b[0] = (unsigned char)(nl >> 8);
        b[1] = (unsigned char)nl;
        memcpy(b + 2, me, nl);
        if (len)
            memcpy(b + 2 + nl, msg, len);
    }
    o->u = u;
    o->op = op;
    o->conn = c;
    c->refs++;
    if (c->inflight++ == 0)
        c->progress_us = coarse_us();
    LIST_INSERT_HEAD(&u->ops, o, link);
    op_started(u);
    return o;
}

static nxl_status_t check_conn(ucx_t *u, ucx_conn_t *c, const char *call)
{
    local_gone(u);
    if (!c->failed && !c->fail_deferred && c->ep)
        return NXL_SUCCESS;
    nxlt_error(u->ctx, "UCX: %s: the connection to agent '%s' failed earlier (%s); reload its "
               "metadata once it is back", call, c->name,
               c->peer_destroyed                  ? "that agent, of this process, was destroyed"
               : c->failed || c->fail_deferred ? ucs_status_string(c->why)
                                               : "closed");
    return NXL_ERR_REMOTE_DISCONNECT;
}

/* ---- small WRITEs with a notification: one active message
 *
 * [u16 name length][name][u32 notification length][notification]
 * [u32 n][n x (u64 remote address, u32 length)][the n elements' bytes]
 *
 * The target copies each element into its memory — only into regions it
 * registered with this transport and has not deregistered, checked like an
 * rkey would be, every element before any byte is written — and then
 * delivers the notification: one message instead of puts, a flush and a
 * notification. The message carries an 8-byte header, the op's number, and
 * UCX's reply flag; once the bytes are in place the target answers on the
 * message's reply endpoint with an acknowledgement:
 *
 * [the number (8)][u8 0: copied, 1: dropped][why dropped, text]
 *
 * and the op completes when both the send and its acknowledgement did: a
 * WRITE completes only when its bytes are in the target's memory (the
 * contract), not when the message left. A message the target drops
 * (malformed, or an element outside its regions: deregistered meanwhile)
 * is logged there, its notification never delivered, and the initiator's
 * transfer fails with the reason. UCX resolves the reply endpoint from the
 * sender's endpoint id and drops the message unseen when that endpoint is
 * no longer valid there: where the receiver replaced the sender's metadata
 * (closing the endpoint the sender's was paired with; software puts, which
 * take any endpoint, still get through), and the transfer fails by the
 * stall timeout:
 * nxlbench, whose initiator re-fetches its target's metadata after setup,
 * had every pong so dropped. Hence off by default (am_write_max 0). Only
 * peers whose connection info says they acknowledge (CI_AM_ACK) are sent
 * such messages. */

/* one AM_WRITE's number, as its header carries it */
static void amw_number(unsigned char *b, uint64_t v)
{
    for (int k = 0; k < 8; k++)
        b[k] = (unsigned char)(v >> (56 - 8 * k));
}

/* UCX sent it, or the target acknowledged it: done when both happened */
static void amw_step(ucx_op_t *o, ucs_status_t st)
{
    if (st != UCS_OK) {
        op_finish(o, st);
        return;
    }
    o->amw_sent = true;
    /* reported already (its connection failed): nothing more to wait for */
    if (o->amw_acked || !o->op)
        op_finish(o, o->amw_st);
}

static void amw_sent(void *req, ucs_status_t st, void *arg)
{
    ucp_request_free(req);
    amw_step(arg, st);
}

static ucs_status_t am_recv_ack(void *arg, const void *header, size_t hlen, void *data,
                                size_t len, const ucp_am_recv_param_t *param)
{
    ucx_t *u = arg;
    const unsigned char *b = data;
    if (len < 9 || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
        nxlt_log(u->ctx, NXL_LOG_WARN, "UCX: malformed WRITE acknowledgement of %zu bytes "
                 "dropped", len);
        return UCS_OK;
    }
    ucx_op_t *o;
    LIST_FOREACH(o, &u->acks, ack_link)
    if (!memcmp(o->amw_hdr, b, 8))
        break;
    if (!o)
        return UCS_OK; /* its op was reported and freed: the connection failed */
    LIST_REMOVE(o, ack_link);
    o->amw_acked = true;
    u->hit = true;
    if (b[8]) {
        char why[400];
        snprintf(why, sizeof(why), "UCX: WRITE to agent '%s' failed: the target dropped it "
                 "(nothing written, its notification not delivered): %.*s", o->conn->name,
                 (int)(len - 9 < 200 ? len - 9 : 200), (const char *)b + 9);
        free(o->why);
        o->why = strdup(why);
        o->amw_st = UCS_ERR_INVALID_ADDR;
    }
    if (o->amw_sent)
        op_finish(o, o->amw_st);
    return UCS_OK;
}

/* the target's side: acknowledges an AM_WRITE that asks for it (its
 * number in the header, a reply endpoint), copied or dropped (bad) */
static void amw_ack(ucx_t *u, const void *header, size_t hlen, const ucp_am_recv_param_t *param,
                    const char *bad)
{
    if (hlen != 8 || !(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) || !param->reply_ep)
        return; /* not asked */
    size_t bl = bad ? strlen(bad) : 0;
    ucx_side_t *m = malloc(sizeof(*m) + 9 + bl);
    if (!m) {
        nxlt_log(u->ctx, NXL_LOG_ERROR, "UCX: out of memory: a WRITE's acknowledgement was not "
                 "sent (its initiator fails it by its stall timeout)");
        return;
    }
    m->len = 9 + bl;
    memcpy(m->buf, header, 8);
    m->buf[8] = bad != NULL;
    if (bl)
        memcpy(m->buf + 9, bad, bl);
    side_send(u, param->reply_ep, NXL_UCX_AM_WRITE_ACK, m);
}

static void put_u32(unsigned char *b, uint32_t v)
{
    b[0] = (unsigned char)(v >> 24), b[1] = (unsigned char)(v >> 16);
    b[2] = (unsigned char)(v >> 8), b[3] = (unsigned char)v;
}

static uint32_t get_u32(const unsigned char *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* 1: sent (or failed and reported); 0: not for this path (too large); -1: no memory */
static int post_am_write(ucx_t *u, nxlt_op_t *op, ucx_conn_t *c, const nxlt_xfer_t *x)
{
    const char *me = nxl_agent_name(nxlt_agent(u->ctx));
    size_t nl = strlen(me), data = 0;
    for (size_t i = 0; i < x->n; i++) {
        data += x->iov[i].len;
        if (data > u->am_write_max || x->iov[i].len > UINT32_MAX)
            return 0;
    }
    size_t total = 2 + nl + 4 + x->notif_len + 4 + x->n * 12 + data;
    ucx_op_t *o = op_new(u, op, c, me, NULL, 0, false);
    unsigned char *b = o ? op_buf(o, total) : NULL;
    if (!b) {
        if (o) {
            o->op = NULL;
            u->inflight--;
            c->inflight--;
            op_free(o);
        }
        return -1;
    }
    unsigned char *w = b;
    *w++ = (unsigned char)(nl >> 8), *w++ = (unsigned char)nl;
    memcpy(w, me, nl), w += nl;
    put_u32(w, (uint32_t)x->notif_len), w += 4;
    memcpy(w, x->notif, x->notif_len), w += x->notif_len;
    put_u32(w, (uint32_t)x->n), w += 4;
    for (size_t i = 0; i < x->n; i++) {
        uint64_t ra = x->iov[i].raddr;
        for (int k = 0; k < 8; k++)
            *w++ = (unsigned char)(ra >> (56 - 8 * k));
        put_u32(w, (uint32_t)x->iov[i].len), w += 4;
    }
    for (size_t i = 0; i < x->n; i++)
        memcpy(w, x->iov[i].laddr, x->iov[i].len), w += x->iov[i].len;
    o->notif = b; /* kept with the op */
    o->notif_len = total;
    o->amw = true;
    o->amw_st = UCS_OK;
    amw_number(o->amw_hdr, ++u->am_seq);
    LIST_INSERT_HEAD(&u->acks, o, ack_link);
    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                        UCP_OP_ATTR_FIELD_FLAGS,
        .flags = UCP_AM_SEND_FLAG_EAGER | UCP_AM_SEND_FLAG_REPLY,
        .cb.send = amw_sent,
        .user_data = o,
    };
    u->in_ucx++;
    ucs_status_ptr_t r =
        ucp_am_send_nbx(c->ep, NXL_UCX_AM_WRITE, o->amw_hdr, sizeof(o->amw_hdr), b, total, &p);
    if (!UCS_PTR_IS_PTR(r))
        amw_step(o, UCS_PTR_STATUS(r)); /* sent at once: its acknowledgement completes it */
    kick(u);
    u->in_ucx--;
    return 1;
}

static ucs_status_t am_recv_write(void *arg, const void *header, size_t hlen, void *data,
                                  size_t len, const ucp_am_recv_param_t *param)
{
    ucx_t *u = arg;
    const unsigned char *b = data, *end = b + len;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
        nxlt_log(u->ctx, NXL_LOG_ERROR, "UCX: a small WRITE arrived by rendezvous; dropped");
        amw_ack(u, header, hlen, param, "it arrived by rendezvous");
        return UCS_OK;
    }
    char from[256] = "?";
    const char *bad = NULL;
    size_t nl = len >= 2 ? (size_t)b[0] << 8 | b[1] : 0;
    if (len < 2 || nl == 0 || nl >= 256 || (size_t)(end - b) < 2 + nl + 4) {
        bad = "malformed header";
        goto drop;
    }
    memcpy(from, b + 2, nl);
    from[nl] = 0;
    b += 2 + nl;
    uint32_t ml = get_u32(b);
    b += 4;
    if ((size_t)(end - b) < (size_t)ml + 4) {
        bad = "notification longer than the message";
        goto drop;
    }
    const unsigned char *msg = b;
    b += ml;
    uint32_t n = get_u32(b);
    b += 4;
    if ((size_t)(end - b) / 12 < n) {
        bad = "more elements than the message holds";
        goto drop;
    }
    const unsigned char *el = b, *payload = b + (size_t)n * 12;
    /* every element checked before any byte is written */
    size_t at = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t ra = 0;
        for (int k = 0; k < 8; k++)
            ra = ra << 8 | el[12 * i + k];
        uint32_t l = get_u32(el + 12 * i + 8);
        if ((size_t)(end - payload) - at < l) {
            bad = "elements longer than the message";
            goto drop;
        }
        if (!regs_hold(u, ra, l)) {
            bad = "an element outside every region registered here (deregistered meanwhile?)";
            goto drop;
        }
        at += l;
    }
    at = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t ra = 0;
        for (int k = 0; k < 8; k++)
            ra = ra << 8 | el[12 * i + k];
        uint32_t l = get_u32(el + 12 * i + 8);
        memcpy((void *)(uintptr_t)ra, payload + at, l);
        at += l;
    }
    u->hit = true;
    amw_ack(u, header, hlen, param, NULL); /* every byte is in place */
    nxlt_notif_recv(u->ctx, from, msg, ml);
    return UCS_OK;
drop:
    nxlt_log(u->ctx, NXL_LOG_ERROR, "UCX: a WRITE of %zu bytes from agent '%s' was dropped, "
             "and its notification with it: %s", len, from, bad);
    amw_ack(u, header, hlen, param, bad);
    return UCS_OK;
}

/* Posts a put or get per element of iov[0..n) — the first from byte skip
 * on — then the endpoint flush that completes o. UCS_OK, or the status of
 * the first put or get when that one failed at once and nothing went out
 * (o is then untouched). Inside u->in_ucx. */
static ucs_status_t post_rma(ucx_t *u, ucx_op_t *o, bool write, const nxlt_iov_t *iov, size_t n,
                             size_t skip)
{
    ucx_conn_t *c = o->conn;
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_MEMH};
    for (size_t i = 0; i < n; i++, skip = 0) {
        const nxlt_iov_t *v = &iov[i];
        p.memh = ((ucx_md_t *)v->lmd)->memh;
        ucp_rkey_h rk = ((ucx_rkey_t *)v->rkey)->rk;
        void *la = (char *)v->laddr + skip;
        ucs_status_ptr_t r = write ? ucp_put_nbx(c->ep, la, v->len - skip, v->raddr + skip, rk, &p)
                                   : ucp_get_nbx(c->ep, la, v->len - skip, v->raddr + skip, rk, &p);
        if (UCS_PTR_IS_ERR(r)) {
            if (i == 0)
                return UCS_PTR_STATUS(r); /* nothing went out */
            o->st = UCS_PTR_STATUS(r);
            break;
        }
        if (r)
            ucp_request_free(r); /* completes on its own; the flush below waits for it */
    }
    ucp_request_param_t fp = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send = flush_done,
        .user_data = o,
    };
    ucs_status_ptr_t r = ucp_ep_flush_nbx(c->ep, &fp);
    if (!UCS_PTR_IS_PTR(r))
        flush_done(NULL, UCS_PTR_STATUS(r), o);
    return UCS_OK;
}

/* ---- cross-memory attach: the copies
 *
 * A transfer to a peer reached by cross-memory attach is queued and copied
 * with process_vm_writev / process_vm_readv, up to IOV_MAX elements and
 * cma_chunk bytes a call. Copies run inside post() (the transfer starts
 * at once) and then from a zero-delay timer, each run at most
 * CMA_SLICE_US long, so that a 16 MiB transfer does not hold the loop for
 * its whole copy. When the last byte has landed, the notification goes
 * out as a UCX message, as after a flush. */

static void cma_kick(ucx_t *u)
{
    static const struct timeval zero = {0, 0};
    u->cma_defer = true;
    if (!evtimer_pending(u->ev_cma, NULL))
        evtimer_add(u->ev_cma, &zero);
}

/* Which transfers go this way: DRAM on both sides, to a peer reached by
 * cross-memory attach, into regions UCX does not map here itself (with
 * cma=auto: memory UCX allocated, on shared memory, it writes one-sided
 * and faster) */
static bool cma_usable(ucx_t *u, ucx_conn_t *c, const nxlt_xfer_t *x)
{
    if (c->cma != CMA_READY || x->ltype != NXL_DRAM || x->rtype != NXL_DRAM || !x->n)
        return false;
    if (u->cma_max) {
        size_t total = 0;
        for (size_t i = 0; i < x->n && total <= u->cma_max; i++)
            total += x->iov[i].len;
        if (total > u->cma_max)
            return false;
    }
    if (u->cma_mode == CMA_AUTO)
        for (size_t i = 0; i < x->n; i++) {
            ucx_rkey_t *k = x->iov[i].rkey;
            if (k->mapped < 0) {
                void *ptr;
                k->mapped = ucp_rkey_ptr(k->rk, x->iov[i].raddr, &ptr) == UCS_OK;
            }
            if (k->mapped)
                return false;
        }
    return true;
}

static void cma_fail(ucx_op_t *o, ucs_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void cma_fail(ucx_op_t *o, ucs_status_t st, const char *fmt, ...)
{
    char b[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b, sizeof(b), fmt, ap);
    va_end(ap);
    free(o->why);
    o->why = strdup(b);
    op_finish(o, st);
}

/* The peer's process is gone: the transfer fails, and the connection
 * with it, from the loop */
static void cma_peer_gone(ucx_op_t *o)
{
    ucx_conn_t *c = o->conn;
    pid_t pid = c->pid;
    cma_close(c);
    c->cma = CMA_NONE;
    if (!c->fail_deferred && !c->failed) {
        c->fail_deferred = true;
        c->why = UCS_ERR_CONNECTION_RESET;
    }
    kick(o->u);
    cma_fail(o, UCS_ERR_CONNECTION_RESET, "UCX: transfer to agent '%s' failed: its process "
             "(pid %d) exited during the transfer; nothing more was written to that pid",
             c->name, (int)pid);
}

/* the rest of o through UCX (the peer refused cross-memory attach) */
static void cma_to_ucx(ucx_t *u, ucx_op_t *o)
{
    TAILQ_REMOVE(&u->cma_q, o, cq);
    o->queued = false;
    if (!o->conn->ep) {
        op_finish(o, UCS_ERR_CANCELED);
        return;
    }
    u->in_ucx++;
    ucs_status_t st = post_rma(u, o, !o->read, o->iov + o->at, o->n - o->at, o->off);
    u->in_ucx--;
    if (st != UCS_OK)
        op_finish(o, st);
    kick(u); /* its flush completes from progress */
}

/* every byte of o is there: the notification, or the op is done */
static void cma_complete(ucx_t *u, ucx_op_t *o)
{
    TAILQ_REMOVE(&u->cma_q, o, cq);
    o->queued = false;
    if (!o->op)
        op_free(o);
    else if (o->notif && !nxlt_op_canceled(o->op))
        send_notif(o);
    else
        op_finish(o, UCS_OK);
}

/* One system call: the head of the queue and the transfers behind it to
 * the same peer in the same direction (transfers posted in one turn go in
 * one call), up to IOV_MAX pieces and cma_chunk bytes. */
static void cma_step(ucx_t *u, uint64_t now)
{
    ucx_op_t *h = TAILQ_FIRST(&u->cma_q), *o;
    ucx_conn_t *c = h->conn;
    size_t cnt = 0, bytes = 0;
    for (o = h; o && cnt < IOV_MAX && bytes < u->cma_chunk; o = TAILQ_NEXT(o, cq)) {
        if (o->conn != c || o->read != h->read || !o->op)
            break;
        size_t i = o->at, off = o->off;
        while (i < o->n && cnt < IOV_MAX && bytes < u->cma_chunk) {
            const nxlt_iov_t *v = &o->iov[i];
            size_t take = v->len - off;
            if (take > u->cma_chunk - bytes)
                take = u->cma_chunk - bytes;
            char *la = (char *)v->laddr + off;
            char *ra = (char *)(uintptr_t)(v->raddr + off);
            if (take && cnt && (char *)u->cma_liov[cnt - 1].iov_base +
                                       u->cma_liov[cnt - 1].iov_len == la &&
                (char *)u->cma_riov[cnt - 1].iov_base + u->cma_riov[cnt - 1].iov_len == ra) {
                /* adjacent on both sides (blocks of one region in order):
                 * one piece, so the kernel pins the pages in batches, not
                 * one page a piece (16,384 x 4 KiB: 3.7 -> 4.6 GB/s) */
                u->cma_liov[cnt - 1].iov_len += take;
                u->cma_riov[cnt - 1].iov_len += take;
            } else if (take) {
                u->cma_liov[cnt] = (struct iovec){la, take};
                u->cma_riov[cnt] = (struct iovec){ra, take};
                cnt++;
            }
            bytes += take;
            off += take;
            if (off == v->len)
                i++, off = 0;
        }
        if (i < o->n)
            break; /* o is the last one in this call */
    }
    ssize_t k = 0;
    if (cnt) {
        /* never a pid whose process has exited: it may be another one now.
         * Its pidfd is polled when the last poll is CMA_PID_CHECK_US old
         * (a system call of its own: polled before every copy it took a
         * tenth of a 4 KiB transfer's time), and the reactor watches it */
        if (c->pidfd < 0 ||
            (now - c->pid_seen_us >= CMA_PID_CHECK_US && pidfd_exited(c->pidfd))) {
            cma_peer_gone(h);
            return;
        }
        if (now - c->pid_seen_us >= CMA_PID_CHECK_US)
            c->pid_seen_us = now;
        k = h->read ? process_vm_readv(c->pid, u->cma_liov, cnt, u->cma_riov, cnt, 0)
                    : process_vm_writev(c->pid, u->cma_liov, cnt, u->cma_riov, cnt, 0);
        if (k <= 0) { /* the first piece, the head's, failed */
            int err = k < 0 ? errno : EFAULT;
            if (err == EPERM || err == EACCES) {
                cma_refused(u, c, err, "at a transfer"); /* the pump sends them to UCX */
            } else if (err == ESRCH) {
                cma_peer_gone(h);
            } else {
                cma_fail(h, err == EFAULT ? UCS_ERR_INVALID_ADDR : UCS_ERR_IO_ERROR,
                         "UCX: %s agent '%s' by cross-memory attach failed: %s: %s",
                         h->read ? "READ from" : "WRITE to", c->name,
                         h->read ? "process_vm_readv" : "process_vm_writev",
                         err == EFAULT ? "an address is not mapped (at the peer: a region freed "
                                         "without being deregistered?)"
                                       : strerror(err));
            }
            return;
        }
        u->cma_bytes += (uint64_t)k;
    }
    /* advance by what was copied (short: the next call names the fault) */
    size_t left = (size_t)k;
    for (o = h; o;) {
        ucx_op_t *next = TAILQ_NEXT(o, cq);
        while (o->at < o->n) {
            size_t rest = o->iov[o->at].len - o->off;
            if (left < rest) {
                o->off += left;
                left = 0;
                break;
            }
            left -= rest;
            o->at++;
            o->off = 0;
        }
        if (o->at < o->n)
            break;
        cma_complete(u, o);
        o = next;
        if (!left && o && o->iov[o->at].len)
            break; /* nothing of it was in this call */
    }
}

/* copies queued transfers until the queue is empty or the slice is used */
static void cma_pump(ucx_t *u, uint64_t now, uint64_t end)
{
    ucx_op_t *o;
    while ((o = TAILQ_FIRST(&u->cma_q))) {
        if (!o->op) { /* reported already: its connection failed */
            op_free(o);
            continue;
        }
        if (nxlt_op_canceled(o->op)) {
            /* NXLT_CAP_CANCEL_WAITS: between two calls no copy of it is in
             * the kernel, so it ends here, its notification not sent */
            op_finish(o, UCS_OK);
            continue;
        }
        if (o->conn->unloaded) {
            cma_fail(o, UCS_ERR_CANCELED, "UCX: transfer to agent '%s' canceled: its metadata "
                     "was unloaded during the transfer", o->conn->name);
            continue;
        }
        if (o->conn->cma != CMA_READY) { /* refused, or the peer went, meanwhile */
            if (o->conn->cma == CMA_REFUSED)
                cma_to_ucx(u, o);
            else
                cma_peer_gone(o);
            continue;
        }
        cma_step(u, now);
        if (TAILQ_EMPTY(&u->cma_q) || (now = nxlt_now_us()) >= end)
            break;
    }
    if (!TAILQ_EMPTY(&u->cma_q))
        cma_kick(u);
}

static void on_cma(evutil_socket_t fd, short what, void *arg)
{
    ucx_t *u = arg;
    u->cma_defer = false;
    u->cma_now_used = false;
    u->in_ucx++;
    uint64_t now = nxlt_now_us();
    cma_pump(u, now, now + CMA_SLICE_US);
    u->in_ucx--;
    deferred_failures(u);
}

/* the copies posted by callbacks of this pass (ev_cma_now) */
static void on_cma_now(evutil_socket_t fd, short what, void *arg)
{
    ucx_t *u = arg;
    u->cma_now_on = false;
    u->in_ucx++;
    uint64_t now = nxlt_now_us();
    cma_pump(u, now, now + CMA_SLICE_US);
    u->in_ucx--;
    deferred_failures(u);
}

static nxl_status_t post_cma(ucx_t *u, nxlt_op_t *op, ucx_conn_t *c, const nxlt_xfer_t *x)
{
    ucx_op_t *o = op_new(u, op, c, nxl_agent_name(nxlt_agent(u->ctx)), x->notif, x->notif_len,
                         x->notif != NULL);
    nxlt_iov_t *iov = NULL;
    if (o && o->iov_cap >= x->n) {
        iov = o->iov;
    } else if (o && (iov = malloc(x->n * sizeof(*iov)))) {
        free(o->iov);
        o->iov = iov;
        o->iov_cap = x->n;
    }
    if (!iov) {
        if (o) {
            o->op = NULL;
            u->inflight--;
            c->inflight--;
            op_free(o);
        }
        return NXL_ERR_UNKNOWN;
    }
    memcpy(iov, x->iov, x->n * sizeof(*iov));
    o->n = x->n;
    o->read = x->op == NXL_READ;
    o->queued = true;
    TAILQ_INSERT_TAIL(&u->cma_q, o, cq);
    u->cma_xfers++;
    /* start now, unless this turn's slice is spent, or this is posted from
     * a callback: then with the others posted in this turn, in one call */
    if (!u->cma_defer && !nxlt_in_callback(u->ctx)) {
        uint64_t now = nxlt_now_us();
        if (now >= u->cma_burst_end)
            u->cma_burst_end = now + CMA_SLICE_US;
        u->in_ucx++;
        cma_pump(u, now, u->cma_burst_end);
        u->in_ucx--;
    } else if (u->cma_now_on) {
        /* goes with the others posted by this pass's callbacks */
    } else if (!u->cma_defer && !u->cma_now_used) {
        /* posted from a callback: copied once the callbacks of this pass
         * have run (a window refilled goes in one call) in this same pass,
         * not a loop turn later. The completions that brings are delivered
         * in the pass too, and what their callbacks post waits for the
         * next turn (ev_cma): a chain of re-posts gets two steps a pass */
        u->cma_now_on = u->cma_now_used = true;
        event_active(u->ev_cma_now, EV_READ, 0);
    } else {
        cma_kick(u);
    }
    return NXL_SUCCESS;
}

static nxl_status_t post(void *state, nxlt_op_t *op, const nxlt_xfer_t *x)
{
    ucx_t *u = state;
    ucx_conn_t *c = x->conn;
    nxl_status_t ns = check_conn(u, c, "post");
    if (ns != NXL_SUCCESS)
        return ns;
    if (x->op == NXL_WRITE && x->notif && c->am_write && u->am_write_max)
        switch (post_am_write(u, op, c, x)) {
        case 1:
            return NXL_SUCCESS;
        case -1:
            return NXL_ERR_UNKNOWN;
        default:
            break; /* too large: puts, a flush, then the notification */
        }
    if (cma_usable(u, c, x))
        return post_cma(u, op, c, x);
    ucx_op_t *o = op_new(u, op, c, nxl_agent_name(nxlt_agent(u->ctx)), x->notif, x->notif_len,
                         x->notif != NULL);
    if (!o)
        return NXL_ERR_UNKNOWN;
    u->in_ucx++;
    ucs_status_t st = post_rma(u, o, x->op == NXL_WRITE, x->iov, x->n, 0);
    u->in_ucx--;
    if (st != UCS_OK) {
        nxlt_error(u->ctx, "UCX: %s to agent '%s' failed at once: %s",
                   x->op == NXL_WRITE ? "ucp_put_nbx" : "ucp_get_nbx", c->name,
                   ucs_status_string(st));
        o->op = NULL;
        u->inflight--;
        c->inflight--;
        op_free(o);
        return map_status(c, st);
    }
    kick(u);
    return NXL_SUCCESS;
}

static nxl_status_t notif_send(void *state, nxlt_op_t *op, void *conn, const void *msg,
                               size_t len)
{
    ucx_t *u = state;
    ucx_conn_t *c = conn;
    nxl_status_t ns = check_conn(u, c, "notif_send");
    if (ns != NXL_SUCCESS)
        return ns;
    ucx_op_t *o = op_new(u, op, c, nxl_agent_name(nxlt_agent(u->ctx)), msg, len, true);
    if (!o)
        return NXL_ERR_UNKNOWN;
    u->in_ucx++;
    send_notif(o);
    u->in_ucx--;
    return NXL_SUCCESS;
}

static ucs_status_t am_recv(void *arg, const void *header, size_t hlen, void *data, size_t len,
                            const ucp_am_recv_param_t *param)
{
    ucx_t *u = arg;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
        nxlt_log(u->ctx, NXL_LOG_ERROR, "UCX: a notification arrived by rendezvous; dropped");
        return UCS_OK;
    }
    const unsigned char *b = data;
    size_t nl = len >= 2 ? (size_t)b[0] << 8 | b[1] : 0;
    if (len < 2 || nl == 0 || nl >= 256 || 2 + nl > len) {
        nxlt_log(u->ctx, NXL_LOG_WARN, "UCX: malformed notification of %zu bytes dropped", len);
        return UCS_OK;
    }
    char from[256];
    memcpy(from, b + 2, nl);
    from[nl] = 0;
    u->hit = true;
    nxlt_notif_recv(u->ctx, from, b + 2 + nl, len - 2 - nl);
    return UCS_OK;
}

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

static const char *param(const nxl_param_t *p, size_t n, const char *k)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(p[i].key, k))
            return p[i].value;
    return NULL;
}

static nxl_status_t create(nxlt_ctx_t *ctx, const nxl_param_t *params, size_t n, void **out)
{
    static const char *const known[] = {"tls", "devices", "keepalive", "shm_error_handling",
                                        "shm_fifo_size", "stall_timeout", "am_write_max", "cma",
                                        "cma_chunk", "cma_max"};
    for (size_t i = 0; i < n; i++) {
        bool ok = false;
        for (size_t k = 0; k < sizeof(known) / sizeof(*known); k++)
            ok |= !strcmp(params[i].key, known[k]);
        if (!ok) {
            nxlt_error(ctx, "UCX: unknown parameter '%s' (known: tls, devices, keepalive, "
                       "shm_error_handling, shm_fifo_size, stall_timeout, am_write_max, cma, "
                       "cma_chunk, cma_max)", params[i].key);
            return NXL_ERR_INVALID_PARAM;
        }
    }
    /* Peer error handling is on for every endpoint; UCX then refuses its
     * shared-memory transports unless they handle errors too. */
    const char *seh = param(params, n, "shm_error_handling");
    const char *tl = param(params, n, "tls") ? param(params, n, "tls") : getenv("UCX_TLS");
    bool shm = !tl || strstr(tl, "all") || strstr(tl, "sm") || strstr(tl, "mm") ||
               strstr(tl, "posix") || strstr(tl, "sysv");
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
    const char *fifo = param(params, n, "shm_fifo_size");
    if (!fifo && shm) {
        setenv("UCX_POSIX_FIFO_SIZE", SHM_FIFO_DEFAULT, 0);
        setenv("UCX_SYSV_FIFO_SIZE", SHM_FIFO_DEFAULT, 0);
    } else if (fifo && strcmp(fifo, "ucx")) {
        char *end;
        unsigned long v = strtoul(fifo, &end, 10);
        if (end == fifo || *end || v < 2 || v > 65536 || (v & (v - 1))) {
            nxlt_error(ctx, "UCX: shm_fifo_size '%s' is not a power of two from 2 to 65536 "
                       "(or \"ucx\" for UCX's own default)", fifo);
            return NXL_ERR_INVALID_PARAM;
        }
        if (shm) {
            setenv("UCX_POSIX_FIFO_SIZE", fifo, 1);
            setenv("UCX_SYSV_FIFO_SIZE", fifo, 1);
        }
    }
    uint64_t stall_ms = 10000;
    const char *stv = param(params, n, "stall_timeout");
    if (stv) {
        char *end;
        double v = strtod(stv, &end);
        if (end == stv || v < 0 || (*end && strcmp(end, "s") && strcmp(end, "ms"))) {
            nxlt_error(ctx, "UCX: stall_timeout '%s' is not a time (e.g. 10s, 500ms, 0 = never)",
                       stv);
            return NXL_ERR_INVALID_PARAM;
        }
        stall_ms = (uint64_t)(strcmp(end, "ms") ? v * 1000 : v);
    }
    size_t am_max = AM_WRITE_MAX_DEFAULT;
    const char *amv = param(params, n, "am_write_max");
    if (amv) {
        char *end;
        unsigned long long v = strtoull(amv, &end, 10);
        if (end == amv || *end || v > (1u << 20)) {
            nxlt_error(ctx, "UCX: am_write_max '%s' is not a byte count up to 1048576 (0 turns "
                       "the one-message WRITE off)", amv);
            return NXL_ERR_INVALID_PARAM;
        }
        am_max = (size_t)v;
    }
    int cma_mode = CMA_AUTO;
    const char *cmv = param(params, n, "cma");
    if (cmv) {
        if (!strcmp(cmv, "auto"))
            cma_mode = CMA_AUTO;
        else if (!strcmp(cmv, "on") || !strcmp(cmv, "y") || !strcmp(cmv, "yes") || !strcmp(cmv, "1"))
            cma_mode = CMA_ON;
        else if (!strcmp(cmv, "off") || !strcmp(cmv, "n") || !strcmp(cmv, "no") || !strcmp(cmv, "0"))
            cma_mode = CMA_OFF;
        else {
            nxlt_error(ctx, "UCX: cma '%s' is not auto, on or off (cross-memory attach to peers "
                       "on this host)", cmv);
            return NXL_ERR_INVALID_PARAM;
        }
    }
    /* cma=auto follows the UCX transports asked for: with shared memory
     * left out (tls=tcp: a network, or hosts in network namespaces, to go
     * through) nothing goes around it */
    bool cma_tls = !tl || (tl[0] == '^' ? !strstr(tl, "sm") && !strstr(tl, "cma")
                                        : strstr(tl, "all") || strstr(tl, "sm") ||
                                              strstr(tl, "cma") || strstr(tl, "mm") ||
                                              strstr(tl, "posix") || strstr(tl, "sysv"));
    if (cma_mode == CMA_AUTO && !cma_tls)
        cma_mode = CMA_OFF;
    size_t cma_chunk = CMA_CHUNK_DEFAULT;
    const char *ccv = param(params, n, "cma_chunk");
    if (ccv) {
        char *end;
        unsigned long long v = strtoull(ccv, &end, 10);
        if (end == ccv || *end || v < 1 || v > (1ull << 30)) {
            nxlt_error(ctx, "UCX: cma_chunk '%s' is not a byte count from 1 to 1073741824 (bytes "
                       "one cross-memory attach system call copies at most)", ccv);
            return NXL_ERR_INVALID_PARAM;
        }
        cma_chunk = (size_t)v;
    }
    size_t cma_max = 0;
    const char *cmx = param(params, n, "cma_max");
    if (cmx) {
        char *end;
        unsigned long long v = strtoull(cmx, &end, 10);
        if (end == cmx || *end || cmx[0] == '-') {
            nxlt_error(ctx, "UCX: cma_max '%s' is not a byte count (transfers larger than it go "
                       "through UCX instead of cross-memory attach; 0: no limit)", cmx);
            return NXL_ERR_INVALID_PARAM;
        }
        cma_max = (size_t)v;
    }
    ucx_t *u = calloc(1, sizeof(*u));
    if (!u)
        return NXL_ERR_UNKNOWN;
    u->ctx = ctx;
    u->cma_mode = cma_mode;
    u->cma_chunk = cma_chunk;
    u->cma_max = cma_max;
    TAILQ_INIT(&u->cma_q);
    u->am_write_max = am_max;
    u->stall_us = stall_ms * 1000;
    u->efd = -1;
    LIST_INIT(&u->conns);
    LIST_INIT(&u->ops);
    LIST_INIT(&u->acks);
    LIST_INIT(&u->sides);
    ucp_config_t *cfg;
    ucs_status_t st = ucp_config_read(NULL, NULL, &cfg);
    if (st != UCS_OK) {
        nxlt_error(ctx, "UCX: ucp_config_read failed: %s (check UCX_* environment variables)",
                   ucs_status_string(st));
        free(u);
        return NXL_ERR_BACKEND;
    }
    const char *tls = param(params, n, "tls"), *dev = param(params, n, "devices");
    const char *ka = param(params, n, "keepalive");
    if ((tls && (st = ucp_config_modify(cfg, "TLS", tls)) != UCS_OK) ||
        (dev && (st = ucp_config_modify(cfg, "NET_DEVICES", dev)) != UCS_OK) ||
        (st = ucp_config_modify(cfg, "KEEPALIVE_INTERVAL", ka ? ka : "1s")) != UCS_OK) {
        nxlt_error(ctx, "UCX: a parameter was refused by ucp_config_modify: %s",
                   ucs_status_string(st));
        ucp_config_release(cfg);
        free(u);
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
        /* say what UCX does find here with its defaults */
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
        nxlt_error(ctx, "UCX: ucp_init failed: %s — no usable UCX transport with tls=%s, "
                   "devices=%s; UCX finds here: %s. Check the 'tls'/'devices' parameters and "
                   "UCX_TLS / UCX_NET_DEVICES ('ucx_info -d' lists devices)",
                   ucs_status_string(st),
                   tls ? tls : getenv("UCX_TLS") ? getenv("UCX_TLS") : "all",
                   dev ? dev : getenv("UCX_NET_DEVICES") ? getenv("UCX_NET_DEVICES") : "all",
                   u->desc[0] ? u->desc : "nothing");
        free(u);
        return NXL_ERR_BACKEND;
    }
    list_tls(u);
    query_cuda(u);
    /* a threaded agent calls the worker from the threads that post
     * (NXLT_CAP_ANY_THREAD), one at a time */
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = nxlt_threaded(ctx) ? UCS_THREAD_MODE_SERIALIZED
                                                                : UCS_THREAD_MODE_SINGLE};
    st = ucp_worker_create(u->ucp, &wp, &u->w);
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
        nxlt_error(ctx, "UCX: the worker could not start: %s (UCX found: %s); check UCX_TLS "
                   "and UCX_NET_DEVICES", ucs_status_string(st), u->desc[0] ? u->desc : "nothing");
        destroy(u);
        return NXL_ERR_BACKEND;
    }
    ucp_am_handler_param_t ap = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                      UCP_AM_HANDLER_PARAM_FIELD_ARG,
        .id = NXL_UCX_AM_NOTIF,
        .cb = am_recv,
        .arg = u,
    };
    st = ucp_worker_set_am_recv_handler(u->w, &ap);
    if (st == UCS_OK) {
        ap.id = NXL_UCX_AM_WRITE;
        ap.cb = am_recv_write;
        st = ucp_worker_set_am_recv_handler(u->w, &ap);
    }
    if (st == UCS_OK) {
        ap.id = NXL_UCX_AM_REVOKE;
        ap.cb = am_recv_revoke;
        st = ucp_worker_set_am_recv_handler(u->w, &ap);
    }
    if (st == UCS_OK) {
        ap.id = NXL_UCX_AM_WRITE_ACK;
        ap.cb = am_recv_ack;
        st = ucp_worker_set_am_recv_handler(u->w, &ap);
    }
    struct event_base *base = nxlt_base(ctx);
    u->ev_efd = event_new(base, u->efd, EV_READ | EV_PERSIST, on_efd, u);
    u->ev_kick = evtimer_new(base, on_kick, u);
    u->ev_watch = evtimer_new(base, on_watch, u);
    u->ev_cma = evtimer_new(base, on_cma, u);
    u->ev_cma_now = event_new(base, -1, 0, on_cma_now, u);
    if (st != UCS_OK || !u->addr || !u->ev_efd || !u->ev_kick || !u->ev_watch || !u->ev_cma ||
        !u->ev_cma_now ||
        event_add(u->ev_efd, NULL)) {
        nxlt_error(ctx, "UCX: setting up the worker in the reactor failed (%s)",
                   ucs_status_string(st));
        destroy(u);
        return NXL_ERR_BACKEND;
    }
    if (u->cma_mode != CMA_OFF) {
        char why[160];
        u->cma_liov = malloc(2 * IOV_MAX * sizeof(struct iovec));
        u->cma_riov = u->cma_liov ? u->cma_liov + IOV_MAX : NULL;
        uint64_t ck = 0;
        if (getrandom(&ck, sizeof(ck), GRND_NONBLOCK) != sizeof(ck))
            ck = nxlt_now_us() * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid() << 32 ^
                 (uint64_t)(uintptr_t)u;
        u->cma_cookie[0] = CMA_MAGIC;
        u->cma_cookie[1] = ck | 1;
        if (!u->cma_liov)
            nxlt_log(ctx, NXL_LOG_WARN, "UCX: out of memory: no cross-memory attach");
        else if (!(u->cma_here = cma_identity(&u->cma_me, why, sizeof(why))))
            nxlt_log(ctx, NXL_LOG_INFO, "UCX: no cross-memory attach to peers on this host: %s",
                     why);
    }
    live_add(u);
    kick(u);
    nxlt_log(ctx, NXL_LOG_INFO, "UCX %s transport up; UCX transports: %s (%s); cross-memory "
             "attach to peers on this host: %s", ucp_get_version_string(), u->desc,
             strstr(u->desc, "rc") || strstr(u->desc, "ud") || strstr(u->desc, "dc")
                 ? "with RDMA"
                 : "shared memory and TCP, no RDMA",
             !u->cma_here ? "off" : u->cma_mode == CMA_ON ? "on" : "auto");
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

/* Transfers still in flight to a peer that is alive and progressed, on
 * endpoints not closed: another process, or an agent of this process run
 * by another thread (one on this thread cannot answer while this one
 * tears down). */
static bool live_ops(ucx_t *u)
{
    ucx_op_t *o;
    LIST_FOREACH(o, &u->ops, link)
    if (o->op && !o->queued && o->conn->ep && !o->conn->failed && !o->conn->fail_deferred &&
        (!o->conn->local || live_elsewhere(o->conn)))
        return true;
    return false;
}

/* First in the agent's teardown: transfers in flight are let finish, at
 * most DESTROY_WAIT_MS, before the endpoints are closed by force under
 * them. Over TCP a put is emulated: the target writes it and answers, and
 * UCX 1.13 aborts the target's process (ucp_request_try_send: "unexpected
 * error: Endpoint timeout", from ucp_put_handler) when that answer finds
 * the initiator's endpoint gone. Then every op not reported yet is
 * reported CANCELED. */
static void quiesce(void *state)
{
    ucx_t *u = state;
    uint64_t until = nxlt_now_us() + DESTROY_WAIT_MS * 1000ull;
    while (u->w) {
        if (!live_ops(u) || nxlt_now_us() >= until)
            break;
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
        u->inflight--;
        o->conn->inflight--;
        nxlt_op_done(op, NXL_ERR_CANCELED, "UCX: transport destroyed");
    }
}

static void destroy(void *state)
{
    ucx_t *u = state;
    quiesce(u);
    /* copies not done: nothing of theirs is in UCX or the kernel */
    while (!TAILQ_EMPTY(&u->cma_q))
        op_free(TAILQ_FIRST(&u->cma_q));
    ucx_conn_t *c, *next;
    for (c = LIST_FIRST(&u->conns); c; c = next) {
        next = LIST_NEXT(c, link);
        cma_close(c);
        if (c->ep) {
            ep_close(u, c->ep, true);
            c->ep = NULL;
            c->forced = true;
        }
    }
    if (u->w) {
        /* UCX returns the requests it holds (closes, flushes and
         * notifications of ops already reported) as the worker progresses:
         * wait for them, asleep on the worker's fd, up to a deadline (a
         * peer that vanished without a word may never answer a close) */
        uint64_t until = nxlt_now_us() + DESTROY_WAIT_MS * 1000ull;
        uint64_t now;
        while (holds_requests(u) && (now = nxlt_now_us()) < until) {
            for (int k = 0; k < 64 && ucp_worker_progress(u->w); k++)
                ;
            if (!holds_requests(u))
                break;
            int ms = (int)((until - now) / 1000) + 1;
            if (ucp_worker_arm(u->w) != UCS_OK)
                ms = 1; /* busy (sends queued on shared memory): look again soon */
            struct pollfd pf = {.fd = u->efd, .events = POLLIN};
            poll(&pf, 1, ms < 50 ? ms : 50);
        }
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
    free(u->closing);
    if (u->ev_efd)
        event_free(u->ev_efd);
    if (u->ev_kick)
        event_free(u->ev_kick);
    if (u->ev_watch)
        event_free(u->ev_watch);
    if (u->ev_cma)
        event_free(u->ev_cma);
    if (u->ev_cma_now)
        event_free(u->ev_cma_now);
    free(u->cma_liov);
    if (u->w)
        ucp_worker_destroy(u->w);
    /* ops UCX never called back for: their requests died with the worker */
    while (!LIST_EMPTY(&u->ops))
        op_free(LIST_FIRST(&u->ops));
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
        live_remove(u);
    free(u->regs);
    free(u->addr);
    free(u);
}

static const char *describe(void *state)
{
    return ((ucx_t *)state)->desc;
}

/* What create() takes: the engine refuses other keys, nxl_info -v lists
 * these (keep them with create()'s parsing) */
#define PSTR_(x) #x
#define PSTR(x) PSTR_(x)
_Static_assert(CMA_CHUNK_DEFAULT == 1048576, "ucx_params says cma_chunk=1048576");
static const nxl_param_info_t ucx_params[] = {
    {"tls", NULL, "UCX transports, as UCX_TLS (\"shm,self\", \"tcp\"); not given: UCX_TLS or all"},
    {"devices", NULL, "network devices, as UCX_NET_DEVICES; not given: UCX_NET_DEVICES or all"},
    {"keepalive", "1s", "keepalive interval, as UCX_KEEPALIVE_INTERVAL"},
    {"shm_error_handling", "y",
     "y: set UCX_POSIX_ERROR_HANDLING and UCX_SYSV_ERROR_HANDLING (shared memory with peer "
     "error handling); anything else leaves them alone"},
    {"shm_fifo_size", SHM_FIFO_DEFAULT,
     "shared-memory receive FIFO elements, a power of two (UCX_POSIX/SYSV_FIFO_SIZE; when not "
     "given, those set in the environment win); \"ucx\": UCX's own (64)"},
    {"stall_timeout", "10s", "give a peer up when none of its transfers completed for this long "
     "(\"500ms\", \"0\" never)"},
    {"am_write_max", PSTR(AM_WRITE_MAX_DEFAULT),
     "WRITEs with a notification up to this many bytes go as one message (\"0\" off)"},
    {"cma", "auto", "cross-memory attach to peers on this host: auto (when tls includes shared "
     "memory), on, off"},
    {"cma_chunk", "1048576", "bytes one process_vm_writev/readv copies at most"},
    {"cma_max", "0", "transfers of more bytes go through UCX instead of cross-memory attach "
     "(0: no limit)"},
};

NXLT_MODULE_EXPORT const nxlt_ops_t nxlt_ucx_ops = {
    .abi_version = NXLT_ABI_VERSION,
    .name = "UCX",
    .mem_mask = UCX_MEM_MASK,
    .caps = NXLT_CAP_REMOTE | NXLT_CAP_LOCAL | NXLT_CAP_NOTIF | NXLT_CAP_CANCEL_WAITS |
            NXLT_CAP_ANY_THREAD | NXLT_CAP_PARAMS,
    .params = ucx_params,
    .nparams = sizeof(ucx_params) / sizeof(*ucx_params),
    .probe = probe,
    .create = create,
    .destroy = destroy,
    .reg = reg,
    .dereg = dereg,
    .revoke = mem_revoke,
    .pack_key = pack_key,
    .mem_alloc = mem_alloc,
    .mem_free = mem_free,
    .conn_info = conn_info,
    .load_conn = load_conn,
    .load_key = load_key,
    .unload_key = unload_key,
    .unload_conn = unload_conn,
    .post = post,
    .notif_send = notif_send,
    .describe = describe,
    .quiesce = quiesce,
};
