/* SPDX-License-Identifier: BSD-3-Clause */
/* A stand-in for the CUDA runtime and driver, for machines without a GPU.
 *
 * tests/cuda_mock.sh runs check_cuda with NXL_CUDA_RUNTIME and
 * NXL_CUDA_DRIVER naming this library, so that the CUDA transport and the
 * GPU cases of the suite run here: their stream logic, host functions,
 * eventfd completions, cancel and teardown, event waits, IPC keys between
 * processes and the notification relay. It is no GPU: it proves the logic,
 * not the speed, and not what a real driver does differently.
 *
 * What it models:
 *   - "device memory": memfd-backed shared mappings, recorded with their
 *     device (one device, or $MOCK_CUDA_NDEV); pinned host memory
 *     (cudaHostRegister, cudaHostAlloc) and managed memory are recorded
 *     too, so that cudaPointerGetAttributes answers as CUDA does;
 *   - a stream: a thread running its queue in order (copies as memcpy,
 *     memsets, host functions, event records and waits), sleeping on a
 *     condition variable when idle;
 *   - events: a record generation each; a wait captures the generation
 *     recorded at the time of the call, as cudaStreamWaitEvent does;
 *   - IPC: the handle names the owner's pid and memfd; another process
 *     maps it through /proc/PID/fd; the owner itself is refused, as CUDA
 *     refuses opening a handle in the process that exported it;
 *   - the KV re-layout kernel (lib/transports/cuda/kv_relayout.cu): a
 *     module loads when its image is a fatbin (its magic checked), the one
 *     function it has is nxl_kv_relayout, and a launch queues, in stream
 *     order, a host routine of this file that does what the kernel does
 *     (each piece's len bytes from src to dst), written here apart from
 *     nxl's own re-layout so that tests check one against the other;
 *   - a trace of what the streams ran (copies, launches: mock_cuda_trace()),
 *     so that tests can check that a launch came after the copies it reads. */
#define _GNU_SOURCE
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

/* ------------------------------------------------------------ memory */

enum { M_DEV, M_HOST, M_MANAGED };

typedef struct mrange {
    char *base;
    size_t size;
    int kind;
    int dev;
    int fd;            /* M_DEV: its memfd (-1: opened through IPC) */
    bool ours;         /* allocated (not registered) by the mock */
    struct mrange *next;
} mrange_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static mrange_t *ranges;
static __thread int cur_dev;

static int ndev(void)
{
    const char *s = getenv("MOCK_CUDA_NDEV");
    int n = s ? atoi(s) : 1;
    return n < 0 ? 0 : n;
}

static mrange_t *find(const void *p)
{
    for (mrange_t *r = ranges; r; r = r->next)
        if ((const char *)p >= r->base && (const char *)p < r->base + r->size)
            return r;
    return NULL;
}

static void add(char *base, size_t size, int kind, int dev, int fd, bool ours)
{
    mrange_t *r = calloc(1, sizeof(*r));
    r->base = base;
    r->size = size;
    r->kind = kind;
    r->dev = dev;
    r->fd = fd;
    r->ours = ours;
    pthread_mutex_lock(&mu);
    r->next = ranges;
    ranges = r;
    pthread_mutex_unlock(&mu);
}

static mrange_t *take(const void *base, int kind)
{
    pthread_mutex_lock(&mu);
    for (mrange_t **pp = &ranges; *pp; pp = &(*pp)->next)
        if ((*pp)->base == base && (*pp)->kind == kind) {
            mrange_t *r = *pp;
            *pp = r->next;
            pthread_mutex_unlock(&mu);
            return r;
        }
    pthread_mutex_unlock(&mu);
    return NULL;
}

