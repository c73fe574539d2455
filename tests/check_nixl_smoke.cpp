/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libnxl-nixl smoke test: two nixlAgents in one process over UCX, written
 * as a NIXL program is (nixl.h only), plus <nixl_nxl.h>'s callback. Runs
 * the agents without a progress thread (every poll drives them) and then
 * with one. Exit 77 (skip) when this nxl has no usable UCX.
 */
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>
#include <poll.h>
#include <unistd.h>

#include "nixl.h"
#include "nixl_nxl.h"
#include "utils/serdes/serdes.h"

static int failures;

#define CHECK(cond)                                                                    \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            std::fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);       \
            failures++;                                                                \
        }                                                                              \
    } while (0)

#define CHECK_ST(expr, want)                                                           \
    do {                                                                               \
        nixl_status_t st_ = (expr);                                                    \
        if (st_ != (want)) {                                                           \
            std::fprintf(stderr, "FAIL %s:%d: %s = %s, expected %s\n", __FILE__,       \
                         __LINE__, #expr, nixlEnumStrings::statusStr(st_).c_str(),     \
                         nixlEnumStrings::statusStr(want).c_str());                    \
            failures++;                                                                \
        }                                                                              \
    } while (0)

using clk = std::chrono::steady_clock;

/* Polls a request, and the target's notifications, as NIXL programs do:
 * without a progress thread the target's polls make its side progress. */
static nixl_status_t wait_xfer(nixlAgent &init, nixlXferReqH *req, nixlAgent &target,
                               nixl_notifs_t &notifs, size_t want_notifs) {
    auto end = clk::now() + std::chrono::seconds(20);
    nixl_status_t st = NIXL_IN_PROG;
    size_t got = 0;
    while (clk::now() < end) {
        if (st == NIXL_IN_PROG)
            st = init.getXferStatus(req);
        if (got < want_notifs || st == NIXL_IN_PROG) {
            target.getNotifs(notifs); /* drives the target, as its NIXL program would */
            got = 0;
            for (auto &kv : notifs)
                got += kv.second.size();
        }
        if (st != NIXL_IN_PROG && got >= want_notifs)
            return st;
    }
    std::fprintf(stderr, "timeout: status %s, %zu of %zu notifications\n",
                 nixlEnumStrings::statusStr(st).c_str(), got, want_notifs);
    return NIXL_ERR_UNKNOWN;
}

struct cb_ctx { /* written on the agent's thread when it has one */
    std::atomic<int> calls{0};
    std::atomic<nixl_status_t> last{NIXL_IN_PROG};
};

static void on_done(nixlXferReqH *req, nixl_status_t st, void *arg) {
    (void)req;
    auto *c = static_cast<cb_ctx *>(arg);
    c->calls++;
    c->last = st;
}

