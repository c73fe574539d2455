/* SPDX-License-Identifier: BSD-3-Clause */
/* Threaded mode: the entries of the public functions from foreign threads
 * (threads.h) and their thunks, run on the reactor thread or acting (mt.h). */
#include "mt.h"

/* ---- one thunk and one entry per public function */

static void t_backend_create(nxli_call_t *c)
{
    ST(nxl_backend_create(c->a, A(0).cp, A(1).cp, A(2).z, A(3).p));
}
nxl_status_t nxli_rpc_backend_create(nxl_agent_t *a, const char *name, const nxl_param_t *params,
                                     size_t nparams, nxl_backend_t **out)
{
    CALL(a, t_backend_create);
    ARG(0).cp = name, ARG(1).cp = params, ARG(2).z = nparams, ARG(3).p = out;
    return RUN_ST();
}

static void t_backend_get(nxli_call_t *c) { c->r.p = nxl_backend_get(c->a, A(0).cp); }
nxl_backend_t *nxli_rpc_backend_get(nxl_agent_t *a, const char *name)
{
    CALL(a, t_backend_get);
    ARG(0).cp = name;
    nxli_mt_call(a_, &c_);
    return c_.r.p;
}

static void t_notifs_drain(nxli_call_t *c) { c->r.z = nxl_notifs_drain(c->a, A(0).notif, A(1).p); }
size_t nxli_rpc_notifs_drain(nxl_agent_t *a, nxl_notif_cb cb, void *arg)
{
    CALL(a, t_notifs_drain);
    ARG(0).notif = cb, ARG(1).p = arg;
    nxli_mt_call(a_, &c_);
    return c_.r.z;
}

static void t_agent_on_notif(nxli_call_t *c) { nxl_agent_on_notif(c->a, A(0).notif, A(1).p); }
void nxli_rpc_agent_on_notif(nxl_agent_t *a, nxl_notif_cb cb, void *arg)
{
    CALL(a, t_agent_on_notif);
    ARG(0).notif = cb, ARG(1).p = arg;
    nxli_mt_call(a_, &c_);
}

static void t_future_from_cuda_event(nxli_call_t *c)
{
    ST(nxl_future_from_cuda_event(c->a, A(0).p, A(1).done, A(2).p, A(3).p));
}
nxl_status_t nxli_rpc_future_from_cuda_event(nxl_agent_t *a, void *ev, nxl_done_cb cb, void *arg,
                                             nxl_future_t **out)
{
    CALL(a, t_future_from_cuda_event);
    ARG(0).p = ev, ARG(1).done = cb, ARG(2).p = arg, ARG(3).p = out;
    return RUN_ST();
}

static void t_md_publish(nxli_call_t *c) { ST(nxl_md_publish(c->a, A(0).done, A(1).p, A(2).p)); }
nxl_status_t nxli_rpc_md_publish(nxl_agent_t *a, nxl_done_cb cb, void *arg, nxl_future_t **out)
{
    CALL(a, t_md_publish);
    ARG(0).done = cb, ARG(1).p = arg, ARG(2).p = out;
    return RUN_ST();
}

static void t_md_publish_partial(nxli_call_t *c)
{
    ST(nxl_md_publish_partial(c->a, A(0).cp, (nxl_mem_t)A(1).i, A(2).cp, A(3).z, A(4).done,
                              A(5).p, A(6).p));
}
nxl_status_t nxli_rpc_md_publish_partial(nxl_agent_t *a, const char *label, nxl_mem_t type,
                                         const nxl_desc_t *descs, size_t n, nxl_done_cb cb,
                                         void *arg, nxl_future_t **out)
{
    CALL(a, t_md_publish_partial);
    ARG(0).cp = label, ARG(1).i = (int)type, ARG(2).cp = descs, ARG(3).z = n;
    ARG(4).done = cb, ARG(5).p = arg, ARG(6).p = out;
    return RUN_ST();
}

static void t_md_unpublish(nxli_call_t *c) { ST(nxl_md_unpublish(c->a, A(0).done, A(1).p, A(2).p)); }
nxl_status_t nxli_rpc_md_unpublish(nxl_agent_t *a, nxl_done_cb cb, void *arg, nxl_future_t **out)
{
    CALL(a, t_md_unpublish);
    ARG(0).done = cb, ARG(1).p = arg, ARG(2).p = out;
    return RUN_ST();
}

