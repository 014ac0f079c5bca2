/*
 * ferry_bench --metrics FILE (metrics.h).
 *
 * Merging two expositions: both come from ferry_metrics_text, so they
 * hold the same families; each family is a block that starts with its
 * "# HELP" line.  The merged text has every family's HELP and TYPE once,
 * then the initiator's samples, then the target's, each with a side
 * label in front of its own labels.
 */
#include "metrics.h"

#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int metrics_write(const struct side *s, const char *path)
{
    size_t need = 0, cap;
    char *text = NULL;
    FILE *f;
    int ret;

    do {
        cap = need + 4096; /* the text grows while it is read */
        free(text);
        if ((text = malloc(cap)) == NULL)
            return complain("--metrics: out of memory");
        ret = ferry_metrics_text(s->ctx, text, cap, &need);
    } while (ret == FERRY_ENOSPC);
    if (ret != 0) {
        free(text);
        return fail("ferry_metrics_text", ret);
    }
    f = fopen(path, "w");
    if (f == NULL || fputs(text, f) < 0 || fclose(f) != 0) {
        free(text);
        return complain("--metrics %s: cannot write it: %s", path,
                        strerror(errno));
    }
    free(text);
    return 0;
}

void metrics_target_path(const char *path, char *out, size_t len)
{
    snprintf(out, len, "%s.target", path);
}

/* The whole file, NUL-terminated, or NULL. */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    char *text = NULL;
    long len;

    if (f != NULL && fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 &&
        fseek(f, 0, SEEK_SET) == 0 && (text = malloc((size_t)len + 1)) != NULL)
        text[fread(text, 1, (size_t)len, f)] = '\0';
    if (f != NULL)
        fclose(f);
    return text;
}

/* The block of family name in text ("# HELP name ..." up to the next
 * "# HELP"), as [*start, *end); false when text has none. */
static bool family_block(const char *text, const char *name,
                         const char **start, const char **end)
{
    size_t n = strlen(name);

    for (const char *p = text; p != NULL && *p != '\0';) {
        if (strncmp(p, "# HELP ", 7) == 0 && strncmp(p + 7, name, n) == 0 &&
            p[7 + n] == ' ') {
            const char *next = strstr(p + 1, "\n# HELP ");

            *start = p;
            *end = next != NULL ? next + 1 : p + strlen(p);
            return true;
        }
        p = strchr(p, '\n');
        p = p != NULL ? p + 1 : NULL;
    }
    return false;
}

/* The sample lines of [p, end), each with side="side" added. */
static void put_samples(FILE *f, const char *p, const char *end,
                        const char *side)
{
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        size_t len = eol != NULL ? (size_t)(eol - p) : (size_t)(end - p);
        size_t name = strcspn(p, "{ ");

        if (p[0] != '#' && len > 0 && name < len) {
            if (p[name] == '{')
                fprintf(f, "%.*s{side=\"%s\",%.*s\n", (int)name, p, side,
                        (int)(len - name - 1), p + name + 1);
            else
                fprintf(f, "%.*s{side=\"%s\"}%.*s\n", (int)name, p, side,
                        (int)(len - name), p + name);
        }
        p += len + 1;
    }
}

int metrics_merge(const char *path, const char *target_path)
{
    char *mine = slurp(path), *theirs = slurp(target_path);
    FILE *f = NULL;
    int code = 1;

    if (mine == NULL || theirs == NULL) {
        complain("--metrics: cannot read %s", mine == NULL ? path
                                                           : target_path);
        goto out;
    }
    if ((f = fopen(path, "w")) == NULL) {
        complain("--metrics %s: cannot write it: %s", path, strerror(errno));
        goto out;
    }
    for (const char *p = strstr(mine, "# HELP "); p != NULL;
         p = strstr(p + 1, "\n# HELP ")) {
        const char *help = p[0] == '\n' ? p + 1 : p, *start, *end, *body;
        char name[256];

        if (sscanf(help, "# HELP %255s", name) != 1 ||
            !family_block(mine, name, &start, &end))
            continue;
        /* HELP and TYPE once: the two comment lines of the block. */
        body = start;
        for (int i = 0; i < 2 && body < end; i++)
            body = strchr(body, '\n') + 1;
        fprintf(f, "%.*s", (int)(body - start), start);
        put_samples(f, body, end, "initiator");
        if (family_block(theirs, name, &start, &end))
            put_samples(f, start, end, "target");
    }
    code = fclose(f) == 0 ? 0
                          : complain("--metrics %s: cannot write it: %s", path,
                                     strerror(errno));
    f = NULL;
out:
    if (f != NULL)
        fclose(f);
    free(mine);
    free(theirs);
    remove(target_path);
    return code;
}
