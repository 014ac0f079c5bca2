/*
 * ferry.Listener and ferry.Connection: the bootstrap (ferry_oob_*), for
 * programs without a control plane of their own.
 */
#include "pyferry.h"

typedef struct {
    PyObject_HEAD
    PyfContext *ctx;
    ferry_oob_t *handle; /* NULL once closed */
    PyObject *published; /* {name: Memory}: kept registered while served */
    int busy;            /* accept calls running without the GIL */
    struct pyf_dependent dep;
} PyfListener;

typedef struct {
    PyObject_HEAD
    PyfContext *ctx;
    ferry_oob_conn_t *handle; /* NULL once closed */
    PyfPeer *peer;
    PyObject *offered; /* {name: Memory} */
    int busy;          /* lookup/offer calls running without the GIL */
    struct pyf_dependent dep;
} PyfConnection;

/* Closes the handle (the dependent's close; see pyferry.h). */
static void connection_close_handle(PyObject *obj)
{
    PyfConnection *self = (PyfConnection *)obj;
    ferry_oob_conn_t *handle = self->handle;

    self->handle = NULL;
    ferry_oob_disconnect(handle);
}

static PyObject *connection_new(PyfContext *ctx, ferry_oob_conn_t *handle)
{
    PyfConnection *c = PyObject_New(PyfConnection, &PyfConnection_Type);

    if (c == NULL) {
        ferry_oob_disconnect(handle);
        return NULL;
    }
    c->ctx = (PyfContext *)Py_NewRef(ctx);
    c->handle = handle;
    c->busy = 0;
    pyf_dependent_link(ctx, &c->dep, (PyObject *)c, connection_close_handle);
    c->offered = PyDict_New();
    c->peer = pyf_peer_of(ctx, ferry_oob_conn_peer(handle), false);
    if (c->offered == NULL || c->peer == NULL) {
        Py_DECREF(c);
        return NULL;
    }
    return (PyObject *)c;
}

/* ---- Listener -------------------------------------------------------------------- */

/* Closes the handle (the dependent's close; see pyferry.h). */
static void listener_close_handle(PyObject *obj)
{
    PyfListener *self = (PyfListener *)obj;
    ferry_oob_t *handle = self->handle;

    self->handle = NULL;
    if (handle != NULL) {
        Py_BEGIN_ALLOW_THREADS
        ferry_oob_close(handle);
        Py_END_ALLOW_THREADS
    }
}

PyObject *pyf_listen(PyfContext *ctx, const char *hostport, const char *token)
{
    PyfListener *lis = PyObject_New(PyfListener, &PyfListener_Type);
    int ret;

    if (lis == NULL)
        return NULL;
    lis->ctx = (PyfContext *)Py_NewRef(ctx);
    lis->handle = NULL;
    lis->busy = 0;
    pyf_dependent_link(ctx, &lis->dep, (PyObject *)lis,
                       listener_close_handle);
    lis->published = PyDict_New();
    if (lis->published == NULL) {
        Py_DECREF(lis);
        return NULL;
    }
    PYF_WITHOUT_GIL(ctx, ret = ferry_oob_listen_token(ctx->handle, hostport,
                                                      token, &lis->handle));
    if (ret != 0) {
        pyf_raise(ret, "Context.listen");
        Py_DECREF(lis);
        return NULL;
    }
    return (PyObject *)lis;
}

static int listener_alive(PyfListener *self, const char *what)
{
    return pyf_alive((PyObject *)self, self->ctx, self->handle, what);
}

static PyObject *listener_publish(PyfListener *self, PyObject *args)
{
    const char *name;
    PyObject *obj;
    PyfMemory *mem;
    int ret;

    if (!PyArg_ParseTuple(args, "sO:publish", &name, &obj) ||
        listener_alive(self, "Listener.publish") != 0 ||
        pyf_check_memory(obj, "Listener.publish", &mem) != 0)
        return NULL;
    if ((ret = ferry_oob_publish(self->handle, name, mem->handle)) != 0)
        return pyf_raise(ret, "Listener.publish");
    if (PyDict_SetItemString(self->published, name, obj) != 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *listener_accept(PyfListener *self, PyObject *args,
                                 PyObject *kwargs)
{
    static char *names[] = {"timeout", NULL};
    PyObject *timeout = NULL;
    ferry_oob_conn_t *conn = NULL;
    int ms, ret;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:accept", names,
                                     &timeout) ||
        listener_alive(self, "Listener.accept") != 0 ||
        pyf_timeout_ms(timeout, -1, "Listener.accept", &ms) != 0)
        return NULL;
    PYF_WITHOUT_GIL_BUSY(self->ctx, self->busy,
                         ret = ferry_oob_accept(self->handle, ms, &conn));
    if (ret != 0)
        return pyf_raise_wait(ret, "Listener.accept");
    return connection_new(self->ctx, conn);
}

static PyObject *listener_close(PyfListener *self, PyObject *unused)
{
    (void)unused;
    /* Freed under an accept in another thread, it would be used after. */
    if (self->busy > 0)
        return pyf_raise_msg(FERRY_EBUSY,
                             "Listener.close: %d accept call(s) run in other "
                             "threads; let them end first",
                             self->busy);
    listener_close_handle((PyObject *)self);
    PyDict_Clear(self->published);
    Py_RETURN_NONE;
}

static void listener_dealloc(PyfListener *self)
{
    pyf_dependent_unlink(&self->dep);
    if (self->handle != NULL)
        ferry_oob_close(self->handle);
    Py_XDECREF(self->published);
    Py_DECREF(self->ctx);
    PyObject_Free(self);
}

