/*
 * ferry_bench: the initiator's session: meet, drive every run
 * (throughput.c, pingpong.c or idle.c, which never call back here), say
 * BYE.
 */
#include "initiator.h"

#include "fbench.h"
#include "idle.h"
#include "metrics.h"
#include "options.h"
#include "pingpong.h"
#include "report.h"
#include "session.h"
#include "side.h"
#include "stats.h"
#include "throughput.h"
#include "util.h"

#include <ferry.h>

#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>

/* Joins the metadata service at url as TARGET-initiator, offers this
 * side's buffer for the pongs, and finds the target's buffer. */
static int initiator_meet(struct initiator *in, const char *url)
{
    char name[160];
    int ret;

    snprintf(name, sizeof(name), "%s-initiator", in->target);
    if ((ret = ferry_meta_open(in->s.ctx, url, name, &in->meta)))
        return fail("ferry_meta_open", ret);
    if (in->o->pingpong &&
        (ret = ferry_meta_publish(in->meta, PONG_REGION_NAME, in->s.mem)))
        return fail("publishing this side's buffer for the pongs", ret);
    if ((ret = ferry_meta_lookup(in->meta, in->target, REGION_NAME,
                                 CONNECT_TIMEOUT_MS, &in->rmem)))
        return fail("looking up the target's buffer", ret);
    for (unsigned k = 0; in->o->regions > 1 && k < in->o->regions; k++) {
        snprintf(name, sizeof(name), SLICE_REGION_NAME, k);
        if ((ret = ferry_meta_lookup(in->meta, in->target, name,
                                     CONNECT_TIMEOUT_MS, &in->regions[k])))
            return fail("looking up a region of the target's buffer (start "
                        "the target with the same --regions)",
                        ret);
    }
    if ((ret = ferry_meta_peer(in->meta, in->target, 0, &in->peer)))
        return fail("finding the target", ret);
    set_probe(in->meta, in->target, in->peer);
    return 0;
}

/* --idle-peers: this context's own address added again and again, peers
 * that carry nothing but are there for every progress pass to skip. */
static int add_idle_peers(struct initiator *in)
{
    uint8_t addr[1024];
    size_t len = sizeof(addr);
    int ret;

    if (in->o->idle_peers == 0)
        return 0;
    in->idle_peers = calloc(in->o->idle_peers, sizeof(*in->idle_peers));
    if (in->idle_peers == NULL)
        return complain("out of memory for %" PRIu64 " idle peers",
                        in->o->idle_peers);
    if ((ret = ferry_context_address(in->s.ctx, addr, &len)))
        return fail("ferry_context_address", ret);
    for (; in->nidle < in->o->idle_peers; in->nidle++)
        if ((ret = ferry_peer_add(in->s.ctx, addr, len,
                                  &in->idle_peers[in->nidle])))
            return fail("adding an idle peer", ret);
    return 0;
}

static int initiator_connect(struct initiator *in, const char *url,
                             double bound_s)
{
    char b1[32], b2[32], b3[32];

    in->t_connect = now_ns();
    if (initiator_meet(in, url) || add_idle_peers(in))
        return 1;
    if (ferry_rmem_length(in->rmem) < in->s.len)
        return complain("the target's buffer is %s but this side's is %s: "
                        "start the target with --buffer-size %s or more "
                        "(or with the same sizes as here)",
                        fmt_iec(b1, sizeof(b1), ferry_rmem_length(in->rmem)),
                        fmt_iec(b2, sizeof(b2), in->s.len),
                        fmt_flag(b3, sizeof(b3), in->s.len));
    if (in->o->regions > 1) {
        in->region_len = ferry_rmem_length(in->regions[0]);
        if (in->region_len % in->o->block != 0)
            return complain("the target's --regions %" PRIu64 " are %s "
                            "each, not whole blocks of %s: give both sides "
                            "the same --buffer-size",
                            in->o->regions,
                            fmt_iec(b1, sizeof(b1), in->region_len),
                            fmt_iec(b2, sizeof(b2), in->o->block));
    }
    /* The target gives up a little after this side would: the alarm here
     * then tells the story. */
    return send_ctl(&in->s, in->peer, ID_BOUND,
                    (uint64_t)((bound_s + 5) * 1e3));
}

static void initiator_close(struct initiator *in)
{
    set_probe(NULL, NULL, NULL);
    while (in->nidle > 0)
        ferry_peer_close(in->idle_peers[--in->nidle]);
    free(in->idle_peers);
    if (in->rmem != NULL)
        ferry_rmem_close(in->rmem);
    for (unsigned k = 0; k < MAX_REGIONS; k++)
        if (in->regions[k] != NULL)
            ferry_rmem_close(in->regions[k]);
    ferry_meta_close(in->meta);
    side_close(&in->s);
}

/* Meets the target, runs every size, says BYE.  Returns 0 when all went
 * well. */
int initiator_main(const struct options *o, const char *url,
                   const char *target, double bound_s, FILE *csv)
{
    size_t nruns = sweep_count(o), done = 0;
    struct initiator in = {.o = o, .target = target};
    struct result *rs = calloc(nruns, sizeof(*rs));
    bool ok = true;
    int failed = 1;

    in.deadline = now_ns() + (uint64_t)(bound_s * 1e9);
    atomic_init(&in.t_first, 0);
    if (rs == NULL)
        return complain("out of memory");
    if (open_context(o, o->initiator_thread, &in.s) ||
        setup_buffer(&in.s, o->buffer, PAT_B,
                     o->pingpong ? FERRY_ACCESS_REMOTE_WRITE : 0) ||
        initiator_connect(&in, url, bound_s))
        goto out;
    print_header(o, &in.s.info);
    for (; done < nruns; done++) {
        struct result *r = &rs[done];

        result_init(r);
        report_start_run(o, done);
        if (o->idle > 0      ? run_idle(&in, block_of_run(o, done), r)
            : o->pingpong ? run_pingpong(&in, block_of_run(o, done), r)
                          : run_throughput(&in, block_of_run(o, done), r))
            goto out;
        r->ok = r->verdict == 0 && r->local_check != 1;
        ok &= r->ok;
        report_run(o, csv, done, r);
    }
    if (o->sweep_lo != 0)
        print_session(&rs[0]);
    if (send_ctl(&in.s, in.peer, ID_BYE, 0))
        goto out;
    if (o->json)
        print_json(o, &in.s.info, rs, nruns, ok);
    /* The plot even of a failed check: it shows the numbers there were. */
    failed = report_sweep_done(o, in.s.info.provider, rs, nruns) || !ok;
    if (o->metrics != NULL && metrics_write(&in.s, o->metrics))
        failed = 1;
out:
    initiator_close(&in);
    free(rs);
    return failed;
}
