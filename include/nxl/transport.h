/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file nxl/transport.h
 * @brief The south-bound API: what every transport implements, and what the
 *        engine offers it.
 *
 * A transport is a table of functions (@ref nxlt_ops_t) with an ABI
 * version, a name, the memory types it serves and its capabilities. The
 * engine owns regions, remote agents, transfers and futures; a transport
 * owns only its own handles (a registration, a packed key, a connection, an
 * unpacked remote key) and reports completions with nxlt_op_done().
 *
 * Everything runs on the agent's reactor thread. A transport hooks its file
 * descriptors and timers into the agent's loop through nxlt_io_new() and
 * nxlt_timer_new() (never through an event library of its own choosing)
 * and never blocks in a call.
 *
 * # Built in or a module
 *
 * A transport named @c x defines its table as
 *
 * @code
 * NXLT_MODULE_EXPORT const nxlt_ops_t nxlt_x_ops = { .abi_version = NXLT_ABI_VERSION, ... };
 * @endcode
 *
 * Built into libnxl, the table is hidden inside the library. Built as a
 * module (compiled with @c NXLT_MODULE defined, linked against libnxl), it
 * is the one symbol the module exports: libnxl opens @c libnxl-x.so from the
 * folders in @c NXL_PLUGIN_DIR (colon-separated, searched first) and from
 * its install folder, @c $(libdir)/nxl/transports-\<NXLT_ABI_VERSION\>, looks
 * up @c nxlt_x_ops and uses it only when its @c abi_version is
 * @ref NXLT_ABI_VERSION and its @c name is @c x (any case). Bump
 * NXLT_ABI_VERSION whenever this header changes incompatibly: modules are
 * then installed in a new folder and old ones are refused with a sentence.
 */
#ifndef NXL_TRANSPORT_H
#define NXL_TRANSPORT_H

#include <nxl.h>
#include <nxl/kv.h>
#include <stdarg.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Version of this header's ABI; names the folder modules are installed in. */
#define NXLT_ABI_VERSION 3

/** Exports a transport's ops table from its module (see the file comment). */
#ifdef NXLT_MODULE
#define NXLT_MODULE_EXPORT __attribute__((visibility("default")))
#else
#define NXLT_MODULE_EXPORT
#endif

/** Capabilities. */
#define NXLT_CAP_REMOTE (1u << 0) /**< moves data to and from other agents */
#define NXLT_CAP_LOCAL (1u << 1)  /**< moves data within the agent (loopback) */
#define NXLT_CAP_NOTIF (1u << 2)  /**< carries notifications */
/**
 * A canceled op may still be using its buffers (the kernel or a worker
 * holds them): its future completes (CANCELED) only when the transport
 * reports the op done. The transport checks nxlt_op_canceled() to start
 * nothing more of it.
 */
#define NXLT_CAP_CANCEL_WAITS (1u << 3)
/**
 * Calls may come from any thread, one at a time (threaded agents,
 * nxlt_threaded()): while the reactor sleeps, a thread of the application
 * that holds the agent's lock runs its call itself — a post, a
 * notification send, a release — and so this transport's functions, on
 * its thread. Event callbacks still run on the reactor thread, and never
 * two calls at once. What such a call leaves for the reactor must be seen
 * by the engine, and is: a watch started, a timer armed, moved earlier or
 * activated changes the epoll set (or its timerfd) a threaded agent's
 * reactor sleeps on, and wakes it.
 * Without it, the agent hands every call to the reactor thread.
 */
#define NXLT_CAP_ANY_THREAD (1u << 4)
/**
 * The table ends with @c params and @c nparams (appended within ABI 2: the
 * engine reads them only from a table with this bit, so a module built
 * before them still loads, and a table with them loads into an older
 * libnxl, which ignores them).
 */
#define NXLT_CAP_PARAMS (1u << 5)
/**
 * The table ends, after @c params and @c nparams, with @c relayout_prep,
 * @c relayout and @c relayout_free: the transport re-lays out staged
 * bytes on its device (the KV transfer's staged path into VRAM,
 * nxl_kv_xfer_make()). Appended within ABI 3 as NXLT_CAP_PARAMS was: the
 * engine reads these three only from a table with this bit, so a module
 * built before them is never asked, and a table with them loads into an
 * older libnxl, which ignores them. A table with this bit has
 * NXLT_CAP_PARAMS too (NXLT_OPS_HEAD sets it).
 */
