/*
 * ferry_bench: the progress line of a sweep on a terminal: which size of
 * how many, the rate now, the time left.  Drawn and blanked by the main
 * thread only (the initiator's workers never print).
 */
#include "progress.h"

#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

static struct {
    bool on;
    size_t nsteps, step;
    char label[32];
    double expect_s;
    uint64_t t_begin, t_step, next_draw;
    /* the rate: counts at the last draw, and when */
    uint64_t t_rate, bytes_last, ops_last;
    double gbps, ops_s;
    bool have_rate, warmup;
    size_t drawn; /* columns on the terminal now */
} g_pl;

/* The same clock as util.c's now_ns, read here so that this part needs
 * no other. */
static uint64_t mono_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A line longer than the terminal wraps, and '\r' then returns to the
 * start of its last row only: keep it inside. */
static size_t columns(void)
{
    struct winsize ws;

    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1)
        return ws.ws_col;
    return 80;
}

static void fmt_left(char *out, size_t n, double s)
{
    if (s < 1)
        snprintf(out, n, "<1 s");
    else if (s < 60)
        snprintf(out, n, "%.0f s", s);
    else if (s < 3600)
        snprintf(out, n, "%d min %02d s", (int)s / 60, (int)s % 60);
    else
        snprintf(out, n, "%d h %02d min", (int)s / 3600, (int)s % 3600 / 60);
}

static void fmt_ops(char *out, size_t n, double v)
{
    if (v >= 1e6)
        snprintf(out, n, "%.3gM", v / 1e6);
    else if (v >= 1e3)
        snprintf(out, n, "%.3gk", v / 1e3);
    else
        snprintf(out, n, "%.0f", v);
}

/*
 * Seconds left at t: the steps done so far took `per` each on average
 * (their setup and exchanges included), or before the first ends, what
 * one is expected to take; < 0 when neither is known.
 */
static double seconds_left(uint64_t t)
{
    double in_step = (double)(t - g_pl.t_step) / 1e9, per;

    if (g_pl.step > 0)
        per = (double)(g_pl.t_step - g_pl.t_begin) / 1e9 / (double)g_pl.step;
    else if (g_pl.expect_s > 0)
        per = g_pl.expect_s;
    else
        return -1;
    return (per > in_step ? per - in_step : 0) +
           (double)(g_pl.nsteps - g_pl.step - 1) * per;
}

static void draw(uint64_t t)
{
    char text[256], buf[600], num[32], left[32];
    size_t len, width = columns() - 1, pad;
    double s = seconds_left(t);
    int k;

    k = snprintf(text, sizeof(text), "sweep %zu/%zu: %s%s", g_pl.step + 1,
                 g_pl.nsteps, g_pl.label, g_pl.warmup ? " (warmup)" : "");
    if (g_pl.have_rate) {
        fmt_ops(num, sizeof(num), g_pl.ops_s);
        k += snprintf(text + k, sizeof(text) - (size_t)k,
                      ", %.2f GB/s, %s ops/s", g_pl.gbps, num);
    }
    if (s >= 0) {
        fmt_left(left, sizeof(left), s);
        snprintf(text + k, sizeof(text) - (size_t)k, ", %s left", left);
    }
    len = strlen(text);
    if (len > width)
        len = width;
    /* Spaces over what is left of a longer line drawn before. */
    pad = g_pl.drawn > len ? g_pl.drawn - len : 0;
    snprintf(buf, sizeof(buf), "\r%.*s%*s", (int)len, text, (int)pad, "");
    fputs(buf, stderr);
    g_pl.drawn = len;
    g_pl.next_draw = t + PROGRESS_REDRAW_NS;
}

void progress_begin(size_t nsteps)
{
    memset(&g_pl, 0, sizeof(g_pl));
    g_pl.on = isatty(STDERR_FILENO) == 1;
    g_pl.nsteps = nsteps;
    g_pl.t_begin = g_pl.t_step = mono_ns();
}

void progress_step(size_t i, const char *label, double expect_s)
{
    uint64_t t = mono_ns();

    if (!g_pl.on)
        return;
    g_pl.step = i;
    snprintf(g_pl.label, sizeof(g_pl.label), "%s", label);
    g_pl.expect_s = expect_s;
    g_pl.t_step = g_pl.t_rate = t;
    g_pl.bytes_last = g_pl.ops_last = 0;
    g_pl.have_rate = false;
    g_pl.warmup = false;
    if (t >= g_pl.next_draw)
        draw(t);
}

bool progress_on(void)
{
    return g_pl.on;
}

void progress_tick(uint64_t t, uint64_t bytes, uint64_t ops, bool warmup)
{
    double dt;

    if (!g_pl.on || t < g_pl.next_draw || t <= g_pl.t_rate)
        return;
    dt = (double)(t - g_pl.t_rate) / 1e9;
    g_pl.gbps = (double)(bytes - g_pl.bytes_last) / dt / 1e9;
    g_pl.ops_s = (double)(ops - g_pl.ops_last) / dt;
    g_pl.have_rate = true;
    g_pl.warmup = warmup;
    g_pl.t_rate = t;
    g_pl.bytes_last = bytes;
    g_pl.ops_last = ops;
    draw(t);
}

void progress_clear(void)
{
    if (!g_pl.on || g_pl.drawn == 0)
        return;
    fprintf(stderr, "\r%*s\r", (int)g_pl.drawn, "");
    g_pl.drawn = 0;
}

void progress_end(void)
{
    progress_clear();
    g_pl.on = false;
}
