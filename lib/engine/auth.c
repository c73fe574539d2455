/* SPDX-License-Identifier: BSD-3-Clause */
/* Authenticated metadata: with a shared secret, every frame of the metadata
 * exchange carries a trailer
 *
 *     timestamp (u64, microseconds since the epoch, big endian)
 *     nonce (16 bytes)
 *     HMAC-SHA256(key, header | body | timestamp | nonce)  (32 bytes)
 *
 * A request's nonce is fresh; the reply carries the request's nonce, so a
 * reply answers that request and no other. A receiver refuses a frame whose
 * MAC does not verify, whose timestamp is more than NXLI_AUTH_SKEW_S away
 * from its clock, or (requests) whose nonce it has seen within that window.
 * The check runs before the body reaches cJSON or a transport. HMAC from
 * OpenSSL's libcrypto (EVP_MAC).
 *
 * Values published to etcd carry the same trailer (etcd.c: the MAC covers
 * the key, hence the agent's name and the label, and the value); a stored
 * value is read again legitimately, so there is no nonce bookkeeping and no
 * age limit for it: nxli_auth_check_stored() checks the MAC and that it was
 * not signed in the future, and the loader refuses a value signed before
 * the newest it accepted from the same key. */
#include "internal.h"

#ifdef NXL_HAVE_AUTH
#include <errno.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#define SEEN_MAX 4096 /* nonces remembered: requests within the window */

struct nxli_auth {
    unsigned char *key;
    size_t key_len;
    EVP_MAC *mac;
    struct {
        uint64_t ts;
        unsigned char nonce[NXLI_AUTH_NONCE];
    } seen[SEEN_MAX];
    size_t nseen, next;
};

static uint64_t wall_us(void)
{
    return nxl_clock_us(CLOCK_REALTIME);
}

static int compute(struct nxli_auth *au, const unsigned char *hdr, size_t hl, const void *body,
                   size_t bl, const unsigned char *tsn /* ts | nonce */, unsigned char *out)
{
    EVP_MAC_CTX *ctx = EVP_MAC_CTX_new(au->mac);
    if (!ctx)
        return -1;
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
        OSSL_PARAM_construct_end(),
    };
    size_t ol = 0;
    int ok = EVP_MAC_init(ctx, au->key, au->key_len, params) && EVP_MAC_update(ctx, hdr, hl) &&
             (!bl || EVP_MAC_update(ctx, body, bl)) &&
             EVP_MAC_update(ctx, tsn, 8 + NXLI_AUTH_NONCE) &&
             EVP_MAC_final(ctx, out, &ol, NXLI_AUTH_MAC) && ol == NXLI_AUTH_MAC;
    EVP_MAC_CTX_free(ctx);
    return ok ? 0 : -1;
}

nxl_status_t nxli_auth_init(nxl_agent_t *a, const char *secret, const char *key_file)
{
    unsigned char buf[4096];
    size_t len = 0;
    if (key_file) {
        FILE *f = fopen(key_file, "rb");
        if (!f) {
            nxli_err(a, "nxl_agent_create: cannot read the key file '%s': %s", key_file,
                     strerror(errno));
            return NXL_ERR_INVALID_PARAM;
        }
        len = fread(buf, 1, sizeof(buf), f);
        fclose(f);
        while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
            len--; /* a trailing newline is not part of the key */
    } else {
        len = strlen(secret);
        if (len > sizeof(buf))
            len = sizeof(buf);
        memcpy(buf, secret, len);
    }
    if (len < 16) {
        nxli_err(a, "nxl_agent_create: the authentication secret has %zu bytes; use at least 16 "
                    "(32 random bytes are best)", len);
        OPENSSL_cleanse(buf, sizeof(buf));
        return NXL_ERR_INVALID_PARAM;
    }
    struct nxli_auth *au = calloc(1, sizeof(*au));
    if (!au || !(au->key = malloc(len)) || !(au->mac = EVP_MAC_fetch(NULL, "HMAC", NULL))) {
        if (au)
            free(au->key);
        free(au);
        OPENSSL_cleanse(buf, sizeof(buf));
        nxli_err(a, "nxl_agent_create: libcrypto has no HMAC (or out of memory)");
        return NXL_ERR_BACKEND;
    }
    memcpy(au->key, buf, len);
    au->key_len = len;
    OPENSSL_cleanse(buf, sizeof(buf));
    a->auth = au;
    return NXL_SUCCESS;
}

void nxli_auth_free(nxl_agent_t *a)
{
    struct nxli_auth *au = a->auth;
    if (!au)
        return;
    OPENSSL_cleanse(au->key, au->key_len);
    free(au->key);
    EVP_MAC_free(au->mac);
    free(au);
    a->auth = NULL;
}

int nxli_auth_sign(nxl_agent_t *a, const unsigned char *hdr, size_t hl, const void *body,
                   size_t bl, const unsigned char *nonce, unsigned char *trailer)
{
    uint64_t ts = wall_us();
    for (int i = 0; i < 8; i++)
        trailer[i] = (unsigned char)(ts >> (56 - 8 * i));
    if (nonce) {
        memcpy(trailer + 8, nonce, NXLI_AUTH_NONCE);
    } else if (getrandom(trailer + 8, NXLI_AUTH_NONCE, 0) != NXLI_AUTH_NONCE) {
        return -1;
    }
    return compute(a->auth, hdr, hl, body, bl, trailer, trailer + 8 + NXLI_AUTH_NONCE);
}

