/* SPDX-License-Identifier: BSD-3-Clause */
/* GPU memory: the CUDA transport, VRAM in the engine, the notification
 * relay, and futures completed by CUDA events.
 *
 * Everywhere (no GPU needed): nxl_plugins_available() lists CUDA with the
 * reason it cannot be created; creating it fails with NXL_ERR_BACKEND and
 * a sentence naming what is missing (the driver here); a missing runtime
 * is reported as such; VRAM registration and allocation without a
 * transport that serves VRAM are refused with a sentence;
 * nxl_future_from_cuda_event() without a CUDA transport is refused; the
 * engine's notification relay (a transfer's notification over a transport
 * without notifications goes through UCX after the data), exercised with
 * the POSIX transport, which carries none.
 *
 * On a GPU: every byte checked HtoD, DtoD and DtoH from 1 to 10,000
 * descriptors and 8 B to 256 MiB; registration checks; CUDA IPC READ and
 * WRITE between two processes with the notification after the data; a
 * peer killed mid-transfer; cancel and teardown with copies in flight (no
 * callback before the GPU is done with the buffers); the event-chained
 * post; an idle agent sleeps; the staged KV transfer into VRAM (the
 * re-layout kernel launched by the transport, against the stand-in's host
 * routine where there is no GPU). Without a GPU each of these prints
 * "SKIP: <test>: <reason>" and passes; quickstart counts those lines as
 * skipped. The peer process is this program run again (fork and exec
 * before it touches CUDA). */
#include "config.h"
#define CT_SUITE "check_cuda"
#include "cudatest.h"

#include <nxl/kv.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *self_exe = "/proc/self/exe"; /* this program, to run the peer */

static int have(const char *name)
{
    nxl_plugin_info_t info[16];
    return tl_plugin(name, info, 16) != NULL;
}

#define mk_agent tl_agent_bare
#define add_backend tl_backend

static void post(nxl_agent_t *a, nxl_xfer_t *x, res_t *r)
{
    tl_post(a, x, r);
    ck_assert_int_eq(r->calls, 0);
}

#define wait_res tl_wait_res

/* -------------------------------------------------- everywhere: no GPU needed */

/* CUDA is listed, with what it offers or why it cannot be created. */
START_TEST(t_plugins)
{
    cur_test = "t_plugins";
    nxl_plugin_info_t info[16];
    size_t n = nxl_plugins_available(info, 16);
    int found = 0;
    for (size_t i = 0; i < n && i < 16; i++) {
        if (strcmp(info[i].name, "CUDA"))
            continue;
        ck_assert_msg(is_sentence(info[i].reason), "reason: '%s'", info[i].reason);
#ifndef NXL_TEST_CUDA
        /* listed as a transport configure knows but did not build */
        ck_assert(!info[i].available);
        ck_assert_msg(strstr(info[i].reason, "not built") &&
                          strstr(info[i].reason, "--enable-cuda"),
                      "reason: '%s'", info[i].reason);
        printf("check_cuda: CUDA: %s\n", info[i].reason);
        continue;
#endif
        found = 1;
        ck_assert_uint_eq(info[i].mem_mask, (1u << NXL_DRAM) | (1u << NXL_VRAM));
        if (info[i].available) {
            ck_assert_msg(strstr(info[i].reason, "device"), "%s", info[i].reason);
        } else {
            ck_assert_msg(!strncmp(info[i].reason, "no CUDA runtime (", 17) ||
                              !strncmp(info[i].reason, "no CUDA driver (", 16) ||
                              !strncmp(info[i].reason, "no device", 9),
                          "reason: '%s'", info[i].reason);
        }
        printf("check_cuda: CUDA %s: %s\n", info[i].available ? "available" : "not available",
               info[i].reason);
    }
    /* UCX says whether it serves VRAM (a UCX built with CUDA) or leaves it
     * to the CUDA transport, and its memory types agree */
    for (size_t i = 0; i < n && i < 16; i++)
        if (!strcmp(info[i].name, "UCX") && info[i].available) {
            ck_assert_msg(strstr(info[i].reason, "CUDA"), "UCX: '%s'", info[i].reason);
            int with = strstr(info[i].reason, "UCX with CUDA") != NULL;
            ck_assert_int_eq(!!(info[i].mem_mask & (1u << NXL_VRAM)), with);
            printf("check_cuda: UCX: %s\n", info[i].reason);
        }
#ifdef NXL_TEST_CUDA
    ck_assert_msg(found, "CUDA is built but nxl_plugins_available() does not list it");
#else
    ck_assert_msg(!found, "CUDA is listed as available by a build without it");
#endif
}
END_TEST

/* Creating the transport where it cannot run: NXL_ERR_BACKEND and the
 * reason (here: the driver). Where it can: it describes its devices. */
START_TEST(t_create)
{
    cur_test = "t_create";
    nxl_agent_t *a = mk_agent("c", 0);
    nxl_plugin_info_t info[16];
    size_t n = nxl_plugins_available(info, 16);
    const nxl_plugin_info_t *cu = NULL;
    for (size_t i = 0; i < n && i < 16; i++)
        if (!strcmp(info[i].name, "CUDA") && info[i].mem_mask) /* built (in or a module) */
            cu = &info[i];
    nxl_backend_t *b = NULL;
    nxl_status_t st = nxl_backend_create(a, "CUDA", NULL, 0, &b);
    if (!cu) {
        ck_assert_int_eq(st, NXL_ERR_NOT_FOUND);
        ck_sentence(nxl_agent_last_error(a), "CUDA");
    } else if (!cu->available) {
        ck_assert_int_eq(st, NXL_ERR_BACKEND);
        ck_assert(b == NULL);
        const char *e = nxl_agent_last_error(a);
        ck_sentence(e, "CUDA");
        if (!strncmp(cu->reason, "no CUDA driver", 14))
            ck_sentence(e, "driver");
        else if (!strncmp(cu->reason, "no CUDA runtime", 15))
            ck_sentence(e, "runtime");
        printf("check_cuda: nxl_backend_create(CUDA): %s\n", e);
        /* the agent goes on without it */
        ck_assert(nxl_backend_get(a, "CUDA") == NULL);
    } else {
        ck_assert_msg(st == NXL_SUCCESS, "%s", nxl_agent_last_error(a));
        ck_assert_str_eq(nxl_backend_name(b), "CUDA");
        /* a bad parameter is refused with a sentence */
        nxl_agent_t *a2 = mk_agent("c2", 0);
        nxl_param_t p = {"streams", "0"};
        ck_assert_int_eq(nxl_backend_create(a2, "CUDA", &p, 1, NULL), NXL_ERR_INVALID_PARAM);
        ck_sentence(nxl_agent_last_error(a2), "streams");
        nxl_param_t q = {"colour", "blue"};
        ck_assert_int_eq(nxl_backend_create(a2, "CUDA", &q, 1, NULL), NXL_ERR_INVALID_PARAM);
        ck_sentence(nxl_agent_last_error(a2), "colour");
        nxl_agent_destroy(a2);
    }
    nxl_agent_destroy(a);
}
END_TEST

/* No runtime at all (NXL_CUDA_RUNTIME names a library that is not there):
 * said as such, by the listing and by creation. Runs in a process of its
 * own (Check forks each test), before anything loaded CUDA. */
START_TEST(t_no_runtime)
{
    cur_test = "t_no_runtime";
#ifndef NXL_TEST_CUDA
    skip("built without CUDA (--enable-cuda=no or no CUDA headers)");
    return;
#else
    if (!own_process_env("NXL_CUDA_RUNTIME", "/nonexistent/libcudart.so.13"))
        return;
    nxl_plugin_info_t info[16];
    const nxl_plugin_info_t *cu = tl_plugin("CUDA", info, 16);
    ck_assert_ptr_nonnull(cu);
    ck_assert_int_eq(cu->available, 0);
    ck_assert_msg(strstr(cu->reason, "no CUDA runtime (/nonexistent/libcudart.so.13: "
                                     "cannot open shared object file"),
                  "reason: '%s'", cu->reason);
    nxl_agent_t *a = mk_agent("r", 0);
    ck_assert_int_eq(nxl_backend_create(a, "CUDA", NULL, 0, NULL), NXL_ERR_BACKEND);
    ck_sentence(nxl_agent_last_error(a), "no CUDA runtime");
    ck_sentence(nxl_agent_last_error(a), "NXL_CUDA_RUNTIME");
    nxl_agent_destroy(a);
    unsetenv("NXL_CUDA_RUNTIME");
#endif
}
END_TEST

/* VRAM with no transport that serves it: refused, with a sentence that
 * names VRAM and what to create; nothing registered. */
