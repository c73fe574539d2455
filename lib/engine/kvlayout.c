/* SPDX-License-Identifier: BSD-3-Clause */
/* KV layouts (include/nxl/kv.h): checks, the planner that maps a sequence
 * from a prefill layout onto a decode layout, the CPU re-layout, and the
 * KV transfer (a READ, zero copy or into staging followed by the
 * re-layout: on the reactor for DRAM, on the device by a transport with
 * NXLT_CAP_RELAYOUT for VRAM). */
#include "internal.h"

#include <nxl/kv.h>

#include <errno.h>
#include <stdarg.h>
#include <string.h>

/* staged: the bytes of one group (one READ, then its re-layout) unless
 * opts.slice_bytes says otherwise; two groups' staging at most (the copy
 * of one while the READ of the next is in flight). 64 KiB to 1 MiB
 * measured within the noise of each other (bench/kv-assembly --spread,
 * thp auto: 5.0-6.0 GB per CPU second; over cross-memory attach the READ
 * posted from the callback is copied after the re-layout, so each group
 * is re-laid out from cache, just written: 1 MiB of L2, 32 MiB of L3) */
#define KV_SLICE_DEFAULT (1u * 1024 * 1024)
#define KV_RING 2

/* ---- layouts */

/* What a checked layout works out to, in bytes. */
typedef struct kv_geom {
    uint64_t row;    /* one head of one token: head_size * elem_size */
    uint64_t bb;     /* one block: block_tokens * hl * row */
    uint64_t bs, ls; /* block and plane strides */
    uint32_t hl;     /* heads held: heads / tp_size */
    uint32_t h0;     /* the first of them */
} kv_geom_t;

static nxl_status_t say(char *why, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static nxl_status_t say(char *why, size_t cap, const char *fmt, ...)
{
    if (why && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, cap, fmt, ap);
        va_end(ap);
    }
    return NXL_ERR_INVALID_PARAM;
}

void nxl_kv_layout_init(nxl_kv_layout_t *l)
{
    if (!l)
        return;
    memset(l, 0, sizeof(*l));
    l->size = sizeof(*l);
    l->tp_size = 1;
    l->mem = NXL_DRAM;
}

static nxl_status_t kv_geom(const nxl_kv_layout_t *l, const char *side, kv_geom_t *g, char *why,
                            size_t cap)
{
    if (!l)
        return say(why, cap, "%s layout: NULL", side);
    if (l->size < sizeof(*l))
        return say(why, cap, "%s layout: size %zu is not sizeof(nxl_kv_layout_t) (%zu): "
                   "initialise it with nxl_kv_layout_init()", side, l->size, sizeof(*l));
    static const struct {
        const char *name;
        size_t off;
    } counts[] = {
        {"layers", offsetof(nxl_kv_layout_t, layers)},
        {"blocks", offsetof(nxl_kv_layout_t, blocks)},
        {"block_tokens", offsetof(nxl_kv_layout_t, block_tokens)},
        {"heads", offsetof(nxl_kv_layout_t, heads)},
        {"head_size", offsetof(nxl_kv_layout_t, head_size)},
        {"elem_size", offsetof(nxl_kv_layout_t, elem_size)},
        {"tp_size", offsetof(nxl_kv_layout_t, tp_size)},
    };
    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
        uint32_t v;
        memcpy(&v, (const char *)l + counts[i].off, sizeof(v));
        if (!v)
            return say(why, cap, "%s layout: %s is 0", side, counts[i].name);
    }
    if (l->order != NXL_KV_HEADS_OUTER && l->order != NXL_KV_TOKENS_OUTER)
        return say(why, cap, "%s layout: order %d is neither NXL_KV_HEADS_OUTER (0) nor "
                   "NXL_KV_TOKENS_OUTER (1)", side, (int)l->order);
    if (l->heads % l->tp_size)
        return say(why, cap, "%s layout: heads %u is not divisible by tp_size %u", side,
                   l->heads, l->tp_size);
    if (l->tp_rank >= l->tp_size)
        return say(why, cap, "%s layout: tp_rank %u is not below tp_size %u", side, l->tp_rank,
                   l->tp_size);
    g->hl = l->heads / l->tp_size;
    g->h0 = l->tp_rank * g->hl;
    uint64_t t;
    if (__builtin_mul_overflow((uint64_t)l->head_size, l->elem_size, &g->row) ||
        __builtin_mul_overflow(g->row, (uint64_t)g->hl, &t) ||
        __builtin_mul_overflow(t, (uint64_t)l->block_tokens, &g->bb))
        return say(why, cap, "%s layout: a block of %u tokens x %u heads x %u elements x %u "
                   "bytes overflows 64 bits", side, l->block_tokens, g->hl, l->head_size,
                   l->elem_size);
    g->bs = l->block_stride ? l->block_stride : g->bb;
    if (l->blocks > 1 && g->bs < g->bb)
        return say(why, cap, "%s layout: block_stride %zu is smaller than a block (%llu bytes)",
                   side, l->block_stride, (unsigned long long)g->bb);
    if (l->layer_stride)
        g->ls = l->layer_stride;
    else if (__builtin_mul_overflow(g->bs, (uint64_t)l->blocks, &g->ls))
        return say(why, cap, "%s layout: %u blocks of %llu bytes overflow 64 bits", side,
                   l->blocks, (unsigned long long)g->bs);
    if (l->layers > 1 && g->ls < g->bb)
        return say(why, cap, "%s layout: layer_stride %zu is smaller than a block (%llu bytes)",
                   side, l->layer_stride, (unsigned long long)g->bb);
    uint64_t a, b, need;
    if (__builtin_mul_overflow(g->ls, (uint64_t)(l->layers - 1), &a) ||
        __builtin_mul_overflow(g->bs, (uint64_t)(l->blocks - 1), &b) ||
        __builtin_add_overflow(a, b, &need) || __builtin_add_overflow(need, g->bb, &need) ||
        __builtin_add_overflow((uint64_t)l->base, need, &t))
        return say(why, cap, "%s layout: %u layers x %u blocks of %llu bytes from address "
                   "0x%llx overflow 64 bits", side, l->layers, l->blocks,
                   (unsigned long long)g->bb, (unsigned long long)l->base);
    if (!l->len)
        return say(why, cap, "%s layout: len is 0 (the region's length, %llu bytes for this "
                   "layout, is required)", side, (unsigned long long)need);
    if (l->len < need)
        return say(why, cap, "%s layout: the region of len %zu bytes is too small: %u layers x "
                   "%u blocks of %llu bytes (strides %llu, %llu) need %llu", side, l->len,
                   l->layers, l->blocks, (unsigned long long)g->bb, (unsigned long long)g->ls,
                   (unsigned long long)g->bs, (unsigned long long)need);
    return NXL_SUCCESS;
}

nxl_status_t nxl_kv_layout_check(const nxl_kv_layout_t *l, char *why, size_t why_len)
{
    kv_geom_t g;
    if (why && why_len)
        why[0] = 0;
    return kv_geom(l, "KV", &g, why, why_len);
}

/* ---- the planner */

typedef struct kv_out {
    nxl_kv_piece_t *p;
    size_t n, cap;
} kv_out_t;

