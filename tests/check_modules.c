/* SPDX-License-Identifier: BSD-3-Clause */
/* Transports as modules: a folder of broken modules (another ABI, a missing
 * library, no ops symbol, not a library at all) put first in
 * NXL_PLUGIN_DIR. nxl_plugins_available() lists each unavailable with the
 * reason, nxl_backend_create() refuses each with a status and a sentence,
 * and the real transports still work, built in or loaded as modules (make
 * check points NXL_PLUGIN_DIR at the build tree's module folders). Every
 * transport configure knows is listed as it decided: built in, module, or
 * "not built (configure --enable-X)". */
#include "config.h"
#include "testlib.h"

#include <nxl/transport.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef NXL_TEST_LIBDIR
#error "NXL_TEST_LIBDIR: the folder holding the test modules (tests/.libs)"
#endif

static char dir[64] = "/tmp/nxl_modules.XXXXXX";
static char *plugin_path; /* dir first, then what make check set */

static const struct {
    const char *id, *name;
    int state; /* 0 not built, 1 built in, 2 module */
    const char *hint;
} configured[] = {
#define X(id, name, state, hint, why) {id, name, state, hint},
    NXL_CONFIGURED_TRANSPORTS
#undef X
};
#define NCONF (sizeof(configured) / sizeof(configured[0]))

static void copy_file(const char *from, const char *to)
{
    int in = open(from, O_RDONLY), out = -1;
    if (in < 0) {
        fprintf(stderr, "check_modules: cannot open %s (%s): was the test module built?\n", from,
                strerror(errno));
        exit(99);
    }
    out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0755);
    char buf[65536];
    ssize_t n;
    while (out >= 0 && (n = read(in, buf, sizeof(buf))) > 0)
        if (write(out, buf, (size_t)n) != n)
            break;
    close(in);
    if (out < 0 || close(out)) {
        fprintf(stderr, "check_modules: cannot write %s\n", to);
        exit(99);
    }
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f)) {
        fprintf(stderr, "check_modules: cannot write %s\n", path);
        exit(99);
    }
}

/* The folder of broken modules. */
static void make_dir(void)
{
    char from[512], to[512];
    if (!mkdtemp(dir)) {
        perror("check_modules: mkdtemp");
        exit(99);
    }
    const char *copies[][2] = {
        {"libnxl-bogus.so", "libnxl-bogus.so"},
        {"libnxl-needy.so", "libnxl-needy.so"},
        {"libnxl-decline.so", "libnxl-decline.so"},
        {"../libnxltest-stub.so", "libnxl-nosym.so"},
    };
    for (size_t i = 0; i < sizeof(copies) / sizeof(copies[0]); i++) {
        snprintf(from, sizeof(from), "%s/%s", NXL_TEST_LIBDIR, copies[i][0]);
        snprintf(to, sizeof(to), "%s/%s", dir, copies[i][1]);
        copy_file(from, to);
    }
    snprintf(to, sizeof(to), "%s/libnxl-junk.so", dir);
    write_file(to, "not a shared object\n");
    /* not module names: ignored */
    snprintf(to, sizeof(to), "%s/libnxl-two-words.so", dir);
    write_file(to, "ignored\n");
    snprintf(to, sizeof(to), "%s/README", dir);
    write_file(to, "ignored\n");
}

static void remove_dir(void)
{
    const char *files[] = {"libnxl-bogus.so", "libnxl-needy.so", "libnxl-decline.so", "libnxl-nosym.so",
                           "libnxl-junk.so", "libnxl-two-words.so", "README"};
    char p[512];
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(p, sizeof(p), "%s/%s", dir, files[i]);
        unlink(p);
    }
    rmdir(dir);
}

static const nxl_plugin_info_t *find(const nxl_plugin_info_t *p, size_t n, const char *name)
{
    const nxl_plugin_info_t *found = NULL;
    for (size_t i = 0; i < n; i++)
        if (!strcasecmp(p[i].name, name)) {
            ck_assert_msg(!found, "%s is listed twice", name);
            found = &p[i];
        }
    return found;
}

static nxl_plugin_info_t *list(size_t *n)
{
    *n = nxl_plugins_available(NULL, 0);
    nxl_plugin_info_t *p = calloc(*n + 1, sizeof(*p));
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_eq(nxl_plugins_available(p, *n), *n);
    return p;
}

static void ck_unavailable(const nxl_plugin_info_t *p, size_t n, const char *name,
                           const char *why)
{
    const nxl_plugin_info_t *e = find(p, n, name);
    ck_assert_msg(e, "%s is not listed", name);
    ck_assert_msg(!e->available, "%s is listed available", name);
    ck_assert_msg(strstr(e->reason, why), "%s: reason '%s' lacks '%s'", name, e->reason, why);
}

