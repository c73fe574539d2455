/* SPDX-License-Identifier: BSD-3-Clause */
/* The engine's private structures: agent, regions, remote agents, prepared
 * lists, transfers, futures. Nothing here is part of the public API. */
#ifndef NXL_INTERNAL_H
#define NXL_INTERNAL_H

#include "config.h"
#include <nxl.h>
#include <nxl/transport.h>

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/queue.h>

#define NXLI_MAX_BACKENDS 8
#define NXLI_NAME_MAX 256
#define NXLI_ERR_MAX 512
/* Bounds on untrusted metadata. */
#define NXLI_MD_MAX_BYTES (256u << 20)
#define NXLI_MD_MAX_REGIONS (1u << 20)
#define NXLI_MD_MAX_KEY (64u << 10)
#define NXLI_LABEL_MAX 255 /* bytes of a region's label (nxl_md_label) */
/* a cancel that waits for its transport (NXLT_CAP_CANCEL_WAITS) and is not
 * through after this long: the transport's abort hook (nxlt_on_deadline)
 * is called, as at a deadline (future.c) */
#define NXLI_CANCEL_GRACE_MS 200
#define NXLI_FD_SLICE_US 50 /* NXL_LOOP_FD: longest run of turns in one nxl_agent_run_once */
#define NXLI_MD_VERSION 1

#define NXLI_UNUSED(x) ((void)(x))

#include "../common/base64.h"
#include "../common/clock_us.h"
#include "../common/zero.h"
#include "../common/growbuf.h"
#include "loop.h"
#include "threads.h"

typedef struct nxli_region nxli_region_t;
typedef struct nxli_remote nxli_remote_t;

/* ---- telemetry: counters of one backend's transfers */
typedef struct nxli_xstats {
    uint64_t posted, succeeded, failed, canceled;
    uint64_t bytes[2][NXL_MEM_TYPES]; /* [nxl_op_t][local memory type], succeeded */
    uint64_t lat_count, lat_sum_us, lat_bucket[NXL_STATS_BUCKETS];
} nxli_xstats_t;

/* ---- backends */
struct nxlt_ctx {
    nxl_agent_t *agent;
    nxl_backend_t *backend;
};

struct nxl_backend {
    nxl_agent_t *agent;
    const nxlt_ops_t *ops;
    void *state;
    int index;              /* preference order */
    struct nxlt_ctx ctx;
    nxli_xstats_t xs;
    nxlt_deadline_cb on_deadline; /* nxlt_on_deadline() */
};

/* ---- local memory: a region registered with one or more backends */
struct nxli_region {
    nxl_mem_t type;
    uint64_t dev;
    uintptr_t addr;
    size_t len;
    int refs;               /* the section's, plus one per prepped list / xfer */
    bool alloc;             /* from nxl_mem_alloc() */
    nxl_backend_t *alloc_backend;
    void *md[NXLI_MAX_BACKENDS];
    void *key[NXLI_MAX_BACKENDS];   /* packed public key, cached */
    size_t key_len[NXLI_MAX_BACKENDS];
    /* the registration cache (mem.c): a region registered inside another
     * is a slice of it, kept out of the sorted table (a->slices) */
    struct nxli_region *parent; /* the region a slice lies in (one ref held) */
    struct nxli_region *hnext;  /* a slice: next in its bucket of a->slices */
    bool borrowed;          /* a slice's md[] are its parent's, not its own */
    bool app;               /* the application holds this exact range */
    int nslices;            /* slices registered inside it */
    /* lazy registration (lazyreg.c): an entry of the agent's cache of
     * host memory registered on first use, not in the metadata */
    bool lazy;
    uint64_t used;          /* a lazy entry: the tick of its last use (LRU) */
    /* its label (nxl_md_label(), nxl_md_publish_partial()): the name and
     * its place among the label's regions, carried in the metadata */
    char *label;            /* NULL: none */
    size_t label_at;
};

/* A sorted array of regions of one kind, searched by address. */
typedef struct nxli_rtab {
    nxli_region_t **v;
    size_t n, cap;
} nxli_rtab_t;

/* The slices of the registration cache, hashed by (type, dev, addr, len). */
typedef struct nxli_stab {
    nxli_region_t **b;
    size_t nb, n;           /* buckets (a power of two), slices */
} nxli_stab_t;

/* ---- remote agents */
typedef struct nxli_rregion {
    nxl_mem_t type;
    uint64_t dev;
    uintptr_t addr;
    size_t len;
    void *rkey[NXLI_MAX_BACKENDS];
    bool revoked;           /* its agent deregistered it (nxlt_remote_revoked) */
    char *label;            /* its label in the metadata (NULL: none), and */
    size_t label_at;        /* its place among that label's regions */
} nxli_rregion_t;

