/* SPDX-License-Identifier: BSD-3-Clause */
/* A stand-in for 3FS's libhf3fs_api_shared.so (usrbio), for machines
 * without 3FS (it needs FoundationDB, FUSE, RDMA and its services):
 * tests/check_hf3fs points NXL_HF3FS_LIB at it, so that the HF3FS
 * transport's logic runs here. It implements the calls the transport makes
 * (lib/transports/hf3fs/usrbio_abi.h) on a local folder, $MOCK_HF3FS_ROOT,
 * which plays the 3FS mount, the way 3FS's UsrbIo.cc behaves:
 *
 * - hf3fs_extract_mount_point answers the root for a path inside it, -1
 *   otherwise; hf3fs_reg_fd takes files inside it only (EBADF otherwise,
 *   a positive errno as 3FS returns), EINVAL for an fd registered twice;
 * - hf3fs_iovcreate maps shared memory and records it by a random 16-byte
 *   id (3FS links it into 3fs-virt/iovs/); hf3fs_iovwrap only fills the
 *   struct, registering nothing; the "daemon" finds a buffer by its id;
 * - an ior is a ring of reads or of writes with a slot per entry:
 *   hf3fs_prep_io checks what 3FS checks (direction, buffer inside the iov,
 *   fd registered, access mode: -EINVAL, -EBADF, -EACCES) and returns
 *   -EAGAIN when the ring is full; hf3fs_submit_ios hands the prepared
 *   I/Os to a thread of the ring (the daemon), which moves them with pread
 *   or pwrite and posts a semaphore per completion;
 * - hf3fs_wait_for_ios takes completions (freeing their slots) and waits
 *   for more on that semaphore with sem_timedwait until the ABSOLUTE
 *   CLOCK_REALTIME time given, as 3FS does. A call whose deadline has
 *   already passed when it would wait is counted (waits_past): a caller
 *   computing the deadline on another clock spins, and shows there.
 *
 * Knobs (read at each call): MOCK_HF3FS_DELAY_MS=N sleeps N ms before each
 * I/O; MOCK_HF3FS_MAX_IO=N moves at most N bytes an I/O (short results);
 * MOCK_HF3FS_FAIL_OFFSET=N fails the I/O at file offset N with -EIO;
 * MOCK_HF3FS_RING_FULL=N makes a ring full at N slots taken (-1: always);
 * MOCK_HF3FS_PREP_FAIL=E fails hf3fs_prep_io with -E; MOCK_HF3FS_EAGER=1
 * completes each I/O inside hf3fs_prep_io (3FS's daemon may take prepared
 * I/O before hf3fs_submit_ios: here at once). */
#define _GNU_SOURCE
#include "../lib/transports/hf3fs/usrbio_abi.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef struct miov {
    uint8_t id[16];
    uint8_t *base;
    size_t size;
    struct miov *next;
} miov_t;

typedef struct mfd {
    int fd;
    int acc;
    struct mfd *next;
} mfd_t;

typedef struct msqe {
    int index;
    uint8_t buf_id[16];
    size_t buf_off;
    int fd;
    size_t off;
    uint64_t len;
    const void *userdata;
} msqe_t;

typedef struct mring {
    bool for_read;
    int entries;
    int used;                /* slots taken: prepared, in the daemon, completed not reaped */
    char *slot_busy;
    msqe_t *prepped;         /* prepared, not submitted */
    int nprepped;
    msqe_t *queue;           /* submitted, for the daemon */
    int nqueue;
    struct nxl_hf3fs_cqe *cqes; /* completed, not reaped */
    int ncqes;
    sem_t sem;               /* a post per completion */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th;
    bool stop;
} mring_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static miov_t *iovs;
static mfd_t *fds;
static int niovs, nrings, nfds;
static long waits, waits_past, ios;

static long knob(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? atol(v) : 0;
}

/* the counts a test reads */
EXPORT void mock_hf3fs_counts(int *iov, int *ring, int *fd, long *nwait, long *npast, long *nio)
{
    pthread_mutex_lock(&mu);
    *iov = niovs;
    *ring = nrings;
    *fd = nfds;
    *nwait = waits;
    *npast = waits_past;
    *nio = ios;
    pthread_mutex_unlock(&mu);
}

/* 1 when [p, p + len) lies inside an iov made by hf3fs_iovcreate */
EXPORT int mock_hf3fs_is_iov(const void *p, size_t len)
{
    int yes = 0;
    pthread_mutex_lock(&mu);
    for (miov_t *v = iovs; v && !yes; v = v->next)
        yes = (const uint8_t *)p >= v->base && len <= v->size &&
              (size_t)((const uint8_t *)p - v->base) <= v->size - len;
    pthread_mutex_unlock(&mu);
    return yes;
}

