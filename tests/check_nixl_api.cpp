/* SPDX-License-Identifier: BSD-3-Clause */
/* NIXL's C++ agent API over nxl (compat/nixl, libnxl-nixl) end to end
 * between two processes: the test's process is the initiator "I", a forked
 * child the target "T", which it drives over a socketpair with one-line
 * commands. Every configuration of the table (a backend by NIXL's name and
 * its parameters) runs the same tests; a backend this build or machine
 * lacks skips them with its reason. POSIX files run in one process (NIXL's
 * POSIX backend is local only). The statuses expected are NIXL's. */
#include <check.h>

#include <nixl.h>
#include <nixl_nxl.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

namespace {

struct conf_t {
    const char *label;
    const char *backend;
    nixl_b_params_t params;
};

const conf_t confs[] = {
    {"ucx_shm", "UCX", {}},
    {"ucx_tcp", "UCX", {{"tls", "tcp"}}},
    {"lf_tcp", "LIBFABRIC", {{"provider", "tcp;ofi_rxm"}, {"stall_timeout", "3s"}}},
};
constexpr int NCONFS = sizeof(confs) / sizeof(confs[0]);

std::string missing[NCONFS]; /* why a configuration cannot run here, "" when it can */
std::string posix_missing;

const size_t TLEN = 16u << 20; /* the target's buffer */
const size_t ILEN = 16u << 20; /* the initiator's */

uint64_t now_ms()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* a pattern that differs per byte, per buffer and per seed */
void fill(void *buf, size_t len, uint32_t seed)
{
    unsigned char *p = (unsigned char *)buf;
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (unsigned char)x;
    }
}

/* the index of the first wrong byte, -1 when all match */
long check(const void *buf, size_t len, uint32_t seed)
{
    const unsigned char *p = (const unsigned char *)buf;
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        if (p[i] != (unsigned char)x)
            return (long)i;
    }
    return -1;
}

/* the status's name, stable (a printf may hold several) */
const char *st(nixl_status_t s)
{
    static std::map<int, std::string> names;
    auto it = names.find((int)s);
    if (it == names.end())
        it = names.emplace((int)s, nixlEnumStrings::statusStr(s)).first;
    return it->second.c_str();
}

