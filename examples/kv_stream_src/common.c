/* SPDX-License-Identifier: BSD-3-Clause */
/* kv_stream: clock, sizes as text, agents and the KV cache's memory. */
#include "kv_stream.h"
#include "../kv_util.h"

#include <string.h>
#include <time.h>

uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* "8 B", "64 KiB", "1.5 MiB" */
text_t size_text(uint64_t b)
{
    text_t t;
    kvu_size_text(t.s, sizeof(t.s), b);
    return t;
}

/* "3.21 GB/s", "45.6 MB/s" (decimal units, as links are rated) */
text_t rate_text(uint64_t bytes, uint64_t us)
{
    text_t t;
    double mbs = us ? (double)bytes / (double)us : 0;
    if (!us)
        snprintf(t.s, sizeof(t.s), "- GB/s");
    else if (mbs >= 1000)
        snprintf(t.s, sizeof(t.s), "%.2f GB/s", mbs / 1000);
    else
        snprintf(t.s, sizeof(t.s), "%.1f MB/s", mbs);
    return t;
}

/* Runs the reactor until *flag is set or the deadline passes; sleeps while
 * nothing happens. @return whether the flag was set. */
bool run_until(nxl_agent_t *a, const int *flag, uint64_t deadline_us)
{
    while (!*flag) {
        uint64_t t = now_us();
        if (t >= deadline_us)
            return false;
        uint64_t left_ms = (deadline_us - t + 999) / 1000;
        if (nxl_agent_run_once(a, left_ms > 1000 ? 1000 : (int)left_ms) != NXL_SUCCESS)
            return false;
    }
    return true;
}

#ifdef KV_CUDA
const nxl_cuda_rt_t *rt;
#endif

nxl_agent_t *make_agent(const char *name, const char *listen, uint16_t port,
                               const opts_t *o)
{
    nxl_agent_config_t cfg;
    nxl_agent_config_init(&cfg);
    cfg.name = name;
    cfg.listen_addr = listen;
    cfg.listen_port = port;
    cfg.etcd_endpoints = o->etcd[0] ? o->etcd : NULL;
    nxl_agent_t *a;
    if (nxl_agent_create(&cfg, &a) != NXL_SUCCESS) {
        fprintf(stderr, "%s: cannot create the agent: %s\n", name, nxl_agent_last_error(NULL));
        return NULL;
    }
    const char *be = o->backend[0] ? o->backend : "UCX";
    if (nxl_backend_create(a, be, NULL, 0, NULL) != NXL_SUCCESS) {
        fprintf(stderr, "%s: cannot create the %s transport: %s\n", name, be,
                nxl_agent_last_error(a));
        nxl_agent_destroy(a);
        return NULL;
    }
    if (o->vram) {
#ifdef KV_CUDA
        char why[160];
        if (!(rt = nxl_cuda_rt_get(NULL, why, sizeof(why))) ||
            nxl_backend_create(a, "CUDA", NULL, 0, NULL) != NXL_SUCCESS) {
            fprintf(stderr, "%s: --mem VRAM: cannot create the CUDA transport: %s\n", name,
                    rt ? nxl_agent_last_error(a) : why);
            nxl_agent_destroy(a);
            return NULL;
        }
#endif
    }
    return a;
}

uint8_t *alloc_kv(nxl_agent_t *a, const char *who, size_t total, bool vram)
{
    void *p;
    if (nxl_mem_alloc(a, vram ? NXL_VRAM : NXL_DRAM, total, 0, &p) != NXL_SUCCESS) {
        fprintf(stderr, "%s: cannot allocate the %s KV cache in %s: %s\n", who,
                size_text(total).s, vram ? "VRAM" : "DRAM", nxl_agent_last_error(a));
        return NULL;
    }
#ifdef KV_CUDA
    if (vram) {
        rt->cudaMemset(p, 0, total);
        return p;
    }
#endif
    memset(p, 0, total);
    return p;
}

void outcome_record(outcome_t *o, nxl_future_t *f, nxl_status_t st)
{
    o->st = st;
    if (st != NXL_SUCCESS)
        snprintf(o->err, sizeof(o->err), "%s", nxl_future_error(f));
    o->done = 1;
}
