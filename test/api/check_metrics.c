/*
 * ferry_metrics_text against what moved: real writes, reads and failures
 * between two contexts, read back from the exposition text; and the
 * telemetry snapshots (config.telemetry_dir).
 */
#include "testutil.h"

#include <ferry.h>

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PROV "shm"
#define LEN (1u << 20)

/* The whole text of ctx's metrics, asserted; free() it. */
static char *metrics(ferry_context_t *ctx)
{
    size_t need = 0;
    char *text;

    ck_assert_int_eq(ferry_metrics_text(ctx, NULL, 0, &need), FERRY_ENOSPC);
    ck_assert_uint_gt(need, 1);
    need += 4096; /* it may grow between the calls */
    text = malloc(need);
    ck_assert_ptr_nonnull(text);
    ck_assert_msg(ferry_metrics_text(ctx, text, need, NULL) == 0, "%s",
                  ferry_last_error());
    return text;
}

/*
 * The sum of the samples of metric name (the exact name: "x" does not
 * match "x_total") whose labels contain every one of the NULL-ended
 * pieces, e.g. "op=\"write\"".
 */
static double sum_of(const char *text, const char *name, ...)
{
    size_t nlen = strlen(name);
    double sum = 0;

    for (const char *line = text; *line != '\0';) {
        const char *end = strchr(line, '\n');
        size_t len = end != NULL ? (size_t)(end - line) : strlen(line);
        char buf[1024];
        bool all = true;
        va_list ap;

        ck_assert_uint_lt(len, sizeof(buf));
        memcpy(buf, line, len);
        buf[len] = '\0';
        line += len + (end != NULL);
        if (buf[0] == '#' || strncmp(buf, name, nlen) != 0 ||
            (buf[nlen] != '{' && buf[nlen] != ' '))
            continue;
        va_start(ap, name);
        for (const char *piece = va_arg(ap, const char *); piece != NULL;
             piece = va_arg(ap, const char *))
            all = all && strstr(buf, piece) != NULL;
        va_end(ap);
        if (all)
            sum += strtod(strrchr(buf, ' ') + 1, NULL);
    }
    return sum;
}

struct traffic {
    struct tu_pair p;
    uint8_t *buf, *tbuf;
    ferry_mem_t *lmem, *tmem;
    ferry_rmem_t *rmem;
};

static void traffic_open(struct traffic *t)
{
    tu_pair_open(&t->p, PROV, NULL);
    t->buf = tu_alloc_buf(LEN);
    t->tbuf = tu_alloc_buf(LEN);
    t->lmem = tu_register(t->p.init, t->buf, LEN, 0);
    t->tmem = tu_register(t->p.target, t->tbuf, LEN,
                          FERRY_ACCESS_REMOTE_READ |
                              FERRY_ACCESS_REMOTE_WRITE);
    t->rmem = tu_share(t->tmem, t->p.peer);
}

static void traffic_close(struct traffic *t)
{
    tu_pair_close(&t->p);
    tu_free_buf(t->buf, LEN);
    tu_free_buf(t->tbuf, LEN);
}

/* Writes of 1..n pages and reads of one 64 KiB block, each waited for:
 * the bytes, operations, requests and histograms say exactly that. */
