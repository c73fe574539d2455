/* SPDX-License-Identifier: BSD-3-Clause */
/* The LIBFABRIC transport's own manners, in one process (its two-process
 * behaviours are in check_xfer's conformance suite, its hosts in
 * check_netns): what nxl_plugins_available() says, parameters refused with
 * a sentence, a creation that finds no provider listing what libfabric has
 * and which hint to relax, the info line naming provider, fabric, domain
 * and progress mode, VRAM refused, loopback transfers and notifications
 * within one agent, two agents of one process over tcp;ofi_rxm and shm,
 * nothing on standard output, an idle agent that sleeps, shm's doorbell
 * waking an idle target, and rails over loopback (t_rails_lo: two agents
 * with rails=lo,lo stripe their transfers, and reach an agent without
 * rails over the main path). */
#define _GNU_SOURCE
#include "testlib.h"
#include "b64.h"
#include "transports/libfabric/wire.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

static char logbuf[1 << 15];
static size_t loglen;

static char warnbuf[1 << 13]; /* the lines at WARN and ERROR */
static size_t warnlen;

static void log_cb(nxl_log_level_t lvl, const char *msg, void *arg)
{
    int n = snprintf(logbuf + loglen, sizeof(logbuf) - loglen, "%s\n", msg);
    if (n > 0 && loglen + (size_t)n < sizeof(logbuf))
        loglen += (size_t)n;
    n = lvl <= NXL_LOG_WARN ? snprintf(warnbuf + warnlen, sizeof(warnbuf) - warnlen, "%s\n", msg)
                            : 0;
    if (n > 0 && warnlen + (size_t)n < sizeof(warnbuf))
        warnlen += (size_t)n;
}

static nxl_agent_t *agent(const char *name)
{
    return tl_agent_log(name, NXL_LOG_INFO, log_cb);
}

static nxl_status_t lf(nxl_agent_t *a, const char *k1, const char *v1, const char *k2,
                       const char *v2)
{
    nxl_param_t p[2] = {{k1, v1}, {k2, v2}};
    return nxl_backend_create(a, "LIBFABRIC", p, k2 ? 2 : k1 ? 1 : 0, NULL);
}

/* Agents *a and *b with the transport over provider prov: 1; or, when a
 * cannot have it, 0 with both destroyed and a skip printed for test (a
 * failure when must). */
static int lf_pair(const char *test, const char *prov, int must, nxl_agent_t **a,
                   nxl_agent_t **b)
{
    *a = agent("a");
    *b = agent("b");
    if (lf(*a, "provider", prov, NULL, NULL) != NXL_SUCCESS) {
        ck_assert_msg(!must, "%s", nxl_agent_last_error(*a));
        printf("SKIP: %s: %s: %s\n", test, prov, nxl_agent_last_error(*a));
        nxl_agent_destroy(*a);
        nxl_agent_destroy(*b);
        return 0;
    }
    ck_assert_int_eq(lf(*b, "provider", prov, NULL, NULL), NXL_SUCCESS);
    return 1;
}

/* the end of a test of agents a and b: both go, with their buffers */
static void pair_end(nxl_agent_t *a, nxl_agent_t *b, void *pa, void *pb)
{
    nxl_agent_destroy(a);
    nxl_agent_destroy(b);
    free(pa);
    free(pb);
}

START_TEST(t_plugin_info)
{
    nxl_plugin_info_t p[8];
    const nxl_plugin_info_t *pi = tl_plugin("LIBFABRIC", p, 8);
    ck_assert_msg(pi != NULL, "LIBFABRIC not listed");
    ck_assert(pi->available);
    ck_assert_uint_eq(pi->mem_mask, 1u << NXL_DRAM);
    ck_assert_msg(strstr(pi->reason, "libfabric") && strstr(pi->reason, "VRAM"), "reason '%s'",
                  pi->reason);
}
END_TEST

START_TEST(t_bad_params)
{
    nxl_agent_t *a = agent("a");
    ck_assert_int_eq(lf(a, "nope", "1", NULL, NULL), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(a), "LIBFABRIC");
    ck_assert_int_eq(lf(a, "stall_timeout", "soon", NULL, NULL), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(a), "stall_timeout");
    ck_assert_int_eq(lf(a, "progress", "sometimes", NULL, NULL), NXL_ERR_INVALID_PARAM);
    ck_assert_int_eq(lf(a, "delivery_complete", "maybe", NULL, NULL), NXL_ERR_INVALID_PARAM);
    ck_assert_int_eq(lf(a, "poll_max", "0", NULL, NULL), NXL_ERR_INVALID_PARAM);
    ck_assert_int_eq(lf(a, "am_write_max", "lots", NULL, NULL), NXL_ERR_INVALID_PARAM);
    ck_assert_int_eq(lf(a, "am_write_max", "99999", NULL, NULL), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(a), "am_write_max");
    /* no provider of that name: the sentence lists what libfabric has and what to relax */
    ck_assert_int_eq(lf(a, "provider", "verbs", NULL, NULL), NXL_ERR_BACKEND);
    const char *e = nxl_agent_last_error(a);
    ck_sentence(e, "fi_getinfo");
    ck_assert_msg(strstr(e, "tcp;ofi_rxm") && strstr(e, "relax"), "'%s'", e);
    ck_assert_int_eq(lf(a, "iface", "nxl-no-such-if", NULL, NULL), NXL_ERR_BACKEND);
    ck_assert_msg(strstr(nxl_agent_last_error(a), "iface"), "'%s'", nxl_agent_last_error(a));
    /* nothing was created by the failures */
    ck_assert_ptr_null(nxl_backend_get(a, "LIBFABRIC"));
    nxl_agent_destroy(a);
}
END_TEST

