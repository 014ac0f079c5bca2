/*
 * rma_raw: the provider's own floor for what ferry_bench measures, in raw
 * libfabric and nothing else.  Two processes on this machine (a fork)
 * write into, or read from, each other's registered buffer with
 * FI_DELIVERY_COMPLETE, the completion ferry asks for, and busy poll their
 * CQs.
 *
 *   rma_raw -p PROVIDER [-D DOMAIN] [-s BYTES] [-n ITERATIONS | -T SECONDS]
 *           [-w WARMUP] [-t | -i] [-c] [-b [-d DEPTH] | -W WINDOW [-a]]
 *           [-o OP_BYTES] [-B REGION] [-r] [-e] [-x] [-f]
 *   rma_raw -p PROVIDER [-D DOMAIN] [-s BYTES] -G GAPS [-g SECONDS] [-f]
 *
 * Ping-pong (the default): a write bounces back and forth, its remote CQ
 * data telling the other side it landed (the way ferry carries a
 * notification on a write).  Prints "BYTES ITERATIONS USEC", the mean
 * half round trip, in fi_pingpong's terms.
 *
 * One-way streams of BYTES blocks, each posted as operations of at most
 * OP_BYTES (the whole block), print "BYTES ITERATIONS GB/S OPS/S", where
 * an iteration and an op are a block:
 *   -b  keeps DEPTH (4) blocks in flight, posting one as one completes
 *       (ferry_bench's --inflight DEPTH);
 *   -W  posts WINDOW blocks, waits for all of them and posts the next
 *       window: fi_rma_bw's loop (its -W, 64 there), and ferry_bench's
 *       --batch-size WINDOW --inflight 1.
 * Block i goes to slot i mod (REGION / BYTES) of a REGION-byte buffer, at
 * the same offset on both sides.  REGION is BYTES x DEPTH or BYTES x
 * WINDOW, a slot for every block in flight, unless -B says otherwise:
 * -B BYTES reuses one block as fabtests do; -B with ferry_bench's
 * --buffer-size cycles through the same footprint as ferry does.
 * -r reads the target's blocks (fi_read) instead of writing them.
 * Writes carry remote CQ data on their last operation only, which ends
 * the target's polling, or with -e on every one (fi_rma_bw -o writedata);
 * -a adds fi_rma_bw -o writedata's handshake: the target answers every
 * window once all of it arrived, and the next window waits for that.
 * -x runs the stream both ways at once, as fi_rma_bw -o write and -o read
 * do; the initiating side prints its direction.
 *
 * After gaps (-G): one write of BYTES with CQ data at a time, each timed
 * from its post to its completion, back to back (WARMUP, then -n
 * ITERATIONS), then one after each of GAPS gaps of -g SECONDS (1) in
 * which this side sleeps.  Prints "BYTES GAPS FIRST_P50 FIRST_P99
 * WARM_P50 WARM_P99" in microseconds: ferry_bench --idle's writes in raw
 * libfabric.  The target busy polls throughout, so that the first write
 * after a gap meets a target that never rested: the floor of what a rest
 * costs the rest of the path; with -f it sleeps in fi_cq_sread instead,
 * as a target that gives its CPU up must.
 *
 * -n counts round trips or blocks after the WARMUP; -T runs them for
 * SECONDS instead.  -t asks for FI_TRANSMIT_COMPLETE instead, which ferry
 * never does: it shows what the delivery guarantee costs on the provider.
 * -i asks for no completion level at all, the provider's default, as
 * fi_rma_bw does unless given -U: tcp (libfabric 1.17) then completes a
 * write once it is sent, without the peer's acknowledgement that it
 * sends for both FI_TRANSMIT_COMPLETE and FI_DELIVERY_COMPLETE.
 * -c asks for the traffic class FI_TC_BULK_DATA, as fi_rma_bw does and
 * ferry does not: tcp then leaves Nagle's algorithm on (no TCP_NODELAY).
 * fi_rma_bw -o writedata -W W -S BYTES is therefore rma_raw -W W -a -i -c
 * -B BYTES -s BYTES, and with -U, rma_raw -W W -a -c -B BYTES -s BYTES.
 * -C times, on a stream's initiator, each call that posts (fi_write,
 * fi_writedata, fi_read) and each fi_cq_read of the measured blocks, and
 * prints after the result a line splitting an op's time between them and
 * the rest, as ferry_bench --call-times splits a request's
 * (bench/calltick.h; the readings slow the run a little).
 * -f opens the target's CQ with a file descriptor (FI_WAIT_FD), as a CQ
 * must be for a thread to sleep on it, as ferry's progress thread does on
 * a target (with -x both sides are targets); it still busy polls, except
 * with -G (above).  It shows what the descriptor alone costs on the
 * provider (tcp;ofi_rxm in 1.17 then asks epoll_wait for its sockets on
 * every poll).
 *
 * bench/compare.sh sets it beside ferry_bench, ucx_perftest and memcpy, so
 * that a gap between ferry and those can be split into what the
 * provider's RMA costs and what ferry adds.
 */
