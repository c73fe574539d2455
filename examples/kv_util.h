/* SPDX-License-Identifier: BSD-3-Clause */
/* kv_util: small pieces kv_server and kv_stream share. */
#ifndef NXL_EXAMPLES_KV_UTIL_H
#define NXL_EXAMPLES_KV_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Reads the line a forked child writes on fd once it listens: its port in
 * decimal, then '\n'. Waits at most timeout_ms for each read, retries a
 * poll that a signal interrupted, and closes fd.
 * @return the port, or 0 when no line came or it is not a port (1-65535) */
uint16_t kvu_read_port(int fd, int timeout_ms);

/* b bytes as "8 B", "64 KiB", "1.5 MiB" into buf[cap]; @return buf */
const char *kvu_size_text(char *buf, size_t cap, uint64_t b);

#endif
