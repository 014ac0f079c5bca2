/*
 * The etcd backend facing a broken or hostile etcd, or a proxy in front
 * of one: a fake etcd on loopback (fakeetcd.h) answers one request with
 * something wrong, and the process must survive it, the call fail with a
 * sentence naming the endpoint and what was wrong, and nothing leak.
 *
 * Positions: every field ferry reads in an answer (the answer itself,
 * the range of a lookup, the peer listing, a watch frame, the lease's
 * grant and renewal, the join's transaction, a withdrawal) holds in turn
 * each JSON kind it must not (object, array, null, string, number,
 * boolean); the same answer with a fitting value there succeeds, which
 * shows that the wrong value alone made the difference.  A call fails
 * with FERRY_EPROTO and the sentence; the lease keeper and the watcher,
 * which have no caller, log it, report nothing they did not understand,
 * and keep the lease (no new one taken for an answer not understood).
 * Beyond the positions: answers that are not JSON, cut, nested deeper
 * than json-c parses, too long, or errors of the gateway; watch streams
 * cut mid-frame, or with a line of 40 MiB.
 *
 * Each case runs in a process of its own (Check's loop tests).  Without
 * the etcd backend (configured without libcurl or json-c) the suite
 * exits 77 and says so.
 */
#include "fakeetcd.h"
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#define PROV tu_tcp()
#define PREFIX "hostile"
/* The shortest lease ferry takes: the keeper renews it every 667 ms. */
#define TTL_S 2
#define TIMEOUT_MS 1000
/* The bound of a call whose answer is megabytes long: reading 20 MiB took
 * 0.6 s of TIMEOUT_MS under ThreadSanitizer on a machine busy with a
 * build, and more would be ETIMEDOUT instead of the sentence tested. */
#define BIG_ANSWER_TIMEOUT_MS 10000
/* How long the watcher and the keeper get to show what they did. */
#define SHOW_MS 10000
/* ... where they first read megabytes: the watcher took more than
 * SHOW_MS to read the first 16 MiB of a 40 MiB line under
 * ThreadSanitizer (CI, and in one of two runs here on a quiet machine). */
#define BIG_SHOW_MS 60000

/* The pause between two looks at what a thread did. */
static void pause_20ms(void)
{
    struct timespec ts = {0, 20 * 1000000L};

    nanosleep(&ts, NULL);
}

/* ---- the world of a case: a fake etcd and a context ------------------ */

/* What a thread of this process writes to stderr, kept (and passed on to
 * the real stderr) so that the tests can read what ferry logged. */
struct tee {
    int saved; /* the real stderr */
    int from;  /* the pipe's reading end */
    pthread_t thread;
    pthread_mutex_t lock;
    char text[64 * 1024];
    size_t len;
};

static void *tee_main(void *arg)
{
    struct tee *t = arg;
    char buf[4096];
    ssize_t n;

    while ((n = read(t->from, buf, sizeof(buf))) > 0) {
        if (write(t->saved, buf, (size_t)n) != n)
            break;
        pthread_mutex_lock(&t->lock);
        if (t->len + (size_t)n < sizeof(t->text)) {
            memcpy(t->text + t->len, buf, (size_t)n);
            t->len += (size_t)n;
            t->text[t->len] = '\0';
        }
        pthread_mutex_unlock(&t->lock);
    }
    return NULL;
}

static void tee_start(struct tee *t)
{
    int p[2];

    memset(t, 0, sizeof(*t));
    pthread_mutex_init(&t->lock, NULL);
    ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
    t->saved = dup(2);
    ck_assert_int_ge(t->saved, 0);
    ck_assert_int_eq(dup2(p[1], 2), 2);
    close(p[1]);
    t->from = p[0];
    ck_assert_int_eq(pthread_create(&t->thread, NULL, tee_main, t), 0);
}

/* Whether stderr said phrase, waiting up to ms for it. */
static bool tee_said(struct tee *t, const char *phrase, unsigned ms)
{
    uint64_t t0 = tu_now_ns();
    bool said;

    for (;;) {
        pthread_mutex_lock(&t->lock);
        said = strstr(t->text, phrase) != NULL;
        pthread_mutex_unlock(&t->lock);
        if (said || tu_ms_since(t0) >= ms)
            return said;
        pause_20ms();
    }
}

static void tee_stop(struct tee *t)
{
    dup2(t->saved, 2); /* the pipe's last writing end goes: the tee ends */
    pthread_join(t->thread, NULL);
    close(t->saved);
    close(t->from);
    pthread_mutex_destroy(&t->lock);
}

/* The base64 of the key PREFIX/peers/ and len bytes of name (a NUL may be
 * among them), as etcd writes keys; free it. */
static char *peer_key_b64(const char *name, size_t len)
{
    char key[512];
    size_t plen = strlen(PREFIX "/peers/");
    char *b64;

    ck_assert_uint_le(plen + len, sizeof(key));
    memcpy(key, PREFIX "/peers/", plen);
    memcpy(key + plen, name, len);
    b64 = fe_b64(key, plen + len);
    ck_assert_ptr_nonnull(b64);
    return b64;
}

struct world {
    struct fe_server fake;
    char url[64];
    ferry_context_t *ctx;
    char *addr_b64;  /* the context's address blob, as etcd holds it */
    char *other_b64; /* the key PREFIX/peers/other, as etcd writes it */
    struct tee log;
};

