/* SPDX-License-Identifier: BSD-3-Clause */
/* A connection on the agent's loop (stream.h): one watch of the socket,
 * whose interest follows what the stream waits for (the connection, the
 * TLS handshake, bytes to read, room to write; with TLS, OpenSSL may want
 * the other direction: SSL_ERROR_WANT_READ/WANT_WRITE), and one timer for
 * the inactivity timeouts. The input and the output are growbufs: bytes
 * are appended at the end and taken from an offset at the front.
 *
 * The timeouts are a read and a write timeout of the same value: reading
 * (always wanted) times out when nothing was read for that long, writing
 * (while something waits to be written, or the connection or the
 * handshake is being made) when nothing was written for that long. */
#include "internal.h"
#include "stream.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifdef NXL_HAVE_TLS
#include <openssl/err.h>
#include <openssl/ssl.h>
#endif

/* bytes read in one turn of the loop, at most (then the others get theirs) */
#define READ_PER_TURN (256u << 10)
#define TLS_ERRS 8

enum { S_IDLE, S_CONNECTING, S_HANDSHAKE, S_OPEN, S_DONE };

typedef struct sbuf {
    char *p;
    size_t len, cap, off; /* bytes [off, len) are the content */
} sbuf_t;

struct nxli_stream {
    nxl_agent_t *a;
    int fd;
    int state;
    bool server;
    struct ssl_st *ssl;
    bool hs_wants_write;  /* TLS: the handshake waits for room to write */
    bool rd_wants_write;  /* TLS: SSL_read waits for room to write */
    bool wr_wants_read;   /* TLS: SSL_write waits for bytes to read */
    bool tls_started;     /* TLS: the handshake began */
    int conn_err;         /* connect() refused at once: reported from the loop */
    nxlt_io_t *io;
    nxlt_timer_t *timer;
    uint64_t timeout_us, rd_last, wr_last;
    sbuf_t in, out;
    nxli_stream_cbs_t cbs;
    void *arg;
    int depth;            /* inside its own callbacks: freeing is deferred */
    bool dead;
    unsigned long tls_errs[TLS_ERRS];
    size_t ntls_errs;
};

static size_t sbuf_len(const sbuf_t *b) { return b->len - b->off; }

static int sbuf_add(sbuf_t *b, const void *p, size_t n)
{
    if (b->off && b->off == b->len)
        b->off = b->len = 0;
    else if (b->off && b->len + n + 1 > b->cap && b->off >= sbuf_len(b)) {
        memmove(b->p, b->p + b->off, b->len - b->off);
        b->len -= b->off;
        b->off = 0;
    }
    return nxl_growbuf_append(&b->p, &b->len, &b->cap, p, n);
}

static void sbuf_drain(sbuf_t *b, size_t n)
{
    b->off += n < sbuf_len(b) ? n : sbuf_len(b);
    if (b->off == b->len)
        b->off = b->len = 0;
}

static void really_free(nxli_stream_t *s)
{
    free(s->in.p);
    free(s->out.p);
    free(s);
}

void nxli_stream_free(nxli_stream_t *s)
{
    if (!s || s->dead)
        return;
    s->dead = true;
    nxlt_io_free(s->io);
    nxlt_timer_free(s->timer);
    s->io = NULL;
    s->timer = NULL;
#ifdef NXL_HAVE_TLS
    SSL_free(s->ssl);
#endif
    s->ssl = NULL;
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
    if (!s->depth)
        really_free(s);
}

static bool writing(const nxli_stream_t *s)
{
    return s->state == S_CONNECTING || s->state == S_HANDSHAKE ||
           (s->state == S_OPEN && sbuf_len(&s->out));
}

