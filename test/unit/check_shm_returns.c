/*
 * A dead peer's commands handed back on libfabric 2.6 (fabric/shm_mend.h,
 * fabric/shm_returns.c), on a region built here as 2.6 lays it out: its
 * command stack and return queue followed where they check out (and in
 * a debug build's layout), refused otherwise; the commands out to the
 * dead peer handed back failed, once, each on the next entry of the
 * queue, while free ones, ones handed back already, another peer's, one
 * of a live process with the dead one's name, and those that cannot come
 * back whole (bounce buffers, a read through an inject buffer) are left
 * alone.  (A real peer killed with operations out on 2.6:
 * check_progress's test_killed_peer_leaves_the_others, run against that
 * release, docs/compatibility.md.)
 */
#include "testutil.h"

#include "fabric/shm_mend.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

/* Our region: head and offsets, the command queue (unused), the inject
 * pool (unused), the stack of NCMDS commands, the return queue, the SAR
 * pool (unused), the peer table and the name. */
#define NCMDS 8u
#define STACK 2048u
#define CMDS (STACK + 2048u) /* entry_base_offset 2048 */
#define RETURNS (CMDS + NCMDS * 368u)
#define SAR (RETURNS + 192u + NCMDS * 64u)
#define PEERS 16384u
#define NAME (PEERS + 256u * 64u)
#define LEN (NAME + 256u)
#define OURS "ferry_4242_2abf_0"
#define BASE 0x7f0000000000ull /* where "the provider" maps it */

/* A peer's region, as this process maps it: its head and its name. */
#define THEIR_LEN 4096u
#define DEAD 999999    /* the dead process: only compared */
#define DEAD_NAME "ferry_999999_2abf_0"

static _Alignas(64) uint8_t region[LEN];

static void make_region(bool debug)
{
    uint64_t total = LEN, base = BASE;
    uint64_t off[7] = {192, 1024, STACK, RETURNS, SAR, PEERS, NAME};
    uint64_t stack[3] = {CMDS - STACK, 368, NCMDS};
    int32_t pid = getpid(), qsize[2] = {NCMDS, NCMDS - 1};
    int16_t top = -1;

    memset(region, 0, sizeof(region));
    region[0] = 10;
    memcpy(region + 40, &pid, sizeof(pid));
    memcpy(region + 48, &base, sizeof(base));
    memcpy(region + 56, &total, sizeof(total));
    memcpy(region + 128, off, sizeof(off));
    strcpy((char *)region + NAME, OURS);
    for (unsigned i = 0; i < 256; i++)
        memcpy(region + PEERS + i * 64, &(int64_t){-1}, 8);
    memcpy(region + STACK, stack, sizeof(stack));
    memcpy(region + STACK + 26, &top, sizeof(top)); /* every command out */
    memcpy(region + RETURNS + 128, qsize, sizeof(qsize));
    if (debug)
        region[RETURNS + 8] = 1; /* write_pos's is_initialized */
    /* Each entry's sequence starts at its index (_init). */
    for (int64_t i = 0; i < NCMDS; i++)
        memcpy(region + RETURNS + 192 + i * 64, &i, sizeof(i));
}

static bool attach(struct ferry__shm_mend *m)
{
    return ferry__shm_mend_attach(m, region, LEN, FI_VERSION(2, 6), getpid(),
                                  OURS);
}

static struct ferry__smr26_cmd_hdr *cmd(unsigned c)
{
    return (void *)(region + CMDS + c * 368u);
}

/* Command c as posted: to our peer i, through proto, operation op. */
static void post(unsigned c, int16_t i, uint8_t proto, uint8_t op)
{
    memset(cmd(c), 0, sizeof(*cmd(c)));
    cmd(c)->tx_id = i;
    cmd(c)->rx_id = 3;
    cmd(c)->proto = proto;
    cmd(c)->op = op;
    cmd(c)->smr_flags = 1u << 3; /* SMR_RETURN_CMD */
}

/* Puts command c on the free list. */
static void free_cmd(int16_t c)
{
    int16_t top;

    memcpy(&top, region + STACK + 26, sizeof(top));
    memcpy(region + STACK + 28 + 2 * c, &top, sizeof(top));
    memcpy(region + STACK + 26, &c, sizeof(c));
}

static int64_t word(size_t at)
{
    int64_t w;

    memcpy(&w, region + at, sizeof(w));
    return w;
}

/* The return queue's entry pos: its sequence and pointer. */
static int64_t seq_at(int64_t pos)
{
    return word(RETURNS + 192 + (size_t)(pos % NCMDS) * 64);
}

static uint64_t ptr_at(int64_t pos, bool debug)
{
    return (uint64_t)word(RETURNS + 192 + (size_t)(pos % NCMDS) * 64 +
                          (debug ? 24 : 16));
}

/* A producer's claim and fill of entry pos with command c (a peer's
 * _next and _commit). */
