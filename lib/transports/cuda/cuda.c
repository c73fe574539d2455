/* SPDX-License-Identifier: BSD-3-Clause */
/* The CUDA transport: GPU memory (VRAM) within the agent, between agents
 * of one process, and between processes of one host (CUDA IPC).
 *
 * As the POSIX transport, it moves data locally: DRAM (the local list) to
 * and from VRAM (the list prepared against the agent itself: loopback), and
 * VRAM to VRAM, on one device or between devices. The remote side is
 * always VRAM: DRAM regions have no key, so the engine never picks this
 * transport for host-to-host copies. Between processes on one host a
 * region's key carries a CUDA IPC handle; the peer opens it once, on the
 * first transfer that uses it, and closes it when the key is unloaded
 * (invalidation, peer loss), after the copies in flight that use it.
 *
 * Registration: VRAM is checked with cudaPointerGetAttributes (device
 * memory of device dev_id) and the driver's pointer range (the allocation
 * holds the whole range); DRAM is pinned with cudaHostRegister (memory
 * already pinned is accepted and left as it is).
 *
 * Transfers: the copies of a transfer are spread round-robin over a small
 * pool of non-blocking streams of the device (cudaMemcpyAsync,
 * cudaMemcpyDefault). Behind the last copy on each stream it used, a host
 * function (cudaLaunchHostFunc) counts down the transfer's pending streams;
 * the last one pushes the transfer onto a lock-free stack and writes an
 * eventfd the reactor watches. Host functions run on a CUDA driver thread:
 * they touch only that atomic counter, the stack and the eventfd. The
 * reactor thread never synchronizes a stream and never polls; this
 * transport starts no thread of its own.
 *
 * Cancel waits for the GPU (NXLT_CAP_CANCEL_WAITS): copies queued on a
 * stream cannot be withdrawn, so a canceled transfer completes (CANCELED)
 * when its host functions ran, when the GPU is done with its buffers.
 *
 * The KV re-layout (NXLT_CAP_RELAYOUT, the staged KV transfer into VRAM):
 * the kernel of kv_relayout.cu, carried as a fatbin when nvcc built it,
 * loaded per device with the driver's cuModuleLoadData on the first plan;
 * a plan's pieces are uploaded once (relayout_prep), and each group's
 * launch goes on a copy stream of the device, a host function behind it,
 * completed through the reactor as every copy. The engine launches a
 * group once the READ into its staging reported done, so the launch
 * follows the staging copies. The staging is device memory, or pinned
 * DRAM (registered here: cudaHostRegister, mapped under unified
 * addressing, so the kernel reads it by its host address) where no
 * transport READs the peer's blocks into device memory (UCX without CUDA,
 * LIBFABRIC). It has run against tests/mock_cudart.c's host routine only,
 * never on a GPU (nxl-cuda(7)).
 *
 * The CUDA runtime is resolved at run time (../common/cudart.c): libnxl links neither
 * libcudart nor libcuda. */
#include "config.h"
#include "../common/cudart.h"

#include <nxl/transport.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/queue.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CU_DEF_STREAMS 4
#define CU_MAX_STREAMS 32    /* per device; a transfer's used streams fit a 32-bit mask */
#define CU_MAX_DEV 64
#define CU_MAX_WAIT 32       /* streams that wait for events; more waits share them */
#define CU_KV_THREADS 128    /* the re-layout kernel's block (kv_relayout.cu) */
#define CU_KV_MAX_GRID 4096  /* its grid: one block per piece up to this, then grid-stride */
#include "wire.h" /* connection info and keys as they travel, and their checks */
#include "../common/pstr.h"
#include "../common/regspan.h"
_Static_assert(CU_IPC_BYTES == CUDA_IPC_HANDLE_SIZE, "wire.h: the IPC handle's size");

/* ------------------------------------------------------------ identity */

/* Same process (the token and the pid: a forked child shares the token):
 * pointers are used as they are. Same host (boot id): CUDA IPC. */
static pthread_once_t id_once = PTHREAD_ONCE_INIT;
static uint64_t my_token;
static char my_boot[40];
static uint64_t my_pidns; /* pids of peers in the same pid namespace can be checked */

static void id_init(void)
{
    if (getrandom(&my_token, sizeof(my_token), GRND_NONBLOCK) != sizeof(my_token))
        my_token = ((uint64_t)getpid() << 32) ^ (uint64_t)time(NULL) ^ (uintptr_t)&my_token;
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, my_boot, sizeof(my_boot) - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        gethostname(my_boot, sizeof(my_boot) - 1);
    my_boot[sizeof(my_boot) - 1] = 0;
    char *nl = strchr(my_boot, '\n');
    if (nl)
        *nl = 0;
    struct stat sb;
    if (stat("/proc/self/ns/pid", &sb) == 0)
        my_pidns = (uint64_t)sb.st_ino;
}


/* ------------------------------------------------------------ structures */

typedef struct cu cu_t;

/* a local registration */
typedef struct cu_reg {
    nxlt_regspan_t span;     /* first (nxlt_regspan_new) */
    int dev;
    uintptr_t base;          /* VRAM: the allocation */
    size_t size;
    bool pinned;             /* DRAM: cudaHostRegister'd by us */
    bool alloc;              /* from mem_alloc */
    bool ipc_tried, ipc_ok;
    cudaIpcMemHandle_t ipc;
} cu_reg_t;

/* a peer process's allocation, opened through CUDA IPC on first use */
typedef struct cu_map {
    uint64_t token;          /* its process */
    int pid;
    bool pid_visible;        /* in our pid namespace */
    uint64_t base, size;     /* the allocation there */
    cudaIpcMemHandle_t h;
    int dev;                 /* our device with the key's UUID */
    char *ptr;               /* mapped base; NULL until opened */
    int refs;                /* keys */
    uint64_t close_after;    /* refs 0: close once transfers before this one ended */
    char peer[64];
    LIST_ENTRY(cu_map) link;
} cu_map_t;

typedef struct cu_conn {
    bool same;               /* the same process */
    bool pid_visible;        /* another process whose pid we can check */
    bool gone;               /* it has exited */
    uint64_t token;
    int pid;
    char name[64];
} cu_conn_t;

typedef struct cu_rkey {
    int dev;                 /* our device the memory is on */
    cu_map_t *map;           /* IPC; NULL: same process, addresses as they are */
} cu_rkey_t;

typedef struct cu_wstream {
    cudaStream_t s;
    int users;
} cu_wstream_t;

/* one transfer (or event wait) in flight */
typedef struct cu_xop {
    cu_t *u;
    nxlt_op_t *op;
    atomic_int pending;      /* host functions still to run */
    struct cu_xop *next;     /* done stack */
    uint64_t seq;
    nxl_status_t st;
    char *why;
    cu_wstream_t *ws;        /* event wait: its stream */
    TAILQ_ENTRY(cu_xop) link;
} cu_xop_t;

