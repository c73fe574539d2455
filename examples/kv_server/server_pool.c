/* SPDX-License-Identifier: BSD-3-Clause */
/* kv_server serve: staging buffers, the bounded wait queue, the order of
 * one block's requests, and the --memcpy path.
 *
 * A request takes a staging buffer for as long as its bytes are there: a
 * GET from the post of its READ until its reply left the buffer (the
 * cleanup of evbuffer_add_reference()), a PUT from the copy of its body
 * until its WRITE completed. Without a free buffer it waits in a FIFO of
 * at most --queue requests; beyond that it is answered 503.
 *
 * Requests on one block keep their order: a READ waits while a WRITE of
 * that block is in flight, a WRITE while READs or a WRITE are, and a
 * request never overtakes an earlier one on its block. So a GET never
 * answers half-written bytes, and a GET sent after a PUT's 204 sees it. */
#include "server.h"

#include <event2/buffer.h>
#include <stdlib.h>
#include <string.h>

bool srv_pool_init(server_t *s)
{
    const kvs_opts_t *o = s->o;
    s->slots = calloc(o->staging, sizeof(*s->slots));
    s->readers = calloc(o->blocks, sizeof(*s->readers));
    s->writer = calloc(o->blocks, sizeof(*s->writer));
    s->waiting = calloc(o->blocks, sizeof(*s->waiting));
    s->scan = calloc(o->blocks, sizeof(*s->scan));
    s->version = calloc(o->blocks, sizeof(*s->version));
    if (!s->slots || !s->readers || !s->writer || !s->waiting || !s->scan || !s->version)
        return false;
    TAILQ_INIT(&s->queue);
    return true;
}

/* --memcpy: the blocks in local memory, and staging buffers of our own */
bool srv_memcpy_setup(server_t *s)
{
    const kvs_opts_t *o = s->o;
    s->copy = malloc(o->blocks * o->block_size);
    s->staging = aligned_alloc(4096, ((size_t)o->staging * o->block_size + 4095) & ~4095ul);
    if (!s->copy || !s->staging)
        return false;
    for (unsigned long b = 0; b < o->blocks; b++)
        kvs_pattern(s->copy + b * o->block_size, o->block_size, b, 0);
    return true;
}

void srv_pool_free(server_t *s)
{
    free(s->staging); /* --memcpy's; srv_nxl_teardown() gave back and cleared the agent's */
    free(s->copy);
    free(s->slots);
    free(s->readers);
    free(s->writer);
    free(s->waiting);
    free(s->scan);
    free(s->version);
}

/* Slots over s->staging, all free. */
void srv_pool_slots(server_t *s)
{
    const kvs_opts_t *o = s->o;
    for (unsigned i = 0; i < o->staging; i++)
        s->slots[i] = (slot_t){.s = s, .idx = i, .buf = s->staging + (size_t)i * o->block_size};
    for (unsigned i = o->staging; i-- > 0;)
        srv_slot_put_back(s, &s->slots[i]);
}

void srv_slot_put_back(server_t *s, slot_t *sl)
{
    sl->next_free = s->free_slots;
    s->free_slots = sl;
    s->nfree++;
}

/* evbuffer_add_reference()'s cleanup: the reply's bytes left the staging
 * buffer (written to the socket, or the connection went away). Queued
 * requests start on the next loop turn, not inside evhttp's write path. */
static void slot_cleanup(const void *data, size_t len, void *extra)
{
    slot_t *sl = extra;
    server_t *s = sl->s;
    srv_slot_put_back(s, sl);
    if (s->qlen)
        event_active(s->ev_dispatch, 0, 0);
    srv_check_stopped(s);
}

/* 200 with the staging buffer's bytes, by reference: no copy here */
void srv_reply_block(server_t *s, job_t *j, slot_t *sl)
{
    struct evhttp_request *req = j->req;
    struct evbuffer *out = evhttp_request_get_output_buffer(req);
    size_t B = s->o->block_size;
    if (evbuffer_add_reference(out, sl->buf, B, slot_cleanup, sl)) {
        srv_slot_put_back(s, sl);
        srv_reply_text(s, req, 500, "Internal Server Error", "evbuffer_add_reference failed\n");
        return;
    }
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "application/octet-stream");
    s->bytes_out += B;
    evhttp_send_reply(req, 200, "OK", NULL);
}

