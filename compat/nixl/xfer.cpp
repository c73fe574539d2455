/* SPDX-License-Identifier: BSD-3-Clause */
/* libnxl-nixl: prepared lists, transfer requests, notifications. */
#include <chrono>
#include <thread>

#include "internal.h"

static bool bad_type(nixl_mem_t t) { return t < DRAM_SEG || t > FILE_SEG; }

/* ---------------------------------------------------------- prepared lists */

static nixl_status_t prep(const nixlAgentData *d, const std::string &agent,
                          const nixl_xfer_dlist_t &descs, nixlDlistH *&out) {
    if (bad_type(descs.getType()))
        return nxlc_fail(NIXL_ERR_INVALID_PARAM, "prepXferDlist", "bad memory type");
    std::vector<nxl_desc_t> v;
    nxlc_descs(descs, v);
    nxl_prepped_t *p = nullptr;
    nxl_status_t st = nxl_prep(d->a, agent.empty() ? nullptr : agent.c_str(),
                               static_cast<nxl_mem_t>(descs.getType()), v.data(), v.size(), &p);
    if (st != NXL_SUCCESS) /* NIXL: unknown agent, no backend, a descriptor in no region */
        return nxlc_fail(NIXL_ERR_NOT_FOUND, "prepXferDlist",
                         agent.empty() ? std::string("local descriptors not prepared")
                                       : "descriptors of agent '" + agent + "' not prepared",
                         d->a);
    auto *h = new nixlDlistH();
    h->owner = const_cast<nixlAgentData *>(d);
    h->p = p;
    h->agent = agent;
    h->type = descs.getType();
    h->lens.reserve(v.size());
    for (const nxl_desc_t &x : v)
        h->lens.push_back(x.len);
    out = h;
    return NIXL_SUCCESS;
}

nixl_status_t nixlAgent::prepXferDlist(const std::string &agent_name,
                                       const nixl_xfer_dlist_t &descs, nixlDlistH *&dlist_hndl,
                                       const nixl_opt_args_t *extra_params) const {
    (void)extra_params; /* a prepared list serves every backend of the agent */
    return prep(data.get(), agent_name, descs, dlist_hndl);
}

nixl_status_t nixlAgent::prepXferDlist(const nixl_xfer_dlist_t &descs, nixlDlistH *&dlist_hndl,
                                       const nixl_opt_args_t *extra_params) const {
    (void)extra_params;
    return prep(data.get(), NIXL_INIT_AGENT, descs, dlist_hndl);
}

nixl_status_t nixlAgent::releasedDlistH(nixlDlistH *dlist_hndl) const {
    if (!dlist_hndl || dlist_hndl->owner != data.get())
        return nxlc_fail(NIXL_ERR_INVALID_PARAM, "releasedDlistH",
                         "NULL or another agent's list handle");
    nxl_prepped_release(dlist_hndl->p);
    delete dlist_hndl;
    return NIXL_SUCCESS;
}

/* ----------------------------------------------------------------- requests */

/* What a request's notification becomes: NIXL's notif, else the legacy pair. */
static bool wanted_notif(const nixl_opt_args_t *x, nixl_blob_t &msg) {
    if (!x)
        return false;
    if (x->notif) {
        msg = *x->notif;
        return true;
    }
    if (x->hasNotif) {
        msg = x->notifMsg;
        return true;
    }
    return false;
}

static bool backend_opt(const nixlAgentData *d, const nixl_opt_args_t *x, nxl_xfer_opts_t &o,
                        const char *call, nixl_status_t &err) {
    if (!x || x->backends.empty())
        return true;
    nixlBackendH *h = x->backends[0];
    bool mine = false;
    {
        std::lock_guard<std::mutex> g(d->mu);
        for (nixlBackendH *b : d->backends)
            mine = mine || b == h;
    }
    if (!h || !mine) {
        err = nxlc_fail(NIXL_ERR_INVALID_PARAM, call, "a backend handle that is not this agent's");
        return false;
    }
    o.backend = h->b;
    return true;
}

/* The nxl options of a request made from extra: its notification (the bytes
 * held in msg, has_notif set) and its backend. False, with err, when the
 * backend handle is not this agent's. */
static bool req_opts(const nixlAgentData *d, const nixl_opt_args_t *x, const char *call,
                     nxl_xfer_opts_t &o, nixl_blob_t &msg, bool &has_notif, nixl_status_t &err) {
    nxl_xfer_opts_init(&o);
    has_notif = wanted_notif(x, msg);
    if (has_notif) {
        o.notif = msg.data();
        o.notif_len = msg.size();
    }
    return backend_opt(d, x, o, call, err);
}

