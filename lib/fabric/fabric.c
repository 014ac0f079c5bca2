/*
 * The fabric part of a context (fabric.h): its rails opened from the
 * chosen provider's domains, the limits they share, and registration on
 * one rail with ferry's key policy.
 */
#include "fabric/fabric.h"

#include "base/text.h"
#include "fabric/about.h"
#include "fabric/local.h"
#include "fabric/shm_loop.h"
#include "fabric/shm_space.h"

#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Why a domain of shm would not open, where the environment explains it:
 * shm with GPU support (libfabric >= 1.18 built with CUDA) opens a cache
 * of IPC handles with each domain, sized by FI_MR_CACHE_MAX_COUNT, and
 * fails with -FI_ENOSPC when that is 0 (seen on an H200, libfabric 2.1). */
static const char *domain_hint(int ret, const struct ferry__rail *rail)
{
    const char *count = getenv("FI_MR_CACHE_MAX_COUNT");

    if (ret == -FI_ENOSPC && rail->info->ep_attr->protocol == FI_PROTO_SHM &&
        count != NULL && strcmp(count, "0") == 0)
        return " (FI_MR_CACHE_MAX_COUNT=0 is set, and libfabric's shm with "
               "GPU support needs that count for its cache of GPU IPC "
               "handles: unset it; ferry turns libfabric's registration "
               "cache off with FI_MR_CACHE_MONITOR=disabled instead)";
    return "";
}

/* A libfabric call on the rail failed: the error with its sentence, and
 * hint after it ("" for none). */
static int rail_fail_hint(int ret, const struct ferry__rail *rail,
                          const char *call, const char *hint)
{
    return ferry__error(ferry__error_from_fi(ret),
                        "%s on provider %s, domain %s failed: %s%s", call,
                        rail->info->fabric_attr->prov_name,
                        rail->info->domain_attr->name, fi_strerror(-ret),
                        hint);
}

static int rail_fail(int ret, const struct ferry__rail *rail,
                     const char *call)
{
    return rail_fail_hint(ret, rail, call, "");
}

