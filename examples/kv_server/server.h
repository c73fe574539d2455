/* SPDX-License-Identifier: BSD-3-Clause */
/* kv_server serve: what its three files share.
 *
 *   server.c       the role: the event_base, evhttp, requests, /stats,
 *                  signals, setup and teardown
 *   server_pool.c  staging buffers, the bounded wait queue, the order of
 *                  one block's requests, the --memcpy path
 *   server_nxl.c   the agent on the application's base: connecting to the
 *                  store, and each request's READ or WRITE */
#ifndef KV_SERVER_SERVER_H
#define KV_SERVER_SERVER_H

#include "common.h"

#include <nxl.h>

#include <event2/event.h>
#include <event2/http.h>
#include <sys/queue.h>

enum { OP_GET, OP_PUT };

typedef struct server server_t;

/* One GET or PUT of a block: queued, then in flight on a staging buffer. */
typedef struct job {
    struct evhttp_request *req;
    int op;
    size_t block;
    uint64_t version;      /* PUT */
    TAILQ_ENTRY(job) link;
} job_t;

/* A staging buffer and what it serves. */
typedef struct slot {
    server_t *s;
    size_t idx;            /* its index in the local prepared list */
    uint8_t *buf;
    job_t *job;            /* while its transfer runs */
    nxl_future_t *f;       /* that transfer's future (kept to cancel at shutdown) */
    uint64_t t_post;
    nxl_xfer_t *x;         /* its last transfer, reused for the same (op, block) */
    int x_op;
    size_t x_block;
    struct slot *next_free;
} slot_t;

struct server {
    const kvs_opts_t *o;
    struct event_base *base;
    struct evhttp *http;
    struct evhttp_bound_socket *sock;
    uint16_t http_port;
    nxl_agent_t *a;
    char store[128];                /* the store agent's name */
    nxl_prepped_t *remote, *local;  /* the store's blocks; the staging pool */
    uint8_t *staging;               /* --staging x --block_size */
    uint8_t *copy;                  /* --memcpy: the blocks, here */
    slot_t *slots, *free_slots;
    unsigned nfree;
    TAILQ_HEAD(, job) queue;
    unsigned qlen, qlen_max;
    uint32_t *readers;              /* per block: READs in flight */
    uint8_t *writer;                /* per block: a WRITE in flight */
    uint32_t *waiting;              /* per block: requests queued */
    uint64_t *scan;                 /* per block: last dispatch pass it was blocked in */
    uint64_t scan_epoch;
    uint64_t *version;              /* per block: the last version written here */
    struct event *ev_dispatch, *ev_timer, *ev_sig[2];
    bool ready, stopping, failed;
    unsigned stop_ticks;
    uint64_t t_start, deadline;
    unsigned inflight;
    /* counters for /stats */
    uint64_t requests, gets, puts, stats_reqs, bytes_out, bytes_in;
    uint64_t errors, busy, bad_requests, xfer_made, xfer_reused;
    uint64_t xfers, xfer_us, xfer_us_max;  /* post to callback */
    double cpu_ready[2];                   /* CPU time when ready: user, system */
};

/* server.c */
void srv_reply_text(server_t *s, struct evhttp_request *req, int code, const char *reason,
                    const char *fmt, ...) __attribute__((format(printf, 5, 6)));
void srv_fail(server_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void srv_ready(server_t *s);
void srv_check_stopped(server_t *s);

/* server_pool.c */
bool srv_pool_init(server_t *s);
bool srv_memcpy_setup(server_t *s);
void srv_pool_slots(server_t *s);
void srv_pool_free(server_t *s);
void srv_slot_put_back(server_t *s, slot_t *sl);
void srv_reply_block(server_t *s, job_t *j, slot_t *sl);
void srv_gate_enter(server_t *s, const job_t *j);
void srv_gate_leave(server_t *s, const job_t *j);
void srv_submit(server_t *s, job_t *j);
void srv_dispatch(server_t *s);
void srv_dispatch_cb(evutil_socket_t fd, short what, void *arg);
void srv_refuse_queued(server_t *s, const char *why);

/* server_nxl.c */
bool srv_nxl_setup(server_t *s);
void srv_nxl_connect(server_t *s);
void srv_nxl_start(server_t *s, job_t *j, slot_t *sl);
void srv_nxl_cancel_all(server_t *s);
void srv_nxl_teardown(server_t *s);

#endif
