/*
 * ferry.Context(**fields): every field of struct ferry_config as a keyword.
 * The defaults are ferry_config_init's (which reads the FERRY_*
 * environment variables); a keyword overrides one field.
 */
#include "pyferry.h"

#include <stddef.h>

enum field_type { FIELD_STR, FIELD_SIZE, FIELD_INT, FIELD_UINT, FIELD_BOOL };

struct field {
    const char *name;
    enum field_type type;
    size_t offset;
};

/* One entry a field of struct ferry_config, from ferry's own list of
 * them (<ferry/core.h>): a field added there is a keyword here. */
#define FIELD(name, kind, def, var)                                           \
    {#name, FIELD_##kind, offsetof(struct ferry_config, name)},

static const struct field fields[] = {FERRY_CONFIG_FIELDS(FIELD)};

#define NFIELDS (sizeof(fields) / sizeof(fields[0]))

static const char *type_words(enum field_type t)
{
    switch (t) {
    case FIELD_STR:
        return "a str or None";
    case FIELD_BOOL:
        return "a bool";
    case FIELD_INT:
        return "an int";
    default:
        return "a non-negative int";
    }
}

/* The config's strings point into bytes objects kept in `strings` for as
 * long as the context lives (ferry reads some of them later: the token,
 * the metadata URL). */
static int set_str(const struct field *f, PyObject *v, void *slot,
                   PyObject *strings)
{
    PyObject *b;

    if (v == Py_None) {
        *(const char **)slot = NULL;
        return 0;
    }
    if (!PyUnicode_Check(v))
        return -1;
    b = PyUnicode_AsUTF8String(v);
    if (b == NULL || PyList_Append(strings, b) != 0) {
        Py_XDECREF(b);
        return -2;
    }
    Py_DECREF(b);
    if (strlen(PyBytes_AS_STRING(b)) != (size_t)PyBytes_GET_SIZE(b)) {
        PyErr_Format(PyExc_ValueError, "Context: %s contains a NUL character",
                     f->name);
        return -2;
    }
    *(const char **)slot = PyBytes_AS_STRING(b);
    return 0;
}

static int set_number(const struct field *f, PyObject *v, void *slot)
{
    if (!PyLong_Check(v))
        return -1;
    if (f->type == FIELD_INT) {
        long x = PyLong_AsLong(v);
        if ((x == -1 && PyErr_Occurred()) || x < INT32_MIN || x > INT32_MAX)
            goto range;
        *(int *)slot = (int)x;
        return 0;
    }
    {
        unsigned long long x = PyLong_AsUnsignedLongLong(v);
        if (x == (unsigned long long)-1 && PyErr_Occurred())
            goto range;
        if (f->type == FIELD_UINT) {
            if (x > UINT32_MAX)
                goto range;
            *(unsigned *)slot = (unsigned)x;
        } else {
            *(size_t *)slot = (size_t)x;
        }
    }
    return 0;
range:
    PyErr_Clear();
    PyErr_Format(PyExc_OverflowError, "Context: %s=%R is out of range for %s",
                 f->name, v, type_words(f->type));
    return -2;
}

static int set_field(const struct field *f, PyObject *v,
                     struct ferry_config *cfg, PyObject *strings)
{
    void *slot = (char *)cfg + f->offset;
    int ret;

    switch (f->type) {
    case FIELD_STR:
        ret = set_str(f, v, slot, strings);
        break;
    case FIELD_BOOL:
        if ((ret = PyObject_IsTrue(v)) < 0)
            return -1;
        *(int *)slot = ret;
        ret = 0;
        break;
    default:
        ret = set_number(f, v, slot);
    }
    if (ret == -1)
        PyErr_Format(PyExc_TypeError, "Context: %s must be %s, not %.100s",
                     f->name, type_words(f->type), Py_TYPE(v)->tp_name);
    return ret != 0 ? -1 : 0;
}

static const struct field *field_named(const char *name)
{
    for (size_t i = 0; i < NFIELDS; i++)
        if (strcmp(fields[i].name, name) == 0)
            return &fields[i];
    return NULL;
}

static void unknown_field(PyObject *key)
{
    PyObject *all = pyf_config_fields();
    PyObject *sep = PyUnicode_FromString(", ");
    PyObject *list = all && sep ? PyUnicode_Join(sep, all) : NULL;

    if (list != NULL)
        PyErr_Format(PyExc_TypeError,
                     "Context() got an unexpected keyword %R; the "
                     "ferry_config fields are: %S",
                     key, list);
    Py_XDECREF(list);
    Py_XDECREF(sep);
    Py_XDECREF(all);
}

int pyf_config_from_kwargs(PyObject *kwargs, struct ferry_config *cfg,
                           PyObject *strings)
{
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    int ret = ferry_config_init(cfg);

    if (ret != 0) {
        pyf_raise(ret, "Context");
        return -1;
    }
    while (kwargs != NULL && PyDict_Next(kwargs, &pos, &key, &value)) {
        const char *name = PyUnicode_AsUTF8(key);
        const struct field *f = name != NULL ? field_named(name) : NULL;

        if (f == NULL) {
            unknown_field(key);
            return -1;
        }
        if (set_field(f, value, cfg, strings) != 0)
            return -1;
    }
    return 0;
}

PyObject *pyf_config_fields(void)
{
    PyObject *t = PyTuple_New(NFIELDS);

    for (size_t i = 0; t != NULL && i < NFIELDS; i++) {
        PyObject *s = PyUnicode_FromString(fields[i].name);
        if (s == NULL) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, (Py_ssize_t)i, s);
    }
    return t;
}
