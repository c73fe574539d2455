/* SPDX-License-Identifier: BSD-3-Clause */
/* Status names and sentences, generated from NXL_STATUS_MAP so that the
 * enum and its strings cannot drift apart. */
#include "internal.h"

const char *nxl_strerror(nxl_status_t st)
{
    switch (st) {
#define NXLI_STR_(name, value, text) case NXL_##name: return text;
        NXL_STATUS_MAP(NXLI_STR_)
#undef NXLI_STR_
    }
    return "unknown status";
}

const char *nxl_status_name(nxl_status_t st)
{
    switch (st) {
#define NXLI_NAME_(name, value, text) case NXL_##name: return #name;
        NXL_STATUS_MAP(NXLI_NAME_)
#undef NXLI_NAME_
    }
    return "UNKNOWN_STATUS";
}

const char *nxl_version(void)
{
    return PACKAGE_VERSION;
}

const char *nxl_mem_name(nxl_mem_t t)
{
    static const char *const names[] = {"DRAM", "VRAM", "BLK", "OBJ", "FILE"};
    return (unsigned)t < NXL_MEM_TYPES ? names[t] : "?";
}
