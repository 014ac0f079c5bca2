# ferry_python.m4 -- the Python module's test suite (python/).

# FERRY_CHECK_PYTHON
# ------------------
# --with-python[=PYTHON] (default: /usr/bin/python3, else python3 on PATH,
# if it has what the suite needs): make check builds the module in the
# build tree against this libferry and runs its pytest suite.  The module
# needs Python.h and setuptools; the suite numpy, torch and pytest.  yes or
# a path: required; no: left out.  Sets PYTHON, HAVE_PYTHON (Automake) and
# ferry_python_summary.
AC_DEFUN([FERRY_CHECK_PYTHON], [
AC_ARG_WITH([python],
  [AS_HELP_STRING([--with-python@<:@=PYTHON@:>@],
    [test the Python module (python/) with this interpreter in make check (default: /usr/bin/python3 or python3, if it has Python.h, setuptools, numpy, torch and pytest)])],
  [], [with_python=check])
ferry_have_python=no
ferry_python_summary="no (--with-python=$with_python)"
AS_CASE([$with_python],
  [no], [],
  [yes|check], [AS_IF([test -x /usr/bin/python3], [PYTHON=/usr/bin/python3],
                      [AC_PATH_PROG([PYTHON], [python3])])],
  [PYTHON=$with_python])
AS_IF([test "$with_python" != no && test -n "$PYTHON"], [
  AC_MSG_CHECKING([whether $PYTHON can build and test the Python module])
  # (No brackets in the probe: they are m4's quotes.)
  ferry_python_missing=`$PYTHON - 2>&1 <<'_FERRY_PY_EOF'
import importlib.util, os, sysconfig
missing = list(m for m in ("setuptools", "numpy", "torch", "pytest")
               if importlib.util.find_spec(m) is None)
if not os.path.exists(os.path.join(sysconfig.get_path("include"), "Python.h")):
    missing.append("Python.h")
print(" ".join(missing))
_FERRY_PY_EOF`
  AS_IF([test $? -eq 0 && test -z "$ferry_python_missing"],
    [ferry_have_python=yes
     ferry_python_summary="yes ($PYTHON `$PYTHON -c 'import platform; print(platform.python_version())'`)"
     AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no: $ferry_python_missing])
     ferry_python_summary="no ($PYTHON lacks: $ferry_python_missing)"])
])
AS_IF([test "$ferry_have_python" = no && test "$with_python" != no && test "$with_python" != check],
  [AC_MSG_ERROR([--with-python=$with_python: ${PYTHON:-python3} cannot build and test the Python module (lacks: ${ferry_python_missing:-an interpreter}); Debian: apt-get install python3-dev python3-setuptools python3-numpy python3-torch python3-pytest])])
AC_SUBST([PYTHON])
AM_CONDITIONAL([HAVE_PYTHON], [test "$ferry_have_python" = yes])
])
