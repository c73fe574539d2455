/* SPDX-License-Identifier: BSD-3-Clause */
/* The peer lifecycle (nxl.h, "Peer lifecycle"): the events UP, CHANGED,
 * DOWN and BACK, each once and in order; prepared lists and transfers
 * re-bound to a peer's new incarnation, or refused with a sentence when
 * its regions are gone; and a target process killed and started again N
 * times under a stream of WRITEs with notifications, found again by the
 * agent's recovery, the application re-posting the same transfer.
 *
 * The restarted target is this program again (exec'd with --target): a new
 * process, whose buffer is mapped at a fixed address so that each
 * incarnation registers the same region. It checks every byte of the
 * first WRITE it receives (its notification comes after the data) and
 * reports on a pipe. N is $NXL_LIFECYCLE_RESTARTS (5; the soak script
 * tests/lifecycle-soak.sh runs 20). The same runs with etcd discovery: the
 * target publishes its metadata, the initiator fetches it from etcd and
 * finds each new incarnation through the watch. */
#include "testlib.h"
#include "etcd_util.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/mman.h>

#define TLEN (1u << 20)                            /* the target's buffer */
#define TADDR ((void *)(uintptr_t)0x3e0000000000ull) /* where every incarnation maps it */
#define WLEN (256u << 10)                          /* bytes each WRITE moves */

/* ------------------------------------------------------------ transports */

typedef struct conf {
    const char *label;
    const char *transport;
    nxl_param_t params[3];
    size_t nparams;
} conf_t;

static const conf_t confs[] = {
    {"ucx_shm", "UCX", {{0}}, 0}, /* UCX picks shared memory on one host */
    {"ucx_tcp", "UCX", {{"tls", "tcp"}}, 1},
    {"lf_tcp", "LIBFABRIC", {{"provider", "tcp;ofi_rxm"}, {"stall_timeout", "3s"}}, 2},
};
#define NCONFS (sizeof(confs) / sizeof(confs[0]))

static nxl_status_t make_backend(nxl_agent_t *a, const conf_t *c)
{
    return nxl_backend_create(a, c->transport, c->params, c->nparams, NULL);
}

/* why c cannot run here, or NULL (probed in an agent gone before any fork) */
static const char *missing(const conf_t *c)
{
    static char why[512];
    nxl_agent_t *a = tl_agent_bare("probe", 0);
    nxl_status_t st = make_backend(a, c);
    snprintf(why, sizeof(why), "%s", nxl_agent_last_error(a));
    nxl_agent_destroy(a);
    return st == NXL_SUCCESS ? NULL : why;
}

/* ------------------------------------------------------------ the events */

static struct {
    char seq[512];      /* U C D B, in delivery order */
    size_t n;
    uint64_t inc;       /* the last event's incarnation */
    size_t nregions;
    char why[1024];     /* the last DOWN's */
    int in_call;        /* set around calls that may cause events */
    int bad;            /* an event delivered inside a call, or for another peer */
    int up;             /* the peer is up, as the events say */
    pthread_t thread;   /* where the last event ran */
} E;

static void on_peer(nxl_agent_t *a, const nxl_peer_event_t *ev, void *arg)
{
    (void)a;
    (void)arg;
    if (E.in_call || strcmp(ev->peer, "T") || ev->size != sizeof(*ev))
        E.bad++;
    if (E.n + 1 < sizeof(E.seq))
        E.seq[E.n++] = "UCDB"[ev->kind];
    E.inc = ev->incarnation;
    E.nregions = ev->nregions;
    if (ev->kind == NXL_PEER_DOWN) {
        snprintf(E.why, sizeof(E.why), "%s", ev->why);
        if (ev->status != NXL_ERR_REMOTE_DISCONNECT || !is_sentence(ev->why))
            E.bad++;
    } else if (ev->status != NXL_SUCCESS || ev->why[0]) {
        E.bad++;
    }
    E.up = ev->kind != NXL_PEER_DOWN;
    E.thread = pthread_self();
}

static void turn2(nxl_agent_t *a, nxl_agent_t *b, int ms)
{
    uint64_t end = tl_now_ms() + (uint64_t)ms;
    do {
        nxl_agent_run_once(a, 0);
        if (b)
            nxl_agent_run_once(b, 1);
    } while (tl_now_ms() < end);
}

/* ------------------------------------------------ in one process, over UCX */

static unsigned char tb[64 << 10] __attribute__((aligned(4096)));
static unsigned char lb[16 << 10] __attribute__((aligned(4096)));

/* true, with a SKIP line for the case name, when UCX is not available */
static bool ucx_missing(const char *name)
{
    nxl_plugin_info_t info[16];
    const nxl_plugin_info_t *ucx = tl_plugin("UCX", info, 16);
    if (!ucx || !ucx->available) {
        printf("SKIP: %s: UCX is not available here\n", name);
        return true;
    }
    return false;
}

/* the initiator I over UCX (etcd: its endpoints, or NULL), its events
 * recorded in E from empty, lb registered */
static nxl_agent_t *initiator(const char *etcd)
{
    memset(&E, 0, sizeof(E));
    nxl_agent_config_t c;
    tl_config(&c, "I", 0);
    c.etcd_endpoints = etcd;
    nxl_agent_t *i = tl_agent_cfg(&c, 0);
    tl_backend(i, "UCX");
    nxl_agent_on_peer(i, on_peer, NULL);
    tl_reg_dram(i, lb, sizeof(lb));
    return i;
}

/* the agent of a new incarnation of T over UCX, listening on port (0: an
 * ephemeral one), with etcd's endpoints or NULL; nothing registered */
static nxl_agent_t *target_agent(uint16_t port, const char *etcd)
{
    nxl_agent_config_t c;
    tl_config(&c, "T", 0);
    c.listen_port = port;
    c.etcd_endpoints = etcd;
    nxl_agent_t *t = tl_agent_cfg(&c, 1);
    tl_backend(t, "UCX");
    return t;
}

static nxl_agent_t *target(uint16_t port, uintptr_t addr, size_t len, size_t nregs)
{
    nxl_agent_t *t = target_agent(port, NULL);
    for (size_t i = 0; i < nregs; i++)
        tl_reg_dram(t, (void *)(addr + i * len), len);
    return t;
}

static void fetch(nxl_agent_t *i, nxl_agent_t *t)
{
    E.in_call = 1;
    tl_md_fetch(i, t);
    E.in_call = 0;
    ck_assert_int_eq(tl_wait1(i, t, 2), NXL_SUCCESS);
    turn2(i, t, 5);
}

static nxl_status_t post1(nxl_agent_t *i, nxl_agent_t *t, nxl_xfer_t *x)
{
    E.in_call = 1;
    nxl_status_t st = nxl_xfer_post(x, tl_count_cb, NULL, NULL);
    E.in_call = 0;
    if (st != NXL_SUCCESS)
        return st;
    return tl_wait1(i, t, 1);
}

