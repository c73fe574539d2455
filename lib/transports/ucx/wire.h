/* SPDX-License-Identifier: BSD-3-Clause */
/* What nxl itself reads of a UCX peer's connection info: the magic, the
 * flags byte and, in version 2, the peer's same-host identity for
 * cross-memory attach; the rest is UCX's worker address, which only UCX
 * unpacks (doc/security.md, "Trust"). Header-only, without UCX, so that
 * tests/fuzz/fuzz_wire.c calls the same code as the transport.
 *
 *   version 1: [magic "nxlucx\0\1"][flags][UCX worker address]
 *   version 2: [magic "nxlucx\0\2"][flags, CI_CMA set][u16 CI_CMA_LEN]
 *              [the CMA identity: boot id (16), u64 pid namespace device,
 *              u64 pid namespace inode, u32 pid, u64 cookie address,
 *              u64 cookie][UCX worker address]
 *
 * Integers big-endian. A peer that does not know its identity sends
 * version 1, byte for byte what nxl sent before version 2; an nxl that
 * knows only version 1 refuses a version 2 info with a sentence. One with
 * cma=off sends version 2 with CI_NO_CMA: peers watch its process by the
 * identity, and copy into it only if they ignore that flag (older nxl). */
#ifndef NXL_UCX_WIRE_H
#define NXL_UCX_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../common/be.h"

/* Connection info: this magic (its last byte the version), a flags byte,
 * then UCX's worker address. */
static const unsigned char CI_MAGIC[8] = {'n', 'x', 'l', 'u', 'c', 'x', 0, 1};
#define CI_HDR 9
#define CI_AM_WRITE 0x01 /* the peer copies AM_WRITE messages into its memory */
#define CI_CMA 0x02      /* version 2: the peer's identity for cross-memory attach follows */
#define CI_AM_ACK 0x04   /* ... and acknowledges those that ask, once copied (or dropped) */
#define CI_NO_CMA 0x08   /* with CI_CMA: the identity only, for watching the peer's process;
                          * it asked not to be copied into (cma=off). An nxl that does not
                          * know this flag ignores it (and copies) */
#define CI_AM_ACK_NAME 0x10 /* with CI_AM_ACK: acknowledges an AM_WRITE sent without UCX's
                             * reply flag on its own endpoint to the sender, found by the
                             * sender's name (am.c) */
#define CI_RAILS 0x20    /* the peer's rails (rails.c) come before UCX's worker address:
                          * [u16 block length][u8 n][n x ([u16 length][worker address])].
                          * Sent only with the rails parameter; an nxl that does not know
                          * it takes the block for the worker address and fails to connect */
#define CI_AM_READ 0x40  /* with CI_AM_ACK_NAME: answers AM_READ requests with the bytes,
                          * on its own endpoint to the sender found by name (am.c) */
#define CI_AM_BARE 0x80  /* with CI_AM_ACK_NAME: takes an AM_WRITE without a notification
                          * (a 9-byte header, am.c); an nxl that does not know this flag
                          * would deliver an empty notification for it: not sent one */
#define CI_CMA_LEN 52

/* A peer's identity for cross-memory attach: same host (boot id), same pid
 * namespace (its /proc/self/ns/pid), its pid, and an 8-byte cookie at an
 * address of its own, read through process_vm_readv to prove that the pid
 * is that process and that the kernel lets us reach it. */
typedef struct ucx_ci_cma {
    unsigned char boot[16];
    uint64_t ns_dev, ns_ino;
    uint32_t pid;
    uint64_t cookie_addr, cookie;
} ucx_ci_cma_t;

/* big-endian integers of n bytes (../common/be.h) */
#define ucx_ci_put nxl_be_put
#define ucx_ci_get nxl_be_get

/* bytes before UCX's address: for flags with CI_CMA, version 2 */
static inline size_t ucx_ci_hdr(unsigned flags)
{
    return (flags & CI_CMA) ? CI_HDR + 2 + CI_CMA_LEN : CI_HDR;
}

/* writes the header (with cma when flags has CI_CMA) and addr to out
 * (ucx_ci_hdr(flags) + addr_len bytes) */