START_TEST(t_info_line)
{
    static const struct {
        const char *prov, *progress;
    } want[] = {{"tcp;ofi_rxm", "wait fd"}, {"shm", "timer"}, {"sockets", "wait fd"}};
    for (size_t i = 0; i < 3; i++) {
        loglen = 0;
        logbuf[0] = 0;
        nxl_agent_t *a = agent("a");
        nxl_status_t st = lf(a, "provider", want[i].prov, NULL, NULL);
        if (st != NXL_SUCCESS && i > 0) {
            printf("SKIP: info_line: provider %s: %s\n", want[i].prov, nxl_agent_last_error(a));
            nxl_agent_destroy(a);
            continue;
        }
        ck_assert_msg(st == NXL_SUCCESS, "%s", nxl_agent_last_error(a));
        ck_assert_msg(strstr(logbuf, "provider ") && strstr(logbuf, want[i].prov) &&
                          strstr(logbuf, "fabric ") && strstr(logbuf, "domain ") &&
                          strstr(logbuf, want[i].progress),
                      "log: %s", logbuf);
        /* VRAM is refused with a sentence */
        char dummy[64];
        nxl_desc_t d = {.addr = (uintptr_t)dummy, .len = sizeof(dummy)};
        ck_assert_int_eq(nxl_mem_register(a, NXL_VRAM, &d, 1, nxl_backend_get(a, "LIBFABRIC")),
                         NXL_ERR_NOT_SUPPORTED);
        nxl_agent_destroy(a);
    }
}
END_TEST

static int ndone, nnotif;
static nxl_status_t last_st;
static char last_msg[64], last_from[64];

static void done_cb(nxl_future_t *f, nxl_status_t st, void *arg)
{
    ndone++;
    last_st = st;
}

static void notif_cb(nxl_agent_t *a, const char *from, const void *msg, size_t len, void *arg)
{
    nnotif++;
    snprintf(last_msg, sizeof(last_msg), "%.*s", (int)len, (const char *)msg);
    snprintf(last_from, sizeof(last_from), "%s", from);
}

/* within one agent: the agent's own name as the remote */
/* shm's region of a process killed with SIGKILL stays in /dev/shm under
 * its pid's name; a later process given the same pid (pids wrap around)
 * could not start its shm endpoint. Regions named with this process's pid
 * are left there first: the backend starts anyway, removes the one in its
 * way and says so. */
START_TEST(t_shm_stale_region)
{
    char path[8][64];
    int made = 0;
    for (int d = 0; d < 2; d++)
        for (int e = 0; e < 4; e++) {
            char *p = path[made];
            snprintf(p, 64, "/dev/shm/%ld:%d:%d", (long)getpid(), d, e);
            int fd = open(p, O_CREAT | O_EXCL | O_WRONLY, 0600);
            if (fd < 0)
                continue; /* a real one of this pid's: not ours to touch */
            ck_assert_int_eq(write(fd, "stale", 5), 5);
            close(fd);
            made++;
        }
    ck_assert_int_gt(made, 0);
    loglen = 0;
    logbuf[0] = 0;
    nxl_agent_t *a = agent("stale");
    nxl_status_t st = lf(a, "provider", "shm", NULL, NULL);
    ck_assert_msg(st == NXL_SUCCESS, "%s", nxl_agent_last_error(a));
    ck_assert_msg(strstr(logbuf, "removed /dev/shm/"), "log: %s", logbuf);
    nxl_agent_destroy(a);
    for (int i = 0; i < made; i++)
        unlink(path[i]);
}
END_TEST

START_TEST(t_loopback)
{
    nxl_agent_t *a = agent("self");
    ck_assert_int_eq(lf(a, NULL, NULL, NULL, NULL), NXL_SUCCESS);
    size_t len = 4 << 20;
    unsigned char *buf = malloc(len);
    nxl_desc_t d = {.addr = (uintptr_t)buf, .len = len};
    ck_assert_int_eq(nxl_mem_register(a, NXL_DRAM, &d, 1, NULL), NXL_SUCCESS);
    nxl_agent_on_notif(a, notif_cb, NULL);
    tl_fill(buf, len / 2, 7);
    nxl_xfer_t *x;
    ck_assert_int_eq(
        tl_xfer1(a, NXL_WRITE, (uintptr_t)buf, (uintptr_t)buf + len / 2, len / 2, "self", "here",
                 &x),
        NXL_SUCCESS);
    ck_assert_str_eq(nxl_backend_name(nxl_xfer_backend(x)), "LIBFABRIC");
    ndone = nnotif = 0;
    ck_assert_int_eq(nxl_xfer_post(x, done_cb, NULL, NULL), NXL_SUCCESS);
    ck_assert_int_eq(ndone, 0);
    ck_assert(tl_run_until(a, &nnotif, 1, 5000));
    ck_assert(tl_run_until(a, &ndone, 1, 5000));
    ck_assert_int_eq(last_st, NXL_SUCCESS);
    ck_assert_str_eq(last_msg, "here");
    ck_assert_str_eq(last_from, "self");
    ck_assert(tl_check(buf + len / 2, len / 2, 7) < 0);
    ck_assert_int_eq(nxl_notif_send(a, "self", "solo", 4, done_cb, NULL, NULL), NXL_SUCCESS);
    ck_assert(tl_run_until(a, &nnotif, 2, 5000));
    ck_assert_str_eq(last_msg, "solo");
    nxl_xfer_release(x);
    nxl_agent_destroy(a);
    free(buf);
}
END_TEST

