/*
 * Provider selection: ask fi_getinfo for reliable-datagram endpoints with
 * RMA read/write, rank what comes back by capability (never by provider
 * name), and explain every refusal in a few words.
 *
 * Ranking, best first:
 *   hardware NIC (the provider reports a PCI device or a NIC protocol)
 *   shared memory (only when asked for, or when every peer is local)
 *   transports emulated over the host network stack (tcp, net, udp)
 *   the legacy sockets transport
 * and within a class a non-loopback domain and IPv4 before the others.
 */
#include "fabric/provider.h"

#include "dev/hmem.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REQUIRED_CAPS                                                         \
    (FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_MSG)


enum transport_class {
    CLASS_NIC = 0,
    CLASS_SHM = 1,
    CLASS_HOST_NET = 2,
    CLASS_LEGACY = 3,
};

static const struct {
    unsigned ferry;
    uint64_t fi;
    const char *name;
} mr_bits[] = {
    {FERRY_MR_LOCAL, FI_MR_LOCAL, "LOCAL"},
    {FERRY_MR_VIRT_ADDR, FI_MR_VIRT_ADDR, "VIRT_ADDR"},
    {FERRY_MR_ALLOCATED, FI_MR_ALLOCATED, "ALLOCATED"},
    {FERRY_MR_PROV_KEY, FI_MR_PROV_KEY, "PROV_KEY"},
    {FERRY_MR_ENDPOINT, FI_MR_ENDPOINT, "ENDPOINT"},
    {FERRY_MR_RAW, FI_MR_RAW, "RAW"},
    {FERRY_MR_HMEM, FI_MR_HMEM, "HMEM"},
};

unsigned ferry__mr_mode_from_fi(uint64_t fi_mr_mode)
{
    unsigned m = 0;

    /* FI_MR_BASIC is the pre-1.5 spelling of these three bits. */
    if (fi_mr_mode == FI_MR_BASIC)
        fi_mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    for (size_t i = 0; i < FERRY__ARRAY_LEN(mr_bits); i++)
        if (fi_mr_mode & mr_bits[i].fi)
            m |= mr_bits[i].ferry;
    return m;
}

uint64_t ferry__mr_mode_to_fi(unsigned ferry_mr_mode)
{
    uint64_t m = 0;

    for (size_t i = 0; i < FERRY__ARRAY_LEN(mr_bits); i++)
        if (ferry_mr_mode & mr_bits[i].ferry)
            m |= mr_bits[i].fi;
    return m;
}

const char *ferry__mr_mode_str(unsigned mr_mode, char *buf, size_t len)
{
    size_t used = 0;

    buf[0] = '\0';
    for (size_t i = 0; i < FERRY__ARRAY_LEN(mr_bits); i++) {
        size_t need = strlen(mr_bits[i].name) + (used ? 1 : 0);

        if (!(mr_mode & mr_bits[i].ferry))
            continue;
        if (used + need >= len)
            break; /* whole names only */
        snprintf(buf + used, len - used, "%s%s", used ? "|" : "",
                 mr_bits[i].name);
        used += need;
    }
    if (used == 0)
        snprintf(buf, len, "none");
    return buf;
}

static bool is_nic_protocol(uint32_t proto)
{
    switch (proto) {
    case FI_PROTO_RDMA_CM_IB_RC:
    case FI_PROTO_RDMA_CM_IB_XRC:
    case FI_PROTO_IWARP:
    case FI_PROTO_IWARP_RDM:
    case FI_PROTO_IB_UD:
    case FI_PROTO_IB_RDM:
    case FI_PROTO_PSMX:
    case FI_PROTO_PSMX2:
    case FI_PROTO_PSMX3:
    case FI_PROTO_EFA:
    case FI_PROTO_CXI:
    case FI_PROTO_OPX:
    case FI_PROTO_GNI:
    case FI_PROTO_MLX:
        return true;
    default:
        return false;
    }
}

static enum transport_class classify(const struct fi_info *info)
{
    uint32_t proto = info->ep_attr->protocol;

    if (info->nic != NULL && info->nic->bus_attr != NULL &&
        info->nic->bus_attr->bus_type == FI_BUS_PCI)
        return CLASS_NIC;
    if (is_nic_protocol(proto))
        return CLASS_NIC;
    if (proto == FI_PROTO_SHM)
        return CLASS_SHM;
    if (proto == FI_PROTO_SOCK_TCP)
        return CLASS_LEGACY;
    return CLASS_HOST_NET;
}

