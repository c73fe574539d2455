dnl SPDX-License-Identifier: BSD-3-Clause
dnl libfabric transport: --enable-libfabric=yes|no|auto|dl (m4/nxl_transport.m4),
dnl --with-libfabric=PATH
dnl
dnl NXL_LIBFABRIC_CONFIGURE([action-if-buildable], [action-if-not]). The
dnl transport loads libfabric with dlopen when it is first used (its
dnl dependencies cost ~0.2 s at every process start otherwise): the library
dnl must link here, but neither libnxl nor the module is linked against it.
AC_DEFUN([NXL_LIBFABRIC_CONFIGURE], [
  AC_ARG_WITH([libfabric],
    [AS_HELP_STRING([--with-libfabric=PATH], [use the libfabric installed under PATH])],
    [], [with_libfabric=])
  have_libfabric=no
  nxl_libfabric_hint="libfabric1"
  AS_IF([test "x$with_libfabric" != x && test "x$with_libfabric" != xyes], [
    LIBFABRIC_CFLAGS="-I$with_libfabric/include"
    libfabric_libdir="$with_libfabric/lib"
    AS_IF([test -d "$with_libfabric/lib64"], [libfabric_libdir="$with_libfabric/lib64"])
    LIBFABRIC_LIBS="-L$libfabric_libdir -Wl,-rpath,$libfabric_libdir -lfabric"
    libfabric_soname="$libfabric_libdir/libfabric.so.1"
  ], [
    libfabric_soname="libfabric.so.1"
    PKG_CHECK_MODULES([LIBFABRIC], [libfabric >= 1.10],
      [nxl_libfabric_summary="libfabric `$PKG_CONFIG --modversion libfabric`, loaded when used"],
      [LIBFABRIC_CFLAGS=""; LIBFABRIC_LIBS="-lfabric"])
  ])
  save_CPPFLAGS=$CPPFLAGS; save_LIBS=$LIBS
  CPPFLAGS="$CPPFLAGS $LIBFABRIC_CFLAGS"; LIBS="$LIBFABRIC_LIBS $LIBS"
  AC_CHECK_HEADER([rdma/fabric.h], [
    AC_MSG_CHECKING([for fi_getinfo, fi_trywait and fi_writemsg (libfabric 1.10+)])
    AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_eq.h>
#if FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION) < FI_VERSION(1, 10)
#error libfabric too old
#endif]],
      [[struct fi_info *i = fi_allocinfo(); (void)fi_getinfo(FI_VERSION(1, 10), 0, 0, 0, i, &i);
        (void)fi_trywait(0, 0, 0); (void)fi_writemsg(0, 0, 0); fi_freeinfo(i);]])],
      [have_libfabric=yes],
      [nxl_libfabric_why="libfabric found but too old (needs 1.10+) or not linkable"])
    AC_MSG_RESULT([$have_libfabric])
  ], [nxl_libfabric_why="rdma/fabric.h not found (apt-get install libfabric-dev, or --with-libfabric=PATH)"])
  CPPFLAGS=$save_CPPFLAGS; LIBS=$save_LIBS
  AS_IF([test "x$have_libfabric" = xyes], [
    save_LIBS=$LIBS
    LIBS=""
    AC_SEARCH_LIBS([dlopen], [dl], [], [have_libfabric=no; nxl_libfabric_why="no dlopen to load libfabric with"])
    LIBFABRIC_LIBS=$LIBS
    LIBS=$save_LIBS
    AC_DEFINE_UNQUOTED([NXL_LIBFABRIC_SONAME], ["$libfabric_soname"], [libfabric, as dlopen finds it])
  ])
  AS_IF([test "x$have_libfabric" = xyes], [$1], [LIBFABRIC_CFLAGS=""; LIBFABRIC_LIBS=""; $2])
  AC_SUBST([LIBFABRIC_CFLAGS])
  AC_SUBST([LIBFABRIC_LIBS])
])
