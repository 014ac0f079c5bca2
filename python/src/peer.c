/*
 * ferry.Peer: another context, and the transfers towards it.
 */
#include "pyferry.h"

/* ---- the peer table: one Peer object per handle (weakly) ------------------ */

PyObject *pyf_peer_lookup(PyfContext *ctx, ferry_peer_t *handle)
{
    PyObject *key = PyLong_FromVoidPtr(handle);
    PyObject *ref = key != NULL ? PyDict_GetItemWithError(ctx->peers, key)
                                : NULL;
    PyObject *peer = ref != NULL ? PyWeakref_GetObject(ref) : Py_None;

    Py_XDECREF(key);
    if (PyErr_Occurred())
        return NULL;
    return Py_NewRef(peer != NULL ? peer : Py_None);
}

PyfPeer *pyf_peer_of(PyfContext *ctx, ferry_peer_t *handle, bool owned)
{
    PyObject *known = pyf_peer_lookup(ctx, handle);
    PyObject *key, *ref;
    PyfPeer *peer;

    if (known == NULL || known != Py_None)
        return (PyfPeer *)known;
    Py_DECREF(known);
    peer = PyObject_New(PyfPeer, &PyfPeer_Type);
    if (peer == NULL)
        return NULL;
    peer->ctx = (PyfContext *)Py_NewRef(ctx);
    peer->handle = handle;
    peer->owned = owned;
    peer->weakrefs = NULL;
    key = PyLong_FromVoidPtr(handle);
    ref = PyWeakref_NewRef((PyObject *)peer, NULL);
    if (key == NULL || ref == NULL ||
        PyDict_SetItem(ctx->peers, key, ref) != 0) {
        peer->handle = NULL; /* not ours to remove on the way out */
        Py_CLEAR(peer);
    }
    Py_XDECREF(key);
    Py_XDECREF(ref);
    return peer;
}

void pyf_peer_forget(PyfContext *ctx, ferry_peer_t *handle)
{
    PyObject *key = PyLong_FromVoidPtr(handle);

    if (key == NULL || PyDict_DelItem(ctx->peers, key) != 0)
        PyErr_Clear();
    Py_XDECREF(key);
}

static int peer_alive(PyfPeer *self, const char *what)
{
    return pyf_alive((PyObject *)self, self->ctx, self->handle, what);
}

static PyObject *peer_close(PyfPeer *self, PyObject *unused)
{
    int ret;

    (void)unused;
    if (self->handle == NULL || self->ctx->handle == NULL)
        Py_RETURN_NONE;
    if (!self->owned)
        return pyf_raise_msg(FERRY_EBUSY,
                             "Peer.close: this peer came from the metadata "
                             "service (Meta.peer), which owns it; it goes "
                             "with its context");
    if ((ret = ferry_peer_close(self->handle)) != 0)
        return pyf_raise(ret, "Peer.close");
    pyf_peer_forget(self->ctx, self->handle);
    self->handle = NULL;
    Py_RETURN_NONE;
}

static void peer_dealloc(PyfPeer *self)
{
    if (self->weakrefs != NULL)
        PyObject_ClearWeakRefs((PyObject *)self);
    if (self->handle != NULL && self->ctx->handle != NULL) {
        /* The table's upkeep must not lose an exception in flight. */
        PyObject *type, *value, *tb;

        PyErr_Fetch(&type, &value, &tb);
        pyf_peer_forget(self->ctx, self->handle);
        PyErr_Restore(type, value, tb);
        /* A peer still busy (a counter wait in another context's thread)
         * stays with the context. */
        if (self->owned)
            ferry_peer_close(self->handle);
    }
    Py_DECREF(self->ctx);
    PyObject_Free(self);
}

static PyObject *peer_import_region(PyfPeer *self, PyObject *arg)
{
    Py_buffer blob;
    ferry_rmem_t *handle = NULL;
    int ret;

    if (peer_alive(self, "Peer.import_region") != 0 ||
        PyObject_GetBuffer(arg, &blob, PyBUF_SIMPLE) != 0)
        return NULL;
    ret = ferry_rmem_import(self->handle, blob.buf, (size_t)blob.len, &handle);
    PyBuffer_Release(&blob);
    if (ret != 0)
        return pyf_raise(ret, "Peer.import_region");
    return pyf_remote_new(self, handle);
}

/* ---- write and read ---------------------------------------------------------- */

/* One (local, offset, remote, remote_offset, length) piece, as parsed. */
struct piece {
    PyObject *local;
    Py_ssize_t offset;
    PyObject *remote;
    Py_ssize_t remote_offset;
    PyObject *length; /* None: the rest of the local region */
};

