/*
 * ferry.Request: a transfer under way.  wait() releases the GIL; `await
 * req` polls it from the event loop (ferry._aio), without a thread.
 * Once it has ended, its result and sentence are kept, so every later
 * wait() or test() says the same.
 */
#include "pyferry.h"

PyObject *pyf_request_new(PyfContext *ctx, ferry_req_t *handle,
                          PyObject *keep)
{
    PyfRequest *r;

    if (keep == NULL) {
        ferry_req_close(handle);
        return NULL;
    }
    r = PyObject_GC_New(PyfRequest, &PyfRequest_Type);
    if (r == NULL) {
        ferry_req_close(handle);
        Py_DECREF(keep);
        return NULL;
    }
    r->ctx = (PyfContext *)Py_NewRef(ctx);
    r->handle = handle;
    r->keep = keep;
    r->result = FERRY_EINPROGRESS;
    r->why = NULL;
    r->waiting = 0;
    PyObject_GC_Track(r);
    return (PyObject *)r;
}

/* Keeps the end of the request (call right after ferry_req_*, in the
 * calling thread, for ferry_last_error). */
static void note_result(PyfRequest *self, int ret)
{
    if (ret == FERRY_EINPROGRESS || self->result != FERRY_EINPROGRESS)
        return;
    self->result = ret;
    if (ret != 0)
        self->why = PyUnicode_FromString(ferry_last_error());
    PyErr_Clear();
}

static PyObject *ended(PyfRequest *self)
{
    if (self->result == 0)
        Py_RETURN_TRUE;
    return pyf_raise_msg(self->result, "%S",
                         self->why ? self->why : Py_None);
}

/* 0 when the request can be driven; else the exception is set. */
static int request_alive(PyfRequest *self, const char *what)
{
    /* An ended request answers with its result, whatever went since. */
    if (self->result != FERRY_EINPROGRESS)
        return 0;
    return pyf_alive((PyObject *)self, self->ctx, self->handle, what);
}

static PyObject *request_wait(PyfRequest *self, PyObject *args,
                              PyObject *kwargs)
{
    static char *names[] = {"timeout", NULL};
    PyObject *timeout = NULL;
    int ms, ret;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:wait", names,
                                     &timeout) ||
        request_alive(self, "Request.wait") != 0 ||
        pyf_timeout_ms(timeout, -1, "Request.wait", &ms) != 0)
        return NULL;
    if (self->result == FERRY_EINPROGRESS) {
        self->waiting++;
        PYF_WITHOUT_GIL(self->ctx, ret = ferry_req_wait(self->handle, ms));
        self->waiting--;
        if (ret == FERRY_EAGAIN)
            return pyf_raise_msg(FERRY_ETIMEDOUT,
                                 "Request.wait: still in progress after %d "
                                 "ms (the request goes on)",
                                 ms);
        note_result(self, ret);
    }
    if (ended(self) == NULL)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *request_test(PyfRequest *self, PyObject *unused)
{
    (void)unused;
    if (request_alive(self, "Request.test") != 0)
        return NULL;
    if (self->result == FERRY_EINPROGRESS) {
        int ret = ferry_req_test(self->handle);
        if (ret == FERRY_EINPROGRESS)
            Py_RETURN_FALSE;
        note_result(self, ret);
    }
    return ended(self);
}

static PyObject *request_cancel(PyfRequest *self, PyObject *unused)
{
    (void)unused;
    if (request_alive(self, "Request.cancel") != 0)
        return NULL;
    if (self->result == FERRY_EINPROGRESS)
        ferry_req_cancel(self->handle);
    Py_RETURN_NONE;
}

/* 0, or ferry's code with ferry_last_error's sentence.  A closed
 * Context has closed the handle already. */
static int request_free_handle(PyfRequest *self)
{
    ferry_req_t *handle = self->handle;

    self->handle = NULL;
    if (handle == NULL || self->ctx->handle == NULL)
        return 0;
    return ferry_req_close(handle);
}

static PyObject *request_close(PyfRequest *self, PyObject *unused)
{
    int ret;

    (void)unused;
    if (self->waiting > 0)
        return pyf_raise_msg(FERRY_EBUSY,
                             "Request.close: another thread waits on it");
    if ((ret = request_free_handle(self)) != 0)
        return pyf_raise(ret, "Request.close");
    Py_RETURN_NONE;
}

