/*
 * provider and env modules from inside: mr_mode bit translation, the
 * candidates' rank order, and libfabric's MR cache turned off before the
 * first libfabric call.  (The choice and its refusals through the API:
 * test/api/check_provider.c.)
 */
#include "testutil.h"

#include "fabric/provider.h"

#include <stdlib.h>
#include <string.h>

START_TEST(test_mr_mode_bits_round_trip)
{
    for (unsigned bit = 1; bit <= FERRY_MR_ALL; bit <<= 1) {
        uint64_t fi = ferry__mr_mode_to_fi(bit);
        ck_assert_msg(fi != 0, "FERRY_MR bit 0x%x has no libfabric bit", bit);
        ck_assert_uint_eq(ferry__mr_mode_from_fi(fi), bit);
    }
    ck_assert_uint_eq(ferry__mr_mode_to_fi(FERRY_MR_VIRT_ADDR),
                      FI_MR_VIRT_ADDR);
    ck_assert_uint_eq(ferry__mr_mode_from_fi(FI_MR_LOCAL | FI_MR_ENDPOINT),
                      FERRY_MR_LOCAL | FERRY_MR_ENDPOINT);
}
END_TEST

START_TEST(test_mr_mode_str)
{
    char buf[64];

    ck_assert_str_eq(ferry__mr_mode_str(0, buf, sizeof(buf)), "none");
    ck_assert_str_eq(ferry__mr_mode_str(FERRY_MR_LOCAL | FERRY_MR_RAW, buf,
                                        sizeof(buf)),
                     "LOCAL|RAW");
    /* A short buffer truncates, never overflows. */
    ck_assert_str_eq(ferry__mr_mode_str(FERRY_MR_ALL, buf, 8), "LOCAL");
}
END_TEST

START_TEST(test_loopback_ranks_last)
{
    struct ferry_config cfg;
    struct ferry__selection sel;
    bool seen_lo = false;

    ck_assert_int_eq(ferry_config_init(&cfg), 0);
    cfg.provider = "tcp;ofi_rxm";
    ck_assert_int_eq(ferry__provider_select(&cfg, &sel), 0);
    for (size_t i = 0; i < sel.ncand; i++) {
        bool lo = strcmp(sel.cand[i].info->domain_attr->name, "lo") == 0;
        ck_assert_msg(!seen_lo || lo,
                      "domain %s ranked after the loopback domain",
                      sel.cand[i].info->domain_attr->name);
        seen_lo |= lo;
        if (i > 0)
            ck_assert_int_le(sel.cand[i - 1].rank, sel.cand[i].rank);
    }
    ferry__selection_free(&sel);
}
END_TEST

START_TEST(test_env_turns_mr_cache_off)
{
    struct ferry_config cfg;
    ferry_context_t *ctx;

    unsetenv("FI_MR_CACHE_MAX_COUNT");
    unsetenv("FI_EFA_MR_CACHE_ENABLE");
    unsetenv("FERRY_KEEP_FI_MR_CACHE");
    tu_config(&cfg, "tcp;ofi_rxm");
    ck_assert_int_eq(ferry_context_create(&cfg, &ctx), 0);
    ck_assert_str_eq(getenv("FI_MR_CACHE_MAX_COUNT"), "0");
    ck_assert_str_eq(getenv("FI_EFA_MR_CACHE_ENABLE"), "0");
    ck_assert(!ferry__env_user_set_mr_cache());
    ferry_context_destroy(ctx);
}
END_TEST

START_TEST(test_env_user_value_kept)
{
    struct ferry_config cfg;
    ferry_context_t *ctx;

    setenv("FI_MR_CACHE_MAX_COUNT", "1024", 1);
    unsetenv("FERRY_KEEP_FI_MR_CACHE");
    tu_config(&cfg, "tcp;ofi_rxm");
    ck_assert_int_eq(ferry_context_create(&cfg, &ctx), 0);
    ck_assert_str_eq(getenv("FI_MR_CACHE_MAX_COUNT"), "1024");
    ck_assert(ferry__env_user_set_mr_cache());
    ferry_context_destroy(ctx);
}
END_TEST

static Suite *provider_suite(void)
{
    Suite *s = suite_create("provider");
    TCase *tc = tcase_create("bits");

    tcase_add_test(tc, test_mr_mode_bits_round_trip);
    tcase_add_test(tc, test_mr_mode_str);
    suite_add_tcase(s, tc);
    tc = tcase_create("select");
    tcase_add_test(tc, test_loopback_ranks_last);
    suite_add_tcase(s, tc);
    tc = tcase_create("env");
    tcase_add_test(tc, test_env_turns_mr_cache_off);
    tcase_add_test(tc, test_env_user_value_kept);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(provider_suite());
}
