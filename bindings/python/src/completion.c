/* SPDX-License-Identifier: BSD-3-Clause */
/* nxl._nxl.Completion: one nxl future. While nxl holds the operation, the
 * callback's argument holds a reference to the Completion (and so to what
 * it keeps: its Xfer and Regions): a Completion dropped in flight lives on
 * until nxl reported, and nothing is canceled by the drop. */
#include "completion.h"

#include <time.h>

PyObject *npy_await_hook;   /* set by nxl/__init__.py: hook(c) -> iterator (threaded agents) */
PyObject *npy_settled_hook; /* hook(c) -> an awaitable of the final status */

static void run_callbacks(npy_completion_t *c)
{
    PyObject *cbs = c->callbacks;
    c->callbacks = NULL;
    if (!cbs)
        return;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(cbs); i++) {
        PyObject *r = PyObject_CallOneArg(PyList_GET_ITEM(cbs, i), (PyObject *)c);
        if (!r)
            PyErr_WriteUnraisable(PyList_GET_ITEM(cbs, i));
        Py_XDECREF(r);
    }
    Py_DECREF(cbs);
}

void npy_done_cb(nxl_future_t *f, nxl_status_t st, void *arg)
{
    PyGILState_STATE g = PyGILState_Ensure();
    npy_completion_t *c = (npy_completion_t *)arg;
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    c->status = st;
    c->done = 1;
    if (st != NXL_SUCCESS) {
        const char *e = nxl_future_error(f);
        c->error = PyUnicode_DecodeUTF8(e ? e : "", e ? (Py_ssize_t)strlen(e) : 0, "replace");
        if (!c->error)
            PyErr_Clear();
    } else if (c->want_peer) {
        const char *p = nxl_future_peer(f);
        if (p) {
            Py_XDECREF(c->result);
            c->result = PyUnicode_FromString(p);
            if (!c->result)
                PyErr_Clear();
        }
    }
    run_callbacks(c);
    PyObject *ws = c->waiters; /* the awaiting Tasks (not threaded) */
    c->waiters = NULL;
    if (ws) {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(ws); i++)
            npy_waiter_fire(PyList_GET_ITEM(ws, i));
        Py_DECREF(ws);
    }
    PyErr_Restore(et, ev, tb);
    Py_DECREF(c); /* nxl's reference */
    PyGILState_Release(g);
}

npy_completion_t *npy_completion_new(npy_core_t *core, PyObject *keep)
{
    npy_completion_t *c = PyObject_GC_New(npy_completion_t, &npy_completion_type);
    if (!c)
        return NULL;
    c->core = npy_core_incref(core);
    c->f = NULL;
    c->status = NXL_IN_PROG;
    c->done = 0;
    c->want_peer = 0;
    c->error = NULL;
    c->result = NULL;
    c->callbacks = NULL;
    c->waiters = NULL;
    Py_XINCREF(keep);
    c->keep = keep;
    PyObject_GC_Track(c);
    return c;
}

static int c_traverse(npy_completion_t *c, visitproc visit, void *arg)
{
    Py_VISIT(c->keep);
    Py_VISIT(c->callbacks);
    Py_VISIT(c->result);
    Py_VISIT(c->waiters);
    return 0;
}

static int c_clear(npy_completion_t *c)
{
    Py_CLEAR(c->keep);
    Py_CLEAR(c->callbacks);
    Py_CLEAR(c->result);
    Py_CLEAR(c->waiters);
    return 0;
}

static void c_dealloc(npy_completion_t *c)
{
    PyObject_GC_UnTrack(c);
    /* nxl holds a reference while in flight, so here it has reported (or
     * its agent is gone, which completes everything): the future is ours
     * alone, valid after its agent's destruction too */
    if (c->f) {
        if (c->core->threaded) { /* it takes the agent's lock, which a callback may hold */
            Py_BEGIN_ALLOW_THREADS nxl_future_release(c->f);
            Py_END_ALLOW_THREADS
        } else {
            nxl_future_release(c->f);
        }
    }
    c_clear(c);
    Py_CLEAR(c->error);
    npy_core_decref(c->core);
    PyObject_GC_Del(c);
}

PyObject *npy_completion_outcome(npy_completion_t *c)
{
    if (c->status == NXL_SUCCESS) {
        PyObject *r = c->result ? c->result : Py_None;
        Py_INCREF(r);
        return r;
    }
    return npy_raise(c->status, c->error ? PyUnicode_AsUTF8(c->error) : NULL);
}

