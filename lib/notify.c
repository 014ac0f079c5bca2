/*
 * Notifications and counters delivered after the data.
 *
 * A request may carry a notification {id, value}.  It is sent as a small
 * message only once every write of the request has completed, and writes
 * complete with FI_DELIVERY_COMPLETE (provider.c asks for it): the data is
 * then visible in the target's memory before the message even leaves.
 * This holds on every provider that grants FI_DELIVERY_COMPLETE (tcp,
 * shm, verbs and efa through rxm or natively), whatever the order in
 * which the provider delivers messages and RMA.
 *
 * The target keeps arriving notifications in a queue (ferry_notify_poll,
 * arrival order) and adds each value to a per-id counter
 * (ferry_counter_get/wait), so "all 512 blocks of sequence 7 have landed"
 * is a counter reaching 512 whatever order they came in.
 *
 * Writes into a peer's host mirror of device memory (a staged region,
 * stage.c) are followed by one sync message per range written, sent
 * after the range's writes completed and before the notification; the
 * target copies the range to its device when the message arrives.  Both
 * travel on rail 0 and the target reads its completion queue in order, so
 * the copy is done before the notification is delivered.
 *
 * A notification whose request ends with one write (or whose writes the
 * provider places in order) rides on that write instead, as its remote CQ
 * data (xfer.c, notify_rides): the target's completion of the write is
 * generated after its data is placed, so the order holds with one
 * operation instead of two.  The data word holds the id in its upper half
 * and the value in its lower half; {id, value} that do not fit go as a
 * message.
 *
 * Wire format, little-endian, FERRY__MSG_SIZE bytes at most:
 *   u32 magic "FRYN" | u32 kind 1 (notify) | u64 id | u64 value
 *   u32 magic "FRYN" | u32 kind 2 (mirror sync) | u64 mirror id |
 *       u64 offset | u64 length
 */
#include "ferry-internal.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

#define NOTIFY_MAGIC 0x4e595246u /* "FRYN" */
#define NOTIFY_KIND 1u
#define NOTIFY_WIRE_LEN 24u
#define SYNC_KIND 2u
#define SYNC_WIRE_LEN 32u

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;

    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* ---- the rail's message buffers ------------------------------------------ */

static int register_area(struct ferry_context *ctx, struct ferry__rail *rail,
                         void *addr, size_t len, uint64_t access,
                         struct fid_mr **mr)
{
    struct iovec iov = {.iov_base = addr, .iov_len = len};
    struct fi_mr_attr attr = {.mr_iov = &iov,
                              .iov_count = 1,
                              .access = access,
                              .iface = FI_HMEM_SYSTEM};

    return ferry__mr_open(ctx, rail, &attr, 0, mr);
}

static int post_recv(struct ferry__rail *rail, struct ferry__recv *rv)
{
    void *desc = rail->recv_mr ? fi_mr_desc(rail->recv_mr) : NULL;
    ssize_t ret;

    /* A receive queue never fills with only FERRY__RECV_DEPTH buffers, but
     * a provider may still ask to be retried while it makes room. */
    for (int tries = 0; tries < 1000; tries++) {
        ret = fi_recv(rail->ep, rv->buf, sizeof(rv->buf), desc,
                      FI_ADDR_UNSPEC, &rv->fi_ctx);
        if (ret != -FI_EAGAIN)
            break;
        sched_yield();
    }
    return (int)ret;
}

int ferry__notify_rail_open(struct ferry_context *ctx,
                            struct ferry__rail *rail)
{
    int ret;

