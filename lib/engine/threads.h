/* SPDX-License-Identifier: BSD-3-Clause */
/* Threaded mode (nxl_agent_config_t.threaded): the agent runs its reactor
 * on a thread of its own, and a public call made from any other thread is
 * handed to that thread (mt/). Each public function that touches the
 * agent's state begins with one line of dispatch:
 *
 *     if (nxli_thread_foreign(a)) return nxli_rpc_xfer_post(x, cb, arg, out);
 *
 * In the default mode a->thr is NULL and the test is one load and one
 * branch. On the reactor thread (callbacks, the thunks themselves) the call
 * runs directly. */
#ifndef NXL_THREADS_H
#define NXL_THREADS_H

#include <nxl.h>
#include <nxl/kv.h>
#include <stdbool.h>

struct nxli_thr;
typedef struct nxli_waiter nxli_waiter_t;

/* nonzero when a is threaded and this is not its reactor thread */
bool nxli_thread_foreign_slow(const nxl_agent_t *a);
#define nxli_thread_foreign(a) (__builtin_expect((a)->thr != NULL, 0) && \
                                nxli_thread_foreign_slow(a))

/* a future of a threaded agent, called from another thread; a future
 * held after its agent was destroyed is the caller's alone (mt cleared) */
#define nxli_future_foreign(f) (__builtin_expect((f)->mt, 0) && nxli_thread_foreign_slow((f)->agent))

/* The table lock of a threaded agent (recursive; nothing in the default
 * mode). A foreign thread runs nxl_prep(), nxl_xfer_make() and the
 * releases of prepared lists and idle transfers itself, under this lock,
 * instead of handing them to the reactor; the reactor holds it where it
 * changes what those read (region tables, loaded agents, backends) or
 * takes and drops the references they take (regions, agents), the agent's
 * lists of prepared lists and transfers, and its spare arrays. In the
 * direct mode (mt/reactor.c) the reactor holds it for each whole turn, and
 * these take it recursively. */
void nxli_tlock(nxl_agent_t *a);
void nxli_tunlock(nxl_agent_t *a);
#define NXLI_TLOCK(a) do { if (__builtin_expect((a) && (a)->thr, 0)) nxli_tlock(a); } while (0)
#define NXLI_TUNLOCK(a) do { if (__builtin_expect((a) && (a)->thr, 0)) nxli_tunlock(a); } while (0)
/* The body of a function that returns what call returns, made under the
 * table lock of agent a (the *_locked functions of mem.c and md.c) */
#define NXLI_LOCKED(type, a, call)                                                                 \
    do {                                                                                           \
        NXLI_TLOCK(a);                                                                             \
        type ret_ = (call);                                                                        \
        NXLI_TUNLOCK(a);                                                                           \
        return ret_;                                                                               \
    } while (0)
/* Lists longer than this are prepared and made on the reactor as before:
 * their work outweighs a hand-over, and eight threads holding the table
 * lock for 16,384 descriptors each kept one another (and the reactor)
 * waiting */
#define NXLI_FOREIGN_MAX 1024
/* A foreign thread's own attempt: the table lock, quiet failures; false
 * (nothing held) when the agent is being torn down. */
bool nxli_foreign_begin(nxl_agent_t *a);
void nxli_foreign_end(nxl_agent_t *a);
/* Under the table lock on a foreign thread: false once the reactor began
 * its teardown (the caller then marshals the call, which is refused). */
bool nxli_thread_alive(const nxl_agent_t *a);
/* Set around a foreign thread's own attempt: a failure leaves no sentence
 * and no log line (the call is then marshalled and fails on the reactor,
 * with both) */
extern __thread bool nxli_quiet;

/* agent.c calls these */
nxl_status_t nxli_thread_start(nxl_agent_t *a);      /* at the end of nxl_agent_create */
void nxli_thread_destroy(nxl_agent_t *a);            /* nxl_agent_destroy of a threaded agent */
void nxli_agent_teardown(nxl_agent_t *a);            /* agent.c: all but the base and the struct */
void nxli_agent_free(nxl_agent_t *a);                /* agent.c: the rest */
/* future.c: a future of a threaded agent was delivered (its callbacks
 * ran) or is freed: wake foreign waiters */
