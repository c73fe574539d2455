/* SPDX-License-Identifier: BSD-3-Clause */
/* libnxl-nixl: the agent, its backends and its memory. */
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <stdexcept>
#include <strings.h>
#include <sys/stat.h>
#include <type_traits>

#include "internal.h"

/* ------------------------------------------------------------------- log */

static int log_level() {
    static const int level = [] {
        const char *e = std::getenv("NIXL_LOG_LEVEL");
        if (!e || !*e)
            return static_cast<int>(NXLC_WARN);
        static const struct { const char *name; int level; } names[] = {
            {"TRACE", NXLC_TRACE}, {"DEBUG", NXLC_DEBUG}, {"INFO", NXLC_INFO},
            {"WARN", NXLC_WARN},   {"WARNING", NXLC_WARN}, {"ERROR", NXLC_ERROR},
            {"FATAL", NXLC_ERROR}, {"NONE", 0},           {"OFF", 0}};
        for (const auto &n : names)
            if (strcasecmp(e, n.name) == 0)
                return n.level;
        return static_cast<int>(NXLC_WARN);
    }();
    return level;
}

bool nxlc_log_on(int level) { return level <= log_level(); }

void nxlc_log(int level, const std::string &msg) {
    if (!nxlc_log_on(level))
        return;
    static const char tag[] = "?EWIDT";
    char t = (level >= 0 && level <= 5) ? tag[level] : '?';
    std::string line = std::string("[nixl ") + t + "] " + msg + "\n";
    std::cerr << line << std::flush;
}

nixl_status_t nxlc_fail(nixl_status_t st, const char *call, const std::string &what,
                        nxl_agent_t *a) {
    if (nxlc_log_on(NXLC_ERROR)) {
        std::string m = std::string(call) + ": " + what + " (" +
                        nixlEnumStrings::statusStr(st) + ")";
        const char *s = a ? nxl_agent_last_error(a) : nullptr;
        if (s && *s)
            m += ": " + std::string(s);
        nxlc_log(NXLC_ERROR, m);
    }
    return st;
}

nixlBackendH *nixlAgentData::findBackend(const nxl_backend_t *b) const {
    std::lock_guard<std::mutex> g(mu);
    for (nixlBackendH *h : backends)
        if (h->b == b)
            return h;
    return nullptr;
}

template<class T> void nxlc_descs(const nixlDescList<T> &l, std::vector<nxl_desc_t> &out) {
    out.resize(static_cast<size_t>(l.descCount()));
    size_t i = 0;
    for (const T &d : l) {
        nxl_desc_t &o = out[i++];
        o.addr = d.addr;
        o.len = d.len;
        o.dev_id = d.devId;
        if constexpr (std::is_same<T, nixlBlobDesc>::value) {
            o.meta = d.metaInfo.empty() ? nullptr : d.metaInfo.data();
            o.meta_len = d.metaInfo.size();
        } else {
            o.meta = nullptr;
            o.meta_len = 0;
        }
    }
}
template void nxlc_descs(const nixlDescList<nixlBasicDesc> &, std::vector<nxl_desc_t> &);
template void nxlc_descs(const nixlDescList<nixlBlobDesc> &, std::vector<nxl_desc_t> &);

/* ----------------------------------------------------------------- agent */

static bool env_flag(const char *name, bool def) {
    const char *e = std::getenv(name);
    if (!e || !*e)
        return def;
    return !(std::strcmp(e, "0") == 0 || strcasecmp(e, "no") == 0 || strcasecmp(e, "false") == 0);
}

