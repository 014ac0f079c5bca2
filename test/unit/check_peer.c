/*
 * peer module from inside: what ferry_peer_add fills in, address blobs from
 * real contexts and built by hand, every truncation and corruption refused
 * (never a crash or an over-read) and leaving no peer behind, provider and
 * address-family mismatches named on both sides, removal while remote
 * regions are held, the context's list of peers, and two shm contexts of
 * one process never connected both ways where libfabric crashes on it,
 * and the heartbeat word each blob carries (its fields, and a peer that
 * answers with another incarnation declared dead).  (A remote-key blob
 * as an address, removing NULL and destruction with regions held, through
 * the API: test/api/check_peer.c.)
 */
#include "testutil.h"

#include "reg/peer.h"
#include "base/blob.h"
#include "base/host.h"
#include "fabric/shm_loop.h"
#include "xfer/part.h"

#include <rdma/fi_cm.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TCP tu_tcp()

/* A sentinel that a failed call must leave alone. */
#define UNTOUCHED ((ferry_peer_t *)(uintptr_t)0x5a5a)

static size_t address_of(ferry_context_t *ctx, uint8_t *buf, size_t cap)
{
    size_t len = cap;
    int ret = ferry_context_address(ctx, buf, &len);

    ck_assert_msg(ret == 0, "address: %s", ferry_last_error());
    return len;
}

/* Calls ferry_peer_add on an exact-size heap copy, so that any read past
 * `len` is an out-of-bounds read AddressSanitizer reports. */
static int add_copy(ferry_context_t *ctx, const uint8_t *blob, size_t len,
                    ferry_peer_t **out)
{
    void *copy = tu_heap_copy(blob, len);
    int ret = ferry_peer_add(ctx, copy, len, out);

    free(copy);
    return ret;
}

/* The rail's own endpoint name: a valid address of its format. */
static size_t rail_name(ferry_context_t *ctx, unsigned rail, uint8_t *buf,
                        size_t cap)
{
    size_t len = cap;

    ck_assert_int_eq(fi_getname(&ferry__fabric_of(ctx)->rails[rail].ep->fid, buf, &len), 0);
    return len;
}

/* The heartbeat word's fields of a built blob (fabric/pulse.h). */
struct pulse_spec {
    uint64_t incarnation, addr, raw_base;
    size_t klen; /* 0: no word */
    const uint8_t *key;
};

/* The host hand-built blobs say they come from: this one, unless a test
 * names another (elsewhere()). */
static struct ferry__host blob_host;

static const struct ferry__host *from_host(void)
{
    return blob_host.name[0] != '\0' ? &blob_host : ferry__host_self();
}

/* Hand-built blobs from now on come from this host again. */
static void here(void)
{
    memset(&blob_host, 0, sizeof(blob_host));
}

/* Hand-built blobs from now on come from another host: another name,
 * another /dev/shm and another network namespace. */
static void elsewhere(void)
{
    blob_host = *ferry__host_self();
    snprintf(blob_host.name, sizeof(blob_host.name), "elsewhere");
    blob_host.shm_key++;
    blob_host.net_key++;
}

/*
 * An address blob built by hand: the host fields of from_host(), one
 * transport: provider, a rail count as written in the blob, then `nrails` entries of
 * (fmt, addr[alen]), the heartbeat word of *pulse, then `extra` bytes.
 */
static size_t build_blob(uint8_t *buf, size_t cap, const char *prov,
                         unsigned claimed, unsigned nrails, uint32_t fmt,
                         const void *addr, size_t alen,
                         const struct pulse_spec *pulse, size_t extra)
{
    struct ferry__blob_writer w;
    size_t len = 0;

    ferry__blob_begin(&w, buf, cap, FERRY__BLOB_ADDR);
    ferry__blob_put_str(&w, from_host()->name);
    ferry__blob_put_u64(&w, from_host()->shm_key);
    ferry__blob_put_u64(&w, from_host()->net_key);
    ferry__blob_put_u16(&w, 1); /* one transport */
    ferry__blob_put_str(&w, prov);
    ferry__blob_put_u16(&w, (uint16_t)claimed);
    for (unsigned i = 0; i < nrails; i++) {
        ferry__blob_put_u32(&w, fmt);
        ferry__blob_put_u16(&w, (uint16_t)alen);
        ferry__blob_put_bytes(&w, addr, alen);
    }
    ferry__blob_put_u64(&w, pulse->incarnation);
    ferry__blob_put_u64(&w, pulse->addr);
    ferry__blob_put_u64(&w, pulse->raw_base);
    ferry__blob_put_u16(&w, (uint16_t)pulse->klen);
    ferry__blob_put_bytes(&w, pulse->key, pulse->klen);
    for (size_t i = 0; i < extra; i++)
        ferry__blob_put_bytes(&w, "\x5a", 1);
    ck_assert_int_eq(ferry__blob_end(&w, &len), 0);
    return len;
}

/* The same without a heartbeat word. */
static size_t build_addr(uint8_t *buf, size_t cap, const char *prov,
                         unsigned claimed, unsigned nrails, uint32_t fmt,
                         const void *addr, size_t alen, size_t extra)
{
    static const struct pulse_spec none;

    return build_blob(buf, cap, prov, claimed, nrails, fmt, addr, alen,
                      &none, extra);
}

static void peer_count_is(ferry_context_t *ctx, size_t want)
{
    size_t n = 0;

    for (struct ferry_peer *p = ferry__reg_of(ctx)->peers; p != NULL; p = p->next)
        n++;
    ck_assert_uint_eq(n, want);
}

/* ---- add: arguments ---------------------------------------------------- */

START_TEST(test_add_null_args)
{
    ferry_context_t *ctx = tu_context(TCP);
    ferry_peer_t *peer = UNTOUCHED;
    uint8_t addr[512];
    size_t len = address_of(ctx, addr, sizeof(addr));

    TU_EXPECT_ERROR(ferry_peer_add(NULL, addr, len, &peer), FERRY_EINVAL,
                    "ferry_peer_add: context is NULL");
    TU_EXPECT_ERROR(ferry_peer_add(ctx, NULL, len, &peer), FERRY_EINVAL,
                    "address blob is NULL");
    TU_EXPECT_ERROR(ferry_peer_add(ctx, addr, len, NULL), FERRY_EINVAL,
                    "ferry_peer_add: out is NULL");
    TU_EXPECT_ERROR(ferry_peer_add(ctx, addr, 0, &peer), FERRY_EBLOB,
                    "shorter than the 16-byte header");
    ck_assert_ptr_eq(peer, UNTOUCHED);
    peer_count_is(ctx, 0);
    /* The same blob, whole, is fine. */
    ck_assert_int_eq(ferry_peer_add(ctx, addr, len, &peer), 0);
    ck_assert_str_eq(ferry_last_error(), "");
    ck_assert_ptr_ne(peer, UNTOUCHED);
    ferry_context_close(ctx);
}
END_TEST

START_TEST(test_add_wrong_handle)
{
    ferry_context_t *ctx = tu_context(TCP);
    ferry_peer_t *peer = NULL, *p2 = UNTOUCHED;
    uint8_t addr[512];
    size_t len = address_of(ctx, addr, sizeof(addr));

    ck_assert_int_eq(ferry_peer_add(ctx, addr, len, &peer), 0);
    TU_EXPECT_ERROR(ferry_peer_add((ferry_context_t *)peer, addr, len, &p2),
                    FERRY_EHANDLE, "not a live ferry context");
    TU_EXPECT_ERROR(ferry_peer_close((ferry_peer_t *)ctx), FERRY_EHANDLE,
                    "ferry_peer_close: not a live ferry peer");
    ck_assert_ptr_eq(p2, UNTOUCHED);
    peer_count_is(ctx, 1);
    ferry_context_close(ctx);
}
END_TEST

START_TEST(test_add_fills_every_rail)
{
    const char *prov = tu_providers[_i];
    ferry_context_t *a = tu_context(prov), *b = tu_context(prov);
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;
    ferry_peer_t *peer = NULL;
    uint8_t addr[512];
    size_t len = address_of(b, addr, sizeof(addr));

    ck_assert_int_eq(ferry_context_info(a, &info), 0);
    ck_assert_int_eq(ferry_peer_add(a, addr, len, &peer), 0);
    ck_assert_uint_eq(peer->magic, FERRY__MAGIC_PEER);
    ck_assert_ptr_eq(peer->ctx, a);
    ck_assert_uint_eq(atomic_load(&peer->rmem_count), 0);
    for (unsigned i = 0; i < FERRY__MAX_RAILS; i++) {
        if (i < info.nrails)
            ck_assert(peer->fi_addr[i] != FI_ADDR_NOTAVAIL);
        else
            ck_assert(peer->fi_addr[i] == FI_ADDR_NOTAVAIL);
    }
    ck_assert_ptr_eq(ferry__reg_of(a)->peers, peer);
    ck_assert_int_eq(ferry_peer_close(peer), 0);
    ck_assert_ptr_null(ferry__reg_of(a)->peers);
    ferry_context_close(a);
    ferry_context_close(b);
}
END_TEST

