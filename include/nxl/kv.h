/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file nxl/kv.h
 * @brief KV-cache layouts and the READ that brings a sequence's blocks from
 *        a prefill worker's layout into a decode worker's.
 *
 * Prefill and decode workers often differ in tensor parallelism (prefill TP
 * 4, decode TP 2: a decode rank needs the heads of two prefill ranks), in
 * tokens per block (16 vs 32) and in the order inside a block (heads outer
 * or tokens outer). @ref nxl_kv_layout_t describes one worker's KV region;
 * nxl_kv_plan() computes the pieces that move a sequence from one layout to
 * the other; nxl_kv_xfer_make() turns them into a READ made by the decode
 * side, either
 *
 * - zero copy: one descriptor pair per piece, each piece landing where the
 *   decode layout wants it (pieces of a few KiB or more), or
 * - staged: bulk READs of the sequence's prefill blocks into a staging
 *   area of registered DRAM, each followed by a re-layout on the decode
 *   side's CPU (nxl_kv_copy()) on the reactor, pipelined in groups: the
 *   copy of one group runs while the READ of the next is in flight; of a
 *   heads-outer prefill rank holding heads the decode rank does not, only
 *   the heads both hold are read (pieces of a few hundred bytes: tokens
 *   outer with part of the heads).
 *
 * The future of nxl_kv_xfer_post() completes once the data is in its final
 * place. How the decode side learns the prefill side's layout is the
 * application's business (its handshake: the prefill worker sends its
 * layout next to its metadata); both layouts are passed in, the prefill
 * one with its addresses in the prefill process. With several prefill
 * ranks, make one transfer per prefill rank (a rank whose heads this
 * decode rank does not hold gives an empty transfer, which completes with
 * NXL_SUCCESS on the next turn) and join the futures with nxl_future_all().
 *
 * Element (plane p, block b, token t, head h, element e) of a layout lies at
 *
 *     base + p * layer_stride + b * block_stride + inner + e * elem_size
 *
 * with h_local = h - tp_rank * heads / tp_size and inner
 * (h_local * block_tokens + t) * head_size * elem_size (NXL_KV_HEADS_OUTER)
 * or (t * heads / tp_size + h_local) * head_size * elem_size
 * (NXL_KV_TOKENS_OUTER).
 *
 * Threads: as nxl.h says; nxl_kv_layout_check(), nxl_kv_plan() and
 * nxl_kv_copy() touch no agent and may be called from any thread.
 */
#ifndef NXL_KV_H
#define NXL_KV_H

#include <nxl.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The order of the dimensions inside a block. */
typedef enum nxl_kv_order {
    NXL_KV_HEADS_OUTER = 0, /**< [head][token][element] */
    NXL_KV_TOKENS_OUTER = 1 /**< [token][head][element] */
} nxl_kv_order_t;

/**
 * One worker's KV region. Initialise with nxl_kv_layout_init(), then set
 * fields: the leading @c size lets later versions add fields.
 */
typedef struct nxl_kv_layout {
    size_t size;           /**< sizeof(nxl_kv_layout_t) */
    /**
     * Planes: K and V each count as one, so a model of L layers with
     * separate K and V has 2 L planes (an MLA cache of one latent per
     * layer: L). Both sides must have the same number.
     */
    uint32_t layers;
    uint32_t blocks;       /**< blocks of each plane in the region */
    uint32_t block_tokens; /**< tokens per block */
    uint32_t heads;        /**< the model's KV heads, all TP ranks together */
    uint32_t head_size;    /**< elements per head and token */
    uint32_t elem_size;    /**< bytes per element (2: fp16/bf16) */
    nxl_kv_order_t order;  /**< the order inside a block */
    uint32_t tp_rank;      /**< this region holds heads [tp_rank * heads / tp_size, + heads / tp_size) */
    uint32_t tp_size;      /**< tensor parallelism (1: all heads) */
    uintptr_t base;        /**< the region's address (in its own process) */
    size_t len;            /**< the region's length in bytes (required: checked against the layout) */
    nxl_mem_t mem;         /**< its memory type (NXL_DRAM or NXL_VRAM) */
    uint64_t dev_id;       /**< its device */
    /**
     * Bytes from one plane to the next (0: packed, blocks * block_stride)
     * and from one block to the next within a plane (0: packed, one
     * block's bytes). Blocks outer ([block][plane]...) is block_stride =
     * layers * block bytes, layer_stride = block bytes.
     */
    size_t layer_stride;
    size_t block_stride;
} nxl_kv_layout_t;

/** Sets @p l to its defaults: zeroes, @c size, tp_size 1, NXL_DRAM. */
NXL_API void nxl_kv_layout_init(nxl_kv_layout_t *l);
/**
 * Checks one layout: every count non-zero, heads divisible by tp_size,
 * tp_rank below tp_size, no size that overflows, strides no smaller than a
 * block, the region long enough for every plane and block.
 * @param [out] why  a sentence naming the wrong number (may be NULL)
 * @return NXL_SUCCESS; NXL_ERR_INVALID_PARAM.
 */
