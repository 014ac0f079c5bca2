/*
 * Stale keys across hosts: the target is a child process with a /dev/shm
 * of its own (tu_child_start_apart), so its pulse table is out of this
 * process's sight, as on another host, and ferry cannot check a key
 * before posting (docs/semantics.md, "Stale keys").  On tcp (tu_tcp)
 * over loopback the child's side refuses a write through a key it
 * replaced (tcp;ofi_rxm by dropping the connection); the request must
 * end with FERRY_ESTALE, the peer stay UP, writes in flight beside it
 * land, and the writes after it succeed.  A process restarted on its
 * predecessor's port must not take writes through the predecessor's
 * blobs.  Needs root (a mount namespace); exits 77 (skip) otherwise,
 * saying why.  (On one host: test/api/check_stale.c.)
 */
#include "peerutil.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define PROV tu_tcp()
/* The child's region: PIECES pieces written at once. */
#define PIECES 16
#define PIECE (MiB)
#define LEN (PIECES * PIECE)
/* The stale request ends within this: a new connection, a heartbeat and
 * a read of the slot, far below the 30 s deadline. */
#define PROMPT_MS 2000

static ferry_req_t *post_write(ferry_peer_t *peer, uint8_t *buf,
                               ferry_mem_t *lmem, ferry_rmem_t *rmem,
                               uint64_t roff, size_t len)
{
    struct ferry_iov iov = {buf, lmem, rmem, roff, len};
    ferry_req_t *req = NULL;
    int ret = ferry_write(peer, &iov, 1, NULL, &req);

    ck_assert_msg(ret == 0, "posting a write: %s", ferry_last_error());
    return req;
}

START_TEST(test_stale_across_hosts)
{
    struct replaced r;
    ferry_req_t *req[PIECES], *stale;
    char why[256];
    uint64_t t0, ms;
    int ret;

    tu_child_start_apart(&r.c, PROV, LEN, 0x5600);
    replaced_open(&r, PROV, LEN, 0x5601);
    /* The child verifies its region against one pattern: written in
     * pieces, around the stale write. */
    tu_fill(r.l, LEN, 0x5602);
    for (size_t i = 0; i < PIECES / 2; i++)
        req[i] = post_write(r.peer, r.l + i * PIECE, r.ml, r.fresh, i * PIECE,
                            PIECE);
    t0 = tu_now_ns();
    stale = post_write(r.peer, r.l, r.ml, r.old, 0, 4096);
    for (size_t i = PIECES / 2; i < PIECES; i++)
        req[i] = post_write(r.peer, r.l + i * PIECE, r.ml, r.fresh, i * PIECE,
                            PIECE);
    ret = ferry_req_wait(stale, -1);
    ms = tu_ms_since(t0);
    printf("stale across hosts: the write through the old key ended with "
           "%s after %llu ms: %s\n",
           ret == 0 ? "success" : ferry_strerror(ret), (unsigned long long)ms,
           ret == 0 ? "" : ferry_last_error());
    ck_assert_msg(ret == FERRY_ESTALE,
                  "the write through the old key ended with %s: %s",
                  ret == 0 ? "success" : ferry_strerror(ret),
                  ferry_last_error());
    tu_assert_sentence("no longer has a region", "registered",
                       "import its new", NULL);
    ck_assert_msg(ms < PROMPT_MS, "it took %llu ms to fail",
                  (unsigned long long)ms);
    ferry_req_close(stale);
    for (size_t i = 0; i < PIECES; i++) {
        ret = ferry_req_wait(req[i], -1);
        ck_assert_msg(ret == 0, "write %zu beside the stale one: %s", i,
                      ferry_last_error());
        ferry_req_close(req[i]);
    }
    ck_assert_msg(tu_child_verify(&r.c, 0x5602),
                  "the child's new region lacks the writes beside the stale "
                  "one");
    tu_fill(r.l, LEN, 0x5603);
    write_ok(r.peer, r.l, r.ml, r.fresh, LEN, "write after the stale one");
    ck_assert(tu_child_verify(&r.c, 0x5603));
    ck_assert_msg(peer_state(r.peer, why, sizeof(why)) == FERRY_PEER_UP,
                  "the peer is not UP after a stale key: %s", why);
    replaced_close(&r);
}
END_TEST

/* A port of 127.0.0.1 free now, which the children's tcp provider is
 * then told to take (FI_TCP_PORT_LOW_RANGE and _HIGH_RANGE, read when a
 * process first uses libfabric): a server restarted on its fixed port. */
static void children_take_one_port(void)
{
    struct sockaddr_in sin = {.sin_family = AF_INET};
    socklen_t len = sizeof(sin);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    char port[16];

    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
    close(fd);
    snprintf(port, sizeof(port), "%u", (unsigned)ntohs(sin.sin_port));
    setenv("FI_TCP_PORT_LOW_RANGE", port, 1);
    setenv("FI_TCP_PORT_HIGH_RANGE", port, 1);
}

