/*
 * context module through the API: configuration defaults and
 * environment, every refusal of a bad config (with a sentence that says
 * what to change), the versioned info struct, the address blob's size
 * protocol and handle checks, and a child forked right after the first
 * registration.  (What the context keeps inside, the
 * address blob's bytes and multi-rail selection: test/unit/check_context.c.)
 */
#include "testutil.h"

#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define TCP tu_tcp()

/* ---- config ------------------------------------------------------------- */

START_TEST(test_config_defaults)
{
    struct ferry_config cfg;

    tu_clear_ferry_env();
    /* Garbage first: init must set every field, not only some. */
    memset(&cfg, 0xa5, sizeof(cfg));
    ck_assert_int_eq(ferry_config_init(&cfg), 0);
    ck_assert_str_eq(ferry_last_error(), "");
    ck_assert_uint_eq(cfg.size, sizeof(struct ferry_config));
    ck_assert_ptr_null(cfg.provider);
    ck_assert_ptr_null(cfg.domain);
    ck_assert_uint_eq(cfg.max_rails, 1);
    ck_assert_uint_eq(cfg.endpoints_per_domain, 0);
    ck_assert_int_eq(cfg.local_only, 0);
    ck_assert_uint_eq(cfg.mr_mode_offer, FERRY_MR_ALL);
    ck_assert_uint_eq(cfg.mr_mode_force, 0);
    ck_assert_uint_eq(cfg.mr_key_size, 0);
    ck_assert_uint_eq(cfg.max_msg_size, 0);
    ck_assert_uint_eq(cfg.tx_depth, 0);
    ck_assert_int_eq(cfg.timeout_ms, 60000);
    ck_assert_int_eq(cfg.progress_thread, 0);
    ck_assert_int_eq(cfg.registration_cache, 1);
    ck_assert_uint_eq(cfg.rcache_max_entries, 16384);
    ck_assert_uint_eq(cfg.rcache_max_bytes, (size_t)64 << 30);
}
END_TEST

START_TEST(test_config_env_applied)
{
    struct ferry_config cfg;

    tu_clear_ferry_env();
    setenv("FERRY_PROVIDER", "shm", 1);
    setenv("FERRY_DOMAIN", "lo", 1);
    setenv("FERRY_MAX_RAILS", "3", 1);
    setenv("FERRY_ENDPOINTS_PER_DOMAIN", "1", 1);
    setenv("FERRY_TIMEOUT_MS", "1234", 1);
    ck_assert_int_eq(ferry_config_init(&cfg), 0);
    ck_assert_str_eq(cfg.provider, "shm");
    ck_assert_str_eq(cfg.domain, "lo");
    ck_assert_uint_eq(cfg.max_rails, 3);
    ck_assert_uint_eq(cfg.endpoints_per_domain, 1);
    ck_assert_int_eq(cfg.timeout_ms, 1234);
    /* The others keep their defaults. */
    ck_assert_uint_eq(cfg.mr_mode_offer, FERRY_MR_ALL);

    /* 0 is a valid timeout (no deadline); the largest rail count too. */
    setenv("FERRY_TIMEOUT_MS", "0", 1);
    setenv("FERRY_MAX_RAILS", "8", 1);
    setenv("FERRY_ENDPOINTS_PER_DOMAIN", "8", 1);
    ck_assert_int_eq(ferry_config_init(&cfg), 0);
    ck_assert_int_eq(cfg.timeout_ms, 0);
    ck_assert_uint_eq(cfg.max_rails, 8);
    ck_assert_uint_eq(cfg.endpoints_per_domain, 8);
    /* 0: ferry's choice. */
    setenv("FERRY_ENDPOINTS_PER_DOMAIN", "0", 1);
    ck_assert_int_eq(ferry_config_init(&cfg), 0);
    ck_assert_uint_eq(cfg.endpoints_per_domain, 0);

    /* Set but empty is no choice, as unset is (it used to name the
     * provider ""). */
    setenv("FERRY_PROVIDER", "", 1);
    setenv("FERRY_DOMAIN", "", 1);
    setenv("FERRY_METADATA", "", 1);
    ck_assert_int_eq(ferry_config_init(&cfg), 0);
    ck_assert_ptr_null(cfg.provider);
    ck_assert_ptr_null(cfg.domain);
    ck_assert_ptr_null(cfg.metadata);
    tu_clear_ferry_env();
}
END_TEST