#include "calltick.h"

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_SIZE (64u << 20)
#define MAX_REGION (1u << 30)
#define MAX_DEPTH 64    /* -d */
#define MAX_WINDOW 1024 /* -W: ferry_bench's batches of 256 and more */
#define ADDR_MAX 256
#define MAX_GAPS 1000  /* -G */
#define SREAD_MS 100   /* -f -G: the target's longest sleep in fi_cq_sread */

/* What the remote CQ data of a write says. */
enum {
    DATA_OP = 1, /* a ping, or a write of the stream (-e) */
    DATA_END,    /* the initiator's last write: it is done */
    DATA_ACK,    /* the target saw a whole window arrive (-a) */
};

enum mode { PINGPONG, STREAM, WINDOW, GAPS };

/* What to run, from the options. */
struct run {
    const char *prov;
    const char *domain;  /* -D, or NULL: the provider's first */
    uint64_t completion; /* FI_DELIVERY_COMPLETE, -t's or -i's (0) */
    bool bulk;           /* -c */
    bool wait_fd;        /* -f */
    enum mode mode;
    bool read, every, ack, both; /* -r, -e, -a, -x */
    bool call_times;             /* -C */
    size_t size, op;
    size_t depth; /* blocks in flight (-d) or in a window (-W) */
    size_t slots; /* blocks the region holds */
    uint64_t iters, warmup;
    uint64_t ns; /* -T, or 0: run iters */
    uint64_t gaps, gap_ns; /* -G, -g */
};

/* What one side has seen so far. */
struct tally {
    uint64_t posted; /* operations this side posted */
    uint64_t done;   /* ... and their completions */
    uint64_t data;   /* writes of the other side that carried CQ data */
    uint64_t ends;   /* ... DATA_END */
    uint64_t acks;   /* ... DATA_ACK (not counted in data) */
};

/* One side: its libfabric objects, its buffer and what it knows of the
 * other side's buffer. */
struct side {
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
    struct fid_mr *mr;
    void *desc;
    fi_addr_t peer;
    uint64_t peer_addr, peer_key;
    uint8_t *buf;
    struct tally n;
    /* -C: the calls timed, once the measured blocks began */
    bool timing;
    /* -f -G on the target: reap sleeps in fi_cq_sread */
    bool sleeps;
    struct call_sum posts, reads;
};

/* What the two sides swap over the socket pair before the first write. */
struct card {
    uint8_t addr[ADDR_MAX];
    size_t addr_len;
    uint64_t buf_addr, key;
};

static int fail(const char *what, int ret)
{
    fprintf(stderr, "rma_raw: %s failed: %s\n", what,
            fi_strerror(ret < 0 ? -ret : ret));
    return 1;
}

/* Opens everything and registers a buffer of len bytes; the CQ of the
 * side that starts has a descriptor only with -f -x. */
