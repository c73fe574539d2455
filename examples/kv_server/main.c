/* kv_server: flags, and "both" (store and serve forked, the client here).
 * See common.h for the roles and server.c for the embedding. */
#include "common.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_TOTAL_BYTES (16ull << 30)

static void usage(FILE *f)
{
    fprintf(f,
"usage: kv_server store  [--listen HOST:PORT] [shape]\n"
"       kv_server serve  --store HOST:PORT [--http HOST:PORT] [shape] [--staging N] [--queue N]\n"
"       kv_server serve  --memcpy [--http HOST:PORT] [shape] ...\n"
"       kv_server client --connect HOST:PORT [shape] [--connections N] [--seconds S | --requests N]\n"
"                        [--put_ratio R] [--expect STATUS]\n"
"       kv_server [both] [shape] [serve flags] [client flags] [--cpus S,C]\n"
"shape: --blocks N (1024)  --block_size B (64K; suffixes K, M; at least 16)\n"
"       store, serve and client must be given the same shape.\n"
"store:  an agent holding the blocks, block N filled with the pattern of (N, version 0);\n"
"        --listen is its metadata listener (127.0.0.1:0: a free port, printed)\n"
"serve:  HTTP on --http (127.0.0.1:0: a free port, printed) with an agent on the same\n"
"        event_base: GET /block/N (an nxl READ), PUT /block/N (an nxl WRITE with the\n"
"        notification 'put N V'), GET /stats (JSON)\n"
"  --staging N     staging buffers, registered once (64)\n"
"  --queue N       requests waiting for a staging buffer at most; 503 beyond (1024)\n"
"  --memcpy        answer GETs from a local copy (memcpy), no store: the reference\n"
"client: --connections N keep-alive connections (64), one request in flight each;\n"
"        every byte checked; prints requests/s and latency percentiles\n"
"  --seconds S     run this long (5), or --requests N: until N are sent\n"
"  --put_ratio R   fraction of PUTs (0)\n"
"  --warmup        GET every block once, untimed, before the run (first touches)\n"
"  --expect STATUS expect every answer to have this status (e.g. 502), print the first body\n"
"both:   store and serve forked, the client in this process (no store with --memcpy)\n"
"  --cpus S,C      pin store and serve to CPU S, the client to CPU C\n"
"  --timeout S     setup, and each HTTP request (10)\n"
"  --quiet         fewer lines\n"
"Flags take '--flag value' or '--flag=value'. UCX_TLS and NXL_LOG_LEVEL apply.\n");
}

static bool parse_num(const char *s, unsigned long long max, unsigned long long *out)
{
    char *end;
    errno = 0;
    if (!s || !*s || *s == '-')
        return false;
    unsigned long long v = strtoull(s, &end, 10);
    unsigned shift = 0;
    if (*end == 'k' || *end == 'K')
        shift = 10;
    else if (*end == 'm' || *end == 'M')
        shift = 20;
    else if (*end == 'g' || *end == 'G')
        shift = 30;
    if (shift)
        end++;
    if (errno || end == s || *end || v > (max >> shift))
        return false;
    *out = v << shift;
    return true;
}

static bool parse_double(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi))
        return false;
    *out = v;
    return true;
}

static bool parse_addr(const char *s, kvs_addr_t *a)
{
    const char *colon = strrchr(s, ':');
    unsigned long long port;
    if (!colon || colon == s || !parse_num(colon + 1, 65535, &port))
        return false;
    const char *h = s;
    size_t hl = (size_t)(colon - s);
    if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    if (!hl || hl >= sizeof(a->host))
        return false;
    memcpy(a->host, h, hl);
    a->host[hl] = 0;
    a->port = (uint16_t)port;
    a->set = true;
    return true;
}

