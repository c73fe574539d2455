/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file nxl.h
 * @brief nxl — moving KV-cache blocks and other data between memories,
 *        processes and hosts, with transfers as futures on a libevent reactor.
 *
 * # Objects
 *
 * - @ref nxl_agent_t   one named endpoint: its reactor, its registered memory,
 *                      what it knows of remote agents, its transports.
 * - @ref nxl_backend_t one transport instance inside an agent ("UCX", ...).
 * - @ref nxl_desc_t    one address range (or file range, object, ...).
 * - @ref nxl_dlist_t   a view of an array of descriptors of one memory type.
 * - @ref nxl_prepped_t a descriptor list resolved against registered regions,
 *                      local or of a remote agent, addressed later by index.
 * - @ref nxl_xfer_t    a re-postable READ or WRITE plan.
 * - @ref nxl_future_t  one asynchronous operation in flight.
 *
 * # The contract of futures and callbacks
 *
 * 1. A call that returns an error starts nothing: no future, no callback.
 * 2. Otherwise each callback attached to the future runs exactly once: on
 *    success, on failure, on cancel (@ref NXL_ERR_CANCELED), at a
 *    transfer's deadline (@ref NXL_ERR_TIMEOUT), on peer loss
 *    (@ref NXL_ERR_REMOTE_DISCONNECT) and on agent teardown (pending futures
 *    complete with @ref NXL_ERR_CANCELED inside nxl_agent_destroy()).
 * 3. Callbacks run on the reactor thread, and never inside the call that
 *    started the operation: an operation that finishes at once is completed
 *    on the next reactor turn. A completion becomes visible at one moment,
 *    the turn that runs the callbacks: until then the future reads
 *    @ref NXL_IN_PROG (nxl_future_error() "", nxl_future_peer() NULL) and so
 *    does its transfer (nxl_xfer_status(); a re-post returns
 *    @ref NXL_ERR_REPOST_ACTIVE), whatever the transport already did; a
 *    cancel, a release of the transfer or the agent's teardown before then
 *    completes it with @ref NXL_ERR_CANCELED. A future with no callback
 *    becomes visible on that turn too.
 * 4. The library holds the future until its callbacks have returned. Calls
 *    that start an operation take an optional @c nxl_future_t **out: when it
 *    is NULL the future is released by the library after its callback; when
 *    it is not, the caller owns one reference and gives it back with
 *    nxl_future_release() — inside the callback too.
 * 5. For a WRITE with a notification, the notification reaches the target
 *    only after all of the transfer's data is visible there.
 * 6. A transfer can be posted again once its previous post completed;
 *    posting while one is in flight returns @ref NXL_ERR_REPOST_ACTIVE.
 * 7. A WRITE completes with @ref NXL_SUCCESS only when all of its bytes are
 *    visible in the target's memory, and a READ only when all of its bytes
 *    are in the initiator's: whoever learns of the completion (the
 *    callback, nxl_future_wait(), a message the application sends after
 *    it) may read them there. (The one exception is a parameter that says
 *    it trades this away: LIBFABRIC's @c am_write_max, off by default.)
 *
 * # Threads
 *
 * By default an agent belongs to the thread that runs its reactor: every
 * call on an agent, on its transfers and on its futures must be made from
 * that thread (as with libevent's event_base and hiredis' contexts).
 * Different agents may live on different threads. Callbacks always run on
 * the reactor thread.
 *
 * Threaded mode (nxl_agent_config_t.threaded = 1): the agent makes a loop
 * of its own (an epoll set, as NXL_LOOP_FD agents have; no libevent base:
 * nxl_agent_base() is NULL) and a thread that runs it, from
 * nxl_agent_create() until nxl_agent_destroy(). Then:
 *
 * - Every call on the agent, its backends, prepared lists, transfers and
 *   futures may be made from any thread, with the default mode's results,
 *   and each thread's calls take effect in the order it made them. The
 *   agent's lock makes them one at a time: the reactor holds it for each
 *   of its turns and lets it go while it sleeps. A call made from another
 *   thread while the reactor sleeps runs on the calling thread itself, as
 *   the reactor would run it: posts of host memory, notification sends,
 *   nxl_prep(), nxl_prep_strided(), nxl_xfer_make(), releases, cancels and the status calls —
 *   when every transport of the agent takes calls from any thread (UCX
 *   and LIBFABRIC do; see doc/design.md, "Threads"). Other calls, and every call of
 *   an agent with another transport, run on the reactor thread and the
 *   caller waits for the result. Releases and cancels
 *   (nxl_future_release(), nxl_future_cancel(), nxl_xfer_release(),
 *   nxl_prepped_release()) never wait for the reactor: they return at
 *   once and take effect before the thread's next call on the agent.
 * - nxl_xfer_post() from another thread never waits for a reactor turn
 *   either. Run on the calling thread, it is the default mode's post (a
 *   transfer the transport finishes inside it, and that has no callback,
 *   is settled when the call returns). When the reactor is busy (or the
 *   post is not one that runs there), the post is queued: what refuses a
 *   post at once in the default mode (a post in flight:
 *   NXL_ERR_REPOST_ACTIVE; a peer invalidated, regions revoked) is checked
 *   on the calling thread when the agent's lock is free, and otherwise
 *   by the reactor; it returns NXL_SUCCESS with the future once the post
 *   is queued, and the transfer is in flight from then on. What fails when
 *   the reactor runs it (the peer lost meanwhile, the transport refusing
 *   it) completes the future with that status, its sentence in
 *   nxl_future_error(), and its callbacks run as for any completion.
 * - Callbacks (completions, notifications, log lines) run on the reactor
 *   thread, never on the calling thread, also for calls that ran on the
 *   calling thread. A callback may call the API (the call runs directly,
 *   no hand-over); a callback that blocks holds the agent's lock and so
 *   stalls the agent and every thread's calls but posts and releases.
 * - nxl_future_wait() from another thread sleeps (no polling) until the
 *   future settles (rule 3: its callbacks ran) or the timeout passes; from
 *   a callback it returns NXL_ERR_NOT_ALLOWED. nxl_agent_run() and
 *   nxl_agent_run_once() return NXL_ERR_NOT_ALLOWED; nxl_agent_stop() does
 *   nothing.
 * - nxl_agent_last_error() called from another thread gives the sentence
 *   of the last failed call this thread made on the agent; a failure that
 *   happens later, asynchronously, leaves its sentence in nxl_future_error().
 * - Ownership does not change with threads: the reference a call hands out
 *   through @c out belongs to whoever holds the pointer, on any thread,
 *   until it is released; a handle released by one thread must not be used
 *   by another afterwards (as with free()), and a transfer released while
 *   another thread posts it is such a use. Two threads posting one transfer
 *   at once: one post starts, the other returns NXL_ERR_REPOST_ACTIVE.
 *   Strings a call returns (nxl_future_error(), nxl_future_peer()) live as
 *   long as the future. As in the default mode, a future still held when
 *   its agent is destroyed stays valid (status, error, release) and is
 *   then its holder's alone. Arrays and strings passed in are read during the
 *   call only, as in the default mode.
 * - nxl_agent_destroy() may be called from any thread but the reactor
 *   thread (from a callback it logs an error and leaves the agent alone):
 *   pending futures complete with NXL_ERR_CANCELED, their callbacks run on
 *   the reactor thread exactly once, then the thread is joined. Calls made
 *   by other threads once destroy began are a use after free.
 *
 * The default mode costs nothing for this: each call tests one pointer.
 * A call from another thread that runs there costs the lock (and, when it
 * leaves the reactor work, an eventfd write); one handed over costs a
 * queue append under a mutex, an eventfd write per batch of calls and a
 * semaphore wake-up (doc/perf/README.md, "Threads", has the numbers).
 * With NXL_THREADED_DIRECT=0 in the environment, every call is handed
 * over.
 *
 * # Errors
 *
 * Every call that can fail returns an @ref nxl_status_t. A failing call also
 * leaves one sentence in nxl_agent_last_error() naming the transport, the
 * call and what to try; an operation that fails asynchronously leaves its
 * sentence in nxl_future_error() (and in nxl_agent_last_error()).
 */
#ifndef NXL_H
#define NXL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(NXL_BUILDING) && defined(__GNUC__)
#define NXL_API __attribute__((visibility("default")))
#else
#define NXL_API
#endif

struct event_base;

/** Version of this header: major * 10000 + minor * 100 + patch. */
#define NXL_VERSION_NUM 100

/**
 * The status codes: NIXL's names and values. X(name, value, sentence).
 * Values are never renumbered; retired codes stay as NXL_ERR_OBSOLETEnn.
 * NXL_ERR_TIMEOUT (-13) is nxl's own, after NIXL's last: a transfer whose
 * deadline passed (nxl_xfer_opts_t.deadline_ms).
 */
#define NXL_STATUS_MAP(X)                                                      \
    X(IN_PROG, 1, "operation in progress")                                     \
    X(SUCCESS, 0, "success")                                                   \
    X(ERR_NOT_POSTED, -1, "transfer was never posted")                         \
    X(ERR_INVALID_PARAM, -2, "invalid parameter")                              \
    X(ERR_BACKEND, -3, "transport (backend) error")                            \
    X(ERR_NOT_FOUND, -4, "not found")                                          \
    X(ERR_MISMATCH, -5, "mismatch or malformed metadata")                      \
    X(ERR_NOT_ALLOWED, -6, "operation not allowed")                            \
    X(ERR_REPOST_ACTIVE, -7, "transfer is still in flight")                    \
    X(ERR_UNKNOWN, -8, "unknown error")                                        \
    X(ERR_NOT_SUPPORTED, -9, "not supported")                                  \
    X(ERR_REMOTE_DISCONNECT, -10, "remote agent disconnected")                 \
    X(ERR_CANCELED, -11, "operation canceled")                                 \
    X(ERR_NO_TELEMETRY, -12, "telemetry not enabled")                         \
    X(ERR_TIMEOUT, -13, "deadline passed before the operation completed")

