/* SPDX-License-Identifier: BSD-3-Clause */
/* Metadata: this agent's description as JSON, and loading other agents'
 * descriptions — untrusted input, checked field by field, committed only
 * when every part was accepted.
 *
 *   { "nxl": 1, "agent": "decode-0", "boot": "8231...", "partial": false,
 *     "conn": { "UCX": "<base64 worker address>" },
 *     "regions": [ { "type": "DRAM", "dev": "0", "addr": "140211...",
 *                    "len": "4096", "keys": { "UCX": "<base64 rkey>" } } ] }
 *
 * 64-bit numbers travel as decimal strings (JSON numbers are doubles).
 * Partial metadata of strided lists (nxl_md_local_partial_strided) adds
 * them, four numbers each (two more when nested), which a loading agent
 * keeps for nxl_md_remote_strided(); metadata without them loads as
 * before, and a library that predates them ignores the field:
 *
 *     "strided": { "type": "VRAM", "lists": [ { "dev": "0", "base": "...",
 *                  "len": "4096", "stride": "8192", "count": "512",
 *                  "outer_count": "32", "outer_stride": "4194304" } ] }
 *
 * "boot" is the agent's incarnation: a random number drawn when it was
 * created (peer.c), which tells a restarted agent from the one known
 * before; metadata without it (older libraries) loads as before. */
#include "internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <string.h>

/* ---------------------------------------------------------------- remotes */

static void rregion_free(nxl_agent_t *a, nxli_rregion_t *g)
{
    for (int b = 0; b < a->nbackends; b++)
        if (g->rkey[b])
            a->backends[b]->ops->unload_key(a->backends[b]->state, g->rkey[b]);
    free(g->label);
    free(g);
}

static void remote_free(nxli_remote_t *r)
{
    nxl_agent_t *a = r->agent;
    for (size_t i = 0; i < r->nregs; i++)
        rregion_free(a, r->regs[i]);
    for (size_t i = 0; i < r->ngone; i++)
        rregion_free(a, r->gone[i]);
    free(r->gone);
    for (int b = 0; b < a->nbackends; b++) {
        if (r->conn[b])
            a->backends[b]->ops->unload_conn(a->backends[b]->state, r->conn[b]);
        free(r->conn_info[b]);
    }
    free(r->regs);
    free(r->strided);
    free(r->name);
    free(r);
}

void nxli_remote_put(nxli_remote_t *r)
{
    if (!r)
        return;
    nxl_agent_t *a = r->agent;
    NXLI_TLOCK(a);
    if (--r->refs == 0)
        remote_free(r);
    NXLI_TUNLOCK(a);
}

nxli_remote_t *nxli_remote_find(nxl_agent_t *a, const char *name)
{
    nxli_remote_t *r;
    LIST_FOREACH(r, &a->remotes, link)
    if (!strcmp(r->name, name))
        return r;
    return NULL;
}

static void remote_unlink(nxli_remote_t *r)
{
    nxl_agent_t *a = r->agent;
    NXLI_TLOCK(a);
    LIST_REMOVE(r, link);
    a->npeers--;
    r->invalid = true;
    nxli_remote_put(r);
    NXLI_TUNLOCK(a);
}

static int rcmp(nxl_mem_t t, uint64_t dev, uintptr_t addr, const nxli_rregion_t *r)
{
    if (t != r->type)
        return t < r->type ? -1 : 1;
    if (dev != r->dev)
        return dev < r->dev ? -1 : 1;
    if (addr != r->addr)
        return addr < r->addr ? -1 : 1;
    return 0;
}

