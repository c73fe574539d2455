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
 *              Flags: 1 takes one-message WRITEs, 2 sends revokes.
 *              "LFC1" ended after the endpoint name (flags 0, no doorbell).
 *   key:       "LFK1", u32 flags (1: virtual addressing), u64 key, u64 base
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

typedef struct lf_ci {
    bool v2;                     /* LFC2 (else LFC1) */
    uint32_t af;                 /* address format */
    char prov[LF_PROV_MAX];      /* provider name */
    const unsigned char *name;   /* the endpoint name (inside the info) */
    uint16_t name_len;
    unsigned flags;
    const unsigned char *bell;   /* the doorbell's name (inside the info), bell_len 0: none */
    size_t bell_len;
} lf_ci_t;

typedef struct lf_wkey {
    bool virt;
    uint64_t key, base;
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
    if (c->v2) {
        if (end + 2 > len)
            return "no flags and doorbell after the endpoint name";
        c->flags = b[end];
        c->bell_len = b[end + 1];
        if (end + 2 + c->bell_len != len)
            return "a doorbell name whose length does not match";
        if (c->bell_len == 1 || c->bell_len > LF_BELL_MAX || (c->bell_len && b[end + 2] != 0))
            return "a doorbell name that is not an abstract socket's";
        c->bell = c->bell_len ? b + end + 2 : NULL;
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

static inline const char *lf_key_parse(const void *buf, size_t len, lf_wkey_t *k)
{
    const unsigned char *b = buf;
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
