dnl SPDX-License-Identifier: BSD-3-Clause
dnl HF3FS transport (host memory to and from files of DeepSeek's 3FS through
dnl its user-space I/O API, usrbio): --enable-hf3fs=yes|no|auto|dl
dnl (m4/nxl_transport.m4)
dnl
dnl Nothing of 3FS is needed at build time: the few usrbio declarations the
dnl transport calls are in hf3fs/usrbio_abi.h, and libhf3fs_api_shared.so
dnl is never linked but loaded at run time ($NXL_HF3FS_LIB overrides it);
dnl nxl_plugins_available() says when it is missing. Only Linux's eventfd
dnl is required.
dnl
dnl NXL_HF3FS_CONFIGURE([action-if-buildable], [action-if-not]): sets
dnl HF3FS_CFLAGS and HF3FS_LIBS.
AC_DEFUN([NXL_HF3FS_CONFIGURE], [
  HF3FS_CFLAGS=""
  HF3FS_LIBS=""
  AC_CHECK_HEADER([sys/eventfd.h], [
    nxl_hf3fs_summary="libhf3fs_api_shared.so loaded when created"
    $1
  ], [
    nxl_hf3fs_why="sys/eventfd.h not found (Linux only)"
    $2
  ])
  AC_SUBST([HF3FS_CFLAGS])
  AC_SUBST([HF3FS_LIBS])
])
