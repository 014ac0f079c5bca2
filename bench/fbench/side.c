/*
 * ferry_bench: one side of a session: its context, its registered buffer, and
 * the mailbox of control notifications exchanged with the peer.
 */
#include "side.h"

#include "fbench.h"
#include "options.h"
#include "pattern.h"
#include "util.h"
#include "base/yield.h"

#include <ferry.h>

#include <stdlib.h>
#include <string.h>

int open_context(const struct options *o, bool progress_thread,
                 struct side *s)
{
    struct ferry_config cfg;
    int ret;

    if ((ret = ferry_config_init(&cfg)))
        return fail("ferry_config_init (check the FERRY_* variables)", ret);
    if (o->provider != NULL)
        cfg.provider = o->provider;
    if (o->domain != NULL)
        cfg.domain = o->domain;
    if (o->rails != 0)
        cfg.max_rails = o->rails;
    cfg.tx_depth = (size_t)o->tx_depth;
    cfg.max_msg_size = (size_t)o->max_op;
    cfg.local_only = o->mode == MODE_LOOPBACK;
    cfg.progress_thread = progress_thread;
    cfg.timeout_ms = o->timeout_ms;
    if ((ret = ferry_context_create(&cfg, &s->ctx)))
        return fail("ferry_context_create", ret);
    s->progress_thread = progress_thread;
    s->timeout_ms = o->timeout_ms;
    s->cuda = o->cuda;
    s->device = o->cuda_device;
    s->info = (struct ferry_context_info)FERRY_CONTEXT_INFO_INIT;
    if ((ret = ferry_context_info(s->ctx, &s->info)))
        return fail("ferry_context_info", ret);
    return 0;
}

int side_fill(struct side *s, enum pattern p)
{
    int ret;

    if (!s->cuda) {
        pattern_fill(s->buf, 0, s->len, p);
        return 0;
    }
    pattern_fill(s->shadow, 0, s->len, p);
    if ((ret = ferry_device_copy(s->buf, s->shadow, s->len)))
        return fail("copying the pattern to the device", ret);
    return 0;
}

uint8_t *side_view(struct side *s)
{
    int ret;

    if (!s->cuda)
        return s->buf;
    if ((ret = ferry_device_copy(s->shadow, s->buf, s->len))) {
        fail("copying the device buffer back to check it", ret);
        return NULL;
    }
    return s->shadow;
}

/* Allocates, fills (which also faults every page in) and registers. */
int setup_buffer(struct side *s, uint64_t len, enum pattern p,
                 unsigned access)
{
    char b[32];
    uint64_t t0;
    int ret;

    if (len > SIZE_MAX)
        return complain("cannot allocate the %s buffer",
                        fmt_iec(b, sizeof(b), len));
    if (s->cuda) {
        if ((ret = ferry_device_alloc((int)s->device, len,
                                      (void **)&s->buf)))
            return fail("--mem cuda: ferry_device_alloc of the buffer (no "
                        "GPU? FERRY_SIM_DEVICES=1 measures on ferry's "
                        "simulated device)",
                        ret);
        if (posix_memalign((void **)&s->shadow, 4096, len) != 0)
            return complain("cannot allocate the %s host shadow of the "
                            "device buffer",
                            fmt_iec(b, sizeof(b), len));
    } else if (posix_memalign((void **)&s->buf, 4096, len) != 0) {
        return complain("cannot allocate the %s buffer",
                        fmt_iec(b, sizeof(b), len));
    }
    s->len = len;
    if (side_fill(s, p))
        return 1;
    t0 = now_ns();
    ret = ferry_mem_register(s->ctx, s->buf, len,
                             s->cuda ? FERRY_MEM_CUDA : FERRY_MEM_HOST,
                             s->cuda ? (int)s->device : -1, access, &s->mem);
    s->reg_ns = now_ns() - t0;
    if (ret != 0)
        return fail("ferry_mem_register of the buffer", ret);
    return 0;
}

void side_close(struct side *s)
{
    int ret;

    /* After a failure, requests freed with operations still in flight keep
     * the region busy: ferry_context_close closes it with the rest. */
    if (s->mem != NULL && (ret = ferry_mem_close(s->mem)) != 0 &&
        ret != FERRY_EBUSY)
        fail("ferry_mem_close", ret);
    ferry_context_close(s->ctx);
    if (s->cuda)
        ferry_device_free(s->buf);
    else
        free(s->buf);
    free(s->shadow);
    memset(s, 0, sizeof(*s));
}

/* Notifications taken from ferry per call. */
#define MBOX_BATCH 64

/* Files got notifications into the mailbox. */
static int mbox_file(struct mbox *mb, const struct ferry_notification *n,
                     int got)
{
    for (int i = 0; i < got; i++) {
        switch (n[i].id) {
        case ID_DATA: mb->data += n[i].value; break;
        case ID_PING: mb->ping += n[i].value; break;
        case ID_PONG: mb->pong += n[i].value; break;
        default:
            if (mb->nctl == MBOX_CAP)
                return complain("protocol error: more than %d control "
                                "messages pending (is the peer another "
                                "version of ferry_bench?)",
                                MBOX_CAP);
            mb->ctl[mb->nctl++] = n[i];
        }
    }
    return 0;
}

/* Moves every queued notification into the mailbox. */
int mbox_pump(struct side *s)
{
    struct ferry_notification n[MBOX_BATCH];
    int got;

    do {
        got = ferry_notify_poll(s->ctx, n, MBOX_BATCH);
        if (got < 0)
            return fail("ferry_notify_poll", got);
        if (mbox_file(&s->mb, n, got))
            return 1;
    } while (got == MBOX_BATCH);
    return 0;
}

