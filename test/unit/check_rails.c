/*
 * rails (rails.c) and striping (xfer.c): which domains become rails, in
 * which order, and how requests spread over them.  Real transfers over
 * tcp on two domains of this machine (the ethernet interface and lo).
 */
#include "testutil.h"

#include "ferry-internal.h"
#include "hmem.h"

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define TCP "tcp;ofi_rxm"

/* Two tcp rails: main() checked that this machine has two tcp domains. */
static void two_rail_config(struct ferry_config *cfg)
{
    tu_config(cfg, TCP);
    cfg->domain = NULL;
    cfg->max_rails = 2;
}

/* Writes len bytes from init to target with the given request size. */
static void write_all(struct tu_pair *p, size_t len, size_t per_request,
                      uint64_t seed)
{
    uint8_t *src = tu_alloc_buf(len), *dst = tu_alloc_buf(len);
    ferry_mem_t *ms, *md;
    ferry_rmem_t *rm;

    tu_fill(src, len, seed);
    ck_assert_int_eq(ferry_mem_register(p->init, src, len, FERRY_MEM_HOST, 0,
                                        0, &ms),
                     0);
    ck_assert_int_eq(ferry_mem_register(p->target, dst, len, FERRY_MEM_HOST,
                                        0, FERRY_ACCESS_REMOTE_WRITE, &md),
                     0);
    rm = tu_share(md, p->peer);
    for (size_t off = 0; off < len; off += per_request) {
        struct ferry_iov iov = {src + off, ms, rm, off, per_request};
        ferry_req_t *req;
        int ret = ferry_write(p->peer, &iov, 1, NULL, &req);

        ck_assert_msg(ret == 0, "write: %s", ferry_last_error());
        ret = ferry_req_wait(req, -1);
        ck_assert_msg(ret == 0, "wait: %s", ferry_last_error());
        ferry_req_free(req);
    }
    ck_assert_msg(tu_check(dst, len, seed) == SIZE_MAX,
                  "target data differs at byte %zu", tu_check(dst, len, seed));
    ck_assert_int_eq(ferry_rmem_free(rm), 0);
    ck_assert_int_eq(ferry_mem_deregister(ms), 0);
    ck_assert_int_eq(ferry_mem_deregister(md), 0);
    tu_free_buf(src, len);
    tu_free_buf(dst, len);
}

static void rail_bytes(ferry_context_t *ctx, uint64_t *r0, uint64_t *r1)
{
    struct ferry_stats s = FERRY_STATS_INIT;

    ck_assert_int_eq(ferry_context_stats(ctx, &s), 0);
    *r0 = s.bytes_posted[0];
    *r1 = s.bytes_posted[1];
}

START_TEST(test_two_domains_two_rails)
{
    struct ferry_config cfg;
    ferry_context_t *ctx;

    two_rail_config(&cfg);
    ck_assert_int_eq(ferry_context_create(&cfg, &ctx), 0);
    ck_assert_uint_eq(ctx->nrails, 2);
    /* One rail per domain, never the same NIC twice. */
    ck_assert_str_ne(ctx->rails[0].info->domain_attr->name,
                     ctx->rails[1].info->domain_attr->name);
    ck_assert_uint_eq(ctx->rails[0].info->addr_format,
                      ctx->rails[1].info->addr_format);
    ck_assert_ptr_nonnull(strstr(ctx->why, "further rails: "));
    ferry_context_destroy(ctx);
}
END_TEST

START_TEST(test_large_request_striped)
{
    struct ferry_config cfg;
    struct tu_pair p;
    uint64_t r0, r1;

    two_rail_config(&cfg);
    tu_pair_open(&p, TCP, &cfg);
    write_all(&p, 64u << 20, 64u << 20, 11);
    rail_bytes(p.init, &r0, &r1);
    /* Equal weights (tcp reports no link speed): equal halves. */
    ck_assert_uint_eq(r0 + r1, 64u << 20);
    ck_assert_uint_eq(r0, 32u << 20);
    ck_assert_uint_eq(r1, 32u << 20);
    tu_pair_close(&p);
}
END_TEST

START_TEST(test_small_requests_take_turns)
{
    struct ferry_config cfg;
    struct tu_pair p;
    uint64_t r0, r1;

    two_rail_config(&cfg);
    tu_pair_open(&p, TCP, &cfg);
    /* 8 requests of 64 KiB, below the 128 KiB threshold: one rail each,
     * alternating. */
    write_all(&p, 8 * (64u << 10), 64u << 10, 12);
    rail_bytes(p.init, &r0, &r1);
    ck_assert_uint_eq(r0, 4 * (64u << 10));
    ck_assert_uint_eq(r1, 4 * (64u << 10));
    tu_pair_close(&p);
}
END_TEST

