/* SPDX-License-Identifier: BSD-3-Clause */
/* Cross-memory attach: one large copy shared by two threads.
 *
 * A single process_vm_writev/readv copies on one CPU, at most about 0.7
 * of what one thread's memcpy does (the kernel's copy, and the pages
 * pinned at both sides). With one transfer at a time the peer's process
 * waits, asleep, and its CPU is free: a call of at least cma_split bytes
 * is cut into CMA_SPLIT_PIECES pieces, which this thread and a copy
 * thread of the agent's take in turn from a shared counter, each piece
 * its own system call. The call returns once every piece taken is done:
 * the copy is as synchronous as one system call was (a WRITE completes
 * only when all its bytes are at the target), and when the copy thread is
 * late to wake (or asleep for good), the caller takes every piece itself.
 *
 * The copy thread is started with the first such copy, sleeps on a futex
 * between them (no wake-up while no copy is large enough), and is joined
 * at the agent's destroy. It runs on the CPUs of the calling thread and of
 * the peer's process (sched_getaffinity): with an initiator pinned to one
 * CPU, the peer's CPU (idle while the peer waits for the transfer) does
 * half of the copy; where that makes a single CPU, no copy is shared. */
#include "config.h"
#include "ucx.h"

#include <linux/futex.h>
#include <signal.h>
#include <stdatomic.h>
#include <sched.h>

#define PIECES CMA_SPLIT_PIECES
#define CLOSED (1 << 28) /* the claim counter between copies: no piece to take */

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

typedef struct piece {
    struct iovec *l, *r;
    unsigned cnt;
    size_t len;
    ssize_t got;
    int err;
} piece_t;

struct ucx_split {
    pthread_t th;
    pid_t owner; /* the process that started it (a child forked since has no copy thread) */
    _Atomic uint32_t gen; /* futex word: a new copy, or stop */
    _Atomic bool stop;
    _Atomic int next;    /* the next piece to take (CLOSED between copies) */
    _Atomic int pending; /* pieces taken or not, not done */
    /* the copy: written before next is opened */
    pid_t pid;
    bool read;
    piece_t p[PIECES];
    struct iovec *liov, *riov; /* IOV_MAX + PIECES each */
    /* the CPUs for a peer: computed when the peer changes */
    pid_t cpus_pid;
    bool cpus_ok;
};

static long futex_(_Atomic uint32_t *w, int op, uint32_t v)
{
    return syscall(SYS_futex, (uint32_t *)w, op | FUTEX_PRIVATE_FLAG, v, NULL, NULL, 0);
}

static void piece_copy(ucx_split_t *s, piece_t *p)
{
    p->got = s->read ? process_vm_readv(s->pid, p->l, p->cnt, p->r, p->cnt, 0)
                     : process_vm_writev(s->pid, p->l, p->cnt, p->r, p->cnt, 0);
    p->err = p->got < 0 ? errno : 0;
}

/* takes pieces until none is left */
static void take_pieces(ucx_split_t *s)
{
    int j;
    while ((j = atomic_fetch_add_explicit(&s->next, 1, memory_order_acquire)) < PIECES) {
        piece_copy(s, &s->p[j]);
        atomic_fetch_sub_explicit(&s->pending, 1, memory_order_release);
    }
}

static void *copy_thread(void *arg)
{
    ucx_split_t *s = arg;
    uint32_t seen = 0;
    for (;;) {
        uint32_t g = atomic_load_explicit(&s->gen, memory_order_acquire);
        if (atomic_load_explicit(&s->stop, memory_order_acquire))
            return NULL;
        if (g == seen) {
            futex_(&s->gen, FUTEX_WAIT, g);
            continue;
        }
        seen = g;
        take_pieces(s);
    }
}

static void stop_thread(ucx_split_t *s)
{
    atomic_store_explicit(&s->stop, true, memory_order_release);
    atomic_fetch_add_explicit(&s->gen, 1, memory_order_release);
    futex_(&s->gen, FUTEX_WAKE, 1);
    pthread_join(s->th, NULL);
}

void nxl_ucx_split_fini(ucx_t *u)
{
    ucx_split_t *s = u->cma_split_state;
    if (!s)
        return;
    if (s->owner == getpid())
        stop_thread(s);
    free(s->liov);
    free(s);
    u->cma_split_state = NULL;
}

