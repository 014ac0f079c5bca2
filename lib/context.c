/*
 * The context, the composition root: its configuration adopted, then
 * each layer's part opened in order (the rails, the heartbeat word, the
 * transfer layer's operation slots and receive buffers on them, the
 * device path, the registration cache, the progress thread) and closed in
 * reverse, and the calls that report on all of it.
 */
#include <stdlib.h>
#include <string.h>

#include "fabric/config.h"
#include "fabric/pulse.h"
#include "fabric/rails.h"
#include "fan/fan.h"
#include "progress/part.h"
#include "progress/progress.h"
#include "reg/mem.h"
#include "reg/monitor.h"
#include "reg/peer.h"
#include "reg/rcache.h"
#include "xfer/live.h"
#include "xfer/notify.h"
#include "xfer/stage.h"
#include "xfer/xfer.h"

#include "telemetry.h"

/*
 * The contexts of this process, so that one being destroyed can tell the
 * others first (ferry__live_sibling_closing).  Its lock is taken before
 * any context's, never the other way round.
 */
static pthread_mutex_t siblings_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ferry_context *siblings;

static void siblings_join(struct ferry_context *ctx)
{
    pthread_mutex_lock(&siblings_lock);
    ctx->next_in_process = siblings;
    siblings = ctx;
    pthread_mutex_unlock(&siblings_lock);
}

/* Leaves the list, and tells every other context of this process that
 * ctx is going while its endpoints are still open. */
static void siblings_leave(struct ferry_context *ctx)
{
    struct ferry__fabric *fab = ferry__fabric_of(ctx);
    uint64_t incarnation =
        fab->pulse.words != NULL
            ? atomic_load(&fab->pulse.words[FERRY__PULSE_INCARNATION])
            : 0;

    pthread_mutex_lock(&siblings_lock);
    for (struct ferry_context **p = &siblings; *p != NULL;
         p = &(*p)->next_in_process) {
        if (*p == ctx) {
            *p = ctx->next_in_process;
            break;
        }
    }
    for (struct ferry_context *o = siblings; o != NULL && incarnation != 0;
         o = o->next_in_process) {
        struct ferry__lock *lock = &ferry__fabric_of(o)->lock;

        ferry__lock_acquire(lock);
        ferry__live_sibling_closing(ferry__xfer_of(o), incarnation);
        ferry__lock_release(lock);
    }
    pthread_mutex_unlock(&siblings_lock);
}

/* The transfer layer's operation slots and receive buffers per rail.
 * Under the lock: registering the receive buffers takes it. */
static int xfer_open(struct ferry__xfer *x)
{
    int ret = 0;

    ferry__lock_acquire(&x->reg.fab.lock);
    ferry__peer_ring_init(&x->req.blocked_peers);
    for (unsigned i = 0; i < x->reg.fab.nrails && ret == 0; i++) {
        ret = ferry__txq_open(x, &x->reg.fab.rails[i]);
        if (ret == 0)
            ret = ferry__notify_rail_open(x, &x->reg.fab.rails[i]);
    }
    ferry__lock_release(&x->reg.fab.lock);
    return ret;
}

static void xfer_close(struct ferry__xfer *x)
{
    for (unsigned i = 0; i < x->reg.fab.nrails; i++) {
        ferry__notify_rail_close(x, &x->reg.fab.rails[i]);
        ferry__txq_close(x, &x->reg.fab.rails[i]);
    }
}

static void context_free(ferry_context_t *ctx);

int ferry_context_create(const struct ferry_config *cfg,
                         ferry_context_t **out)
{
    struct ferry__selection sel;
    struct ferry_context *ctx;
    struct ferry__fabric *fab;
    struct ferry__reg *reg;
    char rails_why[384];
    int ret;

    ferry__error_clear();
    if (out == NULL)
        return ferry__error(FERRY_EINVAL,
                            "ferry_context_create: out pointer is NULL");
    ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory for a context");
    reg = ferry__reg_of(ctx);
    fab = &reg->fab;
    ferry__lock_init(&fab->lock);
    ferry__owned_init(&fab->owned);
    pthread_cond_init(&ctx->progress.progressed, NULL);
    pthread_cond_init(&ctx->progress.handed_back, NULL);
    ret = ferry__fan_init(ctx);
    if (ret == 0)
        ret = ferry__config_adopt(fab, cfg);
    if (ret == 0)
        ret = ferry__provider_select(&fab->cfg, &sel);
    if (ret != 0) {
        ferry__fan_destroy(ctx);
        pthread_cond_destroy(&ctx->progress.progressed);
        pthread_cond_destroy(&ctx->progress.handed_back);
        ferry__owned_fini(&fab->owned);
        ferry__lock_destroy(&fab->lock);
        free(ctx);
        return ret;
    }
    ferry__rails_order(&fab->cfg, &sel, rails_why, sizeof(rails_why),
                       ctx->progress.cpus, sizeof(ctx->progress.cpus));
    fab->magic = FERRY__MAGIC_CTX;
    ret = ferry__fabric_open(fab, &sel, rails_why);
    ferry__selection_free(&sel);
    if (ret == 0) {
        ferry__lock_acquire(&fab->lock);
        ferry__pulse_open(fab);
        ferry__lock_release(&fab->lock);
        ret = xfer_open(ferry__xfer_of(ctx));
    }
    if (ret == 0) {
        ferry__dev_path_init(fab, &reg->mem.dev_path, reg->mem.dev_why,
                             sizeof(reg->mem.dev_why));
        reg->mem.prepare_staging = ferry__stage_ensure;
    }
    if (ret == 0 && fab->cfg.registration_cache)
        ret = ferry__rcache_create(ctx, fab->cfg.rcache_max_entries,
                                   fab->cfg.rcache_max_bytes, &reg->rcache);
    if (ret == 0 && fab->cfg.progress_thread)
        ret = ferry__progress_thread_start(ctx);
    if (ret != 0) {
        context_free(ctx);
        return ret;
    }
    ret = ferry__telemetry_start(ctx, fab->cfg.telemetry_dir,
                                 fab->cfg.telemetry_interval_ms);
    if (ret != 0) {
        context_free(ctx);
        return ret;
    }
    FERRY_LOG_INFO("%s", fab->why);
    siblings_join(ctx);
    *out = ctx;
    return 0;
}

