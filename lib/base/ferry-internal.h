/*
 * The base every module of ferry stands on: the definitions (defs.h) and
 * the base modules nearly every file calls (errors, logging, environment
 * and clock, the context lock).  Never installed.  Each module above
 * declares what it offers in a header of its own beside it (lib/README.md
 * lists them); the base modules themselves include only their own
 * headers and defs.h, never this one.
 */
#ifndef FERRY_INTERNAL_H
#define FERRY_INTERNAL_H

#include "base/defs.h"
#include "base/env.h"
#include "base/error.h"
#include "base/lock.h"
#include "base/log.h"

#endif /* FERRY_INTERNAL_H */
