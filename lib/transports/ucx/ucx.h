/* SPDX-License-Identifier: BSD-3-Clause */
/* The UCX transport: DRAM to and from other agents and within the agent,
 * through one UCP worker driven by the reactor.
 *
 * Progress: the worker's event fd is watched by the agent's loop. On wake-up the worker
 * is progressed until idle and re-armed; when arming answers UCS_ERR_BUSY
 * (shared-memory transports with queued sends) it is retried a bounded
 * number of times, then progress continues from a zero-delay timer on the
 * next reactor turn, so the loop stays fair and an idle agent sleeps.
 *
 * A transfer posts one put or get per element, then flushes the endpoint;
 * the flush completing means the data is at the target, and only then is
 * the notification sent as an active message. While operations are in
 * flight a slow timer keeps progressing the worker so that UCX's keepalive
 * notices a dead peer even when no fd wakes us.
 *
 * Same host: UCX 1.13 moves puts and gets into memory it did not allocate
 * as messages the target must progress. To a peer on this host (same boot
 * id and pid namespace, advertised in the connection info and proved by
 * reading a cookie out of the peer) the transport copies itself, one-sided,
 * with process_vm_writev / process_vm_readv into the peer's registered
 * regions ("cross-memory attach", as UCX's own cma transport does for
 * rendezvous): in slices of the reactor's time, the notification (a UCX
 * message) only after the last byte landed. The peer is held by a pidfd:
 * checked before every system call, so that a pid that died is never
 * written to again (a recycled pid is another process), and watched in
 * the agent's loop, so that its transfers fail as soon as it exits. A kernel
 * that refuses (ptrace rules) sends the transfers back to UCX. The pidfd
 * is watched with cross-memory attach off or refused too: a same-host
 * peer's death never waits for UCX's keepalive.
 *
 * The files, one concern each (as libfabric's prov/tcp/src):
 *   ucx.h     the private types, and the functions the files share
 *             (nxl_ucx_*)
 *   worker.c  UCX's log, the instances of the process, progress and kick
 *   conn.c    endpoints, the transport's own messages, connection failure
 *   cma.c     cross-memory attach: the peer's process, and the copies
 *   mr.c      registration, keys, revocation, allocation
 *   rma.c     ops, puts and gets, the flush
 *   am.c      one-message WRITEs, notifications
 *   rails.c   several rails to a peer: large transfers striped over them
 *   tcpreset.c a rail's TCP sockets, reset when it is taken out (and the main
 *              endpoint's at a stall on a cut link)
 *   init.c    create, quiesce, destroy; the ops table */
#ifndef NXL_UCX_H
#define NXL_UCX_H

#include <nxl/transport.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <ucp/api/ucp.h>
#include <unistd.h>
#include <ucs/debug/log_def.h>

#define NXL_UCX_AM_NOTIF 0x6e78 /* "nx" */
#define NXL_UCX_AM_WRITE 0x6e79 /* a small WRITE and its notification in one message */
#include "../common/netop.h" /* ops in flight, reported once, the stall timeout */
#include "../common/amwrite.h" /* the one-message WRITE's body */
#include "../common/thp.h" /* registered DRAM onto 2 MiB pages */
#include "../../common/clock_us.h" /* nxl_clock_us */
#include "../../common/zero.h"     /* nxl_zero */
#include "wire.h" /* connection info: CI_MAGIC, a flags byte, UCX's worker address */
#define NXL_UCX_AM_REVOKE 0x6e7b /* a region was deregistered: peers stop using it */
#define NXL_UCX_AM_WRITE_ACK 0x6e7c /* an AM_WRITE was copied into place (or dropped) */
#define NXL_UCX_AM_READ 0x6e7d /* a small READ's request: the target answers with the bytes */
#define NXL_UCX_AM_READ_REPLY 0x6e7e /* ... the answer: the bytes (or why not) */
#define NXL_UCX_AM_MAIN_OUT 0x6e7f /* on a rail: the sender took its main endpoint to us out */
/* the status byte of an AM_WRITE_ACK numbered 0 (a new endpoint's first
 * message, conn.c): renewed after the old connection to the sender failed
 * or was closed here, nothing more of it applied (the sender's name follows) */
#define NXL_UCX_DRAINED 2
#ifndef IOV_MAX
#define IOV_MAX 1024
#endif
#define NXL_UCX_RAILS_MAX 8 /* rails (the rails parameter's devices) at most */

