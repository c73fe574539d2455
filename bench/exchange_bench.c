/* SPDX-License-Identifier: BSD-3-Clause */
/* exchange_bench — the cost of a metadata exchange: plain, authenticated
 * (HMAC), over TLS, and over TLS with authentication. Two agents in one
 * process (own event bases, driven in turn), N fetches, each on a new
 * connection (a new TLS handshake each), median and p99 per fetch. The TLS
 * certificates are made with the openssl command in a temporary folder
 * (without it, the TLS rows are skipped).
 *
 *   bench/exchange_bench [N]      (default 2000) */
#include <nxl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char tls_dir[64]; /* "": no TLS rows */

static char *tls_file(const char *f)
{
    static char p[3][128];
    static int i;
    i = (i + 1) % 3;
    snprintf(p[i], sizeof(p[i]), "%s/%s", tls_dir, f);
    return p[i];
}

static void tls_setup(void)
{
    snprintf(tls_dir, sizeof(tls_dir), "/tmp/nxl-xbench-XXXXXX");
    char cmd[1024];
    if (!mkdtemp(tls_dir) ||
        (snprintf(cmd, sizeof(cmd),
                  "cd %s && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
                  "-keyout ca.key -out ca.pem -days 2 -subj /CN=ca && openssl req -newkey ec "
                  "-pkeyopt ec_paramgen_curve:P-256 -nodes -keyout a.key -out a.csr -subj /CN=a "
                  "&& openssl x509 -req -in a.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out "
                  "a.pem -days 2",
                  tls_dir),
         system(cmd))) {
        fprintf(stderr, "exchange_bench: no certificates (openssl), TLS rows skipped\n");
        tls_dir[0] = 0;
    }
}

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

static void run(const char *label, const char *secret, int tls, int n)
{
    nxl_agent_config_t c;
    nxl_agent_t *a, *b;
    if (tls && !tls_dir[0])
        return;
    nxl_agent_config_init(&c);
    c.name = "A";
    c.auth_secret = secret;
    if (tls) {
        c.tls_cert_file = strdup(tls_file("a.pem"));
        c.tls_key_file = strdup(tls_file("a.key"));
        c.tls_ca_file = strdup(tls_file("ca.pem"));
    }
    if (nxl_agent_create(&c, &a) != NXL_SUCCESS)
        exit(1);
    c.name = "B";
    c.listen_addr = "127.0.0.1";
    if (nxl_agent_create(&c, &b) != NXL_SUCCESS) {
        fprintf(stderr, "%s\n", nxl_agent_last_error(NULL));
        exit(1);
    }
    free((void *)c.tls_cert_file);
    free((void *)c.tls_key_file);
    free((void *)c.tls_ca_file);
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
    printf("%-14s fetch: median %7.1f us  p99 %7.1f us  (%d fetches)\n", label, t[n / 2],
           t[n * 99 / 100], n);
    free(t);
    nxl_agent_destroy(a);
    nxl_agent_destroy(b);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 2000;
    const char *sec = "a shared secret of the cluster";
    tls_setup();
    for (int r = 0; r < 3; r++) {
        run("plain", NULL, 0, n);
        run("authenticated", sec, 0, n);
        run("tls", NULL, 1, n);
        run("tls+auth", sec, 1, n);
    }
    if (tls_dir[0]) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", tls_dir);
        if (system(cmd))
            return 1;
    }
    return 0;
}
