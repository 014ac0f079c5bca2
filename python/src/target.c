/*
 * What an object's memory is: its address, length, kind (host or CUDA) and
 * what keeps it alive, from whichever interface it offers, tried in this
 * order:
 *   1. a torch tensor: data_ptr(), numel() * element_size(), its device;
 *   2. __cuda_array_interface__ (CuPy, Numba, ferry.DeviceBuffer...);
 *   3. the buffer protocol (bytearray, memoryview, numpy, mmap...);
 *   4. DLPack (__dlpack__ and __dlpack_device__).
 * Only contiguous memory is accepted: a registration is one range.
 */
#include "pyferry.h"

/* ---- DLPack's ABI (dlpack.h, v0.5 onwards; stable) ---------------------- */

enum { DL_CPU = 1, DL_CUDA = 2, DL_CUDA_HOST = 3, DL_CUDA_MANAGED = 13 };

struct dl_tensor {
    void *data;
    struct {
        int32_t type;
        int32_t id;
    } device;
    int32_t ndim;
    struct {
        uint8_t code;
        uint8_t bits;
        uint16_t lanes;
    } dtype;
    int64_t *shape;
    int64_t *strides; /* in elements; NULL: compact row-major */
    uint64_t byte_offset;
};

struct dl_managed_tensor {
    struct dl_tensor t;
    void *manager_ctx;
    void (*deleter)(struct dl_managed_tensor *self);
};

static PyObject *not_contiguous(const char *what)
{
    return pyf_raise_msg(FERRY_EINVAL,
                         "register: the %s is not contiguous; a registration "
                         "is one range of memory: register a contiguous "
                         "copy (.contiguous(), np.ascontiguousarray)",
                         what);
}

/* ---- 1. torch ----------------------------------------------------------- */

/* Whether obj is a torch.Tensor, without importing torch when the program
 * did not. */
static int is_torch_tensor(PyObject *obj)
{
    PyObject *modules = PyImport_GetModuleDict();
    PyObject *torch = PyDict_GetItemString(modules, "torch");
    PyObject *tensor;
    int ret;

    if (torch == NULL)
        return 0;
    tensor = PyObject_GetAttrString(torch, "Tensor");
    if (tensor == NULL) {
        PyErr_Clear();
        return 0;
    }
    ret = PyObject_IsInstance(obj, tensor);
    Py_DECREF(tensor);
    return ret;
}

static int call_size(PyObject *obj, const char *method, Py_ssize_t *v)
{
    PyObject *r = PyObject_CallMethod(obj, method, NULL);

    if (r == NULL)
        return -1;
    *v = PyLong_AsSsize_t(r);
    Py_DECREF(r);
    return *v == -1 && PyErr_Occurred() ? -1 : 0;
}

static int torch_device(PyObject *tensor, struct pyf_target *t)
{
    PyObject *dev = PyObject_GetAttrString(tensor, "device");
    PyObject *type = dev ? PyObject_GetAttrString(dev, "type") : NULL;
    PyObject *index = dev ? PyObject_GetAttrString(dev, "index") : NULL;
    const char *s = type ? PyUnicode_AsUTF8(type) : NULL;
    int ret = -1;

    if (s != NULL && strcmp(s, "cpu") == 0) {
        t->kind = FERRY_MEM_HOST;
        ret = 0;
    } else if (s != NULL && strcmp(s, "cuda") == 0) {
        t->kind = FERRY_MEM_CUDA;
        t->device = index != Py_None ? (int)PyLong_AsLong(index) : -1;
        ret = PyErr_Occurred() ? -1 : 0;
    } else if (s != NULL) {
        pyf_raise_msg(FERRY_ENOTSUP,
                      "register: a torch tensor on device type \"%s\"; ferry "
                      "moves host (cpu) and cuda memory",
                      s);
    }
    Py_XDECREF(index);
    Py_XDECREF(type);
    Py_XDECREF(dev);
    return ret;
}

static int torch_target(PyObject *tensor, struct pyf_target *t)
{
    PyObject *contiguous = PyObject_CallMethod(tensor, "is_contiguous", NULL);
    Py_ssize_t numel, elem, ptr;
    int ok = contiguous ? PyObject_IsTrue(contiguous) : -1;

    Py_XDECREF(contiguous);
    if (ok < 0)
        return -1;
    if (!ok) {
        not_contiguous("torch tensor");
        return -1;
    }
    if (torch_device(tensor, t) != 0 || call_size(tensor, "numel", &numel) ||
        call_size(tensor, "element_size", &elem) ||
        call_size(tensor, "data_ptr", &ptr))
        return -1;
    t->addr = (void *)(uintptr_t)ptr;
    t->len = (size_t)numel * (size_t)elem;
    t->owner = Py_NewRef(tensor);
    return 0;
}