enum { CMA_OFF, CMA_AUTO, CMA_ON };        /* the cma parameter */
/* thp_collapse=auto: registered DRAM up to this much onto 2 MiB pages
 * before the registration returns, larger regions in the background */
#define UCX_THP_SYNC_MAX 0
/* ... nxl_mem_alloc's DRAM: up to this much collapsed before the call
 * returns, larger allocations in the background (mr.c) */
#define UCX_THP_ALLOC_SYNC_MAX ((size_t)1 << 30)
enum { CMA_NONE, CMA_READY, CMA_REFUSED }; /* a connection's cross-memory attach */

typedef struct ucx_conn ucx_conn_t;

#define NXL_UCX_EP_SOCKS 4 /* an endpoint's TCP sockets tracked at most (tcpreset.c) */

/* the TCP sockets this process opened for an endpoint (their inodes) */
typedef struct ucx_socks {
    unsigned n;
    unsigned long ino[NXL_UCX_EP_SOCKS];
} ucx_socks_t;

/* a message of the transport's own (a region revoked): its bytes live
 * until UCX is done with them */
typedef struct ucx_side {
    struct ucx_state *u;
    void *req;
    struct ucx_conn *hello;     /* the first message of a new endpoint (conn.c): its
                                 * completion says UCX resolved the peer's endpoint */
    LIST_ENTRY(ucx_side) link;
    bool poll;                  /* an answer: it carries our busy_poll_us (am.c) */
    size_t len;
    unsigned char buf[];
} ucx_side_t;

/* a message UCX's self transport delivered inside one of our calls, kept
 * for the loop (nxl_ucx_later) */
typedef struct ucx_later {
    struct ucx_later *next;
    ucp_am_recv_callback_t cb;
    size_t len;
    unsigned char buf[];
} ucx_later_t;

