/*
 * ferry_bench: --plot: a sweep's GB/s and p50 latency against the block
 * size, one panel above the other, drawn by gnuplot with the numbers
 * inline once the sweep is done.  The picture only shows the result:
 * without gnuplot ferry_bench says so and succeeds all the same.
 */
#include "plot.h"

#include "util.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Whether prog is an executable in a directory of $PATH, as the shell
 * popen runs would find it. */
static bool on_path(const char *prog)
{
    const char *p = getenv("PATH");
    char file[4096];

    if (p == NULL || *p == '\0')
        p = "/usr/bin:/bin";
    for (;;) {
        size_t n = strcspn(p, ":");

        /* An empty entry is the current directory. */
        snprintf(file, sizeof(file), "%.*s/%s", n ? (int)n : 1, n ? p : ".",
                 prog);
        if (access(file, X_OK) == 0)
            return true;
        if (p[n] == '\0')
            return false;
        p += n + 1;
    }
}

bool plot_writable(const struct options *o)
{
    const char *slash;
    char dir[4096];

    if (o->plot == NULL)
        return true;
    slash = strrchr(o->plot, '/');
    if (slash == NULL)
        snprintf(dir, sizeof(dir), ".");
    else
        snprintf(dir, sizeof(dir), "%.*s",
                 slash == o->plot ? 1 : (int)(slash - o->plot), o->plot);
    if (access(dir, W_OK) == 0)
        return true;
    return !complain("--plot %s: cannot write in %s: %s", o->plot, dir,
                     strerror(errno));
}

/* s as a gnuplot string between single quotes (a quote doubled). */
static void put_quoted(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'')
            fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

/* "ferry_bench write over shm: blocks 4K:16M, 4 in flight (host,
 * 2026-11-28)" */
static void title(char *out, size_t n, const struct options *o,
                  const char *over)
{
    char host[64] = "?", day[16] = "?";
    time_t now = time(NULL);
    struct tm tm;
    int k;

    gethostname(host, sizeof(host) - 1);
    if (localtime_r(&now, &tm) != NULL)
        strftime(day, sizeof(day), "%Y-%m-%d", &tm);
    k = snprintf(out, n, "ferry_bench %s%s%s: blocks %s",
                 o->mode == MODE_MEMCPY ? "memcpy"
                 : o->pingpong          ? "pingpong"
                 : o->read              ? "read"
                                        : "write",
                 over != NULL ? " over " : "", over != NULL ? over : "",
                 o->sweep_text);
    if (k > 0 && (size_t)k < n && o->mode != MODE_MEMCPY && !o->pingpong)
        k += snprintf(out + k, n - (size_t)k, ", %" PRIu64 " in flight",
                      o->inflight);
    if (k > 0 && (size_t)k < n)
        snprintf(out + k, n - (size_t)k, " (%s, %s)", host, day);
}

static void write_script(FILE *g, const struct options *o, const char *over,
                         const struct result *rs, size_t n, bool latency)
{
    char t[512], b[32];

    if (strcmp(o->plot + strlen(o->plot) - 4, ".svg") == 0)
        fprintf(g, "set terminal svg size 800,%d dynamic noenhanced "
                "font 'sans,11' background '#ffffff'\n",
                latency ? 640 : 360);
    else
        fprintf(g, "set terminal pngcairo size 800,%d noenhanced "
                "font 'sans,10'\n",
                latency ? 640 : 360);
    fputs("set output ", g);
    put_quoted(g, o->plot);
    /* A run without a number (no latency sample) is a gap in the line. */
    fputs("\n$sweep << EOD\n", g);
    for (size_t i = 0; i < n; i++) {
        const struct result *r = &rs[i];

        fprintf(g, "%" PRIu64 " ", r->block);
        if (r->seconds > 0)
            fprintf(g, "%.6g ", (double)r->bytes / r->seconds / 1e9);
        else
            fputs("NaN ", g);
        if (r->p50_us >= 0)
            fprintf(g, "%.6g\n", r->p50_us);
        else
            fputs("NaN\n", g);
    }
    fputs("EOD\n", g);
    title(t, sizeof(t), o, over);
    fprintf(g, "set multiplot layout %d,1 title ", latency ? 2 : 1);
    put_quoted(g, t);
    /* A tic at every size, named as --sweep takes it ("4K"), and a
     * little room at both ends: gnuplot drops a tic that falls on the end
     * of a log axis. */
    fprintf(g, "\nset logscale x 2\nset xrange [%" PRIu64 " / 1.2:%" PRIu64
            " * 1.2]\n",
            rs[0].block, rs[n - 1].block);
    fputs("set xtics (", g);
    for (size_t i = 0; i < n; i++)
        fprintf(g, "%s'%s' %" PRIu64, i ? ", " : "",
                fmt_flag(b, sizeof(b), rs[i].block), rs[i].block);
    fputs(")\n"
          "set xlabel 'block size (bytes)'\n"
          "set grid\n"
          /* Where the lines seldom go: GB/s grow with the block, and so
           * does latency. */
          "set key bottom right\n"
          "set ylabel 'GB/s'\n"
          "set yrange [0:*]\n"
          "plot $sweep using 1:2 with linespoints lw 2 title 'GB/s'\n",
          g);
    if (latency)
        fputs("set key top left\n"
              "set ylabel 'p50 latency (us)'\n"
              "set logscale y 10\n"
              "set yrange [*:*]\n"
              "plot $sweep using 1:3 with linespoints lw 2 lc 2 "
              "title 'p50 latency'\n",
              g);
    fputs("unset multiplot\n", g);
}

int plot_sweep(const struct options *o, const char *over,
               const struct result *rs, size_t n)
{
    bool latency = false;
    FILE *g;
    int st;

    if (o->plot == NULL || n == 0)
        return 0;
    if (!on_path("gnuplot")) {
        complain("--plot %s: gnuplot is not installed, so there is no plot "
                 "(apt-get install gnuplot-nox); the numbers are above "
                 "(and in --csv FILE)",
                 o->plot);
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        latency |= rs[i].p50_us >= 0;
    /* gnuplot may stop reading early (it says why): a write then fails
     * with EPIPE instead of killing this process. */
    signal(SIGPIPE, SIG_IGN);
    fflush(NULL);
    g = popen("gnuplot", "w");
    if (g == NULL)
        return complain("--plot %s: cannot run gnuplot: %s", o->plot,
                        strerror(errno));
    write_script(g, o, over, rs, n, latency);
    st = pclose(g);
    if (st != 0)
        return complain("--plot %s: gnuplot failed (exit status %d; its "
                        "message is above)",
                        o->plot, st == -1 ? -1 : WEXITSTATUS(st));
    fprintf(stderr, "%s: wrote the plot %s\n", g_role, o->plot);
    return 0;
}
