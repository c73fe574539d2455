/* SPDX-License-Identifier: BSD-3-Clause */
/* nxl._nxl.Agent and the module. The agent runs on NXL_LOOP_FD unless
 * threaded: the Python layer (nxl/__init__.py) attaches it to a running
 * asyncio loop, or wait()/run() drive it with the GIL released. */
#include "objects.h"

#include <string.h>

/* ------------------------------------------------------------------- core */

void npy_core_decref(npy_core_t *c)
{
    if (--c->refs > 0)
        return;
    Py_CLEAR(c->notif_cb);
    Py_CLEAR(c->peer_cb);
    for (size_t i = 0; i < sizeof(c->strs) / sizeof(c->strs[0]); i++)
        PyMem_Free(c->strs[i]);
    PyMem_Free(c);
}

static int agent_open(npy_agent_t *self)
{
    if (!self->core || !self->core->a) {
        npy_raise_closed();
        return 0;
    }
    return 1;
}

#define OPEN_OR_NULL(self)                                                                         \
    do {                                                                                           \
        if (!agent_open(self))                                                                     \
            return NULL;                                                                           \
    } while (0)

/* ------------------------------------------------------------ init, close */

static char *keep_str(npy_core_t *core, int slot, PyObject *o, int *err)
{
    if (!o || o == Py_None)
        return NULL;
    const char *s = PyUnicode_AsUTF8(o);
    if (!s) {
        *err = 1;
        return NULL;
    }
    size_t l = strlen(s) + 1;
    char *d = PyMem_Malloc(l);
    if (!d) {
        PyErr_NoMemory();
        *err = 1;
        return NULL;
    }
    memcpy(d, s, l);
    core->strs[slot] = d;
    return d;
}

static int agent_init(npy_agent_t *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"name",          "listen",       "port",           "threads",
                          "log_level",     "io_timeout_ms", "busy_poll_us",  "etcd_endpoints",
                          "etcd_prefix",   "auth_secret",   "max_queued_notifs", "auto_register",
                          "auto_register_limit", NULL};
    PyObject *name, *listen = Py_None, *etcd = Py_None, *prefix = Py_None, *secret = Py_None;
    int port = 0, threads = 0, log_level = -1;
    unsigned io_timeout = 0, busy = 0, maxq = 0;
    int autoreg = 0;
    unsigned long long autoreg_limit = 0;
    if (self->core) {
        PyErr_SetString(PyExc_RuntimeError, "Agent.__init__ called twice");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "U|$OipiIIOOOIpK:Agent", kwl, &name, &listen,
                                     &port, &threads, &log_level, &io_timeout, &busy, &etcd,
                                     &prefix, &secret, &maxq, &autoreg, &autoreg_limit))
        return -1;
    if (port < 0 || port > 65535) {
        PyErr_SetString(PyExc_ValueError, "port: 0 .. 65535");
        return -1;
    }
    npy_core_t *core = PyMem_Calloc(1, sizeof(*core));
    if (!core) {
        PyErr_NoMemory();
        return -1;
    }
    core->refs = 1;
    core->threaded = threads;
    self->core = core;
    Py_INCREF(name);
    self->name = name;

    int err = 0;
    nxl_agent_config_t cfg;
    nxl_agent_config_init(&cfg);
    cfg.name = keep_str(core, 0, name, &err);
    cfg.listen_addr = keep_str(core, 1, listen, &err);
    cfg.listen_port = (uint16_t)port;
    cfg.log_level = log_level;
    cfg.io_timeout_ms = io_timeout;
    cfg.busy_poll_us = busy;
    cfg.etcd_endpoints = keep_str(core, 2, etcd, &err);
    cfg.etcd_prefix = keep_str(core, 3, prefix, &err);
    cfg.auth_secret = keep_str(core, 4, secret, &err);
    cfg.max_queued_notifs = maxq;
    if (autoreg)
        cfg.auto_register = 1;
    cfg.auto_register_limit = (size_t)autoreg_limit;
    if (err)
        return -1;
    if (threads)
        cfg.threaded = 1;
    else
        cfg.loop = NXL_LOOP_FD;
    nxl_status_t st;
    nxl_agent_t *a = NULL;
    Py_BEGIN_ALLOW_THREADS st = nxl_agent_create(&cfg, &a);
    Py_END_ALLOW_THREADS
    if (st != NXL_SUCCESS) {
        npy_raise(st, nxl_agent_last_error(NULL));
        return -1;
    }
    core->a = a;
    core->agent = (PyObject *)self;
    return 0;
}

static void agent_destroy(npy_core_t *core)
{
    nxl_agent_t *a = core->a;
    if (!a)
        return;
    /* objects see the agent closed from now on, also in the callbacks
     * that the destruction runs (pending operations: ERR_CANCELED) */
    core->a = NULL;
    core->attached = 0;
    core->in_run++;
    Py_BEGIN_ALLOW_THREADS nxl_agent_destroy(a);
    Py_END_ALLOW_THREADS
    core->in_run--;
    npy_core_detach(core);
    Py_CLEAR(core->notif_cb);
    Py_CLEAR(core->peer_cb);
}

static PyObject *agent_close(npy_agent_t *self, PyObject *noargs)
{
    (void)noargs;
    if (!self->core || !self->core->a)
        Py_RETURN_NONE;
    if (self->core->in_run && !self->core->threaded)
        return npy_raise(NXL_ERR_NOT_ALLOWED,
                         "close() from inside one of the agent's callbacks: close it after the "
                         "callback returned (loop.call_soon(agent.close))");
    agent_destroy(self->core);
    Py_RETURN_NONE;
}