START_TEST(t_events_rebind)
{
    if (ucx_missing("events_rebind"))
        return;
    nxl_agent_t *i = initiator(NULL);
    nxl_agent_t *t = target(0, (uintptr_t)tb, 8 << 10, 1);
    uint16_t port = nxl_agent_listen_port(t);

    fetch(i, t);
    ck_assert_str_eq(E.seq, "U");
    ck_assert(E.inc == 1 && E.nregions == 1);

    /* one list, one transfer: two elements of the first region */
    nxl_desc_t rd[2] = {{.addr = (uintptr_t)tb, .len = 4096},
                        {.addr = (uintptr_t)tb + 4096, .len = 4096}};
    nxl_desc_t ld[2] = {{.addr = (uintptr_t)lb, .len = 4096},
                        {.addr = (uintptr_t)lb + 4096, .len = 4096}};
    nxl_prepped_t *lp, *rp;
    ck_assert(nxl_prep(i, NULL, NXL_DRAM, ld, 2, &lp) == NXL_SUCCESS);
    ck_assert(nxl_prep(i, "T", NXL_DRAM, rd, 2, &rp) == NXL_SUCCESS);
    nxl_xfer_t *x;
    ck_assert(nxl_xfer_make(i, NXL_WRITE, lp, NULL, rp, NULL, 2, NULL, &x) == NXL_SUCCESS);
    tl_fill(lb, 8192, 1);
    ck_assert_int_eq(post1(i, t, x), NXL_SUCCESS);
    ck_assert(tl_check(tb, 8192, 1) < 0);

    /* CHANGED: another region, the metadata replaced; the same transfer */
    tl_reg_dram(t, tb + (8 << 10), 8 << 10);
    fetch(i, t);
    ck_assert_str_eq(E.seq, "UC");
    ck_assert(E.inc == 1 && E.nregions == 2);
    fetch(i, t); /* the same again: no event */
    ck_assert_str_eq(E.seq, "UC");
    tl_fill(lb, 8192, 2);
    ck_assert_int_eq(post1(i, t, x), NXL_SUCCESS);
    ck_assert(tl_check(tb, 8192, 2) < 0);

    /* DOWN by the application: posts refused, nothing armed to find it */
    E.in_call = 1;
    ck_assert(nxl_md_invalidate(i, "T") == NXL_SUCCESS);
    E.in_call = 0;
    turn2(i, t, 5);
    ck_assert_str_eq(E.seq, "UCD");
    ck_sentence(E.why, "invalidated");
    ck_assert_int_eq(nxl_xfer_post(x, NULL, NULL, NULL), NXL_ERR_REMOTE_DISCONNECT);
    ck_sentence(nxl_agent_last_error(i), "down");
    turn2(i, t, 300);
    ck_assert_str_eq(E.seq, "UCD");

    /* BACK, the same process */
    fetch(i, t);
    ck_assert_str_eq(E.seq, "UCDB");
    ck_assert(E.inc == 1);
    tl_fill(lb, 8192, 3);
    ck_assert_int_eq(post1(i, t, x), NXL_SUCCESS);
    ck_assert(tl_check(tb, 8192, 3) < 0);

    /* a new process under the name, loaded while the old one still
     * counted as up: DOWN then BACK; the transfer and the list follow */
    nxl_agent_destroy(t);
    memset(tb, 0, sizeof(tb));
    t = target(port, (uintptr_t)tb, 8 << 10, 2);
    fetch(i, t);
    ck_assert_str_eq(E.seq, "UCDBDB");
    ck_assert(E.inc == 2);
    ck_sentence(E.why, "incarnation");
    tl_fill(lb, 8192, 4);
    ck_assert_int_eq(post1(i, t, x), NXL_SUCCESS);
    ck_assert(tl_check(tb, 8192, 4) < 0);
    nxl_xfer_t *x2;
    ck_assert(nxl_xfer_make(i, NXL_WRITE, lp, NULL, rp, NULL, 2, NULL, &x2) == NXL_SUCCESS);
    nxl_xfer_release(x2);

    /* a new process with another layout: the regions are gone */
    nxl_agent_destroy(t);
    t = target(port, (uintptr_t)tb + 4096, 16 << 10, 1);
    fetch(i, t);
    ck_assert_str_eq(E.seq, "UCDBDBDB");
    ck_assert(E.inc == 3);
    ck_assert_int_eq(nxl_xfer_post(x, NULL, NULL, NULL), NXL_ERR_NOT_FOUND);
    ck_sentence(nxl_agent_last_error(i), "element 0");
    ck_sentence(nxl_agent_last_error(i), "incarnation");
    ck_assert_int_eq(nxl_xfer_post(x, NULL, NULL, NULL), NXL_ERR_NOT_FOUND);
    ck_assert(nxl_xfer_make(i, NXL_WRITE, lp, NULL, rp, NULL, 2, NULL, &x2) == NXL_ERR_NOT_FOUND);
    ck_sentence(nxl_agent_last_error(i), "element 0");

    /* the layout back (a fourth process): bound again */
    nxl_agent_destroy(t);
    t = target(port, (uintptr_t)tb, 8 << 10, 1);
    fetch(i, t);
    ck_assert_str_eq(E.seq, "UCDBDBDBDB");
    tl_fill(lb, 8192, 5);
    ck_assert_int_eq(post1(i, t, x), NXL_SUCCESS);
    ck_assert(tl_check(tb, 8192, 5) < 0);

    ck_assert_int_eq(E.bad, 0);
    nxl_xfer_release(x);
    nxl_prepped_release(lp);
    nxl_prepped_release(rp);
    nxl_agent_destroy(t);
    nxl_agent_destroy(i);
}
END_TEST

/* Strided lists (nxl_prep_strided) and a transfer made from two of them
 * follow a new incarnation as element lists do: re-bound when the region
 * is still there, refused with a sentence when it is gone. */