/* ---- add: damaged blobs ------------------------------------------------ */

START_TEST(test_add_every_truncation)
{
    const char *prov = tu_providers[_i];
    ferry_context_t *ctx = tu_context(prov);
    ferry_peer_t *peer = UNTOUCHED;
    uint8_t addr[512];
    size_t len = address_of(ctx, addr, sizeof(addr));

    for (size_t cut = 0; cut < len; cut++) {
        int ret = add_copy(ctx, addr, cut, &peer);
        ck_assert_msg(ret == FERRY_EBLOB,
                      "%s: blob cut to %zu of %zu bytes gave %d: %s", prov,
                      cut, len, ret, ferry_last_error());
        ck_assert_msg(strstr(ferry_last_error(), "truncated") != NULL,
                      "cut %zu: \"%s\" does not say truncated", cut,
                      ferry_last_error());
    }
    ck_assert_ptr_eq(peer, UNTOUCHED);
    peer_count_is(ctx, 0);
    ck_assert_int_eq(add_copy(ctx, addr, len, &peer), 0);
    ferry_context_close(ctx);
}
END_TEST

START_TEST(test_add_every_corrupted_byte)
{
    static const uint8_t flips[] = {0x01, 0x10, 0x80, 0xff};
    const char *prov = tu_providers[_i];
    ferry_context_t *ctx = tu_context(prov);
    ferry_peer_t *peer = UNTOUCHED;
    uint8_t addr[512];
    size_t len = address_of(ctx, addr, sizeof(addr));

    for (size_t i = 0; i < len; i++) {
        for (size_t f = 0; f < sizeof(flips); f++) {
            int ret;

            addr[i] ^= flips[f];
            ret = add_copy(ctx, addr, len, &peer);
            addr[i] ^= flips[f];
            ck_assert_msg(ret == FERRY_EBLOB || ret == FERRY_EINCOMPAT,
                          "%s: byte %zu ^ 0x%02x accepted or misreported "
                          "(%d): %s",
                          prov, i, flips[f], ret, ferry_last_error());
            ck_assert_str_ne(ferry_last_error(), "");
        }
    }
    ck_assert_ptr_eq(peer, UNTOUCHED);
    peer_count_is(ctx, 0);
    ck_assert_int_eq(add_copy(ctx, addr, len, &peer), 0);
    ferry_context_close(ctx);
}
END_TEST

START_TEST(test_add_trailing_garbage)
{
    const char *prov = tu_providers[_i];
    ferry_context_t *ctx = tu_context(prov);
    ferry_peer_t *peer = UNTOUCHED;
    struct ferry__blob_writer w;
    uint8_t addr[512], padded[600];
    size_t len = address_of(ctx, addr, sizeof(addr)), plen = 0;

    /* The real fields, then 5 bytes more; length and checksum sealed
     * again, so only the field parser can notice. */
    ferry__blob_begin(&w, padded, sizeof(padded), FERRY__BLOB_ADDR);
    ferry__blob_put_bytes(&w, addr + FERRY__BLOB_HEADER_LEN,
                          len - FERRY__BLOB_HEADER_LEN);
    ferry__blob_put_bytes(&w, "junk!", 5);
    ck_assert_int_eq(ferry__blob_end(&w, &plen), 0);
    ck_assert_uint_eq(plen, len + 5);
    TU_EXPECT_ERROR(add_copy(ctx, padded, plen, &peer), FERRY_EBLOB,
                    "has 5 bytes after its last field");
    ck_assert_ptr_eq(peer, UNTOUCHED);
    peer_count_is(ctx, 0);
    /* Re-sealed without the padding, the same bytes are accepted: the
     * writer reproduces the real blob exactly. */
    ferry__blob_begin(&w, padded, sizeof(padded), FERRY__BLOB_ADDR);
    ferry__blob_put_bytes(&w, addr + FERRY__BLOB_HEADER_LEN,
                          len - FERRY__BLOB_HEADER_LEN);
    ck_assert_int_eq(ferry__blob_end(&w, &plen), 0);
    ck_assert_mem_eq(padded, addr, len);
    ck_assert_int_eq(add_copy(ctx, padded, plen, &peer), 0);
    ferry_context_close(ctx);
}
END_TEST

START_TEST(test_add_other_provider)
{
    /* _i: 0 = a shm blob into a tcp context, 1 = the other way round. */
    const char *from = _i == 0 ? "shm" : TCP, *to = _i == 0 ? TCP : "shm";
    ferry_context_t *src = tu_context(from), *dst = tu_context(to);
    ferry_peer_t *peer = UNTOUCHED;
    uint8_t addr[512];
    size_t len = address_of(src, addr, sizeof(addr));
    char phrase[128];

    snprintf(phrase, sizeof(phrase),
             "peer using provider '%s' but this context uses '%s'", from, to);
    TU_EXPECT_ERROR(add_copy(dst, addr, len, &peer), FERRY_EINCOMPAT, phrase);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "same provider"));
    ck_assert_ptr_eq(peer, UNTOUCHED);
    peer_count_is(dst, 0);
    ferry_context_close(src);
    ferry_context_close(dst);
}
END_TEST

/* ---- add: peers on other hosts ------------------------------------------ */

/* A loopback address from another host leads nowhere near the peer:
 * refused at once, naming the address and the fix; from this host the
 * same blob is a peer. */
START_TEST(test_other_host_loopback_refused)
{
    ferry_context_t *ctx = tu_context(TCP);
    ferry_peer_t *peer = UNTOUCHED;
    uint8_t name[FERRY__ADDR_MAX], blob[1024];
    size_t nlen = rail_name(ctx, 0, name, sizeof(name)), len;
    struct sockaddr_in *sin = (struct sockaddr_in *)(void *)name;

    /* tu_context's tcp rail is on loopback (its peer host is 127.0.0.1). */
    ck_assert_int_eq(sin->sin_family, AF_INET);
    ck_assert_uint_eq(ntohl(sin->sin_addr.s_addr) >> 24, 127);
    elsewhere();
    len = build_addr(blob, sizeof(blob), TCP, 1, 1, FI_SOCKADDR_IN, name,
                     nlen, 0);
    TU_EXPECT_ERROR(add_copy(ctx, blob, len, &peer), FERRY_EHOSTUNREACH,
                    "the peer on host 'elsewhere' published the loopback "
                    "address 127.0.0.1:");
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "do not set "
                                 "FERRY_PEER_HOST"));
    ck_assert_ptr_eq(peer, UNTOUCHED);
    peer_count_is(ctx, 0);
    here();
    len = build_addr(blob, sizeof(blob), TCP, 1, 1, FI_SOCKADDR_IN, name,
                     nlen, 0);
    ck_assert_msg(add_copy(ctx, blob, len, &peer) == 0, "%s",
                  ferry_last_error());
    peer_count_is(ctx, 1);
    ferry_context_close(ctx);
}
END_TEST

/* Shared memory reaches only processes that share /dev/shm: a peer of
 * another host is refused by a shm context at ferry_peer_add, with the
 * cause and the fix, instead of being declared unreachable later. */
START_TEST(test_other_host_on_shm_refused)
{
    ferry_context_t *ctx = tu_context("shm"), *src = tu_context("shm");
    ferry_peer_t *peer = UNTOUCHED;
    uint8_t name[FERRY__ADDR_MAX], blob[1024];
    size_t nlen = rail_name(src, 0, name, sizeof(name)), len;

    elsewhere();
    len = build_addr(blob, sizeof(blob), "shm", 1, 1, FI_ADDR_STR, name,
                     nlen, 0);
    TU_EXPECT_ERROR(add_copy(ctx, blob, len, &peer), FERRY_EHOSTUNREACH,
                    "the peer is on host 'elsewhere', another host than "
                    "this one");
    ck_assert_ptr_nonnull(strstr(ferry_last_error(),
                                 "without local_only, FERRY_PROVIDER=shm"));
    ck_assert_ptr_eq(peer, UNTOUCHED);
    peer_count_is(ctx, 0);
    here();
    ferry_context_close(src);
    ferry_context_close(ctx);
}
END_TEST

/* ---- add: hand-built blobs --------------------------------------------- */

/* A peer names its own host: a name with an escape and a newline in it
 * is shown printably in its label, which logs, sentences and metrics
 * (ferry_stat's view, on a terminal) carry. */
