/* SPDX-License-Identifier: BSD-3-Clause */
/* nxl._nxl.Completion: one nxl future, awaitable or waited for. */
#ifndef NXL_PY_COMPLETION_H
#define NXL_PY_COMPLETION_H

#include "nxlmod.h"

typedef struct npy_completion {
    PyObject_HEAD
    npy_core_t *core;
    nxl_future_t *f;     /* our reference (NULL until the starting call returned) */
    nxl_status_t status; /* NXL_IN_PROG until the callback ran */
    int done;
    int want_peer;       /* a metadata fetch: result is nxl_future_peer() */
    PyObject *error;     /* str, the sentence of a failure */
    PyObject *result;
    PyObject *keep;      /* what the operation uses (an Xfer, Regions) */
    PyObject *callbacks; /* list or NULL */
    PyObject *fut;       /* an asyncio future to set_result(None) when done, or NULL */
} npy_completion_t;

extern PyTypeObject npy_completion_type;
extern PyObject *npy_await_hook, *npy_settled_hook, *npy_str_set_result;

npy_completion_t *npy_completion_new(npy_core_t *core, PyObject *keep);
/* The nxl_done_cb of every operation: arg is the Completion, holding one
 * reference that the callback gives back. */
void npy_done_cb(nxl_future_t *f, nxl_status_t st, void *arg);
int npy_completion_wait(npy_completion_t *c, double timeout);

/* Starts an operation: @p start is called with the callback, its argument
 * and the out pointer. Returns the Completion, or NULL with the error set. */
#define NPY_START(core, c, st, call)                                                               \
    do {                                                                                           \
        Py_INCREF(c); /* nxl's, given back by npy_done_cb */                                       \
        NPY_CALL(core, st, call);                                                                  \
        if ((st) != NXL_SUCCESS) {                                                                 \
            Py_DECREF(c);                                                                          \
            npy_raise_agent(core, st);                                                             \
            Py_DECREF(c);                                                                          \
            (c) = NULL;                                                                            \
        } else {                                                                                   \
            npy_rearm(core);                                                                       \
        }                                                                                          \
    } while (0)

#endif
