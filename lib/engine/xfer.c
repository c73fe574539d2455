/* SPDX-License-Identifier: BSD-3-Clause */
/* Prepared lists, transfers, notifications sent. */
#include "internal.h"

#include <malloc.h>
#include <string.h>

/* ---- large arrays
 *
 * A prepared list and a transfer hold one entry per descriptor: 16,384
 * descriptors make arrays of hundreds of KiB, which malloc takes fresh from
 * the system and gives back on free, so that every nxl_prep() and
 * nxl_xfer_make() paid a page fault per 4 KiB (most of their time; 5 ms
 * instead of 0.2 ms for 16,384 descriptors). Released arrays are kept by
 * the agent for the next ones. Contents are not cleared: callers write
 * every element they use. */

static void *big_alloc(nxl_agent_t *a, size_t n, size_t size)
{
    if (n > SIZE_MAX / size)
        return NULL;
    size_t len = n * size;
    if (len >= NXLI_SPARE_MIN) {
        int best = -1;
        for (int i = 0; i < NXLI_SPARES_USED(a); i++)
            if (a->spare[i] && a->spare_cap[i] >= len &&
                (best < 0 || a->spare_cap[i] < a->spare_cap[best]))
                best = i;
        if (best >= 0) {
            void *p = a->spare[best];
            a->spare[best] = NULL;
            return p;
        }
    }
    return malloc(len);
}

static void big_free(nxl_agent_t *a, void *p)
{
    size_t cap = p ? malloc_usable_size(p) : 0;
    if (cap >= NXLI_SPARE_MIN) {
        int k = 0; /* an empty slot, else the smallest one */
        for (int i = 0; i < NXLI_SPARES_USED(a); i++) {
            if (!a->spare[i]) {
                k = i;
                break;
            }
            if (a->spare_cap[i] < a->spare_cap[k])
                k = i;
        }
        if (!a->spare[k] || a->spare_cap[k] < cap) {
            free(a->spare[k]);
            a->spare[k] = p;
            a->spare_cap[k] = cap;
            return;
        }
    }
    free(p);
}

/* ---- prepared lists */

static void prepped_free(nxl_prepped_t *p)
{
    nxl_agent_t *a = p->agent;
    NXLI_TLOCK(a);
    for (size_t i = 0; i < p->nlregs; i++)
        nxli_region_put(a, p->lregs[i]);
    nxli_remote_put(p->remote);
    free(p->lregs);
    big_free(a, p->e);
    free(p->runs);
    LIST_REMOVE(p, link);
    free(p);
    NXLI_TUNLOCK(a);
}

/* Threaded mode, on a foreign thread, under the table lock: would dropping
 * these references free a region or a loaded agent? That (transports
 * deregistering, unloading keys) is left to the reactor. */
static bool puts_free(nxli_region_t *const *regs, size_t n, const nxli_remote_t *r)
{
    for (size_t i = 0; i < n; i++)
        if (regs[i]->refs <= 1)
            return true;
    return r && r->refs <= 1;
}

/* fn: the public call the sentences name (nxl_prep, or nxl_xfer_create
 * that prepares for its caller) */
static nxl_status_t prep_impl(nxl_agent_t *a, const char *fn, const char *agent, nxl_mem_t type,
                              const nxl_desc_t *descs, size_t n, nxl_prepped_t **out);

/* Threaded mode: a foreign thread prepares the list itself, under the
 * table lock (no hand-over to the reactor). Only what cannot touch a
 * transport or fail: loopback with a stale view of this agent (it is
 * rebuilt from the transports) and every failure go to the reactor, which
 * runs the call again and reports it. */
static nxl_status_t prep_foreign(nxl_agent_t *a, const char *agent, nxl_mem_t type,
                                 const nxl_desc_t *descs, size_t n, nxl_prepped_t **out)
{
    if (n <= NXLI_FOREIGN_MAX && nxli_foreign_begin(a)) {
        bool stale = agent && !strcmp(agent, a->name) && (!a->self || a->self_gen != a->mem_gen);
        nxl_status_t st = stale ? NXL_ERR_NOT_FOUND : prep_impl(a, "nxl_prep", agent, type, descs, n, out);
        nxli_foreign_end(a);
        if (st == NXL_SUCCESS)
            return st;
    }
    return nxli_rpc_prep(a, agent, type, descs, n, out);
}

nxl_status_t nxl_prep(nxl_agent_t *a, const char *agent, nxl_mem_t type, const nxl_desc_t *descs,
                      size_t n, nxl_prepped_t **out)
{
    if (a && nxli_thread_foreign(a))
        return prep_foreign(a, agent, type, descs, n, out);
    NXLI_TLOCK(a);
    nxl_status_t st = prep_impl(a, "nxl_prep", agent, type, descs, n, out);
    NXLI_TUNLOCK(a);
    return st;
}

