/*
 * ferry_stat: a snapshot read (its text parsed by parse.c), freed, and
 * asked about.
 */
#include "snap.h"

#include "parse.h"
#include "util.h"

#include "base/text.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Far more than a snapshot of thousands of peers: anything bigger is not
 * one of ferry's. */
#define MAX_TEXT ((off_t)64 << 20)

/* What a file that is not a regular one is, for a message. */
static const char *kind_of(mode_t mode)
{
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISSOCK(mode))
        return "a socket";
    if (S_ISCHR(mode) || S_ISBLK(mode))
        return "a device";
    return "not a regular file";
}

/*
 * Opens the snapshot at path: a regular file, which is what libferry
 * writes.  In a directory other users write into, a FIFO would hold the
 * reader (and the server with it) for ever in open(), a device or a link
 * would be read as if it were a snapshot: O_NONBLOCK and O_NOFOLLOW, and
 * the type checked.  The descriptor and its status in *st, or -errno
 * with err filled (-ENOENT: the file went, its context closed).
 */
static int open_regular(const char *path, struct stat *st, char *err,
                        size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
    int ret;

    if (fd < 0 && errno == ELOOP) {
        snprintf(err, len, "%s: a symbolic link, not a snapshot: libferry "
                           "writes its snapshots as regular files",
                 path);
        return -EINVAL;
    }
    if (fd < 0 || fstat(fd, st) != 0) {
        ret = -errno;
        snprintf(err, len, "%s: %s", path, strerror(errno));
    } else if (!S_ISREG(st->st_mode)) {
        ret = -EINVAL;
        snprintf(err, len, "%s: %s, not a snapshot: libferry writes its "
                           "snapshots as regular files",
                 path, kind_of(st->st_mode));
    } else {
        return fd;
    }
    if (fd >= 0)
        close(fd);
    return ret;
}

/* The file whole, NUL-terminated, into s->text (a text without NULs), its
 * owner into s->owner. */
static int read_text(const char *path, struct snapshot *s, char *err,
                     size_t len)
{
    struct stat st;
    int fd = open_regular(path, &st, err, len), ret = 0;
    size_t have = 0;
    char *buf;

    if (fd < 0)
        return fd;
    s->owner = st.st_uid;
    if (st.st_size > MAX_TEXT) {
        ret = -EFBIG;
        snprintf(err, len, "%s: %lld bytes, too big for a snapshot", path,
                 (long long)st.st_size);
    } else if ((buf = malloc((size_t)st.st_size + 1)) == NULL) {
        ret = -ENOMEM;
        snprintf(err, len, "%s: out of memory", path);
    } else {
        ssize_t n;
        char *nul;

        while (have < (size_t)st.st_size &&
               (n = read(fd, buf + have, (size_t)st.st_size - have)) > 0)
            have += (size_t)n;
        buf[have] = '\0';
        s->text = buf;
        if ((nul = memchr(buf, '\0', have)) != NULL) {
            size_t line = 1;

            for (char *c = buf; c < nul; c++)
                line += *c == '\n';
            ret = -EINVAL;
            snprintf(err, len, "%s:%zu: a NUL byte: not a text snapshot",
                     path, line);
        }
    }
    close(fd);
    return ret;
}

/* What the view prints of s, printable: the program, the label values
 * (unescaped: a \n there is a newline) and the HELP texts.  They point
 * into s->text, which is s's own. */
static void make_printable(struct snapshot *s)
{
    if (s->program != NULL)
        ferry__text_printable((char *)s->program);
    for (size_t i = 0; i < s->nlabels; i++)
        ferry__text_printable((char *)s->labels[i].value);
    for (size_t i = 0; i < s->nfamilies; i++)
        if (s->families[i].help != NULL)
            ferry__text_printable((char *)s->families[i].help);
}

int snap_load(const char *path, struct snapshot **out, char *err,
              size_t errlen)
{
    struct snapshot *s = calloc(1, sizeof(*s));
    int ret;

    if (s == NULL || (s->path = strdup(path)) == NULL) {
        free(s);
        snprintf(err, errlen, "%s: out of memory", path);
        return -ENOMEM;
    }
    ret = read_text(path, s, err, errlen);
    if (ret == 0)
        ret = snap_parse(s, err, errlen);
    if (ret != 0) {
        snap_free(s);
        return ret;
    }
    make_printable(s);
    *out = s;
    return 0;
}

void snap_free(struct snapshot *s)
{
    if (s == NULL)
        return;
    snap_free(s->base);
    free(s->families);
    free(s->samples);
    free(s->labels);
    free(s->text);
    free(s->path);
    free(s);
}

static bool matches(const struct snapshot *s, const struct sample *x,
                    const char *const *match)
{
    for (size_t i = 0; match != NULL && match[i] != NULL; i += 2) {
        const char *v = sample_label(s, x, match[i]);

        if (v == NULL || strcmp(v, match[i + 1]) != 0)
            return false;
    }
    return true;
}

bool snap_sum(const struct snapshot *s, const char *name,
              const char *const *match, double *sum)
{
    bool found = false;

    *sum = 0;
    for (size_t i = 0; s != NULL && i < s->nsamples; i++)
        if (strcmp(s->samples[i].name, name) == 0 &&
            matches(s, &s->samples[i], match)) {
            *sum += s->samples[i].v;
            found = true;
        }
    return found;
}

static bool listed(const char **values, size_t n, const char *v)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(values[i], v) == 0)
            return true;
    return false;
}

int snap_values(const struct snapshot *s, const char *name, const char *label,
                const char *const *match, const char ***values, size_t *n)
{
    const char **out = NULL;
    size_t cap = 0, count = 0;

    for (size_t i = 0; i < s->nsamples; i++) {
        const struct sample *x = &s->samples[i];
        const char *v = sample_label(s, x, label), **more;

        if (v == NULL || (name != NULL && strcmp(x->name, name) != 0) ||
            !matches(s, x, match) || listed(out, count, v))
            continue;
        if ((more = grow(out, &cap, count, sizeof(*out))) == NULL) {
            free(out);
            return -ENOMEM;
        }
        out = more;
        out[count++] = v;
    }
    *values = out;
    *n = count;
    return 0;
}