START_TEST(test_config_env_rcache_bounds)
{
    struct ferry_config cfg;

    tu_clear_ferry_env();
    setenv("FERRY_RCACHE_MAX_ENTRIES", "7", 1);
    ck_assert_int_eq(ferry_config_init(&cfg), 0);
    ck_assert_uint_eq(cfg.rcache_max_entries, 7);
    /* Each variable sets its own bound only. */
    ck_assert_uint_eq(cfg.rcache_max_bytes, (size_t)64 << 30);

    setenv("FERRY_RCACHE_MAX_BYTES", "1048576", 1);
    setenv("FERRY_RCACHE_MAX_ENTRIES", "1", 1);
    ck_assert_int_eq(ferry_config_init(&cfg), 0);
    ck_assert_uint_eq(cfg.rcache_max_entries, 1);
    ck_assert_uint_eq(cfg.rcache_max_bytes, 1048576);

    /* Beyond 32 bits, and the largest size_t. */
    unsetenv("FERRY_RCACHE_MAX_ENTRIES");
    setenv("FERRY_RCACHE_MAX_BYTES", "274877906944", 1);
    ck_assert_int_eq(ferry_config_init(&cfg), 0);
    ck_assert_uint_eq(cfg.rcache_max_entries, 16384);
    ck_assert_uint_eq(cfg.rcache_max_bytes, (size_t)256 << 30);
    setenv("FERRY_RCACHE_MAX_BYTES", "18446744073709551615", 1);
    ck_assert_int_eq(ferry_config_init(&cfg), 0);
    ck_assert_uint_eq(cfg.rcache_max_bytes, SIZE_MAX);
}
END_TEST

static const struct {
    const char *var;
    const char *value;
    const char *phrase; /* of the sentence, besides VAR=value */
} bad_env[] = {
    {"FERRY_MAX_RAILS", "abc", "between 1 and 8"},
    {"FERRY_MAX_RAILS", "99", "between 1 and 8"},
    {"FERRY_MAX_RAILS", "-1", "between 1 and 8"},
    {"FERRY_MAX_RAILS", "0", "between 1 and 8"},
    {"FERRY_MAX_RAILS", "2x", "between 1 and 8"},
    {"FERRY_MAX_RAILS", "", "between 1 and 8"},
    {"FERRY_ENDPOINTS_PER_DOMAIN", "9", "between 0 and 8"},
    {"FERRY_ENDPOINTS_PER_DOMAIN", "-1", "between 0 and 8"},
    {"FERRY_ENDPOINTS_PER_DOMAIN", "two", "between 0 and 8"},
    {"FERRY_TIMEOUT_MS", "-5", "between -1 and"},
    {"FERRY_TIMEOUT_MS", "soon", "between -1 and"},
    {"FERRY_TIMEOUT_MS", "99999999999", "between -1 and"},
    {"FERRY_RCACHE_MAX_ENTRIES", "0", "config.registration_cache = 0"},
    {"FERRY_RCACHE_MAX_ENTRIES", "-1", "whole number of entries between 1"},
    {"FERRY_RCACHE_MAX_ENTRIES", "many", "whole number of entries between 1"},
    {"FERRY_RCACHE_MAX_ENTRIES", "12k", "whole number of entries between 1"},
    {"FERRY_RCACHE_MAX_ENTRIES", "", "whole number of entries between 1"},
    {"FERRY_RCACHE_MAX_ENTRIES", "99999999999999999999",
     "whole number of entries between 1"},
    {"FERRY_RCACHE_MAX_BYTES", "0", "whole number of bytes between 1"},
    {"FERRY_RCACHE_MAX_BYTES", "-4096", "whole number of bytes between 1"},
    {"FERRY_RCACHE_MAX_BYTES", "64G", "no suffixes"},
    {"FERRY_RCACHE_MAX_BYTES", "1e9", "whole number of bytes between 1"},
    {"FERRY_RCACHE_MAX_BYTES", "18446744073709551616",
     "whole number of bytes between 1"},
};

