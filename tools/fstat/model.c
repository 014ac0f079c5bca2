/*
 * ferry_stat: the exposition format's questions about a parsed snapshot
 * (model.h).
 */
#include "model.h"

#include <string.h>

bool series_of(const char *name, const char *family, const char *type)
{
    size_t n = strlen(family);
    const char *suffix = name + n;
    bool histogram = type != NULL && strcmp(type, "histogram") == 0;
    bool summary = type != NULL && strcmp(type, "summary") == 0;

    if (strncmp(name, family, n) != 0)
        return false;
    if (strcmp(suffix, "_sum") == 0 || strcmp(suffix, "_count") == 0)
        return histogram || summary;
    return histogram && strcmp(suffix, "_bucket") == 0;
}

const char *sample_label(const struct snapshot *s, const struct sample *x,
                         const char *name)
{
    for (size_t i = 0; i < x->nlabels; i++)
        if (strcmp(s->labels[x->label0 + i].name, name) == 0)
            return s->labels[x->label0 + i].value;
    return NULL;
}
