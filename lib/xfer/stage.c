/*
 * Staging: device memory on a domain that cannot register it (no FI_HMEM)
 * moves through a pool of pinned, registered host buffers ("slots"), one
 * chunk per slot, copies and network transfers overlapping:
 *
 *   write  device --copy--> slot --fi_write--> peer
 *   read   peer --fi_read--> slot --copy--> device
 *
 * A slot stays with its request until the copy engine and the provider
 * are both done with it, whatever happens to the request meanwhile (an
 * error, a deadline, a cancel), so no buffer is reused while a copy or an
 * operation may still touch it.  Each busy slot counts as one operation in
 * flight of its request, so the request ends only after its last chunk.
 *
 * On the target side, a staged region exported for remote access is a
 * host mirror (reg/mem.c); ferry__mirror_sync queues the copy of what a peer
 * wrote into it to the device when the peer's sync message arrives
 * (notify.c), and notifications that arrive while such copies are queued
 * are held back until they are done (ferry__mirror_busy), so none is
 * delivered before the data it announces is on the device.
 *
 * Everything but ferry__stage_ensure runs with the lock held.
 */
#include "xfer/stage.h"

#include <stdlib.h>
#include <string.h>

#include <rdma/fi_errno.h>

#include "dev/hmem.h"

#define STAGE_MAX_DEVICES 32
/* Mirror copies queued at once on the target side; past it, blocking. */
#define MIRROR_SYNCS 16
/* How long context destruction waits for queued copies. */
#define STAGE_DRAIN_NS (10ull * 1000000000u)

enum slot_state {
    SLOT_FREE,
    SLOT_COPY_IN,  /* write: device -> slot copy queued */
    SLOT_READY,    /* write: copied, waiting for an operation slot */
    SLOT_RMA,      /* the fi_write or fi_read is with the provider */
    SLOT_COPY_OUT, /* read: slot -> device copy queued */
};

struct ferry__stage_slot {
    struct ferry__stage *stage;
    struct ferry__stage_slot *next_free;
    unsigned index;
    uint8_t *host; /* chunk bytes of the pinned buffer */
    enum slot_state state;
    struct ferry_req *req;
    uint8_t *dev; /* the device bytes of the chunk */
    int ordinal;
    size_t len;
    const struct ferry_rmem *rmem;
    uint64_t roff;
    unsigned rail;
};

struct ferry__stage_dev {
    struct ferry__hmem_stream *stream;
    struct ferry__hmem_event **events; /* one per slot */
};

/* A queued copy of a peer's write from a mirror to its device. */
struct mirror_copy {
    struct ferry_mem *mem; /* NULL: free; holds a user reference */
    struct ferry__hmem_event *event;
    int event_device; /* the device event was made for, or -1 */
};

struct ferry__stage {
    const struct ferry__hmem_ops *ops;
    uint8_t *host;         /* nslots x chunk bytes, pinned */
    struct ferry_mem *mem; /* its registration on every rail */
    size_t chunk, nslots;
    struct ferry__stage_slot *slots;
    struct ferry__stage_slot *free;
    size_t busy;
    struct ferry__stage_dev dev[STAGE_MAX_DEVICES];
    struct mirror_copy syncs[MIRROR_SYNCS];
    unsigned syncs_busy;
};

/* Serialises ferry__stage_ensure, which calls the backend and registers
 * memory, so it cannot hold the context lock; only registrations take it. */
static pthread_mutex_t ensure_lock = PTHREAD_MUTEX_INITIALIZER;

