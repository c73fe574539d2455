/* SPDX-License-Identifier: BSD-3-Clause */
/* nxl._nxl: one exception class per status, each carrying the status
 * (class attributes .status and .name) and nxl's sentence (str(e)). */
#include "nxlmod.h"

static PyObject *err_base, *err_closed;
static PyObject *err_by_status[16]; /* index: -status, for ERR_NOT_POSTED .. ERR_TIMEOUT */

static const struct {
    int status;
    const char *cls;  /* nxl.<cls> */
    PyObject **extra; /* a builtin it also is, or NULL */
} classes[] = {
    {NXL_ERR_NOT_POSTED, "NotPosted", NULL},
    {NXL_ERR_INVALID_PARAM, "InvalidParam", &PyExc_ValueError},
    {NXL_ERR_BACKEND, "BackendError", NULL},
    {NXL_ERR_NOT_FOUND, "NotFound", &PyExc_LookupError},
    {NXL_ERR_MISMATCH, "Mismatch", NULL},
    {NXL_ERR_NOT_ALLOWED, "NotAllowed", NULL},
    {NXL_ERR_REPOST_ACTIVE, "RepostActive", NULL},
    {NXL_ERR_UNKNOWN, "UnknownError", NULL},
    {NXL_ERR_NOT_SUPPORTED, "NotSupported", NULL},
    {NXL_ERR_REMOTE_DISCONNECT, "RemoteDisconnect", &PyExc_ConnectionError},
    {NXL_ERR_CANCELED, "Canceled", NULL},
    {NXL_ERR_NO_TELEMETRY, "NoTelemetry", NULL},
    {NXL_ERR_TIMEOUT, "Timeout", &PyExc_TimeoutError},
};

static int set_status(PyObject *cls, int status)
{
    PyObject *v = PyLong_FromLong(status);
    PyObject *n = PyUnicode_FromString(nxl_status_name((nxl_status_t)status));
    int rc = (!v || !n || PyObject_SetAttrString(cls, "status", v) < 0 ||
              PyObject_SetAttrString(cls, "name", n) < 0)
                 ? -1
                 : 0;
    Py_XDECREF(v);
    Py_XDECREF(n);
    return rc;
}

int npy_errors_init(PyObject *m)
{
    err_base = PyErr_NewExceptionWithDoc(
        "nxl.Error",
        "An nxl call or operation failed: .status (int) and .name (\"ERR_...\") say how, "
        "str(e) is nxl's sentence.",
        NULL, NULL);
    if (!err_base || PyObject_SetAttrString(err_base, "status", Py_None) < 0 ||
        PyObject_SetAttrString(err_base, "name", Py_None) < 0)
        return -1;
    Py_INCREF(err_base);
    if (PyModule_AddObject(m, "Error", err_base) < 0)
        return -1;
    for (size_t i = 0; i < sizeof(classes) / sizeof(classes[0]); i++) {
        char full[64];
        snprintf(full, sizeof(full), "nxl.%s", classes[i].cls);
        PyObject *bases = classes[i].extra ? PyTuple_Pack(2, err_base, *classes[i].extra)
                                           : PyTuple_Pack(1, err_base);
        if (!bases)
            return -1;
        PyObject *cls = PyErr_NewException(full, bases, NULL);
        Py_DECREF(bases);
        if (!cls || set_status(cls, classes[i].status) < 0)
            return -1;
        err_by_status[-classes[i].status] = cls;
        Py_INCREF(cls);
        if (PyModule_AddObject(m, classes[i].cls, cls) < 0)
            return -1;
    }
    err_closed = PyErr_NewExceptionWithDoc(
        "nxl.Closed", "A call on a closed agent, or on an object of a closed agent.",
        err_by_status[-NXL_ERR_NOT_ALLOWED], NULL);
    if (!err_closed || set_status(err_closed, NXL_ERR_NOT_ALLOWED) < 0)
        return -1;
    Py_INCREF(err_closed);
    return PyModule_AddObject(m, "Closed", err_closed);
}

PyObject *npy_error_class(int status)
{
    if (status < 0 && -status < (int)(sizeof(err_by_status) / sizeof(err_by_status[0])) &&
        err_by_status[-status])
        return err_by_status[-status];
    return err_base;
}

PyObject *npy_make_error(nxl_status_t st, const char *sentence)
{
    if (!sentence || !*sentence)
        sentence = nxl_strerror(st);
    PyObject *cls = npy_error_class(st);
    PyObject *e = PyObject_CallFunction(cls, "s", sentence);
    if (e && cls == err_base) {
        /* a status with no class of its own (none today): on the instance */
        PyObject *v = PyLong_FromLong(st);
        PyObject *n = PyUnicode_FromString(nxl_status_name(st));
        if (v && n) {
            PyObject_SetAttrString(e, "status", v);
            PyObject_SetAttrString(e, "name", n);
        }
        Py_XDECREF(v);
        Py_XDECREF(n);
    }
    return e;
}

PyObject *npy_raise(nxl_status_t st, const char *sentence)
{
    PyObject *e = npy_make_error(st, sentence);
    if (e) {
        PyErr_SetObject((PyObject *)Py_TYPE(e), e);
        Py_DECREF(e);
    }
    return NULL;
}

PyObject *npy_raise_agent(npy_core_t *core, nxl_status_t st)
{
    return npy_raise(st, core && core->a ? nxl_agent_last_error(core->a)
                                         : nxl_agent_last_error(NULL));
}

PyObject *npy_raise_closed(void)
{
    PyErr_SetString(err_closed, "the agent is closed: create a new nxl.Agent");
    return NULL;
}