static int side_open(struct side *s, const struct run *r, size_t len,
                     bool starts)
{
    struct fi_info *hints = fi_allocinfo();
    struct fi_cq_attr cq_attr = {
        .format = FI_CQ_FORMAT_DATA,
        .wait_obj = r->wait_fd && (!starts || r->both) ? FI_WAIT_FD
                                                       : FI_WAIT_NONE};
    struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
    const uint64_t access =
        FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
    int ret;

    if (hints == NULL)
        return fail("fi_allocinfo", -FI_ENOMEM);
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_RMA | access;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR |
                                  FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    hints->tx_attr->op_flags = r->completion;
    if (r->bulk)
        hints->tx_attr->tclass = FI_TC_BULK_DATA;
    hints->fabric_attr->prov_name = strdup(r->prov);
    if (r->domain != NULL)
        hints->domain_attr->name = strdup(r->domain);
    ret = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &s->info);
    fi_freeinfo(hints);
    if (ret)
        return fail("fi_getinfo", ret);
    if (s->info->domain_attr->cq_data_size == 0) {
        fprintf(stderr, "rma_raw: provider %s has no remote CQ data\n",
                r->prov);
        return 1;
    }
    if ((ret = fi_fabric(s->info->fabric_attr, &s->fabric, NULL)))
        return fail("fi_fabric", ret);
    if ((ret = fi_domain(s->fabric, s->info, &s->domain, NULL)))
        return fail("fi_domain", ret);
    if ((ret = fi_av_open(s->domain, &av_attr, &s->av, NULL)))
        return fail("fi_av_open", ret);
    if ((ret = fi_cq_open(s->domain, &cq_attr, &s->cq, NULL)))
        return fail(cq_attr.wait_obj == FI_WAIT_FD
                        ? "fi_cq_open with a file descriptor (-f)"
                        : "fi_cq_open",
                    ret);
    if ((ret = fi_endpoint(s->domain, s->info, &s->ep, NULL)))
        return fail("fi_endpoint", ret);
    if ((ret = fi_ep_bind(s->ep, &s->av->fid, 0)) ||
        (ret = fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV)))
        return fail("fi_ep_bind", ret);
    if ((ret = fi_enable(s->ep)))
        return fail("fi_enable", ret);
    s->buf = malloc(len);
    if (s->buf == NULL)
        return fail("malloc", -FI_ENOMEM);
    /* Every page its own: untouched pages all map the one zero page, which
     * the kernel would copy from its cache. */
    memset(s->buf, 0x5a, len);
    ret = fi_mr_reg(s->domain, s->buf, len, access, 0, 0, 0, &s->mr, NULL);
    if (ret)
        return fail("fi_mr_reg", ret);
    s->desc = fi_mr_desc(s->mr);
    return 0;
}

/* Swaps cards with the other process over fd and inserts its address. */
static int side_meet(struct side *s, int fd)
{
    struct card mine = {.addr_len = ADDR_MAX,
                        .key = fi_mr_key(s->mr)}, theirs;
    int ret;

    mine.buf_addr = s->info->domain_attr->mr_mode & FI_MR_VIRT_ADDR
                        ? (uint64_t)(uintptr_t)s->buf
                        : 0;
    if ((ret = fi_getname(&s->ep->fid, mine.addr, &mine.addr_len)))
        return fail("fi_getname", ret);
    errno = 0;
    if (write(fd, &mine, sizeof(mine)) != (ssize_t)sizeof(mine) ||
        read(fd, &theirs, sizeof(theirs)) != (ssize_t)sizeof(theirs)) {
        /* No errno, or EPIPE: the other process ended first, having
         * said why. */
        fprintf(stderr, "rma_raw: swapping addresses failed: %s\n",
                errno != 0 && errno != EPIPE ? strerror(errno)
                                             : "the other side gave up");
        return 1;
    }
    if (fi_av_insert(s->av, theirs.addr, 1, &s->peer, 0, NULL) != 1)
        return fail("fi_av_insert", -FI_EINVAL);
    s->peer_addr = theirs.buf_addr;
    s->peer_key = theirs.key;
    return 0;
}

/* Reads the CQ once into the side's tally. */
static int reap(struct side *s)
{
    struct fi_cq_data_entry e[16];
    uint64_t t0 = s->timing ? call_ticks() : 0;
    ssize_t n = s->sleeps ? fi_cq_sread(s->cq, e, 16, NULL, SREAD_MS)
                          : fi_cq_read(s->cq, e, 16);

    if (s->timing)
        call_note(&s->reads, t0);

    if (n == -FI_EAGAIN || (s->sleeps && n == -FI_ETIMEDOUT))
        return 0;
    if (n < 0) {
        struct fi_cq_err_entry err = {0};

        fi_cq_readerr(s->cq, &err, 0);
        return fail("a completion", err.err ? err.err : (int)n);
    }
    for (ssize_t i = 0; i < n; i++) {
        if (!(e[i].flags & FI_REMOTE_CQ_DATA))
            s->n.done++;
        else if (e[i].data == DATA_ACK)
            s->n.acks++;
        else {
            s->n.data++;
            s->n.ends += e[i].data == DATA_END;
        }
    }
    return 0;
}