static int fill_iov(const struct piece *p, bool into_local, size_t i,
                    struct ferry_iov *iov)
{
    PyfMemory *mem;
    PyfRemote *rmem;
    char what[48];

    snprintf(what, sizeof(what), "piece %zu", i);
    if (pyf_check_memory(p->local, what, &mem) != 0 ||
        pyf_check_remote(p->remote, what, &rmem) != 0)
        return -1;
    if (into_local && mem->target.readonly) {
        pyf_raise_msg(FERRY_EINVAL,
                      "%s: a read lands in local memory, and this Memory's "
                      "object is read-only",
                      what);
        return -1;
    }
    if (p->offset < 0 || p->remote_offset < 0 ||
        (size_t)p->offset > mem->target.len) {
        pyf_raise_msg(FERRY_ERANGE,
                      "%s: offset %zd / remote_offset %zd; offsets are from 0 "
                      "to the region's length (%zu local)",
                      what, p->offset, p->remote_offset, mem->target.len);
        return -1;
    }
    iov->local = (char *)mem->target.addr + p->offset;
    iov->lmem = mem->handle;
    iov->rmem = rmem->handle;
    iov->roffset = (uint64_t)p->remote_offset;
    if (p->length == NULL || p->length == Py_None) {
        iov->len = mem->target.len - (size_t)p->offset;
        return 0;
    }
    iov->len = PyLong_AsSize_t(p->length);
    if (iov->len == (size_t)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        pyf_raise_msg(FERRY_EINVAL, "%s: length %R is not a byte count", what,
                      p->length);
        return -1;
    }
    return 0;
}

/* An entry of a list: (local, remote_offset, length), (local, offset,
 * remote_offset, length) or (local, offset, remote, remote_offset,
 * length). */
static int parse_entry(PyObject *e, PyObject *remote, size_t i,
                       struct piece *p)
{
    Py_ssize_t n = PyTuple_Check(e) ? PyTuple_GET_SIZE(e) : 0;

    memset(p, 0, sizeof(*p));
    p->remote = remote;
    if (n == 3 && PyArg_ParseTuple(e, "OnO", &p->local, &p->remote_offset,
                                   &p->length))
        goto check;
    if (n == 4 && PyArg_ParseTuple(e, "OnnO", &p->local, &p->offset,
                                   &p->remote_offset, &p->length))
        goto check;
    if (n == 5 && PyArg_ParseTuple(e, "OnOnO", &p->local, &p->offset,
                                   &p->remote, &p->remote_offset, &p->length))
        goto check;
    PyErr_Clear();
    pyf_raise_msg(FERRY_EINVAL,
                  "entry %zu of the list is %R; give (local, remote_offset, "
                  "length), (local, offset, remote_offset, length) or (local, "
                  "offset, remote, remote_offset, length)",
                  i, e);
    return -1;
check:
    if (p->remote == NULL || p->remote == Py_None) {
        pyf_raise_msg(FERRY_EINVAL,
                      "entry %zu names no remote region: pass remote= or a "
                      "5-tuple",
                      i);
        return -1;
    }
    return 0;
}

/* Builds the iovs of a call and the tuple of objects they use. */
static int parse_pieces(PyObject *local, PyObject *remote, Py_ssize_t offset,
                        Py_ssize_t remote_offset, PyObject *length,
                        bool into_local, struct ferry_iov **iovs, size_t *n,
                        PyObject **keep)
{
    struct piece p = {local, offset, remote, remote_offset, length};
    bool list = PyList_Check(local) || PyTuple_Check(local);
    Py_ssize_t count = list ? PySequence_Fast_GET_SIZE(local) : 1;

    if (count == 0) {
        pyf_raise_msg(FERRY_EINVAL, "the list of pieces is empty");
        return -1;
    }
    *iovs = PyMem_Calloc((size_t)count, sizeof(**iovs));
    *keep = PyTuple_New(2 * count);
    if (*iovs == NULL || *keep == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (list &&
            parse_entry(PySequence_Fast_GET_ITEM(local, i), remote,
                        (size_t)i, &p) != 0)
            goto fail;
        if (fill_iov(&p, into_local, (size_t)i, &(*iovs)[i]) != 0)
            goto fail;
        PyTuple_SET_ITEM(*keep, 2 * i, Py_NewRef(p.local));
        PyTuple_SET_ITEM(*keep, 2 * i + 1, Py_NewRef(p.remote));
    }
    *n = (size_t)count;
    return 0;
fail:
    PyMem_Free(*iovs);
    Py_CLEAR(*keep);
    if (!PyErr_Occurred())
        PyErr_NoMemory();
    return -1;
}

