/*
 * The ferry Python module (ferry._ferry): the objects and the helpers its
 * files share.  Each Python object wraps one ferry handle and holds a
 * strong reference to what the handle depends on -- a Memory to its
 * Context and the object whose memory it registered, a RemoteMemory to
 * its Peer, a Request to everything its operations touch -- so Python's
 * collector can free them in any order.
 *
 * Context.close() destroys the C context, and with it every handle made
 * from it; the objects stay, and any call on them raises HandleError.
 * Every method therefore checks its context (pyf_ctx_alive) before it
 * touches a handle.
 */
#ifndef PYFERRY_H
#define PYFERRY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <ferry.h>

#include <stdbool.h>
#include <stdint.h>

/*
 * A Meta or a Prepared is linked into its context while it lives, and
 * Context.close() closes its handle first, through the object:
 * ferry_context_close would close it too, but behind the object's back,
 * leaving it a freed handle to use or close again.  So such a handle is
 * non-NULL only while its C context exists, and closing it needs no
 * check of the context.
 */
struct pyf_dependent {
    struct pyf_dependent *prev, *next; /* a ring; unlinked: itself */
    PyObject *owner;
    void (*close)(PyObject *owner); /* closes the handle (GIL held) */
};

typedef struct {
    PyObject_HEAD
    ferry_context_t *handle; /* NULL once closed */
    struct pyf_dependent dependents; /* the ring's head */
    PyObject *strings;       /* bytes objects the config points into */
    PyObject *peers;         /* {handle address: weakref to its Peer} */
    int waiting;             /* calls running without the GIL */
    PyObject *weakrefs;      /* asyncio's reactors key on it (_aio.py) */
    size_t metrics_len;      /* bytes the last metrics_text took: the next
                                starts there, so a scrape is one call */
} PyfContext;

typedef struct {
    PyObject_HEAD
    PyfContext *ctx;
    ferry_peer_t *handle; /* NULL once closed */
    bool owned;           /* ours to remove (add_peer), else the context's */
    PyObject *weakrefs;
} PyfPeer;

/* Where registered memory lives and what keeps it alive. */
struct pyf_target {
    void *addr;
    size_t len;
    enum ferry_mem_kind kind;
    int device;        /* CUDA ordinal, -1: the pointer's */
    bool readonly;
    bool has_view;     /* view holds a buffer-protocol export */
    Py_buffer view;
    PyObject *owner;   /* the tensor, array interface or DLPack capsule */
    void (*release)(struct pyf_target *t); /* frees a DLPack tensor */
};

typedef struct {
    PyObject_HEAD
    PyfContext *ctx;
    ferry_mem_t *handle; /* NULL once closed */
    PyObject *obj;       /* what was registered, as given */
    struct pyf_target target;
    unsigned access;
    PyObject *weakrefs; /* a cache of registrations may hold them weakly */
} PyfMemory;

typedef struct {
    PyObject_HEAD
    PyfPeer *peer;
    ferry_rmem_t *handle; /* NULL once closed */
} PyfRemote;

typedef struct {
    PyObject_HEAD
    PyfContext *ctx;
    ferry_req_t *handle;
    PyObject *keep;   /* what the operations touch, until the request goes */
    int result;       /* FERRY_EINPROGRESS until it ends */
    int waiting;      /* threads in wait(): close() refuses meanwhile */
    PyObject *why;    /* the sentence it ended with (str), or NULL */
} PyfRequest;

extern PyTypeObject PyfContext_Type, PyfPeer_Type, PyfMemory_Type,
    PyfRemote_Type, PyfRequest_Type, PyfBlocks_Type, PyfPrepared_Type,
    PyfMeta_Type, PyfDevice_Type;

/* ---- errors (errors.c) --------------------------------------------------- */

int pyf_errors_init(PyObject *module);
/* Raises the exception of ferry code err with ferry_last_error()'s
 * sentence (call it right after the failing call, in the same thread),
 * prefixed by what (may be NULL).  Returns NULL. */
PyObject *pyf_raise(int err, const char *what);
/* Raises the exception of ferry code err with this sentence.  NULL. */
PyObject *pyf_raise_msg(int err, const char *fmt, ...);
/* pyf_raise after a call that waits: its expired wait (FERRY_EAGAIN)
 * raises TimeoutError, with ferry's sentence. */
PyObject *pyf_raise_wait(int err, const char *what);
/* The exception class of a ferry code (borrowed). */
PyObject *pyf_error_class(int err);

/* ---- lifetimes (lifetime.c; the peer table: peer.c) ---------------------- */

/* 0 when ctx is open, else -1 with HandleError naming `what`. */
int pyf_ctx_alive(PyfContext *ctx, const char *what);
/* 0 when ctx is open and obj's handle is not NULL, else -1 with
 * HandleError naming `what` and obj's type ("this Meta was closed"). */
int pyf_alive(PyObject *obj, PyfContext *ctx, const void *handle,
              const char *what);
/* The Peer object of a handle: the live one if there is one, else a new
 * one (owned says whether Peer.close may remove the handle). */
PyfPeer *pyf_peer_of(PyfContext *ctx, ferry_peer_t *handle, bool owned);
/* The Peer object of a handle only if one is alive (new reference), else
 * None. */