EXPORT cudaError_t cudaGetDeviceCount(int *n)
{
    if (!ndev())
        return cudaErrorNoDevice;
    *n = ndev();
    return cudaSuccess;
}
EXPORT cudaError_t cudaGetDevice(int *d) { *d = cur_dev; return cudaSuccess; }
EXPORT cudaError_t cudaSetDevice(int d)
{
    if (d < 0 || d >= ndev())
        return cudaErrorInvalidDevice;
    cur_dev = d;
    return cudaSuccess;
}
EXPORT cudaError_t cudaRuntimeGetVersion(int *v) { *v = 13000; return cudaSuccess; }
EXPORT cudaError_t cudaDriverGetVersion(int *v) { *v = 13000; return cudaSuccess; }
EXPORT cudaError_t cudaGetLastError(void) { return cudaSuccess; }

EXPORT const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorHostMemoryAlreadyRegistered: return "part or all of the requested memory range is already mapped";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorMapBufferObjectFailed: return "mapping of buffer object failed";
    default: return "mock CUDA error";
    }
}
EXPORT const char *cudaGetErrorName(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    default: return "cudaErrorMock";
    }
}

/* len bytes of anonymous memory, recorded as ours of kind on the current
 * device */
static cudaError_t anon_alloc(void **p, size_t len, int kind)
{
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return cudaErrorMemoryAllocation;
    add(m, len, kind, cur_dev, -1, true);
    *p = m;
    return cudaSuccess;
}

/* unmaps a range take() removed, closes its memfd if any, frees it */
static void drop(mrange_t *r)
{
    munmap(r->base, r->size);
    if (r->fd >= 0)
        close(r->fd);
    free(r);
}

EXPORT cudaError_t cudaMalloc(void **p, size_t len)
{
    int fd = memfd_create("mock-vram", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)len) < 0) {
        if (fd >= 0)
            close(fd);
        return cudaErrorMemoryAllocation;
    }
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        close(fd);
        return cudaErrorMemoryAllocation;
    }
    add(m, len, M_DEV, cur_dev, fd, true);
    *p = m;
    return cudaSuccess;
}

EXPORT cudaError_t cudaMallocManaged(void **p, size_t len, unsigned flags)
{
    return anon_alloc(p, len, M_MANAGED);
}

EXPORT cudaError_t cudaFree(void *p)
{
    if (!p)
        return cudaSuccess;
    mrange_t *r = take(p, M_DEV);
    if (!r)
        r = take(p, M_MANAGED);
    if (!r)
        return cudaErrorInvalidValue;
    drop(r);
    return cudaSuccess;
}

EXPORT cudaError_t cudaHostAlloc(void **p, size_t len, unsigned flags)
{
    return anon_alloc(p, len, M_HOST);
}

EXPORT cudaError_t cudaFreeHost(void *p)
{
    mrange_t *r = take(p, M_HOST);
    if (!r || !r->ours)
        return cudaErrorInvalidValue;
    drop(r);
    return cudaSuccess;
}

EXPORT cudaError_t cudaHostRegister(void *p, size_t len, unsigned flags)
{
    pthread_mutex_lock(&mu);
    for (mrange_t *r = ranges; r; r = r->next)
        if ((char *)p < r->base + r->size && r->base < (char *)p + len) {
            pthread_mutex_unlock(&mu);
            return cudaErrorHostMemoryAlreadyRegistered;
        }
    pthread_mutex_unlock(&mu);
    add(p, len, M_HOST, cur_dev, -1, false);
    return cudaSuccess;
}

EXPORT cudaError_t cudaHostUnregister(void *p)
{
    mrange_t *r = take(p, M_HOST);
    if (!r)
        return cudaErrorHostMemoryNotRegistered;
    free(r);
    return cudaSuccess;
}