static const char *class_words(enum transport_class c)
{
    switch (c) {
    case CLASS_NIC:
        return "an RDMA-capable NIC";
    case CLASS_SHM:
        return "shared memory between processes of this host";
    case CLASS_HOST_NET:
        return "a transport emulated over the host network stack";
    default:
        return "the legacy sockets transport";
    }
}

/* Loopback source address: usable, but only reaches this host. */
static bool is_loopback(const struct fi_info *info)
{
    if (info->src_addr == NULL)
        return false;
    if (info->addr_format == FI_SOCKADDR_IN) {
        const struct sockaddr_in *sin = info->src_addr;
        return (ntohl(sin->sin_addr.s_addr) >> 24) == 127;
    }
    if (info->addr_format == FI_SOCKADDR_IN6) {
        const struct sockaddr_in6 *s6 = info->src_addr;
        return IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr);
    }
    return false;
}

static bool is_ipv6_link_local(const struct fi_info *info)
{
    const struct sockaddr_in6 *s6 = info->src_addr;

    return info->addr_format == FI_SOCKADDR_IN6 && s6 != NULL &&
           IN6_IS_ADDR_LINKLOCAL(&s6->sin6_addr);
}

static bool env_asks_for(const char *prov)
{
    const char *v = getenv("FI_PROVIDER");

    return v != NULL && strstr(v, prov) != NULL;
}

static bool shm_allowed(const struct ferry_config *cfg)
{
    return cfg->local_only ||
           (cfg->provider != NULL && strstr(cfg->provider, "shm") != NULL) ||
           env_asks_for("shm");
}

static struct fi_info *make_hints(const struct ferry_config *cfg,
                                  const char *prov, bool full)
{
    struct fi_info *h = fi_allocinfo();

    if (h == NULL)
        return NULL;
    h->ep_attr->type = FI_EP_RDM;
    if (full) {
        h->caps = REQUIRED_CAPS;
        /* Every operation ferry posts carries a fi_context2 it owns. */
        h->mode = FI_CONTEXT | FI_CONTEXT2;
        /* FI_MR_HMEM only where FI_HMEM is asked for (select_hmem). */
        h->domain_attr->mr_mode = ferry__mr_mode_to_fi(
            (cfg->mr_mode_offer | cfg->mr_mode_force) & ~FERRY_MR_HMEM);
        h->domain_attr->threading = FI_THREAD_DOMAIN;
        /* A write completes when its data is visible at the target, not
         * merely sent: that is what a caller of ferry_req_wait expects. */
        h->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
        h->domain_attr->resource_mgmt = FI_RM_ENABLED;
        if (cfg->domain != NULL)
            h->domain_attr->name = strdup(cfg->domain);
    } else {
        h->mode = ~0ull; /* accept any mode: only asking what exists */
        h->domain_attr->mr_mode = (int)ferry__mr_mode_to_fi(FERRY_MR_ALL);
    }
    if (prov != NULL)
        h->fabric_attr->prov_name = strdup(prov);
    return h;
}