typedef struct ucx_state {
    nxlt_ctx_t *ctx;
    ucp_context_h ucp;
    ucp_worker_h w;
    void *addr;
    size_t addr_len;
    int efd;
    nxlt_io_t *ev_efd;          /* the worker's event fd, watched */
    nxlt_timer_t *ev_kick, *ev_watch;
    nxlt_timer_t *ev_arm;       /* progress again, then arm, behind the loop's ready work */
    unsigned arm_defers;        /* arming put off behind it, in a row (ARM_DEFERS) */
    bool watch_on;              /* ev_watch armed: it re-arms itself while ops are in flight */
    bool deadline_due;          /* an op's deadline passed (nxl_ucx_on_deadline): progress looks */
    bool reconnect_due;         /* an abort completed (nxl_ucx_reconnects) */
    nxl_netop_inst_t net;       /* ops in flight (not done yet), hit, stall_us (netop.h) */
    uint64_t busy_until_us;
    nxlt_timer_t *ev_chain;     /* busy polling: progress again in this pass, after what the
                                 * last progress activated (worker.c, chain) */
    uint64_t chain_end_us;      /* ... until then (a pass's spin slice) */
    bool chaining;              /* progress() runs from ev_chain */
    uint64_t now_us;            /* busy polling: the clock as progress() or spin() last read
                                 * it (worker.c) ... */
    unsigned now_reused;        /* ... taken by this many chained passes since */
    bool now_ok;                /* read in this pass or in the spin that runs now, 16 rounds
                                 * ago at most: a handler it runs takes it (am.c, poll_heard) */
    LIST_HEAD(, ucx_conn) conns;
    LIST_HEAD(, ucx_op) ops;
    LIST_HEAD(, ucx_side) sides; /* own messages UCX still holds */
    ucx_later_t *later, **later_tail; /* loopback messages for the loop, in order */
    void **closing;             /* endpoint close requests in flight */
    unsigned nclosing, capclosing;
    char desc[256];
    bool cuda;                  /* this UCX moves CUDA memory (ucp_context_query) */
    unsigned busy_rounds;       /* statistics: arm returned BUSY and we yielded */
    uint64_t busy_idle_us;      /* since when arm answers BUSY with nothing moving (0: not) */
    unsigned backoff_us;        /* the kick timer's delay meanwhile (0: none) */
    bool kick_later;            /* ev_kick is pending with that delay */
    bool kick_on;               /* ev_kick is pending (worker.c, nxl_ucx_kick) */
    bool chain_on;              /* ev_chain is activated */
    bool backoff_said;          /* the backoff was logged */
    unsigned in_ucx;            /* >0 inside a UCX call made for the engine (post, close...) */
    size_t am_write_max;        /* WRITEs with a notification up to this size go as one message */
    size_t am_read_max;         /* READs up to this size go as a request and its answer */
    size_t polled_max;          /* ... and those one at a time, to a peer that polls, rather
                                 * than by cross-memory attach (am.c) */
    unsigned polled_slow_us;    /* ... unless their answers take longer on average (0: never) */
    uint64_t am_seq;            /* the last AM_WRITE's or AM_READ's number (its answer names it) */
    LIST_HEAD(, ucx_op) acks;   /* AM_WRITEs and AM_READs waiting for their answer */
    pthread_t thread;           /* the agent's reactor thread (where UCX logs for us) */
    int cma_mode;               /* CMA_OFF, CMA_AUTO, CMA_ON */
    bool cma_here;              /* our identity is known: advertised in the connection info
                                 * (with cma=off too: peers watch our process by it) */
    ucx_ci_cma_t cma_me;
    volatile uint64_t cma_cookie[2]; /* CMA_MAGIC and a random value: peers read them to
                                      * prove they reach this process */
    size_t cma_chunk;           /* bytes a system call copies at most */
    size_t cma_max;             /* larger transfers go through UCX (0: no limit) */
    TAILQ_HEAD(, ucx_op) cma_q; /* transfers being copied, in order */
    struct ucx_op *spare_ops;   /* done, for reuse (OP_SPARES) */
    unsigned nspare_ops;
    nxlt_timer_t *ev_cma;       /* continues the copies on the next turn */
    bool cma_on;                /* ev_cma is started (cma_start()): a flag, as progress()
                                 * asks on every busy-poll pass and libevent's
                                 * event_pending() takes the base's lock */
    nxlt_timer_t *ev_cma_now;   /* copies posted by callbacks, after them in the same pass */
    bool cma_now_on;            /* ev_cma_now is active */
    bool cma_now_used;          /* ev_cma_now was activated since ev_cma last ran */
    uint64_t cma_burst_end;     /* copies inside calls stop here... */
    bool cma_defer;             /* ... and then wait for the loop's turn */
    size_t cma_wait_bytes, cma_wait_pieces; /* posted between turns since the last copies */
    bool cma_refusal_said;      /* the first refusal is a warning, later ones info */
    struct iovec *cma_liov, *cma_riov; /* IOV_MAX each */
    uint64_t cma_xfers, cma_bytes; /* statistics */
    uint64_t poll_xfers;        /* statistics: small transfers sent as messages to a peer that
                                 * polls, instead of cross-memory attach (am.c) */
    unsigned char poll_hdr[4];  /* our busy_poll_us: the header of our answers (am.c) */
    size_t poll_hlen;           /* 4, or 0 when we do not poll (today's messages) */
    size_t cma_split;           /* calls of this many bytes share the copy with a thread (0: never) */
    struct ucx_split *cma_split_state; /* cmasplit.c: its copy thread, started on first use */
    bool cma_split_failed;      /* no copy thread could be started: not tried again */
    uint64_t cma_split_calls;   /* statistics: copies shared */
    int thp;                    /* NXLT_THP_*: registered DRAM onto 2 MiB pages (mr.c) */
    int thp_alloc;              /* NXLT_THP_*: nxl_mem_alloc's DRAM onto 2 MiB pages (mr.c) */
    size_t huge_unit;           /* ... in units of this (nxl_ucx_huge_unit(); read at the start
                                 * unless thp_alloc is off) */
    uint64_t huge_allocs, huge_bytes; /* statistics: allocations (bytes) collapsed at once */
    nxlt_thp_t *thp_state;      /* ../common/thp.c, made on first use */
    struct ucx_rails *rails;    /* the rails parameter's contexts and workers, or NULL (rails.c) */
    bool is_live;               /* on live_list */
    unsigned long live_gen_seen; /* live_gen when this agent last looked */
    LIST_ENTRY(ucx_state) live; /* every instance of the process */
} ucx_t;

