/* SPDX-License-Identifier: BSD-3-Clause */
/* The part of 3FS's user-space I/O API (usrbio, hf3fs_usrbio.h, MIT) the
 * HF3FS transport calls, declared here from that header: 3FS's headers need
 * not be installed where nxl is built, and libnxl never links
 * libhf3fs_api_shared.so (hf3fs.c loads it at run time). Layouts are those
 * of hf3fs_usrbio.h on 64-bit Linux. tests/mock_hf3fs.c implements the same
 * declarations.
 *
 * What the calls do, as 3FS's UsrbIo.cc does them:
 * - an iov is a buffer the FUSE daemon can reach: hf3fs_iovcreate makes a
 *   shared-memory file and links it, by a 16-byte id, into the mount's
 *   3fs-virt/iovs/ folder; hf3fs_iovwrap only fills the struct for memory
 *   that is already linked there (it registers nothing);
 * - an ior is a ring of I/O requests for reads or for writes (not both):
 *   hf3fs_prep_io adds one (-EAGAIN when the ring is full), hf3fs_submit_ios
 *   wakes the daemon, hf3fs_wait_for_ios takes completions, waiting on a
 *   semaphore until an ABSOLUTE CLOCK_REALTIME time;
 * - hf3fs_reg_fd registers a file of the mount: 0 or less on success, a
 *   POSITIVE errno on failure (EBADF: not a 3FS file). */
#ifndef NXL_USRBIO_ABI_H
#define NXL_USRBIO_ABI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

struct nxl_hf3fs_iov {
    uint8_t *base;
    void *iovh;
    char id[16];
    char mount_point[256];
    size_t size;
    size_t block_size;
    int numa;
};

struct nxl_hf3fs_ior {
    struct nxl_hf3fs_iov iov;
    void *iorh;
    char mount_point[256];
    bool for_read;
    int io_depth;
    int priority;
    int timeout;
    uint64_t flags;
};

struct nxl_hf3fs_cqe {
    int32_t index;
    int32_t reserved;
    int64_t result;          /* bytes moved, or -errno */
    const void *userdata;
};

typedef int (*nxl_hf3fs_extract_mount_point_fn)(char *mp, int size, const char *path);
typedef int (*nxl_hf3fs_iovcreate_fn)(struct nxl_hf3fs_iov *iov, const char *mp, size_t size,
                                      size_t block_size, int numa);
typedef int (*nxl_hf3fs_iovwrap_fn)(struct nxl_hf3fs_iov *iov, void *base, const uint8_t id[16],
                                    const char *mp, size_t size, size_t block_size, int numa);
typedef void (*nxl_hf3fs_iovdestroy_fn)(struct nxl_hf3fs_iov *iov);
typedef int (*nxl_hf3fs_iorcreate4_fn)(struct nxl_hf3fs_ior *ior, const char *mp, int entries,
                                       bool for_read, int io_depth, int timeout, int numa,
                                       uint64_t flags);
typedef int (*nxl_hf3fs_iorcreate_fn)(struct nxl_hf3fs_ior *ior, const char *mp, int entries,
                                      bool for_read, int io_depth, int numa);
typedef void (*nxl_hf3fs_iordestroy_fn)(struct nxl_hf3fs_ior *ior);
typedef int (*nxl_hf3fs_reg_fd_fn)(int fd, uint64_t flags);
typedef void (*nxl_hf3fs_dereg_fd_fn)(int fd);
typedef int (*nxl_hf3fs_prep_io_fn)(const struct nxl_hf3fs_ior *ior,
                                    const struct nxl_hf3fs_iov *iov, bool read, void *ptr, int fd,
                                    size_t off, uint64_t len, const void *userdata);
typedef int (*nxl_hf3fs_submit_ios_fn)(const struct nxl_hf3fs_ior *ior);
typedef int (*nxl_hf3fs_wait_for_ios_fn)(const struct nxl_hf3fs_ior *ior,
                                         struct nxl_hf3fs_cqe *cqes, int cqec, int min_results,
                                         const struct timespec *abs_timeout);

#endif