static nixlAgentData *make_data(const std::string &name, const nixlAgentConfig &cfg) {
    if (name.empty())
        throw std::invalid_argument("nixlAgent: an agent needs a non-empty name");
    auto *d = new nixlAgentData();
    d->name = name;
    d->cfg = cfg;
    /* NIXL's progress thread, listener thread and thread-safe modes are all
     * served by nxl's threaded mode: a thread of the agent's own runs its
     * loop and every call may come from any thread. */
    d->threaded = cfg.useProgThread || cfg.useListenThread ||
                  cfg.syncMode != nixl_thread_sync_t::NIXL_THREAD_SYNC_NONE;
    d->threaded = env_flag("NXL_NIXL_THREADED", d->threaded);
    d->telemetry = cfg.captureTelemetry || env_flag("NIXL_TELEMETRY_ENABLE", false);

    const char *etcd_ep = std::getenv("NIXL_ETCD_ENDPOINTS");
    const char *etcd_ns = std::getenv("NIXL_ETCD_NAMESPACE");
    std::string prefix;
    if (etcd_ns && *etcd_ns) {
        prefix = etcd_ns;
        if (prefix.back() != '/')
            prefix += '/';
    }
    d->etcd = (etcd_ep && *etcd_ep) || std::getenv("NXL_ETCD_ENDPOINTS");

    nxl_agent_config_t c;
    nxl_agent_config_init(&c);
    c.name = d->name.c_str();
    c.threaded = d->threaded ? 1 : 0;
    if (!d->threaded && !std::getenv("NXL_LOOP"))
        c.loop = NXL_LOOP_FD; /* nixlNxlLoopFd() has a descriptor to give */
    if (cfg.useListenThread) {
        c.listen_addr = "0.0.0.0";
        c.listen_port = cfg.listenPort;
    }
    if (etcd_ep && *etcd_ep)
        c.etcd_endpoints = etcd_ep;
    if (!prefix.empty())
        c.etcd_prefix = prefix.c_str();
    nxl_status_t st = nxl_agent_create(&c, &d->a);
    if (st != NXL_SUCCESS) {
        std::string why = nxl_agent_last_error(nullptr);
        delete d;
        nxlc_log(NXLC_ERROR, "nixlAgent: agent '" + name + "' could not be created (" +
                                 nxl_status_name(st) + "): " + why);
        throw std::runtime_error("nixlAgent: agent '" + name + "' could not be created: " + why);
    }
    nxlc_log(NXLC_DEBUG, "nixlAgent: agent '" + name + "' on nxl, " +
                             (d->threaded ? "threaded" : "driven by its calls"));
    return d;
}

nixlAgent::nixlAgent(const std::string &name, const nixlAgentConfig &cfg)
    : data(make_data(name, cfg)) {}

nixlAgent::~nixlAgent() {
    if (!data)
        return;
    nxl_agent_destroy(data->a);
    for (nixlBackendH *h : data->backends)
        delete h;
}

/* -------------------------------------------------------------- backends */

/* NIXL's backend names that nxl serves under another name. */
static std::string nxl_name_of(const std::string &nixl, nixl_b_params_t &extra) {
    if (strcasecmp(nixl.c_str(), "UCX_MO") == 0)
        return "UCX";
    if (strcasecmp(nixl.c_str(), "GDS_MT") == 0)
        return "GDS";
    if (strcasecmp(nixl.c_str(), "AZURE_BLOB") == 0) {
        extra["api"] = "azure";
        return "OBJ";
    }
    return nixl;
}

static void mems_of(uint32_t mask, nixl_mem_list_t &mems) {
    mems.clear();
    for (int t = DRAM_SEG; t <= FILE_SEG; t++)
        if (mask & (1u << t))
            mems.push_back(static_cast<nixl_mem_t>(t));
}

/* The transport's entry in nxl's list: false when this build does not know it. */
static bool plugin_info(const std::string &nxl_name, nxl_plugin_info_t &out) {
    nxl_plugin_info_t info[32];
    size_t n = nxl_plugins_available(info, 32);
    for (size_t i = 0; i < n && i < 32; i++)
        if (strcasecmp(info[i].name, nxl_name.c_str()) == 0) {
            out = info[i];
            return true;
        }
    return false;
}

nixl_status_t nixlAgent::getAvailPlugins(std::vector<nixl_backend_t> &plugins) {
    nxl_plugin_info_t info[32];
    size_t n = nxl_plugins_available(info, 32);
    plugins.clear();
    for (size_t i = 0; i < n && i < 32; i++) {
        if (info[i].available)
            plugins.emplace_back(info[i].name);
        else
            nxlc_log(NXLC_INFO, std::string("getAvailPlugins: ") + info[i].name +
                                    " is not available: " + info[i].reason);
    }
    return NIXL_SUCCESS;
}

