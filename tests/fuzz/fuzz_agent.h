/* SPDX-License-Identifier: BSD-3-Clause */
/* The agent of a libFuzzer harness: no transport, no log, made on the
 * first call and kept for every input. */
#ifndef NXL_FUZZ_AGENT_H
#define NXL_FUZZ_AGENT_H

#include <nxl.h>
#include <stdlib.h>

/* max_frame_bytes: the listener's largest frame (0: nxl's default) */
static nxl_agent_t *fuzz_agent(unsigned max_frame_bytes)
{
    static nxl_agent_t *a;
    if (!a) {
        nxl_agent_config_t c;
        nxl_agent_config_init(&c);
        c.name = "fuzz";
        c.log_level = NXL_LOG_NONE;
        if (max_frame_bytes)
            c.max_frame_bytes = max_frame_bytes;
        if (nxl_agent_create(&c, &a) != NXL_SUCCESS)
            abort();
    }
    return a;
}

#endif