EXPORT cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *at, const void *p)
{
    memset(at, 0, sizeof(*at));
    pthread_mutex_lock(&mu);
    mrange_t *r = find(p);
    if (!r) {
        at->type = cudaMemoryTypeUnregistered;
    } else {
        at->type = r->kind == M_DEV    ? cudaMemoryTypeDevice
                   : r->kind == M_HOST ? cudaMemoryTypeHost
                                       : cudaMemoryTypeManaged;
        at->device = r->dev;
        at->devicePointer = (void *)p;
        at->hostPointer = r->kind == M_DEV ? NULL : (void *)p;
    }
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

/* ------------------------------------------------------------ events */

struct CUevent_st {
    pthread_mutex_t m;
    pthread_cond_t cv;
    uint64_t recorded, reached;
    int refs; /* the application's, and one per task queued on it */
};

static void event_put(struct CUevent_st *e)
{
    pthread_mutex_lock(&e->m);
    int left = --e->refs;
    pthread_mutex_unlock(&e->m);
    if (!left) {
        pthread_mutex_destroy(&e->m);
        pthread_cond_destroy(&e->cv);
        free(e);
    }
}

EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned flags)
{
    struct CUevent_st *e = calloc(1, sizeof(*e));
    pthread_mutex_init(&e->m, NULL);
    pthread_cond_init(&e->cv, NULL);
    e->refs = 1;
    *ev = e;
    return cudaSuccess;
}

EXPORT cudaError_t cudaEventDestroy(cudaEvent_t ev)
{
    /* like CUDA, waits and records already queued keep working */
    event_put(ev);
    return cudaSuccess;
}

EXPORT cudaError_t cudaEventQuery(cudaEvent_t ev)
{
    pthread_mutex_lock(&ev->m);
    bool done = ev->reached >= ev->recorded;
    pthread_mutex_unlock(&ev->m);
    return done ? cudaSuccess : cudaErrorNotReady;
}

EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t ev)
{
    pthread_mutex_lock(&ev->m);
    while (ev->reached < ev->recorded)
        pthread_cond_wait(&ev->cv, &ev->m);
    pthread_mutex_unlock(&ev->m);
    return cudaSuccess;
}

EXPORT cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    *ms = 0;
    return cudaSuccess;
}

/* ------------------------------------------------------------ streams */

enum { T_COPY, T_SET, T_HOST, T_RECORD, T_WAIT, T_KERNEL };

/* ------------------------------------------------------------ trace */

/* One entry per copy or launch run by a stream, in the order they ran:
 * kind 'C' (a copy: [lo, hi) written), 'K' and 'k' (a launch of the
 * re-layout began, ended: [lo, hi) the span its pieces read). */
typedef struct mock_trace {
    char kind;
    uint64_t lo, hi;
} mock_trace_t;

#define TRACE_MAX 65536
static mock_trace_t trace[TRACE_MAX];
static size_t ntrace;
static bool trace_lost;
static pthread_mutex_t trace_mu = PTHREAD_MUTEX_INITIALIZER;

static void trace_add(char kind, uint64_t lo, uint64_t hi)
{
    pthread_mutex_lock(&trace_mu);
    if (ntrace < TRACE_MAX)
        trace[ntrace++] = (mock_trace_t){kind, lo, hi};
    else
        trace_lost = true;
    pthread_mutex_unlock(&trace_mu);
}

/* the trace since the last reset: its entries, their count; -1 when some
 * were lost (more than TRACE_MAX) */
EXPORT long mock_cuda_trace(const mock_trace_t **out)
{
    pthread_mutex_lock(&trace_mu);
    long n = trace_lost ? -1 : (long)ntrace;
    pthread_mutex_unlock(&trace_mu);
    *out = trace;
    return n;
}

EXPORT void mock_cuda_trace_reset(void)
{
    pthread_mutex_lock(&trace_mu);
    ntrace = 0;
    trace_lost = false;
    pthread_mutex_unlock(&trace_mu);
}

/* The re-layout kernel's work, as the host does it: nxl_kv_relayout() of
 * kv_relayout.cu copies each piece's len bytes from src to dst (pieces do
 * not overlap). Three uint64_t a piece, as the kernel reads them. A plain
 * byte loop on purpose: nothing shared with nxl's nxl_kv_copy(). */
