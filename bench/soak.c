/* SPDX-License-Identifier: BSD-3-Clause */
/* soak — a long run of two agents in two processes, watching for leaks.
 *
 *   bench/soak [--transfers N] [--restart_s S] [--window W] [--backend UCX|LIBFABRIC]
 *              [--param key=value ...] [--csv FILE] [--sample_ms MS] [--warmup F]
 *              [--settle_ms MS]
 *
 * The initiator "I" (this process) keeps W slots busy with transfers into
 * and out of a target "T" (a child process, this program with --target):
 * mixed sizes (64 B, 4 KiB, 64 KiB, 1 MiB), each slot cycling through
 *   WRITE + notification  the target checks every byte when it arrives,
 *   WRITE                 no notification, then
 *   READ back             of what that WRITE put there, checked here,
 *   READ                  of a fixed pattern of the target's, checked here;
 * one post in 16 through a transfer made for it and released after it
 * (nxl_xfer_create), the others re-posting transfers made once per target.
 * Every S seconds the target is replaced: in turn asked to quit once its
 * slots drained, or killed with SIGKILL with transfers in flight; the
 * initiator then forgets it, lets the transport run --settle_ms (default 3000:
 * UCX let a peer go 1.2-1.9 s after it left, here, with the 1 s keepalive
 * of then; with 10 s and killed peers watched by their pidfd, 500 ms kept
 * RSS and fds flat over 22 replacements), starts a new target and loads
 * its metadata again.
 *
 * Every MS ms a sample: seconds, transfers completed, the initiator's RSS
 * (KiB), its open fds, remote agents known (nxl_agent_stats peers_known),
 * the target's RSS, restarts so far — to FILE as CSV and, every 10th, to
 * standard output. At the end a summary, and the exit status says whether
 *   - every callback ran exactly once (posts == callbacks, none twice),
 *   - no byte was wrong (the target's checks and the READs here),
 *   - failures were only peer losses around kills (REMOTE_DISCONNECT),
 *   - RSS grew by at most 1 MiB from the end of the warm-up (the first F
 *     of the transfers, default 0.1) to the end, measured with no target,
 *   - open fds and known peers are back to their level before the first
 *     target once the last one is gone.
 * UCX's endpoints are not visible to an application: each known peer holds
 * one per transport, and over TCP (--param tls=tcp) each is a socket, so
 * the fd count follows them.
 *
 * Not part of make check: it runs for minutes. Run it niced on a shared
 * machine. */
#include <nxl.h>

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SLOT (1u << 20)     /* a slot's bytes here; the target has two per slot */
#define RPAT (16u << 20)    /* the target's fixed pattern, after the slots */
#define TSLOTS ((size_t)MAXW * 2 * SLOT)
#define MAXW 64

static const size_t SIZES[] = {64, 4096, 65536, 1u << 20};
#define NSIZES 4

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* the 8 bytes at offset 8*w of pattern seed: any subrange can be checked alone */
static inline uint64_t word(uint64_t seed, uint64_t w)
{
    uint64_t x = (seed * 0x9e3779b97f4a7c15ull) ^ w;
    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9ull;
    return x ^ (x >> 32);
}

static inline unsigned char pat(uint64_t seed, uint64_t off)
{
    return (unsigned char)(word(seed, off >> 3) >> (8 * (off & 7)));
}

/* offsets are multiples of 8 here and lengths too: a word at a time */
static void fill(unsigned char *b, size_t len, uint64_t seed, uint64_t off)
{
    size_t i = 0;
    if (!(off & 7))
        for (; i + 8 <= len; i += 8) {
            uint64_t v = word(seed, (off + i) >> 3), le = 0;
            for (int k = 0; k < 8; k++)
                le |= (uint64_t)(unsigned char)(v >> (8 * k)) << (8 * k);
            memcpy(b + i, &le, 8);
        }
    for (; i < len; i++)
        b[i] = pat(seed, off + i);
}

static long check(const unsigned char *b, size_t len, uint64_t seed, uint64_t off)
{
    size_t i = 0;
    if (!(off & 7))
        for (; i + 8 <= len; i += 8) {
            uint64_t v = word(seed, (off + i) >> 3), got;
            memcpy(&got, b + i, 8);
            if (got != v)
                break;
        }
    for (; i < len; i++)
        if (b[i] != pat(seed, off + i))
            return (long)i;
    return -1;
}

