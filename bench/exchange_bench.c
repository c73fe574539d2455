/* exchange_bench — the cost of a metadata exchange, with and without
 * authentication: two agents in one process (own event bases, driven in
 * turn), N fetches each way, median and p99 per fetch.
 *
 *   bench/exchange_bench [N]      (default 2000) */
#include <nxl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int done;
static void cb(nxl_future_t *f, nxl_status_t st, void *arg)
{
    if (st != NXL_SUCCESS) {
        fprintf(stderr, "fetch failed: %s\n", nxl_future_error(f));
        exit(1);
    }
    done++;
}

static void run(const char *secret, int n)
{
    nxl_agent_config_t c;
    nxl_agent_t *a, *b;
    nxl_agent_config_init(&c);
    c.name = "A";
    c.auth_secret = secret;
    if (nxl_agent_create(&c, &a) != NXL_SUCCESS)
        exit(1);
    c.name = "B";
    c.listen_addr = "127.0.0.1";
    if (nxl_agent_create(&c, &b) != NXL_SUCCESS)
        exit(1);
    /* B holds 64 regions, as a KV cache would (a few KiB of metadata) */
    static char mem[64][4096];
    nxl_desc_t d[64];
    for (int i = 0; i < 64; i++)
        d[i] = (nxl_desc_t){.addr = (uintptr_t)mem[i], .len = sizeof(mem[i])};
    nxl_mem_register(b, NXL_DRAM, d, 64, NULL);
    double *t = malloc(sizeof(double) * (size_t)n);
    for (int i = -50; i < n; i++) {
        done = 0;
        double t0 = now_us();
        nxl_md_fetch(a, "B", "127.0.0.1", nxl_agent_listen_port(b), cb, NULL, NULL);
        while (!done) {
            nxl_agent_run_once(b, 0);
            nxl_agent_run_once(a, 0);
        }
        if (i >= 0)
            t[i] = now_us() - t0;
    }
    qsort(t, (size_t)n, sizeof(*t), cmp);
    printf("%-14s fetch: median %7.1f us  p99 %7.1f us  (%d fetches)\n",
           secret ? "authenticated" : "plain", t[n / 2], t[n * 99 / 100], n);
    free(t);
    nxl_agent_destroy(a);
    nxl_agent_destroy(b);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 2000;
    for (int r = 0; r < 3; r++) {
        run(NULL, n);
        run("a shared secret of the cluster", n);
    }
    return 0;
}
