/* SPDX-License-Identifier: BSD-3-Clause */
/* Starts and stops a real etcd server on free loopback ports for a test. */
#ifndef NXL_ETCD_UTIL_H
#define NXL_ETCD_UTIL_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    pid_t pid;
    int client_port, peer_port;
    char dir[64];
    char endpoint[64];
} tl_etcd_t;

static inline int tl_free_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof(sa);
    if (bind(s, (struct sockaddr *)&sa, sizeof(sa)) || getsockname(s, (struct sockaddr *)&sa, &sl)) {
        close(s);
        return -1;
    }
    int p = ntohs(sa.sin_port);
    close(s);
    return p;
}

static inline int tl_port_open(int port)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int ok = connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    close(s);
    return ok;
}

/* Waits for the process *pid to listen on the loopback port, checking
 * tries times every us microseconds: 0 when it does; -1 when the process
 * exits first (reaped, *pid cleared) or the time runs out. */
static inline int tl_proc_wait_port(pid_t *pid, int port, int tries, useconds_t us)
{
    for (int i = 0; i < tries; i++) {
        if (tl_port_open(port))
            return 0;
        int st;
        if (waitpid(*pid, &st, WNOHANG) == *pid) {
            *pid = 0;
            return -1;
        }
        usleep(us);
    }
    return -1;
}

/* Ends the process *pid (when > 0): sig, up to 5 s to exit, then SIGKILL;
 * reaped, *pid cleared. */
static inline void tl_proc_stop(pid_t *pid, int sig)
{
    if (*pid > 0) {
        kill(*pid, sig);
        int st;
        for (int i = 0; i < 50 && waitpid(*pid, &st, WNOHANG) == 0; i++)
            usleep(100000);
        kill(*pid, SIGKILL);
        waitpid(*pid, &st, 0);
        *pid = 0;
    }
}

/* NULL when the etcd binary is missing: the caller skips with the reason. */
static inline const char *tl_etcd_binary(void)
{
    static const char *const cands[] = {"/usr/bin/etcd", "/usr/local/bin/etcd"};
    for (size_t i = 0; i < sizeof(cands) / sizeof(*cands); i++)
        if (access(cands[i], X_OK) == 0)
            return cands[i];
    return NULL;
}

/* Starts etcd (again, with the same data dir and ports when e->pid was
 * set before). Returns 0 when it answers within 15 s. */
static inline int tl_etcd_start(tl_etcd_t *e)
{
    const char *bin = tl_etcd_binary();
    if (!bin)
        return -1;
    if (!e->dir[0]) {
        snprintf(e->dir, sizeof(e->dir), "/tmp/nxl-etcd-XXXXXX");
        if (!mkdtemp(e->dir))
            return -1;
        e->client_port = tl_free_port();
        e->peer_port = tl_free_port();
        snprintf(e->endpoint, sizeof(e->endpoint), "http://127.0.0.1:%d", e->client_port);
    }
    char data[128], log[128], curl[64], purl[64], cluster[96];
    snprintf(data, sizeof(data), "%s/data", e->dir);
    snprintf(log, sizeof(log), "%s/etcd.log", e->dir);
    snprintf(curl, sizeof(curl), "http://127.0.0.1:%d", e->client_port);
    snprintf(purl, sizeof(purl), "http://127.0.0.1:%d", e->peer_port);
    snprintf(cluster, sizeof(cluster), "default=%s", purl);
    e->pid = fork();
    if (e->pid == 0) {
        FILE *f = freopen(log, "a", stdout);
        (void)f;
        dup2(1, 2);
        execl(bin, "etcd", "--data-dir", data, "--listen-client-urls", curl,
              "--advertise-client-urls", curl, "--listen-peer-urls", purl,
              "--initial-advertise-peer-urls", purl, "--initial-cluster", cluster,
              (char *)NULL);
        _exit(127);
    }
    if (tl_proc_wait_port(&e->pid, e->client_port, 150, 100000))
        return -1;
    usleep(200000); /* serving the HTTP gateway follows the listener */
    return 0;
}

static inline void tl_etcd_stop(tl_etcd_t *e)
{
    tl_proc_stop(&e->pid, SIGTERM);
}

/* Removes the directory dir (when named) and everything in it; clears the
 * name. */
static inline void tl_rm_dir(char *dir)
{
    if (dir[0]) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", dir);
        dir[0] = 0;
    }
}

static inline void tl_etcd_cleanup(tl_etcd_t *e)
{
    tl_etcd_stop(e);
    tl_rm_dir(e->dir);
}

#endif
