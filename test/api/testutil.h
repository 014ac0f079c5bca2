/*
 * Helpers shared by the Check suites: contexts over loopback providers,
 * blob exchange, data patterns, and a target in a child process.
 */
#ifndef FERRY_TESTUTIL_H
#define FERRY_TESTUTIL_H

#include <check.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "ferry.h"

/* Elements of an array (not a pointer). */
#define TU_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#define KiB ((size_t)1024)
#define MiB (1024 * KiB)
/* Remote read and write: what the target regions of the tests grant. */
#define RW (FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE)

/* Asserts that ret is code and that the last error contains phrase. */
#define TU_EXPECT_ERROR(ret, code, phrase)                                    \
    do {                                                                      \
        int ret_ = (ret);                                                     \
        ck_assert_msg(ret_ == (code), "got %d (%s), expected %s: %s", ret_,   \
                      ferry_strerror(ret_), #code, ferry_last_error());       \
        ck_assert_msg(strstr(ferry_last_error(), (phrase)) != NULL,           \
                      "sentence \"%s\" lacks \"%s\"", ferry_last_error(),     \
                      (phrase));                                              \
    } while (0)

/* The providers that really move data on this machine: tu_tcp(), then
 * shm. */
extern const char *tu_providers[];
extern const size_t tu_nproviders;

/*
 * The tcp provider the suites run: "tcp;ofi_rxm" (rxm over tcp's
 * connected endpoints, in every libfabric ferry supports), or what
 * FERRY_TEST_TCP names: "tcp" runs them on the native reliable-datagram
 * provider of libfabric 1.18 and later, which ferry picks by default
 * there (docs/compatibility.md).
 */
const char *tu_tcp(void);

/* Unsets what ferry_config_init reads: FERRY_PROVIDER, FERRY_DOMAIN,
 * FERRY_MAX_RAILS, FERRY_TIMEOUT_MS, FERRY_STAGING_*, FERRY_RCACHE_*,
 * FERRY_KEEP_FI_MR_CACHE. */
void tu_clear_ferry_env(void);

/* A config for provider prov over loopback, with a short deadline. */
void tu_config(struct ferry_config *cfg, const char *prov);

/* A context from cfg, or from tu_config(prov); assert success. */
ferry_context_t *tu_context_cfg(const struct ferry_config *cfg);
ferry_context_t *tu_context(const char *prov);
/* ferry_context_info and ferry_context_stats of ctx; assert success. */
struct ferry_context_info tu_info(ferry_context_t *ctx);
struct ferry_stats tu_stats(ferry_context_t *ctx);
/* The rails struct ferry_stats counts for. */
#define TU_STATS_RAILS TU_ARRAY_LEN(((struct ferry_stats *)0)->bytes_posted)
/* Bytes and RMA operations ctx has posted, over all its rails (shm has
 * two endpoints on its domain, each a rail). */
uint64_t tu_bytes_posted(ferry_context_t *ctx);
uint64_t tu_ops_posted(ferry_context_t *ctx);
/* The context as its own peer: enough to import what it exports. */
ferry_peer_t *tu_self_peer(ferry_context_t *ctx);

/*
 * Two contexts in this process: init (posts) and target (owns memory, runs
 * a progress thread), and init's peer handle for target.  base may be NULL;
 * its provider is replaced by prov.
 */
struct tu_pair {
    ferry_context_t *init;
    ferry_context_t *target;
    ferry_peer_t *peer;
};
void tu_pair_open(struct tu_pair *p, const char *prov,
                  const struct ferry_config *base);
/* The same, with each side's progress thread chosen: without one on the
 * target nothing lands unless the test progresses the target itself. */
void tu_pair_open_threads(struct tu_pair *p, const char *prov,
                          const struct ferry_config *base, int init_thread,
                          int target_thread);
void tu_pair_close(struct tu_pair *p);

/* Registers host memory [buf, +len) granting access; asserts success. */
ferry_mem_t *tu_register(ferry_context_t *ctx, void *buf, size_t len,
                         unsigned access);
/* Exports mem into blob (cap bytes) and returns its length; asserts. */
size_t tu_export(ferry_mem_t *mem, uint8_t *blob, size_t cap);
/* Exports mem and imports it through peer; asserts success. */
ferry_rmem_t *tu_share(ferry_mem_t *mem, ferry_peer_t *peer);

/*
 * A pair (tu_pair_open_threads) with a target region of tlen bytes (remote
 * read and write, imported by the initiator as rmem) and a local region of
 * llen bytes on the initiator.  stalled: the target has no progress
 * thread, so nothing lands unless the test progresses it.  tu_fx_close
 * releases every handle explicitly, so that a reference a finished request
 * kept shows as a failure.
 */
struct tu_fx {
    struct tu_pair p;
    bool stalled;
    uint8_t *tbuf;
    size_t tlen;
    ferry_mem_t *tmem;
    ferry_rmem_t *rmem;
    uint8_t *lbuf;
    size_t llen;
    ferry_mem_t *lmem;
};
void tu_fx_open(struct tu_fx *f, const char *prov,
                const struct ferry_config *base, int init_thread,
                int target_thread, size_t tlen, size_t llen);
/* Progresses target (which has no progress thread) until req ends, 60 s
 * at most; asserts it succeeded and frees it. */
void tu_finish_on_stalled(ferry_context_t *target, ferry_req_t *req,
                          const char *what);
/* tu_config with operations of tlen bytes and one rail: the base
 * tu_fx_open_stalled takes when given none. */
void tu_stalled_config(struct ferry_config *cfg, const char *prov,
                       size_t tlen);
/*
 * The same stalled: no progress thread on either side.  base NULL:
 * tu_stalled_config, for tests that reason about one operation per
 * region-sized transfer.  Connection set-up needs the target's progress
 * too, so a one-byte write on each rail gets it done first, each seen to
 * its end by drive (NULL: progressing the target until it ends), which
 * asserts it succeeded and frees it; later operations go out when posted.
 */
typedef void tu_drive_fn(struct tu_fx *f, ferry_req_t *req, const char *what);
void tu_fx_open_stalled(struct tu_fx *f, const char *prov,
                        const struct ferry_config *base, size_t tlen,
                        size_t llen, tu_drive_fn *drive);
void tu_fx_close(struct tu_fx *f);

/* Posts iov as a write or read, waits for it and frees it; asserts that
 * it succeeded, and that testing it again gives the same answer. */
void tu_xfer_ok(ferry_peer_t *peer, bool write, const struct ferry_iov *iov,
                size_t n, const char *what);

/* Deterministic pattern from seed; tu_check returns the first bad index or
 * SIZE_MAX when every byte matches. */
void tu_fill(void *buf, size_t len, uint64_t seed);
size_t tu_check(const void *buf, size_t len, uint64_t seed);
/* Asserts that buf[0, len) is pattern seed; the printf-style message
 * says what it is. */
void tu_assert_pattern(const void *buf, size_t len, uint64_t seed,
                       const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/*
 * What a write of pattern `seed` over buf[0, len) may leave when it was
 * cancelled (or freed) in flight: ferry posts its pieces of `piece` bytes
 * in order, and one the provider pushed back (-FI_EAGAIN) stays queued in
 * ferry and is dropped by the cancel.  So buf must be some pieces of the
 * new pattern, at least the first (it was in flight), then pieces exactly
 * as `before` (a copy of buf taken before the write), never a piece in
 * part.  Returns how many pieces landed; fails the test naming `what`.
 */
size_t tu_assert_landed_prefix(const void *buf, const void *before,
                               size_t len, size_t piece, uint64_t seed,
                               const char *what);

/* Asserts that the last error holds every one of the given pieces (a
 * NULL-terminated list). */
void tu_assert_sentence(const char *first, ...);

/* Asserts got == want over len bytes, naming the first difference. */
void tu_assert_same(const uint8_t *got, const uint8_t *want, size_t len,
                    const char *what);
/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t tu_now_ns(void);
/* How far a request's times (ferry_req_result) may stand from
 * tu_now_ns's clock: ferry reads them through the CPU's time stamp
 * counter, within a few microseconds of clock_gettime (base/clock.h). */
#define TU_REQ_CLOCK_SLACK_NS (20u * 1000u)
/* Milliseconds since t0, a tu_now_ns() time. */
uint64_t tu_ms_since(uint64_t t0);

/* Page-aligned, zeroed allocation (mmap); tu_free_buf unmaps it. */
void *tu_alloc_buf(size_t len);
void tu_free_buf(void *buf, size_t len);

/* A fresh directory $TMPDIR/name.XXXXXX (/tmp without TMPDIR), into dir;
 * tu_remove_tree removes it and what it holds. */
void tu_tmp_dir(char *dir, size_t len, const char *name);
void tu_remove_tree(const char *dir);

/* Blocking whole-buffer pipe I/O; assert on failure. */
void tu_write_all(int fd, const void *buf, size_t len);
void tu_read_all(int fd, void *buf, size_t len);

/*
 * A target in a forked child: it opens a context for prov (with a progress
 * thread), registers `len` bytes filled with pattern `seed` for remote
 * read and write, and sends its address and remote-key blobs.  Then it
 * waits for a command byte: 'v' verifies the buffer against pattern
 * vseed (given after the command) and answers 1 or 0; 'r' deregisters the
 * region, unmaps it and registers a new zeroed one of the same length in
 * its place, sending its remote-key blob; 'n' closes its context and
 * opens another (a new address) on the same buffer, sending both blobs
 * again; 'q' exits.
 */
struct tu_child {
    pid_t pid;
    int to_child;
    int from_child;
    uint8_t addr[512];
    size_t addr_len;
    uint8_t rkey[512];
    size_t rkey_len;
};
void tu_child_start(struct tu_child *c, const char *prov, size_t len,
                    uint64_t seed);
/* Makes the calling process a host of its own, as the simulated hosts of
 * test/rig.sh are: into network namespace netns (by name, made by `ip
 * netns add`), then a mount namespace with a private tmpfs on /dev/shm and
 * a UTS namespace named after netns, so that neither shared memory nor a
 * hostname is shared with the processes of other namespaces.  0, or -1
 * with errno. */
int tu_become_host(const char *netns);
/* The same with the child in network namespace netns (by name, made by
 * `ip netns add`; NULL: this one) on domain (NULL: tu_config's). */
void tu_child_start_in(struct tu_child *c, const char *prov, size_t len,
                       uint64_t seed, const char *netns, const char *domain);
/* The same with the child in a mount namespace of its own, with its own
 * /dev/shm: to this process it is on another host as far as /dev/shm
 * goes (ferry's pulse tables are there), though still on loopback.
 * Needs root (CAP_SYS_ADMIN). */
void tu_child_start_apart(struct tu_child *c, const char *prov, size_t len,
                          uint64_t seed);
/* Asks the child to verify its buffer against seed; true if it matches. */
int tu_child_verify(struct tu_child *c, uint64_t seed);
/* 'r': the child's region is replaced; c->rkey becomes the new one's
 * blob, and the old blob's key is stale. */
void tu_child_reregister(struct tu_child *c);
/* In a child: sends its address and key blobs up pipe out as
 * tu_child_start reads them (length, bytes, each); _exit(12) when a
 * write fails. */
void tu_send_blobs(int out, const uint8_t *addr, size_t alen,
                   const uint8_t *rkey, size_t rlen);
/* 'n': the child's context is replaced; c->addr and c->rkey become the
 * new one's, a new peer to this process. */
void tu_child_renew(struct tu_child *c);
/* Tells the child to exit and reaps it; asserts a clean exit. */
void tu_child_stop(struct tu_child *c);
/* SIGKILLs the child and reaps it. */
void tu_child_kill(struct tu_child *c);
/* Adds the child as a peer of ctx and imports its region. */
void tu_child_reach(ferry_context_t *ctx, const struct tu_child *c,
                    ferry_peer_t **peer, ferry_rmem_t **rmem);

/* A test case added to s, with its own timeout in seconds, and a
 * watchdog that prints the stacks of a test about to time out. */
TCase *tu_tcase(Suite *s, const char *name, int timeout);
/* Whether Check runs every test in a process of its own (it forks one
 * per test unless CK_FORK=no). */
bool tu_check_forks(void);

/*
 * An exact-size heap copy of buf (free it): a blob passed this way makes
 * any read past len an out-of-bounds read that AddressSanitizer reports.
 */
void *tu_heap_copy(const void *buf, size_t len);

/* Runs a suite and returns the exit code (0 pass, 1 fail). */
int tu_run(Suite *s);

#endif /* FERRY_TESTUTIL_H */
