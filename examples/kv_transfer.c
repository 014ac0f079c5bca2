/*
 * kv_transfer: disaggregated serving in miniature.
 *
 * A "prefill" process owns a paged KV cache (LAYERS layers of BLOCKS
 * blocks) and a second, smaller cache beside it.  A "decode" process needs
 * the blocks of a few sequences.  Each cache is described once as a
 * prepared descriptor list (one paged segment per layer); blocks then move
 * by index, the two caches' transfers interleaved.
 *
 *   --mode pull  decode reads the chosen blocks from prefill
 *   --mode push  prefill writes them into decode, each request carrying a
 *                notification {sequence, blocks}; decode waits on the
 *                sequence's counter, then verifies
 *
 *   kv_transfer demo [--mode pull|push]       both processes on this host
 *   kv_transfer prefill HOST:PORT [--mode M]  the owner (listens)
 *   kv_transfer decode HOST:PORT [--mode M]   the consumer (connects)
 *
 * Through a metadata service (ferry.h "Metadata"; FERRY_METADATA in the
 * environment works the same), prefill joins as NAME and decode as
 * NAME-decode:
 *
 *   kv_transfer prefill --metadata URL --name NAME [--mode M]
 *   kv_transfer decode NAME --metadata URL [--mode M]
 */
#include "example.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define LAYERS 4
#define BLOCKS 512
#define SEQUENCES 4
#define BLOCKS_PER_SEQ 48
#define TIMEOUT_MS 30000

struct cache {
    const char *name;
    unsigned layers;
    size_t block;
    uint8_t *buf;
    size_t len;
    ferry_mem_t *mem;
};

static struct cache caches[2] = {
    {.name = "kv", .layers = LAYERS, .block = 16 << 10},
    {.name = "kv-indexer", .layers = 2, .block = 2 << 10},
};

static bool push_mode;

/* Content of byte i of (cache c, layer l, block b): both sides know it. */
static uint8_t pattern(unsigned c, unsigned l, unsigned b, size_t i)
{
    uint64_t x = ((uint64_t)c << 48 | (uint64_t)l << 32 | b) ^
                 ((uint64_t)i * 0x9e3779b97f4a7c15ull);
    return (uint8_t)(x ^ (x >> 29) ^ (x >> 47));
}

/* The BLOCKS_PER_SEQ blocks of sequence s: distinct, scattered. */
static unsigned seq_block(unsigned s, unsigned k)
{
    return (s * 131u + k * 37u) % BLOCKS;
}

static uint8_t *block_at(struct cache *c, unsigned l, unsigned b)
{
    return c->buf + ((size_t)l * BLOCKS + b) * c->block;
}

static int alloc_caches(const char *who, ferry_context_t *ctx, bool fill)
{
    for (unsigned c = 0; c < 2; c++) {
        struct cache *k = &caches[c];
        int ret;

        k->len = (size_t)k->layers * BLOCKS * k->block;
        k->buf = calloc(1, k->len);
        if (k->buf == NULL)
            return ex_fail(who, "calloc", FERRY_ENOMEM);
        for (unsigned l = 0; fill && l < k->layers; l++)
            for (unsigned b = 0; b < BLOCKS; b++)
                for (size_t i = 0; i < k->block; i++)
                    block_at(k, l, b)[i] = pattern(c, l, b, i);
        ret = ferry_mem_register(ctx, k->buf, k->len, FERRY_MEM_HOST, 0,
                                 FERRY_ACCESS_REMOTE_READ |
                                     FERRY_ACCESS_REMOTE_WRITE,
                                 &k->mem);
        if (ret)
            return ex_fail(who, "ferry_mem_register", ret);
    }
    return 0;
}

/* A list with one paged segment per layer: index = layer * BLOCKS + block. */
static int make_list(ferry_context_t *ctx, struct cache *k, ferry_rmem_t *rmem,
                     ferry_dlist_t **out)
{
    char name[64];
    int ret;

    snprintf(name, sizeof(name), "%s %s", rmem ? "remote" : "local", k->name);
    if ((ret = ferry_dlist_create(ctx, rmem ? FERRY_DLIST_REMOTE
                                            : FERRY_DLIST_LOCAL,
                                  name, out)))
        return ret;
    for (unsigned l = 0; l < k->layers; l++) {
        struct ferry_dlist_segment seg = {
            .mem = rmem ? NULL : k->mem,
            .rmem = rmem,
            .offset = (uint64_t)l * BLOCKS * k->block,
            .block_size = k->block,
            .count = BLOCKS,
            .stride = k->block,
        };
        if ((ret = ferry_dlist_add(*out, &seg, NULL)))
            return ret;
    }
    return 0;
}

