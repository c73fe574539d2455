/* SPDX-License-Identifier: BSD-3-Clause */
/* reg_cache — what registering slices of a large region costs: N slices of
 * S bytes of a region mapped with MAP_NORESERVE and never touched,
 * registered one call each and deregistered one call each, in three rows:
 *   whole     one registration of the whole region, and its deregistration
 *   cache     the region registered, then its slices (the registration
 *             cache: each reuses the region's registration)
 *   no cache  the slices alone with NXL_REG_CACHE=0: one registration each
 * Times in ms, the median of R runs (register, deregister, both).
 *
 * Then transfers within the agent (loopback) into a registered region,
 * each made with nxl_xfer_create(), posted, waited for and released, from
 * B blocks of K KiB of host memory:
 *   registered      the source registered by the application
 *   lazy, first     another source, never registered, NXL_DESC_AUTO_REGISTER:
 *                   the first transfer, which registers it
 *   lazy, after     the same, every transfer after the first (the cache's
 *                   entry reused)
 * The two sources alternate, transfer by transfer. Times in us a transfer
 * (median of I), GB/s, and registered / lazy (1: as fast).
 *
 *   bench/reg_cache [--backend UCX|LIBFABRIC] [--param k=v]... [--slices N]
 *                   [--slice_mib S] [--runs R] [--blocks B] [--block_kib K]
 *                   [--iters I] [--no-slices]
 * (defaults: UCX, 10000 slices of 1 MiB, 3 runs: a 10 GiB region; 64
 * blocks of 64 KiB, 500 transfers) */
#include <nxl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static const char *backend = "UCX";
static nxl_param_t params[8];
static size_t nparams;
static size_t nsl = 10000, slen = 1u << 20;
static int runs = 3;
static size_t nblk = 64, blen = 64u << 10;
static int iters = 500, slices_rows = 1;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void die(const char *what, nxl_agent_t *a)
{
    fprintf(stderr, "reg_cache: %s: %s\n", what, nxl_agent_last_error(a));
    exit(1);
}

static nxl_agent_t *agent(int cache)
{
    if (cache)
        unsetenv("NXL_REG_CACHE");
    else
        setenv("NXL_REG_CACHE", "0", 1);
    nxl_agent_config_t c;
    nxl_agent_config_init(&c);
    c.name = "reg_cache";
    nxl_agent_t *a;
    if (nxl_agent_create(&c, &a) != NXL_SUCCESS)
        die("agent", NULL);
    if (nxl_backend_create(a, backend, params, nparams, NULL) != NXL_SUCCESS)
        die(backend, a);
    unsetenv("NXL_REG_CACHE");
    return a;
}

