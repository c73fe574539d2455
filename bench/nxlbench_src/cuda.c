/* SPDX-License-Identifier: BSD-3-Clause */
/* nxlbench --backend CUDA: DRAM and VRAM, one process
 *
 * One agent with the CUDA transport, its own peer: the initiator's and the
 * target's buffers (DRAM, pinned by the transport, or VRAM) are regions of
 * the same agent. The transport's remote side is always VRAM, so a VRAM
 * initiator writing to a DRAM target runs as a READ into the DRAM from the
 * VRAM (the same copy, DtoH). Each slot's transfer is made once per row and
 * posted again; Avg Tx is the post-to-callback time.
 *
 * --cuda_peer: the target's VRAM is another process's (CUDA IPC). nxlbench
 * forks a peer before anything touches CUDA; the peer (UCX and CUDA,
 * listening on 127.0.0.1) allocates the target buffer with nxl_mem_alloc
 * and tells its port and address through a pipe; the initiator (UCX and
 * CUDA) exchanges metadata with it and its transfers go through the
 * peer's IPC handle. With --check_consistency the target's bytes are
 * checked through nxl too: read back after WRITE rows, written first
 * before READ rows. */

#include "nxlbench.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define PEER_NAME "nxlb-cuda-peer"

#ifdef NXLBENCH_CUDA
#include "transports/common/cudart.h"
#endif