START_TEST(test_counts_match_traffic)
{
    struct traffic t;
    uint64_t wrote = 0;
    const int writes = 12, reads = 3;
    char *text;

    traffic_open(&t);
    for (int i = 1; i <= writes; i++) {
        struct ferry_iov iov = {t.buf, t.lmem, t.rmem, 0, 4096u * (size_t)i};

        tu_xfer_ok(t.p.peer, true, &iov, 1, "a write");
        wrote += iov.len;
    }
    for (int i = 0; i < reads; i++) {
        struct ferry_iov iov = {t.buf, t.lmem, t.rmem, 65536, 65536};

        tu_xfer_ok(t.p.peer, false, &iov, 1, "a read");
    }
    text = metrics(t.p.init);
    ck_assert_double_eq(sum_of(text, "ferry_bytes_total", "op=\"write\"",
                               NULL),
                        (double)wrote);
    ck_assert_double_eq(sum_of(text, "ferry_bytes_total", "op=\"read\"",
                               NULL),
                        (double)reads * 65536);
    ck_assert_double_ge(sum_of(text, "ferry_operations_total",
                               "op=\"write\"", NULL),
                        writes);
    ck_assert_double_eq(sum_of(text, "ferry_requests_total", "op=\"write\"",
                               "outcome=\"ok\"", NULL),
                        writes);
    ck_assert_double_eq(sum_of(text, "ferry_requests_total", "op=\"read\"",
                               "outcome=\"ok\"", NULL),
                        reads);
    ck_assert_double_eq(sum_of(text, "ferry_request_duration_seconds_count",
                               "op=\"write\"", NULL),
                        writes);
    ck_assert_double_eq(sum_of(text, "ferry_request_size_bytes_sum",
                               "op=\"write\"", NULL),
                        (double)wrote);
    /* Sizes 4 KiB .. 48 KiB: 1 in the 4 KiB bucket, 4 up to 16 KiB. */
    ck_assert_double_eq(sum_of(text, "ferry_request_size_bytes_bucket",
                               "op=\"write\"", "le=\"4096\"", NULL),
                        1);
    ck_assert_double_eq(sum_of(text, "ferry_request_size_bytes_bucket",
                               "op=\"write\"", "le=\"16384\"", NULL),
                        4);
    ck_assert_double_eq(sum_of(text, "ferry_request_size_bytes_bucket",
                               "op=\"write\"", "le=\"+Inf\"", NULL),
                        writes);
    ck_assert_double_eq(sum_of(text, "ferry_requests_in_flight", NULL), 0);
    ck_assert_double_eq(sum_of(text, "ferry_peer_up", NULL), 1);
    ck_assert_ptr_nonnull(strstr(text, "ferry_info{provider=\"shm\""));
    free(text);
    /* The target took nothing itself: its requests are none. */
    text = metrics(t.p.target);
    ck_assert_double_eq(sum_of(text, "ferry_requests_total", NULL), 0);
    free(text);
    traffic_close(&t);
}
END_TEST

/* A request that fails is counted under its error: a write through the
 * key of a region the target closed (stale, docs/semantics.md). */
START_TEST(test_failures_by_outcome)
{
    struct traffic t;
    struct ferry_iov iov;
    ferry_req_t *req = NULL;
    char *text;
    int ret;

    traffic_open(&t);
    ck_assert_int_eq(ferry_mem_close(t.tmem), 0);
    iov = (struct ferry_iov){t.buf, t.lmem, t.rmem, 0, 4096};
    ck_assert_int_eq(ferry_write(t.p.peer, &iov, 1, NULL, &req), 0);
    ret = ferry_req_wait(req, 10000);
    ck_assert_msg(ret == FERRY_ESTALE, "the write ended with %s: %s",
                  ferry_strerror(ret), ferry_last_error());
    ck_assert_int_eq(ferry_req_close(req), 0);
    text = metrics(t.p.init);
    ck_assert_double_eq(sum_of(text, "ferry_requests_total", "op=\"write\"",
                               "outcome=\"stale\"", NULL),
                        1);
    ck_assert_double_eq(sum_of(text, "ferry_requests_total", "op=\"write\"",
                               "outcome=\"ok\"", NULL),
                        0);
    free(text);
    traffic_close(&t);
}
END_TEST

/* A closed peer's counts stay, summed under peer="(closed)". */
START_TEST(test_closed_peer_keeps_its_counts)
{
    struct traffic t;
    struct ferry_iov iov;
    char *text;

    traffic_open(&t);
    iov = (struct ferry_iov){t.buf, t.lmem, t.rmem, 0, 8192};
    tu_xfer_ok(t.p.peer, true, &iov, 1, "a write");
    ck_assert_int_eq(ferry_rmem_close(t.rmem), 0);
    ck_assert_int_eq(ferry_peer_close(t.p.peer), 0);
    t.p.peer = NULL;
    text = metrics(t.p.init);
    ck_assert_double_eq(sum_of(text, "ferry_bytes_total",
                               "peer=\"(closed)\"", "op=\"write\"", NULL),
                        8192);
    ck_assert_double_eq(sum_of(text, "ferry_requests_total",
                               "peer=\"(closed)\"", "outcome=\"ok\"", NULL),
                        1);
    free(text);
    traffic_close(&t);
}
END_TEST

