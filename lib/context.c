/*
 * The context: configuration, the chosen provider, and one rail (fabric,
 * domain, address vector, completion queue, endpoint) per domain used.
 */
#include "ferry-internal.h"
#include "rcache.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_TIMEOUT_MS 60000
#define DEFAULT_RCACHE_ENTRIES 16384
#define DEFAULT_RCACHE_BYTES (64ull << 30)
#define DEFAULT_STRIPE_THRESHOLD (128u << 10)
#define DEFAULT_NOTIFY_QUEUE (1u << 20)
#define DEFAULT_STAGING_BUFFERS 8
#define DEFAULT_STAGING_CHUNK (1u << 20)
#define MAX_STAGING_BUFFERS 256


/*
 * Reads a whole number in [min, max] from the environment: 1 when set, 0
 * when unset, FERRY_EINVAL when malformed.  `min` exists so the range the
 * sentence names is the one ferry accepts: FERRY_MAX_RAILS=0 used to pass
 * here ("between 0 and 8") only to be refused by ferry_context_create.
 */
static int env_uint(const char *name, long min, long max, long *out)
{
    const char *v = getenv(name);
    char *end;
    long n;

    if (v == NULL)
        return 0;
    errno = 0;
    n = strtol(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || n < min || n > max)
        return ferry__error(FERRY_EINVAL,
                            "%s=%s is not a whole number between %ld and %ld",
                            name, v, min, max);
    *out = n;
    return 1;
}

/* The defaults, before the environment is consulted. */
static void config_defaults(struct ferry_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->size = sizeof(*cfg);
    cfg->max_rails = 1;
    cfg->mr_mode_offer = FERRY_MR_ALL;
    cfg->timeout_ms = DEFAULT_TIMEOUT_MS;
    cfg->registration_cache = 1;
    cfg->rcache_max_entries = DEFAULT_RCACHE_ENTRIES;
    cfg->rcache_max_bytes = DEFAULT_RCACHE_BYTES;
    cfg->cuda_device = -1;
    cfg->stripe_threshold = DEFAULT_STRIPE_THRESHOLD;
    cfg->notify_queue_max = DEFAULT_NOTIFY_QUEUE;
    cfg->staging_buffers = DEFAULT_STAGING_BUFFERS;
    cfg->staging_chunk = DEFAULT_STAGING_CHUNK;
}

