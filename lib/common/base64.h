/* SPDX-License-Identifier: BSD-3-Clause */
/* Base64 (RFC 4648, the standard alphabet, with padding): one implementation
 * for the engine (metadata, etcd) and the OBJ transport (Azure's keys,
 * signatures and block ids). libnxl exports neither function
 * (lib/libnxl.map): a transport built as a module compiles this file into
 * itself, as lib/transports/obj/Makefile.include does. */
#ifndef NXL_COMMON_BASE64_H
#define NXL_COMMON_BASE64_H

#include <stddef.h>

/* @return the malloc'd, NUL-terminated encoding of @p len bytes, or NULL
 * when out of memory */
char *nxli_b64_encode(const void *buf, size_t len);
/* @return malloc'd bytes (with room for a NUL after them), their count in
 * *len; NULL when @p s is not valid base64 or out of memory */
void *nxli_b64_decode(const char *s, size_t *len);

#endif