static void t_md_fetch_etcd(nxli_call_t *c)
{
    ST(nxl_md_fetch_etcd(c->a, A(0).cp, A(1).cp, A(2).i, A(3).done, A(4).p, A(5).p));
}
nxl_status_t nxli_rpc_md_fetch_etcd(nxl_agent_t *a, const char *remote, const char *label,
                                    int timeout_ms, nxl_done_cb cb, void *arg, nxl_future_t **out)
{
    CALL(a, t_md_fetch_etcd);
    ARG(0).cp = remote, ARG(1).cp = label, ARG(2).i = timeout_ms;
    ARG(3).done = cb, ARG(4).p = arg, ARG(5).p = out;
    return RUN_ST();
}

static void t_md_send(nxli_call_t *c)
{
    ST(nxl_md_send(c->a, A(0).cp, (uint16_t)A(1).i, A(2).done, A(3).p, A(4).p));
}
nxl_status_t nxli_rpc_md_send(nxl_agent_t *a, const char *host, uint16_t port, nxl_done_cb cb,
                              void *arg, nxl_future_t **out)
{
    CALL(a, t_md_send);
    ARG(0).cp = host, ARG(1).i = port, ARG(2).done = cb, ARG(3).p = arg, ARG(4).p = out;
    return RUN_ST();
}

static void t_md_fetch(nxli_call_t *c)
{
    ST(nxl_md_fetch(c->a, A(0).cp, A(1).cp, (uint16_t)A(2).i, A(3).done, A(4).p, A(5).p));
}
nxl_status_t nxli_rpc_md_fetch(nxl_agent_t *a, const char *remote, const char *host,
                               uint16_t port, nxl_done_cb cb, void *arg, nxl_future_t **out)
{
    CALL(a, t_md_fetch);
    ARG(0).cp = remote, ARG(1).cp = host, ARG(2).i = port;
    ARG(3).done = cb, ARG(4).p = arg, ARG(5).p = out;
    return RUN_ST();
}

static void t_md_send_invalidate(nxli_call_t *c)
{
    ST(nxl_md_send_invalidate(c->a, A(0).cp, (uint16_t)A(1).i, A(2).done, A(3).p, A(4).p));
}
nxl_status_t nxli_rpc_md_send_invalidate(nxl_agent_t *a, const char *host, uint16_t port,
                                         nxl_done_cb cb, void *arg, nxl_future_t **out)
{
    CALL(a, t_md_send_invalidate);
    ARG(0).cp = host, ARG(1).i = port, ARG(2).done = cb, ARG(3).p = arg, ARG(4).p = out;
    return RUN_ST();
}

static void t_future_then(nxli_call_t *c) { ST(nxl_future_then(A(0).p, A(1).done, A(2).p)); }
nxl_status_t nxli_rpc_future_then(nxl_future_t *f, nxl_done_cb cb, void *arg)
{
    CALL_DIRECT(f->agent, t_future_then);
    ARG(0).p = f, ARG(1).done = cb, ARG(2).p = arg;
    return RUN_ST();
}

static void t_future_status(nxli_call_t *c) { c->r.st = nxl_future_status(A(0).cp); }
nxl_status_t nxli_rpc_future_status(const nxl_future_t *f)
{
    CALL_DIRECT(f->agent, t_future_status);
    ARG(0).cp = f;
    return RUN_ST();
}

static void t_future_error(nxli_call_t *c) { c->r.s = nxl_future_error(A(0).cp); }
const char *nxli_rpc_future_error(const nxl_future_t *f)
{
    CALL_DIRECT(f->agent, t_future_error);
    ARG(0).cp = f;
    nxli_mt_call(a_, &c_);
    return c_.r.s;
}

static void t_future_peer(nxli_call_t *c) { c->r.s = nxl_future_peer(A(0).cp); }
const char *nxli_rpc_future_peer(const nxl_future_t *f)
{
    CALL_DIRECT(f->agent, t_future_peer);
    ARG(0).cp = f;
    nxli_mt_call(a_, &c_);
    return c_.r.s;
}

static void t_future_release(nxli_call_t *c) { nxl_future_release(A(0).p); }
/* a release wakes nobody: it runs on the reactor's next wake-up, before
 * this thread's next marshalled call (which wakes it) */
void nxli_rpc_future_release(nxl_future_t *f)
{
    nxli_mt_call_async(f->agent, t_future_release, f, false, true);
}

static void t_future_cancel(nxli_call_t *c) { nxl_future_cancel(A(0).p); }
void nxli_rpc_future_cancel(nxl_future_t *f)
{
    nxli_mt_call_async(f->agent, t_future_cancel, f, true, true);
}

