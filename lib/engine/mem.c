/* SPDX-License-Identifier: BSD-3-Clause */
/* The memory section: registered regions per memory type, sorted by
 * (device, address) so that a descriptor is resolved by binary search. */
#include "internal.h"

#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int cmp_key(uint64_t dev, uintptr_t addr, const nxli_region_t *r)
{
    if (dev != r->dev)
        return dev < r->dev ? -1 : 1;
    if (addr != r->addr)
        return addr < r->addr ? -1 : 1;
    return 0;
}

/* index of the first region whose (dev, addr) is > the key */
static size_t upper(const nxli_rtab_t *t, uint64_t dev, uintptr_t addr)
{
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cmp_key(dev, addr, t->v[mid]) >= 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

nxli_region_t *nxli_region_find(nxl_agent_t *a, nxl_mem_t t, uint64_t dev, uintptr_t addr,
                                size_t len)
{
    if ((unsigned)t >= NXL_MEM_TYPES)
        return NULL;
    nxli_rtab_t *tab = &a->regions[t];
    size_t i = upper(tab, dev, addr);
    if (i == 0)
        return NULL;
    nxli_region_t *r = tab->v[i - 1];
    if (r->dev != dev || addr < r->addr || len > r->len || addr - r->addr > r->len - len)
        return NULL;
    return r;
}

int nxlt_mem_registered(nxlt_ctx_t *ctx, nxl_mem_t type, uint64_t dev, uint64_t addr, size_t len)
{
    nxl_agent_t *a = ctx->agent;
    if (addr > UINTPTR_MAX)
        return 0;
    nxli_region_t *r = nxli_region_find(a, type, dev, (uintptr_t)addr, len);
    if (!r)
        return 0;
    for (int i = 0; i < a->nbackends; i++)
        if (a->backends[i] == ctx->backend)
            return r->md[i] != NULL;
    return 0;
}

static nxli_region_t *find_exact(nxl_agent_t *a, nxl_mem_t t, const nxl_desc_t *d, size_t *pos)
{
    nxli_rtab_t *tab = &a->regions[t];
    size_t i = upper(tab, d->dev_id, d->addr);
    if (pos)
        *pos = i;
    if (i && tab->v[i - 1]->dev == d->dev_id && tab->v[i - 1]->addr == d->addr &&
        tab->v[i - 1]->len == d->len) {
        if (pos)
            *pos = i - 1;
        return tab->v[i - 1];
    }
    return NULL;
}

/* would [addr, addr+len) on dev overlap a region other than an exact match? */
static bool overlaps(nxl_agent_t *a, nxl_mem_t t, const nxl_desc_t *d)
{
    nxli_rtab_t *tab = &a->regions[t];
    size_t i = upper(tab, d->dev_id, d->addr);
    if (i && tab->v[i - 1]->dev == d->dev_id) {
        nxli_region_t *p = tab->v[i - 1];
        if (p->addr + p->len > d->addr)
            return true;
    }
    if (i < tab->n && tab->v[i]->dev == d->dev_id && tab->v[i]->addr < d->addr + d->len)
        return true;
    return false;
}

static nxl_status_t tab_insert(nxli_rtab_t *t, size_t pos, nxli_region_t *r)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 16;
        nxli_region_t **v = realloc(t->v, cap * sizeof(*v));
        if (!v)
            return NXL_ERR_UNKNOWN;
        t->v = v;
        t->cap = cap;
    }
    memmove(&t->v[pos + 1], &t->v[pos], (t->n - pos) * sizeof(*t->v));
    t->v[pos] = r;
    t->n++;
    return NXL_SUCCESS;
}

static void tab_remove(nxli_rtab_t *t, size_t pos)
{
    memmove(&t->v[pos], &t->v[pos + 1], (t->n - pos - 1) * sizeof(*t->v));
    t->n--;
}

static void region_release_backends(nxl_agent_t *a, nxli_region_t *r)
{
    for (int i = 0; i < a->nbackends; i++) {
        nxl_backend_t *b = a->backends[i];
        free(r->key[i]);
        r->key[i] = NULL;
        if (!r->md[i])
            continue;
        if (r->alloc && b == r->alloc_backend)
            b->ops->mem_free(b->state, (void *)r->addr, r->md[i]);
        else
            b->ops->dereg(b->state, r->md[i]);
        r->md[i] = NULL;
    }
    if (r->alloc && !r->alloc_backend)
        free((void *)r->addr);
}

