/*
 * rails (rails.c) and striping (xfer.c) from inside: one rail per domain
 * of one address format, shares that follow the rails' weights, the
 * progress thread bound near the first rail's NIC, and CPU lists.  (What
 * the API shows of the rails: test/api/check_rails.c.)
 */
#include "railsutil.h"

#include "progress/part.h"
#include "fabric/rails.h"

#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>

START_TEST(test_two_domains_two_rails)
{
    struct ferry_config cfg;
    ferry_context_t *ctx;

    two_rail_config(&cfg);
    ck_assert_int_eq(ferry_context_create(&cfg, &ctx), 0);
    ck_assert_uint_eq(tu_info(ctx).nrails, 2);
    /* One rail per domain, never the same NIC twice. */
    ck_assert_str_ne(ferry__fabric_of(ctx)->rails[0].info->domain_attr->name,
                     ferry__fabric_of(ctx)->rails[1].info->domain_attr->name);
    ck_assert_uint_eq(ferry__fabric_of(ctx)->rails[0].info->addr_format,
                      ferry__fabric_of(ctx)->rails[1].info->addr_format);
    ck_assert_ptr_nonnull(strstr(tu_info(ctx).why, "further rails: "));
    ferry_context_close(ctx);
}
END_TEST

START_TEST(test_shares_follow_weights)
{
    struct ferry_config cfg;
    struct tu_pair p;
    uint64_t r0, r1;

    two_rail_config(&cfg);
    tu_pair_open(&p, TCP, &cfg);
    /* As if rail 0 were three times as fast (white-box: tcp reports no
     * link speed, so both weights are 1). */
    ferry__fabric_of(p.init)->rails[0].weight = 3;
    ferry__fabric_of(p.init)->rails[1].weight = 1;
    write_all(&p, 64u << 20, 64u << 20, 14);
    rail_bytes(p.init, &r0, &r1);
    ck_assert_uint_eq(r0, 48u << 20);
    ck_assert_uint_eq(r1, 16u << 20);
    tu_pair_close(&p);
}
END_TEST

START_TEST(test_progress_thread_near_first_rail)
{
    struct ferry_config cfg;
    ferry_context_t *ctx;
    cpu_set_t set;

    two_rail_config(&cfg);
    fake_machine(&cfg);
    cfg.cuda_device = 0;
    cfg.progress_thread = 1;
    ck_assert_int_eq(ferry_context_create(&cfg, &ctx), 0);
    /* 24em64t's NICs sit on socket 0: CPUs 0,2,4,...,22; of this
     * machine's CPUs only 0 is among them. */
    ck_assert_str_eq(ctx->progress.cpus, "0,2,4,6,8,10,12,14,16,18,20,22");
    /* The thread binds itself as it starts: wait until it has run. */
    for (int i = 0; i < 1000; i++) {
        ck_assert_int_eq(pthread_getaffinity_np(ctx->progress.thread,
                                                sizeof(set), &set),
                         0);
        if (!CPU_ISSET(1, &set))
            break;
        usleep(1000);
    }
    ck_assert(CPU_ISSET(0, &set));
    ck_assert_msg(!CPU_ISSET(1, &set), "the progress thread may still run "
                  "on CPU 1, which is not near its NIC");
    ferry_context_close(ctx);
}
END_TEST

START_TEST(test_cpu_lists)
{
    ck_assert(ferry__bind_to_cpus("0"));
    ck_assert(ferry__bind_to_cpus("0-0,0"));
    ck_assert(!ferry__bind_to_cpus(""));
    ck_assert(!ferry__bind_to_cpus("x"));
    ck_assert(!ferry__bind_to_cpus("3-1"));
    ck_assert(!ferry__bind_to_cpus("0;1"));
    ck_assert(!ferry__bind_to_cpus("0,"));
}
END_TEST

static Suite *rails_suite(void)
{
    Suite *s = suite_create("rails");
    TCase *tc = tcase_create("striping");

    tcase_add_test(tc, test_two_domains_two_rails);
    tcase_add_test(tc, test_shares_follow_weights);
    suite_add_tcase(s, tc);
    tc = tcase_create("order");
    tcase_add_test(tc, test_progress_thread_near_first_rail);
    tcase_add_test(tc, test_cpu_lists);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return rails_run(rails_suite);
}
