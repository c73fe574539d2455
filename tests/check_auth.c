/* SPDX-License-Identifier: BSD-3-Clause */
/* Authenticated metadata: agents sharing a secret exchange metadata; an
 * unsigned request, a reply or request signed with another secret, a
 * tampered frame and a replayed one are refused with NXL_ERR_NOT_ALLOWED
 * and a sentence on both sides, before anything is loaded; the secret can
 * come from a key file or the environment. */
#include "testlib.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#define S1 "a shared secret of the cluster"
#define S2 "another secret, not the same one"

static nxl_agent_t *A, *B;

static nxl_agent_t *agent(const char *name, int listen, const char *secret, const char *keyfile)
{
    nxl_agent_config_t c;
    tl_config(&c, name, 3000);
    c.auth_secret = secret;
    c.auth_key_file = keyfile;
    return tl_agent_cfg(&c, listen);
}

static void teardown(void)
{
    nxl_agent_destroy(A);
    nxl_agent_destroy(B);
    A = B = NULL;
}

static void turn(void)
{
    nxl_agent_run_once(A, 0);
    if (B)
        nxl_agent_run_once(B, 1);
}

/* A's requests to B, each waited for (testlib.h) */
static nxl_status_t wait1(void) { return tl_wait1(A, B, 0); }
static nxl_status_t fetch(void) { return tl_fetch1(A, B, 0); }
static nxl_status_t send_md(void) { return tl_send1(A, B, 0); }

static nxl_stats_t stats(nxl_agent_t *a)
{
    nxl_stats_t s = {.size = sizeof(s)};
    ck_assert_int_eq(nxl_agent_stats(a, NULL, &s), NXL_SUCCESS);
    return s;
}

START_TEST(t_same_secret)
{
    A = agent("A", 0, S1, NULL);
    B = agent("B", 1, S1, NULL);
    ck_assert_int_eq(fetch(), NXL_SUCCESS);
    ck_assert_int_eq(nxl_md_check(A, "B"), NXL_SUCCESS);
    ck_assert_int_eq(send_md(), NXL_SUCCESS);
    ck_assert_int_eq(nxl_md_check(B, "A"), NXL_SUCCESS);
    ck_assert_int_eq(nxl_md_send_invalidate(A, "127.0.0.1", nxl_agent_listen_port(B), tl_count_cb,
                                            NULL, NULL),
                     NXL_SUCCESS);
    ck_assert_int_eq(wait1(), NXL_SUCCESS);
    ck_assert_int_eq(nxl_md_check(B, "A"), NXL_ERR_NOT_FOUND);
    ck_assert_uint_eq(stats(B).md_auth_refused, 0);
}
END_TEST

/* A (secret a_secret) and B (b_secret, listening): A's fetch of B's
 * metadata is refused, A's error says why, and A holds nothing of B. */
static void fetch_refused(const char *a_secret, const char *b_secret, const char *why)
{
    A = agent("A", 0, a_secret, NULL);
    B = agent("B", 1, b_secret, NULL);
    ck_assert_int_eq(fetch(), NXL_ERR_NOT_ALLOWED);
    ck_sentence(tl_last_err, why);
    ck_assert_int_eq(nxl_md_check(A, "B"), NXL_ERR_NOT_FOUND);
}

START_TEST(t_unsigned_request)
{
    fetch_refused(NULL, S1, "authentication");
    ck_assert_int_eq(send_md(), NXL_ERR_NOT_ALLOWED);
    ck_assert_int_eq(nxl_md_check(B, "A"), NXL_ERR_NOT_FOUND);
    ck_assert_uint_eq(stats(B).md_auth_refused, 2);
    ck_sentence(nxl_agent_last_error(B), "not signed");
}
END_TEST

START_TEST(t_other_secret)
{
    A = agent("A", 0, S2, NULL);
    B = agent("B", 1, S1, NULL);
    ck_assert_int_eq(send_md(), NXL_ERR_NOT_ALLOWED);
    ck_assert_int_eq(nxl_md_check(B, "A"), NXL_ERR_NOT_FOUND);
    ck_sentence(nxl_agent_last_error(B), "HMAC");
    ck_assert_int_eq(fetch(), NXL_ERR_NOT_ALLOWED);
    ck_assert_int_eq(nxl_md_check(A, "B"), NXL_ERR_NOT_FOUND);
}
END_TEST

/* A has a secret, B does not: B answers unsigned, A refuses the answer. */
START_TEST(t_unsigned_reply)
{
    fetch_refused(S1, NULL, "not signed");
    ck_assert_uint_eq(stats(A).md_auth_refused, 1);
}
END_TEST

/* the bytes of A's signed md_send, caught by a listener of the test's own */
static size_t capture(unsigned char *buf, size_t cap)
{
    uint16_t lport;
    int ls = tl_loopback_socket(4, &lport);
    ck_assert_int_eq(nxl_md_send(A, "127.0.0.1", lport, NULL, NULL, NULL),
                     NXL_SUCCESS);
    int s = -1;
    size_t got = 0, want = 16;
    uint64_t end = tl_now_ms() + 5000;
    while ((s < 0 || got < want) && tl_now_ms() < end) {
        turn();
        struct pollfd p = {.fd = s < 0 ? ls : s, .events = POLLIN};
        if (poll(&p, 1, 5) <= 0)
            continue;
        if (s < 0) {
            s = accept(ls, NULL, NULL);
            continue;
        }
        ssize_t n = read(s, buf + got, cap - got);
        if (n <= 0)
            break;
        got += (size_t)n;
        if (got >= 16)
            want = 16 + ((size_t)buf[8] << 24 | (size_t)buf[9] << 16 | (size_t)buf[10] << 8 | buf[11]);
    }
    close(s);
    close(ls);
    ck_assert_msg(got == want && (buf[7] & 1), "caught %zu of %zu bytes", got, want);
    return got;
}

