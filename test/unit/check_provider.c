/*
 * provider and env modules from inside: mr_mode bit translation, the
 * candidates' rank order, and libfabric's MR cache turned off before the
 * first libfabric call, and which of shm's writes keep to its first
 * endpoint.  (The choice and its refusals through the API:
 * test/api/check_provider.c.)
 */
#include "testutil.h"

#include "base/text.h"
#include "fabric/about.h"
#include "fabric/fabric.h"
#include "fabric/provider.h"
#include "fabric/refusal.h"
#include "fabric/route.h"
#include "fabric/shm_space.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

    unsetenv("FI_MR_CACHE_MONITOR");
    unsetenv("FI_EFA_MR_CACHE_ENABLE");
    unsetenv("FERRY_KEEP_FI_MR_CACHE");
    tu_config(&cfg, "tcp;ofi_rxm");
    ck_assert_int_eq(ferry_context_create(&cfg, &ctx), 0);
    ck_assert_str_eq(getenv("FI_MR_CACHE_MONITOR"), "disabled");
    ck_assert_str_eq(getenv("FI_EFA_MR_CACHE_ENABLE"), "0");
    ck_assert(!ferry__env_user_set_mr_cache());
    ferry_context_close(ctx);
}
END_TEST

START_TEST(test_env_user_value_kept)
{
    struct ferry_config cfg;
    ferry_context_t *ctx;

    setenv("FI_MR_CACHE_MONITOR", "uffd", 1);
    unsetenv("FERRY_KEEP_FI_MR_CACHE");
    tu_config(&cfg, "tcp;ofi_rxm");
    ck_assert_int_eq(ferry_context_create(&cfg, &ctx), 0);
    ck_assert_str_eq(getenv("FI_MR_CACHE_MONITOR"), "uffd");
    ck_assert(ferry__env_user_set_mr_cache());
    ferry_context_close(ctx);
}
END_TEST

/* ---- names: FI_PROVIDER's filter, suggestions, descriptions ---------- */

START_TEST(test_fi_provider_filter)
{
    /* Unset or empty: nothing is excluded. */
    ck_assert(!ferry__fi_provider_excludes(NULL, "tcp"));
    ck_assert(!ferry__fi_provider_excludes("", "tcp"));
    /* A list keeps what it names, and stacks on what it names. */
    ck_assert(ferry__fi_provider_excludes("verbs", "tcp"));
    ck_assert(ferry__fi_provider_excludes("verbs", "tcp;ofi_rxm"));
    ck_assert(!ferry__fi_provider_excludes("verbs,tcp", "tcp"));
    ck_assert(!ferry__fi_provider_excludes("verbs,tcp", "tcp;ofi_rxm"));
    ck_assert(!ferry__fi_provider_excludes("tcp;ofi_rxm", "tcp;ofi_rxm"));
    /* Whole names only: "tc" is not "tcp". */
    ck_assert(ferry__fi_provider_excludes("tc", "tcp"));
    /* '^' negates the whole list. */
    ck_assert(ferry__fi_provider_excludes("^tcp,shm", "tcp;ofi_rxm"));
    ck_assert(ferry__fi_provider_excludes("^tcp,shm", "shm"));
    ck_assert(!ferry__fi_provider_excludes("^tcp,shm", "verbs;ofi_rxm"));
}
END_TEST

START_TEST(test_nearest_name)
{
    static const char *const names[] = {"tcp", "net", "udp", "shm",
                                        "sockets", "ofi_rxm", NULL};
    static const char *const none[] = {NULL};

    ck_assert_str_eq(ferry__nearest_name("tcpp", names), "tcp");
    ck_assert_str_eq(ferry__nearest_name("socket", names), "sockets");
    ck_assert_str_eq(ferry__nearest_name("smh", names), "shm");
    ck_assert_str_eq(ferry__nearest_name("ofi_rmx", names), "ofi_rxm");
    /* Nothing near: no suggestion rather than a wild one. */
    ck_assert_ptr_null(ferry__nearest_name("verbs", names));
    ck_assert_ptr_null(ferry__nearest_name("tcp", none));
}
END_TEST

