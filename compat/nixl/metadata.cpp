/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libnxl-nixl: metadata. A peer address (ipAddr, port) goes to nxl's
 * listener exchange; without one, etcd (NIXL_ETCD_ENDPOINTS, or nxl's
 * NXL_ETCD_ENDPOINTS). Sends and fetches run in the background, as NIXL's
 * do: a failure is logged when it happens.
 */
#include "internal.h"

void nxlc_md_done(nxl_future_t *f, nxl_status_t st, void *arg) {
    if (st == NXL_SUCCESS)
        return;
    const char *what = static_cast<const char *>(arg);
    nxlc_log(NXLC_ERROR, std::string(what) + " failed (" +
                             nixlEnumStrings::statusStr(nxlc_st(st)) +
                             "): " + nxl_future_error(f));
}

nixl_status_t nixlAgent::getLocalMD(nixl_blob_t &str) const {
    void *blob = nullptr;
    size_t len = 0;
    nxl_status_t st = nxl_md_local(data->a, &blob, &len);
    if (st != NXL_SUCCESS)
        return nxlc_fail(nxlc_st(st), "getLocalMD", "metadata not serialised", data->a);
    str.assign(static_cast<const char *>(blob), len);
    nxl_free(blob);
    return NIXL_SUCCESS;
}

nixl_status_t nixlAgent::getLocalPartialMD(const nixl_reg_dlist_t &descs, nixl_blob_t &str,
                                           const nixl_opt_args_t *extra_params) const {
    (void)extra_params; /* nxl's partial metadata always carries the connection info */
    if (descs.getType() < DRAM_SEG || descs.getType() > FILE_SEG)
        return nxlc_fail(NIXL_ERR_INVALID_PARAM, "getLocalPartialMD", "bad memory type");
    std::vector<nxl_desc_t> d;
    nxlc_descs(descs, d);
    void *blob = nullptr;
    size_t len = 0;
    nxl_status_t st = nxl_md_local_partial(data->a, static_cast<nxl_mem_t>(descs.getType()),
                                           d.data(), d.size(), &blob, &len);
    if (st != NXL_SUCCESS)
        return nxlc_fail(nxlc_st(st), "getLocalPartialMD", "partial metadata not serialised",
                         data->a);
    str.assign(static_cast<const char *>(blob), len);
    nxl_free(blob);
    return NIXL_SUCCESS;
}

nixl_status_t nixlAgent::loadRemoteMD(const nixl_blob_t &remote_metadata,
                                      std::string &agent_name) {
    char name[1024];
    name[0] = '\0';
    nxl_status_t st = nxl_md_load(data->a, remote_metadata.data(), remote_metadata.size(), name,
                                  sizeof name);
    if (st != NXL_SUCCESS)
        return nxlc_fail(nxlc_st(st), "loadRemoteMD",
                         "metadata of " + std::to_string(remote_metadata.size()) +
                             " bytes not loaded",
                         data->a);
    agent_name = name;
    std::lock_guard<std::mutex> g(data->mu);
    data->markInvalidated(agent_name, false);
    return NIXL_SUCCESS;
}

nixl_status_t nixlAgent::invalidateRemoteMD(const std::string &remote_agent) {
    if (remote_agent == nxl_agent_name(data->a))
        return nxlc_fail(NIXL_ERR_INVALID_PARAM, "invalidateRemoteMD",
                         "agent '" + remote_agent + "' is this agent: its own metadata is not "
                         "a remote agent's to invalidate", data->a);
    nxl_status_t st = nxl_md_invalidate(data->a, remote_agent.c_str());
    if (st != NXL_SUCCESS)
        return nxlc_fail(nxlc_st(st), "invalidateRemoteMD",
                         "agent '" + remote_agent + "' not invalidated", data->a);
    std::lock_guard<std::mutex> g(data->mu);
    data->markInvalidated(remote_agent, true);
    return NIXL_SUCCESS;
}

/* Where a metadata call goes: a peer's listener, or etcd. */
enum md_route { MD_PEER, MD_ETCD, MD_NONE };

static md_route route(const nixlAgentData *d, const nixl_opt_args_t *x, const char *call,
                      nixl_status_t &err) {
    if (x && !x->ipAddr.empty()) {
        if (x->port <= 0 || x->port > 65535) {
            err = nxlc_fail(NIXL_ERR_INVALID_PARAM, call,
                            "port " + std::to_string(x->port) + " is not a TCP port");
            return MD_NONE;
        }
        return MD_PEER;
    }
    if (d->etcd)
        return MD_ETCD;
    err = nxlc_fail(NIXL_ERR_INVALID_PARAM, call,
                    "no peer address given (ipAddr) and no etcd configured "
                    "(set NIXL_ETCD_ENDPOINTS)");
    return MD_NONE;
}

/* The status of a background operation's start; drives the agent once. */
static nixl_status_t started(const nixlAgentData *d, nxl_status_t st, const char *call) {
    if (st != NXL_SUCCESS)
        return nxlc_fail(nxlc_st(st), call, "not started", d->a);
    d->drive();
    return NIXL_SUCCESS;
}

nixl_status_t nixlAgent::sendLocalMD(const nixl_opt_args_t *extra_params) const {
    nixl_status_t err = NIXL_SUCCESS;
    switch (route(data.get(), extra_params, "sendLocalMD", err)) {
    case MD_PEER:
        return started(data.get(),
                       nxl_md_send(data->a, extra_params->ipAddr.c_str(),
                                   static_cast<uint16_t>(extra_params->port), nxlc_md_done,
                                   const_cast<char *>("sendLocalMD"), nullptr),
                       "sendLocalMD");
    case MD_ETCD:
        return started(data.get(),
                       nxl_md_publish(data->a, nxlc_md_done, const_cast<char *>("sendLocalMD"),
                                      nullptr),
                       "sendLocalMD");
    default:
        return err;
    }
}

