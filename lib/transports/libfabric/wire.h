/* SPDX-License-Identifier: BSD-3-Clause */
/* The LIBFABRIC transport's connection info and memory keys as they travel
 * in metadata, and its revoke message as it travels between peers: packed
 * and parsed here, header-only and without libfabric,
 * so that tests/fuzz/fuzz_wire.c calls the same code as the transport.
 *
 *   conn info: "LFC2", u32 address format, u8 provider length, provider
 *              (no NUL, < 64 bytes), u16 name length (> 0), the endpoint name,
 *              u8 flags, u8 length + the doorbell's abstract socket name
 *              (0: none; else a leading NUL, at most sun_path's 108 bytes).
 *              Flags: 1 takes one-message WRITEs, 2 sends revokes, 4 has
 *              rails: then, after the doorbell, u8 n (1 to LF_RAILS_MAX) and
 *              n x (u16 length (> 0), the rail endpoint's name). Only an agent
 *              with rails sets 4 (an older peer refuses that info).
 *              "LFC1" ended after the endpoint name (flags 0, no doorbell).
 *   key:       "LFK1", u32 flags (1: virtual addressing), u64 key, u64 base;
 *              with rails, then 'R', u8 n (1 to LF_RAILS_MAX), n x u64: the
 *              region's key in each rail's domain (same base)
 *   revoke:    'R', u8 name length (> 0), the sending agent's name (no NUL),
 *              u8 memory type, u64 device, u64 address, u64 length: that
 *              agent deregistered the region. It arrives in the receive
 *              buffers kept for notifications, whose first byte (the high
 *              byte of a name length of at most 255) is 0, never 'R'.
 * (integers big endian) */
#ifndef NXL_LF_WIRE_H
#define NXL_LF_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../common/be.h"

#define LF_PROV_MAX 64
#define LF_KEY_LEN 24
#define LF_BELL_MAX 108 /* sizeof(sockaddr_un.sun_path) */
#define LF_CI_RAILS 4    /* conn info flag: a rails block follows the doorbell */
#define LF_RAILS_MAX 8
#define LF_KEY_RAILS_TAG 'R'

typedef struct lf_ci {
    bool v2;                     /* LFC2 (else LFC1) */
    uint32_t af;                 /* address format */
    char prov[LF_PROV_MAX];      /* provider name */
    const unsigned char *name;   /* the endpoint name (inside the info) */
    uint16_t name_len;
    unsigned flags;
    const unsigned char *bell;   /* the doorbell's name (inside the info), bell_len 0: none */
    size_t bell_len;
    unsigned nrails;             /* with LF_CI_RAILS: its rails' endpoint names (inside the info) */
    const unsigned char *rail_name[LF_RAILS_MAX];
    uint16_t rail_name_len[LF_RAILS_MAX];
} lf_ci_t;

typedef struct lf_wkey {
    bool virt;
    uint64_t key, base;
    unsigned nrails;             /* keys in the rails' domains (0: none) */
    uint64_t rail_key[LF_RAILS_MAX];
} lf_wkey_t;

/* big-endian integers of n bytes (../common/be.h) */
#define lf_put_be nxl_be_put
#define lf_get_be nxl_be_get

/* bytes conn info (LFC2) takes: 0 when prov, the name or the doorbell's do not fit */
static inline size_t lf_ci_size(const char *prov, size_t name_len, size_t bell_len)
{
    size_t pl = strlen(prov);
    return pl < LF_PROV_MAX && name_len && name_len <= 0xffff && bell_len != 1 &&
                   bell_len <= LF_BELL_MAX
               ? 13 + pl + name_len + bell_len
               : 0;
}

