/* SPDX-License-Identifier: BSD-3-Clause */
/* The registrations of the transports that reach only this agent itself
 * (POSIX, OBJ, GDS), by the id their keys carry (blob_wire.h): a hash table
 * of entries the transport embeds in its own records (nxlt_reg_t), which
 * grows fourfold past two entries a bucket. Header-only, as blob_wire.h;
 * one thread (the reactor's). */
#ifndef NXL_REGTAB_H
#define NXL_REGTAB_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct nxlt_reg {
    struct nxlt_reg *hnext;
    uint64_t regid;
} nxlt_reg_t;

typedef struct nxlt_regtab {
    nxlt_reg_t **v;
    size_t nb; /* buckets, a power of two */
    size_t n;  /* entries */
    size_t scan; /* nxlt_regtab_pop: the buckets before it are empty */
} nxlt_regtab_t;

/* the record around an entry */
#define NXLT_REG_OF(p, type, member) ((type *)(void *)((char *)(p) - offsetof(type, member)))

static inline size_t nxlt_regtab_bucket(size_t nb, uint64_t id)
{
    return (size_t)((id * 0x9e3779b97f4a7c15ull) >> 20) & (nb - 1);
}

/* 0, or -1 when out of memory */
static inline int nxlt_regtab_init(nxlt_regtab_t *t)
{
    t->nb = 64;
    t->n = t->scan = 0;
    t->v = calloc(t->nb, sizeof(*t->v));
    return t->v ? 0 : -1;
}

/* the buckets; entries still in it are the caller's (nxlt_regtab_pop) */
static inline void nxlt_regtab_fini(nxlt_regtab_t *t)
{
    free(t->v);
    t->v = NULL;
    t->nb = t->n = t->scan = 0;
}

/* 0, or -1 when out of memory (r is not in the table) */
static inline int nxlt_regtab_add(nxlt_regtab_t *t, nxlt_reg_t *r)
{
    if (t->n + 1 > 2 * t->nb) {
        size_t nb = t->nb * 4;
        nxlt_reg_t **v = calloc(nb, sizeof(*v));
        if (!v)
            return -1;
        for (size_t i = 0; i < t->nb; i++)
            for (nxlt_reg_t *g = t->v[i], *next; g; g = next) {
                next = g->hnext;
                size_t b = nxlt_regtab_bucket(nb, g->regid);
                g->hnext = v[b];
                v[b] = g;
            }
        free(t->v);
        t->v = v;
        t->nb = nb;
        t->scan = 0;
    }
    size_t b = nxlt_regtab_bucket(t->nb, r->regid);
    r->hnext = t->v[b];
    t->v[b] = r;
    t->n++;
    if (b < t->scan)
        t->scan = b;
    return 0;
}

static inline nxlt_reg_t *nxlt_regtab_find(const nxlt_regtab_t *t, uint64_t id)
{
    for (nxlt_reg_t *r = t->v[nxlt_regtab_bucket(t->nb, id)]; r; r = r->hnext)
        if (r->regid == id)
            return r;
    return NULL;
}

static inline void nxlt_regtab_del(nxlt_regtab_t *t, nxlt_reg_t *r)
{
    for (nxlt_reg_t **p = &t->v[nxlt_regtab_bucket(t->nb, r->regid)]; *p; p = &(*p)->hnext)
        if (*p == r) {
            *p = r->hnext;
            t->n--;
            return;
        }
}

/* one entry, taken out (teardown: popping all costs one pass over the
 * buckets); NULL when empty */
static inline nxlt_reg_t *nxlt_regtab_pop(nxlt_regtab_t *t)
{
    for (; t->n && t->scan < t->nb; t->scan++)
        if (t->v[t->scan]) {
            nxlt_reg_t *r = t->v[t->scan];
            t->v[t->scan] = r->hnext;
            t->n--;
            return r;
        }
    return NULL;
}

#endif
