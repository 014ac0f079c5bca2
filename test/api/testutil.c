/*
 * Helpers shared by the Check suites (see testutil.h).
 */
#include "testutil.h"
#include "watchdog.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

const char *tu_providers[] = {"tcp;ofi_rxm", "shm"};
const size_t tu_nproviders = TU_ARRAY_LEN(tu_providers);

const char *tu_tcp(void)
{
    const char *p = getenv("FERRY_TEST_TCP");

    return p != NULL && *p != '\0' ? p : "tcp;ofi_rxm";
}

/* Before any suite reads tu_providers (they are built from it). */
__attribute__((constructor)) static void pick_tcp(void)
{
    tu_providers[0] = tu_tcp();
}

void tu_clear_ferry_env(void)
{
    static const char *const vars[] = {
        "FERRY_PROVIDER",           "FERRY_DOMAIN",
        "FERRY_MAX_RAILS",          "FERRY_ENDPOINTS_PER_DOMAIN",
        "FERRY_TIMEOUT_MS",         "FERRY_STAGING_BUFFERS",
        "FERRY_STAGING_CHUNK",      "FERRY_RCACHE_MAX_ENTRIES",
        "FERRY_RCACHE_MAX_BYTES",   "FERRY_KEEP_FI_MR_CACHE",
        "FERRY_SHM_LOOP_FAULT"};

    for (size_t i = 0; i < TU_ARRAY_LEN(vars); i++)
        unsetenv(vars[i]);
}

void tu_config(struct ferry_config *cfg, const char *prov)
{
    ck_assert_int_eq(ferry_config_init(cfg), 0);
    cfg->provider = prov;
    /* tcp over loopback; shm needs no domain.  Both reach this host only. */
    cfg->domain = strstr(prov, "tcp") != NULL ? "lo" : NULL;
    cfg->local_only = 1;
    cfg->timeout_ms = 30000;
}

ferry_context_t *tu_context_cfg(const struct ferry_config *cfg)
{
    ferry_context_t *ctx = NULL;
    int ret = ferry_context_create(cfg, &ctx);

    ck_assert_msg(ret == 0, "context on %s: %s", cfg->provider,
                  ferry_last_error());
    ck_assert_ptr_nonnull(ctx);
    return ctx;
}

ferry_context_t *tu_context(const char *prov)
{
    struct ferry_config cfg;

    tu_config(&cfg, prov);
    return tu_context_cfg(&cfg);
}

struct ferry_context_info tu_info(ferry_context_t *ctx)
{
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;

    ck_assert_msg(ferry_context_info(ctx, &info) == 0, "%s",
                  ferry_last_error());
    return info;
}

struct ferry_stats tu_stats(ferry_context_t *ctx)
{
    struct ferry_stats st = FERRY_STATS_INIT;

    ck_assert_msg(ferry_context_stats(ctx, &st) == 0, "%s",
                  ferry_last_error());
    return st;
}

/* The sum of a per-rail counter of struct ferry_stats. */
static uint64_t over_rails(const uint64_t per_rail[TU_STATS_RAILS])
{
    uint64_t sum = 0;

    for (size_t r = 0; r < TU_STATS_RAILS; r++)
        sum += per_rail[r];
    return sum;
}

uint64_t tu_bytes_posted(ferry_context_t *ctx)
{
    struct ferry_stats st = tu_stats(ctx);

    return over_rails(st.bytes_posted);
}

uint64_t tu_ops_posted(ferry_context_t *ctx)
{
    struct ferry_stats st = tu_stats(ctx);

    return over_rails(st.rma_ops_posted);
}

ferry_peer_t *tu_self_peer(ferry_context_t *ctx)
{
    uint8_t addr[512];
    size_t len = sizeof(addr);
    ferry_peer_t *peer = NULL;

    ck_assert_int_eq(ferry_context_address(ctx, addr, &len), 0);
    ck_assert_msg(ferry_peer_add(ctx, addr, len, &peer) == 0, "%s",
                  ferry_last_error());
    return peer;
}

