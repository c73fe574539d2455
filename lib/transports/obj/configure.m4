dnl SPDX-License-Identifier: BSD-3-Clause
dnl OBJ transport (S3 and Azure Blob object stores):
dnl --enable-obj=yes|no|auto|dl (m4/nxl_transport.m4)
dnl
dnl NXL_OBJ_CONFIGURE([action-if-buildable], [action-if-not]): libcurl >=
dnl 7.75 (CURLOPT_AWS_SIGV4 signs S3 requests). Azure Blob (api=azure) needs
dnl HMAC-SHA256 for Shared Key from OpenSSL's libcrypto (Debian: libssl-dev);
dnl without it the transport speaks S3 only and says so. Sets OBJ_CFLAGS and
dnl OBJ_LIBS (libcurl, libcrypto: linked for this transport only).
AC_DEFUN([NXL_OBJ_CONFIGURE], [
  obj_ok=no
  nxl_obj_hint="libcurl4"
  PKG_CHECK_MODULES([OBJ_CURL], [libcurl >= 7.75], [obj_ok=yes],
    [nxl_obj_why="libcurl >= 7.75 not found (apt-get install libcurl4-openssl-dev)"])
  have_obj_azure=no
  AS_IF([test "x$obj_ok" = xyes], [
    PKG_CHECK_MODULES([OBJ_CRYPTO], [libcrypto >= 1.1], [have_obj_azure=yes],
      [have_obj_azure=no; OBJ_CRYPTO_CFLAGS=""; OBJ_CRYPTO_LIBS=""])
    AS_IF([test "x$have_obj_azure" = xyes], [
      AC_DEFINE([NXL_HAVE_OBJ_AZURE], [1], [libcrypto found: the OBJ transport speaks Azure Blob too])
      nxl_obj_summary="S3, Azure Blob"
      nxl_obj_pc="libcurl libcrypto"
    ], [
      nxl_obj_summary="S3 only: no libcrypto for Azure's Shared Key"
      nxl_obj_pc="libcurl"
    ])
    AC_DEFINE([NXL_HAVE_CURL], [1], [libcurl found: HTTP on the reactor (lib/engine/http.c)])
  ])
  OBJ_CFLAGS="$OBJ_CURL_CFLAGS $OBJ_CRYPTO_CFLAGS"
  OBJ_LIBS="$OBJ_CURL_LIBS $OBJ_CRYPTO_LIBS"
  AS_IF([test "x$obj_ok" = xyes], [$1], [OBJ_CFLAGS=""; OBJ_LIBS=""; nxl_obj_pc=""; $2])
  AC_SUBST([OBJ_CFLAGS])
  AC_SUBST([OBJ_LIBS])
])
