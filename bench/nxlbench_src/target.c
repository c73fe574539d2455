/* SPDX-License-Identifier: BSD-3-Clause */
/* nxlbench: the target of a two-process run. It registers a buffer and
 * answers the initiator's control notifications (see main.c). */
#include "nxlbench.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct {
    nxl_agent_t *a;
    buf_t buf;
    nxl_xfer_t *pong;       /* latency: WRITE back with "q" */
    bool pong_notif;        /* answer with a bare notification */
    bool pong_pending;      /* a ping came while the pong was in flight */
    uintptr_t iaddr;
    size_t ilen;
    double cpu0;
    long nv0, niv0;
    uint64_t t0;
    bool quit;
} T;

static void t_reply(const char *msg)
{
    if (nxl_notif_send(T.a, I_NAME, msg, strlen(msg), NULL, NULL, NULL) != NXL_SUCCESS)
        fprintf(stderr, "nxlbench target: reply failed: %s\n", nxl_agent_last_error(T.a));
}

static void t_pong(void);

static void t_pong_done(nxl_future_t *f, nxl_status_t st, void *arg)
{
    if (st != NXL_SUCCESS)
        fprintf(stderr, "nxlbench target: pong failed: %s\n", nxl_future_error(f));
    if (T.pong_pending) {
        T.pong_pending = false;
        t_pong();
    }
}

static void t_pong(void)
{
    nxl_status_t st;
    if (T.pong_notif)
        st = nxl_notif_send(T.a, I_NAME, "q", 1, NULL, NULL, NULL);
    else if (!T.pong)
        st = NXL_ERR_NOT_POSTED;
    else if ((st = nxl_xfer_post(T.pong, t_pong_done, NULL, NULL)) == NXL_ERR_REPOST_ACTIVE) {
        T.pong_pending = true;
        return;
    }
    if (st != NXL_SUCCESS)
        fprintf(stderr, "nxlbench target: pong: %s\n", nxl_agent_last_error(T.a));
}

static void t_published(nxl_future_t *f, nxl_status_t st, void *arg)
{
    char out[600];
    if (st == NXL_SUCCESS)
        snprintf(out, sizeof(out), "%s", (const char *)arg);
    else
        snprintf(out, sizeof(out), "bad: %s", nxl_future_error(f));
    t_reply(out);
}

static void t_notif(nxl_agent_t *a, const char *from, const void *msg, size_t len, void *arg)
{
    if (len == 1 && *(const char *)msg == 'p') {
        t_pong();
        return;
    }
    if (len == strlen(XFER_NOTIF) && !memcmp(msg, XFER_NOTIF, len))
        return; /* --xfer_notif: a bandwidth transfer's */
    char m[256], out[256];
    snprintf(m, sizeof(m), "%.*s", (int)(len < 255 ? len : 255), (const char *)msg);
    unsigned long long seed, off, n, addr;
    char src[16];
    if (sscanf(m, "setup %llu %15s %llu %llu", &n, src, &addr, &off) == 4) {
        if (T.pong) {
            nxl_xfer_release(T.pong);
            T.pong = NULL;
        }
        buf_free(T.a, &T.buf);
        T.iaddr = (uintptr_t)addr;
        T.ilen = (size_t)off;
        if (!buf_alloc(T.a, &T.buf, (size_t)n, !strcmp(src, "nxl"))) {
            snprintf(out, sizeof(out), "bad: %s", nxl_agent_last_error(T.a));
            t_reply(out);
            return;
        }
        snprintf(out, sizeof(out), "ready %llu", (unsigned long long)(uintptr_t)T.buf.p);
        if (O.etcd) {
            /* the initiator fetches the new buffer from etcd: answer once it is there */
            static char pending[256];
            snprintf(pending, sizeof(pending), "%s", out);
            if (nxl_md_publish(T.a, t_published, pending, NULL) != NXL_SUCCESS) {
                snprintf(out, sizeof(out), "bad: %s", nxl_agent_last_error(T.a));
                t_reply(out);
            }
            return;
        }
        t_reply(out);
    } else if (sscanf(m, "fill %llu %llu %llu", &seed, &off, &n) == 3) {
        if (!T.buf.p || off + n > T.buf.len) {
            t_reply("bad: range outside the buffer");
            return;
        }
        pat_fill(T.buf.p, (size_t)off, (size_t)n, seed);
        t_reply("ok");
    } else if (sscanf(m, "chk %llu %llu %llu", &seed, &off, &n) == 3) {
        if (!T.buf.p || off + n > T.buf.len) {
            t_reply("bad: range outside the buffer");
            return;
        }
        long long bad = pat_check(T.buf.p, (size_t)off, (size_t)n, seed);
        if (bad < 0)
            snprintf(out, sizeof(out), "ok");
        else
            snprintf(out, sizeof(out), "bad: target byte %lld of [%llu, %llu) differs", bad, off,
                     off + n);
        t_reply(out);
    } else if (sscanf(m, "lat %llu %15s", &n, src) == 2) {
        if (T.pong) {
            nxl_xfer_release(T.pong);
            T.pong = NULL;
        }
        T.pong_notif = !strcmp(src, "notif");
        if (!T.pong_notif) {
            /* the pong moves [n, 2n) back, so that its data differs from the ping's */
            nxl_desc_t ld = {.addr = (uintptr_t)T.buf.p + n, .len = (size_t)n};
            nxl_desc_t rd = {.addr = T.iaddr + n, .len = (size_t)n};
            nxl_dlist_t l = {NXL_DRAM, &ld, 1}, r = {NXL_DRAM, &rd, 1};
            nxl_xfer_opts_t o;
            nxl_xfer_opts_init(&o);
            o.notif = "q";
            o.notif_len = 1;
            if (!T.buf.p || 2 * n > T.buf.len || 2 * n > T.ilen ||
                nxl_xfer_create(T.a, NXL_WRITE, &l, &r, I_NAME, &o, &T.pong) != NXL_SUCCESS) {
                snprintf(out, sizeof(out), "bad: pong: %s", nxl_agent_last_error(T.a));
                t_reply(out);
                return;
            }
        }
        t_reply("ok");
    } else if (!strcmp(m, "idle0")) {
        usage_now(&T.cpu0, &T.nv0, &T.niv0);
        T.t0 = now_ns();
        t_reply("ok");
    } else if (!strcmp(m, "idle1")) {
        double cpu;
        long nv, niv;
        usage_now(&cpu, &nv, &niv);
        snprintf(out, sizeof(out), "idle %.9f %ld %ld %.6f", (now_ns() - T.t0) / 1e9, nv - T.nv0,
                 niv - T.niv0, cpu - T.cpu0);
        t_reply(out);
    } else if (!strcmp(m, "quit")) {
        T.quit = true;
        nxl_agent_stop(T.a);
    } else {
        snprintf(out, sizeof(out), "bad: unknown request '%.100s'", m);
        t_reply(out);
    }
}

