/*
 * provider and env modules: capability-based choice, refusals that say
 * why, FI_PROVIDER and config honoured, mr_mode bit translation, and
 * libfabric's MR cache turned off before the first libfabric call.
 */
#include "testutil.h"

#include "ferry-internal.h"

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
    /* The pre-1.5 FI_MR_BASIC means VIRT_ADDR|ALLOCATED|PROV_KEY. */
    ck_assert_uint_eq(ferry__mr_mode_from_fi(FI_MR_BASIC),
                      FERRY_MR_VIRT_ADDR | FERRY_MR_ALLOCATED |
                          FERRY_MR_PROV_KEY);
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

START_TEST(test_tcp_domain_honoured)
{
    struct ferry_config cfg;
    struct ferry__selection sel;

    tu_config(&cfg, "tcp;ofi_rxm");
    ck_assert_int_eq(ferry__provider_select(&cfg, &sel), 0);
    ck_assert_uint_ge(sel.ncand, 1);
    for (size_t i = 0; i < sel.ncand; i++) {
        ck_assert_str_eq(sel.cand[i].info->domain_attr->name, "lo");
        ck_assert_str_eq(sel.cand[i].info->fabric_attr->prov_name,
                         "tcp;ofi_rxm");
    }
    ferry__selection_free(&sel);
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

START_TEST(test_shm_only_when_local_or_asked)
{
    struct ferry_config cfg;
    struct ferry__selection sel;

    ck_assert_int_eq(ferry_config_init(&cfg), 0);
    ck_assert_int_eq(ferry__provider_select(&cfg, &sel), 0);
    for (size_t i = 0; i < sel.ncand; i++)
        ck_assert_str_ne(sel.cand[i].info->fabric_attr->prov_name, "shm");
    ck_assert_ptr_nonnull(strstr(sel.refused, "shm: reaches only processes"));
    ferry__selection_free(&sel);

    /* Every peer local: shared memory outranks the network emulations. */
    cfg.local_only = 1;
    ck_assert_int_eq(ferry__provider_select(&cfg, &sel), 0);
    ck_assert_str_eq(sel.cand[0].info->fabric_attr->prov_name, "shm");
    ferry__selection_free(&sel);
}
END_TEST

START_TEST(test_fi_provider_env_narrows)
{
    struct ferry_config cfg;
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;
    ferry_context_t *ctx;

    /* A fresh process (Check forks): libfabric reads it on first use. */
    setenv("FI_PROVIDER", "tcp", 1);
    ck_assert_int_eq(ferry_config_init(&cfg), 0);
    ck_assert_int_eq(ferry_context_create(&cfg, &ctx), 0);
    ck_assert_int_eq(ferry_context_info(ctx, &info), 0);
    ck_assert_ptr_nonnull(strstr(info.provider, "tcp"));
    ck_assert_ptr_nonnull(strstr(info.why, "FI_PROVIDER=tcp"));
    ferry_context_destroy(ctx);
}
END_TEST

START_TEST(test_missing_provider_says_why)
{
    struct ferry_config cfg;
    ferry_context_t *ctx = NULL;

    ck_assert_int_eq(ferry_config_init(&cfg), 0);
    cfg.provider = "verbs";
    ck_assert_int_eq(ferry_context_create(&cfg, &ctx), FERRY_ENOPROVIDER);
    ck_assert_ptr_null(ctx);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "verbs: no device"));
}
END_TEST

START_TEST(test_unknown_domain_named)
{
    struct ferry_config cfg;
    ferry_context_t *ctx = NULL;

    ck_assert_int_eq(ferry_config_init(&cfg), 0);
    cfg.domain = "nonexistent0";
    ck_assert_int_eq(ferry_context_create(&cfg, &ctx), FERRY_ENOPROVIDER);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(),
                                 "no domain named 'nonexistent0'"));
}
END_TEST

START_TEST(test_why_is_one_sentence)
{
    struct ferry_config cfg;
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;
    ferry_context_t *ctx;

    tu_config(&cfg, "tcp;ofi_rxm");
    ck_assert_int_eq(ferry_context_create(&cfg, &ctx), 0);
    ck_assert_int_eq(ferry_context_info(ctx, &info), 0);
    ck_assert_ptr_nonnull(strstr(info.why, "chose tcp;ofi_rxm on domain lo"));
    ck_assert_ptr_null(strchr(info.why, '\n'));
    ferry_context_destroy(ctx);
}
END_TEST

START_TEST(test_env_turns_mr_cache_off)
{
    struct ferry_config cfg;
    ferry_context_t *ctx;

    unsetenv("FI_MR_CACHE_MAX_COUNT");
    unsetenv("FI_EFA_MR_CACHE_ENABLE");
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
    tu_config(&cfg, "tcp;ofi_rxm");
    ck_assert_int_eq(ferry_context_create(&cfg, &ctx), 0);
    ck_assert_str_eq(getenv("FI_MR_CACHE_MAX_COUNT"), "1024");
    ck_assert(ferry__env_user_set_mr_cache());
    ferry_context_destroy(ctx);
}
END_TEST

static unsigned shm_mode(unsigned offer)
{
    struct ferry_config cfg;
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;
    ferry_context_t *ctx;

    tu_config(&cfg, "shm");
    cfg.mr_mode_offer = offer;
    ck_assert_int_eq(ferry_context_create(&cfg, &ctx), 0);
    ck_assert_int_eq(ferry_context_info(ctx, &info), 0);
    ferry_context_destroy(ctx);
    return info.mr_mode;
}

START_TEST(test_offered_mr_mode_adapts)
{
    /* shm takes FI_MR_VIRT_ADDR when offered and uses offsets otherwise. */
    ck_assert(shm_mode(FERRY_MR_ALL) & FERRY_MR_VIRT_ADDR);
    ck_assert(!(shm_mode(FERRY_MR_ALL & ~FERRY_MR_VIRT_ADDR) &
                FERRY_MR_VIRT_ADDR));
}
END_TEST

START_TEST(test_forced_wire_modes_must_be_the_providers)
{
    struct ferry_config cfg;
    ferry_context_t *ctx = NULL;

    /* tcp addresses remote memory by offset: forcing virtual addresses
     * would make every operation miss, so it is refused up front.  (A
     * forced FERRY_MR_RAW fails where raw keys are used: check_mem.) */
    tu_config(&cfg, "tcp;ofi_rxm");
    cfg.mr_mode_force = FERRY_MR_VIRT_ADDR;
    ck_assert_int_eq(ferry_context_create(&cfg, &ctx), FERRY_EINVAL);
    ck_assert_ptr_null(ctx);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(),
                                 "addresses remote memory by offset"));
    /* shm takes virtual addresses when offered: forcing them is fine. */
    tu_config(&cfg, "shm");
    cfg.mr_mode_force = FERRY_MR_VIRT_ADDR;
    ck_assert_int_eq(ferry_context_create(&cfg, &ctx), 0);
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
    tcase_add_test(tc, test_tcp_domain_honoured);
    tcase_add_test(tc, test_loopback_ranks_last);
    tcase_add_test(tc, test_shm_only_when_local_or_asked);
    tcase_add_test(tc, test_fi_provider_env_narrows);
    tcase_add_test(tc, test_missing_provider_says_why);
    tcase_add_test(tc, test_unknown_domain_named);
    tcase_add_test(tc, test_why_is_one_sentence);
    tcase_add_test(tc, test_offered_mr_mode_adapts);
    tcase_add_test(tc, test_forced_wire_modes_must_be_the_providers);
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
