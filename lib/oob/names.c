/*
 * A listener's names (see names.h): a chained hash table that doubles
 * when it holds as many entries as buckets, so chains stay short however
 * many clients offer.
 */
#include "oob/names.h"

#include "base/blob.h"
#include "base/ferry-internal.h"

#include <stdlib.h>
#include <string.h>

#define FIRST_BUCKETS 64u

size_t ferry__oob_entry_cost(const char *name, size_t len)
{
    return len + strlen(name);
}

int ferry__oob_names_init(struct ferry__oob_names *t)
{
    t->buckets = calloc(FIRST_BUCKETS, sizeof(*t->buckets));
    t->nbuckets = FIRST_BUCKETS;
    t->count = 0;
    return t->buckets != NULL ? 0 : FERRY_ENOMEM;
}

void ferry__oob_names_fini(struct ferry__oob_names *t)
{
    for (size_t i = 0; t->buckets != NULL && i < t->nbuckets; i++)
        while (t->buckets[i] != NULL) {
            struct ferry__oob_entry *e = t->buckets[i];
            t->buckets[i] = e->next;
            free(e);
        }
    free(t->buckets);
    t->buckets = NULL;
    t->count = 0;
}

static uint32_t hash_of(const char *name)
{
    return ferry__fnv1a(name, strlen(name));
}

static struct ferry__oob_entry **bucket(const struct ferry__oob_names *t,
                                        uint32_t hash)
{
    return &t->buckets[hash & (t->nbuckets - 1)];
}

/* The link that points at owner's entry of name, or NULL. */
static struct ferry__oob_entry **link_of(const struct ferry__oob_names *t,
                                         const void *owner, const char *name,
                                         uint32_t hash)
{
    for (struct ferry__oob_entry **pe = bucket(t, hash); *pe != NULL;
         pe = &(*pe)->next)
        if ((*pe)->hash == hash && (*pe)->owner == owner &&
            strcmp((*pe)->name, name) == 0)
            return pe;
    return NULL;
}

const struct ferry__oob_entry *
ferry__oob_names_get(const struct ferry__oob_names *t, const void *owner,
                     const char *name)
{
    struct ferry__oob_entry **pe = link_of(t, owner, name, hash_of(name));

    return pe != NULL ? *pe : NULL;
}

const struct ferry__oob_entry *
ferry__oob_names_find(const struct ferry__oob_names *t, const char *name)
{
    uint32_t hash = hash_of(name);
    const struct ferry__oob_entry *any = NULL;

    for (const struct ferry__oob_entry *e = *bucket(t, hash); e != NULL;
         e = e->next) {
        if (e->hash != hash || strcmp(e->name, name) != 0)
            continue;
        if (e->owner == NULL)
            return e;
        if (any == NULL)
            any = e;
    }
    return any;
}

/* Doubles the buckets; on failure the table just stays slower. */
static void grow(struct ferry__oob_names *t)
{
    size_t n = t->nbuckets * 2;
    struct ferry__oob_entry **b = calloc(n, sizeof(*b));

    if (b == NULL)
        return;
    for (size_t i = 0; i < t->nbuckets; i++)
        while (t->buckets[i] != NULL) {
            struct ferry__oob_entry *e = t->buckets[i];
            t->buckets[i] = e->next;
            e->next = b[e->hash & (n - 1)];
            b[e->hash & (n - 1)] = e;
        }
    free(t->buckets);
    t->buckets = b;
    t->nbuckets = n;
}

static struct ferry__oob_entry *new_entry(const void *owner, const char *name,
                                          uint32_t hash, const void *blob,
                                          size_t len)
{
    size_t nlen = strlen(name);
    struct ferry__oob_entry *e = malloc(sizeof(*e) + len + nlen + 1);

    if (e == NULL)
        return NULL;
    e->next = e->owner_next = NULL;
    e->owner = owner;
    e->hash = hash;
    e->len = len;
    memcpy(e->data, blob, len);
    memcpy(e->data + len, name, nlen + 1);
    e->name = (const char *)e->data + len;
    return e;
}

/* Unlinks e from its owner's list. */
static void list_unlink(struct ferry__oob_entry **list,
                        const struct ferry__oob_entry *e)
{
    for (; list != NULL && *list != NULL; list = &(*list)->owner_next)
        if (*list == e) {
            *list = e->owner_next;
            return;
        }
}

int ferry__oob_names_put(struct ferry__oob_names *t, const void *owner,
                         struct ferry__oob_entry **list, const char *name,
                         const void *blob, size_t len)
{
    uint32_t hash = hash_of(name);
    struct ferry__oob_entry *e = new_entry(owner, name, hash, blob, len);
    struct ferry__oob_entry **old = link_of(t, owner, name, hash);

    if (e == NULL)
        return FERRY_ENOMEM;
    if (old != NULL) {
        /* Replaced in place: the bucket and the owner's list keep their
         * order, and the count does not change. */
        struct ferry__oob_entry *prev = *old;
        e->next = prev->next;
        *old = e;
        list_unlink(list, prev);
        free(prev);
    } else {
        if (t->count >= t->nbuckets)
            grow(t);
        e->next = *bucket(t, hash);
        *bucket(t, hash) = e;
        t->count++;
    }
    if (list != NULL) {
        e->owner_next = *list;
        *list = e;
    }
    return 0;
}

/* Unlinks and frees the entry *pe points at; returns its cost. */
static size_t remove_at(struct ferry__oob_names *t,
                        struct ferry__oob_entry **pe,
                        struct ferry__oob_entry **list)
{
    struct ferry__oob_entry *e = *pe;
    size_t cost = ferry__oob_entry_cost(e->name, e->len);

    *pe = e->next;
    list_unlink(list, e);
    free(e);
    t->count--;
    return cost;
}

long ferry__oob_names_remove(struct ferry__oob_names *t, const void *owner,
                             struct ferry__oob_entry **list, const char *name)
{
    struct ferry__oob_entry **pe = link_of(t, owner, name, hash_of(name));

    return pe != NULL ? (long)remove_at(t, pe, list) : FERRY_ENOENT;
}

void ferry__oob_names_drop_list(struct ferry__oob_names *t,
                                struct ferry__oob_entry **list)
{
    while (*list != NULL) {
        struct ferry__oob_entry *e = *list;
        struct ferry__oob_entry **pe = link_of(t, e->owner, e->name, e->hash);

        /* Always found: every entry on a list is in the table. */
        remove_at(t, pe, list);
    }
}