/* the watch's interest and the timer, after anything changed */
static void update(nxli_stream_t *s)
{
    unsigned ev = 0;
    switch (s->state) {
    case S_CONNECTING:
        ev = NXLT_IO_WRITE;
        break;
    case S_HANDSHAKE:
        ev = s->hs_wants_write ? NXLT_IO_WRITE : NXLT_IO_READ;
        break;
    case S_OPEN:
        ev = s->rd_wants_write ? NXLT_IO_WRITE : NXLT_IO_READ;
        if (sbuf_len(&s->out))
            ev |= s->wr_wants_read ? NXLT_IO_READ : NXLT_IO_WRITE;
        break;
    }
    if (nxlt_io_events(s->io) != ev)
        nxlt_io_start(s->io, ev);
    if (!ev || !s->timeout_us) {
        nxlt_timer_stop(s->timer);
        return;
    }
    uint64_t due = s->rd_last + s->timeout_us;
    if (writing(s) && s->wr_last + s->timeout_us < due)
        due = s->wr_last + s->timeout_us;
    uint64_t now = nxli_now_us();
    nxlt_timer_start(s->timer, due > now ? due - now : 0);
}

/* the stream ends: on_event, then nothing more */
static void finish(nxli_stream_t *s, unsigned what, int err)
{
    s->state = S_DONE;
    update(s);
    if (s->cbs.on_event)
        s->cbs.on_event(s, what, err, s->arg);
}

#ifdef NXL_HAVE_TLS
/* OpenSSL's queued errors, kept for nxli_tls_why() */
static void note_tls_errors(nxli_stream_t *s)
{
    unsigned long e;
    while ((e = ERR_get_error()))
        if (s->ntls_errs < TLS_ERRS)
            s->tls_errs[s->ntls_errs++] = e;
}

/* an SSL call returned r <= 0: 1 when it only waits (*want_write set), 0
 * otherwise with *what and *err saying how the stream ends (a peer gone
 * without close_notify is an end of stream, as without TLS) */
static int tls_wait(nxli_stream_t *s, int r, bool *want_write, unsigned *what, int *err)
{
    int e = SSL_get_error(s->ssl, r);
    *err = errno;
    switch (e) {
    case SSL_ERROR_WANT_READ:
        *want_write = false;
        return 1;
    case SSL_ERROR_WANT_WRITE:
        *want_write = true;
        return 1;
    case SSL_ERROR_ZERO_RETURN:
        *what = NXLI_STREAM_EOF;
        *err = 0;
        break;
    case SSL_ERROR_SYSCALL:
        *what = ERR_peek_error() == 0 ? NXLI_STREAM_EOF : NXLI_STREAM_ERROR;
        break;
    case SSL_ERROR_SSL: {
        unsigned long pe = ERR_peek_error();
        *err = 0; /* OpenSSL's reasons say why, not errno */
        *what = ERR_GET_LIB(pe) == ERR_LIB_SSL &&
                        ERR_GET_REASON(pe) == SSL_R_UNEXPECTED_EOF_WHILE_READING
                    ? NXLI_STREAM_EOF
                    : NXLI_STREAM_ERROR;
        break;
    }
    default:
        *what = NXLI_STREAM_ERROR;
    }
    note_tls_errors(s);
    return 0;
}

static void handshake(nxli_stream_t *s)
{
    ERR_clear_error();
    int r = SSL_do_handshake(s->ssl);
    unsigned what;
    int err;
    if (r == 1) {
        s->state = S_OPEN;
        s->rd_last = s->wr_last = nxli_now_us();
        if (s->cbs.on_connected)
            s->cbs.on_connected(s, s->arg);
        return;
    }
    if (!tls_wait(s, r, &s->hs_wants_write, &what, &err))
        finish(s, what, err);
}
#endif

/* reads what there is (a bounded amount); 0, or -1 when the stream ended */
static int do_read(nxli_stream_t *s)
{
    char buf[16384];
    size_t got = 0;
    unsigned what = 0;
    int err = 0;
    for (;;) {
        ssize_t n;
#ifdef NXL_HAVE_TLS
        if (s->ssl) {
            if (got >= READ_PER_TURN && SSL_pending(s->ssl) <= 0)
                break;
            ERR_clear_error();
            int r = SSL_read(s->ssl, buf, sizeof(buf));
            s->rd_wants_write = false;
            if (r <= 0) {
                if (tls_wait(s, r, &s->rd_wants_write, &what, &err))
                    break;
                n = -1;
            } else {
                n = r;
            }
        } else
#endif
        {
            if (got >= READ_PER_TURN)
                break;
            n = read(s->fd, buf, sizeof(buf));
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
                break;
            if (n <= 0) {
                what = n ? NXLI_STREAM_ERROR : NXLI_STREAM_EOF;
                err = n ? errno : 0;
            }
        }
        if (n <= 0)
            break;
        if (sbuf_add(&s->in, buf, (size_t)n)) {
            what = NXLI_STREAM_ERROR;
            err = ENOMEM;
            break;
        }
        got += (size_t)n;
    }
    if (got) {
        s->rd_last = nxli_now_us();
        if (s->cbs.on_read)
            s->cbs.on_read(s, s->arg);
        if (s->dead)
            return -1;
    }
    if (what) {
        finish(s, what, err);
        return -1;
    }
    return 0;
}