START_TEST(test_threshold_configurable)
{
    struct ferry_config cfg;
    struct tu_pair p;
    uint64_t r0, r1;

    two_rail_config(&cfg);
    cfg.stripe_threshold = 64u << 20; /* nothing here is that large */
    tu_pair_open(&p, TCP, &cfg);
    write_all(&p, 8u << 20, 8u << 20, 13);
    rail_bytes(p.init, &r0, &r1);
    ck_assert_msg((r0 == 0) != (r1 == 0),
                  "an unstriped request used both rails (%llu, %llu)",
                  (unsigned long long)r0, (unsigned long long)r1);
    tu_pair_close(&p);
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
    p.init->rails[0].weight = 3;
    p.init->rails[1].weight = 1;
    write_all(&p, 64u << 20, 64u << 20, 14);
    rail_bytes(p.init, &r0, &r1);
    ck_assert_uint_eq(r0, 48u << 20);
    ck_assert_uint_eq(r1, 16u << 20);
    tu_pair_close(&p);
}
END_TEST

/* ---- order from the topology (a fake sysfs and a saved topology) ---- */

static char sysfs[256];

static void link_device(const char *name, const char *target)
{
    char path[2 * PATH_MAX], dest[PATH_MAX];

    snprintf(path, sizeof(path), "mkdir -p %s/class/net/%s %s/devices/%s",
             sysfs, name, sysfs, target);
    ck_assert_int_eq(system(path), 0);
    snprintf(path, sizeof(path), "%s/class/net/%s/device", sysfs, name);
    snprintf(dest, sizeof(dest), "../../../devices/%s", target);
    ck_assert_int_eq(symlink(dest, path), 0);
}

/*
 * 24em64t has NICs 0000:05:00.0 and 0000:04:00.0, both under the host
 * bridge of GPUs 0 and 1, so balancing gives each GPU its own primary.
 * The ethernet interface pretends to be 0000:04:00.0 and lo 0000:05:00.0:
 * for one of the two GPUs the topology's choice (lo) goes against the
 * rank order (ethernet first).
 */