static void world_open(struct world *w, int timeout_ms)
{
    struct ferry_config cfg;
    uint8_t addr[1024];
    size_t len = sizeof(addr);

    ck_assert_msg(fe_start(&w->fake) == 0, "starting the fake etcd: %s",
                  strerror(errno));
    snprintf(w->url, sizeof(w->url), "etcd://127.0.0.1:%d/" PREFIX,
             w->fake.port);
    tu_config(&cfg, PROV);
    cfg.metadata_ttl_s = TTL_S;
    cfg.metadata_timeout_ms = timeout_ms;
    w->ctx = tu_context_cfg(&cfg);
    ck_assert_int_eq(ferry_context_address(w->ctx, addr, &len), 0);
    w->addr_b64 = fe_b64(addr, len);
    w->other_b64 = peer_key_b64("other", 5);
    ck_assert_ptr_nonnull(w->addr_b64);
    tee_start(&w->log);
}

static void world_close(struct world *w)
{
    tee_stop(&w->log);
    ferry_context_close(w->ctx);
    fe_stop(&w->fake);
    free(w->addr_b64);
    free(w->other_b64);
}

/* s with every c in it replaced by with; free it. */
static char *replace(const char *s, char c, const char *with)
{
    size_t n = 0, wlen = strlen(with);
    char *out, *o;

    for (const char *p = s; *p != '\0'; p++)
        n += *p == c;
    out = malloc(strlen(s) + n * wlen + 1);
    ck_assert_ptr_nonnull(out);
    for (o = out; *s != '\0'; s++) {
        if (*s == c) {
            memcpy(o, with, wlen);
            o += wlen;
        } else {
            *o++ = *s;
        }
    }
    *o = '\0';
    return out;
}

/* tmpl with '@' replaced by hole, then '#' by the context's address blob
 * and '&' by the key PREFIX/peers/other (both in base64, as etcd writes
 * them); free it. */
static char *fill(const struct world *w, const char *tmpl, const char *hole,
                  size_t *len)
{
    char *holed = replace(tmpl, '@', hole);
    char *addressed = replace(holed, '#', w->addr_b64);
    char *out = replace(addressed, '&', w->other_b64);

    free(holed);
    free(addressed);
    *len = strlen(out);
    return out;
}

static ferry_meta_t *meta_open(struct world *w)
{
    ferry_meta_t *m = NULL;
    int ret = ferry_meta_open(w->ctx, w->url, "me", &m);

    ck_assert_msg(ret == 0, "ferry_meta_open on the fake etcd: %s (%s)",
                  ferry_strerror(ret), ferry_last_error());
    return m;
}

/* Asserts that no event is queued: the watcher reported nothing. */
static void assert_no_event(ferry_meta_t *m, const char *what)
{
    struct ferry_meta_event ev;
    int ret = ferry_meta_event(m, 0, &ev);

    ck_assert_msg(ret == FERRY_EAGAIN, "%s: the watcher reported %s of %s",
                  what, ev.kind == FERRY_META_JOIN ? "a JOIN" : "a LEAVE",
                  ev.name);
}

/* Waits for the join of "other" that a sane answer reports. */
static void await_join(ferry_meta_t *m, const char *what)
{
    struct ferry_meta_event ev;
    int ret = ferry_meta_event(m, SHOW_MS, &ev);

    ck_assert_msg(ret == 0, "%s: no event within %d ms: %s (%s)", what,
                  SHOW_MS, ferry_strerror(ret), ferry_last_error());
    ck_assert_msg(ev.kind == FERRY_META_JOIN && strcmp(ev.name, "other") == 0,
                  "%s: the watcher reported %s of %s, not the JOIN of other",
                  what, ev.kind == FERRY_META_JOIN ? "a JOIN" : "a LEAVE",
                  ev.name);
}

/* Waits (show_ms at most) until the watcher has asked for the listing
 * n times. */
static void await_listings(struct world *w, unsigned n, int show_ms,
                           const char *what)
{
    uint64_t t0 = tu_now_ns();

    while (fe_count(&w->fake, FE_LIST) < n &&
           tu_ms_since(t0) < (uint64_t)show_ms)
        pause_20ms();
    ck_assert_msg(fe_count(&w->fake, FE_LIST) >= n,
                  "%s: the watcher listed the peers %u times in %d ms, not "
                  "%u: it did not start over",
                  what, fe_count(&w->fake, FE_LIST), show_ms, n);
}

/* Asserts that the process logged phrase (within SHOW_MS). */
static void assert_logged(struct world *w, const char *phrase,
                          const char *what)
{
    ck_assert_msg(tee_said(&w->log, phrase, SHOW_MS),
                  "%s: nothing logged within %d ms says \"%s\"", what, SHOW_MS,
                  phrase);
}

/* ---- the calls that read each answer ------------------------------------ */

/*
 * Asserts that call gave want: a call that no endpoint answered fails with
 * FERRY_EHOSTUNREACH, or FERRY_ETIMEDOUT when the deadline cut its last
 * attempt short.  A failure's sentence holds says.
 */
static void expect_outcome(int ret, int want, const char *call,
                           const char *says, const char *what)
{
    ck_assert_msg(ret == want || (want == FERRY_EHOSTUNREACH &&
                                  ret == FERRY_ETIMEDOUT),
                  "%s: %s gave %s (%s), expected %s", what, call,
                  ferry_strerror(ret), ferry_last_error(),
                  ferry_strerror(want));
    ck_assert_msg(want == 0 || strstr(ferry_last_error(), says) != NULL,
                  "%s: %s's sentence \"%s\" lacks \"%s\"", what, call,
                  ferry_last_error(), says);
}

