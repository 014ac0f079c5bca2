/*
 * Rail choice from the topology: the domains nearest the context's
 * memory first, and the CPUs near them.
 */
#ifndef FERRY_FABRIC_RAILS_H
#define FERRY_FABRIC_RAILS_H

#include "fabric/provider.h"

/* Domains of one provider considered as rails (more are never used). */
#define FERRY__RAIL_CANDIDATES 32
/*
 * Moves the chosen provider's domains nearest the context's memory (a GPU,
 * or the calling thread's NUMA node) to the front of sel; writes a clause
 * saying what it did ("; rails nearest ...") or "" into why, and the CPUs
 * near the first rail's NIC ("0-7,16-23") or "" into cpus.
 */
void ferry__rails_order(const struct ferry_config *cfg,
                        struct ferry__selection *sel, char *why, size_t len,
                        char *cpus, size_t cpus_len);
/* Binds the calling thread to a CPU list ("0-7,16-23"); false if it
 * cannot (malformed, or CPUs this process may not use). */
bool ferry__bind_to_cpus(const char *cpus);

#endif /* FERRY_FABRIC_RAILS_H */
