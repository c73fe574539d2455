/* SPDX-License-Identifier: BSD-3-Clause */
/* bench/epoll_nest_ref — what waking through a nested epoll set costs
 * here: the floor under the latency of an NXL_LOOP_FD agent (--loop fd and
 * uv of nxlbench) against one on libevent.
 *
 *   bench/epoll_nest_ref [--iters N] [--rounds R]
 *
 * Two processes, pinned to the first two CPUs allowed, pass a byte back and
 * forth over an AF_UNIX datagram pair (how UCX's shared-memory transport
 * wakes a peer), each waiting for it in epoll_wait() either
 *   direct: on an epoll set holding the socket (an agent on libevent), or
 *   nested: on a set holding a second set that holds the socket, then
 *           epoll_wait(0) on that second one (an application's loop
 *           watching nxl_agent_backend_fd(), then nxl_agent_run_once()).
 * Both make the same other calls. Prints the one-way time of each, the
 * medians of R alternated rounds of N round trips, and nested / direct
 * (of the medians, and of the minima: the least disturbed on a shared
 * machine). */
#define _GNU_SOURCE
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long iters = 20000;

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static void pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    sched_setaffinity(0, sizeof(s), &s);
}

/* one side: @p first sends the first byte and times the round trips */
static double side(int fd, bool nested, bool first)
{
    int in = epoll_create1(EPOLL_CLOEXEC), wait_on = in;
    struct epoll_event e = {.events = EPOLLIN, .data.fd = fd};
    if (in < 0 || epoll_ctl(in, EPOLL_CTL_ADD, fd, &e) < 0)
        return -1;
    if (nested) {
        struct epoll_event o = {.events = EPOLLIN, .data.fd = in};
        if ((wait_on = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
            epoll_ctl(wait_on, EPOLL_CTL_ADD, in, &o) < 0)
            return -1;
    }
    char b[8] = {0};
    double t0 = now_us();
    if (first && send(fd, b, 1, 0) != 1)
        return -1;
    for (long i = 0; i < iters; i++) {
        struct epoll_event ev[64];
        if (epoll_wait(wait_on, ev, 1, -1) != 1)
            return -1;
        if (nested)
            epoll_wait(in, ev, 64, 0);
        while (recv(fd, b, sizeof(b), MSG_DONTWAIT) > 0)
            ;
        if (!(first && i == iters - 1) && send(fd, b, 1, 0) != 1)
            return -1;
    }
    double us = (now_us() - t0) / (double)iters / 2;
    if (nested)
        close(wait_on);
    close(in);
    return us;
}

static double run(bool nested, const int cpu[2])
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv) < 0)
        return -1;
    pid_t p = fork();
    if (p == 0) {
        pin(cpu[1]);
        close(sv[0]);
        _exit(side(sv[1], nested, false) < 0);
    }
    pin(cpu[0]);
    close(sv[1]);
    double us = p < 0 ? -1 : side(sv[0], nested, true);
    close(sv[0]);
    int st;
    if (p > 0 && (waitpid(p, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st)))
        us = -1;
    return us;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int rounds = 7;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--iters") && i + 1 < argc) {
            iters = atol(argv[++i]);
        } else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
            rounds = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: bench/epoll_nest_ref [--iters N] [--rounds R]\n");
            return 2;
        }
    }
    if (iters < 1)
        iters = 1;
    if (rounds < 1 || rounds > 99)
        rounds = 7;
    cpu_set_t s;
    sched_getaffinity(0, sizeof(s), &s);
    int cpu[2], n = 0;
    for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
        if (CPU_ISSET(c, &s))
            cpu[n++] = c;
    if (n < 2)
        cpu[1] = cpu[0];
    double d[99], nst[99];
    for (int r = 0; r < rounds; r++) {
        d[r] = run(false, cpu);
        nst[r] = run(true, cpu);
        if (d[r] < 0 || nst[r] < 0) {
            fprintf(stderr, "epoll_nest_ref: a round failed\n");
            return 1;
        }
    }
    qsort(d, (size_t)rounds, sizeof(d[0]), cmp);
    qsort(nst, (size_t)rounds, sizeof(nst[0]), cmp);
    double md = d[rounds / 2], mn = nst[rounds / 2];
    printf("epoll_nest_ref: AF_UNIX ping-pong, CPUs %d and %d, medians of %d rounds of %ld "
           "round trips\n", cpu[0], cpu[1], rounds, iters);
    printf("direct (epoll set on the socket):        %.2f us one way (%.2f-%.2f)\n", md, d[0],
           d[rounds - 1]);
    printf("nested (set in a set, then its wait(0)): %.2f us one way (%.2f-%.2f)\n", mn, nst[0],
           nst[rounds - 1]);
    /* on a shared machine the minima are the ones least disturbed */
    printf("nested / direct: %.2f (medians), %.2f (minima)\n", md > 0 ? mn / md : 0,
           d[0] > 0 ? nst[0] / d[0] : 0);
    return 0;
}
