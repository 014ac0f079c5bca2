/*
 * context module from inside: the config the context keeps (an older
 * caller's struct, copied names, the defaults), the info struct against
 * the context and libfabric, the operation slots and key space of forced
 * limits, the address blob's bytes, and multi-rail selection.  (The config
 * and its refusals, the info struct's versioning, the address size
 * protocol's refusals and handle checks: test/api/check_context.c.)
 */
#include "testutil.h"

#include "progress/part.h"
#include "xfer/op.h"
#include "base/blob.h"
#include "base/host.h"
#include "fabric/route.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TCP tu_tcp()

/* ---- create ------------------------------------------------------------ */

START_TEST(test_create_older_smaller_config)
{
    struct ferry_config cfg;
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;
    ferry_context_t *ctx = NULL;

    /* A caller built against an older, shorter struct: what lies past its
     * size is not read, so the garbage there is ignored. */
    tu_config(&cfg, TCP);
    cfg.size = offsetof(struct ferry_config, local_only);
    cfg.mr_mode_offer = 0xffffu;
    cfg.timeout_ms = -7;
    ck_assert_msg(ferry_context_create(&cfg, &ctx) == 0, "%s",
                  ferry_last_error());
    ck_assert_int_eq(ferry_context_info(ctx, &info), 0);
    ck_assert_str_eq(info.provider, TCP);
    ck_assert_str_eq(info.domain, "lo");
    ck_assert_int_eq(ferry__fabric_of(ctx)->cfg.timeout_ms, 60000);
    ck_assert_uint_eq(ferry__fabric_of(ctx)->cfg.size, sizeof(struct ferry_config));
    ferry_context_close(ctx);
}
END_TEST

START_TEST(test_create_copies_names)
{
    struct ferry_config cfg;
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;
    ferry_context_t *ctx = NULL;
    char prov[16], dom[8];

    /* The context keeps its own copies: the caller's strings may go. */
    strcpy(prov, TCP);
    strcpy(dom, "lo");
    tu_config(&cfg, TCP);
    cfg.provider = prov;
    cfg.domain = dom;
    ck_assert_int_eq(ferry_context_create(&cfg, &ctx), 0);
    memset(prov, 0, sizeof(prov));
    memset(dom, 0, sizeof(dom));
    ck_assert_str_eq(ferry__fabric_of(ctx)->cfg.provider, TCP);
    ck_assert_str_eq(ferry__fabric_of(ctx)->cfg.domain, "lo");
    ck_assert_ptr_ne(ferry__fabric_of(ctx)->cfg.provider, prov);
    ck_assert_int_eq(ferry_context_info(ctx, &info), 0);
    ck_assert_str_eq(info.domain, "lo");
    ferry_context_close(ctx);
}
END_TEST

/* Deadlines: 0 the default, < 0 none (ferry(7), "Timeouts"), as the
 * layers below read them; a request posted with no deadline has none. */
START_TEST(test_create_deadline_rule)
{
    static const struct {
        int given, metadata_given;
        int kept, metadata_kept;
    } cases[] = {
        {0, 0, 60000, 5000},
        {-1, -1, -1, INT_MAX},
        {250, 1500, 250, 1500},
    };
    struct ferry_config cfg;
    ferry_context_t *ctx = NULL;

    for (size_t i = 0; i < TU_ARRAY_LEN(cases); i++) {
        tu_config(&cfg, TCP);
        cfg.timeout_ms = cases[i].given;
        cfg.metadata_timeout_ms = cases[i].metadata_given;
        ck_assert_int_eq(ferry_context_create(&cfg, &ctx), 0);
        ck_assert_int_eq(ferry__fabric_of(ctx)->cfg.timeout_ms,
                         cases[i].kept);
        ck_assert_int_eq(ferry__fabric_of(ctx)->cfg.metadata_timeout_ms,
                         cases[i].metadata_kept);
        ferry_context_close(ctx);
    }
}
END_TEST

