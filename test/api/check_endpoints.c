/*
 * Several endpoints on one domain, each a rail (config.endpoints_per_domain):
 * shm's default of two, a count asked for on tcp, peers with different
 * counts, and what the choice sentence says.  Bytes per rail are counted
 * by ferry_context_stats.
 */
#include "railsutil.h"

#include <stdio.h>
#include <string.h>

#define SHM "shm"

/* Opens a pair whose initiator and target ask for init_eps and target_eps
 * endpoints per domain (0: ferry's choice). */
static void pair_open(struct tu_pair *p, const char *prov, unsigned init_eps,
                      unsigned target_eps)
{
    struct ferry_config cfg;
    uint8_t addr[512];
    size_t len = sizeof(addr);

    tu_config(&cfg, prov);
    cfg.endpoints_per_domain = init_eps;
    p->init = tu_context_cfg(&cfg);
    cfg.endpoints_per_domain = target_eps;
    cfg.progress_thread = 1;
    p->target = tu_context_cfg(&cfg);
    ck_assert_int_eq(ferry_context_address(p->target, addr, &len), 0);
    ck_assert_msg(ferry_peer_add(p->init, addr, len, &p->peer) == 0, "%s",
                  ferry_last_error());
}

static void why_lacks(ferry_context_t *ctx, const char *phrase)
{
    const char *why = tu_info(ctx).why;

    ck_assert_msg(strstr(why, phrase) == NULL, "why: %s", why);
}

/* Whether the libfabric ferry runs on is 2.5 or later, as ferry's version
 * string says: its shm copies a small delivery-complete write into an
 * inject buffer, where 1.17-2.4 send it through SAR. */
static bool shm_injects_small_writes(void)
{
    const char *lf = strstr(ferry_version_string(), "(libfabric ");
    unsigned major, minor;

    ck_assert_msg(lf != NULL &&
                      sscanf(lf, "(libfabric %u.%u", &major, &minor) == 2,
                  "no libfabric version in \"%s\"", ferry_version_string());
    return major > 2 || (major == 2 && minor >= 5);
}

/* shm: two endpoints unless told otherwise.  Small writes take them in
 * turn where shm sends them one at a time per endpoint (libfabric before
 * 2.5) and keep to the first where it does not; larger requests take them
 * in turn on either. */
START_TEST(test_shm_two_by_default)
{
    struct tu_pair p;
    uint64_t r0, r1;
    bool inject = shm_injects_small_writes();

    pair_open(&p, SHM, 0, 0);
    ck_assert_uint_eq(tu_info(p.init).nrails, 2);
    if (inject)
        why_says(p.init, "; 2 endpoints on each domain, each a rail (shm "
                         "moves large transfers faster over two); writes of "
                         "up to 4096 bytes keep to the first");
    else
        why_says(p.init, "; 2 endpoints on each domain, each a rail (shm "
                         "moves one small write to a peer at a time per "
                         "endpoint)");
    write_all(&p, 8 * 4096, 4096, 41);
    rail_bytes(p.init, &r0, &r1);
    ck_assert_uint_eq(r0, inject ? 8 * 4096 : 4 * 4096);
    ck_assert_uint_eq(r1, inject ? 0 : 4 * 4096);
    write_all(&p, 8 * 8192, 8192, 45);
    rail_bytes(p.init, &r0, &r1);
    ck_assert_uint_eq(r0, (inject ? 8 * 4096 : 4 * 4096) + 4 * 8192);
    ck_assert_uint_eq(r1, (inject ? 0 : 4 * 4096) + 4 * 8192);
    tu_pair_close(&p);
}
END_TEST

/* A request above the stripe threshold goes over both, in equal halves
 * (shm reports no link speed). */