    rail->recvs = calloc(FERRY__RECV_DEPTH, sizeof(*rail->recvs));
    if (rail->recvs == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory for receives");
    if (ctx->register_local) {
        ret = register_area(ctx, rail, rail->recvs,
                            FERRY__RECV_DEPTH * sizeof(*rail->recvs), FI_RECV,
                            &rail->recv_mr);
        if (ret == 0)
            ret = register_area(ctx, rail, rail->ops,
                                ctx->tx_depth * sizeof(*rail->ops), FI_SEND,
                                &rail->send_mr);
        if (ret != 0)
            return ret;
    }
    for (unsigned i = 0; i < FERRY__RECV_DEPTH; i++) {
        ret = post_recv(rail, &rail->recvs[i]);
        if (ret != 0)
            return ferry__error(ferry__error_from_fi(ret),
                                "posting receive buffers on domain %s failed: "
                                "%s",
                                rail->info->domain_attr->name,
                                fi_strerror(-ret));
    }
    return 0;
}

void ferry__notify_rail_close(struct ferry__rail *rail)
{
    if (rail->recv_mr)
        fi_close(&rail->recv_mr->fid);
    if (rail->send_mr)
        fi_close(&rail->send_mr->fid);
    free(rail->recvs);
    rail->recv_mr = rail->send_mr = NULL;
    rail->recvs = NULL;
}

/* ---- sending -------------------------------------------------------------- */

static ssize_t send_msg(struct ferry_req *req, struct ferry__rail *rail,
                        struct ferry__op *op, uint32_t kind,
                        const uint64_t *fields, size_t nfields)
{
    void *desc = rail->send_mr ? fi_mr_desc(rail->send_mr) : NULL;

    put64(op->msg, (uint64_t)NOTIFY_MAGIC | (uint64_t)kind << 32);
    for (size_t i = 0; i < nfields; i++)
        put64(op->msg + 8 + 8 * i, fields[i]);
    return fi_send(rail->ep, op->msg, 8 + 8 * nfields, desc,
                   req->peer->fi_addr[rail->index], &op->fi_ctx);
}

ssize_t ferry__notify_send(struct ferry_req *req, struct ferry__rail *rail,
                           struct ferry__op *op)
{
    const uint64_t f[] = {req->notify_id, req->notify_value};

