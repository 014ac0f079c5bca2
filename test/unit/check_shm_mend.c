/*
 * The answers to this process's own shm operations (fabric/shm_mend.h).
 *
 * On regions built here as libfabric 1.17 and 1.18 lay them out (1.18
 * dropped two counts from the head; a debug build's signal is twice as
 * long): which regions are followed and which are refused (another
 * version, owner, release, size, or a queue of another shape), which
 * answer a post took, and how the answer of a dead peer's operation is
 * moved on (an error for one waiting, bounce buffers emptied or filled
 * as the peer would) while answered, taken back or unknown ones are
 * left alone.  On regions of 1.19's to 1.22's layouts: which are
 * followed, and that a removed peer's id is forgotten in the entry whose
 * name the removal cleared.  On regions of 2.5's and 2.6's layout: which
 * are followed, and that a removed peer's id is forgotten in the entry
 * whose region the removal unmapped; on 2.0's to 2.4's, in the entry
 * that the removed peer's region names back and the removal cleared
 * there.  (A real peer killed with operations out: check_progress's
 * test_killed_peer_leaves_the_others; peers removed on a real provider:
 * check_peer's churned case.)
 */
#include "testutil.h"

#include "fabric/shm_mend.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define CMD_QUEUE 256u
#define ANSWERS 512u
#define INJECT_POOL 1024u
#define SAR_POOL 2048u
#define PEERS 4096u
#define PEER_SIZE 272u /* name[256], id, sar_status, name_sent */
#define NAME (PEERS + 256u * PEER_SIZE)
#define LEN (NAME + 4096u)
#define QSIZE 8u
#define SIGNAL_AT 28u /* after the lock: u8, u8, u16, i32, u8, u8, u32, ptr, int */

static _Alignas(64) uint8_t region[LEN];

/* Peer entry i: its name's first byte and its id for the owner. */
static void set_peer(unsigned i, char name0, int64_t id)
{
    region[PEERS + i * PEER_SIZE] = (uint8_t)name0;
    memcpy(region + PEERS + i * PEER_SIZE + 256, &id, sizeof(id));
}

static int64_t peer_id(unsigned i)
{
    int64_t id;

    memcpy(&id, region + PEERS + i * PEER_SIZE + 256, sizeof(id));
    return id;
}

/* The queue's four counts, then QSIZE answers of two words. */
static uint64_t *queue(void)
{
    return (uint64_t *)(void *)(region + ANSWERS);
}

static uint64_t *status_of(uint64_t n)
{
    return &queue()[4 + 2 * (n % QSIZE) + 1];
}

/* A region of libfabric 1.minor owned by owner, its queue empty. */
static void make_region(unsigned minor, bool debug, pid_t owner)
{
    size_t at = (debug ? 40 : 32) + 8; /* past the map pointer */
    uint64_t words[10] = {LEN,      CMD_QUEUE, ANSWERS, INJECT_POOL,
                          SAR_POOL, PEERS,     NAME,    NAME + 256};
    uint16_t flags = debug ? 2 : 0;
    int32_t pid = owner;

    if (minor == 17) { /* total_size, cmd_cnt, sar_cnt, then the offsets */
        uint64_t with_counts[10] = {LEN,         64,       64,    CMD_QUEUE,
                                    ANSWERS,     INJECT_POOL, SAR_POOL,
                                    PEERS,       NAME,     NAME + 256};

        memcpy(words, with_counts, sizeof(words));
    }
    memset(region, 0, sizeof(region));
    region[0] = 4;
    memcpy(region + 2, &flags, sizeof(flags));
    memcpy(region + 4, &pid, sizeof(pid));
    memcpy(region + at, words, sizeof(words));
    queue()[0] = QSIZE;
    queue()[1] = QSIZE - 1;
}

/* A post that took an answer: the queue's next entry, in state status. */
static void post_one(uint64_t status)
{
    *status_of(queue()[3]) = status;
    queue()[3]++;
}

START_TEST(test_followed_on_each_layout)
{
    const struct {
        unsigned minor;
        bool debug;
    } layouts[] = {{17, false}, {18, false}, {17, true}, {18, true}};

    for (size_t i = 0; i < TU_ARRAY_LEN(layouts); i++) {
        struct ferry__shm_mend a;

        make_region(layouts[i].minor, layouts[i].debug, getpid());
        ck_assert_msg(ferry__shm_mend_attach(&a, region, LEN,
                                             FI_VERSION(1, layouts[i].minor),
                                             getpid(), NULL),
                      "layout of 1.%u%s refused", layouts[i].minor,
                      layouts[i].debug ? " (debug)" : "");
        ck_assert_ptr_eq(a.q, region + ANSWERS);
        /* Read as the other release: the offsets land elsewhere. */
        ck_assert_msg(!ferry__shm_mend_attach(
                          &a, region, LEN,
                          FI_VERSION(1, layouts[i].minor == 17 ? 18 : 17),
                          getpid(), NULL),
                      "layout of 1.%u taken for the other release",
                      layouts[i].minor);
        ck_assert_ptr_null(a.q);
    }
}
END_TEST