PyObject *pyf_peer_lookup(PyfContext *ctx, ferry_peer_t *handle);
void pyf_peer_forget(PyfContext *ctx, ferry_peer_t *handle);
/* Links d (of owner, closed by close) into ctx; unlink is idempotent. */
void pyf_dependent_link(PyfContext *ctx, struct pyf_dependent *d,
                        PyObject *owner, void (*close)(PyObject *owner));
void pyf_dependent_unlink(struct pyf_dependent *d);

/*
 * Runs `stmt` without the GIL.  While it runs, Context.close() refuses to
 * destroy the context under it (ctx->waiting); the objects the statement
 * uses are held by the caller's arguments.
 */
#define PYF_WITHOUT_GIL(ctx, stmt)                                            \
    do {                                                                      \
        (ctx)->waiting++;                                                     \
        Py_BEGIN_ALLOW_THREADS                                                \
        stmt;                                                                 \
        Py_END_ALLOW_THREADS                                                  \
        (ctx)->waiting--;                                                     \
    } while (0)

/* The same, also counting the call in `busy`: an object's own count of
 * the calls that use its handle without the GIL, under which its close()
 * must not free the handle (a Meta's peer or lookup). */
#define PYF_WITHOUT_GIL_BUSY(ctx, busy, stmt)                                 \
    do {                                                                      \
        (busy)++;                                                             \
        PYF_WITHOUT_GIL(ctx, stmt);                                           \
        (busy)--;                                                             \
    } while (0)

/* ---- conversions (convert.c) ------------------------------------------- */

/* Seconds (float, int or None) to milliseconds: None gives none_ms. */
int pyf_timeout_ms(PyObject *seconds, int none_ms, const char *what, int *ms);
/* A notify=(id, value) argument into opts (None: no notification). */
int pyf_notify_opts(PyObject *notify, PyObject *timeout,
                    struct ferry_xfer_opts *opts);
/* Arguments of a METH_FASTCALL | METH_KEYWORDS method into out[n] (those
 * not given stay NULL; the first `required` must be).  0, or -1 with a
 * TypeError as Python words it. */
int pyf_fastcall_args(const char *fname, const char *const *names, size_t n,
                      size_t required, PyObject *const *args,
                      Py_ssize_t nargs, PyObject *kwnames, PyObject **out);
/* __enter__ and __exit__ of every object with a close(): the object;
 * its close(). */
PyObject *pyf_enter(PyObject *self, PyObject *unused);
PyObject *pyf_exit(PyObject *self, PyObject *args);
/* The (id, expected, timeout=None) arguments of the counter waits, the
 * timeout in ms (-1: none).  0, or -1 with the exception set. */
int pyf_counter_wait_args(PyObject *args, PyObject *kwargs, const char *what,
                          unsigned long long *id,
                          unsigned long long *expected, int *ms);
/* obj as an open Memory (RemoteMemory): 0, or -1 with the exception
 * naming `what` and what it should be (memory.c). */
int pyf_check_memory(PyObject *obj, const char *what, PyfMemory **mem);
int pyf_check_remote(PyObject *obj, const char *what, PyfRemote **rmem);
/* ferry.wait_any(requests, timeout=None) -> index (request.c). */
PyObject *pyf_wait_any(PyObject *mod, PyObject *args, PyObject *kwargs);

/* ---- block indices (indices.c) ------------------------------------------ */

/* Indices as ferry_xfer_post reads them: an array's memory as it is (held
 * by the caller's argument), or a list's ints copied into tmp. */
struct pyf_indices {
    Py_buffer view;
    bool has_view;
    uint32_t *tmp;
    const uint32_t *idx;
    size_t n;
};

/* 0, or -1 with InvalidArgumentError saying what was given and what would
 * do.  what names the argument. */
int pyf_indices_get(PyObject *obj, const char *what, struct pyf_indices *ix);
void pyf_indices_release(struct pyf_indices *ix);

/* ---- the objects ------------------------------------------------------------ */

/* Resolves obj into memory to register (target.c): buffer protocol, torch
 * tensors, __cuda_array_interface__, DLPack.  writable: the memory will be
 * written (remote writes).  0, or -1 with the exception set. */
int pyf_target_get(PyObject *obj, bool writable, struct pyf_target *t);
void pyf_target_release(struct pyf_target *t);

PyObject *pyf_memory_new(PyfContext *ctx, PyObject *obj, unsigned access,
                         int kind, int device);
PyObject *pyf_remote_new(PyfPeer *peer, ferry_rmem_t *handle);
/* A Request over handle; keep holds what it touches (stolen). */
PyObject *pyf_request_new(PyfContext *ctx, ferry_req_t *handle,
                          PyObject *keep);
PyObject *pyf_prepare(PyfPeer *peer, int op, PyObject *local,
                      PyObject *remote);
PyObject *pyf_meta_open(PyfContext *ctx, const char *url, const char *name);
int pyf_notification_init(PyObject *module);
/* Up to max queued notifications as a list; wait: first waits up to
 * wait_ms (-1: no limit) without the GIL for one (none came: []). */
PyObject *pyf_notify_take(PyfContext *ctx, Py_ssize_t max, bool wait,
                          int wait_ms);
int pyf_config_from_kwargs(PyObject *kwargs, struct ferry_config *cfg,
                           PyObject *strings);
PyObject *pyf_config_fields(void);

#endif /* PYFERRY_H */