/* shm endpoints get names of ferry's own (shm_loop.h says why). */
static int name_shm_endpoint(struct ferry__rail *rail)
{
    char name[64];

    if (rail->info->ep_attr->protocol != FI_PROTO_SHM ||
        rail->info->addr_format != FI_ADDR_STR)
        return 0;
    ferry__shm_endpoint_name(name, sizeof(name));
    free(rail->info->src_addr);
    rail->info->src_addr = strdup(name);
    if (rail->info->src_addr == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory naming an endpoint");
    rail->info->src_addrlen = strlen(name) + 1;
    return ferry__shm_loop_open(rail->info);
}

/* Tries at an endpoint whose provider found its address in use, where
 * the kernel chose the port (endpoint_open). */
#define ENDPOINT_TRIES 4

/* Whether the endpoint's listener takes a port the kernel chooses: an IP
 * source address without one (tcp, and rxm over it, bind their listening
 * socket there, with SO_REUSEADDR). */
static bool port_from_kernel(const struct fi_info *info)
{
    const struct sockaddr *sa = info->src_addr;

    if (sa == NULL || info->src_addrlen < sizeof(struct sockaddr_in))
        return false;
    if (sa->sa_family == AF_INET)
        return ((const struct sockaddr_in *)sa)->sin_port == 0;
    return sa->sa_family == AF_INET6 &&
           info->src_addrlen >= sizeof(struct sockaddr_in6) &&
           ((const struct sockaddr_in6 *)sa)->sin6_port == 0;
}

/* fi_endpoint to fi_enable: libfabric's code, the failed call in *call. */
static int endpoint_try(struct ferry__rail *rail, const char **call)
{
    int ret;

    rail->ep = NULL;
    *call = "fi_endpoint";
    if ((ret = fi_endpoint(rail->domain, rail->info, &rail->ep, NULL)))
        return ret;
    *call = "fi_ep_bind(av)";
    if ((ret = fi_ep_bind(rail->ep, &rail->av->fid, 0)))
        return ret;
    *call = "fi_ep_bind(cq)";
    if ((ret = fi_ep_bind(rail->ep, &rail->cq->fid, FI_TRANSMIT | FI_RECV)))
        return ret;
    *call = "fi_enable";
    return fi_enable(rail->ep);
}

/*
 * The rail's endpoint, bound to its address vector and CQ, enabled.  A
 * port the kernel chose for its listener can be refused: two listeners
 * given one port by bind() with SO_REUSEADDR, where listen() refuses the
 * second (seen once in CI as fi_enable's "Address already in use"), or
 * no port left in the ephemeral range.  Another try gets another port.
 */
static int endpoint_open(struct ferry__rail *rail)
{
    char hint[160] = "";
    const char *call;
    int ret, tries = 1;

    if ((ret = name_shm_endpoint(rail)))
        return ret;
    while ((ret = endpoint_try(rail, &call)) == -FI_EADDRINUSE &&
           port_from_kernel(rail->info) && tries < ENDPOINT_TRIES) {
        FERRY_LOG_INFO("%s on provider %s: address in use (try %d of %d); "
                       "trying another port",
                       call, rail->info->fabric_attr->prov_name, tries,
                       ENDPOINT_TRIES);
        if (rail->ep != NULL)
            fi_close(&rail->ep->fid);
        tries++;
    }
    if (ret == -FI_EADDRINUSE && tries > 1)
        snprintf(hint, sizeof(hint),
                 " (%d tries, each on a port the kernel chose: are the "
                 "ephemeral ports, net.ipv4.ip_local_port_range, all taken?)",
                 tries);
    if (ret != 0)
        return rail_fail_hint(ret, rail, call, hint);
    if ((ret = ferry__shm_region_reserve_own(rail->info, rail->ep)))
        return ret;
    ferry__shm_mend_open(&rail->mend, rail->info, rail->ep);
    return 0;
}

static int rail_open(struct ferry__fabric *fab, struct ferry__rail *rail)
{
    struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
    struct fi_cq_attr cq_attr = {
        .format = FI_CQ_FORMAT_DATA,
        .wait_obj = FI_WAIT_NONE,
        /* Room for every operation in flight plus incoming messages. */
        .size = ferry__rail_ops_max(fab) + rail->info->rx_attr->size,
    };
    int ret;

    if ((ret = fi_fabric(rail->info->fabric_attr, &rail->fabric, NULL)))
        return rail_fail(ret, rail, "fi_fabric");
    if ((ret = fi_domain(rail->fabric, rail->info, &rail->domain, NULL)))
        return rail_fail_hint(ret, rail, "fi_domain",
                              domain_hint(ret, rail));
    if ((ret = fi_av_open(rail->domain, &av_attr, &rail->av, NULL)))
        return rail_fail(ret, rail, "fi_av_open");
    /* A progress thread sleeps on the CQ's file descriptor when idle, if
     * the provider offers one; otherwise it naps (progress.c). */
    if (fab->cfg.progress_thread) {
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
        return rail_fail(ret, rail, "fi_cq_open");
    if ((ret = endpoint_open(rail)))
        return ret;
    ferry__keyalloc_init(&rail->keys, fab->key_size, ferry__random_u64());
    return 0;
}

static void rail_close_now(struct ferry__rail *rail)
{
    /* Children before parents: libfabric refuses to close a domain with
     * open endpoints (-FI_EBUSY). */
    if (rail->ep)
        fi_close(&rail->ep->fid);
    ferry__shm_mend_close(&rail->mend);
    if (rail->cq)
        fi_close(&rail->cq->fid);
    if (rail->av)
        fi_close(&rail->av->fid);
    if (rail->domain)
        fi_close(&rail->domain->fid);
    if (rail->fabric)
        fi_close(&rail->fabric->fid);
    fi_freeinfo(rail->info);
    memset(rail, 0, sizeof(*rail));
}

/* A kept rail's close (ferry__shm_loop_release). */
static void kept_rail_close(void *arg)
{
    rail_close_now(arg);
    free(arg);
}

/*
 * Closes the rail, or hands it whole to shm_loop when its endpoint is
 * open still because open shm endpoints of this process are connected to
 * it (shm_loop.h): they use its region, which the endpoint's close would
 * unmap.
 */
static void rail_close(struct ferry__rail *rail)
{
    struct ferry__rail *keep = NULL;

    if (ferry__shm_loop_forget(rail->info) && rail->ep != NULL &&
        (keep = malloc(sizeof(*keep))) != NULL)
        *keep = *rail;
    if (ferry__shm_loop_release(rail->info, keep ? kept_rail_close : NULL,
                                keep)) {
        memset(rail, 0, sizeof(*rail));
        return;
    }
    free(keep);
    rail_close_now(rail);
}

/*
 * A rail's share of striped bytes: its link speed in Mbit/s when every
 * rail of its transport reports one (fi_info->nic->link_attr), else an
 * equal share.
 */
static int64_t rail_weight(const struct ferry__fabric *fab, unsigned r)
{
    const struct ferry__transport *t =
        &fab->transports[fab->rails[r].transport];

    for (unsigned i = t->first; i < t->first + t->nrails; i++) {
        const struct fid_nic *nic = fab->rails[i].info->nic;
        if (nic == NULL || nic->link_attr == NULL ||
            nic->link_attr->speed < 1000000)
            return 1;
    }
    return (int64_t)(fab->rails[r].info->nic->link_attr->speed / 1000000);
}

/*
 * The largest operation ferry posts unless config.max_msg_size says
 * otherwise: on tcp here, 4 MiB blocks move 30-45 % more as 512 KiB-1 MiB
 * operations than as single ones (docs/performance.md), shm does not
 * care, and at hundreds of Gbit/s a 1 MiB operation still takes tens of
 * microseconds against about one to post it.
 */
#define DEFAULT_MAX_OP (1u << 20)

size_t ferry__shm_first_rail_writes(const struct fi_info *info,
                                    unsigned endpoints, uint32_t fi_runtime)
{
    if (info->ep_attr->protocol != FI_PROTO_SHM || endpoints < 2 ||
        !FI_VERSION_GE(fi_runtime, FI_VERSION(2, 5)))
        return 0;
    return info->tx_attr->inject_size;
}

size_t ferry__shm_covered_writes(const struct fi_info *info,
                                 uint32_t fi_runtime)
{
    uint64_t order = info->tx_attr->msg_order & info->rx_attr->msg_order;

    if (info->ep_attr->protocol != FI_PROTO_SHM ||
        FI_VERSION_GE(fi_runtime, FI_VERSION(2, 5)) ||
        !(order & FI_ORDER_WAW))
        return 0;
    return info->tx_attr->inject_size;
}

/* What the transport's provider says of its ordering and mr_mode. */
static void derive_transport(struct ferry__fabric *fab,
                             struct ferry__transport *t)
{
    const struct fi_info *info = fab->rails[t->first].info;
    uint64_t order = info->tx_attr->msg_order & info->rx_attr->msg_order;

    t->mr_mode = ferry__mr_mode_from_fi(info->domain_attr->mr_mode);
    /* Forced bits are the network transport's: the shm one stands
     * beside it only without them (local.c). */
    if (t == &fab->transports[0])
        t->mr_mode |= fab->cfg.mr_mode_force;
    t->shm = info->ep_attr->protocol == FI_PROTO_SHM;
    t->notify_ordered = t->nrails == 1 && (order & FI_ORDER_SAW) != 0;
    t->writes_ordered = t->nrails == 1 && (order & FI_ORDER_WAW) != 0;
    t->covered_writes = ferry__shm_covered_writes(info, fi_version());
}

/* ferry__transport.device_max_op: the provider's own limit on shm. */
static size_t device_max_op(const struct ferry__fabric *fab,
                            const struct ferry__transport *t)
{
    size_t max_op = SIZE_MAX;

    if (!t->shm)
        return fab->max_msg;
    for (unsigned i = t->first; i < t->first + t->nrails; i++) {
        size_t rail_max = fab->rails[i].info->ep_attr->max_msg_size;
        if (rail_max < max_op)
            max_op = rail_max;
    }
    /* Never below max_msg: that is the least of these already. */
    if (fab->cfg.max_msg_size != 0 && fab->cfg.max_msg_size < max_op)
        max_op = fab->cfg.max_msg_size;
    return max_op;
}

/* The limits every rail shares: the most restrictive of them all. */
static void derive_limits(struct ferry__fabric *fab)
{
    const struct ferry_config *cfg = &fab->cfg;
    size_t max_msg = SIZE_MAX, tx = SIZE_MAX, key = SIZE_MAX;

    for (unsigned t = 0; t < fab->ntransports; t++)
        derive_transport(fab, &fab->transports[t]);
    fab->mr_mode = fab->transports[0].mr_mode;
    for (unsigned i = 0; i < fab->nrails; i++) {
        const struct fi_info *r = fab->rails[i].info;
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
    if (!(fab->mr_mode & FERRY_MR_RAW) && key > 8)
        key = 8;
    fab->max_msg = max_msg ? max_msg : 1;
    fab->tx_depth = tx ? tx : 1;
    fab->key_size = key ? key : 1;
    for (unsigned t = 0; t < fab->ntransports; t++)
        fab->transports[t].device_max_op =
            device_max_op(fab, &fab->transports[t]);
    for (unsigned i = 0; i < fab->nrails; i++)
        fab->rails[i].weight = rail_weight(fab, i);
}

/* Why the network transport has several endpoints on each domain, and
 * which writes keep to the first. */
static void explain_endpoints(struct ferry__fabric *fab,
                              const struct ferry__transport *net)
{
    size_t small = net->first_rail_writes;

    ferry__appendf(fab->why, sizeof(fab->why),
                   "; %u endpoints on each domain, each a rail (%s)",
                   net->endpoints,
                   fab->cfg.endpoints_per_domain != 0
                       ? "config.endpoints_per_domain"
                   : small != 0 ? "shm moves large transfers faster over two"
                                : "shm moves one small write to a peer at a "
                                  "time per endpoint");
    if (small != 0)
        ferry__appendf(fab->why, sizeof(fab->why),
                       "; writes of up to %zu bytes keep to the first "
                       "(libfabric %u.%u's shm copies each into an inject "
                       "buffer, holding none back)",
                       small, FI_MAJOR(fi_version()), FI_MINOR(fi_version()));
}

static void explain_choice(struct ferry__fabric *fab,
                           const struct ferry__selection *sel,
                           const char *rails_why)
{
    const struct fi_info *info = fab->rails[0].info;
    const struct ferry__transport *net = &fab->transports[0];
    const char *fp = getenv("FI_PROVIDER");
    const char *prov = info->fabric_attr->prov_name;
    char source[FERRY__NAME_MAX + 320] = "", about[256];

    ferry__provider_about(prov, fi_version(), about, sizeof(about));
    if (fab->cfg.provider != NULL && strcmp(fab->cfg.provider, prov) != 0)
        snprintf(source, sizeof(source),
                 "; provider '%s' named by the config, which here is %s: %s",
                 fab->cfg.provider, prov, about);
    else if (fab->cfg.provider != NULL)
        snprintf(source, sizeof(source),
                 "; provider named by the config (%s)", about);
    else if (fp != NULL)
        snprintf(source, sizeof(source), "; FI_PROVIDER=%s narrowed the "
                 "search", fp);
    snprintf(fab->why, sizeof(fab->why),
             "chose %s on domain %s (fabric %s): %s, best of %zu "
             "candidate%s%s%s",
             prov, info->domain_attr->name, info->fabric_attr->name,
             sel->cand[0].verdict, sel->ncand, sel->ncand == 1 ? "" : "s",
             source, rails_why);
    for (unsigned r = 1; r < net->nrails / net->endpoints; r++)
        ferry__appendf(fab->why, sizeof(fab->why), "%s%s",
                       r == 1 ? "; further rails: " : ", ",
                       fab->rails[r].info->domain_attr->name);
    if (net->endpoints > 1)
        explain_endpoints(fab, net);
}

/*
 * A forced FERRY_MR_VIRT_ADDR must be the provider's own: on a provider
 * that addresses remote memory by offset, every operation would miss
 * (other forced bits fail loudly where they are used, or only add work).
 */
static int check_forced_modes(const struct ferry__fabric *fab)
{
    const struct fi_info *info = fab->rails[0].info;
    unsigned own = ferry__mr_mode_from_fi((uint64_t)info->domain_attr->mr_mode);

    if (!(fab->cfg.mr_mode_force & FERRY_MR_VIRT_ADDR) ||
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
static bool domain_taken(const struct ferry__fabric *fab, const char *domain)
{
    for (unsigned r = 0; r < fab->nrails; r++)
        if (strcmp(fab->rails[r].info->domain_attr->name, domain) == 0)
            return true;
    return false;
}

/*
 * Rails: the best candidate, then the next best other domains of the same
 * provider and address family (one rail per NIC: libfabric lists a domain
 * once per address family, and two rails on one NIC only share it).
 */
static void pick_rails(struct ferry__fabric *fab,
                       struct ferry__selection *sel, unsigned max_domains)
{
    /* A copy: the rail takes cand[0]'s fi_info and NULLs it there. */
    const struct ferry__candidate first = sel->cand[0];
    unsigned end = fab->nrails + max_domains;

    for (size_t i = 0; i < sel->ncand && fab->nrails < end &&
                       fab->nrails < FERRY__MAX_RAILS;
         i++) {
        if (!ferry__rail_mates(&first, &sel->cand[i]) ||
            domain_taken(fab, sel->cand[i].info->domain_attr->name))
            continue;
        /* Ownership of the fi_info moves to the rail. */
        fab->rails[fab->nrails].index = fab->nrails;
        fab->rails[fab->nrails].transport = fab->ntransports;
        fab->rails[fab->nrails++].info = sel->cand[i].info;
        sel->cand[i].info = NULL;
    }
}

/*
 * Endpoints per domain: the config's, else 2 on shm, whose endpoint
 * moves one write of up to 4 KiB to a peer at a time (libfabric 1.17's
 * shm sends such a write, asked to complete on delivery, through its SAR
 * protocol and pushes back the next while one is under way); a second
 * endpoint lets another go meanwhile.  From libfabric 2.5 such writes
 * keep to the first endpoint (ferry__shm_first_rail_writes) and the
 * second serves larger transfers, which still move faster over two.
 * docs/performance.md measures both.
 */
static unsigned endpoints_per_domain(const struct ferry__fabric *fab,
                                     const struct fi_info *info)
{
    if (fab->cfg.endpoints_per_domain != 0)
        return fab->cfg.endpoints_per_domain;
    return info->ep_attr->protocol == FI_PROTO_SHM ? 2 : 1;
}

/* Further endpoints on the transport's domains, each a rail of its own,
 * as many on every domain, FERRY__MAX_RAILS rails in all at most; and
 * which writes keep to the first of them. */
static int add_endpoint_rails(struct ferry__fabric *fab,
                              struct ferry__transport *t)
{
    unsigned domains = fab->nrails - t->first;
    unsigned per = endpoints_per_domain(fab, fab->rails[t->first].info);
    unsigned room = FERRY__MAX_RAILS - t->first;

    if (per > room / domains)
        per = room / domains;
    t->endpoints = per;
    t->first_rail_writes = ferry__shm_first_rail_writes(
        fab->rails[t->first].info, per, fi_version());
    for (unsigned e = 1; e < per; e++)
        for (unsigned d = 0; d < domains; d++) {
            struct fi_info *copy = fi_dupinfo(fab->rails[t->first + d].info);

            if (copy == NULL)
                return ferry__error(FERRY_ENOMEM,
                                    "out of memory for a further endpoint");
            fab->rails[fab->nrails].index = fab->nrails;
            fab->rails[fab->nrails].transport = fab->ntransports;
            fab->rails[fab->nrails++].info = copy;
        }
    return 0;
}

/* A transport of sel's best candidate and up to max_domains of its
 * domains, after the rails there are. */
static int add_transport(struct ferry__fabric *fab,
                         struct ferry__selection *sel, unsigned max_domains)
{
    struct ferry__transport *t = &fab->transports[fab->ntransports];
    int ret;

    t->first = fab->nrails;
    pick_rails(fab, sel, max_domains);
    ret = add_endpoint_rails(fab, t);
    t->nrails = fab->nrails - t->first;
    fab->ntransports++;
    return ret;
}

/* Shared memory for the peers of this host, beside a network provider,
 * where local.c finds it wanted and usable; fab->local_why says. */
static int add_local_transport(struct ferry__fabric *fab)
{
    struct ferry__selection sel;
    int ret;

    if (fab->nrails >= FERRY__MAX_RAILS) {
        snprintf(fab->local_why, sizeof(fab->local_why),
                 "peers on this host use %s too: its rails take all %d "
                 "rails a context has, none is left for shared memory",
                 fab->rails[0].info->fabric_attr->prov_name,
                 FERRY__MAX_RAILS);
        return 0;
    }
    if (!ferry__local_select(&fab->cfg, fab->rails[0].info,
                             ferry__mr_mode_from_fi(
                                 fab->rails[0].info->domain_attr->mr_mode) |
                                 fab->cfg.mr_mode_force,
                             &sel, fab->local_why, sizeof(fab->local_why)))
        return 0;
    ret = add_transport(fab, &sel, 1);
    ferry__selection_free(&sel);
    return ret;
}

/*
 * The local transport's rails, opened after the network's.  One that fails
 * (shm's domain with /dev/shm full, or with libfabric's GPU IPC cache
 * sized to nothing by FI_MR_CACHE_MAX_COUNT=0) leaves the context without
 * it: peers on this host then use the network provider like the others,
 * and fab->local_why says why.  The limits derived with it stay: they are
 * the tighter ones, and the network rails' queues were sized by them.
 */
static void open_local_rails(struct ferry__fabric *fab)
{
    struct ferry__transport *local = &fab->transports[1];
    unsigned end = local->first + local->nrails;
    int ret = 0;

    for (unsigned i = local->first; i < end && ret == 0; i++)
        ret = rail_open(fab, &fab->rails[i]);
    if (ret == 0)
        return;
    snprintf(fab->local_why, sizeof(fab->local_why),
             "peers on this host use %s too: shared memory did not open "
             "(%s)",
             fab->rails[0].info->fabric_attr->prov_name, ferry_last_error());
    FERRY_LOG_WARN("%s", fab->local_why);
    /* Said there: the context opens all the same. */
    ferry__error_clear();
    for (unsigned i = local->first; i < end; i++)
        rail_close(&fab->rails[i]);
    fab->nrails = local->first;
    fab->ntransports = 1;
    memset(local, 0, sizeof(*local));
}

int ferry__fabric_open(struct ferry__fabric *fab,
                       struct ferry__selection *sel, const char *rails_why)
{
    int ret;

    fab->register_local = sel->cand[0].nic;
    if ((ret = add_transport(fab, sel, fab->cfg.max_rails)))
        return ret;
    explain_choice(fab, sel, rails_why);
    if ((ret = add_local_transport(fab)))
        return ret;
    derive_limits(fab);
    fab->register_local |= (fab->mr_mode & FERRY_MR_LOCAL) != 0;
    ret = check_forced_modes(fab);
    for (unsigned i = 0; i < fab->transports[0].nrails && ret == 0; i++)
        ret = rail_open(fab, &fab->rails[i]);
    if (ret == 0 && fab->ntransports > 1)
        open_local_rails(fab);
    ferry__appendf(fab->why, sizeof(fab->why), "; %s", fab->local_why);
    return ret;
}

void ferry__fabric_close_endpoints(struct ferry__fabric *fab)
{
    for (unsigned i = 0; i < fab->nrails; i++) {
        struct ferry__rail *rail = &fab->rails[i];

        /* Forgotten first, so that no context of this process adds it as
         * a peer from now on; one connected to it already keeps it open
         * (rail_close). */
        if (rail->ep && !ferry__shm_loop_forget(rail->info)) {
            fi_close(&rail->ep->fid);
            rail->ep = NULL;
        }
    }
}

void ferry__fabric_close(struct ferry__fabric *fab)
{
    for (unsigned i = 0; i < fab->nrails; i++)
        rail_close(&fab->rails[i]);
}

/* ---- registration on one rail -------------------------------------------- */

/*
 * Bound on retries when the provider says a requested key is taken: the
 * whole key space of small keys (up to 2 bytes), else this many, which a
 * counter over 4+ byte keys never needs unless nearly all are taken.
 */
#define KEY_RETRIES 65536u

static int regattr(struct ferry__fabric *fab, struct ferry__rail *rail,
                   struct fi_mr_attr *attr, uint64_t flags,
                   struct fid_mr **mr)
{
    /*
     * Whether the provider itself picks keys.  This is the provider's own
     * mr_mode, not fab->mr_mode: FERRY_MR_PROV_KEY forced on a provider
     * that honours requested_key (tcp, shm) used to leave every
     * requested_key at 0, so the second registration failed with
     * -FI_ENOKEY (reported as FERRY_EPROTO).  Forced, ferry still reads
     * the key back with fi_mr_key() and treats it as opaque.
     */
    bool prov_key = rail->info->domain_attr->mr_mode & FI_MR_PROV_KEY;
    uint64_t tries = ferry__keyalloc_space(&rail->keys);
    int ret;

    if (tries > KEY_RETRIES)
        tries = KEY_RETRIES;
    for (uint64_t i = 0;; i++) {
        if (!prov_key)
            attr->requested_key = ferry__keyalloc_next(&rail->keys);
        ret = fi_mr_regattr(rail->domain, attr, flags, mr);
        if (ret != -FI_ENOKEY || prov_key)
            break;
        if (i + 1 >= tries)
            return ferry__error(
                FERRY_ENOSPC,
                "no free memory key on domain %s: tried %llu of the %zu-byte "
                "key space and all are in use; deregister regions or use a "
                "provider with larger keys",
                rail->info->domain_attr->name, (unsigned long long)tries,
                fab->key_size);
    }
    if (ret != 0)
        return ferry__error(ferry__error_from_fi(ret),
                            "fi_mr_regattr of %s memory on domain %s failed: "
                            "%s",
                            attr->iface == FI_HMEM_SYSTEM ? "host" : "CUDA",
                            rail->info->domain_attr->name, fi_strerror(-ret));
    return 0;
}

/* FI_MR_ENDPOINT: a registration is usable only once bound and enabled. */
static int bind_to_endpoint(struct ferry__rail *rail, struct fid_mr *mr)
{
    int ret = fi_mr_bind(mr, &rail->ep->fid, 0);

    if (ret == 0)
        ret = fi_mr_enable(mr);
    /* Not implemented (tcp and shm on 1.17 answer -FI_ENOSYS): only a
     * forced FERRY_MR_ENDPOINT gets here, so say what to change. */
    if (ret == -FI_ENOSYS || ret == -FI_EOPNOTSUPP)
        return ferry__error(FERRY_ENOTSUP,
                            "provider %s on domain %s does not implement "
                            "fi_mr_bind/fi_mr_enable, so it cannot bind "
                            "registrations to endpoints (FI_MR_ENDPOINT); "
                            "do not force FERRY_MR_ENDPOINT for it",
                            rail->info->fabric_attr->prov_name,
                            rail->info->domain_attr->name);
    if (ret != 0)
        return ferry__error(ferry__error_from_fi(ret),
                            "binding a registration to the endpoint of "
                            "domain %s (FI_MR_ENDPOINT) failed: %s",
                            rail->info->domain_attr->name, fi_strerror(-ret));
    return 0;
}

int ferry__mr_open(struct ferry__fabric *fab, struct ferry__rail *rail,
                   struct fi_mr_attr *attr, uint64_t flags,
                   struct fid_mr **mr)
{
    int ret;

    FERRY__ASSERT_LOCKED(&fab->lock);
    ret = regattr(fab, rail, attr, flags, mr);

    if (ret == 0 &&
        (ferry__transport_of(fab, rail)->mr_mode & FERRY_MR_ENDPOINT) &&
        (ret = bind_to_endpoint(rail, *mr)) != 0) {
        fi_close(&(*mr)->fid);
        *mr = NULL;
    }
    return ret;
}
