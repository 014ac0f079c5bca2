/*
 * A listener's names: the blobs it published itself and those its
 * clients offered, in one hash table so that a lookup costs the same
 * with one client or a thousand.  Each entry has an owner: NULL for the
 * listener's own publication, else the connection that offered it (the
 * table only compares the pointer).  At most one entry per (owner,
 * name); a lookup prefers the listener's own entry, then any client's.
 *
 * Not thread-safe: the listener's lock covers it.
 */
#ifndef FERRY_OOB_NAMES_H
#define FERRY_OOB_NAMES_H

#include <stddef.h>
#include <stdint.h>

struct ferry__oob_entry {
    struct ferry__oob_entry *next;       /* bucket chain */
    struct ferry__oob_entry *owner_next; /* the owner's list (offers) */
    const void *owner;
    uint32_t hash;
    size_t len;       /* blob bytes */
    const char *name; /* in data, after the blob */
    uint8_t data[];   /* blob, then name and NUL */
};

struct ferry__oob_names {
    struct ferry__oob_entry **buckets;
    size_t nbuckets; /* a power of two */
    size_t count;
};

/* The bytes an entry counts against its owner's budget. */
size_t ferry__oob_entry_cost(const char *name, size_t len);

/* Returns 0 or FERRY_ENOMEM. */
int ferry__oob_names_init(struct ferry__oob_names *t);
/* Frees every entry and the table. */
void ferry__oob_names_fini(struct ferry__oob_names *t);
/* The entry of owner under name, or NULL. */
const struct ferry__oob_entry *
ferry__oob_names_get(const struct ferry__oob_names *t, const void *owner,
                     const char *name);
/* The listener's own entry of name, else any owner's; NULL if none. */
const struct ferry__oob_entry *
ferry__oob_names_find(const struct ferry__oob_names *t, const char *name);
/*
 * Sets owner's blob under name, replacing the one it had.  list is the
 * owner's list head (NULL for the listener's own entries, which need
 * none).  Returns 0 or FERRY_ENOMEM (then nothing changed).
 */
int ferry__oob_names_put(struct ferry__oob_names *t, const void *owner,
                         struct ferry__oob_entry **list, const char *name,
                         const void *blob, size_t len);
/* Removes owner's entry of name; returns its cost, or FERRY_ENOENT. */
long ferry__oob_names_remove(struct ferry__oob_names *t, const void *owner,
                             struct ferry__oob_entry **list, const char *name);
/* Removes every entry on an owner's list (a connection that closed). */
void ferry__oob_names_drop_list(struct ferry__oob_names *t,
                                struct ferry__oob_entry **list);

#endif /* FERRY_OOB_NAMES_H */
