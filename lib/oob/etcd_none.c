/*
 * The etcd backend of a ferry configured without libcurl or json-c: it
 * says how to get the real one (meta.h).
 */
#include "oob/meta.h"

static int etcd_none_open(struct ferry_meta *m, const char *url,
                          const char *key, const void *blob, size_t len)
{
    (void)m, (void)key, (void)blob, (void)len;
    return ferry__error(FERRY_ENOTSUP,
                        "metadata URL \"%s\": this ferry was built without "
                        "the etcd backend (configure found no libcurl or "
                        "json-c); install libcurl4-openssl-dev and "
                        "libjson-c-dev and run configure --with-etcd",
                        url);
}

/* Never reached: open fails, so no meta of this backend exists. */
const struct ferry__meta_backend ferry__meta_etcd = {
    .scheme = "etcd",
    .tls_scheme = true,
    .open = etcd_none_open,
};
