/*
 * provider selection through the API: the candidates ferry_probe_providers
 * reports (domain and provider honoured, shared memory only for local
 * peers), refusals that say why, FI_PROVIDER and the config honoured, and
 * the mr_mode offered and forced.  What ferry does to libfabric's own MR
 * cache (FI_MR_CACHE_MONITOR and the others, FERRY_KEEP_FI_MR_CACHE) and reports
 * through ferry_fi_mr_cache_state/_status.  (The mr_mode bit translation
 * and the rank order: test/unit/check_provider.c.)
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TCP "tcp;ofi_rxm"
#define KEEP "FERRY_KEEP_FI_MR_CACHE"
#define MONITOR "FI_MR_CACHE_MONITOR"
#define CUDA_MONITOR "FI_MR_CUDA_CACHE_MONITOR_ENABLED"
#define EFA "FI_EFA_MR_CACHE_ENABLE"

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
    ferry_probe_close(probe);
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
    ferry_probe_close(probe);

    /* Every peer local: shared memory outranks the network emulations. */
    cfg.local_only = 1;
    probe = probe_of(&cfg);
    ck_assert_str_eq(entry(probe, 0).provider, "shm");
    ferry_probe_close(probe);
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
    ferry_context_close(ctx);
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
    ferry_context_close(ctx);
}
END_TEST

START_TEST(test_mistyped_provider_suggested)
{
    struct ferry_config cfg;
    ferry_context_t *ctx = NULL;

    ck_assert_int_eq(ferry_config_init(&cfg), 0);
    cfg.provider = "tcpp";
    ck_assert_int_eq(ferry_context_create(&cfg, &ctx), FERRY_ENOPROVIDER);
    ck_assert_ptr_null(ctx);
    ck_assert_msg(strstr(ferry_last_error(),
                         "libfabric has no provider named 'tcpp'; did you "
                         "mean 'tcp'? (it has ") != NULL,
                  "%s", ferry_last_error());
    ck_assert_ptr_null(strstr(ferry_last_error(), "no device"));
}
END_TEST

START_TEST(test_filtered_out_is_not_no_device)
{
    ferry_probe_t *probe;
    const char *prov, *reason;
    bool tcp_said = false;

    /* A fresh process (Check forks): libfabric reads it on first use. */
    setenv("FI_PROVIDER", "verbs", 1);
    ck_assert_int_eq(ferry_probe_providers(NULL, &probe), 0);
    ck_assert_uint_eq(ferry_probe_count(probe), 0);
    for (size_t i = 0; i < ferry_probe_refusal_count(probe); i++) {
        ck_assert_int_eq(ferry_probe_refusal(probe, i, &prov, &reason), 0);
        if (strcmp(prov, "tcp") == 0) {
            ck_assert_str_eq(reason, "excluded by FI_PROVIDER=verbs");
            tcp_said = true;
        }
        if (strcmp(prov, "verbs") == 0)
            ck_assert_ptr_nonnull(strstr(reason, "not loaded by libfabric"));
        ck_assert_ptr_null(strstr(reason, "libfabric has no provider"));
    }
    ck_assert(tcp_said);
    /* The list and the sentence agree. */
    ck_assert_ptr_nonnull(strstr(ferry_probe_refused(probe),
                                 "tcp: excluded by FI_PROVIDER=verbs"));
    /* Out of range and NULL arguments are refused with a sentence. */
    ck_assert_int_eq(ferry_probe_refusal(probe, ferry_probe_refusal_count(probe),
                                         &prov, &reason),
                     FERRY_EINVAL);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "refusal"));
    ck_assert_int_eq(ferry_probe_refusal(probe, 0, NULL, &reason),
                     FERRY_EINVAL);
    ck_assert_int_eq(ferry_probe_refusal(NULL, 0, &prov, &reason),
                     FERRY_EINVAL);
    ck_assert_uint_eq(ferry_probe_refusal_count(NULL), 0);
    ferry_probe_close(probe);
}
END_TEST

