/* SPDX-License-Identifier: BSD-3-Clause */
/* LIBFABRIC: the doorbell of timer mode */
#include "lf.h"

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
    nxl_lf_kick(u);
}

void nxl_lf_ring(lf_conn_t *c)
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

static void on_bell(nxlt_io_t *io, int fd, unsigned ready, void *arg)
{
    lf_t *u = arg;
    char b[64];
    while (recv(fd, b, sizeof(b), MSG_DONTWAIT) >= 0)
        ;
    u->net.hit = true; /* back to polling often */
    bell_window(u, nxlt_now_us());
    nxl_lf_progress(u, true);
}

/* Our doorbell: an abstract unix datagram socket, in timer mode only. */
void nxl_lf_bell_open(lf_t *u)
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
        !(u->io_bell = nxlt_io_new(u->ctx, fd, on_bell, u)) ||
        nxlt_io_start(u->io_bell, NXLT_IO_READ)) {
        nxlt_log(u->ctx, NXL_LOG_DEBUG, "LIBFABRIC: no doorbell (%s): peers' operations are "
                 "noticed by polling only", strerror(errno));
        nxlt_io_free(u->io_bell);
        u->io_bell = NULL;
        close(fd);
        return;
    }
    u->bell_fd = fd;
    memcpy(u->bell_name, a.sun_path, 1 + (size_t)n);
    u->bell_name_len = 1 + (size_t)n;
}
