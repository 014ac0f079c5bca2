# ferry_meta.m4 -- what the metadata services and the bootstrap need.

# FERRY_CHECK_NETTLE(MIN-VERSION)
# -------------------------------
# nettle is required: the bootstrap authenticates peers with HMAC-SHA256
# and compares in constant time, and the etcd backend base64-encodes keys.
# Sets NETTLE_CFLAGS and NETTLE_LIBS.
AC_DEFUN([FERRY_CHECK_NETTLE], [
PKG_CHECK_MODULES([NETTLE], [nettle >= $1], [],
  [AC_MSG_ERROR([nettle >= $1 not found: the bootstrap's authentication (HMAC-SHA256) needs it; install nettle-dev (Debian: apt-get install nettle-dev) or set PKG_CONFIG_PATH (pkg-config said: $NETTLE_PKG_ERRORS)])])
NETTLE_VERSION=`$PKG_CONFIG --modversion nettle`
])

# FERRY_CHECK_ETCD(CURL-MIN, JSONC-MIN)
# -------------------------------------
# --with-etcd (yes: required; no: left out; default: if found) builds the
# etcd metadata backend, which talks to etcd's v3 HTTP/JSON gateway with
# libcurl and parses with json-c.  Without it, etcd:// URLs are refused
# with a sentence saying how to get it.  Sets ETCD_CFLAGS, ETCD_LIBS,
# FERRY_HAVE_ETCD (C and Automake) and ferry_etcd_summary.
AC_DEFUN([FERRY_CHECK_ETCD], [
AC_ARG_WITH([etcd],
  [AS_HELP_STRING([--with-etcd],
    [the etcd metadata backend, with libcurl >= $1 and json-c >= $2 (default: if both are found)])],
  [], [with_etcd=check])
ferry_have_etcd=no
AS_IF([test "$with_etcd" != no], [
  PKG_CHECK_MODULES([ETCD], [libcurl >= $1 json-c >= $2], [ferry_have_etcd=yes],
    [AS_IF([test "$with_etcd" = yes],
       [AC_MSG_ERROR([--with-etcd: libcurl >= $1 and json-c >= $2 not found: install libcurl4-openssl-dev and libjson-c-dev (pkg-config said: $ETCD_PKG_ERRORS)])])])
])
AS_IF([test "$ferry_have_etcd" = yes], [
  AC_DEFINE([FERRY_HAVE_ETCD], [1], [Define to 1 to build the etcd metadata backend.])
  ferry_etcd_summary="yes (libcurl `$PKG_CONFIG --modversion libcurl`, json-c `$PKG_CONFIG --modversion json-c`)"
], [
  AC_DEFINE([FERRY_HAVE_ETCD], [0])
  ferry_etcd_summary="no (--with-etcd=$with_etcd): etcd:// URLs are refused"
])
AM_CONDITIONAL([HAVE_ETCD], [test "$ferry_have_etcd" = yes])
])