/* The keeper's renewals, while route's answer is what the test set: want
 * 0, it renews without complaint; else it logs says.  Either way it takes
 * no new lease. */
static void observe_keeper(struct world *w, int want, const char *says,
                           const char *what)
{
    ferry_meta_t *m = meta_open(w);
    uint64_t t0 = tu_now_ns();

    if (want != 0)
        assert_logged(w, says, what);
    while (want == 0 && fe_count(&w->fake, FE_KEEPALIVE) < 2 &&
           tu_ms_since(t0) < SHOW_MS)
        pause_20ms();
    ck_assert_msg(want != 0 || fe_count(&w->fake, FE_KEEPALIVE) >= 2,
                  "%s: the keeper renewed the lease %u times in %d ms", what,
                  fe_count(&w->fake, FE_KEEPALIVE), SHOW_MS);
    ck_assert_msg(want != 0 || !tee_said(&w->log, "cannot keep", 0),
                  "%s: the keeper complained of a sane answer", what);
    ck_assert_msg(fe_count(&w->fake, FE_GRANT) == 1,
                  "%s: the keeper took %u leases, not 1", what,
                  fe_count(&w->fake, FE_GRANT));
    ferry_meta_close(m);
}

/* The watcher, while the listing or the stream is what the test set: want
 * 0, it reports the join of "other"; else it logs says and reports
 * nothing. */
static void observe_watcher(struct world *w, int want, const char *says,
                            const char *what)
{
    ferry_meta_t *m = meta_open(w);

    ck_assert_int_eq(ferry_meta_watch(m), 0);
    if (want == 0) {
        await_join(m, what);
    } else {
        assert_logged(w, says, what);
        assert_no_event(m, what);
    }
    ferry_meta_close(m);
}

/*
 * Makes the call that reads route's answer and asserts what it came to:
 * want 0, success (the answer was sane); else the call failed with want,
 * or, for what a thread reads, nothing was reported and the process
 * logged; either way with a sentence holding says.
 */
static void observe(struct world *w, enum fe_route route, int want,
                    const char *says, const char *what)
{
    ferry_meta_t *m = NULL;
    ferry_peer_t *peer = NULL;
    ferry_rmem_t *rmem = NULL;

    switch (route) {
    case FE_GRANT:
    case FE_TXN:
        expect_outcome(ferry_meta_open(w->ctx, w->url, "me", &m), want,
                       "ferry_meta_open", says, what);
        ck_assert_msg((want == 0) == (m != NULL), "%s: meta %p", what,
                      (void *)m);
        break;
    case FE_RANGE:
        m = meta_open(w);
        expect_outcome(ferry_meta_peer(m, "other", 0, &peer), want,
                       "ferry_meta_peer", says, what);
        if (want != 0)
            expect_outcome(ferry_meta_lookup(m, "other", "kv", 0, &rmem),
                           want, "ferry_meta_lookup", says, what);
        ck_assert_ptr_null(rmem);
        break;
    case FE_DELETE:
        m = meta_open(w);
        expect_outcome(ferry_meta_withdraw(m, "kv"), want,
                       "ferry_meta_withdraw", says, what);
        break;
    case FE_LIST:
    case FE_WATCH:
        observe_watcher(w, want, says, what);
        break;
    case FE_KEEPALIVE:
        observe_keeper(w, want, says, what);
        break;
    default:
        ck_abort_msg("%s: no call reads route %d", what, route);
    }
    ferry_meta_close(m);
}

/* ---- positions and kinds ------------------------------------------------- */

enum kind { K_OBJECT, K_ARRAY, K_NULL, K_STRING, K_NUMBER, K_BOOL, N_KINDS };

/* A value of each kind, and how a sentence names the kind. */
static const struct {
    const char *json, *words;
} kinds[N_KINDS] = {
    [K_OBJECT] = {"{\"a\":1}", "an object"},
    [K_ARRAY] = {"[1]", "an array"},
    [K_NULL] = {"null", "null"},
    [K_STRING] = {"\"x\"", "a string"},
    [K_NUMBER] = {"7", "a number"},
    [K_BOOL] = {"true", "a boolean"},
};

#define KIND(k) (1u << (k))

/* The path of each route, as the sentences name the answer. */
static const char *const route_path[FE_ROUTES] = {
    [FE_GRANT] = "/v3/lease/grant",   [FE_KEEPALIVE] = "/v3/lease/keepalive",
    [FE_REVOKE] = "/v3/lease/revoke", [FE_TXN] = "/v3/kv/txn",
    [FE_PUT] = "/v3/kv/put",          [FE_DELETE] = "/v3/kv/deleterange",
    [FE_RANGE] = "/v3/kv/range",      [FE_LIST] = "/v3/kv/range",
    [FE_WATCH] = "/v3/watch",
};

/* A field ferry reads, in an answer that is sane but for it. */
struct position {
    enum fe_route route;
    const char *path;  /* as the sentence names it; "": the answer */
    const char *tmpl;  /* the answer, '@' where the value goes (fill) */
    const char *fits;  /* a value that fits there */
    unsigned fitting;  /* the kinds of kinds[] that fit there */
};