START_TEST(test_provider_about)
{
    char buf[256];

    /* 1.17: "tcp;ofi_rxm" is rxm over tcp, the native one is "net". */
    ferry__provider_about("tcp;ofi_rxm", FI_VERSION(1, 17), buf, sizeof(buf));
    ck_assert_ptr_nonnull(strstr(buf, "rxm"));
    ck_assert_ptr_nonnull(strstr(buf, "tcp's connected endpoints"));
    ck_assert_ptr_nonnull(strstr(buf, "is called net"));
    ferry__provider_about("net", FI_VERSION(1, 17), buf, sizeof(buf));
    ck_assert_ptr_nonnull(strstr(buf, "called tcp from 1.18"));
    /* 1.18 on: "tcp" alone is the reliable-datagram provider. */
    ferry__provider_about("tcp", FI_VERSION(1, 18), buf, sizeof(buf));
    ck_assert_ptr_nonnull(strstr(buf, "reliable-datagram tcp provider"));
    ferry__provider_about("tcp;ofi_rxm", FI_VERSION(2, 6), buf, sizeof(buf));
    ck_assert_ptr_null(strstr(buf, "net"));
    ferry__provider_about("udp;ofi_rxd", FI_VERSION(2, 6), buf, sizeof(buf));
    ck_assert_ptr_nonnull(strstr(buf, "rxd"));
    ck_assert_ptr_nonnull(strstr(buf, "UDP"));
    /* An unknown name is named, not guessed at. */
    ferry__provider_about("zzz", FI_VERSION(2, 6), buf, sizeof(buf));
    ck_assert_str_eq(buf, "the zzz provider");
}
END_TEST

/* ---- /dev/shm's room, sizes in words ------------------------------------ */

START_TEST(test_shm_space)
{
    struct ferry__shm_state s = {.free_bytes = 8ull << 30,
                                 .total_bytes = 12ull << 30};
    char why[512];

    ck_assert(ferry__shm_space_ok(&s, why, sizeof(why)));
    ck_assert_str_eq(why, "/dev/shm has 8 GiB free of 12 GiB");
    /* Nearly full: refused with the numbers and what to do. */
    s.free_bytes = 5ull << 20;
    s.total_bytes = 64ull << 20;
    ck_assert(!ferry__shm_space_ok(&s, why, sizeof(why)));
    ck_assert_ptr_nonnull(strstr(why, "/dev/shm has only 5 MiB free of 64 MiB"));
    ck_assert_ptr_nonnull(strstr(why, "SIGBUS"));
    ck_assert_ptr_nonnull(strstr(why, "free at least 64 MiB"));
    s.free_bytes = 0;
    ck_assert(!ferry__shm_space_ok(&s, why, sizeof(why)));
    /* At the bound exactly: enough. */
    s.free_bytes = FERRY__SHM_NEED;
    s.total_bytes = 1ull << 30;
    ck_assert(ferry__shm_space_ok(&s, why, sizeof(why)));
    /* Unreadable: left to libfabric, but said. */
    s.free_bytes = UINT64_MAX;
    ck_assert(ferry__shm_space_ok(&s, why, sizeof(why)));
    ck_assert_ptr_nonnull(strstr(why, "cannot be examined"));
}
END_TEST

/* Room in bytes, but no file can be made: refused, saying which way. */
START_TEST(test_shm_no_files)
{
    struct ferry__shm_state s = {.free_bytes = 1ull << 30,
                                 .total_bytes = 1ull << 30,
                                 .write_errno = EROFS};
    char why[512];

    ck_assert(!ferry__shm_space_ok(&s, why, sizeof(why)));
    ck_assert_ptr_nonnull(strstr(why, "/dev/shm is mounted read-only"));
    ck_assert_ptr_nonnull(strstr(why, "remount,rw"));
    s.write_errno = EACCES;
    ck_assert(!ferry__shm_space_ok(&s, why, sizeof(why)));
    ck_assert_ptr_nonnull(strstr(why, "not writable by this process "
                                      "(Permission denied)"));
    ck_assert_ptr_nonnull(strstr(why, "chmod 1777"));
    /* One inode short of the bound, then at it. */
    s.write_errno = 0;
    s.total_files = 100;
    s.free_files = FERRY__SHM_NEED_FILES - 1;
    ck_assert(!ferry__shm_space_ok(&s, why, sizeof(why)));
    ck_assert_ptr_nonnull(strstr(why, "can hold only 15 more files (inodes) "
                                      "of 100"));
    s.free_files = FERRY__SHM_NEED_FILES;
    ck_assert(ferry__shm_space_ok(&s, why, sizeof(why)));
    /* No inode limit at all (tmpfs's nr_inodes=0): statvfs says 0 of 0. */
    s.free_files = s.total_files = 0;
    ck_assert(ferry__shm_space_ok(&s, why, sizeof(why)));
    ck_assert_str_eq(why, "/dev/shm has 1 GiB free of 1 GiB");
}
END_TEST

