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
 *   kv_transfer prefill HOST:PORT [--mode M]  the owner
 *   kv_transfer decode HOST:PORT [--mode M]   the consumer
 *
 * The two meet through ferry's metadata calls (ferry.h "Metadata"), each
 * waiting for what it needs of the other by name: prefill joins as NAME
 * ("prefill" unless --name), decode as NAME-decode.  HOST:PORT is the
 * embedded bootstrap there, bootstrap://HOST:PORT: whichever side comes
 * first listens there, the other connects (beyond loopback, set the same
 * FERRY_OOB_TOKEN on both sides).  Through a metadata service such as
 * etcd instead (FERRY_METADATA in the environment works the same):
 *
 *   kv_transfer prefill --metadata URL --name NAME [--mode M]
 *   kv_transfer decode NAME --metadata URL [--mode M]
 */
#include "example.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Where the two meet: --metadata URL, else FERRY_METADATA, else the
 * bootstrap at the HOST:PORT given. */
static const char *opt_url;
static char boot_url[300];
static const char *opt_name = "prefill"; /* prefill's name there */
static char decode_name[160];            /* decode's: NAME-decode */

/* A context for meeting the other side at opt_url (see ex_config). */
static int open_context(bool target, ferry_context_t **ctx)
{
    struct ferry_config cfg;

    ex_config(&cfg, target, opt_url);
    return ferry_context_create(&cfg, ctx);
}

/* Joins opt_url as name. */
static int join(const char *who, ferry_context_t *ctx, const char *name,
                ferry_meta_t **meta)
{
    int ret;

    if ((ret = ferry_meta_open(ctx, opt_url, name, meta)))
        return ex_fail(who, "ferry_meta_open", ret);
    printf("%s: joined %s as \"%s\"\n", who, ferry_meta_url(*meta), name);
    fflush(stdout);
    return 0;
}

/* Makes both caches findable by the other side. */
static int publish(const char *who, ferry_meta_t *meta)
{
    int ret = 0;

    for (unsigned c = 0; c < 2 && ret == 0; c++)
        ret = ferry_meta_publish(meta, caches[c].name, caches[c].mem);
    return ret != 0 ? ex_fail(who, "publishing the caches", ret) : 0;
}

/* The other side (other) and its two caches, waiting for it to publish
 * them. */
static int lookup(const char *who, ferry_meta_t *meta, const char *other,
                  ferry_peer_t **peer, ferry_rmem_t **rmem)
{
    int ret;

    for (unsigned c = 0; c < 2; c++)
        if ((ret = ferry_meta_lookup(meta, other, caches[c].name, TIMEOUT_MS,
                                     &rmem[c])))
            return ex_fail(who, "looking up the other side's caches", ret);
    /* There already: the lookups waited for its address. */
    if ((ret = ferry_meta_peer(meta, other, 0, peer)))
        return ex_fail(who, "ferry_meta_peer", ret);
    return 0;
}

static int run_prefill(void)
{
    ferry_context_t *ctx;
    ferry_meta_t *meta;
    ferry_peer_t *decode;
    ferry_rmem_t *rmem[2];
    int ret;

    if ((ret = open_context(!push_mode, &ctx)))
        return ex_fail("prefill", "ferry_context_create", ret);
    if (alloc_caches("prefill", ctx, true) ||
        join("prefill", ctx, opt_name, &meta) || publish("prefill", meta))
        return 1;
    if (push_mode) {
        if (lookup("prefill", meta, decode_name, &decode, rmem) ||
            transfer("prefill", ctx, decode, rmem, FERRY_OP_WRITE))
            return 1;
        printf("prefill: pushed %u sequences x %u blocks of both caches\n",
               SEQUENCES, BLOCKS_PER_SEQ);
    }
    /* In pull mode decode reads on its own; stay (and stay findable) until
     * it says bye. */
    if ((ret = ferry_counter_wait(ctx, 1000, 1, TIMEOUT_MS)))
        return ex_fail("prefill", "waiting for decode's goodbye", ret);
    /* Closing the context closes the metadata handle, the caches' regions
     * and what the lookups handed out. */
    ferry_context_close(ctx);
    return 0;
}

/*
 * Decode.  demo: this process opened the bootstrap on a free port (or
 * joined the metadata service) and now starts prefill there, as
 * `kv_transfer prefill --metadata URL`; *demo is its pid.
 */
