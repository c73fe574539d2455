/* SPDX-License-Identifier: BSD-3-Clause */
/* kv_server store: an agent on its own event base (nxl_agent_run) holding
 * --blocks blocks of --block_size bytes in memory from nxl_mem_alloc(),
 * block N filled with the pattern of (N, version 0), and a metadata
 * listener. Servers READ and WRITE the blocks one-sidedly; the store only
 * hears notifications:
 *
 *   "hello"      a server asks where the blocks are: answered with
 *                "blocks ADDR COUNT SIZE"
 *   "put N V"    a server wrote block N (all of its bytes are visible
 *                before the notification arrives): the store records
 *                version V and checks the block against the pattern of
 *                (N, V), as the demo's client writes it — unless a later
 *                PUT of that block already landed (the server may write
 *                the block again as soon as its WRITE completed, before
 *                this notification is handled): counted apart.
 *
 * SIGINT or SIGTERM stop it; it prints what it saw and exits nonzero when a
 * written block was not what its notification said. */
#include "common.h"

#include <nxl.h>

#include <event2/event.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct store {
    const kvs_opts_t *o;
    nxl_agent_t *a;
    uint8_t *kv;
    uint64_t *version;
    uint8_t *scratch;
    unsigned long hellos, puts, checked, superseded, bad_puts, bad_notifs;
} store_t;

static void reply_done(nxl_future_t *f, nxl_status_t st, void *arg)
{
    if (st != NXL_SUCCESS)
        fprintf(stderr, "store: answering a server failed: %s\n", nxl_future_error(f));
}

static void on_put(store_t *s, const char *from, unsigned long n, uint64_t v)
{
    const kvs_opts_t *o = s->o;
    const uint8_t *blk = s->kv + n * o->block_size;
    uint64_t hb, hv, hb2, hv2;
    s->puts++;
    if (v > s->version[n])
        s->version[n] = v;
    kvs_pattern_header(blk, &hb, &hv);
    if (hb == n && hv > v) {
        s->superseded++; /* a later PUT of the block landed before this notification */
        return;
    }
    kvs_pattern(s->scratch, o->block_size, n, v);
    if (!memcmp(blk, s->scratch, o->block_size)) {
        s->checked++;
        return;
    }
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < o->block_size; i++)
        if (blk[i] != s->scratch[i] && bad++ == 0)
            first = i;
    kvs_pattern_header(blk, &hb2, &hv2);
    if (hb2 != hb || hv2 != hv) {
        s->superseded++; /* a later PUT was landing while we looked */
        return;
    }
    s->bad_puts++;
    fprintf(stderr, "store: block %lu after 'put %lu %" PRIu64 "' from '%s': %zu of %zu bytes "
            "differ from the pattern of version %" PRIu64 " (first at byte %zu)\n", n, n, v, from,
            bad, o->block_size, v, first);
}

static void on_notif(nxl_agent_t *a, const char *from, const void *msg, size_t len, void *arg)
{
    store_t *s = arg;
    const kvs_opts_t *o = s->o;
    char m[128];
    kvs_msg_text(m, sizeof(m), msg, len);
    unsigned long n;
    uint64_t v;
    char extra;
    if (!strcmp(m, "hello")) {
        char reply[96];
        int rl = snprintf(reply, sizeof(reply), "blocks %" PRIxPTR " %lu %zu",
                          (uintptr_t)s->kv, o->blocks, o->block_size);
        s->hellos++;
        if (!o->quiet)
            printf("store: server '%s' connected\n", from);
        if (nxl_notif_send(a, from, reply, (size_t)rl, reply_done, s, NULL) != NXL_SUCCESS)
            fprintf(stderr, "store: cannot answer '%s': %s\n", from, nxl_agent_last_error(a));
        return;
    }
    if (sscanf(m, "put %lu %" SCNu64 "%c", &n, &v, &extra) == 2 && n < o->blocks) {
        on_put(s, from, n, v);
        return;
    }
    s->bad_notifs++;
    fprintf(stderr, "store: unexpected notification from '%s': '%s'\n", from, m);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    nxl_agent_stop(arg);
}

int kvs_store(const kvs_opts_t *o)
{
    store_t s = {.o = o};
    struct event *sigs[2] = {NULL, NULL};
    int rc = 1;
    char sz[32], tot[32];
    nxl_agent_config_t cfg;
    nxl_agent_config_init(&cfg);
    cfg.name = "store";
    cfg.listen_addr = o->listen.set ? o->listen.host : "127.0.0.1";
    cfg.listen_port = o->listen.port;
    if (nxl_agent_create(&cfg, &s.a) != NXL_SUCCESS) {
        fprintf(stderr, "store: cannot create the agent: %s\n", nxl_agent_last_error(NULL));
        return 1;
    }
    if (nxl_backend_create(s.a, "UCX", NULL, 0, NULL) != NXL_SUCCESS) {
        fprintf(stderr, "store: cannot create the UCX transport: %s\n", nxl_agent_last_error(s.a));
        goto out;
    }
    size_t total = o->blocks * o->block_size;
    void *kv;
    if (nxl_mem_alloc(s.a, NXL_DRAM, total, 0, &kv) != NXL_SUCCESS) {
        fprintf(stderr, "store: cannot allocate %s for the blocks: %s\n",
                kvu_size_text(tot, sizeof(tot), total), nxl_agent_last_error(s.a));
        goto out;
    }
    s.kv = kv;
    s.version = calloc(o->blocks, sizeof(*s.version));
    s.scratch = malloc(o->block_size);
    if (!s.version || !s.scratch) {
        fprintf(stderr, "store: out of memory\n");
        goto out;
    }
    for (unsigned long n = 0; n < o->blocks; n++)
        kvs_pattern(s.kv + n * o->block_size, o->block_size, n, 0);
    nxl_agent_on_notif(s.a, on_notif, &s);
    struct event_base *base = nxl_agent_base(s.a);
    sigs[0] = evsignal_new(base, SIGINT, on_signal, s.a);
    sigs[1] = evsignal_new(base, SIGTERM, on_signal, s.a);
    if (!sigs[0] || !sigs[1] || evsignal_add(sigs[0], NULL) || evsignal_add(sigs[1], NULL)) {
        fprintf(stderr, "store: cannot watch SIGINT and SIGTERM\n");
        goto out;
    }
    printf("store: listening on %s:%u: %lu blocks of %s (%s)\n", cfg.listen_addr,
           nxl_agent_listen_port(s.a), o->blocks, kvu_size_text(sz, sizeof(sz), o->block_size),
           kvu_size_text(tot, sizeof(tot), total));
    kvs_tell_ready(o->ready_fd, nxl_agent_listen_port(s.a));
    if (nxl_agent_run(s.a) != NXL_SUCCESS) {
        fprintf(stderr, "store: %s\n", nxl_agent_last_error(s.a));
        goto out;
    }
    printf("store: %lu servers said hello; %lu puts: %lu checked, %lu overwritten by a later "
           "put before their notification was handled, %lu not as notified; %lu unexpected "
           "notifications\n", s.hellos, s.puts, s.checked, s.superseded, s.bad_puts,
           s.bad_notifs);
    rc = s.bad_puts || s.bad_notifs ? 1 : 0;
out:
    for (int i = 0; i < 2; i++)
        if (sigs[i])
            event_free(sigs[i]);
    if (s.kv && nxl_mem_free(s.a, s.kv) != NXL_SUCCESS)
        fprintf(stderr, "store: nxl_mem_free: %s\n", nxl_agent_last_error(s.a));
    nxl_agent_destroy(s.a);
    free(s.version);
    free(s.scratch);
    return rc;
}
