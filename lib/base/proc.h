/*
 * What /proc says of a process: when it started, and this process's pid
 * namespace.  libferry's telemetry writes both into its snapshots, and
 * ferry_stat, which links no libferry, compiles this file in to read
 * them the same way.
 */
#ifndef FERRY_BASE_PROC_H
#define FERRY_BASE_PROC_H

#include <stdbool.h>
#include <sys/types.h>

/*
 * Field 22 of /proc/PID/stat (pid 0: this process), when the process
 * started in clock ticks since boot, into *start.  False when there is
 * no such process, or only its zombie: it died.
 */
bool ferry__proc_start_time(pid_t pid, unsigned long long *start);

/* This process's pid namespace: the inode of /proc/self/ns/pid; 0 when
 * unreadable. */
unsigned long long ferry__proc_pid_namespace(void);

#endif /* FERRY_BASE_PROC_H */
