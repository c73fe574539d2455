/* SPDX-License-Identifier: BSD-3-Clause */
/* The asyncio side of an agent on NXL_LOOP_FD, in C because it runs once
 * or twice per transfer:
 *
 * - the loop's callbacks (a reader on the agent's descriptor, a timer that
 *   follows nxl_agent_backend_timeout(), a call_soon while work is ready
 *   now) and npy_rearm(), which keeps them armed after every call;
 * - _Waiter, what `await completion` yields to the awaiting asyncio Task:
 *   an object of asyncio's future protocol (_asyncio_future_blocking,
 *   get_loop, add_done_callback(fn, context=), cancel, result, done), so
 *   that no asyncio.Future is made per transfer. When an operation
 *   completes inside one of the loop callbacks below, the waiting Tasks
 *   are woken there, after nxl's turns returned (never inside an nxl
 *   callback, so they may call anything), instead of one loop iteration
 *   later through call_soon: a transfer costs one iteration of the loop.
 *   Elsewhere (a completion delivered by run() or wait() called from a
 *   coroutine, or by close()) they are woken through call_soon, as an
 *   asyncio.Future wakes them.
 *
 * Cancelling the Task cancels the operation (nxl_future_cancel) and the
 * Task sees asyncio.CancelledError once nxl reported the operation's end:
 * its buffers are safe to reuse when the cancellation reaches the code. */
#include "objects.h"

static PyObject *str_call_soon, *str_call_at, *str_time, *str_cancel, *str_attach_loop;
static PyObject *str_detach_loop, *str_is_closed;
static PyObject *h_soon, *h_timer, *h_read; /* the loop callbacks, f(weakref to the Agent) */
static PyObject *get_running_loop;          /* asyncio's _get_running_loop */
static PyObject *cancelled_error;           /* asyncio.CancelledError */

/* ----------------------------------------------------------------- waiter */

typedef struct npy_waiter {
    PyObject_HEAD
    npy_completion_t *c;
    PyObject *loop;
    PyObject *cbs;   /* list of (fn, context) once yielded, or NULL */
    PyObject *msg;   /* cancel(msg)'s message, or NULL: the CancelledError's argument */
    char blocking;   /* asyncio's _asyncio_future_blocking */
    char state;      /* 0 not yet yielded, 1 yielded to the Task, 2 returned */
    char cancelled;  /* cancel() asked: the await raises CancelledError */
    char fired;      /* the completion reported: callbacks added now run soon */
} npy_waiter_t;

static PyTypeObject npy_waiter_type;

PyObject *npy_waiter_new(npy_completion_t *c)
{
    npy_waiter_t *w = PyObject_GC_New(npy_waiter_t, &npy_waiter_type);
    if (!w)
        return NULL;
    Py_INCREF(c);
    w->c = c;
    w->loop = NULL;
    w->cbs = NULL;
    w->msg = NULL;
    w->blocking = 0;
    w->state = 0;
    w->cancelled = 0;
    w->fired = 0;
    PyObject_GC_Track(w);
    return (PyObject *)w;
}

static int w_traverse(npy_waiter_t *w, visitproc visit, void *arg)
{
    Py_VISIT(w->c);
    Py_VISIT(w->loop);
    Py_VISIT(w->cbs);
    Py_VISIT(w->msg);
    return 0;
}

static int w_clear(npy_waiter_t *w)
{
    Py_CLEAR(w->c);
    Py_CLEAR(w->loop);
    Py_CLEAR(w->cbs);
    Py_CLEAR(w->msg);
    return 0;
}

static void w_dealloc(npy_waiter_t *w)
{
    PyObject_GC_UnTrack(w);
    w_clear(w);
    PyObject_GC_Del(w);
}

/* loop.call_soon(fn, arg[, context=ctx]) */
static PyObject *call_soon(PyObject *loop, PyObject *fn, PyObject *arg, PyObject *ctx)
{
    static PyObject *kwnames;
    if (!kwnames && !(kwnames = Py_BuildValue("(s)", "context")))
        return NULL;
    PyObject *args[4] = {loop, fn, arg, ctx};
    int with_ctx = ctx && ctx != Py_None;
    return PyObject_VectorcallMethod(str_call_soon, args, 3,
                                     with_ctx ? kwnames : NULL);
}

