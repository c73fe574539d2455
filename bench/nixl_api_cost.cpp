/* SPDX-License-Identifier: BSD-3-Clause */
/* bench/nixl_api_cost — what libnxl-nixl (NIXL's C++ API over nxl) adds to
 * a transfer, measured in one process so that the two paths do the same
 * work on the same agents, memory and UCX connection:
 *
 *   nixl   initiator: postXferReq() of a request made once (createXferReq,
 *          a notification with each post), then getXferStatus() until done;
 *          target: getNotifs() in the same poll loop (nixlbench's shape);
 *   nxl    the same through <nxl.h> on the agents underneath
 *          (nixlNxlAgent()): nxl_xfer_post(), then nxl_xfer_status() with
 *          nxl_agent_run_once(0) of each agent and nxl_notifs_drain() —
 *          what the layer's calls do, without the layer.
 *
 * Rounds alternate the two; each row is the median over rounds of the CPU
 * time (user + system, getrusage) and the wall time per transfer, and the
 * differences: the layer's cost per transfer. CPU time is what the layer
 * adds; it is steadier than wall time on a shared machine.
 *
 *   bench/nixl_api_cost [--sizes 64,4096,65536,1048576] [--rounds 7]
 *                       [--seconds 0.5]     (UCX_TLS as set; default UCX's)
 */
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "nixl.h"
#include "nixl_nxl.h"

using clk = std::chrono::steady_clock;

static void die(const char *what, nixl_status_t st) {
    std::fprintf(stderr, "nixl_api_cost: %s: %s\n", what, nixlEnumStrings::statusStr(st).c_str());
    std::exit(1);
}

