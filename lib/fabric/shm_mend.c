/*
 * What ferry mends in its own shm regions on libfabric 1.17 to 2.6
 * (shm_mend.h).
 */
#include "fabric/shm_mend.h"

#include "base/log.h"
#include "fabric/shm_space.h"

#include <fcntl.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>

/* The error an abandoned answer is given: FI_EIO, stored as the peer
 * stores an error (negated, in the unsigned status). */
#define ANSWER_DEAD ((uint64_t)-5)

_Static_assert(sizeof(struct ferry__smr_peer) == 272,
               "struct smr_peer_data of 1.17 and 1.18");

/*
 * The head's sizes after its signal: an ofi_atomic32_t (4 bytes, 8 in a
 * libfabric built for debugging), the map pointer, total_size, on 1.17
 * cmd_cnt and sar_cnt, then the offsets of the command queue, the answer
 * queue, the inject pool, the SAR pool, the peer table and the name.
 */
struct sizes {
    uint64_t total, cmd_queue, answers, inject_pool, sar_pool, peers, name;
};

static bool read_sizes(const uint8_t *region, size_t len, unsigned minor,
                       struct sizes *out)
{
    const struct ferry__smr_head *h = (const void *)region;
    size_t signal = (h->flags & FERRY__SMR_FLAG_DEBUG) ? 8 : 4;
    size_t map_at = (offsetof(struct ferry__smr_head, signal) + signal + 7) &
                    ~(size_t)7;
    size_t at = map_at + sizeof(void *);
    uint64_t w[10];
    const uint64_t *offsets = minor == 17 ? w + 3 : w + 1;

    if (len < at + sizeof(w))
        return false;
    memcpy(w, region + at, sizeof(w));
    *out = (struct sizes){w[0],       offsets[0], offsets[1], offsets[2],
                          offsets[3], offsets[4], offsets[5]};
    return true;
}

/* The answer queue at answers in region (len bytes), where it has the
 * provider's shape and fits before next, the part after it (the inject
 * pool); else NULL. */
static struct ferry__smr_answers *queue_at(uint8_t *region, size_t len,
                                           uint64_t answers, uint64_t next)
{
    struct ferry__smr_answers *q;

    if (answers % 8 != 0 || answers >= next || next > len ||
        next - answers < sizeof(*q))
        return NULL;
    q = (void *)(region + answers);
    return q->size != 0 && (q->size & (q->size - 1)) == 0 &&
                   q->size_mask == q->size - 1 && q->rcnt <= q->wcnt &&
                   q->wcnt - q->rcnt <= q->size &&
                   q->size <= (next - answers - sizeof(*q)) /
                                  sizeof(q->buf[0])
               ? q
               : NULL;
}

/* Whether the parts lie in order inside the region, the answer queue and
 * the peer table of the provider's shape between their neighbours. */
static bool parts_fit(uint8_t *region, size_t len, const struct sizes *sz)
{
    return sz->total == len && sz->cmd_queue < sz->answers &&
           sz->answers < sz->inject_pool && sz->inject_pool < sz->sar_pool &&
           sz->sar_pool < sz->peers && sz->peers < sz->name &&
           sz->name < len && sz->peers % 8 == 0 &&
           sz->name - sz->peers >=
               FERRY__SMR_PEERS * sizeof(struct ferry__smr_peer) &&
           queue_at(region, len, sz->answers, sz->inject_pool) != NULL;
}

static bool attach_v4(struct ferry__shm_mend *m, void *region, size_t len,
                      unsigned minor, pid_t owner)
{
    struct ferry__smr_head *h = region;
    struct sizes sz;

    if ((minor != 17 && minor != 18) || len < sizeof(*h) ||
        h->version != FERRY__SMR_V4 || h->pid != owner ||
        !read_sizes(region, len, minor, &sz) ||
        !parts_fit(region, len, &sz))
        return false;
    m->head = h;
    m->q = (void *)((uint8_t *)region + sz.answers);
    m->peers = (void *)((uint8_t *)region + sz.peers);
    m->seen = m->q->wcnt;
    m->mask = m->q->size_mask;
    return true;
}

/* 1.19 to 2.4, their peer table followed: the answer queue too, which
 * the provider still takes back in order there. */
static void follow_answers(struct ferry__shm_mend *m, void *region,
                           size_t len)
{
    uint64_t off[7];

    if (ferry__smr_v5_offsets(region, len, off) &&
        (m->q = queue_at(region, len, off[1], off[2])) != NULL) {
        m->seen = m->q->wcnt;
        m->mask = m->q->size_mask;
    }
}

/* 1.19 to 1.22: the peer table, where the head names owner and its
 * version (that of release 1.minor), offsets and name check out
 * (smr_v5.h). */
static bool attach_table_1x(struct ferry__shm_mend *m, void *region,
                            size_t len, unsigned minor, pid_t owner,
                            const char *name)
{
    const struct ferry__smr_head *h = region; /* its pid where 1.17's is */

    if (minor < 19 || minor > 22 || len < sizeof(*h) || h->pid != owner)
        return false;
    if (minor == 19)
        m->peers = ferry__smr_peer_table(region, len, FERRY__SMR_V5,
                                         sizeof(*m->peers), name);
    else
        m->peers_v6 = ferry__smr_peer_table(
            region, len, minor == 20 ? FERRY__SMR_V6 : FERRY__SMR_V7,
            sizeof(*m->peers_v6), name);
    if (m->peers == NULL && m->peers_v6 == NULL)
        return false;
    follow_answers(m, region, len);
    return true;
}

/* 2.0 to 2.6: the peer table, where the head names owner and its
 * version, offsets and name check out (smr_v8.h, smr_v9.h). */