START_TEST(t_vram_refused)
{
    cur_test = "t_vram_refused";
    nxl_agent_t *a = mk_agent("v", 0);
    if (have("POSIX"))
        add_backend(a, "POSIX");
    static char buf[4096];
    nxl_desc_t d = {.addr = (uintptr_t)buf, .len = sizeof(buf), .dev_id = 0};
    ck_assert_int_eq(nxl_mem_register(a, NXL_VRAM, &d, 1, NULL), NXL_ERR_NOT_SUPPORTED);
    const char *e = nxl_agent_last_error(a);
    ck_sentence(e, "VRAM");
#ifdef NXL_TEST_CUDA
    ck_sentence(e, "CUDA");
#else
    ck_sentence(e, "--enable-cuda");
#endif
    /* nothing was registered: preparing it finds nothing */
    nxl_prepped_t *p = NULL;
    ck_assert_int_eq(nxl_prep(a, NULL, NXL_VRAM, &d, 1, &p), NXL_ERR_NOT_FOUND);
    ck_assert(p == NULL);
    /* allocation likewise */
    void *ptr = (void *)1;
    ck_assert_int_eq(nxl_mem_alloc(a, NXL_VRAM, 4096, 0, &ptr), NXL_ERR_NOT_SUPPORTED);
    ck_assert(ptr == NULL);
    ck_sentence(nxl_agent_last_error(a), "VRAM");
    /* a named backend that does not serve VRAM */
    if (have("POSIX")) {
        ck_assert_int_eq(nxl_mem_register(a, NXL_VRAM, &d, 1, nxl_backend_get(a, "POSIX")),
                         NXL_ERR_NOT_SUPPORTED);
        ck_sentence(nxl_agent_last_error(a), "VRAM");
    }
    nxl_agent_destroy(a);
}
END_TEST

static int ev_calls;
static void ev_cb(nxl_future_t *f, nxl_status_t st, void *arg) { ev_calls++; }

/* nxl_future_from_cuda_event without a CUDA transport: refused, nothing
 * started, no callback ever. */
START_TEST(t_event_not_supported)
{
    cur_test = "t_event_not_supported";
    nxl_agent_t *a = mk_agent("e", 0);
    ev_calls = 0;
    nxl_future_t *f = (nxl_future_t *)1;
    int fake_event;
    ck_assert_int_eq(nxl_future_from_cuda_event(a, &fake_event, ev_cb, NULL, &f),
                     NXL_ERR_NOT_SUPPORTED);
    ck_assert(f == NULL);
    ck_sentence(nxl_agent_last_error(a), "CUDA");
    ck_assert_int_eq(nxl_future_from_cuda_event(a, NULL, ev_cb, NULL, &f), NXL_ERR_INVALID_PARAM);
    for (int i = 0; i < 5; i++)
        nxl_agent_run_once(a, 10);
    ck_assert_int_eq(ev_calls, 0);
    nxl_agent_destroy(a);
    ck_assert_int_eq(ev_calls, 0);
}
END_TEST

/* ---------------------------------------- the notification relay (POSIX + UCX) */

static char relay_dir[256], relay_path[300];
static unsigned char *relay_src;
static size_t relay_len;
static int relay_notifs, relay_bad;
static res_t relay_res;

/* the data is in the file when the notification arrives */
static void relay_notif(nxl_agent_t *a, const char *from, const void *msg, size_t len, void *arg)
{
    relay_notifs++;
    if (strcmp(from, nxl_agent_name(a)) || len != 5 || memcmp(msg, "saved", 5))
        relay_bad |= 1;
    unsigned char *back = malloc(relay_len);
    int fd = open(relay_path, O_RDONLY);
    if (fd < 0 || pread(fd, back, relay_len, 0) != (ssize_t)relay_len ||
        memcmp(back, relay_src, relay_len))
        relay_bad |= 2;
    if (fd >= 0)
        close(fd);
    free(back);
}

static nxl_agent_t *relay_agent(int with_ucx)
{
    nxl_agent_t *a = mk_agent("rl", 0);
    if (with_ucx)
        add_backend(a, "UCX");
    add_backend(a, "POSIX");
    nxl_agent_on_notif(a, relay_notif, NULL);
    return a;
}

static nxl_xfer_t *relay_xfer(nxl_agent_t *a, nxl_op_t op, void *buf, size_t len,
                              const char *notif, nxl_status_t want)
{
    nxl_desc_t l = {.addr = (uintptr_t)buf, .len = len};
    nxl_desc_t r = {.addr = 0, .len = len, .dev_id = 7};
    nxl_prepped_t *lp, *rp;
    ck_assert(nxl_prep(a, NULL, NXL_DRAM, &l, 1, &lp) == NXL_SUCCESS);
    ck_assert_msg(nxl_prep(a, nxl_agent_name(a), NXL_FILE, &r, 1, &rp) == NXL_SUCCESS, "%s",
                  nxl_agent_last_error(a));
    nxl_xfer_opts_t o;
    nxl_xfer_opts_init(&o);
    o.notif = notif;
    o.notif_len = notif ? strlen(notif) : 0;
    nxl_xfer_t *x = NULL;
    nxl_status_t st = nxl_xfer_make(a, op, lp, NULL, rp, NULL, 1, &o, &x);
    ck_assert_msg(st == want, "xfer_make: %s: %s", nxl_status_name(st), nxl_agent_last_error(a));
    nxl_prepped_release(lp);
    nxl_prepped_release(rp);
    return x;
}

static void relay_setup(void)
{
    snprintf(relay_dir, sizeof(relay_dir), "/tmp/nxl-cuda-XXXXXX");
    ck_assert(mkdtemp(relay_dir) != NULL);
    snprintf(relay_path, sizeof(relay_path), "%s/relay", relay_dir);
}

static void relay_teardown(void)
{
    unlink(relay_path);
    rmdir(relay_dir);
}

static void reg_relay(nxl_agent_t *a, void *buf, size_t len, size_t flen)
{
    nxl_desc_t d = {.addr = (uintptr_t)buf, .len = len};
    ck_assert(nxl_mem_register(a, NXL_DRAM, &d, 1, NULL) == NXL_SUCCESS);
    char meta[400];
    snprintf(meta, sizeof(meta), "path=%s;mode=create", relay_path);
    nxl_desc_t f = {.addr = 0, .len = flen, .dev_id = 7, .meta = meta, .meta_len = strlen(meta)};
    ck_assert_msg(nxl_mem_register(a, NXL_FILE, &f, 1, NULL) == NXL_SUCCESS, "%s",
                  nxl_agent_last_error(a));
}

/* A WRITE with a notification over POSIX (no notifications of its own):
 * the engine sends it through UCX (the agent reaches itself) once the
 * data is in the file (the file holds it when the notification arrives),
 * and completes the future after that send; once each, for every post. */
START_TEST(t_relay)
{
    cur_test = "t_relay";
    if (!have("UCX") || !have("POSIX")) {
        skip("needs the UCX and POSIX transports");
        return;
    }
    nxl_agent_t *a = relay_agent(1);
    relay_len = 1 * MiB;
    relay_src = malloc(relay_len);
    tl_fill(relay_src, relay_len, 5);
    reg_relay(a, relay_src, relay_len, relay_len);
    relay_notifs = relay_bad = 0;
    nxl_xfer_t *x = relay_xfer(a, NXL_WRITE, relay_src, relay_len, "saved", NXL_SUCCESS);
    ck_assert_str_eq(nxl_backend_name(nxl_xfer_backend(x)), "POSIX");
    for (int k = 0; k < 3; k++) {
        int before = relay_notifs;
        post(a, x, &relay_res);
        wait_res(a, &relay_res, 10000);
        ck_assert_msg(relay_res.st == NXL_SUCCESS, "%s", relay_res.why);
        ck_assert_msg(tl_run_until(a, &relay_notifs, before + 1, 5000), "no notification");
        for (int i = 0; i < 5; i++)
            nxl_agent_run_once(a, 10);
        ck_assert_int_eq(relay_notifs, before + 1);
        ck_assert_msg(!relay_bad, "notification before the data (or wrong): %d", relay_bad);
    }
    /* replaced and removed like any transfer's */
    ck_assert_int_eq(nxl_xfer_set_notif(x, "saved", 5), NXL_SUCCESS);
    ck_assert_int_eq(nxl_xfer_set_notif(x, NULL, 0), NXL_SUCCESS);
    int before = relay_notifs;
    post(a, x, &relay_res);
    wait_res(a, &relay_res, 10000);
    ck_assert_int_eq(relay_res.st, NXL_SUCCESS);
    for (int i = 0; i < 10; i++)
        nxl_agent_run_once(a, 10);
    ck_assert_int_eq(relay_notifs, before); /* no notification asked, none sent */
    nxl_xfer_release(x);
    nxl_agent_destroy(a);
    free(relay_src);
}
END_TEST

/* A transfer that fails sends no notification and keeps its own status;
 * a canceled one neither. */