START_TEST(test_built_blob_host_name_printable)
{
    ferry_context_t *ctx = tu_context(TCP);
    ferry_peer_t *peer = NULL;
    uint8_t name[FERRY__ADDR_MAX], blob[1024];
    size_t nlen = rail_name(ctx, 0, name, sizeof(name)), len;

    blob_host = *ferry__host_self();
    snprintf(blob_host.name, sizeof(blob_host.name), "evil\033[2J\nhost");
    len = build_addr(blob, sizeof(blob), TCP, 1, 1, FI_SOCKADDR_IN, name,
                     nlen, 0);
    here();
    ck_assert_msg(add_copy(ctx, blob, len, &peer) == 0, "%s",
                  ferry_last_error());
    ck_assert_msg(strncmp(peer->label, "evil?[2J host at ", 17) == 0,
                  "label: %s", peer->label);
    ferry_context_close(ctx);
}
END_TEST

START_TEST(test_built_blob_accepted)
{
    ferry_context_t *ctx = tu_context(TCP);
    ferry_peer_t *peer = NULL;
    uint8_t name[FERRY__ADDR_MAX], blob[1024];
    size_t nlen = rail_name(ctx, 0, name, sizeof(name)), len;

    /* The builder itself is right: a well-formed blob goes through, so
     * each refusal below is due to the one field it changes. */
    len = build_addr(blob, sizeof(blob), TCP, 1, 1, FI_SOCKADDR_IN, name,
                     nlen, 0);
    ck_assert_int_eq(add_copy(ctx, blob, len, &peer), 0);
    ck_assert(peer->fi_addr[0] != FI_ADDR_NOTAVAIL);
    /* A peer with more rails than we have: the common rail is used. */
    len = build_addr(blob, sizeof(blob), TCP, 3, 3, FI_SOCKADDR_IN, name,
                     nlen, 0);
    ck_assert_msg(add_copy(ctx, blob, len, &peer) == 0, "%s",
                  ferry_last_error());
    peer_count_is(ctx, 2);
    ferry_context_close(ctx);
}
END_TEST

START_TEST(test_built_blob_rail_counts)
{
    ferry_context_t *ctx = tu_context(TCP);
    ferry_peer_t *peer = UNTOUCHED;
    uint8_t name[FERRY__ADDR_MAX], blob[4096];
    size_t nlen = rail_name(ctx, 0, name, sizeof(name)), len;

    len = build_addr(blob, sizeof(blob), TCP, 0, 0, FI_SOCKADDR_IN, name,
                     nlen, 0);
    TU_EXPECT_ERROR(add_copy(ctx, blob, len, &peer), FERRY_EBLOB,
                    "lists 0 rails; a peer has 1 to 8");
    /* 99 claimed and 99 present: still too many. */
    len = build_addr(blob, sizeof(blob), TCP, 99, 99, FI_SOCKADDR_IN, name,
                     nlen, 0);
    TU_EXPECT_ERROR(add_copy(ctx, blob, len, &peer), FERRY_EBLOB,
                    "lists 99 rails; a peer has 1 to 8");
    /* Two claimed, one present. */
    len = build_addr(blob, sizeof(blob), TCP, 2, 1, FI_SOCKADDR_IN, name,
                     nlen, 0);
    TU_EXPECT_ERROR(add_copy(ctx, blob, len, &peer), FERRY_EBLOB,
                    "rail 1 address");
    /* One claimed, two present. */
    len = build_addr(blob, sizeof(blob), TCP, 1, 2, FI_SOCKADDR_IN, name,
                     nlen, 0);
    TU_EXPECT_ERROR(add_copy(ctx, blob, len, &peer), FERRY_EBLOB,
                    "after its last field");
    ck_assert_ptr_eq(peer, UNTOUCHED);
    peer_count_is(ctx, 0);
    ferry_context_close(ctx);
}
END_TEST

START_TEST(test_built_blob_address_lengths)
{
    ferry_context_t *ctx = tu_context(TCP);
    ferry_peer_t *peer = UNTOUCHED;
    uint8_t big[FERRY__ADDR_MAX + 44], blob[1024];
    size_t len;

    memset(big, 0x11, sizeof(big));
    len = build_addr(blob, sizeof(blob), TCP, 1, 1, FI_SOCKADDR_IN, big,
                     sizeof(big), 0);
    TU_EXPECT_ERROR(add_copy(ctx, blob, len, &peer), FERRY_EBLOB,
                    "rail 0 address of 300 bytes is empty, too long");
    len = build_addr(blob, sizeof(blob), TCP, 1, 1, FI_SOCKADDR_IN, big, 0,
                     0);
    TU_EXPECT_ERROR(add_copy(ctx, blob, len, &peer), FERRY_EBLOB,
                    "rail 0 address of 0 bytes is empty");
    /* Shorter than the family's sockaddr, which libfabric reads whole. */
    len = build_addr(blob, sizeof(blob), TCP, 1, 1, FI_SOCKADDR_IN, big, 8,
                     0);
    TU_EXPECT_ERROR(add_copy(ctx, blob, len, &peer), FERRY_EBLOB,
                    "rail 0's IPv4 address of 8 bytes is none: an address "
                    "of that family is at least 16 bytes");
    len = build_addr(blob, sizeof(blob), TCP, 1, 1, FI_SOCKADDR_IN6, big, 16,
                     0);
    TU_EXPECT_ERROR(add_copy(ctx, blob, len, &peer), FERRY_EBLOB,
                    "rail 0's IPv6 address of 16 bytes is none: an address "
                    "of that family is at least 28 bytes");
    ck_assert_ptr_eq(peer, UNTOUCHED);
    peer_count_is(ctx, 0);
    ferry_context_close(ctx);
}
END_TEST

/* Asserts that ctx refuses a blob whose rail 0 has the string address
 * of alen bytes at name (no NUL among them) with a sentence holding says. */
static void string_refused(ferry_context_t *ctx, const uint8_t *name,
                           size_t alen, const char *says)
{
    ferry_peer_t *peer = UNTOUCHED;
    uint8_t blob[1024];
    size_t len = build_addr(blob, sizeof(blob), "shm", 1, 1, FI_ADDR_STR,
                            name, alen, 0);

    TU_EXPECT_ERROR(add_copy(ctx, blob, len, &peer), FERRY_EBLOB, says);
    ck_assert_ptr_eq(peer, UNTOUCHED);
    peer_count_is(ctx, 0);
}

/* A string address (shm's) is read up to its NUL: one without, of any
 * length up to the longest, is refused (it was read past its end). */
START_TEST(test_built_blob_string_without_nul)
{
    ferry_context_t *ctx = tu_context("shm"), *src = tu_context("shm");
    uint8_t name[FERRY__ADDR_MAX];
    size_t nlen = rail_name(src, 0, name, sizeof(name));
    char says[128];

    /* A real one ends in its NUL, on every release tried. */
    ck_assert_uint_gt(nlen, 1);
    ck_assert_uint_eq(name[nlen - 1], '\0');
    snprintf(says, sizeof(says), "rail 0's string address of %zu bytes is "
             "none: an address of that family is a string that ends in a "
             "NUL byte", nlen - 1);
    string_refused(ctx, name, nlen - 1, says);
    memset(name + nlen - 1, 'x', sizeof(name) - (nlen - 1));
    string_refused(ctx, name, sizeof(name),
                   "string address of 256 bytes is none");
    ferry_context_close(src);
    ferry_context_close(ctx);
}
END_TEST

START_TEST(test_built_blob_long_provider_name)
{
    ferry_context_t *ctx = tu_context(TCP);
    ferry_peer_t *peer = UNTOUCHED;
    uint8_t name[FERRY__ADDR_MAX], blob[1024];
    size_t nlen = rail_name(ctx, 0, name, sizeof(name)), len;
    char prov[FERRY__NAME_MAX + 10];

    memset(prov, 'p', sizeof(prov) - 1);
    prov[sizeof(prov) - 1] = '\0';
    len = build_addr(blob, sizeof(blob), prov, 1, 1, FI_SOCKADDR_IN, name,
                     nlen, 0);
    ck_assert_int_eq(add_copy(ctx, blob, len, &peer), FERRY_EBLOB);
    ck_assert_str_ne(ferry_last_error(), "");
    ck_assert_ptr_eq(peer, UNTOUCHED);
    ferry_context_close(ctx);
}
END_TEST