struct ucx_conn {
    ucx_t *u;
    ucp_ep_h ep;
    char *name;
    int refs;                   /* the engine's, plus one per op */
    bool failed;
    bool unloaded;
    bool stalled;               /* failed by our stall timeout, not by UCX */
    bool local;                 /* the peer is another agent of this process (or itself) */
    bool self;                  /* the peer is this agent: a loopback endpoint, without peer
                                 * error handling (conn.c, nxl_ucx_load_conn) */
    void *peer_addr;            /* local: its worker address (finds it on live_list) */
    bool peer_destroyed;        /* local: that agent was destroyed (local_gone) */
    size_t peer_addr_len;
    bool am_write;              /* the peer takes AM_WRITE messages and acknowledges them by
                                 * our name, on its own endpoint to us (CI_AM_ACK_NAME) */
    bool am_read;               /* the peer answers AM_READ requests (CI_AM_READ) */
    bool am_bare;               /* ... and takes AM_WRITEs without a notification (CI_AM_BARE) */
    bool heard;                 /* a message of the peer's arrived: it has an endpoint to us */
    /* the peer polls (am.c, "a peer that polls"): small transfers one at a
     * time go as its messages while it does, not by cross-memory attach */
    uint32_t peer_poll_us;      /* its busy_poll_us, as its messages say (0: it sleeps at once,
                                 * or an older nxl) */
    uint64_t peer_seen_us;      /* when its last answer came (nxlt_now_us): it polls for
                                 * peer_poll_us after that */
    uint64_t window_us;         /* when a transfer was last posted with others in flight */
    uint64_t small_last_us;     /* when the last small transfer one at a time was posted... */
    unsigned small_run;         /* ... and how many came in a row, each within peer_poll_us of
                                 * the one before, outside its window */
    unsigned poll_wake;         /* ... how many make a stream that wakes it (POLL_WAKE, doubled
                                 * while its answers inside the window come slowly) */
    uint64_t poll_rtt8;         /* 8 x the moving average of its answers' time inside the
                                 * window (us) */
    bool forced;                /* its endpoint was closed by force: UCX 1.13 may never
                                 * complete a flush that was pending on it */
    bool torn;                  /* ... by the teardown, transfers in flight on it (init.c,
                                 * quiesce): those UCX gives back are waited for */
    bool fail_deferred;         /* UCX failed it inside one of our calls: handled from the loop */
    bool aborted;               /* its endpoint was closed by force at a deadline (conn.c,
                                 * nxl_ucx_deadlines): the next use makes a new one */
    void *abort_req;            /* that close, until UCX completes it (its ops wait for it);
                                 * c itself while its rails' closes are held (rails.c) */
    bool wiring;                /* aborted, and a new endpoint not through yet (its first
                                 * message): puts and gets wait (rma.c, wire_wait) */
    bool reconnect;             /* the abort completed: a new endpoint is due */
    bool fence;                 /* our abort at a deadline, to such a peer: posts wait (wiring)
                                 * until it said the old connection is drained (conn.c,
                                 * nxl_ucx_peer_drained), or fence_until_us */
    bool fence_only;            /* ... the new endpoint's first message is through: only the
                                 * fence holds them */
    uint64_t fence_until_us;    /* ... given up then (0: not yet set: the first message is
                                 * not through) */
    bool renew_due;             /* the peer made a new endpoint to us after its abort: ours
                                 * is renewed from the loop (conn.c, nxl_ucx_peer_renewed) */
    uint64_t renew_at_us;       /* ... when it fails, or at this time at the latest */
    bool renewing;              /* renewed for the peer (its abort, or a reset): a failure
                                 * of the new endpoint's first message is the peer's loss */
    uint64_t reset_renewed_us;  /* when it was last renewed on a reset (conn.c, conn_renew) */
    unsigned char *addr;        /* the peer's worker address (UCX_ADDR_PAD bytes of 0xff
                                 * after it), for a new endpoint after an abort */
    size_t addr_len;
    LIST_HEAD(, ucx_rkey) rkeys; /* the keys unpacked on its endpoint */
    ucs_status_t why;
    nxl_netop_conn_t net;       /* ops reported to the engine not yet, and the last
                                 * completion (or first post) of one (coarse_us) */
    int cma;                    /* CMA_NONE, CMA_READY, CMA_REFUSED */
    int pidfd;                  /* the peer's process, watched, when it is on this host and
                                 * its identity is known (or -1); held while cma is CMA_READY */
    pid_t pid;
    uint64_t pid_seen_us;       /* when its pidfd last said the process is alive */
    nxlt_io_t *ev_pid;          /* the peer's process exited (its pidfd, watched) */
    unsigned nrails;            /* endpoints to the peer's rails, one per rail of ours (rails.c) */
    ucp_ep_h rail_ep[NXL_UCX_RAILS_MAX]; /* NULL: that rail was taken out */
    unsigned rail_failed;       /* rails whose endpoint failed, to take out from the loop */
    struct ucx_conn_rails *rx;  /* the peer's rail addresses, retries of rails taken out
                                 * (rails.c); NULL without rails */
    ucx_socks_t socks;          /* the TCP sockets its endpoint opened (tcpreset.c): reset
                                 * at a stall on a cut link (nxl_ucx_conn_fail) */
    ucx_socks_t rail_socks[NXL_UCX_RAILS_MAX]; /* each rail's TCP sockets, or its probe's
                                                * (tcpreset.c) */
    unsigned rail_aborts;       /* rail endpoints' closes at an abort UCX still holds: the
                                 * abort completes after them too (rails.c) */
    bool main_out;              /* its main endpoint stalled with a rail up: closed, and every
                                 * transfer and notification goes over the rails (rails.c) */
    ucp_ep_h main_probe;        /* ... a new main endpoint, tried: back once its first
                                 * message is through (rails.c, main_retry) */
    uint64_t main_retry_at;     /* ... when the main endpoint is tried again */
    unsigned main_backoff_ms;   /* ... the wait after the next failed try */
    unsigned main_tries;
    ucs_status_t main_due;      /* UCX failed the main endpoint, or the peer said its main
                                 * endpoint to us is out (CANCELED): taken out from the loop */
    ucs_status_t main_try_failed; /* ... a try's endpoint failed: closed from the loop */
    LIST_ENTRY(ucx_conn) link;
};

