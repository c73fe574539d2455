dnl SPDX-License-Identifier: BSD-3-Clause
dnl nxl_transport.m4 — configure every transport the same way
dnl (the model: libfabric's config/fi_provider.m4).
dnl
dnl configure.ac calls, in preference order of built-in transports:
dnl
dnl   NXL_TRANSPORTS_INIT
dnl   NXL_TRANSPORT([ucx], [UCX], [the UCX transport (host memory between agents)])
dnl   NXL_TRANSPORTS_FINI
dnl
dnl and prints $nxl_transport_summary (one line per transport) at the end.
dnl
dnl NXL_TRANSPORT([name], [NAME], [help text]) reads
dnl lib/transports/<name>/configure.m4, which defines
dnl NXL_<NAME>_CONFIGURE([action-if-buildable], [action-if-not]). That macro
dnl runs the transport's own checks (its --with-* options too), AC_SUBSTs its
dnl flags (and empties them when it cannot be built), and may set:
dnl
dnl   nxl_<name>_why      why it cannot be built (a sentence with what to install)
dnl   nxl_<name>_summary  a detail for the summary when built ("io_uring+threads")
dnl   nxl_<name>_pc       pkg-config modules for nxl.pc's Requires.private
dnl                       (used only when built into libnxl)
dnl   nxl_<name>_hint     the runtime package a module needs ("libucx0"), named
dnl                       in nxl_plugins_available() when the module cannot load
dnl
dnl NXL_TRANSPORT then gives the transport --enable-<name>=yes|no|auto|dl:
dnl   auto (default)  built into libnxl when its checks pass, else skipped
dnl   yes             built into libnxl; configure fails if it cannot be
dnl   dl              built as the module libnxl-<name>.so, installed in
dnl                   $(pkglibdir)/transports-<ABI>; fails if it cannot be
dnl   no              not built
dnl and defines, for Makefile.include and the engine:
dnl   AM_CONDITIONAL NXL_BUILD_<NAME>          built at all (in or as a module)
dnl   AM_CONDITIONAL NXL_BUILD_<NAME>_BUILTIN  built into libnxl
dnl   AM_CONDITIONAL NXL_BUILD_<NAME>_DL       built as a module
dnl   NXL_HAVE_<NAME> in config.h              built into libnxl
dnl   its entry in NXL_BUILTIN_TRANSPORTS and NXL_CONFIGURED_TRANSPORTS
dnl   (config.h), which lib/engine/transports.c reads.

AC_DEFUN([NXL_TRANSPORTS_INIT], [
  nxl_builtin_list=""
  nxl_configured_list=""
  nxl_transport_summary=""
  nxl_transports_dl=no
  dnl The transport ABI (NXLT_ABI_VERSION in include/nxl/transport.h) names
  dnl the folder modules are installed in: one source of truth, the header.
  AC_MSG_CHECKING([the transport ABI version])
  NXLT_ABI_VERSION=`sed -n 's/^@%:@define NXLT_ABI_VERSION \([[0-9]][[0-9]]*\).*/\1/p' "$srcdir/include/nxl/transport.h"`
  AS_IF([test "x$NXLT_ABI_VERSION" = x],
    [AC_MSG_ERROR([no NXLT_ABI_VERSION definition found in $srcdir/include/nxl/transport.h])])
  AC_MSG_RESULT([$NXLT_ABI_VERSION])
  AC_SUBST([NXLT_ABI_VERSION])
])

dnl NXL_TRANSPORT([name], [NAME], [help text])
AC_DEFUN([NXL_TRANSPORT], [
  dnl (through m4_indir: aclocal would take a literal include for a file name)
  m4_indir([m4_include], [lib/transports/$1/configure.m4])
  AC_ARG_ENABLE([$1],
    [AS_HELP_STRING([--enable-$1=yes|no|auto|dl],
      [$3: built into libnxl (yes, auto) or as a loadable module (dl) (default: auto)])],
    [], [enable_$1=auto])
  AS_CASE([$enable_$1],
    [yes|no|auto|dl], [],
    [AC_MSG_ERROR([--enable-$1=$enable_$1: expected yes, no, auto or dl])])
  nxl_$1_why=""
  nxl_$1_summary=""
  nxl_$1_pc=""
  nxl_$1_hint=""
  nxl_$1_mode=none
  AS_IF([test "x$enable_$1" = xdl && test "x$enable_shared" = xno],
    [AC_MSG_ERROR([--enable-$1=dl needs shared libraries: drop --disable-shared, or build $2 in with --enable-$1=yes])])
  AS_IF([test "x$enable_$1" != xno], [
    nxl_$1_ok=no
    m4_indir([NXL_]m4_toupper([$1])[_CONFIGURE], [nxl_$1_ok=yes], [nxl_$1_ok=no])
    AS_IF([test "x$nxl_$1_ok" = xyes], [
      AS_IF([test "x$enable_$1" = xdl], [nxl_$1_mode=dl], [nxl_$1_mode=builtin])
    ], [
      AS_IF([test "x$nxl_$1_why" = x], [nxl_$1_why="its checks failed (see config.log)"])
      AS_IF([test "x$enable_$1" = xyes || test "x$enable_$1" = xdl],
        [AC_MSG_ERROR([--enable-$1=$enable_$1 but $2 cannot be built: $nxl_$1_why])])
    ])
  ], [nxl_$1_why="disabled by --disable-$1"])

  nxl_$1_detail=""
  AS_IF([test "x$nxl_$1_summary" != x], [nxl_$1_detail=" ($nxl_$1_summary)"])
  AS_CASE([$nxl_$1_mode],
    [builtin], [
      AC_DEFINE([NXL_HAVE_]m4_toupper([$1]), [1], [$2 transport built into libnxl])
      nxl_builtin_list="$nxl_builtin_list X($1)"
      NXL_PC_REQUIRES_PRIVATE="$NXL_PC_REQUIRES_PRIVATE $nxl_$1_pc"
      nxl_transport_summary="$nxl_transport_summary
    m4_format([%-8s], [$2]) built in$nxl_$1_detail"
      nxl_$1_state=1],
    [dl], [
      nxl_transports_dl=yes
      nxl_transport_summary="$nxl_transport_summary
    m4_format([%-8s], [$2]) module libnxl-$1.so$nxl_$1_detail"
      nxl_$1_state=2],
    [
      nxl_transport_summary="$nxl_transport_summary
    m4_format([%-8s], [$2]) not built: $nxl_$1_why"
      nxl_$1_state=0])
  dnl a C string for config.h: no double quotes or backslashes in it
  nxl_$1_cwhy=`AS_ECHO(["$nxl_$1_why"]) | sed 's/[[\\"]]/'"'"'/g'`
  nxl_$1_chint=`AS_ECHO(["$nxl_$1_hint"]) | sed 's/[[\\"]]/'"'"'/g'`
  nxl_configured_list="$nxl_configured_list X(\"$1\", \"$2\", $nxl_$1_state, \"$nxl_$1_chint\", \"$nxl_$1_cwhy\")"
  AM_CONDITIONAL([NXL_BUILD_]m4_toupper([$1]), [test "x$nxl_$1_mode" != xnone])
  AM_CONDITIONAL([NXL_BUILD_]m4_toupper([$1])[_BUILTIN], [test "x$nxl_$1_mode" = xbuiltin])
  AM_CONDITIONAL([NXL_BUILD_]m4_toupper([$1])[_DL], [test "x$nxl_$1_mode" = xdl])
])

AC_DEFUN([NXL_TRANSPORTS_FINI], [
  AC_DEFINE_UNQUOTED([NXL_BUILTIN_TRANSPORTS], [$nxl_builtin_list],
    [The transports built into libnxl, in preference order: X(name) each, for nxlt_<name>_ops])
  AC_DEFINE_UNQUOTED([NXL_CONFIGURED_TRANSPORTS], [$nxl_configured_list],
    [Every transport configure knows: X("name", "NAME", 0 not built / 1 built in / 2 module, "runtime package", "why not built")])
  AM_CONDITIONAL([NXL_TRANSPORTS_DL], [test "x$nxl_transports_dl" = xyes])
  AM_CONDITIONAL([NXL_SHARED], [test "x$enable_shared" != xno])
  dnl dlopen: in libc since glibc 2.34, in libdl before
  save_LIBS=$LIBS
  LIBS=""
  AC_SEARCH_LIBS([dlopen], [dl], [],
    [AC_MSG_ERROR([dlopen() not found: nxl loads its transport modules with it])])
  DL_LIBS=$LIBS
  LIBS=$save_LIBS
  AC_SUBST([DL_LIBS])
])
