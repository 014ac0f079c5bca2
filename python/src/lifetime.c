/*
 * Lifetimes every object shares: whether a handle and its Context are
 * still open (pyf_alive), and the objects that close with their Context
 * (the dependents list).  Apart from context.c, which every object's
 * module would otherwise call while it calls theirs.
 */
#include "pyferry.h"

int pyf_ctx_alive(PyfContext *ctx, const char *what)
{
    if (ctx->handle != NULL)
        return 0;
    pyf_raise_msg(FERRY_EHANDLE,
                  "%s: the Context is closed, and everything made from it "
                  "went with it",
                  what);
    return -1;
}

int pyf_alive(PyObject *obj, PyfContext *ctx, const void *handle,
              const char *what)
{
    const char *type = strrchr(Py_TYPE(obj)->tp_name, '.');

    if (pyf_ctx_alive(ctx, what) != 0)
        return -1;
    if (handle != NULL)
        return 0;
    pyf_raise_msg(FERRY_EHANDLE, "%s: this %s was closed", what,
                  type != NULL ? type + 1 : Py_TYPE(obj)->tp_name);
    return -1;
}

/* ---- dependents ---------------------------------------------------------- */

void pyf_dependent_link(PyfContext *ctx, struct pyf_dependent *d,
                        PyObject *owner, void (*close)(PyObject *owner))
{
    struct pyf_dependent *head = &ctx->dependents;

    d->owner = owner;
    d->close = close;
    d->prev = head->prev;
    d->next = head;
    head->prev->next = d;
    head->prev = d;
}

void pyf_dependent_unlink(struct pyf_dependent *d)
{
    if (d->next == NULL || d->next == d)
        return;
    d->prev->next = d->next;
    d->next->prev = d->prev;
    d->prev = d->next = d;
}