static struct {
    nxl_agent_t *a;
    void *ibuf, *tbuf;
    bool ivram, tvram;
    size_t len;
    const char *remote;  /* the agent the target buffer is in */
    pid_t peer;          /* --cuda_peer: its process */
    void *shadow;        /* --cuda_peer --check_consistency: a local VRAM copy of the target */
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

/* one transfer of [0, len) between local VRAM @p local and the peer's
 * target buffer, waited for (outside the timed passes) */
__attribute__((unused)) static void peer_copy(nxl_op_t op, void *local, size_t len)
{
    nxl_desc_t ld = {.addr = (uintptr_t)local, .len = len, .dev_id = (uint64_t)O.cuda_dev};
    nxl_desc_t rd = {.addr = (uintptr_t)C.tbuf, .len = len, .dev_id = (uint64_t)O.cuda_dev};
    nxl_prepped_t *lp = NULL, *rp = NULL;
    nxl_xfer_t *x = NULL;
    nxl_future_t *f = NULL;
    nxl_status_t st = nxl_prep(C.a, NULL, NXL_VRAM, &ld, 1, &lp);
    if (st == NXL_SUCCESS)
        st = nxl_prep(C.a, C.remote, NXL_VRAM, &rd, 1, &rp);
    if (st == NXL_SUCCESS)
        st = nxl_xfer_make(C.a, op, lp, NULL, rp, NULL, 1, NULL, &x);
    if (st == NXL_SUCCESS)
        st = nxl_xfer_post(x, NULL, NULL, &f);
    if (st != NXL_SUCCESS)
        die("consistency: %s of the peer's VRAM: %s", op == NXL_WRITE ? "WRITE" : "READ",
            nxl_agent_last_error(C.a));
    st = nxl_future_wait(f, 60000);
    if (st != NXL_SUCCESS)
        die("consistency: %s of the peer's VRAM: %s", op == NXL_WRITE ? "WRITE" : "READ",
            nxl_future_error(f));
    nxl_future_release(f);
    nxl_xfer_release(x);
    nxl_prepped_release(lp);
    nxl_prepped_release(rp);
}

static volatile int peer_quit;

static void peer_notif(nxl_agent_t *a, const char *from, const void *msg, size_t len, void *arg)
{
    if (len == 4 && !memcmp(msg, "quit", 4))
        peer_quit = 1;
}

/* the peer process: the target buffer, in VRAM, until "quit" or the
 * initiator's exit */
static int peer_main(int wfd, size_t len)
{
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    nxl_agent_config_t c;
    nxl_agent_config_init(&c);
    c.name = PEER_NAME;
    c.listen_addr = "127.0.0.1";
    c.log_level = NXL_LOG_INFO;
    c.log_cb = log_cb;
    c.log_arg = (void *)"peer";
    nxl_agent_t *a;
    loop_config(&c);
    if (nxl_agent_create(&c, &a) != NXL_SUCCESS)
        die("peer: nxl_agent_create: %s", nxl_agent_last_error(NULL));
    loop_attach(a);
    void *v = NULL;
    if (nxl_backend_create(a, "UCX", NULL, 0, NULL) != NXL_SUCCESS ||
        nxl_backend_create(a, "CUDA", NULL, 0, NULL) != NXL_SUCCESS ||
        nxl_mem_alloc(a, NXL_VRAM, len, (uint64_t)O.cuda_dev, &v) != NXL_SUCCESS)
        die("peer: %s", nxl_agent_last_error(a));
    nxl_agent_on_notif(a, peer_notif, NULL);
    unsigned long long msg[2] = {nxl_agent_listen_port(a), (unsigned long long)(uintptr_t)v};
    if (write(wfd, msg, sizeof(msg)) != (ssize_t)sizeof(msg))
        die("peer: cannot tell the initiator its address");
    close(wfd);
    while (!peer_quit && getppid() != 1)
        loop_turn(a, 200);
    loop_detach(a);
    nxl_agent_destroy(a);
    return 0;
}

static unsigned long long peer_msg[2]; /* its port and its buffer's address */

/* forks the peer, before this process touches CUDA (a child cannot use
 * CUDA its parent initialised), and learns its port and address */
static void peer_fork(size_t len)
{
    int p[2];
    pid_t pid = fork_piped(p);
    if (pid == 0)
        _exit(peer_main(p[1], len));
    unsigned long long *msg = peer_msg;
    if (read(p[0], msg, sizeof(peer_msg)) != (ssize_t)sizeof(peer_msg))
        die("--cuda_peer: the peer process did not start (see its message above)");
    close(p[0]);
    C.peer = pid;
    C.tbuf = (void *)(uintptr_t)msg[1];
}

/* exchanges metadata with the peer (UCX) */
static void peer_connect(void)
{
    unsigned long long *msg = peer_msg;
    nxl_future_t *f;
    nxl_status_t st = nxl_md_fetch(C.a, PEER_NAME, "127.0.0.1", (uint16_t)msg[0], NULL, NULL, &f);
    if (st == NXL_SUCCESS && (st = nxl_future_wait(f, 10000)) == NXL_SUCCESS) {
        nxl_future_release(f);
        st = nxl_md_send(C.a, "127.0.0.1", (uint16_t)msg[0], NULL, NULL, &f);
        if (st == NXL_SUCCESS)
            st = nxl_future_wait(f, 10000);
    }
    if (st != NXL_SUCCESS)
        die("--cuda_peer: metadata exchange with the peer: %s", nxl_agent_last_error(C.a));
    nxl_future_release(f);
    C.remote = PEER_NAME;
}

static void peer_stop(void)
{
    nxl_notif_send(C.a, PEER_NAME, "quit", 4, NULL, NULL, NULL);
    for (int i = 0; i < 20; i++)
        loop_turn(C.a, 10);
    int status = 0;
    for (int i = 0; i < 100 && waitpid(C.peer, &status, WNOHANG) == 0; i++)
        usleep(50000);
    if (waitpid(C.peer, &status, WNOHANG) == 0) {
        kill(C.peer, SIGKILL);
        waitpid(C.peer, &status, 0);
    }
}

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
    if (O.check && C.peer) {
        /* the target is the peer's: written or read through nxl */
        seed = next_seed();
        if (O.op == NXL_WRITE) {
            c_fill(C.ibuf, C.ivram, span, seed);
            c_fill(C.shadow, true, span, seed ^ 0x5a5a5a5a);
            peer_copy(NXL_WRITE, C.shadow, span); /* the target starts out different */
            c_fill(C.ibuf, C.ivram, span, seed);
        } else {
            c_fill(C.shadow, true, span, seed);
            peer_copy(NXL_WRITE, C.shadow, span);
            c_fill(C.ibuf, C.ivram, span, seed ^ 0x5a5a5a5a);
        }
    } else if (O.check) {
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
            st = nxl_prep(C.a, C.remote, NXL_VRAM, rd, n, &rp);
        if (st == NXL_SUCCESS)
            st = nxl_xfer_make(C.a, op, lp, NULL, rp, NULL, n, NULL, &p.slots[s].x);
        nxl_prepped_release(lp);
        nxl_prepped_release(rp);
        if (st != NXL_SUCCESS)
            die("making the transfer: %s", nxl_agent_last_error(C.a));
        pipe_made(&p, t0, now_ns());
    }
    double sec = pipe_timed(&p, warm, timed, "", bs, n);
#ifdef NXLBENCH_CUDA
    if (O.check && C.peer) {
        bool iw = O.op == NXL_WRITE;
        if (iw) {
            c_fill(C.shadow, true, span, seed ^ 0xa5a5a5a5);
            peer_copy(NXL_READ, C.shadow, span);
        }
        long long bad = c_check(iw ? C.shadow : C.ibuf, iw ? true : C.ivram, span, seed);
        if (bad >= 0)
            die("consistency: %s byte %lld of [0, %zu) differs from its source (the peer "
                "process's VRAM, through CUDA IPC)", iw ? "target" : "initiator", bad, span);
    } else if (O.check) {
        bool iw = O.op == NXL_WRITE;
        long long bad = c_check(iw ? C.tbuf : C.ibuf, iw ? C.tvram : C.ivram, span, seed);
        if (bad >= 0)
            die("consistency: %s byte %lld of [0, %zu) differs from its source", iw ? "target"
                : "initiator", bad, span);
    }
#endif
    report_bw_row(bs, n, timed, sec, p.prep, p.nprep, p.post, timed, p.tx, timed);
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
    if (O.cuda_peer) {
        if (strcmp(O.tseg, "VRAM"))
            die("--cuda_peer: the target's buffer is the peer's VRAM (--target_seg_type VRAM)");
        size_t n = need_bytes();
        if (n <= O.total_buf)
            peer_fork(n); /* first: before CUDA is loaded here */
    }
#ifdef NXLBENCH_CUDA
    char why[160];
    if (O.check && !(crt = nxl_cuda_rt_get(NULL, why, sizeof(why))))
        die("--check_consistency: %s", why);
#else
    if (O.check)
        die("--check_consistency with --backend CUDA: nxlbench was built without CUDA");
#endif
    size_t need =
        need_fits("the buffers need", " each (largest block x batch x pipeline depth)", "");
    C.a = make_local_agent("nxlb-cuda", log_cb, "cuda");
    RUN.a = C.a;
    C.remote = nxl_agent_name(C.a);
    C.ivram = !strcmp(O.iseg, "VRAM");
    C.tvram = !strcmp(O.tseg, "VRAM");
    C.len = need;
    if (O.cuda_peer && nxl_backend_create(C.a, "UCX", NULL, 0, NULL) != NXL_SUCCESS)
        die("nxl_backend_create(UCX): %s", nxl_agent_last_error(C.a));
    if (nxl_backend_create(C.a, "CUDA", NULL, 0, NULL) != NXL_SUCCESS)
        die("nxl_backend_create(CUDA): %s", nxl_agent_last_error(C.a));
    if (O.cuda_peer)
        peer_connect(); /* once both transports are up: their metadata */
    C.ibuf = c_alloc(C.ivram, need);
    if (!O.cuda_peer)
        C.tbuf = c_alloc(C.tvram, need);
    else if (O.check)
        C.shadow = c_alloc(true, need);
    run_rows(c_row);
    report("# nxlbench bandwidth, CUDA, %s, initiator %s, target %s (device %d%s), "
           "pipeline_depth %ld; %s\n", O.op == NXL_READ ? "READ" : "WRITE", O.iseg, O.tseg,
           O.cuda_dev, O.cuda_peer ? ", in another process: CUDA IPC" : "", O.depth,
           transports_desc);
    if (C.peer)
        peer_stop();
    loop_detach(C.a);
    nxl_agent_destroy(C.a); /* frees what nxl_mem_alloc gave */
    if (!C.ivram && !O.mem_nxl)
        free(C.ibuf);
    if (!C.tvram && !O.mem_nxl)
        free(C.tbuf);
    return 0;
}