static inline void lf_ci_pack(unsigned char *b, uint32_t af, const char *prov, const void *name,
                              size_t name_len, unsigned flags, const void *bell, size_t bell_len)
{
    size_t pl = strlen(prov);
    memcpy(b, "LFC2", 4);
    lf_put_be(b + 4, af, 4);
    b[8] = (unsigned char)pl;
    memcpy(b + 9, prov, pl);
    lf_put_be(b + 9 + pl, name_len, 2);
    memcpy(b + 11 + pl, name, name_len);
    b[11 + pl + name_len] = (unsigned char)flags;
    b[12 + pl + name_len] = (unsigned char)bell_len;
    if (bell_len)
        memcpy(b + 13 + pl + name_len, bell, bell_len);
}

/* bytes a rails block of n names (lens[i] bytes each) takes: 0 when it does not fit */
static inline size_t lf_ci_rails_size(unsigned n, const size_t *lens)
{
    size_t l = 1;
    if (n < 1 || n > LF_RAILS_MAX)
        return 0;
    for (unsigned i = 0; i < n; i++) {
        if (!lens[i] || lens[i] > 0xffff)
            return 0;
        l += 2 + lens[i];
    }
    return l;
}

/* the rails block, at the end of an info packed with LF_CI_RAILS in its flags */
static inline void lf_ci_rails_pack(unsigned char *b, unsigned n, const unsigned char *const *names,
                                    const size_t *lens)
{
    *b++ = (unsigned char)n;
    for (unsigned i = 0; i < n; i++) {
        lf_put_be(b, lens[i], 2);
        memcpy(b + 2, names[i], lens[i]);
        b += 2 + lens[i];
    }
}

/* NULL, or what is wrong with it */
static inline const char *lf_ci_parse(const void *info, size_t len, lf_ci_t *c)
{
    const unsigned char *b = info;
    if (len < 11 || (memcmp(b, "LFC1", 4) && memcmp(b, "LFC2", 4)))
        return "no LFC1 or LFC2 header";
    c->v2 = b[3] == '2';
    size_t pl = b[8];
    if (pl >= LF_PROV_MAX || 11 + pl > len || memchr(b + 9, 0, pl))
        return "a malformed provider name";
    memcpy(c->prov, b + 9, pl);
    c->prov[pl] = 0;
    c->af = (uint32_t)lf_get_be(b + 4, 4);
    c->name_len = (uint16_t)lf_get_be(b + 9 + pl, 2);
    size_t end = 11 + pl + c->name_len; /* past the name */
    if (!c->name_len || end > len || (!c->v2 && end != len))
        return "an endpoint name whose length does not match";
    c->name = b + 11 + pl;
    c->flags = 0;
    c->bell = NULL;
    c->bell_len = 0;
    c->nrails = 0;
    if (c->v2) {
        if (end + 2 > len)
            return "no flags and doorbell after the endpoint name";
        c->flags = b[end];
        c->bell_len = b[end + 1];
        bool rails = c->flags & LF_CI_RAILS;
        if (rails ? end + 2 + c->bell_len >= len : end + 2 + c->bell_len != len)
            return "a doorbell name whose length does not match";
        if (c->bell_len == 1 || c->bell_len > LF_BELL_MAX || (c->bell_len && b[end + 2] != 0))
            return "a doorbell name that is not an abstract socket's";
        c->bell = c->bell_len ? b + end + 2 : NULL;
        if (rails) {
            size_t at = end + 2 + c->bell_len;
            unsigned n = b[at++];
            if (n < 1 || n > LF_RAILS_MAX)
                return "a rails block of no rails or too many";
            for (unsigned i = 0; i < n; i++) {
                if (at + 2 > len)
                    return "a rails block shorter than its count";
                size_t nl = (size_t)lf_get_be(b + at, 2);
                if (!nl || at + 2 + nl > len)
                    return "a rail's endpoint name whose length does not match";
                c->rail_name[i] = b + at + 2;
                c->rail_name_len[i] = (uint16_t)nl;
                at += 2 + nl;
            }
            if (at != len)
                return "bytes after the rails block";
            c->nrails = n;
        }
    }
    return NULL;
}