static int stage_create(ferry_context_t *ctx, struct ferry__stage **out)
{
    const struct ferry__fabric *fab = ferry__fabric_of(ctx);
    const struct ferry__hmem_ops *ops = ferry__hmem();
    struct ferry__stage *st = calloc(1, sizeof(*st));
    void *host = NULL;
    int ret;

    if (st == NULL ||
        (st->slots = calloc(fab->cfg.staging_buffers, sizeof(*st->slots))) ==
            NULL) {
        free(st);
        return ferry__error(FERRY_ENOMEM, "out of memory for staging");
    }
    st->ops = ops;
    /* A chunk is posted as one operation: never above the context's. */
    st->chunk = fab->cfg.staging_chunk < fab->max_msg ? fab->cfg.staging_chunk
                                                      : fab->max_msg;
    st->nslots = fab->cfg.staging_buffers;
    ret = ops->host_alloc(st->chunk * st->nslots, &host);
    if (ret == 0) {
        st->host = host;
        ret = ferry__mem_register(ctx, host, st->chunk * st->nslots, 0, false,
                                  &st->mem);
    }
    if (ret != 0) {
        if (host != NULL)
            ops->host_free(host);
        free(st->slots);
        free(st);
        return ret;
    }
    for (size_t i = 0; i < MIRROR_SYNCS; i++)
        st->syncs[i].event_device = -1;
    for (size_t i = st->nslots; i-- > 0;) {
        struct ferry__stage_slot *slot = &st->slots[i];

        slot->stage = st;
        slot->index = (unsigned)i;
        slot->host = st->host + i * st->chunk;
        slot->next_free = st->free;
        st->free = slot;
    }
    *out = st;
    return 0;
}

static void dev_destroy(const struct ferry__hmem_ops *ops,
                        struct ferry__stage_dev *dev, size_t nslots)
{
    for (size_t i = 0; dev->events != NULL && i < nslots; i++)
        if (dev->events[i] != NULL)
            ops->event_destroy(dev->events[i]);
    free(dev->events);
    if (dev->stream != NULL)
        ops->stream_destroy(dev->stream);
    memset(dev, 0, sizeof(*dev));
}

/* A stream and one event per slot on device `ordinal`. */
static int dev_create(const struct ferry__stage *st, int ordinal,
                      struct ferry__stage_dev *dev)
{
    const struct ferry__hmem_ops *ops = st->ops;
    int ret;

