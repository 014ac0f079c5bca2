/*
 * ferry.Meta: the metadata service (ferry_meta_*), where a fleet's
 * contexts find each other by name (etcd://, etcds://, bootstrap://).
 */
#include "pyferry.h"

typedef struct {
    PyObject_HEAD
    PyfContext *ctx;
    ferry_meta_t *handle; /* NULL once closed */
    PyObject *published;  /* {region: Memory} */
    int busy;             /* calls running without the GIL */
    struct pyf_dependent dep;
} PyfMeta;

/* Closes the handle, without the GIL (an etcd lease is revoked over the
 * network).  0, or ferry's code with ferry_last_error's sentence. */
static int meta_close_handle(PyfMeta *self)
{
    ferry_meta_t *handle = self->handle;
    int ret = 0;

    self->handle = NULL;
    if (handle != NULL) {
        Py_BEGIN_ALLOW_THREADS
        ret = ferry_meta_close(handle);
        Py_END_ALLOW_THREADS
    }
    return ret;
}

/* The dependent's close (see pyferry.h).  Context.close raises nothing
 * of it: ferry_context_close, next, closes whatever this left open. */
static void meta_close_dependent(PyObject *obj)
{
    meta_close_handle((PyfMeta *)obj);
}

PyObject *pyf_meta_open(PyfContext *ctx, const char *url, const char *name)
{
    PyfMeta *m = PyObject_New(PyfMeta, &PyfMeta_Type);
    int ret;

    if (m == NULL)
        return NULL;
    m->ctx = (PyfContext *)Py_NewRef(ctx);
    m->handle = NULL;
    m->busy = 0;
    pyf_dependent_link(ctx, &m->dep, (PyObject *)m, meta_close_dependent);
    m->published = PyDict_New();
    if (m->published == NULL) {
        Py_DECREF(m);
        return NULL;
    }
    PYF_WITHOUT_GIL(ctx,
                    ret = ferry_meta_open(ctx->handle, url, name, &m->handle));
    if (ret != 0) {
        pyf_raise(ret, "Context.metadata");
        Py_DECREF(m);
        return NULL;
    }
    return (PyObject *)m;
}

static int meta_alive(PyfMeta *self, const char *what)
{
    return pyf_alive((PyObject *)self, self->ctx, self->handle, what);
}

static PyObject *meta_publish(PyfMeta *self, PyObject *args)
{
    const char *region;
    PyObject *obj;
    PyfMemory *mem;
    int ret;

    if (!PyArg_ParseTuple(args, "sO:publish", &region, &obj) ||
        meta_alive(self, "Meta.publish") != 0 ||
        pyf_check_memory(obj, "Meta.publish", &mem) != 0)
        return NULL;
    PYF_WITHOUT_GIL_BUSY(self->ctx, self->busy,
                         ret = ferry_meta_publish(self->handle, region,
                                                  mem->handle));
    if (ret != 0)
        return pyf_raise(ret, "Meta.publish");
    if (PyDict_SetItemString(self->published, region, obj) != 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *meta_withdraw(PyfMeta *self, PyObject *args)
{
    const char *region;
    int ret;

    if (!PyArg_ParseTuple(args, "s:withdraw", &region) ||
        meta_alive(self, "Meta.withdraw") != 0)
        return NULL;
    PYF_WITHOUT_GIL_BUSY(self->ctx, self->busy,
                         ret = ferry_meta_withdraw(self->handle, region));
    if (ret != 0)
        return pyf_raise(ret, "Meta.withdraw");
    if (PyDict_DelItemString(self->published, region) != 0)
        PyErr_Clear();
    Py_RETURN_NONE;
}

/* The Peer of name, waiting up to ms. */
static PyfPeer *peer_named(PyfMeta *self, const char *name, int ms)
{
    ferry_peer_t *handle = NULL;
    int ret;

    PYF_WITHOUT_GIL_BUSY(self->ctx, self->busy,
                         ret = ferry_meta_peer(self->handle, name, ms,
                                               &handle));
    if (ret != 0) {
        pyf_raise_wait(ret, "Meta.peer");
        return NULL;
    }
    /* The service's (and then the context's), never removed by Python. */
    return pyf_peer_of(self->ctx, handle, false);
}

static PyObject *meta_peer(PyfMeta *self, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"name", "timeout", NULL};
    const char *name;
    PyObject *timeout = NULL;
    int ms;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s|O:peer", names, &name,
                                     &timeout) ||
        meta_alive(self, "Meta.peer") != 0 ||
        pyf_timeout_ms(timeout, -1, "Meta.peer", &ms) != 0)
        return NULL;
    return (PyObject *)peer_named(self, name, ms);
}