typedef struct cu_pool {
    cudaStream_t s[CU_MAX_STREAMS];
    unsigned n;
    unsigned rr;
} cu_pool_t;

struct cu {
    nxlt_ctx_t *ctx;
    const nxl_cuda_rt_t *rt;
    int ndev;
    unsigned nstreams;
    cu_pool_t pool[CU_MAX_DEV];
    unsigned char uuid[CU_MAX_DEV][16];
    cu_wstream_t ws[CU_MAX_WAIT];
    int nws;
    int efd;
    nxlt_io_t *ev;
    _Atomic(cu_xop_t *) done;  /* pushed by host functions, taken by the reactor */
    TAILQ_HEAD(, cu_xop) inflight; /* in post order */
    uint64_t seq;
    LIST_HEAD(, cu_map) maps;
    bool closing;
    CUmodule kmod[CU_MAX_DEV]; /* the KV re-layout kernel, loaded on first use */
    CUfunction kfn[CU_MAX_DEV];
    uint64_t n_xfers, n_copies, n_bytes, n_waits, n_ipc_open, n_relayouts;
    char desc[320];
};

/* a re-layout's pieces, on the device */
typedef struct cu_plan {
    int dev;
    void *dp;                /* nxl_kv_piece_t[n] in device memory */
    size_t n;
} cu_plan_t;

#ifdef NXL_HAVE_KV_FATBIN
/* kv_relayout_fatbin.c, generated from kv_relayout.fatbin */
extern const unsigned char nxli_kv_relayout_fatbin[] __attribute__((visibility("hidden")));
extern const size_t nxli_kv_relayout_fatbin_len __attribute__((visibility("hidden")));
#endif

/* ------------------------------------------------------------ helpers */

static const char *cerr(cu_t *u, cudaError_t e, char *buf, size_t cap)
{
    u->rt->cudaGetLastError(); /* clear a non-sticky error */
    return nxl_cuda_rt_errstr(u->rt, e, buf, cap);
}

/* runs with @p dev current, then restores the application's device */
static int dev_push(cu_t *u, int dev)
{
    int prev = 0;
    u->rt->cudaGetDevice(&prev);
    if (prev != dev)
        u->rt->cudaSetDevice(dev);
    return prev;
}

static void dev_pop(cu_t *u, int prev, int dev)
{
    if (prev != dev)
        u->rt->cudaSetDevice(prev);
}

static nxl_status_t pool_get(cu_t *u, int dev, cu_pool_t **out)
{
    cu_pool_t *p = &u->pool[dev];
    if (!p->n) {
        int prev = dev_push(u, dev);
        for (unsigned i = 0; i < u->nstreams; i++) {
            cudaError_t e = u->rt->cudaStreamCreateWithFlags(&p->s[i], cudaStreamNonBlocking);
            if (e != cudaSuccess) {
                char b[160];
                nxlt_error(u->ctx, "CUDA: cudaStreamCreateWithFlags on device %d failed: %s",
                           dev, cerr(u, e, b, sizeof(b)));
                while (i--)
                    u->rt->cudaStreamDestroy(p->s[i]);
                dev_pop(u, prev, dev);
                return NXL_ERR_BACKEND;
            }
        }
        p->n = u->nstreams;
        dev_pop(u, prev, dev);
    }
    *out = p;
    return NXL_SUCCESS;
}

/* ------------------------------------------------------------ completion */

/* Runs on a CUDA driver thread: only the counter, the stack, the eventfd. */
static void CUDART_CB host_done(void *arg)
{
    cu_xop_t *x = arg;
    if (atomic_fetch_sub_explicit(&x->pending, 1, memory_order_acq_rel) != 1)
        return;
    cu_t *u = x->u;
    cu_xop_t *head = atomic_load_explicit(&u->done, memory_order_relaxed);
    do
        x->next = head;
    while (!atomic_compare_exchange_weak_explicit(&u->done, &head, x, memory_order_release,
                                                  memory_order_relaxed));
    if (!head) { /* the reactor takes the whole stack once woken */
        uint64_t one = 1;
        ssize_t w = write(u->efd, &one, sizeof(one));
        (void)w; /* EAGAIN: the counter is non-zero, the reactor wakes anyway */
    }
}

