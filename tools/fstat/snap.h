/*
 * ferry_stat: one telemetry snapshot, DIR/ferry-PID-N.prom as libferry
 * writes it (FERRY_TELEMETRY): the header that says whose it is, then
 * Prometheus text (exposition format 0.0.4), read (snap.c) and checked
 * whole (parse.c), and the questions the view asks of it.
 */
#ifndef FERRY_STAT_SNAP_H
#define FERRY_STAT_SNAP_H

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
    unsigned long long starttime; /* field 22 of /proc/PID/stat */
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
 * Reads and checks the snapshot at path into *out (free with snap_free).
 * Returns 0; -ENOENT when the file is gone (its context closed: not an
 * error); -EINVAL with "PATH:LINE: why" in err for a malformed file;
 * another -errno with "PATH: why" in err.
 */
int snap_load(const char *path, struct snapshot **out, char *err,
              size_t errlen);
/* Frees s and its bases; NULL does nothing. */
void snap_free(struct snapshot *s);

/*
 * Whether a sample named `name` is a series of the family `family` of
 * type `type` (NULL: untyped): family_bucket, _sum or _count of a
 * histogram, _sum or _count of a summary.
 */
bool series_of(const char *name, const char *family, const char *type);
/* The value of label `name` of sample x, or NULL. */
const char *sample_label(const struct snapshot *s, const struct sample *x,
                         const char *name);
/*
 * The sum of the samples of s named `name` that carry every label of
 * match (name, value, ..., NULL) into *sum.  Returns false when none
 * does, or s is NULL.
 */
bool snap_sum(const struct snapshot *s, const char *name,
              const char *const *match, double *sum);
/*
 * The distinct values of label `label` among the samples of s that carry
 * every label of match (name NULL: of any name), in the order they come,
 * into *values (the caller frees the array, not the strings) and *n.
 * Returns 0 or -ENOMEM.
 */
int snap_values(const struct snapshot *s, const char *name, const char *label,
                const char *const *match, const char ***values, size_t *n);

#endif /* FERRY_STAT_SNAP_H */
