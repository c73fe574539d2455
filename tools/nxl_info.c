/* SPDX-License-Identifier: BSD-3-Clause */
/* nxl_info — what this machine's nxl can do: the library's version and
 * build options, the folders searched for transport modules, and every
 * transport with whether it can be used here (or why not), the memory
 * types it serves and its capabilities; with -v, the parameters each
 * transport takes and their defaults, from the transport's own table (the
 * one nxl_backend_create() checks keys against). What a bug report should
 * paste. Everything comes from libnxl's public calls: nxl_build_info(),
 * nxl_plugins_available(), nxl_plugin_detail(). */
#include <nxl.h>
#include <nxl/transport.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: nxl_info [-v] [TRANSPORT ...]\n"
               "  the library's version and build, the folders searched for transport\n"
               "  modules, and each transport (or those named): available or why not,\n"
               "  memory types, capabilities\n"
               "  -v   also each transport's parameters (nxl_backend_create) and defaults\n"
               "  -h   this help\n");
}

static void print_mem(uint32_t mask)
{
    int any = 0;
    for (int t = 0; t < NXL_MEM_TYPES; t++)
        if (mask & (1u << t)) {
            printf("%s%s", any ? " " : "", nxl_mem_name((nxl_mem_t)t));
            any = 1;
        }
    printf("%s\n", any ? "" : "(none)");
}

static void print_caps(uint32_t caps)
{
    static const struct {
        uint32_t bit;
        const char *name;
    } names[] = {
        {NXLT_CAP_REMOTE, "remote"},          /* to and from other agents */
        {NXLT_CAP_LOCAL, "local"},            /* within the agent */
        {NXLT_CAP_NOTIF, "notifications"},
        {NXLT_CAP_CANCEL_WAITS, "cancel-waits"},
        {NXLT_CAP_ANY_THREAD, "any-thread"},
    };
    int any = 0;
    for (size_t i = 0; i < sizeof(names) / sizeof(*names); i++)
        if (caps & names[i].bit) {
            printf("%s%s", any ? " " : "", names[i].name);
            any = 1;
        }
    printf("%s\n", any ? "" : "(none)");
}

static void print_transport(const nxl_plugin_info_t *p, int verbose)
{
    nxl_plugin_detail_t d = {.size = sizeof(d)};
    int have = nxl_plugin_detail(p->name, &d) == NXL_SUCCESS;
    printf("\nTransport %s: %s\n", p->name, p->available ? "available" : "unavailable");
    if (p->reason[0])
        printf("  %-13s %s\n", p->available ? "offers:" : "why not:", p->reason);
    if (p->available || p->mem_mask) {
        printf("  %-13s ", "memory:");
        print_mem(p->mem_mask);
    }
    if (have && (p->available || d.caps)) {
        printf("  %-13s ", "capabilities:");
        print_caps(d.caps);
    }
    if (have && d.module)
        printf("  %-13s %s\n", "module:", d.module);
    else if (have && d.caps)
        printf("  %-13s %s\n", "module:", "none (built into libnxl)");
    if (!verbose)
        return;
    if (!have || !d.params) {
        printf("  %-13s %s\n", "parameters:",
               p->available ? "not listed by this transport (a module of an older libnxl?)"
                            : "unknown (the transport cannot be loaded)");
        return;
    }
    printf("  parameters (nxl_backend_create; default, then what it sets):\n");
    for (size_t i = 0; i < d.nparams; i++)
        printf("    %-20s %-10s %s\n", d.params[i].key,
               d.params[i].def ? d.params[i].def : "-", d.params[i].doc ? d.params[i].doc : "");
}

int main(int argc, char **argv)
{
    int verbose = 0, argi = 1;
    for (; argi < argc && argv[argi][0] == '-'; argi++) {
        if (!strcmp(argv[argi], "-v") || !strcmp(argv[argi], "--verbose")) {
            verbose = 1;
        } else if (!strcmp(argv[argi], "-h") || !strcmp(argv[argi], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[argi], "--")) {
            argi++;
            break;
        } else {
            fprintf(stderr, "nxl_info: unknown option '%s'\n", argv[argi]);
            usage(stderr);
            return 2;
        }
    }

    nxl_build_info_t b = {.size = sizeof(b)};
    nxl_build_info(&b);
    printf("nxl %s (libnxl; transport ABI %u)\n", b.version, b.transport_abi);
    printf("  %-15s %s\n", "build options:", b.options);
    printf("  %-15s %s\n", "configured:", b.transports);
    printf("  %-15s %s%s\n", "module folders:", b.module_dirs[0] ? b.module_dirs : "(none)",
           getenv("NXL_PLUGIN_DIR") && *getenv("NXL_PLUGIN_DIR")
               ? " (NXL_PLUGIN_DIR's first, then the install folder)"
               : "");

    size_t n = nxl_plugins_available(NULL, 0);
    nxl_plugin_info_t *p = calloc(n ? n : 1, sizeof(*p));
    if (!p) {
        fprintf(stderr, "nxl_info: out of memory\n");
        return 1;
    }
    n = nxl_plugins_available(p, n);
    int rc = 0;
    if (argi == argc) {
        for (size_t i = 0; i < n; i++)
            print_transport(&p[i], verbose);
    } else {
        for (; argi < argc; argi++) {
            size_t i = 0;
            while (i < n && strcasecmp(p[i].name, argv[argi]))
                i++;
            if (i < n) {
                print_transport(&p[i], verbose);
            } else {
                fprintf(stderr, "nxl_info: no transport '%s' in this build (nxl_info lists "
                                "them all)\n", argv[argi]);
                rc = 1;
            }
        }
    }
    free(p);
    return rc;
}
