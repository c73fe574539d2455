/* SPDX-License-Identifier: BSD-3-Clause */
/* ucx_malloc_ref — raw UCX on malloc'd memory: the reference of
 * bench/compare-ucx-malloc.
 *
 * Two processes (this program forks its target): each allocates its ring
 * with posix_memalign and registers it with ucp_mem_map (no ALLOCATE), as
 * nxlbench --mem_source malloc does; the initiator moves blocks of the ring
 * with a window of transfers in flight, slot i of the ring at offset
 * i x block on both sides (nxlbench's working set at batch 1), while the
 * target busy-polls its worker. One transfer is
 *
 *   put   ucp_put_nbx, then ucp_ep_flush_nbx: done when the flush is
 *         (the data is at the target)
 *   get   ucp_get_nbx: done when its callback runs (the data is here)
 *   tag   WRITE: ucp_tag_send_sync_nbx from the initiator into a receive
 *         the target posted on the slot (rendezvous above UCX's threshold);
 *         READ: the same from the target into receives the initiator posted
 *
 * Each row first runs a warm-up of at least --warmup transfers, takes its
 * rate, and then times as many transfers as that rate moves in --secs
 * (put, get: posting stops after --secs, whatever the rate).
 * Output, one line per size: "ROW op dir size window GB/s transfers seconds"
 * (GB/s = 1e9 B/s).
 *
 *   ucx_malloc_ref --op put|get|tag [--dir WRITE|READ] [--sizes 4096,65536]
 *                  [--window 16] [--secs 1] [--warmup 200] [--cpus 0,1]
 *
 * UCX_* environment variables apply (UCX_TLS, UCX_RNDV_THRESH, ...). */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#define MAXSIZES 32
#define TAG_DATA 0x100000000ull

static struct {
    const char *op;  /* put get tag */
    int read;        /* tag: the data flows target -> initiator */
    size_t sizes[MAXSIZES];
    int nsizes;
    int window;
    double secs;
    long warmup;
    int cpu_i, cpu_t;
} O = {.op = "put", .window = 16, .secs = 1.0, .warmup = 200, .cpu_i = 0, .cpu_t = 1};

static void die(const char *what, const char *why)
{
    fprintf(stderr, "ucx_malloc_ref: %s: %s\n", what, why);
    exit(1);
}

static void chk(ucs_status_t st, const char *what)
{
    if (st != UCS_OK)
        die(what, ucs_status_string(st));
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void pin(int cpu)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu % (n > 0 ? n : 1), &s);
    if (sched_setaffinity(0, sizeof(s), &s))
        fprintf(stderr, "ucx_malloc_ref: sched_setaffinity(%d): %s\n", cpu, strerror(errno));
}

/* ---- the control socket between the two processes: length-prefixed blobs */

static void xwrite(int fd, const void *p, size_t n)
{
    const char *b = p;
    while (n) {
        ssize_t k = write(fd, b, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            die("control socket write", strerror(errno));
        b += k, n -= (size_t)k;
    }
}

static void xread(int fd, void *p, size_t n)
{
    char *b = p;
    while (n) {
        ssize_t k = read(fd, b, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            die("control socket read", k ? strerror(errno) : "peer closed");
        b += k, n -= (size_t)k;
    }
}

static void send_blob(int fd, const void *p, uint64_t n)
{
    xwrite(fd, &n, sizeof(n));
    xwrite(fd, p, n);
}

static void *recv_blob(int fd, uint64_t *n)
{
    xread(fd, n, sizeof(*n));
    void *p = malloc(*n ? *n : 1);
    if (!p)
        die("malloc", "out of memory");
    xread(fd, p, *n);
    return p;
}

/* ---- UCX */

static ucp_context_h ctx;
static ucp_worker_h wrk;
static ucp_ep_h ep;
static ucp_mem_h memh;
static unsigned char *ring;
static size_t ring_len;

static void setup(int fd)
{
    ucp_config_t *cfg;
    chk(ucp_config_read(NULL, NULL, &cfg), "ucp_config_read");
    ucp_params_t p = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                      .features = UCP_FEATURE_RMA | UCP_FEATURE_TAG};
    chk(ucp_init(&p, cfg, &ctx), "ucp_init");
    ucp_config_release(cfg);
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    chk(ucp_worker_create(ctx, &wp, &wrk), "ucp_worker_create");
    ucp_address_t *a;
    size_t al;
    chk(ucp_worker_get_address(wrk, &a, &al), "ucp_worker_get_address");
    send_blob(fd, a, al);
    ucp_worker_release_address(wrk, a);
    uint64_t pl;
    void *peer = recv_blob(fd, &pl);
    ucp_ep_params_t ep_p = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS, .address = peer};
    chk(ucp_ep_create(wrk, &ep_p, &ep), "ucp_ep_create");
    free(peer);

    size_t max = 0;
    for (int i = 0; i < O.nsizes; i++)
        if (O.sizes[i] > max)
            max = O.sizes[i];
    ring_len = max * (size_t)O.window;
    void *r;
    if (posix_memalign(&r, 4096, ring_len))
        die("posix_memalign", "out of memory");
    ring = r;
    memset(ring, 0, ring_len);
    ucp_mem_map_params_t mp = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
        .address = ring,
        .length = ring_len,
    };
    chk(ucp_mem_map(ctx, &mp, &memh), "ucp_mem_map");
}

