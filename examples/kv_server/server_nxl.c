/* SPDX-License-Identifier: BSD-3-Clause */
/* kv_server serve: the agent on the application's event_base.
 *
 * Setup, every step a callback on that base (nothing waits): fetch the
 * store's metadata (nxl_md_fetch, retried while nobody listens yet), send
 * ours (nxl_md_send), say "hello"; the store answers "blocks ADDR COUNT
 * SIZE". Then its blocks are prepared once (nxl_prep against the store)
 * and the staging pool once locally.
 *
 * Each request then makes its transfer by index from those two lists
 * (nxl_xfer_make: staging buffer i <-> block N), or reuses its staging
 * buffer's last one when that was for the same block and direction, and
 * posts it; the completion callback answers the request. */
#include "server.h"

#include <event2/buffer.h>
#include <event2/keyvalq_struct.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------ transfers */

/* Completion of a READ or WRITE: exactly once, on the loop, never inside
 * nxl_xfer_post(). */
static void xfer_done(nxl_future_t *f, nxl_status_t st, void *arg)
{
    slot_t *sl = arg;
    server_t *s = sl->s;
    job_t *j = sl->job;
    uint64_t us = kvs_now_us() - sl->t_post;
    sl->job = NULL;
    sl->f = NULL;
    s->inflight--;
    s->xfers++;
    s->xfer_us += us;
    if (us > s->xfer_us_max)
        s->xfer_us_max = us;
    srv_gate_leave(s, j);
    if (st == NXL_SUCCESS && j->op == OP_GET) {
        srv_reply_block(s, j, sl); /* the buffer comes back once the reply left it */
    } else {
        srv_slot_put_back(s, sl);
        if (st == NXL_SUCCESS) {
            s->version[j->block] = j->version;
            evhttp_send_reply(j->req, 204, "No Content", NULL);
        } else {
            evhttp_add_header(evhttp_request_get_output_headers(j->req), "X-Nxl-Status",
                              nxl_status_name(st));
            srv_reply_text(s, j->req, 502, "Bad Gateway", "%s\n", nxl_future_error(f));
        }
    }
    nxl_future_release(f);
    free(j);
    srv_dispatch(s);
    srv_check_stopped(s);
}

/* The slot's transfer for (op, block): its last one when it matches, else
 * a new one made by index from the two lists prepared at start. */
static nxl_status_t slot_xfer(server_t *s, slot_t *sl, const job_t *j)
{
    if (sl->x && sl->x_op == j->op && sl->x_block == j->block) {
        s->xfer_reused++;
        return NXL_SUCCESS;
    }
    nxl_xfer_release(sl->x);
    sl->x = NULL;
    nxl_xfer_t *x;
    nxl_status_t st = nxl_xfer_make(s->a, j->op == OP_GET ? NXL_READ : NXL_WRITE, s->local,
                                    &sl->idx, s->remote, &j->block, 1, NULL, &x);
    if (st != NXL_SUCCESS)
        return st;
    s->xfer_made++;
    sl->x = x;
    sl->x_op = j->op;
    sl->x_block = j->block;
    return NXL_SUCCESS;
}

/* Posts the READ or WRITE of @p j on staging buffer @p sl (a PUT's body is
 * in it already); @p j is answered from xfer_done(), or here when nothing
 * started. */
void srv_nxl_start(server_t *s, job_t *j, slot_t *sl)
{
    nxl_status_t st = slot_xfer(s, sl, j);
    if (st == NXL_SUCCESS && j->op == OP_PUT) {
        char notif[64];
        int nl = snprintf(notif, sizeof(notif), "put %zu %" PRIu64, j->block, j->version);
        st = nxl_xfer_set_notif(sl->x, notif, (size_t)nl);
    }
    if (st == NXL_SUCCESS) {
        srv_gate_enter(s, j);
        sl->job = j;
        sl->t_post = kvs_now_us();
        st = nxl_xfer_post(sl->x, xfer_done, sl, &sl->f);
        if (st == NXL_SUCCESS) {
            s->inflight++;
            return;
        }
        sl->job = NULL;
        srv_gate_leave(s, j);
    }
    /* nothing started: no callback will come; answer here */
    srv_slot_put_back(s, sl);
    evhttp_add_header(evhttp_request_get_output_headers(j->req), "X-Nxl-Status",
                      nxl_status_name(st));
    srv_reply_text(s, j->req, 502, "Bad Gateway", "%s\n", nxl_agent_last_error(s->a));
    free(j);
}

/* Shutting down: whatever is still in flight completes, canceled, on the
 * next turn. */
void srv_nxl_cancel_all(server_t *s)
{
    for (unsigned i = 0; s->slots && i < s->o->staging; i++)
        if (s->slots[i].f)
            nxl_future_cancel(s->slots[i].f);
}

/* ---------------------------------------------------------------- setup */