static void t_future_all(nxli_call_t *c)
{
    ST(nxl_future_all(c->a, A(0).p, A(1).z, A(2).done, A(3).p, A(4).p));
}
nxl_status_t nxli_rpc_future_all(nxl_agent_t *a, nxl_future_t *const *fs, size_t n,
                                 nxl_done_cb cb, void *arg, nxl_future_t **out)
{
    CALL(a, t_future_all);
    ARG(0).cp = fs, ARG(1).z = n, ARG(2).done = cb, ARG(3).p = arg, ARG(4).p = out;
    return RUN_ST();
}

static void t_md_check(nxli_call_t *c) { ST(nxl_md_check(c->a, A(0).cp)); }
nxl_status_t nxli_rpc_md_check(nxl_agent_t *a, const char *remote)
{
    CALL_DIRECT(a, t_md_check);
    ARG(0).cp = remote;
    return RUN_ST();
}

static void t_md_invalidate(nxli_call_t *c) { ST(nxl_md_invalidate(c->a, A(0).cp)); }
nxl_status_t nxli_rpc_md_invalidate(nxl_agent_t *a, const char *remote)
{
    CALL(a, t_md_invalidate);
    ARG(0).cp = remote;
    return RUN_ST();
}

static void t_md_local(nxli_call_t *c) { ST(nxl_md_local(c->a, A(0).p, A(1).p)); }
nxl_status_t nxli_rpc_md_local(nxl_agent_t *a, void **blob, size_t *len)
{
    CALL(a, t_md_local);
    ARG(0).p = blob, ARG(1).p = len;
    return RUN_ST();
}

static void t_md_local_partial(nxli_call_t *c)
{
    ST(nxl_md_local_partial(c->a, (nxl_mem_t)A(0).i, A(1).cp, A(2).z, A(3).p, A(4).p));
}
nxl_status_t nxli_rpc_md_local_partial(nxl_agent_t *a, nxl_mem_t type, const nxl_desc_t *descs,
                                       size_t n, void **blob, size_t *len)
{
    CALL(a, t_md_local_partial);
    ARG(0).i = (int)type, ARG(1).cp = descs, ARG(2).z = n, ARG(3).p = blob, ARG(4).p = len;
    return RUN_ST();
}

static void t_md_load(nxli_call_t *c) { ST(nxl_md_load(c->a, A(0).cp, A(1).z, A(2).p, A(3).z)); }
nxl_status_t nxli_rpc_md_load(nxl_agent_t *a, const void *blob, size_t len, char *name_out,
                              size_t cap)
{
    CALL(a, t_md_load);
    ARG(0).cp = blob, ARG(1).z = len, ARG(2).p = name_out, ARG(3).z = cap;
    return RUN_ST();
}

static void t_mem_register(nxli_call_t *c)
{
    ST(nxl_mem_register(c->a, (nxl_mem_t)A(0).i, A(1).cp, A(2).z, A(3).p));
}
nxl_status_t nxli_rpc_mem_register(nxl_agent_t *a, nxl_mem_t type, const nxl_desc_t *descs,
                                   size_t n, nxl_backend_t *b)
{
    CALL(a, t_mem_register);
    ARG(0).i = (int)type, ARG(1).cp = descs, ARG(2).z = n, ARG(3).p = b;
    return RUN_ST();
}

static void t_mem_deregister(nxli_call_t *c)
{
    ST(nxl_mem_deregister(c->a, (nxl_mem_t)A(0).i, A(1).cp, A(2).z));
}
nxl_status_t nxli_rpc_mem_deregister(nxl_agent_t *a, nxl_mem_t type, const nxl_desc_t *descs,
                                     size_t n)
{
    CALL(a, t_mem_deregister);
    ARG(0).i = (int)type, ARG(1).cp = descs, ARG(2).z = n;
    return RUN_ST();
}

static void t_mem_alloc(nxli_call_t *c)
{
    ST(nxl_mem_alloc(c->a, (nxl_mem_t)A(0).i, A(1).z, A(2).u64, A(3).p));
}
nxl_status_t nxli_rpc_mem_alloc(nxl_agent_t *a, nxl_mem_t type, size_t len, uint64_t dev_id,
                                void **ptr)
{
    CALL(a, t_mem_alloc);
    ARG(0).i = (int)type, ARG(1).z = len, ARG(2).u64 = dev_id, ARG(3).p = ptr;
    return RUN_ST();
}