START_TEST(t_strided_rebind)
{
    if (ucx_missing("strided_rebind"))
        return;
    nxl_agent_t *i = initiator(NULL);
    nxl_agent_t *t = target(0, (uintptr_t)tb, 8 << 10, 1);
    uint16_t port = nxl_agent_listen_port(t);
    fetch(i, t);
    ck_assert_str_eq(E.seq, "U");

    nxl_strided_t ls = {.base = (uintptr_t)lb, .len = 1024, .stride = 1024, .count = 8};
    nxl_strided_t rs = {.base = (uintptr_t)tb, .len = 1024, .stride = 1024, .count = 8};
    nxl_prepped_t *lp, *rp;
    ck_assert(nxl_prep_strided(i, NULL, NXL_DRAM, &ls, 1, &lp) == NXL_SUCCESS);
    ck_assert(nxl_prep_strided(i, "T", NXL_DRAM, &rs, 1, &rp) == NXL_SUCCESS);
    nxl_xfer_t *x;
    ck_assert(nxl_xfer_make(i, NXL_WRITE, lp, NULL, rp, NULL, 8, NULL, &x) == NXL_SUCCESS);
    tl_fill(lb, 8192, 1);
    ck_assert_int_eq(post1(i, t, x), NXL_SUCCESS);
    ck_assert(tl_check(tb, 8192, 1) < 0);

    /* a new process, the same region: the transfer and the list follow */
    nxl_agent_destroy(t);
    memset(tb, 0, sizeof(tb));
    t = target(port, (uintptr_t)tb, 8 << 10, 1);
    fetch(i, t);
    ck_assert_str_eq(E.seq, "UDB");
    tl_fill(lb, 8192, 2);
    ck_assert_int_eq(post1(i, t, x), NXL_SUCCESS);
    ck_assert(tl_check(tb, 8192, 2) < 0);
    nxl_xfer_t *x2;
    ck_assert(nxl_xfer_make(i, NXL_WRITE, lp, NULL, rp, NULL, 8, NULL, &x2) == NXL_SUCCESS);
    tl_fill(lb, 8192, 3);
    ck_assert_int_eq(post1(i, t, x2), NXL_SUCCESS);
    ck_assert(tl_check(tb, 8192, 3) < 0);
    nxl_xfer_release(x2);

    /* another layout: the region is gone, both refused */
    nxl_agent_destroy(t);
    t = target(port, (uintptr_t)tb + 4096, 16 << 10, 1);
    fetch(i, t);
    ck_assert_str_eq(E.seq, "UDBDB");
    ck_assert_int_eq(nxl_xfer_post(x, NULL, NULL, NULL), NXL_ERR_NOT_FOUND);
    ck_sentence(nxl_agent_last_error(i), "incarnation");
    ck_assert(nxl_xfer_make(i, NXL_WRITE, lp, NULL, rp, NULL, 8, NULL, &x2) == NXL_ERR_NOT_FOUND);
    ck_sentence(nxl_agent_last_error(i), "incarnation");

    ck_assert_int_eq(E.bad, 0);
    nxl_xfer_release(x);
    nxl_prepped_release(lp);
    nxl_prepped_release(rp);
    nxl_agent_destroy(t);
    nxl_agent_destroy(i);
}
END_TEST

/* Re-binding by label (nxl_md_label, nxl_md_publish_partial): each new
 * "process" of T registers its two regions at other addresses under the
 * same label; the same transfers (an element list and a strided one) and
 * lists follow to the new addresses, every byte checked there and none at
 * the old ones; a label that shrank or vanished leaves them invalid with
 * the element and the reason, and a layout labelled again binds them.
 * With etcd, T publishes partial metadata under the label and the
 * initiator finds each new incarnation through the watch of that key. */
#define LREG (8u << 10)

static tl_etcd_t L_etcd;

/* T, a new incarnation: regions at tb + off[k] of len[k] bytes, registered
 * in that order; those at tb + loff[k] (k < nl; loff NULL: off) labelled
 * label in that order (with etcd: published under it) */
static nxl_agent_t *ltarget(nxl_agent_t *i, uint16_t port, const size_t *off, const size_t *len,
                            size_t n, const char *label, const size_t *loff, size_t nl)
{
    nxl_agent_t *t = target_agent(port, L_etcd.pid ? L_etcd.endpoint : NULL);
    nxl_desc_t d[4];
    for (size_t k = 0; k < n; k++)
        tl_reg_dram(t, tb + off[k], len[k]);
    for (size_t k = 0; k < nl; k++)
        d[k] = (nxl_desc_t){.addr = (uintptr_t)tb + (loff ? loff : off)[k], .len = 1};
    if (!L_etcd.pid) {
        ck_assert_int_eq(nxl_md_label(t, label, NXL_DRAM, d, nl), NXL_SUCCESS);
        return t;
    }
    ck_assert_int_eq(nxl_md_publish_partial(t, label, NXL_DRAM, d, nl, tl_count_cb, NULL, NULL),
                     NXL_SUCCESS);
    ck_assert_int_eq(tl_wait1(t, i, 0), NXL_SUCCESS);
    return t;
}

/* i learns of the incarnation t: fetched (socket), or seen by the watch */
static void lfind(nxl_agent_t *i, nxl_agent_t *t, const char *seq)
{
    if (!L_etcd.pid) {
        fetch(i, t);
    } else {
        uint64_t end = tl_now_ms() + 10000;
        while (strcmp(E.seq, seq) && tl_now_ms() < end)
            turn2(i, t, 5);
    }
    ck_assert_str_eq(E.seq, seq);
}

/* destroys t and wipes the target's memory (with etcd, its keys go: DOWN) */
static void lgone(nxl_agent_t *i, nxl_agent_t *t)
{
    nxl_agent_destroy(t);
    memset(tb, 0, sizeof(tb));
    turn2(i, NULL, 5);
}

/* the bytes a and s carried to the regions at tb + off[0] and off[1] */
static void lcheck(const size_t *off, uint32_t seed)
{
    ck_assert(tl_check(tb + off[0], 4096, seed) < 0);          /* element 0: A + 0 */
    ck_assert(tl_check(tb + off[1] + 4096, 4096, seed + 1) < 0); /* element 1: B + 4096 */
    for (size_t k = 0; k < 4; k++)                             /* the strided one in A */
        ck_assert(tl_check(tb + off[0] + 4096 + 1024 * k, 512, seed + 2 + (uint32_t)k) < 0);
    /* nothing elsewhere */
    for (size_t at = 0; at < sizeof(tb); at++) {
        bool a = at >= off[0] && at < off[0] + LREG, b = at >= off[1] + 4096 && at < off[1] + LREG;
        if (!a && !b)
            ck_assert_msg(tb[at] == 0, "a byte at offset %zu of the target's memory", at);
    }
}

static void lfill(uint32_t seed)
{
    tl_fill(lb, 4096, seed);
    tl_fill(lb + 4096, 4096, seed + 1);
    for (size_t k = 0; k < 4; k++)
        tl_fill(lb + 8192 + 512 * k, 512, seed + 2 + (uint32_t)k);
}

