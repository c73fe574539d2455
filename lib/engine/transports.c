/* SPDX-License-Identifier: BSD-3-Clause */
/* The transports this process can create: those built into the library, in
 * default preference order, then the modules found on disk, then the ones
 * configure knows but that cannot be used here (with why).
 *
 * Modules (--enable-<name>=dl) are files libnxl-<name>.so exporting
 * nxlt_<name>_ops. They are looked for once per process, on the first call
 * that needs the list (nxl_plugins_available(), nxl_backend_create()), in
 * the folders of NXL_PLUGIN_DIR (colon-separated, in order) and then in the
 * install folder NXL_MODULE_DIR. The first usable module of a name wins; a
 * built-in transport wins over any module. A module that is present but
 * cannot be used (it does not load, its ABI differs, it is not a transport)
 * is listed unavailable with the reason. Loaded modules stay loaded until
 * the process exits. */
#include "internal.h"

#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#ifndef NXL_MODULE_DIR
#define NXL_MODULE_DIR ""
#endif
#ifndef NXL_BUILTIN_TRANSPORTS
#define NXL_BUILTIN_TRANSPORTS
#endif
#ifndef NXL_CONFIGURED_TRANSPORTS
#define NXL_CONFIGURED_TRANSPORTS
#endif

#define X(n) extern const nxlt_ops_t nxlt_##n##_ops;
NXL_BUILTIN_TRANSPORTS
#undef X

static const nxlt_ops_t *const builtin[] = {
#define X(n) &nxlt_##n##_ops,
    NXL_BUILTIN_TRANSPORTS
#undef X
    NULL,
};

/* What configure decided for each transport it knows (m4/nxl_transport.m4). */
enum { NOT_BUILT = 0, BUILT_IN = 1, MODULE = 2 };
static const struct configured {
    const char *id;   /* "ucx": the folder, the module's file and symbol */
    const char *name; /* "UCX" */
    int state;
    const char *hint; /* the runtime package the module needs */
    const char *why;  /* why not built */
} configured[] = {
#define X(id, name, state, hint, why) {id, name, state, hint, why},
    NXL_CONFIGURED_TRANSPORTS
#undef X
    {NULL, NULL, 0, NULL, NULL},
};

#define MAX_TRANSPORTS 32
#define MODULE_PREFIX "libnxl-"
#define MODULE_SUFFIX ".so"

static nxli_transport_t tab[MAX_TRANSPORTS];
static size_t ntab;
static char names[MAX_TRANSPORTS][40];  /* names of modules that could not be used */
static char searched[1024];             /* the folders searched, for sentences */
static char mdirs[1024];                /* the same, colon-separated (nxl_build_info) */
static pthread_once_t once = PTHREAD_ONCE_INIT;

static const struct configured *configured_find(const char *id)
{
    for (const struct configured *c = configured; c->id; c++)
        if (!strcasecmp(c->id, id))
            return c;
    return NULL;
}

static nxli_transport_t *tab_find(const char *name)
{
    for (size_t i = 0; i < ntab; i++)
        if (!strcasecmp(tab[i].name, name))
            return &tab[i];
    return NULL;
}

/* "libnxl-<id>.so" with id of letters, digits and '_': copies id. */
static int module_id(const char *file, char *id, size_t cap)
{
    size_t lp = strlen(MODULE_PREFIX), ls = strlen(MODULE_SUFFIX), l = strlen(file);
    if (l <= lp + ls || strncmp(file, MODULE_PREFIX, lp) || strcmp(file + l - ls, MODULE_SUFFIX))
        return 0;
    size_t n = l - lp - ls;
    if (n >= cap)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = file[lp + i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_'))
            return 0;
    }
    memcpy(id, file + lp, n);
    id[n] = 0;
    return 1;
}

static int module_filter(const struct dirent *d)
{
    char id[32];
    return module_id(d->d_name, id, sizeof(id));
}

/* Why dlopen failed, without the path dlerror() starts with. */
static const char *dl_why(const char *path)
{
    const char *e = dlerror();
    if (!e)
        return "unknown dlopen error";
    size_t lp = strlen(path);
    if (!strncmp(e, path, lp) && !strncmp(e + lp, ": ", 2))
        e += lp + 2;
    return e;
}

/* The first function a module's table lacks of those every transport has. */
static const char *ops_missing(const nxlt_ops_t *o)
{
#define REQ(f)                                                                                 \
    if (!o->f)                                                                                 \
        return #f;
    REQ(create) REQ(destroy) REQ(reg) REQ(dereg) REQ(pack_key) REQ(conn_info) REQ(load_conn)
    REQ(load_key) REQ(unload_key) REQ(unload_conn) REQ(post) REQ(notif_send)
#undef REQ
    return NULL;
}

/* Opens one module file; fills *t (usable or not). Returns the handle to
 * keep, or NULL. */
