dnl POSIX transport (files and block devices through io_uring): --enable-posix=yes|no|auto
AC_DEFUN([NXL_TRANSPORT_POSIX], [
  AM_CONDITIONAL([NXL_BUILD_POSIX], [false])
  NXL_TRANSPORTS_SKIPPED="$NXL_TRANSPORTS_SKIPPED POSIX(not written yet)"
])
