/* SPDX-License-Identifier: BSD-3-Clause */
/* The OBJ transport's multipart uploads: S3's (create, parts, complete,
 * abort) and Azure's block lists (Put Block per part, Put Block List). */
#include "obj.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int nxl_obj_block_id(unsigned part, char *out, size_t cap)
{
    char raw[24];
    snprintf(raw, sizeof(raw), "nxlblock%06u", part); /* 14 bytes, the same for all parts */
    char *id = nxli_b64_encode(raw, 14);
    if (!id)
        return -1;
    snprintf(out, cap, "%s", id);
    free(id);
    return 0;
}

/* A multipart upload of element elem (buf, len) into k: S3's starts with
 * its create request, Azure's parts are queued at once; -1 when out of
 * memory (what was made stays on x, for post's undo). */
int nxl_obj_mpu_start(obj_xop_t *x, obj_key_t *k, size_t elem, const void *buf, size_t len)
{
    obj_t *o = x->o;
    obj_mpu_t *m = calloc(1, sizeof(*m));
    if (!m)
        return -1;
    m->x = x;
    m->k = k;
    k->refs++;
    m->elem = elem;
    m->buf = buf;
    m->len = len;
    m->part = o->part;
    m->nparts = (unsigned)((len + o->part - 1) / o->part);
    LIST_INSERT_HEAD(&x->mpus, m, link);
    if (o->api == OBJ_AZURE)
        return nxl_obj_mpu_parts(m);
    m->etags = calloc(m->nparts, sizeof(*m->etags));
    obj_req_t *r = m->etags ? nxl_obj_req_new(x, R_MPU_CREATE, k, elem) : NULL;
    if (!r)
        return -1;
    r->mpu = m;
    nxl_obj_req_enqueue(o, r, false);
    return 0;
}

void nxl_obj_mpu_abort(obj_mpu_t *m)
{
    if (!m->upload_id || m->active > 0 || m->aborting || m->done)
        return;
    m->aborting = true;
    obj_req_t *r = nxl_obj_req_new(m->x, R_MPU_ABORT, m->k, m->elem);
    if (!r) {
        nxlt_log(m->x->o->ctx, NXL_LOG_WARN, "%s: out of memory aborting the multipart upload "
                 "%s of '%s'", m->x->o->tname, m->upload_id, m->k->key);
        return;
    }
    r->mpu = m;
    nxl_obj_req_enqueue(m->x->o, r, true);
}

/* The next part request of m, queued; Azure's parts start at once. */
int nxl_obj_mpu_parts(obj_mpu_t *m)
{
    for (unsigned i = 0; i < m->nparts; i++) {
        obj_req_t *r = nxl_obj_req_new(m->x, R_MPU_PART, m->k, m->elem);
        if (!r)
            return -1;
        r->mpu = m;
        r->part = i + 1;
        r->buf = (char *)m->buf + (size_t)i * m->part;
        r->len = i + 1 < m->nparts ? m->part : m->len - (size_t)i * m->part;
        m->active++;
        nxl_obj_req_enqueue(m->x->o, r, false);
    }
    return 0;
}

int nxl_obj_mpu_complete(obj_mpu_t *m)
{
    obj_t *o = m->x->o;
    size_t cap = 128 + (size_t)m->nparts * 200, len = 0;
    char *b = malloc(cap);
    if (!b)
        return -1;
    if (o->api == OBJ_AZURE) {
        len += (size_t)snprintf(b + len, cap - len,
                                "<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList>");
        for (unsigned i = 0; i < m->nparts; i++) {
            char id[32];
            if (nxl_obj_block_id(i + 1, id, sizeof(id)) < 0) {
                free(b);
                return -1;
            }
            len += (size_t)snprintf(b + len, cap - len, "<Latest>%s</Latest>", id);
        }
        len += (size_t)snprintf(b + len, cap - len, "</BlockList>");
    } else {
        len += (size_t)snprintf(b + len, cap - len, "<CompleteMultipartUpload>");
        for (unsigned i = 0; i < m->nparts; i++)
            len += (size_t)snprintf(b + len, cap - len,
                                    "<Part><PartNumber>%u</PartNumber><ETag>%s</ETag></Part>",
                                    i + 1, m->etags[i] ? m->etags[i] : "");
        len += (size_t)snprintf(b + len, cap - len, "</CompleteMultipartUpload>");
    }
    obj_req_t *r = nxl_obj_req_new(m->x, R_MPU_COMPLETE, m->k, m->elem);
    if (!r) {
        free(b);
        return -1;
    }
    r->mpu = m;
    r->body = b;
    r->buf = b;
    r->len = len;
    nxl_obj_req_enqueue(o, r, true);
    return 0;
}