static nxl_status_t prep_impl(nxl_agent_t *a, const char *fn, const char *agent, nxl_mem_t type,
                              const nxl_desc_t *descs, size_t n, nxl_prepped_t **out)
{
    /* NXL_DESC_AUTO_REGISTER rides on the type; a remote list ignores it */
    bool autoreg = ((unsigned)type & NXL_DESC_AUTO_REGISTER) != 0;
    type = (nxl_mem_t)((unsigned)type & ~(unsigned)NXL_DESC_AUTO_REGISTER);
    if (!out || (n && !descs) || (unsigned)type >= NXL_MEM_TYPES) {
        nxli_err(a, "%s: invalid arguments (out pointer, descriptors, memory type)", fn);
        return NXL_ERR_INVALID_PARAM;
    }
    *out = NULL;
    if (autoreg && !agent && type != NXL_DRAM) {
        nxli_err(a, "%s: NXL_DESC_AUTO_REGISTER registers host memory (DRAM) only, not %s; "
                    "register it with nxl_mem_register()", fn, nxl_mem_name(type));
        return NXL_ERR_INVALID_PARAM;
    }
    /* lazy registration: what the registered regions do not hold, the
     * agent's cache of host memory registered on first use does */
    bool lazy = !agent && type == NXL_DRAM && (autoreg || a->auto_register);
    if (lazy) {
        nxl_status_t st = nxli_lazy_prepare(a, fn, descs, n);
        if (st != NXL_SUCCESS)
            return st;
    }
    nxli_remote_t *r = NULL;
    if (agent && !(r = nxli_remote_get(a, agent)))
        return NXL_ERR_NOT_FOUND; /* sentence left by nxli_remote_get */
    nxl_prepped_t *p = calloc(1, sizeof(*p));
    if (!p || !(p->e = big_alloc(a, n + 1, sizeof(*p->e)))) {
        free(p);
        nxli_remote_put(r);
        nxli_err(a, "%s: out of memory for %zu descriptors", fn, n);
        return NXL_ERR_UNKNOWN;
    }
    p->agent = a;
    p->remote = r;
    p->type = type;
    p->n = n;
    LIST_INSERT_HEAD(&a->prepped, p, link);
    nxli_region_t *last = NULL;
    for (size_t i = 0; i < n; i++) {
        const nxl_desc_t *d = &descs[i];
        p->e[i].addr = d->addr;
        p->e[i].len = d->len;
        if (!d->len && type <= NXL_VRAM) {
            /* it would resolve to the region it ends, or begins, at */
            nxli_err(a, "%s: descriptor %zu (%s 0x%lx) has length 0; nothing was prepared", fn,
                     i, nxl_mem_name(type), (unsigned long)d->addr);
            prepped_free(p);
            return NXL_ERR_INVALID_PARAM;
        }
        if (r) {
            const nxli_rregion_t *g = nxli_rregion_find(r, type, d->dev_id, d->addr, d->len);
            if (!g) {
                nxli_err(a, "%s: descriptor %zu (%s 0x%lx+%zu, dev %llu) lies outside every "
                            "%s region agent '%s' registered; nothing was prepared", fn, i,
                         nxl_mem_name(type), (unsigned long)d->addr, d->len,
                         (unsigned long long)d->dev_id, nxl_mem_name(type), r->name);
                prepped_free(p);
                return NXL_ERR_NOT_FOUND;
            }
            p->e[i].region = (void *)g;
        } else {
            nxli_region_t *g = last && last->dev == d->dev_id && d->addr >= last->addr &&
                                       d->len <= last->len && d->addr - last->addr <= last->len - d->len
                                   ? last
                                   : nxli_region_find(a, type, d->dev_id, d->addr, d->len);
            if (!g && lazy)
                g = nxli_lazy_find(a, d->dev_id, d->addr, d->len);
            if (!g) {
                nxli_err(a, "%s: descriptor %zu (%s 0x%lx+%zu, dev %llu) lies outside every "
                            "%s region registered with agent '%s'; nothing was prepared", fn, i,
                         nxl_mem_name(type), (unsigned long)d->addr, d->len,
                         (unsigned long long)d->dev_id, nxl_mem_name(type), a->name);
                prepped_free(p);
                return NXL_ERR_NOT_FOUND;
            }
            p->e[i].region = g;
            if (g != last) {
                bool seen = false;
                for (size_t j = 0; j < p->nlregs && !seen; j++)
                    seen = p->lregs[j] == g;
                if (!seen) {
                    nxli_region_t **v = realloc(p->lregs, (p->nlregs + 1) * sizeof(*v));
                    if (!v) {
                        prepped_free(p);
                        nxli_err(a, "%s: out of memory", fn);
                        return NXL_ERR_UNKNOWN;
                    }
                    p->lregs = v;
                    p->lregs[p->nlregs++] = g;
                    g->refs++;
                }
                last = g;
            }
        }
    }
    *out = p;
    return NXL_SUCCESS;
}

/* ---- strided lists: the runs, and their elements made when used */

/* the run that holds element i of a strided list */
static const nxli_srun_t *run_of(const nxl_prepped_t *p, size_t i)
{
    size_t lo = 0, hi = p->nruns;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (p->runs[mid].first <= i)
            lo = mid;
        else
            hi = mid;
    }
    return &p->runs[lo];
}

/* element i of a prepared list, strided or not */
static nxli_pent_t pent_at(const nxl_prepped_t *p, size_t i)
{
    if (!p->runs)
        return p->e[i];
    const nxli_srun_t *r = run_of(p, i);
    size_t k = i - r->first;
    return (nxli_pent_t){.addr = r->base + (k / r->count) * r->ostride + (k % r->count) * r->stride,
                         .len = r->len,
                         .region = r->region};
}

/* Walks the elements of runs in order, without a division */
typedef struct srun_it {
    const nxli_srun_t *r;
    size_t m, j;            /* element of the run's row, row */
    uintptr_t row, at;      /* the row's first address, the element's */
} srun_it_t;

static void it_init(srun_it_t *it, const nxli_srun_t *r)
{
    it->r = r;
    it->m = it->j = 0;
    it->row = it->at = r->base;
}

/* the element's address; moves to the next (past the last run: reads
 * one run past, which the caller never asks for) */
static inline uintptr_t it_next(srun_it_t *it, const nxli_srun_t **run)
{
    uintptr_t at = it->at;
    *run = it->r;
    if (++it->m < it->r->count) {
        it->at += it->r->stride;
    } else if (it->m = 0, ++it->j < it->r->ocount) {
        it->row += it->r->ostride;
        it->at = it->row;
    } else {
        it->j = 0;
        it->r++;
        it->row = it->at = it->r->base;
    }
    return at;
}

/* The n elements of a strided transfer into iov, for one post (the runs
 * end with a sentinel entry, so that the walk may look one run past) */
static void runs_expand(const nxl_xfer_t *x, nxlt_iov_t *iov)
{
    int bi = x->backend->index;
    srun_it_t l, r;
    it_init(&l, x->lruns);
    it_init(&r, x->rruns);
    for (size_t i = 0; i < x->n; i++) {
        const nxli_srun_t *lr, *rr;
        iov[i].laddr = (void *)it_next(&l, &lr);
        iov[i].raddr = it_next(&r, &rr);
        iov[i].lmd = ((const nxli_region_t *)lr->region)->md[bi];
        iov[i].rkey = ((const nxli_rregion_t *)rr->region)->rkey[bi];
        iov[i].len = lr->len;
    }
}

/* a local region the list uses, counted once */
static bool lreg_add(nxl_prepped_t *p, nxli_region_t *g)
{
    for (size_t j = 0; j < p->nlregs; j++)
        if (p->lregs[j] == g)
            return true;
    nxli_region_t **v = realloc(p->lregs, (p->nlregs + 1) * sizeof(*v));
    if (!v)
        return false;
    p->lregs = v;
    p->lregs[p->nlregs++] = g;
    g->refs++;
    return true;
}

/* Checks one strided list: its span (first byte to last) into *span, its
 * elements into *nelem; false with the reason in why ("" when only the
 * caller's sum can overflow, never here) */
bool nxli_strided_check(const nxl_strided_t *d, nxl_mem_t type, size_t *span, size_t *nelem,
                        char *why, size_t cap)
{
    why[0] = 0;
    size_t oc = d->outer_count ? d->outer_count : 1;
    if (!d->count) {
        snprintf(why, cap, "has count 0; a strided list has at least one element");
        return false;
    }
    if (!d->len && type <= NXL_VRAM) {
        snprintf(why, cap, "(%s 0x%lx) has length 0", nxl_mem_name(type), (unsigned long)d->base);
        return false;
    }
    /* its last byte: base + (oc-1)*outer_stride + (count-1)*stride + len - 1 */
    size_t outer, inner;
    uintptr_t end;
    if (__builtin_mul_overflow(oc - 1, d->outer_stride, &outer) ||
        __builtin_mul_overflow(d->count - 1, d->stride, &inner) ||
        __builtin_add_overflow(outer, inner, span) || __builtin_add_overflow(*span, d->len, span) ||
        __builtin_add_overflow(d->base, *span ? *span - 1 : 0, &end)) {
        snprintf(why, cap, "(base 0x%lx, stride %zu, count %zu, outer stride %zu, outer count "
                           "%zu, length %zu) ends past the end of the address space",
                 (unsigned long)d->base, d->stride, d->count, d->outer_stride, oc, d->len);
        return false;
    }
    if (__builtin_mul_overflow(d->count, oc, nelem)) {
        snprintf(why, cap, "(count %zu, outer count %zu) has more than %zu elements", d->count,
                 oc, (size_t)SIZE_MAX);
        return false;
    }
    return true;
}