static nixlXferReqH *new_req(nixlAgentData *d, nxl_xfer_t *x, const std::string &remote,
                             nixl_xfer_op_t op, bool has_notif, const nixl_blob_t &msg) {
    auto *r = new nixlXferReqH();
    r->owner = d;
    r->x = x;
    r->remote = remote;
    r->op = op;
    r->hasNotif = has_notif;
    if (has_notif)
        r->notif = msg;
    return r;
}

nixl_status_t nixlAgent::makeXferReq(const nixl_xfer_op_t &operation, const nixlDlistH *local_side,
                                     const std::vector<int> &local_indices,
                                     const nixlDlistH *remote_side,
                                     const std::vector<int> &remote_indices,
                                     nixlXferReqH *&req_hndl,
                                     const nixl_opt_args_t *extra_params) const {
    const char *call = "makeXferReq";
    if (operation != NIXL_READ && operation != NIXL_WRITE)
        return nxlc_fail(NIXL_ERR_INVALID_PARAM, call, "operation is neither READ nor WRITE");
    if (!local_side || !remote_side || local_side->owner != data.get() ||
        remote_side->owner != data.get())
        return nxlc_fail(NIXL_ERR_INVALID_PARAM, call, "NULL or another agent's list handle");
    if (!local_side->agent.empty())
        return nxlc_fail(NIXL_ERR_INVALID_PARAM, call,
                         "the local side was prepared for agent '" + local_side->agent + "'");
    if (local_indices.size() != remote_indices.size())
        return nxlc_fail(NIXL_ERR_INVALID_PARAM, call,
                         std::to_string(local_indices.size()) + " local indices but " +
                             std::to_string(remote_indices.size()) + " remote ones");
    size_t n = local_indices.size();
    std::vector<size_t> li(n), ri(n);
    size_t bytes = 0;
    for (size_t i = 0; i < n; i++) {
        if (local_indices[i] < 0 || remote_indices[i] < 0 ||
            static_cast<size_t>(local_indices[i]) >= local_side->lens.size() ||
            static_cast<size_t>(remote_indices[i]) >= remote_side->lens.size())
            return nxlc_fail(NIXL_ERR_INVALID_PARAM, call,
                             "index pair " + std::to_string(i) + " is outside its list");
        li[i] = static_cast<size_t>(local_indices[i]);
        ri[i] = static_cast<size_t>(remote_indices[i]);
        bytes += local_side->lens[li[i]];
    }
    nxl_xfer_opts_t o;
    nixl_blob_t msg;
    bool has_notif;
    nixl_status_t err = NIXL_SUCCESS;
    if (!req_opts(data.get(), extra_params, call, o, msg, has_notif, err))
        return err;
    nxl_xfer_t *x = nullptr;
    nxl_status_t st =
        nxl_xfer_make(data->a, static_cast<nxl_op_t>(operation), local_side->p, li.data(),
                      remote_side->p, ri.data(), n, &o, &x);
    if (st != NXL_SUCCESS) /* NIXL: no common backend is a bad pair of lists */
        return nxlc_fail(st == NXL_ERR_NOT_SUPPORTED || st == NXL_ERR_MISMATCH
                             ? NIXL_ERR_INVALID_PARAM
                             : nxlc_st(st),
                         call, "request not made", data->a);
    nixlXferReqH *r = new_req(data.get(), x, remote_side->agent.empty() ? data->name
                                                                        : remote_side->agent,
                              operation, has_notif, msg);
    r->totalBytes = bytes;
    r->descCount = n;
    req_hndl = r;
    return NIXL_SUCCESS;
}