/* The watch's first frame, before the one under test. */
#define CREATED "{\"result\":{\"header\":{\"revision\":\"5\"},\"created\":true}}\n"
/* A listing holding "other", and a watch frame of its join. */
#define LISTING "{\"header\":{\"revision\":\"5\"},\"kvs\":[{\"key\":\"&\"}]}"
#define JOINED "{\"result\":{\"header\":{\"revision\":\"6\"},\"events\":" \
               "[{\"kv\":{\"key\":\"&\",\"value\":\"#\"}}]}}"

static const struct position positions[] = {
    /* A lookup: the range of one key, "other"'s address. */
    {FE_RANGE, "", "@", "{\"kvs\":[{\"key\":\"&\",\"value\":\"#\"}]}",
     KIND(K_OBJECT)},
    {FE_RANGE, "kvs", "{\"header\":{\"revision\":\"5\"},\"kvs\":@}",
     "[{\"key\":\"&\",\"value\":\"#\"}]", KIND(K_ARRAY)},
    {FE_RANGE, "kvs[0]", "{\"kvs\":[@]}", "{\"key\":\"&\",\"value\":\"#\"}",
     KIND(K_OBJECT)},
    {FE_RANGE, "kvs[0].value", "{\"kvs\":[{\"key\":\"&\",\"value\":@}]}",
     "\"#\"", KIND(K_STRING)},
    /* The watcher's listing of the peers. */
    {FE_LIST, "", "@", LISTING, KIND(K_OBJECT)},
    {FE_LIST, "header", "{\"header\":@,\"kvs\":[{\"key\":\"&\"}]}",
     "{\"revision\":\"5\"}", KIND(K_OBJECT)},
    {FE_LIST, "header.revision",
     "{\"header\":{\"revision\":@},\"kvs\":[{\"key\":\"&\"}]}", "\"5\"",
     KIND(K_NUMBER)},
    {FE_LIST, "kvs", "{\"header\":{\"revision\":\"5\"},\"kvs\":@}",
     "[{\"key\":\"&\"}]", KIND(K_ARRAY)},
    {FE_LIST, "kvs[0]", "{\"header\":{\"revision\":\"5\"},\"kvs\":[@]}",
     "{\"key\":\"&\"}", KIND(K_OBJECT)},
    {FE_LIST, "kvs[0].key",
     "{\"header\":{\"revision\":\"5\"},\"kvs\":[{\"key\":@}]}", "\"&\"",
     KIND(K_STRING)},
    /* A frame of the watch stream. */
    {FE_WATCH, "", CREATED "@\n", JOINED, KIND(K_OBJECT)},
    {FE_WATCH, "result", CREATED "{\"result\":@}\n",
     "{\"events\":[{\"kv\":{\"key\":\"&\"}}]}", KIND(K_OBJECT)},
    {FE_WATCH, "result.canceled",
     CREATED "{\"result\":{\"canceled\":@,\"events\":[{\"kv\":{\"key\":\"&\"}}"
             "]}}\n",
     "false", KIND(K_BOOL)},
    {FE_WATCH, "result.events", CREATED "{\"result\":{\"events\":@}}\n",
     "[{\"kv\":{\"key\":\"&\"}}]", KIND(K_ARRAY)},
    {FE_WATCH, "result.events[0]", CREATED "{\"result\":{\"events\":[@]}}\n",
     "{\"kv\":{\"key\":\"&\"}}", KIND(K_OBJECT)},
    {FE_WATCH, "result.events[0].type",
     CREATED "{\"result\":{\"events\":[{\"type\":@,\"kv\":{\"key\":\"&\"}}]}}\n",
     "\"PUT\"", KIND(K_STRING)},
    {FE_WATCH, "result.events[0].kv",
     CREATED "{\"result\":{\"events\":[{\"kv\":@}]}}\n", "{\"key\":\"&\"}",
     KIND(K_OBJECT)},
    {FE_WATCH, "result.events[0].kv.key",
     CREATED "{\"result\":{\"events\":[{\"kv\":{\"key\":@}}]}}\n", "\"&\"",
     KIND(K_STRING)},
    /* The lease, the join, a withdrawal. */
    {FE_GRANT, "ID", "{\"header\":{\"revision\":\"1\"},\"ID\":@,\"TTL\":\"2\"}",
     "\"7587869\"", KIND(K_NUMBER)},
    {FE_KEEPALIVE, "result", "{\"result\":@}",
     "{\"ID\":\"7587869\",\"TTL\":\"2\"}", KIND(K_OBJECT)},
    {FE_KEEPALIVE, "result.TTL", "{\"result\":{\"ID\":\"7587869\",\"TTL\":@}}",
     "\"2\"", KIND(K_NUMBER)},
    {FE_TXN, "succeeded", "{\"header\":{\"revision\":\"2\"},\"succeeded\":@}",
     "true", KIND(K_BOOL)},
    {FE_DELETE, "deleted", "{\"header\":{\"revision\":\"4\"},\"deleted\":@}",
     "\"1\"", KIND(K_NUMBER)},
};

/* A case: a position with a value of one kind, or (K_FITS) the value that
 * fits. */
#define K_FITS (-1)
struct pcase {
    unsigned pos;
    int kind;
};
static struct pcase pcases[TU_ARRAY_LEN(positions) * (N_KINDS + 1)];
static int n_pcases;

