/*
 * A detached thread of ferry's own, started and running before the call
 * that starts it returns.
 *
 * A process may fork just after ferry started a thread: a target started
 * after its first registration, say.  A thread still being set up is
 * inside malloc (its TLS, the sanitizers' per-thread state), and a child
 * forked then inherits the allocator's lock held.  glibc's malloc takes
 * its locks around fork, but Debian 12's AddressSanitizer does not: the
 * child hung at its first allocation (in a CI rehearsal, check_death's
 * restart loop forked its first target right after the registration
 * that started the userfaultfd monitor; 3 of 60 such children hung in a
 * loop made to show it).  So the starter waits until the thread runs
 * its own code, past that setup.
 */
#ifndef FERRY_BASE_THREAD_H
#define FERRY_BASE_THREAD_H

#include <stdbool.h>

/* Starts fn(arg) on a detached thread and returns once it runs; false
 * (errno set) when pthread_create failed. */
bool ferry__thread_start(void *(*fn)(void *), void *arg);

#endif /* FERRY_BASE_THREAD_H */