/* Polls until *count (a field of s->n) reaches want. */
static int poll_until(struct side *s, const uint64_t *count, uint64_t want)
{
    while (*count < want)
        if (reap(s))
            return 1;
    return 0;
}

/*
 * A read of [off, +len) from the same offset of the other side's buffer,
 * or a write to it, carrying data as CQ data unless data is 0; progresses
 * while the provider has no room (-FI_EAGAIN).
 */
static int post(struct side *s, bool read, size_t off, size_t len,
                uint64_t data)
{
    void *local = s->buf + off;
    uint64_t raddr = s->peer_addr + off;
    ssize_t ret;

    for (;;) {
        uint64_t t0 = s->timing ? call_ticks() : 0;

        if (read)
            ret = fi_read(s->ep, local, len, s->desc, s->peer, raddr,
                          s->peer_key, NULL);
        else if (data != 0)
            ret = fi_writedata(s->ep, local, len, s->desc, data, s->peer,
                               raddr, s->peer_key, NULL);
        else
            ret = fi_write(s->ep, local, len, s->desc, s->peer, raddr,
                           s->peer_key, NULL);
        if (s->timing)
            call_note(&s->posts, t0);
        if (ret != -FI_EAGAIN)
            break;
        if (reap(s))
            return 1;
    }
    if (ret)
        return fail(read ? "fi_read" : data ? "fi_writedata" : "fi_write",
                    (int)ret);
    s->n.posted++;
    return 0;
}

/*
 * Whether round trip or block number next (from 0, the warmup included)
 * is to run: -n counts them after the warmup; -T times them from the
 * first measured one, which started at t0.
 */
static bool more(const struct run *r, uint64_t next, uint64_t t0)
{
    if (next <= r->warmup)
        return true;
    if (r->ns == 0)
        return next < r->warmup + r->iters;
    return call_clock_ns() - t0 < r->ns;
}

/* The side that starts each round trip times them; the other answers
 * until the ping marked as the last. */
static int pingpong(struct side *s, const struct run *r, bool starts)
{
    uint64_t i, t0 = 0, ns;
    bool last = false;

    for (i = 0; !last; i++) {
        if (i == r->warmup)
            t0 = call_clock_ns();
        if (starts) {
            last = !more(r, i + 1, t0);
            if (post(s, false, 0, r->size, last ? DATA_END : DATA_OP) ||
                poll_until(s, &s->n.data, i + 1))
                return 1;
        } else {
            if (poll_until(s, &s->n.data, i + 1))
                return 1;
            last = s->n.ends > 0;
            if (post(s, false, 0, r->size, DATA_OP))
                return 1;
        }
    }
    ns = call_clock_ns() - t0;
    if (starts)
        printf("%zu %" PRIu64 " %.3f\n", r->size, i - r->warmup,
               (double)ns / (double)(i - r->warmup) / 2 / 1e3);
    return poll_until(s, &s->n.done, s->n.posted); /* all delivered */
}

static size_t ops_per_block(const struct run *r)
{
    return (r->size + r->op - 1) / r->op;
}

/* Posts block b as operations of at most r->op bytes into its slot; the
 * last write of the last block tells the target the stream is over. */
static int post_block(struct side *s, const struct run *r, uint64_t b,
                      bool last)
{
    size_t base = (size_t)(b % r->slots) * r->size;

    for (size_t off = 0; off < r->size; off += r->op) {
        size_t len = r->size - off < r->op ? r->size - off : r->op;
        uint64_t data = 0;

        if (!r->read && last && off + len == r->size)
            data = DATA_END;
        else if (r->every)
            data = DATA_OP;
        if (post(s, r->read, base + off, len, data))
            return 1;
    }
    return 0;
}

