/*
 * footprint: the memory a process gains from one ferry context, against
 * one raw libfabric endpoint on the same provider.
 *
 *   footprint [--provider P] [--peers N] [--regions N]
 *
 * For each provider (tcp;ofi_rxm on lo, and shm; or the one given) and
 * each kind of endpoint:
 *   raw       fi_getinfo with ferry's hints, then fabric, domain, AV, CQ
 *             (the provider's default size), endpoint, bound and enabled;
 *   context   ferry_context_create with that provider (defaults: the
 *             registration cache on, no progress thread);
 *   +thread   the same with config.progress_thread = 1,
 * a fresh process (this program run again, with --measure) reads VmRSS,
 * VmHWM and Threads from /proc/self/status and Pss from
 * /proc/self/smaps_rollup before and after each step:
 *   open      opening it (peak: VmHWM, reset before the step, over the
 *             resident size before it);
 *   peers     adding the first peer's address, then N - 1 more
 *             (fi_av_insert, or ferry_peer_add), no traffic: the first
 *             alone, and the mean of the others;
 *   regions   registering N regions of 64 KiB for remote access
 *             (fi_mr_reg, or ferry_mem_register), their pages touched
 *             before the step, so that only the registrations count.
 * The peers are live: a helper process (this program, --serve) opens N
 * raw endpoints or contexts of the same provider and writes their
 * addresses into the measured process's standard input, then keeps them
 * open until that process is done (shm maps a live peer's region when its
 * address is inserted).  The helper shrinks ofi_rxm's pools through the
 * environment (its own only) so that 100 of them fit in memory.
 * Sizes are in MiB for the endpoint, KiB per peer and per region (the
 * mean over the step: a peer or a region smaller than a page shows only
 * there).
 */
#include <ferry.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include "benchutil.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define REGION_LEN (64u << 10)
#define ADDR_MAX 4096 /* bytes of one address, raw or a ferry blob */
#define MAX_COUNT 1000

enum kind { RAW, CONTEXT, CONTEXT_THREAD, NKINDS };
static const char *const kind_names[NKINDS] = {"raw", "context", "+thread"};
static const char *const kind_rows[NKINDS] = {
    "raw libfabric endpoint", "ferry context", "ferry context + thread"};

static const char *opt_provider; /* NULL: tcp;ofi_rxm, then shm */
static unsigned opt_peers = 100;
static unsigned opt_regions = 100;

/* ---- reading /proc/self ------------------------------------------------ */

struct usage {
    double rss, hwm, pss; /* KiB */
    int threads;
};

static double status_field(const char *path, const char *name)
{
    char line[256];
    size_t n = strlen(name);
    double v = -1;
    FILE *f = fopen(path, "r");

    if (f == NULL) {
        perror(path);
        exit(1);
    }
    while (fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, name, n) == 0 && line[n] == ':') {
            v = strtod(line + n + 1, NULL);
            break;
        }
    fclose(f);
    if (v < 0) {
        fprintf(stderr, "footprint: no %s in %s\n", name, path);
        exit(1);
    }
    return v;
}

static struct usage usage_now(void)
{
    struct usage u;

    u.rss = status_field("/proc/self/status", "VmRSS");
    u.hwm = status_field("/proc/self/status", "VmHWM");
    u.threads = (int)status_field("/proc/self/status", "Threads");
    u.pss = status_field("/proc/self/smaps_rollup", "Pss");
    return u;
}

/* VmHWM back to the present resident size (proc(5), clear_refs "5"). */
static void reset_peak(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");

    if (f == NULL || fputs("5", f) == EOF || fclose(f) != 0) {
        perror("footprint: /proc/self/clear_refs");
        exit(1);
    }
}

/* ---- the two kinds of endpoint --------------------------------------------- */

struct raw {
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
};

static void fi_die(const char *what, int ret)
{
    fprintf(stderr, "footprint: %s: %s\n", what,
            fi_strerror(ret < 0 ? -ret : ret));
    exit(1);
}

static bool is_tcp(const char *provider)
{
    return strstr(provider, "tcp") != NULL;
}