/* appends a piece, merged into the last one when it continues it on both sides */
static inline void kv_put(kv_out_t *o, uint64_t src, uint64_t dst, uint64_t len)
{
    if (o->n) {
        nxl_kv_piece_t *l = &o->p[o->n - 1];
        if (l->src + l->len == src && l->dst + l->len == dst) {
            l->len += len;
            return;
        }
    }
    nxl_kv_piece_t *p = &o->p[o->n++];
    p->src = src;
    p->dst = dst;
    p->len = len;
}

/* offset in its block of token t, held head h (0-based) */
static inline uint64_t kv_inner(const nxl_kv_layout_t *l, const kv_geom_t *g, uint64_t t,
                                uint64_t h)
{
    return l->order == NXL_KV_HEADS_OUTER ? (h * l->block_tokens + t) * g->row
                                          : (t * g->hl + h) * g->row;
}

static nxl_status_t kv_seq_check(const nxl_kv_layout_t *l, const char *side, const uint32_t *ids,
                                 size_t n, size_t tokens, char *why, size_t cap)
{
    size_t need = tokens / l->block_tokens + (tokens % l->block_tokens != 0);
    if (n != need)
        return say(why, cap, "%s block list has %zu ids: %zu tokens in blocks of %u tokens need "
                   "%zu", side, n, tokens, l->block_tokens, need);
    if (n && !ids)
        return say(why, cap, "%s block list is NULL", side);
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= l->blocks)
            return say(why, cap, "%s block id %u (index %zu) is out of range: the layout has %u "
                       "blocks", side, ids[i], i, l->blocks);
    return NXL_SUCCESS;
}

/* Pieces of one plane, offsets relative to plane 0 of each side, into o
 * (room for tokens * heads pieces) */
static void kv_plan_plane(const nxl_kv_layout_t *d, const kv_geom_t *gd, const nxl_kv_layout_t *p,
                          const kv_geom_t *gp, const nxl_kv_seq_t *s, uint32_t g0, uint32_t g1,
                          kv_out_t *o)
{
    const uint64_t row = gd->row, nh = g1 - g0;
    const uint32_t hd = g0 - gd->h0, hp = g0 - gp->h0; /* first shared head, held index */
    const bool both_ho = d->order == NXL_KV_HEADS_OUTER && p->order == NXL_KV_HEADS_OUTER;
    const bool both_to = d->order == NXL_KV_TOKENS_OUTER && p->order == NXL_KV_TOKENS_OUTER;
    size_t i = 0;
    while (i < s->tokens) {
        /* a segment of tokens in one block on both sides */
        size_t pt = i % p->block_tokens, dt = i % d->block_tokens;
        size_t n = s->tokens - i;
        if (n > p->block_tokens - pt)
            n = p->block_tokens - pt;
        if (n > d->block_tokens - dt)
            n = d->block_tokens - dt;
        uint64_t sb = s->prefill_blocks[i / p->block_tokens] * gp->bs;
        uint64_t db = s->decode_blocks[i / d->block_tokens] * gd->bs;
        if (both_ho) { /* a head's tokens are contiguous on both sides */
            for (uint32_t h = 0; h < nh; h++)
                kv_put(o, sb + kv_inner(p, gp, pt, hp + h), db + kv_inner(d, gd, dt, hd + h),
                       n * row);
        } else if (both_to) { /* a token's heads are */
            for (size_t t = 0; t < n; t++)
                kv_put(o, sb + kv_inner(p, gp, pt + t, hp), db + kv_inner(d, gd, dt + t, hd),
                       nh * row);
        } else {
            for (size_t t = 0; t < n; t++)
                for (uint32_t h = 0; h < nh; h++)
                    kv_put(o, sb + kv_inner(p, gp, pt + t, hp + h),
                           db + kv_inner(d, gd, dt + t, hd + h), row);
        }
        i += n;
    }
}

/* The planner, the sentence into why; with no agent */
static nxl_status_t kv_plan(const nxl_kv_layout_t *d, const nxl_kv_layout_t *p,
                            const nxl_kv_seq_t *s, kv_out_t *o, char *why, size_t cap)
{
    kv_geom_t gd, gp;
    nxl_status_t st;
    memset(o, 0, sizeof(*o));
    if ((st = kv_geom(d, "decode", &gd, why, cap)) != NXL_SUCCESS ||
        (st = kv_geom(p, "prefill", &gp, why, cap)) != NXL_SUCCESS)
        return st;
    if (!s)
        return say(why, cap, "no sequence (nxl_kv_seq_t NULL)");
    if (d->layers != p->layers)
        return say(why, cap, "decode layout has %u layers, prefill layout %u", d->layers,
                   p->layers);
    if (d->heads != p->heads)
        return say(why, cap, "decode layout has %u heads, prefill layout %u (the model's "
                   "total on both sides)", d->heads, p->heads);
    if (d->head_size != p->head_size)
        return say(why, cap, "decode layout has head_size %u, prefill layout %u", d->head_size,
                   p->head_size);
    if (d->elem_size != p->elem_size)
        return say(why, cap, "decode layout has elem_size %u, prefill layout %u", d->elem_size,
                   p->elem_size);
    if ((st = kv_seq_check(d, "decode", s->decode_blocks, s->n_decode, s->tokens, why, cap)) ||
        (st = kv_seq_check(p, "prefill", s->prefill_blocks, s->n_prefill, s->tokens, why, cap)))
        return st;
    uint32_t g0 = gd.h0 > gp.h0 ? gd.h0 : gp.h0;
    uint32_t g1 = gd.h0 + gd.hl < gp.h0 + gp.hl ? gd.h0 + gd.hl : gp.h0 + gp.hl;
    if (g0 >= g1 || !s->tokens)
        return NXL_SUCCESS; /* nothing shared */
    /* one plane's pieces, then every plane's from them: the planes differ
     * by their strides only */
    size_t per, total;
    if (__builtin_mul_overflow(s->tokens, (size_t)(g1 - g0), &per) ||
        __builtin_mul_overflow(per, (size_t)d->layers, &total) ||
        total > SIZE_MAX / sizeof(*o->p) ||
        !(o->p = malloc(total * sizeof(*o->p))))
        return NXL_ERR_UNKNOWN;
    o->cap = total;
    kv_plan_plane(d, &gd, p, &gp, s, g0, g1, o);
    size_t n1 = o->n;
    if (d->layers > 1) {
        /* planes 1.. from plane 0's pieces; the copy of plane 0 moves to
         * the tail of the array first so that the output can grow over it
         * from the front (and merge across planes) */
        nxl_kv_piece_t *one = o->p + total - n1;
        memmove(one, o->p, n1 * sizeof(*one));
        o->n = 0;
        for (uint32_t l = 0; l < d->layers; l++) {
            uint64_t so = p->base + l * gp.ls, dof = d->base + l * gd.ls;
            for (size_t k = 0; k < n1; k++)
                kv_put(o, one[k].src + so, one[k].dst + dof, one[k].len);
        }
    } else {
        for (size_t k = 0; k < n1; k++) {
            o->p[k].src += p->base;
            o->p[k].dst += d->base;
        }
    }
    if (o->n < o->cap / 2) {
        nxl_kv_piece_t *q = realloc(o->p, (o->n ? o->n : 1) * sizeof(*q));
        if (q)
            o->p = q;
    }
    return NXL_SUCCESS;
}

