/* SPDX-License-Identifier: BSD-3-Clause */
/* libFuzzer harness: nxl_md_load() on arbitrary bytes — the JSON parser,
 * every field check, base64, region sorting and overlap checks. The agent
 * has no transport, so transport blobs (UCX addresses and keys, which UCX
 * does not validate: doc/security.md, "Trust") are not unpacked; what nxl itself
 * reads is. A blob that loads is invalidated again so that each input
 * starts from the same state. One oracle beside crashes: a blob that is
 * not JSON because it holds a raw control character other than white
 * space, or an escaped NUL that no field can hold, must not load (cJSON
 * cut strings at a NUL, and such blobs loaded with a field cut short). */
#include <nxl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_agent.h"

static nxl_agent_t *agent(void) { return fuzz_agent(0); }

/* a control character but tab, LF, CR (a final NUL aside), or an escaped NUL */
static int not_json(const uint8_t *d, size_t n)
{
    if (n && !d[n - 1])
        n--;
    for (size_t i = 0; i < n; i++) {
        if (d[i] < 0x20 && d[i] != '\t' && d[i] != '\n' && d[i] != '\r')
            return 1;
        if (d[i] == '\\' && i + 1 < n) { /* an escape: the next byte is not a quote's end */
            if (i + 5 < n && !memcmp(d + i + 1, "u0000", 5))
                return 1;
            if (d[i + 1] >= 0x20)
                i++;
        }
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    nxl_agent_t *a = agent();
    char name[300];
    if (nxl_md_load(a, data, size, name, sizeof(name)) == NXL_SUCCESS) {
        if (not_json(data, size))
            abort(); /* loaded what is not JSON */
        if (nxl_md_check(a, name) != NXL_SUCCESS)
            abort(); /* loaded, yet unknown */
        nxl_md_invalidate(a, name);
    } else if (!nxl_agent_last_error(a)[0]) {
        abort(); /* a refusal without a sentence */
    }
    return 0;
}
