/* SPDX-License-Identifier: BSD-3-Clause */
/* The bookkeeping of operations in flight that the two network transports
 * (UCX, LIBFABRIC) keep alike: how many of an instance's and of a
 * connection's operations the engine has not been told of yet, when an
 * operation on a connection last completed, telling the engine of an
 * operation exactly once, and the stall timeout's decision that a peer is
 * lost; and the process-wide generation of the agents of this process by
 * which an agent learns, at its next post or loop turn, that a peer of
 * this process went away.
 *
 * Header-only (static inline): compiled into each transport, nothing of it
 * exported. Each transport embeds the structs in its own instance and
 * connection and keeps its own clock: nxl_now is the clock it reads (UCX a
 * coarse one, LIBFABRIC nxlt_now_us), read only where the code needs it. */
#ifndef NXL_NETOP_H
#define NXL_NETOP_H

#include <nxl/transport.h>

#include <stdbool.h>
#include <stdint.h>

/* an instance's share */
typedef struct nxl_netop_inst {
    unsigned inflight;          /* ops not reported to the engine yet */
    bool hit;                   /* an op completed or a notification came: the engine has work */
    uint64_t stall_us;          /* ops to a peer with none completing this long: peer lost
                                 * (0: never) */
} nxl_netop_inst_t;

/* a connection's share */
typedef struct nxl_netop_conn {
    unsigned inflight;          /* ops on it not reported to the engine yet */
    uint64_t progress_us;       /* last completion (or first post) of an op on it (nxl_now) */
} nxl_netop_conn_t;

typedef uint64_t (*nxl_now_fn)(void);

/* An op starts on connection c of instance i: counted on both; c's clock
 * starts when it had none in flight. True when i had none in flight (its
 * watch is to be started). */
static inline bool nxl_netop_start(nxl_netop_inst_t *i, nxl_netop_conn_t *c, nxl_now_fn now)
{
    if (c->inflight++ == 0)
        c->progress_us = now();
    return i->inflight++ == 0;
}

/* An op counted by nxl_netop_start taken off the counts without a report's
 * stamp: it never went out, it is the transport's own (never reported), or
 * the teardown cancels it. */
static inline void nxl_netop_unstart(nxl_netop_inst_t *i, nxl_netop_conn_t *c)
{
    i->inflight--;
    c->inflight--;
}

/* Tells the engine of *op (once: *op is NULL afterwards, and a second call
 * does nothing), takes it off the counts, stamps c's progress and marks i
 * as having work. */
static inline void nxl_netop_report(nxlt_op_t **op, nxl_netop_inst_t *i, nxl_netop_conn_t *c,
                                    nxl_now_fn now, nxl_status_t st, const char *why)
{
    if (!*op)
        return;
    nxlt_op_t *done = *op;
    *op = NULL;
    i->inflight--;
    c->inflight--;
    c->progress_us = now();
    i->hit = true;
    nxlt_op_done(done, st, why);
}

/* The stall timeout's verdict at time now (of the same clock): c has ops
 * in flight and none completed for longer than i's stall_us. */
static inline bool nxl_netop_stalled(const nxl_netop_inst_t *i, const nxl_netop_conn_t *c,
                                     uint64_t now)
{
    return c->inflight && i->stall_us && now - c->progress_us > i->stall_us;
}

/* A generation bumped (__ATOMIC_RELEASE) as an agent of this process goes:
 * true when it moved since *seen, which then follows it (the caller then
 * looks at its connections to agents of this process). */
static inline bool nxl_netop_gen_moved(const unsigned long *gen, unsigned long *seen)
{
    unsigned long g = __atomic_load_n(gen, __ATOMIC_ACQUIRE);
    if (g == *seen)
        return false;
    *seen = g;
    return true;
}

#endif /* NXL_NETOP_H */
