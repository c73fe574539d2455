/* SPDX-License-Identifier: BSD-3-Clause */
/* kv_uv_server: a libuv program that serves KV blocks through nxl.
 *
 * What it shows: an agent on NXL_LOOP_FD attached to a uv_loop_t with
 * <nxl/uv.h>, so that nxl's completions run as callbacks of the program's
 * own libuv loop, with no thread and no polling. The blocks live in a file
 * (64 blocks of 4 KiB); a TCP client sends "GET <n>\n" and gets block n
 * back: nxl READs it from the file into a registered buffer (POSIX
 * transport), and the completion callback writes it to the socket.
 *
 *   kv_uv_server [PORT [TRANSPORT]]   port 7000, POSIX by default
 *   printf 'GET 3\n' | nc -q1 127.0.0.1 7000
 *
 * One request at a time per connection, one line per read: an example. */
#include "kv_blocks.h"
#include <nxl/uv.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int slot_used[NBLK];

typedef struct {
    uv_tcp_t tcp;
    uv_write_t wr;
    size_t slot;
    char line[64], err[600];
    nxl_xfer_t *x;
} conn_t;

static void on_alloc(uv_handle_t *h, size_t want, uv_buf_t *b)
{
    conn_t *c = h->data;
    (void)want;
    *b = uv_buf_init(c->line, sizeof(c->line) - 1);
}

static void on_closed(uv_handle_t *h)
{
    conn_t *c = h->data;
    if (c->slot < NBLK)
        slot_used[c->slot] = 0;
    nxl_xfer_release(c->x);
    free(c);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b);

static void on_written(uv_write_t *w, int status)
{
    conn_t *c = w->data;
    if (status == 0)
        uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    else
        uv_close((uv_handle_t *)&c->tcp, on_closed);
}

/* the READ's completion, a callback of the uv loop: the block, or why not */
static void on_block(nxl_future_t *f, nxl_status_t st, void *arg)
{
    conn_t *c = arg;
    uv_buf_t b = uv_buf_init(pool + c->slot * BLK, BLK);
    if (st != NXL_SUCCESS)
        b = uv_buf_init(c->err, (unsigned)snprintf(c->err, sizeof(c->err), "ERR %s\n",
                                                   nxl_future_error(f)));
    c->wr.data = c;
    uv_write(&c->wr, (uv_stream_t *)&c->tcp, &b, 1, on_written);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    conn_t *c = s->data;
    size_t blk;
    if (n < 0) {
        uv_close((uv_handle_t *)s, on_closed);
        return;
    }
    b->base[n] = '\0';
    if (n == 0)
        return;
    if (sscanf(b->base, "GET %zu", &blk) != 1 || blk >= NBLK) {
        uv_close((uv_handle_t *)s, on_closed); /* not a request of ours */
        return;
    }
    uv_read_stop(s); /* until the block is written */
    nxl_xfer_release(c->x);
    c->x = NULL;
    if (nxl_xfer_make(agent, NXL_READ, slots, &c->slot, blocks, &blk, 1, NULL, &c->x) !=
            NXL_SUCCESS ||
        nxl_xfer_post(c->x, on_block, c, NULL) != NXL_SUCCESS) {
        fprintf(stderr, "GET %zu: %s\n", blk, nxl_agent_last_error(agent));
        uv_close((uv_handle_t *)s, on_closed);
    }
}

static void on_connection(uv_stream_t *server, int status)
{
    conn_t *c = calloc(1, sizeof(*c));
    if (!c)
        return;
    uv_tcp_init(server->loop, &c->tcp);
    c->tcp.data = c;
    while (c->slot < NBLK && slot_used[c->slot])
        c->slot++;
    if (status < 0 || uv_accept(server, (uv_stream_t *)&c->tcp) != 0 || c->slot == NBLK) {
        uv_close((uv_handle_t *)&c->tcp, on_closed); /* no slot free: closed at once */
        return;
    }
    slot_used[c->slot] = 1;
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

int main(int argc, char **argv)
{
    int port = argc > 1 ? atoi(argv[1]) : 7000;
    const char *transport = argc > 2 ? argv[2] : "POSIX";
    kv_blocks_open("kv_uv_server", transport); /* the blocks, the agent, its lists */

    uv_loop_t *loop = uv_default_loop();
    must(nxl_uv_attach(agent, loop)); /* the agent's descriptor and timer in the loop */
    uv_tcp_t server;
    struct sockaddr_in sin;
    uv_ip4_addr("127.0.0.1", port, &sin);
    uv_tcp_init(loop, &server);
    int rc = uv_tcp_bind(&server, (const struct sockaddr *)&sin, 0);
    if (rc || (rc = uv_listen((uv_stream_t *)&server, 64, on_connection)))
        return fprintf(stderr, "kv_uv_server: port %d: %s\n", port, uv_strerror(rc)), 1;
    printf("kv_uv_server: %d blocks of %d bytes on 127.0.0.1:%d (%s)\n", NBLK, BLK, port,
           transport);
    fflush(stdout);
    return uv_run(loop, UV_RUN_DEFAULT); /* every callback, nxl's included, runs in here */
}
