/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * nxl's NIXL compatibility layer, beyond NIXL: what a NIXL program gains by
 * running on nxl.
 *
 * - A completion callback per transfer request, instead of polling
 *   getXferStatus():
 *
 *       nixlNxlSetXferCallback(agent, req, on_done, ctx);   // once per request
 *       agent.postXferReq(req);                             // as before
 *
 *   on_done(req, status, ctx) runs once per post, when the post completed
 *   (NIXL_SUCCESS or an error). Without a progress thread it runs inside
 *   the calls that drive the agent (getXferStatus(), getNotifs(),
 *   nixlNxlRunOnce()); with one (useProgThread or useListenThread), on the
 *   agent's own thread.
 *
 * - The agent's loop: without a progress thread, a program that waits in a
 *   loop of its own (epoll, libuv, ...) watches nixlNxlLoopFd() for reading
 *   and calls nixlNxlRunOnce(agent, 0) when it is readable or when
 *   nixlNxlLoopTimeout() milliseconds passed — the rules of
 *   nxl_agent_backend_fd() in <nxl.h>.
 *
 * - The nxl agent underneath (nixlNxlAgent()), for calls this layer does
 *   not offer: the nxl_agent_* functions of <nxl.h>.
 */
#ifndef NIXL_NXL_H
#define NIXL_NXL_H

#include <nxl.h>

#include "nixl.h"

/* Completion of one post of a request. */
typedef void (*nixl_nxl_xfer_cb_t)(nixlXferReqH *req, nixl_status_t status, void *arg);

/*
 * Sets (cb NULL: removes) the callback of every later post of req.
 * @return NIXL_SUCCESS; NIXL_ERR_INVALID_PARAM (req NULL or not this
 *         agent's); NIXL_ERR_REPOST_ACTIVE (a post is in flight).
 */
nixl_status_t nixlNxlSetXferCallback(nixlAgent &agent, nixlXferReqH *req, nixl_nxl_xfer_cb_t cb,
                                     void *arg);

/* @return the descriptor to watch for reading; -1 with a progress thread. */
int nixlNxlLoopFd(nixlAgent &agent);
/* @return milliseconds until the agent needs a turn (0: now; -1: no timer, or a progress thread). */
int nixlNxlLoopTimeout(nixlAgent &agent);
/*
 * Runs one turn of the agent, waiting at most timeout_ms (0: not at all,
 * negative: until something happens): completions, notifications,
 * metadata requests. @return NIXL_SUCCESS; NIXL_ERR_NOT_ALLOWED (with a
 * progress thread, which runs the agent itself, or from a callback).
 */
nixl_status_t nixlNxlRunOnce(nixlAgent &agent, int timeout_ms);

/* @return the nxl agent underneath: valid as long as agent. */
nxl_agent_t *nixlNxlAgent(nixlAgent &agent);

#endif