START_TEST(test_built_blob_address_family)
{
    ferry_context_t *ctx = tu_context(TCP);
    ferry_peer_t *peer = UNTOUCHED;
    struct sockaddr_in6 sin6 = {.sin6_family = AF_INET6,
                                .sin6_port = htons(4242),
                                .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    uint8_t blob[1024];
    size_t len;

    /* The lo domain chosen by tu_config speaks IPv4. */
    ck_assert_uint_eq(ferry__fabric_of(ctx)->rails[0].info->addr_format, FI_SOCKADDR_IN);
    len = build_addr(blob, sizeof(blob), TCP, 1, 1, FI_SOCKADDR_IN6, &sin6,
                     sizeof(sin6), 0);
    TU_EXPECT_ERROR(add_copy(ctx, blob, len, &peer), FERRY_EINCOMPAT,
                    "address of the IPv6 family but this context's domain lo "
                    "uses the IPv4 family");
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "same family"));
    ck_assert_ptr_eq(peer, UNTOUCHED);
    peer_count_is(ctx, 0);
    ferry_context_close(ctx);
}
END_TEST

START_TEST(test_multi_rail_peers)
{
    struct ferry_config cfg;
    ferry_context_t *two_a = NULL, *two_b = NULL, *one = tu_context(TCP);
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;
    ferry_peer_t *peer = NULL;
    uint8_t addr[512];
    size_t len;

    tu_config(&cfg, TCP);
    cfg.domain = NULL;
    cfg.max_rails = 2;
    ck_assert_int_eq(ferry_context_create(&cfg, &two_a), 0);
    ck_assert_int_eq(ferry_context_create(&cfg, &two_b), 0);
    ck_assert_int_eq(ferry_context_info(two_a, &info), 0);
    if (info.nrails < 2) {
        fprintf(stderr, "note: one tcp;ofi_rxm domain here, multi-rail "
                        "peer test reduced to one rail\n");
    }
    /* Same rail set on both sides: every rail gets an address. */
    len = address_of(two_b, addr, sizeof(addr));
    ck_assert_msg(ferry_peer_add(two_a, addr, len, &peer) == 0, "%s",
                  ferry_last_error());
    for (unsigned i = 0; i < info.nrails; i++)
        ck_assert(peer->fi_addr[i] != FI_ADDR_NOTAVAIL);
    /* A one-rail peer in a multi-rail context: the first rail only, if
     * the families match; a lo (IPv4) peer for an eth0 context is still
     * IPv4 on rail 0. */
    len = address_of(one, addr, sizeof(addr));
    if (ferry__fabric_of(one)->rails[0].info->addr_format == ferry__fabric_of(two_a)->rails[0].info->addr_format) {
        ck_assert_msg(ferry_peer_add(two_a, addr, len, &peer) == 0, "%s",
                      ferry_last_error());
        ck_assert(peer->fi_addr[0] != FI_ADDR_NOTAVAIL);
        for (unsigned i = 1; i < FERRY__MAX_RAILS; i++)
            ck_assert(peer->fi_addr[i] == FI_ADDR_NOTAVAIL);
    }
    /* A multi-rail peer in a one-rail context: its first rail. */
    len = address_of(two_b, addr, sizeof(addr));
    ck_assert_msg(ferry_peer_add(one, addr, len, &peer) == 0, "%s",
                  ferry_last_error());
    ck_assert(peer->fi_addr[0] != FI_ADDR_NOTAVAIL);
    ferry_context_close(two_a);
    ferry_context_close(two_b);
    ferry_context_close(one);
}
END_TEST

/* ---- remove and lifetime ----------------------------------------------- */

START_TEST(test_remove_while_rmem_held)
{
    const char *prov = tu_providers[_i];
    struct tu_pair p;
    ferry_mem_t *mem = NULL;
    ferry_rmem_t *r1, *r2;
    void *buf = tu_alloc_buf(8192);

    tu_pair_open(&p, prov, NULL);
    ck_assert_int_eq(ferry_mem_register(p.target, buf, 8192, FERRY_MEM_HOST,
                                        0, FERRY_ACCESS_REMOTE_WRITE, &mem),
                     0);
    r1 = tu_share(mem, p.peer);
    r2 = tu_share(mem, p.peer);
    TU_EXPECT_ERROR(ferry_peer_close(p.peer), FERRY_EBUSY,
                    "2 remote regions imported from this peer are still held; "
                    "ferry_rmem_close them first");
    ck_assert_uint_eq(p.peer->magic, FERRY__MAGIC_PEER);
    ck_assert_int_eq(ferry_rmem_close(r1), 0);
    TU_EXPECT_ERROR(ferry_peer_close(p.peer), FERRY_EBUSY,
                    "1 remote region imported from this peer is still held; "
                    "ferry_rmem_close them first");
    ck_assert_int_eq(ferry_rmem_close(r2), 0);
    ck_assert_int_eq(ferry_peer_close(p.peer), 0);
    ck_assert_str_eq(ferry_last_error(), "");
    peer_count_is(p.init, 0);
    ck_assert_int_eq(ferry_mem_close(mem), 0);
    tu_pair_close(&p);
    tu_free_buf(buf, 8192);
}
END_TEST

START_TEST(test_remove_keeps_the_others)
{
    ferry_context_t *ctx = tu_context(TCP), *other[3];
    ferry_peer_t *peer[3];
    uint8_t addr[512];

    for (int i = 0; i < 3; i++) {
        other[i] = tu_context(TCP);
        size_t len = address_of(other[i], addr, sizeof(addr));
        ck_assert_int_eq(ferry_peer_add(ctx, addr, len, &peer[i]), 0);
    }
    peer_count_is(ctx, 3);
    /* Unlinking from the middle of the list. */
    ck_assert_int_eq(ferry_peer_close(peer[1]), 0);
    peer_count_is(ctx, 2);
    for (struct ferry_peer *p = ferry__reg_of(ctx)->peers; p != NULL; p = p->next)
        ck_assert(p == peer[0] || p == peer[2]);
    ck_assert_int_eq(ferry_peer_close(peer[2]), 0);
    ck_assert_int_eq(ferry_peer_close(peer[0]), 0);
    peer_count_is(ctx, 0);
    for (int i = 0; i < 3; i++)
        ferry_context_close(other[i]);
    ferry_context_close(ctx);
}
END_TEST

START_TEST(test_peers_closed_with_context)
{
    const char *prov = tu_providers[_i];
    ferry_context_t *ctx = tu_context(prov), *other[4];
    ferry_peer_t *peer = NULL;
    uint8_t addr[512];

    /* Several peers, never removed: context destruction frees them (a
     * leak fails this test under AddressSanitizer). */
    for (int i = 0; i < 4; i++) {
        other[i] = tu_context(prov);
        size_t len = address_of(other[i], addr, sizeof(addr));
        ck_assert_int_eq(ferry_peer_add(ctx, addr, len, &peer), 0);
    }
    peer_count_is(ctx, 4);
    ferry_context_close(ctx);
    for (int i = 0; i < 4; i++)
        ferry_context_close(other[i]);
}
END_TEST

/* ---- shm endpoints of this process, both ways (shm_loop.h) -------------- */

/* An shm endpoint's fi_info as fabric.c leaves it, named name. */
static struct fi_info *shm_info(const char *name)
{
    struct fi_info *info = fi_allocinfo();

    ck_assert_ptr_nonnull(info);
    info->ep_attr->protocol = FI_PROTO_SHM;
    info->addr_format = FI_ADDR_STR;
    info->src_addr = strdup(name);
    info->src_addrlen = strlen(name) + 1;
    return info;
}

/* Admits peer on info's endpoint; one_way tells what admit said of it. */
static int admit_as(const struct fi_info *info, const char *peer,
                    bool *one_way)
{
    return ferry__shm_loop_admit(info, peer, strlen(peer) + 1, one_way);
}

static int admit(const struct fi_info *info, const char *peer)
{
    bool one_way;

    return admit_as(info, peer, &one_way);
}

