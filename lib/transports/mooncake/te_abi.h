/* SPDX-License-Identifier: BSD-3-Clause */
/* The few declarations of Mooncake's Transfer Engine C API
 * (mooncake-transfer-engine/include/transfer_engine_c.h, kvcache-ai/Mooncake
 * at 3b5a5941) the MOONCAKE transport calls, written here from that API so
 * that building nxl needs no Mooncake headers: the library is loaded at run
 * time (mooncake.c). Types are named nxl_te_*; the layouts and values are
 * the library's. */
#ifndef NXL_TE_ABI_H
#define NXL_TE_ABI_H

#include <stddef.h>
#include <stdint.h>

#define NXL_TE_OPCODE_READ 0
#define NXL_TE_OPCODE_WRITE 1
#define NXL_TE_INVALID_BATCH UINT64_MAX

/* getTransferStatus()'s status values */
enum {
    NXL_TE_WAITING = 0,
    NXL_TE_PENDING = 1,
    NXL_TE_INVALID = 2,
    NXL_TE_CANCELED = 3,
    NXL_TE_COMPLETED = 4,
    NXL_TE_TIMEOUT = 5,
    NXL_TE_FAILED = 6,
};

/* one request: target_offset is the address in the peer's registered memory */
typedef struct nxl_te_req {
    int opcode;
    void *source;
    int32_t target_id;
    uint64_t target_offset;
    uint64_t length;
} nxl_te_req_t;

/* a notification: the sender's name and a C string */
typedef struct nxl_te_notify {
    char *name;
    char *msg;
} nxl_te_notify_t;

typedef struct nxl_te_status {
    int status;
    uint64_t transferred_bytes;
} nxl_te_status_t;

typedef void *(*nxl_te_create_fn)(const char *metadata, const char *local_name,
                                  const char *ip_or_host, uint64_t rpc_port, int auto_discover);
typedef void *(*nxl_te_install_fn)(void *engine, const char *proto, void **args);
typedef int (*nxl_te_local_fn)(void *engine, char *buf, size_t cap);
typedef int32_t (*nxl_te_open_fn)(void *engine, const char *segment);
typedef void (*nxl_te_destroy_fn)(void *engine);
typedef int (*nxl_te_reg_fn)(void *engine, void *addr, size_t len, const char *location,
                             int remote_accessible);
typedef int (*nxl_te_unreg_fn)(void *engine, void *addr);
typedef uint64_t (*nxl_te_alloc_batch_fn)(void *engine, size_t size);
typedef int (*nxl_te_submit_fn)(void *engine, uint64_t batch, nxl_te_req_t *reqs, size_t n);
typedef int (*nxl_te_submit_notify_fn)(void *engine, uint64_t batch, nxl_te_req_t *reqs,
                                       size_t n, nxl_te_notify_t notify);
typedef nxl_te_notify_t *(*nxl_te_get_notifs_fn)(void *engine, int *n);
typedef int (*nxl_te_free_notifs_fn)(nxl_te_notify_t *notifs, int n);
typedef int (*nxl_te_gen_notify_fn)(void *engine, uint64_t segment, nxl_te_notify_t notify);
typedef int (*nxl_te_status_fn)(void *engine, uint64_t batch, size_t task, nxl_te_status_t *st);
typedef int (*nxl_te_free_batch_fn)(void *engine, uint64_t batch);

#endif