static void maps_close_due(cu_t *u);
static void xop_fail(cu_xop_t *x, nxl_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void xop_free(cu_xop_t *x)
{
    free(x->why);
    free(x);
}

/* takes what the host functions pushed, in completion order */
static cu_xop_t *take_done(cu_t *u)
{
    cu_xop_t *x = atomic_exchange_explicit(&u->done, NULL, memory_order_acquire), *rev = NULL;
    while (x) {
        cu_xop_t *n = x->next;
        x->next = rev;
        rev = x;
        x = n;
    }
    return rev;
}

static void reap(cu_t *u)
{
    uint64_t v;
    if (read(u->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
        nxlt_log(u->ctx, NXL_LOG_WARN, "CUDA: reading the completion eventfd: %s",
                 strerror(errno));
    cu_xop_t *x = take_done(u);
    while (x) {
        cu_xop_t *n = x->next;
        TAILQ_REMOVE(&u->inflight, x, link);
        if (x->ws)
            x->ws->users--;
        nxlt_op_done(x->op, x->st, x->st == NXL_SUCCESS ? NULL : x->why);
        xop_free(x);
        x = n;
    }
    maps_close_due(u);
}

static void on_efd(nxlt_io_t *io, int fd, unsigned ready, void *arg)
{
    reap(arg);
}

/* Queues the host function behind the work on @p s. On failure the
 * stream is synchronized instead (an error path: nothing else would tell
 * when its copies end) and the count goes down here. */
static void launch_done(cu_t *u, cu_xop_t *x, cudaStream_t s)
{
    cudaError_t e = u->rt->cudaLaunchHostFunc(s, host_done, x);
    if (e == cudaSuccess)
        return;
    char b[160];
    cerr(u, e, b, sizeof(b));
    nxlt_log(u->ctx, NXL_LOG_ERROR, "CUDA: cudaLaunchHostFunc failed (%s); waiting for the "
             "stream instead", b);
    xop_fail(x, NXL_ERR_BACKEND, "CUDA: cudaLaunchHostFunc failed: %s", b);
    u->rt->cudaStreamSynchronize(s);
    host_done(x);
}

static cu_xop_t *xop_new(cu_t *u, nxlt_op_t *op)
{
    cu_xop_t *x = calloc(1, sizeof(*x));
    if (!x)
        return NULL;
    x->u = u;
    x->op = op;
    x->st = NXL_SUCCESS;
    x->seq = ++u->seq;
    atomic_init(&x->pending, 0);
    return x;
}

static void xop_fail(cu_xop_t *x, nxl_status_t st, const char *fmt, ...)
{
    if (x->st != NXL_SUCCESS)
        return;
    x->st = st;
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&x->why, fmt, ap) < 0)
        x->why = NULL;
    va_end(ap);
}

/* ------------------------------------------------------------ IPC maps */

static uint64_t oldest_inflight(cu_t *u)
{
    cu_xop_t *x = TAILQ_FIRST(&u->inflight);
    return x ? x->seq : UINT64_MAX;
}

static void map_close(cu_t *u, cu_map_t *m)
{
    if (!m->ptr)
        return;
    int prev = dev_push(u, m->dev);
    cudaError_t e = u->rt->cudaIpcCloseMemHandle(m->ptr);
    dev_pop(u, prev, m->dev);
    if (e != cudaSuccess) {
        char b[160];
        nxlt_log(u->ctx, NXL_LOG_WARN, "CUDA: cudaIpcCloseMemHandle of agent '%s''s VRAM failed: "
                 "%s", m->peer, cerr(u, e, b, sizeof(b)));
    }
    m->ptr = NULL;
}

/* closes the maps no key holds once no transfer posted before they were
 * released is in flight */
static void maps_close_due(cu_t *u)
{
    uint64_t old = oldest_inflight(u);
    cu_map_t *m, *n;
    for (m = LIST_FIRST(&u->maps); m; m = n) {
        n = LIST_NEXT(m, link);
        if (m->refs || m->close_after > old)
            continue;
        map_close(u, m);
        LIST_REMOVE(m, link);
        free(m);
    }
}

static nxl_status_t map_open(cu_t *u, cu_map_t *m)
{
    int prev = dev_push(u, m->dev);
    void *p = NULL;
    cudaError_t e = u->rt->cudaIpcOpenMemHandle(&p, m->h, cudaIpcMemLazyEnablePeerAccess);
    dev_pop(u, prev, m->dev);
    if (e != cudaSuccess) {
        char b[160];
        bool gone = m->pid_visible && kill(m->pid, 0) < 0 && errno == ESRCH;
        nxlt_error(u->ctx, "CUDA: cudaIpcOpenMemHandle of agent '%s''s VRAM (process %d, "
                   "allocation 0x%llx+%llu) on device %d failed: %s; %s", m->peer, m->pid,
                   (unsigned long long)m->base, (unsigned long long)m->size, m->dev,
                   cerr(u, e, b, sizeof(b)),
                   gone ? "that process has exited"
                        : "the peer may have freed it, or the processes do not share the "
                          "GPU's IPC (containers need a common IPC namespace)");
        return gone ? NXL_ERR_REMOTE_DISCONNECT : NXL_ERR_BACKEND;
    }
    m->ptr = p;
    u->n_ipc_open++;
    nxlt_log(u->ctx, NXL_LOG_DEBUG, "CUDA: opened agent '%s''s VRAM 0x%llx+%llu on device %d",
             m->peer, (unsigned long long)m->base, (unsigned long long)m->size, m->dev);
    return NXL_SUCCESS;
}

/* ------------------------------------------------------------ memory */

static nxl_status_t reg_vram(cu_t *u, const nxl_desc_t *d, cu_reg_t *r)
{
    const nxl_cuda_rt_t *rt = u->rt;
    char b[512];
    if (d->dev_id >= (uint64_t)u->ndev) {
        nxlt_error(u->ctx, "CUDA: VRAM region 0x%lx+%zu names device %llu, but %d device%s "
                   "visible (desc.dev_id is the CUDA device ordinal)", (unsigned long)d->addr,
                   d->len, (unsigned long long)d->dev_id, u->ndev, u->ndev == 1 ? " is" : "s are");
        return NXL_ERR_INVALID_PARAM;
    }
    uintptr_t base = 0;
    size_t size = 0;
    int st = nxl_cuda_vram_check(rt, "CUDA", d->addr, d->len, d->dev_id, &base, &size, b,
                                 sizeof(b));
    if (st != 0) {
        nxlt_error(u->ctx, "%s", b);
        return (nxl_status_t)st;
    }
    r->dev = (int)d->dev_id;
    r->base = base;
    r->size = size;
    return NXL_SUCCESS;
}

static nxl_status_t reg_dram(cu_t *u, const nxl_desc_t *d, cu_reg_t *r)
{
    const nxl_cuda_rt_t *rt = u->rt;
    char b[160];
    struct cudaPointerAttributes at;
    memset(&at, 0, sizeof(at));
    cudaError_t e = rt->cudaPointerGetAttributes(&at, (const void *)d->addr);
    if (e != cudaSuccess) {
        cerr(u, e, b, sizeof(b));
        at.type = cudaMemoryTypeUnregistered; /* older runtimes say so for plain host memory */
    }
    if (at.type == cudaMemoryTypeDevice || at.type == cudaMemoryTypeManaged) {
        nxlt_error(u->ctx, "CUDA: DRAM region 0x%lx+%zu is %s of device %d, not host memory; "
                   "register it as VRAM", (unsigned long)d->addr, d->len, nxl_cuda_memtype_name(at.type),
                   at.device);
        return at.type == cudaMemoryTypeManaged ? NXL_ERR_NOT_SUPPORTED : NXL_ERR_INVALID_PARAM;
    }
    if (at.type == cudaMemoryTypeHost)
        return NXL_SUCCESS; /* pinned already (cudaHostAlloc, cudaHostRegister): left as it is */
    e = rt->cudaHostRegister((void *)d->addr, d->len, cudaHostRegisterPortable);
    if (e == cudaErrorHostMemoryAlreadyRegistered) {
        rt->cudaGetLastError();
        return NXL_SUCCESS;
    }
    if (e != cudaSuccess) {
        nxlt_error(u->ctx, "CUDA: cudaHostRegister of DRAM region 0x%lx+%zu failed: %s; pinning "
                   "needs the memory mapped and, for an unprivileged user, a locked-memory "
                   "limit (ulimit -l) that allows it", (unsigned long)d->addr, d->len,
                   cerr(u, e, b, sizeof(b)));
        return NXL_ERR_BACKEND;
    }
    r->pinned = true;
    return NXL_SUCCESS;
}

static nxl_status_t reg(void *state, nxl_mem_t type, const nxl_desc_t *d, void **md)
{
    cu_t *u = state;
    cu_reg_t *r = nxlt_regspan_new(u->ctx, "CUDA", sizeof(*r), type, d);
    if (!r)
        return NXL_ERR_UNKNOWN;
    nxl_status_t st = type == NXL_VRAM ? reg_vram(u, d, r) : reg_dram(u, d, r);
    if (st != NXL_SUCCESS) {
        free(r);
        return st;
    }
    *md = r;
    return NXL_SUCCESS;
}

static void dereg(void *state, void *md)
{
    cu_t *u = state;
    cu_reg_t *r = md;
    if (r->pinned) {
        cudaError_t e = u->rt->cudaHostUnregister((void *)r->span.addr);
        if (e != cudaSuccess) {
            char b[160];
            nxlt_log(u->ctx, NXL_LOG_WARN, "CUDA: cudaHostUnregister of 0x%lx failed: %s",
                     (unsigned long)r->span.addr, cerr(u, e, b, sizeof(b)));
        }
    }
    free(r);
}

static nxl_status_t mem_alloc(void *state, nxl_mem_t type, size_t len, uint64_t dev, void **ptr,
                              void **md)
{
    cu_t *u = state;
    char b[160];
    if (type == NXL_VRAM && dev >= (uint64_t)u->ndev) {
        nxlt_error(u->ctx, "CUDA: nxl_mem_alloc(VRAM) on device %llu, but %d device%s visible",
                   (unsigned long long)dev, u->ndev, u->ndev == 1 ? " is" : "s are");
        return NXL_ERR_INVALID_PARAM;
    }
    cu_reg_t *r = calloc(1, sizeof(*r));
    if (!r) {
        nxlt_error(u->ctx, "CUDA: out of memory");
        return NXL_ERR_UNKNOWN;
    }
    void *p = NULL;
    cudaError_t e;
    if (type == NXL_VRAM) {
        int prev = dev_push(u, (int)dev);
        e = u->rt->cudaMalloc(&p, len);
        dev_pop(u, prev, (int)dev);
    } else {
        e = u->rt->cudaHostAlloc(&p, len, cudaHostAllocPortable);
    }
    if (e != cudaSuccess) {
        nxlt_error(u->ctx, "CUDA: %s of %zu bytes%s failed: %s",
                   type == NXL_VRAM ? "cudaMalloc" : "cudaHostAlloc", len,
                   type == NXL_VRAM ? " on the device" : "", cerr(u, e, b, sizeof(b)));
        free(r);
        return NXL_ERR_BACKEND;
    }
    r->span.type = type;
    r->span.addr = (uintptr_t)p;
    r->span.len = len;
    r->alloc = true;
    r->dev = type == NXL_VRAM ? (int)dev : 0;
    r->base = (uintptr_t)p;
    r->size = len;
    *ptr = p;
    *md = r;
    return NXL_SUCCESS;
}

/* cudaFree and cudaFreeHost synchronize the device: the region is free of
 * transfers (the engine keeps it while any uses it), so it waits only for
 * the application's own work. */
static void mem_free(void *state, void *ptr, void *md)
{
    cu_t *u = state;
    cu_reg_t *r = md;
    cudaError_t e = r->span.type == NXL_VRAM ? u->rt->cudaFree(ptr) : u->rt->cudaFreeHost(ptr);
    if (e != cudaSuccess) {
        char b[160];
        nxlt_log(u->ctx, NXL_LOG_WARN, "CUDA: freeing %s at %p failed: %s",
                 nxl_mem_name(r->span.type), ptr, cerr(u, e, b, sizeof(b)));
    }
    free(r);
}

/* ------------------------------------------------------------ keys, connections */

static nxl_status_t pack_key(void *state, void *md, void **buf, size_t *len)
{
    cu_t *u = state;
    cu_reg_t *r = md;
    *buf = NULL;
    *len = 0;
    if (r->span.type != NXL_VRAM)
        return NXL_SUCCESS; /* the remote side is always VRAM */
    if (!r->ipc_tried) {
        r->ipc_tried = true;
        cudaError_t e = u->rt->cudaIpcGetMemHandle(&r->ipc, (void *)r->base);
        r->ipc_ok = e == cudaSuccess;
        if (!r->ipc_ok) {
            char b[160];
            nxlt_log(u->ctx, NXL_LOG_INFO, "CUDA: VRAM 0x%lx+%zu cannot be shared with other "
                     "processes (cudaIpcGetMemHandle: %s): only this process reaches it",
                     (unsigned long)r->span.addr, r->span.len, cerr(u, e, b, sizeof(b)));
        }
    }
    cu_wire_key_t *k = calloc(1, sizeof(*k));
    if (!k)
        return NXL_ERR_UNKNOWN;
    pthread_once(&id_once, id_init);
    k->magic = KEY_MAGIC;
    k->flags = r->ipc_ok ? KEY_IPC : 0;
    k->token = my_token;
    k->pid = (int32_t)getpid();
    k->dev = r->dev;
    k->addr = r->span.addr;
    k->len = r->span.len;
    k->base = r->base;
    k->size = r->size;
    memcpy(k->uuid, u->uuid[r->dev], sizeof(k->uuid));
    if (r->ipc_ok)
        memcpy(k->ipc, &r->ipc, sizeof(k->ipc));
    *buf = k;
    *len = sizeof(*k);
    return NXL_SUCCESS;
}

static nxl_status_t conn_info(void *state, void **buf, size_t *len)
{
    cu_t *u = state;
    cu_wire_conn_t *c = calloc(1, sizeof(*c));
    if (!c)
        return NXL_ERR_UNKNOWN;
    pthread_once(&id_once, id_init);
    c->magic = CONN_MAGIC;
    c->version = 1;
    c->token = my_token;
    c->pid = (int32_t)getpid();
    c->ndev = (uint32_t)u->ndev;
    c->pidns = my_pidns;
    memcpy(c->boot, my_boot, sizeof(c->boot));
    *buf = c;
    *len = sizeof(*c);
    return NXL_SUCCESS;
}

static nxl_status_t load_conn(void *state, const char *agent, const void *info, size_t len,
                              void **conn)
{
    cu_t *u = state;
    cu_wire_conn_t c;
    *conn = NULL;
    const char *bad = cu_conn_parse(info, len, &c);
    if (bad) {
        nxlt_error(u->ctx, "CUDA: connection info of agent '%s' (%zu bytes) is %s (another nxl "
                   "version?)", agent, len, bad);
        return NXL_ERR_MISMATCH;
    }
    pthread_once(&id_once, id_init);
    if (strcmp(c.boot, my_boot))
        return NXL_SUCCESS; /* another host: CUDA does not reach it (no connection) */
    cu_conn_t *k = calloc(1, sizeof(*k));
    if (!k)
        return NXL_ERR_UNKNOWN;
    k->same = c.token == my_token && c.pid == (int32_t)getpid();
    k->pid_visible = !k->same && my_pidns && c.pidns == my_pidns;
    k->token = c.token;
    k->pid = c.pid;
    snprintf(k->name, sizeof(k->name), "%s", agent);
    *conn = k;
    return NXL_SUCCESS;
}

static void unload_conn(void *state, void *conn)
{
    free(conn);
}

static int dev_by_uuid(cu_t *u, const unsigned char *uuid)
{
    for (int d = 0; d < u->ndev; d++)
        if (!memcmp(u->uuid[d], uuid, 16))
            return d;
    return -1;
}

static nxl_status_t load_key(void *state, void *conn, const void *buf, size_t len, void **rkey)
{
    cu_t *u = state;
    cu_conn_t *c = conn;
    cu_wire_key_t k;
    *rkey = NULL;
    const char *bad = cu_key_parse(buf, len, &k);
    if (!bad && (k.token != c->token || k.pid != c->pid))
        bad = "another process's";
    if (bad) {
        nxlt_error(u->ctx, "CUDA: a VRAM key of agent '%s' (%zu bytes) is %s", c->name, len, bad);
        return NXL_ERR_MISMATCH;
    }
    cu_rkey_t *rk = calloc(1, sizeof(*rk));
    if (!rk)
        return NXL_ERR_UNKNOWN;
    if (c->same) {
        /* the same process: the address is ours */
        if (k.dev < 0 || k.dev >= u->ndev) {
            free(rk);
            nxlt_error(u->ctx, "CUDA: a VRAM key of agent '%s' names device %d of %d", c->name,
                       k.dev, u->ndev);
            return NXL_ERR_MISMATCH;
        }
        rk->dev = k.dev;
        *rkey = rk;
        return NXL_SUCCESS;
    }
    int dev = dev_by_uuid(u, k.uuid);
    if (!(k.flags & KEY_IPC) || dev < 0) {
        /* not reachable from here: no key, the engine looks for another transport */
        nxlt_log(u->ctx, NXL_LOG_DEBUG, "CUDA: agent '%s''s VRAM 0x%llx is not reachable here "
                 "(%s)", c->name, (unsigned long long)k.addr,
                 dev < 0 ? "its device is not visible to this process" : "no IPC handle");
        free(rk);
        return NXL_SUCCESS;
    }
    cu_map_t *m;
    LIST_FOREACH(m, &u->maps, link)
    if (m->token == k.token && m->pid == k.pid && m->base == k.base && m->size == k.size &&
        !memcmp(&m->h, k.ipc, sizeof(m->h)))
        break;
    if (!m) {
        m = calloc(1, sizeof(*m));
        if (!m) {
            free(rk);
            return NXL_ERR_UNKNOWN;
        }
        m->token = k.token;
        m->pid = k.pid;
        m->pid_visible = c->pid_visible;
        m->base = k.base;
        m->size = k.size;
        memcpy(&m->h, k.ipc, sizeof(m->h));
        m->dev = dev;
        snprintf(m->peer, sizeof(m->peer), "%s", c->name);
        LIST_INSERT_HEAD(&u->maps, m, link);
    }
    m->refs++; /* a map released before and not yet closed is taken up again */
    rk->dev = dev;
    rk->map = m;
    *rkey = rk;
    return NXL_SUCCESS;
}

static void unload_key(void *state, void *rkey)
{
    cu_t *u = state;
    cu_rkey_t *rk = rkey;
    if (rk->map && --rk->map->refs == 0) {
        rk->map->close_after = u->seq + 1; /* after every transfer posted so far */
        maps_close_due(u);
    }
    free(rk);
}

/* ------------------------------------------------------------ transfers */

static nxl_status_t post(void *state, nxlt_op_t *op, const nxlt_xfer_t *t)
{
    cu_t *u = state;
    char b[160];
    if (u->closing) {
        nxlt_error(u->ctx, "CUDA: the transport is shutting down");
        return NXL_ERR_NOT_ALLOWED;
    }
    if (!t->conn || t->rtype != NXL_VRAM || (t->ltype != NXL_DRAM && t->ltype != NXL_VRAM)) {
        nxlt_error(u->ctx, "CUDA: moves DRAM or VRAM (the local list) to and from VRAM (the list "
                   "prepared against the agent itself, or a peer on this host), not %s and %s",
                   nxl_mem_name(t->ltype), nxl_mem_name(t->rtype));
        return NXL_ERR_NOT_SUPPORTED;
    }
    /* a peer process that exited left nothing to copy to or from */
    cu_conn_t *c = t->conn;
    if (c->pid_visible && (c->gone || (kill(c->pid, 0) < 0 && errno == ESRCH))) {
        c->gone = true;
        nxlt_error(u->ctx, "CUDA: agent '%s' (process %d) has exited: its VRAM is gone; load its "
                   "metadata again once it is back", c->name, c->pid);
        return NXL_ERR_REMOTE_DISCONNECT;
    }
    /* everything is resolved before anything is queued: an error here
     * starts nothing */
    for (size_t i = 0; i < t->n; i++) {
        const nxlt_iov_t *v = &t->iov[i];
        cu_rkey_t *rk = v->rkey;
        cu_reg_t *lr = v->lmd;
        if (!rk || !lr) {
            nxlt_error(u->ctx, "CUDA: element %zu has no %s registration with CUDA", i,
                       rk ? "local" : "remote VRAM");
            return NXL_ERR_NOT_SUPPORTED;
        }
        if (rk->map) {
            cu_map_t *m = rk->map;
            if (v->raddr < m->base || v->len > m->size || v->raddr - m->base > m->size - v->len) {
                nxlt_error(u->ctx, "CUDA: element %zu (0x%llx+%zu) lies outside agent '%s''s "
                           "allocation 0x%llx+%llu its key names", i,
                           (unsigned long long)v->raddr, v->len, m->peer,
                           (unsigned long long)m->base, (unsigned long long)m->size);
                return NXL_ERR_INVALID_PARAM;
            }
            if (!m->ptr) {
                nxl_status_t st = map_open(u, m);
                if (st != NXL_SUCCESS)
                    return st;
            }
        }
        cu_pool_t *p;
        nxl_status_t st = pool_get(u, t->ltype == NXL_VRAM ? lr->dev : rk->dev, &p);
        if (st != NXL_SUCCESS)
            return st;
    }
    cu_xop_t *x = xop_new(u, op);
    if (!x) {
        nxlt_error(u->ctx, "CUDA: out of memory");
        return NXL_ERR_UNKNOWN;
    }
    uint32_t used[CU_MAX_DEV] = {0};
    unsigned start[CU_MAX_DEV];
    bool began[CU_MAX_DEV] = {0};
    size_t queued = 0;
    bool write = t->op == NXL_WRITE;
    for (size_t i = 0; i < t->n; i++) {
        const nxlt_iov_t *v = &t->iov[i];
        if (!v->len)
            continue;
        cu_rkey_t *rk = v->rkey;
        cu_reg_t *lr = v->lmd;
        int dev = t->ltype == NXL_VRAM ? lr->dev : rk->dev;
        cu_pool_t *p = &u->pool[dev];
        if (!began[dev]) { /* each transfer starts on the next stream */
            began[dev] = true;
            start[dev] = p->rr++;
        }
        unsigned si = (unsigned)((start[dev] + queued) % p->n);
        char *remote = rk->map ? rk->map->ptr + (v->raddr - rk->map->base) : (char *)v->raddr;
        void *dst = write ? remote : v->laddr;
        const void *src = write ? (const void *)v->laddr : remote;
        cudaError_t e = u->rt->cudaMemcpyAsync(dst, src, v->len, cudaMemcpyDefault, p->s[si]);
        if (e != cudaSuccess) {
            if (!queued) {
                nxlt_error(u->ctx, "CUDA: cudaMemcpyAsync of element %zu (%zu bytes, %s %s) "
                           "failed: %s", i, v->len, nxl_mem_name(t->ltype),
                           write ? "to VRAM" : "from VRAM", cerr(u, e, b, sizeof(b)));
                xop_free(x);
                return NXL_ERR_BACKEND;
            }
            /* copies are queued already: the transfer fails once they ended */
            xop_fail(x, NXL_ERR_BACKEND, "CUDA: cudaMemcpyAsync of element %zu (%zu bytes, %s %s) "
                     "failed after %zu copies were queued: %s", i, v->len,
                     nxl_mem_name(t->ltype), write ? "to VRAM" : "from VRAM", queued,
                     cerr(u, e, b, sizeof(b)));
            break;
        }
        used[dev] |= 1u << si;
        queued++;
        u->n_bytes += v->len;
    }
    u->n_copies += queued;
    u->n_xfers++;
    TAILQ_INSERT_TAIL(&u->inflight, x, link);
    int nused = 0;
    for (int d = 0; d < u->ndev; d++)
        nused += __builtin_popcount(used[d]);
    if (!nused) {
        /* nothing to move: done on the next reactor turn */
        atomic_store(&x->pending, 1);
        host_done(x);
        return NXL_SUCCESS;
    }
    /* the count is set before any host function can run */
    atomic_store_explicit(&x->pending, nused, memory_order_release);
    for (int d = 0; d < u->ndev; d++)
        for (unsigned s = 0; used[d]; s++)
            if (used[d] & (1u << s)) {
                used[d] &= ~(1u << s);
                launch_done(u, x, u->pool[d].s[s]);
            }
    return NXL_SUCCESS;
}

static nxl_status_t notif_send(void *state, nxlt_op_t *op, void *conn, const void *msg,
                               size_t len)
{
    cu_t *u = state;
    nxlt_error(u->ctx, "CUDA: carries no notifications (the engine sends a transfer's "
               "notification through UCX)");
    return NXL_ERR_NOT_SUPPORTED;
}

/* ------------------------------------------------------------ event waits */

static cu_wstream_t *wstream_get(cu_t *u)
{
    cu_wstream_t *best = NULL;
    for (int i = 0; i < u->nws; i++)
        if (!best || u->ws[i].users < best->users)
            best = &u->ws[i];
    if (best && (!best->users || u->nws == CU_MAX_WAIT))
        return best;
    /* a stream of its own for each concurrent wait, up to CU_MAX_WAIT */
    cu_wstream_t *w = &u->ws[u->nws];
    cudaError_t e = u->rt->cudaStreamCreateWithFlags(&w->s, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        char b[160];
        cerr(u, e, b, sizeof(b));
        return best; /* share one */
    }
    w->users = 0;
    u->nws++;
    return w;
}

static nxl_status_t wait_event(void *state, nxlt_op_t *op, void *event)
{
    cu_t *u = state;
    char b[160];
    if (u->closing) {
        nxlt_error(u->ctx, "CUDA: the transport is shutting down");
        return NXL_ERR_NOT_ALLOWED;
    }
    cu_wstream_t *w = wstream_get(u);
    if (!w) {
        nxlt_error(u->ctx, "CUDA: nxl_future_from_cuda_event: cudaStreamCreateWithFlags failed; "
                   "no stream to wait on");
        return NXL_ERR_BACKEND;
    }
    cu_xop_t *x = xop_new(u, op);
    if (!x) {
        nxlt_error(u->ctx, "CUDA: out of memory");
        return NXL_ERR_UNKNOWN;
    }
    cudaError_t e = u->rt->cudaStreamWaitEvent(w->s, (cudaEvent_t)event, 0);
    if (e != cudaSuccess) {
        nxlt_error(u->ctx, "CUDA: nxl_future_from_cuda_event: cudaStreamWaitEvent failed: %s; "
                   "pass a cudaEvent_t from cudaEventCreate that was not destroyed",
                   cerr(u, e, b, sizeof(b)));
        xop_free(x);
        return e == cudaErrorInvalidResourceHandle || e == cudaErrorInvalidValue
                   ? NXL_ERR_INVALID_PARAM
                   : NXL_ERR_BACKEND;
    }
    w->users++;
    x->ws = w;
    u->n_waits++;
    TAILQ_INSERT_TAIL(&u->inflight, x, link);
    atomic_store_explicit(&x->pending, 1, memory_order_release);
    launch_done(u, x, w->s);
    return NXL_SUCCESS;
}

/* ------------------------------------------------------------ KV re-layout */

static const char *cuerr(cu_t *u, CUresult r, char *buf, size_t cap)
{
    const char *name = NULL;
    if (u->rt->cuGetErrorName)
        u->rt->cuGetErrorName(r, &name);
    snprintf(buf, cap, "%s (%d)", name ? name : "CUDA driver error", (int)r);
    return buf;
}

/* the kernel of device @p dev, loaded once */
static nxl_status_t kernel_get(cu_t *u, int dev)
{
#ifndef NXL_HAVE_KV_FATBIN
    (void)dev;
    nxlt_error(u->ctx, "CUDA: this build has no KV re-layout kernel: nvcc was not found when "
               "libnxl was configured, so lib/transports/cuda/kv_relayout.cu was not compiled "
               "and a staged KV transfer into VRAM cannot be re-laid out on the GPU (rebuild "
               "with the CUDA toolkit's nvcc, or use NXL_KV_ZCOPY or a DRAM decode region)");
    return NXL_ERR_NOT_SUPPORTED;
#else
    if (u->kfn[dev])
        return NXL_SUCCESS;
    const nxl_cuda_rt_t *rt = u->rt;
    if (!rt->cuModuleLoadData || !rt->cuModuleGetFunction || !rt->cuLaunchKernel) {
        nxlt_error(u->ctx, "CUDA: the driver (%s) lacks cuModuleLoadData, cuModuleGetFunction or "
                   "cuLaunchKernel: the KV re-layout kernel cannot be loaded",
                   getenv("NXL_CUDA_DRIVER") ? getenv("NXL_CUDA_DRIVER") : "libcuda.so.1");
        return NXL_ERR_NOT_SUPPORTED;
    }
    char b[160];
    int prev = dev_push(u, dev);
    u->rt->cudaFree(NULL); /* the device's primary context, current for the driver */
    CUmodule m = NULL;
    CUfunction f = NULL;
    CUresult r = rt->cuModuleLoadData(&m, nxli_kv_relayout_fatbin);
    if (r == CUDA_SUCCESS && (r = rt->cuModuleGetFunction(&f, m, "nxl_kv_relayout")) != CUDA_SUCCESS &&
        rt->cuModuleUnload)
        rt->cuModuleUnload(m);
    dev_pop(u, prev, dev);
    if (r != CUDA_SUCCESS) {
        nxlt_error(u->ctx, "CUDA: loading the KV re-layout kernel (%zu bytes of fatbin for sm_80, "
                   "sm_90 and PTX) on device %d failed: %s", nxli_kv_relayout_fatbin_len, dev,
                   cuerr(u, r, b, sizeof(b)));
        return NXL_ERR_BACKEND;
    }
    u->kmod[dev] = m;
    u->kfn[dev] = f;
    return NXL_SUCCESS;
#endif
}

static nxl_status_t relayout_prep(void *state, nxl_mem_t type, uint64_t dev,
                                  const nxl_kv_piece_t *pieces, size_t n, void **out)
{
    cu_t *u = state;
    char b[160];
    if (type != NXL_VRAM) {
        nxlt_error(u->ctx, "CUDA: re-lays out VRAM on its device, not %s", nxl_mem_name(type));
        return NXL_ERR_NOT_SUPPORTED;
    }
    if (dev >= (uint64_t)u->ndev) {
        nxlt_error(u->ctx, "CUDA: a KV re-layout on device %llu, but %d device%s visible",
                   (unsigned long long)dev, u->ndev, u->ndev == 1 ? " is" : "s are");
        return NXL_ERR_INVALID_PARAM;
    }
    nxl_status_t st = kernel_get(u, (int)dev);
    if (st != NXL_SUCCESS)
        return st;
    cu_plan_t *p = calloc(1, sizeof(*p));
    if (!p) {
        nxlt_error(u->ctx, "CUDA: out of memory");
        return NXL_ERR_UNKNOWN;
    }
    p->dev = (int)dev;
    p->n = n;
    if (n) {
        int prev = dev_push(u, p->dev);
        cudaError_t e = u->rt->cudaMalloc(&p->dp, n * sizeof(*pieces));
        if (e == cudaSuccess)
            e = u->rt->cudaMemcpy(p->dp, pieces, n * sizeof(*pieces), cudaMemcpyHostToDevice);
        if (e != cudaSuccess) {
            nxlt_error(u->ctx, "CUDA: uploading the %zu pieces of a KV re-layout to device %d "
                       "failed: %s", n, p->dev, cerr(u, e, b, sizeof(b)));
            if (p->dp)
                u->rt->cudaFree(p->dp);
            dev_pop(u, prev, p->dev);
            free(p);
            return NXL_ERR_BACKEND;
        }
        dev_pop(u, prev, p->dev);
    }
    *out = p;
    return NXL_SUCCESS;
}

static nxl_status_t relayout(void *state, nxlt_op_t *op, void *plan, size_t first, size_t n)
{
    cu_t *u = state;
    cu_plan_t *p = plan;
    char b[160];
    if (u->closing) {
        nxlt_error(u->ctx, "CUDA: the transport is shutting down");
        return NXL_ERR_NOT_ALLOWED;
    }
    if (!p || first > p->n || n > p->n - first) {
        nxlt_error(u->ctx, "CUDA: KV re-layout of pieces %zu to %zu, but the plan has %zu",
                   first, first + n, p ? p->n : 0);
        return NXL_ERR_INVALID_PARAM;
    }
    cu_pool_t *pl;
    nxl_status_t st = pool_get(u, p->dev, &pl);
    if (st != NXL_SUCCESS)
        return st;
    cu_xop_t *x = xop_new(u, op);
    if (!x) {
        nxlt_error(u->ctx, "CUDA: out of memory");
        return NXL_ERR_UNKNOWN;
    }
    cudaStream_t s = pl->s[pl->rr++ % pl->n];
    if (n) {
        const void *dp = (const char *)p->dp + first * sizeof(nxl_kv_piece_t);
        uint64_t cnt = n;
        void *args[] = {&dp, &cnt};
        unsigned grid = n < CU_KV_MAX_GRID ? (unsigned)n : CU_KV_MAX_GRID;
        int prev = dev_push(u, p->dev);
        CUresult r = u->rt->cuLaunchKernel(u->kfn[p->dev], grid, 1, 1, CU_KV_THREADS, 1, 1, 0,
                                           (CUstream)s, args, NULL);
        dev_pop(u, prev, p->dev);
        if (r != CUDA_SUCCESS) {
            nxlt_error(u->ctx, "CUDA: launching the KV re-layout kernel (%zu pieces) on device "
                       "%d failed: %s", n, p->dev, cuerr(u, r, b, sizeof(b)));
            xop_free(x);
            return NXL_ERR_BACKEND;
        }
        u->n_relayouts++;
    }
    TAILQ_INSERT_TAIL(&u->inflight, x, link);
    atomic_store_explicit(&x->pending, 1, memory_order_release);
    launch_done(u, x, s);
    return NXL_SUCCESS;
}

static void relayout_free(void *state, void *plan)
{
    cu_t *u = state;
    cu_plan_t *p = plan;
    if (!p)
        return;
    if (p->dp) {
        int prev = dev_push(u, p->dev);
        u->rt->cudaFree(p->dp);
        dev_pop(u, prev, p->dev);
    }
    free(p);
}

/* ------------------------------------------------------------ instance */

static int probe(char *why, size_t cap)
{
    int kind;
    const nxl_cuda_rt_t *rt = nxl_cuda_rt_get(&kind, why, cap);
    if (!rt)
        return 0;
    snprintf(why, cap, "CUDA %d.%d (%s): %d device%s; DRAM and VRAM within the host, CUDA IPC",
             rt->runtime_version / 1000, rt->runtime_version % 1000 / 10, rt->lib, rt->ndev,
             rt->ndev == 1 ? "" : "s");
    return 1;
}

static void destroy(void *state);

static nxl_status_t create(nxlt_ctx_t *ctx, const nxl_param_t *params, size_t n, void **out)
{
    /* the engine has refused keys cu_params does not list */
    uint64_t streams = CU_DEF_STREAMS;
    nxl_status_t pst = nxlt_param_uint(ctx, params, n, "streams", 1, CU_MAX_STREAMS, &streams);
    if (pst != NXL_SUCCESS)
        return pst;
    unsigned nstreams = (unsigned)streams;
    char why[160];
    int kind;
    const nxl_cuda_rt_t *rt = nxl_cuda_rt_get(&kind, why, sizeof(why));
    if (!rt) {
        nxlt_error(ctx, "CUDA: cannot create the transport: %s; %s", why,
                   kind == NXL_CUDA_NO_RUNTIME
                       ? "install the CUDA runtime (libcudart) or set NXL_CUDA_RUNTIME to it"
                   : kind == NXL_CUDA_NO_DRIVER
                       ? "the NVIDIA driver is missing or older than the runtime: run on a "
                         "machine with a GPU and its driver"
                       : "no GPU is visible to this process (CUDA_VISIBLE_DEVICES?)");
        return NXL_ERR_BACKEND;
    }
    cu_t *u = calloc(1, sizeof(*u));
    if (!u) {
        nxlt_error(ctx, "CUDA: out of memory");
        return NXL_ERR_UNKNOWN;
    }
    u->ctx = ctx;
    u->rt = rt;
    u->ndev = rt->ndev < CU_MAX_DEV ? rt->ndev : CU_MAX_DEV;
    u->nstreams = nstreams;
    u->efd = -1;
    atomic_init(&u->done, NULL);
    TAILQ_INIT(&u->inflight);
    LIST_INIT(&u->maps);
    int len = snprintf(u->desc, sizeof(u->desc), "CUDA %d.%d (%s), driver %d.%d: ",
                       rt->runtime_version / 1000, rt->runtime_version % 1000 / 10, rt->lib,
                       rt->driver_version / 1000, rt->driver_version % 1000 / 10);
    for (int d = 0; d < u->ndev; d++) {
        CUdevice cd;
        CUuuid id;
        char name[96] = "?";
        size_t mem = 0;
        if (rt->cuDeviceGet(&cd, d) != CUDA_SUCCESS || rt->cuDeviceGetUuid(&id, cd) != CUDA_SUCCESS) {
            nxlt_error(ctx, "CUDA: the driver does not describe device %d (cuDeviceGet, "
                       "cuDeviceGetUuid)", d);
            destroy(u);
            return NXL_ERR_BACKEND;
        }
        memcpy(u->uuid[d], id.bytes, 16);
        if (rt->cuDeviceGetName)
            rt->cuDeviceGetName(name, sizeof(name), cd);
        if (rt->cuDeviceTotalMem)
            rt->cuDeviceTotalMem(&mem, cd);
        if (len > 0 && (size_t)len < sizeof(u->desc))
            len += snprintf(u->desc + len, sizeof(u->desc) - (size_t)len, "%sdevice %d %s (%zu GiB)",
                            d ? ", " : "", d, name, mem >> 30);
    }
    if (len > 0 && (size_t)len < sizeof(u->desc))
        snprintf(u->desc + len, sizeof(u->desc) - (size_t)len,
                 "; %u copy streams per device; CUDA IPC between processes", nstreams);
    u->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (u->efd < 0 ||
        !(u->ev = nxlt_io_new(ctx, u->efd, on_efd, u)) ||
        nxlt_io_start(u->ev, NXLT_IO_READ) < 0) {
        nxlt_error(ctx, "CUDA: could not put a completion eventfd into the reactor (%s)",
                   u->efd < 0 ? strerror(errno) : "the loop refused it");
        destroy(u);
        return NXL_ERR_BACKEND;
    }
    nxlt_log(ctx, NXL_LOG_INFO, "CUDA: %s", u->desc);
    *out = u;
    return NXL_SUCCESS;
}

/* Teardown may block (nxl_agent_destroy does): the GPU must be done with
 * the application's buffers before any CANCELED callback runs, so every
 * stream is synchronized here, the only place this transport waits for
 * the GPU. Then every transfer is reported done, CANCELED. */
static void quiesce(void *state)
{
    cu_t *u = state;
    if (u->closing)
        return;
    u->closing = true;
    for (int d = 0; d < u->ndev; d++)
        for (unsigned i = 0; i < u->pool[d].n; i++)
            u->rt->cudaStreamSynchronize(u->pool[d].s[i]);
    for (int i = 0; i < u->nws; i++)
        u->rt->cudaStreamSynchronize(u->ws[i].s);
    /* host functions ran with the streams' work: their transfers are on
     * the done stack; a transfer still missing had its host function
     * refused by a broken context, which runs nothing more */
    take_done(u);
    if (u->efd >= 0) {
        uint64_t v;
        if (read(u->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
            nxlt_log(u->ctx, NXL_LOG_WARN, "CUDA: reading the completion eventfd: %s",
                     strerror(errno));
    }
    cu_xop_t *x;
    while ((x = TAILQ_FIRST(&u->inflight))) {
        TAILQ_REMOVE(&u->inflight, x, link);
        if (x->ws)
            x->ws->users--;
        nxlt_op_done(x->op, NXL_ERR_CANCELED,
                     "CUDA: transport destroyed with the transfer in flight (agent teardown)");
        xop_free(x);
    }
    cu_map_t *m;
    LIST_FOREACH(m, &u->maps, link)
    map_close(u, m);
}

static void destroy(void *state)
{
    cu_t *u = state;
    quiesce(u);
    nxlt_log(u->ctx, NXL_LOG_INFO, "CUDA statistics: %llu transfers, %llu copies, %llu bytes, "
             "%llu event waits, %llu IPC handles opened, %llu KV re-layouts",
             (unsigned long long)u->n_xfers, (unsigned long long)u->n_copies,
             (unsigned long long)u->n_bytes, (unsigned long long)u->n_waits,
             (unsigned long long)u->n_ipc_open, (unsigned long long)u->n_relayouts);
    for (int d = 0; d < u->ndev; d++)
        for (unsigned i = 0; i < u->pool[d].n; i++)
            u->rt->cudaStreamDestroy(u->pool[d].s[i]);
    for (int i = 0; i < u->nws; i++)
        u->rt->cudaStreamDestroy(u->ws[i].s);
    for (int d = 0; d < u->ndev; d++)
        if (u->kmod[d] && u->rt->cuModuleUnload)
            u->rt->cuModuleUnload(u->kmod[d]);
    /* keys are unloaded before transports are destroyed: what is left has
     * no user */
    while (!LIST_EMPTY(&u->maps)) {
        cu_map_t *m = LIST_FIRST(&u->maps);
        LIST_REMOVE(m, link);
        free(m);
    }
    nxlt_io_free(u->ev);
    if (u->efd >= 0)
        close(u->efd);
    free(u);
}

static const char *describe(void *state)
{
    return ((cu_t *)state)->desc;
}

/* What create() takes: the engine refuses other keys, nxl_info -v lists it */
static const nxl_param_info_t cu_params[] = {
    {"streams", PSTR(CU_DEF_STREAMS), "copy streams per device (1 to " PSTR(CU_MAX_STREAMS) ")"},
};

NXLT_MODULE_EXPORT const nxlt_ops_t nxlt_cuda_ops = {
    NXLT_OPS_HEAD("CUDA", (1u << NXL_DRAM) | (1u << NXL_VRAM),
                  NXLT_CAP_LOCAL | NXLT_CAP_CANCEL_WAITS | NXLT_CAP_RELAYOUT, cu_params),
    .probe = probe,
    .create = create,
    .destroy = destroy,
    .reg = reg,
    .dereg = dereg,
    .pack_key = pack_key,
    .mem_alloc = mem_alloc,
    .mem_free = mem_free,
    .conn_info = conn_info,
    .load_conn = load_conn,
    .load_key = load_key,
    .unload_key = unload_key,
    .unload_conn = unload_conn,
    .post = post,
    .notif_send = notif_send,
    .describe = describe,
    .quiesce = quiesce,
    .wait_event = wait_event,
    .relayout_prep = relayout_prep,
    .relayout = relayout,
    .relayout_free = relayout_free,
};