    return send_msg(req, rail, op, NOTIFY_KIND, f, FERRY__ARRAY_LEN(f));
}

ssize_t ferry__sync_send(struct ferry_req *req, struct ferry__rail *rail,
                         struct ferry__op *op, uint64_t mirror_id,
                         uint64_t off, uint64_t len)
{
    const uint64_t f[] = {mirror_id, off, len};

    return send_msg(req, rail, op, SYNC_KIND, f, FERRY__ARRAY_LEN(f));
}

unsigned ferry__notify_data_bits(const struct ferry__rail *rail)
{
    size_t bytes = rail->info->domain_attr->cq_data_size;

    return bytes >= 8 ? 32 : (unsigned)bytes * 4;
}

bool ferry__notify_fits(const struct ferry__rail *rail, uint64_t id,
                        uint64_t value)
{
    unsigned bits = ferry__notify_data_bits(rail);

    return bits != 0 && id >> bits == 0 && value >> bits == 0;
}

uint64_t ferry__notify_pack(const struct ferry__rail *rail, uint64_t id,
                            uint64_t value)
{
    return id << ferry__notify_data_bits(rail) | value;
}

/* ---- receiving ------------------------------------------------------------ */

static int queue_push(struct ferry__notify_queue *q,
                      const struct ferry_notification *n)
{
    if (q->count == q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 256;
        struct ferry_notification *items = malloc(cap * sizeof(*items));

        if (items == NULL)
            return FERRY_ENOMEM;
        /* Unroll the ring into the new array, oldest first. */
        for (size_t i = 0; i < q->count; i++)
            items[i] = q->items[(q->head + i) % q->cap];
        free(q->items);
        q->items = items;
        q->cap = cap;
        q->head = 0;
    }
    q->items[(q->head + q->count) % q->cap] = *n;
    q->count++;
    return 0;
}

static size_t slot_of(uint64_t id, size_t cap)
{
    /* Fibonacci hashing spreads sequential ids (the common case). */
    return (size_t)((id * 0x9e3779b97f4a7c15ull) >> 17) & (cap - 1);
}

static struct ferry__counter *counter_find(struct ferry__counters *c,
                                           uint64_t id, bool create)
{
    if (c->cap == 0 || (create && (c->used + 1) * 2 > c->cap)) {
        struct ferry__counters grown = {.cap = c->cap ? c->cap * 2 : 64};

        if (!create)
            return NULL;
        grown.slots = calloc(grown.cap, sizeof(*grown.slots));
        if (grown.slots == NULL)
            return NULL;
        for (size_t i = 0; i < c->cap; i++) {
            if (!c->slots[i].used)
                continue;
            size_t s = slot_of(c->slots[i].id, grown.cap);
            while (grown.slots[s].used)
                s = (s + 1) & (grown.cap - 1);
            grown.slots[s] = c->slots[i];
            grown.used++;
        }
        free(c->slots);
        *c = grown;
    }
    for (size_t s = slot_of(id, c->cap);; s = (s + 1) & (c->cap - 1)) {
        if (c->slots[s].used && c->slots[s].id == id)
            return &c->slots[s];
        if (!c->slots[s].used) {
            if (!create)
                return NULL;
            c->slots[s].used = true;
            c->slots[s].id = id;
            c->slots[s].sum = 0;
            c->used++;
            return &c->slots[s];
        }
    }
}

/*
 * Keeps n for ferry_notify_poll, up to config.notify_queue_max: a program
 * that only reads counters never polls, and its queue must not grow
 * forever.  Past the bound notifications are counted, not queued.
 */
static void queue(struct ferry_context *ctx, const struct ferry_notification *n)
{
    if (ctx->notifications.count >= ctx->cfg.notify_queue_max) {
        if (ctx->notifications_unqueued++ == 0)
            FERRY_LOG_WARN("the notification queue holds %zu entries nobody "
                           "polled: further notifications are only counted "
                           "(poll with ferry_notify_poll, or raise "
                           "config.notify_queue_max)",
                           ctx->notifications.count);
        return;
    }
    if (queue_push(&ctx->notifications, n) != 0)
        FERRY_LOG_WARN("out of memory: notification %llu not queued",
                       (unsigned long long)n->id);
}

/* Counts n on its counter and queues it for ferry_notify_poll. */
static void deliver(struct ferry_context *ctx,
                    const struct ferry_notification *n)
{
    struct ferry__counter *counter = counter_find(&ctx->counters, n->id, true);

    if (counter == NULL)
        FERRY_LOG_WARN("out of memory: notification %llu lost",
                       (unsigned long long)n->id);
    else
        counter->sum += n->value;
    queue(ctx, n);
    ctx->notifications_received++;
}

void ferry__notify_release_held(struct ferry_context *ctx)
{
    struct ferry__notify_queue *q = &ctx->held;

    for (; q->count > 0; q->count--) {
        deliver(ctx, &q->items[q->head]);
        q->head = (q->head + 1) % q->cap;
    }
}

/*
 * A notification whose data has landed: delivered now, or held while
 * copies of earlier writes to the device are still running (stage.c).
 */
static void accept(struct ferry_context *ctx,
                   const struct ferry_notification *n)
{
    ferry__hmem_flush_rdma(ctx);
    if (ferry__mirror_busy(ctx)) {
        if (queue_push(&ctx->held, n) != 0)
            FERRY_LOG_WARN("out of memory: notification %llu lost",
                           (unsigned long long)n->id);
    } else {
        ferry__notify_release_held(ctx);
        deliver(ctx, n);
    }
}

void ferry__notify_data_received(struct ferry_context *ctx,
                                 const struct ferry__rail *rail,
                                 uint64_t data)
{
    unsigned bits = ferry__notify_data_bits(rail);
    struct ferry_notification n = {
        .id = data >> bits,
        .value = data & ((UINT64_C(1) << bits) - 1),
    };

    accept(ctx, &n);
}

void ferry__notify_received(struct ferry_context *ctx,
                            struct ferry__rail *rail, struct ferry__recv *rv,
                            size_t len)
{
    struct ferry_notification n;
    uint64_t head = get64(rv->buf);
    uint32_t kind = (uint32_t)(head >> 32);
    int ret;

    if (len == 0) {
        /* a failed receive: nothing to deliver, only re-post */
    } else if (len == SYNC_WIRE_LEN && (uint32_t)head == NOTIFY_MAGIC &&
               kind == SYNC_KIND) {
        ferry__mirror_sync(ctx, get64(rv->buf + 8), get64(rv->buf + 16),
                           get64(rv->buf + 24));
    } else if (len != NOTIFY_WIRE_LEN || (uint32_t)head != NOTIFY_MAGIC ||
               kind != NOTIFY_KIND) {
        FERRY_LOG_WARN("dropping a %zu-byte message on domain %s that is not a "
                   "ferry notification",
                   len, rail->info->domain_attr->name);
    } else {
        n.id = get64(rv->buf + 8);
        n.value = get64(rv->buf + 16);
        accept(ctx, &n);
    }
    ret = post_recv(rail, rv);
    if (ret != 0)
        FERRY_LOG_WARN("re-posting a receive buffer on domain %s failed: %s",
                   rail->info->domain_attr->name, fi_strerror(-ret));
}

void ferry__notify_destroy(struct ferry_context *ctx)
{
    free(ctx->notifications.items);
    free(ctx->held.items);
    free(ctx->counters.slots);
    memset(&ctx->notifications, 0, sizeof(ctx->notifications));
    memset(&ctx->held, 0, sizeof(ctx->held));
    memset(&ctx->counters, 0, sizeof(ctx->counters));
}

/* ---- public calls ---------------------------------------------------------- */

int ferry_notify_poll(ferry_context_t *ctx, struct ferry_notification *out,
                      size_t max)
{
    struct ferry__notify_queue *q;
    size_t n = 0;
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_ctx(ctx, "ferry_notify_poll")))
        return ret;
    if (out == NULL && max > 0)
        return ferry__error(FERRY_EINVAL, "ferry_notify_poll: out is NULL");
    /* The count comes back as an int: never take more than it can say.
     * (It used to move up to max and return INT32_MAX, so a caller with
     * max > INT32_MAX lost every notification past the count.) */
    if (max > INT32_MAX)
        max = INT32_MAX;
    q = &ctx->notifications;
    pthread_mutex_lock(&ctx->lock);
    ret = ferry__progress_poll(ctx);
    while (n < max && q->count > 0) {
        out[n++] = q->items[q->head];
        q->head = (q->head + 1) % q->cap;
        q->count--;
    }
    pthread_mutex_unlock(&ctx->lock);
    if (ret < 0 && n == 0)
        return ret;
    return (int)n;
}