void tu_pair_open_threads(struct tu_pair *p, const char *prov,
                          const struct ferry_config *base, int init_thread,
                          int target_thread)
{
    struct ferry_config cfg;
    uint8_t addr[512];
    size_t len = sizeof(addr);
    int ret;

    if (base != NULL)
        cfg = *base;
    else
        tu_config(&cfg, prov);
    cfg.provider = prov;
    cfg.progress_thread = init_thread;
    ret = ferry_context_create(&cfg, &p->init);
    ck_assert_msg(ret == 0, "initiator on %s: %s", prov, ferry_last_error());
    cfg.progress_thread = target_thread;
    ret = ferry_context_create(&cfg, &p->target);
    ck_assert_msg(ret == 0, "target on %s: %s", prov, ferry_last_error());
    ret = ferry_context_address(p->target, addr, &len);
    ck_assert_msg(ret == 0, "address: %s", ferry_last_error());
    ret = ferry_peer_add(p->init, addr, len, &p->peer);
    ck_assert_msg(ret == 0, "peer_add: %s", ferry_last_error());
}

void tu_pair_open(struct tu_pair *p, const char *prov,
                  const struct ferry_config *base)
{
    tu_pair_open_threads(p, prov, base, 0, 1);
}

void tu_assert_sentence(const char *first, ...)
{
    const char *msg = ferry_last_error();
    va_list ap;

    va_start(ap, first);
    for (const char *s = first; s != NULL; s = va_arg(ap, const char *))
        ck_assert_msg(strstr(msg, s) != NULL,
                      "the sentence lacks \"%s\": \"%s\"", s, msg);
    va_end(ap);
}

void tu_assert_same(const uint8_t *got, const uint8_t *want, size_t len,
                    const char *what)
{
    if (memcmp(got, want, len) == 0)
        return;
    for (size_t i = 0; i < len; i++)
        ck_assert_msg(got[i] == want[i],
                      "%s: byte %zu is 0x%02x, expected 0x%02x", what, i,
                      got[i], want[i]);
}

uint64_t tu_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t tu_ms_since(uint64_t t0)
{
    return (tu_now_ns() - t0) / 1000000u;
}

void tu_pair_close(struct tu_pair *p)
{
    ferry_context_close(p->init);
    ferry_context_close(p->target);
    memset(p, 0, sizeof(*p));
}

ferry_mem_t *tu_register(ferry_context_t *ctx, void *buf, size_t len,
                         unsigned access)
{
    ferry_mem_t *mem = NULL;
    int ret = ferry_mem_register(ctx, buf, len, FERRY_MEM_HOST, 0, access,
                                 &mem);

    ck_assert_msg(ret == 0, "register: %s", ferry_last_error());
    return mem;
}

size_t tu_export(ferry_mem_t *mem, uint8_t *blob, size_t cap)
{
    size_t len = cap;
    int ret = ferry_mem_export(mem, blob, &len);

    ck_assert_msg(ret == 0, "export: %s", ferry_last_error());
    return len;
}

ferry_rmem_t *tu_share(ferry_mem_t *mem, ferry_peer_t *peer)
{
    uint8_t blob[512];
    size_t len = tu_export(mem, blob, sizeof(blob));
    ferry_rmem_t *rmem = NULL;
    int ret = ferry_rmem_import(peer, blob, len, &rmem);

    ck_assert_msg(ret == 0, "import: %s", ferry_last_error());
    return rmem;
}

void tu_fx_open(struct tu_fx *f, const char *prov,
                const struct ferry_config *base, int init_thread,
                int target_thread, size_t tlen, size_t llen)
{
    memset(f, 0, sizeof(*f));
    f->stalled = !target_thread;
    tu_pair_open_threads(&f->p, prov, base, init_thread, target_thread);
    f->tlen = tlen;
    f->llen = llen;
    f->tbuf = tu_alloc_buf(tlen);
    f->lbuf = tu_alloc_buf(llen);
    f->tmem = tu_register(f->p.target, f->tbuf, tlen, RW);
    f->lmem = tu_register(f->p.init, f->lbuf, llen, 0);
    f->rmem = tu_share(f->tmem, f->p.peer);
    ck_assert_uint_eq(ferry_rmem_length(f->rmem), tlen);
}

