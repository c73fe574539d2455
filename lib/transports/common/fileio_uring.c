/* SPDX-License-Identifier: BSD-3-Clause */
/* The file-I/O core's io_uring engine (POSIX's): one ring whose eventfd sits in the
 * reactor (a watch for reading). Pending segments are turned into SQEs as
 * long as the ring has room (at most its SQ size in flight, so the CQ,
 * twice as large, never overflows) and submitted as one batch; each
 * wake-up reaps every CQE, hands the results to the core and refills.
 *
 * Segments posted from application callbacks (a completion reposting the
 * next read) are submitted together at the end of the loop turn, while
 * less than FIO_BATCH_BYTES wait: one system call for many small requests.
 * Larger ones go at once, each its own request: requests submitted in one
 * call are merged by the block layer when contiguous, and a few large
 * requests keep a disk less busy than many parallel ones.
 *
 * With the agent's busy_poll_us set, the engine does not go back to sleep
 * while I/O is in flight and completions keep coming: it watches the CQ
 * ring (shared memory, no system call) for a short slice at a time and
 * gives the loop a turn in between, as the UCX transport does with its
 * worker. Sleeping and being woken per completion (eventfd, epoll, the
 * idle vCPU's timer) costs a few microseconds each time, which is what
 * separates a reactor from fio's tight loop once the storage is fast. */
#include "fileio.h"

#ifdef NXL_HAVE_LIBURING

#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define SPIN_SLICE_US 50          /* busy polling: longest spin before the loop gets a turn */
#define FIO_BATCH_BYTES (64u << 10) /* from callbacks: submit at the turn's end below this */

typedef struct ur {
    struct io_uring ring;
    int efd;
    nxlt_io_t *ev;
    nxlt_timer_t *retry, *kick, *flush;
    unsigned inflight, cap;
    size_t sq_bytes;         /* bytes prepared in the SQ, not yet submitted */
    uint64_t busy_until_us;  /* busy polling: keep watching the CQ until then */
    pthread_t reactor;       /* threaded agents: the thread our callbacks run on */
    bool reactor_known;
} ur_t;

static void ur_pump(nxl_fio_t *u);

/* runs ur_turn from the loop on its next pass (busy polling) */
static void ur_kick(ur_t *r)
{
    if (!nxlt_timer_pending(r->kick))
        nxlt_timer_start(r->kick, 0);
}


static unsigned ur_reap(nxl_fio_t *u)
{
    ur_t *r = u->eng_state;
    struct io_uring_cqe *cqe;
    unsigned n = 0;
    while (io_uring_peek_cqe(&r->ring, &cqe) == 0) {
        nxl_fio_seg_t *s = io_uring_cqe_get_data(cqe);
        int res = cqe->res;
        io_uring_cqe_seen(&r->ring, cqe);
        r->inflight--;
        n++;
        nxl_fio_seg_result(u, s, res);
    }
    return n;
}

/* completions wait as task work for this thread to enter the kernel */
static bool ur_taskrun(ur_t *r)
{
#ifdef IORING_SQ_TASKRUN
    return IO_URING_READ_ONCE(*r->ring.sq.kflags) & IORING_SQ_TASKRUN;
#else
    return false;
#endif
}

/* Busy polling: watches the CQ ring for up to one slice, until a CQE
 * arrives or something else in the loop is ready to run (a delivery the
 * reap queued, another transport's event). Then the loop gets a turn and
 * the kick brings us back while the window lasts. */
static void ur_busy(nxl_fio_t *u, unsigned got)
{
    ur_t *r = u->eng_state;
    unsigned bp = nxlt_busy_poll_us(u->ctx);
    if (!bp || !r->inflight) {
        r->busy_until_us = 0;
        return;
    }
    uint64_t now = nxlt_now_us();
    if (got)
        r->busy_until_us = now + bp;
    if (now >= r->busy_until_us)
        return; /* the window closed: the eventfd wakes us */
    if (!nxlt_loop_busy(u->ctx)) {
        uint64_t end = now + SPIN_SLICE_US < r->busy_until_us ? now + SPIN_SLICE_US
                                                              : r->busy_until_us;
        for (unsigned i = 1; !io_uring_cq_ready(&r->ring) && !ur_taskrun(r); i++)
            if (!(i & 63) && (nxlt_now_us() >= end || nxlt_loop_busy(u->ctx)))
                break;
    }
    ur_kick(r);
}