/* runs fn(w) in ctx now */
static void run_cb(npy_waiter_t *w, PyObject *fn, PyObject *ctx)
{
    int entered = ctx && ctx != Py_None && PyContext_Enter(ctx) == 0;
    if (ctx && ctx != Py_None && !entered)
        PyErr_Clear(); /* already entered: run it in the current one */
    PyObject *r = PyObject_CallOneArg(fn, (PyObject *)w);
    if (!r)
        PyErr_WriteUnraisable(fn);
    Py_XDECREF(r);
    if (entered && PyContext_Exit(ctx) < 0)
        PyErr_WriteUnraisable(ctx);
}

/* wakes w's callbacks: now, inside one of our loop callbacks (queued on
 * core->ready, run once nxl's turns returned), else through call_soon */
static void w_wake(npy_waiter_t *w, int now)
{
    PyObject *cbs = w->cbs;
    if (!cbs)
        return;
    w->cbs = NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(cbs); i++) {
        PyObject *t = PyList_GET_ITEM(cbs, i);
        PyObject *fn = PyTuple_GET_ITEM(t, 0), *ctx = PyTuple_GET_ITEM(t, 1);
        if (now) {
            run_cb(w, fn, ctx);
        } else {
            PyObject *r = call_soon(w->loop, fn, (PyObject *)w, ctx);
            if (!r)
                PyErr_WriteUnraisable(fn);
            Py_XDECREF(r);
        }
    }
    Py_DECREF(cbs);
}

/* from npy_done_cb: the completion reported */
void npy_waiter_fire(PyObject *wo)
{
    npy_waiter_t *w = (npy_waiter_t *)wo;
    w->fired = 1;
    if (!w->cbs)
        return;
    npy_core_t *core = w->c->core;
    if (core->in_handle && core->loop == w->loop && core->ready) {
        if (PyList_Append(core->ready, wo) == 0)
            return;
        PyErr_Clear();
    }
    w_wake(w, 0);
}

/* CancelledError(), or CancelledError(msg) after cancel(msg), as an
 * asyncio.Future raises it */
static PyObject *raise_cancelled(npy_waiter_t *w)
{
    if (!w->msg) {
        PyErr_SetNone(cancelled_error);
        return NULL;
    }
    PyObject *e = PyObject_CallOneArg(cancelled_error, w->msg);
    if (e) {
        PyErr_SetObject(cancelled_error, e);
        Py_DECREF(e);
    }
    return NULL;
}

static PyObject *stop_with(PyObject *v)
{
    if (!v)
        return NULL;
    if (v == Py_None) {
        Py_DECREF(v);
        return NULL; /* StopIteration with None: no exception set */
    }
    PyObject *e = PyObject_CallOneArg(PyExc_StopIteration, v);
    Py_DECREF(v);
    if (e) {
        PyErr_SetObject(PyExc_StopIteration, e);
        Py_DECREF(e);
    }
    return NULL;
}

static PyObject *w_iternext(npy_waiter_t *w)
{
    npy_completion_t *c = w->c;
    if (w->state == 0) {
        if (c->done) {
            w->state = 2;
            return stop_with(npy_completion_outcome(c));
        }
        PyObject *loop = PyObject_CallNoArgs(get_running_loop);
        if (!loop)
            return NULL;
        if (loop == Py_None) {
            Py_DECREF(loop);
            PyErr_SetString(PyExc_RuntimeError,
                            "no running event loop: await an nxl operation inside a coroutine "
                            "run by asyncio, or wait() for it");
            return NULL;
        }
        npy_core_t *core = c->core;
        if (core->loop != loop) {
            if (!core->a || !core->agent) {
                Py_DECREF(loop);
                return npy_raise_closed();
            }
            PyObject *r = PyObject_CallMethodOneArg(core->agent, str_attach_loop, loop);
            if (!r) {
                Py_DECREF(loop);
                return NULL;
            }
            Py_DECREF(r);
        }
        if (!c->waiters && !(c->waiters = PyList_New(0))) {
            Py_DECREF(loop);
            return NULL;
        }
        if (PyList_Append(c->waiters, (PyObject *)w) < 0) {
            Py_DECREF(loop);
            return NULL;
        }
        Py_XSETREF(w->loop, loop);
        w->blocking = 1;
        w->state = 1;
        Py_INCREF(w);
        return (PyObject *)w;
    }
    if (w->state == 1) {
        w->state = 2;
        if (w->cancelled)
            return raise_cancelled(w);
        if (!c->done) {
            PyErr_SetString(PyExc_RuntimeError, "await wasn't used with future");
            return NULL;
        }
        return stop_with(npy_completion_outcome(c));
    }
    return NULL;
}

static PyObject *w_self(PyObject *w)
{
    Py_INCREF(w);
    return w;
}

static PyObject *w_get_blocking(npy_waiter_t *w, void *x)
{
    (void)x;
    return PyBool_FromLong(w->blocking);
}