    dev->events = calloc(st->nslots, sizeof(*dev->events));
    if (dev->events == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory for staging");
    ret = ops->stream_create(ordinal, &dev->stream);
    for (size_t i = 0; i < st->nslots && ret == 0; i++)
        ret = ops->event_create(ordinal, &dev->events[i]);
    if (ret != 0)
        dev_destroy(ops, dev, st->nslots);
    return ret;
}

int ferry__stage_ensure(ferry_context_t *ctx, int ordinal)
{
    struct ferry__xfer *x = ferry__xfer_of(ctx);
    struct ferry__stage *st;
    int ret = 0;

    if (ordinal < 0 || ordinal >= STAGE_MAX_DEVICES)
        return ferry__error(FERRY_ENOTSUP,
                            "device %d: ferry stages memory of devices 0 to "
                            "%d only",
                            ordinal, STAGE_MAX_DEVICES - 1);
    pthread_mutex_lock(&ensure_lock);
    st = x->stage.stage;
    if (st == NULL && (ret = stage_create(ctx, &st)) == 0) {
        ferry__lock_acquire(&x->reg.fab.lock);
        x->stage.stage = st;
        ferry__lock_release(&x->reg.fab.lock);
    }
    if (ret == 0 && st->dev[ordinal].stream == NULL) {
        struct ferry__stage_dev dev = {0};

        ret = dev_create(st, ordinal, &dev);
        if (ret == 0) {
            ferry__lock_acquire(&x->reg.fab.lock);
            st->dev[ordinal] = dev;
            ferry__lock_release(&x->reg.fab.lock);
        }
    }
    pthread_mutex_unlock(&ensure_lock);
    return ret;
}

static struct ferry__hmem_event *slot_event(const struct ferry__stage_slot *s)
{
    return s->stage->dev[s->ordinal].events[s->index];
}

/*
 * Waits until the copy engine is done with every buffer: a context
 * destroyed with staged requests in flight frees the buffers next, and a
 * CUDA stream that is destroyed still runs what it was given.  Bounded:
 * a device that never finishes costs the buffers (left mapped), not a
 * hang.
 */
static bool stage_quiesce(struct ferry__stage *st)
{
    uint64_t until = ferry__now_ns() + STAGE_DRAIN_NS;
    bool busy = true;

    while (busy && ferry__now_ns() < until) {
        busy = false;
        for (size_t i = 0; i < st->nslots; i++) {
            const struct ferry__stage_slot *slot = &st->slots[i];

            if ((slot->state == SLOT_COPY_IN ||
                 slot->state == SLOT_COPY_OUT) &&
                st->ops->event_done(slot_event(slot)) == 0)
                busy = true;
        }
        for (size_t i = 0; i < MIRROR_SYNCS; i++)
            if (st->syncs[i].mem != NULL &&
                st->ops->event_done(st->syncs[i].event) == 0)
                busy = true;
    }
    return !busy;
}

void ferry__stage_destroy(struct ferry__xfer *x)
{
    struct ferry__stage *st = x->stage.stage;
    bool idle;

    if (st == NULL)
        return;
    /* Requests are gone (ferry__reqs_destroy); their slots may still have
     * copies queued. */
    idle = stage_quiesce(st);
    if (!idle)
        FERRY_LOG_WARN("the device did not finish its staging copies in %d "
                       "s; their buffers stay allocated",
                       (int)(STAGE_DRAIN_NS / 1000000000u));
    for (int d = 0; d < STAGE_MAX_DEVICES; d++)
        dev_destroy(st->ops, &st->dev[d], st->nslots);
    for (size_t i = 0; i < MIRROR_SYNCS; i++) {
        if (st->syncs[i].event != NULL)
            st->ops->event_destroy(st->syncs[i].event);
        if (st->syncs[i].mem != NULL)
            ferry__users_drop(&st->syncs[i].mem->users);
    }
    ferry__mem_close(st->mem);
    if (idle)
        st->ops->host_free(st->host);
    free(st->slots);
    free(st);
    x->stage.stage = NULL;
}

/* ---- the pipeline --------------------------------------------------------- */

/* The slot's work is over: it goes back to the pool. */
static void slot_release(struct ferry__stage_slot *slot)
{
    struct ferry__stage *st = slot->stage;

    slot->req->ops_in_flight--;
    slot->req = NULL;
    slot->state = SLOT_FREE;
    slot->next_free = st->free;
    st->free = slot;
    st->busy--;
}

static void slot_fail(struct ferry__stage_slot *slot, const char *what)
{
    ferry__req_end(slot->req, FERRY_EIO,
                   "staging a %zu-byte chunk of device %d memory: %s failed: "
                   "%s",
                   slot->len, slot->ordinal, what, ferry_last_error());
}

/* Posts the slot's fi_write or fi_read; false while the rail has no room. */
static bool slot_post_rma(struct ferry__stage_slot *slot)
{
    struct ferry_req *req = slot->req;
    struct ferry__rail *rail = &ferry__fabric_of(req->ctx)->rails[slot->rail];
    struct ferry__xfer *x = ferry__xfer_of(req->ctx);
    struct ferry__txq *tx = ferry__txq_of(x, rail);
    struct ferry__op *op = ferry__op_slot(x, req->peer, rail);
    enum ferry__pulse_verdict v = ferry__rmem_verdict(slot->rmem);
    ssize_t ret;

    /* Nothing goes to a region or a context the pulse says is gone
     * (xfer.c says why): the first ends the request, the second waits
     * for liveness to declare the peer. */
    if (op == NULL || v == FERRY__PULSE_CONTEXT_GONE)
        return false;
    if (v == FERRY__PULSE_REGION_GONE) {
        ferry__req_end(req, FERRY_ESTALE, "a staged %s of %zu bytes: %s",
                       req->kind == FERRY__OP_WRITE ? "write" : "read",
                       slot->len, ferry__rmem_gone_why());
        slot_release(slot);
        return true;
    }
    ret = ferry__rma_post(req, op, slot->host,
                          slot->stage->mem->desc[rail->index], slot->rmem,
                          slot->roff, slot->len, false, FERRY__RMA_WAITS, 0);
    if (ret == -FI_EAGAIN) {
        ferry__op_pushed_back(x, req->peer, rail);
        return false;
    }
    if (ret != 0) {
        ferry__req_end(req, ferry__error_from_fi((int)ret),
                       "posting a staged %s of %zu bytes on domain %s "
                       "failed: %s",
                       req->kind == FERRY__OP_WRITE ? "write" : "read",
                       slot->len, rail->info->domain_attr->name,
                       fi_strerror((int)-ret));
        slot_release(slot);
        return true;
    }
    ferry__op_take(tx, op, req, req->peer, req->kind, slot->len);
    tx->bytes_posted += slot->len;
    ferry__traffic_posted(req, rail, slot->len);
    op->slot = slot;
    slot->state = SLOT_RMA;
    return true;
}

ssize_t ferry__stage_post(struct ferry_req *req, const struct ferry_iov *item)
{
    struct ferry__xfer *x = ferry__xfer_of(req->ctx);
    struct ferry__stage *st = x->stage.stage;
    struct ferry__stage_slot *slot = st->free;
    size_t len = item->len - req->cur_off;

    FERRY__ASSERT_LOCKED(&x->reg.fab.lock);
    if (slot == NULL)
        return 0;
    if (len > st->chunk)
        len = st->chunk;
    st->free = slot->next_free;
    st->busy++;
    req->ops_in_flight++;
    slot->req = req;
    slot->dev = (uint8_t *)item->local + req->cur_off;
    slot->ordinal = item->lmem->device;
    slot->len = len;
    slot->rmem = item->rmem;
    slot->roff = item->roffset + req->cur_off;
    slot->rail = ferry__peer_rail(req->peer, req->rail)->index;
    if (req->kind == FERRY__OP_READ) {
        slot->state = SLOT_READY;
        if (!slot_post_rma(slot)) {
            slot_release(slot); /* no room on the rail: later */
            return 0;
        }
        if (slot->state == SLOT_FREE)
            return -1; /* posting failed: the request has ended */
    } else {
        slot->state = SLOT_COPY_IN;
        if (st->ops->copy_async(st->dev[slot->ordinal].stream, slot->host,
                                slot->dev, len, slot_event(slot)) != 0) {
            slot_fail(slot, "the copy to host");
            slot_release(slot);
            return -1;
        }
    }
    x->stage.chunks++;
    x->stage.bytes += len;
    if (st->busy > x->stage.max_in_flight)
        x->stage.max_in_flight = st->busy;
    return (ssize_t)len;
}

void ferry__stage_rma_done(struct ferry__op *op, int err)
{
    struct ferry__stage_slot *slot = op->slot;
    struct ferry_req *req = slot->req;
    int ret;

    op->slot = NULL;
    if (err != 0 || req->status != FERRY_EINPROGRESS ||
        req->kind == FERRY__OP_WRITE) {
        slot_release(slot);
        return;
    }
    ret = slot->stage->ops->copy_async(
        slot->stage->dev[slot->ordinal].stream, slot->dev, slot->host,
        slot->len, slot_event(slot));
    if (ret != 0) {
        slot_fail(slot, "the copy to the device");
        slot_release(slot);
        return;
    }
    slot->state = SLOT_COPY_OUT;
}

/* Moves one busy slot on if its copy finished. */
static void slot_advance(struct ferry__stage_slot *slot)
{
    int done = 1;

    if (slot->state == SLOT_COPY_IN || slot->state == SLOT_COPY_OUT)
        done = slot->stage->ops->event_done(slot_event(slot));
    if (done == 0)
        return;
    if (done < 0) {
        slot_fail(slot, slot->state == SLOT_COPY_IN ? "the copy to host"
                                                    : "the copy to the device");
        slot_release(slot);
        return;
    }
    if (slot->state == SLOT_COPY_OUT ||
        slot->req->status != FERRY_EINPROGRESS) {
        slot_release(slot);
        return;
    }
    slot->state = SLOT_READY;
    slot_post_rma(slot);
}

/* ---- target side ------------------------------------------------------------ */

/* Retires finished mirror copies; true while some are still queued. */
static bool syncs_poll(struct ferry__stage *st)
{
    for (size_t i = 0; i < MIRROR_SYNCS && st->syncs_busy > 0; i++) {
        struct mirror_copy *c = &st->syncs[i];
        int done;

        if (c->mem == NULL || (done = st->ops->event_done(c->event)) == 0)
            continue;
        if (done < 0)
            FERRY_LOG_WARN("copying a peer's write into staged region %llu "
                           "to device %d failed: %s",
                           (unsigned long long)c->mem->mirror_id,
                           c->mem->device, ferry_last_error());
        ferry__users_drop(&c->mem->users);
        c->mem = NULL;
        st->syncs_busy--;
    }
    return st->syncs_busy > 0;
}

bool ferry__mirror_busy(struct ferry__xfer *x)
{
    return x->stage.stage != NULL && x->stage.stage->syncs_busy > 0 &&
           syncs_poll(x->stage.stage);
}

/* A free copy slot with an event of device d, or NULL. */
static struct mirror_copy *sync_slot(struct ferry__stage *st, int d)
{
    for (size_t i = 0; i < MIRROR_SYNCS; i++) {
        struct mirror_copy *c = &st->syncs[i];

        if (c->mem != NULL)
            continue;
        if (c->event_device != d) {
            if (c->event != NULL)
                st->ops->event_destroy(c->event);
            c->event = NULL;
            c->event_device = -1;
            if (st->ops->event_create(d, &c->event) != 0)
                return NULL;
            c->event_device = d;
        }
        return c;
    }
    return NULL;
}

/* Queues the copy; a blocking one when no copy slot is free. */
static int mirror_copy(struct ferry__stage *st, struct ferry__lock *lock,
                       struct ferry_mem *mem, uint64_t off, uint64_t len)
{
    struct mirror_copy *c;
    int ret;

