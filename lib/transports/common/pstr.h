/* SPDX-License-Identifier: BSD-3-Clause */
/* PSTR(X): a numeric macro's value as a string literal, for the defaults
 * and ranges a transport's nxl_param_info_t table states (so the table
 * and the code's constant cannot drift apart). Header-only. */
#ifndef NXL_PSTR_H
#define NXL_PSTR_H

#define PSTR_(x) #x
#define PSTR(x) PSTR_(x)

#endif /* NXL_PSTR_H */
