/*
 * Helpers of the notify suites (see notifyutil.h).
 */
#include "notifyutil.h"

#include <string.h>

void req_ok(ferry_req_t *req, const char *what)
{
    int ret = ferry_req_wait(req, PATIENCE_MS);

    ck_assert_msg(ret == 0, "%s: ended with %s: %s", what,
                  ferry_strerror(ret), ferry_last_error());
    ferry_req_close(req);
}

ferry_req_t *notified_write(struct tu_fx *x, size_t loff, uint64_t roff,
                            size_t len, uint64_t id, uint64_t value)
{
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    struct ferry_iov iov = {x->lbuf + loff, x->lmem, x->rmem, roff, len};
    ferry_req_t *req = NULL;
    int ret;

    opts.flags = FERRY_XFER_NOTIFY;
    opts.notify_id = id;
    opts.notify_value = value;
    ret = ferry_write(x->p.peer, &iov, 1, &opts, &req);
    ck_assert_msg(ret == 0, "notified write of %zu bytes: %s", len,
                  ferry_last_error());
    ck_assert_ptr_nonnull(req);
    return req;
}

ferry_req_t *notify_only(ferry_peer_t *peer, uint64_t id, uint64_t value)
{
    ferry_req_t *req = NULL;
    int ret = ferry_notify_send(peer, id, value, NULL, &req);

    ck_assert_msg(ret == 0, "ferry_notify_send(%llu, %llu): %s",
                  (unsigned long long)id, (unsigned long long)value,
                  ferry_last_error());
    ck_assert_ptr_nonnull(req);
    return req;
}

int poll_some(ferry_context_t *ctx, struct ferry_notification *out,
              size_t max, const char *what)
{
    uint64_t t0 = tu_now_ns();

    for (;;) {
        int n = ferry_notify_poll(ctx, out, max);
        ck_assert_msg(n >= 0, "%s: ferry_notify_poll failed with %s: %s",
                      what, ferry_strerror(n), ferry_last_error());
        ck_assert_int_le(n, (int)max);
        if (n > 0)
            return n;
        ck_assert_msg(tu_ms_since(t0) < PATIENCE_MS,
                      "%s: no notification within %d ms", what, PATIENCE_MS);
    }
}