void tu_finish_on_stalled(ferry_context_t *target, ferry_req_t *req,
                          const char *what)
{
    uint64_t t0 = tu_now_ns();
    int ret;

    while ((ret = ferry_req_test(req)) == FERRY_EINPROGRESS) {
        ck_assert_int_ge(ferry_progress(target), 0);
        ck_assert_msg(tu_ms_since(t0) < 60000, "%s: still running after 60 s",
                      what);
    }
    ck_assert_msg(ret == 0, "%s: ended with %s: %s", what, ferry_strerror(ret),
                  ferry_last_error());
    ferry_req_close(req);
}

/* tu_drive_fn's default: tu_finish_on_stalled on the fixture's target. */
static void drive_target(struct tu_fx *f, ferry_req_t *req, const char *what)
{
    tu_finish_on_stalled(f->p.target, req, what);
}

void tu_stalled_config(struct ferry_config *cfg, const char *prov,
                       size_t tlen)
{
    tu_config(cfg, prov);
    cfg->max_msg_size = tlen;
    /* One rail, also on shm (two endpoints by default): the tests look at
     * its queue. */
    cfg->endpoints_per_domain = 1;
}

void tu_fx_open_stalled(struct tu_fx *f, const char *prov,
                        const struct ferry_config *base, size_t tlen,
                        size_t llen, tu_drive_fn *drive)
{
    struct ferry_config cfg;
    struct ferry_iov iov;
    ferry_req_t *req;
    int ret;

    if (base == NULL) {
        tu_stalled_config(&cfg, prov, tlen);
        base = &cfg;
    }
    tu_fx_open(f, prov, base, 0, 0, tlen, llen);
    iov = (struct ferry_iov){f->lbuf, f->lmem, f->rmem, 0, 1};
    /* One write per rail (small requests take them in turn): each
     * endpoint has met the target's before the test stalls it. */
    for (unsigned r = 0; r < tu_info(f->p.init).nrails; r++) {
        f->lbuf[0] = (uint8_t)(0xe0 + r);
        ret = ferry_write(f->p.peer, &iov, 1, NULL, &req);
        ck_assert_msg(ret == 0, "warm-up write on %s: %s", prov,
                      ferry_last_error());
        (drive != NULL ? drive : drive_target)(f, req, "warm-up write");
        ck_assert_uint_eq(f->tbuf[0], 0xe0 + r);
    }
    f->lbuf[0] = f->tbuf[0] = 0;
}

void tu_fx_close(struct tu_fx *f)
{
    int ret;

    ret = ferry_rmem_close(f->rmem);
    ck_assert_msg(ret == 0, "rmem_free after the transfers: %s",
                  ferry_last_error());
    ret = ferry_mem_close(f->lmem);
    ck_assert_msg(ret == 0, "local deregister after the transfers: %s",
                  ferry_last_error());
    ret = ferry_mem_close(f->tmem);
    ck_assert_msg(ret == 0, "target deregister: %s", ferry_last_error());
    tu_pair_close(&f->p);
    tu_free_buf(f->tbuf, f->tlen);
    tu_free_buf(f->lbuf, f->llen);
}

void tu_xfer_ok(ferry_peer_t *peer, bool write, const struct ferry_iov *iov,
                size_t n, const char *what)
{
    ferry_req_t *req = NULL;
    int ret = write ? ferry_write(peer, iov, n, NULL, &req)
                    : ferry_read(peer, iov, n, NULL, &req);

    ck_assert_msg(ret == 0, "%s: posting failed with %s: %s", what,
                  ferry_strerror(ret), ferry_last_error());
    ck_assert_ptr_nonnull(req);
    ret = ferry_req_wait(req, -1);
    ck_assert_msg(ret == 0, "%s: ended with %s: %s", what,
                  ferry_strerror(ret), ferry_last_error());
    /* Testing an ended request again gives the same answer. */
    ck_assert_int_eq(ferry_req_test(req), 0);
    ferry_req_close(req);
}