/** Status of every call and every completed operation. */
typedef enum nxl_status {
#define NXL_STATUS_ENUM_(name, value, text) NXL_##name = value,
    NXL_STATUS_MAP(NXL_STATUS_ENUM_)
#undef NXL_STATUS_ENUM_
} nxl_status_t;

/** @return a sentence describing @p st ("unknown status" for other values). */
NXL_API const char *nxl_strerror(nxl_status_t st);
/** @return the code's name without prefix, e.g. "ERR_CANCELED". */
NXL_API const char *nxl_status_name(nxl_status_t st);
/** @return the library's version string, e.g. "0.1.0". */
NXL_API const char *nxl_version(void);

/** Memory types (NIXL's segment types). */
typedef enum nxl_mem {
    NXL_DRAM = 0, /**< host memory */
    NXL_VRAM = 1, /**< GPU memory; dev_id is the CUDA device */
    NXL_BLK = 2,  /**< block device range */
    NXL_OBJ = 3,  /**< object in an object store */
    NXL_FILE = 4, /**< file range; dev_id is an fd */
    NXL_MEM_TYPES
} nxl_mem_t;

/**
 * A flag OR'ed into the memory type of a local descriptor list
 * (nxl_dlist_t.type, or the type argument of nxl_prep()): lazy
 * registration. A DRAM descriptor that no region the application
 * registered holds is registered on first use, through the agent's cache
 * of such registrations, instead of failing with NXL_ERR_NOT_FOUND. The
 * agent option nxl_agent_config_t.auto_register does the same for every
 * local DRAM list. Host memory (DRAM) only: with another type the list is
 * refused (NXL_ERR_INVALID_PARAM); a list of a remote agent ignores it.
 * Strided lists (nxl_prep_strided()) are not registered lazily: their
 * runs must lie in registered regions, and the flag is refused there.
 *
 * The cache registers, with every transport of the agent that serves
 * DRAM, the pages around each run of the list's descriptors that lie
 * outside registered memory, and keeps them for the next lists. Its
 * entries are the agent's own: they are not in the metadata, so peers
 * never reach them. Each entry is held by the prepared lists and
 * transfers that use it and is never deregistered while one holds it.
 * The cache is bounded by nxl_agent_config_t.auto_register_limit: before
 * an entry is added, idle entries are deregistered, least recently used
 * first, until it fits (entries in use are not: the cache exceeds the
 * limit only while the entries in use alone exceed it).
 *
 * Memory unmapped and mapped again at the same address (munmap, mmap
 * MAP_FIXED, free() returning memory to the system) is other memory: the
 * cache learns of each unmap from UCX's memory hooks (libucm, with UCX in
 * the process) and drops the entries it touched before the next lookup,
 * so that a transfer moves the bytes mapped now. Where no such events are
 * to be had (no UCX transport loaded, UCX_MEM_EVENTS=no, or
 * NXL_AUTO_REGISTER_EVENTS=0 in the environment), an entry is reused only
 * while a prepared list or transfer holds it, and re-registered
 * otherwise. Either way, memory must stay mapped while a prepared list or
 * transfer that uses it exists, as registered memory must. Counters:
 * nxl_stats_t.autoreg_*. Added after NXL_VERSION_NUM 100: an older
 * library refuses the flag with NXL_ERR_INVALID_PARAM.
 */
#define NXL_DESC_AUTO_REGISTER 0x100

/** @return "DRAM", "VRAM", "BLK", "OBJ", "FILE", or "?" */
NXL_API const char *nxl_mem_name(nxl_mem_t t);

/** Direction of a transfer, seen from the initiator. */
typedef enum nxl_op {
    NXL_READ = 0, /**< remote → local */
    NXL_WRITE = 1 /**< local → remote */
} nxl_op_t;

typedef struct nxl_agent nxl_agent_t;
typedef struct nxl_backend nxl_backend_t;
typedef struct nxl_prepped nxl_prepped_t;
typedef struct nxl_xfer nxl_xfer_t;
typedef struct nxl_future nxl_future_t;

/** Log levels; the level also comes from $NXL_LOG_LEVEL (a name or number). */
typedef enum nxl_log_level {
    NXL_LOG_NONE = 0,
    NXL_LOG_ERROR = 1,
    NXL_LOG_WARN = 2,
    NXL_LOG_INFO = 3,
    NXL_LOG_DEBUG = 4,
    NXL_LOG_TRACE = 5
} nxl_log_level_t;

/** Receives each log line (no trailing newline). */
typedef void (*nxl_log_cb)(nxl_log_level_t level, const char *msg, void *arg);

/** A key/value parameter for nxl_backend_create(). */
typedef struct nxl_param {
    const char *key;
    const char *value;
} nxl_param_t;

/**
 * One descriptor. For DRAM/VRAM an address range on device @c dev_id; for
 * FILE @c addr is the offset and @c dev_id an fd; @c meta / @c meta_len carry
 * what a memory type needs beyond that (a path, an object key).
 */
typedef struct nxl_desc {
    uintptr_t addr;
    size_t len;
    uint64_t dev_id;
    const void *meta;
    size_t meta_len;
} nxl_desc_t;

/** A list of descriptors of one memory type: a view, the array stays the caller's. */
typedef struct nxl_dlist {
    nxl_mem_t type;
    const nxl_desc_t *descs;
    size_t n;
} nxl_dlist_t;

/**
 * A strided descriptor list (KV blocks of one size at a fixed distance,
 * and layers of them): @c count elements of @c len bytes, element i at
 * @c base + i * @c stride, repeated @c outer_count times (0 reads as 1),
 * run j starting at @c base + j * @c outer_stride. Its element k is
 * element k % count of run k / count: run 0's elements first. For FILE,
 * @c base is an offset. See nxl_prep_strided().
 *
 * A stride smaller than @c len (0 included: every element the same
 * range) makes elements overlap, as overlapping descriptors given to
 * nxl_prep() do: allowed, and a transfer that writes two overlapping
 * elements leaves the bytes of one of them, unspecified which.
 */
typedef struct nxl_strided {
    uintptr_t base;      /**< address (or offset) of element 0 */
    size_t len;          /**< bytes of each element (not 0 for DRAM and VRAM) */
    size_t stride;       /**< bytes from one element to the next */
    size_t count;        /**< elements of a run (at least 1) */
    size_t outer_count;  /**< runs (0 or 1: one) */
    size_t outer_stride; /**< bytes from one run to the next */
    uint64_t dev_id;     /**< as nxl_desc_t's */
} nxl_strided_t;

/**
 * Agent configuration. Initialise with nxl_agent_config_init(), then set
 * fields: the leading @c size lets later versions add fields.
 */
