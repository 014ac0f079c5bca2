/*
 * The guard of dead shm peers' region locks (fabric/shm_guard.h).
 *
 * What it releases and what it leaves alone, on region files made here
 * in a directory of their own: a lock a dead process holds in its region
 * of libfabric 1.17's layout is released; a free lock, a live owner,
 * another layout, a region whose head names another owner, a file too
 * short to hold a head, one gone and one not named after the dead one
 * are left as they are.  The regions taken from a peer's shm addresses.
 * Which process owns a pulse table, from a maps file as /proc writes
 * them.  (A real peer killed holding its lock: check_progress.)
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

/* Lists name among owner's regions, writing it as write_region does. */
static const char *region(struct ferry__shm_owner *owner, const char *tail,
                          uint8_t version, pid_t head_pid, bool locked,
                          size_t len)
{
    char *name = owner->regions[owner->nregions++];

    snprintf(name, FERRY__GUARD_NAME_MAX, "ferry_%d_%s", (int)owner->pid,
             tail);
    write_region(name, version, head_pid, locked, len);
    return name;
}

START_TEST(test_dead_owners_held_lock_is_released)
{
    struct ferry__shm_owner dead = {.pid = dead_pid()};
    const char *a, *b;

    make_dir();
    a = region(&dead, "17a_0", 4, dead.pid, true, 0);
    b = region(&dead, "17a_1", 4, dead.pid, true, 0);
    ck_assert_uint_eq(ferry__shm_guard_release(dir, &dead), 2);
    ck_assert(!held(a));
    ck_assert(!held(b));
    /* Released already: nothing more to do. */
    ck_assert_uint_eq(ferry__shm_guard_release(dir, &dead), 0);
    remove_dir();
}
END_TEST

START_TEST(test_left_alone)
{
    struct ferry__shm_owner dead = {.pid = dead_pid()};
    struct ferry__shm_owner live = {.pid = getpid()};
    const char *v5, *not_its, *mine;
    char elsewhere[FERRY__GUARD_NAME_MAX];

    make_dir();
    region(&dead, "free_0", 4, dead.pid, false, 0);
    /* libfabric 1.19 on: another layout, where no lock is at that place. */
    v5 = region(&dead, "v5_0", 5, dead.pid, true, 0);
    /* The name says dead, the head another process. */
    not_its = region(&dead, "other_0", 4, dead_pid(), true, 0);
    /* Too short to hold a head. */
    region(&dead, "cut_0", 4, dead.pid, true, 8);
    /* Listed, but gone from the directory. */
    snprintf(dead.regions[dead.nregions++], FERRY__GUARD_NAME_MAX,
             "ferry_%d_gone_0", (int)dead.pid);
    /* Its head names dead, but its name another process (a peer's
     * address may name any file). */
    snprintf(elsewhere, sizeof(elsewhere), "ferry_%d_x_0", (int)getpid());
    write_region(elsewhere, 4, dead.pid, true, 0);
    strcpy(dead.regions[dead.nregions++], elsewhere);
    ck_assert_uint_eq(ferry__shm_guard_release(dir, &dead), 0);
    ck_assert(held(v5));
    ck_assert(held(not_its));
    ck_assert(held(elsewhere));
    /* A live owner: this process. */
    mine = region(&live, "live_0", 4, live.pid, true, 0);
    ck_assert_uint_eq(ferry__shm_guard_release(dir, &live), 0);
    ck_assert(held(mine));
    remove_dir();
}
END_TEST

/* The regions taken from a peer's addresses: the endpoint name of each
 * once, with the scheme or bare; what is no name of /dev/shm is not. */
START_TEST(test_regions_from_addresses)
{
    struct ferry__shm_owner owner = {0};
    char longest[FERRY__GUARD_NAME_MAX + 8];
    const char *a = "fi_shm://ferry_4242_2abf_0", *b = "ferry_4242_2abf_1";

    ferry__shm_owner_add(&owner, a, strlen(a));
    ferry__shm_owner_add(&owner, b, strlen(b) + 1); /* with its NUL */
    ferry__shm_owner_add(&owner, a, strlen(a));      /* listed already */
    ferry__shm_owner_add(&owner, "fi_shm://../etc/x", 17);
    ferry__shm_owner_add(&owner, "", 0);
    ferry__shm_owner_add(&owner, NULL, 4);
    memset(longest, 'f', sizeof(longest) - 1);
    longest[sizeof(longest) - 1] = '\0';
    ferry__shm_owner_add(&owner, longest, strlen(longest));
    ck_assert_uint_eq(owner.nregions, 2);
    ck_assert_str_eq(owner.regions[0], "ferry_4242_2abf_0");
    ck_assert_str_eq(owner.regions[1], "ferry_4242_2abf_1");
    /* No more than a peer has rails. */
    for (unsigned i = 0; i < 2 * FERRY__GUARD_REGIONS; i++) {
        char name[32];

        snprintf(name, sizeof(name), "ferry_4242_many_%u", i);
        ferry__shm_owner_add(&owner, name, strlen(name));
    }
    ck_assert_uint_eq(owner.nregions, FERRY__GUARD_REGIONS);
}
END_TEST

/* A maps file of a process: its pulse table "aa" for writing, another
 * context's table "bb" only for reading, and what else a process maps. */
static void map_line(FILE *f, const char *perms, const char *path)
{
    fprintf(f, "7f0000000000-7f0000010000 %s 00000000 00:1a 42"
               "                         %s\n",
            perms, path);
}

static void write_maps(const char *path)
{
    FILE *f = fopen(path, "w");

    ck_assert_ptr_nonnull(f);
    map_line(f, "rw-s", "/dev/shm/ferry_4242_a_0");
    map_line(f, "rw-s", "/dev/shm/ferry-pulse-00000000000000aa");
    map_line(f, "r--s", "/dev/shm/ferry-pulse-00000000000000bb");
    /* Elsewhere than /dev/shm. */
    map_line(f, "rw-s", "/tmp/ferry-pulse-00000000000000cc");
    fprintf(f, "7f0000020000-7f0000030000 rw-p 00000000 00:00 0 [heap]\n");
    fclose(f);
}

START_TEST(test_owner_from_maps)
{
    char maps[96];

    make_dir();
    snprintf(maps, sizeof(maps), "%s/maps", dir);
    write_maps(maps);
    ck_assert(ferry__shm_guard_owns(maps, "/ferry-pulse-00000000000000aa"));
    /* A table it maps only for reading is another context's: pid is not
     * its owner (another pid namespace's process has that number). */
    ck_assert(!ferry__shm_guard_owns(maps, "/ferry-pulse-00000000000000bb"));
    ck_assert(!ferry__shm_guard_owns(maps, "/ferry-pulse-00000000000000cc"));
    ck_assert(!ferry__shm_guard_owns(maps, "/ferry-pulse-00000000000000dd"));
    snprintf(maps, sizeof(maps), "%s/none", dir);
    ck_assert(!ferry__shm_guard_owns(maps, "/ferry-pulse-00000000000000aa"));
    remove_dir();
}
END_TEST

static Suite *shm_guard_suite(void)
{
    Suite *s = suite_create("shm_guard");
    TCase *tc = tu_tcase(s, "release", 30);

    tcase_add_test(tc, test_dead_owners_held_lock_is_released);
    tcase_add_test(tc, test_left_alone);
    tc = tu_tcase(s, "owner", 30);
    tcase_add_test(tc, test_regions_from_addresses);
    tcase_add_test(tc, test_owner_from_maps);
    return s;
}

int main(void)
{
    return tu_run(shm_guard_suite());
}
