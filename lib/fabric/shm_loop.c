/*
 * shm endpoints of this process as peers of each other (shm_loop.h).
 *
 * The open endpoints of this process, the connections between them and
 * the closed ones kept for their holders live in three lists for the
 * whole process, under one mutex: endpoints open, peers are added and
 * contexts closed rarely, and never from libfabric's progress.
 */
#include "fabric/shm_loop.h"

#include "base/error.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct shm_link {
    struct shm_link *next;
    char from[FERRY__NAME_MAX];
    char to[FERRY__NAME_MAX];
};

struct shm_name {
    struct shm_name *next;
    char name[FERRY__NAME_MAX];
};

/* A closed endpoint that open ones still have as a peer, kept open. */
struct shm_kept {
    struct shm_kept *next;
    char name[FERRY__NAME_MAX];
    void (*close)(void *arg);
    void *arg;
};

static pthread_mutex_t links_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shm_link *links;
static struct shm_name *open_names;
static struct shm_kept *kept;

void ferry__shm_endpoint_prefix(pid_t pid, char *buf, size_t len)
{
    snprintf(buf, len, "ferry_%d_", (int)pid);
}

void ferry__shm_endpoint_name(char *buf, size_t len)
{
    static _Atomic unsigned counter;
    char prefix[32];

    ferry__shm_endpoint_prefix(getpid(), prefix, sizeof(prefix));
    snprintf(buf, len, "%s%llx_%u", prefix,
             (unsigned long long)ferry__now_ns(),
             atomic_fetch_add(&counter, 1));
}

bool ferry__shm_loop_faulty(const struct fi_info *info)
{
    const char *force = getenv("FERRY_SHM_LOOP_FAULT");

    if (info->ep_attr->protocol != FI_PROTO_SHM)
        return false;
    if (force != NULL && (strcmp(force, "0") == 0 || strcmp(force, "1") == 0))
        return force[0] == '1';
    return FI_VERSION_GE(fi_version(), FI_VERSION(2, 5));
}

/*
 * The endpoint name inside an shm address ("fi_shm://ferry_4711_..." or
 * the bare name), copied into out, when it names an endpoint ferry opened
 * in this process (ferry__shm_endpoint_name).
 */
static bool name_in_this_process(const void *addr, size_t len, char *out,
                                 size_t out_len)
{
    char ours[32];
    const char *name;
    char text[FERRY__ADDR_MAX + 1];

    if (addr == NULL || len == 0 || len >= sizeof(text))
        return false;
    memcpy(text, addr, len);
    text[len] = '\0';
    ferry__shm_endpoint_prefix(getpid(), ours, sizeof(ours));
    if ((name = strstr(text, ours)) == NULL)
        return false;
    snprintf(out, out_len, "%s", name);
    return true;
}

/* info's endpoint name, into self, when ferry named it in this process. */
static bool own_name(const struct fi_info *info, char self[FERRY__NAME_MAX])
{
    return info != NULL && name_in_this_process(info->src_addr,
                                                info->src_addrlen, self,
                                                FERRY__NAME_MAX);
}

static bool linked(const char *from, const char *to)
{
    for (struct shm_link *l = links; l; l = l->next)
        if (strcmp(l->from, from) == 0 && strcmp(l->to, to) == 0)
            return true;
    return false;
}

static bool is_open(const char *name)
{
    for (struct shm_name *n = open_names; n != NULL; n = n->next)
        if (strcmp(n->name, name) == 0)
            return true;
    return false;
}

/* Whether an endpoint still open is connected to name, either way: one
 * that name reached has its region too, from name's first message. */
static bool held(const char *name)
{
    for (struct shm_link *l = links; l; l = l->next)
        if ((strcmp(l->to, name) == 0 && is_open(l->from)) ||
            (strcmp(l->from, name) == 0 && is_open(l->to)))
            return true;
    return false;
}

