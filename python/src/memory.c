/*
 * ferry.Memory (a registration, holding the object whose memory it
 * registered) and ferry.RemoteMemory (a peer's region, imported).
 */
#include "pyferry.h"

int pyf_check_memory(PyObject *obj, const char *what, PyfMemory **mem)
{
    if (!PyObject_TypeCheck(obj, &PyfMemory_Type)) {
        pyf_raise_msg(FERRY_EINVAL,
                      "%s must be a ferry.Memory (from Context.register), "
                      "not %.100s",
                      what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    *mem = (PyfMemory *)obj;
    return pyf_alive(obj, (*mem)->ctx, (*mem)->handle, what);
}

int pyf_check_remote(PyObject *obj, const char *what, PyfRemote **rmem)
{
    if (!PyObject_TypeCheck(obj, &PyfRemote_Type)) {
        pyf_raise_msg(FERRY_EINVAL,
                      "%s must be a ferry.RemoteMemory (from "
                      "Peer.import_region or a lookup), not %.100s",
                      what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    *rmem = (PyfRemote *)obj;
    return pyf_alive(obj, (*rmem)->peer->ctx, (*rmem)->handle, what);
}

#include <time.h>

/* ---- Memory ----------------------------------------------------------------- */

PyObject *pyf_memory_new(PyfContext *ctx, PyObject *obj, unsigned access,
                         int kind, int device)
{
    PyfMemory *mem;
    int ret;

    if (access & ~(unsigned)(FERRY_ACCESS_REMOTE_READ |
                             FERRY_ACCESS_REMOTE_WRITE))
        return pyf_raise_msg(FERRY_EINVAL,
                             "register: access=%u; combine ferry.REMOTE_READ "
                             "and ferry.REMOTE_WRITE (0: local use only)",
                             access);
    mem = PyObject_GC_New(PyfMemory, &PyfMemory_Type);
    if (mem == NULL)
        return NULL;
    mem->ctx = (PyfContext *)Py_NewRef(ctx);
    mem->handle = NULL;
    mem->obj = Py_NewRef(obj);
    mem->access = access;
    mem->weakrefs = NULL;
    memset(&mem->target, 0, sizeof(mem->target));
    PyObject_GC_Track(mem);
    if (pyf_target_get(obj, access & FERRY_ACCESS_REMOTE_WRITE,
                       &mem->target) != 0) {
        Py_DECREF(mem);
        return NULL;
    }
    if (kind == FERRY_MEM_AUTO)
        kind = (int)mem->target.kind;
    if (device < 0)
        device = mem->target.device;
    PYF_WITHOUT_GIL(ctx, ret = ferry_mem_register(
                             ctx->handle, mem->target.addr, mem->target.len,
                             (enum ferry_mem_kind)kind, device, access,
                             &mem->handle));
    if (ret != 0) {
        pyf_raise(ret, "register");
        Py_DECREF(mem);
        return NULL;
    }
    return (PyObject *)mem;
}

/*
 * Deregisters and lets go of the object.  A request freed before it ended
 * may leave operations with the provider for a moment (FERRY_EBUSY): they
 * are driven to their end for up to 10 s; the object is kept (never freed
 * under the NIC) if they do not end.  Returns 0 or the ferry error.
 */
static int memory_release(PyfMemory *self)
{
    struct timespec pause = {0, 1000000};
    int ret = 0;

    if (self->handle != NULL && self->ctx->handle != NULL) {
        for (int tries = 0; tries < 10000; tries++) {
            ret = ferry_mem_close(self->handle);
            if (ret != FERRY_EBUSY)
                break;
            ferry_progress(self->ctx->handle);
            nanosleep(&pause, NULL);
        }
        if (ret != 0)
            return ret;
    }
    self->handle = NULL;
    pyf_target_release(&self->target);
    return 0;
}

static PyObject *memory_close(PyfMemory *self, PyObject *unused)
{
    int ret;

    (void)unused;
    if (self->handle != NULL && self->ctx->handle != NULL) {
        /* Refused, not waited for: the caller holds the requests. */
        ret = ferry_mem_close(self->handle);
        if (ret != 0)
            return pyf_raise(ret, "Memory.close");
        self->handle = NULL;
    }
    if (memory_release(self) != 0)
        return NULL;
    Py_RETURN_NONE;
}

static int memory_clear(PyfMemory *self)
{
    if (memory_release(self) != 0) {
        /* Reported, never raised: this runs in dealloc and the GC. */
        if (PyErr_WarnFormat(PyExc_ResourceWarning, 1,
                             "ferry: a registration still in use by the NIC "
                             "after 10 s; its memory is kept, never freed"))
            PyErr_WriteUnraisable((PyObject *)self);
        return 0;
    }
    Py_CLEAR(self->obj);
    return 0;
}

static int memory_traverse(PyfMemory *self, visitproc visit, void *arg)
{
    Py_VISIT(self->obj);
    Py_VISIT(self->target.owner);
    /* The buffer export holds the object too: unvisited, that reference
     * looked external, and a buffer in a cycle with its Memory (an array
     * that keeps its own registration) was never collected. */
    if (self->target.has_view)
        Py_VISIT(self->target.view.obj);
    Py_VISIT(self->ctx);
    return 0;
}

static void memory_dealloc(PyfMemory *self)
{
    PyObject *type, *value, *tb;

    PyObject_GC_UnTrack(self);
    if (self->weakrefs != NULL)
        PyObject_ClearWeakRefs((PyObject *)self);
    /* Its warning must not replace an exception in flight. */
    PyErr_Fetch(&type, &value, &tb);
    memory_clear(self);
    PyErr_Restore(type, value, tb);
    if (self->handle == NULL) {
        Py_CLEAR(self->ctx);
        PyObject_GC_Del(self);
    }
    /* else: leaked on purpose, with the warning above. */
}

static PyObject *memory_export(PyfMemory *self, PyObject *unused)
{
    unsigned char buf[1024];
    size_t len = sizeof(buf);
    int ret;

    (void)unused;
    if (pyf_check_memory((PyObject *)self, "Memory.export", &self) != 0)
        return NULL;
    if ((ret = ferry_mem_export(self->handle, buf, &len)) != 0)
        return pyf_raise(ret, "Memory.export");
    return PyBytes_FromStringAndSize((const char *)buf, (Py_ssize_t)len);
}

static PyObject *memory_refresh(PyfMemory *self, PyObject *unused)
{
    int ret;

    (void)unused;
    if (pyf_check_memory((PyObject *)self, "Memory.refresh", &self) != 0)
        return NULL;
    PYF_WITHOUT_GIL(self->ctx, ret = ferry_mem_refresh(self->handle));
    if (ret != 0)
        return pyf_raise(ret, "Memory.refresh");
    Py_RETURN_NONE;
}

static PyObject *memory_path(PyfMemory *self, void *unused)
{
    (void)unused;
    if (pyf_check_memory((PyObject *)self, "Memory.path", &self) != 0)
        return NULL;
    return PyUnicode_FromString(ferry_mem_path(self->handle));
}

static PyObject *memory_nbytes(PyfMemory *self, void *unused)
{
    (void)unused;
    return PyLong_FromSize_t(self->target.len);
}

static PyObject *memory_address(PyfMemory *self, void *unused)
{
    (void)unused;
    return PyLong_FromVoidPtr(self->target.addr);
}

static PyObject *memory_obj(PyfMemory *self, void *unused)
{
    (void)unused;
    return Py_NewRef(self->obj != NULL ? self->obj : Py_None);
}

static PyObject *memory_readonly(PyfMemory *self, void *unused)
{
    (void)unused;
    return PyBool_FromLong(self->target.readonly);
}

static PyObject *memory_closed(PyfMemory *self, void *unused)
{
    (void)unused;
    return PyBool_FromLong(self->handle == NULL || self->ctx->handle == NULL);
}

static PyMethodDef memory_methods[] = {
    {"export", (PyCFunction)memory_export, METH_NOARGS,
     "export() -> bytes: the key blob a peer imports (Peer.import_region)."},
    {"refresh", (PyCFunction)memory_refresh, METH_NOARGS,
     "refresh(): copies a staged device region into the host mirror peers "
     "read (ferry_mem_refresh)."},
    {"close", (PyCFunction)memory_close, METH_NOARGS,
     "close(): deregisters (BusyError while requests use it) and lets go "
     "of the object."},
    {"__enter__", pyf_enter, METH_NOARGS, NULL},
    {"__exit__", pyf_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef memory_getset[] = {
    {"path", (getter)memory_path, NULL,
     "\"host\", \"cuda dmabuf\", \"cuda FI_HMEM\" or \"cuda staged\".", NULL},
    {"nbytes", (getter)memory_nbytes, NULL, "Length in bytes.", NULL},
    {"address", (getter)memory_address, NULL, "Start address.", NULL},
    {"obj", (getter)memory_obj, NULL, "The registered object.", NULL},
    {"readonly", (getter)memory_readonly, NULL,
     "True when the object's memory is read-only.", NULL},
    {"closed", (getter)memory_closed, NULL,
     "True once closed, or its context is.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject PyfMemory_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ferry.Memory",
    .tp_doc = "Registered memory (Context.register); holds the object.",
    .tp_basicsize = sizeof(PyfMemory),
    .tp_weaklistoffset = offsetof(PyfMemory, weakrefs),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_dealloc = (destructor)memory_dealloc,
    .tp_traverse = (traverseproc)memory_traverse,
    .tp_clear = (inquiry)memory_clear,
    .tp_methods = memory_methods,
    .tp_getset = memory_getset,
};

/* ---- RemoteMemory ------------------------------------------------------------ */

PyObject *pyf_remote_new(PyfPeer *peer, ferry_rmem_t *handle)
{
    PyfRemote *r = PyObject_New(PyfRemote, &PyfRemote_Type);

    if (r == NULL) {
        ferry_rmem_close(handle);
        return NULL;
    }
    r->peer = (PyfPeer *)Py_NewRef(peer);
    r->handle = handle;
    return (PyObject *)r;
}

static PyObject *remote_close(PyfRemote *self, PyObject *unused)
{
    int ret;

    (void)unused;
    if (self->handle != NULL && self->peer->ctx->handle != NULL) {
        if ((ret = ferry_rmem_close(self->handle)) != 0)
            return pyf_raise(ret, "RemoteMemory.close");
    }
    self->handle = NULL;
    Py_RETURN_NONE;
}

static void remote_dealloc(PyfRemote *self)
{
    /* Requests hold their regions, so none is in flight here. */
    if (self->handle != NULL && self->peer->ctx->handle != NULL)
        ferry_rmem_close(self->handle);
    Py_DECREF(self->peer);
    PyObject_Free(self);
}

static PyObject *remote_nbytes(PyfRemote *self, void *unused)
{
    (void)unused;
    if (pyf_check_remote((PyObject *)self, "RemoteMemory.nbytes", &self))
        return NULL;
    return PyLong_FromSize_t(ferry_rmem_length(self->handle));
}

static PyObject *remote_peer(PyfRemote *self, void *unused)
{
    (void)unused;
    return Py_NewRef(self->peer);
}

static PyObject *remote_closed(PyfRemote *self, void *unused)
{
    (void)unused;
    return PyBool_FromLong(self->handle == NULL ||
                           self->peer->ctx->handle == NULL);
}

static PyMethodDef remote_methods[] = {
    {"__enter__", pyf_enter, METH_NOARGS, NULL},
    {"__exit__", pyf_exit, METH_VARARGS, NULL},
    {"close", (PyCFunction)remote_close, METH_NOARGS,
     "close(): releases the import (BusyError while requests use it)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef remote_getset[] = {
    {"nbytes", (getter)remote_nbytes, NULL, "Length in bytes.", NULL},
    {"peer", (getter)remote_peer, NULL, "The Peer it belongs to.", NULL},
    {"closed", (getter)remote_closed, NULL, "True once closed.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject PyfRemote_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ferry.RemoteMemory",
    .tp_doc = "A peer's registered region, imported.",
    .tp_basicsize = sizeof(PyfRemote),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)remote_dealloc,
    .tp_methods = remote_methods,
    .tp_getset = remote_getset,
};
