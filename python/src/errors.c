/*
 * ferry's error codes as exceptions: ferry.Error, and one subclass per
 * code made from include/ferry/errno.h's table (EPEERDEAD, kind PeerDead:
 * ferry.PeerDeadError).  Each instance carries .code (the negative ferry
 * code), .name ("EPEERDEAD") and the whole sentence as its message.
 */
#include "pyferry.h"

#include <stdarg.h>

struct error_kind {
    int code;
    const char *name;   /* "ETIMEDOUT" */
    const char *class;  /* "TimeoutError" */
    const char *doc;    /* ferry_strerror's text */
    PyObject *type;
};

static struct error_kind kinds[] = {
#define KIND(name, value, kind, text)                                         \
    {FERRY_##name, #name, #kind "Error", text, NULL},
    FERRY_ERRNO_MAP(KIND)
#undef KIND
};

static PyObject *base_error;

/* The Python built-in a few kinds also are, so `except TimeoutError` and
 * `except ValueError` catch ferry's too. */
static PyObject *builtin_base(int code)
{
    switch (code) {
    case FERRY_ETIMEDOUT:
        return PyExc_TimeoutError;
    case FERRY_EINVAL:
        return PyExc_ValueError;
    case FERRY_ECONNRESET:
        return PyExc_ConnectionResetError;
    default:
        return NULL;
    }
}

static int add_kind(PyObject *module, struct error_kind *k)
{
    PyObject *builtin = builtin_base(k->code);
    PyObject *bases;
    char qualname[64];

    snprintf(qualname, sizeof(qualname), "ferry.%s", k->class);
    bases = builtin != NULL ? PyTuple_Pack(2, base_error, builtin)
                            : PyTuple_Pack(1, base_error);
    if (bases == NULL)
        return -1;
    k->type = PyErr_NewExceptionWithDoc(qualname, k->doc, bases, NULL);
    Py_DECREF(bases);
    if (k->type == NULL)
        return -1;
    Py_INCREF(k->type);
    return PyModule_AddObject(module, k->class, k->type);
}

int pyf_errors_init(PyObject *module)
{
    base_error = PyErr_NewExceptionWithDoc(
        "ferry.Error",
        "A ferry call failed: .code is ferry's (negative) error code, .name "
        "its symbol (\"ETIMEDOUT\"), and the message the whole sentence.",
        NULL, NULL);
    if (base_error == NULL)
        return -1;
    Py_INCREF(base_error);
    if (PyModule_AddObject(module, "Error", base_error) != 0)
        return -1;
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
        if (add_kind(module, &kinds[i]) != 0)
            return -1;
    return 0;
}

static const struct error_kind *kind_of(int err)
{
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
        if (kinds[i].code == err)
            return &kinds[i];
    return NULL;
}

PyObject *pyf_error_class(int err)
{
    const struct error_kind *k = kind_of(err);
    return k != NULL ? k->type : base_error;
}

static void raise_text(int err, PyObject *text)
{
    const struct error_kind *k = kind_of(err);
    PyObject *type = pyf_error_class(err);
    PyObject *exc = PyObject_CallOneArg(type, text);
    PyObject *code = PyLong_FromLong(err);
    PyObject *name = k != NULL ? PyUnicode_FromString(k->name)
                               : Py_NewRef(Py_None);

    if (exc != NULL && code != NULL && name != NULL &&
        PyObject_SetAttrString(exc, "code", code) == 0 &&
        PyObject_SetAttrString(exc, "name", name) == 0)
        PyErr_SetObject(type, exc);
    Py_XDECREF(name);
    Py_XDECREF(code);
    Py_XDECREF(exc);
}

PyObject *pyf_raise(int err, const char *what)
{
    const char *why = ferry_last_error();
    PyObject *text;

    if (why == NULL || why[0] == '\0')
        why = ferry_strerror(err);
    text = what != NULL ? PyUnicode_FromFormat("%s: %s", what, why)
                        : PyUnicode_FromString(why);
    if (text != NULL) {
        raise_text(err, text);
        Py_DECREF(text);
    }
    return NULL;
}

PyObject *pyf_raise_wait(int err, const char *what)
{
    /* ferry's expired wait (FERRY_EAGAIN) is Python's TimeoutError. */
    return pyf_raise(err == FERRY_EAGAIN ? FERRY_ETIMEDOUT : err, what);
}

PyObject *pyf_raise_msg(int err, const char *fmt, ...)
{
    va_list ap;
    PyObject *text;

    va_start(ap, fmt);
    text = PyUnicode_FromFormatV(fmt, ap);
    va_end(ap);
    if (text != NULL) {
        raise_text(err, text);
        Py_DECREF(text);
    }
    return NULL;
}
