/*
 * ferry_stat: one exposition of many snapshots.  Prometheus' parser wants
 * a family's samples together after its one HELP and TYPE, so the text
 * is written family by family, each gathering every process's samples.
 */
#include "merge.h"

#include "util.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct merged {
    const char *name, *help, *type; /* in the text of some snapshot */
    bool left_out;
};

struct merge {
    struct merged *fams;
    size_t n, cap;
    /* Per snapshot of the scan (NULL when stale), per family of it: its
     * index in fams, or SIZE_MAX when left out. */
    size_t **map;
};

/* A family's type; none is untyped. */
static const char *type_of(const char *type)
{
    return type != NULL ? type : "untyped";
}

/* Family f of snapshot s among the merged ones: its index in *g. */
static int merge_family(struct merge *m, struct scan *sc,
                        const struct snapshot *s, const struct family *f,
                        size_t *g)
{
    struct merged *x;

    for (*g = 0; *g < m->n; (*g)++)
        if (strcmp(m->fams[*g].name, f->name) == 0)
            break;
    if (*g == m->n) {
        if ((x = grow(m->fams, &m->cap, m->n, sizeof(*x))) == NULL)
            return -ENOMEM;
        m->fams = x;
        x[m->n++] = (struct merged){f->name, f->help, f->type, false};
        return 0;
    }
    x = &m->fams[*g];
    if (strcmp(type_of(x->type), type_of(f->type)) != 0) {
        *g = SIZE_MAX;
        return scan_problem(sc, "%s: %s is a %s there but a %s in another "
                                "snapshot: its samples are left out",
                            s->path, f->name, type_of(f->type),
                            type_of(x->type))
                   ? 0
                   : -ENOMEM;
    }
    if (x->help == NULL)
        x->help = f->help;
    return 0;
}

/*
 * Leaves out a family named like a series of a histogram or summary of
 * another snapshot (x_count beside a histogram x): Prometheus would read
 * its samples as that histogram's.
 */
static int leave_out_series(struct merge *m, struct scan *sc)
{
    for (size_t g = 0; g < m->n; g++)
        for (size_t h = 0; h < m->n && !m->fams[g].left_out; h++)
            if (series_of(m->fams[g].name, m->fams[h].name,
                          m->fams[h].type)) {
                m->fams[g].left_out = true;
                if (!scan_problem(sc, "%s is left out: it would be read as "
                                      "a series of the %s %s",
                                  m->fams[g].name, m->fams[h].type,
                                  m->fams[h].name))
                    return -ENOMEM;
            }
    return 0;
}

static int merge_snapshots(struct merge *m, struct scan *sc)
{
    int ret;

    if ((m->map = calloc(sc->nsnaps, sizeof(*m->map))) == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < sc->nsnaps; i++) {
        const struct snapshot *s = sc->snaps[i];

        if (!s->live)
            continue;
        if ((m->map[i] = calloc(s->nfamilies + 1, sizeof(size_t))) == NULL)
            return -ENOMEM;
        for (size_t f = 0; f < s->nfamilies; f++)
            if ((ret = merge_family(m, sc, s, &s->families[f],
                                    &m->map[i][f])) != 0)
                return ret;
    }
    return leave_out_series(m, sc);
}

/* A label value, escaped as the format wants. */
static void write_value(FILE *out, const char *v)
{
    for (; *v != '\0'; v++) {
        if (*v == '\\' || *v == '"')
            fprintf(out, "\\%c", *v);
        else if (*v == '\n')
            fputs("\\n", out);
        else
            putc(*v, out);
    }
}

static void write_sample(FILE *out, const struct snapshot *s,
                         const struct sample *x)
{
    fprintf(out, "%s{pid=\"%ld\",context=\"%u\"", x->name, (long)s->pid,
            s->context);
    for (size_t i = 0; i < x->nlabels; i++) {
        const struct label *l = &s->labels[x->label0 + i];
        bool ours = strcmp(l->name, "pid") == 0 ||
                    strcmp(l->name, "context") == 0;

        fprintf(out, ",%s%s=\"", ours ? "exported_" : "", l->name);
        write_value(out, l->value);
        putc('"', out);
    }
    fprintf(out, "} %s\n", x->value);
}

static void write_family(FILE *out, const struct merge *m,
                         const struct scan *sc, size_t g)
{
    const struct merged *x = &m->fams[g];

    if (x->left_out)
        return;
    if (x->help != NULL)
        fprintf(out, "# HELP %s %s\n", x->name, x->help);
    if (x->type != NULL)
        fprintf(out, "# TYPE %s %s\n", x->name, x->type);
    for (size_t i = 0; i < sc->nsnaps; i++) {
        const struct snapshot *s = sc->snaps[i];

        for (size_t k = 0; m->map[i] != NULL && k < s->nsamples; k++)
            if (m->map[i][s->samples[k].family] == g)
                write_sample(out, s, &s->samples[k]);
    }
}

int merge_write(struct scan *sc, FILE *out)
{
    struct merge m = {0};
    int ret = merge_snapshots(&m, sc);

    for (size_t g = 0; ret == 0 && g < m.n; g++)
        write_family(out, &m, sc, g);
    for (size_t i = 0; m.map != NULL && i < sc->nsnaps; i++)
        free(m.map[i]);
    free(m.map);
    free(m.fams);
    return ret;
}