static int cmp_d(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

/* one run of a row: its register and deregister times */
static void run(int row, unsigned char *r, double *treg, double *tdereg)
{
    nxl_agent_t *a = agent(row != 2);
    nxl_desc_t whole = {.addr = (uintptr_t)r, .len = nsl * slen};
    double t0 = now_ms();
    if (row < 2 && nxl_mem_register(a, NXL_DRAM, &whole, 1, NULL) != NXL_SUCCESS)
        die("register the region", a);
    for (size_t i = 0; row > 0 && i < nsl; i++) {
        nxl_desc_t d = {.addr = (uintptr_t)r + i * slen, .len = slen};
        if (nxl_mem_register(a, NXL_DRAM, &d, 1, NULL) != NXL_SUCCESS)
            die("register a slice", a);
    }
    double t1 = now_ms();
    for (size_t i = 0; row > 0 && i < nsl; i++) {
        nxl_desc_t d = {.addr = (uintptr_t)r + i * slen, .len = slen};
        if (nxl_mem_deregister(a, NXL_DRAM, &d, 1) != NXL_SUCCESS)
            die("deregister a slice", a);
    }
    if (row < 2 && nxl_mem_deregister(a, NXL_DRAM, &whole, 1) != NXL_SUCCESS)
        die("deregister the region", a);
    double t2 = now_ms();
    *treg = t1 - t0;
    *tdereg = t2 - t1;
    nxl_agent_destroy(a);
}

/* one transfer from src (blocks of blen) into dst, made, posted, waited
 * for, released: its time in us */
static double one_xfer(nxl_agent_t *a, int ltype, unsigned char *src, unsigned char *dst,
                       nxl_desc_t *ld, nxl_desc_t *rd)
{
    for (size_t i = 0; i < nblk; i++) {
        ld[i] = (nxl_desc_t){.addr = (uintptr_t)src + i * blen, .len = blen};
        rd[i] = (nxl_desc_t){.addr = (uintptr_t)dst + i * blen, .len = blen};
    }
    nxl_dlist_t l = {(nxl_mem_t)ltype, ld, nblk}, r = {NXL_DRAM, rd, nblk};
    double t0 = now_ms();
    nxl_xfer_t *x;
    nxl_future_t *f;
    if (nxl_xfer_create(a, NXL_WRITE, &l, &r, "reg_cache", NULL, &x) != NXL_SUCCESS)
        die("make a transfer", a);
    if (nxl_xfer_post(x, NULL, NULL, &f) != NXL_SUCCESS)
        die("post", a);
    if (nxl_future_wait(f, 20000) != NXL_SUCCESS)
        die("transfer", a);
    nxl_future_release(f);
    nxl_xfer_release(x);
    return (now_ms() - t0) * 1e3;
}

/* the transfer rows: a registered source and a source registered on
 * first use, of the same size, in alternate transfers (so that the
 * machine's drift is spread over both) */
static void xfer_rows(void)
{
    nxl_agent_t *a = agent(1);
    size_t len = nblk * blen;
    unsigned char *sr = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0),
                  *sl = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0),
                  *dst = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    nxl_desc_t *ld = calloc(nblk, sizeof(*ld)), *rd = calloc(nblk, sizeof(*rd));
    double *tr = calloc((size_t)iters, sizeof(*tr)), *tl = calloc((size_t)iters, sizeof(*tl));
    if (sr == MAP_FAILED || sl == MAP_FAILED || dst == MAP_FAILED || !ld || !rd || !tr || !tl) {
        fprintf(stderr, "reg_cache: out of memory\n");
        exit(1);
    }
    memset(sr, 7, len);
    memset(sl, 8, len);
    memset(dst, 0, len);
    nxl_desc_t dd = {.addr = (uintptr_t)dst, .len = len}, sd = {.addr = (uintptr_t)sr, .len = len};
    if (nxl_mem_register(a, NXL_DRAM, &dd, 1, NULL) != NXL_SUCCESS ||
        nxl_mem_register(a, NXL_DRAM, &sd, 1, NULL) != NXL_SUCCESS)
        die("register the target and the source", a);
    printf("# transfers within the agent: %zu blocks of %zu KiB (%zu KiB), each made with "
           "nxl_xfer_create, posted, waited for, released; the two sources alternate; median "
           "of %d\n", nblk, blen >> 10, len >> 10, iters);
    printf("%-26s %12s %12s %12s\n", "row", "us a xfer", "GB/s", "vs registered");
    int lazy = NXL_DRAM | NXL_DESC_AUTO_REGISTER;
    for (int k = 0; k < 20; k++) /* warm-up: the connection, the pages */
        one_xfer(a, NXL_DRAM, sr, dst, ld, rd);
    double first = one_xfer(a, lazy, sl, dst, ld, rd);
    for (int k = 0; k < iters; k++) {
        tr[k] = one_xfer(a, NXL_DRAM, sr, dst, ld, rd);
        tl[k] = one_xfer(a, lazy, sl, dst, ld, rd);
    }
    qsort(tr, (size_t)iters, sizeof(double), cmp_d);
    qsort(tl, (size_t)iters, sizeof(double), cmp_d);
    double reg = tr[iters / 2], after = tl[iters / 2];
    printf("%-26s %12.1f %12.2f %12s\n", "registered", reg, (double)len / reg / 1e3, "1.000");
    printf("%-26s %12.1f %12.2f %12.3f\n", "lazy, first (registers)", first,
           (double)len / first / 1e3, reg / first);
    printf("%-26s %12.1f %12.2f %12.3f\n", "lazy, after the first", after,
           (double)len / after / 1e3, reg / after);
    nxl_stats_t st = {.size = sizeof(st)};
    nxl_agent_stats(a, NULL, &st);
    printf("# lazy registrations: %llu registered, %llu lists reused them\n",
           (unsigned long long)st.autoreg_registered, (unsigned long long)st.autoreg_reused);
    nxl_agent_destroy(a);
    munmap(sr, len);
    munmap(sl, len);
    munmap(dst, len);
    free(ld);
    free(rd);
    free(tr);
    free(tl);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--backend") && v)
            backend = v, i++;
        else if (!strcmp(argv[i], "--param") && v && nparams < 8 && strchr(v, '=')) {
            char *k = strdup(v), *e = strchr(k, '=');
            *e = 0;
            params[nparams++] = (nxl_param_t){k, e + 1};
            i++;
        } else if (!strcmp(argv[i], "--slices") && v)
            nsl = strtoull(v, NULL, 0), i++;
        else if (!strcmp(argv[i], "--slice_mib") && v)
            slen = strtoull(v, NULL, 0) << 20, i++;
        else if (!strcmp(argv[i], "--runs") && v)
            runs = atoi(v), i++;
        else if (!strcmp(argv[i], "--blocks") && v)
            nblk = strtoull(v, NULL, 0), i++;
        else if (!strcmp(argv[i], "--block_kib") && v)
            blen = strtoull(v, NULL, 0) << 10, i++;
        else if (!strcmp(argv[i], "--iters") && v)
            iters = atoi(v), i++;
        else if (!strcmp(argv[i], "--no-slices"))
            slices_rows = 0;
        else {
            fprintf(stderr, "usage: %s [--backend NAME] [--param k=v]... [--slices N] "
                            "[--slice_mib S] [--runs R] [--blocks B] [--block_kib K] "
                            "[--iters I] [--no-slices]\n", argv[0]);
            return 2;
        }
    }
    if (!nsl || !slen || runs < 1 || runs > 100 || !nblk || !blen || iters < 1)
        return 2;
    if (!slices_rows) {
        xfer_rows();
        return 0;
    }
    size_t len = nsl * slen;
    unsigned char *r = mmap(NULL, len, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    static const char *const rows[] = {"whole (1 registration)", "cache (region + slices)",
                                       "no cache (slices)"};
    printf("# %s", backend);
    for (size_t i = 0; i < nparams; i++)
        printf(" %s=%s", params[i].key, params[i].value);
    printf(": %zu slices of %zu MiB of a %.1f GiB region (MAP_NORESERVE, untouched), median of "
           "%d runs\n", nsl, slen >> 20, (double)len / (1u << 30), runs);
    printf("%-26s %12s %12s %12s %14s\n", "row", "reg ms", "dereg ms", "total ms", "us a range");
    for (int row = 0; row < 3; row++) {
        double reg[100], dereg[100], tot[100];
        for (int k = 0; k < runs; k++) {
            run(row, r, &reg[k], &dereg[k]);
            tot[k] = reg[k] + dereg[k];
        }
        qsort(reg, (size_t)runs, sizeof(double), cmp_d);
        qsort(dereg, (size_t)runs, sizeof(double), cmp_d);
        qsort(tot, (size_t)runs, sizeof(double), cmp_d);
        double m = tot[runs / 2];
        printf("%-26s %12.2f %12.2f %12.2f %14.3f\n", rows[row], reg[runs / 2],
               dereg[runs / 2], m, row ? m * 1e3 / (double)nsl : m * 1e3);
    }
    munmap(r, len);
    xfer_rows();
    return 0;
}
