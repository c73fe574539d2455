/* SPDX-License-Identifier: BSD-3-Clause */
/* nxl's NIXL compatibility layer: NIXL's monotonic clock helpers (nixlTime), as nixlbench uses them. */
#ifndef _NIXL_TIME_H
#define _NIXL_TIME_H

#include <chrono>
#include <cstdint>

namespace nixlTime {
using ns_t = uint64_t;
using us_t = uint64_t;
using ms_t = uint64_t;
using sec_t = uint64_t;

template<class Unit> static inline uint64_t since_epoch() {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<Unit>(std::chrono::steady_clock::now().time_since_epoch())
            .count());
}

static inline ns_t getNs() { return since_epoch<std::chrono::nanoseconds>(); }
static inline us_t getUs() { return since_epoch<std::chrono::microseconds>(); }
static inline ms_t getMs() { return since_epoch<std::chrono::milliseconds>(); }
static inline sec_t getSec() { return since_epoch<std::chrono::seconds>(); }
} // namespace nixlTime

#endif