nxl_status_t nxl_kv_plan(const nxl_kv_layout_t *decode, const nxl_kv_layout_t *prefill,
                         const nxl_kv_seq_t *seq, nxl_kv_piece_t **pieces, size_t *n, char *why,
                         size_t why_len)
{
    if (why && why_len)
        why[0] = 0;
    if (!pieces || !n)
        return say(why, why_len, "nxl_kv_plan: pieces and n are required");
    *pieces = NULL;
    *n = 0;
    kv_out_t o;
    nxl_status_t st = kv_plan(decode, prefill, seq, &o, why, why_len);
    if (st == NXL_ERR_UNKNOWN)
        say(why, why_len, "nxl_kv_plan: out of memory");
    if (st != NXL_SUCCESS) {
        free(o.p);
        return st;
    }
    if (!o.n) {
        free(o.p);
        o.p = NULL;
    }
    *pieces = o.p;
    *n = o.n;
    return NXL_SUCCESS;
}

/* ---- the CPU re-layout
 *
 * The planner made each piece as long as both layouts allow; what is left
 * is where the bytes go. Measured here (check_kvlayout t_copy_rate, caches
 * emptied before each copy; AMD EPYC, 2 cores shared with other work):
 *
 * - rows scattered on the destination (heads outer from tokens outer: a
 *   row of 256 B here, the next one a head further): memcpy() per piece
 *   ran at 0.72-0.76 of one memcpy() of the same bytes, non-temporal
 *   stores (the destination's lines are not read first) at 0.93-1.12;
 * - destinations written in sequence (tokens outer from tokens outer with
 *   part of the heads: runs of 1 KiB or 256 B, the source strided):
 *   memcpy() per piece 0.62-0.72 (1 KiB) and 0.60-0.68 (256 B),
 *   non-temporal stores 0.40-0.74 and 0.50-0.60. The source's unused half of each
 *   stride costs there (the prefetchers read much of it: with all of it
 *   read, 2 bytes in and 1 out per byte against memcpy()'s 1 and 1, the
 *   bound is 0.67), not the stores. The sources of the next pieces
 *   prefetched, KV_PREFETCH bytes ahead (the plan says where they are):
 *   1 KiB runs 0.66-0.81, 256 B runs 0.57-0.64 (no change).
 *
 * So non-temporal stores where a piece does not continue the previous
 * one's destination, memcpy() (glibc's, vector moves for this CPU) where
 * it does, the sources prefetched ahead in both; a loop of fixed 32-byte
 * moves for the usual lengths lost to memcpy() (4.5 against 14.7 GB/s for
 * 1 KiB). */
#define KV_PREFETCH 8192

#if defined(__x86_64__)
#include <emmintrin.h>
/* non-temporal stores: the destination's lines are not read first */
static void kv_copy_nt(unsigned char *d, const unsigned char *s, size_t len)
{
    for (size_t k = 0; k < len; k += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(s + k));
        __m128i b = _mm_loadu_si128((const __m128i *)(s + k + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + k + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(s + k + 48));
        _mm_stream_si128((__m128i *)(d + k), a);
        _mm_stream_si128((__m128i *)(d + k + 16), b);
        _mm_stream_si128((__m128i *)(d + k + 32), c);
        _mm_stream_si128((__m128i *)(d + k + 48), e);
    }
}
#endif

/* hot: the sources were just written (a staging group, in cache): every
 * aligned piece goes with non-temporal stores, in sequence or not, the
 * strided source that made memcpy() win above being read from cache; no
 * prefetch. Measured between processes (bench/kv-assembly: decode TP 1,
 * tokens outer, from 2 prefill processes of TP 2, heads outer, 32 MiB of
 * rows of 128 B written in sequence; the decode process's rate per CPU
 * second, 3 alternated runs, 2 loaded cores): the staged path ran at
 * 1.1-1.3 GB/s with memcpy() per piece there, 4.7-5.1 with non-temporal
 * stores, the same bytes in matching layouts at 6.7-7.5; the group's size
 * (64 KiB to 1 MiB) moved it by less than the noise. What remains is the
 * READ's: over cross-memory attach each descriptor costs the kernel a
 * page-table walk and a pin, so a staged READ of 4 KiB blocks (from 4
 * prefill ranks) runs at half the rate of the 32 KiB blocks of matching
 * layouts; units placed in the staging in their prefill order make blocks
 * next to each other one descriptor (kv_make_staged()). */
static void kv_copy(const nxl_kv_piece_t *pieces, size_t n, bool hot)
{
#if defined(__x86_64__)
    bool nt = false;
    size_t pf = 0;     /* the next piece whose source is prefetched */
    uint64_t pfb = 0;  /* bytes prefetched ahead of the piece copied */
    for (size_t i = 0; i < n; i++) {
        unsigned char *d = (unsigned char *)(uintptr_t)pieces[i].dst;
        const unsigned char *s = (const unsigned char *)(uintptr_t)pieces[i].src;
        size_t len = pieces[i].len;
        if (!hot) {
            /* (of a long piece its first KV_PREFETCH bytes: the
             * hardware's prefetchers follow it from there) */
            for (; pf < n && pfb < KV_PREFETCH; pf++) {
                const char *q = (const char *)(uintptr_t)pieces[pf].src;
                uint64_t m = pieces[pf].len < KV_PREFETCH ? pieces[pf].len : KV_PREFETCH;
                for (uint64_t k = 0; k < m; k += 64)
                    __builtin_prefetch(q + k, 0, 0);
                pfb += m;
            }
            pfb -= len < KV_PREFETCH ? len : KV_PREFETCH;
        }
        bool seq = !hot && i && pieces[i - 1].dst + pieces[i - 1].len == pieces[i].dst;
        if (!seq && !((uintptr_t)d & 15) && !(len & 63)) {
            kv_copy_nt(d, s, len);
            nt = true;
        } else {
            memcpy(d, s, len);
        }
    }
    if (nt)
        _mm_sfence();
#else
    (void)hot;
    for (size_t i = 0; i < n; i++)
        memcpy((void *)(uintptr_t)pieces[i].dst, (const void *)(uintptr_t)pieces[i].src,
               pieces[i].len);
#endif
}

void nxl_kv_copy(const nxl_kv_piece_t *pieces, size_t n)
{
    kv_copy(pieces, n, false);
}

/* ---- the KV transfer */

struct nxl_kv_xfer {
    nxl_agent_t *agent;
    LIST_ENTRY(nxl_kv_xfer) alink; /* in agent->kv_xfers until freed */
    int refs;                /* the application's, and one while a READ is in flight */
    nxl_kv_mode_t mode;
    size_t pieces;           /* what the decode side receives */
    uint64_t bytes;
    nxl_xfer_t **x;          /* the READs, one per group (zero copy: one; none: nothing to move) */
    size_t nx, cur;          /* ... and the one in flight */
    nxl_future_t *inner;     /* its post in flight */
    nxl_future_t *outer;     /* the application's, until completed */
    nxl_future_t *last;      /* ... and until settled (a reference): a re-post before is refused */
    nxl_kv_piece_t *copy;    /* staged: the re-layout, staging -> decode, group by group */
    size_t *gcopy;           /* ... group g's pieces: copy[gcopy[g] .. gcopy[g + 1]) */
    bool hot;                /* staged: a group's staging stays in cache until its re-layout */
    void *own;               /* staging this transfer allocated and registered */
    size_t own_len;
    bool own_alloc;          /* ... with nxl_mem_alloc() (device memory) */
    /* staged into device memory: the re-layout runs there */
    nxl_backend_t *dev_b;    /* the transport that does it (NXLT_CAP_RELAYOUT) */
    void *plan;              /* its plan of copy[] */
    nxl_future_t *rinner;    /* a group's re-layout in flight */
    size_t rd_next, rd_done; /* READs posted, done */
    size_t rl_next, rl_done; /* re-layouts posted, done */
    nxl_status_t fst;        /* the first failure, reported once nothing is in flight */
    char fwhy[NXLI_ERR_MAX];
};