static nxl_status_t prep_strided_impl(nxl_agent_t *a, const char *agent, nxl_mem_t type,
                                      const nxl_strided_t *s, size_t n, nxl_prepped_t **out)
{
    static const char fn[] = "nxl_prep_strided";
    if (!out || (n && !s) || (unsigned)type >= NXL_MEM_TYPES) {
        nxli_err(a, "%s: invalid arguments (out pointer, strided lists, memory type)", fn);
        return NXL_ERR_INVALID_PARAM;
    }
    *out = NULL;
    nxli_remote_t *r = NULL;
    if (agent && !(r = nxli_remote_get(a, agent)))
        return NXL_ERR_NOT_FOUND; /* sentence left by nxli_remote_get */
    nxl_prepped_t *p = calloc(1, sizeof(*p));
    /* one more: the sentinel it_next() may read */
    if (!p || n >= SIZE_MAX / sizeof(*p->runs) || !(p->runs = calloc(n + 1, sizeof(*p->runs)))) {
        free(p);
        nxli_remote_put(r);
        nxli_err(a, "%s: out of memory for %zu strided lists", fn, n);
        return NXL_ERR_UNKNOWN;
    }
    p->agent = a;
    p->remote = r;
    p->type = type;
    p->nruns = n;
    LIST_INSERT_HEAD(&a->prepped, p, link);
    nxl_status_t st = NXL_ERR_INVALID_PARAM;
    size_t total = 0;
    for (size_t k = 0; k < n; k++) {
        const nxl_strided_t *d = &s[k];
        nxli_srun_t *u = &p->runs[k];
        size_t span, ne;
        char why[200];
        if (!nxli_strided_check(d, type, &span, &ne, why, sizeof(why)) ||
            __builtin_add_overflow(total, ne, &total)) {
            if (why[0])
                nxli_err(a, "%s: list %zu %s; nothing was prepared", fn, k, why);
            else
                nxli_err(a, "%s: list %zu brings the list past %zu elements; nothing was "
                            "prepared", fn, k, (size_t)SIZE_MAX);
            goto fail;
        }
        *u = (nxli_srun_t){.base = d->base, .len = d->len, .stride = d->stride,
                           .count = d->count, .ostride = d->outer_stride,
                           .ocount = d->outer_count ? d->outer_count : 1,
                           .first = total - ne, .n = ne};
        /* the whole run, once: one region holds its first byte to its last */
        size_t whole = span ? span : 1;
        if (r) {
            const nxli_rregion_t *g = nxli_rregion_find(r, type, d->dev_id, d->base, whole);
            if (!g) {
                nxli_err(a, "%s: list %zu (%s 0x%lx, %zu bytes from its first element to its "
                            "last, dev %llu) does not lie inside one %s region agent '%s' "
                            "registered; nothing was prepared", fn, k, nxl_mem_name(type),
                         (unsigned long)d->base, span, (unsigned long long)d->dev_id,
                         nxl_mem_name(type), r->name);
                st = NXL_ERR_NOT_FOUND;
                goto fail;
            }
            u->region = (void *)g;
        } else {
            nxli_region_t *g = nxli_region_find(a, type, d->dev_id, d->base, whole);
            if (!g) {
                nxli_err(a, "%s: list %zu (%s 0x%lx, %zu bytes from its first element to its "
                            "last, dev %llu) does not lie inside one %s region registered with "
                            "agent '%s'; nothing was prepared", fn, k, nxl_mem_name(type),
                         (unsigned long)d->base, span, (unsigned long long)d->dev_id,
                         nxl_mem_name(type), a->name);
                st = NXL_ERR_NOT_FOUND;
                goto fail;
            }
            u->region = g;
            if (!lreg_add(p, g)) {
                nxli_err(a, "%s: out of memory", fn);
                st = NXL_ERR_UNKNOWN;
                goto fail;
            }
        }
    }
    p->n = total;
    if (n)
        p->runs[n] = p->runs[n - 1]; /* the sentinel */
    *out = p;
    return NXL_SUCCESS;
fail:
    prepped_free(p);
    return st;
}

nxl_status_t nxl_prep_strided(nxl_agent_t *a, const char *agent, nxl_mem_t type,
                              const nxl_strided_t *s, size_t n, nxl_prepped_t **out)
{
    if (a && nxli_thread_foreign(a)) {
        /* as prep_foreign(): the caller's thread under the table lock, its
         * work a lookup per list whatever the lists' counts */
        if (n <= NXLI_FOREIGN_MAX && nxli_foreign_begin(a)) {
            bool stale = agent && !strcmp(agent, a->name) &&
                         (!a->self || a->self_gen != a->mem_gen);
            nxl_status_t st = stale ? NXL_ERR_NOT_FOUND
                                    : prep_strided_impl(a, agent, type, s, n, out);
            nxli_foreign_end(a);
            if (st == NXL_SUCCESS)
                return st;
        }
        return nxli_rpc_prep_strided(a, agent, type, s, n, out);
    }
    NXLI_TLOCK(a);
    nxl_status_t st = prep_strided_impl(a, agent, type, s, n, out);
    NXLI_TUNLOCK(a);
    return st;
}

void nxl_prepped_release(nxl_prepped_t *p)
{
    if (p && nxli_thread_foreign(p->agent)) {
        nxl_agent_t *a = p->agent;
        if (nxli_foreign_begin(a)) {
            bool mine = !puts_free(p->lregs, p->nlregs, p->remote);
            if (mine)
                prepped_free(p);
            nxli_foreign_end(a);
            if (mine)
                return;
        }
        nxli_rpc_prepped_release(p);
        return;
    }
    if (p)
        prepped_free(p);
}

size_t nxl_prepped_count(const nxl_prepped_t *p)
{
    return p->n;
}

/* ---- transfers */

void nxl_xfer_opts_init(nxl_xfer_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->size = sizeof(*o);
}

/* Does b hold the local regions and the remote regions of the n entries
 * the transfer uses (ridx, or 0 .. n-1)? Only those are looked at: a
 * transfer of one block out of a list of a million costs one check. */
