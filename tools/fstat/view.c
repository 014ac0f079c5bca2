/*
 * ferry_stat: the list and the live view.  The view knows ferry's
 * families by name (ferry_bytes_total, ferry_requests_total...); a
 * snapshot without one of them just shows less.
 */
#include "view.h"

#include "util.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* More buckets than this and the view shows no latency. */
#define MAX_BUCKETS 128

/* A snapshot and the span its rates are over. */
struct rates {
    const struct snapshot *s, *base;
    double dt; /* seconds between base and s; 0 without a base */
};

struct bucket {
    double le, n;
};

static const char *fmt_age(char *buf, size_t len, double s)
{
    if (s < 0)
        s = 0;
    if (s < 60)
        snprintf(buf, len, "%.1f s", s);
    else if (s < 3600)
        snprintf(buf, len, "%.0f min", s / 60);
    else if (s < 86400)
        snprintf(buf, len, "%.1f h", s / 3600);
    else
        snprintf(buf, len, "%.1f days", s / 86400);
    return buf;
}

static const char *program(const struct snapshot *s)
{
    return s->program[0] != '\0' ? s->program : "(program unknown)";
}

void view_list(const struct scan *sc, FILE *out)
{
    double now = now_s();
    char age[32];

    if (sc->nsnaps == 0) {
        fprintf(out, "no snapshots in %s (a program writes them when "
                     "FERRY_TELEMETRY names the directory)\n",
                sc->dir);
        return;
    }
    fprintf(out, "%-8s %7s  %-14s %9s  %s\n", "PID", "CONTEXT", "STATE",
            "AGE", "PROGRAM");
    for (size_t i = 0; i < sc->nsnaps; i++) {
        const struct snapshot *s = sc->snaps[i];

        fprintf(out, "%-8ld %7u  %-14s %9s  %s\n", (long)s->pid, s->context,
                s->live      ? "live"
                : s->removed ? "stale, removed"
                             : "stale",
                fmt_age(age, sizeof(age), now - s->written), program(s));
    }
}

void view_problems(const struct scan *sc, FILE *out)
{
    for (size_t i = 0; i < sc->nproblems; i++)
        fprintf(out, "ferry_stat: %s\n", sc->problems[i]);
}

/* What the samples `name` with labels match gained per second. */
static bool rate(const struct rates *r, const char *name,
                 const char *const *match, double *per_s)
{
    double now, then;

    if (r->dt <= 0 || !snap_sum(r->s, name, match, &now) ||
        !snap_sum(r->base, name, match, &then) || now < then)
        return false;
    *per_s = (now - then) / r->dt;
    return true;
}

static void print_rail(FILE *out, const struct rates *r, const char *peer,
                       const char *rail)
{
    static const char *const ops[] = {"write", "read"};
    char text[2][64];

    for (size_t k = 0; k < 2; k++) {
        const char *const match[] = {"peer", peer, "rail", rail,
                                     "op",   ops[k], NULL};
        char bytes[32], count[32];
        double b, n;

        if (rate(r, "ferry_bytes_total", match, &b))
            fmt_rate(bytes, sizeof(bytes), b);
        else
            snprintf(bytes, sizeof(bytes), "- B/s");
        if (rate(r, "ferry_operations_total", match, &n))
            snprintf(count, sizeof(count), "%.1f op/s", n);
        else
            snprintf(count, sizeof(count), "- op/s");
        snprintf(text[k], sizeof(text[k]), "%s %s", bytes, count);
    }
    fprintf(out, "    rail %s: write %s, read %s\n", rail, text[0], text[1]);
}

/* "write ok 1200 (+50), read timeout 1": requests ended, per op and
 * outcome, and how many more since the base. */
