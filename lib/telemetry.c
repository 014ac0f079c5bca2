/*
 * Telemetry snapshots: with config.telemetry_dir (FERRY_TELEMETRY=DIR), a
 * context writes its metrics (ferry_metrics_text) every
 * config.telemetry_interval_ms to DIR/ferry-PID-N.prom, N its number
 * within the process, so that ferry_stat(1) can show and serve every
 * ferry process of a host without touching the applications.
 *
 * A snapshot is written to a hidden temporary name and renamed into
 * place: a reader never sees half of one.  Its first lines say whose it
 * is, so that a reader can tell a dead process's left-over snapshot from
 * a live one (the pid alone could have been reused):
 *
 *   # ferry telemetry 1
 *   # pid 12345
 *   # starttime 987654        field 22 of /proc/PID/stat
 *   # context 1
 *   # pidns 4026531836        the inode of /proc/self/ns/pid
 *   # interval 1000           milliseconds between two snapshots
 *   # written 1764321234.567  CLOCK_REALTIME seconds
 *   # program /usr/bin/app
 *
 * then the exposition text (pidns 0: unknown).  A reader in another pid
 * namespace (a sidecar container sharing DIR) cannot ask after the pid:
 * it goes by how recently the file was rewritten.  The context removes
 * its file when it closes.  A thread of its own writes, so a busy
 * progress loop is never delayed by the file system.
 */
#include "telemetry.h"

#include "base/ferry-internal.h"
#include "base/proc.h"
#include "progress/part.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct ferry__telemetry {
    ferry_context_t *ctx;
    char path[4096], tmp[4096];
    char header[256];   /* the lines before "# written" */
    char program[4200]; /* the line after it */
    unsigned interval_ms;
    char *text; /* the last text, grown as needed */
    size_t cap;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    bool stop;
    bool failed_once; /* a write failure is said once, not every second */
};

/* Contexts this process made with telemetry: each one's N. */
static atomic_uint next_number = 1;

/*
 * The temporary file, made anew for each snapshot.  DIR may be shared by
 * every user's processes (/run/ferry): a name planted there -- a symbolic
 * link to a file of this user's, a file of another user's -- must never
 * be written through.  So whatever holds the name goes first, and the
 * file is created exclusively (O_EXCL never follows a link); if another
 * user's file holds the name and cannot be removed, this snapshot fails
 * and is said.  0644: ferry_stat of another user reads it, nobody else
 * may change it.  NULL with errno on failure.
 */
static FILE *create_temporary(const char *tmp)
{
    int fd;
    FILE *f;

    unlink(tmp);
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return NULL;
    if ((f = fdopen(fd, "w")) == NULL)
        close(fd);
    return f;
}

/* Writes the snapshot once: header, time, text; renamed into place. */
static void write_snapshot(struct ferry__telemetry *t)
{
    struct timespec now;
    size_t need = 0;
    FILE *f;
    int ret;

    while ((ret = ferry_metrics_text(t->ctx, t->text, t->cap, &need)) ==
           FERRY_ENOSPC) {
        char *more = realloc(t->text, need + 4096);

        if (more == NULL)
            return;
        t->text = more;
        t->cap = need + 4096;
    }
    if (ret != 0)
        return;
    clock_gettime(CLOCK_REALTIME, &now);
    f = create_temporary(t->tmp);
    if (f != NULL) {
        fprintf(f, "%s# written %lld.%03ld\n%s", t->header,
                (long long)now.tv_sec, now.tv_nsec / 1000000, t->program);
        fputs(t->text, f);
        ret = ferror(f);
        if (fclose(f) != 0 || ret != 0 || rename(t->tmp, t->path) != 0)
            f = NULL;
    }
    if (f == NULL && !t->failed_once) {
        FERRY_LOG_WARN("telemetry: cannot write %s: %s; the context goes "
                       "on without it",
                       t->path, strerror(errno));
        t->failed_once = true;
        unlink(t->tmp);
    }
}