static int run_pair_until(nxl_agent_t *a, nxl_agent_t *b, int *counter, int target, int ms)
{
    return tl_run2_until(a, b, counter, target, ms, 1);
}

/* two agents of one process, each its own endpoint: WRITE, READ and a
 * notification after the data, over each provider */
START_TEST(t_two_agents)
{
    static const char *const provs[] = {"tcp;ofi_rxm", "shm"};
    for (size_t k = 0; k < 2; k++) {
        nxl_agent_t *a, *b;
        if (!lf_pair("two_agents", provs[k], k == 0, &a, &b))
            continue;
        size_t len = 1 << 20;
        unsigned char *pa = malloc(len), *pb = calloc(1, len);
        nxl_desc_t da = {.addr = (uintptr_t)pa, .len = len}, db = {.addr = (uintptr_t)pb, .len = len};
        ck_assert_int_eq(nxl_mem_register(a, NXL_DRAM, &da, 1, NULL), NXL_SUCCESS);
        ck_assert_int_eq(nxl_mem_register(b, NXL_DRAM, &db, 1, NULL), NXL_SUCCESS);
        tl_learn(a, b);
        tl_learn(b, a);
        nxl_agent_on_notif(b, notif_cb, NULL);
        tl_fill(pa, len, 11 + (unsigned)k);
        nxl_dlist_t la = {NXL_DRAM, &da, 1}, lb = {NXL_DRAM, &db, 1};
        nxl_xfer_opts_t o;
        nxl_xfer_opts_init(&o);
        o.notif = "data";
        o.notif_len = 4;
        nxl_xfer_t *w, *r;
        ck_assert_int_eq(nxl_xfer_create(a, NXL_WRITE, &la, &lb, "b", &o, &w), NXL_SUCCESS);
        ndone = nnotif = 0;
        ck_assert_int_eq(nxl_xfer_post(w, done_cb, NULL, NULL), NXL_SUCCESS);
        ck_assert(run_pair_until(a, b, &nnotif, 1, 10000));
        ck_assert_msg(tl_check(pb, len, 11 + (unsigned)k) < 0, "data not there at the notification");
        ck_assert_str_eq(last_from, "a");
        ck_assert(run_pair_until(a, b, &ndone, 1, 10000));
        ck_assert_int_eq(last_st, NXL_SUCCESS);
        memset(pa, 0, len);
        ck_assert_int_eq(nxl_xfer_create(a, NXL_READ, &la, &lb, "b", NULL, &r), NXL_SUCCESS);
        ck_assert_int_eq(nxl_xfer_post(r, done_cb, NULL, NULL), NXL_SUCCESS);
        ck_assert(run_pair_until(a, b, &ndone, 2, 10000));
        ck_assert_int_eq(last_st, NXL_SUCCESS);
        ck_assert(tl_check(pa, len, 11 + (unsigned)k) < 0);
        nxl_xfer_release(w);
        nxl_xfer_release(r);
        pair_end(a, b, pa, pb);
    }
}
END_TEST

/* A peer's connection info whose endpoint name is shorter than an address
 * of the provider's format is refused before fi_av_insert(), which takes
 * the address without a length and read past the name (tcp: a 4-byte name
 * for a 16-byte sockaddr_in; shm: an address string without its NUL). The
 * agent keeps working: the real metadata loads afterwards. */
START_TEST(t_short_names)
{
    static const char *const provs[] = {"tcp;ofi_rxm", "shm"};
    for (size_t k = 0; k < 2; k++) {
        nxl_agent_t *a, *b;
        if (!lf_pair("short_names", provs[k], k == 0, &a, &b))
            continue;
        void *blob;
        size_t len;
        ck_assert_int_eq(nxl_md_local(a, &blob, &len), NXL_SUCCESS);
        const char *c = strstr(blob, "\"LIBFABRIC\":\"");
        ck_assert_ptr_nonnull(c);
        c += 13;
        size_t il;
        unsigned char *info = tb64_decode(c, (size_t)(strchr(c, '"') - c), &il);
        lf_ci_t ci;
        ck_assert_ptr_null(lf_ci_parse(info, il, &ci));
        /* what the provider's address needs, cut: tcp's to 4 bytes, shm's
         * string to its characters without the NUL */
        const unsigned char *nul = memchr(ci.name, 0, ci.name_len);
        size_t cut = k == 0 ? 4 : nul ? (size_t)(nul - ci.name) : ci.name_len - 1;
        ck_assert_uint_lt(cut, ci.name_len);
        size_t ol = lf_ci_size(ci.prov, cut, ci.bell_len);
        unsigned char *out = malloc(ol);
        lf_ci_pack(out, ci.af, ci.prov, ci.name, cut, ci.flags, ci.bell, ci.bell_len);
        char *enc = tb64_encode(out, ol);
        char *bad;
        ck_assert_int_ne(asprintf(&bad, "{\"nxl\":1,\"agent\":\"a\",\"conn\":{\"LIBFABRIC\":\"%s\"},"
                                        "\"regions\":[]}", enc), -1);
        nxl_status_t st = nxl_md_load(b, bad, strlen(bad), NULL, 0);
        ck_assert_msg(st == NXL_ERR_MISMATCH, "%s: a name of %zu of %u bytes: %s (%s)",
                      provs[k], cut, ci.name_len, nxl_status_name(st), nxl_agent_last_error(b));
        ck_sentence(nxl_agent_last_error(b), "LIBFABRIC");
        ck_assert_int_eq(nxl_md_check(b, "a"), NXL_ERR_NOT_FOUND);
        tl_learn(b, a); /* the real one loads */
        ck_assert_int_eq(nxl_md_check(b, "a"), NXL_SUCCESS);
        free(bad);
        free(enc);
        free(out);
        free(info);
        nxl_free(blob);
        nxl_agent_destroy(b);
        nxl_agent_destroy(a);
    }
}
END_TEST

