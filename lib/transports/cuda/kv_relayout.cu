/* SPDX-License-Identifier: BSD-3-Clause */
/* The KV re-layout on the GPU: the kernel that does for VRAM what
 * nxl_kv_copy() does on the CPU (<nxl/kv.h>): every piece's len bytes
 * from src to dst, device addresses, pieces not overlapping.
 *
 * Built by nvcc when configure finds it (NVCC, --with-cuda); no GPU is
 * needed to build it. Status: it has been compiled here and checked on
 * no GPU (the build machine has none); tests/device/kv-relayout-gpu.cu
 * is the check a GPU machine runs (tests/device/run-gpu-checks), its bytes
 * against nxl_kv_plan() and nxl_kv_copy() on the host. The CUDA transport
 * carries it (kv_relayout_fatbin.c) and launches it for staged KV
 * transfers into VRAM (cuda.c, relayout()); that launch has run only
 * against tests/mock_cudart.c, whose host routine stands in for this
 * kernel (nxl-cuda(7), LIMITATIONS). The transport passes (pieces, n)
 * and launches blockDim 128: keep the signature and its name
 * (nxl_kv_relayout, extern "C") in step with cuda.c.
 *
 * One block per piece at a time (grid-stride over the pieces): the
 * planner makes pieces of a few hundred bytes to a few KiB (rows of one
 * head), so a block's threads copy one piece in 16-byte words when its
 * addresses and length allow, else in bytes. Launch: any grid, blockDim
 * a multiple of 32 (128 is the usual choice), no shared memory. */
#include <stdint.h>

/* nxl_kv_piece_t's layout (nxl/kv.h): three uint64_t */
struct nxl_kv_relayout_piece {
    uint64_t src, dst, len;
};

extern "C" __global__ void nxl_kv_relayout(const struct nxl_kv_relayout_piece *pieces,
                                           uint64_t n)
{
    for (uint64_t i = blockIdx.x; i < n; i += gridDim.x) {
        const uint64_t src = pieces[i].src, dst = pieces[i].dst, len = pieces[i].len;
        if (((src | dst | len) & 15) == 0) {
            const uint4 *s = (const uint4 *)src;
            uint4 *d = (uint4 *)dst;
            for (uint64_t k = threadIdx.x; k < len / 16; k += blockDim.x)
                d[k] = s[k];
        } else {
            const unsigned char *s = (const unsigned char *)src;
            unsigned char *d = (unsigned char *)dst;
            for (uint64_t k = threadIdx.x; k < len; k += blockDim.x)
                d[k] = s[k];
        }
    }
}
