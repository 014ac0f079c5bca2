/*
 * ferry_stat: a snapshot's text, parsed.  The text is cut in place: every
 * name and value points into it, label values unescaped where they stand
 * (never longer than their escaped form).
 *
 * The exposition is checked as strictly as Prometheus' own parser
 * (expfmt) checks it, since --prometheus passes it on: a file it would
 * refuse is refused here, naming the line, rather than breaking the
 * scrape of every other process.
 */
#include "parse.h"

#include "util.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The header's lines, each once; the last two came later (a writer
 * before them leaves them out). */
enum field {
    F_PID = 1,
    F_STARTTIME = 2,
    F_CONTEXT = 4,
    F_WRITTEN = 8,
    F_PROGRAM = 16,
    F_PIDNS = 32,
    F_INTERVAL = 64
};

static const struct {
    const char *key;
    enum field bit;
    bool required;
} header_fields[] = {{"pid", F_PID, true},
                     {"starttime", F_STARTTIME, true},
                     {"context", F_CONTEXT, true},
                     {"written", F_WRITTEN, true},
                     {"program", F_PROGRAM, true},
                     {"pidns", F_PIDNS, false},
                     {"interval", F_INTERVAL, false}};

struct parser {
    struct snapshot *s;
    size_t line;   /* the line being read, from 1 */
    bool body;     /* a HELP, TYPE or sample came: the header is over */
    unsigned seen; /* enum field bits */
    char *err;
    size_t errlen;
};

static int bad(struct parser *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int bad(struct parser *p, const char *fmt, ...)
{
    int n = snprintf(p->err, p->errlen, "%s:%zu: ", p->s->path, p->line);
    va_list ap;

    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < p->errlen)
        vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

/* Said like the rest, but -ENOMEM: the scan stops. */
static int out_of_memory(struct parser *p)
{
    bad(p, "out of memory");
    return -ENOMEM;
}

static char *skip_blank(char *s)
{
    return s + strspn(s, " \t");
}

/* The word at *rest, ended by a NUL; *rest moves past the blanks after. */
static char *take_word(char **rest)
{
    char *word = *rest, *end = word + strcspn(word, " \t");

    *rest = skip_blank(end);
    *end = '\0';
    return word;
}

#define LETTERS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_"
#define DIGITS "0123456789"

/* Length of the metric name ([a-zA-Z_:][a-zA-Z0-9_:]*) s starts with. */
static size_t metric_name_length(const char *s)
{
    if (*s == '\0' || strchr(LETTERS ":", *s) == NULL)
        return 0;
    return 1 + strspn(s + 1, LETTERS ":" DIGITS);
}

/* Length of the label name ([a-zA-Z_][a-zA-Z0-9_]*) s starts with. */
static size_t label_name_length(const char *s)
{
    if (*s == '\0' || strchr(LETTERS, *s) == NULL)
        return 0;
    return 1 + strspn(s + 1, LETTERS DIGITS);
}

static bool is_name(const char *s, size_t (*length)(const char *))
{
    return *s != '\0' && length(s) == strlen(s);
}

/* A sample value as Prometheus reads one: a decimal number, Inf or NaN. */
static bool number(const char *t, double *v)
{
    static const char *const special[] = {"+Inf", "-Inf", "Inf", "NaN"};
    char *end;

    for (size_t i = 0; i < sizeof(special) / sizeof(special[0]); i++)
        if (strcasecmp(t, special[i]) == 0) {
            *v = strtod(t, NULL);
            return true;
        }
    /* Only these characters: strtod would also take hex and "nan(...)",
     * which Prometheus refuses. */
    if (*t == '\0' || t[strspn(t, DIGITS ".eE+-")] != '\0')
        return false;
    errno = 0;
    *v = strtod(t, &end);
    /* Prometheus refuses what overflows to infinity, not what underflows
     * to 0. */
    return *end == '\0' && !(errno == ERANGE && isinf(*v));
}

/* Whether s is valid UTF-8, as Prometheus wants label values: no
 * overlong forms, surrogates or code points past U+10FFFF. */
static bool utf8_valid(const char *text)
{
    const unsigned char *s = (const unsigned char *)text;

    while (*s != '\0') {
        size_t n = *s < 0x80             ? 0
                   : (*s & 0xe0) == 0xc0 ? 1
                   : (*s & 0xf0) == 0xe0 ? 2
                   : (*s & 0xf8) == 0xf0 ? 3
                                         : 4;
        unsigned long cp = *s & (0x7fu >> n);

        if (n == 4)
            return false;
        for (size_t i = 1; i <= n; i++) {
            if ((s[i] & 0xc0) != 0x80)
                return false;
            cp = cp << 6 | (s[i] & 0x3f);
        }
        if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) ||
            (n == 3 && (cp < 0x10000 || cp > 0x10ffff)) ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        s += n + 1;
    }
    return true;
}