/* Waits until every operation posted has completed and, with -a, the
 * target has answered every window of the first blocks blocks. */
static int settle(struct side *s, const struct run *r, uint64_t blocks)
{
    if (poll_until(s, &s->n.done, s->n.posted))
        return 1;
    return r->ack ? poll_until(s, &s->n.acks,
                               (blocks + r->depth - 1) / r->depth)
                  : 0;
}

/* Waits until block b may be posted: the window before it is settled, or
 * fewer than depth blocks are in flight. */
static int make_room(struct side *s, const struct run *r, uint64_t b)
{
    if (r->mode == WINDOW)
        return b % r->depth == 0 ? settle(s, r, b) : 0;
    while (s->n.posted - s->n.done >= r->depth * ops_per_block(r))
        if (reap(s))
            return 1;
    return 0;
}

/* -C: an op's time split between posting it, reading the CQ and the
 * rest, over the ops of the measured blocks. */
static void print_calls(const struct side *s, uint64_t ops,
                        struct call_mark from, struct call_mark to)
{
    double rate = call_rate(from, to), op_ns, post_ns, read_ns;

    if (ops == 0 || rate <= 0)
        return;
    op_ns = (double)(to.ns - from.ns) / (double)ops;
    post_ns = (double)s->posts.ticks / rate / (double)ops;
    read_ns = (double)s->reads.ticks / rate / (double)ops;
    fprintf(stderr, "calls: per op of %.0f ns: posting %.0f ns, fi_cq_read "
            "%.0f ns (%.2f reads per op, %.0f ns each), the rest %.0f ns\n",
            op_ns, post_ns, read_ns, (double)s->reads.n / (double)ops,
            call_ns_each(&s->reads, rate), op_ns - post_ns - read_ns);
}

/*
 * Streams blocks until more() says stop, then settles; a read stream then
 * tells the target with a write of its own that it is over.  Prints the
 * result when told to.
 */
static int initiate(struct side *s, const struct run *r, bool print)
{
    uint64_t b, t0 = 0, ns;
    struct call_mark from = {0, 0}, to;
    bool last = false;

    for (b = 0; !last; b++) {
        if (make_room(s, r, b))
            return 1;
        if (b == r->warmup) {
            from = call_mark_now();
            t0 = from.ns;
            s->timing = r->call_times;
        }
        last = !more(r, b + 1, t0);
        if (post_block(s, r, b, last))
            return 1;
    }
    if (settle(s, r, b))
        return 1;
    to = call_mark_now();
    ns = to.ns - t0;
    s->timing = false;
    if (r->read && (post(s, false, 0, 1, DATA_END) ||
                    poll_until(s, &s->n.done, s->n.posted)))
        return 1;
    if (!print)
        return 0;
    printf("%zu %" PRIu64 " %.3f %.0f\n", r->size, b - r->warmup,
           (double)(b - r->warmup) * (double)r->size / (double)ns,
           (double)(b - r->warmup) * 1e9 / (double)ns);
    if (r->call_times) {
        fflush(stdout); /* the result line before the calls' */
        print_calls(s, (b - r->warmup) * ops_per_block(r), from, to);
    }
    return 0;
}

/*
 * The target polls, which also progresses the initiator's operations on
 * providers with manual progress, until the stream's end; with -a it
 * answers every window that has arrived, and the last one, whole or not.
 */
static int serve(struct side *s, const struct run *r)
{
    uint64_t per_window = r->depth * ops_per_block(r), acked = 0;

    while (s->n.ends == 0) {
        if (reap(s))
            return 1;
        while (r->ack && (s->n.data >= (acked + 1) * per_window ||
                          (s->n.ends > 0 && s->n.data > acked * per_window))) {
            if (post(s, false, 0, 1, DATA_ACK))
                return 1;
            acked++;
        }
    }
    return poll_until(s, &s->n.done, s->n.posted);
}

static int by_value(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return (x > y) - (x < y);
}

/* The p-th percentile of n sorted nanosecond times, in microseconds:
 * the nearest rank, so that of 10 gaps the p99 is the slowest. */
static double percentile_us(const uint64_t *sorted, size_t n, double p)
{
    size_t rank = (size_t)(p / 100 * (double)n + 0.999999);

    return (double)sorted[rank > 0 ? rank - 1 : 0] / 1e3;
}

