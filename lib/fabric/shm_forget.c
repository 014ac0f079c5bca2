/*
 * A removed peer's id forgotten in this endpoint's peer table (shm_mend.h,
 * "A removed peer's entry"), on each layout the mend follows.
 */
#include "fabric/shm_mend.h"

#include "fabric/shm_space.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(sizeof(struct ferry__smr_peer_v8) == 296,
               "struct smr_peer_data of 2.0 to 2.4");
_Static_assert(offsetof(struct ferry__smr_head_v8, offsets) == 80,
               "struct smr_region of 2.0 to 2.4, as far as its offsets");
_Static_assert(offsetof(struct ferry__smr_head_v8, total_size) ==
                   FERRY__SMR_V7_SIZE_AT,
               "1.21's head is 2.0's");

_Static_assert(sizeof(struct ferry__smr_peer_v6) == 296,
               "struct smr_peer_data of 1.20 to 1.22");

_Static_assert(sizeof(struct ferry__smr_peer_v9) == 64,
               "struct smr_peer_data of 2.5 and 2.6");

/* The peer table at peers in region (len bytes), of entries of entry
 * bytes, where it lies right before the name at at_name (SMR_NAME_MAX
 * bytes, inside the region) and that name is want; else NULL.  The
 * offsets are whatever the region holds (a peer's region is written by
 * the peer): no sum of them may wrap, or a table "before" a name near
 * the region's start would lie before the region. */
static void *table_before_name(void *region, size_t len, uint64_t peers,
                               uint64_t at_name, size_t entry,
                               const char *want)
{
    if (want == NULL || peers % 8 != 0 || len < 256 || at_name > len - 256 ||
        at_name < peers || at_name - peers != FERRY__SMR_PEERS * entry ||
        strncmp((const char *)region + at_name, want, 256) != 0)
        return NULL;
    return (uint8_t *)region + peers;
}

/* Where the head of a region of version keeps its size (the offsets
 * right after it), and where the command queue begins; false for a
 * version other than 1.19's to 2.4's. */
static bool head_of(uint8_t version, size_t *size_at, size_t *cmd_queue)
{
    switch (version) {
    case FERRY__SMR_V5:
        *size_at = FERRY__SMR_V5_SIZE_AT;
        *cmd_queue = FERRY__SMR_V5_CMD_QUEUE;
        return true;
    case FERRY__SMR_V6:
        *size_at = FERRY__SMR_V6_SIZE_AT;
        *cmd_queue = FERRY__SMR_V6_CMD_QUEUE;
        return true;
    case FERRY__SMR_V7:
    case FERRY__SMR_V8:
        *size_at = FERRY__SMR_V7_SIZE_AT;
        *cmd_queue = FERRY__SMR_V8_CMD_QUEUE;
        return true;
    default:
        return false;
    }
}

bool ferry__smr_v5_offsets(const void *region, size_t len, uint64_t off[7])
{
    const uint8_t *r = region;
    size_t size_at, cmd_queue;
    uint64_t total;

    if (len == 0 || !head_of(r[0], &size_at, &cmd_queue) || len < cmd_queue)
        return false;
    memcpy(&total, r + size_at, sizeof(total));
    memcpy(off, r + size_at + sizeof(total), 7 * sizeof(*off));
    /* The command queue right after the head, the socket's name right
     * after the name. */
    return total == len && off[0] == cmd_queue &&
           off[FERRY__SMR_V8_NAME_INDEX] < len &&
           off[6] == off[FERRY__SMR_V8_NAME_INDEX] + 256 && off[6] < len;
}

void *ferry__smr_peer_table(void *region, size_t len, uint8_t version,
                            size_t entry, const char *name)
{
    uint64_t off[7];

    if (len == 0 || *(const uint8_t *)region != version ||
        !ferry__smr_v5_offsets(region, len, off))
        return NULL;
    return table_before_name(region, len, off[FERRY__SMR_V8_PEERS_INDEX],
                             off[FERRY__SMR_V8_NAME_INDEX], entry, name);
}

