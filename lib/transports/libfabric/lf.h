/* SPDX-License-Identifier: BSD-3-Clause */
/* The libfabric transport: DRAM to and from other agents (and within the
 * agent), through one reliable-datagram (FI_EP_RDM) endpoint per agent,
 * driven by the reactor.
 *
 * Progress. One completion queue serves sends, receives and RMA. When the
 * provider gives the CQ a wait fd (FI_WAIT_FD, fi_control(FI_GETWAIT)),
 * the fd sits in the reactor: on wake-up the CQ is read until empty, then
 * fi_trywait() says whether it is safe to sleep; when it is not, progress
 * continues from a zero-delay timer on the next turn (a bounded number of
 * times), so the loop stays fair and an idle agent sleeps. Providers with
 * no wait fd (shm), or one that never stops being readable (net), are
 * progressed from a reactor timer instead: often while something is in
 * flight, backing off to `poll_max` while idle. The agent's busy-poll
 * window spins on the CQ after activity in both modes.
 *
 * A transfer posts one fi_writemsg/fi_readmsg per element (split where an
 * element exceeds the provider's max_msg_size), each with FI_COMPLETION;
 * writes carry FI_DELIVERY_COMPLETE when the provider offers it, so that a
 * write's completion means its data is at the target. The transfer is done
 * when every element completed; only then is its notification sent, with
 * fi_send, into receive buffers the target keeps pre-posted. When the
 * provider refuses a post (-FI_EAGAIN) or the transmit queue is full, the
 * rest of the transfer waits in a queue and resumes as completions free
 * room.
 *
 * Deregistration. A region the application gives up is revoked at every
 * peer this agent is connected to, with a message of the transport's own
 * ('R', wire.h) sent in order with what is posted to that peer: the peer's
 * engine refuses posts into it from then on, which the one-message WRITE
 * (checked only against this agent's registrations) relies on.
 *
 * Failure. Error completions fail their transfer with fi_cq_strerror's
 * text; connection errors fail every operation to that peer at once. A
 * peer whose operations stop completing for `stall_timeout` is declared
 * lost (a cut TCP link says nothing, nor a dead shm peer whose process is
 * not watched: shm.c watches an shm peer's process, and keeps posts out of
 * the region of a peer that died holding its lock). Reports happen
 * only from the reactor's callbacks, never inside a call of the engine:
 * libfabric reports failures as completions, and the CQ is read only from
 * the loop. */
#ifndef NXL_LF_H
#define NXL_LF_H

#include "config.h"
#include <nxl/transport.h>

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <stddef.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <poll.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <unistd.h>
#include <dlfcn.h>
#include <pthread.h>

#include "../common/netop.h" /* ops in flight, reported once, the stall timeout */
#include "../common/amwrite.h" /* the one-message WRITE's body */
#include "../common/thp.h" /* registered DRAM onto 2 MiB pages */
#include "wire.h" /* conn info and keys as they travel */

/* libfabric, as loaded (util.c: nxl_lf_loaded) */
extern struct nxl_lf_sym {
    int (*getinfo)(uint32_t, const char *, const char *, uint64_t, const struct fi_info *,
                   struct fi_info **);
    void (*freeinfo)(struct fi_info *);
    struct fi_info *(*dupinfo)(const struct fi_info *);
    int (*fabric)(struct fi_fabric_attr *, struct fid_fabric **, void *);
    const char *(*strerror)(int);
    uint32_t (*version)(void);
    char why[200];
    int ok;
} nxl_lf_sym;

#define fi_getinfo(...) nxl_lf_sym.getinfo(__VA_ARGS__)
#define fi_freeinfo(i) nxl_lf_sym.freeinfo(i)
#define fi_dupinfo(i) nxl_lf_sym.dupinfo(i)
#define fi_fabric(...) nxl_lf_sym.fabric(__VA_ARGS__)
#define fi_strerror(e) nxl_lf_sym.strerror(e)
#define fi_version() nxl_lf_sym.version()
#define lf_allocinfo() nxl_lf_sym.dupinfo(NULL)