static size_t rupper(const nxli_remote_t *r, nxl_mem_t t, uint64_t dev, uintptr_t addr)
{
    size_t lo = 0, hi = r->nregs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (rcmp(t, dev, addr, r->regs[mid]) >= 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

const nxli_rregion_t *nxli_rregion_find(const nxli_remote_t *r, nxl_mem_t t, uint64_t dev,
                                        uintptr_t addr, size_t len)
{
    size_t i = rupper(r, t, dev, addr);
    if (!i)
        return NULL;
    const nxli_rregion_t *g = r->regs[i - 1];
    if (g->type != t || g->dev != dev || addr < g->addr || len > g->len ||
        addr - g->addr > g->len - len)
        return NULL;
    return g;
}

const nxli_rregion_t *nxli_rregion_labelled(const nxli_remote_t *r, nxl_mem_t t, uint64_t dev,
                                            const char *label, size_t at)
{
    for (size_t i = 0; i < r->nregs; i++) {
        const nxli_rregion_t *g = r->regs[i];
        if (g->label && g->label_at == at && g->type == t && g->dev == dev &&
            !strcmp(g->label, label))
            return g;
    }
    return NULL;
}

/* A revoked region leaves the sorted table (nothing new resolves to it)
 * but lives on, flagged, for the prepared lists and transfers that point at
 * it: they are refused when used (xfer.c). */
static int rregion_revoke_locked(nxli_remote_t *r, nxl_mem_t t, uint64_t dev, uintptr_t addr, size_t len);

int nxli_rregion_revoke(nxli_remote_t *r, nxl_mem_t t, uint64_t dev, uintptr_t addr, size_t len)
{
    NXLI_LOCKED(int, r->agent, rregion_revoke_locked(r, t, dev, addr, len));
}

static int rregion_revoke_locked(nxli_remote_t *r, nxl_mem_t t, uint64_t dev, uintptr_t addr, size_t len)
{
    size_t i = rupper(r, t, dev, addr);
    if (!i || rcmp(t, dev, addr, r->regs[i - 1]) || r->regs[i - 1]->len != len)
        return 0;
    nxli_rregion_t *g = r->regs[i - 1], **v = realloc(r->gone, (r->ngone + 1) * sizeof(*v));
    if (!v)
        return -1;
    r->gone = v;
    g->revoked = true;
    r->gone[r->ngone++] = g;
    memmove(&r->regs[i - 1], &r->regs[i], (r->nregs - i) * sizeof(*r->regs));
    r->nregs--;
    return 1;
}

void nxlt_remote_revoked(nxlt_ctx_t *ctx, const char *from, nxl_mem_t type, uint64_t dev,
                         uint64_t addr, uint64_t len)
{
    nxl_agent_t *a = ctx->agent;
    nxli_remote_t *r = from ? nxli_remote_find(a, from) : NULL;
    if ((unsigned)type >= NXL_MEM_TYPES || !r || addr > UINTPTR_MAX || len > SIZE_MAX)
        return;
    int k = nxli_rregion_revoke(r, type, dev, (uintptr_t)addr, (size_t)len);
    if (k < 0) /* out of memory: forget the agent rather than keep a region it revoked */
        nxli_remote_lost(a, from, "out of memory while recording a region it deregistered");
    else if (k > 0)
        nxli_log(a, NXL_LOG_INFO, "agent '%s' deregistered its %s region 0x%llx+%llu (dev %llu): "
                 "transfers into it are refused from now on", from, nxl_mem_name(type),
                 (unsigned long long)addr, (unsigned long long)len, (unsigned long long)dev);
}

void nxli_remote_cleanup(nxl_agent_t *a)
{
    NXLI_TLOCK(a);
    while (!LIST_EMPTY(&a->remotes))
        remote_unlink(LIST_FIRST(&a->remotes));
    nxli_remote_put(a->self);
    a->self = NULL;
    NXLI_TUNLOCK(a);
}

static nxli_remote_t *remote_get_locked(nxl_agent_t *a, const char *name);

nxli_remote_t *nxli_remote_get(nxl_agent_t *a, const char *name)
{
    NXLI_LOCKED(nxli_remote_t *, a, remote_get_locked(a, name));
}

static nxli_remote_t *remote_get_locked(nxl_agent_t *a, const char *name)
{
    nxli_remote_t *r;
    if (!strcmp(name, a->name)) {
        if (!a->self || a->self_gen != a->mem_gen) {
            void *blob;
            size_t len;
            if (nxl_md_local(a, &blob, &len) != NXL_SUCCESS)
                return NULL;
            nxl_status_t st = nxli_md_load_ex(a, blob, len, true, &r, NULL, 0);
            free(blob);
            if (st != NXL_SUCCESS)
                return NULL;
            nxli_remote_put(a->self);
            a->self = r;
            a->self_gen = a->mem_gen;
        }
        r = a->self;
    } else {
        r = nxli_remote_find(a, name);
        if (!r) {
            nxli_err(a, "no metadata of agent '%s' is loaded in agent '%s' (never loaded, or "
                        "dropped: the peer was lost or invalidated); load it (nxl_md_load, "
                        "nxl_md_fetch), or for a lost peer wait for its BACK event "
                        "(nxl_agent_on_peer)", name, a->name);
            return NULL;
        }
    }
    r->refs++;
    return r;
}

static void remote_lost_locked(nxl_agent_t *a, const char *name, const char *why);

void nxli_remote_lost(nxl_agent_t *a, const char *name, const char *why)
{
    NXLI_TLOCK(a);
    remote_lost_locked(a, name, why);
    NXLI_TUNLOCK(a);
}

static void remote_lost_locked(nxl_agent_t *a, const char *name, const char *why)
{
    nxli_remote_t *r = nxli_remote_find(a, name);
    if (!r)
        return;
    nxl_xfer_t *x;
    LIST_FOREACH(x, &a->xfers, link) {
        /* acquire: a foreign thread may claim x for a post at this moment
         * (claim() in xfer.c); its future's fields are then seen whole */
        nxl_future_t *f = __atomic_load_n(&x->active, __ATOMIC_ACQUIRE);
        if (x->remote == r && f && f != a->unposted)
            nxli_future_abort(f, NXL_ERR_REMOTE_DISCONNECT, why);
    }
    a->st.peers_lost++;
    char who[NXLI_NAME_MAX];
    snprintf(who, sizeof(who), "%s", r->name);
    remote_unlink(r);
    nxli_peer_down(a, who, why, false);
}

nxl_status_t nxl_md_check(nxl_agent_t *a, const char *remote)
{
    if (a && nxli_thread_foreign(a))
        return nxli_rpc_md_check(a, remote);
    return remote && nxli_remote_find(a, remote) ? NXL_SUCCESS : NXL_ERR_NOT_FOUND;
}

nxl_status_t nxl_md_invalidate(nxl_agent_t *a, const char *remote)
{
    if (a && nxli_thread_foreign(a))
        return nxli_rpc_md_invalidate(a, remote);
    return nxli_md_invalidate(a, remote, true);
}

nxl_status_t nxli_md_invalidate(nxl_agent_t *a, const char *remote, bool by_app)
{
    nxli_remote_t *r = remote ? nxli_remote_find(a, remote) : NULL;
    if (!r && remote && by_app && nxli_peer_forget(a, remote))
        return NXL_SUCCESS; /* lost already: the application gives it up */
    if (!r) {
        nxli_err(a, "nxl_md_invalidate: agent '%s' knows no agent '%s'", a->name,
                 remote ? remote : "(null)");
        return NXL_ERR_NOT_FOUND;
    }
    nxli_log(a, NXL_LOG_INFO, "metadata of agent '%s' invalidated", remote);
    a->st.peers_lost++;
    char who[NXLI_NAME_MAX];
    snprintf(who, sizeof(who), "%s", r->name);
    remote_unlink(r);
    nxli_peer_down(a, who, by_app ? "invalidated by the application (nxl_md_invalidate)"
                              : "invalidated: the agent said it leaves (nxl_md_send_invalidate)",
                   by_app);
    return NXL_SUCCESS;
}

/* ------------------------------------------------------------- serialising */

static bool add_u64(cJSON *o, const char *k, uint64_t v)
{
    char buf[24];
    snprintf(buf, sizeof(buf), "%llu", (unsigned long long)v);
    return cJSON_AddStringToObject(o, k, buf) != NULL;
}

static bool add_b64(cJSON *o, const char *k, const void *buf, size_t len)
{
    char *s = nxli_b64_encode(buf, len);
    bool ok = s && cJSON_AddStringToObject(o, k, s);
    free(s);
    return ok;
}

static nxl_status_t add_region(nxl_agent_t *a, cJSON *arr, nxli_region_t *r)
{
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddItemToArray(arr, o))
        return NXL_ERR_UNKNOWN;
    cJSON *keys;
    if (!cJSON_AddStringToObject(o, "type", nxl_mem_name(r->type)) || !add_u64(o, "dev", r->dev) ||
        !add_u64(o, "addr", r->addr) || !add_u64(o, "len", r->len) ||
        !(keys = cJSON_AddObjectToObject(o, "keys")))
        return NXL_ERR_UNKNOWN;
    if (r->label && (!cJSON_AddStringToObject(o, "label", r->label) ||
                     !add_u64(o, "at", r->label_at)))
        return NXL_ERR_UNKNOWN;
    for (int b = 0; b < a->nbackends; b++) {
        const void *k;
        size_t kl;
        nxl_status_t st = nxli_region_key(a, r, b, &k, &kl);
        if (st != NXL_SUCCESS)
            return st;
        if (k && !add_b64(keys, a->backends[b]->ops->name, k, kl))
            return NXL_ERR_UNKNOWN;
    }
    return NXL_SUCCESS;
}

/* the strided lists of nxl_md_local_partial_strided() */
typedef struct md_strided {
    nxl_mem_t type;
    const nxl_strided_t *s;
    size_t n;
} md_strided_t;

static bool add_strided(cJSON *root, const md_strided_t *ms)
{
    cJSON *o = cJSON_AddObjectToObject(root, "strided"), *arr;
    if (!o || !cJSON_AddStringToObject(o, "type", nxl_mem_name(ms->type)) ||
        !(arr = cJSON_AddArrayToObject(o, "lists")))
        return false;
    for (size_t i = 0; i < ms->n; i++) {
        const nxl_strided_t *d = &ms->s[i];
        cJSON *l = cJSON_CreateObject();
        if (!l || !cJSON_AddItemToArray(arr, l) || !add_u64(l, "dev", d->dev_id) ||
            !add_u64(l, "base", d->base) || !add_u64(l, "len", d->len) ||
            !add_u64(l, "stride", d->stride) || !add_u64(l, "count", d->count))
            return false;
        if (d->outer_count > 1 && (!add_u64(l, "outer_count", d->outer_count) ||
                                   !add_u64(l, "outer_stride", d->outer_stride)))
            return false;
    }
    return true;
}

static nxl_status_t md_build(nxl_agent_t *a, bool partial, nxli_region_t **regs, size_t nregs,
                             bool all, const md_strided_t *ms, void **blob, size_t *len)
{
    nxl_status_t st = NXL_ERR_UNKNOWN;
    cJSON *root = cJSON_CreateObject(), *conn, *arr;
    if (!root || !cJSON_AddNumberToObject(root, "nxl", NXLI_MD_VERSION) ||
        !cJSON_AddStringToObject(root, "agent", a->name) || !add_u64(root, "boot", a->boot) ||
        !cJSON_AddBoolToObject(root, "partial", partial) ||
        !(conn = cJSON_AddObjectToObject(root, "conn")) ||
        !(arr = cJSON_AddArrayToObject(root, "regions")))
        goto out;
    for (int b = 0; b < a->nbackends; b++) {
        nxl_backend_t *be = a->backends[b];
        if (!be->ops->conn_info)
            continue;
        void *ci;
        size_t cl;
        if ((st = be->ops->conn_info(be->state, &ci, &cl)) != NXL_SUCCESS)
            goto out;
        bool ok = add_b64(conn, be->ops->name, ci, cl);
        free(ci);
        if (!ok) {
            st = NXL_ERR_UNKNOWN;
            goto out;
        }
    }
    if (all) {
        for (int t = 0; t < NXL_MEM_TYPES; t++)
            for (size_t i = 0; i < a->regions[t].n; i++)
                if ((st = add_region(a, arr, a->regions[t].v[i])) != NXL_SUCCESS)
                    goto out;
    } else {
        for (size_t i = 0; i < nregs; i++)
            if ((st = add_region(a, arr, regs[i])) != NXL_SUCCESS)
                goto out;
    }
    if (ms && !add_strided(root, ms)) {
        st = NXL_ERR_UNKNOWN;
        goto out;
    }
    char *s = cJSON_PrintUnformatted(root);
    if (!s) {
        st = NXL_ERR_UNKNOWN;
        goto out;
    }
    *blob = s;
    *len = strlen(s);
    st = NXL_SUCCESS;
out:
    if (st != NXL_SUCCESS && !a->err[0])
        nxli_err(a, "nxl_md_local: could not serialise metadata (out of memory?)");
    cJSON_Delete(root);
    return st;
}

nxl_status_t nxl_md_local(nxl_agent_t *a, void **blob, size_t *len)
{
    if (a && nxli_thread_foreign(a))
        return nxli_rpc_md_local(a, blob, len);
    if (!blob || !len) {
        nxli_err(a, "nxl_md_local: blob and len pointers are required");
        return NXL_ERR_INVALID_PARAM;
    }
    a->err[0] = 0;
    return md_build(a, false, NULL, 0, true, NULL, blob, len);
}

/* The distinct regions holding descs, in their order, into regs (room for
 * n) and their number into *nr; NXL_ERR_NOT_FOUND with the sentence (call's
 * name first, tail last) when a descriptor lies in none */
static nxl_status_t regions_holding(nxl_agent_t *a, const char *call, const char *tail,
                                    nxl_mem_t type, const nxl_desc_t *descs, size_t n,
                                    nxli_region_t **regs, size_t *nr)
{
    *nr = 0;
    for (size_t i = 0; i < n; i++) {
        nxli_region_t *r = nxli_region_find(a, type, descs[i].dev_id, descs[i].addr, descs[i].len);
        if (!r) {
            nxli_err(a, "%s: descriptor %zu (%s 0x%lx+%zu, dev %llu) lies in no registered "
                        "region%s", call, i, nxl_mem_name(type), (unsigned long)descs[i].addr,
                     descs[i].len, (unsigned long long)descs[i].dev_id, tail);
            return NXL_ERR_NOT_FOUND;
        }
        bool seen = false;
        for (size_t j = 0; j < *nr && !seen; j++)
            seen = regs[j] == r;
        if (!seen)
            regs[(*nr)++] = r;
    }
    return NXL_SUCCESS;
}

nxl_status_t nxl_md_local_partial(nxl_agent_t *a, nxl_mem_t type, const nxl_desc_t *descs,
                                  size_t n, void **blob, size_t *len)
{
    if (a && nxli_thread_foreign(a))
        return nxli_rpc_md_local_partial(a, type, descs, n, blob, len);
    if (!blob || !len || (n && !descs) || (unsigned)type >= NXL_MEM_TYPES) {
        nxli_err(a, "nxl_md_local_partial: invalid arguments");
        return NXL_ERR_INVALID_PARAM;
    }
    nxli_region_t **regs = calloc(n + 1, sizeof(*regs));
    size_t nr = 0;
    if (!regs)
        return NXL_ERR_UNKNOWN;
    if (regions_holding(a, "nxl_md_local_partial", "", type, descs, n, regs, &nr) !=
        NXL_SUCCESS) {
        free(regs);
        return NXL_ERR_NOT_FOUND;
    }
    a->err[0] = 0;
    nxl_status_t st = md_build(a, true, regs, nr, false, NULL, blob, len);
    free(regs);
    return st;
}

/* labels (nxl_md_label): the regions holding descs, in order, become the
 * label's; the regions it named before lose it */
nxl_status_t nxli_md_label(nxl_agent_t *a, const char *call, const char *label, nxl_mem_t type,
                           const nxl_desc_t *descs, size_t n)
{
    bool ok = label && *label && strlen(label) <= NXLI_LABEL_MAX && (!n || descs) &&
              (unsigned)type < NXL_MEM_TYPES;
    for (const char *c = label; ok && *c; c++)
        ok = (unsigned char)*c >= 0x20;
    if (!ok) {
        nxli_err(a, "%s: needs a label of 1 to %u bytes without control characters, a memory "
                    "type, and descriptors when n > 0", call, NXLI_LABEL_MAX);
        return NXL_ERR_INVALID_PARAM;
    }
    nxli_region_t **regs = calloc(n + 1, sizeof(*regs));
    char *l = strdup(label), *spare = NULL;
    size_t nr = 0;
    if (!regs || !l) {
        free(regs);
        free(l);
        nxli_err(a, "%s: out of memory", call);
        return NXL_ERR_UNKNOWN;
    }
    if (regions_holding(a, call, "; nothing was labelled", type, descs, n, regs, &nr) !=
        NXL_SUCCESS) {
        free(regs);
        free(l);
        return NXL_ERR_NOT_FOUND;
    }
    /* the label leaves the regions it named (of any type) */
    for (int t = 0; t < NXL_MEM_TYPES; t++)
        for (size_t i = 0; i < a->regions[t].n; i++) {
            nxli_region_t *r = a->regions[t].v[i];
            if (r->label && !strcmp(r->label, label)) {
                free(r->label);
                r->label = NULL;
            }
        }
    for (size_t i = 0; i < nr; i++) {
        if (!(spare = i ? strdup(label) : l)) {
            nxli_err(a, "%s: out of memory: %zu of the %zu regions labelled", call, i, nr);
            free(regs);
            return NXL_ERR_UNKNOWN;
        }
        free(regs[i]->label); /* another label, which it leaves */
        regs[i]->label = spare;
        regs[i]->label_at = i;
    }
    if (!nr)
        free(l);
    free(regs);
    a->err[0] = 0;
    return NXL_SUCCESS;
}

nxl_status_t nxl_md_label(nxl_agent_t *a, const char *label, nxl_mem_t type,
                          const nxl_desc_t *descs, size_t n)
{
    if (a && nxli_thread_foreign(a))
        return nxli_rpc_md_label(a, label, type, descs, n);
    if (!a)
        return NXL_ERR_INVALID_PARAM;
    return nxli_md_label(a, "nxl_md_label", label, type, descs, n);
}

nxl_status_t nxl_md_local_partial_strided(nxl_agent_t *a, nxl_mem_t type, const nxl_strided_t *s,
                                          size_t n, void **blob, size_t *len)
{
    static const char fn[] = "nxl_md_local_partial_strided";
    if (a && nxli_thread_foreign(a))
        return nxli_rpc_md_local_partial_strided(a, type, s, n, blob, len);
    if (!blob || !len || (n && !s) || (unsigned)type >= NXL_MEM_TYPES ||
        n > NXLI_MD_MAX_REGIONS) {
        nxli_err(a, "%s: invalid arguments (blob and len pointers, at most %u strided lists, "
                    "memory type)", fn, NXLI_MD_MAX_REGIONS);
        return NXL_ERR_INVALID_PARAM;
    }
    nxli_region_t **regs = calloc(n + 1, sizeof(*regs));
    size_t nr = 0;
    if (!regs)
        return NXL_ERR_UNKNOWN;
    nxl_status_t st = NXL_ERR_INVALID_PARAM;
    for (size_t i = 0; i < n; i++) {
        size_t span, ne;
        char why[200];
        if (!nxli_strided_check(&s[i], type, &span, &ne, why, sizeof(why))) {
            nxli_err(a, "%s: list %zu %s", fn, i, why);
            goto out;
        }
        nxli_region_t *r = nxli_region_find(a, type, s[i].dev_id, s[i].base, span ? span : 1);
        if (!r) {
            nxli_err(a, "%s: list %zu (%s 0x%lx, %zu bytes from its first element to its last, "
                        "dev %llu) does not lie inside one registered region", fn, i,
                     nxl_mem_name(type), (unsigned long)s[i].base, span,
                     (unsigned long long)s[i].dev_id);
            st = NXL_ERR_NOT_FOUND;
            goto out;
        }
        bool seen = false;
        for (size_t j = 0; j < nr && !seen; j++)
            seen = regs[j] == r;
        if (!seen)
            regs[nr++] = r;
    }
    a->err[0] = 0;
    md_strided_t ms = {.type = type, .s = s, .n = n};
    st = md_build(a, true, regs, nr, false, &ms, blob, len);
out:
    free(regs);
    return st;
}

nxl_status_t nxl_md_remote_strided(nxl_agent_t *a, const char *remote, nxl_mem_t *type,
                                   nxl_strided_t *out, size_t cap, size_t *n)
{
    if (a && nxli_thread_foreign(a))
        return nxli_rpc_md_remote_strided(a, remote, type, out, cap, n);
    if (!remote || !n || (cap && !out)) {
        nxli_err(a, "nxl_md_remote_strided: needs the remote agent's name, a count pointer and "
                    "room for cap lists");
        return NXL_ERR_INVALID_PARAM;
    }
    NXLI_TLOCK(a);
    nxl_status_t st = NXL_SUCCESS;
    const nxli_remote_t *r = nxli_remote_find(a, remote);
    if (!r || !r->strided) {
        if (!r)
            nxli_err(a, "nxl_md_remote_strided: agent '%s' is not loaded", remote);
        else
            nxli_err(a, "nxl_md_remote_strided: the metadata of agent '%s' carried no strided "
                        "lists (see nxl_md_local_partial_strided)", remote);
        st = NXL_ERR_NOT_FOUND;
    } else {
        *n = r->nstrided;
        if (type)
            *type = r->strided_type;
        if (cap)
            memcpy(out, r->strided, (cap < r->nstrided ? cap : r->nstrided) * sizeof(*out));
    }
    NXLI_TUNLOCK(a);
    return st;
}

/* ---------------------------------------------------------------- loading */

static bool get_u64(const cJSON *o, const char *k, uint64_t *v)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsString(it) || !it->valuestring[0] || strlen(it->valuestring) > 20)
        return false;
    for (const char *p = it->valuestring; *p; p++)
        if (*p < '0' || *p > '9')
            return false;
    errno = 0;
    char *end;
    unsigned long long x = strtoull(it->valuestring, &end, 10);
    if (errno || *end)
        return false;
    *v = x;
    return true;
}

