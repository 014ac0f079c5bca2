/*
 * Device memory on domains that cannot register it, from inside, on the
 * simulated device: the pipeline keeping more than one chunk in flight,
 * counted on the simulated copy engine; cached device registrations
 * validated by buffer id (an allocation made again at a freed address);
 * and the choice of the device path from the facts.  (Staged transfers
 * and refusals through the API: test/api/check_stage.c.)
 */
#include "stageutil.h"

#include "xfer/stage.h"
#include "dev/hmem.h"

/*
 * 8 MiB through 4 slots of 256 KiB: the chunks overlap.  Loop index:
 * provider, then with operations capped below the chunk, which caps the
 * chunk too (a chunk moves as one operation).
 */
START_TEST(test_pipeline_overlaps)
{
    size_t len = 8 * MiB, chunk = CHUNK;
    struct rig r;
    struct ferry_stats st;
    uint64_t copies;

    if (_i >= (int)tu_nproviders)
        pair_max_op = chunk = CHUNK / 4;
    rig_open(&r, tu_providers[_i % (int)tu_nproviders], len, false, 0, 9);
    copies = ferry__hmem_sim_copies();
    ck_assert_int_eq(move(r.p.peer, true, r.dev, r.dmem, r.rmem, 0, len, NULL),
                     0);
    ck_assert_uint_eq(tu_check(r.host, len, 9), SIZE_MAX);
    st = tu_stats(r.p.init);
    ck_assert_uint_eq(st.staged_chunks, len / chunk);
    ck_assert_msg(st.staged_max_in_flight > 1,
                  "staged_max_in_flight is %llu: the chunks did not overlap",
                  (unsigned long long)st.staged_max_in_flight);
    ck_assert_uint_le(st.staged_max_in_flight, SLOTS);
    ck_assert_uint_ge(ferry__hmem_sim_copies() - copies, len / chunk);
    rig_close(&r);
}
END_TEST

/* Memory freed and allocated again at the same address is registered
 * anew: the second transfer carries the new allocation's bytes. */
START_TEST(test_buffer_id_reuse)
{
    size_t len = 512 * KiB;
    struct rig r;
    struct ferry__hmem_ptr before, after;
    struct ferry_stats st;

    rig_open(&r, tu_providers[_i], len, false, 0, 7);
    ck_assert_int_eq(ferry_mem_close(r.dmem), 0);
    ck_assert_int_eq(ferry__hmem()->ptr_info(r.dev, &before), 0);
    /* lmem NULL: the cache registers it, and hits it the second time. */
    ck_assert_int_eq(move(r.p.peer, true, r.dev, NULL, r.rmem, 0, len, NULL),
                     0);
    ck_assert_int_eq(move(r.p.peer, true, r.dev, NULL, r.rmem, 0, len, NULL),
                     0);
    ck_assert_uint_eq(tu_check(r.host, len, 7), SIZE_MAX);
    st = tu_stats(r.p.init);
    ck_assert_uint_eq(st.rcache_misses, 1);
    ck_assert_uint_eq(st.rcache_hits, 1);
    ck_assert_int_eq(ferry_device_free(r.dev), 0);
    ck_assert_msg(ferry__hmem_sim_alloc_at(0, r.dev, len) == 0, "%s",
                  ferry_last_error());
    ck_assert_int_eq(ferry__hmem()->ptr_info(r.dev, &after), 0);
    ck_assert_uint_ne(before.buffer_id, after.buffer_id);
    {
        void *fill = dev_filled(1, len, 8);
        ck_assert_int_eq(ferry_device_copy(r.dev, fill, len), 0);
        ferry_device_free(fill);
    }
    ck_assert_int_eq(move(r.p.peer, true, r.dev, NULL, r.rmem, 0, len, NULL),
                     0);
    ck_assert_msg(tu_check(r.host, len, 8) == SIZE_MAX,
                  "a stale registration of the freed allocation was used");
    st = tu_stats(r.p.init);
    ck_assert_uint_eq(st.rcache_misses, 2);
    ck_assert_uint_ge(st.rcache_invalidations, 1);
    /* rig_close deregisters dmem: register the new allocation for it. */
    ck_assert_int_eq(ferry_mem_register(r.p.init, r.dev, len, FERRY_MEM_CUDA,
                                        0, 0, &r.dmem),
                     0);
    rig_close(&r);
}
END_TEST

