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
#include "report.h"
#include "target.h"
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* HOST:PORT, or HOST and --port. */
static const char *initiator_where(const struct options *o, char *buf,
                                   size_t n)
{
    const char *a = o->initiator_addr;
    const char *colon = strrchr(a, ':');
    bool has_port = colon != NULL && (a[0] != '[' || colon > strchr(a, ']'));

    if (has_port)
        return a;
    snprintf(buf, n, "%s:%u", a, o->port);
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
    char where[300];
    double bound_s;
    int code;

    if (!parse_args(argc, argv, &o) || !resolve_options(&o))
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
        code = initiator_main(&o,
                              o.metadata != NULL
                                  ? o.initiator_addr
                                  : initiator_where(&o, where, sizeof(where)),
                              bound_s, csv);
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
