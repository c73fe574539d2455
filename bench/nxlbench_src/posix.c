/* SPDX-License-Identifier: BSD-3-Clause */
/* nxlbench --backend POSIX: DRAM ↔ files, one process; --backend GDS: VRAM ↔ files
 *
 * As nixlbench runs its storage backends: one agent, its own peer. The DRAM
 * side is a ring of pipeline_depth × batch blocks, reused; the file side is
 * a footprint of at least --storage_footprint bytes spread over
 * --num_files files (or one block device), walked sequentially: each
 * transfer takes the next `batch` blocks, file after file, and the walk
 * wraps at the end. So a row measures the storage, not one small region
 * that the page cache holds. Each transfer is made from the two lists
 * prepared once per row (nxl_xfer_make by index; its time is "prep").
 *
 * --backend GDS runs the same walk with the ring in VRAM: an agent with the
 * CUDA transport (nxl_mem_alloc(NXL_VRAM) on --cuda_device) and the GDS
 * transport (cuFile, which registers the ring with cuFileBufRegister and
 * each file with cuFileHandleRegister). The files are written whole and
 * checked from the host as for POSIX; the ring's bytes go through the
 * CUDA runtime table that libnxl loads (cudaMemcpy, untimed: filling the
 * ring before WRITE rows, reading it back for --check_consistency). */

#include "nxlbench.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef NXLBENCH_CUDA
#include "transports/common/cudart.h"
#endif

typedef struct sfile {
    int fd;
    int rfd;             /* the fd registered (GDS with O_DIRECT: a second one) */
    char path[PATH_MAX + 64];
    bool made;
} sfile_t;

static struct {
    nxl_agent_t *a;
    char dir[PATH_MAX];
    bool made_dir;
    sfile_t *f;
    long nf;
    size_t fsize;        /* bytes of each file used */
    bool blk_dev;        /* BLK on a real block device */
    buf_t ring;
    uint64_t seed;       /* READ: the files' pattern (seed + file index, by file offset) */
    bool filled;
    bool gds;            /* --backend GDS: the ring is VRAM */
    unsigned char *host; /* GDS: the ring's bytes on the host, for filling and checking */
#ifdef NXLBENCH_CUDA
    const nxl_cuda_rt_t *crt;
#endif
} P;

/* a row: the walk over the footprint, the two lists prepared once */
typedef struct prow {
    size_t bs, n, bpf, nblk;
    nxl_prepped_t *lp, *rp;
    size_t next;         /* next footprint block */
    size_t *lidx, *ridx;
    uint32_t *writer;    /* WRITE, --check_consistency: ring block of each block's last write */
    bool verify;         /* READ verification pass: check every buffer as it completes */
    size_t nverified;
} prow_t;

/* GDS: [off, off + len) of the VRAM ring to (put) or from P.host (untimed) */
static void ring_copy(size_t off, size_t len, bool put)
{
#ifdef NXLBENCH_CUDA
    unsigned char *ring = (unsigned char *)P.ring.p + off, *host = P.host + off;
    if (P.crt->cudaMemcpy(put ? ring : host, put ? host : ring, len,
                          put ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost) != cudaSuccess)
        die("%scudaMemcpy of %zu bytes %s the VRAM ring failed", put ? "" : "consistency: ", len,
            put ? "to" : "from");
#else
    (void)off, (void)len, (void)put;
#endif
}

/* the ring [0, len) filled with pattern seed, in DRAM or (GDS) VRAM */
static void ring_fill(size_t len, uint64_t seed)
{
    if (!P.gds) {
        pat_fill(P.ring.p, 0, len, seed);
        return;
    }
    pat_fill(P.host, 0, len, seed);
    ring_copy(0, len, true);
}

static void p_cleanup(void)
{
    for (long i = 0; i < P.nf; i++)
        if (P.f[i].made)
            unlink(P.f[i].path);
    if (P.made_dir)
        rmdir(P.dir);
}

