/*
 * A context's counters: as a struct (ferry_context_stats), and as
 * Prometheus' text exposition format (0.0.4: ferry_metrics_text).
 *
 * The counters are kept where the work happens, always on (a few
 * additions under the lock a request or operation already holds):
 * per peer its traffic (reg/traffic.h), per context the requests'
 * histograms (xfer/hist.h), the fan-outs' tallies (fan/part.h) and the
 * statistics of ferry_context_stats.  This file copies them out under the
 * lock, then writes the text with the lock released, so a scrape costs
 * the transfers only the copy.
 *
 * Names follow Prometheus' conventions: a ferry_ prefix, base units
 * (bytes, seconds), _total on counters.  Labels: peer (its log label,
 * "HOST at ADDRESS"; "(closed)" sums the peers closed so far, so no
 * counter goes back), rail and domain, op (write, read, notify), outcome
 * (ok, or the error's name in snake case: timeout, peer_dead, canceled,
 * connection_reset...).
 */
#include "fabric/fabric.h"
#include "fan/part.h"
#include "progress/part.h"
#include "reg/peer.h"
#include "reg/rcache.h"
#include "xfer/op.h"
#include "xfer/part.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the counters as a struct ----------------------------------------- */

int ferry_context_stats(ferry_context_t *ctx, struct ferry_stats *stats)
{
    struct ferry__xfer *x = ferry__xfer_of(ctx);
    struct ferry__rc_stats rc;
    struct ferry_stats out;
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_ctx(ctx, "ferry_context_stats")))
        return ret;
    if (stats == NULL || stats->size == 0)
        return ferry__error(FERRY_EINVAL,
                            "ferry_context_stats: stats is NULL or "
                            "stats->size is 0 (use FERRY_STATS_INIT)");
    memset(&out, 0, sizeof(out));
    ferry__rcache_stats(x->reg.rcache, &rc);
    out.rcache_hits = rc.hits;
    out.rcache_misses = rc.misses;
    out.rcache_invalidations = rc.invalidations;
    out.rcache_evictions = rc.evictions;
    out.rcache_entries = rc.entries;
    out.rcache_bytes = rc.bytes;
    ferry__lock_acquire(&x->reg.fab.lock);
    out.oneshot_registrations = x->req.oneshot_registrations;
    out.notifications_received = x->notify.received;
    out.notifications_unqueued = x->notify.unqueued;
    for (unsigned i = 0;
         i < x->reg.fab.nrails && i < FERRY__ARRAY_LEN(out.bytes_posted);
         i++) {
        out.bytes_posted[i] = x->req.tx[i].bytes_posted;
        out.rma_ops_posted[i] = x->req.tx[i].rma_ops_posted;
    }
    out.staged_bytes = x->stage.bytes;
    out.staged_chunks = x->stage.chunks;
    out.staged_max_in_flight = x->stage.max_in_flight;
    out.mirror_syncs = x->stage.mirror_syncs;
    out.notifications_in_writes = x->req.notifications_in_writes;
    out.heartbeats = x->live.heartbeats;
    out.peers_declared = x->live.peers_declared;
    out.ops_interrupted = x->live.interrupted;
    out.ops_posted_again = x->live.reposted;
    ferry__lock_release(&x->reg.fab.lock);
    /* Only as much as the caller's struct holds. */
    ferry__hand_back(stats, &out, sizeof(out));
    return 0;
}

/* ---- output that counts what it could not hold ----------------------- */

struct out {
    char *buf;
    size_t cap;  /* bytes of buf */
    size_t used; /* bytes the whole text needs so far, NUL excluded */
};