/* The application gave the region up (deregistered, freed): peers must not
 * reach it any more, even while local transfers keep its registration
 * alive. Each transport that needs to tells its peers (revoke); loopback
 * transfers of this agent made before are refused from now on. */
static void region_revoke(nxl_agent_t *a, nxli_region_t *r)
{
    for (int i = 0; i < a->nbackends; i++) {
        nxl_backend_t *b = a->backends[i];
        if (r->md[i] && b->ops->revoke) {
            nxl_desc_t d = {.addr = r->addr, .len = r->len, .dev_id = r->dev};
            b->ops->revoke(b->state, r->type, &d, r->md[i]);
        }
    }
    if (a->self && nxli_rregion_revoke(a->self, r->type, r->dev, r->addr, r->len) < 0) {
        a->self->invalid = true; /* out of memory: its transfers are refused */
        nxli_remote_put(a->self);
        a->self = NULL;
    }
}

void nxli_region_put(nxl_agent_t *a, nxli_region_t *r)
{
    NXLI_TLOCK(a);
    if (--r->refs == 0) {
        region_release_backends(a, r);
        free(r);
    }
    NXLI_TUNLOCK(a);
}

nxl_status_t nxli_region_key(nxl_agent_t *a, nxli_region_t *r, int bi, const void **key,
                             size_t *len)
{
    nxl_backend_t *b = a->backends[bi];
    if (!r->md[bi] || !b->ops->pack_key) {
        *key = NULL;
        *len = 0;
        return NXL_SUCCESS;
    }
    if (!r->key[bi]) {
        nxl_status_t st = b->ops->pack_key(b->state, r->md[bi], &r->key[bi], &r->key_len[bi]);
        if (st != NXL_SUCCESS)
            return st;
    }
    *key = r->key[bi];
    *len = r->key_len[bi];
    return NXL_SUCCESS;
}

static bool serves(nxl_backend_t *b, nxl_mem_t t)
{
    return (b->ops->mem_mask & (1u << t)) != 0;
}

/* What to create to serve @p t: "create one first: CUDA" from the
 * transports of this build that serve it, or that the build has none. */
static const char *what_serves(nxl_mem_t t, bool alloc, char *buf, size_t cap)
{
    size_t n, k = 0;
    const nxli_transport_t *tr = nxli_transports(&n);
    int len = snprintf(buf, cap, "create one first with nxl_backend_create() (this build's that "
                                 "%s it: ", alloc ? "allocate" : "serve");
    for (size_t i = 0; i < n; i++) {
        const nxlt_ops_t *o = tr[i].ops;
        if (o && (o->mem_mask & (1u << t)) && (!alloc || o->mem_alloc) && len > 0 &&
            (size_t)len < cap)
            len += snprintf(buf + len, cap - (size_t)len, "%s%s", k++ ? ", " : "", o->name);
    }
    if (!k)
        snprintf(buf, cap, "this build has no transport that %s it%s",
                 alloc ? "allocates" : "serves",
                 t == NXL_VRAM ? " (configure --enable-cuda with the CUDA headers)" : "");
    else if (len > 0 && (size_t)len < cap)
        snprintf(buf + len, cap - (size_t)len, ")");
    return buf;
}

static nxl_status_t check_type(nxl_agent_t *a, const char *call, nxl_mem_t type)
{
    if ((unsigned)type >= NXL_MEM_TYPES) {
        nxli_err(a, "%s: memory type %d is not one of DRAM, VRAM, BLK, OBJ, FILE", call, (int)type);
        return NXL_ERR_INVALID_PARAM;
    }
    return NXL_SUCCESS;
}

