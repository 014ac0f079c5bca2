/*
 * The guard of dead shm peers' region locks (fabric/shm_guard.h).
 *
 * What it releases and what it leaves alone, on region files made here
 * in a directory of their own: a lock a dead process holds in its region
 * of libfabric 1.17's layout is released; a free lock, a live owner,
 * another layout, a region whose head names another owner, another
 * process's name and a file too short to hold a head are left as they
 * are.  (A real peer killed holding its lock: check_progress.)
 */
#include "testutil.h"

#include "fabric/shm_guard.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* libfabric 1.17's region head, as far as its lock. */
struct head {
    uint8_t version, resv;
    uint16_t flags;
    int32_t pid;
    uint8_t cma_cap_peer, cma_cap_self;
    uint32_t max_sar_buf_per_peer;
    void *base_addr;
    pthread_spinlock_t lock;
};

static char dir[64];

static void make_dir(void)
{
    snprintf(dir, sizeof(dir), "/tmp/ferry-guard-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void remove_dir(void)
{
    char cmd[96];

    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* A process that has ended and been reaped. */
static pid_t dead_pid(void)
{
    pid_t pid = fork();
    int st;

    ck_assert_int_ge(pid, 0);
    if (pid == 0)
        _exit(0);
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    return pid;
}

/* Writes file name in dir: a head of version, owner pid, its lock held
 * or not, and a tail; len bytes of it (the whole head and more: 0). */
static void write_region(const char *name, uint8_t version, pid_t pid,
                         bool held, size_t len)
{
    char path[160], image[4096] = {0};
    struct head h = {.version = version, .pid = pid};
    int lock = held ? !ferry__spin_free_value() : ferry__spin_free_value();
    int fd;

    /* Written as a value: the lock is no lock of this process's. */
    memcpy((void *)&h.lock, &lock, sizeof(lock));
    memcpy(image, &h, sizeof(h));
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    ck_assert_int_ge(fd, 0);
    len = len == 0 ? sizeof(image) : len;
    ck_assert_int_eq(write(fd, image, len), (ssize_t)len);
    close(fd);
}

/* Whether the lock in file name is held (its head read back). */
static bool held(const char *name)
{
    char path[160];
    struct head h;
    int lock, fd;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    fd = open(path, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(read(fd, &h, sizeof(h)), (ssize_t)sizeof(h));
    close(fd);
    memcpy(&lock, (const void *)&h.lock, sizeof(lock));
    return lock != ferry__spin_free_value();
}

static void name_of(char *out, size_t cap, pid_t pid, const char *tail)
{
    snprintf(out, cap, "ferry_%d_%s", (int)pid, tail);
}

START_TEST(test_dead_owners_held_lock_is_released)
{
    pid_t dead = dead_pid();
    char a[64], b[64];

    make_dir();
    name_of(a, sizeof(a), dead, "17a_0");
    name_of(b, sizeof(b), dead, "17a_1");
    write_region(a, 4, dead, true, 0);
    write_region(b, 4, dead, true, 0);
    ck_assert_uint_eq(ferry__shm_guard_release(dir, dead), 2);
    ck_assert(!held(a));
    ck_assert(!held(b));
    /* Released already: nothing more to do. */
    ck_assert_uint_eq(ferry__shm_guard_release(dir, dead), 0);
    remove_dir();
}
END_TEST

START_TEST(test_left_alone)
{
    pid_t dead = dead_pid(), other = dead_pid();
    char free_lock[64], v5[64], not_its[64], longer_pid[64], cut[64],
        live[64];

    make_dir();
    name_of(free_lock, sizeof(free_lock), dead, "free_0");
    write_region(free_lock, 4, dead, false, 0);
    /* libfabric 1.19 on: another layout, where no lock is at that place. */
    name_of(v5, sizeof(v5), dead, "v5_0");
    write_region(v5, 5, dead, true, 0);
    /* The name says dead, the head another process. */
    name_of(not_its, sizeof(not_its), dead, "other_0");
    write_region(not_its, 4, other, true, 0);
    /* Another process whose id begins with dead's. */
    snprintf(longer_pid, sizeof(longer_pid), "ferry_%d9_x_0", (int)dead);
    write_region(longer_pid, 4, dead, true, 0);
    name_of(cut, sizeof(cut), dead, "cut_0");
    write_region(cut, 4, dead, true, 8);
    ck_assert_uint_eq(ferry__shm_guard_release(dir, dead), 0);
    ck_assert(held(v5));
    ck_assert(held(not_its));
    ck_assert(held(longer_pid));
    /* A live owner: this process. */
    name_of(live, sizeof(live), getpid(), "live_0");
    write_region(live, 4, getpid(), true, 0);
    ck_assert_uint_eq(ferry__shm_guard_release(dir, getpid()), 0);
    ck_assert(held(live));
    remove_dir();
}
END_TEST

static Suite *shm_guard_suite(void)
{
    Suite *s = suite_create("shm_guard");
    TCase *tc = tu_tcase(s, "release", 30);

    tcase_add_test(tc, test_dead_owners_held_lock_is_released);
    tcase_add_test(tc, test_left_alone);
    return s;
}

int main(void)
{
    return tu_run(shm_guard_suite());
}
