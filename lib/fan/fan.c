/*
 * Fan-out: one region to the same-sized regions of n receivers.
 *
 * Nodes are numbered 0 (the source) to n; node i > 0 has the parent
 * parent[i] < i (a chain: i - 1; a tree of degree d: (i - 1) / d).  The
 * data goes in chunks; a node writes every chunk it holds to each of its
 * children, from its own copy, as soon as the chunk has landed there:
 * its CHUNK notification arrives after its bytes (FI_DELIVERY_COMPLETE,
 * notify.c).  The children a node serves are its live children and, in
 * place of each dead one, that one's own (recursively): the nearest live
 * ancestor takes a dead node's children over and sends them everything
 * it holds, so they still receive it all.
 *
 * Before its first chunk a child gets the plan (the fan-out's shape, the
 * address and region blob of every node), written into the inbox of its
 * region (FERRY_ACCESS_FANOUT, reg/mem.c) and announced by a PLAN
 * notification naming the inbox: the receiver copies the plan out and
 * becomes a node of the fan-out.  The rest are notifications of ferry's
 * own too (ids from FERRY_NOTIFY_ID_RESERVED up, which notify.c hands to
 * fan_sink): CHUNK k has landed; DONE i (receiver i holds everything; to
 * the source); DEAD i (the source tells every receiver, a receiver whose
 * writes to its child i fail tells the source); FIN (the fan-out ended:
 * receivers stop and let their region go).  Events of a fan-out whose
 * plan has not come yet (a chunk may overtake it) wait in `early`.
 *
 * Who may make a node forward.  A plan asks a receiver to write the
 * bytes of its region to the regions the plan names, and anyone holding
 * the region's exported blob can write one into its inbox and announce
 * chunks.  Whether a chunk's bytes came in this fan-out is the one thing
 * the receiver cannot check: a one-sided write shows its target nothing
 * but the notification that follows, which names neither its sender nor
 * the bytes written (a liar writes one byte of chunk k, or none, and says
 * "chunk k landed"), so "forward only what was received" would rest on
 * the liar's word.  Forwarding rests on a permission instead: only a
 * region registered with FERRY_ACCESS_REMOTE_READ forwards (plan_arrived
 * ignores a plan that gives any other region children, ferry_fanout
 * refuses such a shape), and then whatever it sends out, whoever asked,
 * every holder of its blob could read with ferry_read anyway.  A region
 * peers may only write takes fan-outs as a leaf: write permission never
 * becomes read permission.
 *
 * Locks: the sink runs with the context lock held and only queues.  The
 * nodes post through the public calls (ferry_write and co. take the
 * context lock), so they are driven without it: the `run` mutex lets one
 * thread drive at a time, and is always taken before the context lock.
 */
#include "fan/fan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fan/plan.h"
#include "progress/progress.h"
#include "reg/mem.h"
#include "reg/peer.h"
#include "xfer/notify.h"
#include "xfer/xfer.h"

/* Chunk writes in flight to one child: enough to keep its link busy. */
#define WINDOW 4
/* Failed sends to a child before it counts as lost although liveness
 * has not declared it. */
#define MAX_FAILS 3
/* Events of fan-outs not known (yet) kept at most: the oldest go. */
#define EARLY_MAX 4096
/* A chosen chunk: len / CHUNKS_WANTED, within these bounds. */
#define CHUNKS_WANTED 64
#define CHUNK_MIN (256u * 1024u)
#define CHUNK_MAX (8u * 1024u * 1024u)

/* What a node's request carries: a chunk's index, or one of these. */
enum { WHAT_PLAN = -1, WHAT_DONE = -2, WHAT_MSG = -3 };

enum send_state { TO_SEND, IN_FLIGHT, DELIVERED };

struct fan_req {
    ferry_req_t *req;
    uint32_t to;
    int64_t what;
    uint8_t *buf; /* a plan's bytes, freed when its write is back */
};

struct ferry_fanout {
    uint32_t magic;
    struct ferry_fanout *next;
    struct ferry_context *ctx;
    struct ferry__fan_plan plan;
    uint32_t me; /* 0: the source */
    uint8_t *base;
    ferry_mem_t *mem;     /* registration of base (a receiver holds it) */
    ferry_peer_t **peer;  /* per node: the caller's, or added (receivers) */
    ferry_rmem_t **rmem;  /* per node */
    bool *dead, *done;
    unsigned *fails, *inflight;
    uint32_t *kids; /* room for the children kids_of finds */
    uint8_t *have; /* per chunk */
    uint32_t nhave;
    uint8_t *sent;      /* per node and chunk: enum send_state */
    uint8_t *plan_sent; /* per node */
    struct fan_req *reqs;
    size_t nreqs, reqs_cap;
    uint8_t done_sent; /* receiver: its DONE, enum send_state */
    bool counted;   /* receiver: its notify_id counted */
    bool finished;  /* receiver: FIN came or the source is gone */
    bool cancelled; /* receiver: its requests were cancelled */
    /* The source: */
    uint64_t deadline_ns; /* 0: none */
    int status;
    bool fin_sent;
    char errmsg[512];
};

/* ---- nodes --------------------------------------------------------------- */

static void free_arrays(struct ferry_fanout *f)
{
    free(f->peer);
    free(f->rmem);
    free(f->dead);
    free(f->done);
    free(f->fails);
    free(f->inflight);
    free(f->kids);
    free(f->have);
    free(f->sent);
    free(f->plan_sent);
}

static struct ferry_fanout *node_new(struct ferry_context *ctx,
                                     struct ferry__fan_plan *plan, uint32_t me)
{
    struct ferry_fanout *f = calloc(1, sizeof(*f));
    size_t nodes = plan->n + 1;

    if (f == NULL)
        return NULL;
    f->ctx = ctx;
    f->plan = *plan;
    f->me = me;
    f->status = FERRY_EINPROGRESS;
    f->peer = calloc(nodes, sizeof(*f->peer));
    f->rmem = calloc(nodes, sizeof(*f->rmem));
    f->dead = calloc(nodes, sizeof(*f->dead));
    f->done = calloc(nodes, sizeof(*f->done));
    f->fails = calloc(nodes, sizeof(*f->fails));
    f->inflight = calloc(nodes, sizeof(*f->inflight));
    f->kids = calloc(nodes, sizeof(*f->kids));
    f->have = calloc(plan->nchunks, 1);
    f->sent = calloc(nodes, plan->nchunks);
    f->plan_sent = calloc(nodes, 1);
    if (f->peer && f->rmem && f->dead && f->done && f->fails &&
        f->inflight && f->kids && f->have && f->sent && f->plan_sent) {
        memset(plan, 0, sizeof(*plan)); /* the node owns it now */
        return f;
    }
    f->plan = (struct ferry__fan_plan){0};
    free_arrays(f);
    free(f);
    return NULL;
}