static void *telemetry_main(void *arg)
{
    struct ferry__telemetry *t = arg;

    pthread_mutex_lock(&t->lock);
    while (!t->stop) {
        struct timespec until = ferry__realtime_after((int)t->interval_ms);

        pthread_mutex_unlock(&t->lock);
        write_snapshot(t);
        pthread_mutex_lock(&t->lock);
        while (!t->stop &&
               pthread_cond_timedwait(&t->wake, &t->lock, &until) == 0)
            ;
    }
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

/* DIR itself, made when it is missing (its parent must exist). */
static int check_dir(const char *dir)
{
    struct stat st;

    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return ferry__error(FERRY_EINVAL, "config.telemetry_dir \"%s\" "
                            "(FERRY_TELEMETRY) cannot be made: %s",
                            dir, strerror(errno));
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) ||
        access(dir, W_OK | X_OK) != 0)
        return ferry__error(FERRY_EINVAL, "config.telemetry_dir \"%s\" "
                            "(FERRY_TELEMETRY) is not a directory this "
                            "process can write into",
                            dir);
    return 0;
}

int ferry__telemetry_start(ferry_context_t *ctx, const char *dir,
                           unsigned interval_ms)
{
    struct ferry__telemetry *t;
    char program[4096];
    unsigned long long start = 0;
    ssize_t n;
    unsigned number;
    int ret;

    if (dir == NULL || dir[0] == '\0')
        return 0;
    if ((ret = check_dir(dir)) != 0)
        return ret;
    if (interval_ms < 100)
        return ferry__error(FERRY_EINVAL, "config.telemetry_interval_ms is "
                            "%u; use 100 ms or more",
                            interval_ms);
    if ((t = calloc(1, sizeof(*t))) == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory for telemetry");
    number = atomic_fetch_add_explicit(&next_number, 1, memory_order_relaxed);
    t->ctx = ctx;
    t->interval_ms = interval_ms;
    snprintf(t->path, sizeof(t->path), "%.3900s/ferry-%ld-%u.prom", dir,
             (long)getpid(), number);
    snprintf(t->tmp, sizeof(t->tmp), "%.3900s/.ferry-%ld-%u.prom.tmp", dir,
             (long)getpid(), number);
    n = readlink("/proc/self/exe", program, sizeof(program) - 1);
    program[n > 0 ? n : 0] = '\0';
    ferry__proc_start_time(0, &start); /* 0 when unreadable */
    snprintf(t->header, sizeof(t->header),
             "# ferry telemetry 1\n# pid %ld\n# starttime %llu\n"
             "# context %u\n# pidns %llu\n# interval %u\n",
             (long)getpid(), start, number, ferry__proc_pid_namespace(),
             interval_ms);
    snprintf(t->program, sizeof(t->program), "# program %s\n", program);
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->wake, NULL);
    if (pthread_create(&t->thread, NULL, telemetry_main, t) != 0) {
        pthread_cond_destroy(&t->wake);
        pthread_mutex_destroy(&t->lock);
        free(t);
        return ferry__error(FERRY_ENOMEM, "telemetry: cannot start its "
                            "thread");
    }
    ctx->telemetry = t;
    return 0;
}

void ferry__telemetry_stop(ferry_context_t *ctx)
{
    struct ferry__telemetry *t = ctx->telemetry;

    if (t == NULL)
        return;
    pthread_mutex_lock(&t->lock);
    t->stop = true;
    pthread_cond_signal(&t->wake);
    pthread_mutex_unlock(&t->lock);
    pthread_join(t->thread, NULL);
    /* The process goes on without this context: no snapshot of it may
     * stay to be read as live. */
    unlink(t->path);
    unlink(t->tmp);
    pthread_cond_destroy(&t->wake);
    pthread_mutex_destroy(&t->lock);
    free(t->text);
    free(t);
    ctx->telemetry = NULL;
}
