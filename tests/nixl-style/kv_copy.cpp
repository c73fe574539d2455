/* SPDX-License-Identifier: BSD-3-Clause */
/* A program written for NIXL's C++ agent API, as a NIXL user writes one:
 * it includes only <nixl.h> and calls only NIXL's public API. Two agents in
 * one process, one backend (argv[1], UCX when absent): the backends and
 * their parameters listed, memory registered, metadata exchanged as blobs,
 * a one-call WRITE with a notification waited for by polling, a prepped
 * READ of the same bytes back, the handles released, memory deregistered,
 * the remote forgotten. tests/nixl_example_build.sh compiles it unchanged
 * against nxl's compatibility headers and runs it. Exit 0: the bytes
 * arrived both ways. */
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "nixl.h"

static void need(bool ok, const std::string &what)
{
    if (!ok) {
        std::cerr << "kv_copy: " << what << "\n";
        std::exit(1);
    }
}

static void need(nixl_status_t s, const std::string &what)
{
    need(s == NIXL_SUCCESS, what + ": " + nixlEnumStrings::statusStr(s));
}

static nixl_status_t wait_done(nixlAgent &a, nixlXferReqH *x, nixl_status_t s)
{
    while (s == NIXL_IN_PROG)
        s = a.getXferStatus(x);
    return s;
}

int main(int argc, char **argv)
{
    const std::string backend = argc > 1 ? argv[1] : "UCX";
    const std::string prefill("prefill"), decode("decode");

    nixlAgentConfig cfg(true); /* a progress thread, as NIXL's examples ask */
    nixlAgent p(prefill, cfg), d(decode, cfg);

    std::vector<nixl_backend_t> plugins;
    need(p.getAvailPlugins(plugins), "getAvailPlugins");
    std::cout << "backends:";
    for (const auto &b : plugins)
        std::cout << " " << b;
    std::cout << "\n";

    nixl_mem_list_t mems;
    nixl_b_params_t params;
    need(p.getPluginParams(backend, mems, params), "getPluginParams " + backend);
    std::cout << backend << ": " << params.size() << " parameters, memories:";
    for (auto m : mems)
        std::cout << " " << nixlEnumStrings::memTypeStr(m);
    std::cout << "\n";

    nixlBackendH *pb = nullptr, *db = nullptr;
    need(p.createBackend(backend, params, pb), "createBackend (prefill)");
    need(d.createBackend(backend, params, db), "createBackend (decode)");
    nixl_opt_args_t pargs, dargs;
    pargs.backends.push_back(pb);
    dargs.backends.push_back(db);

    const size_t blocks = 8, blk = 4096, len = blocks * blk;
    std::vector<uint8_t> kv(len), dst(len, 0), back(len, 0);
    for (size_t i = 0; i < len; i++)
        kv[i] = (uint8_t)(i * 7 + i / blk);

    nixl_reg_dlist_t preg(DRAM_SEG), dreg(DRAM_SEG);
    preg.addDesc(nixlBlobDesc((uintptr_t)kv.data(), len, 0, ""));
    preg.addDesc(nixlBlobDesc((uintptr_t)back.data(), len, 0, ""));
    dreg.addDesc(nixlBlobDesc((uintptr_t)dst.data(), len, 0, ""));
    need(p.registerMem(preg, &pargs), "registerMem (prefill)");
    need(d.registerMem(dreg, &dargs), "registerMem (decode)");

    std::string dmd, remote;
    need(d.getLocalMD(dmd), "getLocalMD");
    need(p.loadRemoteMD(dmd, remote), "loadRemoteMD");
    need(remote == decode, "loadRemoteMD named " + remote);

    /* WRITE: block i of kv to block (blocks-1-i) of dst, one call */
    nixl_xfer_dlist_t src(DRAM_SEG), far(DRAM_SEG);
    for (size_t i = 0; i < blocks; i++) {
        src.addDesc(nixlBasicDesc((uintptr_t)kv.data() + i * blk, blk, 0));
        far.addDesc(nixlBasicDesc((uintptr_t)dst.data() + (blocks - 1 - i) * blk, blk, 0));
    }
    nixlXferReqH *w = nullptr;
    pargs.notif = std::string("kv-ready");
    need(p.createXferReq(NIXL_WRITE, src, far, decode, w, &pargs), "createXferReq");
    nixl_status_t s = p.postXferReq(w);
    need(s >= NIXL_SUCCESS, "postXferReq: " + nixlEnumStrings::statusStr(s));

    nixl_notifs_t notifs;
    while (s == NIXL_IN_PROG || notifs[prefill].empty()) {
        if (s == NIXL_IN_PROG)
            s = p.getXferStatus(w);
        need(s >= NIXL_SUCCESS, "getXferStatus: " + nixlEnumStrings::statusStr(s));
        need(d.getNotifs(notifs), "getNotifs");
    }
    need(notifs[prefill].size() == 1 && notifs[prefill][0] == "kv-ready",
         "the notification did not come once");
    for (size_t i = 0; i < blocks; i++)
        need(!memcmp(kv.data() + i * blk, dst.data() + (blocks - 1 - i) * blk, blk),
             "WRITE: block " + std::to_string(i) + " differs");
    need(p.releaseXferReq(w), "releaseXferReq");

    /* READ back, prepped: the remote list's blocks by index, in order */
    nixl_xfer_dlist_t mine(DRAM_SEG);
    for (size_t i = 0; i < blocks; i++)
        mine.addDesc(nixlBasicDesc((uintptr_t)back.data() + i * blk, blk, 0));
    nixlDlistH *lh = nullptr, *rh = nullptr;
    need(p.prepXferDlist(NIXL_INIT_AGENT, mine, lh), "prepXferDlist (local)");
    need(p.prepXferDlist(decode, far, rh), "prepXferDlist (remote)");
    std::vector<int> idx;
    for (int i = 0; i < (int)blocks; i++)
        idx.push_back(i);
    nixlXferReqH *r = nullptr;
    need(p.makeXferReq(NIXL_READ, lh, idx, rh, idx, r), "makeXferReq");
    s = wait_done(p, r, p.postXferReq(r));
    need(s, "READ");
    need(!memcmp(kv.data(), back.data(), len), "READ: the bytes differ");
    need(p.releaseXferReq(r), "releaseXferReq");
    need(p.releasedDlistH(lh), "releasedDlistH");
    need(p.releasedDlistH(rh), "releasedDlistH");

    need(p.deregisterMem(preg, &pargs), "deregisterMem (prefill)");
    need(d.deregisterMem(dreg, &dargs), "deregisterMem (decode)");
    need(p.invalidateRemoteMD(decode), "invalidateRemoteMD");
    std::cout << "kv_copy: " << len << " bytes over " << backend << " both ways\n";
    return 0;
}