void nxl_kv_opts_init(nxl_kv_opts_t *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof(*o));
    o->size = sizeof(*o);
}

static size_t kv_zcopy_min(const nxl_kv_opts_t *o)
{
    if (o && o->zcopy_min)
        return o->zcopy_min;
    const char *e = getenv("NXL_KV_ZCOPY_MIN");
    if (e && *e) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(e, &end, 10);
        if (!errno && !*end)
            return (size_t)v;
    }
    return NXL_KV_ZCOPY_MIN_DEFAULT;
}

/* what a make built: the READs, the re-layout, the staging */
static void kv_unmake(nxl_kv_xfer_t *kx)
{
    for (size_t g = 0; g < kx->nx; g++)
        if (kx->x[g])
            nxl_xfer_release(kx->x[g]);
    free(kx->x);
    if (kx->plan)
        kx->dev_b->ops->relayout_free(kx->dev_b->state, kx->plan);
    if (kx->own && kx->own_alloc) {
        nxl_mem_free(kx->agent, kx->own);
    } else if (kx->own) {
        nxl_desc_t d = {.addr = (uintptr_t)kx->own, .len = kx->own_len};
        nxl_mem_deregister(kx->agent, NXL_DRAM, &d, 1);
        free(kx->own);
    }
    free(kx->copy);
    free(kx->gcopy);
    kx->x = NULL;
    kx->nx = 0;
    kx->plan = NULL;
    kx->own = NULL;
    kx->own_len = 0;
    kx->own_alloc = false;
    kx->copy = NULL;
    kx->gcopy = NULL;
}

static void kv_free(nxl_kv_xfer_t *kx)
{
    LIST_REMOVE(kx, alink);
    if (kx->last)
        nxl_future_release(kx->last);
    kv_unmake(kx);
    free(kx);
}

static void kv_unref(nxl_kv_xfer_t *kx)
{
    if (--kx->refs == 0)
        kv_free(kx);
}

/* the application's future completes; kx lets go of it */
static void kv_finish(nxl_kv_xfer_t *kx, nxl_status_t st, const char *why)
{
    nxl_future_t *f = kx->outer;
    kx->outer = NULL;
    if (f) {
        f->on_cancel = NULL;
        f->cancel_hook = NULL;
        f->owner = NULL;
        if (f->cancel_wait)
            nxli_future_complete_canceled(f);
        else
            nxli_future_complete(f, st, why);
    }
}

static void kv_read_done(nxl_future_t *f, nxl_status_t st, void *arg);

/* staged, READ g done: the READ of g + 1 goes out (into the other half of
 * the staging ring), then group g is re-laid while it is in flight; when
 * that post fails, the future completes with its error */
static void kv_group_done(nxl_kv_xfer_t *kx, size_t g)
{
    if (g + 1 < kx->nx) {
        nxl_status_t st = nxl_xfer_post(kx->x[g + 1], kv_read_done, kx, &kx->inner);
        if (st != NXL_SUCCESS) {
            char why[NXLI_ERR_MAX];
            snprintf(why, sizeof(why), "KV transfer: the READ of group %zu of %zu could not be "
                     "posted: %s", g + 1, kx->nx, nxl_agent_last_error(kx->agent));
            kv_finish(kx, st, why);
            return;
        }
        kx->cur = g + 1;
        kx->refs++; /* kv_read_done's */
    }
    kv_copy(kx->copy + kx->gcopy[g], kx->gcopy[g + 1] - kx->gcopy[g], kx->hot);
    if (g + 1 == kx->nx)
        kv_finish(kx, NXL_SUCCESS, NULL);
}

/* ---- staged into device memory: the transport re-lays out each group
 *
 * READ g lands in half g % KV_RING of the ring, which the re-layout of
 * group g - KV_RING reads: it is posted once that re-layout is done. The
 * re-layout of group g is posted once READ g is done (the bytes are in the
 * staging: the launch comes after the staging copies). One READ and one
 * re-layout in flight at most: the re-layout of g runs while READ g + 1
 * is in flight. A failure (or a cancel) waits until neither is in flight:
 * the device may be writing the decode region until then. */

static void kv_relayout_done(nxl_future_t *f, nxl_status_t st, void *arg);

