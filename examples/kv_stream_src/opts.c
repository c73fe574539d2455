/* SPDX-License-Identifier: BSD-3-Clause */
/* kv_stream: the flags, one table line each (examples/cli.h). */
#include "kv_stream.h"
#include "../cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void usage(FILE *f)
{
    fprintf(f,
"usage: kv_stream [both|--spawn] [shape] [--compute_us N] [--inflight N] [--timeout S]\n"
"       kv_stream decode  --listen HOST:PORT   [shape] [--timeout S]\n"
"       kv_stream prefill --connect HOST:PORT  [shape] [--compute_us N] [--inflight N]\n"
"       kv_stream decode|prefill|both --etcd_endpoints URL [shape] ...\n"
"shape: --layers L (32)  --blocks B (64)  --block_size S (64K; suffixes K, M)\n"
"       prefill and decode must be given the same shape.\n"
"  --compute_us N  time to \"compute\" each layer before its WRITE (0)\n"
"  --inflight N    layers in flight at most (4)\n"
"  --timeout S     seconds to wait for the peer, or for progress (30)\n"
"  --warmup        prefill writes every layer once, untimed and without\n"
"                  notifications, before the stream (first-touch page faults)\n"
"  --quiet         no line per layer\n"
"  --mem DRAM|VRAM where the caches live (DRAM); VRAM: GPU memory of device 0, moved\n"
"                  by the CUDA transport (CUDA IPC) and posted from CUDA events\n"
"  --etcd_endpoints URL  find each other through etcd (e.g. http://127.0.0.1:2379)\n"
"                  instead of --listen/--connect\n"
"  --backend NAME  the transport: UCX (default) or LIBFABRIC (both sides the same)\n"
"Flags take '--flag value' or '--flag=value'. UCX_TLS, FI_PROVIDER and NXL_LOG_LEVEL apply.\n");
}

/* a count from min (0 or 1) to max; the field's type is in the table's line */
#define COUNT_SETTER(fn, type)                                                                     \
    static const char *fn(const cli_opt_t *opt, const char *val)                                  \
    {                                                                                              \
        unsigned long long v;                                                                      \
        const char *why = cli_count(opt, val, &v);                                                 \
        if (!why)                                                                                  \
            *(type *)opt->field = (type)v;                                                         \
        return why;                                                                                \
    }
COUNT_SETTER(set_ulong, unsigned long)
COUNT_SETTER(set_unsigned, unsigned)
COUNT_SETTER(set_sizet, size_t)

static const char *set_backend(const cli_opt_t *opt, const char *val)
{
    if (strcasecmp(val, "UCX") && strcasecmp(val, "LIBFABRIC"))
        return "UCX or LIBFABRIC";
    snprintf(opt->field, sizeof(((opts_t *)0)->backend), "%s",
             !strcasecmp(val, "UCX") ? "UCX" : "LIBFABRIC");
    return NULL;
}

static const char *set_etcd(const cli_opt_t *opt, const char *val)
{
    if (!*val || strlen(val) >= sizeof(((opts_t *)0)->etcd))
        return "empty or too long";
    snprintf(opt->field, sizeof(((opts_t *)0)->etcd), "%s", val);
    return NULL;
}

static const char *set_mem(const cli_opt_t *opt, const char *val)
{
    if (strcasecmp(val, "DRAM") && strcasecmp(val, "VRAM"))
        return "DRAM or VRAM";
    *(bool *)opt->field = !strcasecmp(val, "VRAM");
#ifndef KV_CUDA
    if (*(bool *)opt->field)
        return "built without CUDA (configure --enable-cuda with the CUDA headers)";
#endif
    return NULL;
}

static const char *set_spawn(const cli_opt_t *opt, const char *val)
{
    (void)val;
    ((opts_t *)opt->field)->mode = "both";
    return NULL;
}

void parse_args(int argc, char **argv, opts_t *o)
{
#define V(n, s, f, ...) {.name = n, .arg = CLI_VALUE, .set = s, .field = f, __VA_ARGS__}
#define SW(n, s, f) {.name = n, .arg = CLI_SWITCH, .set = s, .field = f}
    const cli_opt_t opts[] = {
        SW("spawn", set_spawn, o),
        V("listen", cli_set_addr, &o->addr),
        V("connect", cli_set_addr, &o->addr),
        V("etcd_endpoints", set_etcd, o->etcd),
        V("backend", set_backend, o->backend),
        V("layers", set_ulong, &o->layers, .min = 1, .max = 1ull << 24),
        V("blocks", set_ulong, &o->blocks, .min = 1, .max = 1ull << 26),
        V("block_size", set_sizet, &o->block_size, .min = 1, .max = 1ull << 32),
        V("mem", set_mem, &o->vram),
        V("compute_us", set_ulong, &o->compute_us, .min = 0, .max = 60000000),
        V("inflight", set_unsigned, &o->inflight, .min = 1, .max = 1u << 20),
        V("timeout", set_unsigned, &o->timeout_s, .min = 1, .max = 86400),
        SW("warmup", cli_set_true, &o->warmup),
        SW("quiet", cli_set_true, &o->quiet),
        {0},
    };
#undef V
#undef SW
    const cli_t cli = {.prog = "kv_stream", .opts = opts, .usage = usage, .dash_aliases = true,
                       .help_h = true};
    cli_parse_mode(&cli, argc, argv, &o->mode); /* kv_stream decode --listen ... */
}