/*
 * The peer for an address blob of a plan: one per address and context,
 * kept until the context goes.  Removing a peer and adding it again
 * while it still sends to us crashed libfabric 1.17's shm provider in
 * this process's progress (the second fan-out of a source to the same
 * receivers did), and a receiver meets the same source every time.
 */
struct ferry__fan_peer {
    struct ferry__fan_peer *next;
    ferry_peer_t *peer;
    size_t len;
    uint8_t blob[];
};

static int fan_peer(struct ferry_context *ctx, const uint8_t *blob,
                    size_t len, ferry_peer_t **out)
{
    struct ferry__fan_peer *p;
    int ret;

    for (p = ctx->fan->peers; p != NULL; p = p->next)
        if (p->len == len && memcmp(p->blob, blob, len) == 0) {
            *out = p->peer;
            return 0;
        }
    if ((p = malloc(sizeof(*p) + len)) == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory for a peer");
    if ((ret = ferry_peer_add(ctx, blob, len, &p->peer)) != 0) {
        free(p);
        return ret;
    }
    p->len = len;
    memcpy(p->blob, blob, len);
    p->next = ctx->fan->peers;
    ctx->fan->peers = p;
    *out = p->peer;
    return 0;
}

/* Whether another receiving node watches the same source as f. */
static bool source_watched(const struct ferry_fanout *f)
{
    for (const struct ferry_fanout *g = f->ctx->fan->nodes; g; g = g->next)
        if (g != f && g->me != 0 && g->peer[0] == f->peer[0])
            return true;
    return false;
}

/* Frees a node whose requests are all back.  A receiver also lets go of
 * the regions it imported and of its own region, and stops watching its
 * source unless another node still does.  A request back with an error
 * may still have operations out (to a receiver that was lost): the
 * region it writes into then refuses to close (FERRY_EBUSY) and stays
 * on the context's list until the context closes. */
static void node_free(struct ferry_fanout *f)
{
    struct ferry__fabric *fab = ferry__fabric_of(f->ctx);

    if (f->me != 0) {
        for (uint32_t i = 0; i <= f->plan.n; i++)
            ferry_rmem_close(f->rmem[i]);
        if (f->peer[0] != NULL && !source_watched(f))
            ferry_peer_watch(f->peer[0], 0);
        ferry__lock_acquire(&fab->lock);
        ferry__users_drop(&f->mem->users);
        ferry__lock_release(&fab->lock);
    }
    ferry__fan_plan_free(&f->plan);
    free_arrays(f);
    free(f->reqs);
    f->magic = FERRY__MAGIC_DEAD;
    free(f);
}

static void link_node(struct ferry_context *ctx, struct ferry_fanout *f)
{
    f->next = ctx->fan->nodes;
    ctx->fan->nodes = f;
    atomic_fetch_add(&ctx->fan->work, 1);
}

static void unlink_node(struct ferry_context *ctx, struct ferry_fanout *f)
{
    for (struct ferry_fanout **p = &ctx->fan->nodes; *p; p = &(*p)->next)
        if (*p == f) {
            *p = f->next;
            atomic_fetch_sub(&ctx->fan->work, 1);
            return;
        }
}

static struct ferry_fanout *node_of_tag(struct ferry_context *ctx,
                                        uint64_t tag)
{
    for (struct ferry_fanout *f = ctx->fan->nodes; f; f = f->next)
        if (f->plan.tag == tag)
            return f;
    return NULL;
}

/* The children node x serves: its live ones, and for a dead one, that
 * one's (recursively).  Appends them to out[k...]; returns the count. */
static size_t kids_of(const struct ferry_fanout *f, uint32_t x, uint32_t *out,
                      size_t k)
{
    for (uint32_t c = x + 1; c <= f->plan.n; c++) {
        if (f->plan.parent[c] != x)
            continue;
        if (f->dead[c])
            k = kids_of(f, c, out, k);
        else
            out[k++] = c;
    }
    return k;
}

static int add_req(struct ferry_fanout *f, ferry_req_t *req, uint32_t to,
                   int64_t what, uint8_t *buf)
{
    if (f->nreqs == f->reqs_cap) {
        size_t cap = f->reqs_cap ? 2 * f->reqs_cap : 16;
        struct fan_req *more = realloc(f->reqs, cap * sizeof(*more));

        if (more == NULL) {
            ferry_req_close(req);
            free(buf);
            return ferry__error(FERRY_ENOMEM, "out of memory for a fan-out "
                                              "request");
        }
        f->reqs = more;
        f->reqs_cap = cap;
    }
    f->reqs[f->nreqs++] = (struct fan_req){req, to, what, buf};
    return 0;
}

/* Sends node `to` a notification of ferry's own; what it carries says
 * how its end is handled (settle). */
static int send_event(struct ferry_fanout *f, uint32_t to,
                      enum ferry__fan_kind kind, uint64_t value, int64_t what)
{
    ferry_req_t *req;
    int ret;

    if (f->peer[to] == NULL)
        return FERRY_EINVAL;
    ret = ferry__notify_send_own(f->peer[to], ferry__fan_id(kind, f->plan.tag),
                                 value, NULL, &req);
    return ret != 0 ? ret : add_req(f, req, to, what, NULL);
}

static void node_lost(struct ferry_fanout *f, uint32_t c, const char *why);

/* A send to c failed: c is lost once liveness says so, or after a few
 * failures; until then it is sent again. */
static void send_failed(struct ferry_fanout *f, uint32_t c, const char *why)
{
    enum ferry_peer_state st = FERRY_PEER_UP;
    char reason[256];

    if (f->dead[c])
        return;
    /* why is often ferry_last_error(), which ferry_peer_state clears. */
    snprintf(reason, sizeof(reason), "%s", why);
    if (f->peer[c] != NULL)
        ferry_peer_state(f->peer[c], &st, NULL, 0);
    if (st == FERRY_PEER_DEAD || st == FERRY_PEER_UNREACHABLE ||
        ++f->fails[c] >= MAX_FAILS)
        node_lost(f, c, reason);
}

/* Node c is gone.  The source tells every live receiver (their
 * forwarding now skips c), a receiver tells the source; a receiver whose
 * source is gone stops. */
static void node_lost(struct ferry_fanout *f, uint32_t c, const char *why)
{
    if (f->dead[c])
        return;
    f->dead[c] = true;
    FERRY_LOG_INFO("fan-out %llx: node %u %s: %s",
                   (unsigned long long)f->plan.tag, c,
                   f->done[c] ? "left after receiving everything"
                              : "is lost; its children go to its nearest "
                                "live ancestor",
                   why);
    if (f->me != 0) {
        if (c == 0)
            f->finished = true;
        else
            send_event(f, 0, FERRY__FAN_DEAD, c, WHAT_MSG);
        return;
    }
    if (!f->done[c]) {
        size_t used = strlen(f->errmsg);

        snprintf(f->errmsg + used, sizeof(f->errmsg) - used, "%s%u (%s)",
                 used ? "; " : "", c - 1, why);
    }
    for (uint32_t i = 1; i <= f->plan.n; i++)
        if (!f->dead[i])
            send_event(f, i, FERRY__FAN_DEAD, c, WHAT_MSG);
}

/* The peer and region of node c, added from the plan on first need (a
 * receiver; the source has the caller's). */
static int reach(struct ferry_fanout *f, uint32_t c)
{
    char why[256];
    int ret;

    if (f->peer[c] != NULL && (c == 0 || f->rmem[c] != NULL))
        return 0;
    ret = f->peer[c] != NULL ? 0
                             : fan_peer(f->ctx, f->plan.addr[c],
                                        f->plan.addr_len[c], &f->peer[c]);
    if (ret == 0 && c == 0)
        return ferry_peer_watch(f->peer[0], 1);
    if (ret == 0)
        ret = ferry_rmem_import(f->peer[c], f->plan.rkey[c],
                                f->plan.rkey_len[c], &f->rmem[c]);
    if (ret == 0 && (f->rmem[c]->inbox == NULL ||
                     f->rmem[c]->len < f->plan.len))
        ret = ferry__error(FERRY_EBLOB, "its region has no fan-out inbox or "
                                        "is shorter than the data");
    if (ret == 0)
        return 0;
    snprintf(why, sizeof(why), "cannot reach it: %s", ferry_last_error());
    node_lost(f, c, why);
    return ret;
}

static int post_plan(struct ferry_fanout *f, uint32_t c)
{
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    struct ferry_iov iov = {.rmem = f->rmem[c]->inbox};
    ferry_req_t *req;
    uint8_t *buf;
    size_t len = 0;
    int ret;

    ferry__fan_plan_encode(&f->plan, c, NULL, 0, &len);
    if ((buf = malloc(len)) == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory for a fan-out plan");
    ferry__fan_plan_encode(&f->plan, c, buf, len, &len);
    iov.local = buf;
    iov.len = len;
    opts.flags = FERRY_XFER_NOTIFY;
    opts.notify_id = ferry__fan_id(FERRY__FAN_PLAN, 0);
    opts.notify_value = f->rmem[c]->inbox_id;
    ret = ferry__write_own(f->peer[c], &iov, 1, &opts, &req);
    if (ret != 0) {
        free(buf);
        return ret;
    }
    f->plan_sent[c] = IN_FLIGHT;
    return add_req(f, req, c, WHAT_PLAN, buf);
}

static int post_chunk(struct ferry_fanout *f, uint32_t c, uint32_t k)
{
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    uint64_t off = (uint64_t)k * f->plan.chunk;
    struct ferry_iov iov = {
        .local = f->base + off,
        .lmem = f->mem,
        .rmem = f->rmem[c],
        .roffset = off,
        .len = (size_t)(f->plan.len - off < f->plan.chunk ? f->plan.len - off
                                                          : f->plan.chunk),
    };
    ferry_req_t *req;
    int ret;

    opts.flags = FERRY_XFER_NOTIFY;
    opts.notify_id = ferry__fan_id(FERRY__FAN_CHUNK, f->plan.tag);
    opts.notify_value = k;
    if ((ret = ferry__write_own(f->peer[c], &iov, 1, &opts, &req)) != 0)
        return ret;
    f->sent[(size_t)c * f->plan.nchunks + k] = IN_FLIGHT;
    f->inflight[c]++;
    return add_req(f, req, c, k, NULL);
}

/* Collects the node's requests that ended. */
static void settle(struct ferry_fanout *f)
{
    size_t keep = 0;

    for (size_t i = 0; i < f->nreqs; i++) {
        struct fan_req r = f->reqs[i];
        int ret = ferry__req_look(r.req);
        char why[256] = "";

        if (ret == FERRY_EINPROGRESS) {
            f->reqs[keep++] = r;
            continue;
        }
        if (ret != 0)
            snprintf(why, sizeof(why), "%s", ferry_last_error());
        ferry_req_close(r.req);
        free(r.buf);
        if (r.what >= 0) {
            f->inflight[r.to]--;
            f->sent[(size_t)r.to * f->plan.nchunks + (size_t)r.what] =
                ret == 0 ? DELIVERED : TO_SEND;
        } else if (r.what == WHAT_PLAN)
            f->plan_sent[r.to] = ret == 0 ? DELIVERED : TO_SEND;
        else if (r.what == WHAT_DONE)
            f->done_sent = ret == 0 ? DELIVERED : TO_SEND;
        if (ret != 0 && r.what != WHAT_MSG && !f->cancelled)
            send_failed(f, r.to, why);
    }
    f->nreqs = keep;
}

/* Sends each child the plan, then every chunk the node holds. */
static void forward(struct ferry_fanout *f)
{
    size_t nkids = kids_of(f, f->me, f->kids, 0);

    for (size_t i = 0; i < nkids; i++) {
        uint32_t c = f->kids[i];
        uint8_t *sent = f->sent + (size_t)c * f->plan.nchunks;

        if (reach(f, c) != 0)
            continue;
        if (f->plan_sent[c] == TO_SEND && post_plan(f, c) != 0) {
            send_failed(f, c, ferry_last_error());
            continue;
        }
        for (uint32_t k = 0; k < f->plan.nchunks && f->inflight[c] < WINDOW;
             k++) {
            if (!f->have[k] || sent[k] != TO_SEND)
                continue;
            if (post_chunk(f, c, k) != 0) {
                send_failed(f, c, ferry_last_error());
                break;
            }
        }
    }
}

/* Chunks every child node x serves has been delivered (the fewest of
 * them); the whole when it has none. */
static uint32_t chunks_to_all_kids(struct ferry_fanout *f, uint32_t x)
{
    size_t nkids = kids_of(f, x, f->kids, 0);
    uint32_t least = f->plan.nchunks;

    for (size_t i = 0; i < nkids; i++) {
        const uint8_t *sent = f->sent + (size_t)f->kids[i] * f->plan.nchunks;
        uint32_t n = 0;

        for (uint32_t k = 0; k < f->plan.nchunks; k++)
            n += sent[k] == DELIVERED;
        if (n < least)
            least = n;
    }
    return least;
}

/* Whether every child the node serves holds every chunk. */
static bool kids_served(struct ferry_fanout *f)
{
    return chunks_to_all_kids(f, f->me) == f->plan.nchunks;
}

/* Adds 1 to the application's counter, once. */
static void count_done(struct ferry_fanout *f)
{
    struct ferry__fabric *fab = ferry__fabric_of(f->ctx);

    if (f->counted)
        return;
    ferry__lock_acquire(&fab->lock);
    ferry__notify_local(ferry__xfer_of(f->ctx), f->plan.notify_id, 1);
    ferry__lock_release(&fab->lock);
    f->counted = true;
}

/* A receiver holding everything tells the source, and counts it in its
 * own context once the source knows and its children have their copies:
 * the application may then leave without costing anyone data. */
static void receiver_progress(struct ferry_fanout *f)
{
    if (f->nhave < f->plan.nchunks)
        return;
    if (f->done_sent == TO_SEND && reach(f, 0) == 0 &&
        send_event(f, 0, FERRY__FAN_DONE, f->me, WHAT_DONE) == 0)
        f->done_sent = IN_FLIGHT;
    if (f->done_sent == DELIVERED && kids_served(f))
        count_done(f);
}

/* The source: receivers found dead, and the end. */
static void source_progress(struct ferry_fanout *f)
{
    uint32_t missing = 0, pending = 0;

    if (f->status != FERRY_EINPROGRESS)
        return; /* the result is final: what is missing no longer moves */
    for (uint32_t i = 1; i <= f->plan.n; i++) {
        enum ferry_peer_state st;
        char why[200];

        /* Done ones too: one that leaves hands its children on. */
        if (f->dead[i])
            continue;
        if (ferry_peer_state(f->peer[i], &st, why, sizeof(why)) == 0 &&
            (st == FERRY_PEER_DEAD || st == FERRY_PEER_UNREACHABLE))
            node_lost(f, i, why);
    }
    for (uint32_t i = 1; i <= f->plan.n; i++)
        if (!f->done[i])
            f->dead[i] ? missing++ : pending++;
    if (pending == 0 && missing == 0)
        f->status = 0;
    else if (pending == 0)
        f->status = FERRY_EPEERDEAD;
    else if (f->deadline_ns != 0 && ferry__now_ns() >= f->deadline_ns)
        f->status = FERRY_ETIMEDOUT;
    if (f->status == FERRY_EINPROGRESS || f->fin_sent)
        return;
    f->ctx->fan->outcomes[ferry__outcome_of(f->status)]++;
    f->ctx->fan->reached += f->plan.n - missing - pending;
    f->ctx->fan->missed += missing + pending;
    f->fin_sent = true;
    for (uint32_t i = 1; i <= f->plan.n; i++)
        if (!f->dead[i])
            send_event(f, i, FERRY__FAN_FIN, 0, WHAT_MSG);
}

/* Stops the node's requests; they end soon, and it is freed after. */
static void cancel_all(struct ferry_fanout *f)
{
    f->cancelled = true;
    for (size_t i = 0; i < f->nreqs; i++)
        ferry_req_cancel(f->reqs[i].req);
}

static void drive(struct ferry_fanout *f)
{
    settle(f);
    if (f->me == 0 && f->finished)
        return; /* freed by the caller: its last requests end */
    if (f->me == 0) {
        if (f->status == FERRY_EINPROGRESS)
            forward(f);
        source_progress(f);
        return;
    }
    if (!f->finished) {
        if (f->peer[0] != NULL) {
            enum ferry_peer_state st;
            char why[200];

            if (ferry_peer_state(f->peer[0], &st, why, sizeof(why)) == 0 &&
                (st == FERRY_PEER_DEAD || st == FERRY_PEER_UNREACHABLE))
                node_lost(f, 0, why);
        }
        forward(f);
        receiver_progress(f);
    }
    /* FIN: the source has heard from everyone (our DONE may still be
     * on its way back here) or gave up; what this node holds is whole. */
    if (f->finished && f->nhave == f->plan.nchunks)
        count_done(f);
    if (f->finished && !f->cancelled)
        cancel_all(f);
}

/* ---- events -------------------------------------------------------------- */

static void apply(struct ferry_fanout *f, uint64_t id, uint64_t value)
{
    if (f->me == 0 && f->status != FERRY_EINPROGRESS)
        return; /* ended: its result stands */
    switch (ferry__fan_kind_of(id)) {
    case FERRY__FAN_CHUNK:
        if (value < f->plan.nchunks && !f->have[value]) {
            f->have[value] = 1;
            f->nhave++;
        }
        break;
    case FERRY__FAN_DONE:
        if (f->me == 0 && value >= 1 && value <= f->plan.n)
            f->done[value] = true;
        break;
    case FERRY__FAN_DEAD:
        if (value > f->plan.n)
            break;
        if (f->me == 0 && value >= 1) /* a DEAD for node 0 is no news */
            node_lost(f, (uint32_t)value, "its parent could not reach it");
        else if (f->me != 0 && value == 0)
            f->finished = true;
        else if (f->me != 0)
            f->dead[value] = true;
        break;
    case FERRY__FAN_FIN:
        f->finished = true;
        break;
    default:
        break;
    }
}

static void stash_early(struct ferry__fan_part *fan, uint64_t id,
                        uint64_t value)
{
    if (fan->early == NULL &&
        (fan->early = calloc(EARLY_MAX, sizeof(*fan->early))) == NULL)
        return;
    fan->early[(fan->early_head + fan->nearly) % EARLY_MAX] =
        (struct ferry__fan_event){id, value};
    if (fan->nearly < EARLY_MAX)
        fan->nearly++;
    else
        fan->early_head = (fan->early_head + 1) % EARLY_MAX;
}

static void replay_early(struct ferry_context *ctx, struct ferry_fanout *f)
{
    struct ferry__fan_part *fan = ctx->fan;

    for (size_t i = 0; i < fan->nearly; i++) {
        struct ferry__fan_event *e =
            &fan->early[(fan->early_head + i) % EARLY_MAX];

        if (e->id != 0 && (e->id & FERRY__FAN_TAG_MASK) == f->plan.tag) {
            apply(f, e->id, e->value);
            e->id = 0;
        }
    }
}

/* Whether a fan-out this context received has ended here (a late plan
 * of it, sent again by a parent that took a child over, is no new one). */
static bool ended(const struct ferry_context *ctx, uint64_t tag)
{
    for (size_t i = 0; i < FERRY__FAN_ENDED; i++)
        if (ctx->fan->ended[i] == tag)
            return true;
    return false;
}

/* The region whose inbox is inbox_id, held for the node; NULL if none. */
static struct ferry_mem *hold_inbox_region(struct ferry_context *ctx,
                                           uint64_t inbox_id)
{
    struct ferry__reg *reg = ferry__reg_of(ctx);
    struct ferry_mem *mem;

    ferry__lock_acquire(&reg->fab.lock);
    for (mem = reg->mem.list; mem != NULL; mem = mem->next)
        if (mem->inbox != NULL && mem->inbox_id == inbox_id) {
            ferry__users_take(&mem->users, &reg->fab.lock);
            break;
        }
    ferry__lock_release(&reg->fab.lock);
    return mem;
}

/* A plan landed in the inbox of one of our regions: a node to run. */
static void plan_arrived(struct ferry_context *ctx, uint64_t inbox_id)
{
    struct ferry__fabric *fab = ferry__fabric_of(ctx);
    struct ferry_mem *mem = hold_inbox_region(ctx, inbox_id);
    struct ferry__fan_plan plan = {0};
    struct ferry_fanout *f = NULL;
    uint32_t you = 0, total;
    const uint8_t *inbox;

    if (mem == NULL) {
        FERRY_LOG_WARN("a fan-out plan came for inbox %llu, which no "
                       "region here has (deregistered?): ignored",
                       (unsigned long long)inbox_id);
        return;
    }
    inbox = mem->inbox->addr;
    total = (uint32_t)inbox[8] | (uint32_t)inbox[9] << 8 |
            (uint32_t)inbox[10] << 16 | (uint32_t)inbox[11] << 24;
    if (total > FERRY__INBOX_SIZE ||
        ferry__fan_plan_decode(inbox, total, &plan, &you) != 0)
        FERRY_LOG_WARN("a fan-out plan in the inbox of [%p, +%zu) is "
                       "unreadable (%s): ignored",
                       (void *)mem->addr, mem->len,
                       total > FERRY__INBOX_SIZE ? "too long"
                                                 : ferry_last_error());
    else if (node_of_tag(ctx, plan.tag) != NULL || ended(ctx, plan.tag))
        ferry__fan_plan_free(&plan); /* a new parent sending it again */
    else if (plan.len > mem->len)
        FERRY_LOG_WARN("fan-out %llx brings %llu bytes to [%p, +%zu): "
                       "ignored", (unsigned long long)plan.tag,
                       (unsigned long long)plan.len, (void *)mem->addr,
                       mem->len);
    else if (ferry__fan_plan_forwards(&plan, you) &&
             !(mem->access & FERRY_ACCESS_REMOTE_READ))
        /* Forwarding would send out bytes that peers may only write (the
         * top of this file says why that is the rule). */
        FERRY_LOG_WARN("fan-out %llx asks [%p, +%zu) to forward to other "
                       "receivers, but the region was registered without "
                       "FERRY_ACCESS_REMOTE_READ: ignored",
                       (unsigned long long)plan.tag, (void *)mem->addr,
                       mem->len);
    else if ((f = node_new(ctx, &plan, you)) == NULL)
        FERRY_LOG_WARN("out of memory: fan-out %llx not joined",
                       (unsigned long long)plan.tag);
    if (f == NULL) {
        ferry__fan_plan_free(&plan);
        ferry__lock_acquire(&fab->lock);
        ferry__users_drop(&mem->users);
        ferry__lock_release(&fab->lock);
        return;
    }
    f->magic = FERRY__MAGIC_FAN;
    f->mem = mem;
    f->base = mem->addr;
    link_node(ctx, f);
    replay_early(ctx, f);
}

static void handle_event(struct ferry_context *ctx,
                         const struct ferry__fan_event *e)
{
    struct ferry_fanout *f;

    if (ferry__fan_kind_of(e->id) == FERRY__FAN_PLAN) {
        plan_arrived(ctx, e->value);
        return;
    }
    if ((f = node_of_tag(ctx, e->id & FERRY__FAN_TAG_MASK)) != NULL)
        apply(f, e->id, e->value);
    else
        stash_early(ctx->fan, e->id, e->value);
}

/* notify.c's sink: queues, with the context lock held. */
static void fan_sink(struct ferry__xfer *x, uint64_t id, uint64_t value)
{
    struct ferry__fan_part *fan =
        ferry__container_of(x, struct ferry_context, xfer)->fan;

    if (fan->nevents == fan->events_cap) {
        size_t cap = fan->events_cap ? 2 * fan->events_cap : 64;
        struct ferry__fan_event *more =
            realloc(fan->events, cap * sizeof(*more));

        if (more == NULL) {
            FERRY_LOG_WARN("out of memory: a fan-out event is lost");
            return;
        }
        fan->events = more;
        fan->events_cap = cap;
    }
    fan->events[fan->nevents++] = (struct ferry__fan_event){id, value};
    atomic_fetch_add(&fan->work, 1);
}

/* ---- driving ------------------------------------------------------------- */

int ferry__fan_init(struct ferry_context *ctx)
{
    ctx->fan = calloc(1, sizeof(*ctx->fan));
    if (ctx->fan == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory for a context");
    pthread_mutex_init(&ctx->fan->run, NULL);
    ctx->xfer.notify.fan_sink = fan_sink;
    /* Handed up to the progress layer, which calls it after its passes
     * without naming this module. */
    ctx->progress.after_pass = ferry__fan_run;
    return 0;
}

/* With run held. */
static void run_locked(struct ferry_context *ctx)
{
    struct ferry__fabric *fab = ferry__fabric_of(ctx);
    struct ferry__fan_part *fan = ctx->fan;
    struct ferry__fan_event *events;
    size_t nevents;

    ferry__lock_acquire(&fab->lock);
    events = fan->events;
    nevents = fan->nevents;
    fan->events = NULL;
    fan->nevents = fan->events_cap = 0;
    ferry__lock_release(&fab->lock);
    for (size_t i = 0; i < nevents; i++)
        handle_event(ctx, &events[i]);
    free(events);
    atomic_fetch_sub(&fan->work, (unsigned)nevents);
    for (struct ferry_fanout *f = fan->nodes, *next; f != NULL; f = next) {
        next = f->next;
        drive(f);
        if (f->finished && f->nreqs == 0) {
            if (f->me != 0)
                fan->ended[fan->ended_next++ % FERRY__FAN_ENDED] =
                    f->plan.tag;
            unlink_node(ctx, f);
            node_free(f);
        }
    }
}

void ferry__fan_run(struct ferry_context *ctx)
{
    if (atomic_load_explicit(&ctx->fan->work, memory_order_relaxed) == 0 ||
        pthread_mutex_trylock(&ctx->fan->run) != 0)
        return;
    run_locked(ctx);
    pthread_mutex_unlock(&ctx->fan->run);
}

void ferry__fan_destroy(struct ferry_context *ctx)
{
    struct ferry__fan_part *fan = ctx->fan;

    if (fan == NULL)
        return;

    /* The endpoints are closed and the requests freed (context.c): no
     * provider reads a plan buffer any more. */
    while (fan->nodes != NULL) {
        struct ferry_fanout *f = fan->nodes;

        fan->nodes = f->next;
        for (size_t i = 0; i < f->nreqs; i++)
            free(f->reqs[i].buf);
        f->nreqs = 0;
        node_free(f);
    }
    while (fan->peers != NULL) { /* the peers go with the context */
        struct ferry__fan_peer *p = fan->peers;

        fan->peers = p->next;
        free(p);
    }
    free(fan->events);
    free(fan->early);
    pthread_mutex_destroy(&fan->run);
    free(fan);
    ctx->fan = NULL;
}

/* ---- the source's calls -------------------------------------------------- */

static int check_receivers(ferry_mem_t *src, size_t len,
                           ferry_peer_t *const *peers,
                           ferry_rmem_t *const *dst, size_t n)
{
    if (peers == NULL || dst == NULL || n == 0 ||
        n > FERRY__INBOX_SIZE / 64)
        return ferry__error(FERRY_EINVAL,
                            "ferry_fanout: %s; pass 1 to %u receivers",
                            peers == NULL || dst == NULL
                                ? "peers or dst is NULL"
                                : "n is out of range",
                            FERRY__INBOX_SIZE / 64);
    for (size_t i = 0; i < n; i++) {
        int ret;

        if ((ret = ferry__check_peer(peers[i], "ferry_fanout")) ||
            (ret = ferry__check_rmem(dst[i], "ferry_fanout")))
            return ret;
        if (peers[i]->ctx != src->ctx || dst[i]->peer != peers[i])
            return ferry__error(FERRY_EHANDLE,
                                "ferry_fanout: receiver %zu: %s", i,
                                peers[i]->ctx != src->ctx
                                    ? "its peer belongs to another context"
                                    : "dst[i] was not imported from "
                                      "peers[i]");
        /* Its receivers answer the source and forward to each other. */
        if (peers[i]->shm_one_way)
            return ferry__error(
                FERRY_ENOTSUP,
                "ferry_fanout: receiver %zu is a context of this process "
                "reached over shm, and libfabric %u.%u's shm provider "
                "cannot connect two endpoints of one process both ways "
                "(docs/compatibility.md), which a fan-out needs (its "
                "receivers report to the source): put the receivers in "
                "other processes, or choose another provider "
                "(FERRY_PROVIDER=tcp)",
                i, FI_MAJOR(fi_version()), FI_MINOR(fi_version()));
        if (dst[i]->inbox == NULL)
            return ferry__error(FERRY_EINVAL,
                                "ferry_fanout: receiver %zu's region was "
                                "registered without FERRY_ACCESS_FANOUT: "
                                "register it with FERRY_ACCESS_REMOTE_WRITE "
                                "| FERRY_ACCESS_FANOUT so that it has an "
                                "inbox for the plan",
                                i);
        if (dst[i]->len < len)
            return ferry__error(FERRY_EINVAL,
                                "ferry_fanout: receiver %zu's region is "
                                "%llu bytes, the fan-out writes %zu",
                                i, (unsigned long long)dst[i]->len, len);
    }
    return 0;
}

static int check_fanout_opts(const struct ferry_fanout_opts *opts)
{
    if (opts == NULL)
        return 0;
    if (opts->size == 0 || opts->size > sizeof(*opts))
        return ferry__error(FERRY_EINVAL,
                            "ferry_fanout: opts->size is %zu; initialise "
                            "opts with FERRY_FANOUT_OPTS_INIT",
                            opts->size);
    if (opts->notify_id >= FERRY_NOTIFY_ID_RESERVED)
        return ferry__error(FERRY_EINVAL,
                            "ferry_fanout: opts->notify_id 0x%llx is one of "
                            "ferry's own; use an id below 0x%llx",
                            (unsigned long long)opts->notify_id,
                            (unsigned long long)FERRY_NOTIFY_ID_RESERVED);
    return 0;
}

/* A tag no other fan-out of this process, and most likely of no other
 * process, uses. */
static uint64_t new_tag(void)
{
    static _Atomic uint64_t count;
    uint64_t x = ferry__now_ns() ^ ((uint64_t)getpid() << 32) ^
                 (atomic_fetch_add(&count, 1) * UINT64_C(0x9e3779b97f4a7c15));

    x ^= x >> 29;
    x *= UINT64_C(0xbf58476d1ce4e5b9);
    x ^= x >> 32;
    /* never 0: early events use 0 as "taken" */
    return (x & FERRY__FAN_TAG_MASK) | 1;
}

/*
 * The degree whose tree ends first, by a model: every node sends each
 * byte once per child over a link of `bw` bytes/s (the rails' reported
 * link speed, or 10 Gbit/s when the provider reports none, as tcp does),
 * the last level starts (depth - 1) chunks late, and each level costs
 * HOP_NS (a notification, a wake-up, a post).  A chain (degree 1) sends
 * each byte once per link and wins for large data; a wide tree has fewer
 * levels and wins when the hops cost more than the bytes.
 */
#define HOP_NS 30000.0
#define DEFAULT_LINK_MBITS 10000
#define MAX_AUTO_DEGREE 4

static unsigned pick_degree(const struct ferry__fabric *fab, size_t len,
                            size_t chunk, size_t n)
{
    int64_t mbits = 0;
    double bw, best_ns = 0;
    unsigned best = 1;

    for (unsigned i = 0; i < fab->nrails; i++)
        mbits += fab->rails[i].weight > 1 ? fab->rails[i].weight : 0;
    bw = (double)(mbits > 0 ? mbits : DEFAULT_LINK_MBITS) * 1e6 / 8 / 1e9;
    for (unsigned d = 1; d <= MAX_AUTO_DEGREE; d++) {
        size_t depth = 0, reached = 0, level = 1;
        double ns;

        /* Levels of a d-ary tree below the source holding n nodes. */
        while (reached < n) {
            level *= d;
            reached += d == 1 ? 1 : level;
            depth++;
        }
        ns = (double)d * ((double)len + (double)(depth - 1) * (double)chunk) /
                 bw +
             (double)depth * HOP_NS;
        if (d == 1 || ns < best_ns) {
            best = d;
            best_ns = ns;
        }
    }
    return best;
}

static uint8_t *copy_bytes(const void *src, size_t len)
{
    uint8_t *dst = malloc(len > 0 ? len : 1);

    if (dst != NULL && len > 0)
        memcpy(dst, src, len);
    return dst;
}

/* Only a receiver whose region peers may read forwards (the top of this
 * file says why): refuses a shape in which another one would. */
static int check_forwarders(const struct ferry__fan_plan *p,
                            ferry_rmem_t *const *dst, unsigned degree)
{
    for (uint32_t i = 1; i <= p->n; i++)
        if (ferry__fan_plan_forwards(p, i) &&
            !(dst[i - 1]->access & FERRY_ACCESS_REMOTE_READ))
            return ferry__error(
                FERRY_EINVAL,
                "ferry_fanout: with degree %u, receiver %u forwards to "
                "others, but its region does not grant "
                "FERRY_ACCESS_REMOTE_READ, and a receiver forwards whatever "
                "its region holds: register the receivers with "
                "FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE | "
                "FERRY_ACCESS_FANOUT, or set opts.degree to %u so that the "
                "source writes to every receiver itself",
                degree, i - 1, p->n);
    return 0;
}

/* The source's plan: its shape, and every node's blobs. */
static int source_plan(struct ferry_context *ctx, size_t len,
                       ferry_peer_t *const *peers, ferry_rmem_t *const *dst,
                       size_t n, const struct ferry_fanout_opts *o,
                       struct ferry__fan_plan *p)
{
    uint8_t addr[1024];
    size_t alen = sizeof(addr), plan_len = 0;
    unsigned degree;
    int ret;

    if ((ret = ferry_context_address(ctx, addr, &alen)) != 0 ||
        (ret = ferry__fan_plan_alloc(p, (uint32_t)n)) != 0)
        return ret;
    p->tag = new_tag();
    p->len = len;
    p->chunk = o->chunk;
    if (p->chunk == 0) {
        p->chunk = len / CHUNKS_WANTED;
        p->chunk = p->chunk < CHUNK_MIN ? CHUNK_MIN
                   : p->chunk > CHUNK_MAX ? CHUNK_MAX
                                          : p->chunk;
    }
    if (p->chunk > len)
        p->chunk = len;
    p->nchunks = (uint32_t)((len - 1) / p->chunk + 1);
    p->notify_id = o->notify_id;
    degree = o->degree != 0 ? o->degree
                            : pick_degree(ferry__fabric_of(ctx), len, p->chunk,
                                          n);
    p->parent[0] = FERRY__FAN_NO_PARENT;
    p->addr[0] = copy_bytes(addr, alen);
    p->addr_len[0] = alen;
    p->rkey[0] = copy_bytes(NULL, 0);
    for (size_t i = 1; i <= n; i++) {
        p->parent[i] = (uint32_t)((i - 1) / degree);
        p->addr[i] = copy_bytes(peers[i - 1]->blob, peers[i - 1]->blob_len);
        p->addr_len[i] = peers[i - 1]->blob_len;
        p->rkey[i] = copy_bytes(dst[i - 1]->blob, dst[i - 1]->blob_len);
        p->rkey_len[i] = dst[i - 1]->blob_len;
    }
    for (size_t i = 0; i <= n; i++)
        if (p->addr[i] == NULL || p->rkey[i] == NULL) {
            ferry__fan_plan_free(p);
            return ferry__error(FERRY_ENOMEM, "out of memory for a fan-out "
                                              "plan");
        }
    if ((ret = check_forwarders(p, dst, degree)) != 0) {
        ferry__fan_plan_free(p);
        return ret;
    }
    ferry__fan_plan_encode(p, 1, NULL, 0, &plan_len);
    if (plan_len > FERRY__INBOX_SIZE) {
        ferry__fan_plan_free(p);
        return ferry__error(FERRY_EINVAL,
                            "ferry_fanout: the plan for %zu receivers takes "
                            "%zu bytes, more than a receiver's %u-byte "
                            "inbox: fan out to fewer receivers per call",
                            n, plan_len, FERRY__INBOX_SIZE);
    }
    return 0;
}

int ferry_fanout(ferry_mem_t *src, uint64_t offset, size_t len,
                 ferry_peer_t *const *peers, ferry_rmem_t *const *dst,
                 size_t n, const struct ferry_fanout_opts *opts,
                 ferry_fanout_t **out)
{
    struct ferry_fanout_opts o = FERRY_FANOUT_OPTS_INIT;
    struct ferry__fan_plan plan = {0};
    struct ferry_context *ctx;
    struct ferry_fanout *f;
    int ret, timeout_ms;

    ferry__error_clear();
    if ((ret = ferry__check_mem(src, "ferry_fanout")) ||
        (ret = check_fanout_opts(opts)))
        return ret;
    if (out == NULL || len == 0 || offset > src->len ||
        len > src->len - offset)
        return ferry__error(FERRY_EINVAL,
                            "ferry_fanout: %s",
                            out == NULL ? "out is NULL"
                            : len == 0  ? "len is 0"
                                        : "[offset, offset + len) runs past "
                                          "the source region");
    if ((ret = check_receivers(src, len, peers, dst, n)) != 0)
        return ret;
    if (opts != NULL)
        memcpy(&o, opts, opts->size);
    ctx = src->ctx;
    if ((ret = source_plan(ctx, len, peers, dst, n, &o, &plan)) != 0)
        return ret;
    if ((f = node_new(ctx, &plan, 0)) == NULL) {
        ferry__fan_plan_free(&plan);
        return ferry__error(FERRY_ENOMEM, "out of memory for a fan-out");
    }
    f->magic = FERRY__MAGIC_FAN;
    f->mem = src;
    f->base = src->addr + offset;
    f->nhave = f->plan.nchunks;
    memset(f->have, 1, f->plan.nchunks);
    timeout_ms = o.timeout_ms != 0 ? o.timeout_ms
                                   : ferry__fabric_of(ctx)->cfg.timeout_ms;
    if (timeout_ms > 0)
        f->deadline_ns = ferry__now_ns() + (uint64_t)timeout_ms * 1000000u;
    for (size_t i = 1; i <= n; i++) {
        f->peer[i] = peers[i - 1];
        f->rmem[i] = dst[i - 1];
        /* Its death is noticed even while nothing is sent to it. */
        ferry_peer_watch(f->peer[i], 1);
    }
    pthread_mutex_lock(&ctx->fan->run);
    ctx->fan->started++;
    link_node(ctx, f);
    drive(f);
    pthread_mutex_unlock(&ctx->fan->run);
    *out = f;
    return 0;
}

int ferry_fanout_test(ferry_fanout_t *f)
{
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_fan(f, "ferry_fanout_test")))
        return ret;
    /* The fan-outs are driven by whoever progresses: the progress thread,
     * or here ferry_progress, which drives them after polling. */
    if (!f->ctx->progress.started)
        ferry_progress(f->ctx);
    pthread_mutex_lock(&f->ctx->fan->run);
    ret = f->status;
    pthread_mutex_unlock(&f->ctx->fan->run);
    if (ret == FERRY_EPEERDEAD)
        return ferry__error(ret,
                            "fan-out of %llu bytes: receivers died without "
                            "the data: %s",
                            (unsigned long long)f->plan.len, f->errmsg);
    if (ret == FERRY_ETIMEDOUT)
        return ferry__error(ret,
                            "fan-out of %llu bytes: %zu receivers lacked "
                            "data at the deadline%s%s",
                            (unsigned long long)f->plan.len,
                            ferry_fanout_missing(f, NULL, 0),
                            f->errmsg[0] ? "; lost: " : "", f->errmsg);
    return ret;
}

int ferry_fanout_wait(ferry_fanout_t *f, int timeout_ms)
{
    uint64_t until = ferry__wait_until(timeout_ms);
    unsigned spins = 0;
    int ret;

    while ((ret = ferry_fanout_test(f)) == FERRY_EINPROGRESS) {
        if (ferry__wait_over(until))
            return ferry__error(FERRY_EAGAIN,
                                "ferry_fanout_wait: %d ms passed; the "
                                "fan-out is still running (wait again)",
                                timeout_ms);
        ferry__progress_pause(f->ctx, ++spins);
    }
    return ret;
}

int ferry_fanout_progress(ferry_fanout_t *f, uint64_t *done, uint64_t *total)
{
    uint64_t chunks;
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_fan(f, "ferry_fanout_progress")))
        return ret;
    if (done == NULL || total == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_fanout_progress: done or "
                            "total is NULL");
    pthread_mutex_lock(&f->ctx->fan->run);
    chunks = f->me != 0                 ? f->nhave
             : f->status == 0           ? f->plan.nchunks
                                        : chunks_to_all_kids(f, 0);
    *total = f->plan.len;
    *done = chunks * f->plan.chunk < f->plan.len ? chunks * f->plan.chunk
                                                 : f->plan.len;
    pthread_mutex_unlock(&f->ctx->fan->run);
    return 0;
}