START_TEST(t_list)
{
    size_t n;
    nxl_plugin_info_t *p = list(&n);
    for (size_t i = 0; i < n; i++)
        printf("  %-8s %s  %s\n", p[i].name, p[i].available ? "yes" : "no ", p[i].reason);
    char abi[64];
    snprintf(abi, sizeof(abi), "speaks transport ABI %d, this libnxl %d", NXLT_ABI_VERSION + 100,
             NXLT_ABI_VERSION);
    ck_unavailable(p, n, "bogus", abi);
    ck_unavailable(p, n, "needy", "libnxltest-absent.so.0: cannot open shared object file");
    ck_unavailable(p, n, "nosym", "exports no nxlt_nosym_ops");
    ck_unavailable(p, n, "junk", "libnxl-junk.so: ");
    ck_assert_ptr_null(find(p, n, "two-words"));
    ck_assert_ptr_null(find(p, n, "README"));
    free(p);
}
END_TEST

/* Each transport configure knows is listed as it decided. */
START_TEST(t_configured)
{
    size_t n;
    nxl_plugin_info_t *p = list(&n);
    for (size_t i = 0; i < NCONF; i++) {
        const nxl_plugin_info_t *e = find(p, n, configured[i].name);
        ck_assert_msg(e, "%s is not listed", configured[i].name);
        if (configured[i].state == 0) {
            char want[64];
            snprintf(want, sizeof(want), "not built (configure --enable-%s)", configured[i].id);
            ck_unavailable(p, n, configured[i].name, want);
        } else {
            /* built in, or its module from the build tree; available unless
             * the machine lacks what it drives (CUDA without a driver),
             * which its reason says */
            ck_assert_msg(e->available || is_sentence(e->reason), "%s: %s", e->name, e->reason);
            ck_assert_uint_ne(e->mem_mask, 0);
        }
    }
    free(p);
}
END_TEST

START_TEST(t_create_refused)
{
    nxl_agent_t *a = tl_agent_bare("M", 0);
    ck_assert_int_eq(tl_backend_refused(a, "bogus", NULL, 0), NXL_ERR_MISMATCH);
    nxl_backend_t *b = NULL;
    const char *e = nxl_agent_last_error(a);
    ck_assert_msg(is_sentence(e) && strstr(e, "nxl_backend_create") && strstr(e, "ABI") &&
                      strstr(e, dir),
                  "%s", e);
    ck_assert_int_eq(nxl_backend_create(a, "needy", NULL, 0, &b), NXL_ERR_NOT_FOUND);
    e = nxl_agent_last_error(a);
    ck_assert_msg(strstr(e, "libnxltest-absent.so.0") && strstr(e, "install"), "%s", e);
    ck_assert_int_eq(nxl_backend_create(a, "NOSYM", NULL, 0, &b), NXL_ERR_NOT_FOUND);
    ck_assert_msg(strstr(nxl_agent_last_error(a), "not an nxl transport module"), "%s",
                  nxl_agent_last_error(a));
    ck_assert_int_eq(nxl_backend_create(a, "junk", NULL, 0, &b), NXL_ERR_NOT_FOUND);
    ck_assert_int_eq(nxl_backend_create(a, "nosuch", NULL, 0, &b), NXL_ERR_NOT_FOUND);
    e = nxl_agent_last_error(a);
    ck_assert_msg(strstr(e, "no transport 'nosuch'") && strstr(e, dir), "%s", e);
    ck_assert_ptr_null(nxl_backend_get(a, "bogus"));
    /* the real transports still work, whichever way they were built */
    size_t np;
    nxl_plugin_info_t *pl = list(&np);
    for (size_t i = 0; i < NCONF; i++)
        if (configured[i].state) {
            const nxl_plugin_info_t *e = find(pl, np, configured[i].name);
            nxl_status_t st = nxl_backend_create(a, configured[i].name, NULL, 0, &b);
            if (e && !e->available) { /* this machine cannot run it: refused, with why */
                ck_assert_int_eq(st, NXL_ERR_BACKEND);
                ck_assert(is_sentence(nxl_agent_last_error(a)));
                continue;
            }
            if (st == NXL_ERR_INVALID_PARAM) { /* it needs parameters (OBJ: a bucket) */
                ck_assert(is_sentence(nxl_agent_last_error(a)));
                continue;
            }
            ck_assert_msg(st == NXL_SUCCESS, "%s: %s", configured[i].name,
                          nxl_agent_last_error(a));
            ck_assert_str_eq(nxl_backend_name(b), configured[i].name);
        }
    free(pl);
    nxl_agent_destroy(a);
}
END_TEST