/* registers one descriptor with backend i; *added tells whether it was new */
static nxl_status_t reg_one(nxl_agent_t *a, nxl_mem_t type, const nxl_desc_t *d, nxl_backend_t *b,
                            nxli_region_t **created)
{
    *created = NULL;
    nxli_region_t *r = find_exact(a, type, d, NULL);
    if (r && r->md[b->index]) {
        nxli_err(a, "nxl_mem_register: %s region 0x%lx+%zu (dev %llu) is already registered with "
                    "%s", nxl_mem_name(type), (unsigned long)d->addr, d->len,
                 (unsigned long long)d->dev_id, b->ops->name);
        return NXL_ERR_NOT_ALLOWED;
    }
    if (!r && overlaps(a, type, d)) {
        nxli_err(a, "nxl_mem_register: %s region 0x%lx+%zu (dev %llu) overlaps a registered "
                    "region without matching it; register whole regions once and address parts "
                    "of them with descriptors", nxl_mem_name(type), (unsigned long)d->addr,
                 d->len, (unsigned long long)d->dev_id);
        return NXL_ERR_NOT_ALLOWED;
    }
    void *md = NULL;
    a->err[0] = 0;
    nxl_status_t st = b->ops->reg(b->state, type, d, &md);
    if (st != NXL_SUCCESS) {
        if (!a->err[0])
            nxli_err(a, "nxl_mem_register: %s could not register %s region 0x%lx+%zu",
                     b->ops->name, nxl_mem_name(type), (unsigned long)d->addr, d->len);
        return st;
    }
    if (!r) {
        size_t pos;
        find_exact(a, type, d, &pos);
        r = calloc(1, sizeof(*r));
        if (!r || tab_insert(&a->regions[type], pos, r) != NXL_SUCCESS) {
            free(r);
            b->ops->dereg(b->state, md);
            nxli_err(a, "nxl_mem_register: out of memory");
            return NXL_ERR_UNKNOWN;
        }
        r->type = type;
        r->dev = d->dev_id;
        r->addr = d->addr;
        r->len = d->len;
        r->refs = 1;
        *created = r;
    }
    r->md[b->index] = md;
    return NXL_SUCCESS;
}

static void unreg_one(nxl_agent_t *a, nxl_mem_t type, nxli_region_t *r, nxl_backend_t *b,
                      bool created)
{
    b->ops->dereg(b->state, r->md[b->index]);
    r->md[b->index] = NULL;
    if (created) {
        size_t pos;
        nxl_desc_t d = {.addr = r->addr, .len = r->len, .dev_id = r->dev};
        if (find_exact(a, type, &d, &pos) == r)
            tab_remove(&a->regions[type], pos);
        free(r);
    }
}

static nxl_status_t mem_register_locked(nxl_agent_t *a, nxl_mem_t type, const nxl_desc_t *descs, size_t n,
                              nxl_backend_t *b);

nxl_status_t nxl_mem_register(nxl_agent_t *a, nxl_mem_t type, const nxl_desc_t *descs, size_t n,
                              nxl_backend_t *b)
{
    if (a && nxli_thread_foreign(a))
        return nxli_rpc_mem_register(a, type, descs, n, b);
    NXLI_LOCKED(nxl_status_t, a, mem_register_locked(a, type, descs, n, b));
}