START_TEST(test_refused)
{
    struct ferry__shm_mend a;
    pid_t me = getpid();

    make_region(17, false, me);
    ck_assert(!ferry__shm_mend_attach(&a, region, LEN, FI_VERSION(1, 17),
                                      me + 1, NULL));
    ck_assert(!ferry__shm_mend_attach(&a, region, LEN, FI_VERSION(1, 19), me,
                                      NULL));
    ck_assert(!ferry__shm_mend_attach(&a, region, LEN - 64, FI_VERSION(1, 17),
                                      me, NULL));
    ck_assert(!ferry__shm_mend_attach(&a, region, 16, FI_VERSION(1, 17), me,
                                      NULL));
    region[0] = 5;
    ck_assert(!ferry__shm_mend_attach(&a, region, LEN, FI_VERSION(1, 17), me,
                                      NULL));
    make_region(17, false, me);
    queue()[0] = 6; /* not a power of two */
    queue()[1] = 5;
    ck_assert(!ferry__shm_mend_attach(&a, region, LEN, FI_VERSION(1, 17), me,
                                      NULL));
    make_region(17, false, me);
    queue()[1] = QSIZE; /* the mask of another size */
    ck_assert(!ferry__shm_mend_attach(&a, region, LEN, FI_VERSION(1, 17), me,
                                      NULL));
    make_region(17, false, me);
    queue()[2] = 3; /* more taken back than posted */
    ck_assert(!ferry__shm_mend_attach(&a, region, LEN, FI_VERSION(1, 17), me,
                                      NULL));
    make_region(17, false, me);
    queue()[0] = 64; /* runs into the inject pool */
    queue()[1] = 63;
    ck_assert(!ferry__shm_mend_attach(&a, region, LEN, FI_VERSION(1, 17), me,
                                      NULL));
    make_region(18, false, me);
    /* A peer table too short for 256 entries: name where it is not. */
    memcpy(region + 40 + 6 * 8, &(uint64_t){PEERS + 1024}, 8);
    ck_assert(!ferry__shm_mend_attach(&a, region, LEN, FI_VERSION(1, 18), me,
                                      NULL));
    ck_assert_ptr_null(a.q);
    /* Refused where it cannot be followed, without a word. */
    ck_assert_uint_eq(ferry__shm_mend_took(&a), 0);
    ck_assert(!ferry__shm_mend_answer(&a, 1, true));
}
END_TEST

START_TEST(test_which_answer_a_post_took)
{
    struct ferry__shm_mend a;

    make_region(17, false, getpid());
    queue()[2] = queue()[3] = 5; /* five before: numbers go on from there */
    ck_assert(ferry__shm_mend_attach(&a, region, LEN, FI_VERSION(1, 17),
                                     getpid(), NULL));
    post_one(FERRY__SMR_BUSY);
    ck_assert_uint_eq(ferry__shm_mend_took(&a), 6); /* entry 5 */
    ck_assert_uint_eq(ferry__shm_mend_took(&a), 0); /* took none */
    post_one(FERRY__SMR_BUSY);
    post_one(FERRY__SMR_BUSY);
    ck_assert_uint_eq(ferry__shm_mend_took(&a), 0); /* two: unknown */
    post_one(FERRY__SMR_SAR_READY);
    ck_assert_uint_eq(ferry__shm_mend_took(&a), 9);
}
END_TEST

START_TEST(test_dead_peers_answers_moved_on)
{
    const struct {
        uint64_t now;
        bool to_peer;
        bool moved;
        uint64_t then;
    } cases[] = {
        {FERRY__SMR_BUSY, true, true, (uint64_t)-5},
        {FERRY__SMR_BUSY, false, true, (uint64_t)-5},
        {FERRY__SMR_SAR_READY, true, true, FERRY__SMR_SAR_FREE},
        {FERRY__SMR_SAR_READY, false, false, FERRY__SMR_SAR_READY},
        {FERRY__SMR_SAR_FREE, false, true, FERRY__SMR_SAR_READY},
        {FERRY__SMR_SAR_FREE, true, false, FERRY__SMR_SAR_FREE},
        {0, true, false, 0},
        {(uint64_t)-5, false, false, (uint64_t)-5},
    };

    for (size_t i = 0; i < TU_ARRAY_LEN(cases); i++) {
        struct ferry__shm_mend a;
        int32_t signal;
        uint64_t taken;

        make_region(18, false, getpid());
        ck_assert(ferry__shm_mend_attach(&a, region, LEN, FI_VERSION(1, 18),
                                         getpid(), NULL));
        post_one(cases[i].now);
        taken = ferry__shm_mend_took(&a);
        ck_assert_uint_eq(taken, 1);
        ck_assert_int_eq(ferry__shm_mend_answer(&a, taken, cases[i].to_peer),
                         cases[i].moved);
        ck_assert_msg(*status_of(0) == cases[i].then,
                      "case %zu: status %llu, not %llu", i,
                      (unsigned long long)*status_of(0),
                      (unsigned long long)cases[i].then);
        memcpy(&signal, region + SIGNAL_AT, sizeof(signal));
        ck_assert_int_eq(signal, cases[i].moved ? 1 : 0);
    }
}
END_TEST