/* Two handles of one address are one peer: one series each, summed
 * (two would be a duplicate that Prometheus refuses). */
START_TEST(test_same_address_one_series)
{
    ferry_context_t *ctx = tu_context(PROV);
    uint8_t *buf = tu_alloc_buf(LEN);
    ferry_mem_t *mem = tu_register(ctx, buf, LEN,
                                   FERRY_ACCESS_REMOTE_READ |
                                       FERRY_ACCESS_REMOTE_WRITE);
    ferry_peer_t *a = tu_self_peer(ctx), *b = tu_self_peer(ctx);
    ferry_rmem_t *ra = tu_share(mem, a), *rb = tu_share(mem, b);
    struct ferry_iov ia = {buf, mem, ra, 4096, 4096};
    struct ferry_iov ib = {buf, mem, rb, 8192, 8192};
    char *text;

    ck_assert_ptr_ne(a, b);
    tu_xfer_ok(a, true, &ia, 1, "a write through the first handle");
    tu_xfer_ok(b, true, &ib, 1, "a write through the second");
    text = metrics(ctx);
    ck_assert_double_eq(sum_of(text, "ferry_peer_up", NULL), 1);
    ck_assert_double_eq(sum_of(text, "ferry_bytes_total", "op=\"write\"",
                               NULL),
                        4096 + 8192);
    ck_assert_double_eq(sum_of(text, "ferry_requests_total",
                               "outcome=\"ok\"", "op=\"write\"", NULL),
                        2);
    free(text);
    ck_assert_int_eq(ferry_context_close(ctx), 0);
    tu_free_buf(buf, LEN);
}
END_TEST

/* Too small a buffer: FERRY_ENOSPC, what it needs, and a NUL end. */
START_TEST(test_small_buffer)
{
    ferry_context_t *ctx = tu_context(PROV);
    char small[64];
    size_t need = 0;

    memset(small, 'x', sizeof(small));
    TU_EXPECT_ERROR(ferry_metrics_text(ctx, small, sizeof(small), &need),
                    FERRY_ENOSPC, "call again with *need bytes");
    ck_assert_uint_gt(need, sizeof(small));
    ck_assert_int_eq(small[sizeof(small) - 1], '\0');
    TU_EXPECT_ERROR(ferry_metrics_text(ctx, NULL, 10, &need), FERRY_EINVAL,
                    "buf is NULL");
    TU_EXPECT_ERROR(ferry_metrics_text(NULL, small, sizeof(small), &need),
                    FERRY_EINVAL, "context is NULL");
    ck_assert_int_eq(ferry_context_close(ctx), 0);
}
END_TEST

/* The snapshot file's name in dir, into path; false if there is none. */
static bool snapshot_in(const char *dir, char *path, size_t len)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    bool found = false;

    ck_assert_ptr_nonnull(d);
    while (!found && (e = readdir(d)) != NULL)
        if (strncmp(e->d_name, "ferry-", 6) == 0) {
            snprintf(path, len, "%s/%s", dir, e->d_name);
            found = true;
        }
    closedir(d);
    return found;
}

/* A whole small file into text (at most len - 1 bytes), NUL-ended. */
static void read_small(const char *path, char *text, size_t len)
{
    FILE *f = fopen(path, "r");
    size_t n;

    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    n = fread(text, 1, len - 1, f);
    fclose(f);
    text[n] = '\0';
}

/* A context writing its snapshots into dir every 100 ms, once its first
 * is there: its path into path. */
static ferry_context_t *telemetry_context(const char *dir, char *path,
                                          size_t len)
{
    struct ferry_config cfg;
    ferry_context_t *ctx;
    uint64_t t0 = tu_now_ns();

    tu_config(&cfg, PROV);
    cfg.telemetry_dir = dir;
    cfg.telemetry_interval_ms = 100;
    ctx = tu_context_cfg(&cfg);
    while (!snapshot_in(dir, path, len) && tu_ms_since(t0) < 5000)
        usleep(20000);
    ck_assert_msg(snapshot_in(dir, path, len), "no snapshot in %s after 5 s",
                  dir);
    return ctx;
}

/* config.telemetry_dir: a snapshot appears, says whose it is, holds the
 * metrics, and goes with the context. */
