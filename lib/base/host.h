/*
 * Which host this process is on, as peers need to know it: a name for
 * sentences, and two keys that are equal between two processes exactly
 * when the kernel lets them reach each other without a network.
 */
#ifndef FERRY_BASE_HOST_H
#define FERRY_BASE_HOST_H

#include <stdint.h>

#define FERRY__HOST_NAME_MAX 64

struct ferry__host {
    char name[FERRY__HOST_NAME_MAX]; /* gethostname(), for sentences */
    /* Equal when both see one kernel (boot id), one /dev/shm and one
     * PID namespace: what shared memory between processes needs (shm
     * maps files of /dev/shm and copies with process_vm_*, by pid).
     * Processes in network namespaces that share /dev/shm are one host
     * for it; rig hosts with a private /dev/shm each are not. */
    uint64_t shm_key;
    /* Equal when both see one kernel and one network namespace: where a
     * loopback address (127.0.0.1, ::1) leads to the same place. */
    uint64_t net_key;
};

/* This process's host, read once (thread-safe; the keys only change
 * when a process moves to other namespaces, which ferry does not
 * follow). */
const struct ferry__host *ferry__host_self(void);

#endif /* FERRY_BASE_HOST_H */