#define LF_API_VERSION FI_VERSION(1, 10)
#define LF_CAPS                                                                                    \
    (FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_SEND | FI_RECV)
/* the MR modes nxl supports; FI_MR_RAW (keys larger than 64 bits) and
 * FI_MR_HMEM (device memory) are not among them */
#define LF_MR_MODES                                                                                \
    (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT)

#define NRX 32                                /* receive buffers kept posted */
#define AMW_MAX 16384                         /* a one-message WRITE: most data it carries */
/* ... by default (am_write_max): none. Its op completes when its send does,
 * before the target has copied the data, and a WRITE must complete only
 * once its bytes are in the target's memory; an acknowledgement would need
 * the target to reach the initiator, which it may never have loaded */
#define AMW_DEFAULT 0
#define AMW_ELEMS 64                          /* ... and most elements */
/* a notification: [u16 name length][name][message]; a WRITE with its
 * notification in one message: [u8 'W'][u8 name length][name][u32 message
 * length][message][u32 n][n x (u64 address, u32 length)][data]; a region
 * revoked: [u8 'R'][u8 name length][name]... (wire.h) */
#define RXSZ (2 + 255 + 4 + NXL_NOTIF_MAX + 4 + 12 * AMW_ELEMS + AMW_MAX)
#define AMW_TAG 'W'
#define CI_AMW 1                              /* connection info flag: takes 'W' messages */
#define CI_REVOKE 2                           /* ... tells its peers of deregistrations (wire.h) */
#define NOTIF_CAP 64                          /* notification sends in flight */
#define CQ_BATCH 32
#define DRAIN_BATCHES 64                      /* CQ reads per turn before the loop gets one */
#define TRY_ROUNDS 16                         /* fi_trywait refusals before yielding */
#define WATCH_MS 100
#define SPIN_SLICE_US 50
#define POLL_MIN_US 1000                      /* timer mode: after activity (the loop's resolution) */
#define POLL_ACTIVE_MAX_US 1000               /* timer mode, something in flight */
#define POLL_MAX_MS 250                       /* timer mode, idle, by default */
#define POLL_MAX_BELL_MS 1000                 /* the same, when this agent has a doorbell */
#define RING_US 50                            /* a peer's doorbell rings at most this often */
#define BELL_WINDOW_US (4 * RING_US)          /* then both poll every loop turn this long */
#define RETRY_US 1000                         /* a post refused with nothing in flight */
#define DESTROY_WAIT_MS 2000                  /* teardown: longest wait for the provider */
#define PROBE_AFTER_US 50000                  /* posts refused this long: probe the peer's address */
#define PROBE_EVERY_US 250000                 /* ... and again at most this often */
#define PROBE_WAIT_S 2                        /* a probe's connect given up (no conclusion) */
#define SHUT_HOLD_US 1000000                  /* sockets: posts to an address whose connections
                                               * were shut wait at most this long for the
                                               * aborted operations (conn.c) */
#define LF_PEER_CLOSED "the agent, of this process, was destroyed (its endpoint closed)"
#define LF_PEER_EXITED "its process exited"
#define SHM_LOCK_WAIT_US 2000                 /* shm: a peer's region lock held longer: its
                                               * holder is taken for dead (shm.c) */

enum { CTX_OP = 0x6f70, CTX_RX = 0x7278 };

typedef struct lf_ctx {
    uint32_t kind;
} lf_ctx_t;

typedef struct lf_state lf_t;
typedef struct lf_conn lf_conn_t;

/* one piece to post: what an element becomes once it has to wait */
typedef struct lf_seg {
    void *laddr;
    void *desc;
    uint64_t raddr;         /* as the provider addresses it: virtual address or offset */
    uint64_t key;
    size_t len;
} lf_seg_t;

typedef struct lf_rx {
    lf_ctx_t c;
    unsigned char *buf;
    bool posted;
} lf_rx_t;