/* The two peers' addresses (their labels' "at ADDRESS") are one. */
static void at_the_same_address(ferry_peer_t *a, ferry_peer_t *b)
{
    struct ferry_peer_info ia = FERRY_PEER_INFO_INIT,
                           ib = FERRY_PEER_INFO_INIT;
    const char *at_a, *at_b;

    ck_assert_int_eq(ferry_peer_info(a, &ia), 0);
    ck_assert_int_eq(ferry_peer_info(b, &ib), 0);
    at_a = strstr(ia.label, " at ");
    at_b = strstr(ib.label, " at ");
    printf("predecessor: %s; successor: %s\n", ia.label, ib.label);
    ck_assert_msg(at_a != NULL && at_b != NULL && strcmp(at_a, at_b) == 0,
                  "the successor (%s) is not at its predecessor's address "
                  "(%s): the provider did not take the one port it was "
                  "given",
                  ib.label, ia.label);
}

/*
 * A process restarted at its predecessor's address.  The first child
 * exports its address and region and exits; a second starts on the same
 * port (the same tcp address; its blob differs only in what ferry adds,
 * such as the incarnation) and registers a region as the first did.  A
 * process that kept the first one's blobs (say, from a metadata service
 * that had not caught up) then writes through them: the write must not
 * land in the second child's region.
 * This process opens its context only after both children started, so
 * that they, not it, read the port settings.
 */
START_TEST(test_successor_at_same_address)
{
    struct tu_child first, second;
    ferry_context_t *ctx;
    ferry_peer_t *peer;
    ferry_rmem_t *old;
    ferry_mem_t *ml;
    uint8_t *l = tu_alloc_buf(LEN);
    ferry_req_t *req = NULL;
    uint64_t t0;
    int ret;

    children_take_one_port();
    tu_child_start_apart(&first, PROV, LEN, 0x5700);
    tu_child_stop(&first);
    tu_child_start_apart(&second, PROV, LEN, 0x5701);
    unsetenv("FI_TCP_PORT_LOW_RANGE");
    unsetenv("FI_TCP_PORT_HIGH_RANGE");
    ctx = tu_context(PROV);
    peer = add_peer(ctx, &first);
    at_the_same_address(peer, add_peer(ctx, &second));
    old = import_child(peer, &first, LEN);
    ml = tu_register(ctx, l, LEN, 0);
    tu_fill(l, LEN, 0x5702);
    t0 = tu_now_ns();
    ret = ferry_write(peer, &(struct ferry_iov){l, ml, old, 0, LEN}, 1, NULL,
                      &req);
    if (ret == 0)
        ret = ferry_req_wait(req, 20000);
    printf("successor at the same address: the write through the "
           "predecessor's blob ended with %s after %llu ms: %s\n",
           ret == 0 ? "success" : ferry_strerror(ret),
           (unsigned long long)tu_ms_since(t0),
           ret == 0 ? "" : ferry_last_error());
    ck_assert_msg(ret != 0, "the write through the predecessor's blob "
                            "succeeded: it landed in the successor");
    ck_assert_msg(tu_child_verify(&second, 0x5701),
                  "the successor's region was written through its "
                  "predecessor's blob");
    if (req != NULL)
        ferry_req_close(req);
    ck_assert_int_eq(ferry_rmem_close(old), 0);
    ck_assert_int_eq(ferry_mem_close(ml), 0);
    ck_assert_int_eq(ferry_context_close(ctx), 0);
    tu_child_stop(&second);
    tu_free_buf(l, LEN);
}
END_TEST

/* Why this machine cannot give a child a /dev/shm of its own, or NULL. */
static const char *cannot_run(void)
{
    pid_t pid;
    int st = 0;

    if (geteuid() != 0)
        return "a mount namespace of its own for the target needs root";
    pid = fork();
    if (pid == 0)
        _exit(unshare(CLONE_NEWNS) == 0 ? 0 : 1);
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) ||
        WEXITSTATUS(st) != 0)
        return "unshare(CLONE_NEWNS) fails here (a container without "
               "CAP_SYS_ADMIN?)";
    return NULL;
}

int main(void)
{
    const char *why = cannot_run();
    Suite *s;
    TCase *tc;

    if (why != NULL) {
        printf("SKIP: %s\n", why);
        return 77;
    }
    s = suite_create("stale across hosts");
    tc = tu_tcase(s, "tcp", 60);
    tcase_add_test(tc, test_stale_across_hosts);
    tcase_add_test(tc, test_successor_at_same_address);
    return tu_run(s);
}
