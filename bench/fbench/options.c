/*
 * ferry_bench: command-line options: parsing, defaults that depend on each
 * other, and every check made before anything is allocated.
 */
#include "options.h"


#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Upper bounds of --threads, --batch-size and --inflight. */
#define MAX_THREADS 64
#define MAX_BATCH 65536
#define MAX_INFLIGHT 1024
/* Upper bound of --idle-peers. */
#define MAX_IDLE_PEERS 100000
/* Upper bound of --idle-gaps. */
#define MAX_IDLE_GAPS 100000
/* --idle: gaps, their length and warm writes, by default. */
#define DEFAULT_IDLE_GAPS 10
#define DEFAULT_GAP_LENGTH 1.0
#define DEFAULT_WARM_WRITES 1000
/* The shortest idle window: a few of the scheduler's ticks. */
#define MIN_IDLE_S 0.1

static bool parse_size(const char *flag, const char *s, uint64_t *out)
{
    const char *p = s;
    uint64_t v = 0;
    unsigned shift = 0;

    if (!isdigit((unsigned char)*p))
        goto bad;
    for (; isdigit((unsigned char)*p); p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            goto too_large;
        v = v * 10 + d;
    }
    switch (*p) {
    case 'k': case 'K': shift = 10; p++; break;
    case 'm': case 'M': shift = 20; p++; break;
    case 'g': case 'G': shift = 30; p++; break;
    default: break;
    }
    if (*p != '\0')
        goto bad;
    if (v > (UINT64_MAX >> shift))
        goto too_large;
    if (v == 0) {
        complain("%s %s: must be at least 1 byte", flag, s);
        return false;
    }
    *out = v << shift;
    return true;
bad:
    complain("%s %s: not a size; use a number with an optional K, M or G",
             flag, s);
    return false;
too_large:
    complain("%s %s: too large (more than 2^64 bytes)", flag, s);
    return false;
}

static bool parse_uint(const char *flag, const char *s, uint64_t lo,
                       uint64_t hi, uint64_t *out)
{
    uint64_t v = 0;
    const char *p = s;

    if (!isdigit((unsigned char)*p))
        goto bad;
    for (; isdigit((unsigned char)*p); p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            goto range;
        v = v * 10 + d;
    }
    if (*p != '\0')
        goto bad;
    if (v < lo || v > hi)
        goto range;
    *out = v;
    return true;
bad:
    complain("%s %s: not a whole number", flag, s);
    return false;
range:
    complain("%s %s: must be between %" PRIu64 " and %" PRIu64, flag, s, lo,
             hi);
    return false;
}

/* "5", "0.5", "5s", "500ms". */
static bool parse_seconds(const char *flag, const char *s, bool zero_ok,
                          double *out)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(s, &end);
    if (end == s || errno != 0 || !isdigit((unsigned char)s[0]))
        goto bad;
    if (strcmp(end, "ms") == 0)
        v /= 1000;
    else if (strcmp(end, "s") != 0 && *end != '\0')
        goto bad;
    if (!(v <= 86400) || (v <= 0 && !zero_ok)) {
        complain("%s %s: must be %s 0 and at most one day", flag, s,
                 zero_ok ? "at least" : "more than");
        return false;
    }
    *out = v;
    return true;
bad:
    complain("%s %s: not a number of seconds (e.g. 5, 0.5 or 500ms)", flag,
             s);
    return false;
}

static bool is_pow2(uint64_t v)
{
    return v != 0 && (v & (v - 1)) == 0;
}

static bool parse_sweep(const char *s, struct options *o)
{
    const char *colon = strchr(s, ':');
    char lo[64];

    if (colon == NULL || (size_t)(colon - s) >= sizeof(lo)) {
        complain("--sweep %s: give LO:HI, e.g. 4K:64M", s);
        return false;
    }
    memcpy(lo, s, (size_t)(colon - s));
    lo[colon - s] = '\0';
    if (!parse_size("--sweep", lo, &o->sweep_lo) ||
        !parse_size("--sweep", colon + 1, &o->sweep_hi))
        return false;
    if (!is_pow2(o->sweep_lo) || !is_pow2(o->sweep_hi)) {
        complain("--sweep %s: both ends must be powers of two (e.g. 4K:64M)",
                 s);
        return false;
    }
    if (o->sweep_lo > o->sweep_hi) {
        complain("--sweep %s: the first size is larger than the second", s);
        return false;
    }
    o->sweep_text = s;
    return true;
}

/* gnuplot's terminal follows the file's name: svg or pngcairo. */
static bool parse_plot(const char *s, struct options *o)
{
    size_t n = strlen(s);

    if (n < 5 || (strcmp(s + n - 4, ".svg") != 0 &&
                  strcmp(s + n - 4, ".png") != 0)) {
        complain("--plot %s: name a .svg or .png file", s);
        return false;
    }
    o->plot = s;
    return true;
}

