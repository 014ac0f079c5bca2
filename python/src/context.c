/*
 * ferry.Context: a ferry context, the peers it knows, and the calls that
 * take no other object (counters, notifications, statistics, metrics).
 */
#include "pyferry.h"

/* Closes every dependent's handle.  One at a time, each unlinked first
 * and held meanwhile: a close may release the GIL (ferry_meta_close), and
 * other threads may then drop or close the others. */
static void close_dependents(PyfContext *self)
{
    struct pyf_dependent *head = &self->dependents;

    while (head->next != head) {
        struct pyf_dependent *d = head->next;
        PyObject *owner = Py_NewRef(d->owner);

        pyf_dependent_unlink(d);
        d->close(owner);
        Py_DECREF(owner);
    }
}

/* ---- construction and closing -------------------------------------------- */

static PyObject *context_new(PyTypeObject *type, PyObject *args,
                             PyObject *kwargs)
{
    PyfContext *self;
    struct ferry_config cfg;
    int ret;

    if (PyTuple_GET_SIZE(args) != 0)
        return PyErr_Format(PyExc_TypeError,
                            "Context() takes keywords only (the "
                            "ferry_config fields: provider=..., ...)");
    self = (PyfContext *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->dependents.prev = self->dependents.next = &self->dependents;
    self->strings = PyList_New(0);
    self->peers = PyDict_New();
    if (self->strings == NULL || self->peers == NULL ||
        pyf_config_from_kwargs(kwargs, &cfg, self->strings) != 0) {
        Py_DECREF(self);
        return NULL;
    }
    PYF_WITHOUT_GIL(self, ret = ferry_context_create(&cfg, &self->handle));
    if (ret != 0) {
        pyf_raise(ret, "Context");
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static PyObject *context_close(PyfContext *self, PyObject *unused)
{
    (void)unused;
    if (self->waiting > 0)
        return pyf_raise_msg(FERRY_EBUSY,
                             "Context.close: %d call(s) wait on this context "
                             "in other threads; let them end first",
                             self->waiting);
    if (self->handle != NULL) {
        ferry_context_t *handle = self->handle;
        int ret;

        /* Marked closed first: the objects made from it check this. */
        self->handle = NULL;
        close_dependents(self);
        Py_BEGIN_ALLOW_THREADS
        ret = ferry_context_close(handle);
        Py_END_ALLOW_THREADS
        if (ret != 0)
            return pyf_raise(ret, "Context.close");
    }
    Py_RETURN_NONE;
}

static void context_dealloc(PyfContext *self)
{
    /* Only reached once nothing made from it is left: they hold it. */
    if (self->weakrefs != NULL)
        PyObject_ClearWeakRefs((PyObject *)self);
    if (self->handle != NULL)
        ferry_context_close(self->handle);
    Py_XDECREF(self->strings);
    Py_XDECREF(self->peers);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* ---- what the context is -------------------------------------------------- */

static PyObject *context_address(PyfContext *self, PyObject *unused)
{
    unsigned char buf[1024];
    size_t len = sizeof(buf);
    int ret;

    (void)unused;
    if (pyf_ctx_alive(self, "Context.address") != 0)
        return NULL;
    ret = ferry_context_address(self->handle, buf, &len);
    if (ret != 0)
        return pyf_raise(ret, "Context.address");
    return PyBytes_FromStringAndSize((const char *)buf, (Py_ssize_t)len);
}

static PyObject *context_info(PyfContext *self, PyObject *unused)
{
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;
    int ret;

    (void)unused;
    if (pyf_ctx_alive(self, "Context.info") != 0)
        return NULL;
    if ((ret = ferry_context_info(self->handle, &info)) != 0)
        return pyf_raise(ret, "Context.info");
    return Py_BuildValue("{s:s,s:s,s:s,s:I,s:I,s:s,s:s,s:z,s:s}", "provider",
                         info.provider, "fabric", info.fabric, "domain",
                         info.domain, "rails", info.nrails, "mr_mode",
                         info.mr_mode, "why", info.why, "device_path",
                         info.device_path, "local_provider",
                         info.local_provider, "local_why", info.local_why);
}

/* A per-rail counter of struct ferry_stats as a tuple of its 8 values. */
static PyObject *per_rail(const uint64_t v[8])
{
    return Py_BuildValue("(KKKKKKKK)", v[0], v[1], v[2], v[3], v[4], v[5],
                         v[6], v[7]);
}

static PyObject *context_stats(PyfContext *self, PyObject *unused)
{
    struct ferry_stats st = FERRY_STATS_INIT;
    PyObject *posted, *ops;
    int ret;

    (void)unused;
    if (pyf_ctx_alive(self, "Context.stats") != 0)
        return NULL;
    if ((ret = ferry_context_stats(self->handle, &st)) != 0)
        return pyf_raise(ret, "Context.stats");
    if ((posted = per_rail(st.bytes_posted)) == NULL)
        return NULL;
    if ((ops = per_rail(st.rma_ops_posted)) == NULL) {
        Py_DECREF(posted);
        return NULL;
    }
    return Py_BuildValue(
        "{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:N,s:K,s:K,s:K,s:K,s:K,s:K,"
        "s:K,s:N,s:K,s:K}",
        "rcache_hits", st.rcache_hits, "rcache_misses", st.rcache_misses,
        "rcache_invalidations", st.rcache_invalidations, "rcache_evictions",
        st.rcache_evictions, "rcache_entries", st.rcache_entries,
        "rcache_bytes", st.rcache_bytes, "oneshot_registrations",
        st.oneshot_registrations, "notifications_received",
        st.notifications_received, "notifications_unqueued",
        st.notifications_unqueued, "bytes_posted", posted, "staged_bytes",
        st.staged_bytes, "staged_chunks", st.staged_chunks,
        "staged_max_in_flight", st.staged_max_in_flight, "mirror_syncs",
        st.mirror_syncs, "notifications_in_writes",
        st.notifications_in_writes, "heartbeats", st.heartbeats,
        "peers_declared", st.peers_declared, "rma_ops_posted", ops,
        "ops_interrupted", st.ops_interrupted, "ops_posted_again",
        st.ops_posted_again);
}

/* Tries at a size before giving up: the text only outgrows the size the
 * last call asked for when peers come meanwhile, so a second try nearly
 * always fits. */
#define METRICS_TRIES 8

static PyObject *context_metrics_text(PyfContext *self, PyObject *unused)
{
    /* The last scrape's size and some room: one call, as a rule. */
    size_t cap = self->metrics_len > 0 ? self->metrics_len + 4096 : 32768;

    (void)unused;
    for (int tries = 0;; tries++) {
        size_t need = 0;
        PyObject *text;
        char *buf;
        int ret;

        /* At every try, beside the use of the handle: nothing closes it
         * between tries (the GIL is held), but that is this loop's
         * shape, not a promise. */
        if (pyf_ctx_alive(self, "Context.metrics_text") != 0)
            return NULL;
        if ((buf = PyMem_Malloc(cap)) == NULL)
            return PyErr_NoMemory();
        /* The scrape copies every peer's counters under the context lock
         * and formats them: other threads run meanwhile. */
        PYF_WITHOUT_GIL(self, ret = ferry_metrics_text(self->handle, buf,
                                                       cap, &need));
        if (ret == 0) {
            self->metrics_len = need;
            /* need counts the NUL.  Labels hold host and domain names;
             * "replace" keeps an odd byte among them from failing the
             * whole scrape. */
            text = PyUnicode_DecodeUTF8(buf, (Py_ssize_t)(need - 1),
                                        "replace");
            PyMem_Free(buf);
            return text;
        }
        PyMem_Free(buf);
        if (ret != FERRY_ENOSPC || tries + 1 == METRICS_TRIES)
            return pyf_raise(ret, "Context.metrics_text");
        /* Grown between the calls (peers added): room for more. */
        cap = need + need / 4;
    }
}

static PyObject *context_progress(PyfContext *self, PyObject *unused)
{
    int ret;

    (void)unused;
    if (pyf_ctx_alive(self, "Context.progress") != 0)
        return NULL;
    ret = ferry_progress(self->handle);
    if (ret < 0)
        return pyf_raise(ret, "Context.progress");
    return PyLong_FromLong(ret);
}

static PyObject *context_fd(PyfContext *self, PyObject *unused)
{
    int fd, ret;

    (void)unused;
    if (pyf_ctx_alive(self, "Context.fd") != 0)
        return NULL;
    if ((ret = ferry_context_fd(self->handle, &fd)) != 0)
        return pyf_raise(ret, "Context.fd");
    return PyLong_FromLong(fd);
}

static PyObject *context_arm(PyfContext *self, PyObject *unused)
{
    int ret;

    (void)unused;
    if (pyf_ctx_alive(self, "Context.arm") != 0)
        return NULL;
    ret = ferry_context_arm(self->handle);
    if (ret != 0 && ret != FERRY_EAGAIN)
        return pyf_raise(ret, "Context.arm");
    return PyBool_FromLong(ret == 0);
}

static PyObject *context_closed(PyfContext *self, void *unused)
{
    (void)unused;
    return PyBool_FromLong(self->handle == NULL);
}

/* ---- making objects -------------------------------------------------------- */

static PyObject *context_add_peer(PyfContext *self, PyObject *arg)
{
    Py_buffer addr;
    ferry_peer_t *handle = NULL;
    PyObject *peer;
    int ret;

    if (pyf_ctx_alive(self, "Context.add_peer") != 0 ||
        PyObject_GetBuffer(arg, &addr, PyBUF_SIMPLE) != 0)
        return NULL;
    ret = ferry_peer_add(self->handle, addr.buf, (size_t)addr.len, &handle);
    PyBuffer_Release(&addr);
    if (ret != 0)
        return pyf_raise(ret, "Context.add_peer");
    peer = (PyObject *)pyf_peer_of(self, handle, true);
    if (peer == NULL)
        ferry_peer_close(handle);
    return peer;
}

static int kind_of(PyObject *kind, int *out)
{
    const char *s;

    if (kind == NULL || kind == Py_None) {
        *out = FERRY_MEM_AUTO;
        return 0;
    }
    s = PyUnicode_Check(kind) ? PyUnicode_AsUTF8(kind) : NULL;
    if (s != NULL && strcmp(s, "host") == 0)
        *out = FERRY_MEM_HOST;
    else if (s != NULL && strcmp(s, "cuda") == 0)
        *out = FERRY_MEM_CUDA;
    else {
        pyf_raise_msg(FERRY_EINVAL,
                      "register: kind=%R; use \"host\", \"cuda\" or None "
                      "(from the object)",
                      kind);
        return -1;
    }
    return 0;
}

static PyObject *context_register(PyfContext *self, PyObject *args,
                                  PyObject *kwargs)
{
    static char *names[] = {"obj", "access", "kind", "device", NULL};
    PyObject *obj, *kind = NULL;
    unsigned access = FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE;
    int device = -1, k;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|IOi:register", names,
                                     &obj, &access, &kind, &device) ||
        pyf_ctx_alive(self, "Context.register") != 0 || kind_of(kind, &k))
        return NULL;
    return pyf_memory_new(self, obj, access, k, device);
}

static PyObject *context_metadata(PyfContext *self, PyObject *args,
                                  PyObject *kwargs)
{
    static char *names[] = {"name", "url", NULL};
    const char *name, *url = NULL;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s|z:metadata", names,
                                     &name, &url) ||
        pyf_ctx_alive(self, "Context.metadata") != 0)
        return NULL;
    return pyf_meta_open(self, url, name);
}