nixl_status_t nixlAgent::sendLocalPartialMD(const nixl_reg_dlist_t &descs,
                                            const nixl_opt_args_t *extra_params) const {
    if (descs.getType() < DRAM_SEG || descs.getType() > FILE_SEG)
        return nxlc_fail(NIXL_ERR_INVALID_PARAM, "sendLocalPartialMD", "bad memory type");
    nixl_status_t err = NIXL_SUCCESS;
    switch (route(data.get(), extra_params, "sendLocalPartialMD", err)) {
    case MD_PEER: {
        /* nxl's listener exchange sends the whole metadata: a superset of the part */
        std::vector<nxl_desc_t> d;
        nxlc_descs(descs, d);
        void *blob = nullptr;
        size_t len = 0;
        nxl_status_t st = nxl_md_local_partial(data->a, static_cast<nxl_mem_t>(descs.getType()),
                                               d.data(), d.size(), &blob, &len);
        if (st != NXL_SUCCESS)
            return nxlc_fail(nxlc_st(st), "sendLocalPartialMD",
                             "a descriptor is in no registered region", data->a);
        nxl_free(blob);
        return started(data.get(),
                       nxl_md_send(data->a, extra_params->ipAddr.c_str(),
                                   static_cast<uint16_t>(extra_params->port), nxlc_md_done,
                                   const_cast<char *>("sendLocalPartialMD"), nullptr),
                       "sendLocalPartialMD");
    }
    case MD_ETCD: {
        std::string label = extra_params && !extra_params->metadataLabel.empty()
                                ? extra_params->metadataLabel
                                : default_partial_metadata_label;
        std::vector<nxl_desc_t> d;
        nxlc_descs(descs, d);
        return started(data.get(),
                       nxl_md_publish_partial(data->a, label.c_str(),
                                              static_cast<nxl_mem_t>(descs.getType()), d.data(),
                                              d.size(), nxlc_md_done,
                                              const_cast<char *>("sendLocalPartialMD"), nullptr),
                       "sendLocalPartialMD");
    }
    default:
        return err;
    }
}

nixl_status_t nixlAgent::fetchRemoteMD(const std::string remote_name,
                                       const nixl_opt_args_t *extra_params) {
    if (remote_name.empty())
        return nxlc_fail(NIXL_ERR_INVALID_PARAM, "fetchRemoteMD", "empty agent name");
    nixl_status_t err = NIXL_SUCCESS;
    md_route r = route(data.get(), extra_params, "fetchRemoteMD", err);
    if (r == MD_NONE)
        return err;
    {
        std::lock_guard<std::mutex> g(data->mu);
        data->markInvalidated(remote_name, false);
    }
    if (r == MD_PEER)
        return started(data.get(),
                       nxl_md_fetch(data->a, remote_name.c_str(), extra_params->ipAddr.c_str(),
                                    static_cast<uint16_t>(extra_params->port), nxlc_md_done,
                                    const_cast<char *>("fetchRemoteMD"), nullptr),
                       "fetchRemoteMD");
    const char *label = nullptr;
    if (extra_params && !extra_params->metadataLabel.empty() &&
        extra_params->metadataLabel != default_metadata_label)
        label = extra_params->metadataLabel.c_str();
    long long ms = data->cfg.etcdWatchTimeout.count() / 1000;
    int timeout = ms <= 0 ? 0 : ms > 3600000 ? 3600000 : static_cast<int>(ms);
    return started(data.get(),
                   nxl_md_fetch_etcd(data->a, remote_name.c_str(), label, timeout, nxlc_md_done,
                                     const_cast<char *>("fetchRemoteMD"), nullptr),
                   "fetchRemoteMD");
}

nixl_status_t nixlAgent::invalidateLocalMD(const nixl_opt_args_t *extra_params) const {
    nixl_status_t err = NIXL_SUCCESS;
    switch (route(data.get(), extra_params, "invalidateLocalMD", err)) {
    case MD_PEER:
        return started(data.get(),
                       nxl_md_send_invalidate(data->a, extra_params->ipAddr.c_str(),
                                              static_cast<uint16_t>(extra_params->port),
                                              nxlc_md_done,
                                              const_cast<char *>("invalidateLocalMD"), nullptr),
                       "invalidateLocalMD");
    case MD_ETCD:
        return started(data.get(),
                       nxl_md_unpublish(data->a, nxlc_md_done,
                                        const_cast<char *>("invalidateLocalMD"), nullptr),
                       "invalidateLocalMD");
    default:
        return err;
    }
}

nixl_status_t nixlAgent::checkRemoteMD(const std::string remote_name,
                                       const nixl_xfer_dlist_t &descs) const {
    data->drive();
    if (nxl_md_check(data->a, remote_name.c_str()) != NXL_SUCCESS)
        return NIXL_ERR_NOT_FOUND; /* the answer NIXL programs poll for: not an error line */
    if (descs.descCount() == 0)
        return NIXL_SUCCESS;
    std::vector<nxl_desc_t> d;
    nxlc_descs(descs, d);
    nxl_prepped_t *p = nullptr;
    nxl_status_t st = nxl_prep(data->a, remote_name.c_str(),
                               static_cast<nxl_mem_t>(descs.getType()), d.data(), d.size(), &p);
    if (st != NXL_SUCCESS)
        return NIXL_ERR_NOT_FOUND;
    nxl_prepped_release(p);
    return NIXL_SUCCESS;
}