/* host, cuda or cuda:N for flag (--mem, --target-mem). */
static bool parse_mem(const char *flag, const char *s, bool *cuda,
                      unsigned *device, const char **text)
{
    uint64_t dev = 0;
    char what[32];

    *text = s;
    if (strcmp(s, "host") == 0) {
        *cuda = false;
        return true;
    }
    snprintf(what, sizeof(what), "%s cuda:", flag);
    if (strncmp(s, "cuda", 4) == 0 &&
        (s[4] == '\0' ||
         (s[4] == ':' && parse_uint(what, s + 5, 0, 1023, &dev)))) {
        *cuda = true;
        *device = (unsigned)dev;
        return true;
    }
    if (strncmp(s, "cuda:", 5) != 0)
        complain("%s %s: use host, cuda or cuda:N", flag, s);
    return false;
}

static void usage(FILE *f)
{
    fprintf(f,
"usage: ferry_bench [MODE] [OPTIONS]\n"
"\n"
"Modes:\n"
"  --loopback              target and initiator as two processes on this\n"
"                          machine (the default)\n"
"  --target                serve one initiator: listen on --port, publish the\n"
"                          buffer, verify and report; exits after the session\n"
"  --initiator HOST[:PORT] connect to a --target and drive the transfers\n"
"  --target --metadata URL --name NAME, --initiator NAME --metadata URL\n"
"                          meet through a metadata service instead\n"
"                          (etcd://HOST:PORT/PREFIX...; or FERRY_METADATA)\n"
"  --memcpy                the reference: single-thread memcpy of --block-size\n"
"                          blocks over a --buffer-size region\n"
"  --fanout N              ferry_fanout of --block-size bytes to N receiver\n"
"                          processes on this host (their progress threads\n"
"                          forward); every receiver checks every byte; with\n"
"                          --fanout-chunk SIZE and --fanout-degree D (1: a\n"
"                          chain; ferry picks both by default)\n"
"\n"
"Transfers (the target and the initiator must agree on --pingpong and should\n"
"be given the same sizes):\n"
"  --op write|read         one-sided write into, or read from, the target (write)\n"
"  --block-size SIZE       bytes per iov (1M; 8 with --pingpong or --idle);\n"
"                          K, M, G\n"
"  --batch-size N          iovs per request (1)\n"
"  --descending            the iovs of a request in descending order, so that\n"
"                          none continues the one before: one operation per\n"
"                          block (by default neighbours go as one, up to the\n"
"                          operation size)\n"
"  --same-block            every request of a thread moves the same blocks, as\n"
"                          fi_rma_bw and ucx_perftest do (the data then stays\n"
"                          in the CPU's caches; --buffer-size need not hold\n"
"                          --inflight requests; not with --validate)\n"
"  --regions N             the target registers its buffer as N regions of\n"
"                          equal size (1) and each block goes into the one it\n"
"                          falls in, as KV blocks go to a region per layer or\n"
"                          to a K and a V cache: with --inflight 1 and the\n"
"                          default buffer, a request's blocks make N runs\n"
"  --threads N             initiator threads, each with its own slice (1)\n"
"  --inflight N            requests kept in flight per thread (4)\n"
"  --buffer-size SIZE      registered on each side; each thread cycles through\n"
"                          its slice (default: block x batch x threads x\n"
"                          inflight, for the largest block of a sweep)\n"
"  --notify                every request carries a notification; the target\n"
"                          counts them and the counts are compared at the end\n"
"  --validate              write: the target checks every byte of its buffer;\n"
"                          read: the initiator checks every byte it read\n"
"  --pingpong              latency: write + notification there, the target\n"
"                          answers the same way; reports half the round trip\n"
"  --idle SECONDS          (--loopback or --initiator; a plain --target serves\n"
"                          it) what a target at rest costs: its process's CPU\n"
"                          per idle second and wake-ups per second over an\n"
"                          idle window of SECONDS; and the latency of a write\n"
"                          of --block-size (8) bytes with a notification,\n"
"                          post to completion, warm (--iterations, 1000) and\n"
"                          the first after each of --idle-gaps N (10) gaps\n"
"                          of --gap-length SECONDS (1)\n"
"  --mem host|cuda[:N]     memory of the buffers (host); cuda without a GPU:\n"
"                          set FERRY_SIM_DEVICES=1 (ferry's simulated device)\n"
"  --target-mem host|cuda[:N]  --loopback: the target's buffer (as --mem)\n"
"  --target-polls          the target's own thread busy-polls for progress, as\n"
"                          rma_raw's does, instead of ferry's progress thread\n"
"                          (which sleeps on the CQ's descriptor when idle);\n"
"                          with --idle through the gaps and the window too:\n"
"                          the first write after a gap into a target that\n"
"                          never rests, at a core's cost\n"
"  --initiator-thread      the initiator's context runs ferry's progress thread\n"
"                          too, as one that is also a target, or waits on\n"
"                          ferry_context_fd, does\n"
"  --event-loop            with --initiator-thread: when no request has ended,\n"
"                          the initiator arms ferry_context_fd and sleeps on\n"
"                          it, as an event loop does, instead of testing\n"
"                          again (one thread)\n"
"  --pin                   --loopback: the initiator on CPU 0, the target on\n"
"                          CPU 1 (and their threads), as rma_raw -P: the\n"
"                          scheduler cannot put both sides on one CPU\n"
"  --idle-peers N          the initiator also adds N peers that carry nothing\n"
"                          (its own address), as a context serving many peers\n"
"                          has them: what they cost the busy one (0)\n"
"  --call-times            a stream's time per request split: inside\n"
"                          ferry_write/read, ferry_req_test and\n"
"                          ferry_req_close, and the rest (rma_raw -C splits\n"
"                          raw libfabric's the same way)\n"
"\n"
"Length of a run:\n"
"  --duration SECONDS      measured time (5; with --sweep the total, split over\n"
"                          the sizes; default 1 per size)\n"
"  --iterations N          instead: requests per thread (round trips with\n"
"                          --pingpong, copies with --memcpy)\n"
"  --warmup SECONDS        unmeasured time before each run (0.5)\n"
"  --timeout MS            deadline of every request and pong (30000)\n"
"  --time-limit SECONDS    bound on the whole session (default: derived)\n"
"  --sweep LO:HI           one run per power-of-two block size, LO to HI\n"
"\n"
"Fabric:\n"
"  --provider NAME         e.g. \"tcp;ofi_rxm\", shm (default: ferry chooses)\n"
"  --domain NAME           e.g. lo\n"
"  --rails N               domains used side by side (1)\n"
"  --tx-depth N            cap on operations in flight per rail (the\n"
"                          provider's); both sides\n"
"  --max-op SIZE           largest operation ferry posts (config.max_msg_size;\n"
"                          default 1M or the provider's limit)\n"
"  --port N                bootstrap port of --target and --initiator (%d;\n"
"                          0: the target takes a free one and prints it)\n"
"\n"
"Output (progress goes to stderr once a second; a sweep on a terminal\n"
"redraws one line in place instead):\n"
"  --json                  one JSON object on stdout at the end (the human\n"
"                          summary then goes to stderr)\n"
"  --csv FILE              one row per block size: size, GB/s, ops/s, latency\n"
"                          p50/p99/p999 in us, mean in us\n"
"  --plot FILE.svg|FILE.png  with --sweep: GB/s and p50 latency against the\n"
"                          block size, drawn by gnuplot once the sweep is\n"
"                          done (without gnuplot: a message, no plot)\n"
"  --metrics FILE          each side's metrics at the end, as Prometheus text\n"
"                          (a loopback run: both in FILE, label side=...)\n"
"\n"
"ops are blocks (iovs); latency is per request, post to completion (half the\n"
"round trip with --pingpong; with --duration one request in 8 is timed).\n"
"Exit status: 0 success, 1 a failed transfer or check, 2 bad usage, 3 the\n"
"time bound passed.\n",
            DEFAULT_PORT);
}

