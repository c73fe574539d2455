/* The fuzzing builds link the engine without transports. */
#include "config.h"
#include "engine/internal.h"

const nxlt_ops_t *const *nxli_transports(size_t *n)
{
    *n = 0;
    return NULL;
}
