/* SPDX-License-Identifier: BSD-3-Clause */
/* nxlbench: clock, data patterns, agents, buffers, and the sweep of rows. */
#include "nxlbench.h"

#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

run_t RUN;
char transports_desc[512];
size_t posix_footprint;
long posix_nfiles;
const char *posix_where;
long long posix_thp;
bool buf_huge;

void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "nxlbench: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(2);
}

void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(RUN.err, sizeof(RUN.err), fmt, ap);
    va_end(ap);
    RUN.failed = true;
}

uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void pat_fill(unsigned char *base, size_t off, size_t len, uint64_t seed)
{
    size_t o = off, end = off + len;
    while (o < end && (o & 7))
        base[o] = pat_byte(seed, o), o++;
    for (; o + 8 <= end; o += 8) {
        uint64_t w = mix64(seed * 0x100000001B3ull + (o >> 3));
        memcpy(base + o, &w, 8);
    }
    for (; o < end; o++)
        base[o] = pat_byte(seed, o);
}

/* @return the first wrong offset, or -1 */
long long pat_check(const unsigned char *base, size_t off, size_t len, uint64_t seed)
{
    size_t o = off, end = off + len;
    for (; o < end && (o & 7); o++)
        if (base[o] != pat_byte(seed, o))
            return (long long)o;
    for (; o + 8 <= end; o += 8) {
        uint64_t w = mix64(seed * 0x100000001B3ull + (o >> 3)), v;
        memcpy(&v, base + o, 8);
        if (v != w)
            for (size_t k = 0; k < 8; k++)
                if (base[o + k] != pat_byte(seed, o + k))
                    return (long long)(o + k);
    }
    for (; o < end; o++)
        if (base[o] != pat_byte(seed, o))
            return (long long)o;
    return -1;
}

void pin_cpu(int which)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(which % n, &s);
    if (sched_setaffinity(0, sizeof(s), &s))
        fprintf(stderr, "nxlbench: sched_setaffinity(CPU %ld): %s\n", which % n, strerror(errno));
}

void split_hostport(const char *hp, char *host, size_t cap, uint16_t *port)
{
    const char *c = strrchr(hp, ':');
    if (!c || c == hp || (size_t)(c - hp) >= cap)
        die("'%s': expected HOST:PORT", hp);
    memcpy(host, hp, (size_t)(c - hp));
    host[c - hp] = 0;
    long p = strtol(c + 1, NULL, 10);
    if (p < 0 || p > 65535)
        die("'%s': bad port", hp);
    *port = (uint16_t)p;
}

void log_cb(nxl_log_level_t lvl, const char *msg, void *arg)
{
    const char *role = arg;
    const char *p = strstr(msg, " is up: ");
    if (!strncmp(msg, "transport ", 10) && p) {
        snprintf(transports_desc, sizeof(transports_desc), "%s", p + 8);
        return;
    }
    if (lvl <= NXL_LOG_WARN || getenv("NXLBENCH_VERBOSE"))
        fprintf(stderr, "nxlbench %s: [nxl] %s\n", role, msg);
}

nxl_agent_t *make_agent(const char *name, const char *host, uint16_t port, const char *role)
{
    nxl_agent_config_t c;
    nxl_agent_config_init(&c);
    c.name = name;
    c.listen_addr = O.etcd ? NULL : host;
    c.listen_port = port;
    c.etcd_endpoints = O.etcd;
    c.busy_poll_us = (unsigned)O.busy_poll_us;
    c.threaded = O.threads > 0 && !strcmp(role, "initiator");
    c.log_level = NXL_LOG_INFO;
    c.log_cb = log_cb;
    c.log_arg = (void *)role;
    loop_config(&c);
    nxl_agent_t *a;
    if (nxl_agent_create(&c, &a) != NXL_SUCCESS)
        die("%s: nxl_agent_create: %s", role, nxl_agent_last_error(NULL));
    loop_attach(a);
    if (nxl_backend_create(a, O.backend, O.bparams, O.nbparams, NULL) != NXL_SUCCESS)
        die("%s: nxl_backend_create(%s): %s", role, O.backend, nxl_agent_last_error(a));
    return a;
}

