/*
 * A /dev/shm that fills up after the contexts started.  libfabric's shm
 * provider keeps each endpoint's region (command queues, inject and SAR
 * bounce buffers) in a file there, and a write into a page of it that
 * tmpfs cannot back kills the process with SIGBUS.  Each test mounts a
 * small tmpfs over /dev/shm in a mount namespace of its own (so it needs
 * root: elsewhere the program skips, exit 77), opens the contexts, fills
 * the tmpfs to its last page and then writes: every write must succeed,
 * or fail with a sentence naming /dev/shm, never die of a signal.  (The
 * provider catches SIGBUS, prints "terminated with signal 7" and its
 * stack, and exits: Check reports "Early exit with return value 1".)
 * A peer's region that its side left sparse is reserved, or refused with
 * a sentence, by the side that adds the peer (shm_space.h).
 */
#include "testutil.h"

#include "fabric/shm_space.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#define SHM "shm"
#define FILLER "/dev/shm/ferry-test-filler"

/* The sizes of the reports: 160 and 600 MiB. */
static const char *const tmpfs_sizes[] = {"160m", "600m"};

/* Writes of every protocol shm has for them: inline (64 bytes), inject
 * (4 KiB), and copies through the SAR buffers or the kernel (CMA). */
static const size_t write_sizes[] = {64, 4 * KiB, 64 * KiB, MiB};

/* This process's /dev/shm: a fresh tmpfs of `size` in a mount namespace
 * of its own, so nothing outside sees it. */
static int small_shm(const char *size, char *why, size_t len)
{
    char opts[32];

    snprintf(opts, sizeof(opts), "size=%s", size);
    if (unshare(CLONE_NEWNS) != 0)
        return snprintf(why, len, "unshare(CLONE_NEWNS): %s", strerror(errno));
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
        return snprintf(why, len, "making / private: %s", strerror(errno));
    if (mount("tmpfs", "/dev/shm", "tmpfs", 0, opts) != 0)
        return snprintf(why, len, "mount -t tmpfs -o %s tmpfs /dev/shm: %s",
                        opts, strerror(errno));
    return 0;
}

static void enter_small_shm(const char *size)
{
    char why[256];

    ck_assert_msg(small_shm(size, why, sizeof(why)) == 0, "%s", why);
}

/* Fills /dev/shm to its last page with a file of its own (plain writes:
 * a full tmpfs answers them ENOSPC); returns the bytes it took. */