static inline void lf_key_pack(unsigned char *b, const lf_wkey_t *k)
{
    memcpy(b, "LFK1", 4);
    lf_put_be(b + 4, k->virt ? 1 : 0, 4);
    lf_put_be(b + 8, k->key, 8);
    lf_put_be(b + 16, k->base, 8);
}

/* bytes the rails trailer of n keys takes after a key */
static inline size_t lf_key_rails_size(unsigned n)
{
    return n ? 2 + 8 * (size_t)n : 0;
}

/* the trailer of k's rail keys, at b (LF_KEY_LEN bytes into the key) */
static inline void lf_key_rails_pack(unsigned char *b, const lf_wkey_t *k)
{
    b[0] = LF_KEY_RAILS_TAG;
    b[1] = (unsigned char)k->nrails;
    for (unsigned i = 0; i < k->nrails; i++)
        lf_put_be(b + 2 + 8 * i, k->rail_key[i], 8);
}

static inline const char *lf_key_parse(const void *buf, size_t len, lf_wkey_t *k)
{
    const unsigned char *b = buf;
    k->nrails = 0;
    if (len > LF_KEY_LEN + 2 && b[LF_KEY_LEN] == LF_KEY_RAILS_TAG) {
        unsigned n = b[LF_KEY_LEN + 1];
        if (n < 1 || n > LF_RAILS_MAX || len != LF_KEY_LEN + lf_key_rails_size(n))
            return "a rails trailer whose length does not match";
        for (unsigned i = 0; i < n; i++)
            k->rail_key[i] = lf_get_be(b + LF_KEY_LEN + 2 + 8 * i, 8);
        k->nrails = n;
        len = LF_KEY_LEN;
    }
    if (len != LF_KEY_LEN || memcmp(b, "LFK1", 4))
        return "not 24 bytes starting LFK1";
    uint64_t fl = lf_get_be(b + 4, 4);
    if (fl > 1)
        return "unknown flags";
    k->virt = fl == 1;
    k->key = lf_get_be(b + 8, 8);
    k->base = lf_get_be(b + 16, 8);
    return NULL;
}

/* ---- revoke */

#define LF_RV_TAG 'R'
#define LF_RV_FIXED 27 /* the tag, the name length, type, device, address, length */

typedef struct lf_rv {
    char from[256];              /* NUL-terminated */
    unsigned type;
    uint64_t dev, addr, len;
} lf_rv_t;

/* bytes a revoke from an agent of that name takes: 0 when the name does not fit */
static inline size_t lf_rv_size(size_t name_len)
{
    return name_len && name_len <= 255 ? LF_RV_FIXED + name_len : 0;
}

static inline void lf_rv_pack(unsigned char *b, const char *name, size_t name_len, unsigned type,
                              uint64_t dev, uint64_t addr, uint64_t len)
{
    b[0] = LF_RV_TAG;
    b[1] = (unsigned char)name_len;
    memcpy(b + 2, name, name_len);
    b += 2 + name_len;
    b[0] = (unsigned char)type;
    lf_put_be(b + 1, dev, 8);
    lf_put_be(b + 9, addr, 8);
    lf_put_be(b + 17, len, 8);
}

/* NULL, or what is wrong with it */
static inline const char *lf_rv_parse(const void *buf, size_t len, lf_rv_t *r)
{
    const unsigned char *b = buf;
    if (len < 2 || b[0] != LF_RV_TAG)
        return "no revoke tag";
    size_t nl = b[1];
    if (!nl || len != LF_RV_FIXED + nl)
        return "a length that does not match its name's";
    if (memchr(b + 2, 0, nl))
        return "a NUL in the agent's name";
    memcpy(r->from, b + 2, nl);
    r->from[nl] = 0;
    b += 2 + nl;
    r->type = b[0];
    r->dev = lf_get_be(b + 1, 8);
    r->addr = lf_get_be(b + 9, 8);
    r->len = lf_get_be(b + 17, 8);
    return NULL;
}

#endif
