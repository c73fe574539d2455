/* SPDX-License-Identifier: BSD-3-Clause */
/* UCX: a rail's TCP sockets, reset when it is taken out, and the main
 * endpoint's, reset at a stall on a cut link (conn.c, nxl_ucx_conn_fail).
 *
 * Over TCP, UCX's forced close of a rail's endpoint (a rail taken out,
 * rails.c) leaves what the kernel still holds of its socket to the kernel:
 * UCX keeps the socket open when it also carries the peer's endpoint to us
 * (UCX matches the two directions between two workers onto one
 * connection), and a close without linger sends the unsent queue anyway.
 * It goes out when the cut link is back, and the peer's UCX, whose side of
 * the connection is still open, writes it into place then, over whatever
 * was written there since (seen: 0.15 to 1.2 MiB of a rail's piece over a
 * later WRITE). So before that close the rail's sockets are disconnected
 * (reset_if_ours): the kernel drops both queues and sends a RST, and UCX's
 * use of the socket after fails. What the peer's kernel had received
 * already is still read by its UCX (Linux hands a socket's received bytes
 * to the reader before the reset's error).
 *
 * Not at a deadline's abort (conn.c): there the peer is stopped, and a
 * reset it finds on resuming made UCX 1.13 abort it (ucp_put_handler:
 * "unexpected error: Endpoint timeout", the puts queued before the reset
 * read for an endpoint already failed: seen in check_xfer t_deadline over
 * TCP and check_netns t_rails_deadline).
 *
 * UCX does not say which sockets an endpoint uses: the ones this process
 * opened inside ucp_ep_create (the walk of /proc/self/fd before and after,
 * by inode) are taken for it. An endpoint that reuses a connection the
 * peer opened to us opened none, and is closed as before. */
#include "config.h"
#include "ucx.h"
#include "../common/tcpsock.h"

#include <netinet/tcp.h>

typedef struct {
    unsigned long *ino;
    size_t n, cap;
} ino_set_t;

static unsigned ino_add(int fd, void *arg)
{
    ino_set_t *s = arg;
    struct stat st;
    if (fstat(fd, &st))
        return 0;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        unsigned long *v = realloc(s->ino, cap * sizeof(*v));
        if (!v)
            return 0;
        s->ino = v;
        s->cap = cap;
    }
    s->ino[s->n++] = (unsigned long)st.st_ino;
    return 1;
}

void *nxl_ucx_socks_before(void)
{
    ino_set_t *s = calloc(1, sizeof(*s));
    if (s)
        nxl_each_tcp_socket(ino_add, s);
    return s;
}

void nxl_ucx_socks_after(void *before, ucx_socks_t *out)
{
    ino_set_t *b = before;
    out->n = 0;
    if (!b)
        return;
    ino_set_t now = {0};
    nxl_each_tcp_socket(ino_add, &now);
    for (size_t i = 0; i < now.n && out->n < NXL_UCX_EP_SOCKS; i++) {
        size_t k = 0;
        while (k < b->n && b->ino[k] != now.ino[i])
            k++;
        if (k == b->n)
            out->ino[out->n++] = now.ino[i];
    }
    free(now.ino);
    free(b->ino);
    free(b);
}

typedef struct {
    const ucx_socks_t *s;
    bool unacked_only;
} reset_arg_t;

/* 1 when fd is one of a->s (with unacked_only: one whose peer's kernel
 * is not acknowledging what it sent: TCP retransmitting) and was reset
 * (nxl_tcp_reset, SO_LINGER 0 for UCX's close, and a disconnect at once
 * whoever holds it): UCX keeps a socket that also carries
 * the peer's endpoint to us open after its forced close, and closing our
 * duplicate closes nothing */
static unsigned reset_if_ours(int fd, void *arg)
{
    const reset_arg_t *r = arg;
    struct stat st;
    if (fstat(fd, &st))
        return 0;
    for (unsigned i = 0; i < r->s->n; i++)
        if (r->s->ino[i] == (unsigned long)st.st_ino) {
            if (r->unacked_only) {
                struct tcp_info ti;
                socklen_t tl = sizeof(ti);
                if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) ||
                    !ti.tcpi_unacked || !ti.tcpi_retransmits)
                    return 0;
            }
            return nxl_tcp_reset(fd, true);
        }
    return 0;
}

unsigned nxl_ucx_socks_reset(ucx_socks_t *s)
{
    reset_arg_t r = {s, false};
    unsigned n = s->n ? nxl_each_tcp_socket(reset_if_ours, &r) : 0;
    s->n = 0;
    return n;
}

/* The same for those of s whose peer's kernel does not acknowledge what
 * they hold (a cut link: a stopped peer's kernel still does, and its
 * sockets are closed as before, see above) */
unsigned nxl_ucx_socks_reset_unacked(ucx_socks_t *s)
{
    reset_arg_t r = {s, true};
    unsigned n = s->n ? nxl_each_tcp_socket(reset_if_ours, &r) : 0;
    s->n = 0;
    return n;
}