#define NXLT_CAP_RELAYOUT (1u << 6)

/** What the engine gives a transport instance. */
typedef struct nxlt_ctx nxlt_ctx_t;
/** One posted operation: a transfer or a notification send. */
typedef struct nxlt_op nxlt_op_t;

/** One element of a transfer, resolved by the engine. */
typedef struct nxlt_iov {
    void *laddr;      /**< local address (or offset) */
    void *lmd;        /**< the transport's handle of the local region */
    uint64_t raddr;   /**< remote address (or offset) */
    void *rkey;       /**< the transport's handle of the remote region */
    size_t len;
} nxlt_iov_t;

/** A transfer as the transport sees it. */
typedef struct nxlt_xfer {
    nxl_op_t op;
    nxl_mem_t ltype, rtype;
    void *conn;              /**< connection to the remote agent (from load_conn) */
    const nxlt_iov_t *iov;
    size_t n;
    const void *notif;       /**< copy it if needed after post returns */
    size_t notif_len;
} nxlt_xfer_t;

/**
 * The head of a transport's table: the ABI version, @p name_, @p mem_mask_,
 * @p caps_ with NXLT_CAP_PARAMS, and the parameter table @p params_ (an
 * array of nxl_param_info_t, counted here):
 * @code
 * const nxlt_ops_t nxlt_x_ops = {
 *     NXLT_OPS_HEAD("X", 1u << NXL_DRAM, NXLT_CAP_LOCAL, x_params),
 *     .probe = probe, ...
 * };
 * @endcode
 */
#define NXLT_OPS_HEAD(name_, mem_mask_, caps_, params_)                                         \
    .abi_version = NXLT_ABI_VERSION, .name = (name_), .mem_mask = (mem_mask_),                 \
    .caps = (caps_) | NXLT_CAP_PARAMS, .params = (params_),                                    \
    .nparams = sizeof(params_) / sizeof(*(params_))