/* a remote region's key: UCX's, and whether UCX maps it here itself
 * (memory it allocated, on shared memory: its puts are one-sided) */
typedef struct ucx_rkey {
    ucp_rkey_h rk;  /* NULL while its connection has no endpoint (an abort, conn.c) */
    int mapped; /* -1 not asked yet */
    /* UCX 1.13 uses a key only on the endpoint it was unpacked on: the
     * packed key (UCX_RKEY_PAD bytes of 0xff after it) is kept, unpacked
     * again on the endpoint that replaces an aborted one */
    struct ucx_conn *conn;
    unsigned char *packed;
    LIST_ENTRY(ucx_rkey) link;  /* on conn->rkeys */
    unsigned nrails;            /* the key on each rail's endpoint (rails.c) */
    ucp_rkey_h rail_rk[NXL_UCX_RAILS_MAX]; /* NULL: its rail is out (unpacked when it is back) */
    uint32_t rail_at[NXL_UCX_RAILS_MAX]; /* where each rail's key is in packed */
} ucx_rkey_t;

/* a region registered here (the engine keeps its address and length) */
typedef struct ucx_md {
    ucp_mem_h memh;
    unsigned nrails;            /* registered with each rail's context too (rails.c) */
    ucp_mem_h rail_memh[NXL_UCX_RAILS_MAX];
    uint64_t addr;              /* DRAM: the region, for thp_collapse (common/thp.c) */
    size_t len;
    void *gap;                  /* nxl_mem_alloc: reserved below the region (mr.c), or NULL */
    size_t gap_len;
} ucx_md_t;

typedef struct ucx_op {
    ucx_t *u;
    nxlt_op_t *op;
    ucx_conn_t *conn;
    ucs_status_t st;            /* first error */
    void *notif;                /* [u16 name length][name][message] (in buf), or NULL */
    size_t notif_len;
    LIST_ENTRY(ucx_op) link;
    /* cross-memory attach: the elements, and how far the copies got */
    nxlt_iov_t *iov;            /* iov_cap entries, kept with the op */
    size_t n, at, off;
    bool read, queued;
    TAILQ_ENTRY(ucx_op) cq;
    char *why;                  /* a sentence of its own for a failure (malloc'd) */
    unsigned char *buf;         /* buf_cap bytes, kept with the op: the message it sends */
    size_t buf_cap, iov_cap;
    struct ucx_op *next_free;   /* on the instance's spares */
    /* an AM_WRITE: done when UCX sent it and the target acknowledged it;
     * an AM_READ (amr, amw set too): when UCX sent its request and the
     * answer came, or the op was given up (a deadline): amw_acked then,
     * and an answer that comes later finds no op of its number */
    bool amw, amw_sent, amw_acked, amr;
    bool aborted;               /* failed with its connection, aborted at a deadline */
    bool ucx_done;              /* ... and UCX gave it back before the abort completed */
    bool wire_wait;             /* posted while its connection was wiring: its elements in
                                 * iov, posted when the new endpoint is ready */
    bool wire_notif;            /* ... a notification of its own, sent then */
    ucs_status_t amw_st;        /* what the acknowledgement said */
    unsigned char amw_hdr[9];   /* its number, the message's header; an AM_WRITE without a
                                 * notification: and AMW_BARE (9 bytes) */
    LIST_ENTRY(ucx_op) ack_link; /* on u->acks while amw && !amw_acked */
    unsigned pieces;            /* striped over rails: pieces not completed yet (rails.c) */
    uint64_t t0;                /* posted (nxl_ucx_coarse_us): its main endpoint's stall */
    uint64_t polled_us;         /* sent to a peer inside its polling window (am.c): when
                                 * (nxlt_now_us); 0 otherwise */
    bool main_held;             /* moved off a stalled main endpoint onto the rails (rails.c):
                                 * UCX's request there still names it (freed at its callback) */
    bool moved_done;            /* ... and the rails completed it: freed at that callback */
    bool rail_notif;            /* its notification went on a rail (rails.c) */
} ucx_op_t;

