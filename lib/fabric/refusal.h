/*
 * Why providers were refused: one entry per provider, with its reason in
 * a few words, gathered while a selection is made (provider.c) and
 * reported as a list (ferry_probe_refusal) and as one sentence (the error
 * of ferry_context_create, ferry_probe_refused).
 */
#ifndef FERRY_FABRIC_REFUSAL_H
#define FERRY_FABRIC_REFUSAL_H

#include "fabric/selection.h"

/* Adds "provider: reason" to sel (its list and its sentence). */
void ferry__refuse(struct ferry__selection *sel, const char *provider,
                   const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Whether sel already says why `provider` was refused. */
bool ferry__refused_already(const struct ferry__selection *sel,
                            const char *provider);

/*
 * Explains every provider libfabric has that gave sel no candidate: the
 * one the config names, or else all of them (shm_refused: shm was
 * dropped because peers may be on other hosts).
 */
void ferry__explain_refusals(const struct ferry_config *cfg,
                             struct ferry__selection *sel, bool shm_refused);

/*
 * Whether FI_PROVIDER (libfabric's filter: names separated by commas, all
 * negated by a leading '^') keeps a provider out of fi_getinfo's answers.
 * A stacked name ("tcp;ofi_rxm") passes when the filter names it whole or
 * names its core ("tcp"), as libfabric's own filter does.
 */
bool ferry__fi_provider_excludes(const char *filter, const char *prov_name);

/* The name of `names` (NULL-terminated) nearest `name` by edit distance,
 * or NULL when none is near (more than a third of the letters differ). */
const char *ferry__nearest_name(const char *name, const char *const *names);

#endif /* FERRY_FABRIC_REFUSAL_H */
