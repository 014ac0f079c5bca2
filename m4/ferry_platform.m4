# ferry_platform.m4 -- threads, dlopen and atomics.

# FERRY_CHECK_PTHREAD
# -------------------
# Set PTHREAD_CFLAGS and PTHREAD_LIBS.  GCC and Clang take -pthread; that
# is all ferry supports, so no AX_PTHREAD.  -lpthread stays in
# PTHREAD_LIBS for libtool, which does not always pass -pthread through
# when it links a shared library.
AC_DEFUN([FERRY_CHECK_PTHREAD], [
AC_CACHE_CHECK([whether $CC builds threaded programs with -pthread], [ferry_cv_pthread], [
  ferry_save_CFLAGS=$CFLAGS
  ferry_save_LIBS=$LIBS
  CFLAGS="$CFLAGS -pthread"
  LIBS="-lpthread $LIBS"
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[
#include <pthread.h>
static void *ferry_run(void *arg) { return arg; }
]], [[pthread_t t;
if (pthread_create(&t, 0, ferry_run, 0) != 0) return 1;
return pthread_join(t, 0);]])], [ferry_cv_pthread=yes], [ferry_cv_pthread=no])
  CFLAGS=$ferry_save_CFLAGS
  LIBS=$ferry_save_LIBS])
AS_IF([test "$ferry_cv_pthread" != yes],
  [AC_MSG_ERROR([$CC cannot build a threaded program with -pthread -lpthread: ferry needs POSIX threads])])
PTHREAD_CFLAGS=-pthread
PTHREAD_LIBS=-lpthread
AC_SUBST([PTHREAD_CFLAGS])
AC_SUBST([PTHREAD_LIBS])
])

# FERRY_CHECK_DLOPEN
# ------------------
# Set DL_LIBS to what dlopen needs: nothing on glibc >= 2.34, -ldl before.
# libferry dlopens libcuda.so.1 at run time.
AC_DEFUN([FERRY_CHECK_DLOPEN], [
ferry_save_LIBS=$LIBS
AC_SEARCH_LIBS([dlopen], [dl], [],
  [AC_MSG_ERROR([dlopen not found in libc or libdl: ferry needs it to load libcuda.so.1 at run time])])
LIBS=$ferry_save_LIBS
DL_LIBS=
AS_IF([test "$ac_cv_search_dlopen" != "none required"], [DL_LIBS=$ac_cv_search_dlopen])
AC_SUBST([DL_LIBS])
])

# FERRY_CHECK_ATOMICS
# -------------------
# <stdatomic.h> and lock-free-capable 64-bit atomics are required (the
# registration cache); set ATOMIC_LIBS to -latomic where the compiler needs
# it.  A 16-byte compare-and-swap is optional: define HAVE_ATOMIC_128 when
# one links (possibly through libatomic); the variable ferry_atomic_128
# says how, for the summary.
AC_DEFUN([FERRY_CHECK_ATOMICS], [
AC_CHECK_HEADER([stdatomic.h], [],
  [AC_MSG_ERROR([<stdatomic.h> not found: ferry needs C11 atomics (GCC >= 4.9, Clang >= 3.6)])])

m4_pushdef([ferry_atomic64_program], [AC_LANG_PROGRAM([[
#include <stdatomic.h>
#include <stdint.h>
#if ATOMIC_LLONG_LOCK_FREE != 2
# error "64-bit atomics are not always lock-free"
#endif
static _Atomic uint64_t ferry_a;
]], [[uint64_t e = 0;
atomic_fetch_add_explicit(&ferry_a, 1, memory_order_relaxed);
atomic_fetch_or(&ferry_a, 2);
return !atomic_compare_exchange_strong(&ferry_a, &e, 5);]])])
m4_pushdef([ferry_atomic128_program], [AC_LANG_PROGRAM([[
static unsigned __int128 ferry_x;
]], [[unsigned __int128 e = 0, d = 1;
return !__atomic_compare_exchange_n(&ferry_x, &e, d, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);]])])

ATOMIC_LIBS=
ferry_save_LIBS=$LIBS
AC_MSG_CHECKING([for lock-free 64-bit atomic operations])
AC_LINK_IFELSE([ferry_atomic64_program], [AC_MSG_RESULT([yes])], [
  LIBS="-latomic $ferry_save_LIBS"
  AC_LINK_IFELSE([ferry_atomic64_program], [
    ATOMIC_LIBS=-latomic
    AC_MSG_RESULT([yes, with -latomic])], [
    AC_MSG_RESULT([no])
    AC_MSG_ERROR([lock-free 64-bit atomics (_Atomic uint64_t, ATOMIC_LLONG_LOCK_FREE == 2) do not compile or link, even with -latomic: ferry's registration cache needs them; see config.log])])])

AC_MSG_CHECKING([for 128-bit atomic compare-and-swap])
ferry_atomic_128=no
LIBS="$ATOMIC_LIBS $ferry_save_LIBS"
AC_LINK_IFELSE([ferry_atomic128_program], [ferry_atomic_128=yes], [
  LIBS="-latomic $ferry_save_LIBS"
  AC_LINK_IFELSE([ferry_atomic128_program], [
    ferry_atomic_128="yes, with -latomic"
    ATOMIC_LIBS=-latomic])])
AC_MSG_RESULT([$ferry_atomic_128])
AS_IF([test "$ferry_atomic_128" != no],
  [AC_DEFINE([HAVE_ATOMIC_128], [1], [Define to 1 if a 16-byte __atomic_compare_exchange_n links (it may go through libatomic and take a lock).])])
LIBS=$ferry_save_LIBS
AC_SUBST([ATOMIC_LIBS])
m4_popdef([ferry_atomic64_program])
m4_popdef([ferry_atomic128_program])
])
