/*
 * A bootstrap connection's birth and end, and the listener's handshake
 * queue (see conn.h); the rest of its life belongs to client.c or, for
 * a served one, serve.c and the files it calls.
 */
#include "oob/conn.h"

#include <assert.h>
#include <stdlib.h>
#include <unistd.h>

struct ferry__oob_conn *ferry__oob_conn_new(struct ferry_context *ctx)
{
    struct ferry__oob_conn *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    c->ctx = ctx;
    c->fd = -1;
    pthread_mutex_init(&c->lock, NULL);
    return c;
}

void ferry__oob_conn_free(struct ferry__oob_conn *c)
{
    if (c == NULL)
        return;
    /* Its entries point at it as their owner: they must be gone. */
    assert(c->offers == NULL);
    if (c->fd >= 0)
        close(c->fd);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* ---- the handshake queue ------------------------------------------------ */

void ferry__oob_hs_push(struct ferry__oob *lis, struct ferry__oob_conn *c,
                        enum ferry__oob_hs_class cls)
{
    struct ferry__oob_hs_queue *q = &lis->hs[cls];

    c->hs_class = cls;
    c->hs_next = NULL;
    c->hs_prev = q->tail;
    if (q->tail != NULL)
        q->tail->hs_next = c;
    else
        q->head = c;
    q->tail = c;
    lis->n_handshake++;
}

void ferry__oob_hs_remove(struct ferry__oob *lis, struct ferry__oob_conn *c)
{
    struct ferry__oob_hs_queue *q = &lis->hs[c->hs_class];

    if (c->hs_prev != NULL)
        c->hs_prev->hs_next = c->hs_next;
    else
        q->head = c->hs_next;
    if (c->hs_next != NULL)
        c->hs_next->hs_prev = c->hs_prev;
    else
        q->tail = c->hs_prev;
    c->hs_prev = c->hs_next = NULL;
    lis->n_handshake--;
}

void ferry__oob_hs_move(struct ferry__oob *lis, struct ferry__oob_conn *c,
                        enum ferry__oob_hs_class cls)
{
    ferry__oob_hs_remove(lis, c);
    ferry__oob_hs_push(lis, c, cls);
}

struct ferry__oob_conn *ferry__oob_hs_victim(struct ferry__oob *lis)
{
    for (int i = 0; i < FERRY__OOB_HS_CLASSES; i++)
        if (lis->hs[i].head != NULL)
            return lis->hs[i].head;
    return NULL;
}

/* ---- closing a served connection ---------------------------------------- */

void ferry__oob_conn_close(struct ferry__oob_conn *c)
{
    struct ferry__oob *lis = c->lis;

    if (c->closed)
        return;
    c->closed = true;
    if (c->state == FERRY__OOB_READY)
        lis->n_ready--;
    else
        ferry__oob_hs_remove(lis, c);
    ferry__oob_names_drop_list(&lis->names, &c->offers);
    c->noffers = c->offer_bytes = 0;
    pthread_cond_broadcast(&lis->changed);
}