static const char *backend = "UCX";
static nxl_param_t params[8];
static size_t nparams;

static nxl_agent_t *agent(const char *name, bool listen)
{
    nxl_agent_config_t c;
    nxl_agent_config_init(&c);
    c.name = name;
    c.listen_addr = listen ? "127.0.0.1" : NULL;
    nxl_agent_t *a;
    if (nxl_agent_create(&c, &a) != NXL_SUCCESS) {
        fprintf(stderr, "soak: agent %s: %s\n", name, nxl_agent_last_error(NULL));
        exit(2);
    }
    if (nxl_backend_create(a, backend, params, nparams, NULL) != NXL_SUCCESS) {
        fprintf(stderr, "soak: %s: %s\n", backend, nxl_agent_last_error(a));
        exit(2);
    }
    return a;
}

/* ------------------------------------------------------------ the target */

static struct {
    nxl_agent_t *a;
    unsigned char *buf;
    int quit;
    uint64_t checked, bad;
    uint64_t last[MAXW]; /* per slot, the last seed checked: seeds only grow */
} T;

static void t_notif(nxl_agent_t *a, const char *from, const void *msg, size_t len, void *arg)
{
    char m[128];
    snprintf(m, sizeof(m), "%.*s", (int)(len < 127 ? len : 127), (const char *)msg);
    unsigned long long seed, off, n;
    if (sscanf(m, "v %llu %llu %llu", &seed, &off, &n) == 3) {
        long bad = off + n <= TSLOTS ? check(T.buf + off, n, seed, 0) : 0;
        size_t si = (size_t)(off / (2 * SLOT)) % MAXW;
        bool again = seed <= T.last[si];
        T.last[si] = seed > T.last[si] ? seed : T.last[si];
        T.checked++;
        if (bad >= 0 || again) {
            T.bad++;
            char out[200];
            snprintf(out, sizeof(out), "bad seed %llu off %llu len %llu byte %ld%s (0x%02x, "
                     "want 0x%02x; %llu checked)", seed, off, n, bad,
                     again ? ", a notification seen again" : "", bad >= 0 ? T.buf[off + bad] : 0,
                     bad >= 0 ? pat(seed, (uint64_t)bad) : 0, (unsigned long long)T.checked);
            nxl_notif_send(a, "I", out, strlen(out), NULL, NULL, NULL);
        }
        /* the initiator writes there again only once told the check is done */
        char done[64];
        snprintf(done, sizeof(done), "done %zu %llu", si, seed);
        nxl_notif_send(a, "I", done, strlen(done), NULL, NULL, NULL);
    } else if (!strcmp(m, "quit")) {
        T.quit = 1;
    }
}

static int target_main(void)
{
    T.a = agent("T", true);
    T.buf = calloc(1, TSLOTS + RPAT); /* pages of slots never written stay untouched */
    fill(T.buf + TSLOTS, RPAT, 7, 0);
    nxl_desc_t d = {.addr = (uintptr_t)T.buf, .len = TSLOTS + RPAT};
    if (nxl_mem_register(T.a, NXL_DRAM, &d, 1, NULL) != NXL_SUCCESS) {
        fprintf(stderr, "soak target: %s\n", nxl_agent_last_error(T.a));
        return 2;
    }
    nxl_agent_on_notif(T.a, t_notif, NULL);
    printf("%u %llu\n", nxl_agent_listen_port(T.a), (unsigned long long)(uintptr_t)T.buf);
    fflush(stdout);
    while (!T.quit && getppid() != 1)
        nxl_agent_run_once(T.a, 200);
    nxl_agent_destroy(T.a);
    free(T.buf);
    return T.bad ? 1 : 0;
}

/* ---------------------------------------------------------- the initiator */

typedef struct slot {
    int k;                  /* which step of the cycle is next */
    int inflight;
    size_t wlen;            /* the last WRITE without notification */
    uint64_t wseed;
    nxl_xfer_t *x[4][NSIZES]; /* per step and size, made once per target */
    nxl_xfer_t *once;       /* made for one post */
    size_t len;             /* of the post in flight */
    uint64_t seed;
    int step;
    uint64_t await;         /* the checked WRITE the target has not confirmed yet */
} slot_t;

