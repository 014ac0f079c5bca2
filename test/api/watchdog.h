/*
 * A watchdog for hung tests: shortly before a test case's Check timeout,
 * gdb prints the stacks of the test's process and of its children into
 * its log (watchdog.c).  Without gdb it says so instead.
 */
#ifndef TU_WATCHDOG_H
#define TU_WATCHDOG_H

#include <check.h>

/* Arms the watchdog for every test of tc, whose timeout is timeout_s
 * seconds (before CK_TIMEOUT_MULTIPLIER).  Not in CK_FORK=no mode, nor
 * under ThreadSanitizer (watchdog.c). */
void tu_watchdog_add(TCase *tc, const char *name, int timeout_s);

#endif /* TU_WATCHDOG_H */
