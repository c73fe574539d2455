/* SPDX-License-Identifier: BSD-3-Clause */
/* kv_fixture.h: KV layout fixtures shared by tests/check_kvlayout.c and
 * tests/device/kv-relayout-gpu.cu (built by nvcc): a packed layout of one
 * rank, and the byte offsets of a layout computed from the definition in
 * nxl/kv.h, independently of the planner. Plain C that compiles as C and
 * as CUDA C++: static inline, no variable-length arrays, no designated
 * initializers. */
#ifndef NXL_TESTS_KV_FIXTURE_H
#define NXL_TESTS_KV_FIXTURE_H

#include <nxl/kv.h>

#include <stddef.h>
#include <stdint.h>

/* a packed layout of one rank (len: exactly what it needs) */
static inline nxl_kv_layout_t mk(uint32_t layers, uint32_t blocks, uint32_t bt,
                                 uint32_t heads, uint32_t hs, uint32_t es, uint32_t tp,
                                 uint32_t rank, nxl_kv_order_t order, uintptr_t base)
{
    nxl_kv_layout_t l;
    nxl_kv_layout_init(&l);
    l.layers = layers;
    l.blocks = blocks;
    l.block_tokens = bt;
    l.heads = heads;
    l.head_size = hs;
    l.elem_size = es;
    l.tp_size = tp;
    l.tp_rank = rank;
    l.order = order;
    l.base = base;
    l.len = (size_t)layers * blocks * bt * (heads / tp) * hs * es;
    return l;
}

/* The reference: the byte offset in l of (plane, block, slot, global head,
 * byte of the row), written from the definition in nxl/kv.h */
static inline uint64_t ref_off(const nxl_kv_layout_t *l, uint32_t p, uint32_t b, uint32_t t,
                               uint32_t g, uint32_t k)
{
    uint64_t row = (uint64_t)l->head_size * l->elem_size, hl = l->heads / l->tp_size;
    uint64_t bb = l->block_tokens * hl * row;
    uint64_t bs = l->block_stride ? l->block_stride : bb;
    uint64_t ls = l->layer_stride ? l->layer_stride : bs * l->blocks;
    uint64_t h = g - l->tp_rank * hl;
    uint64_t in = l->order == NXL_KV_HEADS_OUTER ? (h * l->block_tokens + t) * row
                                                 : (t * hl + h) * row;
    return p * ls + b * bs + in + k;
}

#endif
