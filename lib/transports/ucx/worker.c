/* SPDX-License-Identifier: BSD-3-Clause */
#include "config.h"
#include "ucx.h"

#define ARM_TRIES 16
#define ARM_DEFERS 4 /* arming waits behind the loop's other work of a turn (ev_arm) at most
                      * this often in a row, then for the next turn */
#define WATCH_MS 100
#define SPIN_SLICE_US 50 /* busy polling: longest spin before the loop gets a turn */
#define CHAIN_CLOCK 4    /* a chained pass takes the clock as last read, this many in a row */
#define BUSY_SPIN_US 2000 /* arm answering BUSY, nothing moving: progressed at once this long */
#define BUSY_BACKOFF_MIN_US 100 /* ... then from a timer, its delay doubling */
#define BUSY_BACKOFF_MAX_US 5000 /* ... up to this */

/* ----------------------------------------------- instances and UCX's log
 *
 * UCX prints its warnings and errors to standard output by default: into
 * the embedding application's output. Its lines go through nxl's log
 * instead (the agent's level and callback), to the agent whose thread runs
 * the UCX call that logs, unless the user set UCX_LOG_LEVEL (or
 * UCX_LOG_FILE) and so asked for UCX's own printing. The handler stays
 * installed for the life of the process. A line logged on a thread that
 * runs no agent's reactor (UCX's own async thread, an application thread
 * posting to a threaded agent) must not reach a log callback there (they
 * run on the reactor thread): it is kept, up to LOG_LATER_MAX lines, and
 * logged by the next agent that progresses its worker (or is destroyed);
 * with no agent alive it is dropped. */

static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static LIST_HEAD(, ucx_state) live_list = LIST_HEAD_INITIALIZER(live_list);
static unsigned long live_gen; /* bumped as an instance leaves live_list */
static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static bool log_user_asked;

#define LOG_LATER_MAX 32
typedef struct {
    nxl_log_level_t level;
    char line[600];
} log_line_t;
static log_line_t log_later[LOG_LATER_MAX]; /* under live_lock */
static unsigned log_later_n, log_later_lost; /* under live_lock */
static unsigned log_later_any;               /* atomic: log_later_n or log_later_lost */

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
    if (!to && !LIST_EMPTY(&live_list)) {
        if (log_later_n < LOG_LATER_MAX) {
            log_line_t *k = &log_later[log_later_n++];
            k->level = nl;
            snprintf(k->line, sizeof(k->line), "UCX %s:%u: %s", base, line, msg);
        } else {
            log_later_lost++;
        }
        __atomic_store_n(&log_later_any, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&live_lock);
    if (to)
        nxlt_log(to->ctx, nl, "UCX %s:%u: %s", base, line, msg);
    return UCS_LOG_FUNC_RC_STOP;
}

/* The lines kept from other threads, through u's log (on its thread; one
 * at a time, live_lock not held while its callback runs) */
