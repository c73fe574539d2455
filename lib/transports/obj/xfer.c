/* SPDX-License-Identifier: BSD-3-Clause */
/* The OBJ transport's transfers: a posted READ or WRITE cut into requests,
 * its completion and failure, and the tick that polls for cancels and
 * silent requests. */
#include "obj.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void nxl_obj_xop_release(obj_xop_t *x)
{
    if (--x->active == 0)
        nxl_obj_xop_finish(x);
}

void nxl_obj_xop_finish(obj_xop_t *x)
{
    obj_t *o = x->o;
    LIST_REMOVE(x, link);
    nxlt_log(o->ctx, NXL_LOG_DEBUG, "%s: %s done: %s", o->tname, x->write ? "WRITE" : "READ",
             x->failed ? x->why : "ok");
    nxlt_op_done(x->op, x->failed ? x->st : NXL_SUCCESS, x->failed ? x->why : NULL);
    while (!LIST_EMPTY(&x->mpus)) {
        obj_mpu_t *m = LIST_FIRST(&x->mpus);
        LIST_REMOVE(m, link);
        for (unsigned i = 0; m->etags && i < m->nparts; i++)
            free(m->etags[i]);
        free(m->etags);
        free(m->upload_id);
        nxl_obj_key_put(m->k);
        free(m);
    }
    free(x);
    if (LIST_EMPTY(&o->xops) && o->tick)
        nxlt_timer_stop(o->tick);
}

/* The transfer fails (first failure wins): nothing more of it starts, its
 * GETs and PUTs in flight are taken out of curl, open multipart uploads are
 * aborted once the requests of theirs in flight have answered (a part still
 * arriving when the abort is processed may be stored after it, and S3 says
 * to abort again then); it completes once the aborts answered. */
void nxl_obj_xop_fail(obj_xop_t *x, nxl_status_t st, const char *fmt, ...)
{
    obj_t *o = x->o;
    va_list ap;
    va_start(ap, fmt);
    nxl_first_fail_v(o->ctx, &x->failed, &x->st, x->why, sizeof(x->why), st, fmt, ap);
    va_end(ap);
    x->active++; /* hold: not finished inside the sweep */
    obj_req_t *r, *next;
    for (r = LIST_FIRST(&x->reqs); r; r = next) {
        next = LIST_NEXT(r, xlink);
        bool mpu_inflight = r->mpu && r->state == RQ_INFLIGHT;
        if (r->kind != R_MPU_ABORT && !mpu_inflight)
            nxl_obj_req_drop(o, r);
    }
    obj_mpu_t *m;
    LIST_FOREACH(m, &x->mpus, link)
    nxl_obj_mpu_abort(m);
    nxl_obj_xop_release(x);
    nxl_obj_pump(o);
}

/* The request in flight that moved nothing for its bound, or NULL. What
 * moved is what curl sent to and received from the socket (a body taken
 * into curl's upload buffer in one piece may drain slowly), besides the
 * callbacks' notes. */
static obj_req_t *stalled_req(obj_t *o, uint64_t now)
{
    obj_xop_t *x;
    obj_req_t *r;
    LIST_FOREACH(x, &o->xops, link)
    LIST_FOREACH(r, &x->reqs, xlink)
    {
        if (r->state != RQ_INFLIGHT)
            continue;
        curl_off_t up = 0, down = 0;
        curl_easy_getinfo(r->easy, CURLINFO_SIZE_UPLOAD_T, &up);
        curl_easy_getinfo(r->easy, CURLINFO_SIZE_DOWNLOAD_T, &down);
        if ((int64_t)(up + down) != r->moved_bytes) {
            r->moved_bytes = (int64_t)(up + down);
            r->moved_us = now;
        } else if (now > r->moved_us &&
                   now - r->moved_us >= (uint64_t)nxl_obj_silence_s(o, r) * 1000000) {
            return r;
        }
    }
    return NULL;
}

void nxl_obj_on_tick(nxlt_timer_t *t, void *arg)
{
    obj_t *o = arg;
    /* periodic: armed again first, so that the last transfer finishing in
     * this callback stops it (nxl_obj_xop_finish) */
    nxlt_timer_start(t, OBJ_CANCEL_TICK_MS * 1000);
    obj_xop_t *x, *next;
    for (x = LIST_FIRST(&o->xops); x; x = next) {
        next = LIST_NEXT(x, link);
        if (!x->failed && nxlt_op_canceled(x->op))
            nxl_obj_xop_fail(x, NXL_ERR_CANCELED, "%s: %s canceled", o->tname,
                             x->write ? "WRITE" : "READ");
    }
    /* silent requests: out of curl, failed as curl's timeout (not retried);
     * each may finish transfers and start requests, so the walk starts over */
    obj_req_t *r;
    while ((r = stalled_req(o, nxlt_now_us()))) {
        CURL *e = r->easy;
        nxlt_http_remove(o->http, e);
        r->stalled = true;
        nxl_obj_req_done(e, CURLE_OPERATION_TIMEDOUT, r, o);
    }
}

void nxl_obj_on_kick(nxlt_timer_t *t, void *arg)
{
    nxl_obj_pump(arg);
}

/* What post() refuses before it makes anything: a transport shutting
 * down, another agent, other memory types, an element without an object, a
 * WRITE not at offset 0 or of too many parts. */
