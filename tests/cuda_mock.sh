#!/bin/sh
# check_cuda again, with the CUDA runtime and driver replaced by
# tests/mock_cudart.c (streams as threads, device memory as shared
# mappings): the GPU cases run on machines without a GPU. It proves the
# transport's logic, not a real driver's behaviour or speed.
lib="$PWD/tests/.libs/libmockcudart.so"
if [ ! -f "$lib" ]; then
    echo "SKIP: the mock CUDA library was not built ($lib)"
    exit 77
fi
NXL_CUDA_RUNTIME="$lib" NXL_CUDA_DRIVER="$lib" NXL_TEST_SMALL=1 exec tests/check_cuda