/* A small WRITE with a notification travels as one message, copied into
 * place by the target after it checked the elements against its own
 * registrations: into a region deregistered since the initiator learnt it,
 * nothing is written, the notification is dropped with it, and the target
 * says so in its log; a region still registered takes the next one. */
START_TEST(t_one_message_write_checked)
{
    nxl_agent_t *a = agent("a"), *b = agent("b");
    ck_assert_int_eq(lf(a, "provider", "tcp;ofi_rxm", "am_write_max", "8192"), NXL_SUCCESS);
    ck_assert_int_eq(lf(b, "provider", "tcp;ofi_rxm", "am_write_max", "8192"), NXL_SUCCESS);
    size_t len = 8192;
    unsigned char *pa = malloc(len), *pb = calloc(1, 2 * len);
    nxl_desc_t da = {.addr = (uintptr_t)pa, .len = len};
    nxl_desc_t db[2] = {{.addr = (uintptr_t)pb, .len = len},
                        {.addr = (uintptr_t)pb + len, .len = len}};
    ck_assert_int_eq(nxl_mem_register(a, NXL_DRAM, &da, 1, NULL), NXL_SUCCESS);
    ck_assert_int_eq(nxl_mem_register(b, NXL_DRAM, db, 2, NULL), NXL_SUCCESS);
    tl_learn(a, b);
    tl_learn(b, a);
    nxl_agent_on_notif(b, notif_cb, NULL);
    ck_assert_int_eq(nxl_mem_deregister(b, NXL_DRAM, &db[0], 1), NXL_SUCCESS);
    tl_fill(pa, len, 3);
    nxl_dlist_t la = {NXL_DRAM, &da, 1}, l0 = {NXL_DRAM, &db[0], 1}, l1 = {NXL_DRAM, &db[1], 1};
    nxl_xfer_opts_t o;
    nxl_xfer_opts_init(&o);
    o.notif = "gone";
    o.notif_len = 4;
    nxl_xfer_t *w0, *w1;
    ck_assert_int_eq(nxl_xfer_create(a, NXL_WRITE, &la, &l0, "b", &o, &w0), NXL_SUCCESS);
    loglen = 0;
    logbuf[0] = 0;
    ndone = nnotif = 0;
    ck_assert_int_eq(nxl_xfer_post(w0, done_cb, NULL, NULL), NXL_SUCCESS);
    ck_assert(run_pair_until(a, b, &ndone, 1, 10000));
    /* its send completed: that is all the initiator learns (nxl-libfabric(7), GUARANTEES) */
    ck_assert_int_eq(last_st, NXL_SUCCESS);
    uint64_t t0 = tl_now_ms();
    while (!strstr(logbuf, "was dropped") && tl_now_ms() - t0 < 5000) {
        nxl_agent_run_once(a, 1);
        nxl_agent_run_once(b, 1);
    }
    ck_assert_msg(strstr(logbuf, "was dropped") && strstr(logbuf, "outside every region"),
                  "log: %s", logbuf);
    ck_assert_int_eq(nnotif, 0);
    for (size_t i = 0; i < len; i++)
        ck_assert_msg(pb[i] == 0, "byte %zu of the deregistered region was written", i);
    o.notif = "kept";
    ck_assert_int_eq(nxl_xfer_create(a, NXL_WRITE, &la, &l1, "b", &o, &w1), NXL_SUCCESS);
    ck_assert_int_eq(nxl_xfer_post(w1, done_cb, NULL, NULL), NXL_SUCCESS);
    ck_assert(run_pair_until(a, b, &nnotif, 1, 10000));
    ck_assert_str_eq(last_msg, "kept");
    ck_assert(tl_check(pb + len, len, 3) < 0);
    ck_assert(run_pair_until(a, b, &ndone, 2, 10000));
    nxl_xfer_release(w0);
    nxl_xfer_release(w1);
    pair_end(a, b, pa, pb);
}
END_TEST

/* A region the target deregisters or frees is revoked at its peers: the
 * target's word comes ahead of the notification it sends next, and from
 * then on the initiator refuses transfers into it (NXL_ERR_NOT_FOUND, with
 * a sentence naming the region) and logs what it learnt; a region still
 * registered takes the next small WRITE + notification (one message), over
 * each provider. */
