/* SPDX-License-Identifier: BSD-3-Clause */
/* cli: flag tables over getopt_long; see cli.h. */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define VAL_HELP 1     /* getopt_long's answer for --help */
#define VAL_FIRST 256  /* ... and VAL_FIRST + i for the table's line i */

void cli_die(const cli_t *cli, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", cli->prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

const char *cli_why(const char *fmt, ...)
{
    static char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    return why;
}

/* "--name" or "-n", as the user wrote it (up to '=') */
static const char *as_written(const char *arg)
{
    static char w[96];
    snprintf(w, sizeof(w), "%.*s", (int)strcspn(arg, "="), arg);
    return w;
}

int cli_parse(const cli_t *cli, int argc, char **argv)
{
    size_t n = 0;
    while (cli->opts[n].name)
        n++;
    /* each name, its alias with dashes, and --help */
    struct option *lo = calloc(2 * n + 2, sizeof(*lo));
    char **aliases = calloc(n + 1, sizeof(char *));
    char *shorts = malloc(3 * n + 4);
    if (!lo || !aliases || !shorts)
        cli_die(cli, "out of memory");
    size_t nl = 0, ns = 0;
    shorts[ns++] = ':'; /* a missing value answers ':', not '?' */
    for (size_t i = 0; i < n; i++) {
        const cli_opt_t *o = &cli->opts[i];
        int has = o->arg == CLI_SWITCH ? no_argument
                  : o->arg == CLI_OPTIONAL ? optional_argument : required_argument;
        lo[nl++] = (struct option){o->name, has, NULL, VAL_FIRST + (int)i};
        if (cli->dash_aliases && strchr(o->name, '_')) {
            aliases[i] = strdup(o->name);
            for (char *c = aliases[i]; c && *c; c++)
                if (*c == '_')
                    *c = '-';
            if (aliases[i])
                lo[nl++] = (struct option){aliases[i], has, NULL, VAL_FIRST + (int)i};
        }
        if (o->short_name) {
            shorts[ns++] = (char)o->short_name;
            if (o->arg != CLI_SWITCH)
                shorts[ns++] = ':';
            if (o->arg == CLI_OPTIONAL)
                shorts[ns++] = ':';
        }
    }
    lo[nl++] = (struct option){"help", no_argument, NULL, VAL_HELP};
    if (cli->help_h)
        shorts[ns++] = 'h';
    shorts[ns] = 0;

    opterr = 0;
    optind = 1;
    for (;;) {
        int li = -1;
        int c = getopt_long(argc, argv, shorts, lo, &li);
        if (c == -1)
            break;
        if (c == '?') {
            const char *el = argv[optind - 1];
            if (optopt >= VAL_FIRST || optopt == VAL_HELP)
                cli_die(cli, "%s takes no value (see --help)", as_written(el));
            if (optopt)
                cli_die(cli, "unknown flag '-%c' (see --help)", optopt);
            cli_die(cli, "unknown flag '%s' (see --help)", as_written(el));
        }
        if (c == ':') {
            if (optopt >= VAL_FIRST)
                cli_die(cli, "--%s needs a value (see --help)",
                        cli->opts[optopt - VAL_FIRST].name);
            cli_die(cli, "-%c needs a value (see --help)", optopt);
        }
        if (li >= 0) {
            /* getopt_long takes any unambiguous prefix: this table wants whole names */
            const char *el = optarg && optarg == argv[optind - 1] ? argv[optind - 2]
                                                                  : argv[optind - 1];
            size_t len = strcspn(el, "=");
            if (strncmp(el, "--", 2) || len - 2 != strlen(lo[li].name) ||
                strncmp(el + 2, lo[li].name, len - 2))
                cli_die(cli, "unknown flag '%s' (see --help)", as_written(el));
        }
        if (c == VAL_HELP || (c == 'h' && cli->help_h)) {
            cli->usage(stdout);
            exit(0);
        }
        if (c < VAL_FIRST) /* a short name */
            for (size_t i = 0; i < n; i++)
                if (cli->opts[i].short_name == c)
                    c = VAL_FIRST + (int)i;
        if (c < VAL_FIRST)
            cli_die(cli, "unknown flag '-%c' (see --help)", c); /* not reached */
        const cli_opt_t *o = &cli->opts[c - VAL_FIRST];
        const char *why = o->set(o, optarg);
        if (why) {
            if (li < 0)
                cli_die(cli, "bad value '%s' for -%c: %s", optarg ? optarg : "", o->short_name,
                        why);
            cli_die(cli, "bad value '%s' for --%s: %s", optarg ? optarg : "", o->name, why);
        }
        if (o->given)
            *o->given = true;
    }
    for (size_t i = 0; i < n; i++)
        free(aliases[i]);
    free(aliases);
    free(lo);
    free(shorts);
    return optind;
}

void cli_parse_mode(const cli_t *cli, int argc, char **argv, const char **mode)
{
    if (argc > 1 && argv[1][0] != '-') {
        *mode = argv[1];
        argc--;
        argv++;
    }
    int first = cli_parse(cli, argc, argv);
    if (first < argc)
        cli_die(cli, "unexpected argument '%s' (see --help)", argv[first]);
}

const char *cli_set_true(const cli_opt_t *opt, const char *val)
{
    (void)val;
    *(bool *)opt->field = true;
    return NULL;
}

const char *cli_set_bool(const cli_opt_t *opt, const char *val)
{
    if (!val || !strcmp(val, "1") || !strcasecmp(val, "true") || !strcasecmp(val, "yes"))
        *(bool *)opt->field = true;
    else if (!strcmp(val, "0") || !strcasecmp(val, "false") || !strcasecmp(val, "no"))
        *(bool *)opt->field = false;
    else
        return "1, true or yes; 0, false or no";
    return NULL;
}

const char *cli_set_str(const cli_opt_t *opt, const char *val)
{
    *(const char **)opt->field = val;
    return NULL;
}

static const char *whole(const cli_opt_t *opt, const char *val, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(val, &end, 10);
    double max = opt->max ? opt->max : (double)LLONG_MAX;
    if (end == val || *end || errno || v < opt->min || v > max) {
        if (opt->max)
            return cli_why("not a whole number from %.0f to %.0f", opt->min, opt->max);
        return cli_why("not a whole number >= %.0f", opt->min);
    }
    *out = v;
    return NULL;
}

const char *cli_set_long(const cli_opt_t *opt, const char *val)
{
    long long v;
    const char *why = whole(opt, val, &v);
    if (!why)
        *(long *)opt->field = (long)v;
    return why;
}

const char *cli_set_uint(const cli_opt_t *opt, const char *val)
{
    long long v;
    const char *why = whole(opt, val, &v);
    if (!why && v > UINT_MAX)
        why = "too large";
    if (!why)
        *(unsigned *)opt->field = (unsigned)v;
    return why;
}

const char *cli_set_double(const cli_opt_t *opt, const char *val)
{
    char *end;
    errno = 0;
    double v = strtod(val, &end);
    if (end == val || *end || errno || !(v >= opt->min) || (opt->max && !(v <= opt->max))) {
        if (opt->max)
            return cli_why("not a number from %g to %g", opt->min, opt->max);
        return cli_why("not a number >= %g", opt->min);
    }
    *(double *)opt->field = v;
    return NULL;
}

const char *cli_size(const char *s, unsigned long long max, unsigned long long *out)
{
    char *end;
    errno = 0;
    if (!s || !*s || *s == '-')
        return "not a size";
    unsigned long long v = strtoull(s, &end, 10);
    unsigned shift = 0;
    if (*end == 'k' || *end == 'K')
        shift = 10;
    else if (*end == 'm' || *end == 'M')
        shift = 20;
    else if (*end == 'g' || *end == 'G')
        shift = 30;
    if (shift)
        end++;
    if (errno || end == s || *end)
        return "not a size (suffixes K, M, G)";
    if (v > (max >> shift))
        return cli_why("more than %llu", max);
    *out = v << shift;
    return NULL;
}

const char *cli_count(const cli_opt_t *opt, const char *val, unsigned long long *out)
{
    unsigned long long v;
    const char *why = cli_size(val, (unsigned long long)opt->max, &v);
    if (!why && v < opt->min)
        why = cli_why("must be at least %.0f", opt->min);
    if (!why)
        *out = v;
    return why;
}

const char *cli_set_addr(const cli_opt_t *opt, const char *val)
{
    cli_addr_t *a = opt->field;
    const char *why = cli_hostport(val, a->host, sizeof(a->host), &a->port);
    if (!why)
        a->set = true;
    return why;
}

const char *cli_hostport(const char *s, char *host, size_t cap, uint16_t *port)
{
    const char *colon = strrchr(s, ':');
    unsigned long long p;
    if (!colon || colon == s || cli_size(colon + 1, 65535, &p))
        return "not HOST:PORT";
    const char *h = s;
    size_t hl = (size_t)(colon - s);
    if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    if (!hl || hl >= cap)
        return "not HOST:PORT";
    memcpy(host, h, hl);
    host[hl] = 0;
    *port = (uint16_t)p;
    return NULL;
}