static void ur_turn(nxl_fio_t *u)
{
    unsigned got = ur_reap(u);
    ur_pump(u);
    ur_busy(u, got);
}

static void ur_on_efd(nxlt_io_t *io, int fd, unsigned ready, void *arg)
{
    nxl_fio_t *u = arg;
    ur_t *r = u->eng_state;
    nxl_fio_efd_drain(u, r->efd, "the io_uring"); /* first: a later CQE wakes us again */
    ur_turn(u);
}

static void ur_on_kick(nxlt_timer_t *t, void *arg) { ur_turn(arg); }

static void ur_on_retry(nxlt_timer_t *t, void *arg)
{
    ur_pump(arg);
}

/* hands what the SQ holds to the kernel */
static void ur_submit(nxl_fio_t *u)
{
    ur_t *r = u->eng_state;
    if (!io_uring_sq_ready(&r->ring))
        return;
    int rc = io_uring_submit(&r->ring);
    if (rc > 0)
        u->n_submits++;
    unsigned bp = nxlt_busy_poll_us(u->ctx);
    if (bp && rc > 0) {
        /* new work: poll for it from the loop rather than sleep */
        r->busy_until_us = nxlt_now_us() + bp;
        ur_kick(r);
    }
    if (rc >= 0 && !io_uring_sq_ready(&r->ring)) {
        r->sq_bytes = 0;
        return;
    }
    /* the kernel took none or part (EAGAIN, EBUSY: out of resources):
     * what is left stays in the SQ; try again shortly */
    if (rc < 0 && rc != -EAGAIN && rc != -EBUSY && rc != -EINTR)
        nxlt_log(u->ctx, NXL_LOG_WARN, "%s: io_uring_submit: %s; retrying", u->ops->name,
                 strerror(-rc));
    if (!nxlt_timer_pending(r->retry))
        nxlt_timer_start(r->retry, 1000);
}

/* the end of a loop turn in which callbacks posted: one submission */
static void ur_on_flush(nxlt_timer_t *t, void *arg)
{
    nxl_fio_t *u = arg;
    ur_t *r = u->eng_state;
    r->reactor = pthread_self();
    r->reactor_known = true;
    ur_submit(u);
}

/* In a threaded agent a posting thread runs our calls itself while the
 * reactor sleeps (NXLT_CAP_ANY_THREAD). io_uring's task work belongs to
 * the thread that submits (its completions wait for that thread to enter
 * the kernel, and its exit cancels them), so only the reactor thread
 * submits: another one fills the SQ and leaves the submission to the
 * flush timer. */
static bool ur_away(nxl_fio_t *u)
{
    ur_t *r = u->eng_state;
    return nxlt_threaded(u->ctx) &&
           !(r->reactor_known && pthread_equal(pthread_self(), r->reactor));
}

static void ur_pump(nxl_fio_t *u)
{
    ur_t *r = u->eng_state;
    nxl_fio_seg_t *s;
    while (r->inflight < r->cap && (s = nxl_fio_seg_next(u))) {
        struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
        if (!sqe) {
            nxl_fio_seg_requeue(u, s);
            break;
        }
        size_t len;
        int fd = u->ops->seg_fd(u, s, &len);
        if (s->xop->write)
            io_uring_prep_write(sqe, fd, s->buf, (unsigned)len, s->off);
        else
            io_uring_prep_read(sqe, fd, s->buf, (unsigned)len, s->off);
        io_uring_sqe_set_data(sqe, s);
        s->state = NXL_FIO_S_INFLIGHT;
        r->inflight++;
        r->sq_bytes += len;
    }
    if (!io_uring_sq_ready(&r->ring))
        return;
    if (ur_away(u) || (nxlt_in_callback(u->ctx) && r->sq_bytes < FIO_BATCH_BYTES)) {
        /* runs after the callbacks of this turn, before the loop sleeps */
        nxlt_timer_activate(r->flush);
        return;
    }
    ur_submit(u);
}