static void label_rebind(bool etcd)
{
    const char *name = etcd ? "label_rebind_etcd" : "label_rebind";
    if (ucx_missing(name))
        return;
    memset(&L_etcd, 0, sizeof(L_etcd));
    if (etcd) {
        nxl_build_info_t bi = {.size = sizeof(bi)};
        nxl_build_info(&bi);
        if (!strstr(bi.options, "etcd=yes") || !tl_etcd_binary()) {
            printf("SKIP: %s: %s\n", name,
                   tl_etcd_binary() ? "libnxl built without etcd" : "no etcd binary");
            return;
        }
        ck_assert_msg(tl_etcd_start(&L_etcd) == 0, "etcd did not start (see %s/etcd.log)",
                      L_etcd.dir);
    }
    memset(tb, 0, sizeof(tb));
    nxl_agent_t *i = initiator(etcd ? L_etcd.endpoint : NULL);

    /* incarnation 1: A at 0, B at 16 KiB, labelled kv */
    const size_t off1[2] = {0, 16 << 10}, len[2] = {LREG, LREG};
    nxl_agent_t *t = ltarget(i, 0, off1, len, 2, "kv", NULL, 2);
    uint16_t port = nxl_agent_listen_port(t);
    if (etcd) {
        E.in_call = 1;
        ck_assert_int_eq(nxl_md_fetch_etcd(i, "T", "kv", 10000, tl_count_cb, NULL, NULL),
                         NXL_SUCCESS);
        E.in_call = 0;
        ck_assert_int_eq(tl_wait1(i, t, 2), NXL_SUCCESS);
        turn2(i, t, 5);
    } else {
        fetch(i, t);
    }
    ck_assert_str_eq(E.seq, "U");

    nxl_desc_t rd[2] = {{.addr = (uintptr_t)tb + off1[0], .len = 4096},
                        {.addr = (uintptr_t)tb + off1[1] + 4096, .len = 4096}};
    nxl_desc_t ld[2] = {{.addr = (uintptr_t)lb, .len = 4096},
                        {.addr = (uintptr_t)lb + 4096, .len = 4096}};
    nxl_strided_t ls = {.base = (uintptr_t)lb + 8192, .len = 512, .stride = 512, .count = 4};
    nxl_strided_t rs = {.base = (uintptr_t)tb + off1[0] + 4096, .len = 512, .stride = 1024,
                        .count = 4};
    nxl_prepped_t *lp, *rp, *lsp, *rsp;
    ck_assert(nxl_prep(i, NULL, NXL_DRAM, ld, 2, &lp) == NXL_SUCCESS);
    ck_assert(nxl_prep(i, "T", NXL_DRAM, rd, 2, &rp) == NXL_SUCCESS);
    ck_assert(nxl_prep_strided(i, NULL, NXL_DRAM, &ls, 1, &lsp) == NXL_SUCCESS);
    ck_assert(nxl_prep_strided(i, "T", NXL_DRAM, &rs, 1, &rsp) == NXL_SUCCESS);
    nxl_xfer_t *x, *xs, *x2;
    ck_assert(nxl_xfer_make(i, NXL_WRITE, lp, NULL, rp, NULL, 2, NULL, &x) == NXL_SUCCESS);
    ck_assert(nxl_xfer_make(i, NXL_WRITE, lsp, NULL, rsp, NULL, 4, NULL, &xs) == NXL_SUCCESS);
    lfill(10);
    ck_assert_int_eq(post1(i, t, x), NXL_SUCCESS);
    ck_assert_int_eq(post1(i, t, xs), NXL_SUCCESS);
    lcheck(off1, 10);

    /* incarnation 2: the regions elsewhere, B first, under the same label */
    lgone(i, t);
    const size_t off2[2] = {32 << 10, 48 << 10}, roff2[2] = {48 << 10, 32 << 10};
    t = ltarget(i, port, roff2, len, 2, "kv", off2, 2);
    lfind(i, t, "UDB");
    ck_assert(E.inc == 2);
    lfill(20);
    ck_assert_int_eq(post1(i, t, x), NXL_SUCCESS);
    ck_assert_int_eq(post1(i, t, xs), NXL_SUCCESS);
    lcheck(off2, 20);
    memset(tb, 0, sizeof(tb));
    /* lists prepared before make transfers at the new addresses too */
    ck_assert(nxl_xfer_make(i, NXL_WRITE, lp, NULL, rp, NULL, 2, NULL, &x2) == NXL_SUCCESS);
    lfill(30);
    ck_assert_int_eq(post1(i, t, x2), NXL_SUCCESS);
    nxl_xfer_release(x2);
    ck_assert(nxl_xfer_make(i, NXL_WRITE, lsp, NULL, rsp, NULL, 4, NULL, &x2) == NXL_SUCCESS);
    ck_assert_int_eq(post1(i, t, x2), NXL_SUCCESS);
    nxl_xfer_release(x2);
    lcheck(off2, 30);

    /* incarnation 3: B shrank to 4 KiB, element 1 (B + 4096) is past it */
    lgone(i, t);
    const size_t len3[2] = {LREG, 4096};
    t = ltarget(i, port, off1, len3, 2, "kv", NULL, 2);
    lfind(i, t, "UDBDB");
    ck_assert_int_eq(nxl_xfer_post(x, NULL, NULL, NULL), NXL_ERR_NOT_FOUND);
    ck_sentence(nxl_agent_last_error(i), "element 1");
    ck_sentence(nxl_agent_last_error(i), "shrank");
    ck_assert(nxl_xfer_make(i, NXL_WRITE, lp, NULL, rp, NULL, 2, NULL, &x2) == NXL_ERR_NOT_FOUND);
    ck_sentence(nxl_agent_last_error(i), "element 1");
    /* the strided transfer lies in A, which is whole: it follows */
    lfill(40);
    ck_assert_int_eq(post1(i, t, xs), NXL_SUCCESS);
    for (size_t k = 0; k < 4; k++)
        ck_assert(tl_check(tb + off1[0] + 4096 + 1024 * k, 512, 42 + (uint32_t)k) < 0);

    /* incarnation 4: the regions at a third place, under another label:
     * kv is gone (at an address they had before they would be found by it) */
    lgone(i, t);
    const size_t off4[2] = {8 << 10, 24 << 10};
    t = ltarget(i, port, off4, len, 2, "other", NULL, 2);
    if (etcd) {
        /* the watch follows the keys fetched: kv, published empty */
        ck_assert_int_eq(nxl_md_publish_partial(t, "kv", NXL_DRAM, NULL, 0, tl_count_cb, NULL,
                                                NULL), NXL_SUCCESS);
        ck_assert_int_eq(tl_wait1(t, i, 0), NXL_SUCCESS);
    }
    lfind(i, t, "UDBDBDB");
    ck_assert_int_eq(nxl_xfer_post(x, NULL, NULL, NULL), NXL_ERR_NOT_FOUND);
    ck_sentence(nxl_agent_last_error(i), "element 0");
    ck_sentence(nxl_agent_last_error(i), "label");
    ck_assert_int_eq(nxl_xfer_post(xs, NULL, NULL, NULL), NXL_ERR_NOT_FOUND);
    ck_sentence(nxl_agent_last_error(i), "label");

    /* incarnation 5: kv again, as in 2: everything follows */
    lgone(i, t);
    t = ltarget(i, port, off2, len, 2, "kv", NULL, 2);
    lfind(i, t, "UDBDBDBDB");
    ck_assert(E.inc == 5);
    lfill(50);
    ck_assert_int_eq(post1(i, t, x), NXL_SUCCESS);
    ck_assert_int_eq(post1(i, t, xs), NXL_SUCCESS);
    lcheck(off2, 50);

    ck_assert_int_eq(E.bad, 0);
    nxl_xfer_release(x);
    nxl_xfer_release(xs);
    nxl_prepped_release(lp);
    nxl_prepped_release(rp);
    nxl_prepped_release(lsp);
    nxl_prepped_release(rsp);
    nxl_agent_destroy(t);
    nxl_agent_destroy(i);
    if (etcd) {
        tl_etcd_stop(&L_etcd);
        tl_rm_dir(L_etcd.dir);
        memset(&L_etcd, 0, sizeof(L_etcd));
    }
}

START_TEST(t_label_rebind)
{
    label_rebind(false);
}
END_TEST