static void agent_dealloc(npy_agent_t *self)
{
    PyObject_GC_UnTrack(self);
    if (self->core) {
        /* a callback cannot collect us while we run: wait()/run()/drive
         * hold a reference */
        agent_destroy(self->core);
        self->core->agent = NULL;
        npy_core_decref(self->core);
    }
    Py_CLEAR(self->name);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int agent_traverse(npy_agent_t *self, visitproc visit, void *arg)
{
    if (self->core) {
        Py_VISIT(self->core->notif_cb);
        Py_VISIT(self->core->peer_cb);
        /* the asyncio loop attached (waiter.c): a loop that refers back to
         * the agent is a cycle the collector must see */
        Py_VISIT(self->core->loop);
        Py_VISIT(self->core->timer);
        Py_VISIT(self->core->wref);
    }
    return 0;
}

static int agent_clear(npy_agent_t *self)
{
    if (self->core) {
        Py_CLEAR(self->core->notif_cb);
        Py_CLEAR(self->core->peer_cb);
        npy_core_detach(self->core); /* the loop, its timer, the weak reference */
    }
    return 0;
}

/* --------------------------------------------------------------- backends */

static PyObject *agent_backend(npy_agent_t *self, PyObject *args)
{
    const char *name;
    PyObject *params = NULL;
    if (!PyArg_ParseTuple(args, "s|O!:_backend", &name, &PyDict_Type, &params))
        return NULL;
    OPEN_OR_NULL(self);
    Py_ssize_t n = params ? PyDict_Size(params) : 0;
    nxl_param_t *p = PyMem_Calloc((size_t)n + 1, sizeof(*p));
    PyObject *strs = PyList_New(0);
    if (!p || !strs) {
        PyMem_Free(p);
        Py_XDECREF(strs);
        return PyErr_NoMemory();
    }
    Py_ssize_t pos = 0, i = 0;
    PyObject *k, *v;
    while (params && PyDict_Next(params, &pos, &k, &v)) {
        PyObject *ks = PyObject_Str(k), *vs;
        if (v == Py_True)
            vs = PyUnicode_FromString("1");
        else if (v == Py_False)
            vs = PyUnicode_FromString("0");
        else
            vs = PyObject_Str(v);
        if (!ks || !vs || PyList_Append(strs, ks) < 0 || PyList_Append(strs, vs) < 0 ||
            !(p[i].key = PyUnicode_AsUTF8(ks)) || !(p[i].value = PyUnicode_AsUTF8(vs))) {
            Py_XDECREF(ks);
            Py_XDECREF(vs);
            PyMem_Free(p);
            Py_DECREF(strs);
            return NULL;
        }
        Py_DECREF(ks);
        Py_DECREF(vs);
        i++;
    }
    nxl_backend_t *b = NULL;
    nxl_status_t st;
    Py_BEGIN_ALLOW_THREADS st = nxl_backend_create(self->core->a, name, p, (size_t)n, &b);
    Py_END_ALLOW_THREADS
    PyMem_Free(p);
    Py_DECREF(strs);
    if (st != NXL_SUCCESS)
        return npy_raise_agent(self->core, st);
    npy_backend_t *o = PyObject_New(npy_backend_t, &npy_backend_type);
    if (!o)
        return NULL;
    o->core = npy_core_incref(self->core);
    o->b = b;
    o->name = PyUnicode_FromString(nxl_backend_name(b));
    npy_rearm(self->core);
    return (PyObject *)o;
}

static int get_backend(npy_agent_t *self, PyObject *o, nxl_backend_t **b)
{
    *b = NULL;
    if (!o || o == Py_None)
        return 0;
    if (PyObject_TypeCheck(o, &npy_backend_type)) {
        npy_backend_t *bo = (npy_backend_t *)o;
        if (bo->core != self->core) {
            npy_raise(NXL_ERR_INVALID_PARAM, "a Backend of another agent");
            return -1;
        }
        *b = bo->b;
        return 0;
    }
    if (PyUnicode_Check(o)) {
        const char *n = PyUnicode_AsUTF8(o);
        if (!n)
            return -1;
        if (!(*b = nxl_backend_get(self->core->a, n))) {
            char msg[256];
            snprintf(msg, sizeof(msg), "the agent has no backend %.60s: create it with "
                                       "agent.backend(\"%.60s\")",
                     n, n);
            npy_raise(NXL_ERR_NOT_FOUND, msg);
            return -1;
        }
        return 0;
    }
    PyErr_SetString(PyExc_TypeError, "backend: a Backend, a transport name, or None");
    return -1;
}

/* ------------------------------------------------------------ registration */

static npy_region_t *region_new(npy_agent_t *self, PyObject *obj)
{
    npy_region_t *r = PyObject_GC_New(npy_region_t, &npy_region_type);
    if (!r)
        return NULL;
    r->core = npy_core_incref(self->core);
    Py_XINCREF(obj);
    r->obj = obj;
    r->meta = NULL;
    memset(&r->view, 0, sizeof(r->view));
    r->has_view = 0;
    r->registered = 0;
    r->kind = NXL_DRAM;
    memset(&r->d, 0, sizeof(r->d));
    r->b = NULL;
    r->exports = 0;
    PyObject_GC_Track(r);
    return r;
}

static PyObject *region_register(npy_agent_t *self, npy_region_t *r)
{
    nxl_status_t st;
    NPY_CALL(self->core, st, nxl_mem_register(self->core->a, r->kind, &r->d, 1, r->b));
    if (st != NXL_SUCCESS) {
        npy_raise_agent(self->core, st);
        Py_DECREF(r);
        return NULL;
    }
    r->registered = 1;
    return (PyObject *)r;
}

static PyObject *agent_register(npy_agent_t *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"obj", "kind", "dev", "backend", NULL};
    PyObject *obj, *kindo = Py_None, *bo = Py_None;
    unsigned long long dev = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|$OKO:register", kwl, &obj, &kindo, &dev, &bo))
        return NULL;
    OPEN_OR_NULL(self);
    int kind = NXL_DRAM;
    if (kindo != Py_None && ((kind = (int)PyLong_AsLong(kindo)) == -1 && PyErr_Occurred()))
        return NULL;
    nxl_backend_t *b;
    if (get_backend(self, bo, &b) < 0)
        return NULL;
    npy_region_t *r = region_new(self, obj);
    if (!r)
        return NULL;
    /* writable first (a READ target), else read-only (bytes: a WRITE source) */
    if (PyObject_GetBuffer(obj, &r->view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        if (PyObject_GetBuffer(obj, &r->view, PyBUF_C_CONTIGUOUS) < 0) {
            Py_DECREF(r);
            return NULL;
        }
    }
    r->has_view = 1;
    if (r->view.len == 0) {
        Py_DECREF(r);
        return npy_raise(NXL_ERR_INVALID_PARAM, "an empty buffer cannot be registered");
    }
    r->kind = (nxl_mem_t)kind;
    r->d.addr = (uintptr_t)r->view.buf;
    r->d.len = (size_t)r->view.len;
    r->d.dev_id = dev;
    r->b = b;
    return region_register(self, r);
}

/* a registration of anything else: FILE, OBJ, device memory by address
 * (the Python layer builds these: register_file, register_object, torch) */
static PyObject *agent_register_desc(npy_agent_t *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"kind", "addr", "length", "dev", "meta", "obj", "backend", NULL};
    int kind;
    unsigned long long addr, len, dev = 0;
    PyObject *meta = Py_None, *obj = Py_None, *bo = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "iKK|KOOO:_register_desc", kwl, &kind, &addr, &len,
                                     &dev, &meta, &obj, &bo))
        return NULL;
    OPEN_OR_NULL(self);
    nxl_backend_t *b;
    if (get_backend(self, bo, &b) < 0)
        return NULL;
    npy_region_t *r = region_new(self, obj);
    if (!r)
        return NULL;
    if (meta != Py_None) {
        if (PyUnicode_Check(meta))
            r->meta = PyUnicode_AsUTF8String(meta);
        else if (PyBytes_Check(meta))
            Py_INCREF(r->meta = meta);
        else
            PyErr_SetString(PyExc_TypeError, "meta: bytes or str");
        if (!r->meta) {
            Py_DECREF(r);
            return NULL;
        }
        r->d.meta = PyBytes_AS_STRING(r->meta);
        r->d.meta_len = (size_t)PyBytes_GET_SIZE(r->meta);
    }
    r->kind = (nxl_mem_t)kind;
    r->d.addr = (uintptr_t)addr;
    r->d.len = (size_t)len;
    r->d.dev_id = dev;
    r->b = b;
    return region_register(self, r);
}

