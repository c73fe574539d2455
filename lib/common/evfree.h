/* SPDX-License-Identifier: BSD-3-Clause */
/* Freeing the libevent events an object made, for the teardowns of the
 * engine and of the transports (header-only: every user compiles its own
 * copy, nothing is exported). */
#ifndef NXL_COMMON_EVFREE_H
#define NXL_COMMON_EVFREE_H

#include <event2/event.h>
#include <stddef.h>

/* Frees, in order, each of the n events that was made (NULL: not made). */
static inline void nxl_events_free_(struct event *const *ev, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (ev[i])
            event_free(ev[i]);
}

/* NXL_EVENTS_FREE(u->ev_a, u->ev_b, ...): "if (e) event_free(e);" for each
 * one named, in the order named. */
#define NXL_EVENTS_FREE(...)                                                                 \
    nxl_events_free_((struct event *const[]){__VA_ARGS__},                                   \
                     sizeof((struct event *const[]){__VA_ARGS__}) / sizeof(struct event *))

#endif
