dnl UCX transport: --enable-ucx=yes|no|auto, --with-ucx=PATH
AC_DEFUN([NXL_TRANSPORT_UCX], [
  AC_ARG_ENABLE([ucx],
    [AS_HELP_STRING([--enable-ucx=yes|no|auto], [build the UCX transport (default: auto)])],
    [], [enable_ucx=auto])
  AC_ARG_WITH([ucx],
    [AS_HELP_STRING([--with-ucx=PATH], [use the UCX installed under PATH])],
    [], [with_ucx=])
  have_ucx=no
  ucx_why=""
  AS_IF([test "x$enable_ucx" != xno], [
    AS_IF([test "x$with_ucx" != x && test "x$with_ucx" != xyes], [
      UCX_CFLAGS="-I$with_ucx/include"
      ucx_libdir="$with_ucx/lib"
      AS_IF([test -d "$with_ucx/lib64"], [ucx_libdir="$with_ucx/lib64"])
      UCX_LIBS="-L$ucx_libdir -Wl,-rpath,$ucx_libdir -lucp -luct -lucs"
    ], [
      PKG_CHECK_MODULES([UCX], [ucx >= 1.12 ucx-uct ucx-ucs], [],
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
        [have_ucx=yes], [ucx_why="UCX found but too old (needs 1.12+) or not linkable"])
      AC_MSG_RESULT([$have_ucx])
    ], [ucx_why="ucp/api/ucp.h not found (apt-get install libucx-dev, or --with-ucx=PATH)"])
    CPPFLAGS=$save_CPPFLAGS; LIBS=$save_LIBS
    AS_IF([test "x$have_ucx" = xno && test "x$enable_ucx" = xyes],
      [AC_MSG_ERROR([--enable-ucx=yes but $ucx_why])])
  ], [ucx_why="disabled by --disable-ucx"])
  AS_IF([test "x$have_ucx" = xyes], [
    AC_DEFINE([NXL_HAVE_UCX], [1], [UCX transport built in])
    NXL_TRANSPORTS_BUILT="$NXL_TRANSPORTS_BUILT UCX"
    AS_IF([test "x$with_ucx" = x], [NXL_PC_REQUIRES_PRIVATE="$NXL_PC_REQUIRES_PRIVATE ucx"])
  ], [
    UCX_CFLAGS=""; UCX_LIBS=""
    NXL_TRANSPORTS_SKIPPED="$NXL_TRANSPORTS_SKIPPED UCX($ucx_why)"
  ])
  AC_SUBST([UCX_CFLAGS])
  AC_SUBST([UCX_LIBS])
  AM_CONDITIONAL([NXL_BUILD_UCX], [test "x$have_ucx" = xyes])
])
