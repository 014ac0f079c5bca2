/*
 * Peers: the context's address blob written, and peers' address blobs
 * turned into address-vector entries, one per rail.
 *
 * Address blob fields (after the common header, see blob.c):
 *   str host name | u64 shm key | u64 net key (base/host.h)
 *   | u16 transports | transports x (str provider | u16 rails
 *     | rails x (u32 addr_format | u16 len | bytes)
 *     | the heartbeat word on it (fabric/pulse.h))
 * Transport 0 is the context's provider; a second is shared memory for
 * the peers of its host (fabric/local.c).  ferry_peer_add takes the
 * transport both sides have that suits where the peer is.
 */
#include "reg/peer.h"

#include "base/blob.h"
#include "base/host.h"
#include "base/text.h"
#include "fabric/route.h"
#include "fabric/shm_guard.h"
#include "fabric/shm_loop.h"
#include "fabric/shm_space.h"

#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fi_cm.h>

static const char *format_name(uint32_t fmt)
{
    switch (fmt) {
    case FI_SOCKADDR_IN:
        return "IPv4";
    case FI_SOCKADDR_IN6:
        return "IPv6";
    case FI_SOCKADDR_IB:
        return "InfiniBand";
    case FI_ADDR_STR:
        return "string";
    default:
        return "provider-specific";
    }
}

/* One transport's section of the address blob; under the lock. */
static int put_transport(struct ferry__blob_writer *w,
                         const struct ferry__fabric *fab,
                         const struct ferry__transport *t)
{
    const struct ferry__rail *first = &fab->rails[t->first];

    ferry__blob_put_str(w, first->info->fabric_attr->prov_name);
    ferry__blob_put_u16(w, (uint16_t)t->nrails);
    for (unsigned i = t->first; i < t->first + t->nrails; i++) {
        const struct ferry__rail *rail = &fab->rails[i];
        uint8_t name[FERRY__ADDR_MAX];
        size_t nlen = sizeof(name);
        int ret = fi_getname(&rail->ep->fid, name, &nlen);

        if (ret != 0)
            return ferry__error(ferry__error_from_fi(ret),
                                "fi_getname on domain %s failed: %s",
                                rail->info->domain_attr->name,
                                fi_strerror(-ret));
        ferry__blob_put_u32(w, rail->info->addr_format);
        ferry__blob_put_u16(w, (uint16_t)nlen);
        ferry__blob_put_bytes(w, name, nlen);
    }
    ferry__pulse_put(w, fab, t);
    return 0;
}

int ferry_context_address(ferry_context_t *ctx, void *buf, size_t *len)
{
    struct ferry__fabric *fab = ferry__fabric_of(ctx);
    const struct ferry__host *self = ferry__host_self();
    struct ferry__blob_writer w;
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_ctx(ctx, "ferry_context_address")))
        return ret;
    if (len == NULL)
        return ferry__error(FERRY_EINVAL,
                            "ferry_context_address: len is NULL");
    ferry__blob_begin(&w, buf, *len, FERRY__BLOB_ADDR);
    ferry__blob_put_str(&w, self->name);
    ferry__blob_put_u64(&w, self->shm_key);
    ferry__blob_put_u64(&w, self->net_key);
    ferry__blob_put_u16(&w, (uint16_t)fab->ntransports);
    /* The endpoints are FI_THREAD_DOMAIN: fi_getname is serialised with
     * posting and polling like every other endpoint call. */
    ferry__lock_acquire(&fab->lock);
    for (unsigned t = 0; t < fab->ntransports && ret == 0; t++)
        ret = put_transport(&w, fab, &fab->transports[t]);
    ferry__lock_release(&fab->lock);
    return ret != 0 ? ret : ferry__blob_end(&w, len);
}

/* Says in hint why an address may not have gone into rail's address
 * vector: the context has as many peers as the domain takes endpoints
 * (shm: 256).  Empty where it has fewer. */
