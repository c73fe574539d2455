dnl SPDX-License-Identifier: BSD-3-Clause
dnl NXL_CHECK_LD_VERSION_SCRIPT: does the linker take a GNU version script
dnl (-Wl,--version-script)? Sets the conditional NXL_LD_VERSION_SCRIPT, with
dnl which Makefile.am links libnxl against lib/libnxl.map, and
dnl nxl_ld_version_script=yes|no.
AC_DEFUN([NXL_CHECK_LD_VERSION_SCRIPT], [
  AC_ARG_ENABLE([version-script],
    [AS_HELP_STRING([--disable-version-script],
      [export every non-hidden symbol, unversioned, instead of lib/libnxl.map's list (default: use it when the linker can)])],
    [], [enable_version_script=auto])
  nxl_ld_version_script=no
  AS_IF([test "x$enable_version_script" != xno], [
    AC_MSG_CHECKING([whether the linker takes --version-script])
    cat > conftest.map <<_NXLEOF
NXL_CONFTEST { global: nxl_conftest; local: *; };
_NXLEOF
    save_LDFLAGS=$LDFLAGS
    LDFLAGS="$LDFLAGS -Wl,--version-script=conftest.map"
    AC_LINK_IFELSE([AC_LANG_PROGRAM([[int nxl_conftest(void); int nxl_conftest(void) { return 0; }]], [[return nxl_conftest();]])],
      [nxl_ld_version_script=yes])
    LDFLAGS=$save_LDFLAGS
    rm -f conftest.map
    AC_MSG_RESULT([$nxl_ld_version_script])
    AS_IF([test "x$nxl_ld_version_script" = xno && test "x$enable_version_script" = xyes],
      [AC_MSG_ERROR([--enable-version-script but the linker does not take -Wl,--version-script])])
  ])
  AM_CONDITIONAL([NXL_LD_VERSION_SCRIPT], [test "x$nxl_ld_version_script" = xyes])
])