START_TEST(test_shm_loop_rule)
{
    char a[64], b[64], far[64], b_url[80];
    struct fi_info *ia, *ib, *tcp;
    bool one_way = false;

    snprintf(a, sizeof(a), "ferry_%d_1a_0", (int)getpid());
    snprintf(b, sizeof(b), "ferry_%d_1b_1", (int)getpid());
    snprintf(b_url, sizeof(b_url), "fi_shm://%s", b);
    /* Another process's endpoint: pid 1 is init, never this test. */
    snprintf(far, sizeof(far), "ferry_1_1c_2");
    ia = shm_info(a);
    ib = shm_info(b);
    tcp = shm_info(a);
    tcp->ep_attr->protocol = FI_PROTO_RXM;
    ck_assert_int_eq(ferry__shm_loop_open(ia), 0);
    ck_assert_int_eq(ferry__shm_loop_open(ib), 0);
    setenv("FERRY_SHM_LOOP_FAULT", "1", 1);

    ck_assert_int_eq(admit_as(ia, b_url, &one_way), 0); /* a -> b, URL form */
    ck_assert(one_way); /* b may never reach a */
    ck_assert_int_eq(admit(ia, b), 0); /* again: the same direction */
    ck_assert_int_eq(admit_as(ia, a, &one_way), 0); /* to itself */
    ck_assert(!one_way);
    ck_assert_int_eq(admit(ib, a), FERRY_ENOTSUP);
    tu_assert_sentence("this same process", "both ways",
                       "FERRY_PROVIDER=tcp", NULL);
    ck_assert_int_eq(admit_as(ib, far, &one_way), 0); /* not this process */
    ck_assert(!one_way);
    ck_assert_int_eq(admit_as(tcp, b, &one_way), 0); /* not shm */
    ck_assert(!one_way);

    /* Once a's endpoint closes, nothing reaches it; b may reach a new
     * endpoint of that name once a's rail is gone. */
    ck_assert(ferry__shm_loop_forget(ia)); /* b, which a reached, is open */
    ck_assert_int_eq(admit(ib, a), FERRY_EPEERDEAD);
    tu_assert_sentence("no context of this process has it open",
                       "ferry_context_close", NULL);
    ck_assert(!ferry__shm_loop_release(ia, NULL, NULL));
    ck_assert_int_eq(ferry__shm_loop_open(ia), 0);
    ck_assert_int_eq(admit(ib, a), 0);
    ck_assert_int_eq(admit(ia, b), FERRY_ENOTSUP);

    /* A libfabric without the fault admits both ways, but never an
     * endpoint of this process that is closed. */
    setenv("FERRY_SHM_LOOP_FAULT", "0", 1);
    ck_assert(!ferry__shm_loop_faulty(ia));
    ck_assert_int_eq(admit_as(ia, b, &one_way), 0);
    ck_assert(!one_way);
    ferry__shm_loop_forget(ib);
    ck_assert_int_eq(admit(ia, b), FERRY_EPEERDEAD);
    ck_assert_int_eq(admit(tcp, b), 0); /* not shm: its names are others */
    unsetenv("FERRY_SHM_LOOP_FAULT");
    ck_assert(ferry__shm_loop_faulty(ia) ==
              FI_VERSION_GE(fi_version(), FI_VERSION(2, 5)));
    ck_assert(!ferry__shm_loop_faulty(tcp));

    ferry__shm_loop_forget(ia);
    ferry__shm_loop_forget(ib);
    ferry__shm_loop_release(ia, NULL, NULL);
    ferry__shm_loop_release(ib, NULL, NULL);
    fi_freeinfo(ia);
    fi_freeinfo(ib);
    fi_freeinfo(tcp);
}
END_TEST

/* How many kept endpoints were closed, and the name of the last. */
static int kept_closes;
static const char *kept_closed_last;

static void count_close(void *name)
{
    kept_closes++;
    kept_closed_last = name;
}

/* Closes the endpoint of info, named name, as fabric.c does; returns
 * whether it was kept (then count_close reports its close). */
static bool close_as_fabric(struct fi_info *info, char *name)
{
    bool held = ferry__shm_loop_forget(info);

    return ferry__shm_loop_release(info, held ? count_close : NULL,
                                   held ? name : NULL);
}

/* A closed endpoint that open ones have as a peer is kept until the last
 * of them closes (shm_loop.h), through chains and both ways. */
START_TEST(test_shm_loop_keeps_held)
{
    char a[64], b[64], c[64];
    struct fi_info *ia, *ib, *ic;

    snprintf(a, sizeof(a), "ferry_%d_2a_0", (int)getpid());
    snprintf(b, sizeof(b), "ferry_%d_2b_1", (int)getpid());
    snprintf(c, sizeof(c), "ferry_%d_2c_2", (int)getpid());
    ia = shm_info(a);
    ib = shm_info(b);
    ic = shm_info(c);
    setenv("FERRY_SHM_LOOP_FAULT", "0", 1); /* both ways allowed */

    /* Nobody has a: it closes at once. */
    ck_assert_int_eq(ferry__shm_loop_open(ia), 0);
    ck_assert(!close_as_fabric(ia, a));
    ck_assert_int_eq(kept_closes, 0);

    /* b has a: a is kept until b closes; b, had by nobody, closes. */
    ck_assert_int_eq(ferry__shm_loop_open(ia), 0);
    ck_assert_int_eq(ferry__shm_loop_open(ib), 0);
    ck_assert_int_eq(admit(ib, a), 0);
    ck_assert(close_as_fabric(ia, a));
    ck_assert_int_eq(admit(ib, a), FERRY_EPEERDEAD); /* forgotten still */
    ck_assert_int_eq(kept_closes, 0);
    ck_assert(!close_as_fabric(ib, b));
    ck_assert_int_eq(kept_closes, 1);
    ck_assert_str_eq(kept_closed_last, a);

    /* Both ways: the first closed is kept, the second closes both. */
    ck_assert_int_eq(ferry__shm_loop_open(ia), 0);
    ck_assert_int_eq(ferry__shm_loop_open(ib), 0);
    ck_assert_int_eq(admit(ia, b), 0);
    ck_assert_int_eq(admit(ib, a), 0);
    ck_assert(close_as_fabric(ia, a));
    ck_assert(!close_as_fabric(ib, b));
    ck_assert_int_eq(kept_closes, 2);
    ck_assert_str_eq(kept_closed_last, a);

    /* A chain: c has b, b has a.  a is kept while b is open; b, kept
     * for c, lets a go when it closes (nothing progresses a kept
     * endpoint), and c's close lets b go. */
    ck_assert_int_eq(ferry__shm_loop_open(ia), 0);
    ck_assert_int_eq(ferry__shm_loop_open(ib), 0);
    ck_assert_int_eq(ferry__shm_loop_open(ic), 0);
    ck_assert_int_eq(admit(ib, a), 0);
    ck_assert_int_eq(admit(ic, b), 0);
    ck_assert(close_as_fabric(ia, a));
    ck_assert_int_eq(kept_closes, 2);
    ck_assert(close_as_fabric(ib, b));
    ck_assert_int_eq(kept_closes, 3);
    ck_assert_str_eq(kept_closed_last, a);
    ck_assert(!close_as_fabric(ic, c));
    ck_assert_int_eq(kept_closes, 4);
    ck_assert_str_eq(kept_closed_last, b);

    unsetenv("FERRY_SHM_LOOP_FAULT");
    fi_freeinfo(ia);
    fi_freeinfo(ib);
    fi_freeinfo(ic);
}
END_TEST

/* Through ferry_peer_add: a closed context of this process is refused,
 * not inserted into shm's address vector, where libfabric 1.17 would
 * hand out the closed endpoint's unmapped region (shm_loop.h). */
START_TEST(test_shm_closed_context_refused)
{
    ferry_context_t *ctx = tu_context("shm"), *gone = tu_context("shm");
    ferry_peer_t *peer = UNTOUCHED;
    uint8_t addr[512];
    size_t len = address_of(gone, addr, sizeof(addr));

    ck_assert_int_eq(ferry_context_close(gone), 0);
    TU_EXPECT_ERROR(ferry_peer_add(ctx, addr, len, &peer), FERRY_EPEERDEAD,
                    "no context of this process has it open");
    ck_assert_ptr_eq(peer, UNTOUCHED);
    peer_count_is(ctx, 0);
    ferry_context_close(ctx);
}
END_TEST

/* A context of this process closed with a write in flight to another,
 * whose progress then answers it: libfabric 1.17's shm gave the target the
 * writer's own region (from its first message), and the answer went into
 * it after the writer's close had unmapped it: SIGSEGV in the target's
 * progress, every run.  ferry keeps the writer's endpoint open while the
 * target is (shm_loop.h); the target goes on and closes cleanly. */
START_TEST(test_shm_closed_writer_kept_for_its_target)
{
    struct tu_pair p;
    uint8_t *src = tu_alloc_buf(4096), *dst = tu_alloc_buf(4096);
    ferry_mem_t *md;
    ferry_rmem_t *rd;
    ferry_req_t *req = NULL;
    struct ferry_iov iov;

    /* The target without a progress thread: nothing answers the write
     * until the test progresses it, after the writer's close. */
    tu_pair_open_threads(&p, "shm", NULL, 1, 0);
    md = tu_register(p.target, dst, 4096, FERRY_ACCESS_REMOTE_WRITE);
    rd = tu_share(md, p.peer);
    tu_fill(src, 4096, 93);
    memset(dst, 0, 4096);
    iov = (struct ferry_iov){.local = src, .rmem = rd, .len = 4096};
    ck_assert_int_eq(ferry_write(p.peer, &iov, 1, NULL, &req), 0);
    /* The writer's thread posts it, then its context closes with it in
     * flight. */
    nanosleep(&(struct timespec){0, 300 * 1000000L}, NULL);
    ck_assert_int_eq(ferry_context_close(p.init), 0);
    p.init = NULL;
    /* The target takes the write's command and answers into the writer's
     * region (the bytes, which the writer's progress would have gone on
     * copying, do not all land: it is closed). */
    for (int i = 0; i < 100; i++)
        ck_assert_int_eq(ferry_progress(p.target), 0);
    ck_assert_int_eq(ferry_mem_close(md), 0);
    tu_pair_close(&p);
    tu_free_buf(src, 4096);
    tu_free_buf(dst, 4096);
}
END_TEST

