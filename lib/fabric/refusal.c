/*
 * Why providers were refused.  Each reason comes from asking libfabric
 * again with fewer demands, from the filters that kept a provider out
 * (FI_PROVIDER, the config's provider name) or from /dev/shm's room; a
 * provider's name only chooses the words, never a verdict.
 */
#include "fabric/refusal.h"

#include "base/text.h"
#include "fabric/mr_mode.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NAMES 64

/*
 * The RDMA providers people look for first: libfabric does not list them
 * at all when their device or library is missing, so their names are
 * known here to say so, and are not taken for typing mistakes.
 */
static const char *const rdma_providers[] = {"verbs", "efa",  "cxi",
                                             "psm3",  "opx", NULL};

void ferry__refuse(struct ferry__selection *sel, const char *provider,
                   const char *fmt, ...)
{
    struct ferry__refusal *r;
    va_list ap;

    if (sel->nrefusals == FERRY__MAX_REFUSALS)
        return;
    r = &sel->refusals[sel->nrefusals++];
    snprintf(r->provider, sizeof(r->provider), "%s", provider);
    va_start(ap, fmt);
    vsnprintf(r->reason, sizeof(r->reason), fmt, ap);
    va_end(ap);
    ferry__appendf(sel->refused, sizeof(sel->refused), "%s%s: %s",
                   sel->refused[0] ? "; " : "", r->provider, r->reason);
}

bool ferry__refused_already(const struct ferry__selection *sel,
                            const char *provider)
{
    for (size_t i = 0; i < sel->nrefusals; i++)
        if (strcmp(sel->refusals[i].provider, provider) == 0)
            return true;
    return false;
}

/* Whether `name` is one of the comma-separated names of list[0, len). */
static bool listed(const char *list, const char *name, size_t name_len)
{
    for (const char *p = list; *p;) {
        size_t n = strcspn(p, ",");

        if (n == name_len && strncmp(p, name, n) == 0)
            return true;
        p += n + (p[n] == ',');
    }
    return false;
}

bool ferry__fi_provider_excludes(const char *filter, const char *prov_name)
{
    bool negated, named;

    if (filter == NULL || *filter == '\0')
        return false;
    negated = *filter == '^';
    filter += negated;
    named = listed(filter, prov_name, strlen(prov_name)) ||
            listed(filter, prov_name, strcspn(prov_name, ";"));
    return negated ? named : !named;
}

/* Edits (insert, delete, replace, swap two neighbours) from a to b. */
static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), d[FERRY__NAME_MAX][FERRY__NAME_MAX];

    if (la >= FERRY__NAME_MAX || lb >= FERRY__NAME_MAX)
        return SIZE_MAX;
    for (size_t i = 0; i <= la; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);

            if (d[i - 1][j] + 1 < best)
                best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] &&
                a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[la][lb];
}

const char *ferry__nearest_name(const char *name, const char *const *names)
{
    const char *best = NULL;
    size_t best_d = SIZE_MAX;

    for (size_t i = 0; names[i] != NULL; i++) {
        size_t d = edit_distance(name, names[i]);

        if (d < best_d) {
            best_d = d;
            best = names[i];
        }
    }
    /* "tcpp" -> "tcp", "verb" -> "verbs"; "xyz" suggests nothing. */
    return best_d <= (strlen(name) + 2) / 3 ? best : NULL;
}

/* Whether `name` is one of the NULL-terminated names. */
static bool named_in(const char *const *names, const char *name)
{
    for (size_t i = 0; names[i] != NULL; i++)
        if (strcmp(names[i], name) == 0)
            return true;
    return false;
}

/* The provider names libfabric has, hooks left out, into names[]. */
static size_t provider_names(const struct fi_info *provs, const char **names,
                             size_t cap)
{
    size_t n = 0;

    for (const struct fi_info *p = provs; p != NULL && n + 1 < cap;
         p = p->next) {
        const char *name = p->fabric_attr->prov_name;

        names[n] = NULL;
        if (name != NULL && strncmp(name, "ofi_hook_", 9) != 0 &&
            !named_in(names, name))
            names[n++] = name;
    }
    names[n] = NULL;
    return n;
}

/* Whether a candidate of sel came from provider `name` (or a stack on it). */
static bool seen_provider(const struct ferry__selection *sel, const char *name)
{
    size_t len = strlen(name);

    for (size_t i = 0; i < sel->ncand; i++) {
        const char *p = sel->cand[i].info->fabric_attr->prov_name;

        if (strncmp(p, name, len) == 0 && (p[len] == '\0' || p[len] == ';'))
            return true;
    }
    return false;
}

/*
 * Why provider `prov` gave no usable candidate: asks fi_getinfo again with
 * fewer demands and names the first missing capability.
 */
static void explain_one(const struct ferry_config *cfg,
                        struct ferry__selection *sel, const char *prov)
{
    const char *filter = getenv("FI_PROVIDER");
    struct fi_info *h, *all = NULL;
    uint64_t caps = 0;