static nxl_status_t mem_register_locked(nxl_agent_t *a, nxl_mem_t type, const nxl_desc_t *descs, size_t n,
                              nxl_backend_t *b)
{
    nxl_status_t st = check_type(a, "nxl_mem_register", type);
    if (st != NXL_SUCCESS)
        return st;
    if (n && !descs) {
        nxli_err(a, "nxl_mem_register: NULL descriptor array");
        return NXL_ERR_INVALID_PARAM;
    }
    nxl_backend_t *use[NXLI_MAX_BACKENDS];
    int nuse = 0;
    if (b) {
        if (b->agent != a || !serves(b, type)) {
            nxli_err(a, "nxl_mem_register: transport %s does not serve %s memory%s", b->ops->name,
                     nxl_mem_name(type), b->agent != a ? " (it belongs to another agent)" : "");
            return NXL_ERR_NOT_SUPPORTED;
        }
        use[nuse++] = b;
    } else {
        for (int i = 0; i < a->nbackends; i++)
            if (serves(a->backends[i], type))
                use[nuse++] = a->backends[i];
        if (!nuse) {
            char what[192];
            nxli_err(a, "nxl_mem_register: no transport of agent '%s' serves %s memory; %s",
                     a->name, nxl_mem_name(type), what_serves(type, false, what, sizeof(what)));
            return NXL_ERR_NOT_SUPPORTED;
        }
    }
    for (size_t i = 0; i < n; i++)
        if (!descs[i].len || (type <= NXL_VRAM && !descs[i].addr) ||
            descs[i].addr + descs[i].len < descs[i].addr) {
            nxli_err(a, "nxl_mem_register: descriptor %zu has %s", i,
                     !descs[i].len  ? "length 0"
                     : descs[i].addr ? "a range that wraps around the address space"
                                     : "a NULL address");
            return NXL_ERR_INVALID_PARAM;
        }
    /* all or nothing: remember what was done to undo it */
    struct undo { nxli_region_t *r; nxl_backend_t *b; bool created; } *u =
        calloc(n * (size_t)nuse + 1, sizeof(*u));
    if (!u) {
        nxli_err(a, "nxl_mem_register: out of memory");
        return NXL_ERR_UNKNOWN;
    }
    /* Without a named transport, one that serves the type but declines
     * this region (NXL_ERR_NOT_SUPPORTED: a UCX without CUDA memory at run
     * time and VRAM) is left out, as long as another one takes it. */
    size_t nu = 0;
    for (size_t i = 0; i < n && st == NXL_SUCCESS; i++) {
        int took = 0;
        for (int k = 0; k < nuse && st == NXL_SUCCESS; k++) {
            nxli_region_t *created;
            st = reg_one(a, type, &descs[i], use[k], &created);
            if (st == NXL_SUCCESS) {
                u[nu].r = created ? created : find_exact(a, type, &descs[i], NULL);
                u[nu].b = use[k];
                u[nu].created = created != NULL;
                nu++;
                took++;
            } else if (st == NXL_ERR_NOT_SUPPORTED && !b && nuse > 1) {
                st = NXL_SUCCESS; /* its sentence stays, should no other take it */
            }
        }
        if (st == NXL_SUCCESS && !took)
            st = NXL_ERR_NOT_SUPPORTED;
    }
    if (st != NXL_SUCCESS)
        while (nu--)
            unreg_one(a, type, u[nu].r, u[nu].b, u[nu].created);
    else
        a->mem_gen++;
    free(u);
    return st;
}

static nxl_status_t mem_deregister_locked(nxl_agent_t *a, nxl_mem_t type, const nxl_desc_t *descs, size_t n);

nxl_status_t nxl_mem_deregister(nxl_agent_t *a, nxl_mem_t type, const nxl_desc_t *descs, size_t n)
{
    if (a && nxli_thread_foreign(a))
        return nxli_rpc_mem_deregister(a, type, descs, n);
    NXLI_LOCKED(nxl_status_t, a, mem_deregister_locked(a, type, descs, n));
}

static nxl_status_t mem_deregister_locked(nxl_agent_t *a, nxl_mem_t type, const nxl_desc_t *descs, size_t n)
{
    nxl_status_t st = check_type(a, "nxl_mem_deregister", type);
    if (st != NXL_SUCCESS)
        return st;
    for (size_t i = 0; i < n; i++) {
        nxli_region_t *r = find_exact(a, type, &descs[i], NULL);
        if (!r || r->alloc) {
            nxli_err(a, "nxl_mem_deregister: %s region 0x%lx+%zu (dev %llu) %s; nothing was "
                        "deregistered", nxl_mem_name(type), (unsigned long)descs[i].addr,
                     descs[i].len, (unsigned long long)descs[i].dev_id,
                     r ? "came from nxl_mem_alloc(): give it back with nxl_mem_free()"
                       : "was never registered (regions are deregistered exactly as registered)");
            return NXL_ERR_NOT_FOUND;
        }
        for (size_t j = 0; j < i; j++)
            if (descs[j].addr == descs[i].addr && descs[j].dev_id == descs[i].dev_id) {
                nxli_err(a, "nxl_mem_deregister: descriptor %zu repeats descriptor %zu", i, j);
                return NXL_ERR_INVALID_PARAM;
            }
    }
    for (size_t i = 0; i < n; i++) {
        size_t pos;
        nxli_region_t *r = find_exact(a, type, &descs[i], &pos);
        tab_remove(&a->regions[type], pos);
        region_revoke(a, r);
        nxli_region_put(a, r);
    }
    a->mem_gen++;
    return NXL_SUCCESS;
}

/* Host memory when no transport allocates: page-aligned; from 2 MiB on,
 * 2 MiB-aligned and rounded up to whole 2 MiB pages with transparent huge
 * pages asked for (a hint: plain pages where THP is off). An O_DIRECT
 * request into huge pages carries a segment per 2 MiB instead of one per
 * 4 KiB page, which on virtual disks changes its speed by up to 2x. */
