/* SPDX-License-Identifier: BSD-3-Clause */
/* A transport that serves DRAM but declines every region and allocation
 * (NXL_ERR_NOT_SUPPORTED), as a UCX with CUDA declines VRAM where its CUDA
 * memory type is not loaded: the engine leaves such memory to the other
 * transports, and refuses it with this one's sentence when none takes it
 * (check_modules t_declined). */
#include <nxl/transport.h>

#include <stdlib.h>

static int probe(char *why, size_t cap)
{
    (void)why;
    (void)cap;
    return 1;
}

static nxl_status_t create(nxlt_ctx_t *ctx, const nxl_param_t *p, size_t n, void **state)
{
    *state = ctx;
    return NXL_SUCCESS;
}

static void destroy(void *state) {}

static nxl_status_t reg(void *state, nxl_mem_t type, const nxl_desc_t *d, void **md)
{
    nxlt_error(state, "decline: declines %s region 0x%lx+%zu", nxl_mem_name(type),
               (unsigned long)d->addr, d->len);
    return NXL_ERR_NOT_SUPPORTED;
}

static void dereg(void *state, void *md) {}

static nxl_status_t mem_alloc(void *state, nxl_mem_t type, size_t len, uint64_t dev, void **ptr,
                              void **md)
{
    nxlt_error(state, "decline: declines to allocate %zu bytes of %s", len, nxl_mem_name(type));
    return NXL_ERR_NOT_SUPPORTED;
}

static void mem_free(void *state, void *ptr, void *md) {}

static nxl_status_t pack_key(void *state, void *md, void **buf, size_t *len)
{
    *buf = NULL;
    *len = 0;
    return NXL_SUCCESS;
}

static nxl_status_t conn_info(void *state, void **buf, size_t *len)
{
    *buf = calloc(1, 8);
    *len = 8;
    return *buf ? NXL_SUCCESS : NXL_ERR_UNKNOWN;
}

static nxl_status_t load_conn(void *state, const char *agent, const void *info, size_t len,
                              void **conn)
{
    *conn = NULL; /* reaches nobody */
    return NXL_SUCCESS;
}

static nxl_status_t load_key(void *state, void *conn, const void *buf, size_t len, void **rkey)
{
    *rkey = NULL;
    return NXL_SUCCESS;
}

static void unload_key(void *state, void *rkey) {}
static void unload_conn(void *state, void *conn) {}

static nxl_status_t post(void *state, nxlt_op_t *op, const nxlt_xfer_t *x)
{
    nxlt_error(state, "decline: moves nothing");
    return NXL_ERR_NOT_SUPPORTED;
}

static nxl_status_t notif_send(void *state, nxlt_op_t *op, void *conn, const void *msg,
                               size_t len)
{
    nxlt_error(state, "decline: carries no notifications");
    return NXL_ERR_NOT_SUPPORTED;
}

NXLT_MODULE_EXPORT const nxlt_ops_t nxlt_decline_ops = {
    .abi_version = NXLT_ABI_VERSION,
    .name = "decline",
    .mem_mask = 1u << NXL_DRAM,
    .caps = NXLT_CAP_LOCAL,
    .probe = probe,
    .create = create,
    .destroy = destroy,
    .reg = reg,
    .dereg = dereg,
    .pack_key = pack_key,
    .mem_alloc = mem_alloc,
    .mem_free = mem_free,
    .conn_info = conn_info,
    .load_conn = load_conn,
    .load_key = load_key,
    .unload_key = unload_key,
    .unload_conn = unload_conn,
    .post = post,
    .notif_send = notif_send,
};
