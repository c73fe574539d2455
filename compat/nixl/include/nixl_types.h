/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * nxl's NIXL compatibility layer: the types of NIXL's C++ agent API.
 * Names, values and signatures are NIXL's, so that a program written for
 * NIXL builds unchanged; the implementation is libnxl-nixl, over libnxl.
 */
#ifndef _NIXL_TYPES_H
#define _NIXL_TYPES_H

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

class nixlSerDes;
class nixlDlistH;
class nixlBackendH;
class nixlXferReqH;
class nixlAgentData;

/* Kinds of memory; the values are those of nxl_mem_t. */
enum nixl_mem_t { DRAM_SEG, VRAM_SEG, BLK_SEG, OBJ_SEG, FILE_SEG };

/* Direction of a transfer as the initiator sees it. */
enum nixl_xfer_op_t { NIXL_READ, NIXL_WRITE };

/* Status of every call; the values are those of nxl_status_t. */
enum nixl_status_t {
    NIXL_IN_PROG = 1,
    NIXL_SUCCESS = 0,
    NIXL_ERR_NOT_POSTED = -1,
    NIXL_ERR_INVALID_PARAM = -2,
    NIXL_ERR_BACKEND = -3,
    NIXL_ERR_NOT_FOUND = -4,
    NIXL_ERR_MISMATCH = -5,
    NIXL_ERR_NOT_ALLOWED = -6,
    NIXL_ERR_REPOST_ACTIVE = -7,
    NIXL_ERR_UNKNOWN = -8,
    NIXL_ERR_NOT_SUPPORTED = -9,
    NIXL_ERR_REMOTE_DISCONNECT = -10,
    NIXL_ERR_CANCELED = -11,
    NIXL_ERR_NO_TELEMETRY = -12
};

/* How an agent guards itself against calls from several threads. */
enum class nixl_thread_sync_t {
    NIXL_THREAD_SYNC_NONE,
    NIXL_THREAD_SYNC_STRICT,
    NIXL_THREAD_SYNC_RW,
    NIXL_THREAD_SYNC_DEFAULT = NIXL_THREAD_SYNC_NONE,
};

namespace nixlEnumStrings {
std::string memTypeStr(const nixl_mem_t &mem);
std::string xferOpStr(const nixl_xfer_op_t &op);
std::string statusStr(const nixl_status_t &status);
} // namespace nixlEnumStrings

using nixl_backend_t = std::string;          /* a backend's name: "UCX", ... */
using nixl_telemetry_plugin_t = std::string;
using nixl_blob_t = std::string;             /* opaque bytes, NULs allowed */
using nixl_mem_list_t = std::vector<nixl_mem_t>;
using nixl_b_params_t = std::unordered_map<std::string, std::string>;
using nixl_notifs_t = std::unordered_map<std::string, std::vector<nixl_blob_t>>;

inline constexpr uint16_t default_comm_port = 8888;

extern const std::string default_metadata_label;
extern const std::string default_partial_metadata_label;

enum class nixl_cost_t {
    ANALYTICAL_BACKEND = 0,
};

/* queryMem's answer per descriptor: empty when nothing is there. */
using nixl_query_resp_t = std::optional<nixl_b_params_t>;

/* Optional arguments of the agent's calls; each call reads the fields it uses. */
struct nixlAgentOptionalArgs {
    std::vector<nixlBackendH *> backends; /* limit the call to these backends */
    std::optional<nixl_blob_t> notif;     /* notification of a transfer (set: sent, even "") */
    nixl_blob_t notifMsg;                 /* older form of notif, with hasNotif */
    bool hasNotif = false;
    bool skipDescMerge = false;
    bool includeConnInfo = false;         /* partial metadata carries connection info */
    std::string ipAddr;                   /* peer of sendLocalMD / fetchRemoteMD / ... */
    int port = default_comm_port;
    std::string metadataLabel;            /* etcd key label */
    nixl_blob_t customParam;
};
using nixl_opt_args_t = nixlAgentOptionalArgs;

using nixlMemViewH = void *;

using chrono_point_t = std::chrono::steady_clock::time_point;
using chrono_period_us_t = std::chrono::microseconds;

/* What getXferTelemetry() reports of a transfer's last post. */
struct nixlXferTelemetry {
    chrono_point_t startTime;
    chrono_period_us_t postDuration;
    chrono_period_us_t xferDuration;
    size_t totalBytes;
    size_t descCount;
};
using nixl_xfer_telem_t = nixlXferTelemetry;

/* prepXferDlist()'s agent name for the local (initiator) side. */
#define NIXL_INIT_AGENT ""

extern const std::string nixl_null_agent;

#endif