typedef struct nxl_agent_config {
    size_t size;              /**< sizeof(nxl_agent_config_t) */
    const char *name;         /**< agent name, unique among peers (required) */
    struct event_base *base;  /**< the application's base to embed into; NULL: own one */
    const char *listen_addr;  /**< metadata listener address; NULL: no listener */
    uint16_t listen_port;     /**< its port; 0: an ephemeral one, see nxl_agent_listen_port() */
    int log_level;            /**< nxl_log_level_t, or -1 (default): $NXL_LOG_LEVEL, else NONE */
    nxl_log_cb log_cb;        /**< NULL: lines go to stderr */
    void *log_arg;
    unsigned busy_poll_us;    /**< keep polling transports this long after activity (0: sleep at once) */
    const char *etcd_endpoints; /**< "http://host:port[,...]" of etcd; NULL: $NXL_ETCD_ENDPOINTS */
    unsigned io_timeout_ms;   /**< metadata exchange timeout (0: 10000) */
    const char *etcd_prefix;  /**< key prefix (NULL: "/nxl/agents/") */
    unsigned etcd_lease_ttl_s; /**< lease of published keys (0: 10 s); a crashed agent's keys expire after it */
    const char *metrics_addr; /**< "host:port" to serve Prometheus text on /metrics from the
                                   reactor (port 0: ephemeral, see nxl_agent_metrics_port());
                                   NULL: $NXL_METRICS_ADDR, else none */
    /* Bounds on what peers can make the agent hold (0: the default). */
    unsigned max_frame_bytes;  /**< largest metadata frame accepted (0: 256 MiB) */
    unsigned max_md_clients;   /**< listener connections open at once (0: 256); more are closed at once */
    unsigned max_md_clients_per_host; /**< of them from one address (0: 32) */
    unsigned max_peers;        /**< remote agents known at once (0: 65536); loading more is refused */
    unsigned max_queued_notifs; /**< notifications waiting for nxl_notifs_drain() (0: 1048576);
                                     more are dropped, counted and logged */
    /** Shared secret (at least 16 bytes) of the agents allowed to exchange
     * metadata with this one: every frame is signed and checked (HMAC-SHA256,
     * timestamp, nonce); anything else is refused with NXL_ERR_NOT_ALLOWED.
     * NULL: $NXL_AUTH_SECRET, else none (the listener trusts its network). */
    const char *auth_secret;
    const char *auth_key_file; /**< the secret read from a file instead ($NXL_AUTH_KEY_FILE) */
    /** TLS for the metadata exchange, listener and client, both sides
     * verified: this agent's certificate (PEM, with its chain) and key, and
     * the CA that signed its peers' certificates. A peer is accepted when
     * the CA signed its certificate (names are not checked). All three or
     * none; NULL: $NXL_TLS_CERT_FILE, $NXL_TLS_KEY_FILE, $NXL_TLS_CA_FILE,
     * else no TLS. Confidentiality on the wire; with auth_secret as well,
     * each frame is also signed. */
    const char *tls_cert_file;
    const char *tls_key_file;
    const char *tls_ca_file;
    /** 1: the agent runs its reactor on a thread of its own and every call
     * may be made from any thread (see "Threads" above); @c base must be
     * NULL. 0 (default): the agent belongs to the thread that runs it. */
    int threaded;
    /** The loop the agent runs on (nxl_loop_kind_t): NXL_LOOP_LIBEVENT
     * (default: @c base, or a base of its own), or NXL_LOOP_FD: no libevent
     * base; another loop watches nxl_agent_backend_fd() (see "Embedding in
     * any event loop" below). Left at NXL_LOOP_LIBEVENT with @c base NULL
     * and not @c threaded, the environment variable NXL_LOOP chooses:
     * "fd" is NXL_LOOP_FD, "libevent" (or unset, or empty) the default,
     * anything else makes nxl_agent_create() fail with
     * NXL_ERR_INVALID_PARAM. */
    int loop;
    /** 1: every local DRAM list (not strided lists) registers on first use what no region
     * holds, as with NXL_DESC_AUTO_REGISTER. 0 (default): $NXL_AUTO_REGISTER
     * ("1": on), else only lists with the flag. -1: only lists with the flag. */
    int auto_register;
    /** Bytes of host memory the lazy registrations keep (0:
     * $NXL_AUTO_REGISTER_LIMIT, a number of bytes with an optional suffix
     * k, m or g; else 4 GiB). See NXL_DESC_AUTO_REGISTER. */
    size_t auto_register_limit;
    /** Automatic recovery of lost peers (see "Peer lifecycle" below): 1
     * (nxl_agent_config_init() sets it) finds a peer that went DOWN again,
     * by fetching its metadata again from the address nxl_md_fetch() got it
     * from, or through the etcd watch when it came from etcd; 0: off (the
     * application loads it again itself). An older caller's smaller config
     * reads as 1. */
    int peer_recovery;
} nxl_agent_config_t;

/** What an agent's reactor runs on (nxl_agent_config_t.loop). */
typedef enum nxl_loop_kind {
    NXL_LOOP_LIBEVENT = 0, /**< a libevent event_base: the application's or the agent's own */
    NXL_LOOP_FD = 1,       /**< one descriptor and a timeout, for any loop (libuv, epoll) */
} nxl_loop_kind_t;

/**
 * Fills @p cfg with defaults and sets @c size to @p size: call it through
 * the macro nxl_agent_config_init(), which passes sizeof the struct as the
 * caller's header declares it. A program built against an older header
 * and run with a newer libnxl is so never written past its struct, and the
 * library reads only the fields that fit in @c size.
 */
NXL_API void nxl_agent_config_init_size(nxl_agent_config_t *cfg, size_t size);
/**
 * The function programs built before the macro call: it knows only the
 * fields up to @c metrics_addr, @c auth_secret, @c auth_key_file and the
 * limits (libnxl -version-info 3), and initialises that much.
 */
NXL_API void(nxl_agent_config_init)(nxl_agent_config_t *cfg);
/** Fills @p cfg with defaults (see nxl_agent_config_init_size()). */
#define nxl_agent_config_init(cfg) nxl_agent_config_init_size((cfg), sizeof(*(cfg)))

/**
 * Creates an agent.
 * @param [in]  cfg  configuration (name required)
 * @param [out] out  the agent
 * @return NXL_SUCCESS; NXL_ERR_INVALID_PARAM (no name, bad config size, bad
 *         listen address); NXL_ERR_BACKEND (event base or listener failed:
 *         the port is taken). On failure *out is NULL and a sentence is
 *         available from nxl_agent_last_error(NULL).
 */
NXL_API nxl_status_t nxl_agent_create(const nxl_agent_config_t *cfg, nxl_agent_t **out);

/**
 * Destroys an agent: every pending future completes with NXL_ERR_CANCELED
 * (its callbacks run inside this call), transfers and prepared lists are
 * released, transports closed. Must not be called from a callback.
 */
NXL_API void nxl_agent_destroy(nxl_agent_t *a);

/** @return the agent's name. */
NXL_API const char *nxl_agent_name(const nxl_agent_t *a);
/** @return the event base the agent runs on (its own or the application's). */
NXL_API struct event_base *nxl_agent_base(nxl_agent_t *a);
/** @return the port the metadata listener is bound to, 0 if none. */
NXL_API uint16_t nxl_agent_listen_port(const nxl_agent_t *a);

/**
 * Runs the reactor until nxl_agent_stop().
 * @return NXL_SUCCESS; NXL_ERR_NOT_ALLOWED when called from a callback.
 */
NXL_API nxl_status_t nxl_agent_run(nxl_agent_t *a);
/**
 * Runs one reactor turn, waiting at most @p timeout_ms for an event
 * (0: do not wait; negative: wait without limit).
 * @return NXL_SUCCESS; NXL_ERR_NOT_ALLOWED when called from a callback.
 */
NXL_API nxl_status_t nxl_agent_run_once(nxl_agent_t *a, int timeout_ms);
/** Makes nxl_agent_run() return after the current turn. */
NXL_API void nxl_agent_stop(nxl_agent_t *a);

/**
 * @name Embedding in any event loop
 *
 * An agent made with nxl_agent_config_t.loop = NXL_LOOP_FD has no libevent
 * base: it keeps its watches in an epoll set of its own and its timers in a
 * timerfd inside that set, and the application's loop drives it through one
 * descriptor, as with libuv's uv_backend_fd() and uv_backend_timeout():
 *
 * - Watch nxl_agent_backend_fd() for reading (level-triggered: it stays
 *   readable while the agent has something to do; edge-triggered watching
 *   works too, because every nxl_agent_run_once(a, 0) empties what was
 *   ready). When it is readable, or when nxl_agent_backend_timeout()
 *   milliseconds have passed, call nxl_agent_run_once(a, 0): it runs what
 *   is ready (completions, notifications, transports' work, due timers)
 *   and returns without waiting. While a transport polls (work left ready
 *   at once after every turn, as UCX's worker spins for a while after
 *   activity), it runs further turns for up to 50 microseconds before it
 *   returns, as libevent's loop would: the application's loop then wakes
 *   once per such slice rather than once per turn.
 * - Ask nxl_agent_backend_timeout() again after every run_once and after
 *   every call on the agent (a post may arm a timer): it is the time until
 *   the next timer (0: work is ready now; -1: no timer). It must be
 *   honoured, as libuv's: work that a turn leaves ready at once (a
 *   transport polling, a delivery) is reported by a timeout of 0, not by
 *   the descriptor (setting the timerfd for it would cost more than the
 *   turn). A timer that comes due later, and work that a call made outside
 *   a turn leaves, make the descriptor readable too.
 * - Callbacks run inside nxl_agent_run_once(), on the thread that calls it,
 *   which must be the agent's thread (as in the default mode). From a
 *   callback, run_once (and nxl_agent_run()) return NXL_ERR_NOT_ALLOWED:
 *   the loop is not re-entered.
 * - An application that stops calling run_once stops the agent: nothing
 *   is lost (completions wait in the kernel and in the transports), but
 *   nothing progresses either, and peers may time out.
 * - nxl_agent_run() and nxl_agent_run_once() with a timeout also work:
 *   they wait on the descriptor themselves.
 *
 * The libuv adapter (<nxl/uv.h>) is written on these. Another loop needs
 * the same ~60 lines: a read watch on the descriptor and a one-shot timer,
 * both calling run_once and re-arming the timer from backend_timeout.
 * @{
 */
/**
 * @return the descriptor to watch for reading (valid until the agent is
 *         destroyed); -1 when the agent does not run on NXL_LOOP_FD (its
 *         libevent base, or threaded mode), with a sentence in
 *         nxl_agent_last_error().
 */
NXL_API int nxl_agent_backend_fd(nxl_agent_t *a);
/**
 * @return milliseconds until the agent's next timer (rounded up), 0 when
 *         something is ready now, -1 when no timer is armed or the agent
 *         does not run on NXL_LOOP_FD.
 */
NXL_API int nxl_agent_backend_timeout(nxl_agent_t *a);
/**
 * Marks the agent as driven by an adapter (the libuv adapter calls it), so
 * that a second attachment is refused instead of running the agent from
 * two loops. @p who names the adapter; NULL detaches.
 * @return NXL_SUCCESS; NXL_ERR_NOT_ALLOWED (already attached: the sentence
 *         names the adapter; or not an NXL_LOOP_FD agent).
 */
NXL_API nxl_status_t nxl_agent_attach(nxl_agent_t *a, const char *who);
/** @} */

