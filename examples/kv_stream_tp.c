/* SPDX-License-Identifier: BSD-3-Clause */
/* kv_stream_tp: a sequence's KV cache from P prefill processes to D decode
 * processes of other tensor parallelism, block size and order (<nxl/kv.h>),
 * each decode rank READing from every prefill rank that holds some of its
 * heads with nxl_kv_xfer_make().
 *
 *   kv_stream_tp [--tp_prefill P] [--tp_decode D] [--block_tokens_prefill N]
 *                [--block_tokens_decode M] [--order_prefill HO|TO]
 *                [--order_decode HO|TO] [--layers L] [--heads H] [--head_size S]
 *                [--tokens T] [--mode auto|zcopy|staged] [--timeout S]
 *
 * The processes (this one forks them all, loopback TCP for the metadata):
 *
 *   prefill rank r                          decode rank d
 *   registers its region, writes its heads
 *   of the sequence, listens for metadata
 *   sends "PORT BASE" to the parent  ──pipe──▶ (the parent forks decode)
 *                                            nxl_md_fetch() of each prefill
 *                                            rank holding some of its heads
 *                                            nxl_kv_xfer_make/_post per rank,
 *                                            joined with nxl_future_all()
 *                                            every byte of its region checked
 *   runs its reactor until the parent closes its pipe (every decode rank ended)
 *
 * In real use a prefill worker sends its layout (an nxl_kv_layout_t whose
 * base is an address in its process) with its metadata; here every process
 * knows the shape from the flags and the parent passes the base. The check
 * computes the decode region it expects from the definition of a layout in
 * nxl/kv.h, written out below (at()), not with nxl_kv_plan(). Exit 0 when
 * every decode rank has every byte right. */
#include <nxl.h>
#include <nxl/kv.h>

#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_TP 64

static const char *thp_collapse; /* --thp_collapse: UCX's parameter, NULL: its default */

typedef struct opts {
    unsigned tpp, tpd, btp, btd, layers, heads, head_size, tokens, timeout_s;
    unsigned slice;  /* staged: bytes per group (0: the library's default) */
    bool spread;     /* the prefill blocks every other one (none next to another) */
    double bench_s; /* > 0: re-post the assembly for at least this long, print the rate */
    nxl_kv_order_t op, od;
    nxl_kv_mode_t mode;
} opts_t;

static void usage(FILE *f)
{
    fprintf(f,
"usage: kv_stream_tp [--tp_prefill P (4)] [--tp_decode D (2)]\n"
"                    [--block_tokens_prefill N (16)] [--block_tokens_decode M (32)]\n"
"                    [--order_prefill HO|TO (HO)] [--order_decode HO|TO (TO)]\n"
"                    [--layers L (4 planes)] [--heads H (8)] [--head_size S (64 x 2 B)]\n"
"                    [--tokens T (100)] [--mode auto|zcopy|staged (auto)] [--timeout S (30)]\n"
"                    [--slice BYTES (0: 1 MiB)] [--spread] [--bench S (0)]\n"
"                    [--thp_collapse auto|background|sync|off (UCX's default)]\n"
"P prefill processes and D decode processes (H divisible by both); each decode\n"
"rank READs its heads of the sequence from the prefill ranks that hold them and\n"
"checks every byte of its region. Exit 0 when all are right. The sequence's\n"
"prefill blocks are consecutive, from the top down; --spread: every other one\n"
"(no two next to each other). --bench S: each\n"
"decode rank then posts its transfers again, one assembly after the other, for\n"
"at least S seconds and prints its rate (the bytes it received / the time),\n"
"before the check.\n");
}

static const char *set_order(const cli_opt_t *opt, const char *val)
{
    if (strcasecmp(val, "HO") && strcasecmp(val, "TO"))
        return "HO (heads outer) or TO (tokens outer)";
    *(nxl_kv_order_t *)opt->field = strcasecmp(val, "HO") ? NXL_KV_TOKENS_OUTER
                                                           : NXL_KV_HEADS_OUTER;
    return NULL;
}

