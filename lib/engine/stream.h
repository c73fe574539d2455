/* SPDX-License-Identifier: BSD-3-Clause */
/* A connection on the agent's loop, for the metadata exchange: a
 * non-blocking TCP socket, optionally with an OpenSSL session over it, an
 * input buffer and an output queue, and an inactivity timeout (nothing
 * read, or a write waiting, for that long). One watch and one timer of the
 * agent's loop each; it works the same on a libevent base and on
 * NXL_LOOP_FD. Callbacks run in turns of the loop, never inside a call of
 * these; a callback may free the stream. */
#ifndef NXL_ENGINE_STREAM_H
#define NXL_ENGINE_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

struct nxl_agent;
struct ssl_st;
typedef struct nxli_stream nxli_stream_t;

/* what ended the stream, for on_event */
#define NXLI_STREAM_EOF 0x1u     /* the peer closed it (TLS: with or without close_notify) */
#define NXLI_STREAM_ERROR 0x2u   /* a socket or TLS error: err, and nxli_stream_tls_errors() */
#define NXLI_STREAM_TIMEOUT 0x4u /* nothing read (or a write stuck) for the timeout */

typedef struct nxli_stream_cbs {
    /* new bytes are in the input (nxli_stream_input) */
    void (*on_read)(nxli_stream_t *s, void *arg);
    /* the TCP connection is made and, with TLS, the handshake done */
    void (*on_connected)(nxli_stream_t *s, void *arg);
    /* the stream ended: what (NXLI_STREAM_*), err (an errno value or 0);
     * it does nothing more, free it */
    void (*on_event)(nxli_stream_t *s, unsigned what, int err, void *arg);
} nxli_stream_cbs_t;

/* A stream on fd, non-blocking (server: accepted, connected; client: from
 * nxli_stream_socket(), to connect with nxli_stream_connect()), which it
 * closes when freed. With
 * ssl (taken over, freed with the stream) it speaks TLS, as the server
 * side or the client side. NULL on failure (fd closed, ssl freed). */
nxli_stream_t *nxli_stream_new(struct nxl_agent *a, int fd, struct ssl_st *ssl, bool server,
                               const nxli_stream_cbs_t *cbs, void *arg);
/* A non-blocking TCP socket of family (AF_INET, AF_INET6) for a stream to
 * connect; -1 with errno. */
int nxli_stream_socket(int family);
/* Connects to sa; 0 (in progress: on_connected or on_event follows), or
 * -1 with errno when it failed at once. */
int nxli_stream_connect(nxli_stream_t *s, const struct sockaddr *sa, socklen_t len);
/* The inactivity timeout, ms (0: none); from now. */
void nxli_stream_set_timeout(nxli_stream_t *s, unsigned ms);
/* Queues n bytes (written once connected, and the handshake done); 0 or
 * -1 (out of memory). */
int nxli_stream_write(nxli_stream_t *s, const void *p, size_t n);
/* The bytes read and not yet drained (*len of them). */
const unsigned char *nxli_stream_input(const nxli_stream_t *s, size_t *len);
void nxli_stream_drain(nxli_stream_t *s, size_t n);
/* Closes the socket and frees everything; NULL: nothing. */
void nxli_stream_free(nxli_stream_t *s);

int nxli_stream_fd(const nxli_stream_t *s);
/* TLS: the session (NULL without TLS), whether the handshake began (the
 * TCP connection was made), and OpenSSL's errors noted when it failed */
struct ssl_st *nxli_stream_ssl(const nxli_stream_t *s);
bool nxli_stream_tls_started(const nxli_stream_t *s);
const unsigned long *nxli_stream_tls_errors(const nxli_stream_t *s, size_t *n);

#endif