static void kv_dev_fail(nxl_kv_xfer_t *kx, nxl_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void kv_dev_fail(nxl_kv_xfer_t *kx, nxl_status_t st, const char *fmt, ...)
{
    if (kx->fst == NXL_SUCCESS) {
        kx->fst = st;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(kx->fwhy, sizeof(kx->fwhy), fmt, ap);
        va_end(ap);
    }
    if (kx->inner)
        nxl_future_cancel(kx->inner);
    if (kx->rinner)
        nxl_future_cancel(kx->rinner);
}

/* group g's re-layout, on the device */
static nxl_status_t kv_relayout_post(nxl_kv_xfer_t *kx, size_t g)
{
    nxl_agent_t *a = kx->agent;
    nxl_backend_t *b = kx->dev_b;
    nxl_future_t *f;
    nxlt_op_t *op = nxli_op_new_future(a, b, NXLI_F_EVENT, kv_relayout_done, kx, &f);
    if (!op) {
        nxli_err(a, "out of memory");
        return NXL_ERR_UNKNOWN;
    }
    a->err[0] = 0;
    op->in_call = true;
    nxl_status_t st = b->ops->relayout(b->state, op, kx->plan, kx->gcopy[g],
                                       kx->gcopy[g + 1] - kx->gcopy[g]);
    if (st != NXL_SUCCESS && !a->err[0])
        nxli_err(a, "%s could not re-lay out the group (%s)", b->ops->name, nxl_strerror(st));
    st = nxli_op_call_end(op, st);
    if (st != NXL_SUCCESS)
        return st;
    nxli_future_give(f, &kx->rinner);
    kx->refs++; /* kv_relayout_done's */
    return NXL_SUCCESS;
}

static void kv_dev_pump(nxl_kv_xfer_t *kx)
{
    if (!kx->outer)
        return;
    if (kx->fst != NXL_SUCCESS || kx->outer->cancel_wait) {
        if (!kx->inner && !kx->rinner)
            kv_finish(kx, kx->fst != NXL_SUCCESS ? kx->fst : NXL_ERR_CANCELED, kx->fwhy);
        return;
    }
    if (!kx->inner && kx->rd_next < kx->nx && kx->rd_next < kx->rl_done + KV_RING) {
        nxl_status_t st = nxl_xfer_post(kx->x[kx->rd_next], kv_read_done, kx, &kx->inner);
        if (st != NXL_SUCCESS) {
            kv_dev_fail(kx, st, "KV transfer: the READ of group %zu of %zu could not be "
                        "posted: %s", kx->rd_next, kx->nx, nxl_agent_last_error(kx->agent));
            kv_dev_pump(kx);
            return;
        }
        kx->rd_next++;
        kx->refs++; /* kv_read_done's */
    }
    if (!kx->rinner && kx->rl_next < kx->rd_done) {
        nxl_status_t st = kv_relayout_post(kx, kx->rl_next);
        if (st != NXL_SUCCESS) {
            kv_dev_fail(kx, st, "KV transfer: the re-layout of group %zu of %zu could not be "
                        "posted: %s", kx->rl_next, kx->nx, nxl_agent_last_error(kx->agent));
            kv_dev_pump(kx);
            return;
        }
        kx->rl_next++;
    }
    if (kx->rl_done == kx->nx)
        kv_finish(kx, NXL_SUCCESS, NULL);
}

static void kv_relayout_done(nxl_future_t *f, nxl_status_t st, void *arg)
{
    nxl_kv_xfer_t *kx = arg;
    kx->rinner = NULL;
    if (kx->outer) {
        if (st == NXL_SUCCESS)
            kx->rl_done++;
        else if (!kx->outer->cancel_wait)
            kv_dev_fail(kx, st, "KV transfer: the re-layout of group %zu of %zu on %s failed: %s",
                        kx->rl_done, kx->nx, kx->dev_b->ops->name, nxl_future_error(f));
        kv_dev_pump(kx);
    }
    nxl_future_release(f);
    kv_unref(kx);
}

static void kv_read_done(nxl_future_t *f, nxl_status_t st, void *arg)
{
    nxl_kv_xfer_t *kx = arg;
    kx->inner = NULL;
    if (kx->dev_b) {
        if (kx->outer) {
            if (st == NXL_SUCCESS)
                kx->rd_done++;
            else if (!kx->outer->cancel_wait)
                kv_dev_fail(kx, st, "KV transfer: the READ failed: %s", nxl_future_error(f));
            kv_dev_pump(kx);
        }
        nxl_future_release(f);
        kv_unref(kx);
        return;
    }
    if (kx->outer) {
        if (kx->outer->cancel_wait) {
            kv_finish(kx, NXL_ERR_CANCELED, NULL); /* the READ let go of the buffers */
        } else if (st != NXL_SUCCESS) {
            char why[NXLI_ERR_MAX];
            snprintf(why, sizeof(why), "KV transfer: the READ failed: %s", nxl_future_error(f));
            kv_finish(kx, st, why);
        } else if (kx->mode == NXL_KV_STAGED) {
            kv_group_done(kx, kx->cur);
        } else {
            kv_finish(kx, NXL_SUCCESS, NULL);
        }
    }
    nxl_future_release(f);
    kv_unref(kx);
}

/* the application canceled its future (cancel_wait set): the READ in
 * flight is canceled and completes it once it ended (kv_read_done) */
static void kv_cancel_hook(nxl_future_t *f)
{
    nxl_kv_xfer_t *kx = f->owner;
    if (!kx) {
        f->cancel_hook = NULL;
        nxli_future_complete_canceled(f);
        return;
    }
    if (kx->inner || kx->rinner) { /* completed once neither is in flight */
        if (kx->inner)
            nxl_future_cancel(kx->inner);
        if (kx->rinner)
            nxl_future_cancel(kx->rinner);
    } else {
        kv_finish(kx, NXL_ERR_CANCELED, NULL);
    }
}

/* completed at once (the agent's teardown, a deadline): kx lets go */
static void kv_on_cancel(nxl_future_t *f)
{
    nxl_kv_xfer_t *kx = f->owner;
    f->owner = NULL;
    f->on_cancel = NULL;
    f->cancel_hook = NULL;
    if (!kx)
        return;
    kx->outer = NULL;
    if (kx->inner)
        nxl_future_cancel(kx->inner);
    if (kx->rinner)
        nxl_future_cancel(kx->rinner);
}

/* the READ's descriptors, prepared and paired */
static nxl_status_t kv_make_read(nxl_agent_t *a, const char *peer, nxl_mem_t lmem, uint64_t ldev,
                                 nxl_mem_t rmem, uint64_t rdev, const nxl_kv_piece_t *p, size_t n,
                                 const nxl_kv_opts_t *o, nxl_xfer_t **out)
{
    nxl_desc_t *ld = malloc((n ? n : 1) * sizeof(*ld)), *rd = malloc((n ? n : 1) * sizeof(*rd));
    if (!ld || !rd) {
        free(ld);
        free(rd);
        nxli_err(a, "nxl_kv_xfer_make: out of memory for %zu descriptors", n);
        return NXL_ERR_UNKNOWN;
    }
    for (size_t i = 0; i < n; i++) {
        ld[i] = (nxl_desc_t){.addr = (uintptr_t)p[i].dst, .len = p[i].len, .dev_id = ldev};
        rd[i] = (nxl_desc_t){.addr = (uintptr_t)p[i].src, .len = p[i].len, .dev_id = rdev};
    }
    nxl_prepped_t *lp = NULL, *rp = NULL;
    nxl_status_t st = nxl_prep(a, NULL, lmem, ld, n, &lp);
    if (st == NXL_SUCCESS)
        st = nxl_prep(a, peer, rmem, rd, n, &rp);
    free(ld);
    free(rd);
    if (st == NXL_SUCCESS) {
        nxl_xfer_opts_t xo;
        nxl_xfer_opts_init(&xo);
        xo.backend = o ? o->backend : NULL;
        st = nxl_xfer_make(a, NXL_READ, lp, NULL, rp, NULL, n, &xo, out);
    }
    if (lp)
        nxl_prepped_release(lp);
    if (rp)
        nxl_prepped_release(rp);
    return st;
}

/* one unit of staging: its address on the prefill side, its index */
typedef struct kv_unit {
    uint64_t src, u;
} kv_unit_t;

static int kv_unit_cmp(const void *a, const void *b)
{
    const kv_unit_t *x = a, *y = b;
    return x->src < y->src ? -1 : x->src > y->src;
}

/* the bytes from end (of one unit, on the prefill side) to src (the next
 * one's, in address order) that the READ takes too: all of a gap of at
 * most max bytes, else none */
static inline uint64_t kv_gap(uint64_t end, uint64_t src, uint64_t max)
{
    return src > end && src - end <= max ? src - end : 0;
}

/* staged: the longest gap between two prefill units of a group that the
 * READ takes too ($NXL_KV_READ_GAP, bytes; 0, the default: none), into
 * its place in the staging, the two then one descriptor. Over cross-memory
 * attach each descriptor costs the kernel a page-table walk and a pin; the
 * gaps' bytes cost a copy and pins of their own. Measured (bench/kv-assembly
 * --spread: prefill blocks of 4 and 8 KiB, 4 and 2 prefill ranks, every
 * other block; NXL_KV_READ_GAP=8192; the decode process's rate per CPU
 * second, medians of 3, 2 shared cores): with the prefill's memory on
 * 2 MiB pages (UCX's thp_collapse=auto) 1.3-1.5 times that of the blocks
 * alone (2 ranks 5.9-7.1 -> 8.2-9.6 GB, 4 ranks 5.0 -> 7.4-7.5), on 4 KiB
 * pages (thp off) 0.6-0.65 times (4.7-4.8 -> 3.0-3.1, 3.9-4.3 -> 2.6-2.8:
 * the gaps' pages are pinned one by one too). Which of the two a peer's
 * region is, this side does not know: off unless asked for. */
static uint64_t kv_read_gap(void)
{
    const char *e = getenv("NXL_KV_READ_GAP");
    if (e && *e) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(e, &end, 10);
        if (!errno && !*end)
            return (uint64_t)v;
    }
    return 0;
}

