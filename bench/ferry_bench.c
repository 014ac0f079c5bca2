/*
 * ferry_bench: throughput and latency of ferry's one-sided RMA.
 *
 *   ferry_bench [--loopback] [OPTIONS]        both sides here, as two processes
 *   ferry_bench --target [OPTIONS]            one machine: serves an initiator
 *   ferry_bench --initiator HOST[:PORT] [...] the other: drives the transfers
 *   ferry_bench --memcpy [OPTIONS]            the reference: memcpy, one thread
 *
 * `ferry_bench --help` lists every option.  It uses only include/ferry.h.
 *
 * How a run works.  The target registers a buffer, fills it with pattern A
 * and publishes it through the bootstrap (ferry_oob_*).  The initiator
 * registers a buffer of the same size, fills it with pattern B (every byte
 * differs from A), connects and looks the target's buffer up.  Each
 * initiator thread owns a slice of the buffer cut into request-sized slots
 * (--batch-size blocks of --block-size bytes) and keeps --inflight requests
 * going, cycling through its slots; local and remote offsets are equal, so
 * a block written to the wrong place is seen at validation.
 *
 * The two sides talk through notifications: control messages with ids of
 * their own (ID_*) travel with ferry_notify_send, and every reply is
 * waited for with a deadline.  Per run:
 *
 *   initiator -> target   RUN (flags, block)   target -> READY
 *                         MEASURE ... STOP     (the measured window; the
 *                                               target reads its CPU time)
 *                         WRITTEN, BLOCK, NREQ (what the target must find)
 *   target -> initiator   T_NOTIFIED, T_WRITTEN, T_CPU, T_REG, T_BAD,
 *                         T_VERDICT
 *
 * and BOUND (the session's time bound) first, BYE last.  Data-plane
 * notifications (--notify, --pingpong) use ID_DATA, ID_PING and ID_PONG.
 *
 * FERRY_BENCH_CORRUPT=OFFSET (a self-test of the checkers) flips a byte of
 * the checked buffer before --validate checks it: the run must fail.
 *
 * Nothing hangs: every request has a deadline (--timeout), every wait for
 * the peer has one, and SIGALRM bounds the whole session (--time-limit).
 * In loopback mode the target is a child process that dies with its parent
 * (PR_SET_PDEATHSIG) and that the parent kills and reaps on any failure.
 */
#include <ferry.h>

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_PORT 18520
#define REGION_NAME "ferry_bench"
#define PONG_REGION_NAME "ferry_bench.pong"
#define ALIVE_PROBE_NAME "ferry_bench.alive?"
#define CONNECT_TIMEOUT_MS 30000
#define MAX_THREADS 64
#define MAX_BATCH 65536
#define MAX_INFLIGHT 1024
#define MAX_SIZES 64
/* Latency samples kept per run, over all threads (8 bytes each). */
#define RESERVOIR_TOTAL (1u << 22)
#define EXIT_USAGE 2
#define EXIT_TIMEOUT 3

/* Notification ids.  Data plane: */
enum {
    ID_DATA = 1, /* --notify: one per request, value 1 */
    ID_PING = 2, /* --pingpong, initiator -> target */
    ID_PONG = 3, /* --pingpong, target -> initiator */
};
/* Control, initiator -> target: */
enum {
    ID_BOUND = 16, /* value: the session's time bound in ms */
    ID_RUN,        /* value: RUN_* flags | block << 8 */
    ID_MEASURE,    /* the measured window starts */
    ID_STOP,       /* ... and ends */
    ID_WRITTEN,    /* value: blocks the initiator wrote at least once */
    ID_BLOCK,      /* value: the block size */
    ID_NREQ,       /* value: requests that carried a notification */
    ID_BYE,        /* no more runs */
};
/* Control, target -> initiator: */
enum {
    ID_T_READY = 32, /* value: 0, or VERDICT_MODE */
    ID_T_NOTIFIED,   /* notifications the target counted in the run */
    ID_T_WRITTEN,    /* blocks the target found written */
    ID_T_CPU,        /* its CPU ns in the measured window; UINT64_MAX: none */
    ID_T_REG,        /* ns ferry_mem_register took there */
    ID_T_BAD,        /* offset of the first bad byte; UINT64_MAX: none */
    ID_T_VERDICT,    /* VERDICT_* bits, 0 when all is well */
};
/* The notification that ends a pingpong run carries this value. */
#define PING_STOP (UINT64_C(1) << 40)

enum run_flags {
    RUN_PINGPONG = 1u << 0,
    RUN_READ = 1u << 1,
    RUN_VALIDATE = 1u << 2,
    RUN_NOTIFY = 1u << 3,
};

enum verdict {
    VERDICT_NOTIFY = 1u << 0,   /* counted notifications != requests */
    VERDICT_COUNTER = 1u << 1,  /* ferry's counter disagreed with its queue */
    VERDICT_DATA = 1u << 2,     /* the buffer holds a wrong byte */
    VERDICT_MODE = 1u << 3,     /* the two sides disagree on --pingpong */
    VERDICT_PINGS = 1u << 4,    /* pings counted != pings sent */
};

enum mode { MODE_LOOPBACK, MODE_TARGET, MODE_INITIATOR, MODE_MEMCPY };

struct options {
    enum mode mode;
    bool mode_set;
    const char *initiator_addr; /* HOST[:PORT] as given */
    unsigned port;
    bool port_set;
    const char *provider, *domain;
    unsigned rails;
    uint64_t tx_depth; /* 0: the provider's */
    bool read;
    uint64_t block;
    bool block_set;
    uint64_t batch, threads, inflight;
    bool batch_set, threads_set, inflight_set;
    double duration; /* per run, once resolved */
    bool duration_set;
    uint64_t iterations; /* 0: run for a duration */
    double warmup;
    uint64_t buffer;
    bool buffer_set;
    bool cuda;
    unsigned cuda_device;
    const char *mem_text;
    bool notify, validate, json, pingpong;
    uint64_t sweep_lo, sweep_hi; /* 0: no sweep */
    const char *sweep_text;
    const char *csv;
    int timeout_ms;
    double time_limit; /* 0: computed */
};

/* ======================================================================
 * Small utilities
 * ====================================================================== */

static const char *g_role = "ferry_bench";
/* Loopback: the target process, killed and reaped on any failure. */
static volatile sig_atomic_t g_child;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* CPU time of the whole process (every thread), user + system. */
static uint64_t cpu_ns(void)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    return ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) *
               1000000000u +
           ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) *
               1000u;
}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000u),
                          (long)(ns % 1000000000u)};
    nanosleep(&ts, NULL);
}

static int complain(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int complain(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "%s: ", g_role);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 1;
}

/* A ferry call failed: what we were doing, the code, and ferry's sentence. */
static int fail(const char *what, int err)
{
    fprintf(stderr, "%s: %s: %s (%s)\n", g_role, what, ferry_strerror(err),
            ferry_last_error());
    return 1;
}

/* "4 KiB", "1.5 MiB", "512 B". */
static const char *fmt_iec(char *out, size_t n, uint64_t v)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB",
                                       "PiB", "EiB"};
    double d = (double)v;
    unsigned u = 0;

    while (d >= 1024 && u < 6) {
        d /= 1024;
        u++;
    }
    if (u == 0 || (v & ((UINT64_C(1) << (10 * u)) - 1)) == 0)
        snprintf(out, n, "%.0f %s", d, unit[u]);
    else
        snprintf(out, n, "%.3g %s", d, unit[u]);
    return out;
}

/* How a size flag is written: "1M" when exact, else the number of bytes. */
static const char *fmt_flag(char *out, size_t n, uint64_t v)
{
    static const char suffix[] = "KMGTPE";
    unsigned u = 0;

    while (v != 0 && u < 6 && (v & 1023) == 0) {
        v >>= 10;
        u++;
    }
    if (u == 0)
        snprintf(out, n, "%" PRIu64, v);
    else
        snprintf(out, n, "%" PRIu64 "%c", v, suffix[u - 1]);
    return out;
}

/* "2.05 ms", "812 ns". */
static const char *fmt_ns(char *out, size_t n, double ns)
{
    if (ns < 1e3)
        snprintf(out, n, "%.0f ns", ns);
    else if (ns < 1e6)
        snprintf(out, n, "%.3g us", ns / 1e3);
    else if (ns < 1e9)
        snprintf(out, n, "%.3g ms", ns / 1e6);
    else
        snprintf(out, n, "%.3g s", ns / 1e9);
    return out;
}

/* ======================================================================
 * Data patterns
 *
 * Byte i of pattern A is byte i % 8 (little-endian) of mix(i / 8); pattern
 * B is A with every byte XORed with 0x5a, so no byte of B equals the byte
 * of A at the same offset: a byte that was not written is always seen.
 * Both depend on the offset, so a block that lands in the wrong place is
 * seen too.
 * ====================================================================== */

enum pattern { PAT_A = 0, PAT_B = 1 };
#define PAT_SEED UINT64_C(0x6665727279626e63) /* "ferrybnc" */
#define PAT_B_XOR UINT64_C(0x5a5a5a5a5a5a5a5a)

static uint64_t pattern_word(enum pattern p, uint64_t word)
{
    uint64_t x = word * UINT64_C(0x9e3779b97f4a7c15) + PAT_SEED;

    x ^= x >> 30;
    x *= UINT64_C(0xbf58476d1ce4e5b9);
    x ^= x >> 27;
    x *= UINT64_C(0x94d049bb133111eb);
    x ^= x >> 31;
    return p == PAT_B ? x ^ PAT_B_XOR : x;
}

static uint8_t pattern_byte(enum pattern p, uint64_t off)
{
    return (uint8_t)(pattern_word(p, off / 8) >> (8 * (off % 8)));
}

/* The word in memory order: byte i of the buffer is byte i % 8 of it. */
static uint64_t le_word(uint64_t w)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return __builtin_bswap64(w);
#else
    return w;
#endif
}

/* Writes pattern p into buf[off, off + len); buf is the buffer's start. */
static void pattern_fill(uint8_t *buf, uint64_t off, uint64_t len,
                         enum pattern p)
{
    uint64_t end = off + len;

    for (; off < end && off % 8 != 0; off++)
        buf[off] = pattern_byte(p, off);
    for (; off + 8 <= end; off += 8) {
        uint64_t w = le_word(pattern_word(p, off / 8));
        memcpy(buf + off, &w, 8);
    }
    for (; off < end; off++)
        buf[off] = pattern_byte(p, off);
}

/*
 * Self-test of the checkers: FERRY_BENCH_CORRUPT=OFFSET flips the byte at
 * OFFSET of the checked buffer (the target's for write, the initiator's
 * for read) just before it is checked, so the run must fail.
 */
