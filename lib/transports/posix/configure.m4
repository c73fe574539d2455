dnl SPDX-License-Identifier: BSD-3-Clause
dnl POSIX transport (files and block devices): --enable-posix=yes|no|auto|dl
dnl (m4/nxl_transport.m4)
dnl
dnl The io_uring engine needs liburing (Debian: liburing-dev). Without it the
dnl transport is still built, with only its thread-pool engine (pread/pwrite
dnl on a few threads), and the summary says so.
dnl
dnl NXL_POSIX_CONFIGURE([action-if-buildable], [action-if-not]): sets
dnl LIBURING_CFLAGS and LIBURING_LIBS, NXL_HAVE_LIBURING in config.h.
AC_DEFUN([NXL_POSIX_CONFIGURE], [
  posix_ok=no
  have_liburing=no
  AC_CHECK_HEADERS([sys/eventfd.h], [posix_ok=yes],
    [nxl_posix_why="sys/eventfd.h not found (Linux only)"])
  AS_IF([test "x$posix_ok" = xyes], [
    PKG_CHECK_MODULES([LIBURING], [liburing >= 2.0], [have_liburing=yes; nxl_posix_pc="liburing"], [
      dnl no .pc file: try the header and library directly
      save_LIBS=$LIBS
      AC_CHECK_HEADER([liburing.h],
        [AC_CHECK_LIB([uring], [io_uring_register_eventfd],
          [have_liburing=yes; LIBURING_CFLAGS=""; LIBURING_LIBS="-luring"])])
      LIBS=$save_LIBS
    ])
  ])
  AS_IF([test "x$have_liburing" = xyes], [
    AC_DEFINE([NXL_HAVE_LIBURING], [1], [liburing found: the POSIX transport has its io_uring engine])
    nxl_posix_summary="io_uring+threads"
    nxl_posix_hint="liburing2"
  ], [
    LIBURING_CFLAGS=""; LIBURING_LIBS=""
    nxl_posix_summary="threads only: liburing not found, apt-get install liburing-dev"
  ])
  AS_IF([test "x$posix_ok" = xyes], [$1], [$2])
  AC_SUBST([LIBURING_CFLAGS])
  AC_SUBST([LIBURING_LIBS])
])
