/* SPDX-License-Identifier: BSD-3-Clause */
/* nxl._nxl: Backend, Region, Prepped, Xfer, and descriptor lists. Every
 * object holds the agent's core: once the agent is closed its handles are
 * gone with it (nxl_agent_destroy() released them), and the objects raise
 * nxl.Closed instead of touching them. */
#include "objects.h"

/* ------------------------------------------------------------- descriptors */

PyObject *npy_desc_type; /* nxl.Desc, set by the package */

static int desc_from_seq(PyObject *item, nxl_desc_t *d, PyObject *keep, int *kind)
{
    PyObject *seq = PySequence_Fast(item, "a descriptor is a Region or (addr, len[, dev[, meta]])");
    if (!seq)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **it = PySequence_Fast_ITEMS(seq);
    int rc = -1;
    memset(d, 0, sizeof(*d));
    if (n < 2 || n > 5) {
        PyErr_SetString(PyExc_ValueError, "a descriptor is (addr, len[, dev[, meta[, kind]]])");
        goto out;
    }
    d->addr = (uintptr_t)PyLong_AsUnsignedLongLong(it[0]);
    if (PyErr_Occurred())
        goto out;
    d->len = (size_t)PyLong_AsUnsignedLongLong(it[1]);
    if (PyErr_Occurred())
        goto out;
    if (n >= 3) {
        d->dev_id = PyLong_AsUnsignedLongLong(it[2]);
        if (PyErr_Occurred())
            goto out;
    }
    if (n == 5 && it[4] != Py_None) {
        long k = PyLong_AsLong(it[4]);
        if (k == -1 && PyErr_Occurred())
            goto out;
        if (*kind < 0)
            *kind = (int)k;
    }
    if (n >= 4 && it[3] != Py_None) {
        const char *m;
        Py_ssize_t ml;
        if (PyBytes_Check(it[3])) {
            m = PyBytes_AS_STRING(it[3]);
            ml = PyBytes_GET_SIZE(it[3]);
        } else if (PyUnicode_Check(it[3])) {
            if (!(m = PyUnicode_AsUTF8AndSize(it[3], &ml)))
                goto out;
        } else {
            PyErr_SetString(PyExc_TypeError, "a descriptor's meta is bytes or str");
            goto out;
        }
        if (ml) {
            if (PyList_Append(keep, it[3]) < 0)
                goto out;
            d->meta = m;
            d->meta_len = (size_t)ml;
        }
    }
    rc = 0;
out:
    Py_DECREF(seq);
    return rc;
}

static int desc_item(npy_core_t *core, PyObject *item, npy_dlist_t *dl, nxl_desc_t *d)
{
    if (PyObject_TypeCheck(item, &npy_region_type)) {
        npy_region_t *r = (npy_region_t *)item;
        if (r->core != core) {
            npy_raise(NXL_ERR_INVALID_PARAM, "a Region of another agent");
            return -1;
        }
        *d = r->d;
        d->meta = NULL; /* the registration's: transfers address by addr, len, dev */
        d->meta_len = 0;
        if (dl->kind < 0)
            dl->kind = (int)r->kind;
        return PyList_Append(dl->keep, item);
    }
    return desc_from_seq(item, d, dl->keep, &dl->kind);
}

static int is_single(PyObject *spec)
{
    if (PyObject_TypeCheck(spec, &npy_region_type))
        return 1;
    return PyTuple_Check(spec) && PyTuple_GET_SIZE(spec) > 0 &&
           PyLong_Check(PyTuple_GET_ITEM(spec, 0));
}