enum flag_id {
    F_LOOPBACK, F_TARGET, F_INITIATOR, F_MEMCPY, F_PROVIDER, F_DOMAIN,
    F_RAILS, F_OP, F_BLOCK, F_BATCH, F_THREADS, F_INFLIGHT, F_DURATION,
    F_ITERATIONS, F_WARMUP, F_BUFFER, F_MEM, F_NOTIFY, F_VALIDATE, F_JSON,
    F_SWEEP, F_CSV, F_PINGPONG, F_PORT, F_TIMEOUT, F_TIME_LIMIT, F_TX_DEPTH,
    F_TARGET_MEM, F_DESCENDING, F_SAME_BLOCK, F_TARGET_POLLS,
    F_INITIATOR_THREAD, F_EVENT_LOOP, F_PIN, F_MAX_OP,
    F_METADATA, F_NAME, F_FANOUT, F_FANOUT_CHUNK, F_FANOUT_DEGREE,
    F_IDLE_PEERS, F_IDLE, F_IDLE_GAPS, F_GAP_LENGTH, F_PLOT, F_METRICS,
    F_CALL_TIMES, F_REGIONS, F_HELP,
};

static const struct flag {
    const char *name;
    bool value;
    enum flag_id id;
} flag_table[] = {
    {"--loopback", false, F_LOOPBACK},   {"--target", false, F_TARGET},
    {"--initiator", true, F_INITIATOR},  {"--memcpy", false, F_MEMCPY},
    {"--provider", true, F_PROVIDER},    {"--domain", true, F_DOMAIN},
    {"--rails", true, F_RAILS},          {"--op", true, F_OP},
    {"--block-size", true, F_BLOCK},     {"--batch-size", true, F_BATCH},
    {"--threads", true, F_THREADS},      {"--inflight", true, F_INFLIGHT},
    {"--duration", true, F_DURATION},    {"--iterations", true, F_ITERATIONS},
    {"--warmup", true, F_WARMUP},        {"--buffer-size", true, F_BUFFER},
    {"--mem", true, F_MEM},              {"--target-mem", true, F_TARGET_MEM},
    {"--notify", false, F_NOTIFY},       {"--descending", false, F_DESCENDING},
    {"--same-block", false, F_SAME_BLOCK},
    {"--regions", true, F_REGIONS},
    {"--target-polls", false, F_TARGET_POLLS},
    {"--initiator-thread", false, F_INITIATOR_THREAD},
    {"--event-loop", false, F_EVENT_LOOP},
    {"--pin", false, F_PIN},             {"--idle-peers", true, F_IDLE_PEERS},
    {"--call-times", false, F_CALL_TIMES},
    {"--validate", false, F_VALIDATE},   {"--json", false, F_JSON},
    {"--sweep", true, F_SWEEP},          {"--csv", true, F_CSV},
    {"--plot", true, F_PLOT},            {"--metrics", true, F_METRICS},
    {"--pingpong", false, F_PINGPONG},   {"--port", true, F_PORT},
    {"--timeout", true, F_TIMEOUT},      {"--time-limit", true, F_TIME_LIMIT},
    {"--tx-depth", true, F_TX_DEPTH},    {"--help", false, F_HELP},
    {"--max-op", true, F_MAX_OP},
    {"--metadata", true, F_METADATA},    {"--name", true, F_NAME},
    {"--fanout", true, F_FANOUT},
    {"--fanout-chunk", true, F_FANOUT_CHUNK},
    {"--fanout-degree", true, F_FANOUT_DEGREE},
    {"--idle", true, F_IDLE},            {"--idle-gaps", true, F_IDLE_GAPS},
    {"--gap-length", true, F_GAP_LENGTH},
    {"-h", false, F_HELP},
};