/* "blocks ADDR COUNT SIZE" from the store: prepare its blocks once */
static void on_notif(nxl_agent_t *a, const char *from, const void *msg, size_t len, void *arg)
{
    server_t *s = arg;
    const kvs_opts_t *o = s->o;
    char m[128];
    kvs_msg_text(m, sizeof(m), msg, len);
    uintptr_t addr;
    unsigned long count;
    size_t size;
    if (strcmp(from, s->store) ||
        sscanf(m, "blocks %" SCNxPTR " %lu %zu", &addr, &count, &size) != 3) {
        fprintf(stderr, "serve: unexpected notification from '%s': '%s'\n", from, m);
        return;
    }
    if (s->ready || s->stopping)
        return;
    if (count != o->blocks || size != o->block_size) {
        srv_fail(s, "the store holds %lu blocks of %zu bytes; this server was started with "
                 "--blocks %lu --block_size %zu", count, size, o->blocks, o->block_size);
        return;
    }
    nxl_desc_t *d = calloc(o->blocks > o->staging ? o->blocks : o->staging, sizeof(*d));
    if (!d) {
        srv_fail(s, "out of memory");
        return;
    }
    for (unsigned long b = 0; b < o->blocks; b++)
        d[b] = (nxl_desc_t){.addr = addr + b * o->block_size, .len = o->block_size};
    nxl_status_t st = nxl_prep(a, s->store, NXL_DRAM, d, o->blocks, &s->remote);
    if (st == NXL_SUCCESS) {
        for (unsigned i = 0; i < o->staging; i++)
            d[i] = (nxl_desc_t){.addr = (uintptr_t)s->slots[i].buf, .len = o->block_size};
        st = nxl_prep(a, NULL, NXL_DRAM, d, o->staging, &s->local);
    }
    free(d);
    if (st != NXL_SUCCESS) {
        srv_fail(s, "nxl_prep: %s", nxl_agent_last_error(a));
        return;
    }
    srv_ready(s);
}

static void hello_sent(nxl_future_t *f, nxl_status_t st, void *arg)
{
    server_t *s = arg;
    if (st != NXL_SUCCESS && !s->stopping && !s->failed)
        srv_fail(s, "saying hello to '%s' failed: %s", s->store, nxl_future_error(f));
}

static void md_sent(nxl_future_t *f, nxl_status_t st, void *arg)
{
    server_t *s = arg;
    if (s->stopping || s->failed)
        return;
    if (st != NXL_SUCCESS) {
        srv_fail(s, "sending this server's metadata to %s:%u failed: %s", s->o->store.host,
                 s->o->store.port, nxl_future_error(f));
        return;
    }
    if (nxl_notif_send(s->a, s->store, "hello", 5, hello_sent, s, NULL) != NXL_SUCCESS)
        srv_fail(s, "cannot notify '%s': %s", s->store, nxl_agent_last_error(s->a));
}

static void md_fetched(nxl_future_t *f, nxl_status_t st, void *arg)
{
    server_t *s = arg;
    const kvs_opts_t *o = s->o;
    if (s->stopping || s->failed)
        return;
    if (st == NXL_ERR_REMOTE_DISCONNECT && kvs_now_us() < s->deadline) {
        /* nobody listens yet: server.c's timer calls srv_nxl_connect() again */
        struct timeval tv = {0, 200000};
        evtimer_add(s->ev_timer, &tv);
        return;
    }
    if (st != NXL_SUCCESS) {
        srv_fail(s, "cannot fetch the store's metadata from %s:%u: %s", o->store.host,
                 o->store.port, nxl_future_error(f));
        return;
    }
    snprintf(s->store, sizeof(s->store), "%s", nxl_future_peer(f));
    if (nxl_md_send(s->a, o->store.host, o->store.port, md_sent, s, NULL) != NXL_SUCCESS)
        srv_fail(s, "nxl_md_send: %s", nxl_agent_last_error(s->a));
}

/* Starts (or retries) the setup chain above. */
void srv_nxl_connect(server_t *s)
{
    if (nxl_md_fetch(s->a, NULL, s->o->store.host, s->o->store.port, md_fetched, s, NULL) !=
        NXL_SUCCESS)
        srv_fail(s, "nxl_md_fetch: %s", nxl_agent_last_error(s->a));
}

/* The agent, on the application's base, and the staging buffers. */
bool srv_nxl_setup(server_t *s)
{
    const kvs_opts_t *o = s->o;
    char name[64];
    snprintf(name, sizeof(name), "kv_server-%ld", (long)getpid());
    nxl_agent_config_t cfg;
    nxl_agent_config_init(&cfg);
    cfg.name = name;
    cfg.base = s->base; /* embedded: the application runs the loop */
    if (nxl_agent_create(&cfg, &s->a) != NXL_SUCCESS) {
        fprintf(stderr, "serve: cannot create the agent: %s\n", nxl_agent_last_error(NULL));
        return false;
    }
    if (nxl_backend_create(s->a, "UCX", NULL, 0, NULL) != NXL_SUCCESS) {
        fprintf(stderr, "serve: cannot create the UCX transport: %s\n",
                nxl_agent_last_error(s->a));
        return false;
    }
    void *p;
    if (nxl_mem_alloc(s->a, NXL_DRAM, (size_t)o->staging * o->block_size, 0, &p) !=
        NXL_SUCCESS) {
        fprintf(stderr, "serve: cannot allocate the staging buffers: %s\n",
                nxl_agent_last_error(s->a));
        return false;
    }
    s->staging = p;
    nxl_agent_on_notif(s->a, on_notif, s);
    return true;
}

/* After the loop, before evhttp_free(): transfers, lists, memory, agent.
 * What is still in flight (the loop was left by force) completes inside
 * nxl_agent_destroy(), canceled, and is answered 502 there; a setup step
 * still pending completes there too. Replies still queued in evhttp may
 * refer to staging buffers: evhttp_free() frees them without reading. */
void srv_nxl_teardown(server_t *s)
{
    if (!s->a)
        return;
    for (unsigned i = 0; s->slots && i < s->o->staging; i++) {
        nxl_xfer_release(s->slots[i].x);
        s->slots[i].x = NULL;
    }
    nxl_prepped_release(s->remote);
    nxl_prepped_release(s->local);
    s->remote = s->local = NULL;
    if (s->staging && !s->inflight && nxl_mem_free(s->a, s->staging) != NXL_SUCCESS)
        fprintf(stderr, "serve: nxl_mem_free: %s\n", nxl_agent_last_error(s->a));
    /* (with transfers in flight, nxl_agent_destroy() frees it) */
    s->staging = NULL;
    nxl_agent_destroy(s->a);
    s->a = NULL;
}
