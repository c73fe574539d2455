/* SPDX-License-Identifier: BSD-3-Clause */
/* kv_relayout_gpu: the KV re-layout kernel (lib/transports/cuda/kv_relayout.cu)
 * on a real GPU, its bytes against the host's.
 *
 * For decode and prefill layouts of other tensor parallelism, block size
 * and order: nxl_kv_plan() gives the pieces, nxl_kv_copy() on the host
 * makes the decode region expected; the same pieces, moved to device
 * addresses, go to the kernel on one stream after the copy of the prefill
 * region to the device on that stream; the decode region comes back and
 * every byte is compared (the bytes the plan does not touch too: they must
 * keep their fill). Then the kernel's rate on the largest case against
 * cudaMemcpyAsync of the same bytes, device to device.
 *
 * Built by tests/device/pack with nvcc (links libnxl and CUDA's static
 * runtime); run by tests/device/run-gpu-checks. Exit 0 when every case is
 * right; 2 when no GPU answers. It has not run on a GPU yet. */
#include "../../lib/transports/cuda/kv_relayout.cu"

#include <nxl/kv.h>

#include "../kv_fixture.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(x)                                                                                   \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) {                                                                \
            fprintf(stderr, "kv_relayout_gpu: %s: %s\n", #x, cudaGetErrorString(e_));          \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)

/* one case: 0 when every byte is right; the kernel's and the copy's times in t */
static int run_case(uint32_t tpd, uint32_t tpp, uint32_t rd, uint32_t rp, uint32_t btd,
                    uint32_t btp, nxl_kv_order_t od, nxl_kv_order_t op, uint32_t layers,
                    size_t tokens, double *tk, double *tm, size_t *bytes_out)
{
    uint32_t nd = (uint32_t)((tokens + btd - 1) / btd), np = (uint32_t)((tokens + btp - 1) / btp);
    nxl_kv_layout_t d = mk(layers, nd + 1, btd, 8, 128, 2, tpd, rd, od, 0);
    nxl_kv_layout_t p = mk(layers, np + 2, btp, 8, 128, 2, tpp, rp, op, 0);
    uint32_t *di = (uint32_t *)malloc(nd * sizeof(uint32_t));
    uint32_t *pi = (uint32_t *)malloc(np * sizeof(uint32_t));
    for (uint32_t i = 0; i < nd; i++)
        di[i] = (i * 7 + 1) % (nd + 1);
    for (uint32_t i = 0; i < np; i++)
        pi[i] = np + 1 - i;
    unsigned char *hp = (unsigned char *)malloc(p.len), *hd = (unsigned char *)malloc(d.len);
    unsigned char *got = (unsigned char *)malloc(d.len);
    for (size_t i = 0; i < p.len; i++)
        hp[i] = (unsigned char)(i * 131 + (i >> 9) * 7 + 1);
    memset(hd, 0xEE, d.len);
    d.base = (uintptr_t)hd;
    p.base = (uintptr_t)hp;
    nxl_kv_seq_t s = {di, nd, pi, np, tokens};
    nxl_kv_piece_t *pc = NULL;
    size_t n = 0;
    char why[256];
    if (nxl_kv_plan(&d, &p, &s, &pc, &n, why, sizeof(why)) != NXL_SUCCESS) {
        fprintf(stderr, "kv_relayout_gpu: plan: %s\n", why);
        return 1;
    }
    nxl_kv_copy(pc, n); /* the host's result */
    unsigned char *dp, *dd;
    nxl_kv_piece_t *dpc;
    CK(cudaMalloc((void **)&dp, p.len));
    CK(cudaMalloc((void **)&dd, d.len));
    CK(cudaMalloc((void **)&dpc, (n ? n : 1) * sizeof(*dpc)));
    size_t bytes = 0;
    for (size_t i = 0; i < n; i++) {
        bytes += pc[i].len;
        pc[i].src = pc[i].src - (uintptr_t)hp + (uintptr_t)dp;
        pc[i].dst = pc[i].dst - (uintptr_t)hd + (uintptr_t)dd;
    }
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    CK(cudaMemsetAsync(dd, 0xEE, d.len, st));
    /* the staging READ's stand-in: the prefill bytes copied on the stream,
     * the kernel after it on the same stream */
    CK(cudaMemcpyAsync(dp, hp, p.len, cudaMemcpyHostToDevice, st));
    CK(cudaMemcpyAsync(dpc, pc, n * sizeof(*pc), cudaMemcpyHostToDevice, st));
    unsigned grid = n < 65535 ? (unsigned)(n ? n : 1) : 65535;
    nxl_kv_relayout<<<grid, 128, 0, st>>>((const struct nxl_kv_relayout_piece *)dpc, n);
    CK(cudaGetLastError());
    CK(cudaMemcpyAsync(got, dd, d.len, cudaMemcpyDeviceToHost, st));
    CK(cudaStreamSynchronize(st));
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < d.len; i++)
        if (got[i] != hd[i] && !bad++)
            first = i;
    printf("kv_relayout_gpu: decode TP %u rank %u (%u-token blocks, %s) <- prefill TP %u rank %u "
           "(%u-token blocks, %s): %zu pieces, %zu bytes: %s", tpd, rd, btd,
           od == NXL_KV_HEADS_OUTER ? "HO" : "TO", tpp, rp, btp,
           op == NXL_KV_HEADS_OUTER ? "HO" : "TO", n, bytes, bad ? "WRONG" : "right");
    if (bad)
        printf(" (%zu bytes differ, the first at %zu)", bad, first);
    printf("\n");
    if (tk && !bad) { /* the rate: the kernel and a device copy of the same bytes, best of 5 */
        cudaEvent_t a, b;
        CK(cudaEventCreate(&a));
        CK(cudaEventCreate(&b));
        *tk = *tm = 1e9;
        for (int r = 0; r < 5; r++) {
            float ms;
            CK(cudaEventRecord(a, st));
            nxl_kv_relayout<<<grid, 128, 0, st>>>((const struct nxl_kv_relayout_piece *)dpc, n);
            CK(cudaEventRecord(b, st));
            CK(cudaEventSynchronize(b));
            CK(cudaEventElapsedTime(&ms, a, b));
            if (ms / 1e3 < *tk)
                *tk = ms / 1e3;
            CK(cudaEventRecord(a, st));
            CK(cudaMemcpyAsync(dd, dp, bytes, cudaMemcpyDeviceToDevice, st));
            CK(cudaEventRecord(b, st));
            CK(cudaEventSynchronize(b));
            CK(cudaEventElapsedTime(&ms, a, b));
            if (ms / 1e3 < *tm)
                *tm = ms / 1e3;
        }
        *bytes_out = bytes;
    }
    CK(cudaStreamDestroy(st));
    cudaFree(dp);
    cudaFree(dd);
    cudaFree(dpc);
    nxl_free(pc);
    free(hp);
    free(hd);
    free(got);
    free(di);
    free(pi);
    return bad ? 1 : 0;
}

