/* SPDX-License-Identifier: BSD-3-Clause */
/* pidfd_open(2), which glibc 2.36 has no wrapper for here: a descriptor
 * that holds a process, readable once it exited. UCX (cross-memory attach,
 * cma.c) and LIBFABRIC (shm peers, shm.c) watch their peers' processes
 * with it. Header-only. */
#ifndef NXL_PIDFD_H
#define NXL_PIDFD_H

#include <errno.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

/* -1 with errno (ENOSYS where the kernel headers do not know the call) */
static inline int nxl_pidfd_open(pid_t pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    (void)pid;
    errno = ENOSYS;
    return -1;
#endif
}

#endif