typedef struct nxlt_ops {
    uint32_t abi_version;    /**< NXLT_ABI_VERSION */
    const char *name;
    uint32_t mem_mask;       /**< bit (1 << nxl_mem_t) per type served */
    uint32_t caps;           /**< NXLT_CAP_* */

    /** Can this machine create it? Writes why not into @p why. */
    int (*probe)(char *why, size_t cap);
    /** Creates an instance; writes a sentence with nxlt_error() on failure. */
    nxl_status_t (*create)(nxlt_ctx_t *ctx, const nxl_param_t *params, size_t n, void **state);
    /** Destroys it; every op not yet done must be reported done (CANCELED) first. */
    void (*destroy)(void *state);

    /** Registers a local region. The engine calls reg(), mem_alloc() and query()
     *  only with a memory type of @c mem_mask. */
    nxl_status_t (*reg)(void *state, nxl_mem_t type, const nxl_desc_t *d, void **md);
    void (*dereg)(void *state, void *md);
    /** Packs the public key of a region for metadata (malloc'd). */
    nxl_status_t (*pack_key)(void *state, void *md, void **buf, size_t *len);
    /** Optional: allocates memory suited to the transport and registers it. */
    nxl_status_t (*mem_alloc)(void *state, nxl_mem_t type, size_t len, uint64_t dev_id,
                              void **ptr, void **md);
    void (*mem_free)(void *state, void *ptr, void *md);

    /** Packs this instance's connection info (malloc'd). */
    nxl_status_t (*conn_info)(void *state, void **buf, size_t *len);
    /** Connects to a remote agent from its connection info. */
    nxl_status_t (*load_conn)(void *state, const char *agent, const void *info, size_t len,
                              void **conn);
    /** Unpacks a remote region's key for a connection. */
    nxl_status_t (*load_key)(void *state, void *conn, const void *buf, size_t len, void **rkey);
    void (*unload_key)(void *state, void *rkey);
    /** Disconnects (non-blocking); outstanding ops complete with an error. */
    void (*unload_conn)(void *state, void *conn);

    /** Posts a transfer; reports with nxlt_op_done() later, never inside. */
    nxl_status_t (*post)(void *state, nxlt_op_t *op, const nxlt_xfer_t *x);
    /** Sends a notification (copied). */
    nxl_status_t (*notif_send)(void *state, nxlt_op_t *op, void *conn, const void *msg,
                               size_t len);
    /** Optional: a one-line description for logs ("UCX 1.13.1: sysv, tcp"). */
    const char *(*describe)(void *state);
    /**
     * Optional: answers nxl_mem_query() for one descriptor without
     * registering it (does the file exist, how large is it). Something that
     * does not exist is not an error: @p res->exists stays 0.
     */
    nxl_status_t (*query)(void *state, nxl_mem_t type, const nxl_desc_t *d, nxl_query_t *res);
    /**
     * Optional: called first in nxl_agent_destroy(), before pending futures
     * are canceled and their callbacks run: waits until nothing in flight
     * uses application memory anymore and reports every op done
     * (NXL_ERR_CANCELED), so that a callback may free its buffers. Only
     * destroy() follows.
     */
    void (*quiesce)(void *state);
    /**
     * Optional: reports @p op done (nxlt_op_done) once the device has
     * reached @p event (for CUDA a cudaEvent_t: the work its latest record
     * captured at the time of this call), without blocking and without
     * polling. Serves nxl_future_from_cuda_event().
     */
    nxl_status_t (*wait_event)(void *state, nxlt_op_t *op, void *event);
    /**
     * Optional: the application deregistered (or freed) the region of
     * @p md, described by @p type and @p d: from now on no peer may reach
     * it. Called once, inside nxl_mem_deregister() or nxl_mem_free(), while
     * dereg() may come later (local transfers still holding the region keep
     * its registration). A transport whose target does not check remote
     * accesses itself tells the peers it is connected to, and their engine
     * refuses transfers into the region (nxlt_remote_revoked()); one whose
     * provider checks keys at the target needs nothing here.
     */
    void (*revoke)(void *state, nxl_mem_t type, const nxl_desc_t *d, void *md);
    /**
     * With NXLT_CAP_PARAMS: every parameter create() takes, with its
     * default and a line of documentation. The engine refuses any other key
     * before create() is called, and nxl_plugin_detail() (the nxl_info
     * program) lists them: a key create() reads must be here. A default is
     * written as a value create() takes, or NULL (chosen at creation: the
     * line says how).
     */
    const nxl_param_info_t *params;
    size_t nparams;

    /* ---- with NXLT_CAP_RELAYOUT (see there) */
    /**
     * Prepares a re-layout on the device: @p n pieces (nxl_kv_piece_t:
     * @c len bytes from @c src to @c dst, both addresses of @p type memory
     * of device @p dev, registered, pieces not overlapping), copied into
     * @p *plan (the caller may free @p pieces once it returns). May block
     * (an upload of the pieces). Writes a sentence with nxlt_error() when
     * this instance cannot re-lay out @p type memory (for CUDA: a build
     * without nvcc has no kernel).
     */
    nxl_status_t (*relayout_prep)(void *state, nxl_mem_t type, uint64_t dev,
                                  const nxl_kv_piece_t *pieces, size_t n, void **plan);
    /**
     * Queues pieces [@p first, @p first + @p n) of @p plan on the device
     * and reports @p op done (nxlt_op_done) once they were copied, never
     * inside the call. The caller posts it once the bytes are in the
     * staging (the READ into it reported done), and posts nothing that
     * writes the pieces' sources or destinations before @p op is done.
     */
    nxl_status_t (*relayout)(void *state, nxlt_op_t *op, void *plan, size_t first, size_t n);
    /** Frees a plan no relayout in flight uses. */
    void (*relayout_free)(void *state, void *plan);
} nxlt_ops_t;

/* ---- what the engine offers a transport ---- */

/**
 * Deprecated since transport ABI 3: the libevent base the agent runs on, or
 * NULL when it runs on another loop (nxl_agent_config_t.loop). Transports
 * reach the loop only through the watches and timers below.
 */
NXL_API struct event_base *nxlt_base(nxlt_ctx_t *ctx);
NXL_API nxl_agent_t *nxlt_agent(nxlt_ctx_t *ctx);
/** Nonzero when the agent is threaded: a transport with
 * NXLT_CAP_ANY_THREAD is then called from several threads, serialized
 * (a UCX worker is made UCS_THREAD_MODE_SERIALIZED). */
NXL_API int nxlt_threaded(nxlt_ctx_t *ctx);
/** Busy-poll window of the agent, in microseconds. */
NXL_API unsigned nxlt_busy_poll_us(nxlt_ctx_t *ctx);
/** The engine's monotonic clock, in microseconds. */
NXL_API uint64_t nxlt_now_us(void);
/** Nonzero while the agent runs application callbacks (completions,
 * notifications): operations posted from there may be handed to the
 * system together at the end of this loop turn, as one batch. */
