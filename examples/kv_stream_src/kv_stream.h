/* SPDX-License-Identifier: BSD-3-Clause */
/* kv_stream: what its files share.
 *
 *   main.c     the overview, and "both": decode forked, prefill here
 *   opts.c     the flags
 *   prefill.c  the initiator: computes each layer and WRITEs it with a notification
 *   decode.c   the target: checks each layer when its notification arrives
 *   pattern.c  the bytes of a KV block, and their check
 *   common.c   clock, sizes as text, agents, KV memory */
#ifndef KV_STREAM_H
#define KV_STREAM_H

#include <nxl.h>
#ifdef KV_CUDA
#include "transports/common/cudart.h" /* the CUDA runtime, loaded at run time as libnxl does */
#endif

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../cli.h" /* cli_addr_t */


typedef struct opts {
    const char *mode;
    cli_addr_t addr;           /* --listen, --connect */
    unsigned long layers, blocks;
    size_t block_size;
    unsigned long compute_us;
    unsigned timeout_s;
    unsigned inflight;
    bool quiet, warmup;
    bool vram;              /* --mem VRAM: the caches in GPU memory */
    char etcd[512];         /* --etcd_endpoints: discover each other through etcd */
    char backend[32];       /* --backend: UCX (default) or LIBFABRIC */
} opts_t;

typedef struct text {
    char s[64];
} text_t;

/* common.c */
uint64_t now_us(void);
text_t size_text(uint64_t b);              /* "8 B", "64 KiB", "1.5 MiB" */
text_t rate_text(uint64_t bytes, uint64_t us); /* "3.21 GB/s", "45.6 MB/s" */
bool run_until(nxl_agent_t *a, const int *flag, uint64_t deadline_us);

/* What a future's callback learns: its status, its error text, and done
 * (the flag run_until waits for) */
typedef struct outcome {
    int done;
    nxl_status_t st;
    char err[512];
} outcome_t;
void outcome_record(outcome_t *o, nxl_future_t *f, nxl_status_t st);
nxl_agent_t *make_agent(const char *name, const char *listen, uint16_t port, const opts_t *o);
uint8_t *alloc_kv(nxl_agent_t *a, const char *who, size_t total, bool vram);
#ifdef KV_CUDA
extern const nxl_cuda_rt_t *rt;
#endif

/* pattern.c */
void fill_layer(uint8_t *layer_base, const opts_t *o, unsigned long layer);
uint64_t check_layer(const uint8_t *layer_base, const opts_t *o, unsigned long layer,
                     uint8_t *scratch, unsigned long *first_block, size_t *first_off);

/* opts.c: fills o from argv; exits 2 on a mistake, 0 after --help */
void parse_args(int argc, char **argv, opts_t *o);
void usage(FILE *f);

int run_decode(const opts_t *o, int port_fd);
int run_prefill(const opts_t *o);

#endif