/* The hints ferry gives fi_getinfo (lib/fabric/provider.c), less the
 * memory-registration modes no program here needs. */
static void raw_open(struct raw *r, const char *provider)
{
    struct fi_info *hints = fi_allocinfo();
    struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_DATA,
                                 .wait_obj = FI_WAIT_NONE};
    struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
    int ret;

    if (hints == NULL)
        fi_die("fi_allocinfo", -FI_ENOMEM);
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ |
                  FI_REMOTE_WRITE | FI_MSG;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR |
                                  FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    hints->domain_attr->resource_mgmt = FI_RM_ENABLED;
    hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
    hints->fabric_attr->prov_name = strdup(provider);
    if (is_tcp(provider))
        hints->domain_attr->name = strdup("lo");
    ret = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &r->info);
    fi_freeinfo(hints);
    if (ret) {
        fprintf(stderr, "footprint: fi_getinfo found no RMA endpoint of "
                "provider %s: %s\n", provider, fi_strerror(-ret));
        exit(1);
    }
    if ((ret = fi_fabric(r->info->fabric_attr, &r->fabric, NULL)))
        fi_die("fi_fabric", ret);
    if ((ret = fi_domain(r->fabric, r->info, &r->domain, NULL)))
        fi_die("fi_domain", ret);
    if ((ret = fi_av_open(r->domain, &av_attr, &r->av, NULL)))
        fi_die("fi_av_open", ret);
    if ((ret = fi_cq_open(r->domain, &cq_attr, &r->cq, NULL)))
        fi_die("fi_cq_open", ret);
    if ((ret = fi_endpoint(r->domain, r->info, &r->ep, NULL)))
        fi_die("fi_endpoint", ret);
    if ((ret = fi_ep_bind(r->ep, &r->av->fid, 0)) ||
        (ret = fi_ep_bind(r->ep, &r->cq->fid, FI_TRANSMIT | FI_RECV)))
        fi_die("fi_ep_bind", ret);
    if ((ret = fi_enable(r->ep)))
        fi_die("fi_enable", ret);
}

static void raw_close(struct raw *r)
{
    fi_close(&r->ep->fid);
    fi_close(&r->cq->fid);
    fi_close(&r->av->fid);
    fi_close(&r->domain->fid);
    fi_close(&r->fabric->fid);
    fi_freeinfo(r->info);
}

/* A helper's peer has no cache: a process has at most 64 caches. */
static ferry_context_t *context_open(const char *provider, bool thread,
                                     bool cache)
{
    struct ferry_config cfg;
    ferry_context_t *ctx;
    int ret;

    ferry_config_init(&cfg);
    cfg.provider = provider;
    cfg.domain = is_tcp(provider) ? "lo" : NULL;
    cfg.local_only = 1;
    cfg.progress_thread = thread;
    cfg.registration_cache = cache;
    if ((ret = ferry_context_create(&cfg, &ctx)))
        die("ferry_context_create", ret);
    return ctx;
}

/* ---- the helper: live peers ---------------------------------------------- */

static void write_all(const void *p, size_t len)
{
    if (fwrite(p, 1, len, stdout) != len) {
        perror("footprint: writing an address");
        exit(1);
    }
}

/*
 * Opens opt_peers endpoints of the kind, writes each address (a 32-bit
 * length, then the bytes) to stdout, and keeps them open until stdin
 * closes.
 */
