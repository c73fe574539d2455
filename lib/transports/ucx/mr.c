/* SPDX-License-Identifier: BSD-3-Clause */
#include "config.h"
#include "ucx.h"

/* ------------------------------------------------------------- memory */

/* [addr, addr + len), memory the application has, mapped with ucp (the
 * main context, or a rail's for the same region) */
ucs_status_t nxl_ucx_mem_map(ucp_context_h ucp, nxl_mem_t type, void *addr, size_t len,
                             ucp_mem_h *memh)
{
    ucp_mem_map_params_t mp = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
        .address = addr,
        .length = len,
    };
    if (type == NXL_VRAM) {
        mp.field_mask |= UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
        mp.memory_type = UCS_MEMORY_TYPE_CUDA;
    }
    return ucp_mem_map(ucp, &mp, memh);
}

/* VRAM (only in a build against a UCX with CUDA, NXL_UCX_CUDA): mapped
 * with its memory type, so that UCX's CUDA transports serve it to peers;
 * where this UCX cannot (no CUDA memory type at run time) it is declined
 * (NXL_ERR_NOT_SUPPORTED), and the engine leaves it to the other
 * transports. VRAM is never an AM_WRITE target (written with memcpy). */
nxl_status_t nxl_ucx_reg(void *state, nxl_mem_t type, const nxl_desc_t *d, void **out)
{
    ucx_t *u = state;
    *out = NULL;
    if (type == NXL_VRAM && !u->cuda) {
        nxlt_error(u->ctx, "UCX: cannot register VRAM 0x%lx+%zu: this UCX has no CUDA memory "
                   "support here (ucp_context_query); the CUDA transport serves VRAM",
                   (unsigned long)d->addr, d->len);
        return NXL_ERR_NOT_SUPPORTED;
    }
    ucx_md_t *m = calloc(1, sizeof(*m));
    if (!m)
        return NXL_ERR_UNKNOWN;
    /* before UCX maps it: a device that pins the pages would leave them
     * where they are */
    if (type == NXL_DRAM) {
        nxlt_thp_add(&u->thp_state, u->ctx, "UCX", u->thp, UCX_THP_SYNC_MAX, d->addr, d->len);
        m->addr = d->addr;
        m->len = d->len;
    }
    ucs_status_t st = nxl_ucx_mem_map(u->ucp, type, (void *)d->addr, d->len, &m->memh);
    if (st != UCS_OK) {
        nxlt_error(u->ctx, "UCX: ucp_mem_map of %s 0x%lx+%zu failed: %s (is the range mapped? "
                   "is the locked-memory limit, ulimit -l, large enough for RDMA devices?)",
                   nxl_mem_name(type), (unsigned long)d->addr, d->len, ucs_status_string(st));
        nxlt_thp_drop(u->thp_state, m->addr, m->len);
        free(m);
        return NXL_ERR_BACKEND;
    }
    if (type == NXL_DRAM)
        nxl_ucx_rails_reg(u, m, (void *)d->addr, d->len);
    *out = m;
    return NXL_SUCCESS;
}

void nxl_ucx_dereg(void *state, void *md)
{
    ucx_t *u = state;
    ucx_md_t *m = md;
    if (!m)
        return;
    /* nothing collapsed in it once the application may free it */
    nxlt_thp_drop(u->thp_state, m->addr, m->len);
    nxl_ucx_rails_dereg(u, m);
    ucp_mem_unmap(u->ucp, m->memh);
    free(m);
}

/* The application gave the region up. UCX does not check the address of a
 * put or get at the target (on shared memory and TCP, into malloc'd
 * memory, its software RMA copies wherever the initiator says), so the
 * peers this agent is connected to are told, ahead of anything this agent
 * sends them afterwards on the same endpoint:
 *   [u16 name length][name][u8 type][u64 dev][u64 addr][u64 len]
 * Small WRITEs into it are dropped here from now on. */
void nxl_ucx_mem_revoke(void *state, nxl_mem_t type, const nxl_desc_t *d, void *md)
{
    ucx_t *u = state;
    const char *me = nxl_agent_name(nxlt_agent(u->ctx));
    size_t nl = strlen(me), len = 2 + nl + 1 + 24;
    ucx_conn_t *c;
    LIST_FOREACH(c, &u->conns, link)
    {
        if (!c->ep || c->failed || c->fail_deferred || c->unloaded)
            continue; /* (aborted: the new endpoint is made after the close) */
        ucx_side_t *m = malloc(sizeof(*m) + len);
        if (!m) {
            nxlt_log(u->ctx, NXL_LOG_ERROR, "UCX: out of memory: agent '%s' was not told of a "
                     "deregistered region", c->name);
            continue;
        }
        unsigned char *w = nxl_ucx_name_put(m->buf, me, nl);
        *w++ = (unsigned char)type;
        ucx_ci_put(w, d->dev_id, 8), ucx_ci_put(w + 8, d->addr, 8), ucx_ci_put(w + 16, d->len, 8);
        m->len = len;
        nxl_ucx_side_send(u, c->ep, NXL_UCX_AM_REVOKE, m);
    }
}

ucs_status_t nxl_ucx_am_recv_revoke(void *arg, const void *header, size_t hlen, void *data,
                                    size_t len, const ucp_am_recv_param_t *param)
{
    ucx_t *u = arg;
    if (nxl_ucx_later(u, nxl_ucx_am_recv_revoke, data, len, param))
        return UCS_OK;
    const unsigned char *b = data;
    char from[256];
    size_t nk = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) ? 0
                                                                 : nxl_ucx_name_get(b, len, from);
    if (!nk || len != nk + 1 + 24) {
        nxlt_log(u->ctx, NXL_LOG_WARN, "UCX: malformed region revocation of %zu bytes dropped",
                 len);
        return UCS_OK;
    }
    b += nk;
    nxlt_remote_revoked(u->ctx, from, (nxl_mem_t)b[0], ucx_ci_get(b + 1, 8), ucx_ci_get(b + 9, 8),
                        ucx_ci_get(b + 17, 8));
    u->net.hit = true;
    return UCS_OK;
}