typedef struct lf_op {
    lf_ctx_t c;
    lf_t *u;
    nxlt_op_t *op;              /* NULL once reported to the engine */
    lf_conn_t *conn;
    bool is_xfer;
    nxl_op_t dir;
    /* elements: the engine's while inside post, a copy once queued */
    const nxlt_iov_t *iov;
    lf_seg_t *segs;
    size_t n, next, off;
    size_t posted, completed;   /* provider operations (elements, pieces, the notification) */
    int err;                    /* first error: a positive FI_* errno */
    char *errtxt;
    unsigned char *msg;         /* the notification, as sent */
    size_t msg_len;
    struct fid_mr *msg_mr;      /* FI_MR_LOCAL */
    bool want_notif, notif_posted, notif_counted;
    bool stopped;               /* post nothing more of it */
    bool queued;                /* on the wait queue */
    bool checkq;                /* on the check queue */
    bool side;                  /* the transport's own message (a revoke): no engine op */
    bool aborted;               /* its connection was closed at a deadline (conn.c): its
                                 * provider operations end in errors (rxm: canceled;
                                 * sockets: EIO), no disconnect */
    unsigned rail_pieces;       /* striped (rails.c): its pieces not done yet */
    nxlt_iov_t *rail_iov;       /* ... and its elements, kept to post a range again */
    size_t rail_n;
    LIST_ENTRY(lf_op) link;
    TAILQ_ENTRY(lf_op) wlink;
    TAILQ_ENTRY(lf_op) clink;
} lf_op_t;

/* One address vector entry per peer endpoint, shared by the connections
 * to it: shm 1.17 unmaps a peer's region when any one of two entries for
 * the same address is removed. */
typedef struct lf_addr {
    fi_addr_t fa;
    int refs;
    unsigned shut_left;         /* sockets: provider operations of the ops aborted at a deadline
                                 * (conn.c, sock_abort) not handed back yet; posts to the
                                 * address wait for them (hold_until_us) */
    /* shm, a peer in another process (shm.c): its region's lock, as
     * libfabric 1.17 lays the region out, once found in our mapping of it */
    long shm_pid;               /* 0: not such a peer, or libfabric not 1.17 */
    pthread_spinlock_t *shm_lock;
    uint64_t shm_look_us;       /* our mappings last searched for the region */
    bool shm_stuck;             /* the lock was held past SHM_LOCK_WAIT_US: not waited for again */
    size_t len;
    LIST_ENTRY(lf_addr) link;
    unsigned char name[];
} lf_addr_t;

struct lf_conn {
    lf_t *u;
    fi_addr_t addr;
    lf_addr_t *av_entry;        /* NULL: loopback */
    bool self;                  /* our own endpoint: loopback by memcpy */
    char *name;
    int refs;                   /* the engine's, plus one per op */
    bool failed, stalled, unloaded;
    bool peer_closed;           /* an agent of this process whose shm endpoint is gone */
    int pidfd;                  /* shm: its process, proved to be the peer, or -1 (shm.c) */
    nxlt_io_t *ev_pid;          /* ... watched in the loop */
    int fail_deferred;          /* a post was refused for a lost peer: fail it from the loop */
    int err;
    char *why;
    nxl_netop_conn_t net;       /* ops not reported yet, and the last completion (or first
                                 * post) of one */
    struct sockaddr_un bell;    /* the peer's doorbell (timer mode), if it has one */
    socklen_t bell_len;         /* 0: none, or it could not be rung */
    uint64_t rung_us;           /* when it was last rung */
    uint64_t heard_us;          /* when a notification of it came while we polled often */
    uint64_t hold_until_us;     /* post nothing before (rxm_hold); 0: no hold */
    unsigned tx_out;            /* provider operations to it in flight */
    uint64_t refused_us;        /* posts to it refused (-FI_EAGAIN) with none in flight since */
    uint64_t probed_us;         /* its address last probed (probe_start) */
    nxlt_io_t *probe_io;        /* a probe under way: a connect to its address ... */
    nxlt_timer_t *probe_tm;     /* ... given PROBE_WAIT_S to answer */
    int probe_fd;               /* its socket */
    bool am_write;              /* it takes a WRITE with its notification as one message */
    bool revokes;               /* it tells this agent of the regions it deregisters */
    unsigned nrails;            /* rails to it (rails.c; 0: none, else at least 2) */
    unsigned rail_live;         /* a bit per rail not taken out */
    unsigned rail_failed;       /* a bit per rail whose post failed: taken out from the loop */
    fi_addr_t rail_addr[LF_RAILS_MAX];
    struct lf_conn_rails *rx;   /* rails.c: the peer's rail addresses, retries (NULL: none) */
    LIST_ENTRY(lf_conn) link;
};