static int mem_from_name(const char *s)
{
    for (int t = 0; t < NXL_MEM_TYPES; t++)
        if (!strcmp(s, nxl_mem_name((nxl_mem_t)t)))
            return t;
    return -1;
}

/* Every key of an object appears once; cJSON keeps duplicates. */
static const char *dup_key(const cJSON *o)
{
    for (const cJSON *x = o->child; x; x = x->next)
        for (const cJSON *y = x->next; y; y = y->next)
            if (x->string && y->string && !strcmp(x->string, y->string))
                return x->string;
    return NULL;
}

static int rr_sort(const void *pa, const void *pb)
{
    const nxli_rregion_t *x = *(nxli_rregion_t *const *)pa, *y = *(nxli_rregion_t *const *)pb;
    return rcmp(x->type, x->dev, x->addr, y);
}

/* RFC 8259: a control character (U+0000..U+001F) appears inside a string
 * only escaped, and between tokens only as white space (tab, LF, CR). cJSON
 * 1.7 takes a raw NUL as the end of a string's value and every control
 * character as white space, so a string with a NUL in it would load cut
 * short — an address with digits missing, a key of a few bytes that a
 * transport library then reads past. Such bytes are refused before cJSON
 * parses. An escaped NUL (\u0000) is valid JSON, but no field of nxl
 * metadata can hold one and cJSON would cut the string there: refused too.
 * One final NUL after the JSON text (a C string passed with its terminator)
 * is not part of it. Returns NULL, or what is wrong with *at set to its
 * offset. (etcd.c checks etcd's answers with it too.) */