struct nxli_remote {
    char *name;
    int refs;               /* the agent's table, plus prepped lists */
    bool invalid;           /* invalidated: no longer in the table */
    bool self;              /* loopback: built from our own metadata */
    nxl_agent_t *agent;
    void *conn[NXLI_MAX_BACKENDS];
    nxli_rregion_t **regs;  /* sorted by (type, dev, addr); entries never move */
    size_t nregs, cap;
    nxli_rregion_t **gone;  /* revoked regions, out of regs; kept for the lists using them */
    size_t ngone;
    nxl_strided_t *strided; /* the strided lists of its last metadata that carried any */
    size_t nstrided;
    nxl_mem_t strided_type;
    void *conn_info[NXLI_MAX_BACKENDS]; /* as received, to recognise the same peer */
    size_t conn_info_len[NXLI_MAX_BACKENDS];
    uint64_t boot;          /* its incarnation's number from the metadata (0: none) */
    LIST_ENTRY(nxli_remote) link;
};

/* ---- what the agent remembers of each peer it ever loaded, past the
 * nxli_remote_t of one incarnation (peer.c) */
typedef struct nxli_peer {
    nxl_agent_t *a;
    char *name;
    uint64_t boot;          /* the incarnation's number its metadata carried (0: none) */
    uint64_t inc;           /* incarnations seen (nxl_peer_event_t.incarnation) */
    bool down;
    bool app_down;          /* the application invalidated it: no recovery */
    char *host;             /* where nxl_md_fetch() got it (NULL: elsewhere) */
    uint16_t port;
    bool etcd;              /* fetched from etcd: the watch brings it back */
    nxlt_timer_t *retry;    /* recovery: the next fetch (made at the first DOWN) */
    unsigned backoff_ms;
    bool fetching;          /* a recovery fetch is in flight */
    nxl_future_t *fetch;    /* ... its future (ours until its callback): canceled when given up */
    LIST_ENTRY(nxli_peer) link;
} nxli_peer_t;

/* a peer a transfer found unreachable while a foreign thread acted for
 * the reactor: marked DOWN by the reactor's next delivery (peer.c) */
typedef struct nxli_suspect {
    struct nxli_suspect *next;
    uint64_t boot;          /* the incarnation that failed */
    char *why;
    char name[];
} nxli_suspect_t;

/* one peer event waiting for delivery */
typedef struct nxli_pevent {
    nxl_peer_event_t ev;
    STAILQ_ENTRY(nxli_pevent) link;
    char buf[];             /* the name, then the sentence */
} nxli_pevent_t;

/* ---- futures */
typedef struct nxli_cb {
    nxl_done_cb cb;
    void *arg;
    struct nxli_cb *next;
} nxli_cb_t;

typedef enum { NXLI_F_XFER, NXLI_F_NOTIF, NXLI_F_MD, NXLI_F_ALL, NXLI_F_EVENT } nxli_fkind_t;

struct nxli_pool;

struct nxl_future {
    nxl_agent_t *agent;
    struct nxli_pool *pool; /* where it goes when freed (NULL: free()) */
    nxli_fkind_t kind;
    nxl_status_t status;
    int refs;               /* user's + library's */
    bool done;              /* completion recorded; callbacks not run yet */
    bool settled;           /* delivered: its callbacks ran, its status is public */
    bool queued;            /* on the agent's delivery queue */
    bool cancel_wait;       /* canceled; completes when its op is reported done */
    nxli_cb_t *cbs, **cbs_tail;
    nxli_cb_t cb0;          /* the first callback's entry, in place (cb0_used) */
    bool cb0_used;
    char *err;
    char *peer;
    /* what to do on cancel (xfer, exchange, all), and the owner */
    void (*on_cancel)(nxl_future_t *f);
    void *owner;
    /* a future over other operations (a KV transfer, kvlayout.c): a cancel
     * calls this instead, with cancel_wait set, and the owner completes it
     * once those operations let go of their buffers */
    void (*cancel_hook)(nxl_future_t *f);
    nxlt_op_t *op;          /* transport op behind it, if any */
    /* telemetry of a transfer: what it moves, through which backend, when */
    nxl_backend_t *st_backend;
    uint64_t st_bytes, st_post_us, st_done_us;
    nxl_op_t st_op;
    nxl_mem_t st_mem;
    /* nxl_future_all */
    nxl_future_t **children;
    size_t nchildren, nleft;
    nxli_waiter_t *waiters; /* threads in nxl_future_wait() (mt/wait.c) */
    bool wdone;             /* under the queue's mutex: delivered, waiters return at once */
    bool mt;                /* its agent is threaded and alive: calls are marshalled */
    bool attached;          /* on the agent's pending list (or past it): not a queued post's */
    LIST_ENTRY(nxl_future) alink; /* the threaded agent's futures (tfutures) */
    TAILQ_ENTRY(nxl_future) plink;  /* pending list */
    TAILQ_ENTRY(nxl_future) dlink;  /* delivery queue */
    /* a transfer's deadline (nxl_xfer_opts_t.deadline_ms) */
    uint64_t deadline_us;   /* when (nxli_now_us), 0: none */
    bool in_deadlines;      /* on the agent's deadlines list */
    char *timeout_why;      /* its deadline canceled it: completes with NXL_ERR_TIMEOUT */
    char *dl_what;          /* a metadata request's: what it waits for, for the deadline's
                             * sentence (nxl_future_set_deadline) */
    char *dl_peer;          /* a notification's: the name of its agent, its length and the
                             * transport it went over, the sentence made of them only when
                             * the deadline passes (a vasprintf() per send cost ~150 ns of
                             * a ~400 ns ping-pong's one-way trip); dl_peer_in when
                             * the name fits there, else malloc'd */
    char dl_peer_in[32];    /* a short name, without a malloc()/free() per send */
    size_t dl_len;
    const nxl_backend_t *dl_backend;
    uint64_t dl_set_us;     /* when nxl_future_set_deadline() set it (0: not) */
    bool cancel_grace;      /* canceled, and on the deadlines list until its grace ends
                             * (deadline_us): then its transport is asked to abort */
    TAILQ_ENTRY(nxl_future) tlink;  /* the agent's deadlines, soonest first */
};
TAILQ_HEAD(nxli_fq, nxl_future);