static void t_mem_free(nxli_call_t *c) { ST(nxl_mem_free(c->a, A(0).p)); }
nxl_status_t nxli_rpc_mem_free(nxl_agent_t *a, void *ptr)
{
    CALL(a, t_mem_free);
    ARG(0).p = ptr;
    return RUN_ST();
}

static void t_mem_query(nxli_call_t *c)
{
    ST(nxl_mem_query(c->a, (nxl_mem_t)A(0).i, A(1).cp, A(2).z, A(3).p, A(4).p));
}
nxl_status_t nxli_rpc_mem_query(nxl_agent_t *a, nxl_mem_t type, const nxl_desc_t *descs,
                                size_t n, nxl_backend_t *b, nxl_query_t *results)
{
    CALL(a, t_mem_query);
    ARG(0).i = (int)type, ARG(1).cp = descs, ARG(2).z = n, ARG(3).p = b, ARG(4).p = results;
    return RUN_ST();
}

static void t_agent_stats(nxli_call_t *c) { ST(nxl_agent_stats(c->a, A(0).cp, A(1).p)); }
nxl_status_t nxli_rpc_agent_stats(nxl_agent_t *a, const char *transport, nxl_stats_t *out)
{
    CALL_DIRECT(a, t_agent_stats);
    ARG(0).cp = transport, ARG(1).p = out;
    return RUN_ST();
}

static void t_prep(nxli_call_t *c)
{
    ST(nxl_prep(c->a, A(0).cp, (nxl_mem_t)A(1).i, A(2).cp, A(3).z, A(4).p));
}
nxl_status_t nxli_rpc_prep(nxl_agent_t *a, const char *agent, nxl_mem_t type,
                           const nxl_desc_t *descs, size_t n, nxl_prepped_t **out)
{
    CALL_DIRECT(a, t_prep);
    ARG(0).cp = agent, ARG(1).i = (int)type, ARG(2).cp = descs, ARG(3).z = n, ARG(4).p = out;
    return RUN_ST();
}

static void t_prepped_release(nxli_call_t *c) { nxl_prepped_release(A(0).p); }
void nxli_rpc_prepped_release(nxl_prepped_t *p)
{
    nxli_mt_call_async(p->agent, t_prepped_release, p, true, true);
}

static void t_xfer_make(nxli_call_t *c)
{
    ST(nxl_xfer_make(c->a, (nxl_op_t)A(0).i, A(1).p, A(2).cp, A(3).p, A(4).cp, A(5).z, A(6).cp,
                     A(7).p));
}
nxl_status_t nxli_rpc_xfer_make(nxl_agent_t *a, nxl_op_t op, nxl_prepped_t *lp, const size_t *lidx,
                                nxl_prepped_t *rp, const size_t *ridx, size_t n,
                                const nxl_xfer_opts_t *opts, nxl_xfer_t **out)
{
    CALL_DIRECT(a, t_xfer_make);
    ARG(0).i = (int)op, ARG(1).p = lp, ARG(2).cp = lidx, ARG(3).p = rp, ARG(4).cp = ridx;
    ARG(5).z = n, ARG(6).cp = opts, ARG(7).p = out;
    return RUN_ST();
}

static void t_xfer_create(nxli_call_t *c)
{
    ST(nxl_xfer_create(c->a, (nxl_op_t)A(0).i, A(1).cp, A(2).cp, A(3).cp, A(4).cp, A(5).p));
}
nxl_status_t nxli_rpc_xfer_create(nxl_agent_t *a, nxl_op_t op, const nxl_dlist_t *local,
                                  const nxl_dlist_t *remote, const char *remote_agent,
                                  const nxl_xfer_opts_t *opts, nxl_xfer_t **out)
{
    CALL(a, t_xfer_create);
    ARG(0).i = (int)op, ARG(1).cp = local, ARG(2).cp = remote, ARG(3).cp = remote_agent;
    ARG(4).cp = opts, ARG(5).p = out;
    return RUN_ST();
}

static void t_xfer_set_notif(nxli_call_t *c) { ST(nxl_xfer_set_notif(A(0).p, A(1).cp, A(2).z)); }
nxl_status_t nxli_rpc_xfer_set_notif(nxl_xfer_t *x, const void *msg, size_t len)
{
    CALL_DIRECT(x->agent, t_xfer_set_notif);
    ARG(0).p = x, ARG(1).cp = msg, ARG(2).z = len;
    return RUN_ST();
}

static void t_xfer_post(nxli_call_t *c) { ST(nxl_xfer_post(A(0).p, A(1).done, A(2).p, A(3).p)); }
static void t_xfer_post_queued(nxli_call_t *c) { nxli_xfer_post_queued(A(0).p, A(1).p, A(2).i); }
static void t_xfer_post_refused(nxli_call_t *c) { nxli_xfer_post_refused(A(0).p, A(1).p, A(2).i); }

