/* SPDX-License-Identifier: BSD-3-Clause */
/* first_xfer: a first nxl program. Two agents, one WRITE with a notification.
 *
 * "initiator" writes a message into a buffer of "target". Both agents live
 * in this process and thread so that the program fits in one file; in real
 * use each is in its own process or host, runs its reactor with
 * nxl_agent_run(), and the metadata travels over the network
 * (nxl_md_send()/nxl_md_fetch(), or etcd). The steps stay the same:
 *
 *   1. create each agent and a transport in it
 *   2. register memory
 *   3. exchange metadata: initiator loads target's
 *   4. make a WRITE with a notification and post it
 *   5. two callbacks run once each, on the reactors: the initiator's
 *      completion, and the target's notification (after the data landed)
 *
 *   first_xfer [TRANSPORT]     UCX by default; exits 0 when the data arrived
 *
 * Build it against an installed nxl: cc first_xfer.c $(pkg-config --cflags --libs nxl) */
#include <nxl.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char msg[] = "hello from initiator";
static int written, notified; /* 1: the callback ran; -1: it reported a failure */

/* 5a. the initiator's completion callback: once, with the WRITE's status */
static void on_written(nxl_future_t *f, nxl_status_t st, void *arg)
{
    printf("initiator: WRITE done: %s\n", st == NXL_SUCCESS ? "success" : nxl_future_error(f));
    written = st == NXL_SUCCESS ? 1 : -1;
}

/* 5b. the target's notification callback: the data is in place when it runs */
static void on_notif(nxl_agent_t *a, const char *from, const void *note, size_t len, void *buf)
{
    printf("target: notification \"%.*s\" from %s; buffer: \"%s\"\n", (int)len,
           (const char *)note, from, (const char *)buf);
    notified = strcmp(buf, msg) == 0 ? 1 : -1;
}

/* every transport of this installation, whether it can be used, why not */
static void list_transports(FILE *f)
{
    fprintf(f, "transports of this installation:\n");
    nxl_plugin_info_t p[16];
    size_t n = nxl_plugins_available(p, 16);
    for (size_t i = 0; i < n && i < 16; i++)
        fprintf(f, "  %-10s %s: %s\n", p[i].name, p[i].available ? "yes" : "no", p[i].reason);
}

/* 1. an agent with one transport; on failure, says why and what there is */
static nxl_agent_t *agent(const char *name, const char *transport)
{
    nxl_agent_config_t cfg;
    nxl_agent_config_init(&cfg);
    cfg.name = name;
    nxl_agent_t *a;
    if (nxl_agent_create(&cfg, &a) != NXL_SUCCESS) {
        fprintf(stderr, "%s\n", nxl_agent_last_error(NULL));
        return NULL;
    }
    if (nxl_backend_create(a, transport, NULL, 0, NULL) == NXL_SUCCESS)
        return a;
    fprintf(stderr, "%s: %s\n", name, nxl_agent_last_error(a));
    list_transports(stderr);
    nxl_agent_destroy(a);
    return NULL;
}

int main(int argc, char **argv)
{
    /* one argument, a transport's name; --help (or anything else starting
     * with '-', or more arguments): the usage and the transports */
    if (argc > 2 || (argc == 2 && argv[1][0] == '-')) {
        int help = argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"));
        FILE *f = help ? stdout : stderr;
        if (!help)
            fprintf(f, "first_xfer: unexpected argument '%s'\n", argv[argc > 2 ? 2 : 1]);
        fprintf(f, "usage: first_xfer [TRANSPORT]   (default UCX)\n");
        list_transports(f);
        return help ? 0 : 2;
    }
    const char *transport = argc > 1 ? argv[1] : "UCX";
    nxl_agent_t *ini = agent("initiator", transport);
    nxl_agent_t *tgt = ini ? agent("target", transport) : NULL;
    if (!tgt) {
        if (ini)
            nxl_agent_destroy(ini);
        return 1;
    }

    /* 2. memory: the initiator registers its own buffer; the target has
     * nxl_mem_alloc() allocate and register one */
    static char src[4096];
    char *dst = NULL;
    nxl_desc_t s = {.addr = (uintptr_t)src, .len = sizeof(src)};
    strcpy(src, msg);
    if (nxl_mem_register(ini, NXL_DRAM, &s, 1, NULL) != NXL_SUCCESS ||
        nxl_mem_alloc(tgt, NXL_DRAM, sizeof(src), 0, (void **)&dst) != NXL_SUCCESS) {
        fprintf(stderr, "register: %s%s\n", nxl_agent_last_error(ini), nxl_agent_last_error(tgt));
        goto out;
    }
    memset(dst, 0, sizeof(src));
    nxl_desc_t d = {.addr = (uintptr_t)dst, .len = sizeof(src)};
    nxl_agent_on_notif(tgt, on_notif, dst);

    /* 3. metadata: the target's connection info and regions, as bytes */
    void *blob;
    size_t blen;
    if (nxl_md_local(tgt, &blob, &blen) != NXL_SUCCESS) {
        fprintf(stderr, "metadata: %s\n", nxl_agent_last_error(tgt));
        goto out;
    }
    nxl_status_t st = nxl_md_load(ini, blob, blen, NULL, 0);
    nxl_free(blob);
    if (st != NXL_SUCCESS) {
        fprintf(stderr, "load: %s\n", nxl_agent_last_error(ini));
        goto out;
    }

    /* 4. a WRITE of src into target's dst, with a notification; posted
     * once here, it could be posted again after each completion */
    nxl_dlist_t local = {NXL_DRAM, &s, 1}, remote = {NXL_DRAM, &d, 1};
    nxl_xfer_opts_t o;
    nxl_xfer_opts_init(&o);
    o.notif = "block 0";
    o.notif_len = strlen("block 0");
    nxl_xfer_t *x;
    if (nxl_xfer_create(ini, NXL_WRITE, &local, &remote, "target", &o, &x) != NXL_SUCCESS ||
        nxl_xfer_post(x, on_written, NULL, NULL) != NXL_SUCCESS) {
        fprintf(stderr, "transfer: %s\n", nxl_agent_last_error(ini));
        goto out; /* nxl_agent_destroy() releases x */
    }

    /* run both reactors until both callbacks ran (at most ~10 s) */
    for (int i = 0; i < 5000 && !(written && notified); i++) {
        nxl_agent_run_once(ini, 1);
        nxl_agent_run_once(tgt, 1);
    }
    nxl_xfer_release(x);
out:
    nxl_agent_destroy(ini); /* also releases what is left: transfers, registrations */
    nxl_agent_destroy(tgt); /* and frees dst */
    if (written == 1 && notified == 1)
        return 0;
    fprintf(stderr, "first_xfer: failed (WRITE %s, notification %s)\n",
            written ? "completed" : "never completed", notified ? "seen" : "never seen");
    return 1;
}