/* staged: the READs into a ring of two groups' staging and the re-layout
 * from there, group by group. One unit of staging is what the READ brings
 * of one prefill block of one plane: the whole block, or, prefill heads
 * outer holding heads this decode rank does not, only the run of the heads
 * both hold (their tokens in sequence). The staging is described by a
 * layout of its own (those heads as a TP slice of the model's) at a virtual
 * base 0, planned against the decode layout like any prefill region; each
 * piece is then cut at the groups' edges and moved into its group's half of
 * the ring. */
static nxl_status_t kv_make_staged(nxl_kv_xfer_t *kx, nxl_agent_t *a, const char *peer,
                                   const nxl_kv_layout_t *decode, const nxl_kv_layout_t *prefill,
                                   const nxl_kv_seq_t *seq, const nxl_desc_t *staging,
                                   const nxl_kv_opts_t *opts, nxl_mem_t smem,
                                   bool *unreachable)
{
    kv_geom_t gp, gd;
    kv_geom(prefill, "prefill", &gp, NULL, 0);
    kv_geom(decode, "decode", &gd, NULL, 0);
    nxl_kv_layout_t sl = *prefill;
    uint64_t skip = 0; /* bytes of a prefill block before the run staged */
    uint32_t g0 = gd.h0 > gp.h0 ? gd.h0 : gp.h0;
    uint32_t g1 = gd.h0 + gd.hl < gp.h0 + gp.hl ? gd.h0 + gd.hl : gp.h0 + gp.hl;
    uint32_t w = g1 - g0;
    if (prefill->order == NXL_KV_HEADS_OUTER && w < gp.hl && !(prefill->heads % w) && !(g0 % w)) {
        sl.tp_size = prefill->heads / w;
        sl.tp_rank = g0 / w;
        skip = (uint64_t)(g0 - gp.h0) * prefill->block_tokens * gp.row;
    }
    uint64_t ub = (uint64_t)prefill->block_tokens * (sl.heads / sl.tp_size) * gp.row;
    size_t np = seq->n_prefill;
    uint64_t units = (uint64_t)prefill->layers * np, full = units * ub;
    uint64_t slice = opts && opts->slice_bytes ? opts->slice_bytes : KV_SLICE_DEFAULT;
    uint64_t per = slice / ub ? slice / ub : 1; /* units per group */
    if (per > units)
        per = units;
    size_t ng = (size_t)((units + per - 1) / per);
    kx->hot = true;
    /* where each unit lands in its group's half of the ring: in the order
     * of its address on the prefill side, so that prefill blocks next to
     * each other (in either order of the sequence) make one descriptor of
     * the READ, not one each (fewer, longer pieces for the transport) */
    kv_unit_t *us = malloc(units * sizeof(*us));
    uint64_t *slot = malloc(units * sizeof(*slot));
    if (!us || !slot) {
        free(us);
        free(slot);
        nxli_err(a, "nxl_kv_xfer_make: out of memory");
        return NXL_ERR_UNKNOWN;
    }
    for (uint64_t u = 0; u < units; u++)
        us[u] = (kv_unit_t){prefill->base + (u / np) * gp.ls +
                                (uint64_t)seq->prefill_blocks[u % np] * gp.bs + skip, u};
    for (size_t g = 0; g < ng; g++) {
        uint64_t u0 = g * per, u1 = (g + 1) * per < units ? (g + 1) * per : units;
        qsort(us + u0, u1 - u0, sizeof(*us), kv_unit_cmp);
    }
    /* ... with the gaps between them read too where they are short
     * (kv_gap()): slot[u] is unit u's offset in its group's staging */
    uint64_t gapmax = kv_read_gap();
    if (gapmax > ub) /* (no more bytes read in vain than staged) */
        gapmax = ub;
    uint64_t gb, span, need; /* the largest group's staging, the last one's, the ring's */
    for (;;) {
        gb = span = 0;
        for (size_t g = 0; g < ng; g++) {
            uint64_t u0 = g * per, u1 = (g + 1) * per < units ? (g + 1) * per : units;
            uint64_t off = 0;
            for (uint64_t k = u0; k < u1; k++) {
                if (k > u0)
                    off += kv_gap(us[k - 1].src + ub, us[k].src, gapmax);
                slot[us[k].u] = off;
                off += ub;
            }
            span = off;
            if (off > gb)
                gb = off;
        }
        need = ng > KV_RING ? KV_RING * gb : (ng - 1) * gb + span;
        /* (an application's staging sized for the blocks alone: no gaps) */
        if (!gapmax || !staging || staging->len >= need)
            break;
        gapmax = 0;
    }
    uintptr_t sbase;
    nxl_status_t st;
    /* smem: DRAM, or into device memory that device's memory, re-laid out
     * there by kx->dev_b (which reads DRAM staging too: pinned, mapped) */
    uint64_t sdev = smem == NXL_DRAM ? 0 : decode->dev_id;
    *unreachable = false;
    if (staging) {
        if (staging->len < need) {
            free(us);
            free(slot);
            nxli_err(a, "nxl_kv_xfer_make: the staging area of %zu bytes is too small: %zu "
                        "groups of %llu bytes (%u layers x %zu prefill blocks of %llu bytes "
                        "staged, slice_bytes %llu) need %llu", staging->len,
                     ng < KV_RING ? ng : (size_t)KV_RING, (unsigned long long)gb,
                     prefill->layers, np, (unsigned long long)ub, (unsigned long long)slice,
                     (unsigned long long)need);
            return NXL_ERR_INVALID_PARAM;
        }
        sbase = staging->addr;
    } else if (kx->dev_b) {
        /* (DRAM: pinned by the device's transport, which the kernel reads) */
        st = nxl_mem_alloc(a, smem, need, sdev, &kx->own);
        if (st != NXL_SUCCESS) {
            free(us);
            free(slot);
            kx->own = NULL;
            return st;
        }
        kx->own_alloc = true;
        kx->own_len = need;
        sbase = (uintptr_t)kx->own;
    } else {
        if (posix_memalign(&kx->own, 4096, need)) {
            free(us);
            free(slot);
            kx->own = NULL;
            nxli_err(a, "nxl_kv_xfer_make: out of memory for a staging area of %llu bytes",
                     (unsigned long long)need);
            return NXL_ERR_UNKNOWN;
        }
        nxl_desc_t d = {.addr = (uintptr_t)kx->own, .len = need};
        st = nxl_mem_register(a, NXL_DRAM, &d, 1, opts ? opts->backend : NULL);
        if (st != NXL_SUCCESS) {
            free(us);
            free(slot);
            free(kx->own);
            kx->own = NULL;
            return st;
        }
        kx->own_len = need;
        sbase = (uintptr_t)kx->own;
    }
    /* the re-layout, from the staging layout at base 0 */
    sl.base = 0;
    sl.len = full;
    sl.blocks = (uint32_t)np;
    sl.block_stride = ub;
    sl.layer_stride = np * ub;
    sl.mem = smem;
    uint32_t *ids = malloc(np * sizeof(*ids));
    if (!ids) {
        free(us);
        free(slot);
        nxli_err(a, "nxl_kv_xfer_make: out of memory");
        return NXL_ERR_UNKNOWN;
    }
    for (size_t j = 0; j < np; j++)
        ids[j] = (uint32_t)j;
    nxl_kv_seq_t ss = *seq;
    ss.prefill_blocks = ids;
    kv_out_t cp;
    char why[NXLI_ERR_MAX];
    st = kv_plan(decode, &sl, &ss, &cp, why, sizeof(why));
    free(ids);
    if (st != NXL_SUCCESS) {
        free(us);
        free(slot);
        free(cp.p);
        nxli_err(a, "nxl_kv_xfer_make: %s", st == NXL_ERR_UNKNOWN ? "out of memory" : why);
        return st;
    }
    /* the re-layout's pieces cut at the units' edges, grouped (in order
     * within a group), moved to their unit's place in the ring */
    kx->gcopy = calloc(ng + 1, sizeof(*kx->gcopy));
    size_t n2 = 0;
    for (size_t k = 0; kx->gcopy && k < cp.n; k++) {
        uint64_t ua = cp.p[k].src / ub, uz = (cp.p[k].src + cp.p[k].len - 1) / ub;
        for (uint64_t u = ua; u <= uz; u++)
            kx->gcopy[u / per + 1]++;
        n2 += (size_t)(uz - ua + 1);
    }
    if (!kx->gcopy || !(kx->copy = malloc((n2 ? n2 : 1) * sizeof(*kx->copy))) ||
        !(kx->x = calloc(ng, sizeof(*kx->x)))) {
        free(us);
        free(slot);
        free(cp.p);
        nxli_err(a, "nxl_kv_xfer_make: out of memory");
        return NXL_ERR_UNKNOWN;
    }
    for (size_t g = 0; g < ng; g++)
        kx->gcopy[g + 1] += kx->gcopy[g];
    size_t *pos = malloc(ng * sizeof(*pos));
    if (!pos) {
        free(us);
        free(slot);
        free(cp.p);
        nxli_err(a, "nxl_kv_xfer_make: out of memory");
        return NXL_ERR_UNKNOWN;
    }
    memcpy(pos, kx->gcopy, ng * sizeof(*pos));
    for (size_t k = 0; k < cp.n; k++) {
        uint64_t off = cp.p[k].src, dst = cp.p[k].dst, len = cp.p[k].len;
        while (len) {
            uint64_t u = off / ub;
            size_t g = (size_t)(u / per);
            uint64_t take = (u + 1) * ub - off;
            if (take > len)
                take = len;
            kx->copy[pos[g]++] = (nxl_kv_piece_t){
                .src = sbase + (g % KV_RING) * gb + slot[u] + (off - u * ub), .dst = dst,
                .len = take};
            off += take;
            dst += take;
            len -= take;
        }
    }
    free(pos);
    free(cp.p);
    if (kx->dev_b) { /* the pieces go to the device once */
        a->err[0] = 0;
        st = kx->dev_b->ops->relayout_prep(kx->dev_b->state, decode->mem, decode->dev_id,
                                           kx->copy, n2, &kx->plan);
        if (st != NXL_SUCCESS) {
            kx->plan = NULL;
            free(us);
            free(slot);
            if (a->err[0]) {
                char e[NXLI_ERR_MAX];
                snprintf(e, sizeof(e), "%s", a->err);
                nxli_err(a, "nxl_kv_xfer_make: %s", e);
            } else {
                nxli_err(a, "nxl_kv_xfer_make: %s could not prepare the re-layout (%s)",
                         kx->dev_b->ops->name, nxl_strerror(st));
            }
            return st;
        }
    }
    /* the READs: group g's units into half g % KV_RING of the ring, in
     * their order on the prefill side (runs that touch merged) */
    kv_out_t rd = {.p = malloc(2 * per * sizeof(*rd.p))}; /* (and the gaps read) */
    if (!rd.p) {
        free(us);
        free(slot);
        nxli_err(a, "nxl_kv_xfer_make: out of memory");
        return NXL_ERR_UNKNOWN;
    }
    kx->nx = ng;
    st = NXL_SUCCESS;
    for (size_t g = 0; g < ng && st == NXL_SUCCESS; g++) {
        rd.n = 0;
        uint64_t u0 = g * per, u1 = (g + 1) * per < units ? (g + 1) * per : units;
        uintptr_t at = sbase + (g % KV_RING) * gb;
        bool gaps = false;
        for (uint64_t k = u0; k < u1; k++) {
            uint64_t gap = k > u0 ? kv_gap(us[k - 1].src + ub, us[k].src, gapmax) : 0;
            if (gap) { /* read too, into its place between the two */
                kv_put(&rd, us[k - 1].src + ub, at + slot[us[k].u] - gap, gap);
                gaps = true;
            }
            kv_put(&rd, us[k].src, at + slot[us[k].u], ub);
        }
        st = kv_make_read(a, peer, smem, sdev, prefill->mem, prefill->dev_id, rd.p, rd.n, opts,
                          &kx->x[g]);
        if (st != NXL_SUCCESS && gaps && st != NXL_ERR_NOT_SUPPORTED) {
            /* a gap the peer has not registered (its blocks registered
             * apart, say): the blocks alone, each in its place */
            rd.n = 0;
            for (uint64_t k = u0; k < u1; k++)
                kv_put(&rd, us[k].src, at + slot[us[k].u], ub);
            st = kv_make_read(a, peer, smem, sdev, prefill->mem, prefill->dev_id, rd.p, rd.n,
                              opts, &kx->x[g]);
        }
        if (g == 0 && st == NXL_ERR_NOT_SUPPORTED)
            *unreachable = true; /* no transport READs the peer's blocks into smem */
    }
    free(us);
    free(slot);
    free(rd.p);
    return st;
}