START_TEST(test_create_null_cfg_uses_defaults)
{
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;
    ferry_context_t *ctx = NULL;
    int ret;

    tu_clear_ferry_env();
    /* Ferry's defaults, not a narrowing from the user's environment
     * (libfabric reads it on first use, which is in this process). */
    unsetenv("FI_PROVIDER");
    ret = ferry_context_create(NULL, &ctx);
    ck_assert_msg(ret == 0, "create(NULL): %s", ferry_last_error());
    ck_assert_ptr_nonnull(ctx);
    ck_assert_int_eq(ferry_context_info(ctx, &info), 0);
    ck_assert_ptr_nonnull(info.provider);
    /* No provider named: shared memory stands beside the network one for
     * the peers of this host (fabric/local.c), with its two endpoints. */
    ck_assert_ptr_nonnull(info.local_provider);
    ck_assert_str_eq(info.local_provider, "shm");
    ck_assert_uint_eq(info.nrails, 3);
    ck_assert_ptr_nonnull(strstr(info.local_why, "peers on this host use shm"));
    ck_assert_ptr_nonnull(strstr(info.why, info.local_why));
    ck_assert_int_eq(ferry__fabric_of(ctx)->cfg.timeout_ms, 60000);
    ck_assert_uint_eq(ferry__fabric_of(ctx)->cfg.max_rails, 1);
    ck_assert_uint_eq(ferry__fabric_of(ctx)->cfg.mr_mode_offer, FERRY_MR_ALL);
    /* local_only is off by default, so shared memory is not chosen. */
    ck_assert_str_ne(info.provider, "shm");
    ferry_context_close(ctx);
}
END_TEST

/* ---- info -------------------------------------------------------------- */

START_TEST(test_info_tcp_values)
{
    ferry_context_t *ctx = tu_context(TCP);
    struct ferry_context_info info;
    char chose[64];

    memset(&info, 0xa5, sizeof(info));
    info.size = sizeof(info);
    ck_assert_int_eq(ferry_context_info(ctx, &info), 0);
    ck_assert_uint_eq(info.size, sizeof(info));
    ck_assert_str_eq(info.provider, TCP);
    ck_assert_ptr_nonnull(info.fabric);
    ck_assert_str_eq(info.domain, "lo");
    ck_assert_uint_eq(info.nrails, 1);
    /* tcp;ofi_rxm on 1.17 asks for no mr_mode bit at all, and none is
     * forced here. */
    ck_assert_uint_eq(info.mr_mode, 0);
    ck_assert_uint_eq(info.mr_key_size, 8);
    ck_assert_uint_gt(info.max_msg_size, 0);
    ck_assert_uint_gt(info.tx_depth, 0);
    ck_assert_uint_gt(info.rx_depth, 0);
    ck_assert_int_eq(info.hmem, 0);
    ck_assert_uint_ge(info.fi_version, FI_VERSION(1, 17));
    ck_assert_uint_eq(info.fi_version, fi_version());
    snprintf(chose, sizeof(chose), "chose %s on domain lo", TCP);
    ck_assert_msg(strstr(info.why, chose) != NULL, "\"%s\" lacks \"%s\"",
                  info.why, chose);
    ferry_context_close(ctx);
}
END_TEST