#define HUGE_PAGE (2u << 20)
static void *host_alloc(size_t len)
{
    void *p = NULL;
    if (len < HUGE_PAGE)
        return posix_memalign(&p, (size_t)sysconf(_SC_PAGESIZE), len) ? NULL : p;
    if (len > SIZE_MAX - HUGE_PAGE)
        return NULL;
    size_t alen = (len + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    if (posix_memalign(&p, HUGE_PAGE, alen))
        return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, alen, MADV_HUGEPAGE);
#endif
    return p;
}

static nxl_status_t mem_alloc_locked(nxl_agent_t *a, nxl_mem_t type, size_t len, uint64_t dev_id, void **ptr);

nxl_status_t nxl_mem_alloc(nxl_agent_t *a, nxl_mem_t type, size_t len, uint64_t dev_id, void **ptr)
{
    if (a && nxli_thread_foreign(a))
        return nxli_rpc_mem_alloc(a, type, len, dev_id, ptr);
    NXLI_LOCKED(nxl_status_t, a, mem_alloc_locked(a, type, len, dev_id, ptr));
}

static nxl_status_t mem_alloc_locked(nxl_agent_t *a, nxl_mem_t type, size_t len, uint64_t dev_id, void **ptr)
{
    if (!ptr || !len) {
        nxli_err(a, "nxl_mem_alloc: a length and an out pointer are required");
        return NXL_ERR_INVALID_PARAM;
    }
    *ptr = NULL;
    nxl_status_t cst = check_type(a, "nxl_mem_alloc", type);
    if (cst != NXL_SUCCESS)
        return cst;
    /* the first transport that allocates it; one that declines this type
     * (NXL_ERR_NOT_SUPPORTED: it serves it, allocates only others) passes
     * it on to the next */
    nxl_backend_t *ab = NULL;
    void *p = NULL, *amd = NULL;
    bool declined = false;
    for (int i = 0; i < a->nbackends && !ab; i++) {
        nxl_backend_t *b = a->backends[i];
        if (!b->ops->mem_alloc || !serves(b, type))
            continue;
        a->err[0] = 0;
        nxl_status_t st = b->ops->mem_alloc(b->state, type, len, dev_id, &p, &amd);
        if (st == NXL_ERR_NOT_SUPPORTED) {
            declined = true;
            continue;
        }
        if (st != NXL_SUCCESS) {
            if (!a->err[0])
                nxli_err(a, "nxl_mem_alloc: %s could not allocate %zu bytes of %s memory (%s)",
                         b->ops->name, len, nxl_mem_name(type), nxl_strerror(st));
            return st;
        }
        ab = b;
    }
    if (!ab && type != NXL_DRAM) {
        char what[192];
        if (!declined || !a->err[0])
            nxli_err(a, "nxl_mem_alloc: no transport of agent '%s' allocates %s memory; %s",
                     a->name, nxl_mem_name(type), what_serves(type, true, what, sizeof(what)));
        return NXL_ERR_NOT_SUPPORTED;
    }
    if (ab) {
        /* allocated above */
    } else if (!(p = host_alloc(len))) {
        nxli_err(a, "nxl_mem_alloc: out of memory for %zu bytes", len);
        return NXL_ERR_UNKNOWN;
    }
    nxl_desc_t d = {.addr = (uintptr_t)p, .len = len, .dev_id = dev_id};
    size_t pos;
    nxli_region_t *r = calloc(1, sizeof(*r));
    if (!r || find_exact(a, type, &d, &pos) || overlaps(a, type, &d) ||
        tab_insert(&a->regions[type], pos, r) != NXL_SUCCESS) {
        free(r);
        if (ab)
            ab->ops->mem_free(ab->state, p, amd);
        else
            free(p);
        nxli_err(a, "nxl_mem_alloc: could not record the new region");
        return NXL_ERR_UNKNOWN;
    }
    r->type = type;
    r->dev = dev_id;
    r->addr = d.addr;
    r->len = len;
    r->refs = 1;
    r->alloc = true;
    r->alloc_backend = ab;
    if (ab)
        r->md[ab->index] = amd;
    /* the other backends register it as usual */
    for (int i = 0; i < a->nbackends; i++) {
        nxl_backend_t *b = a->backends[i];
        if (b == ab || !serves(b, type))
            continue;
        a->err[0] = 0;
        nxl_status_t rst = b->ops->reg(b->state, type, &d, &r->md[i]);
        if (rst == NXL_ERR_NOT_SUPPORTED) {
            r->md[i] = NULL; /* it declines this memory: the others serve it */
            continue;
        }
        if (rst != NXL_SUCCESS) {
            /* the transport's own sentence says why: keep it */
            char why[NXLI_ERR_MAX];
            snprintf(why, sizeof(why), "%s", a->err[0] ? a->err : nxl_strerror(rst));
            nxli_err(a, "nxl_mem_alloc: %s could not register the new memory: %s", b->ops->name,
                     why);
            tab_remove(&a->regions[type], pos);
            nxli_region_put(a, r);
            return NXL_ERR_BACKEND;
        }
    }
    a->mem_gen++;
    *ptr = p;
    return NXL_SUCCESS;
}