static int serve(enum kind kind, const char *provider)
{
    struct raw *raws = calloc(opt_peers, sizeof(*raws));
    ferry_context_t **ctxs = calloc(opt_peers, sizeof(*ctxs));
    uint8_t addr[ADDR_MAX];
    char c;

    if (raws == NULL || ctxs == NULL)
        die("calloc", FERRY_ENOMEM);
    /* ofi_rxm's 2048 bounce buffers of 16 KiB each way are most of a tcp
     * endpoint (see the measured rows); the peers need none of them. */
    setenv("FI_OFI_RXM_BUFFER_SIZE", "1024", 1);
    setenv("FI_OFI_RXM_TX_SIZE", "64", 1);
    setenv("FI_OFI_RXM_RX_SIZE", "64", 1);
    for (unsigned i = 0; i < opt_peers; i++) {
        size_t len = sizeof(addr);
        uint32_t len32;
        int ret;

        if (kind == RAW) {
            raw_open(&raws[i], provider);
            if ((ret = fi_getname(&raws[i].ep->fid, addr, &len)))
                fi_die("fi_getname", ret);
        } else {
            ctxs[i] = context_open(provider, false, false);
            if ((ret = ferry_context_address(ctxs[i], addr, &len)))
                die("ferry_context_address", ret);
        }
        len32 = (uint32_t)len;
        write_all(&len32, sizeof(len32));
        write_all(addr, len);
    }
    if (fflush(stdout) != 0) {
        perror("footprint: writing the addresses");
        return 1;
    }
    while (read(STDIN_FILENO, &c, 1) > 0)
        ;
    for (unsigned i = 0; i < opt_peers; i++) {
        if (kind == RAW)
            raw_close(&raws[i]);
        else
            ferry_context_close(ctxs[i]);
    }
    free(raws);
    free(ctxs);
    return 0;
}

/* ---- the measured process -------------------------------------------------- */

struct addrs {
    uint8_t *bytes; /* opt_peers slots of ADDR_MAX */
    size_t len[MAX_COUNT];
};

static void read_addresses(struct addrs *a)
{
    a->bytes = malloc((size_t)opt_peers * ADDR_MAX);
    if (a->bytes == NULL)
        die("malloc", FERRY_ENOMEM);
    for (unsigned i = 0; i < opt_peers; i++) {
        uint32_t len;

        if (fread(&len, sizeof(len), 1, stdin) != 1 || len == 0 ||
            len > ADDR_MAX ||
            fread(a->bytes + (size_t)i * ADDR_MAX, 1, len, stdin) != len) {
            fprintf(stderr, "footprint: the helper gave %u of %u peer "
                    "addresses\n", i, opt_peers);
            exit(1);
        }
        a->len[i] = len;
    }
}

static void add_peer(enum kind kind, struct raw *r, ferry_context_t *ctx,
                     const struct addrs *a, unsigned i)
{
    const void *addr = a->bytes + (size_t)i * ADDR_MAX;
    int ret;

    if (kind == RAW) {
        fi_addr_t fa;

        ret = fi_av_insert(r->av, addr, 1, &fa, 0, NULL);
        if (ret != 1)
            fi_die("fi_av_insert", ret < 0 ? ret : -FI_EINVAL);
    } else {
        ferry_peer_t *peer;

        if ((ret = ferry_peer_add(ctx, addr, a->len[i], &peer)))
            die("ferry_peer_add", ret);
    }
}

static void add_region(enum kind kind, struct raw *r, ferry_context_t *ctx,
                       uint8_t *buf, unsigned i, struct fid_mr **mrs)
{
    int ret;

    if (kind == RAW) {
        ret = fi_mr_reg(r->domain, buf, REGION_LEN,
                        FI_READ | FI_WRITE | FI_REMOTE_READ |
                            FI_REMOTE_WRITE,
                        0, i, 0, &mrs[i], NULL);
        if (ret)
            fi_die("fi_mr_reg", ret);
    } else {
        ferry_mem_t *mem;

        ret = ferry_mem_register(ctx, buf, REGION_LEN, FERRY_MEM_HOST, 0,
                                 FERRY_ACCESS_REMOTE_READ |
                                     FERRY_ACCESS_REMOTE_WRITE,
                                 &mem);
        if (ret)
            die("ferry_mem_register", ret);
    }
}

static double mib(double kib)
{
    return kib / 1024;
}