static void list_pcases(void)
{
    for (unsigned p = 0; p < TU_ARRAY_LEN(positions); p++) {
        pcases[n_pcases++] = (struct pcase){p, K_FITS};
        for (int k = 0; k < N_KINDS; k++)
            if (!(positions[p].fitting & KIND(k)))
                pcases[n_pcases++] = (struct pcase){p, k};
    }
}

/*
 * The sentence of a value of kind at p: "etcd at E answered /v3/kv/range
 * with "kvs" as an object, where an array was expected".  (etcd writes
 * int64s as strings, so a string fits there too, if it holds one.)
 */
static void sentence_of(const struct world *w, const struct position *p,
                        int kind, char *out, size_t cap)
{
    bool int64 = p->fitting == KIND(K_NUMBER);
    const char *expected = "a 64-bit integer";
    char got[64];

    for (int k = 0; !int64 && k < N_KINDS; k++)
        if (p->fitting & KIND(k))
            expected = kinds[k].words;
    snprintf(got, sizeof(got), "%s%s", kinds[kind].words,
             int64 && kind == K_STRING ? ", \"x\"" : "");
    if (p->path[0] != '\0')
        snprintf(out, cap, "etcd at %s answered %s with \"%s\" as %s, where "
                 "%s was expected", w->fake.endpoint, route_path[p->route],
                 p->path, got, expected);
    else
        snprintf(out, cap, "etcd at %s answered %s with %s, where %s was "
                 "expected", w->fake.endpoint, route_path[p->route], got,
                 expected);
}

START_TEST(test_position)
{
    const struct pcase *c = &pcases[_i];
    const struct position *p = &positions[c->pos];
    bool fits = c->kind == K_FITS;
    char what[160], says[320] = "";
    struct world w;
    size_t len;
    char *body;

    world_open(&w, TIMEOUT_MS);
    body = fill(&w, p->tmpl, fits ? p->fits : kinds[c->kind].json, &len);
    snprintf(what, sizeof(what), "%s with \"%s\" as %s", route_path[p->route],
             p->path, fits ? "the value that fits" : kinds[c->kind].words);
    if (!fits)
        sentence_of(&w, p, c->kind, says, sizeof(says));
    ck_assert_int_eq(fe_set(&w.fake, p->route, 200, body, len, false), 0);
    observe(&w, p->route, fits ? 0 : FERRY_EPROTO, says, what);
    free(body);
    world_close(&w);
}
END_TEST

/* ---- beyond the positions ------------------------------------------------- */

/* An answer's body of a given size: a value of that many base64 bytes. */
#define BIG_RANGE "{\"kvs\":[{\"key\":\"&\",\"value\":\"@\"}]}"
#define BIG_FRAME "{\"result\":{\"events\":[{\"kv\":{\"key\":\"&\",\"value\":\"@\"}}]}}\n"
#define NESTED 40 /* json-c parses 32 levels deep */

struct extra {
    const char *what;
    enum fe_route route;
    int status;
    const char *tmpl; /* NULL: nested arrays */
    size_t big;       /* '@' is that many base64 letters ("AAAA...") */
    bool cut;         /* FE_WATCH: the connection closes after the body */
    int want;         /* 0: sane after all; else the call's error or, for
                         the watcher, that it starts over */
    const char *says;
};