static bool backend_holds(nxl_backend_t *b, const nxl_prepped_t *lp, const nxl_prepped_t *rp,
                          const size_t *ridx, size_t n)
{
    int i = b->index;
    const nxlt_ops_t *ops = b->ops;
    if (!(ops->mem_mask & (1u << lp->type)) || !(ops->mem_mask & (1u << rp->type)))
        return false;
    if (!rp->remote->conn[i])
        return false;
    for (size_t k = 0; k < lp->nlregs; k++)
        if (!lp->lregs[k]->md[i])
            return false;
    /* remote regions: only the distinct ones need checking, entries repeat them */
    const nxli_rregion_t *last = NULL;
    if (rp->runs && !ridx) {
        for (size_t k = 0; k < rp->nruns && rp->runs[k].first < n; k++)
            if (!((const nxli_rregion_t *)rp->runs[k].region)->rkey[i])
                return false;
        return true;
    }
    for (size_t k = 0; k < n; k++) {
        const nxli_rregion_t *g = pent_at(rp, ridx ? ridx[k] : k).region;
        if (g != last && !g->rkey[i])
            return false;
        last = g;
    }
    return true;
}

static nxl_status_t set_notif(nxl_xfer_t *x, const void *msg, size_t len)
{
    if (len > NXL_NOTIF_MAX || (len && !msg)) {
        nxli_err(x->agent, "notification of %zu bytes: at most %d bytes, and a message pointer",
                 len, NXL_NOTIF_MAX);
        return NXL_ERR_INVALID_PARAM;
    }
    void *m = NULL;
    if (msg) {
        m = malloc(len ? len : 1);
        if (!m)
            return NXL_ERR_UNKNOWN;
        memcpy(m, msg, len);
    }
    free(x->notif);
    x->notif = m;
    x->notif_len = len;
    return NXL_SUCCESS;
}

static nxl_status_t make_impl(nxl_agent_t *a, const char *fn, nxl_op_t op, nxl_prepped_t *lp,
                              const size_t *lidx, nxl_prepped_t *rp, const size_t *ridx, size_t n,
                              const nxl_xfer_opts_t *opts, nxl_xfer_t **out);

/* A transfer of elements 0 .. n-1 of two strided lists, checked run by
 * run: the runs of both sides walked together, each stretch where one
 * local run meets one remote run checked once (lengths, revoked remote
 * regions); its bytes into *bytes */
static nxl_status_t strided_check(nxl_agent_t *a, const char *fn, const nxl_prepped_t *lp,
                                  const nxl_prepped_t *rp, size_t n, uint64_t *bytes)
{
    size_t i = 0, li = 0, ri = 0;
    *bytes = 0;
    while (i < n) {
        const nxli_srun_t *l = &lp->runs[li], *r = &rp->runs[ri];
        const nxli_rregion_t *rg = r->region;
        if (rg->revoked) {
            nxli_err(a, "%s: element %zu uses %s region 0x%lx+%zu, which agent '%s' "
                        "deregistered after the list was prepared", fn, i, nxl_mem_name(rg->type),
                     (unsigned long)rg->addr, rg->len, rp->remote->name);
            return NXL_ERR_NOT_FOUND;
        }
        if (l->len != r->len) {
            nxli_err(a, "%s: element %zu pairs %zu local bytes with %zu remote bytes "
                        "(strided lists %zu and %zu)", fn, i, l->len, r->len, li, ri);
            return NXL_ERR_INVALID_PARAM;
        }
        size_t lend = l->first + l->n, rend = r->first + r->n;
        size_t next = lend < rend ? lend : rend;
        if (next > n)
            next = n;
        *bytes += (uint64_t)(next - i) * l->len;
        i = next;
        li += i == lend;
        ri += i == rend;
    }
    return NXL_SUCCESS;
}

/* a strided list's runs for a transfer, with the sentinel */
static nxli_srun_t *runs_copy(const nxl_prepped_t *p)
{
    nxli_srun_t *v = malloc((p->nruns + 1) * sizeof(*v));
    if (v)
        memcpy(v, p->runs, (p->nruns + 1) * sizeof(*v));
    return v;
}

nxl_status_t nxl_xfer_make(nxl_agent_t *a, nxl_op_t op, nxl_prepped_t *lp, const size_t *lidx,
                           nxl_prepped_t *rp, const size_t *ridx, size_t n,
                           const nxl_xfer_opts_t *opts, nxl_xfer_t **out)
{
    nxl_status_t st;
    if (a && nxli_thread_foreign(a)) {
        /* on the caller's thread as nxl_prep() (a notification asks the
         * relay's transports: the reactor's) */
        bool strided = lp && rp && !lidx && !ridx && lp->runs && rp->runs &&
                       lp->nruns + rp->nruns <= NXLI_FOREIGN_MAX; /* work per run, not per element */
        if ((n <= NXLI_FOREIGN_MAX || strided) && (!opts || !opts->notif) &&
            nxli_foreign_begin(a)) {
            st = make_impl(a, "nxl_xfer_make", op, lp, lidx, rp, ridx, n, opts, out);
            nxli_foreign_end(a);
            if (st == NXL_SUCCESS)
                return st;
        }
        return nxli_rpc_xfer_make(a, op, lp, lidx, rp, ridx, n, opts, out);
    }
    NXLI_TLOCK(a);
    st = make_impl(a, "nxl_xfer_make", op, lp, lidx, rp, ridx, n, opts, out);
    NXLI_TUNLOCK(a);
    return st;
}

