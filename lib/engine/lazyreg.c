/* SPDX-License-Identifier: BSD-3-Clause */
/* Lazy registration of host memory: a local DRAM list prepared with
 * NXL_DESC_AUTO_REGISTER (or by an agent with auto_register) resolves a
 * descriptor that no registered region holds through a cache of its own:
 * the pages around it are registered with every transport that serves
 * DRAM, as one entry per contiguous run of the list's missing ranges.
 *
 * Entries are regions (nxli_region_t, lazy) in a sorted table of their
 * own, apart from the application's: never in the metadata, never
 * reachable by peers, never revoked. The cache holds one reference on
 * each, every prepared list and transfer that uses one another: an entry
 * in use is never deregistered. Ranges that overlap entries register the
 * union once (the entries leave the table; those in use live on with
 * their holders), so that the table never overlaps.
 *
 * The size limit: before an entry is added, idle entries (only the
 * cache's reference) are deregistered, least recently used first, until
 * the entries fit; entries in use are not, so the cache exceeds the limit
 * only while the entries in use alone exceed it.
 *
 * Stale entries: memory unmapped (munmap, mmap MAP_FIXED over it,
 * madvise(MADV_DONTNEED), brk shrinking: free() returning memory to the
 * system) and mapped again at the same address is other memory, which a
 * registration that pinned the old pages (RDMA) would not move. UCX's
 * memory hooks (libucm, loaded with UCX) report each unmap through
 * UCM_EVENT_VM_UNMAPPED: the handler, which may run on any thread inside
 * munmap, queues the range when it meets the entries' span, and every
 * lookup first drops the entries the queued ranges touch. Where those
 * events are not to be had (no UCX in the process, UCX_MEM_EVENTS=no,
 * NXL_AUTO_REGISTER_EVENTS=0), an entry is reused only while a prepared
 * list or transfer holds it: the memory must stay mapped while they use
 * it, as registered memory must; idle entries are dropped at the next
 * lookup. */
#include "internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#define LAZY_Q 64 /* unmapped ranges queued between two lookups; past it, every entry goes */
#define UCM_VM_UNMAPPED (1 << 17) /* UCM_EVENT_VM_UNMAPPED, <ucm/api/ucm.h> */
#define UCM_PRIORITY 100

typedef void (*ucm_cb_t)(int type, void *event, void *arg);
typedef int (*ucm_set_t)(int events, int priority, ucm_cb_t cb, void *arg);
typedef void (*ucm_unset_t)(int events, ucm_cb_t cb, void *arg);

typedef struct nxli_lazy {
    nxli_rtab_t tab;  /* entries by (dev, addr), not overlapping */
    size_t bytes;     /* their lengths summed */
    uint64_t tick;    /* one per lookup: entries' last use */
    uint64_t registered, reused, evicted, invalidated;
    int events;       /* 1: unmaps reported; -1: not (with nb_tried backends) */
    int nb_tried;
    void *ucm;        /* libucm, held while the handler is set */
    ucm_unset_t unset;
    /* filled by the handler, on any thread */
    pthread_mutex_t qlock;
    uintptr_t lo, hi; /* the entries' span: unmaps outside it are not queued */
    struct {
        uintptr_t addr;
        size_t len;
    } q[LAZY_Q];
    unsigned nq;
    bool overflow;
} nxli_lazy_t;

