/* SPDX-License-Identifier: BSD-3-Clause */
/* nxl._nxl: Agent, Backend, Region, Prepped, Xfer. */
#ifndef NXL_PY_OBJECTS_H
#define NXL_PY_OBJECTS_H

#include "completion.h"

typedef struct npy_agent {
    PyObject_HEAD
    npy_core_t *core;
    PyObject *name; /* str */
} npy_agent_t;

typedef struct npy_backend {
    PyObject_HEAD
    npy_core_t *core;
    nxl_backend_t *b;
    PyObject *name;
} npy_backend_t;

/* A registered range. For a buffer-protocol object it holds the object and
 * a buffer export of it until the Region itself is collected, deregistered
 * or not: transfers using it hold the Region, so the memory cannot move or
 * go while nxl may touch it. */
typedef struct npy_region {
    PyObject_HEAD
    npy_core_t *core;
    PyObject *obj;      /* what was registered (kept alive) */
    PyObject *meta;     /* bytes of the registration's meta, or NULL */
    Py_buffer view;
    int has_view;
    int registered;
    nxl_mem_t kind;
    nxl_desc_t d;       /* as registered (meta points into ->meta) */
    nxl_backend_t *b;   /* the backend registered with, or NULL: all */
    Py_ssize_t exports; /* memoryviews of the Region */
} npy_region_t;

typedef struct npy_prepped {
    PyObject_HEAD
    npy_core_t *core;
    nxl_prepped_t *p;   /* NULL once released */
    PyObject *keep;     /* Regions it was made of */
    size_t n;
} npy_prepped_t;

typedef struct npy_xfer {
    PyObject_HEAD
    npy_core_t *core;
    nxl_xfer_t *x;      /* NULL once released */
    PyObject *keep;     /* Regions, Prepped lists it uses */
    PyObject *last;     /* the Completion of the last post, or NULL */
} npy_xfer_t;

/* A descriptor list parsed from Python: a Region, a (addr, len[, dev[, meta]])
 * tuple, or a list of them. */
typedef struct npy_dlist {
    nxl_desc_t *d;
    size_t n;
    int kind;           /* -1: not given and no Region in the list */
    PyObject *keep;     /* list: Regions and meta objects used */
    nxl_desc_t stack[8];
} npy_dlist_t;

/* @return 0, or -1 with the error set; npy_dlist_free() either way */
int npy_dlist_parse(npy_core_t *core, PyObject *spec, npy_dlist_t *dl, int kind);
void npy_dlist_free(npy_dlist_t *dl);

PyObject *npy_xfer_post(npy_xfer_t *x);
extern PyObject *npy_desc_type;

extern PyTypeObject npy_agent_type, npy_backend_type, npy_region_type, npy_prepped_type,
    npy_xfer_type;

#endif
