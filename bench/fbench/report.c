/*
 * ferry_bench: output: the human summary, the sweep table, --csv and --json.
 */
#include "report.h"

#include "fbench.h"
#include "options.h"
#include "plot.h"
#include "progress.h"
#include "stats.h"
#include "util.h"

#include <ferry.h>

#include <inttypes.h>
#include <stdio.h>

FILE *g_out; /* the human summary: stdout, or stderr with --json */

static double per_gb(double v, uint64_t bytes)
{
    return v < 0 || bytes == 0 ? -1 : v / ((double)bytes / 1e9);
}

static const char *mode_name(enum mode m)
{
    switch (m) {
    case MODE_LOOPBACK: return "loopback";
    case MODE_TARGET: return "target";
    case MODE_INITIATOR: return "initiator";
    case MODE_MEMCPY: return "memcpy";
    case MODE_FANOUT: return "fanout";
    }
    return "?";
}

static const char *what_moves(const struct options *o)
{
    return o->mode == MODE_MEMCPY ? "memcpy"
           : o->idle > 0          ? "idle"
           : o->pingpong          ? "pingpong"
           : o->read              ? "read"
                                  : "write";
}

void print_header(const struct options *o,
                  const struct ferry_context_info *info)
{
    char b1[32], b2[32];

    fprintf(g_out, "ferry_bench: %s", what_moves(o));
    if (info != NULL)
        fprintf(g_out, " over %s (domain %s, %u rail%s)", info->provider,
                info->domain, info->nrails, info->nrails == 1 ? "" : "s");
    if (o->sweep_lo != 0)
        fprintf(g_out, ": blocks %s", o->sweep_text);
    else
        fprintf(g_out, ": %s blocks", fmt_iec(b1, sizeof(b1), o->block));
    if (!o->pingpong && o->idle == 0 && o->mode != MODE_MEMCPY)
        fprintf(g_out, " × %" PRIu64 " per request × %" PRIu64
                " thread%s × %" PRIu64 " in flight",
                o->batch, o->threads, o->threads == 1 ? "" : "s",
                o->inflight);
    if (o->descending)
        fprintf(g_out, " (iovs in descending order)");
    if (o->same_block)
        fprintf(g_out, " (every request the same blocks)");
    if (o->target_polls)
        fprintf(g_out, " (the target polls, no progress thread)");
    if (o->initiator_thread)
        fprintf(g_out, " (the initiator runs a progress thread%s)",
                o->event_loop ? " and sleeps on ferry_context_fd" : "");
    if (o->pin)
        fprintf(g_out, " (initiator on CPU 0, target on CPU 1)");
    if (o->idle_peers != 0)
        fprintf(g_out, " (and %" PRIu64 " idle peers)", o->idle_peers);
    if (o->idle > 0)
        fprintf(g_out, " (the target at rest %.3g s; %" PRIu64 " gaps of "
                "%.3g s)",
                o->idle, o->idle_gaps, o->gap_length);
    fprintf(g_out, ", buffer %s%s, ", fmt_iec(b2, sizeof(b2), o->buffer),
            o->cuda ? " of device memory" : "");
    if (o->iterations != 0)
        fprintf(g_out, "%" PRIu64 " iterations per run\n", o->iterations);
    else
        fprintf(g_out, "%.3g s per run\n", o->duration);
    if (info != NULL)
        fprintf(g_out, "  provider     %s\n"
                "  limits       tx depth %zu per rail, largest operation %s, "
                "mr_mode 0x%x\n",
                info->why, info->tx_depth,
                fmt_iec(b1, sizeof(b1), info->max_msg_size), info->mr_mode);
    if (info != NULL && (o->cuda || o->target_cuda))
        fprintf(g_out, "  memory       here %s, target %s; device memory: %s\n",
                o->cuda ? o->mem_text : "host",
                o->target_cuda ? o->target_mem_text : "host",
                info->device_path);
    fflush(g_out);
}

static const char *fmt_lat(char *out, size_t n, double us)
{
    return us < 0 ? "-" : fmt_ns(out, n, us * 1e3);
}

