dnl SPDX-License-Identifier: BSD-3-Clause
dnl GDS transport (GPU memory to and from files, NVIDIA cuFile):
dnl --enable-gds=yes|no|auto|dl (m4/nxl_transport.m4)
dnl
dnl Needs what the CUDA transport needs at build time, the CUDA headers
dnl (its checks, --with-cuda=PATH, run first): the transport loads the CUDA
dnl runtime with the CUDA transport's loader. cufile.h is not needed (the
dnl few declarations it uses are in gds/cufile_abi.h) and libcufile is
dnl never linked: it is loaded at run time (libcufile.so.0, .1, or
dnl $NXL_CUFILE_LIB), and nxl_plugins_available() says when it is missing.
dnl
dnl NXL_GDS_CONFIGURE([action-if-buildable], [action-if-not]): sets
dnl GDS_CFLAGS and GDS_LIBS.
AC_DEFUN([NXL_GDS_CONFIGURE], [
  GDS_CFLAGS=""
  GDS_LIBS=""
  nxl_gds_hint="libcufile (cuFile)"
  AS_IF([test "x$have_cuda" = xyes], [
    GDS_CFLAGS=$CUDA_CFLAGS
    GDS_LIBS=$CUDA_DL_LIBS
    AC_CHECK_HEADER([sys/eventfd.h], [
      nxl_gds_summary="cuFile loaded when created; synchronous calls on worker threads"
      $1
    ], [
      nxl_gds_why="sys/eventfd.h not found (Linux only)"
      GDS_CFLAGS=""; GDS_LIBS=""
      $2
    ])
  ], [
    AS_IF([test "x$enable_cuda" = xno],
      [nxl_gds_why="needs the CUDA transport's checks (drop --disable-cuda)"],
      [nxl_gds_why="needs the CUDA headers: ${nxl_cuda_why:-see the CUDA line}"])
    $2
  ])
  AC_SUBST([GDS_CFLAGS])
  AC_SUBST([GDS_LIBS])
])