static PyObject *listener_port(PyfListener *self, void *unused)
{
    (void)unused;
    if (listener_alive(self, "Listener.port") != 0)
        return NULL;
    return PyLong_FromLong(ferry_oob_port(self->handle));
}

static PyMethodDef listener_methods[] = {
    {"publish", (PyCFunction)listener_publish, METH_VARARGS,
     "publish(name, mem): makes mem findable by name (Connection.lookup)."},
    {"accept", (PyCFunction)listener_accept, METH_VARARGS | METH_KEYWORDS,
     "accept(timeout=None) -> Connection: the next client that proved the "
     "token, to find what it offered."},
    {"close", (PyCFunction)listener_close, METH_NOARGS,
     "close(): stops serving (accepted connections stay)."},
    {"__enter__", pyf_enter, METH_NOARGS, NULL},
    {"__exit__", pyf_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef listener_getset[] = {
    {"port", (getter)listener_port, NULL, "The port listened on.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject PyfListener_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ferry.Listener",
    .tp_doc = "A bootstrap listener (Context.listen).",
    .tp_basicsize = sizeof(PyfListener),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)listener_dealloc,
    .tp_methods = listener_methods,
    .tp_getset = listener_getset,
};

/* ---- Connection ------------------------------------------------------------------ */

PyObject *pyf_connect(PyfContext *ctx, const char *hostport,
                      const char *token, int timeout_ms)
{
    ferry_oob_conn_t *conn = NULL;
    int ret;

    PYF_WITHOUT_GIL(ctx, ret = ferry_oob_connect_token(
                             ctx->handle, hostport, token, timeout_ms, &conn));
    if (ret != 0)
        return pyf_raise(ret, "Context.connect");
    return connection_new(ctx, conn);
}

static int connection_alive(PyfConnection *self, const char *what)
{
    return pyf_alive((PyObject *)self, self->ctx, self->handle, what);
}

static PyObject *connection_lookup(PyfConnection *self, PyObject *args,
                                   PyObject *kwargs)
{
    static char *names[] = {"name", "timeout", NULL};
    const char *name;
    PyObject *timeout = NULL;
    ferry_rmem_t *rmem = NULL;
    int ms, ret;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s|O:lookup", names, &name,
                                     &timeout) ||
        connection_alive(self, "Connection.lookup") != 0 ||
        pyf_timeout_ms(timeout, 5000, "Connection.lookup", &ms) != 0)
        return NULL;
    PYF_WITHOUT_GIL_BUSY(self->ctx, self->busy,
                         ret = ferry_oob_lookup(self->handle, name, ms,
                                                &rmem));
    if (ret != 0)
        return pyf_raise(ret, "Connection.lookup");
    return pyf_remote_new(self->peer, rmem);
}

static PyObject *connection_offer(PyfConnection *self, PyObject *args,
                                  PyObject *kwargs)
{
    static char *names[] = {"name", "mem", "timeout", NULL};
    const char *name;
    PyObject *obj, *timeout = NULL;
    PyfMemory *mem;
    int ms, ret;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "sO|O:offer", names, &name,
                                     &obj, &timeout) ||
        connection_alive(self, "Connection.offer") != 0 ||
        pyf_check_memory(obj, "Connection.offer", &mem) != 0 ||
        pyf_timeout_ms(timeout, 5000, "Connection.offer", &ms) != 0)
        return NULL;
    PYF_WITHOUT_GIL_BUSY(self->ctx, self->busy,
                         ret = ferry_oob_offer(self->handle, name,
                                               mem->handle, ms));
    if (ret != 0)
        return pyf_raise(ret, "Connection.offer");
    if (PyDict_SetItemString(self->offered, name, obj) != 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *connection_close(PyfConnection *self, PyObject *unused)
{
    (void)unused;
    /* Freed under a lookup in another thread, it would be used after. */
    if (self->busy > 0)
        return pyf_raise_msg(FERRY_EBUSY,
                             "Connection.close: %d call(s) on it (lookup, "
                             "offer) run in other threads; let them end "
                             "first",
                             self->busy);
    connection_close_handle((PyObject *)self);
    PyDict_Clear(self->offered);
    Py_RETURN_NONE;
}

static void connection_dealloc(PyfConnection *self)
{
    pyf_dependent_unlink(&self->dep);
    ferry_oob_disconnect(self->handle);
    Py_XDECREF(self->offered);
    Py_XDECREF(self->peer);
    Py_DECREF(self->ctx);
    PyObject_Free(self);
}

static PyObject *connection_peer(PyfConnection *self, void *unused)
{
    (void)unused;
    return Py_NewRef(self->peer);
}

static PyMethodDef connection_methods[] = {
    {"lookup", (PyCFunction)connection_lookup, METH_VARARGS | METH_KEYWORDS,
     "lookup(name, timeout=5.0) -> RemoteMemory: a region the listener "
     "published (connecting side) or the client offered (accepted side, "
     "waiting for it)."},
    {"offer", (PyCFunction)connection_offer, METH_VARARGS | METH_KEYWORDS,
     "offer(name, mem, timeout=5.0): connecting side; the listener finds "
     "it through accept()."},
    {"close", (PyCFunction)connection_close, METH_NOARGS,
     "close(): ends the connection and its offers (the peer stays)."},
    {"__enter__", pyf_enter, METH_NOARGS, NULL},
    {"__exit__", pyf_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef connection_getset[] = {
    {"peer", (getter)connection_peer, NULL, "The Peer at the other end.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject PyfConnection_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ferry.Connection",
    .tp_doc = "A bootstrap connection (Context.connect, Listener.accept).",
    .tp_basicsize = sizeof(PyfConnection),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)connection_dealloc,
    .tp_methods = connection_methods,
    .tp_getset = connection_getset,
};