/* splitmix64: cheap and every byte depends on seed and position. */
static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint8_t pattern_byte(size_t i, uint64_t seed)
{
    return (uint8_t)(mix(seed ^ (i / 8)) >> (8 * (i % 8)));
}

void tu_fill(void *buf, size_t len, uint64_t seed)
{
    uint8_t *b = buf;

    for (size_t i = 0; i < len; i++)
        b[i] = pattern_byte(i, seed);
}

size_t tu_check(const void *buf, size_t len, uint64_t seed)
{
    const uint8_t *b = buf;

    for (size_t i = 0; i < len; i++)
        if (b[i] != pattern_byte(i, seed))
            return i;
    return SIZE_MAX;
}

size_t tu_assert_landed_prefix(const void *buf, const void *before,
                               size_t len, size_t piece, uint64_t seed,
                               const char *what)
{
    const uint8_t *b = buf, *old = before;
    size_t npieces = (len + piece - 1) / piece, landed = 0;

    for (size_t p = 0; p < npieces; p++) {
        size_t at = p * piece, n = len - at < piece ? len - at : piece;
        bool is_new = true, is_old = true;

        for (size_t i = at; i < at + n && (is_new || is_old); i++) {
            is_new &= b[i] == pattern_byte(i, seed);
            is_old &= b[i] == old[i];
        }
        ck_assert_msg(is_new || is_old,
                      "%s: piece %zu of %zu ([%zu, +%zu)) landed in part",
                      what, p, npieces, at, n);
        ck_assert_msg(!is_new || is_old || landed == p,
                      "%s: piece %zu landed after piece %zu did not", what,
                      p, landed);
        if (is_new && landed == p)
            landed++;
    }
    ck_assert_msg(landed >= 1, "%s: not even the first piece, in flight, "
                               "landed",
                  what);
    return landed;
}