/**
 * @return the last error sentence for @p a, or for the last failed
 *         nxl_agent_create() of this thread when @p a is NULL; "" if none.
 */
NXL_API const char *nxl_agent_last_error(const nxl_agent_t *a);

/** What this build can create, and why not where it cannot. */
typedef struct nxl_plugin_info {
    const char *name;       /**< "UCX", ... */
    int available;          /**< 1: nxl_backend_create() can try it */
    char reason[160];       /**< why not, or what it offers */
    uint32_t mem_mask;      /**< bit (1 << nxl_mem_t) per memory type served */
} nxl_plugin_info_t;

/**
 * Lists the transports this build knows: those built into libnxl, those
 * loaded from modules, and, unavailable with the reason, a module that is
 * present but cannot be used (the dlerror() text and what to install, or
 * another transport ABI) and a transport configure did not build. Modules
 * (libnxl-\<name\>.so) are looked for once per process, on the first call of
 * this or nxl_backend_create(), in the folders of the environment variable
 * NXL_PLUGIN_DIR (colon-separated, searched first) and then in
 * $(libdir)/nxl/transports-\<NXLT_ABI_VERSION\>. Thread-safe.
 * Probing CUDA loads the CUDA runtime and initialises the driver in this
 * process (as any CUDA call does): a child forked afterwards cannot use
 * CUDA, so fork first.
 * @param [out] out  array of @p cap entries (may be NULL when cap is 0)
 * @param [in]  cap  its size
 * @return how many transports there are (may exceed @p cap).
 */
NXL_API size_t nxl_plugins_available(nxl_plugin_info_t *out, size_t cap);

/** One parameter a transport takes in nxl_backend_create(). */
typedef struct nxl_param_info {
    const char *key;  /**< "am_write_max" */
    const char *def;  /**< the default as a value the transport takes ("8192"); NULL when
                           there is none or it is chosen at creation (see doc) */
    const char *doc;  /**< one line: what it sets, the values it takes */
} nxl_param_info_t;

/**
 * More of one transport than nxl_plugin_info_t holds: nxl_plugin_detail().
 * The leading @c size lets later versions append fields.
 */
typedef struct nxl_plugin_detail {
    size_t size;                    /**< set by the caller: sizeof(nxl_plugin_detail_t) */
    uint32_t caps;                  /**< the NXLT_CAP_* bits of <nxl/transport.h> */
    const char *module;             /**< the module file it comes (or failed to come) from;
                                         NULL: built into libnxl, or not built */
    const nxl_param_info_t *params; /**< what nxl_backend_create() takes, as the transport
                                         itself lists it (it refuses other keys); NULL when
                                         it lists none (a module of an older libnxl) */
    size_t nparams;
} nxl_plugin_detail_t;

/**
 * Describes the transport @p name as this process finds it (the list of
 * nxl_plugins_available()): its capabilities, its module file, and the
 * parameters it takes with their defaults, from the transport's own table
 * — the same one nxl_backend_create() checks keys against. Pointers stay
 * valid for the life of the process. Thread-safe.
 * @param [in]  name  a name nxl_plugins_available() lists ("UCX"; any case)
 * @param [out] out   @c out->size set by the caller; fields past it are not written
 * @return NXL_SUCCESS; NXL_ERR_NOT_FOUND (no transport of that name: not
 *         even configure knows it); NXL_ERR_INVALID_PARAM (@p out or
 *         @p name NULL, or @c out->size 0). A transport that is known but
 *         cannot be used here is described as far as it is known (no
 *         capabilities or parameters without its table).
 */
NXL_API nxl_status_t nxl_plugin_detail(const char *name, nxl_plugin_detail_t *out);

/**
 * What this libnxl was built with: nxl_build_info(). The leading @c size
 * lets later versions append fields. Strings are the library's own.
 */
typedef struct nxl_build_info {
    size_t size;              /**< set by the caller: sizeof(nxl_build_info_t) */
    const char *version;      /**< nxl_version() */
    const char *options;      /**< configure's choices: "debug=no auth=yes tls=yes etcd=yes" */
    const char *transports;   /**< how configure built each transport it knows:
                                   "UCX=built-in LIBFABRIC=module CUDA=no ..." */
    const char *module_dirs;  /**< the folders searched for transport modules, in order,
                                   colon-separated: those of NXL_PLUGIN_DIR (as this process
                                   read it), then the install folder */
    unsigned transport_abi;   /**< NXLT_ABI_VERSION of this libnxl (names the module folder) */
} nxl_build_info_t;

/**
 * Describes this build of libnxl (what a bug report should quote, with
 * nxl_plugins_available()); the nxl_info program prints it. Thread-safe.
 * @param [out] info  @c info->size set by the caller; fields past it are not written
 */
NXL_API void nxl_build_info(nxl_build_info_t *info);

/**
 * Creates a transport in the agent. Creation order is preference order.
 * @param [in]  name    "UCX", ...
 * @param [in]  params  key/value parameters (each transport's man page lists them: nxl-ucx(7), ...)
 * @param [out] out     the backend (may be NULL)
 * @return NXL_SUCCESS; NXL_ERR_NOT_FOUND (no such transport in this build,
 *         or its module is missing or does not load); NXL_ERR_MISMATCH (its
 *         module was built for another transport ABI, or is broken);
 *         NXL_ERR_INVALID_PARAM (unknown or bad parameter); NXL_ERR_NOT_ALLOWED
 *         (already created); NXL_ERR_BACKEND (the library underneath failed:
 *         the sentence lists what it found and what to check).
 */
NXL_API nxl_status_t nxl_backend_create(nxl_agent_t *a, const char *name,
                                        const nxl_param_t *params, size_t nparams,
                                        nxl_backend_t **out);
/** @return the backend's transport name. */
NXL_API const char *nxl_backend_name(const nxl_backend_t *b);
/** @return the agent's backend named @p name, or NULL. */
NXL_API nxl_backend_t *nxl_backend_get(nxl_agent_t *a, const char *name);

/**
 * Registers regions with one backend, or with every backend that serves
 * @p type when @p b is NULL. Registering an already registered region with
 * another backend adds that backend to it.
 *
 * The registration cache (DRAM and VRAM; off with NXL_REG_CACHE=0): a
 * range inside a region already registered (same type and device, with
 * those backends) is a slice of it: it reuses the region's registration
 * instead of making one (10,000 slices of one registered region cost
 * about one registration), and is deregistered exactly as registered,
 * like any region. Slices are not in the metadata: peers reach their
 * bytes through the region, and deregistering a slice revokes nothing at
 * them. A region deregistered while slices of it remain stays registered
 * (and reachable by peers) until the last one is deregistered. A range
 * that overlaps registered regions without lying inside one registers
 * their union once: the regions keep their own registrations (descriptors
 * and keys already handed out stay valid) and the metadata lists the
 * union instead. A registration is reused only while the application
 * still holds a registration covering it: memory must stay valid until it
 * is deregistered, so memory freed and mapped again at the same address
 * is never served by a registration of what was there before.
 * @return NXL_SUCCESS; NXL_ERR_INVALID_PARAM (zero length, NULL address);
 *         NXL_ERR_NOT_SUPPORTED (no backend serves @p type);
 *         NXL_ERR_NOT_ALLOWED (already registered with that backend; with
 *         the cache off, or for other memory types, or regions of
 *         different backends or from nxl_mem_alloc(): overlapping another
 *         region without matching it); NXL_ERR_BACKEND. All or nothing.
 */
NXL_API nxl_status_t nxl_mem_register(nxl_agent_t *a, nxl_mem_t type, const nxl_desc_t *descs,
                                      size_t n, nxl_backend_t *b);
/**
 * Deregisters regions exactly as registered (a slice of the registration
 * cache too: see nxl_mem_register()).
 * @return NXL_SUCCESS; NXL_ERR_NOT_FOUND (a region that was never registered:
 *         nothing changes). Prepared lists and transfers of this agent
 *         that use a region keep its registration alive until they are
 *         released; remote agents are refused it from now on (a region
 *         with slices of the registration cache inside it: once the last
 *         of them is deregistered): those this
 *         agent is connected to through a transport whose target does not
 *         check accesses itself (UCX) are told at once (doc/security.md,
 *         "Remote access").
 */
NXL_API nxl_status_t nxl_mem_deregister(nxl_agent_t *a, nxl_mem_t type, const nxl_desc_t *descs,
                                        size_t n);

/**
 * Allocates @p len bytes of @p type memory and registers it. DRAM: the
 * first transport (in preference order) that allocates it does: UCX maps
 * it itself, which its shared-memory transports can write one-sided (from
 * 2 MiB on, 2 MiB-aligned on 2 MiB pages where the kernel can: nxl-ucx(7),
 * thp_collapse); CUDA allocates pinned host memory (cudaHostAlloc); without
 * either it is page-aligned host memory, and from 2 MiB on 2 MiB-aligned
 * with transparent huge pages advised (fewer DMA segments per O_DIRECT
 * request).
 * VRAM: device memory of CUDA device @p dev_id (cudaMalloc, through the
 * CUDA transport).
 * @return NXL_SUCCESS; NXL_ERR_INVALID_PARAM; NXL_ERR_NOT_SUPPORTED (no
 *         transport of the agent allocates @p type: the sentence says which
 *         to create); NXL_ERR_BACKEND (the allocation failed: out of device
 *         memory, no such device).
 */
NXL_API nxl_status_t nxl_mem_alloc(nxl_agent_t *a, nxl_mem_t type, size_t len, uint64_t dev_id,
                                   void **ptr);