static void teardown(void)
{
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                             .flags = UCP_EP_CLOSE_FLAG_FORCE};
    void *r = ucp_ep_close_nbx(ep, &p);
    if (r && !UCS_PTR_IS_ERR(r)) {
        while (ucp_request_check_status(r) == UCS_INPROGRESS)
            ucp_worker_progress(wrk);
        ucp_request_free(r);
    }
    ucp_mem_unmap(ctx, memh);
    ucp_worker_destroy(wrk);
    ucp_cleanup(ctx);
    free(ring);
}

/* ---- one row: count transfers with `window` in flight */

static long posted, done;
static int failed;

static void cb_send(void *req, ucs_status_t st, void *arg)
{
    if (st != UCS_OK)
        failed = 1;
    done++;
    ucp_request_free(req);
}

static void cb_recv(void *req, ucs_status_t st, const ucp_tag_recv_info_t *i, void *arg)
{
    if (st != UCS_OK)
        failed = 1;
    done++;
    ucp_request_free(req);
}

static void count_now(void *r)
{
    if (UCS_PTR_IS_ERR(r))
        failed = 1;
    if (!UCS_PTR_IS_PTR(r))
        done++;
}

static void post_send_tag(size_t bs, long k)
{
    size_t off = (size_t)(k % O.window) * bs;
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_MEMH,
                             .cb.send = cb_send, .memh = memh};
    count_now(ucp_tag_send_sync_nbx(ep, ring + off, bs, TAG_DATA, &p));
}

static void post_recv_tag(size_t bs, long k)
{
    size_t off = (size_t)(k % O.window) * bs;
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_MEMH,
                             .cb.recv = cb_recv, .memh = memh};
    count_now(ucp_tag_recv_nbx(wrk, ring + off, bs, TAG_DATA, ~0ull, &p));
}

/* initiator, put/get: one transfer */
static void post_rma(size_t bs, long k, uint64_t raddr, ucp_rkey_h rk)
{
    size_t off = (size_t)(k % O.window) * bs;
    if (!strcmp(O.op, "put")) {
        ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_MEMH, .memh = memh};
        void *r = ucp_put_nbx(ep, ring + off, bs, raddr + off, rk, &p);
        if (UCS_PTR_IS_ERR(r))
            failed = 1;
        else if (r)
            ucp_request_free(r); /* the flush waits for it */
        ucp_request_param_t fp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK,
                                  .cb.send = cb_send};
        count_now(ucp_ep_flush_nbx(ep, &fp));
    } else {
        ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_MEMH,
                                 .cb.send = cb_send, .memh = memh};
        count_now(ucp_get_nbx(ep, ring + off, bs, raddr + off, rk, &p));
    }
}

/* drives `n` transfers of the active side: post(k) keeps `window` in flight */
typedef void (*post_fn)(size_t bs, long k);
static uint64_t g_raddr;
static ucp_rkey_h g_rk;
static void post_rma_g(size_t bs, long k) { post_rma(bs, k, g_raddr, g_rk); }

/* with a deadline (put, get: the initiator alone decides), posting stops
 * there and what was posted completes: a row stays near --secs when the
 * machine slows down after the warm-up; returns the transfers done */
static long drive(post_fn post, size_t bs, long n, double deadline)
{
    posted = done = 0;
    while (done < posted || (posted < n && !failed)) {
        while (posted < n && posted - done < O.window && !failed)
            post(bs, posted++);
        ucp_worker_progress(wrk);
        if (deadline > 0 && posted < n && !(posted & 63) && now_s() > deadline)
            n = posted;
        if (failed)
            break;
    }
    if (failed)
        die("transfer", "a request failed");
    return done;
}

/* ---- the two sides */

enum { CMD_ROW = 1, CMD_QUIT = 2 };
typedef struct {
    uint32_t cmd;
    uint64_t size, count;
} cmd_t;

/* the target: serves the initiator's rows, busy-polling its worker */
static void target(int fd)
{
    setup(fd);
    void *rk;
    size_t rl;
    chk(ucp_rkey_pack(ctx, memh, &rk, &rl), "ucp_rkey_pack");
    uint64_t a = (uintptr_t)ring;
    xwrite(fd, &a, sizeof(a));
    send_blob(fd, rk, rl);
    ucp_rkey_buffer_release(rk);
    for (;;) {
        /* busy polling while waiting for the next command */
        cmd_t c;
        int ready = 0;
        while (!ready) {
            for (int i = 0; i < 256; i++)
                ucp_worker_progress(wrk);
            ssize_t k = recv(fd, &c, sizeof(c), MSG_DONTWAIT | MSG_PEEK);
            if (k == (ssize_t)sizeof(c))
                ready = 1;
            else if (k == 0)
                die("control socket", "initiator gone");
        }
        xread(fd, &c, sizeof(c));
        if (c.cmd == CMD_QUIT)
            break;
        if (!strcmp(O.op, "tag")) {
            drive(O.read ? post_send_tag : post_recv_tag, c.size, (long)c.count, 0);
            char ok = 1;
            xwrite(fd, &ok, 1);
        }
    }
    teardown();
}