static nxl_status_t post_check(obj_t *o, const nxlt_xfer_t *t)
{
    if (o->closing) {
        nxlt_error(o->ctx, "%s: the transport is shutting down", o->tname);
        return NXL_ERR_NOT_ALLOWED;
    }
    if (t->conn != o) {
        nxlt_error(o->ctx, "%s: moves data only within the agent (its own name as the remote "
                           "agent)", o->tname);
        return NXL_ERR_NOT_SUPPORTED;
    }
    if (t->ltype != NXL_DRAM || t->rtype != NXL_OBJ) {
        nxlt_error(o->ctx, "%s: moves DRAM (the local list) to and from OBJ (the list prepared "
                           "against the agent itself), not %s and %s",
                   o->tname, nxl_mem_name(t->ltype), nxl_mem_name(t->rtype));
        return NXL_ERR_NOT_SUPPORTED;
    }
    bool write = t->op == NXL_WRITE;
    for (size_t i = 0; i < t->n; i++) {
        const nxlt_iov_t *v = &t->iov[i];
        obj_key_t *k = v->rkey;
        if (!k) {
            nxlt_error(o->ctx, "%s: element %zu has no registered object", o->tname, i);
            return NXL_ERR_NOT_SUPPORTED;
        }
        if (write && v->raddr != 0) {
            nxlt_error(o->ctx, "%s: element %zu writes object '%s' at offset %llu: objects are "
                               "written whole (a WRITE element starts at offset 0 and becomes "
                               "the object); write the whole object, or one object per block",
                       o->tname, i, k->key, (unsigned long long)v->raddr);
            return NXL_ERR_NOT_SUPPORTED;
        }
        if (write && v->len > o->threshold && (v->len + o->part - 1) / o->part > OBJ_MAX_PARTS) {
            nxlt_error(o->ctx, "%s: element %zu (%zu bytes) needs more than %u parts of %zu "
                               "bytes; raise part_size",
                       o->tname, i, v->len, OBJ_MAX_PARTS, o->part);
            return NXL_ERR_INVALID_PARAM;
        }
    }
    return NXL_SUCCESS;
}

/* The requests of element i, queued: ranged GETs of part_size, one PUT, or
 * a multipart upload above multipart_threshold; -1 when out of memory. */
static int post_elem(obj_xop_t *x, const nxlt_iov_t *v, size_t i)
{
    obj_t *o = x->o;
    obj_key_t *k = v->rkey;
    if (!x->write) {
        for (size_t at = 0; at < v->len; at += o->part) {
            obj_req_t *r = nxl_obj_req_new(x, R_GET, k, i);
            if (!r)
                return -1;
            r->buf = (char *)v->laddr + at;
            r->off = v->raddr + at;
            r->len = v->len - at < o->part ? v->len - at : o->part;
            nxl_obj_req_enqueue(o, r, false);
        }
        return 0;
    }
    if (v->len <= o->threshold) {
        obj_req_t *r = nxl_obj_req_new(x, R_PUT, k, i);
        if (!r)
            return -1;
        r->buf = v->laddr;
        r->len = v->len;
        nxl_obj_req_enqueue(o, r, false);
        return 0;
    }
    return nxl_obj_mpu_start(x, k, i, v->laddr, v->len);
}

/* post() ran out of memory: nothing started yet, x and what it holds go. */
static void post_undo(obj_xop_t *x)
{
    obj_t *o = x->o;
    obj_req_t *r;
    while ((r = LIST_FIRST(&x->reqs))) {
        TAILQ_REMOVE(&o->queue, r, qlink);
        LIST_REMOVE(r, xlink);
        nxl_obj_req_free(r);
    }
    while (!LIST_EMPTY(&x->mpus)) {
        obj_mpu_t *m = LIST_FIRST(&x->mpus);
        LIST_REMOVE(m, link);
        free(m->etags);
        nxl_obj_key_put(m->k);
        free(m);
    }
    LIST_REMOVE(x, link);
    free(x);
}

nxl_status_t nxl_obj_post(void *state, nxlt_op_t *op, const nxlt_xfer_t *t)
{
    obj_t *o = state;
    nxl_status_t st = post_check(o, t);
    if (st != NXL_SUCCESS)
        return st;
    obj_xop_t *x = calloc(1, sizeof(*x));
    if (!x) {
        nxlt_error(o->ctx, "%s: out of memory for a transfer of %zu elements", o->tname, t->n);
        return NXL_ERR_UNKNOWN;
    }
    x->o = o;
    x->op = op;
    x->write = t->op == NXL_WRITE;
    LIST_INIT(&x->reqs);
    LIST_INIT(&x->mpus);
    LIST_INSERT_HEAD(&o->xops, x, link);
    x->active++; /* hold while building */
    for (size_t i = 0; i < t->n; i++) {
        if (post_elem(x, &t->iov[i], i) < 0) {
            post_undo(x);
            nxlt_error(o->ctx, "%s: out of memory for a transfer of %zu elements", o->tname,
                       t->n);
            return NXL_ERR_UNKNOWN;
        }
    }
    o->n_xfer++;
    if (o->tick && !nxlt_timer_pending(o->tick))
        nxlt_timer_start(o->tick, OBJ_CANCEL_TICK_MS * 1000);
    /* start on the next turn: callbacks (and what they post) batch up, and
     * nothing can complete inside this call */
    nxlt_timer_activate(o->kick);
    nxl_obj_xop_release(x); /* an empty transfer completes here, held until post returns */
    return NXL_SUCCESS;
}