static struct {
    nxl_agent_t *a;
    unsigned char *buf;     /* W slots */
    pid_t pid;
    uint16_t port;
    uintptr_t tbuf;
    int window;
    slot_t s[MAXW];
    uint64_t posted, completed, dup, ok, failed_lost, failed_other, bad_read, bad_target;
    uint64_t next_seed, confirmed;
    bool killing;
} I;

static long rss_kib(pid_t pid)
{
    char p[64];
    snprintf(p, sizeof(p), "/proc/%d/statm", (int)(pid ? pid : getpid()));
    FILE *f = fopen(p, "r");
    long pages = 0, res = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &res) != 2)
            res = 0;
        fclose(f);
    }
    return res * (sysconf(_SC_PAGESIZE) / 1024);
}

/* the fds, named, to standard error (when they did not come back) */
static void list_fds(const char *when)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    fprintf(stderr, "soak: open fds %s:", when);
    while (d && (e = readdir(d))) {
        char p[300], l[256] = "";
        snprintf(p, sizeof(p), "/proc/self/fd/%s", e->d_name);
        ssize_t n = e->d_name[0] != '.' ? readlink(p, l, sizeof(l) - 1) : -1;
        if (n > 0) {
            l[n] = 0;
            fprintf(stderr, " %s=%s", e->d_name, l);
        }
    }
    fprintf(stderr, "\n");
    if (d)
        closedir(d);
}

static int nfds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n - 1; /* the directory itself */
}

static uint64_t peers(void)
{
    nxl_stats_t s = {.size = sizeof(s)};
    nxl_agent_stats(I.a, NULL, &s);
    return s.peers_known;
}

static void i_notif(nxl_agent_t *a, const char *from, const void *msg, size_t len, void *arg)
{
    char m[64];
    snprintf(m, sizeof(m), "%.*s", (int)(len < 63 ? len : 63), (const char *)msg);
    size_t si;
    unsigned long long seed;
    if (sscanf(m, "done %zu %llu", &si, &seed) == 2) {
        if (si < MAXW && I.s[si].await == seed)
            I.s[si].await = 0;
        I.confirmed++;
    } else if (len >= 3 && !memcmp(msg, "bad", 3)) {
        I.bad_target++;
        fprintf(stderr, "soak: target: %.*s\n", (int)len, (const char *)msg);
    }
}

static void done_cb(nxl_future_t *f, nxl_status_t st, void *arg)
{
    slot_t *s = arg;
    if (!s->inflight) {
        I.dup++;
        fprintf(stderr, "soak: a callback ran twice (slot %ld)\n", (long)(s - I.s));
        return;
    }
    s->inflight = 0;
    I.completed++;
    if (st == NXL_SUCCESS) {
        I.ok++;
        const unsigned char *lb = I.buf + (size_t)(s - I.s) * SLOT;
        long bad = -1;
        if (s->step == 2) /* READ back of the plain WRITE */
            bad = check(lb, s->len, s->seed, 0);
        else if (s->step == 3) /* READ of the target's pattern */
            bad = check(lb, s->len, 7, (uint64_t)(s - I.s) * 4096);
        if (bad >= 0) {
            I.bad_read++;
            fprintf(stderr, "soak: READ (step %d) of %zu bytes: byte %ld wrong\n", s->step,
                    s->len, bad);
        }
        if (s->step == 1) {
            s->wlen = s->len;
            s->wseed = s->seed;
        }
    } else if (st == NXL_ERR_REMOTE_DISCONNECT || (st == NXL_ERR_CANCELED && I.killing)) {
        I.failed_lost++;
        if (s->step == 0)
            s->await = 0;
        if (s->step == 1)
            s->wlen = 0;
    } else {
        I.failed_other++;
        if (I.failed_other < 10)
            fprintf(stderr, "soak: transfer failed: %s: %s\n", nxl_status_name(st),
                    nxl_future_error(f));
        if (s->step == 1)
            s->wlen = 0;
        if (s->step == 0)
            s->await = 0;
    }
    if (s->once) {
        nxl_xfer_release(s->once);
        s->once = NULL;
    }
}