static void *module_open(const char *path, const char *file, const char *id, nxli_transport_t *t)
{
    const struct configured *c = configured_find(id);
    memset(t, 0, sizeof(*t));
    t->st = NXL_ERR_NOT_FOUND;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dl_why(path);
        if (strstr(why, "cannot open shared object file"))
            snprintf(t->reason, sizeof(t->reason), "%.48s: %s; install %s", file, why,
                     c && c->hint && c->hint[0] ? c->hint : "what `ldd` on it reports not found");
        else
            snprintf(t->reason, sizeof(t->reason), "%.48s: %s", file, why);
        return NULL;
    }
    char sym[64];
    snprintf(sym, sizeof(sym), "nxlt_%s_ops", id);
    dlerror();
    const nxlt_ops_t *ops = dlsym(h, sym);
    if (!ops) {
        snprintf(t->reason, sizeof(t->reason),
                 "%.48s exports no %s: not an nxl transport module", file, sym);
    } else if (ops->abi_version != NXLT_ABI_VERSION) {
        /* of another ABI nothing past abi_version can be trusted */
        t->st = NXL_ERR_MISMATCH;
        snprintf(t->reason, sizeof(t->reason),
                 "%.48s speaks transport ABI %u, this libnxl %u: install the module built "
                 "with this libnxl", file, ops->abi_version, NXLT_ABI_VERSION);
    } else if (!ops->name || strcasecmp(ops->name, id)) {
        t->st = NXL_ERR_MISMATCH;
        snprintf(t->reason, sizeof(t->reason),
                 "%.48s calls its transport '%.32s': a module's file must be named after it", file,
                 ops->name ? ops->name : "(null)");
    } else if (dlsym(h, "nxlt_op_done") && dlsym(h, "nxlt_op_done") != (void *)nxlt_op_done) {
        /* the module brought its own libnxl.so: this program has libnxl.a */
        snprintf(t->reason, sizeof(t->reason),
                 "%.48s needs the shared libnxl, and this program has libnxl linked "
                 "statically: link it with -lnxl (shared)", file);
    } else if (ops_missing(ops)) {
        t->st = NXL_ERR_MISMATCH;
        snprintf(t->reason, sizeof(t->reason), "%.48s: its transport has no %s(): a broken module",
                 file, ops_missing(ops));
    } else {
        t->ops = ops;
        t->name = ops->name;
        t->st = NXL_SUCCESS;
        return h;
    }
    dlclose(h);
    return NULL;
}

static void scan_dir(const char *dir)
{
    struct dirent **ents = NULL;
    int n = scandir(dir, &ents, module_filter, alphasort);
    if (n < 0)
        return; /* a folder that does not exist is not an error */
    for (int i = 0; i < n; i++) {
        const char *file = ents[i]->d_name;
        char id[32], path[4096];
        module_id(file, id, sizeof(id));
        nxli_transport_t *old = tab_find(id);
        const struct configured *c = configured_find(id);
        if (!old && c)
            old = tab_find(c->name);
        if ((old && old->ops) || (!old && ntab == MAX_TRANSPORTS))
            continue; /* a usable one of that name came first */
        if (snprintf(path, sizeof(path), "%s/%s", dir, file) >= (int)sizeof(path))
            continue;
        nxli_transport_t t;
        void *h = module_open(path, file, id, &t);
        if (old && !h)
            continue; /* the first reason stays */
        nxli_transport_t *slot = old ? old : &tab[ntab];
        t.path = strdup(path);
        if (!t.ops) {
            /* named as configure knows it ("UCX"), else after its file */
            char *nm = names[slot - tab];
            snprintf(nm, sizeof(names[0]), "%s", c ? c->name : id);
            t.name = nm;
        }
        if (old)
            free((char *)old->path);
        *slot = t;
        if (!old)
            ntab++;
    }
    for (int i = 0; i < n; i++)
        free(ents[i]);
    free(ents);
}

/* Where a module goes in the list: usable ones first, in configure's order. */
static size_t rank(const nxli_transport_t *t)
{
    size_t i = 0;
    for (const struct configured *c = configured; c->id; c++, i++)
        if (!strcasecmp(c->name, t->name) || !strcasecmp(c->id, t->name))
            break;
    return (t->ops ? 0 : MAX_TRANSPORTS * 2) + i;
}

