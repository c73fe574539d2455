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
        free(r->label);
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

/* ---- the registration cache
 *
 * A range registered inside a region already registered (same memory type
 * and device, DRAM and VRAM) is a slice of it: it takes the region's
 * registrations (md) instead of making its own, holds a reference on it,
 * and lives outside the sorted table, in a->slices, a hash table of exact
 * (type, device, address, length) where it is found to be deregistered. Descriptors resolve to the
 * region, metadata lists the region: peers see nothing of the slices, and
 * deregistering a slice revokes nothing at them. A region deregistered by
 * the application while slices of it remain stays (app false, published)
 * until the last one goes. A range that overlaps registered regions without
 * lying inside one registers the union once: the regions it covers become
 * its slices, keeping their own registrations for the descriptors and keys
 * already handed out, and the new range is a slice of the union.
 * Only live registrations are reused (the application still holds the
 * region or a slice of it), so memory freed and mapped again is never
 * served by a registration of what was there before. */
static size_t slice_hash(const nxli_stab_t *h, nxl_mem_t t, uint64_t dev, uintptr_t addr,
                         size_t len)
{
    uint64_t x = (uint64_t)addr * 0x9E3779B97F4A7C15u ^ (uint64_t)len * 0xC2B2AE3D27D4EB4Fu ^
                 dev * 0x165667B19E3779F9u ^ (uint64_t)t;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9u;
    x ^= x >> 29;
    return (size_t)x & (h->nb - 1);
}

static nxli_region_t *slice_find(nxl_agent_t *a, nxl_mem_t t, uint64_t dev, uintptr_t addr,
                                 size_t len)
{
    nxli_stab_t *h = &a->slices;
    if (!h->n)
        return NULL;
    for (nxli_region_t *r = h->b[slice_hash(h, t, dev, addr, len)]; r; r = r->hnext)
        if (r->type == t && r->dev == dev && r->addr == addr && r->len == len)
            return r;
    return NULL;
}

/* room for @p n slices without growing again */
static nxl_status_t slice_reserve(nxl_agent_t *a, size_t n)
{
    nxli_stab_t *h = &a->slices;
    if (h->nb && n <= 2 * h->nb)
        return NXL_SUCCESS;
    size_t nb = h->nb ? h->nb : 64;
    while (n > 2 * nb)
        nb *= 4;
    nxli_region_t **v = calloc(nb, sizeof(*v));
    if (!v)
        return NXL_ERR_UNKNOWN;
    nxli_stab_t g = {.b = v, .nb = nb, .n = h->n};
    for (size_t i = 0; i < h->nb; i++)
        for (nxli_region_t *r = h->b[i], *next; r; r = next) {
            next = r->hnext;
            size_t k = slice_hash(&g, r->type, r->dev, r->addr, r->len);
            r->hnext = v[k];
            v[k] = r;
        }
    free(h->b);
    *h = g;
    return NXL_SUCCESS;
}

/* after slice_reserve(a, a->slices.n + 1) */
static void slice_insert(nxl_agent_t *a, nxli_region_t *r)
{
    nxli_stab_t *h = &a->slices;
    size_t k = slice_hash(h, r->type, r->dev, r->addr, r->len);
    r->hnext = h->b[k];
    h->b[k] = r;
    h->n++;
}

static void slice_remove(nxl_agent_t *a, nxli_region_t *r)
{
    nxli_stab_t *h = &a->slices;
    for (nxli_region_t **pp = &h->b[slice_hash(h, r->type, r->dev, r->addr, r->len)]; *pp;
         pp = &(*pp)->hnext)
        if (*pp == r) {
            *pp = r->hnext;
            h->n--;
            return;
        }
}

/* @p r lost a holder (the application, or a slice): once it has none it
 * leaves its table, is revoked at the peers unless its registrations were
 * borrowed, and its parent loses a holder in turn. */
static void region_unhold(nxl_agent_t *a, nxli_region_t *r)
{
    if (r->app || r->nslices)
        return;
    size_t pos;
    nxli_region_t *p = r->parent;
    if (p) {
        slice_remove(a, r);
    } else {
        nxl_desc_t d = {.addr = r->addr, .len = r->len, .dev_id = r->dev};
        if (find_exact(a, r->type, &d, &pos) == r)
            tab_remove(&a->regions[r->type], pos);
    }
    if (r->borrowed)
        memset(r->md, 0, sizeof(r->md));
    else
        region_revoke(a, r);
    nxli_region_put(a, r);
    if (p) {
        p->nslices--;
        region_unhold(a, p);
        nxli_region_put(a, p);
    }
}

