/*
 * error and log modules from inside: ferry's own codes outside errno's
 * range, the per-thread sentence, the libfabric error mapping and
 * FERRY_LOG.  (Each code's text and the versions: test/api/check_error.c.)
 */
#include "testutil.h"

#include "base/ferry-internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    static char big[6000];
    char want[64];
    const char *e;
    size_t kept;

    /* A sentence far too long: cut between words, the count at the end. */
    for (size_t i = 0; i + 1 < sizeof(big); i++)
        big[i] = i % 10 == 9 ? ' ' : 'x';
    ferry__error(FERRY_EINVAL, "%s", big);
    e = ferry_last_error();
    ck_assert_uint_gt(strlen(e), 3000);
    ck_assert_uint_lt(strlen(e), 4096);
    ck_assert_msg(strstr(e, "xxxxxxxxx [... ") != NULL,
                  "not cut after a whole word: ...%s", e + strlen(e) - 60);
    /* 5999 characters, kept up to a space: the rest is counted. */
    kept = (size_t)(strstr(e, " [... ") - e);
    snprintf(want, sizeof(want), " [... %zu more characters left out]",
             sizeof(big) - 1 - kept);
    ck_assert_str_eq(e + kept, want);
}
END_TEST

START_TEST(test_refusal_sized_sentence_is_whole)
{
    static char big[3000];

    /* A long refusal list (every provider libfabric has) fits whole. */
    memset(big, 'y', sizeof(big) - 1);
    ferry__error(FERRY_ENOPROVIDER, "no provider: %s.", big);
    ck_assert_uint_eq(strlen(ferry_last_error()), strlen(big) + 14);
    ck_assert_int_eq(ferry_last_error()[strlen(ferry_last_error()) - 1], '.');
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

/* What peers, etcd and the bootstrap sent, quoted in a sentence: no
 * control byte reaches the reader's terminal. */
START_TEST(test_sentence_quotes_printably)
{
    ferry__error(FERRY_EBLOB, "peer '%s' offers '%s'", "evil\033[2J\a",
                 "tcp\tline\nferry[1] warn: forged\x7f");
    ck_assert_str_eq(ferry_last_error(),
                     "peer 'evil?[2J?' offers 'tcp line ferry[1] warn: "
                     "forged?'");
}
END_TEST

/* A log line quoting a peer's bytes stays one line, without escapes. */
START_TEST(test_log_line_quotes_printably)
{
    char path[] = "/tmp/ferry-log.XXXXXX", text[512];
    int fd = mkstemp(path), saved = dup(STDERR_FILENO);
    ssize_t n;

    ck_assert_int_ge(fd, 0);
    ck_assert_int_ge(saved, 0);
    fflush(stderr);
    ck_assert_int_ge(dup2(fd, STDERR_FILENO), 0);
    ferry__log(FERRY__LOG_WARN, "peer %s is dead",
               "\033]0;owned\a\nferry[1] warn: forged");
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    n = pread(fd, text, sizeof(text) - 1, 0);
    close(fd);
    unlink(path);
    ck_assert_int_gt(n, 0);
    text[n] = '\0';
    ck_assert_msg(strstr(text, " warn: peer ?]0;owned? ferry[1] warn: forged "
                               "is dead\n") != NULL &&
                      strchr(text, '\n') == text + n - 1,
                  "the log line: %s", text);
}
END_TEST

static Suite *error_suite(void)
{
    Suite *s = suite_create("error");
    TCase *tc = tcase_create("codes");

    tcase_add_test(tc, test_codes_match_errno);
    tcase_add_test(tc, test_error_records_sentence);
    tcase_add_test(tc, test_long_sentence_is_truncated_safely);
    tcase_add_test(tc, test_refusal_sized_sentence_is_whole);
    tcase_add_test(tc, test_last_error_is_per_thread);
    tcase_add_test(tc, test_fi_errors_map);
    tcase_add_test(tc, test_sentence_quotes_printably);
    tcase_add_test(tc, test_log_line_quotes_printably);
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