/* The first calls race from several threads: one load, one list. */
static void *lister(void *arg)
{
    *(size_t *)arg = nxl_plugins_available(NULL, 0);
    return NULL;
}

START_TEST(t_threads)
{
    pthread_t th[8];
    size_t n[8];
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, lister, &n[i]), 0);
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(pthread_join(th[i], NULL), 0);
    for (int i = 1; i < 8; i++)
        ck_assert_uint_eq(n[i], n[0]);
    ck_assert_uint_ge(n[0], 4 + NCONF);
}
END_TEST

/* A transport built as a module whose file is nowhere: listed unavailable,
 * and nxl_backend_create names the folders searched. With @p fake, its
 * file is there but needs a library that is not (libnxl-needy.so under its
 * name): the reason names the library and the package to install. In a
 * child, which loads with NXL_PLUGIN_DIR holding only the broken modules. */
static int missing_child(size_t ci, int fake, char *msg, size_t cap)
{
    const char *name = configured[ci].name, *id = configured[ci].id;
    char dir2[64] = "/tmp/nxl_modules2.XXXXXX", path[512], want[128], from[512];
    if (fake) {
        if (!mkdtemp(dir2))
            return snprintf(msg, cap, "mkdtemp: %s", strerror(errno)), 1;
        snprintf(from, sizeof(from), "%s/libnxl-needy.so", NXL_TEST_LIBDIR);
        snprintf(path, sizeof(path), "%s/libnxl-%s.so", dir2, id);
        copy_file(from, path);
        char *pd;
        if (asprintf(&pd, "%s:%s", dir, dir2) < 0)
            return 1;
        setenv("NXL_PLUGIN_DIR", pd, 1);
        snprintf(want, sizeof(want), "libnxl-%s.so: libnxltest-absent.so.0: cannot open", id);
    } else {
        setenv("NXL_PLUGIN_DIR", dir, 1);
        snprintf(want, sizeof(want), "module libnxl-%s.so not found", id);
    }
    size_t n = nxl_plugins_available(NULL, 0);
    nxl_plugin_info_t p[64];
    nxl_plugins_available(p, 64);
    int bad = 1;
    for (size_t i = 0; i < n && i < 64; i++) {
        if (strcasecmp(p[i].name, name))
            continue;
        bad = 0;
        if (p[i].available)
            break; /* installed in the install folder: nothing to check */
        if (!strstr(p[i].reason, want) ||
            (fake && configured[ci].hint[0] && !strstr(p[i].reason, configured[ci].hint))) {
            snprintf(msg, cap, "%s: reason '%s' lacks '%s' or '%s'", name, p[i].reason, want,
                     configured[ci].hint);
            bad = 1;
            break;
        }
        nxl_agent_config_t c;
        nxl_agent_config_init(&c);
        c.name = "M";
        nxl_agent_t *a;
        if (nxl_agent_create(&c, &a) != NXL_SUCCESS) {
            snprintf(msg, cap, "agent: %s", nxl_agent_last_error(NULL));
            bad = 1;
            break;
        }
        nxl_status_t st = nxl_backend_create(a, name, NULL, 0, NULL);
        const char *e = nxl_agent_last_error(a);
        if (st != NXL_ERR_NOT_FOUND || !is_sentence(e) ||
            (fake ? !strstr(e, path) : !strstr(e, dir) || !strstr(e, "NXL_PLUGIN_DIR"))) {
            snprintf(msg, cap, "%s: %s: %s", name, nxl_status_name(st), e);
            bad = 1;
        }
        nxl_agent_destroy(a);
        break;
    }
    if (fake) {
        unlink(path);
        rmdir(dir2);
    }
    if (bad && !msg[0])
        snprintf(msg, cap, "%s is not listed", name);
    return bad;
}

typedef struct {
    size_t ci;
    int fake;
} missing_t;

/* missing_child for tl_in_child */
static int missing_fn(const void *arg, char *msg, size_t cap)
{
    const missing_t *m = arg;
    return missing_child(m->ci, m->fake, msg, cap);
}

START_TEST(t_module_missing)
{
    int checked = 0;
    for (size_t i = 0; i < NCONF; i++) {
        if (configured[i].state != 2)
            continue;
        for (int fake = 0; fake < 2; fake++) {
            missing_t m = {i, fake};
            tl_in_child(missing_fn, &m);
            checked++;
        }
    }
    printf("t_module_missing: %d checks (%s)\n", checked,
           checked ? "transports built as modules, their files missing or broken"
                   : "no transport is built as a module in this configuration");
}
END_TEST