/* One write of the block with CQ data, from its post to its completion. */
static int timed_write(struct side *s, const struct run *r, uint64_t *ns)
{
    uint64_t t0 = call_clock_ns();

    if (post(s, false, 0, r->size, DATA_OP) ||
        poll_until(s, &s->n.done, s->n.posted))
        return 1;
    *ns = call_clock_ns() - t0;
    return 0;
}

static void sleep_for(uint64_t ns)
{
    struct timespec left = {(time_t)(ns / 1000000000u),
                            (long)(ns % 1000000000u)};

    while (nanosleep(&left, &left) != 0 && errno == EINTR)
        ;
}

/* -G: warm writes, then one after each gap; tells the target it is over
 * and prints the latencies. */
static int after_gaps(struct side *s, const struct run *r)
{
    uint64_t *warm = calloc(r->iters, sizeof(*warm));
    uint64_t *first = calloc(r->gaps, sizeof(*first));
    uint64_t ns;
    int ret = 1;

    if (warm == NULL || first == NULL) {
        ret = fail("calloc", -FI_ENOMEM);
        goto out;
    }
    for (uint64_t i = 0; i < r->warmup + r->iters; i++) {
        if (timed_write(s, r, &ns))
            goto out;
        if (i >= r->warmup)
            warm[i - r->warmup] = ns;
    }
    for (uint64_t g = 0; g < r->gaps; g++) {
        sleep_for(r->gap_ns);
        if (timed_write(s, r, &first[g]))
            goto out;
    }
    if (post(s, false, 0, 1, DATA_END) ||
        poll_until(s, &s->n.done, s->n.posted))
        goto out;
    qsort(first, r->gaps, sizeof(*first), by_value);
    qsort(warm, r->iters, sizeof(*warm), by_value);
    printf("%zu %" PRIu64 " %.2f %.2f", r->size, r->gaps,
           percentile_us(first, r->gaps, 50),
           percentile_us(first, r->gaps, 99));
    printf(" %.2f %.2f\n", percentile_us(warm, r->iters, 50),
           percentile_us(warm, r->iters, 99));
    ret = 0;
out:
    free(warm);
    free(first);
    return ret;
}

static int exercise(struct side *s, const struct run *r, bool starts)
{
    if (r->mode == PINGPONG)
        return pingpong(s, r, starts);
    if (r->mode == GAPS) {
        s->sleeps = r->wait_fd && !starts;
        return starts ? after_gaps(s, r) : serve(s, r);
    }
    if (!r->both)
        return starts ? initiate(s, r, true) : serve(s, r);
    /* Both ways: each side serves the other while it streams, then until
     * the other's stream is over too. */
    return initiate(s, r, starts) || poll_until(s, &s->n.ends, 1);
}

static void side_close(struct side *s)
{
    if (s->mr)
        fi_close(&s->mr->fid);
    if (s->ep)
        fi_close(&s->ep->fid);
    if (s->cq)
        fi_close(&s->cq->fid);
    if (s->av)
        fi_close(&s->av->fid);
    if (s->domain)
        fi_close(&s->domain->fid);
    if (s->fabric)
        fi_close(&s->fabric->fid);
    if (s->info)
        fi_freeinfo(s->info);
    free(s->buf);
}

static int run_side(const struct run *r, int fd, bool starts)
{
    struct side s = {0};
    char done = 0;
    int ret = side_open(&s, r, r->size * r->slots, starts) ||
              side_meet(&s, fd) || exercise(&s, r, starts);

    /* Neither closes its endpoint while the other may still need it. */
    if (write(fd, &done, 1) != 1 || read(fd, &done, 1) != 1)
        ret = 1;
    side_close(&s);
    return ret;
}

