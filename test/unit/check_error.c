/*
 * error and log modules: codes, strings, the per-thread sentence, the
 * libfabric error mapping and FERRY_LOG.
 */
#include "testutil.h"

#include "ferry-internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    int code;
    const char *name;
} codes[] = {
#define CODE(name, value, text) {FERRY_##name, #name},
    FERRY_ERRNO_MAP(CODE)
#undef CODE
};

START_TEST(test_every_code_has_distinct_text)
{
    for (size_t i = 0; i < FERRY__ARRAY_LEN(codes); i++) {
        const char *s = ferry_strerror(codes[i].code);
        ck_assert_msg(codes[i].code < 0, "%s is not negative", codes[i].name);
        ck_assert_msg(s != NULL && s[0] != '\0', "%s has no text",
                      codes[i].name);
        ck_assert_str_ne(s, "unknown ferry error");
        for (size_t j = 0; j < i; j++) {
            ck_assert_msg(codes[i].code != codes[j].code,
                          "%s and %s share a value", codes[i].name,
                          codes[j].name);
            ck_assert_str_ne(s, ferry_strerror(codes[j].code));
        }
    }
    ck_assert_str_eq(ferry_strerror(0), "success");
    ck_assert_str_eq(ferry_strerror(-99999), "unknown ferry error");
    ck_assert_str_eq(ferry_strerror(12345), "unknown ferry error");
}
END_TEST

START_TEST(test_codes_match_errno)
{
    ck_assert_int_eq(FERRY_EINVAL, -EINVAL);
    ck_assert_int_eq(FERRY_ETIMEDOUT, -ETIMEDOUT);
    ck_assert_int_eq(FERRY_EBUSY, -EBUSY);
    ck_assert_int_le(FERRY_ENOPROVIDER, -FERRY__OWN_ERRNO_BASE);
    ck_assert_int_le(FERRY_EHANDLE, -FERRY__OWN_ERRNO_BASE);
}
END_TEST

START_TEST(test_error_records_sentence)
{
    int ret = ferry__error(FERRY_ERANGE, "iov[%d]: offset %d", 3, 4096);

    ck_assert_int_eq(ret, FERRY_ERANGE);
    ck_assert_str_eq(ferry_last_error(), "iov[3]: offset 4096");
    ferry__error_clear();
    ck_assert_str_eq(ferry_last_error(), "");
}
END_TEST

START_TEST(test_long_sentence_is_truncated_safely)
{
    char big[2000];

    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    ferry__error(FERRY_EINVAL, "%s", big);
    ck_assert_uint_gt(strlen(ferry_last_error()), 100);
    ck_assert_uint_lt(strlen(ferry_last_error()), sizeof(big) - 1);
}
END_TEST

static void *other_thread(void *arg)
{
    (void)arg;
    /* A fresh thread has no sentence, whatever the main thread got. */
    return (void *)(uintptr_t)(ferry_last_error()[0] == '\0');
}

START_TEST(test_last_error_is_per_thread)
{
    pthread_t t;
    void *empty;

    ferry__error(FERRY_EINVAL, "main thread's error");
    ck_assert_int_eq(pthread_create(&t, NULL, other_thread, NULL), 0);
    ck_assert_int_eq(pthread_join(t, &empty), 0);
    ck_assert_msg(empty != NULL, "another thread saw this thread's error");
    ck_assert_str_eq(ferry_last_error(), "main thread's error");
}
END_TEST

START_TEST(test_fi_errors_map)
{
    ck_assert_int_eq(ferry__error_from_fi(-FI_EINVAL), FERRY_EINVAL);
    ck_assert_int_eq(ferry__error_from_fi(-FI_ECONNRESET), FERRY_ECONNRESET);
    ck_assert_int_eq(ferry__error_from_fi(-FI_ENOTCONN), FERRY_ECONNRESET);
    ck_assert_int_eq(ferry__error_from_fi(-FI_EHOSTUNREACH),
                     FERRY_EHOSTUNREACH);
    ck_assert_int_eq(ferry__error_from_fi(-FI_ECANCELED), FERRY_ECANCELED);
    ck_assert_int_eq(ferry__error_from_fi(-FI_EIO), FERRY_EIO);
    ck_assert_int_eq(ferry__error_from_fi(-FI_ENOSYS), FERRY_ENOTSUP);
    ck_assert_int_eq(ferry__error_from_fi(-FI_EOTHER), FERRY_EPROVIDER);
}
END_TEST

START_TEST(test_log_level_from_env)
{
    /* Each Check test runs in a fresh process: the level is read once. */
    setenv("FERRY_LOG", "debug", 1);
    ck_assert_int_eq(ferry__log_level(), FERRY__LOG_DEBUG);
}
END_TEST

START_TEST(test_log_level_bad_value_keeps_warn)
{
    setenv("FERRY_LOG", "loud", 1);
    ck_assert_int_eq(ferry__log_level(), FERRY__LOG_WARN);
}
END_TEST

START_TEST(test_version)
{
    ck_assert_ptr_nonnull(strstr(ferry_version_string(), PACKAGE_VERSION));
    ck_assert_ptr_nonnull(strstr(ferry_version_string(), "libfabric"));
    ck_assert_uint_eq(ferry_get_api_version(), FERRY_API_VERSION);
}
END_TEST

static Suite *error_suite(void)
{
    Suite *s = suite_create("error");
    TCase *tc = tcase_create("codes");

    tcase_add_test(tc, test_every_code_has_distinct_text);
    tcase_add_test(tc, test_codes_match_errno);
    tcase_add_test(tc, test_error_records_sentence);
    tcase_add_test(tc, test_long_sentence_is_truncated_safely);
    tcase_add_test(tc, test_last_error_is_per_thread);
    tcase_add_test(tc, test_fi_errors_map);
    tcase_add_test(tc, test_version);
    suite_add_tcase(s, tc);
    tc = tcase_create("log");
    tcase_add_test(tc, test_log_level_from_env);
    tcase_add_test(tc, test_log_level_bad_value_keeps_warn);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(error_suite());
}