int ferry_counter_get(ferry_context_t *ctx, uint64_t id, uint64_t *value)
{
    struct ferry__counter *c;
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_ctx(ctx, "ferry_counter_get")))
        return ret;
    if (value == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_counter_get: value is NULL");
    pthread_mutex_lock(&ctx->lock);
    ret = ferry__progress_poll(ctx);
    c = counter_find(&ctx->counters, id, false);
    *value = c != NULL ? c->sum : 0;
    pthread_mutex_unlock(&ctx->lock);
    return ret < 0 ? ret : 0;
}

int ferry_counter_wait(ferry_context_t *ctx, uint64_t id, uint64_t expected,
                       int timeout_ms)
{
    uint64_t until = timeout_ms < 0
                         ? 0
                         : ferry__now_ns() + (uint64_t)timeout_ms * 1000000u;
    uint64_t value = 0;
    unsigned spins = 0;
    int ret;

    for (;;) {
        if ((ret = ferry_counter_get(ctx, id, &value)))
            return ret;
        if (value >= expected)
            return 0;
        /* The coarse clock lags the precise one the deadline was taken
         * from: the wait is never cut short, at most a tick long. */
        if (until != 0 && ferry__now_coarse_ns() >= until)
            return ferry__error(FERRY_ETIMEDOUT,
                                "counter %llu reached %llu of %llu within "
                                "%d ms: notifications are missing (a peer "
                                "failed or has not sent them yet)",
                                (unsigned long long)id,
                                (unsigned long long)value,
                                (unsigned long long)expected, timeout_ms);
        ferry__progress_pause(ctx, ++spins);
    }
}

int ferry_counter_reset(ferry_context_t *ctx, uint64_t id)
{
    struct ferry__counter *c;
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_ctx(ctx, "ferry_counter_reset")))
        return ret;
    pthread_mutex_lock(&ctx->lock);
    c = counter_find(&ctx->counters, id, false);
    if (c != NULL)
        c->sum = 0;
    pthread_mutex_unlock(&ctx->lock);
    return 0;
}