NXL_API nxl_status_t nxl_kv_layout_check(const nxl_kv_layout_t *l, char *why, size_t why_len);

/** One sequence: its blocks on each side and its length in tokens. */
typedef struct nxl_kv_seq {
    const uint32_t *decode_blocks;  /**< token i is in decode_blocks[i / decode block_tokens] */
    size_t n_decode;                /**< exactly ceil(tokens / decode block_tokens) */
    const uint32_t *prefill_blocks; /**< token i is in prefill_blocks[i / prefill block_tokens] */
    size_t n_prefill;               /**< exactly ceil(tokens / prefill block_tokens) */
    size_t tokens;
} nxl_kv_seq_t;

/** One piece: @c len bytes from @c src (prefill side) to @c dst (decode side). */
typedef struct nxl_kv_piece {
    uint64_t src;
    uint64_t dst;
    uint64_t len;
} nxl_kv_piece_t;

/**
 * Computes the pieces that bring @p seq from @p prefill into @p decode:
 * the heads both regions hold, of every plane, every token; each piece
 * contiguous on both sides and as long as both layouts allow (runs that
 * touch are merged). Ordered plane by plane, token block by token block.
 * @param [out] pieces  a malloc'd array (free it with nxl_free()), NULL when none
 * @param [out] n       its length (0 when the two regions share no head)
 * @param [out] why     the sentence of a refusal (may be NULL)
 * @return NXL_SUCCESS; NXL_ERR_INVALID_PARAM (a layout refused by
 *         nxl_kv_layout_check(), the two disagree on planes, heads, head
 *         size or element size, a block list of the wrong length, a block
 *         id out of range); NXL_ERR_UNKNOWN (out of memory).
 */
NXL_API nxl_status_t nxl_kv_plan(const nxl_kv_layout_t *decode, const nxl_kv_layout_t *prefill,
                                 const nxl_kv_seq_t *seq, nxl_kv_piece_t **pieces, size_t *n,
                                 char *why, size_t why_len);
/**
 * The CPU re-layout: copies every piece, @c src to @c dst, both addresses
 * of this process (pieces must not overlap). Written for bandwidth:
 * pieces whose destination does not continue the previous piece's are
 * written with non-temporal stores (x86-64: the destination's lines are
 * not read first), the others with memcpy(); rows of 256 B scattered over
 * the destination copy at about the rate of one memcpy() of the same
 * bytes (lib/engine/kvlayout.c has the measurements).
 */
NXL_API void nxl_kv_copy(const nxl_kv_piece_t *pieces, size_t n);

/** How a KV transfer moves its pieces. */
typedef enum nxl_kv_mode {
    NXL_KV_AUTO = 0,   /**< zero copy when the mean piece is at least zcopy_min bytes, else staged */
    NXL_KV_ZCOPY = 1,  /**< one descriptor pair per piece */
    NXL_KV_STAGED = 2  /**< bulk READs of blocks into staging, each group then re-laid out
                            (nxl_kv_copy(); VRAM: the CUDA transport's kernel) */
} nxl_kv_mode_t;

/**
 * The mean piece length from which NXL_KV_AUTO moves pieces zero copy.
 * Measured (check_kvlayout with NXL_KV_BENCH=1: UCX over shared memory
 * between two agents of one process, 8 MiB of rows of one head, heads
 * outer from tokens outer, where staging reads no byte more than zero
 * copy; 2 shared cores): zero copy ran at 0.11 of the staged path's rate
 * with pieces of 256 B, 0.37 at 1 KiB, 0.64 at 2 KiB, 0.88 at 4 KiB, 1.12
 * at 8 KiB, 1.26 at 16 KiB (staged: 13.5 GB/s; zero copy 15.2 at 8 KiB,
 * 17.0 at 16 KiB). Measured again with the staged READ pipelined in
 * groups of 1 MiB (medians of 5 runs, 2 loaded cores): 0.92 at 4 KiB, 1.11
 * at 8 KiB, 1.23 at 16 KiB (staged 13.5 GB/s, as one READ then the whole
 * re-layout at these 8 MiB): the crossing did not move. Over a network, where each descriptor costs a work
 * request, the crossing lies elsewhere: measure, and set
 * nxl_kv_opts_t.zcopy_min or $NXL_KV_ZCOPY_MIN.
 */
#define NXL_KV_ZCOPY_MIN_DEFAULT 8192

