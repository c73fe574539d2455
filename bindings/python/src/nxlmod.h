/* SPDX-License-Identifier: BSD-3-Clause */
/* nxl._nxl: what the extension's files share. */
#ifndef NXL_PY_NXLMOD_H
#define NXL_PY_NXLMOD_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <nxl.h>

/* What an Agent and every object made from it share: the nxl agent (NULL
 * once closed) and how to reach the Python Agent while it lives. Counted by
 * hand: the Agent holds one reference, each Region, Backend, Prepped, Xfer
 * and Completion one more, so that an object outliving its agent reads a
 * NULL agent instead of freed memory. */
typedef struct npy_core {
    nxl_agent_t *a;      /* NULL once closed */
    Py_ssize_t refs;
    int threaded;        /* nxl's threaded mode: every nxl call releases the GIL */
    int in_run;          /* inside run_once/wait/destroy on this agent (FD mode) */
    int attached;        /* driven by an asyncio loop (waiter.c): npy_rearm() after calls */
    int in_handle;       /* inside one of the loop's callbacks (waiter.c), not in a Task */
    int soon;            /* a loop.call_soon of a turn is pending */
    PyObject *loop;      /* the asyncio loop attached, or NULL */
    PyObject *wref;      /* weak reference to the Agent: the loop callbacks' argument */
    PyObject *timer;     /* the loop's TimerHandle for the agent's next timer, or NULL */
    double timer_when;   /* its loop.time() */
    PyObject *ready;     /* inside a loop callback: the waiters to wake after nxl's turns */
    PyObject *agent;     /* the Python Agent, borrowed (cleared by its dealloc) */
    PyObject *notif_cb;  /* callable(peer, msg) or NULL: notifications queue */
    PyObject *peer_cb;   /* callable(peer, kind, incarnation, status, why, nregions) or NULL */
    char *strs[12];      /* configuration strings kept for the agent's life */
} npy_core_t;

void npy_core_decref(npy_core_t *c);
static inline npy_core_t *npy_core_incref(npy_core_t *c)
{
    c->refs++;
    return c;
}

/* Runs the nxl call @p expr with the GIL released in threaded mode (the
 * reactor thread may need the GIL for a callback while the call waits for
 * it), with it held otherwise (callbacks never run inside those calls). */
#define NPY_CALL(core, st, expr)                                                                   \
    do {                                                                                           \
        if ((core)->threaded) {                                                                    \
            Py_BEGIN_ALLOW_THREADS(st) = (expr);                                                   \
            Py_END_ALLOW_THREADS                                                                   \
        } else {                                                                                   \
            (st) = (expr);                                                                         \
        }                                                                                          \
    } while (0)

/* errors (errors.c) */
int npy_errors_init(PyObject *m);
PyObject *npy_error_class(int status);
/* Raises the status's class with @p sentence (NULL or "": nxl_strerror()). */
PyObject *npy_raise(nxl_status_t st, const char *sentence);
/* Raises with the agent's last error sentence. */
PyObject *npy_raise_agent(npy_core_t *core, nxl_status_t st);
/* Raises nxl.Closed; NULL. */
PyObject *npy_raise_closed(void);
PyObject *npy_make_error(nxl_status_t st, const char *sentence);

/* asyncio (waiter.c): after a call that may have made work or armed a
 * timer, the loop's call_soon/timer follows the agent's */
void npy_rearm(npy_core_t *core);
/* _attach(): the loop and the weak reference its callbacks get */
PyObject *npy_core_attach(npy_core_t *core, PyObject *loop, PyObject *wref);
void npy_core_detach(npy_core_t *core);
int npy_waiter_init(PyObject *m);

#endif