/* --------------------------------------------------------------- metadata */

static PyObject *agent_metadata(npy_agent_t *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"partial", "kind", NULL};
    PyObject *partial = Py_None;
    int kind = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|Oi:metadata", kwl, &partial, &kind))
        return NULL;
    OPEN_OR_NULL(self);
    void *blob = NULL;
    size_t len = 0;
    nxl_status_t st;
    if (partial == Py_None) {
        NPY_CALL(self->core, st, nxl_md_local(self->core->a, &blob, &len));
    } else {
        npy_dlist_t dl;
        if (npy_dlist_parse(self->core, partial, &dl, kind) < 0) {
            npy_dlist_free(&dl);
            return NULL;
        }
        NPY_CALL(self->core, st,
                 nxl_md_local_partial(self->core->a, dl.kind < 0 ? NXL_DRAM : (nxl_mem_t)dl.kind,
                                      dl.d, dl.n, &blob, &len));
        npy_dlist_free(&dl);
    }
    if (st != NXL_SUCCESS)
        return npy_raise_agent(self->core, st);
    PyObject *r = PyBytes_FromStringAndSize(blob, (Py_ssize_t)len);
    nxl_free(blob);
    return r;
}

static PyObject *agent_load_metadata(npy_agent_t *self, PyObject *arg)
{
    OPEN_OR_NULL(self);
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0)
        return NULL;
    char name[256] = "";
    nxl_status_t st;
    NPY_CALL(self->core, st, nxl_md_load(self->core->a, b.buf, (size_t)b.len, name, sizeof(name)));
    PyBuffer_Release(&b);
    if (st != NXL_SUCCESS)
        return npy_raise_agent(self->core, st);
    npy_rearm(self->core);
    return PyUnicode_FromString(name);
}

static PyObject *agent_invalidate(npy_agent_t *self, PyObject *args)
{
    const char *peer;
    if (!PyArg_ParseTuple(args, "s:invalidate", &peer))
        return NULL;
    OPEN_OR_NULL(self);
    nxl_status_t st;
    NPY_CALL(self->core, st, nxl_md_invalidate(self->core->a, peer));
    if (st != NXL_SUCCESS)
        return npy_raise_agent(self->core, st);
    npy_rearm(self->core);
    Py_RETURN_NONE;
}

static PyObject *agent_has_peer(npy_agent_t *self, PyObject *args)
{
    const char *peer;
    if (!PyArg_ParseTuple(args, "s:has_peer", &peer))
        return NULL;
    OPEN_OR_NULL(self);
    nxl_status_t st;
    NPY_CALL(self->core, st, nxl_md_check(self->core->a, peer));
    return PyBool_FromLong(st == NXL_SUCCESS);
}

static PyObject *agent_send_metadata(npy_agent_t *self, PyObject *args)
{
    const char *host;
    unsigned short port;
    if (!PyArg_ParseTuple(args, "sH:send_metadata", &host, &port))
        return NULL;
    OPEN_OR_NULL(self);
    npy_completion_t *c = npy_completion_new(self->core, NULL);
    if (!c)
        return NULL;
    nxl_status_t st;
    NPY_START(self->core, c, st, nxl_md_send(self->core->a, host, port, npy_done_cb, c, &c->f));
    return (PyObject *)c;
}

static PyObject *agent_send_invalidate(npy_agent_t *self, PyObject *args)
{
    const char *host;
    unsigned short port;
    if (!PyArg_ParseTuple(args, "sH:send_invalidate", &host, &port))
        return NULL;
    OPEN_OR_NULL(self);
    npy_completion_t *c = npy_completion_new(self->core, NULL);
    if (!c)
        return NULL;
    nxl_status_t st;
    NPY_START(self->core, c, st,
              nxl_md_send_invalidate(self->core->a, host, port, npy_done_cb, c, &c->f));
    return (PyObject *)c;
}

static PyObject *agent_fetch_metadata(npy_agent_t *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"host", "port", "peer", NULL};
    const char *host, *peer = NULL;
    unsigned short port;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sH|z:fetch_metadata", kwl, &host, &port, &peer))
        return NULL;
    OPEN_OR_NULL(self);
    npy_completion_t *c = npy_completion_new(self->core, NULL);
    if (!c)
        return NULL;
    c->want_peer = 1;
    nxl_status_t st;
    NPY_START(self->core, c, st,
              nxl_md_fetch(self->core->a, peer, host, port, npy_done_cb, c, &c->f));
    return (PyObject *)c;
}

static PyObject *agent_publish(npy_agent_t *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"label", "descs", "kind", NULL};
    const char *label = NULL;
    PyObject *descs = Py_None;
    int kind = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|zOi:publish", kwl, &label, &descs, &kind))
        return NULL;
    OPEN_OR_NULL(self);
    npy_completion_t *c = npy_completion_new(self->core, NULL);
    if (!c)
        return NULL;
    nxl_status_t st;
    if (!label) {
        NPY_START(self->core, c, st, nxl_md_publish(self->core->a, npy_done_cb, c, &c->f));
        return (PyObject *)c;
    }
    npy_dlist_t dl;
    if (descs == Py_None) {
        dl.d = dl.stack;
        dl.n = 0;
        dl.kind = kind;
        dl.keep = NULL;
    } else if (npy_dlist_parse(self->core, descs, &dl, kind) < 0) {
        npy_dlist_free(&dl);
        Py_DECREF(c);
        return NULL;
    }
    NPY_START(self->core, c, st,
              nxl_md_publish_partial(self->core->a, label,
                                     dl.kind < 0 ? NXL_DRAM : (nxl_mem_t)dl.kind, dl.d, dl.n,
                                     npy_done_cb, c, &c->f));
    npy_dlist_free(&dl);
    return (PyObject *)c;
}