START_TEST(test_taken_back_and_unknown_left_alone)
{
    struct ferry__shm_mend a;

    make_region(17, false, getpid());
    ck_assert(ferry__shm_mend_attach(&a, region, LEN, FI_VERSION(1, 17),
                                     getpid(), NULL));
    post_one(FERRY__SMR_BUSY);
    ck_assert_uint_eq(ferry__shm_mend_took(&a), 1);
    queue()[2] = 1; /* taken back; its entry serves the next post */
    post_one(FERRY__SMR_BUSY);
    ck_assert(!ferry__shm_mend_answer(&a, 1, true));
    ck_assert_uint_eq(*status_of(1), FERRY__SMR_BUSY);
    ck_assert(!ferry__shm_mend_answer(&a, 3, true)); /* not posted yet */
    ck_assert(!ferry__shm_mend_answer(&a, 0, true)); /* took none */
    ck_assert_uint_eq(*status_of(1), FERRY__SMR_BUSY);
    ck_assert(ferry__shm_mend_answer(&a, 2, true));
    ck_assert_uint_eq(*status_of(1), (uint64_t)-5);
}
END_TEST

/* The queue's size_mask is checked once, when attached: any peer may
 * write it later, and an answer moved on stays inside the queue. */
START_TEST(test_mask_rewritten_after_attach)
{
    struct ferry__shm_mend a;

    make_region(18, false, getpid());
    queue()[2] = queue()[3] = QSIZE + 1; /* entry QSIZE + 1 is entry 1 */
    ck_assert(ferry__shm_mend_attach(&a, region, LEN, FI_VERSION(1, 18),
                                     getpid(), NULL));
    post_one(FERRY__SMR_BUSY);
    ck_assert_uint_eq(ferry__shm_mend_took(&a), QSIZE + 2);
    queue()[1] = UINT64_MAX;
    ck_assert(ferry__shm_mend_answer(&a, QSIZE + 2, true));
    ck_assert_uint_eq(*status_of(1), (uint64_t)-5);
}
END_TEST

START_TEST(test_removed_peers_id_forgotten)
{
    struct ferry__shm_mend m;
    struct ferry__shm_names named;

    make_region(17, false, getpid());
    ck_assert(ferry__shm_mend_attach(&m, region, LEN, FI_VERSION(1, 17),
                                     getpid(), NULL));
    set_peer(0, 'a', 3);   /* stays */
    set_peer(1, 'b', 7);   /* removed below */
    set_peer(2, '\0', 9); /* a peer that reached this endpoint unasked */
    set_peer(3, 'd', -1);  /* removed before they met */
    set_peer(255, 'z', 1); /* removed: the last entry */
    ferry__shm_mend_names(&m, NULL, FI_ADDR_NOTAVAIL, &named);
    set_peer(1, '\0', 7); /* what fi_av_remove leaves */
    set_peer(3, '\0', -1);
    set_peer(255, '\0', 1);
    ck_assert_uint_eq(ferry__shm_mend_removed(&m, &named), 2);
    ck_assert_int_eq(peer_id(0), 3);
    ck_assert_int_eq(peer_id(1), -1);
    ck_assert_int_eq(peer_id(2), 9);
    ck_assert_int_eq(peer_id(3), -1);
    ck_assert_int_eq(peer_id(255), -1);
    /* Not followed: nothing named, nothing forgotten. */
    memset(&m, 0, sizeof(m));
    ferry__shm_mend_names(&m, NULL, FI_ADDR_NOTAVAIL, &named);
    ck_assert_uint_eq(named.bits[0] | named.bits[1] | named.bits[2] |
                          named.bits[3],
                      0);
    ck_assert_uint_eq(ferry__shm_mend_removed(&m, &named), 0);
}
END_TEST

/* A region of libfabric 2.5's layout (SMR_VERSION 9) or 2.6's (10),
 * owned by owner, the region of endpoint NAME9. */
#define PEERS9 4096u
#define NAME9 (PEERS9 + 256u * 64u)
#define LEN9 (NAME9 + 256u)
#define NAME9_TEXT "ferry_4242_2abf_0"
static _Alignas(64) uint8_t region9[LEN9];

static void make_region9(uint8_t version, pid_t owner)
{
    uint64_t total = LEN9;
    uint64_t off[7] = {version == 9 ? 128 : 192, 1024, 2048, 2560, 3072,
                       PEERS9, NAME9};
    int32_t pid = owner;

    memset(region9, 0, sizeof(region9));
    region9[0] = version;
    memcpy(region9 + 40, &pid, sizeof(pid));
    memcpy(region9 + 56, &total, sizeof(total));
    memcpy(region9 + (version == 9 ? 64 : 128), off, sizeof(off));
    strcpy((char *)region9 + NAME9, NAME9_TEXT);
    for (unsigned i = 0; i < 256; i++)
        memcpy(region9 + PEERS9 + i * 64, &(int64_t){-1}, 8);
}