static void kernel_relayout(const uint64_t *pieces, uint64_t n)
{
    uint64_t lo = UINT64_MAX, hi = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (pieces[3 * i] < lo)
            lo = pieces[3 * i];
        if (pieces[3 * i] + pieces[3 * i + 2] > hi)
            hi = pieces[3 * i] + pieces[3 * i + 2];
    }
    if (!n)
        lo = 0;
    trace_add('K', lo, hi); /* begins */
    for (uint64_t i = 0; i < n; i++) {
        const unsigned char *src = (const unsigned char *)(uintptr_t)pieces[3 * i];
        unsigned char *dst = (unsigned char *)(uintptr_t)pieces[3 * i + 1];
        uint64_t len = pieces[3 * i + 2];
        for (uint64_t k = 0; k < len; k++)
            dst[k] = src[k];
    }
    trace_add('k', lo, hi); /* ends */
}

typedef struct task {
    int kind;
    void *dst;
    const void *src;
    size_t len;
    int val;
    cudaHostFn_t fn;
    void *arg;
    struct CUevent_st *ev;
    uint64_t gen;
    struct task *next;
} task_t;

struct CUstream_st {
    pthread_t th;
    pthread_mutex_t m;
    pthread_cond_t cv, idle;
    task_t *head, *tail;
    bool busy, stop;
};

static void *stream_main(void *arg)
{
    struct CUstream_st *s = arg;
    pthread_mutex_lock(&s->m);
    for (;;) {
        while (!s->head && !s->stop)
            pthread_cond_wait(&s->cv, &s->m);
        if (!s->head && s->stop)
            break;
        task_t *t = s->head;
        s->head = t->next;
        if (!s->head)
            s->tail = NULL;
        s->busy = true;
        pthread_mutex_unlock(&s->m);
        switch (t->kind) {
        case T_COPY:
            memmove(t->dst, t->src, t->len);
            trace_add('C', (uintptr_t)t->dst, (uintptr_t)t->dst + t->len);
            break;
        case T_KERNEL: kernel_relayout(t->src, t->len); break;
        case T_SET: memset(t->dst, t->val, t->len); break;
        case T_HOST: t->fn(t->arg); break;
        case T_RECORD:
            pthread_mutex_lock(&t->ev->m);
            if (t->gen > t->ev->reached)
                t->ev->reached = t->gen;
            pthread_cond_broadcast(&t->ev->cv);
            pthread_mutex_unlock(&t->ev->m);
            break;
        case T_WAIT:
            pthread_mutex_lock(&t->ev->m);
            while (t->ev->reached < t->gen)
                pthread_cond_wait(&t->ev->cv, &t->ev->m);
            pthread_mutex_unlock(&t->ev->m);
            break;
        }
        if (t->ev)
            event_put(t->ev);
        free(t);
        pthread_mutex_lock(&s->m);
        s->busy = false;
        if (!s->head)
            pthread_cond_broadcast(&s->idle);
    }
    pthread_mutex_unlock(&s->m);
    return NULL;
}

static cudaError_t enqueue(cudaStream_t s, task_t *t)
{
    if (!s)
        return cudaErrorInvalidResourceHandle; /* the mock has no legacy stream */
    pthread_mutex_lock(&s->m);
    if (s->tail)
        s->tail->next = t;
    else
        s->head = t;
    s->tail = t;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->m);
    return cudaSuccess;
}

EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *out, unsigned flags)
{
    struct CUstream_st *s = calloc(1, sizeof(*s));
    pthread_mutex_init(&s->m, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_cond_init(&s->idle, NULL);
    if (pthread_create(&s->th, NULL, stream_main, s)) {
        free(s);
        return cudaErrorMemoryAllocation;
    }
    *out = s;
    return cudaSuccess;
}

EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    pthread_mutex_lock(&s->m);
    while (s->head || s->busy)
        pthread_cond_wait(&s->idle, &s->m);
    pthread_mutex_unlock(&s->m);
    return cudaSuccess;
}

EXPORT cudaError_t cudaStreamQuery(cudaStream_t s)
{
    pthread_mutex_lock(&s->m);
    bool idle = !s->head && !s->busy;
    pthread_mutex_unlock(&s->m);
    return idle ? cudaSuccess : cudaErrorNotReady;
}

EXPORT cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    /* CUDA lets queued work finish */
    pthread_mutex_lock(&s->m);
    s->stop = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->m);
    pthread_join(s->th, NULL);
    free(s);
    return cudaSuccess;
}

