/* SPDX-License-Identifier: BSD-3-Clause */
/* --loop: what turns the agents of this process.
 *
 *   libevent  the default: the agent's own libevent base, turned by
 *             nxl_agent_run_once(a, ms) (one event_base_loop(EVLOOP_ONCE))
 *   fd        an NXL_LOOP_FD agent and the loop an application of its own
 *             would write: an epoll set of nxlbench's holding the agent's
 *             nxl_agent_backend_fd(), epoll_wait() for at most
 *             min(ms, nxl_agent_backend_timeout()), then
 *             nxl_agent_run_once(a, 0). epoll rather than poll(): a server
 *             that embeds nxl has its own sockets in an epoll set and adds
 *             the agent's descriptor to it (as examples/kv_epoll_server does)
 *   uv        an NXL_LOOP_FD agent attached to a uv_loop_t (<nxl/uv.h>),
 *             turned by uv_run(UV_RUN_ONCE) bounded by a uv timer of ms
 *
 * Every turn of an agent in nxlbench goes through loop_turn(); the waits
 * inside nxl_future_wait() (the setup's metadata exchange, untimed) are the
 * library's own. */
#include "nxlbench.h"

#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#ifdef NXLBENCH_UV
#include <nxl/uv.h>
#endif

const char *const loop_names[] = {"libevent", "fd", "uv"};

const char *loop_desc(void)
{
    switch (O.loop) {
    case LOOP_FD:
        return "fd (NXL_LOOP_FD: epoll_wait on nxl_agent_backend_fd, then "
               "nxl_agent_run_once(a, 0))";
    case LOOP_UV:
        return "uv (NXL_LOOP_FD: nxl_uv_attach, uv_run(UV_RUN_ONCE) bounded by a uv timer)";
    default:
        return "libevent (the agent's own base: nxl_agent_run_once(a, ms))";
    }
}

bool loop_uv_built(void)
{
#ifdef NXLBENCH_UV
    return true;
#else
    return false;
#endif
}

void loop_config(nxl_agent_config_t *c)
{
    c->loop = O.loop == LOOP_LIBEVENT ? NXL_LOOP_LIBEVENT : NXL_LOOP_FD;
}

/* the agents of this process and what watches them (a process turns one
 * agent, two at most: one slot each) */
static struct lslot {
    nxl_agent_t *a;
    int epfd;
} slots[4];

#ifdef NXLBENCH_UV
static uv_loop_t uvl;
static bool uvl_up;
static uv_timer_t bound;

static void bound_cb(uv_timer_t *t) { (void)t; }
#endif

static struct lslot *slot_of(nxl_agent_t *a)
{
    for (size_t i = 0; i < sizeof(slots) / sizeof(slots[0]); i++)
        if (slots[i].a == a)
            return &slots[i];
    return NULL;
}

void loop_attach(nxl_agent_t *a)
{
    if (O.loop == LOOP_LIBEVENT)
        return;
    struct lslot *s = slot_of(NULL);
    if (!s)
        die("--loop %s: more agents in one process than nxlbench expects", loop_names[O.loop]);
    s->a = a;
    s->epfd = -1;
    if (O.loop == LOOP_FD) {
        int fd = nxl_agent_backend_fd(a);
        if (fd < 0)
            die("--loop fd: nxl_agent_backend_fd: %s", nxl_agent_last_error(a));
        s->epfd = epoll_create1(EPOLL_CLOEXEC);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = s};
        if (s->epfd < 0 || epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
            die("--loop fd: an epoll set for the agent's descriptor: %s", strerror(errno));
        return;
    }
#ifdef NXLBENCH_UV
    if (!uvl_up) {
        if (uv_loop_init(&uvl) != 0)
            die("--loop uv: uv_loop_init failed");
        uv_timer_init(&uvl, &bound);
        uvl_up = true;
    }
    if (nxl_uv_attach(a, &uvl) != NXL_SUCCESS)
        die("--loop uv: nxl_uv_attach: %s", nxl_agent_last_error(a));
#else
    die("--loop uv: this nxlbench was built without libuv");
#endif
}

void loop_detach(nxl_agent_t *a)
{
    struct lslot *s = O.loop == LOOP_LIBEVENT ? NULL : slot_of(a);
    if (!s)
        return;
    if (s->epfd >= 0)
        close(s->epfd);
#ifdef NXLBENCH_UV
    if (O.loop == LOOP_UV) {
        nxl_uv_detach(a, &uvl);
        uv_run(&uvl, UV_RUN_NOWAIT); /* the handles' close callbacks */
    }
#endif
    s->a = NULL;
    s->epfd = -1;
}

void loop_turn(nxl_agent_t *a, int ms)
{
    if (O.loop == LOOP_LIBEVENT) {
        nxl_agent_run_once(a, ms);
        return;
    }
    struct lslot *s = slot_of(a);
    if (!s)
        die("--loop %s: an agent turned before loop_attach()", loop_names[O.loop]);
    if (O.loop == LOOP_FD) {
        int t = nxl_agent_backend_timeout(a);
        int w = ms < 0 ? t : t < 0 || ms < t ? ms : t;
        struct epoll_event ev;
        if (epoll_wait(s->epfd, &ev, 1, w) < 0 && errno != EINTR)
            die("--loop fd: epoll_wait: %s", strerror(errno));
        nxl_agent_run_once(a, 0);
        return;
    }
#ifdef NXLBENCH_UV
    if (ms == 0) {
        uv_run(&uvl, UV_RUN_NOWAIT);
        return;
    }
    if (ms > 0)
        uv_timer_start(&bound, bound_cb, (uint64_t)ms, (uint64_t)ms); /* repeating: see testlib.h */
    uv_run(&uvl, UV_RUN_ONCE);
    if (ms > 0)
        uv_timer_stop(&bound);
#endif
}
