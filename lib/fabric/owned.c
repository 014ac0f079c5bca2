/*
 * The handles a context owns beyond its own parts (owned.h).
 */
#include "fabric/owned.h"

#include <stddef.h>

void ferry__owned_init(struct ferry__owned_list *list)
{
    pthread_mutex_init(&list->lock, NULL);
    list->head = NULL;
}

void ferry__own(struct ferry__owned_list *list, struct ferry__owned *o)
{
    pthread_mutex_lock(&list->lock);
    o->prev = NULL;
    o->next = list->head;
    if (list->head != NULL)
        list->head->prev = o;
    list->head = o;
    pthread_mutex_unlock(&list->lock);
}

static void unlink_locked(struct ferry__owned_list *list,
                          struct ferry__owned *o)
{
    if (o->prev != NULL)
        o->prev->next = o->next;
    else
        list->head = o->next;
    if (o->next != NULL)
        o->next->prev = o->prev;
    o->prev = o->next = NULL;
}

void ferry__disown(struct ferry__owned_list *list, struct ferry__owned *o)
{
    pthread_mutex_lock(&list->lock);
    unlink_locked(list, o);
    pthread_mutex_unlock(&list->lock);
}

void ferry__owned_release(struct ferry__owned_list *list,
                          enum ferry__own_stage stage)
{
    for (;;) {
        struct ferry__owned *o;

        pthread_mutex_lock(&list->lock);
        for (o = list->head; o != NULL && o->stage != stage; o = o->next)
            ;
        if (o != NULL)
            unlink_locked(list, o);
        pthread_mutex_unlock(&list->lock);
        if (o == NULL)
            return;
        /* Outside the lock: a metadata handle's release joins threads
         * that may be listing or closing handles of their own. */
        o->release(o);
    }
}

void ferry__owned_fini(struct ferry__owned_list *list)
{
    pthread_mutex_destroy(&list->lock);
}