static void print_checks(const struct options *o, const struct result *r)
{
    char b1[32];

    if (o->notify || o->idle > 0)
        fprintf(g_out, "  notify       %" PRIu64 " requests carried a "
                "notification; the target counted %" PRIu64 "%s: %s\n",
                r->notified, r->target_notified,
                r->verdict & VERDICT_COUNTER
                    ? " (its counter and its queue disagree)"
                    : " (counter and queue agree)",
                r->verdict & (VERDICT_NOTIFY | VERDICT_COUNTER) ? "FAILED"
                                                                : "OK");
    if (o->pingpong)
        fprintf(g_out, "  pings        %" PRIu64 " sent, %" PRIu64
                " answered: %s\n",
                r->notified, r->target_notified,
                r->verdict & VERDICT_PINGS ? "FAILED" : "OK");
    if (o->validate && o->read)
        fprintf(g_out, "  validate     every byte read checked against the "
                "target's pattern: %s\n",
                r->local_check == 0 ? "OK" : "FAILED");
    else if (o->validate && o->mode == MODE_MEMCPY)
        fprintf(g_out, "  validate     every byte copied checked: %s\n",
                r->local_check == 0 ? "OK" : "FAILED");
    else if (o->validate)
        fprintf(g_out, "  validate     the target checked every byte of its "
                "%s: %" PRIu64 " blocks written (%" PRIu64 " expected), the "
                "rest untouched: %s\n",
                fmt_iec(b1, sizeof(b1), r->reg_bytes), r->target_written,
                r->written, r->verdict & VERDICT_DATA ? "FAILED" : "OK");
    if (r->first_bad != UINT64_MAX)
        fprintf(g_out, "  first bad    byte at offset %" PRIu64 "\n",
                r->first_bad);
}

/* What happens once per session: registration and connection. */
void print_session(const struct result *r)
{
    char b1[32];

    fprintf(g_out, "  registration %s in %.3f ms here (%.4g ms per GB), "
            "%.3f ms at the target (%.4g ms per GB)\n",
            fmt_iec(b1, sizeof(b1), r->reg_bytes), r->reg_ms_here,
            per_gb(r->reg_ms_here, r->reg_bytes), r->reg_ms_target,
            per_gb(r->reg_ms_target, r->reg_bytes));
    fprintf(g_out, "  connection   %.2f ms from looking the target up "
            "(bootstrap or metadata service) to the first completed "
            "transfer\n",
            r->conn_ms);
}

/* --call-times: a request's time split into ferry's calls and the rest. */
static void print_calls(const struct options *o, const struct call_numbers *c)
{
    char b[6][32];
    double rest = c->request_ns - c->post_ns - c->test_ns - c->close_ns;

    if (!c->present)
        return;
    fprintf(g_out, "  calls        per request of %s: %s %s, ferry_req_test "
            "%s (%.2f tests found it running, %s each), ferry_req_close %s; "
            "the rest %s (the bench's loop and clock readings)\n",
            fmt_ns(b[0], sizeof(b[0]), c->request_ns),
            o->read ? "ferry_read" : "ferry_write",
            fmt_ns(b[1], sizeof(b[1]), c->post_ns),
            fmt_ns(b[2], sizeof(b[2]), c->test_ns), c->running_tests,
            c->running_test_ns < 0
                ? "-"
                : fmt_ns(b[3], sizeof(b[3]), c->running_test_ns),
            fmt_ns(b[4], sizeof(b[4]), c->close_ns),
            fmt_ns(b[5], sizeof(b[5]), rest));
}

static void print_long(const struct options *o, const struct result *r)
{
    char b1[32], b2[32], b3[32], b4[32];
    const char *kind = o->pingpong ? "half round trip"
                       : o->mode == MODE_MEMCPY ? "per block copy"
                                                : "per request";

    fprintf(g_out, "  moved        %.4g GB in %.3f s: %.4g GB/s, %.0f ops/s, "
            "%.0f requests/s\n",
            (double)r->bytes / 1e9, r->seconds,
            (double)r->bytes / r->seconds / 1e9, (double)r->ops / r->seconds,
            (double)r->reqs / r->seconds);
    fprintf(g_out, "  latency      %s: p50 %s, p99 %s, p99.9 %s, mean %s "
            "(%" PRIu64 " samples of %" PRIu64 ")\n",
            kind, fmt_lat(b1, sizeof(b1), r->p50_us),
            fmt_lat(b2, sizeof(b2), r->p99_us),
            fmt_lat(b3, sizeof(b3), r->p999_us),
            fmt_lat(b4, sizeof(b4), r->mean_us), r->samples, r->measured);
    if (o->mode != MODE_MEMCPY)
        print_session(r);
    fprintf(g_out, "  CPU          %.3f s per GB here", 
            per_gb(r->cpu_here_s, r->bytes));
    if (r->cpu_target_s >= 0)
        fprintf(g_out, ", %.3f s per GB at the target",
                per_gb(r->cpu_target_s, r->bytes));
    fprintf(g_out, "\n");
    print_calls(o, &r->calls);
    print_checks(o, r);
    fprintf(g_out, "  result       %s\n", r->ok ? "OK" : "FAILED");
    fflush(g_out);
}