/* A peer address whose connection failed lately (rxm_hold) */
typedef struct lf_hold {
    uint64_t until_us;
    size_t len;
    LIST_ENTRY(lf_hold) link;
    unsigned char name[];
} lf_hold_t;

typedef struct lf_md {
    struct fid_mr *mr;
    void *desc;
    uint64_t key;
    uintptr_t base;
    size_t len;
    unsigned nrails;            /* registered in the rails' domains too (rails.c) */
    struct fid_mr *rail_mr[LF_RAILS_MAX];
    void *rail_desc[LF_RAILS_MAX];
    uint64_t rail_key[LF_RAILS_MAX];
} lf_md_t;

typedef struct lf_rkey {
    uint64_t key;
    uint64_t base;
    bool virt;
    unsigned nrails;            /* the peer's keys in its rails' domains */
    uint64_t rail_key[LF_RAILS_MAX];
} lf_rkey_t;

/* An endpoint's objects (NULL: not open), as an agent holds them and as a
 * retired shm endpoint keeps them (shm.c) */
typedef struct lf_fids {
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_cntr *rma_cntr;  /* timer mode: peers' writes and reads into our memory */
    struct fid_ep *ep;
    struct fid_mr *rx_mr;       /* the receive buffers' (rxmem) */
} lf_fids_t;

struct lf_state {
    nxlt_ctx_t *ctx;
    struct fi_info *info;
    lf_fids_t fids;
    uint64_t rma_seen;
    bool ep_closed;
    struct lf_shm_ep *shm_ep;   /* shm: this endpoint among the process's (shm_eps) */
    unsigned long shm_gen_seen; /* shm_gen when this agent last looked */
    unsigned char name[256];    /* our endpoint's address (fi_getname) */
    size_t name_len;
    char prov[64];
    uint32_t addr_format;
    /* memory registration */
    int thp;                    /* NXLT_THP_*: registered DRAM onto 2 MiB pages (mr.c) */
    nxlt_thp_t *thp_state;      /* ../common/thp.c, made on first use */
    bool mr_local, mr_virt, mr_prov_key, mr_endpoint;
    uint64_t next_key;
    size_t max_msg;
    size_t am_write_max;        /* one-message WRITEs up to this many bytes (0: never) */
    size_t amw_msg_max;         /* ... whose whole message is at most this long */
    bool dc;                    /* FI_DELIVERY_COMPLETE on writes */
    /* progress */
    int wait_fd;                /* -1: timer mode */
    const char *mode_why;
    nxlt_io_t *io_fd, *io_bell;
    nxlt_timer_t *tm_kick, *tm_watch, *tm_poll, *tm_retry;
    int bell_fd;                /* timer mode: our doorbell, a datagram socket; -1: none */
    char bell_name[48];         /* its abstract address (bell_name[0] == 0) */
    size_t bell_name_len;
    uint64_t busy_until_us;
    uint64_t poll_us, poll_max_us;
    nxl_netop_inst_t net;       /* ops not reported (inflight); hit: an op completed or a
                                 * notification came; stall_us */
    bool in_progress;
    bool quiescing;             /* teardown: post nothing more */
    /* operations */
    size_t tx_cap, tx_inflight, notif_inflight;
    LIST_HEAD(, lf_op) ops;
    TAILQ_HEAD(, lf_op) waitq;
    TAILQ_HEAD(, lf_op) checkq;
    LIST_HEAD(, lf_conn) conns;
    LIST_HEAD(, lf_addr) addrs;
    LIST_HEAD(, lf_hold) holds;
    uint64_t hold_us;           /* rxm: how long a failed peer's address is held (0: never) */
    bool can_abort;             /* rxm with FI_AV_REMOVE_CLEANUP: fi_av_remove closes the
                                 * connection to a peer and cancels its operations; sockets */
    bool abort_shut;            /* sockets: ... by shutdown() of its TCP connections to the
                                 * peer's address (conn.c, sock_abort) */
    bool deadline_due;          /* an op's deadline passed (nxl_lf_on_deadline) */
    /* receives */
    lf_rx_t rx[NRX];
    unsigned char *rxmem;
    void *rx_desc;
    unsigned rx_unposted;
    unsigned long ctx_less_errors;
    struct lf_rails *rails;     /* the rails parameter (rails.c); NULL: none */
    char desc[320];
};