static bool attach9(struct ferry__shm_mend *m, unsigned minor, pid_t owner,
                    const char *name)
{
    return ferry__shm_mend_attach(m, region9, LEN9, FI_VERSION(2, minor),
                                  owner, name);
}

/* ferry__smr_v9_peers of a region of 2.6's layout, len bytes long
 * (allocated so, for AddressSanitizer), its name its last 256 bytes (as
 * far as the region holds them: len - 256 wraps below 256) and its peer
 * table a whole table before that. */
static void *v9_peers_short(size_t len)
{
    uint64_t at_name = (uint64_t)len - 256;
    uint64_t off[7] = {192, 0, 0, 0, 0, at_name - 256u * 64u, at_name};
    uint8_t *r = calloc(1, len);
    void *table;

    ck_assert_ptr_nonnull(r);
    r[0] = 10;
    memcpy(r + 56, &(uint64_t){len}, 8);
    memcpy(r + 128, off, sizeof(off));
    if (len >= 256)
        strcpy((char *)r + at_name, NAME9_TEXT);
    table = ferry__smr_v9_peers(r, len, NAME9_TEXT);
    free(r);
    return table;
}

START_TEST(test_v9_followed_and_refused)
{
    struct ferry__shm_mend m;
    pid_t me = getpid();

    make_region9(9, me);
    ck_assert(attach9(&m, 5, me, NAME9_TEXT));
    ck_assert_ptr_nonnull(m.peers_v9);
    /* Followed for its peer table only. */
    ck_assert_ptr_null(m.q);
    ck_assert_uint_eq(ferry__shm_mend_took(&m), 0);
    make_region9(10, me);
    ck_assert(attach9(&m, 6, me, NAME9_TEXT));
    /* Refused: another owner, another endpoint's name, none, a release
     * before 2.5, a layout of 1.x, another size. */
    ck_assert(!attach9(&m, 6, me + 1, NAME9_TEXT));
    ck_assert(!attach9(&m, 6, me, "ferry_4242_2abf_1"));
    ck_assert(!attach9(&m, 6, me, NULL));
    ck_assert(!attach9(&m, 4, me, NAME9_TEXT));
    ck_assert(!ferry__shm_mend_attach(&m, region9, LEN9, FI_VERSION(1, 18),
                                      me, NAME9_TEXT));
    ck_assert(!ferry__shm_mend_attach(&m, region9, LEN9 - 64,
                                      FI_VERSION(2, 6), me, NAME9_TEXT));
    /* Another version; the offsets of the other layout. */
    region9[0] = 8;
    ck_assert(!attach9(&m, 6, me, NAME9_TEXT));
    region9[0] = 9;
    ck_assert(!attach9(&m, 6, me, NAME9_TEXT));
    /* A peer table not where the name says, or not aligned to 8. */
    make_region9(10, me);
    memcpy(region9 + 128 + 5 * 8, &(uint64_t){PEERS9 + 64}, 8);
    ck_assert(!attach9(&m, 6, me, NAME9_TEXT));
    make_region9(10, me);
    memcpy(region9 + 128 + 5 * 8, &(uint64_t){PEERS9 + 4}, 8);
    memcpy(region9 + 128 + 6 * 8, &(uint64_t){NAME9 + 4}, 8);
    ck_assert(!attach9(&m, 6, me, NAME9_TEXT));
    ck_assert_ptr_null(m.peers_v9);
    /* Regions too short for a table before their name, which a sum of
     * offsets that wraps would put before the region: one of 8 KiB, and
     * one shorter than a name. */
    ck_assert_ptr_null(v9_peers_short(8192));
    ck_assert_ptr_null(v9_peers_short(200));
}
END_TEST

/* Entry i of region9: the peer's id and where its region is mapped. */
static void set_peer9(unsigned i, int64_t id, void *mapped)
{
    uint64_t at = (uintptr_t)mapped;
    uint16_t sent = 1;

    memcpy(region9 + PEERS9 + i * 64, &id, sizeof(id));
    memcpy(region9 + PEERS9 + i * 64 + 12, &sent, sizeof(sent));
    memcpy(region9 + PEERS9 + i * 64 + 16, &at, sizeof(at));
}

static int64_t peer9_id(unsigned i)
{
    int64_t id;

    memcpy(&id, region9 + PEERS9 + i * 64, sizeof(id));
    return id;
}

static void *page(void)
{
    void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    ck_assert_ptr_ne(p, MAP_FAILED);
    return p;
}

/*
 * From 2.5 the removed peer's entry is the one whose region the removal
 * unmapped: its id is forgotten (and its name unsent), while a peer
 * whose region stays mapped, one never met, one never mapped and a
 * region mapped only after the names were taken are left alone.
 */