/* a row of up to *n transfers; *n becomes those done; returns seconds */
static double row(int fd, size_t bs, long *n)
{
    cmd_t c = {.cmd = CMD_ROW, .size = bs, .count = (uint64_t)*n};
    double t0 = now_s();
    xwrite(fd, &c, sizeof(c));
    if (!strcmp(O.op, "tag")) {
        drive(O.read ? post_recv_tag : post_send_tag, bs, *n, 0);
        char ok;
        xread(fd, &ok, 1); /* the target has all of it */
    } else {
        *n = drive(post_rma_g, bs, *n, t0 + O.secs);
    }
    return now_s() - t0;
}

static void initiator(int fd)
{
    setup(fd);
    xread(fd, &g_raddr, sizeof(g_raddr));
    uint64_t rl;
    void *rkb = recv_blob(fd, &rl);
    chk(ucp_ep_rkey_unpack(ep, rkb, &g_rk), "ucp_ep_rkey_unpack");
    free(rkb);
    const char *dir = !strcmp(O.op, "put") ? "WRITE" : !strcmp(O.op, "get") ? "READ"
                      : O.read ? "READ" : "WRITE";
    for (int i = 0; i < O.nsizes; i++) {
        size_t bs = O.sizes[i];
        /* warm-up of at least 16 MiB or --warmup transfers: gives the rate */
        long w = O.warmup;
        if ((double)w * bs < 16.0 * (1 << 20))
            w = (long)((16.0 * (1 << 20)) / bs);
        if (w < 2L * O.window)
            w = 2L * O.window;
        double tw = row(fd, bs, &w);
        long n = (long)(w / (tw > 1e-6 ? tw : 1e-6) * O.secs);
        if (n < 2L * O.window)
            n = 2L * O.window;
        if (strcmp(O.op, "tag"))
            n *= 4; /* put, get: the deadline ends the row */
        double t = row(fd, bs, &n);
        printf("ROW %s %s %zu %d %.4f %ld %.3f\n", O.op, dir, bs, O.window, (double)n * bs / t / 1e9,
               n, t);
        fflush(stdout);
    }
    cmd_t q = {.cmd = CMD_QUIT};
    xwrite(fd, &q, sizeof(q));
    ucp_rkey_destroy(g_rk);
    teardown();
}

static size_t parse_size(const char *s)
{
    char *e;
    unsigned long long v = strtoull(s, &e, 10);
    if (*e == 'K' || *e == 'k')
        v <<= 10, e++;
    else if (*e == 'M' || *e == 'm')
        v <<= 20, e++;
    if (e == s || (*e && *e != ','))
        die("--sizes", "not a list of sizes (4096,64K,1M)");
    return (size_t)v;
}

int main(int argc, char **argv)
{
    O.sizes[0] = 4096;
    O.nsizes = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: ucx_malloc_ref --op put|get|tag [--dir WRITE|READ] [--sizes 4096,64K,1M]\n"
                   "       [--window 16] [--secs 1] [--warmup 200] [--cpus I,T]\n");
            return 0;
        }
        if (!v)
            die(a, "needs a value");
        i++;
        if (!strcmp(a, "--op"))
            O.op = v;
        else if (!strcmp(a, "--dir"))
            O.read = !strcmp(v, "READ");
        else if (!strcmp(a, "--window"))
            O.window = atoi(v);
        else if (!strcmp(a, "--secs"))
            O.secs = atof(v);
        else if (!strcmp(a, "--warmup"))
            O.warmup = atol(v);
        else if (!strcmp(a, "--cpus")) {
            if (sscanf(v, "%d,%d", &O.cpu_i, &O.cpu_t) != 2)
                die("--cpus", "wants I,T");
        } else if (!strcmp(a, "--sizes")) {
            O.nsizes = 0;
            for (const char *s = v; *s && O.nsizes < MAXSIZES;) {
                O.sizes[O.nsizes++] = parse_size(s);
                s = strchr(s, ',');
                if (!s)
                    break;
                s++;
            }
        } else
            die(a, "unknown option");
    }
    if (strcmp(O.op, "put") && strcmp(O.op, "get") && strcmp(O.op, "tag"))
        die("--op", "put, get or tag");
    if (O.window < 1 || O.secs <= 0)
        die("--window/--secs", "must be positive");
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
        die("socketpair", strerror(errno));
    pid_t pid = fork();
    if (pid < 0)
        die("fork", strerror(errno));
    if (pid == 0) {
        close(sv[0]);
        pin(O.cpu_t);
        target(sv[1]);
        _exit(0);
    }
    close(sv[1]);
    pin(O.cpu_i);
    initiator(sv[0]);
    int ws;
    waitpid(pid, &ws, 0);
    return WIFEXITED(ws) && WEXITSTATUS(ws) == 0 ? 0 : 1;
}