/* What an idle run found: the target at rest, the first write after a
 * gap beside warm ones. */
static void print_idle(const struct options *o, const struct result *r)
{
    const struct idle_numbers *id = &r->idle;
    double cpu = id->cpu_s / id->window_s;
    char b1[32], b2[32], b3[32], b4[32], b5[32];

    fprintf(g_out, "  idle         the target used %.3f CPU-s per idle s "
            "(%.1f %% of a core), %.1f wake-ups/s; first write after %.3g "
            "s idle: p50 %s, p99 %s; warm: p50 %s (%.2f x)\n",
            cpu, 100 * cpu, (double)id->wakeups / id->window_s,
            o->gap_length, fmt_lat(b1, sizeof(b1), id->first_p50_us),
            fmt_lat(b2, sizeof(b2), id->first_p99_us),
            fmt_lat(b3, sizeof(b3), r->p50_us),
            id->first_p50_us / r->p50_us);
    fprintf(g_out, "  measured     the target's whole process over %.3f s "
            "at rest by its clock (%.1f preemptions/s); writes of %s, post "
            "to completion: %" PRIu64 " after a gap, %" PRIu64 " warm (p99 "
            "%s)\n",
            id->window_s, (double)id->preemptions / id->window_s,
            fmt_iec(b5, sizeof(b5), r->block), id->first_samples, r->samples,
            fmt_lat(b4, sizeof(b4), r->p99_us));
    print_session(r);
    print_checks(o, r);
    fprintf(g_out, "  result       %s\n", r->ok ? "OK" : "FAILED");
    fflush(g_out);
}

static void print_row_header(const struct options *o)
{
    fprintf(g_out, "  %9s %9s %12s %10s %10s %10s %10s  %s\n", "block",
            "GB/s", "ops/s", "p50", "p99", "p99.9",
            o->pingpong ? "(half RTT)" : "CPU s/GB", "check");
}

static void print_row(const struct options *o, const struct result *r)
{
    char b0[32], b1[32], b2[32], b3[32], cpu[32];

    if (o->pingpong)
        snprintf(cpu, sizeof(cpu), "-");
    else
        snprintf(cpu, sizeof(cpu), "%.3f", per_gb(r->cpu_here_s, r->bytes));
    fprintf(g_out, "  %9s %9.4g %12.0f %10s %10s %10s %10s  %s\n",
            fmt_iec(b0, sizeof(b0), r->block),
            (double)r->bytes / r->seconds / 1e9, (double)r->ops / r->seconds,
            fmt_lat(b1, sizeof(b1), r->p50_us),
            fmt_lat(b2, sizeof(b2), r->p99_us),
            fmt_lat(b3, sizeof(b3), r->p999_us), cpu,
            r->ok ? "OK" : "FAILED");
    fflush(g_out);
}

static void csv_row(FILE *f, const struct result *r)
{
    if (f == NULL)
        return;
    fprintf(f, "%" PRIu64 ",%.6f,%.1f,%.3f,%.3f,%.3f,%.3f\n", r->block,
            (double)r->bytes / r->seconds / 1e9, (double)r->ops / r->seconds,
            r->p50_us, r->p99_us, r->p999_us, r->mean_us);
    fflush(f);
}

static void json_num(const char *key, double v, const char *sep)
{
    if (v < 0)
        printf("\"%s\":null%s", key, sep);
    else
        printf("\"%s\":%.6g%s", key, v, sep);
}