int target_main(const char *host, uint16_t port, int port_fd)
{
    T.a = make_agent(T_NAME, host, port, "target");
    nxl_agent_on_notif(T.a, t_notif, NULL);
    if (O.etcd) {
        /* discovery through etcd: publish ours, load the initiator's */
        nxl_future_t *f;
        nxl_status_t st = nxl_md_publish(T.a, NULL, NULL, &f);
        if (st == NXL_SUCCESS)
            st = nxl_future_wait(f, 10000);
        if (st != NXL_SUCCESS)
            die("target: publishing to etcd at %s: %s", O.etcd,
                st == NXL_IN_PROG ? "no answer" : nxl_future_error(f));
        nxl_future_release(f);
    }
    uint16_t p = nxl_agent_listen_port(T.a);
    if (port_fd >= 0) {
        if (write(port_fd, &p, sizeof(p)) != sizeof(p))
            return 3;
        close(port_fd);
    } else if (!O.etcd) {
        fprintf(stderr, "nxlbench target: listening on %s:%u\n", host, p);
    }
    if (O.etcd) {
        nxl_future_t *f;
        nxl_status_t st = nxl_md_fetch_etcd(T.a, I_NAME, NULL, 120000, NULL, NULL, &f);
        if (st == NXL_SUCCESS)
            st = nxl_future_wait(f, 125000);
        if (st != NXL_SUCCESS)
            die("target: no initiator '%s' appeared in etcd at %s: %s", I_NAME, O.etcd,
                st == NXL_IN_PROG ? "timeout" : nxl_future_error(f));
        nxl_future_release(f);
        fprintf(stderr, "nxlbench target: found the initiator through etcd at %s\n", O.etcd);
    }
    /* libevent: nxl_agent_run() until "quit" stops it; another loop waits on
     * nothing but the agent (no timeout of nxlbench's own: the idle mode
     * counts the wake-ups) */
    while (!T.quit) {
        if (O.loop != LOOP_LIBEVENT)
            loop_turn(T.a, -1);
        else if (nxl_agent_run(T.a) != NXL_SUCCESS)
            break;
    }
    /* let the last replies go out */
    if (T.pong)
        nxl_xfer_release(T.pong);
    for (int i = 0; i < 5; i++)
        loop_turn(T.a, 0);
    buf_free(T.a, &T.buf);
    loop_detach(T.a);
    nxl_agent_destroy(T.a);
    return T.quit ? 0 : 1;
}
