/* SPDX-License-Identifier: BSD-3-Clause */
/* kv_server: flags, and "both" (store and serve forked, the client here).
 * See common.h for the roles and server.c for the embedding. */
#include "common.h"
#include "../cli.h"

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

/* the flags' setters (examples/cli.h): a count with K, M, G from min to max */
#define COUNT_SETTER(fn, type)                                                                     \
    static const char *fn(const cli_opt_t *opt, const char *val)                                  \
    {                                                                                              \
        unsigned long long v;                                                                      \
        if (cli_count(opt, val, &v))                                                               \
            return cli_why("not a count from %.0f to %.0f (suffixes K, M, G)", opt->min,          \
                           opt->max);                                                              \
        *(type *)opt->field = (type)v;                                                             \
        return NULL;                                                                               \
    }
COUNT_SETTER(set_ulong, unsigned long)
COUNT_SETTER(set_unsigned, unsigned)
COUNT_SETTER(set_sizet, size_t)

/* --cpus S,C */
static const char *set_cpus(const cli_opt_t *opt, const char *val)
{
    kvs_opts_t *o = opt->field;
    int sc, cc;
    char extra;
    if (sscanf(val, "%d,%d%c", &sc, &cc, &extra) != 2 || sc < 0 || cc < 0 || sc >= 1024 ||
        cc >= 1024)
        return "not S,C (two CPU numbers)";
    o->cpu_server = sc;
    o->cpu_client = cc;
    return NULL;
}

static void parse(int argc, char **argv, kvs_opts_t *o)
{
#define V(n, s, f, ...) {.name = n, .arg = CLI_VALUE, .set = s, .field = f, __VA_ARGS__}
#define SW(n, f) {.name = n, .arg = CLI_SWITCH, .set = cli_set_true, .field = f}
    const cli_opt_t opts[] = {
        V("listen", cli_set_addr, &o->listen),
        V("store", cli_set_addr, &o->store),
        V("http", cli_set_addr, &o->http),
        V("connect", cli_set_addr, &o->connect),
        V("blocks", set_ulong, &o->blocks, .min = 1, .max = 1ull << 26),
        V("block_size", set_sizet, &o->block_size, .min = 16, .max = 1ull << 32),
        V("staging", set_unsigned, &o->staging, .min = 1, .max = 1u << 16),
        V("queue", set_unsigned, &o->queue, .min = 0, .max = 1u << 24),
        SW("memcpy", &o->memcpy_mode),
        V("connections", set_unsigned, &o->connections, .min = 1, .max = 1u << 16),
        V("seconds", cli_set_double, &o->seconds, .min = 0.001, .max = 86400),
        V("requests", set_ulong, &o->requests, .min = 1, .max = 1ull << 40),
        V("put_ratio", cli_set_double, &o->put_ratio, .min = 0, .max = 1),
        SW("warmup", &o->warmup),
        V("expect", set_unsigned, &o->expect, .min = 100, .max = 599),
        V("cpus", set_cpus, o),
        V("timeout", set_unsigned, &o->timeout_s, .min = 1, .max = 86400),
        SW("quiet", &o->quiet),
        {0},
    };
#undef V
#undef SW
    const cli_t cli = {.prog = "kv_server", .opts = opts, .usage = usage, .dash_aliases = true,
                       .help_h = true};
    cli_parse_mode(&cli, argc, argv, &o->mode); /* kv_server store --listen ... */
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
    uint16_t p = kvu_read_port(fds[0], (int)o->timeout_s * 1000);
    if (!p) {
        fprintf(stderr, "kv_server: %s did not start\n", name);
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
        return -1;
    }
    *port = p;
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
    parse(argc, argv, &o);
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
    fprintf(stderr, "kv_server: unknown mode '%s' (store, serve, client or both; see --help)\n",
            o.mode);
    return 2;
}