static const char *set_mode(const cli_opt_t *opt, const char *val)
{
    nxl_kv_mode_t *m = opt->field;
    if (!strcasecmp(val, "auto"))
        *m = NXL_KV_AUTO;
    else if (!strcasecmp(val, "zcopy"))
        *m = NXL_KV_ZCOPY;
    else if (!strcasecmp(val, "staged"))
        *m = NXL_KV_STAGED;
    else
        return "auto, zcopy or staged";
    return NULL;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- the sequence and the layouts, from the definition in nxl/kv.h */

#define MAX_BLOCKS 4096

/* the sequence's blocks: prefill from the top down, decode from 1 up */
static unsigned n_blocks(const opts_t *o, unsigned bt)
{
    return (o->tokens + bt - 1) / bt;
}
static void block_ids(const opts_t *o, uint32_t *pids, uint32_t *dids)
{
    for (unsigned i = 0; i < n_blocks(o, o->btp); i++)
        pids[i] = o->spread ? 2 * (n_blocks(o, o->btp) - i) : n_blocks(o, o->btp) + 1 - i;
    for (unsigned i = 0; i < n_blocks(o, o->btd); i++)
        dids[i] = i + 1;
}

static void layout(nxl_kv_layout_t *l, const opts_t *o, unsigned tp, unsigned rank, unsigned bt,
                   nxl_kv_order_t order, unsigned blocks)
{
    nxl_kv_layout_init(l);
    l->layers = o->layers;
    l->blocks = blocks;
    l->block_tokens = bt;
    l->heads = o->heads;
    l->head_size = o->head_size;
    l->elem_size = sizeof(uint16_t);
    l->order = order;
    l->tp_size = tp;
    l->tp_rank = rank;
    l->len = (size_t)o->layers * blocks * bt * (o->heads / tp) * o->head_size * sizeof(uint16_t);
}

static void prefill_layout(nxl_kv_layout_t *l, const opts_t *o, unsigned r)
{
    layout(l, o, o->tpp, r, o->btp, o->op, (o->spread ? 2 : 1) * n_blocks(o, o->btp) + 2);
}

static void decode_layout(nxl_kv_layout_t *l, const opts_t *o, unsigned d)
{
    layout(l, o, o->tpd, d, o->btd, o->od, n_blocks(o, o->btd) + 1);
}

/* the byte offset of element e of (plane p, token t, head h) in l: packed
 * planes of packed blocks, token t in block ids[t / block_tokens] */
static size_t at(const nxl_kv_layout_t *l, const uint32_t *ids, unsigned p, unsigned t,
                 unsigned h, unsigned e)
{
    unsigned bt = l->block_tokens;
    size_t b = ids[t / bt];
    size_t hl = l->heads / l->tp_size, hh = h - l->tp_rank * hl, slot = t % bt;
    size_t block = bt * hl * l->head_size;
    size_t in = l->order == NXL_KV_HEADS_OUTER ? (hh * bt + slot) * l->head_size
                                               : (slot * hl + hh) * l->head_size;
    return (((size_t)p * l->blocks + b) * block + in + e) * sizeof(uint16_t);
}

/* the value of element e of (plane, token, head): what the model wrote */
static uint16_t val(unsigned p, unsigned t, unsigned h, unsigned e)
{
    return (uint16_t)(p * 4099u + t * 131u + h * 17u + e);
}

static nxl_agent_t *agent(const char *name, bool listen)
{
    nxl_agent_config_t cfg;
    nxl_agent_config_init(&cfg);
    cfg.name = name;
    if (listen) {
        cfg.listen_addr = "127.0.0.1";
        cfg.listen_port = 0;
    }
    nxl_agent_t *a;
    if (nxl_agent_create(&cfg, &a) != NXL_SUCCESS) {
        fprintf(stderr, "%s: %s\n", name, nxl_agent_last_error(NULL));
        return NULL;
    }
    nxl_param_t thp = {"thp_collapse", thp_collapse};
    if (nxl_backend_create(a, "UCX", &thp, thp_collapse ? 1 : 0, NULL) != NXL_SUCCESS) {
        fprintf(stderr, "%s: %s\n", name, nxl_agent_last_error(a));
        nxl_agent_destroy(a);
        return NULL;
    }
    return a;
}

/* ---- prefill rank r: its heads of the sequence, served until ctl ends */

static int run_prefill(const opts_t *o, unsigned r, int out_fd, int ctl_fd)
{
    char name[32];
    snprintf(name, sizeof(name), "prefill%u", r);
    nxl_agent_t *a = agent(name, true);
    if (!a)
        return 1;
    nxl_kv_layout_t l;
    prefill_layout(&l, o, r);
    /* page-aligned, as a KV cache's pool is (calloc() of this size gives
     * a page + 16 B: each block then spans one page more, a pin more per
     * block for the kernel's cross-memory attach, which costs the small
     * prefill blocks of an assembly most) */
    unsigned char *m = NULL;
    if (posix_memalign((void **)&m, 4096, l.len))
        m = NULL;
    else
        memset(m, 0, l.len);
    nxl_desc_t d = {.addr = (uintptr_t)m, .len = l.len};
    if (!m || nxl_mem_register(a, NXL_DRAM, &d, 1, NULL) != NXL_SUCCESS) {
        fprintf(stderr, "%s: %s\n", name, m ? nxl_agent_last_error(a) : "out of memory");
        return 1;
    }
    l.base = (uintptr_t)m;
    static uint32_t pids[MAX_BLOCKS], dids[MAX_BLOCKS];
    block_ids(o, pids, dids);
    unsigned hl = o->heads / o->tpp;
    for (unsigned p = 0; p < o->layers; p++)
        for (unsigned t = 0; t < o->tokens; t++)
            for (unsigned h = r * hl; h < (r + 1) * hl; h++)
                for (unsigned e = 0; e < o->head_size; e++) {
                    uint16_t v = val(p, t, h, e);
                    memcpy(m + at(&l, pids, p, t, h, e), &v, sizeof(v));
                }
    dprintf(out_fd, "%u %" PRIuPTR "\n", nxl_agent_listen_port(a), l.base);
    close(out_fd);
    /* serve until the parent closes ctl (every decode rank ended) */
    uint64_t end = now_ms() + (uint64_t)o->timeout_s * 1000;
    int rc = 1;
    while (now_ms() < end) {
        struct pollfd pf = {.fd = ctl_fd, .events = POLLIN};
        if (poll(&pf, 1, 0) > 0) {
            char c;
            if (read(ctl_fd, &c, 1) <= 0) {
                rc = 0;
                break;
            }
        }
        nxl_agent_run_once(a, 5);
    }
    if (rc)
        fprintf(stderr, "%s: no end from the parent within %u s\n", name, o->timeout_s);
    nxl_agent_destroy(a);
    free(m);
    return rc;
}

/* ---- decode rank d */

static int done; /* 1: in place; -1: a transfer failed */

static void on_ready(nxl_future_t *f, nxl_status_t st, void *arg)
{
    unsigned d = *(unsigned *)arg;
    if (st != NXL_SUCCESS)
        fprintf(stderr, "decode%u: %s\n", d, nxl_future_error(f));
    done = st == NXL_SUCCESS ? 1 : -1;
}

static void on_fetch(nxl_future_t *f, nxl_status_t st, void *arg)
{
    if (st != NXL_SUCCESS)
        fprintf(stderr, "fetch: %s\n", nxl_future_error(f));
    *(int *)arg = st == NXL_SUCCESS ? 1 : -1;
}

static bool run_until(nxl_agent_t *a, const int *flag, uint64_t end)
{
    while (!*flag && now_ms() < end)
        nxl_agent_run_once(a, 5);
    return *flag > 0;
}

static int run_decode(const opts_t *o, unsigned d, const uint16_t *ports, const uintptr_t *bases)
{
    char name[32];
    snprintf(name, sizeof(name), "decode%u", d);
    uint64_t end = now_ms() + (uint64_t)o->timeout_s * 1000;
    nxl_agent_t *a = agent(name, false);
    if (!a)
        return 1;
    nxl_kv_layout_t l;
    decode_layout(&l, o, d);
    unsigned char *m = NULL, *want = malloc(l.len);
    if (posix_memalign((void **)&m, 4096, l.len))
        m = NULL;
    nxl_desc_t rd = {.addr = (uintptr_t)m, .len = l.len};
    if (!m || !want || nxl_mem_register(a, NXL_DRAM, &rd, 1, NULL) != NXL_SUCCESS) {
        fprintf(stderr, "%s: %s\n", name, m && want ? nxl_agent_last_error(a) : "out of memory");
        return 1;
    }
    memset(m, 0xEE, l.len);
    l.base = (uintptr_t)m;
    /* the prefill ranks holding some of its heads: [h0, h1) against theirs */
    unsigned hd = o->heads / o->tpd, hp = o->heads / o->tpp, h0 = d * hd, h1 = h0 + hd;
    static uint32_t pids[MAX_BLOCKS], dids[MAX_BLOCKS];
    block_ids(o, pids, dids);
    nxl_kv_seq_t seq = {dids, n_blocks(o, o->btd), pids, n_blocks(o, o->btp), o->tokens};
    nxl_kv_opts_t ko;
    nxl_kv_opts_init(&ko);
    ko.mode = o->mode;
    ko.slice_bytes = o->slice;
    nxl_kv_xfer_t *kx[MAX_TP];
    nxl_future_t *f[MAX_TP];
    unsigned n = 0;
    for (unsigned r = 0; r < o->tpp; r++) {
        if (r * hp >= h1 || (r + 1) * hp <= h0)
            continue; /* none of its heads */
        char pname[32];
        snprintf(pname, sizeof(pname), "prefill%u", r);
        int fetched = 0;
        if (nxl_md_fetch(a, pname, "127.0.0.1", ports[r], on_fetch, &fetched, NULL) !=
                NXL_SUCCESS ||
            !run_until(a, &fetched, end)) {
            fprintf(stderr, "%s: cannot fetch the metadata of %s: %s\n", name, pname,
                    nxl_agent_last_error(a));
            return 1;
        }
        nxl_kv_layout_t pl;
        prefill_layout(&pl, o, r);
        pl.base = bases[r];
        if (nxl_kv_xfer_make(a, pname, &l, &pl, &seq, NULL, &ko, &kx[n]) != NXL_SUCCESS ||
            nxl_kv_xfer_post(kx[n], NULL, NULL, &f[n]) != NXL_SUCCESS) {
            fprintf(stderr, "%s: from %s: %s\n", name, pname, nxl_agent_last_error(a));
            return 1;
        }
        size_t np, bytes;
        nxl_kv_mode_t km = nxl_kv_xfer_mode(kx[n], &np, &bytes);
        printf("%s: from %s: %zu pieces, %zu bytes, %s\n", name, pname, np, bytes,
               km == NXL_KV_ZCOPY ? "zero copy" : "staged");
        n++;
    }
    nxl_future_all(a, f, n, on_ready, &d, NULL);
    while (!done && now_ms() < end)
        nxl_agent_run_once(a, 5);
    if (done != 1) {
        fprintf(stderr, "%s: %s\n", name, done ? "a transfer failed" : "timed out");
        return 1;
    }
    if (o->bench_s > 0) {
        /* the same assembly again and again, each after the last ended */
        size_t total = 0;
        for (unsigned k = 0; k < n; k++) {
            size_t b;
            nxl_kv_xfer_mode(kx[k], NULL, &b);
            total += b;
        }
        struct timespec t0, t1, c0, c1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
        double el = 0;
        unsigned long posts = 0;
        while (el < o->bench_s) {
            done = 0;
            for (unsigned k = 0; k < n; k++) {
                nxl_future_release(f[k]);
                if (nxl_kv_xfer_post(kx[k], NULL, NULL, &f[k]) != NXL_SUCCESS) {
                    fprintf(stderr, "%s: re-post: %s\n", name, nxl_agent_last_error(a));
                    return 1;
                }
            }
            nxl_future_all(a, f, n, on_ready, &d, NULL);
            while (!done)
                nxl_agent_run_once(a, 5);
            if (done != 1)
                return 1;
            posts++;
            clock_gettime(CLOCK_MONOTONIC, &t1);
            el = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
        }
        /* the decode process's CPU time too: its thread does the READs
         * (over shared memory: a copy by the kernel in its system time)
         * and the re-layout, the prefill ranks only wait; on a loaded
         * machine the rate per CPU second varies less than per second */
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
        double cpu = (double)(c1.tv_sec - c0.tv_sec) + (double)(c1.tv_nsec - c0.tv_nsec) / 1e9;
        printf("%s: bench: %lu assemblies of %zu bytes from %u prefill ranks in %.3f s "
               "(%.3f s CPU): %.3f GB/s, %.3f GB per CPU second\n", name, posts, total, n, el,
               cpu, (double)total * posts / el / 1e9, (double)total * posts / cpu / 1e9);
    }
    /* every byte: its heads of the sequence where at() says, 0xEE elsewhere */
    memset(want, 0xEE, l.len);
    for (unsigned p = 0; p < o->layers; p++)
        for (unsigned t = 0; t < o->tokens; t++)
            for (unsigned h = h0; h < h1; h++)
                for (unsigned e = 0; e < o->head_size; e++) {
                    uint16_t v = val(p, t, h, e);
                    memcpy(want + at(&l, dids, p, t, h, e), &v, sizeof(v));
                }
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < l.len; i++)
        if (m[i] != want[i] && !bad++)
            first = i;
    if (bad)
        printf("%s: %zu wrong bytes of %zu, the first at %zu\n", name, bad, l.len, first);
    else
        printf("%s: %zu bytes right (%u prefill ranks)\n", name, l.len, n);
    for (unsigned k = 0; k < n; k++) {
        nxl_future_release(f[k]);
        nxl_kv_xfer_release(kx[k]);
    }
    nxl_agent_destroy(a);
    free(m);
    free(want);
    return bad ? 1 : 0;
}