/* Through ferry_peer_add: the second direction between two shm contexts
 * of this process is refused whole (no peer left behind, the first
 * direction still carries data); tcp contexts connect both ways. */
START_TEST(test_shm_both_ways_refused)
{
    const char *prov = tu_providers[_i];
    struct tu_pair p;
    ferry_peer_t *back = UNTOUCHED;
    uint8_t addr[512], *src = tu_alloc_buf(4096), *dst = tu_alloc_buf(4096);
    size_t len;
    int ret;

    setenv("FERRY_SHM_LOOP_FAULT", "1", 1);
    tu_pair_open(&p, prov, NULL); /* init -> target */
    len = address_of(p.init, addr, sizeof(addr));
    ret = ferry_peer_add(p.target, addr, len, &back);
    if (strcmp(prov, "shm") == 0) {
        ck_assert_int_eq(ret, FERRY_ENOTSUP);
        tu_assert_sentence("both ways", NULL);
        ck_assert_ptr_eq(back, UNTOUCHED);
        peer_count_is(p.target, 0);
    } else {
        ck_assert_msg(ret == 0, "%s: %s", prov, ferry_last_error());
        peer_count_is(p.target, 1);
    }
    {
        ferry_mem_t *md = tu_register(p.target, dst, 4096,
                                      FERRY_ACCESS_REMOTE_WRITE);
        ferry_rmem_t *rd = tu_share(md, p.peer);
        struct ferry_iov iov = {.local = src, .rmem = rd, .len = 4096};

        tu_fill(src, 4096, 77);
        tu_xfer_ok(p.peer, true, &iov, 1, "init -> target");
        tu_assert_pattern(dst, 4096, 77, "%s: init -> target", prov);
        ck_assert_int_eq(ferry_rmem_close(rd), 0);
        ck_assert_int_eq(ferry_mem_close(md), 0);
    }
    tu_pair_close(&p);
    tu_free_buf(src, 4096);
    tu_free_buf(dst, 4096);
}
END_TEST

/* ---- the heartbeat word ------------------------------------------------- */

START_TEST(test_built_blob_pulse)
{
    ferry_context_t *ctx = tu_context(TCP);
    ferry_peer_t *peer = UNTOUCHED;
    uint8_t name[FERRY__ADDR_MAX], blob[1024], key[FERRY__KEY_MAX + 1];
    size_t nlen = rail_name(ctx, 0, name, sizeof(name)), len;
    struct pulse_spec p = {.incarnation = 0x1122334455667788u,
                           .addr = 0x1000,
                           .key = key};

    for (size_t i = 0; i < sizeof(key); i++)
        key[i] = (uint8_t)(i + 1);
    p.klen = sizeof(key);
    len = build_blob(blob, sizeof(blob), TCP, 1, 1, FI_SOCKADDR_IN, name,
                     nlen, &p, 0);
    TU_EXPECT_ERROR(add_copy(ctx, blob, len, &peer), FERRY_EBLOB,
                    "heartbeat word's key of 65 bytes");
    p.klen = 9;
    len = build_blob(blob, sizeof(blob), TCP, 1, 1, FI_SOCKADDR_IN, name,
                     nlen, &p, 0);
    TU_EXPECT_ERROR(add_copy(ctx, blob, len, &peer), FERRY_EBLOB,
                    "9-byte key but this context does not use raw keys");
    ck_assert_ptr_eq(peer, UNTOUCHED);
    peer_count_is(ctx, 0);
    /* Eight bytes: the key as a little-endian number, the rest as sent. */
    p.klen = 8;
    len = build_blob(blob, sizeof(blob), TCP, 1, 1, FI_SOCKADDR_IN, name,
                     nlen, &p, 0);
    ck_assert_msg(add_copy(ctx, blob, len, &peer) == 0, "%s",
                  ferry_last_error());
    ck_assert(peer->pulse.present);
    ck_assert_uint_eq(peer->pulse.key, 0x0807060504030201u);
    ck_assert_uint_eq(peer->pulse.incarnation, 0x1122334455667788u);
    ck_assert_uint_eq(peer->pulse.addr, 0x1000);
    /* None: accepted, and its heartbeats can only go unanswered. */
    p.klen = 0;
    len = build_blob(blob, sizeof(blob), TCP, 1, 1, FI_SOCKADDR_IN, name,
                     nlen, &p, 0);
    ck_assert_msg(add_copy(ctx, blob, len, &peer) == 0, "%s",
                  ferry_last_error());
    ck_assert(!peer->pulse.present);
    peer_count_is(ctx, 2);
    ferry_context_close(ctx);
}
END_TEST

/* The files of the pulse whose incarnation is inc, in /dev/shm. */
static void pulse_paths(uint64_t inc, char *table, char *bell, size_t len)
{
    snprintf(table, len, "/dev/shm/ferry-pulse-%016llx",
             (unsigned long long)inc);
    snprintf(bell, len, "/dev/shm/ferry-bell-%016llx",
             (unsigned long long)inc);
    unlink(table);
    unlink(bell);
}

/* A table file at path of a table's size, word `word` holding value; its
 * descriptor.  locked: with its owner's lock, taken before the word is
 * written, as an owner does (a sweep of a test running beside this one
 * must not take it for a leftover meanwhile). */
static int table_file(const char *path, unsigned word, uint64_t value,
                      bool locked)
{
    const size_t len = (FERRY__PULSE_HEADER + FERRY__PULSE_SLOTS) * 8;
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL, S_IRUSR | S_IWUSR);

    ck_assert_int_ge(fd, 0);
    if (locked)
        ck_assert_int_eq(flock(fd, LOCK_SH), 0);
    ck_assert_int_eq(ftruncate(fd, (off_t)len), 0);
    ck_assert_int_eq(pwrite(fd, &value, sizeof(value), word * sizeof(value)),
                     (ssize_t)sizeof(value));
    return fd;
}

/*
 * Files anyone can put in /dev/shm at the names a peer's incarnation
 * gives: a FIFO at its table's name (opening it waited for a writer for
 * ever, in every context's sweep of leftovers and in ferry_peer_add), and
 * a regular file at its bell's name beside a real table (a ring would
 * have written into it).  The context is made, the peer added, and
 * neither file taken.
 */
START_TEST(test_planted_pulse_files)
{
    uint64_t inc = 0x5eed000000000000u | (uint64_t)getpid();
    uint8_t name[FERRY__ADDR_MAX], blob[1024], key[8] = {1};
    struct pulse_spec p = {.incarnation = inc, .addr = 0x1000, .key = key,
                           .klen = sizeof(key)};
    char table[64], bell[64];
    ferry_peer_t *fifo_peer = NULL, *file_peer = NULL;
    ferry_context_t *ctx;
    size_t nlen, len;
    int fd;

    pulse_paths(inc, table, bell, sizeof(table));
    ck_assert_int_eq(mkfifo(table, S_IRUSR | S_IWUSR), 0);
    ctx = tu_context(TCP);
    nlen = rail_name(ctx, 0, name, sizeof(name));
    len = build_blob(blob, sizeof(blob), TCP, 1, 1, FI_SOCKADDR_IN, name,
                     nlen, &p, 0);
    ck_assert_msg(add_copy(ctx, blob, len, &fifo_peer) == 0, "%s",
                  ferry_last_error());
    ck_assert_ptr_null(fifo_peer->pulse.local);
    ck_assert_int_eq(unlink(table), 0);

    close(table_file(table, FERRY__PULSE_INCARNATION, inc, false));
    fd = open(bell, O_RDWR | O_CREAT | O_EXCL, S_IRUSR | S_IWUSR);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_msg(add_copy(ctx, blob, len, &file_peer) == 0, "%s",
                  ferry_last_error());
    ck_assert_ptr_nonnull(file_peer->pulse.local);
    ck_assert_msg(!file_peer->pulse.has_bell,
                  "a regular file at the bell's name was taken as its bell");
    pulse_paths(inc, table, bell, sizeof(table));
    ferry_context_close(ctx);
}
END_TEST

/* A table at the names of inc whose owner word is pid, locked or not,
 * and its bell; the table's descriptor. */