/* a std::string (an answer of the target) equal to want */
#define ck_str(expr, want)                                                                         \
    do {                                                                                           \
        std::string g_ = (expr);                                                                   \
        ck_assert_msg(g_ == (want), "%s: '%s', want '%s'", #expr, g_.c_str(), (want));             \
    } while (0)

#define ck_status(expr, want)                                                                      \
    do {                                                                                           \
        nixl_status_t s_ = (expr);                                                                 \
        ck_assert_msg(s_ == (want), "%s: %s (%d), want %s", #expr, st(s_), (int)s_, st(want));     \
    } while (0)

/* ------------------------------------------------------------- the channel */

bool write_all(int fd, const void *p, size_t n)
{
    const char *b = (const char *)p;
    while (n) {
        ssize_t k = write(fd, b, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return false;
        b += k, n -= (size_t)k;
    }
    return true;
}

bool read_all(int fd, void *p, size_t n)
{
    char *b = (char *)p;
    while (n) {
        ssize_t k = read(fd, b, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return false;
        b += k, n -= (size_t)k;
    }
    return true;
}

bool read_line(int fd, std::string &line)
{
    line.clear();
    char c;
    for (;;) {
        if (!read_all(fd, &c, 1))
            return false;
        if (c == '\n')
            return true;
        line += c;
    }
}

bool send_line(int fd, const std::string &s)
{
    std::string l = s + "\n";
    return write_all(fd, l.data(), l.size());
}

nixl_xfer_dlist_t one(uintptr_t addr, size_t len, nixl_mem_t mem = DRAM_SEG, uint64_t dev = 0)
{
    nixl_xfer_dlist_t l(mem);
    l.addDesc(nixlBasicDesc(addr, len, dev));
    return l;
}

nixl_reg_dlist_t reg1(uintptr_t addr, size_t len, nixl_mem_t mem = DRAM_SEG, uint64_t dev = 0)
{
    nixl_reg_dlist_t l(mem);
    l.addDesc(nixlBlobDesc(addr, len, dev, ""));
    return l;
}

/* ------------------------------------------------------------- the target */

struct {
    nixlAgent *a;
    unsigned char *buf;
    nixl_notifs_t notifs; /* all getNotifs gave, appended */
    nixl_status_t notif_err;
} T;

size_t count_notif(const std::string &from, const std::string &msg)
{
    size_t n = 0;
    auto it = T.notifs.find(from);
    if (it != T.notifs.end())
        for (auto &m : it->second)
            n += m == msg;
    return n;
}

std::string t_cmd(int fd, const std::string &line)
{
    char verb[16] = "", arg[256] = "";
    unsigned long long x = 0, y = 0, z = 0;
    if (sscanf(line.c_str(), "chk %llu %llu %llu", &x, &y, &z) == 3) {
        if (x + y > TLEN)
            return "bad range";
        long i = check(T.buf + x, y, (uint32_t)z);
        return i < 0 ? "ok" : "bad at " + std::to_string(i);
    }
    if (sscanf(line.c_str(), "fill %llu %llu %llu", &x, &y, &z) == 3) {
        if (x + y > TLEN)
            return "bad range";
        fill(T.buf + x, y, (uint32_t)z);
        return "ok";
    }
    if (sscanf(line.c_str(), "md %llu", &x) == 1) {
        std::string blob(x, '\0'), name;
        if (!read_all(fd, &blob[0], x))
            return "short";
        nixl_status_t s = T.a->loadRemoteMD(blob, name);
        return std::string(st(s)) + " " + name;
    }
    if (sscanf(line.c_str(), "%15s %255[^\n]", verb, arg) == 2) {
        std::string v = verb, a = arg;
        if (v == "cnt") /* cnt FROM MSG: how many times MSG came from FROM */
        {
            std::string from = a.substr(0, a.find(' '));
            std::string msg = a.find(' ') == std::string::npos ? "" : a.substr(a.find(' ') + 1);
            return std::to_string(count_notif(from, msg));
        }
        if (v == "gen")
            return st(T.a->genNotif("I", a));
        if (v == "inv")
            return st(T.a->invalidateRemoteMD(a));
        if (v == "has")
            return st(T.a->checkRemoteMD(a, nixl_xfer_dlist_t(DRAM_SEG)));
    }
    return "what: " + line;
}

[[noreturn]] void target_main(int fd, const conf_t *c, uint16_t port)
{
    nixlAgentConfig cfg(false, true, port);
    T.a = new nixlAgent("T", cfg);
    nixlBackendH *b = nullptr;
    if (T.a->createBackend(c->backend, c->params, b) != NIXL_SUCCESS)
        _exit(2);
    T.buf = (unsigned char *)malloc(TLEN);
    fill(T.buf, TLEN, 1);
    if (T.a->registerMem(reg1((uintptr_t)T.buf, TLEN)) != NIXL_SUCCESS)
        _exit(3);
    std::string md;
    if (T.a->getLocalMD(md) != NIXL_SUCCESS)
        _exit(4);
    char hello[128];
    snprintf(hello, sizeof(hello), "hello %llu %zu", (unsigned long long)(uintptr_t)T.buf,
             md.size());
    if (!send_line(fd, hello) || !write_all(fd, md.data(), md.size()))
        _exit(5);
    for (;;) {
        /* NIXL without a progress thread: the target's getNotifs drives it */
        nixl_status_t s = T.a->getNotifs(T.notifs);
        if (s != NIXL_SUCCESS)
            T.notif_err = s;
        struct pollfd pf = {fd, POLLIN, 0};
        if (poll(&pf, 1, 1) <= 0)
            continue;
        std::string line;
        if (!read_line(fd, line) || line == "quit")
            break;
        if (!send_line(fd, t_cmd(fd, line)))
            break;
    }
    delete T.a;
    _exit(0);
}

/* ---------------------------------------------------------- the initiator */

struct {
    const conf_t *c;
    pid_t pid;
    int fd;
    uint16_t port;
    nixlAgent *a;
    nixlBackendH *b;
    unsigned char *buf;
    uintptr_t raddr;
    std::string tmd;      /* the target's metadata */
    nixl_notifs_t stash;  /* what progress() got from getNotifs */
} I;

/* a turn of the initiator, as a NIXL program without a progress thread
 * gives its agent: getNotifs (what comes is kept in I.stash) */
void progress()
{
    I.a->getNotifs(I.stash);
}

uint16_t free_port()
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert(s >= 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert(bind(s, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    socklen_t sl = sizeof(sa);
    ck_assert(getsockname(s, (struct sockaddr *)&sa, &sl) == 0);
    close(s);
    return ntohs(sa.sin_port);
}

std::string ask(const std::string &cmd)
{
    ck_assert_msg(send_line(I.fd, cmd), "the target is gone (asked '%s')", cmd.c_str());
    std::string r;
    ck_assert_msg(read_line(I.fd, r), "the target is gone (asked '%s')", cmd.c_str());
    return r;
}

/* asks until the answer is want or ms passed; the last answer */
std::string ask_until(const std::string &cmd, const std::string &want, int ms)
{
    uint64_t end = now_ms() + (uint64_t)ms;
    std::string r;
    do {
        r = ask(cmd);
        if (r == want)
            break;
        progress();
        usleep(1000);
    } while (now_ms() < end);
    return r;
}

std::string send_md(const std::string &md)
{
    ck_assert(send_line(I.fd, "md " + std::to_string(md.size())) &&
              write_all(I.fd, md.data(), md.size()));
    std::string r;
    ck_assert(read_line(I.fd, r));
    return r;
}

/* waits for a posted request: its final status (IN_PROG after ms) */
nixl_status_t wait_xfer(nixlXferReqH *x, nixl_status_t s, int ms)
{
    uint64_t end = now_ms() + (uint64_t)ms;
    while (s == NIXL_IN_PROG && now_ms() < end)
        s = I.a->getXferStatus(x);
    return s;
}

void setup_conf(int i)
{
    I.c = &confs[i];
    I.pid = 0;
    I.a = nullptr;
    I.stash.clear();
    if (!missing[i].empty())
        return;
    I.port = free_port();
    int sp[2];
    ck_assert(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0);
    fflush(NULL);
    I.pid = fork();
    ck_assert(I.pid >= 0);
    if (I.pid == 0) {
        close(sp[0]);
        target_main(sp[1], I.c, I.port);
    }
    close(sp[1]);
    I.fd = sp[0];
    std::string hello;
    ck_assert_msg(read_line(I.fd, hello), "the target did not start");
    unsigned long long addr = 0;
    size_t mdlen = 0;
    ck_assert(sscanf(hello.c_str(), "hello %llu %zu", &addr, &mdlen) == 2);
    I.raddr = (uintptr_t)addr;
    I.tmd.assign(mdlen, '\0');
    ck_assert(read_all(I.fd, &I.tmd[0], mdlen));

    nixlAgentConfig cfg(false);
    I.a = new nixlAgent("I", cfg);
    ck_status(I.a->createBackend(I.c->backend, I.c->params, I.b), NIXL_SUCCESS);
    I.buf = (unsigned char *)malloc(ILEN);
    memset(I.buf, 0, ILEN);
    ck_status(I.a->registerMem(reg1((uintptr_t)I.buf, ILEN)), NIXL_SUCCESS);

    /* metadata both ways as blobs: getLocalMD, loadRemoteMD */
    std::string name;
    ck_status(I.a->loadRemoteMD(I.tmd, name), NIXL_SUCCESS);
    ck_assert_str_eq(name.c_str(), "T");
    std::string md;
    ck_status(I.a->getLocalMD(md), NIXL_SUCCESS);
    ck_str(send_md(md), "NIXL_SUCCESS I");
}

void teardown()
{
    if (I.pid > 0) {
        send_line(I.fd, "quit");
        int status = 0;
        for (int i = 0; i < 100 && waitpid(I.pid, &status, WNOHANG) == 0; i++)
            usleep(50000);
        kill(I.pid, SIGKILL);
        waitpid(I.pid, &status, 0);
        close(I.fd);
    }
    I.pid = 0;
    delete I.a;
    I.a = nullptr;
    free(I.buf);
    I.buf = nullptr;
}

template <int i> void setup_i() { setup_conf(i); }

bool skip()
{
    int i = (int)(I.c - confs);
    if (missing[i].empty())
        return false;
    printf("SKIP: %s: %s\n", I.c->label, missing[i].c_str());
    return true;
}

/* ------------------------------------------------------------------ tests */

/* prepped WRITE of three blocks with a notification; WRITE's bytes are at
 * the target when getXferStatus says NIXL_SUCCESS; a re-post of the
 * completed request with new bytes and a new message; each message once */
START_TEST(t_write_prepped)
{
    if (skip())
        return;
    const size_t blk = 64 * 1024;
    nixl_xfer_dlist_t l(DRAM_SEG), r(DRAM_SEG);
    for (int k = 0; k < 3; k++) {
        l.addDesc(nixlBasicDesc((uintptr_t)I.buf + k * blk, blk, 0));
        r.addDesc(nixlBasicDesc(I.raddr + (size_t)(2 - k) * 2 * blk, blk, 0));
    }
    nixlDlistH *lh = nullptr, *rh = nullptr;
    ck_status(I.a->prepXferDlist(NIXL_INIT_AGENT, l, lh), NIXL_SUCCESS);
    ck_status(I.a->prepXferDlist("T", r, rh), NIXL_SUCCESS);
    nixlXferReqH *x = nullptr;
    nixl_opt_args_t o;
    o.notif = std::string("w1");
    ck_status(I.a->makeXferReq(NIXL_WRITE, lh, {0, 1, 2}, rh, {0, 1, 2}, x, &o), NIXL_SUCCESS);
    for (int pass = 0; pass < 2; pass++) {
        for (int k = 0; k < 3; k++)
            fill(I.buf + k * blk, blk, 100 + pass * 10 + k);
        nixl_status_t s;
        if (pass == 0) {
            s = I.a->postXferReq(x);
        } else {
            nixl_opt_args_t o2;
            o2.hasNotif = true;
            o2.notifMsg = "w2";
            s = I.a->postXferReq(x, &o2);
        }
        ck_assert_msg(s == NIXL_SUCCESS || s == NIXL_IN_PROG, "post %d: %s", pass, st(s));
        s = wait_xfer(x, s, 10000);
        ck_assert_msg(s == NIXL_SUCCESS, "pass %d: %s", pass, st(s));
        for (int k = 0; k < 3; k++) {
            char c[96];
            snprintf(c, sizeof(c), "chk %zu %zu %d", (size_t)(2 - k) * 2 * blk, blk,
                     100 + pass * 10 + k);
            ck_str(ask(c), "ok");
        }
    }
    ck_str(ask_until("cnt I w1", "1", 5000), "1");
    ck_str(ask_until("cnt I w2", "1", 5000), "1");
    usleep(200000);
    ck_str(ask("cnt I w1"), "1");
    ck_str(ask("cnt I w2"), "1");
    ck_status(I.a->releaseXferReq(x), NIXL_SUCCESS);
    ck_status(I.a->releasedDlistH(lh), NIXL_SUCCESS);
    ck_status(I.a->releasedDlistH(rh), NIXL_SUCCESS);
}
END_TEST

/* one-call READ (createXferReq) of the target's pattern, re-posted */
START_TEST(t_read_one_call)
{
    if (skip())
        return;
    const size_t len = 1 << 20, off = 3 * 4096 + 8;
    nixlXferReqH *x = nullptr;
    ck_status(I.a->createXferReq(NIXL_READ, one((uintptr_t)I.buf + 16, len),
                                 one(I.raddr + off, len), "T", x),
              NIXL_SUCCESS);
    for (uint32_t pass = 0; pass < 3; pass++) {
        char c[96];
        snprintf(c, sizeof(c), "fill %zu %zu %u", off, len, 7 + pass);
        ck_str(ask(c), "ok");
        nixl_status_t s = wait_xfer(x, I.a->postXferReq(x), 10000);
        ck_assert_msg(s == NIXL_SUCCESS, "pass %u: %s", pass, st(s));
        long bad = check(I.buf + 16, len, 7 + pass);
        ck_assert_msg(bad < 0, "pass %u: byte %ld differs", pass, bad);
    }
    ck_status(I.a->releaseXferReq(x), NIXL_SUCCESS);
}
END_TEST

/* a re-post while the request is in progress is refused with
 * NIXL_ERR_REPOST_ACTIVE or waits; after completion it moves the bytes */
START_TEST(t_repost_large)
{
    if (skip())
        return;
    nixlXferReqH *x = nullptr;
    ck_status(I.a->createXferReq(NIXL_WRITE, one((uintptr_t)I.buf, ILEN), one(I.raddr, ILEN),
                                 "T", x),
              NIXL_SUCCESS);
    for (uint32_t pass = 0; pass < 4; pass++) {
        fill(I.buf, ILEN, 40 + pass);
        nixl_status_t s = I.a->postXferReq(x);
        ck_assert_msg(s == NIXL_SUCCESS || s == NIXL_IN_PROG, "post %u: %s", pass, st(s));
        if (s == NIXL_IN_PROG) {
            nixl_status_t s2 = I.a->postXferReq(x);
            ck_assert_msg(s2 == NIXL_ERR_REPOST_ACTIVE || s2 == NIXL_SUCCESS ||
                              s2 == NIXL_IN_PROG,
                          "re-post of an active request: %s", st(s2));
            s = s2 == NIXL_ERR_REPOST_ACTIVE ? NIXL_IN_PROG : s2;
        }
        s = wait_xfer(x, s, 20000);
        ck_assert_msg(s == NIXL_SUCCESS, "pass %u: %s", pass, st(s));
        char c[96];
        snprintf(c, sizeof(c), "chk 0 %zu %u", ILEN, 40 + pass);
        ck_str(ask(c), "ok");
    }
    ck_status(I.a->releaseXferReq(x), NIXL_SUCCESS);
}
END_TEST

/* genNotif both ways; getNotifs appends to the map it is given; each
 * message arrives exactly once */
START_TEST(t_notifs)
{
    if (skip())
        return;
    ck_status(I.a->genNotif("T", "hello"), NIXL_SUCCESS);
    ck_status(I.a->genNotif("T", std::string("bin\0ary", 7)), NIXL_SUCCESS);
    ck_str(ask_until("cnt I hello", "1", 5000), "1");
    ck_str(ask("gen hi-one"), "NIXL_SUCCESS");
    ck_str(ask("gen hi-two"), "NIXL_SUCCESS");
    nixl_notifs_t m;
    m["X"].push_back("kept");
    uint64_t end = now_ms() + 5000;
    while (m["T"].size() < 2 && now_ms() < end)
        ck_status(I.a->getNotifs(m), NIXL_SUCCESS);
    end = now_ms() + 200;
    while (now_ms() < end)
        ck_status(I.a->getNotifs(m), NIXL_SUCCESS);
    ck_assert_uint_eq(m["X"].size(), 1);
    ck_assert_str_eq(m["X"][0].c_str(), "kept");
    ck_assert_uint_eq(m["T"].size(), 2);
    ck_assert_str_eq(m["T"][0].c_str(), "hi-one");
    ck_assert_str_eq(m["T"][1].c_str(), "hi-two");
    ck_assert_msg(I.stash["T"].empty(), "%zu notifications of T went elsewhere",
                  I.stash["T"].size());
    usleep(100000);
    ck_str(ask("cnt I hello"), "1");
}
END_TEST

/* metadata over the socket both ways: fetchRemoteMD and sendLocalMD to
 * the target's listener (after each side forgot the other) */
START_TEST(t_md_socket)
{
    if (skip())
        return;
    ck_status(I.a->invalidateRemoteMD("T"), NIXL_SUCCESS);
    ck_str(ask("inv I"), "NIXL_SUCCESS");
    ck_status(I.a->checkRemoteMD("T", nixl_xfer_dlist_t(DRAM_SEG)), NIXL_ERR_NOT_FOUND);
    ck_str(ask("has I"), "NIXL_ERR_NOT_FOUND");

    nixl_opt_args_t o;
    o.ipAddr = "127.0.0.1";
    o.port = I.port;
    ck_status(I.a->fetchRemoteMD("T", &o), NIXL_SUCCESS);
    ck_status(I.a->sendLocalMD(&o), NIXL_SUCCESS);
    nixl_status_t s = NIXL_ERR_NOT_FOUND;
    uint64_t end = now_ms() + 10000;
    while (now_ms() < end) {
        nixl_notifs_t m;
        I.a->getNotifs(m); /* progress, as a NIXL program without threads does */
        s = I.a->checkRemoteMD("T", one(I.raddr, 4096));
        if (s == NIXL_SUCCESS)
            break;
        usleep(1000);
    }
    ck_assert_msg(s == NIXL_SUCCESS, "the target's metadata did not come: %s", st(s));
    ck_str(ask_until("has I", "NIXL_SUCCESS", 10000), "NIXL_SUCCESS");

    fill(I.buf, 8192, 77);
    nixlXferReqH *x = nullptr;
    nixl_opt_args_t n;
    n.notif = std::string("after-socket");
    ck_status(I.a->createXferReq(NIXL_WRITE, one((uintptr_t)I.buf, 8192), one(I.raddr, 8192),
                                 "T", x, &n),
              NIXL_SUCCESS);
    s = wait_xfer(x, I.a->postXferReq(x), 10000);
    ck_assert_msg(s == NIXL_SUCCESS, "%s", st(s));
    ck_str(ask("chk 0 8192 77"), "ok");
    ck_str(ask_until("cnt I after-socket", "1", 5000), "1");
    ck_status(I.a->releaseXferReq(x), NIXL_SUCCESS);
}
END_TEST

/* invalidateRemoteMD: new requests and re-posts of old ones to the
 * forgotten agent get NIXL_ERR_NOT_FOUND */
START_TEST(t_invalidate)
{
    if (skip())
        return;
    nixlXferReqH *x = nullptr, *y = nullptr;
    ck_status(I.a->createXferReq(NIXL_WRITE, one((uintptr_t)I.buf, 4096), one(I.raddr, 4096),
                                 "T", x),
              NIXL_SUCCESS);
    nixl_status_t s = wait_xfer(x, I.a->postXferReq(x), 10000);
    ck_assert_msg(s == NIXL_SUCCESS, "%s", st(s));
    ck_status(I.a->invalidateRemoteMD("T"), NIXL_SUCCESS);
    ck_status(I.a->invalidateRemoteMD("T"), NIXL_ERR_NOT_FOUND);
    ck_status(I.a->createXferReq(NIXL_WRITE, one((uintptr_t)I.buf, 4096), one(I.raddr, 4096),
                                 "T", y),
              NIXL_ERR_NOT_FOUND);
    ck_assert(y == nullptr);
    ck_status(I.a->postXferReq(x), NIXL_ERR_NOT_FOUND);
    nixlDlistH *rh = nullptr;
    ck_status(I.a->prepXferDlist("T", one(I.raddr, 4096), rh), NIXL_ERR_NOT_FOUND);
    ck_status(I.a->checkRemoteMD("T", one(I.raddr, 4096)), NIXL_ERR_NOT_FOUND);
    ck_status(I.a->releaseXferReq(x), NIXL_SUCCESS);
    /* loaded again, it works again */
    std::string name;
    ck_status(I.a->loadRemoteMD(I.tmd, name), NIXL_SUCCESS);
    fill(I.buf, 4096, 5);
    ck_status(I.a->createXferReq(NIXL_WRITE, one((uintptr_t)I.buf, 4096), one(I.raddr, 4096),
                                 "T", y),
              NIXL_SUCCESS);
    s = wait_xfer(y, I.a->postXferReq(y), 10000);
    ck_assert_msg(s == NIXL_SUCCESS, "%s", st(s));
    ck_str(ask("chk 0 4096 5"), "ok");
    ck_status(I.a->releaseXferReq(y), NIXL_SUCCESS);
}
END_TEST

/* the target killed while large WRITEs run: an error status (post or
 * getXferStatus) within 30 s, no hang, no crash */
START_TEST(t_peer_killed)
{
    if (skip())
        return;
    nixlXferReqH *x = nullptr;
    ck_status(I.a->createXferReq(NIXL_WRITE, one((uintptr_t)I.buf, ILEN), one(I.raddr, ILEN),
                                 "T", x),
              NIXL_SUCCESS);
    nixl_status_t s = I.a->postXferReq(x);
    ck_assert_msg(s == NIXL_SUCCESS || s == NIXL_IN_PROG, "%s", st(s));
    kill(I.pid, SIGKILL);
    int status;
    waitpid(I.pid, &status, 0);
    I.pid = 0;
    close(I.fd);
    uint64_t end = now_ms() + 30000;
    int posts = 1;
    while (s >= 0 && now_ms() < end) {
        if (s == NIXL_IN_PROG)
            s = I.a->getXferStatus(x);
        else {
            s = I.a->postXferReq(x);
            posts++;
        }
    }
    ck_assert_msg(s < 0, "no error %d s after the peer was killed (%d posts): %s", 30, posts,
                  st(s));
    printf("%s: peer killed: %s after %d posts\n", I.c->label, st(s), posts);
    I.a->releaseXferReq(x);
}
END_TEST

/* bad input: NIXL's status, no crash */
START_TEST(t_bad_input)
{
    if (skip())
        return;
    nixlBackendH *b = nullptr;
    nixl_mem_list_t mems;
    nixl_b_params_t params;
    ck_status(I.a->createBackend("NO_SUCH_BACKEND", {}, b), NIXL_ERR_NOT_FOUND);
    ck_status(I.a->getPluginParams("NO_SUCH_BACKEND", mems, params), NIXL_ERR_NOT_FOUND);
    ck_status(I.a->createBackend(I.c->backend, I.c->params, b), NIXL_ERR_INVALID_PARAM);
    ck_status(I.a->getBackendParams(nullptr, mems, params), NIXL_ERR_INVALID_PARAM);

    nixlXferReqH *x = nullptr;
    /* unknown agent */
    ck_status(I.a->createXferReq(NIXL_WRITE, one((uintptr_t)I.buf, 64), one(I.raddr, 64),
                                 "nobody", x),
              NIXL_ERR_NOT_FOUND);
    nixlDlistH *h = nullptr;
    ck_status(I.a->prepXferDlist("nobody", one(I.raddr, 64), h), NIXL_ERR_NOT_FOUND);
    ck_status(I.a->genNotif("nobody", "x"), NIXL_ERR_NOT_FOUND);
    /* unregistered memory, either side */
    static unsigned char loose[4096];
    ck_status(I.a->createXferReq(NIXL_WRITE, one((uintptr_t)loose, 64), one(I.raddr, 64), "T",
                                 x),
              NIXL_ERR_NOT_FOUND);
    ck_status(I.a->createXferReq(NIXL_WRITE, one((uintptr_t)I.buf, 64),
                                 one(I.raddr + TLEN - 32, 64), "T", x),
              NIXL_ERR_NOT_FOUND);
    /* mismatched lengths and counts */
    ck_status(I.a->createXferReq(NIXL_WRITE, one((uintptr_t)I.buf, 64), one(I.raddr, 65), "T",
                                 x),
              NIXL_ERR_INVALID_PARAM);
    ck_status(I.a->createXferReq(NIXL_WRITE, one((uintptr_t)I.buf, 64), nixl_xfer_dlist_t(DRAM_SEG),
                                 "T", x),
              NIXL_ERR_INVALID_PARAM);
    ck_assert(x == nullptr);
    /* null handles */
    ck_status(I.a->postXferReq(nullptr), NIXL_ERR_INVALID_PARAM);
    nixlDlistH *lh = nullptr, *rh = nullptr;
    ck_status(I.a->makeXferReq(NIXL_WRITE, nullptr, {0}, nullptr, {0}, x), NIXL_ERR_INVALID_PARAM);
    ck_status(I.a->prepXferDlist(NIXL_INIT_AGENT, one((uintptr_t)I.buf, 64), lh), NIXL_SUCCESS);
    ck_status(I.a->prepXferDlist("T", one(I.raddr, 128), rh), NIXL_SUCCESS);
    /* local side as remote, count of indices, index out of range, lengths */
    ck_status(I.a->makeXferReq(NIXL_WRITE, rh, {0}, lh, {0}, x), NIXL_ERR_INVALID_PARAM);
    ck_status(I.a->makeXferReq(NIXL_WRITE, lh, {0}, rh, {0, 0}, x), NIXL_ERR_INVALID_PARAM);
    ck_status(I.a->makeXferReq(NIXL_WRITE, lh, {1}, rh, {0}, x), NIXL_ERR_INVALID_PARAM);
    ck_status(I.a->makeXferReq(NIXL_WRITE, lh, {0}, rh, {0}, x), NIXL_ERR_INVALID_PARAM);
    ck_assert(x == nullptr);
    ck_status(I.a->releasedDlistH(lh), NIXL_SUCCESS);
    ck_status(I.a->releasedDlistH(rh), NIXL_SUCCESS);
    /* metadata that is not */
    std::string name;
    ck_status(I.a->loadRemoteMD("not metadata at all", name), NIXL_ERR_MISMATCH);
    ck_status(I.a->loadRemoteMD("", name), NIXL_ERR_MISMATCH);
    ck_status(I.a->invalidateRemoteMD("nobody"), NIXL_ERR_NOT_FOUND);
    /* a memory kind no backend of this agent takes */
    ck_status(I.a->registerMem(reg1(1, 64, OBJ_SEG)), NIXL_ERR_NOT_FOUND);
    /* the agent still works */
    fill(I.buf, 64, 9);
    ck_status(I.a->createXferReq(NIXL_WRITE, one((uintptr_t)I.buf, 64), one(I.raddr, 64), "T", x),
              NIXL_SUCCESS);
    nixl_status_t s = wait_xfer(x, I.a->postXferReq(x), 10000);
    ck_assert_msg(s == NIXL_SUCCESS, "%s", st(s));
    ck_str(ask("chk 0 64 9"), "ok");
    ck_status(I.a->releaseXferReq(x), NIXL_SUCCESS);
    /* NIXL refuses to invalidate the agent itself: an invalid parameter */
    ck_status(I.a->invalidateRemoteMD("I"), NIXL_ERR_INVALID_PARAM);
}
END_TEST

/* nixl_nxl.h: a completion callback per post, exactly once, driven by a
 * loop of the program's own on nixlNxlLoopFd() */
struct cb_rec {
    std::atomic<int> n{0};
    nixl_status_t last = NIXL_IN_PROG;
    nixlXferReqH *req = nullptr;
};

void on_done(nixlXferReqH *req, nixl_status_t s, void *arg)
{
    cb_rec *r = (cb_rec *)arg;
    r->req = req;
    r->last = s;
    r->n++;
}

/* turns of I's agent in a poll() on its loop fd until r->n >= n or ms */
void run_until(cb_rec *r, int n, int ms)
{
    int fd = nixlNxlLoopFd(*I.a);
    ck_assert_msg(fd >= 0, "no loop fd without a progress thread");
    uint64_t end = now_ms() + (uint64_t)ms;
    while (r->n < n && now_ms() < end) {
        int t = nixlNxlLoopTimeout(*I.a);
        struct pollfd pf = {fd, POLLIN, 0};
        poll(&pf, 1, t < 0 || t > 10 ? 10 : t);
        ck_status(nixlNxlRunOnce(*I.a, 0), NIXL_SUCCESS);
    }
}

START_TEST(t_callback)
{
    if (skip())
        return;
    cb_rec r;
    nixlXferReqH *x = nullptr;
    ck_status(I.a->createXferReq(NIXL_WRITE, one((uintptr_t)I.buf, 1 << 20),
                                 one(I.raddr, 1 << 20), "T", x),
              NIXL_SUCCESS);
    ck_status(nixlNxlSetXferCallback(*I.a, x, on_done, &r), NIXL_SUCCESS);
    for (int pass = 1; pass <= 3; pass++) {
        fill(I.buf, 1 << 20, 60 + pass);
        nixl_status_t s = I.a->postXferReq(x);
        ck_assert_msg(s == NIXL_SUCCESS || s == NIXL_IN_PROG, "post %d: %s", pass, st(s));
        run_until(&r, pass, 10000);
        ck_assert_msg(r.n == pass, "pass %d: %d callbacks", pass, r.n.load());
        ck_assert_msg(r.last == NIXL_SUCCESS, "pass %d: %s", pass, st(r.last));
        ck_assert(r.req == x);
        ck_status(I.a->getXferStatus(x), NIXL_SUCCESS);
        char c[96];
        snprintf(c, sizeof(c), "chk 0 %u %d", 1u << 20, 60 + pass);
        ck_str(ask(c), "ok");
        /* no second call for the same post */
        uint64_t end = now_ms() + 100;
        while (now_ms() < end) {
            ck_status(nixlNxlRunOnce(*I.a, 5), NIXL_SUCCESS);
            I.a->getXferStatus(x);
        }
        ck_assert_int_eq(r.n, pass);
    }
    /* removed: the next post completes without a call */
    ck_status(nixlNxlSetXferCallback(*I.a, x, nullptr, nullptr), NIXL_SUCCESS);
    nixl_status_t s = wait_xfer(x, I.a->postXferReq(x), 10000);
    ck_assert_msg(s == NIXL_SUCCESS, "%s", st(s));
    ck_assert_int_eq(r.n, 3);
    ck_assert(nixlNxlAgent(*I.a) != nullptr);
    ck_status(nixlNxlSetXferCallback(*I.a, nullptr, on_done, &r), NIXL_ERR_INVALID_PARAM);
    ck_status(I.a->releaseXferReq(x), NIXL_SUCCESS);
}
END_TEST

/* a second initiator "J" with NIXL's progress thread (useProgThread, as
 * NIXL's examples ask): transfers complete polled by getXferStatus alone,
 * and a nixl_nxl.h callback fires once per post (on the agent's thread) */
START_TEST(t_prog_thread)
{
    if (skip())
        return;
    nixlAgentConfig cfg(true);
    nixlAgent j("J", cfg);
    nixlBackendH *b = nullptr;
    ck_status(j.createBackend(I.c->backend, I.c->params, b), NIXL_SUCCESS);
    std::vector<unsigned char> buf(256 * 1024);
    ck_status(j.registerMem(reg1((uintptr_t)buf.data(), buf.size())), NIXL_SUCCESS);
    std::string name, md;
    ck_status(j.loadRemoteMD(I.tmd, name), NIXL_SUCCESS);
    ck_status(j.getLocalMD(md), NIXL_SUCCESS);
    ck_str(send_md(md), "NIXL_SUCCESS J");
    cb_rec r;
    nixlXferReqH *x = nullptr;
    nixl_opt_args_t o;
    o.notif = std::string("from-j");
    ck_status(j.createXferReq(NIXL_WRITE, one((uintptr_t)buf.data(), buf.size()),
                              one(I.raddr + 8192, buf.size()), "T", x, &o),
              NIXL_SUCCESS);
    ck_status(nixlNxlSetXferCallback(j, x, on_done, &r), NIXL_SUCCESS);
    for (int pass = 1; pass <= 2; pass++) {
        fill(buf.data(), buf.size(), 80 + pass);
        nixl_status_t s = j.postXferReq(x);
        uint64_t end = now_ms() + 10000;
        while (s == NIXL_IN_PROG && now_ms() < end)
            s = j.getXferStatus(x);
        ck_assert_msg(s == NIXL_SUCCESS, "pass %d: %s", pass, st(s));
        char c[96];
        snprintf(c, sizeof(c), "chk 8192 %zu %d", buf.size(), 80 + pass);
        ck_str(ask(c), "ok");
        end = now_ms() + 5000;
        while (r.n < pass && now_ms() < end)
            usleep(1000);
        usleep(50000);
        ck_assert_int_eq(r.n, pass);
        ck_assert_msg(r.last == NIXL_SUCCESS, "%s", st(r.last));
    }
    ck_str(ask_until("cnt J from-j", "2", 5000), "2");
    ck_status(j.releaseXferReq(x), NIXL_SUCCESS);
}
END_TEST

/* ---------------------------------------------------------- POSIX files */

START_TEST(t_posix_file)
{
    if (!posix_missing.empty()) {
        printf("SKIP: posix: %s\n", posix_missing.c_str());
        return;
    }
    char path[] = "/tmp/nxl-nixl-posix-XXXXXX";
    int fd = mkstemp(path);
    ck_assert(fd >= 0);
    unlink(path);
    const size_t len = 1 << 20;
    ck_assert(ftruncate(fd, (off_t)len) == 0);
    nixlAgent a("P", nixlAgentConfig(false));
    nixlBackendH *b = nullptr;
    ck_status(a.createBackend("POSIX", {}, b), NIXL_SUCCESS);
    unsigned char *buf = (unsigned char *)malloc(2 * len);
    fill(buf, len, 31);
    memset(buf + len, 0, len);
    ck_status(a.registerMem(reg1((uintptr_t)buf, 2 * len)), NIXL_SUCCESS);
    ck_status(a.registerMem(reg1(0, len, FILE_SEG, (uint64_t)fd)), NIXL_SUCCESS);
    /* WRITE: memory to the file at offset 4096 */
    nixlXferReqH *x = nullptr;
    ck_status(a.createXferReq(NIXL_WRITE, one((uintptr_t)buf, 65536),
                              one(4096, 65536, FILE_SEG, (uint64_t)fd), "P", x),
              NIXL_SUCCESS);
    nixl_status_t s = a.postXferReq(x);
    uint64_t end = now_ms() + 10000;
    while (s == NIXL_IN_PROG && now_ms() < end)
        s = a.getXferStatus(x);
    ck_assert_msg(s == NIXL_SUCCESS, "%s", st(s));
    std::vector<unsigned char> got(65536);
    ck_assert(pread(fd, got.data(), got.size(), 4096) == (ssize_t)got.size());
    ck_assert(check(got.data(), got.size(), 31) < 0);
    ck_status(a.releaseXferReq(x), NIXL_SUCCESS);
    /* READ it back into the second half */
    ck_status(a.createXferReq(NIXL_READ, one((uintptr_t)buf + len, 65536),
                              one(4096, 65536, FILE_SEG, (uint64_t)fd), "P", x),
              NIXL_SUCCESS);
    s = a.postXferReq(x);
    end = now_ms() + 10000;
    while (s == NIXL_IN_PROG && now_ms() < end)
        s = a.getXferStatus(x);
    ck_assert_msg(s == NIXL_SUCCESS, "%s", st(s));
    ck_assert(check(buf + len, 65536, 31) < 0);
    ck_status(a.releaseXferReq(x), NIXL_SUCCESS);
    ck_status(a.deregisterMem(reg1(0, len, FILE_SEG, (uint64_t)fd)), NIXL_SUCCESS);
    ck_status(a.deregisterMem(reg1((uintptr_t)buf, 2 * len)), NIXL_SUCCESS);
    free(buf);
    close(fd);
}
END_TEST

/* --------------------------------------------------- the probes, the suite */

std::string probe(const char *backend, const nixl_b_params_t &params)
{
    nixlAgent a("probe", nixlAgentConfig(false));
    nixlBackendH *b = nullptr;
    nixl_status_t s = a.createBackend(backend, params, b);
    if (s == NIXL_SUCCESS)
        return "";
    return std::string(backend) + " cannot be created here: " + st(s);
}

void (*const setups[])(void) = {setup_i<0>, setup_i<1>, setup_i<2>};
static_assert(sizeof(setups) / sizeof(setups[0]) == NCONFS, "one setup_i per configuration");

} // namespace

int main()
{
    int have = 0;
    for (int i = 0; i < NCONFS; i++) {
        missing[i] = probe(confs[i].backend, confs[i].params);
        have += missing[i].empty();
        if (!missing[i].empty())
            printf("SKIP: %s: %s\n", confs[i].label, missing[i].c_str());
    }
    posix_missing = probe("POSIX", {});
    have += posix_missing.empty();
    if (!have) {
        printf("SKIP: no backend can be created here\n");
        return 77;
    }
    Suite *s = suite_create("nixl_api");
    for (int i = 0; i < NCONFS; i++) {
        TCase *tc = tcase_create(confs[i].label);
        tcase_set_timeout(tc, 120);
        tcase_add_checked_fixture(tc, setups[i], teardown);
        tcase_add_test(tc, t_write_prepped);
        tcase_add_test(tc, t_read_one_call);
        tcase_add_test(tc, t_repost_large);
        tcase_add_test(tc, t_notifs);
        tcase_add_test(tc, t_md_socket);
        tcase_add_test(tc, t_invalidate);
        tcase_add_test(tc, t_callback);
        tcase_add_test(tc, t_prog_thread);
        tcase_add_test(tc, t_peer_killed);
        if (i == 0)
            tcase_add_test(tc, t_bad_input);
        suite_add_tcase(s, tc);
    }
    TCase *tc = tcase_create("posix");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, t_posix_file);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int nf = srunner_ntests_failed(r);
    srunner_free(r);
    return nf ? 1 : 0;
}