int mbox_poll_until(struct side *s, uint64_t until)
{
    while (now_ns() < until)
        if (mbox_pump(s))
            return 1;
    return 0;
}

/*
 * With a progress thread: sleeps until notifications arrive or wait_ms
 * passes, and files them.  A sleep in slices would wake this thread
 * thousands of times a second, each wake taking a CPU from the stream on
 * a small machine.
 */
static int mbox_sleep(struct side *s, int wait_ms)
{
    struct ferry_notification n[MBOX_BATCH];
    int got = ferry_notify_wait(s->ctx, n, MBOX_BATCH, wait_ms);

    if (got == FERRY_EAGAIN)
        return 0;
    if (got < 0)
        return fail("ferry_notify_wait", got);
    return mbox_file(&s->mb, n, got);
}

/* Takes the oldest pending control message with one of ids[]. */
static bool mbox_take(struct mbox *mb, const uint64_t *ids, size_t nids,
                      struct ferry_notification *out)
{
    for (size_t i = 0; i < mb->nctl; i++)
        for (size_t k = 0; k < nids; k++)
            if (mb->ctl[i].id == ids[k]) {
                *out = mb->ctl[i];
                memmove(&mb->ctl[i], &mb->ctl[i + 1],
                        (mb->nctl - i - 1) * sizeof(mb->ctl[0]));
                mb->nctl--;
                return true;
            }
    return false;
}

/* The peer, and where it is published. */
static ferry_meta_t *g_probe_meta;
static const char *g_probe_name;
static ferry_peer_t *g_probe_peer;

void set_probe(ferry_meta_t *meta, const char *name, ferry_peer_t *peer)
{
    g_probe_meta = meta;
    g_probe_name = name;
    g_probe_peer = peer;
}

/*
 * Whether the peer is gone (it stopped or failed): its name is no longer
 * published, or under another address (it came back), or the service no
 * longer answers.  On the bootstrap the hub answers from its own state
 * and drops a member's entries as soon as its connection does; a member
 * asks the hub, and that fails once the hub is gone.  A peer_watch would
 * notice as well, but its heartbeats would wake a target at rest, which
 * --idle measures.
 */
bool peer_gone(void)
{
    ferry_peer_t *p;

    if (g_probe_meta == NULL)
        return false;
    return ferry_meta_peer(g_probe_meta, g_probe_name, 0, &p) != 0 ||
           p != g_probe_peer;
}

/*
 * Waits until deadline for a control message with one of ids[].  Busy
 * polls (the pump drives progress) unless a progress thread does that;
 * dozing, sleeps outside ferry between two looks instead.
 */
static int wait_for(struct side *s, const uint64_t *ids, size_t nids,
                    uint64_t deadline, const char *what, bool doze,
                    struct ferry_notification *out)
{
    uint64_t next_probe = now_ns() + PROBE_NS;
    unsigned spins = 0;
    struct ferry__yield yield = {0};

    for (;;) {
        if (mbox_pump(s))
            return 1;
        if (mbox_take(&s->mb, ids, nids, out))
            return 0;
        uint64_t t = now_ns();
        if (t >= deadline)
            return complain("no %s from the peer in time: it failed, "
                            "stopped, or its side is slower than the time "
                            "bound allows",
                            what);
        if (t >= next_probe) {
            if (peer_gone())
                return complain("the peer left (it stopped or failed; its "
                                "own message says why) while this side "
                                "waited for %s",
                                what);
            next_probe = t + PROBE_NS;
        }
        uint64_t until = next_probe < deadline ? next_probe : deadline;
        if (doze)
            sleep_ns(until - t);
        else if (s->progress_thread) {
            if (mbox_sleep(s, (int)((until - t) / 1000000u) + 1))
                return 1;
        } else if (++spins % 16 == 0)
            ferry__yield(&yield);
    }
}

int mbox_wait(struct side *s, const uint64_t *ids, size_t nids,
              uint64_t deadline, const char *what,
              struct ferry_notification *out)
{
    return wait_for(s, ids, nids, deadline, what, false, out);
}

static int wait1(struct side *s, uint64_t id, uint64_t deadline,
                 const char *what, bool doze, uint64_t *value)
{
    struct ferry_notification n;

    if (wait_for(s, &id, 1, deadline, what, doze, &n))
        return 1;
    *value = n.value;
    return 0;
}

int mbox_wait1(struct side *s, uint64_t id, uint64_t deadline,
               const char *what, uint64_t *value)
{
    return wait1(s, id, deadline, what, false, value);
}

int mbox_doze1(struct side *s, uint64_t id, uint64_t deadline,
               const char *what, uint64_t *value)
{
    return wait1(s, id, deadline, what, true, value);
}

/*
 * Sends {id, value} and waits until it is delivered: at most the
 * request's deadline, less when the peer is seen to be gone (a provider
 * may not fail a send to a peer that vanished before the connection under
 * it was accepted).
 */
int send_ctl(struct side *s, ferry_peer_t *peer, uint64_t id,
             uint64_t value)
{
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    ferry_req_t *req;
    int ret;

    opts.timeout_ms = s->timeout_ms;
    if ((ret = ferry_notify_send(peer, id, value, &opts, &req)))
        return fail("ferry_notify_send", ret);
    while ((ret = ferry_req_wait(req, 100)) == FERRY_EAGAIN) {
        if (peer_gone()) {
            ferry_req_close(req);
            return complain("the peer left (it stopped or failed; its own "
                            "message says why) while this side sent it a "
                            "control message");
        }
    }
    ferry_req_close(req);
    if (ret != 0)
        return fail("sending a control notification to the peer", ret);
    return 0;
}