START_TEST(test_v9_removed_peers_id_forgotten)
{
    struct ferry__shm_mend m;
    struct ferry__shm_names named;
    void *stays = page(), *removed = page(), *last = page(),
         *later = page();
    uint16_t sent;

    make_region9(10, getpid());
    ck_assert(attach9(&m, 6, getpid(), NAME9_TEXT));
    set_peer9(0, 3, stays);
    set_peer9(1, 7, removed);
    set_peer9(2, -1, stays); /* not met */
    set_peer9(3, 5, NULL);   /* never mapped here */
    set_peer9(255, 1, last);
    ferry__shm_mend_names(&m, NULL, FI_ADDR_NOTAVAIL, &named);
    set_peer9(4, 2, later); /* met after the names were taken */
    ck_assert_int_eq(munmap(removed, 4096), 0);
    ck_assert_int_eq(munmap(last, 4096), 0);
    ck_assert_int_eq(munmap(later, 4096), 0);
    ck_assert_uint_eq(ferry__shm_mend_removed(&m, &named), 2);
    ck_assert_int_eq(peer9_id(0), 3);
    ck_assert_int_eq(peer9_id(1), -1);
    memcpy(&sent, region9 + PEERS9 + 64 + 12, sizeof(sent));
    ck_assert_uint_eq(sent, 0);
    ck_assert_int_eq(peer9_id(2), -1);
    ck_assert_int_eq(peer9_id(3), 5);
    ck_assert_int_eq(peer9_id(4), 2);
    ck_assert_int_eq(peer9_id(255), -1);
    /* Forgotten once: nothing more the next time. */
    ferry__shm_mend_names(&m, NULL, FI_ADDR_NOTAVAIL, &named);
    ck_assert_uint_eq(ferry__shm_mend_removed(&m, &named), 0);
    munmap(stays, 4096);
}
END_TEST

/* Two regions of 2.0 to 2.4's layout (SMR_VERSION 8): this endpoint's
 * (NAME8_OURS, owned by owner) and the peer's being removed. */
#define PEER8 296u
#define PEERS8 4096u
#define NAME8 (PEERS8 + 256u * PEER8)
#define LEN8 131072u /* the size rounded up to a power of two */
#define NAME8_OURS "ferry_4242_2abf_0"
static _Alignas(64) uint8_t ours8[LEN8], theirs8[LEN8];

/* The size of a peer table's entry: 1.19's (SMR_VERSION 5) is 1.17's,
 * 1.20's to 2.4's (6 to 8) are longer. */
static size_t entry_1x(uint8_t version)
{
    return version == 5 ? 272 : 296;
}

/* A region of a layout of 1.19 to 2.4 (version 5 to 8) in r, the region
 * of endpoint name, owned by owner, its peer table at PEERS8: the size
 * where the head keeps it, the offsets after it. */
static void make_region_of(uint8_t *r, uint8_t version, const char *name,
                           pid_t owner)
{
    size_t size_at = version == 5 ? 40 : version == 6 ? 80 : 72;
    uint64_t at_name = PEERS8 + 256u * entry_1x(version), total = LEN8;
    uint64_t off[7] = {version == 5 ? 112 : 192, 1024, 2048, 3072, PEERS8,
                       at_name, at_name + 256};
    int32_t pid = owner;

    memset(r, 0, LEN8);
    r[0] = version;
    memcpy(r + 4, &pid, sizeof(pid));
    memcpy(r + size_at, &total, sizeof(total));
    memcpy(r + size_at + 8, off, sizeof(off));
    strcpy((char *)r + at_name, name);
    for (unsigned i = 0; i < 256; i++)
        memcpy(r + PEERS8 + i * entry_1x(version) + 256, &(int64_t){-1}, 8);
}

static void make_region8(uint8_t *r, const char *name, pid_t owner)
{
    make_region_of(r, 8, name, owner);
}

/* Entry i of r: the peer's id for the r's owner. */
static void set_peer8(uint8_t *r, unsigned i, int64_t id)
{
    uint16_t sent = 1;

    memcpy(r + PEERS8 + i * PEER8 + 256, &id, sizeof(id));
    memcpy(r + PEERS8 + i * PEER8 + 268, &sent, sizeof(sent));
}

static int64_t peer8_id(const uint8_t *r, unsigned i)
{
    int64_t id;

    memcpy(&id, r + PEERS8 + i * PEER8 + 256, sizeof(id));
    return id;
}

/* Offsets of 2.0's to 2.4's head in r (make_region8's) naming the peer
 * table at peers and the name at at_name (a copy of r's name put there
 * when inside r), the rest unchanged. */
static void set_name_at8(uint8_t *r, uint64_t at_name, uint64_t peers)
{
    uint64_t end = at_name + 256;

    if (at_name < LEN8 - 256)
        memcpy(r + at_name, r + NAME8, 256);
    memcpy(r + 80 + 4 * 8, &peers, 8);
    memcpy(r + 80 + 5 * 8, &at_name, 8);
    memcpy(r + 80 + 6 * 8, &end, 8);
}

