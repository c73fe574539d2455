/* SPDX-License-Identifier: BSD-3-Clause */
/* cuda_memcpy_ref — plain cudaMemcpyAsync, the reference that
 * bench/compare-cuda puts next to nxlbench --backend CUDA (as CUDA's
 * bandwidthTest, on the same sizes and the same pattern of work).
 *
 * One iteration copies BATCH blocks of BLOCK bytes, spread round-robin over
 * STREAMS non-blocking streams (cudaMemcpyAsync, cudaMemcpyDefault), then
 * waits for them with cudaStreamSynchronize: what one nxlbench transfer
 * (--pipeline_depth 1) does, without nxl. Host memory is pinned
 * (cudaHostAlloc). Avg Lat. is one iteration: at 4 KiB and batch 1, the
 * cudaMemcpyAsync + cudaStreamSynchronize round that a 4 KiB HtoD
 * transfer's post-to-callback time is measured against.
 *
 * DtoD-IPC: the destination is another process's VRAM. The program forks
 * before touching CUDA; the child allocates the destination and passes
 * its cudaIpcGetMemHandle through a pipe, the parent opens it
 * (cudaIpcOpenMemHandle) and copies into it: what nxl's CUDA IPC WRITE to
 * a peer process does, without nxl.
 *
 *   cuda_memcpy_ref --kind HtoD|DtoH|DtoD|DtoD-IPC [--block_sizes 4K,1M,...]
 *                   [--batch N] [--streams N] [--num_iter N]
 *                   [--max_row_bytes N] [--device N]
 *
 * Output: the columns of nxlbench's table that apply. Linked against the
 * CUDA runtime (built only when configure finds libcudart). */
#include <cuda_runtime_api.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "cuda_memcpy_ref: %s: %s\n", #call, cudaGetErrorString(e_));           \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    if (*end == 'K' || *end == 'k')
        v *= 1024;
    else if (*end == 'M' || *end == 'm')
        v *= 1024 * 1024;
    else if (*end == 'G' || *end == 'g')
        v *= 1024.0 * 1024 * 1024;
    return (size_t)v;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* the IPC peer: allocates @p len bytes of VRAM, sends its handle, holds it
 * until the parent closes the pipe */
static int ipc_child(int dev, size_t len, int wfd, int rfd)
{
    void *p;
    cudaIpcMemHandle_t h;
    CK(cudaSetDevice(dev));
    CK(cudaMalloc(&p, len));
    CK(cudaIpcGetMemHandle(&h, p));
    if (write(wfd, &h, sizeof(h)) != (ssize_t)sizeof(h))
        return 1;
    char c;
    while (read(rfd, &c, 1) > 0) /* until the parent closes its end */
        ;
    cudaFree(p);
    return 0;
}