/*
 * Moves every sequence's blocks of both caches, one request per
 * (sequence, cache), the two caches' requests interleaved.
 */
static int move_blocks(const char *who, ferry_prep_t **prep)
{
    static uint32_t idx[2][LAYERS * BLOCKS_PER_SEQ];
    ferry_req_t *reqs[SEQUENCES * 2];
    size_t nreq = 0;
    int ret;

    for (unsigned s = 0; s < SEQUENCES; s++) {
        for (unsigned c = 0; c < 2; c++) {
            struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
            size_t n = 0;

            for (unsigned l = 0; l < caches[c].layers; l++)
                for (unsigned k = 0; k < BLOCKS_PER_SEQ; k++)
                    idx[c][n++] = l * BLOCKS + seq_block(s, k);
            if (push_mode) {
                opts.flags = FERRY_XFER_NOTIFY;
                opts.notify_id = s;
                opts.notify_value = n;
            }
            /* Local and remote layouts are the same: one index array. */
            ret = ferry_xfer_post(prep[c], idx[c], idx[c], n, &opts,
                                  &reqs[nreq++]);
            if (ret)
                return ex_fail(who, "ferry_xfer_post", ret);
        }
    }
    for (size_t i = 0; i < nreq; i++) {
        if ((ret = ferry_req_wait(reqs[i], -1)))
            return ex_fail(who, "a block transfer", ret);
        ferry_req_close(reqs[i]);
    }
    return 0;
}

static int transfer(const char *who, ferry_context_t *ctx, ferry_peer_t *peer,
                    ferry_rmem_t **rmem, enum ferry_op op)
{
    ferry_dlist_t *local[2], *remote[2];
    ferry_prep_t *prep[2];
    int ret;

    for (unsigned c = 0; c < 2; c++) {
        if ((ret = make_list(ctx, &caches[c], NULL, &local[c])) ||
            (ret = make_list(ctx, &caches[c], rmem[c], &remote[c])) ||
            (ret = ferry_xfer_prepare(peer, op, local[c], remote[c],
                                      &prep[c])))
            return ex_fail(who, "preparing the lists", ret);
    }
    ret = move_blocks(who, prep);
    for (unsigned c = 0; c < 2; c++) {
        ferry_xfer_close(prep[c]);
        ferry_dlist_close(local[c]);
        ferry_dlist_close(remote[c]);
    }
    return ret;
}

/* Decode's check: chosen blocks hold prefill's bytes, the others zero. */
static int verify(void)
{
    size_t checked = 0, bad = 0;

    for (unsigned c = 0; c < 2; c++) {
        struct cache *k = &caches[c];
        for (unsigned l = 0; l < k->layers; l++) {
            for (unsigned b = 0; b < BLOCKS; b++) {
                bool chosen = false;
                for (unsigned s = 0; s < SEQUENCES && !chosen; s++)
                    for (unsigned j = 0; j < BLOCKS_PER_SEQ && !chosen; j++)
                        chosen = seq_block(s, j) == b;
                const uint8_t *p = block_at(k, l, b);
                for (size_t i = 0; i < k->block; i++)
                    bad += p[i] != (chosen ? pattern(c, l, b, i) : 0);
                checked += k->block;
            }
        }
    }
    printf("decode: verified %zu bytes of both caches: %s\n", checked,
           bad == 0 ? "OK" : "CORRUPT");
    return bad == 0 ? 0 : 1;
}

static const char *opt_metadata; /* --metadata, else FERRY_METADATA */

/* A context for meeting the other side at where (HOST:PORT), or through
 * the metadata service when one is given (see ex_config). */
static int open_context(bool target, const char *where, ferry_context_t **ctx)
{
    struct ferry_config cfg;

    ex_config(&cfg, target, opt_metadata != NULL ? opt_metadata : where);
    return ferry_context_create(&cfg, ctx);
}

/*
 * How the two sides meet: through a metadata service (meta) when one is
 * given, else the bootstrap (prefill listens: lis; decode connects and is
 * accepted: conn).  peer: the other side.
 */
struct meet {
    const char *who;
    ferry_meta_t *meta;
    char other[160];  /* the other side's name in the metadata service */
    ferry_oob_t *lis;
    ferry_oob_conn_t *conn;
    ferry_peer_t *peer;
};