static nxl_status_t slice_add(nxl_agent_t *a, nxl_mem_t type, const nxl_desc_t *d,
                              nxli_region_t *p, nxli_region_t **out)
{
    nxli_region_t *s = calloc(1, sizeof(*s));
    if (!s || slice_reserve(a, a->slices.n + 1) != NXL_SUCCESS) {
        free(s);
        nxli_err(a, "nxl_mem_register: out of memory");
        return NXL_ERR_UNKNOWN;
    }
    s->type = type;
    s->dev = d->dev_id;
    s->addr = d->addr;
    s->len = d->len;
    s->refs = 1;
    s->app = true;
    s->borrowed = true;
    s->parent = p;
    memcpy(s->md, p->md, sizeof(s->md));
    slice_insert(a, s);
    p->refs++;
    p->nslices++;
    *out = s;
    return NXL_SUCCESS;
}

static bool has_backends(const nxli_region_t *r, nxl_backend_t *const *use, int nuse, bool named)
{
    int have = 0;
    for (int k = 0; k < nuse; k++)
        have += r->md[use[k]->index] != NULL;
    return named ? have == nuse : have > 0;
}

/* The overlapped regions [lo, hi) of the table and @p d, registered as
 * one: the union, with the backends of the first region (all must have the
 * same); 0 when they differ or one came from nxl_mem_alloc() (the caller
 * refuses the overlap as without the cache). */
static int union_register(nxl_agent_t *a, nxl_mem_t type, const nxl_desc_t *d,
                          nxl_backend_t *const *use, int nuse, bool named, nxli_region_t **out,
                          nxl_status_t *st)
{
    nxli_rtab_t *tab = &a->regions[type];
    size_t i = upper(tab, d->dev_id, d->addr), lo = i, hi = i;
    if (i && tab->v[i - 1]->dev == d->dev_id && tab->v[i - 1]->addr + tab->v[i - 1]->len > d->addr)
        lo = i - 1;
    while (hi < tab->n && tab->v[hi]->dev == d->dev_id && tab->v[hi]->addr < d->addr + d->len)
        hi++;
    if (lo == hi)
        return 0;
    nxli_region_t *f = tab->v[lo];
    if (!has_backends(f, use, nuse, named))
        return 0;
    for (size_t j = lo; j < hi; j++) {
        if (tab->v[j]->alloc)
            return 0;
        for (int b = 0; b < a->nbackends; b++)
            if (!tab->v[j]->md[b] != !f->md[b])
                return 0;
    }
    uintptr_t ua = d->addr < f->addr ? d->addr : f->addr;
    uintptr_t ue = d->addr + d->len, le = tab->v[hi - 1]->addr + tab->v[hi - 1]->len;
    if (le > ue)
        ue = le;
    nxl_desc_t ud = {.addr = ua, .len = ue - ua, .dev_id = d->dev_id};
    nxli_region_t *u = calloc(1, sizeof(*u));
    if (!u) {
        nxli_err(a, "nxl_mem_register: out of memory");
        *st = NXL_ERR_UNKNOWN;
        return -1;
    }
    for (int b = 0; b < a->nbackends; b++) {
        if (!f->md[b])
            continue;
        nxl_backend_t *be = a->backends[b];
        a->err[0] = 0;
        *st = be->ops->reg(be->state, type, &ud, &u->md[b]);
        if (*st != NXL_SUCCESS) {
            if (!a->err[0])
                nxli_err(a, "nxl_mem_register: %s could not register %s region 0x%lx+%zu (the "
                            "union of the regions it overlaps)", be->ops->name,
                         nxl_mem_name(type), (unsigned long)ud.addr, ud.len);
            for (int c = 0; c < b; c++)
                if (u->md[c])
                    a->backends[c]->ops->dereg(a->backends[c]->state, u->md[c]);
            free(u);
            return -1;
        }
    }
    u->type = type;
    u->dev = d->dev_id;
    u->addr = ua;
    u->len = ud.len;
    u->refs = 1;
    /* the covered regions become its slices, with their own registrations */
    if (slice_reserve(a, a->slices.n + (hi - lo) + 1) != NXL_SUCCESS) {
        for (int b = 0; b < a->nbackends; b++)
            if (u->md[b])
                a->backends[b]->ops->dereg(a->backends[b]->state, u->md[b]);
        free(u);
        nxli_err(a, "nxl_mem_register: out of memory");
        *st = NXL_ERR_UNKNOWN;
        return -1;
    }
    for (size_t j = lo; j < hi; j++) {
        nxli_region_t *r = tab->v[j];
        slice_insert(a, r);
        r->parent = u;
        u->refs++;
        u->nslices++;
    }
    memmove(&tab->v[lo + 1], &tab->v[hi], (tab->n - hi) * sizeof(*tab->v));
    tab->v[lo] = u;
    tab->n -= hi - lo - 1;
    *st = slice_add(a, type, d, u, out);
    if (*st != NXL_SUCCESS) {
        region_unhold(a, u); /* keeps it: its slices hold it */
        return -1;
    }
    return 1;
}