static nxl_xfer_t *make_one(int si, int step, size_t len, bool notif)
{
    /* the checked WRITE and the plain one into different places: the target
     * checks the first when its notification is delivered, which may come
     * after the second's data landed */
    uintptr_t roff = step == 3   ? TSLOTS + (uintptr_t)si * 4096
                     : step == 0 ? (uintptr_t)si * 2 * SLOT
                                 : (uintptr_t)si * 2 * SLOT + SLOT;
    nxl_desc_t ld = {.addr = (uintptr_t)I.buf + (uintptr_t)si * SLOT, .len = len};
    nxl_desc_t rd = {.addr = I.tbuf + roff, .len = len};
    nxl_dlist_t l = {NXL_DRAM, &ld, 1}, r = {NXL_DRAM, &rd, 1};
    nxl_xfer_opts_t o;
    nxl_xfer_opts_init(&o);
    if (notif) {
        o.notif = "v";
        o.notif_len = 1;
    }
    nxl_xfer_t *x;
    nxl_status_t st =
        nxl_xfer_create(I.a, step >= 2 ? NXL_READ : NXL_WRITE, &l, &r, "T", &o, &x);
    if (st != NXL_SUCCESS) {
        fprintf(stderr, "soak: xfer_create: %s\n", nxl_agent_last_error(I.a));
        exit(2);
    }
    return x;
}

static void post(int si)
{
    slot_t *s = &I.s[si];
    unsigned r = (unsigned)(I.next_seed * 2654435761u >> 7);
    int step = s->k++ & 3;
    /* mostly small: 64 B 1/2, 4 KiB 1/4, 64 KiB 3/16, 1 MiB 1/16 */
    size_t zi = r % 16 < 8 ? 0 : r % 16 < 12 ? 1 : r % 16 < 15 ? 2 : 3;
    size_t len = SIZES[zi];
    if (step == 2) {
        if (!s->wlen) /* the plain WRITE failed: nothing to read back */
            step = 3;
        else
            len = s->wlen;
        for (zi = 0; SIZES[zi] != len; zi++)
            ;
    }
    uint64_t seed = ++I.next_seed;
    unsigned char *lb = I.buf + (size_t)si * SLOT;
    nxl_xfer_t *x;
    bool once = r % 16 == 5;
    if (once)
        x = s->once = make_one(si, step, len, step == 0);
    else
        x = s->x[step][zi];
    if (step == 0) {
        fill(lb, len, seed, 0);
        char n[96];
        snprintf(n, sizeof(n), "v %llu %llu %zu", (unsigned long long)seed,
                 (unsigned long long)si * 2 * SLOT, len);
        nxl_xfer_set_notif(x, n, strlen(n));
    } else if (step == 1) {
        fill(lb, len, seed, 0);
    } else {
        memset(lb, 0, len);
        if (step == 2)
            seed = s->wseed;
    }
    s->len = len;
    s->seed = seed;
    s->step = step;
    s->inflight = 1;
    if (step == 0)
        s->await = seed;
    nxl_status_t st = nxl_xfer_post(x, done_cb, s, NULL);
    if (st != NXL_SUCCESS) {
        s->inflight = 0;
        if (once) {
            nxl_xfer_release(s->once);
            s->once = NULL;
        }
        if (step == 0)
            s->await = 0;
        if (st == NXL_ERR_REMOTE_DISCONNECT) {
            I.failed_lost++;
            return;
        }
        fprintf(stderr, "soak: post: %s: %s\n", nxl_status_name(st), nxl_agent_last_error(I.a));
        exit(2);
    }
    I.posted++;
}

static char *self_path;
static uint64_t settle_ms = 3000;

