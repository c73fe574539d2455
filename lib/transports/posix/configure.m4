dnl POSIX transport (files and block devices): --enable-posix=yes|no|auto
dnl
dnl The io_uring engine needs liburing (Debian: liburing-dev). Without it the
dnl transport is still built, with only its thread-pool engine (pread/pwrite
dnl on a few threads), and the summary says so.
AC_DEFUN([NXL_TRANSPORT_POSIX], [
  AC_ARG_ENABLE([posix],
    [AS_HELP_STRING([--enable-posix=yes|no|auto],
      [build the POSIX transport for files and block devices (default: auto)])],
    [], [enable_posix=auto])
  have_posix=no
  have_liburing=no
  posix_why=""
  AS_IF([test "x$enable_posix" != xno], [
    AC_CHECK_HEADERS([sys/eventfd.h], [have_posix=yes],
      [posix_why="sys/eventfd.h not found (Linux only)"])
    AS_IF([test "x$have_posix" = xyes], [
      PKG_CHECK_MODULES([LIBURING], [liburing >= 2.0], [have_liburing=yes], [
        dnl no .pc file: try the header and library directly
        save_LIBS=$LIBS
        AC_CHECK_HEADER([liburing.h],
          [AC_CHECK_LIB([uring], [io_uring_register_eventfd],
            [have_liburing=yes; LIBURING_CFLAGS=""; LIBURING_LIBS="-luring"])])
        LIBS=$save_LIBS
      ])
    ])
    AS_IF([test "x$have_posix" = xno && test "x$enable_posix" = xyes],
      [AC_MSG_ERROR([--enable-posix=yes but $posix_why])])
  ], [posix_why="disabled by --disable-posix"])
  AS_IF([test "x$have_posix" = xyes], [
    AC_DEFINE([NXL_HAVE_POSIX], [1], [POSIX transport built in])
    AS_IF([test "x$have_liburing" = xyes], [
      AC_DEFINE([NXL_HAVE_LIBURING], [1], [liburing found: the POSIX transport has its io_uring engine])
      NXL_TRANSPORTS_BUILT="$NXL_TRANSPORTS_BUILT POSIX(io_uring+threads)"
      AS_IF([$PKG_CONFIG --exists liburing 2>/dev/null],
        [NXL_PC_REQUIRES_PRIVATE="$NXL_PC_REQUIRES_PRIVATE liburing"])
    ], [
      LIBURING_CFLAGS=""; LIBURING_LIBS=""
      NXL_TRANSPORTS_BUILT="$NXL_TRANSPORTS_BUILT POSIX(threads only: liburing not found, apt-get install liburing-dev)"
    ])
  ], [
    LIBURING_CFLAGS=""; LIBURING_LIBS=""
    NXL_TRANSPORTS_SKIPPED="$NXL_TRANSPORTS_SKIPPED POSIX($posix_why)"
  ])
  AC_SUBST([LIBURING_CFLAGS])
  AC_SUBST([LIBURING_LIBS])
  AM_CONDITIONAL([NXL_BUILD_POSIX], [test "x$have_posix" = xyes])
])
