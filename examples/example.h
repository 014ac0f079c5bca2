/*
 * What the example programs share: error reporting, sizes with K/M/G, the
 * config of a context for two processes on one host, where peers meet,
 * the progress line of a long transfer, and how a demo starts the other
 * side.  Header-only, so each example is
 * still built from its own file plus this one.
 */
#ifndef FERRY_EXAMPLE_H
#define FERRY_EXAMPLE_H

/* The POSIX calls below (clock_gettime, kill, waitpid...) under a strict
 * -std=c11 as well: each example includes this header first. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <ferry.h>

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Prints "who: what failed: <code> (<ferry's sentence>)"; returns 1. */
static inline int ex_fail(const char *who, const char *what, int err)
{
    fprintf(stderr, "%s: %s failed: %s (%s)\n", who, what, ferry_strerror(err),
            ferry_last_error());
    return 1;
}

/* "64M" -> 67108864; exits with a message when s is not a size. */
static inline size_t ex_parse_size(const char *s)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    unsigned shift = 0;

    switch (*end) {
    case 'K': case 'k': shift = 10; end++; break;
    case 'M': case 'm': shift = 20; end++; break;
    case 'G': case 'g': shift = 30; end++; break;
    default: break;
    }
    if (end == s || *end != '\0' || v == 0 || v > (SIZE_MAX >> shift)) {
        fprintf(stderr, "--size %s: give a positive number of bytes, "
                "optionally with K, M or G\n", s);
        exit(2);
    }
    return (size_t)v << shift;
}

/*
 * The host part of where a program meets its peers, into buf: of
 * "HOST:PORT" or "[V6]:PORT" (":PORT", every address, gives ""), or of a
 * metadata URL ("etcd://HOST:PORT,HOST2:PORT/prefix": its first host).
 */
static inline void ex_host_of(const char *where, char *buf, size_t len)
{
    const char *p = strstr(where, "://");
    size_t n;

    p = p != NULL ? p + 3 : where;
    if (*p == '[') {
        p++;
        n = strcspn(p, "]");
    } else {
        n = strcspn(p, ":,/");
    }
    if (n >= len)
        n = len - 1;
    memcpy(buf, p, n);
    buf[n] = '\0';
}

/*
 * A config for a program that meets its peers at `meet` (see ex_host_of;
 * NULL: a listener on every address).  The provider and domain come from
 * the environment (FERRY_PROVIDER, FERRY_DOMAIN, FI_PROVIDER) like
 * everything else, else ferry chooses by capability.  A meeting point on
 * this host (a loopback address, "localhost") means every peer is here:
 * shared memory becomes a candidate and loopback comes first.  Any other
 * host is where peers are: the context takes the interface that routes
 * there.  A listener on every address leaves it to ferry (the default
 * route's interface).  A target gets a progress thread.
 */
static inline void ex_config(struct ferry_config *cfg, bool target,
                             const char *meet)
{
    char host[256] = "";
    static char peer_host[256];

    ferry_config_init(cfg);
    cfg->progress_thread = target;
    if (meet != NULL)
        ex_host_of(meet, host, sizeof(host));
    if (strncmp(host, "127.", 4) == 0 || strcmp(host, "::1") == 0 ||
        strcmp(host, "localhost") == 0) {
        cfg->local_only = 1;
        if (cfg->peer_host == NULL)
            cfg->peer_host = "127.0.0.1";
    } else if (host[0] != '\0' && cfg->peer_host == NULL) {
        snprintf(peer_host, sizeof(peer_host), "%s", host);
        cfg->peer_host = peer_host;
    }
}

/*
 * The metadata URL a program meets its peers at, into buf: a URL as it is
 * ("etcd://...", "bootstrap://..."), and HOST:PORT as the bootstrap there
 * (bootstrap://HOST:PORT: the first program to open it listens there, the
 * others connect to it).
 */
static inline const char *ex_url(const char *where, char *buf, size_t len)
{
    if (strstr(where, "://") != NULL)
        return where;
    snprintf(buf, len, "bootstrap://%s", where);
    return buf;
}

/*
 * A progress line for a long transfer: on stderr, redrawn in place with
 * '\r' at most four times a second, and only when stderr is a terminal,
 * so that logs and tests see nothing of it.  ex_progress_start, then
 * ex_progress as often as convenient, then ex_progress_end before
 * printing anything else.
 */