/* A timestamp: an integer (milliseconds). */
static bool integer(const char *t)
{
    t += *t == '-';
    return *t != '\0' && t[strspn(t, DIGITS)] == '\0';
}

static int header_number(struct parser *p, const char *key, const char *t,
                         unsigned long long min, unsigned long long max,
                         unsigned long long *v)
{
    char *end = NULL;

    errno = 0;
    /* Digits only: strtoull would take blanks and a sign. */
    if (*t >= '0' && *t <= '9')
        *v = strtoull(t, &end, 10);
    if (end == NULL || *end != '\0' || errno != 0 || *v < min || *v > max)
        return bad(p, "# %s: \"%s\" is not a number from %llu to %llu", key,
                   t, min, max);
    return 0;
}

/* The first line says what the file is. */
static int first_line(struct parser *p, const char *line)
{
    static const char magic[] = "# ferry telemetry ";

    if (strncmp(line, magic, strlen(magic)) != 0)
        return bad(p, "not a ferry telemetry snapshot: the first line is "
                      "not \"# ferry telemetry 1\"");
    if (strcmp(line + strlen(magic), "1") != 0)
        return bad(p, "snapshot format %s; this ferry_stat reads format 1",
                   line + strlen(magic));
    return 0;
}

static int header_value(struct parser *p, enum field f, const char *key,
                        char *value)
{
    struct snapshot *s = p->s;
    unsigned long long v = 0;
    char *end = value;
    int ret;

    switch (f) {
    case F_PID:
        ret = header_number(p, key, value, 1, INT_MAX, &v);
        s->pid = (pid_t)v;
        return ret;
    case F_CONTEXT:
        ret = header_number(p, key, value, 1, UINT_MAX, &v);
        s->context = (unsigned)v;
        return ret;
    case F_STARTTIME:
        return header_number(p, key, value, 0, ULLONG_MAX, &s->starttime);
    case F_PIDNS:
        return header_number(p, key, value, 0, ULLONG_MAX, &s->pidns);
    case F_INTERVAL:
        ret = header_number(p, key, value, 100, INT_MAX, &v);
        s->interval_ms = (unsigned)v;
        return ret;
    case F_WRITTEN:
        if (value[strspn(value, DIGITS ".")] == '\0')
            s->written = strtod(value, &end);
        if (*end != '\0' || end == value)
            return bad(p, "# written: \"%s\" is not a time in seconds",
                       value);
        return 0;
    default:
        s->program = value;
        return 0;
    }
}

/* A "# KEY VALUE" line before the exposition; other keys are comments
 * (a later format may add some). */
static int header_line(struct parser *p, const char *key, char *value)
{
    for (size_t i = 0; i < sizeof(header_fields) / sizeof(header_fields[0]);
         i++) {
        enum field f = header_fields[i].bit;

        if (strcmp(key, header_fields[i].key) != 0)
            continue;
        if (p->seen & f)
            return bad(p, "a second \"# %s\" line", key);
        p->seen |= f;
        return header_value(p, f, key, value);
    }
    return 0;
}

/* The family named `name`, or a new one, into *f. */
static int find_family(struct parser *p, const char *name, size_t *f)
{
    struct snapshot *s = p->s;
    struct family *fams;

    for (*f = 0; *f < s->nfamilies; (*f)++)
        if (strcmp(s->families[*f].name, name) == 0)
            return 0;
    fams = grow(s->families, &s->cap_families, s->nfamilies,
                sizeof(*fams));
    if (fams == NULL)
        return out_of_memory(p);
    s->families = fams;
    fams[s->nfamilies] = (struct family){.name = name};
    *f = s->nfamilies++;
    return 0;
}

/* Only \\ and \n escape anything in HELP text. */
static bool help_escapes_valid(const char *t)
{
    for (; (t = strchr(t, '\\')) != NULL; t += 2)
        if (t[1] != '\\' && t[1] != 'n')
            return false;
    return true;
}