static void corrupt_for_self_test(uint8_t *buf, uint64_t len)
{
    const char *v = getenv("FERRY_BENCH_CORRUPT");
    char *end;
    unsigned long long off;

    if (v == NULL || *v == '\0')
        return;
    off = strtoull(v, &end, 0);
    if (*end == '\0' && off < len) {
        buf[off] ^= 0x01;
        fprintf(stderr, "%s: FERRY_BENCH_CORRUPT: flipped bit 0 of byte "
                "%llu before checking\n", g_role, off);
    }
}

/* Offset of the first byte of buf[off, off + len) that is not pattern p,
 * or UINT64_MAX when all match. */
static uint64_t pattern_mismatch(const uint8_t *buf, uint64_t off,
                                 uint64_t len, enum pattern p)
{
    uint64_t end = off + len;

    for (; off < end && off % 8 != 0; off++)
        if (buf[off] != pattern_byte(p, off))
            return off;
    for (; off + 8 <= end; off += 8) {
        uint64_t w;
        memcpy(&w, buf + off, 8);
        if (w != le_word(pattern_word(p, off / 8)))
            break; /* the byte loop below finds which byte */
    }
    for (; off < end; off++)
        if (buf[off] != pattern_byte(p, off))
            return off;
    return UINT64_MAX;
}

/* ======================================================================
 * Options
 * ====================================================================== */

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

static bool parse_mem(const char *s, struct options *o)
{
    uint64_t dev = 0;

    if (strcmp(s, "host") == 0) {
        o->cuda = false;
        return true;
    }
    if (strncmp(s, "cuda", 4) == 0 &&
        (s[4] == '\0' ||
         (s[4] == ':' && parse_uint("--mem cuda:", s + 5, 0, 1023, &dev)))) {
        o->cuda = true;
        o->cuda_device = (unsigned)dev;
        o->mem_text = s;
        return true;
    }
    if (strncmp(s, "cuda:", 5) != 0)
        complain("--mem %s: use host, cuda or cuda:N", s);
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
"  --memcpy                the reference: single-thread memcpy of --block-size\n"
"                          blocks over a --buffer-size region\n"
"\n"
"Transfers (the target and the initiator must agree on --pingpong and should\n"
"be given the same sizes):\n"
"  --op write|read         one-sided write into, or read from, the target (write)\n"
"  --block-size SIZE       bytes per iov (1M; 8 with --pingpong); K, M, G\n"
"  --batch-size N          iovs per request (1)\n"
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
"  --mem host|cuda[:N]     memory of the buffers (host)\n"
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
"  --port N                bootstrap port of --target and --initiator (%d)\n"
"\n"
"Output (progress goes to stderr once a second):\n"
"  --json                  one JSON object on stdout at the end (the human\n"
"                          summary then goes to stderr)\n"
"  --csv FILE              one row per block size: size, GB/s, ops/s, latency\n"
"                          p50/p99/p999 in us, mean in us\n"
"\n"
"ops are blocks (iovs); latency is per request, post to completion (half the\n"
"round trip with --pingpong).  Exit status: 0 success, 1 a failed transfer or\n"
"check, 2 bad usage, 3 the time bound passed.\n",
            DEFAULT_PORT);
}

enum flag_id {
    F_LOOPBACK, F_TARGET, F_INITIATOR, F_MEMCPY, F_PROVIDER, F_DOMAIN,
    F_RAILS, F_OP, F_BLOCK, F_BATCH, F_THREADS, F_INFLIGHT, F_DURATION,
    F_ITERATIONS, F_WARMUP, F_BUFFER, F_MEM, F_NOTIFY, F_VALIDATE, F_JSON,
    F_SWEEP, F_CSV, F_PINGPONG, F_PORT, F_TIMEOUT, F_TIME_LIMIT, F_TX_DEPTH,
    F_HELP,
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
    {"--mem", true, F_MEM},              {"--notify", false, F_NOTIFY},
    {"--validate", false, F_VALIDATE},   {"--json", false, F_JSON},
    {"--sweep", true, F_SWEEP},          {"--csv", true, F_CSV},
    {"--pingpong", false, F_PINGPONG},   {"--port", true, F_PORT},
    {"--timeout", true, F_TIMEOUT},      {"--time-limit", true, F_TIME_LIMIT},
    {"--tx-depth", true, F_TX_DEPTH},    {"--help", false, F_HELP},
    {"-h", false, F_HELP},
};