static void full_av_hint(const struct ferry__reg *reg,
                         const struct ferry__rail *rail, char *hint,
                         size_t len)
{
    size_t limit = rail->info->domain_attr->ep_cnt, peers = 0;

    hint[0] = '\0';
    for (const struct ferry_peer *p = reg->peers; p != NULL; p = p->next)
        peers++;
    if (limit != 0 && peers >= limit)
        snprintf(hint, len, " (this context already has %zu peers, as "
                 "many as the domain's address vector takes, its ep_cnt: "
                 "spread the peers over more contexts, or use another "
                 "provider)", peers);
}

/* The peer's host, as its address blob says. */
struct peer_host {
    char name[FERRY__HOST_NAME_MAX];
    uint64_t shm_key, net_key;
};

/* A context on shared memory reaches only processes of this host: a peer
 * on another is refused now, not declared unreachable seconds later. */
static int check_shm_reach(const struct ferry__rail *rail,
                           const struct peer_host *host)
{
    const struct ferry__host *self = ferry__host_self();

    if (rail->info->ep_attr->protocol != FI_PROTO_SHM ||
        host->shm_key == self->shm_key)
        return 0;
    return ferry__error(
        FERRY_EHOSTUNREACH,
        "the peer is on host '%s', another host than this one ('%s'%s), "
        "and this context uses %s, shared memory, which reaches only "
        "processes that share this host's /dev/shm: create the context "
        "without local_only, FERRY_PROVIDER=shm or FI_PROVIDER=shm, so that "
        "ferry picks a network provider (ferry_info lists them)",
        host->name, self->name,
        strcmp(host->name, self->name) == 0
            ? ", the same name, but another /dev/shm or PID namespace: "
              "a container of its own"
            : "",
        rail->info->fabric_attr->prov_name);
}

/* A loopback address leads to the peer only from its own network
 * namespace: from anywhere else it is refused with the fix. */
static int check_loopback_reach(uint32_t fmt, const uint8_t *name, size_t len,
                                const struct peer_host *host)
{
    const struct ferry__host *self = ferry__host_self();
    char text[64];

    if (host->net_key == self->net_key ||
        !ferry__addr_is_loopback(fmt, name, len, text, sizeof(text)))
        return 0;
    return ferry__error(
        FERRY_EHOSTUNREACH,
        "the peer on host '%s' published the loopback address %s, which "
        "leads only to processes of its own host, not from here ('%s'): on "
        "the peer, do not set FERRY_PEER_HOST or config.peer_host to a "
        "loopback address (nor local_only) when peers on other hosts reach "
        "it; ferry then publishes the interface of the route to its "
        "metadata service or of the default route",
        host->name, text, self->name);
}

/* peer->label: its host's name and its address on rail. */
static void label_peer(const struct ferry__rail *rail, const uint8_t *addr,
                       const struct peer_host *host, struct ferry_peer *peer)
{
    char text[FERRY__ADDR_MAX];
    size_t len = sizeof(text);

    if (fi_av_straddr(rail->av, addr, text, &len) == NULL)
        snprintf(text, sizeof(text), "(a %s address)",
                 format_name(rail->info->addr_format));
    snprintf(peer->label, sizeof(peer->label), "%s at %s", host->name, text);
    /* The host name is the peer's to choose, and the label goes into
     * metrics, which ferry_stat shows on a terminal. */
    ferry__text_printable(peer->label);
}

_Static_assert(sizeof(struct sockaddr_in) == 16 &&
                   sizeof(struct sockaddr_in6) == 28,
               "the sizes address_misfits names");

/* NULL when an address of family fmt may be len bytes long, else what
 * it must be: libfabric reads a sockaddr whole, and a string address up
 * to its NUL (a peer's bytes, which need not hold one). */
static const char *address_misfits(uint32_t fmt, const uint8_t *name,
                                   size_t len)
{
    switch (fmt) {
    case FI_SOCKADDR_IN:
        return len < sizeof(struct sockaddr_in)
                   ? "at least 16 bytes (a sockaddr_in)"
                   : NULL;
    case FI_SOCKADDR_IN6:
        return len < sizeof(struct sockaddr_in6)
                   ? "at least 28 bytes (a sockaddr_in6)"
                   : NULL;
    case FI_ADDR_STR:
        return name[len - 1] != '\0' ? "a string that ends in a NUL byte"
                                     : NULL;
    default:
        return NULL;
    }
}

