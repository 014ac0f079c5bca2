# ferry_sanitizers.m4 -- --enable-asan/ubsan/tsan and --enable-coverage.
#
# The flags collect in INSTR_CFLAGS, which Makefile.am puts in AM_CFLAGS
# (automake and libtool pass it to the compiler and to the link) rather
# than in CFLAGS, so that the other configure probes run uninstrumented.

# FERRY_ARG_ENABLE_SANITIZER(NAME, FLAGS, HELP)
# ---------------------------------------------
# Add --enable-NAME; when given, link-test FLAGS and add them to
# INSTR_CFLAGS, and NAME to ferry_sanitizers.
AC_DEFUN([FERRY_ARG_ENABLE_SANITIZER], [
AC_ARG_ENABLE([$1], [AS_HELP_STRING([--enable-$1], [$3])], [], [enable_$1=no])
AS_IF([test "$enable_$1" = yes], [
  AC_MSG_CHECKING([whether $CC links with $2])
  ferry_save_CFLAGS=$CFLAGS
  ferry_save_LDFLAGS=$LDFLAGS
  CFLAGS="$CFLAGS $2"
  LDFLAGS="$LDFLAGS $2"
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <stdlib.h>]],
                                  [[char *p = malloc(4); free(p); return p == 0;]])],
    [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no])
     AC_MSG_ERROR([--enable-$1: $CC cannot link with $2; install the sanitizer runtime (Debian: libasan8, libubsan1, libtsan2 come with gcc) or drop --enable-$1])])
  CFLAGS=$ferry_save_CFLAGS
  LDFLAGS=$ferry_save_LDFLAGS
  INSTR_CFLAGS="$INSTR_CFLAGS $2"
  ferry_sanitizers="$ferry_sanitizers $1"
])
])

# FERRY_SANITIZERS
# ----------------
AC_DEFUN([FERRY_SANITIZERS], [
ferry_sanitizers=
m4_map([FERRY_ARG_ENABLE_SANITIZER], [
  [[asan], [-fsanitize=address -fno-omit-frame-pointer],
   [build with AddressSanitizer (and LeakSanitizer)]],
  [[ubsan], [-fsanitize=undefined -fno-sanitize-recover=undefined],
   [build with UndefinedBehaviorSanitizer; any report fails the test]],
  [[tsan], [-fsanitize=thread],
   [build with ThreadSanitizer (not with --enable-asan)]]])
AS_IF([test "$enable_asan" = yes && test "$enable_tsan" = yes],
  [AC_MSG_ERROR([--enable-asan and --enable-tsan cannot be combined (the runtimes conflict): configure two build directories])])

AC_ARG_ENABLE([coverage],
  [AS_HELP_STRING([--enable-coverage], [build with gcov coverage instrumentation (--coverage)])],
  [], [enable_coverage=no])
AS_IF([test "$enable_coverage" = yes], [
  AC_MSG_CHECKING([whether $CC links with --coverage])
  ferry_save_CFLAGS=$CFLAGS
  CFLAGS="$CFLAGS --coverage"
  AC_LINK_IFELSE([AC_LANG_PROGRAM([], [])], [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no])
     AC_MSG_ERROR([--enable-coverage: $CC cannot link with --coverage])])
  CFLAGS=$ferry_save_CFLAGS
  INSTR_CFLAGS="$INSTR_CFLAGS --coverage"])
AC_SUBST([INSTR_CFLAGS])
])