int npy_dlist_parse(npy_core_t *core, PyObject *spec, npy_dlist_t *dl, int kind)
{
    dl->d = dl->stack;
    dl->n = 0;
    dl->kind = kind;
    if (!(dl->keep = PyList_New(0)))
        return -1;
    if (is_single(spec)) {
        dl->n = 1;
        return desc_item(core, spec, dl, &dl->d[0]);
    }
    PyObject *seq = PySequence_Fast(spec, "descriptors: a Region, a tuple, or a list of them");
    if (!seq)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > (Py_ssize_t)(sizeof(dl->stack) / sizeof(dl->stack[0])) &&
        !(dl->d = PyMem_Malloc((size_t)n * sizeof(nxl_desc_t)))) {
        dl->d = dl->stack;
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (desc_item(core, PySequence_Fast_GET_ITEM(seq, i), dl, &dl->d[i]) < 0) {
            Py_DECREF(seq);
            return -1;
        }
        dl->n++;
    }
    Py_DECREF(seq);
    return 0;
}

void npy_dlist_free(npy_dlist_t *dl)
{
    if (dl->d != dl->stack)
        PyMem_Free(dl->d);
    dl->d = dl->stack;
    Py_CLEAR(dl->keep);
}

/* ----------------------------------------------------------------- Backend */

static void backend_dealloc(npy_backend_t *b)
{
    Py_XDECREF(b->name);
    npy_core_decref(b->core);
    Py_TYPE(b)->tp_free((PyObject *)b);
}

static PyObject *backend_repr(npy_backend_t *b)
{
    return PyUnicode_FromFormat("<nxl.Backend %S>", b->name);
}