/* A transport that serves a memory type but declines a region or an
 * allocation (NXL_ERR_NOT_SUPPORTED) is left out when another takes it,
 * and its sentence is the error when none does. */
START_TEST(t_declined)
{
    size_t n;
    nxl_plugin_info_t *p = list(&n);
    const nxl_plugin_info_t *u = find(p, n, "UCX");
    int have_ucx = u && u->available;
    free(p);
    static char buf[8192];
    nxl_desc_t d = {.addr = (uintptr_t)buf, .len = 4096};
    nxl_agent_config_t c;
    nxl_agent_config_init(&c);
    c.name = "dec";
    nxl_agent_t *a;
    ck_assert_int_eq(nxl_agent_create(&c, &a), NXL_SUCCESS);
    nxl_backend_t *db = NULL;
    ck_assert_msg(nxl_backend_create(a, "decline", NULL, 0, &db) == NXL_SUCCESS, "%s",
                  nxl_agent_last_error(a));
    /* alone: refused with its sentence */
    ck_assert_int_eq(nxl_mem_register(a, NXL_DRAM, &d, 1, NULL), NXL_ERR_NOT_SUPPORTED);
    ck_sentence(nxl_agent_last_error(a), "declines DRAM");
    nxl_prepped_t *pp = NULL;
    ck_assert_int_eq(nxl_prep(a, NULL, NXL_DRAM, &d, 1, &pp), NXL_ERR_NOT_FOUND);
    /* DRAM allocation falls back to the host's */
    void *m = NULL;
    ck_assert_int_eq(nxl_mem_alloc(a, NXL_DRAM, 4096, 0, &m), NXL_SUCCESS);
    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(nxl_mem_free(a, m), NXL_SUCCESS);
    if (have_ucx) {
        /* with UCX after it: UCX takes the region and the allocation */
        ck_assert(nxl_backend_create(a, "UCX", NULL, 0, NULL) == NXL_SUCCESS);
        ck_assert_msg(nxl_mem_register(a, NXL_DRAM, &d, 1, NULL) == NXL_SUCCESS, "%s",
                      nxl_agent_last_error(a));
        ck_assert_int_eq(nxl_prep(a, NULL, NXL_DRAM, &d, 1, &pp), NXL_SUCCESS);
        nxl_prepped_release(pp);
        /* named, it still declines */
        nxl_desc_t d2 = {.addr = (uintptr_t)buf + 4096, .len = 4096};
        ck_assert_int_eq(nxl_mem_register(a, NXL_DRAM, &d2, 1, db), NXL_ERR_NOT_SUPPORTED);
        ck_sentence(nxl_agent_last_error(a), "declines");
        ck_assert_int_eq(nxl_mem_deregister(a, NXL_DRAM, &d, 1), NXL_SUCCESS);
        ck_assert_int_eq(nxl_mem_alloc(a, NXL_DRAM, 65536, 0, &m), NXL_SUCCESS);
        ck_assert_int_eq(nxl_mem_free(a, m), NXL_SUCCESS);
    } else {
        printf("check_modules: t_declined: UCX not available, its half skipped\n");
    }
    nxl_agent_destroy(a);
    /* UCX first, the decliner second: an allocation is UCX's and the
     * decliner is left out of its registration */
    if (have_ucx) {
        c.name = "dec2";
        ck_assert_int_eq(nxl_agent_create(&c, &a), NXL_SUCCESS);
        ck_assert(nxl_backend_create(a, "UCX", NULL, 0, NULL) == NXL_SUCCESS);
        ck_assert(nxl_backend_create(a, "decline", NULL, 0, NULL) == NXL_SUCCESS);
        ck_assert_msg(nxl_mem_alloc(a, NXL_DRAM, 65536, 0, &m) == NXL_SUCCESS, "%s",
                      nxl_agent_last_error(a));
        ck_assert_int_eq(nxl_mem_free(a, m), NXL_SUCCESS);
        nxl_agent_destroy(a);
    }
}
END_TEST

int main(void)
{
    make_dir();
    const char *old = getenv("NXL_PLUGIN_DIR");
    if (asprintf(&plugin_path, "%s:%s::/nonexistent/nxl", dir, old ? old : "") < 0)
        return 99;
    setenv("NXL_PLUGIN_DIR", plugin_path, 1);
    printf("NXL_PLUGIN_DIR=%s\n", plugin_path);

    Suite *s = suite_create("modules");
    TL_TCASE(s, "modules", 30, NULL, NULL, t_list, t_configured, t_create_refused, t_threads,
             t_module_missing, t_declined);
    int rc = tl_run(s);
    remove_dir();
    free(plugin_path);
    return rc;
}