const char *nxli_json_bad_control(const void *buf, size_t len, size_t *at)
{
    const unsigned char *s = buf;
    if (len && !s[len - 1])
        len--;
    bool in_str = false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = s[i];
        *at = i;
        if (!in_str) {
            if (c == '"')
                in_str = true;
            else if (c < 0x20 && c != '\t' && c != '\n' && c != '\r')
                return "a raw control character between its tokens";
        } else if (c == '"') {
            in_str = false;
        } else if (c < 0x20) {
            return "a raw control character inside a string (JSON allows them only escaped)";
        } else if (c == '\\' && i + 1 < len) {
            if (s[i + 1] < 0x20) {
                *at = i + 1;
                return "a raw control character inside a string (JSON allows them only escaped)";
            }
            if (i + 5 < len && s[i + 1] == 'u' && !memcmp(s + i + 2, "0000", 4))
                return "an escaped NUL (\\u0000) inside a string, which no metadata field holds";
            i++; /* the escaped character */
        }
    }
    return NULL;
}

static bool same_conn(nxl_agent_t *a, const nxli_remote_t *old, void *const *ci,
                      const size_t *cl)
{
    for (int b = 0; b < a->nbackends; b++)
        if (old->conn_info_len[b] != cl[b] ||
            (cl[b] && memcmp(old->conn_info[b], ci[b], cl[b])))
            return false;
    return true;
}