/* the copy thread, started on first use; NULL when it cannot be (said once) */
static ucx_split_t *split_get(ucx_t *u)
{
    if (u->cma_split_failed)
        return NULL;
    if (u->cma_split_state)
        return u->cma_split_state->owner == getpid() ? u->cma_split_state : NULL;
    ucx_split_t *s = calloc(1, sizeof(*s));
    if (s)
        s->liov = malloc(2 * (IOV_MAX + PIECES) * sizeof(struct iovec));
    int err = s && s->liov ? 0 : ENOMEM;
    if (!err) {
        s->riov = s->liov + IOV_MAX + PIECES;
        atomic_init(&s->next, CLOSED);
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old); /* no signal of the application's */
        err = pthread_create(&s->th, NULL, copy_thread, s);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    if (err) {
        if (s)
            free(s->liov);
        free(s);
        u->cma_split_failed = true;
        nxlt_log(u->ctx, NXL_LOG_INFO, "UCX: no copy thread for cross-memory attach (%s): "
                 "large copies go on one thread", strerror(err));
        return NULL;
    }
#ifdef __GLIBC__
    pthread_setname_np(s->th, "nxl-cma");
#endif
    s->owner = getpid();
    u->cma_split_state = s;
    nxlt_log(u->ctx, NXL_LOG_DEBUG, "UCX: copy thread started: cross-memory attach calls of "
             "at least %zu bytes are shared with it", u->cma_split);
    return s;
}

/* The copy thread's CPUs for a copy with pid: this thread's and the
 * peer's; false where that is one CPU (nothing to gain) */
static bool split_cpus(ucx_t *u, ucx_split_t *s, pid_t pid)
{
    if (s->cpus_pid == pid)
        return s->cpus_ok;
    cpu_set_t mine, peer;
    s->cpus_pid = pid;
    s->cpus_ok = false;
    if (sched_getaffinity(0, sizeof(mine), &mine))
        return false;
    if (!sched_getaffinity(pid, sizeof(peer), &peer))
        CPU_OR(&mine, &mine, &peer);
    if (CPU_COUNT(&mine) < 2)
        return false;
    s->cpus_ok = !pthread_setaffinity_np(s->th, sizeof(mine), &mine);
    return s->cpus_ok;
}

/* Copies cnt pieces of bytes between l and r (equal lengths piece by
 * piece) of process pid, as one process_vm_readv/writev would: returns
 * the bytes copied from the start (short at the first piece that failed
 * or was short), or -1 with errno when nothing of the first one was */
ssize_t nxl_ucx_split_copy(ucx_t *u, pid_t pid, bool read, const struct iovec *l,
                           const struct iovec *r, size_t cnt, size_t bytes)
{
    ucx_split_t *s = NULL;
    if (!u->cma_split || bytes < u->cma_split || bytes < PIECES || !(s = split_get(u)) ||
        !split_cpus(u, s, pid))
        return read ? process_vm_readv(pid, l, cnt, r, cnt, 0)
                    : process_vm_writev(pid, l, cnt, r, cnt, 0);
    /* the pieces: bytes / PIECES each (the last one the rest), cut across
     * the vectors' elements */
    size_t each = bytes / PIECES, i = 0, off = 0, at = 0;
    s->pid = pid;
    s->read = read;
    for (int j = 0; j < PIECES; j++) {
        piece_t *p = &s->p[j];
        size_t want = j == PIECES - 1 ? bytes - (size_t)j * each : each;
        p->l = s->liov + at;
        p->r = s->riov + at;
        p->cnt = 0;
        p->len = want;
        p->got = 0;
        p->err = 0;
        while (want) {
            size_t take = l[i].iov_len - off;
            if (take > want)
                take = want;
            s->liov[at] = (struct iovec){(char *)l[i].iov_base + off, take};
            s->riov[at] = (struct iovec){(char *)r[i].iov_base + off, take};
            at++;
            p->cnt++;
            want -= take;
            off += take;
            if (off == l[i].iov_len)
                i++, off = 0;
        }
    }
    atomic_store_explicit(&s->pending, PIECES, memory_order_relaxed);
    atomic_store_explicit(&s->next, 0, memory_order_release);
    atomic_fetch_add_explicit(&s->gen, 1, memory_order_release);
    futex_(&s->gen, FUTEX_WAKE, 1);
    take_pieces(s);
    /* the copy thread's last piece (a piece is tens of microseconds; a
     * copy thread descheduled meanwhile gets the CPU back) */
    for (unsigned spins = 0; atomic_load_explicit(&s->pending, memory_order_acquire); spins++)
        if (spins < 1u << 12)
            cpu_relax();
        else
            sched_yield();
    atomic_store_explicit(&s->next, CLOSED, memory_order_relaxed);
    u->cma_split_calls++;
    size_t done = 0;
    for (int j = 0; j < PIECES; j++) {
        piece_t *p = &s->p[j];
        if (p->got < 0 && !j) {
            errno = p->err;
            return -1;
        }
        if (p->got > 0)
            done += (size_t)p->got;
        if (p->got != (ssize_t)p->len)
            break;
    }
    return (ssize_t)done;
}