/* A transport section of a peer's address blob, as first read. */
struct section {
    char provider[FERRY__NAME_MAX];
    unsigned rails;
    unsigned first; /* the peer's index of its first rail */
    size_t pos;     /* where its addresses begin in the blob */
};

/* Reads the sections' headers and steps over their contents. */
static int read_sections(struct ferry__blob_reader *r, struct section *sec,
                         unsigned *n)
{
    unsigned total = 0;
    int ret;

    *n = ferry__blob_get_u16(r);
    if (r->bad || *n == 0 || *n > FERRY__MAX_TRANSPORTS)
        return ferry__error(FERRY_EBLOB,
                            "address blob lists %u transports; a peer has 1 "
                            "to %d (or the blob was truncated)",
                            *n, FERRY__MAX_TRANSPORTS);
    for (unsigned t = 0; t < *n; t++) {
        ferry__blob_get_str(r, sec[t].provider, sizeof(sec[t].provider));
        sec[t].rails = ferry__blob_get_u16(r);
        sec[t].first = total;
        sec[t].pos = r->pos;
        total += sec[t].rails;
        if (r->bad || sec[t].rails == 0 || total > FERRY__MAX_RAILS)
            return ferry__error(FERRY_EBLOB,
                                "address blob: transport %u lists %u rails; "
                                "a peer has 1 to %d in all (or the blob was "
                                "truncated)",
                                t, sec[t].rails, FERRY__MAX_RAILS);
        for (unsigned i = 0; i < sec[t].rails; i++) {
            uint8_t name[FERRY__ADDR_MAX];
            uint32_t fmt = ferry__blob_get_u32(r);
            size_t len = ferry__blob_get_u16(r);
            const char *misfit;

            if (r->bad || len > sizeof(name) || len == 0)
                return ferry__error(FERRY_EBLOB,
                                    "address blob: rail %u address of %zu "
                                    "bytes is empty, too long or cut short",
                                    sec[t].first + i, len);
            ferry__blob_get_bytes(r, name, len);
            if (!r->bad && (misfit = address_misfits(fmt, name, len)))
                return ferry__error(FERRY_EBLOB,
                                    "address blob: rail %u's %s address of "
                                    "%zu bytes is none: an address of that "
                                    "family is %s",
                                    sec[t].first + i, format_name(fmt), len,
                                    misfit);
        }
        if ((ret = ferry__pulse_skip(r)) != 0)
            return ret;
    }
    if (r->pos != r->len)
        return ferry__error(FERRY_EBLOB,
                            "address blob has %zu bytes after its last field",
                            r->len - r->pos);
    return 0;
}

/* "'tcp;ofi_rxm' and 'shm'": the providers of the sections. */
static void list_providers(const struct section *sec, unsigned n, char *buf,
                           size_t len)
{
    buf[0] = '\0';
    for (unsigned t = 0; t < n; t++)
        ferry__appendf(buf, len, "%s'%s'", t == 0 ? "" : " and ",
                       sec[t].provider);
}

/* The section of the peer's blob offering our transport t, or -1. */
static int offered(const struct ferry__fabric *fab, unsigned t,
                   const struct section *sec, unsigned n)
{
    const char *prov = fab->rails[fab->transports[t].first]
                           .info->fabric_attr->prov_name;

    for (unsigned s = 0; s < n; s++)
        if (strcmp(sec[s].provider, prov) == 0)
            return (int)s;
    return -1;
}

/*
 * Chooses how the peer is reached: shared memory when it is on this host
 * and both sides have it, else a transport both sides have that is not
 * shared memory towards another host.  Sets peer->transport and its
 * sentence; *taken: the peer's section.
 */