/* What it holds may hold it (a tensor that keeps its pending request):
 * the collector must see keep, or such a cycle is never collected.  No
 * tp_clear: the Memory in the cycle breaks it (memory_clear). */
static int request_traverse(PyfRequest *self, visitproc visit, void *arg)
{
    Py_VISIT(self->keep);
    return 0;
}

static void request_dealloc(PyfRequest *self)
{
    PyObject_GC_UnTrack(self);
    /* Cancels it if it has not ended; the provider's operations keep
     * their registrations until they come back (ferry_req_close). */
    request_free_handle(self);
    Py_XDECREF(self->keep);
    Py_XDECREF(self->why);
    Py_DECREF(self->ctx);
    PyObject_GC_Del(self);
}

static PyObject *request_done(PyfRequest *self, void *unused)
{
    (void)unused;
    if (self->result == FERRY_EINPROGRESS && self->handle != NULL &&
        self->ctx->handle != NULL)
        note_result(self, ferry_req_test(self->handle));
    return PyBool_FromLong(self->result != FERRY_EINPROGRESS);
}

static PyObject *request_await(PyfRequest *self)
{
    PyObject *aio = PyImport_ImportModule("ferry._aio");
    PyObject *coro, *it;

    if (aio == NULL)
        return NULL;
    coro = PyObject_CallMethod(aio, "wait", "OO", self, self->ctx);
    Py_DECREF(aio);
    if (coro == NULL)
        return NULL;
    it = PyObject_CallMethod(coro, "__await__", NULL);
    Py_DECREF(coro);
    return it;
}

/* d[key] = value, stealing value; -1 with the exception set. */
static int put(PyObject *d, const char *key, PyObject *value)
{
    int ret = value == NULL ? -1 : PyDict_SetItemString(d, key, value);

    Py_XDECREF(value);
    return ret;
}

