/*
 * The public ferry_device_* helpers' choice of backend: FERRY_SIM_DEVICES
 * selects the simulated device, which is never on by default and is not
 * in libferry: the module libferry-sim.so, FERRY_SIM_LIBRARY or beside
 * libferry.  (The simulated backend itself: test/unit/check_hmem.c.)
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

START_TEST(test_env_selects_sim)
{
    int count = 0;
    void *dev = NULL;

    setenv("FERRY_SIM_DEVICES", "3", 1);
    ck_assert_ptr_nonnull(ferry_device_backend());
    ck_assert_str_eq(ferry_device_backend(), "simulated");
    ck_assert_msg(strstr(ferry_device_status(), "3 devices") != NULL,
                  "status: %s", ferry_device_status());
    ck_assert_int_eq(ferry_device_count(&count), 0);
    ck_assert_int_eq(count, 3);
    ck_assert_int_eq(ferry_device_alloc(2, 100, &dev), 0);
    ck_assert_int_eq(ferry_device_free(dev), 0);
    unsetenv("FERRY_SIM_DEVICES");
}
END_TEST

/* A module that does not load says which and why, and nothing runs. */
START_TEST(test_sim_module_missing)
{
    void *dev = NULL;

    setenv("FERRY_SIM_DEVICES", "1", 1);
    setenv("FERRY_SIM_LIBRARY", "/nonexistent/libferry-sim.so", 1);
    ck_assert_ptr_null(ferry_device_backend());
    ck_assert_msg(strstr(ferry_device_status(),
                         "FERRY_SIM_LIBRARY=/nonexistent/libferry-sim.so "
                         "does not load") != NULL,
                  "status: %s", ferry_device_status());
    TU_EXPECT_ERROR(ferry_device_alloc(0, 100, &dev), FERRY_ENOTSUP,
                    "no device memory backend");
    ck_assert_ptr_null(dev);
}
END_TEST

/* A library that is not the module is refused by name. */
START_TEST(test_sim_module_wrong_library)
{
    setenv("FERRY_SIM_DEVICES", "1", 1);
    setenv("FERRY_SIM_LIBRARY", "libm.so.6", 1);
    ck_assert_ptr_null(ferry_device_backend());
    ck_assert_msg(strstr(ferry_device_status(), "has no ferry_sim_load") !=
                      NULL,
                  "status: %s", ferry_device_status());
}
END_TEST

/* Without FERRY_SIM_LIBRARY, the module beside libferry.so (a build
 * tree's lib/.libs) is found. */
START_TEST(test_sim_module_beside_libferry)
{
    setenv("FERRY_SIM_DEVICES", "1", 1);
    unsetenv("FERRY_SIM_LIBRARY");
    ck_assert_msg(ferry_device_backend() != NULL &&
                      strcmp(ferry_device_backend(), "simulated") == 0,
                  "status: %s", ferry_device_status());
}
END_TEST

START_TEST(test_sim_off_by_default)
{
    const char *backend;

    unsetenv("FERRY_SIM_DEVICES");
    backend = ferry_device_backend();
    ck_assert_msg(backend == NULL || strcmp(backend, "simulated") != 0,
                  "the simulated device runs without being asked for");
    ck_assert_msg(strstr(ferry_device_status(), "simulated") == NULL,
                  "status: %s", ferry_device_status());
}
END_TEST

static Suite *hmem_suite(void)
{
    Suite *s = suite_create("hmem");
    TCase *tc = tu_tcase(s, "public", 30);

    tcase_add_test(tc, test_env_selects_sim);
    tcase_add_test(tc, test_sim_off_by_default);
    tcase_add_test(tc, test_sim_module_missing);
    tcase_add_test(tc, test_sim_module_wrong_library);
    tcase_add_test(tc, test_sim_module_beside_libferry);
    return s;
}

int main(void)
{
    /* The backend is chosen once per process: each check needs a fresh
     * one, which Check gives it by forking unless CK_FORK=no. */
    if (!tu_check_forks()) {
        fprintf(stderr, "check_hmem: SKIP: CK_FORK=no, and each check of "
                        "the backend choice needs a process of its own\n");
        return 77;
    }
    /* The tests choose; the caller's must not leak in. */
    unsetenv("FERRY_SIM_DEVICES");
    return tu_run(hmem_suite());
}