START_TEST(t_relay_failure)
{
    cur_test = "t_relay_failure";
    if (!have("UCX") || !have("POSIX")) {
        skip("needs the UCX and POSIX transports");
        return;
    }
    nxl_agent_t *a = relay_agent(1);
    relay_len = 64 * KiB;
    relay_src = calloc(1, 2 * relay_len);
    /* the file is empty: a READ of it reaches its end (NXL_ERR_NOT_FOUND) */
    reg_relay(a, relay_src, 2 * relay_len, 2 * relay_len);
    relay_notifs = 0;
    nxl_xfer_t *x = relay_xfer(a, NXL_READ, relay_src, relay_len, "saved", NXL_SUCCESS);
    post(a, x, &relay_res);
    wait_res(a, &relay_res, 10000);
    ck_assert_int_eq(relay_res.st, NXL_ERR_NOT_FOUND);
    ck_sentence(relay_res.why, "end of the file");
    for (int i = 0; i < 10; i++)
        nxl_agent_run_once(a, 10);
    ck_assert_int_eq(relay_notifs, 0);
    nxl_xfer_release(x);
    /* canceled at once: CANCELED once, no notification */
    nxl_xfer_t *w = relay_xfer(a, NXL_WRITE, relay_src, relay_len, "saved", NXL_SUCCESS);
    nxl_future_t *f = NULL;
    memset(&relay_res, 0, sizeof(relay_res));
    ck_assert_int_eq(nxl_xfer_post(w, done_cb, &relay_res, &f), NXL_SUCCESS);
    nxl_future_cancel(f);
    wait_res(a, &relay_res, 10000);
    ck_assert_int_eq(relay_res.st, NXL_ERR_CANCELED);
    for (int i = 0; i < 10; i++)
        nxl_agent_run_once(a, 10);
    ck_assert_int_eq(relay_notifs, 0);
    nxl_future_release(f);
    /* teardown with one in flight: CANCELED once, inside destroy */
    memset(&relay_res, 0, sizeof(relay_res));
    ck_assert_int_eq(nxl_xfer_post(w, done_cb, &relay_res, NULL), NXL_SUCCESS);
    nxl_agent_destroy(a);
    ck_assert_int_eq(relay_res.calls, 1);
    free(relay_src);
}
END_TEST

/* Without a transport that carries notifications to the agent, a
 * transfer with one is refused when made (and a notification added later
 * too), with a sentence; without one it is fine. */
START_TEST(t_relay_refused)
{
    cur_test = "t_relay_refused";
    if (!have("POSIX")) {
        skip("needs the POSIX transport");
        return;
    }
    nxl_agent_t *a = relay_agent(0);
    relay_len = 4096;
    relay_src = calloc(1, relay_len);
    reg_relay(a, relay_src, relay_len, relay_len);
    relay_xfer(a, NXL_WRITE, relay_src, relay_len, "saved", NXL_ERR_NOT_SUPPORTED);
    const char *e = nxl_agent_last_error(a);
    ck_sentence(e, "POSIX");
    ck_sentence(e, "notifications");
    nxl_xfer_t *x = relay_xfer(a, NXL_WRITE, relay_src, relay_len, NULL, NXL_SUCCESS);
    ck_assert_int_eq(nxl_xfer_set_notif(x, "saved", 5), NXL_ERR_NOT_SUPPORTED);
    ck_sentence(nxl_agent_last_error(a), "notifications");
    post(a, x, &relay_res);
    wait_res(a, &relay_res, 10000);
    ck_assert_int_eq(relay_res.st, NXL_SUCCESS);
    nxl_xfer_release(x);
    nxl_agent_destroy(a);
    free(relay_src);
}
END_TEST

/* ======================================================== on a GPU */

#ifdef NXL_TEST_CUDA

/* the CUDA table, or NULL after printing why the test is skipped */
static const nxl_cuda_rt_t *need_gpu(void)
{
    char why[160];
    int kind;
    rt = nxl_cuda_rt_get(&kind, why, sizeof(why));
    if (!rt)
        skip(why);
    return rt;
}

/* need_gpu() for the test name (which a skip names) */
static const nxl_cuda_rt_t *gpu_test(const char *name)
{
    cur_test = name;
    return need_gpu();
}

static nxl_agent_t *gpu_agent(const char *name, int listen, int ucx)
{
    nxl_agent_t *a = mk_agent(name, listen);
    if (ucx)
        add_backend(a, "UCX");
    add_backend(a, "CUDA");
    return a;
}

static void reg(nxl_agent_t *a, nxl_mem_t t, void *p, size_t len, uint64_t dev)
{
    nxl_desc_t d = {.addr = (uintptr_t)p, .len = len, .dev_id = dev};
    nxl_status_t st = nxl_mem_register(a, t, &d, 1, NULL);
    ck_assert_msg(st == NXL_SUCCESS, "%s registration: %s", nxl_mem_name(t),
                  nxl_agent_last_error(a));
}

/* n blocks of blk bytes: local block i at lbase + i*blk, remote block
 * (reverse ? n-1-i : i) at rbase, the remote side prepared against
 * @p remote (the agent itself: loopback) */
static nxl_xfer_t *mk_xfer(nxl_agent_t *a, const char *remote, nxl_op_t op, nxl_mem_t lt,
                           void *lbase, void *rbase, size_t blk, size_t n, int reverse,
                           const char *notif)
{
    nxl_desc_t *ld = calloc(n, sizeof(*ld)), *rd = calloc(n, sizeof(*rd));
    for (size_t i = 0; i < n; i++) {
        ld[i] = (nxl_desc_t){.addr = (uintptr_t)lbase + i * blk, .len = blk};
        size_t j = reverse ? n - 1 - i : i;
        rd[i] = (nxl_desc_t){.addr = (uintptr_t)rbase + j * blk, .len = blk, .dev_id = 0};
    }
    nxl_prepped_t *lp, *rp;
    ck_assert_msg(nxl_prep(a, NULL, lt, ld, n, &lp) == NXL_SUCCESS, "prep local: %s",
                  nxl_agent_last_error(a));
    ck_assert_msg(nxl_prep(a, remote, NXL_VRAM, rd, n, &rp) == NXL_SUCCESS, "prep VRAM: %s",
                  nxl_agent_last_error(a));
    nxl_xfer_opts_t o;
    nxl_xfer_opts_init(&o);
    o.notif = notif;
    o.notif_len = notif ? strlen(notif) : 0;
    nxl_xfer_t *x = tl_make_all(a, op, lp, rp, n, &o, "CUDA");
    free(ld);
    free(rd);
    return x;
}

static void run_xfer(nxl_agent_t *a, nxl_xfer_t *x, const char *what)
{
    res_t r;
    post(a, x, &r);
    wait_res(a, &r, 60000);
    ck_assert_msg(r.st == NXL_SUCCESS, "%s: %s: %s", what, nxl_status_name(r.st), r.why);
}

static const struct {
    size_t n, blk;
} shapes[] = {
    {1, 8},         {10000, 8},      {1000, 4 * KiB}, {10000, 4 * KiB},
    {64, 1 * MiB},  {3, 1 * MiB + 3}, {1, 256 * MiB},
};

/* $NXL_TEST_SMALL (the mock's run): the largest sizes shrunk 8 times */
static size_t big(size_t len)
{
    return getenv("NXL_TEST_SMALL") ? len / 8 : len;
}

/* HtoD (reversed blocks), DtoD (reversed again), DtoH: every byte checked
 * after each step; one VRAM buffer from nxl_mem_alloc, one from
 * cudaMalloc registered by the application. */
START_TEST(t_roundtrip)
{
    if (!gpu_test("t_roundtrip"))
        return;
    size_t n = shapes[_i].n, blk = shapes[_i].blk;
    if (blk >= 64 * MiB)
        blk = big(blk);
    size_t len = n * blk;
    nxl_agent_t *a = gpu_agent("g", 0, 0);
    const char *me = nxl_agent_name(a);
    unsigned char *src = hmalloc(len), *dst = hmalloc(len), *want = hmalloc(len),
                  *tmp = hmalloc(len);
    tl_fill(src, len, (uint32_t)_i + 11);
    memset(dst, 0, len);
    reg(a, NXL_DRAM, src, len, 0);
    reg(a, NXL_DRAM, dst, len, 0);
    void *va = NULL;
    ck_assert_msg(nxl_mem_alloc(a, NXL_VRAM, len, 0, &va) == NXL_SUCCESS, "%s",
                  nxl_agent_last_error(a));
    void *vb = dmalloc(len);
    reg(a, NXL_VRAM, vb, len, 0);

    nxl_xfer_t *h2d = mk_xfer(a, me, NXL_WRITE, NXL_DRAM, src, va, blk, n, 1, NULL);
    run_xfer(a, h2d, "HtoD");
    reverse_blocks(want, src, blk, n);
    CK_CUDA(rt->cudaMemcpy(tmp, va, len, cudaMemcpyDeviceToHost));
    long d = first_diff(tmp, want, len);
    ck_assert_msg(d < 0, "HtoD %zu x %zu: byte %ld differs", n, blk, d);

    nxl_xfer_t *d2d = mk_xfer(a, me, NXL_WRITE, NXL_VRAM, va, vb, blk, n, 1, NULL);
    run_xfer(a, d2d, "DtoD");
    CK_CUDA(rt->cudaMemcpy(tmp, vb, len, cudaMemcpyDeviceToHost));
    d = first_diff(tmp, src, len);
    ck_assert_msg(d < 0, "DtoD %zu x %zu: byte %ld differs", n, blk, d);

    nxl_xfer_t *d2h = mk_xfer(a, me, NXL_READ, NXL_DRAM, dst, vb, blk, n, 1, NULL);
    run_xfer(a, d2h, "DtoH");
    d = first_diff(dst, want, len);
    ck_assert_msg(d < 0, "DtoH %zu x %zu: byte %ld differs", n, blk, d);
    /* VRAM to VRAM by READ too */
    nxl_xfer_t *rd = mk_xfer(a, me, NXL_READ, NXL_VRAM, vb, va, blk, n, 0, NULL);
    run_xfer(a, rd, "DtoD READ");
    CK_CUDA(rt->cudaMemcpy(tmp, vb, len, cudaMemcpyDeviceToHost));
    ck_assert_msg(first_diff(tmp, want, len) < 0, "DtoD READ differs");

    nxl_xfer_release(h2d);
    nxl_xfer_release(d2d);
    nxl_xfer_release(d2h);
    nxl_xfer_release(rd);
    ck_assert_int_eq(nxl_mem_free(a, va), NXL_SUCCESS);
    nxl_agent_destroy(a);
    CK_CUDA(rt->cudaFree(vb));
    free(src);
    free(dst);
    free(want);
    free(tmp);
}
END_TEST