/**
 * Deregisters and frees memory from nxl_mem_alloc() (DRAM or VRAM). Memory
 * still used by prepared lists or transfers is freed when they are released.
 * @return NXL_SUCCESS; NXL_ERR_NOT_FOUND if unknown; NXL_ERR_NOT_ALLOWED
 *         while ranges registered inside it (slices) remain: deregister
 *         them first.
 */
NXL_API nxl_status_t nxl_mem_free(nxl_agent_t *a, void *ptr);

/** What nxl_mem_query() found out about one descriptor. */
typedef struct nxl_query {
    int exists;    /**< 1: the file, block device (or object) exists */
    uint64_t size; /**< its size in bytes; 0 when it does not exist */
} nxl_query_t;

/**
 * Asks a transport about storage without registering it: whether each
 * descriptor's file or block device exists, and its size. For FILE and BLK
 * (POSIX transport) a descriptor names the file as registration does: by
 * an open fd in @c dev_id, or by "path=..." in @c meta; @c addr and @c len
 * are not used.
 * @param [in]  b        the backend to ask; NULL: the first that serves
 *                       @p type and answers queries
 * @param [out] results  @p n entries, one per descriptor
 * @return NXL_SUCCESS (a missing file is a result, exists = 0, not an
 *         error); NXL_ERR_INVALID_PARAM (NULL arrays, bad type or meta);
 *         NXL_ERR_NOT_SUPPORTED (no backend answers queries about @p type);
 *         NXL_ERR_NOT_ALLOWED, NXL_ERR_BACKEND (the system refused to say:
 *         permissions, I/O error). On error the results are unspecified.
 */
NXL_API nxl_status_t nxl_mem_query(nxl_agent_t *a, nxl_mem_t type, const nxl_desc_t *descs,
                                   size_t n, nxl_backend_t *b, nxl_query_t *results);

/* ---------------------------------------------------------------- metadata */

/**
 * Serialises this agent's metadata (connection info and every region).
 * @param [out] blob  malloc'd JSON text, free with nxl_free()
 * @param [out] len   its length
 */
NXL_API nxl_status_t nxl_md_local(nxl_agent_t *a, void **blob, size_t *len);
/**
 * Partial metadata: connection info plus the regions that hold @p descs
 * (connection info only when @p n is 0).
 * @return NXL_SUCCESS; NXL_ERR_NOT_FOUND (a descriptor in no registered region).
 */
NXL_API nxl_status_t nxl_md_local_partial(nxl_agent_t *a, nxl_mem_t type, const nxl_desc_t *descs,
                                          size_t n, void **blob, size_t *len);
/**
 * Partial metadata for strided lists (see nxl_prep_strided()): connection
 * info, the regions that hold the @p n lists, and the lists themselves,
 * four numbers each (base, length, stride, count; and the outer count and
 * stride of a nested one). An agent that loads it keeps the lists for
 * nxl_md_remote_strided(), so that a peer learns where the blocks are
 * without a descriptor per block. Libraries that predate the field
 * ignore it, and metadata without it loads as before.
 * @return NXL_SUCCESS; NXL_ERR_INVALID_PARAM (NULL pointers, more than
 *         1,048,576 lists, a list nxl_prep_strided() refuses: the
 *         sentence says which number); NXL_ERR_NOT_FOUND (a list not
 *         inside one registered region).
 */
NXL_API nxl_status_t nxl_md_local_partial_strided(nxl_agent_t *a, nxl_mem_t type,
                                                  const nxl_strided_t *s, size_t n, void **blob,
                                                  size_t *len);
/**
 * The strided lists that the metadata of @p remote last loaded with them
 * carried (nxl_md_local_partial_strided()): how many into @p *n, the
 * first @p cap of them into @p out, their memory type into @p *type (may
 * be NULL). Give them to nxl_prep_strided() against @p remote.
 * @return NXL_SUCCESS; NXL_ERR_INVALID_PARAM (NULL name or count
 *         pointer, @p out NULL with @p cap > 0); NXL_ERR_NOT_FOUND
 *         (@p remote not loaded, or its metadata carried no strided lists).
 */
NXL_API nxl_status_t nxl_md_remote_strided(nxl_agent_t *a, const char *remote, nxl_mem_t *type,
                                           nxl_strided_t *out, size_t cap, size_t *n);
/**
 * Labels the regions that hold @p descs: the k-th of them (each region
 * counted once, in the order of the descriptors) becomes place k of
 * @p label. The metadata this agent serves afterwards (full and partial)
 * carries each region's label and place, so that a peer that prepared
 * lists against an earlier incarnation of this agent re-binds them by
 * label when this agent restarted and registered its memory at other
 * addresses (see "Peer lifecycle"). A region has one label at most:
 * labelling it again moves it; the regions @p label named before and
 * not now lose it (@p n 0: the label is removed). Deregistering a region
 * drops its label. nxl_md_publish_partial() labels its regions the same
 * way.
 * @return NXL_SUCCESS; NXL_ERR_INVALID_PARAM (no label, one longer than
 *         255 bytes or with a control character, a bad type, NULL
 *         @p descs with @p n > 0); NXL_ERR_NOT_FOUND (a descriptor in no
 *         registered region: nothing changed).
 */
NXL_API nxl_status_t nxl_md_label(nxl_agent_t *a, const char *label, nxl_mem_t type,
                                  const nxl_desc_t *descs, size_t n);
/**
 * Loads a remote agent's metadata (untrusted input: every field is
 * checked). Loading an agent already known replaces what was known of it
 * when the blob carries every region, and adds the regions when it is
 * partial (so that loading a peer's metadata again, after its link
 * failed, reconnects). Nothing changes on failure.
 * @param [out] name_out  the remote agent's name (may be NULL)
 * @return NXL_SUCCESS; NXL_ERR_MISMATCH (malformed: also a raw control
 *         character or an escaped NUL, which would cut a string short, or a
 *         transport's key or connection info shorter than it needs; unknown
 *         version, its name is ours); NXL_ERR_NOT_ALLOWED (a new agent while max_peers are
 *         known); NXL_ERR_BACKEND (a transport refused its part).
 */
NXL_API nxl_status_t nxl_md_load(nxl_agent_t *a, const void *blob, size_t len, char *name_out,
                                 size_t cap);
/**
 * Forgets a remote agent (a DOWN event; no recovery follows: see "Peer
 * lifecycle"; a peer already lost is given up: NXL_SUCCESS, no event, its
 * recovery stops). Prepared lists and transfers naming it stay valid handles
 * until released, and transfers in flight finish, but posting them again
 * fails with NXL_ERR_REMOTE_DISCONNECT; preparing lists against it, or
 * making transfers from lists prepared before, fails with
 * NXL_ERR_NOT_FOUND, until its metadata is loaded again: then they are
 * re-bound to it when its regions are still there.
 * @return NXL_SUCCESS; NXL_ERR_NOT_FOUND.
 */
NXL_API nxl_status_t nxl_md_invalidate(nxl_agent_t *a, const char *remote);
/** @return NXL_SUCCESS if @p remote's metadata is loaded, else NXL_ERR_NOT_FOUND. */
NXL_API nxl_status_t nxl_md_check(nxl_agent_t *a, const char *remote);

/** Completion callback of a future: object, status, user data. */
typedef void (*nxl_done_cb)(nxl_future_t *f, nxl_status_t status, void *arg);

/**
 * Sends this agent's metadata to the listener at @p host : @p port, which
 * loads it. The future succeeds when the peer has loaded it. A host name is
 * resolved off the reactor (glibc's getaddrinfo_a: the resolver and order
 * of getaddrinfo) and every address it gives is tried in turn.
 * @return NXL_SUCCESS (started); NXL_ERR_INVALID_PARAM (no host, an empty
 *         or overlong one, port 0). Completes with NXL_ERR_NOT_FOUND when the
 *         name does not resolve, NXL_ERR_REMOTE_DISCONNECT when nothing
 *         listens at any of its addresses or the connection breaks (the
 *         sentence names each address tried), NXL_ERR_MISMATCH when the peer
 *         refused it.
 */
NXL_API nxl_status_t nxl_md_send(nxl_agent_t *a, const char *host, uint16_t port, nxl_done_cb cb,
                                 void *arg, nxl_future_t **out);
/**
 * Fetches the metadata of the agent listening at @p host : @p port and
 * loads it. @p remote, when not NULL, is the name expected there (a
 * different name completes with NXL_ERR_MISMATCH). The loaded name is then
 * available from nxl_future_peer(). Its wait is bounded by
 * nxl_agent_config_t.io_timeout_ms; nxl_future_set_deadline() on its
 * future sets a shorter one.
 */
NXL_API nxl_status_t nxl_md_fetch(nxl_agent_t *a, const char *remote, const char *host,
                                  uint16_t port, nxl_done_cb cb, void *arg, nxl_future_t **out);
/** Tells the agent listening at @p host : @p port to forget this agent. */
NXL_API nxl_status_t nxl_md_send_invalidate(nxl_agent_t *a, const char *host, uint16_t port,
                                            nxl_done_cb cb, void *arg, nxl_future_t **out);

/* -------------------------------------------------------------- telemetry */

/** Buckets of the latency histogram: bucket k counts transfers whose
 * post-to-completion time was at most 2^k microseconds (k < NXL_STATS_BUCKETS;
 * longer ones only in the count). */