struct ferry__smr_peer_v9 *ferry__smr_v9_peers(void *region, size_t len,
                                                const char *name)
{
    const struct ferry__smr_head_v9 *h = region;
    uint64_t off[7];
    size_t at, cmd_queue;

    if (len < FERRY__SMR_V10_CMD_QUEUE || h->total_size != len)
        return NULL;
    if (h->version == FERRY__SMR_V9) {
        at = FERRY__SMR_V9_OFFSETS_AT;
        cmd_queue = FERRY__SMR_V9_CMD_QUEUE;
    } else if (h->version == FERRY__SMR_V10) {
        at = FERRY__SMR_V10_OFFSETS_AT;
        cmd_queue = FERRY__SMR_V10_CMD_QUEUE;
    } else {
        return NULL;
    }
    memcpy(off, (const uint8_t *)region + at, sizeof(off));
    /* The command queue right after the head, the name the region's last
     * SMR_NAME_MAX bytes. */
    if (off[0] != cmd_queue || len < 256 ||
        off[FERRY__SMR_V9_NAME_INDEX] != len - 256)
        return NULL;
    return table_before_name(region, len, off[FERRY__SMR_V9_PEERS_INDEX],
                             off[FERRY__SMR_V9_NAME_INDEX],
                             sizeof(struct ferry__smr_peer_v9), name);
}

/* Whether an entry of the 2.5 layout is of a peer met whose region is
 * mapped here where shm mapped it: fi_av_remove unmaps it. */
static bool met_and_mapped(const struct ferry__smr_peer_v9 *p)
{
    long page = sysconf(_SC_PAGESIZE);

    /* msync fails with ENOMEM where nothing is mapped; MS_ASYNC does
     * nothing else. */
    return p->id >= 0 && p->local_region != 0 &&
           p->local_region % (uint64_t)page == 0 &&
           (msync((void *)(uintptr_t)p->local_region, (size_t)page,
                  MS_ASYNC) == 0 ||
            errno != ENOMEM);
}

/* The id of entry i of the table followed. */
static int64_t *entry_id(const struct ferry__shm_mend *m, unsigned i)
{
    if (m->peers != NULL)
        return &m->peers[i].id;
    if (m->peers_v6 != NULL)
        return &m->peers_v6[i].id;
    return m->peers_v8 != NULL ? &m->peers_v8[i].id : &m->peers_v9[i].id;
}

/* The name of entry i, where a removal clears it (1.17 to 1.22); NULL
 * on the layouts whose entries have none. */
static const char *entry_name(const struct ferry__shm_mend *m, unsigned i)
{
    if (m->peers != NULL)
        return m->peers[i].name;
    return m->peers_v6 != NULL ? m->peers_v6[i].name : NULL;
}

/* Entry i as a peer not met: its id forgotten, this endpoint's name to
 * be sent again (smr_verify_peer).  Plain stores: the provider reads the
 * entry in this process's calls, under the lock this runs under, and the
 * peer that would write it is gone from the table. */
static void forget(struct ferry__shm_mend *m, unsigned i)
{
    *entry_id(m, i) = -1;
    if (m->peers != NULL)
        m->peers[i].name_sent = 0;
    else if (m->peers_v6 != NULL)
        m->peers_v6[i].name_sent = 0;
    else if (m->peers_v8 != NULL)
        m->peers_v8[i].name_sent = 0;
    else
        m->peers_v9[i].name_sent = 0;
}

/* 2.0 to 2.4: maps the region of the peer at fi_addr of av (read only)
 * into out, when it is one of that layout (no av: none).  The name is
 * the peer's, who may have put a FIFO there since: O_NONBLOCK, so that
 * its open does not wait for a writer, and only a regular file is
 * mapped. */
static void map_theirs(struct fid_av *av, fi_addr_t fi_addr,
                       struct ferry__shm_names *out)
{
    char path[FERRY__ADDR_MAX + 16];
    struct stat st;
    void *map;
    int fd;

