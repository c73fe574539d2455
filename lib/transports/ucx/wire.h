/* What nxl itself reads of a UCX peer's connection info: the magic and the
 * flags byte; the rest is UCX's worker address, which only UCX unpacks
 * (README "Trust"). Header-only, without UCX, so that tests/fuzz/fuzz_wire.c
 * calls the same code as the transport. */
#ifndef NXL_UCX_WIRE_H
#define NXL_UCX_WIRE_H

#include <stddef.h>
#include <string.h>

/* Connection info: this magic, a flags byte, then UCX's worker address. */
static const unsigned char CI_MAGIC[8] = {'n', 'x', 'l', 'u', 'c', 'x', 0, 1};
#define CI_HDR 9
#define CI_AM_WRITE 0x01 /* the peer copies AM_WRITE messages into its memory */

/* writes the header and addr to out (CI_HDR + addr_len bytes) */
static inline void ucx_ci_pack(unsigned char *out, unsigned flags, const void *addr,
                               size_t addr_len)
{
    memcpy(out, CI_MAGIC, sizeof(CI_MAGIC));
    out[8] = (unsigned char)flags;
    memcpy(out + CI_HDR, addr, addr_len);
}

/* 0 with the flags and UCX's address (inside info); -1: no nxl UCX header,
 * or no address after it */
static inline int ucx_ci_parse(const void *info, size_t len, unsigned *flags, const void **addr,
                               size_t *addr_len)
{
    const unsigned char *b = info;
    if (len <= CI_HDR || memcmp(b, CI_MAGIC, sizeof(CI_MAGIC)))
        return -1;
    *flags = b[8];
    *addr = b + CI_HDR;
    *addr_len = len - CI_HDR;
    return 0;
}

#endif