START_TEST(test_config_env_malformed)
{
    struct ferry_config cfg;
    char named[64];

    tu_clear_ferry_env();
    setenv(bad_env[_i].var, bad_env[_i].value, 1);
    snprintf(named, sizeof(named), "%s=%s", bad_env[_i].var,
             bad_env[_i].value);
    TU_EXPECT_ERROR(ferry_config_init(&cfg), FERRY_EINVAL, named);
    ck_assert_msg(strstr(ferry_last_error(), bad_env[_i].phrase) != NULL,
                  "sentence \"%s\" lacks \"%s\"", ferry_last_error(),
                  bad_env[_i].phrase);
}
END_TEST

/* FERRY_CONFIG_FIELDS as a table: each field's kind and variable. */
enum field_kind { STR, BOOL, INT, UINT, SIZE };
#define FIELD_ROW(name, kind, def, var) {#name, kind, var},
static const struct {
    const char *name;
    enum field_kind kind;
    const char *var;
} listed[] = {FERRY_CONFIG_FIELDS(FIELD_ROW)};

/* Every variable the list names is read by ferry_config_init: a text
 * lands in its field, a word where a number belongs is refused, naming
 * the variable. */
START_TEST(test_config_env_listed_are_read)
{
    struct ferry_config cfg;
    unsigned checked = 0;

    for (size_t i = 0; i < TU_ARRAY_LEN(listed); i++) {
        if (listed[i].var[0] == '\0')
            continue;
        tu_clear_ferry_env();
        setenv(listed[i].var, "eleven", 1);
        if (listed[i].kind == STR) {
            ck_assert_int_eq(ferry_config_init(&cfg), 0);
            checked += strcmp(listed[i].name, "provider") == 0 &&
                       strcmp(cfg.provider, "eleven") == 0;
            checked += strcmp(listed[i].name, "domain") == 0 &&
                       strcmp(cfg.domain, "eleven") == 0;
            checked += strcmp(listed[i].name, "peer_host") == 0 &&
                       strcmp(cfg.peer_host, "eleven") == 0;
            checked += strcmp(listed[i].name, "metadata") == 0 &&
                       strcmp(cfg.metadata, "eleven") == 0;
            checked += strcmp(listed[i].name, "telemetry_dir") == 0 &&
                       strcmp(cfg.telemetry_dir, "eleven") == 0;
        } else {
            ck_assert_msg(ferry_config_init(&cfg) == FERRY_EINVAL &&
                              strstr(ferry_last_error(), listed[i].var),
                          "%s=eleven was not refused naming it (config.%s)",
                          listed[i].var, listed[i].name);
            checked++;
        }
        unsetenv(listed[i].var);
    }
    /* Every listed variable was seen to act: 5 texts, 12 numbers. */
    ck_assert_uint_eq(checked, 17);
}
END_TEST

START_TEST(test_config_init_null)
{
    TU_EXPECT_ERROR(ferry_config_init(NULL), FERRY_EINVAL, "cfg is NULL");
}
END_TEST

/*
 * A struct ferry_config from an older 1.x header is shorter: here, one
 * that ends before telemetry_dir.  ferry_config_init_sized writes its
 * bytes only, and a context made from it takes the defaults for the
 * rest.  (ferry_config_init passes the caller's sizeof in the header.)
 */
START_TEST(test_config_init_sized_older_struct)
{
    union {
        struct ferry_config cfg;
        unsigned char bytes[sizeof(struct ferry_config) + 64];
    } u;
    const size_t older = offsetof(struct ferry_config, telemetry_dir);
    struct ferry_config whole;
    ferry_context_t *ctx = NULL;

    ck_assert_int_eq(ferry_config_init(&whole), 0);
    ck_assert_uint_eq(whole.size, sizeof(whole));
    memset(u.bytes, 0xab, sizeof(u.bytes));
    ck_assert_int_eq(ferry_config_init_sized(&u.cfg, older), 0);
    ck_assert_uint_eq(u.cfg.size, older);
    ck_assert_uint_eq(u.cfg.max_rails, whole.max_rails);
    for (size_t i = older; i < sizeof(u.bytes); i++)
        ck_assert_msg(u.bytes[i] == 0xab,
                      "byte %zu of a %zu-byte config was written", i, older);
    u.cfg.provider = TCP;
    u.cfg.domain = "lo";
    ck_assert_int_eq(ferry_context_create(&u.cfg, &ctx), 0);
    ck_assert_int_eq(ferry_context_close(ctx), 0);
}
END_TEST

