/* SPDX-License-Identifier: BSD-3-Clause */
/* The CUDA runtime and driver, resolved at run time: see cudart.h. */
#include "config.h"
#include "cudart.h"

#include <nxl.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;
static nxl_cuda_rt_t rt;
static int rt_kind = NXL_CUDA_NO_RUNTIME;
static char rt_why[160];

/* dlerror() text, shortened to what matters: "libcudart.so.13: cannot open
 * shared object file" (the ": No such file or directory" that follows adds
 * nothing) */
static void short_dlerror(char *buf, size_t cap)
{
    const char *e = dlerror();
    snprintf(buf, cap, "%s", e ? e : "unknown dlopen error");
    char *tail = strstr(buf, ": No such file or directory");
    if (tail)
        *tail = 0;
}

static void *open_runtime(char *why, size_t cap)
{
    const char *env = getenv("NXL_CUDA_RUNTIME");
    if (env && *env) {
        void *h = dlopen(env, RTLD_NOW | RTLD_LOCAL);
        if (h) {
            rt.lib = env;
            return h;
        }
        short_dlerror(why, cap);
        return NULL;
    }
    static const char *const names[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so"};
    char first[160] = "";
    for (size_t i = 0; i < sizeof(names) / sizeof(*names); i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (h) {
            rt.lib = names[i];
            return h;
        }
        if (!i)
            short_dlerror(first, sizeof(first));
        else
            dlerror();
    }
    snprintf(why, cap, "%s", first);
    return NULL;
}

static void load(void)
{
    char err[160];
    void *h = open_runtime(err, sizeof(err));
    if (!h) {
        snprintf(rt_why, sizeof(rt_why), "no CUDA runtime (%.140s)", err);
        return;
    }
#define NXL_CUDART_SYM_(f)                                                                         \
    if (!(*(void **)&rt.f = dlsym(h, #f))) {                                                       \
        snprintf(rt_why, sizeof(rt_why), "no CUDA runtime (%s lacks %s: CUDA 10 or later is "      \
                 "needed)", rt.lib, #f);                                                           \
        return;                                                                                    \
    }
    NXL_CUDART_FNS(NXL_CUDART_SYM_)
#undef NXL_CUDART_SYM_
    rt.cudaRuntimeGetVersion(&rt.runtime_version);
    int n = 0; /* cudaGetDeviceCount leaves it unwritten on failure */
    cudaError_t e = rt.cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        rt_kind = e == cudaErrorNoDevice ? NXL_CUDA_NO_DEVICE : NXL_CUDA_NO_DRIVER;
        snprintf(rt_why, sizeof(rt_why), "%s (cudaGetDeviceCount: %s)",
                 rt_kind == NXL_CUDA_NO_DEVICE ? "no device" : "no CUDA driver",
                 rt.cudaGetErrorString(e));
        return;
    }
    if (n <= 0) {
        rt_kind = NXL_CUDA_NO_DEVICE;
        snprintf(rt_why, sizeof(rt_why), "no device (the CUDA driver sees none; check "
                 "CUDA_VISIBLE_DEVICES)");
        return;
    }
    rt.ndev = n;
    rt.cudaDriverGetVersion(&rt.driver_version);
    /* the runtime has loaded the driver already: this finds it
     * ($NXL_CUDA_DRIVER: another library, for tests/mock_cudart.c) */
    const char *drv = getenv("NXL_CUDA_DRIVER");
    void *d = dlopen(drv && *drv ? drv : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (d) {
        *(void **)&rt.cuPointerGetAttribute = dlsym(d, "cuPointerGetAttribute");
        *(void **)&rt.cuDeviceGet = dlsym(d, "cuDeviceGet");
        *(void **)&rt.cuDeviceGetName = dlsym(d, "cuDeviceGetName");
        *(void **)&rt.cuDeviceTotalMem = dlsym(d, "cuDeviceTotalMem_v2");
        *(void **)&rt.cuDeviceGetUuid = dlsym(d, "cuDeviceGetUuid_v2");
        if (!rt.cuDeviceGetUuid)
            *(void **)&rt.cuDeviceGetUuid = dlsym(d, "cuDeviceGetUuid");
        *(void **)&rt.cuModuleLoadData = dlsym(d, "cuModuleLoadData");
        *(void **)&rt.cuModuleGetFunction = dlsym(d, "cuModuleGetFunction");
        *(void **)&rt.cuModuleUnload = dlsym(d, "cuModuleUnload");
        *(void **)&rt.cuLaunchKernel = dlsym(d, "cuLaunchKernel");
        *(void **)&rt.cuGetErrorName = dlsym(d, "cuGetErrorName");
    }
    if (!rt.cuPointerGetAttribute || !rt.cuDeviceGet || !rt.cuDeviceGetUuid) {
        rt_kind = NXL_CUDA_NO_DRIVER;
        snprintf(rt_why, sizeof(rt_why), "no CUDA driver (libcuda.so.1 %s)",
                 d ? "lacks cuPointerGetAttribute or cuDeviceGetUuid" : "cannot be opened");
        return;
    }
    rt_kind = NXL_CUDA_OK;
}

const nxl_cuda_rt_t *nxl_cuda_rt_get(int *kind, char *why, size_t cap)
{
    pthread_once(&once, load);
    if (kind)
        *kind = rt_kind;
    if (rt_kind != NXL_CUDA_OK) {
        if (why && cap)
            snprintf(why, cap, "%s", rt_why);
        return NULL;
    }
    return &rt;
}

const char *nxl_cuda_rt_errstr(const nxl_cuda_rt_t *r, cudaError_t e, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s: %s (%d)", r->cudaGetErrorName(e), r->cudaGetErrorString(e), (int)e);
    return buf;
}

const char *nxl_cuda_memtype_name(enum cudaMemoryType t)
{
    switch (t) {
    case cudaMemoryTypeUnregistered: return "ordinary host memory";
    case cudaMemoryTypeHost: return "pinned host memory";
    case cudaMemoryTypeDevice: return "device memory";
    case cudaMemoryTypeManaged: return "managed memory (cudaMallocManaged)";
    default: return "memory of an unknown kind";
    }
}

int nxl_cuda_vram_check(const nxl_cuda_rt_t *rt, const char *who, uintptr_t addr, size_t len,
                        uint64_t dev, uintptr_t *base_out, size_t *size_out, char *why, size_t cap)
{
    char b[160];
    if (dev >= (uint64_t)rt->ndev) {
        snprintf(why, cap, "%s: VRAM region 0x%lx+%zu names device %llu, but %d device%s "
                 "visible (desc.dev_id is the CUDA device ordinal)", who, (unsigned long)addr,
                 len, (unsigned long long)dev, rt->ndev, rt->ndev == 1 ? " is" : "s are");
        return NXL_ERR_INVALID_PARAM;
    }
    struct cudaPointerAttributes at;
    memset(&at, 0, sizeof(at));
    cudaError_t e = rt->cudaPointerGetAttributes(&at, (const void *)addr);
    if (e != cudaSuccess) {
        rt->cudaGetLastError(); /* clear a non-sticky error */
        snprintf(why, cap, "%s: cudaPointerGetAttributes of VRAM region 0x%lx+%zu failed: %s; "
                 "register memory from cudaMalloc or nxl_mem_alloc(NXL_VRAM)", who,
                 (unsigned long)addr, len, nxl_cuda_rt_errstr(rt, e, b, sizeof(b)));
        return NXL_ERR_INVALID_PARAM;
    }
    if (at.type != cudaMemoryTypeDevice) {
        snprintf(why, cap, "%s: VRAM region 0x%lx+%zu is %s, not device memory; register host "
                 "memory as DRAM, device memory (cudaMalloc) as VRAM", who, (unsigned long)addr,
                 len, nxl_cuda_memtype_name(at.type));
        return at.type == cudaMemoryTypeManaged ? NXL_ERR_NOT_SUPPORTED : NXL_ERR_INVALID_PARAM;
    }
    if ((uint64_t)at.device != dev) {
        snprintf(why, cap, "%s: VRAM region 0x%lx+%zu lies on device %d, not on device %llu "
                 "(desc.dev_id is the CUDA device ordinal)", who, (unsigned long)addr, len,
                 at.device, (unsigned long long)dev);
        return NXL_ERR_INVALID_PARAM;
    }
    CUdeviceptr base = 0;
    size_t size = 0;
    CUresult ce = rt->cuPointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                            (CUdeviceptr)addr);
    if (ce == CUDA_SUCCESS)
        ce = rt->cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, (CUdeviceptr)addr);
    if (ce != CUDA_SUCCESS) {
        snprintf(why, cap, "%s: cuPointerGetAttribute(RANGE) of VRAM region 0x%lx+%zu failed "
                 "(CUresult %d); register memory from cudaMalloc or nxl_mem_alloc(NXL_VRAM)",
                 who, (unsigned long)addr, len, (int)ce);
        return NXL_ERR_INVALID_PARAM;
    }
    if (addr < base || len > size || addr - base > size - len) {
        snprintf(why, cap, "%s: VRAM region 0x%lx+%zu runs past the end of its allocation "
                 "0x%llx+%zu on device %llu; register at most what one cudaMalloc returned",
                 who, (unsigned long)addr, len, (unsigned long long)base, size,
                 (unsigned long long)dev);
        return NXL_ERR_INVALID_PARAM;
    }
    if (base_out)
        *base_out = (uintptr_t)base;
    if (size_out)
        *size_out = size;
    return 0;
}
