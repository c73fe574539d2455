/* SPDX-License-Identifier: BSD-3-Clause */
/* A stand-in for NVIDIA's libcufile, beside tests/mock_cudart.c, for
 * machines without a GPU: tests/cuda_mock.sh points NXL_CUFILE_LIB at it,
 * so that the GDS transport's logic runs here (registration of buffers and
 * file handles, every byte, many descriptors, offsets, the errors).
 *
 * "Device memory" is the stand-in runtime's ($NXL_CUDA_RUNTIME, opened
 * again here: the copy the transport loaded answers): cuFileRead
 * and cuFileWrite check the buffer as cuFile does (device memory, inside
 * its allocation, inside its registration when the base was registered)
 * and move the bytes with pread and pwrite. It keeps the counts of what is
 * registered (mock_cufile_counts) so that a test can see every
 * registration undone.
 *
 * Knobs (read at each call): MOCK_CUFILE_DRIVER_FAIL=1 fails
 * cuFileDriverOpen; MOCK_CUFILE_BUFREG_FAIL=1 fails cuFileBufRegister
 * (pinning refused); MOCK_CUFILE_IO_FAIL_OFFSET=N fails a cuFileRead or
 * cuFileWrite at file offset N with CU_FILE_IO_NOT_SUPPORTED;
 * MOCK_CUFILE_MAX_IO=N moves at most N bytes a call (short reads and
 * writes). */
#define _GNU_SOURCE
#include "../lib/transports/gds/cufile_abi.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef struct mhandle {
    int fd;
    struct mhandle *next;
} mhandle_t;

typedef struct mbuf {
    const char *base;
    size_t len;
    struct mbuf *next;
} mbuf_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static mhandle_t *handles;
static mbuf_t *bufs;
static int driver_open, nhandles, nbufs;
static long io_calls;

static nxl_cufile_status_t st(int e)
{
    nxl_cufile_status_t s = {e, 0};
    return s;
}

static bool knob(const char *name)
{
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0");
}

/* the counts a test reads: drivers open, handles, buffers registered */
EXPORT void mock_cufile_counts(int *drv, int *nh, int *nb)
{
    pthread_mutex_lock(&mu);
    *drv = driver_open;
    *nh = nhandles;
    *nb = nbufs;
    pthread_mutex_unlock(&mu);
}

EXPORT nxl_cufile_status_t cuFileDriverOpen(void)
{
    if (knob("MOCK_CUFILE_DRIVER_FAIL"))
        return st(NXL_CUFILE_DRIVER_NOT_INITIALIZED);
    pthread_mutex_lock(&mu);
    driver_open++;
    pthread_mutex_unlock(&mu);
    return st(NXL_CUFILE_SUCCESS);
}

EXPORT nxl_cufile_status_t cuFileDriverClose_v2(void)
{
    pthread_mutex_lock(&mu);
    int was = driver_open;
    if (driver_open)
        driver_open--;
    pthread_mutex_unlock(&mu);
    return st(was ? NXL_CUFILE_SUCCESS : NXL_CUFILE_DRIVER_NOT_INITIALIZED);
}

EXPORT nxl_cufile_status_t cuFileGetVersion(int *v)
{
    *v = 1150; /* 1.15 */
    return st(NXL_CUFILE_SUCCESS);
}

EXPORT nxl_cufile_status_t cuFileHandleRegister(nxl_cufile_handle_t *fh, nxl_cufile_descr_t *d)
{
    if (!driver_open)
        return st(NXL_CUFILE_DRIVER_NOT_INITIALIZED);
    if (!d || d->type != NXL_CUFILE_HANDLE_TYPE_OPAQUE_FD)
        return st(NXL_CUFILE_INVALID_VALUE);
    struct stat sb;
    if (fstat(d->handle.fd, &sb) < 0)
        return st(NXL_CUFILE_INVALID_VALUE);
    if (!S_ISREG(sb.st_mode))
        return st(NXL_CUFILE_INVALID_FILE_TYPE);
    mhandle_t *h = calloc(1, sizeof(*h));
    h->fd = d->handle.fd;
    pthread_mutex_lock(&mu);
    for (mhandle_t *o = handles; o; o = o->next)
        if (o->fd == h->fd) {
            pthread_mutex_unlock(&mu);
            free(h);
            return st(NXL_CUFILE_HANDLE_ALREADY_REGISTERED);
        }
    h->next = handles;
    handles = h;
    nhandles++;
    pthread_mutex_unlock(&mu);
    *fh = h;
    return st(NXL_CUFILE_SUCCESS);
}

EXPORT void cuFileHandleDeregister(nxl_cufile_handle_t fh)
{
    pthread_mutex_lock(&mu);
    for (mhandle_t **p = &handles; *p; p = &(*p)->next)
        if (*p == fh) {
            *p = ((mhandle_t *)fh)->next;
            nhandles--;
            free(fh);
            break;
        }
    pthread_mutex_unlock(&mu);
}

static pthread_once_t rt_once = PTHREAD_ONCE_INIT;
static __typeof__(cudaPointerGetAttributes) *get_attrs;
static __typeof__(cuPointerGetAttribute) *get_attr;

