/* SPDX-License-Identifier: BSD-3-Clause */
/* kv_server — an HTTP server on libevent's evhttp that embeds an nxl agent
 * in its own event_base and serves KV blocks held by another agent.
 *
 *   kv_server store   an agent holding the blocks (own base, nxl_agent_run)
 *   kv_server serve   evhttp + an agent on the application's event_base:
 *                     GET /block/N is an nxl READ, PUT /block/N an nxl WRITE
 *                     with the notification "put N V", GET /stats counters
 *   kv_server client  many keep-alive connections; every byte checked
 *   kv_server both    store and serve forked, client here
 *
 * This header: what the roles share (flags, the block pattern, clocks). */
#ifndef KV_SERVER_COMMON_H
#define KV_SERVER_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../cli.h"     /* cli_addr_t */
#include "../kv_util.h" /* kvu_size_text: "64 KiB" */

typedef cli_addr_t kvs_addr_t;

typedef struct kvs_opts {
    const char *mode;          /* store | serve | client | both */
    unsigned long blocks;      /* --blocks (1024) */
    size_t block_size;         /* --block_size (64K); at least 16 bytes */
    kvs_addr_t listen;         /* store: --listen (127.0.0.1:0) */
    kvs_addr_t store;          /* serve: --store HOST:PORT of the store's listener */
    kvs_addr_t http;           /* serve: --http (127.0.0.1:0) */
    kvs_addr_t connect;        /* client: --connect HOST:PORT of the server */
    unsigned staging;          /* serve: --staging buffers (64) */
    unsigned queue;            /* serve: --queue, requests waiting at most (1024) */
    bool memcpy_mode;          /* serve: --memcpy, GETs from a local copy */
    unsigned connections;      /* client: --connections (64) */
    double seconds;            /* client: --seconds (5) */
    unsigned long requests;    /* client: --requests (0: by time) */
    double put_ratio;          /* client: --put_ratio (0) */
    unsigned expect;           /* client: --expect STATUS (0: 200/204 and bytes checked) */
    bool warmup;               /* client: --warmup, GET every block once before the run */
    unsigned timeout_s;        /* --timeout: setup, and a request's HTTP timeout (10) */
    int cpu_server, cpu_client; /* both: --cpus S,C (-1: not pinned) */
    bool quiet;
    int ready_fd;              /* both: where a child writes its port once ready (-1) */
} kvs_opts_t;

/* ------------------------------------------------------------------ roles */

int kvs_store(const kvs_opts_t *o);
int kvs_serve(const kvs_opts_t *o);
int kvs_client(const kvs_opts_t *o);

/* --------------------------------------------------------------- helpers */

uint64_t kvs_now_us(void);

/* The bytes of block @p block at version @p version: bytes 0..7 are the
 * block number, bytes 8..15 the version (little-endian), the rest a stream
 * seeded by both. A reader can tell which (block, version) it holds from
 * the first 16 bytes and check every other byte against it. */
void kvs_pattern(uint8_t *p, size_t len, uint64_t block, uint64_t version);
/* Reads the (block, version) header of a block's first 16 bytes. */
void kvs_pattern_header(const uint8_t *p, uint64_t *block, uint64_t *version);

/* Writes "PORT\n" to @p fd (the parent of a forked role waits for it) and
 * closes it; nothing when fd < 0. */
void kvs_tell_ready(int fd, uint16_t port);

/* A notification's len bytes msg as a string in buf[cap], cut to fit. */
void kvs_msg_text(char *buf, size_t cap, const void *msg, size_t len);

/* Pins the calling process to @p cpu (nothing when negative). */
void kvs_pin(const char *who, int cpu);

#endif