static bool set_mode(struct options *o, enum mode m, const char *flag)
{
    if (o->mode_set && o->mode != m) {
        complain("%s: only one of --loopback, --target, --initiator, --fanout and "
                 "--memcpy may be given",
                 flag);
        return false;
    }
    o->mode = m;
    o->mode_set = true;
    return true;
}

/* One flag with its value (NULL for switches).  False: already reported. */
static bool apply_flag(struct options *o, const struct flag *f,
                       const char *v)
{
    uint64_t u;

    switch (f->id) {
    case F_LOOPBACK: return set_mode(o, MODE_LOOPBACK, f->name);
    case F_TARGET: return set_mode(o, MODE_TARGET, f->name);
    case F_MEMCPY: return set_mode(o, MODE_MEMCPY, f->name);
    case F_INITIATOR:
        o->initiator_addr = v;
        return set_mode(o, MODE_INITIATOR, f->name);
    case F_METADATA: o->metadata = v; return true;
    case F_NAME: o->name = v; return true;
    case F_PROVIDER: o->provider = v; return true;
    case F_DOMAIN: o->domain = v; return true;
    case F_RAILS:
        if (!parse_uint(f->name, v, 1, 8, &u))
            return false;
        o->rails = (unsigned)u;
        return true;
    case F_OP:
        if (strcmp(v, "write") == 0 || strcmp(v, "read") == 0) {
            o->read = v[0] == 'r';
            return true;
        }
        complain("--op %s: use write or read", v);
        return false;
    case F_BLOCK:
        o->block_set = true;
        return parse_size(f->name, v, &o->block);
    case F_BATCH:
        o->batch_set = true;
        return parse_uint(f->name, v, 1, MAX_BATCH, &o->batch);
    case F_THREADS:
        o->threads_set = true;
        return parse_uint(f->name, v, 1, MAX_THREADS, &o->threads);
    case F_INFLIGHT:
        o->inflight_set = true;
        return parse_uint(f->name, v, 1, MAX_INFLIGHT, &o->inflight);
    case F_DURATION:
        o->duration_set = true;
        return parse_seconds(f->name, v, false, &o->duration);
    case F_ITERATIONS:
        return parse_uint(f->name, v, 1, UINT64_C(1) << 40, &o->iterations);
    case F_WARMUP: return parse_seconds(f->name, v, true, &o->warmup);
    case F_BUFFER:
        o->buffer_set = true;
        return parse_size(f->name, v, &o->buffer);
    case F_MEM:
        return parse_mem(f->name, v, &o->cuda, &o->cuda_device, &o->mem_text);
    case F_TARGET_MEM:
        o->target_mem_set = true;
        return parse_mem(f->name, v, &o->target_cuda, &o->target_cuda_device,
                         &o->target_mem_text);
    case F_NOTIFY: o->notify = true; return true;
    case F_DESCENDING: o->descending = true; return true;
    case F_SAME_BLOCK: o->same_block = true; return true;
    case F_REGIONS:
        return parse_uint(f->name, v, 1, MAX_REGIONS, &o->regions);
    case F_TARGET_POLLS: o->target_polls = true; return true;
    case F_INITIATOR_THREAD: o->initiator_thread = true; return true;
    case F_EVENT_LOOP: o->event_loop = true; return true;
    case F_PIN: o->pin = true; return true;
    case F_CALL_TIMES: o->call_times = true; return true;
    case F_IDLE_PEERS:
        return parse_uint(f->name, v, 0, MAX_IDLE_PEERS, &o->idle_peers);
    case F_IDLE: return parse_seconds(f->name, v, false, &o->idle);
    case F_IDLE_GAPS:
        return parse_uint(f->name, v, 1, MAX_IDLE_GAPS, &o->idle_gaps);
    case F_GAP_LENGTH:
        return parse_seconds(f->name, v, false, &o->gap_length);
    case F_VALIDATE: o->validate = true; return true;
    case F_JSON: o->json = true; return true;
    case F_PINGPONG: o->pingpong = true; return true;
    case F_SWEEP: return parse_sweep(v, o);
    case F_CSV: o->csv = v; return true;
    case F_PLOT: return parse_plot(v, o);
    case F_METRICS: o->metrics = v; return true;
    case F_PORT:
        if (!parse_uint(f->name, v, 0, 65535, &u))
            return false;
        o->port = (unsigned)u;
        o->port_set = true;
        return true;
    case F_TIMEOUT:
        if (!parse_uint(f->name, v, 1, 3600000, &u))
            return false;
        o->timeout_ms = (int)u;
        return true;
    case F_TIME_LIMIT:
        return parse_seconds(f->name, v, false, &o->time_limit);
    case F_TX_DEPTH:
        return parse_uint(f->name, v, 1, 1u << 20, &o->tx_depth);
    case F_MAX_OP: return parse_size(f->name, v, &o->max_op);
    case F_FANOUT:
        return set_mode(o, MODE_FANOUT, f->name) &&
               parse_uint(f->name, v, 1, MAX_FANOUT, &o->fanout);
    case F_FANOUT_CHUNK: return parse_size(f->name, v, &o->fanout_chunk);
    case F_FANOUT_DEGREE:
        return parse_uint(f->name, v, 1, MAX_FANOUT, &o->fanout_degree);
    case F_HELP:
        usage(stdout);
        exit(0);
    }
    return false;
}

