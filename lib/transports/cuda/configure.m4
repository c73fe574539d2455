dnl SPDX-License-Identifier: BSD-3-Clause
dnl CUDA transport (GPU memory): --enable-cuda=yes|no|auto|dl (m4/nxl_transport.m4),
dnl --with-cuda=PATH
dnl
dnl Needs only the CUDA headers at build time (cuda_runtime_api.h and
dnl cuda.h, for types and constants): libnxl never links against libcudart
dnl or libcuda. The transport resolves the runtime at run time (dlopen of
dnl libcudart.so.13, .12, then libcudart.so; libcuda.so.1 for the driver),
dnl so that one libnxl loads on machines with and without GPUs, and
dnl nxl_plugins_available() says why it cannot be created where it cannot.
dnl
dnl CUDA_RT_LIBS is for the programs beside the library that call CUDA
dnl themselves (bench/cuda_memcpy_ref): -lcudart when it links.
dnl NXL_CUDA_CONFIGURE([action-if-buildable], [action-if-not]): sets
dnl CUDA_CFLAGS, CUDA_DL_LIBS (and CUDA_LIBS for the module: the same),
dnl CUDA_RT_LIBS, nxl_cuda_why; have_cudart_link for NXL_BUILD_CUDA_REF.
AC_DEFUN([NXL_CUDA_CONFIGURE], [
  AC_ARG_WITH([cuda],
    [AS_HELP_STRING([--with-cuda=PATH],
      [CUDA toolkit whose headers to build against (default: /usr/local/cuda when present)])],
    [], [with_cuda=])
  have_cuda=no
  CUDA_CFLAGS=""
  CUDA_RT_LIBS=""
  CUDA_DL_LIBS=""
  nxl_cuda_hint="the NVIDIA driver and CUDA runtime (libcudart.so.13)"
  cuda_home=""
  AS_IF([test "x$with_cuda" != x && test "x$with_cuda" != xyes], [cuda_home="$with_cuda"],
        [test -d /usr/local/cuda/include], [cuda_home=/usr/local/cuda])
  AS_IF([test "x$cuda_home" != x], [CUDA_CFLAGS="-I$cuda_home/include"])
  save_CPPFLAGS=$CPPFLAGS
  CPPFLAGS="$CPPFLAGS $CUDA_CFLAGS"
  AC_CHECK_HEADER([cuda_runtime_api.h], [
    AC_CHECK_HEADER([cuda.h], [
      AC_MSG_CHECKING([for cudaLaunchHostFunc and cudaIpcMemHandle_t in the CUDA headers])
      AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[#include <cuda_runtime_api.h>
#include <cuda.h>]],
        [[cudaIpcMemHandle_t h; cudaHostFn_t fn = 0; CUpointer_attribute at = CU_POINTER_ATTRIBUTE_RANGE_SIZE;
          (void)h; (void)fn; (void)at; (void)sizeof(&cudaLaunchHostFunc);]])],
        [have_cuda=yes], [nxl_cuda_why="the CUDA headers are too old (needs CUDA 10+)"])
      AC_MSG_RESULT([$have_cuda])
    ], [nxl_cuda_why="cuda.h not found beside cuda_runtime_api.h"])
  ], [nxl_cuda_why="cuda_runtime_api.h not found (install the CUDA toolkit, or --with-cuda=PATH)"])
  CPPFLAGS=$save_CPPFLAGS
  AS_IF([test "x$have_cuda" = xyes], [
    AC_CHECK_LIB([dl], [dlopen], [CUDA_DL_LIBS="-ldl"], [CUDA_DL_LIBS=""])
    dnl only for the bench's reference program, never for libnxl
    cuda_libdir=""
    AS_IF([test "x$cuda_home" != x], [
      cuda_libdir="$cuda_home/lib64"
      AS_IF([test -d "$cuda_libdir"], [], [cuda_libdir="$cuda_home/lib"])
    ])
    save_LIBS=$LIBS; save_LDFLAGS=$LDFLAGS
    AS_IF([test "x$cuda_libdir" != x], [LDFLAGS="$LDFLAGS -L$cuda_libdir"])
    AC_CHECK_LIB([cudart], [cudaMemcpyAsync], [have_cudart_link=yes])
    LIBS=$save_LIBS; LDFLAGS=$save_LDFLAGS
    AS_IF([test "x$have_cudart_link" = xyes], [
      AS_IF([test "x$cuda_libdir" != x],
        [CUDA_RT_LIBS="-L$cuda_libdir -Wl,-rpath,$cuda_libdir -lcudart"],
        [CUDA_RT_LIBS="-lcudart"])
    ])
    nxl_cuda_summary="headers ${cuda_home:-of the compiler}; runtime loaded when created"
    dnl nvcc, optional: the KV re-layout kernel (lib/transports/cuda/kv_relayout.cu)
    dnl is compiled to a fatbin when it is there and compiles a kernel
    AC_ARG_VAR([NVCC], [the CUDA compiler for the KV re-layout kernel (default: nvcc of the toolkit)])
    AS_IF([test "x$NVCC" = x], [AC_PATH_PROG([NVCC], [nvcc], [],
      [${cuda_home:+$cuda_home/bin$PATH_SEPARATOR}$PATH])])
    have_nvcc=no
    AS_IF([test "x$NVCC" != x], [
      AC_MSG_CHECKING([whether $NVCC compiles a kernel to a fatbin])
      printf '__global__ void k(int *p) { *p = 1; }\n' > conftest.cu
      AS_IF([$NVCC -fatbin -o conftest.fatbin conftest.cu >&AS_MESSAGE_LOG_FD 2>&1],
        [have_nvcc=yes])
      rm -f conftest.cu conftest.fatbin
      AC_MSG_RESULT([$have_nvcc])
    ])
    AS_IF([test "x$have_nvcc" = xyes],
      [nxl_cuda_summary="$nxl_cuda_summary; KV re-layout kernel built by $NVCC"],
      [nxl_cuda_summary="$nxl_cuda_summary; no nvcc: KV re-layout kernel not built"])
  ])
  AS_IF([test "x$have_cuda" = xyes], [$1], [CUDA_CFLAGS=""; CUDA_DL_LIBS=""; $2])
  CUDA_LIBS=$CUDA_DL_LIBS
  AC_SUBST([CUDA_CFLAGS])
  AC_SUBST([CUDA_LIBS])
  AC_SUBST([CUDA_DL_LIBS])
  AC_SUBST([CUDA_RT_LIBS])
])