/* the root's real path into @p out; 0 when set */
static int root(char *out)
{
    const char *r = getenv("MOCK_HF3FS_ROOT");
    return r && *r && realpath(r, out) ? 0 : -1;
}

EXPORT int hf3fs_extract_mount_point(char *mp, int size, const char *path)
{
    char rt[PATH_MAX], rp[PATH_MAX];
    if (root(rt) || !realpath(path, rp))
        return -1;
    size_t n = strlen(rt);
    if (strncmp(rp, rt, n) || (rp[n] != '/' && rp[n] != 0))
        return -1;
    if ((int)n < size)
        strcpy(mp, rt);
    return (int)n + 1;
}

static int is_root(const char *mp)
{
    char rt[PATH_MAX], m[PATH_MAX];
    return !root(rt) && realpath(mp, m) && !strcmp(rt, m);
}

EXPORT int hf3fs_iovcreate(struct nxl_hf3fs_iov *iov, const char *mp, size_t size,
                           size_t block_size, int numa)
{
    if (!iov || !mp || !*mp || strlen(mp) >= sizeof(iov->mount_point))
        return -EINVAL;
    if (!is_root(mp))
        return -ENOENT; /* 3FS: no 3fs-virt/iovs/ there to link into */
    miov_t *v = calloc(1, sizeof(*v));
    if (!v)
        return -ENOMEM;
    void *p = mmap(NULL, size ? size : 1, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1,
                   0);
    if (p == MAP_FAILED) {
        free(v);
        return -EIO;
    }
    if (getrandom(v->id, sizeof(v->id), 0) != sizeof(v->id))
        memcpy(v->id, &v, sizeof(v));
    v->base = p;
    v->size = size;
    pthread_mutex_lock(&mu);
    v->next = iovs;
    iovs = v;
    niovs++;
    pthread_mutex_unlock(&mu);
    iov->base = p;
    iov->iovh = v;
    memcpy(iov->id, v->id, sizeof(iov->id));
    strcpy(iov->mount_point, mp);
    iov->size = size;
    iov->block_size = block_size;
    iov->numa = numa;
    return 0;
}

EXPORT int hf3fs_iovwrap(struct nxl_hf3fs_iov *iov, void *base, const uint8_t id[16],
                         const char *mp, size_t size, size_t block_size, int numa)
{
    if (!iov || strlen(mp) >= sizeof(iov->mount_point))
        return -EINVAL;
    iov->iovh = NULL;
    iov->base = base;
    memcpy(iov->id, id, sizeof(iov->id));
    strcpy(iov->mount_point, mp);
    iov->size = size;
    iov->block_size = block_size;
    iov->numa = numa;
    return 0;
}

EXPORT void hf3fs_iovdestroy(struct nxl_hf3fs_iov *iov)
{
    if (!iov || !iov->iovh)
        return;
    miov_t *v = iov->iovh;
    pthread_mutex_lock(&mu);
    for (miov_t **p = &iovs; *p; p = &(*p)->next)
        if (*p == v) {
            *p = v->next;
            niovs--;
            break;
        }
    pthread_mutex_unlock(&mu);
    munmap(v->base, v->size ? v->size : 1);
    free(v);
    iov->iovh = NULL;
}

/* moves one I/O and posts its completion */
static void do_io(mring_t *r, msqe_t q)
{
    long delay = knob("MOCK_HF3FS_DELAY_MS");
    if (delay > 0)
        usleep((useconds_t)delay * 1000);
    int64_t res;
    uint8_t *base = NULL;
    size_t size = 0;
    pthread_mutex_lock(&mu);
    for (miov_t *v = iovs; v; v = v->next)
        if (!memcmp(v->id, q.buf_id, sizeof(v->id))) {
            base = v->base;
            size = v->size;
        }
    ios++;
    pthread_mutex_unlock(&mu);
    uint64_t len = q.len;
    long max = knob("MOCK_HF3FS_MAX_IO");
    if (max > 0 && (uint64_t)max < len)
        len = (uint64_t)max;
    const char *fail = getenv("MOCK_HF3FS_FAIL_OFFSET");
    if (!base || q.buf_off > size || len > size - q.buf_off) {
        res = -ENOENT; /* no iov of that id: not linked into 3fs-virt/iovs/ */
    } else if (fail && *fail && (size_t)atoll(fail) == q.off) {
        res = -EIO;
    } else {
        ssize_t n = r->for_read ? pread(q.fd, base + q.buf_off, len, (off_t)q.off)
                                : pwrite(q.fd, base + q.buf_off, len, (off_t)q.off);
        res = n < 0 ? -errno : n;
    }

    pthread_mutex_lock(&r->mu);
    struct nxl_hf3fs_cqe *c = &r->cqes[r->ncqes++];
    c->index = q.index;
    c->reserved = 0;
    c->result = res;
    c->userdata = q.userdata;
    sem_post(&r->sem);
    pthread_mutex_unlock(&r->mu);
}