static PyObject *request_result(PyfRequest *self, PyObject *unused)
{
    struct ferry_req_result r = FERRY_REQ_RESULT_INIT;
    PyObject *d;
    int ret;

    (void)unused;
    if (pyf_alive((PyObject *)self, self->ctx, self->handle,
                  "Request.result") != 0)
        return NULL;
    if ((ret = ferry_req_result(self->handle, &r)) != 0)
        return pyf_raise(ret, "Request.result");
    if ((d = PyDict_New()) == NULL)
        return NULL;
    if (put(d, "status", PyLong_FromLong(r.status)) != 0 ||
        put(d, "bytes", PyLong_FromUnsignedLongLong(r.bytes)) != 0 ||
        put(d, "bytes_done", PyLong_FromUnsignedLongLong(r.bytes_done)) !=
            0 ||
        put(d, "posted_ns", PyLong_FromUnsignedLongLong(r.posted_ns)) != 0 ||
        put(d, "ended_ns",
            r.ended_ns ? PyLong_FromUnsignedLongLong(r.ended_ns)
                       : Py_NewRef(Py_None)) != 0 ||
        put(d, "failed_iov",
            r.failed_iov != FERRY_NO_IOV ? PyLong_FromSize_t(r.failed_iov)
                                         : Py_NewRef(Py_None)) != 0 ||
        put(d, "error", PyUnicode_FromString(r.error)) != 0) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

/* The live request behind item, or NULL (None, or closed); -1 when item
 * is no Request. */
static int handle_of(PyObject *item, PyfRequest **req)
{
    *req = NULL;
    if (item == Py_None)
        return 0;
    if (!PyObject_TypeCheck(item, &PyfRequest_Type)) {
        PyErr_Format(PyExc_TypeError,
                     "wait_any: expected Request or None, got %s",
                     Py_TYPE(item)->tp_name);
        return -1;
    }
    *req = (PyfRequest *)item;
    return 0;
}

PyObject *pyf_wait_any(PyObject *mod, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"requests", "timeout", NULL};
    PyObject *seq, *timeout = NULL, *fast, *result = NULL;
    PyfRequest **reqs = NULL;
    ferry_req_t **handles = NULL;
    PyfContext *ctx = NULL;
    Py_ssize_t n;
    size_t index = 0;
    int ms, ret;

    (void)mod;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|O:wait_any", names,
                                     &seq, &timeout) ||
        pyf_timeout_ms(timeout, -1, "wait_any", &ms) != 0 ||
        (fast = PySequence_Fast(seq, "wait_any: requests must be a "
                                     "sequence")) == NULL)
        return NULL;
    n = PySequence_Fast_GET_SIZE(fast);
    reqs = PyMem_Calloc((size_t)n + 1, sizeof(*reqs));
    handles = PyMem_Calloc((size_t)n + 1, sizeof(*handles));
    if (reqs == NULL || handles == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (handle_of(PySequence_Fast_GET_ITEM(fast, i), &reqs[i]) != 0)
            goto out;
        if (reqs[i] == NULL)
            continue;
        /* One that has ended (and may be closed since) answers first. */
        if (reqs[i]->result != FERRY_EINPROGRESS) {
            index = (size_t)i;
            goto found;
        }
        if (reqs[i]->handle != NULL && reqs[i]->ctx->handle != NULL) {
            handles[i] = reqs[i]->handle;
            ctx = ctx != NULL ? ctx : reqs[i]->ctx;
        }
    }
    if (ctx == NULL) {
        pyf_raise_msg(FERRY_EINVAL, "wait_any: no request among the %zd "
                                    "entries still runs (all None or "
                                    "closed)",
                      n);
        goto out;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (handles[i] != NULL)
            reqs[i]->waiting++;
    PYF_WITHOUT_GIL(ctx, ret = ferry_req_wait_any(handles, (size_t)n, ms,
                                                  &index));
    for (Py_ssize_t i = 0; i < n; i++)
        if (handles[i] != NULL)
            reqs[i]->waiting--;
    if (ret == FERRY_EAGAIN) {
        pyf_raise_msg(FERRY_ETIMEDOUT,
                      "wait_any: none has ended after %d ms (they go on)",
                      ms);
        goto out;
    }
    if (index >= (size_t)n) {
        pyf_raise(ret, "wait_any");
        goto out;
    }
    note_result(reqs[index], ret);
found:
    result = PyLong_FromSize_t(index);
out:
    PyMem_Free(reqs);
    PyMem_Free(handles);
    Py_DECREF(fast);
    return result;
}

static PyMethodDef request_methods[] = {
    {"wait", (PyCFunction)request_wait, METH_VARARGS | METH_KEYWORDS,
     "wait(timeout=None): until the request ends (the GIL released).  "
     "Raises its error (TimeoutError, PeerDeadError...), or TimeoutError "
     "when this wait's timeout passes first (the request goes on)."},
    {"test", (PyCFunction)request_test, METH_NOARGS,
     "test() -> bool: True once done; raises its error if it failed."},
    {"cancel", (PyCFunction)request_cancel, METH_NOARGS,
     "cancel(): ends it with CanceledError unless it has ended."},
    {"__enter__", pyf_enter, METH_NOARGS, NULL},
    {"__exit__", pyf_exit, METH_VARARGS, NULL},
    {"close", (PyCFunction)request_close, METH_NOARGS,
     "close(): frees it, cancelling it if it has not ended."},
    {"result", (PyCFunction)request_result, METH_NOARGS,
     "result() -> dict: what it did so far (ferry_req_result): status, "
     "bytes, bytes_done, posted_ns, ended_ns (None while it runs), "
     "failed_iov (None unless one piece failed) and error."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef request_getset[] = {
    {"done", (getter)request_done, NULL, "True once it has ended.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyAsyncMethods request_async = {
    .am_await = (unaryfunc)request_await,
};

PyTypeObject PyfRequest_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ferry.Request",
    .tp_doc = "A transfer under way: wait(), test(), cancel(), `await req`.",
    .tp_basicsize = sizeof(PyfRequest),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_dealloc = (destructor)request_dealloc,
    .tp_traverse = (traverseproc)request_traverse,
    .tp_methods = request_methods,
    .tp_getset = request_getset,
    .tp_as_async = &request_async,
};