static void run(bool prog_thread) {
    std::fprintf(stderr, "-- %s\n", prog_thread ? "progress thread" : "driven by polls");
    nixlAgentConfig cfg(prog_thread);
    std::string n1 = prog_thread ? "T1" : "A1", n2 = prog_thread ? "T2" : "A2";
    nixlAgent a1(n1, cfg), a2(n2, cfg);

    nixl_b_params_t p1, p2;
    nixl_mem_list_t m1, m2;
    CHECK_ST(a1.getPluginParams("UCX", m1, p1), NIXL_SUCCESS);
    CHECK_ST(a2.getPluginParams("UCX", m2, p2), NIXL_SUCCESS);
    p1["num_threads"] = "2"; /* a NIXL knob nxl does not have: ignored */
    nixlBackendH *b1 = nullptr, *b2 = nullptr, *dup = nullptr;
    CHECK_ST(a1.createBackend("UCX", p1, b1), NIXL_SUCCESS);
    CHECK_ST(a2.createBackend("UCX", p2, b2), NIXL_SUCCESS);
    CHECK_ST(a1.createBackend("UCX", p1, dup), NIXL_ERR_INVALID_PARAM);
    CHECK_ST(a1.createBackend("NO_SUCH_BACKEND", p1, dup), NIXL_ERR_NOT_FOUND);
    CHECK_ST(a1.getBackendParams(b1, m1, p1), NIXL_SUCCESS);
    CHECK(!m1.empty() && m1[0] == DRAM_SEG);

    const size_t len = 4096;
    std::vector<char> src(len), dst(len), back(len);
    for (size_t i = 0; i < len; i++)
        src[i] = static_cast<char>(i * 7 + 1);
    nixl_reg_dlist_t r1(DRAM_SEG), r2(DRAM_SEG);
    r1.addDesc(nixlBlobDesc((uintptr_t)src.data(), len, 0, ""));
    r1.addDesc(nixlBlobDesc((uintptr_t)back.data(), len, 0, ""));
    r2.addDesc(nixlBlobDesc((uintptr_t)dst.data(), len, 0, ""));
    nixl_opt_args_t x1, x2;
    x1.backends.push_back(b1);
    x2.backends.push_back(b2);
    CHECK_ST(a1.registerMem(r1, &x1), NIXL_SUCCESS);
    CHECK_ST(a2.registerMem(r2, &x2), NIXL_SUCCESS);

    std::string md1, md2, name;
    CHECK_ST(a1.getLocalMD(md1), NIXL_SUCCESS);
    CHECK_ST(a2.getLocalMD(md2), NIXL_SUCCESS);
    CHECK_ST(a1.loadRemoteMD(md2, name), NIXL_SUCCESS);
    CHECK(name == n2);
    CHECK_ST(a2.loadRemoteMD(md1, name), NIXL_SUCCESS);
    CHECK(name == n1);
    CHECK_ST(a1.loadRemoteMD("not metadata", name), NIXL_ERR_MISMATCH);

    nixl_xfer_dlist_t remote(DRAM_SEG), local(DRAM_SEG), local_back(DRAM_SEG);
    remote.addDesc(nixlBasicDesc((uintptr_t)dst.data(), len, 0));
    local.addDesc(nixlBasicDesc((uintptr_t)src.data(), len, 0));
    local_back.addDesc(nixlBasicDesc((uintptr_t)back.data(), len, 0));
    CHECK_ST(a1.checkRemoteMD(n2, remote), NIXL_SUCCESS);
    CHECK_ST(a1.checkRemoteMD("nobody", remote), NIXL_ERR_NOT_FOUND);

    /* One-call WRITE with a notification */
    nixl_opt_args_t wx = x1;
    wx.notif = "written";
    nixlXferReqH *w = nullptr;
    CHECK_ST(a1.createXferReq(NIXL_WRITE, local, remote, n2, w, &wx), NIXL_SUCCESS);
    nixl_status_t st = a1.postXferReq(w);
    CHECK(st == NIXL_SUCCESS || st == NIXL_IN_PROG);
    nixl_notifs_t notifs;
    CHECK_ST(wait_xfer(a1, w, a2, notifs, 1), NIXL_SUCCESS);
    CHECK(std::memcmp(src.data(), dst.data(), len) == 0);
    CHECK(notifs[n1].size() == 1 && notifs[n1][0] == "written");
    nixlBackendH *qb = nullptr;
    CHECK_ST(a1.queryXferBackend(w, qb), NIXL_SUCCESS);
    CHECK(qb == b1);

    /* Re-post after completion, with another notification given at post */
    std::memset(dst.data(), 0, len);
    nixl_opt_args_t px;
    px.notif = "again";
    st = a1.postXferReq(w, &px);
    CHECK(st == NIXL_SUCCESS || st == NIXL_IN_PROG);
    notifs.clear();
    CHECK_ST(wait_xfer(a1, w, a2, notifs, 1), NIXL_SUCCESS);
    CHECK(std::memcmp(src.data(), dst.data(), len) == 0);
    CHECK(notifs[n1].size() == 1 && notifs[n1][0] == "again");
    CHECK_ST(a1.releaseXferReq(w), NIXL_SUCCESS);

    /* Prepared READ back, with a callback (<nixl_nxl.h>) */
    nixlDlistH *lh = nullptr, *rh = nullptr;
    CHECK_ST(a1.prepXferDlist(NIXL_INIT_AGENT, local_back, lh, &x1), NIXL_SUCCESS);
    CHECK_ST(a1.prepXferDlist(n2, remote, rh, &x1), NIXL_SUCCESS);
    nixlXferReqH *rd = nullptr;
    CHECK_ST(a1.makeXferReq(NIXL_READ, lh, {0}, rh, {0}, rd), NIXL_SUCCESS);
    CHECK_ST(a1.makeXferReq(NIXL_READ, lh, {0}, rh, {1}, rd), NIXL_ERR_INVALID_PARAM);
    cb_ctx cc;
    CHECK_ST(nixlNxlSetXferCallback(a1, rd, on_done, &cc), NIXL_SUCCESS);
    st = a1.postXferReq(rd);
    CHECK(st == NIXL_SUCCESS || st == NIXL_IN_PROG);
    notifs.clear();
    CHECK_ST(wait_xfer(a1, rd, a2, notifs, 0), NIXL_SUCCESS);
    auto end = clk::now() + std::chrono::seconds(5);
    /* <nixl_nxl.h>'s loop: a descriptor to poll without a progress thread */
    int lfd = nixlNxlLoopFd(a1);
    CHECK(prog_thread ? lfd == -1 : lfd >= 0);
    while (cc.calls == 0 && clk::now() < end) {
        if (prog_thread) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        } else {
            struct pollfd pfd = {lfd, POLLIN, 0};
            int t = nixlNxlLoopTimeout(a1);
            poll(&pfd, 1, t < 0 || t > 10 ? 10 : t);
            CHECK_ST(nixlNxlRunOnce(a1, 0), NIXL_SUCCESS);
            nixlNxlRunOnce(a2, 0);
        }
    }
    if (prog_thread)
        CHECK_ST(nixlNxlRunOnce(a1, 0), NIXL_ERR_NOT_ALLOWED);
    CHECK(cc.calls == 1 && cc.last == NIXL_SUCCESS);
    CHECK(std::memcmp(src.data(), back.data(), len) == 0);
    /* Re-post as soon as getXferStatus says done: the callback of the
     * previous post may not have run yet (progress thread), NIXL takes it */
    for (int i = 0; i < 100; i++) {
        st = a1.postXferReq(rd);
        CHECK(st == NIXL_SUCCESS || st == NIXL_IN_PROG);
        CHECK_ST(wait_xfer(a1, rd, a2, notifs, 0), NIXL_SUCCESS);
    }
    end = clk::now() + std::chrono::seconds(5);
    while (cc.calls < 101 && clk::now() < end) {
        if (prog_thread)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        else
            nixlNxlRunOnce(a1, 1);
    }
    CHECK(cc.calls == 101);
    CHECK_ST(a1.releaseXferReq(rd), NIXL_SUCCESS);
    CHECK_ST(a1.releasedDlistH(lh), NIXL_SUCCESS);
    CHECK_ST(a1.releasedDlistH(rh), NIXL_SUCCESS);

    /* A standalone notification */
    CHECK_ST(a2.genNotif(n1, "hello"), NIXL_SUCCESS);
    notifs.clear();
    end = clk::now() + std::chrono::seconds(10);
    while (notifs[n2].empty() && clk::now() < end) {
        a2.getNotifs(notifs); /* drives the sender */
        a1.getNotifs(notifs);
    }
    CHECK(notifs[n2].size() == 1 && notifs[n2][0] == "hello");

    /* Bad input: NIXL's status, no crash */
    CHECK_ST(a1.postXferReq(nullptr), NIXL_ERR_INVALID_PARAM);
    CHECK_ST(a1.getXferStatus(nullptr), NIXL_ERR_INVALID_PARAM);
    CHECK_ST(a1.releaseXferReq(nullptr), NIXL_ERR_INVALID_PARAM);
    CHECK_ST(a1.sendLocalMD(), NIXL_ERR_INVALID_PARAM); /* no address, no etcd */
    nixlXferReqH *bad = nullptr;
    CHECK_ST(a1.createXferReq(NIXL_WRITE, local, remote, "nobody", bad), NIXL_ERR_NOT_FOUND);
    nixl_xfer_dlist_t one(DRAM_SEG);
    one.addDesc(nixlBasicDesc((uintptr_t)src.data(), len - 1, 0));
    CHECK_ST(a1.createXferReq(NIXL_WRITE, one, remote, n2, bad), NIXL_ERR_INVALID_PARAM);
    nixl_xfer_dlist_t stray(DRAM_SEG);
    stray.addDesc(nixlBasicDesc((uintptr_t)&len, sizeof len, 0));
    nixlDlistH *sh = nullptr;
    CHECK_ST(a1.prepXferDlist(NIXL_INIT_AGENT, stray, sh), NIXL_ERR_NOT_FOUND);
    CHECK_ST(a1.prepXferDlist("nobody", remote, sh), NIXL_ERR_NOT_FOUND);
    CHECK_ST(a1.genNotif("nobody", "x"), NIXL_ERR_NOT_FOUND);
    nixl_reg_dlist_t vram(VRAM_SEG);
    vram.addDesc(nixlBlobDesc(0x1000, 64, 0, ""));
    CHECK_ST(a1.registerMem(vram), NIXL_ERR_NOT_FOUND); /* no backend serves VRAM here */
    nixl_reg_dlist_t never(DRAM_SEG);
    never.addDesc(nixlBlobDesc((uintptr_t)&len, sizeof len, 0, ""));
    CHECK(a1.deregisterMem(never) < 0);

    /* Invalidation: the peer is gone, posting to it is refused */
    nixlXferReqH *w2 = nullptr;
    CHECK_ST(a1.createXferReq(NIXL_WRITE, local, remote, n2, w2), NIXL_SUCCESS);
    CHECK_ST(a1.invalidateRemoteMD(n2), NIXL_SUCCESS);
    CHECK_ST(a1.postXferReq(w2), NIXL_ERR_NOT_FOUND);
    CHECK_ST(a1.releaseXferReq(w2), NIXL_SUCCESS);
    CHECK_ST(a1.invalidateRemoteMD(n2), NIXL_ERR_NOT_FOUND);

    CHECK_ST(a1.deregisterMem(r1, &x1), NIXL_SUCCESS);
    CHECK_ST(a2.deregisterMem(r2, &x2), NIXL_SUCCESS);
}