START_TEST(test_config_init_sized_bad_size)
{
    struct ferry_config cfg[2];

    TU_EXPECT_ERROR(ferry_config_init_sized(&cfg[0], 0), FERRY_EINVAL,
                    "ferry_config_init_sized: size is 0; give the "
                    "sizeof(struct ferry_config) of the header");
    TU_EXPECT_ERROR(ferry_config_init_sized(&cfg[0], sizeof(cfg[0]) + 1),
                    FERRY_EINVAL, "for this ferry");
}
END_TEST

/* ---- create ------------------------------------------------------------- */

/* A sentinel that a failed create must leave alone. */
#define UNTOUCHED ((ferry_context_t *)(uintptr_t)0x5a5a)

START_TEST(test_create_null_out)
{
    struct ferry_config cfg;

    tu_config(&cfg, TCP);
    TU_EXPECT_ERROR(ferry_context_create(&cfg, NULL), FERRY_EINVAL,
                    "out pointer is NULL");
}
END_TEST

START_TEST(test_create_bad_size)
{
    const size_t sizes[] = {0, sizeof(struct ferry_config) + 1,
                            sizeof(struct ferry_config) * 4};
    struct ferry_config cfg[4]; /* room for the oversized claims */
    ferry_context_t *ctx = UNTOUCHED;

    for (size_t i = 0; i < TU_ARRAY_LEN(sizes); i++) {
        tu_config(&cfg[0], TCP);
        cfg[0].size = sizes[i];
        TU_EXPECT_ERROR(ferry_context_create(&cfg[0], &ctx), FERRY_EINVAL,
                        "call ferry_config_init()");
        ck_assert_ptr_eq(ctx, UNTOUCHED);
    }
}
END_TEST

/* Rail counts out of range, each with the sentence that refuses it. */
static const struct {
    unsigned max_rails, endpoints;
    const char *phrase;
} bad_rails[] = {
    {0, 0, "config.max_rails is 0; use 1 to 8"},
    {TU_STATS_RAILS + 1, 0, "config.max_rails is 9; use 1 to 8"},
    {1000, 0, "config.max_rails is 1000; use 1 to 8"},
    {1, TU_STATS_RAILS + 1,
     "config.endpoints_per_domain is 9; use 0 (ferry's choice) or 1 to 8"},
    {1, 1000,
     "config.endpoints_per_domain is 1000; use 0 (ferry's choice) or 1 to 8"},
};

START_TEST(test_create_bad_rail_counts)
{
    struct ferry_config cfg;
    ferry_context_t *ctx = UNTOUCHED;

    tu_config(&cfg, TCP);
    cfg.max_rails = bad_rails[_i].max_rails;
    cfg.endpoints_per_domain = bad_rails[_i].endpoints;
    TU_EXPECT_ERROR(ferry_context_create(&cfg, &ctx), FERRY_EINVAL,
                    bad_rails[_i].phrase);
    ck_assert_ptr_eq(ctx, UNTOUCHED);
}
END_TEST

START_TEST(test_create_unknown_mr_bits)
{
    struct ferry_config cfg;
    ferry_context_t *ctx = UNTOUCHED;

    tu_config(&cfg, TCP);
    cfg.mr_mode_offer = FERRY_MR_ALL | 0x80u;
    TU_EXPECT_ERROR(ferry_context_create(&cfg, &ctx), FERRY_EINVAL,
                    "bits 0x80 that are not FERRY_MR_* flags");
    tu_config(&cfg, TCP);
    cfg.mr_mode_force = 0x100u;
    TU_EXPECT_ERROR(ferry_context_create(&cfg, &ctx), FERRY_EINVAL,
                    "bits 0x100 that are not FERRY_MR_* flags");
    ck_assert_ptr_eq(ctx, UNTOUCHED);
}
END_TEST

/* Deadlines: < 0 none, 0 the default (ferry(7), "Timeouts"). */
START_TEST(test_create_negative_timeout)
{
    struct ferry_config cfg;
    ferry_context_t *ctx = NULL;

    tu_config(&cfg, TCP);
    cfg.timeout_ms = -1;
    cfg.metadata_timeout_ms = -1;
    ck_assert_msg(ferry_context_create(&cfg, &ctx) == 0, "%s",
                  ferry_last_error());
    ferry_context_close(ctx);
    cfg.timeout_ms = 0;
    cfg.metadata_timeout_ms = 0;
    ck_assert_msg(ferry_context_create(&cfg, &ctx) == 0, "%s",
                  ferry_last_error());
    ferry_context_close(ctx);
}
END_TEST