#define NXL_STATS_BUCKETS 24

/**
 * Counters of an agent (or of one of its transports), read with
 * nxl_agent_stats(). Initialise @c size to sizeof(nxl_stats_t): later
 * versions append fields. Counters only grow; peers_known is a gauge.
 */
typedef struct nxl_stats {
    size_t size;                 /**< sizeof(nxl_stats_t) */
    uint64_t xfers_posted;       /**< posts accepted */
    uint64_t xfers_succeeded;    /**< completions by final status (rule 3) */
    uint64_t xfers_failed;
    uint64_t xfers_canceled;
    uint64_t read_bytes[NXL_MEM_TYPES];  /**< READs that succeeded, by local memory type */
    uint64_t write_bytes[NXL_MEM_TYPES]; /**< WRITEs that succeeded, by local memory type */
    uint64_t latency_count;      /**< completed transfers (any status) */
    uint64_t latency_sum_us;     /**< their post-to-completion time, summed */
    uint64_t latency_bucket[NXL_STATS_BUCKETS]; /**< not cumulative: bucket k is (2^(k-1), 2^k] us */
    uint64_t notifs_sent;        /**< notifications (standalone) delivered to the transport */
    uint64_t notifs_failed;
    uint64_t notifs_received;
    uint64_t md_requests;        /**< metadata send/fetch/invalidate requests completed */
    uint64_t md_requests_failed;
    uint64_t md_served;          /**< requests the listener answered */
    uint64_t md_loaded;          /**< remote metadata blobs loaded */
    uint64_t peers_known;        /**< gauge: remote agents known now */
    uint64_t peers_lost;         /**< remote agents forgotten: invalidated or lost */
    uint64_t notifs_dropped;     /**< received while max_queued_notifs were waiting */
    uint64_t md_clients_refused; /**< listener connections closed by a bound or a timeout */
    uint64_t md_auth_refused;    /**< frames refused: unsigned, tampered, replayed, other key */
    /* Lazy registration (NXL_DESC_AUTO_REGISTER), appended: a caller built
     * before them passes the size that ends at autoreg_registered. */
    uint64_t autoreg_registered; /**< ranges registered on first use */
    uint64_t autoreg_reused;     /**< lazy lists prepared without registering anything */
    uint64_t autoreg_evicted;    /**< idle ranges deregistered for the size limit (LRU) */
    uint64_t autoreg_invalidated; /**< ranges dropped: their memory was unmapped, or (no
                                       memory events) they were idle */
    uint64_t autoreg_bytes;      /**< gauge: bytes the lazy registrations hold now */
    /* Appended after the lazy registration's: a caller built before it
     * passes the size that ends at deliveries_direct. */
    uint64_t deliveries_direct;  /**< busy polling: delivery passes run right after a transport's
                                      progress brought them, without a turn of the loop */
} nxl_stats_t;

/**
 * Reads the agent's counters: of every transport together when
 * @p transport is NULL, else of that transport only (transfer counters;
 * the others are the agent's).
 * @return NXL_SUCCESS; NXL_ERR_INVALID_PARAM (NULL, or @c size unknown);
 *         NXL_ERR_NOT_FOUND (no such transport in the agent).
 */
NXL_API nxl_status_t nxl_agent_stats(nxl_agent_t *a, const char *transport, nxl_stats_t *out);
/** @return the port /metrics is served on, 0 when none. */
NXL_API uint16_t nxl_agent_metrics_port(const nxl_agent_t *a);

/* ------------------------------------------------------- etcd discovery
 *
 * With etcd endpoints configured, an agent publishes its metadata under
 * <prefix><agent>/metadata (full) and <prefix><agent>/<label> (partial),
 * attached to a lease the agent keeps alive, so that a crashed agent's keys
 * expire on their own. Fetching a peer's metadata watches the peer's keys
 * afterwards: a new full metadata, or a new partial one under a label
 * fetched before, replaces what was known (a peer restarted under the same
 * name), and its deletion or expiry invalidates the peer —
 * transfers in flight to it complete with NXL_ERR_REMOTE_DISCONNECT (a DOWN
 * event); with nxl_agent_config_t.peer_recovery, metadata it publishes
 * again afterwards is loaded (BACK: see "Peer lifecycle"). All of it runs
 * on the reactor through libcurl's multi interface. */

/**
 * Publishes this agent's full metadata.
 * @return NXL_SUCCESS (started); NXL_ERR_NOT_SUPPORTED (no etcd endpoints,
 *         or built without libcurl). Completes with NXL_ERR_BACKEND when etcd
 *         is unreachable or answers an error (the sentence says which).
 */
NXL_API nxl_status_t nxl_md_publish(nxl_agent_t *a, nxl_done_cb cb, void *arg, nxl_future_t **out);
/** Publishes partial metadata (see nxl_md_local_partial) under @p label,
 * after labelling its regions with it (nxl_md_label()). */
NXL_API nxl_status_t nxl_md_publish_partial(nxl_agent_t *a, const char *label, nxl_mem_t type,
                                            const nxl_desc_t *descs, size_t n, nxl_done_cb cb,
                                            void *arg, nxl_future_t **out);
/** Deletes every key this agent published and revokes its lease. */
NXL_API nxl_status_t nxl_md_unpublish(nxl_agent_t *a, nxl_done_cb cb, void *arg,
                                      nxl_future_t **out);
/**
 * Fetches @p remote's metadata from etcd (@p label NULL: the full one) and
 * loads it, waiting up to @p timeout_ms for it to appear. Completes with
 * NXL_ERR_NOT_FOUND when it did not appear in time. Afterwards the peer's
 * keys are watched (see above).
 */
NXL_API nxl_status_t nxl_md_fetch_etcd(nxl_agent_t *a, const char *remote, const char *label,
                                       int timeout_ms, nxl_done_cb cb, void *arg,
                                       nxl_future_t **out);

/** Frees memory the library handed out (metadata blobs). */
NXL_API void nxl_free(void *p);

/* --------------------------------------------------------------- transfers */

/**
 * Resolves a descriptor list once against registered regions: this
 * agent's own when @p agent is NULL, a loaded remote agent's otherwise (this
 * agent's own name gives loopback transfers within the agent).
 * A local DRAM list with NXL_DESC_AUTO_REGISTER in @p type (or of an agent
 * with auto_register) registers on first use what no region holds.
 * @return NXL_SUCCESS; NXL_ERR_NOT_FOUND (unknown agent, or a descriptor
 *         outside every registered region, or in one its agent has since
 *         deregistered: nothing is created); NXL_ERR_INVALID_PARAM (a DRAM
 *         or VRAM descriptor of length 0; NXL_DESC_AUTO_REGISTER on a
 *         local list of another type); with lazy registration, what a
 *         transport answers to registering it (NXL_ERR_BACKEND).
 */
NXL_API nxl_status_t nxl_prep(nxl_agent_t *a, const char *agent, nxl_mem_t type,
                              const nxl_desc_t *descs, size_t n, nxl_prepped_t **out);
/**
 * nxl_prep() of strided lists, without making their elements: the
 * prepared list holds the @p n lists as given (tens of bytes each,
 * whatever their counts) and is indexed as any prepared list, list k's
 * elements following list k-1's (nxl_prepped_count() is the sum of their
 * counts times outer counts). Each list is checked once: the range from
 * its first byte to its last must lie inside one registered region
 * (a list spanning two adjacent regions is refused), and that last byte
 * must be addressable (base + strides * counts + len within 2^64).
 * nxl_xfer_make() with two strided lists and no index lists keeps them
 * so too: the transfer's elements are made at each post, for the
 * transport's call only; with index lists, or a list of descriptors on
 * the other side, it holds one entry per element, as with nxl_prep().
 * @param [in]  agent  NULL: this agent's regions; else a loaded agent's
 * @param [in]  s      @p n strided lists (see nxl_strided_t)
 * @param [out] out    the prepared list
 * @return NXL_SUCCESS; NXL_ERR_INVALID_PARAM (NULL pointers, a count of
 *         0, a DRAM or VRAM length of 0, a list whose last byte is past
 *         the end of the address space, more elements than a size_t
 *         counts: the sentence names the list and the number);
 *         NXL_ERR_NOT_FOUND (unknown agent, or a list not inside one
 *         registered region). Nothing is created on error.
 */
NXL_API nxl_status_t nxl_prep_strided(nxl_agent_t *a, const char *agent, nxl_mem_t type,
                                      const nxl_strided_t *s, size_t n, nxl_prepped_t **out);
/** Releases a prepared list; transfers made from it keep what they need. */
NXL_API void nxl_prepped_release(nxl_prepped_t *p);
/** @return the number of descriptors of a prepared list. */
NXL_API size_t nxl_prepped_count(const nxl_prepped_t *p);

