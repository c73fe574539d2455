# SPDX-License-Identifier: BSD-3-Clause
"""Builds nxl's Python bindings: the package nxl and its extension nxl._nxl
(every src/*.c), against libnxl found one of two ways:

- from nxl's autotools build tree (`make python`): NXL_TOP_SRCDIR and
  NXL_TOP_BUILDDIR name the source and build trees (they differ in a VPATH
  build); the headers come from the first, libnxl.so from the second's .libs;
- otherwise from an installed libnxl through `pkg-config nxl` (a wheel:
  `python3 -m build --wheel --no-isolation`, or pip), PKG_CONFIG_PATH as usual.

NXL_PY_CFLAGS and NXL_PY_LDFLAGS add flags (split like a shell would).
"""
import glob
import os
import re
import shlex
import subprocess
import sys

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
# setuptools wants paths relative to the setup script's folder
os.chdir(HERE)


def pkg_config(*args):
    try:
        out = subprocess.run(["pkg-config", *args, "nxl"], check=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        err = getattr(e, "stderr", "") or str(e)
        sys.exit("nxl bindings: libnxl not found: set NXL_TOP_SRCDIR/NXL_TOP_BUILDDIR "
                 "(an autotools build tree) or install libnxl-dev (pkg-config nxl): "
                 + err.strip())
    return shlex.split(out)


def version():
    v = os.environ.get("NXL_VERSION")
    if v:
        return v
    if not os.environ.get("NXL_TOP_BUILDDIR"):
        try:
            return pkg_config("--modversion")[0]
        except (SystemExit, IndexError):
            pass
    # a checkout: AC_INIT([nxl], [VERSION], ...) of ../../configure.ac
    try:
        with open(os.path.join(HERE, "..", "..", "configure.ac"), encoding="utf-8") as f:
            m = re.search(r"AC_INIT\(\[nxl\],\s*\[([^\]]+)\]", f.read())
            if m:
                return m.group(1)
    except OSError:
        pass
    return "0"


def flags():
    srcdir = os.environ.get("NXL_TOP_SRCDIR")
    builddir = os.environ.get("NXL_TOP_BUILDDIR")
    if srcdir or builddir:
        srcdir = os.path.abspath(srcdir or builddir)
        builddir = os.path.abspath(builddir or srcdir)
        # no rpath: the installed extension finds the installed libnxl; the
        # build tree's tests set LD_LIBRARY_PATH (tests/python.sh)
        return dict(include_dirs=[os.path.join(srcdir, "include")],
                    library_dirs=[os.path.join(builddir, ".libs")],
                    libraries=["nxl"], extra_compile_args=[], extra_link_args=[])
    cflags = pkg_config("--cflags")
    libs = pkg_config("--libs")
    return dict(include_dirs=[f[2:] for f in cflags if f.startswith("-I")],
                library_dirs=[f[2:] for f in libs if f.startswith("-L")],
                libraries=[f[2:] for f in libs if f.startswith("-l")],
                extra_compile_args=[f for f in cflags if not f.startswith("-I")],
                extra_link_args=[f for f in libs if not f.startswith(("-L", "-l"))])


f = flags()
f["extra_compile_args"] += ["-std=gnu11", "-fvisibility=hidden"] + \
    shlex.split(os.environ.get("NXL_PY_CFLAGS", ""))
f["extra_link_args"] += shlex.split(os.environ.get("NXL_PY_LDFLAGS", ""))

sources = sorted(glob.glob(os.path.join("src", "*.c")))
if not sources:
    sys.exit("nxl bindings: no sources in %s" % os.path.join(HERE, "src"))

setup(
    version=version(),
    packages=["nxl"],
    package_dir={"nxl": "nxl"},
    package_data={"nxl": ["*.pyi", "py.typed"]},
    include_package_data=False,
    ext_modules=[Extension("nxl._nxl", sources=sources,
                           depends=sorted(glob.glob(os.path.join("src", "*.h"))), **f)],
    zip_safe=False,
)
