/*
 * Context.notify_poll and notify_wait: the queued notifications as
 * ferry.Notification tuples (kind, id, value, peer).
 */
#include "pyferry.h"

static PyTypeObject notification_type;

static PyStructSequence_Field notification_fields[] = {
    {"kind", "\"data\", \"abort\" or \"peer_down\""},
    {"id", "the notification id (0 for peer_down)"},
    {"value", "its value (0 for peer_down)"},
    {"peer", "peer_down: the Peer, if a Peer object for it is alive; "
             "else None"},
    {NULL, NULL},
};

static PyStructSequence_Desc notification_desc = {
    "ferry.Notification",
    "A notification: data delivered after its transfer, a sender's abort, "
    "or a peer declared dead.",
    notification_fields,
    4,
};

int pyf_notification_init(PyObject *module)
{
    if (PyStructSequence_InitType2(&notification_type, &notification_desc))
        return -1;
    Py_INCREF(&notification_type);
    return PyModule_AddObject(module, "Notification",
                              (PyObject *)&notification_type);
}

static PyObject *notification_new(PyfContext *ctx,
                                  const struct ferry_notification *n)
{
    static const char *const kinds[] = {"data", "abort", "peer_down"};
    PyObject *t;
    PyObject *peer;

    /* A kind this module does not know (a newer libferry) would index
     * past kinds[]: refused instead. */
    if ((unsigned)n->kind >= sizeof(kinds) / sizeof(kinds[0]))
        return pyf_raise_msg(FERRY_EINVAL,
                             "notify_poll: notification %llu has kind %d, "
                             "which this module does not know; update it",
                             (unsigned long long)n->id, (int)n->kind);
    if ((t = PyStructSequence_New(&notification_type)) == NULL)
        return NULL;
    peer = n->peer != NULL ? pyf_peer_lookup(ctx, n->peer)
                           : Py_NewRef(Py_None);
    PyStructSequence_SET_ITEM(t, 0, PyUnicode_FromString(kinds[n->kind]));
    PyStructSequence_SET_ITEM(t, 1, PyLong_FromUnsignedLongLong(n->id));
    PyStructSequence_SET_ITEM(t, 2, PyLong_FromUnsignedLongLong(n->value));
    PyStructSequence_SET_ITEM(t, 3, peer);
    if (PyErr_Occurred()) {
        Py_DECREF(t);
        return NULL;
    }
    return t;
}

PyObject *pyf_notify_take(PyfContext *ctx, Py_ssize_t max, bool wait,
                          int wait_ms)
{
    struct ferry_notification *buf =
        PyMem_Malloc((size_t)max * sizeof(*buf));
    PyObject *list;
    int n;

    if (buf == NULL)
        return PyErr_NoMemory();
    if (!wait)
        n = ferry_notify_poll(ctx->handle, buf, (size_t)max);
    else {
        PYF_WITHOUT_GIL(ctx, n = ferry_notify_wait(ctx->handle, buf,
                                                   (size_t)max, wait_ms));
        if (n == FERRY_EAGAIN)
            n = 0;
    }
    if (n < 0) {
        PyMem_Free(buf);
        return pyf_raise(n, wait ? "Context.notify_wait"
                                 : "Context.notify_poll");
    }
    list = PyList_New(n);
    for (int i = 0; list != NULL && i < n; i++) {
        PyObject *t = notification_new(ctx, &buf[i]);
        if (t == NULL) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, i, t);
    }
    PyMem_Free(buf);
    return list;
}
