/*
 * sindex module: the registration cache's search index answers what a
 * linear count answers, for every count of keys around the block and
 * layer boundaries, with repeated keys, keys at the ends of the address
 * space and every key between and beside the stored ones.
 */
#include "testutil.h"

#include "reg/sindex.h"

#include <stdlib.h>

/* Keys below `key`, the slow way. */
static size_t count_below(const uintptr_t *keys, size_t n, uintptr_t key)
{
    size_t below = 0;

    for (size_t i = 0; i < n; i++)
        below += keys[i] < key;
    return below;
}

static uint64_t next_rand(uint64_t *rng)
{
    *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
    return *rng >> 33;
}

/* The index answers as a linear count for `key` and its neighbours. */
static void check_around(const struct ferry__sindex *x, const uintptr_t *keys,
                         size_t n, uintptr_t key)
{
    for (int d = -1; d <= 1; d++) {
        uintptr_t probe = key + (uintptr_t)(intptr_t)d;
        size_t want = count_below(keys, n, probe);
        size_t got = ferry__sindex_lower_bound(x, probe);

        ck_assert_msg(got == want, "%zu keys: %zu below %#lx, the index says %zu",
                      n, want, (unsigned long)probe, got);
    }
}

/* Builds an index of `keys` and checks probes around every `stride`th key
 * and the last one, and both ends of the address space. */
static void check_index(const uintptr_t *keys, size_t n, size_t stride)
{
    size_t bytes = ferry__sindex_bytes(n);
    void *storage = aligned_alloc(64, bytes);
    struct ferry__sindex x;

    ck_assert_ptr_nonnull(storage);
    ck_assert_uint_eq(bytes % 64, 0);
    ferry__sindex_init(&x, storage, n);
    ck_assert_uint_ge(x.nlayers, 1);
    for (unsigned l = 0; l < x.nlayers; l++) {
        /* Every layer inside the storage, every block on one line. */
        ck_assert((char *)x.layer[l] >= (char *)storage);
        ck_assert((char *)x.layer[l] < (char *)storage + bytes);
        ck_assert_uint_eq((uintptr_t)x.layer[l] % 64, 0);
    }
    for (size_t i = 0; i < n; i++)
        x.layer[0][i] = keys[i];
    ferry__sindex_build(&x);
    for (size_t i = 0; i < n; i += stride)
        check_around(&x, keys, n, keys[i]);
    if (n > 0)
        check_around(&x, keys, n, keys[n - 1]);
    ck_assert_uint_eq(ferry__sindex_lower_bound(&x, 0), 0);
    ck_assert_uint_eq(ferry__sindex_lower_bound(&x, UINTPTR_MAX),
                      count_below(keys, n, UINTPTR_MAX));
    free(storage);
}

/* Sorted keys a page apart from `base`, with a run of repeats when
 * `repeats` (overlapping cache entries may share a start). */
static uintptr_t *make_keys(size_t n, uintptr_t base, bool repeats,
                            uint64_t *rng)
{
    uintptr_t *keys = malloc((n ? n : 1) * sizeof(*keys));
    uintptr_t at = base;

    ck_assert_ptr_nonnull(keys);
    for (size_t i = 0; i < n; i++) {
        if (!repeats || next_rand(rng) % 3 != 0)
            at += 4096 * (1 + next_rand(rng) % 4);
        keys[i] = at;
    }
    return keys;
}

/* Indexes of every count of keys from `from` to `to` by `step`, each key
 * probed. */
static void check_counts(size_t from, size_t to, size_t step, uintptr_t base,
                         bool repeats, uint64_t seed)
{
    for (size_t n = from; n <= to; n += step) {
        uintptr_t *keys = make_keys(n, base, repeats, &seed);

        check_index(keys, n, 1);
        free(keys);
    }
}

START_TEST(test_every_count_to_600)
{
    /* One layer up to 8 keys, two to 64, three to 512, four beyond. */
    check_counts(0, 600, 1, 0x10000, false, 42);
}
END_TEST

START_TEST(test_repeated_keys)
{
    check_counts(1, 300, 13, 0x7f0000000000, true, 7);
}
END_TEST

START_TEST(test_large_and_extreme)
{
    uint64_t rng = 99;
    size_t n = 100000;
    uintptr_t *keys = make_keys(n, 0, false, &rng);

    /* Keys at 0 and at the top of the address space (but below the
     * padding, UINTPTR_MAX, which no page start can be). */
    keys[0] = 0;
    keys[n - 1] = UINTPTR_MAX - 4096;
    /* Probes of a thousand keys spread over all: each is a linear count. */
    check_index(keys, n, 101);
    free(keys);
}
END_TEST

START_TEST(test_layer_counts)
{
    /* log8 layers: what the search's cost rests on. */
    struct {
        size_t n;
        unsigned layers;
    } cases[] = {{0, 1}, {8, 1}, {9, 2}, {64, 2}, {65, 3}, {512, 3},
                 {513, 4}, {100000, 6}, {1u << 24, 8}};

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t bytes = ferry__sindex_bytes(cases[i].n);
        void *storage = aligned_alloc(64, bytes);
        struct ferry__sindex x;

        ck_assert_ptr_nonnull(storage);
        ferry__sindex_init(&x, storage, cases[i].n);
        ck_assert_msg(x.nlayers == cases[i].layers,
                      "%zu keys: %u layers, expected %u", cases[i].n,
                      x.nlayers, cases[i].layers);
        free(storage);
    }
}
END_TEST

static Suite *sindex_suite(void)
{
    Suite *s = suite_create("sindex");
    TCase *tc = tcase_create("search");

    tcase_add_test(tc, test_every_count_to_600);
    tcase_add_test(tc, test_repeated_keys);
    tcase_add_test(tc, test_large_and_extreme);
    tcase_add_test(tc, test_layer_counts);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(sindex_suite());
}
