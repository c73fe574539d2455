/* SPDX-License-Identifier: BSD-3-Clause */
/* cli: the flag parsing of nxlbench and the examples, over getopt_long.
 *
 * A program describes its flags as a table, one line a flag:
 *
 *   static const cli_opt_t opts[] = {
 *       {"layers", 0, CLI_VALUE, set_count, &o.layers, .min = 1, .max = 1 << 24},
 *       {"quiet", 0, CLI_SWITCH, cli_set_true, &o.quiet},
 *       {0},
 *   };
 *
 * and cli_parse() takes `--flag value` and `--flag=value` (and `-f value`,
 * `-fvalue` for flags with a short name). A flag must be named whole (no
 * abbreviations, unlike plain getopt_long); --help (and -h where asked for)
 * prints the usage to stdout and exits 0. Every mistake — an unknown flag, a
 * missing value, a value where none is taken, a bad value, an argument that
 * is not a flag — is one line on stderr, "PROG: what went wrong", and exit
 * status 2. */
#ifndef NXL_EXAMPLES_CLI_H
#define NXL_EXAMPLES_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct cli_opt cli_opt_t;

/* Stores val (NULL for a flag given without one) where opt says.
 * @return NULL, or why val is not acceptable (a phrase: "not a number >= 1") */
typedef const char *(*cli_set_fn)(const cli_opt_t *opt, const char *val);

enum cli_arg {
    CLI_SWITCH,   /* --flag, never a value */
    CLI_OPTIONAL, /* --flag, or --flag=VALUE (never the next argument) */
    CLI_VALUE,    /* --flag VALUE or --flag=VALUE */
};

struct cli_opt {
    const char *name;  /* the long name, without "--"; NULL ends the table */
    int short_name;    /* 'b' for -b, or 0 */
    enum cli_arg arg;
    cli_set_fn set;
    void *field;       /* where set stores the value */
    double min, max;   /* bounds, for the number setters (max 0: none) */
    bool *given;       /* set to true when the flag appears (may be NULL) */
};

typedef struct cli {
    const char *prog;         /* starts every error line */
    const cli_opt_t *opts;
    void (*usage)(FILE *f);   /* --help */
    bool dash_aliases;        /* --block-size is --block_size */
    bool help_h;              /* -h is --help */
} cli_t;

/* Parses argv[1..argc); exits 2 on a mistake and 0 after --help.
 * @return the index in argv of the first argument that is not a flag
 * (getopt_long moves them all to the end, in their order) */
int cli_parse(const cli_t *cli, int argc, char **argv);

/* For PROG MODE --flag ...: the mode first (an argv[1] that is not a flag)
 * into *mode, then cli_parse() of the flags; any argument left after them
 * is a mistake (exit 2). */
void cli_parse_mode(const cli_t *cli, int argc, char **argv, const char **mode);

/* One line "PROG: ..." on stderr, then exit(2). */
void cli_die(const cli_t *cli, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));

/* The setters of plain fields. */
const char *cli_set_true(const cli_opt_t *opt, const char *val);  /* bool: true */
const char *cli_set_bool(const cli_opt_t *opt, const char *val);  /* bool: none, 1, true, yes */
const char *cli_set_str(const cli_opt_t *opt, const char *val);   /* const char *: val */
const char *cli_set_long(const cli_opt_t *opt, const char *val);  /* long in [min, max] */
const char *cli_set_uint(const cli_opt_t *opt, const char *val);  /* unsigned in [min, max] */
const char *cli_set_double(const cli_opt_t *opt, const char *val); /* double in [min, max] */

/* The parsers behind setters of sizes and addresses.
 * cli_size: N, or N with K, M or G (powers of 1024), at most max, into *out.
 * cli_hostport: HOST:PORT or [HOST]:PORT, the host into host[cap] (without
 * the brackets), the port from 0 to 65535 into *port.
 * @return NULL (and the values stored), or why not (a phrase; nothing stored) */
const char *cli_size(const char *s, unsigned long long max, unsigned long long *out);
const char *cli_hostport(const char *s, char *host, size_t cap, uint16_t *port);

/* cli_count: a count (cli_size) from opt->min to opt->max into *out.
 * @return NULL (and *out stored), or why not (a phrase; nothing stored) */
const char *cli_count(const cli_opt_t *opt, const char *val, unsigned long long *out);

/* An address flag's field, for cli_set_addr: HOST:PORT or [HOST]:PORT
 * (cli_hostport), and set when given. */
typedef struct cli_addr {
    char host[256];
    uint16_t port;
    bool set;
} cli_addr_t;
const char *cli_set_addr(const cli_opt_t *opt, const char *val); /* cli_addr_t */

/* A phrase for a setter to return, formatted into one static buffer. */
const char *cli_why(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