static bool set_mode(struct options *o, enum mode m, const char *flag)
{
    if (o->mode_set && o->mode != m) {
        complain("%s: only one of --loopback, --target, --initiator and "
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
    case F_MEM: return parse_mem(v, o);
    case F_NOTIFY: o->notify = true; return true;
    case F_VALIDATE: o->validate = true; return true;
    case F_JSON: o->json = true; return true;
    case F_PINGPONG: o->pingpong = true; return true;
    case F_SWEEP: return parse_sweep(v, o);
    case F_CSV: o->csv = v; return true;
    case F_PORT:
        if (!parse_uint(f->name, v, 1, 65535, &u))
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
    case F_HELP:
        usage(stdout);
        exit(0);
    }
    return false;
}

/* "--flag VALUE" and "--flag=VALUE". */
static bool parse_args(int argc, char **argv, struct options *o)
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

static size_t sweep_count(const struct options *o)
{
    size_t n = 0;

    if (o->sweep_lo == 0)
        return 1;
    for (uint64_t b = o->sweep_lo; b <= o->sweep_hi && b != 0; b *= 2)
        n++;
    return n;
}

/* The block of run i (the sweep's i-th size). */
static uint64_t block_of_run(const struct options *o, size_t i)
{
    return o->sweep_lo != 0 ? o->sweep_lo << i : o->block;
}

static bool check_conflicts(const struct options *o)
{
    const char *bad = NULL;

    if (o->pingpong) {
        if (o->mode == MODE_MEMCPY)
            bad = "--memcpy";
        else if (o->read)
            bad = "--op read";
        else if (o->threads_set && o->threads != 1)
            bad = "--threads";
        else if (o->batch_set && o->batch != 1)
            bad = "--batch-size";
        else if (o->inflight_set)
            bad = "--inflight";
        else if (o->validate)
            bad = "--validate";
        else if (o->notify)
            bad = "--notify (every ping carries one anyway)";
        if (bad != NULL)
            return !complain("--pingpong does not go with %s: it has one "
                             "write in flight each way",
                             bad);
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
    if (o->sweep_lo != 0 && o->block_set)
        return !complain("--sweep sets the block sizes: drop --block-size");
    if (o->duration_set && o->iterations != 0)
        return !complain("give --duration or --iterations, not both");
    if (o->port_set && o->mode == MODE_MEMCPY)
        return !complain("--port means nothing with --memcpy");
    if (o->mode == MODE_TARGET && (o->json || o->csv != NULL))
        return !complain("--json and --csv are the initiator's; the target "
                         "prints a line per run");
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
        __builtin_mul_overflow(need, o->inflight, &need))
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

/* Defaults that depend on other options, then every check. */
static bool resolve_options(struct options *o)
{
    size_t nruns = sweep_count(o);

    if (!check_conflicts(o))
        return false;
    if (!o->block_set)
        o->block = o->pingpong ? 8 : UINT64_C(1) << 20;
    if (o->pingpong)
        o->inflight = 1;
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
    return check_buffer(o) && check_memory(o);
}

/* Every run's length, setup and exchanges, plus one request deadline. */
static double session_bound_s(const struct options *o)
{
    double per_run, runs = (double)sweep_count(o);

    if (o->time_limit > 0)
        return o->time_limit;
    per_run = o->warmup + (o->iterations != 0 ? 600 : o->duration) + 5;
    if (o->validate) /* fill, check and refill at >= 100 MB/s */
        per_run += 3 * (double)o->buffer / 100e6;
    return 30 + runs * per_run + o->timeout_ms / 1000.0;
}

/* ======================================================================
 * The loopback child and the time bound
 * ====================================================================== */

static char g_alarm_msg[160];

/* Async-signal-safe: kill(2) and waitpid(2) only. */
static void kill_child_now(void)
{
    pid_t c = (pid_t)g_child;

    if (c > 0) {
        kill(c, SIGKILL);
        waitpid(c, NULL, 0);
        g_child = 0;
    }
}

static void on_alarm(int sig)
{
    (void)sig;
    if (write(STDERR_FILENO, g_alarm_msg, strlen(g_alarm_msg)) < 0) {
        /* nothing more can be done in a signal handler */
    }
    kill_child_now();
    _exit(EXIT_TIMEOUT);
}

static void on_interrupt(int sig)
{
    kill_child_now();
    _exit(128 + sig);
}

/* SIGALRM after seconds: the session may not run longer than that. */
static void arm_time_bound(double seconds)
{
    struct sigaction sa;

    snprintf(g_alarm_msg, sizeof(g_alarm_msg),
             "%s: the session passed its time bound of %.0f s (raise it "
             "with --time-limit); stopping\n",
             g_role, seconds);
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    alarm(seconds >= UINT_MAX ? UINT_MAX : (unsigned)seconds + 1);
}

/* The parent: an interrupted run takes the child with it. */
static void catch_interrupts(void)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_interrupt;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

/*
 * Waits up to grace_ms for the child to exit, then kills it (*killed);
 * always reaps it.  Returns its wait status, or -1 when there was none.
 */
static int reap_child(int grace_ms, bool *killed)
{
    pid_t c = (pid_t)g_child;
    int status = -1;
    uint64_t until = now_ns() + (uint64_t)grace_ms * 1000000u;

    *killed = false;
    if (c <= 0)
        return -1;
    while (waitpid(c, &status, WNOHANG) == 0) {
        if (now_ns() >= until) {
            *killed = true;
            kill(c, SIGKILL);
            waitpid(c, &status, 0);
            break;
        }
        sleep_ns(2000000);
    }
    g_child = 0;
    return status;
}

/* ======================================================================
 * One side: context, buffer, mailbox
 * ====================================================================== */

/*
 * Control messages waiting to be taken, and the sums of the data-plane
 * ones.  Everything ferry queues goes through mbox_pump, so ferry's queue
 * never grows (it keeps every notification until it is polled) and no
 * control message is lost while data-plane ones are drained.
 */
#define MBOX_CAP 32
struct mbox {
    uint64_t data, ping, pong;
    struct ferry_notification ctl[MBOX_CAP];
    size_t nctl;
};

struct side {
    ferry_context_t *ctx;
    struct ferry_context_info info;
    bool progress_thread;
    uint8_t *buf;
    uint64_t len;
    ferry_mem_t *mem;
    uint64_t reg_ns; /* how long ferry_mem_register took */
    struct mbox mb;
    int timeout_ms;
};

static int open_context(const struct options *o, bool progress_thread,
                        struct side *s)
{
    struct ferry_config cfg;
    int ret;

    if ((ret = ferry_config_init(&cfg)))
        return fail("ferry_config_init (check the FERRY_* variables)", ret);
    if (o->provider != NULL)
        cfg.provider = o->provider;
    if (o->domain != NULL)
        cfg.domain = o->domain;
    if (o->rails != 0)
        cfg.max_rails = o->rails;
    cfg.tx_depth = (size_t)o->tx_depth;
    cfg.local_only = o->mode == MODE_LOOPBACK;
    cfg.progress_thread = progress_thread;
    cfg.timeout_ms = o->timeout_ms;
    if ((ret = ferry_context_create(&cfg, &s->ctx)))
        return fail("ferry_context_create", ret);
    s->progress_thread = progress_thread;
    s->timeout_ms = o->timeout_ms;
    s->info = (struct ferry_context_info)FERRY_CONTEXT_INFO_INIT;
    if ((ret = ferry_context_info(s->ctx, &s->info)))
        return fail("ferry_context_info", ret);
    return 0;
}

/* Allocates, fills (which also faults every page in) and registers. */
static int setup_buffer(struct side *s, uint64_t len, enum pattern p,
                        unsigned access)
{
    char b[32];
    uint64_t t0;
    int ret;

    if (len > SIZE_MAX || posix_memalign((void **)&s->buf, 4096, len) != 0)
        return complain("cannot allocate the %s buffer",
                        fmt_iec(b, sizeof(b), len));
    s->len = len;
    pattern_fill(s->buf, 0, len, p);
    t0 = now_ns();
    ret = ferry_mem_register(s->ctx, s->buf, len, FERRY_MEM_HOST, 0, access,
                             &s->mem);
    s->reg_ns = now_ns() - t0;
    if (ret != 0)
        return fail("ferry_mem_register of the buffer", ret);
    return 0;
}

static void side_close(struct side *s)
{
    int ret;

    /* After a failure, requests freed with operations still in flight keep
     * the region busy: ferry_context_destroy closes it with the rest. */
    if (s->mem != NULL && (ret = ferry_mem_deregister(s->mem)) != 0 &&
        ret != FERRY_EBUSY)
        fail("ferry_mem_deregister", ret);
    ferry_context_destroy(s->ctx);
    free(s->buf);
    memset(s, 0, sizeof(*s));
}

/* Moves every queued notification into the mailbox. */
static int mbox_pump(struct side *s)
{
    struct ferry_notification n[64];
    struct mbox *mb = &s->mb;
    int got;

    do {
        got = ferry_notify_poll(s->ctx, n, 64);
        if (got < 0)
            return fail("ferry_notify_poll", got);
        for (int i = 0; i < got; i++) {
            switch (n[i].id) {
            case ID_DATA: mb->data += n[i].value; break;
            case ID_PING: mb->ping += n[i].value; break;
            case ID_PONG: mb->pong += n[i].value; break;
            default:
                if (mb->nctl == MBOX_CAP)
                    return complain("protocol error: more than %d control "
                                    "messages pending (is the peer another "
                                    "version of ferry_bench?)",
                                    MBOX_CAP);
                mb->ctl[mb->nctl++] = n[i];
            }
        }
    } while (got == 64);
    return 0;
}

/* Takes the oldest pending control message with one of ids[]. */
static bool mbox_take(struct mbox *mb, const uint64_t *ids, size_t nids,
                      struct ferry_notification *out)
{
    for (size_t i = 0; i < mb->nctl; i++)
        for (size_t k = 0; k < nids; k++)
            if (mb->ctl[i].id == ids[k]) {
                *out = mb->ctl[i];
                memmove(&mb->ctl[i], &mb->ctl[i + 1],
                        (mb->nctl - i - 1) * sizeof(mb->ctl[0]));
                mb->nctl--;
                return true;
            }
    return false;
}

/* The bootstrap connection to the peer, whose liveness is probed. */
static ferry_oob_conn_t *g_probe_conn;
static int g_probe_timeout_ms;

static void set_probe(ferry_oob_conn_t *conn, bool accepted)
{
    g_probe_conn = conn;
    /* An accepted connection answers from local state: no wait.  The
     * connecting side asks the listener over TCP and must read the
     * answer, or the next frame on the stream would be a stale one. */
    g_probe_timeout_ms = accepted ? 0 : 5000;
}

/*
 * Whether the peer closed the bootstrap connection (it stopped or
 * failed).  The public API has no liveness call; a lookup of a name never
 * offered or published answers FERRY_ENOENT while the peer is there, and
 * FERRY_ECONNRESET once it is gone.
 */
static bool peer_gone(void)
{
    ferry_rmem_t *r = NULL;
    int ret;

    if (g_probe_conn == NULL)
        return false;
    ret = ferry_oob_lookup(g_probe_conn, ALIVE_PROBE_NAME,
                           g_probe_timeout_ms, &r);
    if (ret == 0)
        ferry_rmem_free(r);
    return ret == FERRY_ECONNRESET ||
           (ret == FERRY_ETIMEDOUT && g_probe_timeout_ms > 0);
}

/*
 * Waits until deadline for a control message with one of ids[].  Busy
 * polls (the pump drives progress) unless a progress thread does that.
 */
static int mbox_wait(struct side *s, const uint64_t *ids, size_t nids,
                     uint64_t deadline, const char *what,
                     struct ferry_notification *out)
{
    uint64_t next_probe = now_ns() + 100000000u;
    unsigned spins = 0;

    for (;;) {
        if (mbox_pump(s))
            return 1;
        if (mbox_take(&s->mb, ids, nids, out))
            return 0;
        uint64_t t = now_ns();
        if (t >= deadline)
            return complain("no %s from the peer in time: it failed, "
                            "stopped, or its side is slower than the time "
                            "bound allows",
                            what);
        if (t >= next_probe) {
            if (peer_gone())
                return complain("the peer closed the bootstrap connection "
                                "(it stopped or failed; its own message "
                                "says why) while this side waited for %s",
                                what);
            next_probe = t + 100000000u;
        }
        if (s->progress_thread)
            sleep_ns(100000);
        else if (++spins % 16 == 0)
            sched_yield();
    }
}

static int mbox_wait1(struct side *s, uint64_t id, uint64_t deadline,
                      const char *what, uint64_t *value)
{
    struct ferry_notification n;

    if (mbox_wait(s, &id, 1, deadline, what, &n))
        return 1;
    *value = n.value;
    return 0;
}

/*
 * Sends {id, value} and waits until it is delivered: at most the
 * request's deadline, less when the peer is seen to be gone (a provider
 * may not fail a send to a peer that vanished before the connection under
 * it was accepted).
 */
static int send_ctl(struct side *s, ferry_peer_t *peer, uint64_t id,
                    uint64_t value)
{
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    ferry_req_t *req;
    int ret;

    opts.timeout_ms = s->timeout_ms;
    if ((ret = ferry_notify_send(peer, id, value, &opts, &req)))
        return fail("ferry_notify_send", ret);
    while ((ret = ferry_req_wait(req, 100)) == FERRY_EINPROGRESS) {
        if (peer_gone()) {
            ferry_req_free(req);
            return complain("the peer closed the bootstrap connection (it "
                            "stopped or failed; its own message says why) "
                            "while this side sent it a control message");
        }
    }
    ferry_req_free(req);
    if (ret != 0)
        return fail("sending a control notification to the peer", ret);
    return 0;
}

/* ======================================================================
 * Target
 * ====================================================================== */

struct target {
    struct side s;
    ferry_oob_t *lis;
    ferry_oob_conn_t *conn;
    ferry_peer_t *peer;
    ferry_rmem_t *pong_rmem; /* --pingpong: the initiator's buffer */
    uint64_t deadline;       /* of the whole session */
    bool loud;               /* print a line per run (two-machine mode) */
};

/* What the target found at the end of a run. */
struct target_run {
    unsigned flags;
    uint64_t block;
    uint64_t cpu_ns;         /* UINT64_MAX: not measured */
    uint64_t notified;       /* data-plane notifications counted */
    uint64_t written;        /* blocks found written */
    uint64_t first_bad;      /* UINT64_MAX: none */
    unsigned verdict;
    /* what the initiator says it did */
    uint64_t i_written, i_block, i_nreq;
};

/*
 * Write validation: every block of the buffer must be entirely B (written
 * at least once) or entirely A (never written), and the count of written
 * blocks must be the initiator's; the tail shorter than a block stays A.
 */
static void check_written(struct target *t, struct target_run *r)
{
    uint64_t block = r->i_block, nblocks = t->s.len / block;

    corrupt_for_self_test(t->s.buf, t->s.len);
    r->written = 0;
    r->first_bad = UINT64_MAX;
    for (uint64_t i = 0; i < nblocks; i++) {
        uint64_t off = i * block;
        uint64_t bad_b = pattern_mismatch(t->s.buf, off, block, PAT_B);

        if (bad_b == UINT64_MAX) {
            r->written++;
            continue;
        }
        /* Not B: it must be A, untouched.  A block that starts as B and
         * turns into A somewhere is torn: report where B stops. */
        uint64_t bad_a = pattern_mismatch(t->s.buf, off, block, PAT_A);
        if (bad_a != UINT64_MAX && r->first_bad == UINT64_MAX)
            r->first_bad = bad_b > off ? bad_b : bad_a;
    }
    if (r->first_bad == UINT64_MAX)
        r->first_bad = pattern_mismatch(t->s.buf, nblocks * block,
                                        t->s.len - nblocks * block, PAT_A);
    if (r->first_bad != UINT64_MAX || r->written != r->i_written)
        r->verdict |= VERDICT_DATA;
    /* Back to A for the next run. */
    pattern_fill(t->s.buf, 0, t->s.len, PAT_A);
}

/* --notify: the queue's count, ferry's counter and the initiator's. */
static int check_notified(struct target *t, struct target_run *r)
{
    uint64_t counter = 0;
    int ret;

    if (r->flags & RUN_NOTIFY) {
        /* Every request completed before NREQ was sent, and a request
         * completes only once its notification is delivered: the count
         * is final.  The short wait only guards against a provider that
         * reorders messages. */
        ret = ferry_counter_wait(t->s.ctx, ID_DATA, r->i_nreq, 2000);
        if (ret != 0 && ret != FERRY_ETIMEDOUT)
            return fail("ferry_counter_wait", ret);
    }
    if (mbox_pump(&t->s))
        return 1;
    if ((ret = ferry_counter_get(t->s.ctx, ID_DATA, &counter)))
        return fail("ferry_counter_get", ret);
    r->notified = t->s.mb.data;
    if (counter != t->s.mb.data)
        r->verdict |= VERDICT_COUNTER;
    if (r->notified != ((r->flags & RUN_NOTIFY) ? r->i_nreq : 0))
        r->verdict |= VERDICT_NOTIFY;
    t->s.mb.data = 0;
    if ((ret = ferry_counter_reset(t->s.ctx, ID_DATA)))
        return fail("ferry_counter_reset", ret);
    return 0;
}

/*
 * Waits for the ping counter to reach n: busy polling in ferry_counter_wait,
 * in slices, so that an initiator that went away is noticed.
 */
static int wait_ping(struct target *t, uint64_t n)
{
    for (;;) {
        int ret = ferry_counter_wait(t->s.ctx, ID_PING, n, 100);

        if (ret == 0)
            return 0;
        if (ret != FERRY_ETIMEDOUT)
            return fail("waiting for a ping", ret);
        if (now_ns() >= t->deadline)
            return fail("waiting for a ping (the session's time bound "
                        "passed)",
                        ret);
        if (peer_gone())
            return complain("the initiator disconnected in the middle of "
                            "a pingpong run");
    }
}

/*
 * --pingpong: answer every ping with a pong (a write of the block into
 * the initiator's buffer with a notification), busy polling through
 * ferry_counter_wait, until the notification worth PING_STOP arrives.
 */
static int serve_pingpong(struct target *t, struct target_run *r,
                          uint64_t *pings)
{
    struct ferry_iov iov = {t->s.buf, t->s.mem, t->pong_rmem, 0, r->block};
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    ferry_req_t *prev = NULL;
    uint64_t seen = 0, v = 0;
    int ret;

    opts.timeout_ms = t->s.timeout_ms;
    opts.flags = FERRY_XFER_NOTIFY;
    opts.notify_id = ID_PONG;
    opts.notify_value = 1;
    for (;;) {
        if (wait_ping(t, seen + 1))
            return 1;
        if ((ret = ferry_counter_get(t->s.ctx, ID_PING, &v)))
            return fail("ferry_counter_get", ret);
        if (v >= PING_STOP)
            break;
        for (; seen < v; seen++) {
            /* The previous pong has been seen by the initiator (it sent
             * this ping after it): its completion is at most a poll away. */
            if (prev != NULL) {
                ret = ferry_req_wait(prev, -1);
                ferry_req_free(prev);
                prev = NULL;
                if (ret != 0)
                    return fail("a pong failed", ret);
            }
            if ((ret = ferry_write(t->peer, &iov, 1, &opts, &prev)))
                return fail("posting a pong", ret);
        }
        if (seen % 256 == 0 && mbox_pump(&t->s))
            return 1;
    }
    if (prev != NULL) {
        ret = ferry_req_wait(prev, -1);
        ferry_req_free(prev);
        if (ret != 0)
            return fail("a pong failed", ret);
    }
    *pings = v - PING_STOP;
    if ((ret = ferry_counter_reset(t->s.ctx, ID_PING)))
        return fail("ferry_counter_reset", ret);
    return 0;
}

static int target_reply(struct target *t, const struct target_run *r)
{
    const uint64_t msgs[][2] = {
        {ID_T_NOTIFIED, r->notified}, {ID_T_WRITTEN, r->written},
        {ID_T_CPU, r->cpu_ns},        {ID_T_REG, t->s.reg_ns},
        {ID_T_BAD, r->first_bad},     {ID_T_VERDICT, r->verdict},
    };

    for (size_t i = 0; i < sizeof(msgs) / sizeof(msgs[0]); i++)
        if (send_ctl(&t->s, t->peer, msgs[i][0], msgs[i][1]))
            return 1;
    return 0;
}

static void target_report(const struct target *t, size_t n,
                          const struct target_run *r)
{
    char b1[32], b2[32];

    if (!t->loud)
        return;
    printf("target: run %zu: block %s", n,
           fmt_iec(b1, sizeof(b1), r->i_block));
    if (r->cpu_ns != UINT64_MAX)
        printf(", CPU %.3f s in the measured window", (double)r->cpu_ns / 1e9);
    if (r->flags & RUN_NOTIFY)
        printf(", %" PRIu64 " notifications counted of %" PRIu64,
               r->notified, r->i_nreq);
    if (r->flags & RUN_PINGPONG)
        printf(", %" PRIu64 " pings answered of %" PRIu64, r->notified,
               r->i_nreq);
    if ((r->flags & RUN_VALIDATE) && !(r->flags & RUN_READ))
        printf(", %s verified (%" PRIu64 " blocks written)",
               fmt_iec(b2, sizeof(b2), t->s.len), r->written);
    if (r->first_bad != UINT64_MAX)
        printf(", first bad byte at offset %" PRIu64, r->first_bad);
    printf(": %s\n", r->verdict == 0 ? "OK" : "FAILED");
    fflush(stdout);
}

/* One run, from RUN (already taken) to the replies. */
static int target_run(struct target *t, size_t n, uint64_t run_value,
                      bool pingpong, unsigned *verdicts)
{
    struct target_run r = {0};
    uint64_t cpu0 = 0, pings = 0;

    r.flags = (unsigned)(run_value & 0xff);
    r.block = run_value >> 8;
    r.cpu_ns = UINT64_MAX;
    r.first_bad = UINT64_MAX;
    if (!!(r.flags & RUN_PINGPONG) != pingpong) {
        send_ctl(&t->s, t->peer, ID_T_READY, VERDICT_MODE);
        return complain("the initiator asked for %s but this target was "
                        "started %s --pingpong: give both sides the same "
                        "--pingpong",
                        pingpong ? "throughput" : "--pingpong",
                        pingpong ? "with" : "without");
    }
    if (pingpong && (r.block > t->s.len ||
                     r.block > ferry_rmem_length(t->pong_rmem))) {
        send_ctl(&t->s, t->peer, ID_T_READY, VERDICT_MODE);
        return complain("--pingpong block of %" PRIu64 " bytes is larger "
                        "than a buffer; give both sides the same sizes",
                        r.block);
    }
    if (send_ctl(&t->s, t->peer, ID_T_READY, 0))
        return 1;
    if (pingpong) {
        if (serve_pingpong(t, &r, &pings))
            return 1;
    } else {
        uint64_t unused;

        if (mbox_wait1(&t->s, ID_MEASURE, t->deadline, "start of the "
                       "measured window", &unused))
            return 1;
        cpu0 = cpu_ns();
        if (mbox_wait1(&t->s, ID_STOP, t->deadline, "end of the measured "
                       "window", &unused))
            return 1;
        r.cpu_ns = cpu_ns() - cpu0;
    }
    if (mbox_wait1(&t->s, ID_WRITTEN, t->deadline, "end of the run",
                   &r.i_written) ||
        mbox_wait1(&t->s, ID_BLOCK, t->deadline, "end of the run",
                   &r.i_block) ||
        mbox_wait1(&t->s, ID_NREQ, t->deadline, "end of the run", &r.i_nreq))
        return 1;
    if (r.i_block == 0 || r.i_block > t->s.len)
        return complain("protocol error: block of %" PRIu64 " bytes",
                        r.i_block);
    if (pingpong) {
        r.notified = pings;
        if (pings != r.i_nreq)
            r.verdict |= VERDICT_PINGS;
    } else if (check_notified(t, &r)) {
        return 1;
    }
    if ((r.flags & RUN_VALIDATE) && !(r.flags & RUN_READ))
        check_written(t, &r);
    *verdicts |= r.verdict;
    target_report(t, n, &r);
    return target_reply(t, &r);
}

/* Runs until BYE.  Returns 1 when a run failed or a check did. */
static int target_session(struct target *t, bool pingpong)
{
    const uint64_t run_or_bye[] = {ID_RUN, ID_BYE};
    struct ferry_notification n;
    unsigned verdicts = 0;
    uint64_t bound_ms;

    if (mbox_wait1(&t->s, ID_BOUND, now_ns() + 60000000000u,
                   "session start", &bound_ms))
        return 1;
    t->deadline = now_ns() + bound_ms * 1000000u;
    for (size_t run = 1;; run++) {
        if (mbox_wait(&t->s, run_or_bye, 2, t->deadline, "next run", &n))
            return 1;
        if (n.id == ID_BYE)
            return verdicts != 0;
        if (target_run(t, run, n.value, pingpong, &verdicts))
            return 1;
    }
}

/*
 * The target process.  report_fd >= 0 (loopback): the port goes there
 * once it listens, and the initiator prints everything.
 */
static int target_main(const struct options *o, int report_fd)
{
    struct target t = {0};
    char where[32], b1[32];
    int ret, port, code = 1;

    t.loud = report_fd < 0;
    if (open_context(o, !o->pingpong, &t.s) ||
        setup_buffer(&t.s, o->buffer, PAT_A,
                     FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE))
        goto out;
    if (report_fd >= 0) /* loopback: this host only; any free port */
        snprintf(where, sizeof(where), "127.0.0.1:%u",
                 o->port_set ? o->port : 0);
    else
        snprintf(where, sizeof(where), ":%u", o->port);
    if ((ret = ferry_oob_listen(t.s.ctx, where, &t.lis))) {
        fail("ferry_oob_listen", ret);
        goto out;
    }
    if ((ret = ferry_oob_publish(t.lis, REGION_NAME, t.s.mem))) {
        fail("ferry_oob_publish", ret);
        goto out;
    }
    port = ferry_oob_port(t.lis);
    if (report_fd >= 0) {
        if (write(report_fd, &port, sizeof(port)) != sizeof(port))
            goto out;
        close(report_fd);
        report_fd = -1;
    } else {
        printf("target: provider %s, domain %s: %s\n", t.s.info.provider,
               t.s.info.domain, t.s.info.why);
        printf("target: %s buffer registered in %.3f ms; waiting for an "
               "initiator on port %d\n",
               fmt_iec(b1, sizeof(b1), t.s.len), (double)t.s.reg_ns / 1e6,
               port);
        fflush(stdout);
    }
    if ((ret = ferry_oob_accept(t.lis, t.loud ? -1 : CONNECT_TIMEOUT_MS,
                                &t.conn))) {
        fail("ferry_oob_accept", ret);
        goto out;
    }
    t.peer = ferry_oob_conn_peer(t.conn);
    set_probe(t.conn, true);
    /* The initiator offers it right after connecting. */
    if (o->pingpong &&
        (ret = ferry_oob_lookup(t.conn, PONG_REGION_NAME, 10000,
                                &t.pong_rmem))) {
        fail("looking up the initiator's buffer (--pingpong on both sides?)",
             ret);
        goto out;
    }
    code = target_session(&t, o->pingpong);
out:
    if (report_fd >= 0)
        close(report_fd);
    set_probe(NULL, false);
    if (t.pong_rmem != NULL)
        ferry_rmem_free(t.pong_rmem);
    ferry_oob_disconnect(t.conn);
    ferry_oob_close(t.lis);
    side_close(&t.s);
    return code;
}

/* ======================================================================
 * Results and latency samples
 * ====================================================================== */

struct result {
    uint64_t block;
    double seconds;
    uint64_t bytes, ops, reqs;
    double mean_us, p50_us, p99_us, p999_us;
    uint64_t samples, measured; /* kept for percentiles / all measured */
    double cpu_here_s, cpu_target_s; /* < 0: not known */
    double conn_ms;                  /* < 0: not known */
    double reg_ms_here, reg_ms_target;
    uint64_t reg_bytes;
    uint64_t notified, target_notified;
    uint64_t written, target_written;
    uint64_t first_bad; /* UINT64_MAX: none */
    unsigned verdict;
    int local_check; /* read validation here: 0 ok, 1 failed, -1 not done */
    bool ok;
};

/* A fixed reservoir (Vitter's algorithm R): no allocation per sample. */
struct reservoir {
    uint64_t *v;
    size_t cap, n;
    uint64_t seen, rng;
};

static int reservoir_init(struct reservoir *r, size_t cap, uint64_t seed)
{
    r->v = malloc((cap ? cap : 1) * sizeof(*r->v));
    r->cap = cap;
    r->n = 0;
    r->seen = 0;
    r->rng = seed | 1;
    return r->v == NULL ? complain("out of memory for latency samples") : 0;
}

static void reservoir_add(struct reservoir *r, uint64_t x)
{
    r->seen++;
    if (r->n < r->cap) {
        r->v[r->n++] = x;
        return;
    }
    /* xorshift64* */
    r->rng ^= r->rng >> 12;
    r->rng ^= r->rng << 25;
    r->rng ^= r->rng >> 27;
    uint64_t j = (r->rng * UINT64_C(2685821657736338717)) % r->seen;
    if (j < r->cap)
        r->v[j] = x;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Nearest rank: the smallest sample with at least num/den of them <= it. */
static double percentile(const uint64_t *v, size_t n, uint64_t num,
                         uint64_t den)
{
    size_t rank;

    if (n == 0)
        return -1;
    rank = (size_t)(((uint64_t)n * num + den - 1) / den);
    return (double)v[rank == 0 ? 0 : rank - 1];
}

/*
 * Percentiles over several reservoirs.  When some overflowed, each gives
 * samples in proportion to what it saw, at the lowest sampling rate among
 * them, so that a busy thread is not under-represented.  scale: 0.5 turns
 * round trips into half round trips.
 */
static int latency_summary(struct reservoir *rs, size_t nrs, double scale,
                           struct result *res)
{
    double rate = 1.0;
    size_t total = 0, k = 0;
    uint64_t *all;

    for (size_t i = 0; i < nrs; i++)
        if (rs[i].seen > 0 && (double)rs[i].n / (double)rs[i].seen < rate)
            rate = (double)rs[i].n / (double)rs[i].seen;
    for (size_t i = 0; i < nrs; i++)
        total += rs[i].n;
    all = malloc((total ? total : 1) * sizeof(*all));
    if (all == NULL)
        return complain("out of memory for latency samples");
    for (size_t i = 0; i < nrs; i++) {
        size_t take = (size_t)((double)rs[i].seen * rate + 0.5);
        if (take > rs[i].n)
            take = rs[i].n;
        memcpy(all + k, rs[i].v, take * sizeof(*all));
        k += take;
    }
    qsort(all, k, sizeof(*all), cmp_u64);
    res->samples = k;
    res->p50_us = percentile(all, k, 50, 100) * scale / 1e3;
    res->p99_us = percentile(all, k, 99, 100) * scale / 1e3;
    res->p999_us = percentile(all, k, 999, 1000) * scale / 1e3;
    free(all);
    return 0;
}

/* The once-a-second line on stderr. */
struct ticker {
    uint64_t t0, t_last, next, bytes_last, ops_last;
};

static void ticker_start(struct ticker *tk, uint64_t t)
{
    memset(tk, 0, sizeof(*tk));
    tk->t0 = tk->t_last = t;
    tk->next = t + 1000000000u;
}

static void ticker_tick(struct ticker *tk, uint64_t t, uint64_t bytes,
                        uint64_t ops, long inflight, bool warmup)
{
    double dt;

    if (t < tk->next)
        return;
    dt = (double)(t - tk->t_last) / 1e9;
    fprintf(stderr,
            "%s: %6.1f s  %8.3f GB/s  %12.0f ops/s  %4ld in flight%s\n",
            g_role, (double)(t - tk->t0) / 1e9,
            (double)(bytes - tk->bytes_last) / dt / 1e9,
            (double)(ops - tk->ops_last) / dt, inflight,
            warmup ? "  (warmup)" : "");
    tk->t_last = t;
    tk->bytes_last = bytes;
    tk->ops_last = ops;
    tk->next = t + 1000000000u;
}

/* ======================================================================
 * Initiator: throughput
 *
 * The buffer is a grid of slots of batch x block bytes (one request).
 * Thread t owns slots [t S, (t + 1) S), S = buffer / (threads x slot).
 * Lane k of a thread (one of its --inflight requests) uses the thread's
 * slots k, k + inflight, k + 2 inflight ...: requests in flight never
 * share bytes, and a buffer larger than the minimum is cycled through.
 * ====================================================================== */

struct initiator {
    struct side s;
    const struct options *o;
    ferry_oob_conn_t *conn;
    ferry_peer_t *peer;
    ferry_rmem_t *rmem;
    uint64_t t_connect;         /* ferry_oob_connect was called */
    _Atomic uint64_t t_first;   /* the first transfer completed */
    uint64_t deadline;          /* of the whole session */
};

struct grid {
    uint64_t block, batch, threads, inflight;
    uint64_t slot;             /* batch x block */
    uint64_t slots_per_thread; /* S */
};

static void grid_init(struct grid *g, const struct options *o,
                      uint64_t block, uint64_t buffer)
{
    g->block = block;
    g->batch = o->batch;
    g->threads = o->threads;
    g->inflight = o->inflight;
    g->slot = g->batch * block; /* check_buffer made sure this fits */
    g->slots_per_thread = buffer / g->threads / g->slot;
}

static uint64_t lane_slots(const struct grid *g, uint64_t lane)
{
    return (g->slots_per_thread - lane + g->inflight - 1) / g->inflight;
}

static uint64_t slot_offset(const struct grid *g, uint64_t thread,
                            uint64_t slot)
{
    return (thread * g->slots_per_thread + slot) * g->slot;
}

enum phase { PH_WARMUP, PH_MEASURE, PH_STOP };

struct run {
    struct initiator *in;
    struct grid g;
    bool read, notify;
    uint64_t iterations; /* measured requests per thread; 0: a duration */
    _Atomic int phase;
    _Atomic bool abort;
};

struct lane {
    struct ferry_iov *iov;
    ferry_req_t *req;
    uint64_t t_post, posts;
    bool counted; /* posted in the measured phase (--iterations) */
};

struct worker {
    pthread_t tid;
    bool started;
    struct run *run;
    uint64_t index;
    struct lane *lanes;
    struct reservoir lat;
    /* measured */
    uint64_t bytes, ops, reqs, lat_sum, t_last;
    uint64_t measured_posts;
    uint64_t completed; /* every request, warmup included */
    /* read by the main thread while the worker runs */
    _Atomic uint64_t live_bytes, live_ops;
    _Atomic long inflight;
    _Atomic bool done;
    int err;
    char errmsg[700];
};

static void note_first_completion(struct initiator *in, uint64_t t)
{
    uint64_t zero = 0;

    atomic_compare_exchange_strong(&in->t_first, &zero, t);
}

static int worker_error(struct worker *w, const char *what, int err)
{
    snprintf(w->errmsg, sizeof(w->errmsg), "thread %" PRIu64 ": %s: %s (%s)",
             w->index, what, ferry_strerror(err), ferry_last_error());
    w->err = err;
    atomic_store(&w->run->abort, true);
    return 1;
}

static bool may_post(const struct worker *w)
{
    const struct run *r = w->run;
    int ph = atomic_load(&r->phase);

    if (atomic_load(&r->abort) || ph == PH_STOP)
        return false;
    return r->iterations == 0 || ph == PH_WARMUP ||
           w->measured_posts < r->iterations;
}

static int worker_post(struct worker *w, uint64_t k)
{
    struct run *r = w->run;
    const struct grid *g = &r->g;
    struct lane *ln = &w->lanes[k];
    uint64_t slot = k + (ln->posts % lane_slots(g, k)) * g->inflight;
    uint64_t off = slot_offset(g, w->index, slot);
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    int ret;

    for (uint64_t b = 0; b < g->batch; b++) {
        ln->iov[b].local = r->in->s.buf + off + b * g->block;
        ln->iov[b].roffset = off + b * g->block;
    }
    opts.timeout_ms = r->in->s.timeout_ms;
    if (r->notify) {
        opts.flags = FERRY_XFER_NOTIFY;
        opts.notify_id = ID_DATA;
        opts.notify_value = 1;
    }
    ln->counted = atomic_load(&r->phase) == PH_MEASURE;
    ln->t_post = now_ns();
    ret = r->read ? ferry_read(r->in->peer, ln->iov, g->batch, &opts, &ln->req)
                  : ferry_write(r->in->peer, ln->iov, g->batch, &opts,
                                &ln->req);
    if (ret != 0) {
        ln->req = NULL;
        return worker_error(w, r->read ? "ferry_read" : "ferry_write", ret);
    }
    ln->posts++;
    if (ln->counted)
        w->measured_posts++;
    atomic_fetch_add(&w->inflight, 1);
    return 0;
}

static void worker_complete(struct worker *w, uint64_t k, uint64_t t)
{
    struct run *r = w->run;
    struct lane *ln = &w->lanes[k];
    uint64_t lat = t - ln->t_post;
    /* --duration counts what completes inside the window; --iterations
     * counts the requests posted in it. */
    bool count = r->iterations != 0 ? ln->counted
                                    : atomic_load(&r->phase) == PH_MEASURE;

    ferry_req_free(ln->req);
    ln->req = NULL;
    atomic_fetch_sub(&w->inflight, 1);
    w->completed++;
    atomic_fetch_add_explicit(&w->live_bytes, r->g.slot,
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&w->live_ops, r->g.batch, memory_order_relaxed);
    note_first_completion(r->in, t);
    if (!count)
        return;
    w->bytes += r->g.slot;
    w->ops += r->g.batch;
    w->reqs++;
    w->lat_sum += lat;
    w->t_last = t;
    reservoir_add(&w->lat, lat);
}

/* Keeps the lanes busy until told to stop, then lets them drain. */
static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct run *r = w->run;
    uint64_t active = 0;
    unsigned idle = 0;

    for (uint64_t k = 0; k < r->g.inflight && may_post(w); k++) {
        if (worker_post(w, k))
            goto out;
        active++;
    }
    while (active > 0 && !atomic_load(&r->abort)) {
        bool any = false;

        for (uint64_t k = 0; k < r->g.inflight; k++) {
            struct lane *ln = &w->lanes[k];
            int ret;

            if (ln->req == NULL)
                continue;
            ret = ferry_req_test(ln->req);
            if (ret == FERRY_EINPROGRESS)
                continue;
            if (ret != 0) {
                worker_error(w, "a request failed", ret);
                goto out;
            }
            any = true;
            worker_complete(w, k, now_ns());
            if (!may_post(w))
                active--;
            else if (worker_post(w, k))
                goto out;
        }
        /* Busy polling, but let the target run on a small machine. */
        if (!any && ++idle % 64 == 0)
            sched_yield();
    }
out:
    for (uint64_t k = 0; k < r->g.inflight; k++)
        if (w->lanes[k].req != NULL) {
            ferry_req_free(w->lanes[k].req); /* cancels: we are aborting */
            w->lanes[k].req = NULL;
        }
    atomic_store(&w->inflight, 0);
    atomic_store(&w->done, true);
    return NULL;
}

static void workers_free(struct worker *ws, uint64_t n)
{
    for (uint64_t i = 0; ws != NULL && i < n; i++) {
        for (uint64_t k = 0; ws[i].lanes != NULL && k < ws[i].run->g.inflight;
             k++)
            free(ws[i].lanes[k].iov);
        free(ws[i].lanes);
        free(ws[i].lat.v);
    }
    free(ws);
}

/* Everything a worker needs is allocated here, before the run. */
static struct worker *workers_new(struct run *r)
{
    const struct grid *g = &r->g;
    struct worker *ws = calloc(g->threads, sizeof(*ws));
    size_t cap = RESERVOIR_TOTAL / g->threads;

    if (r->iterations != 0 && r->iterations < cap)
        cap = (size_t)r->iterations;
    for (uint64_t i = 0; ws != NULL && i < g->threads; i++) {
        struct worker *w = &ws[i];

        w->run = r;
        w->index = i;
        w->lanes = calloc(g->inflight, sizeof(*w->lanes));
        if (w->lanes == NULL ||
            reservoir_init(&w->lat, cap, now_ns() ^ (i << 32)) != 0)
            goto fail;
        for (uint64_t k = 0; k < g->inflight; k++) {
            struct ferry_iov *iov = calloc(g->batch, sizeof(*iov));
            if (iov == NULL)
                goto fail;
            for (uint64_t b = 0; b < g->batch; b++) {
                iov[b].lmem = r->in->s.mem;
                iov[b].rmem = r->in->rmem;
                iov[b].len = g->block;
            }
            w->lanes[k].iov = iov;
        }
    }
    if (ws == NULL)
        complain("out of memory for %" PRIu64 " threads", g->threads);
    return ws;
fail:
    complain("out of memory for the requests of %" PRIu64 " threads",
             g->threads);
    workers_free(ws, g->threads);
    return NULL;
}

struct window {
    uint64_t t_start, t_end, cpu_start, cpu_end;
};

static int begin_measure(struct run *r, struct window *win)
{
    atomic_store(&r->phase, PH_MEASURE);
    win->t_start = now_ns();
    win->cpu_start = cpu_ns();
    return send_ctl(&r->in->s, r->in->peer, ID_MEASURE, 0);
}

static int end_measure(struct run *r)
{
    if (send_ctl(&r->in->s, r->in->peer, ID_STOP, 0) == 0)
        return 0;
    atomic_store(&r->abort, true);
    return 1;
}

static bool workers_done(struct worker *ws, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        if (!atomic_load(&ws[i].done))
            return false;
    return true;
}

/*
 * The main thread while the workers run: phases, the measured window,
 * the line per second.  Returns 1 when a worker failed.
 */
static int monitor(struct run *r, struct worker *ws, double warmup,
                   double duration, struct window *win)
{
    uint64_t n = r->g.threads, t = now_ns(), stop_at = 0;
    uint64_t warm_end = t + (uint64_t)(warmup * 1e9);
    struct ticker tk;

    ticker_start(&tk, t);
    if (atomic_load(&r->phase) == PH_MEASURE)
        stop_at = win->t_start + (uint64_t)(duration * 1e9);
    for (;;) {
        uint64_t bytes = 0, ops = 0;
        long inflight = 0;

        t = now_ns();
        if (atomic_load(&r->abort))
            return 1;
        if (atomic_load(&r->phase) == PH_WARMUP && t >= warm_end) {
            if (begin_measure(r, win)) {
                atomic_store(&r->abort, true);
                return 1;
            }
            stop_at = win->t_start + (uint64_t)(duration * 1e9);
        }
        /* The window closes; the target reads its CPU time on STOP
         * while the workers let their last requests drain. */
        if (r->iterations == 0 && atomic_load(&r->phase) == PH_MEASURE &&
            t >= stop_at) {
            atomic_store(&r->phase, PH_STOP);
            win->t_end = t;
            win->cpu_end = cpu_ns();
            return end_measure(r);
        }
        if (r->iterations != 0 && workers_done(ws, n)) {
            win->cpu_end = cpu_ns();
            win->t_end = win->t_start;
            for (uint64_t i = 0; i < n; i++)
                if (ws[i].t_last > win->t_end)
                    win->t_end = ws[i].t_last;
            return end_measure(r);
        }
        for (uint64_t i = 0; i < n; i++) {
            bytes += atomic_load_explicit(&ws[i].live_bytes,
                                          memory_order_relaxed);
            ops += atomic_load_explicit(&ws[i].live_ops,
                                        memory_order_relaxed);
            inflight += atomic_load_explicit(&ws[i].inflight,
                                             memory_order_relaxed);
        }
        ticker_tick(&tk, t, bytes, ops, inflight,
                    atomic_load(&r->phase) == PH_WARMUP);
        /* Wake in time for the next event, at most 10 ms from now. */
        uint64_t next = t + 10000000u;
        if (atomic_load(&r->phase) == PH_WARMUP && warm_end < next)
            next = warm_end;
        if (stop_at != 0 && r->iterations == 0 && stop_at < next)
            next = stop_at;
        if (next > t)
            sleep_ns(next - t);
    }
}

/* --validate --op read: what this side read must be the target's A. */
static int check_read_back(const struct run *r, const struct worker *ws,
                           struct result *res)
{
    const struct grid *g = &r->g;
    const uint8_t *buf = r->in->s.buf;
    uint64_t used = g->threads * g->slots_per_thread * g->slot, bad;

    corrupt_for_self_test(r->in->s.buf, r->in->s.len);
    res->local_check = 0;
    for (uint64_t t = 0; t < g->threads; t++)
        for (uint64_t s = 0; s < g->slots_per_thread; s++) {
            uint64_t k = s % g->inflight, m = s / g->inflight;
            bool visited = m < ws[t].lanes[k].posts;
            uint64_t off = slot_offset(g, t, s);

            bad = pattern_mismatch(buf, off, g->slot,
                                   visited ? PAT_A : PAT_B);
            if (bad != UINT64_MAX)
                goto bad;
        }
    bad = pattern_mismatch(buf, used, r->in->s.len - used, PAT_B);
    if (bad == UINT64_MAX)
        return 0;
bad:
    res->local_check = 1;
    res->first_bad = bad;
    return complain("validation failed: byte %" PRIu64 " of what was read "
                    "is 0x%02x, the target's pattern there is 0x%02x",
                    bad, buf[bad], pattern_byte(PAT_A, bad));
}

/* The end of every run: tell the target what to find, hear its verdict. */
static int exchange_results(struct initiator *in, uint64_t written,
                            uint64_t block, uint64_t nreq, struct result *res)
{
    uint64_t cpu, reg, verdict, bad;

    if (send_ctl(&in->s, in->peer, ID_WRITTEN, written) ||
        send_ctl(&in->s, in->peer, ID_BLOCK, block) ||
        send_ctl(&in->s, in->peer, ID_NREQ, nreq) ||
        mbox_wait1(&in->s, ID_T_NOTIFIED, in->deadline, "result",
                   &res->target_notified) ||
        mbox_wait1(&in->s, ID_T_WRITTEN, in->deadline, "result",
                   &res->target_written) ||
        mbox_wait1(&in->s, ID_T_CPU, in->deadline, "result", &cpu) ||
        mbox_wait1(&in->s, ID_T_REG, in->deadline, "result", &reg) ||
        mbox_wait1(&in->s, ID_T_BAD, in->deadline, "result", &bad) ||
        mbox_wait1(&in->s, ID_T_VERDICT, in->deadline, "verdict", &verdict))
        return 1;
    res->cpu_target_s = cpu == UINT64_MAX ? -1 : (double)cpu / 1e9;
    res->reg_ms_target = (double)reg / 1e6;
    res->verdict = (unsigned)verdict;
    if (bad != UINT64_MAX)
        res->first_bad = bad;
    res->notified = nreq;
    res->written = written;
    return 0;
}

/* RUN, then READY: the target agrees and its buffer is ready. */
static int start_run(struct initiator *in, unsigned flags, uint64_t block)
{
    uint64_t ready;

    if (send_ctl(&in->s, in->peer, ID_RUN, flags | block << 8) ||
        mbox_wait1(&in->s, ID_T_READY, in->deadline, "answer to the start "
                   "of a run", &ready))
        return 1;
    if (ready != 0)
        return complain("the target refused the run: start both sides with "
                        "the same --pingpong and sizes (its own message "
                        "says more)");
    return 0;
}

static unsigned run_flags(const struct options *o)
{
    return (o->pingpong ? RUN_PINGPONG : 0u) | (o->read ? RUN_READ : 0u) |
           (o->validate ? RUN_VALIDATE : 0u) | (o->notify ? RUN_NOTIFY : 0u);
}

static void fill_common(struct initiator *in, const struct window *win,
                        struct result *res)
{
    uint64_t first = atomic_load(&in->t_first);

    res->seconds = (double)(win->t_end - win->t_start) / 1e9;
    res->cpu_here_s = (double)(win->cpu_end - win->cpu_start) / 1e9;
    res->conn_ms = first != 0 ? (double)(first - in->t_connect) / 1e6 : -1;
    res->reg_ms_here = (double)in->s.reg_ns / 1e6;
    res->reg_bytes = in->s.len;
}

/* Totals of the workers, the blocks written, the requests notified. */
static int gather(struct run *r, struct worker *ws, struct result *res,
                  uint64_t *written, uint64_t *completed)
{
    const struct grid *g = &r->g;
    uint64_t lat_sum = 0;

    *written = *completed = 0;
    for (uint64_t i = 0; i < g->threads; i++) {
        res->bytes += ws[i].bytes;
        res->ops += ws[i].ops;
        res->reqs += ws[i].reqs;
        lat_sum += ws[i].lat_sum;
        *completed += ws[i].completed;
        for (uint64_t k = 0; k < g->inflight; k++) {
            uint64_t n = lane_slots(g, k), p = ws[i].lanes[k].posts;
            *written += (p < n ? p : n) * g->batch;
        }
    }
    res->measured = res->reqs;
    res->mean_us = res->reqs ? (double)lat_sum / (double)res->reqs / 1e3 : -1;
    if (res->reqs == 0)
        return complain("no request completed in the measured window; "
                        "give a longer --duration");
    struct reservoir *rs = malloc(g->threads * sizeof(*rs));
    if (rs == NULL)
        return complain("out of memory");
    for (uint64_t i = 0; i < g->threads; i++)
        rs[i] = ws[i].lat;
    int ret = latency_summary(rs, g->threads, 1.0, res);
    free(rs);
    return ret;
}

static int start_workers(struct worker *ws, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        int ret = pthread_create(&ws[i].tid, NULL, worker_main, &ws[i]);
        if (ret != 0) {
            atomic_store(&ws[0].run->abort, true);
            return complain("pthread_create: %s", strerror(ret));
        }
        ws[i].started = true;
    }
    return 0;
}

static int join_workers(struct worker *ws, uint64_t n)
{
    int failed = 0;

    for (uint64_t i = 0; i < n; i++)
        if (ws[i].started)
            pthread_join(ws[i].tid, NULL);
    for (uint64_t i = 0; i < n; i++)
        if (ws[i].err != 0)
            failed = complain("%s", ws[i].errmsg);
    return failed;
}

static int run_throughput(struct initiator *in, uint64_t block,
                          struct result *res)
{
    const struct options *o = in->o;
    struct run r = {.in = in, .read = o->read, .notify = o->notify,
                    .iterations = o->iterations};
    struct window win = {0};
    struct worker *ws;
    uint64_t written, completed;
    int failed;

    grid_init(&r.g, o, block, in->s.len);
    atomic_init(&r.phase, o->warmup > 0 ? PH_WARMUP : PH_MEASURE);
    atomic_init(&r.abort, false);
    if ((ws = workers_new(&r)) == NULL)
        return 1;
    if (o->validate && o->read)
        pattern_fill(in->s.buf, 0, in->s.len, PAT_B); /* reads bring A */
    failed = start_run(in, run_flags(o), block);
    if (!failed && o->warmup <= 0)
        failed = begin_measure(&r, &win);
    if (!failed)
        failed = start_workers(ws, r.g.threads);
    if (!failed)
        failed = monitor(&r, ws, o->warmup, o->duration, &win);
    if (failed)
        atomic_store(&r.abort, true);
    failed |= join_workers(ws, r.g.threads);
    res->block = block;
    if (!failed)
        failed = gather(&r, ws, res, &written, &completed);
    if (!failed && o->validate && o->read)
        check_read_back(&r, ws, res); /* reported; the exchange goes on */
    if (!failed)
        failed = exchange_results(in, written, block,
                                  o->notify ? completed : 0, res);
    fill_common(in, &win, res);
    workers_free(ws, r.g.threads);
    return failed;
}

/* ======================================================================
 * Initiator: pingpong
 * ====================================================================== */

/*
 * Each round trip: write the block with a notification (ID_PING), wait
 * for the target's pong (its write back with ID_PONG) with
 * ferry_counter_wait, which busy polls.  Reports half the round trip.
 */
static int run_pingpong(struct initiator *in, uint64_t block,
                        struct result *res)
{
    const struct options *o = in->o;
    struct ferry_iov iov = {in->s.buf, in->s.mem, in->rmem, 0, block};
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    size_t cap = o->iterations != 0 && o->iterations < RESERVOIR_TOTAL
                     ? (size_t)o->iterations
                     : RESERVOIR_TOTAL;
    uint64_t sent = 0, measured = 0, lat_sum = 0, t, warm_end, stop_at = 0;
    bool measuring = o->warmup <= 0;
    struct window win = {0};
    struct reservoir lat;
    struct ticker tk;
    int ret, failed = 1;

    res->block = block;
    if (reservoir_init(&lat, cap, now_ns()))
        return 1;
    if (start_run(in, run_flags(o), block))
        goto out;
    opts.timeout_ms = in->s.timeout_ms;
    opts.flags = FERRY_XFER_NOTIFY;
    opts.notify_id = ID_PING;
    opts.notify_value = 1;
    t = now_ns();
    ticker_start(&tk, t);
    warm_end = t + (uint64_t)(o->warmup * 1e9);
    if (measuring) {
        win.t_start = t;
        win.cpu_start = cpu_ns();
        stop_at = t + (uint64_t)(o->duration * 1e9);
    }
    for (;;) {
        ferry_req_t *req;
        uint64_t t0, t1;

        t = now_ns();
        if (!measuring && t >= warm_end) {
            measuring = true;
            win.t_start = t;
            win.cpu_start = cpu_ns();
            stop_at = t + (uint64_t)(o->duration * 1e9);
        }
        if (measuring && (o->iterations != 0 ? measured >= o->iterations
                                             : t >= stop_at)) {
            win.t_end = t;
            win.cpu_end = cpu_ns();
            break;
        }
        ticker_tick(&tk, t, 2 * block * sent, sent, 1, !measuring);
        t0 = now_ns();
        if ((ret = ferry_write(in->peer, &iov, 1, &opts, &req))) {
            fail("posting a ping", ret);
            goto out;
        }
        sent++;
        ret = ferry_counter_wait(in->s.ctx, ID_PONG, sent, in->s.timeout_ms);
        t1 = now_ns();
        if (ret != 0) {
            ferry_req_free(req);
            fail("waiting for the pong", ret);
            goto out;
        }
        ret = ferry_req_wait(req, -1); /* delivered: the pong came after */
        ferry_req_free(req);
        if (ret != 0) {
            fail("a ping failed", ret);
            goto out;
        }
        note_first_completion(in, t1);
        if (measuring) {
            measured++;
            lat_sum += t1 - t0;
            reservoir_add(&lat, t1 - t0);
        }
        if (sent % 256 == 0 && mbox_pump(&in->s)) /* drain ferry's queue */
            goto out;
    }
    if (send_ctl(&in->s, in->peer, ID_PING, PING_STOP) ||
        (ret = ferry_counter_reset(in->s.ctx, ID_PONG)) || mbox_pump(&in->s))
        goto out;
    in->s.mb.pong = 0;
    res->bytes = 2 * block * measured;
    res->ops = res->reqs = res->measured = measured;
    res->mean_us = (double)lat_sum / (double)measured / 2 / 1e3;
    if (latency_summary(&lat, 1, 0.5, res) ||
        exchange_results(in, 0, block, sent, res))
        goto out;
    fill_common(in, &win, res);
    failed = 0;
out:
    free(lat.v);
    return failed;
}

/* ======================================================================
 * Output
 * ====================================================================== */

static FILE *g_out; /* the human summary: stdout, or stderr with --json */

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
    }
    return "?";
}