static void p_die_cleanup(int sig)
{
    p_cleanup();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* compares len bytes at p with pattern seed at offsets o0 .. o0+len; @return the first wrong offset or -1 */
static long long pat_cmp(const unsigned char *p, size_t o0, size_t len, uint64_t seed)
{
    size_t i = 0;
    for (; i < len && ((o0 + i) & 7); i++)
        if (p[i] != pat_byte(seed, o0 + i))
            return (long long)(o0 + i);
    for (; i + 8 <= len; i += 8) {
        uint64_t w = mix64(seed * 0x100000001B3ull + ((o0 + i) >> 3)), v;
        memcpy(&v, p + i, 8);
        if (v != w)
            break;
    }
    for (; i < len; i++)
        if (p[i] != pat_byte(seed, o0 + i))
            return (long long)(o0 + i);
    return -1;
}

static void pat_fill_at(unsigned char *p, size_t o0, size_t len, uint64_t seed)
{
    size_t i = 0;
    for (; i < len && ((o0 + i) & 7); i++)
        p[i] = pat_byte(seed, o0 + i);
    for (; i + 8 <= len; i += 8) {
        uint64_t w = mix64(seed * 0x100000001B3ull + ((o0 + i) >> 3));
        memcpy(p + i, &w, 8);
    }
    for (; i < len; i++)
        p[i] = pat_byte(seed, o0 + i);
}

/* untimed: written data on its way to the storage, and none of the files in the page cache */
static void p_settle(void)
{
    for (long i = 0; i < P.nf; i++) {
        fdatasync(P.f[i].fd);
        posix_fadvise(P.f[i].fd, 0, 0, POSIX_FADV_DONTNEED);
    }
}

static void p_files(void)
{
    bool blk = !strcmp(O.tseg, "BLK");
    if (blk) {
        P.nf = 1;
        P.f = calloc(1, sizeof(sfile_t));
        snprintf(P.f[0].path, sizeof(P.f[0].path), "%s", O.filepath);
        P.f[0].fd = open(O.filepath, O_RDWR | O_CLOEXEC);
        if (P.f[0].fd < 0)
            die("--filepath %s: %s", O.filepath, strerror(errno));
        struct stat sb;
        fstat(P.f[0].fd, &sb);
        uint64_t size = (uint64_t)sb.st_size;
        if (S_ISBLK(sb.st_mode)) {
            P.blk_dev = true;
            if (ioctl(P.f[0].fd, BLKGETSIZE64, &size))
                die("--filepath %s: BLKGETSIZE64: %s", O.filepath, strerror(errno));
            if (size < O.footprint) {
                fprintf(stderr, "nxlbench: %s holds %llu bytes: the footprint is that, not %zu\n",
                        O.filepath, (unsigned long long)size, O.footprint);
                O.footprint = (size_t)size;
            }
        } else if (!S_ISREG(sb.st_mode)) {
            die("--filepath %s: neither a block device nor a regular file", O.filepath);
        } else if (size < O.footprint && ftruncate(P.f[0].fd, (off_t)O.footprint)) {
            die("--filepath %s: extending to %zu bytes: %s", O.filepath, O.footprint,
                strerror(errno));
        }
        P.fsize = O.footprint;
        P.f[0].rfd = P.f[0].fd;
        return;
    }
    if (O.filepath) {
        snprintf(P.dir, sizeof(P.dir), "%s", O.filepath);
        struct stat sb;
        if (stat(P.dir, &sb) || !S_ISDIR(sb.st_mode))
            die("--filepath %s: not a directory (FILE runs make their files there)", P.dir);
    } else {
        snprintf(P.dir, sizeof(P.dir), "/tmp/nxlbench-XXXXXX");
        if (!mkdtemp(P.dir))
            die("mkdtemp: %s", strerror(errno));
        P.made_dir = true;
    }
    P.nf = O.num_files;
    P.f = calloc((size_t)P.nf, sizeof(sfile_t));
    P.fsize = (O.footprint / (size_t)P.nf + 4095) & ~(size_t)4095;
    atexit(p_cleanup);
    signal(SIGINT, p_die_cleanup);
    signal(SIGTERM, p_die_cleanup);
    for (long i = 0; i < P.nf; i++) {
        sfile_t *f = &P.f[i];
        snprintf(f->path, sizeof(f->path), "%s/nxlbench-%d-%ld.dat", P.dir, (int)getpid(), i);
        f->fd = open(f->path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (f->fd < 0)
            die("creating %s: %s", f->path, strerror(errno));
        f->made = true;
        int e = posix_fallocate(f->fd, 0, (off_t)P.fsize);
        if (e && ftruncate(f->fd, (off_t)P.fsize))
            die("sizing %s to %zu bytes: %s", f->path, P.fsize, strerror(e));
        f->rfd = f->fd;
        /* GDS takes O_DIRECT from the fd it is given (the POSIX transport
         * from its direct parameter); the prefill and the checks keep the
         * buffered one */
        if (P.gds && O.direct && (f->rfd = open(f->path, O_RDWR | O_DIRECT | O_CLOEXEC)) < 0)
            die("opening %s with O_DIRECT (--storage_enable_direct): %s", f->path,
                strerror(errno));
    }
}

/* Before the first row (untimed), every file is written whole with a known
 * pattern: READs then read real data (not the holes or unwritten extents of
 * a new file, which cost the storage nothing) and can be verified, and
 * WRITEs overwrite allocated blocks, as in a file in use and as fio does
 * once its file is laid out. */
static void p_prefill(void)
{
    if (P.filled || O.no_prefill)
        return;
    P.filled = true;
    P.seed = (uint64_t)getpid() * 7919 + 17;
    size_t cb = 4 * MiB;
    unsigned char *b = malloc(cb);
    for (long i = 0; i < P.nf; i++)
        for (size_t o = 0; o < P.fsize; o += cb) {
            size_t l = P.fsize - o < cb ? P.fsize - o : cb;
            pat_fill_at(b, o, l, P.seed + (uint64_t)i);
            for (size_t d = 0; d < l;) {
                ssize_t w = pwrite(P.f[i].fd, b + d, l - d, (off_t)(o + d));
                if (w <= 0)
                    die("filling %s: %s", P.f[i].path, w < 0 ? strerror(errno) : "short write");
                d += (size_t)w;
            }
        }
    free(b);
}

/* the next n blocks of the walk, for slot s (its n blocks of the ring) */
static void p_next(pipe_slot_t *s)
{
    prow_t *r = s->p->user;
    size_t ring0 = s->i * r->n;
    s->g = r->next;
    for (size_t j = 0; j < r->n; j++) {
        r->lidx[j] = ring0 + j;
        r->ridx[j] = (r->next + j) % r->nblk;
        if (r->writer)
            r->writer[r->ridx[j]] = (uint32_t)(ring0 + j);
    }
    r->next = (r->next + r->n) % r->nblk;
}

static bool p_make(pipe_slot_t *s)
{
    prow_t *r = s->p->user;
    if (nxl_xfer_make(P.a, O.op, r->lp, r->lidx, r->rp, r->ridx, r->n, NULL, &s->x) !=
        NXL_SUCCESS) {
        fail("nxl_xfer_make: %s", nxl_agent_last_error(P.a));
        return false;
    }
    return true;
}

static bool p_done(pipe_slot_t *s)
{
    prow_t *r = s->p->user;
    nxl_xfer_release(s->x);
    s->x = NULL;
    if (r->verify) {
        size_t ring0 = s->i * r->n;
        const unsigned char *ring = P.ring.p;
        if (P.gds) {
            ring_copy(ring0 * r->bs, r->n * r->bs, false);
            ring = P.host;
        }
        for (size_t j = 0; j < r->n; j++) {
            size_t g = (s->g + j) % r->nblk, fi = g / r->bpf, off = (g % r->bpf) * r->bs;
            long long bad = pat_cmp(ring + (ring0 + j) * r->bs, off, r->bs,
                                    P.seed + (uint64_t)fi);
            if (bad >= 0) {
                fail("consistency: READ of %s at offset %zu (block %zu B) differs from the file's "
                     "pattern at offset %lld", P.f[fi].path, off, r->bs, bad);
                return false;
            }
            r->nverified++;
        }
    }
    return true;
}

/* every block of the walk touched holds what its last WRITE took from @p ring (on the host) */
static void p_verify_write(prow_t *r, size_t first, size_t nblocks, const unsigned char *ring)
{
    unsigned char *tmp;
    if (posix_memalign((void **)&tmp, 4096, r->bs))
        die("out of memory");
    for (size_t b = 0; b < nblocks; b++) {
        size_t g = (first + b) % r->nblk, fi = g / r->bpf, off = (g % r->bpf) * r->bs;
        for (size_t d = 0; d < r->bs;) {
            ssize_t got = pread(P.f[fi].fd, tmp + d, r->bs - d, (off_t)(off + d));
            if (got <= 0)
                die("consistency: reading back %s at %zu: %s", P.f[fi].path, off + d,
                    got < 0 ? strerror(errno) : "end of file");
            d += (size_t)got;
        }
        if (r->writer[g] == UINT32_MAX)
            continue;
        const unsigned char *want = ring + (size_t)r->writer[g] * r->bs;
        if (memcmp(tmp, want, r->bs)) {
            size_t k = 0;
            while (tmp[k] == want[k])
                k++;
            die("consistency: WRITE: %s byte %zu differs from what was written there "
                "(block %zu B)", P.f[fi].path, off + k, r->bs);
        }
    }
    free(tmp);
}

static void p_row(size_t bs, size_t n)
{
    prow_t r = {.bs = bs, .n = n};
    long Pd = O.depth;
    r.bpf = P.fsize / bs;
    r.nblk = r.bpf * (size_t)P.nf;
    if (r.nblk < (size_t)Pd * n * 2)
        die("--storage_footprint %zu holds %zu blocks of %zu B; a walk needs at least twice "
            "pipeline_depth × batch (%zu)", O.footprint, r.nblk, bs, (size_t)Pd * n * 2);
    /* default: one pass over the footprint */
    size_t per = bs * n;
    long timed = O.set_num_iter ? O.num_iter : (long)((r.nblk * bs + per - 1) / per);
    if (timed < 1)
        timed = 1;
    long warm = O.set_warmup ? O.warmup_iter : (timed / 64 < 8 ? timed / 64 : 8);
    pipe_t p;
    pipe_init(&p, Pd, timed, warm);
    p.stall_s = 60;
    p.before = p_next;
    p.make = p_make;
    p.done = p_done;
    p.user = &r;
    r.lidx = calloc(n, sizeof(size_t));
    r.ridx = calloc(n, sizeof(size_t));
    /* the two lists, prepared once per row */
    size_t nring = (size_t)Pd * n;
    nxl_desc_t *ld = calloc(nring, sizeof(*ld)), *rd = calloc(r.nblk, sizeof(*rd));
    for (size_t i = 0; i < nring; i++)
        ld[i] = (nxl_desc_t){.addr = (uintptr_t)P.ring.p + i * bs, .len = bs,
                             .dev_id = P.gds ? (uint64_t)O.cuda_dev : 0};
    for (size_t g = 0; g < r.nblk; g++)
        rd[g] = (nxl_desc_t){.addr = (g % r.bpf) * bs, .len = bs,
                             .dev_id = (uint64_t)P.f[g / r.bpf].rfd};
    nxl_mem_t ft = !strcmp(O.tseg, "BLK") ? NXL_BLK : NXL_FILE;
    if (nxl_prep(P.a, NULL, P.gds ? NXL_VRAM : NXL_DRAM, ld, nring, &r.lp) != NXL_SUCCESS ||
        nxl_prep(P.a, nxl_agent_name(P.a), ft, rd, r.nblk, &r.rp) != NXL_SUCCESS)
        die("nxl_prep: %s", nxl_agent_last_error(P.a));
    free(ld);
    free(rd);
    p_prefill();
    if (O.op == NXL_WRITE)
        ring_fill(nring * bs, next_seed());
    if (O.check && O.op == NXL_WRITE) {
        r.writer = malloc(r.nblk * sizeof(uint32_t));
        memset(r.writer, 0xff, r.nblk * sizeof(uint32_t));
    }
    p_settle();
    size_t start = r.next;
    double sec = pipe_timed(&p, warm, timed, "", bs, n);
    size_t moved_blocks = (size_t)(warm + timed) * n;
    size_t touched = moved_blocks < r.nblk ? moved_blocks : r.nblk;
    size_t first = moved_blocks < r.nblk ? start : 0;
    if (O.check) {
        if (O.op == NXL_WRITE) {
            if (P.gds)
                ring_copy(0, nring * bs, false); /* what the VRAM held, as the files should */
            p_verify_write(&r, first, touched, P.gds ? P.host : P.ring.p);
        } else {
            /* GDS: the ring scribbled over first, so each byte checked came
             * from the file in this pass */
            if (P.gds) {
                memset(P.host, 0xa5, nring * bs);
                ring_copy(0, nring * bs, true);
            }
            /* read every touched block again, checking each buffer as it arrives */
            r.verify = true;
            r.next = first;
            long passes = (long)((touched + n - 1) / n);
            p.record = false;
            p.warm = p.completed = p.posted = 0;
            pipe_pass(&p, passes);
            if (RUN.failed)
                die("block %zu batch %zu: %s", bs, n, RUN.err);
        }
    }
    report_bw_row(bs, n, timed, sec, p.prep, p.nprep, p.post, timed, p.tx, timed);
    pipe_free(&p);
    nxl_prepped_release(r.lp);
    nxl_prepped_release(r.rp);
    free(r.writer);
    free(r.lidx);
    free(r.ridx);
}

/* GDS: the CUDA runtime (for the ring's bytes), the agent with CUDA and
 * GDS; each missing piece ends the run with one sentence naming it */
static void g_backends(void)
{
#ifdef NXLBENCH_CUDA
    char why[200];
    if (!(P.crt = nxl_cuda_rt_get(NULL, why, sizeof(why))))
        die("--backend GDS needs a GPU and the CUDA runtime: %s", why);
    if (nxl_backend_create(P.a, "CUDA", NULL, 0, NULL) != NXL_SUCCESS)
        die("--backend GDS needs the CUDA transport for its VRAM: %s", nxl_agent_last_error(P.a));
    /* --backend_params are the GDS transport's (threads=N, queue_depth=N, chunk=BYTES) */
    if (nxl_backend_create(P.a, "GDS", O.bparams, O.nbparams, NULL) != NXL_SUCCESS)
        die("%s", nxl_agent_last_error(P.a));
#else
    die("--backend GDS: nxlbench was built without CUDA (configure found no CUDA headers, or "
        "--disable-cuda), so there is no GDS transport either");
#endif
}

static int storage_main(void)
{
    RUN.t_start = now_ns();
    size_t need = need_fits(P.gds ? "the VRAM ring needs" : "the DRAM ring needs",
                            " (largest block x batch x pipeline depth)", "");
    if (O.direct) {
        size_t v[64], nv;
        size_list(v, &nv);
        for (size_t i = 0; i < nv; i++)
            if (v[i] % 4096 && P.gds)
                die("--storage_enable_direct with --backend GDS: blocks of %zu B are not "
                    "multiples of 4096, which the O_DIRECT files need", v[i]);
            else if (v[i] % 4096)
                fprintf(stderr, "nxlbench: --storage_enable_direct: blocks of %zu B are not "
                                "multiples of 4096; the transport moves them buffered\n", v[i]);
    }
    if (P.gds) {
        P.a = make_local_agent("nxlb-gds", log_cb, "gds");
        RUN.a = P.a;
        g_backends();
    } else {
        P.a = make_local_agent("nxlb-posix", log_cb, "posix");
        RUN.a = P.a;
        char qd[32];
        snprintf(qd, sizeof(qd), "%zu", (size_t)O.depth * O.max_batch < 256 ? 256
                                         : (size_t)O.depth * O.max_batch > 32768 ? 32768
                                         : (size_t)O.depth * O.max_batch);
        /* --backend_params (chunk=..., ...) after nxlbench's own, which they may repeat */
        nxl_param_t prm[3 + sizeof(O.bparams) / sizeof(O.bparams[0])] = {
            {"engine", O.posix_engine}, {"direct", O.direct ? "1" : "0"}, {"queue_depth", qd}};
        size_t nprm = 3;
        for (size_t i = 0; i < O.nbparams; i++)
            prm[nprm++] = O.bparams[i];
        if (nxl_backend_create(P.a, "POSIX", prm, nprm, NULL) != NXL_SUCCESS)
            die("nxl_backend_create(POSIX): %s", nxl_agent_last_error(P.a));
    }
    p_files();
    nxl_mem_t ft = !strcmp(O.tseg, "BLK") ? NXL_BLK : NXL_FILE;
    for (long i = 0; i < P.nf; i++) {
        nxl_desc_t d = {.addr = 0, .len = P.fsize, .dev_id = (uint64_t)P.f[i].rfd};
        if (nxl_mem_register(P.a, ft, &d, 1, NULL) != NXL_SUCCESS)
            die("registering %s: %s", P.f[i].path, nxl_agent_last_error(P.a));
    }
    if (P.gds) {
        /* CUDA allocates it, GDS registers it (cuFileBufRegister) */
        void *v = NULL;
        if (nxl_mem_alloc(P.a, NXL_VRAM, need, (uint64_t)O.cuda_dev, &v) != NXL_SUCCESS)
            die("%zu bytes of VRAM on device %d: %s", need, O.cuda_dev,
                nxl_agent_last_error(P.a));
        P.ring = (buf_t){.p = v, .len = need, .nxl = true};
        if (!(P.host = malloc(need)))
            die("out of memory for %zu bytes (the VRAM ring's host copy)", need);
        posix_thp = -1;
    } else {
        buf_huge = !O.plain_pages && !O.mem_nxl;
        if (!buf_alloc(P.a, &P.ring, need, O.mem_nxl))
            die("%zu bytes of DRAM: %s", need, nxl_agent_last_error(P.a));
        posix_thp = thp_bytes(P.ring.p, P.ring.len);
    }
    posix_footprint = P.fsize * (size_t)P.nf;
    posix_nfiles = P.nf;
    posix_where = !strcmp(O.tseg, "BLK") ? O.filepath : P.dir;
    run_rows(p_row);
    if (P.gds)
        report("# nxlbench bandwidth, GDS, %s, VRAM (device %d) ↔ FILE (%s), %ld file(s), "
               "footprint %zu B, %s, pipeline_depth %ld; %s; VRAM ring %zu B\n",
               O.op == NXL_READ ? "READ" : "WRITE", O.cuda_dev, P.dir, P.nf,
               P.fsize * (size_t)P.nf, O.direct ? "O_DIRECT" : "buffered", O.depth,
               transports_desc, P.ring.len);
    else
        report("# nxlbench bandwidth, POSIX, %s, DRAM ↔ %s (%s), %ld file(s), footprint %zu B, "
               "%s, pipeline_depth %ld, engine: %s; DRAM ring %zu B, %lld B of it on huge "
               "pages\n", O.op == NXL_READ ? "READ" : "WRITE", O.tseg,
               !strcmp(O.tseg, "BLK") ? O.filepath : P.dir, P.nf, P.fsize * (size_t)P.nf,
               O.direct ? "O_DIRECT" : "buffered", O.depth, transports_desc, P.ring.len,
               posix_thp);
    buf_free(P.a, &P.ring);
    nxl_agent_destroy(P.a);
    for (long i = 0; i < P.nf; i++) {
        if (P.f[i].rfd != P.f[i].fd)
            close(P.f[i].rfd);
        close(P.f[i].fd);
    }
    free(P.host);
    return report_plot_after_run();
}

int posix_main(void)
{
    return storage_main();
}

int gds_main(void)
{
    P.gds = true;
    return storage_main();
}
