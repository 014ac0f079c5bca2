/*
 * ferry_stat: a live view of the ferry processes of this host, without
 * touching them.  Each context of a program run with FERRY_TELEMETRY=DIR
 * writes its metrics into DIR about once a second (lib/telemetry.c);
 * this reads them.
 *
 *   ferry_stat [--dir DIR] [--interval S] [--clean]   the live view
 *   ferry_stat --once ...                  one view, rates over S, exit
 *   ferry_stat --list ...                  the snapshots, live or stale
 *   ferry_stat --prometheus [HOST]:PORT    all of them as one /metrics
 *
 * Its parts are in tools/fstat/: snap.c reads a snapshot (parse.c its
 * text), scan.c a directory of them and tells live from stale, view.c
 * prints, merge.c and serve.c serve.  It needs no libferry: a snapshot
 * is plain text.
 *
 * Exits 0; 1 when DIR cannot be read or the address not listened on;
 * 2 on bad usage.
 */
#include "fstat/scan.h"
#include "fstat/serve.h"
#include "fstat/util.h"
#include "fstat/view.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum mode { MODE_VIEW, MODE_ONCE, MODE_LIST, MODE_PROMETHEUS };

struct options {
    const char *dir;
    enum mode mode;
    const char *listen; /* --prometheus */
    double interval;
    bool clean;
};

static int usage(FILE *out, int status)
{
    fprintf(out,
            "usage: ferry_stat [--dir DIR] [--once | --list | --prometheus "
            "[HOST]:PORT]\n"
            "                  [--interval S] [--clean]\n"
            "  --dir DIR      the snapshots' directory (default: "
            "$FERRY_TELEMETRY)\n"
            "  --once         print one view, rates over --interval, and "
            "exit\n"
            "  --list         list the snapshots: pid, context, state, age, "
            "program\n"
            "  --prometheus [HOST]:PORT\n"
            "                 serve the live snapshots merged at "
            "http://HOST:PORT/metrics\n"
            "                 (HOST 127.0.0.1 when empty; PORT 0: a free "
            "one)\n"
            "  --interval S   seconds between two reads of the view "
            "(default 1)\n"
            "  --clean        remove stale snapshots and temporary files (of\n"
            "                 processes gone)\n"
            "  --help         this text\n");
    return status;
}

static bool set_mode(struct options *o, enum mode m)
{
    if (o->mode != MODE_VIEW) {
        fprintf(stderr, "ferry_stat: --once, --list and --prometheus "
                        "exclude each other\n");
        return false;
    }
    o->mode = m;
    return true;
}

static bool parse_interval(struct options *o, const char *text)
{
    char *end;

    o->interval = strtod(text, &end);
    if (*end != '\0' || end == text || !isfinite(o->interval) ||
        o->interval <= 0 || o->interval > 86400) {
        fprintf(stderr, "ferry_stat: --interval %s: give seconds, more "
                        "than 0 and at most 86400\n",
                text);
        return false;
    }
    return true;
}

static bool set_listen(struct options *o, const char *addr)
{
    if (strchr(addr, ':') == NULL) {
        fprintf(stderr, "ferry_stat: --prometheus wants [HOST]:PORT, not "
                        "\"%s\" (:%s listens on 127.0.0.1)\n",
                addr, addr);
        return false;
    }
    o->listen = addr;
    return true;
}

/* Returns -1 when the options are good, else the exit status. */
static int parse_options(int argc, char **argv, struct options *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool more = i + 1 < argc;
        bool ok = true;

        if (strcmp(a, "--help") == 0)
            return usage(stdout, 0);
        if (strcmp(a, "--dir") == 0 && more)
            o->dir = argv[++i];
        else if (strcmp(a, "--interval") == 0 && more)
            ok = parse_interval(o, argv[++i]);
        else if (strcmp(a, "--clean") == 0)
            o->clean = true;
        else if (strcmp(a, "--once") == 0)
            ok = set_mode(o, MODE_ONCE);
        else if (strcmp(a, "--list") == 0)
            ok = set_mode(o, MODE_LIST);
        else if (strcmp(a, "--prometheus") == 0 && more)
            ok = set_mode(o, MODE_PROMETHEUS) && set_listen(o, argv[++i]);
        else
            return usage(stderr, 2);
        if (!ok)
            return 2;
    }
    if (o->dir == NULL || o->dir[0] == '\0') {
        fprintf(stderr, "ferry_stat: which directory?  Set FERRY_TELEMETRY "
                        "to the directory the programs write their snapshots "
                        "into (FERRY_TELEMETRY=DIR), or pass --dir DIR\n");
        return 2;
    }
    return -1;
}

/* Whether DIR can be read, said when not. */
static bool dir_readable(const char *dir)
{
    DIR *d = opendir(dir);

    if (d == NULL) {
        fprintf(stderr, "ferry_stat: cannot read the directory %s: %s\n", dir,
                strerror(errno));
        return false;
    }
    closedir(d);
    return true;
}

static int list(const struct options *o)
{
    struct scan sc;
    char err[1024];
    int ret = scan_dir(o->dir, o->clean, &sc, err, sizeof(err));

    if (ret == 0) {
        view_list(&sc, stdout);
        view_problems(&sc, stderr);
    } else {
        fprintf(stderr, "ferry_stat: %s\n", err);
    }
    scan_free(&sc);
    return ret == 0 ? 0 : 1;
}

/* One frame.  On a terminal it replaces the last, problems included
 * (printed to stderr they would be wiped by the next frame). */
static int frame(const struct scan *sc, bool tty)
{
    int ret;

    if (tty)
        fputs("\033[H\033[2J", stdout);
    ret = view_frame(sc, stdout);
    view_problems(sc, tty ? stdout : stderr);
    if (!tty)
        putchar('\n');
    fflush(stdout);
    if (ret != 0)
        fprintf(stderr, "ferry_stat: out of memory\n");
    return ret;
}

/*
 * The view: a frame at once (no rates yet), then one per interval, rates
 * over the snapshots read in between; --once: a single frame, after two
 * reads an interval apart.
 */
static int view(const struct options *o)
{
    bool tty = isatty(STDOUT_FILENO), once = o->mode == MODE_ONCE;
    struct scan before, now;
    char err[1024];

    if (scan_dir(o->dir, o->clean, &before, err, sizeof(err)) != 0) {
        fprintf(stderr, "ferry_stat: %s\n", err);
        scan_free(&before);
        return 1;
    }
    if (!once && frame(&before, tty) != 0) {
        scan_free(&before);
        return 1;
    }
    for (;;) {
        int ret;

        sleep_s(o->interval);
        if (scan_dir(o->dir, o->clean, &now, err, sizeof(err)) != 0) {
            scan_free(&now);
            fprintf(stderr, "ferry_stat: %s\n", err);
            if (once)
                break;
            continue;
        }
        scan_take_bases(&now, &before);
        scan_free(&before);
        before = now;
        ret = frame(&before, tty);
        if (once || ret != 0) {
            scan_free(&before);
            return ret == 0 ? 0 : 1;
        }
    }
    scan_free(&before);
    return 1;
}

int main(int argc, char **argv)
{
    struct options o = {.dir = getenv("FERRY_TELEMETRY"), .interval = 1};
    int status = parse_options(argc, argv, &o);

    if (status >= 0)
        return status;
    if (!dir_readable(o.dir))
        return 1;
    switch (o.mode) {
    case MODE_LIST:
        return list(&o);
    case MODE_PROMETHEUS:
        return serve(o.dir, o.clean, o.listen);
    default:
        return view(&o);
    }
}