/* index of the first entry whose (dev, addr) is > the key */
static size_t upper(const nxli_rtab_t *t, uint64_t dev, uintptr_t addr)
{
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const nxli_region_t *r = t->v[mid];
        if (dev > r->dev || (dev == r->dev && addr >= r->addr))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static nxli_region_t *find(const nxli_lazy_t *z, uint64_t dev, uintptr_t addr, size_t len)
{
    size_t i = upper(&z->tab, dev, addr);
    if (!i)
        return NULL;
    nxli_region_t *r = z->tab.v[i - 1];
    if (r->dev != dev || len > r->len || addr - r->addr > r->len - len)
        return NULL;
    return r;
}

/* the handler: inside munmap (mmap, madvise, brk) of any thread, with
 * UCX's event lock held; it only queues */
static void on_unmapped(int type, void *event, void *arg)
{
    nxli_lazy_t *z = arg;
    const struct {
        void *address;
        size_t size;
    } *e = event; /* ucm_event_t.vm_unmapped */
    (void)type;
    uintptr_t addr = (uintptr_t)e->address;
    size_t len = e->size;
    pthread_mutex_lock(&z->qlock);
    if (len && addr < z->hi && addr + len > z->lo) {
        if (z->nq < LAZY_Q)
            z->q[z->nq].addr = addr, z->q[z->nq].len = len, z->nq++;
        else
            z->overflow = true;
    }
    pthread_mutex_unlock(&z->qlock);
}

/* UCX's memory events, where UCX (its libucm) is in the process */
static void events_start(nxl_agent_t *a, nxli_lazy_t *z)
{
    z->nb_tried = a->nbackends;
    if (!a->auto_events) {
        z->events = -1;
        z->nb_tried = -1; /* not tried again */
        nxli_log(a, NXL_LOG_INFO, "lazy registration: NXL_AUTO_REGISTER_EVENTS=0: entries are "
                                  "reused only while a prepared list or transfer holds them");
        return;
    }
    void *h = dlopen("libucm.so.0", RTLD_LAZY | RTLD_NOLOAD);
    ucm_set_t set = NULL;
    void *s = h ? dlsym(h, "ucm_set_event_handler") : NULL, *u = h ? dlsym(h, "ucm_unset_event_handler") : NULL;
    memcpy(&set, &s, sizeof(set));
    memcpy(&z->unset, &u, sizeof(z->unset));
    int st = set && z->unset ? set(UCM_VM_UNMAPPED, UCM_PRIORITY, on_unmapped, z) : -1;
    if (st == 0) {
        z->events = 1;
        z->ucm = h;
        nxli_log(a, NXL_LOG_DEBUG, "lazy registration: unmapped memory is reported by UCX's "
                                   "memory events");
        return;
    }
    if (h)
        dlclose(h);
    z->events = -1;
    nxli_log(a, NXL_LOG_INFO, "lazy registration: %s: entries are reused only while a prepared "
                              "list or transfer holds them",
             !h ? "no UCX memory events in this process (libucm is not loaded)"
                : "UCX's memory events are off (UCX_MEM_EVENTS) or could not be installed");
}

static nxli_lazy_t *lazy_get(nxl_agent_t *a)
{
    if (a->lazy)
        return a->lazy;
    nxli_lazy_t *z = calloc(1, sizeof(*z));
    if (!z)
        return NULL;
    pthread_mutex_init(&z->qlock, NULL);
    a->lazy = z;
    return z;
}

static void tab_del(nxli_lazy_t *z, size_t i)
{
    z->bytes -= z->tab.v[i]->len;
    memmove(&z->tab.v[i], &z->tab.v[i + 1], (z->tab.n - i - 1) * sizeof(*z->tab.v));
    z->tab.n--;
}

/* entry i leaves the cache: deregistered now if idle, else when its last
 * holder lets it go */
static void drop(nxl_agent_t *a, nxli_lazy_t *z, size_t i)
{
    nxli_region_t *r = z->tab.v[i];
    tab_del(z, i);
    nxli_region_put(a, r);
}

static bool idle(const nxli_region_t *r)
{
    return r->refs == 1;
}

/* the unmaps reported since the last lookup: the entries they touch go.
 * With @p dry, only whether there is anything to do. */
static bool drain(nxl_agent_t *a, nxli_lazy_t *z, bool dry)
{
    struct {
        uintptr_t addr;
        size_t len;
    } q[LAZY_Q];
    pthread_mutex_lock(&z->qlock);
    unsigned nq = z->nq;
    bool all = z->overflow;
    if (dry) {
        pthread_mutex_unlock(&z->qlock);
        return nq || all;
    }
    memcpy(q, z->q, nq * sizeof(q[0]));
    z->nq = 0;
    z->overflow = false;
    pthread_mutex_unlock(&z->qlock);
    for (size_t i = z->tab.n; i-- > 0;) {
        const nxli_region_t *r = z->tab.v[i];
        bool hit = all;
        for (unsigned k = 0; k < nq && !hit; k++)
            hit = q[k].addr < r->addr + r->len && q[k].addr + q[k].len > r->addr;
        if (hit) {
            drop(a, z, i);
            z->invalidated++;
        }
    }
    return nq || all;
}

/* the entries' span grows to [lo, hi) before memory in it is registered:
 * an unmap from then on is queued */
static void span_add(nxli_lazy_t *z, uintptr_t lo, uintptr_t hi)
{
    pthread_mutex_lock(&z->qlock);
    if (z->lo == z->hi) {
        z->lo = lo;
        z->hi = hi;
    } else {
        if (lo < z->lo)
            z->lo = lo;
        if (hi > z->hi)
            z->hi = hi;
    }
    pthread_mutex_unlock(&z->qlock);
}

/* idle entries, least recently used first, deregistered until @p need
 * more bytes fit under the limit; entries used by this lookup (tick) and
 * those in [keep_lo, keep_hi) of @p dev stay */
static void evict(nxl_agent_t *a, nxli_lazy_t *z, size_t need, size_t keep_bytes, uint64_t dev,
                  uintptr_t keep_lo, uintptr_t keep_hi)
{
    while (z->bytes - keep_bytes + need > a->auto_limit) {
        size_t best = z->tab.n;
        for (size_t i = 0; i < z->tab.n; i++) {
            const nxli_region_t *r = z->tab.v[i];
            if (!idle(r) || r->used == z->tick ||
                (r->dev == dev && r->addr < keep_hi && r->addr + r->len > keep_lo))
                continue;
            if (best == z->tab.n || r->used < z->tab.v[best]->used)
                best = i;
        }
        if (best == z->tab.n)
            return; /* the rest is in use */
        drop(a, z, best);
        z->evicted++;
    }
}

/* [lo, hi) of @p dev registered with every transport that serves DRAM */
static nxl_status_t reg_range(nxl_agent_t *a, const char *fn, uint64_t dev, uintptr_t lo,
                              uintptr_t hi, nxli_region_t **out)
{
    nxli_region_t *r = calloc(1, sizeof(*r));
    if (!r) {
        nxli_err(a, "%s: out of memory", fn);
        return NXL_ERR_UNKNOWN;
    }
    nxl_desc_t d = {.addr = lo, .len = hi - lo, .dev_id = dev};
    int took = 0;
    for (int i = 0; i < a->nbackends; i++) {
        nxl_backend_t *b = a->backends[i];
        if (!(b->ops->mem_mask & (1u << NXL_DRAM)))
            continue;
        a->err[0] = 0;
        nxl_status_t st = b->ops->reg(b->state, NXL_DRAM, &d, &r->md[i]);
        if (st == NXL_ERR_NOT_SUPPORTED) {
            r->md[i] = NULL;
            continue;
        }
        if (st != NXL_SUCCESS) {
            char why[NXLI_ERR_MAX];
            snprintf(why, sizeof(why), "%s", a->err[0] ? a->err : nxl_strerror(st));
            for (int k = 0; k < i; k++)
                if (r->md[k])
                    a->backends[k]->ops->dereg(a->backends[k]->state, r->md[k]);
            free(r);
            nxli_err(a, "%s: host memory 0x%lx+%zu could not be registered on first use "
                        "(NXL_DESC_AUTO_REGISTER): %s", fn, (unsigned long)lo, hi - lo, why);
            return st;
        }
        took++;
    }
    if (!took) {
        free(r);
        nxli_err(a, "%s: no transport of agent '%s' registers host memory (DRAM): nothing to "
                    "register on first use with", fn, a->name);
        return NXL_ERR_NOT_SUPPORTED;
    }
    r->type = NXL_DRAM;
    r->dev = dev;
    r->addr = lo;
    r->len = hi - lo;
    r->refs = 1;
    r->lazy = true;
    *out = r;
    return NXL_SUCCESS;
}

/* one missing range registered: with the entries it overlaps, as their
 * union, which replaces them */
static nxl_status_t add_range(nxl_agent_t *a, nxli_lazy_t *z, const char *fn, uint64_t dev,
                              uintptr_t lo, uintptr_t hi)
{
    nxli_rtab_t *t = &z->tab;
    size_t j = upper(t, dev, lo), k;
    if (j && t->v[j - 1]->dev == dev && t->v[j - 1]->addr + t->v[j - 1]->len > lo)
        j--;
    size_t absorbed = 0;
    for (k = j; k < t->n && t->v[k]->dev == dev && t->v[k]->addr < hi; k++)
        absorbed += t->v[k]->len;
    if (k > j) {
        if (t->v[j]->addr < lo)
            lo = t->v[j]->addr;
        if (t->v[k - 1]->addr + t->v[k - 1]->len > hi)
            hi = t->v[k - 1]->addr + t->v[k - 1]->len;
    }
    evict(a, z, hi - lo, absorbed, dev, lo, hi);
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 16;
        nxli_region_t **v = realloc(t->v, cap * sizeof(*v));
        if (!v) {
            nxli_err(a, "%s: out of memory", fn);
            return NXL_ERR_UNKNOWN;
        }
        t->v = v;
        t->cap = cap;
    }
    span_add(z, lo, hi);
    nxli_region_t *r;
    nxl_status_t st = reg_range(a, fn, dev, lo, hi, &r);
    if (st != NXL_SUCCESS)
        return st;
    /* the table changed with the evictions: the absorbed entries again */
    j = upper(t, dev, lo);
    while (j && t->v[j - 1]->dev == dev && t->v[j - 1]->addr >= lo)
        j--;
    while (j < t->n && t->v[j]->dev == dev && t->v[j]->addr < hi)
        drop(a, z, j);
    memmove(&t->v[j + 1], &t->v[j], (t->n - j) * sizeof(*t->v));
    t->v[j] = r;
    t->n++;
    z->bytes += r->len;
    r->used = z->tick;
    z->registered++;
    return NXL_SUCCESS;
}