/* A post does not wait for the reactor: what can refuse it at once (a
 * post in flight, an invalidated peer, revoked regions) is checked here
 * under the table lock, a future claims the transfer, and the post is
 * queued; the thread goes on (posting more, waiting). What fails later
 * completes the future with its status and sentence. A post in flight is
 * refused here, with the default mode's sentence; another failed check
 * hands the whole post over, so that its status and sentence are the
 * default mode's. */
nxl_status_t nxli_rpc_xfer_post(nxl_xfer_t *x, nxl_done_cb cb, void *arg, nxl_future_t **out)
{
    nxl_agent_t *a = x->agent;
    struct nxli_thr *t = a->thr;
    nxl_future_t *f = NULL;
    if (out)
        *out = NULL;
    /* the reactor sleeps: posted here, as the reactor would (host memory
     * only: CUDA's contexts are per thread) */
    if (x->ltype == NXL_DRAM && x->rtype == NXL_DRAM && nxli_mt_act_begin(a, false)) {
        nxl_status_t st = nxl_xfer_post(x, cb, arg, out);
        nxli_mt_act_end(a, st != NXL_SUCCESS);
        return st;
    }
    const char *why = NULL;
    nxl_status_t st = NXL_ERR_UNKNOWN;
    if (!t->direct) {
        /* the reactor holds the lock only where it changes the tables */
        if (nxli_foreign_begin(a)) {
            st = nxli_xfer_post_claim(x, cb, arg, &f, &why);
            nxli_foreign_end(a);
        }
    } else if (nxli_mt_foreign_try(a)) {
        /* not acting (a transport that takes calls on its thread only, or
         * calls of this thread still queued): checked here all the same */
        st = nxli_xfer_post_claim(x, cb, arg, &f, &why);
        nxli_foreign_end(a);
    } else {
        /* the lock is held (the reactor holds it for its whole turn): the
         * transfer is claimed without it, and the reactor checks the peer
         * and the regions when it runs the post */
        st = nxli_xfer_post_claim_unlocked(x, cb, arg, &f, &why);
    }
    if (st == NXL_ERR_REPOST_ACTIVE) {
        nxli_thread_set_error(a, why);
        return st;
    }
    if (f) {
        nxli_call_t *q = malloc(sizeof(*q));
        if (q) {
            *q = (nxli_call_t){.fn = t_xfer_post_queued, .refuse = t_xfer_post_refused, .a = a,
                               .async = true};
            q->v[0].p = x, q->v[1].p = f, q->v[2].i = out != NULL;
            if (t->direct)
                nxli_mt_ts_hold(q);
            if (nxli_mt_enqueue(a, q, true)) {
                if (out)
                    *out = f;
                return NXL_SUCCESS;
            }
            nxli_mt_record_free(q);
        }
        nxli_tlock(a);
        nxli_xfer_post_unclaim(x, f);
        nxli_tunlock(a);
    }
    CALL(x->agent, t_xfer_post);
    ARG(0).p = x, ARG(1).done = cb, ARG(2).p = arg, ARG(3).p = out;
    return RUN_ST();
}

static void t_xfer_status(nxli_call_t *c) { c->r.st = nxl_xfer_status(A(0).cp); }
nxl_status_t nxli_rpc_xfer_status(const nxl_xfer_t *x)
{
    CALL_DIRECT(x->agent, t_xfer_status);
    ARG(0).cp = x;
    return RUN_ST();
}

static void t_xfer_release(nxli_call_t *c) { nxl_xfer_release(A(0).p); }
void nxli_rpc_xfer_release(nxl_xfer_t *x)
{
    nxli_mt_call_async(x->agent, t_xfer_release, x, true, true);
}

static void t_notif_send(nxli_call_t *c)
{
    ST(nxl_notif_send(c->a, A(0).cp, A(1).cp, A(2).z, A(3).done, A(4).p, A(5).p));
}
nxl_status_t nxli_rpc_notif_send(nxl_agent_t *a, const char *remote, const void *msg, size_t len,
                                 nxl_done_cb cb, void *arg, nxl_future_t **out)
{
    CALL_DIRECT(a, t_notif_send);
    ARG(0).cp = remote, ARG(1).cp = msg, ARG(2).z = len;
    ARG(3).done = cb, ARG(4).p = arg, ARG(5).p = out;
    return RUN_ST();
}