void nxli_thread_settled(nxl_future_t *f);
/* delivery: the same, its waiters woken at nxli_thread_wake() (the end of
 * the delivery) */
void nxli_thread_settled_later(nxl_future_t *f);
void nxli_thread_wake(nxl_agent_t *a);
nxl_status_t nxli_thread_wait(nxl_future_t *f, int timeout_ms);
const char *nxli_thread_last_error(const nxl_agent_t *a);
/* util.c: a log line of a call acting for the reactor goes to the reactor
 * thread (true: taken; the application's callback runs there) */
bool nxli_thread_log_later(nxl_agent_t *a, nxl_log_level_t lvl, const char *line);
void nxli_thread_set_error(const nxl_agent_t *a, const char *s);

/* One marshalled entry per public function: made by mt/rpc.c from the list
 * in mt/calls.def (the compiler holds them to these declarations), but for
 * nxli_rpc_xfer_post(), written by hand in mt/rpc.c. */
nxl_status_t nxli_rpc_backend_create(nxl_agent_t *a, const char *name, const nxl_param_t *params,
                                     size_t nparams, nxl_backend_t **out);
nxl_backend_t *nxli_rpc_backend_get(nxl_agent_t *a, const char *name);
size_t nxli_rpc_notifs_drain(nxl_agent_t *a, nxl_notif_cb cb, void *arg);
void nxli_rpc_agent_on_notif(nxl_agent_t *a, nxl_notif_cb cb, void *arg);
void nxli_rpc_agent_on_peer(nxl_agent_t *a, nxl_peer_cb cb, void *arg);
nxl_status_t nxli_rpc_future_from_cuda_event(nxl_agent_t *a, void *ev, nxl_done_cb cb, void *arg,
                                             nxl_future_t **out);
nxl_status_t nxli_rpc_md_publish(nxl_agent_t *a, nxl_done_cb cb, void *arg, nxl_future_t **out);
nxl_status_t nxli_rpc_md_publish_partial(nxl_agent_t *a, const char *label, nxl_mem_t type,
                                         const nxl_desc_t *descs, size_t n, nxl_done_cb cb,
                                         void *arg, nxl_future_t **out);
nxl_status_t nxli_rpc_md_unpublish(nxl_agent_t *a, nxl_done_cb cb, void *arg, nxl_future_t **out);
nxl_status_t nxli_rpc_md_fetch_etcd(nxl_agent_t *a, const char *remote, const char *label,
                                    int timeout_ms, nxl_done_cb cb, void *arg, nxl_future_t **out);
nxl_status_t nxli_rpc_md_send(nxl_agent_t *a, const char *host, uint16_t port, nxl_done_cb cb,
                              void *arg, nxl_future_t **out);
nxl_status_t nxli_rpc_md_fetch(nxl_agent_t *a, const char *remote, const char *host,
                               uint16_t port, nxl_done_cb cb, void *arg, nxl_future_t **out);
nxl_status_t nxli_rpc_md_send_invalidate(nxl_agent_t *a, const char *host, uint16_t port,
                                         nxl_done_cb cb, void *arg, nxl_future_t **out);
nxl_status_t nxli_rpc_future_then(nxl_future_t *f, nxl_done_cb cb, void *arg);
nxl_status_t nxli_rpc_future_status(const nxl_future_t *f);
const char *nxli_rpc_future_error(const nxl_future_t *f);
const char *nxli_rpc_future_peer(const nxl_future_t *f);
void nxli_rpc_future_release(nxl_future_t *f);
void nxli_rpc_future_cancel(nxl_future_t *f);
nxl_status_t nxli_rpc_future_set_deadline(nxl_future_t *f, unsigned ms);
nxl_status_t nxli_rpc_future_all(nxl_agent_t *a, nxl_future_t *const *fs, size_t n,
                                 nxl_done_cb cb, void *arg, nxl_future_t **out);
nxl_status_t nxli_rpc_md_check(nxl_agent_t *a, const char *remote);
nxl_status_t nxli_rpc_md_invalidate(nxl_agent_t *a, const char *remote);
nxl_status_t nxli_rpc_md_label(nxl_agent_t *a, const char *label, nxl_mem_t type,
                               const nxl_desc_t *descs, size_t n);
