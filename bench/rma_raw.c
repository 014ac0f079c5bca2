/*
 * rma_raw: the provider's own floor for what ferry_bench measures, in raw
 * libfabric and nothing else.  Two processes on this machine (a fork)
 * write into each other's registered buffer with FI_DELIVERY_COMPLETE,
 * the completion ferry asks for, and busy poll their CQs.
 *
 *   rma_raw -p PROVIDER [-D DOMAIN] [-s BYTES] [-n ITERATIONS]
 *           [-w WARMUP] [-t] [-b [-d DEPTH] [-o OP_BYTES]]
 *
 * Ping-pong (the default): a write bounces back and forth, its remote CQ
 * data telling the other side it landed (the way ferry carries a
 * notification on a write).  Prints "BYTES ITERATIONS USEC", the mean
 * half round trip, in fi_pingpong's terms.
 *
 * -b, one-way stream: BYTES blocks written DEPTH (4) at a time over DEPTH
 * slices of the buffer, each as writes of at most OP_BYTES (the whole
 * block); the last carries CQ data that ends the target's polling.
 * Prints "BYTES ITERATIONS GB/S".
 *
 * -t asks for FI_TRANSMIT_COMPLETE instead, which ferry never does: it
 * shows what the delivery guarantee costs on the provider.
 *
 * bench/compare.sh sets it beside ferry_bench and fi_pingpong or iperf3,
 * so that a gap between ferry and those can be split into what the
 * provider's RMA costs and what ferry adds.
 */
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_SIZE (64u << 20)
#define MAX_DEPTH 64
#define ADDR_MAX 256

/* What to run, from the options. */
struct run {
    const char *prov;
    const char *domain; /* -D, or NULL: the provider's first */
    uint64_t completion; /* FI_DELIVERY_COMPLETE, or -t's */
    bool stream;         /* -b */
    size_t size, op, depth;
    uint64_t iters, warmup;
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

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Opens everything and registers a buffer of len bytes. */
static int side_open(struct side *s, const struct run *r, size_t len)
{
    struct fi_info *hints = fi_allocinfo();
    struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_DATA,
                                 .wait_obj = FI_WAIT_NONE};
    struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
    int ret;

    if (hints == NULL)
        return fail("fi_allocinfo", -FI_ENOMEM);
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_RMA | FI_WRITE | FI_REMOTE_WRITE;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR |
                                  FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    hints->tx_attr->op_flags = r->completion;
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
        return fail("fi_cq_open", ret);
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
    ret = fi_mr_reg(s->domain, s->buf, len, FI_WRITE | FI_REMOTE_WRITE, 0,
                    0, 0, &s->mr, NULL);
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
    if (write(fd, &mine, sizeof(mine)) != (ssize_t)sizeof(mine) ||
        read(fd, &theirs, sizeof(theirs)) != (ssize_t)sizeof(theirs)) {
        fprintf(stderr, "rma_raw: swapping addresses failed: %s\n",
                strerror(errno));
        return 1;
    }
    if (fi_av_insert(s->av, theirs.addr, 1, &s->peer, 0, NULL) != 1)
        return fail("fi_av_insert", -FI_EINVAL);
    s->peer_addr = theirs.buf_addr;
    s->peer_key = theirs.key;
    return 0;
}

/*
 * Reads the CQ once: completions of this side's writes add to *done,
 * writes of the other side that carried CQ data to *arrived.
 */
static int reap(struct side *s, uint64_t *done, uint64_t *arrived)
{
    struct fi_cq_data_entry e[16];
    ssize_t n = fi_cq_read(s->cq, e, 16);

    if (n == -FI_EAGAIN)
        return 0;
    if (n < 0) {
        struct fi_cq_err_entry err = {0};

        fi_cq_readerr(s->cq, &err, 0);
        return fail("a completion", err.err ? err.err : (int)n);
    }
    for (ssize_t i = 0; i < n; i++) {
        if (e[i].flags & FI_REMOTE_CQ_DATA)
            ++*arrived;
        else
            ++*done;
    }
    return 0;
}

/* A write of [off, +len) to the same offset of the other side's buffer,
 * with CQ data or without; progresses while the provider has no room. */
static int post(struct side *s, size_t off, size_t len, bool data,
                uint64_t *done, uint64_t *arrived)
{
    ssize_t ret;

    for (;;) {
        ret = data ? fi_writedata(s->ep, s->buf + off, len, s->desc, 1,
                                  s->peer, s->peer_addr + off, s->peer_key,
                                  NULL)
                   : fi_write(s->ep, s->buf + off, len, s->desc, s->peer,
                              s->peer_addr + off, s->peer_key, NULL);
        if (ret != -FI_EAGAIN)
            break;
        if (reap(s, done, arrived))
            return 1;
    }
    return ret ? fail(data ? "fi_writedata" : "fi_write", (int)ret) : 0;
}

/* Polls until *count (done or arrived) reaches want. */
static int poll_until(struct side *s, const uint64_t *count, uint64_t want,
                      uint64_t *done, uint64_t *arrived)
{
    while (*count < want)
        if (reap(s, done, arrived))
            return 1;
    return 0;
}

