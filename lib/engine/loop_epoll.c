/* SPDX-License-Identifier: BSD-3-Clause */
/* The loop of an NXL_LOOP_FD agent: its watches in an epoll set of its own,
 * its timers in a heap with one timerfd in the set armed for the soonest.
 * The set's descriptor is nxl_agent_backend_fd(): readable whenever a
 * watched descriptor is ready or a timer is due, so any loop that can
 * watch one descriptor drives the agent (libuv's uv_backend_fd() is the
 * model). */
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define EP_BATCH 64

/* ---- the timer heap: soonest due at [0]; heap_i is the index + 1 */

/* timers due at the same time, activated ones (due at 1 us) above all,
 * run in the order they were armed, as libevent runs its active queue */
static bool before(const nxlt_timer_t *a, const nxlt_timer_t *b)
{
    return a->due_us < b->due_us || (a->due_us == b->due_us && a->seq < b->seq);
}

static void heap_set(nxli_loop_t *l, size_t i, nxlt_timer_t *t)
{
    l->heap[i] = t;
    t->heap_i = i + 1;
}

static void heap_up(nxli_loop_t *l, size_t i)
{
    nxlt_timer_t *t = l->heap[i];
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!before(t, l->heap[p]))
            break;
        heap_set(l, i, l->heap[p]);
        i = p;
    }
    heap_set(l, i, t);
}

static void heap_down(nxli_loop_t *l, size_t i)
{
    nxlt_timer_t *t = l->heap[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= l->nheap)
            break;
        if (c + 1 < l->nheap && before(l->heap[c + 1], l->heap[c]))
            c++;
        if (!before(l->heap[c], t))
            break;
        heap_set(l, i, l->heap[c]);
        i = c;
    }
    heap_set(l, i, t);
}

static void heap_remove(nxli_loop_t *l, nxlt_timer_t *t)
{
    if (!t->heap_i)
        return;
    size_t i = t->heap_i - 1;
    t->heap_i = 0;
    nxlt_timer_t *last = l->heap[--l->nheap];
    if (i < l->nheap) {
        heap_set(l, i, last);
        heap_up(l, i);
        heap_down(l, last->heap_i - 1);
    }
}

static int heap_insert(nxli_loop_t *l, nxlt_timer_t *t)
{
    if (l->nheap == l->heap_cap) {
        size_t cap = l->heap_cap ? 2 * l->heap_cap : 16;
        nxlt_timer_t **h = realloc(l->heap, cap * sizeof(*h));
        if (!h)
            return -1;
        l->heap = h;
        l->heap_cap = cap;
    }
    heap_set(l, l->nheap, t);
    l->nheap++;
    heap_up(l, l->nheap - 1);
    return 0;
}

/* Arms the timerfd for the soonest timer (absolute, on the clock of
 * nxlt_now_us(): CLOCK_MONOTONIC), so that the set is readable when it is
 * due. Called outside a turn (a call of the application, or of another
 * thread while a threaded reactor sleeps) and at the end of each turn.
 *
 * A timer due already at the end of a turn (a transport polling from a
 * zero timer, a delivery activated) is left off the timerfd: whoever ran
 * the turn asks nxl_agent_backend_timeout() next (0), as libuv's contract
 * and the reactor thread do, and setting a timerfd for a time past costs
 * more than the turn (arming an hrtimer that is due at once). From outside
 * a turn such a timer does go on the timerfd: nobody may be about to ask.
 * The timerfd is never read: setting it clears it. */
static void tfd_set(nxli_loop_t *l, uint64_t due)
{
    struct itimerspec its = {{0, 0}, {0, 0}};
    if (due) {
        its.it_value.tv_sec = (time_t)(due / 1000000);
        its.it_value.tv_nsec = (long)(due % 1000000) * 1000;
    }
    if (timerfd_settime(l->tfd, TFD_TIMER_ABSTIME, &its, NULL) == 0)
        l->tfd_due = due;
}

static void tfd_sync_at(nxli_loop_t *l, bool turn_end)
{
    if (l->dispatching)
        return; /* inside a turn: its end sets it */
    uint64_t due = l->nheap ? l->heap[0]->due_us : 0;
    if (due == l->tfd_due)
        return;
    uint64_t now = nxli_now_us();
    if (!due) {
        if (l->tfd_due > now)
            return; /* armed for a timer stopped since: one wake-up, then disarmed */
    } else if (due <= now) {
        if (turn_end || (l->tfd_due && l->tfd_due <= due))
            return; /* asked for at once, or the timerfd is readable already */
        /* due at once, from outside a turn (a post of another thread while
         * a threaded reactor sleeps): the eventfd wakes whoever waits, for
         * less than arming the timerfd in the past and then disarming it */
        if (!l->woken) {
            uint64_t one = 1;
            if (write(l->wfd, &one, sizeof(one)) == sizeof(one)) {
                l->woken = true;
                return;
            }
        } else {
            return;
        }
    } else if (due && l->tfd_due > now && l->tfd_due <= due) {
        return; /* fires first anyway; the turn then sets it again */
    }
    tfd_set(l, due);
}