static PyObject *agent_unpublish(npy_agent_t *self, PyObject *noargs)
{
    (void)noargs;
    OPEN_OR_NULL(self);
    npy_completion_t *c = npy_completion_new(self->core, NULL);
    if (!c)
        return NULL;
    nxl_status_t st;
    NPY_START(self->core, c, st, nxl_md_unpublish(self->core->a, npy_done_cb, c, &c->f));
    return (PyObject *)c;
}

static PyObject *agent_fetch_etcd(npy_agent_t *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"peer", "label", "timeout", NULL};
    const char *peer, *label = NULL;
    double timeout = 10.0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|zd:fetch_etcd", kwl, &peer, &label, &timeout))
        return NULL;
    OPEN_OR_NULL(self);
    npy_completion_t *c = npy_completion_new(self->core, NULL);
    if (!c)
        return NULL;
    c->want_peer = 1;
    nxl_status_t st;
    NPY_START(self->core, c, st,
              nxl_md_fetch_etcd(self->core->a, peer, label, (int)(timeout * 1000), npy_done_cb, c,
                                &c->f));
    return (PyObject *)c;
}

/* -------------------------------------------------------------- transfers */

static PyObject *agent_prep(npy_agent_t *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"descs", "peer", "kind", NULL};
    PyObject *descs;
    const char *peer = NULL;
    int kind = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|z$i:prep", kwl, &descs, &peer, &kind))
        return NULL;
    OPEN_OR_NULL(self);
    npy_dlist_t dl;
    if (npy_dlist_parse(self->core, descs, &dl, kind) < 0) {
        npy_dlist_free(&dl);
        return NULL;
    }
    nxl_prepped_t *p = NULL;
    nxl_status_t st;
    NPY_CALL(self->core, st,
             nxl_prep(self->core->a, peer, dl.kind < 0 ? NXL_DRAM : (nxl_mem_t)dl.kind, dl.d, dl.n,
                      &p));
    if (st != NXL_SUCCESS) {
        npy_dlist_free(&dl);
        return npy_raise_agent(self->core, st);
    }
    npy_prepped_t *o = PyObject_GC_New(npy_prepped_t, &npy_prepped_type);
    if (!o) {
        nxl_prepped_release(p);
        npy_dlist_free(&dl);
        return NULL;
    }
    o->core = npy_core_incref(self->core);
    o->p = p;
    o->n = dl.n;
    o->keep = dl.keep;
    dl.keep = NULL;
    npy_dlist_free(&dl);
    PyObject_GC_Track(o);
    return (PyObject *)o;
}

static npy_xfer_t *xfer_wrap(npy_agent_t *self, nxl_xfer_t *x, PyObject *keep)
{
    npy_xfer_t *o = PyObject_GC_New(npy_xfer_t, &npy_xfer_type);
    if (!o) {
        nxl_xfer_release(x);
        return NULL;
    }
    o->core = npy_core_incref(self->core);
    o->x = x;
    Py_XINCREF(keep);
    o->keep = keep;
    o->last = NULL;
    PyObject_GC_Track(o);
    return o;
}

static int get_notif(PyObject *msg, Py_buffer *b)
{
    memset(b, 0, sizeof(*b));
    if (!msg || msg == Py_None)
        return 0;
    if (PyUnicode_Check(msg)) {
        Py_ssize_t l;
        const char *s = PyUnicode_AsUTF8AndSize(msg, &l);
        if (!s)
            return -1;
        b->buf = (void *)s;
        b->len = l;
        return 0;
    }
    return PyObject_GetBuffer(msg, b, PyBUF_SIMPLE);
}

static int get_idx(PyObject *o, size_t **out, size_t *n)
{
    *out = NULL;
    if (!o || o == Py_None)
        return 0;
    PyObject *seq = PySequence_Fast(o, "an index list: a sequence of ints");
    if (!seq)
        return -1;
    Py_ssize_t k = PySequence_Fast_GET_SIZE(seq);
    size_t *v = PyMem_Malloc((size_t)(k ? k : 1) * sizeof(size_t));
    if (!v) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < k; i++) {
        v[i] = PyLong_AsSize_t(PySequence_Fast_GET_ITEM(seq, i));
        if (v[i] == (size_t)-1 && PyErr_Occurred()) {
            PyMem_Free(v);
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    *out = v;
    *n = (size_t)k;
    return 0;
}

/* _make_prepped(op, local, lidx, remote, ridx, notif=None, backend=None) */
static PyObject *agent_make_prepped(npy_agent_t *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"op", "local", "lidx", "remote", "ridx", "notif", "backend", NULL};
    int op;
    npy_prepped_t *lp, *rp;
    PyObject *lidx, *ridx, *notif = Py_None, *bo = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "iO!OO!O|OO:_make_prepped", kwl, &op,
                                     &npy_prepped_type, &lp, &lidx, &npy_prepped_type, &rp, &ridx,
                                     &notif, &bo))
        return NULL;
    OPEN_OR_NULL(self);
    if (lp->core != self->core || rp->core != self->core || !lp->p || !rp->p)
        return npy_raise(NXL_ERR_INVALID_PARAM,
                         "prepared lists of this agent, not released, are needed");
    nxl_backend_t *b;
    if (get_backend(self, bo, &b) < 0)
        return NULL;
    size_t *li = NULL, *ri = NULL, nl = 0, nr = 0;
    Py_buffer nb;
    PyObject *keep = NULL, *res = NULL;
    if (get_idx(lidx, &li, &nl) < 0 || get_idx(ridx, &ri, &nr) < 0)
        goto out;
    size_t n = li ? nl : ri ? nr : lp->n;
    if ((li && ri && nl != nr) || (!li && ri && nr != lp->n) || (li && !ri && nl != rp->n) ||
        (!li && !ri && lp->n != rp->n)) {
        npy_raise(NXL_ERR_INVALID_PARAM, "the local and remote index lists differ in length");
        goto out;
    }
    if (get_notif(notif, &nb) < 0)
        goto out;
    nxl_xfer_opts_t o;
    nxl_xfer_opts_init(&o);
    o.notif = nb.buf;
    o.notif_len = (size_t)nb.len;
    o.backend = b;
    nxl_xfer_t *x = NULL;
    nxl_status_t st;
    NPY_CALL(self->core, st,
             nxl_xfer_make(self->core->a, (nxl_op_t)op, lp->p, li, rp->p, ri, n, &o, &x));
    if (nb.obj)
        PyBuffer_Release(&nb);
    if (st != NXL_SUCCESS) {
        npy_raise_agent(self->core, st);
        goto out;
    }
    if (!(keep = PyTuple_Pack(2, (PyObject *)lp, (PyObject *)rp))) {
        nxl_xfer_release(x);
        goto out;
    }
    res = (PyObject *)xfer_wrap(self, x, keep);