START_TEST(test_create_key_size_too_big)
{
    struct ferry_config cfg;
    ferry_context_t *ctx = UNTOUCHED;

    tu_config(&cfg, TCP);
    cfg.mr_key_size = 65; /* a key has at most 64 bytes */
    TU_EXPECT_ERROR(ferry_context_create(&cfg, &ctx), FERRY_EINVAL,
                    "config.mr_key_size is 65; at most 64 bytes");
    ck_assert_ptr_eq(ctx, UNTOUCHED);
}
END_TEST

START_TEST(test_create_long_names)
{
    struct ferry_config cfg;
    ferry_context_t *ctx = UNTOUCHED;
    char name[201];

    memset(name, 'x', 200);
    name[200] = '\0';
    tu_config(&cfg, TCP);
    cfg.provider = name;
    TU_EXPECT_ERROR(ferry_context_create(&cfg, &ctx), FERRY_EINVAL,
                    "config.provider is 200 characters long; at most 63 fit");
    tu_config(&cfg, TCP);
    cfg.domain = name;
    TU_EXPECT_ERROR(ferry_context_create(&cfg, &ctx), FERRY_EINVAL,
                    "config.domain is 200 characters long");
    ck_assert_ptr_eq(ctx, UNTOUCHED);
}
END_TEST

START_TEST(test_create_env_provider)
{
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;
    ferry_context_t *ctx = NULL;

    /* A NULL config takes FERRY_PROVIDER and FERRY_DOMAIN from the
     * environment, through ferry_config_init. */
    tu_clear_ferry_env();
    setenv("FERRY_PROVIDER", TCP, 1);
    setenv("FERRY_DOMAIN", "lo", 1);
    ck_assert_msg(ferry_context_create(NULL, &ctx) == 0, "%s",
                  ferry_last_error());
    ck_assert_int_eq(ferry_context_info(ctx, &info), 0);
    ck_assert_str_eq(info.provider, TCP);
    ck_assert_str_eq(info.domain, "lo");
    ferry_context_close(ctx);
}
END_TEST

START_TEST(test_destroy_null_and_foreign)
{
    ferry_context_t *ctx = tu_context(TCP);
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;
    ferry_mem_t *mem = NULL;
    void *buf = tu_alloc_buf(4096);

    ferry_context_close(NULL);
    ck_assert_int_eq(ferry_mem_register(ctx, buf, 4096, FERRY_MEM_HOST, 0, 0,
                                        &mem),
                     0);
    /* Another kind of handle is not a context: nothing is closed.  Both
     * handles still pass their calls' handle checks. */
    ferry_context_close((ferry_context_t *)mem);
    ck_assert_ptr_nonnull(ferry_mem_path(mem));
    ck_assert_int_eq(ferry_context_info(ctx, &info), 0);
    ck_assert_int_eq(ferry_mem_close(mem), 0);
    ferry_context_close(ctx);
    tu_free_buf(buf, 4096);
}
END_TEST

/* ---- info --------------------------------------------------------------- */

START_TEST(test_info_bad_args)
{
    ferry_context_t *ctx = tu_context(TCP);
    struct ferry_context_info info;

    TU_EXPECT_ERROR(ferry_context_info(ctx, NULL), FERRY_EINVAL,
                    "FERRY_CONTEXT_INFO_INIT");
    memset(&info, 0xa5, sizeof(info));
    info.size = 0;
    TU_EXPECT_ERROR(ferry_context_info(ctx, &info), FERRY_EINVAL,
                    "info->size is 0");
    /* Nothing written on refusal. */
    ck_assert_uint_eq(info.nrails, 0xa5a5a5a5u);
    info.size = sizeof(info);
    TU_EXPECT_ERROR(ferry_context_info(NULL, &info), FERRY_EINVAL,
                    "context is NULL");
    ferry_context_close(ctx);
}
END_TEST