static int fake_table(uint64_t inc, pid_t pid, bool locked, char *table,
                      char *bell, size_t len)
{
    int fd;

    pulse_paths(inc, table, bell, len);
    fd = table_file(table, FERRY__PULSE_OWNER, (uint64_t)pid, locked);
    ck_assert_int_eq(mkfifo(bell, S_IRUSR | S_IWUSR), 0);
    return fd;
}

/*
 * A new context sweeps the tables (and bells) that processes killed
 * before closing their contexts left in /dev/shm: their owner word names
 * a process that is gone.  A process of another pid namespace sharing
 * /dev/shm has a number that names none here either, but it lives, and
 * holds its table's lock: its table and bell stay.
 */
START_TEST(test_sweep_spares_locked_tables)
{
    uint64_t inc = 0x5eef000000000000u | ((uint64_t)getpid() << 8);
    char live[64], live_bell[64], left[64], left_bell[64];
    pid_t gone = fork();
    ferry_context_t *ctx;
    int live_fd;

    ck_assert_int_ge(gone, 0);
    if (gone == 0)
        _exit(0);
    ck_assert_int_eq(waitpid(gone, NULL, 0), gone);
    live_fd = fake_table(inc, gone, true, live, live_bell, sizeof(live));
    close(fake_table(inc + 1, gone, false, left, left_bell, sizeof(left)));
    ctx = tu_context(TCP);
    ck_assert_msg(access(live, F_OK) == 0 && access(live_bell, F_OK) == 0,
                  "the sweep removed a table its owner holds locked");
    ck_assert_msg(access(left, F_OK) != 0 && access(left_bell, F_OK) != 0,
                  "the sweep left a dead owner's table or bell");
    close(live_fd);
    pulse_paths(inc, live, live_bell, sizeof(live));
    ferry_context_close(ctx);
}
END_TEST

/* What a context's heartbeat word holds. */
static uint64_t incarnation_of(const struct ferry__fabric *fab)
{
    return atomic_load(&fab->pulse.words[FERRY__PULSE_INCARNATION]);
}

/* A real context's blob carries its word: what its peers read is the
 * incarnation, at the address and key the blob names. */
START_TEST(test_context_blob_pulse)
{
    ferry_context_t *a = tu_context(TCP), *b = tu_context(TCP);
    const struct ferry__fabric *fb = ferry__fabric_of(b);
    ferry_peer_t *peer = NULL;
    uint8_t blob[1024];
    size_t len = address_of(b, blob, sizeof(blob));

    ck_assert_uint_eq(fb->transports[0].pulse.key_len, 8);
    ck_assert_int_eq(ferry_peer_add(a, blob, len, &peer), 0);
    ck_assert(peer->pulse.present);
    ck_assert_uint_eq(peer->pulse.incarnation, incarnation_of(fb));
    ck_assert_uint_eq(peer->pulse.key,
                      ferry__key_to_u64(fb->transports[0].pulse.key, fb->transports[0].pulse.key_len));
    ck_assert_uint_eq(peer->pulse.addr,
                      fb->mr_mode & FERRY_MR_VIRT_ADDR
                          ? (uint64_t)(uintptr_t)fb->pulse.words
                          : 0);
    /* Two contexts, two incarnations. */
    ck_assert_uint_ne(incarnation_of(ferry__fabric_of(a)), incarnation_of(fb));
    ferry_context_close(a);
    ferry_context_close(b);
}
END_TEST

/*
 * Watches b through a blob with b's address and word but another
 * incarnation (what a process that restarted at the same address looks
 * like), or the true one: the first is declared gone by its heartbeat's
 * answer, the second stays UP.  _i: whether the incarnation is b's.
 */
START_TEST(test_pulse_incarnation)
{
    struct ferry_config cfg;
    ferry_context_t *a, *b;
    const struct ferry__fabric *fb;
    ferry_peer_t *peer = NULL;
    uint8_t name[FERRY__ADDR_MAX], blob[1024];
    enum ferry_peer_state st = FERRY_PEER_CONNECTING;
    char why[256] = "";
    struct pulse_spec p;
    size_t nlen, len;
    uint64_t t0;

    tu_config(&cfg, TCP);
    cfg.liveness_ms = 400;
    a = tu_context_cfg(&cfg);
    cfg.progress_thread = 1;
    b = tu_context_cfg(&cfg);
    fb = ferry__fabric_of(b);
    nlen = rail_name(b, 0, name, sizeof(name));
    p = (struct pulse_spec){
        .incarnation = incarnation_of(fb) + (_i == 0),
        .addr = fb->mr_mode & FERRY_MR_VIRT_ADDR
                    ? (uint64_t)(uintptr_t)fb->pulse.words
                    : 0,
        .klen = fb->transports[0].pulse.key_len,
        .key = fb->transports[0].pulse.key,
    };
    len = build_blob(blob, sizeof(blob), TCP, 1, 1, FI_SOCKADDR_IN, name,
                     nlen, &p, 0);
    ck_assert_msg(ferry_peer_add(a, blob, len, &peer) == 0, "%s",
                  ferry_last_error());
    ck_assert_int_eq(ferry_peer_watch(peer, 1), 0);
    /* Heartbeats start after a quarter of the liveness of silence. */
    t0 = tu_now_ns();
    while (tu_ms_since(t0) < 1500 && st != FERRY_PEER_DEAD &&
           st != FERRY_PEER_UNREACHABLE) {
        ck_assert_int_ge(ferry_progress(a), 0);
        ck_assert_int_eq(ferry_peer_state(peer, &st, why, sizeof(why)), 0);
        usleep(1000);
    }
    if (_i == 0) {
        /* UNREACHABLE here: the one it was added as never answered. */
        ck_assert_msg(st == FERRY_PEER_UNREACHABLE,
                      "a peer answering with another incarnation is %d "
                      "(\"%s\") after 1500 ms, expected UNREACHABLE",
                      (int)st, why);
        ck_assert_msg(strstr(why, "another process answers at its address") &&
                          strstr(why, "ferry_peer_add"),
                      "the sentence does not say it restarted: \"%s\"", why);
    } else {
        ck_assert_msg(st == FERRY_PEER_UP,
                      "a peer answering its heartbeats is %d (\"%s\") "
                      "after 1500 ms, expected UP",
                      (int)st, why);
        ck_assert_uint_gt(ferry__xfer_of(a)->live.heartbeats, 0);
    }
    ck_assert_int_eq(ferry_peer_watch(peer, 0), 0);
    ferry_context_close(a);
    ferry_context_close(b);
}
END_TEST

/*
 * Notifications to a thousand addresses nobody listens on end with
 * FERRY_EPEERDEAD once the liveness has passed, not at their deadline
 * (60 s here), and a live peer's notification beside them is not held
 * up.
 */
#define NOBODY 1000

/*
 * The first port of the kernel's ephemeral range.  The ports used as
 * addresses nobody listens on lie below it: rxm's own connecting
 * sockets take ephemeral ports, and a connect to the port a socket was
 * just given connects that socket to itself (TCP simultaneous open), so
 * a notification "to nobody" once came back as delivered.
 */
static unsigned ephemeral_low(void)
{
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    unsigned low = 32768;

    if (f != NULL) {
        if (fscanf(f, "%u", &low) != 1)
            low = 32768;
        fclose(f);
    }
    return low;
}