/* ---- the parent */

static int wait_child(pid_t pid)
{
    int ws;
    while (waitpid(pid, &ws, 0) < 0)
        if (errno != EINTR)
            return 1;
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128;
}

int main(int argc, char **argv)
{
    opts_t o = {.tpp = 4, .tpd = 2, .btp = 16, .btd = 32, .layers = 4, .heads = 8,
                .head_size = 64, .tokens = 100, .timeout_s = 30, .op = NXL_KV_HEADS_OUTER,
                .od = NXL_KV_TOKENS_OUTER, .mode = NXL_KV_AUTO};
#define V(n, s, f, ...) {.name = n, .arg = CLI_VALUE, .set = s, .field = f, __VA_ARGS__}
    const cli_opt_t opts[] = {
        V("tp_prefill", cli_set_uint, &o.tpp, .min = 1, .max = MAX_TP),
        V("tp_decode", cli_set_uint, &o.tpd, .min = 1, .max = MAX_TP),
        V("block_tokens_prefill", cli_set_uint, &o.btp, .min = 1, .max = 4096),
        V("block_tokens_decode", cli_set_uint, &o.btd, .min = 1, .max = 4096),
        V("order_prefill", set_order, &o.op),
        V("order_decode", set_order, &o.od),
        V("layers", cli_set_uint, &o.layers, .min = 1, .max = 1024),
        V("heads", cli_set_uint, &o.heads, .min = 1, .max = 1024),
        V("head_size", cli_set_uint, &o.head_size, .min = 1, .max = 4096),
        V("tokens", cli_set_uint, &o.tokens, .min = 1, .max = 65536),
        V("mode", set_mode, &o.mode),
        V("timeout", cli_set_uint, &o.timeout_s, .min = 1, .max = 3600),
        V("slice", cli_set_uint, &o.slice, .min = 0, .max = 1u << 30),
        V("bench", cli_set_double, &o.bench_s, .min = 0),
        V("thp_collapse", cli_set_str, &thp_collapse),
        {.name = "spread", .arg = CLI_SWITCH, .set = cli_set_true, .field = &o.spread},
        {0},
    };
#undef V
    const cli_t cli = {.prog = "kv_stream_tp", .opts = opts, .usage = usage,
                       .dash_aliases = true, .help_h = true};
    if (cli_parse(&cli, argc, argv) < argc)
        cli_die(&cli, "no arguments besides the flags");
    if (o.heads % o.tpp || o.heads % o.tpd)
        cli_die(&cli, "--heads %u is not divisible by --tp_prefill %u and --tp_decode %u",
                o.heads, o.tpp, o.tpd);
    if (n_blocks(&o, o.btp) > MAX_BLOCKS - 2 || n_blocks(&o, o.btd) > MAX_BLOCKS - 2)
        cli_die(&cli, "at most %d blocks a sequence", MAX_BLOCKS - 2);
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("kv_stream_tp: %u prefill ranks (%u-token blocks, %s) -> %u decode ranks (%u-token "
           "blocks, %s), %u planes x %u tokens x %u heads of %u x 2 B\n", o.tpp, o.btp,
           o.op == NXL_KV_HEADS_OUTER ? "HO" : "TO", o.tpd, o.btd,
           o.od == NXL_KV_HEADS_OUTER ? "HO" : "TO", o.layers, o.tokens, o.heads, o.head_size);

    pid_t pp[MAX_TP], dp[MAX_TP];
    int ctl[MAX_TP];
    uint16_t ports[MAX_TP];
    uintptr_t bases[MAX_TP];
    int rc = 0;
    unsigned started = 0;
    for (unsigned r = 0; r < o.tpp; r++) {
        int out[2], c[2];
        if (pipe(out) || pipe(c)) {
            perror("kv_stream_tp: pipe");
            rc = 1;
            break;
        }
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0) {
            perror("kv_stream_tp: fork");
            rc = 1;
            break;
        }
        if (pid == 0) {
            close(out[0]);
            close(c[1]);
            for (unsigned k = 0; k < r; k++)
                close(ctl[k]);
            int prc = run_prefill(&o, r, out[1], c[0]);
            fflush(stdout);
            _exit(prc);
        }
        close(out[1]);
        close(c[0]);
        pp[r] = pid;
        ctl[r] = c[1];
        started++;
        /* its "PORT BASE" line once it serves */
        char line[64] = {0};
        size_t got = 0;
        uint64_t end = now_ms() + (uint64_t)o.timeout_s * 1000;
        while (got < sizeof(line) - 1 && !memchr(line, '\n', got) && now_ms() < end) {
            struct pollfd pf = {.fd = out[0], .events = POLLIN};
            if (poll(&pf, 1, 100) <= 0)
                continue;
            ssize_t k = read(out[0], line + got, sizeof(line) - 1 - got);
            if (k <= 0)
                break;
            got += (size_t)k;
        }
        close(out[0]);
        unsigned port;
        if (sscanf(line, "%u %" SCNuPTR, &port, &bases[r]) != 2 || !port || port > 65535) {
            fprintf(stderr, "kv_stream_tp: prefill%u did not start\n", r);
            rc = 1;
            break;
        }
        ports[r] = (uint16_t)port;
    }
    unsigned forked = 0;
    for (unsigned d = 0; !rc && d < o.tpd; d++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0) {
            perror("kv_stream_tp: fork");
            rc = 1;
            break;
        }
        if (pid == 0) {
            for (unsigned k = 0; k < started; k++)
                close(ctl[k]);
            int drc = run_decode(&o, d, ports, bases);
            fflush(stdout);
            _exit(drc);
        }
        dp[d] = pid;
        forked++;
    }
    unsigned dbad = 0, pbad = 0;
    for (unsigned d = 0; d < forked; d++)
        dbad += wait_child(dp[d]) != 0;
    for (unsigned r = 0; r < started; r++)
        close(ctl[r]); /* the prefill ranks may go */
    for (unsigned r = 0; r < started; r++)
        pbad += wait_child(pp[r]) != 0;
    printf("kv_stream_tp: %u of %u decode ranks right, %u of %u prefill ranks ended well\n",
           forked - dbad, o.tpd, started - pbad, o.tpp);
    return rc || dbad || pbad || forked < o.tpd ? 1 : 0;
}
