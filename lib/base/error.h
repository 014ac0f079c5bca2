/*
 * Errors: ferry__error() records the sentence behind ferry_last_error();
 * handle checks by magic.
 */
#ifndef FERRY_BASE_ERROR_H
#define FERRY_BASE_ERROR_H

#include <stddef.h>
#include <stdint.h>

/* The first field of every handle: what it is, or that it was freed. */
enum ferry__magic {
    FERRY__MAGIC_CTX = 0x66637478,  /* "fctx" */
    FERRY__MAGIC_PEER = 0x66706572, /* "fper" */
    FERRY__MAGIC_MEM = 0x666d656d,  /* "fmem" */
    FERRY__MAGIC_RMEM = 0x66726d6d, /* "frmm" */
    FERRY__MAGIC_REQ = 0x66726571,  /* "freq" */
    FERRY__MAGIC_DLIST = 0x66646c73, /* "fdls" */
    FERRY__MAGIC_PREP = 0x66707270, /* "fprp" */
    FERRY__MAGIC_FAN = 0x6666616e,  /* "ffan" */
    FERRY__MAGIC_META = 0x666d7461, /* "fmta" */
    FERRY__MAGIC_TOPO = 0x66746f70, /* "ftop" */
    FERRY__MAGIC_DEAD = 0x64656164, /* "dead": freed, for use-after-free hints */
};

/*
 * Records the sentence for ferry_last_error() and returns err, so that a
 * failure reads `return ferry__error(FERRY_EINVAL, "iov[%zu]: ...", i);`.
 */
int ferry__error(int err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Clears the thread's last error (called on entry of public calls). */
void ferry__error_clear(void);
/* Maps a negative libfabric error (-FI_E*) to a ferry code. */
int ferry__error_from_fi(int fi_err);
/* The sentence and code for a handle that failed ferry__check_handle
 * (NULL, or its magic not the one asked for); never 0. */
int ferry__handle_error(const void *handle, uint32_t magic, const char *what);
/*
 * Checks a public handle: FERRY_EINVAL for NULL, FERRY_EHANDLE when it is
 * dead or of another kind (every handle struct starts with its magic),
 * each with a sentence starting with `what`.  Inline, and the handle
 * kind's name looked up only for the sentence: a write checks three
 * handles and each ferry_req_test one.
 */
static inline int ferry__check_handle(const void *handle, uint32_t magic,
                                      const char *what)
{
    if (handle != NULL && *(const uint32_t *)handle == magic)
        return 0;
    return ferry__handle_error(handle, magic, what);
}
#define ferry__check_ctx(h, what) ferry__check_handle((h), FERRY__MAGIC_CTX, (what))
#define ferry__check_peer(h, what) ferry__check_handle((h), FERRY__MAGIC_PEER, (what))
#define ferry__check_mem(h, what) ferry__check_handle((h), FERRY__MAGIC_MEM, (what))
#define ferry__check_rmem(h, what) ferry__check_handle((h), FERRY__MAGIC_RMEM, (what))
#define ferry__check_req(h, what) ferry__check_handle((h), FERRY__MAGIC_REQ, (what))
#define ferry__check_dlist(h, what) ferry__check_handle((h), FERRY__MAGIC_DLIST, (what))
#define ferry__check_prep(h, what) ferry__check_handle((h), FERRY__MAGIC_PREP, (what))
#define ferry__check_fan(h, what) ferry__check_handle((h), FERRY__MAGIC_FAN, (what))
#define ferry__check_meta(h, what) ferry__check_handle((h), FERRY__MAGIC_META, (what))
#define ferry__check_topo(h, what) ferry__check_handle((h), FERRY__MAGIC_TOPO, (what))

#endif /* FERRY_BASE_ERROR_H */
