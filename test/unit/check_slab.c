/*
 * slab module: objects are whole cache lines apart and never overlap,
 * come back for reuse, chunks grow to 2 MiB huge-page chunks instead of
 * one chunk per object, and a destroyed slab starts again empty.
 */
#include "testutil.h"

#include "reg/slab.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define HUGE ((uintptr_t)2 << 20)

static size_t chunk_count(const struct ferry__slab *s)
{
    size_t n = 0;

    for (const struct ferry__slab_chunk *c = s->chunks; c != NULL;
         c = c->next)
        n++;
    return n;
}

/* n objects, each filled with its own byte pattern. */
static unsigned char **fill(struct ferry__slab *s, size_t n, size_t size)
{
    unsigned char **obj = calloc(n, sizeof(*obj));

    ck_assert_ptr_nonnull(obj);
    for (size_t i = 0; i < n; i++) {
        obj[i] = ferry__slab_alloc(s);
        ck_assert_msg(obj[i] != NULL, "object %zu: out of memory", i);
        ck_assert_msg((uintptr_t)obj[i] % 64 == 0,
                      "object %zu at %p does not start a cache line", i,
                      (void *)obj[i]);
        memset(obj[i], (int)(i % 251), size);
    }
    return obj;
}

/* Object i still holds its pattern.  The bytes are compared without
 * Check: it records every assertion that passes, a system call each, and
 * 6.4 million of them took minutes under AddressSanitizer. */
static void check_pattern(unsigned char *const *obj, size_t i, size_t size)
{
    for (size_t b = 0; b < size; b++)
        if (obj[i][b] != i % 251)
            ck_abort_msg("object %zu byte %zu: %u, written %zu", i, b,
                         obj[i][b], i % 251);
}

/* Each object still holds its pattern: none overlaps another. */
static void check_patterns(unsigned char **obj, size_t n, size_t size)
{
    for (size_t i = 0; i < n; i++)
        check_pattern(obj, i, size);
}

START_TEST(test_objects_apart)
{
    /* 100 is rounded up to 128: every object starts a line. */
    struct ferry__slab s;
    unsigned char **obj;

    ferry__slab_init(&s, 100);
    ck_assert_uint_eq(s.size, 128);
    obj = fill(&s, 1000, 100);
    check_patterns(obj, 1000, 100);
    ferry__slab_destroy(&s);
    free(obj);
}
END_TEST

START_TEST(test_reuse)
{
    struct ferry__slab s;
    unsigned char **obj, *again[64];
    size_t chunks;

    ferry__slab_init(&s, 320);
    obj = fill(&s, 200, 320);
    chunks = chunk_count(&s);
    /* Give back every other object; as many allocations reuse exactly
     * those, without a new chunk, and the others keep their bytes. */
    for (size_t i = 0; i < 128; i += 2)
        ferry__slab_free(&s, obj[i]);
    ferry__slab_free(&s, NULL); /* NULL-safe */
    for (size_t k = 0; k < 64; k++) {
        bool was_freed = false;

        again[k] = ferry__slab_alloc(&s);
        for (size_t i = 0; i < 128; i += 2)
            was_freed |= again[k] == obj[i];
        ck_assert_msg(was_freed, "allocation %zu after the frees: %p, not a "
                      "freed object", k, (void *)again[k]);
        for (size_t j = 0; j < k; j++)
            ck_assert_ptr_ne(again[j], again[k]);
    }
    ck_assert_uint_eq(chunk_count(&s), chunks);
    for (size_t i = 1; i < 200; i += 2)
        check_pattern(obj, i, 320);
    ferry__slab_destroy(&s);
    free(obj);
}
END_TEST

START_TEST(test_growth_to_huge_chunks)
{
    /* 20,000 entries of the cache's size: chunks double from a few
     * objects, then are 2 MiB, aligned for huge pages. */
    struct ferry__slab s;
    unsigned char **obj;
    size_t n = 20000, chunks, huge = 0;

    ferry__slab_init(&s, 320);
    obj = fill(&s, n, 320);
    check_patterns(obj, n, 320);
    chunks = chunk_count(&s);
    ck_assert_msg(chunks >= 3 && chunks <= 14,
                  "%zu objects took %zu chunks: expected doubling chunks, "
                  "then 2 MiB ones", n, chunks);
    for (const struct ferry__slab_chunk *c = s.chunks; c != NULL;
         c = c->next)
        huge += (uintptr_t)c % HUGE == 0;
    ck_assert_msg(huge >= 2, "only %zu of %zu chunks 2 MiB aligned", huge,
                  chunks);
    /* The newest chunk is a huge one, holding the last object. */
    ck_assert_uint_eq((uintptr_t)s.chunks % HUGE, 0);
    ck_assert((uintptr_t)obj[n - 1] - (uintptr_t)s.chunks < HUGE);
    ferry__slab_destroy(&s);
    ck_assert_ptr_null(s.chunks);
    ck_assert_ptr_null(s.free);
    ck_assert_uint_eq(s.fresh_left, 0);
    free(obj);
    /* A destroyed slab works again from a small chunk. */
    obj = fill(&s, 10, 320);
    ck_assert_uint_eq(chunk_count(&s), 1);
    ferry__slab_destroy(&s);
    free(obj);
}
END_TEST

static Suite *slab_suite(void)
{
    Suite *s = suite_create("slab");
    TCase *tc = tcase_create("objects");

    tcase_add_test(tc, test_objects_apart);
    tcase_add_test(tc, test_reuse);
    tcase_add_test(tc, test_growth_to_huge_chunks);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(slab_suite());
}