/* The sender's name that begins the transport's messages (a notification,
 * an AM_WRITE, a revocation): [u16 length][name]. Returns what follows. */
static inline unsigned char *nxl_ucx_name_put(unsigned char *w, const char *name, size_t nl)
{
    ucx_ci_put(w, nl, 2);
    memcpy(w + 2, name, nl);
    return w + 2 + nl;
}

/* The name at b (len bytes there) into from (256 bytes): the bytes it
 * took; 0, from untouched, when it is empty, 256 bytes or more, or longer
 * than the message */
static inline size_t nxl_ucx_name_get(const unsigned char *b, size_t len, char *from)
{
    size_t nl = len >= 2 ? (size_t)ucx_ci_get(b, 2) : 0;
    if (nl == 0 || nl >= 256 || 2 + nl > len)
        return 0;
    memcpy(from, b + 2, nl);
    from[nl] = 0;
    return 2 + nl;
}


/* tcpreset.c */
void *nxl_ucx_socks_before(void);
void nxl_ucx_socks_after(void *before, ucx_socks_t *out);
unsigned nxl_ucx_socks_reset(ucx_socks_t *s);
unsigned nxl_ucx_socks_reset_unacked(ucx_socks_t *s);

/* worker.c */
void nxl_ucx_live_add(ucx_t *u);
void nxl_ucx_live_remove(ucx_t *u);
bool nxl_ucx_live_elsewhere(const ucx_conn_t *c);
bool nxl_ucx_live_is_local(const void *addr, size_t len);
uint64_t nxl_ucx_coarse_us(void);
void nxl_ucx_kick(ucx_t *u);
void nxl_ucx_local_gone(ucx_t *u);
void nxl_ucx_deferred_failures(ucx_t *u);
void nxl_ucx_on_efd(nxlt_io_t *io, int fd, unsigned ready, void *arg);
void nxl_ucx_on_kick(nxlt_timer_t *t, void *arg);
void nxl_ucx_on_arm(nxlt_timer_t *t, void *arg);
void nxl_ucx_on_chain(nxlt_timer_t *t, void *arg);
void nxl_ucx_on_watch(nxlt_timer_t *t, void *arg);
void nxl_ucx_watch_start(ucx_t *u);

/* conn.c */
void nxl_ucx_conn_put(ucx_conn_t *c);
void *nxl_ucx_ep_close(ucx_t *u, ucp_ep_h ep, bool force);
nxl_status_t nxl_ucx_rkey_unpack(ucx_conn_t *c, ucx_rkey_t *k);
void nxl_ucx_on_deadline(void *state, nxlt_op_t *op);
void nxl_ucx_deadlines(ucx_t *u);
void nxl_ucx_abort_done(ucx_conn_t *c);
void nxl_ucx_reconnects(ucx_t *u);
void nxl_ucx_peer_renewed(ucx_t *u, const char *from);
void nxl_ucx_peer_drained(ucx_t *u, const char *from);
void nxl_ucx_side_send(ucx_t *u, ucp_ep_h ep, unsigned id, ucx_side_t *m);
void nxl_ucx_side_answer(ucx_t *u, ucp_ep_h ep, unsigned id, ucx_side_t *m);
void nxl_ucx_side_send_flags(ucx_t *u, ucp_ep_h ep, unsigned id, ucx_side_t *m,
                             uint32_t flags);