int main(void)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        fprintf(stderr, "kv_relayout_gpu: no GPU answers\n");
        return 2;
    }
    int bad = 0;
    const nxl_kv_order_t HO = NXL_KV_HEADS_OUTER, TO = NXL_KV_TOKENS_OUTER;
    for (int o = 0; o < 4; o++) {
        nxl_kv_order_t od = o & 1 ? TO : HO, op = o & 2 ? TO : HO;
        bad += run_case(2, 4, 0, 1, 32, 16, od, op, 4, 100, NULL, NULL, NULL);
        bad += run_case(4, 2, 3, 1, 16, 32, od, op, 4, 100, NULL, NULL, NULL);
        bad += run_case(1, 8, 0, 5, 16, 16, od, op, 2, 37, NULL, NULL, NULL);
        bad += run_case(8, 1, 6, 0, 32, 16, od, op, 2, 77, NULL, NULL, NULL);
    }
    /* the rate: decode TP 1 tokens outer from prefill TP 2 heads outer,
     * 16 planes x 4096 tokens (rows of 256 B; 64 MiB from this rank) */
    double tk = 0, tm = 0;
    size_t b = 0;
    bad += run_case(1, 2, 0, 0, 32, 16, TO, HO, 16, 4096, &tk, &tm, &b);
    if (b)
        printf("kv_relayout_gpu: rate: the kernel %.1f GB/s, cudaMemcpyAsync DtoD of the same "
               "bytes %.1f GB/s, ratio %.2f\n", b / tk / 1e9, b / tm / 1e9, tm / tk);
    printf("kv_relayout_gpu: %s\n", bad ? "FAILED" : "every case right");
    return bad ? 1 : 0;
}
