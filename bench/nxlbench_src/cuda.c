/* nxlbench --backend CUDA: DRAM and VRAM, one process
 *
 * One agent with the CUDA transport, its own peer: the initiator's and the
 * target's buffers (DRAM, pinned by the transport, or VRAM) are regions of
 * the same agent. The transport's remote side is always VRAM, so a VRAM
 * initiator writing to a DRAM target runs as a READ into the DRAM from the
 * VRAM (the same copy, DtoH). Each slot's transfer is made once per row and
 * posted again; Avg Tx is the post-to-callback time. */

#include "nxlbench.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef NXLBENCH_CUDA
#include "transports/cuda/cudart.h"
#endif

static struct {
    nxl_agent_t *a;
    void *ibuf, *tbuf;
    bool ivram, tvram;
    size_t len;
} C;

#ifdef NXLBENCH_CUDA
static const nxl_cuda_rt_t *crt;

/* a pattern into a buffer of either kind (through a host copy for VRAM) */
static void c_fill(void *p, bool vram, size_t len, uint64_t seed)
{
    if (!vram) {
        pat_fill(p, 0, len, seed);
        return;
    }
    unsigned char *h = malloc(len);
    if (!h)
        die("out of memory");
    pat_fill(h, 0, len, seed);
    if (crt->cudaMemcpy(p, h, len, cudaMemcpyHostToDevice) != cudaSuccess)
        die("consistency: cudaMemcpy to VRAM failed");
    free(h);
}

static long long c_check(void *p, bool vram, size_t len, uint64_t seed)
{
    if (!vram)
        return pat_check(p, 0, len, seed);
    unsigned char *h = malloc(len);
    if (!h)
        die("out of memory");
    if (crt->cudaMemcpy(h, p, len, cudaMemcpyDeviceToHost) != cudaSuccess)
        die("consistency: cudaMemcpy from VRAM failed");
    long long bad = pat_check(h, 0, len, seed);
    free(h);
    return bad;
}
#endif

static void c_row(size_t bs, size_t n)
{
    long Pd = O.depth, warm;
    size_t span = (size_t)Pd * n * bs;
    long timed = row_iters(n * bs, &warm);
    pipe_t p;
    pipe_init(&p, Pd, timed, warm);
    nxl_desc_t *ld = calloc(n, sizeof(*ld)), *rd = calloc(n, sizeof(*rd));
    /* the transport's remote side is VRAM: a DRAM target is its local side */
    bool swap = !C.tvram;
    nxl_op_t op = swap ? (O.op == NXL_WRITE ? NXL_READ : NXL_WRITE) : (nxl_op_t)O.op;
    unsigned char *lbase = swap ? C.tbuf : C.ibuf, *rbase = swap ? C.ibuf : C.tbuf;
    nxl_mem_t lt = (swap ? C.tvram : C.ivram) ? NXL_VRAM : NXL_DRAM;
    uint64_t dev = (uint64_t)O.cuda_dev;
#ifdef NXLBENCH_CUDA
    uint64_t seed = 0;
    if (O.check) {
        seed = next_seed();
        bool iw = O.op == NXL_WRITE; /* the initiator's buffer is the source */
        c_fill(iw ? C.ibuf : C.tbuf, iw ? C.ivram : C.tvram, span, seed);
        c_fill(iw ? C.tbuf : C.ibuf, iw ? C.tvram : C.ivram, span, seed ^ 0x5a5a5a5a);
    }
#else
    (void)span;
#endif
    for (long s = 0; s < Pd && !RUN.failed; s++) {
        for (size_t i = 0; i < n; i++) {
            size_t off = ((size_t)s * n + i) * bs;
            ld[i] = (nxl_desc_t){.addr = (uintptr_t)lbase + off, .len = bs,
                                 .dev_id = lt == NXL_VRAM ? dev : 0};
            rd[i] = (nxl_desc_t){.addr = (uintptr_t)rbase + off, .len = bs, .dev_id = dev};
        }
        uint64_t t0 = now_ns();
        nxl_prepped_t *lp = NULL, *rp = NULL;
        nxl_status_t st = nxl_prep(C.a, NULL, lt, ld, n, &lp);
        if (st == NXL_SUCCESS)
            st = nxl_prep(C.a, nxl_agent_name(C.a), NXL_VRAM, rd, n, &rp);
        if (st == NXL_SUCCESS)
            st = nxl_xfer_make(C.a, op, lp, NULL, rp, NULL, n, NULL, &p.slots[s].x);
        nxl_prepped_release(lp);
        nxl_prepped_release(rp);
        if (st != NXL_SUCCESS)
            die("making the transfer: %s", nxl_agent_last_error(C.a));
        pipe_made(&p, t0, now_ns());
    }
    pipe_pass(&p, warm);
    uint64_t t0 = now_ns();
    pipe_pass(&p, timed);
    uint64_t t1 = now_ns();
    if (RUN.failed)
        die("block %zu batch %zu: %s", bs, n, RUN.err);
#ifdef NXLBENCH_CUDA
    if (O.check) {
        bool iw = O.op == NXL_WRITE;
        long long bad = c_check(iw ? C.tbuf : C.ibuf, iw ? C.tvram : C.ivram, span, seed);
        if (bad >= 0)
            die("consistency: %s byte %lld of [0, %zu) differs from its source", iw ? "target"
                : "initiator", bad, span);
    }
#endif
    report_bw_row(bs, n, timed, (t1 - t0) / 1e9, p.prep, p.nprep, p.post, timed, p.tx, timed);
    pipe_free(&p);
    free(ld);
    free(rd);
}