static const struct extra extras[] = {
    {"a lookup answered with no JSON", FE_RANGE, 200,
     "<html>502 Bad Gateway</html>", 0, false, FERRY_EPROTO,
     "with something that is not JSON"},
    {"a lookup answered with JSON cut short", FE_RANGE, 200,
     "{\"kvs\":[{\"key\":\"&\",\"val", 0, false, FERRY_EPROTO,
     "with something that is not JSON"},
    {"a lookup answered with nothing", FE_RANGE, 200, "", 0, false,
     FERRY_EPROTO, "with something that is not JSON"},
    {"a lookup answered with arrays nested 40 deep", FE_RANGE, 200, NULL, 0,
     false, FERRY_EPROTO, "with something that is not JSON"},
    {"a lookup whose value is not base64", FE_RANGE, 200,
     "{\"kvs\":[{\"key\":\"&\",\"value\":\"!!!!\"}]}", 0, false, FERRY_EBLOB,
     "is not a ferry blob"},
    {"a lookup whose value is 64 KiB", FE_RANGE, 200, BIG_RANGE, 64 * 1024,
     false, FERRY_EBLOB, "is not a ferry blob"},
    {"a lookup answered with 20 MiB", FE_RANGE, 200, BIG_RANGE, 20 << 20,
     false, FERRY_EPROTO, "answered /v3/kv/range with more than 16 MiB"},
    {"a lookup answered with an empty kvs", FE_RANGE, 200,
     "{\"kvs\":[]}", 0, false, FERRY_EAGAIN, "nothing is published"},
    {"a lookup answered with HTTP 500", FE_RANGE, 500, "<html>oops</html>", 0,
     false, FERRY_EHOSTUNREACH, "HTTP 500: <html>oops</html>"},
    {"a grant refused with a message", FE_GRANT, 400,
     "{\"error\":\"bad lease\",\"code\":3,\"message\":\"etcdserver: bad "
     "lease\"}", 0, false, FERRY_EPROTO, "HTTP 400: etcdserver: bad lease"},
    {"a grant refused with the message an object", FE_GRANT, 400,
     "{\"error\":\"bad lease\",\"code\":3,\"message\":{}}", 0, false,
     FERRY_EPROTO, "HTTP 400: bad lease"},
    {"a grant refused with the message an array", FE_GRANT, 400,
     "{\"error\":\"bad lease\",\"code\":3,\"message\":[1]}", 0, false,
     FERRY_EPROTO, "HTTP 400: bad lease"},
    {"a grant refused with the message null", FE_GRANT, 400,
     "{\"error\":\"bad lease\",\"code\":3,\"message\":null}", 0, false,
     FERRY_EPROTO, "HTTP 400: bad lease"},
    {"a grant refused with the message a number", FE_GRANT, 400,
     "{\"error\":\"bad lease\",\"code\":3,\"message\":7}", 0, false,
     FERRY_EPROTO, "HTTP 400: bad lease"},
    {"a grant refused with neither message nor error a string", FE_GRANT, 400,
     "{\"error\":null,\"code\":3,\"message\":true}", 0, false, FERRY_EPROTO,
     "HTTP 400: {\"error\":null"},
    {"a grant of lease 0", FE_GRANT, 200, "{\"ID\":\"0\",\"TTL\":\"2\"}", 0,
     false, FERRY_EPROTO, "granted no lease"},
    {"a grant whose ID is past int64", FE_GRANT, 200,
     "{\"ID\":\"9223372036854775808\",\"TTL\":\"2\"}", 0, false,
     FERRY_EPROTO, "with \"ID\" as a string"},
    {"a listing answered with no JSON", FE_LIST, 200, "<html></html>", 0,
     false, FERRY_EPROTO, "with something that is not JSON"},
    /* The watcher asks for the revision after the listing's. */
    {"a listing of the last revision int64 holds", FE_LIST, 200,
     "{\"header\":{\"revision\":\"9223372036854775807\"},\"kvs\":[{\"key\":"
     "\"&\"}]}", 0, false, FERRY_EPROTO,
     "with \"header.revision\" as 9223372036854775807, where a revision from "
     "0 to 9223372036854775806 was expected"},
    {"a listing of a revision below 0", FE_LIST, 200,
     "{\"header\":{\"revision\":\"-1\"},\"kvs\":[{\"key\":\"&\"}]}", 0,
     false, FERRY_EPROTO, "with \"header.revision\" as -1, where a revision"},
    {"a watch frame that is not JSON", FE_WATCH, 200,
     CREATED "<html></html>\n", 0, false, FERRY_EPROTO,
     "answered /v3/watch with something that is not JSON"},
    {"a watch stream cut mid-frame", FE_WATCH, 200,
     CREATED "{\"result\":{\"events\":[{\"kv\":{\"key\":\"&\"", 0, true,
     FERRY_EPROTO, NULL},
    {"a watch line of 40 MiB", FE_WATCH, 200, CREATED "@", 40 << 20, false,
     FERRY_EPROTO, NULL},
    {"a watch frame of etcd's error", FE_WATCH, 200,
     CREATED "{\"error\":{\"grpc_code\":14,\"message\":\"no leader\"}}\n", 0,
     false, FERRY_EPROTO, "the watch ended"},
    {"a watch frame that cancels", FE_WATCH, 200,
     CREATED "{\"result\":{\"canceled\":true}}\n", 0, false, FERRY_EPROTO,
     "the watch ended"},
    {"a watch frame with a value of 8 MiB", FE_WATCH, 200, CREATED BIG_FRAME,
     8 << 20, false, 0, NULL},
};

/* The body of x: its template filled, with a big value or nested arrays
 * built here; free it. */
static char *extra_body(const struct world *w, const struct extra *x,
                        size_t *len)
{
    char *hole, *body;

    if (x->tmpl == NULL) {
        body = malloc(2 * NESTED + 1);
        ck_assert_ptr_nonnull(body);
        memset(body, '[', NESTED);
        memset(body + NESTED, ']', NESTED);
        body[2 * NESTED] = '\0';
        *len = 2 * NESTED;
        return body;
    }
    hole = malloc(x->big + 1);
    ck_assert_ptr_nonnull(hole);
    memset(hole, 'A', x->big);
    hole[x->big] = '\0';
    body = fill(w, x->tmpl, hole, len);
    free(hole);
    return body;
}

START_TEST(test_extra)
{
    const struct extra *x = &extras[_i];
    struct world w;
    size_t len;
    char *body;

    world_open(&w, x->big >= (1u << 20) ? BIG_ANSWER_TIMEOUT_MS : TIMEOUT_MS);
    body = extra_body(&w, x, &len);
    ck_assert_int_eq(fe_set(&w.fake, x->route, x->status, body, len, x->cut),
                     0);
    if ((x->route == FE_WATCH || x->route == FE_LIST) && x->want != 0) {
        /* The watcher starts over: it lists the peers again. */
        ferry_meta_t *m = meta_open(&w);

        ck_assert_int_eq(ferry_meta_watch(m), 0);
        await_listings(&w, 2, x->big >= (1u << 20) ? BIG_SHOW_MS : SHOW_MS,
                       x->what);
        if (x->says != NULL)
            assert_logged(&w, x->says, x->what);
        assert_no_event(m, x->what);
        ferry_meta_close(m);
    } else {
        observe(&w, x->route, x->want, x->says, x->what);
    }
    free(body);
    world_close(&w);
}
END_TEST

/* A watch frame not understood costs the stream, not the watch: the
 * watcher lists again, follows again, and sees the next join. */
