/* SPDX-License-Identifier: BSD-3-Clause */
/* Threaded mode: the entries of the public functions from foreign threads
 * (threads.h) and their thunks, run on the reactor thread or acting (mt.h):
 * made from the list in calls.def, but for nxli_rpc_xfer_post(). */
#include "mt.h"

/* m(type, param) for each (type, param) of a call, sep() between two */
#define NXLI_NARG(...) NXLI_NARG_(__VA_ARGS__, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define NXLI_NARG_(_1, _2, _3, _4, _5, _6, _7, _8, _9, n, ...) n
#define NXLI_CAT(x, y) NXLI_CAT_(x, y)
#define NXLI_CAT_(x, y) x##y
#define NXLI_MAP(m, sep, ...) NXLI_CAT(NXLI_MAP_, NXLI_NARG(__VA_ARGS__))(m, sep, __VA_ARGS__)
#define NXLI_MAP_1(m, sep, p) m p
#define NXLI_MAP_2(m, sep, p, ...) m p sep() NXLI_MAP_1(m, sep, __VA_ARGS__)
#define NXLI_MAP_3(m, sep, p, ...) m p sep() NXLI_MAP_2(m, sep, __VA_ARGS__)
#define NXLI_MAP_4(m, sep, p, ...) m p sep() NXLI_MAP_3(m, sep, __VA_ARGS__)
#define NXLI_MAP_5(m, sep, p, ...) m p sep() NXLI_MAP_4(m, sep, __VA_ARGS__)
#define NXLI_MAP_6(m, sep, p, ...) m p sep() NXLI_MAP_5(m, sep, __VA_ARGS__)
#define NXLI_MAP_7(m, sep, p, ...) m p sep() NXLI_MAP_6(m, sep, __VA_ARGS__)
#define NXLI_MAP_8(m, sep, p, ...) m p sep() NXLI_MAP_7(m, sep, __VA_ARGS__)
#define NXLI_MAP_9(m, sep, p, ...) m p sep() NXLI_MAP_8(m, sep, __VA_ARGS__)
#define NXLI_COMMA() ,
#define NXLI_NOSEP()

#define NXLI_PARAM(type, param) type param     /* the entry's parameter */
#define NXLI_FIELD(type, param) type param;    /* its copy in the record's arguments */
#define NXLI_NAME(type, param) param
#define NXLI_ARGV(type, param) args_->param    /* the thunk's argument */

#define NXLI_DIRECT_QUEUED false
#define NXLI_DIRECT_DIRECT true
#define NXLI_FAILED_ST(ret) ((ret) < 0)
#define NXLI_FAILED_VAL(ret) false

/* The arguments and the result live on the caller's stack, in a struct of
 * the call's own (c->args): the caller waits until the thunk ran. */
#define NXLI_CALL_(kind, how, type, refused, name, self, ...)                                      \
    struct nxli_args_##name {                                                                      \
        type ret_;                                                                                 \
        NXLI_MAP(NXLI_FIELD, NXLI_NOSEP, __VA_ARGS__)                                              \
    };                                                                                             \
    static void t_##name(nxli_call_t *c)                                                           \
    {                                                                                              \
        struct nxli_args_##name *args_ = c->args;                                                  \
        args_->ret_ = nxl_##name(NXLI_MAP(NXLI_ARGV, NXLI_COMMA, __VA_ARGS__));                    \
        c->fail = NXLI_FAILED_##how(args_->ret_);                                                  \
    }                                                                                              \
    type nxli_rpc_##name(NXLI_MAP(NXLI_PARAM, NXLI_COMMA, __VA_ARGS__))                            \
    {                                                                                              \
        struct nxli_args_##name args_ = {refused, NXLI_MAP(NXLI_NAME, NXLI_COMMA, __VA_ARGS__)};   \
        nxli_call_t c_ = {.fn = t_##name, .args = &args_, .direct = NXLI_DIRECT_##kind};           \
        nxli_mt_call(self, &c_);                                                                   \
        return args_.ret_;                                                                         \
    }
#define NXLI_CALL_ST(kind, name, self, ...)                                                        \
    NXLI_CALL_(kind, ST, nxl_status_t, NXL_ERR_NOT_ALLOWED, name, self, __VA_ARGS__)
#define NXLI_CALL_VAL(kind, type, refused, name, self, ...)                                        \
    NXLI_CALL_(kind, VAL, type, refused, name, self, __VA_ARGS__)
#define NXLI_CALL_VOID(kind, name, self, ...)                                                      \
    struct nxli_args_##name {                                                                      \
        NXLI_MAP(NXLI_FIELD, NXLI_NOSEP, __VA_ARGS__)                                              \
    };                                                                                             \
    static void t_##name(nxli_call_t *c)                                                           \
    {                                                                                              \
        struct nxli_args_##name *args_ = c->args;                                                  \
        nxl_##name(NXLI_MAP(NXLI_ARGV, NXLI_COMMA, __VA_ARGS__));                                  \
    }                                                                                              \
    void nxli_rpc_##name(NXLI_MAP(NXLI_PARAM, NXLI_COMMA, __VA_ARGS__))                            \
    {                                                                                              \
        struct nxli_args_##name args_ = {NXLI_MAP(NXLI_NAME, NXLI_COMMA, __VA_ARGS__)};            \
        nxli_call_t c_ = {.fn = t_##name, .args = &args_, .direct = NXLI_DIRECT_##kind};           \
        nxli_mt_call(self, &c_);                                                                   \
    }
/* a malloc'd record: its one argument in v[0] */
#define NXLI_CALL_ASYNC(wake, name, self, param)                                                   \
    static void t_##name(nxli_call_t *c) { nxl_##name(c->v[0].p); }                                \
    void nxli_rpc_##name(NXLI_PARAM param)                                                         \
    {                                                                                              \
        nxli_mt_call_async(self, t_##name, NXLI_NAME param, wake, true);                           \
    }

#include "calls.def"

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
     * on this side, anything but VRAM on the other: CUDA's contexts are
     * per thread) */
    if (x->ltype == NXL_DRAM && x->rtype != NXL_VRAM && nxli_mt_act_begin(a, false)) {
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