static uint64_t fill_shm(void)
{
    static uint8_t chunk[MiB];
    int fd = open(FILLER, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    uint64_t took = 0;
    struct statvfs st;

    ck_assert_msg(fd >= 0, "open %s: %s", FILLER, strerror(errno));
    for (size_t n = sizeof(chunk); n >= 4 * KiB; n /= 2) {
        ssize_t w;

        while ((w = write(fd, chunk, n)) > 0)
            took += (uint64_t)w;
        ck_assert_msg(errno == ENOSPC, "filling /dev/shm: %s",
                      strerror(errno));
    }
    close(fd);
    ck_assert_int_eq(statvfs("/dev/shm", &st), 0);
    ck_assert_msg(st.f_bavail == 0, "/dev/shm still has %llu blocks free",
                  (unsigned long long)st.f_bavail);
    return took;
}

/* Posts iov as a write or a read and waits for it (30 s at most). */
static int xfer(ferry_peer_t *peer, bool write, const struct ferry_iov *iov)
{
    ferry_req_t *req = NULL;
    int ret = write ? ferry_write(peer, iov, 1, NULL, &req)
                    : ferry_read(peer, iov, 1, NULL, &req);

    if (ret == 0) {
        ret = ferry_req_wait(req, 30000);
        ferry_req_close(req);
    }
    return ret;
}

/* Writes len bytes of pattern seed from lbuf into rmem at 0 and waits:
 * true when it succeeded; a failure must name /dev/shm. */
static bool write_or_say_why(ferry_peer_t *peer, ferry_rmem_t *rmem,
                             uint8_t *lbuf, size_t len, uint64_t seed)
{
    struct ferry_iov iov = {.local = lbuf, .rmem = rmem, .len = len};
    int ret;

    tu_fill(lbuf, len, seed);
    ret = xfer(peer, true, &iov);
    printf("a %zu-byte write with /dev/shm full: %s%s\n", len,
           ret == 0 ? "done" : ferry_strerror(ret),
           ret == 0 ? "" : ferry_last_error());
    if (ret != 0)
        tu_assert_sentence("/dev/shm", NULL);
    return ret == 0;
}

/* Reads len bytes of rmem back into buf: they must be pattern seed. */
static void read_back(ferry_peer_t *peer, ferry_rmem_t *rmem, uint8_t *buf,
                      size_t len, uint64_t seed)
{
    struct ferry_iov iov = {.local = buf, .rmem = rmem, .len = len};
    int ret = xfer(peer, false, &iov);

    ck_assert_msg(ret == 0, "reading back %zu bytes: %s", len,
                  ferry_last_error());
    tu_assert_pattern(buf, len, seed, "%zu bytes written, read back", len);
}

/* Both contexts in this process, then /dev/shm fills, then the writes. */
START_TEST(test_full_after_start_one_process)
{
    const char *size = tmpfs_sizes[_i];
    struct tu_fx x;

    enter_small_shm(size);
    tu_fx_open(&x, SHM, NULL, 0, 1, MiB, MiB);
    printf("a %s /dev/shm filled with %llu MiB after the contexts started\n",
           size, (unsigned long long)(fill_shm() >> 20));
    for (size_t i = 0; i < TU_ARRAY_LEN(write_sizes); i++)
        if (write_or_say_why(x.p.peer, x.rmem, x.lbuf, write_sizes[i], i + 1))
            tu_assert_pattern(x.tbuf, write_sizes[i], i + 1,
                              "%zu bytes written", write_sizes[i]);
    tu_fx_close(&x);
    unlink(FILLER);
}
END_TEST

/*
 * The target in another process: its region is a file the initiator maps
 * too, and the initiator's commands and bounce copies land in its pages.
 * Without CMA (kernel copies between the processes) every byte goes
 * through those bounce buffers.
 */
static void full_with_target_child(const char *size, bool cma)
{
    struct ferry_config cfg;
    struct tu_child c;
    ferry_context_t *ctx;
    ferry_peer_t *peer;
    ferry_rmem_t *rmem;
    uint8_t *lbuf = tu_alloc_buf(MiB), *rbuf = tu_alloc_buf(MiB);

    enter_small_shm(size);
    if (!cma)
        setenv("FI_SHM_DISABLE_CMA", "1", 1);
    tu_child_start(&c, SHM, MiB, 0);
    tu_config(&cfg, SHM);
    ctx = tu_context_cfg(&cfg);
    ck_assert_msg(ferry_peer_add(ctx, c.addr, c.addr_len, &peer) == 0, "%s",
                  ferry_last_error());
    ck_assert_msg(ferry_rmem_import(peer, c.rkey, c.rkey_len, &rmem) == 0,
                  "%s", ferry_last_error());
    printf("a %s /dev/shm (CMA %s) filled with %llu MiB after both "
           "processes started\n",
           size, cma ? "on" : "off", (unsigned long long)(fill_shm() >> 20));
    for (size_t i = 0; i < TU_ARRAY_LEN(write_sizes); i++)
        if (write_or_say_why(peer, rmem, lbuf, write_sizes[i], i + 1))
            read_back(peer, rmem, rbuf, write_sizes[i], i + 1);
    ck_assert_int_eq(ferry_rmem_close(rmem), 0);
    ck_assert_int_eq(ferry_peer_close(peer), 0);
    ferry_context_close(ctx);
    tu_child_stop(&c);
    tu_free_buf(lbuf, MiB);
    tu_free_buf(rbuf, MiB);
    unlink(FILLER);
}

START_TEST(test_full_after_start_two_processes)
{
    full_with_target_child(tmpfs_sizes[_i], true);
}
END_TEST

START_TEST(test_full_after_start_bounce_buffers)
{
    full_with_target_child(tmpfs_sizes[_i], false);
}
END_TEST

/* A region as a peer that did not reserve it leaves it: sparse, size
 * bytes; its name in shm's address form. */
static const char *sparse_region(const char *name, off_t size)
{
    char path[128];
    int fd;

    snprintf(path, sizeof(path), "/dev/shm/%s", name);
    fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ck_assert_msg(fd >= 0, "open %s: %s", path, strerror(errno));
    ck_assert_int_eq(ftruncate(fd, size), 0);
    close(fd);
    return name;
}

static uint64_t committed(const char *name)
{
    char path[128];
    struct stat st;

    snprintf(path, sizeof(path), "/dev/shm/%s", name);
    ck_assert_int_eq(stat(path, &st), 0);
    return (uint64_t)st.st_blocks * 512;
}

static int reserve_peer(const struct fi_info *info, const char *name)
{
    char addr[128];

    snprintf(addr, sizeof(addr), "fi_shm://%s", name);
    return ferry__shm_region_reserve_peer(info, addr, strlen(addr) + 1);
}

START_TEST(test_peer_region_reserved_or_refused)
{
    struct fi_info *info = fi_allocinfo();
    const char *a, *b;

    ck_assert_ptr_nonnull(info);
    info->ep_attr->protocol = FI_PROTO_SHM;
    enter_small_shm(tmpfs_sizes[0]);
    a = sparse_region("ferry_test_peer_a", 16 * MiB);
    ck_assert_uint_eq(committed(a), 0);
    ck_assert_msg(reserve_peer(info, a) == 0, "%s", ferry_last_error());
    ck_assert_uint_eq(committed(a), 16 * MiB);
    fill_shm();
    /* Reserved already: nothing more to find, full or not. */
    ck_assert_msg(reserve_peer(info, a) == 0, "%s", ferry_last_error());
    b = sparse_region("ferry_test_peer_b", 16 * MiB);
    TU_EXPECT_ERROR(reserve_peer(info, b), FERRY_ENOSPC,
                    "/dev/shm has no room for the peer's shm region "
                    "/dev/shm/ferry_test_peer_b (16 MiB; 0 B free of 160 MiB)");
    tu_assert_sentence("SIGBUS", "FERRY_PROVIDER=tcp", NULL);
    /* Nothing of it kept: the refusal left /dev/shm as full as it was. */
    ck_assert_uint_eq(committed(b), 0);
    fi_freeinfo(info);
}
END_TEST

static Suite *shm_full_suite(void)
{
    Suite *s = suite_create("shm_full");
    TCase *tc = tu_tcase(s, "full_after_start", 120);
    int n = (int)TU_ARRAY_LEN(tmpfs_sizes);

    tcase_add_loop_test(tc, test_full_after_start_one_process, 0, n);
    tcase_add_loop_test(tc, test_full_after_start_two_processes, 0, n);
    tcase_add_loop_test(tc, test_full_after_start_bounce_buffers, 0, n);
    tcase_add_test(tc, test_peer_region_reserved_or_refused);
    return s;
}

/* Whether this process may make a mount namespace with its own /dev/shm
 * (tried in a child, which then exits); why not into why. */
static bool can_mount_shm(char *why, size_t len)
{
    int fds[2], status = 0;
    pid_t pid;
    ssize_t n;

    if (pipe(fds) != 0 || (pid = fork()) < 0) {
        snprintf(why, len, "pipe or fork: %s", strerror(errno));
        return false;
    }
    if (pid == 0) {
        char said[256] = "";

        close(fds[0]);
        small_shm("1m", said, sizeof(said));
        n = write(fds[1], said, strlen(said));
        _exit(n < 0);
    }
    close(fds[1]);
    n = read(fds[0], why, len - 1);
    why[n > 0 ? n : 0] = '\0';
    close(fds[0]);
    waitpid(pid, &status, 0);
    return why[0] == '\0';
}

int main(void)
{
    char why[256];

    if (!tu_check_forks()) {
        printf("SKIP: CK_FORK=no: each test mounts its own /dev/shm and may "
               "die of a signal, so it needs a process of its own\n");
        return 77;
    }
    if (!can_mount_shm(why, sizeof(why))) {
        printf("SKIP: cannot mount a small tmpfs over /dev/shm in a private "
               "mount namespace (needs root): %s\n",
               why);
        return 77;
    }
    return tu_run(shm_full_suite());
}