static int parse(int argc, char **argv, kvs_opts_t *o)
{
    int i = 1;
    if (i < argc && argv[i][0] != '-')
        o->mode = argv[i++];
    for (; i < argc; i++) {
        char name[64];
        const char *arg = argv[i], *val = NULL;
        if (strncmp(arg, "--", 2)) {
            fprintf(stderr, "kv_server: unexpected argument '%s'\n", arg);
            return 2;
        }
        const char *eq = strchr(arg, '=');
        size_t nl = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
        if (nl >= sizeof(name)) {
            fprintf(stderr, "kv_server: unknown flag '%s'\n", arg);
            return 2;
        }
        memcpy(name, arg + 2, nl);
        name[nl] = 0;
        for (char *c = name; *c; c++)
            if (*c == '-')
                *c = '_';
        if (!strcmp(name, "help")) {
            usage(stdout);
            exit(0);
        }
        if (!strcmp(name, "memcpy") || !strcmp(name, "quiet") || !strcmp(name, "warmup")) {
            if (eq) {
                fprintf(stderr, "kv_server: --%s takes no value\n", name);
                return 2;
            }
            if (name[0] == 'm')
                o->memcpy_mode = true;
            else if (name[0] == 'q')
                o->quiet = true;
            else
                o->warmup = true;
            continue;
        }
        if (eq)
            val = eq + 1;
        else if (i + 1 < argc)
            val = argv[++i];
        if (!val) {
            fprintf(stderr, "kv_server: --%s needs a value\n", name);
            return 2;
        }
        unsigned long long v = 0;
        bool ok;
        if (!strcmp(name, "listen")) {
            ok = parse_addr(val, &o->listen);
        } else if (!strcmp(name, "store")) {
            ok = parse_addr(val, &o->store);
        } else if (!strcmp(name, "http")) {
            ok = parse_addr(val, &o->http);
        } else if (!strcmp(name, "connect")) {
            ok = parse_addr(val, &o->connect);
        } else if (!strcmp(name, "blocks")) {
            ok = parse_num(val, 1ull << 26, &v) && v;
            o->blocks = (unsigned long)v;
        } else if (!strcmp(name, "block_size")) {
            ok = parse_num(val, 1ull << 32, &v) && v >= 16;
            o->block_size = (size_t)v;
        } else if (!strcmp(name, "staging")) {
            ok = parse_num(val, 1u << 16, &v) && v;
            o->staging = (unsigned)v;
        } else if (!strcmp(name, "queue")) {
            ok = parse_num(val, 1u << 24, &v);
            o->queue = (unsigned)v;
        } else if (!strcmp(name, "connections")) {
            ok = parse_num(val, 1u << 16, &v) && v;
            o->connections = (unsigned)v;
        } else if (!strcmp(name, "seconds")) {
            ok = parse_double(val, 0.001, 86400, &o->seconds);
        } else if (!strcmp(name, "requests")) {
            ok = parse_num(val, 1ull << 40, &v) && v;
            o->requests = (unsigned long)v;
        } else if (!strcmp(name, "put_ratio")) {
            ok = parse_double(val, 0, 1, &o->put_ratio);
        } else if (!strcmp(name, "expect")) {
            ok = parse_num(val, 599, &v) && v >= 100;
            o->expect = (unsigned)v;
        } else if (!strcmp(name, "timeout")) {
            ok = parse_num(val, 86400, &v) && v;
            o->timeout_s = (unsigned)v;
        } else if (!strcmp(name, "cpus")) {
            int sc, cc;
            char extra;
            ok = sscanf(val, "%d,%d%c", &sc, &cc, &extra) == 2 && sc >= 0 && cc >= 0 &&
                 sc < 1024 && cc < 1024;
            o->cpu_server = sc;
            o->cpu_client = cc;
        } else {
            fprintf(stderr, "kv_server: unknown flag --%s (see --help)\n", name);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "kv_server: bad value '%s' for --%s\n", val, name);
            return 2;
        }
    }
    return 0;
}

/* ----------------------------------------------------------------- both */

/* Forks a role that writes "PORT\n" to a pipe once it is ready.
 * @return the child's pid (and *port), or -1. */
