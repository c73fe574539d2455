/* SPDX-License-Identifier: BSD-3-Clause */
/* The part of NVIDIA's cuFile (GPUDirect Storage) C interface the GDS
 * transport calls, declared here: the toolkit this is built with need not
 * ship cufile.h, and libnxl never links libcufile (gds.c loads it at run
 * time). Layouts and values are those of cuFile's C ABI (x86-64 and
 * aarch64 Linux): a status is two ints, a file descriptor is a handle type,
 * a pointer-sized union and a pointer. tests/mock_cufile.c implements the
 * same declarations. */
#ifndef NXL_CUFILE_ABI_H
#define NXL_CUFILE_ABI_H

#include <stddef.h>
#include <sys/types.h>

/* cuFile's status codes (CUfileOpError): 0 is success, errors from 5000 */
enum {
    NXL_CUFILE_SUCCESS = 0,
    NXL_CUFILE_DRIVER_NOT_INITIALIZED = 5001,
    NXL_CUFILE_DRIVER_INVALID_PROPS = 5002,
    NXL_CUFILE_DRIVER_UNSUPPORTED_LIMIT = 5003,
    NXL_CUFILE_DRIVER_VERSION_MISMATCH = 5004,
    NXL_CUFILE_DRIVER_VERSION_READ_ERROR = 5005,
    NXL_CUFILE_DRIVER_CLOSING = 5006,
    NXL_CUFILE_PLATFORM_NOT_SUPPORTED = 5007,
    NXL_CUFILE_IO_NOT_SUPPORTED = 5008,
    NXL_CUFILE_DEVICE_NOT_SUPPORTED = 5009,
    NXL_CUFILE_NVFS_DRIVER_ERROR = 5010,
    NXL_CUFILE_CUDA_DRIVER_ERROR = 5011,
    NXL_CUFILE_CUDA_POINTER_INVALID = 5012,
    NXL_CUFILE_CUDA_MEMORY_TYPE_INVALID = 5013,
    NXL_CUFILE_CUDA_POINTER_RANGE_ERROR = 5014,
    NXL_CUFILE_CUDA_CONTEXT_MISMATCH = 5015,
    NXL_CUFILE_INVALID_MAPPING_SIZE = 5016,
    NXL_CUFILE_INVALID_MAPPING_RANGE = 5017,
    NXL_CUFILE_INVALID_FILE_TYPE = 5018,
    NXL_CUFILE_INVALID_FILE_OPEN_FLAG = 5019,
    NXL_CUFILE_DIO_NOT_SET = 5020,
    NXL_CUFILE_INVALID_VALUE = 5022,
    NXL_CUFILE_MEMORY_ALREADY_REGISTERED = 5023,
    NXL_CUFILE_MEMORY_NOT_REGISTERED = 5024,
    NXL_CUFILE_PERMISSION_DENIED = 5025,
    NXL_CUFILE_DRIVER_ALREADY_OPEN = 5026,
    NXL_CUFILE_HANDLE_NOT_REGISTERED = 5027,
    NXL_CUFILE_HANDLE_ALREADY_REGISTERED = 5028,
    NXL_CUFILE_DEVICE_NOT_FOUND = 5029,
    NXL_CUFILE_INTERNAL_ERROR = 5030,
    NXL_CUFILE_GETNEWFD_FAILED = 5031,
    NXL_CUFILE_NVFS_SETUP_ERROR = 5033,
    NXL_CUFILE_IO_DISABLED = 5034,
    NXL_CUFILE_BATCH_SUBMIT_FAILED = 5035,
    NXL_CUFILE_GPU_MEMORY_PINNING_FAILED = 5036,
    NXL_CUFILE_BATCH_FULL = 5037,
    NXL_CUFILE_ASYNC_NOT_SUPPORTED = 5038,
};

/* the handle type of a Linux file descriptor */
#define NXL_CUFILE_HANDLE_TYPE_OPAQUE_FD 1

typedef struct nxl_cufile_status {
    int err;    /* a status code above */
    int cu_err; /* the CUDA driver's CUresult when err is NXL_CUFILE_CUDA_DRIVER_ERROR */
} nxl_cufile_status_t;

typedef struct nxl_cufile_descr {
    int type; /* NXL_CUFILE_HANDLE_TYPE_OPAQUE_FD */
    union {
        int fd;
        void *handle;
    } handle;
    const void *fs_ops; /* NULL: the kernel's file system */
} nxl_cufile_descr_t;

typedef void *nxl_cufile_handle_t;

/* The functions, as the library exports them. cuFileRead and cuFileWrite
 * return the bytes moved, -1 with errno for a system error, or the
 * negated status code of a cuFile error. */
typedef nxl_cufile_status_t (*nxl_cufile_driver_open_fn)(void);
typedef nxl_cufile_status_t (*nxl_cufile_driver_close_fn)(void);
typedef nxl_cufile_status_t (*nxl_cufile_handle_register_fn)(nxl_cufile_handle_t *fh,
                                                             nxl_cufile_descr_t *descr);
typedef void (*nxl_cufile_handle_deregister_fn)(nxl_cufile_handle_t fh);
typedef nxl_cufile_status_t (*nxl_cufile_buf_register_fn)(const void *base, size_t len, int flags);
typedef nxl_cufile_status_t (*nxl_cufile_buf_deregister_fn)(const void *base);
typedef ssize_t (*nxl_cufile_read_fn)(nxl_cufile_handle_t fh, void *base, size_t size,
                                      off_t file_offset, off_t buf_offset);
typedef ssize_t (*nxl_cufile_write_fn)(nxl_cufile_handle_t fh, const void *base, size_t size,
                                       off_t file_offset, off_t buf_offset);
typedef nxl_cufile_status_t (*nxl_cufile_get_version_fn)(int *version);

#endif
