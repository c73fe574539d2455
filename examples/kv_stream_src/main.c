/* SPDX-License-Identifier: BSD-3-Clause */
/* kv_stream — streaming a KV cache layer by layer from a prefill agent to a
 * decode agent, the way disaggregated LLM serving moves it.
 *
 *   kv_stream decode  --listen 127.0.0.1:5555 [shape]     the target
 *   kv_stream prefill --connect 127.0.0.1:5555 [shape]    the initiator
 *   kv_stream [both] [shape]                               both, in two processes
 *
 * The KV cache is layers × blocks × block_size bytes, layer-major, in memory
 * each agent allocates and registers with nxl_mem_alloc(). The exchange:
 *
 *   prefill                                      decode
 *   nxl_md_fetch("decode", host, port)  ──TCP──▶ metadata listener
 *   nxl_md_send(host, port)             ──TCP──▶ loads prefill's metadata
 *   notif "hello L B S"                 ──UCX──▶ checks the shape
 *                                       ◀──UCX── notif "kv ADDR LEN" (where its cache is)
 *   nxl_prep both lists (one descriptor per block), one transfer per layer
 *   per layer: compute (write the pattern), post WRITE + notif "layer N"
 *                                       ──UCX──▶ on "layer N": check the layer's bytes
 *                                       ◀──UCX── notif "done ERRORS"
 *
 * Every byte written depends on (layer, block, offset), so decode can check
 * each layer when its notification arrives: nxl promises that the
 * notification of a WRITE arrives only after all of its data is visible.
 *
 * --mem VRAM keeps both caches in GPU memory (device 0): the agents add the
 * CUDA transport, the layers move through CUDA IPC, and their
 * notifications go through UCX after the data (the engine relays them).
 * Prefill "computes" a layer by copying its pattern into VRAM on a stream
 * of its own, records a CUDA event, and posts the layer's WRITE from the
 * callback of nxl_future_from_cuda_event(): the moment the GPU is done,
 * without a host synchronize. Decode copies each layer back to check it. */
#include "kv_stream.h"
#include "../kv_util.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_TOTAL_BYTES (16ull << 30)   /* one side's cache: keep memory modest */
#define MAX_DESCS (1ul << 26)

/* ----------------------------------------------------------------- both */

static int run_both(opts_t *o)
{
    int fds[2];
    if (pipe(fds)) {
        perror("kv_stream: pipe");
        return 1;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        perror("kv_stream: fork");
        return 1;
    }
    if (pid == 0) {
        /* the child is decode, on an ephemeral loopback port */
        close(fds[0]);
        snprintf(o->addr.host, sizeof(o->addr.host), "127.0.0.1");
        o->addr.port = 0;
        o->addr.set = true;
        int rc = run_decode(o, fds[1]);
        fflush(stdout);
        fflush(stderr);
        _exit(rc);
    }
    close(fds[1]);
    uint16_t port = kvu_read_port(fds[0], (int)o->timeout_s * 1000);
    int prc = -1;
    if (!port) {
        fprintf(stderr, "kv_stream: decode did not start (no port from the child)\n");
        kill(pid, SIGTERM);
    } else {
        snprintf(o->addr.host, sizeof(o->addr.host), "127.0.0.1");
        o->addr.port = port;
        prc = run_prefill(o);
        if (prc)
            kill(pid, SIGTERM); /* do not let decode wait for its timeout */
    }
    int ws, drc;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
        ;
    drc = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + (WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
    printf("kv_stream: prefill %s, decode %s\n", prc < 0 ? "not run" : prc ? "FAILED" : "ok",
           drc ? "FAILED" : "ok");
    return prc || drc ? 1 : 0;
}

int main(int argc, char **argv)
{
    opts_t o = {
        .mode = "both",
        .layers = 32,
        .blocks = 64,
        .block_size = 64 * 1024,
        .timeout_s = 30,
        .inflight = 4,
    };
    parse_args(argc, argv, &o);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if ((unsigned long long)o.layers * o.blocks > MAX_DESCS ||
        (unsigned long long)o.layers * o.blocks > MAX_TOTAL_BYTES / o.block_size) {
        fprintf(stderr, "kv_stream: %lu layers x %lu blocks x %zu B is too large (at most %lu "
                "blocks and %llu GiB a side)\n", o.layers, o.blocks, o.block_size, MAX_DESCS,
                MAX_TOTAL_BYTES >> 30);
        return 2;
    }
    if (!strcmp(o.mode, "decode")) {
        if (!o.addr.set && !o.etcd[0]) {
            fprintf(stderr, "kv_stream decode: --listen HOST:PORT is required\n");
            return 2;
        }
        return run_decode(&o, -1);
    }
    if (!strcmp(o.mode, "prefill")) {
        if ((!o.addr.set || !o.addr.port) && !o.etcd[0]) {
            fprintf(stderr, "kv_stream prefill: --connect HOST:PORT is required\n");
            return 2;
        }
        return run_prefill(&o);
    }
    if (!strcmp(o.mode, "both"))
        return run_both(&o);
    fprintf(stderr, "kv_stream: unknown mode '%s' (decode, prefill or both; see --help)\n",
            o.mode);
    return 2;
}