static PyObject *transfer(PyfPeer *self, PyObject *args, PyObject *kwargs,
                          bool write)
{
    static char *names[] = {"local",  "remote", "offset",  "remote_offset",
                            "length", "notify", "timeout", NULL};
    const char *what = write ? "Peer.write" : "Peer.read";
    /* remote defaults to None, not NULL: a single Memory given without
     * one is then refused by pyf_check_remote rather than dereferenced. */
    PyObject *local, *remote = Py_None, *length = NULL, *notify = NULL,
                     *timeout = NULL, *keep;
    Py_ssize_t offset = 0, remote_offset = 0;
    struct ferry_xfer_opts opts;
    struct ferry_iov *iovs;
    ferry_req_t *req = NULL;
    size_t n;
    int ret;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|OnnOOO", names, &local,
                                     &remote, &offset, &remote_offset,
                                     &length, &notify, &timeout) ||
        peer_alive(self, what) != 0 ||
        pyf_notify_opts(notify, timeout, &opts) != 0 ||
        parse_pieces(local, remote, offset, remote_offset, length, !write,
                     &iovs, &n, &keep) != 0)
        return NULL;
    ret = write ? ferry_write(self->handle, iovs, n, &opts, &req)
                : ferry_read(self->handle, iovs, n, &opts, &req);
    PyMem_Free(iovs);
    if (ret != 0) {
        Py_DECREF(keep);
        return pyf_raise(ret, what);
    }
    return pyf_request_new(self->ctx, req, keep);
}

static PyObject *peer_write(PyfPeer *self, PyObject *args, PyObject *kwargs)
{
    return transfer(self, args, kwargs, true);
}

static PyObject *peer_read(PyfPeer *self, PyObject *args, PyObject *kwargs)
{
    return transfer(self, args, kwargs, false);
}

static PyObject *peer_notify(PyfPeer *self, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"id", "value", "timeout", NULL};
    PyObject *id, *value, *timeout = NULL, *pair;
    struct ferry_xfer_opts opts;
    ferry_req_t *req = NULL;
    int ret;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|O:notify", names, &id,
                                     &value, &timeout) ||
        peer_alive(self, "Peer.notify") != 0)
        return NULL;
    pair = PyTuple_Pack(2, id, value);
    ret = pair != NULL ? pyf_notify_opts(pair, timeout, &opts) : -1;
    Py_XDECREF(pair);
    if (ret != 0)
        return NULL;
    ret = ferry_notify_send(self->handle, opts.notify_id, opts.notify_value,
                            &opts, &req);
    if (ret != 0)
        return pyf_raise(ret, "Peer.notify");
    /* The request holds the Peer, as a write's holds it through its
     * RemoteMemory: dropped meanwhile, its handle could not be removed. */
    return pyf_request_new(self->ctx, req, PyTuple_Pack(1, (PyObject *)self));
}

/* ---- liveness ------------------------------------------------------------------ */

static PyObject *peer_state(PyfPeer *self, PyObject *unused)
{
    static const char *const states[] = {"connecting", "up", "unreachable",
                                         "dead"};
    enum ferry_peer_state st;
    char why[256];
    int ret;

    (void)unused;
    if (peer_alive(self, "Peer.state") != 0)
        return NULL;
    if ((ret = ferry_peer_state(self->handle, &st, why, sizeof(why))) != 0)
        return pyf_raise(ret, "Peer.state");
    return Py_BuildValue("(ss)", states[st], why);
}

static PyObject *peer_info(PyfPeer *self, PyObject *unused)
{
    struct ferry_peer_info info = FERRY_PEER_INFO_INIT;
    int ret;

    (void)unused;
    if (peer_alive(self, "Peer.info") != 0)
        return NULL;
    if ((ret = ferry_peer_info(self->handle, &info)) != 0)
        return pyf_raise(ret, "Peer.info");
    return Py_BuildValue("{s:s,s:s,s:I,s:O,s:s}", "label", info.label,
                         "provider", info.provider, "rails", info.nrails,
                         "shm", info.shm ? Py_True : Py_False, "why",
                         info.why);
}

static PyObject *peer_watch(PyfPeer *self, PyObject *args)
{
    int on = 1, ret;

    if (!PyArg_ParseTuple(args, "|p:watch", &on) ||
        peer_alive(self, "Peer.watch") != 0)
        return NULL;
    if ((ret = ferry_peer_watch(self->handle, on)) != 0)
        return pyf_raise(ret, "Peer.watch");
    Py_RETURN_NONE;
}

static PyObject *peer_declare_dead(PyfPeer *self, PyObject *args)
{
    const char *why = NULL;
    int ret;

    if (!PyArg_ParseTuple(args, "|z:declare_dead", &why) ||
        peer_alive(self, "Peer.declare_dead") != 0)
        return NULL;
    if ((ret = ferry_peer_declare_dead(self->handle, why)) != 0)
        return pyf_raise(ret, "Peer.declare_dead");
    Py_RETURN_NONE;
}

