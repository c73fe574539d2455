/* SPDX-License-Identifier: BSD-3-Clause */
/* libFuzzer harness: nxl_md_load() on arbitrary bytes — the JSON parser,
 * every field check, base64, region sorting and overlap checks. The agent
 * has no transport, so transport blobs (UCX addresses and keys, which UCX
 * does not validate: README "Trust") are not unpacked; what nxl itself
 * reads is. A blob that loads is invalidated again so that each input
 * starts from the same state. */
#include <nxl.h>
#include <stdint.h>
#include <stdlib.h>

static nxl_agent_t *agent(void)
{
    static nxl_agent_t *a;
    if (!a) {
        nxl_agent_config_t c;
        nxl_agent_config_init(&c);
        c.name = "fuzz";
        c.log_level = NXL_LOG_NONE;
        if (nxl_agent_create(&c, &a) != NXL_SUCCESS)
            abort();
    }
    return a;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    nxl_agent_t *a = agent();
    char name[300];
    if (nxl_md_load(a, data, size, name, sizeof(name)) == NXL_SUCCESS) {
        if (nxl_md_check(a, name) != NXL_SUCCESS)
            abort(); /* loaded, yet unknown */
        nxl_md_invalidate(a, name);
    } else if (!nxl_agent_last_error(a)[0]) {
        abort(); /* a refusal without a sentence */
    }
    return 0;
}