static int print_requests(FILE *out, const struct rates *r, const char *peer)
{
    const char *const by_peer[] = {"peer", peer, NULL};
    const char **ops, **outcomes;
    size_t nops, nout;
    const char *sep = "    requests ended: ";

    if (snap_values(r->s, "ferry_requests_total", "op", by_peer, &ops,
                    &nops) != 0)
        return -ENOMEM;
    for (size_t i = 0; i < nops; i++) {
        const char *const by_op[] = {"peer", peer, "op", ops[i], NULL};

        if (snap_values(r->s, "ferry_requests_total", "outcome", by_op,
                        &outcomes, &nout) != 0) {
            free(ops);
            return -ENOMEM;
        }
        for (size_t k = 0; k < nout; k++) {
            const char *const m[] = {"peer",    peer,        "op", ops[i],
                                     "outcome", outcomes[k], NULL};
            double now, then;

            snap_sum(r->s, "ferry_requests_total", m, &now);
            fprintf(out, "%s%s %s %.0f", sep, ops[i], outcomes[k], now);
            if (snap_sum(r->base, "ferry_requests_total", m, &then) &&
                now > then)
                fprintf(out, " (+%.0f)", now - then);
            sep = ", ";
        }
        free(outcomes);
    }
    if (nops > 0)
        putc('\n', out);
    free(ops);
    return 0;
}

static int print_peer(FILE *out, const struct rates *r, const char *peer)
{
    const char *const by_peer[] = {"peer", peer, NULL};
    const char **rails;
    size_t nrails;
    double up;

    fprintf(out, "  peer %s", peer);
    if (snap_sum(r->s, "ferry_peer_up", by_peer, &up))
        fprintf(out, ": %s", up != 0 ? "up" : "down");
    putc('\n', out);
    if (snap_values(r->s, NULL, "rail", by_peer, &rails, &nrails) != 0)
        return -ENOMEM;
    for (size_t i = 0; i < nrails; i++)
        print_rail(out, r, peer, rails[i]);
    free(rails);
    return print_requests(out, r, peer);
}

static int by_le(const void *a, const void *b)
{
    double x = ((const struct bucket *)a)->le;
    double y = ((const struct bucket *)b)->le;

    return x < y ? -1 : x > y;
}

/*
 * The buckets of histogram `name` for op into b: cumulative counts,
 * less those of base unless base is NULL.  Returns how many, 0 when more
 * than MAX_BUCKETS.
 */
static size_t buckets(const struct snapshot *s, const struct snapshot *base,
                      const char *name, const char *op, struct bucket *b)
{
    char bucket[256];
    size_t n = 0;

    snprintf(bucket, sizeof(bucket), "%s_bucket", name);
    for (size_t i = 0; i < s->nsamples; i++) {
        const struct sample *x = &s->samples[i];
        const char *le = sample_label(s, x, "le"), *xop;
        double then = 0;

        xop = sample_label(s, x, "op");
        if (strcmp(x->name, bucket) != 0 || le == NULL || xop == NULL ||
            strcmp(xop, op) != 0)
            continue;
        if (n == MAX_BUCKETS)
            return 0;
        if (base != NULL) {
            const char *const m[] = {"op", op, "le", le, NULL};

            snap_sum(base, bucket, m, &then);
        }
        b[n++] = (struct bucket){strtod(le, NULL), x->v - then};
    }
    qsort(b, n, sizeof(*b), by_le);
    return n;
}

/* The median of cumulative buckets b, linear within its bucket as
 * Prometheus' histogram_quantile estimates it. */
static bool median(const struct bucket *b, size_t n, double *v)
{
    double rank;

    if (n == 0 || !isinf(b[n - 1].le) || b[n - 1].n <= 0)
        return false;
    rank = b[n - 1].n / 2;
    for (size_t i = 0; i < n; i++) {
        double lo = i > 0 ? b[i - 1].le : 0, below = i > 0 ? b[i - 1].n : 0;

        if (b[i].n < rank)
            continue;
        if (isinf(b[i].le)) {
            *v = lo;
            return i > 0;
        }
        *v = lo + (b[i].le - lo) * (rank - below) / (b[i].n - below);
        return true;
    }
    return false;
}

/* "write 12.0 us": the median duration of op's requests that ended
 * since the base, else of all of them ("since start"). */
