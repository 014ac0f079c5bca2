/*
 * ferry_stat: the snapshots of a directory, and which are live.
 *
 * A snapshot's pid alone cannot say it: after its process died, the pid
 * may have been given to another.  So the start time its writer put in
 * the header is compared with the running process's.
 */
#include "scan.h"

#include "util.h"

#include "base/proc.h"
#include "base/text.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Whether name is PREFIX PID-N SUFFIX, with its PID and N. */
static bool named(const char *name, const char *prefix, const char *suffix,
                  long *pid, unsigned long *n)
{
    size_t len = strlen(prefix);
    char *end;

    if (strncmp(name, prefix, len) != 0 || name[len] < '0' ||
        name[len] > '9')
        return false;
    *pid = strtol(name + len, &end, 10);
    if (end[0] != '-' || end[1] < '0' || end[1] > '9')
        return false;
    *n = strtoul(end + 1, &end, 10);
    return strcmp(end, suffix) == 0;
}

/* A snapshot is ferry-PID-N.prom; its writer's temporary file before the
 * rename .ferry-PID-N.prom.tmp (lib/telemetry.c). */
static bool snapshot_name(const char *name, long *pid, unsigned long *n)
{
    return named(name, "ferry-", ".prom", pid, n);
}

static bool temporary_name(const char *name, long *pid, unsigned long *n)
{
    return named(name, ".ferry-", ".prom.tmp", pid, n);
}

/*
 * Whether the process pid runs as uid: its real, effective, saved or
 * file-system uid (the "Uid:" line of /proc/PID/status, which, unlike the
 * owner of /proc/PID, a process that changed its uid does not hide).
 * *real is its real uid.  False too when the line cannot be read.
 */
static bool runs_as(pid_t pid, uid_t uid, uid_t *real)
{
    char path[64], line[256];
    unsigned long ids[4];
    bool found = false, runs = false;
    FILE *f;

    *real = (uid_t)-1;
    snprintf(path, sizeof(path), "/proc/%ld/status", (long)pid);
    if ((f = fopen(path, "re")) == NULL)
        return false;
    while (!found && fgets(line, sizeof(line), f) != NULL)
        found = sscanf(line, "Uid: %lu %lu %lu %lu", &ids[0], &ids[1],
                       &ids[2], &ids[3]) == 4;
    fclose(f);
    for (int i = 0; found && i < 4; i++)
        runs = runs || ids[i] == (unsigned long)uid;
    if (found)
        *real = (uid_t)ids[0];
    return runs;
}

bool scan_problem(struct scan *sc, const char *fmt, ...)
{
    char **more = grow(sc->problems, &sc->cap_problems, sc->nproblems,
                       sizeof(*more));
    va_list ap;
    int n;

    if (more == NULL)
        return false;
    sc->problems = more;
    va_start(ap, fmt);
    n = vasprintf(&more[sc->nproblems], fmt, ap);
    va_end(ap);
    if (n < 0)
        return false;
    /* A problem may quote the file's text. */
    ferry__text_printable(more[sc->nproblems]);
    sc->nproblems++;
    return true;
}

/* Removes a stale file; whether it is gone (a failure is a problem). */
static bool remove_stale(struct scan *sc, const char *path)
{
    if (unlink(path) == 0 || errno == ENOENT)
        return true;
    scan_problem(sc, "cannot remove the stale %s: %s", path,
                 strerror(errno));
    return false;
}

/*
 * Whether s was written by a process of another pid namespace that
 * shares the directory (a metrics sidecar in its own container): its
 * pid names no process here, or another one.
 */
static bool elsewhere(const struct snapshot *s)
{
    static unsigned long long ours;

    if (ours == 0)
        ours = ferry__proc_pid_namespace();
    return s->pidns != 0 && ours != 0 && s->pidns != ours;
}

/*
 * Live or stale; a stale one removed with clean.  Here a process is
 * asked by its pid and start time.  One of another pid namespace cannot
 * be: it is live while it rewrites its file, within STALE_INTERVALS of
 * its interval and STALE_SLACK_S; --clean removes its file only once
 * unchanged for GONE_AFTER_S, so that a writer held up for a while is
 * not taken for dead.
 */
#define STALE_INTERVALS 3
#define STALE_SLACK_S 2.0
#define GONE_AFTER_S 600.0
static void judge(struct scan *sc, struct snapshot *s, bool clean)
{
    unsigned long long start;

    if (elsewhere(s)) {
        double age = now_s() - s->written;
        double interval = (s->interval_ms ? s->interval_ms : 1000) / 1e3;

        s->live = age <= STALE_INTERVALS * interval + STALE_SLACK_S;
        clean = clean && age > GONE_AFTER_S;
    } else {
        s->live = ferry__proc_start_time(s->pid, &start) && start == s->starttime;
    }
    if (!s->live && clean)
        s->removed = remove_stale(sc, s->path);
}

/*
 * The directory entry `name`, when a writer's temporary file that its
 * process left when it died between writing and renaming: removed.  It
 * has no header to tell a reused pid apart, so only one whose pid no
 * process has goes; nor one to tell another pid namespace's, whose
 * writer lives and renames it within milliseconds: only one unchanged
 * for TEMPORARY_GONE_AFTER_S goes.
 */
