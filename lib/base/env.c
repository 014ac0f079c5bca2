/*
 * Process environment that must be right before libfabric first reads it,
 * and the clock.
 *
 * libfabric's own registration caches deadlock with malloc/madvise hooks
 * (libfabric #10879, #9594, #5554).  ferry keeps its own cache, so it turns
 * libfabric's off before its first libfabric call: libfabric reads these
 * variables once, when it initialises (ofi_monitors_init, from fi_ini).
 * It does so by stopping the monitors (memhooks or userfaultfd for host
 * memory, the CUDA one for device memory) and efa's cache, not by setting
 * FI_MR_CACHE_MAX_COUNT=0: that count also sizes the cache of GPU IPC
 * handles, which hooks nothing, and shm with CUDA (libfabric >= 1.18 built
 * with it) refuses to open a domain without it (fi_domain: ENOSPC, seen on
 * an H200 with libfabric 2.1).
 * A value the user set is left alone, and FERRY_KEEP_FI_MR_CACHE=1 makes
 * ferry set none of them.  The environment is the process's, so this also
 * turns the cache off for any other libfabric user in it; that is why the
 * opt-out exists, and why it is a variable and not a config field: the
 * choice is made once per process, possibly before any config is seen.
 */
#include "base/env.h"

#include "base/defs.h"
#include "base/error.h"
#include "base/log.h"
#include "base/text.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KEEP_VAR "FERRY_KEEP_FI_MR_CACHE"

static pthread_once_t env_once = PTHREAD_ONCE_INIT;
/* Written once, inside env_once; read only after it. */
static bool user_set_mr_cache;
static enum ferry_fi_mr_cache mr_cache_state;
static char mr_cache_status[512];

/* Each variable, and the value that turns its part of the cache off. */
static const struct {
    const char *name, *off;
} mr_cache_vars[] = {
    {"FI_MR_CACHE_MONITOR", "disabled"}, /* host memory: verbs, rxm, ... */
    {"FI_MR_CUDA_CACHE_MONITOR_ENABLED", "0"}, /* device memory */
    {"FI_EFA_MR_CACHE_ENABLE", "0"},           /* efa's own switch */
};

/* FERRY_KEEP_FI_MR_CACHE: 1 to keep, 0 when unset or "0", -1 otherwise. */
static int parse_keep(const char *v)
{
    if (v == NULL || strcmp(v, "0") == 0)
        return 0;
    if (strcmp(v, "1") == 0)
        return 1;
    return -1;
}

static void prepare(void)
{
    const char *keep_v = getenv(KEEP_VAR);
    int keep = parse_keep(keep_v);
    /* Each variable's fate, listed for the sentence. */
    char user[256] = "", set[160] = "", unset[160] = "";

    if (keep < 0)
        /* ferry_config_init refuses the value; this is the path of a
         * process that reaches libfabric without it (a probe with a config
         * made before the variable was set, or the query functions). */
        FERRY_LOG_WARN("%s=%.64s is neither 1 (leave libfabric's MR cache "
                       "on) nor 0 (let ferry turn it off): ignored, ferry "
                       "turns it off",
                       KEEP_VAR, keep_v);
    for (size_t i = 0; i < FERRY__ARRAY_LEN(mr_cache_vars); i++) {
        const char *name = mr_cache_vars[i].name, *v = getenv(name);

        if (v != NULL) {
            user_set_mr_cache = true;
            ferry__appendf(user, sizeof(user), "%s%s=%.64s", *user ? ", " : "",
                   name, v);
        } else if (keep > 0) {
            ferry__appendf(unset, sizeof(unset), "%s%s", *unset ? " and " : "",
                   name);
        } else {
            /* setenv is not thread-safe against getenv; this runs once,
             * before any libfabric call of ours, inside pthread_once. */
            setenv(name, mr_cache_vars[i].off, 0);
            ferry__appendf(set, sizeof(set), "%s%s=%s", *set ? ", " : "",
                           name, mr_cache_vars[i].off);
        }
    }
    if (user_set_mr_cache) {
        mr_cache_state = FERRY_FI_MR_CACHE_USER;
        ferry__appendf(mr_cache_status, sizeof(mr_cache_status),
               "libfabric's MR cache left as the user set it (%s)", user);
        if (*set)
            ferry__appendf(mr_cache_status, sizeof(mr_cache_status),
                   "; ferry set %s", set);
        if (*unset)
            ferry__appendf(mr_cache_status, sizeof(mr_cache_status),
                   "; %s left unset because %s=1", unset, KEEP_VAR);
    } else if (keep > 0) {
        mr_cache_state = FERRY_FI_MR_CACHE_KEPT;
        ferry__appendf(mr_cache_status, sizeof(mr_cache_status),
               "libfabric's MR cache left on because %s=1 (%s unset: "
               "libfabric's defaults)",
               KEEP_VAR, unset);
    } else {
        mr_cache_state = FERRY_FI_MR_CACHE_OFF;
        ferry__appendf(mr_cache_status, sizeof(mr_cache_status),
               "ferry turned libfabric's MR cache off for this process "
               "(%s); ",
               set);
        if (keep < 0)
            ferry__appendf(mr_cache_status, sizeof(mr_cache_status),
                   "%s=%.64s was ignored: 1 would leave it on", KEEP_VAR,
                   keep_v);
        else
            ferry__appendf(mr_cache_status, sizeof(mr_cache_status),
                   "%s=1 leaves it on", KEEP_VAR);
    }
    FERRY_LOG_INFO("%s", mr_cache_status);
}

void ferry__env_prepare(void)
{
    pthread_once(&env_once, prepare);
}

bool ferry__env_user_set_mr_cache(void)
{
    ferry__env_prepare();
    return user_set_mr_cache;
}

int ferry__env_check_keep_fi_mr_cache(void)
{
    const char *v = getenv(KEEP_VAR);

    if (parse_keep(v) < 0)
        return ferry__error(FERRY_EINVAL,
                            "%s=%s is neither 1 (leave libfabric's MR cache "
                            "on for the whole process) nor 0 (let ferry turn "
                            "it off, the default)",
                            KEEP_VAR, v);
    return 0;
}

enum ferry_fi_mr_cache ferry_fi_mr_cache_state(void)
{
    ferry__env_prepare();
    return mr_cache_state;
}

const char *ferry_fi_mr_cache_status(void)
{
    ferry__env_prepare();
    return mr_cache_status;
}

static uint64_t clock_ns(clockid_t clock)
{
    struct timespec ts;

    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t ferry__now_ns(void)
{
    return clock_ns(CLOCK_MONOTONIC);
}

struct timespec ferry__realtime_after_ns(uint64_t ns)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)(ns / 1000000000u);
    ts.tv_nsec += (long)(ns % 1000000000u);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

struct timespec ferry__realtime_after(uint64_t ms)
{
    return ferry__realtime_after_ns(ms * 1000000u);
}

uint64_t ferry__now_coarse_ns(void)
{
    return clock_ns(CLOCK_MONOTONIC_COARSE);
}