static bool attach8(struct ferry__shm_mend *m, unsigned minor, pid_t owner,
                    const char *name)
{
    return ferry__shm_mend_attach(m, ours8, LEN8, FI_VERSION(2, minor), owner,
                                  name);
}

START_TEST(test_v8_followed_and_refused)
{
    struct ferry__shm_mend m;
    pid_t me = getpid();

    make_region8(ours8, NAME8_OURS, me);
    for (unsigned minor = 0; minor <= 4; minor++)
        ck_assert_msg(attach8(&m, minor, me, NAME8_OURS),
                      "2.%u's layout refused", minor);
    ck_assert_ptr_nonnull(m.peers_v8);
    /* Its answer queue is not of the provider's shape here (all zero):
     * not followed, the peer table still is. */
    ck_assert_ptr_null(m.q);
    /* Refused: another owner, another name, 2.5's release, another
     * version, a peer table not before the name. */
    ck_assert(!attach8(&m, 4, me + 1, NAME8_OURS));
    ck_assert(!attach8(&m, 4, me, "ferry_4242_2abf_1"));
    ck_assert(!attach8(&m, 5, me, NAME8_OURS));
    ours8[0] = 7;
    ck_assert(!attach8(&m, 4, me, NAME8_OURS));
    make_region8(ours8, NAME8_OURS, me);
    memcpy(ours8 + 80 + 4 * 8, &(uint64_t){PEERS8 + 8}, 8);
    ck_assert(!attach8(&m, 4, me, NAME8_OURS));
    ck_assert_ptr_null(m.peers_v8);
    /* Offsets whose sums wrap: the name near the region's start and the
     * table a whole table before it (before the region), or the name
     * near 2^64 and its end (name + 256) small again. */
    make_region8(ours8, NAME8_OURS, me);
    set_name_at8(ours8, 4096, (uint64_t)4096 - 256 * PEER8);
    ck_assert(!attach8(&m, 4, me, NAME8_OURS));
    make_region8(ours8, NAME8_OURS, me);
    set_name_at8(ours8, (uint64_t)-64, (uint64_t)-64 - 256 * PEER8);
    ck_assert(!attach8(&m, 4, me, NAME8_OURS));
    ck_assert_ptr_null(m.peers_v8);
}
END_TEST

/*
 * On 2.0 to 2.4 the removed peer's entry is the one whose id the peer's
 * own entry for this endpoint (in the peer's region) names back, and
 * that the removal cleared there; an entry of another peer that happens
 * to be named back is left, since the removal did not clear it.
 */
START_TEST(test_v8_removed_peers_id_forgotten)
{
    struct ferry__shm_mend m;
    struct ferry__shm_names named;

    memset(&named, 0, sizeof(named));
    make_region8(ours8, NAME8_OURS, getpid());
    make_region8(theirs8, "ferry_4343_2abf_0", 4343);
    ck_assert(attach8(&m, 4, getpid(), NAME8_OURS));
    set_peer8(ours8, 1, 9);     /* the removed peer: its entry 9 is ours */
    set_peer8(theirs8, 9, 1);
    set_peer8(ours8, 2, 5);     /* another peer; their entry 5 names 2 */
    set_peer8(theirs8, 5, 2);   /* by chance, and stays */
    set_peer8(ours8, 3, 7);     /* another peer, not named back */
    set_peer8(ours8, 4, 300);   /* no entry of a table */
    named.theirs = (const void *)(theirs8 + PEERS8);
    ferry__shm_mend_mark(&m, &named);
    set_peer8(theirs8, 9, -1); /* what the removal does there */
    ck_assert_uint_eq(ferry__shm_mend_removed(&m, &named), 1);
    ck_assert_int_eq(peer8_id(ours8, 1), -1);
    ck_assert_int_eq(peer8_id(ours8, 2), 5);
    ck_assert_int_eq(peer8_id(ours8, 3), 7);
    ck_assert_int_eq(peer8_id(ours8, 4), 300);
    /* Without the peer's region, nothing is taken for it. */
    ferry__shm_mend_names(&m, NULL, FI_ADDR_NOTAVAIL, &named);
    ck_assert_uint_eq(ferry__shm_mend_removed(&m, &named), 0);
}
END_TEST

/* Regions of 1.19's layout (SMR_VERSION 5), 1.20's (6) and 1.21's and
 * 1.22's (7), built in ours8: the region of endpoint NAME8_OURS, owned
 * by owner. */
static void make_region_1x(uint8_t version, pid_t owner)
{
    make_region_of(ours8, version, NAME8_OURS, owner);
}

