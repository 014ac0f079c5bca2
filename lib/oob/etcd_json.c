/*
 * Reading etcd's answers (etcd.h): every field ferry reads is checked for
 * its JSON kind before json-c is asked for its value, since json-c
 * asserts (json_object_array_length) or hands back NULL
 * (json_object_get_string of null) on a value of another kind.  What
 * etcd, or a proxy in front of it, answered wrong becomes FERRY_EPROTO
 * with a sentence naming the endpoint, the request, the field and what
 * was expected there.
 */
#include "oob/etcd.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A JSON kind in a sentence. */
static const char *kind_words(enum json_type t)
{
    switch (t) {
    case json_type_null:
        return "null";
    case json_type_boolean:
        return "a boolean";
    case json_type_double:
    case json_type_int:
        return "a number";
    case json_type_object:
        return "an object";
    case json_type_array:
        return "an array";
    case json_type_string:
        return "a string";
    }
    return "a value of no JSON kind";
}

/* The fault of value v (got: what it is; NULL when absent), expected to
 * be want. */
static int fault(const struct ferry__etcd_value *v, const char *got,
                 const char *want)
{
    if (got == NULL)
        return ferry__error(FERRY_EPROTO, "etcd at %s answered %s with no "
                            "\"%s\", where %s was expected",
                            v->endpoint, v->request, v->place, want);
    if (v->place[0] == '\0')
        return ferry__error(FERRY_EPROTO, "etcd at %s answered %s with %s, "
                            "where %s was expected",
                            v->endpoint, v->request, got, want);
    return ferry__error(FERRY_EPROTO, "etcd at %s answered %s with \"%s\" as "
                        "%s, where %s was expected",
                        v->endpoint, v->request, v->place, got, want);
}

int ferry__etcd_parse(const char *endpoint, const char *request,
                      const char *text, struct ferry__etcd_value *answer)
{
    enum json_tokener_error err;

    *answer = (struct ferry__etcd_value){.endpoint = endpoint,
                                         .request = request};
    answer->json = json_tokener_parse_verbose(text, &err);
    if (err != json_tokener_success)
        return ferry__error(FERRY_EPROTO, "etcd at %s answered %s with "
                            "something that is not JSON (%s)",
                            endpoint, request, json_tokener_error_desc(err));
    if (!json_object_is_type(answer->json, json_type_object)) {
        int ret = fault(answer,
                        kind_words(json_object_get_type(answer->json)),
                        "an object");

        json_object_put(answer->json);
        answer->json = NULL;
        return ret;
    }
    return 0;
}

/* A value of the answer parent belongs to, at the place fmt names (a place
 * too long for the field ends in "...": it only goes into sentences). */
__attribute__((format(printf, 3, 4))) static void
value_in(const struct ferry__etcd_value *parent, struct ferry__etcd_value *v,
         const char *fmt, ...)
{
    va_list ap;
    int n;

    *v = (struct ferry__etcd_value){.endpoint = parent->endpoint,
                                    .request = parent->request};
    va_start(ap, fmt);
    n = vsnprintf(v->place, sizeof(v->place), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(v->place))
        memcpy(v->place + sizeof(v->place) - 4, "...", 4);
}

/* Finds field name of o into *field, its place named; false when it is
 * absent, or o is no object (the caller checked o's kind). */
static bool lookup(const struct ferry__etcd_value *o, const char *name,
                   struct ferry__etcd_value *field)
{
    value_in(o, field, "%s%s%s", o->place, o->place[0] != '\0' ? "." : "",
             name);
    return json_object_object_get_ex(o->json, name, &field->json);
}

int ferry__etcd_field(const struct ferry__etcd_value *o, const char *name,
                      enum json_type want, bool required,
                      struct ferry__etcd_value *field)
{
    if (!lookup(o, name, field))
        return required ? fault(field, NULL, kind_words(want)) : 0;
    if (!json_object_is_type(field->json, want))
        return fault(field, kind_words(json_object_get_type(field->json)),
                     kind_words(want));
    return 0;
}

size_t ferry__etcd_length(const struct ferry__etcd_value *array)
{
    return json_object_is_type(array->json, json_type_array)
               ? json_object_array_length(array->json)
               : 0;
}

int ferry__etcd_item(const struct ferry__etcd_value *array, size_t i,
                     enum json_type want, struct ferry__etcd_value *item)
{
    value_in(array, item, "%s[%zu]", array->place, i);
    item->json = i < ferry__etcd_length(array)
                     ? json_object_array_get_idx(array->json, i)
                     : NULL;
    if (!json_object_is_type(item->json, want))
        return fault(item, kind_words(json_object_get_type(item->json)),
                     kind_words(want));
    return 0;
}

int ferry__etcd_string(const struct ferry__etcd_value *o, const char *name,
                       bool required, const char **s)
{
    struct ferry__etcd_value v;
    int ret = ferry__etcd_field(o, name, json_type_string, required, &v);

    *s = ret == 0 && v.json != NULL ? json_object_get_string(v.json) : NULL;
    return ret;
}

int ferry__etcd_bool(const struct ferry__etcd_value *o, const char *name,
                     bool *b)
{
    struct ferry__etcd_value v;
    int ret = ferry__etcd_field(o, name, json_type_boolean, false, &v);

    *b = ret == 0 && v.json != NULL && json_object_get_boolean(v.json);
    return ret;
}

/* s's characters for a sentence: at most 40, each one not printable as
 * '?' (the string is whatever etcd sent). */
static void printable(const char *s, char *out, size_t cap)
{
    size_t n = 0;

    for (; s[n] != '\0' && n < 40 && n + 1 < cap; n++)
        out[n] = s[n] >= 0x20 && s[n] < 0x7f ? s[n] : '?';
    out[n] = '\0';
}

/*
 * etcd writes int64s as strings of digits (proto3's JSON); a number is
 * taken too, as long as it is an integer.
 */
int ferry__etcd_int64(const struct ferry__etcd_value *o, const char *name,
                      bool required, int64_t *v)
{
    static const char *const want = "a 64-bit integer";
    struct ferry__etcd_value f;
    char *end, shown[48], got[64];
    const char *s;
    long long n;

    *v = 0;
    if (!lookup(o, name, &f))
        return required ? fault(&f, NULL, want) : 0;
    if (json_object_is_type(f.json, json_type_int)) {
        *v = json_object_get_int64(f.json);
        return 0;
    }
    if (!json_object_is_type(f.json, json_type_string))
        return fault(&f, kind_words(json_object_get_type(f.json)), want);
    s = json_object_get_string(f.json);
    errno = 0;
    n = strtoll(s, &end, 10);
    if (errno == 0 && end != s && *end == '\0') {
        *v = n;
        return 0;
    }
    printable(s, shown, sizeof(shown));
    snprintf(got, sizeof(got), "a string, \"%s\"", shown);
    return fault(&f, got, want);
}

int ferry__etcd_revision(const struct ferry__etcd_value *o, const char *name,
                         int64_t *v)
{
    struct ferry__etcd_value f;
    char got[48], want[48];
    int ret = ferry__etcd_int64(o, name, true, v);

    if (ret != 0 || (*v >= 0 && *v < INT64_MAX))
        return ret;
    lookup(o, name, &f);
    snprintf(got, sizeof(got), "%" PRId64, *v);
    snprintf(want, sizeof(want), "a revision from 0 to %" PRId64,
             INT64_MAX - 1);
    *v = 0;
    return fault(&f, got, want);
}
