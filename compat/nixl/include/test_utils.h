/* SPDX-License-Identifier: BSD-3-Clause */
/* nxl's NIXL compatibility layer: the helpers NIXL's examples use to stop on a failure. */
#ifndef NIXL_TEST_UTILS_H
#define NIXL_TEST_UTILS_H

#include <string_view>

#include "nixl_types.h"

/* Prints message (and the agent's name) and exits when status is an error. */
void nixl_exit_on_failure(nixl_status_t status, std::string_view message,
                          std::string_view agent = {});
/* Prints message (and the agent's name) and exits when condition is false. */
void nixl_exit_on_failure(bool condition, std::string_view message, std::string_view agent = {});

#endif