/* Entry i: its name's first byte, its id, and its name sent. */
static void set_peer_1x(uint8_t version, unsigned i, char name0, int64_t id)
{
    uint8_t *e = ours8 + PEERS8 + i * entry_1x(version);
    uint32_t sent = 1;

    e[0] = (uint8_t)name0;
    memcpy(e + 256, &id, sizeof(id));
    memcpy(e + 268, &sent, sizeof(sent));
}

static int64_t peer_1x_id(uint8_t version, unsigned i, uint32_t *sent)
{
    const uint8_t *e = ours8 + PEERS8 + i * entry_1x(version);
    int64_t id;

    memcpy(&id, e + 256, sizeof(id));
    memcpy(sent, e + 268, sizeof(*sent));
    return id;
}

static bool attach_1x(struct ferry__shm_mend *m, unsigned minor, pid_t owner,
                      const char *name)
{
    return ferry__shm_mend_attach(m, ours8, LEN8, FI_VERSION(1, minor),
                                  owner, name);
}

START_TEST(test_1x_followed_and_refused)
{
    const struct {
        unsigned minor, other; /* other: a release of another layout */
        uint8_t version;
    } layouts[] = {{19, 20, 5}, {20, 21, 6}, {21, 20, 7}, {22, 19, 7}};
    struct ferry__shm_mend m;
    pid_t me = getpid();

    for (size_t i = 0; i < TU_ARRAY_LEN(layouts); i++) {
        unsigned minor = layouts[i].minor;

        make_region_1x(layouts[i].version, me);
        ck_assert_msg(attach_1x(&m, minor, me, NAME8_OURS),
                      "1.%u's layout refused", minor);
        ck_assert_ptr_nonnull(minor == 19 ? (void *)m.peers
                                          : (void *)m.peers_v6);
        /* Its answer queue is not of the provider's shape here (all
         * zero): not followed, the peer table still is. */
        ck_assert_ptr_null(m.q);
        ck_assert_ptr_null(m.head);
        /* Refused: another owner, another endpoint's name, none, a
         * release of another layout, another size. */
        ck_assert(!attach_1x(&m, minor, me + 1, NAME8_OURS));
        ck_assert(!attach_1x(&m, minor, me, "ferry_4242_2abf_1"));
        ck_assert(!attach_1x(&m, minor, me, NULL));
        ck_assert_msg(!attach_1x(&m, layouts[i].other, me, NAME8_OURS),
                      "1.%u's layout taken for 1.%u's", minor,
                      layouts[i].other);
        ck_assert(!ferry__shm_mend_attach(&m, ours8, LEN8 - 64,
                                          FI_VERSION(1, minor), me,
                                          NAME8_OURS));
    }
    /* 1.21's version with 1.20's offsets, and the other way round. */
    make_region_1x(6, me);
    ours8[0] = 7;
    ck_assert(!attach_1x(&m, 21, me, NAME8_OURS));
    make_region_1x(7, me);
    ours8[0] = 6;
    ck_assert(!attach_1x(&m, 20, me, NAME8_OURS));
    /* A peer table not right before the name. */
    make_region_1x(7, me);
    memcpy(ours8 + 80 + 4 * 8, &(uint64_t){PEERS8 + 8}, 8);
    ck_assert(!attach_1x(&m, 22, me, NAME8_OURS));
    ck_assert_ptr_null(m.peers_v6);
}
END_TEST

/*
 * On 1.19 to 1.22, as on 1.17, the removed peer's entry is the one whose
 * name the removal cleared: its id is forgotten and its name unsent,
 * while a peer that stays, one that reached this endpoint unasked and
 * one removed before they met are left alone.
 */
START_TEST(test_1x_removed_peers_id_forgotten)
{
    const struct {
        unsigned minor;
        uint8_t version;
    } layouts[] = {{19, 5}, {22, 7}};

    for (size_t k = 0; k < TU_ARRAY_LEN(layouts); k++) {
        uint8_t v = layouts[k].version;
        struct ferry__shm_mend m;
        struct ferry__shm_names named;
        uint32_t sent;

        make_region_1x(v, getpid());
        ck_assert(attach_1x(&m, layouts[k].minor, getpid(), NAME8_OURS));
        set_peer_1x(v, 0, 'a', 3);    /* stays */
        set_peer_1x(v, 1, 'b', 7);    /* removed below */
        set_peer_1x(v, 2, '\0', 9);   /* reached this endpoint unasked */
        set_peer_1x(v, 3, 'd', -1);   /* removed before they met */
        set_peer_1x(v, 255, 'z', 1);  /* removed: the last entry */
        ferry__shm_mend_names(&m, NULL, FI_ADDR_NOTAVAIL, &named);
        set_peer_1x(v, 1, '\0', 7);   /* what fi_av_remove leaves */
        set_peer_1x(v, 3, '\0', -1);
        set_peer_1x(v, 255, '\0', 1);
        ck_assert_uint_eq(ferry__shm_mend_removed(&m, &named), 2);
        ck_assert_int_eq(peer_1x_id(v, 0, &sent), 3);
        ck_assert_uint_eq(sent, 1);
        ck_assert_int_eq(peer_1x_id(v, 1, &sent), -1);
        ck_assert_msg(sent == 0, "1.%u: the name of the entry forgotten "
                                 "still counts as sent (%u)",
                      layouts[k].minor, sent);
        ck_assert_int_eq(peer_1x_id(v, 2, &sent), 9);
        ck_assert_int_eq(peer_1x_id(v, 3, &sent), -1);
        ck_assert_int_eq(peer_1x_id(v, 255, &sent), -1);
        /* Forgotten once: nothing more the next time. */
        ferry__shm_mend_names(&m, NULL, FI_ADDR_NOTAVAIL, &named);
        ck_assert_uint_eq(ferry__shm_mend_removed(&m, &named), 0);
    }
}
END_TEST

