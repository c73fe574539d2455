/* SPDX-License-Identifier: BSD-3-Clause */
/* The OBJ transport's small helpers: URL encoding, formatting and object
 * names for sentences. */
#include "obj.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Percent-encodes s (len bytes) for a URL path: unreserved characters and
 * '/' (when keep_slash) stay. */
char *nxl_obj_url_enc(const char *s, size_t len, bool keep_slash)
{
    char *out = malloc(len * 3 + 1), *p = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
            *p++ = (char)c;
        } else {
            sprintf(p, "%%%02X", c);
            p += 3;
        }
    }
    *p = 0;
    return out;
}

char *nxl_obj_xsprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0)
        s = NULL;
    va_end(ap);
    return s;
}

/* "s3://bucket/key" for sentences */
const char *nxl_obj_oname(obj_t *o, const obj_key_t *k, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s://%s/%.200s", o->scheme_name, o->bucket, k ? k->key : "");
    return buf;
}
