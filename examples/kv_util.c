/* SPDX-License-Identifier: BSD-3-Clause */
/* kv_util: small pieces kv_server and kv_stream share (see kv_util.h). */
#include "kv_util.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

uint16_t kvu_read_port(int fd, int timeout_ms)
{
    char buf[16] = "";
    size_t got = 0;
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    while (got < sizeof(buf) - 1 && !memchr(buf, '\n', got)) {
        int r = poll(&pf, 1, timeout_ms);
        ssize_t k = r > 0 ? read(fd, buf + got, sizeof(buf) - 1 - got) : -1;
        if (r < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        got += (size_t)k;
        buf[got] = 0;
    }
    close(fd);
    unsigned long p = strtoul(buf, NULL, 10);
    if (!memchr(buf, '\n', got) || !p || p > 65535)
        return 0;
    return (uint16_t)p;
}

const char *kvu_size_text(char *buf, size_t cap, uint64_t b)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    if (u == 0 || v == (double)(uint64_t)v)
        snprintf(buf, cap, "%.0f %s", v, unit[u]);
    else
        snprintf(buf, cap, "%.1f %s", v, unit[u]);
    return buf;
}