nxl_status_t nxl_kv_xfer_make(nxl_agent_t *a, const char *peer, const nxl_kv_layout_t *decode,
                              const nxl_kv_layout_t *prefill, const nxl_kv_seq_t *seq,
                              const nxl_desc_t *staging, const nxl_kv_opts_t *opts,
                              nxl_kv_xfer_t **out)
{
    if (a && nxli_thread_foreign(a))
        return nxli_rpc_kv_xfer_make(a, peer, decode, prefill, seq, staging, opts, out);
    if (!a || !peer || !out) {
        if (a)
            nxli_err(a, "nxl_kv_xfer_make: the agent, the peer and out are required");
        return NXL_ERR_INVALID_PARAM;
    }
    *out = NULL;
    if (opts && opts->size < sizeof(*opts)) {
        nxli_err(a, "nxl_kv_xfer_make: opts size %zu is not sizeof(nxl_kv_opts_t) (%zu): "
                    "initialise them with nxl_kv_opts_init()", opts->size, sizeof(*opts));
        return NXL_ERR_INVALID_PARAM;
    }
    char why[NXLI_ERR_MAX];
    kv_out_t o;
    nxl_status_t st = kv_plan(decode, prefill, seq, &o, why, sizeof(why));
    if (st != NXL_SUCCESS) {
        free(o.p);
        if (st == NXL_ERR_UNKNOWN)
            nxli_err(a, "nxl_kv_xfer_make: out of memory for the plan");
        else
            nxli_err(a, "nxl_kv_xfer_make: %s", why);
        return st;
    }
    nxl_kv_xfer_t *kx = calloc(1, sizeof(*kx));
    if (!kx) {
        free(o.p);
        nxli_err(a, "nxl_kv_xfer_make: out of memory");
        return NXL_ERR_UNKNOWN;
    }
    kx->agent = a;
    kx->refs = 1;
    LIST_INSERT_HEAD(&a->kv_xfers, kx, alink);
    kx->pieces = o.n;
    for (size_t i = 0; i < o.n; i++)
        kx->bytes += o.p[i].len;
    nxl_kv_mode_t mode = opts ? opts->mode : NXL_KV_AUTO;
    if (mode == NXL_KV_AUTO)
        mode = !o.n || kx->bytes / o.n >= kv_zcopy_min(opts) ? NXL_KV_ZCOPY : NXL_KV_STAGED;
    kx->mode = mode;
    if (!o.n) { /* no head shared: an empty transfer */
        free(o.p);
        *out = kx;
        return NXL_SUCCESS;
    }
    if (mode == NXL_KV_ZCOPY) {
        if ((kx->x = calloc(1, sizeof(*kx->x))))
            kx->nx = 1;
        st = kx->x ? kv_make_read(a, peer, decode->mem, decode->dev_id, prefill->mem,
                                  prefill->dev_id, o.p, o.n, opts, &kx->x[0])
                   : NXL_ERR_UNKNOWN;
        if (!kx->x)
            nxli_err(a, "nxl_kv_xfer_make: out of memory");
        free(o.p);
        if (st != NXL_SUCCESS) {
            kv_free(kx);
            return st;
        }
        *out = kx;
        return NXL_SUCCESS;
    }
    free(o.p);
    if (mode != NXL_KV_STAGED) {
        kv_free(kx);
        nxli_err(a, "nxl_kv_xfer_make: mode %d is none of NXL_KV_AUTO, _ZCOPY, _STAGED",
                 (int)mode);
        return NXL_ERR_INVALID_PARAM;
    }
    if (decode->mem != NXL_DRAM) {
        /* re-laid out on the device, by a transport that can */
        for (int i = 0; i < a->nbackends && !kx->dev_b; i++) {
            const nxlt_ops_t *ops = a->backends[i]->ops;
            if ((ops->caps & NXLT_CAP_RELAYOUT) && (ops->caps & NXLT_CAP_PARAMS) &&
                (ops->mem_mask & (1u << decode->mem)) && ops->relayout_prep && ops->relayout &&
                ops->relayout_free)
                kx->dev_b = a->backends[i];
        }
        if (!kx->dev_b) {
            kv_free(kx);
            nxli_err(a, "nxl_kv_xfer_make: staged mode into %s re-lays out the staging on the "
                        "device and needs a transport that can (CUDA): agent '%s' has none "
                        "(create the CUDA backend, or force NXL_KV_ZCOPY)",
                     nxl_mem_name(decode->mem), a->name);
            return NXL_ERR_NOT_SUPPORTED;
        }
    }
    /* the staging: DRAM for a DRAM decode region; for device memory that
     * device's memory, unless no transport READs the peer's blocks into it
     * (UCX built without CUDA, LIBFABRIC): DRAM then, pinned, which the
     * device's re-layout reads. The application's staging is what it
     * registered. */
    nxl_mem_t smem = NXL_DRAM;
    if (kx->dev_b && !(staging && nxli_region_find(a, NXL_DRAM, 0, staging->addr,
                                                   staging->len ? staging->len : 1)))
        smem = decode->mem;
    bool unreachable;
    st = kv_make_staged(kx, a, peer, decode, prefill, seq, staging, opts, smem, &unreachable);
    if (st != NXL_SUCCESS && unreachable && !staging && smem != NXL_DRAM) {
        kv_unmake(kx);
        st = kv_make_staged(kx, a, peer, decode, prefill, seq, NULL, opts, NXL_DRAM,
                            &unreachable);
    } else if (st != NXL_SUCCESS && unreachable && smem != NXL_DRAM) {
        char e[NXLI_ERR_MAX];
        snprintf(e, sizeof(e), "%s", a->err);
        nxli_err(a, "%s (the staging given is %s, which no transport of agent '%s' READs into "
                    "from agent '%s': give registered DRAM, which the device's re-layout reads, "
                    "or none)", e, nxl_mem_name(smem), a->name, peer);
    }
    if (st != NXL_SUCCESS) {
        kv_free(kx);
        return st;
    }
    *out = kx;
    return NXL_SUCCESS;
}