/* "--flag VALUE" and "--flag=VALUE". */
bool parse_args(int argc, char **argv, struct options *o)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *eq = strchr(arg, '='), *v = NULL;
        size_t len = eq != NULL ? (size_t)(eq - arg) : strlen(arg);
        const struct flag *f = NULL;

        for (size_t k = 0; k < sizeof(flag_table) / sizeof(flag_table[0]); k++)
            if (strlen(flag_table[k].name) == len &&
                strncmp(flag_table[k].name, arg, len) == 0)
                f = &flag_table[k];
        if (f == NULL) {
            complain("%s: unknown option; see --help", arg);
            return false;
        }
        if (f->value) {
            v = eq != NULL ? eq + 1 : i + 1 < argc ? argv[++i] : NULL;
            if (v == NULL) {
                complain("%s needs a value; see --help", f->name);
                return false;
            }
        } else if (eq != NULL) {
            complain("%s takes no value", f->name);
            return false;
        }
        if (!apply_flag(o, f, v))
            return false;
    }
    return true;
}

size_t sweep_count(const struct options *o)
{
    size_t n = 0;

    if (o->sweep_lo == 0)
        return 1;
    for (uint64_t b = o->sweep_lo; b <= o->sweep_hi && b != 0; b *= 2)
        n++;
    return n;
}

/* The block of run i (the sweep's i-th size). */
uint64_t block_of_run(const struct options *o, size_t i)
{
    return o->sweep_lo != 0 ? o->sweep_lo << i : o->block;
}

