/* The transports built into this library, in default preference order. */
#include "internal.h"

#ifdef NXL_HAVE_UCX
extern const nxlt_ops_t nxl_ucx_ops;
#endif
#ifdef NXL_HAVE_LIBFABRIC
extern const nxlt_ops_t nxl_libfabric_ops;
#endif
#ifdef NXL_HAVE_POSIX
extern const nxlt_ops_t nxl_posix_ops;
#endif

static const nxlt_ops_t *const builtin[] = {
#ifdef NXL_HAVE_UCX
    &nxl_ucx_ops,
#endif
#ifdef NXL_HAVE_LIBFABRIC
    &nxl_libfabric_ops,
#endif
#ifdef NXL_HAVE_POSIX
    &nxl_posix_ops,
#endif
    NULL,
};

const nxlt_ops_t *const *nxli_transports(size_t *n)
{
    *n = sizeof(builtin) / sizeof(builtin[0]) - 1;
    return builtin;
}
