/* SPDX-License-Identifier: BSD-3-Clause */
/* This process's TCP sockets, found by walking /proc/self/fd: what a
 * transport does to the connections its library opened to a peer (which
 * it cannot reach through the library). Header-only: LIBFABRIC, UCX,
 * MOONCAKE. */
#ifndef NXL_TCPSOCK_H
#define NXL_TCPSOCK_H

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* Calls @p fn on a duplicate of each TCP socket of this process (the
 * provider's among them) and sums what it returns. A duplicate shares the
 * socket, not the number: what fn does is done to that socket even if its
 * owner closes its descriptor meanwhile, and a number reused meanwhile is
 * not touched. */
static inline unsigned nxl_each_tcp_socket(unsigned (*fn)(int fd, void *arg), void *arg)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return 0;
    unsigned sum = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        char *end;
        long n = strtol(de->d_name, &end, 10);
        if (*end || end == de->d_name || n < 0 || n > INT_MAX || n == dirfd(d))
            continue;
        int fd = fcntl((int)n, F_DUPFD_CLOEXEC, 0);
        if (fd < 0)
            continue;
        struct stat st;
        int type = 0;
        socklen_t tl = sizeof(type);
        if (!fstat(fd, &st) && S_ISSOCK(st.st_mode) &&
            !getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) && type == SOCK_STREAM)
            sum += fn(fd, arg);
        close(fd);
    }
    closedir(d);
    return sum;
}

static inline bool nxl_same_sockaddr(const struct sockaddr_storage *a,
                                     const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family)
        return false;
    if (a->ss_family == AF_INET) {
        const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;
        return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
    }
    if (a->ss_family == AF_INET6) {
        const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;
        return x->sin6_port == y->sin6_port &&
               !memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr));
    }
    return false;
}

/* Makes @p fd's close reset its connection: SO_LINGER {1, 0} (the kernel
 * drops what it still holds and sends a RST instead of the unsent queue).
 * With @p now, a connect() to AF_UNSPEC as well, which makes Linux
 * disconnect the socket at once (tcp_disconnect: a RST, the queues
 * dropped), whoever holds it. true when either took. */
static inline bool nxl_tcp_reset(int fd, bool now)
{
    struct linger l = {.l_onoff = 1, .l_linger = 0};
    int a = setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    if (!now)
        return !a;
    struct sockaddr sa = {.sa_family = AF_UNSPEC};
    int b = connect(fd, &sa, sizeof(sa));
    return !a || !b;
}

#endif