static int choose_transport(struct ferry__reg *reg, const struct section *sec,
                            unsigned n, const struct peer_host *host,
                            struct ferry_peer *peer, unsigned *taken)
{
    const struct ferry__fabric *fab = &reg->fab;
    const struct ferry__host *self = ferry__host_self();
    bool here = host->shm_key == self->shm_key;
    char theirs[2 * FERRY__NAME_MAX + 16];

    /* Shared memory first for a peer of this host, then the rest. */
    for (int pass = here ? 0 : 1; pass < 2; pass++)
        for (unsigned t = 0; t < fab->ntransports; t++) {
            const struct ferry__transport *tr = &fab->transports[t];
            int s;

            if (tr->shm != (pass == 0) || (tr->shm && !here) ||
                (s = offered(fab, t, sec, n)) < 0)
                continue;
            peer->transport = t;
            *taken = (unsigned)s;
            snprintf(peer->transport_why, sizeof(peer->transport_why),
                     "%s: %s",
                     fab->rails[tr->first].info->fabric_attr->prov_name,
                     tr->shm ? "the peer is on this host, and both sides "
                               "have shared memory"
                     : here  ? "the peer is on this host, but one side "
                               "has no shared memory for it "
                               "(ferry_context_info's why says why)"
                             : "the peer is on another host");
            return 0;
        }
    if (fab->ntransports == 1 && fab->transports[0].shm && !here)
        return check_shm_reach(&fab->rails[0], host);
    list_providers(sec, n, theirs, sizeof(theirs));
    return ferry__error(FERRY_EINCOMPAT,
                        "address blob comes from a peer using provider %s "
                        "but this context uses '%s'%s: choose the same "
                        "provider on both sides (config.provider or "
                        "FI_PROVIDER)",
                        theirs, fab->rails[0].info->fabric_attr->prov_name,
                        fab->ntransports > 1 ? " (and shared memory for "
                                               "peers on this host)"
                                             : "");
}

/* Inserts the addresses of the peer's section sec into the rails of its
 * transport; r stands at the section's addresses.  Under the lock. */
static int insert_section(struct ferry__reg *reg, struct ferry__blob_reader *r,
                          const struct section *sec,
                          const struct peer_host *host,
                          struct ferry_peer *peer)
{
    const struct ferry__transport *tr = &reg->fab.transports[peer->transport];
    struct ferry__shm_owner owner = {0};
    int ret;

    peer->rail0 = tr->first;
    peer->nrails = sec->rails < tr->nrails ? sec->rails : tr->nrails;
    peer->remote_rail0 = sec->first;
    for (unsigned i = 0; i < sec->rails; i++) {
        struct ferry__rail *rail = &reg->fab.rails[tr->first + i];
        uint8_t name[FERRY__ADDR_MAX];
        uint32_t fmt = ferry__blob_get_u32(r);
        size_t len = ferry__blob_get_u16(r);

        ferry__blob_get_bytes(r, name, len); /* checked by read_sections */
        /* A peer with more rails than we have: use the common ones. */
        if (i >= peer->nrails)
            continue;
        if (fmt != rail->info->addr_format)
            return ferry__error(
                FERRY_EINCOMPAT,
                "peer's rail %u has an address of the %s family but this "
                "context's domain %s uses the %s family: pick domains of "
                "the same family on both sides",
                sec->first + i, format_name(fmt),
                rail->info->domain_attr->name,
                format_name(rail->info->addr_format));
        if ((ret = check_loopback_reach(fmt, name, len, host)) ||
            (ret = ferry__shm_loop_admit(rail->info, name, len,
                                         &peer->shm_one_way)) ||
            (ret = ferry__shm_region_reserve_peer(rail->info, name, len)))
            return ret;
        if (i == 0)
            label_peer(rail, name, host, peer);
        if (tr->shm)
            ferry__shm_owner_add(&owner, name, len);
        ret = fi_av_insert(rail->av, name, 1, &peer->fi_addr[rail->index], 0,
                           NULL);
        if (ret != 1) {
            char hint[192];

            full_av_hint(reg, rail, hint, sizeof(hint));
            return ferry__error(FERRY_EPROVIDER,
                                "fi_av_insert of the peer's rail %u address "
                                "on domain %s failed: %s%s",
                                sec->first + i, rail->info->domain_attr->name,
                                fi_strerror(ret < 0 ? -ret : FI_EINVAL), hint);
        }
    }
    if ((ret = ferry__pulse_get(&reg->fab, r, &peer->pulse)) != 0)
        return ret;
    /* Its owner may die holding its region's lock (fabric/shm_guard.h). */
    if (tr->shm)
        ferry__pulse_guard(&peer->pulse, &owner);
    return 0;
}