/* writes what it can; 0, or -1 when the stream ended */
static int do_write(nxli_stream_t *s)
{
    while (sbuf_len(&s->out)) {
        const char *p = s->out.p + s->out.off;
        size_t n = sbuf_len(&s->out);
        ssize_t w;
#ifdef NXL_HAVE_TLS
        if (s->ssl) {
            ERR_clear_error();
            int r = SSL_write(s->ssl, p, n > INT32_MAX ? INT32_MAX : (int)n);
            s->wr_wants_read = false;
            if (r <= 0) {
                unsigned what;
                int err;
                bool ww = false;
                if (tls_wait(s, r, &ww, &what, &err)) {
                    s->wr_wants_read = !ww;
                    return 0;
                }
                finish(s, what == NXLI_STREAM_EOF ? NXLI_STREAM_EOF : NXLI_STREAM_ERROR, err);
                return -1;
            }
            w = r;
        } else
#endif
        {
            w = send(s->fd, p, n, MSG_NOSIGNAL);
            if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
                return 0;
            if (w < 0) {
                finish(s, NXLI_STREAM_ERROR, errno);
                return -1;
            }
        }
        sbuf_drain(&s->out, (size_t)w);
        s->wr_last = nxli_now_us();
    }
    return 0;
}

static void connected(nxli_stream_t *s)
{
    int err = s->conn_err;
    socklen_t el = sizeof(err);
    if (!err && getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0)
        err = errno;
    if (err) {
        finish(s, NXLI_STREAM_ERROR, err);
        return;
    }
    s->rd_last = s->wr_last = nxli_now_us();
#ifdef NXL_HAVE_TLS
    if (s->ssl) {
        s->state = S_HANDSHAKE;
        s->tls_started = true;
        SSL_set_connect_state(s->ssl);
        handshake(s);
        return;
    }
#endif
    s->state = S_OPEN;
    if (s->cbs.on_connected)
        s->cbs.on_connected(s, s->arg);
}

static void on_io(nxlt_io_t *io, int fd, unsigned ready, void *arg)
{
    nxli_stream_t *s = arg;
    s->depth++;
    switch (s->state) {
    case S_CONNECTING:
        connected(s);
        break;
#ifdef NXL_HAVE_TLS
    case S_HANDSHAKE:
        s->rd_last = s->wr_last = nxli_now_us();
        handshake(s);
        /* done: bytes that came with the handshake's last may wait in
         * OpenSSL's buffer, where the watch does not see them */
        if (!s->dead && s->state == S_OPEN && SSL_pending(s->ssl) > 0)
            do_read(s);
        break;
#endif
    case S_OPEN: {
        bool rd = s->rd_wants_write ? (ready & NXLT_IO_WRITE) : (ready & NXLT_IO_READ);
        if (rd && do_read(s) < 0)
            break;
        bool wr = s->wr_wants_read ? (ready & NXLT_IO_READ) : (ready & NXLT_IO_WRITE);
        if (wr)
            do_write(s);
        break;
    }
    }
    /* the callbacks may have moved it on (to OPEN: what was queued goes out) */
    if (!s->dead && s->state == S_OPEN && sbuf_len(&s->out) && !s->wr_wants_read)
        do_write(s);
    if (!s->dead && s->state != S_DONE)
        update(s);
    if (!--s->depth && s->dead)
        really_free(s);
}

