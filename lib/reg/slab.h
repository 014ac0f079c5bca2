/*
 * Objects of one size carved from chunks the slab owns: the registration
 * cache's entries.  Private to libferry; the caller serialises every call
 * (the cache's writer lock).
 *
 * Why not malloc: a lookup over many entries in a random order loads one
 * line of an entry it cannot predict, and with entries scattered over
 * the heap that load was also a TLB miss (perf: at 100 K entries, three
 * quarters of a hit).  Chunks grow from a few objects to 2 MiB, and
 * 2 MiB chunks are aligned and advised for huge pages, so that a large
 * cache's entries lie in a few huge pages; a small cache stays small.
 * Chunks are freed with the slab, not before: a cache keeps the room its
 * largest size took.
 */
#ifndef FERRY_REG_SLAB_H
#define FERRY_REG_SLAB_H

#include <stddef.h>

/* The header of a chunk, at its start: the chunks are a list. */
struct ferry__slab_chunk {
    struct ferry__slab_chunk *next;
};

struct ferry__slab {
    size_t size;        /* of an object: a multiple of 64 */
    size_t next_count;  /* objects in the next chunk */
    void *free;         /* objects given back, linked through their first word */
    char *fresh;        /* never handed out, in the newest chunk */
    size_t fresh_left;  /* objects there */
    struct ferry__slab_chunk *chunks;
};

/* A slab of objects of `size` bytes (rounded up to 64: each object starts
 * a cache line). */
void ferry__slab_init(struct ferry__slab *s, size_t size);
/* An object aligned to 64 bytes, contents undefined; NULL when out of
 * memory. */
void *ferry__slab_alloc(struct ferry__slab *s);
/* Gives back an object of this slab.  NULL-safe. */
void ferry__slab_free(struct ferry__slab *s, void *obj);
/* Frees every chunk: every object, handed out or not. */
void ferry__slab_destroy(struct ferry__slab *s);

#endif /* FERRY_REG_SLAB_H */