nxl_status_t nxl_ucx_mem_alloc(void *state, nxl_mem_t type, size_t len, uint64_t dev, void **ptr,
                               void **md)
{
    ucx_t *u = state;
    if (type != NXL_DRAM) {
        /* VRAM is allocated by the CUDA transport and registered here */
        nxlt_error(u->ctx, "UCX: allocates DRAM only, not %s (the CUDA transport allocates "
                   "VRAM)", nxl_mem_name(type));
        return NXL_ERR_NOT_SUPPORTED;
    }
    ucx_md_t *m = calloc(1, sizeof(*m));
    if (!m)
        return NXL_ERR_UNKNOWN;
    ucp_mem_map_params_t mp = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_FLAGS,
        .address = NULL,
        .length = len,
        .flags = UCP_MEM_MAP_ALLOCATE,
    };
    ucs_status_t st = ucp_mem_map(u->ucp, &mp, &m->memh);
    ucp_mem_attr_t attr = {.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH};
    if (st == UCS_OK)
        st = ucp_mem_query(m->memh, &attr);
    if (st != UCS_OK) {
        nxlt_error(u->ctx, "UCX: ucp_mem_map(ALLOCATE, %zu bytes) failed: %s", len,
                   ucs_status_string(st));
        free(m);
        return NXL_ERR_BACKEND;
    }
    nxl_ucx_rails_reg(u, m, attr.address, len);
    *ptr = attr.address;
    *md = m;
    return NXL_SUCCESS;
}

void nxl_ucx_mem_free(void *state, void *ptr, void *md)
{
    nxl_ucx_dereg(state, md); /* unmapping memory UCX allocated frees it */
}

nxl_status_t nxl_ucx_pack_key(void *state, void *md, void **buf, size_t *len)
{
    ucx_t *u = state;
    ucx_md_t *m = md;
    void *rb;
    size_t rl;
    ucs_status_t st = ucp_rkey_pack(u->ucp, m->memh, &rb, &rl);
    if (st != UCS_OK) {
        nxlt_error(u->ctx, "UCX: ucp_rkey_pack failed: %s", ucs_status_string(st));
        return NXL_ERR_BACKEND;
    }
    *buf = malloc(rl);
    if (*buf)
        memcpy(*buf, rb, rl);
    *len = rl;
    ucp_rkey_buffer_release(rb);
    if (!*buf)
        return NXL_ERR_UNKNOWN;
    nxl_status_t ns = nxl_ucx_rails_pack_key(u, m, buf, len);
    if (ns != NXL_SUCCESS) {
        free(*buf);
        *buf = NULL;
    }
    return ns;
}

nxl_status_t nxl_ucx_load_key(void *state, void *conn, const void *buf, size_t len, void **rkey)
{
    ucx_t *u = state;
    ucx_conn_t *c = conn;
    /* UCX takes no length: check what it will read, and give it a padded
     * copy (wire.h) */
    size_t need = ucx_rkey_need(buf, len);
    if (!need) {
        nxlt_error(u->ctx, "UCX: a memory key of agent '%s' is malformed: %zu bytes, fewer "
                   "than the UCX key they begin says it holds (cut short or corrupt "
                   "metadata)", c->name, len);
        return NXL_ERR_MISMATCH;
    }
    ucx_rkey_t *k = calloc(1, sizeof(*k));
    unsigned char *copy = k ? malloc(len + UCX_RKEY_PAD) : NULL;
    if (!copy) {
        free(k);
        return NXL_ERR_UNKNOWN;
    }
    memcpy(copy, buf, len);
    memset(copy + len, 0xff, UCX_RKEY_PAD);
    k->packed = copy;
    nxl_status_t ns = nxl_ucx_rkey_unpack(c, k);
    if (ns != NXL_SUCCESS) {
        free(copy);
        free(k);
        return ns;
    }
    k->conn = c;
    LIST_INSERT_HEAD(&c->rkeys, k, link);
    nxl_ucx_rails_load_key(u, c, buf, len, need, k);
    *rkey = k;
    return NXL_SUCCESS;
}

/* k's key on c's endpoint (none while it has none: unpacked with the next) */
nxl_status_t nxl_ucx_rkey_unpack(ucx_conn_t *c, ucx_rkey_t *k)
{
    if (k->rk)
        ucp_rkey_destroy(k->rk);
    k->rk = NULL;
    k->mapped = -1;
    if (!c->ep)
        return NXL_SUCCESS;
    ucs_status_t st = ucp_ep_rkey_unpack(c->ep, k->packed, &k->rk);
    if (st != UCS_OK) {
        k->rk = NULL;
        nxlt_error(c->u->ctx, "UCX: ucp_ep_rkey_unpack of a key of agent '%s' failed: %s",
                   c->name, ucs_status_string(st));
        return NXL_ERR_BACKEND;
    }
    return NXL_SUCCESS;
}

void nxl_ucx_unload_key(void *state, void *rkey)
{
    ucx_rkey_t *k = rkey;
    if (k->conn)
        LIST_REMOVE(k, link);
    nxl_ucx_rails_unload_key(k);
    if (k->rk)
        ucp_rkey_destroy(k->rk);
    free(k->packed);
    free(k);
}