/* A peer's region left sparse is committed whole when the peer is added
 * (the root-only test/unit/check_shm_full fills /dev/shm around it). */
START_TEST(test_shm_region_reserved)
{
    struct fi_info *info = fi_allocinfo();
    char path[64], addr[80];
    struct stat st;
    int fd;

    ck_assert_ptr_nonnull(info);
    snprintf(path, sizeof(path), "/dev/shm/ferry_unit_%d", (int)getpid());
    snprintf(addr, sizeof(addr), "fi_shm://%s", path + strlen("/dev/shm/"));
    fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ck_assert_msg(fd >= 0, "open %s: %s", path, strerror(errno));
    ck_assert_int_eq(ftruncate(fd, MiB), 0);
    /* Another provider's address: nothing is touched. */
    info->ep_attr->protocol = FI_PROTO_RXM;
    ck_assert_int_eq(ferry__shm_region_reserve_peer(info, addr, strlen(addr)),
                     0);
    ck_assert_int_eq(fstat(fd, &st), 0);
    ck_assert_int_eq(st.st_blocks, 0);
    info->ep_attr->protocol = FI_PROTO_SHM;
    ck_assert_int_eq(ferry__shm_region_reserve_peer(info, addr, strlen(addr)),
                     0);
    ck_assert_int_eq(fstat(fd, &st), 0);
    ck_assert_int_eq((uint64_t)st.st_blocks * 512, MiB);
    /* No such region (a provider that keeps it elsewhere): left alone. */
    ck_assert_int_eq(ferry__shm_region_reserve_peer(info, "fi_shm://none", 14),
                     0);
    close(fd);
    unlink(path);
    fi_freeinfo(info);
}
END_TEST

START_TEST(test_bytes_words)
{
    char b[32];

    ck_assert_str_eq(ferry__bytes_words(0, b, sizeof(b)), "0 B");
    ck_assert_str_eq(ferry__bytes_words(1023, b, sizeof(b)), "1023 B");
    ck_assert_str_eq(ferry__bytes_words(1024, b, sizeof(b)), "1 KiB");
    ck_assert_str_eq(ferry__bytes_words(3ull << 29, b, sizeof(b)), "1.5 GiB");
    ck_assert_str_eq(ferry__bytes_words(UINT64_MAX, b, sizeof(b)), "16 EiB");
}
END_TEST

/* ---- the route to a peer ------------------------------------------------ */

START_TEST(test_route_to_loopback)
{
    struct ferry__route r;
    struct ferry_config cfg;
    struct ferry__selection sel;

    ck_assert_int_eq(ferry__route_to("127.0.0.1", &r), 0);
    ck_assert_str_eq(r.local_text, "127.0.0.1");
    ck_assert_str_eq(r.ifname, "lo");
    /* Every tcp candidate on lo is on the route, and only those. */
    ck_assert_int_eq(ferry_config_init(&cfg), 0);
    cfg.provider = "tcp;ofi_rxm";
    ck_assert_int_eq(ferry__provider_select(&cfg, &sel), 0);
    for (size_t i = 0; i < sel.ncand; i++) {
        const struct fi_info *c = sel.cand[i].info;
        bool lo = strcmp(c->domain_attr->name, "lo") == 0;

        ck_assert_int_eq(ferry__route_match(&r, c),
                         lo ? FERRY__ROUTE_ON : FERRY__ROUTE_OFF);
    }
    ferry__selection_free(&sel);
    /* With the peer host, lo is chosen and the others are not rail mates. */
    cfg.peer_host = "127.0.0.1";
    ck_assert_int_eq(ferry__provider_select(&cfg, &sel), 0);
    ck_assert_str_eq(sel.cand[0].info->domain_attr->name, "lo");
    ck_assert_ptr_nonnull(strstr(sel.cand[0].verdict,
                                 "routes to peer host 127.0.0.1"));
    for (size_t i = 1; i < sel.ncand; i++)
        if (strcmp(sel.cand[i].info->domain_attr->name, "lo") != 0)
            ck_assert(!ferry__rail_mates(&sel.cand[0], &sel.cand[i]));
    ferry__selection_free(&sel);
}
END_TEST

