/*
 * ferry._ferry: the module's types, constants and functions.  The ferry
 * package (ferry/__init__.py) re-exports all of it.
 */
#include "pyferry.h"

static PyObject *mod_strerror(PyObject *self, PyObject *arg)
{
    long err = PyLong_AsLong(arg);

    (void)self;
    if (err == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(ferry_strerror((int)err));
}

static PyObject *mod_device_backend(PyObject *self, PyObject *unused)
{
    const char *b = ferry_device_backend();

    (void)self;
    (void)unused;
    if (b == NULL)
        Py_RETURN_NONE;
    return PyUnicode_FromString(b);
}

static PyObject *mod_device_status(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyUnicode_FromString(ferry_device_status());
}

static PyObject *mod_device_count(PyObject *self, PyObject *unused)
{
    int n = 0, ret = ferry_device_count(&n);

    (void)self;
    (void)unused;
    if (ret != 0)
        return pyf_raise(ret, "device_count");
    return PyLong_FromLong(n);
}

static PyMethodDef module_methods[] = {
    {"strerror", mod_strerror, METH_O,
     "strerror(code) -> str: ferry_strerror."},
    {"device_backend", mod_device_backend, METH_NOARGS,
     "device_backend() -> \"cuda\", \"simulated\" or None."},
    {"device_status", mod_device_status, METH_NOARGS,
     "device_status() -> str: which device backend runs and why."},
    {"device_count", mod_device_count, METH_NOARGS,
     "device_count() -> int (NotSupportedError without a backend)."},
    {"wait_any", (PyCFunction)(void (*)(void))pyf_wait_any,
     METH_VARARGS | METH_KEYWORDS,
     "wait_any(requests, timeout=None) -> int: the index of the first "
     "request that has ended (None entries skipped; all of one context), "
     "waiting at most timeout seconds (TimeoutError after).  It does not "
     "raise the request's error: its test() or wait() does."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ferry._ferry",
    .m_doc = "ferry: one-sided RMA between host and CUDA memories over "
             "libfabric (the C extension; import ferry).",
    .m_size = -1,
    .m_methods = module_methods,
};

static int add_types(PyObject *m)
{
    PyTypeObject *types[] = {
        &PyfContext_Type,  &PyfPeer_Type,    &PyfMemory_Type,
        &PyfRemote_Type,   &PyfRequest_Type, &PyfBlocks_Type,
        &PyfPrepared_Type, &PyfMeta_Type,    &PyfDevice_Type,
    };

    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        const char *dot = strrchr(types[i]->tp_name, '.');
        if (PyType_Ready(types[i]) != 0)
            return -1;
        Py_INCREF(types[i]);
        if (PyModule_AddObject(m, dot + 1, (PyObject *)types[i]) != 0)
            return -1;
    }
    return 0;
}

/* "1.0.0" out of ferry_version_string()'s "ferry 1.0.0 (libfabric 1.17)". */
static PyObject *release_version(void)
{
    char release[32] = "";

    sscanf(ferry_version_string(), "ferry %31s", release);
    return PyUnicode_FromString(release);
}

static int add_constants(PyObject *m)
{
    return PyModule_AddIntConstant(m, "REMOTE_READ",
                                   FERRY_ACCESS_REMOTE_READ) ||
           PyModule_AddIntConstant(m, "REMOTE_WRITE",
                                   FERRY_ACCESS_REMOTE_WRITE) ||
           PyModule_AddIntConstant(m, "WRITE", FERRY_OP_WRITE) ||
           PyModule_AddIntConstant(m, "READ", FERRY_OP_READ) ||
           PyModule_AddObject(m, "__version__", release_version()) ||
           PyModule_AddStringConstant(m, "LIBRARY_VERSION",
                                      ferry_version_string()) ||
           PyModule_AddObject(m, "CONFIG_FIELDS", pyf_config_fields());
}

/* The one symbol the module exports (declared here for -Wmissing-prototypes). */
PyMODINIT_FUNC PyInit__ferry(void);

PyMODINIT_FUNC PyInit__ferry(void)
{
    PyObject *m = PyModule_Create(&module_def);

    if (m == NULL)
        return NULL;
    if (add_types(m) != 0 || add_constants(m) != 0 ||
        pyf_errors_init(m) != 0 || pyf_notification_init(m) != 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