nxl_agent_t *make_local_agent(const char *name, nxl_log_cb log, const char *role)
{
    nxl_agent_config_t c;
    nxl_agent_config_init(&c);
    c.name = name;
    c.busy_poll_us = (unsigned)O.busy_poll_us;
    c.log_level = NXL_LOG_INFO;
    c.log_cb = log;
    c.log_arg = (void *)role;
    loop_config(&c);
    nxl_agent_t *a;
    if (nxl_agent_create(&c, &a) != NXL_SUCCESS)
        die("nxl_agent_create: %s", nxl_agent_last_error(NULL));
    loop_attach(a);
    return a;
}

bool buf_alloc(nxl_agent_t *a, buf_t *b, size_t len, bool use_nxl)
{
    b->len = len;
    b->nxl = use_nxl;
    if (use_nxl) {
        void *p;
        if (nxl_mem_alloc(a, NXL_DRAM, len, 0, &p) != NXL_SUCCESS)
            return false;
        b->p = p;
        memset(b->p, 0, len); /* touch it, as malloc'd memory is */
        return true;
    }
    void *p;
    /* a huge page backs only a whole, aligned 2 MiB: round up, or a ring
     * smaller than 2 MiB (16 x 64 KiB) stays on plain pages */
    size_t alen = buf_huge ? (len + 2 * MiB - 1) / (2 * MiB) * (2 * MiB) : len;
    if (posix_memalign(&p, buf_huge ? 2 * MiB : 4096, alen))
        return false;
    b->p = p;
    if (buf_huge)
        madvise(p, alen, MADV_HUGEPAGE); /* a hint: where THP is off, plain pages */
    memset(b->p, 0, alen);
    nxl_desc_t d = {.addr = (uintptr_t)b->p, .len = len};
    if (nxl_mem_register(a, NXL_DRAM, &d, 1, NULL) != NXL_SUCCESS) {
        free(b->p);
        b->p = NULL;
        return false;
    }
    return true;
}

/* bytes of [p, p + len) that sit on transparent huge pages, from
 * /proc/self/smaps (the mappings that overlap it; -1 where unreadable) */
long long thp_bytes(const void *p, size_t len)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    char line[512];
    bool in = false;
    long long sum = 0;
    uintptr_t lo = (uintptr_t)p, hi = lo + len;
    while (fgets(line, sizeof(line), f)) {
        unsigned long a, b;
        long long kb;
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2)
            in = a < hi && b > lo;
        else if (in && sscanf(line, "AnonHugePages: %lld kB", &kb) == 1)
            sum += kb * 1024;
    }
    fclose(f);
    return sum > (long long)len ? (long long)len : sum;
}

void buf_free(nxl_agent_t *a, buf_t *b)
{
    if (!b->p)
        return;
    if (b->nxl) {
        nxl_mem_free(a, b->p);
    } else {
        nxl_desc_t d = {.addr = (uintptr_t)b->p, .len = b->len};
        nxl_mem_deregister(a, NXL_DRAM, &d, 1);
        free(b->p);
    }
    b->p = NULL;
}

void usage_now(double *cpu_s, long *nvcsw, long *nivcsw)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    *cpu_s = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
             ru.ru_stime.tv_usec / 1e6;
    *nvcsw = ru.ru_nvcsw;
    *nivcsw = ru.ru_nivcsw;
}

static uint64_t seed_counter = 1;

uint64_t next_seed(void)
{
    return (uint64_t)getpid() * 1000 + seed_counter++;
}