void tu_assert_pattern(const void *buf, size_t len, uint64_t seed,
                       const char *fmt, ...)
{
    size_t bad = tu_check(buf, len, seed);
    char what[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    ck_assert_msg(bad == SIZE_MAX,
                  "byte %zu of %zu differs from the pattern: %s", bad, len,
                  what);
}

void *tu_alloc_buf(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    ck_assert_msg(p != MAP_FAILED, "mmap of %zu bytes failed", len);
    return p;
}

void tu_free_buf(void *buf, size_t len)
{
    munmap(buf, len);
}

void tu_tmp_dir(char *dir, size_t len, const char *name)
{
    const char *tmp = getenv("TMPDIR");

    snprintf(dir, len, "%s/%s.XXXXXX", tmp && *tmp ? tmp : "/tmp", name);
    ck_assert_msg(mkdtemp(dir) != NULL, "mkdtemp %s failed", dir);
}

void tu_remove_tree(const char *dir)
{
    char cmd[PATH_MAX + 16];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

void tu_write_all(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;

    while (len > 0) {
        ssize_t n = write(fd, p, len);
        ck_assert_msg(n > 0, "pipe write failed");
        p += n;
        len -= (size_t)n;
    }
}

void tu_read_all(int fd, void *buf, size_t len)
{
    uint8_t *p = buf;

    while (len > 0) {
        ssize_t n = read(fd, p, len);
        ck_assert_msg(n > 0, "pipe read failed (peer gone?)");
        p += n;
        len -= (size_t)n;
    }
}

int tu_become_host(const char *netns)
{
    char path[256];
    int fd, ret;

    snprintf(path, sizeof(path), "/var/run/netns/%s", netns);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ret = setns(fd, CLONE_NEWNET);
    close(fd);
    /* Private propagation first: the tmpfs must not show up on the
     * machine's own /dev/shm. */
    if (ret == 0)
        ret = unshare(CLONE_NEWNS | CLONE_NEWUTS);
    if (ret == 0)
        ret = mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL);
    if (ret == 0)
        ret = mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=1g,mode=1777");
    if (ret == 0)
        ret = sethostname(netns, strlen(netns));
    return ret;
}

/* Where a target child runs: a network namespace (NULL: this one), a
 * domain (NULL: tu_config's), and whether /dev/shm is its own. */
struct child_place {
    const char *netns;
    const char *domain;
    bool own_shm;
};

/* A mount namespace of the calling process's own with a fresh tmpfs on
 * /dev/shm: what it keeps there is out of the parent's sight, as on
 * another host; 0 or -1 with errno. */
static int own_dev_shm(void)
{
    if (unshare(CLONE_NEWNS) != 0 ||
        mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
        return -1;
    return mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=64m");
}

/* The child's side; never returns.  Its exit codes say where it failed. */
void tu_send_blobs(int out, const uint8_t *addr, size_t alen,
                   const uint8_t *rkey, size_t rlen)
{
    if (write(out, &alen, sizeof(alen)) != sizeof(alen) ||
        write(out, addr, alen) != (ssize_t)alen ||
        write(out, &rlen, sizeof(rlen)) != sizeof(rlen) ||
        write(out, rkey, rlen) != (ssize_t)rlen)
        _exit(12);
}

/* The child's context on cfg, buf (len bytes) registered and exported,
 * its address and key blobs sent up; exits with child_main's codes (11,
 * 12) when that fails. */
static void child_open(int out, const struct ferry_config *cfg, uint8_t *buf,
                       size_t len, ferry_context_t **ctx, ferry_mem_t **mem)
{
    uint8_t addr[512], rkey[512];
    size_t alen = sizeof(addr), rlen = sizeof(rkey);

    if (ferry_context_create(cfg, ctx) != 0 ||
        ferry_context_address(*ctx, addr, &alen) != 0 ||
        ferry_mem_register(*ctx, buf, len, FERRY_MEM_HOST, 0,
                           FERRY_ACCESS_REMOTE_READ |
                               FERRY_ACCESS_REMOTE_WRITE,
                           mem) != 0 ||
        ferry_mem_export(*mem, rkey, &rlen) != 0)
        _exit(11);
    tu_send_blobs(out, addr, alen, rkey, rlen);
}

static void child_main(int in, int out, const char *prov, size_t len,
                       uint64_t seed, const struct child_place *at)
{
    const char *netns = at->netns, *domain = at->domain;
    struct ferry_config cfg;
    ferry_context_t *ctx;
    ferry_mem_t *mem;
    uint8_t *buf = mmap(NULL, len, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint8_t rkey[512];
    size_t rlen;
    char cmd;

    if (buf == MAP_FAILED)
        _exit(10);
    if (netns != NULL && tu_become_host(netns) != 0)
        _exit(15);
    if (at->own_shm && own_dev_shm() != 0)
        _exit(17);
    tu_fill(buf, len, seed);
    tu_config(&cfg, prov);
    cfg.progress_thread = 1;
    if (domain != NULL) {
        cfg.domain = domain;
        cfg.local_only = 0;
    }
    child_open(out, &cfg, buf, len, &ctx, &mem);
    while (read(in, &cmd, 1) == 1) {
        if (cmd == 'v') {
            uint64_t vseed;
            char ok;
            if (read(in, &vseed, sizeof(vseed)) != sizeof(vseed))
                _exit(13);
            /* The progress thread landed the data under ctx's lock; the
             * peer's word that it did came through another process, an
             * ordering ThreadSanitizer cannot see.  Taking the lock once
             * (ferry_progress) orders this thread after the landing. */
            ferry_progress(ctx);
            ok = tu_check(buf, len, vseed) == SIZE_MAX;
            if (write(out, &ok, 1) != 1)
                _exit(14);
        } else if (cmd == 'r') {
            /* A new region in place of the old one, which is gone:
             * deregistered, its memory unmapped, its key stale. */
            uint8_t *fresh = mmap(NULL, len, PROT_READ | PROT_WRITE,
                                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

            rlen = sizeof(rkey);
            if (fresh == MAP_FAILED || ferry_mem_close(mem) != 0)
                _exit(16);
            munmap(buf, len);
            buf = fresh;
            if (ferry_mem_register(ctx, buf, len, FERRY_MEM_HOST, 0,
                                   FERRY_ACCESS_REMOTE_READ |
                                       FERRY_ACCESS_REMOTE_WRITE,
                                   &mem) != 0 ||
                ferry_mem_export(mem, rkey, &rlen) != 0)
                _exit(16);
            if (write(out, &rlen, sizeof(rlen)) != sizeof(rlen) ||
                write(out, rkey, rlen) != (ssize_t)rlen)
                _exit(12);
        } else if (cmd == 'n') {
            /* A new context in place of the old one, closed. */
            if (ferry_mem_close(mem) != 0)
                _exit(16);
            ferry_context_close(ctx);
            child_open(out, &cfg, buf, len, &ctx, &mem);
        } else if (cmd == 'q') {
            break;
        }
    }
    ferry_context_close(ctx);
    _exit(0);
}

/* Fails the test, saying why, if the child ended before sending its
 * blobs (it exits with child_main's codes). */
static void expect_child_blobs(struct tu_child *c)
{
    struct pollfd pfd = {.fd = c->from_child, .events = POLLIN};
    int status = 0;

    /* Its first bytes, or its end (a hang-up), come within the test's
     * timeout. */
    ck_assert_int_eq(poll(&pfd, 1, -1), 1);
    if (!(pfd.revents & POLLHUP) || (pfd.revents & POLLIN))
        return;
    ck_assert(waitpid(c->pid, &status, 0) == c->pid);
    c->pid = 0;
    ck_abort_msg("the target child ended (status 0x%x) before sending its "
                 "blobs: exit 11 means its context, registration or export "
                 "failed, 15 that it could not enter its network namespace, "
                 "17 that it could not have a /dev/shm of its own, 10 and "
                 "12 that mmap or a pipe write failed",
                 status);
}

/* Reads the child's address and key blobs (child_open). */
static void read_blobs(struct tu_child *c)
{
    expect_child_blobs(c);
    tu_read_all(c->from_child, &c->addr_len, sizeof(c->addr_len));
    ck_assert(c->addr_len <= sizeof(c->addr));
    tu_read_all(c->from_child, c->addr, c->addr_len);
    tu_read_all(c->from_child, &c->rkey_len, sizeof(c->rkey_len));
    ck_assert(c->rkey_len <= sizeof(c->rkey));
    tu_read_all(c->from_child, c->rkey, c->rkey_len);
}

void tu_child_start(struct tu_child *c, const char *prov, size_t len,
                    uint64_t seed)
{
    tu_child_start_in(c, prov, len, seed, NULL, NULL);
}

static void child_start(struct tu_child *c, const char *prov, size_t len,
                        uint64_t seed, const struct child_place *at)
{
    int down[2], up[2];

    ck_assert_int_eq(pipe(down), 0);
    ck_assert_int_eq(pipe(up), 0);
    c->pid = fork();
    ck_assert_msg(c->pid >= 0, "fork failed");
    if (c->pid == 0) {
        close(down[1]);
        close(up[0]);
        child_main(down[0], up[1], prov, len, seed, at);
    }
    close(down[0]);
    close(up[1]);
    c->to_child = down[1];
    c->from_child = up[0];
    read_blobs(c);
}

void tu_child_start_in(struct tu_child *c, const char *prov, size_t len,
                       uint64_t seed, const char *netns, const char *domain)
{
    const struct child_place at = {netns, domain, false};

    child_start(c, prov, len, seed, &at);
}

void tu_child_start_apart(struct tu_child *c, const char *prov, size_t len,
                          uint64_t seed)
{
    const struct child_place at = {NULL, NULL, true};

    child_start(c, prov, len, seed, &at);
}

int tu_child_verify(struct tu_child *c, uint64_t seed)
{
    char ok = 0;

    tu_write_all(c->to_child, "v", 1);
    tu_write_all(c->to_child, &seed, sizeof(seed));
    tu_read_all(c->from_child, &ok, 1);
    return ok;
}

void tu_child_reregister(struct tu_child *c)
{
    tu_write_all(c->to_child, "r", 1);
    tu_read_all(c->from_child, &c->rkey_len, sizeof(c->rkey_len));
    ck_assert(c->rkey_len <= sizeof(c->rkey));
    tu_read_all(c->from_child, c->rkey, c->rkey_len);
}

void tu_child_renew(struct tu_child *c)
{
    tu_write_all(c->to_child, "n", 1);
    read_blobs(c);
}

void tu_child_stop(struct tu_child *c)
{
    int status = 0;

    if (c->pid <= 0)
        return;
    if (write(c->to_child, "q", 1) != 1)
        kill(c->pid, SIGKILL);
    ck_assert(waitpid(c->pid, &status, 0) == c->pid);
    close(c->to_child);
    close(c->from_child);
    c->pid = 0;
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "target child ended with status 0x%x", status);
}

void tu_child_reach(ferry_context_t *ctx, const struct tu_child *c,
                    ferry_peer_t **peer, ferry_rmem_t **rmem)
{
    ck_assert_msg(ferry_peer_add(ctx, c->addr, c->addr_len, peer) == 0,
                  "adding the child: %s", ferry_last_error());
    ck_assert_msg(ferry_rmem_import(*peer, c->rkey, c->rkey_len, rmem) == 0,
                  "importing the child's region: %s", ferry_last_error());
}

void tu_child_kill(struct tu_child *c)
{
    int status = 0;

    ck_assert_int_eq(kill(c->pid, SIGKILL), 0);
    ck_assert_int_eq(waitpid(c->pid, &status, 0), c->pid);
    ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
                  "child status 0x%x", status);
    c->pid = 0;
    close(c->to_child);
    close(c->from_child);
}

/*
 * hwloc 2.9's pci component (libpciaccess 0.17) leaks about 1 KiB per load
 * of the live topology, in any program (an hwloc-only one shows it too).
 * Every suite may load it (a context with several candidate domains orders
 * its rails by the topology).  A sanitized build asks these two functions
 * for its defaults: what hwloc allocates inside its own load is not
 * ferry's leak (the first suppression below).  libpciaccess has no
 * frame pointers, so only the slow unwinder sees hwloc_topology_load on
 * the stack of those allocations.
 *
 * The second is the sanitizer's own: starting a thread, ASan reads the
 * thread's stack bounds with pthread_getattr_np, whose 32-byte buffer
 * LeakSanitizer reports now and then when a thread (the registration
 * monitor's, or one of libfabric's) is still starting as a short test's
 * process exits (CI saw it once in check_mem; the allocation's stack has
 * no frame of ferry's or of the test's).
 */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
    return "leak:hwloc_topology_load\n"
           "leak:GetThreadStackTopAndBottom\n";
}

const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "fast_unwind_on_malloc=0";
}

