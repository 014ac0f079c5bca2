/*
 * Helpers of the progress suites (see progressutil.h).
 */
#include "progressutil.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

void reap_killed(struct tu_child *c)
{
    char prefix[32];
    DIR *d;
    struct dirent *e;

    snprintf(prefix, sizeof(prefix), "%d:", (int)c->pid);
    tu_child_kill(c);
    if ((d = opendir("/dev/shm")) == NULL)
        return;
    while ((e = readdir(d)) != NULL)
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0)
            (void)unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
}

double secs_since(uint64_t t0)
{
    return (double)(tu_now_ns() - t0) / 1e9;
}

void expect_deadline(ferry_req_t *req, int deadline_ms, const char *prov)
{
    uint64_t t0 = tu_now_ns();
    double el;
    /* Bounded, so that a deadline that never fires fails here, with a
     * sentence, rather than at the Check timeout. */
    int ret = ferry_req_wait(req, 10000);

    el = secs_since(t0);
    ck_assert_msg(ret == FERRY_ETIMEDOUT, "%s: wait gave %s: %s", prov,
                  ferry_strerror(ret), ferry_last_error());
    tu_assert_sentence("deadline", NULL);
    ck_assert_msg(el < 5.0, "%s: a %d ms deadline ended the request after "
                  "%.3f s", prov, deadline_ms, el);
    /* It stays ended the same way. */
    ck_assert_int_eq(ferry_req_test(req), FERRY_ETIMEDOUT);
    tu_assert_sentence("deadline", NULL);
}

static bool acceptable_death(int ret)
{
    return ret == FERRY_EPEERDEAD || ret == FERRY_ECONNRESET ||
           ret == FERRY_EIO || ret == FERRY_ETIMEDOUT ||
           ret == FERRY_EPROVIDER || ret == FERRY_EHOSTUNREACH;
}

void victim_open(struct victim *v, const char *prov,
                 const struct ferry_config *cfg)
{
    tu_child_start(&v->c, prov, BIG, 0x7070);
    ck_assert_int_eq(ferry_context_create(cfg, &v->ctx), 0);
    tu_child_reach(v->ctx, &v->c, &v->peer, &v->rmem);
    /* What is written does not matter: it never all arrives. */
    v->buf = tu_alloc_buf(BIG);
}

void victim_finish(struct victim *v, ferry_req_t *req, uint64_t t_post,
                   const char *prov)
{
    int ret = ferry_req_wait(req, -1);
    double el = secs_since(t_post);

    ck_assert_msg(ret != 0 && ret != FERRY_EAGAIN,
                  "%s: the transfer to a killed peer gave %s", prov,
                  ferry_strerror(ret));
    ck_assert_msg(acceptable_death(ret), "%s: unexpected %s: %s", prov,
                  ferry_strerror(ret), ferry_last_error());
    ck_assert_msg(ferry_last_error()[0] != '\0', "%s: %s without a sentence",
                  prov, ferry_strerror(ret));
    ck_assert_msg(el < KILL_DEADLINE_MS / 1000.0 + 5.0,
                  "%s: ended %.3f s after posting, deadline %d ms", prov, el,
                  KILL_DEADLINE_MS);
    ck_assert_int_eq(ferry_req_test(req), ret);
    ferry_req_close(req);
    ferry_context_close(v->ctx);
    tu_free_buf(v->buf, BIG);
}
