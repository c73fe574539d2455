/* SPDX-License-Identifier: BSD-3-Clause */
/* kv_stream: the bytes of a KV block. Every byte written depends on
 * (layer, block, offset), so decode can check each layer on arrival. */
#include "kv_stream.h"

#include <string.h>

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The bytes of (layer, block): byte i is byte i % 8 (little-endian) of
 * word i / 8, the same on every host. */
static void pattern(uint8_t *p, size_t len, uint64_t layer, uint64_t block)
{
    uint64_t seed = mix64(layer * 0x100000001b3ull ^ mix64(block));
    size_t nw = len / 8, w;
    for (w = 0; w < nw; w++, p += 8) {
        uint64_t v = mix64(seed + w);
        p[0] = (uint8_t)v;
        p[1] = (uint8_t)(v >> 8);
        p[2] = (uint8_t)(v >> 16);
        p[3] = (uint8_t)(v >> 24);
        p[4] = (uint8_t)(v >> 32);
        p[5] = (uint8_t)(v >> 40);
        p[6] = (uint8_t)(v >> 48);
        p[7] = (uint8_t)(v >> 56);
    }
    uint64_t v = mix64(seed + w);
    for (size_t k = 0; k < len % 8; k++)
        p[k] = (uint8_t)(v >> (8 * k));
}

void fill_layer(uint8_t *layer_base, const opts_t *o, unsigned long layer)
{
    for (unsigned long b = 0; b < o->blocks; b++)
        pattern(layer_base + b * o->block_size, o->block_size, layer, b);
}

/* Counts the bytes of a layer that differ from the pattern; *first_block and
 * *first_off locate the first one. scratch holds block_size bytes. */
uint64_t check_layer(const uint8_t *layer_base, const opts_t *o, unsigned long layer,
                            uint8_t *scratch, unsigned long *first_block, size_t *first_off)
{
    uint64_t bad = 0;
    for (unsigned long b = 0; b < o->blocks; b++) {
        const uint8_t *p = layer_base + b * o->block_size;
        pattern(scratch, o->block_size, layer, b);
        if (!memcmp(p, scratch, o->block_size))
            continue;
        for (size_t i = 0; i < o->block_size; i++)
            if (p[i] != scratch[i] && bad++ == 0) {
                *first_block = b;
                *first_off = i;
            }
    }
    return bad;
}

