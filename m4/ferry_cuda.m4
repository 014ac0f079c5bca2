# ferry_cuda.m4 -- --with-cuda[=DIR].

# FERRY_CHECK_CUDA
# ----------------
# libferry loads libcuda.so.1 with dlopen at run time, so only the driver
# API header (cuda.h) is needed to build, and nothing is linked: neither
# libcuda nor libcudart.
#
#   --with-cuda       CUDA required: pkg-config cuda-X.Y, then /usr/local/cuda,
#                     then the compiler's default include path
#   --with-cuda=DIR   CUDA required, from DIR/include/cuda.h only
#   --without-cuda    CUDA support off (the hmem module builds its stubs)
#   (unset)           as --with-cuda, but off when nothing is found
#
# Sets CUDA_CPPFLAGS, CUDA_DIR, HAVE_CUDA (0/1, and an automake
# conditional) and HAVE_DECL_CUMEMGETHANDLEFORADDRESSRANGE (0/1; CUDA 11.7+
# exports dma-buf handles through it).
AC_DEFUN([FERRY_CHECK_CUDA], [
AC_REQUIRE([PKG_PROG_PKG_CONFIG])
AC_ARG_WITH([cuda],
  [AS_HELP_STRING([--with-cuda@<:@=DIR@:>@],
    [CUDA device memory through the driver API, loaded with dlopen at run time; only cuda.h is needed to build (default: auto-detect; DIR: a CUDA toolkit prefix)])],
  [], [with_cuda=auto])

ferry_have_cuda=no
CUDA_CPPFLAGS=
CUDA_DIR=
AS_CASE([$with_cuda],
  [no], [],
  [auto|yes|""], [
    # Candidates, one per line, as "label<TAB>cppflags".  Newest
    # cuda-X.Y.pc first (sort -V is GNU; without it the order is only
    # lexical, which is fine for a single toolkit).
    ferry_cuda_candidates=
    AS_IF([test -n "$PKG_CONFIG"], [
      for ferry_pc in `$PKG_CONFIG --list-all 2>/dev/null | sed -n 's/^\(cuda-[[0-9]][[0-9.]]*\)[[ 	]].*/\1/p' | sort -r -V 2>/dev/null`; do
        ferry_flags=`$PKG_CONFIG --cflags-only-I "$ferry_pc" 2>/dev/null` || continue
        ferry_cuda_candidates="$ferry_cuda_candidates
pkg-config $ferry_pc	$ferry_flags"
      done])
    ferry_cuda_candidates="$ferry_cuda_candidates
/usr/local/cuda	-I/usr/local/cuda/include
the default include path	"],
  [AS_IF([test ! -f "$with_cuda/include/cuda.h"],
     [AC_MSG_ERROR([--with-cuda=$with_cuda: $with_cuda/include/cuda.h not found; give the CUDA toolkit prefix (the directory holding include/cuda.h), e.g. --with-cuda=/usr/local/cuda, or --without-cuda])])
   ferry_cuda_candidates="$with_cuda	-I$with_cuda/include"])

AS_IF([test "$with_cuda" != no], [
  ferry_save_CPPFLAGS=$CPPFLAGS
  ferry_save_IFS=$IFS
  IFS='
'
  for ferry_candidate in $ferry_cuda_candidates; do
    IFS=$ferry_save_IFS
    ferry_label=`echo "$ferry_candidate" | cut -f1`
    ferry_flags=`echo "$ferry_candidate" | cut -f2-`
    AC_MSG_CHECKING([for cuda.h in $ferry_label])
    CPPFLAGS="$ferry_save_CPPFLAGS $ferry_flags"
    AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[#include <cuda.h>
#ifndef CUDA_VERSION
# error "cuda.h without CUDA_VERSION"
#endif
]], [[CUresult (*init)(unsigned int) = cuInit; return init == 0;]])],
      [AC_MSG_RESULT([yes])
       ferry_have_cuda=yes
       CUDA_CPPFLAGS=`echo $ferry_flags`
       CUDA_DIR=$ferry_label
       break],
      [AC_MSG_RESULT([no])])
  done
  IFS=$ferry_save_IFS
  CPPFLAGS=$ferry_save_CPPFLAGS])

AS_IF([test "$ferry_have_cuda" = no && test "$with_cuda" != no && test "$with_cuda" != auto],
  [AS_IF([test "$with_cuda" = yes || test -z "$with_cuda"],
     [AC_MSG_ERROR([--with-cuda: cuda.h (the CUDA driver API header) not found through pkg-config (cuda-X.Y.pc), in /usr/local/cuda/include or the default include path: install the CUDA toolkit headers, pass --with-cuda=DIR, or --without-cuda])],
     [AC_MSG_ERROR([--with-cuda=$with_cuda: $with_cuda/include/cuda.h does not compile; see config.log])])])

AS_IF([test "$ferry_have_cuda" = yes], [
  ferry_save_CPPFLAGS=$CPPFLAGS
  CPPFLAGS="$CPPFLAGS $CUDA_CPPFLAGS"
  AC_CHECK_DECLS([cuMemGetHandleForAddressRange], [], [], [[#include <cuda.h>]])
  CPPFLAGS=$ferry_save_CPPFLAGS
  AC_DEFINE([HAVE_CUDA], [1], [Define to 1 to build CUDA support (cuda.h found), 0 for the stubs.])
], [
  AC_DEFINE([HAVE_CUDA], [0])
  AC_DEFINE([HAVE_DECL_CUMEMGETHANDLEFORADDRESSRANGE], [0])
])
AC_SUBST([CUDA_CPPFLAGS])
AM_CONDITIONAL([HAVE_CUDA], [test "$ferry_have_cuda" = yes])
])
