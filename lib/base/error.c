/*
 * Error codes, their strings, and the per-thread sentence behind
 * ferry_last_error().
 */
#include "base/error.h"

#include "base/defs.h"
#include "base/log.h"
#include "base/text.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * The sentence explaining the last error a thread got from ferry: room for
 * a refusal that names every provider libfabric has.
 *
 * It is not a thread-local array: the registration cache's reader slot is
 * initial-exec TLS (reached from malloc hooks), which puts all of
 * libferry's thread-locals in the static TLS block, and a dlopen()ed
 * libferry (Python's module) gets only a few hundred bytes of it ("cannot
 * allocate memory in static TLS block").  So each thread points at a
 * buffer from a pool: a thread's buffer goes back to the pool when it
 * exits, and every buffer stays reachable from `all`, never freed, so
 * there are at most as many as threads ever ran at once.
 */
struct sentence {
    struct sentence *next_all;
    struct sentence *next_free;
    char text[4096];
};

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sentence *all, *pool;
static pthread_once_t exit_key_once = PTHREAD_ONCE_INIT;
static pthread_key_t exit_key; /* its destructor returns the buffer */
/* Initial-exec, like the reader slot: that one already puts libferry's
 * thread-locals in the static block, and every public call clears the
 * sentence, which through __tls_get_addr cost a call each time. */
static _Thread_local struct sentence *mine
    __attribute__((tls_model("initial-exec")));

static void give_back(void *buffer)
{
    struct sentence *s = buffer;

    pthread_mutex_lock(&pool_lock);
    s->next_free = pool;
    pool = s;
    pthread_mutex_unlock(&pool_lock);
    mine = NULL;
}

static void make_exit_key(void)
{
    if (pthread_key_create(&exit_key, give_back) != 0)
        abort(); /* only when a process has used up every key */
}

/* This thread's buffer, or NULL when there is no memory for one. */
static struct sentence *my_sentence(void)
{
    struct sentence *s = mine;

    if (s != NULL)
        return s;
    pthread_once(&exit_key_once, make_exit_key);
    pthread_mutex_lock(&pool_lock);
    s = pool;
    if (s != NULL) {
        pool = s->next_free;
    } else if ((s = calloc(1, sizeof(*s))) != NULL) {
        s->next_all = all;
        all = s;
    }
    pthread_mutex_unlock(&pool_lock);
    if (s == NULL)
        return NULL;
    s->text[0] = '\0';
    pthread_setspecific(exit_key, s);
    mine = s;
    return s;
}

const char *ferry_strerror(int err)
{
    if (err == 0)
        return "success";
    switch (err) {
#define FERRY__ERRNO_CASE(name, value, kind, text)                            \
    case (value):                                                             \
        return text;
        FERRY_ERRNO_MAP(FERRY__ERRNO_CASE)
#undef FERRY__ERRNO_CASE
    default:
        return "unknown ferry error";
    }
}

const char *ferry_last_error(void)
{
    return mine != NULL ? mine->text : "";
}

/*
 * Ends a sentence of `full` bytes that did not fit in buf[cap] at the last
 * word boundary, saying how much was left out, rather than mid-word.
 */
static void end_cleanly(char *buf, size_t cap, size_t full)
{
    static const char tail_fmt[] = " [... %zu more characters left out]";
    /* Room for the tail with the largest count it can hold. */
    size_t keep = cap - 1 - (size_t)snprintf(NULL, 0, tail_fmt, full);

    while (keep > 0 && buf[keep] != ' ')
        keep--;
    snprintf(buf + keep, cap - keep, tail_fmt, full - keep);
}

int ferry__error(int err, const char *fmt, ...)
{
    va_list ap;
    struct sentence *mine_now = my_sentence();
    char sentence[sizeof(mine_now->text)];
    int full;

    /* Through a local buffer: a caller may pass ferry_last_error() itself
     * as an argument, to wrap an inner sentence in an outer one. */
    va_start(ap, fmt);
    full = vsnprintf(sentence, sizeof(sentence), fmt, ap);
    va_end(ap);
    if (full >= (int)sizeof(sentence))
        end_cleanly(sentence, sizeof(sentence), (size_t)full);
    ferry__text_printable(sentence);
    if (mine_now != NULL)
        memcpy(mine_now->text, sentence, sizeof(sentence));
    FERRY_LOG_DEBUG("error %d (%s): %s", err, ferry_strerror(err), sentence);
    return err;
}

void ferry__error_clear(void)
{
    if (mine != NULL)
        mine->text[0] = '\0';
}

int ferry__error_from_fi(int fi_err)
{
    switch (-fi_err) {
    case FI_EINVAL:
        return FERRY_EINVAL;
    case FI_ENOMEM:
        return FERRY_ENOMEM;
    case FI_EAGAIN:
        return FERRY_EAGAIN;
    case FI_ECANCELED:
        return FERRY_ECANCELED;
    case FI_ETIMEDOUT:
        return FERRY_ETIMEDOUT;
    case FI_ENOSYS:
    case FI_EOPNOTSUPP:
        return FERRY_ENOTSUP;
    case FI_ECONNRESET:
    case FI_ECONNABORTED:
    case FI_ENOTCONN:
    case FI_ECONNREFUSED:
        return FERRY_ECONNRESET;
    case FI_EHOSTUNREACH:
    case FI_ENETUNREACH:
    case FI_EADDRNOTAVAIL:
        return FERRY_EHOSTUNREACH;
    case FI_EIO:
    case FI_EREMOTEIO:
        return FERRY_EIO;
    case FI_ENOKEY:
    case FI_EKEYREJECTED:
    case FI_EACCES:
        return FERRY_EPROTO;
    default:
        return FERRY_EPROVIDER;
    }
}

/* What the sentences call each kind of handle, by its magic number (the
 * last one also stands for a magic not listed). */
static const struct {
    uint32_t magic;
    const char *name; /* "<name> is NULL" */
    const char *live; /* "not a live <live> (closed, or ...)" */
} handle_kinds[] = {
    {FERRY__MAGIC_CTX, "context", "ferry context"},
    {FERRY__MAGIC_PEER, "peer", "ferry peer"},
    {FERRY__MAGIC_MEM, "registration", "ferry registration"},
    {FERRY__MAGIC_RMEM, "remote region", "remote region"},
    {FERRY__MAGIC_REQ, "request", "ferry request"},
    {FERRY__MAGIC_DLIST, "descriptor list", "descriptor list"},
    {FERRY__MAGIC_FAN, "fan-out", "fan-out"},
    {FERRY__MAGIC_META, "metadata handle", "metadata handle"},
    {FERRY__MAGIC_PREP, "prepared transfer", "prepared transfer"},
    {FERRY__MAGIC_TOPO, "topology", "topology"},
};

int ferry__handle_error(const void *handle, uint32_t magic, const char *what)
{
    size_t k = 0;

    while (k + 1 < FERRY__ARRAY_LEN(handle_kinds) &&
           handle_kinds[k].magic != magic)
        k++;
    if (handle == NULL)
        return ferry__error(FERRY_EINVAL, "%s: %s is NULL", what,
                            handle_kinds[k].name);
    /* Its magic number (every handle struct starts with one) is not
     * magic: ferry__check_handle looked. */
    return ferry__error(FERRY_EHANDLE,
                        "%s: not a live %s (closed, or another kind of "
                        "handle)",
                        what, handle_kinds[k].live);
}
