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
    /* before the provider registers it: a device that pins the pages
     * would leave them where they are */
    nxlt_thp_add(&u->thp_state, u->ctx, "LIBFABRIC", u->thp, 0, d->addr, d->len);
    nxl_status_t st = nxl_lf_mr_reg(u, (void *)d->addr, d->len,
                                    FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE,
                                    &m->mr, &m->key, nxl_mem_name(type));
    if (st != NXL_SUCCESS) {
        nxlt_thp_drop(u->thp_state, d->addr, d->len);
        free(m);
        return st;
    }
    m->desc = fi_mr_desc(m->mr);
    m->base = d->addr;
    m->len = d->len;
    nxl_lf_rails_reg(u, m);
    *out = m;
    return NXL_SUCCESS;
}

void nxl_lf_dereg(void *state, void *md)
{
    lf_t *u = state;
    lf_md_t *m = md;
    /* nothing collapsed in it once the application may free it */
    nxlt_thp_drop(u->thp_state, m->base, m->len);
    nxl_lf_rails_dereg(state, m);
    fi_close(&m->mr->fid);
    free(m);
}

/* packed key: "LFK1", u32 flags (1: virtual addressing), u64 key, u64 base
 * (with rails, their keys after it: wire.h) */
nxl_status_t nxl_lf_pack_key(void *state, void *md, void **buf, size_t *len)
{
    lf_t *u = state;
    lf_md_t *m = md;
    lf_wkey_t w = {.virt = u->mr_virt, .key = m->key, .base = m->base};
    nxl_lf_rails_key(u, m, &w); /* its keys in the rails' domains, if any */
    size_t l = LF_KEY_LEN + lf_key_rails_size(w.nrails);
    unsigned char *b = malloc(l);
    if (!b)
        return NXL_ERR_UNKNOWN;
    lf_key_pack(b, &w);
    if (w.nrails)
        lf_key_rails_pack(b + LF_KEY_LEN, &w);
    *buf = b;
    *len = l;
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
    nxl_lf_rails_load_key(c, &w, k);
    *rkey = k;
    return NXL_SUCCESS;
}

void nxl_lf_unload_key(void *state, void *rkey)
{
    free(rkey);
}