static void json_str(const char *key, const char *v, const char *sep)
{
    if (v == NULL) {
        printf("\"%s\":null%s", key, sep);
        return;
    }
    printf("\"%s\":\"", key);
    for (; *v; v++) {
        if (*v == '"' || *v == '\\')
            printf("\\%c", *v);
        else if ((unsigned char)*v < 0x20)
            printf("\\u%04x", (unsigned char)*v);
        else
            putchar(*v);
    }
    printf("\"%s", sep);
}

static void json_idle(const struct options *o, const struct result *r)
{
    const struct idle_numbers *id = &r->idle;

    printf("\"idle\":{");
    json_num("seconds", id->window_s, ",");
    json_num("target_cpu_s", id->cpu_s, ",");
    json_num("target_cpu_per_idle_s", id->cpu_s / id->window_s, ",");
    json_num("target_wakeups_per_s", (double)id->wakeups / id->window_s,
             ",");
    json_num("target_preemptions_per_s",
             (double)id->preemptions / id->window_s, ",");
    printf("\"gaps\":%" PRIu64 ",", o->idle_gaps);
    json_num("gap_s", o->gap_length, ",");
    printf("\"first_write_us\":{");
    json_num("p50", id->first_p50_us, ",");
    json_num("p99", id->first_p99_us, ",");
    printf("\"samples\":%" PRIu64 "},\"warm_write_us\":{",
           id->first_samples);
    json_num("p50", r->p50_us, ",");
    json_num("p99", r->p99_us, ",");
    printf("\"samples\":%" PRIu64 "},", r->samples);
    json_num("first_over_warm_p50", id->first_p50_us / r->p50_us, "},");
}

static void json_calls(const struct call_numbers *c)
{
    if (!c->present)
        return;
    printf("\"call_ns\":{");
    json_num("request", c->request_ns, ",");
    json_num("post", c->post_ns, ",");
    json_num("test", c->test_ns, ",");
    json_num("running_tests", c->running_tests, ",");
    json_num("running_test", c->running_test_ns, ",");
    json_num("close", c->close_ns, "},");
}

static void json_run(const struct options *o, const struct result *r,
                     const char *sep)
{
    printf("{\"block_size\":%" PRIu64 ",", r->block);
    json_num("seconds", r->seconds, ",");
    printf("\"bytes\":%" PRIu64 ",", r->bytes);
    json_num("gb_per_s", (double)r->bytes / r->seconds / 1e9, ",");
    json_num("ops_per_s", (double)r->ops / r->seconds, ",");
    json_num("requests_per_s", (double)r->reqs / r->seconds, ",");
    printf("\"latency_us\":{");
    json_str("kind", o->pingpong ? "half_round_trip"
                     : o->mode == MODE_MEMCPY ? "block_copy" : "request",
             ",");
    json_num("mean", r->mean_us, ",");
    json_num("p50", r->p50_us, ",");
    json_num("p99", r->p99_us, ",");
    json_num("p999", r->p999_us, ",");
    printf("\"samples\":%" PRIu64 ",\"measured\":%" PRIu64 "},", r->samples,
           r->measured);
    if (o->idle > 0)
        json_idle(o, r);
    json_calls(&r->calls);
    printf("\"cpu_s_per_gb\":{");
    json_num("initiator", per_gb(r->cpu_here_s, r->bytes), ",");
    json_num("target", per_gb(r->cpu_target_s, r->bytes), "},");
    if (o->mode != MODE_MEMCPY) {
        printf("\"notifications\":{\"sent\":%" PRIu64
               ",\"target_counted\":%" PRIu64 "},",
               r->notified, r->target_notified);
        printf("\"target_verdict\":%u,", r->verdict);
    }
    json_str("validation",
             !o->validate ? "off" : r->local_check == 1 ||
                                    (r->verdict & VERDICT_DATA) ? "failed"
                                                                : "ok",
             ",");
    printf("\"ok\":%s}%s", r->ok ? "true" : "false", sep);
}

