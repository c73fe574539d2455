/* SPDX-License-Identifier: BSD-3-Clause */
/* LIBFABRIC: loading libfabric, and the small helpers the other files
 * share (parameters, error classes and text, reactor kicks) */
#include "lf.h"

/* libfabric is loaded when a LIBFABRIC transport is first probed or
 * created, not when libnxl is: Debian's libfabric pulls in libpsm2 and
 * libinfinipath, whose constructors look for their hardware for about
 * 0.2 s at every process start here. Six functions are real symbols; the
 * rest of the API is inline calls through the objects' ops tables. */
#ifndef NXL_LIBFABRIC_SONAME
#define NXL_LIBFABRIC_SONAME "libfabric.so.1"
#endif
struct nxl_lf_sym nxl_lf_sym;

static pthread_once_t lf_sym_once = PTHREAD_ONCE_INIT;

/* ofi_rxm closes its connection to a peer, and cancels the operations on
 * it (their error completions come to the CQ), when the peer's address is
 * removed from the address vector only where FI_AV_REMOVE_CLEANUP is true,
 * which libfabric reads once, at its first call: nxl sets it before that,
 * unless the environment says otherwise (the deadlines' aborts need it:
 * conn.c). An application that initialized libfabric before, or sets it
 * false, keeps the TIMEOUT waiting for the peer. */
static bool av_remove_cleanup;

bool nxl_lf_av_remove_cleanup(void)
{
    return av_remove_cleanup;
}

static void lf_sym_load(void)
{
    const char *v = getenv("FI_AV_REMOVE_CLEANUP");
    if (!v)
        setenv("FI_AV_REMOVE_CLEANUP", "1", 0);
    v = getenv("FI_AV_REMOVE_CLEANUP");
    av_remove_cleanup = v && (!strcmp(v, "1") || !strcasecmp(v, "true") ||
                              !strcasecmp(v, "yes") || !strcasecmp(v, "on") ||
                              !strcasecmp(v, "y"));
    void *h = dlopen(NXL_LIBFABRIC_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(nxl_lf_sym.why, sizeof(nxl_lf_sym.why), "%s", dlerror());
        return;
    }
    *(void **)&nxl_lf_sym.getinfo = dlsym(h, "fi_getinfo");
    *(void **)&nxl_lf_sym.freeinfo = dlsym(h, "fi_freeinfo");
    *(void **)&nxl_lf_sym.dupinfo = dlsym(h, "fi_dupinfo");
    *(void **)&nxl_lf_sym.fabric = dlsym(h, "fi_fabric");
    *(void **)&nxl_lf_sym.strerror = dlsym(h, "fi_strerror");
    *(void **)&nxl_lf_sym.version = dlsym(h, "fi_version");
    if (!nxl_lf_sym.getinfo || !nxl_lf_sym.freeinfo || !nxl_lf_sym.dupinfo || !nxl_lf_sym.fabric ||
        !nxl_lf_sym.strerror || !nxl_lf_sym.version) {
        snprintf(nxl_lf_sym.why, sizeof(nxl_lf_sym.why), "%s lacks fi_getinfo, fi_fabric or "
                 "another of the functions nxl calls", NXL_LIBFABRIC_SONAME);
        dlclose(h);
        return;
    }
    nxl_lf_sym.ok = 1; /* stays loaded for the life of the process */
}

int nxl_lf_loaded(void)
{
    pthread_once(&lf_sym_once, lf_sym_load);
    return nxl_lf_sym.ok;
}

/* this agent's name as the transport's messages carry it: at most 255
 * bytes (*@p len), not NUL-terminated there */
const char *nxl_lf_me(const lf_t *u, size_t *len)
{
    const char *me = nxl_agent_name(nxlt_agent(u->ctx));
    size_t nl = strlen(me);
    *len = nl > 255 ? 255 : nl;
    return me;
}

/* a post refused at once: sockets answers ENOENT when it cannot reach the
 * peer's address anymore */
bool nxl_lf_post_disconnect(int err)
{
    return err == FI_ENOENT || err == FI_ECONNREFUSED || err == FI_ECONNRESET ||
           err == FI_ENOTCONN || err == FI_EHOSTUNREACH || err == FI_ESHUTDOWN || err == EPIPE;
}

bool nxl_lf_is_disconnect(int err)
{
    switch (err) {
    case FI_ECONNRESET:
    case FI_ECONNREFUSED:
    case FI_ECONNABORTED:
    case FI_ENOTCONN:
    case FI_EHOSTUNREACH:
    case FI_ETIMEDOUT:
    case FI_ESHUTDOWN:
    case EPIPE:
    case FI_EADDRNOTAVAIL:
        return true;
    default:
        return false;
    }
}

/* "<fi_strerror(err)>: <detail>", the provider's detail only when it says
 * more than the error's name (tcp's is strerror of the same errno) */
void nxl_lf_err_text(int err, const char *detail, char *out, size_t cap)
{
    const char *name = fi_strerror(err);
    if (detail && detail[0] && strcmp(detail, name))
        snprintf(out, cap, "%s: %s", name, detail);
    else
        snprintf(out, cap, "%s", name);
}

void nxl_lf_kick(lf_t *u)
{
    if (!nxlt_timer_pending(u->tm_kick))
        nxlt_timer_start(u->tm_kick, 0);
}

void nxl_lf_watch_start(lf_t *u)
{
    if (!nxlt_timer_pending(u->tm_watch))
        nxlt_timer_start(u->tm_watch, (uint64_t)WATCH_MS * 1000);
}

void nxl_lf_check_later(lf_op_t *o)
{
    if (!o->checkq) {
        o->checkq = true;
        TAILQ_INSERT_TAIL(&o->u->checkq, o, clink);
    }
    nxl_lf_kick(o->u);
}

void nxl_lf_mr_mode_str(uint64_t m, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s%s%s%s%s%s", m & FI_MR_VIRT_ADDR ? "virtual addresses" : "offsets",
             m & FI_MR_PROV_KEY ? ", provider keys" : ", requested keys",
             m & FI_MR_LOCAL ? ", local descriptors" : "",
             m & FI_MR_ENDPOINT ? ", bound to the endpoint" : "",
             m & FI_MR_ALLOCATED ? ", allocated memory" : "", m & FI_MR_RAW ? ", raw keys" : "");
}

void nxl_lf_close_fids(const lf_fids_t *o)
{
    struct fid *f[] = {o->ep ? &o->ep->fid : NULL,         o->rx_mr ? &o->rx_mr->fid : NULL,
                       o->rma_cntr ? &o->rma_cntr->fid : NULL, o->cq ? &o->cq->fid : NULL,
                       o->av ? &o->av->fid : NULL,         o->domain ? &o->domain->fid : NULL,
                       o->fabric ? &o->fabric->fid : NULL};
    for (size_t i = 0; i < sizeof(f) / sizeof(*f); i++)
        if (f[i])
            fi_close(f[i]);
}