START_TEST(test_peer_host_picks_the_routing_domain)
{
    struct ferry_config cfg;
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;
    ferry_context_t *ctx;

    ck_assert_int_eq(ferry_config_init(&cfg), 0);
    cfg.provider = "tcp;ofi_rxm";
    cfg.peer_host = "127.0.0.1";
    ck_assert_int_eq(ferry_context_create(&cfg, &ctx), 0);
    ck_assert_int_eq(ferry_context_info(ctx, &info), 0);
    ck_assert_str_eq(info.domain, "lo");
    ck_assert_ptr_nonnull(strstr(info.why, "routes to peer host 127.0.0.1"));
    ferry_context_close(ctx);
    /* From the environment too. */
    setenv("FERRY_PEER_HOST", "127.0.0.1", 1);
    ck_assert_int_eq(ferry_config_init(&cfg), 0);
    ck_assert_str_eq(cfg.peer_host, "127.0.0.1");
    unsetenv("FERRY_PEER_HOST");
    /* A host that does not resolve is refused with its name. */
    cfg.peer_host = "no-such-host.invalid";
    ck_assert_int_eq(ferry_context_create(&cfg, &ctx), FERRY_EINVAL);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "no-such-host.invalid"));
}
END_TEST

START_TEST(test_named_stack_is_explained)
{
    struct ferry_config cfg;
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;
    ferry_context_t *ctx;

    /* "tcp" names the tcp provider or a stack on it; which one ran, and
     * what it is, is in the sentence. */
    tu_config(&cfg, "tcp");
    ck_assert_int_eq(ferry_context_create(&cfg, &ctx), 0);
    ck_assert_int_eq(ferry_context_info(ctx, &info), 0);
    if (strcmp(info.provider, "tcp") != 0)
        ck_assert_msg(strstr(info.why, "provider 'tcp' named by the config, "
                                       "which here is ") != NULL,
                      "%s", info.why);
    ck_assert_ptr_nonnull(strstr(info.why, "tcp"));
    ck_assert_ptr_nonnull(strstr(info.why, "named by the config"));
    ferry_context_close(ctx);
}
END_TEST

/* The mr_mode of a shm context offered `offer`, and its libfabric. */
static unsigned shm_mode(unsigned offer, unsigned *fi_version)
{
    struct ferry_config cfg;
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;
    ferry_context_t *ctx;

    tu_config(&cfg, "shm");
    cfg.mr_mode_offer = offer;
    ck_assert_int_eq(ferry_context_create(&cfg, &ctx), 0);
    ck_assert_int_eq(ferry_context_info(ctx, &info), 0);
    ferry_context_close(ctx);
    *fi_version = info.fi_version;
    return info.mr_mode;
}