nxl_status_t nxli_rpc_md_local(nxl_agent_t *a, void **blob, size_t *len);
nxl_status_t nxli_rpc_md_local_partial(nxl_agent_t *a, nxl_mem_t type, const nxl_desc_t *descs,
                                       size_t n, void **blob, size_t *len);
nxl_status_t nxli_rpc_md_local_partial_strided(nxl_agent_t *a, nxl_mem_t type,
                                               const nxl_strided_t *s, size_t n, void **blob,
                                               size_t *len);
nxl_status_t nxli_rpc_md_remote_strided(nxl_agent_t *a, const char *remote, nxl_mem_t *type,
                                        nxl_strided_t *out, size_t cap, size_t *n);
nxl_status_t nxli_rpc_md_load(nxl_agent_t *a, const void *blob, size_t len, char *name_out,
                              size_t cap);
nxl_status_t nxli_rpc_mem_register(nxl_agent_t *a, nxl_mem_t type, const nxl_desc_t *descs,
                                   size_t n, nxl_backend_t *b);
nxl_status_t nxli_rpc_mem_deregister(nxl_agent_t *a, nxl_mem_t type, const nxl_desc_t *descs,
                                     size_t n);
nxl_status_t nxli_rpc_mem_alloc(nxl_agent_t *a, nxl_mem_t type, size_t len, uint64_t dev_id,
                                void **ptr);
nxl_status_t nxli_rpc_mem_free(nxl_agent_t *a, void *ptr);
nxl_status_t nxli_rpc_mem_query(nxl_agent_t *a, nxl_mem_t type, const nxl_desc_t *descs,
                                size_t n, nxl_backend_t *b, nxl_query_t *results);
nxl_status_t nxli_rpc_agent_stats(nxl_agent_t *a, const char *transport, nxl_stats_t *out);
nxl_status_t nxli_rpc_prep(nxl_agent_t *a, const char *agent, nxl_mem_t type,
                           const nxl_desc_t *descs, size_t n, nxl_prepped_t **out);
nxl_status_t nxli_rpc_prep_strided(nxl_agent_t *a, const char *agent, nxl_mem_t type,
                                   const nxl_strided_t *s, size_t n, nxl_prepped_t **out);
void nxli_rpc_prepped_release(nxl_prepped_t *p);
nxl_status_t nxli_rpc_xfer_make(nxl_agent_t *a, nxl_op_t op, nxl_prepped_t *lp, const size_t *lidx,
                                nxl_prepped_t *rp, const size_t *ridx, size_t n,
                                const nxl_xfer_opts_t *opts, nxl_xfer_t **out);
nxl_status_t nxli_rpc_xfer_create(nxl_agent_t *a, nxl_op_t op, const nxl_dlist_t *local,
                                  const nxl_dlist_t *remote, const char *remote_agent,
                                  const nxl_xfer_opts_t *opts, nxl_xfer_t **out);
nxl_status_t nxli_rpc_xfer_set_notif(nxl_xfer_t *x, const void *msg, size_t len);
nxl_status_t nxli_rpc_xfer_post(nxl_xfer_t *x, nxl_done_cb cb, void *arg, nxl_future_t **out);
nxl_status_t nxli_rpc_xfer_status(const nxl_xfer_t *x);
void nxli_rpc_xfer_release(nxl_xfer_t *x);
nxl_status_t nxli_rpc_kv_xfer_make(nxl_agent_t *a, const char *peer, const nxl_kv_layout_t *decode,
                                   const nxl_kv_layout_t *prefill, const nxl_kv_seq_t *seq,
                                   const nxl_desc_t *staging, const nxl_kv_opts_t *opts,
                                   nxl_kv_xfer_t **out);
nxl_status_t nxli_rpc_kv_xfer_post(nxl_kv_xfer_t *kx, nxl_done_cb cb, void *arg,
                                   nxl_future_t **out);
void nxli_rpc_kv_xfer_release(nxl_kv_xfer_t *kx);
/* the agent of a KV transfer (kvlayout.c) */
nxl_agent_t *nxli_kv_agent(const nxl_kv_xfer_t *kx);
nxl_status_t nxli_rpc_notif_send(nxl_agent_t *a, const char *remote, const void *msg, size_t len,
                                 nxl_done_cb cb, void *arg, nxl_future_t **out);

#endif
