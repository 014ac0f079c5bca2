/*
 * provider selection through the API: the candidates ferry_probe_providers
 * reports (domain and provider honoured, shared memory only for local
 * peers), refusals that say why, FI_PROVIDER and the config honoured, and
 * the mr_mode offered and forced.  (The mr_mode bit translation, the rank
 * order and libfabric's MR cache: test/unit/check_provider.c.)
 */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

/* What ferry_context_create would choose from for cfg: something. */
static ferry_probe_t *probe_of(const struct ferry_config *cfg)
{
    ferry_probe_t *probe = NULL;
    int ret = ferry_probe_providers(cfg, &probe);

    ck_assert_msg(ret == 0, "probe: %s", ferry_last_error());
    ck_assert_uint_ge(ferry_probe_count(probe), 1);
    return probe;
}

static struct ferry_provider_report entry(const ferry_probe_t *probe,
                                          size_t i)
{
    struct ferry_provider_report r = FERRY_PROVIDER_REPORT_INIT;

    ck_assert_int_eq(ferry_probe_entry(probe, i, &r), 0);
    return r;
}

START_TEST(test_tcp_domain_honoured)
{
    struct ferry_config cfg;
    ferry_probe_t *probe;

    tu_config(&cfg, "tcp;ofi_rxm");
    probe = probe_of(&cfg);
    for (size_t i = 0; i < ferry_probe_count(probe); i++) {
        struct ferry_provider_report r = entry(probe, i);

        ck_assert_str_eq(r.domain, "lo");
        ck_assert_str_eq(r.provider, "tcp;ofi_rxm");
    }
    ferry_probe_free(probe);
}
END_TEST

START_TEST(test_shm_only_when_local_or_asked)
{
    struct ferry_config cfg;
    ferry_probe_t *probe;

    ck_assert_int_eq(ferry_config_init(&cfg), 0);
    probe = probe_of(&cfg);
    for (size_t i = 0; i < ferry_probe_count(probe); i++)
        ck_assert_str_ne(entry(probe, i).provider, "shm");
    ck_assert_ptr_nonnull(strstr(ferry_probe_refused(probe),
                                 "shm: reaches only processes"));
    ferry_probe_free(probe);

    /* Every peer local: shared memory outranks the network emulations. */
    cfg.local_only = 1;
    probe = probe_of(&cfg);
    ck_assert_str_eq(entry(probe, 0).provider, "shm");
    ferry_probe_free(probe);
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
    TCase *tc = tcase_create("select");

    tcase_add_test(tc, test_tcp_domain_honoured);
    tcase_add_test(tc, test_shm_only_when_local_or_asked);
    tcase_add_test(tc, test_fi_provider_env_narrows);
    tcase_add_test(tc, test_missing_provider_says_why);
    tcase_add_test(tc, test_unknown_domain_named);
    tcase_add_test(tc, test_why_is_one_sentence);
    tcase_add_test(tc, test_offered_mr_mode_adapts);
    tcase_add_test(tc, test_forced_wire_modes_must_be_the_providers);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(provider_suite());
}