/* ---- counters and notifications -------------------------------------------- */

static PyObject *context_counter_get(PyfContext *self, PyObject *arg)
{
    unsigned long long id = PyLong_AsUnsignedLongLong(arg);
    uint64_t value;
    int ret;

    if ((id == (unsigned long long)-1 && PyErr_Occurred()) ||
        pyf_ctx_alive(self, "Context.counter_get") != 0)
        return NULL;
    if ((ret = ferry_counter_get(self->handle, id, &value)) != 0)
        return pyf_raise(ret, "Context.counter_get");
    return PyLong_FromUnsignedLongLong(value);
}

static PyObject *context_counter_wait(PyfContext *self, PyObject *args,
                                      PyObject *kwargs)
{
    unsigned long long id, expected;
    int ms, ret;

    if (pyf_counter_wait_args(args, kwargs, "Context.counter_wait", &id,
                              &expected, &ms) != 0 ||
        pyf_ctx_alive(self, "Context.counter_wait") != 0)
        return NULL;
    PYF_WITHOUT_GIL(self,
                    ret = ferry_counter_wait(self->handle, id, expected, ms));
    if (ret != 0)
        return pyf_raise_wait(ret, NULL);
    Py_RETURN_NONE;
}

static PyObject *context_counter_reset(PyfContext *self, PyObject *arg)
{
    unsigned long long id = PyLong_AsUnsignedLongLong(arg);
    int ret;

    if ((id == (unsigned long long)-1 && PyErr_Occurred()) ||
        pyf_ctx_alive(self, "Context.counter_reset") != 0)
        return NULL;
    if ((ret = ferry_counter_reset(self->handle, id)) != 0)
        return pyf_raise(ret, "Context.counter_reset");
    Py_RETURN_NONE;
}