static PyObject *meta_lookup(PyfMeta *self, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"name", "region", "timeout", NULL};
    const char *name, *region;
    PyObject *timeout = NULL, *out;
    ferry_rmem_t *rmem = NULL;
    PyfPeer *peer;
    int ms, ret;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "ss|O:lookup", names, &name,
                                     &region, &timeout) ||
        meta_alive(self, "Meta.lookup") != 0 ||
        pyf_timeout_ms(timeout, -1, "Meta.lookup", &ms) != 0)
        return NULL;
    /* The Peer first: the RemoteMemory holds it. */
    if ((peer = peer_named(self, name, ms)) == NULL)
        return NULL;
    PYF_WITHOUT_GIL_BUSY(self->ctx, self->busy,
                         ret = ferry_meta_lookup(self->handle, name, region,
                                                 ms, &rmem));
    if (ret != 0) {
        Py_DECREF(peer);
        return pyf_raise_wait(ret, "Meta.lookup");
    }
    out = pyf_remote_new(peer, rmem);
    Py_DECREF(peer);
    return out;
}

static PyObject *meta_watch(PyfMeta *self, PyObject *unused)
{
    int ret;

    (void)unused;
    if (meta_alive(self, "Meta.watch") != 0)
        return NULL;
    PYF_WITHOUT_GIL_BUSY(self->ctx, self->busy,
                         ret = ferry_meta_watch(self->handle));
    if (ret != 0)
        return pyf_raise(ret, "Meta.watch");
    Py_RETURN_NONE;
}

static PyObject *meta_event(PyfMeta *self, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"timeout", NULL};
    struct ferry_meta_event ev;
    PyObject *timeout = NULL;
    int ms, ret;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:event", names,
                                     &timeout) ||
        meta_alive(self, "Meta.event") != 0 ||
        pyf_timeout_ms(timeout, -1, "Meta.event", &ms) != 0)
        return NULL;
    PYF_WITHOUT_GIL_BUSY(self->ctx, self->busy,
                         ret = ferry_meta_event(self->handle, ms, &ev));
    if (ret == FERRY_EAGAIN)
        Py_RETURN_NONE;
    if (ret != 0)
        return pyf_raise(ret, "Meta.event");
    return Py_BuildValue("(ss)", ev.kind == FERRY_META_JOIN ? "join" : "leave",
                         ev.name);
}

static PyObject *meta_close(PyfMeta *self, PyObject *unused)
{
    int ret;

    (void)unused;
    /* Freed under a peer() in another thread, it would be used after. */
    if (self->busy > 0)
        return pyf_raise_msg(FERRY_EBUSY,
                             "Meta.close: %d call(s) on it run in other "
                             "threads; let them end first",
                             self->busy);
    if ((ret = meta_close_handle(self)) != 0)
        return pyf_raise(ret, "Meta.close");
    PyDict_Clear(self->published);
    Py_RETURN_NONE;
}

static void meta_dealloc(PyfMeta *self)
{
    pyf_dependent_unlink(&self->dep);
    if (self->handle != NULL)
        ferry_meta_close(self->handle);
    Py_XDECREF(self->published);
    Py_DECREF(self->ctx);
    PyObject_Free(self);
}

static PyObject *meta_url(PyfMeta *self, void *unused)
{
    (void)unused;
    if (meta_alive(self, "Meta.url") != 0)
        return NULL;
    return PyUnicode_FromString(ferry_meta_url(self->handle));
}

static PyMethodDef meta_methods[] = {
    {"publish", (PyCFunction)meta_publish, METH_VARARGS,
     "publish(region, mem)."},
    {"withdraw", (PyCFunction)meta_withdraw, METH_VARARGS,
     "withdraw(region)."},
    {"peer", (PyCFunction)meta_peer, METH_VARARGS | METH_KEYWORDS,
     "peer(name, timeout=None) -> Peer, waiting for it to join."},
    {"lookup", (PyCFunction)meta_lookup, METH_VARARGS | METH_KEYWORDS,
     "lookup(name, region, timeout=None) -> RemoteMemory."},
    {"watch", (PyCFunction)meta_watch, METH_NOARGS,
     "watch(): queue joins and leaves for event() (etcd only)."},
    {"event", (PyCFunction)meta_event, METH_VARARGS | METH_KEYWORDS,
     "event(timeout=None) -> (\"join\"|\"leave\", name), or None when the "
     "timeout passes."},
    {"close", (PyCFunction)meta_close, METH_NOARGS,
     "close(): withdraws everything at once and leaves."},
    {"__enter__", pyf_enter, METH_NOARGS, NULL},
    {"__exit__", pyf_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef meta_getset[] = {
    {"url", (getter)meta_url, NULL,
     "The URL the others open: as given, except that a bootstrap hub "
     "opened at port 0 names the port it got (bootstrap://127.0.0.1:0 -> "
     "bootstrap://127.0.0.1:40213).",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject PyfMeta_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ferry.Meta",
    .tp_doc = "Membership of a metadata service (Context.metadata).",
    .tp_basicsize = sizeof(PyfMeta),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)meta_dealloc,
    .tp_methods = meta_methods,
    .tp_getset = meta_getset,
};
