/*
 * ferry_stat: what a snapshot holds once parsed (parse.c) -- its header,
 * families, samples and labels -- and two questions of the exposition
 * format about them, which the parser asks as the view does.
 */
#ifndef FERRY_STAT_MODEL_H
#define FERRY_STAT_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Every string below points into the snapshot's text. */
struct label {
    const char *name;
    const char *value; /* unescaped */
};

/* A family: named by # HELP or # TYPE, or by a sample without them. */
struct family {
    const char *name;
    const char *help; /* as written, escapes kept; NULL without # HELP */
    const char *type; /* NULL without # TYPE */
    bool has_samples;
};

struct sample {
    const char *name;
    size_t label0, nlabels; /* its labels in snapshot.labels */
    const char *value;      /* the value and any timestamp, as written */
    double v;
    size_t family; /* index in snapshot.families */
};

struct snapshot {
    char *path;
    pid_t pid;
    uid_t owner; /* the file's */
    unsigned long long starttime; /* field 22 of /proc/PID/stat */
    /* The writer's pid namespace (the inode of /proc/PID/ns/pid) and how
     * often it rewrites the file; 0 when its header does not say. */
    unsigned long long pidns;
    unsigned interval_ms;
    unsigned context;
    double written; /* CLOCK_REALTIME seconds */
    const char *program;
    bool live;    /* its process runs, and is the one that wrote it */
    bool removed; /* stale, and removed (--clean) */
    struct family *families;
    size_t nfamilies, cap_families;
    struct sample *samples;
    size_t nsamples, cap_samples;
    struct label *labels;
    size_t nlabels, cap_labels;
    /* The version of the same context read before this one, with an
     * older `written`: rates are the difference.  Owned; NULL if none. */
    struct snapshot *base;
    char *text; /* the file, cut into the strings above */
};

/*
 * Whether a sample named `name` is a series of the family `family` of
 * type `type` (NULL: untyped): family_bucket, _sum or _count of a
 * histogram, _sum or _count of a summary.
 */
bool series_of(const char *name, const char *family, const char *type);
/* The value of label `name` of sample x, or NULL. */
const char *sample_label(const struct snapshot *s, const struct sample *x,
                         const char *name);

#endif /* FERRY_STAT_MODEL_H */