static nxl_status_t mem_free_locked(nxl_agent_t *a, void *ptr);

nxl_status_t nxl_mem_free(nxl_agent_t *a, void *ptr)
{
    if (a && nxli_thread_foreign(a))
        return nxli_rpc_mem_free(a, ptr);
    NXLI_LOCKED(nxl_status_t, a, mem_free_locked(a, ptr));
}

static nxl_status_t mem_free_locked(nxl_agent_t *a, void *ptr)
{
    for (int k = 0; k < NXL_MEM_TYPES; k++) {
        nxli_rtab_t *t = &a->regions[k];
        for (size_t i = 0; i < t->n; i++)
            if (t->v[i]->alloc && t->v[i]->addr == (uintptr_t)ptr) {
                nxli_region_t *r = t->v[i];
                tab_remove(t, i);
                region_revoke(a, r);
                nxli_region_put(a, r);
                a->mem_gen++;
                return NXL_SUCCESS;
            }
    }
    nxli_err(a, "nxl_mem_free: %p was not allocated with nxl_mem_alloc() by agent '%s'", ptr,
             a->name);
    return NXL_ERR_NOT_FOUND;
}

nxl_status_t nxl_mem_query(nxl_agent_t *a, nxl_mem_t type, const nxl_desc_t *descs, size_t n,
                           nxl_backend_t *b, nxl_query_t *results)
{
    if (a && nxli_thread_foreign(a))
        return nxli_rpc_mem_query(a, type, descs, n, b, results);
    nxl_status_t st = check_type(a, "nxl_mem_query", type);
    if (st != NXL_SUCCESS)
        return st;
    if (n && (!descs || !results)) {
        nxli_err(a, "nxl_mem_query: NULL descriptor or result array");
        return NXL_ERR_INVALID_PARAM;
    }
    if (b && (b->agent != a || !serves(b, type) || !b->ops->query)) {
        nxli_err(a, "nxl_mem_query: transport %s does not answer queries about %s memory",
                 b->ops->name, nxl_mem_name(type));
        return NXL_ERR_NOT_SUPPORTED;
    }
    for (int i = 0; i < a->nbackends && !b; i++)
        if (serves(a->backends[i], type) && a->backends[i]->ops->query)
            b = a->backends[i];
    if (!b) {
        nxli_err(a, "nxl_mem_query: no transport of agent '%s' answers queries about %s memory "
                    "(the POSIX transport does for FILE and BLK)", a->name, nxl_mem_name(type));
        return NXL_ERR_NOT_SUPPORTED;
    }
    for (size_t i = 0; i < n; i++) {
        a->err[0] = 0;
        memset(&results[i], 0, sizeof(results[i]));
        st = b->ops->query(b->state, type, &descs[i], &results[i]);
        if (st != NXL_SUCCESS) {
            if (!a->err[0])
                nxli_err(a, "nxl_mem_query: %s could not answer for descriptor %zu (%s)",
                         b->ops->name, i, nxl_strerror(st));
            return st;
        }
    }
    return NXL_SUCCESS;
}

void nxli_mem_cleanup(nxl_agent_t *a)
{
    NXLI_TLOCK(a);
    for (int t = 0; t < NXL_MEM_TYPES; t++) {
        nxli_rtab_t *tab = &a->regions[t];
        for (size_t i = 0; i < tab->n; i++)
            nxli_region_put(a, tab->v[i]);
        free(tab->v);
        memset(tab, 0, sizeof(*tab));
    }
    NXLI_TUNLOCK(a);
}