/*
 * From 1.19 to 2.4 the provider still takes answers back in order (the
 * 2.0-2.4 regions and 1.19's to 1.22's carry the queue as 1.17's does,
 * second of the offsets): a queue of the provider's shape is followed, a
 * dead peer's answer moved on, and no signal is written (those heads
 * have none; their progress looks at the answers each time).  A queue
 * that does not fit before the inject pool is not followed.
 */
#define ANSWERS_1X 1024u /* the second offset of make_region_1x's */

static void make_queue_1x(void)
{
    uint64_t shape[4] = {QSIZE, QSIZE - 1, 0, 0};

    memcpy(ours8 + ANSWERS_1X, shape, sizeof(shape));
}

START_TEST(test_answers_from_1_19_to_2_4)
{
    const struct {
        unsigned major, minor;
        uint8_t version;
    } layouts[] = {{1, 19, 5}, {1, 20, 6}, {1, 22, 7}, {2, 4, 8}};

    for (size_t i = 0; i < TU_ARRAY_LEN(layouts); i++) {
        uint32_t v = FI_VERSION(layouts[i].major, layouts[i].minor);
        struct ferry__shm_mend m;
        uint8_t head[128];
        uint64_t *q, status;

        if (layouts[i].version == 8)
            make_region8(ours8, NAME8_OURS, getpid());
        else
            make_region_1x(layouts[i].version, getpid());
        make_queue_1x();
        memcpy(head, ours8, sizeof(head));
        ck_assert_msg(ferry__shm_mend_attach(&m, ours8, LEN8, v, getpid(),
                                             NAME8_OURS),
                      "%u.%u's layout refused", layouts[i].major,
                      layouts[i].minor);
        ck_assert_msg(m.q == (void *)(ours8 + ANSWERS_1X),
                      "%u.%u: the answer queue not followed",
                      layouts[i].major, layouts[i].minor);
        q = (uint64_t *)(void *)(ours8 + ANSWERS_1X);
        q[4 + 1] = FERRY__SMR_BUSY; /* a post took entry 0 */
        q[3] = 1;
        ck_assert_uint_eq(ferry__shm_mend_took(&m), 1);
        ck_assert(ferry__shm_mend_answer(&m, 1, true));
        memcpy(&status, ours8 + ANSWERS_1X + 5 * 8, sizeof(status));
        ck_assert_uint_eq(status, (uint64_t)-5);
        ck_assert_msg(memcmp(head, ours8, sizeof(head)) == 0,
                      "%u.%u: the head was written to", layouts[i].major,
                      layouts[i].minor);
        /* A queue longer than the room before the inject pool. */
        q[0] = 128;
        q[1] = 127;
        ck_assert(ferry__shm_mend_attach(&m, ours8, LEN8, v, getpid(),
                                         NAME8_OURS));
        ck_assert_ptr_null(m.q);
    }
}
END_TEST

static Suite *mend_suite(void)
{
    Suite *s = suite_create("shm_mend");
    TCase *tc = tu_tcase(s, "mend", 30);

    tcase_add_test(tc, test_followed_on_each_layout);
    tcase_add_test(tc, test_refused);
    tcase_add_test(tc, test_which_answer_a_post_took);
    tcase_add_test(tc, test_dead_peers_answers_moved_on);
    tcase_add_test(tc, test_taken_back_and_unknown_left_alone);
    tcase_add_test(tc, test_mask_rewritten_after_attach);
    tcase_add_test(tc, test_removed_peers_id_forgotten);
    tc = tu_tcase(s, "v9", 30);
    tcase_add_test(tc, test_v9_followed_and_refused);
    tcase_add_test(tc, test_v9_removed_peers_id_forgotten);
    tc = tu_tcase(s, "v8", 30);
    tcase_add_test(tc, test_v8_followed_and_refused);
    tcase_add_test(tc, test_v8_removed_peers_id_forgotten);
    tc = tu_tcase(s, "v5", 30);
    tcase_add_test(tc, test_1x_followed_and_refused);
    tcase_add_test(tc, test_1x_removed_peers_id_forgotten);
    tcase_add_test(tc, test_answers_from_1_19_to_2_4);
    return s;
}

int main(void)
{
    return tu_run(mend_suite());
}