static int usage(void)
{
    fprintf(stderr,
            "usage: rma_raw -p PROVIDER [-D DOMAIN] [-s BYTES (8; 1 to %u)]\n"
            "         [-n ITERATIONS (100000) | -T SECONDS] [-w WARMUP "
            "(1000)]\n"
            "         [-t: FI_TRANSMIT_COMPLETE | -i: the provider's default] "
            "[-c: FI_TC_BULK_DATA]\n"
            "         [-f: the target's CQ with a file descriptor "
            "(FI_WAIT_FD)]\n"
            "  ping-pong by default; one-way streams:\n"
            "         [-b: DEPTH in flight [-d DEPTH (4; 1 to %u)] | "
            "-W WINDOW: windows (1 to %u)]\n"
            "         [-o OP_BYTES (BYTES)] [-B REGION (BYTES x DEPTH or "
            "WINDOW; at most %u)]\n"
            "         [-r: reads] [-e: CQ data on every write] [-a: the "
            "target answers windows]\n"
            "         [-x: both ways at once] [-C: time the initiator's "
            "calls]\n"
            "  the first write after gaps: -G GAPS (1 to %u) [-g SECONDS "
            "(1)]\n"
            "  [-P: the initiator on CPU 0, the target on CPU 1]\n",
            MAX_SIZE, MAX_DEPTH, MAX_WINDOW, MAX_REGION, MAX_GAPS);
    return 2;
}

/* -P: this process on one CPU, so that the scheduler cannot put both
 * sides' polling on the same one (compare ferry_bench --pin). */
static int pin_to(int cpu)
{
    cpu_set_t set;

    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0) {
        fprintf(stderr, "rma_raw: -P: cannot run on CPU %d: %s\n", cpu,
                strerror(errno));
        return -1;
    }
    return 0;
}

/* A whole number in [lo, hi], or -1. */
static long long number(const char *s, long long lo, long long hi)
{
    char *end;
    long long v;

    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < lo || v > hi)
        return -1;
    return v;
}

/* Seconds in (0, 86400] as nanoseconds, or 0. */
static uint64_t seconds(const char *s)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || !(v > 0 && v <= 86400))
        return 0;
    return (uint64_t)(v * 1e9);
}

/* Options that do not go together: the sentence says which and why. */
static int refuse(const char *why)
{
    fprintf(stderr, "rma_raw: %s\n", why);
    return 2;
}

/* The option letters given, for the checks that combine them. */
struct given {
    bool n, d, B, t, i, g, stream_only;
    long long region;
};

/* Checks what the options combine into and fills in the stream's shape. */
static int shape(struct run *r, const struct given *g, long long depth,
                 long long op)
{
    if (g->n && r->ns != 0)
        return refuse("-n counts, -T times: give one");
    if (g->t && g->i)
        return refuse("-t asks for FI_TRANSMIT_COMPLETE, -i for no level: "
                      "give one");
    if (r->mode == PINGPONG && g->stream_only)
        return refuse("-d, -o, -B, -r, -e, -a, -x and -C shape or time the "
                      "streams: give -b or -W as well");
    if (r->mode == GAPS && (g->stream_only || r->ns != 0))
        return refuse("-G times single writes, -n of them warm: -T, -d, -o, "
                      "-B, -r, -e, -a, -x and -C are the streams'");
    if (g->g && r->mode != GAPS)
        return refuse("-g is the length of -G's gaps: give -G GAPS");
    if (r->mode == WINDOW && g->d)
        return refuse("-d is the depth of -b: -W WINDOW sets the window");
    if (r->read && (r->every || r->ack))
        return refuse("reads carry no CQ data: -e and -a are for writes");
    if (r->ack && r->mode != WINDOW)
        return refuse("-a answers windows: give -W WINDOW");
    if (r->ack && r->both)
        return refuse("-a is fi_rma_bw -o writedata's handshake, one way "
                      "only: not with -x");
    r->every |= r->ack; /* the target counts every write of a window */
    r->depth = r->mode == PINGPONG || r->mode == GAPS ? 1 : (size_t)depth;
    r->op = op != 0 ? (size_t)op : r->size;
    if (!g->B && r->size * r->depth > MAX_REGION) {
        fprintf(stderr, "rma_raw: %zu blocks of %zu bytes are above %u "
                        "bytes: lower -d or -W, or give -B\n",
                r->depth, r->size, MAX_REGION);
        return usage();
    }
    if (g->B && (size_t)g->region < r->size) {
        fprintf(stderr, "rma_raw: -B %lld: the region must hold a block "
                        "(-s %zu) at least\n", g->region, r->size);
        return usage();
    }
    r->slots = g->B ? (size_t)g->region / r->size : r->depth;
    return 0;
}