/* ---------------------------------------------------------- block gates */

static bool gate_open(const server_t *s, const job_t *j)
{
    size_t b = j->block;
    return j->op == OP_GET ? !s->writer[b] : !s->writer[b] && !s->readers[b];
}

void srv_gate_enter(server_t *s, const job_t *j)
{
    if (j->op == OP_GET)
        s->readers[j->block]++;
    else
        s->writer[j->block] = 1;
}

void srv_gate_leave(server_t *s, const job_t *j)
{
    if (j->op == OP_GET)
        s->readers[j->block]--;
    else
        s->writer[j->block] = 0;
}

/* ------------------------------------------------------------- starting */

static void start_memcpy(server_t *s, job_t *j, slot_t *sl)
{
    size_t B = s->o->block_size;
    uint8_t *blk = s->copy + j->block * B;
    if (j->op == OP_GET) {
        memcpy(sl->buf, blk, B);
        srv_reply_block(s, j, sl);
    } else {
        memcpy(blk, sl->buf, B);
        s->version[j->block] = j->version;
        srv_slot_put_back(s, sl);
        evhttp_send_reply(j->req, 204, "No Content", NULL);
    }
    free(j);
}

/* Takes a free staging buffer for @p j and starts it; @p j is the
 * callee's from here on. */
static void start(server_t *s, job_t *j)
{
    slot_t *sl = s->free_slots;
    s->free_slots = sl->next_free;
    s->nfree--;
    if (j->op == OP_PUT) {
        struct evbuffer *in = evhttp_request_get_input_buffer(j->req);
        evbuffer_remove(in, sl->buf, s->o->block_size);
        s->bytes_in += s->o->block_size;
    }
    if (s->copy)
        start_memcpy(s, j, sl);
    else
        srv_nxl_start(s, j, sl);
}

/* Starts queued requests, oldest first, while staging buffers are free;
 * a request whose block is busy waits, and so do the later ones on that
 * block. */
void srv_dispatch(server_t *s)
{
    if (!s->qlen || !s->nfree || s->stopping)
        return;
    s->scan_epoch++;
    job_t *j, *next;
    for (j = TAILQ_FIRST(&s->queue); j && s->nfree; j = next) {
        next = TAILQ_NEXT(j, link);
        if (s->scan[j->block] == s->scan_epoch || !gate_open(s, j)) {
            s->scan[j->block] = s->scan_epoch;
            continue;
        }
        TAILQ_REMOVE(&s->queue, j, link);
        s->qlen--;
        s->waiting[j->block]--;
        start(s, j);
    }
}

void srv_dispatch_cb(evutil_socket_t fd, short what, void *arg)
{
    srv_dispatch(arg);
}

/* A new request: what waits and can go goes first; then this one starts
 * at once when a staging buffer is free and nothing on its block is
 * ahead of it; else it waits, or is answered 503 when the queue is full. */
void srv_submit(server_t *s, job_t *j)
{
    srv_dispatch(s);
    if (s->nfree && !s->waiting[j->block] && gate_open(s, j)) {
        start(s, j);
        return;
    }
    if (s->qlen >= s->o->queue) {
        srv_reply_text(s, j->req, 503, "Service Unavailable",
                       "busy: %u requests wait already\n", s->qlen);
        free(j);
        return;
    }
    TAILQ_INSERT_TAIL(&s->queue, j, link);
    s->qlen++;
    s->waiting[j->block]++;
    if (s->qlen > s->qlen_max)
        s->qlen_max = s->qlen;
}

/* Answers every waiting request 503 (shutting down). */
void srv_refuse_queued(server_t *s, const char *why)
{
    job_t *j;
    while ((j = TAILQ_FIRST(&s->queue))) {
        TAILQ_REMOVE(&s->queue, j, link);
        s->qlen--;
        s->waiting[j->block]--;
        srv_reply_text(s, j->req, 503, "Service Unavailable", "%s\n", why);
        free(j);
    }
}