out:
    Py_XDECREF(keep);
    PyMem_Free(li);
    PyMem_Free(ri);
    return res;
}

/* a one-call transfer: nxl_xfer_create() from two descriptor lists */
static npy_xfer_t *xfer_create(npy_agent_t *self, int op, PyObject *args, PyObject *kw,
                               const char *fname)
{
    static char *kwl[] = {"local", "remote", "peer", "notif", "kind", "remote_kind", "backend",
                          NULL};
    PyObject *local, *remote, *notif = Py_None, *bo = Py_None, *ko = Py_None, *rko = Py_None;
    const char *peer;
    int kind = -1, rkind = -1;
    char fmt[32];
    snprintf(fmt, sizeof(fmt), "OOs|$OOOO:%s", fname);
    if (!PyArg_ParseTupleAndKeywords(args, kw, fmt, kwl, &local, &remote, &peer, &notif, &ko,
                                     &rko, &bo))
        return NULL;
    if ((ko != Py_None && (kind = (int)PyLong_AsLong(ko)) == -1 && PyErr_Occurred()) ||
        (rko != Py_None && (rkind = (int)PyLong_AsLong(rko)) == -1 && PyErr_Occurred()))
        return NULL;
    if (!agent_open(self))
        return NULL;
    nxl_backend_t *b;
    if (get_backend(self, bo, &b) < 0)
        return NULL;
    npy_dlist_t ld, rd;
    npy_xfer_t *res = NULL;
    Py_buffer nb = {0};
    rd.keep = NULL;
    rd.d = rd.stack;
    if (npy_dlist_parse(self->core, local, &ld, kind) < 0)
        goto out;
    if (npy_dlist_parse(self->core, remote, &rd, rkind) < 0)
        goto out;
    if (ld.kind < 0)
        ld.kind = NXL_DRAM;
    if (rd.kind < 0)
        rd.kind = ld.kind;
    if (get_notif(notif, &nb) < 0)
        goto out;
    nxl_xfer_opts_t o;
    nxl_xfer_opts_init(&o);
    o.notif = nb.buf;
    o.notif_len = (size_t)nb.len;
    o.backend = b;
    nxl_dlist_t l = {(nxl_mem_t)ld.kind, ld.d, ld.n}, r = {(nxl_mem_t)rd.kind, rd.d, rd.n};
    nxl_xfer_t *x = NULL;
    nxl_status_t st;
    NPY_CALL(self->core, st, nxl_xfer_create(self->core->a, (nxl_op_t)op, &l, &r, peer, &o, &x));
    if (nb.obj)
        PyBuffer_Release(&nb);
    if (st != NXL_SUCCESS) {
        npy_raise_agent(self->core, st);
        goto out;
    }
    /* the Regions of both sides (loopback and FILE/OBJ targets are ours) */
    if (PyList_GET_SIZE(rd.keep)) {
        PyObject *none = _PyList_Extend((PyListObject *)ld.keep, rd.keep);
        if (!none) {
            nxl_xfer_release(x);
            goto out;
        }
        Py_DECREF(none);
    }
    res = xfer_wrap(self, x, PyList_GET_SIZE(ld.keep) ? ld.keep : NULL);
out:
    npy_dlist_free(&ld);
    npy_dlist_free(&rd);
    return res;
}

static PyObject *agent_make_xfer_create(npy_agent_t *self, PyObject *args, PyObject *kw)
{
    int op;
    if (PyTuple_GET_SIZE(args) < 1 || ((op = (int)PyLong_AsLong(PyTuple_GET_ITEM(args, 0))) == -1 &&
                                       PyErr_Occurred())) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "_make_create(op, local, remote, peer, ...)");
        return NULL;
    }
    PyObject *rest = PyTuple_GetSlice(args, 1, PyTuple_GET_SIZE(args));
    if (!rest)
        return NULL;
    PyObject *r = (PyObject *)xfer_create(self, op, rest, kw, "_make_create");
    Py_DECREF(rest);
    return r;
}

static PyObject *post_new(npy_agent_t *self, int op, PyObject *args, PyObject *kw,
                          const char *fname)
{
    npy_xfer_t *x = xfer_create(self, op, args, kw, fname);
    if (!x)
        return NULL;
    PyObject *c = npy_xfer_post(x);
    Py_DECREF(x); /* the Completion keeps it */
    return c;
}

static PyObject *agent_write(npy_agent_t *self, PyObject *args, PyObject *kw)
{
    return post_new(self, NXL_WRITE, args, kw, "write");
}

static PyObject *agent_read(npy_agent_t *self, PyObject *args, PyObject *kw)
{
    return post_new(self, NXL_READ, args, kw, "read");
}

/* ---------------------------------------------------------- notifications */

static PyObject *agent_notify(npy_agent_t *self, PyObject *args)
{
    const char *peer;
    PyObject *msg;
    if (!PyArg_ParseTuple(args, "sO:notify", &peer, &msg))
        return NULL;
    OPEN_OR_NULL(self);
    Py_buffer b;
    if (get_notif(msg, &b) < 0)
        return NULL;
    npy_completion_t *c = npy_completion_new(self->core, NULL);
    if (c) {
        nxl_status_t st;
        NPY_START(self->core, c, st,
                  nxl_notif_send(self->core->a, peer, b.buf, (size_t)b.len, npy_done_cb, c,
                                 &c->f));
    }
    if (b.obj)
        PyBuffer_Release(&b);
    return (PyObject *)c;
}

static void notif_tramp(nxl_agent_t *a, const char *from, const void *msg, size_t len, void *arg)
{
    (void)a;
    npy_core_t *core = (npy_core_t *)arg;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *cb = core->notif_cb;
    if (cb) {
        Py_INCREF(cb);
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        PyObject *r = PyObject_CallFunction(cb, "sy#", from, (const char *)msg, (Py_ssize_t)len);
        if (!r)
            PyErr_WriteUnraisable(cb);
        Py_XDECREF(r);
        PyErr_Restore(et, ev, tb);
        Py_DECREF(cb);
    }
    PyGILState_Release(g);
}