static void on_timer(nxlt_timer_t *t, void *arg)
{
    nxli_stream_t *s = arg;
    uint64_t now = nxli_now_us();
    if (s->state == S_IDLE || s->state == S_DONE)
        return;
    if (s->state == S_CONNECTING && s->conn_err) {
        s->depth++;
        connected(s);
        if (!--s->depth && s->dead)
            really_free(s);
        return;
    }
    bool late = now >= s->rd_last + s->timeout_us ||
                (writing(s) && now >= s->wr_last + s->timeout_us);
    if (!late) {
        update(s);
        return;
    }
    s->depth++;
    finish(s, NXLI_STREAM_TIMEOUT, 0);
    if (!--s->depth && s->dead)
        really_free(s);
}

nxli_stream_t *nxli_stream_new(nxl_agent_t *a, int fd, struct ssl_st *ssl, bool server,
                               const nxli_stream_cbs_t *cbs, void *arg)
{
    nxli_stream_t *s = fd >= 0 ? calloc(1, sizeof(*s)) : NULL;
    if (!s) {
#ifdef NXL_HAVE_TLS
        SSL_free(ssl);
#endif
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    s->a = a;
    s->fd = fd;
    s->ssl = ssl;
    s->server = server;
    s->cbs = *cbs;
    s->arg = arg;
    s->io = nxli_io_new(a, fd, on_io, s);
    s->timer = s->io ? nxli_timer_new(a, on_timer, s) : NULL;
    if (!s->timer) {
        nxlt_io_free(s->io);
        s->io = NULL;
        s->depth = 1;
        nxli_stream_free(s);
        free(s);
        return NULL;
    }
    s->rd_last = s->wr_last = nxli_now_us();
    if (server) {
#ifdef NXL_HAVE_TLS
        if (ssl) {
            SSL_set_accept_state(ssl);
            s->state = S_HANDSHAKE;
            s->tls_started = true;
        } else
#endif
            s->state = S_OPEN;
        update(s);
    }
    return s;
}

int nxli_stream_socket(int family)
{
    return socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
}

int nxli_stream_connect(nxli_stream_t *s, const struct sockaddr *sa, socklen_t len)
{
    if (s->state != S_IDLE) {
        errno = EISCONN;
        return -1;
    }
    if (connect(s->fd, sa, len) < 0 && errno != EINPROGRESS) {
        if (errno != ECONNREFUSED)
            return -1;
        /* as libevent did: a refusal is reported from the loop, as one
         * that comes later would be (SO_ERROR no longer holds it) */
        s->conn_err = errno;
    }
    s->state = S_CONNECTING;
    s->rd_last = s->wr_last = nxli_now_us();
    update(s);
    if (s->conn_err)
        nxlt_timer_start(s->timer, 0);
    return 0;
}

void nxli_stream_set_timeout(nxli_stream_t *s, unsigned ms)
{
    s->timeout_us = (uint64_t)ms * 1000;
    s->rd_last = s->wr_last = nxli_now_us();
    if (s->state != S_IDLE && s->state != S_DONE)
        update(s);
}

int nxli_stream_write(nxli_stream_t *s, const void *p, size_t n)
{
    if (!n)
        return 0;
    if (!sbuf_len(&s->out))
        s->wr_last = nxli_now_us();
    if (sbuf_add(&s->out, p, n))
        return -1;
    if (s->state == S_OPEN)
        update(s);
    return 0;
}

const unsigned char *nxli_stream_input(const nxli_stream_t *s, size_t *len)
{
    *len = sbuf_len(&s->in);
    return (const unsigned char *)(s->in.p ? s->in.p + s->in.off : "");
}

void nxli_stream_drain(nxli_stream_t *s, size_t n) { sbuf_drain(&s->in, n); }

int nxli_stream_fd(const nxli_stream_t *s) { return s->fd; }

struct ssl_st *nxli_stream_ssl(const nxli_stream_t *s) { return s->ssl; }

bool nxli_stream_tls_started(const nxli_stream_t *s)
{
    return s->ssl && s->tls_started;
}

const unsigned long *nxli_stream_tls_errors(const nxli_stream_t *s, size_t *n)
{
    *n = s->ntls_errs;
    return s->tls_errs;
}