/* ---- the device path, from the facts ----------------------------------------- */

START_TEST(test_path_choice)
{
    struct ferry__dev_facts f = {
        .backend = "cuda",
        .backend_why = "",
        .provider = "verbs;ofi_rxm",
        .domain = "mlx5_0",
        .domain_hmem = true,
        .built_with_dmabuf = true,
        .fi_runtime = FI_VERSION(1, 21),
        .fi_requested = FI_VERSION(1, 21),
    };
    char why[320];

    ck_assert_int_eq(ferry__dev_path_choose(&f, why, sizeof(why)),
                     FERRY__DEV_DMABUF);
    f.fi_runtime = FI_VERSION(1, 19);
    ck_assert_int_eq(ferry__dev_path_choose(&f, why, sizeof(why)),
                     FERRY__DEV_VA);
    ck_assert_ptr_nonnull(strstr(why, "loaded is older than 1.20"));
    f.fi_runtime = FI_VERSION(1, 21);
    f.fi_requested = FI_VERSION(1, 17);
    ck_assert_int_eq(ferry__dev_path_choose(&f, why, sizeof(why)),
                     FERRY__DEV_VA);
    ck_assert_ptr_nonnull(strstr(why, "asks libfabric for an API"));
    f.built_with_dmabuf = false;
    ck_assert_int_eq(ferry__dev_path_choose(&f, why, sizeof(why)),
                     FERRY__DEV_VA);
    ck_assert_ptr_nonnull(strstr(why, "headers older than 1.20"));
    f.domain_hmem = false;
    ck_assert_int_eq(ferry__dev_path_choose(&f, why, sizeof(why)),
                     FERRY__DEV_STAGED);
    ck_assert_ptr_nonnull(strstr(why, "mlx5_0"));
    /* Why there is no FI_HMEM comes from what libfabric has. */
    ck_assert_ptr_nonnull(strstr(why, "built without CUDA support"));
    f.fi_has_cuda = true;
    ck_assert_int_eq(ferry__dev_path_choose(&f, why, sizeof(why)),
                     FERRY__DEV_STAGED);
    ck_assert_ptr_nonnull(strstr(why, "libfabric has CUDA support, but"));
    ck_assert_ptr_null(strstr(why, "without CUDA"));
    /* The simulated device is staged whatever the domain offers. */
    f.domain_hmem = true;
    f.simulated = true;
    ck_assert_int_eq(ferry__dev_path_choose(&f, why, sizeof(why)),
                     FERRY__DEV_STAGED);
    ck_assert_ptr_nonnull(strstr(why, "simulated device's memory"));
    f.simulated = false;
    f.domain_hmem = false;
    f.backend = NULL;
    f.backend_why = "libcuda.so.1 not found";
    ck_assert_int_eq(ferry__dev_path_choose(&f, why, sizeof(why)),
                     FERRY__DEV_NONE);
    ck_assert_ptr_nonnull(strstr(why, "libcuda.so.1 not found"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("stage");
    TCase *tc;

    tc = tu_tcase(s, "staged", 120);
    tcase_add_loop_test(tc, test_pipeline_overlaps, 0, 2 * (int)tu_nproviders);
    tc = tu_tcase(s, "cache", 120);
    tcase_add_loop_test(tc, test_buffer_id_reuse, 0, (int)tu_nproviders);
    tc = tu_tcase(s, "refusals", 60);
    tcase_add_test(tc, test_path_choice);
    return tu_run(s);
}