static void peer_tramp(nxl_agent_t *a, const nxl_peer_event_t *ev, void *arg)
{
    (void)a;
    npy_core_t *core = (npy_core_t *)arg;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *cb = core->peer_cb;
    if (cb) {
        Py_INCREF(cb);
        PyObject *et, *evx, *tb;
        PyErr_Fetch(&et, &evx, &tb);
        PyObject *r = PyObject_CallFunction(cb, "siKisn", ev->peer, (int)ev->kind,
                                            (unsigned long long)ev->incarnation, (int)ev->status,
                                            ev->why ? ev->why : "", (Py_ssize_t)ev->nregions);
        if (!r)
            PyErr_WriteUnraisable(cb);
        Py_XDECREF(r);
        PyErr_Restore(et, evx, tb);
        Py_DECREF(cb);
    }
    PyGILState_Release(g);
}

/* _on_peer(cb): cb(peer, kind, incarnation, status, why, nregions) per peer
 * event (nxl_agent_on_peer), None: none */
static PyObject *agent_on_peer(npy_agent_t *self, PyObject *cb)
{
    OPEN_OR_NULL(self);
    if (cb != Py_None && !PyCallable_Check(cb)) {
        PyErr_SetString(PyExc_TypeError, "on_peer(): a callable(event) or None");
        return NULL;
    }
    PyObject *old = self->core->peer_cb;
    self->core->peer_cb = cb == Py_None ? NULL : Py_NewRef(cb);
    nxl_peer_cb f = cb == Py_None ? NULL : peer_tramp;
    if (self->core->threaded) {
        Py_BEGIN_ALLOW_THREADS nxl_agent_on_peer(self->core->a, f, self->core);
        Py_END_ALLOW_THREADS
    } else {
        nxl_agent_on_peer(self->core->a, f, self->core);
    }
    Py_XDECREF(old);
    npy_rearm(self->core);
    Py_RETURN_NONE;
}

static PyObject *agent_on_notification(npy_agent_t *self, PyObject *cb)
{
    OPEN_OR_NULL(self);
    if (cb != Py_None && !PyCallable_Check(cb)) {
        PyErr_SetString(PyExc_TypeError, "on_notification(): a callable(peer, msg) or None");
        return NULL;
    }
    PyObject *old = self->core->notif_cb;
    if (cb == Py_None) {
        self->core->notif_cb = NULL;
        if (self->core->threaded) {
            Py_BEGIN_ALLOW_THREADS nxl_agent_on_notif(self->core->a, NULL, NULL);
            Py_END_ALLOW_THREADS
        } else {
            nxl_agent_on_notif(self->core->a, NULL, NULL);
        }
    } else {
        Py_INCREF(cb);
        self->core->notif_cb = cb;
        if (!old) {
            if (self->core->threaded) {
                Py_BEGIN_ALLOW_THREADS nxl_agent_on_notif(self->core->a, notif_tramp, self->core);
                Py_END_ALLOW_THREADS
            } else {
                nxl_agent_on_notif(self->core->a, notif_tramp, self->core);
            }
        }
    }
    Py_XDECREF(old);
    npy_rearm(self->core);
    Py_RETURN_NONE;
}

static void drain_cb(nxl_agent_t *a, const char *from, const void *msg, size_t len, void *arg)
{
    (void)a;
    PyObject *list = (PyObject *)arg;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *t = Py_BuildValue("(sy#)", from, (const char *)msg, (Py_ssize_t)len);
    if (!t || PyList_Append(list, t) < 0)
        PyErr_Clear(); /* out of memory: lost, as nxl's own bound would */
    Py_XDECREF(t);
    PyGILState_Release(g);
}

static PyObject *agent_drain(npy_agent_t *self, PyObject *noargs)
{
    (void)noargs;
    OPEN_OR_NULL(self);
    PyObject *list = PyList_New(0);
    if (!list)
        return NULL;
    /* the callback runs on this thread (drain does not run the reactor) */
    size_t n;
    NPY_CALL(self->core, n, nxl_notifs_drain(self->core->a, drain_cb, list));
    (void)n;
    return list;
}

/* ------------------------------------------------------------------ stats */

static int put_u64(PyObject *d, const char *k, uint64_t v)
{
    PyObject *o = PyLong_FromUnsignedLongLong(v);
    int rc = o ? PyDict_SetItemString(d, k, o) : -1;
    Py_XDECREF(o);
    return rc;
}

static PyObject *agent_stats(npy_agent_t *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"transport", NULL};
    const char *tr = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|z:stats", kwl, &tr))
        return NULL;
    OPEN_OR_NULL(self);
    nxl_stats_t s;
    memset(&s, 0, sizeof(s));
    s.size = sizeof(s);
    nxl_status_t st;
    NPY_CALL(self->core, st, nxl_agent_stats(self->core->a, tr, &s));
    if (st != NXL_SUCCESS)
        return npy_raise_agent(self->core, st);
    PyObject *d = PyDict_New(), *rb = PyDict_New(), *wb = PyDict_New(),
             *lb = PyList_New(NXL_STATS_BUCKETS);
    if (!d || !rb || !wb || !lb)
        goto fail;
#define U(f)                                                                                       \
    if (put_u64(d, #f, s.f) < 0)                                                                   \
        goto fail;
    U(xfers_posted) U(xfers_succeeded) U(xfers_failed) U(xfers_canceled) U(latency_count)
    U(latency_sum_us) U(notifs_sent) U(notifs_failed) U(notifs_received) U(md_requests)
    U(md_requests_failed) U(md_served) U(md_loaded) U(peers_known) U(peers_lost)
    U(notifs_dropped) U(md_clients_refused) U(md_auth_refused) U(autoreg_registered)
    U(autoreg_reused) U(autoreg_evicted) U(autoreg_invalidated) U(autoreg_bytes)
    U(deliveries_direct)
#undef U
    for (int t = 0; t < NXL_MEM_TYPES; t++)
        if (put_u64(rb, nxl_mem_name((nxl_mem_t)t), s.read_bytes[t]) < 0 ||
            put_u64(wb, nxl_mem_name((nxl_mem_t)t), s.write_bytes[t]) < 0)
            goto fail;
    for (int k = 0; k < NXL_STATS_BUCKETS; k++) {
        PyObject *o = PyLong_FromUnsignedLongLong(s.latency_bucket[k]);
        if (!o)
            goto fail;
        PyList_SET_ITEM(lb, k, o);
    }
    if (PyDict_SetItemString(d, "read_bytes", rb) < 0 ||
        PyDict_SetItemString(d, "write_bytes", wb) < 0 ||
        PyDict_SetItemString(d, "latency_bucket", lb) < 0)
        goto fail;
    Py_DECREF(rb);
    Py_DECREF(wb);
    Py_DECREF(lb);
    return d;
fail:
    Py_XDECREF(d);
    Py_XDECREF(rb);
    Py_XDECREF(wb);
    Py_XDECREF(lb);
    return NULL;
}

/* ---------------------------------------------------------------- driving */

static PyObject *agent_run(npy_agent_t *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"timeout", NULL};
    PyObject *to = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:run", kwl, &to))
        return NULL;
    OPEN_OR_NULL(self);
    int ms = -1;
    if (to != Py_None) {
        double t = PyFloat_AsDouble(to);
        if (t == -1 && PyErr_Occurred())
            return NULL;
        ms = t <= 0 ? 0 : (int)(t * 1000 + 0.999);
    }
    npy_core_t *core = self->core;
    if (core->in_run)
        return npy_raise(NXL_ERR_NOT_ALLOWED,
                         "run() from inside an nxl callback: the loop cannot be re-entered");
    Py_INCREF(self);
    nxl_status_t st;
    core->in_run++;
    if (ms == 0) {
        st = nxl_agent_run_once(core->a, 0);
    } else {
        Py_BEGIN_ALLOW_THREADS st = nxl_agent_run_once(core->a, ms);
        Py_END_ALLOW_THREADS
    }
    core->in_run--;
    PyObject *r = NULL;
    if (st != NXL_SUCCESS)
        npy_raise_agent(core, st);
    else if (!PyErr_Occurred())
        r = Py_NewRef(Py_None);
    if (core->a)
        npy_rearm(core);
    Py_DECREF(self);
    return r;
}

