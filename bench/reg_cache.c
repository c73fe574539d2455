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
 *   bench/reg_cache [--backend UCX|LIBFABRIC] [--param k=v]... [--slices N]
 *                   [--slice_mib S] [--runs R]
 * (defaults: UCX, 10000 slices of 1 MiB, 3 runs: a 10 GiB region) */
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
        else {
            fprintf(stderr, "usage: %s [--backend NAME] [--param k=v]... [--slices N] "
                            "[--slice_mib S] [--runs R]\n", argv[0]);
            return 2;
        }
    }
    if (!nsl || !slen || runs < 1 || runs > 100)
        return 2;
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
    return 0;
}