static void spawn(void)
{
    int p[2];
    if (pipe(p)) {
        perror("pipe");
        exit(2);
    }
    I.pid = fork();
    if (I.pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        char *argv[24];
        int n = 0;
        argv[n++] = self_path;
        argv[n++] = "--target";
        argv[n++] = "--backend";
        argv[n++] = (char *)backend;
        static char kv[8][256];
        for (size_t i = 0; i < nparams && n < 20; i++) {
            snprintf(kv[i], sizeof(kv[i]), "%s=%s", params[i].key, params[i].value);
            argv[n++] = "--param";
            argv[n++] = kv[i];
        }
        argv[n] = NULL;
        execv(self_path, argv);
        _exit(127);
    }
    close(p[1]);
    FILE *f = fdopen(p[0], "r");
    unsigned port;
    unsigned long long tb;
    if (!f || fscanf(f, "%u %llu", &port, &tb) != 2) {
        fprintf(stderr, "soak: the target did not start\n");
        exit(2);
    }
    fclose(f);
    I.port = (uint16_t)port;
    I.tbuf = (uintptr_t)tb;
    nxl_future_t *fu;
    if (nxl_md_fetch(I.a, "T", "127.0.0.1", I.port, NULL, NULL, &fu) != NXL_SUCCESS ||
        nxl_future_wait(fu, 10000) != NXL_SUCCESS) {
        fprintf(stderr, "soak: fetch: %s\n", nxl_agent_last_error(I.a));
        exit(2);
    }
    nxl_future_release(fu);
    if (nxl_md_send(I.a, "127.0.0.1", I.port, NULL, NULL, &fu) != NXL_SUCCESS ||
        nxl_future_wait(fu, 10000) != NXL_SUCCESS) {
        fprintf(stderr, "soak: send: %s\n", nxl_agent_last_error(I.a));
        exit(2);
    }
    nxl_future_release(fu);
    for (int si = 0; si < I.window; si++)
        for (int step = 0; step < 4; step++)
            for (int z = 0; z < NSIZES; z++)
                I.s[si].x[step][z] = make_one(si, step, SIZES[z], step == 0);
}

static void drain(uint64_t limit_ms)
{
    uint64_t end = now_ms() + limit_ms;
    for (;;) {
        int n = 0;
        for (int si = 0; si < I.window; si++)
            n += I.s[si].inflight;
        if (!n || now_ms() > end)
            break;
        nxl_agent_run_once(I.a, 10);
    }
}

/* the target goes: asked to quit after the slots drained, or killed */
static int retire(bool kill_it)
{
    int bad = 0, status = 0;
    if (kill_it) {
        I.killing = true;
        kill(I.pid, SIGKILL);
        waitpid(I.pid, &status, 0);
        drain(30000);
    } else {
        drain(30000);
        nxl_notif_send(I.a, "T", "quit", 4, NULL, NULL, NULL);
        uint64_t end = now_ms() + 10000;
        while (waitpid(I.pid, &status, WNOHANG) == 0 && now_ms() < end)
            nxl_agent_run_once(I.a, 10);
        if (now_ms() >= end) {
            kill(I.pid, SIGKILL);
            waitpid(I.pid, &status, 0);
            fprintf(stderr, "soak: the target did not quit\n");
            bad = 1;
        } else if (!WIFEXITED(status) || WEXITSTATUS(status)) {
            fprintf(stderr, "soak: the target exited with status %d\n", status);
            bad = 1;
        }
    }
    for (int si = 0; si < I.window; si++) {
        if (I.s[si].inflight) {
            fprintf(stderr, "soak: slot %d still in flight after the target left\n", si);
            bad = 1;
        }
        for (int step = 0; step < 4; step++)
            for (int z = 0; z < NSIZES; z++) {
                nxl_xfer_release(I.s[si].x[step][z]);
                I.s[si].x[step][z] = NULL;
            }
        I.s[si].wlen = 0;
        I.s[si].await = 0;
    }
    if (nxl_md_check(I.a, "T") == NXL_SUCCESS)
        nxl_md_invalidate(I.a, "T");
    /* turns for the transport to let the peer go: UCX discards an endpoint
     * in the background and keeps the peer's shared memory mapped until
     * then. A dead peer on this host is known at once (its pidfd, watched
     * by the transport), one elsewhere once UCX's keepalive (10 s) or its
     * TCP connection says so */
    uint64_t settled = now_ms() + settle_ms;
    do
        nxl_agent_run_once(I.a, 5);
    while (now_ms() < settled);
    I.killing = false;
    I.pid = 0;
    return bad;
}

