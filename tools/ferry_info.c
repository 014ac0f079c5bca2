/*
 * ferry_info: the preflight.  What ferry sees on this machine and what it
 * would do with it: libfabric and its providers (which ferry would use and
 * why, which it refuses and why), the context it would open, how cached
 * registrations are invalidated, NICs, GPUs and their mapping, and
 * warnings a person can act on.
 *
 *   ferry_info [--json] [--provider P] [--domain D] [--local]
 *
 * Exits 0 when a usable provider exists, 1 when none does, 2 on bad usage.
 */
#include <ferry.h>

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_WARNINGS 16

struct report {
    bool json;
    const char *warnings[MAX_WARNINGS];
    /* Room for a refusal list in full (256 bytes cut "no usable provider"
     * mid-word when every provider was refused). */
    char warning_text[MAX_WARNINGS][2048];
    size_t nwarnings;
};

static void warn(struct report *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void warn(struct report *r, const char *fmt, ...)
{
    va_list ap;

    if (r->nwarnings == MAX_WARNINGS)
        return;
    va_start(ap, fmt);
    vsnprintf(r->warning_text[r->nwarnings], sizeof(r->warning_text[0]), fmt,
              ap);
    va_end(ap);
    r->warnings[r->nwarnings] = r->warning_text[r->nwarnings];
    r->nwarnings++;
}

/* A JSON string literal of s on stdout. */
static void json_str(const char *s)
{
    putchar('"');
    for (; s != NULL && *s; s++) {
        if (*s == '"' || *s == '\\')
            printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            printf("\\u%04x", *s);
        else
            putchar(*s);
    }
    putchar('"');
}

static const char *mr_mode_words(unsigned m, char *buf, size_t len)
{
    static const struct {
        unsigned bit;
        const char *name;
    } bits[] = {
        {FERRY_MR_LOCAL, "LOCAL"},       {FERRY_MR_VIRT_ADDR, "VIRT_ADDR"},
        {FERRY_MR_ALLOCATED, "ALLOCATED"}, {FERRY_MR_PROV_KEY, "PROV_KEY"},
        {FERRY_MR_ENDPOINT, "ENDPOINT"}, {FERRY_MR_RAW, "RAW"},
        {FERRY_MR_HMEM, "HMEM"},
    };

    buf[0] = '\0';
    for (size_t i = 0; i < sizeof(bits) / sizeof(bits[0]); i++)
        if (m & bits[i].bit)
            snprintf(buf + strlen(buf), len - strlen(buf), "%s%s",
                     buf[0] ? "|" : "", bits[i].name);
    if (buf[0] == '\0')
        snprintf(buf, len, "none");
    return buf;
}

/*
 * A limit in words: providers report "no limit" as SIZE_MAX or as values
 * near it (sockets: 2^64 - 2^30), which no message reaches.
 */
static void size_words(size_t v, char *buf, size_t len)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    size_t u = 0;

    if ((uint64_t)v >= (1ull << 50)) {
        snprintf(buf, len, "no limit");
        return;
    }
    while (u + 1 < sizeof(unit) / sizeof(unit[0]) && v >= 1024 &&
           v % 1024 == 0) {
        v /= 1024;
        u++;
    }
    snprintf(buf, len, "%zu %s", v, unit[u]);
}

static void print_candidate_json(const struct ferry_provider_report *p,
                                 bool first)
{
    char mode[64];

    mr_mode_words(p->mr_mode, mode, sizeof(mode));
    printf("%s\n    {\"provider\": ", first ? "" : ",");
    json_str(p->provider);
    printf(", \"about\": ");
    json_str(p->about);
    printf(", \"domain\": ");
    json_str(p->domain);
    printf(", \"fabric\": ");
    json_str(p->fabric);
    printf(", \"chosen\": %s, \"verdict\": ", p->chosen ? "true" : "false");
    json_str(p->verdict);
    printf(", \"mr_mode\": ");
    json_str(mode);
    printf(", \"mr_key_size\": %zu, \"max_msg_size\": %zu, \"tx_depth\": %zu}",
           p->mr_key_size, p->max_msg_size, p->tx_depth);
}

static void print_refusals_json(const ferry_probe_t *probe)
{
    size_t n = ferry_probe_refusal_count(probe);

    printf("  \"refused\": [");
    for (size_t i = 0; i < n; i++) {
        const char *prov, *reason;

        ferry_probe_refusal(probe, i, &prov, &reason);
        printf("%s\n    {\"provider\": ", i ? "," : "");
        json_str(prov);
        printf(", \"reason\": ");
        json_str(reason);
        printf("}");
    }
    printf("%s],\n", n ? "\n  " : "");
}