static nxl_status_t make_impl(nxl_agent_t *a, const char *fn, nxl_op_t op, nxl_prepped_t *lp,
                              const size_t *lidx, nxl_prepped_t *rp, const size_t *ridx, size_t n,
                              const nxl_xfer_opts_t *opts, nxl_xfer_t **out)
{
    if (!out || !lp || !rp || (op != NXL_READ && op != NXL_WRITE)) {
        nxli_err(a, "%s: needs an out pointer, two prepared lists and READ or WRITE", fn);
        return NXL_ERR_INVALID_PARAM;
    }
    *out = NULL;
    if (lp->agent != a || rp->agent != a || lp->remote || !rp->remote) {
        nxli_err(a, "%s: the local list must be prepared against this agent (agent "
                    "NULL) and the remote list against a named agent, both by agent '%s'", fn,
                 a->name);
        return NXL_ERR_MISMATCH;
    }
    if (rp->remote->invalid) {
        /* an earlier incarnation of the agent: re-bound to the current one
         * when every region is still there (peer.c) */
        nxl_status_t st = nxli_prepped_rebind(rp, fn);
        if (st != NXL_SUCCESS)
            return st;
    }
    /* deadline_ms was appended: a caller built before it passes the size
     * that ends at it */
    if (opts && opts->size != sizeof(*opts) &&
        opts->size != offsetof(nxl_xfer_opts_t, deadline_ms)) {
        nxli_err(a, "%s: options size %zu unknown; use nxl_xfer_opts_init()", fn,
                 opts->size);
        return NXL_ERR_INVALID_PARAM;
    }
    bool strided = !lidx && !ridx && lp->runs && rp->runs;
    if (strided && (n > lp->n || n > rp->n)) {
        nxli_err(a, "%s: element %zu names index %zu of a list of %zu", fn, n - 1, n - 1,
                 n > lp->n ? lp->n : rp->n);
        return NXL_ERR_INVALID_PARAM;
    }
    for (size_t i = 0; i < n && !strided; i++) {
        size_t li = lidx ? lidx[i] : i, ri = ridx ? ridx[i] : i;
        if (li >= lp->n || ri >= rp->n) {
            nxli_err(a, "%s: element %zu names index %zu of a list of %zu", fn, i,
                     li >= lp->n ? li : ri, li >= lp->n ? lp->n : rp->n);
            return NXL_ERR_INVALID_PARAM;
        }
        nxli_pent_t le = pent_at(lp, li), re = pent_at(rp, ri);
        const nxli_rregion_t *rg = re.region;
        if (rg->revoked) {
            nxli_err(a, "%s: element %zu uses %s region 0x%lx+%zu, which agent '%s' "
                        "deregistered after the list was prepared", fn, i, nxl_mem_name(rg->type),
                     (unsigned long)rg->addr, rg->len, rp->remote->name);
            return NXL_ERR_NOT_FOUND;
        }
        if (le.len != re.len) {
            nxli_err(a, "%s: element %zu pairs %zu local bytes with %zu remote bytes", fn,
                     i, le.len, re.len);
            return NXL_ERR_INVALID_PARAM;
        }
    }
    uint64_t bytes = 0;
    if (strided) {
        nxl_status_t st = strided_check(a, fn, lp, rp, n, &bytes);
        if (st != NXL_SUCCESS)
            return st;
    }
    nxl_backend_t *b = opts ? opts->backend : NULL;
    if (b) {
        if (b->agent != a || !backend_holds(b, lp, rp, ridx, n)) {
            nxli_err(a, "%s: transport %s does not hold both sides (register the "
                        "memory with it on both agents)", fn, b->ops->name);
            return NXL_ERR_NOT_SUPPORTED;
        }
    } else {
        for (int i = 0; i < a->nbackends && !b; i++)
            if (backend_holds(a->backends[i], lp, rp, ridx, n))
                b = a->backends[i];
        if (!b) {
            nxli_err(a, "%s: no transport of agent '%s' holds both the local %s "
                        "regions and agent '%s''s %s regions; both agents need a common "
                        "transport with the memory registered on it", fn,
                     a->name, nxl_mem_name(lp->type), rp->remote->name, nxl_mem_name(rp->type));
            return NXL_ERR_NOT_SUPPORTED;
        }
    }
    if (opts && opts->notif) {
        nxl_status_t st = nxli_relay_check(a, fn, b, rp->remote);
        if (st != NXL_SUCCESS)
            return st;
    }
    nxl_xfer_t *x = calloc(1, sizeof(*x));
    if (!x || (strided ? !(x->lruns = runs_copy(lp)) || !(x->rruns = runs_copy(rp))
                       : !(x->iov = big_alloc(a, n + 1, sizeof(*x->iov)))) ||
        !(x->lregs = calloc(lp->nlregs + 1, sizeof(*x->lregs)))) {
        if (x) {
            big_free(a, x->iov);
            free(x->lruns);
            free(x->rruns);
        }
        free(x);
        nxli_err(a, "%s: out of memory for %zu elements", fn, n);
        return NXL_ERR_UNKNOWN;
    }
    x->agent = a;
    x->op = op;
    x->ltype = lp->type;
    x->rtype = rp->type;
    x->backend = b;
    x->n = n;
    x->last = NXL_ERR_NOT_POSTED;
    if (opts && opts->size >= offsetof(nxl_xfer_opts_t, deadline_ms) + sizeof(opts->deadline_ms))
        x->deadline_ms = opts->deadline_ms;
    if (opts && opts->notif) {
        nxl_status_t st = set_notif(x, opts->notif, opts->notif_len);
        if (st != NXL_SUCCESS) {
            free(x->lregs);
            big_free(a, x->iov);
            free(x->lruns);
            free(x->rruns);
            free(x);
            return st;
        }
    }
    int bi = b->index;
    if (strided) {
        x->nlruns = lp->nruns;
        x->nrruns = rp->nruns;
        x->bytes = bytes;
    } else if (!lp->runs && !rp->runs) {
        for (size_t i = 0; i < n; i++) {
            const nxli_pent_t *le = &lp->e[lidx ? lidx[i] : i], *re = &rp->e[ridx ? ridx[i] : i];
            const nxli_region_t *lg = le->region;
            const nxli_rregion_t *rg = re->region;
            x->iov[i].laddr = (void *)le->addr;
            x->iov[i].lmd = lg->md[bi];
            x->iov[i].raddr = re->addr;
            x->iov[i].rkey = rg->rkey[bi];
            x->iov[i].len = le->len;
            x->bytes += le->len;
        }
    } else {
        /* index lists into a strided list, or one with descriptors */
        for (size_t i = 0; i < n; i++) {
            nxli_pent_t le = pent_at(lp, lidx ? lidx[i] : i), re = pent_at(rp, ridx ? ridx[i] : i);
            x->iov[i].laddr = (void *)le.addr;
            x->iov[i].lmd = ((const nxli_region_t *)le.region)->md[bi];
            x->iov[i].raddr = re.addr;
            x->iov[i].rkey = ((const nxli_rregion_t *)re.region)->rkey[bi];
            x->iov[i].len = le.len;
            x->bytes += le.len;
        }
    }
    /* the regions and the remote agent stay alive as long as the transfer */
    for (size_t k = 0; k < lp->nlregs; k++) {
        x->lregs[k] = lp->lregs[k];
        x->lregs[k]->refs++;
    }
    x->nlregs = lp->nlregs;
    x->remote = rp->remote;
    x->remote->refs++;
    x->gone_seen = x->remote->ngone;
    LIST_INSERT_HEAD(&a->xfers, x, link);
    *out = x;
    return NXL_SUCCESS;
}

