/* SPDX-License-Identifier: BSD-3-Clause */
/* The CUDA runtime and driver, resolved at run time.
 *
 * libnxl links neither libcudart nor libcuda: a distribution ships one
 * libnxl to machines with and without GPUs. The CUDA transport loads the
 * runtime with dlopen (libcudart.so.13, then .12, then libcudart.so; or
 * what $NXL_CUDA_RUNTIME names) and the driver (libcuda.so.1) the first time
 * it is probed or created, and calls the few functions it uses through the
 * table below. The headers are only needed for types and constants.
 *
 * $NXL_CUDA_DRIVER names another driver library than libcuda.so.1 (the
 * tests point both at tests/mock_cudart.c, a stand-in without a GPU).
 *
 * The table is loaded once per process and never unloaded. The test suite
 * compiles this file into itself to drive the GPU through the same table,
 * so that it too starts on machines without CUDA. */
#ifndef NXL_CUDART_H
#define NXL_CUDART_H

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

/* runtime functions: the transport's, then the ones only tests and tools use */
#define NXL_CUDART_FNS(X)                                                                          \
    X(cudaGetErrorString)                                                                          \
    X(cudaGetErrorName)                                                                            \
    X(cudaGetLastError)                                                                            \
    X(cudaGetDeviceCount)                                                                          \
    X(cudaGetDevice)                                                                               \
    X(cudaSetDevice)                                                                               \
    X(cudaRuntimeGetVersion)                                                                       \
    X(cudaDriverGetVersion)                                                                        \
    X(cudaMalloc)                                                                                  \
    X(cudaFree)                                                                                    \
    X(cudaHostAlloc)                                                                               \
    X(cudaFreeHost)                                                                                \
    X(cudaHostRegister)                                                                            \
    X(cudaHostUnregister)                                                                          \
    X(cudaPointerGetAttributes)                                                                    \
    X(cudaStreamCreateWithFlags)                                                                   \
    X(cudaStreamDestroy)                                                                           \
    X(cudaStreamSynchronize)                                                                       \
    X(cudaStreamWaitEvent)                                                                         \
    X(cudaMemcpyAsync)                                                                             \
    X(cudaLaunchHostFunc)                                                                          \
    X(cudaIpcGetMemHandle)                                                                         \
    X(cudaIpcOpenMemHandle)                                                                        \
    X(cudaIpcCloseMemHandle)                                                                       \
    X(cudaMemcpy)                                                                                  \
    X(cudaMemset)                                                                                  \
    X(cudaMemsetAsync)                                                                             \
    X(cudaDeviceSynchronize)                                                                       \
    X(cudaStreamQuery)                                                                             \
    X(cudaEventCreateWithFlags)                                                                    \
    X(cudaEventRecord)                                                                             \
    X(cudaEventSynchronize)                                                                        \
    X(cudaEventElapsedTime)                                                                        \
    X(cudaEventQuery)                                                                              \
    X(cudaEventDestroy)                                                                            \
    X(cudaMallocManaged)

typedef struct nxl_cuda_rt {
#define NXL_CUDART_MEMBER_(f) __typeof__(f) *f;
    NXL_CUDART_FNS(NXL_CUDART_MEMBER_)
#undef NXL_CUDART_MEMBER_
    /* driver (libcuda.so.1): NULL when it could not be resolved */
    CUresult (*cuPointerGetAttribute)(void *data, CUpointer_attribute attr, CUdeviceptr ptr);
    CUresult (*cuDeviceGet)(CUdevice *dev, int ordinal);
    CUresult (*cuDeviceGetUuid)(CUuuid *uuid, CUdevice dev);
    CUresult (*cuDeviceGetName)(char *name, int len, CUdevice dev);
    CUresult (*cuDeviceTotalMem)(size_t *bytes, CUdevice dev);
    /* the driver's module API, for the KV re-layout kernel: NULL each when
     * the driver lacks it (the transport then says so) */
    CUresult (*cuModuleLoadData)(CUmodule *mod, const void *image);
    CUresult (*cuModuleGetFunction)(CUfunction *fn, CUmodule mod, const char *name);
    CUresult (*cuModuleUnload)(CUmodule mod);
    CUresult (*cuLaunchKernel)(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                               unsigned by, unsigned bz, unsigned shared, CUstream s,
                               void **params, void **extra);
    CUresult (*cuGetErrorName)(CUresult r, const char **name);
    const char *lib;          /* the runtime library loaded */
    int runtime_version;      /* 13000 for 13.0 */
    int driver_version;
    int ndev;                 /* devices visible */
} nxl_cuda_rt_t;

/* What stopped the runtime from loading (nxl_cuda_rt_get's *kind). */
enum {
    NXL_CUDA_OK = 0,
    NXL_CUDA_NO_RUNTIME, /* no libcudart, or one without the functions needed */
    NXL_CUDA_NO_DRIVER,  /* the runtime loads, the driver does not answer */
    NXL_CUDA_NO_DEVICE   /* the driver answers: no device visible */
};

/**
 * Loads the runtime and the driver once per process (thread-safe) and
 * counts the devices.
 * @param [out] kind  NXL_CUDA_OK or what is missing (may be NULL)
 * @param [out] why   on failure, "no CUDA runtime (...)", "no CUDA driver
 *                    (cudaGetDeviceCount: ...)" or "no device (...)"
 * @return the table, or NULL when CUDA cannot be used here.
 */
const nxl_cuda_rt_t *nxl_cuda_rt_get(int *kind, char *why, size_t cap);

/* "cudaErrorInvalidValue: invalid argument (1)" for error @p e. */
const char *nxl_cuda_rt_errstr(const nxl_cuda_rt_t *rt, cudaError_t e, char *buf, size_t cap);

/* "device memory", "managed memory (cudaMallocManaged)", ... */
const char *nxl_cuda_memtype_name(enum cudaMemoryType t);

/**
 * Whether [addr, addr + len) may be registered as VRAM of device @p dev
 * (of rt->ndev): device memory of that device, inside one allocation.
 * @param [out] base, size  the allocation (may be NULL)
 * @param [out] why         on failure, a sentence beginning with @p who
 * @return 0, or the status to refuse with (nxl_status_t)
 */
int nxl_cuda_vram_check(const nxl_cuda_rt_t *rt, const char *who, uintptr_t addr, size_t len,
                        uint64_t dev, uintptr_t *base, size_t *size, char *why, size_t cap);

#endif