START_TEST(test_watch_recovers)
{
    struct world w;
    size_t bad_len, good_len;
    char *bad, *good;
    ferry_meta_t *m;

    world_open(&w, TIMEOUT_MS);
    bad = fill(&w, CREATED "{\"result\":{\"events\":[{\"kv\":{\"key\":@}}]}}\n",
               "null", &bad_len);
    good = fill(&w, CREATED JOINED "\n", "", &good_len);
    ck_assert_int_eq(fe_set_next(&w.fake, FE_WATCH, 200, bad, bad_len, false),
                     0);
    ck_assert_int_eq(fe_set(&w.fake, FE_WATCH, 200, good, good_len, false), 0);
    m = meta_open(&w);
    ck_assert_int_eq(ferry_meta_watch(m), 0);
    await_join(m, "the stream after a frame with a null key");
    ck_assert_uint_ge(fe_count(&w.fake, FE_WATCH), 2);
    assert_logged(&w, "with \"result.events[0].kv.key\" as null", "the frame");
    ferry_meta_close(m);
    free(bad);
    free(good);
    world_close(&w);
}
END_TEST

/* ---- keys ---------------------------------------------------------------- */

/* A watch event: a put, or a DELETE, of the key of name (len bytes). */
struct key_event {
    const char *name;
    size_t len;
    bool deleted;
};

/* The watch stream CREATED, then one frame of the n events; free it. */
static char *frame_of(const struct key_event *events, size_t n, size_t *len)
{
    char *stream = NULL;
    FILE *f = open_memstream(&stream, len);

    ck_assert_ptr_nonnull(f);
    fputs(CREATED "{\"result\":{\"events\":[", f);
    for (size_t i = 0; i < n; i++) {
        char *key = peer_key_b64(events[i].name, events[i].len);

        fprintf(f, "%s{%s\"kv\":{\"key\":\"%s\"}}", i == 0 ? "" : ",",
                events[i].deleted ? "\"type\":\"DELETE\"," : "", key);
        free(key);
    }
    fputs("]}}\n", f);
    ck_assert_int_eq(fclose(f), 0);
    return stream;
}

/* A watcher of w's fake etcd, which lists listing and streams stream. */
static ferry_meta_t *watch_on(struct world *w, const char *listing,
                              size_t listing_len, const char *stream,
                              size_t stream_len)
{
    ferry_meta_t *m;

    ck_assert_int_eq(fe_set(&w->fake, FE_LIST, 200, listing, listing_len,
                            false), 0);
    ck_assert_int_eq(fe_set(&w->fake, FE_WATCH, 200, stream, stream_len,
                            false), 0);
    m = meta_open(w);
    ck_assert_int_eq(ferry_meta_watch(m), 0);
    return m;
}

/* Closes watch_on's watcher and w, and frees what it served. */
static void watch_done(struct world *w, ferry_meta_t *m, char *listing,
                       char *stream)
{
    ferry_meta_close(m);
    free(listing);
    free(stream);
    world_close(w);
}

/* Asserts that the next event is kind of name. */
static void await_event(ferry_meta_t *m, enum ferry_meta_event_kind kind,
                        const char *name, const char *what)
{
    struct ferry_meta_event ev;
    int ret = ferry_meta_event(m, SHOW_MS, &ev);

    ck_assert_msg(ret == 0, "%s: no event within %d ms: %s (%s)", what,
                  SHOW_MS, ferry_strerror(ret), ferry_last_error());
    ck_assert_msg(ev.kind == kind && strcmp(ev.name, name) == 0,
                  "%s: the watcher reported %s of %s, not %s of %s", what,
                  ev.kind == FERRY_META_JOIN ? "a JOIN" : "a LEAVE", ev.name,
                  kind == FERRY_META_JOIN ? "the JOIN" : "the LEAVE", name);
}

/*
 * Keys under PREFIX/peers/ that no ferry_meta_open writes are no peer's:
 * one with a NUL in it (which read as the name before the NUL, so its
 * DELETE ended the live peer "other"), and names ferry refuses.  Only
 * the sentinel "third" joins after "other".
 */
START_TEST(test_watch_foreign_keys)
{
    static const struct key_event events[] = {
        {"other\0x", 7, false}, {"other\0x", 7, true},
        {"x/../y", 6, false},    {"x/../y", 6, true},
        {"a b", 3, false},       {"a b", 3, true},
        {"tab\t", 4, false},     {"tab\t", 4, true},
        {"third", 5, false},
    };
    struct world w;
    char *listing, *stream;
    size_t listing_len, stream_len;
    ferry_meta_t *m;

    world_open(&w, TIMEOUT_MS);
    listing = fill(&w, LISTING, "", &listing_len);
    stream = frame_of(events, TU_ARRAY_LEN(events), &stream_len);
    m = watch_on(&w, listing, listing_len, stream, stream_len);
    await_event(m, FERRY_META_JOIN, "other", "the listing");
    await_event(m, FERRY_META_JOIN, "third", "keys of no peer, then third");
    assert_no_event(m, "after third");
    watch_done(&w, m, listing, stream);
}
END_TEST

/* How many peers test_listing_many lists. */
#define MANY 5000

/*
 * A listing of MANY peers, each key twice and in descending order (a
 * hostile etcd may repeat keys, and any may list in any order): each
 * peer joins once.  Then a frame that puts a name between two listed
 * ones, deletes one twice and republishes one: one join, one leave,
 * nothing for the rest, then the sentinel "zend".
 */