nxl_status_t nxl_xfer_create(nxl_agent_t *a, nxl_op_t op, const nxl_dlist_t *local,
                             const nxl_dlist_t *remote, const char *remote_agent,
                             const nxl_xfer_opts_t *opts, nxl_xfer_t **out)
{
    if (a && nxli_thread_foreign(a))
        return nxli_rpc_xfer_create(a, op, local, remote, remote_agent, opts, out);
    if (!local || !remote || !remote_agent || !out) {
        nxli_err(a, "nxl_xfer_create: local and remote lists, the remote agent's name and an out "
                    "pointer are required");
        return NXL_ERR_INVALID_PARAM;
    }
    *out = NULL;
    if (local->n != remote->n) {
        nxli_err(a, "nxl_xfer_create: %zu local descriptors but %zu remote ones", local->n,
                 remote->n);
        return NXL_ERR_INVALID_PARAM;
    }
    /* nxl_prep and nxl_xfer_make's steps, their sentences naming this call */
    nxl_prepped_t *lp, *rp;
    NXLI_TLOCK(a);
    nxl_status_t st = prep_impl(a, "nxl_xfer_create", NULL, local->type, local->descs, local->n,
                                &lp);
    NXLI_TUNLOCK(a);
    if (st != NXL_SUCCESS)
        return st;
    NXLI_TLOCK(a);
    st = prep_impl(a, "nxl_xfer_create", remote_agent, remote->type, remote->descs, remote->n, &rp);
    NXLI_TUNLOCK(a);
    if (st == NXL_SUCCESS) {
        NXLI_TLOCK(a);
        st = make_impl(a, "nxl_xfer_create", op, lp, NULL, rp, NULL, local->n, opts, out);
        NXLI_TUNLOCK(a);
        nxl_prepped_release(rp);
    }
    nxl_prepped_release(lp);
    return st;
}

nxl_status_t nxl_xfer_set_notif(nxl_xfer_t *x, const void *msg, size_t len)
{
    if (nxli_thread_foreign(x->agent))
        return nxli_rpc_xfer_set_notif(x, msg, len);
    if (x->active) {
        nxli_err(x->agent, "nxl_xfer_set_notif: the transfer is in flight");
        return NXL_ERR_REPOST_ACTIVE;
    }
    if (msg) {
        nxl_status_t st = nxli_relay_check(x->agent, "nxl_xfer_set_notif", x->backend, x->remote);
        if (st != NXL_SUCCESS)
            return st;
    }
    return set_notif(x, msg, len);
}

/* A plain store: the next post reads it (from the reactor's thread, or the
 * thread acting for it, in threaded mode), one in flight has its own. */
void nxl_xfer_set_deadline(nxl_xfer_t *x, unsigned ms)
{
    if (x)
        __atomic_store_n(&x->deadline_ms, ms, __ATOMIC_RELEASE);
}

/* The transfer's peer: still the one it was made against, or re-bound to
 * its current incarnation (peer.c); NXL_ERR_REMOTE_DISCONNECT while it is
 * down, NXL_ERR_NOT_FOUND when its regions are gone */
static nxl_status_t check_peer(nxl_xfer_t *x, const char *call)
{
    return x->remote->invalid ? nxli_xfer_rebind(x, call) : NXL_SUCCESS;
}

/* Regions the remote agent deregistered since the transfer was last
 * checked: a transfer using one is refused (the remote memory may be
 * gone). Element i uses revoked region g when its key is g's: keys are
 * unpacked per region. Costs nothing while nothing was revoked. */
static nxl_status_t check_revoked(nxl_xfer_t *x, const char *call)
{
    nxli_remote_t *r = x->remote;
    if (x->gone_seen == r->ngone)
        return NXL_SUCCESS;
    int bi = x->backend->index;
    for (size_t k = x->gone_seen; k < r->ngone; k++) {
        const nxli_rregion_t *g = r->gone[k];
        if (!g->rkey[bi])
            continue;
        for (size_t k = 0; k < x->nrruns && x->rruns[k].first < x->n; k++)
            if (((const nxli_rregion_t *)x->rruns[k].region)->rkey[bi] == g->rkey[bi]) {
                nxli_err(x->agent, "%s: element %zu uses %s region 0x%lx+%zu, which agent '%s' "
                                   "deregistered; nothing was posted (prepare and make the "
                                   "transfer again from regions it still has)", call,
                         x->rruns[k].first, nxl_mem_name(g->type), (unsigned long)g->addr, g->len,
                         r->name);
                return NXL_ERR_NOT_FOUND;
            }
        for (size_t i = 0; x->iov && i < x->n; i++)
            if (x->iov[i].rkey == g->rkey[bi]) {
                nxli_err(x->agent, "%s: element %zu uses %s region 0x%lx+%zu, which agent '%s' "
                                   "deregistered; nothing was posted (prepare and make the "
                                   "transfer again from regions it still has)", call, i,
                         nxl_mem_name(g->type), (unsigned long)g->addr, g->len, r->name);
                return NXL_ERR_NOT_FOUND;
            }
    }
    x->gone_seen = r->ngone;
    return NXL_SUCCESS;
}

static void xfer_cancel(nxl_future_t *f)
{
    /* nothing to undo: the op is detached and finishes on its own */
    NXLI_UNUSED(f);
}

/* Starts x with f, which holds the transfer already (x->active, claimed by
 * the caller). On failure the sentence is in the agent's error, nothing
 * started, the op is gone and the future is left to the caller; x->active
 * still holds f. */
static nxl_status_t post_start(nxl_xfer_t *x, nxl_future_t *f)
{
    nxl_agent_t *a = x->agent;
    nxlt_op_t *op = nxli_op_new(a, x->backend, f);
    if (!op) {
        nxli_err(a, "nxl_xfer_post: out of memory");
        return NXL_ERR_UNKNOWN;
    }
    nxl_status_t st;
    /* read once (another thread may set it meanwhile); the deadline timer
     * exists before anything starts */
    unsigned deadline_ms = __atomic_load_n(&x->deadline_ms, __ATOMIC_ACQUIRE);
    if (deadline_ms && (st = nxli_deadline_timer(a)) != NXL_SUCCESS) {
        nxli_op_free(op);
        return st;
    }
    op->deadline_ms = deadline_ms;
    /* a transport without notifications: the engine sends it afterwards */
    bool relay = x->notif && !(x->backend->ops->caps & NXLT_CAP_NOTIF);
    if (relay && (st = nxli_relay_attach(op, x->remote, x->notif, x->notif_len)) != NXL_SUCCESS) {
        nxli_op_free(op);
        return st;
    }
    /* a strided transfer's elements, for this call only (transports keep
     * nothing of the array after post returns) */
    nxlt_iov_t *iov = x->iov;
    if (x->lruns) {
        /* n + 1 elements: an n near SIZE_MAX (a list of zero stride may
         * count that many) must not wrap the array's size */
        iov = x->n >= SIZE_MAX / sizeof(*iov) ? NULL
              : a->thr                        ? malloc((x->n + 1) * sizeof(*iov))
                                              : big_alloc(a, x->n + 1, sizeof(*iov));
        if (!iov) {
            nxli_op_free(op);
            nxli_err(a, "nxl_xfer_post: out of memory for the %zu elements of a strided transfer",
                     x->n);
            return NXL_ERR_UNKNOWN;
        }
        runs_expand(x, iov);
    }
    nxlt_xfer_t tx = {
        .op = x->op,
        .ltype = x->ltype,
        .rtype = x->rtype,
        .conn = x->remote->conn[x->backend->index],
        .iov = iov,
        .n = x->n,
        .notif = relay ? NULL : x->notif,
        .notif_len = relay ? 0 : x->notif_len,
    };
    /* the transport may finish at once: the transfer is active before it posts */
    nxl_status_t prev = x->last;
    f->owner = x;
    f->on_cancel = xfer_cancel;
    x->last = NXL_IN_PROG;
    a->err[0] = 0;
    op->in_call = true;
    st = x->backend->ops->post(x->backend->state, op, &tx);
    if (iov != x->iov) {
        if (a->thr)
            free(iov);
        else
            big_free(a, iov);
    }
    if (st != NXL_SUCCESS) {
        if (!a->err[0])
            nxli_err(a, "nxl_xfer_post: %s could not post the transfer to '%s' (%s)",
                     x->backend->ops->name, x->remote->name, nxl_strerror(st));
        x->last = prev;
        /* the future is the caller's to discard or to fail */
        op->future = NULL;
        f->op = NULL;
        /* the transport knows the peer unreachable (its connection failed
         * before): the peer is DOWN, as when a transfer in flight fails;
         * this post, which starts nothing, is not among the transfers in
         * flight that the loss fails */
        if (st == NXL_ERR_REMOTE_DISCONNECT && !x->remote->invalid && !x->remote->self) {
            a->unposted = f;
            nxli_peer_unreachable(a, x->remote, a->err);
            a->unposted = NULL;
        }
    } else {
        /* counted before a report held from inside post (it takes effect
         * only at nxli_op_call_end) completes it */
        x->backend->xs.posted++;
        f->st_backend = x->backend;
        f->st_bytes = x->bytes;
        f->st_op = x->op;
        f->st_mem = x->ltype;
        f->st_post_us = nxli_now_us();
        /* armed before a report held from inside post completes it (which
         * takes it off the list again) */
        if (deadline_ms)
            nxli_deadline_add(f, f->st_post_us + (uint64_t)deadline_ms * 1000u);
    }
    return nxli_op_call_end(op, st);
}

