/* The CUDA runtime and driver, resolved at run time: see cudart.h. */
#include "config.h"
#include "cudart.h"

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