START_TEST(t_revoke)
{
    static const char *const provs[] = {"tcp;ofi_rxm", "shm"};
    for (size_t k = 0; k < 2; k++) {
        nxl_agent_t *a, *b;
        if (!lf_pair("revoke", provs[k], k == 0, &a, &b))
            continue;
        size_t len = 4096;
        unsigned char *pa = malloc(len), *pb = calloc(2, len);
        void *pf;
        nxl_desc_t da = {.addr = (uintptr_t)pa, .len = len};
        nxl_desc_t db[2] = {{.addr = (uintptr_t)pb, .len = len},
                            {.addr = (uintptr_t)pb + len, .len = len}};
        ck_assert_int_eq(nxl_mem_register(a, NXL_DRAM, &da, 1, NULL), NXL_SUCCESS);
        ck_assert_int_eq(nxl_mem_register(b, NXL_DRAM, db, 2, NULL), NXL_SUCCESS);
        ck_assert_int_eq(nxl_mem_alloc(b, NXL_DRAM, len, 0, &pf), NXL_SUCCESS);
        nxl_desc_t dfree = {.addr = (uintptr_t)pf, .len = len};
        tl_learn(a, b);
        tl_learn(b, a);
        nxl_agent_on_notif(a, notif_cb, NULL);
        nxl_agent_on_notif(b, notif_cb, NULL);
        nxl_dlist_t la = {NXL_DRAM, &da, 1}, l0 = {NXL_DRAM, &db[0], 1};
        nxl_dlist_t l1 = {NXL_DRAM, &db[1], 1}, lfree = {NXL_DRAM, &dfree, 1};
        nxl_xfer_opts_t o;
        nxl_xfer_opts_init(&o);
        o.notif = "w";
        o.notif_len = 1;
        nxl_xfer_t *w0;
        ck_assert_int_eq(nxl_xfer_create(a, NXL_WRITE, &la, &l0, "b", &o, &w0), NXL_SUCCESS);
        loglen = 0;
        logbuf[0] = 0;
        ck_assert_int_eq(nxl_mem_deregister(b, NXL_DRAM, &db[0], 1), NXL_SUCCESS);
        ck_assert_int_eq(nxl_mem_free(b, pf), NXL_SUCCESS);
        ndone = nnotif = 0;
        ck_assert_int_eq(nxl_notif_send(b, "a", "after", 5, NULL, NULL, NULL), NXL_SUCCESS);
        ck_assert(run_pair_until(a, b, &nnotif, 1, 10000));
        ck_assert_str_eq(last_msg, "after");
        ck_assert_msg(strstr(logbuf, "agent 'b' deregistered its DRAM region") &&
                          strstr(strstr(logbuf, "agent 'b' deregistered its DRAM region") + 1,
                                 "agent 'b' deregistered its DRAM region"),
                      "%s: log: %s", provs[k], logbuf);
        ck_assert_int_eq(nxl_xfer_post(w0, done_cb, NULL, NULL), NXL_ERR_NOT_FOUND);
        ck_sentence(nxl_agent_last_error(a), "deregistered");
        ck_assert_int_eq(ndone, 0);
        nxl_xfer_t *x = NULL;
        ck_assert_int_eq(nxl_xfer_create(a, NXL_WRITE, &la, &l0, "b", &o, &x), NXL_ERR_NOT_FOUND);
        ck_assert_int_eq(nxl_xfer_create(a, NXL_READ, &la, &lfree, "b", NULL, &x),
                         NXL_ERR_NOT_FOUND);
        ck_assert(x == NULL);
        tl_fill(pa, len, 21 + (unsigned)k);
        ck_assert_int_eq(nxl_xfer_create(a, NXL_WRITE, &la, &l1, "b", &o, &x), NXL_SUCCESS);
        ck_assert_int_eq(nxl_xfer_post(x, done_cb, NULL, NULL), NXL_SUCCESS);
        ck_assert(run_pair_until(a, b, &nnotif, 2, 10000));
        ck_assert_str_eq(last_msg, "w");
        ck_assert(tl_check(pb + len, len, 21 + (unsigned)k) < 0);
        ck_assert(run_pair_until(a, b, &ndone, 1, 10000));
        ck_assert_int_eq(last_st, NXL_SUCCESS);
        nxl_xfer_release(w0);
        nxl_xfer_release(x);
        pair_end(a, b, pa, pb);
    }
}
END_TEST

/* shm has no wait fd: an idle agent polls its CQ from a timer, backing off
 * to poll_max (here a minute). Its peers ring its doorbell when they post to
 * it, so a notification wakes it at once rather than at its next poll: the
 * target idles 2.1 s (its next poll then about 2 s away), the initiator
 * sends a notification while the target's loop does not run (200 ms of the
 * initiator's loop alone), then the target's loop must deliver it in well
 * under those 2 s (1 s here; it takes microseconds). A notification, not a
 * WRITE: between two endpoints of one process shm moves a write through
 * the target's queue, so it would not complete while the target sleeps. */
