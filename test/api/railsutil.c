/*
 * Helpers of the rails suites (see railsutil.h).
 */
#include "railsutil.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

void two_rail_config(struct ferry_config *cfg)
{
    tu_config(cfg, TCP);
    cfg->domain = NULL;
    cfg->max_rails = 2;
}

void write_all(struct tu_pair *p, size_t len, size_t per_request,
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
        ferry_req_close(req);
    }
    ck_assert_msg(tu_check(dst, len, seed) == SIZE_MAX,
                  "target data differs at byte %zu", tu_check(dst, len, seed));
    ck_assert_int_eq(ferry_rmem_close(rm), 0);
    ck_assert_int_eq(ferry_mem_close(ms), 0);
    ck_assert_int_eq(ferry_mem_close(md), 0);
    tu_free_buf(src, len);
    tu_free_buf(dst, len);
}

void rail_bytes(ferry_context_t *ctx, uint64_t *r0, uint64_t *r1)
{
    struct ferry_stats s = tu_stats(ctx);

    *r0 = s.bytes_posted[0];
    *r1 = s.bytes_posted[1];
}

void why_says(ferry_context_t *ctx, const char *phrase)
{
    const char *why = tu_info(ctx).why;

    ck_assert_msg(strstr(why, phrase) != NULL, "why: %s", why);
}

/* The fake sysfs of fake_machine. */
static char sysfs[256];

static void remove_sysfs(void)
{
    char cmd[sizeof(sysfs) + 16];

    if (sysfs[0] == '\0')
        return;
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", sysfs);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", sysfs);
}

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

void fake_machine(struct ferry_config *cfg)
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
    snprintf(eth, sizeof(eth), "%s", tu_info(probe).domain);
    ferry_context_close(probe);
    tu_tmp_dir(sysfs, sizeof(sysfs), "ferry-sysfs");
    /* Check forks each test and the child exits through exit(): the tree
     * goes with the process that made it. */
    atexit(remove_sysfs);
    link_device(eth, "pci0000:00/0000:00:04.0/0000:04:00.0");
    link_device("lo", "pci0000:00/0000:00:05.0/0000:05:00.0");
    setenv("FERRY_SYSFS_ROOT", sysfs, 1);
}

/* Rails a two-rail tcp context gets here, probed in a child so that this
 * process (which forks every test) never initialises libfabric. */
static int probe_rails(void)
{
    pid_t pid = fork();
    int status = 0;

    if (pid == 0) {
        struct ferry_config cfg;
        struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;
        ferry_context_t *ctx;

        ferry_config_init(&cfg);
        cfg.provider = TCP;
        cfg.max_rails = 2;
        /* As the tests' contexts (tu_config): every peer is on this host,
         * so loopback may be a rail beside the ethernet interface.  (A
         * context for other hosts leaves loopback out: its address would
         * lead nowhere from there.) */
        cfg.local_only = 1;
        if (ferry_context_create(&cfg, &ctx) != 0 ||
            ferry_context_info(ctx, &info) != 0)
            _exit(0);
        _exit((int)info.nrails);
    }
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return 0;
    return WEXITSTATUS(status);
}

int rails_run(Suite *(*suite)(void))
{
    /* These tests need two tcp domains (the ethernet interface and lo):
     * say so instead of passing vacuously on a machine with one. */
    if (probe_rails() < 2) {
        printf("SKIP: this machine has one tcp domain; striping needs two\n");
        return 77;
    }
    return tu_run(suite());
}