/* What a run of one write at a time (--pingpong, --idle) cannot take. */
static const char *one_write_conflict(const struct options *o)
{
    if (o->read)
        return "--op read";
    if (o->threads_set && o->threads != 1)
        return "--threads";
    if (o->batch_set && o->batch != 1)
        return "--batch-size";
    if (o->inflight_set)
        return "--inflight";
    if (o->validate)
        return "--validate";
    if (o->notify)
        return "--notify (every write carries one anyway)";
    return NULL;
}

/* The modes that are neither the initiator's streams nor an idle run, as
 * an error names them; NULL: none. */
static const char *other_mode(const struct options *o)
{
    if (o->mode == MODE_MEMCPY)
        return "--memcpy";
    if (o->mode == MODE_FANOUT)
        return "--fanout";
    if (o->pingpong)
        return "--pingpong";
    return NULL;
}

/* What an idle run cannot take besides those. */
static const char *idle_conflict(const struct options *o)
{
    const char *bad = other_mode(o);

    if (bad != NULL)
        return bad;
    if (o->same_block)
        return "--same-block";
    if (o->sweep_lo != 0)
        return "--sweep";
    if (o->idle_peers != 0)
        return "--idle-peers (they would be the initiator's, not the "
               "target's)";
    if (o->csv != NULL)
        return "--csv (--json has its numbers)";
    return one_write_conflict(o);
}

/* True when bad is NULL; else says that option does not go with bad, and
 * why, and returns false. */
static bool goes_with(const char *option, const char *bad, const char *why)
{
    if (bad == NULL)
        return true;
    return !complain("%s does not go with %s: %s", option, bad, why);
}

/* --idle: a plain target at rest, then single writes into it. */
static bool check_idle(const struct options *o)
{
    if (o->mode == MODE_TARGET &&
        (o->idle > 0 || o->idle_gaps != 0 || o->gap_length != 0))
        return !complain("--idle, --idle-gaps and --gap-length are the "
                         "initiator's: a plain --target serves an idle run "
                         "(with ferry's progress thread, which is what it "
                         "measures)");
    if (o->idle == 0) {
        if (o->idle_gaps != 0 || o->gap_length != 0)
            return !complain("--idle-gaps and --gap-length go with --idle "
                             "SECONDS");
        return true;
    }
    if (o->idle < MIN_IDLE_S)
        return !complain("--idle: %.3g s is too short to measure a rest; "
                         "give at least %.1f s",
                         o->idle, MIN_IDLE_S);
    return goes_with("--idle", idle_conflict(o),
                     "it measures a target at rest, and single writes into "
                     "it");
}

/* What keeps a run from being one of the initiator's streams, as an
 * error names it (target: what to say of --target); NULL: nothing. */
static const char *not_a_stream(const struct options *o, const char *target)
{
    if (o->mode == MODE_TARGET)
        return target;
    if (o->idle > 0)
        return "--idle";
    return other_mode(o);
}

/* --call-times times the initiator's streams of requests only. */
static bool check_call_times(const struct options *o)
{
    const char *bad;

    if (!o->call_times)
        return true;
    bad = not_a_stream(o, "--target (the initiator times its calls)");
    if (bad == NULL && o->sweep_lo != 0)
        bad = "--sweep (time one --block-size)";
    return goes_with("--call-times", bad,
                     "it splits the time of a stream of writes or reads");
}

/* --initiator-thread: the initiator's streams only; --event-loop: with
 * it, in one thread. */
static bool check_initiator_thread(const struct options *o)
{
    if (o->event_loop && !o->initiator_thread)
        return !complain("--event-loop goes with --initiator-thread: the "
                         "context's descriptor needs its progress thread");
    if (o->event_loop && o->threads_set && o->threads != 1)
        return !complain("--event-loop waits in one thread: drop --threads");
    if (!o->initiator_thread)
        return true;
    return goes_with("--initiator-thread",
                     not_a_stream(o, "--target (the target runs one "
                                     "already)"),
                     "it gives the initiator of a stream a progress thread");
}

