/*
 * error codes through the API: every code has its own text, and the
 * version strings and numbers.  (The per-thread sentence, the libfabric
 * error mapping and FERRY_LOG: test/unit/check_error.c.)
 */
#include "config.h"

#include "testutil.h"

#include <string.h>

static const struct {
    int code;
    const char *name;
} codes[] = {
#define CODE(name, value, kind, text) {FERRY_##name, #name},
    FERRY_ERRNO_MAP(CODE)
#undef CODE
};

START_TEST(test_every_code_has_distinct_text)
{
    for (size_t i = 0; i < TU_ARRAY_LEN(codes); i++) {
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
    tcase_add_test(tc, test_version);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(error_suite());
}