/* ---- 2. __cuda_array_interface__ ------------------------------------------ */

static int cai_itemsize(PyObject *typestr, size_t *size)
{
    const char *s = PyUnicode_Check(typestr) ? PyUnicode_AsUTF8(typestr) : NULL;
    long n = s != NULL && strlen(s) >= 3 ? strtol(s + 2, NULL, 10) : 0;

    if (n <= 0) {
        pyf_raise_msg(FERRY_EINVAL,
                      "register: __cuda_array_interface__ typestr %R is not "
                      "of the form \"<f4\"",
                      typestr);
        return -1;
    }
    *size = (size_t)n;
    return 0;
}

/* Compact row-major strides, or None, are contiguous. */
static int cai_contiguous(PyObject *shape, PyObject *strides, size_t item)
{
    Py_ssize_t n = PyTuple_GET_SIZE(shape);
    size_t expect = item;

    if (strides == NULL || strides == Py_None)
        return 1;
    if (!PyTuple_Check(strides) || PyTuple_GET_SIZE(strides) != n)
        return 0;
    for (Py_ssize_t i = n - 1; i >= 0; i--) {
        Py_ssize_t dim = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, i));
        Py_ssize_t stride = PyLong_AsSsize_t(PyTuple_GET_ITEM(strides, i));
        if (dim != 1 && (size_t)stride != expect)
            return 0;
        expect *= (size_t)dim;
    }
    return 1;
}

static int cai_target(PyObject *obj, PyObject *cai, struct pyf_target *t)
{
    PyObject *data, *shape, *typestr, *strides;
    size_t item, n = 1;

    if (!PyDict_Check(cai))
        goto malformed;
    data = PyDict_GetItemString(cai, "data");
    shape = PyDict_GetItemString(cai, "shape");
    typestr = PyDict_GetItemString(cai, "typestr");
    strides = PyDict_GetItemString(cai, "strides");
    if (data == NULL || !PyTuple_Check(data) || PyTuple_GET_SIZE(data) != 2 ||
        shape == NULL || !PyTuple_Check(shape) || typestr == NULL)
        goto malformed;
    if (cai_itemsize(typestr, &item) != 0)
        return -1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(shape); i++) {
        Py_ssize_t dim = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, i));
        if (dim < 0)
            goto malformed;
        n *= (size_t)dim;
    }
    if (!cai_contiguous(shape, strides, item)) {
        not_contiguous("array (__cuda_array_interface__ strides)");
        return -1;
    }
    t->addr = PyLong_AsVoidPtr(PyTuple_GET_ITEM(data, 0));
    t->readonly = PyObject_IsTrue(PyTuple_GET_ITEM(data, 1)) == 1;
    if (PyErr_Occurred())
        return -1;
    t->len = n * item;
    t->kind = FERRY_MEM_CUDA;
    t->device = -1;
    t->owner = Py_NewRef(obj);
    return 0;
malformed:
    PyErr_Clear();
    pyf_raise_msg(FERRY_EINVAL,
                  "register: __cuda_array_interface__ of %.100s is not a "
                  "dict with data=(ptr, readonly), shape, typestr",
                  Py_TYPE(obj)->tp_name);
    return -1;
}

/* ---- 3. the buffer protocol ---------------------------------------------- */

static int buffer_target(PyObject *obj, struct pyf_target *t)
{
    /* Asked for with its strides, then checked: exporters refuse a
     * request for contiguous memory each with an exception of their own
     * (numpy's is a ValueError), which were not all this refusal. */
    if (PyObject_GetBuffer(obj, &t->view, PyBUF_STRIDES) != 0)
        return -1;
    t->has_view = true;
    if (!PyBuffer_IsContiguous(&t->view, 'A')) {
        not_contiguous("buffer");
        return -1;
    }
    t->addr = t->view.buf;
    t->len = (size_t)t->view.len;
    t->readonly = t->view.readonly;
    t->kind = FERRY_MEM_HOST;
    return 0;
}

/* ---- 4. DLPack ----------------------------------------------------------- */

static void dlpack_release(struct pyf_target *t)
{
    PyObject *type, *value, *tb;
    struct dl_managed_tensor *m;

    /* A refusal releases the tensor too: its exception must survive. */
    PyErr_Fetch(&type, &value, &tb);
    m = PyCapsule_GetPointer(t->owner, "used_dltensor");
    if (m != NULL && m->deleter != NULL)
        m->deleter(m);
    PyErr_Restore(type, value, tb);
}