int ferry__shm_loop_open(const struct fi_info *info)
{
    char self[FERRY__NAME_MAX];
    struct shm_name *n;

    if (!own_name(info, self))
        return 0;
    if ((n = calloc(1, sizeof(*n))) == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory naming an endpoint");
    snprintf(n->name, sizeof(n->name), "%s", self);
    pthread_mutex_lock(&links_lock);
    n->next = open_names;
    open_names = n;
    pthread_mutex_unlock(&links_lock);
    return 0;
}

/* The peer other, an endpoint of this process, is closed: refused. */
static int closed_peer(const char *other)
{
    return ferry__error(
        FERRY_EPEERDEAD,
        "the peer's shm endpoint %s is named as one of this process "
        "(pid %d), but no context of this process has it open: its "
        "context was closed (ferry_context_close), or it belonged to an "
        "earlier process with this pid; nothing can reach it, and "
        "libfabric 1.17's shm provider, which keeps a closed endpoint of "
        "the process in its list, dies of SIGSEGV at the first write to "
        "one: add the peer while its context is open",
        other, (int)getpid());
}

/* self, opening a connection to other, both of this process: noted.
 * Where shm has the fault, refused if other already reaches self. */
static int link_once(const char *self, const char *other, bool faulty)
{
    struct shm_link *l;

    if (faulty && linked(other, self))
        return ferry__error(
            FERRY_ENOTSUP,
            "the peer is a context of this same process that already "
            "reaches this one over shm, and libfabric %u.%u's shm provider "
            "crashes (SIGSEGV in smr_progress_cmd) when two endpoints of "
            "one process reach each other both ways: use one direction "
            "only, put the contexts in separate processes, or choose "
            "another provider (FERRY_PROVIDER=tcp)",
            FI_MAJOR(fi_version()), FI_MINOR(fi_version()));
    if (linked(self, other))
        return 0;
    if ((l = calloc(1, sizeof(*l))) == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory for a peer");
    snprintf(l->from, sizeof(l->from), "%s", self);
    snprintf(l->to, sizeof(l->to), "%s", other);
    l->next = links;
    links = l;
    return 0;
}

int ferry__shm_loop_admit(const struct fi_info *info, const void *peer,
                          size_t len, bool *one_way)
{
    char self[FERRY__NAME_MAX], other[FERRY__NAME_MAX];
    int ret = 0;

    *one_way = false;
    if (info->ep_attr->protocol != FI_PROTO_SHM ||
        !name_in_this_process(peer, len, other, sizeof(other)))
        return 0;
    pthread_mutex_lock(&links_lock);
    if (!is_open(other)) {
        ret = closed_peer(other);
    } else if (own_name(info, self) && strcmp(self, other) != 0) {
        bool faulty = ferry__shm_loop_faulty(info);

        ret = link_once(self, other, faulty);
        *one_way = ret == 0 && faulty;
    }
    pthread_mutex_unlock(&links_lock);
    return ret;
}

/* Drops the connections to and from name, closed (under links_lock). */
static void unlink_all(const char *name)
{
    for (struct shm_link **p = &links; *p;) {
        struct shm_link *l = *p;

        if (strcmp(l->from, name) == 0 || strcmp(l->to, name) == 0) {
            *p = l->next;
            free(l);
        } else {
            p = &l->next;
        }
    }
}

/* Takes out of the kept list, into *out, the endpoints no open one is
 * connected to any more, and their connections (under links_lock). */
static void take_unheld(struct shm_kept **out)
{
    for (struct shm_kept **k = &kept; *k;) {
        struct shm_kept *one = *k;

        if (!held(one->name)) {
            *k = one->next;
            one->next = *out;
            *out = one;
            unlink_all(one->name);
        } else {
            k = &one->next;
        }
    }
}

bool ferry__shm_loop_forget(const struct fi_info *info)
{
    char self[FERRY__NAME_MAX];
    bool still_held;

    if (!own_name(info, self))
        return false;
    pthread_mutex_lock(&links_lock);
    for (struct shm_name **n = &open_names; *n; n = &(*n)->next)
        if (strcmp((*n)->name, self) == 0) {
            struct shm_name *gone = *n;

            *n = gone->next;
            free(gone);
            break;
        }
    still_held = held(self);
    pthread_mutex_unlock(&links_lock);
    return still_held;
}

bool ferry__shm_loop_release(const struct fi_info *info,
                             void (*close)(void *), void *arg)
{
    char self[FERRY__NAME_MAX];
    struct shm_kept *k = NULL, *unheld = NULL;
    bool keep = false;

    if (!own_name(info, self))
        return false;
    if (close != NULL && (k = calloc(1, sizeof(*k))) != NULL) {
        snprintf(k->name, sizeof(k->name), "%s", self);
        k->close = close;
        k->arg = arg;
    }
    pthread_mutex_lock(&links_lock);
    if (k != NULL && (keep = held(self))) {
        k->next = kept;
        kept = k;
    } else {
        unlink_all(self);
    }
    take_unheld(&unheld);
    pthread_mutex_unlock(&links_lock);
    if (!keep)
        free(k);
    /* Outside the lock: closing an endpoint is libfabric's business, and
     * a closer asks this module again. */
    while (unheld != NULL) {
        struct shm_kept *one = unheld;

        unheld = one->next;
        one->close(one->arg);
        free(one);
    }
    return keep;
}