static void tfd_sync(nxli_loop_t *l) { tfd_sync_at(l, false); }

/* ---- watches */

static int ep_io_start(nxli_loop_t *l, nxlt_io_t *io, unsigned events)
{
    struct epoll_event ee = {0};
    ee.data.ptr = io;
    ee.events = (events & NXLT_IO_READ ? EPOLLIN : 0) | (events & NXLT_IO_WRITE ? EPOLLOUT : 0) |
                (events & NXLT_IO_ONCE ? EPOLLONESHOT : 0);
    int rc;
    if (!events)
        rc = io->in_set ? epoll_ctl(l->epfd, EPOLL_CTL_DEL, io->fd, &ee) : 0;
    else
        rc = epoll_ctl(l->epfd, io->in_set ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, io->fd, &ee);
    if (rc < 0 && !(events == 0 && (errno == EBADF || errno == ENOENT))) {
        int e = errno;
        nxli_err(l->agent, "nxlt_io_start: epoll cannot watch descriptor %d: %s%s", io->fd,
                 strerror(e), e == EEXIST ? " (it is watched already: one watch per descriptor)"
                              : e == EPERM ? " (a regular file or a directory cannot be watched)"
                                           : "");
        return -1;
    }
    io->in_set = events != 0;
    io->events = events;
    return 0;
}

static void ep_io_free(nxli_loop_t *l, nxlt_io_t *io) {}

/* ---- timers */

static int ep_timer_new(nxli_loop_t *l, nxlt_timer_t *t) { return 0; }

static void ep_timer_stop(nxli_loop_t *l, nxlt_timer_t *t)
{
    heap_remove(l, t);
    t->due_us = 0;
    t->batch = false;
    tfd_sync(l);
}

static void arm_at(nxli_loop_t *l, nxlt_timer_t *t, uint64_t due)
{
    heap_remove(l, t);
    t->batch = false;
    t->due_us = due ? due : 1;
    t->seq = ++l->armed;
    if (heap_insert(l, t) < 0) {
        t->due_us = 0;
        nxli_log(l->agent, NXL_LOG_ERROR, "agent loop: out of memory arming a timer; it will "
                 "not run");
        return;
    }
    tfd_sync(l);
}

static void ep_timer_start(nxli_loop_t *l, nxlt_timer_t *t, uint64_t after_us)
{
    arm_at(l, t, nxli_now_us() + after_us);
}

/* due at once: before every timer armed for now */
static void ep_timer_activate(nxli_loop_t *l, nxlt_timer_t *t) { arm_at(l, t, 1); }

static int ep_timer_pending(const nxli_loop_t *l, const nxlt_timer_t *t)
{
    return t->heap_i != 0 || t->batch;
}

static void ep_timer_free(nxli_loop_t *l, nxlt_timer_t *t) {}

/* ---- a turn */

static int ep_wait_ms(const nxli_loop_t *l, int timeout_ms)
{
    if (!l->nheap)
        return timeout_ms;
    uint64_t now = nxli_now_us(), due = l->heap[0]->due_us;
    int64_t ms = due <= now ? 0 : (int64_t)((due - now + 999) / 1000);
    if (ms > 0x7fffffff)
        ms = 0x7fffffff;
    return timeout_ms < 0 || ms < timeout_ms ? (int)ms : timeout_ms;
}

/* the timers due now, each once: one armed again (or for 0 us) by a
 * callback of this batch runs in the next turn */
static void run_batch(nxli_loop_t *l, uint64_t now);

/* the timers due now, then those their callbacks activated (a few rounds:
 * libevent runs what a callback activates in the same turn, and a
 * delivery activated by a completion should not wait for another poll) */
static void run_timers(nxli_loop_t *l)
{
    run_batch(l, nxli_now_us());
    for (int round = 0; round < 4 && l->nheap && l->heap[0]->due_us == 1; round++)
        run_batch(l, 1);
}

static void run_batch(nxli_loop_t *l, uint64_t now)
{
    nxlt_timer_t *batch[EP_BATCH];
    size_t n = 0;
    while (l->nheap && l->heap[0]->due_us <= now && n < EP_BATCH) {
        nxlt_timer_t *t = l->heap[0];
        heap_remove(l, t);
        t->due_us = 0;
        t->batch = true;
        batch[n++] = t;
    }
    for (size_t i = 0; i < n; i++) {
        nxlt_timer_t *t = batch[i];
        if (t->dead || !t->batch)
            continue; /* freed, stopped or armed again by an earlier callback */
        t->batch = false;
        l->timers_left = (unsigned)(n - i - 1);
        t->cb(t, t->arg);
    }
    l->timers_left = 0;
}