size_t ferry_fanout_missing(const ferry_fanout_t *f, size_t *idx, size_t max)
{
    pthread_mutex_t *run;
    size_t count = 0;

    if (f == NULL || f->magic != FERRY__MAGIC_FAN)
        return 0;
    /* The progress thread may be driving it: read what it writes under
     * the same mutex. */
    run = &f->ctx->fan->run;
    pthread_mutex_lock(run);
    for (uint32_t i = 1; f->status != FERRY_EINPROGRESS && i <= f->plan.n;
         i++) {
        if (f->done[i])
            continue;
        if (idx != NULL && count < max)
            idx[count] = i - 1;
        count++;
    }
    pthread_mutex_unlock(run);
    return count;
}

int ferry_fanout_close(ferry_fanout_t *f)
{
    struct ferry_context *ctx;
    int ret;

    ferry__error_clear();
    if (f == NULL)
        return 0;
    if ((ret = ferry__check_fan(f, "ferry_fanout_close")))
        return ret;
    ctx = f->ctx;
    pthread_mutex_lock(&ctx->fan->run);
    /* The handle is gone now; the node stays until the provider is done
     * with its buffers (run_locked frees it). */
    f->magic = FERRY__MAGIC_DEAD;
    f->finished = true;
    cancel_all(f);
    /* A source closed before its end: the metrics count it cancelled. */
    if (f->me == 0 && !f->fin_sent)
        ctx->fan->outcomes[ferry__outcome_of(FERRY_ECANCELED)]++;
    if (!f->fin_sent)
        for (uint32_t i = 1; i <= f->plan.n; i++)
            if (!f->dead[i])
                send_event(f, i, FERRY__FAN_FIN, 0, WHAT_MSG);
    f->fin_sent = true;
    pthread_mutex_unlock(&ctx->fan->run);
    return 0;
}
