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
 * The program's parts, each with its own header beside it (X.c declares
 * what it offers in X.h); this one holds what they all share: the wire
 * protocol between the two sides and the exit statuses.
 *   main.c        options in, one mode out
 *   options.c     parsing and every check made before allocating
 *   util.c        clocks, messages, human sizes
 *   pattern.c     the data patterns and their checkers
 *   side.c        a side's context, buffer and control mailbox
 *   target.c      the target
 *   initiator.c   the initiator: connects, drives every run, says BYE
 *   session.c     the initiator's state and the exchanges of every run
 *   throughput.c  throughput runs (worker threads)
 *   pingpong.c    latency runs
 *   idle.c        idle runs: the target at rest, writes after gaps
 *   memcpy.c      the memcpy reference
 *   stats.c       results, latency percentiles, the progress line
 *   report.c      the summary, the sweep table, CSV and JSON
 *   loopback.c    loopback mode and the session's time bound
 *
 * Calls flow one way, from the modes (loopback, target, initiator,
 * memcpy) down to the parts they use: initiator.c calls throughput.c,
 * pingpong.c and idle.c (which drives its writes with pingpong.c's loop),
 * and those share session.c below them instead of calling back up, so no
 * header includes, directly or not, the header of a part that uses it.
 *
 * How a run works.  The target registers a buffer, fills it with pattern A
 * and publishes it in the metadata service (ferry_meta_*): the embedded
 * bootstrap (bootstrap://, whose hub the target becomes) unless
 * --metadata names another.  The initiator registers a buffer of the same
 * size, fills it with pattern B (every byte differs from A), joins and
 * looks the target's buffer up.  Each initiator thread owns a slice of the
 * buffer cut into request-sized slots (--batch-size blocks of --block-size
 * bytes) and keeps --inflight requests going, cycling through its slots;
 * local and remote offsets are equal, so a block written to the wrong
 * place is seen at validation.
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
 * In an idle run (--idle) the writes come after READY (ID_DATA: warm ones,
 * then one after each gap), while the target's thread dozes outside
 * ferry; then MEASURE (value: the window in ms) opens the target's idle
 * window: it sleeps through it on its own clock and answers T_IDLE_NS,
 * T_IDLE_CPU, T_WAKEUPS and T_PREEMPTED when it closes; only then does
 * the initiator send WRITTEN, so nothing lands inside it.
 *
 * FERRY_BENCH_CORRUPT=OFFSET (a self-test of the checkers) flips a byte of
 * the checked buffer before --validate, or a fan-out's receiver, checks
 * it: the run must fail.
 *
 * Nothing hangs: every request has a deadline (--timeout), every wait for
 * the peer has one, and SIGALRM bounds the whole session (--time-limit).
 * In loopback mode the target is a child process that dies with its parent
 * (PR_SET_PDEATHSIG) and that the parent kills and reaps on any failure.
 */

#ifndef FERRY_BENCH_FBENCH_H
#define FERRY_BENCH_FBENCH_H

#include <stdint.h>

/* The regions the two sides publish in the metadata service. */
#define REGION_NAME "ferry_bench"
#define PONG_REGION_NAME "ferry_bench.pong"
/* --regions N: region k of the target's buffer, k from 0 (printf). */
#define SLICE_REGION_NAME "ferry_bench.region.%u"
#define CONNECT_TIMEOUT_MS 30000
/* Room for the service's URL (ferry keeps at most 1023 characters). */
#define FBENCH_URL_MAX 1024
/* Exit statuses besides 0 and 1 (--help lists them). */
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
    ID_MEASURE,    /* the measured window starts (value: an idle run's
                      window in ms) */
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
    ID_T_IDLE_NS,    /* the idle window's length by the target's clock */
    ID_T_IDLE_CPU,   /* the target process's CPU ns in it */
    ID_T_WAKEUPS,    /* its voluntary context switches in it */
    ID_T_PREEMPTED,  /* its involuntary ones */
};
/* The notification that ends a pingpong run carries this value. */
#define PING_STOP (UINT64_C(1) << 40)

enum run_flags {
    RUN_PINGPONG = 1u << 0,
    RUN_READ = 1u << 1,
    RUN_VALIDATE = 1u << 2,
    RUN_NOTIFY = 1u << 3,
    RUN_IDLE = 1u << 4,
};

enum verdict {
    VERDICT_NOTIFY = 1u << 0,   /* counted notifications != requests */
    VERDICT_COUNTER = 1u << 1,  /* ferry's counter disagreed with its queue */
    VERDICT_DATA = 1u << 2,     /* the buffer holds a wrong byte */
    VERDICT_MODE = 1u << 3,     /* the two sides disagree on --pingpong */
    VERDICT_PINGS = 1u << 4,    /* pings counted != pings sent */
};

#endif /* FERRY_BENCH_FBENCH_H */