int ferry_config_init(struct ferry_config *cfg)
{
    long n;
    int ret;

    ferry__error_clear();
    if (cfg == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_config_init: cfg is NULL");
    config_defaults(cfg);
    cfg->provider = getenv("FERRY_PROVIDER");
    cfg->domain = getenv("FERRY_DOMAIN");
    ret = env_uint("FERRY_MAX_RAILS", 1, FERRY__MAX_RAILS, &n);
    if (ret < 0)
        return ret;
    if (ret > 0)
        cfg->max_rails = (unsigned)n;
    ret = env_uint("FERRY_TIMEOUT_MS", 0, INT_MAX, &n);
    if (ret < 0)
        return ret;
    if (ret > 0)
        cfg->timeout_ms = (int)n;
    ret = env_uint("FERRY_STAGING_BUFFERS", 1, MAX_STAGING_BUFFERS, &n);
    if (ret < 0)
        return ret;
    if (ret > 0)
        cfg->staging_buffers = (size_t)n;
    ret = env_uint("FERRY_STAGING_CHUNK", 4096, 1l << 30, &n);
    if (ret < 0)
        return ret;
    if (ret > 0)
        cfg->staging_chunk = (size_t)n;
    return 0;
}

static int copy_name(char *dst, const char *src, const char *field)
{
    if (src == NULL)
        return 0;
    if (strlen(src) >= FERRY__NAME_MAX)
        return ferry__error(FERRY_EINVAL,
                            "config.%s is %zu characters long; at most %d "
                            "fit",
                            field, strlen(src), FERRY__NAME_MAX - 1);
    strcpy(dst, src);
    return 0;
}

/* Copies and checks the caller's config into ctx->cfg. */
static int adopt_config(struct ferry_context *ctx,
                        const struct ferry_config *user)
{
    struct ferry_config *cfg = &ctx->cfg;
    int ret;

    /* A caller's config was already through ferry_config_init: only a
     * missing one takes the environment here. */
    if (user == NULL && (ret = ferry_config_init(cfg)) != 0)
        return ret;
    if (user != NULL) {
        config_defaults(cfg);
        if (user->size == 0 || user->size > sizeof(*cfg))
            return ferry__error(
                FERRY_EINVAL,
                "config.size is %zu; call ferry_config_init() on the config "
                "first (this ferry expects at most %zu)",
                user->size, sizeof(*cfg));
        memcpy(cfg, user, user->size);
        cfg->size = sizeof(*cfg);
    }
    if (cfg->max_rails < 1 || cfg->max_rails > FERRY__MAX_RAILS)
        return ferry__error(FERRY_EINVAL,
                            "config.max_rails is %u; use 1 to %d",
                            cfg->max_rails, FERRY__MAX_RAILS);
    if ((cfg->mr_mode_offer | cfg->mr_mode_force) & ~FERRY_MR_ALL)
        return ferry__error(FERRY_EINVAL,
                            "config.mr_mode_offer/force hold bits 0x%x that "
                            "are not FERRY_MR_* flags (0x%x)",
                            (cfg->mr_mode_offer | cfg->mr_mode_force) &
                                ~FERRY_MR_ALL,
                            FERRY_MR_ALL);
    if (cfg->timeout_ms < 0)
        return ferry__error(FERRY_EINVAL,
                            "config.timeout_ms is %d; use 0 (no deadline) "
                            "or a positive number of milliseconds",
                            cfg->timeout_ms);
    if (cfg->staging_buffers < 1 || cfg->staging_buffers > MAX_STAGING_BUFFERS ||
        cfg->staging_chunk < 4096 || cfg->staging_chunk > (1u << 30))
        return ferry__error(FERRY_EINVAL,
                            "config.staging_buffers is %zu and "
                            "config.staging_chunk %zu; use 1 to %d buffers "
                            "of 4 KiB to 1 GiB",
                            cfg->staging_buffers, cfg->staging_chunk,
                            MAX_STAGING_BUFFERS);
    if (cfg->mr_key_size > FERRY__KEY_MAX)
        return ferry__error(FERRY_EINVAL,
                            "config.mr_key_size is %zu; at most %d bytes",
                            cfg->mr_key_size, FERRY__KEY_MAX);
    if ((ret = copy_name(ctx->cfg_provider, cfg->provider, "provider")) ||
        (ret = copy_name(ctx->cfg_domain, cfg->domain, "domain")))
        return ret;
    cfg->provider = cfg->provider ? ctx->cfg_provider : NULL;
    cfg->domain = cfg->domain ? ctx->cfg_domain : NULL;
    return 0;
}

static int fi_fail(int ret, const struct ferry__rail *rail, const char *call)
{
    return ferry__error(ferry__error_from_fi(ret),
                        "%s on provider %s, domain %s failed: %s", call,
                        rail->info->fabric_attr->prov_name,
                        rail->info->domain_attr->name, fi_strerror(-ret));
}

/*
 * shm names its endpoint after the process id unless given a name, and a
 * file a dead process left in /dev/shm under a reused id makes
 * fi_enable fail (EBUSY): give it a name no other process has had.
 */
static int name_shm_endpoint(struct ferry__rail *rail)
{
    static _Atomic unsigned counter;
    char name[64];

    if (rail->info->ep_attr->protocol != FI_PROTO_SHM ||
        rail->info->addr_format != FI_ADDR_STR)
        return 0;
    snprintf(name, sizeof(name), "ferry_%d_%llx_%u", (int)getpid(),
             (unsigned long long)ferry__now_ns(),
             atomic_fetch_add(&counter, 1));
    free(rail->info->src_addr);
    rail->info->src_addr = strdup(name);
    if (rail->info->src_addr == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory naming an endpoint");
    rail->info->src_addrlen = strlen(name) + 1;
    return 0;
}

/* The rail's endpoint, bound to its address vector and CQ, enabled. */
static int endpoint_open(struct ferry__rail *rail)
{
    int ret;

    if ((ret = name_shm_endpoint(rail)))
        return ret;
    if ((ret = fi_endpoint(rail->domain, rail->info, &rail->ep, NULL)))
        return fi_fail(ret, rail, "fi_endpoint");
    if ((ret = fi_ep_bind(rail->ep, &rail->av->fid, 0)))
        return fi_fail(ret, rail, "fi_ep_bind(av)");
    if ((ret = fi_ep_bind(rail->ep, &rail->cq->fid, FI_TRANSMIT | FI_RECV)))
        return fi_fail(ret, rail, "fi_ep_bind(cq)");
    if ((ret = fi_enable(rail->ep)))
        return fi_fail(ret, rail, "fi_enable");
    return 0;
}

static int rail_open(struct ferry_context *ctx, struct ferry__rail *rail)
{
    struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
    struct fi_cq_attr cq_attr = {
        .format = FI_CQ_FORMAT_DATA,
        .wait_obj = FI_WAIT_NONE,
        /* Room for every operation in flight plus incoming messages. */
        .size = ctx->tx_depth + rail->info->rx_attr->size,
    };
    int ret;

    if ((ret = fi_fabric(rail->info->fabric_attr, &rail->fabric, NULL)))
        return fi_fail(ret, rail, "fi_fabric");
    if ((ret = fi_domain(rail->fabric, rail->info, &rail->domain, NULL)))
        return fi_fail(ret, rail, "fi_domain");
    if ((ret = fi_av_open(rail->domain, &av_attr, &rail->av, NULL)))
        return fi_fail(ret, rail, "fi_av_open");
    /* A progress thread sleeps on the CQ's file descriptor when idle, if
     * the provider offers one; otherwise it naps (progress.c). */
    if (ctx->cfg.progress_thread) {
        cq_attr.wait_obj = FI_WAIT_FD;
        if (fi_cq_open(rail->domain, &cq_attr, &rail->cq, NULL) == 0 &&
            fi_control(&rail->cq->fid, FI_GETWAIT, &rail->wait_fd) == 0)
            rail->has_wait_fd = true;
        else if (rail->cq != NULL) {
            fi_close(&rail->cq->fid);
            rail->cq = NULL;
        }
        cq_attr.wait_obj = FI_WAIT_NONE;
    }
    if (rail->cq == NULL &&
        (ret = fi_cq_open(rail->domain, &cq_attr, &rail->cq, NULL)))
        return fi_fail(ret, rail, "fi_cq_open");
    if ((ret = endpoint_open(rail)))
        return ret;

    rail->ops = calloc(ctx->tx_depth, sizeof(*rail->ops));
    if (rail->ops == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory for %zu op slots",
                            ctx->tx_depth);
    for (size_t i = 0; i < ctx->tx_depth; i++) {
        rail->ops[i].rail = rail;
        rail->ops[i].next_free = i + 1 < ctx->tx_depth ? &rail->ops[i + 1]
                                                        : NULL;
    }
    rail->free_ops = &rail->ops[0];
    ferry__keyalloc_init(&rail->keys, ctx->key_size);
    return ferry__notify_rail_open(ctx, rail);
}

static void rail_close(struct ferry__rail *rail)
{
    /* Children before parents: libfabric refuses to close a domain with
     * open endpoints (-FI_EBUSY). */
    if (rail->ep)
        fi_close(&rail->ep->fid);
    ferry__notify_rail_close(rail);
    if (rail->cq)
        fi_close(&rail->cq->fid);
    if (rail->av)
        fi_close(&rail->av->fid);
    if (rail->domain)
        fi_close(&rail->domain->fid);
    if (rail->fabric)
        fi_close(&rail->fabric->fid);
    fi_freeinfo(rail->info);
    free(rail->ops);
    memset(rail, 0, sizeof(*rail));
}

/*
 * A rail's share of striped bytes: its link speed in Mbit/s when every
 * rail reports one (fi_info->nic->link_attr), else an equal share.
 */
static int64_t rail_weight(const struct ferry_context *ctx, unsigned r)
{
    for (unsigned i = 0; i < ctx->nrails; i++) {
        const struct fid_nic *nic = ctx->rails[i].info->nic;
        if (nic == NULL || nic->link_attr == NULL ||
            nic->link_attr->speed < 1000000)
            return 1;
    }
    return (int64_t)(ctx->rails[r].info->nic->link_attr->speed / 1000000);
}

/*
 * The largest operation ferry posts unless config.max_msg_size says
 * otherwise: on tcp here, 4 MiB blocks move 30-45 % more as 512 KiB-1 MiB
 * operations than as single ones (docs/performance.md), shm does not
 * care, and at hundreds of Gbit/s a 1 MiB operation still takes tens of
 * microseconds against about one to post it.
 */
#define DEFAULT_MAX_OP (1u << 20)

/* The limits every rail shares: the most restrictive of them all. */
static void derive_limits(struct ferry_context *ctx)
{
    const struct fi_info *info = ctx->rails[0].info;
    const struct ferry_config *cfg = &ctx->cfg;
    size_t max_msg = SIZE_MAX, tx = SIZE_MAX, key = SIZE_MAX;

    ctx->mr_mode = ferry__mr_mode_from_fi(info->domain_attr->mr_mode) |
                   cfg->mr_mode_force;
    for (unsigned i = 0; i < ctx->nrails; i++) {
        const struct fi_info *r = ctx->rails[i].info;
        if (r->ep_attr->max_msg_size < max_msg)
            max_msg = r->ep_attr->max_msg_size;
        if (r->tx_attr->size < tx)
            tx = r->tx_attr->size;
        if (r->domain_attr->mr_key_size < key)
            key = r->domain_attr->mr_key_size;
    }
    if (cfg->max_msg_size != 0 && cfg->max_msg_size < max_msg)
        max_msg = cfg->max_msg_size;
    else if (cfg->max_msg_size == 0 && DEFAULT_MAX_OP < max_msg)
        max_msg = DEFAULT_MAX_OP;
    if (cfg->tx_depth != 0 && cfg->tx_depth < tx)
        tx = cfg->tx_depth;
    if (cfg->mr_key_size != 0 && cfg->mr_key_size < key)
        key = cfg->mr_key_size;
    /* Without FI_MR_RAW a key is a uint64_t whatever the size field says. */
    if (!(ctx->mr_mode & FERRY_MR_RAW) && key > 8)
        key = 8;
    ctx->max_msg = max_msg ? max_msg : 1;
    ctx->tx_depth = tx ? tx : 1;
    ctx->key_size = key ? key : 1;
    for (unsigned i = 0; i < ctx->nrails; i++)
        ctx->rails[i].weight = rail_weight(ctx, i);
    ctx->notify_ordered =
        ctx->nrails == 1 &&
        (info->tx_attr->msg_order & info->rx_attr->msg_order &
         FI_ORDER_SAW) != 0;
    ctx->writes_ordered =
        ctx->nrails == 1 &&
        (info->tx_attr->msg_order & info->rx_attr->msg_order &
         FI_ORDER_WAW) != 0;
}

static void explain_choice(struct ferry_context *ctx,
                           const struct ferry__selection *sel,
                           const char *rails_why)
{
    const struct fi_info *info = ctx->rails[0].info;
    const char *fp = getenv("FI_PROVIDER");
    char source[96] = "";

    if (ctx->cfg.provider != NULL)
        snprintf(source, sizeof(source), "; provider named by the config");
    else if (fp != NULL)
        snprintf(source, sizeof(source), "; FI_PROVIDER=%s narrowed the "
                 "search", fp);
    snprintf(ctx->why, sizeof(ctx->why),
             "chose %s on domain %s (fabric %s): %s, best of %zu "
             "candidate%s%s%s",
             info->fabric_attr->prov_name, info->domain_attr->name,
             info->fabric_attr->name, sel->cand[0].verdict, sel->ncand,
             sel->ncand == 1 ? "" : "s", source, rails_why);
    for (unsigned r = 1; r < ctx->nrails; r++)
        snprintf(ctx->why + strlen(ctx->why), sizeof(ctx->why) -
                 strlen(ctx->why), "%s%s", r == 1 ? "; further rails: " : ", ",
                 ctx->rails[r].info->domain_attr->name);
}

/*
 * A forced FERRY_MR_VIRT_ADDR must be the provider's own: on a provider
 * that addresses remote memory by offset, every operation would miss
 * (other forced bits fail loudly where they are used, or only add work).
 */
static int check_forced_modes(const struct ferry_context *ctx)
{
    const struct fi_info *info = ctx->rails[0].info;
    unsigned own = ferry__mr_mode_from_fi((uint64_t)info->domain_attr->mr_mode);

    if (!(ctx->cfg.mr_mode_force & FERRY_MR_VIRT_ADDR) ||
        (own & FERRY_MR_VIRT_ADDR))
        return 0;
    return ferry__error(FERRY_EINVAL,
                        "config.mr_mode_force has FERRY_MR_VIRT_ADDR, which "
                        "provider %s does not use (it addresses remote "
                        "memory by offset): offer the bit with "
                        "mr_mode_offer and let the provider choose",
                        info->fabric_attr->prov_name);
}

/* A rail on this domain already? */
static bool domain_taken(const struct ferry_context *ctx, const char *domain)
{
    for (unsigned r = 0; r < ctx->nrails; r++)
        if (strcmp(ctx->rails[r].info->domain_attr->name, domain) == 0)
            return true;
    return false;
}

/*
 * Rails: the best candidate, then the next best other domains of the same
 * provider and address family (one rail per NIC: libfabric lists a domain
 * once per address family, and two rails on one NIC only share it).
 */
static void pick_rails(struct ferry_context *ctx,
                       struct ferry__selection *sel)
{
    const struct fi_info *first = sel->cand[0].info;

    for (size_t i = 0; i < sel->ncand && ctx->nrails < ctx->cfg.max_rails;
         i++) {
        const struct fi_info *c = sel->cand[i].info;

        if (strcmp(c->fabric_attr->prov_name,
                   first->fabric_attr->prov_name) != 0 ||
            c->addr_format != first->addr_format ||
            domain_taken(ctx, c->domain_attr->name))
            continue;
        /* Ownership of the fi_info moves to the rail. */
        ctx->rails[ctx->nrails].index = ctx->nrails;
        ctx->rails[ctx->nrails++].info = sel->cand[i].info;
        sel->cand[i].info = NULL;
    }
}

int ferry_context_create(const struct ferry_config *cfg,
                         ferry_context_t **out)
{
    struct ferry__selection sel;
    struct ferry_context *ctx;
    char rails_why[384];
    int ret;

    ferry__error_clear();
    if (out == NULL)
        return ferry__error(FERRY_EINVAL,
                            "ferry_context_create: out pointer is NULL");
    ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory for a context");
    pthread_mutex_init(&ctx->lock, NULL);
    pthread_cond_init(&ctx->progressed, NULL);
    ret = adopt_config(ctx, cfg);
    if (ret == 0)
        ret = ferry__provider_select(&ctx->cfg, &sel);
    if (ret != 0) {
        pthread_mutex_destroy(&ctx->lock);
        free(ctx);
        return ret;
    }
    ferry__rails_order(&ctx->cfg, &sel, rails_why, sizeof(rails_why),
                       ctx->progress_cpus, sizeof(ctx->progress_cpus));
    ctx->register_local = sel.cand[0].nic;
    pick_rails(ctx, &sel);
    explain_choice(ctx, &sel, rails_why);
    ferry__selection_free(&sel);
    derive_limits(ctx);
    ctx->register_local |= (ctx->mr_mode & FERRY_MR_LOCAL) != 0;
    ctx->magic = FERRY__MAGIC_CTX;
    ret = check_forced_modes(ctx);
    for (unsigned i = 0; i < ctx->nrails && ret == 0; i++)
        ret = rail_open(ctx, &ctx->rails[i]);
    if (ret == 0)
        ferry__dev_path_init(ctx);
    if (ret == 0 && ctx->cfg.registration_cache)
        ret = ferry__rcache_create(ctx, ctx->cfg.rcache_max_entries,
                                   ctx->cfg.rcache_max_bytes, &ctx->rcache);
    if (ret == 0 && ctx->cfg.progress_thread)
        ret = ferry__progress_thread_start(ctx);
    if (ret != 0) {
        ferry_context_destroy(ctx);
        return ret;
    }
    FERRY_LOG_INFO("%s", ctx->why);
    *out = ctx;
    return 0;
}

void ferry_context_destroy(ferry_context_t *ctx)
{
    if (ctx == NULL || ctx->magic != FERRY__MAGIC_CTX)
        return;
    ferry__progress_thread_stop(ctx);
    /* Endpoints first: closing them ends every operation still in flight,
     * after which requests and registrations can go. */
    for (unsigned i = 0; i < ctx->nrails; i++) {
        if (ctx->rails[i].ep)
            fi_close(&ctx->rails[i].ep->fid);
        ctx->rails[i].ep = NULL;
    }
    ferry__reqs_destroy(ctx);
    ferry__stage_destroy(ctx);
    /* Registrations and remote regions before peers: a remote region
     * points at its peer (rmem_release reads rmem->peer->ctx and drops
     * peer->rmem_count), so freeing peers first was a use after free when
     * regions were still held at destruction. */
    ferry__rcache_destroy(ctx->rcache);
    ferry__mems_destroy(ctx);
    ferry__peers_destroy(ctx);
    ferry__notify_destroy(ctx);
    for (unsigned i = 0; i < ctx->nrails; i++)
        rail_close(&ctx->rails[i]);
    ctx->magic = FERRY__MAGIC_DEAD;
    pthread_cond_destroy(&ctx->progressed);
    pthread_mutex_destroy(&ctx->lock);
    free(ctx);
}

int ferry_context_address(ferry_context_t *ctx, void *buf, size_t *len)
{
    struct ferry__blob_writer w;
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_ctx(ctx, "ferry_context_address")))
        return ret;
    if (len == NULL)
        return ferry__error(FERRY_EINVAL,
                            "ferry_context_address: len is NULL");
    ferry__blob_begin(&w, buf, *len, FERRY__BLOB_ADDR);
    ferry__blob_put_str(&w, ctx->rails[0].info->fabric_attr->prov_name);
    ferry__blob_put_u16(&w, (uint16_t)ctx->nrails);
    /* The endpoints are FI_THREAD_DOMAIN: fi_getname is serialised with
     * posting and polling like every other endpoint call. */
    pthread_mutex_lock(&ctx->lock);
    for (unsigned i = 0; i < ctx->nrails && ret == 0; i++) {
        uint8_t name[FERRY__ADDR_MAX];
        size_t nlen = sizeof(name);

        ret = fi_getname(&ctx->rails[i].ep->fid, name, &nlen);
        if (ret != 0) {
            ret = fi_fail(ret, &ctx->rails[i], "fi_getname");
            break;
        }
        ferry__blob_put_u32(&w, ctx->rails[i].info->addr_format);
        ferry__blob_put_u16(&w, (uint16_t)nlen);
        ferry__blob_put_bytes(&w, name, nlen);
    }
    pthread_mutex_unlock(&ctx->lock);
    return ret != 0 ? ret : ferry__blob_end(&w, len);
}