START_TEST(test_info_every_provider)
{
    const char *prov = tu_providers[_i];
    ferry_context_t *ctx = tu_context(prov);
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;

    ck_assert_int_eq(ferry_context_info(ctx, &info), 0);
    ck_assert_str_eq(info.provider, prov);
    /* shm opens two endpoints on its one domain (fabric.c says why). */
    ck_assert_uint_eq(info.nrails, strcmp(prov, "shm") == 0 ? 2 : 1);
    ck_assert_uint_eq(info.nrails, ferry__fabric_of(ctx)->nrails);
    ck_assert_uint_eq(info.mr_mode, ferry__fabric_of(ctx)->mr_mode);
    ck_assert_uint_ge(info.mr_key_size, 1);
    ck_assert_uint_le(info.mr_key_size, 8); /* no FI_MR_RAW here */
    /* Operations of 1 MiB by default: both providers take larger ones. */
    ck_assert_uint_gt(ferry__fabric_of(ctx)->rails[0].info->ep_attr->max_msg_size, MiB);
    ck_assert_uint_eq(info.max_msg_size, MiB);
    ck_assert_uint_gt(info.tx_depth, 0);
    ck_assert_ptr_eq(info.why, ferry__fabric_of(ctx)->why);
    /* Both have 8 bytes of remote CQ data: 32 bits each for id and value. */
    ck_assert_uint_eq(ferry__fabric_of(ctx)->rails[0].info->domain_attr->cq_data_size, 8);
    ck_assert_uint_eq(info.notify_in_write_bits, 32);
    ferry_context_close(ctx);
}
END_TEST

/* The largest operation of a context on prov with config.max_msg_size
 * cap, and the provider's own largest. */
static size_t max_op_with(const char *prov, size_t cap, size_t *provider_max)
{
    struct ferry_config cfg;
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;
    ferry_context_t *ctx = NULL;

    tu_config(&cfg, prov);
    cfg.max_msg_size = cap;
    ck_assert_msg(ferry_context_create(&cfg, &ctx) == 0, "%s",
                  ferry_last_error());
    *provider_max = ferry__fabric_of(ctx)->rails[0].info->ep_attr->max_msg_size;
    ck_assert_int_eq(ferry_context_info(ctx, &info), 0);
    ferry_context_close(ctx);
    return info.max_msg_size;
}

/* A cap above the default is the user's to choose, up to the provider's. */
START_TEST(test_info_larger_operations)
{
    const char *prov = tu_providers[_i];
    size_t provider_max;

    ck_assert_uint_eq(max_op_with(prov, SIZE_MAX, &provider_max),
                      provider_max);
    ck_assert_uint_eq(max_op_with(prov, 8 * MiB, &provider_max),
                      provider_max < 8 * MiB ? provider_max : 8 * MiB);
}
END_TEST

/*
 * Device memory registered with shm goes in operations as large as the
 * provider and the cap allow (a cudaMemcpy each, through CUDA IPC);
 * every other transport keeps the context's largest operation.
 */
START_TEST(test_device_operations_on_shm)
{
    const char *prov = tu_providers[_i];
    bool shm = strcmp(prov, "shm") == 0;
    const size_t caps[] = {0, 8 * MiB, 4096};

    for (size_t c = 0; c < TU_ARRAY_LEN(caps); c++) {
        struct ferry_config cfg;
        ferry_context_t *ctx = NULL;
        const struct ferry__fabric *fab;
        size_t provider_max, want;

        tu_config(&cfg, prov);
        cfg.max_msg_size = caps[c];
        ck_assert_msg(ferry_context_create(&cfg, &ctx) == 0, "%s",
                      ferry_last_error());
        fab = ferry__fabric_of(ctx);
        provider_max = fab->rails[0].info->ep_attr->max_msg_size;
        want = !shm ? fab->max_msg
               : caps[c] != 0 && caps[c] < provider_max ? caps[c]
                                                        : provider_max;
        ck_assert_uint_eq(fab->ntransports, 1);
        ck_assert_msg(fab->transports[0].device_max_op == want,
                      "%s, cap %zu: device operations of %zu bytes, not %zu",
                      prov, caps[c], fab->transports[0].device_max_op, want);
        ferry_context_close(ctx);
    }
}
END_TEST

