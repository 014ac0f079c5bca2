/*
 * rma_pingpong: the provider's own floor for what a ferry_bench --pingpong
 * does, in raw libfabric and nothing else.  Two processes on this machine
 * (a fork) bounce a write back and forth: fi_writedata with
 * FI_DELIVERY_COMPLETE, the same completion ferry asks for, whose remote
 * CQ data tells the other side that the data has landed (the way ferry
 * carries a notification on a write).  Both sides busy poll their CQ.
 *
 *   rma_pingpong -p PROVIDER [-s BYTES] [-n ITERATIONS] [-w WARMUP] [-t]
 *
 * -t asks for FI_TRANSMIT_COMPLETE instead, which ferry never does: it
 * shows what the delivery guarantee costs on the provider.
 *
 * Prints the mean half round trip in microseconds, in fi_pingpong's
 * terms ("usec/xfer"), as the last line:  BYTES ITERATIONS USEC
 * bench/compare.sh sets it beside ferry_bench and fi_pingpong, so that a
 * gap between ferry and fi_pingpong (which sends one message and asks for
 * no delivery completion) can be split into what the provider's RMA costs
 * and what ferry adds.
 */
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_SIZE (1u << 20)
#define ADDR_MAX 256

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
    fprintf(stderr, "rma_pingpong: %s failed: %s\n", what,
            fi_strerror(ret < 0 ? -ret : ret));
    return 1;
}

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int side_open(struct side *s, const char *prov, size_t size,
                     uint64_t completion)
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
    hints->tx_attr->op_flags = completion;
    hints->fabric_attr->prov_name = strdup(prov);
    ret = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &s->info);
    fi_freeinfo(hints);
    if (ret)
        return fail("fi_getinfo", ret);
    if (s->info->domain_attr->cq_data_size == 0) {
        fprintf(stderr, "rma_pingpong: provider %s has no remote CQ data\n",
                prov);
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
    s->buf = calloc(1, size);
    if (s->buf == NULL)
        return fail("calloc", -FI_ENOMEM);
    ret = fi_mr_reg(s->domain, s->buf, size, FI_WRITE | FI_REMOTE_WRITE, 0,
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
        fprintf(stderr, "rma_pingpong: swapping addresses failed: %s\n",
                strerror(errno));
        return 1;
    }
    if (fi_av_insert(s->av, theirs.addr, 1, &s->peer, 0, NULL) != 1)
        return fail("fi_av_insert", -FI_EINVAL);
    s->peer_addr = theirs.buf_addr;
    s->peer_key = theirs.key;
    return 0;
}

static int post_write(struct side *s, size_t size, uint64_t data)
{
    ssize_t ret;

    while ((ret = fi_writedata(s->ep, s->buf, size, s->desc, data, s->peer,
                               s->peer_addr, s->peer_key, NULL)) ==
           -FI_EAGAIN)
        fi_cq_read(s->cq, NULL, 0); /* progress */
    return ret ? fail("fi_writedata", (int)ret) : 0;
}

/*
 * Polls until the other side's write with CQ data arrives; completions
 * of this side's own writes are counted in *sent_done on the way.
 */
static int wait_write(struct side *s, uint64_t *sent_done)
{
    for (;;) {
        struct fi_cq_data_entry e[8];
        ssize_t n = fi_cq_read(s->cq, e, 8);
        int got = 0;

        if (n == -FI_EAGAIN)
            continue;
        if (n < 0) {
            struct fi_cq_err_entry err = {0};

            fi_cq_readerr(s->cq, &err, 0);
            return fail("a completion", err.err ? err.err : (int)n);
        }
        for (ssize_t i = 0; i < n; i++) {
            if (e[i].flags & FI_REMOTE_CQ_DATA)
                got++;
            else
                ++*sent_done;
        }
        if (got)
            return 0;
    }
}

/* The side that starts each round trip times them; the other answers. */
static int bounce(struct side *s, size_t size, uint64_t iters,
                  uint64_t warmup, int starts)
{
    uint64_t sent_done = 0, t0 = 0;

    for (uint64_t i = 0; i < warmup + iters; i++) {
        if (i == warmup)
            t0 = now_ns();
        if (starts && post_write(s, size, i))
            return 1;
        if (wait_write(s, &sent_done))
            return 1;
        if (!starts && post_write(s, size, i))
            return 1;
    }
    if (starts)
        printf("%zu %" PRIu64 " %.3f\n", size, iters,
               (double)(now_ns() - t0) / (double)iters / 2 / 1e3);
    /* Every write delivered before the endpoints go. */
    while (sent_done < warmup + iters) {
        struct fi_cq_data_entry e;
        ssize_t n = fi_cq_read(s->cq, &e, 1);

        if (n < 0 && n != -FI_EAGAIN)
            return fail("a last completion", (int)n);
        if (n == 1 && !(e.flags & FI_REMOTE_CQ_DATA))
            sent_done++;
    }
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

static int run_side(const char *prov, size_t size, uint64_t completion,
                    uint64_t iters, uint64_t warmup, int fd, int starts)
{
    struct side s = {0};
    char done = 0;
    int ret = side_open(&s, prov, size, completion) || side_meet(&s, fd) ||
              bounce(&s, size, iters, warmup, starts);

    /* Neither closes its endpoint while the other may still need it. */
    if (write(fd, &done, 1) != 1 || read(fd, &done, 1) != 1)
        ret = 1;
    side_close(&s);
    return ret;
}

static int usage(void)
{
    fprintf(stderr, "usage: rma_pingpong -p PROVIDER [-s BYTES (8; 1 to "
                    "%u)] [-n ITERATIONS (100000)] [-w WARMUP (1000)] [-t: "
                    "FI_TRANSMIT_COMPLETE]\n",
            MAX_SIZE);
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
    const char *prov = NULL;
    long long size = 8, iters = 100000, warmup = 1000;
    uint64_t completion = FI_DELIVERY_COMPLETE;
    int fds[2], opt, status, ret;
    pid_t child;

    while ((opt = getopt(argc, argv, "p:s:n:w:t")) != -1) {
        switch (opt) {
        case 'p': prov = optarg; break;
        case 's': size = number(optarg, 1, MAX_SIZE); break;
        case 'n': iters = number(optarg, 1, 1000000000); break;
        case 'w': warmup = number(optarg, 0, 1000000000); break;
        case 't': completion = FI_TRANSMIT_COMPLETE; break;
        default: return usage();
        }
        if (size < 0 || iters < 0 || warmup < 0) {
            fprintf(stderr, "rma_pingpong: -%c %s is not a whole number in "
                            "range\n", opt, optarg);
            return usage();
        }
    }
    if (prov == NULL || optind != argc)
        return usage();
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds)) {
        perror("rma_pingpong: socketpair");
        return 1;
    }
    fflush(stdout);
    child = fork();
    if (child < 0) {
        perror("rma_pingpong: fork");
        return 1;
    }
    if (child == 0) {
        close(fds[0]);
        _exit(run_side(prov, (size_t)size, completion, (uint64_t)iters,
                       (uint64_t)warmup, fds[1], 0));
    }
    close(fds[1]);
    ret = run_side(prov, (size_t)size, completion, (uint64_t)iters,
                   (uint64_t)warmup, fds[0], 1);
    close(fds[0]); /* a child stuck on the swap sees the end */
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0)
        ret = 1;
    return ret;
}
