/* SPDX-License-Identifier: BSD-3-Clause */
/* Zeroing an object recycled on every post (a future, a transport op).
 * gcc 12 at -O2 writes a memset() of a known size of a few hundred bytes
 * inline as `rep stosq`, which costs ~25 ns here (its start-up) against
 * ~8 ns for glibc's memset() (vector stores): two such objects per message
 * were ~40 ns of a ~400 ns ping-pong's one-way trip. Through this function
 * the size is not known where memset() is called (noipa: neither inlined
 * nor cloned for a constant size), so glibc's runs. Header-only: every
 * user compiles its own copy, nothing is exported. */
#ifndef NXL_COMMON_ZERO_H
#define NXL_COMMON_ZERO_H

#include <stddef.h>
#include <string.h>

#if defined(__GNUC__) && !defined(__clang__)
#define NXL_ZERO_ATTR __attribute__((noipa, unused))
#else
#define NXL_ZERO_ATTR __attribute__((noinline, unused)) /* clang: no noipa */
#endif

NXL_ZERO_ATTR static void nxl_zero(void *p, size_t n)
{
    memset(p, 0, n);
}

#endif /* NXL_COMMON_ZERO_H */
