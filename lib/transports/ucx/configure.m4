dnl SPDX-License-Identifier: BSD-3-Clause
dnl UCX transport: --enable-ucx=yes|no|auto|dl (m4/nxl_transport.m4), --with-ucx=PATH
dnl
dnl NXL_UCX_CONFIGURE([action-if-buildable], [action-if-not]): UCX 1.12+
dnl (ucp_ep_flush_nbx, ucp_am_send_nbx) with its headers; sets UCX_CFLAGS
dnl and UCX_LIBS, nxl_ucx_why when it cannot be built.
AC_DEFUN([NXL_UCX_CONFIGURE], [
  AC_ARG_WITH([ucx],
    [AS_HELP_STRING([--with-ucx=PATH], [use the UCX installed under PATH])],
    [], [with_ucx=])
  nxl_ucx_hint="libucx0"
  ucx_ok=no
  AS_IF([test "x$with_ucx" != x && test "x$with_ucx" != xyes], [
    UCX_CFLAGS="-I$with_ucx/include"
    ucx_libdir="$with_ucx/lib"
    AS_IF([test -d "$with_ucx/lib64"], [ucx_libdir="$with_ucx/lib64"])
    UCX_LIBS="-L$ucx_libdir -Wl,-rpath,$ucx_libdir -lucp -luct -lucs"
  ], [
    PKG_CHECK_MODULES([UCX], [ucx >= 1.12 ucx-uct ucx-ucs],
      [nxl_ucx_pc="ucx"; nxl_ucx_summary="UCX `$PKG_CONFIG --modversion ucx`"],
      [UCX_CFLAGS=""; UCX_LIBS="-lucp -luct -lucs"])
  ])
  save_CPPFLAGS=$CPPFLAGS; save_LIBS=$LIBS
  CPPFLAGS="$CPPFLAGS $UCX_CFLAGS"; LIBS="$UCX_LIBS $LIBS"
  AC_CHECK_HEADER([ucp/api/ucp.h], [
    AC_MSG_CHECKING([for ucp_ep_flush_nbx and ucp_am_send_nbx])
    AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <ucp/api/ucp.h>
#include <uct/api/uct.h>]],
      [[ucp_request_param_t p; p.op_attr_mask = 0; (void)ucp_ep_flush_nbx(0, &p);
        (void)ucp_am_send_nbx(0, 0, 0, 0, 0, 0, &p); (void)uct_query_components(0, 0);]])],
      [ucx_ok=yes], [nxl_ucx_why="UCX found but too old (needs 1.12+) or not linkable"])
    AC_MSG_RESULT([$ucx_ok])
  ], [nxl_ucx_why="ucp/api/ucp.h not found (apt-get install libucx-dev, or --with-ucx=PATH)"])
  CPPFLAGS=$save_CPPFLAGS; LIBS=$save_LIBS
  dnl Was this UCX built with CUDA? Its CUDA transports are the module
  dnl libuct_cuda in its module folder: then VRAM is registered with UCX
  dnl too (with its memory type), where UCX reports CUDA memory at run time.
  AS_IF([test "x$ucx_ok" = xyes], [
    AS_IF([test "x$with_ucx" != x && test "x$with_ucx" != xyes],
      [ucx_moddir="$ucx_libdir/ucx"],
      [ucx_moddir="`$PKG_CONFIG --variable=libdir ucx 2>/dev/null`/ucx"])
    AC_MSG_CHECKING([whether UCX was built with CUDA (libuct_cuda in $ucx_moddir)])
    ucx_cuda=no
    for f in "$ucx_moddir"/libuct_cuda.so*; do
      AS_IF([test -e "$f"], [ucx_cuda=yes])
    done
    AC_MSG_RESULT([$ucx_cuda])
    AS_IF([test "x$ucx_cuda" = xyes], [
      AC_DEFINE([NXL_UCX_CUDA], [1], [UCX was built with CUDA: the UCX transport serves VRAM too])
      nxl_ucx_summary="${nxl_ucx_summary:-UCX}, with CUDA"
    ], [nxl_ucx_summary="${nxl_ucx_summary:-UCX}, without CUDA"])
  ])
  AS_IF([test "x$ucx_ok" = xyes], [$1], [UCX_CFLAGS=""; UCX_LIBS=""; nxl_ucx_pc=""; $2])
  AC_SUBST([UCX_CFLAGS])
  AC_SUBST([UCX_LIBS])
])