nixl_status_t nixlAgent::getPluginParams(const nixl_backend_t &type, nixl_mem_list_t &mems,
                                         nixl_b_params_t &params) const {
    nixl_b_params_t extra;
    std::string nxl_name = nxl_name_of(type, extra);
    nxl_plugin_info_t info;
    if (!plugin_info(nxl_name, info) || !info.available)
        return nxlc_fail(NIXL_ERR_NOT_FOUND, "getPluginParams",
                         "no backend '" + type + "' in this nxl" +
                             (plugin_info(nxl_name, info) ? std::string(": ") + info.reason
                                                           : std::string()));
    nxl_plugin_detail_t det;
    std::memset(&det, 0, sizeof det);
    det.size = sizeof det;
    params.clear();
    if (nxl_plugin_detail(nxl_name.c_str(), &det) == NXL_SUCCESS)
        for (size_t i = 0; i < det.nparams; i++)
            params[det.params[i].key] = det.params[i].def ? det.params[i].def : "";
    for (const auto &kv : extra)
        params[kv.first] = kv.second;
    mems_of(info.mem_mask, mems);
    return NIXL_SUCCESS;
}

nixl_status_t nixlAgent::getBackendParams(const nixlBackendH *backend, nixl_mem_list_t &mems,
                                          nixl_b_params_t &params) const {
    if (!backend)
        return nxlc_fail(NIXL_ERR_INVALID_PARAM, "getBackendParams", "NULL backend handle");
    mems = backend->mems;
    params = backend->params;
    return NIXL_SUCCESS;
}

nixl_status_t nixlAgent::createBackend(const nixl_backend_t &type, const nixl_b_params_t &params,
                                       nixlBackendH *&backend) {
    nixl_b_params_t merged;
    std::string nxl_name = nxl_name_of(type, merged);
    nxl_plugin_info_t info;
    if (!plugin_info(nxl_name, info))
        return nxlc_fail(NIXL_ERR_NOT_FOUND, "createBackend",
                         "unsupported backend '" + type + "' (nxl has no such transport)");
    if (nxl_backend_get(data->a, info.name))
        return nxlc_fail(NIXL_ERR_INVALID_PARAM, "createBackend",
                         "backend already created for type '" + type + "'");
    for (const auto &kv : params)
        merged[kv.first] = kv.second;

    /* nxl's transports refuse keys they do not know: pass those they list,
     * with a value; NIXL's other keys (its backends' own knobs) are dropped. */
    nxl_plugin_detail_t det;
    std::memset(&det, 0, sizeof det);
    det.size = sizeof det;
    bool have_table = nxl_plugin_detail(info.name, &det) == NXL_SUCCESS && det.params;
    std::vector<nxl_param_t> np;
    nixl_b_params_t used;
    for (const auto &kv : merged) {
        bool known = !have_table;
        for (size_t i = 0; have_table && i < det.nparams; i++)
            if (kv.first == det.params[i].key)
                known = true;
        if (!known || kv.second.empty()) {
            if (!known)
                nxlc_log(NXLC_INFO, "createBackend: " + type + " parameter '" + kv.first +
                                        "' has no nxl equivalent: ignored");
            continue;
        }
        used[kv.first] = kv.second;
    }
    for (const auto &kv : used)
        np.push_back({kv.first.c_str(), kv.second.c_str()});

    nxl_backend_t *b = nullptr;
    nxl_status_t st = nxl_backend_create(data->a, info.name, np.data(), np.size(), &b);
    if (st != NXL_SUCCESS) {
        nixl_status_t ns = st == NXL_ERR_NOT_FOUND     ? NIXL_ERR_NOT_FOUND
                           : st == NXL_ERR_NOT_ALLOWED ? NIXL_ERR_INVALID_PARAM
                                                       : NIXL_ERR_BACKEND;
        return nxlc_fail(ns, "createBackend", "backend '" + type + "' was not created", data->a);
    }
    auto *h = new nixlBackendH();
    h->b = b;
    h->type = type;
    h->nxlName = info.name;
    for (size_t i = 0; have_table && i < det.nparams; i++)
        h->params[det.params[i].key] = det.params[i].def ? det.params[i].def : "";
    for (const auto &kv : used)
        h->params[kv.first] = kv.second;
    mems_of(info.mem_mask, h->mems);
    {
        std::lock_guard<std::mutex> g(data->mu);
        data->backends.push_back(h);
    }
    backend = h;
    return NIXL_SUCCESS;
}

