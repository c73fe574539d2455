/* SPDX-License-Identifier: BSD-3-Clause */
/* The fuzzing builds link the engine without transports (and without the
 * module loader). */
#include "config.h"
#include "engine/internal.h"

const nxli_transport_t *nxli_transports(size_t *n)
{
    *n = 0;
    return NULL;
}

const char *nxli_transports_searched(void)
{
    return "(none: a fuzzing build)";
}

const nxli_transport_t *nxli_transport_find(const char *name)
{
    (void)name;
    return NULL;
}
