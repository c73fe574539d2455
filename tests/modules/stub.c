/* SPDX-License-Identifier: BSD-3-Clause */
/* Built as tests/libnxltest-stub.so with the soname libnxltest-absent.so.0,
 * which no file has: libnxl-needy.so links it and cannot load. Also copied
 * as libnxl-nosym.so: it loads, but is no transport (check_modules). */
__attribute__((visibility("default"))) int nxltest_gone(void);
int nxltest_gone(void) { return 42; }