START_TEST(test_shm_large_request_striped)
{
    struct tu_pair p;
    uint64_t r0, r1;

    pair_open(&p, SHM, 0, 0);
    write_all(&p, 16u << 20, 16u << 20, 42);
    rail_bytes(p.init, &r0, &r1);
    ck_assert_uint_eq(r0, 8u << 20);
    ck_assert_uint_eq(r1, 8u << 20);
    tu_pair_close(&p);
}
END_TEST

START_TEST(test_shm_one_when_asked)
{
    struct tu_pair p;
    uint64_t r0, r1;

    pair_open(&p, SHM, 1, 1);
    ck_assert_uint_eq(tu_info(p.init).nrails, 1);
    why_lacks(p.init, "endpoints on each domain");
    write_all(&p, 8 * 4096, 4096, 43);
    rail_bytes(p.init, &r0, &r1);
    ck_assert_uint_eq(r0, 8 * 4096);
    ck_assert_uint_eq(r1, 0);
    tu_pair_close(&p);
}
END_TEST

/* tcp keeps one unless asked; asked for three, it has three on lo. */
START_TEST(test_tcp_three_when_asked)
{
    struct tu_pair p;
    struct ferry_stats s;

    pair_open(&p, TCP, 0, 0);
    ck_assert_uint_eq(tu_info(p.init).nrails, 1);
    why_lacks(p.init, "endpoints on each domain");
    tu_pair_close(&p);

    pair_open(&p, TCP, 3, 3);
    ck_assert_uint_eq(tu_info(p.init).nrails, 3);
    why_says(p.init, "; 3 endpoints on each domain, each a rail "
                     "(config.endpoints_per_domain)");
    write_all(&p, 6 * (64u << 10), 64u << 10, 44);
    s = tu_stats(p.init);
    for (unsigned r = 0; r < 3; r++)
        ck_assert_msg(s.bytes_posted[r] == 2 * (64u << 10),
                      "rail %u posted %llu bytes, expected two requests' "
                      "128 KiB",
                      r, (unsigned long long)s.bytes_posted[r]);
    tu_pair_close(&p);
}
END_TEST

/* Eight rails at most: the count is cut to what fits. */
START_TEST(test_at_most_eight_rails)
{
    struct ferry_config cfg;
    ferry_context_t *ctx;

    tu_config(&cfg, TCP);
    cfg.endpoints_per_domain = 8;
    ctx = tu_context_cfg(&cfg);
    ck_assert_uint_eq(tu_info(ctx).nrails, 8);
    ferry_context_close(ctx);
}
END_TEST

/* Peers with different counts use the rails both have: everything moves,
 * over the common one. */
START_TEST(test_different_counts_meet)
{
    struct tu_pair p;
    uint64_t r0, r1;

    pair_open(&p, SHM, 2, 1);
    write_all(&p, 8 * 4096, 4096, 45);
    write_all(&p, 4u << 20, 4u << 20, 46);
    rail_bytes(p.init, &r0, &r1);
    ck_assert_uint_eq(r0, 8 * 4096 + (4u << 20));
    ck_assert_uint_eq(r1, 0);
    tu_pair_close(&p);

    pair_open(&p, SHM, 1, 2);
    write_all(&p, 8 * 4096, 4096, 47);
    rail_bytes(p.init, &r0, &r1);
    ck_assert_uint_eq(r0, 8 * 4096);
    tu_pair_close(&p);
}
END_TEST

static Suite *endpoints_suite(void)
{
    Suite *s = suite_create("endpoints");
    TCase *tc = tcase_create("per domain");

    tcase_add_checked_fixture(tc, tu_clear_ferry_env, tu_clear_ferry_env);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_shm_two_by_default);
    tcase_add_test(tc, test_shm_large_request_striped);
    tcase_add_test(tc, test_shm_one_when_asked);
    tcase_add_test(tc, test_tcp_three_when_asked);
    tcase_add_test(tc, test_at_most_eight_rails);
    tcase_add_test(tc, test_different_counts_meet);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(endpoints_suite());
}
