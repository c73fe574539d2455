/* SPDX-License-Identifier: BSD-3-Clause */
/* Starts and stops real object-store servers for check_obj, on free
 * loopback ports with their own data directories (like etcd_util.h):
 *
 *  - s3rver 3.7.1 (npm), an S3-protocol server, through tests/s3rver-run.js,
 *    which adds SigV4 verification and the multipart calls s3rver lacks;
 *  - azurite 3.35.0 (npm, blob service only), Microsoft's Azure Storage
 *    emulator, which checks Shared Key signatures.
 *
 * The npm packages are installed on first use into <builddir>/tests/node
 * (pinned versions, no global install), with @azure/storage-blob as the
 * independent Azure client of the cross-check. Without node or npm the
 * suite skips (exit 77) and says so; a failed install fails it. */
#ifndef NXL_OBJ_UTIL_H
#define NXL_OBJ_UTIL_H

#include "etcd_util.h" /* tl_free_port, tl_port_open */

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/prctl.h>

#ifndef SRCDIR
#define SRCDIR "."
#endif

typedef struct {
    pid_t pid;
    int port;
    char dir[64];
    char endpoint[96];
} tl_srv_t;

static char tl_node_root[PATH_MAX]; /* <builddir>/tests/node */

static inline int tl_have(const char *prog)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "command -v %s >/dev/null 2>&1", prog);
    return system(cmd) == 0;
}

static inline int tl_file(const char *rel)
{
    char p[PATH_MAX + 128];
    snprintf(p, sizeof(p), "%s/node_modules/%s", tl_node_root, rel);
    return access(p, R_OK) == 0;
}

/* 0: ready; 77: node or npm missing (why says so); -1: the install failed. */
static inline int tl_node_setup(char *why, size_t cap)
{
    const char *over = getenv("NXL_TEST_NODE_DIR");
    char rel[PATH_MAX];
    snprintf(rel, sizeof(rel), "%s", over && *over ? over : "tests/node");
    if (mkdir(rel, 0755) < 0 && errno != EEXIST) {
        snprintf(why, cap, "cannot create %s: %s", rel, strerror(errno));
        return -1;
    }
    if (!realpath(rel, tl_node_root)) {
        snprintf(why, cap, "cannot resolve %s", rel);
        return -1;
    }
    if (!tl_have("node") || !tl_have("npm")) {
        snprintf(why, cap, "node and npm are needed to run s3rver and azurite (apt-get install "
                           "nodejs npm)");
        return 77;
    }
    if (tl_file("s3rver/package.json") && tl_file("azurite/package.json") &&
        tl_file("@azure/storage-blob/package.json"))
        return 0;
    /* tests/node-setup.sh: the versions, and a lock shared with the Python
     * suite, which may install them at the same time */
    char cmd[PATH_MAX * 2 + 64];
    snprintf(cmd, sizeof(cmd), "'%s/tests/node-setup.sh' '%s'", SRCDIR, tl_node_root);
    int rc = system(cmd);
    if (rc == -1 || !WIFEXITED(rc) || WEXITSTATUS(rc) != 0 || !tl_file("s3rver/package.json") ||
        !tl_file("azurite/package.json")) {
        snprintf(why, cap, "npm install into %s failed: see %s/npm-install.log", tl_node_root,
                 tl_node_root);
        return -1;
    }
    return 0;
}

static inline void tl_srv_kill(tl_srv_t *s, int sig)
{
    tl_proc_stop(&s->pid, sig);
}

static inline int tl_srv_wait(tl_srv_t *s)
{
    if (!tl_proc_wait_port(&s->pid, s->port, 200, 50000))
        return 0;
    tl_srv_kill(s, SIGTERM); /* never listened: not left running after the test */
    return -1;
}

static inline int tl_srv_dir(tl_srv_t *s, const char *what)
{
    if (!s->dir[0]) {
        snprintf(s->dir, sizeof(s->dir), "/tmp/nxl-%s-XXXXXX", what);
        if (!mkdtemp(s->dir))
            return -1;
    }
    if (!s->port)
        s->port = tl_free_port();
    return 0;
}

/* In the child: logs to DIR/NAME.log, and dies with the test process (a
 * crashed or killed test leaves no server behind). */
static inline void tl_child_log(const tl_srv_t *s, const char *name)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    char log[128];
    snprintf(log, sizeof(log), "%s/%s.log", s->dir, name);
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
    }
}

/* Starts s3rver with the given buckets (a NULL-terminated list); again on
 * the same port and directory when s->dir is set. 0 when it listens. */
static inline int tl_s3rver_start(tl_srv_t *s, const char *const *buckets)
{
    if (tl_srv_dir(s, "s3rver") < 0)
        return -1;
    snprintf(s->endpoint, sizeof(s->endpoint), "http://127.0.0.1:%d", s->port);
    char data[96], port[16], script[PATH_MAX], np[PATH_MAX + 32];
    snprintf(data, sizeof(data), "%s/data", s->dir);
    mkdir(data, 0755);
    snprintf(port, sizeof(port), "%d", s->port);
    snprintf(script, sizeof(script), "%s/tests/s3rver-run.js", SRCDIR);
    snprintf(np, sizeof(np), "%s/node_modules", tl_node_root);
    s->pid = fork();
    if (s->pid == 0) {
        tl_child_log(s, "s3rver");
        setenv("NODE_PATH", np, 1);
        const char *argv[16] = {"node", script, data, port};
        int n = 4;
        for (int i = 0; buckets && buckets[i] && n < 15; i++)
            argv[n++] = buckets[i];
        argv[n] = NULL;
        execvp("node", (char *const *)argv);
        _exit(127);
    }
    return tl_srv_wait(s);
}

/* The well-known development account of Azure's emulators. */
#define TL_AZ_ACCOUNT "devstoreaccount1"
#define TL_AZ_KEY                                                                                  \
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

static inline int tl_azurite_start(tl_srv_t *s)
{
    if (tl_srv_dir(s, "azurite") < 0)
        return -1;
    snprintf(s->endpoint, sizeof(s->endpoint), "http://127.0.0.1:%d/" TL_AZ_ACCOUNT, s->port);
    char bin[PATH_MAX + 64], port[16], data[96];
    snprintf(bin, sizeof(bin), "%s/node_modules/.bin/azurite-blob", tl_node_root);
    snprintf(port, sizeof(port), "%d", s->port);
    snprintf(data, sizeof(data), "%s/data", s->dir);
    mkdir(data, 0755);
    s->pid = fork();
    if (s->pid == 0) {
        tl_child_log(s, "azurite");
        execl(bin, "azurite-blob", "--blobHost", "127.0.0.1", "--blobPort", port, "--location",
              data, "--skipApiVersionCheck", "--silent", (char *)NULL);
        _exit(127);
    }
    return tl_srv_wait(s);
}

static inline void tl_srv_cleanup(tl_srv_t *s)
{
    tl_srv_kill(s, SIGTERM);
    tl_rm_dir(s->dir);
}

#endif
