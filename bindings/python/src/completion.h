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
    PyObject *waiters;   /* list of the _Waiters of Tasks awaiting it (waiter.c), or NULL */
} npy_completion_t;

extern PyTypeObject npy_completion_type;
extern PyObject *npy_await_hook, *npy_settled_hook;

npy_completion_t *npy_completion_new(npy_core_t *core, PyObject *keep);
/* The nxl_done_cb of every operation: arg is the Completion, holding one
 * reference that the callback gives back. */
void npy_done_cb(nxl_future_t *f, nxl_status_t st, void *arg);
int npy_completion_wait(npy_completion_t *c, double timeout);
/* the result of a done completion, or NULL with its error raised */
PyObject *npy_completion_outcome(npy_completion_t *c);
/* nxl_future_cancel(), then a re-arm; None */
PyObject *npy_completion_cancel_native(npy_completion_t *c);
/* waiter.c: `await c` on an agent that is not threaded */
PyObject *npy_waiter_new(npy_completion_t *c);
void npy_waiter_fire(PyObject *w);

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