/* one posted transport operation */
struct nxlt_op {
    nxl_agent_t *agent;
    nxl_future_t *future;   /* NULL once canceled */
    nxl_backend_t *backend;
    void *priv;
    /* inside the transport call that starts it (post, notif_send): a report
     * made there is held until the call returned, and dropped when the
     * call failed (an error return starts nothing) */
    bool in_call;
    bool reported;
    unsigned deadline_ms;   /* of the post that made it (0: none): nxlt_op_deadline_ms */
    nxl_status_t early_st;
    char *early_why;
    struct nxli_relay *relay; /* the notification the engine sends after it (relay.c) */
    LIST_ENTRY(nxlt_op) link;
};

/* Futures and ops of an agent in the default mode, recycled: the steady
 * state of post, completion, delivery and release allocates nothing. The
 * pool outlives its agent while futures the application still holds
 * (rule 4) count in live: those are then freed with free(), the last one
 * freeing the pool. A threaded agent has none (its futures and ops may be
 * made and dropped on several threads): plain calloc() and free(). */
#define NXLI_POOL_MAX 512 /* entries of each list kept for reuse */
/* a spare (freed) future or op: its memory holds the link to the next */
typedef struct nxli_spare {
    struct nxli_spare *next;
} nxli_spare_t;
typedef struct nxli_spares {
    nxli_spare_t *first;
    unsigned n;
} nxli_spares_t;
typedef struct nxli_pool {
    bool open;              /* its agent is alive */
    size_t live;            /* futures taken from it, not freed yet */
    nxli_spares_t futures;
    nxli_spares_t ops;
} nxli_pool_t;

/* ---- prepared lists and transfers */
typedef struct nxli_pent {
    uintptr_t addr;
    size_t len;
    void *region;           /* nxli_region_t* (local) or nxli_rregion_t* (remote) */
} nxli_pent_t;

/* One strided list of nxl_prep_strided(), checked: element k of it (k <
 * n) lies at base + (k / count) * ostride + (k % count) * stride. */
typedef struct nxli_srun {
    uintptr_t base;
    size_t len, stride, count, ostride, ocount;
    size_t first;           /* index of its element 0 in the prepared list */
    size_t n;               /* its elements: count * ocount */
    void *region;           /* as nxli_pent_t's: the region holding all of it */
} nxli_srun_t;

struct nxl_prepped {
    nxl_agent_t *agent;
    nxli_remote_t *remote;  /* NULL: local */
    nxl_mem_t type;
    size_t n;
    nxli_pent_t *e;         /* every element; NULL for a strided list: */
    nxli_srun_t *runs;      /* its runs, the elements made from them when used */
    size_t nruns;
    nxli_region_t **lregs;  /* local regions referenced (deduplicated) */
    size_t nlregs;
    LIST_ENTRY(nxl_prepped) link;
};

struct nxl_xfer {
    nxl_agent_t *agent;
    nxl_op_t op;
    nxl_mem_t ltype, rtype;
    nxl_backend_t *backend;
    nxli_remote_t *remote;
    nxli_region_t **lregs;  /* local regions kept alive while the transfer lives */
    size_t nlregs;
    nxlt_iov_t *iov;        /* NULL for a strided transfer: */
    nxli_srun_t *lruns, *rruns; /* the elements made from these at each post */
    size_t nlruns, nrruns;
    size_t n;
    uint64_t bytes;         /* sum of the elements' lengths */
    void *notif;
    size_t notif_len;
    nxl_future_t *active;
    nxl_status_t last;
    bool posted;
    size_t gone_seen;       /* remote->ngone when its elements were last checked */
    unsigned deadline_ms;   /* of each post (0: none); atomic: set from any thread */
    LIST_ENTRY(nxl_xfer) link;
};