static void *c_alloc(bool vram, size_t len)
{
    void *p = NULL;
    if (vram || O.mem_nxl) {
        if (nxl_mem_alloc(C.a, vram ? NXL_VRAM : NXL_DRAM, len, (uint64_t)O.cuda_dev, &p) !=
            NXL_SUCCESS)
            die("%zu bytes of %s: %s", len, vram ? "VRAM" : "DRAM", nxl_agent_last_error(C.a));
        return p;
    }
    if (posix_memalign(&p, 2 * MiB, len))
        die("out of memory for %zu bytes", len);
    memset(p, 0, len);
    nxl_desc_t d = {.addr = (uintptr_t)p, .len = len};
    if (nxl_mem_register(C.a, NXL_DRAM, &d, 1, NULL) != NXL_SUCCESS)
        die("registering %zu bytes of DRAM: %s", len, nxl_agent_last_error(C.a));
    return p;
}

int cuda_main(void)
{
    RUN.t_start = now_ns();
#ifdef NXLBENCH_CUDA
    char why[160];
    if (O.check && !(crt = nxl_cuda_rt_get(NULL, why, sizeof(why))))
        die("--check_consistency: %s", why);
#else
    if (O.check)
        die("--check_consistency with --backend CUDA: nxlbench was built without CUDA");
#endif
    size_t need = need_bytes();
    if (need > O.total_buf)
        die("the buffers need %zu bytes each (largest block x batch x pipeline depth) but "
            "--total_buffer_size is %zu", need, O.total_buf);
    C.a = make_local_agent("nxlb-cuda", log_cb, "cuda");
    RUN.a = C.a;
    if (nxl_backend_create(C.a, "CUDA", NULL, 0, NULL) != NXL_SUCCESS)
        die("nxl_backend_create(CUDA): %s", nxl_agent_last_error(C.a));
    C.ivram = !strcmp(O.iseg, "VRAM");
    C.tvram = !strcmp(O.tseg, "VRAM");
    C.len = need;
    C.ibuf = c_alloc(C.ivram, need);
    C.tbuf = c_alloc(C.tvram, need);
    run_rows(c_row);
    report("# nxlbench bandwidth, CUDA, %s, initiator %s, target %s (device %d), "
           "pipeline_depth %ld; %s\n", O.op == NXL_READ ? "READ" : "WRITE", O.iseg, O.tseg,
           O.cuda_dev, O.depth, transports_desc);
    nxl_agent_destroy(C.a); /* frees what nxl_mem_alloc gave */
    if (!C.ivram && !O.mem_nxl)
        free(C.ibuf);
    if (!C.tvram && !O.mem_nxl)
        free(C.tbuf);
    return 0;
}
