/*
 * What the example programs share: error reporting, sizes with K/M/G, and
 * the config of a context for two processes on one host.  Header-only, so
 * each example is still built from its own file plus this one.
 */
#ifndef FERRY_EXAMPLE_H
#define FERRY_EXAMPLE_H

#include <ferry.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Prints "who: what failed: <code> (<ferry's sentence>)"; returns 1. */
static inline int ex_fail(const char *who, const char *what, int err)
{
    fprintf(stderr, "%s: %s failed: %s (%s)\n", who, what, ferry_strerror(err),
            ferry_last_error());
    return 1;
}

/* "64M" -> 67108864; exits with a message when s is not a size. */
static inline size_t ex_parse_size(const char *s)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    unsigned shift = 0;

    switch (*end) {
    case 'K': case 'k': shift = 10; end++; break;
    case 'M': case 'm': shift = 20; end++; break;
    case 'G': case 'g': shift = 30; end++; break;
    default: break;
    }
    if (end == s || *end != '\0' || v == 0 || v > (SIZE_MAX >> shift)) {
        fprintf(stderr, "--size %s: give a positive number of bytes, "
                "optionally with K, M or G\n", s);
        exit(2);
    }
    return (size_t)v << shift;
}

/*
 * A config for processes on one host: the provider and domain come from
 * the environment (FERRY_PROVIDER, FERRY_DOMAIN, FI_PROVIDER) like
 * everything else, else ferry chooses by capability; the peer is reached
 * at 127.0.0.1, so the domain that routes there (loopback) comes first.
 * A target gets a progress thread.
 */
static inline void ex_local_config(struct ferry_config *cfg, bool target)
{
    ferry_config_init(cfg);
    if (cfg->peer_host == NULL)
        cfg->peer_host = "127.0.0.1";
    cfg->local_only = 1;
    cfg->progress_thread = target;
}

#endif /* FERRY_EXAMPLE_H */