static void print_refusals_text(const ferry_probe_t *probe)
{
    size_t n = ferry_probe_refusal_count(probe);

    printf("refused:%s\n", n ? "" : " none");
    for (size_t i = 0; i < n; i++) {
        const char *prov, *reason;

        ferry_probe_refusal(probe, i, &prov, &reason);
        printf("  %s: %s\n", prov, reason);
    }
}

/*
 * Whether an entry of the probe before `i` is of provider prov, and on
 * domain `domain` when that is not NULL.
 */
static bool earlier_has(const ferry_probe_t *probe, size_t i,
                        const char *prov, const char *domain)
{
    for (size_t k = 0; k < i; k++) {
        struct ferry_provider_report q = FERRY_PROVIDER_REPORT_INIT;

        ferry_probe_entry(probe, k, &q);
        if (strcmp(q.provider, prov) == 0 &&
            (domain == NULL || strcmp(q.domain, domain) == 0))
            return true;
    }
    return false;
}

/*
 * The candidates of the provider of entry `first` (its best; libfabric
 * lists one per address of each domain): its name and what it is, then
 * each domain with its fabrics (addresses), then the limits and the
 * verdict of the best one.
 */
static void print_group_text(const ferry_probe_t *probe, size_t n,
                             size_t first)
{
    struct ferry_provider_report best = FERRY_PROVIDER_REPORT_INIT;
    char mode[64], msg[32];
    size_t count = 0;

    /* Entries come best first: the group's first is its best, and the
     * chosen one is the best of all. */
    ferry_probe_entry(probe, first, &best);
    printf("  %s %s: %s\n      domains (fabrics): ", best.chosen ? "*" : " ",
           best.provider, best.about);
    for (size_t i = first; i < n; i++) {
        struct ferry_provider_report d = FERRY_PROVIDER_REPORT_INIT;
        const char *sep = "";

        ferry_probe_entry(probe, i, &d);
        if (strcmp(d.provider, best.provider) != 0 ||
            earlier_has(probe, i, d.provider, d.domain))
            continue;
        /* A domain, first seen here, with every fabric (address) of it. */
        printf("%s%s (", i > first ? ", " : "", d.domain);
        for (size_t k = i; k < n; k++) {
            struct ferry_provider_report p = FERRY_PROVIDER_REPORT_INIT;

            ferry_probe_entry(probe, k, &p);
            if (strcmp(p.provider, d.provider) != 0 ||
                strcmp(p.domain, d.domain) != 0)
                continue;
            printf("%s%s%s", sep, p.fabric, p.chosen ? " <- chosen" : "");
            sep = ", ";
            count++;
        }
        printf(")");
    }
    mr_mode_words(best.mr_mode, mode, sizeof(mode));
    size_words(best.max_msg_size, msg, sizeof(msg));
    printf("\n      mr_mode %s, %zu-byte keys, messages up to %s, %zu in "
           "flight%s\n"
           "      %s%s\n",
           mode, best.mr_key_size, msg, best.tx_depth,
           count > 1 ? " (its best domain)" : "", best.verdict,
           best.chosen ? ": ferry would use this one" : "");
}

static void print_providers(struct report *r, const ferry_probe_t *probe)
{
    size_t n = ferry_probe_count(probe), nprov = 0;

    if (r->json) {
        printf("  \"providers\": [");
        for (size_t i = 0; i < n; i++) {
            struct ferry_provider_report p = FERRY_PROVIDER_REPORT_INIT;

            ferry_probe_entry(probe, i, &p);
            print_candidate_json(&p, i == 0);
        }
        printf("%s],\n", n ? "\n  " : "");
        print_refusals_json(probe);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        struct ferry_provider_report p = FERRY_PROVIDER_REPORT_INIT;

        ferry_probe_entry(probe, i, &p);
        nprov += !earlier_has(probe, i, p.provider, NULL);
    }
    printf("providers ferry would consider, best first (%zu candidate%s: "
           "provider, domain and address; from %zu provider%s):\n",
           n, n == 1 ? "" : "s", nprov, nprov == 1 ? "" : "s");
    for (size_t i = 0; i < n; i++) {
        struct ferry_provider_report p = FERRY_PROVIDER_REPORT_INIT;

        ferry_probe_entry(probe, i, &p);
        if (!earlier_has(probe, i, p.provider, NULL))
            print_group_text(probe, n, i);
    }
    if (n == 0)
        printf("  none\n");
    print_refusals_text(probe);
}