static void rt_load(void)
{
    const char *lib = getenv("NXL_CUDA_RUNTIME");
    void *h = lib ? dlopen(lib, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (h) {
        *(void **)&get_attrs = dlsym(h, "cudaPointerGetAttributes");
        *(void **)&get_attr = dlsym(h, "cuPointerGetAttribute");
    }
}

/* device memory of the stand-in runtime, [p, p + len) inside one allocation */
static int check_dev(const void *p, size_t len)
{
    pthread_once(&rt_once, rt_load);
    if (!get_attrs || !get_attr)
        return NXL_CUFILE_CUDA_DRIVER_ERROR; /* no stand-in runtime named */
    struct cudaPointerAttributes at;
    if (get_attrs(&at, p) != cudaSuccess || at.type != cudaMemoryTypeDevice)
        return NXL_CUFILE_CUDA_MEMORY_TYPE_INVALID;
    CUdeviceptr base;
    size_t size;
    if (get_attr(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, (CUdeviceptr)p) ||
        get_attr(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, (CUdeviceptr)p))
        return NXL_CUFILE_CUDA_POINTER_INVALID;
    if ((uintptr_t)p - base > size || len > size - ((uintptr_t)p - base))
        return NXL_CUFILE_CUDA_POINTER_RANGE_ERROR;
    return 0;
}

EXPORT nxl_cufile_status_t cuFileBufRegister(const void *base, size_t len, int flags)
{
    if (!driver_open)
        return st(NXL_CUFILE_DRIVER_NOT_INITIALIZED);
    if (knob("MOCK_CUFILE_BUFREG_FAIL"))
        return st(NXL_CUFILE_GPU_MEMORY_PINNING_FAILED);
    int e = check_dev(base, len);
    if (e)
        return st(e);
    mbuf_t *b = calloc(1, sizeof(*b));
    b->base = base;
    b->len = len;
    pthread_mutex_lock(&mu);
    for (mbuf_t *o = bufs; o; o = o->next)
        if (o->base == base) {
            pthread_mutex_unlock(&mu);
            free(b);
            return st(NXL_CUFILE_MEMORY_ALREADY_REGISTERED);
        }
    b->next = bufs;
    bufs = b;
    nbufs++;
    pthread_mutex_unlock(&mu);
    return st(NXL_CUFILE_SUCCESS);
}

EXPORT nxl_cufile_status_t cuFileBufDeregister(const void *base)
{
    pthread_mutex_lock(&mu);
    for (mbuf_t **p = &bufs; *p; p = &(*p)->next)
        if ((*p)->base == base) {
            mbuf_t *b = *p;
            *p = b->next;
            nbufs--;
            pthread_mutex_unlock(&mu);
            free(b);
            return st(NXL_CUFILE_SUCCESS);
        }
    pthread_mutex_unlock(&mu);
    return st(NXL_CUFILE_MEMORY_NOT_REGISTERED);
}

/* the fd behind a handle, and the buffer checked: 0, or a cuFile status */
static int io_check(nxl_cufile_handle_t fh, const void *base, size_t size, off_t foff, off_t boff,
                    int *fd)
{
    if (!driver_open)
        return NXL_CUFILE_DRIVER_NOT_INITIALIZED;
    if (foff < 0 || boff < 0)
        return NXL_CUFILE_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    mhandle_t *h = handles;
    while (h && h != fh)
        h = h->next;
    mbuf_t *b = bufs;
    while (b && b->base != base)
        b = b->next;
    size_t blen = b ? b->len : 0;
    bool registered = b != NULL;
    if (h)
        *fd = h->fd;
    io_calls++;
    pthread_mutex_unlock(&mu);
    if (!h)
        return NXL_CUFILE_HANDLE_NOT_REGISTERED;
    const char *at = getenv("MOCK_CUFILE_IO_FAIL_OFFSET");
    if (at && *at && atoll(at) == (long long)foff)
        return NXL_CUFILE_IO_NOT_SUPPORTED;
    if (registered && ((size_t)boff > blen || size > blen - (size_t)boff))
        return NXL_CUFILE_INVALID_VALUE; /* past the end of the registered buffer */
    return check_dev((const char *)base + boff, size);
}

static size_t max_io(size_t size)
{
    const char *m = getenv("MOCK_CUFILE_MAX_IO");
    size_t n = m ? strtoul(m, NULL, 0) : 0;
    return n && n < size ? n : size;
}

EXPORT ssize_t cuFileRead(nxl_cufile_handle_t fh, void *base, size_t size, off_t foff, off_t boff)
{
    int fd = -1, e = io_check(fh, base, size, foff, boff, &fd);
    if (e)
        return -e;
    ssize_t r = pread(fd, (char *)base + boff, max_io(size), foff);
    return r < 0 ? -1 : r; /* errno as pread left it */
}

EXPORT ssize_t cuFileWrite(nxl_cufile_handle_t fh, const void *base, size_t size, off_t foff,
                           off_t boff)
{
    int fd = -1, e = io_check(fh, base, size, foff, boff, &fd);
    if (e)
        return -e;
    ssize_t r = pwrite(fd, (const char *)base + boff, max_io(size), foff);
    return r < 0 ? -1 : r;
}