static bool dl_contiguous(const struct dl_tensor *d)
{
    int64_t expect = 1;

    if (d->strides == NULL)
        return true;
    for (int32_t i = d->ndim - 1; i >= 0; i--) {
        if (d->shape[i] != 1 && d->strides[i] != expect)
            return false;
        expect *= d->shape[i];
    }
    return true;
}

static int dlpack_target(PyObject *obj, struct pyf_target *t)
{
    PyObject *cap = PyObject_CallMethod(obj, "__dlpack__", NULL);
    struct dl_managed_tensor *m;
    size_t n = 1;

    if (cap == NULL)
        return -1;
    m = PyCapsule_GetPointer(cap, "dltensor");
    if (m == NULL || PyCapsule_SetName(cap, "used_dltensor") != 0) {
        Py_DECREF(cap);
        return -1;
    }
    /* From here on the tensor is ours to delete (dlpack_release). */
    t->owner = cap;
    t->release = dlpack_release;
    if (!dl_contiguous(&m->t)) {
        not_contiguous("DLPack tensor");
        return -1;
    }
    for (int32_t i = 0; i < m->t.ndim; i++)
        n *= (size_t)m->t.shape[i];
    t->addr = (char *)m->t.data + m->t.byte_offset;
    /* Bytes per element (bits rounded up), times the elements: the
     * rounding's 7 must not be multiplied too, or the range overruns the
     * tensor (78 bytes for 16 float32). */
    t->len = n * (((size_t)m->t.dtype.bits * m->t.dtype.lanes + 7) / 8);
    switch (m->t.device.type) {
    case DL_CPU:
    case DL_CUDA_HOST:
        t->kind = FERRY_MEM_HOST;
        return 0;
    case DL_CUDA:
    case DL_CUDA_MANAGED:
        t->kind = FERRY_MEM_CUDA;
        t->device = m->t.device.id;
        return 0;
    default:
        pyf_raise_msg(FERRY_ENOTSUP,
                      "register: a DLPack tensor on device type %d; ferry "
                      "moves host (1, 3) and CUDA (2) memory",
                      (int)m->t.device.type);
        return -1;
    }
}

/* ---- the order ------------------------------------------------------------ */

static int resolve(PyObject *obj, struct pyf_target *t)
{
    PyObject *cai;
    int torch = is_torch_tensor(obj);

    if (torch != 0)
        return torch < 0 ? -1 : torch_target(obj, t);
    cai = PyObject_GetAttrString(obj, "__cuda_array_interface__");
    if (cai != NULL) {
        int ret = cai_target(obj, cai, t);
        Py_DECREF(cai);
        return ret;
    }
    /* Only its absence is passed over: an interface that failed (a freed
     * DeviceBuffer's) says why, not that the object has no memory. */
    if (!PyErr_ExceptionMatches(PyExc_AttributeError))
        return -1;
    PyErr_Clear();
    if (PyObject_CheckBuffer(obj))
        return buffer_target(obj, t);
    if (PyObject_HasAttrString(obj, "__dlpack__"))
        return dlpack_target(obj, t);
    pyf_raise_msg(FERRY_EINVAL,
                  "register: a %.100s has no memory ferry can reach; give a "
                  "buffer (bytearray, memoryview, numpy array), a torch "
                  "tensor, or an object with __cuda_array_interface__ or "
                  "__dlpack__",
                  Py_TYPE(obj)->tp_name);
    return -1;
}

int pyf_target_get(PyObject *obj, bool writable, struct pyf_target *t)
{
    memset(t, 0, sizeof(*t));
    t->device = -1;
    if (resolve(obj, t) != 0) {
        pyf_target_release(t);
        return -1;
    }
    if (t->len == 0) {
        pyf_target_release(t);
        pyf_raise_msg(FERRY_EINVAL,
                      "register: the %.100s is empty (0 bytes); a "
                      "registration needs at least one byte",
                      Py_TYPE(obj)->tp_name);
        return -1;
    }
    if (writable && t->readonly) {
        pyf_target_release(t);
        pyf_raise_msg(FERRY_EINVAL,
                      "register: the %.100s is read-only, but access asks "
                      "for REMOTE_WRITE; register it with "
                      "access=ferry.REMOTE_READ, or a writable copy "
                      "(bytearray)",
                      Py_TYPE(obj)->tp_name);
        return -1;
    }
    return 0;
}

void pyf_target_release(struct pyf_target *t)
{
    if (t->has_view)
        PyBuffer_Release(&t->view);
    t->has_view = false;
    if (t->release != NULL)
        t->release(t);
    t->release = NULL;
    Py_CLEAR(t->owner);
}
