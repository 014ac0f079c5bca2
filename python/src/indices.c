/*
 * Block indices for Prepared.post, as ferry_xfer_post reads them: the
 * memory of a uint32 numpy array (or any one-dimensional uint32 buffer)
 * as it is, or a list of ints copied.
 *
 * A numpy array is recognised through numpy's C API, which costs a few
 * loads; the buffer protocol costs an export per call (its format string,
 * shape and strides), which is most of a post's time in Python when the
 * post itself only queues (shm).  numpy's API is loaded at the first
 * ndarray seen, so importing ferry does not import numpy.  Anything the
 * fast path does not take goes through the buffer protocol, which also
 * words the refusals.
 */
#include "pyferry.h"

#ifdef PYF_HAVE_NUMPY
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL pyf_numpy_api
#include <numpy/arrayobject.h>

/* numpy's API table, loaded at the first ndarray (once: a numpy that
 * cannot give it leaves arrays to the buffer protocol). */
static enum { NUMPY_UNTRIED, NUMPY_LOADED, NUMPY_UNUSABLE } numpy_state;

static bool load_numpy(void)
{
    if (numpy_state == NUMPY_UNTRIED) {
        numpy_state = _import_array() == 0 ? NUMPY_LOADED : NUMPY_UNUSABLE;
        PyErr_Clear();
    }
    return numpy_state == NUMPY_LOADED;
}

/* Takes obj if it is a C-contiguous, aligned, native-endian, one-
 * dimensional uint32 ndarray. */
static bool numpy_uint32_vector(PyObject *obj, struct pyf_indices *ix)
{
    PyArrayObject *a = (PyArrayObject *)obj;

    /* The name only until numpy is loaded; then its type object. */
    if (numpy_state != NUMPY_LOADED &&
        (strcmp(Py_TYPE(obj)->tp_name, "numpy.ndarray") != 0 || !load_numpy()))
        return false;
    if (!PyArray_Check(obj) || PyArray_NDIM(a) != 1 ||
        PyArray_TYPE(a) != NPY_UINT32 || !PyArray_ISCARRAY_RO(a) ||
        !PyArray_ISNOTSWAPPED(a))
        return false;
    ix->idx = PyArray_DATA(a);
    ix->n = (size_t)PyArray_DIM(a, 0);
    return true;
}
#else
static bool numpy_uint32_vector(PyObject *obj, struct pyf_indices *ix)
{
    (void)obj;
    (void)ix;
    return false;
}
#endif

static bool is_uint32_format(const Py_buffer *v)
{
    const char *f = v->format != NULL ? v->format : "B";

    if (v->itemsize != 4)
        return false;
    if (f[0] == '@' || f[0] == '=' ||
        (f[0] == '<' && PY_LITTLE_ENDIAN) || (f[0] == '>' && PY_BIG_ENDIAN))
        f++;
    return strcmp(f, "I") == 0 || (strcmp(f, "L") == 0 && sizeof(long) == 4);
}

static int indices_from_sequence(PyObject *obj, const char *what,
                                 struct pyf_indices *ix)
{
    PyObject *seq = PySequence_Fast(obj, "");
    Py_ssize_t n;

    if (seq == NULL) {
        PyErr_Clear();
        pyf_raise_msg(FERRY_EINVAL,
                      "post: %s is a %.100s; give a numpy array of dtype "
                      "uint32 (or a list of ints)",
                      what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    n = PySequence_Fast_GET_SIZE(seq);
    ix->tmp = PyMem_Malloc((size_t)(n > 0 ? n : 1) * sizeof(uint32_t));
    if (ix->tmp == NULL) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned long v =
            PyLong_AsUnsignedLong(PySequence_Fast_GET_ITEM(seq, i));
        if ((v == (unsigned long)-1 && PyErr_Occurred()) || v > UINT32_MAX) {
            PyErr_Clear();
            Py_DECREF(seq);
            pyf_raise_msg(FERRY_EINVAL,
                          "post: %s[%zd] is not an index from 0 to 2**32-1",
                          what, i);
            return -1;
        }
        ix->tmp[i] = (uint32_t)v;
    }
    Py_DECREF(seq);
    ix->idx = ix->tmp;
    ix->n = (size_t)n;
    return 0;
}

int pyf_indices_get(PyObject *obj, const char *what, struct pyf_indices *ix)
{
    memset(ix, 0, sizeof(*ix));
    if (numpy_uint32_vector(obj, ix))
        return 0;
    if (!PyObject_CheckBuffer(obj))
        return indices_from_sequence(obj, what, ix);
    if (PyObject_GetBuffer(obj, &ix->view,
                           PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
        PyErr_Clear();
        pyf_raise_msg(FERRY_EINVAL,
                      "post: %s is not contiguous; give a contiguous uint32 "
                      "array (np.ascontiguousarray(idx, dtype=np.uint32))",
                      what);
        return -1;
    }
    ix->has_view = true;
    if (ix->view.ndim > 1 || !is_uint32_format(&ix->view)) {
        pyf_raise_msg(FERRY_EINVAL,
                      "post: %s has item format '%s' (%zd bytes) and %d "
                      "dimension(s); indices are one dimension of uint32: "
                      "np.asarray(idx, dtype=np.uint32)",
                      what, ix->view.format ? ix->view.format : "B",
                      ix->view.itemsize, ix->view.ndim);
        return -1;
    }
    ix->idx = ix->view.buf;
    ix->n = (size_t)(ix->view.len / 4);
    return 0;
}

void pyf_indices_release(struct pyf_indices *ix)
{
    if (ix->has_view)
        PyBuffer_Release(&ix->view);
    PyMem_Free(ix->tmp);
}