START_TEST(test_info_truncated_struct)
{
    ferry_context_t *ctx = tu_context(TCP);
    const size_t cut = offsetof(struct ferry_context_info, domain);
    unsigned char buf[sizeof(struct ferry_context_info) + 64];
    struct ferry_context_info *info = (struct ferry_context_info *)buf;

    /* An older caller whose struct ends before `domain`. */
    memset(buf, 0xa5, sizeof(buf));
    info->size = cut;
    ck_assert_int_eq(ferry_context_info(ctx, info), 0);
    ck_assert_uint_eq(info->size, cut);
    ck_assert_str_eq(info->provider, TCP);
    ck_assert_ptr_nonnull(info->fabric);
    for (size_t i = cut; i < sizeof(buf); i++)
        ck_assert_msg(buf[i] == 0xa5, "byte %zu past the %zu-byte struct "
                      "was written", i, cut);

    /* A newer caller's bigger struct: only what this ferry knows. */
    memset(buf, 0xa5, sizeof(buf));
    info->size = sizeof(buf);
    ck_assert_int_eq(ferry_context_info(ctx, info), 0);
    ck_assert_uint_eq(info->size, sizeof(struct ferry_context_info));
    ck_assert_str_eq(info->domain, "lo");
    for (size_t i = sizeof(struct ferry_context_info); i < sizeof(buf); i++)
        ck_assert_msg(buf[i] == 0xa5, "byte %zu past the struct was written",
                      i);
    ferry_context_close(ctx);
}
END_TEST

START_TEST(test_info_limits_above_provider_ignored)
{
    struct ferry_config cfg;
    struct ferry_context_info base = FERRY_CONTEXT_INFO_INIT;
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;
    ferry_context_t *ctx = tu_context(TCP);

    ck_assert_int_eq(ferry_context_info(ctx, &base), 0);
    ferry_context_close(ctx);
    /* A cap larger than the provider's own limit does not raise it. */
    tu_config(&cfg, TCP);
    cfg.tx_depth = base.tx_depth + 1000;
    cfg.mr_key_size = 64;
    ck_assert_int_eq(ferry_context_create(&cfg, &ctx), 0);
    ck_assert_int_eq(ferry_context_info(ctx, &info), 0);
    ck_assert_uint_eq(info.tx_depth, base.tx_depth);
    ck_assert_uint_eq(info.mr_key_size, 8);
    ferry_context_close(ctx);
}
END_TEST

/* ---- address ------------------------------------------------------------ */

START_TEST(test_address_null_args)
{
    ferry_context_t *ctx = tu_context(TCP);
    uint8_t buf[512];
    size_t len = sizeof(buf);

    TU_EXPECT_ERROR(ferry_context_address(ctx, buf, NULL), FERRY_EINVAL,
                    "len is NULL");
    TU_EXPECT_ERROR(ferry_context_address(NULL, buf, &len), FERRY_EINVAL,
                    "context is NULL");
    ck_assert_uint_eq(len, sizeof(buf));
    ferry_context_close(ctx);
}
END_TEST

START_TEST(test_wrong_handle_type)
{
    ferry_context_t *ctx = tu_context(TCP);
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;
    ferry_mem_t *mem = NULL;
    void *buf = tu_alloc_buf(4096);
    uint8_t addr[512];
    size_t len = sizeof(addr);

    ck_assert_int_eq(ferry_mem_register(ctx, buf, 4096, FERRY_MEM_HOST, 0, 0,
                                        &mem),
                     0);
    TU_EXPECT_ERROR(ferry_context_address((ferry_context_t *)mem, addr, &len),
                    FERRY_EHANDLE, "ferry_context_address: not a live ferry "
                                   "context");
    ck_assert_uint_eq(len, sizeof(addr));
    TU_EXPECT_ERROR(ferry_context_info((ferry_context_t *)mem, &info),
                    FERRY_EHANDLE, "not a live ferry context");
    ck_assert_int_eq(ferry_mem_close(mem), 0);
    ferry_context_close(ctx);
    tu_free_buf(buf, 4096);
}
END_TEST

/*
 * A process that forks right after its first registration (which starts
 * ferry's userfaultfd monitor) has a child that can use ferry: the child
 * creates a context and exits.  Under Debian 12's AddressSanitizer,
 * which does not take its allocator's locks around fork, such a child
 * hung at its first allocation about one time in twenty while the
 * monitor thread was still being set up (3 of 60 here, and check_death's
 * restart loop in CI).  Each round runs in a process of its own, so that
 * each has its first registration; a child not done within 10 s hung.
 */
#define FORK_ROUNDS 40

