/* SPDX-License-Identifier: BSD-3-Clause */
/* A clock read in microseconds, for the engine (the monotonic clock, the
 * wall clock of its authentication stamps) and UCX (its coarse clock of the
 * stall timeout). Header-only: every user compiles its own copy, nothing is
 * exported. */
#ifndef NXL_COMMON_CLOCK_US_H
#define NXL_COMMON_CLOCK_US_H

#include <stdint.h>
#include <time.h>

static inline uint64_t nxl_clock_us(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

#endif /* NXL_COMMON_CLOCK_US_H */