typedef struct range {
    uint64_t dev;
    uintptr_t lo, hi;
} range_t;

static int cmp_range(const void *x, const void *y)
{
    const range_t *p = x, *q = y;
    if (p->dev != q->dev)
        return p->dev < q->dev ? -1 : 1;
    return p->lo < q->lo ? -1 : p->lo > q->lo;
}

/* Before a local DRAM list of a lazy preparation is resolved: unmapped
 * entries dropped, every descriptor outside the registered regions and
 * the entries registered (runs of them as one entry), entries it uses
 * marked as used now. Descriptors no lookup could resolve anyway (length
 * 0, NULL, wrapping) are left to the caller's sentences. On a foreign
 * thread (threaded mode) nothing that needs a transport is done:
 * NXL_ERR_UNKNOWN then sends the call to the reactor. */
nxl_status_t nxli_lazy_prepare(nxl_agent_t *a, const char *fn, const nxl_desc_t *descs, size_t n)
{
    nxli_lazy_t *z = lazy_get(a);
    if (!z) {
        nxli_err(a, "%s: out of memory", fn);
        return NXL_ERR_UNKNOWN;
    }
    bool foreign = nxli_thread_foreign(a);
    if (!foreign && z->events < 0 && z->nb_tried >= 0 && z->nb_tried != a->nbackends)
        z->events = 0; /* a transport came since: UCX may be here now */
    if (!foreign && !z->events)
        events_start(a, z);
    if (foreign && (z->events <= 0 || drain(a, z, true)))
        return NXL_ERR_UNKNOWN;
    z->tick++;
    if (z->events > 0) {
        drain(a, z, false);
    } else {
        /* no unmap is reported: an idle entry cannot be trusted */
        for (size_t i = z->tab.n; i-- > 0;)
            if (idle(z->tab.v[i])) {
                drop(a, z, i);
                z->invalidated++;
            }
    }
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    range_t *m = NULL;
    size_t nm = 0;
    const nxli_region_t *last = NULL;
    for (size_t i = 0; i < n; i++) {
        const nxl_desc_t *d = &descs[i];
        if (!d->len || !d->addr || d->addr + d->len < d->addr)
            continue;
        if (last && last->dev == d->dev_id && d->addr >= last->addr && d->len <= last->len &&
            d->addr - last->addr <= last->len - d->len)
            continue;
        nxli_region_t *g = nxli_region_find(a, NXL_DRAM, d->dev_id, d->addr, d->len);
        if (!g && (g = find(z, d->dev_id, d->addr, d->len)))
            g->used = z->tick;
        if (g) {
            last = g;
            continue;
        }
        uintptr_t lo = d->addr & ~(uintptr_t)(pg - 1), hi = d->addr + d->len;
        if (hi > UINTPTR_MAX - pg)
            continue;
        hi = (hi + pg - 1) & ~(uintptr_t)(pg - 1);
        if (foreign) {
            free(m);
            return NXL_ERR_UNKNOWN;
        }
        if (nm && m[nm - 1].dev == d->dev_id && lo <= m[nm - 1].hi && hi >= m[nm - 1].lo) {
            /* the common case: the list walks a buffer */
            if (lo < m[nm - 1].lo)
                m[nm - 1].lo = lo;
            if (hi > m[nm - 1].hi)
                m[nm - 1].hi = hi;
            continue;
        }
        if (!m && !(m = malloc((n - i) * sizeof(*m)))) {
            nxli_err(a, "%s: out of memory", fn);
            return NXL_ERR_UNKNOWN;
        }
        m[nm++] = (range_t){d->dev_id, lo, hi};
    }
    if (!nm) {
        z->reused++;
        free(m);
        return NXL_SUCCESS;
    }
    qsort(m, nm, sizeof(*m), cmp_range);
    size_t w = 0;
    for (size_t i = 1; i < nm; i++) {
        if (m[i].dev == m[w].dev && m[i].lo <= m[w].hi) {
            if (m[i].hi > m[w].hi)
                m[w].hi = m[i].hi;
        } else {
            m[++w] = m[i];
        }
    }
    nm = w + 1;
    nxl_status_t st = NXL_SUCCESS;
    for (size_t i = 0; i < nm && st == NXL_SUCCESS; i++)
        st = add_range(a, z, fn, m[i].dev, m[i].lo, m[i].hi);
    free(m);
    return st;
}