static PyObject *c_result(npy_completion_t *c, PyObject *noargs)
{
    (void)noargs;
    if (!c->done) {
        PyErr_SetString(PyExc_RuntimeError, "the operation is still in flight (await it, or wait())");
        return NULL;
    }
    return npy_completion_outcome(c);
}

static PyObject *c_exception(npy_completion_t *c, PyObject *noargs)
{
    (void)noargs;
    if (!c->done) {
        PyErr_SetString(PyExc_RuntimeError, "the operation is still in flight");
        return NULL;
    }
    if (c->status == NXL_SUCCESS)
        Py_RETURN_NONE;
    return npy_make_error(c->status, c->error ? PyUnicode_AsUTF8(c->error) : NULL);
}

static PyObject *c_done(npy_completion_t *c, PyObject *noargs)
{
    (void)noargs;
    return PyBool_FromLong(c->done);
}

static PyObject *c_add_done_callback(npy_completion_t *c, PyObject *fn)
{
    if (!PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "add_done_callback() takes a callable");
        return NULL;
    }
    if (c->done) {
        PyObject *r = PyObject_CallOneArg(fn, (PyObject *)c);
        if (!r)
            return NULL;
        Py_DECREF(r);
        Py_RETURN_NONE;
    }
    if (!c->callbacks && !(c->callbacks = PyList_New(0)))
        return NULL;
    if (PyList_Append(c->callbacks, fn) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* asks nxl to cancel; the operation completes with ERR_CANCELED (or what it
 * had already become) on a later turn */
PyObject *npy_completion_cancel_native(npy_completion_t *c)
{
    if (!c->done && c->f && c->core->a) {
        if (c->core->threaded) {
            Py_BEGIN_ALLOW_THREADS nxl_future_cancel(c->f);
            Py_END_ALLOW_THREADS
        } else {
            nxl_future_cancel(c->f);
        }
        npy_rearm(c->core);
    }
    Py_RETURN_NONE;
}

static PyObject *c_cancel_native(npy_completion_t *c, PyObject *noargs)
{
    (void)noargs;
    return npy_completion_cancel_native(c);
}

static PyObject *c_cancel(npy_completion_t *c, PyObject *noargs)
{
    PyObject *r = npy_completion_cancel_native(c);
    if (!r)
        return NULL;
    Py_DECREF(r);
    if (!npy_settled_hook) {
        PyErr_SetString(PyExc_RuntimeError, "import nxl, not nxl._nxl");
        return NULL;
    }
    return PyObject_CallOneArg(npy_settled_hook, (PyObject *)c);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Drives the agent (or, threaded, sleeps) until done or @p timeout seconds
 * (negative: none) passed, in slices so that Ctrl-C is seen.
 * @return 1 done, 0 timeout, -1 exception set. */
int npy_completion_wait(npy_completion_t *c, double timeout)
{
    if (c->done)
        return 1;
    npy_core_t *core = c->core;
    if (!core->a || !c->f) {
        /* closed agents completed everything: cannot happen, but say so */
        npy_raise_closed();
        return -1;
    }
    if (core->in_run && !core->threaded) {
        npy_raise(NXL_ERR_NOT_ALLOWED,
                  "wait() from inside an nxl callback: the agent's loop cannot be re-entered");
        return -1;
    }
    PyObject *agent = core->agent; /* not collected under our feet by a callback */
    Py_XINCREF(agent);
    Py_INCREF(c);
    double end = timeout >= 0 ? now_s() + timeout : 0;
    int rc = 0;
    for (;;) {
        int ms = 200;
        if (timeout >= 0) {
            double left = end - now_s();
            if (left <= 0)
                left = 0;
            if (left * 1000 < ms)
                ms = (int)(left * 1000 + 0.999);
        }
        nxl_status_t st;
        core->in_run++;
        Py_BEGIN_ALLOW_THREADS st = nxl_future_wait(c->f, ms);
        Py_END_ALLOW_THREADS
        core->in_run--;
        if (c->done) {
            rc = 1;
            break;
        }
        if (st != NXL_IN_PROG && !c->done) {
            /* NOT_ALLOWED from a callback, or settled without our callback */
            npy_raise_agent(core, st);
            rc = -1;
            break;
        }
        if (PyErr_CheckSignals() < 0) {
            rc = -1;
            break;
        }
        if (timeout >= 0 && now_s() >= end)
            break;
        if (!core->a) {
            npy_raise_closed();
            rc = -1;
            break;
        }
    }
    npy_rearm(core);
    Py_DECREF(c);
    Py_XDECREF(agent);
    return rc;
}

static PyObject *c_wait(npy_completion_t *c, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"timeout", NULL};
    PyObject *to = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:wait", kwl, &to))
        return NULL;
    double t = -1;
    if (to != Py_None && (t = PyFloat_AsDouble(to)) == -1 && PyErr_Occurred())
        return NULL;
    int rc = npy_completion_wait(c, t < 0 && to != Py_None ? 0 : t);
    if (rc < 0)
        return NULL;
    if (rc == 0) {
        PyErr_SetString(PyExc_TimeoutError, "the nxl operation is still in flight");
        return NULL;
    }
    return npy_completion_outcome(c);
}

static PyObject *c_await(npy_completion_t *c)
{
    if (!c->core->threaded)
        return npy_waiter_new(c);
    if (!npy_await_hook) {
        PyErr_SetString(PyExc_RuntimeError, "import nxl, not nxl._nxl, to await");
        return NULL;
    }
    return PyObject_CallOneArg(npy_await_hook, (PyObject *)c);
}

static PyObject *c_get_status(npy_completion_t *c, void *x)
{
    (void)x;
    return PyLong_FromLong(c->status);
}

static PyObject *c_get_error(npy_completion_t *c, void *x)
{
    (void)x;
    if (c->error) {
        Py_INCREF(c->error);
        return c->error;
    }
    return PyUnicode_FromString("");
}

static PyObject *c_get_agent(npy_completion_t *c, void *x)
{
    (void)x;
    PyObject *a = c->core->agent ? c->core->agent : Py_None;
    Py_INCREF(a);
    return a;
}

static PyObject *c_repr(npy_completion_t *c)
{
    return PyUnicode_FromFormat("<nxl.Completion %s>",
                                c->done ? nxl_status_name(c->status) : "in flight");
}

static PyMethodDef c_methods[] = {
    {"result", (PyCFunction)c_result, METH_NOARGS,
     "The result of a completed operation (None, or a peer name), or raises its nxl.Error."},
    {"exception", (PyCFunction)c_exception, METH_NOARGS,
     "The nxl.Error of a failed operation, None on success."},
    {"done", (PyCFunction)c_done, METH_NOARGS, "True once nxl reported the operation's end."},
    {"add_done_callback", (PyCFunction)c_add_done_callback, METH_O,
     "fn(completion) once done, on the agent's loop (at once when done already)."},
    {"_cancel", (PyCFunction)c_cancel_native, METH_NOARGS, "nxl_future_cancel()."},
    {"cancel", (PyCFunction)c_cancel, METH_NOARGS,
     "Asks nxl to cancel; returns an awaitable (also .wait()-able) of the final status, "
     "complete once nxl reported: the buffers are safe to reuse then."},
    {"wait", (PyCFunction)(void (*)(void))c_wait, METH_VARARGS | METH_KEYWORDS,
     "wait(timeout=None): drives the agent until done (GIL released while blocked); the "
     "result, or raises its nxl.Error; TimeoutError when the timeout passed."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef c_getset[] = {
    {"status", (getter)c_get_status, NULL, "nxl's status: 1 (IN_PROG) until done", NULL},
    {"error", (getter)c_get_error, NULL, "nxl's sentence of a failure, else \"\"", NULL},
    {"agent", (getter)c_get_agent, NULL, "the Agent, None once collected", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyAsyncMethods c_async = {
    .am_await = (unaryfunc)c_await,
};

PyTypeObject npy_completion_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "nxl.Completion",
    .tp_basicsize = sizeof(npy_completion_t),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "An nxl operation in flight: awaitable, or wait() for it.",
    .tp_dealloc = (destructor)c_dealloc,
    .tp_traverse = (traverseproc)c_traverse,
    .tp_clear = (inquiry)c_clear,
    .tp_methods = c_methods,
    .tp_getset = c_getset,
    .tp_as_async = &c_async,
    .tp_repr = (reprfunc)c_repr,
};
