/* SPDX-License-Identifier: BSD-3-Clause */
/* libFuzzer harness: what nxl itself parses of a peer's transport blobs
 * (connection info, memory keys) before handing anything to a transport
 * library — the same header-only parsers the transports call:
 *   UCX        the "nxlucx\0\1" header and flags, and version 2's
 *              cross-memory attach identity; the length check of a packed
 *              rkey before UCX reads it (the worker address and the rkey's
 *              contents are UCX's to unpack, not fuzzed here)
 *   LIBFABRIC  "LFC2" (and "LFC1") connection info, "LFK1" keys, and 'R'
 *              (a region revoked), a message peers send at run time
 *   CUDA       connection info, VRAM keys (region inside its allocation)
 *   POSIX/OBJ  magic, token, registration id
 * The first byte picks the parser. Whatever a parser accepts must say what
 * it read consistently: packed again it gives the same bytes, and every
 * pointer it returns lies inside the input. */
#include "transports/common/blob_wire.h"
#include "transports/cuda/wire.h"
#include "transports/libfabric/wire.h"
#include "transports/ucx/wire.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c) ((c) ? (void)0 : abort())

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!size)
        return 0;
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    /* an exact-size heap copy: ASan sees any read past the end */
    uint8_t *in = malloc(n ? n : 1);
    CHECK(in);
    memcpy(in, p, n);
    switch (data[0] % 8) {
    case 0: {
        unsigned flags;
        const void *addr;
        size_t al;
        ucx_ci_cma_t cma;
        if (ucx_ci_parse(in, n, &flags, &cma, &addr, &al) == 0) {
            size_t h = ucx_ci_hdr(flags);
            CHECK(al && (const uint8_t *)addr == in + h && h + al == n);
            CHECK(h == ((flags & CI_CMA) ? (size_t)CI_HDR + 2 + CI_CMA_LEN : (size_t)CI_HDR));
            uint8_t *out = malloc(n);
            CHECK(out);
            ucx_ci_pack(out, flags, &cma, addr, al);
            CHECK(!memcmp(out, in, n));
            free(out);
        }
        break;
    }
    case 1: {
        lf_ci_t c;
        if (!lf_ci_parse(in, n, &c)) {
            CHECK(c.name >= in && c.name_len && c.name + c.name_len <= in + n);
            CHECK(strlen(c.prov) < LF_PROV_MAX);
            CHECK(!c.bell_len || (c.bell > c.name && c.bell + c.bell_len <= in + n &&
                                  c.bell_len <= LF_BELL_MAX && !c.bell[0]));
            CHECK(!c.nrails == !(c.flags & LF_CI_RAILS) && c.nrails <= LF_RAILS_MAX);
            /* packed again (always LFC2): the same fields, and for an
             * LFC2 input the same bytes */
            size_t lens[LF_RAILS_MAX];
            for (unsigned i = 0; i < c.nrails; i++) {
                CHECK(c.rail_name[i] > c.name && c.rail_name[i] + c.rail_name_len[i] <= in + n);
                lens[i] = c.rail_name_len[i];
            }
            size_t rl = c.nrails ? lf_ci_rails_size(c.nrails, lens) : 0;
            CHECK(!c.nrails || rl);
            size_t l = lf_ci_size(c.prov, c.name_len, c.bell_len) + rl;
            CHECK(l > rl && (!c.v2 || l == n));
            uint8_t *out = malloc(l);
            CHECK(out);
            lf_ci_pack(out, c.af, c.prov, c.name, c.name_len, c.flags, c.bell, c.bell_len);
            if (c.nrails)
                lf_ci_rails_pack(out + l - rl, c.nrails, c.rail_name, lens);
            CHECK(!c.v2 || !memcmp(out, in, n));
            lf_ci_t d;
            CHECK(!lf_ci_parse(out, l, &d) && d.af == c.af && !strcmp(d.prov, c.prov) &&
                  d.name_len == c.name_len && !memcmp(d.name, c.name, c.name_len) &&
                  d.flags == c.flags && d.bell_len == c.bell_len && d.nrails == c.nrails);
            free(out);
        }
        break;
    }
    case 2: {
        lf_wkey_t k;
        if (!lf_key_parse(in, n, &k)) {
            uint8_t out[LF_KEY_LEN + 2 + 8 * LF_RAILS_MAX];
            lf_key_pack(out, &k);
            if (k.nrails)
                lf_key_rails_pack(out + LF_KEY_LEN, &k);
            CHECK(n == LF_KEY_LEN + lf_key_rails_size(k.nrails) && !memcmp(out, in, n));
        }
        break;
    }
    case 3: {
        cu_wire_conn_t c;
        if (!cu_conn_parse(in, n, &c))
            CHECK(c.magic == CONN_MAGIC && strlen(c.boot) < sizeof(c.boot));
        break;
    }
    case 4: {
        cu_wire_key_t k;
        if (!cu_key_parse(in, n, &k)) {
            /* the region, inside its allocation, which does not wrap */
            CHECK(k.len && k.base <= k.addr && k.base + k.size >= k.base);
            CHECK(k.addr + k.len >= k.addr && k.addr + k.len <= k.base + k.size);
        }
        break;
    }
    case 5: {
        nxlt_blob24_t b;
        uint32_t magic = n >= 4 ? (uint32_t)in[0] | (uint32_t)in[1] << 8 |
                                      (uint32_t)in[2] << 16 | (uint32_t)in[3] << 24
                                : 0x31435850u;
        if (nxlt_blob24_parse(in, n, magic, &b) == 0)
            CHECK(n == sizeof(b) && !memcmp(&b, in, n));
        break;
    }
    case 6: {
        lf_rv_t r;
        if (!lf_rv_parse(in, n, &r)) {
            size_t nl = strlen(r.from), l = lf_rv_size(nl);
            CHECK(nl && l == n && r.type < 256);
            uint8_t *out = malloc(l);
            CHECK(out);
            lf_rv_pack(out, r.from, nl, r.type, r.dev, r.addr, r.len);
            CHECK(!memcmp(out, in, n));
            free(out);
        }
        break;
    }
    case 7: {
        /* what every UCX release reads of a packed rkey lies inside it */
        size_t need = ucx_rkey_need(in, n);
        CHECK(!need || (need >= UCX_RKEY_HDR && need <= n));
        break;
    }
    }
    free(in);
    return 0;
}
