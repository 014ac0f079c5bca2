/*
 * What a context owns beyond its own parts: the handles other modules
 * make from it (descriptor lists, prepared transfers, metadata handles).
 *
 * ferry(7)'s ownership rule: a context owns everything made from it, and
 * ferry_context_close closes whatever of it is still open.  The regions,
 * peers, requests and fan-outs are the context's own lists; a module
 * whose handles live elsewhere lists each one here, with the call that
 * frees it, and takes it off when the application closes it.  The
 * context calls the modules through these pointers, so it names none of
 * them (no call circle with the layers above it).
 */
#ifndef FERRY_FABRIC_OWNED_H
#define FERRY_FABRIC_OWNED_H

#include <pthread.h>

/* When ferry_context_close frees a handle. */
enum ferry__own_stage {
    /* Before the endpoints close: handles with threads of their own that
     * use the context (metadata). */
    FERRY__OWN_FIRST,
    /* After the requests are gone and before the regions and peers:
     * handles that hold regions or peers (lists, prepared transfers). */
    FERRY__OWN_AFTER_REQUESTS,
};

struct ferry__owned {
    struct ferry__owned *prev, *next;
    enum ferry__own_stage stage;
    /* Frees the handle this is part of, without the checks of its public
     * close (what it would wait for is gone or going with the context). */
    void (*release)(struct ferry__owned *self);
};

struct ferry__owned_list {
    pthread_mutex_t lock;
    struct ferry__owned *head; /* the newest first */
};

void ferry__owned_init(struct ferry__owned_list *list);
/* Lists o (its stage and release set by the caller). */
void ferry__own(struct ferry__owned_list *list, struct ferry__owned *o);
/* Takes o off the list: the application closed its handle. */
void ferry__disown(struct ferry__owned_list *list, struct ferry__owned *o);
/*
 * Releases every listed handle of this stage, the newest first: a handle
 * made from another (a prepared transfer from its lists) goes before it.
 */
void ferry__owned_release(struct ferry__owned_list *list,
                          enum ferry__own_stage stage);
void ferry__owned_fini(struct ferry__owned_list *list);

#endif /* FERRY_FABRIC_OWNED_H */