START_TEST(test_info_forced_limits)
{
    const char *prov = tu_providers[_i];
    struct ferry_config cfg;
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;
    ferry_context_t *ctx = NULL;
    size_t slots = 0;

    tu_config(&cfg, prov);
    cfg.max_msg_size = 4096;
    cfg.tx_depth = 2;
    cfg.mr_key_size = 2;
    cfg.mr_mode_force = FERRY_MR_LOCAL;
    ck_assert_msg(ferry_context_create(&cfg, &ctx) == 0, "%s",
                  ferry_last_error());
    ck_assert_int_eq(ferry_context_info(ctx, &info), 0);
    ck_assert_uint_eq(info.max_msg_size, 4096);
    ck_assert_uint_eq(info.tx_depth, 2);
    ck_assert_uint_eq(info.mr_key_size, 2);
    ck_assert(info.mr_mode & FERRY_MR_LOCAL);
    /* The rail really has only two operation slots for the data, and
     * FERRY__CONTROL_OPS for ferry's own. */
    for (struct ferry__op *op = ferry__xfer_of(ctx)->req.tx[0].free_ops; op;
         op = op->next_free)
        slots++;
    ck_assert_uint_eq(slots, 2 + FERRY__CONTROL_OPS);
    /* Keys wrap at two bytes. */
    ck_assert_uint_eq(
        ferry__keyalloc_space(&ferry__fabric_of(ctx)->rails[0].keys), 0xffff);
    ferry_context_close(ctx);
}
END_TEST

/* ---- address ----------------------------------------------------------- */

START_TEST(test_address_size_protocol)
{
    const char *prov = tu_providers[_i];
    ferry_context_t *ctx = tu_context(prov);
    struct ferry__blob_reader r;
    uint8_t buf[1024], again[1024];
    size_t need = 12345, len;
    char phrase[64];

    /* NULL buffer: ENOSPC and the size needed, whatever *len said. */
    TU_EXPECT_ERROR(ferry_context_address(ctx, NULL, &need), FERRY_ENOSPC,
                    "pass a buffer of at least");
    ck_assert_uint_gt(need, FERRY__BLOB_HEADER_LEN);
    ck_assert_uint_lt(need, sizeof(buf) - 64);
    snprintf(phrase, sizeof(phrase), "needs %zu bytes", need);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), phrase));

    /* Every capacity short of it: refused, nothing written past it. */
    for (size_t cap = 0; cap < need; cap++) {
        memset(buf, 0xa5, sizeof(buf));
        len = cap;
        ck_assert_int_eq(ferry_context_address(ctx, buf, &len), FERRY_ENOSPC);
        ck_assert_uint_eq(len, need);
        for (size_t i = cap; i < sizeof(buf); i++)
            ck_assert_msg(buf[i] == 0xa5,
                          "capacity %zu: byte %zu was written", cap, i);
    }

    /* Room enough: exactly `need` bytes, a valid address blob. */
    memset(buf, 0xa5, sizeof(buf));
    len = sizeof(buf);
    ck_assert_int_eq(ferry_context_address(ctx, buf, &len), 0);
    ck_assert_str_eq(ferry_last_error(), "");
    ck_assert_uint_eq(len, need);
    for (size_t i = need; i < sizeof(buf); i++)
        ck_assert_uint_eq(buf[i], 0xa5);
    ck_assert_int_eq(ferry__blob_open(&r, buf, len, FERRY__BLOB_ADDR, "addr"),
                     0);
    /* Exactly `need` is enough, and the blob does not change. */
    len = need;
    ck_assert_int_eq(ferry_context_address(ctx, again, &len), 0);
    ck_assert_uint_eq(len, need);
    ck_assert_mem_eq(buf, again, need);
    ferry_context_close(ctx);
}
END_TEST