static void append(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void append(char *buf, size_t cap, const char *fmt, ...)
{
    size_t used = strlen(buf);
    va_list ap;

    if (used + 1 >= cap)
        return;
    va_start(ap, fmt);
    vsnprintf(buf + used, cap - used, fmt, ap);
    va_end(ap);
}

/*
 * Why provider `prov` gave no usable candidate: asks fi_getinfo again with
 * fewer demands and names the first missing capability.
 */
static void explain_refusal(const struct ferry_config *cfg, const char *prov,
                            char *out, size_t cap)
{
    struct fi_info *h = make_hints(cfg, prov, false), *all = NULL, *p;
    uint64_t caps = 0;
    bool any = false;

    if (h == NULL)
        return;
    if (fi_getinfo(FERRY__FI_VERSION, NULL, NULL, 0, h, &all) != 0 ||
        all == NULL) {
        snprintf(out, cap, "%s: no device or interface available", prov);
        fi_freeinfo(h);
        return;
    }
    for (p = all; p != NULL; p = p->next) {
        any = true;
        caps |= p->caps;
    }
    if (!any)
        snprintf(out, cap, "%s: no reliable-datagram endpoint", prov);
    else if (!(caps & FI_RMA))
        snprintf(out, cap, "%s: lacks FI_RMA", prov);
    else if ((caps & REQUIRED_CAPS) != REQUIRED_CAPS)
        snprintf(out, cap, "%s: lacks RMA read/write or messages", prov);
    else if (cfg->domain != NULL)
        snprintf(out, cap, "%s: no domain named '%s'", prov, cfg->domain);
    else
        snprintf(out, cap,
                 "%s: needs an mr_mode or mode ferry was told not to offer, "
                 "or cannot complete writes on delivery "
                 "(FI_DELIVERY_COMPLETE)",
                 prov);
    fi_freeinfo(all);
    fi_freeinfo(h);
}

static bool seen_provider(const struct ferry__selection *sel, const char *name)
{
    for (size_t i = 0; i < sel->ncand; i++) {
        const char *p = sel->cand[i].info->fabric_attr->prov_name;
        if (strcmp(p, name) == 0 ||
            (strncmp(p, name, strlen(name)) == 0 && p[strlen(name)] == ';'))
            return true;
    }
    return false;
}

/*
 * The RDMA providers people look for first, named when libfabric did not
 * load them at all (it skips a provider whose device or library is
 * missing), so "why not verbs?" has an answer.  Only a message: nothing
 * is chosen by name.
 */
static void explain_unloaded(struct ferry__selection *sel,
                             const struct fi_info *loaded)
{
    static const char *const wanted[] = {"verbs", "efa", "cxi", "psm3",
                                         "opx"};

    for (size_t i = 0; i < FERRY__ARRAY_LEN(wanted); i++) {
        bool found = false;

        for (const struct fi_info *p = loaded; p != NULL && !found;
             p = p->next)
            found = p->fabric_attr->prov_name != NULL &&
                    strcmp(p->fabric_attr->prov_name, wanted[i]) == 0;
        if (!found && !seen_provider(sel, wanted[i]))
            append(sel->refused, sizeof(sel->refused),
                   "%s%s: not loaded by libfabric (no device or driver, or "
                   "not built in)",
                   sel->refused[0] ? "; " : "", wanted[i]);
    }
}

/* Lists providers libfabric loaded that gave nothing usable, with why. */
static void explain_missing(const struct ferry_config *cfg,
                            struct ferry__selection *sel, bool shm_refused)
{
    struct fi_info *h = fi_allocinfo(), *provs = NULL;
    char why[160];

    if (h == NULL)
        return;
    if (cfg->provider != NULL) {
        if (sel->ncand == 0) {
            explain_refusal(cfg, cfg->provider, why, sizeof(why));
            append(sel->refused, sizeof(sel->refused), "%s", why);
        }
        fi_freeinfo(h);
        return;
    }
    if (fi_getinfo(FERRY__FI_VERSION, NULL, NULL, FI_PROV_ATTR_ONLY, h,
                   &provs) == 0) {
        for (struct fi_info *p = provs; p != NULL; p = p->next) {
            const char *name = p->fabric_attr->prov_name;
            if (name == NULL || seen_provider(sel, name))
                continue;
            if (strncmp(name, "ofi_", 4) == 0)
                continue; /* utility/hook layers appear stacked on a core */
            if (strcmp(name, "shm") == 0 && shm_refused)
                snprintf(why, sizeof(why),
                         "shm: reaches only processes on this host (set "
                         "local_only or ask for it by name)");
            else
                explain_refusal(cfg, name, why, sizeof(why));
            append(sel->refused, sizeof(sel->refused), "%s%s",
                   sel->refused[0] ? "; " : "", why);
        }
        explain_unloaded(sel, provs);
        fi_freeinfo(provs);
    }
    fi_freeinfo(h);
}

static int rank_of(const struct fi_info *info)
{
    return (int)classify(info) * 100 + (is_loopback(info) ? 10 : 0) +
           (is_ipv6_link_local(info) ? 5 : 0) +
           (info->addr_format == FI_SOCKADDR_IN6 ? 1 : 0) +
           (info->ep_attr->protocol == FI_PROTO_RXD ? 20 : 0);
}

static bool same_domain(const struct fi_info *a, const struct fi_info *b)
{
    return strcmp(a->fabric_attr->prov_name, b->fabric_attr->prov_name) ==
               0 &&
           strcmp(a->fabric_attr->name, b->fabric_attr->name) == 0 &&
           strcmp(a->domain_attr->name, b->domain_attr->name) == 0;
}

static int by_rank(const void *a, const void *b)
{
    const struct ferry__candidate *x = a, *y = b;

    return x->rank - y->rank;
}

static int add_candidate(struct ferry__selection *sel, const struct fi_info *p,
                         const char *domain)
{
    struct ferry__candidate *c;

    for (size_t i = 0; i < sel->ncand; i++)
        if (same_domain(sel->cand[i].info, p))
            return 0; /* libfabric lists variants of one domain */
    /* Some utility providers (rxm on 1.17) ignore the domain name hint. */
    if (domain != NULL && strcmp(p->domain_attr->name, domain) != 0)
        return 0;
    c = realloc(sel->cand, (sel->ncand + 1) * sizeof(*c));
    if (c == NULL)
        return FERRY_ENOMEM;
    sel->cand = c;
    c = &sel->cand[sel->ncand];
    c->info = fi_dupinfo(p);
    if (c->info == NULL)
        return FERRY_ENOMEM;
    /* The candidate's position breaks ties: qsort is not stable, and
     * libfabric lists a provider's preferred domains first. */
    c->rank = rank_of(p) * 1000 + (int)sel->ncand;
    c->nic = classify(p) == CLASS_NIC;
    snprintf(c->verdict, sizeof(c->verdict), "%s%s",
             class_words(classify(p)),
             is_loopback(p) ? " on a loopback interface" : "");
    sel->ncand++;
    return 0;
}

/*
 * With a device backend, asks again for domains that register device
 * memory (FI_HMEM; libfabric ignores a registration's iface otherwise)
 * and takes their fi_info instead, so the rail opens with FI_HMEM.
 * Without a backend nothing is asked: a host-only program never loads
 * libcuda through libfabric's FI_HMEM support.
 */
static void select_hmem(const struct ferry_config *cfg,
                        struct ferry__selection *sel)
{
    struct fi_info *hints, *infos = NULL;

    if (ferry__hmem() == NULL ||
        !((cfg->mr_mode_offer | cfg->mr_mode_force) & FERRY_MR_HMEM))
        return;
    hints = make_hints(cfg, cfg->provider, true);
    if (hints == NULL)
        return;
    hints->caps |= FI_HMEM;
    hints->domain_attr->mr_mode |= FI_MR_HMEM;
    if (fi_getinfo(FERRY__FI_VERSION, NULL, NULL, 0, hints, &infos) != 0)
        infos = NULL;
    fi_freeinfo(hints);
    for (struct fi_info *p = infos; p != NULL; p = p->next) {
        for (size_t i = 0; i < sel->ncand; i++) {
            struct ferry__candidate *c = &sel->cand[i];
            struct fi_info *dup;

            if ((c->info->caps & FI_HMEM) || !same_domain(c->info, p) ||
                (dup = fi_dupinfo(p)) == NULL)
                continue;
            fi_freeinfo(c->info);
            c->info = dup;
        }
    }
    fi_freeinfo(infos);
}

int ferry__provider_select(const struct ferry_config *cfg,
                           struct ferry__selection *sel)
{
    struct fi_info *hints, *infos = NULL;
    bool shm_refused = false;
    int ret;

    memset(sel, 0, sizeof(*sel));
    ferry__env_prepare();
    hints = make_hints(cfg, cfg->provider, true);
    if (hints == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory building hints");
    ret = fi_getinfo(FERRY__FI_VERSION, NULL, NULL, 0, hints, &infos);
    fi_freeinfo(hints);
    if (ret != 0 && ret != -FI_ENODATA)
        return ferry__error(ferry__error_from_fi(ret),
                            "fi_getinfo failed: %s", fi_strerror(-ret));
    for (struct fi_info *p = infos; p != NULL; p = p->next) {
        if (classify(p) == CLASS_SHM && !shm_allowed(cfg)) {
            shm_refused = true;
            continue;
        }
        ret = add_candidate(sel, p, cfg->domain);
        if (ret != 0) {
            fi_freeinfo(infos);
            ferry__selection_free(sel);
            return ferry__error(ret, "out of memory listing providers");
        }
    }
    fi_freeinfo(infos);
    explain_missing(cfg, sel, shm_refused);
    if (sel->ncand == 0) {
        const char *fp = getenv("FI_PROVIDER");
        return ferry__error(
            FERRY_ENOPROVIDER,
            "no libfabric provider offers reliable-datagram RMA read/write "
            "here%s%s%s%s%s: %s",
            cfg->provider ? " with provider=" : "",
            cfg->provider ? cfg->provider : "",
            cfg->domain ? " and domain=" : "", cfg->domain ? cfg->domain : "",
            fp ? " (FI_PROVIDER narrows the search)" : "",
            sel->refused[0] ? sel->refused : "fi_getinfo returned nothing");
    }
    select_hmem(cfg, sel);
    qsort(sel->cand, sel->ncand, sizeof(*sel->cand), by_rank);
    return 0;
}

void ferry__selection_free(struct ferry__selection *sel)
{
    for (size_t i = 0; i < sel->ncand; i++)
        fi_freeinfo(sel->cand[i].info);
    free(sel->cand);
    sel->cand = NULL;
    sel->ncand = 0;
}