static PyObject *peer_counter_wait(PyfPeer *self, PyObject *args,
                                   PyObject *kwargs)
{
    unsigned long long id, expected;
    int ms, ret;

    if (pyf_counter_wait_args(args, kwargs, "Peer.counter_wait", &id,
                              &expected, &ms) != 0 ||
        peer_alive(self, "Peer.counter_wait") != 0)
        return NULL;
    PYF_WITHOUT_GIL(self->ctx, ret = ferry_counter_wait_peer(
                                   self->handle, id, expected, ms));
    if (ret != 0)
        return pyf_raise_wait(ret, NULL);
    Py_RETURN_NONE;
}

static PyObject *peer_prepare(PyfPeer *self, PyObject *args)
{
    PyObject *local, *remote;
    int op;

    if (!PyArg_ParseTuple(args, "iOO:prepare", &op, &local, &remote) ||
        peer_alive(self, "Peer.prepare") != 0)
        return NULL;
    if (op != FERRY_OP_WRITE && op != FERRY_OP_READ)
        return pyf_raise_msg(FERRY_EINVAL,
                             "Peer.prepare: op %d; use ferry.WRITE or "
                             "ferry.READ",
                             op);
    return pyf_prepare(self, op, local, remote);
}

static PyObject *peer_context(PyfPeer *self, void *unused)
{
    (void)unused;
    return Py_NewRef(self->ctx);
}

static PyObject *peer_closed(PyfPeer *self, void *unused)
{
    (void)unused;
    return PyBool_FromLong(self->handle == NULL || self->ctx->handle == NULL);
}

static PyMethodDef peer_methods[] = {
    {"import_region", (PyCFunction)peer_import_region, METH_O,
     "import_region(blob) -> RemoteMemory, from the peer's Memory.export()."},
    {"write", (PyCFunction)peer_write, METH_VARARGS | METH_KEYWORDS,
     "write(local, remote, offset=0, remote_offset=0, length=None, "
     "notify=None, timeout=None) -> Request.  local: a Memory, or a list "
     "of (local, remote_offset, length) / (local, offset, remote_offset, "
     "length) / (local, offset, remote, remote_offset, length).  notify: "
     "(id, value) delivered after the data.  timeout: seconds (None: the "
     "context's)."},
    {"read", (PyCFunction)peer_read, METH_VARARGS | METH_KEYWORDS,
     "read(...) -> Request: as write, from the remote region into local."},
    {"notify", (PyCFunction)peer_notify, METH_VARARGS | METH_KEYWORDS,
     "notify(id, value, timeout=None) -> Request: a notification alone."},
    {"info", (PyCFunction)peer_info, METH_NOARGS,
     "info() -> dict: label (host and address), provider (the transport "
     "it is reached over: shm for a peer of this host when both sides "
     "have it), rails, shm, why (the sentence)."},
    {"state", (PyCFunction)peer_state, METH_NOARGS,
     "state() -> (\"connecting\"|\"up\"|\"unreachable\"|\"dead\", why)."},
    {"watch", (PyCFunction)peer_watch, METH_VARARGS,
     "watch(on=True): check liveness while nothing waits on it."},
    {"declare_dead", (PyCFunction)peer_declare_dead, METH_VARARGS,
     "declare_dead(why=None)."},
    {"counter_wait", (PyCFunction)peer_counter_wait,
     METH_VARARGS | METH_KEYWORDS,
     "counter_wait(id, expected, timeout=None): as Context.counter_wait, "
     "ending with PeerDeadError when this peer dies."},
    {"prepare", (PyCFunction)peer_prepare, METH_VARARGS,
     "prepare(op, local, remote) -> Prepared.  op: ferry.WRITE or "
     "ferry.READ; local, remote: ferry.Blocks, or lists of them."},
    {"__enter__", pyf_enter, METH_NOARGS, NULL},
    {"__exit__", pyf_exit, METH_VARARGS, NULL},
    {"close", (PyCFunction)peer_close, METH_NOARGS,
     "close(): removes a peer from add_peer (BusyError while its regions "
     "are imported or requests run)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef peer_getset[] = {
    {"context", (getter)peer_context, NULL, "The Context.", NULL},
    {"closed", (getter)peer_closed, NULL, "True once closed.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject PyfPeer_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ferry.Peer",
    .tp_doc = "A peer (Context.add_peer, Meta.peer).",
    .tp_basicsize = sizeof(PyfPeer),
    .tp_weaklistoffset = offsetof(PyfPeer, weakrefs),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)peer_dealloc,
    .tp_methods = peer_methods,
    .tp_getset = peer_getset,
};