int main(int argc, char **argv)
{
    const char *kind = "HtoD";
    size_t sizes[64] = {4096, 65536, 1 << 20, 16 << 20, 64 << 20};
    int nsizes = 5, batch = 1, nstreams = 4, dev = 0;
    long num_iter = 1000;
    size_t row_bytes = (size_t)1 << 30;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--kind"))
            kind = v;
        else if (!strcmp(k, "--block_sizes")) {
            nsizes = 0;
            char *dup = strdup(v), *save = NULL;
            for (char *t = strtok_r(dup, ",", &save); t && nsizes < 64; t = strtok_r(NULL, ",", &save))
                sizes[nsizes++] = parse_size(t);
            free(dup);
        } else if (!strcmp(k, "--batch"))
            batch = atoi(v);
        else if (!strcmp(k, "--streams"))
            nstreams = atoi(v);
        else if (!strcmp(k, "--num_iter"))
            num_iter = atol(v);
        else if (!strcmp(k, "--max_row_bytes"))
            row_bytes = parse_size(v);
        else if (!strcmp(k, "--device"))
            dev = atoi(v);
        else {
            fprintf(stderr, "cuda_memcpy_ref: unknown option %s (see the comment at the top of "
                            "bench/cuda_memcpy_ref.c)\n", k);
            return 2;
        }
    }
    int h2d = !strcmp(kind, "HtoD"), d2h = !strcmp(kind, "DtoH"), d2d = !strcmp(kind, "DtoD"),
        ipc = !strcmp(kind, "DtoD-IPC");
    if (!(h2d || d2h || d2d || ipc) || batch < 1 || nstreams < 1 || nstreams > 32 ||
        num_iter < 1) {
        fprintf(stderr, "cuda_memcpy_ref: --kind HtoD|DtoH|DtoD|DtoD-IPC, --batch >= 1, "
                        "--streams 1..32\n");
        return 2;
    }
    size_t maxb = 0;
    for (int i = 0; i < nsizes; i++)
        if (sizes[i] > maxb)
            maxb = sizes[i];
    size_t len = maxb * (size_t)batch;
    void *src, *dst;
    pid_t child = 0;
    int hold = -1; /* closing it lets the child go */
    if (ipc) {
        int up[2], down[2];
        if (pipe(up) || pipe(down)) {
            perror("cuda_memcpy_ref: pipe");
            return 1;
        }
        child = fork();
        if (child < 0) {
            perror("cuda_memcpy_ref: fork");
            return 1;
        }
        if (child == 0) {
            close(up[0]);
            close(down[1]);
            _exit(ipc_child(dev, len, up[1], down[0]));
        }
        close(up[1]);
        close(down[0]);
        hold = down[1];
        cudaIpcMemHandle_t h;
        if (read(up[0], &h, sizeof(h)) != (ssize_t)sizeof(h)) {
            fprintf(stderr, "cuda_memcpy_ref: the IPC peer did not start\n");
            return 1;
        }
        close(up[0]);
        CK(cudaSetDevice(dev));
        CK(cudaMalloc(&src, len));
        CK(cudaIpcOpenMemHandle(&dst, h, cudaIpcMemLazyEnablePeerAccess));
        d2d = 1;
    }
    CK(cudaSetDevice(dev));
    if (h2d) {
        CK(cudaHostAlloc(&src, len, cudaHostAllocPortable));
        CK(cudaMalloc(&dst, len));
    } else if (d2h) {
        CK(cudaMalloc(&src, len));
        CK(cudaHostAlloc(&dst, len, cudaHostAllocPortable));
    } else if (!ipc) {
        CK(cudaMalloc(&src, len));
        CK(cudaMalloc(&dst, len));
    }
    CK(cudaMemset(h2d ? dst : src, 1, len));
    cudaStream_t s[32];
    for (int i = 0; i < nstreams; i++)
        CK(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking));
    printf("# cuda_memcpy_ref %s, device %d, %d stream(s), batch %d\n", kind, dev, nstreams, batch);
    printf("%-12s %-10s %-12s %-14s\n", "Block Size", "Batch Size", "B/W (GB/s)", "Avg Lat. (us)");
    for (int k = 0; k < nsizes; k++) {
        size_t bs = sizes[k], per = bs * (size_t)batch;
        long it = num_iter;
        if ((double)it * per > (double)row_bytes) {
            it = (long)(row_bytes / per);
            if (it < 8)
                it = 8;
        }
        long warm = it / 10 + 1;
        unsigned rr = 0;
        double t0 = 0;
        for (long j = 0; j < warm + it; j++) {
            if (j == warm)
                t0 = now_s();
            unsigned used = 0;
            for (int b = 0; b < batch; b++) {
                unsigned si = rr++ % (unsigned)nstreams;
                used |= 1u << si;
                CK(cudaMemcpyAsync((char *)dst + (size_t)b * bs, (char *)src + (size_t)b * bs, bs,
                                   cudaMemcpyDefault, s[si]));
            }
            for (int i = 0; i < nstreams; i++)
                if (used & (1u << i))
                    CK(cudaStreamSynchronize(s[i]));
        }
        double sec = now_s() - t0;
        printf("%-12zu %-10d %-12.4f %-14.3f\n", bs, batch, (double)it * per / sec / 1e9,
               sec * 1e6 / it);
        fflush(stdout);
    }
    for (int i = 0; i < nstreams; i++)
        cudaStreamDestroy(s[i]);
    if (h2d) {
        cudaFreeHost(src);
        cudaFree(dst);
    } else if (d2h) {
        cudaFree(src);
        cudaFreeHost(dst);
    } else if (ipc) {
        cudaIpcCloseMemHandle(dst);
        cudaFree(src);
        close(hold);
        waitpid(child, NULL, 0);
    } else {
        cudaFree(src);
        cudaFree(dst);
    }
    return 0;
}