nixl_status_t nixlAgent::createXferReq(const nixl_xfer_op_t &operation,
                                       const nixl_xfer_dlist_t &local_descs,
                                       const nixl_xfer_dlist_t &remote_descs,
                                       const std::string &remote_agent, nixlXferReqH *&req_hndl,
                                       const nixl_opt_args_t *extra_params) const {
    const char *call = "createXferReq";
    if (operation != NIXL_READ && operation != NIXL_WRITE)
        return nxlc_fail(NIXL_ERR_INVALID_PARAM, call, "operation is neither READ nor WRITE");
    if (bad_type(local_descs.getType()) || bad_type(remote_descs.getType()))
        return nxlc_fail(NIXL_ERR_INVALID_PARAM, call, "bad memory type");
    if (local_descs.descCount() != remote_descs.descCount())
        return nxlc_fail(NIXL_ERR_INVALID_PARAM, call,
                         std::to_string(local_descs.descCount()) + " local descriptors but " +
                             std::to_string(remote_descs.descCount()) + " remote ones");
    size_t bytes = 0;
    for (int i = 0; i < local_descs.descCount(); i++) {
        if (local_descs[i].len != remote_descs[i].len)
            return nxlc_fail(NIXL_ERR_INVALID_PARAM, call,
                             "descriptor " + std::to_string(i) + " differs in length (" +
                                 std::to_string(local_descs[i].len) + " and " +
                                 std::to_string(remote_descs[i].len) + " bytes)");
        bytes += local_descs[i].len;
    }
    std::vector<nxl_desc_t> lv, rv;
    nxlc_descs(local_descs, lv);
    nxlc_descs(remote_descs, rv);
    nxl_dlist_t l = {static_cast<nxl_mem_t>(local_descs.getType()), lv.data(), lv.size()};
    nxl_dlist_t r = {static_cast<nxl_mem_t>(remote_descs.getType()), rv.data(), rv.size()};
    nxl_xfer_opts_t o;
    nixl_blob_t msg;
    bool has_notif;
    nixl_status_t err = NIXL_SUCCESS;
    if (!req_opts(data.get(), extra_params, call, o, msg, has_notif, err))
        return err;
    nxl_xfer_t *x = nullptr;
    nxl_status_t st = nxl_xfer_create(data->a, static_cast<nxl_op_t>(operation), &l, &r,
                                      remote_agent.c_str(), &o, &x);
    if (st != NXL_SUCCESS) /* NIXL: unknown agent, no backend holding both sides */
        return nxlc_fail(st == NXL_ERR_NOT_SUPPORTED || st == NXL_ERR_MISMATCH
                             ? NIXL_ERR_NOT_FOUND
                             : nxlc_st(st),
                         call, "request to agent '" + remote_agent + "' not made", data->a);
    nixlXferReqH *q = new_req(data.get(), x, remote_agent, operation, has_notif, msg);
    q->totalBytes = bytes;
    q->descCount = lv.size();
    req_hndl = q;
    return NIXL_SUCCESS;
}

static void xfer_done(nxl_future_t *f, nxl_status_t st, void *arg) {
    (void)f;
    auto *r = static_cast<nixlXferReqH *>(arg);
    int exp = NXLC_REQ_PENDING;
    if (!r->state.compare_exchange_strong(exp, NXLC_REQ_IDLE)) {
        if (exp == NXLC_REQ_ZOMBIE)
            delete r; /* released while in flight: the callback was the last to hold it */
        return;
    }
    if (r->owner->telemetry && !r->timed) {
        r->xferDuration = std::chrono::duration_cast<chrono_period_us_t>(
            std::chrono::steady_clock::now() - r->startTime);
        r->timed = true;
    }
    if (r->cb)
        r->cb(r, nxlc_st(st), r->cbArg);
}

/*
 * Marks a request with a completion callback as posted. With a progress
 * thread, the previous post's completion can be visible (getXferStatus) a
 * moment before its callback has run on the agent's thread: wait for that
 * moment rather than refuse a re-post NIXL would take.
 */
static bool claim(const nixlAgentData *d, nixlXferReqH *r) {
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
    for (;;) {
        int exp = NXLC_REQ_IDLE;
        if (r->state.compare_exchange_strong(exp, NXLC_REQ_PENDING))
            return true;
        if (!d->threaded || nxl_xfer_status(r->x) == NXL_IN_PROG ||
            std::chrono::steady_clock::now() > until)
            return false;
        std::this_thread::yield();
    }
}

