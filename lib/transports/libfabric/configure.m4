dnl libfabric transport: --enable-libfabric=yes|no|auto, --with-libfabric=PATH
dnl The transport loads libfabric with dlopen when it is first used (its
dnl dependencies cost ~0.2 s at every process start otherwise): the library
dnl must link here, but libnxl is not linked against it.
AC_DEFUN([NXL_TRANSPORT_LIBFABRIC], [
  AC_ARG_ENABLE([libfabric],
    [AS_HELP_STRING([--enable-libfabric=yes|no|auto], [build the libfabric transport (default: auto)])],
    [], [enable_libfabric=auto])
  AC_ARG_WITH([libfabric],
    [AS_HELP_STRING([--with-libfabric=PATH], [use the libfabric installed under PATH])],
    [], [with_libfabric=])
  have_libfabric=no
  libfabric_why=""
  AS_IF([test "x$enable_libfabric" != xno], [
    AS_IF([test "x$with_libfabric" != x && test "x$with_libfabric" != xyes], [
      LIBFABRIC_CFLAGS="-I$with_libfabric/include"
      libfabric_libdir="$with_libfabric/lib"
      AS_IF([test -d "$with_libfabric/lib64"], [libfabric_libdir="$with_libfabric/lib64"])
      LIBFABRIC_LIBS="-L$libfabric_libdir -Wl,-rpath,$libfabric_libdir -lfabric"
      libfabric_soname="$libfabric_libdir/libfabric.so.1"
    ], [
      libfabric_soname="libfabric.so.1"
      PKG_CHECK_MODULES([LIBFABRIC], [libfabric >= 1.10], [],
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
        [libfabric_why="libfabric found but too old (needs 1.10+) or not linkable"])
      AC_MSG_RESULT([$have_libfabric])
    ], [libfabric_why="rdma/fabric.h not found (apt-get install libfabric-dev, or --with-libfabric=PATH)"])
    CPPFLAGS=$save_CPPFLAGS; LIBS=$save_LIBS
    AS_IF([test "x$have_libfabric" = xyes], [
      AC_SEARCH_LIBS([dlopen], [dl], [], [have_libfabric=no; libfabric_why="no dlopen to load libfabric with"])
      LIBFABRIC_LIBS=""
      AS_IF([test "x$ac_cv_search_dlopen" != "xnone required" && test "x$ac_cv_search_dlopen" != xno],
        [LIBFABRIC_LIBS="$ac_cv_search_dlopen"])
      LIBS=$save_LIBS
    ])
    AS_IF([test "x$have_libfabric" = xno && test "x$enable_libfabric" = xyes],
      [AC_MSG_ERROR([--enable-libfabric=yes but $libfabric_why])])
  ], [libfabric_why="disabled by --disable-libfabric"])
  AS_IF([test "x$have_libfabric" = xyes], [
    AC_DEFINE([NXL_HAVE_LIBFABRIC], [1], [libfabric transport built in])
    AC_DEFINE_UNQUOTED([NXL_LIBFABRIC_SONAME], ["$libfabric_soname"], [libfabric, as dlopen finds it])
    NXL_TRANSPORTS_BUILT="$NXL_TRANSPORTS_BUILT LIBFABRIC"
  ], [
    LIBFABRIC_CFLAGS=""; LIBFABRIC_LIBS=""
    NXL_TRANSPORTS_SKIPPED="$NXL_TRANSPORTS_SKIPPED LIBFABRIC($libfabric_why)"
  ])
  AC_SUBST([LIBFABRIC_CFLAGS])
  AC_SUBST([LIBFABRIC_LIBS])
  AM_CONDITIONAL([NXL_BUILD_LIBFABRIC], [test "x$have_libfabric" = xyes])
])