static void fake_machine(struct ferry_config *cfg)
{
    const char *dir = getenv("FERRY_TEST_TOPOLOGY_DIR");
    static char xml[PATH_MAX];
    ferry_context_t *probe;
    char eth[64];

    ck_assert_msg(dir != NULL, "FERRY_TEST_TOPOLOGY_DIR is not set");
    snprintf(xml, sizeof(xml), "%s/24em64t-2n6c2t-pci.xml", dir);
    tu_config(cfg, TCP);
    cfg->domain = NULL;
    cfg->max_rails = 2;
    cfg->topology_xml = xml;
    ck_assert_int_eq(ferry_context_create(cfg, &probe), 0);
    snprintf(eth, sizeof(eth), "%s", probe->rails[0].info->domain_attr->name);
    ferry_context_destroy(probe);
    snprintf(sysfs, sizeof(sysfs), "%s/ferry-sysfs.XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(sysfs));
    link_device(eth, "pci0000:00/0000:00:04.0/0000:04:00.0");
    link_device("lo", "pci0000:00/0000:00:05.0/0000:05:00.0");
    setenv("FERRY_SYSFS_ROOT", sysfs, 1);
}

/*
 * The first rail of a context for GPU `gpu`, checked against the reason:
 * the topology's primary NIC for that GPU must be the first rail's.
 */
static const char *first_rail(struct ferry_config *cfg, int gpu)
{
    static char name[64];
    char primary[96];
    ferry_context_t *ctx;
    int ret;

    cfg->cuda_device = gpu;
    ret = ferry_context_create(cfg, &ctx);
    ck_assert_msg(ret == 0, "%s", ferry_last_error());
    snprintf(name, sizeof(name), "%s", ctx->rails[0].info->domain_attr->name);
    snprintf(primary, sizeof(primary), "rails nearest the GPU: GPU %s: NIC %s",
             gpu == 0 ? "0000:01:03.0" : "0000:06:00.0",
             strcmp(name, "lo") == 0 ? "0000:05:00.0" : "0000:04:00.0");
    ck_assert_msg(strstr(ctx->why, primary) != NULL,
                  "first rail %s, but why: %s", name, ctx->why);
    ferry_context_destroy(ctx);
    return name;
}

START_TEST(test_gpu_nics_become_first_rails)
{
    struct ferry_config cfg;
    char gpu0[64];

    two_rail_config(&cfg);
    fake_machine(&cfg);
    /* GPUs 0 and 1 share the host bridge of both NICs: balanced, each
     * gets its own primary, and it becomes the context's first rail,
     * against the rank order (ethernet before lo) for one of them. */
    snprintf(gpu0, sizeof(gpu0), "%s", first_rail(&cfg, 0));
    ck_assert_str_ne(gpu0, first_rail(&cfg, 1));
}
END_TEST

/* A CUDA ordinal is not the topology's index: the driver's PCI address
 * finds the GPU (here the simulated device, placed by FERRY_SIM_PCI at
 * the fixture's GPUs in the reverse order). */
START_TEST(test_cuda_ordinal_found_by_pci)
{
    static const char *const want[] = {
        "CUDA device 0 is 0000:06:00.0; GPU 0000:06:00.0: NIC",
        "CUDA device 1 is 0000:01:03.0; GPU 0000:01:03.0: NIC",
    };
    struct ferry_config cfg;
    ferry_context_t *ctx;

    setenv("FERRY_SIM_PCI", "0000:06:00.0,0000:01:03.0", 1);
    ferry__hmem_use_sim(2);
    two_rail_config(&cfg);
    fake_machine(&cfg);
    for (int d = 0; d < 2; d++) {
        cfg.cuda_device = d;
        ck_assert_int_eq(ferry_context_create(&cfg, &ctx), 0);
        ck_assert_msg(strstr(ctx->why, want[d]) != NULL, "why: %s", ctx->why);
        ferry_context_destroy(ctx);
    }
    setenv("FERRY_SIM_PCI", "0000:99:00.0", 1);
    cfg.cuda_device = 0;
    ck_assert_int_eq(ferry_context_create(&cfg, &ctx), 0);
    ck_assert_msg(strstr(ctx->why, "0000:99:00.0, which the topology lacks") !=
                      NULL,
                  "why: %s", ctx->why);
    ferry_context_destroy(ctx);
    unsetenv("FERRY_SIM_PCI");
}
END_TEST

START_TEST(test_no_topology_answer_keeps_rank)
{
    struct ferry_config cfg;
    ferry_context_t *ctx;

    two_rail_config(&cfg);
    fake_machine(&cfg);
    /* Host memory with a topology read from a file: the calling thread's
     * node is unknown there, so the rank order stays, and says why. */
    ck_assert_int_eq(ferry_context_create(&cfg, &ctx), 0);
    ck_assert_str_ne(ctx->rails[0].info->domain_attr->name, "lo");
    ck_assert_msg(strstr(ctx->why, "rails in rank order") != NULL, "why: %s",
                  ctx->why);
    ferry_context_destroy(ctx);
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
    ck_assert_str_eq(ctx->progress_cpus, "0,2,4,6,8,10,12,14,16,18,20,22");
    /* The thread binds itself as it starts: wait until it has run. */
    for (int i = 0; i < 1000; i++) {
        ck_assert_int_eq(pthread_getaffinity_np(ctx->progress_thread,
                                                sizeof(set), &set),
                         0);
        if (!CPU_ISSET(1, &set))
            break;
        usleep(1000);
    }
    ck_assert(CPU_ISSET(0, &set));
    ck_assert_msg(!CPU_ISSET(1, &set), "the progress thread may still run "
                  "on CPU 1, which is not near its NIC");
    ferry_context_destroy(ctx);
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

START_TEST(test_one_domain_is_left_alone)
{
    struct ferry_config cfg;
    ferry_context_t *ctx;

    tu_config(&cfg, TCP); /* domain lo: one candidate */
    ck_assert_int_eq(ferry_context_create(&cfg, &ctx), 0);
    ck_assert_uint_eq(ctx->nrails, 1);
    ck_assert_ptr_null(strstr(ctx->why, "rails"));
    ferry_context_destroy(ctx);
}
END_TEST

static Suite *rails_suite(void)
{
    Suite *s = suite_create("rails");
    TCase *tc = tcase_create("striping");

    tcase_add_test(tc, test_two_domains_two_rails);
    tcase_add_test(tc, test_large_request_striped);
    tcase_add_test(tc, test_small_requests_take_turns);
    tcase_add_test(tc, test_threshold_configurable);
    tcase_add_test(tc, test_shares_follow_weights);
    suite_add_tcase(s, tc);
    tc = tcase_create("order");
    tcase_add_test(tc, test_gpu_nics_become_first_rails);
    tcase_add_test(tc, test_cuda_ordinal_found_by_pci);
    tcase_add_test(tc, test_no_topology_answer_keeps_rank);
    tcase_add_test(tc, test_one_domain_is_left_alone);
    tcase_add_test(tc, test_progress_thread_near_first_rail);
    tcase_add_test(tc, test_cpu_lists);
    suite_add_tcase(s, tc);
    return s;
}

/* Rails a two-rail tcp context gets here, probed in a child so that this
 * process (which forks every test) never initialises libfabric. */
static int probe_rails(void)
{
    pid_t pid = fork();
    int status = 0;

    if (pid == 0) {
        struct ferry_config cfg;
        ferry_context_t *ctx;

        ferry_config_init(&cfg);
        cfg.provider = TCP;
        cfg.max_rails = 2;
        if (ferry_context_create(&cfg, &ctx) != 0)
            _exit(0);
        _exit((int)ctx->nrails);
    }
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return 0;
    return WEXITSTATUS(status);
}

int main(void)
{
    /* These tests need two tcp domains (the ethernet interface and lo):
     * say so instead of passing vacuously on a machine with one. */
    if (probe_rails() < 2) {
        printf("SKIP: this machine has one tcp domain; striping needs two\n");
        return 77;
    }
    return tu_run(rails_suite());
}