static void emit(struct out *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void emit(struct out *o, const char *fmt, ...)
{
    size_t room = o->used < o->cap ? o->cap - o->used : 0;
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(room > 0 ? o->buf + o->used : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0)
        o->used += (size_t)n;
}

/* A label value with \, " and newlines escaped, as the format wants. */
static void emit_value(struct out *o, const char *v)
{
    for (; *v != '\0'; v++) {
        if (*v == '\\' || *v == '"')
            emit(o, "\\%c", *v);
        else if (*v == '\n')
            emit(o, "\\n");
        else
            emit(o, "%c", *v);
    }
}

static void family(struct out *o, const char *name, const char *type,
                   const char *help)
{
    emit(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* ---- names ------------------------------------------------------------ */

static const char *const kind_name[FERRY__REQ_KINDS] = {"write", "read",
                                                        "notify"};
static const char *const dir_name[FERRY__DIRS] = {"write", "read"};
static const char *const state_name[FERRY__PEER_STATES] = {
    "connecting", "up", "unreachable", "dead"};

/* Outcome k in snake case: ok, then each code's kind (Timeout: timeout,
 * PeerDead: peer_dead), then other. */
static void outcome_name(unsigned k, char *buf, size_t len)
{
    static const char *const kinds[] = {
#define FERRY__ERRNO_KIND(name, value, kind, text) #kind,
        FERRY_ERRNO_MAP(FERRY__ERRNO_KIND)
#undef FERRY__ERRNO_KIND
    };
    const char *s = k == 0                      ? "ok"
                    : k < FERRY__OUTCOMES - 1 ? kinds[k - 1]
                                                : "other";
    size_t n = 0;

    for (; *s != '\0' && n + 2 < len; s++) {
        if (*s >= 'A' && *s <= 'Z') {
            if (n > 0)
                buf[n++] = '_';
            buf[n++] = (char)(*s - 'A' + 'a');
        } else {
            buf[n++] = *s;
        }
    }
    buf[n] = '\0';
}

/* ---- the snapshot taken under the lock -------------------------------- */

struct peer_snap {
    char label[sizeof(((struct ferry_peer *)0)->label)];
    unsigned rail0, nrails;
    enum ferry_peer_state state;
    unsigned running; /* its requests taken and not yet retired */
    struct ferry__traffic traffic;
};

struct snap {
    struct peer_snap *peers; /* the live ones, then "(closed)" */
    size_t npeers;
    struct ferry__req_hist hist[FERRY__REQ_KINDS];
    uint64_t notifications_in_writes;
    uint64_t fan_started, fan_ended[FERRY__OUTCOMES], fan_reached,
        fan_missed;
};

static int by_label(const void *a, const void *b)
{
    return strcmp(((const struct peer_snap *)a)->label,
                  ((const struct peer_snap *)b)->label);
}

/*
 * Two handles of one address (ferry_peer_add twice) are one peer to the
 * reader, and one series each would be a duplicate Prometheus refuses:
 * they are summed, up if either is.  The live peers sorted by label,
 * then each run of one label folded into its first; "(closed)" stays
 * last.
 */
static void merge_same_peers(struct snap *s)
{
    size_t live = s->npeers - 1, kept = 0;

    qsort(s->peers, live, sizeof(*s->peers), by_label);
    for (size_t i = 0; i < live; i++) {
        struct peer_snap *p = &s->peers[i];

        if (kept > 0 && strcmp(s->peers[kept - 1].label, p->label) == 0) {
            struct peer_snap *into = &s->peers[kept - 1];

            ferry__traffic_add(&into->traffic, &p->traffic);
            into->running += p->running;
            if (p->state == FERRY_PEER_UP)
                into->state = FERRY_PEER_UP;
            continue;
        }
        if (kept != i)
            s->peers[kept] = *p;
        kept++;
    }
    s->peers[kept++] = s->peers[live];
    s->npeers = kept;
}

static int take_snapshot(ferry_context_t *ctx, struct snap *s)
{
    struct ferry__xfer *x = ferry__xfer_of(ctx);
    struct ferry__lock *lock = &x->reg.fab.lock;
    size_t n = 0, cap;

    memset(s, 0, sizeof(*s));
    /* Counted under the lock, filled under it again: peers added between
     * the two are left for the next scrape. */
    ferry__lock_acquire(lock);
    for (struct ferry_peer *p = x->reg.peers; p != NULL; p = p->next)
        n++;
    ferry__lock_release(lock);
    cap = n + 1;
    s->peers = calloc(cap, sizeof(*s->peers));
    if (s->peers == NULL)
        return ferry__error(FERRY_ENOMEM, "ferry_metrics_text: out of "
                            "memory for %zu peers",
                            n);
    ferry__lock_acquire(lock);
    for (struct ferry_peer *p = x->reg.peers; p != NULL && s->npeers + 1 < cap;
         p = p->next) {
        struct peer_snap *ps = &s->peers[s->npeers++];

        memcpy(ps->label, p->label, sizeof(ps->label));
        ps->rail0 = p->rail0;
        ps->nrails = p->nrails;
        ps->state = p->live.state;
        ps->running = p->live.running;
        ps->traffic = p->traffic;
    }
    snprintf(s->peers[s->npeers].label, sizeof(s->peers[0].label),
             "(closed)");
    s->peers[s->npeers].nrails = x->reg.fab.nrails;
    s->peers[s->npeers].state = FERRY_PEER_DEAD;
    s->peers[s->npeers++].traffic = x->reg.closed_peers;
    memcpy(s->hist, x->req.hist, sizeof(s->hist));
    s->notifications_in_writes = x->req.notifications_in_writes;
    ferry__lock_release(lock);
    merge_same_peers(s);
    if (ctx->fan != NULL) {
        pthread_mutex_lock(&ctx->fan->run);
        s->fan_started = ctx->fan->started;
        memcpy(s->fan_ended, ctx->fan->outcomes, sizeof(s->fan_ended));
        s->fan_reached = ctx->fan->reached;
        s->fan_missed = ctx->fan->missed;
        pthread_mutex_unlock(&ctx->fan->run);
    }
    return 0;
}

/* ---- the families ------------------------------------------------------ */

static void emit_peer_label(struct out *o, const struct peer_snap *p)
{
    emit(o, "peer=\"");
    emit_value(o, p->label);
    emit(o, "\"");
}

/* ferry_bytes_total or ferry_operations_total, per peer, rail and op. */
static void emit_traffic(struct out *o, ferry_context_t *ctx,
                         const struct snap *s, bool bytes)
{
    const struct ferry__fabric *fab = ferry__fabric_of(ctx);
    const char *name = bytes ? "ferry_bytes_total" : "ferry_operations_total";

    family(o, name, "counter",
           bytes ? "Bytes handed to the provider in writes and reads."
                 : "Writes and reads handed to the provider (a run of "
                   "contiguous blocks is one).");
    for (size_t i = 0; i < s->npeers; i++) {
        const struct peer_snap *p = &s->peers[i];
        bool closed = i + 1 == s->npeers;

        for (unsigned r = p->rail0; r < p->rail0 + p->nrails; r++) {
            for (unsigned d = 0; d < FERRY__DIRS; d++) {
                uint64_t v = bytes ? p->traffic.bytes[r][d]
                                   : p->traffic.ops[r][d];

                if (closed && v == 0)
                    continue;
                emit(o, "%s{", name);
                emit_peer_label(o, p);
                emit(o, ",rail=\"%u\",domain=\"", r);
                emit_value(o, fab->rails[r].info->domain_attr->name);
                emit(o, "\",op=\"%s\"} %" PRIu64 "\n", dir_name[d], v);
            }
        }
    }
}

static void emit_requests(struct out *o, const struct snap *s)
{
    family(o, "ferry_requests_total", "counter",
           "Requests ended, by kind and outcome (ok, or the error).");
    for (size_t i = 0; i < s->npeers; i++) {
        const struct peer_snap *p = &s->peers[i];

        for (unsigned k = 0; k < FERRY__REQ_KINDS; k++) {
            for (unsigned out = 0; out < FERRY__OUTCOMES; out++) {
                uint64_t v = p->traffic.ended[k][out];
                char outcome[40];

                /* ok always, so that a rate has its series from the
                 * start; the errors once they happen. */
                if (v == 0 && (out != 0 || i + 1 == s->npeers))
                    continue;
                outcome_name(out, outcome, sizeof(outcome));
                emit(o, "ferry_requests_total{");
                emit_peer_label(o, p);
                emit(o, ",op=\"%s\",outcome=\"%s\"} %" PRIu64 "\n",
                     kind_name[k], outcome, v);
            }
        }
    }
    family(o, "ferry_requests_in_flight", "gauge",
           "Requests taken and not yet ended.");
    for (size_t i = 0; i + 1 < s->npeers; i++) {
        emit(o, "ferry_requests_in_flight{");
        emit_peer_label(o, &s->peers[i]);
        emit(o, "} %u\n", s->peers[i].running);
    }
}

/* One histogram of every request kind: bucket bounds in the family's
 * unit, from the table in base units. */
static void emit_histogram(struct out *o, const struct snap *s,
                           const char *name, const char *help, bool duration)
{
    const uint64_t *bounds =
        duration ? ferry__duration_bounds_ns : ferry__size_bounds;
    size_t nb = duration ? FERRY__DURATION_BUCKETS : FERRY__SIZE_BUCKETS;

    family(o, name, "histogram", help);
    for (unsigned k = 0; k < FERRY__REQ_KINDS; k++) {
        const struct ferry__req_hist *h = &s->hist[k];
        const uint64_t *counts = duration ? h->duration : h->size;
        uint64_t cumulative = 0;

        for (size_t b = 0; b < nb; b++) {
            cumulative += counts[b];
            /* Seconds as %g ("1e-05", exact for these bounds), bytes as
             * integers (%g would round 1048576 to 1.04858e+06). */
            if (duration)
                emit(o, "%s_bucket{op=\"%s\",le=\"%g\"} %" PRIu64 "\n",
                     name, kind_name[k], (double)bounds[b] * 1e-9,
                     cumulative);
            else
                emit(o, "%s_bucket{op=\"%s\",le=\"%" PRIu64 "\"} %" PRIu64
                        "\n",
                     name, kind_name[k], bounds[b], cumulative);
        }
        cumulative += counts[nb];
        emit(o, "%s_bucket{op=\"%s\",le=\"+Inf\"} %" PRIu64 "\n", name,
             kind_name[k], cumulative);
        emit(o, "%s_sum{op=\"%s\"} %.9g\n", name, kind_name[k],
             duration ? (double)h->duration_ns * 1e-9 : (double)h->bytes);
        emit(o, "%s_count{op=\"%s\"} %" PRIu64 "\n", name, kind_name[k],
             cumulative);
    }
}

static void emit_peers(struct out *o, const struct snap *s)
{
    family(o, "ferry_peer_up", "gauge",
           "1 while the peer answers, 0 while connecting, unreachable or "
           "dead.");
    for (size_t i = 0; i + 1 < s->npeers; i++) {
        emit(o, "ferry_peer_up{");
        emit_peer_label(o, &s->peers[i]);
        emit(o, "} %d\n", s->peers[i].state == FERRY_PEER_UP);
    }
    family(o, "ferry_peer_state_changes_total", "counter",
           "Times the peer's liveness moved into each state.");
    for (size_t i = 0; i < s->npeers; i++) {
        for (unsigned st = FERRY_PEER_UP; st < FERRY__PEER_STATES; st++) {
            uint64_t v = s->peers[i].traffic.became[st];

            if (v == 0 && i + 1 == s->npeers)
                continue;
            emit(o, "ferry_peer_state_changes_total{");
            emit_peer_label(o, &s->peers[i]);
            emit(o, ",state=\"%s\"} %" PRIu64 "\n", state_name[st], v);
        }
    }
}

/* How many requests a histogram counted. */
static uint64_t hist_count(const struct ferry__req_hist *h)
{
    uint64_t n = 0;

    for (size_t b = 0; b <= FERRY__DURATION_BUCKETS; b++)
        n += h->duration[b];
    return n;
}

/* A family of one sample without labels. */
static void scalar(struct out *o, const char *name, const char *type,
                   const char *help, uint64_t v)
{
    family(o, name, type, help);
    emit(o, "%s %" PRIu64 "\n", name, v);
}

/* The counters of ferry_context_stats that are one sample each. */
#define STAT(field, name, type, help)                                         \
    {name, type, help, offsetof(struct ferry_stats, field)}
static const struct {
    const char *name, *type, *help;
    size_t field; /* of struct ferry_stats: a uint64_t */
} stat_families[] = {
    STAT(rcache_hits, "ferry_registration_cache_hits_total", "counter",
         "Lookups of the registration cache that found the region."),
    STAT(rcache_misses, "ferry_registration_cache_misses_total", "counter",
         "Lookups of the registration cache that registered anew."),
    STAT(rcache_evictions, "ferry_registration_cache_evictions_total",
         "counter", "Entries the cache evicted for room."),
    STAT(rcache_invalidations, "ferry_registration_cache_invalidations_total",
         "counter",
         "Entries invalidated because their memory was freed or remapped."),
    STAT(rcache_entries, "ferry_registration_cache_entries", "gauge",
         "Registrations the cache holds now."),
    STAT(rcache_bytes, "ferry_registration_cache_bytes", "gauge",
         "Bytes the cache's registrations cover now."),
    STAT(oneshot_registrations, "ferry_oneshot_registrations_total",
         "counter", "Registrations made for one request, not cached."),
    STAT(staged_bytes, "ferry_staged_bytes_total", "counter",
         "Device memory copied through host staging buffers."),
    STAT(staged_chunks, "ferry_staged_chunks_total", "counter",
         "Staging copies (chunks)."),
    STAT(mirror_syncs, "ferry_mirror_syncs_total", "counter",
         "Host mirrors of device memory copied to the device."),
    STAT(notifications_received, "ferry_notifications_received_total",
         "counter", "Notifications received."),
    STAT(notifications_unqueued, "ferry_notifications_dropped_total",
         "counter",
         "Notifications counted but not queued: the queue was full."),
    STAT(heartbeats, "ferry_heartbeats_total", "counter",
         "Liveness heartbeats sent."),
    STAT(peers_declared, "ferry_peers_declared_total", "counter",
         "Peers declared dead or unreachable."),
    STAT(ops_interrupted, "ferry_operations_interrupted_total", "counter",
         "Operations a dropped connection flushed."),
    STAT(ops_posted_again, "ferry_operations_posted_again_total", "counter",
         "Interrupted operations posted again once their peer answered."),
};
#undef STAT

static void emit_stats(struct out *o, const struct ferry_stats *st,
                       const struct snap *s)
{
    for (size_t i = 0; i < FERRY__ARRAY_LEN(stat_families); i++) {
        uint64_t v;

        memcpy(&v, (const char *)st + stat_families[i].field, sizeof(v));
        scalar(o, stat_families[i].name, stat_families[i].type,
               stat_families[i].help, v);
    }
    family(o, "ferry_notifications_sent_total", "counter",
           "Notifications sent: as messages, or as a write's remote CQ "
           "data.");
    emit(o, "ferry_notifications_sent_total{how=\"message\"} %" PRIu64 "\n",
         hist_count(&s->hist[FERRY__OP_SEND]));
    emit(o, "ferry_notifications_sent_total{how=\"write_data\"} %" PRIu64
            "\n",
         s->notifications_in_writes);
}

static void emit_fanouts(struct out *o, const struct snap *s)
{
    uint64_t ended = 0;

    scalar(o, "ferry_fanouts_started_total", "counter",
           "Fan-outs this context started (ferry_fanout).", s->fan_started);
    family(o, "ferry_fanouts_total", "counter",
           "Fan-outs this context started that ended, by outcome.");
    for (unsigned k = 0; k < FERRY__OUTCOMES; k++) {
        char outcome[40];

        ended += s->fan_ended[k];
        if (s->fan_ended[k] == 0 && k != 0)
            continue;
        outcome_name(k, outcome, sizeof(outcome));
        emit(o, "ferry_fanouts_total{outcome=\"%s\"} %" PRIu64 "\n", outcome,
             s->fan_ended[k]);
    }
    scalar(o, "ferry_fanouts_in_flight", "gauge",
           "Fan-outs started and not yet ended.", s->fan_started - ended);
    family(o, "ferry_fanout_receivers_total", "counter",
           "Receivers of the ended fan-outs: those that got everything, "
           "and those that did not.");
    emit(o, "ferry_fanout_receivers_total{outcome=\"reached\"} %" PRIu64
            "\n",
         s->fan_reached);
    emit(o, "ferry_fanout_receivers_total{outcome=\"missed\"} %" PRIu64
            "\n",
         s->fan_missed);
}

static void emit_info(struct out *o, ferry_context_t *ctx)
{
    const struct fi_info *fi = ferry__fabric_of(ctx)->rails[0].info;

    family(o, "ferry_info", "gauge",
           "The context: its provider, fabric and domain (rail 0), and "
           "ferry's version.");
    emit(o, "ferry_info{provider=\"");
    emit_value(o, fi->fabric_attr->prov_name);
    emit(o, "\",fabric=\"");
    emit_value(o, fi->fabric_attr->name);
    emit(o, "\",domain=\"");
    emit_value(o, fi->domain_attr->name);
    emit(o, "\",version=\"%s\"} 1\n", PACKAGE_VERSION);
}

int ferry_metrics_text(ferry_context_t *ctx, char *buf, size_t len,
                       size_t *need)
{
    struct ferry_stats st = FERRY_STATS_INIT;
    struct out o = {buf, len, 0};
    struct snap s;
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_ctx(ctx, "ferry_metrics_text")))
        return ret;
    if (buf == NULL && len > 0)
        return ferry__error(FERRY_EINVAL, "ferry_metrics_text: buf is NULL "
                            "but len is %zu",
                            len);
    if ((ret = ferry_context_stats(ctx, &st)) != 0 ||
        (ret = take_snapshot(ctx, &s)) != 0)
        return ret;
    emit_info(&o, ctx);
    emit_traffic(&o, ctx, &s, true);
    emit_traffic(&o, ctx, &s, false);
    emit_requests(&o, &s);
    emit_histogram(&o, &s, "ferry_request_duration_seconds",
                   "Time from taking a request to its end.", true);
    emit_histogram(&o, &s, "ferry_request_size_bytes",
                   "Bytes a request moves.", false);
    emit_peers(&o, &s);
    emit_stats(&o, &st, &s);
    emit_fanouts(&o, &s);
    free(s.peers);
    if (need != NULL)
        *need = o.used + 1;
    if (o.used >= len)
        return ferry__error(FERRY_ENOSPC, "ferry_metrics_text: the text "
                            "needs %zu bytes, the buffer has %zu; call "
                            "again with *need bytes",
                            o.used + 1, len);
    return 0;
}
