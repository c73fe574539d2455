/* SPDX-License-Identifier: BSD-3-Clause */
/* The CUDA transport's connection info and VRAM keys as they travel in
 * metadata, and the checks nxl makes of a peer's before anything of them
 * is used (the IPC handle inside a key is CUDA's to open). Header-only and
 * without CUDA, so that tests/fuzz/fuzz_wire.c calls the same code as the
 * transport. Host byte order: CUDA IPC works within one host only. */
#ifndef NXL_CUDA_WIRE_H
#define NXL_CUDA_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define KEY_MAGIC 0x314b5543u  /* "CUK1" */
#define CONN_MAGIC 0x31435543u /* "CUC1" */
#define KEY_IPC 1u             /* the key carries an IPC handle */
#define CU_IPC_BYTES 64        /* CUDA_IPC_HANDLE_SIZE */

typedef struct cu_wire_conn {
    uint32_t magic;
    uint32_t version;
    uint64_t token;
    int32_t pid;
    uint32_t ndev;
    uint64_t pidns;
    char boot[40];
} cu_wire_conn_t;

typedef struct cu_wire_key {
    uint32_t magic;
    uint32_t flags;          /* KEY_IPC */
    uint64_t token;
    int32_t pid;
    int32_t dev;             /* the owner's device ordinal */
    uint64_t addr, len;      /* the registered region */
    uint64_t base, size;     /* its allocation */
    unsigned char uuid[16];  /* the device's UUID */
    unsigned char ipc[CU_IPC_BYTES];
} cu_wire_key_t;

/* NULL with *c filled, or what is wrong with it */
static inline const char *cu_conn_parse(const void *info, size_t len, cu_wire_conn_t *c)
{
    if (len != sizeof(*c))
        return "not the size of this version's";
    memcpy(c, info, sizeof(*c));
    if (c->magic != CONN_MAGIC || c->version != 1 || !memchr(c->boot, 0, sizeof(c->boot)))
        return "malformed";
    return NULL;
}

/* NULL with *k filled: the region lies inside its allocation, which does
 * not wrap around; or what is wrong with it. (Whose it is, the caller
 * checks against the connection.) */
static inline const char *cu_key_parse(const void *buf, size_t len, cu_wire_key_t *k)
{
    if (len != sizeof(*k))
        return "not the size of this version's";
    memcpy(k, buf, sizeof(*k));
    if (k->magic != KEY_MAGIC || (k->flags & ~KEY_IPC))
        return "malformed";
    if (!k->len || !k->size || k->addr < k->base || k->len > k->size ||
        k->addr - k->base > k->size - k->len || k->base + k->size < k->base)
        return "its region lies outside its allocation";
    return NULL;
}

#endif