/* the daemon of one ring: moves what was submitted */
static void *daemon_main(void *arg)
{
    mring_t *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!r->stop && !r->nqueue)
            pthread_cond_wait(&r->cv, &r->mu);
        if (r->stop)
            break;
        msqe_t q = r->queue[0];
        memmove(r->queue, r->queue + 1, (size_t)--r->nqueue * sizeof(*r->queue));
        pthread_mutex_unlock(&r->mu);
        do_io(r, q);
        pthread_mutex_lock(&r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

static void ring_free(mring_t *r)
{
    free(r->slot_busy);
    free(r->prepped);
    free(r->queue);
    free(r->cqes);
    free(r);
}

static int ior_make(struct nxl_hf3fs_ior *ior, const char *mp, int entries, bool for_read,
                    int io_depth, int timeout, uint64_t flags)
{
    if (!ior || !mp || !*mp || entries <= 0 || timeout < 0 ||
        strlen(mp) >= sizeof(ior->mount_point))
        return -EINVAL;
    if (!is_root(mp))
        return -ENOENT;
    mring_t *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->for_read = for_read;
    r->entries = entries;
    r->slot_busy = calloc((size_t)entries, 1);
    r->prepped = calloc((size_t)entries, sizeof(*r->prepped));
    r->queue = calloc((size_t)entries, sizeof(*r->queue));
    r->cqes = calloc((size_t)entries, sizeof(*r->cqes));
    if (!r->slot_busy || !r->prepped || !r->queue || !r->cqes) {
        ring_free(r);
        return -ENOMEM;
    }
    sem_init(&r->sem, 0, 0);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    if (pthread_create(&r->th, NULL, daemon_main, r)) {
        ring_free(r);
        return -EAGAIN;
    }
    memset(ior, 0, sizeof(*ior));
    ior->iorh = r;
    strcpy(ior->mount_point, mp);
    ior->for_read = for_read;
    ior->io_depth = io_depth;
    ior->timeout = timeout;
    ior->flags = flags;
    pthread_mutex_lock(&mu);
    nrings++;
    pthread_mutex_unlock(&mu);
    return 0;
}

EXPORT int hf3fs_iorcreate(struct nxl_hf3fs_ior *ior, const char *mp, int entries, bool for_read,
                           int io_depth, int numa)
{
    (void)numa;
    return ior_make(ior, mp, entries, for_read, io_depth, 0, 0);
}

EXPORT int hf3fs_iorcreate4(struct nxl_hf3fs_ior *ior, const char *mp, int entries,
                            bool for_read, int io_depth, int timeout, int numa, uint64_t flags)
{
    (void)numa;
    return ior_make(ior, mp, entries, for_read, io_depth, timeout, flags);
}

EXPORT void hf3fs_iordestroy(struct nxl_hf3fs_ior *ior)
{
    if (!ior || !ior->iorh)
        return;
    mring_t *r = ior->iorh;
    pthread_mutex_lock(&r->mu);
    r->stop = true;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->th, NULL);
    sem_destroy(&r->sem);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    ring_free(r);
    ior->iorh = NULL;
    pthread_mutex_lock(&mu);
    nrings--;
    pthread_mutex_unlock(&mu);
}

EXPORT int hf3fs_reg_fd(int fd, uint64_t flags)
{
    (void)flags;
    char proc[64], path[PATH_MAX], mp[PATH_MAX];
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(proc, path, sizeof(path) - 1);
    if (n <= 0)
        return EBADF;
    path[n] = 0;
    char *slash = strrchr(path, '/'); /* its folder: an unlinked file has no path */
    if (slash && slash != path)
        *slash = 0;
    struct stat sb;
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) ||
        hf3fs_extract_mount_point(mp, (int)sizeof(mp), path) < 0)
        return EBADF; /* 3FS: not one of its files */
    mfd_t *m = calloc(1, sizeof(*m));
    if (!m)
        return ENOMEM;
    m->fd = fd;
    m->acc = fcntl(fd, F_GETFL) & O_ACCMODE;
    pthread_mutex_lock(&mu);
    for (mfd_t *o = fds; o; o = o->next)
        if (o->fd == fd) {
            pthread_mutex_unlock(&mu);
            free(m);
            return EINVAL;
        }
    m->next = fds;
    fds = m;
    nfds++;
    pthread_mutex_unlock(&mu);
    return 0;
}