NXL_API int nxlt_in_callback(nxlt_ctx_t *ctx);
/**
 * Direct delivery, for a transport that busy-polls (a turn of the loop
 * costs more than a message over shared memory takes). From
 * nxlt_deliver_hold() to nxlt_deliver_release(), what the transport
 * completes or receives (nxlt_op_done, nxlt_notif_recv) is queued as
 * always, but the delivery is not woken: nxlt_deliver_release(ctx, 1)
 * then delivers everything queued at once, in order, as the loop's
 * delivery would (the application's callbacks run inside it: call it
 * only where they may post, cancel and release, never inside a library's
 * callback such as UCX's progress, and hold no pointer across it that a
 * callback may free); nxlt_deliver_release(ctx, 0) wakes the loop's
 * delivery instead, as if nothing had been held. Hold only from the
 * transport's own loop callbacks.
 * @return hold: 1 when held, 0 where delivery cannot be direct (inside a
 * callback or a delivery, a foreign thread's call, already held): then
 * do not release. release: 1 when it delivered.
 */
NXL_API int nxlt_deliver_hold(nxlt_ctx_t *ctx);
NXL_API int nxlt_deliver_release(nxlt_ctx_t *ctx, int now);
/** Leaves a sentence in the agent's last error. */
NXL_API void nxlt_error(nxlt_ctx_t *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
NXL_API void nxlt_log(nxlt_ctx_t *ctx, nxl_log_level_t lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/**
 * Reports an operation done (exactly once per op). @p why may be NULL on
 * success; otherwise a sentence naming the transport and the call.
 */
NXL_API void nxlt_op_done(nxlt_op_t *op, nxl_status_t st, const char *why);
/** A notification arrived from @p from. */
NXL_API void nxlt_notif_recv(nxlt_ctx_t *ctx, const char *from, const void *msg, size_t len);
/**
 * 1 when [@p addr, @p addr + @p len) of memory type @p type (device
 * @p dev) lies inside one region this agent has registered, and registered
 * with the calling transport; 0 otherwise (never registered, deregistered
 * since, or registered with other transports only). For a transport that
 * writes into local memory on a peer's behalf (a WRITE carried in a
 * message): check every element before writing a byte.
 */
NXL_API int nxlt_mem_registered(nxlt_ctx_t *ctx, nxl_mem_t type, uint64_t dev, uint64_t addr,
                                size_t len);
/**
 * Agent @p from says it deregistered its region @p type, @p dev,
 * [@p addr, @p addr + @p len) (sent by its transport's revoke()): prepared
 * lists, transfers and posts that use that region are refused from now on
 * (NXL_ERR_NOT_FOUND). Unknown agents and regions are ignored.
 */
NXL_API void nxlt_remote_revoked(nxlt_ctx_t *ctx, const char *from, nxl_mem_t type, uint64_t dev,
                                 uint64_t addr, uint64_t len);
/** Per-op slot for the transport (one pointer). */
NXL_API void **nxlt_op_priv(nxlt_op_t *op);
/**
 * 1 when the op's future was canceled and waits for the op (transports
 * with NXLT_CAP_CANCEL_WAITS): start nothing more of it and report it done
 * once what is in flight has ended; its future completes with
 * NXL_ERR_CANCELED whatever status is reported.
 */
NXL_API int nxlt_op_canceled(const nxlt_op_t *op);
/** See nxlt_on_deadline(). */
typedef void (*nxlt_deadline_cb)(void *state, nxlt_op_t *op);
/**
 * Asks to be told when the deadline of an op of this transport passed
 * (nxl_xfer_set_deadline) while its future waits for it, or when an op
 * canceled by nxl_future_cancel() (or a release in flight) is still not
 * reported done 200 ms after the cancel (transports with
 * NXLT_CAP_CANCEL_WAITS; nxlt_op_canceled() reads 1 from the deadline or
 * the cancel on): @p cb runs on the reactor, from the engine's timer,
 * never inside a call of this transport. A transport whose cancel would
 * wait for a peer that does not answer may then abort what holds the op's
 * buffers (its connection to that peer), and report the op done once
 * nothing reads or writes them any more. Call it from create(); NULL stops
 * it. Optional: without it the op completes when the transport reports it
 * done on its own.
 */
NXL_API void nxlt_on_deadline(nxlt_ctx_t *ctx, nxlt_deadline_cb cb);
/**
 * The deadline the op was posted with, in milliseconds from its post (0:
 * none; nxl_xfer_opts_t.deadline_ms), known from post() on: a transport
 * may keep what a deadline's abort needs (e.g. fewer requests queued where
 * an abort cannot reach them) for the ops that carry one.
 */
NXL_API unsigned nxlt_op_deadline_ms(const nxlt_op_t *op);

/* ---- The loop: watches and timers ----
 *
 * A transport reaches the agent's event loop only through these: the
 * engine owns every watch and timer, so it knows at every moment which
 * descriptors are watched and when its next timer is due, whatever loop
 * the application runs (libevent, libuv, a bare epoll loop through
 * nxl_agent_backend_fd(); doc/design.md, "Loops"). Callbacks run on the
 * reactor thread, inside a turn of the loop, never inside the call that
 * starts a watch or a timer. A watch or timer may be started, stopped and
 * freed from any callback, its own included; freeing it from its own
 * callback is allowed, touching it after that is not.
 *
 * With NXLT_CAP_ANY_THREAD, a call of the transport made on another thread
 * (while the reactor sleeps, holding the agent's lock) may start, stop or
 * move any watch or timer: a threaded agent's reactor sleeps on the epoll
 * set and timerfd these change, and wakes.
 */

/** A watched file descriptor. */
typedef struct nxlt_io nxlt_io_t;
/** A one-shot, re-armable timer; also what "run this soon" is made of. */
typedef struct nxlt_timer nxlt_timer_t;

#define NXLT_IO_READ 0x1u  /**< readable (or hung up, or an error pending) */
#define NXLT_IO_WRITE 0x2u /**< writable */
/** With nxlt_io_start(): the watch stops after its callback ran once. */
#define NXLT_IO_ONCE 0x4u

/** @p ready: NXLT_IO_READ and/or NXLT_IO_WRITE. */
typedef void (*nxlt_io_cb)(nxlt_io_t *io, int fd, unsigned ready, void *arg);
typedef void (*nxlt_timer_cb)(nxlt_timer_t *t, void *arg);

/**
 * A watch of @p fd, stopped: start it with nxlt_io_start(). One watch per
 * descriptor at a time. @return NULL on failure (a sentence in the
 * agent's last error).
 */
NXL_API nxlt_io_t *nxlt_io_new(nxlt_ctx_t *ctx, int fd, nxlt_io_cb cb, void *arg);
/**
 * Watches for @p events (NXLT_IO_READ | NXLT_IO_WRITE, with NXLT_IO_ONCE
 * for one callback only), level-triggered, until changed; 0 stops.
 * @return 0, or -1 (the descriptor cannot be watched: a sentence in the
 * agent's last error).
 */
NXL_API int nxlt_io_start(nxlt_io_t *io, unsigned events);
/** What the watch waits for now (0: stopped). */
NXL_API unsigned nxlt_io_events(const nxlt_io_t *io);
/** Stops and frees the watch (NULL: nothing); the descriptor stays open. */
NXL_API void nxlt_io_free(nxlt_io_t *io);

/** A timer, not pending. @return NULL on failure. */
NXL_API nxlt_timer_t *nxlt_timer_new(nxlt_ctx_t *ctx, nxlt_timer_cb cb, void *arg);
/** (Re)arms the timer to run once, @p after_us from now (0: on the next
 *  turn of the loop, after the descriptors ready now). */
NXL_API void nxlt_timer_start(nxlt_timer_t *t, uint64_t after_us);
/** Runs the timer's callback in this turn of the loop, or the next one
 *  when called outside a turn (libevent's event_active()). */
NXL_API void nxlt_timer_activate(nxlt_timer_t *t);
/** Disarms it (not pending any more; a callback not yet run does not run). */
NXL_API void nxlt_timer_stop(nxlt_timer_t *t);
/** 1 while armed or activated and its callback not yet run. */
NXL_API int nxlt_timer_pending(const nxlt_timer_t *t);
/** Stops and frees the timer (NULL: nothing). */
NXL_API void nxlt_timer_free(nxlt_timer_t *t);
/**
 * 1 when something else is ready to run in this turn of the loop (a
 * timer activated or due, another transport's work): a transport that
 * busy-polls gives the loop its turn then.
 */
NXL_API int nxlt_loop_busy(nxlt_ctx_t *ctx);

/* ---- Parameters: what create() reads from its nxl_param_t list ----
 *
 * The engine refuses keys a transport's parameter table (@c params) does
 * not list before create() runs; these read the values. Each typed reader
 * leaves @c *out alone when @p key is absent (so preset the default) and,
 * for a value it refuses, leaves the sentence "<NAME>: key=value: what it
 * takes" in the agent's last error (NAME: the transport's) and returns
 * NXL_ERR_INVALID_PARAM; otherwise NXL_SUCCESS.
 */
/** The value of @p key (the last one given), NULL when absent. */
NXL_API const char *nxlt_param(const nxl_param_t *p, size_t n, const char *key);
/** 1, yes, true, on / 0, no, false, off (any case). */
NXL_API nxl_status_t nxlt_param_bool(nxlt_ctx_t *ctx, const nxl_param_t *p, size_t n,
                                     const char *key, bool *out);
/** A whole number from @p lo to @p hi (decimal, or hexadecimal with 0x). */
NXL_API nxl_status_t nxlt_param_uint(nxlt_ctx_t *ctx, const nxl_param_t *p, size_t n,
                                     const char *key, uint64_t lo, uint64_t hi, uint64_t *out);
/** A byte count from @p lo to @p hi: a whole number, optionally followed by
 * K, M or G (powers of 1024; "64K", "1MiB", "2GB" and "4k" are read alike). */
NXL_API nxl_status_t nxlt_param_size(nxlt_ctx_t *ctx, const nxl_param_t *p, size_t n,
                                     const char *key, uint64_t lo, uint64_t hi, uint64_t *out);
/** A time from @p lo_ms to @p hi_ms, in milliseconds: "10s", "500ms",
 * "1.5s"; a bare number is seconds. */
NXL_API nxl_status_t nxlt_param_duration(nxlt_ctx_t *ctx, const nxl_param_t *p, size_t n,
                                         const char *key, uint64_t lo_ms, uint64_t hi_ms,
                                         uint64_t *out_ms);
/** One of @p choices (a NULL-terminated list, compared exactly): @c *out is
 * its index. */
NXL_API nxl_status_t nxlt_param_choice(nxlt_ctx_t *ctx, const nxl_param_t *p, size_t n,
                                       const char *key, const char *const *choices, int *out);

/* ---- HTTP on the reactor (built when libcurl is: etcd discovery, OBJ) ----
 *
 * libcurl's multi-socket interface with its sockets and its timer as
 * watches and a timer of the agent's loop (curl's docs/examples/multi-event.c is
 * the model). The caller makes and configures its easy handles (CURL *,
 * passed as void * so that this header needs no curl.h) and adds them; each
 * added handle is reported once to @p done, on a later reactor turn, after
 * it has left the multi handle: the callee may free it or add it again.
 * Connections stay in the multi handle's cache between requests (keep-alive
 * reuse); an idle multi handle has no timer armed and no event pending
 * except on cached connections, which wake the loop only when the server
 * closes them. No thread is started. */

/** A multi handle driven by the agent's loop. */
typedef struct nxlt_http nxlt_http_t;
/**
 * An added easy handle finished: @p result is its CURLcode (0: the
 * exchange completed, whatever the HTTP status), @p priv its CURLOPT_PRIVATE.
 */
typedef void (*nxlt_http_done_fn)(void *easy, int result, void *priv, void *arg);
/** @return a new multi handle on the agent's loop, or NULL (no libcurl in
 *  this build, out of memory). */
NXL_API nxlt_http_t *nxlt_http_open(nxlt_ctx_t *ctx, nxlt_http_done_fn done, void *arg);
/** Transport ABI 2's constructor: returns NULL (use nxlt_http_open()). */
NXL_API nxlt_http_t *nxlt_http_new(struct event_base *base, nxlt_http_done_fn done, void *arg);
/** @return its CURLM *, for curl_multi_setopt() (connection limits). */
NXL_API void *nxlt_http_multi(nxlt_http_t *h);
/** Starts an easy handle; @return 0, or a CURLMcode. Never reports inside the call. */
NXL_API int nxlt_http_add(nxlt_http_t *h, void *easy);
/** Stops an easy handle that was added and not yet reported; it is not reported. */
NXL_API void nxlt_http_remove(nxlt_http_t *h, void *easy);
/** Frees the multi handle; every easy handle must have been reported or removed. */
NXL_API void nxlt_http_free(nxlt_http_t *h);

#ifdef __cplusplus
}
#endif
#endif