START_TEST(test_route_refuses_bad_host)
{
    struct ferry__route r;

    ck_assert_int_eq(ferry__route_to("no-such-host.invalid", &r),
                     FERRY_EINVAL);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(),
                                 "'no-such-host.invalid' does not resolve"));
    ck_assert_int_eq(ferry__route_to("", &r), FERRY_EINVAL);
}
END_TEST

/* A request's small writes go without waiting, covered by a later one,
 * only on shm before libfabric 2.5 and where it places writes in order
 * (FI_ORDER_WAW, on both sides); up to its inject size. */
START_TEST(test_shm_covered_writes)
{
    struct fi_info *info = fi_allocinfo();

    ck_assert_ptr_nonnull(info);
    info->ep_attr->protocol = FI_PROTO_SHM;
    info->tx_attr->inject_size = 4096;
    info->tx_attr->msg_order = FI_ORDER_WAW | FI_ORDER_SAS;
    info->rx_attr->msg_order = FI_ORDER_WAW;
    ck_assert_uint_eq(ferry__shm_covered_writes(info, FI_VERSION(1, 17)),
                      4096);
    ck_assert_uint_eq(ferry__shm_covered_writes(info, FI_VERSION(2, 4)),
                      4096);
    ck_assert_uint_eq(ferry__shm_covered_writes(info, FI_VERSION(2, 5)), 0);
    ck_assert_uint_eq(ferry__shm_covered_writes(info, FI_VERSION(3, 0)), 0);
    info->rx_attr->msg_order = FI_ORDER_SAS; /* the unordered endpoints */
    ck_assert_uint_eq(ferry__shm_covered_writes(info, FI_VERSION(1, 17)), 0);
    info->rx_attr->msg_order = FI_ORDER_WAW;
    info->tx_attr->inject_size = 1024;
    ck_assert_uint_eq(ferry__shm_covered_writes(info, FI_VERSION(1, 17)),
                      1024);
    info->ep_attr->protocol = FI_PROTO_SOCK_TCP;
    ck_assert_uint_eq(ferry__shm_covered_writes(info, FI_VERSION(1, 17)), 0);
    fi_freeinfo(info);
}
END_TEST

/* Small writes keep to shm's first endpoint only where there is a second
 * one and the libfabric is 2.5 or later (its shm injects them); up to
 * shm's inject size; never on another provider. */
START_TEST(test_shm_first_rail_writes)
{
    struct fi_info *info = fi_allocinfo();

    ck_assert_ptr_nonnull(info);
    info->ep_attr->protocol = FI_PROTO_SHM;
    info->tx_attr->inject_size = 4096;
    ck_assert_uint_eq(ferry__shm_first_rail_writes(info, 2, FI_VERSION(2, 5)),
                      4096);
    ck_assert_uint_eq(ferry__shm_first_rail_writes(info, 3, FI_VERSION(2, 6)),
                      4096);
    ck_assert_uint_eq(ferry__shm_first_rail_writes(info, 2, FI_VERSION(3, 0)),
                      4096);
    ck_assert_uint_eq(ferry__shm_first_rail_writes(info, 2, FI_VERSION(2, 4)),
                      0);
    ck_assert_uint_eq(
        ferry__shm_first_rail_writes(info, 2, FI_VERSION(1, 17)), 0);
    ck_assert_uint_eq(ferry__shm_first_rail_writes(info, 1, FI_VERSION(2, 6)),
                      0);
    info->tx_attr->inject_size = 1024;
    ck_assert_uint_eq(ferry__shm_first_rail_writes(info, 2, FI_VERSION(2, 6)),
                      1024);
    info->ep_attr->protocol = FI_PROTO_RXM;
    ck_assert_uint_eq(ferry__shm_first_rail_writes(info, 2, FI_VERSION(2, 6)),
                      0);
    fi_freeinfo(info);
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
    tcase_add_test(tc, test_shm_first_rail_writes);
    tcase_add_test(tc, test_shm_covered_writes);
    suite_add_tcase(s, tc);
    tc = tcase_create("names");
    tcase_add_test(tc, test_fi_provider_filter);
    tcase_add_test(tc, test_nearest_name);
    tcase_add_test(tc, test_provider_about);
    tcase_add_test(tc, test_shm_space);
    tcase_add_test(tc, test_shm_no_files);
    tcase_add_test(tc, test_shm_region_reserved);
    tcase_add_test(tc, test_bytes_words);
    suite_add_tcase(s, tc);
    tc = tcase_create("route");
    tcase_add_test(tc, test_route_to_loopback);
    tcase_add_test(tc, test_route_refuses_bad_host);
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
