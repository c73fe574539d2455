/* SPDX-License-Identifier: BSD-3-Clause */
/* A transport module that links a library missing at run time: dlopen
 * fails and nxl_plugins_available() says which library (check_modules). */
#include <nxl/transport.h>

int nxltest_gone(void);

static int probe(char *why, size_t cap) { return nxltest_gone() == 42; }

NXLT_MODULE_EXPORT const nxlt_ops_t nxlt_needy_ops = {
    .abi_version = NXLT_ABI_VERSION,
    .name = "needy",
    .probe = probe,
};