/* A loopback port nothing listens on now: one this process could bind. */
static bool port_free(uint16_t port)
{
    struct sockaddr_in sin = {.sin_family = AF_INET,
                              .sin_port = htons(port),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    bool ok = fd >= 0 && bind(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0;

    if (fd >= 0)
        close(fd);
    return ok;
}

START_TEST(test_many_unreachable)
{
    static ferry_peer_t *peers[NOBODY];
    static ferry_req_t *reqs[NOBODY];
    static const struct pulse_spec none;
    struct ferry_config cfg;
    ferry_context_t *ctx;
    ferry_context_t *live;
    ferry_peer_t *live_peer;
    ferry_req_t *live_req = NULL;
    struct sockaddr_in sin;
    uint8_t blob[1024];
    size_t len;
    unsigned low = ephemeral_low();
    uint16_t port;
    struct ferry_stats st = FERRY_STATS_INIT;
    uint64_t t0, t_live, worst = 0;
    unsigned ended = 0;

    tu_config(&cfg, TCP);
    cfg.timeout_ms = 60000;
    ck_assert_uint_eq(cfg.liveness_ms, 2000);
    ctx = tu_context_cfg(&cfg);
    cfg.progress_thread = 1;
    live = tu_context_cfg(&cfg);
    len = address_of(live, blob, sizeof(blob));
    ck_assert_int_eq(ferry_peer_add(ctx, blob, len, &live_peer), 0);
    ck_assert_uint_eq(rail_name(ctx, 0, (uint8_t *)&sin, sizeof(sin)),
                      sizeof(sin));
    ck_assert_msg(low > NOBODY + 2000, "ephemeral ports start at %u: no "
                  "room below them for %u unused ports", low, NOBODY);
    port = (uint16_t)(low - NOBODY - 1000);
    for (unsigned i = 0; i < NOBODY; i++) {
        while (!port_free(port))
            port++;
        ck_assert_uint_lt(port, low);
        sin.sin_port = htons(port++);
        len = build_blob(blob, sizeof(blob), TCP, 1, 1, FI_SOCKADDR_IN, &sin,
                         sizeof(sin), &none, 0);
        ck_assert_msg(ferry_peer_add(ctx, blob, len, &peers[i]) == 0, "%s",
                      ferry_last_error());
    }
    t0 = tu_now_ns();
    for (unsigned i = 0; i < NOBODY; i++)
        ck_assert_msg(ferry_notify_send(peers[i], 7, i, NULL, &reqs[i]) == 0,
                      "notification %u: %s", i, ferry_last_error());
    /* A live peer's notification beside them goes at once, long before
     * they are declared. */
    t_live = tu_now_ns();
    ck_assert_int_eq(ferry_notify_send(live_peer, 8, 1, NULL, &live_req), 0);
    ck_assert_int_eq(ferry_req_wait(live_req, 5000), 0);
    printf("peer: a live peer's notification beside them took %llu ms\n",
           (unsigned long long)tu_ms_since(t_live));
    ck_assert_int_eq(ferry_context_stats(ctx, &st), 0);
    ck_assert_msg(st.peers_declared == 0,
                  "%llu peers were declared before the live peer's "
                  "notification ended: it waited for the declarations",
                  (unsigned long long)st.peers_declared);
    ferry_req_close(live_req);
    while (ended < NOBODY && tu_ms_since(t0) < 10000) {
        ck_assert_int_ge(ferry_progress(ctx), 0);
        for (unsigned i = 0; i < NOBODY; i++) {
            int ret;

            if (reqs[i] == NULL ||
                (ret = ferry_req_test(reqs[i])) == FERRY_EINPROGRESS)
                continue;
            ck_assert_msg(ret == FERRY_EPEERDEAD,
                          "notification %u ended with %s (%s), expected "
                          "FERRY_EPEERDEAD",
                          i, ferry_strerror(ret), ferry_last_error());
            ferry_req_close(reqs[i]);
            reqs[i] = NULL;
            worst = tu_ms_since(t0);
            ended++;
        }
    }
    printf("peer: %u notifications to addresses nobody listens on: %u ended "
           "FERRY_EPEERDEAD, the last %llu ms after posting (liveness 2000 "
           "ms, deadline 60 s)\n",
           NOBODY, ended, (unsigned long long)worst);
    ck_assert_msg(ended == NOBODY,
                  "%u of %u notifications still running after 10 s",
                  NOBODY - ended, NOBODY);
    ck_assert_int_eq(ferry_counter_wait(live, 8, 1, 5000), 0);
    ferry_context_close(ctx);
    ferry_context_close(live);
}
END_TEST

/*
 * A peer removed while only a heartbeat to it is out (its target does not
 * progress, so the read waits): the call succeeds, the handle leaves the
 * caller at once, and its memory goes when the read comes back, or with
 * the context.  _i: 0 the read comes back first, 1 the context goes
 * first.  (AddressSanitizer runs watch for a use after free or a leak.)
 */
START_TEST(test_remove_with_heartbeat_out)
{
    struct ferry_config cfg;
    ferry_context_t *a, *b;
    ferry_peer_t *peer = NULL;
    uint8_t blob[1024];
    size_t len;
    uint64_t t0;

    tu_config(&cfg, TCP);
    cfg.liveness_ms = 400;
    a = tu_context_cfg(&cfg);
    b = tu_context_cfg(&cfg);
    len = address_of(b, blob, sizeof(blob));
    ck_assert_int_eq(ferry_peer_add(a, blob, len, &peer), 0);
    ck_assert_int_eq(ferry_peer_watch(peer, 1), 0);
    /* Both progress until a heartbeat was answered (the connection is
     * made); then b stops, and the next heartbeat stays out. */
    t0 = tu_now_ns();
    while (peer->live.state != FERRY_PEER_UP && tu_ms_since(t0) < 5000) {
        ck_assert_int_ge(ferry_progress(b), 0);
        ck_assert_int_ge(ferry_progress(a), 0);
    }
    ck_assert_int_eq(peer->live.state, FERRY_PEER_UP);
    t0 = tu_now_ns();
    while (!peer->live.ping_out && tu_ms_since(t0) < 2000) {
        ck_assert_int_ge(ferry_progress(a), 0);
        usleep(1000);
    }
    ck_assert_msg(peer->live.ping_out, "no heartbeat went in 2 s");
    ck_assert_int_eq(ferry_peer_watch(peer, 0), 0);
    ck_assert_int_eq(ferry_peer_close(peer), 0);
    /* Gone for the caller; kept until the read comes back. */
    peer_count_is(a, 1);
    ck_assert_int_eq(ferry_peer_state(peer, NULL, NULL, 0), FERRY_EHANDLE);
    if (_i == 0) {
        t0 = tu_now_ns();
        while (ferry__reg_of(a)->peers != NULL && tu_ms_since(t0) < 5000) {
            ck_assert_int_ge(ferry_progress(b), 0);
            ck_assert_int_ge(ferry_progress(a), 0);
        }
        peer_count_is(a, 0);
    }
    ferry_context_close(a);
    ferry_context_close(b);
}
END_TEST

static Suite *peer_suite(void)
{
    Suite *s = suite_create("peer");
    TCase *tc = tcase_create("add");

    tcase_add_test(tc, test_add_null_args);
    tcase_add_test(tc, test_add_wrong_handle);
    tcase_add_loop_test(tc, test_add_fills_every_rail, 0, (int)tu_nproviders);
    suite_add_tcase(s, tc);

    tc = tcase_create("damaged");
    tcase_add_loop_test(tc, test_add_every_truncation, 0, (int)tu_nproviders);
    tcase_add_loop_test(tc, test_add_every_corrupted_byte, 0,
                        (int)tu_nproviders);
    tcase_add_loop_test(tc, test_add_trailing_garbage, 0, (int)tu_nproviders);
    tcase_add_loop_test(tc, test_add_other_provider, 0, 2);
    suite_add_tcase(s, tc);

    tc = tcase_create("hosts");
    tcase_add_test(tc, test_other_host_loopback_refused);
    tcase_add_test(tc, test_other_host_on_shm_refused);
    suite_add_tcase(s, tc);
    tc = tcase_create("built");
    tcase_add_test(tc, test_built_blob_accepted);
    tcase_add_test(tc, test_built_blob_host_name_printable);
    tcase_add_test(tc, test_built_blob_rail_counts);
    tcase_add_test(tc, test_built_blob_address_lengths);
    tcase_add_test(tc, test_built_blob_string_without_nul);
    tcase_add_test(tc, test_built_blob_long_provider_name);
    tcase_add_test(tc, test_built_blob_address_family);
    tcase_add_test(tc, test_multi_rail_peers);
    suite_add_tcase(s, tc);

    tc = tcase_create("lifetime");
    tcase_add_loop_test(tc, test_remove_while_rmem_held, 0,
                        (int)tu_nproviders);
    tcase_add_test(tc, test_remove_keeps_the_others);
    tcase_add_loop_test(tc, test_peers_closed_with_context, 0,
                        (int)tu_nproviders);
    suite_add_tcase(s, tc);

    tc = tcase_create("pulse");
    tcase_add_test(tc, test_built_blob_pulse);
    tcase_add_test(tc, test_context_blob_pulse);
    tcase_add_test(tc, test_planted_pulse_files);
    tcase_add_test(tc, test_sweep_spares_locked_tables);
    tcase_add_loop_test(tc, test_pulse_incarnation, 0, 2);
    tcase_add_loop_test(tc, test_remove_with_heartbeat_out, 0, 2);
    suite_add_tcase(s, tc);

    tc = tu_tcase(s, "unreachable", 60);
    tcase_add_test(tc, test_many_unreachable);

    tc = tcase_create("shm_loop");
    tcase_add_test(tc, test_shm_loop_rule);
    tcase_add_test(tc, test_shm_loop_keeps_held);
    tcase_add_test(tc, test_shm_closed_context_refused);
    tcase_add_test(tc, test_shm_closed_writer_kept_for_its_target);
    tcase_add_loop_test(tc, test_shm_both_ways_refused, 0, (int)tu_nproviders);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(peer_suite());
}