static bool check_conflicts(const struct options *o)
{
    const char *bad = NULL;

    if (!check_idle(o) || !check_call_times(o) || !check_initiator_thread(o))
        return false;

    if (o->pingpong) {
        bad = o->mode == MODE_MEMCPY ? "--memcpy" : one_write_conflict(o);
        if (!goes_with("--pingpong", bad,
                       "it has one write in flight each way"))
            return false;
    }
    if (o->mode == MODE_MEMCPY) {
        if (o->threads_set && o->threads != 1)
            bad = "--threads";
        else if (o->batch_set && o->batch != 1)
            bad = "--batch-size";
        else if (o->notify)
            bad = "--notify";
        else if (o->read)
            bad = "--op read";
        if (bad != NULL)
            return !complain("--memcpy copies one block at a time in one "
                             "thread: drop %s",
                             bad);
    }
    if (o->mode == MODE_FANOUT) {
        if (o->read)
            bad = "--op read";
        else if (o->pingpong)
            bad = "--pingpong";
        else if (o->threads_set && o->threads != 1)
            bad = "--threads";
        else if (o->batch_set && o->batch != 1)
            bad = "--batch-size";
        else if (o->sweep_lo != 0)
            bad = "--sweep";
        else if (o->cuda || o->target_mem_set)
            bad = "--mem cuda / --target-mem (host memory only here)";
        if (bad != NULL)
            return !complain("--fanout moves one --block-size region from "
                             "host memory to every receiver, and checks "
                             "every byte itself: drop %s",
                             bad);
    } else if (o->fanout_chunk != 0 || o->fanout_degree != 0)
        return !complain("--fanout-chunk and --fanout-degree go with "
                         "--fanout N");
    if (o->same_block && (o->pingpong || o->validate ||
                          o->mode == MODE_MEMCPY))
        return !complain("--same-block does not go with %s: %s",
                         o->pingpong   ? "--pingpong"
                         : o->validate ? "--validate"
                                       : "--memcpy",
                         o->validate ? "every request overwrites the same "
                                       "blocks, so there is nothing to check"
                                     : "it applies to the streams only (for "
                                       "--memcpy, give --buffer-size the "
                                       "block size)");
    if (o->sweep_lo != 0 && o->block_set)
        return !complain("--sweep sets the block sizes: drop --block-size");
    if (o->duration_set && o->iterations != 0)
        return !complain("give --duration or --iterations, not both");
    if (o->idle_peers != 0 && o->mode != MODE_LOOPBACK &&
        o->mode != MODE_INITIATOR)
        return !complain("--idle-peers are the initiator's: give it to "
                         "--initiator (or to the default loopback run)");
    if (o->port_set && o->mode == MODE_MEMCPY)
        return !complain("--port means nothing with --memcpy");
    if (o->port_set && o->port == 0 && o->mode == MODE_INITIATOR)
        return !complain("--port 0 lets the target take a free port: give "
                         "the initiator the one the target printed");
    if (o->mode == MODE_TARGET && (o->json || o->csv != NULL ||
                                   o->plot != NULL))
        return !complain("--json, --csv and --plot are the initiator's; the "
                         "target prints a line per run");
    if (o->plot != NULL && o->sweep_lo == 0)
        return !complain("--plot draws a sweep: give --sweep LO:HI too");
    return true;
}

/*
 * batch x block x threads x inflight must fit in the buffer (computed
 * before anything is allocated).  The default buffer is exactly that.
 */
static bool check_buffer(struct options *o)
{
    uint64_t block = o->sweep_lo != 0 ? o->sweep_hi : o->block, need;
    char b1[32], b2[32], b3[32], b4[32];
    const char *bflag = o->sweep_lo != 0 ? "--sweep (largest block)"
                                         : "--block-size";

    if (__builtin_mul_overflow(o->batch, block, &need) ||
        __builtin_mul_overflow(need, o->threads, &need) ||
        __builtin_mul_overflow(need, o->same_block ? 1 : o->inflight, &need))
        return !complain("--batch-size %" PRIu64 " × %s %s × --threads "
                         "%" PRIu64 " × --inflight %" PRIu64
                         " overflows 64 bits: lower one of them",
                         o->batch, bflag, fmt_flag(b1, sizeof(b1), block),
                         o->threads, o->inflight);
    if (!o->buffer_set) {
        o->buffer = need;
        return true;
    }
    if (need <= o->buffer)
        return true;
    return !complain("--batch-size %" PRIu64 " × %s %s × --threads %" PRIu64
                     " × --inflight %" PRIu64 " = %s does not fit in "
                     "--buffer-size %s: raise --buffer-size to at least %s "
                     "or lower one of the others",
                     o->batch, bflag, fmt_flag(b1, sizeof(b1), block),
                     o->threads, o->inflight, fmt_iec(b2, sizeof(b2), need),
                     fmt_iec(b3, sizeof(b3), o->buffer),
                     fmt_flag(b4, sizeof(b4), need));
}

