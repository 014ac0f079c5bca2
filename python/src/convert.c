/*
 * Python arguments into ferry's: timeouts in seconds, notify=(id, value),
 * and the checks that an argument is the object a method needs.
 */
#include "pyferry.h"

#include <math.h>

int pyf_timeout_ms(PyObject *seconds, int none_ms, const char *what, int *ms)
{
    double s;

    if (seconds == NULL || seconds == Py_None) {
        *ms = none_ms;
        return 0;
    }
    s = PyFloat_AsDouble(seconds);
    if (s == -1.0 && PyErr_Occurred()) {
        PyErr_Format(PyExc_TypeError,
                     "%s: timeout must be a number of seconds or None, not "
                     "%.100s",
                     what, Py_TYPE(seconds)->tp_name);
        return -1;
    }
    if (!(s >= 0.0) || s > (double)INT32_MAX / 1000.0) {
        pyf_raise_msg(FERRY_EINVAL,
                      "%s: timeout %R is not a number of seconds between 0 "
                      "and %d (None: no limit)",
                      what, seconds, INT32_MAX / 1000);
        return -1;
    }
    /* Rounded up: a wait of 0.0001 s still waits, rather than polls. */
    *ms = (int)ceil(s * 1000.0);
    return 0;
}

static int u64_of(PyObject *o, const char *what, uint64_t *v)
{
    unsigned long long x = PyLong_AsUnsignedLongLong(o);

    if (x == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        pyf_raise_msg(FERRY_EINVAL,
                      "notify: %s %R is not a whole number from 0 to 2**64-1",
                      what, o);
        return -1;
    }
    *v = x;
    return 0;
}

int pyf_notify_opts(PyObject *notify, PyObject *timeout,
                    struct ferry_xfer_opts *opts)
{
    *opts = (struct ferry_xfer_opts)FERRY_XFER_OPTS_INIT;
    /* None: the context's deadline (ferry's 0). */
    if (pyf_timeout_ms(timeout, 0, "request", &opts->timeout_ms) != 0)
        return -1;
    if (timeout != NULL && timeout != Py_None && opts->timeout_ms == 0)
        opts->timeout_ms = 1; /* 0 s means now, not the default */
    if (notify == NULL || notify == Py_None)
        return 0;
    if (!PyTuple_Check(notify) || PyTuple_GET_SIZE(notify) != 2) {
        pyf_raise_msg(FERRY_EINVAL,
                      "notify must be a tuple (id, value), not %R", notify);
        return -1;
    }
    opts->flags |= FERRY_XFER_NOTIFY;
    if (u64_of(PyTuple_GET_ITEM(notify, 0), "id", &opts->notify_id) != 0 ||
        u64_of(PyTuple_GET_ITEM(notify, 1), "value", &opts->notify_value) != 0)
        return -1;
    return 0;
}

int pyf_fastcall_args(const char *fname, const char *const *names, size_t n,
                      size_t required, PyObject *const *args,
                      Py_ssize_t nargs, PyObject *kwnames, PyObject **out)
{
    Py_ssize_t nkw = kwnames != NULL ? PyTuple_GET_SIZE(kwnames) : 0;

    if ((size_t)nargs > n) {
        PyErr_Format(PyExc_TypeError,
                     "%s() takes at most %zu arguments (%zd given)", fname, n,
                     nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        out[i] = args[i];
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        size_t i = 0;

        while (i < n && PyUnicode_CompareWithASCIIString(key, names[i]))
            i++;
        if (i == n || out[i] != NULL) {
            PyErr_Format(PyExc_TypeError, "%s() got %s keyword argument %R",
                         fname, i == n ? "an unexpected" : "a repeated", key);
            return -1;
        }
        out[i] = args[nargs + k];
    }
    for (size_t i = 0; i < required; i++) {
        if (out[i] == NULL) {
            PyErr_Format(PyExc_TypeError,
                         "%s() missing required argument '%s'", fname,
                         names[i]);
            return -1;
        }
    }
    return 0;
}

PyObject *pyf_enter(PyObject *self, PyObject *unused)
{
    (void)unused;
    return Py_NewRef(self);
}

PyObject *pyf_exit(PyObject *self, PyObject *args)
{
    (void)args;
    return PyObject_CallMethod(self, "close", NULL);
}

int pyf_counter_wait_args(PyObject *args, PyObject *kwargs, const char *what,
                          unsigned long long *id,
                          unsigned long long *expected, int *ms)
{
    static char *names[] = {"id", "expected", "timeout", NULL};
    PyObject *timeout = NULL;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "KK|O:counter_wait", names,
                                     id, expected, &timeout))
        return -1;
    return pyf_timeout_ms(timeout, -1, what, ms);
}
