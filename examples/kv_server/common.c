/* SPDX-License-Identifier: BSD-3-Clause */
/* kv_server: the block pattern and small helpers the roles share. */
#define _GNU_SOURCE /* sched_setaffinity */
#include "common.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

uint64_t kvs_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static void put_le64(uint8_t *p, uint64_t v, size_t n)
{
    for (size_t k = 0; k < n; k++)
        p[k] = (uint8_t)(v >> (8 * k));
}

static uint64_t get_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int k = 7; k >= 0; k--)
        v = v << 8 | p[k];
    return v;
}

void kvs_pattern(uint8_t *p, size_t len, uint64_t block, uint64_t version)
{
    uint8_t hdr[16];
    put_le64(hdr, block, 8);
    put_le64(hdr + 8, version, 8);
    size_t h = len < 16 ? len : 16;
    memcpy(p, hdr, h);
    uint64_t seed = mix64(block * 0x100000001b3ull ^ mix64(version));
    size_t w = 0, off = 16;
    for (; off + 8 <= len; off += 8, w++)
        put_le64(p + off, mix64(seed + w), 8);
    if (off < len)
        put_le64(p + off, mix64(seed + w), len - off);
}

void kvs_pattern_header(const uint8_t *p, uint64_t *block, uint64_t *version)
{
    *block = get_le64(p);
    *version = get_le64(p + 8);
}

void kvs_tell_ready(int fd, uint16_t port)
{
    if (fd < 0)
        return;
    char b[16];
    int n = snprintf(b, sizeof(b), "%u\n", port);
    if (write(fd, b, (size_t)n) != n)
        perror("kv_server: telling the parent the port");
    close(fd);
}

void kvs_pin(const char *who, int cpu)
{
    if (cpu < 0)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set))
        fprintf(stderr, "%s: cannot pin to CPU %d: %s\n", who, cpu, strerror(errno));
}

void kvs_msg_text(char *buf, size_t cap, const void *msg, size_t len)
{
    snprintf(buf, cap, "%.*s", (int)(len < cap - 1 ? len : cap - 1), (const char *)msg);
}