/* ---- notifications waiting for nxl_notifs_drain or a callback: one
 * block each, the sender's name and the message in buf; delivered ones are
 * kept for the next (NXLI_NOTIF_SPARES of at most NXLI_NOTIF_KEEP bytes) */
#define NXLI_NOTIF_SPARES 64
#define NXLI_NOTIF_KEEP 512
typedef struct nxli_notif {
    char *from;
    void *msg;
    size_t len;
    size_t cap;             /* bytes of buf */
    STAILQ_ENTRY(nxli_notif) link;
    char buf[];
} nxli_notif_t;

struct nxli_exchange;

/* ---- the agent */
#define NXLI_SPARES 32           /* large arrays an agent keeps for reuse: */
/* 4 in the default mode; a threaded agent serves many threads' prepared
 * lists and transfers at once, each with its arrays */
#define NXLI_SPARES_USED(a) ((a)->thr ? NXLI_SPARES : 4)
#define NXLI_SPARE_MIN (64 * 1024) /* smaller ones go back to malloc at once */

struct nxl_agent {
    char *name;
    struct event_base *base; /* the loop's libevent base; NULL on NXL_LOOP_FD */
    nxli_loop_t *loop;       /* every watch and timer (loop.h) */
    int loop_kind;           /* nxl_loop_kind_t */
    char *adapter;           /* nxl_agent_attach()'s who */
    int loop_depth;         /* >0 while inside the reactor through our calls */
    int cb_depth;           /* >0 while a user callback runs */
    bool stopping;
    nxl_log_level_t log_level;
    nxl_log_cb log_cb;
    void *log_arg;
    unsigned busy_poll_us;
    unsigned io_timeout_ms;
    char err[NXLI_ERR_MAX];

    nxl_backend_t *backends[NXLI_MAX_BACKENDS];
    int nbackends;

    nxli_rtab_t regions[NXL_MEM_TYPES];
    nxli_stab_t slices;     /* the registration cache's slices (mem.c) */
    bool reg_cache;         /* NXL_REG_CACHE, on unless "0" */
    bool auto_register;     /* every local DRAM list registers on first use */
    size_t auto_limit;      /* bytes the lazy registrations may hold */
    bool auto_events;       /* UCX's memory events tried ($NXL_AUTO_REGISTER_EVENTS not "0") */
    struct nxli_lazy *lazy; /* their cache (lazyreg.c), made on first use */
    uint64_t mem_gen;       /* bumped on every (de)registration */

    LIST_HEAD(, nxli_remote) remotes;
    nxli_remote_t *self;    /* loopback view of ourselves */
    uint64_t self_gen;

    LIST_HEAD(, nxl_xfer) xfers;
    LIST_HEAD(, nxl_kv_xfer) kv_xfers; /* KV transfers not released (kvlayout.c) */
    LIST_HEAD(, nxl_prepped) prepped;
    LIST_HEAD(, nxlt_op) ops;
    struct nxli_fq pending;
    struct nxli_fq deliver;
    struct nxli_fq deadlines;      /* transfers with a deadline, soonest first (tlink) */
    nxlt_timer_t *ev_deadline;     /* one timer for them all: made at the first, armed while any */
    nxlt_timer_t *ev_deliver;      /* activated: this turn's deliveries */
    nxlt_timer_t *ev_deliver_next; /* a zero timer: the next turn's deliveries */
    bool delivering;               /* inside a turn's deliveries */
    bool draining;                 /* deliver_cb runs the notification callbacks... */
    bool drain_queued;             /* ... and they completed something: delivered after them */
    bool direct;                   /* a transport's progress holds the delivery (nxlt_deliver_hold) */
    bool direct_due;               /* ... and something waits for it: delivered at the release */

    nxl_notif_cb notif_cb;
    void *notif_arg;
    STAILQ_HEAD(, nxli_notif) notifs;
    STAILQ_HEAD(, nxli_notif) notif_spares; /* delivered, for reuse */
    unsigned nnotif_spares;
    nxli_pool_t *pool;          /* recycled futures and ops (default mode) */

    /* large descriptor arrays of released prepared lists and transfers,
     * kept for the next ones: fresh pages cost a page fault each */
    void *spare[NXLI_SPARES];
    size_t spare_cap[NXLI_SPARES];

    /* telemetry of the agent (transfers are counted per backend) */
    struct {
        uint64_t notifs_sent, notifs_failed, notifs_received;
        uint64_t md_requests, md_failed, md_served, md_loaded, peers_lost;
        uint64_t notifs_dropped, md_refused, md_auth_refused;
        uint64_t deliveries_direct;
    } st;
    /* bounds (nxl_agent_config_t) */
    size_t max_frame, max_clients, max_clients_per_host, max_peers, max_notifs;
    size_t nnotifs;             /* queued in notifs */
    size_t npeers;              /* remotes in the table (not self) */
    struct nxli_metrics *metrics; /* the /metrics server, when configured */
    struct nxli_auth *auth;     /* the shared secret, when configured */
    struct nxli_tls *tls;       /* TLS for the metadata exchange, when configured */