static nxl_status_t md_load_ex_locked(nxl_agent_t *a, const void *blob, size_t len, bool self,
                             nxli_remote_t **out, char *name_out, size_t cap);

nxl_status_t nxli_md_load_ex(nxl_agent_t *a, const void *blob, size_t len, bool self,
                             nxli_remote_t **out, char *name_out, size_t cap)
{
    NXLI_LOCKED(nxl_status_t, a, md_load_ex_locked(a, blob, len, self, out, name_out, cap));
}

/* One metadata blob on its way in: what md_load_ex_locked's steps read,
 * make and hand to the next */
typedef struct md_in {
    nxl_agent_t *a;
    bool self;
    cJSON *root;
    const char *name;
    uint64_t boot;                         /* the incarnation (0: the blob has none) */
    bool partial;
    const cJSON *regions;                  /* the "regions" array */
    size_t nr;
    void *ci[NXLI_MAX_BACKENDS];           /* decoded conn info, per backend */
    size_t cl[NXLI_MAX_BACKENDS];
    nxli_remote_t *r, *old;                /* r: the agent loaded (old itself when merging) */
    bool merge;                            /* partial metadata of a peer already known */
    nxli_rregion_t **add;                  /* the blob's regions, not yet the remote's */
    size_t nadd;
    nxl_strided_t *strided;                /* its strided lists (has_strided), not yet the remote's */
    size_t nstrided;
    nxl_mem_t strided_type;
    bool has_strided;
} md_in_t;

/* refuses the blob with a sentence (from a step of md_load_ex_locked) */
#define REFUSE(...) return (nxli_err(m->a, "nxl_md_load: " __VA_ARGS__), NXL_ERR_MISMATCH)

/* the JSON itself: one object, nothing after it, no control characters in
 * strings, no field twice, this format's version */
static nxl_status_t md_parse(md_in_t *m, const void *blob, size_t len)
{
    if (!blob || !len)
        REFUSE("empty metadata blob");
    if (len > NXLI_MD_MAX_BYTES)
        REFUSE("metadata blob of %zu bytes exceeds the %u-byte limit", len, NXLI_MD_MAX_BYTES);
    size_t bad_at;
    const char *bad = nxli_json_bad_control(blob, len, &bad_at);
    if (bad)
        REFUSE("metadata is not valid JSON: %s (byte 0x%02x at offset %zu of %zu)", bad,
               ((const unsigned char *)blob)[bad_at], bad_at, len);
    const char *end = NULL;
    m->root = cJSON_ParseWithLengthOpts(blob, len, &end, false);
    if (!m->root)
        REFUSE("metadata is not valid JSON (truncated or corrupt near byte %zu of %zu)",
               end ? (size_t)(end - (const char *)blob) : (size_t)0, len);
    /* one JSON value and nothing after it but white space (and a final NUL) */
    size_t at = (size_t)(end - (const char *)blob);
    while (at < len && ((const char *)blob)[at] && strchr(" \t\r\n", ((const char *)blob)[at]))
        at++;
    if (at < len && !(at == len - 1 && ((const char *)blob)[at] == 0))
        REFUSE("metadata has %zu bytes of trailing data after its JSON object (corrupt, or two "
               "blobs run together?)", len - at);
    if (!cJSON_IsObject(m->root))
        REFUSE("metadata is not a JSON object");
    if (dup_key(m->root))
        REFUSE("metadata repeats the field \"%s\"", dup_key(m->root));
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(m->root, "nxl");
    if (!cJSON_IsNumber(ver))
        REFUSE("metadata has no \"nxl\" format version (is it nxl metadata?)");
    if (ver->valuedouble != NXLI_MD_VERSION)
        REFUSE("metadata format version %g is not %d, the one this library reads",
               ver->valuedouble, NXLI_MD_VERSION);
    return NXL_SUCCESS;
}

