/* SPDX-License-Identifier: BSD-3-Clause */
/* TLS on the metadata exchange: a CA and certificates made by the test
 * (openssl CLI); agents with TLS exchange metadata, with an auth secret as
 * well; a TLS client to a plain listener, a plain client to a TLS listener,
 * a certificate of another CA (either side) fail with a sentence; an
 * incomplete or unreadable configuration is refused at creation. */
#include "testlib.h"

#include <sys/stat.h>
#include <unistd.h>

static char dir[64];
static nxl_agent_t *A, *B;

static char *path(const char *f)
{
    static char p[4][128];
    static int i;
    i = (i + 1) % 4;
    snprintf(p[i], sizeof(p[i]), "%s/%s", dir, f);
    return p[i];
}

static int sh(const char *fmt, const char *arg1, const char *arg2)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), fmt, dir, arg1, arg2);
    return system(cmd);
}

/* a CA (name.pem, name.key), self-signed */
static int make_ca(const char *name)
{
    return sh("cd %s && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
              "-keyout %s.key -out %s.pem -days 2 -subj /CN=nxl-test-ca >/dev/null 2>&1",
              name, name);
}

/* a certificate (name.pem, name.key) signed by ca */
static int make_cert(const char *name, const char *ca)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "cd %s && openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "
             "%s.key -out %s.csr -subj /CN=%s >/dev/null 2>&1 && openssl x509 -req -in %s.csr "
             "-CA %s.pem -CAkey %s.key -CAcreateserial -out %s.pem -days 2 >/dev/null 2>&1",
             dir, name, name, name, name, ca, ca, name);
    return system(cmd);
}

static void setup_once(void)
{
    snprintf(dir, sizeof(dir), "/tmp/nxl-tls-XXXXXX");
    if (!mkdtemp(dir) || make_ca("ca1") || make_ca("ca2") || make_cert("a", "ca1") || make_cert("b", "ca1") ||
        make_cert("x", "ca2")) {
        fprintf(stderr, "check_tls: openssl could not make the test certificates\n");
        exit(1);
    }
}

static void teardown_once(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd)) {
    }
}

static void teardown(void)
{
    nxl_agent_destroy(A);
    nxl_agent_destroy(B);
    A = B = NULL;
}

static char logged[4096];
static void log_keep(nxl_log_level_t level, const char *msg, void *arg)
{
    if (level <= NXL_LOG_WARN && strlen(logged) + strlen(msg) + 2 < sizeof(logged))
        strcat(strcat(logged, msg), "\n");
}

/* an agent with TLS from cert (signed by its CA) trusting ca; cert NULL:
 * without TLS */
static nxl_agent_t *agent(const char *name, int listen, const char *cert, const char *ca,
                          const char *secret)
{
    nxl_agent_config_t c;
    tl_config(&c, name, 3000);
    c.auth_secret = secret;
    c.log_level = NXL_LOG_WARN;
    c.log_cb = log_keep;
    char crt[32], key[32], caf[32];
    if (cert) {
        snprintf(crt, sizeof(crt), "%s.pem", cert);
        snprintf(key, sizeof(key), "%s.key", cert);
        snprintf(caf, sizeof(caf), "%s.pem", ca);
        c.tls_cert_file = strdup(path(crt));
        c.tls_key_file = strdup(path(key));
        c.tls_ca_file = strdup(path(caf));
    }
    nxl_agent_t *a = tl_agent_cfg(&c, listen);
    free((void *)c.tls_cert_file);
    free((void *)c.tls_key_file);
    free((void *)c.tls_ca_file);
    return a;
}

/* A's requests to B, each waited for, then 20 more turns of B to let the
 * listener see the end of the connection (testlib.h) */
static nxl_status_t fetch(void) { return tl_fetch1(A, B, 20); }
static nxl_status_t send_md(void) { return tl_send1(A, B, 20); }

START_TEST(t_tls)
{
    A = agent("A", 0, "a", "ca1", NULL);
    B = agent("B", 1, "b", "ca1", NULL);
    logged[0] = 0;
    ck_assert_msg(fetch() == NXL_SUCCESS, "%s; logged: %s", tl_last_err, logged);
    ck_assert_int_eq(nxl_md_check(A, "B"), NXL_SUCCESS);
    ck_assert_msg(send_md() == NXL_SUCCESS, "%s", tl_last_err);
    ck_assert_int_eq(nxl_md_check(B, "A"), NXL_SUCCESS);
}
END_TEST

START_TEST(t_tls_and_auth)
{
    A = agent("A", 0, "a", "ca1", "a shared secret of the cluster");
    B = agent("B", 1, "b", "ca1", "a shared secret of the cluster");
    ck_assert_msg(fetch() == NXL_SUCCESS, "%s", tl_last_err);
    ck_assert_int_eq(nxl_md_check(A, "B"), NXL_SUCCESS);
    nxl_agent_destroy(A);
    /* TLS does not stand in for the secret: another one is still refused */
    A = agent("A", 0, "a", "ca1", "another secret, not the cluster's");
    ck_assert_int_eq(fetch(), NXL_ERR_NOT_ALLOWED);
    ck_sentence(tl_last_err, "refused");
}
END_TEST