nixl_status_t nixlAgent::postXferReq(nixlXferReqH *req_hndl,
                                     const nixl_opt_args_t *extra_params) const {
    const char *call = "postXferReq";
    if (!req_hndl || req_hndl->owner != data.get())
        return nxlc_fail(NIXL_ERR_INVALID_PARAM, call, "NULL or another agent's request handle");
    nixlXferReqH *r = req_hndl;
    /* NIXL refuses at once a post to a peer the program invalidated (nxl's
     * threaded mode may only find out once the post is queued). */
    if (data->isInvalidated(r->remote))
        return nxlc_fail(NIXL_ERR_NOT_FOUND, call,
                         "remote agent '" + r->remote +
                             "' was invalidated after the request was made");
    if (extra_params) {
        /* NIXL: optional arguments at post replace the request's notification */
        nixl_blob_t msg;
        bool want = wanted_notif(extra_params, msg);
        if (want != r->hasNotif || (want && msg != r->notif)) {
            nxl_status_t st = nxl_xfer_set_notif(r->x, want ? msg.data() : nullptr,
                                                 want ? msg.size() : 0);
            if (st != NXL_SUCCESS)
                return nxlc_fail(st == NXL_ERR_NOT_SUPPORTED ? NIXL_ERR_BACKEND : nxlc_st(st),
                                 call, "notification not set", data->a);
            r->hasNotif = want;
            r->notif.swap(msg);
        }
    }
    if (data->telemetry) {
        r->startTime = std::chrono::steady_clock::now();
        r->timed = false;
    }
    r->reported = false;
    nxl_status_t st;
    if (r->cb || data->telemetry) {
        /* the completion callback owns the request's state until it ran */
        if (!claim(data.get(), r))
            return nxlc_fail(NIXL_ERR_REPOST_ACTIVE, call,
                             "transfer request is still in progress and cannot be reposted");
        st = nxl_xfer_post(r->x, xfer_done, r, nullptr);
        if (st != NXL_SUCCESS)
            r->state.store(NXLC_REQ_IDLE);
    } else {
        st = nxl_xfer_post(r->x, nullptr, nullptr, nullptr);
    }
    if (st != NXL_SUCCESS) {
        return nxlc_fail(nxlc_st(st), call, "transfer to agent '" + r->remote + "' not posted",
                         data->a);
    }
    if (data->telemetry)
        r->postDuration = std::chrono::duration_cast<chrono_period_us_t>(
            std::chrono::steady_clock::now() - r->startTime);
    return NIXL_IN_PROG;
}

nixl_status_t nixlAgent::getXferStatus(nixlXferReqH *req_hndl) const {
    if (!req_hndl || req_hndl->owner != data.get())
        return nxlc_fail(NIXL_ERR_INVALID_PARAM, "getXferStatus",
                         "NULL or another agent's request handle");
    nxl_status_t st = nxl_xfer_status(req_hndl->x);
    if (st == NXL_IN_PROG && !data->threaded) {
        /* A turn of the loop (a system call or more) once per round of
         * polls: a program polling N requests in flight turns it when it
         * comes back to one it found in progress since the last turn, not
         * N times a round. One polling a single request turns it on each
         * call but its first. */
        if (req_hndl->polledAt == data->turns) {
            data->drive();
            st = nxl_xfer_status(req_hndl->x);
        }
        req_hndl->polledAt = data->turns;
    }
    if (st < NXL_SUCCESS && st != NXL_ERR_NOT_POSTED && !req_hndl->reported) {
        req_hndl->reported = true;
        nxlc_fail(nxlc_st(st), "getXferStatus",
                  "transfer to agent '" + req_hndl->remote + "' failed",
                  data->threaded ? nullptr : data->a);
    }
    return nxlc_st(st);
}

nixl_status_t nixlAgent::getXferTelemetry(const nixlXferReqH *req_hndl,
                                          nixl_xfer_telem_t &telemetry) const {
    if (!req_hndl || req_hndl->owner != data.get())
        return nxlc_fail(NIXL_ERR_INVALID_PARAM, "getXferTelemetry",
                         "NULL or another agent's request handle");
    if (!data->telemetry)
        return NIXL_ERR_NO_TELEMETRY;
    nxl_status_t st = nxl_xfer_status(req_hndl->x);
    if (st == NXL_ERR_NOT_POSTED)
        return NIXL_ERR_NOT_POSTED;
    telemetry.startTime = req_hndl->startTime;
    telemetry.postDuration = req_hndl->postDuration;
    telemetry.xferDuration = req_hndl->xferDuration;
    telemetry.totalBytes = req_hndl->totalBytes;
    telemetry.descCount = req_hndl->descCount;
    return st == NXL_IN_PROG ? NIXL_IN_PROG : NIXL_SUCCESS;
}

nixl_status_t nixlAgent::queryXferBackend(const nixlXferReqH *req_hndl,
                                          nixlBackendH *&backend) const {
    if (!req_hndl || req_hndl->owner != data.get())
        return nxlc_fail(NIXL_ERR_INVALID_PARAM, "queryXferBackend",
                         "NULL or another agent's request handle");
    nixlBackendH *h = data->findBackend(nxl_xfer_backend(req_hndl->x));
    if (!h)
        return nxlc_fail(NIXL_ERR_NOT_FOUND, "queryXferBackend",
                         "the request's backend was not created through this API");
    backend = h;
    return NIXL_SUCCESS;
}

