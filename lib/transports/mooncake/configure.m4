dnl SPDX-License-Identifier: BSD-3-Clause
dnl MOONCAKE transport (host memory between agents through Mooncake's
dnl Transfer Engine): --enable-mooncake=yes|no|auto|dl (m4/nxl_transport.m4),
dnl --with-mooncake=PATH
dnl
dnl NXL_MOONCAKE_CONFIGURE([action-if-buildable], [action-if-not]). The
dnl engine's C API is declared in lib/transports/mooncake/te_abi.h and
dnl libtransfer_engine.so is loaded at run time ($NXL_MOONCAKE_LIB, else the
dnl dynamic linker's search; tests/mooncake/build builds one): neither
dnl libnxl nor the module links it, and nothing of Mooncake is needed to
dnl build. --with-mooncake=PATH names the folder holding
dnl transfer_engine_c.h (or PATH/include): its declarations are then
dnl checked against te_abi.h's at build time. Sets MOONCAKE_CFLAGS and
dnl MOONCAKE_LIBS (dlopen's library).
AC_DEFUN([NXL_MOONCAKE_CONFIGURE], [
  AC_ARG_WITH([mooncake],
    [AS_HELP_STRING([--with-mooncake=PATH],
      [check the MOONCAKE transport's declarations against the transfer_engine_c.h in PATH or PATH/include])],
    [], [with_mooncake=])
  MOONCAKE_CFLAGS=""
  MOONCAKE_LIBS=""
  nxl_mooncake_hint="libtransfer_engine.so (Mooncake)"
  mooncake_ok=yes
  AS_IF([test "x$with_mooncake" != x && test "x$with_mooncake" != xyes && test "x$with_mooncake" != xno], [
    mooncake_inc=""
    for d in "$with_mooncake" "$with_mooncake/include" "$with_mooncake/mooncake-transfer-engine/include"; do
      AS_IF([test -z "$mooncake_inc" && test -f "$d/transfer_engine_c.h"], [mooncake_inc=$d])
    done
    AS_IF([test -n "$mooncake_inc"], [
      MOONCAKE_CFLAGS="-I$mooncake_inc -DNXL_HAVE_TE_HEADER=1"
      nxl_mooncake_summary="checked against $mooncake_inc/transfer_engine_c.h; "
    ], [
      mooncake_ok=no
      nxl_mooncake_why="--with-mooncake=$with_mooncake: no transfer_engine_c.h there or in include/"
    ])
  ])
  AS_IF([test "x$mooncake_ok" = xyes], [
    save_LIBS=$LIBS
    LIBS=""
    AC_SEARCH_LIBS([dlopen], [dl], [], [mooncake_ok=no; nxl_mooncake_why="no dlopen to load libtransfer_engine.so with"])
    MOONCAKE_LIBS=$LIBS
    LIBS=$save_LIBS
  ])
  AS_IF([test "x$mooncake_ok" = xyes], [
    nxl_mooncake_summary="${nxl_mooncake_summary}libtransfer_engine.so loaded when created"
    $1
  ], [MOONCAKE_CFLAGS=""; MOONCAKE_LIBS=""; $2])
  AC_SUBST([MOONCAKE_CFLAGS])
  AC_SUBST([MOONCAKE_LIBS])
])
