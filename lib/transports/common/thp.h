/* SPDX-License-Identifier: BSD-3-Clause */
/* Registered DRAM onto 2 MiB pages in place (madvise MADV_COLLAPSE), the
 * thp_collapse parameter of the transports that take it (POSIX, UCX):
 * thp.c. Never an error: the memory keeps its addresses and contents, and
 * where the kernel cannot (before 6.1, file mappings, no huge page free)
 * its pages stay as they were. */
#ifndef NXL_THP_H
#define NXL_THP_H

#include "config.h"
#include <nxl/transport.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* thp_collapse: off; auto (at registration up to the transport's sync_max
 * bytes, larger regions in the background); background (a thread of its
 * own, after the registration returned); sync (before it returns) */
enum { NXLT_THP_OFF, NXLT_THP_AUTO, NXLT_THP_BACKGROUND, NXLT_THP_SYNC };

typedef struct nxlt_thp nxlt_thp_t;

/* the parameter "thp_collapse" of params into *mode (NXLT_THP_*), *mode
 * left alone when not given */
static inline nxl_status_t nxlt_thp_param(nxlt_ctx_t *ctx, const nxl_param_t *params, size_t n,
                                          int *mode)
{
    static const char *const words[] = {"auto", "off", "background", "sync", "0", NULL};
    static const int modes[] = {NXLT_THP_AUTO, NXLT_THP_OFF, NXLT_THP_BACKGROUND, NXLT_THP_SYNC,
                                NXLT_THP_OFF};
    if (!nxlt_param(params, n, "thp_collapse"))
        return NXL_SUCCESS;
    int i = 0;
    nxl_status_t st = nxlt_param_choice(ctx, params, n, "thp_collapse", words, &i);
    if (st == NXL_SUCCESS)
        *mode = modes[i];
    return st;
}

/* The whole, aligned 2 MiB ranges of the DRAM region [addr, addr + len)
 * onto huge pages as mode says; *tp (NULL at first) is made on first use.
 * who names the transport in sentences; never fails. */
void nxlt_thp_add(nxlt_thp_t **tp, nxlt_ctx_t *ctx, const char *who, int mode,
                  size_t sync_max, uint64_t addr, size_t len);
/* the application gives [addr, addr + len) up: its 2 MiB ranges still
 * queued are dropped, the one being collapsed now waited for (t: NULL,
 * none asked) */
void nxlt_thp_drop(nxlt_thp_t *t, uint64_t addr, size_t len);
/* ends the thread (waits for the 2 MiB range it is on), writes what was
 * done into @p stats and frees *tp (NULL: "none asked") */
void nxlt_thp_stop(nxlt_thp_t **tp, char *stats, size_t cap);

#endif /* NXL_THP_H */
