/* SPDX-License-Identifier: BSD-3-Clause */
/* kv_layout: a decode worker of TP 2 assembles a sequence's KV cache from
 * four prefill workers of TP 4 whose blocks hold 16 tokens, heads outer,
 * where its own hold 32 tokens, tokens outer (<nxl/kv.h>).
 *
 * Every worker is an agent of this process so that the program fits in one
 * file; in real use each is a process of its own, and each prefill worker
 * sends its layout (an nxl_kv_layout_t, its base an address in its
 * process) with its metadata. The steps:
 *
 *   1. each prefill rank registers its KV region and fills the sequence
 *   2. the decode rank registers its region and loads the prefills' metadata
 *   3. one KV transfer per prefill rank (a rank holding none of the decode
 *      rank's heads gives an empty one), posted, joined with nxl_future_all
 *   4. when the joined future completes, the KV is in the decode layout
 *
 *   kv_layout [TRANSPORT]     UCX by default; exits 0 when every byte is right
 *
 * Build it against an installed nxl: cc kv_layout.c $(pkg-config --cflags --libs nxl) */
#include <nxl.h>
#include <nxl/kv.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEADS 8
#define HEAD_SIZE 64
#define PLANES 4     /* 2 layers, K and V */
#define TOKENS 100
#define BLOCKS 8
#define TP_PREFILL 4
#define TP_DECODE 2

static int done; /* 1: the sequence is in place; -1: a transfer failed */

static void on_ready(nxl_future_t *f, nxl_status_t st, void *arg)
{
    printf("decode: sequence %s\n", st == NXL_SUCCESS ? "in place" : nxl_future_error(f));
    done = st == NXL_SUCCESS ? 1 : -1;
}

/* the value of element e of (plane, token, head): what the model wrote */
static uint16_t val(unsigned p, unsigned t, unsigned h, unsigned e)
{
    return (uint16_t)(p * 4099 + t * 131 + h * 17 + e);
}

static nxl_agent_t *agent(const char *name, const char *transport)
{
    nxl_agent_config_t cfg;
    nxl_agent_config_init(&cfg);
    cfg.name = name;
    nxl_agent_t *a;
    if (nxl_agent_create(&cfg, &a) != NXL_SUCCESS ||
        nxl_backend_create(a, transport, NULL, 0, NULL) != NXL_SUCCESS) {
        fprintf(stderr, "%s: %s\n", name, nxl_agent_last_error(NULL));
        exit(1);
    }
    return a;
}

static void layout(nxl_kv_layout_t *l, unsigned tp, unsigned rank, unsigned block_tokens,
                   nxl_kv_order_t order)
{
    nxl_kv_layout_init(l);
    l->layers = PLANES;
    l->blocks = BLOCKS;
    l->block_tokens = block_tokens;
    l->heads = HEADS;
    l->head_size = HEAD_SIZE;
    l->elem_size = sizeof(uint16_t);
    l->order = order;
    l->tp_size = tp;
    l->tp_rank = rank;
    l->len = (size_t)PLANES * BLOCKS * block_tokens * (HEADS / tp) * HEAD_SIZE * sizeof(uint16_t);
}

/* element (plane, block, slot, head, e) of l, as nxl/kv.h defines it */
static uint16_t *at(const nxl_kv_layout_t *l, unsigned p, unsigned b, unsigned t, unsigned h,
                    unsigned e)
{
    size_t hl = l->heads / l->tp_size, hh = h - l->tp_rank * hl;
    size_t block = l->block_tokens * hl * l->head_size;
    size_t in = l->order == NXL_KV_HEADS_OUTER ? (hh * l->block_tokens + t) * l->head_size
                                               : (t * hl + hh) * l->head_size;
    return (uint16_t *)l->base + ((size_t)p * l->blocks + b) * block + in + e;
}