static void print_latency(FILE *out, const struct rates *r, const char *op,
                          const char **sep)
{
    static const char hist[] = "ferry_request_duration_seconds";
    struct bucket b[MAX_BUCKETS];
    bool whole = false;
    char text[32];
    double v;

    if (r->dt <= 0 ||
        !median(b, buckets(r->s, r->base, hist, op, b), &v)) {
        whole = true;
        if (!median(b, buckets(r->s, NULL, hist, op, b), &v))
            return;
    }
    fprintf(out, "%s%s %s%s", *sep, op, fmt_duration(text, sizeof(text), v),
            whole ? " (since start)" : "");
    *sep = ", ";
}

static int print_requests_line(FILE *out, const struct rates *r)
{
    const char **ops, *sep = "; median latency ";
    double running;
    size_t nops;

    if (snap_sum(r->s, "ferry_requests_in_flight", NULL, &running))
        fprintf(out, "  requests in flight %.0f", running);
    else
        fprintf(out, "  requests in flight -");
    if (snap_values(r->s, "ferry_request_duration_seconds_count", "op", NULL,
                    &ops, &nops) != 0)
        return -ENOMEM;
    for (size_t i = 0; i < nops; i++)
        print_latency(out, r, ops[i], &sep);
    putc('\n', out);
    free(ops);
    return 0;
}

/* "tcp;ofi_rxm on domain lo (fabric 127.0.0.0/8), ferry 1.0.0; ". */
static void print_info(FILE *out, const struct snapshot *s)
{
    for (size_t i = 0; i < s->nsamples; i++) {
        const struct sample *x = &s->samples[i];
        const char *prov = sample_label(s, x, "provider");
        const char *domain = sample_label(s, x, "domain");
        const char *fabric = sample_label(s, x, "fabric");
        const char *version = sample_label(s, x, "version");

        if (strcmp(x->name, "ferry_info") != 0)
            continue;
        fprintf(out, "%s on domain %s (fabric %s), ferry %s; ",
                prov ? prov : "?", domain ? domain : "?",
                fabric ? fabric : "?", version ? version : "?");
        return;
    }
}

static int print_context(FILE *out, const struct snapshot *s, double now)
{
    struct rates r = {s, s->base, s->base ? s->written - s->base->written : 0};
    const char **peers;
    char age[32];
    size_t n;
    int ret = 0;

    fprintf(out, "\npid %ld, context %u: %s\n  ", (long)s->pid, s->context,
            program(s));
    print_info(out, s);
    fprintf(out, "written %s ago\n", fmt_age(age, sizeof(age), now - s->written));
    if (print_requests_line(out, &r) != 0 ||
        snap_values(s, NULL, "peer", NULL, &peers, &n) != 0)
        return -ENOMEM;
    for (size_t i = 0; ret == 0 && i < n; i++)
        ret = print_peer(out, &r, peers[i]);
    free(peers);
    return ret;
}

int view_frame(const struct scan *sc, FILE *out)
{
    size_t live = 0, processes = 0, stale = 0;
    pid_t last = 0;
    time_t t = time(NULL);
    double now = now_s();
    char clock[16];
    int ret = 0;

    for (size_t i = 0; i < sc->nsnaps; i++) {
        const struct snapshot *s = sc->snaps[i];

        stale += !s->live;
        if (!s->live)
            continue;
        live++;
        /* Sorted by pid: a process's contexts come together. */
        if (s->pid != last)
            processes++;
        last = s->pid;
    }
    strftime(clock, sizeof(clock), "%H:%M:%S", localtime(&t));
    fprintf(out, "ferry_stat %s, %s: %zu live context%s in %zu process%s",
            sc->dir, clock, live, live == 1 ? "" : "s", processes,
            processes == 1 ? "" : "es");
    if (stale > 0)
        fprintf(out, "; %zu stale snapshot%s left aside (--list)", stale,
                stale == 1 ? "" : "s");
    putc('\n', out);
    for (size_t i = 0; ret == 0 && i < sc->nsnaps; i++)
        if (sc->snaps[i]->live)
            ret = print_context(out, sc->snaps[i], now);
    return ret;
}
