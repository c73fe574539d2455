/* SPDX-License-Identifier: BSD-3-Clause */
/* What the network transports' rails (UCX's rails.c, LIBFABRIC's rails.c)
 * decide alike, apart from their libraries: a rail's observed throughput,
 * each rail's share of a transfer, and how long a piece may take before
 * its rail counts as stalled.
 *
 * Throughput: the bytes per second of a rail's pieces, from post to their
 * completion, in a moving mean weighted by bytes (a piece of b bytes
 * counts b / (seen + b), seen the bytes behind the mean, NXL_RAIL_WINDOW
 * at most: small pieces, where latency counts more than rate, move it
 * little).
 *
 * Shares: in proportion to the throughput; a rail not measured yet counts
 * as the mean of the others (all equal at first); every live rail keeps at
 * least 1/(16n) of a transfer, so that a rail that was slow once is
 * measured again and regains its share.
 *
 * Retries: a rail taken out is tried again after NXL_RAIL_RETRY_MIN_MS,
 * then after twice as long each time a try fails, NXL_RAIL_RETRY_MAX_MS at
 * most; a try's probe (a read of one byte where a striped transfer went
 * last) not through after NXL_RAIL_PROBE_US failed.
 *
 * Header-only (static inline), compiled into each transport. */
#ifndef NXL_RAILSHARE_H
#define NXL_RAILSHARE_H

#include <stddef.h>
#include <stdint.h>

#define NXL_RAIL_WINDOW (4u << 20) /* bytes of past pieces the throughput weighs at most */
#define NXL_RAIL_RETRY_MIN_MS 500  /* a rail taken out is tried again after this long, */
#define NXL_RAIL_RETRY_MAX_MS 8000 /* ... then after twice as long each time, up to this */
#define NXL_RAIL_PROBE_US 1000000  /* a try whose probe is not through after this long failed */

typedef struct nxl_rail_rate {
    double bps;                 /* observed bytes per second, 0: not measured */
    double seen;                /* bytes behind bps, NXL_RAIL_WINDOW at most */
    uint64_t bytes, pieces;     /* statistics */
} nxl_rail_rate_t;

/* a piece of @p bytes done in @p dt_us microseconds */
static inline void nxl_rail_rate_add(nxl_rail_rate_t *r, size_t bytes, uint64_t dt_us)
{
    if (!bytes)
        return;
    double bps = (double)bytes * 1e6 / (double)(dt_us ? dt_us : 1), b = (double)bytes;
    r->bps = (r->bps * r->seen + bps * b) / (r->seen + b);
    r->seen = r->seen + b < NXL_RAIL_WINDOW ? r->seen + b : NXL_RAIL_WINDOW;
    r->bytes += bytes;
    r->pieces++;
}

/* Each of n rails' share of @p total bytes, summing to total: 0 for the
 * rails not in @p live (a bit per rail; at least one set) */
static inline void nxl_rail_shares(const nxl_rail_rate_t *r, unsigned n, unsigned live,
                                   size_t total, size_t *share)
{
    unsigned nl = 0, last = 0, nk = 0;
    double w[32], known = 0, sum = 0;
    for (unsigned i = 0; i < n; i++)
        if ((live >> i & 1) && r[i].bps > 0)
            known += r[i].bps, nk++;
    for (unsigned i = 0; i < n; i++) {
        w[i] = !(live >> i & 1) ? 0 : r[i].bps > 0 ? r[i].bps : nk ? known / nk : 1;
        sum += w[i];
        if (live >> i & 1)
            nl++, last = i;
    }
    double floor = 1.0 / (16.0 * nl), left = 1.0 - floor * nl;
    size_t given = 0;
    for (unsigned i = 0; i < n; i++) {
        share[i] = 0;
        if (!(live >> i & 1) || i == last)
            continue;
        share[i] = (size_t)((double)total * (floor + left * w[i] / sum));
        given += share[i];
    }
    share[last] = total - given;
}

/* How long a piece of @p bytes may take on rail @p r before the rail
 * counts as stalled: 4 times what its rate predicts, at least @p min_us,
 * at most @p cap_us */
static inline uint64_t nxl_rail_stall_us(const nxl_rail_rate_t *r, size_t bytes, uint64_t min_us,
                                         uint64_t cap_us)
{
    uint64_t lim = r->bps > 0 ? (uint64_t)(4e6 * (double)bytes / r->bps) : 0;
    if (lim < min_us)
        lim = min_us;
    return lim > cap_us ? cap_us : lim;
}

/* A rail's next try: @p *backoff_ms after @p now_us, into @p *at_us; the
 * wait after that one twice as long, NXL_RAIL_RETRY_MAX_MS at most */
static inline void nxl_rail_retry_later(uint64_t *at_us, unsigned *backoff_ms, uint64_t now_us)
{
    *at_us = now_us + (uint64_t)*backoff_ms * 1000;
    *backoff_ms = *backoff_ms * 2 < NXL_RAIL_RETRY_MAX_MS ? *backoff_ms * 2 : NXL_RAIL_RETRY_MAX_MS;
}

#endif /* NXL_RAILSHARE_H */