#define TEMPORARY_GONE_AFTER_S 60
static void clean_temporary(struct scan *sc, const char *name)
{
    unsigned long long start;
    char path[4096];
    unsigned long n;
    struct stat st;
    long pid;

    if (!temporary_name(name, &pid, &n) || ferry__proc_start_time((pid_t)pid, &start))
        return;
    snprintf(path, sizeof(path), "%s/%s", sc->dir, name);
    if (lstat(path, &st) == 0 &&
        now_s() - (double)st.st_mtime >= TEMPORARY_GONE_AFTER_S)
        remove_stale(sc, path);
}

/* Frees s, not added to sc for the reason why (said): 0, or -ENOMEM. */
static int left_aside(struct scan *sc, struct snapshot *s, const char *why)
{
    snap_free(s);
    return scan_problem(sc, "%s", why) ? 0 : -ENOMEM;
}

/* The directory entry `name`, when a snapshot: 0 or -ENOMEM. */
static int add_snapshot(struct scan *sc, const char *name, bool clean)
{
    char path[4096], err[4400];
    struct snapshot *s, **more;
    unsigned long n;
    uid_t real;
    long pid;
    int ret;

    if (!snapshot_name(name, &pid, &n))
        return 0;
    snprintf(path, sizeof(path), "%s/%s", sc->dir, name);
    ret = snap_load(path, &s, err, sizeof(err));
    if (ret == -ENOENT) /* its context closed since readdir */
        return 0;
    if (ret != 0)
        return ret != -ENOMEM && scan_problem(sc, "%s", err) ? 0 : -ENOMEM;
    if (s->pid != pid || s->context != n) {
        snprintf(err, sizeof(err), "%s: its header says pid %ld, context "
                                   "%u: not those of its name",
                 path, (long)s->pid, s->context);
        return left_aside(sc, s, err);
    }
    judge(sc, s, clean);
    if (s->live && !elsewhere(s) && !runs_as(s->pid, s->owner, &real)) {
        /* Anyone can read a live process's pid and start time: another
         * user's file naming them is not that process's snapshot. */
        snprintf(err, sizeof(err), "%s: owned by uid %lu, but process %ld "
                                   "runs as uid %ld: not its snapshot, left "
                                   "aside",
                 path, (unsigned long)s->owner, (long)s->pid,
                 real == (uid_t)-1 ? -1L : (long)real);
        return left_aside(sc, s, err);
    }
    if ((more = grow(sc->snaps, &sc->cap_snaps, sc->nsnaps,
                     sizeof(*more))) == NULL) {
        snap_free(s);
        return -ENOMEM;
    }
    sc->snaps = more;
    more[sc->nsnaps++] = s;
    return 0;
}

static int by_pid(const void *a, const void *b)
{
    const struct snapshot *x = *(struct snapshot *const *)a;
    const struct snapshot *y = *(struct snapshot *const *)b;

    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    return x->context < y->context ? -1 : x->context > y->context;
}

int scan_dir(const char *dir, bool clean, struct scan *sc, char *err,
             size_t errlen)
{
    struct dirent *e;
    DIR *d;
    int ret = 0;

    *sc = (struct scan){.dir = dir};
    if ((d = opendir(dir)) == NULL) {
        ret = -errno;
        snprintf(err, errlen, "cannot read the directory %s: %s", dir,
                 strerror(errno));
        return ret;
    }
    while (ret == 0 && (e = readdir(d)) != NULL) {
        if (clean)
            clean_temporary(sc, e->d_name);
        ret = add_snapshot(sc, e->d_name, clean);
    }
    closedir(d);
    if (ret != 0) {
        snprintf(err, errlen, "reading %s: out of memory", dir);
        return ret;
    }
    if (sc->nsnaps > 1)
        qsort(sc->snaps, sc->nsnaps, sizeof(*sc->snaps), by_pid);
    return 0;
}

void scan_free(struct scan *sc)
{
    for (size_t i = 0; i < sc->nsnaps; i++)
        snap_free(sc->snaps[i]);
    for (size_t i = 0; i < sc->nproblems; i++)
        free(sc->problems[i]);
    free(sc->snaps);
    free(sc->problems);
    *sc = (struct scan){.dir = sc->dir};
}

static bool same_context(const struct snapshot *a, const struct snapshot *b)
{
    return a->pid == b->pid && a->starttime == b->starttime &&
           a->context == b->context;
}

void scan_take_bases(struct scan *now, struct scan *before)
{
    for (size_t i = 0; i < now->nsnaps; i++) {
        struct snapshot *s = now->snaps[i];

        for (size_t j = 0; j < before->nsnaps; j++) {
            struct snapshot *b = before->snaps[j];

            if (b == NULL || !same_context(s, b))
                continue;
            if (b->written < s->written) {
                /* b is the version before s: only it is kept. */
                snap_free(b->base);
                b->base = NULL;
                s->base = b;
                before->snaps[j] = NULL;
            } else if (b->written == s->written) {
                s->base = b->base;
                b->base = NULL;
            }
            break;
        }
    }
}
