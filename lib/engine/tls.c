/* SPDX-License-Identifier: BSD-3-Clause */
/* TLS for the metadata exchange: the listener's and the client's
 * connections (stream.c) carry an OpenSSL session made here; the framing,
 * limits and authentication above them are the same. Both sides present a certificate
 * and check the other's against the configured CA (mutual TLS); any
 * certificate the CA signed is a peer (names are not checked: agents are
 * often reached by address). TLS 1.2 at least. */
#include "internal.h"
#include "stream.h"

#include <errno.h>
#include <string.h>

#ifdef NXL_HAVE_TLS
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <stdio.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

struct nxli_tls {
    SSL_CTX *ctx;
};

/* OpenSSL's socket BIO writes with write(): a peer gone raises SIGPIPE,
 * which kills a process that did not ignore it (the plain exchange writes
 * with send(MSG_NOSIGNAL); TLS writes after the request too, alerts and
 * session tickets). This BIO is the socket BIO writing with
 * send(MSG_NOSIGNAL). */
static BIO_METHOD *nosig_method;
static pthread_once_t nosig_once = PTHREAD_ONCE_INIT;

static int nosig_write(BIO *b, const char *buf, int len)
{
    int fd = -1;
    BIO_get_fd(b, &fd);
    errno = 0;
    ssize_t n = send(fd, buf, (size_t)len, MSG_NOSIGNAL);
    BIO_clear_retry_flags(b);
    if (n <= 0 && BIO_sock_should_retry((int)n))
        BIO_set_retry_write(b);
    return (int)n;
}

static void nosig_init(void)
{
    const BIO_METHOD *s = BIO_s_socket();
    BIO_METHOD *m = BIO_meth_new(BIO_TYPE_SOCKET, "nxl socket");
    if (m && BIO_meth_set_write(m, nosig_write) && BIO_meth_set_read(m, BIO_meth_get_read(s)) &&
        BIO_meth_set_puts(m, BIO_meth_get_puts(s)) && BIO_meth_set_ctrl(m, BIO_meth_get_ctrl(s)) &&
        BIO_meth_set_create(m, BIO_meth_get_create(s)) &&
        BIO_meth_set_destroy(m, BIO_meth_get_destroy(s))) {
        nosig_method = m;
        return;
    }
    BIO_meth_free(m);
}

/* ssl reads and writes fd through the BIO above; 0 or -1 */
static int nosig_attach(SSL *ssl, int fd)
{
    pthread_once(&nosig_once, nosig_init);
    BIO *b = nosig_method ? BIO_new(nosig_method) : NULL;
    if (!b)
        return -1;
    BIO_set_fd(b, fd, BIO_NOCLOSE);
    SSL_set_bio(ssl, b, b);
    /* a handshake is several small writes each way: with Nagle's algorithm
     * and delayed ACKs each waits 40 ms */
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return 0;
}

/* OpenSSL's queued errors as one sentence part */
static void ossl_errors(char *buf, size_t cap)
{
    unsigned long e;
    size_t o = 0;
    buf[0] = 0;
    while ((e = ERR_get_error()) && o + 3 < cap) {
        char s[256];
        ERR_error_string_n(e, s, sizeof(s));
        o += (size_t)snprintf(buf + o, cap - o, "%s%s", o ? "; " : "", s);
    }
    if (!buf[0])
        snprintf(buf, cap, "no reason given");
}

nxl_status_t nxli_tls_init(nxl_agent_t *a, const char *cert, const char *key, const char *ca)
{
    if (!cert || !key || !ca) {
        nxli_err(a, "nxl_agent_create: TLS needs a certificate, its key and a CA file "
                    "(tls_cert_file, tls_key_file, tls_ca_file); %s is missing",
                 !cert ? "tls_cert_file" : !key ? "tls_key_file" : "tls_ca_file");
        return NXL_ERR_INVALID_PARAM;
    }
    ERR_clear_error();
    SSL_CTX *ctx = SSL_CTX_new(TLS_method());
    char why[600];
    const char *what = NULL, *file = NULL;
    if (!ctx)
        what = "cannot make a TLS context", file = "";
    else if (!SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION))
        what = "cannot require TLS 1.2", file = "";
    else if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1)
        what = "cannot use the certificate", file = cert;
    else if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1)
        what = "cannot use the key", file = key;
    else if (SSL_CTX_check_private_key(ctx) != 1)
        what = "the key does not belong to the certificate", file = key;
    else if (SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1)
        what = "cannot use the CA file", file = ca;
    if (what) {
        ossl_errors(why, sizeof(why));
        nxli_err(a, "nxl_agent_create: TLS: %s '%s': %s", what, file, why);
        SSL_CTX_free(ctx);
        return NXL_ERR_INVALID_PARAM;
    }
    /* both sides verified: a client without a certificate is refused */
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    struct nxli_tls *t = calloc(1, sizeof(*t));
    if (!t) {
        SSL_CTX_free(ctx);
        return NXL_ERR_UNKNOWN;
    }
    t->ctx = ctx;
    a->tls = t;
    return NXL_SUCCESS;
}

void nxli_tls_free(nxl_agent_t *a)
{
    if (!a->tls)
        return;
    SSL_CTX_free(a->tls->ctx);
    free(a->tls);
    a->tls = NULL;
}

struct ssl_st *nxli_tls_ssl(nxl_agent_t *a, int fd)
{
    SSL *ssl = SSL_new(a->tls->ctx);
    if (!ssl || nosig_attach(ssl, fd) != 0) {
        SSL_free(ssl);
        return NULL;
    }
    return ssl;
}

void nxli_tls_why(const nxli_stream_t *s, char *buf, size_t cap)
{
    size_t o = 0, n;
    buf[0] = 0;
    SSL *ssl = nxli_stream_ssl(s);
    long v = ssl ? SSL_get_verify_result(ssl) : X509_V_OK;
    if (v != X509_V_OK)
        o += (size_t)snprintf(buf, cap, "the peer's certificate: %s",
                              X509_verify_cert_error_string(v));
    const unsigned long *e = nxli_stream_tls_errors(s, &n);
    for (size_t i = 0; i < n && o + 3 < cap; i++) {
        char t[256];
        ERR_error_string_n(e[i], t, sizeof(t));
        o += (size_t)snprintf(buf + o, cap - o, "%s%s", o ? "; " : "", t);
    }
    if (!buf[0])
        snprintf(buf, cap, "the connection closed during the handshake");
}

#else /* no TLS */

nxl_status_t nxli_tls_init(nxl_agent_t *a, const char *cert, const char *key, const char *ca)
{
    nxli_err(a, "nxl_agent_create: TLS files were given, but this build has no TLS (configure "
                "found no libssl: apt-get install libssl-dev)");
    return NXL_ERR_NOT_SUPPORTED;
}
void nxli_tls_free(nxl_agent_t *a) {}
struct ssl_st *nxli_tls_ssl(nxl_agent_t *a, int fd)
{
    return NULL;
}
void nxli_tls_why(const nxli_stream_t *s, char *buf, size_t cap)
{
    snprintf(buf, cap, "no TLS in this build");
}
#endif