static void print_context(struct report *r, const struct ferry_config *cfg)
{
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;
    ferry_context_t *ctx;
    char mode[64], msg[32];
    int ret = ferry_context_create(cfg, &ctx);

    if (ret != 0) {
        if (r->json) {
            printf("  \"context\": {\"error\": ");
            json_str(ferry_last_error());
            printf("},\n");
        } else {
            printf("context: cannot open one: %s\n", ferry_last_error());
        }
        return;
    }
    ferry_context_info(ctx, &info);
    mr_mode_words(info.mr_mode, mode, sizeof(mode));
    size_words(info.max_msg_size, msg, sizeof(msg));
    if (r->json) {
        printf("  \"context\": {\"why\": ");
        json_str(info.why);
        printf(", \"mr_mode\": ");
        json_str(mode);
        printf(", \"rails\": %u, \"max_msg_size\": %zu, \"tx_depth\": %zu, "
               "\"rcache_monitor\": ",
               info.nrails, info.max_msg_size, info.tx_depth);
        json_str(info.rcache_monitor);
        printf(", \"device_backend\": ");
        json_str(ferry_device_status());
        printf(", \"device_path\": ");
        json_str(info.device_path);
        printf(", \"notify_in_write_bits\": %u},\n", info.notify_in_write_bits);
    } else {
        printf("context with this configuration:\n  %s\n"
               "  mr_mode in effect %s; %u rail%s; operations up to %s, %zu "
               "in flight per rail\n"
               "  registration cache invalidated by: %s\n"
               "  device backend: %s\n"
               "  device memory: %s\n",
               info.why, mode, info.nrails, info.nrails == 1 ? "" : "s", msg,
               info.tx_depth, info.rcache_monitor, ferry_device_status(),
               info.device_path);
        if (info.notify_in_write_bits != 0)
            printf("  notifications: carried by their request's last write "
                   "(remote CQ data) when id and value are below 2^%u, "
                   "else sent as messages\n",
                   info.notify_in_write_bits);
        else
            printf("  notifications: sent as messages after the data (the "
                   "provider has no remote CQ data)\n");
    }
    if (strstr(info.device_path, "staged") != NULL)
        warn(r,
             "GPU memory on this provider is copied through host buffers "
             "(staged), not registered with the NIC: expect host-memory "
             "speed at best (%s)",
             info.device_path);
    if (!info.rcache_monitor_running)
        warn(r,
             "cached registrations are invalidated only when the program "
             "calls ferry_mem_invalidate() (%s): hook your allocator, or pass "
             "registered buffers (lmem) to every transfer",
             info.rcache_monitor);
    if (strcmp(info.domain, "lo") == 0)
        warn(r,
             "the chosen domain is the loopback interface: only processes on "
             "this host are reachable");
    ferry_context_close(ctx);
}

static void print_topology(struct report *r)
{
    struct ferry_topo_info info = FERRY_TOPO_INFO_INIT;
    ferry_topo_t *topo;

    if (ferry_topo_load(NULL, &topo) != 0) {
        if (r->json) {
            printf("  \"topology\": {\"error\": ");
            json_str(ferry_last_error());
            printf("},\n");
        } else {
            printf("topology: %s\n", ferry_last_error());
        }
        return;
    }
    ferry_topo_info(topo, &info);
    if (r->json) {
        printf("  \"topology\": {\"summary\": ");
        json_str(info.summary);
        printf(", \"gpus\": %zu, \"nics\": [", info.ngpus);
    } else {
        printf("topology: %s\n", info.summary);
    }
    for (size_t i = 0; i < info.nnics; i++) {
        struct ferry_topo_device d = FERRY_TOPO_DEVICE_INIT;

        ferry_topo_nic(topo, i, &d);
        if (r->json) {
            printf("%s{\"pci\": ", i ? ", " : "");
            json_str(d.pci);
            printf(", \"names\": ");
            json_str(d.names);
            printf(", \"numa_node\": %d, \"cpus\": ", d.numa_node);
            json_str(d.cpus);
            printf("}");
        } else {
            printf("  NIC %s (%s): NUMA node %d, CPUs %s\n", d.pci,
                   d.names[0] ? d.names : "no device name", d.numa_node,
                   d.cpus[0] ? d.cpus : "unknown");
        }
    }
    if (r->json)
        printf("], \"gpu_nics\": [");
    for (size_t g = 0; g < info.ngpus; g++) {
        struct ferry_topo_choice c = FERRY_TOPO_CHOICE_INIT;

        ferry_topo_gpu_nics(topo, g, &c);
        if (r->json) {
            printf("%s", g ? ", " : "");
            json_str(c.reason);
        } else {
            printf("  GPU %zu: %s\n", g, c.reason);
        }
    }
    if (r->json)
        printf("]},\n");
    if (info.ngpus == 0)
        warn(r,
             "no GPU found: device memory cannot be used on this machine");
    ferry_topo_close(topo);
}