/* the agent's name, "partial", the connection info of the transports this
 * agent has (decoded), the regions array */
static nxl_status_t md_head(md_in_t *m)
{
    nxl_agent_t *a = m->a;
    const cJSON *jn = cJSON_GetObjectItemCaseSensitive(m->root, "agent");
    if (!cJSON_IsString(jn) || !jn->valuestring[0] || strlen(jn->valuestring) >= NXLI_NAME_MAX)
        REFUSE("metadata \"agent\" must be a name of 1 to %d bytes", NXLI_NAME_MAX - 1);
    const char *name = m->name = jn->valuestring;
    if (!m->self && !strcmp(name, a->name))
        REFUSE("metadata names agent '%s', which is this agent itself; agent names must be "
               "unique (loopback transfers name the agent itself in nxl_prep without loading)",
               name);
    if (cJSON_GetObjectItemCaseSensitive(m->root, "boot") && !get_u64(m->root, "boot", &m->boot))
        REFUSE("metadata \"boot\" of '%s' must be a decimal string", name);
    const cJSON *jp = cJSON_GetObjectItemCaseSensitive(m->root, "partial");
    if (jp && !cJSON_IsBool(jp))
        REFUSE("metadata \"partial\" must be true or false");
    m->partial = jp && cJSON_IsTrue(jp);
    const cJSON *jc = cJSON_GetObjectItemCaseSensitive(m->root, "conn");
    if (!cJSON_IsObject(jc))
        REFUSE("metadata of '%s' has no \"conn\" object", name);
    if (dup_key(jc))
        REFUSE("metadata of '%s' names transport %s twice in \"conn\"", name, dup_key(jc));
    for (const cJSON *c = jc->child; c; c = c->next) {
        if (!cJSON_IsString(c) || strlen(c->valuestring) > 4 * NXLI_MD_MAX_KEY)
            REFUSE("connection info of '%s' for %s is not a base64 string of at most %u bytes",
                   name, c->string, NXLI_MD_MAX_KEY);
        nxl_backend_t *b = nxl_backend_get(a, c->string);
        if (!b)
            continue; /* a transport we do not have */
        m->ci[b->index] = nxli_b64_decode(c->valuestring, &m->cl[b->index]);
        if (!m->ci[b->index] || !m->cl[b->index])
            REFUSE("connection info of '%s' for %s is not valid base64", name, c->string);
    }
    m->regions = cJSON_GetObjectItemCaseSensitive(m->root, "regions");
    if (!cJSON_IsArray(m->regions))
        REFUSE("metadata of '%s' has no \"regions\" array", name);
    m->nr = (size_t)cJSON_GetArraySize(m->regions);
    if (m->nr > NXLI_MD_MAX_REGIONS)
        REFUSE("metadata of '%s' lists %zu regions, more than the limit of %u", name, m->nr,
               NXLI_MD_MAX_REGIONS);
    return NXL_SUCCESS;
}

/* the agent to load into: the one already known (partial metadata of the
 * same peer adds regions to it), else a new one, connected by each
 * transport whose conn info the blob carries */
static nxl_status_t md_connect(md_in_t *m)
{
    nxl_agent_t *a = m->a;
    const char *name = m->name;
    m->old = m->self ? NULL : nxli_remote_find(a, name);
    m->merge = m->old && m->partial && same_conn(a, m->old, m->ci, m->cl) &&
              m->old->boot == m->boot;
    if (!m->self && !m->old && a->npeers >= a->max_peers) {
        nxli_err(a, "nxl_md_load: agent '%s' already knows %zu agents, its max_peers; "
                    "metadata of '%s' refused (invalidate agents it no longer needs, or raise "
                    "max_peers)", a->name, a->npeers, name);
        return NXL_ERR_NOT_ALLOWED;
    }
    if (m->merge) {
        m->r = m->old;
        return NXL_SUCCESS;
    }
    nxli_remote_t *r = m->r = calloc(1, sizeof(*r));
    if (!r || !(r->name = strdup(name)))
        REFUSE("out of memory");
    r->agent = a;
    r->refs = 1;
    r->self = m->self;
    r->boot = m->boot;
    for (int b = 0; b < a->nbackends; b++) {
        if (!m->ci[b])
            continue;
        nxl_backend_t *be = a->backends[b];
        a->err[0] = 0;
        nxl_status_t st = be->ops->load_conn(be->state, name, m->ci[b], m->cl[b], &r->conn[b]);
        if (st != NXL_SUCCESS) {
            if (!a->err[0])
                nxli_err(a, "nxl_md_load: %s could not connect to agent '%s'", be->ops->name,
                         name);
            return st;
        }
        r->conn_info[b] = m->ci[b];
        r->conn_info_len[b] = m->cl[b];
        m->ci[b] = NULL;
    }
    return NXL_SUCCESS;
}

/* region @p idx of the blob, @p g, into @p rr: its place, and its key for
 * each transport connected to the agent */
