/*
 * Peers: the context's address blob written, and peers' address blobs
 * turned into address-vector entries, one per rail.
 *
 * Address blob fields (after the common header, see blob.c):
 *   str host name | u64 shm key | u64 net key (base/host.h)
 *   | str provider | u16 rails | rails x (u32 addr_format | u16 len | bytes)
 *   | the heartbeat word (fabric/pulse.h)
 */
#include "reg/peer.h"

#include "base/blob.h"
#include "base/host.h"
#include "fabric/route.h"
#include "fabric/shm_loop.h"
#include "fabric/shm_space.h"

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
    ferry__blob_put_str(&w, fab->rails[0].info->fabric_attr->prov_name);
    ferry__blob_put_u16(&w, (uint16_t)fab->nrails);
    /* The endpoints are FI_THREAD_DOMAIN: fi_getname is serialised with
     * posting and polling like every other endpoint call. */
    ferry__lock_acquire(&fab->lock);
    for (unsigned i = 0; i < fab->nrails && ret == 0; i++) {
        uint8_t name[FERRY__ADDR_MAX];
        size_t nlen = sizeof(name);

        ret = fi_getname(&fab->rails[i].ep->fid, name, &nlen);
        if (ret != 0) {
            ret = ferry__error(ferry__error_from_fi(ret),
                               "fi_getname on domain %s failed: %s",
                               fab->rails[i].info->domain_attr->name,
                               fi_strerror(-ret));
            break;
        }
        ferry__blob_put_u32(&w, fab->rails[i].info->addr_format);
        ferry__blob_put_u16(&w, (uint16_t)nlen);
        ferry__blob_put_bytes(&w, name, nlen);
    }
    ferry__pulse_put(&w, fab);
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
}

/* Reads the blob and inserts each rail's address; under the lock. */
static int insert_addresses(struct ferry__reg *reg,
                            struct ferry__blob_reader *r,
                            struct ferry_peer *peer)
{
    const char *ours = reg->fab.rails[0].info->fabric_attr->prov_name;
    char prov[FERRY__NAME_MAX];
    struct peer_host host;
    unsigned rails;
    int ret;

    FERRY__ASSERT_LOCKED(&reg->fab.lock);
    ferry__blob_get_str(r, host.name, sizeof(host.name));
    host.shm_key = ferry__blob_get_u64(r);
    host.net_key = ferry__blob_get_u64(r);
    ferry__blob_get_str(r, prov, sizeof(prov));
    rails = ferry__blob_get_u16(r);
    if (r->bad)
        return ferry__error(FERRY_EBLOB,
                            "address blob ends inside its fields: it was "
                            "truncated");
    if (strcmp(prov, ours) != 0)
        return ferry__error(FERRY_EINCOMPAT,
                            "address blob comes from a peer using provider "
                            "'%s' but this context uses '%s': choose the same "
                            "provider on both sides (config.provider or "
                            "FI_PROVIDER)",
                            prov, ours);
    if (rails == 0 || rails > FERRY__MAX_RAILS)
        return ferry__error(FERRY_EBLOB,
                            "address blob lists %u rails; a peer has 1 to %d",
                            rails, FERRY__MAX_RAILS);
    if ((ret = check_shm_reach(&reg->fab.rails[0], &host)))
        return ret;
    for (unsigned i = 0; i < rails; i++) {
        struct ferry__rail *rail = &reg->fab.rails[i];
        uint8_t name[FERRY__ADDR_MAX];
        uint32_t fmt = ferry__blob_get_u32(r);
        size_t len = ferry__blob_get_u16(r);

        if (r->bad || len > sizeof(name) || len == 0)
            return ferry__error(FERRY_EBLOB,
                                "address blob: rail %u address of %zu bytes "
                                "is empty, too long or cut short",
                                i, len);
        ferry__blob_get_bytes(r, name, len);
        if (r->bad)
            return ferry__error(FERRY_EBLOB,
                                "address blob: rail %u address is cut short",
                                i);
        /* A peer with more rails than we have: use the common ones. */
        if (i >= reg->fab.nrails)
            continue;
        if (fmt != rail->info->addr_format)
            return ferry__error(
                FERRY_EINCOMPAT,
                "peer's rail %u has an address of the %s family but this "
                "context's domain %s uses the %s family: pick domains of "
                "the same family on both sides",
                i, format_name(fmt), rail->info->domain_attr->name,
                format_name(rail->info->addr_format));
        if ((ret = check_loopback_reach(fmt, name, len, &host)) ||
            (ret = ferry__shm_loop_admit(rail->info, name, len)) ||
            (ret = ferry__shm_region_reserve_peer(rail->info, name, len)))
            return ret;
        if (i == 0)
            label_peer(rail, name, &host, peer);
        ret = fi_av_insert(rail->av, name, 1, &peer->fi_addr[i], 0, NULL);
        if (ret != 1) {
            char hint[192];

            full_av_hint(reg, rail, hint, sizeof(hint));
            return ferry__error(FERRY_EPROVIDER,
                                "fi_av_insert of the peer's rail %u address "
                                "on domain %s failed: %s%s",
                                i, rail->info->domain_attr->name,
                                fi_strerror(ret < 0 ? -ret : FI_EINVAL), hint);
        }
    }
    ret = ferry__pulse_get(&reg->fab, r, &peer->pulse);
    if (ret != 0)
        return ret;
    if (r->pos != r->len)
        return ferry__error(FERRY_EBLOB,
                            "address blob has %zu bytes after its last field",
                            r->len - r->pos);
    return 0;
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

void ferry__peer_drop_addresses(struct ferry__reg *reg,
                                struct ferry_peer *peer)
{
    for (unsigned i = 0; i < reg->fab.nrails; i++) {
        if (peer->fi_addr[i] != FI_ADDR_NOTAVAIL && reg->fab.rails[i].av)
            fi_av_remove(reg->fab.rails[i].av, &peer->fi_addr[i], 1, 0);
        peer->fi_addr[i] = FI_ADDR_NOTAVAIL;
    }
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
    ferry__peer_drop_addresses(reg, peer);
    ferry__pulse_release(&reg->fab, &peer->pulse);
    peer->magic = FERRY__MAGIC_DEAD;
    free(peer->blob);
    free(peer);
}

int ferry_peer_remove(ferry_peer_t *peer)
{
    struct ferry__reg *reg;
    unsigned held, busy;
    int ret;

    ferry__error_clear();
    if (peer == NULL)
        return 0;
    if ((ret = ferry__check_peer(peer, "ferry_peer_remove")))
        return ret;
    reg = ferry__reg_of(peer->ctx);
    ferry__lock_acquire(&reg->fab.lock);
    held = ferry__users_read(&peer->rmem_count, &reg->fab.lock);
    busy = peer->live.running + peer->live.waiters;
    if (held == 0 && busy == 0 && peer->live.ops_out == 0) {
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
                            "ferry_peer_remove: requests to this peer are "
                            "still running or a counter wait is on it (%u in "
                            "all); let them end (or cancel and free them) "
                            "first",
                            busy);
    if (held != 0)
        return ferry__error(FERRY_EBUSY,
                            "ferry_peer_remove: %u remote region%s imported "
                            "from this peer %s still held; ferry_rmem_free "
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