START_TEST(test_address_names_provider)
{
    const char *prov = tu_providers[_i];
    ferry_context_t *ctx = tu_context(prov);
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;
    struct ferry__blob_reader r;
    uint8_t buf[512];
    size_t len = sizeof(buf);
    char name[FERRY__NAME_MAX];

    ck_assert_int_eq(ferry_context_info(ctx, &info), 0);
    ck_assert_int_eq(ferry_context_address(ctx, buf, &len), 0);
    ck_assert_int_eq(ferry__blob_open(&r, buf, len, FERRY__BLOB_ADDR, "addr"),
                     0);
    /* The host's fields come first (base/host.h), then the provider. */
    ferry__blob_get_str(&r, name, sizeof(name));
    ck_assert_str_eq(name, ferry__host_self()->name);
    ck_assert(ferry__blob_get_u64(&r) == ferry__host_self()->shm_key);
    ck_assert(ferry__blob_get_u64(&r) == ferry__host_self()->net_key);
    /* A named provider serves every peer: one transport (local.c). */
    ck_assert_uint_eq(ferry__blob_get_u16(&r), 1);
    ferry__blob_get_str(&r, name, sizeof(name));
    ck_assert_str_eq(name, prov);
    ck_assert_uint_eq(ferry__blob_get_u16(&r), info.nrails);
    ck_assert_uint_eq(ferry__blob_get_u32(&r), ferry__fabric_of(ctx)->rails[0].info->addr_format);
    ck_assert(!r.bad);
    ferry_context_close(ctx);
}
END_TEST

/* ---- rails ------------------------------------------------------------- */

START_TEST(test_two_rails_when_two_domains)
{
    struct ferry_config cfg;
    struct ferry__selection sel;
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;
    ferry_context_t *ctx = NULL;
    size_t domains = 0;

    tu_config(&cfg, TCP);
    cfg.domain = NULL;
    ck_assert_int_eq(ferry__provider_select(&cfg, &sel), 0);
    /* Rails are distinct domains of the first candidate's address family
     * (libfabric lists a domain once per family). */
    for (size_t i = 0; i < sel.ncand; i++) {
        const struct fi_info *c = sel.cand[i].info;
        bool seen = false;

        for (size_t k = 0; k < i && !seen; k++)
            seen = strcmp(sel.cand[k].info->domain_attr->name,
                          c->domain_attr->name) == 0 &&
                   sel.cand[k].info->addr_format == c->addr_format;
        if (!seen && strcmp(c->fabric_attr->prov_name, TCP) == 0 &&
            c->addr_format == sel.cand[0].info->addr_format)
            domains++;
    }
    ferry__selection_free(&sel);

    cfg.max_rails = 2;
    ck_assert_msg(ferry_context_create(&cfg, &ctx) == 0, "%s",
                  ferry_last_error());
    ck_assert_int_eq(ferry_context_info(ctx, &info), 0);
    ck_assert_uint_eq(info.nrails, ferry__fabric_of(ctx)->nrails);
    if (domains < 2) {
        /* Only one tcp domain on this host: one rail is all there is. */
        fprintf(stderr, "note: one tcp;ofi_rxm domain here, two-rail "
                        "assertion skipped\n");
        ck_assert_uint_eq(info.nrails, 1);
    } else {
        ck_assert_uint_eq(info.nrails, 2);
        ck_assert_ptr_nonnull(ferry__fabric_of(ctx)->rails[1].ep);
        ck_assert_uint_eq(ferry__fabric_of(ctx)->rails[1].index, 1);
        /* Two different domains: never two rails on one NIC. */
        ck_assert_str_ne(ferry__fabric_of(ctx)->rails[0].info->domain_attr->name,
                         ferry__fabric_of(ctx)->rails[1].info->domain_attr->name);
        ck_assert_str_eq(ferry__fabric_of(ctx)->rails[1].info->fabric_attr->prov_name, TCP);
    }
    ferry_context_close(ctx);

    /* max_rails caps: asking for 8 never gives more than there are. */
    cfg.max_rails = 8;
    ck_assert_int_eq(ferry_context_create(&cfg, &ctx), 0);
    ck_assert_int_eq(ferry_context_info(ctx, &info), 0);
    ck_assert_uint_eq(info.nrails, domains < 8 ? domains : 8);
    ferry_context_close(ctx);
}
END_TEST