/* Registration checks on the GPU: what is not device memory of that
 * device, of that length, is refused with a sentence; DRAM is pinned and
 * unpinned, memory pinned already is left as it is. */
START_TEST(t_registration)
{
    if (!gpu_test("t_registration"))
        return;
    nxl_agent_t *a = gpu_agent("r", 0, 0);
    size_t len = 1 * MiB;
    void *v = dmalloc(len);
    unsigned char *h = hmalloc(len);
    nxl_desc_t d = {.addr = (uintptr_t)h, .len = len, .dev_id = 0};
    ck_assert_int_eq(nxl_mem_register(a, NXL_VRAM, &d, 1, NULL), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(a), "not device memory");
    d = (nxl_desc_t){.addr = (uintptr_t)v, .len = len, .dev_id = (uint64_t)rt->ndev};
    ck_assert_int_eq(nxl_mem_register(a, NXL_VRAM, &d, 1, NULL), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(a), "device");
    d = (nxl_desc_t){.addr = (uintptr_t)v + 4096, .len = len, .dev_id = 0};
    ck_assert_int_eq(nxl_mem_register(a, NXL_VRAM, &d, 1, NULL), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(a), "past the end of its allocation");
    if (rt->ndev > 1) {
        d = (nxl_desc_t){.addr = (uintptr_t)v, .len = len, .dev_id = 1};
        ck_assert_int_eq(nxl_mem_register(a, NXL_VRAM, &d, 1, NULL), NXL_ERR_INVALID_PARAM);
        ck_sentence(nxl_agent_last_error(a), "lies on device 0");
    }
    void *m = NULL;
    if (rt->cudaMallocManaged(&m, len, cudaMemAttachGlobal) == cudaSuccess) {
        d = (nxl_desc_t){.addr = (uintptr_t)m, .len = len, .dev_id = 0};
        ck_assert_int_eq(nxl_mem_register(a, NXL_VRAM, &d, 1, NULL), NXL_ERR_NOT_SUPPORTED);
        ck_sentence(nxl_agent_last_error(a), "managed");
        rt->cudaFree(m);
    }
    d = (nxl_desc_t){.addr = (uintptr_t)v, .len = len, .dev_id = 0};
    ck_assert_int_eq(nxl_mem_register(a, NXL_DRAM, &d, 1, NULL), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(a), "register it as VRAM");
    /* a part of an allocation is fine */
    d = (nxl_desc_t){.addr = (uintptr_t)v + 4096, .len = len - 8192, .dev_id = 0};
    ck_assert_int_eq(nxl_mem_register(a, NXL_VRAM, &d, 1, NULL), NXL_SUCCESS);
    ck_assert_int_eq(nxl_mem_deregister(a, NXL_VRAM, &d, 1), NXL_SUCCESS);
    /* DRAM: pinned while registered */
    struct cudaPointerAttributes at;
    d = (nxl_desc_t){.addr = (uintptr_t)h, .len = len};
    ck_assert_int_eq(nxl_mem_register(a, NXL_DRAM, &d, 1, NULL), NXL_SUCCESS);
    memset(&at, 0, sizeof(at));
    CK_CUDA(rt->cudaPointerGetAttributes(&at, h));
    ck_assert_int_eq(at.type, cudaMemoryTypeHost);
    ck_assert_int_eq(nxl_mem_deregister(a, NXL_DRAM, &d, 1), NXL_SUCCESS);
    memset(&at, 0, sizeof(at));
    CK_CUDA(rt->cudaPointerGetAttributes(&at, h));
    ck_assert_int_eq(at.type, cudaMemoryTypeUnregistered);
    /* pinned by the application: accepted, and still pinned after */
    void *ph = NULL;
    CK_CUDA(rt->cudaHostAlloc(&ph, len, cudaHostAllocDefault));
    d = (nxl_desc_t){.addr = (uintptr_t)ph, .len = len};
    ck_assert_int_eq(nxl_mem_register(a, NXL_DRAM, &d, 1, NULL), NXL_SUCCESS);
    ck_assert_int_eq(nxl_mem_deregister(a, NXL_DRAM, &d, 1), NXL_SUCCESS);
    memset(&at, 0, sizeof(at));
    CK_CUDA(rt->cudaPointerGetAttributes(&at, ph));
    ck_assert_int_eq(at.type, cudaMemoryTypeHost);
    /* allocation on a device that is not there */
    void *p = NULL;
    ck_assert_int_eq(nxl_mem_alloc(a, NXL_VRAM, len, (uint64_t)rt->ndev, &p),
                     NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(a), "device");
    /* pinned host memory from nxl_mem_alloc */
    ck_assert_int_eq(nxl_mem_alloc(a, NXL_DRAM, len, 0, &p), NXL_SUCCESS);
    memset(&at, 0, sizeof(at));
    CK_CUDA(rt->cudaPointerGetAttributes(&at, p));
    ck_assert_int_eq(at.type, cudaMemoryTypeHost);
    ck_assert_int_eq(nxl_mem_free(a, p), NXL_SUCCESS);
    nxl_agent_destroy(a);
    rt->cudaFreeHost(ph);
    rt->cudaFree(v);
    free(h);
}
END_TEST

/* ----------------------------------------- cancel and teardown in flight */

static int tear_calls[64], tear_canceled, tear_other;
static unsigned char *poison_base;
static size_t poison_len;

/* a CANCELED callback may free its buffer: it overwrites it here, and the
 * GPU must not write into it afterwards */
static void poison_cb(nxl_future_t *f, nxl_status_t st, void *arg)
{
    size_t i = (size_t)((int *)arg - tear_calls);
    memset(poison_base + i * poison_len, 0xee, poison_len);
    if (st == NXL_ERR_CANCELED)
        tear_canceled++;
    else
        tear_other++;
    (*(int *)arg)++;
}

static void check_poison(void)
{
    CK_CUDA(rt->cudaDeviceSynchronize());
    usleep(100000);
    ct_check_marked(poison_base, 64 * poison_len);
}

/* 64 READs of 32 MiB from VRAM into pinned host memory, canceled (or
 * released) at once: each callback once, and only once the GPU is done. */
static void inflight(int teardown)
{
    nxl_agent_t *a = gpu_agent("t", 0, 0);
    enum { NX = 64 };
    poison_len = big(32 * MiB);
    size_t total = NX * poison_len;
    poison_base = hmalloc(total);
    memset(poison_base, 0, total);
    reg(a, NXL_DRAM, poison_base, total, 0);
    void *v = NULL;
    ck_assert(nxl_mem_alloc(a, NXL_VRAM, poison_len, 0, &v) == NXL_SUCCESS);
    CK_CUDA(rt->cudaMemset(v, 0x11, poison_len));
    nxl_xfer_t *x[NX];
    nxl_future_t *f[NX];
    tear_canceled = tear_other = 0;
    for (int i = 0; i < NX; i++) {
        tear_calls[i] = 0;
        x[i] = mk_xfer(a, nxl_agent_name(a), NXL_READ, NXL_DRAM, poison_base + i * poison_len, v,
                       poison_len / 8, 8, 0, NULL);
        ck_assert_int_eq(nxl_xfer_post(x[i], poison_cb, &tear_calls[i], teardown ? NULL : &f[i]),
                         NXL_SUCCESS);
    }
    if (teardown) {
        nxl_agent_destroy(a);
        ck_assert_int_eq(tear_canceled, NX);
    } else {
        ct_cancel_or_release(x, f, NX);
        ct_run_until_all(a, tear_calls, NX, 30000);
        /* a transfer the GPU finished before the cancel may succeed */
        ck_assert_int_eq(tear_canceled + tear_other, NX);
        ck_assert_msg(tear_canceled > 0, "no transfer was canceled in flight");
        ct_release_rest(x, f, NX);
    }
    for (int i = 0; i < NX; i++)
        ck_assert_int_eq(tear_calls[i], 1);
    check_poison();
    if (!teardown)
        nxl_agent_destroy(a);
    free(poison_base);
}

START_TEST(t_cancel_inflight)
{
    if (gpu_test("t_cancel_inflight"))
        inflight(0);
}
END_TEST

START_TEST(t_teardown_inflight)
{
    if (gpu_test("t_teardown_inflight"))
        inflight(1);
}
END_TEST

/* ------------------------------------------------ the event-chained post */

static struct {
    nxl_agent_t *a;
    nxl_xfer_t *x;
    uint64_t posted_ms, event_ms;
    res_t res;
    int ev_calls;
    nxl_status_t ev_st;
} EV;

static void CUDART_CB slow_host_fn(void *arg)
{
    usleep(200000); /* stands for a kernel that runs 200 ms */
}

/* the layer is ready: post its transfer from the callback */
static void on_layer_ready(nxl_future_t *f, nxl_status_t st, void *arg)
{
    EV.ev_calls++;
    EV.ev_st = st;
    EV.event_ms = tl_now_ms();
    if (st == NXL_SUCCESS)
        ck_assert_int_eq(nxl_xfer_post(EV.x, done_cb, &EV.res, NULL), NXL_SUCCESS);
}

