/* SPDX-License-Identifier: BSD-3-Clause */
/* A vendor library the transport loads at run time rather than links (GDS:
 * libcufile, HF3FS: usrbio's, MOONCAKE: the Transfer Engine): loaded once a
 * process, by the name an environment variable gives or a default, its
 * symbols looked up into the transport's table, and the reason kept when it
 * cannot be used. Header-only. */
#ifndef NXL_DLLOAD_H
#define NXL_DLLOAD_H

#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* a symbol to look up and where its address goes */
typedef struct nxlt_dlsym {
    void **slot;
    const char *sym;
} nxlt_dlsym_t;

/* the library of the process: loaded once, usable or not and why */
typedef struct nxlt_dlonce {
    pthread_once_t once;
    bool ok;                 /* set by the loader when the library is usable */
    char why[300];           /* else the reason, set by the loader */
} nxlt_dlonce_t;

#define NXLT_DLONCE_INIT {PTHREAD_ONCE_INIT, false, ""}

/* runs @p load once a process; false: the reason (o->why) into @p why */
static inline bool nxlt_dlonce_get(nxlt_dlonce_t *o, void (*load)(void), char *why, size_t cap)
{
    pthread_once(&o->once, load);
    if (!o->ok && why && cap) {
        size_t n = strnlen(o->why, cap - 1); /* as much as @p why holds */
        memcpy(why, o->why, n);
        why[n] = 0;
    }
    return o->ok;
}

/* dlopens (RTLD_NOW | RTLD_LOCAL) what $@p env names when it is set and not
 * empty, else the first of @p names that loads; the name opened (or the
 * last tried) into @p name. NULL: dlerror()'s sentence for $env, or for the
 * first name, into @p err */
static inline void *nxlt_dl_open(const char *env, const char *const *names, size_t n,
                                 const char **name, char *err, size_t cap)
{
    const char *e = getenv(env);
    void *h = NULL;
    if (e && *e) {
        names = &e;
        n = 1;
    }
    for (size_t i = 0; i < n && !h; i++) {
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        *name = names[i];
        const char *de = h ? NULL : dlerror();
        if (!h && !i)
            snprintf(err, cap, "%s", de ? de : "dlopen failed");
    }
    return h;
}

/* cuts dlerror()'s ": No such file or directory" off @p err: true when
 * it was there (the library is not installed, rather than unusable) */
static inline bool nxlt_dl_cut_enoent(char *err)
{
    char *tail = strstr(err, ": No such file or directory");
    if (tail)
        *tail = 0;
    return tail != NULL;
}

/* looks every symbol of @p need up in @p h: NULL, or the first one missing */
static inline const char *nxlt_dl_syms(void *h, const nxlt_dlsym_t *need, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!(*need[i].slot = dlsym(h, need[i].sym)))
            return need[i].sym;
    return NULL;
}

#endif
