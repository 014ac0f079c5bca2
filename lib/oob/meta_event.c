/*
 * What the metadata backends' watchers report up (meta.h): peers joining
 * and leaving, queued for ferry_meta_event, a leave declaring the peer
 * ferry_meta_peer handed out dead.  Apart from meta.c, which calls the
 * backends, so that the backends' calls up make no circle with it.
 */
#include "oob/meta.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *ferry__meta_peer_of_key(const char *key)
{
    const char *name;
    size_t n;

    if (strncmp(key, "peers/", 6) != 0)
        return NULL;
    name = key + 6;
    n = strlen(name);
    return n > 0 && n < FERRY__META_NAME_MAX &&
                   strspn(name, FERRY__META_NAME_CHARS) == n
               ? name
               : NULL;
}

/* Takes name's handle out of those meta gave, or NULL if it gave none,
 * and counts the leave in the same hold of the lock (meta.c's find_peer
 * reads the count). */
static struct ferry__meta_known *forget_known(struct ferry_meta *m,
                                              const char *name)
{
    struct ferry__meta_known *gone = NULL;

    pthread_mutex_lock(&m->lock);
    m->leaves++;
    for (struct ferry__meta_known **pk = &m->known; *pk; pk = &(*pk)->next)
        if (strcmp((*pk)->name, name) == 0) {
            gone = *pk;
            *pk = gone->next;
            break;
        }
    pthread_mutex_unlock(&m->lock);
    return gone;
}

void ferry__meta_saw(struct ferry_meta *m, enum ferry_meta_event_kind kind,
                     const char *name)
{
    struct ferry__meta_queued *q = calloc(1, sizeof(*q));

    /*
     * A leave ends the handle (the next ferry_meta_peer adds the peer
     * again if it comes back, and the application may remove this one),
     * before the event is queued: whoever reads the leave finds the peer
     * dead already.
     */
    if (kind == FERRY_META_LEAVE) {
        struct ferry__meta_known *gone = forget_known(m, name);

        if (gone != NULL) {
            char why[64 + FERRY__META_NAME_MAX];

            snprintf(why, sizeof(why), "its metadata entry (%s) is gone: it "
                     "closed, or its lease ended", name);
            ferry_peer_declare_dead(gone->peer, why);
            free(gone);
        }
    }
    if (q == NULL) {
        FERRY_LOG_WARN("metadata: out of memory: the %s of %s is lost",
                       kind == FERRY_META_JOIN ? "join" : "leave", name);
        return;
    }
    q->ev.kind = kind;
    snprintf(q->ev.name, sizeof(q->ev.name), "%s", name);
    pthread_mutex_lock(&m->lock);
    *m->events_tail = q;
    m->events_tail = &q->next;
    pthread_cond_broadcast(&m->changed);
    pthread_mutex_unlock(&m->lock);
}