static int w_set_blocking(npy_waiter_t *w, PyObject *v, void *x)
{
    (void)x;
    int b = v ? PyObject_IsTrue(v) : 0;
    if (b < 0)
        return -1;
    w->blocking = (char)b;
    return 0;
}

static PyObject *w_get_loop(npy_waiter_t *w, PyObject *noargs)
{
    (void)noargs;
    PyObject *l = w->loop ? w->loop : Py_None;
    Py_INCREF(l);
    return l;
}

static PyObject *w_done(npy_waiter_t *w, PyObject *noargs)
{
    (void)noargs;
    return PyBool_FromLong(w->c->done);
}

static PyObject *w_cancelled(npy_waiter_t *w, PyObject *noargs)
{
    (void)noargs;
    return PyBool_FromLong(w->cancelled && w->c->done);
}

static PyObject *w_result(npy_waiter_t *w, PyObject *noargs)
{
    (void)noargs;
    if (w->cancelled)
        return raise_cancelled(w);
    if (!w->c->done) {
        PyErr_SetString(PyExc_RuntimeError, "the nxl operation is still in flight");
        return NULL;
    }
    return npy_completion_outcome(w->c);
}

static PyObject *w_exception(npy_waiter_t *w, PyObject *noargs)
{
    (void)noargs;
    if (w->cancelled)
        return raise_cancelled(w);
    if (!w->c->done) {
        PyErr_SetString(PyExc_RuntimeError, "the nxl operation is still in flight");
        return NULL;
    }
    PyObject *r = npy_completion_outcome(w->c);
    if (r) {
        Py_DECREF(r);
        Py_RETURN_NONE;
    }
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyErr_NormalizeException(&et, &ev, &tb);
    Py_XDECREF(et);
    Py_XDECREF(tb);
    return ev;
}

static PyObject *w_add_done_callback(npy_waiter_t *w, PyObject *const *args, Py_ssize_t nargs,
                                     PyObject *kwnames)
{
    PyObject *fn = NULL, *ctx = NULL;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, "add_done_callback(fn, *, context=None)");
        return NULL;
    }
    fn = args[0];
    for (Py_ssize_t i = 0; i < nkw; i++) {
        if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, i), "context") != 0) {
            PyErr_SetString(PyExc_TypeError, "add_done_callback(fn, *, context=None)");
            return NULL;
        }
        ctx = args[nargs + i];
    }
    PyObject *own = NULL;
    if (!ctx || ctx == Py_None) {
        if (!(own = PyContext_CopyCurrent()))
            return NULL;
        ctx = own;
    }
    if (w->fired || w->c->done) {
        PyObject *r = w->loop ? call_soon(w->loop, fn, (PyObject *)w, ctx) : NULL;
        if (!w->loop)
            PyErr_SetString(PyExc_RuntimeError, "add_done_callback() before the await");
        Py_XDECREF(own);
        if (!r)
            return NULL;
        Py_DECREF(r);
        Py_RETURN_NONE;
    }
    PyObject *t = PyTuple_Pack(2, fn, ctx);
    Py_XDECREF(own);
    if (!t)
        return NULL;
    if (!w->cbs && !(w->cbs = PyList_New(0))) {
        Py_DECREF(t);
        return NULL;
    }
    int rc = PyList_Append(w->cbs, t);
    Py_DECREF(t);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *w_remove_done_callback(npy_waiter_t *w, PyObject *fn)
{
    long n = 0;
    if (w->cbs) {
        for (Py_ssize_t i = PyList_GET_SIZE(w->cbs) - 1; i >= 0; i--) {
            int eq = PyObject_RichCompareBool(PyTuple_GET_ITEM(PyList_GET_ITEM(w->cbs, i), 0),
                                              fn, Py_EQ);
            if (eq < 0)
                return NULL;
            if (eq) {
                if (PySequence_DelItem(w->cbs, i) < 0)
                    return NULL;
                n++;
            }
        }
    }
    return PyLong_FromLong(n);
}

/* cancel(msg=None): Task.cancel() passes it on to what the Task awaits.
 * True: nxl is asked to cancel, the Task is woken (CancelledError) once nxl
 * reported; False once the operation reported (the Task then cancels
 * itself on its next step, as for a done asyncio.Future). */
static PyObject *w_cancel(npy_waiter_t *w, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"msg", NULL};
    PyObject *msg = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:cancel", kwl, &msg))
        return NULL;
    if (w->c->done || w->state == 2)
        Py_RETURN_FALSE;
    w->cancelled = 1;
    if (msg && msg != Py_None) {
        Py_INCREF(msg);
        Py_XSETREF(w->msg, msg);
    }
    PyObject *r = npy_completion_cancel_native(w->c);
    if (!r)
        return NULL;
    Py_DECREF(r);
    Py_RETURN_TRUE;
}