static const char *opt_name = "prefill";

/* Joins the service as name, or (prefill) listens at where. */
static int meet_open(struct meet *m, ferry_context_t *ctx, const char *name,
                     const char *where, int report_fd)
{
    int ret;

    if (opt_metadata != NULL) {
        if ((ret = ferry_meta_open(ctx, opt_metadata, name, &m->meta)))
            return ex_fail(m->who, "ferry_meta_open", ret);
        printf("%s: joined %s as \"%s\"\n", m->who, opt_metadata, name);
        return 0;
    }
    if (report_fd == -2) /* decode */
        return (ret = ferry_oob_connect(ctx, where, TIMEOUT_MS, &m->conn))
                   ? ex_fail(m->who, "ferry_oob_connect", ret)
                   : 0;
    if ((ret = ferry_oob_listen(ctx, where, &m->lis)))
        return ex_fail(m->who, "ferry_oob_listen", ret);
    if (report_fd >= 0) {
        int port = ferry_oob_port(m->lis);
        if (write(report_fd, &port, sizeof(port)) != sizeof(port))
            return 1;
    }
    return 0;
}

/* Makes both caches findable by the other side. */
static int meet_publish(struct meet *m)
{
    int ret = 0;

    for (unsigned c = 0; c < 2 && ret == 0; c++)
        ret = m->meta != NULL
                  ? ferry_meta_publish(m->meta, caches[c].name, caches[c].mem)
              : m->lis != NULL
                  ? ferry_oob_publish(m->lis, caches[c].name, caches[c].mem)
                  : ferry_oob_offer(m->conn, caches[c].name, caches[c].mem,
                                    TIMEOUT_MS);
    return ret != 0 ? ex_fail(m->who, "publishing the caches", ret) : 0;
}

/* The other side as a peer (prefill on the bootstrap: once it connected). */
static int meet_peer(struct meet *m)
{
    int ret = 0;

    if (m->peer != NULL)
        return 0;
    if (m->meta != NULL) {
        ret = ferry_meta_peer(m->meta, m->other, TIMEOUT_MS, &m->peer);
    } else {
        if (m->conn == NULL)
            ret = ferry_oob_accept(m->lis, TIMEOUT_MS, &m->conn);
        if (ret == 0)
            m->peer = ferry_oob_conn_peer(m->conn);
    }
    return ret != 0 ? ex_fail(m->who, "finding the other side", ret) : 0;
}

/* The other side's two caches. */
static int meet_lookup(struct meet *m, ferry_rmem_t **rmem)
{
    int ret = meet_peer(m);

    for (unsigned c = 0; c < 2 && ret == 0; c++)
        if ((ret = m->meta != NULL
                       ? ferry_meta_lookup(m->meta, m->other, caches[c].name,
                                           TIMEOUT_MS, &rmem[c])
                       : ferry_oob_lookup(m->conn, caches[c].name, TIMEOUT_MS,
                                          &rmem[c])))
            return ex_fail(m->who, "looking up the other side's caches", ret);
    return ret != 0;
}

static void meet_close(struct meet *m)
{
    ferry_meta_close(m->meta);
    ferry_oob_disconnect(m->conn);
    ferry_oob_close(m->lis);
}

static int run_prefill(const char *where, int report_fd)
{
    struct meet m = {.who = "prefill"};
    ferry_context_t *ctx;
    ferry_rmem_t *rmem[2];
    int ret;

    snprintf(m.other, sizeof(m.other), "%s-decode", opt_name);
    if ((ret = open_context(!push_mode, where, &ctx)))
        return ex_fail("prefill", "ferry_context_create", ret);
    if (alloc_caches("prefill", ctx, true) ||
        meet_open(&m, ctx, opt_name, where, report_fd) || meet_publish(&m))
        return 1;
    if (push_mode) {
        if (meet_lookup(&m, rmem) ||
            transfer("prefill", ctx, m.peer, rmem, FERRY_OP_WRITE))
            return 1;
        printf("prefill: pushed %u sequences x %u blocks of both caches\n",
               SEQUENCES, BLOCKS_PER_SEQ);
    } else if (m.meta == NULL && meet_peer(&m)) {
        return 1;
    }
    /* In pull mode decode reads on its own; stay until it says bye. */
    ret = ferry_counter_wait(ctx, 1000, 1, TIMEOUT_MS);
    meet_close(&m);
    ferry_context_close(ctx);
    return ret == 0 ? 0 : ex_fail("prefill", "waiting for decode's goodbye", ret);
}