nixl_status_t nixlAgent::releaseXferReq(nixlXferReqH *req_hndl) const {
    if (!req_hndl || req_hndl->owner != data.get())
        return nxlc_fail(NIXL_ERR_INVALID_PARAM, "releaseXferReq",
                         "NULL or another agent's request handle");
    nixlXferReqH *r = req_hndl;
    int exp = NXLC_REQ_PENDING;
    bool cb_owns = r->state.compare_exchange_strong(exp, NXLC_REQ_ZOMBIE);
    nxl_xfer_release(r->x); /* one in flight is canceled */
    if (!cb_owns)
        delete r;
    return NIXL_SUCCESS;
}

nixl_status_t nixlAgent::estimateXferCost(const nixlXferReqH *req_hndl,
                                          std::chrono::microseconds &duration,
                                          std::chrono::microseconds &err_margin,
                                          nixl_cost_t &method,
                                          const nixl_opt_args_t *extra_params) const {
    (void)duration;
    (void)err_margin;
    (void)method;
    (void)extra_params;
    if (!req_hndl || req_hndl->owner != data.get())
        return nxlc_fail(NIXL_ERR_INVALID_PARAM, "estimateXferCost",
                         "NULL or another agent's request handle");
    nxlc_log(NXLC_INFO, "estimateXferCost: nxl's transports give no cost estimate");
    return NIXL_ERR_NOT_SUPPORTED;
}

nixl_status_t nixlAgent::prepMemView(const nixl_remote_dlist_t &dlist, nixlMemViewH &mvh,
                                     const nixl_opt_args_t *extra_params) const {
    (void)dlist;
    (void)extra_params;
    mvh = nullptr;
    return nxlc_fail(NIXL_ERR_NOT_SUPPORTED, "prepMemView",
                     "nxl has no GPU-initiated (device) transfer API");
}

nixl_status_t nixlAgent::prepMemView(const nixl_local_dlist_t &dlist, nixlMemViewH &mvh,
                                     const nixl_opt_args_t *extra_params) const {
    (void)dlist;
    (void)extra_params;
    mvh = nullptr;
    return nxlc_fail(NIXL_ERR_NOT_SUPPORTED, "prepMemView",
                     "nxl has no GPU-initiated (device) transfer API");
}

void nixlAgent::releaseMemView(nixlMemViewH mvh) const { (void)mvh; }

/* ------------------------------------------------------------- notifications */

static void append_notif(nxl_agent_t *a, const char *from, const void *msg, size_t len,
                         void *arg) {
    (void)a;
    auto *m = static_cast<nixl_notifs_t *>(arg);
    (*m)[from].emplace_back(static_cast<const char *>(msg), len);
}

nixl_status_t nixlAgent::getNotifs(nixl_notifs_t &notif_map,
                                   const nixl_opt_args_t *extra_params) {
    (void)extra_params; /* notifications of every backend */
    data->drive();
    nxl_notifs_drain(data->a, append_notif, &notif_map);
    return NIXL_SUCCESS;
}

nixl_status_t nixlAgent::genNotif(const std::string &remote_agent, const nixl_blob_t &msg,
                                  const nixl_opt_args_t *extra_params) const {
    (void)extra_params;
    nxl_status_t st = nxl_notif_send(data->a, remote_agent.c_str(), msg.data(), msg.size(),
                                     nxlc_md_done, const_cast<char *>("genNotif"), nullptr);
    if (st != NXL_SUCCESS) /* NIXL: no backend with notifications is a backend error */
        return nxlc_fail(st == NXL_ERR_NOT_SUPPORTED ? NIXL_ERR_BACKEND : nxlc_st(st), "genNotif",
                         "notification to agent '" + remote_agent + "' not sent", data->a);
    data->drive();
    return NIXL_SUCCESS;
}

/* ------------------------------------------------------------- <nixl_nxl.h> */

nixl_status_t nixlNxlSetXferCallback(nixlAgent &agent, nixlXferReqH *req, nixl_nxl_xfer_cb_t cb,
                                     void *arg) {
    nixlAgentData *d = nixlNxlAccess::data(agent);
    if (!req || req->owner != d)
        return nxlc_fail(NIXL_ERR_INVALID_PARAM, "nixlNxlSetXferCallback",
                         "NULL or another agent's request handle");
    if (req->state.load() != NXLC_REQ_IDLE || nxl_xfer_status(req->x) == NXL_IN_PROG)
        return nxlc_fail(NIXL_ERR_REPOST_ACTIVE, "nixlNxlSetXferCallback",
                         "a post of the request is in flight");
    req->cb = cb;
    req->cbArg = arg;
    return NIXL_SUCCESS;
}