    if (ferry__fi_provider_excludes(filter, prov)) {
        ferry__refuse(sel, prov, "excluded by FI_PROVIDER=%s", filter);
        return;
    }
    if ((h = fi_allocinfo()) == NULL)
        return;
    /* Only the endpoint type and the name: what exists at all. */
    h->ep_attr->type = FI_EP_RDM;
    h->mode = ~0ull;
    h->domain_attr->mr_mode = (int)ferry__mr_mode_to_fi(FERRY_MR_ALL);
    h->fabric_attr->prov_name = strdup(prov);
    if (fi_getinfo(FERRY__FI_VERSION, NULL, NULL, 0, h, &all) != 0 ||
        all == NULL) {
        /* libfabric's shm offers nothing when /dev/shm is nearly full
         * (1.17 on): say that rather than "no device". */
        if (strcmp(prov, "shm") == 0 && !sel->shm_fits)
            ferry__refuse(sel, prov, "%s", sel->shm_room);
        else
            ferry__refuse(sel, prov, "no device or interface available");
        fi_freeinfo(h);
        return;
    }
    for (struct fi_info *p = all; p != NULL; p = p->next)
        caps |= p->caps;
    if (!(caps & FI_RMA))
        ferry__refuse(sel, prov, "lacks FI_RMA");
    else if ((caps & FERRY__REQUIRED_CAPS) != FERRY__REQUIRED_CAPS)
        ferry__refuse(sel, prov, "lacks RMA read/write or messages");
    else if (cfg->domain != NULL)
        ferry__refuse(sel, prov, "no domain named '%s'", cfg->domain);
    else
        ferry__refuse(sel, prov,
                      "needs an mr_mode or mode ferry was told not to offer, "
                      "or cannot complete writes on delivery "
                      "(FI_DELIVERY_COMPLETE)");
    fi_freeinfo(all);
    fi_freeinfo(h);
}

/* "tcp, net, udp, shm" into buf. */
static void join_names(const char *const *names, char *buf, size_t len)
{
    buf[0] = '\0';
    for (size_t i = 0; names[i] != NULL; i++)
        ferry__appendf(buf, len, "%s%s", i ? ", " : "", names[i]);
}

/*
 * A name given to ferry or to libfabric that libfabric does not have at
 * all: says so, lists what it has, and suggests the nearest.  Returns
 * whether `wanted` ("tcp;ofi_rxm" checks each part) had such a part.
 */
static bool refuse_unknown(struct ferry__selection *sel, const char *who,
                           const char *wanted, const char *const *names)
{
    char part[FERRY__NAME_MAX], have[512];
    const char *p = wanted, *near;

    while (*p) {
        size_t n = strcspn(p, ";,");

        snprintf(part, sizeof(part), "%.*s", (int)n, p);
        p += n + (p[n] != '\0');
        /* The RDMA providers are known even when libfabric did not load
         * them. */
        if (part[0] == '\0' || named_in(names, part) ||
            named_in(rdma_providers, part))
            continue;
        near = ferry__nearest_name(part, names);
        join_names(names, have, sizeof(have));
        ferry__refuse(sel, who,
                      "libfabric has no provider named '%s'%s%s%s (it has "
                      "%s)",
                      part, near ? "; did you mean '" : "", near ? near : "",
                      near ? "'?" : "", have);
        return true;
    }
    return false;
}

/* The RDMA providers libfabric did not load, so "why not verbs?" has an
 * answer.  Only a message: nothing is chosen by name. */
static void explain_unloaded(struct ferry__selection *sel,
                             const char *const *names)
{
    for (size_t i = 0; rdma_providers[i] != NULL; i++)
        if (!named_in(names, rdma_providers[i]) &&
            !seen_provider(sel, rdma_providers[i]))
            ferry__refuse(sel, rdma_providers[i],
                          "not loaded by libfabric (no device or driver, or "
                          "not built in)");
}

/* shm was left out because peers may be remote; /dev/shm's room is said
 * too, so the report shows it whichever way shm goes. */
static void refuse_shm_remote(struct ferry__selection *sel)
{
    ferry__refuse(sel, "shm",
                  "reaches only processes on this host (set local_only or "
                  "ask for it by name); %s",
                  sel->shm_room);
}

/* Every loaded provider that gave nothing usable, with why. */
static void explain_all(const struct ferry_config *cfg,
                        struct ferry__selection *sel, bool shm_refused,
                        const char *const *names)
{
    for (size_t i = 0; names[i] != NULL; i++) {
        const char *name = names[i];

        if (seen_provider(sel, name) || ferry__refused_already(sel, name) ||
            strncmp(name, "ofi_", 4) == 0 ||
            strcmp(name, "off_coll") == 0)
            continue; /* utility layers appear stacked on a core */
        /* Offered (FI_PROVIDER kept it), but peers may be remote. */
        if (strcmp(name, "shm") == 0 && shm_refused)
            refuse_shm_remote(sel);
        else
            explain_one(cfg, sel, name);
    }
    explain_unloaded(sel, names);
}

void ferry__explain_refusals(const struct ferry_config *cfg,
                             struct ferry__selection *sel, bool shm_refused)
{
    struct fi_info *h = fi_allocinfo(), *provs = NULL;
    const char *names[MAX_NAMES] = {NULL};
    const char *filter = getenv("FI_PROVIDER");

    if (h == NULL)
        return;
    if (fi_getinfo(FERRY__FI_VERSION, NULL, NULL, FI_PROV_ATTR_ONLY, h,
                   &provs) == 0)
        provider_names(provs, names, MAX_NAMES);
    if (filter != NULL)
        refuse_unknown(sel, "FI_PROVIDER", filter + (*filter == '^'), names);
    if (cfg->provider == NULL)
        explain_all(cfg, sel, shm_refused, names);
    else if (sel->ncand == 0 && !ferry__refused_already(sel, cfg->provider) &&
             !refuse_unknown(sel, cfg->provider, cfg->provider, names))
        explain_one(cfg, sel, cfg->provider);
    fi_freeinfo(provs);
    fi_freeinfo(h);
}
