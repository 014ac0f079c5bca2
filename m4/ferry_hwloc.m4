# ferry_hwloc.m4 -- --with-hwloc[=DIR].

# FERRY_CHECK_HWLOC(MIN-VERSION)
# ------------------------------
# hwloc is required (topology, NIC/GPU matching), so --without-hwloc is
# refused.  DIR is a prefix whose lib/pkgconfig (or lib64/pkgconfig) holds
# hwloc.pc; it is searched before PKG_CONFIG_PATH.  Sets HWLOC_CFLAGS,
# HWLOC_LIBS and HWLOC_VERSION.
AC_DEFUN([FERRY_CHECK_HWLOC], [
AC_ARG_WITH([hwloc],
  [AS_HELP_STRING([--with-hwloc@<:@=DIR@:>@],
    [hwloc >= $1 (required), found with pkg-config, or in DIR (DIR/lib/pkgconfig/hwloc.pc)])],
  [], [with_hwloc=yes])
AS_CASE([$with_hwloc],
  [no], [AC_MSG_ERROR([--without-hwloc: ferry needs hwloc (it picks the NIC and CPUs for each GPU from the topology) and cannot be built without it; drop --without-hwloc, and install libhwloc-dev (Debian: apt-get install libhwloc-dev) or pass --with-hwloc=DIR])],
  [yes|""], [],
  [AS_IF([test ! -d "$with_hwloc"],
     [AC_MSG_ERROR([--with-hwloc=$with_hwloc: no such directory; give the prefix hwloc was installed to])])
   ferry_save_PKG_CONFIG_PATH=${PKG_CONFIG_PATH-}
   PKG_CONFIG_PATH="$with_hwloc/lib/pkgconfig:$with_hwloc/lib64/pkgconfig:$with_hwloc/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
   export PKG_CONFIG_PATH])
PKG_CHECK_MODULES([HWLOC], [hwloc >= $1], [],
  [AC_MSG_ERROR([hwloc >= $1 not found: install libhwloc-dev (Debian: apt-get install libhwloc-dev) or set PKG_CONFIG_PATH (pkg-config said: $HWLOC_PKG_ERRORS)])])
HWLOC_VERSION=`$PKG_CONFIG --modversion hwloc`
AS_CASE([$with_hwloc], [yes|""], [],
  [PKG_CONFIG_PATH=$ferry_save_PKG_CONFIG_PATH
   AS_IF([test -z "$PKG_CONFIG_PATH"], [AS_UNSET([PKG_CONFIG_PATH])])])
])
