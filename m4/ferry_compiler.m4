# ferry_compiler.m4 -- compiler and linker probes for ferry.

# FERRY_PROG_CC_C11
# -----------------
# ferry is C11 with GNU extensions (_GNU_SOURCE).  Compile with -std=gnu11
# so that every compiler, including ones that default to a newer standard,
# sees the same language.  A -std= already in CC or CFLAGS is respected;
# it must still give C11 or later.
AC_DEFUN([FERRY_PROG_CC_C11], [
m4_pushdef([ferry_c11_program], [AC_LANG_PROGRAM([[
#include <stdalign.h>
#include <stdatomic.h>
#if !defined __STDC_VERSION__ || __STDC_VERSION__ < 201112L
# error "not C11"
#endif
_Static_assert(sizeof(long long) >= 8, "long long");
static _Thread_local int ferry_tls;
]], [[alignas(16) char buf[16];
(void)buf;
return ferry_tls + _Generic(1, int: 0, default: 1);]])])
AS_CASE([" $CC $CFLAGS "],
  [*" -std="*], [
    AC_CACHE_CHECK([whether $CC $CFLAGS is C11], [ferry_cv_cc_c11],
      [AC_COMPILE_IFELSE([ferry_c11_program],
        [ferry_cv_cc_c11=yes], [ferry_cv_cc_c11=no])])
    AS_IF([test "$ferry_cv_cc_c11" != yes],
      [AC_MSG_ERROR([ferry needs a C11 compiler, but $CC $CFLAGS does not compile C11: drop the -std= option or use -std=gnu11])])],
  [
    AC_CACHE_CHECK([whether $CC accepts -std=gnu11], [ferry_cv_cc_gnu11],
      [ferry_save_CC=$CC
       CC="$CC -std=gnu11"
       AC_COMPILE_IFELSE([ferry_c11_program],
         [ferry_cv_cc_gnu11=yes], [ferry_cv_cc_gnu11=no])
       CC=$ferry_save_CC])
    AS_IF([test "$ferry_cv_cc_gnu11" = yes],
      [CC="$CC -std=gnu11"],
      [AC_MSG_ERROR([ferry needs a C11 compiler with GNU extensions, but $CC rejects -std=gnu11 or lacks C11 features (_Static_assert, _Thread_local, _Generic, stdatomic.h): use GCC >= 4.9 or Clang >= 3.3])])])
m4_popdef([ferry_c11_program])
])

# FERRY_APPEND_CFLAGS(VARIABLE, FLAG...)
# --------------------------------------
# Append to VARIABLE each FLAG the compiler accepts without a diagnostic.
# -Werror catches compilers that merely warn about unknown options.
AC_DEFUN([FERRY_APPEND_CFLAGS], [
for ferry_flag in $2; do
  AS_VAR_PUSHDEF([ferry_cache], [ferry_cv_cflag_$ferry_flag])
  AC_CACHE_CHECK([whether $CC accepts $ferry_flag], [ferry_cache], [
    ferry_save_CFLAGS=$CFLAGS
    CFLAGS="$CFLAGS -Werror $ferry_flag"
    AC_COMPILE_IFELSE([AC_LANG_PROGRAM([], [])],
      [AS_VAR_SET([ferry_cache], [yes])], [AS_VAR_SET([ferry_cache], [no])])
    CFLAGS=$ferry_save_CFLAGS])
  AS_VAR_IF([ferry_cache], [yes], [AS_VAR_APPEND([$1], [" $ferry_flag"])])
  AS_VAR_POPDEF([ferry_cache])
done
])

# FERRY_CHECK_VISIBILITY
# ----------------------
# Set VISIBILITY_CFLAGS to -fvisibility=hidden when the compiler supports it
# together with __attribute__((visibility("default"))), which FERRY_API uses.
AC_DEFUN([FERRY_CHECK_VISIBILITY], [
AC_CACHE_CHECK([whether $CC supports -fvisibility=hidden], [ferry_cv_cc_visibility], [
  ferry_save_CFLAGS=$CFLAGS
  CFLAGS="$CFLAGS -Werror -fvisibility=hidden"
  AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[
__attribute__((visibility("default"))) int ferry_exported(void);
int ferry_exported(void) { return 0; }
]], [])], [ferry_cv_cc_visibility=yes], [ferry_cv_cc_visibility=no])
  CFLAGS=$ferry_save_CFLAGS])
VISIBILITY_CFLAGS=
AS_IF([test "$ferry_cv_cc_visibility" = yes], [VISIBILITY_CFLAGS=-fvisibility=hidden])
AC_SUBST([VISIBILITY_CFLAGS])
])

# FERRY_CHECK_LD_VERSION_SCRIPT
# -----------------------------
# Does the linker take -Wl,--version-script=FILE (GNU ld, gold, lld)?
# Sets the HAVE_LD_VERSION_SCRIPT automake conditional.
AC_DEFUN([FERRY_CHECK_LD_VERSION_SCRIPT], [
AC_CACHE_CHECK([whether the linker accepts --version-script], [ferry_cv_ld_version_script], [
  cat > conftest.map <<_FERRY_EOF
FERRY_TEST { global: ferry_*; local: *; };
_FERRY_EOF
  ferry_save_LDFLAGS=$LDFLAGS
  LDFLAGS="$LDFLAGS -Wl,--version-script=conftest.map"
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[int ferry_probe(void); int ferry_probe(void) { return 0; }]],
                                  [[return ferry_probe();]])],
    [ferry_cv_ld_version_script=yes], [ferry_cv_ld_version_script=no])
  LDFLAGS=$ferry_save_LDFLAGS
  rm -f conftest.map])
AM_CONDITIONAL([HAVE_LD_VERSION_SCRIPT], [test "$ferry_cv_ld_version_script" = yes])
])