EXPORT void hf3fs_dereg_fd(int fd)
{
    pthread_mutex_lock(&mu);
    for (mfd_t **p = &fds; *p; p = &(*p)->next)
        if ((*p)->fd == fd) {
            mfd_t *m = *p;
            *p = m->next;
            nfds--;
            free(m);
            break;
        }
    pthread_mutex_unlock(&mu);
}

EXPORT int hf3fs_prep_io(const struct nxl_hf3fs_ior *ior, const struct nxl_hf3fs_iov *iov,
                         bool read, void *ptr, int fd, size_t off, uint64_t len,
                         const void *userdata)
{
    if (!ior || !ior->iorh || read != ior->for_read || !iov || !ptr || !iov->base || !len)
        return -EINVAL;
    uintptr_t base = (uintptr_t)iov->base, at = (uintptr_t)ptr;
    if (at < base || at - base > iov->size || len > iov->size - (at - base))
        return -EINVAL;
    int acc = -1;
    pthread_mutex_lock(&mu);
    for (mfd_t *m = fds; m; m = m->next)
        if (m->fd == (fd < 0 ? -fd : fd))
            acc = m->acc;
    pthread_mutex_unlock(&mu);
    if (acc < 0)
        return -EBADF;
    long refuse = knob("MOCK_HF3FS_PREP_FAIL");
    if (refuse > 0)
        return -(int)refuse;
    if ((read && acc == O_WRONLY) || (!read && acc == O_RDONLY))
        return -EACCES;
    mring_t *r = ior->iorh;
    long full = knob("MOCK_HF3FS_RING_FULL");
    pthread_mutex_lock(&r->mu);
    if (r->used >= r->entries || (full && r->used >= (full < 0 ? 0 : full))) {
        pthread_mutex_unlock(&r->mu);
        return -EAGAIN;
    }
    int idx = 0;
    while (r->slot_busy[idx])
        idx++;
    r->slot_busy[idx] = 1;
    r->used++;
    /* 3FS's daemon may take prepared I/O before it is submitted */
    bool eager = knob("MOCK_HF3FS_EAGER") > 0;
    msqe_t now, *q = eager ? &now : &r->prepped[r->nprepped++];
    q->index = idx;
    memcpy(q->buf_id, iov->id, sizeof(q->buf_id));
    q->buf_off = at - base;
    q->fd = fd < 0 ? -fd : fd;
    q->off = off;
    q->len = len;
    q->userdata = userdata;
    pthread_mutex_unlock(&r->mu);
    if (eager)
        do_io(r, now); /* done before hf3fs_prep_io returns */
    return idx;
}

EXPORT int hf3fs_submit_ios(const struct nxl_hf3fs_ior *ior)
{
    if (!ior || !ior->iorh)
        return -EINVAL;
    mring_t *r = ior->iorh;
    pthread_mutex_lock(&r->mu);
    memcpy(r->queue + r->nqueue, r->prepped, (size_t)r->nprepped * sizeof(*r->prepped));
    r->nqueue += r->nprepped;
    r->nprepped = 0;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return 0;
}

EXPORT int hf3fs_wait_for_ios(const struct nxl_hf3fs_ior *ior, struct nxl_hf3fs_cqe *cqes,
                              int cqec, int min_results, const struct timespec *abs_timeout)
{
    if (cqec <= 0 || !ior || !ior->iorh)
        return -EINVAL;
    if (min_results > cqec)
        min_results = cqec;
    mring_t *r = ior->iorh;
    pthread_mutex_lock(&mu);
    waits++;
    pthread_mutex_unlock(&mu);
    int filled = 0;
    for (bool slept = false;; slept = true) {
        pthread_mutex_lock(&r->mu);
        while (r->ncqes && filled < cqec) {
            cqes[filled++] = r->cqes[0];
            r->slot_busy[r->cqes[0].index] = 0;
            r->used--;
            memmove(r->cqes, r->cqes + 1, (size_t)--r->ncqes * sizeof(*r->cqes));
        }
        pthread_mutex_unlock(&r->mu);
        if (filled >= min_results || filled == cqec)
            return filled;
        if (abs_timeout) {
            struct timespec now;
            clock_gettime(CLOCK_REALTIME, &now);
            if (abs_timeout->tv_sec < now.tv_sec ||
                (abs_timeout->tv_sec == now.tv_sec && abs_timeout->tv_nsec <= now.tv_nsec)) {
                /* the deadline passed before this call slept at all */
                if (!slept) {
                    pthread_mutex_lock(&mu);
                    waits_past++;
                    pthread_mutex_unlock(&mu);
                }
                return filled;
            }
            if (sem_timedwait(&r->sem, abs_timeout) < 0 && errno == ETIMEDOUT)
                return filled;
        } else {
            sem_wait(&r->sem);
        }
    }
}
