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

#include "base/text.h"
#include "dev/hmem.h"
#include "fabric/about.h"
#include "fabric/mr_mode.h"
#include "fabric/refusal.h"
#include "fabric/route.h"
#include "fabric/shm_space.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


enum transport_class {
    CLASS_NIC = 0,
    CLASS_SHM = 1,
    CLASS_HOST_NET = 2,
    CLASS_LEGACY = 3,
};

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
    return info->src_addr != NULL &&
           ferry__addr_is_loopback(info->addr_format, info->src_addr,
                                   info->src_addrlen, NULL, 0);
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

/* fi_getinfo hints asking for everything ferry needs from prov (NULL:
 * any provider). */
static struct fi_info *make_hints(const struct ferry_config *cfg,
                                  const char *prov)
{
    struct fi_info *h = fi_allocinfo();

    if (h == NULL)
        return NULL;
    h->ep_attr->type = FI_EP_RDM;
    h->caps = FERRY__REQUIRED_CAPS;
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
    if (prov != NULL)
        h->fabric_attr->prov_name = strdup(prov);
    return h;
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

/* What ranks and describes a candidate besides its own fi_info. */
struct rank_facts {
    const char *domain;              /* the config's domain, or NULL */
    const struct ferry__route *route; /* to the config's peer host, or NULL */
};

/*
 * Candidates of a transport over the host network stack whose interface
 * is off the route to the peer come after all others (the ranks above
 * stay below 10^6).  Hardware NICs are left alone: the bootstrap often
 * runs over a management network while RDMA NICs sit on subnets of their
 * own, and their rank already puts them first.
 */
#define RANK_OFF_ROUTE 1000000

static void route_verdict(const struct rank_facts *f,
                          struct ferry__candidate *c)
{
    const struct ferry__route *r = f->route;

    switch (ferry__route_match(r, c->info)) {
    case FERRY__ROUTE_ON:
        ferry__appendf(c->verdict, sizeof(c->verdict),
                       "; the interface that routes to %s", r->to);
        break;
    case FERRY__ROUTE_OFF:
        c->rank += RANK_OFF_ROUTE;
        c->off_route = true;
        ferry__appendf(c->verdict, sizeof(c->verdict),
                       "; not on the route to %s (that leaves "
                       "from %s%s%s)",
                       r->to, r->local_text, r->ifname[0] ? " on " : "",
                       r->ifname);
        break;
    default:
        break;
    }
}

static int add_candidate(struct ferry__selection *sel, const struct fi_info *p,
                         const struct rank_facts *f)
{
    struct ferry__candidate *c;

    for (size_t i = 0; i < sel->ncand; i++)
        if (same_domain(sel->cand[i].info, p))
            return 0; /* libfabric lists variants of one domain */
    /* Some utility providers (rxm on 1.17) ignore the domain name hint. */
    if (f->domain != NULL && strcmp(p->domain_attr->name, f->domain) != 0)
        return 0;
    c = realloc(sel->cand, (sel->ncand + 1) * sizeof(*c));
    if (c == NULL)
        return FERRY_ENOMEM;
    sel->cand = c;
    c = &sel->cand[sel->ncand];
    memset(c, 0, sizeof(*c));
    c->info = fi_dupinfo(p);
    if (c->info == NULL)
        return FERRY_ENOMEM;
    /* The candidate's position breaks ties: qsort is not stable, and
     * libfabric lists a provider's preferred domains first. */
    c->rank = rank_of(p) * 1000 + (int)sel->ncand;
    c->nic = classify(p) == CLASS_NIC;
    snprintf(c->verdict, sizeof(c->verdict), "%s%s%s%s",
             class_words(classify(p)),
             is_loopback(p) ? " on a loopback interface" : "",
             classify(p) == CLASS_SHM ? "; " : "",
             classify(p) == CLASS_SHM ? sel->shm_room : "");
    if (f->route != NULL && classify(p) >= CLASS_HOST_NET)
        route_verdict(f, c);
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
    hints = make_hints(cfg, cfg->provider);
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

/*
 * Before libfabric 2.5, asks shm again for endpoints that place a peer's
 * writes in order (FI_ORDER_WAW) and takes their fi_info instead: then a
 * request's small writes need not each wait for their delivery
 * (ferry__shm_covered_writes).  The ordering costs shm nothing measurable
 * (docs/performance.md); without it 1.17-2.4's shm copies a write that
 * does not wait with process_vm_writev from the initiator, which is
 * slower than its inject buffers.  The ordered endpoints address remote
 * memory by offset: not where the configuration forces virtual addresses.
 * Nor where shm registers device memory (FI_HMEM): its CUDA IPC path was
 * measured on the endpoints it offers unasked (docs/gpu.md).
 */
static void select_ordered_shm(const struct ferry_config *cfg,
                               struct ferry__selection *sel)
{
    for (size_t i = 0; i < sel->ncand; i++) {
        struct ferry__candidate *c = &sel->cand[i];
        struct fi_info *hints, *infos = NULL;

        if (c->info->ep_attr->protocol != FI_PROTO_SHM ||
            FI_VERSION_GE(fi_version(), FI_VERSION(2, 5)) ||
            (c->info->caps & FI_HMEM) ||
            (cfg->mr_mode_force & FERRY_MR_VIRT_ADDR) ||
            (c->info->tx_attr->msg_order & FI_ORDER_WAW))
            continue;
        if ((hints = make_hints(cfg, c->info->fabric_attr->prov_name)) ==
            NULL)
            return;
        hints->tx_attr->msg_order = FI_ORDER_WAW;
        hints->rx_attr->msg_order = FI_ORDER_WAW;
        if (fi_getinfo(FERRY__FI_VERSION, NULL, NULL, 0, hints, &infos) != 0)
            infos = NULL;
        fi_freeinfo(hints);
        for (struct fi_info *p = infos; p != NULL; p = p->next) {
            struct fi_info *dup;

            if (!same_domain(c->info, p) || (dup = fi_dupinfo(p)) == NULL)
                continue;
            fi_freeinfo(c->info);
            c->info = dup;
            break;
        }
        fi_freeinfo(infos);
    }
}

/*
 * Keeps the candidates of infos that ferry may use; shm only where peers
 * are local and /dev/shm has room for it.
 */
static int add_candidates(const struct ferry_config *cfg,
                          struct ferry__selection *sel,
                          const struct fi_info *infos,
                          const struct ferry__route *route, bool *shm_refused)
{
    struct rank_facts f = {cfg->domain, route};
    int ret;

    for (const struct fi_info *p = infos; p != NULL; p = p->next) {
        if (classify(p) == CLASS_SHM && !shm_allowed(cfg)) {
            *shm_refused = true;
            continue;
        }
        if (classify(p) == CLASS_SHM && !sel->shm_fits) {
            if (!ferry__refused_already(sel, p->fabric_attr->prov_name))
                ferry__refuse(sel, p->fabric_attr->prov_name, "%s",
                              sel->shm_room);
            continue;
        }
        if ((ret = add_candidate(sel, p, &f)) != 0)
            return ret;
    }
    return 0;
}

/*
 * Where peers reach this context from: the route to the config's peer
 * host; else, unless every peer is on this host (local_only), the route
 * to the metadata service it will meet them through (its first host),
 * else the default route's interface, so that what the context publishes
 * is an address peers on other hosts can reach.
 * Returns 1 with route set, 0 when none is known, or the peer host's
 * error (a metadata host that does not resolve is left to the metadata
 * service to report).
 */
static int route_to_peers(const struct ferry_config *cfg,
                          struct ferry__route *route)
{
    char meet[256];
    int ret;

    if (cfg->peer_host != NULL)
        return (ret = ferry__route_to(cfg->peer_host, route)) != 0 ? ret : 1;
    if (cfg->local_only)
        return 0;
    if (ferry__route_meeting_host(cfg->metadata, meet, sizeof(meet)) &&
        ferry__route_to(meet, route) == 0) {
        snprintf(route->to, sizeof(route->to),
                 "the metadata service at %s", meet);
        return 1;
    }
    ferry__error_clear();
    return ferry__route_default(route) ? 1 : 0;
}

int ferry__provider_select(const struct ferry_config *cfg,
                           struct ferry__selection *sel)
{
    struct fi_info *hints, *infos = NULL;
    struct ferry__route route;
    bool shm_refused = false;
    int ret, routed;

    memset(sel, 0, sizeof(*sel));
    ferry__env_prepare();
    sel->shm_fits = ferry__shm_space_check(sel->shm_room,
                                           sizeof(sel->shm_room));
    if ((routed = route_to_peers(cfg, &route)) < 0)
        return routed;
    hints = make_hints(cfg, cfg->provider);
    if (hints == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory building hints");
    ret = fi_getinfo(FERRY__FI_VERSION, NULL, NULL, 0, hints, &infos);
    fi_freeinfo(hints);
    if (ret != 0 && ret != -FI_ENODATA)
        return ferry__error(ferry__error_from_fi(ret),
                            "fi_getinfo failed: %s", fi_strerror(-ret));
    ret = add_candidates(cfg, sel, infos, routed == 1 ? &route : NULL,
                         &shm_refused);
    fi_freeinfo(infos);
    if (ret != 0) {
        ferry__selection_free(sel);
        return ferry__error(ret, "out of memory listing providers");
    }
    ferry__explain_refusals(cfg, sel, shm_refused);
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
    select_ordered_shm(cfg, sel);
    qsort(sel->cand, sel->ncand, sizeof(*sel->cand), by_rank);
    return 0;
}

bool ferry__rail_mates(const struct ferry__candidate *first,
                       const struct ferry__candidate *c)
{
    return strcmp(c->info->fabric_attr->prov_name,
                  first->info->fabric_attr->prov_name) == 0 &&
           c->info->addr_format == first->info->addr_format &&
           c->off_route == first->off_route;
}

void ferry__selection_free(struct ferry__selection *sel)
{
    for (size_t i = 0; i < sel->ncand; i++)
        fi_freeinfo(sel->cand[i].info);
    free(sel->cand);
    sel->cand = NULL;
    sel->ncand = 0;
}