    if (!ferry__shm_av_region_path(av, fi_addr, path, sizeof(path)) ||
        (fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW)) < 0)
        return;
    map = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0
              ? mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0)
              : MAP_FAILED;
    close(fd);
    if (map == MAP_FAILED)
        return;
    out->theirs = ferry__smr_peer_table(map, (size_t)st.st_size,
                                        FERRY__SMR_V8,
                                        sizeof(struct ferry__smr_peer_v8),
                                        path + strlen(FERRY__SHM_DIR "/"));
    if (out->theirs == NULL) {
        munmap(map, (size_t)st.st_size);
        return;
    }
    out->their_map = map;
    out->their_len = (size_t)st.st_size;
}

/* The peer's id for this endpoint in entry i, when it is one of the
 * table's (else -1). */
static int64_t their_index(const struct ferry__shm_mend *m, unsigned i)
{
    int64_t j = *entry_id(m, i);

    return j >= 0 && j < FERRY__SMR_PEERS ? j : -1;
}

/* Whether entry i counts as named before a removal: 1.17's to 1.22's
 * has a name, 2.5's a peer met and mapped, 2.0's a peer whose own entry
 * for this endpoint (in the region of the peer being removed) names i
 * back. */
static bool named(const struct ferry__shm_mend *m,
                  const struct ferry__shm_names *names, unsigned i)
{
    const char *name = entry_name(m, i);
    int64_t j;

    if (name != NULL)
        return name[0] != '\0';
    if (m->peers_v9 != NULL)
        return met_and_mapped(&m->peers_v9[i]);
    j = their_index(m, i);
    return names->theirs != NULL && j >= 0 &&
           names->theirs[j].id == (int64_t)i;
}

void ferry__shm_mend_mark(const struct ferry__shm_mend *m,
                          struct ferry__shm_names *out)
{
    memset(out->bits, 0, sizeof(out->bits));
    if (m->peers == NULL && m->peers_v6 == NULL && m->peers_v8 == NULL &&
        m->peers_v9 == NULL)
        return;
    for (unsigned i = 0; i < FERRY__SMR_PEERS; i++)
        if (named(m, out, i))
            out->bits[i / 64] |= 1ull << (i % 64);
}

void ferry__shm_mend_names(const struct ferry__shm_mend *m, struct fid_av *av,
                           fi_addr_t fi_addr, struct ferry__shm_names *out)
{
    memset(out, 0, sizeof(*out));
    if (m->peers_v8 != NULL)
        map_theirs(av, fi_addr, out);
    ferry__shm_mend_mark(m, out);
}

/* Whether the removal took entry i's peer away: 1.17's to 1.22's name is
 * cleared, 2.5's region unmapped, and 2.0's peer has its entry for this
 * endpoint cleared (smr_unmap_from_endpoint). */
static bool removed(const struct ferry__shm_mend *m,
                    const struct ferry__shm_names *before, unsigned i)
{
    const char *name = entry_name(m, i);
    int64_t j;

    if (name != NULL)
        return name[0] == '\0';
    if (m->peers_v9 != NULL)
        return !met_and_mapped(&m->peers_v9[i]);
    j = their_index(m, i);
    /* Read again: the removal wrote it through libfabric's own mapping. */
    return j >= 0 && *(volatile int64_t *)&before->theirs[j].id == -1;
}

unsigned ferry__shm_mend_removed(struct ferry__shm_mend *m,
                                 struct ferry__shm_names *before)
{
    unsigned forgotten = 0;

    for (unsigned i = 0; i < FERRY__SMR_PEERS; i++) {
        if (!(before->bits[i / 64] & (1ull << (i % 64))) ||
            *entry_id(m, i) < 0 || !removed(m, before, i))
            continue;
        forget(m, i);
        forgotten++;
    }
    if (before->their_map != NULL)
        munmap(before->their_map, before->their_len);
    memset(before, 0, sizeof(*before));
    return forgotten;
}