static task_t *task(int kind)
{
    task_t *t = calloc(1, sizeof(*t));
    t->kind = kind;
    return t;
}

static bool valid_copy(void *dst, const void *src, size_t len)
{
    /* every pointer is host-addressable here; an unknown device range is
     * what CUDA would refuse: both ends must be mapped memory we know or
     * ordinary host memory */
    (void)dst;
    (void)src;
    (void)len;
    return true;
}

EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t len, enum cudaMemcpyKind k,
                                   cudaStream_t s)
{
    if (!valid_copy(dst, src, len))
        return cudaErrorInvalidValue;
    task_t *t = task(T_COPY);
    t->dst = dst;
    t->src = src;
    t->len = len;
    return enqueue(s, t);
}

EXPORT cudaError_t cudaMemsetAsync(void *dst, int v, size_t len, cudaStream_t s)
{
    task_t *t = task(T_SET);
    t->dst = dst;
    t->val = v;
    t->len = len;
    return enqueue(s, t);
}

EXPORT cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *arg)
{
    task_t *t = task(T_HOST);
    t->fn = fn;
    t->arg = arg;
    return enqueue(s, t);
}

EXPORT cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t s)
{
    task_t *t = task(T_RECORD);
    t->ev = ev;
    pthread_mutex_lock(&ev->m);
    ev->refs++;
    t->gen = ++ev->recorded;
    pthread_mutex_unlock(&ev->m);
    return enqueue(s, t);
}

EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t ev, unsigned flags)
{
    if (!ev)
        return cudaErrorInvalidResourceHandle;
    task_t *t = task(T_WAIT);
    t->ev = ev;
    pthread_mutex_lock(&ev->m);
    ev->refs++;
    t->gen = ev->recorded; /* what was recorded when the wait was queued */
    pthread_mutex_unlock(&ev->m);
    return enqueue(s, t);
}

EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t len, enum cudaMemcpyKind k)
{
    memmove(dst, src, len);
    return cudaSuccess;
}

EXPORT cudaError_t cudaMemset(void *dst, int v, size_t len)
{
    memset(dst, v, len);
    return cudaSuccess;
}

/* the mock keeps no list of streams: tests call it after their own waits */
EXPORT cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }

/* ------------------------------------------------------------ IPC */

typedef struct mock_ipc {
    uint32_t magic;
    int32_t pid;
    int32_t fd;
    int32_t dev;
    uint64_t size;
} mock_ipc_t;

EXPORT cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *h, void *p)
{
    pthread_mutex_lock(&mu);
    mrange_t *r = find(p);
    if (!r || r->kind != M_DEV || r->fd < 0) {
        pthread_mutex_unlock(&mu);
        return cudaErrorInvalidValue;
    }
    mock_ipc_t m = {0x4d4f434b, (int32_t)getpid(), r->fd, r->dev, r->size};
    pthread_mutex_unlock(&mu);
    memset(h, 0, sizeof(*h));
    memcpy(h, &m, sizeof(m));
    return cudaSuccess;
}

EXPORT cudaError_t cudaIpcOpenMemHandle(void **p, cudaIpcMemHandle_t h, unsigned flags)
{
    mock_ipc_t m;
    memcpy(&m, &h, sizeof(m));
    if (m.magic != 0x4d4f434b || m.pid == (int32_t)getpid())
        return cudaErrorInvalidValue;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", m.pid, m.fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return cudaErrorMapBufferObjectFailed;
    void *a = mmap(NULL, m.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (a == MAP_FAILED)
        return cudaErrorMapBufferObjectFailed;
    add(a, m.size, M_DEV, cur_dev, -1, false);
    *p = a;
    return cudaSuccess;
}

EXPORT cudaError_t cudaIpcCloseMemHandle(void *p)
{
    mrange_t *r = take(p, M_DEV);
    if (!r || r->ours)
        return cudaErrorInvalidValue;
    munmap(r->base, r->size);
    free(r);
    return cudaSuccess;
}

/* ------------------------------------------------------------ driver */

EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute a, CUdeviceptr p)
{
    pthread_mutex_lock(&mu);
    mrange_t *r = find((const void *)(uintptr_t)p);
    CUresult res = CUDA_ERROR_INVALID_VALUE;
    if (r && a == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR) {
        *(CUdeviceptr *)data = (CUdeviceptr)(uintptr_t)r->base;
        res = CUDA_SUCCESS;
    } else if (r && a == CU_POINTER_ATTRIBUTE_RANGE_SIZE) {
        *(size_t *)data = r->size;
        res = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&mu);
    return res;
}

EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
    if (ordinal < 0 || ordinal >= ndev())
        return CUDA_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *u, CUdevice d)
{
    memset(u->bytes, 0, sizeof(u->bytes));
    memcpy(u->bytes, "mock-gpu", 8);
    u->bytes[15] = (char)d;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice d)
{
    snprintf(name, (size_t)len, "Mock GPU (no device: tests/mock_cudart.c)");
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d)
{
    *bytes = (size_t)16 << 30;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------ modules, launches */

struct CUmod_st {
    int loaded;
};
struct CUfunc_st {
    struct CUmod_st *mod;
};
static struct CUfunc_st relayout_fn;

EXPORT CUresult cuModuleLoadData(CUmodule *m, const void *image)
{
    /* a fatbin begins with its magic, 0xBA55ED50 (little-endian) */
    static const unsigned char magic[4] = {0x50, 0xed, 0x55, 0xba};
    if (!m || !image)
        return CUDA_ERROR_INVALID_VALUE;
    if (memcmp(image, magic, 4))
        return CUDA_ERROR_INVALID_IMAGE;
    struct CUmod_st *mod = calloc(1, sizeof(*mod));
    mod->loaded = 1;
    *m = mod;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
    if (!f || !m || !name)
        return CUDA_ERROR_INVALID_VALUE;
    if (strcmp(name, "nxl_kv_relayout"))
        return CUDA_ERROR_NOT_FOUND;
    relayout_fn.mod = m;
    *f = &relayout_fn;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleUnload(CUmodule m)
{
    free(m);
    return CUDA_SUCCESS;
}

/* nxl_kv_relayout(const pieces *p, uint64_t n): any grid, blockDim.x a
 * multiple of 32, no shared memory; the pieces in device memory */
EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                               unsigned by, unsigned bz, unsigned shared, CUstream s,
                               void **params, void **extra)
{
    if (f != &relayout_fn || !params || extra)
        return CUDA_ERROR_INVALID_VALUE;
    if (!gx || gy != 1 || gz != 1 || !bx || bx % 32 || bx > 1024 || by != 1 || bz != 1 || shared)
        return CUDA_ERROR_INVALID_VALUE;
    const void *pieces = *(const void *const *)params[0];
    uint64_t n = *(const uint64_t *)params[1];
    pthread_mutex_lock(&mu);
    mrange_t *r = find(pieces);
    bool dev = r && r->kind == M_DEV && (const char *)pieces + n * 24 <= r->base + r->size;
    pthread_mutex_unlock(&mu);
    if (n && !dev)
        return CUDA_ERROR_ILLEGAL_ADDRESS; /* the kernel reads its pieces from device memory */
    task_t *t = task(T_KERNEL);
    t->src = pieces;
    t->len = n;
    return enqueue(s, t) == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

EXPORT CUresult cuGetErrorName(CUresult r, const char **name)
{
    switch (r) {
    case CUDA_SUCCESS: *name = "CUDA_SUCCESS"; break;
    case CUDA_ERROR_INVALID_VALUE: *name = "CUDA_ERROR_INVALID_VALUE"; break;
    case CUDA_ERROR_INVALID_IMAGE: *name = "CUDA_ERROR_INVALID_IMAGE"; break;
    case CUDA_ERROR_NOT_FOUND: *name = "CUDA_ERROR_NOT_FOUND"; break;
    case CUDA_ERROR_ILLEGAL_ADDRESS: *name = "CUDA_ERROR_ILLEGAL_ADDRESS"; break;
    default: *name = NULL; return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}
