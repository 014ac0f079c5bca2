/*
 * ferry.Blocks (blocks of a region: a segment of a descriptor list) and
 * ferry.Prepared (a local and a remote list, validated once, posted by
 * index).  post() hands numpy index arrays to ferry_xfer_post as they
 * are: no Python loop, no copy, whatever the number of blocks.
 */
#include "pyferry.h"

#include <structmember.h>

typedef struct {
    PyObject_HEAD
    PyObject *region; /* Memory or RemoteMemory */
    Py_ssize_t block_size, count, offset, stride;
} PyfBlocks;

typedef struct {
    PyObject_HEAD
    PyfPeer *peer;
    PyObject *keep; /* the Blocks of both lists: their regions */
    ferry_dlist_t *local, *remote;
    ferry_prep_t *handle; /* NULL once closed */
    struct pyf_dependent dep;
} PyfPrepared;

/* ---- Blocks -------------------------------------------------------------------- */

/* stride as given (None: block, the default) into *stride; false with
 * the error raised when it is not an integer or is negative. */
static bool blocks_stride(PyObject *given, Py_ssize_t block,
                          Py_ssize_t *stride)
{
    if (given == NULL || given == Py_None) {
        *stride = block;
        return true;
    }
    if (!PyLong_Check(given)) {
        PyErr_Format(PyExc_TypeError,
                     "Blocks: stride must be an integer or None, not %.100s",
                     Py_TYPE(given)->tp_name);
        return false;
    }
    *stride = PyLong_AsSsize_t(given);
    if (*stride == -1 && PyErr_Occurred())
        return false;
    if (*stride < 0) {
        pyf_raise_msg(FERRY_EINVAL,
                      "Blocks: stride %zd is negative; give None (the "
                      "default: block_size, %zd) or a stride of block_size "
                      "(%zd) bytes or more",
                      *stride, block, block);
        return false;
    }
    return true;
}

static PyObject *blocks_new(PyTypeObject *type, PyObject *args,
                            PyObject *kwargs)
{
    static char *names[] = {"region", "block_size", "count", "offset",
                            "stride", NULL};
    PyObject *region, *given = NULL;
    Py_ssize_t block, count, offset = 0, stride;
    PyfBlocks *self;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "Onn|nO:Blocks", names,
                                     &region, &block, &count, &offset,
                                     &given))
        return NULL;
    if (!PyObject_TypeCheck(region, &PyfMemory_Type) &&
        !PyObject_TypeCheck(region, &PyfRemote_Type))
        return pyf_raise_msg(FERRY_EINVAL,
                             "Blocks: region must be a Memory or a "
                             "RemoteMemory, not %.100s",
                             Py_TYPE(region)->tp_name);
    if (!blocks_stride(given, block, &stride))
        return NULL;
    if (block <= 0 || count <= 0 || offset < 0 || stride < block)
        return pyf_raise_msg(FERRY_EINVAL,
                             "Blocks: block_size %zd, count %zd, offset %zd, "
                             "stride %zd; block_size and count must be "
                             "positive, offset >= 0, stride >= block_size "
                             "(default: block_size)",
                             block, count, offset, stride);
    self = (PyfBlocks *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->region = Py_NewRef(region);
    self->block_size = block;
    self->count = count;
    self->offset = offset;
    self->stride = stride;
    return (PyObject *)self;
}

/* For cycles through a Blocks (see request_traverse). */
static int blocks_traverse(PyfBlocks *self, visitproc visit, void *arg)
{
    Py_VISIT(self->region);
    return 0;
}