/* Waits until checkRemoteMD(remote) gives want. */
static bool wait_md(nixlAgent &a, const std::string &remote, nixl_status_t want) {
    nixl_xfer_dlist_t none(DRAM_SEG);
    auto end = clk::now() + std::chrono::seconds(10);
    while (clk::now() < end) {
        if (a.checkRemoteMD(remote, none) == want)
            return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
}

/* Metadata over the listener: sendLocalMD, fetchRemoteMD, invalidateLocalMD
 * to a peer's address, each side with a listener (useListenThread). */
static void listener() {
    std::fprintf(stderr, "-- listener exchange\n");
    nixlAgentConfig cfg(false, true, 0); /* port 0: an ephemeral one */
    nixlAgent l1("L1", cfg), l2("L2", cfg);
    nixl_b_params_t p;
    nixl_mem_list_t m;
    nixlBackendH *b = nullptr;
    CHECK_ST(l1.getPluginParams("UCX", m, p), NIXL_SUCCESS);
    CHECK_ST(l1.createBackend("UCX", p, b), NIXL_SUCCESS);
    CHECK_ST(l2.createBackend("UCX", p, b), NIXL_SUCCESS);
    uint16_t port2 = nxl_agent_listen_port(nixlNxlAgent(l2));
    CHECK(port2 != 0);
    nixl_opt_args_t to2;
    to2.ipAddr = "127.0.0.1";
    to2.port = port2;
    CHECK_ST(l1.sendLocalMD(&to2), NIXL_SUCCESS);
    CHECK(wait_md(l2, "L1", NIXL_SUCCESS));
    CHECK_ST(l1.fetchRemoteMD("L2", &to2), NIXL_SUCCESS);
    CHECK(wait_md(l1, "L2", NIXL_SUCCESS));
    CHECK_ST(l1.invalidateLocalMD(&to2), NIXL_SUCCESS);
    CHECK(wait_md(l2, "L1", NIXL_ERR_NOT_FOUND));
    nixl_opt_args_t bad = to2;
    bad.port = 70000;
    CHECK_ST(l1.sendLocalMD(&bad), NIXL_ERR_INVALID_PARAM);
}

/* queryMem over POSIX: NIXL names files by path in metaInfo. */
static void query() {
    std::fprintf(stderr, "-- queryMem\n");
    nixlAgent q("Q", nixlAgentConfig());
    nixl_b_params_t p;
    nixl_mem_list_t m;
    nixlBackendH *b = nullptr;
    if (q.getPluginParams("POSIX", m, p) != NIXL_SUCCESS) {
        std::fprintf(stderr, "no POSIX transport: queryMem not tested\n");
        return;
    }
    CHECK_ST(q.createBackend("POSIX", p, b), NIXL_SUCCESS);
    char path[] = "/tmp/nixl_smoke_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    CHECK(write(fd, "12345", 5) == 5);
    nixl_reg_dlist_t files(FILE_SEG);
    files.addDesc(nixlBlobDesc(0, 0, 0, path));
    files.addDesc(nixlBlobDesc(0, 0, 0, "/nonexistent/nixl_smoke"));
    files.addDesc(nixlBlobDesc(0, 0, 0, ""));
    std::vector<nixl_query_resp_t> resp;
    CHECK_ST(q.queryMem(files, resp, nullptr), NIXL_SUCCESS);
    CHECK(resp.size() == 3);
    CHECK(resp.size() == 3 && resp[0] && resp[0]->at("size") == "5" && resp[0]->count("mode"));
    CHECK(resp.size() == 3 && !resp[1] && !resp[2]);
    close(fd);
    unlink(path);
}

static void serdes() {
    nixl_xfer_dlist_t l(VRAM_SEG);
    l.addDesc(nixlBasicDesc(0x1000, 64, 3));
    l.addDesc(nixlBasicDesc(0x2000, 128, 3));
    nixlSerDes s;
    CHECK_ST(l.serialize(&s), NIXL_SUCCESS);
    nixlSerDes d;
    d.importStr(s.exportStr());
    nixl_xfer_dlist_t back(&d);
    CHECK(back == l);
    CHECK(back.getIndex(nixlBasicDesc(0x2000, 128, 3)) == 1);
    nixlSerDes bad;
    bad.importStr("garbage");
    nixl_xfer_dlist_t none(&bad);
    CHECK(none.descCount() == 0);
}

int main() {
    serdes();
    nixlAgent probe("probe", nixlAgentConfig());
    std::vector<nixl_backend_t> plugins;
    probe.getAvailPlugins(plugins);
    bool ucx = false;
    for (auto &p : plugins)
        ucx = ucx || p == "UCX";
    if (!ucx) {
        std::printf("SKIP: no UCX transport in this nxl\n");
        return failures ? 1 : 77;
    }
    run(false);
    run(true);
    listener();
    query();
    std::printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