/* ---------------------------------------------------------------- memory */

static bool owned(const nixlAgentData *d, const nixlBackendH *h) {
    std::lock_guard<std::mutex> g(d->mu);
    for (const nixlBackendH *x : d->backends)
        if (x == h)
            return true;
    return false;
}

nixl_status_t nixlAgent::registerMem(const nixl_reg_dlist_t &descs,
                                     const nixl_opt_args_t *extra_params) {
    if (descs.getType() < DRAM_SEG || descs.getType() > FILE_SEG)
        return nxlc_fail(NIXL_ERR_INVALID_PARAM, "registerMem", "bad memory type");
    std::vector<nxl_desc_t> d;
    nxlc_descs(descs, d);
    nxl_mem_t t = static_cast<nxl_mem_t>(descs.getType());
    std::vector<nixlBackendH *> list;
    if (extra_params)
        list = extra_params->backends;
    for (nixlBackendH *h : list)
        if (!h || !owned(data.get(), h))
            return nxlc_fail(NIXL_ERR_INVALID_PARAM, "registerMem",
                             "a backend handle that is not this agent's");
    if (list.empty())
        list.push_back(nullptr);
    size_t done = 0;
    nxl_status_t st = NXL_SUCCESS;
    for (nixlBackendH *h : list) {
        st = nxl_mem_register(data->a, t, d.data(), d.size(), h ? h->b : nullptr);
        if (st != NXL_SUCCESS)
            break;
        done++;
    }
    if (st == NXL_SUCCESS)
        return NIXL_SUCCESS;
    nixl_status_t ns = st == NXL_ERR_NOT_SUPPORTED ? NIXL_ERR_NOT_FOUND : NIXL_ERR_BACKEND;
    nxlc_fail(ns, "registerMem",
              "registration of " + std::to_string(d.size()) + " " +
                  nixlEnumStrings::memTypeStr(descs.getType()) + " descriptor(s) failed",
              data->a);
    if (done)
        nxl_mem_deregister(data->a, t, d.data(), d.size());
    return ns;
}

nixl_status_t nixlAgent::deregisterMem(const nixl_reg_dlist_t &descs,
                                       const nixl_opt_args_t *extra_params) {
    (void)extra_params; /* nxl deregisters a region from every backend it was registered with */
    if (descs.getType() < DRAM_SEG || descs.getType() > FILE_SEG)
        return nxlc_fail(NIXL_ERR_INVALID_PARAM, "deregisterMem", "bad memory type");
    std::vector<nxl_desc_t> d;
    nxlc_descs(descs, d);
    nxl_status_t st =
        nxl_mem_deregister(data->a, static_cast<nxl_mem_t>(descs.getType()), d.data(), d.size());
    if (st != NXL_SUCCESS)
        return nxlc_fail(nxlc_st(st), "deregisterMem", "deregistration failed", data->a);
    return NIXL_SUCCESS;
}