static pid_t spawn(kvs_opts_t *o, int (*role)(const kvs_opts_t *), const char *name,
                   uint16_t *port)
{
    int fds[2];
    if (pipe(fds)) {
        perror("kv_server: pipe");
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        perror("kv_server: fork");
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        close(fds[0]);
        o->ready_fd = fds[1];
        kvs_pin(name, o->cpu_server);
        int rc = role(o);
        fflush(stdout);
        fflush(stderr);
        _exit(rc);
    }
    close(fds[1]);
    char buf[16] = "";
    size_t got = 0;
    struct pollfd pf = {.fd = fds[0], .events = POLLIN};
    while (got < sizeof(buf) - 1 && !memchr(buf, '\n', got)) {
        int r = poll(&pf, 1, (int)o->timeout_s * 1000);
        ssize_t k = r > 0 ? read(fds[0], buf + got, sizeof(buf) - 1 - got) : -1;
        if (r < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        got += (size_t)k;
        buf[got] = 0;
    }
    close(fds[0]);
    unsigned long p = strtoul(buf, NULL, 10);
    if (!memchr(buf, '\n', got) || !p || p > 65535) {
        fprintf(stderr, "kv_server: %s did not start\n", name);
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
        return -1;
    }
    *port = (uint16_t)p;
    return pid;
}

/* SIGTERM, then the exit status (128 + signal when killed). */
static int stop_child(pid_t pid)
{
    int ws;
    if (pid <= 0)
        return 0;
    kill(pid, SIGTERM);
    while (waitpid(pid, &ws, 0) < 0)
        if (errno != EINTR)
            return 1;
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + (WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
}

static int run_both(kvs_opts_t *o)
{
    pid_t store = 0, serve;
    uint16_t sport = 0, hport;
    int crc = 1, src, trc;
    o->listen = (kvs_addr_t){.host = "127.0.0.1", .port = 0, .set = true};
    if (!o->memcpy_mode) {
        if ((store = spawn(o, kvs_store, "store", &sport)) < 0)
            return 1;
        o->store = (kvs_addr_t){.host = "127.0.0.1", .port = sport, .set = true};
    }
    if ((serve = spawn(o, kvs_serve, "serve", &hport)) < 0) {
        stop_child(store);
        return 1;
    }
    o->connect = (kvs_addr_t){.port = hport, .set = true};
    snprintf(o->connect.host, sizeof(o->connect.host), "%s", o->http.host);
    kvs_pin("client", o->cpu_client);
    crc = kvs_client(o);
    src = stop_child(serve);
    trc = stop_child(store);
    printf("kv_server: client %s, serve %s%s%s\n", crc ? "FAILED" : "ok", src ? "FAILED" : "ok",
           store ? ", store " : "", store ? (trc ? "FAILED" : "ok") : "");
    return crc || src || trc ? 1 : 0;
}

int main(int argc, char **argv)
{
    kvs_opts_t o = {
        .mode = "both",
        .blocks = 1024,
        .block_size = 64 * 1024,
        .staging = 64,
        .queue = 1024,
        .connections = 64,
        .timeout_s = 10,
        .cpu_server = -1,
        .cpu_client = -1,
        .ready_fd = -1,
        .listen = {.host = "127.0.0.1"},
        .http = {.host = "127.0.0.1"},
    };
    int rc = parse(argc, argv, &o);
    if (rc) {
        usage(stderr);
        return rc;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    if (o.seconds == 0 && o.requests == 0)
        o.seconds = 5;
    if ((unsigned long long)o.blocks > MAX_TOTAL_BYTES / o.block_size ||
        (unsigned long long)o.staging > MAX_TOTAL_BYTES / o.block_size) {
        fprintf(stderr, "kv_server: %lu blocks (or %u staging buffers) of %zu bytes is more than "
                "%llu GiB\n", o.blocks, o.staging, o.block_size, MAX_TOTAL_BYTES >> 30);
        return 2;
    }
    if (!strcmp(o.mode, "store"))
        return kvs_store(&o);
    if (!strcmp(o.mode, "serve")) {
        if (!o.memcpy_mode && !o.store.set) {
            fprintf(stderr, "kv_server serve: --store HOST:PORT (or --memcpy) is required\n");
            return 2;
        }
        return kvs_serve(&o);
    }
    if (!strcmp(o.mode, "client")) {
        if (!o.connect.set) {
            fprintf(stderr, "kv_server client: --connect HOST:PORT is required\n");
            return 2;
        }
        return kvs_client(&o);
    }
    if (!strcmp(o.mode, "both"))
        return run_both(&o);
    fprintf(stderr, "kv_server: unknown mode '%s' (store, serve, client or both)\n", o.mode);
    usage(stderr);
    return 2;
}