/* Opens one endpoint of the kind, steps as in the header; prints a row. */
static int measure(enum kind kind, const char *provider)
{
    struct addrs addrs = {0};
    struct usage before, opened, peer1, peers, regions;
    struct fid_mr **mrs = calloc(opt_regions + 1, sizeof(*mrs));
    uint8_t *bufs = NULL;
    struct raw r;
    ferry_context_t *ctx = NULL;
    char peer_first[32] = "-", peer_next[32] = "-", region_avg[32] = "-";

    if (mrs == NULL)
        die("calloc", FERRY_ENOMEM);
    if (opt_peers > 0)
        read_addresses(&addrs);
    if (opt_regions > 0) {
        bufs = mmap(NULL, (size_t)opt_regions * REGION_LEN,
                    PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                    0);
        if (bufs == MAP_FAILED)
            die("mmap", FERRY_ENOMEM);
        memset(bufs, 0x5a, (size_t)opt_regions * REGION_LEN);
    }

    before = usage_now();
    reset_peak();
    if (kind == RAW)
        raw_open(&r, provider);
    else
        ctx = context_open(provider, kind == CONTEXT_THREAD, true);
    opened = usage_now();
    peer1 = peers = opened;
    for (unsigned i = 0; i < opt_peers; i++) {
        add_peer(kind, &r, ctx, &addrs, i);
        if (i == 0)
            peer1 = usage_now();
    }
    peers = usage_now();
    for (unsigned i = 0; i < opt_regions; i++)
        add_region(kind, &r, ctx, bufs + (size_t)i * REGION_LEN, i, mrs);
    regions = usage_now();

    if (opt_peers > 0)
        snprintf(peer_first, sizeof(peer_first), "%.1f",
                 peer1.rss - opened.rss);
    if (opt_peers > 1)
        snprintf(peer_next, sizeof(peer_next), "%.2f",
                 (peers.rss - peer1.rss) / (opt_peers - 1));
    if (opt_regions > 0)
        snprintf(region_avg, sizeof(region_avg), "%.2f",
                 (regions.rss - peers.rss) / opt_regions);
    printf("  %-12s %-23s %8.1f %8.1f %8.1f %7d %8s %9s %10s\n", provider,
           kind_rows[kind], mib(opened.rss - before.rss),
           mib(opened.hwm - before.rss), mib(opened.pss - before.pss),
           opened.threads - before.threads, peer_first, peer_next,
           region_avg);
    fflush(stdout);

    if (kind == RAW) {
        for (unsigned i = 0; i < opt_regions; i++)
            fi_close(&mrs[i]->fid);
        raw_close(&r);
    } else {
        ferry_context_close(ctx); /* its peers and regions with it */
    }
    if (opt_peers > 0)
        free(addrs.bytes);
    if (bufs != NULL)
        munmap(bufs, (size_t)opt_regions * REGION_LEN);
    free(mrs);
    return 0;
}

/* ---- the driver -------------------------------------------------------------- */

/* Runs this program with args, stdin and stdout redirected (-1: kept). */
static pid_t spawn(char *const args[], int in, int out, int close_fd)
{
    pid_t pid = fork();

    if (pid < 0) {
        perror("footprint: fork");
        exit(1);
    }
    if (pid == 0) {
        if ((in >= 0 && dup2(in, STDIN_FILENO) < 0) ||
            (out >= 0 && dup2(out, STDOUT_FILENO) < 0))
            _exit(127);
        if (close_fd >= 0)
            close(close_fd);
        execv("/proc/self/exe", args);
        perror("footprint: exec /proc/self/exe");
        _exit(127);
    }
    return pid;
}

static bool exited_ok(pid_t pid)
{
    int status;

    return waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
           WEXITSTATUS(status) == 0;
}

/* One row: the helper (if there are peers) piped into a fresh measured
 * process. */
static bool run_case(enum kind kind, const char *provider)
{
    char peers[16], regions[16];
    char *measure_args[] = {"footprint", "--measure",
                            (char *)kind_names[kind], "--provider",
                            (char *)provider, "--peers", peers,
                            "--regions", regions, NULL};
    char *serve_args[] = {"footprint", "--serve", (char *)kind_names[kind],
                          "--provider", (char *)provider, "--peers", peers,
                          NULL};
    int addr_pipe[2], hold_pipe[2];
    pid_t helper = -1, measured;
    bool ok;

    snprintf(peers, sizeof(peers), "%u", opt_peers);
    snprintf(regions, sizeof(regions), "%u", opt_regions);
    if (opt_peers == 0) {
        measured = spawn(measure_args, -1, -1, -1);
        return exited_ok(measured);
    }
    if (pipe(addr_pipe) != 0 || pipe(hold_pipe) != 0) {
        perror("footprint: pipe");
        exit(1);
    }
    /* The helper holds its peers open until hold_pipe's write end
     * closes, after the measured process is done. */
    helper = spawn(serve_args, hold_pipe[0], addr_pipe[1], hold_pipe[1]);
    close(hold_pipe[0]);
    close(addr_pipe[1]);
    measured = spawn(measure_args, addr_pipe[0], -1, hold_pipe[1]);
    close(addr_pipe[0]);
    ok = exited_ok(measured);
    close(hold_pipe[1]);
    return exited_ok(helper) && ok;
}