static nxl_status_t md_region(md_in_t *m, size_t idx, const cJSON *g, nxli_rregion_t *rr)
{
    nxl_agent_t *a = m->a;
    const char *name = m->name;
    if (!cJSON_IsObject(g))
        REFUSE("region %zu of '%s' is not an object", idx, name);
    if (dup_key(g))
        REFUSE("region %zu of '%s' repeats the field \"%s\"", idx, name, dup_key(g));
    const cJSON *jt = cJSON_GetObjectItemCaseSensitive(g, "type");
    int t = cJSON_IsString(jt) ? mem_from_name(jt->valuestring) : -1;
    uint64_t dev, addr, rlen;
    if (t < 0)
        REFUSE("region %zu of '%s' has no valid \"type\" (DRAM, VRAM, BLK, OBJ, FILE)", idx,
               name);
    if (!get_u64(g, "dev", &dev) || !get_u64(g, "addr", &addr) || !get_u64(g, "len", &rlen))
        REFUSE("region %zu of '%s' needs \"dev\", \"addr\" and \"len\" as decimal strings", idx,
               name);
    if (!rlen || addr + rlen < addr)
        REFUSE("region %zu of '%s' has length 0 or wraps around the address space", idx, name);
    const cJSON *jk = cJSON_GetObjectItemCaseSensitive(g, "keys");
    if (!cJSON_IsObject(jk))
        REFUSE("region %zu of '%s' has no \"keys\" object", idx, name);
    if (dup_key(jk))
        REFUSE("region %zu of '%s' names transport %s twice", idx, name, dup_key(jk));
    const cJSON *jl = cJSON_GetObjectItemCaseSensitive(g, "label");
    uint64_t at = 0;
    if (jl && (!cJSON_IsString(jl) || !*jl->valuestring ||
               strlen(jl->valuestring) > NXLI_LABEL_MAX || !get_u64(g, "at", &at) ||
               at >= NXLI_MD_MAX_REGIONS))
        REFUSE("region %zu of '%s': \"label\" must be a string of 1 to %u bytes with \"at\", "
               "its place, a decimal string below %u", idx, name, NXLI_LABEL_MAX,
               NXLI_MD_MAX_REGIONS);
    if (jl && !(rr->label = strdup(jl->valuestring)))
        REFUSE("out of memory");
    rr->label_at = (size_t)at;
    rr->type = (nxl_mem_t)t;
    rr->dev = dev;
    rr->addr = (uintptr_t)addr;
    rr->len = (size_t)rlen;
    for (const cJSON *k = jk->child; k; k = k->next) {
        if (!cJSON_IsString(k) || strlen(k->valuestring) > 4 * NXLI_MD_MAX_KEY)
            REFUSE("region %zu of '%s': key for %s is not a base64 string of at most %u bytes",
                   idx, name, k->string, NXLI_MD_MAX_KEY);
        nxl_backend_t *b = nxl_backend_get(a, k->string);
        if (!b || !m->r->conn[b->index])
            continue;
        size_t kl;
        void *kb = nxli_b64_decode(k->valuestring, &kl);
        if (!kb || !kl) {
            free(kb);
            REFUSE("region %zu of '%s': key for %s is not valid base64", idx, name, k->string);
        }
        a->err[0] = 0;
        nxl_status_t st = b->ops->load_key(b->state, m->r->conn[b->index], kb, kl,
                                           &rr->rkey[b->index]);
        free(kb);
        if (st != NXL_SUCCESS) {
            if (!a->err[0])
                nxli_err(a, "nxl_md_load: %s refused the key of region %zu of '%s'",
                         b->ops->name, idx, name);
            return st;
        }
    }
    return NXL_SUCCESS;
}

/* every region of the blob, sorted; overlapping regions are refused */
static nxl_status_t md_regions(md_in_t *m)
{
    m->add = calloc(m->nr + 1, sizeof(*m->add));
    if (!m->add)
        REFUSE("out of memory");
    size_t idx = 0;
    for (const cJSON *g = m->regions->child; g; g = g->next, idx++) {
        nxli_rregion_t *rr = calloc(1, sizeof(*rr));
        if (!rr)
            REFUSE("out of memory");
        m->add[m->nadd++] = rr;
        nxl_status_t st = md_region(m, idx, g, rr);
        if (st != NXL_SUCCESS)
            return st;
    }
    nxli_rregion_t **add = m->add;
    qsort(add, m->nadd, sizeof(*add), rr_sort);
    for (size_t i = 1; i < m->nadd; i++)
        if (add[i]->type == add[i - 1]->type && add[i]->dev == add[i - 1]->dev &&
            add[i - 1]->addr + add[i - 1]->len > add[i]->addr)
            REFUSE("metadata of '%s' lists overlapping %s regions at 0x%lx and 0x%lx", m->name,
                   nxl_mem_name(add[i]->type), (unsigned long)add[i - 1]->addr,
                   (unsigned long)add[i]->addr);
    return NXL_SUCCESS;
}

/* the blob's strided lists, if it carries any: each checked as
 * nxl_prep_strided() checks one, and inside one of the blob's regions */
static nxl_status_t md_strided(md_in_t *m)
{
    const char *name = m->name;
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(m->root, "strided");
    if (!js)
        return NXL_SUCCESS;
    if (!cJSON_IsObject(js) || dup_key(js))
        REFUSE("metadata \"strided\" of '%s' is not an object with \"type\" and \"lists\"",
               name);
    const cJSON *jt = cJSON_GetObjectItemCaseSensitive(js, "type");
    const cJSON *jl = cJSON_GetObjectItemCaseSensitive(js, "lists");
    int t = cJSON_IsString(jt) ? mem_from_name(jt->valuestring) : -1;
    if (t < 0)
        REFUSE("strided lists of '%s' have no valid \"type\" (DRAM, VRAM, BLK, OBJ, FILE)", name);
    if (!cJSON_IsArray(jl))
        REFUSE("strided lists of '%s' have no \"lists\" array", name);
    size_t n = (size_t)cJSON_GetArraySize(jl);
    if (n > NXLI_MD_MAX_REGIONS)
        REFUSE("metadata of '%s' carries %zu strided lists, more than the limit of %u", name, n,
               NXLI_MD_MAX_REGIONS);
    m->strided = calloc(n + 1, sizeof(*m->strided));
    if (!m->strided)
        REFUSE("out of memory");
    m->nstrided = n;
    m->strided_type = (nxl_mem_t)t;
    m->has_strided = true;
    size_t idx = 0, total = 0;
    for (const cJSON *l = jl->child; l; l = l->next, idx++) {
        nxl_strided_t *d = &m->strided[idx];
        uint64_t dev, base, len, stride, count, oc = 0, os = 0;
        if (!cJSON_IsObject(l) || dup_key(l))
            REFUSE("strided list %zu of '%s' is not an object (or repeats a field)", idx, name);
        if (!get_u64(l, "dev", &dev) || !get_u64(l, "base", &base) || !get_u64(l, "len", &len) ||
            !get_u64(l, "stride", &stride) || !get_u64(l, "count", &count))
            REFUSE("strided list %zu of '%s' needs \"dev\", \"base\", \"len\", \"stride\" "
                   "and \"count\" as decimal strings", idx, name);
        bool has_oc = cJSON_GetObjectItemCaseSensitive(l, "outer_count") != NULL;
        if (has_oc && (!get_u64(l, "outer_count", &oc) || !get_u64(l, "outer_stride", &os)))
            REFUSE("strided list %zu of '%s' needs \"outer_count\" and \"outer_stride\" "
                   "together, as decimal strings", idx, name);
        if (base > UINTPTR_MAX || len > SIZE_MAX || stride > SIZE_MAX || count > SIZE_MAX ||
            oc > SIZE_MAX || os > SIZE_MAX)
            REFUSE("strided list %zu of '%s' holds a number this machine cannot address", idx,
                   name);
        *d = (nxl_strided_t){.base = (uintptr_t)base, .len = (size_t)len, .stride = (size_t)stride,
                             .count = (size_t)count, .outer_count = (size_t)oc,
                             .outer_stride = (size_t)os, .dev_id = dev};
        size_t span, ne;
        char why[200];
        if (!nxli_strided_check(d, (nxl_mem_t)t, &span, &ne, why, sizeof(why)))
            REFUSE("strided list %zu of '%s' %s", idx, name, why);
        if (__builtin_add_overflow(total, ne, &total))
            REFUSE("strided lists of '%s' hold more than %zu elements", name, (size_t)SIZE_MAX);
        bool in = false;
        for (size_t i = 0; i < m->nadd && !in; i++) {
            const nxli_rregion_t *g = m->add[i];
            in = g->type == (nxl_mem_t)t && g->dev == dev && d->base >= g->addr &&
                 (span ? span : 1) <= g->len && d->base - g->addr <= g->len - (span ? span : 1);
        }
        if (!in)
            REFUSE("strided list %zu of '%s' (%s 0x%lx, %zu bytes) lies in none of the regions "
                   "its metadata carries", idx, name, nxl_mem_name((nxl_mem_t)t),
                   (unsigned long)d->base, span);
    }
    return NXL_SUCCESS;
}