int ferry_context_info(ferry_context_t *ctx, struct ferry_context_info *info)
{
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
    fi = ctx->rails[0].info;
    memset(&out, 0, sizeof(out));
    out.size = info->size < sizeof(out) ? info->size : sizeof(out);
    out.provider = fi->fabric_attr->prov_name;
    out.fabric = fi->fabric_attr->name;
    out.domain = fi->domain_attr->name;
    out.nrails = ctx->nrails;
    out.mr_mode = ctx->mr_mode;
    out.mr_key_size = ctx->key_size;
    out.max_msg_size = ctx->max_msg;
    out.tx_depth = ctx->tx_depth;
    out.rx_depth = fi->rx_attr->size;
    out.hmem = (fi->caps & FI_HMEM) != 0;
    out.fi_version = fi_version();
    out.why = ctx->why;
    out.rcache_monitor = ctx->rcache == NULL
                             ? "none: the registration cache is off"
                         : ferry__monitor_start()
                             ? "userfaultfd (unmap, remove and remap events) "
                               "and ferry_mem_invalidate() calls"
                             : ferry__monitor_status();
    out.rcache_monitor_running = ctx->rcache != NULL && ferry__monitor_start();
    out.device_path = ctx->dev_why;
    out.notify_in_write_bits = ferry__notify_data_bits(&ctx->rails[0]);
    for (unsigned i = 1; i < ctx->nrails; i++) {
        unsigned bits = ferry__notify_data_bits(&ctx->rails[i]);

        if (bits < out.notify_in_write_bits)
            out.notify_in_write_bits = bits;
    }
    /* Only as much as the caller's struct holds. */
    memcpy(info, &out, out.size);
    return 0;
}