/* One reactor turn of the initiator; a threaded one runs on its own
 * thread: sleep a millisecond (its callbacks update what the caller polls,
 * and take their own timings: a 1 ms poll here only ends a row later, and
 * leaves the cores to the reactor threads). */
void agent_turn(int timeout_ms)
{
    if (!O.threads) {
        loop_turn(RUN.a, timeout_ms);
        return;
    }
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
}

void run_until(long *counter, long target, int stall_s)
{
    uint64_t last = now_ns();
    long seen = *counter;
    while (*counter < target && !RUN.failed) {
        agent_turn(1000);
        if (*counter != seen) {
            seen = *counter;
            last = now_ns();
        } else if (now_ns() - last > (uint64_t)stall_s * 1000000000u) {
            fail("no transfer completed in %d s (%ld of %ld done)", stall_s, *counter, target);
        }
    }
}

long row_iters(size_t bytes_per_iter, long *warm)
{
    long it = O.num_iter;
    if (bytes_per_iter && (double)it * bytes_per_iter > (double)O.row_bytes) {
        it = (long)(O.row_bytes / bytes_per_iter);
        if (it < 8)
            it = 8;
        if (it > O.num_iter)
            it = O.num_iter;
    }
    long w = O.warmup_iter;
    if (w > it / 4 + 1 && it < O.num_iter)
        w = it / 4 + 1;
    *warm = w;
    return it;
}

void size_list(size_t *v, size_t *nv)
{
    *nv = 0;
    if (O.nsizes) {
        memcpy(v, O.sizes, O.nsizes * sizeof(*v));
        *nv = O.nsizes;
        return;
    }
    for (size_t b = O.start_bs; b <= O.max_bs && *nv < 64; b *= 2)
        v[(*nv)++] = b;
}

size_t need_bytes(void)
{
    size_t v[64], nv, need = 4096;
    size_list(v, &nv);
    for (size_t i = 0; i < nv; i++) {
        size_t b = v[i];
        size_t m = O.mode == M_BW ? b * O.max_batch * (size_t)O.depth
                   : O.mode == M_DESC ? b * O.max_batch * (size_t)(O.threads > 1 ? O.threads : 1)
                   : O.mode == M_LAT  ? 2 * b
                                      : 4096;
        if (m > need)
            need = m;
    }
    return need;
}

int sweep_rows(size_t *v, size_t *nv)
{
    size_list(v, nv);
    int nrows = 0;
    for (size_t n = O.start_batch; n <= O.max_batch; n *= 2)
        nrows += (int)*nv;
    return nrows;
}

pid_t fork_piped(int p[2])
{
    if (pipe(p) < 0)
        die("pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    close(p[pid == 0 ? 0 : 1]);
    return pid;
}

size_t need_fits(const char *head, const char *tail, const char *note)
{
    size_t need = need_bytes();
    if (need > O.total_buf)
        die("%s %zu bytes%s but --total_buffer_size is %zu%s", head, need, tail, O.total_buf, note);
    return need;
}

void run_rows(void (*row)(size_t bs, size_t n))
{
    size_t v[64], nv;
    int nrows = sweep_rows(v, &nv), k = 0;
    for (size_t n = O.start_batch; n <= O.max_batch; n *= 2)
        for (size_t i = 0; i < nv; i++) {
            char what[96];
            snprintf(what, sizeof(what), "block %zu batch %zu", v[i], n);
            progress(k, nrows, what);
            row(v[i], n);
            progress(++k, nrows, what);
        }
}

void progress(int i, int n, const char *what)
{
    if (O.quiet)
        return;
    double el = (now_ns() - RUN.t_start) / 1e9;
    if (isatty(2))
        fprintf(stderr, "\r\033[Knxlbench: %d/%d %s (%.0f s)%s", i, n, what, el,
                i == n ? "\n" : "");
    else if (el > 2 && i < n)
        fprintf(stderr, "nxlbench: %d/%d %s (%.0f s)\n", i, n, what, el);
}