static void returned(int64_t pos, unsigned c, bool fill, bool debug)
{
    uint64_t ptr = BASE + CMDS + c * 368u;
    int64_t seq = pos + 1, next = pos + 1;

    memcpy(region + RETURNS, &next, sizeof(next));
    if (!fill)
        return;
    memcpy(region + RETURNS + 192 + (pos % NCMDS) * 64 + (debug ? 24 : 16),
           &ptr, sizeof(ptr));
    memcpy(region + RETURNS + 192 + (pos % NCMDS) * 64, &seq, sizeof(seq));
}

/* Peer i's region as this process maps it: owned by pid, named name. */
static void *their_region(pid_t pid, const char *name)
{
    uint8_t *r = mmap(NULL, THEIR_LEN, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint64_t total = THEIR_LEN, at_name = THEIR_LEN - 256;
    int32_t p = pid;

    ck_assert_ptr_ne(r, MAP_FAILED);
    r[0] = 10;
    memcpy(r + 40, &p, sizeof(p));
    memcpy(r + 56, &total, sizeof(total));
    memcpy(r + 128 + 6 * 8, &at_name, sizeof(at_name));
    strcpy((char *)r + at_name, name);
    return r;
}

static void set_peer(unsigned i, int64_t id, const void *mapped)
{
    uint64_t at = (uintptr_t)mapped;

    memcpy(region + PEERS + i * 64, &id, sizeof(id));
    memcpy(region + PEERS + i * 64 + 16, &at, sizeof(at));
}

START_TEST(test_followed_and_refused)
{
    struct ferry__shm_mend m;

    make_region(false);
    ck_assert(attach(&m));
    ck_assert_ptr_nonnull(m.returns);
    ck_assert_uint_eq(m.ncmds, NCMDS);
    ck_assert_uint_eq(m.cmds_base, BASE + CMDS);
    ck_assert_uint_eq(m.ptr_at, 16);
    make_region(true);
    ck_assert(attach(&m));
    ck_assert_uint_eq(m.ptr_at, 24);
    /* Which releases have a dead peer's operations given back. */
    ck_assert(ferry__shm_mend_gives_back(FI_VERSION(1, 17)));
    ck_assert(ferry__shm_mend_gives_back(FI_VERSION(2, 4)));
    ck_assert(ferry__shm_mend_gives_back(FI_VERSION(2, 6)));
    ck_assert(!ferry__shm_mend_gives_back(FI_VERSION(2, 5)));
    ck_assert(!ferry__shm_mend_gives_back(FI_VERSION(2, 7)));
    ck_assert(!ferry__shm_mend_gives_back(FI_VERSION(1, 16)));
    /* 2.5's commands have another layout: its peer table only. */
    make_region(false);
    ck_assert(ferry__shm_mend_attach(&m, region, LEN, FI_VERSION(2, 5),
                                     getpid(), OURS));
    ck_assert_ptr_nonnull(m.peers_v9);
    ck_assert_ptr_null(m.returns);
    /* Each of these: the peer table followed, the commands not. */
    for (int bad = 0; bad < 7; bad++) {
        make_region(false);
        switch (bad) {
        case 0: /* another command size */
            memcpy(region + STACK + 8, &(uint64_t){360}, 8);
            break;
        case 1: /* a stack of another size than the queue */
            memcpy(region + STACK + 16, &(uint64_t){NCMDS / 2}, 8);
            break;
        case 2: /* not a power of two */
            memcpy(region + STACK + 16, &(uint64_t){NCMDS - 1}, 8);
            break;
        case 3: /* commands that run into the queue */
            memcpy(region + STACK, &(uint64_t){CMDS - STACK + 64}, 8);
            break;
        case 4: /* a queue whose mask is not its size's */
            memcpy(region + RETURNS + 132, &(int32_t){NCMDS}, 4);
            break;
        case 5: /* the queue before the stack */
            memcpy(region + 128 + 3 * 8, &(uint64_t){STACK - 64}, 8);
            break;
        default: /* the queue past the SAR pool */
            memcpy(region + 128 + 4 * 8, &(uint64_t){RETURNS + 64}, 8);
            break;
        }
        ck_assert_msg(attach(&m), "case %d", bad);
        ck_assert_ptr_nonnull(m.peers_v9);
        ck_assert_msg(m.returns == NULL, "case %d followed", bad);
        ck_assert_uint_eq(ferry__shm_mend_return_to(&m, DEAD_NAME, DEAD), 0);
    }
}
END_TEST

static void dead_peers_commands(bool debug)
{
    struct ferry__shm_mend m;
    void *dead = their_region(DEAD, DEAD_NAME);
    void *live = their_region(getpid(), "ferry_4343_2abf_0");
    void *reborn = their_region(DEAD + 1, DEAD_NAME);

    make_region(debug);
    set_peer(1, 3, dead);
    set_peer(2, 4, live);
    set_peer(5, 6, reborn); /* the dead one's name, another process */
    post(0, 1, 2, 4);  /* a write copied by the peer: handed back */
    post(1, 1, 1, 4);  /* a write through its inject buffer: too */
    post(2, 1, 1, 2);  /* a read through an inject buffer: left */
    post(3, 1, 3, 4);  /* bounce buffers (SAR): left */
    post(4, 2, 2, 4);  /* the live peer's */
    post(5, 1, 2, 2);  /* free */
    post(6, 1, 2, 2);  /* handed back already */
    post(7, 5, 2, 4);  /* the process with the dead one's name */
    free_cmd(5);
    returned(0, 6, true, debug);
    /* A live peer claimed entry 1 and has not filled it yet. */
    returned(1, 4, false, debug);
    ck_assert(attach(&m));
    /* Another process's death, a live peer's name, a name of no peer:
     * nothing. */
    ck_assert_uint_eq(ferry__shm_mend_return_to(&m, DEAD_NAME, DEAD + 2), 0);
    ck_assert_uint_eq(
        ferry__shm_mend_return_to(&m, "ferry_4343_2abf_0", DEAD), 0);
    ck_assert_uint_eq(ferry__shm_mend_return_to(&m, "ferry_1_0_0", DEAD), 0);
    ck_assert_int_eq(word(RETURNS), 2);
    ck_assert_uint_eq(ferry__shm_mend_return_to(&m, DEAD_NAME, DEAD), 2);
    ck_assert_int_eq(word(RETURNS), 4);
    ck_assert_int_eq(seq_at(2), 3);
    ck_assert_int_eq(seq_at(3), 4);
    ck_assert_uint_eq(ptr_at(2, debug), BASE + CMDS);
    ck_assert_uint_eq(ptr_at(3, debug), BASE + CMDS + 368);
    ck_assert_int_eq(seq_at(1), 1); /* the live peer's, untouched */
    for (unsigned c = 0; c < NCMDS; c++)
        ck_assert_msg(((cmd(c)->smr_flags & (1u << 2)) != 0) == (c < 2),
                      "command %u: flags %#x", c, cmd(c)->smr_flags);
    /* Once: they are on the queue now. */
    ck_assert_uint_eq(ferry__shm_mend_return_to(&m, DEAD_NAME, DEAD), 0);
    munmap(dead, THEIR_LEN);
    munmap(live, THEIR_LEN);
    munmap(reborn, THEIR_LEN);
}

START_TEST(test_dead_peers_commands_handed_back)
{
    dead_peers_commands(false);
}
END_TEST

START_TEST(test_dead_peers_commands_handed_back_debug)
{
    dead_peers_commands(true);
}
END_TEST

/*
 * What the scan trusts of the region: a free list that loops or leaves
 * the stack, and a peer entry whose mapping is gone or never was a
 * region, hand nothing back and do not fault.
 */
START_TEST(test_bad_links_and_mappings)
{
    struct ferry__shm_mend m;
    void *gone = their_region(DEAD, DEAD_NAME);

    make_region(false);
    post(0, 1, 2, 4);
    post(1, 7, 2, 4);
    set_peer(1, 3, gone);
    set_peer(7, 3, (void *)(uintptr_t)0x10); /* nothing mapped there */
    ck_assert_int_eq(munmap(gone, THEIR_LEN), 0);
    ck_assert(attach(&m));
    ck_assert_uint_eq(ferry__shm_mend_return_to(&m, DEAD_NAME, DEAD), 0);
    /* A free list that loops: 2 -> 3 -> 2. */
    free_cmd(2);
    free_cmd(3);
    memcpy(region + STACK + 28 + 2 * 2, &(int16_t){3}, 2);
    gone = their_region(DEAD, DEAD_NAME);
    set_peer(1, 3, gone);
    ck_assert_uint_eq(ferry__shm_mend_return_to(&m, DEAD_NAME, DEAD), 0);
    /* One that leaves the stack. */
    memcpy(region + STACK + 28 + 2 * 2, &(int16_t){NCMDS}, 2);
    ck_assert_uint_eq(ferry__shm_mend_return_to(&m, DEAD_NAME, DEAD), 0);
    /* Mended: the command out to the dead peer goes back. */
    memcpy(region + STACK + 28 + 2 * 2, &(int16_t){-1}, 2);
    ck_assert_uint_eq(ferry__shm_mend_return_to(&m, DEAD_NAME, DEAD), 1);
    munmap(gone, THEIR_LEN);
}
END_TEST

static Suite *returns_suite(void)
{
    Suite *s = suite_create("shm_returns");
    TCase *tc = tu_tcase(s, "returns", 30);

    tcase_add_test(tc, test_followed_and_refused);
    tcase_add_test(tc, test_dead_peers_commands_handed_back);
    tcase_add_test(tc, test_dead_peers_commands_handed_back_debug);
    tcase_add_test(tc, test_bad_links_and_mappings);
    return s;
}

int main(void)
{
    uint64_t probe = 0x5eed, copy = 0;
    struct iovec local = {.iov_base = &copy, .iov_len = sizeof(copy)};
    struct iovec remote = {.iov_base = &probe, .iov_len = sizeof(probe)};

    /* The mend reads a peer's region where this process maps it through
     * process_vm_readv of itself, which a seccomp filter may refuse. */
    if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) !=
        (ssize_t)sizeof(copy)) {
        printf("SKIP: process_vm_readv of this process fails here (%s): "
               "the mend cannot tell a dead peer's commands\n",
               strerror(errno));
        return 77;
    }
    return tu_run(returns_suite());
}