    if (st->syncs_busy == MIRROR_SYNCS)
        syncs_poll(st);
    c = sync_slot(st, mem->device);
    if (c == NULL)
        return st->ops->copy(mem->addr + off, mem->mirror + off, len);
    ret = st->ops->copy_async(st->dev[mem->device].stream, mem->addr + off,
                              mem->mirror + off, len, c->event);
    if (ret != 0)
        return ret;
    /* The region cannot be deregistered while its copy is queued. */
    ferry__users_take(&mem->users, lock);
    c->mem = mem;
    st->syncs_busy++;
    return 0;
}

void ferry__mirror_sync(struct ferry__xfer *x, uint64_t mirror_id,
                        uint64_t off, uint64_t len)
{
    struct ferry_mem *mem = x->reg.mem.list;
    int ret;

    FERRY__ASSERT_LOCKED(&x->reg.fab.lock);
    while (mem != NULL && (mem->mirror == NULL || mem->mirror_id != mirror_id))
        mem = mem->next;
    if (mem == NULL || off > mem->len || len > mem->len - off) {
        FERRY_LOG_WARN("a peer wrote [%llu, +%llu) of staged region %llu, "
                       "which %s: the data does not reach the device",
                       (unsigned long long)off, (unsigned long long)len,
                       (unsigned long long)mirror_id,
                       mem == NULL ? "is not registered here (any more)"
                                   : "is out of its bounds");
        return;
    }
    /* A staged region was registered, so the stage and its stream exist. */
    ret = mirror_copy(x->stage.stage, &x->reg.fab.lock, mem, off, len);
    if (ret != 0)
        FERRY_LOG_WARN("copying a peer's write into staged region %llu to "
                       "device %d failed: %s",
                       (unsigned long long)mirror_id, mem->device,
                       ferry_last_error());
    x->stage.mirror_syncs++;
}

/* ---- both sides --------------------------------------------------------------- */

bool ferry__stage_progress(struct ferry__xfer *x)
{
    struct ferry__stage *st = x->stage.stage;

    FERRY__ASSERT_LOCKED(&x->reg.fab.lock);
    if (st == NULL)
        return false;
    if (st->syncs_busy > 0)
        syncs_poll(st);
    for (size_t i = 0; st->busy > 0 && i < st->nslots; i++) {
        struct ferry__stage_slot *slot = &st->slots[i];

        if (slot->state != SLOT_FREE && slot->state != SLOT_RMA)
            slot_advance(slot);
    }
    return st->syncs_busy == 0;
}