/* the regions become the agent's (those a merge already knows stay as
 * they are: prepared lists point at them), the agent joins the known ones */
static nxl_status_t md_commit(md_in_t *m)
{
    nxl_agent_t *a = m->a;
    nxli_remote_t *r = m->r;
    size_t need = (m->merge ? r->nregs : 0) + m->nadd;
    if (need > r->cap) {
        nxli_rregion_t **v = realloc(r->regs, (need + 1) * sizeof(*v));
        if (!v)
            REFUSE("out of memory");
        r->regs = v;
        r->cap = need;
    }
    size_t added = 0;
    for (size_t i = 0; i < m->nadd; i++) {
        nxli_rregion_t *g = m->add[i];
        if (m->merge && nxli_rregion_find(r, g->type, g->dev, g->addr, g->len)) {
            for (int b = 0; b < a->nbackends; b++)
                if (g->rkey[b])
                    a->backends[b]->ops->unload_key(a->backends[b]->state, g->rkey[b]);
            free(g->label);
            free(g);
            continue;
        }
        r->regs[r->nregs++] = g;
        added++;
    }
    m->nadd = 0;
    if (m->has_strided) {
        free(r->strided);
        r->strided = m->strided;
        r->nstrided = m->nstrided;
        r->strided_type = m->strided_type;
        m->strided = NULL;
    }
    if (r->nregs)
        qsort(r->regs, r->nregs, sizeof(*r->regs), rr_sort);
    if (m->self)
        return NXL_SUCCESS;
    if (m->merge) {
        nxli_peer_loaded(a, r, true, false, added > 0);
        return NXL_SUCCESS;
    }
    bool new_inc = false, changed = false;
    if (m->old) {
        nxli_remote_t *o = m->old;
        /* another process under the same name: its number differs, or,
         * for metadata without one, its connection info */
        new_inc = o->boot || r->boot ? o->boot != r->boot
                                     : !same_conn(a, o, r->conn_info, r->conn_info_len);
        changed = o->nregs != r->nregs;
        for (size_t i = 0; i < r->nregs && !changed; i++)
            changed = rcmp(r->regs[i]->type, r->regs[i]->dev, r->regs[i]->addr, o->regs[i]) ||
                      r->regs[i]->len != o->regs[i]->len;
        if (new_inc) {
            /* transfers in flight to the old process fail (never moved
             * over silently) */
            nxl_xfer_t *x;
            LIST_FOREACH(x, &a->xfers, link) {
                /* acquire: as in remote_lost_locked() */
                nxl_future_t *f = __atomic_load_n(&x->active, __ATOMIC_ACQUIRE);
                if (x->remote == o && f)
                    nxli_future_abort(f, NXL_ERR_REMOTE_DISCONNECT,
                                      "the remote agent was replaced by a new incarnation (it "
                                      "restarted) while the transfer was in flight");
            }
        }
        remote_unlink(o);
    }
    LIST_INSERT_HEAD(&a->remotes, r, link);
    a->npeers++;
    nxli_log(a, NXL_LOG_INFO, "loaded metadata of agent '%s' (%zu regions)%s", m->name,
             r->nregs, m->old ? ", replacing what was known" : "");
    nxli_peer_loaded(a, r, m->old != NULL, new_inc, changed);
    return NXL_SUCCESS;
}
#undef REFUSE

static nxl_status_t md_load_ex_locked(nxl_agent_t *a, const void *blob, size_t len, bool self,
                                      nxli_remote_t **out, char *name_out, size_t cap)
{
    md_in_t m = {.a = a, .self = self};
    nxl_status_t st = md_parse(&m, blob, len);
    if (st == NXL_SUCCESS)
        st = md_head(&m);
    if (st == NXL_SUCCESS)
        st = md_connect(&m);
    if (st == NXL_SUCCESS)
        st = md_regions(&m);
    if (st == NXL_SUCCESS)
        st = md_strided(&m);
    if (st == NXL_SUCCESS)
        st = md_commit(&m);
    if (st == NXL_SUCCESS) {
        if (out)
            *out = m.r;
        if (name_out && cap)
            snprintf(name_out, cap, "%s", m.name);
        m.r = NULL;
    }
    for (size_t i = 0; i < m.nadd; i++) {
        for (int b = 0; b < a->nbackends; b++)
            if (m.add[i]->rkey[b])
                a->backends[b]->ops->unload_key(a->backends[b]->state, m.add[i]->rkey[b]);
        free(m.add[i]->label);
        free(m.add[i]);
    }
    free(m.add);
    free(m.strided);
    if (m.r && !m.merge)
        remote_free(m.r);
    for (int b = 0; b < NXLI_MAX_BACKENDS; b++)
        free(m.ci[b]);
    cJSON_Delete(m.root);
    return st;
}

nxl_status_t nxl_md_load(nxl_agent_t *a, const void *blob, size_t len, char *name_out,
                         size_t cap)
{
    if (a && nxli_thread_foreign(a))
        return nxli_rpc_md_load(a, blob, len, name_out, cap);
    nxl_status_t st = nxli_md_load_ex(a, blob, len, false, NULL, name_out, cap);
    if (st == NXL_SUCCESS)
        a->st.md_loaded++;
    return st;
}
