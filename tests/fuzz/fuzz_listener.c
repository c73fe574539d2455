/* SPDX-License-Identifier: BSD-3-Clause */
/* libFuzzer harness: the metadata listener as a client's bytes reach it —
 * frame headers, lengths, request types, payloads (metadata to load, names
 * to invalidate) — delivered in pieces split where the input says (its
 * first byte picks the piece size), through an in-memory bufferevent pair
 * into the same code that serves accepted sockets. Replies are read and
 * dropped. */
#include "config.h"
#include "engine/internal.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <netinet/in.h>
#include <string.h>

#include "fuzz_agent.h"

static nxl_agent_t *agent(void) { return fuzz_agent(1 << 20); }

static void drop(struct bufferevent *bev, void *arg)
{
    struct evbuffer *in = bufferevent_get_input(bev);
    evbuffer_drain(in, evbuffer_get_length(in));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    nxl_agent_t *a = agent();
    struct event_base *base = nxl_agent_base(a);
    struct bufferevent *pair[2];
    if (bufferevent_pair_new(base, 0, pair))
        abort();
    struct sockaddr_storage peer = {.ss_family = AF_INET};
    nxli_exchange_serve(a, pair[1], &peer); /* the server's end, taken over */
    bufferevent_setcb(pair[0], drop, NULL, NULL, NULL);
    bufferevent_enable(pair[0], EV_READ | EV_WRITE);
    /* at most 16 pieces: the split points move, the loop turns stay few */
    size_t piece = size ? 1 + data[0] % 64 : 1;
    if (piece < size / 16)
        piece = size / 16;
    for (size_t off = size ? 1 : 0; off < size; off += piece) {
        size_t n = size - off < piece ? size - off : piece;
        bufferevent_write(pair[0], data + off, n);
        event_base_loop(base, EVLOOP_NONBLOCK | EVLOOP_ONCE);
    }
    for (int i = 0; i < 4; i++)
        event_base_loop(base, EVLOOP_NONBLOCK | EVLOOP_ONCE);
    bufferevent_free(pair[0]); /* the server sees EOF and closes its end */
    for (int i = 0; i < 4; i++)
        event_base_loop(base, EVLOOP_NONBLOCK | EVLOOP_ONCE);
    /* what a request loaded is forgotten again */
    while (!LIST_EMPTY(&a->remotes))
        nxl_md_invalidate(a, LIST_FIRST(&a->remotes)->name);
    return 0;
}