START_TEST(t_doorbell)
{
    nxl_agent_t *a = agent("a"), *b = agent("b");
    if (lf(a, "provider", "shm", "poll_max", "60s") != NXL_SUCCESS) {
        printf("SKIP: doorbell: shm: %s\n", nxl_agent_last_error(a));
        nxl_agent_destroy(a);
        nxl_agent_destroy(b);
        return;
    }
    ck_assert_int_eq(lf(b, "provider", "shm", "poll_max", "60s"), NXL_SUCCESS);
    ck_assert_msg(strstr(logbuf, "doorbell"), "log: %s", logbuf);
    tl_learn(a, b);
    tl_learn(b, a);
    nxl_agent_on_notif(b, notif_cb, NULL);
    /* first contact: shm connects a peer with a message of its own both ways */
    ndone = nnotif = 0;
    ck_assert_int_eq(nxl_notif_send(a, "b", "warm", 4, done_cb, NULL, NULL), NXL_SUCCESS);
    ck_assert(run_pair_until(a, b, &nnotif, 1, 5000));
    ck_assert(run_pair_until(a, b, &ndone, 1, 5000));
    uint64_t t0 = tl_now_ms();
    while (tl_now_ms() - t0 < 2100) {
        nxl_agent_run_once(a, 50);
        nxl_agent_run_once(b, 50);
    }
    ndone = nnotif = 0;
    ck_assert_int_eq(nxl_notif_send(a, "b", "ring", 4, done_cb, NULL, NULL), NXL_SUCCESS);
    t0 = tl_now_ms();
    while (tl_now_ms() - t0 < 200)
        nxl_agent_run_once(a, 5);
    ck_assert_int_eq(nnotif, 0);
    t0 = tl_now_ms();
    while (nnotif < 1 && tl_now_ms() - t0 < 5000)
        nxl_agent_run_once(b, 5000);
    uint64_t took = tl_now_ms() - t0;
    ck_assert_int_eq(nnotif, 1);
    ck_assert_msg(took < 1000, "the notification took %llu ms to wake the idle target",
                  (unsigned long long)took);
    ck_assert_str_eq(last_msg, "ring");
    ck_assert(run_pair_until(a, b, &ndone, 1, 5000));
    ck_assert_int_eq(last_st, NXL_SUCCESS);
    nxl_agent_destroy(a);
    nxl_agent_destroy(b);
}
END_TEST

/* A peer that closes in order (destroyed after its work) is no failure:
 * this agent, deregistering its memory right after (its revocation goes to
 * the peer on the connection that closed: EPIPE over tcp) and then
 * destroyed, logs no warning. */
START_TEST(t_orderly_close_quiet)
{
    static const char *const provs[] = {"tcp;ofi_rxm", "tcp", "sockets"};
    for (size_t k = 0; k < 3; k++) {
        nxl_agent_t *a, *b;
        if (!lf_pair("orderly_close_quiet", provs[k], k == 0, &a, &b))
            continue;
        size_t len = 1 << 16;
        unsigned char *pa = malloc(2 * len), *pb = calloc(1, len);
        tl_fill(pa, len, 5);
        nxl_desc_t da = {.addr = (uintptr_t)pa, .len = len}, db = {.addr = (uintptr_t)pb, .len = len};
        nxl_desc_t da2 = {.addr = (uintptr_t)pa + len, .len = len};
        ck_assert_int_eq(nxl_mem_register(a, NXL_DRAM, &da, 1, NULL), NXL_SUCCESS);
        ck_assert_int_eq(nxl_mem_register(a, NXL_DRAM, &da2, 1, NULL), NXL_SUCCESS);
        ck_assert_int_eq(nxl_mem_register(b, NXL_DRAM, &db, 1, NULL), NXL_SUCCESS);
        tl_learn(a, b);
        tl_learn(b, a);
        nxl_dlist_t la = {NXL_DRAM, &da, 1}, lb = {NXL_DRAM, &db, 1};
        nxl_xfer_t *w, *wb;
        ck_assert_int_eq(nxl_xfer_create(a, NXL_WRITE, &la, &lb, "b", NULL, &w), NXL_SUCCESS);
        ck_assert_int_eq(nxl_xfer_create(b, NXL_WRITE, &lb, &la, "a", NULL, &wb), NXL_SUCCESS);
        ndone = 0;
        ck_assert_int_eq(nxl_xfer_post(w, done_cb, NULL, NULL), NXL_SUCCESS);
        ck_assert(run_pair_until(a, b, &ndone, 1, 10000));
        ck_assert_int_eq(last_st, NXL_SUCCESS);
        ck_assert_int_eq(nxl_xfer_post(wb, done_cb, NULL, NULL), NXL_SUCCESS);
        ck_assert(run_pair_until(a, b, &ndone, 2, 10000));
        ck_assert_int_eq(last_st, NXL_SUCCESS);
        nxl_xfer_release(w);
        nxl_xfer_release(wb);
        warnlen = 0;
        warnbuf[0] = 0;
        /* b's work is done: it goes; a gives its memory up, a region at a
         * time (the second revocation meets the connection's reset), and
         * goes too */
        nxl_agent_destroy(b);
        ck_assert_int_eq(nxl_mem_deregister(a, NXL_DRAM, &da, 1), NXL_SUCCESS);
        for (int i = 0; i < 5; i++)
            nxl_agent_run_once(a, 10);
        ck_assert_int_eq(nxl_mem_deregister(a, NXL_DRAM, &da2, 1), NXL_SUCCESS);
        uint64_t t0 = tl_now_ms();
        while (tl_now_ms() - t0 < 300)
            nxl_agent_run_once(a, 10);
        nxl_agent_destroy(a);
        ck_assert_msg(warnlen == 0, "%s: an orderly close logged: %s", provs[k], warnbuf);
        free(pa);
        free(pb);
    }
}
END_TEST

/* nothing on standard output, whatever libfabric does */
START_TEST(t_quiet_stdout)
{
    fflush(stdout);
    char path[] = "/tmp/nxl-lf-stdout-XXXXXX";
    int fd = mkstemp(path);
    ck_assert(fd >= 0);
    int saved = dup(1);
    dup2(fd, 1);
    nxl_agent_t *a = agent("q");
    lf(a, "provider", "verbs", NULL, NULL);
    ck_assert_int_eq(lf(a, NULL, NULL, NULL, NULL), NXL_SUCCESS);
    nxl_agent_run_once(a, 10);
    nxl_agent_destroy(a);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    off_t size = lseek(fd, 0, SEEK_END);
    close(fd);
    unlink(path);
    ck_assert_int_eq(size, 0);
}
END_TEST