/* Closes the context and everything made from it (ferry(7): ownership). */
static void context_free(ferry_context_t *ctx)
{
    struct ferry__fabric *fab = ferry__fabric_of(ctx);

    /* Telemetry first: its thread reads the metrics of every part. */
    ferry__telemetry_stop(ctx);
    siblings_leave(ctx);
    /* Metadata handles next: their threads use the context too. */
    ferry__owned_release(&fab->owned, FERRY__OWN_FIRST);
    ferry__progress_thread_stop(ctx);
    ferry__progress_fd_close(ctx);
    /* Endpoints next: closing them ends every operation still in flight,
     * after which requests and registrations can go. */
    ferry__fabric_close_endpoints(fab);
    ferry__reqs_destroy(ferry__xfer_of(ctx));
    /* Fan-out nodes give back the regions and peers they hold. */
    ferry__fan_destroy(ctx);
    /* Prepared transfers and lists give back theirs. */
    ferry__owned_release(&fab->owned, FERRY__OWN_AFTER_REQUESTS);
    ferry__stage_destroy(ferry__xfer_of(ctx));
    /* Registrations and remote regions before peers: a remote region
     * points at its peer (rmem_release reads rmem->peer->ctx and drops
     * peer->rmem_count), so freeing peers first was a use after free when
     * regions were still held at destruction. */
    ferry__rcache_destroy(ctx->xfer.reg.rcache);
    ferry__mems_destroy(ferry__reg_of(ctx));
    ferry__peers_destroy(ferry__reg_of(ctx));
    ferry__notify_destroy(ferry__xfer_of(ctx));
    xfer_close(ferry__xfer_of(ctx));
    ferry__pulse_close(fab);
    ferry__fabric_close(fab);
    fab->magic = FERRY__MAGIC_DEAD;
    pthread_cond_destroy(&ctx->progress.progressed);
    pthread_cond_destroy(&ctx->progress.handed_back);
    ferry__owned_fini(&fab->owned);
    ferry__lock_destroy(&fab->lock);
    free(ctx);
}

int ferry_context_close(ferry_context_t *ctx)
{
    int ret;

    ferry__error_clear();
    if (ctx == NULL)
        return 0;
    if ((ret = ferry__check_ctx(ctx, "ferry_context_close")))
        return ret;
    context_free(ctx);
    return 0;
}

int ferry_context_info(ferry_context_t *ctx, struct ferry_context_info *info)
{
    const struct ferry__fabric *fab = ferry__fabric_of(ctx);
    const struct fi_info *fi;
    struct ferry_context_info out;
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_ctx(ctx, "ferry_context_info")))
        return ret;
    if (info == NULL || info->size == 0)
        return ferry__error(FERRY_EINVAL,
                            "ferry_context_info: info is NULL or info->size "
                            "is 0 (use FERRY_CONTEXT_INFO_INIT)");
    fi = fab->rails[0].info;
    memset(&out, 0, sizeof(out));
    out.provider = fi->fabric_attr->prov_name;
    out.fabric = fi->fabric_attr->name;
    out.domain = fi->domain_attr->name;
    out.nrails = fab->nrails;
    out.mr_mode = fab->mr_mode;
    out.mr_key_size = fab->key_size;
    out.max_msg_size = fab->max_msg;
    out.tx_depth = fab->tx_depth;
    out.rx_depth = fi->rx_attr->size;
    out.hmem = (fi->caps & FI_HMEM) != 0;
    out.fi_version = fi_version();
    out.why = fab->why;
    out.rcache_monitor_running =
        ctx->xfer.reg.rcache != NULL && ferry__monitor_running();
    out.rcache_monitor = ctx->xfer.reg.rcache == NULL
                             ? "none: the registration cache is off"
                         : out.rcache_monitor_running
                             ? "userfaultfd (unmap, remove and remap events) "
                               "and ferry_mem_invalidate() calls"
                             : ferry__monitor_status();
    out.device_path = ctx->xfer.reg.mem.dev_why;
    out.local_provider =
        fab->ntransports > 1
            ? fab->rails[fab->transports[1].first].info->fabric_attr->prov_name
            : NULL;
    out.local_why = fab->local_why;
    out.notify_in_write_bits = ferry__notify_data_bits(&fab->rails[0]);
    for (unsigned i = 1; i < fab->nrails; i++) {
        unsigned bits = ferry__notify_data_bits(&fab->rails[i]);

        if (bits < out.notify_in_write_bits)
            out.notify_in_write_bits = bits;
    }
    /* Only as much as the caller's struct holds. */
    ferry__hand_back(info, &out, sizeof(out));
    return 0;
}