static bool attach_2x(struct ferry__shm_mend *m, void *region, size_t len,
                      unsigned minor, pid_t owner, const char *name)
{
    const struct ferry__smr_head_v8 *v8 = region;
    const struct ferry__smr_head_v9 *v9 = region;

    if (minor >= 5) {
        if (len < sizeof(*v9) || v9->pid != owner)
            return false;
        m->peers_v9 = ferry__smr_v9_peers(region, len, name);
        if (m->peers_v9 != NULL &&
            ferry__shm_mend_gives_back(FI_VERSION(2, minor)) &&
            !ferry__shm_returns_follow(m, region, len))
            FERRY_LOG_INFO("shm: region %s does not have 2.6's command "
                           "stack and return queue: a peer killed with "
                           "operations out keeps them until the context "
                           "closes",
                           name);
        return m->peers_v9 != NULL;
    }
    if (len < sizeof(*v8) || v8->pid != owner)
        return false;
    m->peers_v8 = ferry__smr_peer_table(region, len, FERRY__SMR_V8,
                                        sizeof(*m->peers_v8), name);
    if (m->peers_v8 == NULL)
        return false;
    follow_answers(m, region, len);
    return true;
}

bool ferry__shm_mend_gives_back(uint32_t version)
{
    return FI_VERSION_GE(version, FI_VERSION(1, 17)) &&
           (FI_VERSION_LT(version, FI_VERSION(2, 5)) ||
            (FI_MAJOR(version) == 2 && FI_MINOR(version) == 6));
}

bool ferry__shm_mend_attach(struct ferry__shm_mend *m, void *region,
                            size_t len, uint32_t version, pid_t owner,
                            const char *name)
{
    memset(m, 0, sizeof(*m));
    if (sizeof(void *) != 8)
        return false;
    if (FI_MAJOR(version) == 1 && FI_MINOR(version) < 19)
        return attach_v4(m, region, len, FI_MINOR(version), owner);
    if (FI_MAJOR(version) == 1)
        return attach_table_1x(m, region, len, FI_MINOR(version), owner,
                               name);
    return FI_MAJOR(version) == 2 &&
           attach_2x(m, region, len, FI_MINOR(version), owner, name);
}

void ferry__shm_mend_open(struct ferry__shm_mend *m,
                          const struct fi_info *info, struct fid_ep *ep)
{
    char addr[FERRY__ADDR_MAX], path[FERRY__ADDR_MAX + 16];
    size_t addr_len = sizeof(addr);
    uint32_t version = fi_version();
    struct stat st;
    void *map;
    int fd;

    memset(m, 0, sizeof(*m));
    if (info->ep_attr->protocol != FI_PROTO_SHM ||
        !((FI_VERSION_GE(version, FI_VERSION(1, 17)) &&
           FI_VERSION_LT(version, FI_VERSION(1, 23))) ||
          FI_MAJOR(version) == 2) ||
        fi_getname(&ep->fid, addr, &addr_len) != 0 ||
        !ferry__shm_region_path(addr, addr_len, path, sizeof(path)))
        return;
    fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return;
    map = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0
              ? mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE,
                     MAP_SHARED, fd, 0)
              : MAP_FAILED;
    close(fd);
    if (map == MAP_FAILED)
        return;
    if (!ferry__shm_mend_attach(m, map, (size_t)st.st_size, version,
                                getpid(),
                                path + strlen(FERRY__SHM_DIR "/"))) {
        FERRY_LOG_INFO("shm: region %s does not have libfabric %u.%u's "
                       "layout: %s",
                       path, FI_MAJOR(version), FI_MINOR(version),
                       FI_VERSION_LT(version, FI_VERSION(1, 19))
                           ? "a peer killed with operations in flight will "
                             "hold up this endpoint's others"
                           : "a peer added after a removed one may crash "
                             "this process or never be reached "
                             "(docs/semantics.md)");
        munmap(map, (size_t)st.st_size);
        return;
    }
    m->map = map;
    m->len = (size_t)st.st_size;
}

void ferry__shm_mend_close(struct ferry__shm_mend *m)
{
    if (m->map != NULL)
        munmap(m->map, m->len);
    memset(m, 0, sizeof(*m));
}

bool ferry__shm_mend_answer(struct ferry__shm_mend *m, uint64_t taken,
                            bool to_peer)
{
    struct ferry__smr_answers *q = m->q;
    _Atomic uint64_t *status;
    uint64_t now, next, n = taken - 1;

    /* Entries before rcnt were taken back (and may serve another
     * operation since); those from wcnt on were never this one. */
    if (q == NULL || taken == 0 || n < *(volatile uint64_t *)&q->rcnt ||
        n >= q->wcnt)
        return false;
    status = (_Atomic uint64_t *)&q->buf[n & m->mask].status;
    now = atomic_load_explicit(status, memory_order_relaxed);
    if (now == FERRY__SMR_BUSY)
        next = ANSWER_DEAD;
    else if (now == FERRY__SMR_SAR_READY && to_peer)
        next = FERRY__SMR_SAR_FREE; /* the peer would have emptied them */
    else if (now == FERRY__SMR_SAR_FREE && !to_peer)
        next = FERRY__SMR_SAR_READY; /* ... or filled them */
    else
        return false;
    /* Relaxed: the provider reads it in this process's progress, which
     * runs under the context's lock as this does; the dead peer wrote
     * nothing this needs to see. */
    atomic_store_explicit(status, next, memory_order_relaxed);
    /* As the peer would: on 1.17 and 1.18 the endpoint's progress looks
     * at its answers only once signalled (later, at each progress). */
    if (m->head != NULL)
        atomic_store_explicit((_Atomic int32_t *)&m->head->signal, 1,
                              memory_order_relaxed);
    return true;
}