ucs_status_ptr_t nxl_ucx_am_send_gather(ucp_ep_h ep, unsigned id, const void *hdr, size_t hlen,
                                        const void *buf, size_t head, const nxlt_iov_t *iov,
                                        size_t n, size_t len, uint32_t flags,
                                        ucp_send_nbx_callback_t cb, void *arg, bool *sent);
ucs_status_ptr_t nxl_ucx_am_send(ucp_ep_h ep, unsigned id, const void *hdr, size_t hlen,
                                 const void *buf, size_t len, uint32_t flags,
                                 ucp_send_nbx_callback_t cb, void *arg);
void nxl_ucx_conn_fail(ucx_conn_t *c, ucs_status_t status, bool stalled);
ucs_status_t nxl_ucx_main_try(ucx_conn_t *c);
void nxl_ucx_main_try_over(ucx_conn_t *c);
nxl_status_t nxl_ucx_load_conn(void *state, const char *agent, const void *info, size_t len,
                               void **out);
void nxl_ucx_unload_conn(void *state, void *conn);
nxl_status_t nxl_ucx_conn_info(void *state, void **buf, size_t *len);

/* cma.c */
void nxl_ucx_cma_close(ucx_conn_t *c);
bool nxl_ucx_pidfd_exited(int fd);
void nxl_ucx_cma_init(ucx_t *u);
void nxl_ucx_cma_connect(ucx_t *u, ucx_conn_t *c, const ucx_ci_cma_t *p, bool copies);
bool nxl_ucx_cma_usable(ucx_t *u, ucx_conn_t *c, const nxlt_xfer_t *x);
void nxl_ucx_on_cma(nxlt_timer_t *t, void *arg);
void nxl_ucx_on_cma_now(nxlt_timer_t *t, void *arg);
nxl_status_t nxl_ucx_post_cma(ucx_t *u, nxlt_op_t *op, ucx_conn_t *c, const nxlt_xfer_t *x);

/* cmasplit.c */
#define CMA_SPLIT_PIECES 4 /* pieces of a shared copy, taken in turn by two threads */
typedef struct ucx_split ucx_split_t;
ssize_t nxl_ucx_split_copy(ucx_t *u, pid_t pid, bool read, const struct iovec *l,
                           const struct iovec *r, size_t cnt, size_t bytes);
void nxl_ucx_split_fini(ucx_t *u);

/* mr.c */
ucs_status_t nxl_ucx_mem_map(ucp_context_h ucp, nxl_mem_t type, void *addr, size_t len,
                             ucp_mem_h *memh);
nxl_status_t nxl_ucx_reg(void *state, nxl_mem_t type, const nxl_desc_t *d, void **out);
void nxl_ucx_dereg(void *state, void *md);
void nxl_ucx_mem_revoke(void *state, nxl_mem_t type, const nxl_desc_t *d, void *md);
ucs_status_t nxl_ucx_am_recv_revoke(void *arg, const void *header, size_t hlen, void *data,
                                    size_t len, const ucp_am_recv_param_t *param);
nxl_status_t nxl_ucx_mem_alloc(void *state, nxl_mem_t type, size_t len, uint64_t dev, void **ptr,
                               void **md);
void nxl_ucx_mem_free(void *state, void *ptr, void *md);
size_t nxl_ucx_huge_unit(void);
nxl_status_t nxl_ucx_pack_key(void *state, void *md, void **buf, size_t *len);
nxl_status_t nxl_ucx_load_key(void *state, void *conn, const void *buf, size_t len, void **rkey);
void nxl_ucx_unload_key(void *state, void *rkey);

/* rma.c */
void nxl_ucx_op_report(ucx_op_t *o, ucs_status_t st);
void nxl_ucx_op_free(ucx_op_t *o);
void nxl_ucx_op_drop(ucx_op_t *o);
unsigned char *nxl_ucx_op_buf(ucx_op_t *o, size_t len);
void nxl_ucx_op_finish(ucx_op_t *o, ucs_status_t st);
ucx_op_t *nxl_ucx_op_new(ucx_t *u, nxlt_op_t *op, ucx_conn_t *c, const char *me, const void *msg,
                         size_t len, bool with_notif);