/* x->active NULL -> f, atomically: two threads posting one transfer at
 * once (threaded mode) — one wins, the other is refused */
static bool claim(nxl_xfer_t *x, nxl_future_t *f)
{
    nxl_future_t *none = NULL;
    return __atomic_compare_exchange_n(&x->active, &none, f, false, __ATOMIC_ACQ_REL,
                                       __ATOMIC_ACQUIRE);
}

#define REPOST_SENTENCE "nxl_xfer_post: the transfer's previous post is still in flight; " \
                        "wait for its callback before posting again"

static nxl_status_t refuse_repost(nxl_agent_t *a)
{
    nxli_err(a, REPOST_SENTENCE);
    return NXL_ERR_REPOST_ACTIVE;
}

nxl_status_t nxl_xfer_post(nxl_xfer_t *x, nxl_done_cb cb, void *arg, nxl_future_t **out)
{
    if (nxli_thread_foreign(x->agent))
        return nxli_rpc_xfer_post(x, cb, arg, out);
    nxl_agent_t *a = x->agent;
    if (out)
        *out = NULL;
    if (__atomic_load_n(&x->active, __ATOMIC_ACQUIRE))
        return refuse_repost(a);
    nxl_status_t st = check_peer(x, "nxl_xfer_post");
    if (st == NXL_SUCCESS)
        st = check_revoked(x, "nxl_xfer_post");
    if (st != NXL_SUCCESS)
        return st;
    nxl_future_t *f = nxli_future_new(a, NXLI_F_XFER, cb, arg);
    if (!f) {
        nxli_err(a, "nxl_xfer_post: out of memory");
        return NXL_ERR_UNKNOWN;
    }
    if (!claim(x, f)) {
        nxli_future_discard(f);
        return refuse_repost(a);
    }
    if ((st = post_start(x, f)) != NXL_SUCCESS) {
        __atomic_store_n(&x->active, NULL, __ATOMIC_RELEASE);
        f->owner = NULL;
        nxli_future_discard(f);
        return st;
    }
    nxli_future_give(f, out);
    return NXL_SUCCESS;
}

/* A future that holds x (*out), or NXL_ERR_REPOST_ACTIVE with its
 * sentence in *why (another post holds it) */
static nxl_status_t claim_new(nxl_xfer_t *x, nxl_done_cb cb, void *arg, nxl_future_t **out,
                              const char **why)
{
    *out = NULL;
    if (__atomic_load_n(&x->active, __ATOMIC_ACQUIRE)) {
        *why = REPOST_SENTENCE;
        return NXL_ERR_REPOST_ACTIVE;
    }
    nxl_future_t *f = nxli_future_alloc(x->agent, NXLI_F_XFER, cb, arg);
    if (!f)
        return NXL_ERR_UNKNOWN;
    f->owner = x;
    f->on_cancel = xfer_cancel;
    if (!claim(x, f)) {
        nxli_future_unalloc(f);
        *why = REPOST_SENTENCE;
        return NXL_ERR_REPOST_ACTIVE;
    }
    *out = f;
    return NXL_SUCCESS;
}

/* Threaded mode, a foreign thread under the table lock (quiet): what the
 * post checks before anything starts, then a future that holds the
 * transfer (*out). NXL_ERR_REPOST_ACTIVE: in flight, its sentence in
 * *why (the caller reports it itself: no hand-over, the reactor may be
 * busy for long); any other failure: NXL_ERR_UNKNOWN, and the caller hands
 * the whole post to the reactor, which reports it as in the default mode. */
nxl_status_t nxli_xfer_post_claim(nxl_xfer_t *x, nxl_done_cb cb, void *arg, nxl_future_t **out,
                                  const char **why)
{
    nxl_agent_t *a = x->agent;
    *out = NULL;
    if (!nxli_thread_alive(a))
        return NXL_ERR_UNKNOWN;
    if (__atomic_load_n(&x->active, __ATOMIC_ACQUIRE)) {
        *why = REPOST_SENTENCE;
        return NXL_ERR_REPOST_ACTIVE;
    }
    if (check_peer(x, "nxl_xfer_post") != NXL_SUCCESS ||
        check_revoked(x, "nxl_xfer_post") != NXL_SUCCESS)
        return NXL_ERR_UNKNOWN;
    return claim_new(x, cb, arg, out, why);
}

/* The same without the table lock (the reactor holds it for its turn):
 * only the claim; the reactor checks the peer and the regions when it
 * runs the post (nxli_xfer_post_queued), and a refusal then completes the
 * future. A threaded agent keeps no pool: the future needs no lock. */
nxl_status_t nxli_xfer_post_claim_unlocked(nxl_xfer_t *x, nxl_done_cb cb, void *arg,
                                           nxl_future_t **out, const char **why)
{
    return claim_new(x, cb, arg, out, why);
}

/* The claimed post could not be queued (no memory, the loop ended). */
void nxli_xfer_post_unclaim(nxl_xfer_t *x, nxl_future_t *f)
{
    __atomic_store_n(&x->active, NULL, __ATOMIC_RELEASE);
    nxli_future_unalloc(f);
}

