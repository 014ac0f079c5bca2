/*
 * ferry_stat: the parser of a snapshot's text (parse.c).
 */
#ifndef FERRY_STAT_PARSE_H
#define FERRY_STAT_PARSE_H

#include "model.h"

#include <stddef.h>

/*
 * Parses s->text (s->path names it in messages), cutting it in place,
 * into the header fields, families, samples and labels of s.  Returns 0,
 * or -EINVAL with "PATH:LINE: why" in err (-ENOMEM: "...: out of memory").
 */
int snap_parse(struct snapshot *s, char *err, size_t errlen);

#endif /* FERRY_STAT_PARSE_H */