START_TEST(test_telemetry_snapshot)
{
    ferry_context_t *ctx;
    char dir[256], path[512], want[64], text[4096];

    tu_tmp_dir(dir, sizeof(dir), "telemetry");
    ctx = telemetry_context(dir, path, sizeof(path));
    read_small(path, text, sizeof(text));
    snprintf(want, sizeof(want), "# pid %ld\n", (long)getpid());
    ck_assert_msg(strncmp(text, "# ferry telemetry 1\n", 20) == 0 &&
                      strstr(text, want) != NULL &&
                      strstr(text, "# starttime ") != NULL &&
                      strstr(text, "ferry_info{") != NULL,
                  "snapshot %s: %s", path, text);
    ck_assert_int_eq(ferry_context_close(ctx), 0);
    ck_assert_msg(!snapshot_in(dir, path, sizeof(path)),
                  "%s stayed after the context closed", path);
    tu_remove_tree(dir);
}
END_TEST

/* A shared telemetry directory: links planted at every temporary name
 * this process's contexts would write through (.ferry-PID-N.prom.tmp,
 * N up to 64), pointing at a file of this user's.  The snapshot is
 * written and renamed into place as a file; the link's target is never
 * touched. */
START_TEST(test_telemetry_planted_links)
{
    ferry_context_t *ctx;
    char dir[256], aside[256], victim[512], link[512], path[512];
    char text[4096];
    struct stat st;
    FILE *f;

    tu_tmp_dir(dir, sizeof(dir), "telemetry-shared");
    tu_tmp_dir(aside, sizeof(aside), "telemetry-victim");
    snprintf(victim, sizeof(victim), "%s/precious", aside);
    f = fopen(victim, "w");
    ck_assert_ptr_nonnull(f);
    fputs("precious\n", f);
    fclose(f);
    for (unsigned n = 1; n <= 64; n++) {
        snprintf(link, sizeof(link), "%s/.ferry-%ld-%u.prom.tmp", dir,
                 (long)getpid(), n);
        ck_assert_int_eq(symlink(victim, link), 0);
    }
    ctx = telemetry_context(dir, path, sizeof(path));
    usleep(300000); /* two more snapshots at least */
    ck_assert_int_eq(lstat(path, &st), 0);
    ck_assert_msg(S_ISREG(st.st_mode), "%s is not a file (mode %o)", path,
                  (unsigned)st.st_mode);
    read_small(path, text, sizeof(text));
    ck_assert_msg(strncmp(text, "# ferry telemetry 1\n", 20) == 0,
                  "snapshot %s: %s", path, text);
    ck_assert_int_eq(ferry_context_close(ctx), 0);
    read_small(victim, text, sizeof(text));
    ck_assert_msg(strcmp(text, "precious\n") == 0,
                  "the file a planted link points at was written: %.200s",
                  text);
    tu_remove_tree(dir);
    tu_remove_tree(aside);
}
END_TEST

START_TEST(test_telemetry_bad_dir)
{
    struct ferry_config cfg;
    ferry_context_t *ctx = NULL;

    tu_config(&cfg, PROV);
    cfg.telemetry_dir = "/proc/no/such/dir";
    TU_EXPECT_ERROR(ferry_context_create(&cfg, &ctx), FERRY_EINVAL,
                    "config.telemetry_dir \"/proc/no/such/dir\"");
    ck_assert_ptr_null(ctx);
}
END_TEST

static Suite *metrics_suite(void)
{
    Suite *s = suite_create("metrics");
    TCase *tc = tu_tcase(s, "text", 60);

    tcase_add_test(tc, test_counts_match_traffic);
    tcase_add_test(tc, test_failures_by_outcome);
    tcase_add_test(tc, test_closed_peer_keeps_its_counts);
    tcase_add_test(tc, test_same_address_one_series);
    tcase_add_test(tc, test_small_buffer);
    tc = tu_tcase(s, "telemetry", 60);
    tcase_add_test(tc, test_telemetry_snapshot);
    tcase_add_test(tc, test_telemetry_planted_links);
    tcase_add_test(tc, test_telemetry_bad_dir);
    return s;
}

int main(void)
{
    return tu_run(metrics_suite());
}