static void load_once(void)
{
    for (size_t i = 0; builtin[i] && ntab < MAX_TRANSPORTS; i++) {
        tab[ntab].name = builtin[i]->name;
        tab[ntab].ops = builtin[i];
        tab[ntab].st = NXL_SUCCESS;
        ntab++;
    }
    /* NXL_PLUGIN_DIR first (not for setuid programs), then the install folder */
    const char *env = secure_getenv("NXL_PLUGIN_DIR");
    char *dirs = strdup(env ? env : "");
    if (dirs) {
        char *save = NULL;
        for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
            scan_dir(d);
            snprintf(searched + strlen(searched), sizeof(searched) - strlen(searched), "%s, ", d);
            snprintf(mdirs + strlen(mdirs), sizeof(mdirs) - strlen(mdirs), "%s:", d);
        }
        free(dirs);
    }
    if (NXL_MODULE_DIR[0])
        scan_dir(NXL_MODULE_DIR);
    snprintf(searched + strlen(searched), sizeof(searched) - strlen(searched), "%s",
             NXL_MODULE_DIR[0] ? NXL_MODULE_DIR : "(no install folder)");
    snprintf(mdirs + strlen(mdirs), sizeof(mdirs) - strlen(mdirs), "%s", NXL_MODULE_DIR);
    if (mdirs[0] && mdirs[strlen(mdirs) - 1] == ':')
        mdirs[strlen(mdirs) - 1] = 0;

    /* modules in the order configure lists transports (its preference), then the others */
    size_t first = 0;
    while (first < ntab && !tab[first].path)
        first++;
    for (size_t i = first + 1; i < ntab; i++)
        for (size_t j = i; j > first && rank(&tab[j]) < rank(&tab[j - 1]); j--) {
            nxli_transport_t tmp = tab[j];
            tab[j] = tab[j - 1];
            tab[j - 1] = tmp;
        }

    /* what configure knows but this process cannot use */
    for (const struct configured *c = configured; c->id && ntab < MAX_TRANSPORTS; c++) {
        if (tab_find(c->name) || tab_find(c->id))
            continue;
        nxli_transport_t *t = &tab[ntab++];
        t->name = c->name;
        t->st = NXL_ERR_NOT_FOUND;
        t->module_missing = c->state == MODULE;
        t->id = c->id;
        if (c->state == MODULE)
            snprintf(t->reason, sizeof(t->reason),
                     "module %s%s%s not found in NXL_PLUGIN_DIR nor %s: install it", MODULE_PREFIX,
                     c->id, MODULE_SUFFIX, NXL_MODULE_DIR);
        else
            snprintf(t->reason, sizeof(t->reason), "not built (configure --enable-%s): %s", c->id,
                     c->why);
    }
}

const nxli_transport_t *nxli_transports(size_t *n)
{
    pthread_once(&once, load_once);
    *n = ntab;
    return tab;
}

const nxli_transport_t *nxli_transport_find(const char *name)
{
    size_t n;
    const nxli_transport_t *t = nxli_transports(&n);
    for (size_t i = 0; i < n; i++)
        if (!strcasecmp(t[i].name, name))
            return &t[i];
    return NULL;
}

const char *nxli_transports_searched(void)
{
    pthread_once(&once, load_once);
    return searched;
}

nxl_status_t nxl_plugin_detail(const char *name, nxl_plugin_detail_t *out)
{
    if (!name || !out || !out->size)
        return NXL_ERR_INVALID_PARAM;
    const nxli_transport_t *found = nxli_transport_find(name);
    if (!found)
        return NXL_ERR_NOT_FOUND;
    nxl_plugin_detail_t d = {.size = out->size};
    if (found->ops) {
        d.caps = found->ops->caps;
        d.params = nxli_ops_params(found->ops, &d.nparams);
    }
    d.module = found->path;
    memcpy(out, &d, out->size < sizeof(d) ? out->size : sizeof(d));
    return NXL_SUCCESS;
}

#ifdef NXL_DEBUG
#define OPT_DEBUG "debug=yes"
#else
#define OPT_DEBUG "debug=no"
#endif
#ifdef NXL_HAVE_AUTH
#define OPT_AUTH " auth=yes"
#else
#define OPT_AUTH " auth=no"
#endif
#ifdef NXL_HAVE_TLS
#define OPT_TLS " tls=yes"
#else
#define OPT_TLS " tls=no"
#endif
#ifdef NXL_HAVE_ETCD
#define OPT_ETCD " etcd=yes"
#else
#define OPT_ETCD " etcd=no"
#endif

static char built[512];

static void built_once(void)
{
    for (const struct configured *c = configured; c->id; c++)
        snprintf(built + strlen(built), sizeof(built) - strlen(built), "%s%s=%s",
                 built[0] ? " " : "", c->name,
                 c->state == BUILT_IN ? "built-in" : c->state == MODULE ? "module" : "no");
}

void nxl_build_info(nxl_build_info_t *info)
{
    static pthread_once_t built_done = PTHREAD_ONCE_INIT;
    if (!info || !info->size)
        return;
    pthread_once(&once, load_once);
    pthread_once(&built_done, built_once);
    nxl_build_info_t b = {
        .size = info->size,
        .version = nxl_version(),
        .options = OPT_DEBUG OPT_AUTH OPT_TLS OPT_ETCD,
        .transports = built,
        .module_dirs = mdirs,
        .transport_abi = NXLT_ABI_VERSION,
    };
    memcpy(info, &b, info->size < sizeof(b) ? info->size : sizeof(b));
}