/* where: prefill's HOST:PORT, or its name in the metadata service. */
static int run_decode(const char *where)
{
    struct meet m = {.who = "decode"};
    char name[170];
    ferry_context_t *ctx;
    ferry_rmem_t *rmem[2];
    ferry_req_t *req;
    int ret;

    snprintf(m.other, sizeof(m.other), "%s", where);
    snprintf(name, sizeof(name), "%s-decode", where);
    if ((ret = open_context(push_mode, where, &ctx)))
        return ex_fail("decode", "ferry_context_create", ret);
    if (alloc_caches("decode", ctx, false) ||
        meet_open(&m, ctx, name, where, -2))
        return 1;
    if (push_mode) {
        if (meet_publish(&m))
            return 1;
        /* Each sequence is complete when its counter reaches its blocks. */
        for (unsigned s = 0; s < SEQUENCES; s++) {
            uint64_t blocks = (uint64_t)(caches[0].layers + caches[1].layers) *
                              BLOCKS_PER_SEQ;
            if ((ret = ferry_counter_wait(ctx, s, blocks, TIMEOUT_MS)))
                return ex_fail("decode", "waiting for a sequence", ret);
            printf("decode: sequence %u complete (%llu blocks)\n", s,
                   (unsigned long long)blocks);
        }
    } else {
        if (meet_lookup(&m, rmem) ||
            transfer("decode", ctx, m.peer, rmem, FERRY_OP_READ))
            return 1;
        printf("decode: pulled %u sequences x %u blocks of both caches\n",
               SEQUENCES, BLOCKS_PER_SEQ);
    }
    ret = verify();
    /* Goodbye: prefill may stop now. */
    if (meet_peer(&m) || ferry_notify_send(m.peer, 1000, 1, NULL, &req) ||
        ferry_req_wait(req, -1))
        ret = ex_fail("decode", "saying goodbye", FERRY_EIO);
    ferry_req_close(req);
    meet_close(&m);
    ferry_context_close(ctx);
    return ret;
}

int main(int argc, char **argv)
{
    const char *role = argc > 1 ? argv[1] : "demo";
    const char *where = NULL;
    int fds[2], status = 0, port = 0, ret;
    char addr[64];
    pid_t pid;

    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--mode") == 0 && i + 1 < argc) {
            const char *m = argv[++i];
            if (strcmp(m, "push") != 0 && strcmp(m, "pull") != 0) {
                fprintf(stderr, "--mode %s: use pull or push\n", m);
                return 2;
            }
            push_mode = strcmp(m, "push") == 0;
        } else if (strcmp(argv[i], "--metadata") == 0 && i + 1 < argc) {
            opt_metadata = argv[++i];
        } else if (strcmp(argv[i], "--name") == 0 && i + 1 < argc) {
            opt_name = argv[++i];
        } else {
            where = argv[i];
        }
    }
    if (opt_metadata == NULL)
        opt_metadata = getenv("FERRY_METADATA");
    if (strcmp(role, "prefill") == 0)
        return run_prefill(where ? where : "127.0.0.1:18516", -1);
    if (strcmp(role, "decode") == 0 && where != NULL)
        return run_decode(where);
    if (strcmp(role, "demo") != 0) {
        fprintf(stderr, "usage: kv_transfer demo|prefill [HOST:PORT]|decode "
                "HOST:PORT [--mode pull|push]\n"
                "       kv_transfer prefill --metadata URL --name NAME "
                "[--mode M]\n"
                "       kv_transfer decode NAME --metadata URL [--mode M]\n");
        return 2;
    }
    if (pipe(fds) != 0)
        return 1;
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        int code = run_prefill("127.0.0.1:0",
                               opt_metadata != NULL ? -1 : fds[1]);
        fflush(stdout);
        _exit(code);
    }
    close(fds[1]);
    if (opt_metadata != NULL) {
        snprintf(addr, sizeof(addr), "%s", opt_name);
    } else if (read(fds[0], &port, sizeof(port)) != sizeof(port)) {
        waitpid(pid, &status, 0);
        fprintf(stderr, "demo: prefill did not start\n");
        return 1;
    } else {
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    }
    ret = run_decode(addr);
    waitpid(pid, &status, 0);
    ret |= !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    printf("kv_transfer (%s): %s\n", push_mode ? "push" : "pull",
           ret == 0 ? "OK" : "FAILED");
    return ret;
}
