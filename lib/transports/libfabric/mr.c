/* SPDX-License-Identifier: BSD-3-Clause */
/* LIBFABRIC: memory registration and keys */
#include "lf.h"

nxl_status_t nxl_lf_mr_reg(lf_t *u, void *addr, size_t len, uint64_t access, struct fid_mr **mr,
                           uint64_t *key, const char *what)
{
    uint64_t want = u->mr_prov_key ? 0 : ++u->next_key;
    int r = fi_mr_reg(u->fids.domain, addr, len, access, 0, want, 0, mr, NULL);
    if (!r && u->mr_endpoint) {
        r = fi_mr_bind(*mr, &u->fids.ep->fid, 0);
        if (!r)
            r = fi_mr_enable(*mr);
        if (r) {
            fi_close(&(*mr)->fid);
            *mr = NULL;
        }
    }
    if (r) {
        nxlt_error(u->ctx, "LIBFABRIC: fi_mr_reg of %s 0x%lx+%zu failed on provider %s: %s (is "
                   "the range mapped? for RDMA providers, is the locked-memory limit, ulimit -l, "
                   "large enough?)", what, (unsigned long)(uintptr_t)addr, len, u->prov,
                   fi_strerror(-r));
        return NXL_ERR_BACKEND;
    }
    if (key) {
        *key = fi_mr_key(*mr);
        if (*key == FI_KEY_NOTAVAIL) {
            fi_close(&(*mr)->fid);
            *mr = NULL;
            nxlt_error(u->ctx, "LIBFABRIC: provider %s gives raw memory keys (FI_MR_RAW), which "
                       "nxl does not support yet; choose another provider", u->prov);
            return NXL_ERR_NOT_SUPPORTED;
        }
    }
    return NXL_SUCCESS;
}

nxl_status_t nxl_lf_reg(void *state, nxl_mem_t type, const nxl_desc_t *d, void **out)
{
    lf_t *u = state;
    if (type != NXL_DRAM) {
        nxlt_error(u->ctx, "LIBFABRIC: %s memory is not supported (DRAM only: no provider with "
                   "FI_HMEM here)", nxl_mem_name(type));
        return NXL_ERR_NOT_SUPPORTED;
    }
    lf_md_t *m = calloc(1, sizeof(*m));
    if (!m)
        return NXL_ERR_UNKNOWN;
    nxl_status_t st = nxl_lf_mr_reg(u, (void *)d->addr, d->len,
                                    FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE,
                                    &m->mr, &m->key, nxl_mem_name(type));
    if (st != NXL_SUCCESS) {
        free(m);
        return st;
    }
    m->desc = fi_mr_desc(m->mr);
    m->base = d->addr;
    m->len = d->len;
    *out = m;
    return NXL_SUCCESS;
}

void nxl_lf_dereg(void *state, void *md)
{
    lf_md_t *m = md;
    fi_close(&m->mr->fid);
    free(m);
}

/* packed key: "LFK1", u32 flags (1: virtual addressing), u64 key, u64 base */
nxl_status_t nxl_lf_pack_key(void *state, void *md, void **buf, size_t *len)
{
    lf_t *u = state;
    lf_md_t *m = md;
    unsigned char *b = malloc(24);
    if (!b)
        return NXL_ERR_UNKNOWN;
    lf_key_pack(b, &(lf_wkey_t){.virt = u->mr_virt, .key = m->key, .base = m->base});
    *buf = b;
    *len = LF_KEY_LEN;
    return NXL_SUCCESS;
}

nxl_status_t nxl_lf_load_key(void *state, void *conn, const void *buf, size_t len, void **rkey)
{
    lf_t *u = state;
    lf_conn_t *c = conn;
    lf_wkey_t w;
    const char *bad = lf_key_parse(buf, len, &w);
    if (bad) {
        nxlt_error(u->ctx, "LIBFABRIC: load_key: a memory key of agent '%s' is malformed (%zu "
                   "bytes: %s)", c->name, len, bad);
        return NXL_ERR_MISMATCH;
    }
    lf_rkey_t *k = calloc(1, sizeof(*k));
    if (!k)
        return NXL_ERR_UNKNOWN;
    k->virt = w.virt;
    k->key = w.key;
    k->base = w.base;
    *rkey = k;
    return NXL_SUCCESS;
}

void nxl_lf_unload_key(void *state, void *rkey)
{
    free(rkey);
}