    struct nxli_exchange *ex;   /* metadata exchange over TCP */
    struct etcd *etcd;          /* metadata discovery through etcd */
    char *etcd_endpoints;
    char *etcd_prefix;
    unsigned etcd_ttl_s;
    uint16_t listen_port;
    struct nxli_thr *thr;       /* threaded mode: the reactor thread (mt/); NULL by default */
    bool acting;                /* threaded: a foreign thread runs a call for the sleeping reactor */
    struct nxli_fq acted;       /* ... and these futures completed in it (future.c) */
    LIST_HEAD(, nxl_future) tfutures; /* threaded mode: every live future (mt) */
    /* peer lifecycle (peer.c) */
    uint64_t boot;              /* this incarnation's number, in its metadata */
    bool peer_recovery;         /* nxl_agent_config_t.peer_recovery */
    LIST_HEAD(, nxli_peer) peers;
    STAILQ_HEAD(, nxli_pevent) pevents; /* waiting for delivery */
    nxl_peer_cb peer_cb;
    void *peer_arg;
    nxli_suspect_t *suspects;   /* peers to mark DOWN on the reactor */
    nxl_future_t *unposted;     /* a post the transport refused: not failed by the loss */
};

/* util.c */
void nxli_err(nxl_agent_t *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void nxli_verr(nxl_agent_t *a, const char *fmt, va_list ap);
void nxli_log(nxl_agent_t *a, nxl_log_level_t lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void nxli_vlog(nxl_agent_t *a, nxl_log_level_t lvl, const char *fmt, va_list ap);
nxl_log_level_t nxli_log_level_env(void);
char *nxli_strdup(const char *s);
char *nxli_sprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void nxli_set_create_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
uint64_t nxli_now_us(void);
nxlt_http_t *nxli_http_new(nxl_agent_t *a, nxlt_http_done_fn done, void *arg);

/* NULL, or why @p buf holds a byte JSON forbids raw (md.c) */
const char *nxli_json_bad_control(const void *buf, size_t len, size_t *at);

/* future.c */
nxl_future_t *nxli_future_new(nxl_agent_t *a, nxli_fkind_t kind, nxl_done_cb cb, void *arg);
/* nxli_future_new in two steps (a post queued by a foreign thread) */
nxl_future_t *nxli_future_alloc(nxl_agent_t *a, nxli_fkind_t kind, nxl_done_cb cb, void *arg);
void nxli_future_attach(nxl_future_t *f);
void nxli_future_unalloc(nxl_future_t *f);
/* hands the caller's reference out, or drops it */
void nxli_future_give(nxl_future_t *f, nxl_future_t **out);
void nxli_future_complete(nxl_future_t *f, nxl_status_t st, const char *why);
void nxli_future_discard(nxl_future_t *f); /* a start that failed: no callbacks */
void nxli_deliver(nxl_agent_t *a);
void nxli_deliver_turn(nxl_agent_t *a);
/* wakes the delivery of what was just queued (a future, a notification,
 * a peer event): the delivery event, or the release of a transport's
 * hold (nxlt_deliver_hold: busy polling delivers right after the progress) */
static inline void nxli_deliver_wake(nxl_agent_t *a)
{
    if (a->direct)
        a->direct_due = true;
    else
        nxlt_timer_activate(a->ev_deliver);
}

/* threaded, a foreign thread acting for the reactor (mt/act.c): settles
 * what its call completed that has no callbacks; true when the rest is
 * left to the reactor's delivery */
bool nxli_deliver_acted(nxl_agent_t *a);
void nxli_futures_cancel_all(nxl_agent_t *a);
/* a transfer's deadline: f (pending, on the reactor) is canceled with
 * NXL_ERR_TIMEOUT at @p due_us unless it completed before; the agent's
 * deadline timer made first by nxli_deadline_timer() (NXL_ERR_BACKEND and
 * a sentence when the loop could not make it) */
nxl_status_t nxli_deadline_timer(nxl_agent_t *a);
void nxli_deadline_add(nxl_future_t *f, uint64_t due_us);
/* a canceled future's completion: NXL_ERR_TIMEOUT when its deadline canceled it */
void nxli_future_complete_canceled(nxl_future_t *f);
/* at the end of teardown: spares freed, futures still held freed alone later */
void nxli_pool_close(nxl_agent_t *a);
nxlt_op_t *nxli_op_new(nxl_agent_t *a, nxl_backend_t *b, nxl_future_t *f);
/* a future of @p kind in *fp and an op of @p b that holds it, for a call that
 * starts one operation; NULL (nothing made) when out of memory */
nxlt_op_t *nxli_op_new_future(nxl_agent_t *a, nxl_backend_t *b, nxli_fkind_t kind, nxl_done_cb cb,
                              void *arg, nxl_future_t **fp);
void nxli_op_free(nxlt_op_t *op);
/* Ends the transport call that started op, which returned st: on success a
 * report made inside the call takes effect now (delivered on the next
 * turn); on failure the op is freed and its future discarded. */
nxl_status_t nxli_op_call_end(nxlt_op_t *op, nxl_status_t st);

/* mem.c */
nxli_region_t *nxli_region_find(nxl_agent_t *a, nxl_mem_t t, uint64_t dev, uintptr_t addr,
                                size_t len);
void nxli_region_put(nxl_agent_t *a, nxli_region_t *r);
void nxli_mem_cleanup(nxl_agent_t *a);
/* lazy registration (lazyreg.c) */
nxl_status_t nxli_lazy_prepare(nxl_agent_t *a, const char *fn, const nxl_desc_t *descs,
                               size_t n);
nxli_region_t *nxli_lazy_find(nxl_agent_t *a, uint64_t dev, uintptr_t addr, size_t len);
void nxli_lazy_stats(nxl_agent_t *a, nxl_stats_t *out);
void nxli_lazy_cleanup(nxl_agent_t *a);
nxl_status_t nxli_region_key(nxl_agent_t *a, nxli_region_t *r, int bi, const void **key,
                             size_t *len);

/* md.c */
nxli_remote_t *nxli_remote_find(nxl_agent_t *a, const char *name);
nxli_remote_t *nxli_remote_get(nxl_agent_t *a, const char *name); /* incl. self; takes a ref */
void nxli_remote_put(nxli_remote_t *r);
void nxli_remote_cleanup(nxl_agent_t *a);
/* marks the region of r revoked (exact match): 1; 0 when r has no such
 * region; -1 out of memory */
int nxli_rregion_revoke(nxli_remote_t *r, nxl_mem_t t, uint64_t dev, uintptr_t addr, size_t len);
const nxli_rregion_t *nxli_rregion_find(const nxli_remote_t *r, nxl_mem_t t, uint64_t dev,
                                        uintptr_t addr, size_t len);
/* the region of r labelled @p label at place @p at, of type t on dev (NULL: none) */
const nxli_rregion_t *nxli_rregion_labelled(const nxli_remote_t *r, nxl_mem_t t, uint64_t dev,
                                            const char *label, size_t at);
nxl_status_t nxli_md_label(nxl_agent_t *a, const char *call, const char *label, nxl_mem_t type,
                           const nxl_desc_t *descs, size_t n);
nxl_status_t nxli_md_load_ex(nxl_agent_t *a, const void *blob, size_t len, bool self,
                             nxli_remote_t **out, char *name_out, size_t cap);

/* xfer.c */
/* a post from a foreign thread of a threaded agent, queued (mt/rpc.c) */
nxl_status_t nxli_xfer_post_claim(nxl_xfer_t *x, nxl_done_cb cb, void *arg, nxl_future_t **out,
                                  const char **why);
nxl_status_t nxli_xfer_post_claim_unlocked(nxl_xfer_t *x, nxl_done_cb cb, void *arg,
                                           nxl_future_t **out, const char **why);
void nxli_xfer_post_unclaim(nxl_xfer_t *x, nxl_future_t *f);
void nxli_xfer_post_queued(nxl_xfer_t *x, nxl_future_t *f, bool keep);
void nxli_xfer_post_refused(nxl_xfer_t *x, nxl_future_t *f, bool keep);
void nxli_xfers_cleanup(nxl_agent_t *a);
/* releases the KV transfers the application left (after the futures were canceled) */
void nxli_kv_cleanup(nxl_agent_t *a);

/* Checks one strided list (nxl_prep_strided): its span, first byte to
 * last, into *span and its elements into *nelem; false with the reason in
 * why (a phrase that follows "list N") */
bool nxli_strided_check(const nxl_strided_t *d, nxl_mem_t type, size_t *span, size_t *nelem,
                        char *why, size_t cap);

/* exchange.c */
nxl_status_t nxli_exchange_listen(nxl_agent_t *a, const char *addr, uint16_t port);
struct sockaddr_storage;
void nxli_exchange_serve(nxl_agent_t *a, int fd, const struct sockaddr_storage *peer);
void nxli_exchange_cleanup(nxl_agent_t *a);

/* etcd.c */
void nxli_etcd_cleanup(nxl_agent_t *a, bool unpublish);
/* etcd's JSON gateway answers, parsed into plain structs before anything
 * acts on them (no network needed: the fuzzers call these) */
typedef enum {
    NXLI_ETCD_RANGE,      /* kv/range: header, kvs */
    NXLI_ETCD_PUT,        /* kv/put, kv/deleterange, lease/revoke: header */
    NXLI_ETCD_GRANT,      /* lease/grant: ID, TTL */
    NXLI_ETCD_KEEPALIVE,  /* lease/keepalive: result.TTL */
    NXLI_ETCD_WATCH,      /* one line of a watch stream: result.{header,canceled,events} */
} nxli_etcd_kind_t;
typedef struct nxli_etcd_kv {
    char *key;            /* decoded, NUL-terminated, holds no NUL */
    char *value;          /* etcd's base64 of the value; NULL: none, or a DELETE */
    int64_t mod_rev;
    bool del;
} nxli_etcd_kv_t;
typedef struct nxli_etcd_resp {
    bool has_header, canceled;
    int64_t revision;     /* header.revision: 0 <= r < 2^62 */
    int64_t ttl;          /* grant, keepalive (0: the lease is gone) */
    char lease[24];       /* grant: the lease ID */
    size_t n;
    nxli_etcd_kv_t *kv;   /* range: kvs; watch: events (entries without a usable key skipped) */
} nxli_etcd_resp_t;
/* 0, or -1 with why (not JSON, etcd's error message, malformed) */
int nxli_etcd_parse(nxli_etcd_kind_t kind, const char *buf, size_t len, nxli_etcd_resp_t *r,
                    char *why, size_t cap);
void nxli_etcd_resp_free(nxli_etcd_resp_t *r);
/* a watch stream: line() for each whole line of buf; the rest moves to the
 * front, its length returned. *scanned: how much of the front is known to
 * hold no newline (the rest of the call before), so that a long line
 * arriving in pieces is scanned once, not once per piece */
size_t nxli_etcd_lines(char *buf, size_t len, size_t *scanned,
                       void (*line)(void *arg, const char *l, size_t n), void *arg);
/* A value to publish at key: with a secret, signed (NXLI_ETCD_SIG, the
 * trailer, the blob); without, the blob. malloc'd, or NULL. */
void *nxli_etcd_seal(nxl_agent_t *a, const char *key, const void *blob, size_t len,
                     size_t *out_len);
/* A value read from key (etcd's base64 of it) opened: decoded and, with a
 * secret, its signature checked, and its timestamp against *last_ts (the
 * newest accepted from this key before, updated) — before a byte of it is
 * parsed. NXL_SUCCESS with *blob (malloc'd); NXL_ERR_NOT_ALLOWED (unsigned,
 * tampered, another key, older than one accepted before) or
 * NXL_ERR_MISMATCH (not base64), with why. */
nxl_status_t nxli_etcd_open(nxl_agent_t *a, const char *key, const char *b64, uint64_t *last_ts,
                            void **blob, size_t *len, char *why, size_t cap);
#define NXLI_ETCD_SIG "\0NXS\1" /* a signed value's first 5 bytes (metadata starts with '{') */
#define NXLI_ETCD_SIG_LEN 5

/* a peer is gone: fail transfers in flight to it, forget it */
void nxli_remote_lost(nxl_agent_t *a, const char *name, const char *why);
/* forgets a peer (nxl_md_invalidate); by_app: the application's own call */
nxl_status_t nxli_md_invalidate(nxl_agent_t *a, const char *remote, bool by_app);

/* peer.c: the peer lifecycle */
void nxli_peer_init(nxl_agent_t *a);
void nxli_peer_cleanup(nxl_agent_t *a);
/* events: delivered by the agent's delivery (deliver_cb) */
void nxli_peer_deliver(nxl_agent_t *a);
/* a transfer to r failed with NXL_ERR_REMOTE_DISCONNECT: r is lost (on a
 * thread acting for the reactor, by the reactor's next delivery) */
void nxli_peer_unreachable(nxl_agent_t *a, nxli_remote_t *r, const char *why);
/* r (name, boot) was loaded: replacing old (NULL: none), or merged into
 * it (merged); changed: its regions differ from what was known */
void nxli_peer_loaded(nxl_agent_t *a, nxli_remote_t *r, bool had_old, bool new_inc,
                      bool changed);
/* the peer is lost (its remote already unlinked) */
void nxli_peer_down(nxl_agent_t *a, const char *name, const char *why, bool by_app);
/* where nxl_md_fetch (host, port) or etcd (host NULL) found it */
void nxli_peer_origin(nxl_agent_t *a, const char *name, const char *host, uint16_t port);
/* the application invalidates a peer lost (down, not by its own
 * invalidation): given up, its recovery stops; false when it is not one */
bool nxli_peer_forget(nxl_agent_t *a, const char *name);
/* is the peer down, lost rather than invalidated by the application? */
bool nxli_peer_lost(nxl_agent_t *a, const char *name);
/* etcd: is the peer down and waited for (its new metadata is loaded)? */
bool nxli_peer_awaited(nxl_agent_t *a, const char *name);
/* re-binding to the peer's current incarnation: NXL_SUCCESS (bound, or
 * nothing to do); else the status with its sentence in the agent's error */
nxl_status_t nxli_xfer_rebind(nxl_xfer_t *x, const char *call);
nxl_status_t nxli_prepped_rebind(nxl_prepped_t *p, const char *call);
void nxli_future_abort(nxl_future_t *f, nxl_status_t st, const char *why);

/* auth.c: HMAC-SHA256 trailers on metadata frames */
#define NXLI_AUTH_NONCE 16
#define NXLI_AUTH_MAC 32
#define NXLI_AUTH_TRAILER (8 + NXLI_AUTH_NONCE + NXLI_AUTH_MAC)
#define NXLI_AUTH_SKEW_S 60
nxl_status_t nxli_auth_init(nxl_agent_t *a, const char *secret, const char *key_file);
void nxli_auth_free(nxl_agent_t *a);
/* writes the trailer for header+body; nonce NULL: a fresh one. 0 or -1 */
int nxli_auth_sign(nxl_agent_t *a, const unsigned char *hdr, size_t hl, const void *body,
                   size_t bl, const unsigned char *nonce, unsigned char *trailer);
/* 0 when the trailer verifies (a reply: carries expect_nonce; a request:
 * its nonce is new); -1 with the reason in why */
int nxli_auth_verify(nxl_agent_t *a, const unsigned char *hdr, size_t hl, const void *body,
                     size_t bl, const unsigned char *trailer, const unsigned char *expect_nonce,
                     char *why, size_t cap);
/* a stored value's trailer (etcd): 0 when its MAC verifies and its
 * timestamp (to *ts) is not ahead of this host's clock by more than the
 * skew; no nonce bookkeeping (a stored value is read again legitimately).
 * -1 with the reason in why */
int nxli_auth_check_stored(nxl_agent_t *a, const unsigned char *hdr, size_t hl, const void *body,
                           size_t bl, const unsigned char *trailer, uint64_t *ts, char *why,
                           size_t cap);

/* tls.c: TLS for the metadata exchange (OpenSSL sessions on stream.c's
 * connections) */
nxl_status_t nxli_tls_init(nxl_agent_t *a, const char *cert, const char *key, const char *ca);
void nxli_tls_free(nxl_agent_t *a);
struct ssl_st;
struct nxli_stream;
/* an OpenSSL session on fd, for nxli_stream_new(); NULL on failure (fd
 * left open) */
struct ssl_st *nxli_tls_ssl(nxl_agent_t *a, int fd);
/* why a TLS connection failed (OpenSSL's errors, the certificate check) */
void nxli_tls_why(const struct nxli_stream *s, char *buf, size_t cap);

/* stats.c */
void nxli_stats_settled(nxl_future_t *f);
nxl_status_t nxli_metrics_start(nxl_agent_t *a, const char *addr);
void nxli_metrics_cleanup(nxl_agent_t *a);

/* transports.c: built in, loaded from modules, or known but unusable */
typedef struct nxli_transport {
    const char *name;       /* "UCX"; an unusable module's file stem */
    const nxlt_ops_t *ops;  /* NULL when it cannot be used: see st, reason */
    nxl_status_t st;        /* NXL_ERR_NOT_FOUND or NXL_ERR_MISMATCH when ops is NULL */
    const char *path;       /* the module's file; NULL when built in */
    bool module_missing;    /* built as a module, none found */
    const char *id;         /* its configure name ("ucx") when module_missing */
    char reason[160];       /* why it cannot be used */
} nxli_transport_t;
/* Loads the modules on the first call (once per process, thread-safe). */
const nxli_transport_t *nxli_transports(size_t *n);
/* The transport of that name (any case), or NULL. */
const nxli_transport_t *nxli_transport_find(const char *name);
/* The folders searched for modules, for sentences. */
const char *nxli_transports_searched(void);
/* The transport's parameter table (NXLT_CAP_PARAMS), or NULL with *n 0. */
static inline const nxl_param_info_t *nxli_ops_params(const nxlt_ops_t *ops, size_t *n)
{
    *n = ops && (ops->caps & NXLT_CAP_PARAMS) && ops->params ? ops->nparams : 0;
    return *n ? ops->params : NULL;
}
/* relay.c: notifications of transfers over transports that carry none,
 * sent by the engine through another transport once the data landed */
nxl_backend_t *nxli_relay_backend(nxl_agent_t *a, const nxl_backend_t *data,
                                  const nxli_remote_t *r);
nxl_status_t nxli_relay_check(nxl_agent_t *a, const char *call, const nxl_backend_t *b,
                              const nxli_remote_t *r);
nxl_status_t nxli_relay_attach(nxlt_op_t *op, nxli_remote_t *r, const void *msg, size_t len);
bool nxli_relay_done(nxlt_op_t *op, nxl_status_t st, const char *why);
void nxli_relay_free(nxlt_op_t *op);


#endif