int main(int argc, char **argv)
{
    uint64_t total = 1000000, restart_s = 10, sample_ms = 1000;
    double warmup = 0.1;
    const char *csv = "soak.csv";
    bool target = false;
    I.window = 16;
    self_path = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--target"))
            target = true;
        else if (!strcmp(a, "--transfers") && v)
            total = strtoull(v, NULL, 10), i++;
        else if (!strcmp(a, "--restart_s") && v)
            restart_s = strtoull(v, NULL, 10), i++;
        else if (!strcmp(a, "--window") && v)
            I.window = atoi(v), i++;
        else if (!strcmp(a, "--backend") && v)
            backend = v, i++;
        else if (!strcmp(a, "--csv") && v)
            csv = v, i++;
        else if (!strcmp(a, "--sample_ms") && v)
            sample_ms = strtoull(v, NULL, 10), i++;
        else if (!strcmp(a, "--warmup") && v)
            warmup = atof(v), i++;
        else if (!strcmp(a, "--settle_ms") && v)
            settle_ms = strtoull(v, NULL, 10), i++;
        else if (!strcmp(a, "--param") && v && strchr(v, '=') && nparams < 8) {
            char *kv = strdup(v), *eq = strchr(kv, '=');
            *eq = 0;
            params[nparams++] = (nxl_param_t){kv, eq + 1};
            i++;
        } else {
            fprintf(stderr, "usage: %s [--transfers N] [--restart_s S] [--window W] "
                            "[--backend UCX|LIBFABRIC] [--param key=value] [--csv FILE] "
                            "[--sample_ms MS] [--warmup FRACTION] [--settle_ms MS]\n", argv[0]);
            return 2;
        }
    }
    if (target)
        return target_main();
    if (I.window < 1 || I.window > MAXW || !total) {
        fprintf(stderr, "soak: window 1..%d, transfers > 0\n", MAXW);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    FILE *out = fopen(csv, "w");
    if (!out) {
        perror(csv);
        return 2;
    }
    fprintf(out, "seconds,transfers,rss_kib,fds,peers,target_rss_kib,restarts\n");
    I.a = agent("I", false);
    I.buf = malloc((size_t)I.window * SLOT);
    memset(I.buf, 0, (size_t)I.window * SLOT);
    nxl_desc_t d = {.addr = (uintptr_t)I.buf, .len = (size_t)I.window * SLOT};
    if (nxl_mem_register(I.a, NXL_DRAM, &d, 1, NULL) != NXL_SUCCESS) {
        fprintf(stderr, "soak: %s\n", nxl_agent_last_error(I.a));
        return 2;
    }
    nxl_agent_on_notif(I.a, i_notif, NULL);
    /* the level before any target: fds and peers; RSS once warmed up */
    int fds0 = nfds();
    list_fds("before the first target");
    uint64_t peers0 = peers();
    long rss_start = rss_kib(0), rss_warm = -1, rss_max = 0;
    uint64_t warm_at = (uint64_t)(warmup * (double)total), restarts = 0;
    int bad_exit = 0, fds1 = -1;
    uint64_t peers1 = 0;
    uint64_t t0 = now_ms(), next_sample = t0, next_restart = t0 + restart_s * 1000;
    printf("soak: %llu transfers, window %d, %s%s%s, target replaced every %llu s (quit and "
           "SIGKILL in turn); CSV in %s\n",
           (unsigned long long)total, I.window, backend, nparams ? " " : "",
           nparams ? params[0].value : "", (unsigned long long)restart_s, csv);
    printf("%8s %10s %9s %5s %5s %9s %8s\n", "seconds", "transfers", "rss_kib", "fds", "peers",
           "t_rss_kib", "restarts");
    spawn();
    uint64_t nsamples = 0;
    while (I.completed < total) {
        for (int si = 0; si < I.window; si++)
            if (!I.s[si].inflight && I.posted < total && !((I.s[si].k & 3) == 0 && I.s[si].await))
                post(si);
        nxl_agent_run_once(I.a, 10);
        uint64_t now = now_ms();
        if (now >= next_sample) {
            long r = rss_kib(0);
            fprintf(out, "%.1f,%llu,%ld,%d,%llu,%ld,%llu\n", (now - t0) / 1000.0,
                    (unsigned long long)I.completed, r, nfds(), (unsigned long long)peers(),
                    rss_kib(I.pid), (unsigned long long)restarts);
            fflush(out);
            if (nsamples++ % 10 == 0)
                printf("%8.1f %10llu %9ld %5d %5llu %9ld %8llu\n", (now - t0) / 1000.0,
                       (unsigned long long)I.completed, r, nfds(), (unsigned long long)peers(),
                       rss_kib(I.pid), (unsigned long long)restarts);
            next_sample = now + sample_ms;
        }
        if (now >= next_restart && I.completed < total) {
            bad_exit |= retire(restarts % 2 == 1);
            restarts++;
            if (fds1 < 0) { /* after the first target: what the transports make once */
                fds1 = nfds();
                peers1 = peers();
                if (fds1 != fds0)
                    list_fds("after the first target");
            }
            long r = rss_kib(0); /* no target: the level to compare */
            if (rss_warm < 0 && I.completed >= warm_at)
                rss_warm = r;
            if (rss_warm >= 0 && r > rss_max)
                rss_max = r;
            spawn();
            next_restart = now_ms() + restart_s * 1000;
        }
    }
    bad_exit |= retire(false);
    long rss_end = rss_kib(0);
    if (rss_warm < 0)
        rss_warm = rss_end;
    int fds_end = nfds();
    if (fds1 < 0) {
        fds1 = fds_end;
        peers1 = peers();
    }
    if (fds_end != fds1)
        list_fds("after the last target");
    uint64_t peers_end = peers();
    double secs = (now_ms() - t0) / 1000.0;
    fprintf(out, "%.1f,%llu,%ld,%d,%llu,0,%llu\n", secs, (unsigned long long)I.completed,
            rss_end, fds_end, (unsigned long long)peers_end, (unsigned long long)restarts + 1);
    fclose(out);
    nxl_stats_t st = {.size = sizeof(st)};
    nxl_agent_stats(I.a, NULL, &st);
    long growth = rss_end - rss_warm;
    bool ok_once = I.dup == 0 && I.posted == I.completed;
    bool ok_bytes = I.bad_read == 0 && I.bad_target == 0;
    bool ok_fail = I.failed_other == 0;
    bool ok_rss = growth <= 1024;
    bool ok_fds = fds_end == fds1 && peers_end == peers0 && peers1 == peers0;
    printf("soak: %.0f s, %llu transfers posted, %llu callbacks (%llu twice), %llu succeeded, "
           "%llu failed with the peer lost, %llu failed otherwise; %llu targets (%llu replaced)\n",
           secs, (unsigned long long)I.posted, (unsigned long long)I.completed,
           (unsigned long long)I.dup, (unsigned long long)I.ok,
           (unsigned long long)I.failed_lost, (unsigned long long)I.failed_other,
           (unsigned long long)restarts + 1, (unsigned long long)restarts);
    printf("soak: bytes checked: %llu READs wrong, %llu WRITEs wrong at the target (%llu "
           "checks confirmed); notifications the initiator received: %llu\n",
           (unsigned long long)I.bad_read, (unsigned long long)I.bad_target,
           (unsigned long long)I.confirmed, (unsigned long long)st.notifs_received);
    printf("soak: RSS %ld KiB at start, %ld after warm-up (%.0f%% of the transfers), %ld at the "
           "end, highest between targets %ld: growth after warm-up %+ld KiB (target <= 1024)\n",
           rss_start, rss_warm, warmup * 100, rss_end, rss_max, growth);
    printf("soak: open fds %d before the first target, %d after it left (what the transports "
           "open once: UCX's timer), %d after the last; peers known %llu, %llu, %llu\n", fds0,
           fds1, fds_end, (unsigned long long)peers0, (unsigned long long)peers1,
           (unsigned long long)peers_end);
    printf("soak: exactly once %s, bytes %s, failures %s, RSS %s, fds and peers %s, targets %s\n",
           ok_once ? "yes" : "NO", ok_bytes ? "right" : "WRONG",
           ok_fail ? "only peer losses" : "OTHER", ok_rss ? "flat" : "GREW",
           ok_fds ? "back" : "NOT BACK", bad_exit ? "BAD EXITS" : "clean");
    nxl_agent_destroy(I.a);
    free(I.buf);
    return ok_once && ok_bytes && ok_fail && ok_rss && ok_fds && !bad_exit ? 0 : 1;
}