nxl_status_t nxl_kv_xfer_post(nxl_kv_xfer_t *kx, nxl_done_cb cb, void *arg, nxl_future_t **out)
{
    if (!kx)
        return NXL_ERR_INVALID_PARAM;
    nxl_agent_t *a = kx->agent;
    if (nxli_thread_foreign(a))
        return nxli_rpc_kv_xfer_post(kx, cb, arg, out);
    if (kx->outer || kx->inner || (kx->last && !kx->last->settled)) {
        nxli_err(a, "nxl_kv_xfer_post: the KV transfer is still in flight");
        return NXL_ERR_REPOST_ACTIVE;
    }
    if (kx->last) {
        nxl_future_release(kx->last);
        kx->last = NULL;
    }
    nxl_future_t *f = nxli_future_new(a, NXLI_F_ALL, cb, arg);
    if (!f) {
        nxli_err(a, "nxl_kv_xfer_post: out of memory");
        return NXL_ERR_UNKNOWN;
    }
    if (kx->nx) {
        kx->cur = 0;
        kx->rd_next = 1;
        kx->rd_done = kx->rl_next = kx->rl_done = 0;
        kx->fst = NXL_SUCCESS;
        kx->fwhy[0] = 0;
        nxl_status_t st = nxl_xfer_post(kx->x[0], kv_read_done, kx, &kx->inner);
        if (st != NXL_SUCCESS) {
            nxli_future_discard(f);
            return st;
        }
        kx->refs++; /* kv_read_done's */
    }
    f->owner = kx;
    f->on_cancel = kv_on_cancel;
    f->cancel_hook = kv_cancel_hook;
    kx->outer = f;
    kx->last = f;
    f->refs++;
    if (!kx->nx)
        kv_finish(kx, NXL_SUCCESS, NULL); /* delivered on the next turn */
    nxli_future_give(f, out);
    return NXL_SUCCESS;
}

nxl_kv_mode_t nxl_kv_xfer_mode(const nxl_kv_xfer_t *kx, size_t *pieces, size_t *bytes)
{
    if (pieces)
        *pieces = kx ? kx->pieces : 0;
    if (bytes)
        *bytes = kx ? (size_t)kx->bytes : 0;
    return kx ? kx->mode : NXL_KV_AUTO;
}

void nxl_kv_xfer_release(nxl_kv_xfer_t *kx)
{
    if (!kx)
        return;
    if (nxli_thread_foreign(kx->agent)) {
        nxli_rpc_kv_xfer_release(kx);
        return;
    }
    if (kx->outer)
        nxl_future_cancel(kx->outer); /* completed once the READ let go (kv_read_done) */
    kv_unref(kx);
}

/* nxl_agent_destroy(): every future was canceled and its callbacks ran
 * (nxli_futures_cancel_all: kv_on_cancel let go of the application's,
 * kv_read_done of each READ's and its reference), so what remains of a
 * transfer is the application's reference: dropped here, as
 * nxl_kv_xfer_release() would (its handle is gone once destroy returned) */
void nxli_kv_cleanup(nxl_agent_t *a)
{
    nxl_kv_xfer_t *kx;
    while ((kx = LIST_FIRST(&a->kv_xfers))) {
        if (kx->outer)
            kv_finish(kx, NXL_ERR_CANCELED, NULL);
        kv_free(kx);
    }
}

nxl_agent_t *nxli_kv_agent(const nxl_kv_xfer_t *kx)
{
    return kx->agent;
}