START_TEST(t_label_rebind_etcd)
{
    label_rebind(true);
}
END_TEST

/* Recovery off: a DOWN that the peer caused (it said it leaves) is not
 * followed by fetches; on, it is fetched again and comes BACK; on, but the
 * application invalidates the peer lost (mode 2), it stops. */
START_TEST(t_recovery_option)
{
    for (int mode = 0; mode < 3; mode++) {
        int on = mode == 1;
        memset(&E, 0, sizeof(E));
        nxl_agent_config_t c;
        tl_config(&c, "I", 0);
        ck_assert_int_eq(c.peer_recovery, 1); /* the default */
        c.peer_recovery = mode > 0;
        nxl_agent_t *i = tl_agent_cfg(&c, 1);
        nxl_agent_on_peer(i, on_peer, NULL);
        nxl_agent_t *t = tl_agent("T", 1);
        fetch(i, t);
        ck_assert_int_eq(nxl_md_send_invalidate(t, "127.0.0.1", nxl_agent_listen_port(i),
                                                tl_count_cb, NULL, NULL),
                         NXL_SUCCESS);
        ck_assert_int_eq(tl_wait1(t, i, 2), NXL_SUCCESS);
        turn2(i, t, 5);
        ck_assert_str_eq(E.seq, "UD");
        ck_sentence(E.why, "leaves");
        if (mode == 2) { /* given up: no event, the recovery stops */
            ck_assert_int_eq(nxl_md_invalidate(i, "T"), NXL_SUCCESS);
            ck_assert_int_eq(nxl_md_invalidate(i, "T"), NXL_ERR_NOT_FOUND);
        }
        turn2(i, t, 1000);
        ck_assert_str_eq(E.seq, on ? "UDB" : "UD");
        ck_assert_int_eq(nxl_md_check(i, "T"), on ? NXL_SUCCESS : NXL_ERR_NOT_FOUND);
        ck_assert_int_eq(E.bad, 0);
        nxl_agent_destroy(t);
        nxl_agent_destroy(i);
    }
}
END_TEST

/* A lost peer given up (nxl_md_invalidate) while its recovery's fetch is
 * in flight: the fetch is dropped, the peer stays given up (no BACK, not
 * loaded) */
START_TEST(t_giveup_fetching)
{
    memset(&E, 0, sizeof(E));
    nxl_agent_config_t c;
    tl_config(&c, "I", 0);
    nxl_agent_t *i = tl_agent_cfg(&c, 1);
    nxl_agent_on_peer(i, on_peer, NULL);
    nxl_agent_t *t = tl_agent("T", 1);
    fetch(i, t);
    ck_assert_int_eq(nxl_md_send_invalidate(t, "127.0.0.1", nxl_agent_listen_port(i),
                                            tl_count_cb, NULL, NULL),
                     NXL_SUCCESS);
    ck_assert_int_eq(tl_wait1(t, i, 2), NXL_SUCCESS);
    turn2(i, t, 5);
    ck_assert_str_eq(E.seq, "UD");
    /* only I runs: its first retry (25-50 ms) asks T, which does not answer yet */
    turn2(i, NULL, 150);
    ck_assert_int_eq(nxl_md_invalidate(i, "T"), NXL_SUCCESS);
    turn2(i, t, 1000);
    ck_assert_str_eq(E.seq, "UD");
    ck_assert_int_eq(nxl_md_check(i, "T"), NXL_ERR_NOT_FOUND);
    ck_assert_int_eq(E.bad, 0);
    nxl_agent_destroy(t);
    nxl_agent_destroy(i);
}
END_TEST

/* Metadata without the incarnation (an older library's) still loads: the
 * same blob again is no event; after DOWN it counts as a new process. A
 * malformed "boot" is refused. */
START_TEST(t_older_metadata)
{
    memset(&E, 0, sizeof(E));
    nxl_agent_t *i = tl_agent_bare("I", 0), *t = tl_agent_bare("T", 0);
    nxl_agent_on_peer(i, on_peer, NULL);
    void *blob;
    size_t len;
    ck_assert_int_eq(nxl_md_local(t, &blob, &len), NXL_SUCCESS);
    char *s = blob, *b = strstr(s, "\"boot\":\""), *e = b ? strchr(b + 8, '"') : NULL;
    ck_assert_msg(b && e && e[1] == ',', "no boot field in %s", s);
    char old[4096], bad[4096];
    snprintf(old, sizeof(old), "%.*s%s", (int)(b - s), s, e + 2);
    snprintf(bad, sizeof(bad), "%.*s\"boot\":12,%s", (int)(b - s), s, e + 2);
    nxl_free(blob);
    ck_assert_msg(nxl_md_load(i, old, strlen(old), NULL, 0) == NXL_SUCCESS, "%s",
                  nxl_agent_last_error(i));
    ck_assert_int_eq(nxl_md_load(i, old, strlen(old), NULL, 0), NXL_SUCCESS);
    turn2(i, NULL, 5);
    ck_assert_str_eq(E.seq, "U");
    ck_assert(nxl_md_invalidate(i, "T") == NXL_SUCCESS);
    ck_assert_int_eq(nxl_md_load(i, old, strlen(old), NULL, 0), NXL_SUCCESS);
    turn2(i, NULL, 5);
    ck_assert_str_eq(E.seq, "UDB");
    ck_assert(E.inc == 2);
    ck_assert_int_eq(nxl_md_load(i, bad, strlen(bad), NULL, 0), NXL_ERR_MISMATCH);
    ck_sentence(nxl_agent_last_error(i), "boot");
    turn2(i, NULL, 5);
    ck_assert_str_eq(E.seq, "UDB");
    ck_assert_int_eq(E.bad, 0);
    nxl_agent_destroy(t);
    nxl_agent_destroy(i);
}
END_TEST

/* Threaded mode: the callback set from the application's thread, the
 * events delivered on the reactor thread. */
START_TEST(t_threaded)
{
    memset(&E, 0, sizeof(E));
    nxl_agent_config_t c;
    tl_config(&c, "I", 0);
    c.threaded = 1;
    nxl_agent_t *i = tl_agent_cfg(&c, 0);
    nxl_agent_on_peer(i, on_peer, NULL);
    /* nxl_md_label from this thread: handed to the reactor */
    nxl_desc_t d = {.addr = (uintptr_t)lb, .len = 16};
    ck_assert_int_eq(nxl_md_label(i, "kv", NXL_DRAM, &d, 1), NXL_ERR_NOT_FOUND);
    ck_sentence(nxl_agent_last_error(i), "no registered region");
    ck_assert_int_eq(nxl_md_label(i, "", NXL_DRAM, NULL, 0), NXL_ERR_INVALID_PARAM);
    ck_assert_int_eq(nxl_md_label(i, "kv", NXL_DRAM, NULL, 0), NXL_SUCCESS);
    nxl_agent_t *t = tl_agent("T", 1);
    nxl_future_t *f;
    ck_assert(nxl_md_fetch(i, "T", "127.0.0.1", nxl_agent_listen_port(t), NULL, NULL, &f) ==
              NXL_SUCCESS);
    uint64_t end = tl_now_ms() + 5000;
    while (nxl_future_status(f) == NXL_IN_PROG && tl_now_ms() < end)
        nxl_agent_run_once(t, 1);
    ck_assert_int_eq(nxl_future_status(f), NXL_SUCCESS);
    nxl_future_release(f);
    ck_assert(nxl_md_invalidate(i, "T") == NXL_SUCCESS);
    end = tl_now_ms() + 5000;
    while (__atomic_load_n(&E.n, __ATOMIC_ACQUIRE) < 2 && tl_now_ms() < end)
        usleep(1000);
    ck_assert_str_eq(E.seq, "UD");
    ck_assert(!pthread_equal(E.thread, pthread_self()));
    nxl_agent_on_peer(i, NULL, NULL);
    nxl_agent_destroy(i);
    nxl_agent_destroy(t);
}
END_TEST