START_TEST(test_offered_mr_mode_adapts)
{
    /* shm takes FI_MR_VIRT_ADDR when offered and uses offsets otherwise;
     * before libfabric 2.5 ferry asks it for endpoints that order writes,
     * which use offsets (forcing the bit keeps them: below). */
    unsigned v;
    bool virt = shm_mode(FERRY_MR_ALL, &v) & FERRY_MR_VIRT_ADDR;

    ck_assert_msg(virt == (v >= ((2u << 16) | 5u)),
                  "libfabric %u.%u: shm offered FI_MR_VIRT_ADDR %s it",
                  v >> 16, v & 0xffff, virt ? "takes" : "does not take");
    ck_assert(!(shm_mode(FERRY_MR_ALL & ~FERRY_MR_VIRT_ADDR, &v) &
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
    /* shm takes virtual addresses when offered: forcing them is fine,
     * and ferry then does not ask it for ordered writes. */
    tu_config(&cfg, "shm");
    cfg.mr_mode_force = FERRY_MR_VIRT_ADDR;
    ck_assert_int_eq(ferry_context_create(&cfg, &ctx), 0);
    ferry_context_close(ctx);
}
END_TEST

/* ---- libfabric's MR cache ------------------------------------------------ */

/*
 * ferry decides about libfabric's MR cache once per process: these checks
 * need a fresh process each (see provider_suite).
 */

/* The environment as ferry finds it: each value, or NULL to unset. */
static void mr_cache_env(const char *keep, const char *monitor,
                         const char *efa)
{
    const char *const names[] = {KEEP, MONITOR, CUDA_MONITOR, EFA};
    const char *const values[] = {keep, monitor, NULL, efa};

    for (size_t i = 0; i < TU_ARRAY_LEN(names); i++) {
        if (values[i] != NULL)
            setenv(names[i], values[i], 1);
        else
            unsetenv(names[i]);
    }
}

/* The way in that matters: a context, ferry's first libfabric call. */
static void open_and_close_context(void)
{
    ferry_context_close(tu_context(TCP));
}

#define ASSERT_UNSET(var)                                                     \
    ck_assert_msg(getenv(var) == NULL, "ferry set %s=%s", (var), getenv(var))

#define ASSERT_STATUS_HAS(phrase)                                             \
    ck_assert_msg(strstr(ferry_fi_mr_cache_status(), (phrase)) != NULL,       \
                  "status \"%s\" lacks \"%s\"", ferry_fi_mr_cache_status(),  \
                  (phrase))

START_TEST(test_fi_mr_cache_turned_off)
{
    mr_cache_env(NULL, NULL, NULL);
    open_and_close_context();
    ck_assert_str_eq(getenv(MONITOR), "disabled");
    ck_assert_str_eq(getenv(CUDA_MONITOR), "0");
    ck_assert_str_eq(getenv(EFA), "0");
    /* Not the count: it also sizes shm's GPU IPC handle cache, without
     * which shm with CUDA opens no domain. */
    ASSERT_UNSET("FI_MR_CACHE_MAX_COUNT");
    ck_assert_int_eq(ferry_fi_mr_cache_state(), FERRY_FI_MR_CACHE_OFF);
    ASSERT_STATUS_HAS("ferry turned libfabric's MR cache off for this process "
                      "(FI_MR_CACHE_MONITOR=disabled, "
                      "FI_MR_CUDA_CACHE_MONITOR_ENABLED=0, "
                      "FI_EFA_MR_CACHE_ENABLE=0)");
    ASSERT_STATUS_HAS("FERRY_KEEP_FI_MR_CACHE=1 leaves it on");
}
END_TEST

START_TEST(test_fi_mr_cache_keep_zero_is_the_default)
{
    mr_cache_env("0", NULL, NULL);
    open_and_close_context();
    ck_assert_str_eq(getenv(MONITOR), "disabled");
    ck_assert_str_eq(getenv(EFA), "0");
    ck_assert_int_eq(ferry_fi_mr_cache_state(), FERRY_FI_MR_CACHE_OFF);
}
END_TEST

START_TEST(test_fi_mr_cache_kept)
{
    mr_cache_env("1", NULL, NULL);
    open_and_close_context();
    ASSERT_UNSET(MONITOR);
    ASSERT_UNSET(CUDA_MONITOR);
    ASSERT_UNSET(EFA);
    ck_assert_int_eq(ferry_fi_mr_cache_state(), FERRY_FI_MR_CACHE_KEPT);
    ASSERT_STATUS_HAS("libfabric's MR cache left on because "
                      "FERRY_KEEP_FI_MR_CACHE=1");
}
END_TEST

START_TEST(test_fi_mr_cache_user_value_kept)
{
    mr_cache_env(NULL, "uffd", NULL);
    open_and_close_context();
    ck_assert_str_eq(getenv(MONITOR), "uffd");
    ck_assert_str_eq(getenv(EFA), "0"); /* the one the user left unset */
    ck_assert_int_eq(ferry_fi_mr_cache_state(), FERRY_FI_MR_CACHE_USER);
    ASSERT_STATUS_HAS("libfabric's MR cache left as the user set it "
                      "(FI_MR_CACHE_MONITOR=uffd)");
    ASSERT_STATUS_HAS("ferry set FI_MR_CUDA_CACHE_MONITOR_ENABLED=0, "
                      "FI_EFA_MR_CACHE_ENABLE=0");
}
END_TEST

START_TEST(test_fi_mr_cache_user_value_and_keep)
{
    /* A user's 0 is a user's value too; with the opt-out ferry sets none. */
    mr_cache_env("1", "disabled", NULL);
    open_and_close_context();
    ck_assert_str_eq(getenv(MONITOR), "disabled");
    ASSERT_UNSET(EFA);
    ck_assert_int_eq(ferry_fi_mr_cache_state(), FERRY_FI_MR_CACHE_USER);
    ASSERT_STATUS_HAS("left as the user set it (FI_MR_CACHE_MONITOR=disabled)");
    ASSERT_STATUS_HAS("FI_EFA_MR_CACHE_ENABLE left unset because "
                      "FERRY_KEEP_FI_MR_CACHE=1");
}
END_TEST

START_TEST(test_fi_mr_cache_decided_once)
{
    /* Asking decides, before any context... */
    mr_cache_env(NULL, NULL, NULL);
    ck_assert_int_eq(ferry_fi_mr_cache_state(), FERRY_FI_MR_CACHE_OFF);
    ck_assert_str_eq(getenv(MONITOR), "disabled");
    /* ...for the whole process: a later change is not looked at. */
    mr_cache_env("1", NULL, NULL);
    open_and_close_context();
    ASSERT_UNSET(MONITOR);
    ck_assert_int_eq(ferry_fi_mr_cache_state(), FERRY_FI_MR_CACHE_OFF);
}
END_TEST

static const char *const bad_keep[] = {"yes", "2", "", "true", " 1", "1x"};

START_TEST(test_fi_mr_cache_bad_keep_refused)
{
    struct ferry_config cfg;
    ferry_context_t *ctx = NULL;
    char named[64];

    mr_cache_env(bad_keep[_i], NULL, NULL);
    snprintf(named, sizeof(named), "FERRY_KEEP_FI_MR_CACHE=%s is neither 1",
             bad_keep[_i]);
    TU_EXPECT_ERROR(ferry_config_init(&cfg), FERRY_EINVAL, named);
    tu_assert_sentence("nor 0", NULL);
    setenv("FERRY_PROVIDER", TCP, 1);
    TU_EXPECT_ERROR(ferry_context_create(NULL, &ctx), FERRY_EINVAL, named);
    ck_assert_ptr_null(ctx);
    unsetenv("FERRY_PROVIDER");
    /* Where ferry decides without a config, the value is ignored with a
     * warning: ferry turns the cache off, the safe side. */
    ck_assert_int_eq(ferry_fi_mr_cache_state(), FERRY_FI_MR_CACHE_OFF);
    ck_assert_str_eq(getenv(MONITOR), "disabled");
    snprintf(named, sizeof(named), "FERRY_KEEP_FI_MR_CACHE=%s was ignored",
             bad_keep[_i]);
    ASSERT_STATUS_HAS(named);
}
END_TEST

static Suite *provider_suite(void)
{
    Suite *s = suite_create("provider");
    TCase *tc = tcase_create("select");

    tcase_add_test(tc, test_tcp_domain_honoured);
    tcase_add_test(tc, test_shm_only_when_local_or_asked);
    tcase_add_test(tc, test_missing_provider_says_why);
    tcase_add_test(tc, test_unknown_domain_named);
    tcase_add_test(tc, test_mistyped_provider_suggested);
    tcase_add_test(tc, test_peer_host_picks_the_routing_domain);
    tcase_add_test(tc, test_named_stack_is_explained);
    tcase_add_test(tc, test_why_is_one_sentence);
    tcase_add_test(tc, test_offered_mr_mode_adapts);
    tcase_add_test(tc, test_forced_wire_modes_must_be_the_providers);
    suite_add_tcase(s, tc);

    /* libfabric reads FI_PROVIDER, and ferry decides about libfabric's MR
     * cache, once per process: the checks below each need a fresh one,
     * which Check gives them by forking every test from a runner that
     * never calls ferry.  With CK_FORK=no they would see what the checks
     * before them set, so they are left out, not counted as passes. */
    if (!tu_check_forks()) {
        fprintf(stderr, "check_provider: CK_FORK=no: the checks of "
                        "FI_PROVIDER and of libfabric's MR cache variables "
                        "are left out (each needs a process of its own)\n");
        return s;
    }
    tc = tcase_create("fi_provider");
    tcase_add_test(tc, test_fi_provider_env_narrows);
    tcase_add_test(tc, test_filtered_out_is_not_no_device);
    suite_add_tcase(s, tc);

    tc = tcase_create("fi_mr_cache");
    tcase_add_test(tc, test_fi_mr_cache_turned_off);
    tcase_add_test(tc, test_fi_mr_cache_keep_zero_is_the_default);
    tcase_add_test(tc, test_fi_mr_cache_kept);
    tcase_add_test(tc, test_fi_mr_cache_user_value_kept);
    tcase_add_test(tc, test_fi_mr_cache_user_value_and_keep);
    tcase_add_test(tc, test_fi_mr_cache_decided_once);
    tcase_add_loop_test(tc, test_fi_mr_cache_bad_keep_refused, 0,
                        (int)TU_ARRAY_LEN(bad_keep));
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(provider_suite());
}