static int fork_after_first_registration(void)
{
    struct ferry_config cfg;
    ferry_context_t *ctx;
    ferry_mem_t *mem;
    void *buf = tu_alloc_buf(64 * KiB);
    pid_t child;
    int status;

    tu_config(&cfg, TCP);
    /* No progress thread: the monitor is the only thread started. */
    cfg.progress_thread = 0;
    if (ferry_context_create(&cfg, &ctx) != 0 ||
        ferry_mem_register(ctx, buf, 64 * KiB, FERRY_MEM_HOST, 0,
                           FERRY_ACCESS_REMOTE_WRITE, &mem) != 0)
        return 2;
    if ((child = fork()) == 0) {
        ferry_context_t *own;

        _exit(ferry_context_create(&cfg, &own) == 0 &&
                      ferry_context_close(own) == 0
                  ? 0
                  : 3);
    }
    for (int ms = 0; ms < 10000; ms++) {
        if (waitpid(child, &status, WNOHANG) == child)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 4;
        usleep(1000);
    }
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    return 1;
}

START_TEST(test_fork_after_first_registration)
{
    unsigned hung = 0, failed = 0;

    for (unsigned round = 0; round < FORK_ROUNDS; round++) {
        pid_t round_pid = fork();
        int status;

        ck_assert_int_ge(round_pid, 0);
        if (round_pid == 0)
            _exit(fork_after_first_registration());
        ck_assert_int_eq(waitpid(round_pid, &status, 0), round_pid);
        ck_assert(WIFEXITED(status));
        hung += WEXITSTATUS(status) == 1;
        failed += WEXITSTATUS(status) > 1;
    }
    ck_assert_msg(hung == 0 && failed == 0,
                  "of %d children forked right after their parent's first "
                  "registration, %u hung and %u could not create a context",
                  FORK_ROUNDS, hung, failed);
}
END_TEST

static Suite *context_suite(void)
{
    Suite *s = suite_create("context");
    TCase *tc = tcase_create("config");

    /* Every test starts from an environment without FERRY_* variables,
     * also when CK_FORK=no runs them all in one process. */
    tcase_add_checked_fixture(tc, tu_clear_ferry_env, tu_clear_ferry_env);

    tcase_add_test(tc, test_config_defaults);
    tcase_add_test(tc, test_config_env_applied);
    tcase_add_test(tc, test_config_env_rcache_bounds);
    tcase_add_loop_test(tc, test_config_env_malformed, 0,
                        (int)TU_ARRAY_LEN(bad_env));
    tcase_add_test(tc, test_config_env_listed_are_read);
    tcase_add_test(tc, test_config_init_null);
    tcase_add_test(tc, test_config_init_sized_older_struct);
    tcase_add_test(tc, test_config_init_sized_bad_size);
    suite_add_tcase(s, tc);

    tc = tcase_create("create");
    tcase_add_checked_fixture(tc, tu_clear_ferry_env, tu_clear_ferry_env);
    tcase_add_test(tc, test_create_null_out);
    tcase_add_test(tc, test_create_bad_size);
    tcase_add_loop_test(tc, test_create_bad_rail_counts, 0,
                        (int)TU_ARRAY_LEN(bad_rails));
    tcase_add_test(tc, test_create_unknown_mr_bits);
    tcase_add_test(tc, test_create_negative_timeout);
    tcase_add_test(tc, test_create_key_size_too_big);
    tcase_add_test(tc, test_create_long_names);
    tcase_add_test(tc, test_create_env_provider);
    tcase_add_test(tc, test_destroy_null_and_foreign);
    suite_add_tcase(s, tc);

    tc = tcase_create("info");
    tcase_add_checked_fixture(tc, tu_clear_ferry_env, tu_clear_ferry_env);
    tcase_add_test(tc, test_info_bad_args);
    tcase_add_test(tc, test_info_truncated_struct);
    tcase_add_test(tc, test_info_limits_above_provider_ignored);
    suite_add_tcase(s, tc);

    tc = tcase_create("address");
    tcase_add_checked_fixture(tc, tu_clear_ferry_env, tu_clear_ferry_env);
    tcase_add_test(tc, test_address_null_args);
    tcase_add_test(tc, test_wrong_handle_type);
    suite_add_tcase(s, tc);

    tc = tu_tcase(s, "fork", 120);
    tcase_add_test(tc, test_fork_after_first_registration);
    return s;
}

int main(void)
{
    return tu_run(context_suite());
}