static PyObject *agent_fileno(npy_agent_t *self, PyObject *noargs)
{
    (void)noargs;
    OPEN_OR_NULL(self);
    int fd = nxl_agent_backend_fd(self->core->a);
    if (fd < 0)
        return npy_raise_agent(self->core, NXL_ERR_NOT_SUPPORTED);
    return PyLong_FromLong(fd);
}

static PyObject *agent_backend_timeout(npy_agent_t *self, PyObject *noargs)
{
    (void)noargs;
    if (!self->core || !self->core->a)
        return PyLong_FromLong(-1);
    return PyLong_FromLong(nxl_agent_backend_timeout(self->core->a));
}

/* _attach(who, loop, wref) / _attach(None): marks the agent driven by the
 * Python layer's asyncio adapter (nxl_agent_attach); waiter.c keeps the
 * loop's call_soon and timer armed from then on */
static PyObject *agent_attach(npy_agent_t *self, PyObject *args)
{
    PyObject *who, *loop = NULL, *wref = NULL;
    if (!PyArg_ParseTuple(args, "O|OO:_attach", &who, &loop, &wref))
        return NULL;
    OPEN_OR_NULL(self);
    if (who != Py_None && (!loop || !wref || !PyWeakref_CheckRef(wref))) {
        PyErr_SetString(PyExc_TypeError, "_attach(who, loop, weakref to the agent)");
        return NULL;
    }
    const char *w = NULL;
    if (who != Py_None && !(w = PyUnicode_AsUTF8(who)))
        return NULL;
    nxl_status_t st = nxl_agent_attach(self->core->a, w);
    if (st != NXL_SUCCESS)
        return npy_raise_agent(self->core, st);
    self->core->attached = w != NULL;
    if (!w) {
        npy_core_detach(self->core);
        Py_RETURN_NONE;
    }
    return npy_core_attach(self->core, loop, wref);
}

/* ------------------------------------------------------------- attributes */

static PyObject *agent_get_port(npy_agent_t *self, void *x)
{
    (void)x;
    if (!self->core || !self->core->a)
        return PyLong_FromLong(0);
    uint16_t port;
    NPY_CALL(self->core, port, nxl_agent_listen_port(self->core->a));
    return PyLong_FromLong(port);
}

static PyObject *agent_get_closed(npy_agent_t *self, void *x)
{
    (void)x;
    return PyBool_FromLong(!self->core || !self->core->a);
}

static PyObject *agent_get_threaded(npy_agent_t *self, void *x)
{
    (void)x;
    return PyBool_FromLong(self->core && self->core->threaded);
}

static PyObject *agent_get_in_callback(npy_agent_t *self, void *x)
{
    (void)x;
    return PyBool_FromLong(self->core && self->core->in_run);
}

static PyObject *agent_get_name(npy_agent_t *self, void *x)
{
    (void)x;
    PyObject *n = self->name ? self->name : Py_None;
    Py_INCREF(n);
    return n;
}

static PyObject *agent_last_error(npy_agent_t *self, void *x)
{
    (void)x;
    return PyUnicode_FromString(self->core && self->core->a ? nxl_agent_last_error(self->core->a)
                                                            : "");
}

#define KW (METH_VARARGS | METH_KEYWORDS)
#define F(fn) (PyCFunction)(void (*)(void))(fn)