static PyMemberDef backend_members[] = {
    {"name", T_OBJECT, offsetof(npy_backend_t, name), READONLY, "the transport's name"},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject npy_backend_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "nxl.Backend",
    .tp_basicsize = sizeof(npy_backend_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One transport of an agent (Agent.backend()).",
    .tp_dealloc = (destructor)backend_dealloc,
    .tp_members = backend_members,
    .tp_repr = (reprfunc)backend_repr,
};

/* ------------------------------------------------------------------ Region */

static int region_do_deregister(npy_region_t *r)
{
    if (!r->registered)
        return 0;
    r->registered = 0;
    if (!r->core->a)
        return 0; /* the agent's destruction took it */
    nxl_status_t st;
    NPY_CALL(r->core, st, nxl_mem_deregister(r->core->a, r->kind, &r->d, 1));
    if (st != NXL_SUCCESS) {
        npy_raise_agent(r->core, st);
        return -1;
    }
    return 0;
}

static void region_dealloc(npy_region_t *r)
{
    PyObject_GC_UnTrack(r);
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    if (region_do_deregister(r) < 0)
        PyErr_WriteUnraisable((PyObject *)r);
    PyErr_Restore(et, ev, tb);
    if (r->has_view)
        PyBuffer_Release(&r->view);
    Py_CLEAR(r->obj);
    Py_CLEAR(r->meta);
    npy_core_decref(r->core);
    PyObject_GC_Del(r);
}

/* The registered object and the buffer export are not visited: to the
 * cycle collector they are referenced from outside, so it never clears them
 * (a memoryview cleared while exported, then released by us, crashes the
 * interpreter). A Region in a cycle is still collected; a cycle that runs
 * through the registered object itself is not (it leaks, it cannot crash). */
static int region_traverse(npy_region_t *r, visitproc visit, void *arg)
{
    (void)r;
    (void)visit;
    (void)arg;
    return 0;
}

static PyObject *region_deregister(npy_region_t *r, PyObject *noargs)
{
    (void)noargs;
    if (region_do_deregister(r) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *region_desc(npy_region_t *r, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"offset", "length", NULL};
    unsigned long long off = 0;
    PyObject *lo = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|KO:desc", kwl, &off, &lo))
        return NULL;
    unsigned long long len;
    if (off > r->d.len) {
        PyErr_SetString(PyExc_ValueError, "offset past the Region's end");
        return NULL;
    }
    if (lo == Py_None) {
        len = r->d.len - off;
    } else {
        len = PyLong_AsUnsignedLongLong(lo);
        if (PyErr_Occurred())
            return NULL;
        if (len > r->d.len - off) {
            PyErr_SetString(PyExc_ValueError, "offset + length past the Region's end");
            return NULL;
        }
    }
    PyObject *t = Py_BuildValue("(KKKyi)", (unsigned long long)r->d.addr + off, len,
                                (unsigned long long)r->d.dev_id, "", (int)r->kind);
    if (t && npy_desc_type) {
        PyObject *d = PyObject_Call(npy_desc_type, t, NULL);
        Py_DECREF(t);
        return d;
    }
    return t;
}

static PyObject *region_enter(PyObject *r, PyObject *noargs)
{
    (void)noargs;
    Py_INCREF(r);
    return r;
}

static PyObject *region_exit(npy_region_t *r, PyObject *args)
{
    (void)args;
    if (region_do_deregister(r) < 0)
        return NULL;
    Py_RETURN_FALSE;
}

static PyObject *region_get_registered(npy_region_t *r, void *x)
{
    (void)x;
    return PyBool_FromLong(r->registered && r->core->a);
}
static PyObject *region_get_addr(npy_region_t *r, void *x)
{
    (void)x;
    return PyLong_FromUnsignedLongLong(r->d.addr);
}
static PyObject *region_get_nbytes(npy_region_t *r, void *x)
{
    (void)x;
    return PyLong_FromSize_t(r->d.len);
}
static PyObject *region_get_dev(npy_region_t *r, void *x)
{
    (void)x;
    return PyLong_FromUnsignedLongLong(r->d.dev_id);
}
static PyObject *region_get_kind(npy_region_t *r, void *x)
{
    (void)x;
    return PyLong_FromLong(r->kind);
}
static PyObject *region_get_obj(npy_region_t *r, void *x)
{
    (void)x;
    PyObject *o = r->obj ? r->obj : Py_None;
    Py_INCREF(o);
    return o;
}

static PyObject *region_repr(npy_region_t *r)
{
    char buf[128];
    snprintf(buf, sizeof(buf), "<nxl.Region %s 0x%llx+%zu dev %llu%s>", nxl_mem_name(r->kind),
             (unsigned long long)r->d.addr, r->d.len, (unsigned long long)r->d.dev_id,
             r->registered && r->core->a ? "" : " deregistered");
    return PyUnicode_FromString(buf);
}

static int region_getbuffer(npy_region_t *r, Py_buffer *view, int flags)
{
    if (!r->has_view) {
        PyErr_SetString(PyExc_BufferError, "only Regions of buffer objects export a buffer");
        return -1;
    }
    if (PyBuffer_FillInfo(view, (PyObject *)r, r->view.buf, r->view.len, r->view.readonly, flags) <
        0)
        return -1;
    r->exports++;
    return 0;
}

static void region_releasebuffer(npy_region_t *r, Py_buffer *view)
{
    (void)view;
    r->exports--;
}

static PyBufferProcs region_buffer = {
    .bf_getbuffer = (getbufferproc)region_getbuffer,
    .bf_releasebuffer = (releasebufferproc)region_releasebuffer,
};

static PyMethodDef region_methods[] = {
    {"deregister", (PyCFunction)region_deregister, METH_NOARGS,
     "Deregisters (idempotent). Transfers using it keep nxl's registration and this "
     "Region's buffer export until they are released."},
    {"desc", (PyCFunction)(void (*)(void))region_desc, METH_VARARGS | METH_KEYWORDS,
     "desc(offset=0, length=None): an (addr, len, dev, meta) descriptor within the Region."},
    {"__enter__", region_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)region_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef region_getset[] = {
    {"addr", (getter)region_get_addr, NULL, "start address (FILE, OBJ: offset)", NULL},
    {"nbytes", (getter)region_get_nbytes, NULL, "length in bytes", NULL},
    {"dev", (getter)region_get_dev, NULL, "device id (VRAM: CUDA device; FILE: fd or id)", NULL},
    {"kind", (getter)region_get_kind, NULL, "memory type (int, nxl.MemType)", NULL},
    {"obj", (getter)region_get_obj, NULL, "the registered object", NULL},
    {"registered", (getter)region_get_registered, NULL, "still registered", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject npy_region_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "nxl.Region",
    .tp_basicsize = sizeof(npy_region_t),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A registered memory range, file range or object (Agent.register()).",
    .tp_dealloc = (destructor)region_dealloc,
    .tp_traverse = (traverseproc)region_traverse,
    .tp_methods = region_methods,
    .tp_getset = region_getset,
    .tp_as_buffer = &region_buffer,
    .tp_repr = (reprfunc)region_repr,
};

/* ----------------------------------------------------------------- Prepped */

static void prepped_do_release(npy_prepped_t *p)
{
    if (p->p && p->core->a) {
        if (p->core->threaded) {
            Py_BEGIN_ALLOW_THREADS nxl_prepped_release(p->p);
            Py_END_ALLOW_THREADS
        } else {
            nxl_prepped_release(p->p);
        }
    }
    p->p = NULL;
}

static void prepped_dealloc(npy_prepped_t *p)
{
    PyObject_GC_UnTrack(p);
    prepped_do_release(p);
    Py_CLEAR(p->keep);
    npy_core_decref(p->core);
    PyObject_GC_Del(p);
}

static int prepped_traverse(npy_prepped_t *p, visitproc visit, void *arg)
{
    Py_VISIT(p->keep);
    return 0;
}

static PyObject *prepped_release(npy_prepped_t *p, PyObject *noargs)
{
    (void)noargs;
    prepped_do_release(p);
    Py_RETURN_NONE;
}

static Py_ssize_t prepped_len(npy_prepped_t *p)
{
    return (Py_ssize_t)p->n;
}

static PySequenceMethods prepped_seq = {.sq_length = (lenfunc)prepped_len};

static PyMethodDef prepped_methods[] = {
    {"release", (PyCFunction)prepped_release, METH_NOARGS,
     "Releases the list (transfers made from it keep what they need)."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject npy_prepped_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "nxl.Prepped",
    .tp_basicsize = sizeof(npy_prepped_t),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A descriptor list resolved once (Agent.prep()), addressed by index.",
    .tp_dealloc = (destructor)prepped_dealloc,
    .tp_traverse = (traverseproc)prepped_traverse,
    .tp_methods = prepped_methods,
    .tp_as_sequence = &prepped_seq,
};

/* -------------------------------------------------------------------- Xfer */

static void xfer_do_release(npy_xfer_t *x)
{
    if (x->x && x->core->a) {
        if (x->core->threaded) {
            Py_BEGIN_ALLOW_THREADS nxl_xfer_release(x->x);
            Py_END_ALLOW_THREADS
        } else {
            nxl_xfer_release(x->x);
        }
    }
    x->x = NULL;
}

static void xfer_dealloc(npy_xfer_t *x)
{
    PyObject_GC_UnTrack(x);
    xfer_do_release(x);
    Py_CLEAR(x->keep);
    Py_CLEAR(x->last);
    npy_core_decref(x->core);
    PyObject_GC_Del(x);
}

static int xfer_traverse(npy_xfer_t *x, visitproc visit, void *arg)
{
    Py_VISIT(x->keep);
    Py_VISIT(x->last);
    return 0;
}

static int xfer_clear(npy_xfer_t *x)
{
    Py_CLEAR(x->last);
    return 0;
}

static int xfer_usable(npy_xfer_t *x)
{
    if (!x->core->a) {
        npy_raise_closed();
        return 0;
    }
    if (!x->x) {
        npy_raise(NXL_ERR_INVALID_PARAM, "the transfer was released");
        return 0;
    }
    return 1;
}

PyObject *npy_xfer_post(npy_xfer_t *x)
{
    if (!xfer_usable(x))
        return NULL;
    npy_core_t *core = x->core;
    npy_completion_t *c = npy_completion_new(core, (PyObject *)x);
    if (!c)
        return NULL;
    nxl_status_t st;
    NPY_START(core, c, st, nxl_xfer_post(x->x, npy_done_cb, c, &c->f));
    if (c) {
        Py_INCREF(c);
        Py_XSETREF(x->last, (PyObject *)c);
    }
    return (PyObject *)c;
}

static PyObject *xfer_cancel(npy_xfer_t *x, PyObject *noargs)
{
    (void)noargs;
    if (!x->last)
        return npy_raise(NXL_ERR_NOT_POSTED, "cancel(): the transfer was never posted");
    return PyObject_CallMethod(x->last, "cancel", NULL);
}

static PyObject *xfer_post(npy_xfer_t *x, PyObject *noargs)
{
    (void)noargs;
    return npy_xfer_post(x);
}

static PyObject *xfer_release(npy_xfer_t *x, PyObject *noargs)
{
    (void)noargs;
    xfer_do_release(x);
    Py_RETURN_NONE;
}

static PyObject *xfer_set_notif(npy_xfer_t *x, PyObject *msg)
{
    if (!xfer_usable(x))
        return NULL;
    Py_buffer b = {0};
    if (msg != Py_None && PyUnicode_Check(msg)) {
        Py_ssize_t l;
        const char *s = PyUnicode_AsUTF8AndSize(msg, &l);
        if (!s)
            return NULL;
        b.buf = (void *)s;
        b.len = l;
    } else if (msg != Py_None && PyObject_GetBuffer(msg, &b, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    nxl_status_t st;
    NPY_CALL(x->core, st, nxl_xfer_set_notif(x->x, msg == Py_None ? NULL : b.buf, (size_t)b.len));
    if (b.obj)
        PyBuffer_Release(&b);
    if (st != NXL_SUCCESS)
        return npy_raise_agent(x->core, st);
    Py_RETURN_NONE;
}

static PyObject *xfer_get_status(npy_xfer_t *x, void *arg)
{
    (void)arg;
    if (!xfer_usable(x))
        return NULL;
    nxl_status_t st;
    NPY_CALL(x->core, st, nxl_xfer_status(x->x));
    return PyLong_FromLong(st);
}

static PyObject *xfer_get_backend(npy_xfer_t *x, void *arg)
{
    (void)arg;
    if (!xfer_usable(x))
        return NULL;
    nxl_backend_t *b;
    NPY_CALL(x->core, b, nxl_xfer_backend(x->x));
    return PyUnicode_FromString(b ? nxl_backend_name(b) : "");
}

static PyMethodDef xfer_methods[] = {
    {"post", (PyCFunction)xfer_post, METH_NOARGS,
     "Posts the transfer: a Completion (nxl.RepostActive while the last post is in flight)."},
    {"release", (PyCFunction)xfer_release, METH_NOARGS,
     "Releases the transfer; one in flight is canceled (its Completion: nxl.Canceled)."},
    {"cancel", (PyCFunction)xfer_cancel, METH_NOARGS,
     "Cancels the last post: its Completion's cancel() (await it: the buffers are free "
     "then); nxl.NotPosted when never posted."},
    {"set_notif", (PyCFunction)xfer_set_notif, METH_O,
     "The notification the next post sends (bytes, str, or None)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef xfer_getset[] = {
    {"status", (getter)xfer_get_status, NULL,
     "-1 never posted, 1 in flight, else the last post's status", NULL},
    {"backend", (getter)xfer_get_backend, NULL, "the transport's name", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject npy_xfer_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "nxl.Xfer",
    .tp_basicsize = sizeof(npy_xfer_t),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A re-postable READ or WRITE (Agent.make_xfer()).",
    .tp_dealloc = (destructor)xfer_dealloc,
    .tp_traverse = (traverseproc)xfer_traverse,
    .tp_clear = (inquiry)xfer_clear,
    .tp_methods = xfer_methods,
    .tp_getset = xfer_getset,
};