int main(int argc, char **argv)
{
    const char *transport = argc > 1 ? argv[1] : "UCX";
    /* the sequence's blocks on each side, as the two schedulers gave them */
    uint32_t pblocks[(TOKENS + 15) / 16] = {5, 2, 7, 0, 3, 1, 6};
    uint32_t dblocks[(TOKENS + 31) / 32] = {6, 1, 4, 3};
    nxl_kv_seq_t seq = {dblocks, 4, pblocks, 7, TOKENS};

    /* 1. the prefill ranks */
    nxl_agent_t *pa[TP_PREFILL];
    nxl_kv_layout_t pl[TP_PREFILL];
    for (unsigned r = 0; r < TP_PREFILL; r++) {
        char name[32];
        snprintf(name, sizeof(name), "prefill%u", r);
        pa[r] = agent(name, transport);
        layout(&pl[r], TP_PREFILL, r, 16, NXL_KV_HEADS_OUTER);
        pl[r].base = (uintptr_t)calloc(1, pl[r].len);
        nxl_desc_t d = {.addr = pl[r].base, .len = pl[r].len};
        if (nxl_mem_register(pa[r], NXL_DRAM, &d, 1, NULL) != NXL_SUCCESS) {
            fprintf(stderr, "%s\n", nxl_agent_last_error(pa[r]));
            return 1;
        }
        for (unsigned p = 0; p < PLANES; p++)
            for (unsigned t = 0; t < TOKENS; t++)
                for (unsigned h = r * 2; h < r * 2 + 2; h++)
                    for (unsigned e = 0; e < HEAD_SIZE; e++)
                        *at(&pl[r], p, pblocks[t / 16], t % 16, h, e) = val(p, t, h, e);
    }

    /* 2. decode rank 1 of 2: heads 4..7, from prefill ranks 2 and 3 */
    nxl_agent_t *da = agent("decode1", transport);
    nxl_kv_layout_t dl;
    layout(&dl, TP_DECODE, 1, 32, NXL_KV_TOKENS_OUTER);
    dl.base = (uintptr_t)calloc(1, dl.len);
    nxl_desc_t d = {.addr = dl.base, .len = dl.len};
    if (nxl_mem_register(da, NXL_DRAM, &d, 1, NULL) != NXL_SUCCESS) {
        fprintf(stderr, "%s\n", nxl_agent_last_error(da));
        return 1;
    }
    for (unsigned r = 0; r < TP_PREFILL; r++) {
        void *blob;
        size_t len;
        nxl_md_local(pa[r], &blob, &len); /* in real use: nxl_md_fetch() or etcd */
        nxl_md_load(da, blob, len, NULL, 0);
        nxl_free(blob);
    }

    /* 3. one KV transfer per prefill rank */
    nxl_kv_xfer_t *kx[TP_PREFILL];
    nxl_future_t *f[TP_PREFILL];
    for (unsigned r = 0; r < TP_PREFILL; r++) {
        char name[32];
        snprintf(name, sizeof(name), "prefill%u", r);
        if (nxl_kv_xfer_make(da, name, &dl, &pl[r], &seq, NULL, NULL, &kx[r]) != NXL_SUCCESS ||
            nxl_kv_xfer_post(kx[r], NULL, NULL, &f[r]) != NXL_SUCCESS) {
            fprintf(stderr, "decode: %s\n", nxl_agent_last_error(da));
            return 1;
        }
        size_t n, bytes;
        nxl_kv_mode_t m = nxl_kv_xfer_mode(kx[r], &n, &bytes);
        printf("decode: from %s: %zu pieces, %zu bytes, %s\n", name, n, bytes,
               !n ? "nothing (no head shared)" : m == NXL_KV_ZCOPY ? "zero copy" : "staged");
    }
    nxl_future_all(da, f, TP_PREFILL, on_ready, NULL, NULL);

    /* 4. the reactors run until the joined future completed */
    while (!done) {
        nxl_agent_run_once(da, 1);
        for (unsigned r = 0; r < TP_PREFILL; r++)
            nxl_agent_run_once(pa[r], 0);
    }
    long bad = 0;
    for (unsigned p = 0; p < PLANES; p++)
        for (unsigned t = 0; t < TOKENS; t++)
            for (unsigned h = 4; h < 8; h++)
                for (unsigned e = 0; e < HEAD_SIZE; e++)
                    bad += *at(&dl, p, dblocks[t / 32], t % 32, h, e) != val(p, t, h, e);
    printf("decode: %ld wrong elements\n", bad);

    for (unsigned r = 0; r < TP_PREFILL; r++) {
        nxl_future_release(f[r]);
        nxl_kv_xfer_release(kx[r]);
    }
    nxl_agent_destroy(da);
    for (unsigned r = 0; r < TP_PREFILL; r++) {
        nxl_agent_destroy(pa[r]);
        free((void *)pl[r].base);
    }
    free((void *)dl.base);
    return done == 1 && !bad ? 0 : 1;
}