static double cpu_s() {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
           (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static double now_s() {
    return std::chrono::duration<double>(clk::now().time_since_epoch()).count();
}

struct sample {
    double cpu_us, wall_us, polls;
};

static void count_notif(nxl_agent_t *, const char *, const void *, size_t, void *arg) {
    ++*static_cast<size_t *>(arg);
}

/* transfers through NIXL's API for about @p secs: per-transfer costs */
static sample run_nixl(nixlAgent &ini, nixlAgent &tgt, nixlXferReqH *req, double secs) {
    nixl_notifs_t notifs;
    size_t n = 0, polls = 0, got = 0;
    double c0 = cpu_s(), t0 = now_s(), t = t0;
    while (t - t0 < secs) {
        for (int k = 0; k < 64; k++, n++) {
            nixl_status_t st = ini.postXferReq(req);
            if (st < 0)
                die("postXferReq", st);
            while ((st = ini.getXferStatus(req)) == NIXL_IN_PROG) {
                polls++;
                tgt.getNotifs(notifs);
            }
            if (st != NIXL_SUCCESS)
                die("getXferStatus", st);
            for (;;) { /* its notification, as the target of nixlbench waits for it */
                for (auto &kv : notifs)
                    got += kv.second.size();
                notifs.clear();
                if (got > n)
                    break;
                tgt.getNotifs(notifs);
                polls++;
            }
        }
        t = now_s();
    }
    return {(cpu_s() - c0) * 1e6 / n, (t - t0) * 1e6 / n, (double)polls / n};
}

/* the same through <nxl.h> */
static sample run_nxl(nxl_agent_t *ini, nxl_agent_t *tgt, nxl_xfer_t *x, double secs) {
    size_t n = 0, polls = 0, got = 0;
    double c0 = cpu_s(), t0 = now_s(), t = t0;
    while (t - t0 < secs) {
        for (int k = 0; k < 64; k++, n++) {
            nxl_status_t st = nxl_xfer_post(x, nullptr, nullptr, nullptr);
            if (st != NXL_SUCCESS)
                die("nxl_xfer_post", NIXL_ERR_BACKEND);
            /* getXferStatus: status, a turn while in progress, status again */
            while ((st = nxl_xfer_status(x)) == NXL_IN_PROG &&
                   (nxl_agent_run_once(ini, 0), st = nxl_xfer_status(x)) == NXL_IN_PROG) {
                polls++;
                nxl_agent_run_once(tgt, 0);
                nxl_notifs_drain(tgt, count_notif, &got);
            }
            if (st != NXL_SUCCESS)
                die("nxl_xfer_status", NIXL_ERR_BACKEND);
            while (got <= n) {
                nxl_agent_run_once(tgt, 0);
                nxl_notifs_drain(tgt, count_notif, &got);
                polls++;
            }
        }
        t = now_s();
    }
    return {(cpu_s() - c0) * 1e6 / n, (t - t0) * 1e6 / n, (double)polls / n};
}

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

int main(int argc, char **argv) {
    std::vector<size_t> sizes = {64, 4096, 65536, 1048576};
    int rounds = 7;
    double secs = 0.5;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "--sizes" && i + 1 < argc) {
            sizes.clear();
            for (char *s = std::strtok(argv[++i], ","); s; s = std::strtok(nullptr, ","))
                sizes.push_back(std::strtoull(s, nullptr, 0));
        } else if (a == "--rounds" && i + 1 < argc) {
            rounds = std::atoi(argv[++i]);
        } else if (a == "--seconds" && i + 1 < argc) {
            secs = std::atof(argv[++i]);
        } else {
            std::fprintf(stderr, "usage: %s [--sizes a,b,...] [--rounds N] [--seconds S]\n",
                         argv[0]);
            return a == "--help" ? 0 : 2;
        }
    }
    size_t max = *std::max_element(sizes.begin(), sizes.end());

    nixlAgentConfig cfg(false);
    nixlAgent ini("cost-I", cfg), tgt("cost-T", cfg);
    nixl_b_params_t p;
    nixl_mem_list_t m;
    nixlBackendH *bi = nullptr, *bt = nullptr;
    nixl_status_t st;
    if ((st = ini.getPluginParams("UCX", m, p)) != NIXL_SUCCESS ||
        (st = ini.createBackend("UCX", p, bi)) != NIXL_SUCCESS ||
        (st = tgt.createBackend("UCX", p, bt)) != NIXL_SUCCESS)
        die("UCX backend", st);
    std::vector<char> src(max, 1), dst(max, 0);
    nixl_reg_dlist_t rs(DRAM_SEG), rd(DRAM_SEG);
    rs.addDesc(nixlBlobDesc((uintptr_t)src.data(), max, 0, ""));
    rd.addDesc(nixlBlobDesc((uintptr_t)dst.data(), max, 0, ""));
    if ((st = ini.registerMem(rs)) != NIXL_SUCCESS || (st = tgt.registerMem(rd)) != NIXL_SUCCESS)
        die("registerMem", st);
    std::string md, name;
    if ((st = tgt.getLocalMD(md)) != NIXL_SUCCESS || (st = ini.loadRemoteMD(md, name)) != NIXL_SUCCESS)
        die("metadata", st);
    nxl_agent_t *ai = nixlNxlAgent(ini), *at = nixlNxlAgent(tgt);

    std::printf("# bench/nixl_api_cost: WRITE + notification, one in flight, one process "
                "(UCX_TLS=%s), medians of %d rounds of %.2f s each\n",
                std::getenv("UCX_TLS") ? std::getenv("UCX_TLS") : "UCX's default", rounds, secs);
    std::printf("| block | nixl CPU us | nxl CPU us | layer CPU us | nixl wall us | nxl wall us | "
                "layer wall us | nixl / nxl bandwidth | polls nixl/nxl |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|\n");
    for (size_t s : sizes) {
        nixl_xfer_dlist_t l(DRAM_SEG), r(DRAM_SEG);
        l.addDesc(nixlBasicDesc((uintptr_t)src.data(), s, 0));
        r.addDesc(nixlBasicDesc((uintptr_t)dst.data(), s, 0));
        nixl_opt_args_t ox;
        ox.notif = "n";
        nixlXferReqH *req = nullptr;
        if ((st = ini.createXferReq(NIXL_WRITE, l, r, "cost-T", req, &ox)) != NIXL_SUCCESS)
            die("createXferReq", st);
        nxl_desc_t dl = {}, dr = {};
        dl.addr = (uintptr_t)src.data(), dl.len = s, dr.addr = (uintptr_t)dst.data(), dr.len = s;
        nxl_dlist_t ll = {NXL_DRAM, &dl, 1}, lr = {NXL_DRAM, &dr, 1};
        nxl_xfer_opts_t o;
        nxl_xfer_opts_init(&o);
        o.notif = "n";
        o.notif_len = 1;
        nxl_xfer_t *x = nullptr;
        if (nxl_xfer_create(ai, NXL_WRITE, &ll, &lr, "cost-T", &o, &x) != NXL_SUCCESS)
            die("nxl_xfer_create", NIXL_ERR_BACKEND);
        run_nixl(ini, tgt, req, secs / 4); /* warm-up */
        run_nxl(ai, at, x, secs / 4);
        std::vector<double> cn, cx, wn, wx, dc, dw, pn, px;
        for (int k = 0; k < rounds; k++) {
            sample a = run_nixl(ini, tgt, req, secs), b = run_nxl(ai, at, x, secs);
            cn.push_back(a.cpu_us), cx.push_back(b.cpu_us), wn.push_back(a.wall_us),
                wx.push_back(b.wall_us), dc.push_back(a.cpu_us - b.cpu_us),
                dw.push_back(a.wall_us - b.wall_us), pn.push_back(a.polls), px.push_back(b.polls);
        }
        std::printf("| %zu | %.2f | %.2f | %+.2f | %.2f | %.2f | %+.2f | %.3f | %.1f/%.1f |\n", s,
                    median(cn), median(cx), median(dc), median(wn), median(wx), median(dw),
                    median(wx) / median(wn), median(pn), median(px));
        std::fflush(stdout);
        ini.releaseXferReq(req);
        nxl_xfer_release(x);
    }
    return 0;
}