/* Reads the blob, chooses the transport and inserts its addresses; under
 * the lock. */
static int insert_addresses(struct ferry__reg *reg,
                            struct ferry__blob_reader *r,
                            struct ferry_peer *peer)
{
    struct section sec[FERRY__MAX_TRANSPORTS];
    struct peer_host host;
    unsigned n, taken = 0;
    int ret;

    FERRY__ASSERT_LOCKED(&reg->fab.lock);
    ferry__blob_get_str(r, host.name, sizeof(host.name));
    host.shm_key = ferry__blob_get_u64(r);
    host.net_key = ferry__blob_get_u64(r);
    if (r->bad)
        return ferry__error(FERRY_EBLOB,
                            "address blob ends inside its fields: it was "
                            "truncated");
    if ((ret = read_sections(r, sec, &n)) ||
        (ret = choose_transport(reg, sec, n, &host, peer, &taken)))
        return ret;
    snprintf(peer->remote_provider, sizeof(peer->remote_provider), "%s",
             sec[0].provider);
    peer->remote_rails = sec[n - 1].first + sec[n - 1].rails;
    r->pos = sec[taken].pos;
    return insert_section(reg, r, &sec[taken], &host, peer);
}

int ferry_peer_add(ferry_context_t *ctx, const void *addr, size_t len,
                   ferry_peer_t **out)
{
    struct ferry__reg *reg = ferry__reg_of(ctx);
    struct ferry__blob_reader r;
    struct ferry_peer *peer;
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_ctx(ctx, "ferry_peer_add")))
        return ret;
    if (out == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_peer_add: out is NULL");
    if ((ret = ferry__blob_open(&r, addr, len, FERRY__BLOB_ADDR,
                                "address blob")))
        return ret;
    peer = calloc(1, sizeof(*peer));
    if (peer == NULL || (peer->blob = malloc(len)) == NULL) {
        free(peer);
        return ferry__error(FERRY_ENOMEM, "out of memory for a peer");
    }
    memcpy(peer->blob, addr, len);
    peer->blob_len = len;
    for (unsigned i = 0; i < FERRY__MAX_RAILS; i++)
        peer->fi_addr[i] = FI_ADDR_NOTAVAIL;
    ferry__lock_acquire(&reg->fab.lock);
    ret = insert_addresses(reg, &r, peer);
    if (ret == 0) {
        peer->magic = FERRY__MAGIC_PEER;
        peer->ctx = ctx;
        peer->next = reg->peers;
        reg->peers = peer;
    } else {
        ferry__peer_drop_addresses(reg, peer);
        ferry__pulse_release(&reg->fab, &peer->pulse);
    }
    ferry__lock_release(&reg->fab.lock);
    if (ret != 0) {
        free(peer->blob);
        free(peer);
        return ret;
    }
    *out = peer;
    return 0;
}

int ferry_peer_info(ferry_peer_t *peer, struct ferry_peer_info *info)
{
    struct ferry_peer_info out;
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_peer(peer, "ferry_peer_info")))
        return ret;
    if (info == NULL || info->size == 0)
        return ferry__error(FERRY_EINVAL,
                            "ferry_peer_info: info is NULL or info->size is "
                            "0 (use FERRY_PEER_INFO_INIT)");
    memset(&out, 0, sizeof(out));
    out.label = peer->label;
    out.provider = ferry__peer_rail(peer, 0)->info->fabric_attr->prov_name;
    out.nrails = peer->nrails;
    out.shm = ferry__peer_transport(peer)->shm;
    out.why = peer->transport_why;
    ferry__hand_back(info, &out, sizeof(out));
    return 0;
}