/* max=: how many notifications a call may take.  0, or -1 with the
 * exception naming `what`. */
static int notify_max(Py_ssize_t max, const char *what)
{
    if (max >= 1 && max <= 1 << 20)
        return 0;
    pyf_raise_msg(FERRY_EINVAL, "%s: max=%zd; give 1 to %d", what, max,
                  1 << 20);
    return -1;
}

static PyObject *context_notify_poll(PyfContext *self, PyObject *args,
                                     PyObject *kwargs)
{
    static char *names[] = {"max", NULL};
    Py_ssize_t max = 64;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|n:notify_poll", names,
                                     &max) ||
        pyf_ctx_alive(self, "Context.notify_poll") != 0 ||
        notify_max(max, "notify_poll") != 0)
        return NULL;
    return pyf_notify_take(self, max, false, 0);
}

static PyObject *context_notify_wait(PyfContext *self, PyObject *args,
                                     PyObject *kwargs)
{
    static char *names[] = {"max", "timeout", NULL};
    Py_ssize_t max = 64;
    PyObject *timeout = Py_None;
    int ms;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|nO:notify_wait", names,
                                     &max, &timeout) ||
        pyf_ctx_alive(self, "Context.notify_wait") != 0 ||
        notify_max(max, "notify_wait") != 0 ||
        pyf_timeout_ms(timeout, -1, "notify_wait", &ms) != 0)
        return NULL;
    return pyf_notify_take(self, max, true, ms);
}

