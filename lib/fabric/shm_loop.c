/*
 * Two shm endpoints of one process, connected both ways (shm_loop.h).
 *
 * The connections between endpoints of this process live in one list for
 * the whole process, under a mutex: peers are added and contexts closed
 * rarely, and never from libfabric's progress.
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

static pthread_mutex_t links_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shm_link *links;

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

static bool linked(const char *from, const char *to)
{
    for (struct shm_link *l = links; l; l = l->next)
        if (strcmp(l->from, from) == 0 && strcmp(l->to, to) == 0)
            return true;
    return false;
}

int ferry__shm_loop_admit(const struct fi_info *info, const void *peer,
                          size_t len)
{
    char self[FERRY__NAME_MAX], other[FERRY__NAME_MAX];
    struct shm_link *l;
    int ret = 0;

    if (!ferry__shm_loop_faulty(info) ||
        !name_in_this_process(info->src_addr, info->src_addrlen,
                              self, sizeof(self)) ||
        !name_in_this_process(peer, len, other, sizeof(other)) ||
        strcmp(self, other) == 0)
        return 0;
    pthread_mutex_lock(&links_lock);
    if (linked(other, self)) {
        ret = ferry__error(
            FERRY_ENOTSUP,
            "the peer is a context of this same process that already "
            "reaches this one over shm, and libfabric %u.%u's shm provider "
            "crashes (SIGSEGV in smr_progress_cmd) when two endpoints of "
            "one process reach each other both ways: use one direction "
            "only, put the contexts in separate processes, or choose "
            "another provider (FERRY_PROVIDER=tcp)",
            FI_MAJOR(fi_version()), FI_MINOR(fi_version()));
    } else if (!linked(self, other)) {
        if ((l = calloc(1, sizeof(*l))) == NULL) {
            ret = ferry__error(FERRY_ENOMEM, "out of memory for a peer");
        } else {
            snprintf(l->from, sizeof(l->from), "%s", self);
            snprintf(l->to, sizeof(l->to), "%s", other);
            l->next = links;
            links = l;
        }
    }
    pthread_mutex_unlock(&links_lock);
    return ret;
}

void ferry__shm_loop_forget(const struct fi_info *info)
{
    char self[FERRY__NAME_MAX];
    struct shm_link **p;

    if (info == NULL ||
        !name_in_this_process(info->src_addr, info->src_addrlen,
                              self, sizeof(self)))
        return;
    pthread_mutex_lock(&links_lock);
    for (p = &links; *p;) {
        struct shm_link *l = *p;

        if (strcmp(l->from, self) == 0 || strcmp(l->to, self) == 0) {
            *p = l->next;
            free(l);
        } else {
            p = &l->next;
        }
    }
    pthread_mutex_unlock(&links_lock);
}