static const char *what_moves(const struct options *o)
{
    return o->mode == MODE_MEMCPY ? "memcpy"
           : o->pingpong          ? "pingpong"
           : o->read              ? "read"
                                  : "write";
}

static void print_header(const struct options *o,
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
    if (!o->pingpong && o->mode != MODE_MEMCPY)
        fprintf(g_out, " × %" PRIu64 " per request × %" PRIu64
                " thread%s × %" PRIu64 " in flight",
                o->batch, o->threads, o->threads == 1 ? "" : "s",
                o->inflight);
    fprintf(g_out, ", buffer %s, ", fmt_iec(b2, sizeof(b2), o->buffer));
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
    fflush(g_out);
}

static const char *fmt_lat(char *out, size_t n, double us)
{
    return us < 0 ? "-" : fmt_ns(out, n, us * 1e3);
}

static void print_checks(const struct options *o, const struct result *r)
{
    char b1[32];

    if (o->notify)
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
static void print_session(const struct result *r)
{
    char b1[32];

    fprintf(g_out, "  registration %s in %.3f ms here (%.4g ms per GB), "
            "%.3f ms at the target (%.4g ms per GB)\n",
            fmt_iec(b1, sizeof(b1), r->reg_bytes), r->reg_ms_here,
            per_gb(r->reg_ms_here, r->reg_bytes), r->reg_ms_target,
            per_gb(r->reg_ms_target, r->reg_bytes));
    fprintf(g_out, "  connection   %.2f ms from ferry_oob_connect to the "
            "first completed transfer\n",
            r->conn_ms);
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

static void print_json(const struct options *o,
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
    json_str("mem", "host", ",");
    printf("\"batch_size\":%" PRIu64 ",\"threads\":%" PRIu64
           ",\"inflight\":%" PRIu64 ",\"buffer_size\":%" PRIu64 ",",
           o->batch, o->threads, o->inflight, o->buffer);
    json_num("duration_s", o->iterations ? -1 : o->duration, ",");
    printf("\"iterations\":%" PRIu64 ",", o->iterations);
    json_num("warmup_s", o->warmup, ",");
    printf("\"notify\":%s,\"validate\":%s,\"pingpong\":%s,",
           o->notify ? "true" : "false", o->validate ? "true" : "false",
           o->pingpong ? "true" : "false");
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

/* After each run: the summary (or a table row), the CSV row. */
static void report_run(const struct options *o, FILE *csv, size_t i,
                       const struct result *r)
{
    if (o->sweep_lo == 0) {
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

static void result_init(struct result *r)
{
    memset(r, 0, sizeof(*r));
    r->cpu_here_s = r->cpu_target_s = r->conn_ms = -1;
    r->p50_us = r->p99_us = r->p999_us = r->mean_us = -1;
    r->first_bad = UINT64_MAX;
    r->local_check = -1;
}

/* ======================================================================
 * Initiator: the session
 * ====================================================================== */

static int initiator_connect(struct initiator *in, const char *where,
                             double bound_s)
{
    char b1[32], b2[32], b3[32];
    int ret;

    in->t_connect = now_ns();
    if ((ret = ferry_oob_connect(in->s.ctx, where, CONNECT_TIMEOUT_MS,
                                 &in->conn)))
        return fail("ferry_oob_connect", ret);
    in->peer = ferry_oob_conn_peer(in->conn);
    set_probe(in->conn, false);
    if ((ret = ferry_oob_lookup(in->conn, REGION_NAME, CONNECT_TIMEOUT_MS,
                                &in->rmem)))
        return fail("looking up the target's buffer", ret);
    if (ferry_rmem_length(in->rmem) < in->s.len)
        return complain("the target's buffer is %s but this side's is %s: "
                        "start the target with --buffer-size %s or more "
                        "(or with the same sizes as here)",
                        fmt_iec(b1, sizeof(b1), ferry_rmem_length(in->rmem)),
                        fmt_iec(b2, sizeof(b2), in->s.len),
                        fmt_flag(b3, sizeof(b3), in->s.len));
    if (in->o->pingpong &&
        (ret = ferry_oob_offer(in->conn, PONG_REGION_NAME, in->s.mem,
                               CONNECT_TIMEOUT_MS)))
        return fail("offering this side's buffer for the pongs", ret);
    /* The target gives up a little after this side would: the alarm here
     * then tells the story. */
    return send_ctl(&in->s, in->peer, ID_BOUND,
                    (uint64_t)((bound_s + 5) * 1e3));
}

static void initiator_close(struct initiator *in)
{
    set_probe(NULL, false);
    if (in->rmem != NULL)
        ferry_rmem_free(in->rmem);
    ferry_oob_disconnect(in->conn);
    side_close(&in->s);
}

/* Connects, runs every size, says BYE.  Returns 0 when all went well. */
static int initiator_main(const struct options *o, const char *where,
                          double bound_s, FILE *csv)
{
    size_t nruns = sweep_count(o), done = 0;
    struct initiator in = {.o = o};
    struct result *rs = calloc(nruns, sizeof(*rs));
    bool ok = true;
    int failed = 1;

    in.deadline = now_ns() + (uint64_t)(bound_s * 1e9);
    atomic_init(&in.t_first, 0);
    if (rs == NULL)
        return complain("out of memory");
    if (open_context(o, false, &in.s) ||
        setup_buffer(&in.s, o->buffer, PAT_B,
                     o->pingpong ? FERRY_ACCESS_REMOTE_WRITE : 0) ||
        initiator_connect(&in, where, bound_s))
        goto out;
    print_header(o, &in.s.info);
    for (; done < nruns; done++) {
        struct result *r = &rs[done];

        result_init(r);
        if (o->pingpong ? run_pingpong(&in, block_of_run(o, done), r)
                        : run_throughput(&in, block_of_run(o, done), r))
            goto out;
        r->ok = r->verdict == 0 && r->local_check != 1;
        ok &= r->ok;
        report_run(o, csv, done, r);
    }
    if (o->sweep_lo != 0)
        print_session(&rs[0]);
    if (send_ctl(&in.s, in.peer, ID_BYE, 0))
        goto out;
    if (o->json)
        print_json(o, &in.s.info, rs, nruns, ok);
    failed = !ok;
out:
    initiator_close(&in);
    free(rs);
    return failed;
}

/* ======================================================================
 * memcpy: the reference for shared memory
 * ====================================================================== */

static int run_memcpy(const struct options *o, uint64_t block, uint8_t *src,
                      uint8_t *dst, uint64_t len, struct result *res)
{
    uint64_t nblocks = len / block, copies = 0, measured = 0, lat_sum = 0;
    size_t cap = o->iterations != 0 && o->iterations < RESERVOIR_TOTAL
                     ? (size_t)o->iterations
                     : RESERVOIR_TOTAL;
    uint64_t t = now_ns(), t_prev = t, warm_end, stop_at = 0;
    bool measuring = o->warmup <= 0;
    struct window win = {0};
    struct reservoir lat;
    struct ticker tk;

    res->block = block;
    if (reservoir_init(&lat, cap, t))
        return 1;
    pattern_fill(dst, 0, len, PAT_B);
    ticker_start(&tk, t);
    warm_end = t + (uint64_t)(o->warmup * 1e9);
    if (measuring) {
        win.t_start = t;
        win.cpu_start = cpu_ns();
        stop_at = t + (uint64_t)(o->duration * 1e9);
    }
    t_prev = now_ns();
    for (;;) {
        uint64_t off = (copies % nblocks) * block;

        memcpy(dst + off, src + off, block);
        __asm__ __volatile__("" ::: "memory"); /* the copy must happen */
        copies++;
        t = now_ns();
        if (measuring) {
            measured++;
            lat_sum += t - t_prev;
            reservoir_add(&lat, t - t_prev);
        } else if (t >= warm_end) {
            measuring = true;
            win.t_start = t;
            win.cpu_start = cpu_ns();
            stop_at = t + (uint64_t)(o->duration * 1e9);
        }
        if (measuring && (o->iterations != 0 ? measured >= o->iterations
                                             : t >= stop_at)) {
            win.t_end = t;
            win.cpu_end = cpu_ns();
            break;
        }
        ticker_tick(&tk, t, copies * block, copies, 1, !measuring);
        t_prev = t;
    }
    if (o->validate) {
        uint64_t n = copies < nblocks ? copies : nblocks;
        res->first_bad = pattern_mismatch(dst, 0, n * block, PAT_A);
        if (res->first_bad == UINT64_MAX)
            res->first_bad = pattern_mismatch(dst, n * block,
                                              len - n * block, PAT_B);
        res->local_check = res->first_bad != UINT64_MAX;
    }
    res->seconds = (double)(win.t_end - win.t_start) / 1e9;
    res->cpu_here_s = (double)(win.cpu_end - win.cpu_start) / 1e9;
    res->bytes = measured * block;
    res->ops = res->reqs = res->measured = measured;
    res->mean_us = (double)lat_sum / (double)measured / 1e3;
    latency_summary(&lat, 1, 1.0, res);
    free(lat.v);
    return 0;
}

static int memcpy_main(const struct options *o, FILE *csv)
{
    size_t nruns = sweep_count(o);
    struct result *rs = calloc(nruns, sizeof(*rs));
    uint8_t *src = NULL, *dst = NULL;
    bool ok = true;
    char b1[32];

    if (rs == NULL || o->buffer > SIZE_MAX ||
        posix_memalign((void **)&src, 4096, o->buffer) != 0 ||
        posix_memalign((void **)&dst, 4096, o->buffer) != 0) {
        free(rs);
        free(src);
        return complain("cannot allocate two %s buffers",
                        fmt_iec(b1, sizeof(b1), o->buffer));
    }
    pattern_fill(src, 0, o->buffer, PAT_A);
    print_header(o, NULL);
    for (size_t i = 0; i < nruns; i++) {
        result_init(&rs[i]);
        run_memcpy(o, block_of_run(o, i), src, dst, o->buffer, &rs[i]);
        rs[i].ok = rs[i].local_check != 1;
        ok &= rs[i].ok;
        report_run(o, csv, i, &rs[i]);
    }
    if (o->json)
        print_json(o, NULL, rs, nruns, ok);
    free(src);
    free(dst);
    free(rs);
    return !ok;
}

/* ======================================================================
 * Modes and main
 * ====================================================================== */

static const char *describe_status(char *out, size_t n, int status)
{
    if (status == -1)
        snprintf(out, n, "is gone");
    else if (WIFEXITED(status))
        snprintf(out, n, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(out, n, "was killed by signal %d", WTERMSIG(status));
    else
        snprintf(out, n, "ended with wait status %d", status);
    return out;
}

/* The child: the target, bound to die with its parent. */
static void loopback_child(const struct options *o, pid_t parent, int fd,
                           double bound_s)
{
    struct sigaction sa;

    g_role = "ferry_bench (target)";
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = SIG_DFL;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
        _exit(1); /* the parent is already gone */
    arm_time_bound(bound_s + 10);
    int code = target_main(o, fd);
    fflush(NULL);
    _exit(code);
}

static int loopback_main(const struct options *o, double bound_s, FILE *csv)
{
    int fds[2], port = 0, code, status;
    pid_t parent = getpid(), pid;
    bool killed;
    char where[64], st[64];
    ssize_t n;

    if (pipe(fds) != 0)
        return complain("pipe: %s", strerror(errno));
    fflush(NULL);
    catch_interrupts(); /* before fork: no window without the handler */
    pid = fork();
    if (pid < 0)
        return complain("fork: %s", strerror(errno));
    if (pid == 0) {
        close(fds[0]);
        loopback_child(o, parent, fds[1], bound_s);
    }
    g_child = pid;
    arm_time_bound(bound_s);
    close(fds[1]);
    do
        n = read(fds[0], &port, sizeof(port));
    while (n < 0 && errno == EINTR);
    close(fds[0]);
    if (n != (ssize_t)sizeof(port)) {
        status = reap_child(5000, &killed);
        return complain("the target process did not start: it %s (its "
                        "message is above)",
                        describe_status(st, sizeof(st), status));
    }
    snprintf(where, sizeof(where), "127.0.0.1:%d", port);
    code = initiator_main(o, where, bound_s, csv);
    /* After a failure the target sees the bootstrap connection close and
     * stops; it gets a second to say why, then it is killed. */
    status = reap_child(code == 0 ? 10000 : 1000, &killed);
    if (code != 0)
        return code; /* the target's end is a consequence, not news */
    if (killed) {
        complain("the target process did not stop after the session; it "
                 "was killed");
        return 1;
    }
    if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        complain("the target process %s",
                 describe_status(st, sizeof(st), status));
        return 1;
    }
    return 0;
}

/* HOST:PORT, or HOST and --port. */
static const char *initiator_where(const struct options *o, char *buf,
                                   size_t n)
{
    const char *a = o->initiator_addr;
    const char *colon = strrchr(a, ':');
    bool has_port = colon != NULL && (a[0] != '[' || colon > strchr(a, ']'));

    if (has_port)
        return a;
    snprintf(buf, n, "%s:%u", a, o->port);
    return buf;
}

int main(int argc, char **argv)
{
    struct options o = {.port = DEFAULT_PORT,
                        .batch = 1,
                        .threads = 1,
                        .inflight = 4,
                        .warmup = 0.5,
                        .timeout_ms = 30000};
    FILE *csv = NULL;
    char where[300];
    double bound_s;
    int code;

    if (!parse_args(argc, argv, &o) || !resolve_options(&o))
        return EXIT_USAGE;
    if (o.cuda) {
        fprintf(stderr, "ferry_bench: --mem %s: CUDA memory arrives with the "
                "CUDA issue; ferry has no device support yet\n",
                o.mem_text);
        return EXIT_USAGE;
    }
    g_out = o.json ? stderr : stdout;
    if (o.csv != NULL) {
        csv = fopen(o.csv, "w");
        if (csv == NULL)
            return complain("--csv %s: %s", o.csv, strerror(errno)) + 1;
        fprintf(csv, "size_bytes,gb_per_s,ops_per_s,p50_us,p99_us,p999_us,"
                "mean_us\n");
    }
    bound_s = session_bound_s(&o);
    switch (o.mode) {
    case MODE_MEMCPY:
        code = memcpy_main(&o, csv);
        break;
    case MODE_TARGET:
        g_role = "ferry_bench (target)";
        code = target_main(&o, -1);
        break;
    case MODE_INITIATOR:
        arm_time_bound(bound_s);
        code = initiator_main(&o, initiator_where(&o, where, sizeof(where)),
                              bound_s, csv);
        break;
    case MODE_LOOPBACK:
    default:
        code = loopback_main(&o, bound_s, csv);
        break;
    }
    if (csv != NULL && fclose(csv) != 0)
        code = complain("--csv %s: %s", o.csv, strerror(errno));
    return code;
}