static PyMethodDef agent_methods[] = {
    {"close", (PyCFunction)agent_close, METH_NOARGS,
     "Destroys the agent: pending operations complete with nxl.Canceled. Idempotent."},
    {"_backend", (PyCFunction)agent_backend, METH_VARARGS, "_backend(name, params: dict)"},
    {"register", F(agent_register), KW,
     "register(obj, *, kind=None, dev=0, backend=None): a Region of a buffer-protocol object."},
    {"_register_desc", F(agent_register_desc), KW,
     "_register_desc(kind, addr, length, dev=0, meta=None, obj=None, backend=None)"},
    {"metadata", F(agent_metadata), KW, "metadata(partial=None): this agent's metadata (bytes)."},
    {"load_metadata", (PyCFunction)agent_load_metadata, METH_O,
     "load_metadata(blob): loads a peer's metadata, returns its name."},
    {"invalidate", (PyCFunction)agent_invalidate, METH_VARARGS, "invalidate(peer): forgets it."},
    {"has_peer", (PyCFunction)agent_has_peer, METH_VARARGS, "has_peer(peer): loaded?"},
    {"send_metadata", (PyCFunction)agent_send_metadata, METH_VARARGS,
     "send_metadata(host, port) -> Completion"},
    {"send_invalidate", (PyCFunction)agent_send_invalidate, METH_VARARGS,
     "send_invalidate(host, port) -> Completion"},
    {"fetch_metadata", F(agent_fetch_metadata), KW,
     "fetch_metadata(host, port, peer=None) -> Completion (result: the peer's name)"},
    {"publish", F(agent_publish), KW, "publish(label=None, descs=None) -> Completion (etcd)"},
    {"unpublish", (PyCFunction)agent_unpublish, METH_NOARGS, "unpublish() -> Completion (etcd)"},
    {"fetch_etcd", F(agent_fetch_etcd), KW,
     "fetch_etcd(peer, label=None, timeout=10.0) -> Completion (result: the peer's name)"},
    {"prep", F(agent_prep), KW, "prep(descs, peer=None, *, kind=None) -> Prepped"},
    {"_make_prepped", F(agent_make_prepped), KW, NULL},
    {"_make_create", F(agent_make_xfer_create), KW, NULL},
    {"write", F(agent_write), KW,
     "write(local, remote, peer, *, notif=None, kind=None, remote_kind=None, backend=None) -> "
     "Completion: a one-call WRITE, posted."},
    {"read", F(agent_read), KW, "read(local, remote, peer, ...) -> Completion: a one-call READ."},
    {"notify", (PyCFunction)agent_notify, METH_VARARGS,
     "notify(peer, msg) -> Completion: a standalone notification."},
    {"_on_peer", (PyCFunction)agent_on_peer, METH_O, NULL},
    {"on_notification", (PyCFunction)agent_on_notification, METH_O,
     "on_notification(cb): cb(peer: str, msg: bytes) for each one; None: queue them."},
    {"_drain", (PyCFunction)agent_drain, METH_NOARGS, NULL},
    {"stats", F(agent_stats), KW, "stats(transport=None) -> dict of counters."},
    {"run", F(agent_run), KW,
     "run(timeout=None): one turn of the agent, waiting at most timeout s (GIL released)."},
    {"fileno", (PyCFunction)agent_fileno, METH_NOARGS, "the NXL_LOOP_FD descriptor"},
    {"backend_timeout", (PyCFunction)agent_backend_timeout, METH_NOARGS,
     "ms until the next timer, 0 now, -1 none"},
    {"_attach", (PyCFunction)agent_attach, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef agent_getset[] = {
    {"name", (getter)agent_get_name, NULL, "the agent's name", NULL},
    {"port", (getter)agent_get_port, NULL, "the metadata listener's port, 0 when none", NULL},
    {"closed", (getter)agent_get_closed, NULL, "close() ran", NULL},
    {"threaded", (getter)agent_get_threaded, NULL, "nxl's threaded mode", NULL},
    {"in_callback", (getter)agent_get_in_callback, NULL, "inside one of its callbacks", NULL},
    {"last_error", (getter)agent_last_error, NULL, "nxl_agent_last_error()", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject npy_agent_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "nxl._nxl.Agent",
    .tp_basicsize = sizeof(npy_agent_t),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The C side of nxl.Agent.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)agent_init,
    .tp_dealloc = (destructor)agent_dealloc,
    .tp_traverse = (traverseproc)agent_traverse,
    .tp_clear = (inquiry)agent_clear,
    .tp_methods = agent_methods,
    .tp_getset = agent_getset,
};

/* ----------------------------------------------------------------- module */

static PyObject *mod_version(PyObject *m, PyObject *noargs)
{
    (void)m;
    (void)noargs;
    return PyUnicode_FromString(nxl_version());
}

static PyObject *mod_plugins(PyObject *m, PyObject *noargs)
{
    (void)m;
    (void)noargs;
    nxl_plugin_info_t info[32];
    size_t n;
    Py_BEGIN_ALLOW_THREADS n = nxl_plugins_available(info, 32);
    Py_END_ALLOW_THREADS
    if (n > 32)
        n = 32;
    PyObject *l = PyList_New(0);
    for (size_t i = 0; l && i < n; i++) {
        PyObject *t = Py_BuildValue("(sisI)", info[i].name, info[i].available, info[i].reason,
                                    (unsigned)info[i].mem_mask);
        if (!t || PyList_Append(l, t) < 0) {
            Py_XDECREF(t);
            Py_CLEAR(l);
            break;
        }
        Py_DECREF(t);
    }
    return l;
}

static PyObject *mod_strerror(PyObject *m, PyObject *arg)
{
    (void)m;
    long st = PyLong_AsLong(arg);
    if (st == -1 && PyErr_Occurred())
        return NULL;
    return Py_BuildValue("(ss)", nxl_status_name((nxl_status_t)st),
                         nxl_strerror((nxl_status_t)st));
}

static PyObject *mod_error_class(PyObject *m, PyObject *arg)
{
    (void)m;
    long st = PyLong_AsLong(arg);
    if (st == -1 && PyErr_Occurred())
        return NULL;
    PyObject *c = npy_error_class((int)st);
    Py_INCREF(c);
    return c;
}

static PyObject *mod_set_hooks(PyObject *m, PyObject *args)
{
    (void)m;
    PyObject *aw, *se, *desc;
    if (!PyArg_ParseTuple(args, "OOO:_set_hooks", &aw, &se, &desc))
        return NULL;
    Py_INCREF(desc);
    Py_XSETREF(npy_desc_type, desc);
    Py_INCREF(aw);
    Py_XSETREF(npy_await_hook, aw);
    Py_INCREF(se);
    Py_XSETREF(npy_settled_hook, se);
    Py_RETURN_NONE;
}

static PyMethodDef mod_methods[] = {
    {"version", mod_version, METH_NOARGS, "libnxl's version string."},
    {"_plugins", mod_plugins, METH_NOARGS, NULL},
    {"_strerror", mod_strerror, METH_O, "(name, sentence) of a status"},
    {"error_class", mod_error_class, METH_O, "the nxl.Error subclass of a status"},
    {"_set_hooks", mod_set_hooks, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moddef = {
    PyModuleDef_HEAD_INIT, "nxl._nxl", "nxl's C extension (use the nxl package).", -1, mod_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__nxl(void)
{
    PyTypeObject *types[] = {&npy_agent_type,   &npy_backend_type, &npy_region_type,
                             &npy_prepped_type, &npy_xfer_type,    &npy_completion_type};
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (PyType_Ready(types[i]) < 0)
            return NULL;
    PyObject *m = PyModule_Create(&moddef);
    if (!m)
        return NULL;
    const char *names[] = {"Agent", "Backend", "Region", "Prepped", "Xfer", "Completion"};
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        Py_INCREF(types[i]);
        if (PyModule_AddObject(m, names[i], (PyObject *)types[i]) < 0)
            goto fail;
    }
    if (npy_errors_init(m) < 0 || npy_waiter_init(m) < 0)
        goto fail;
#define C(n) PyModule_AddIntConstant(m, #n, NXL_##n)
    if (C(DRAM) || C(VRAM) || C(BLK) || C(OBJ) || C(FILE) || C(READ) || C(WRITE) || C(IN_PROG) ||
        C(SUCCESS) || C(PEER_UP) || C(PEER_CHANGED) || C(PEER_DOWN) || C(PEER_BACK) ||
        PyModule_AddIntConstant(m, "NOTIF_MAX", NXL_NOTIF_MAX))
        goto fail;
#undef C
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