static int ur_start(nxl_fio_t *u, char *why, size_t cap)
{
    ur_t *r = calloc(1, sizeof(*r));
    if (!r) {
        snprintf(why, cap, "out of memory");
        return -1;
    }
    r->efd = -1;
    struct io_uring_params p;
    memset(&p, 0, sizeof(p));
#if defined(IORING_SETUP_COOP_TASKRUN) && defined(IORING_SETUP_TASKRUN_FLAG)
    /* Completions that finish elsewhere (io-wq workers, interrupts) reach
     * this thread as task work. By default each one interrupts it with an
     * IPI when it is running; cooperative: it runs them on its next entry
     * into the kernel, which a reactor makes all the time, and a sleeping
     * thread is still woken. The flag in the SQ ring tells us when there
     * are some to collect. Kernels before 5.19 refuse it: plain then, as
     * with coop_taskrun=0. */
    if (u->coop)
        p.flags = IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG;
#endif
    int rc = io_uring_queue_init_params(u->depth, &r->ring, &p);
    if (rc == -EINVAL && p.flags) {
        memset(&p, 0, sizeof(p));
        rc = io_uring_queue_init_params(u->depth, &r->ring, &p);
    }
    if (rc < 0) {
        snprintf(why, cap, "io_uring_queue_init(%u entries) failed: %s", u->depth, strerror(-rc));
        free(r);
        return -1;
    }
    r->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (r->efd < 0) {
        snprintf(why, cap, "eventfd failed: %s", strerror(errno));
        goto fail;
    }
    rc = io_uring_register_eventfd(&r->ring, r->efd);
    if (rc < 0) {
        snprintf(why, cap, "io_uring_register_eventfd failed: %s", strerror(-rc));
        goto fail;
    }
    r->ev = nxlt_io_new(u->ctx, r->efd, ur_on_efd, u);
    r->retry = nxlt_timer_new(u->ctx, ur_on_retry, u);
    r->kick = nxlt_timer_new(u->ctx, ur_on_kick, u);
    r->flush = nxlt_timer_new(u->ctx, ur_on_flush, u);
    if (!r->ev || !r->retry || !r->kick || !r->flush || nxlt_io_start(r->ev, NXLT_IO_READ) < 0) {
        snprintf(why, cap, "the loop could not watch the io_uring eventfd");
        goto fail;
    }
    r->cap = p.sq_entries;
    u->eng_state = r;
    snprintf(u->desc, sizeof(u->desc), "io_uring (%u entries, eventfd in the reactor%s%s)",
             p.sq_entries, p.flags ? ", cooperative task work" : "",
             nxlt_busy_poll_us(u->ctx) ? ", busy polling the CQ" : "");
    return 0;
fail:
    nxlt_io_free(r->ev);
    nxlt_timer_free(r->retry);
    nxlt_timer_free(r->kick);
    nxlt_timer_free(r->flush);
    if (r->efd >= 0)
        close(r->efd);
    io_uring_queue_exit(&r->ring);
    free(r);
    return -1;
}

static void ur_stop(nxl_fio_t *u)
{
    ur_t *r = u->eng_state;
    if (!r)
        return;
    /* the kernel may still be writing into the application's buffers:
     * wait for every submission to complete */
    if (io_uring_sq_ready(&r->ring))
        io_uring_submit(&r->ring);
    while (r->inflight) {
        struct io_uring_cqe *cqe;
        int rc = io_uring_wait_cqe(&r->ring, &cqe);
        if (rc == -EINTR || rc == -EAGAIN)
            continue;
        if (rc < 0) {
            nxlt_log(u->ctx, NXL_LOG_ERROR, "%s: io_uring_wait_cqe at teardown: %s",
                     u->ops->name, strerror(-rc));
            break;
        }
        nxl_fio_seg_t *s = io_uring_cqe_get_data(cqe);
        int res = cqe->res;
        io_uring_cqe_seen(&r->ring, cqe);
        r->inflight--;
        nxl_fio_seg_result(u, s, res);
    }
    nxlt_io_free(r->ev);
    nxlt_timer_free(r->retry);
    nxlt_timer_free(r->kick);
    nxlt_timer_free(r->flush);
    io_uring_queue_exit(&r->ring);
    close(r->efd);
    free(r);
    u->eng_state = NULL;
}

const nxl_fio_engine_t nxl_fio_engine_uring = {
    .name = "io_uring",
    .start = ur_start,
    .pump = ur_pump,
    .stop = ur_stop,
};

#else /* !NXL_HAVE_LIBURING */

#include <stdio.h>

static int ur_start(nxl_fio_t *u, char *why, size_t cap)
{
    snprintf(why, cap, "this build has no io_uring engine (configure found no liburing)");
    return -1;
}

static void ur_nop(nxl_fio_t *u) {}

const nxl_fio_engine_t nxl_fio_engine_uring = {
    .name = "io_uring",
    .start = ur_start,
    .pump = ur_nop,
    .stop = ur_nop,
};

#endif