START_TEST(t_event_post)
{
    if (!gpu_test("t_event_post"))
        return;
    EV.a = gpu_agent("ev", 0, 0);
    size_t len = 16 * MiB;
    void *v = NULL;
    ck_assert(nxl_mem_alloc(EV.a, NXL_VRAM, len, 0, &v) == NXL_SUCCESS);
    CK_CUDA(rt->cudaMemset(v, 0, len));
    unsigned char *h = hmalloc(len);
    memset(h, 0, len);
    reg(EV.a, NXL_DRAM, h, len, 0);
    EV.x = mk_xfer(EV.a, "ev", NXL_READ, NXL_DRAM, h, v, len / 16, 16, 0, NULL);
    cudaStream_t s;
    cudaEvent_t ev;
    CK_CUDA(rt->cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK_CUDA(rt->cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    /* "the kernel": 200 ms, then it writes the layer */
    CK_CUDA(rt->cudaLaunchHostFunc(s, slow_host_fn, NULL));
    CK_CUDA(rt->cudaMemsetAsync(v, 0x5a, len, s));
    CK_CUDA(rt->cudaEventRecord(ev, s));
    EV.ev_calls = 0;
    memset(&EV.res, 0, sizeof(EV.res));
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    EV.posted_ms = tl_now_ms();
    in_post = 1;
    nxl_future_t *f = NULL;
    ck_assert_int_eq(nxl_future_from_cuda_event(EV.a, ev, on_layer_ready, NULL, &f), NXL_SUCCESS);
    in_post = 0;
    ck_assert_int_eq(EV.ev_calls, 0);
    /* the event may be destroyed once the call returned */
    CK_CUDA(rt->cudaEventDestroy(ev));
    ck_assert_msg(tl_run_until(EV.a, &EV.res.calls, 1, 10000), "the chained READ did not complete");
    getrusage(RUSAGE_SELF, &r1);
    ck_assert_int_eq(EV.ev_calls, 1);
    ck_assert_int_eq(EV.ev_st, NXL_SUCCESS);
    ck_assert_int_eq(nxl_future_status(f), NXL_SUCCESS);
    ck_assert_msg(EV.event_ms - EV.posted_ms >= 150, "the event's callback ran after %llu ms, "
                  "before the GPU reached it", (unsigned long long)(EV.event_ms - EV.posted_ms));
    ck_assert_msg(EV.res.st == NXL_SUCCESS, "%s", EV.res.why);
    for (size_t i = 0; i < len; i++)
        if (h[i] != 0x5a)
            ck_abort_msg("byte %zu is 0x%02x: the READ ran before the GPU wrote the layer", i, h[i]);
    /* the reactor slept while the GPU worked: no polling */
    double cpu = (r1.ru_utime.tv_sec - r0.ru_utime.tv_sec) +
                 (r1.ru_utime.tv_usec - r0.ru_utime.tv_usec) / 1e6 +
                 (r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) +
                 (r1.ru_stime.tv_usec - r0.ru_stime.tv_usec) / 1e6;
    printf("check_cuda: event-chained post: %llu ms to the event, %.1f ms of CPU meanwhile\n",
           (unsigned long long)(EV.event_ms - EV.posted_ms), cpu * 1e3);
    ck_assert_msg(cpu < 0.1 || RUNNING_ON_VALGRIND, "%.0f ms of CPU while waiting 200 ms for "
                  "the GPU", cpu * 1e3);
    nxl_future_release(f);
    /* an event never recorded: completes on the next turn */
    CK_CUDA(rt->cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    res_t r;
    memset(&r, 0, sizeof(r));
    ck_assert_int_eq(nxl_future_from_cuda_event(EV.a, ev, done_cb, &r, NULL), NXL_SUCCESS);
    wait_res(EV.a, &r, 5000);
    ck_assert_int_eq(r.st, NXL_SUCCESS);
    /* canceled: CANCELED once the event is reached */
    CK_CUDA(rt->cudaLaunchHostFunc(s, slow_host_fn, NULL));
    CK_CUDA(rt->cudaEventRecord(ev, s));
    memset(&r, 0, sizeof(r));
    ck_assert_int_eq(nxl_future_from_cuda_event(EV.a, ev, done_cb, &r, &f), NXL_SUCCESS);
    nxl_future_cancel(f);
    wait_res(EV.a, &r, 5000);
    ck_assert_int_eq(r.st, NXL_ERR_CANCELED);
    nxl_future_release(f);
    /* teardown with a wait queued: CANCELED inside destroy */
    CK_CUDA(rt->cudaLaunchHostFunc(s, slow_host_fn, NULL));
    CK_CUDA(rt->cudaEventRecord(ev, s));
    memset(&r, 0, sizeof(r));
    ck_assert_int_eq(nxl_future_from_cuda_event(EV.a, ev, done_cb, &r, NULL), NXL_SUCCESS);
    nxl_xfer_release(EV.x);
    nxl_agent_destroy(EV.a);
    ck_assert_int_eq(r.calls, 1);
    ck_assert_int_eq(r.st, NXL_ERR_CANCELED);
    rt->cudaEventDestroy(ev);
    rt->cudaStreamDestroy(s);
    free(h);
}
END_TEST

/* An idle agent with a CUDA transport sleeps: its reactor wakes at most a
 * few times a second and the process burns next to no CPU. */
START_TEST(t_idle)
{
    if (!gpu_test("t_idle"))
        return;
    nxl_agent_t *a = gpu_agent("idle", 0, 0);
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    uint64_t end = tl_now_ms() + 1000;
    int turns = 0;
    while (tl_now_ms() < end) {
        nxl_agent_run_once(a, (int)(end - tl_now_ms()) + 1);
        turns++;
    }
    getrusage(RUSAGE_SELF, &r1);
    double cpu = (r1.ru_utime.tv_sec - r0.ru_utime.tv_sec) +
                 (r1.ru_utime.tv_usec - r0.ru_utime.tv_usec) / 1e6 +
                 (r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) +
                 (r1.ru_stime.tv_usec - r0.ru_stime.tv_usec) / 1e6;
    printf("check_cuda: idle second: %d reactor turns, %.1f ms of CPU\n", turns, cpu * 1e3);
    ck_assert_msg(turns <= 5, "%d wake-ups in an idle second", turns);
    ck_assert_msg(cpu < 0.05 || RUNNING_ON_VALGRIND, "%.0f ms of CPU in an idle second",
                  cpu * 1e3);
    nxl_agent_destroy(a);
}
END_TEST

/* ------------------------------------------- two processes: CUDA IPC */

#define PBUF (64u * MiB) /* the peer's VRAM */

/* The peer: agent "P" with UCX and CUDA and 64 MiB of VRAM; it answers
 * notifications from "I" (through UCX):
 *   "addr"               its VRAM's address
 *   "chk SEED OFF LEN"   whether VRAM [OFF, OFF+LEN) holds pattern SEED
 *   "fill SEED"          fills its VRAM with pattern SEED
 *   "seq K"              counted, no answer
 *   "quit"               exits */
static struct {
    nxl_agent_t *a;
    unsigned char *v;
    int quit;
} P;

static void p_reply(const char *msg)
{
    if (nxl_notif_send(P.a, "I", msg, strlen(msg), NULL, NULL, NULL) != NXL_SUCCESS)
        fprintf(stderr, "peer: reply failed: %s\n", nxl_agent_last_error(P.a));
}

static void p_notif(nxl_agent_t *a, const char *from, const void *msg, size_t len, void *arg)
{
    char m[256], out[256];
    snprintf(m, sizeof(m), "%.*s", (int)(len < 255 ? len : 255), (const char *)msg);
    unsigned seed;
    size_t off, n;
    if (sscanf(m, "chk %u %zu %zu", &seed, &off, &n) == 3 && off <= PBUF && n <= PBUF - off) {
        unsigned char *h = malloc(n ? n : 1);
        cudaError_t e = rt->cudaMemcpy(h, P.v + off, n, cudaMemcpyDeviceToHost);
        long bad = e == cudaSuccess ? tl_check(h, n, seed) : 0;
        free(h);
        if (bad < 0)
            snprintf(out, sizeof(out), "ok");
        else
            snprintf(out, sizeof(out), "bad byte %ld (%s)", bad, rt->cudaGetErrorString(e));
        p_reply(out);
    } else if (sscanf(m, "fill %u", &seed) == 1) {
        unsigned char *h = malloc(PBUF);
        tl_fill(h, PBUF, seed);
        cudaError_t e = rt->cudaMemcpy(P.v, h, PBUF, cudaMemcpyHostToDevice);
        free(h);
        p_reply(e == cudaSuccess ? "ok" : "bad fill");
    } else if (!strcmp(m, "addr")) {
        snprintf(out, sizeof(out), "addr %llu", (unsigned long long)(uintptr_t)P.v);
        p_reply(out);
    } else if (!strcmp(m, "quit")) {
        P.quit = 1;
    }
}

static int peer_main(int wfd)
{
    char why[160];
    if (!(rt = nxl_cuda_rt_get(NULL, why, sizeof(why)))) {
        fprintf(stderr, "peer: %s\n", why);
        return 10;
    }
    nxl_agent_config_t c;
    nxl_agent_config_init(&c);
    c.name = "P";
    c.listen_addr = "127.0.0.1";
    if (nxl_agent_create(&c, &P.a) != NXL_SUCCESS ||
        nxl_backend_create(P.a, "UCX", NULL, 0, NULL) != NXL_SUCCESS ||
        nxl_backend_create(P.a, "CUDA", NULL, 0, NULL) != NXL_SUCCESS) {
        fprintf(stderr, "peer: %s\n", P.a ? nxl_agent_last_error(P.a) : "agent");
        return 11;
    }
    void *v = NULL;
    if (nxl_mem_alloc(P.a, NXL_VRAM, PBUF, 0, &v) != NXL_SUCCESS) {
        fprintf(stderr, "peer: %s\n", nxl_agent_last_error(P.a));
        return 12;
    }
    P.v = v;
    unsigned char *h = malloc(PBUF);
    tl_fill(h, PBUF, 3);
    rt->cudaMemcpy(P.v, h, PBUF, cudaMemcpyHostToDevice);
    free(h);
    nxl_agent_on_notif(P.a, p_notif, NULL);
    uint16_t port = nxl_agent_listen_port(P.a);
    if (write(wfd, &port, sizeof(port)) != sizeof(port))
        return 13;
    close(wfd);
    uint64_t end = tl_now_ms() + 180000;
    while (!P.quit && tl_now_ms() < end && getppid() != 1)
        nxl_agent_run_once(P.a, 200);
    nxl_agent_destroy(P.a);
    return P.quit ? 0 : 14;
}

static struct {
    nxl_agent_t *a;
    pid_t pid;
    uintptr_t raddr;
    int nreply;
    char reply[256];
} I;

static void i_notif(nxl_agent_t *a, const char *from, const void *msg, size_t len, void *arg)
{
    snprintf(I.reply, sizeof(I.reply), "%.*s", (int)(len < 255 ? len : 255), (const char *)msg);
    I.nreply++;
}

static const char *ask(const char *msg, int timeout_ms)
{
    int before = I.nreply;
    ck_assert_msg(nxl_notif_send(I.a, "P", msg, strlen(msg), NULL, NULL, NULL) == NXL_SUCCESS,
                  "%s", nxl_agent_last_error(I.a));
    ck_assert_msg(tl_run_until(I.a, &I.nreply, before + 1, timeout_ms), "no reply to '%s'", msg);
    return I.reply;
}

/* starts the peer (fork, then exec: it initialises CUDA afresh) and
 * exchanges metadata with it; 0 when there is no GPU */
static int start_peer(void)
{
    if (!need_gpu())
        return 0;
    int p[2];
    ck_assert(pipe(p) == 0);
    I.pid = fork();
    ck_assert(I.pid >= 0);
    if (I.pid == 0) {
        close(p[0]);
        char fd[16];
        snprintf(fd, sizeof(fd), "%d", p[1]);
        execl(self_exe, self_exe, "--peer", fd, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    uint16_t port = 0;
    ck_assert_msg(read(p[0], &port, sizeof(port)) == sizeof(port), "the peer did not start");
    close(p[0]);
    I.a = gpu_agent("I", 0, 1);
    nxl_agent_on_notif(I.a, i_notif, NULL);
    nxl_future_t *f;
    ck_assert(nxl_md_fetch(I.a, "P", "127.0.0.1", port, NULL, NULL, &f) == NXL_SUCCESS);
    ck_assert_msg(nxl_future_wait(f, 10000) == NXL_SUCCESS, "fetch: %s", nxl_future_error(f));
    nxl_future_release(f);
    ck_assert(nxl_md_send(I.a, "127.0.0.1", port, NULL, NULL, &f) == NXL_SUCCESS);
    ck_assert_msg(nxl_future_wait(f, 10000) == NXL_SUCCESS, "send: %s", nxl_future_error(f));
    nxl_future_release(f);
    I.nreply = 0;
    unsigned long long addr = 0;
    ck_assert(sscanf(ask("addr", 10000), "addr %llu", &addr) == 1);
    I.raddr = (uintptr_t)addr;
    return 1;
}

static void stop_peer(void)
{
    tl_stop_peer(&I.a, &I.pid, "P");
}

/* READ and WRITE of the peer's VRAM through CUDA IPC, from host memory
 * and from VRAM; a WRITE's notification (relayed through UCX) reaches the
 * peer after the data: the peer checks its VRAM when it arrives. */
START_TEST(t_ipc)
{
    cur_test = "t_ipc";
    if (!start_peer())
        return;
    size_t len = 32 * MiB;
    unsigned char *h = hmalloc(len), *want = hmalloc(len);
    reg(I.a, NXL_DRAM, h, len, 0);
    void *v = NULL;
    ck_assert(nxl_mem_alloc(I.a, NXL_VRAM, len, 0, &v) == NXL_SUCCESS);
    /* READ: peer VRAM -> host, 512 blocks of 64 KiB, and 1 of 8 B */
    memset(h, 0, len);
    nxl_xfer_t *x = mk_xfer(I.a, "P", NXL_READ, NXL_DRAM, h, (void *)I.raddr, 64 * KiB, 512, 0,
                            NULL);
    run_xfer(I.a, x, "IPC READ");
    tl_fill(want, PBUF < len ? PBUF : len, 3);
    ck_assert_msg(first_diff(h, want, len) < 0, "IPC READ: data differs");
    nxl_xfer_release(x);
    /* WRITE: local VRAM -> peer VRAM with a notification the peer checks */
    tl_fill(want, len, 9);
    CK_CUDA(rt->cudaMemcpy(v, want, len, cudaMemcpyHostToDevice));
    char chk[64];
    snprintf(chk, sizeof(chk), "chk 9 0 %zu", len);
    int before = I.nreply;
    x = mk_xfer(I.a, "P", NXL_WRITE, NXL_VRAM, v, (void *)I.raddr, 1 * MiB, 32, 0, chk);
    run_xfer(I.a, x, "IPC WRITE with notification");
    ck_assert_msg(tl_run_until(I.a, &I.nreply, before + 1, 10000), "no answer to the notification");
    ck_assert_msg(!strcmp(I.reply, "ok"), "the peer saw its notification before the data: %s",
                  I.reply);
    nxl_xfer_release(x);
    /* WRITE from host memory, 10,000 descriptors of 512 B */
    tl_fill(h, 10000 * 512, 21);
    snprintf(chk, sizeof(chk), "chk 21 0 %u", 10000 * 512);
    before = I.nreply;
    x = mk_xfer(I.a, "P", NXL_WRITE, NXL_DRAM, h, (void *)I.raddr, 512, 10000, 0, chk);
    run_xfer(I.a, x, "IPC WRITE of 10,000 descriptors");
    ck_assert(tl_run_until(I.a, &I.nreply, before + 1, 10000));
    ck_assert_msg(!strcmp(I.reply, "ok"), "%s", I.reply);
    nxl_xfer_release(x);
    ck_assert_int_eq(nxl_mem_free(I.a, v), NXL_SUCCESS);
    stop_peer();
    free(h);
    free(want);
}
END_TEST

/* The peer killed while WRITEs with notifications are in flight: every
 * future completes once, later posts are refused, the agent goes on. */
static struct {
    int ok, failed;
} KC;

static void kc_done(nxl_future_t *f, nxl_status_t st, void *arg)
{
    (*(int *)arg)++;
    if (st == NXL_SUCCESS)
        KC.ok++;
    else
        KC.failed++;
}

START_TEST(t_ipc_peer_killed)
{
    cur_test = "t_ipc_peer_killed";
    if (!start_peer())
        return;
    enum { DEPTH = 4 };
    size_t blk = 8 * MiB;
    void *v = NULL;
    ck_assert(nxl_mem_alloc(I.a, NXL_VRAM, DEPTH * blk, 0, &v) == NXL_SUCCESS);
    nxl_xfer_t *x[DEPTH];
    int calls[DEPTH] = {0}, posts[DEPTH] = {0}, refused = 0;
    memset(&KC, 0, sizeof(KC));
    for (int i = 0; i < DEPTH; i++)
        x[i] = mk_xfer(I.a, "P", NXL_WRITE, NXL_VRAM, (char *)v + i * blk,
                       (void *)(I.raddr + i * blk), blk / 4, 4, 0, "seq");
    uint64_t t0 = tl_now_ms(), killed_at = 0;
    while (tl_now_ms() - t0 < 40000) {
        int inflight = 0;
        for (int i = 0; i < DEPTH; i++) {
            if (nxl_xfer_status(x[i]) == NXL_IN_PROG) {
                inflight++;
                continue;
            }
            nxl_status_t ps = nxl_xfer_post(x[i], kc_done, &calls[i], NULL);
            if (ps == NXL_SUCCESS) {
                posts[i]++;
                inflight++;
            } else {
                ck_assert_msg(killed_at, "post before the kill: %s: %s", nxl_status_name(ps),
                              nxl_agent_last_error(I.a));
                refused++;
            }
        }
        if (!killed_at && KC.ok > 8 * DEPTH) {
            tl_kill(&I.pid);
            killed_at = tl_now_ms();
        }
        if (killed_at && refused && !inflight)
            break;
        nxl_agent_run_once(I.a, 10);
    }
    ck_assert_msg(killed_at, "the peer was never killed (%d transfers done)", KC.ok);
    for (int i = 0; i < DEPTH; i++) {
        ck_assert_msg(nxl_xfer_status(x[i]) != NXL_IN_PROG, "transfer %d still in flight", i);
        ck_assert_int_eq(calls[i], posts[i]);
        nxl_xfer_release(x[i]);
    }
    ck_assert_msg(refused > 0, "posts after the peer died were not refused");
    printf("check_cuda: peer killed after %d transfers; %d failed after it, in %llu ms\n", KC.ok,
           KC.failed, (unsigned long long)(tl_now_ms() - killed_at));
    /* the agent still works: a loopback copy */
    unsigned char *h = hmalloc(4096);
    tl_fill(h, 4096, 4);
    reg(I.a, NXL_DRAM, h, 4096, 0);
    nxl_xfer_t *lx = mk_xfer(I.a, "I", NXL_WRITE, NXL_DRAM, h, v, 4096, 1, 0, NULL);
    run_xfer(I.a, lx, "loopback after the peer died");
    nxl_xfer_release(lx);
    stop_peer();
    free(h);
}
END_TEST

/* The staged KV transfer into VRAM: each group's READ into VRAM staging
 * (here a loopback READ through this transport's copies), then the
 * re-layout kernel launched by the CUDA transport, completion through the
 * reactor. Prefill TP 2, heads outer, into decode TP 1, tokens outer:
 * every byte of the decode region against offsets computed here. Over the
 * stand-in, the kernel is tests/mock_cudart.c's host routine, and its
 * trace shows each launch after the copies into the staging it reads,
 * with no copy into that staging while it runs. */
#define KVG_HEADS 8
#define KVG_ROW 32 /* head_size 16 x elem_size 2 */
#define KVG_PLANES 2
#define KVG_BLOCKS 8
#define KVG_BT 16
#define KVG_TOKENS 100

static unsigned char kvg_val(uint32_t l, size_t t, uint32_t h, uint32_t k)
{
    uint32_t x = (l * 2654435761u) ^ ((uint32_t)t * 40503u) ^ (h * 977u) ^ (k * 131u);
    x ^= x >> 11;
    x *= 0x9e3779b1u;
    return (unsigned char)((x >> 7) | 1); /* never 0xEE's partner 0 */
}

/* byte k of token t (in its block), head h (the model's) of block b, plane l */
static size_t kvg_off(const nxl_kv_layout_t *L, uint32_t l, uint32_t b, uint32_t t, uint32_t h,
                      uint32_t k)
{
    uint32_t hl = L->heads / L->tp_size, hi = h - L->tp_rank * hl;
    size_t bb = (size_t)L->block_tokens * hl * KVG_ROW;
    size_t in = L->order == NXL_KV_HEADS_OUTER ? ((size_t)hi * L->block_tokens + t) * KVG_ROW
                                               : ((size_t)t * hl + hi) * KVG_ROW;
    return (size_t)l * KVG_BLOCKS * bb + (size_t)b * bb + in + k;
}

typedef struct {
    char kind;
    uint64_t lo, hi;
} kvg_trace_t;

static int kvg_calls[2];
static nxl_status_t kvg_st[2];

static void kvg_cb(nxl_future_t *f, nxl_status_t st, void *arg)
{
    int i = (int)(intptr_t)arg;
    kvg_calls[i]++;
    kvg_st[i] = st;
    if (st != NXL_SUCCESS && st != NXL_ERR_CANCELED)
        fprintf(stderr, "check_cuda: t_kv_relayout: %s\n", nxl_future_error(f));
}

START_TEST(t_kv_relayout)
{
    if (!gpu_test("t_kv_relayout"))
        return;
    nxl_agent_t *a = gpu_agent("kv", 0, 0);
    nxl_kv_layout_t dl, pl[2];
    void *dm = NULL, *pm[2] = {NULL, NULL}, *stg = NULL;
    uint32_t di[KVG_BLOCKS] = {5, 2, 7, 0, 3, 6, 1}, pi[KVG_BLOCKS] = {1, 0, 6, 4, 2, 7, 3};
    nxl_kv_seq_t s = {di, 7, pi, 7, KVG_TOKENS};
    nxl_kv_layout_init(&dl);
    dl.layers = KVG_PLANES;
    dl.blocks = KVG_BLOCKS;
    dl.block_tokens = KVG_BT;
    dl.heads = KVG_HEADS;
    dl.head_size = 16;
    dl.elem_size = 2;
    dl.mem = NXL_VRAM;
    pl[0] = pl[1] = dl;
    dl.order = NXL_KV_TOKENS_OUTER;
    dl.len = (size_t)KVG_PLANES * KVG_BLOCKS * KVG_BT * KVG_HEADS * KVG_ROW;
    ck_assert_int_eq(nxl_mem_alloc(a, NXL_VRAM, dl.len, 0, &dm), NXL_SUCCESS);
    CK_CUDA(rt->cudaMemset(dm, 0xEE, dl.len));
    dl.base = (uintptr_t)dm;
    for (uint32_t r = 0; r < 2; r++) {
        pl[r].order = NXL_KV_HEADS_OUTER;
        pl[r].tp_size = 2;
        pl[r].tp_rank = r;
        pl[r].len = dl.len / 2;
        ck_assert_int_eq(nxl_mem_alloc(a, NXL_VRAM, pl[r].len, 0, &pm[r]), NXL_SUCCESS);
        unsigned char *h = hmalloc(pl[r].len);
        memset(h, 0x5a, pl[r].len);
        for (uint32_t l = 0; l < KVG_PLANES; l++)
            for (size_t t = 0; t < KVG_TOKENS; t++)
                for (uint32_t g = r * 4; g < r * 4 + 4; g++)
                    for (uint32_t k = 0; k < KVG_ROW; k++)
                        h[kvg_off(&pl[r], l, pi[t / KVG_BT], (uint32_t)(t % KVG_BT), g, k)] =
                            kvg_val(l, t, g, k);
        CK_CUDA(rt->cudaMemcpy(pm[r], h, pl[r].len, cudaMemcpyHostToDevice));
        free(h);
        pl[r].base = (uintptr_t)pm[r];
    }
    nxl_kv_opts_t o;
    nxl_kv_opts_init(&o);
    o.mode = NXL_KV_STAGED;
    o.slice_bytes = 4096; /* several groups: the ring of two halves turns */
    nxl_kv_xfer_t *kx[2];
#ifndef NXL_HAVE_KV_FATBIN
    /* built without nvcc: no kernel, refused with a sentence saying so */
    kx[0] = NULL;
    ck_assert_int_eq(nxl_kv_xfer_make(a, "kv", &dl, &pl[0], &s, NULL, &o, &kx[0]),
                     NXL_ERR_NOT_SUPPORTED);
    ck_assert(kx[0] == NULL);
    ck_sentence(nxl_agent_last_error(a), "nvcc");
    printf("check_cuda: staged VRAM KV transfer without the kernel: %s\n",
           nxl_agent_last_error(a));
    nxl_agent_destroy(a);
    return;
#endif
    /* rank 0: staging the transfer allocates (VRAM); rank 1: the application's */
    ck_assert_msg(nxl_kv_xfer_make(a, "kv", &dl, &pl[0], &s, NULL, &o, &kx[0]) == NXL_SUCCESS,
                  "%s", nxl_agent_last_error(a));
    size_t slen = 2 * 4096;
    ck_assert_int_eq(nxl_mem_alloc(a, NXL_VRAM, slen, 0, &stg), NXL_SUCCESS);
    nxl_desc_t sd = {.addr = (uintptr_t)stg, .len = slen};
    ck_assert_msg(nxl_kv_xfer_make(a, "kv", &dl, &pl[1], &s, &sd, &o, &kx[1]) == NXL_SUCCESS,
                  "%s", nxl_agent_last_error(a));
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(nxl_kv_xfer_mode(kx[i], NULL, NULL), NXL_KV_STAGED);
    long (*trace)(const kvg_trace_t **) = NULL;
    void (*trace_reset)(void) = NULL;
    const char *lib = getenv("NXL_CUDA_RUNTIME");
    void *mh = lib ? dlopen(lib, RTLD_NOW | RTLD_NOLOAD) : NULL;
    if (mh) {
        *(void **)&trace = dlsym(mh, "mock_cuda_trace");
        *(void **)&trace_reset = dlsym(mh, "mock_cuda_trace_reset");
    }
    unsigned char *want = malloc(dl.len), *got = malloc(dl.len);
    memset(want, 0xEE, dl.len);
    for (uint32_t l = 0; l < KVG_PLANES; l++)
        for (size_t t = 0; t < KVG_TOKENS; t++)
            for (uint32_t g = 0; g < KVG_HEADS; g++)
                for (uint32_t k = 0; k < KVG_ROW; k++)
                    want[kvg_off(&dl, l, di[t / KVG_BT], (uint32_t)(t % KVG_BT), g, k)] =
                        kvg_val(l, t, g, k);
    for (int round = 0; round < 2; round++) { /* posted again: the same bytes again */
        CK_CUDA(rt->cudaMemset(dm, 0xEE, dl.len));
        if (trace_reset)
            trace_reset();
        memset(kvg_calls, 0, sizeof(kvg_calls));
        int total = 0;
        for (int i = 0; i < 2; i++)
            ck_assert_int_eq(nxl_kv_xfer_post(kx[i], kvg_cb, (void *)(intptr_t)i, NULL),
                             NXL_SUCCESS);
        ck_assert_int_eq(kvg_calls[0] + kvg_calls[1], 0); /* never inside the call */
        for (int spin = 0; spin < 2000 && (total = kvg_calls[0] + kvg_calls[1]) < 2; spin++)
            tl_run_until(a, &kvg_calls[0], 1 << 30, 5);
        ck_assert_msg(total == 2, "%d of 2 staged VRAM KV transfers completed", total);
        /* once each: nothing more comes */
        tl_run_until(a, &kvg_calls[0], 1 << 30, 100);
        for (int i = 0; i < 2; i++) {
            ck_assert_int_eq(kvg_calls[i], 1);
            ck_assert_int_eq(kvg_st[i], NXL_SUCCESS);
        }
        CK_CUDA(rt->cudaMemcpy(got, dm, dl.len, cudaMemcpyDeviceToHost));
        long bad = tl_first_diff(got, want, dl.len);
        ck_assert_msg(bad < 0, "round %d: decode byte %ld is 0x%02x, want 0x%02x", round, bad,
                      bad < 0 ? 0 : got[bad], bad < 0 ? 0 : want[bad]);
        if (!trace)
            continue; /* a real GPU: the bytes are the proof */
        const kvg_trace_t *tr;
        long n = trace(&tr);
        ck_assert_msg(n >= 0, "the stand-in's trace overflowed");
        long launches = 0;
        for (long i = 0; i < n; i++) {
            if (tr[i].kind != 'K')
                continue;
            launches++;
            long copies = 0, end = -1;
            for (long j = 0; j < i; j++)
                copies += tr[j].kind == 'C' && tr[j].lo < tr[i].hi && tr[i].lo < tr[j].hi;
            ck_assert_msg(copies > 0, "launch %ld (staging 0x%llx-0x%llx) ran before any copy "
                          "into its staging", launches, (unsigned long long)tr[i].lo,
                          (unsigned long long)tr[i].hi);
            for (long j = i + 1; j < n && end < 0; j++)
                if (tr[j].kind == 'k' && tr[j].lo == tr[i].lo && tr[j].hi == tr[i].hi)
                    end = j;
            ck_assert_msg(end > i, "launch %ld has no end in the trace", launches);
            for (long j = i + 1; j < end; j++)
                ck_assert_msg(!(tr[j].kind == 'C' && tr[j].lo < tr[i].hi && tr[i].lo < tr[j].hi),
                              "a copy into the staging of launch %ld ran while it read it",
                              launches);
        }
        /* 2 planes x 7 prefill blocks x 2 KiB a transfer, 4 KiB groups */
        ck_assert_msg(launches == 14, "%ld launches of the re-layout, want 14 (7 groups of each "
                      "transfer)", launches);
        if (!round)
            printf("check_cuda: staged VRAM KV re-layout (TP 2 heads outer -> TP 1 tokens "
                   "outer): %ld launches, each after the copies into its staging, every byte "
                   "right\n", launches);
    }
    /* canceled at once: completes once, CANCELED, after what was in flight
     * ended (nothing written into the decode region after its callback);
     * posted again: every byte */
    CK_CUDA(rt->cudaMemset(dm, 0xEE, dl.len));
    memset(kvg_calls, 0, sizeof(kvg_calls));
    nxl_future_t *f = NULL;
    ck_assert_int_eq(nxl_kv_xfer_post(kx[0], kvg_cb, (void *)(intptr_t)0, &f), NXL_SUCCESS);
    nxl_future_cancel(f);
    ck_assert_msg(tl_run_until(a, &kvg_calls[0], 1, 10000), "the canceled transfer did not "
                  "complete");
    ck_assert_int_eq(kvg_st[0], NXL_ERR_CANCELED);
    CK_CUDA(rt->cudaMemcpy(got, dm, dl.len, cudaMemcpyDeviceToHost));
    tl_run_until(a, &kvg_calls[0], 1 << 30, 100);
    ck_assert_int_eq(kvg_calls[0], 1);
    unsigned char *later = malloc(dl.len);
    CK_CUDA(rt->cudaMemcpy(later, dm, dl.len, cudaMemcpyDeviceToHost));
    ck_assert_msg(tl_first_diff(got, later, dl.len) < 0, "the decode region changed after the "
                  "canceled transfer's callback");
    free(later);
    nxl_future_release(f);
    /* canceled mid-way (stand-in: once 3 launches ran), READs and
     * re-layouts in flight: completes once, nothing written after */
    for (int k = 0; trace && k < 3; k++) {
        memset(kvg_calls, 0, sizeof(kvg_calls));
        trace_reset();
        ck_assert_int_eq(nxl_kv_xfer_post(kx[0], kvg_cb, (void *)(intptr_t)0, &f), NXL_SUCCESS);
        for (int spin = 0; spin < 5000 && !kvg_calls[0]; spin++) {
            const kvg_trace_t *tr;
            long n = trace(&tr), ks = 0;
            for (long j = 0; j < n; j++)
                ks += tr[j].kind == 'K';
            if (ks >= 1 + k)
                break;
            nxl_agent_run_once(a, 0);
        }
        nxl_future_cancel(f);
        ck_assert(tl_run_until(a, &kvg_calls[0], 1, 10000));
        ck_assert_msg(kvg_st[0] == NXL_ERR_CANCELED || kvg_st[0] == NXL_SUCCESS, "status %d",
                      (int)kvg_st[0]);
        printf("check_cuda: staged VRAM KV transfer canceled after %d launch%s: %s\n", 1 + k,
               k ? "es" : "", nxl_strerror(kvg_st[0]));
        CK_CUDA(rt->cudaMemcpy(got, dm, dl.len, cudaMemcpyDeviceToHost));
        tl_run_until(a, &kvg_calls[0], 1 << 30, 50);
        ck_assert_int_eq(kvg_calls[0], 1);
        later = malloc(dl.len);
        CK_CUDA(rt->cudaMemcpy(later, dm, dl.len, cudaMemcpyDeviceToHost));
        ck_assert_msg(tl_first_diff(got, later, dl.len) < 0, "the decode region changed after "
                      "the callback of a transfer canceled mid-way");
        free(later);
        nxl_future_release(f);
    }
    memset(kvg_calls, 0, sizeof(kvg_calls));
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(nxl_kv_xfer_post(kx[i], kvg_cb, (void *)(intptr_t)i, NULL),
                         NXL_SUCCESS);
    for (int spin = 0; spin < 2000 && kvg_calls[0] + kvg_calls[1] < 2; spin++)
        tl_run_until(a, &kvg_calls[0], 1 << 30, 5);
    ck_assert_int_eq(kvg_calls[0] + kvg_calls[1], 2);
    ck_assert(kvg_st[0] == NXL_SUCCESS && kvg_st[1] == NXL_SUCCESS);
    CK_CUDA(rt->cudaMemcpy(got, dm, dl.len, cudaMemcpyDeviceToHost));
    ck_assert_msg(tl_first_diff(got, want, dl.len) < 0, "posted again after a cancel: bytes "
                  "wrong");
    for (int i = 0; i < 2; i++)
        nxl_kv_xfer_release(kx[i]);
    free(want);
    free(got);
    ck_assert_int_eq(nxl_mem_free(a, stg), NXL_SUCCESS);
    nxl_agent_destroy(a);
}
END_TEST

#endif /* NXL_TEST_CUDA */

/* Without CUDA in the build, the GPU cases are listed as skipped. */
#ifndef NXL_TEST_CUDA
START_TEST(t_gpu_cases)
{
    cur_test = "t_gpu_cases";
    skip("built without CUDA: the GPU cases (roundtrip, registration, cancel, teardown, "
         "event-chained post, idle, IPC, peer killed) are not compiled");
}
END_TEST
#endif

int main(int argc, char **argv)
{
    /* under valgrind /proc/self/exe is valgrind itself */
    if (argv[0] && strchr(argv[0], '/'))
        self_exe = argv[0];
#ifdef NXL_TEST_CUDA
    if (argc == 3 && !strcmp(argv[1], "--peer"))
        return peer_main(atoi(argv[2]));
#endif
    Suite *s = suite_create("cuda");
    TL_TCASE(s, "everywhere", 60, NULL, NULL, t_plugins, t_create, t_no_runtime, t_vram_refused,
             t_event_not_supported);
    TL_TCASE(s, "relay", 60, relay_setup, relay_teardown, t_relay, t_relay_failure,
             t_relay_refused);
    TCase *tg = tcase_create("gpu");
    tcase_set_timeout(tg, 180);
#ifdef NXL_TEST_CUDA
    tcase_add_loop_test(tg, t_roundtrip, 0, (int)(sizeof(shapes) / sizeof(*shapes)));
    tcase_add_test(tg, t_registration);
    tcase_add_test(tg, t_cancel_inflight);
    tcase_add_test(tg, t_teardown_inflight);
    tcase_add_test(tg, t_event_post);
    tcase_add_test(tg, t_idle);
    tcase_add_test(tg, t_ipc);
    tcase_add_test(tg, t_ipc_peer_killed);
    tcase_add_test(tg, t_kv_relayout);
#else
    (void)argc;
    (void)argv;
    tcase_add_test(tg, t_gpu_cases);
#endif
    suite_add_tcase(s, tg);
    return tl_run(s);
}