int main(int argc, char **argv)
{
    struct run r = {.completion = FI_DELIVERY_COMPLETE, .mode = PINGPONG,
                    .gap_ns = 1000000000u};
    struct given g = {0};
    long long size = 8, iters = 100000, warmup = 1000, depth = 4, op = 0;
    long long gaps = 0;
    bool bad = false, pin = false;
    int fds[2], opt, status, ret;
    pid_t child;

    while ((opt = getopt(argc, argv, "p:D:s:n:T:w:ticfbd:W:o:B:reaxPCG:g:")) != -1) {
        switch (opt) {
        case 'p': r.prov = optarg; break;
        case 'D': r.domain = optarg; break;
        case 's': bad = (size = number(optarg, 1, MAX_SIZE)) < 0; break;
        case 'n':
            bad = (iters = number(optarg, 1, 1000000000)) < 0;
            g.n = true;
            break;
        case 'T': bad = (r.ns = seconds(optarg)) == 0; break;
        case 'w': bad = (warmup = number(optarg, 0, 1000000000)) < 0; break;
        case 't':
            r.completion = FI_TRANSMIT_COMPLETE;
            g.t = true;
            break;
        case 'i':
            r.completion = 0;
            g.i = true;
            break;
        case 'c': r.bulk = true; break;
        case 'f': r.wait_fd = true; break;
        case 'b':
        case 'W':
        case 'G':
            if (r.mode != PINGPONG)
                return refuse("-b, -W and -G are kinds of run: give one");
            r.mode = opt == 'b' ? STREAM : opt == 'W' ? WINDOW : GAPS;
            if (opt == 'W')
                bad = (depth = number(optarg, 1, MAX_WINDOW)) < 0;
            else if (opt == 'G')
                bad = (gaps = number(optarg, 1, MAX_GAPS)) < 0;
            break;
        case 'g':
            bad = (r.gap_ns = seconds(optarg)) == 0;
            g.g = true;
            break;
        case 'd':
            bad = (depth = number(optarg, 1, MAX_DEPTH)) < 0;
            g.d = g.stream_only = true;
            break;
        case 'o':
            bad = (op = number(optarg, 1, MAX_SIZE)) < 0;
            g.stream_only = true;
            break;
        case 'B':
            bad = (g.region = number(optarg, 1, MAX_REGION)) < 0;
            g.B = g.stream_only = true;
            break;
        case 'r': r.read = g.stream_only = true; break;
        case 'e': r.every = g.stream_only = true; break;
        case 'a': r.ack = g.stream_only = true; break;
        case 'x': r.both = g.stream_only = true; break;
        case 'P': pin = true; break;
        case 'C': r.call_times = g.stream_only = true; break;
        default: return usage();
        }
        if (bad) {
            fprintf(stderr, "rma_raw: -%c %s is not a %s in range\n", opt,
                    optarg, opt == 'T' || opt == 'g' ? "number of seconds"
                                                     : "whole number");
            return usage();
        }
    }
    if (r.prov == NULL || optind != argc)
        return usage();
    r.size = (size_t)size;
    r.iters = (uint64_t)iters;
    r.warmup = (uint64_t)warmup;
    r.gaps = (uint64_t)gaps;
    if ((ret = shape(&r, &g, depth, op)))
        return ret;
    /* A side whose peer failed first gets EPIPE from the socket pair and
     * says so, instead of dying of SIGPIPE. */
    signal(SIGPIPE, SIG_IGN);
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds)) {
        perror("rma_raw: socketpair");
        return 1;
    }
    fflush(stdout);
    child = fork();
    if (child < 0) {
        perror("rma_raw: fork");
        return 1;
    }
    if (child == 0) {
        close(fds[0]);
        if (pin && pin_to(1) != 0)
            _exit(1);
        _exit(run_side(&r, fds[1], false));
    }
    close(fds[1]);
    if (pin && pin_to(0) != 0) {
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        return 1;
    }
    ret = run_side(&r, fds[0], true);
    close(fds[0]); /* a child stuck on the swap sees the end */
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0)
        ret = 1;
    return ret;
}
