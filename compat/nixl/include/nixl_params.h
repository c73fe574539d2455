/* SPDX-License-Identifier: BSD-3-Clause */
/* nxl's NIXL compatibility layer: agent configuration (NIXL's nixlAgentConfig). */
#ifndef _NIXL_PARAMS_H
#define _NIXL_PARAMS_H

#include <chrono>
#include <cstdint>
#include <string>

#include "nixl_types.h"

struct nixlAgentConfig {
    static constexpr bool kDefaultUseProgThread = false;
    static constexpr bool kDefaultUseListenThread = false;
    static constexpr uint16_t kDefaultListenPort = default_comm_port;
    static constexpr nixl_thread_sync_t kDefaultSyncMode =
        nixl_thread_sync_t::NIXL_THREAD_SYNC_DEFAULT;
    static constexpr bool kDefaultCaptureTelemetry = false;
    static constexpr uint64_t kDefaultPthrDelayUs = 0;
    static constexpr uint64_t kDefaultLthrDelayUs = 100000;
    static constexpr std::chrono::microseconds kDefaultEtcdWatchTimeout =
        std::chrono::microseconds(5000000);

    /* true: nxl's threaded mode (the agent runs on a thread of its own). */
    bool useProgThread = kDefaultUseProgThread;
    /* true: a metadata listener on listenPort (and the threaded mode, so
     * that it answers while the program does something else). */
    bool useListenThread = kDefaultUseListenThread;
    uint16_t listenPort = kDefaultListenPort;
    nixl_thread_sync_t syncMode = kDefaultSyncMode;
    bool captureTelemetry = kDefaultCaptureTelemetry;
    uint64_t pthrDelay = kDefaultPthrDelayUs;  /* accepted, not used by nxl */
    uint64_t lthrDelay = kDefaultLthrDelayUs;  /* accepted, not used by nxl */
    std::chrono::microseconds etcdWatchTimeout = kDefaultEtcdWatchTimeout;

    nixlAgentConfig() = default;

    explicit nixlAgentConfig(const bool use_prog_thread,
                             const bool use_listen_thread = kDefaultUseListenThread,
                             uint16_t port = kDefaultListenPort,
                             nixl_thread_sync_t sync_mode = kDefaultSyncMode,
                             unsigned int num_workers = 1,
                             uint64_t pthr_delay_us = kDefaultPthrDelayUs,
                             uint64_t lthr_delay_us = kDefaultLthrDelayUs,
                             bool capture_telemetry = kDefaultCaptureTelemetry,
                             std::chrono::microseconds etcd_watch_timeout =
                                 kDefaultEtcdWatchTimeout) noexcept
        : useProgThread(use_prog_thread), useListenThread(use_listen_thread), listenPort(port),
          syncMode(sync_mode), captureTelemetry(capture_telemetry), pthrDelay(pthr_delay_us),
          lthrDelay(lthr_delay_us), etcdWatchTimeout(etcd_watch_timeout) {
        (void)num_workers;
    }
};

#endif