static PyObject *context_notifications(PyfContext *self, PyObject *args,
                                       PyObject *kwargs)
{
    static char *names[] = {"max", NULL};
    Py_ssize_t max = 64;
    PyObject *aio, *coro;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|n:notifications", names,
                                     &max) ||
        pyf_ctx_alive(self, "Context.notifications") != 0 ||
        notify_max(max, "notifications") != 0)
        return NULL;
    if ((aio = PyImport_ImportModule("ferry._aio")) == NULL)
        return NULL;
    coro = PyObject_CallMethod(aio, "notifications", "On", self, max);
    Py_DECREF(aio);
    return coro;
}

static PyMethodDef context_methods[] = {
    {"close", (PyCFunction)context_close, METH_NOARGS,
     "Destroys the context and every handle made from it (the objects stay "
     "and raise HandleError)."},
    {"__enter__", pyf_enter, METH_NOARGS, NULL},
    {"__exit__", pyf_exit, METH_VARARGS, NULL},
    {"address", (PyCFunction)context_address, METH_NOARGS,
     "address() -> bytes: the blob a peer passes to add_peer."},
    {"info", (PyCFunction)context_info, METH_NOARGS,
     "info() -> dict: provider, fabric, domain, rails, mr_mode, why (the "
     "sentence: why this provider and domain), local_provider (what peers "
     "of this host use when it is not provider: shm, or None), local_why, "
     "device_path (how device "
     "memory is registered, and why)."},
    {"stats", (PyCFunction)context_stats, METH_NOARGS,
     "stats() -> dict of the context's counters (ferry_context_stats)."},
    {"metrics_text", (PyCFunction)context_metrics_text, METH_NOARGS,
     "metrics_text() -> str: the context's metrics in Prometheus text "
     "exposition format 0.0.4 (ferry_metrics_text): bytes, operations and "
     "requests per peer, request durations and sizes, peer liveness, the "
     "registration cache, staging, notifications, fan-outs.  Serve it, or "
     "register ferry.prometheus.FerryCollector(ctx) with prometheus_client."},
    {"progress", (PyCFunction)context_progress, METH_NOARGS,
     "progress() -> int: completions handled."},
    {"fd", (PyCFunction)context_fd, METH_NOARGS,
     "fd() -> int: a descriptor that becomes readable when, armed, a "
     "request ended or a notification arrived (ferry_context_fd; needs "
     "progress_thread=True).  Do not close it."},
    {"arm", (PyCFunction)context_arm, METH_NOARGS,
     "arm() -> bool: True when armed (wait on fd()); False when something "
     "came since the last arm: look at the requests and notifications, "
     "then arm again."},
    {"add_peer", (PyCFunction)context_add_peer, METH_O,
     "add_peer(address) -> Peer, from another context's address()."},
    {"register", (PyCFunction)context_register, METH_VARARGS | METH_KEYWORDS,
     "register(obj, access=REMOTE_READ|REMOTE_WRITE, kind=None, device=-1) "
     "-> Memory.  obj: a buffer (bytearray, numpy array, memoryview), a "
     "torch tensor, an object with __cuda_array_interface__ or __dlpack__; "
     "contiguous.  The Memory keeps obj alive."},
    {"metadata", (PyCFunction)context_metadata, METH_VARARGS | METH_KEYWORDS,
     "metadata(name, url=None) -> Meta: joins the metadata service (etcd://, "
     "etcds://, bootstrap://HOST:PORT; None: config metadata or "
     "FERRY_METADATA): how contexts meet.  On bootstrap:// the first context "
     "to open the URL becomes the hub and the others join it, all with "
     "one token (oob_token or FERRY_OOB_TOKEN); Meta.url names the hub."},
    {"counter_get", (PyCFunction)context_counter_get, METH_O,
     "counter_get(id) -> int: the sum of notification values for id."},
    {"counter_wait", (PyCFunction)context_counter_wait,
     METH_VARARGS | METH_KEYWORDS,
     "counter_wait(id, expected, timeout=None): waits (without the GIL) "
     "until the sum for id reaches expected."},
    {"counter_reset", (PyCFunction)context_counter_reset, METH_O,
     "counter_reset(id)."},
    {"notify_poll", (PyCFunction)context_notify_poll,
     METH_VARARGS | METH_KEYWORDS,
     "notify_poll(max=64) -> list of Notification, oldest first."},
    {"notify_wait", (PyCFunction)context_notify_wait,
     METH_VARARGS | METH_KEYWORDS,
     "notify_wait(max=64, timeout=None) -> list of Notification: waits "
     "(without the GIL) until some are queued, then takes them as "
     "notify_poll does; [] when timeout seconds passed (None: no limit)."},
    {"notifications", (PyCFunction)context_notifications,
     METH_VARARGS | METH_KEYWORDS,
     "notifications(max=64) -> awaitable list of Notification: in asyncio, "
     "waits until some are queued, then takes them as notify_poll does.  "
     "With progress_thread=True the loop waits on fd(), no thread and no "
     "polling; without, it tests from 20 us to 1 ms apart.  Bound it with "
     "asyncio.wait_for."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef context_getset[] = {
    {"closed", (getter)context_closed, NULL, "True once closed.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject PyfContext_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ferry.Context",
    .tp_doc = "Context(**config): a ferry context.  Every field of "
              "struct ferry_config is a keyword (ferry.CONFIG_FIELDS); the "
              "others take ferry_config_init's defaults.",
    .tp_basicsize = sizeof(PyfContext),
    .tp_weaklistoffset = offsetof(PyfContext, weakrefs),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = context_new,
    .tp_dealloc = (destructor)context_dealloc,
    .tp_methods = context_methods,
    .tp_getset = context_getset,
};