static void blocks_dealloc(PyfBlocks *self)
{
    PyObject_GC_UnTrack(self);
    Py_XDECREF(self->region);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *blocks_repr(PyfBlocks *self)
{
    return PyUnicode_FromFormat("ferry.Blocks(%R, block_size=%zd, count=%zd, "
                                "offset=%zd, stride=%zd)",
                                self->region, self->block_size, self->count,
                                self->offset, self->stride);
}

static PyMemberDef blocks_members[] = {
    {"region", T_OBJECT, offsetof(PyfBlocks, region), READONLY, NULL},
    {"block_size", T_PYSSIZET, offsetof(PyfBlocks, block_size), READONLY,
     NULL},
    {"count", T_PYSSIZET, offsetof(PyfBlocks, count), READONLY, NULL},
    {"offset", T_PYSSIZET, offsetof(PyfBlocks, offset), READONLY, NULL},
    {"stride", T_PYSSIZET, offsetof(PyfBlocks, stride), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject PyfBlocks_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ferry.Blocks",
    .tp_doc = "Blocks(region, block_size, count, offset=0, stride=None): "
              "count blocks of block_size bytes, stride bytes apart, from "
              "offset in a Memory or RemoteMemory (a paged KV cache).",
    .tp_basicsize = sizeof(PyfBlocks),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = blocks_new,
    .tp_dealloc = (destructor)blocks_dealloc,
    .tp_traverse = (traverseproc)blocks_traverse,
    .tp_repr = (reprfunc)blocks_repr,
    .tp_members = blocks_members,
};

/* ---- preparing -------------------------------------------------------------------- */

static int add_blocks(ferry_dlist_t *dl, bool local, PyObject *b,
                      const char *side)
{
    struct ferry_dlist_segment seg = {0};
    PyfBlocks *blocks = (PyfBlocks *)b;
    char what[64];
    int ret;

    snprintf(what, sizeof(what), "prepare: %s blocks", side);
    if (!PyObject_TypeCheck(b, &PyfBlocks_Type)) {
        pyf_raise_msg(FERRY_EINVAL,
                      "%s must be ferry.Blocks (or a list of them), not "
                      "%.100s",
                      what, Py_TYPE(b)->tp_name);
        return -1;
    }
    if (local) {
        PyfMemory *mem;
        if (pyf_check_memory(blocks->region, what, &mem) != 0)
            return -1;
        seg.mem = mem->handle;
    } else {
        PyfRemote *rmem;
        if (pyf_check_remote(blocks->region, what, &rmem) != 0)
            return -1;
        seg.rmem = rmem->handle;
    }
    seg.offset = (uint64_t)blocks->offset;
    seg.block_size = (size_t)blocks->block_size;
    seg.count = (size_t)blocks->count;
    seg.stride = (size_t)blocks->stride;
    if ((ret = ferry_dlist_add(dl, &seg, NULL)) != 0) {
        pyf_raise(ret, what);
        return -1;
    }
    return 0;
}

/* One list from a Blocks or a list of them; appends them to keep. */
static int make_list(PyfContext *ctx, bool local, PyObject *spec,
                     PyObject *keep, ferry_dlist_t **dl)
{
    const char *side = local ? "local" : "remote";
    PyObject *seq;
    int ret;

    if ((ret = ferry_dlist_create(ctx->handle,
                                  local ? FERRY_DLIST_LOCAL
                                        : FERRY_DLIST_REMOTE,
                                  side, dl)) != 0) {
        pyf_raise(ret, "prepare");
        return -1;
    }
    seq = PyObject_TypeCheck(spec, &PyfBlocks_Type)
              ? PyTuple_Pack(1, spec)
              : PySequence_Fast(spec, "prepare: give ferry.Blocks or a list "
                                      "of them");
    if (seq == NULL)
        return -1;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *b = PySequence_Fast_GET_ITEM(seq, i);
        if (add_blocks(*dl, local, b, side) != 0 ||
            PyList_Append(keep, b) != 0) {
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    return 0;
}

/* Frees the prepared transfer and its lists (the dependent's close; see
 * pyferry.h).  One with requests in flight -- only at Context.close, as
 * requests hold their Prepared -- is left to ferry_context_close, which
 * closes it and its lists (ferry(7), "Ownership"). */
static void prepared_free_handles(PyObject *obj)
{
    PyfPrepared *self = (PyfPrepared *)obj;

    if (ferry_xfer_close(self->handle) == 0) {
        ferry_dlist_close(self->local);
        ferry_dlist_close(self->remote);
    }
    self->handle = NULL;
    self->local = self->remote = NULL;
}

PyObject *pyf_prepare(PyfPeer *peer, int op, PyObject *local,
                      PyObject *remote)
{
    PyfPrepared *self = PyObject_GC_New(PyfPrepared, &PyfPrepared_Type);
    int ret;

    if (self == NULL)
        return NULL;
    self->peer = (PyfPeer *)Py_NewRef(peer);
    self->local = self->remote = NULL;
    self->handle = NULL;
    pyf_dependent_link(peer->ctx, &self->dep, (PyObject *)self,
                       prepared_free_handles);
    self->keep = PyList_New(0);
    PyObject_GC_Track(self);
    if (self->keep == NULL ||
        make_list(peer->ctx, true, local, self->keep, &self->local) != 0 ||
        make_list(peer->ctx, false, remote, self->keep, &self->remote) != 0)
        goto fail;
    ret = ferry_xfer_prepare(peer->handle, (enum ferry_op)op, self->local,
                             self->remote, &self->handle);
    if (ret != 0) {
        pyf_raise(ret, "prepare");
        goto fail;
    }
    return (PyObject *)self;
fail:
    Py_DECREF(self);
    return NULL;
}

/* ---- posting ---------------------------------------------------------------------- */

static int prepared_alive(PyfPrepared *self, const char *what)
{
    return pyf_alive((PyObject *)self, self->peer->ctx, self->handle, what);
}

/* Prepared.post(local_idx, remote_idx, notify=None, timeout=None), with
 * the vectorcall convention: no argument tuple or dict is built. */
static PyObject *prepared_post(PyfPrepared *self, PyObject *const *args,
                               Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"local_idx", "remote_idx", "notify",
                                        "timeout"};
    PyObject *arg[4] = {NULL, NULL, NULL, NULL};
    PyObject *lobj, *robj;
    struct ferry_xfer_opts opts;
    struct pyf_indices li, ri;
    ferry_req_t *req = NULL;
    int ret = -1;

    if (pyf_fastcall_args("post", names, 4, 2, args, nargs, kwnames, arg) ||
        prepared_alive(self, "Prepared.post") != 0 ||
        pyf_notify_opts(arg[2], arg[3], &opts) != 0)
        return NULL;
    lobj = arg[0];
    robj = arg[1];
    if (pyf_indices_get(lobj, "local_idx", &li) != 0)
        goto out_local;
    if (pyf_indices_get(robj, "remote_idx", &ri) != 0)
        goto out;
    if (li.n != ri.n) {
        pyf_raise_msg(FERRY_EINVAL,
                      "post: local_idx has %zu indices and remote_idx %zu; "
                      "block local_idx[i] moves to remote_idx[i]",
                      li.n, ri.n);
        goto out_both;
    }
    ret = ferry_xfer_post(self->handle, li.idx, ri.idx, li.n, &opts, &req);
    if (ret != 0)
        pyf_raise(ret, "Prepared.post");
out_both:
    pyf_indices_release(&ri);
out:
    pyf_indices_release(&li);
out_local:
    if (ret != 0)
        return NULL;
    /* ferry copied the indices; the request holds the lists' regions. */
    return pyf_request_new(self->peer->ctx, req, Py_NewRef(self));
}

static PyObject *prepared_close(PyfPrepared *self, PyObject *unused)
{
    int ret;

    (void)unused;
    if ((ret = ferry_xfer_close(self->handle)) != 0)
        return pyf_raise(ret, "Prepared.close");
    self->handle = NULL;
    prepared_free_handles((PyObject *)self);
    Py_RETURN_NONE;
}

/* For cycles through a Prepared (see request_traverse). */
static int prepared_traverse(PyfPrepared *self, visitproc visit, void *arg)
{
    Py_VISIT(self->keep);
    return 0;
}

static void prepared_dealloc(PyfPrepared *self)
{
    PyObject_GC_UnTrack(self);
    /* Requests hold their Prepared: none is in flight here. */
    pyf_dependent_unlink(&self->dep);
    prepared_free_handles((PyObject *)self);
    Py_XDECREF(self->keep);
    Py_DECREF(self->peer);
    PyObject_GC_Del(self);
}

static PyObject *prepared_count(PyfPrepared *self, ferry_dlist_t *dl)
{
    if (prepared_alive(self, "Prepared") != 0)
        return NULL;
    return PyLong_FromSize_t(ferry_dlist_count(dl));
}

static PyObject *prepared_local_count(PyfPrepared *self, void *unused)
{
    (void)unused;
    return prepared_count(self, self->local);
}

static PyObject *prepared_remote_count(PyfPrepared *self, void *unused)
{
    (void)unused;
    return prepared_count(self, self->remote);
}

static PyMethodDef prepared_methods[] = {
    {"post", (PyCFunction)(void (*)(void))prepared_post,
     METH_FASTCALL | METH_KEYWORDS,
     "post(local_idx, remote_idx, notify=None, timeout=None) -> Request: "
     "moves block local_idx[i] <-> remote_idx[i] for every i, as one "
     "request.  Indices: uint32 numpy arrays (or lists of ints)."},
    {"__enter__", pyf_enter, METH_NOARGS, NULL},
    {"__exit__", pyf_exit, METH_VARARGS, NULL},
    {"close", (PyCFunction)prepared_close, METH_NOARGS,
     "close(): releases the lists (BusyError while requests run)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef prepared_getset[] = {
    {"local_count", (getter)prepared_local_count, NULL,
     "Blocks in the local list.", NULL},
    {"remote_count", (getter)prepared_remote_count, NULL,
     "Blocks in the remote list.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject PyfPrepared_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ferry.Prepared",
    .tp_doc = "Descriptor lists validated once (Peer.prepare); post by "
              "index.",
    .tp_basicsize = sizeof(PyfPrepared),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_dealloc = (destructor)prepared_dealloc,
    .tp_traverse = (traverseproc)prepared_traverse,
    .tp_methods = prepared_methods,
    .tp_getset = prepared_getset,
};
