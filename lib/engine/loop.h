/* SPDX-License-Identifier: BSD-3-Clause */
/* The agent's loop: every watch and timer of the engine and its transports
 * (nxlt_io_t, nxlt_timer_t in nxl/transport.h), kept here and handed to one
 * backend — a libevent base (loop_libevent.c) or the agent's own epoll set
 * and timerfd (loop_epoll.c, nxl_agent_backend_fd()). */
#ifndef NXL_ENGINE_LOOP_H
#define NXL_ENGINE_LOOP_H

#include <nxl/transport.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

struct event_base;
typedef struct nxli_loop nxli_loop_t;

struct nxlt_io {
    void *grave;      /* first: freed while the loop dispatches, the next one buried */
    nxli_loop_t *loop;
    int fd;
    unsigned events;  /* watched now, with NXLT_IO_ONCE */
    nxlt_io_cb cb;
    void *arg;
    void *bk;         /* the backend's (libevent: struct event *) */
    bool in_set;      /* epoll: registered in the set */
    bool dead;        /* freed while the loop dispatches: freed after */
};

struct nxlt_timer {
    void *grave;      /* first, as in nxlt_io */
    nxli_loop_t *loop;
    nxlt_timer_cb cb;
    void *arg;
    void *bk;         /* libevent: struct event * */
    uint64_t due_us;  /* epoll: when (0: not pending) */
    uint64_t seq;     /* epoll: order of arming: timers due at the same time run in it */
    size_t heap_i;    /* epoll: its index in the heap, +1 (0: not there) */
    bool batch;       /* epoll: due, in the batch being run */
    bool dead;
};

typedef struct nxli_loop_ops {
    const char *name;
    int (*io_start)(nxli_loop_t *l, nxlt_io_t *io, unsigned events);
    void (*io_free)(nxli_loop_t *l, nxlt_io_t *io);
    int (*timer_new)(nxli_loop_t *l, nxlt_timer_t *t);
    void (*timer_start)(nxli_loop_t *l, nxlt_timer_t *t, uint64_t after_us);
    void (*timer_activate)(nxli_loop_t *l, nxlt_timer_t *t);
    void (*timer_stop)(nxli_loop_t *l, nxlt_timer_t *t);
    int (*timer_pending)(const nxli_loop_t *l, const nxlt_timer_t *t);
    void (*timer_free)(nxli_loop_t *l, nxlt_timer_t *t);
    /* one turn: wait at most timeout_ms (0: not at all; <0: no limit);
     * -1 when the backend failed */
    int (*run_once)(nxli_loop_t *l, int timeout_ms);
    void (*stop)(nxli_loop_t *l);
    int (*busy)(const nxli_loop_t *l);
    int (*timeout_ms)(const nxli_loop_t *l);
    void (*destroy)(nxli_loop_t *l);
} nxli_loop_ops_t;

/* a backend's table, its functions named PREFIX_io_start, ... */
#define NXLI_LOOP_OPS(nm, p)                                                                  \
    {                                                                                         \
        .name = nm, .io_start = p##_io_start, .io_free = p##_io_free,                         \
        .timer_new = p##_timer_new, .timer_start = p##_timer_start,                           \
        .timer_activate = p##_timer_activate, .timer_stop = p##_timer_stop,                   \
        .timer_pending = p##_timer_pending, .timer_free = p##_timer_free,                     \
        .run_once = p##_run_once, .stop = p##_stop, .busy = p##_busy,                         \
        .timeout_ms = p##_timeout_ms, .destroy = p##_destroy,                                 \
    }

struct nxli_loop {
    const nxli_loop_ops_t *ops;
    struct nxl_agent *agent;
    struct event_base *base; /* libevent: the base */
    void *bound;             /* libevent: the timer that bounds run_once's wait */
    bool own_base;
    int epfd, tfd;           /* epoll: the set and its timerfd */
    int wfd;                 /* epoll: an eventfd in the set: work due at once, from outside a turn */
    bool woken;              /* epoll: wfd written and not read yet */
    nxlt_timer_t **heap;     /* epoll: pending timers, soonest first */
    size_t nheap, heap_cap;
    uint64_t armed;          /* epoll: timers armed so far (nxlt_timer.seq) */
    uint64_t tfd_due;        /* epoll: what the timerfd is armed for (0: disarmed) */
    uint64_t turn_us;        /* epoll: when this turn's epoll_wait returned (0: no turn) */
    int dispatching;         /* >0 inside callbacks: frees are deferred */
    unsigned io_left;        /* epoll: descriptors of this turn still to run */
    unsigned timers_left;    /* epoll: due timers of this turn still to run */
    bool stop_req;
    unsigned nio, ntimers;   /* alive, for the agent's knowledge and leak checks */
    void *graves;            /* watches and timers freed while dispatching (their grave links) */
};

/* makes the agent's loop: on @p base (NULL: one of its own) or, with kind
 * NXL_LOOP_FD, an epoll set; a sentence for nxl_agent_create() in @p why */
nxli_loop_t *nxli_loop_new(struct nxl_agent *a, int kind, struct event_base *base, char *why,
                           size_t cap);
void nxli_loop_free(nxli_loop_t *l);
nxlt_io_t *nxli_io_new(struct nxl_agent *a, int fd, nxlt_io_cb cb, void *arg);
nxlt_timer_t *nxli_timer_new(struct nxl_agent *a, nxlt_timer_cb cb, void *arg);

/* for the backends: frees what callbacks freed while dispatching */
void nxli_loop_reap(nxli_loop_t *l);

extern const nxli_loop_ops_t nxli_loop_libevent;
extern const nxli_loop_ops_t nxli_loop_epoll;
int nxli_loop_epoll_init(nxli_loop_t *l, char *why, size_t cap);
int nxli_loop_libevent_init(nxli_loop_t *l, struct event_base *base, char *why, size_t cap);

#endif
