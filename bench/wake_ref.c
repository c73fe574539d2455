/* SPDX-License-Identifier: BSD-3-Clause */
/* bench/wake_ref — what one hand-over between two threads costs here: the
 * floor under a threaded agent's calls (a thread that posts a transfer and
 * waits for it needs the reactor thread to run and then itself to be woken).
 *
 *   bench/wake_ref [--iters N]
 *
 * Two threads pass a token back and forth through two semaphores, N round
 * trips, first pinned to one CPU, then to two different CPUs (when there
 * are two); prints microseconds per round trip (two wake-ups). A wake-up
 * of a thread on an idle CPU includes that CPU leaving its idle state: on
 * virtual machines that is a trip through the hypervisor. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static sem_t ping, pong;
static long iters = 200000;

static void pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    pthread_setaffinity_np(pthread_self(), sizeof(s), &s);
}

static void *echo(void *arg)
{
    pin(*(int *)arg);
    for (long i = 0; i < iters; i++) {
        while (sem_wait(&ping) < 0)
            ;
        sem_post(&pong);
    }
    return NULL;
}

static double run(int a, int b)
{
    sem_init(&ping, 0, 0);
    sem_init(&pong, 0, 0);
    pthread_t t;
    pthread_create(&t, NULL, echo, &b);
    pin(a);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < iters; i++) {
        sem_post(&ping);
        while (sem_wait(&pong) < 0)
            ;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    pthread_join(t, NULL);
    sem_destroy(&ping);
    sem_destroy(&pong);
    return ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / 1e3 /
           (double)iters;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--iters") && i + 1 < argc) {
            iters = atol(argv[++i]);
        } else {
            fprintf(stderr, "usage: bench/wake_ref [--iters N]\n");
            return 2;
        }
    }
    if (iters < 1)
        iters = 1;
    cpu_set_t s;
    sched_getaffinity(0, sizeof(s), &s);
    int cpus[2], n = 0;
    for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
        if (CPU_ISSET(c, &s))
            cpus[n++] = c;
    printf("wake_ref: semaphore round trip between two threads, %ld round trips\n", iters);
    printf("same CPU (%d):        %.2f us per round trip\n", cpus[0], run(cpus[0], cpus[0]));
    if (n > 1)
        printf("two CPUs (%d and %d): %.2f us per round trip\n", cpus[0], cpus[1],
               run(cpus[0], cpus[1]));
    return 0;
}