/** Options of a transfer; initialise with nxl_xfer_opts_init(). */
typedef struct nxl_xfer_opts {
    size_t size;            /**< sizeof(nxl_xfer_opts_t) */
    /**
     * Notification sent to the remote agent after the data (NULL: none).
     * Over a transport that carries no notifications (CUDA, POSIX) the
     * engine sends it through another transport of the agent that does and
     * reaches the same agent (UCX), once the data transfer completed; the
     * future completes when that send did.
     */
    const void *notif;
    size_t notif_len;
    nxl_backend_t *backend; /**< force a backend (NULL: first that holds both sides) */
    /**
     * Deadline of each post, in milliseconds from nxl_xfer_post() (0: none;
     * nxl_xfer_set_deadline() changes it between posts). A post not
     * complete by then is canceled as nxl_future_cancel() says and completes
     * with NXL_ERR_TIMEOUT and a sentence naming the peer, the transport and
     * the bytes it waited for, once its buffers are free (where the
     * transport waits for a cancel, when it reports the transfer ended: the
     * callback may come later than the deadline by that much). A peer that
     * does not answer (stopped, hung) does not hold it: UCX, and LIBFABRIC
     * over tcp;ofi_rxm and sockets, abort the connection to that peer that
     * holds the buffers, and the TIMEOUT comes once they reported them released (a
     * few ms). Every other transfer or notification in flight on that
     * connection completes then too, once, with NXL_ERR_TIMEOUT and a
     * sentence saying it was aborted with the connection (not
     * NXL_ERR_REMOTE_DISCONNECT: the peer is not lost, no DOWN event);
     * the connection is made again (posts meanwhile wait for it), and only
     * a failure then is a disconnect (nxl-libfabric(7) says when the
     * sockets provider cannot tell the connection apart and waits as
     * before). The data may have moved in part, and over TCP what the
     * kernels still held of it may land when the peer resumes: UCX holds
     * the posts to that peer after the abort until the peer says it is
     * done with the old connection (about 1 s after it resumed, 3 s at
     * most), so that those bytes do not land over them (nxl-ucx(7),
     * LIMITATIONS, says what that does not cover). The transports'
     * own stall timeouts stay as the backstop. The agent keeps one timer for all the deadlines of its
     * transfers, armed only while one is pending. Added after the first
     * fields: an older caller's smaller @c size reads as no deadline.
     */
    unsigned deadline_ms;
} nxl_xfer_opts_t;

NXL_API void nxl_xfer_opts_init(nxl_xfer_opts_t *o);

/** Longest notification message, in bytes. */
#define NXL_NOTIF_MAX (64 * 1024)

/**
 * Makes a transfer from index lists into two prepared lists: element i moves
 * local[lidx[i]] to or from remote[ridx[i]] (equal lengths required).
 * A NULL index list means 0 .. n-1.
 * @return NXL_SUCCESS; NXL_ERR_INVALID_PARAM (index out of range, lengths
 *         differ, notification too long); NXL_ERR_NOT_SUPPORTED (no backend
 *         holds both sides; or a notification is asked for, the backend
 *         carries none and no other backend with notifications reaches the
 *         remote agent); NXL_ERR_MISMATCH (the lists belong to other agents).
 */
NXL_API nxl_status_t nxl_xfer_make(nxl_agent_t *a, nxl_op_t op, nxl_prepped_t *local,
                                   const size_t *lidx, nxl_prepped_t *remote, const size_t *ridx,
                                   size_t n, const nxl_xfer_opts_t *opts, nxl_xfer_t **out);
/**
 * One-call transfer: prepares @p local against this agent and @p remote
 * against @p remote_agent and pairs them element by element.
 */
NXL_API nxl_status_t nxl_xfer_create(nxl_agent_t *a, nxl_op_t op, const nxl_dlist_t *local,
                                     const nxl_dlist_t *remote, const char *remote_agent,
                                     const nxl_xfer_opts_t *opts, nxl_xfer_t **out);
/**
 * Replaces the notification sent by the next post (NULL: none).
 * @return NXL_SUCCESS; NXL_ERR_REPOST_ACTIVE (in flight);
 *         NXL_ERR_INVALID_PARAM (too long); NXL_ERR_NOT_SUPPORTED (no backend
 *         can carry it to the remote agent, see nxl_xfer_opts_t.notif).
 */
NXL_API nxl_status_t nxl_xfer_set_notif(nxl_xfer_t *x, const void *msg, size_t len);
/**
 * Sets the deadline of the posts that start after this call, in
 * milliseconds from each nxl_xfer_post() (0: none), replacing
 * nxl_xfer_opts_t.deadline_ms; a post already in flight keeps its own.
 * Threaded mode: from any thread, without waiting for the reactor.
 */
NXL_API void nxl_xfer_set_deadline(nxl_xfer_t *x, unsigned ms);
/**
 * Posts a transfer.
 * @param [in]  cb   completion callback (may be NULL)
 * @param [out] out  the future (may be NULL: released after the callback)
 * @return NXL_SUCCESS (started); NXL_ERR_REPOST_ACTIVE (still in flight);
 *         NXL_ERR_REMOTE_DISCONNECT (the peer is down: the transfer is
 *         re-bound when it is back, see "Peer lifecycle");
 *         NXL_ERR_NOT_FOUND (the remote agent said it deregistered a region
 *         the transfer uses, or came back as a new incarnation without it:
 *         the sentence names the element); NXL_ERR_BACKEND. On error nothing started.
 *         A transfer into a region the target deregistered before this
 *         agent heard of it completes with an error status where the
 *         transport can tell (doc/security.md, "Remote access").
 */
NXL_API nxl_status_t nxl_xfer_post(nxl_xfer_t *x, nxl_done_cb cb, void *arg, nxl_future_t **out);
/**
 * @return NXL_ERR_NOT_POSTED (never posted), NXL_IN_PROG (in flight: until
 *         the turn that runs the post's callbacks), or the status of the
 *         last completed post.
 */
NXL_API nxl_status_t nxl_xfer_status(const nxl_xfer_t *x);
/** @return the backend chosen for the transfer. */
NXL_API nxl_backend_t *nxl_xfer_backend(const nxl_xfer_t *x);
/**
 * Releases a transfer. One in flight is canceled: its future completes with
 * NXL_ERR_CANCELED as nxl_future_cancel() says.
 */
NXL_API void nxl_xfer_release(nxl_xfer_t *x);

/* ----------------------------------------------------------------- futures */

/**
 * Adds a callback. On a future already complete it runs on the next reactor
 * turn. @return NXL_SUCCESS; NXL_ERR_INVALID_PARAM.
 */
NXL_API nxl_status_t nxl_future_then(nxl_future_t *f, nxl_done_cb cb, void *arg);
/**
 * Runs the reactor until the future is complete and its callbacks ran, or
 * @p timeout_ms passed (negative: no limit). Threaded mode: from any thread
 * but the reactor's, sleeps until then instead (see Threads).
 * @return its final status; NXL_IN_PROG on timeout; NXL_ERR_NOT_ALLOWED
 *         when called from inside a callback (the reactor cannot be re-entered).
 */
NXL_API nxl_status_t nxl_future_wait(nxl_future_t *f, int timeout_ms);
/** @return NXL_IN_PROG until the turn that runs its callbacks (rule 3), then the final status. */
NXL_API nxl_status_t nxl_future_status(const nxl_future_t *f);
/** @return the sentence of a failed future ("" otherwise). */
NXL_API const char *nxl_future_error(const nxl_future_t *f);
/** @return for a metadata fetch, the peer's name once loaded; else NULL. */
NXL_API const char *nxl_future_peer(const nxl_future_t *f);
/**
 * Cancels the operation: the future completes with NXL_ERR_CANCELED (the
 * data may have moved in part) on the next turn; with transports whose I/O
 * runs on its own (POSIX: the kernel or worker threads) or that wait for a
 * cancel (UCX, LIBFABRIC), once the reads and writes already started have
 * ended, so that the buffers are free when the callback runs. A transfer
 * over the network whose cancel is not through 200 ms after this call (a
 * peer stopped or hung does not take or answer what was sent; or the rest
 * of a large transfer is still moving) is aborted as at a deadline
 * (nxl_xfer_opts_t.deadline_ms): UCX, and LIBFABRIC over tcp;ofi_rxm
 * and sockets, abort the connection to that peer that holds the buffers,
 * and the callback comes once they reported them released (a few ms after
 * those 200 ms); every other transfer or notification in flight on that
 * connection completes then too, with NXL_ERR_TIMEOUT and a sentence
 * saying it went with the connection (no DOWN: the next post reconnects).
 * MOONCAKE cuts its engine's connections to the peer the same way, but a
 * transfer without a deadline may have requests queued in the engine,
 * which end only after its reconnect cooldown: up to about 2 s after the
 * cancel (nxl-mooncake(7)). Exactly one callback either way. No effect on a
 * complete future. A transfer's deadline cancels it the same way, with
 * NXL_ERR_TIMEOUT instead.
 */
NXL_API void nxl_future_cancel(nxl_future_t *f);
/**
 * Sets a deadline @p ms milliseconds from now on a pending future of a
 * transfer post (as nxl_xfer_opts_t.deadline_ms, whose deadline it
 * replaces), a notification send (nxl_notif_send()) or a metadata fetch or
 * send (nxl_md_fetch(), nxl_md_send(), nxl_md_send_invalidate(),
 * nxl_md_fetch_etcd()). Not complete by then, the operation is canceled as
 * nxl_future_cancel() says and the future completes with NXL_ERR_TIMEOUT
 * and a sentence naming what it waited for (the agent a notification went
 * to, the host:port of a metadata request), once its buffers are free.
 * @p ms 0 removes the future's deadline. Called again, the new deadline
 * replaces the old.
 * @return NXL_SUCCESS, also for a complete future or one already canceled
 *         (no effect); NXL_ERR_INVALID_PARAM (@p f NULL);
 *         NXL_ERR_NOT_SUPPORTED (a future of another kind: nxl_future_all(),
 *         an event, a KV transfer, an etcd publish), with a sentence.
 */
