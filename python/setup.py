"""Builds ferry's Python module against an installed libferry.

    pip install --no-build-isolation ./python

libferry is found through pkg-config (ferry.pc: set PKG_CONFIG_PATH for a
prefix other than /usr or /usr/local), or, for a build tree,
FERRY_INCLUDE_DIR and FERRY_LIB_DIR.  The module records libferry's
directory as its run path, so it loads without LD_LIBRARY_PATH;
FERRY_PY_NO_RPATH=1 leaves the run path out, for a distribution package
whose libferry is where the dynamic loader looks anyway (debian/rules).
FERRY_PY_CFLAGS adds compiler flags (the test suite passes -Werror).
"""
import glob
import os
import shlex
import subprocess
import sys

from setuptools import Extension, setup


def pkg_config(*args):
    try:
        out = subprocess.run(["pkg-config", *args, "ferry"], check=True,
                             capture_output=True, text=True).stdout
    except FileNotFoundError:
        sys.exit("ferry: pkg-config is not installed (apt-get install "
                 "pkg-config), and FERRY_INCLUDE_DIR/FERRY_LIB_DIR are not set")
    except subprocess.CalledProcessError as e:
        sys.exit("ferry: pkg-config cannot find ferry.pc (%s).  Install "
                 "ferry first (./autogen.sh && ./configure && make install), "
                 "and set PKG_CONFIG_PATH=PREFIX/lib/pkgconfig for a prefix "
                 "of your own; or set FERRY_INCLUDE_DIR and FERRY_LIB_DIR "
                 "to a build tree." % e.stderr.strip())
    return shlex.split(out)


def libferry():
    inc, lib = os.environ.get("FERRY_INCLUDE_DIR"), os.environ.get("FERRY_LIB_DIR")
    if inc and lib:
        return [inc], [lib]
    incs = [f[2:] for f in pkg_config("--cflags-only-I")]
    libs = [f[2:] for f in pkg_config("--libs-only-L")]
    if not libs:
        libs = [pkg_config("--variable=libdir")[0]]
    return incs, libs


def version():
    """major.minor.release+greek from ferry's VERSION file, beside python/."""
    fields = {}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                        "VERSION")
    for line in open(path):
        key, _, value = line.partition("=")
        if not line.startswith("#") and _:
            fields[key.strip()] = value.strip()
    return "{major}.{minor}.{release}{greek}".format(**fields)



def numpy_headers():
    """numpy's C headers, for Prepared.post's fast path over numpy index
    arrays; without numpy the module takes arrays by the buffer protocol."""
    try:
        import numpy
    except ImportError:
        return [], []
    return [numpy.get_include()], [("PYF_HAVE_NUMPY", "1")]


include_dirs, library_dirs = libferry()
run_path = [] if os.environ.get("FERRY_PY_NO_RPATH") == "1" else library_dirs
numpy_include, numpy_macros = numpy_headers()
extra = shlex.split(os.environ.get("FERRY_PY_CFLAGS", ""))

setup(
    name="ferry",
    version=version(),
    description="One-sided RMA between host and CUDA memories over libfabric",
    packages=["ferry"],
    # PEP 561: the stubs of the C extension, and the marker that says the
    # package has types.
    package_data={"ferry": ["py.typed", "_ferry.pyi"]},
    ext_modules=[Extension(
        "ferry._ferry",
        sources=sorted(glob.glob(os.path.join("src", "*.c"))),
        depends=[os.path.join("src", "pyferry.h")],
        include_dirs=include_dirs + numpy_include,
        define_macros=numpy_macros,
        library_dirs=library_dirs,
        runtime_library_dirs=run_path,
        libraries=["ferry"],
        extra_compile_args=["-std=c11", "-Wall", "-Wextra",
                            "-Wno-missing-field-initializers",
                            "-Wno-cast-function-type"] + extra,
    )],
)