START_TEST(test_listing_many)
{
    static const struct key_event events[] = {
        {"p00010x", 7, false}, {"p00020", 6, true}, {"p00020", 6, true},
        {"p00030", 6, false},  {"zend", 4, false},
    };
    static bool seen[MANY];
    struct world w;
    char *listing = NULL, *stream, name[16];
    size_t listing_len = 0, stream_len;
    FILE *f;
    ferry_meta_t *m;

    world_open(&w, TIMEOUT_MS);
    f = open_memstream(&listing, &listing_len);
    ck_assert_ptr_nonnull(f);
    fputs("{\"header\":{\"revision\":\"5\"},\"kvs\":[", f);
    for (int i = 2 * MANY - 1; i >= 0; i--) {
        char *key;

        snprintf(name, sizeof(name), "p%05d", i / 2);
        key = peer_key_b64(name, strlen(name));
        fprintf(f, "%s{\"key\":\"%s\"}", i == 2 * MANY - 1 ? "" : ",", key);
        free(key);
    }
    fputs("]}", f);
    ck_assert_int_eq(fclose(f), 0);
    stream = frame_of(events, TU_ARRAY_LEN(events), &stream_len);
    m = watch_on(&w, listing, listing_len, stream, stream_len);
    for (int i = 0; i < MANY; i++) {
        struct ferry_meta_event ev;
        int ret = ferry_meta_event(m, SHOW_MS, &ev);
        unsigned n;

        ck_assert_msg(ret == 0, "the listing's join %d of %d: %s (%s)", i + 1,
                      MANY, ferry_strerror(ret), ferry_last_error());
        ck_assert_msg(ev.kind == FERRY_META_JOIN &&
                          sscanf(ev.name, "p%5u", &n) == 1 && n < MANY,
                      "the listing's event %d: %s of %s", i + 1,
                      ev.kind == FERRY_META_JOIN ? "a JOIN" : "a LEAVE",
                      ev.name);
        ck_assert_msg(!seen[n], "%s joined twice", ev.name);
        seen[n] = true;
    }
    await_event(m, FERRY_META_JOIN, "p00010x", "a put between two names");
    await_event(m, FERRY_META_LEAVE, "p00020", "a DELETE");
    await_event(m, FERRY_META_JOIN, "zend", "a second DELETE, a republish");
    assert_no_event(m, "after zend");
    watch_done(&w, m, listing, stream);
}
END_TEST

static Suite *etcd_hostile_suite(void)
{
    Suite *s = suite_create("etcd_hostile");
    TCase *tc;

    list_pcases();
    tc = tu_tcase(s, "positions", 30);
    tcase_add_loop_test(tc, test_position, 0, n_pcases);
    tc = tu_tcase(s, "extras", 30);
    tcase_add_loop_test(tc, test_extra, 0, (int)TU_ARRAY_LEN(extras));
    tcase_add_test(tc, test_watch_recovers);
    tc = tu_tcase(s, "keys", 60);
    tcase_add_test(tc, test_watch_foreign_keys);
    tcase_add_test(tc, test_listing_many);
    return s;
}

/* NULL when this ferry has the etcd backend, else the sentence saying
 * why not.  (No Check calls: no test runs yet.  What fails here other
 * than the backend fails again in the tests, which say why.) */
static const char *probe_backend(void)
{
    static char why[1024];
    struct ferry_config cfg;
    struct fe_server fake;
    ferry_context_t *ctx = NULL;
    ferry_meta_t *m = NULL;
    char url[64];
    int ret = FERRY_EINVAL;

    if (ferry_config_init(&cfg) != 0 || fe_start(&fake) != 0)
        return NULL;
    cfg.provider = PROV;
    cfg.domain = "lo";
    cfg.local_only = 1;
    snprintf(url, sizeof(url), "etcd://127.0.0.1:%d/probe", fake.port);
    if (ferry_context_create(&cfg, &ctx) == 0)
        ret = ferry_meta_open(ctx, url, "probe", &m);
    snprintf(why, sizeof(why), "%s", ferry_last_error());
    ferry_meta_close(m);
    ferry_context_close(ctx);
    fe_stop(&fake);
    return ret == FERRY_ENOTSUP ? why : NULL;
}

/* probe_backend in a child: this process must have started no thread when
 * Check forks the tests (ThreadSanitizer refuses threads after a fork of
 * a process that had some, and a context's libraries may keep theirs). */
static const char *etcd_backend_missing(void)
{
    static char why[1024];
    int p[2], status;
    ssize_t n;
    pid_t pid;

    if (pipe(p) != 0)
        return NULL;
    if ((pid = fork()) == 0) {
        const char *missing = probe_backend();

        close(p[0]);
        if (missing != NULL && write(p[1], missing, strlen(missing)) < 0)
            _exit(1);
        _exit(0);
    }
    close(p[1]);
    n = pid > 0 ? read(p[0], why, sizeof(why) - 1) : -1;
    close(p[0]);
    if (pid > 0)
        waitpid(pid, &status, 0);
    if (n <= 0)
        return NULL;
    why[n] = '\0';
    return why;
}

int main(void)
{
    const char *missing;

    tu_clear_ferry_env();
    unsetenv("FERRY_METADATA");
    unsetenv("FERRY_METADATA_TTL");
    unsetenv("FERRY_LOG");
    missing = etcd_backend_missing();
    if (missing != NULL) {
        printf("check_etcd_hostile: skipped: %s\n", missing);
        return 77;
    }
    return tu_run(etcd_hostile_suite());
}