typedef LIST_HEAD(lf_shm_list, lf_shm_ep) lf_shm_list_t;

/* util.c */
int nxl_lf_loaded(void);
bool nxl_lf_av_remove_cleanup(void);
const char *nxl_lf_me(const lf_t *u, size_t *len);
bool nxl_lf_post_disconnect(int err);
bool nxl_lf_is_disconnect(int err);
void nxl_lf_err_text(int err, const char *detail, char *out, size_t cap);
void nxl_lf_kick(lf_t *u);
void nxl_lf_watch_start(lf_t *u);
void nxl_lf_check_later(lf_op_t *o);
void nxl_lf_mr_mode_str(uint64_t m, char *buf, size_t cap);
/* closes those of an endpoint's objects that are open (NULL: not), the
 * endpoint first and the fabric last */
void nxl_lf_close_fids(const lf_fids_t *f);

/* shm.c */
bool nxl_lf_shm_name_closed(const unsigned char *name, size_t len);
bool nxl_lf_shm_register(lf_t *u);
void nxl_lf_shm_notice_closed(lf_t *u);
bool nxl_lf_shm_unregister(lf_t *u, lf_shm_list_t *reap);
void nxl_lf_shm_close_retired(lf_shm_list_t *reap);
void nxl_lf_shm_clear_stale(lf_t *u);
void nxl_lf_shm_watch_peer(lf_t *u, lf_conn_t *c, const unsigned char *name, size_t len);
bool nxl_lf_shm_lock_stuck(lf_conn_t *c);
void nxl_lf_shm_watch_end(lf_conn_t *c);

/* conn.c */
void nxl_lf_conn_put(lf_conn_t *c);
uint64_t nxl_lf_rxm_hold_us(const char *prov);
bool nxl_lf_hold_over(lf_conn_t *c);
nxl_status_t nxl_lf_conn_info(void *state, void **buf, size_t *len);
nxl_status_t nxl_lf_load_conn(void *state, const char *agent, const void *info, size_t len,
                              void **out);
void nxl_lf_unload_conn(void *state, void *conn);
void nxl_lf_post_refused(lf_conn_t *c);
void nxl_lf_probe_end(lf_conn_t *c);
void nxl_lf_probe_start(lf_conn_t *c);
void nxl_lf_conn_fail(lf_conn_t *c, int err, const char *text, bool stalled);
void nxl_lf_shut_done(lf_op_t *o);

/* mr.c */
nxl_status_t nxl_lf_mr_reg(lf_t *u, void *addr, size_t len, uint64_t access, struct fid_mr **mr,
                           uint64_t *key, const char *what);
nxl_status_t nxl_lf_reg(void *state, nxl_mem_t type, const nxl_desc_t *d, void **out);
void nxl_lf_dereg(void *state, void *md);
nxl_status_t nxl_lf_pack_key(void *state, void *md, void **buf, size_t *len);
nxl_status_t nxl_lf_load_key(void *state, void *conn, const void *buf, size_t len, void **rkey);
void nxl_lf_unload_key(void *state, void *rkey);

