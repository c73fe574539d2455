/* The POSIX transport's io_uring engine: one ring whose eventfd sits in the
 * reactor (EV_READ | EV_PERSIST). Pending segments are turned into SQEs as
 * long as the ring has room (at most its SQ size in flight, so the CQ,
 * twice as large, never overflows) and submitted as one batch; each
 * wake-up reaps every CQE, hands the results to the core and refills. */
#include "posix.h"

#ifdef NXL_HAVE_LIBURING

#include <errno.h>
#include <event2/event.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

typedef struct ur {
    struct io_uring ring;
    int efd;
    struct event *ev, *retry;
    unsigned inflight, cap;
} ur_t;

static void ur_pump(px_t *u);

static void ur_reap(px_t *u)
{
    ur_t *r = u->eng_state;
    struct io_uring_cqe *cqe;
    while (io_uring_peek_cqe(&r->ring, &cqe) == 0) {
        px_seg_t *s = io_uring_cqe_get_data(cqe);
        int res = cqe->res;
        io_uring_cqe_seen(&r->ring, cqe);
        r->inflight--;
        px_seg_result(u, s, res);
    }
}

static void ur_on_efd(evutil_socket_t fd, short what, void *arg)
{
    px_t *u = arg;
    ur_t *r = u->eng_state;
    uint64_t v;
    /* read first: a CQE posted after this wakes us again */
    if (read(r->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
        nxlt_log(u->ctx, NXL_LOG_WARN, "POSIX: reading the io_uring eventfd: %s",
                 strerror(errno));
    ur_reap(u);
    ur_pump(u);
}

static void ur_on_retry(evutil_socket_t fd, short what, void *arg)
{
    ur_pump(arg);
}

static void ur_pump(px_t *u)
{
    ur_t *r = u->eng_state;
    px_seg_t *s;
    while (r->inflight < r->cap && (s = px_seg_next(u))) {
        struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
        if (!sqe) {
            px_seg_requeue(u, s);
            break;
        }
        size_t len;
        int fd = px_seg_fd(u, s, &len);
        if (s->xop->write)
            io_uring_prep_write(sqe, fd, s->buf, (unsigned)len, s->off);
        else
            io_uring_prep_read(sqe, fd, s->buf, (unsigned)len, s->off);
        io_uring_sqe_set_data(sqe, s);
        s->state = PX_S_INFLIGHT;
        r->inflight++;
    }
    if (!io_uring_sq_ready(&r->ring))
        return;
    int rc = io_uring_submit(&r->ring);
    if (rc >= 0 && !io_uring_sq_ready(&r->ring))
        return;
    /* the kernel took none or part (EAGAIN, EBUSY: out of resources):
     * what is left stays in the SQ; try again shortly */
    if (rc < 0 && rc != -EAGAIN && rc != -EBUSY && rc != -EINTR)
        nxlt_log(u->ctx, NXL_LOG_WARN, "POSIX: io_uring_submit: %s; retrying", strerror(-rc));
    struct timeval tv = {0, 1000};
    if (!evtimer_pending(r->retry, NULL))
        evtimer_add(r->retry, &tv);
}

static int ur_start(px_t *u, char *why, size_t cap)
{
    ur_t *r = calloc(1, sizeof(*r));
    if (!r) {
        snprintf(why, cap, "out of memory");
        return -1;
    }
    r->efd = -1;
    struct io_uring_params p;
    memset(&p, 0, sizeof(p));
    int rc = io_uring_queue_init_params(u->depth, &r->ring, &p);
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
    r->ev = event_new(nxlt_base(u->ctx), r->efd, EV_READ | EV_PERSIST, ur_on_efd, u);
    r->retry = evtimer_new(nxlt_base(u->ctx), ur_on_retry, u);
    if (!r->ev || !r->retry || event_add(r->ev, NULL) < 0) {
        snprintf(why, cap, "libevent could not watch the io_uring eventfd");
        goto fail;
    }
    r->cap = p.sq_entries;
    u->eng_state = r;
    snprintf(u->desc, sizeof(u->desc), "io_uring (%u entries, eventfd in the reactor)",
             p.sq_entries);
    return 0;
fail:
    if (r->ev)
        event_free(r->ev);
    if (r->retry)
        event_free(r->retry);
    if (r->efd >= 0)
        close(r->efd);
    io_uring_queue_exit(&r->ring);
    free(r);
    return -1;
}

static void ur_stop(px_t *u)
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
            nxlt_log(u->ctx, NXL_LOG_ERROR, "POSIX: io_uring_wait_cqe at teardown: %s",
                     strerror(-rc));
            break;
        }
        px_seg_t *s = io_uring_cqe_get_data(cqe);
        int res = cqe->res;
        io_uring_cqe_seen(&r->ring, cqe);
        r->inflight--;
        px_seg_result(u, s, res);
    }
    event_free(r->ev);
    event_free(r->retry);
    io_uring_queue_exit(&r->ring);
    close(r->efd);
    free(r);
    u->eng_state = NULL;
}

const px_engine_t px_engine_uring = {
    .name = "io_uring",
    .start = ur_start,
    .pump = ur_pump,
    .stop = ur_stop,
};

#else /* !NXL_HAVE_LIBURING */

#include <stdio.h>

static int ur_start(px_t *u, char *why, size_t cap)
{
    snprintf(why, cap, "this build has no io_uring engine (configure found no liburing)");
    return -1;
}

static void ur_nop(px_t *u) {}

const px_engine_t px_engine_uring = {
    .name = "io_uring",
    .start = ur_start,
    .pump = ur_nop,
    .stop = ur_nop,
};

#endif
