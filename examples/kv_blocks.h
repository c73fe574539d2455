/* SPDX-License-Identifier: BSD-3-Clause */
/* kv_blocks.h: what kv_uv_server.c and kv_epoll_server.c share, so that
 * each shows only its loop: the blocks (a file of NBLK blocks of BLK bytes,
 * block i holding "i"), an agent on NXL_LOOP_FD with a transport that reads
 * files (POSIX by default), its DRAM pool of one slot per connection, and
 * the two prepared lists a READ is made from. Included by one program: its
 * definitions are that program's. */
#ifndef KV_BLOCKS_H
#define KV_BLOCKS_H

#include <nxl.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NBLK 64
#define BLK 4096

static nxl_agent_t *agent;
static nxl_prepped_t *slots, *blocks; /* DRAM slots (one per connection), file blocks */
static char *pool;
static const char *kv_name;

/* exits with the agent's sentence when a call failed */
static void must(nxl_status_t st)
{
    if (st == NXL_SUCCESS)
        return;
    fprintf(stderr, "%s: %s\n", kv_name, nxl_agent_last_error(agent));
    exit(1);
}

/* the file of blocks and the agent @p name reading it through @p transport */
static void kv_blocks_open(const char *name, const char *transport)
{
    char path[64], meta[96];
    kv_name = name;
    snprintf(path, sizeof(path), "/tmp/%s.%d", name, (int)getpid());
    FILE *f = fopen(path, "w");
    for (int i = 0; f && i < NBLK; i++)
        fprintf(f, "%-*d\n", BLK - 1, i);
    if (!f || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
    snprintf(meta, sizeof(meta), "path=%s;mode=r", path);

    nxl_agent_config_t cfg;
    nxl_agent_config_init(&cfg);
    cfg.name = name;
    cfg.loop = NXL_LOOP_FD; /* no libevent base: the program's own loop drives the agent */
    must(nxl_agent_create(&cfg, &agent));
    must(nxl_backend_create(agent, transport, NULL, 0, NULL));
    must(nxl_mem_alloc(agent, NXL_DRAM, NBLK * BLK, 0, (void **)&pool));
    nxl_desc_t file = {.len = NBLK * BLK, .dev_id = 1, .meta = meta, .meta_len = strlen(meta)};
    must(nxl_mem_register(agent, NXL_FILE, &file, 1, NULL));
    unlink(path); /* the transport holds it open */
    nxl_desc_t sd[NBLK], bd[NBLK];
    for (size_t i = 0; i < NBLK; i++) {
        sd[i] = (nxl_desc_t){.addr = (uintptr_t)pool + i * BLK, .len = BLK};
        bd[i] = (nxl_desc_t){.addr = i * BLK, .len = BLK, .dev_id = 1};
    }
    must(nxl_prep(agent, NULL, NXL_DRAM, sd, NBLK, &slots));
    must(nxl_prep(agent, name, NXL_FILE, bd, NBLK, &blocks));
}

#endif