/* sends raw bytes to B's listener; returns the status byte of its reply */
static int raw_request(const unsigned char *frame, size_t len)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(nxl_agent_listen_port(B)),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert(connect(s, (struct sockaddr *)&to, sizeof(to)) == 0);
    ck_assert(write(s, frame, len) == (ssize_t)len);
    fcntl(s, F_SETFL, O_NONBLOCK);
    unsigned char h[16];
    size_t got = 0;
    uint64_t end = tl_now_ms() + 5000;
    while (got < 16 && tl_now_ms() < end) {
        ssize_t n = read(s, h + got, 16 - got);
        if (n > 0)
            got += (size_t)n;
        else if (n == 0 || errno != EAGAIN)
            break;
        turn();
    }
    close(s);
    ck_assert_int_eq(got, 16);
    return (int)(int8_t)h[6];
}

START_TEST(t_replay_and_tamper)
{
    A = agent("A", 0, S1, NULL);
    B = agent("B", 1, S1, NULL);
    static unsigned char frame[1 << 16];
    size_t len = capture(frame, sizeof(frame));
    ck_assert_int_eq(nxl_md_check(B, "A"), NXL_ERR_NOT_FOUND);
    /* once: accepted */
    ck_assert_int_eq(raw_request(frame, len), NXL_SUCCESS);
    ck_assert_int_eq(nxl_md_check(B, "A"), NXL_SUCCESS);
    ck_assert_int_eq(nxl_md_invalidate(B, "A"), NXL_SUCCESS);
    /* again: a replay */
    ck_assert_int_eq(raw_request(frame, len), NXL_ERR_NOT_ALLOWED);
    ck_sentence(nxl_agent_last_error(B), "replayed");
    ck_assert_int_eq(nxl_md_check(B, "A"), NXL_ERR_NOT_FOUND);
    /* one byte of the body changed */
    frame[16 + 10] ^= 1;
    ck_assert_int_eq(raw_request(frame, len), NXL_ERR_NOT_ALLOWED);
    ck_sentence(nxl_agent_last_error(B), "HMAC");
    ck_assert_int_eq(nxl_md_check(B, "A"), NXL_ERR_NOT_FOUND);
    frame[16 + 10] ^= 1;
    /* the signature cut off, the flag cleared: unsigned */
    frame[7] = 0;
    size_t body = len - 16 - 56;
    frame[8] = (unsigned char)(body >> 24), frame[9] = (unsigned char)(body >> 16);
    frame[10] = (unsigned char)(body >> 8), frame[11] = (unsigned char)body;
    ck_assert_int_eq(raw_request(frame, len - 56), NXL_ERR_NOT_ALLOWED);
    ck_sentence(nxl_agent_last_error(B), "not signed");
    ck_assert_uint_eq(stats(B).md_auth_refused, 3);
    /* and B still serves A properly */
    ck_assert_int_eq(send_md(), NXL_SUCCESS);
    ck_assert_int_eq(nxl_md_check(B, "A"), NXL_SUCCESS);
}
END_TEST

START_TEST(t_secret_sources)
{
    nxl_agent_config_t c;
    nxl_agent_config_init(&c);
    c.name = "X";
    c.auth_secret = "short";
    nxl_agent_t *x = (nxl_agent_t *)&x;
    ck_assert_int_eq(nxl_agent_create(&c, &x), NXL_ERR_INVALID_PARAM);
    ck_assert_ptr_null(x);
    ck_sentence(nxl_agent_last_error(NULL), "16");
    c.auth_secret = NULL;
    c.auth_key_file = "/nonexistent/nxl.key";
    ck_assert_int_eq(nxl_agent_create(&c, &x), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(NULL), "/nonexistent/nxl.key");
    /* a key file (its final newline is not part of the key) talks to the
     * same secret given inline, and to one from the environment */
    char path[] = "/tmp/nxl-key-XXXXXX";
    int fd = mkstemp(path);
    ck_assert(write(fd, S1 "\n", strlen(S1) + 1) == (ssize_t)strlen(S1) + 1);
    close(fd);
    A = agent("A", 0, NULL, path);
    B = agent("B", 1, S1, NULL);
    ck_assert_int_eq(fetch(), NXL_SUCCESS);
    nxl_agent_destroy(B);
    setenv("NXL_AUTH_SECRET", S1, 1);
    B = agent("B", 1, NULL, NULL);
    unsetenv("NXL_AUTH_SECRET");
    ck_assert_int_eq(fetch(), NXL_SUCCESS);
    unlink(path);
}
END_TEST

int main(void)
{
    unsetenv("NXL_AUTH_SECRET");
    unsetenv("NXL_AUTH_KEY_FILE");
    Suite *s = suite_create("auth");
    TL_TCASE(s, "auth", 60, NULL, teardown, t_same_secret, t_unsigned_request, t_other_secret,
             t_unsigned_reply, t_replay_and_tamper, t_secret_sources);
    return tl_run(s);
}