struct ex_progress {
    bool on;           /* stderr is a terminal */
    double t0, next;   /* the start; the earliest next redraw */
    int drawn;         /* characters on the terminal now */
};

static inline double ex_clock(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void ex_progress_start(struct ex_progress *p)
{
    p->on = isatty(STDERR_FILENO) == 1;
    p->t0 = ex_clock();
    p->next = 0;
    p->drawn = 0;
}

/* "12.5 MiB", "1.2 GiB" */
static inline const char *ex_bytes(char *buf, size_t len, double v)
{
    if (v >= (double)(1ull << 30))
        snprintf(buf, len, "%.1f GiB", v / (double)(1ull << 30));
    else
        snprintf(buf, len, "%.1f MiB", v / (double)(1u << 20));
    return buf;
}

/*
 * "what: 1.2 GiB of 4.0 GiB, 2.1 GB/s, 1.3 s left": done of total bytes,
 * the rate and the time left at the rate since the start; with total 0
 * (nothing to count) "what: 3.2 s", the time so far.
 */
static inline void ex_progress(struct ex_progress *p, const char *what,
                               double done, double total)
{
    char line[200], b1[32], b2[32];
    double t = ex_clock(), secs = t - p->t0;
    int n;

    if (!p->on || t < p->next)
        return;
    p->next = t + 0.25;
    if (total > 0 && done > 0 && secs > 0)
        n = snprintf(line, sizeof(line),
                     "%s: %s of %s, %.2f GB/s, %.1f s left", what,
                     ex_bytes(b1, sizeof(b1), done),
                     ex_bytes(b2, sizeof(b2), total), done / secs / 1e9,
                     (total - done) / (done / secs));
    else
        n = snprintf(line, sizeof(line), "%s: %.1f s", what, secs);
    if (n < 0)
        return;
    if (n >= (int)sizeof(line))
        n = (int)sizeof(line) - 1;
    /* Spaces over the rest of a longer line drawn before. */
    fprintf(stderr, "\r%s%*s", line, p->drawn > n ? p->drawn - n : 0, "");
    p->drawn = n;
}

/* Blanks the line, so that what is printed next starts at the margin. */
static inline void ex_progress_end(struct ex_progress *p)
{
    if (p->on && p->drawn > 0)
        fprintf(stderr, "\r%*s\r", p->drawn, "");
    p->drawn = 0;
}

/* ferry_req_wait(req, -1), drawing p first and redrawing it meanwhile
 * (what, done and total as ex_progress's). */
static inline int ex_req_wait(ferry_req_t *req, struct ex_progress *p,
                              const char *what, double done, double total)
{
    int ret;

    ex_progress(p, what, done, total);
    while ((ret = ferry_req_wait(req, 250)) == FERRY_EAGAIN)
        ex_progress(p, what, done, total);
    return ret;
}

/*
 * Runs this program again as a child process with args (args[0] its
 * name; NULL-terminated): how a demo starts the other side once it knows
 * where to meet it.  The child starts afresh with exec, so it inherits no
 * ferry (or CUDA) state of this process, which may have a context and
 * threads already.  Returns the child's pid, or -1 with a message.
 */
static inline pid_t ex_spawn(char *const args[])
{
    static const char failed[] = "demo: cannot run /proc/self/exe again\n";
    pid_t pid;

    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid == 0) {
        execv("/proc/self/exe", args);
        /* Only async-signal-safe calls in the child of a threaded parent:
         * no stdio. */
        ssize_t n = write(STDERR_FILENO, failed, sizeof(failed) - 1);
        (void)n;
        _exit(127);
    }
    if (pid < 0)
        perror("demo: fork");
    return pid;
}

/*
 * Waits for a child of ex_spawn; when stop (this side failed), ends it
 * first rather than let it wait out its deadline.  true if it exited 0.
 */
static inline bool ex_reap(pid_t pid, bool stop)
{
    int status = 0;

    if (pid <= 0)
        return false;
    if (stop)
        kill(pid, SIGTERM);
    return waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
           WEXITSTATUS(status) == 0;
}

#endif /* FERRY_EXAMPLE_H */