START_TEST(test_named_domain_one_rail)
{
    struct ferry_config cfg;
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;
    ferry_context_t *ctx = NULL;

    /* A named domain is one domain: max_rails cannot add others. */
    tu_config(&cfg, TCP);
    cfg.max_rails = 4;
    ck_assert_int_eq(ferry_context_create(&cfg, &ctx), 0);
    ck_assert_int_eq(ferry_context_info(ctx, &info), 0);
    for (unsigned i = 0; i < info.nrails; i++)
        ck_assert_str_eq(ferry__fabric_of(ctx)->rails[i].info->domain_attr->name, "lo");
    ferry_context_close(ctx);
}
END_TEST

/* A context for peers on other hosts (not local_only, no peer host)
 * takes the default route's interface and never a loopback rail: its
 * address would lead nowhere from another host (peers there refuse it). */
START_TEST(test_no_loopback_rail_for_other_hosts)
{
    struct ferry_config cfg;
    struct ferry__route route;
    struct ferry__fabric *fab;
    ferry_context_t *ctx = NULL;

    if (!ferry__route_default(&route)) {
        fprintf(stderr, "note: no default route here: nothing to check\n");
        return;
    }
    tu_config(&cfg, TCP);
    cfg.domain = NULL;
    cfg.local_only = 0;
    cfg.max_rails = 2;
    ck_assert_msg(ferry_context_create(&cfg, &ctx) == 0, "%s",
                  ferry_last_error());
    fab = ferry__fabric_of(ctx);
    ck_assert_str_eq(fab->rails[0].info->domain_attr->name, route.ifname);
    for (unsigned i = 0; i < fab->nrails; i++)
        ck_assert_msg(!ferry__addr_is_loopback(fab->rails[i].info->addr_format,
                                               fab->rails[i].info->src_addr,
                                               fab->rails[i].info->src_addrlen,
                                               NULL, 0),
                      "rail %u is on loopback (%s)", i,
                      fab->rails[i].info->domain_attr->name);
    ck_assert_ptr_nonnull(strstr(fab->why, "the default route"));
    ferry_context_close(ctx);
}
END_TEST

static Suite *context_suite(void)
{
    Suite *s = suite_create("context");
    TCase *tc = tcase_create("create");

    /* Every test starts from an environment without FERRY_* variables,
     * also when CK_FORK=no runs them all in one process. */
    tcase_add_checked_fixture(tc, tu_clear_ferry_env, tu_clear_ferry_env);
    tcase_add_test(tc, test_create_older_smaller_config);
    tcase_add_test(tc, test_create_copies_names);
    tcase_add_test(tc, test_create_deadline_rule);
    tcase_add_test(tc, test_create_null_cfg_uses_defaults);
    suite_add_tcase(s, tc);

    tc = tcase_create("info");
    tcase_add_checked_fixture(tc, tu_clear_ferry_env, tu_clear_ferry_env);
    tcase_add_test(tc, test_info_tcp_values);
    tcase_add_loop_test(tc, test_info_every_provider, 0, (int)tu_nproviders);
    tcase_add_loop_test(tc, test_info_larger_operations, 0, (int)tu_nproviders);
    tcase_add_loop_test(tc, test_device_operations_on_shm, 0,
                        (int)tu_nproviders);
    tcase_add_loop_test(tc, test_info_forced_limits, 0, (int)tu_nproviders);
    suite_add_tcase(s, tc);

    tc = tcase_create("address");
    tcase_add_checked_fixture(tc, tu_clear_ferry_env, tu_clear_ferry_env);
    tcase_add_loop_test(tc, test_address_size_protocol, 0, (int)tu_nproviders);
    tcase_add_loop_test(tc, test_address_names_provider, 0,
                        (int)tu_nproviders);
    suite_add_tcase(s, tc);

    tc = tcase_create("rails");
    tcase_add_checked_fixture(tc, tu_clear_ferry_env, tu_clear_ferry_env);
    tcase_add_test(tc, test_two_rails_when_two_domains);
    tcase_add_test(tc, test_no_loopback_rail_for_other_hosts);
    tcase_add_test(tc, test_named_domain_one_rail);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(context_suite());
}
