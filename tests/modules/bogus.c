/* SPDX-License-Identifier: BSD-3-Clause */
/* A transport module of another ABI: libnxl must refuse it without reading
 * past abi_version (check_modules). */
#include <nxl/transport.h>

NXLT_MODULE_EXPORT const nxlt_ops_t nxlt_bogus_ops = {
    .abi_version = NXLT_ABI_VERSION + 100,
    .name = "bogus",
};