int ferry_context_stats(ferry_context_t *ctx, struct ferry_stats *stats)
{
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
    out.size = stats->size < sizeof(out) ? stats->size : sizeof(out);
    ferry__rcache_stats(ctx->rcache, &rc);
    out.rcache_hits = rc.hits;
    out.rcache_misses = rc.misses;
    out.rcache_invalidations = rc.invalidations;
    out.rcache_evictions = rc.evictions;
    out.rcache_entries = rc.entries;
    out.rcache_bytes = rc.bytes;
    pthread_mutex_lock(&ctx->lock);
    out.oneshot_registrations = ctx->oneshot_registrations;
    out.notifications_received = ctx->notifications_received;
    out.notifications_unqueued = ctx->notifications_unqueued;
    for (unsigned i = 0; i < ctx->nrails && i < FERRY__ARRAY_LEN(out.bytes_posted);
         i++)
        out.bytes_posted[i] = ctx->rails[i].bytes_posted;
    out.staged_bytes = ctx->staged_bytes;
    out.staged_chunks = ctx->staged_chunks;
    out.staged_max_in_flight = ctx->staged_max_in_flight;
    out.mirror_syncs = ctx->mirror_syncs;
    out.notifications_in_writes = ctx->notifications_in_writes;
    pthread_mutex_unlock(&ctx->lock);
    /* Only as much as the caller's struct holds. */
    memcpy(stats, &out, out.size);
    return 0;
}