nxli_region_t *nxli_lazy_find(nxl_agent_t *a, uint64_t dev, uintptr_t addr, size_t len)
{
    nxli_lazy_t *z = a->lazy;
    nxli_region_t *r = z ? find(z, dev, addr, len) : NULL;
    if (r)
        r->used = z->tick;
    return r;
}

void nxli_lazy_stats(nxl_agent_t *a, nxl_stats_t *out)
{
    const nxli_lazy_t *z = a->lazy;
    if (!z)
        return;
    out->autoreg_registered = z->registered;
    out->autoreg_reused = z->reused;
    out->autoreg_evicted = z->evicted;
    out->autoreg_invalidated = z->invalidated;
    out->autoreg_bytes = z->bytes;
}

/* after the transfers and prepared lists: every entry is idle */
void nxli_lazy_cleanup(nxl_agent_t *a)
{
    nxli_lazy_t *z = a->lazy;
    if (!z)
        return;
    if (z->events > 0) {
        z->unset(UCM_VM_UNMAPPED, on_unmapped, z); /* no handler runs after it returns */
        dlclose(z->ucm);
    }
    while (z->tab.n)
        drop(a, z, z->tab.n - 1);
    free(z->tab.v);
    pthread_mutex_destroy(&z->qlock);
    free(z);
    a->lazy = NULL;
}