void ferry__peer_drop_addresses(struct ferry__reg *reg,
                                struct ferry_peer *peer)
{
    for (unsigned i = 0; i < reg->fab.nrails; i++) {
        struct ferry__rail *rail = &reg->fab.rails[i];
        struct ferry__shm_names named;

        if (peer->fi_addr[i] != FI_ADDR_NOTAVAIL && rail->av) {
            ferry__shm_mend_names(&rail->mend, rail->av, peer->fi_addr[i],
                                  &named);
            fi_av_remove(rail->av, &peer->fi_addr[i], 1, 0);
            ferry__shm_mend_removed(&rail->mend, &named);
        }
        peer->fi_addr[i] = FI_ADDR_NOTAVAIL;
    }
}

void ferry__traffic_add(struct ferry__traffic *into,
                        const struct ferry__traffic *from)
{
    /* The struct is nothing but counters: add it word by word. */
    uint64_t *to = (uint64_t *)(void *)into;
    const uint64_t *add = (const uint64_t *)(const void *)from;

    _Static_assert(sizeof(*into) % sizeof(uint64_t) == 0,
                   "struct ferry__traffic holds only uint64_t counters");
    for (size_t i = 0; i < sizeof(*into) / sizeof(uint64_t); i++)
        to[i] += add[i];
}

void ferry__peer_free(struct ferry__reg *reg, struct ferry_peer *peer)
{
    for (struct ferry_peer **p = &reg->peers; *p != NULL; p = &(*p)->next) {
        if (*p == peer) {
            *p = peer->next;
            break;
        }
    }
    ferry__peer_ring_leave(&peer->live.in_line);
    ferry__traffic_add(&reg->closed_peers, &peer->traffic);
    ferry__peer_drop_addresses(reg, peer);
    ferry__pulse_release(&reg->fab, &peer->pulse);
    peer->magic = FERRY__MAGIC_DEAD;
    free(peer->blob);
    free(peer);
}

int ferry_peer_close(ferry_peer_t *peer)
{
    struct ferry__reg *reg;
    unsigned held, busy;
    int ret;

    ferry__error_clear();
    if (peer == NULL)
        return 0;
    if ((ret = ferry__check_peer(peer, "ferry_peer_close")))
        return ret;
    reg = ferry__reg_of(peer->ctx);
    ferry__lock_acquire(&reg->fab.lock);
    held = ferry__users_read(&peer->rmem_count, &reg->fab.lock);
    busy = peer->live.running + peer->live.waiters;
    if (held == 0 && busy == 0 && ferry__peer_ops_out(peer) == 0) {
        ferry__peer_free(reg, peer);
    } else if (held == 0 && busy == 0) {
        /* Only the provider still holds something of it: not the
         * caller's business.  The last operation to come back frees it. */
        peer->removed = true;
        peer->magic = FERRY__MAGIC_DEAD;
        peer->live.watched = false;
    }
    ferry__lock_release(&reg->fab.lock);
    if (busy != 0)
        return ferry__error(FERRY_EBUSY,
                            "ferry_peer_close: requests to this peer are "
                            "still running or a counter wait is on it (%u in "
                            "all); let them end (or cancel and free them) "
                            "first",
                            busy);
    if (held != 0)
        return ferry__error(FERRY_EBUSY,
                            "ferry_peer_close: %u remote region%s imported "
                            "from this peer %s still held; ferry_rmem_close "
                            "them first",
                            held, held == 1 ? "" : "s",
                            held == 1 ? "is" : "are");
    return 0;
}

void ferry__peers_destroy(struct ferry__reg *reg)
{
    while (reg->peers != NULL)
        ferry__peer_free(reg, reg->peers);
}