static inline void ucx_ci_pack(unsigned char *out, unsigned flags, const ucx_ci_cma_t *cma,
                               const void *addr, size_t addr_len)
{
    memcpy(out, CI_MAGIC, sizeof(CI_MAGIC));
    out[8] = (unsigned char)flags;
    unsigned char *w = out + CI_HDR;
    if (flags & CI_CMA) {
        out[7] = 2;
        ucx_ci_put(w, CI_CMA_LEN, 2), w += 2;
        memcpy(w, cma->boot, 16), w += 16;
        ucx_ci_put(w, cma->ns_dev, 8), w += 8;
        ucx_ci_put(w, cma->ns_ino, 8), w += 8;
        ucx_ci_put(w, cma->pid, 4), w += 4;
        ucx_ci_put(w, cma->cookie_addr, 8), w += 8;
        ucx_ci_put(w, cma->cookie, 8), w += 8;
    }
    memcpy(w, addr, addr_len);
}

/* 0 with the flags, the CMA identity (when flags has CI_CMA; cma may be
 * NULL) and UCX's address (inside info); -1: no nxl UCX header of a
 * version known here, a version 2 header that is not whole, or no address
 * after it */
static inline int ucx_ci_parse(const void *info, size_t len, unsigned *flags, ucx_ci_cma_t *cma,
                               const void **addr, size_t *addr_len)
{
    const unsigned char *b = info;
    if (len <= CI_HDR || memcmp(b, CI_MAGIC, 7) || (b[7] != 1 && b[7] != 2))
        return -1;
    unsigned f = b[8];
    /* version 1 never has CI_CMA; version 2 always has it, with its block */
    if ((b[7] == 2) != ((f & CI_CMA) != 0))
        return -1;
    size_t h = ucx_ci_hdr(f);
    if (len <= h)
        return -1;
    if (f & CI_CMA) {
        const unsigned char *r = b + CI_HDR;
        if (ucx_ci_get(r, 2) != CI_CMA_LEN)
            return -1;
        r += 2;
        if (cma) {
            memcpy(cma->boot, r, 16);
            cma->ns_dev = ucx_ci_get(r + 16, 8);
            cma->ns_ino = ucx_ci_get(r + 24, 8);
            cma->pid = (uint32_t)ucx_ci_get(r + 32, 4);
            cma->cookie_addr = ucx_ci_get(r + 36, 8);
            cma->cookie = ucx_ci_get(r + 44, 8);
        }
    }
    *flags = f;
    *addr = b + h;
    *addr_len = len - h;
    return 0;
}

/* ---- UCX's packed remote keys
 *
 * ucp_ep_rkey_unpack() takes no length: it reads what the key says it
 * holds. Every UCX release (1.13 to 1.22 checked) packs a key as
 *
 *   [u64 md_map][u8 memory type] then, for each bit of md_map, [u8 n][n bytes]
 *
 * and reads all of it; newer ones (1.20+) may then read a system-device
 * byte, and after a known device a list of distances ended by 0xff, without
 * a length either. So nxl checks the part every release reads — a key
 * shorter than its md_map says is refused — and hands UCX a copy followed
 * by UCX_RKEY_PAD bytes of 0xff: a device byte 0xff is "unknown" (nothing
 * more is read), 0xff ends the distance list, and no UCT key is longer
 * than 255 bytes (its size travels in one byte), so whatever UCX reads past
 * the checked part stays inside the copy. */
#define UCX_RKEY_HDR 9
#define UCX_ADDR_PAD 4096 /* after a worker address: conn.c load_conn */
#define UCX_RKEY_PAD 256

/* bytes of @p buf that every UCX release reads (the md_map's keys), or 0
 * when @p len does not hold them */
static inline size_t ucx_rkey_need(const void *buf, size_t len)
{
    const unsigned char *b = buf;
    if (len < UCX_RKEY_HDR)
        return 0;
    uint64_t map;
    memcpy(&map, b, 8); /* host order: UCX packs it as it stores it */
    size_t at = UCX_RKEY_HDR;
    for (; map; map &= map - 1) {
        if (at >= len)
            return 0;
        at += 1 + (size_t)b[at];
        if (at > len)
            return 0;
    }
    return at;
}

#endif