/* op.c */
void nxl_lf_op_report(lf_op_t *o, nxl_status_t st, const char *why);
void nxl_lf_op_free(lf_op_t *o);
void nxl_lf_op_check(lf_op_t *o);
void nxl_lf_on_deadline(void *state, nxlt_op_t *op);
void nxl_lf_deadlines(lf_t *u);
nxl_status_t nxl_lf_try_post(lf_op_t *o, bool first);
void nxl_lf_enqueue(lf_op_t *o);
void nxl_lf_resume(lf_t *u);
bool nxl_lf_op_msg_attach(lf_op_t *o, unsigned char *b, size_t len);
lf_op_t *nxl_lf_op_new(lf_t *u, nxlt_op_t *op, lf_conn_t *c, const void *msg, size_t len,
                       bool with_notif);
void nxl_lf_op_start(lf_op_t *o);
void nxl_lf_op_unstart(lf_op_t *o);

/* ring.c */
void nxl_lf_ring(lf_conn_t *c);
void nxl_lf_bell_open(lf_t *u);

/* post.c */
nxl_status_t nxl_lf_post(void *state, nxlt_op_t *op, const nxlt_xfer_t *x);
nxl_status_t nxl_lf_notif_send(void *state, nxlt_op_t *op, void *conn, const void *msg,
                               size_t len);
void nxl_lf_revoke(void *state, nxl_mem_t type, const nxl_desc_t *d, void *md);

/* rx.c */
void nxl_lf_rx_post(lf_t *u, lf_rx_t *rx);
void nxl_lf_rx_repost_all(lf_t *u);
void nxl_lf_rx_done(lf_t *u, lf_rx_t *rx, size_t len);
nxl_status_t nxl_lf_rx_start(lf_t *u);

/* progress.c */
unsigned nxl_lf_drain(lf_t *u, bool *more);
void nxl_lf_progress(lf_t *u, bool woke);
void nxl_lf_on_fd(nxlt_io_t *io, int fd, unsigned ready, void *arg);
void nxl_lf_on_kick(nxlt_timer_t *t, void *arg);
void nxl_lf_on_poll(nxlt_timer_t *t, void *arg);
void nxl_lf_on_retry(nxlt_timer_t *t, void *arg);
void nxl_lf_on_watch(nxlt_timer_t *t, void *arg);

/* rails.c: one transfer striped over several endpoints to the same peer */
nxl_status_t nxl_lf_rails_open(lf_t *u, const nxl_param_t *params, size_t n);
void nxl_lf_rails_quiesce(lf_t *u);
void nxl_lf_rails_destroy(lf_t *u);
size_t nxl_lf_rails_info_len(lf_t *u);
void nxl_lf_rails_info_pack(lf_t *u, unsigned char *b);
void nxl_lf_rails_connect(lf_t *u, lf_conn_t *c, const lf_ci_t *ci);
void nxl_lf_rails_reg(lf_t *u, lf_md_t *m);
void nxl_lf_rails_dereg(lf_t *u, lf_md_t *m);
void nxl_lf_rails_key(lf_t *u, lf_md_t *m, lf_wkey_t *w);
void nxl_lf_rails_load_key(lf_conn_t *c, const lf_wkey_t *w, lf_rkey_t *k);
int nxl_lf_rails_post(lf_t *u, nxlt_op_t *op, lf_conn_t *c, const nxlt_xfer_t *x);
void nxl_lf_rails_abort(lf_t *u, lf_addr_t *e);

/* info.c */
int nxl_lf_probe(char *why, size_t cap);
struct fi_info *nxl_lf_base_hints(const char *prov, const char *domain);
nxl_status_t nxl_lf_pick(nxlt_ctx_t *ctx, const char *prov, const char *domain, const char *iface,
                         bool no_dc, struct fi_info **out, bool *dc);

#endif