static PyMethodDef w_methods[] = {
    {"get_loop", (PyCFunction)w_get_loop, METH_NOARGS, NULL},
    {"done", (PyCFunction)w_done, METH_NOARGS, NULL},
    {"cancelled", (PyCFunction)w_cancelled, METH_NOARGS, NULL},
    {"result", (PyCFunction)w_result, METH_NOARGS, NULL},
    {"exception", (PyCFunction)w_exception, METH_NOARGS, NULL},
    {"add_done_callback", (PyCFunction)(void (*)(void))w_add_done_callback,
     METH_FASTCALL | METH_KEYWORDS, NULL},
    {"remove_done_callback", (PyCFunction)w_remove_done_callback, METH_O, NULL},
    {"cancel", (PyCFunction)(void (*)(void))w_cancel, METH_VARARGS | METH_KEYWORDS, NULL},
    {"__await__", (PyCFunction)w_self, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef w_getset[] = {
    {"_asyncio_future_blocking", (getter)w_get_blocking, (setter)w_set_blocking, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject npy_waiter_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "nxl._nxl._Waiter",
    .tp_basicsize = sizeof(npy_waiter_t),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "What awaiting an nxl.Completion yields to asyncio (its future protocol).",
    .tp_dealloc = (destructor)w_dealloc,
    .tp_traverse = (traverseproc)w_traverse,
    .tp_clear = (inquiry)w_clear,
    .tp_iter = w_self,
    .tp_iternext = (iternextfunc)w_iternext,
    .tp_methods = w_methods,
    .tp_getset = w_getset,
};

/* ------------------------------------------------------ the loop's driving */

static void rearm_failed(npy_core_t *core)
{
    /* a loop closed under an attached agent (asyncio.run() returned, the
     * agent lives on for wait()): detach quietly; anything else is said */
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyObject *closed = PyObject_CallMethodNoArgs(core->loop, str_is_closed);
    int is = closed ? PyObject_IsTrue(closed) : -1;
    Py_XDECREF(closed);
    if (is > 0 && core->agent) {
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(tb);
        PyObject *r = PyObject_CallMethodNoArgs(core->agent, str_detach_loop);
        if (!r)
            PyErr_WriteUnraisable(core->agent);
        Py_XDECREF(r);
        return;
    }
    PyErr_Clear();
    PyErr_Restore(et, ev, tb);
    PyErr_WriteUnraisable(core->agent ? core->agent : Py_None);
}

static void timer_cancel(npy_core_t *core)
{
    PyObject *h = core->timer;
    if (!h)
        return;
    core->timer = NULL;
    PyObject *r = PyObject_CallMethodNoArgs(h, str_cancel);
    if (!r)
        PyErr_Clear();
    Py_XDECREF(r);
    Py_DECREF(h);
}

/* after every call that may have made work or armed a timer: the loop's
 * call_soon/timer follows nxl_agent_backend_timeout() */
void npy_rearm(npy_core_t *core)
{
    if (!core->attached || !core->a || !core->loop || core->in_handle)
        return; /* inside a loop callback: it re-arms once when it returns */
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    int ms = nxl_agent_backend_timeout(core->a);
    if (ms == 0) {
        if (!core->soon) {
            PyObject *r = PyObject_CallMethodObjArgs(core->loop, str_call_soon, h_soon, core->wref,
                                                     NULL);
            if (r) {
                core->soon = 1;
                Py_DECREF(r);
            } else {
                rearm_failed(core);
            }
        }
    } else if (ms < 0) {
        timer_cancel(core);
    } else {
        PyObject *now = PyObject_CallMethodNoArgs(core->loop, str_time);
        double when = now ? PyFloat_AsDouble(now) + ms / 1000.0 : -1;
        Py_XDECREF(now);
        if (!now || PyErr_Occurred()) {
            rearm_failed(core);
        } else if (!core->timer || core->timer_when > when + 0.0005) {
            /* a timer as soon or sooner re-arms when it runs */
            timer_cancel(core);
            PyObject *w = PyFloat_FromDouble(when);
            PyObject *h = w ? PyObject_CallMethodObjArgs(core->loop, str_call_at, w, h_timer,
                                                         core->wref, NULL)
                            : NULL;
            Py_XDECREF(w);
            if (h) {
                core->timer = h;
                core->timer_when = when;
            } else {
                rearm_failed(core);
            }
        }
    }
    PyErr_Restore(et, ev, tb);
}

enum { H_SOON, H_TIMER, H_READ };

/* turns per loop callback while work is ready at once: a transfer's
 * progress and its completion's delivery (a later turn) in one iteration */
#define TURNS 2

static PyObject *h_run(PyObject *wref, int which)
{
    PyObject *ao = PyWeakref_GetObject(wref);
    if (!ao || ao == Py_None)
        Py_RETURN_NONE;
    npy_core_t *core = ((npy_agent_t *)ao)->core;
    if (!core)
        Py_RETURN_NONE;
    if (which == H_SOON)
        core->soon = 0;
    else if (which == H_TIMER)
        Py_CLEAR(core->timer);
    if (!core->a || !core->attached || core->in_run || core->in_handle)
        Py_RETURN_NONE;
    Py_INCREF(ao);
    PyObject *ready = PyList_New(0);
    if (!ready) {
        Py_DECREF(ao);
        return NULL;
    }
    core->ready = ready;
    core->in_handle++;
    nxl_status_t st = NXL_SUCCESS;
    for (int i = 0; i < TURNS && core->a; i++) {
        if (i > 0 && nxl_agent_backend_timeout(core->a) != 0)
            break;
        core->in_run++;
        st = nxl_agent_run_once(core->a, 0);
        core->in_run--;
        if (st != NXL_SUCCESS)
            break;
    }
    core->in_handle--;
    core->ready = NULL;
    if (st != NXL_SUCCESS && core->a)
        npy_raise_agent(core, st);
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    npy_rearm(core);
    /* the Tasks whose operations completed, woken now: no nxl frame below */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(ready); i++)
        w_wake((npy_waiter_t *)PyList_GET_ITEM(ready, i), 1);
    Py_DECREF(ready);
    PyErr_Restore(et, ev, tb);
    Py_DECREF(ao);
    if (et)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *h_soon_fn(PyObject *m, PyObject *wref)
{
    (void)m;
    return h_run(wref, H_SOON);
}

static PyObject *h_timer_fn(PyObject *m, PyObject *wref)
{
    (void)m;
    return h_run(wref, H_TIMER);
}

static PyObject *h_read_fn(PyObject *m, PyObject *wref)
{
    (void)m;
    return h_run(wref, H_READ);
}

static PyMethodDef h_defs[] = {
    {"_on_soon", h_soon_fn, METH_O, NULL},
    {"_on_timer", h_timer_fn, METH_O, NULL},
    {"_on_readable", h_read_fn, METH_O, NULL},
};

/* _attach(who, loop, wref) / _attach(None) */
PyObject *npy_core_attach(npy_core_t *core, PyObject *loop, PyObject *wref)
{
    timer_cancel(core);
    core->soon = 0;
    Py_XINCREF(loop);
    Py_XSETREF(core->loop, loop);
    Py_XINCREF(wref);
    Py_XSETREF(core->wref, wref);
    if (loop)
        npy_rearm(core);
    Py_RETURN_NONE;
}

void npy_core_detach(npy_core_t *core)
{
    Py_CLEAR(core->timer); /* fires into a dead weak reference, or is gone with the loop */
    Py_CLEAR(core->loop);
    Py_CLEAR(core->wref);
    core->soon = 0;
}

int npy_waiter_init(PyObject *m)
{
    if (PyType_Ready(&npy_waiter_type) < 0)
        return -1;
#define S(v, s)                                                                                    \
    if (!(v = PyUnicode_InternFromString(s)))                                                      \
        return -1;
    S(str_call_soon, "call_soon");
    S(str_call_at, "call_at");
    S(str_time, "time");
    S(str_cancel, "cancel");
    S(str_attach_loop, "_attach_loop");
    S(str_detach_loop, "_detach_loop");
    S(str_is_closed, "is_closed");
#undef S
    PyObject *fns[] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++) {
        if (!(fns[i] = PyCFunction_New(&h_defs[i], NULL)))
            return -1;
        if (PyModule_AddObjectRef(m, h_defs[i].ml_name, fns[i]) < 0)
            return -1;
    }
    h_soon = fns[0];
    h_timer = fns[1];
    h_read = fns[2];
    PyObject *aio = PyImport_ImportModule("asyncio");
    if (!aio)
        return -1;
    get_running_loop = PyObject_GetAttrString(aio, "_get_running_loop");
    cancelled_error = PyObject_GetAttrString(aio, "CancelledError");
    Py_DECREF(aio);
    if (!get_running_loop || !cancelled_error)
        return -1;
    return 0;
}
