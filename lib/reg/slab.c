/*
 * Objects of one size in chunks the slab owns (slab.h).
 */
#include "config.h"

#include "reg/slab.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
/* Objects given back are poisoned, so that AddressSanitizer still
 * catches a use after ferry__slab_free as it would after free(). */
#define POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/* The first chunk's objects: a cache of a few entries takes a few KiB. */
#define FIRST_COUNT 16
/* The largest chunk: one huge page on x86-64 and most arm64 kernels. */
#define HUGE_CHUNK ((size_t)2 << 20)
/* A chunk's header (struct ferry__slab_chunk), before its objects: one
 * cache line, so that the objects start lines too. */
#define HEADER 64

void ferry__slab_init(struct ferry__slab *s, size_t size)
{
    *s = (struct ferry__slab){.size = (size + 63) / 64 * 64,
                              .next_count = FIRST_COUNT};
}

/* Adds a chunk of s->next_count objects (fewer past HUGE_CHUNK). */
static int grow(struct ferry__slab *s)
{
    size_t bytes = HEADER + s->next_count * s->size;
    struct ferry__slab_chunk *c;

    if (bytes >= HUGE_CHUNK) {
        bytes = HUGE_CHUNK;
        c = aligned_alloc(HUGE_CHUNK, HUGE_CHUNK);
#ifdef MADV_HUGEPAGE
        /* Advice only: where transparent huge pages are off, or the
         * kernel refuses, the chunk works with small pages. */
        if (c != NULL)
            (void)madvise(c, HUGE_CHUNK, MADV_HUGEPAGE);
#endif
    } else {
        c = aligned_alloc(64, bytes);
        s->next_count *= 2;
    }
    if (c == NULL)
        return -1;
    c->next = s->chunks;
    s->chunks = c;
    s->fresh = (char *)c + HEADER;
    s->fresh_left = (bytes - HEADER) / s->size;
    POISON(s->fresh, s->fresh_left * s->size);
    return 0;
}

void *ferry__slab_alloc(struct ferry__slab *s)
{
    void *obj = s->free;

    if (obj != NULL) {
        UNPOISON(obj, s->size);
        s->free = *(void **)obj;
        return obj;
    }
    if (s->fresh_left == 0 && grow(s) != 0)
        return NULL;
    obj = s->fresh;
    s->fresh += s->size;
    s->fresh_left--;
    UNPOISON(obj, s->size);
    return obj;
}

void ferry__slab_free(struct ferry__slab *s, void *obj)
{
    if (obj == NULL)
        return;
    *(void **)obj = s->free;
    s->free = obj;
    /* The link stays readable: the next alloc reads it. */
    POISON((char *)obj + sizeof(void *), s->size - sizeof(void *));
}

void ferry__slab_destroy(struct ferry__slab *s)
{
    while (s->chunks != NULL) {
        struct ferry__slab_chunk *c = s->chunks;

        s->chunks = c->next;
        free(c);
    }
    ferry__slab_init(s, s->size);
}