/* "# HELP NAME TEXT" or "# TYPE NAME TYPE". */
static int declare(struct parser *p, bool help, char *rest)
{
    static const char *const types[] = {"counter", "gauge", "histogram",
                                        "summary", "untyped"};
    const char *kw = help ? "HELP" : "TYPE";
    char *name = take_word(&rest), *type;
    struct family *fam;
    size_t f;
    int ret;

    if (!is_name(name, metric_name_length))
        return bad(p, "# %s: \"%s\" is no metric name", kw, name);
    if ((ret = find_family(p, name, &f)) != 0)
        return ret;
    fam = &p->s->families[f];
    if (fam->has_samples)
        return bad(p, "# %s %s after samples of %s", kw, name, name);
    if (help ? fam->help != NULL : fam->type != NULL)
        return bad(p, "a second # %s for %s", kw, name);
    p->body = true;
    if (help) {
        if (!utf8_valid(rest))
            return bad(p, "# HELP %s: not UTF-8", name);
        if (!help_escapes_valid(rest))
            return bad(p, "# HELP %s: a backslash escapes only \\ and n",
                       name);
        fam->help = rest;
        return 0;
    }
    type = take_word(&rest);
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (strcmp(type, types[i]) == 0 && *rest == '\0') {
            fam->type = type;
            return 0;
        }
    return bad(p, "# TYPE %s: unknown type \"%s\"", name, type);
}

static int comment(struct parser *p, char *line)
{
    char *rest = skip_blank(line + 1), *word = take_word(&rest);

    if (strcmp(word, "HELP") == 0 || strcmp(word, "TYPE") == 0)
        return declare(p, word[0] == 'H', rest);
    return p->body ? 0 : header_line(p, word, rest);
}

/* A quoted label value at *rest, unescaped in place into *value. */
static int unquote(struct parser *p, char **rest, char **value)
{
    char *r = *rest + 1, *w = r;

    *value = r;
    for (; *r != '"'; r++, w++) {
        if (*r == '\0')
            return bad(p, "a label value without its closing quote");
        if (*r != '\\') {
            *w = *r;
            continue;
        }
        r++;
        if (*r != '\\' && *r != '"' && *r != 'n')
            return bad(p, "a label value escapes '%c'; only \\\\, \\\" and "
                          "\\n are escapes",
                       *r != '\0' ? *r : ' ');
        *w = *r == 'n' ? '\n' : *r;
    }
    *rest = r + 1;
    *w = '\0';
    return utf8_valid(*value) ? 0
                              : bad(p, "a label value that is not UTF-8");
}

static int add_label(struct parser *p, size_t label0, char *name,
                     char *value)
{
    struct snapshot *s = p->s;
    struct label *labels;

    if (strcmp(name, "__name__") == 0)
        return bad(p, "the label name __name__ is Prometheus' own");
    for (size_t i = label0; i < s->nlabels; i++)
        if (strcmp(s->labels[i].name, name) == 0)
            return bad(p, "label %s twice in one sample", name);
    labels = grow(s->labels, &s->cap_labels, s->nlabels, sizeof(*labels));
    if (labels == NULL)
        return out_of_memory(p);
    s->labels = labels;
    labels[s->nlabels++] = (struct label){name, value};
    return 0;
}

/* The labels after '{' at *rest, up to and past the '}'. */
static int labels(struct parser *p, char **rest, size_t label0)
{
    char *r = *rest;

    for (;;) {
        char *name, *end, *value;
        size_t n;
        int ret;

        r = skip_blank(r);
        if (*r == '}')
            break;
        if ((n = label_name_length(r)) == 0)
            return bad(p, "expected a label name or '}' at \"%.20s\"", r);
        name = r;
        end = r + n;
        r = skip_blank(end);
        if (*r != '=')
            return bad(p, "expected '=' after label %.*s", (int)n, name);
        *end = '\0';
        r = skip_blank(r + 1);
        if (*r != '"')
            return bad(p, "label %s: expected a quoted value", name);
        if ((ret = unquote(p, &r, &value)) != 0 ||
            (ret = add_label(p, label0, name, value)) != 0)
            return ret;
        r = skip_blank(r);
        if (*r == ',')
            r++;
        else if (*r != '}')
            return bad(p, "expected ',' or '}' after label %s", name);
    }
    *rest = r + 1;
    return 0;
}

/*
 * The family of a sample named `name`, as Prometheus' parser finds it:
 * the family of that name, else the histogram or summary that has it
 * among its series, else a new family.
 */