/** Options of a KV transfer; initialise with nxl_kv_opts_init(). */
typedef struct nxl_kv_opts {
    size_t size;          /**< sizeof(nxl_kv_opts_t) */
    nxl_kv_mode_t mode;   /**< NXL_KV_AUTO (default), or force one */
    size_t zcopy_min;     /**< AUTO's threshold (0: $NXL_KV_ZCOPY_MIN, else NXL_KV_ZCOPY_MIN_DEFAULT) */
    size_t slice_bytes;   /**< staged: bytes staged per group (a READ, its re-layout; 0: 1 MiB) */
    nxl_backend_t *backend; /**< force a backend (NULL: first that holds both sides) */
} nxl_kv_opts_t;

NXL_API void nxl_kv_opts_init(nxl_kv_opts_t *o);

typedef struct nxl_kv_xfer nxl_kv_xfer_t;

/**
 * Makes the READ (and, staged, the re-layout) that brings @p seq from
 * @p prefill, a region of the loaded remote agent @p peer, into
 * @p decode, a region of this agent. Both regions must be registered
 * (decode by this agent, prefill by @p peer); the layouts are checked and
 * planned as nxl_kv_plan() says.
 *
 * @param [in] staging  staged mode: registered DRAM of this agent (for a
 *                      VRAM decode region: VRAM of its device, or registered
 *                      DRAM, which the device's re-layout reads) for two
 *                      groups of the sequence's staged prefill blocks
 *                      (layers x n_prefill x one prefill block's bytes
 *                      always suffice; a shorter one than needed is refused
 *                      with the size needed); NULL: the transfer allocates
 *                      and registers its own, freed by nxl_kv_xfer_release()
 *                      (for VRAM: VRAM where a transport READs the peer's
 *                      blocks into it, else pinned DRAM).
 *                      Held by the transfer until it is released.
 *                      $NXL_KV_READ_GAP (bytes; unset or 0: none): staged,
 *                      a gap of at most that many bytes (and one staged
 *                      block) between two prefill blocks of a group is
 *                      READ too, the two one descriptor (over cross-memory
 *                      attach 1.3-1.5 times the rate of spread blocks of
 *                      4-8 KiB on 2 MiB pages, 0.6-0.65 times on 4 KiB
 *                      pages: lib/engine/kvlayout.c); the staging then
 *                      holds the gaps too, unless the application's is
 *                      sized for the blocks alone (or the peer has not
 *                      registered a gap): then the blocks alone.
 * @return NXL_SUCCESS; NXL_ERR_INVALID_PARAM (see nxl_kv_plan(), staging
 *         too short); NXL_ERR_NOT_SUPPORTED (staged with a decode region
 *         that is not DRAM and no transport of the agent that re-lays it
 *         out on the device: for VRAM the CUDA transport, built with nvcc,
 *         the sentence says which); what nxl_prep()
 *         and nxl_xfer_make() return (a region not registered, an unknown
 *         peer). On error nothing is made; the sentence is in
 *         nxl_agent_last_error().
 */
NXL_API nxl_status_t nxl_kv_xfer_make(nxl_agent_t *a, const char *peer,
                                      const nxl_kv_layout_t *decode,
                                      const nxl_kv_layout_t *prefill, const nxl_kv_seq_t *seq,
                                      const nxl_desc_t *staging, const nxl_kv_opts_t *opts,
                                      nxl_kv_xfer_t **out);
/**
 * Posts it. The future completes once every byte is in its place in the
 * decode region: after the READ (zero copy), or after the last group's
 * READ and re-layout (staged: groups of @c slice_bytes, the re-layout of
 * one on the reactor while the READ of the next is in flight). A cancel
 * (nxl_future_cancel(), nxl_kv_xfer_release()) cancels the READ in flight
 * and completes the future with NXL_ERR_CANCELED once it ended; the data
 * may have moved in part. At the agent's teardown the
 * future completes with NXL_ERR_CANCELED as every pending one does, and
 * nxl_agent_destroy() releases the KV transfers not released (their READs,
 * the staging they allocated and registered): their handles are invalid
 * once it returned, their futures the application holds are not.
 * @return NXL_SUCCESS (started); NXL_ERR_REPOST_ACTIVE (still in flight);
 *         what nxl_xfer_post() returns. On error nothing started.
 */
NXL_API nxl_status_t nxl_kv_xfer_post(nxl_kv_xfer_t *kx, nxl_done_cb cb, void *arg,
                                      nxl_future_t **out);
/**
 * @return the mode chosen (NXL_KV_ZCOPY or NXL_KV_STAGED); the pieces the
 *         decode side receives and their bytes into @p pieces and @p bytes
 *         (each may be NULL).
 */
NXL_API nxl_kv_mode_t nxl_kv_xfer_mode(const nxl_kv_xfer_t *kx, size_t *pieces, size_t *bytes);
/**
 * Releases it; one in flight is canceled (its future completes with
 * NXL_ERR_CANCELED). nxl_agent_destroy() releases those left; do not
 * release one after its agent was destroyed.
 */
NXL_API void nxl_kv_xfer_release(nxl_kv_xfer_t *kx);

#ifdef __cplusplus
}
#endif
#endif /* NXL_KV_H */
