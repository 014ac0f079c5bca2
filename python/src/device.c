/*
 * Device memory without a CUDA runtime of the program's own: ferry's
 * device backend (CUDA's driver API, or the simulated device of
 * FERRY_SIM_DEVICES) as ferry.DeviceBuffer, which offers
 * __cuda_array_interface__ like any CUDA array, and the module functions
 * device_backend(), device_status() and device_count().
 */
#include "pyferry.h"

#include <structmember.h>

typedef struct {
    PyObject_HEAD
    void *ptr; /* NULL once freed */
    size_t nbytes;
    int device;
} PyfDevice;

static PyObject *device_new(PyTypeObject *type, PyObject *args,
                            PyObject *kwargs)
{
    static char *names[] = {"nbytes", "device", NULL};
    Py_ssize_t nbytes;
    int device = 0, ret;
    PyfDevice *self;
    void *ptr = NULL;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "n|i:DeviceBuffer", names,
                                     &nbytes, &device))
        return NULL;
    if (nbytes <= 0)
        return pyf_raise_msg(FERRY_EINVAL,
                             "DeviceBuffer: nbytes %zd; give a positive size",
                             nbytes);
    Py_BEGIN_ALLOW_THREADS
    ret = ferry_device_alloc(device, (size_t)nbytes, &ptr);
    Py_END_ALLOW_THREADS
    if (ret != 0)
        return pyf_raise(ret, "DeviceBuffer");
    self = (PyfDevice *)type->tp_alloc(type, 0);
    if (self == NULL) {
        ferry_device_free(ptr);
        return NULL;
    }
    self->ptr = ptr;
    self->nbytes = (size_t)nbytes;
    self->device = device;
    return (PyObject *)self;
}

static void device_dealloc(PyfDevice *self)
{
    if (self->ptr != NULL)
        ferry_device_free(self->ptr);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int device_alive(PyfDevice *self, const char *what)
{
    if (self->ptr != NULL)
        return 0;
    pyf_raise_msg(FERRY_EHANDLE, "%s: this DeviceBuffer was freed", what);
    return -1;
}

/* [offset, offset + len) within the buffer, or an error naming both. */
static int check_range(PyfDevice *self, const char *what, Py_ssize_t offset,
                       Py_ssize_t len)
{
    if (offset >= 0 && len >= 0 && (size_t)offset <= self->nbytes &&
        (size_t)len <= self->nbytes - (size_t)offset)
        return 0;
    pyf_raise_msg(FERRY_ERANGE,
                  "%s: %zd bytes at offset %zd; the buffer has %zu", what,
                  len, offset, self->nbytes);
    return -1;
}

static PyObject *device_copy_from(PyfDevice *self, PyObject *args)
{
    Py_buffer src;
    Py_ssize_t offset = 0;
    int ret;

    if (!PyArg_ParseTuple(args, "y*|n:copy_from", &src, &offset))
        return NULL;
    if (device_alive(self, "DeviceBuffer.copy_from") != 0 ||
        check_range(self, "DeviceBuffer.copy_from", offset, src.len) != 0) {
        PyBuffer_Release(&src);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    ret = ferry_device_copy((char *)self->ptr + offset, src.buf,
                            (size_t)src.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&src);
    if (ret != 0)
        return pyf_raise(ret, "DeviceBuffer.copy_from");
    Py_RETURN_NONE;
}

static PyObject *device_to_bytes(PyfDevice *self, PyObject *args)
{
    Py_ssize_t offset = 0, len = -1;
    PyObject *out;
    int ret;

    if (!PyArg_ParseTuple(args, "|nn:to_bytes", &offset, &len) ||
        device_alive(self, "DeviceBuffer.to_bytes") != 0)
        return NULL;
    if (len < 0 && offset >= 0 && (size_t)offset <= self->nbytes)
        len = (Py_ssize_t)self->nbytes - offset;
    if (check_range(self, "DeviceBuffer.to_bytes", offset, len) != 0)
        return NULL;
    out = PyBytes_FromStringAndSize(NULL, len);
    if (out == NULL)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    ret = ferry_device_copy(PyBytes_AS_STRING(out),
                            (char *)self->ptr + offset, (size_t)len);
    Py_END_ALLOW_THREADS
    if (ret != 0) {
        Py_DECREF(out);
        return pyf_raise(ret, "DeviceBuffer.to_bytes");
    }
    return out;
}

/* Freeing memory a Memory still registers is the caller's error, as
 * with cudaFree; a Memory holds the buffer, so dropping it is safe. */
static PyObject *device_free(PyfDevice *self, PyObject *unused)
{
    (void)unused;
    if (self->ptr != NULL)
        ferry_device_free(self->ptr);
    self->ptr = NULL;
    Py_RETURN_NONE;
}

static PyObject *device_cai(PyfDevice *self, void *unused)
{
    (void)unused;
    if (device_alive(self, "__cuda_array_interface__") != 0)
        return NULL;
    return Py_BuildValue("{s:(NO),s:(n),s:s,s:O,s:i}", "data",
                         PyLong_FromVoidPtr(self->ptr), Py_False, "shape",
                         (Py_ssize_t)self->nbytes, "typestr", "|u1",
                         "strides", Py_None, "version", 3);
}

static PyObject *device_ptr(PyfDevice *self, void *unused)
{
    (void)unused;
    return PyLong_FromVoidPtr(self->ptr);
}

static PyMethodDef device_methods[] = {
    {"copy_from", (PyCFunction)device_copy_from, METH_VARARGS,
     "copy_from(data, offset=0): copies bytes-like data into the buffer."},
    {"to_bytes", (PyCFunction)device_to_bytes, METH_VARARGS,
     "to_bytes(offset=0, length=None) -> bytes: a copy of the contents."},
    {"free", (PyCFunction)device_free, METH_NOARGS,
     "free(): frees the memory now (register holds the buffer alive)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef device_members[] = {
    {"nbytes", T_PYSSIZET, offsetof(PyfDevice, nbytes), READONLY, NULL},
    {"device", T_INT, offsetof(PyfDevice, device), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef device_getset[] = {
    {"__cuda_array_interface__", (getter)device_cai, NULL,
     "The CUDA array interface (version 3) of the bytes.", NULL},
    {"ptr", (getter)device_ptr, NULL, "The device address.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject PyfDevice_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ferry.DeviceBuffer",
    .tp_doc = "DeviceBuffer(nbytes, device=0): device memory from ferry's "
              "device backend (CUDA, or FERRY_SIM_DEVICES' simulated one).",
    .tp_basicsize = sizeof(PyfDevice),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = device_new,
    .tp_dealloc = (destructor)device_dealloc,
    .tp_methods = device_methods,
    .tp_members = device_members,
    .tp_getset = device_getset,
};