static int family_of(struct parser *p, const char *name, size_t *f)
{
    const struct snapshot *s = p->s;

    for (*f = 0; *f < s->nfamilies; (*f)++)
        if (strcmp(s->families[*f].name, name) == 0)
            return 0;
    for (*f = 0; *f < s->nfamilies; (*f)++)
        if (series_of(name, s->families[*f].name, s->families[*f].type))
            return 0;
    return find_family(p, name, f);
}

/* Labels the family's type gives a meaning: a histogram's le and a
 * summary's quantile are numbers, and every bucket has its le. */
static int typed_labels(struct parser *p, const struct sample *x,
                        const struct family *fam)
{
    const char *type = fam->type != NULL ? fam->type : "";
    const char *special = strcmp(type, "histogram") == 0 ? "le"
                          : strcmp(type, "summary") == 0 ? "quantile"
                                                         : NULL;
    const char *v = special != NULL ? sample_label(p->s, x, special) : NULL;
    double d;

    if (v != NULL && !number(v, &d))
        return bad(p, "%s: %s=\"%s\" is not a number", x->name, special,
                   v);
    if (v == NULL && series_of(x->name, fam->name, type) &&
        strcmp(x->name + strlen(fam->name), "_bucket") == 0)
        return bad(p, "%s: a histogram bucket without its le label",
                   x->name);
    return 0;
}

/* The value, and a timestamp if any, at rest: x->value is their text. */
static int value(struct parser *p, char *rest, struct sample *x)
{
    char *v = skip_blank(rest), *end = v + strcspn(v, " \t");
    char *ts = skip_blank(end), *ts_end = ts + strcspn(ts, " \t");
    bool trailing = *skip_blank(ts_end) != '\0';
    char save = *end;

    *end = '\0';
    *ts_end = '\0';
    if (!number(v, &x->v))
        return bad(p, "%s: \"%s\" is not a number", x->name, v);
    if (trailing || (*ts != '\0' && !integer(ts)))
        return bad(p, "%s: unexpected text after the value", x->name);
    /* The timestamp stays, after the blanks that were there. */
    if (*ts != '\0')
        *end = save;
    x->value = v;
    return 0;
}

static int sample(struct parser *p, char *line)
{
    struct snapshot *s = p->s;
    struct sample x = {.name = line, .label0 = s->nlabels};
    size_t n = metric_name_length(line);
    char *rest = line + n, c = *rest;
    struct family *fam;
    struct sample *more;
    int ret;

    if (n == 0)
        return bad(p, "expected a metric name, a # line or a blank line "
                      "at \"%.20s\"",
                   line);
    if (c != '{' && c != ' ' && c != '\t')
        return bad(p, "%.*s: expected '{' or a value after the name",
                   (int)n, line);
    *rest++ = '\0';
    if (c == '{' && (ret = labels(p, &rest, x.label0)) != 0)
        return ret;
    x.nlabels = s->nlabels - x.label0;
    if ((ret = value(p, rest, &x)) != 0)
        return ret;
    if ((ret = family_of(p, x.name, &x.family)) != 0)
        return ret;
    fam = &s->families[x.family];
    if ((ret = typed_labels(p, &x, fam)) != 0)
        return ret;
    fam->has_samples = true;
    p->body = true;
    more = grow(s->samples, &s->cap_samples, s->nsamples, sizeof(x));
    if (more == NULL)
        return out_of_memory(p);
    s->samples = more;
    s->samples[s->nsamples++] = x;
    return 0;
}

static int parse_line(struct parser *p, char *line)
{
    if (p->line == 1)
        return first_line(p, line);
    line = skip_blank(line);
    if (*line == '#')
        return comment(p, line);
    return *line == '\0' ? 0 : sample(p, line);
}

static int parse(struct parser *p)
{
    char *line = p->s->text, *next;
    int ret;

    for (; line != NULL; line = next) {
        if ((next = strchr(line, '\n')) != NULL)
            *next++ = '\0';
        p->line++;
        if ((ret = parse_line(p, line)) != 0)
            return ret;
    }
    for (size_t i = 0; i < sizeof(header_fields) / sizeof(header_fields[0]);
         i++)
        if (header_fields[i].required && !(p->seen & header_fields[i].bit)) {
            p->line = 1;
            return bad(p, "the header has no \"# %s\" line",
                       header_fields[i].key);
        }
    return 0;
}

int snap_parse(struct snapshot *s, char *err, size_t errlen)
{
    struct parser p = {.s = s, .err = err, .errlen = errlen};

    return parse(&p);
}
