/* SPDX-License-Identifier: BSD-3-Clause */
/* libnxl-nixl: the objects behind NIXL's handles, and the log. */
#ifndef NXL_COMPAT_NIXL_INTERNAL_H
#define NXL_COMPAT_NIXL_INTERNAL_H

#include <atomic>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <nxl.h>

#include "nixl.h"
#include "nixl_nxl.h"

/* Log levels of NIXL_LOG_LEVEL (NIXL's names); WARN unless it says otherwise. */
enum nxlc_level { NXLC_ERROR = 1, NXLC_WARN = 2, NXLC_INFO = 3, NXLC_DEBUG = 4, NXLC_TRACE = 5 };

bool nxlc_log_on(int level);
/* One line on stderr, as NIXL logs: "[nixl E] msg". */
void nxlc_log(int level, const std::string &msg);

/* Logs a failed call: NIXL's status, what failed and nxl's sentence for it. */
nixl_status_t nxlc_fail(nixl_status_t st, const char *call, const std::string &what,
                        nxl_agent_t *a = nullptr);

/* nxl's statuses are NIXL's, plus NXL_ERR_TIMEOUT (a deadline, which only a
 * program reaching nxl through nixl_nxl.h can set): NIXL's nearest, CANCELED */
inline nixl_status_t nxlc_st(nxl_status_t s)
{
    return s == NXL_ERR_TIMEOUT ? NIXL_ERR_CANCELED : static_cast<nixl_status_t>(s);
}

class nixlBackendH {
public:
    nxl_backend_t *b = nullptr;
    std::string type;          /* NIXL's name, as the program gave it */
    std::string nxlName;       /* nxl's transport name */
    nixl_b_params_t params;    /* as created: the defaults with the program's values */
    nixl_mem_list_t mems;
};

class nixlDlistH {
public:
    nixlAgentData *owner = nullptr;
    nxl_prepped_t *p = nullptr;
    std::string agent;         /* NIXL_INIT_AGENT ("") for the local side */
    nixl_mem_t type = DRAM_SEG;
    std::vector<size_t> lens;  /* each descriptor's length (telemetry) */
};

enum { NXLC_REQ_IDLE = 0, NXLC_REQ_PENDING = 1, NXLC_REQ_ZOMBIE = 2 };

class nixlXferReqH {
public:
    nixlAgentData *owner = nullptr;
    nxl_xfer_t *x = nullptr;
    std::string remote;
    nixl_xfer_op_t op = NIXL_WRITE;
    bool hasNotif = false;
    nixl_blob_t notif;         /* what nxl holds as the transfer's notification */
    /* <nixl_nxl.h>'s completion callback; state says whether a post with it is in flight */
    nixl_nxl_xfer_cb_t cb = nullptr;
    void *cbArg = nullptr;
    std::atomic<int> state{NXLC_REQ_IDLE};
    /* telemetry */
    size_t totalBytes = 0;
    size_t descCount = 0;
    chrono_point_t startTime{};
    chrono_period_us_t postDuration{0};
    chrono_period_us_t xferDuration{0};
    bool timed = false;        /* xferDuration taken for the last post */
    uint64_t polledAt = ~0ull; /* default mode: the agent's turns when getXferStatus last found it in progress */
    bool reported = false;     /* the last post's failure was logged */
};

class nixlAgentData {
public:
    std::string name;
    nixlAgentConfig cfg;
    nxl_agent_t *a = nullptr;
    bool threaded = false;
    bool etcd = false;
    bool telemetry = false;
    mutable std::mutex mu;     /* guards backends and invalidated */
    std::vector<nixlBackendH *> backends;
    std::set<std::string> invalidated; /* peers the program invalidated (post: NOT_FOUND) */
    std::atomic<size_t> ninvalidated{0}; /* its size, read without the lock */

    bool isInvalidated(const std::string &peer) const {
        if (ninvalidated.load(std::memory_order_relaxed) == 0)
            return false;
        std::lock_guard<std::mutex> g(mu);
        return invalidated.count(peer) != 0;
    }
    /* Under mu: the program invalidated (true) or reloaded (false) a peer. */
    void markInvalidated(const std::string &peer, bool gone) {
        if (gone)
            invalidated.insert(peer);
        else
            invalidated.erase(peer);
        ninvalidated.store(invalidated.size(), std::memory_order_relaxed);
    }

    /* Default mode: the loop's turns taken by the calls (drive()) */
    mutable uint64_t turns = 0;
    /* Default mode: one turn without waiting, so that polling programs progress. */
    void drive() const {
        if (!threaded) {
            nxl_agent_run_once(a, 0);
            turns++;
        }
    }
    const char *err() const { return nxl_agent_last_error(a); }
    nixlBackendH *findBackend(const nxl_backend_t *b) const;
};

/* Reaches nixlAgent's data (a friend of nixlAgent). */
struct nixlNxlAccess {
    static nixlAgentData *data(const nixlAgent &agent) { return agent.data.get(); }
};

/* Converts a NIXL list to nxl descriptors; metaInfo of blob descriptors included. */
template<class T> void nxlc_descs(const nixlDescList<T> &l, std::vector<nxl_desc_t> &out);

/* nxl's completion callback for metadata operations: logs a failure. */
void nxlc_md_done(nxl_future_t *f, nxl_status_t st, void *arg);

#endif
