/* SPDX-License-Identifier: BSD-3-Clause */
/* libFuzzer harness: the metadata listener as a client's bytes reach it —
 * frame headers, lengths, request types, payloads (metadata to load, names
 * to invalidate) — delivered in pieces split where the input says (its
 * first byte picks the piece size), through a socket pair into the same
 * code that serves accepted sockets. Replies are read and dropped. */
#include "config.h"
#include "engine/internal.h"

#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_agent.h"

static nxl_agent_t *agent(void) { return fuzz_agent(1 << 20); }

/* the replies, read and dropped */
static void drop(int fd)
{
    char buf[4096];
    while (read(fd, buf, sizeof(buf)) > 0) {
    }
}

static void turns(nxl_agent_t *a, int fd, int n)
{
    for (int i = 0; i < n; i++) {
        nxl_agent_run_once(a, 0);
        drop(fd);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    nxl_agent_t *a = agent();
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, pair))
        abort();
    struct sockaddr_storage peer = {.ss_family = AF_INET};
    nxli_exchange_serve(a, pair[1], &peer); /* the server's end, taken over */
    /* at most 16 pieces: the split points move, the loop turns stay few */
    size_t piece = size ? 1 + data[0] % 64 : 1;
    if (piece < size / 16)
        piece = size / 16;
    for (size_t off = size ? 1 : 0; off < size;) {
        size_t n = size - off < piece ? size - off : piece;
        ssize_t w = send(pair[0], data + off, n, MSG_NOSIGNAL);
        if (w > 0)
            off += (size_t)w;
        else if (w < 0 && errno != EAGAIN)
            break; /* the server closed its end */
        turns(a, pair[0], 1);
    }
    turns(a, pair[0], 4);
    close(pair[0]); /* the server sees EOF and closes its end */
    turns(a, -1, 4);
    /* what a request loaded is forgotten again */
    while (!LIST_EMPTY(&a->remotes))
        nxl_md_invalidate(a, LIST_FIRST(&a->remotes)->name);
    return 0;
}