static int run_decode(pid_t *demo)
{
    ferry_context_t *ctx;
    ferry_meta_t *meta;
    ferry_peer_t *prefill;
    ferry_rmem_t *rmem[2];
    ferry_req_t *req = NULL;
    int ret, err;

    if ((ret = open_context(push_mode, &ctx)))
        return ex_fail("decode", "ferry_context_create", ret);
    if (alloc_caches("decode", ctx, false) ||
        join("decode", ctx, decode_name, &meta))
        return 1;
    if (demo != NULL) {
        char *args[] = {"kv_transfer", "prefill", "--metadata",
                        (char *)ferry_meta_url(meta), "--name",
                        (char *)opt_name, "--mode",
                        push_mode ? "push" : "pull", NULL};

        if ((*demo = ex_spawn(args)) < 0)
            return 1;
    }
    if (push_mode) {
        if (publish("decode", meta))
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
        /* Prefill, for the goodbye: it joined before it pushed. */
        if ((ret = ferry_meta_peer(meta, opt_name, 0, &prefill)))
            return ex_fail("decode", "ferry_meta_peer", ret);
    } else {
        if (lookup("decode", meta, opt_name, &prefill, rmem) ||
            transfer("decode", ctx, prefill, rmem, FERRY_OP_READ))
            return 1;
        printf("decode: pulled %u sequences x %u blocks of both caches\n",
               SEQUENCES, BLOCKS_PER_SEQ);
    }
    ret = verify();
    /* Goodbye: prefill may stop now. */
    if ((err = ferry_notify_send(prefill, 1000, 1, NULL, &req)) ||
        (err = ferry_req_wait(req, TIMEOUT_MS)))
        ret = ex_fail("decode", "saying goodbye", err);
    ferry_req_close(req);
    /* Closing the context closes the metadata handle, the caches' regions
     * and what the lookups handed out. */
    ferry_context_close(ctx);
    return ret;
}

static int usage(void)
{
    fprintf(stderr, "usage: kv_transfer demo|prefill [HOST:PORT]|decode "
            "HOST:PORT [--mode pull|push]\n"
            "       kv_transfer prefill --metadata URL --name NAME "
            "[--mode M]\n"
            "       kv_transfer decode NAME --metadata URL [--mode M]\n"
            "HOST:PORT is the bootstrap there (bootstrap://HOST:PORT);\n"
            "beyond loopback, set the same FERRY_OOB_TOKEN on both sides\n");
    return 2;
}

int main(int argc, char **argv)
{
    const char *role = argc > 1 ? argv[1] : "demo";
    const char *where = NULL;
    pid_t prefill = -1;
    int ret;

    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--mode") == 0 && i + 1 < argc) {
            const char *m = argv[++i];
            if (strcmp(m, "push") != 0 && strcmp(m, "pull") != 0) {
                fprintf(stderr, "--mode %s: use pull or push\n", m);
                return 2;
            }
            push_mode = strcmp(m, "push") == 0;
        } else if (strcmp(argv[i], "--metadata") == 0 && i + 1 < argc) {
            opt_url = argv[++i];
        } else if (strcmp(argv[i], "--name") == 0 && i + 1 < argc) {
            opt_name = argv[++i];
        } else if (where == NULL && argv[i][0] != '-') {
            where = argv[i];
        } else {
            return usage();
        }
    }
    if (opt_url == NULL)
        opt_url = getenv("FERRY_METADATA");
    if (strcmp(role, "demo") == 0 && where == NULL) {
        if (opt_url == NULL)
            opt_url = "bootstrap://127.0.0.1:0"; /* a free port */
    } else if (opt_url == NULL) {
        /* No metadata service: both sides name the bootstrap's place. */
        if (where == NULL && strcmp(role, "prefill") == 0)
            where = "127.0.0.1:18516";
        if (where == NULL)
            return usage();
        opt_url = ex_url(where, boot_url, sizeof(boot_url));
    } else if (strcmp(role, "decode") == 0 && where != NULL) {
        opt_name = where; /* prefill's name in the service */
    } else if (where != NULL || strcmp(role, "decode") == 0) {
        return usage();
    }
    snprintf(decode_name, sizeof(decode_name), "%s-decode", opt_name);
    if (strcmp(role, "prefill") == 0)
        return run_prefill();
    if (strcmp(role, "decode") == 0)
        return run_decode(NULL);
    if (strcmp(role, "demo") != 0)
        return usage();
    ret = run_decode(&prefill);
    ret = !ex_reap(prefill, ret != 0) || ret != 0;
    printf("kv_transfer (%s): %s\n", push_mode ? "push" : "pull",
           ret == 0 ? "OK" : "FAILED");
    return ret;
}