/* ------------------------------------------------ a target restarted N times */

static struct {
    int rfd;            /* reports: "ok SEED" or "bad SEED at BYTE" */
    int checked;
} TG;

static void tg_notif(nxl_agent_t *a, const char *from, const void *msg, size_t len, void *arg)
{
    (void)a;
    (void)from;
    (void)arg;
    unsigned seed;
    char m[64];
    snprintf(m, sizeof(m), "%.*s", (int)(len < 63 ? len : 63), (const char *)msg);
    if (TG.checked || sscanf(m, "chk %u", &seed) != 1)
        return;
    TG.checked = 1; /* the first WRITE of this incarnation, right after it landed */
    long bad = tl_check(TADDR, WLEN, seed);
    char out[96];
    int n = bad < 0 ? snprintf(out, sizeof(out), "ok %u\n", seed)
                    : snprintf(out, sizeof(out), "bad %u at %ld\n", seed, bad);
    if (write(TG.rfd, out, (size_t)n) != n)
        _exit(21);
}

/* --target CONF PORT WFD RFD LAYOUT ETCD: agent "T" listening on PORT (0:
 * any), its port written to WFD, reports to RFD; LAYOUT 1 registers the
 * buffer shifted by a page (the regions the initiator knew are gone);
 * ETCD ("-": none) the endpoint it publishes its metadata to first */
