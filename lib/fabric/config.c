/*
 * The configuration: its defaults, the environment's say (FERRY_*), and
 * the checked copy a context keeps in its fabric part.
 */
#include "fabric/config.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define MAX_METADATA_TTL_S 86400
#define MAX_STAGING_BUFFERS 256

/* Each field's C type, by its kind in FERRY_CONFIG_FIELDS. */
#define KIND_TYPE_STR const char *
#define KIND_TYPE_BOOL int
#define KIND_TYPE_INT int
#define KIND_TYPE_UINT unsigned
#define KIND_TYPE_SIZE size_t

/* The list and the struct agree: each field has its kind's type. */
#define CHECK_KIND(name, kind, def, var)                                     \
    _Static_assert(_Generic(((struct ferry_config *)0)->name,                 \
                            KIND_TYPE_##kind: 1, default: 0),                 \
                   "config." #name " is not of kind " #kind);
FERRY_CONFIG_FIELDS(CHECK_KIND)
#undef CHECK_KIND


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

/*
 * env_uint for a size_t field: a whole number in [min, SIZE_MAX], with
 * `unit` and `hint` in the sentence.  strtoull would take "-1" as the
 * largest value, so a minus sign is refused before it parses.
 */
static int env_size(const char *name, size_t min, const char *unit,
                    const char *hint, size_t *out)
{
    const char *v = getenv(name);
    unsigned long long n = 0;
    char *end = NULL;
    bool ok;

    if (v == NULL)
        return 0;
    errno = 0;
    ok = strchr(v, '-') == NULL;
    if (ok)
        n = strtoull(v, &end, 10);
    if (!ok || errno != 0 || end == v || *end != '\0' || n < min ||
        n > SIZE_MAX)
        return ferry__error(FERRY_EINVAL,
                            "%s=%s is not a whole number of %s between %zu "
                            "and %zu%s",
                            name, v, unit, min, (size_t)SIZE_MAX, hint);
    *out = (size_t)n;
    return 1;
}

/* The defaults, before the environment is consulted. */
static void config_defaults(struct ferry_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->size = sizeof(*cfg);
#define SET_DEFAULT(name, kind, def, var) cfg->name = def;
    FERRY_CONFIG_FIELDS(SET_DEFAULT)
#undef SET_DEFAULT
}

/* A variable's value, NULL when unset or empty (FERRY_PROVIDER= means
 * "no choice", not a provider named ""). */
static const char *env_text(const char *name)
{
    const char *v = getenv(name);

    return v != NULL && v[0] != '\0' ? v : NULL;
}

/* The whole of this ferry's config: defaults, then the environment. */
static int config_from_env(struct ferry_config *cfg)
{
    long n;
    int ret;

    config_defaults(cfg);
    cfg->provider = env_text("FERRY_PROVIDER");
    cfg->domain = env_text("FERRY_DOMAIN");
    cfg->peer_host = env_text("FERRY_PEER_HOST");
    cfg->metadata = env_text("FERRY_METADATA");
    cfg->telemetry_dir = env_text("FERRY_TELEMETRY");
    ret = env_uint("FERRY_TELEMETRY_INTERVAL_MS", 100, INT_MAX, &n);
    if (ret < 0)
        return ret;
    if (ret > 0)
        cfg->telemetry_interval_ms = (unsigned)n;
    ret = env_uint("FERRY_MAX_RAILS", 1, FERRY__MAX_RAILS, &n);
    if (ret < 0)
        return ret;
    if (ret > 0)
        cfg->max_rails = (unsigned)n;
    ret = env_uint("FERRY_ENDPOINTS_PER_DOMAIN", 0, FERRY__MAX_RAILS, &n);
    if (ret < 0)
        return ret;
    if (ret > 0)
        cfg->endpoints_per_domain = (unsigned)n;
    ret = env_uint("FERRY_SHM_PEERS", 0, 1, &n);
    if (ret < 0)
        return ret;
    if (ret > 0)
        cfg->shm_peers = (int)n;
    ret = env_uint("FERRY_TIMEOUT_MS", -1, INT_MAX, &n);
    if (ret < 0)
        return ret;
    if (ret > 0)
        cfg->timeout_ms = (int)n;
    ret = env_uint("FERRY_LIVENESS_MS", 0, INT_MAX, &n);
    if (ret < 0)
        return ret;
    if (ret > 0)
        cfg->liveness_ms = (unsigned)n;
    /* A lease shorter than two seconds would end between keep-alives. */
    ret = env_uint("FERRY_METADATA_TTL", 2, MAX_METADATA_TTL_S, &n);
    if (ret < 0)
        return ret;
    if (ret > 0)
        cfg->metadata_ttl_s = (unsigned)n;
    ret = env_uint("FERRY_OOB_INSECURE", 0, 1, &n);
    if (ret < 0)
        return ret;
    if (ret > 0)
        cfg->oob_insecure = (int)n;
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
    /* 0 is refused rather than taken as "no caching": the cache would
     * still hold one entry (rcache.c); registration_cache = 0 turns it
     * off. */
    ret = env_size("FERRY_RCACHE_MAX_ENTRIES", 1, "entries",
                   " (to cache nothing, set config.registration_cache = 0)",
                   &cfg->rcache_max_entries);
    if (ret < 0)
        return ret;
    ret = env_size("FERRY_RCACHE_MAX_BYTES", 1, "bytes",
                   " (no suffixes: 64 GiB is 68719476736)",
                   &cfg->rcache_max_bytes);
    if (ret < 0)
        return ret;
    /* Not a config field: env.c reads it once per process, before
     * libfabric's first call (ferry.h, ferry_fi_mr_cache_state).  But a
     * value that is neither 0 nor 1 is refused here like any other
     * malformed variable, rather than only warned about there. */
    return ferry__env_check_keep_fi_mr_cache();
}

int ferry_config_init_sized(struct ferry_config *cfg, size_t size)
{
    struct ferry_config whole;
    int ret;

    ferry__error_clear();
    if (cfg == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_config_init: cfg is NULL");
    if (size < sizeof(cfg->size) || size > sizeof(whole))
        return ferry__error(FERRY_EINVAL,
                            "ferry_config_init_sized: size is %zu; give the "
                            "sizeof(struct ferry_config) of the header the "
                            "caller was built with, %zu to %zu for this ferry "
                            "(ferry_config_init does)",
                            size, sizeof(cfg->size), sizeof(whole));
    if ((ret = config_from_env(&whole)) != 0)
        return ret;
    /* Only the caller's bytes: a struct from an older header is shorter. */
    memcpy(cfg, &whole, size);
    cfg->size = size;
    return 0;
}

/*
 * Deadlines follow ferry's one rule (ferry(7) "Timeouts"): < 0 none, 0 the
 * default, > 0 milliseconds.  Kept as the layers below read them: the
 * request deadline < 0 for none, the metadata bound as a largest wait.
 */
static void adopt_deadlines(struct ferry_config *cfg)
{
    struct ferry_config defaults;

    config_defaults(&defaults);
    if (cfg->timeout_ms == 0)
        cfg->timeout_ms = defaults.timeout_ms;
    if (cfg->metadata_timeout_ms == 0)
        cfg->metadata_timeout_ms = defaults.metadata_timeout_ms;
    else if (cfg->metadata_timeout_ms < 0)
        cfg->metadata_timeout_ms = INT_MAX;
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

int ferry__config_adopt(struct ferry__fabric *fab,
                        const struct ferry_config *user)
{
    struct ferry_config *cfg = &fab->cfg;
    int ret;

    /* A caller's config was already through ferry_config_init: only a
     * missing one takes the environment here. */
    if (user == NULL && (ret = ferry_config_init(cfg)) != 0)
        return ret;
    if (user != NULL) {
        config_defaults(cfg);
        if (user->size < sizeof(user->size) || user->size > sizeof(*cfg))
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
    if (cfg->endpoints_per_domain > FERRY__MAX_RAILS)
        return ferry__error(FERRY_EINVAL,
                            "config.endpoints_per_domain is %u; use 0 "
                            "(ferry's choice) or 1 to %d",
                            cfg->endpoints_per_domain, FERRY__MAX_RAILS);
    if (cfg->shm_peers < -1 || cfg->shm_peers > 1)
        return ferry__error(FERRY_EINVAL,
                            "config.shm_peers is %d; use 1 (on), 0 (off) or "
                            "-1 (on unless a provider is named)",
                            cfg->shm_peers);
    if ((cfg->mr_mode_offer | cfg->mr_mode_force) & ~FERRY_MR_ALL)
        return ferry__error(FERRY_EINVAL,
                            "config.mr_mode_offer/force hold bits 0x%x that "
                            "are not FERRY_MR_* flags (0x%x)",
                            (cfg->mr_mode_offer | cfg->mr_mode_force) &
                                ~FERRY_MR_ALL,
                            FERRY_MR_ALL);
    if (cfg->liveness_ms > INT_MAX)
        return ferry__error(FERRY_EINVAL,
                            "config.liveness_ms is %u; use 0 (off) or up to "
                            "%d milliseconds",
                            cfg->liveness_ms, INT_MAX);
    if (cfg->metadata_ttl_s < 2 || cfg->metadata_ttl_s > MAX_METADATA_TTL_S)
        return ferry__error(FERRY_EINVAL,
                            "config.metadata_ttl_s is %u; use 2 to %d "
                            "seconds",
                            cfg->metadata_ttl_s, MAX_METADATA_TTL_S);
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
    if ((ret = copy_name(fab->cfg_provider, cfg->provider, "provider")) ||
        (ret = copy_name(fab->cfg_domain, cfg->domain, "domain")) ||
        (ret = copy_name(fab->cfg_peer_host, cfg->peer_host, "peer_host")))
        return ret;
    cfg->provider = cfg->provider ? fab->cfg_provider : NULL;
    cfg->domain = cfg->domain ? fab->cfg_domain : NULL;
    cfg->peer_host = cfg->peer_host ? fab->cfg_peer_host : NULL;
    adopt_deadlines(cfg);
    return 0;
}