NXL_API nxl_status_t nxl_future_set_deadline(nxl_future_t *f, unsigned ms);
/**
 * A future completed when all of @p fs are: with NXL_SUCCESS, or with the
 * first failure's status in array order. The inputs keep their owners.
 */
NXL_API nxl_status_t nxl_future_all(nxl_agent_t *a, nxl_future_t *const *fs, size_t n,
                                    nxl_done_cb cb, void *arg, nxl_future_t **out);
/** Gives back the caller's reference. Allowed inside the future's callback. */
NXL_API void nxl_future_release(nxl_future_t *f);

/**
 * A future completed by the reactor when the GPU reaches a CUDA event: the
 * way to post a transfer the moment the GPU work that produces its data has
 * finished, without a host synchronize and without polling. Post the
 * transfer from the callback:
 *
 * @code
 *   kernel<<<..., stream>>>(layer);          // writes layer's KV blocks
 *   cudaEventRecord(ev[layer], stream);
 *   nxl_future_from_cuda_event(a, ev[layer], post_layer, &ctx[layer], NULL);
 *   // post_layer() runs on the reactor once the kernel ended: it calls
 *   // nxl_xfer_post(xfer[layer], ...)
 * @endcode
 *
 * As with cudaStreamWaitEvent, the future waits for the work captured by
 * the event's most recent cudaEventRecord at the time of this call; an
 * event never recorded completes it on the next reactor turn. The event may
 * be destroyed or recorded again once this call returned. The CUDA
 * transport waits on a stream of its own (cudaStreamWaitEvent) followed by
 * a host function that wakes the reactor through an eventfd. A canceled
 * future completes with NXL_ERR_CANCELED once the event is reached (a wait
 * queued on the GPU cannot be withdrawn); at agent teardown, once the GPU
 * reached it.
 *
 * @param [in]  a           the agent (its CUDA transport waits)
 * @param [in]  cuda_event  a cudaEvent_t, passed as a pointer so that this
 *                          header needs no CUDA header
 * @param [in]  cb          completion callback (may be NULL)
 * @param [in]  arg         its argument
 * @param [out] out         the future (may be NULL: released after the callback)
 * @return NXL_SUCCESS (waiting); NXL_ERR_INVALID_PARAM (NULL or invalid
 *         event); NXL_ERR_NOT_SUPPORTED (the agent has no CUDA transport, or
 *         this build has none); NXL_ERR_BACKEND (CUDA refused the wait). On
 *         error nothing started. Completes with NXL_SUCCESS.
 */
NXL_API nxl_status_t nxl_future_from_cuda_event(nxl_agent_t *a, void *cuda_event,
                                                nxl_done_cb cb, void *arg, nxl_future_t **out);

/* ----------------------------------------------------------- notifications */

/** Receives a notification from agent @p from. @p msg is valid during the call. */
typedef void (*nxl_notif_cb)(nxl_agent_t *a, const char *from, const void *msg, size_t len,
                             void *arg);

/**
 * Sets the notification callback (NULL: notifications queue for
 * nxl_notifs_drain()). Notifications queued before are delivered to the new
 * callback on the next turn.
 */
NXL_API void nxl_agent_on_notif(nxl_agent_t *a, nxl_notif_cb cb, void *arg);
/**
 * Sends a standalone notification to a loaded remote agent. A deadline is
 * set on its future with nxl_future_set_deadline().
 * @return NXL_SUCCESS; NXL_ERR_NOT_FOUND (unknown agent);
 *         NXL_ERR_INVALID_PARAM (too long); NXL_ERR_NOT_SUPPORTED (no
 *         backend with notifications reaches it); NXL_ERR_REMOTE_DISCONNECT.
 */
NXL_API nxl_status_t nxl_notif_send(nxl_agent_t *a, const char *remote, const void *msg,
                                    size_t len, nxl_done_cb cb, void *arg, nxl_future_t **out);
/**
 * Pull interface (NIXL's getNotifs): hands each queued notification to
 * @p cb, in arrival order, and removes it. Does not run the reactor.
 * @return how many were handed over.
 */
NXL_API size_t nxl_notifs_drain(nxl_agent_t *a, nxl_notif_cb cb, void *arg);

/* ----------------------------------------------------------- peer lifecycle
 *
 * What an agent knows of each remote agent it loaded, as events delivered
 * to one callback (nxl_agent_on_peer()):
 *
 * - UP: its metadata was loaded for the first time.
 * - CHANGED: loaded again, the same incarnation (the same process), with
 *   other regions: some added (partial metadata too), removed or moved.
 *   A reload that changes nothing gives no event.
 * - DOWN: lost, with a status and a sentence: a transport reported it
 *   unreachable (a transfer to it failed with NXL_ERR_REMOTE_DISCONNECT,
 *   or the transport refused a post or a notification with it),
 *   it was invalidated (nxl_md_invalidate(), or the peer's
 *   nxl_md_send_invalidate()), its etcd keys were deleted or their lease
 *   expired, or a new incarnation replaced it (DOWN, then BACK at once).
 * - BACK: its name was loaded again after DOWN. @c incarnation grows by
 *   one when the metadata comes from a new process (the metadata carries
 *   a random number each agent draws at creation; metadata of an older
 *   library, without it, counts as a new process after DOWN, and while
 *   up when its connection info differs), and stays when the same
 *   process returns (a link restored, an invalidation undone).
 *
 * Rules:
 * - Events run on the reactor, like every callback (in threaded mode on
 *   the reactor thread), never inside the call that caused them; each
 *   exactly once, in the order they happened, so in order per peer: UP
 *   first, then CHANGED while it is up, DOWN and BACK alternating. Events
 *   happening while no callback is set are not kept.
 * - After BACK, prepared remote lists (nxl_prep()) and transfers
 *   (nxl_xfer_make(), nxl_xfer_create()) made against an earlier
 *   incarnation are re-bound to the current one on their next use
 *   (nxl_xfer_post(), nxl_xfer_make()) when every region they name is
 *   still there: a region of the same memory type, device, address and
 *   length, keyed for the transfer's transport (the address comes first);
 *   or, for a region that
 *   carried a label (nxl_md_label(), nxl_md_publish_partial()), the
 *   region of the same type and device that the current incarnation
 *   labels the same at the same place, wherever it lies now, when each
 *   element still fits in it at the same offset (the element then
 *   addresses the new region: the same bytes of the peer's buffer at
 *   its new address). The application posts the
 *   same nxl_xfer_t again; nothing else changes (its notification, its
 *   deadline, its local side). The same holds after a CHANGED that
 *   replaced the metadata. A list or transfer whose regions are gone stays
 *   invalid: nxl_xfer_post() and nxl_xfer_make() fail with
 *   NXL_ERR_NOT_FOUND and a sentence naming the element, the region and
 *   why (not there; its label gone or naming fewer regions; the labelled
 *   region too short for the element: it shrank). Nothing is re-bound
 *   when one element fails. Re-binding never moves data: a transfer in flight at DOWN fails
 *   once (NXL_ERR_REMOTE_DISCONNECT) and is never retried by the library;
 *   the application decides whether to post it again.
 * - Recovery (nxl_agent_config_t.peer_recovery, on by default): after a
 *   DOWN that the application did not cause itself (its own
 *   nxl_md_invalidate() call, which also gives up a peer already lost
 *   and stops its recovery), a peer fetched with nxl_md_fetch() is
 *   fetched again from that address, first after 50 ms, then after twice
 *   as long each time up to 2 s, each delay drawn between half and all of
 *   it (jitter), until it answers (BACK) or the agent is destroyed; a peer
 *   fetched from etcd comes back through the watch of its keys as soon as
 *   it publishes again. Nothing is armed while no peer is down. A peer
 *   loaded from a blob (nxl_md_load()) is the application's to reload.
 */

/** The kind of a peer event. */
typedef enum nxl_peer_kind {
    NXL_PEER_UP = 0,      /**< first loaded */
    NXL_PEER_CHANGED = 1, /**< loaded again, same incarnation, other regions */
    NXL_PEER_DOWN = 2,    /**< lost: status and why say how */
    NXL_PEER_BACK = 3,    /**< loaded again after DOWN */
} nxl_peer_kind_t;

/** One peer event, valid during the callback. */
typedef struct nxl_peer_event {
    size_t size;            /**< sizeof(nxl_peer_event_t): later versions append fields */
    const char *peer;       /**< the remote agent's name */
    nxl_peer_kind_t kind;
    uint64_t incarnation;   /**< 1 at UP, one more at each BACK of a new process */
    nxl_status_t status;    /**< DOWN: NXL_ERR_REMOTE_DISCONNECT; else NXL_SUCCESS */
    const char *why;        /**< DOWN: the sentence; else "" */
    size_t nregions;        /**< regions known of it after the event (0 at DOWN) */
} nxl_peer_event_t;

/** Receives a peer event (see "Peer lifecycle"). */
typedef void (*nxl_peer_cb)(nxl_agent_t *a, const nxl_peer_event_t *ev, void *arg);

/**
 * Sets the peer event callback (NULL: none; events are then not kept).
 * Events that happened before, and are not delivered yet, go to the new
 * callback.
 */
NXL_API void nxl_agent_on_peer(nxl_agent_t *a, nxl_peer_cb cb, void *arg);

#ifdef __cplusplus
}
#endif
#endif /* NXL_H */
