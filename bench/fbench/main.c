/*
 * ferry_bench: main: options in, one mode out (loopback, target, initiator,
 * memcpy).
 */
#include "fanout.h"
#include "fbench.h"
#include "initiator.h"
#include "loopback.h"
#include "memcpy.h"
#include "options.h"
#include "plot.h"
#include "report.h"
#include "target.h"
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* The target's bootstrap: HOST:PORT, or HOST and --port. */
static const char *initiator_url(const struct options *o, char *buf, size_t n)
{
    const char *a = o->initiator_addr;
    const char *colon = strrchr(a, ':');
    bool has_port = colon != NULL && (a[0] != '[' || colon > strchr(a, ']'));

    if (has_port)
        snprintf(buf, n, "bootstrap://%s", a);
    else
        snprintf(buf, n, "bootstrap://%s:%u", a, o->port);
    return buf;
}

int main(int argc, char **argv)
{
    struct options o = {.port = DEFAULT_PORT,
                        .batch = 1,
                        .threads = 1,
                        .inflight = 4,
                        .warmup = 0.5,
                        .timeout_ms = 30000};
    FILE *csv = NULL;
    char url[FBENCH_URL_MAX];
    double bound_s;
    int code;

    if (!parse_args(argc, argv, &o) || !resolve_options(&o) ||
        !plot_writable(&o))
        return EXIT_USAGE;
    g_out = o.json ? stderr : stdout;
    if (o.csv != NULL) {
        csv = fopen(o.csv, "w");
        if (csv == NULL)
            return complain("--csv %s: %s", o.csv, strerror(errno)) + 1;
        fprintf(csv, "size_bytes,gb_per_s,ops_per_s,p50_us,p99_us,p999_us,"
                "mean_us\n");
    }
    bound_s = session_bound_s(&o);
    switch (o.mode) {
    case MODE_MEMCPY:
        code = memcpy_main(&o, csv);
        break;
    case MODE_FANOUT:
        arm_time_bound(bound_s);
        code = fanout_main(&o);
        break;
    case MODE_TARGET:
        g_role = "ferry_bench (target)";
        code = target_main(&o, -1);
        break;
    case MODE_INITIATOR:
        arm_time_bound(bound_s);
        /* With --metadata the target is named; else it is found at its
         * address, under the name every target takes there. */
        if (o.metadata != NULL)
            code = initiator_main(&o, o.metadata, o.initiator_addr, bound_s,
                                  csv);
        else
            code = initiator_main(&o, initiator_url(&o, url, sizeof(url)),
                                  o.name, bound_s, csv);
        break;
    case MODE_LOOPBACK:
    default:
        code = loopback_main(&o, bound_s, csv);
        break;
    }
    if (csv != NULL && fclose(csv) != 0)
        code = complain("--csv %s: %s", o.csv, strerror(errno));
    return code;
}