int nxl_ucx_op_keep_iov(ucx_op_t *o, const nxlt_xfer_t *x);
nxl_status_t nxl_ucx_check_conn(ucx_t *u, ucx_conn_t *c, const char *call);
ucs_status_t nxl_ucx_post_rma(ucx_t *u, ucx_op_t *o, bool write, const nxlt_iov_t *iov, size_t n,
                              size_t skip);
void nxl_ucx_wired(ucx_conn_t *c);
nxl_status_t nxl_ucx_post(void *state, nxlt_op_t *op, const nxlt_xfer_t *x);

/* rails.c */
nxl_status_t nxl_ucx_rails_open(ucx_t *u, const nxl_param_t *params, size_t n);
void nxl_ucx_rails_progress(ucx_t *u);
void nxl_ucx_rails_destroy(ucx_t *u);
size_t nxl_ucx_rails_info_len(ucx_t *u);
void nxl_ucx_rails_info_pack(ucx_t *u, unsigned char *w);
int nxl_ucx_rails_info_parse(const void **info, size_t *len, const void **rails,
                             size_t *rails_len);
void nxl_ucx_rails_connect(ucx_t *u, ucx_conn_t *c, const void *rails, size_t len);
void nxl_ucx_rails_close(ucx_conn_t *c);
void nxl_ucx_rails_abort(ucx_conn_t *c);
void nxl_ucx_rails_reg(ucx_t *u, ucx_md_t *m, void *addr, size_t len);
void nxl_ucx_rails_dereg(ucx_t *u, ucx_md_t *m);
nxl_status_t nxl_ucx_rails_pack_key(ucx_t *u, ucx_md_t *m, void **buf, size_t *len);
void nxl_ucx_rails_load_key(ucx_t *u, ucx_conn_t *c, const unsigned char *buf, size_t len,
                            size_t at, ucx_rkey_t *k);
void nxl_ucx_rails_unload_key(ucx_rkey_t *k);
int nxl_ucx_rails_post(ucx_t *u, nxlt_op_t *op, ucx_conn_t *c, const nxlt_xfer_t *x);
bool nxl_ucx_main_moved(ucx_op_t *o);
bool nxl_ucx_rails_notif(ucx_op_t *o);
void nxl_ucx_main_check(ucx_t *u, ucx_conn_t *c, uint64_t now);
bool nxl_ucx_main_fail(ucx_conn_t *c, ucs_status_t status);
void nxl_ucx_main_hello(ucx_conn_t *c, ucs_status_t st);
void nxl_ucx_main_due(ucx_conn_t *c);

/* am.c */
bool nxl_ucx_later(ucx_t *u, ucp_am_recv_callback_t cb, const void *data, size_t len,
                   const ucp_am_recv_param_t *param);
void nxl_ucx_later_run(ucx_t *u);
void nxl_ucx_later_free(ucx_t *u);
ucs_status_t nxl_ucx_am_recv_ack(void *arg, const void *header, size_t hlen, void *data,
                                 size_t len, const ucp_am_recv_param_t *param);
int nxl_ucx_post_am_write(ucx_t *u, nxlt_op_t *op, ucx_conn_t *c, const nxlt_xfer_t *x);
int nxl_ucx_post_am_read(ucx_t *u, nxlt_op_t *op, ucx_conn_t *c, const nxlt_xfer_t *x);
int nxl_ucx_post_polled(ucx_t *u, nxlt_op_t *op, ucx_conn_t *c, const nxlt_xfer_t *x, bool cma);
ucs_status_t nxl_ucx_am_recv_read(void *arg, const void *header, size_t hlen, void *data,
                                  size_t len, const ucp_am_recv_param_t *param);
ucs_status_t nxl_ucx_am_recv_read_reply(void *arg, const void *header, size_t hlen, void *data,
                                        size_t len, const ucp_am_recv_param_t *param);
void nxl_ucx_am_reads_due(ucx_t *u);
ucx_conn_t *nxl_ucx_conn_named(ucx_t *u, const char *name);
ucs_status_t nxl_ucx_am_recv_write(void *arg, const void *header, size_t hlen, void *data,
                                   size_t len, const ucp_am_recv_param_t *param);
void nxl_ucx_send_notif(ucx_op_t *o);
nxl_status_t nxl_ucx_notif_send(void *state, nxlt_op_t *op, void *conn, const void *msg,
                                size_t len);
ucs_status_t nxl_ucx_am_recv(void *arg, const void *header, size_t hlen, void *data, size_t len,
                             const ucp_am_recv_param_t *param);

#endif /* NXL_UCX_H */