/* the MAC checked; the trailer's timestamp to *ts. 0 or -1 */
static int check_mac(struct nxli_auth *au, const unsigned char *hdr, size_t hl, const void *body,
                     size_t bl, const unsigned char *trailer, uint64_t *ts, char *why, size_t cap)
{
    unsigned char mac[NXLI_AUTH_MAC];
    if (compute(au, hdr, hl, body, bl, trailer, mac) != 0) {
        snprintf(why, cap, "HMAC could not be computed (libcrypto)");
        return -1;
    }
    if (CRYPTO_memcmp(mac, trailer + 8 + NXLI_AUTH_NONCE, NXLI_AUTH_MAC)) {
        snprintf(why, cap, "its HMAC does not verify (tampered, or signed with another secret)");
        return -1;
    }
    *ts = 0;
    for (int i = 0; i < 8; i++)
        *ts = *ts << 8 | trailer[i];
    return 0;
}

int nxli_auth_check_stored(nxl_agent_t *a, const unsigned char *hdr, size_t hl, const void *body,
                           size_t bl, const unsigned char *trailer, uint64_t *ts, char *why,
                           size_t cap)
{
    if (check_mac(a->auth, hdr, hl, body, bl, trailer, ts, why, cap) != 0)
        return -1;
    uint64_t now = wall_us(), skew = (uint64_t)NXLI_AUTH_SKEW_S * 1000000u;
    if (*ts > now + skew) {
        snprintf(why, cap, "it was signed %lld s in this host's future (more than %d s: clocks "
                 "apart)", (long long)((*ts - now) / 1000000), NXLI_AUTH_SKEW_S);
        return -1;
    }
    return 0;
}

int nxli_auth_verify(nxl_agent_t *a, const unsigned char *hdr, size_t hl, const void *body,
                     size_t bl, const unsigned char *trailer, const unsigned char *expect_nonce,
                     char *why, size_t cap)
{
    struct nxli_auth *au = a->auth;
    uint64_t ts;
    if (check_mac(au, hdr, hl, body, bl, trailer, &ts, why, cap) != 0)
        return -1;
    uint64_t now = wall_us(), skew = (uint64_t)NXLI_AUTH_SKEW_S * 1000000u;
    if (ts + skew < now || ts > now + skew) {
        snprintf(why, cap, "its timestamp is %lld s away from this host's clock (more than %d s: "
                 "a replay, or clocks apart)", (long long)((int64_t)(ts - now) / 1000000),
                 NXLI_AUTH_SKEW_S);
        return -1;
    }
    const unsigned char *nonce = trailer + 8;
    if (expect_nonce) {
        if (CRYPTO_memcmp(nonce, expect_nonce, NXLI_AUTH_NONCE)) {
            snprintf(why, cap, "it answers another request (a replayed reply)");
            return -1;
        }
        return 0;
    }
    /* a request: its nonce must be new within the window */
    for (size_t i = 0; i < au->nseen; i++)
        if (au->seen[i].ts + skew >= now && !memcmp(au->seen[i].nonce, nonce, NXLI_AUTH_NONCE)) {
            snprintf(why, cap, "it was received before (a replayed request)");
            return -1;
        }
    /* remember it: a free or expired slot, else the oldest (round robin) */
    size_t k = au->nseen < SEEN_MAX ? au->nseen++ : au->next++ % SEEN_MAX;
    au->seen[k].ts = ts > now ? ts : now;
    memcpy(au->seen[k].nonce, nonce, NXLI_AUTH_NONCE);
    return 0;
}

#else /* no libcrypto */

nxl_status_t nxli_auth_init(nxl_agent_t *a, const char *secret, const char *key_file)
{
    nxli_err(a, "nxl_agent_create: an authentication secret was given, but this build has no "
                "authentication (configure found no libcrypto: apt-get install libssl-dev)");
    return NXL_ERR_NOT_SUPPORTED;
}
void nxli_auth_free(nxl_agent_t *a) {}
int nxli_auth_sign(nxl_agent_t *a, const unsigned char *hdr, size_t hl, const void *body,
                   size_t bl, const unsigned char *nonce, unsigned char *trailer)
{
    return -1;
}
int nxli_auth_verify(nxl_agent_t *a, const unsigned char *hdr, size_t hl, const void *body,
                     size_t bl, const unsigned char *trailer, const unsigned char *expect_nonce,
                     char *why, size_t cap)
{
    snprintf(why, cap, "no authentication in this build");
    return -1;
}
int nxli_auth_check_stored(nxl_agent_t *a, const unsigned char *hdr, size_t hl, const void *body,
                           size_t bl, const unsigned char *trailer, uint64_t *ts, char *why,
                           size_t cap)
{
    snprintf(why, cap, "no authentication in this build");
    return -1;
}
#endif