/* an idle agent sleeps: a few wake-ups, no CPU, over half a second */
START_TEST(t_idle_sleeps)
{
    nxl_agent_t *a = agent("idle");
    ck_assert_int_eq(lf(a, NULL, NULL, NULL, NULL), NXL_SUCCESS);
    for (int i = 0; i < 20; i++)
        nxl_agent_run_once(a, 5); /* setup traffic, if any */
    struct rusage r0, r1;
    getrusage(RUSAGE_THREAD, &r0);
    uint64_t t0 = tl_now_ms();
    int turns = 0;
    while (tl_now_ms() - t0 < 500) {
        nxl_agent_run_once(a, 500);
        turns++;
    }
    getrusage(RUSAGE_THREAD, &r1);
    double cpu = (double)(r1.ru_utime.tv_sec - r0.ru_utime.tv_sec) +
                 (double)(r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) +
                 ((double)(r1.ru_utime.tv_usec - r0.ru_utime.tv_usec) +
                  (double)(r1.ru_stime.tv_usec - r0.ru_stime.tv_usec)) / 1e6;
    ck_assert_msg(turns <= 4, "%d loop turns in 500 ms idle", turns);
    ck_assert_msg(cpu < 0.05, "%.3f s CPU in 500 ms idle", cpu);
    nxl_agent_destroy(a);
}
END_TEST

/* an agent on tcp;ofi_rxm over lo, with rails (NULL: none) */
static nxl_status_t lf_rails(nxl_agent_t *a, const char *rails)
{
    nxl_param_t p[4] = {{"provider", "tcp;ofi_rxm"}, {"iface", "lo"}, {"rail_min", "65536"},
                        {"rails", rails}};
    return nxl_backend_create(a, "LIBFABRIC", p, rails ? 4 : 2, NULL);
}

/* a WRITE with a notification from a to b (its data there when the
 * notification comes), then a READ back, of @p n elements over len bytes */
static void rails_round(nxl_agent_t *a, nxl_agent_t *b, const char *bn, unsigned char *pa,
                        unsigned char *pb, size_t len, int n, unsigned seed)
{
    nxl_desc_t da[2] = {{.addr = (uintptr_t)pa, .len = len / 2 + 5},
                        {.addr = (uintptr_t)pa + len / 2 + 5, .len = len / 2 - 5}};
    nxl_desc_t db[2] = {{.addr = (uintptr_t)pb, .len = len / 2 + 5},
                        {.addr = (uintptr_t)pb + len / 2 + 5, .len = len / 2 - 5}};
    if (n == 1)
        da[0].len = db[0].len = len;
    nxl_dlist_t la = {NXL_DRAM, da, (size_t)n}, lb = {NXL_DRAM, db, (size_t)n};
    nxl_xfer_opts_t o;
    nxl_xfer_opts_init(&o);
    o.notif = "data";
    o.notif_len = 4;
    nxl_xfer_t *w, *r;
    tl_fill(pa, len, seed);
    memset(pb, 0, len);
    ck_assert_int_eq(nxl_xfer_create(a, NXL_WRITE, &la, &lb, bn, &o, &w), NXL_SUCCESS);
    ndone = nnotif = 0;
    ck_assert_int_eq(nxl_xfer_post(w, done_cb, NULL, NULL), NXL_SUCCESS);
    ck_assert(run_pair_until(a, b, &nnotif, 1, 20000));
    ck_assert_msg(tl_check(pb, len, seed) < 0, "data not there at the notification");
    ck_assert(run_pair_until(a, b, &ndone, 1, 20000));
    ck_assert_int_eq(last_st, NXL_SUCCESS);
    memset(pa, 0, len);
    ck_assert_int_eq(nxl_xfer_create(a, NXL_READ, &la, &lb, bn, NULL, &r), NXL_SUCCESS);
    ck_assert_int_eq(nxl_xfer_post(r, done_cb, NULL, NULL), NXL_SUCCESS);
    ck_assert(run_pair_until(a, b, &ndone, 2, 20000));
    ck_assert_int_eq(last_st, NXL_SUCCESS);
    ck_assert(tl_check(pa, len, seed) < 0);
    nxl_xfer_release(w);
    nxl_xfer_release(r);
}

/* Rails over loopback (two endpoints on lo per agent): the parameter's
 * refusals, striped WRITEs and READs between two agents with rails, and an
 * agent with rails reaching one without (the main path, both ways). */