/* The side that starts each round trip times them; the other answers. */
static int pingpong(struct side *s, const struct run *r, int starts)
{
    uint64_t done = 0, arrived = 0, t0 = 0, n = r->warmup + r->iters;

    for (uint64_t i = 0; i < n; i++) {
        if (i == r->warmup)
            t0 = now_ns();
        if ((starts && post(s, 0, r->size, true, &done, &arrived)) ||
            poll_until(s, &arrived, i + 1, &done, &arrived) ||
            (!starts && post(s, 0, r->size, true, &done, &arrived)))
            return 1;
    }
    if (starts)
        printf("%zu %" PRIu64 " %.3f\n", r->size, r->iters,
               (double)(now_ns() - t0) / (double)r->iters / 2 / 1e3);
    return poll_until(s, &done, n, &done, &arrived); /* all delivered */
}

/* The starting side streams blocks; the other polls until the last. */
static int stream(struct side *s, const struct run *r, int starts)
{
    uint64_t done = 0, arrived = 0, posted = 0, t0 = 0;
    uint64_t n = r->warmup + r->iters;
    size_t ops = (r->size + r->op - 1) / r->op;

    if (!starts)
        return poll_until(s, &arrived, 1, &done, &arrived);
    for (uint64_t b = 0; b < n; b++) {
        size_t base = (size_t)(b % r->depth) * r->size;

        /* At most depth blocks in flight. */
        while (posted - done >= r->depth * ops)
            if (reap(s, &done, &arrived))
                return 1;
        if (b == r->warmup)
            t0 = now_ns();
        for (size_t off = 0; off < r->size; off += r->op) {
            size_t len = r->size - off < r->op ? r->size - off : r->op;
            bool last = b + 1 == n && off + len == r->size;

            if (post(s, base + off, len, last, &done, &arrived))
                return 1;
            posted++;
        }
    }
    if (poll_until(s, &done, posted, &done, &arrived))
        return 1;
    printf("%zu %" PRIu64 " %.3f\n", r->size, r->iters,
           (double)r->iters * (double)r->size / (double)(now_ns() - t0));
    return 0;
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

static int run_side(const struct run *r, int fd, int starts)
{
    struct side s = {0};
    char done = 0;
    int ret = side_open(&s, r, r->size * r->depth) || side_meet(&s, fd) ||
              (r->stream ? stream(&s, r, starts) : pingpong(&s, r, starts));

    /* Neither closes its endpoint while the other may still need it. */
    if (write(fd, &done, 1) != 1 || read(fd, &done, 1) != 1)
        ret = 1;
    side_close(&s);
    return ret;
}

static int usage(void)
{
    fprintf(stderr,
            "usage: rma_raw -p PROVIDER [-D DOMAIN] [-s BYTES (8; 1 to %u)] "
            "[-n ITERATIONS (100000)] [-w WARMUP (1000)] [-t: "
            "FI_TRANSMIT_COMPLETE] [-b: one-way stream [-d DEPTH (4; 1 to "
            "%u)] [-o OP_BYTES (BYTES)]]\n",
            MAX_SIZE, MAX_DEPTH);
    return 2;
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

int main(int argc, char **argv)
{
    struct run r = {.completion = FI_DELIVERY_COMPLETE};
    long long size = 8, iters = 100000, warmup = 1000, depth = 4, op = 0;
    int fds[2], opt, status, ret;
    pid_t child;

    while ((opt = getopt(argc, argv, "p:D:s:n:w:tbd:o:")) != -1) {
        switch (opt) {
        case 'p': r.prov = optarg; break;
        case 'D': r.domain = optarg; break;
        case 's': size = number(optarg, 1, MAX_SIZE); break;
        case 'n': iters = number(optarg, 1, 1000000000); break;
        case 'w': warmup = number(optarg, 0, 1000000000); break;
        case 't': r.completion = FI_TRANSMIT_COMPLETE; break;
        case 'b': r.stream = true; break;
        case 'd': depth = number(optarg, 1, MAX_DEPTH); break;
        case 'o': op = number(optarg, 1, MAX_SIZE); break;
        default: return usage();
        }
        if (size < 0 || iters < 0 || warmup < 0 || depth < 0 || op < 0) {
            fprintf(stderr, "rma_raw: -%c %s is not a whole number in "
                            "range\n", opt, optarg);
            return usage();
        }
    }
    if (r.prov == NULL || optind != argc)
        return usage();
    r.size = (size_t)size;
    r.iters = (uint64_t)iters;
    r.warmup = (uint64_t)warmup;
    /* A ping-pong bounces one block; -d and -o shape the stream only. */
    r.depth = r.stream ? (size_t)depth : 1;
    r.op = r.stream && op != 0 ? (size_t)op : r.size;
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
        _exit(run_side(&r, fds[1], 0));
    }
    close(fds[1]);
    ret = run_side(&r, fds[0], 1);
    close(fds[0]); /* a child stuck on the swap sees the end */
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0)
        ret = 1;
    return ret;
}