static void print_environment(struct report *r)
{
    /* The variables ferry sets (lib/base/env.c) and their "off" values. */
    static const struct {
        const char *name, *off;
    } cache_vars[] = {{"FI_MR_CACHE_MONITOR", "disabled"},
                      {"FI_MR_CUDA_CACHE_MONITOR_ENABLED", "0"},
                      {"FI_EFA_MR_CACHE_ENABLE", "0"}};

    if (r->json) {
        printf("  \"fi_mr_cache\": {\"state\": %d, \"status\": ",
               (int)ferry_fi_mr_cache_state());
        json_str(ferry_fi_mr_cache_status());
        printf("},\n");
    } else {
        printf("libfabric's MR cache: %s\n", ferry_fi_mr_cache_status());
    }
    for (size_t i = 0; i < sizeof(cache_vars) / sizeof(cache_vars[0]); i++) {
        const char *v = getenv(cache_vars[i].name);
        if (v != NULL && strcmp(v, cache_vars[i].off) != 0)
            warn(r,
                 "libfabric's own MR cache is enabled by the environment "
                 "(%s): risk of deadlock with malloc hooks (libfabric #10879); "
                 "unset it and let ferry cache registrations",
                 cache_vars[i].name);
    }
}

/* How peers meet: the bootstrap's protection and the metadata service. */
static void print_meeting(struct report *r, const struct ferry_config *cfg)
{
    const char *token = cfg->oob_token != NULL ? cfg->oob_token
                                               : getenv("FERRY_OOB_TOKEN");
    bool has_token = token != NULL && token[0] != '\0';
    const char *boot = has_token
                           ? "token set: peers prove it to each other "
                             "(HMAC-SHA256 challenge-response)"
                       : cfg->oob_insecure
                           ? "no token, and FERRY_OOB_INSECURE=1: listens "
                             "on any address unauthenticated"
                           : "no token: listens on loopback only";

    if (r->json) {
        printf("  \"bootstrap\": ");
        json_str(boot);
        printf(",\n  \"metadata\": ");
        if (cfg->metadata != NULL)
            json_str(cfg->metadata);
        else
            printf("null");
        printf(",\n");
    } else {
        printf("bootstrap: %s\n", boot);
        printf("metadata service: %s\n",
               cfg->metadata != NULL ? cfg->metadata
                                     : "none set (FERRY_METADATA)");
    }
    if (!has_token && cfg->oob_insecure)
        warn(r, "the bootstrap may listen beyond loopback without a token "
                "(FERRY_OOB_INSECURE=1): anyone who reaches its port can "
                "import every published region and write into it; set "
                "FERRY_OOB_TOKEN on every side instead");
}

static int usage(void)
{
    fprintf(stderr, "usage: ferry_info [--json] [--provider P] [--domain D] "
                    "[--local]\n");
    return 2;
}

int main(int argc, char **argv)
{
    struct report r = {0};
    struct ferry_config cfg;
    ferry_probe_t *probe;
    size_t usable;

    if (ferry_config_init(&cfg) != 0) {
        fprintf(stderr, "ferry_info: %s\n", ferry_last_error());
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            r.json = true;
        else if (strcmp(argv[i], "--local") == 0)
            cfg.local_only = 1;
        else if (strcmp(argv[i], "--provider") == 0 && i + 1 < argc)
            cfg.provider = argv[++i];
        else if (strcmp(argv[i], "--domain") == 0 && i + 1 < argc)
            cfg.domain = argv[++i];
        else
            return usage();
    }
    if (ferry_probe_providers(&cfg, &probe) != 0) {
        fprintf(stderr, "ferry_info: %s\n", ferry_last_error());
        return 1;
    }
    usable = ferry_probe_count(probe);
    if (r.json) {
        printf("{\n  \"version\": ");
        json_str(ferry_version_string());
        printf(",\n");
    } else {
        printf("%s\n", ferry_version_string());
    }
    print_providers(&r, probe);
    if (usable > 0)
        print_context(&r, &cfg);
    print_topology(&r);
    print_environment(&r);
    print_meeting(&r, &cfg);
    if (usable == 0)
        warn(&r, "no usable provider: ferry cannot move data here (%s)",
             ferry_probe_refused(probe));
    if (r.json) {
        printf("  \"usable\": %s,\n  \"warnings\": [", usable ? "true" : "false");
        for (size_t i = 0; i < r.nwarnings; i++) {
            printf("%s\n    ", i ? "," : "");
            json_str(r.warnings[i]);
        }
        printf("%s]\n}\n", r.nwarnings ? "\n  " : "");
    } else {
        printf("warnings:%s\n", r.nwarnings ? "" : " none");
        for (size_t i = 0; i < r.nwarnings; i++)
            printf("  - %s\n", r.warnings[i]);
    }
    ferry_probe_close(probe);
    /* Now, not at exit: a sanitizer's report at exit would otherwise land
     * in the middle of the last buffered line. */
    fflush(stdout);
    return usable > 0 ? 0 : 1;
}