/* The cache's answer for @p d: 1 with *out a new slice (or *adopted the
 * region taken back by the application), 0 to register it as without the
 * cache, -1 with *st on an error. */
static int cache_register(nxl_agent_t *a, nxl_mem_t type, const nxl_desc_t *d,
                          nxl_backend_t *const *use, int nuse, bool named, nxli_region_t **out,
                          bool *adopted, nxl_status_t *st)
{
    *out = NULL;
    *adopted = false;
    if (!a->reg_cache || type > NXL_VRAM)
        return 0;
    if (slice_find(a, type, d->dev_id, d->addr, d->len)) {
        nxli_err(a, "nxl_mem_register: %s region 0x%lx+%zu (dev %llu) is already registered",
                 nxl_mem_name(type), (unsigned long)d->addr, d->len,
                 (unsigned long long)d->dev_id);
        *st = NXL_ERR_NOT_ALLOWED;
        return -1;
    }
    nxli_region_t *c = nxli_region_find(a, type, d->dev_id, d->addr, d->len);
    if (!c)
        return find_exact(a, type, d, NULL) ? 0 : union_register(a, type, d, use, nuse, named, out, st);
    if (!has_backends(c, use, nuse, named))
        return 0;
    if (c->addr == d->addr && c->len == d->len) {
        if (c->app)
            return 0; /* registered: refused as without the cache */
        c->app = true; /* kept for its slices: the application takes it back */
        *out = c;
        *adopted = true;
        return 1;
    }
    *st = slice_add(a, type, d, c, out);
    return *st == NXL_SUCCESS ? 1 : -1;
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
        r->app = true;
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

/* a slice made, or a region taken back, by this call, undone */
static void undo_cached(nxl_agent_t *a, nxli_region_t *r, bool adopted)
{
    r->app = false;
    if (!adopted)
        region_unhold(a, r);
}

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
    struct undo { nxli_region_t *r; nxl_backend_t *b; bool created, cached, adopted; } *u =
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
        nxli_region_t *cr;
        bool adopted;
        int c = cache_register(a, type, &descs[i], use, nuse, b != NULL, &cr, &adopted, &st);
        if (c) {
            if (c > 0)
                u[nu++] = (struct undo){.r = cr, .cached = true, .adopted = adopted};
            continue;
        }
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
            if (u[nu].cached)
                undo_cached(a, u[nu].r, u[nu].adopted);
            else
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
        if (r && !r->app)
            r = NULL; /* kept only for its slices */
        if (!r)
            r = slice_find(a, type, descs[i].dev_id, descs[i].addr, descs[i].len);
        if (!r || r->alloc) {
            nxli_err(a, "nxl_mem_deregister: %s region 0x%lx+%zu (dev %llu) %s; nothing was "
                        "deregistered", nxl_mem_name(type), (unsigned long)descs[i].addr,
                     descs[i].len, (unsigned long long)descs[i].dev_id,
                     r ? "came from nxl_mem_alloc(): give it back with nxl_mem_free()"
                       : "was never registered (regions are deregistered exactly as registered)");
            return NXL_ERR_NOT_FOUND;
        }
        for (size_t j = 0; j < i; j++)
            if (descs[j].addr == descs[i].addr && descs[j].dev_id == descs[i].dev_id &&
                descs[j].len == descs[i].len) {
                nxli_err(a, "nxl_mem_deregister: descriptor %zu repeats descriptor %zu", i, j);
                return NXL_ERR_INVALID_PARAM;
            }
    }
    for (size_t i = 0; i < n; i++) {
        nxli_region_t *r = find_exact(a, type, &descs[i], NULL);
        if (!r || !r->app)
            r = slice_find(a, type, descs[i].dev_id, descs[i].addr, descs[i].len);
        r->app = false;
        region_unhold(a, r);
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
    r->app = true;
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
                if (r->nslices) {
                    nxli_err(a, "nxl_mem_free: %p has %d regions registered inside it: "
                                "deregister them first", ptr, r->nslices);
                    return NXL_ERR_NOT_ALLOWED;
                }
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
    nxli_lazy_cleanup(a);
    nxli_stab_t *h = &a->slices;
    for (size_t i = 0; i < h->nb; i++)
        for (nxli_region_t *s = h->b[i], *next; s; s = next) {
            nxli_region_t *p = s->parent;
            next = s->hnext;
            if (s->borrowed)
                memset(s->md, 0, sizeof(s->md));
            nxli_region_put(a, s);
            nxli_region_put(a, p);
        }
    free(h->b);
    memset(h, 0, sizeof(*h));
    for (int t = 0; t < NXL_MEM_TYPES; t++) {
        nxli_rtab_t *tab = &a->regions[t];
        for (size_t i = 0; i < tab->n; i++)
            nxli_region_put(a, tab->v[i]);
        free(tab->v);
        memset(tab, 0, sizeof(*tab));
    }
    NXLI_TUNLOCK(a);
}