static int ep_run_once(nxli_loop_t *l, int timeout_ms)
{
    struct epoll_event evs[EP_BATCH];
    int n = epoll_wait(l->epfd, evs, EP_BATCH, ep_wait_ms(l, timeout_ms));
    if (n < 0 && errno != EINTR) {
        nxli_err(l->agent, "agent loop: epoll_wait failed: %s", strerror(errno));
        return -1;
    }
    l->dispatching++;
    l->turn_us = nxli_now_us();
    for (int i = 0; i < n; i++) {
        nxlt_io_t *io = evs[i].data.ptr;
        if (!io)
            continue; /* the timerfd: the due timers run below */
        if (io == (void *)&l->wfd) {
            uint64_t v;
            if (read(l->wfd, &v, sizeof(v)) < 0) {
                /* EAGAIN: read already */
            }
            l->woken = false;
            continue;
        }
        if (io->dead || !io->events)
            continue; /* freed or stopped by an earlier callback of this turn */
        uint32_t e = evs[i].events;
        unsigned ready = (e & (EPOLLIN | EPOLLHUP | EPOLLERR) ? NXLT_IO_READ : 0) |
                         (e & (EPOLLOUT | EPOLLERR) ? NXLT_IO_WRITE : 0);
        ready &= io->events | (e & (EPOLLHUP | EPOLLERR) ? NXLT_IO_READ | NXLT_IO_WRITE : 0);
        if (!ready)
            continue;
        if (io->events & NXLT_IO_ONCE)
            io->events = 0; /* EPOLLONESHOT disarmed it; still in the set */
        l->io_left = (unsigned)(n - i - 1);
        io->cb(io, io->fd, ready, io->arg);
    }
    l->io_left = 0;
    run_timers(l);
    /* A timer this turn's callbacks left due already (a transport's
     * zero-delay kick: progress once more, arm its descriptor) runs now,
     * in one more batch without another epoll_wait. Left for the next
     * turn, it would cost under another loop two waits (the application's
     * on the backend fd, then this one's) and a return to that loop, on
     * the path of a reply that this progress brings in; libevent's next
     * turn costs one wait. Once per turn: a transport that keeps kicking
     * itself still hands the loop back (backend_timeout then says 0). */
    if (l->nheap && l->heap[0]->due_us <= nxli_now_us())
        run_timers(l);
    l->turn_us = 0;
    l->dispatching--;
    tfd_sync_at(l, true);
    nxli_loop_reap(l);
    return 0;
}

static void ep_stop(nxli_loop_t *l) { l->stop_req = true; }

/* what libevent counts as active: descriptors and due timers of this turn
 * not yet run, timers activated (due at 1 us), and inside a turn the timers
 * due when its epoll_wait returned (libevent's timeout_process() makes them
 * active before the first callback: a transport's progress from its
 * descriptor then leaves its arming, several system calls, for after them,
 * and a reply they post goes out first); a timer armed for 0 us during the
 * turn is not (it runs in the turn's batch of due timers, but a transport
 * that waited for it would wait for itself) */
static int ep_busy(const nxli_loop_t *l)
{
    return l->io_left || l->timers_left ||
           (l->nheap && (l->heap[0]->due_us == 1 || l->heap[0]->due_us <= l->turn_us));
}

static int ep_timeout_ms(const nxli_loop_t *l) { return ep_wait_ms(l, -1); }

static void ep_destroy(nxli_loop_t *l)
{
    if (l->tfd >= 0)
        close(l->tfd);
    if (l->wfd >= 0)
        close(l->wfd);
    if (l->epfd >= 0)
        close(l->epfd);
    l->tfd = l->wfd = l->epfd = -1;
}

const nxli_loop_ops_t nxli_loop_epoll = NXLI_LOOP_OPS("epoll", ep);

int nxli_loop_epoll_init(nxli_loop_t *l, char *why, size_t cap)
{
    l->ops = &nxli_loop_epoll;
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    l->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    l->wfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event ee = {.events = EPOLLIN, .data.ptr = NULL},
                       we = {.events = EPOLLIN, .data.ptr = &l->wfd};
    if (l->epfd < 0 || l->tfd < 0 || l->wfd < 0 ||
        epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->tfd, &ee) < 0 ||
        epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->wfd, &we) < 0) {
        snprintf(why, cap, "the agent's epoll set or timerfd could not be made: %s",
                 strerror(errno));
        ep_destroy(l);
        return -1;
    }
    return 0;
}