/* Both buffers (loopback, memcpy) must fit in this machine's memory. */
static bool check_memory(const struct options *o)
{
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    uint64_t phys, need;
    unsigned copies = o->mode == MODE_LOOPBACK || o->mode == MODE_MEMCPY
                          ? 2 : 1;
    char b1[32], b2[32];

    if (pages <= 0 || psize <= 0)
        return true;
    phys = (uint64_t)pages * (uint64_t)psize;
    if (__builtin_mul_overflow(o->buffer, copies, &need) ||
        need > phys / 10 * 9)
        return !complain("--buffer-size %s: %s needs %u such buffer%s but "
                         "this machine has %s of memory",
                         fmt_flag(b1, sizeof(b1), o->buffer),
                         o->mode == MODE_LOOPBACK ? "loopback"
                         : o->mode == MODE_MEMCPY ? "--memcpy"
                                                  : "this side",
                         copies, copies > 1 ? "s" : "",
                         fmt_iec(b2, sizeof(b2), phys));
    return true;
}

/* --regions N: a stream's option; the buffer cut in N regions that each
 * hold whole blocks. */
static bool check_regions(struct options *o)
{
    const char *bad = other_mode(o);
    char b1[32], b2[32];

    if (o->regions == 0)
        o->regions = 1;
    if (o->regions == 1)
        return true;
    if (bad == NULL && o->idle > 0)
        bad = "--idle";
    if (bad == NULL && o->sweep_lo != 0)
        bad = "--sweep";
    if (bad == NULL && (o->cuda || o->target_cuda))
        bad = "device memory";
    if (!goes_with("--regions", bad, "it cuts the target's host buffer of a "
                                     "stream of one block size"))
        return false;
    if (o->buffer % (o->regions * o->block) != 0)
        return !complain("--regions %" PRIu64 " cuts --buffer-size %s into "
                         "regions that do not hold whole blocks of %s: give "
                         "a buffer that is a multiple of %" PRIu64 " blocks",
                         o->regions, fmt_iec(b1, sizeof(b1), o->buffer),
                         fmt_iec(b2, sizeof(b2), o->block), o->regions);
    return true;
}

/* Defaults that depend on other options, then every check. */
bool resolve_options(struct options *o)
{
    size_t nruns = sweep_count(o);

    if (!check_conflicts(o))
        return false;
    if (o->metadata == NULL && o->mode != MODE_LOOPBACK)
        o->metadata = getenv("FERRY_METADATA");
    if (o->metadata != NULL && o->mode == MODE_LOOPBACK)
        return !complain("--metadata is for --target and --initiator; "
                         "--loopback meets on this host by itself");
    if (o->name != NULL && o->metadata == NULL)
        return !complain("--name %s names the target in a metadata service: "
                         "give --metadata URL too", o->name);
    if (o->name == NULL)
        o->name = "ferry-bench";
    if (o->target_mem_set && o->mode != MODE_LOOPBACK)
        return !complain("--target-mem is for --loopback; with --target or "
                         "--initiator each side gives its own --mem");
    if (o->pin && o->mode != MODE_LOOPBACK)
        return !complain("--pin is for --loopback; run --target and "
                         "--initiator under taskset -c instead");
    if (!o->target_mem_set) {
        o->target_cuda = o->cuda;
        o->target_cuda_device = o->cuda_device;
        o->target_mem_text = o->mem_text;
    }
    if (!o->block_set)
        o->block = o->pingpong || o->idle > 0 ? 8 : UINT64_C(1) << 20;
    if (o->pingpong || o->idle > 0)
        o->inflight = 1;
    if (o->idle > 0) {
        if (o->idle_gaps == 0)
            o->idle_gaps = DEFAULT_IDLE_GAPS;
        if (o->gap_length == 0)
            o->gap_length = DEFAULT_GAP_LENGTH;
        if (!o->duration_set && o->iterations == 0)
            o->iterations = DEFAULT_WARM_WRITES;
    }
    if (o->sweep_lo != 0)
        o->duration = o->duration_set ? o->duration / (double)nruns : 1.0;
    else if (!o->duration_set)
        o->duration = 5.0;
    if (o->duration < 0.05)
        return !complain("--duration: %.3g s per size is too short; give at "
                         "least %.2g s",
                         o->duration, 0.05 * (double)nruns);
    if (o->mode == MODE_INITIATOR && o->initiator_addr[0] == '\0')
        return !complain("--initiator needs HOST or HOST:PORT");
    return check_buffer(o) && check_regions(o) && check_memory(o);
}

/* Every run's length, setup and exchanges, plus one request deadline. */
double session_bound_s(const struct options *o)
{
    double per_run, runs = (double)sweep_count(o);

    if (o->time_limit > 0)
        return o->time_limit;
    per_run = o->warmup + (o->iterations != 0 ? 600 : o->duration) + 5;
    if (o->validate) /* fill, check and refill at >= 100 MB/s */
        per_run += 3 * (double)o->buffer / 100e6;
    per_run += o->idle + (double)o->idle_gaps * o->gap_length;
    return 30 + runs * per_run + o->timeout_ms / 1000.0;
}
