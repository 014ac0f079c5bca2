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
 * The program's parts (this header is private to them):
 *   main.c        options in, one mode out
 *   options.c     parsing and every check made before allocating
 *   util.c        clocks, messages, human sizes
 *   pattern.c     the data patterns and their checkers
 *   side.c        a side's context, buffer and control mailbox
 *   target.c      the target
 *   initiator.c   the initiator's session and per-run exchanges
 *   throughput.c  throughput runs (worker threads)
 *   pingpong.c    latency runs
 *   memcpy.c      the memcpy reference
 *   stats.c       results, latency percentiles, the progress line
 *   report.c      the summary, the sweep table, CSV and JSON
 *   loopback.c    loopback mode and the session's time bound
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
#ifndef FERRY_BENCH_FBENCH_H
#define FERRY_BENCH_FBENCH_H

#include <ferry.h>

#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

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
    bool cuda; /* --mem: this side's buffer (both sides in loopback) */
    unsigned cuda_device;
    const char *mem_text;
    bool target_mem_set; /* --target-mem: the loopback target's instead */
    bool target_cuda;
    unsigned target_cuda_device;
    const char *target_mem_text;
    bool notify, validate, json, pingpong;
    uint64_t sweep_lo, sweep_hi; /* 0: no sweep */
    const char *sweep_text;
    const char *csv;
    int timeout_ms;
    double time_limit; /* 0: computed */
};

enum pattern { PAT_A = 0, PAT_B = 1 };
#define PAT_SEED UINT64_C(0x6665727279626e63) /* "ferrybnc" */
#define PAT_B_XOR UINT64_C(0x5a5a5a5a5a5a5a5a)

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
    /* --mem cuda: buf is device memory of `device`, which the CPU may not
     * touch; patterns go through `shadow` (side_fill, side_view). */
    bool cuda;
    unsigned device;
    uint8_t *buf;
    uint8_t *shadow;
    uint64_t len;
    ferry_mem_t *mem;
    uint64_t reg_ns; /* how long ferry_mem_register took */
    struct mbox mb;
    int timeout_ms;
};

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

/* The once-a-second line on stderr. */
struct ticker {
    uint64_t t0, t_last, next, bytes_last, ops_last;
};

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

struct window {
    uint64_t t_start, t_end, cpu_start, cpu_end;
};

/*
 * The measured window of a one-thread loop (--memcpy, --pingpong; in
 * stats.c): open from the start without a warm-up, else from the first
 * step past it; closed after --duration or --iterations measured steps.
 */
struct timed_loop {
    struct window win;
    bool measuring;
    uint64_t warm_end, stop_at;
};
void timed_loop_start(struct timed_loop *l, const struct options *o,
                      uint64_t t);
/* A step at time t after `measured` measured steps: true when it ends. */
bool timed_loop_step(struct timed_loop *l, const struct options *o,
                     uint64_t t, uint64_t measured);

/* util.c */
extern const char *g_role;
extern volatile sig_atomic_t g_child;
uint64_t now_ns(void);
uint64_t cpu_ns(void);
void sleep_ns(uint64_t ns);
int complain(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int fail(const char *what, int err);
const char *fmt_iec(char *out, size_t n, uint64_t v);
const char *fmt_flag(char *out, size_t n, uint64_t v);
const char *fmt_ns(char *out, size_t n, double ns);

/* pattern.c */
uint8_t pattern_byte(enum pattern p, uint64_t off);
void pattern_fill(uint8_t *buf, uint64_t off, uint64_t len,
                  enum pattern p);
void corrupt_for_self_test(uint8_t *buf, uint64_t len);
uint64_t pattern_mismatch(const uint8_t *buf, uint64_t off,
                          uint64_t len, enum pattern p);

/* options.c */
bool parse_args(int argc, char **argv, struct options *o);
size_t sweep_count(const struct options *o);
uint64_t block_of_run(const struct options *o, size_t i);
bool resolve_options(struct options *o);
double session_bound_s(const struct options *o);

/* side.c */
int open_context(const struct options *o, bool progress_thread,
                 struct side *s);
int setup_buffer(struct side *s, uint64_t len, enum pattern p,
                 unsigned access);
/* Pattern p into the whole buffer, wherever it lives. */
int side_fill(struct side *s, enum pattern p);
/* The buffer's bytes for the CPU to check: buf itself, or for device
 * memory a fresh copy in the shadow; NULL (after a message) on failure. */
uint8_t *side_view(struct side *s);
void side_close(struct side *s);
int mbox_pump(struct side *s);
void set_probe(ferry_oob_conn_t *conn, bool accepted);
bool peer_gone(void);
int mbox_wait(struct side *s, const uint64_t *ids, size_t nids,
              uint64_t deadline, const char *what,
              struct ferry_notification *out);
int mbox_wait1(struct side *s, uint64_t id, uint64_t deadline,
               const char *what, uint64_t *value);
int send_ctl(struct side *s, ferry_peer_t *peer, uint64_t id,
             uint64_t value);

/* target.c */
int target_main(const struct options *o, int report_fd);

/* stats.c */
int reservoir_init(struct reservoir *r, size_t cap, uint64_t seed);
void reservoir_add(struct reservoir *r, uint64_t x);
int latency_summary(struct reservoir *rs, size_t nrs, double scale,
                    struct result *res);
void ticker_start(struct ticker *tk, uint64_t t);
void ticker_tick(struct ticker *tk, uint64_t t, uint64_t bytes,
                 uint64_t ops, long inflight, bool warmup);
void result_init(struct result *r);

/* throughput.c */
int run_throughput(struct initiator *in, uint64_t block,
                   struct result *res);

/* pingpong.c */
int run_pingpong(struct initiator *in, uint64_t block,
                 struct result *res);

/* initiator.c */
void note_first_completion(struct initiator *in, uint64_t t);
int exchange_results(struct initiator *in, uint64_t written,
                     uint64_t block, uint64_t nreq, struct result *res);
int start_run(struct initiator *in, unsigned flags, uint64_t block);
unsigned run_flags(const struct options *o);
void fill_common(struct initiator *in, const struct window *win,
                 struct result *res);
int initiator_main(const struct options *o, const char *where,
                   double bound_s, FILE *csv);

/* report.c */
extern FILE *g_out;
void print_header(const struct options *o,
                  const struct ferry_context_info *info);
void print_session(const struct result *r);
void print_json(const struct options *o,
                const struct ferry_context_info *info,
                const struct result *rs, size_t n, bool ok);
void report_run(const struct options *o, FILE *csv, size_t i,
                const struct result *r);

/* memcpy.c */
int memcpy_main(const struct options *o, FILE *csv);

/* loopback.c */
void arm_time_bound(double seconds);
int loopback_main(const struct options *o, double bound_s, FILE *csv);

#endif /* FERRY_BENCH_FBENCH_H */