static void log_drain(ucx_t *u)
{
    if (!__atomic_load_n(&log_later_any, __ATOMIC_ACQUIRE))
        return;
    for (;;) {
        log_line_t k;
        unsigned lost = 0;
        pthread_mutex_lock(&live_lock);
        bool have = log_later_n > 0;
        if (have) {
            k = log_later[0];
            memmove(log_later, log_later + 1, --log_later_n * sizeof(*log_later));
        } else {
            lost = log_later_lost;
            log_later_lost = 0;
            __atomic_store_n(&log_later_any, 0, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&live_lock);
        if (!have) {
            if (lost)
                nxlt_log(u->ctx, NXL_LOG_WARN, "UCX: %u more lines of UCX, logged on other "
                         "threads, were dropped", lost);
            return;
        }
        nxlt_log(u->ctx, k.level, "%s", k.line);
    }
}

static void log_install(void)
{
    log_user_asked = getenv("UCX_LOG_LEVEL") || getenv("UCX_LOG_FILE");
    ucs_log_push_handler(log_handler);
}

void nxl_ucx_live_add(ucx_t *u)
{
    pthread_once(&log_once, log_install);
    u->thread = pthread_self();
    pthread_mutex_lock(&live_lock);
    LIST_INSERT_HEAD(&live_list, u, live);
    u->is_live = true;
    pthread_mutex_unlock(&live_lock);
}

void nxl_ucx_live_remove(ucx_t *u)
{
    log_drain(u);
    pthread_mutex_lock(&live_lock);
    LIST_REMOVE(u, live);
    __atomic_add_fetch(&live_gen, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&live_lock);
}

/* Is the local peer of c alive and progressed by another thread than this
 * one (its own reactor thread, or another thread of the application)? */
bool nxl_ucx_live_elsewhere(const ucx_conn_t *c)
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
bool nxl_ucx_live_is_local(const void *addr, size_t len)
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
uint64_t nxl_ucx_coarse_us(void)
{
    return nxl_clock_us(CLOCK_MONOTONIC_COARSE);
}

/* progress on the next turn (one already set for later is brought forward).
 * Not when the busy-polling chain is activated: it progresses in this pass.
 * Whether the kick is pending is kept here (kick_on): asking the loop costs
 * a call through its table on every post */
void nxl_ucx_kick(ucx_t *u)
{
    if (u->kick_later || (!u->kick_on && !u->chain_on)) {
        u->kick_later = false;
        u->kick_on = true;
        nxlt_timer_start(u->ev_kick, 0);
    }
}

/* Busy polling without a reactor turn per round: each turn costs an
 * epoll_wait(), more than a message over shared memory takes. Spins on the
 * worker for a short slice, until UCX reports work, one of our operations
 * completes or a notification arrives (UCX does not count every completion:
 * a flush completes with a count of 0), or anything else in the loop is
 * ready to run (a delivery the engine queued outside this call, another
 * transport's watch or timer): then the loop gets its turn. The progress
 * that found something is not followed by another here: the deliveries it
 * activated run first (a ping-pong's reply waits on them, and a progress
 * costs a poll of every transport), and the chain progresses again right
 * behind them. *now: the clock, read by the caller just before (or by an
 * earlier pass of its chain: progress); on return as last read (16 rounds
 * ago at most, or the caller's), for the caller's bound: no read between
 * the message and its delivery (one costs ~30 ns here, a tenth of a
 * one-way trip). */
static bool spin(ucx_t *u, unsigned bp, uint64_t end, uint64_t *now)
{
    if (nxlt_loop_busy(u->ctx))
        return false;
    if (end > u->busy_until_us)
        end = u->busy_until_us;
    u->net.hit = false;
    for (unsigned i = 1;; i++) {
        if (ucp_worker_progress(u->w) || u->net.hit) {
            u->busy_until_us = *now + bp;
            return true;
        }
        if (!(i & 15)) {
            u->now_us = *now = nxlt_now_us();
            u->now_ok = true; /* for a handler of this spin (am.c, poll_heard) */
            u->now_reused = 0;
            if (*now >= end || nxlt_loop_busy(u->ctx))
                return false;
        }
    }
}


/* Another agent of this process that this one is connected to was
 * destroyed since this one last looked: its connection fails from the
 * loop (over shared memory nothing else would say so: its process lives
 * on, and UCX's keepalive asks the process). */
void nxl_ucx_local_gone(ucx_t *u)
{
    if (!nxl_netop_gen_moved(&live_gen, &u->live_gen_seen))
        return;
    ucx_conn_t *c;
    LIST_FOREACH(c, &u->conns, link)
    if (c->local && c->peer_addr && !c->failed && !c->fail_deferred &&
        !nxl_ucx_live_is_local(c->peer_addr, c->peer_addr_len)) {
        c->peer_destroyed = true;
        c->fail_deferred = true;
        c->why = UCS_ERR_CONNECTION_RESET;
        nxl_ucx_kick(u);
    }
}

/* Endpoint failures UCX reported inside a call of ours (it runs the error
 * handler inside ucp_put_nbx over TCP, say) are handled here, from the
 * loop: failing the connection reports its ops to the engine, which must
 * not happen inside the engine's own call into this transport. */
void nxl_ucx_deferred_failures(ucx_t *u)
{
    nxl_ucx_local_gone(u);
    ucx_conn_t *c;
    LIST_FOREACH(c, &u->conns, link)
    if (c->fail_deferred && !c->failed)
        nxl_ucx_conn_fail(c, c->why, false);
}

/* Arming answered BUSY ARM_TRIES times: sends are queued for room in a
 * peer's shared-memory FIFO, and progress continues on the next turn until
 * the peer made room. Two things make that last for good, and a kick each
 * turn then is a reactor spinning at 100% for good:
 *  - a peer that died with its FIFO full never makes room, and UCX 1.13
 *    never gives up on those sends, nor on the flush that discarding the
 *    endpoint needs (it ignores UCT_FLUSH_FLAG_CANCEL);
 *  - a peer on this host killed between claiming a slot of this worker's
 *    receive FIFO and publishing it leaves a hole that UCX's reader waits
 *    on and never passes: nothing behind it is read, and arming answers
 *    BUSY from then on (doc/man/nxl-ucx.md, LIMITATIONS).
 * Only a new worker recovers from either. So when nothing moved (n: what
 * progress did) and no op of ours is in flight for BUSY_SPIN_US, the
 * worker is progressed from a timer instead, its delay doubling from
 * BUSY_BACKOFF_MIN_US to BUSY_BACKOFF_MAX_US; anything that moves, an op
 * started or an arm that succeeds brings back the zero delay. What that
 * costs: a message from a peer that arrives while the worker cannot sleep
 * on its fd waits for the timer. */
static void busy_kick(ucx_t *u, unsigned n)
{
    if (n || u->net.inflight) {
        u->busy_idle_us = 0;
        u->backoff_us = 0;
        nxl_ucx_kick(u);
        return;
    }
    uint64_t now = nxlt_now_us();
    if (!u->busy_idle_us)
        u->busy_idle_us = now;
    if (now - u->busy_idle_us < BUSY_SPIN_US) {
        nxl_ucx_kick(u);
        return;
    }
    u->backoff_us = !u->backoff_us ? BUSY_BACKOFF_MIN_US
                    : u->backoff_us >= BUSY_BACKOFF_MAX_US / 2 ? BUSY_BACKOFF_MAX_US
                    : u->backoff_us * 2;
    nxlt_timer_start(u->ev_kick, u->backoff_us);
    u->kick_on = u->kick_later = true;
    if (u->backoff_us == BUSY_BACKOFF_MAX_US && !u->backoff_said) {
        u->backoff_said = true;
        nxlt_log(u->ctx, NXL_LOG_WARN, "UCX: the worker cannot sleep on its event fd: "
                 "ucp_worker_arm keeps answering BUSY with nothing moving (as it does for good "
                 "once a shared-memory peer died with its receive FIFO full); it is progressed "
                 "every %d ms while idle, and a message arriving meanwhile waits for that",
                 BUSY_BACKOFF_MAX_US / 1000);
    }
}

/* One pass. true: chain on at once (the caller passes again, chaining):
 * its deliveries ran here and nothing else waits in the loop */
static bool progress_pass(ucx_t *u, bool chained)
{
    unsigned n = 0;
    log_drain(u);
    nxl_ucx_rails_progress(u);
    nxl_ucx_deferred_failures(u);
    nxl_ucx_later_run(u);
    if (u->deadline_due) {
        /* what completes now is not aborted */
        while (ucp_worker_progress(u->w))
            n++;
        nxl_ucx_deadlines(u);
    }
    if (u->reconnect_due)
        nxl_ucx_reconnects(u);
    /* busy polling: what this progress brings is delivered right after it
     * returns (nxlt_deliver_hold), not by an event of the loop behind this
     * one. Not inside UCX's callbacks: the application's may post, send,
     * cancel, release, which re-enters the worker */
    unsigned bp = nxlt_busy_poll_us(u->ctx);
    bool held = bp && nxlt_deliver_hold(u->ctx);
    /* backing off (busy_kick): one look, not ARM_TRIES */
    for (int tries = 0, max = u->backoff_us ? 1 : ARM_TRIES; tries < max; tries++) {
        unsigned k;
        while ((k = ucp_worker_progress(u->w)))
            n += k;
        /* one clock read for both. A chained pass (below) takes the last
         * reading instead (a read costs ~26 ns here, a tenth of a message's
         * way, once per message each way), older by the deliveries between
         * them: CHAIN_CLOCK passes in a row at most, so that the chain
         * still ends, its slice passed, a few passes late at most */
        uint64_t now = 0;
        bool fresh = false;
        if (u->busy_until_us || (n && bp)) {
            if (u->chaining && !tries && u->now_us && u->now_reused < CHAIN_CLOCK) {
                now = u->now_us;
                u->now_reused++;
            } else {
                now = u->now_us = nxlt_now_us();
                u->now_reused = 0;
                fresh = true;
            }
        }
        if (n && bp)
            u->busy_until_us = now + bp;
        if (u->busy_until_us && now < u->busy_until_us) {
            /* busy-poll window: keep polling. Chain: when this brought
             * something (a message, a completion: their deliveries are
             * activated now), progress again in this same pass right
             * after them, activated behind them, rather than from the
             * kick on the next pass, whose epoll_wait() costs more than a
             * message over shared memory takes (a pass per message each
             * way). A pass chains for SPIN_SLICE_US at most (by the
             * clock as last read: CHAIN_CLOCK passes late at most), as
             * one spin does, then the loop gets its turn. Not while copies wait
             * for the next pass (a callback's post, cma.c): spinning in
             * this one would hold them back for the slice. */
            if (!u->chaining)
                u->chain_end_us = now + SPIN_SLICE_US;
            bool cma_waits = !TAILQ_EMPTY(&u->cma_q) || u->cma_on;
            bool got = n;
            if (!got && !(u->chaining && cma_waits)) {
                u->now_ok = fresh;
                got = spin(u, bp, u->chain_end_us, &now);
                u->now_ok = false;
            }
            /* its deliveries now (a reply the callbacks send goes out
             * here); the copies they post count for the chain below.
             * Their posts do not kick meanwhile (chain_on): either the
             * chain progresses behind them or the kick below does */
            bool direct = false;
            if (held) {
                bool was = u->chain_on;
                u->chain_on = true;
                direct = nxlt_deliver_release(u->ctx, 1);
                if (direct)
                    cma_waits = !TAILQ_EMPTY(&u->cma_q) || u->cma_on;
                u->chain_on = was;
                held = false;
            }
            if (got && !cma_waits && now < u->chain_end_us) {
                /* delivered here, and the loop has nothing else to run
                 * in this pass: the chain goes on without an event */
                if (direct && !u->chain_on && !nxlt_loop_busy(u->ctx))
                    return true;
                u->chain_on = true;
                nxlt_timer_activate(u->ev_chain);
            } else
                nxl_ucx_kick(u);
            return false;
        }
        /* Something is ready for the loop (a completion or a notification
         * to deliver): let it run first. Arming costs several system calls
         * and right after traffic mostly answers BUSY; delivering first
         * took ~15 us off each one-way trip here. The next turn arms.
         * When the worker brought nothing new and only the loop is busy
         * (the deliveries of cross-memory copies, another transport's
         * work, this worker's fd and kick both due in one libevent turn),
         * arming waits behind that work in this same turn instead (ev_arm,
         * activated after it; ARM_DEFERS times in a row at most): waiting
         * for a turn without such work, a worker under steady traffic
         * never armed, its fd left readable (each turn then woke on it and
         * progressed the worker once more). */
        if (held) /* out of the window: delivered by the loop, as without busy polling */
            nxlt_deliver_release(u->ctx, 0);
        held = false;
        if (u->net.hit || nxlt_loop_busy(u->ctx)) {
            bool quiet = !u->net.hit && !n;
            u->net.hit = false;
            if (!chained)
                u->arm_defers = 0;
            if (quiet && u->arm_defers++ < ARM_DEFERS)
                nxlt_timer_activate(u->ev_arm);
            else
                nxl_ucx_kick(u);
            return false;
        }
        ucs_status_t st = ucp_worker_arm(u->w);
        if (st == UCS_OK) {
            u->busy_idle_us = 0;
            u->backoff_us = 0;
            return false;
        }
        if (st != UCS_ERR_BUSY) {
            nxlt_log(u->ctx, NXL_LOG_ERROR, "UCX: ucp_worker_arm failed: %s",
                     ucs_status_string(st));
            nxl_ucx_kick(u);
            return false;
        }
    }
    /* still busy: hand back to the loop and continue on the next turn */
    u->busy_rounds++;
    busy_kick(u, n);
    return false;
}

static void progress(ucx_t *u, bool chained)
{
    if (!progress_pass(u, chained))
        return;
    bool was = u->chaining;
    u->chaining = true;
    while (progress_pass(u, false))
        ;
    u->chaining = was;
}

void nxl_ucx_on_efd(nxlt_io_t *io, int fd, unsigned ready, void *arg) { progress(arg, false); }
void nxl_ucx_on_kick(nxlt_timer_t *t, void *arg)
{
    ucx_t *u = arg;
    u->kick_on = false;
    progress(u, false);
}
void nxl_ucx_on_arm(nxlt_timer_t *t, void *arg) { progress(arg, true); }
void nxl_ucx_on_chain(nxlt_timer_t *t, void *arg)
{
    ucx_t *u = arg;
    u->chain_on = false;
    u->chaining = true;
    progress(u, false);
    u->chaining = false;
}

/* While ops are in flight: progress now and then (UCX's keepalive runs from
 * progress), and declare lost a peer whose ops stopped completing: over TCP
 * a cut link raises no error until the kernel gives up, minutes later. */
void nxl_ucx_on_watch(nxlt_timer_t *t, void *arg)
{
    ucx_t *u = arg;
    progress(u, false);
    uint64_t now = nxl_ucx_coarse_us();
    ucx_conn_t *c;
    LIST_FOREACH(c, &u->conns, link)
    {
        nxl_ucx_main_check(u, c, now); /* with rails: its main endpoint stalled (rails.c) */
        if (!c->failed && nxl_netop_stalled(&u->net, &c->net, now))
            nxl_ucx_conn_fail(c, UCS_ERR_ENDPOINT_TIMEOUT, true);
    }

    /* armed while ops are in flight; the first op after an idle period
     * re-arms it (an op started meanwhile keeps it going: no timer is
     * added and removed for each op of a one-at-a-time stream); and while
     * a renewal or a fence waits for its time (conn.c: an idle agent
     * would look at it only when woken) */
    u->watch_on = u->net.inflight > 0 || u->reconnect_due;
    if (u->watch_on)
        nxlt_timer_start(u->ev_watch, WATCH_MS * 1000);
}

/* the first op after an idle period (nxl_netop_start said so): the watch
 * starts, unless it is still armed */
void nxl_ucx_watch_start(ucx_t *u)
{
    if (!u->watch_on) {
        u->watch_on = true;
        nxlt_timer_start(u->ev_watch, WATCH_MS * 1000);
    }
}