nixl_status_t nixlAgent::queryMem(const nixl_reg_dlist_t &descs,
                                  std::vector<nixl_query_resp_t> &resp,
                                  const nixl_opt_args_t *extra_params) const {
    resp.clear();
    if (descs.getType() < DRAM_SEG || descs.getType() > FILE_SEG)
        return nxlc_fail(NIXL_ERR_INVALID_PARAM, "queryMem", "bad memory type");
    nxl_backend_t *b = nullptr;
    if (extra_params && !extra_params->backends.empty()) {
        nixlBackendH *h = extra_params->backends[0];
        if (!h || !owned(data.get(), h))
            return nxlc_fail(NIXL_ERR_INVALID_PARAM, "queryMem",
                             "a backend handle that is not this agent's");
        b = h->b;
    }
    std::vector<nxl_desc_t> d;
    nxlc_descs(descs, d);
    /* NIXL names a file by its path in metaInfo (no path: no answer);
     * nxl's POSIX transport takes "path=..." */
    bool files = descs.getType() == FILE_SEG || descs.getType() == BLK_SEG;
    std::vector<std::string> paths(d.size()), metas(d.size());
    std::vector<nxl_desc_t> ask;
    std::vector<size_t> where;
    for (size_t i = 0; i < d.size(); i++) {
        if (files) {
            const std::string &m = descs[static_cast<int>(i)].metaInfo;
            if (m.empty())
                continue;
            if (m.compare(0, 5, "path=") == 0) {
                metas[i] = m;
                paths[i] = m.substr(5, m.find(';') == std::string::npos ? std::string::npos
                                                                       : m.find(';') - 5);
            } else {
                metas[i] = "path=" + m;
                paths[i] = m;
            }
            d[i].meta = metas[i].c_str();
            d[i].meta_len = metas[i].size();
        }
        ask.push_back(d[i]);
        where.push_back(i);
    }
    std::vector<nxl_query_t> r(ask.size());
    if (!ask.empty()) {
        nxl_status_t st = nxl_mem_query(data->a, static_cast<nxl_mem_t>(descs.getType()),
                                        ask.data(), ask.size(), b, r.data());
        if (st != NXL_SUCCESS)
            return nxlc_fail(nxlc_st(st), "queryMem", "query failed", data->a);
    }
    resp.assign(d.size(), std::nullopt);
    for (size_t k = 0; k < r.size(); k++) {
        if (!r[k].exists)
            continue;
        nixl_b_params_t info{{"size", std::to_string(r[k].size)}};
        struct stat sb;
        if (files && !paths[where[k]].empty() && stat(paths[where[k]].c_str(), &sb) == 0) {
            info["mode"] = std::to_string(sb.st_mode);
            info["mtime"] = std::to_string(sb.st_mtime);
        }
        resp[where[k]] = std::move(info);
    }
    return NIXL_SUCCESS;
}

nixl_status_t nixlAgent::makeConnection(const std::string &remote_agent,
                                        const nixl_opt_args_t *extra_params) {
    (void)extra_params; /* nxl connects on a transfer's first post */
    data->drive();
    if (nxl_md_check(data->a, remote_agent.c_str()) != NXL_SUCCESS)
        return nxlc_fail(NIXL_ERR_NOT_FOUND, "makeConnection",
                         "no metadata loaded for agent '" + remote_agent + "'");
    return NIXL_SUCCESS;
}

/* ------------------------------------------------------------- <nixl_nxl.h> */

int nixlNxlLoopFd(nixlAgent &agent) {
    nixlAgentData *d = nixlNxlAccess::data(agent);
    return d->threaded ? -1 : nxl_agent_backend_fd(d->a);
}

int nixlNxlLoopTimeout(nixlAgent &agent) {
    nixlAgentData *d = nixlNxlAccess::data(agent);
    return d->threaded ? -1 : nxl_agent_backend_timeout(d->a);
}

nixl_status_t nixlNxlRunOnce(nixlAgent &agent, int timeout_ms) {
    nixlAgentData *d = nixlNxlAccess::data(agent);
    if (d->threaded)
        return nxlc_fail(NIXL_ERR_NOT_ALLOWED, "nixlNxlRunOnce",
                         "the agent has a progress thread, which runs it");
    nxl_status_t st = nxl_agent_run_once(d->a, timeout_ms);
    d->turns++;
    if (st != NXL_SUCCESS)
        return nxlc_fail(nxlc_st(st), "nixlNxlRunOnce", "the turn did not run", d->a);
    return NIXL_SUCCESS;
}

nxl_agent_t *nixlNxlAgent(nixlAgent &agent) { return nixlNxlAccess::data(agent)->a; }