/*
 * shm keeps each endpoint in a /dev/shm file that a killed process never
 * removes; tests kill peers on purpose, so sweep the files of ferry
 * endpoints (named ferry_<pid>_...) whose process is gone.
 */
static void sweep_dead_shm_files(void)
{
    DIR *d = opendir("/dev/shm");
    struct dirent *e;

    if (d == NULL)
        return;
    while ((e = readdir(d)) != NULL) {
        char path[300];
        int pid;

        if (sscanf(e->d_name, "ferry_%d_", &pid) != 1 || pid <= 0 ||
            kill(pid, 0) == 0 || errno != ESRCH)
            continue;
        snprintf(path, sizeof(path), "/dev/shm/%s", e->d_name);
        unlink(path);
    }
    closedir(d);
}

bool tu_check_forks(void)
{
    const char *fork_mode = getenv("CK_FORK");

    return fork_mode == NULL || strcmp(fork_mode, "no") != 0;
}

TCase *tu_tcase(Suite *s, const char *name, int timeout)
{
    TCase *tc = tcase_create(name);

    tcase_set_timeout(tc, timeout);
    tu_watchdog_add(tc, name, timeout);
    suite_add_tcase(s, tc);
    return tc;
}

void *tu_heap_copy(const void *buf, size_t len)
{
    void *copy = malloc(len ? len : 1);

    ck_assert_ptr_nonnull(copy);
    if (len)
        memcpy(copy, buf, len);
    return copy;
}

int tu_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    sweep_dead_shm_files();
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
