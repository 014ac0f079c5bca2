/*
 * Stacks of a hung test before Check kills it (watchdog.h).
 *
 * Check's timeout SIGKILLs the test's process and reports the last
 * assertion passed, nothing more: a hang seen once in a CI run leaves no
 * trace of where it was.  Armed by a checked fixture, in the forked
 * child that runs the test, a thread sleeps until shortly before the
 * timeout and then has gdb print every thread's stack of the test and of
 * its children (the targets it forked) into the test's log.
 */
#include "watchdog.h"
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* Stacks this long before the timeout (a tenth of it, within bounds):
 * time for gdb to attach to a few processes. */
#define LEAD_MIN_S 3.0
#define LEAD_MAX_S 20.0

/* Filled by tu_watchdog_add in the parent, before Check forks: the test
 * cases' names and timeouts, one slot each. */
#define SLOTS 32
static struct {
    const char *name;
    int timeout_s;
} tcases[SLOTS];
static size_t ntcases;

/* Check multiplies every timeout by CK_TIMEOUT_MULTIPLIER. */
static double timeout_multiplier(void)
{
    const char *s = getenv("CK_TIMEOUT_MULTIPLIER");
    double m = s != NULL ? strtod(s, NULL) : 1.0;

    return m > 0 ? m : 1.0;
}

static void print_stacks(pid_t pid)
{
    char pid_s[16];
    char *argv[] = {"gdb", "-batch", "-nx", "-p", pid_s,
                    "-ex", "thread apply all bt 40", NULL};
    pid_t gdb;
    int err;

    snprintf(pid_s, sizeof(pid_s), "%d", (int)pid);
    fprintf(stderr, "watchdog: stacks of process %d:\n", (int)pid);
    /* gdb's output goes where the test's does: its log. */
    err = posix_spawnp(&gdb, "gdb", NULL, NULL, argv, environ);
    if (err != 0) {
        fprintf(stderr, "watchdog: cannot run gdb (%s); install it to see "
                        "where a hung test is\n",
                strerror(err));
        return;
    }
    while (waitpid(gdb, NULL, 0) < 0 && errno == EINTR)
        ;
}

/* The test's children, from /proc/self/task/N/children. */
static void print_children_stacks(void)
{
    DIR *tasks = opendir("/proc/self/task");
    struct dirent *t;

    while (tasks != NULL && (t = readdir(tasks)) != NULL) {
        char path[300];
        FILE *f;
        int child;

        if (t->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/self/task/%s/children",
                 t->d_name);
        if ((f = fopen(path, "r")) == NULL)
            continue;
        while (fscanf(f, "%d", &child) == 1)
            print_stacks((pid_t)child);
        fclose(f);
    }
    if (tasks != NULL)
        closedir(tasks);
}

/* Posted by the thread once it has nothing left to do but sleep. */
static sem_t asleep;

static void *watchdog_main(void *arg)
{
    size_t slot = (size_t)(uintptr_t)arg;
    double at = tcases[slot].timeout_s * timeout_multiplier();
    struct timespec wake;

    at -= at / 10 < LEAD_MIN_S ? LEAD_MIN_S
          : at / 10 > LEAD_MAX_S ? LEAD_MAX_S
                                 : at / 10;
    clock_gettime(CLOCK_MONOTONIC, &wake);
    wake.tv_sec += (time_t)at;
    sem_post(&asleep);
    if (at <= 0)
        return NULL;
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &wake, NULL) ==
           EINTR)
        ;
    fprintf(stderr, "watchdog: test case \"%s\" still running %.0f s in, "
                    "close to its timeout\n",
            tcases[slot].name, at);
    print_stacks(getpid());
    print_children_stacks();
    return NULL;
}

/*
 * The test starts only once the thread sleeps.  A test that forks at once
 * (a target) could otherwise fork while the new thread is still being set
 * up, inside malloc: the child then inherits the allocator's lock held,
 * and hangs at its first allocation (seen under Debian 12's
 * AddressSanitizer, which does not lock its allocator around fork).
 */
static void watchdog_arm(size_t slot)
{
    pthread_attr_t attr;
    pthread_t thread;

    sem_init(&asleep, 0, 0);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&thread, &attr, watchdog_main,
                       (void *)(uintptr_t)slot) != 0)
        fprintf(stderr, "watchdog: cannot start its thread: no stacks if "
                        "this test hangs\n");
    else
        while (sem_wait(&asleep) != 0 && errno == EINTR)
            ;
    pthread_attr_destroy(&attr);
}

/* A Check fixture takes no argument (and tcase_name() names the test, not
 * its case): one function per slot. */
#define ARM(i) \
    static void arm_##i(void) { watchdog_arm(i); }
#define ARM8(i) ARM(i##0) ARM(i##1) ARM(i##2) ARM(i##3) \
    ARM(i##4) ARM(i##5) ARM(i##6) ARM(i##7)
ARM8(0) ARM8(1) ARM8(2) ARM8(3)
#define ARM_NAMES8(i) arm_##i##0, arm_##i##1, arm_##i##2, arm_##i##3, \
    arm_##i##4, arm_##i##5, arm_##i##6, arm_##i##7
static void (*const arms[SLOTS])(void) = {ARM_NAMES8(0), ARM_NAMES8(1),
                                          ARM_NAMES8(2), ARM_NAMES8(3)};

/*
 * Without fork mode the thread would outlive its test.  Under
 * ThreadSanitizer, a thread in the test's process makes every target it
 * forks die when the target starts threads of its own ("starting new
 * threads after multi-threaded fork is not supported").
 */
static bool watchdog_possible(void)
{
#if defined(__SANITIZE_THREAD__) /* as check_rcache.c tests it */
    return false;
#else
    return tu_check_forks();
#endif
}

void tu_watchdog_add(TCase *tc, const char *name, int timeout_s)
{
    if (!watchdog_possible())
        return;
    if (ntcases == SLOTS) {
        fprintf(stderr, "watchdog: more than %d test cases in the suite; "
                        "none for \"%s\"\n", SLOTS, name);
        return;
    }
    tcases[ntcases].name = name;
    tcases[ntcases].timeout_s = timeout_s;
    tcase_add_checked_fixture(tc, arms[ntcases], NULL);
    ntcases++;
}