START_TEST(t_tls_client_plain_listener)
{
    A = agent("A", 0, "a", "ca1", NULL);
    B = agent("B", 1, NULL, NULL, NULL);
    logged[0] = 0;
    ck_assert_int_ne(fetch(), NXL_SUCCESS);
    ck_sentence(tl_last_err, "TLS");
    ck_assert_int_ne(nxl_md_check(A, "B"), NXL_SUCCESS);
    ck_assert_msg(strstr(logged, "a TLS client, and this listener has no TLS"), "%s", logged);
}
END_TEST

START_TEST(t_plain_client_tls_listener)
{
    A = agent("A", 0, NULL, NULL, NULL);
    B = agent("B", 1, "b", "ca1", NULL);
    logged[0] = 0;
    ck_assert_int_ne(fetch(), NXL_SUCCESS);
    ck_sentence(tl_last_err, "TLS");
    ck_assert_int_ne(send_md(), NXL_SUCCESS);
    ck_assert_int_ne(nxl_md_check(B, "A"), NXL_SUCCESS);
    ck_assert_msg(strstr(logged, "TLS failed"), "%s", logged);
}
END_TEST

START_TEST(t_other_ca)
{
    /* a client whose certificate another CA signed: the listener refuses it */
    A = agent("A", 0, "x", "ca1", NULL);
    B = agent("B", 1, "b", "ca1", NULL);
    logged[0] = 0;
    ck_assert_int_ne(send_md(), NXL_SUCCESS);
    ck_assert_int_ne(nxl_md_check(B, "A"), NXL_SUCCESS);
    ck_assert_msg(strstr(logged, "TLS failed"), "%s", logged);
    nxl_agent_destroy(A);
    /* a client that trusts another CA: it refuses the listener */
    A = agent("A", 0, "x", "ca2", NULL);
    ck_assert_int_ne(fetch(), NXL_SUCCESS);
    ck_sentence(tl_last_err, "certificate");
    ck_assert_int_ne(nxl_md_check(A, "B"), NXL_SUCCESS);
}
END_TEST

START_TEST(t_config)
{
    nxl_agent_config_t c;
    nxl_agent_t *a = NULL;
    nxl_agent_config_init(&c);
    c.name = "C";
    char *crt = strdup(path("a.pem")), *key = strdup(path("a.key")), *bkey = strdup(path("b.key"));
    char *ca = strdup(path("ca1.pem")), *noca = strdup(path("no-such-ca.pem"));
    c.tls_cert_file = crt;
    ck_assert_int_eq(nxl_agent_create(&c, &a), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(NULL), "tls_key_file");
    c.tls_key_file = bkey; /* not a.pem's key */
    c.tls_ca_file = ca;
    ck_assert_int_eq(nxl_agent_create(&c, &a), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(NULL), "b.key");
    c.tls_key_file = key;
    c.tls_ca_file = noca;
    ck_assert_int_eq(nxl_agent_create(&c, &a), NXL_ERR_INVALID_PARAM);
    ck_sentence(nxl_agent_last_error(NULL), "no-such-ca.pem");
    ck_assert(a == NULL);
    c.tls_ca_file = ca;
    ck_assert_msg(nxl_agent_create(&c, &a) == NXL_SUCCESS, "%s", nxl_agent_last_error(NULL));
    nxl_agent_destroy(a);
    free(crt);
    free(key);
    free(bkey);
    free(ca);
    free(noca);
}
END_TEST

int main(void)
{
    if (system("openssl version >/dev/null 2>&1")) {
        printf("SKIP: no openssl command to make test certificates (apt-get install openssl)\n");
        return 77;
    }
    nxl_agent_config_t probe;
    nxl_agent_config_init(&probe);
    setup_once();
    probe.name = "probe";
    probe.tls_cert_file = path("a.pem");
    probe.tls_key_file = path("a.key");
    probe.tls_ca_file = path("ca1.pem");
    nxl_agent_t *p;
    if (nxl_agent_create(&probe, &p) == NXL_ERR_NOT_SUPPORTED) {
        printf("SKIP: %s\n", nxl_agent_last_error(NULL));
        teardown_once();
        return 77;
    }
    nxl_agent_destroy(p);
    Suite *s = suite_create("tls");
    TL_TCASE(s, "tls", 60, NULL, teardown, t_tls, t_tls_and_auth, t_tls_client_plain_listener,
             t_plain_client_tls_listener, t_other_ca, t_config);
    int rc = tl_run(s);
    teardown_once();
    return rc;
}
