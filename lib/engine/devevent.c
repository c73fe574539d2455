/* SPDX-License-Identifier: BSD-3-Clause */
/* Futures completed by the device: nxl_future_from_cuda_event().
 *
 * The engine hands the event to the first backend that can wait for one
 * (the CUDA transport's wait_event: cudaStreamWaitEvent on a stream of its
 * own, then a host function that writes an eventfd in the reactor) and
 * completes the future when that backend reports the op done. */
#include "internal.h"

nxl_status_t nxl_future_from_cuda_event(nxl_agent_t *a, void *cuda_event, nxl_done_cb cb,
                                        void *arg, nxl_future_t **out)
{
    if (a && nxli_thread_foreign(a))
        return nxli_rpc_future_from_cuda_event(a, cuda_event, cb, arg, out);
    if (out)
        *out = NULL;
    if (!a)
        return NXL_ERR_INVALID_PARAM;
    if (!cuda_event) {
        nxli_err(a, "nxl_future_from_cuda_event: the event is NULL; pass a cudaEvent_t made "
                    "with cudaEventCreate");
        return NXL_ERR_INVALID_PARAM;
    }
    nxl_backend_t *b = NULL;
    for (int i = 0; i < a->nbackends && !b; i++)
        if (a->backends[i]->ops->wait_event)
            b = a->backends[i];
    if (!b) {
        size_t n;
        const nxli_transport_t *t = nxli_transports(&n);
        bool built = false;
        for (size_t i = 0; i < n; i++)
            built |= t[i].ops && t[i].ops->wait_event != NULL;
        nxli_err(a, "nxl_future_from_cuda_event: agent '%s' has no CUDA transport to wait for "
                    "the event; %s", a->name,
                 built ? "create it first (nxl_backend_create(a, \"CUDA\", ...))"
                       : "this build has none (configure --enable-cuda with the CUDA headers)");
        return NXL_ERR_NOT_SUPPORTED;
    }
    nxl_future_t *f;
    nxlt_op_t *op = nxli_op_new_future(a, b, NXLI_F_EVENT, cb, arg, &f);
    if (!op) {
        nxli_err(a, "nxl_future_from_cuda_event: out of memory");
        return NXL_ERR_UNKNOWN;
    }
    a->err[0] = 0;
    op->in_call = true;
    nxl_status_t st = b->ops->wait_event(b->state, op, cuda_event);
    if (st != NXL_SUCCESS && !a->err[0])
        nxli_err(a, "nxl_future_from_cuda_event: %s could not wait for the event (%s)",
                 b->ops->name, nxl_strerror(st));
    st = nxli_op_call_end(op, st); /* a report inside the call takes effect now */
    if (st != NXL_SUCCESS)
        return st;
    nxli_future_give(f, out);
    return NXL_SUCCESS;
}
