/* SPDX-License-Identifier: BSD-3-Clause */
/* kv_epoll_server: kv_uv_server on a bare epoll loop.
 *
 * What it shows: the contract of an NXL_LOOP_FD agent without any library
 * between it and the program's loop (include/nxl.h, "Embedding in any
 * event loop"): nxl_agent_backend_fd() in the program's epoll set,
 * epoll_wait() bounded by nxl_agent_backend_timeout(), and
 * nxl_agent_run_once(a, 0) when the descriptor is readable or the time has
 * come; completions run as callbacks inside that call. The blocks live in
 * a file (64 blocks of 4 KiB); a TCP client sends "GET <n>\n" and gets
 * block n back, READ by nxl from the file (POSIX transport).
 *
 *   kv_epoll_server [PORT [TRANSPORT]]   port 7000, POSIX by default
 *   printf 'GET 3\n' | nc -q1 127.0.0.1 7000
 *
 * One request at a time per connection, one line per read, blocking
 * writes of the replies: an example. */
#include "kv_blocks.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

static int ep, lsn;
static int conn_fd[NBLK];       /* the connection using slot i, 0: free */
static nxl_xfer_t *xfer[NBLK];  /* its READ */

/* a connection closed; its READ, if in flight, canceled */
static void drop(size_t slot)
{
    close(conn_fd[slot]);
    conn_fd[slot] = 0;
    nxl_xfer_release(xfer[slot]);
    xfer[slot] = NULL;
}

/* the READ's completion, inside nxl_agent_run_once(): the block, or why not */
static void on_block(nxl_future_t *f, nxl_status_t st, void *arg)
{
    size_t slot = (size_t)(uintptr_t)arg;
    char err[600];
    if (st == NXL_ERR_CANCELED)
        return; /* its connection is gone */
    int n = st == NXL_SUCCESS ? BLK : snprintf(err, sizeof(err), "ERR %s\n", nxl_future_error(f));
    if (write(conn_fd[slot], st == NXL_SUCCESS ? pool + slot * BLK : err, (size_t)n) != n)
        drop(slot);
}

static void on_request(size_t slot)
{
    char line[64];
    size_t blk;
    ssize_t n = read(conn_fd[slot], line, sizeof(line) - 1);
    if (n <= 0 || (line[n] = '\0', sscanf(line, "GET %zu", &blk) != 1) || blk >= NBLK ||
        (xfer[slot] && nxl_xfer_status(xfer[slot]) == NXL_IN_PROG)) {
        drop(slot); /* closed, not a request of ours, or one before the reply */
        return;
    }
    nxl_xfer_release(xfer[slot]);
    xfer[slot] = NULL;
    if (nxl_xfer_make(agent, NXL_READ, slots, &slot, blocks, &blk, 1, NULL, &xfer[slot]) !=
            NXL_SUCCESS ||
        nxl_xfer_post(xfer[slot], on_block, (void *)(uintptr_t)slot, NULL) != NXL_SUCCESS) {
        fprintf(stderr, "GET %zu: %s\n", blk, nxl_agent_last_error(agent));
        drop(slot);
    }
}

static void on_connection(void)
{
    size_t slot = 0;
    while (slot < NBLK && conn_fd[slot])
        slot++;
    int fd = accept(lsn, NULL, NULL);
    struct epoll_event ee = {.events = EPOLLIN, .data.u64 = slot};
    if (fd >= 0 && slot < NBLK && epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ee) == 0)
        conn_fd[slot] = fd; /* closing it takes it out of the set */
    else if (fd >= 0)
        close(fd); /* no slot free */
}

int main(int argc, char **argv)
{
    int port = argc > 1 ? atoi(argv[1]) : 7000;
    const char *transport = argc > 2 ? argv[2] : "POSIX";
    kv_blocks_open("kv_epoll_server", transport); /* the blocks, the agent, its lists */

    /* the loop: the listener, the connections and the agent's descriptor */
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int one = 1;
    lsn = socket(AF_INET, SOCK_STREAM, 0);
    ep = epoll_create1(0);
    struct epoll_event el = {.events = EPOLLIN, .data.u64 = NBLK},
                       ea = {.events = EPOLLIN, .data.u64 = NBLK + 1};
    if (setsockopt(lsn, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(lsn, (struct sockaddr *)&sin, sizeof(sin)) != 0 || listen(lsn, 64) != 0 ||
        epoll_ctl(ep, EPOLL_CTL_ADD, lsn, &el) != 0 ||
        epoll_ctl(ep, EPOLL_CTL_ADD, nxl_agent_backend_fd(agent), &ea) != 0)
        return perror("kv_epoll_server: listen"), 1;
    printf("kv_epoll_server: %d blocks of %d bytes on 127.0.0.1:%d (%s)\n", NBLK, BLK, port,
           transport);
    fflush(stdout);
    for (;;) {
        struct epoll_event evs[16];
        /* asked again before every wait: a turn or a call on the agent (a
         * post) may have armed a timer */
        int n = epoll_wait(ep, evs, 16, nxl_agent_backend_timeout(agent));
        for (int i = 0; i < n; i++)
            if (evs[i].data.u64 == NBLK)
                on_connection();
            else if (evs[i].data.u64 < NBLK)
                on_request((size_t)evs[i].data.u64);
        /* the agent's turn, which does not wait: its descriptor was
         * readable, its time came, or a request above posted a READ */
        must(nxl_agent_run_once(agent, 0));
    }
}