START_TEST(t_rails_lo)
{
    nxl_agent_t *a = agent("a"), *b = agent("b");
    if (lf_rails(a, NULL) != NXL_SUCCESS) {
        printf("SKIP: rails_lo: tcp;ofi_rxm on lo: %s\n", nxl_agent_last_error(a));
        nxl_agent_destroy(a);
        nxl_agent_destroy(b);
        return;
    }
    nxl_agent_destroy(a);
    a = agent("a");
    ck_assert_int_ne(lf_rails(a, "lo"), NXL_SUCCESS);
    ck_assert_msg(strstr(nxl_agent_last_error(a), "2 to 8"), "%s", nxl_agent_last_error(a));
    ck_assert_int_ne(lf_rails(a, "lo,nxl-no-such-if"), NXL_SUCCESS);
    ck_assert_msg(strstr(nxl_agent_last_error(a), "nxl-no-such-if"), "%s",
                  nxl_agent_last_error(a));
    ck_assert_int_eq(lf_rails(a, "lo,lo"), NXL_SUCCESS);
    ck_assert_int_eq(lf_rails(b, "lo,lo"), NXL_SUCCESS);
    size_t len = 4u << 20;
    unsigned char *pa = malloc(len), *pb = calloc(1, len);
    nxl_desc_t da = {.addr = (uintptr_t)pa, .len = len}, db = {.addr = (uintptr_t)pb, .len = len};
    ck_assert_int_eq(nxl_mem_register(a, NXL_DRAM, &da, 1, NULL), NXL_SUCCESS);
    ck_assert_int_eq(nxl_mem_register(b, NXL_DRAM, &db, 1, NULL), NXL_SUCCESS);
    loglen = 0;
    logbuf[0] = 0;
    tl_learn(a, b);
    tl_learn(b, a);
    nxl_agent_on_notif(b, notif_cb, NULL);
    ck_assert_msg(strstr(logbuf, "2 rails to agent 'b'"), "%s", logbuf);
    for (unsigned k = 0; k < 3; k++)
        rails_round(a, b, "b", pa, pb, k == 2 ? 100000 : len, k == 1 ? 2 : 1, 60 + k);
    ck_assert_msg(!warnlen, "%s", warnbuf);
    /* an agent without rails: it loads a's info (with rails), a loads its
     * (without), and each reaches the other over the main path */
    nxl_agent_t *c = agent("c");
    ck_assert_int_eq(lf_rails(c, NULL), NXL_SUCCESS);
    unsigned char *pc = calloc(1, len);
    nxl_desc_t dc = {.addr = (uintptr_t)pc, .len = len};
    ck_assert_int_eq(nxl_mem_register(c, NXL_DRAM, &dc, 1, NULL), NXL_SUCCESS);
    loglen = 0;
    logbuf[0] = 0;
    tl_learn(a, c);
    tl_learn(c, a);
    nxl_agent_on_notif(c, notif_cb, NULL);
    nxl_agent_on_notif(a, notif_cb, NULL);
    ck_assert_msg(!strstr(logbuf, "rails to agent"), "%s", logbuf);
    rails_round(a, c, "c", pa, pc, len, 1, 70);
    rails_round(c, a, "a", pc, pa, len, 2, 71);
    ck_assert_msg(!warnlen, "%s", warnbuf);
    nxl_agent_destroy(c);
    free(pc);
    pair_end(a, b, pa, pb);
}
END_TEST

/* thp_collapse on shm: a registered, written malloc'd 8 MiB region ends
 * up on 2 MiB pages (auto, the default there: in the background) with its
 * bytes; off leaves it alone */
START_TEST(t_thp)
{
    nxl_agent_t *a = agent("thp");
    ck_assert_msg(lf(a, "provider", "shm", _i ? "thp_collapse" : NULL, "off") == NXL_SUCCESS,
                  "%s", nxl_agent_last_error(a));
    size_t len = 8u << 20;
    unsigned char *p = malloc(len);
    tl_fill(p, len, 21);
    tl_reg_dram(a, p, len);
    uintptr_t lo = ((uintptr_t)p + (2u << 20) - 1) & ~(uintptr_t)((2u << 20) - 1);
    uintptr_t hi = ((uintptr_t)p + len) & ~(uintptr_t)((2u << 20) - 1);
    long want = (long)((hi - lo) >> 10), got;
    uint64_t end = tl_now_ms() + (_i ? 300 : 2000);
    do {
        nxl_agent_run_once(a, 10);
        got = tl_huge_kb(0, (uintptr_t)p, len, 0);
    } while (got < want && tl_now_ms() < end);
    if (_i)
        ck_assert_msg(got == 0, "thp_collapse=off: %ld kB on 2 MiB pages", got);
    else
        ck_assert_msg(got >= want, "shm, thp_collapse=auto: %ld of %ld kB on 2 MiB pages", got,
                      want);
    ck_assert(tl_check(p, len, 21) < 0);
    nxl_agent_destroy(a);
    free(p);
}
END_TEST

/* a region deregistered while the background collapses it (shm, auto) is
 * left alone once nxl_mem_deregister returned: memory mapped again at its
 * addresses and written stays on plain pages */
START_TEST(t_thp_dereg)
{
    nxl_agent_t *a = agent("thpd");
    ck_assert_msg(lf(a, "provider", "shm", NULL, NULL) == NXL_SUCCESS, "%s",
                  nxl_agent_last_error(a));
    tl_thp_dereg_rounds(a, 4, 2000);
    nxl_agent_destroy(a);
}
END_TEST

int main(void)
{
    nxl_plugin_info_t p[8];
    if (!tl_plugin("LIBFABRIC", p, 8)) {
        printf("SKIP: this build has no LIBFABRIC transport\n");
        return 77;
    }
    Suite *s = suite_create("libfabric");
    TCase *tc = TL_TCASE(s, "transport", 60, NULL, NULL, t_plugin_info, t_bad_params, t_info_line,
             t_shm_stale_region, t_loopback, t_two_agents, t_short_names, t_quiet_stdout,
             t_idle_sleeps, t_doorbell, t_one_message_write_checked, t_revoke,
             t_orderly_close_quiet, t_rails_lo);
    tcase_add_loop_test(tc, t_thp, 0, 2);
    tcase_add_test(tc, t_thp_dereg);
    return tl_run(s);
}