static unsigned parse_count(const char *flag, const char *s, unsigned min)
{
    char *end;
    unsigned long v = strtoul(s, &end, 10);

    if (end == s || *end != '\0' || s[0] == '-' || v < min ||
        v > MAX_COUNT) {
        fprintf(stderr, "footprint: %s %s: give a number from %u to %d\n",
                flag, s, min, MAX_COUNT);
        exit(2);
    }
    return (unsigned)v;
}

static enum kind parse_kind(const char *s)
{
    for (int k = 0; k < NKINDS; k++)
        if (strcmp(s, kind_names[k]) == 0)
            return (enum kind)k;
    fprintf(stderr, "footprint: unknown kind '%s' (raw, context, +thread)\n",
            s);
    exit(2);
}

static void usage(void)
{
    fprintf(stderr,
            "usage: footprint [--provider P] [--peers N] [--regions N]\n"
            "  --provider P  tcp;ofi_rxm (on lo) or shm; default both\n"
            "  --peers N     live peers added, 0 to %d (default 100)\n"
            "  --regions N   64 KiB regions registered, 0 to %d "
            "(default 100)\n",
            MAX_COUNT, MAX_COUNT);
    exit(2);
}

int main(int argc, char **argv)
{
    static const char *const providers[] = {"tcp;ofi_rxm", "shm"};
    const char *measure_kind = NULL, *serve_kind = NULL;
    bool ok = true;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--provider") == 0 && i + 1 < argc)
            opt_provider = argv[++i];
        else if (strcmp(argv[i], "--peers") == 0 && i + 1 < argc)
            opt_peers = parse_count(argv[i], argv[i + 1], 0), i++;
        else if (strcmp(argv[i], "--regions") == 0 && i + 1 < argc)
            opt_regions = parse_count(argv[i], argv[i + 1], 0), i++;
        /* The driver's own calls of this program (run_case). */
        else if (strcmp(argv[i], "--measure") == 0 && i + 1 < argc)
            measure_kind = argv[++i];
        else if (strcmp(argv[i], "--serve") == 0 && i + 1 < argc)
            serve_kind = argv[++i];
        else
            usage();
    }
    if ((measure_kind != NULL || serve_kind != NULL) && opt_provider == NULL)
        usage();
    if (measure_kind != NULL)
        return measure(parse_kind(measure_kind), opt_provider);
    if (serve_kind != NULL)
        return serve(parse_kind(serve_kind), opt_provider);

    printf("footprint: memory one endpoint adds to a fresh process (VmRSS, "
           "VmHWM, Pss from /proc/self); endpoint in MiB, peers and regions "
           "in KiB; %u live peers, %u regions of 64 KiB; %s\n",
           opt_peers, opt_regions, ferry_version_string());
    printf("  %-12s %-23s %8s %8s %8s %7s %8s %9s %10s\n", "provider",
           "endpoint", "RSS MiB", "peak MiB", "Pss MiB", "threads",
           "1st peer", "next peer", "per region");
    fflush(stdout);
    for (unsigned p = 0; p < 2; p++) {
        const char *prov = opt_provider != NULL ? opt_provider : providers[p];

        for (int k = 0; k < NKINDS; k++)
            if (!run_case((enum kind)k, prov)) {
                fprintf(stderr, "footprint: the %s case on %s failed\n",
                        kind_names[k], prov);
                ok = false;
            }
        if (opt_provider != NULL)
            break;
    }
    return ok ? 0 : 1;
}