/* Reactor thread: the post a foreign thread queued with f, claimed by
 * nxli_xfer_post_claim(). The checks run again (the peer may have gone
 * since); a failure now completes the future with its status and
 * sentence, delivered like any completion. keep: the caller holds a
 * reference (it asked for the future). */
void nxli_xfer_post_queued(nxl_xfer_t *x, nxl_future_t *f, bool keep)
{
    nxl_agent_t *a = x->agent;
    nxli_future_attach(f);
    nxl_status_t st = check_peer(x, "nxl_xfer_post");
    if (st == NXL_SUCCESS)
        st = check_revoked(x, "nxl_xfer_post");
    if (st == NXL_SUCCESS)
        st = post_start(x, f);
    if (st != NXL_SUCCESS) {
        /* settled at delivery like a transfer that failed in flight: the
         * transfer reads the status, then may be posted again */
        f->owner = x;
        nxli_future_complete(f, st, a->err[0] ? a->err : nxl_strerror(st));
    }
    if (!keep)
        nxli_future_give(f, NULL);
}

/* Threaded mode, the reactor refuses a queued post (the agent is being
 * destroyed): the future is canceled with the rest at teardown. */
void nxli_xfer_post_refused(nxl_xfer_t *x, nxl_future_t *f, bool keep)
{
    NXLI_UNUSED(x);
    nxli_future_attach(f);
    if (!keep)
        nxli_future_give(f, NULL);
}

nxl_status_t nxl_xfer_status(const nxl_xfer_t *x)
{
    if (nxli_thread_foreign(x->agent))
        return nxli_rpc_xfer_status(x);
    return __atomic_load_n(&x->active, __ATOMIC_ACQUIRE) ? NXL_IN_PROG : x->last;
}

nxl_backend_t *nxl_xfer_backend(const nxl_xfer_t *x)
{
    return x->backend;
}

static void xfer_free(nxl_xfer_t *x)
{
    nxl_agent_t *a = x->agent;
    NXLI_TLOCK(a);
    if (x->active) {
        nxl_future_t *f = x->active;
        nxl_future_cancel(f);
        f->owner = NULL; /* it completes or is delivered later, without its transfer */
    }
    for (size_t k = 0; k < x->nlregs; k++)
        nxli_region_put(x->agent, x->lregs[k]);
    nxli_remote_put(x->remote);
    LIST_REMOVE(x, link);
    free(x->lregs);
    free(x->notif);
    big_free(x->agent, x->iov);
    free(x->lruns);
    free(x->rruns);
    free(x);
    NXLI_TUNLOCK(a);
}

void nxl_xfer_release(nxl_xfer_t *x)
{
    if (x && nxli_thread_foreign(x->agent)) {
        /* an idle transfer on the caller's thread (one in flight is
         * canceled: the reactor's) */
        nxl_agent_t *a = x->agent;
        if (nxli_foreign_begin(a)) {
            bool mine = !__atomic_load_n(&x->active, __ATOMIC_ACQUIRE) &&
                        !puts_free(x->lregs, x->nlregs, x->remote);
            if (mine)
                xfer_free(x);
            nxli_foreign_end(a);
            if (mine)
                return;
        }
        nxli_rpc_xfer_release(x);
        return;
    }
    if (x)
        xfer_free(x);
}

void nxli_xfers_cleanup(nxl_agent_t *a)
{
    NXLI_TLOCK(a);
    while (!LIST_EMPTY(&a->xfers))
        xfer_free(LIST_FIRST(&a->xfers));
    while (!LIST_EMPTY(&a->prepped))
        prepped_free(LIST_FIRST(&a->prepped));
    for (int i = 0; i < NXLI_SPARES; i++) {
        free(a->spare[i]);
        a->spare[i] = NULL;
    }
    NXLI_TUNLOCK(a);
}

/* ---- notifications */

nxl_status_t nxl_notif_send(nxl_agent_t *a, const char *remote, const void *msg, size_t len,
                            nxl_done_cb cb, void *arg, nxl_future_t **out)
{
    if (a && nxli_thread_foreign(a))
        return nxli_rpc_notif_send(a, remote, msg, len, cb, arg, out);
    if (out)
        *out = NULL;
    if (!remote || (len && !msg) || len > NXL_NOTIF_MAX) {
        nxli_err(a, "nxl_notif_send: needs a remote agent and a message of at most %d bytes",
                 NXL_NOTIF_MAX);
        return NXL_ERR_INVALID_PARAM;
    }
    nxli_remote_t *r = nxli_remote_get(a, remote);
    if (!r && nxli_peer_lost(a, remote)) {
        /* known, and lost (DOWN): as a transfer's post is refused */
        nxli_err(a, "nxl_notif_send: agent '%s' is down (lost): nothing was sent; it can be "
                    "sent again once the agent is back (nxl_agent_on_peer(): BACK)", remote);
        return NXL_ERR_REMOTE_DISCONNECT;
    }
    if (!r)
        return NXL_ERR_NOT_FOUND;
    nxl_backend_t *b = NULL;
    for (int i = 0; i < a->nbackends && !b; i++)
        if ((a->backends[i]->ops->caps & NXLT_CAP_NOTIF) && r->conn[i])
            b = a->backends[i];
    if (!b) {
        nxli_err(a, "nxl_notif_send: no transport with notifications connects agent '%s' to '%s'",
                 a->name, remote);
        nxli_remote_put(r);
        return NXL_ERR_NOT_SUPPORTED;
    }
    nxl_future_t *f;
    nxlt_op_t *op = nxli_op_new_future(a, b, NXLI_F_NOTIF, cb, arg, &f);
    if (!op) {
        nxli_remote_put(r);
        nxli_err(a, "nxl_notif_send: out of memory");
        return NXL_ERR_UNKNOWN;
    }
    /* for a deadline's sentence (nxl_future_set_deadline); NULL: a plainer
     * one. Without @p out nobody can set one: not kept */
    if (out) {
        size_t rlen = strlen(remote);
        f->dl_peer = rlen < sizeof(f->dl_peer_in) ? memcpy(f->dl_peer_in, remote, rlen + 1)
                                                  : nxli_strdup(remote);
    }
    f->dl_len = len;
    f->dl_backend = b;
    a->err[0] = 0;
    op->in_call = true;
    nxl_status_t st = b->ops->notif_send(b->state, op, r->conn[b->index], msg, len);
    if (st != NXL_SUCCESS && !a->err[0])
        nxli_err(a, "nxl_notif_send: %s could not send to '%s' (%s)", b->ops->name, remote,
                 nxl_strerror(st));
    if (st == NXL_ERR_REMOTE_DISCONNECT && !r->invalid && !r->self)
        nxli_peer_unreachable(a, r, a->err); /* DOWN, as for a transfer */
    nxli_remote_put(r);
    st = nxli_op_call_end(op, st);
    if (st != NXL_SUCCESS)
        return st;
    nxli_future_give(f, out);
    return NXL_SUCCESS;
}
