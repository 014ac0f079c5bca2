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
 * progress.c; arrival order) and adds each value to a per-id counter
 * (ferry_counter_get/wait), so "all 512 blocks of sequence 7 have landed"
 * is a counter reaching 512 whatever order they came in.
 *
 * Writes into a peer's host mirror of device memory (a staged region,
 * stage.c) are followed by one sync message per range written, sent
 * after the range's writes completed and before the notification; the
 * target copies the range to its device when the message arrives.  Both
 * travel on the peer's first rail and the target reads that rail's
 * completion queue in order, so the copy is done before the notification
 * is delivered.
 *
 * A notification whose request ends with one write (or whose writes the
 * provider places in order) rides on that write instead, as its remote CQ
 * data (xfer.c, notify_rides): the target's completion of the write is
 * generated after its data is placed, so the order holds with one
 * operation instead of two.  The data word holds the id in its upper half
 * and the value in its lower half; {id, value} that do not fit go as a
 * message.
 *
 * A request that fails before its notification went sends an abort
 * instead {id, value, the ferry error it ended with}: the target marks
 * the counter so that its waiters end (FERRY_EABORTED) and queues a
 * FERRY_NOTIFICATION_ABORT.  A heartbeat (live.c) reads the peer's
 * pulse word (fabric/pulse.h) into the operation's message buffer, which
 * is therefore registered for local reads as well as sends.
 *
 * Wire format, little-endian, FERRY__MSG_SIZE bytes at most:
 *   u32 magic "FRYN" | u32 kind 1 (notify) | u64 id | u64 value
 *   u32 magic "FRYN" | u32 kind 2 (mirror sync) | u64 mirror id |
 *       u64 offset | u64 length
 *   u32 magic "FRYN" | u32 kind 4 (abort) | u64 id | u64 value |
 *       u64 error (as a two's complement int)
 */
#include "xfer/notify.h"

#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "dev/hmem.h"
#include "xfer/stage.h"

#define NOTIFY_MAGIC 0x4e595246u /* "FRYN" */
#define NOTIFY_KIND 1u
#define NOTIFY_WIRE_LEN 24u
#define SYNC_KIND 2u
#define SYNC_WIRE_LEN 32u
#define ABORT_KIND 4u
#define ABORT_WIRE_LEN 32u

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

static int register_area(struct ferry__xfer *x, struct ferry__rail *rail,
                         void *addr, size_t len, uint64_t access,
                         struct fid_mr **mr)
{
    struct iovec iov = {.iov_base = addr, .iov_len = len};
    struct fi_mr_attr attr = {.mr_iov = &iov,
                              .iov_count = 1,
                              .access = access,
                              .iface = FI_HMEM_SYSTEM};

    return ferry__mr_open(&x->reg.fab, rail, &attr, 0, mr);
}

static int post_recv(struct ferry__rail *rail, const struct ferry__rxq *rx,
                     struct ferry__recv *rv)
{
    void *desc = rx->recv_mr ? fi_mr_desc(rx->recv_mr) : NULL;
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

int ferry__notify_rail_open(struct ferry__xfer *x, struct ferry__rail *rail)
{
    struct ferry__rxq *rx = &x->notify.rx[rail->index];
    struct ferry__txq *tx = ferry__txq_of(x, rail);
    int ret;

    rx->recvs = calloc(FERRY__RECV_DEPTH, sizeof(*rx->recvs));
    if (rx->recvs == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory for receives");
    if (x->reg.fab.register_local) {
        ret = register_area(x, rail, rx->recvs,
                            FERRY__RECV_DEPTH * sizeof(*rx->recvs), FI_RECV,
                            &rx->recv_mr);
        if (ret == 0)
            ret = register_area(x, rail, tx->ops,
                                ferry__rail_ops_max(&x->reg.fab) *
                                    sizeof(*tx->ops),
                                FI_SEND | FI_READ, &rx->send_mr);
        if (ret != 0)
            return ret;
    }
    for (unsigned i = 0; i < FERRY__RECV_DEPTH; i++) {
        ret = post_recv(rail, rx, &rx->recvs[i]);
        if (ret != 0)
            return ferry__error(ferry__error_from_fi(ret),
                                "posting receive buffers on domain %s failed: "
                                "%s",
                                rail->info->domain_attr->name,
                                fi_strerror(-ret));
    }
    return 0;
}

void ferry__notify_rail_close(struct ferry__xfer *x,
                              const struct ferry__rail *rail)
{
    struct ferry__rxq *rx = &x->notify.rx[rail->index];

    if (rx->recv_mr)
        fi_close(&rx->recv_mr->fid);
    if (rx->send_mr)
        fi_close(&rx->send_mr->fid);
    free(rx->recvs);
    memset(rx, 0, sizeof(*rx));
}

/* ---- sending -------------------------------------------------------------- */

/* The descriptor of the rail's operation slots' message buffers (NULL
 * where they need no registration). */
static void *msg_desc(struct ferry_context *ctx,
                      const struct ferry__rail *rail)
{
    const struct ferry__rxq *rx =
        &ferry__xfer_of(ctx)->notify.rx[rail->index];

    return rx->send_mr ? fi_mr_desc(rx->send_mr) : NULL;
}

static ssize_t send_msg(const struct ferry_req *req, struct ferry__rail *rail,
                        struct ferry__op *op, uint32_t kind,
                        const uint64_t *fields, size_t nfields)
{
    put64(op->msg, (uint64_t)NOTIFY_MAGIC | (uint64_t)kind << 32);
    for (size_t i = 0; i < nfields; i++)
        put64(op->msg + 8 + 8 * i, fields[i]);
    return fi_send(rail->ep, op->msg, 8 + 8 * nfields,
                   msg_desc(req->ctx, rail), req->peer->fi_addr[rail->index],
                   &op->fi_ctx);
}

ssize_t ferry__notify_send(struct ferry_req *req, struct ferry__rail *rail,
                           struct ferry__op *op)
{
    const uint64_t f[] = {req->notify_id, req->notify_value};

    return send_msg(req, rail, op, NOTIFY_KIND, f, FERRY__ARRAY_LEN(f));
}

ssize_t ferry__abort_send(struct ferry_req *req, struct ferry__rail *rail,
                          struct ferry__op *op)
{
    const uint64_t f[] = {req->notify_id, req->notify_value,
                          (uint64_t)(int64_t)req->status};

    return send_msg(req, rail, op, ABORT_KIND, f, FERRY__ARRAY_LEN(f));
}

/* Reads the peer's pulse word at addr into op's message buffer. */
static ssize_t read_word(struct ferry_peer *peer, struct ferry__rail *rail,
                         struct ferry__op *op, uint64_t addr)
{
    return fi_read(rail->ep, op->msg, sizeof(uint64_t),
                   msg_desc(peer->ctx, rail), peer->fi_addr[rail->index],
                   addr, peer->pulse.key, &op->fi_ctx);
}

ssize_t ferry__ping_post(struct ferry_peer *peer, struct ferry__rail *rail,
                         struct ferry__op *op)
{
    return read_word(peer, rail, op, peer->pulse.addr);
}

ssize_t ferry__check_post(struct ferry_peer *peer, struct ferry__rail *rail,
                          struct ferry__op *op, uint32_t slot)
{
    return read_word(peer, rail, op,
                     ferry__pulse_slot_addr(&peer->pulse, slot));
}

uint64_t ferry__ping_answer(const struct ferry__op *op)
{
    return get64(op->msg);
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
            c->slots[s].aborted = 0;
            c->used++;
            return &c->slots[s];
        }
    }
}

/*
 * Relaxed: the count only tells a poller whether taking the lock is worth
 * it; the queue itself is read under the lock, whose acquire makes the
 * items visible.  A poller that reads a stale zero finds the notification
 * at its next call.
 */
static void publish_count(struct ferry__xfer *x)
{
    atomic_store_explicit(&x->notify.queued, x->notify.queue.count,
                          memory_order_relaxed);
}

bool ferry__notify_queued(struct ferry__xfer *x)
{
    return atomic_load_explicit(&x->notify.queued, memory_order_relaxed) != 0;
}

/*
 * Keeps n for ferry_notify_poll, up to config.notify_queue_max: a program
 * that only reads counters never polls, and its queue must not grow
 * forever.  Past the bound notifications are counted, not queued.
 */
static void queue(struct ferry__xfer *x, const struct ferry_notification *n)
{
    if (x->notify.queue.count >= x->reg.fab.cfg.notify_queue_max) {
        if (x->notify.unqueued++ == 0)
            FERRY_LOG_WARN("the notification queue holds %zu entries nobody "
                           "polled: further notifications are only counted "
                           "(poll with ferry_notify_poll, or raise "
                           "config.notify_queue_max)",
                           x->notify.queue.count);
        return;
    }
    if (queue_push(&x->notify.queue, n) != 0)
        FERRY_LOG_WARN("out of memory: notification %llu not queued",
                       (unsigned long long)n->id);
    publish_count(x);
    if (x->notify.on_queued != NULL)
        x->notify.on_queued(x);
}

static void accept(struct ferry__xfer *x,
                   const struct ferry_notification *n);

/* Counts n on its counter and queues it for ferry_notify_poll; hands
 * ferry's own to the fan-out. */
static void deliver(struct ferry__xfer *x,
                    const struct ferry_notification *n)
{
    struct ferry__counter *counter;

    if (n->id >= FERRY_NOTIFY_ID_RESERVED) {
        if (x->notify.fan_sink != NULL)
            x->notify.fan_sink(x, n->id, n->value);
        return;
    }
    counter = counter_find(&x->notify.counters, n->id, true);
    if (counter == NULL)
        FERRY_LOG_WARN("out of memory: notification %llu lost",
                       (unsigned long long)n->id);
    else
        counter->sum += n->value;
    /* Counted before it is queued: on_queued tells the event descriptor
     * by this count (progress.c). */
    x->notify.received++;
    queue(x, n);
}

void ferry__notify_local(struct ferry__xfer *x, uint64_t id, uint64_t value)
{
    struct ferry_notification n = {.id = id, .value = value};

    FERRY__ASSERT_LOCKED(&x->reg.fab.lock);
    accept(x, &n);
}

void ferry__notify_event(struct ferry__xfer *x,
                         const struct ferry_notification *n)
{
    FERRY__ASSERT_LOCKED(&x->reg.fab.lock);
    queue(x, n);
}

/* A sender gave up a request that was to add to id: waits on it end. */
static void aborted(struct ferry__xfer *x, uint64_t id, uint64_t value,
                    int64_t status)
{
    struct ferry_notification n = {
        .id = id, .value = value, .kind = FERRY_NOTIFICATION_ABORT};
    struct ferry__counter *c = counter_find(&x->notify.counters, id, true);

    if (c == NULL)
        FERRY_LOG_WARN("out of memory: the abort of counter %llu is lost",
                       (unsigned long long)id);
    else
        c->aborted = status < 0 && status > INT_MIN ? (int)status
                                                    : FERRY_ECANCELED;
    queue(x, &n);
}

void ferry__notify_release_held(struct ferry__xfer *x)
{
    struct ferry__notify_queue *q = &x->notify.held;

    FERRY__ASSERT_LOCKED(&x->reg.fab.lock);
    for (; q->count > 0; q->count--) {
        deliver(x, &q->items[q->head]);
        q->head = (q->head + 1) % q->cap;
    }
}

/*
 * A notification whose data has landed: delivered now, or held while
 * copies of earlier writes to the device are still running (stage.c).
 */
static void accept(struct ferry__xfer *x,
                   const struct ferry_notification *n)
{
    ferry__hmem_flush_rdma(atomic_load_explicit(
        &x->reg.mem.hmem_exposed_devices, memory_order_relaxed));
    if (ferry__mirror_busy(x)) {
        if (queue_push(&x->notify.held, n) != 0)
            FERRY_LOG_WARN("out of memory: notification %llu lost",
                           (unsigned long long)n->id);
    } else {
        ferry__notify_release_held(x);
        deliver(x, n);
    }
}

void ferry__notify_data_received(struct ferry__xfer *x,
                                 const struct ferry__rail *rail,
                                 uint64_t data)
{
    unsigned bits = ferry__notify_data_bits(rail);
    struct ferry_notification n = {
        .id = data >> bits,
        .value = data & ((UINT64_C(1) << bits) - 1),
    };

    FERRY__ASSERT_LOCKED(&x->reg.fab.lock);
    accept(x, &n);
}

void ferry__notify_received(struct ferry__xfer *x, struct ferry__rail *rail,
                            struct ferry__recv *rv, size_t len)
{
    /* Zeroed: kind DATA, no peer (only id and value come on the wire). */
    struct ferry_notification n = {.kind = FERRY_NOTIFICATION_DATA};
    uint64_t head = get64(rv->buf);
    uint32_t kind = (uint32_t)(head >> 32);
    int ret;

    FERRY__ASSERT_LOCKED(&x->reg.fab.lock);
    if (len == 0) {
        /* a failed receive: nothing to deliver, only re-post */
    } else if (len == SYNC_WIRE_LEN && (uint32_t)head == NOTIFY_MAGIC &&
               kind == SYNC_KIND) {
        ferry__mirror_sync(x, get64(rv->buf + 8), get64(rv->buf + 16),
                           get64(rv->buf + 24));
    } else if (len == ABORT_WIRE_LEN && (uint32_t)head == NOTIFY_MAGIC &&
               kind == ABORT_KIND) {
        aborted(x, get64(rv->buf + 8), get64(rv->buf + 16),
                (int64_t)get64(rv->buf + 24));
    } else if (len != NOTIFY_WIRE_LEN || (uint32_t)head != NOTIFY_MAGIC ||
               kind != NOTIFY_KIND) {
        FERRY_LOG_WARN("dropping a %zu-byte message on domain %s that is "
                       "not a ferry notification",
                       len, rail->info->domain_attr->name);
    } else {
        n.id = get64(rv->buf + 8);
        n.value = get64(rv->buf + 16);
        accept(x, &n);
    }
    ret = post_recv(rail, &x->notify.rx[rail->index], rv);
    if (ret != 0)
        FERRY_LOG_WARN("re-posting a receive buffer on domain %s failed: %s",
                       rail->info->domain_attr->name, fi_strerror(-ret));
}

void ferry__notify_destroy(struct ferry__xfer *x)
{
    free(x->notify.queue.items);
    free(x->notify.held.items);
    free(x->notify.counters.slots);
    memset(&x->notify.queue, 0, sizeof(x->notify.queue));
    memset(&x->notify.held, 0, sizeof(x->notify.held));
    memset(&x->notify.counters, 0, sizeof(x->notify.counters));
}

/* ---- reading what arrived ------------------------------------------------ */

size_t ferry__notify_take(struct ferry__xfer *x,
                          struct ferry_notification *out, size_t max)
{
    struct ferry__notify_queue *q = &x->notify.queue;
    size_t n = 0;

    FERRY__ASSERT_LOCKED(&x->reg.fab.lock);
    while (n < max && q->count > 0) {
        out[n++] = q->items[q->head];
        q->head = (q->head + 1) % q->cap;
        q->count--;
    }
    publish_count(x);
    return n;
}

uint64_t ferry__counter_sum(struct ferry__xfer *x, uint64_t id,
                           int *aborted)
{
    struct ferry__counter *c = counter_find(&x->notify.counters, id, false);

    FERRY__ASSERT_LOCKED(&x->reg.fab.lock);
    *aborted = c != NULL ? c->aborted : 0;
    return c != NULL ? c->sum : 0;
}

int ferry_counter_reset(ferry_context_t *ctx, uint64_t id)
{
    struct ferry__xfer *x = ferry__xfer_of(ctx);
    struct ferry__counter *c;
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_ctx(ctx, "ferry_counter_reset")))
        return ret;
    ferry__lock_acquire(&x->reg.fab.lock);
    c = counter_find(&x->notify.counters, id, false);
    if (c != NULL) {
        c->sum = 0;
        c->aborted = 0;
    }
    ferry__lock_release(&x->reg.fab.lock);
    return 0;
}
