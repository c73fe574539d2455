dnl OBJ transport (S3 and Azure Blob object stores): --enable-obj=yes|no|auto
dnl
dnl Needs libcurl >= 7.75 (CURLOPT_AWS_SIGV4 signs S3 requests). Azure's
dnl Shared Key authorisation needs HMAC-SHA256 from OpenSSL's libcrypto
dnl (Debian: libssl-dev); without it the transport is built for S3 only and
dnl the AZURE name says why it cannot be created. libcrypto is linked for
dnl this transport only.
AC_DEFUN([NXL_TRANSPORT_OBJ], [
  AC_ARG_ENABLE([obj],
    [AS_HELP_STRING([--enable-obj=yes|no|auto],
      [build the OBJ transport for S3 and Azure Blob object stores (default: auto)])],
    [], [enable_obj=auto])
  have_obj=no
  have_obj_azure=no
  obj_why=""
  AS_IF([test "x$enable_obj" != xno], [
    PKG_CHECK_MODULES([OBJ_CURL], [libcurl >= 7.75], [have_obj=yes],
      [obj_why="libcurl >= 7.75 not found (apt-get install libcurl4-openssl-dev)"])
    AS_IF([test "x$have_obj" = xyes], [
      PKG_CHECK_MODULES([OBJ_CRYPTO], [libcrypto >= 1.1], [have_obj_azure=yes],
        [have_obj_azure=no])
    ])
    AS_IF([test "x$have_obj" = xno && test "x$enable_obj" = xyes],
      [AC_MSG_ERROR([--enable-obj=yes but $obj_why])])
  ], [obj_why="disabled by --disable-obj"])
  AS_IF([test "x$have_obj" = xyes], [
    AC_DEFINE([NXL_HAVE_OBJ], [1], [OBJ transport built in])
    AC_DEFINE([NXL_HAVE_CURL], [1], [libcurl found: HTTP on the reactor (lib/engine/http.c)])
    NXL_PC_REQUIRES_PRIVATE="$NXL_PC_REQUIRES_PRIVATE libcurl"
    AS_IF([test "x$have_obj_azure" = xyes], [
      AC_DEFINE([NXL_HAVE_OBJ_AZURE], [1], [libcrypto found: the OBJ transport speaks Azure Blob too])
      NXL_PC_REQUIRES_PRIVATE="$NXL_PC_REQUIRES_PRIVATE libcrypto"
      NXL_TRANSPORTS_BUILT="$NXL_TRANSPORTS_BUILT OBJ(S3) AZURE"
    ], [
      OBJ_CRYPTO_CFLAGS=""; OBJ_CRYPTO_LIBS=""
      NXL_TRANSPORTS_BUILT="$NXL_TRANSPORTS_BUILT OBJ(S3)"
      NXL_TRANSPORTS_SKIPPED="$NXL_TRANSPORTS_SKIPPED AZURE(libcrypto not found for Shared Key: apt-get install libssl-dev)"
    ])
  ], [
    OBJ_CURL_CFLAGS=""; OBJ_CURL_LIBS=""; OBJ_CRYPTO_CFLAGS=""; OBJ_CRYPTO_LIBS=""
    NXL_TRANSPORTS_SKIPPED="$NXL_TRANSPORTS_SKIPPED OBJ($obj_why) AZURE($obj_why)"
  ])
  AC_SUBST([OBJ_CURL_CFLAGS])
  AC_SUBST([OBJ_CURL_LIBS])
  AC_SUBST([OBJ_CRYPTO_CFLAGS])
  AC_SUBST([OBJ_CRYPTO_LIBS])
  AM_CONDITIONAL([NXL_BUILD_OBJ], [test "x$have_obj" = xyes])
])