void print_json(const struct options *o,
                const struct ferry_context_info *info,
                const struct result *rs, size_t n, bool ok)
{
    printf("{");
    json_str("tool", "ferry_bench", ",");
    json_str("version", ferry_version_string(), ",");
    json_str("mode", mode_name(o->mode), ",");
    json_str("op", what_moves(o), ",");
    json_str("provider", info ? info->provider : NULL, ",");
    json_str("fabric", info ? info->fabric : NULL, ",");
    json_str("domain", info ? info->domain : NULL, ",");
    printf("\"rails\":%u,", info ? info->nrails : 0);
    if (info != NULL)
        printf("\"tx_depth\":%zu,\"max_msg_size\":%zu,\"mr_mode\":%u,",
               info->tx_depth, info->max_msg_size, info->mr_mode);
    json_str("mem", o->cuda ? o->mem_text : "host", ",");
    json_str("target_mem", o->target_cuda ? o->target_mem_text : "host", ",");
    json_str("device_path", info && o->cuda ? info->device_path : NULL, ",");
    printf("\"batch_size\":%" PRIu64 ",\"threads\":%" PRIu64
           ",\"inflight\":%" PRIu64 ",\"buffer_size\":%" PRIu64 ",",
           o->batch, o->threads, o->inflight, o->buffer);
    json_num("duration_s", o->iterations ? -1 : o->duration, ",");
    printf("\"iterations\":%" PRIu64 ",", o->iterations);
    json_num("warmup_s", o->warmup, ",");
    printf("\"notify\":%s,\"validate\":%s,\"pingpong\":%s,"
           "\"descending\":%s,\"same_block\":%s,\"target_polls\":%s,"
           "\"initiator_thread\":%s,\"event_loop\":%s,\"pin\":%s,"
           "\"idle_peers\":%" PRIu64 ",",
           o->notify ? "true" : "false", o->validate ? "true" : "false",
           o->pingpong ? "true" : "false", o->descending ? "true" : "false",
           o->same_block ? "true" : "false", o->target_polls ? "true" : "false",
           o->initiator_thread ? "true" : "false",
           o->event_loop ? "true" : "false", o->pin ? "true" : "false",
           o->idle_peers);
    if (n > 0 && o->mode != MODE_MEMCPY) {
        printf("\"registration_ms\":{");
        json_num("initiator", rs[0].reg_ms_here, ",");
        json_num("target", rs[0].reg_ms_target, "},");
        printf("\"registration_ms_per_gb\":{");
        json_num("initiator", per_gb(rs[0].reg_ms_here, rs[0].reg_bytes), ",");
        json_num("target", per_gb(rs[0].reg_ms_target, rs[0].reg_bytes), "},");
        json_num("connection_ms", rs[0].conn_ms, ",");
    }
    printf("\"runs\":[");
    for (size_t i = 0; i < n; i++)
        json_run(o, &rs[i], i + 1 < n ? "," : "");
    printf("],\"ok\":%s}\n", ok ? "true" : "false");
    fflush(stdout);
}

/* Before run i of a sweep: its step of the progress line (on a terminal). */
void report_start_run(const struct options *o, size_t i)
{
    char label[32];

    if (o->sweep_lo == 0)
        return;
    if (i == 0)
        progress_begin(sweep_count(o));
    /* --iterations: how long a run takes is not known beforehand. */
    progress_step(i, fmt_flag(label, sizeof(label), block_of_run(o, i)),
                  o->iterations != 0 ? 0 : o->warmup + o->duration);
}

/* After each run: the summary (or a table row), the CSV row. */
void report_run(const struct options *o, FILE *csv, size_t i,
                const struct result *r)
{
    progress_clear(); /* the row starts at the left margin */
    if (o->idle > 0) {
        print_idle(o, r);
    } else if (o->sweep_lo == 0) {
        print_long(o, r);
    } else {
        if (i == 0)
            print_row_header(o);
        print_row(o, r);
        if (!r->ok) {
            print_checks(o, r);
            fflush(g_out);
        }
    }
    csv_row(csv, r);
}

/* After the last run of a sweep: the progress line goes, --plot draws the
 * n runs (over: the provider, NULL for --memcpy).  Returns 1 when the plot
 * failed. */
int report_sweep_done(const struct options *o, const char *over,
                      const struct result *rs, size_t n)
{
    if (o->sweep_lo == 0)
        return 0;
    progress_end();
    return plot_sweep(o, over, rs, n);
}
