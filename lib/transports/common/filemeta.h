/* SPDX-License-Identifier: BSD-3-Clause */
/* The descriptor meta of a FILE region, for the transports that open the
 * files themselves (POSIX, GDS): text such as
 *
 *     path=/data/kv.bin;mode=create,direct
 *
 * keys path (required), mode (r, w, rw, create; direct or buffered) and
 * direct=0|1. A trailing NUL is tolerated. Sentences name the transport
 * (who). Header-only, as regtab.h. */
#ifndef NXL_FILEMETA_H
#define NXL_FILEMETA_H

#include <nxl.h>
#include <nxl/transport.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

typedef struct nxlt_filemeta {
    char path[PATH_MAX];
    int acc;    /* O_RDONLY, O_WRONLY, O_RDWR (the default) */
    bool create;
    int direct; /* 1: O_DIRECT, 0: buffered, -1: not said */
} nxlt_filemeta_t;

#define NXLT_FILEMETA_MAX (2 * PATH_MAX)

static inline nxl_status_t nxlt_filemeta_parse(nxlt_ctx_t *ctx, const char *who,
                                               const nxl_desc_t *d, nxlt_filemeta_t *m)
{
    m->path[0] = 0;
    m->acc = O_RDWR;
    m->create = false;
    m->direct = -1;
    size_t len = d->meta_len;
    if (d->meta && len && len <= NXLT_FILEMETA_MAX && ((const char *)d->meta)[len - 1] == 0)
        len--; /* a trailing NUL */
    if (!d->meta || len > NXLT_FILEMETA_MAX || memchr(d->meta, 0, len)) {
        nxlt_error(ctx, "%s: descriptor meta must be text such as \"path=/data/kv.bin;"
                        "mode=create\" (at most %d bytes)", who, NXLT_FILEMETA_MAX);
        return NXL_ERR_INVALID_PARAM;
    }
    char buf[NXLT_FILEMETA_MAX + 1];
    memcpy(buf, d->meta, len);
    buf[len] = 0;
    char *save = NULL;
    for (char *kv = strtok_r(buf, ";", &save); kv; kv = strtok_r(NULL, ";", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq) {
            nxlt_error(ctx, "%s: descriptor meta field '%s' is not key=value (keys: path, mode, "
                            "direct)", who, kv);
            return NXL_ERR_INVALID_PARAM;
        }
        *eq = 0;
        const char *v = eq + 1;
        if (!strcmp(kv, "path")) {
            if (!*v || strlen(v) >= sizeof(m->path)) {
                nxlt_error(ctx, "%s: descriptor meta has an empty or too long path", who);
                return NXL_ERR_INVALID_PARAM;
            }
            snprintf(m->path, sizeof(m->path), "%s", v);
        } else if (!strcmp(kv, "mode")) {
            char mb[64], *s2 = NULL;
            snprintf(mb, sizeof(mb), "%s", v);
            bool r = false, w = false;
            for (char *t = strtok_r(mb, ",|+", &s2); t; t = strtok_r(NULL, ",|+", &s2)) {
                if (!strcmp(t, "r"))
                    r = true;
                else if (!strcmp(t, "w"))
                    w = true;
                else if (!strcmp(t, "rw"))
                    r = w = true;
                else if (!strcmp(t, "create"))
                    r = w = m->create = true;
                else if (!strcmp(t, "direct"))
                    m->direct = 1;
                else if (!strcmp(t, "buffered"))
                    m->direct = 0;
                else {
                    nxlt_error(ctx, "%s: unknown mode '%s' in descriptor meta (r, w, rw, create, "
                                    "direct, buffered)", who, t);
                    return NXL_ERR_INVALID_PARAM;
                }
            }
            if (r || w)
                m->acc = r && w ? O_RDWR : r ? O_RDONLY : O_WRONLY;
        } else if (!strcmp(kv, "direct")) {
            m->direct = !strcmp(v, "1") || !strcmp(v, "yes") || !strcmp(v, "true");
        } else {
            nxlt_error(ctx, "%s: unknown descriptor meta key '%s' (path, mode, direct)", who, kv);
            return NXL_ERR_INVALID_PARAM;
        }
    }
    if (!m->path[0]) {
        nxlt_error(ctx, "%s: descriptor meta names no path (\"path=/x/y;mode=rw\")", who);
        return NXL_ERR_INVALID_PARAM;
    }
    return NXL_SUCCESS;
}

/* nxl_mem_query() of a FILE descriptor — by path (meta, parsed into *m)
 * or by fd (dev_id; m->path empty): NXL_SUCCESS with *exists and, when it
 * exists, *sb; a sentence and a status when it cannot be told (not
 * allowed to look, say). A missing file, or an fd not open, is not there. */
static inline nxl_status_t nxlt_filemeta_stat(nxlt_ctx_t *ctx, const char *who,
                                              const nxl_desc_t *d, nxlt_filemeta_t *m,
                                              struct stat *sb, bool *exists)
{
    *exists = false;
    m->path[0] = 0;
    char what[PATH_MAX + 16];
    int rc;
    if (d->meta_len) {
        nxl_status_t st = nxlt_filemeta_parse(ctx, who, d, m);
        if (st != NXL_SUCCESS)
            return st;
        rc = stat(m->path, sb);
        snprintf(what, sizeof(what), "'%s'", m->path);
    } else {
        if (d->dev_id > INT_MAX)
            return NXL_SUCCESS; /* not an fd: nothing there */
        rc = fstat((int)d->dev_id, sb);
        snprintf(what, sizeof(what), "fd %d", (int)d->dev_id);
    }
    if (rc < 0) {
        int e = errno;
        if (e == ENOENT || e == ENOTDIR || e == EBADF)
            return NXL_SUCCESS; /* does not exist */
        nxlt_error(ctx, "%s: cannot query %s: %s", who, what, strerror(e));
        return e == EACCES || e == EPERM ? NXL_ERR_NOT_ALLOWED
               : e == ENAMETOOLONG || e == EINVAL ? NXL_ERR_INVALID_PARAM
                                                  : NXL_ERR_BACKEND;
    }
    *exists = true;
    return NXL_SUCCESS;
}

#endif