static int target_main(int argc, char **argv)
{
    if (argc < 8)
        return 2;
    const char *etcd = strcmp(argv[7], "-") ? argv[7] : NULL;
    const conf_t *c = &confs[atoi(argv[2])];
    int wfd = atoi(argv[4]), layout = atoi(argv[6]);
    TG.rfd = atoi(argv[5]);
    void *p = mmap(TADDR, TLEN, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (p != TADDR)
        return 3;
    nxl_agent_config_t cfg;
    nxl_agent_config_init(&cfg);
    cfg.name = "T";
    cfg.listen_addr = "127.0.0.1";
    cfg.listen_port = (uint16_t)atoi(argv[3]);
    cfg.etcd_endpoints = etcd;
    cfg.etcd_lease_ttl_s = 5;
    nxl_agent_t *a;
    if (nxl_agent_create(&cfg, &a) != NXL_SUCCESS) {
        fprintf(stderr, "target: %s\n", nxl_agent_last_error(NULL));
        return 4;
    }
    if (make_backend(a, c) != NXL_SUCCESS) {
        fprintf(stderr, "target: %s\n", nxl_agent_last_error(a));
        return 5;
    }
    nxl_desc_t d = {.addr = (uintptr_t)TADDR + (layout ? 4096 : 0), .len = TLEN - 4096};
    if (nxl_mem_register(a, NXL_DRAM, &d, 1, NULL) != NXL_SUCCESS)
        return 6;
    nxl_agent_on_notif(a, tg_notif, NULL);
    if (etcd) {
        nxl_future_t *f;
        if (nxl_md_publish(a, NULL, NULL, &f) != NXL_SUCCESS || nxl_future_wait(f, 10000)) {
            fprintf(stderr, "target: publish: %s\n", nxl_agent_last_error(a));
            return 8;
        }
        nxl_future_release(f);
    }
    uint16_t port = nxl_agent_listen_port(a);
    if (write(wfd, &port, sizeof(port)) != sizeof(port))
        return 7;
    close(wfd);
    uint64_t end = tl_now_ms() + 300000;
    while (tl_now_ms() < end && getppid() != 1)
        nxl_agent_run_once(a, 200);
    nxl_agent_destroy(a);
    return 0;
}

static struct {
    nxl_agent_t *a;
    const conf_t *c;
    int ci;
    tl_etcd_t etcd;         /* with etcd discovery: the server (pid 0: none) */
    uint16_t port;
    int rfd[2];             /* the targets' reports */
    pid_t pid;
    nxl_xfer_t *x;
    int inflight;
    uint64_t posted, done, ok, failed;
    uint64_t t_start;       /* the new target's start */
    uint64_t ready_ms;      /* how long it took to listen */
    int64_t first_ms;       /* its first successful re-post, ms after its start (-1: none yet) */
    int awaiting;           /* a BACK is awaited: time its first success */
} R;

/* a new target process: this program, exec'd */
static void spawn(int layout)
{
    int p[2];
    ck_assert(pipe(p) == 0);
    R.t_start = tl_now_ms();
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        /* nothing of the initiator's transports goes with it */
        for (int fd = 3; fd < 4096; fd++)
            if (fd != p[1] && fd != R.rfd[1])
                close(fd);
        char a2[8], a3[8], a4[8], a5[8], a6[8];
        const char *a7 = R.etcd.pid ? R.etcd.endpoint : "-";
        snprintf(a2, sizeof(a2), "%d", R.ci);
        snprintf(a3, sizeof(a3), "%u", R.port);
        snprintf(a4, sizeof(a4), "%d", p[1]);
        snprintf(a5, sizeof(a5), "%d", R.rfd[1]);
        snprintf(a6, sizeof(a6), "%d", layout);
        execl("/proc/self/exe", "check_lifecycle", "--target", a2, a3, a4, a5, a6, a7,
              (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    uint16_t port = 0;
    ssize_t n;
    do
        n = read(p[0], &port, sizeof(port));
    while (n < 0 && errno == EINTR);
    close(p[0]);
    ck_assert_msg(n == sizeof(port), "the target did not start");
    R.ready_ms = tl_now_ms() - R.t_start;
    R.pid = pid;
    if (!R.port)
        R.port = port;
    ck_assert_int_eq(port, R.port);
}

static void r_done(nxl_future_t *f, nxl_status_t st, void *arg)
{
    (void)arg;
    R.done++;
    R.inflight = 0;
    if (st == NXL_SUCCESS) {
        R.ok++;
        if (R.awaiting && E.up) {
            R.first_ms = (int64_t)(tl_now_ms() - R.t_start);
            R.awaiting = 0;
        }
    } else {
        R.failed++;
        ck_assert_msg(st == NXL_ERR_REMOTE_DISCONNECT || st == NXL_ERR_BACKEND,
                      "a WRITE failed with %s: %s", nxl_status_name(st), nxl_future_error(f));
    }
}

/* the stream: the same transfer posted again whenever it is idle and the
 * peer is up */
static nxl_status_t pump(void)
{
    if (R.inflight || !E.up)
        return NXL_SUCCESS;
    nxl_status_t st = nxl_xfer_post(R.x, r_done, NULL, NULL);
    if (st == NXL_SUCCESS) {
        R.posted++;
        R.inflight = 1;
    }
    return st;
}

static void r_turn(int ms)
{
    nxl_agent_run_once(R.a, ms);
    nxl_status_t st = pump();
    ck_assert_msg(st == NXL_SUCCESS || st == NXL_ERR_REMOTE_DISCONNECT,
                  "re-post: %s: %s", nxl_status_name(st), nxl_agent_last_error(R.a));
}

/* the report of the target's first WRITE: "ok SEED" */
static void report(unsigned seed)
{
    char line[128];
    size_t n = 0;
    uint64_t end = tl_now_ms() + 10000;
    while (tl_now_ms() < end && (n == 0 || line[n - 1] != '\n')) {
        struct pollfd pf = {.fd = R.rfd[0], .events = POLLIN};
        if (poll(&pf, 1, 0) == 1) {
            ssize_t k = read(R.rfd[0], line + n, 1);
            if (k == 1)
                n++;
        }
        r_turn(1);
    }
    line[n] = 0;
    char want[32];
    snprintf(want, sizeof(want), "ok %u\n", seed);
    ck_assert_msg(!strcmp(line, want), "%s: the target's check after BACK: '%s' (want '%s')",
                  R.c->label, line, want);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static void restarts(int ci, bool etcd)
{
    R = (typeof(R)){0};
    memset(&E, 0, sizeof(E));
    R.ci = ci;
    R.c = &confs[ci];
    const char *why = missing(R.c);
    if (why) {
        printf("SKIP: restarts: %s: %s\n", R.c->label, why);
        return;
    }
    char label[64];
    snprintf(label, sizeof(label), "%s%s", R.c->label, etcd ? " etcd" : "");
    if (etcd) {
        nxl_build_info_t bi = {.size = sizeof(bi)};
        nxl_build_info(&bi);
        if (!strstr(bi.options, "etcd=yes") || !tl_etcd_binary()) {
            printf("SKIP: restarts: %s: %s\n", label,
                   tl_etcd_binary() ? "libnxl built without etcd" : "no etcd binary");
            return;
        }
        ck_assert_msg(tl_etcd_start(&R.etcd) == 0, "etcd did not start (see %s/etcd.log)",
                      R.etcd.dir);
    }
    const char *e = getenv("NXL_LIFECYCLE_RESTARTS");
    int n = e && atoi(e) > 0 ? atoi(e) : 5;
    ck_assert(pipe(R.rfd) == 0);
    spawn(0);

    nxl_agent_config_t cfg;
    tl_config(&cfg, "I", 0);
    cfg.etcd_endpoints = etcd ? R.etcd.endpoint : NULL;
    nxl_agent_t *a = R.a = tl_agent_cfg(&cfg, 0);
    ck_assert_msg(make_backend(a, R.c) == NXL_SUCCESS, "%s", nxl_agent_last_error(a));
    nxl_agent_on_peer(a, on_peer, NULL);
    unsigned char *lbuf = tl_xalloc(WLEN);
    tl_reg_dram(a, lbuf, WLEN);
    nxl_future_t *f;
    if (etcd) {
        nxl_status_t st = nxl_md_fetch_etcd(a, "T", NULL, 10000, NULL, NULL, &f);
        if (st == NXL_ERR_NOT_SUPPORTED) {
            printf("SKIP: restarts: %s: %s\n", label, nxl_agent_last_error(a));
            tl_kill_pid(R.pid);
            nxl_agent_destroy(a);
            tl_etcd_stop(&R.etcd);
            tl_rm_dir(R.etcd.dir);
            free(lbuf);
            return;
        }
        ck_assert_int_eq(st, NXL_SUCCESS);
    } else {
        ck_assert(nxl_md_fetch(a, "T", "127.0.0.1", R.port, NULL, NULL, &f) == NXL_SUCCESS);
    }
    ck_assert_msg(nxl_future_wait(f, 10000) == NXL_SUCCESS, "fetch: %s", nxl_future_error(f));
    nxl_future_release(f);
    /* the whole write in 64 elements of 4 KiB, spread over the region */
    nxl_desc_t ld[64], rd[64];
    for (int k = 0; k < 64; k++) {
        ld[k] = (nxl_desc_t){.addr = (uintptr_t)lbuf + (size_t)k * (WLEN / 64), .len = WLEN / 64};
        rd[k] = (nxl_desc_t){.addr = (uintptr_t)TADDR + (size_t)k * (WLEN / 64), .len = WLEN / 64};
    }
    nxl_dlist_t l = {NXL_DRAM, ld, 64}, r = {NXL_DRAM, rd, 64};
    nxl_xfer_opts_t o;
    nxl_xfer_opts_init(&o);
    o.notif = "chk 0";
    o.notif_len = 5;
    tl_fill(lbuf, WLEN, 0);
    ck_assert_msg(nxl_xfer_create(a, NXL_WRITE, &l, &r, "T", &o, &R.x) == NXL_SUCCESS, "%s",
                  nxl_agent_last_error(a));
    uint64_t end = tl_now_ms() + 5000;
    while (!E.up && tl_now_ms() < end)
        nxl_agent_run_once(a, 1);
    ck_assert_str_eq(E.seq, "U");
    report(0);

    int64_t *ms = calloc((size_t)n + 1, sizeof(*ms)), *ready = calloc((size_t)n + 1, sizeof(*ready));
    for (int k = 1; k <= n + 1; k++) {
        int gone = k == n + 1; /* the last one: another layout */
        /* a few WRITEs of the stream, then the target dies under it */
        uint64_t ok0 = R.ok;
        end = tl_now_ms() + 5000;
        while (R.ok < ok0 + 3 && tl_now_ms() < end)
            r_turn(1);
        ck_assert_msg(R.ok >= ok0 + 3, "%s: the stream stalled", R.c->label);
        tl_kill_pid(R.pid);
        size_t downs = 0;
        end = tl_now_ms() + 20000;
        do {
            r_turn(1);
            downs = 0;
            for (size_t j = 0; j < E.n; j++)
                downs += E.seq[j] == 'D';
        } while (downs < (size_t)k && tl_now_ms() < end);
        ck_assert_msg(downs == (size_t)k, "%s: restart %d: no DOWN (events %s)", R.c->label, k,
                      E.seq);
        ck_assert(!R.inflight);
        /* the next incarnation's data, with its seed in the notification */
        char note[16];
        snprintf(note, sizeof(note), "chk %d", k);
        tl_fill(lbuf, WLEN, (uint32_t)k);
        ck_assert(nxl_xfer_set_notif(R.x, note, strlen(note)) == NXL_SUCCESS);
        R.first_ms = -1;
        R.awaiting = 1;
        spawn(gone);
        end = tl_now_ms() + 20000;
        if (gone) {
            while (!E.up && tl_now_ms() < end)
                nxl_agent_run_once(a, 1);
            ck_assert_msg(E.up, "%s: no BACK after the last restart", R.c->label);
            ck_assert_int_eq(nxl_xfer_post(R.x, NULL, NULL, NULL), NXL_ERR_NOT_FOUND);
            ck_sentence(nxl_agent_last_error(a), "element 0");
            break;
        }
        while (R.first_ms < 0 && tl_now_ms() < end)
            r_turn(1);
        ck_assert_msg(R.first_ms >= 0, "%s: restart %d: no successful re-post (events %s)",
                      R.c->label, k, E.seq);
        ms[k - 1] = R.first_ms;
        ready[k - 1] = (int64_t)R.ready_ms;
        report((unsigned)k);
    }
    /* every event once, in order: U, then D B for each restart */
    ck_assert_int_eq(E.n, 1 + 2 * (size_t)(n + 1));
    for (size_t j = 1; j < E.n; j++)
        ck_assert_msg(E.seq[j] == (j % 2 ? 'D' : 'B'), "events %s", E.seq);
    ck_assert(E.inc == (uint64_t)n + 2);
    ck_assert_int_eq(E.bad, 0);
    qsort(ms, (size_t)n, sizeof(*ms), cmp_i64);
    qsort(ready, (size_t)n, sizeof(*ready), cmp_i64);
    printf("%s: %d restarts under a stream of WRITEs (%llu posted, %llu failed at DOWN): from "
           "the new target's start to the first successful re-post: median %lld ms, worst "
           "%lld ms (the target itself listened after: median %lld ms, worst %lld ms)\n", label,
           n, (unsigned long long)R.posted, (unsigned long long)R.failed, (long long)ms[n / 2],
           (long long)ms[n - 1], (long long)ready[n / 2], (long long)ready[n - 1]);
    fflush(stdout);
    ck_assert_msg(ms[n - 1] <= 5000, "%s: worst recovery %lld ms", label, (long long)ms[n - 1]);
    /* every callback once: every post accepted completed, once */
    nxl_xfer_release(R.x);
    tl_kill_pid(R.pid);
    nxl_agent_destroy(a);
    ck_assert_int_eq(R.done, R.posted);
    free(ms);
    free(ready);
    free(lbuf);
    close(R.rfd[0]);
    close(R.rfd[1]);
    if (etcd) {
        tl_etcd_stop(&R.etcd);
        tl_rm_dir(R.etcd.dir);
    }
}

START_TEST(t_restarts)
{
    restarts(_i, false);
}
END_TEST

/* A threaded initiator whose application thread posts without callbacks
 * (the posts run on that thread while the reactor sleeps): the target
 * killed, the failure seen there (UCX refuses the post: the connection
 * failed before) still makes the peer DOWN, on the reactor; started
 * again, it comes BACK and the same transfer works. */
static int events_seen(void)
{
    return (int)__atomic_load_n(&E.n, __ATOMIC_ACQUIRE);
}

/* posts x whenever it is idle until cond() or ms passed; the successes */
static int post_idle(nxl_xfer_t *x, int (*cond)(int ok), int ms)
{
    int ok = 0;
    uint64_t end = tl_now_ms() + (uint64_t)ms;
    bool posted = false;
    while (!cond(ok) && tl_now_ms() < end) {
        nxl_status_t st = nxl_xfer_status(x);
        if (st == NXL_IN_PROG) {
            usleep(100);
            continue;
        }
        ok += posted && st == NXL_SUCCESS;
        posted = nxl_xfer_post(x, NULL, NULL, NULL) == NXL_SUCCESS;
        if (!posted)
            usleep(1000);
    }
    return ok;
}

static int three_ok(int ok) { return ok >= 3; }
static int down_seen(int ok) { (void)ok; return events_seen() >= 2; }
static int one_ok(int ok) { return ok >= 1; }

START_TEST(t_threaded_killed)
{
    R = (typeof(R)){0};
    memset(&E, 0, sizeof(E));
    R.c = &confs[R.ci = 0];
    const char *why = missing(R.c);
    if (why) {
        printf("SKIP: threaded_killed: %s\n", why);
        return;
    }
    ck_assert(pipe(R.rfd) == 0);
    spawn(0);
    nxl_agent_config_t cfg;
    tl_config(&cfg, "I", 0);
    cfg.threaded = 1;
    nxl_agent_t *a = tl_agent_cfg(&cfg, 0);
    ck_assert_msg(make_backend(a, R.c) == NXL_SUCCESS, "%s", nxl_agent_last_error(a));
    nxl_agent_on_peer(a, on_peer, NULL);
    unsigned char *lbuf = tl_xalloc(WLEN);
    tl_reg_dram(a, lbuf, WLEN);
    nxl_future_t *f;
    ck_assert(nxl_md_fetch(a, "T", "127.0.0.1", R.port, NULL, NULL, &f) == NXL_SUCCESS);
    ck_assert_msg(nxl_future_wait(f, 10000) == NXL_SUCCESS, "fetch: %s", nxl_future_error(f));
    nxl_future_release(f);
    nxl_desc_t ld = {.addr = (uintptr_t)lbuf, .len = WLEN}, rd = {.addr = (uintptr_t)TADDR,
                                                                   .len = WLEN};
    nxl_dlist_t l = {NXL_DRAM, &ld, 1}, r = {NXL_DRAM, &rd, 1};
    nxl_xfer_t *x;
    ck_assert(nxl_xfer_create(a, NXL_WRITE, &l, &r, "T", NULL, &x) == NXL_SUCCESS);
    ck_assert_int_ge(post_idle(x, three_ok, 10000), 3);
    tl_kill_pid(R.pid);
    post_idle(x, down_seen, 20000);
    ck_assert_msg(events_seen() == 2, "events %s", E.seq);
    spawn(0);
    ck_assert_int_ge(post_idle(x, one_ok, 20000), 1);
    ck_assert_str_eq(E.seq, "UDB");
    ck_assert_int_eq(E.bad, 0);
    nxl_xfer_release(x);
    tl_kill_pid(R.pid);
    nxl_agent_destroy(a);
    free(lbuf);
    close(R.rfd[0]);
    close(R.rfd[1]);
}
END_TEST

/* with etcd discovery, over UCX */
START_TEST(t_restarts_etcd)
{
    restarts(0, true);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--target"))
        return target_main(argc, argv);
    Suite *s = suite_create("lifecycle");
    TL_TCASE(s, "events", 60, NULL, NULL, t_events_rebind, t_recovery_option, t_older_metadata,
             t_threaded, t_strided_rebind, t_giveup_fetching, t_label_rebind, t_label_rebind_etcd);
    TCase *tc = tcase_create("restarts");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, t_restarts, 0, (int)NCONFS);
    tcase_add_test(tc, t_restarts_etcd);
    tcase_add_test(tc, t_threaded_killed);
    suite_add_tcase(s, tc);
    return tl_run(s);
}
