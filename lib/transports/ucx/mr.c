/* SPDX-License-Identifier: BSD-3-Clause */
#include "config.h"
#include "ucx.h"

#include <sys/mman.h>

/* ------------------------------------------------------------- memory */

/* [addr, addr + len), memory the application has, mapped with ucp (the
 * main context, or a rail's for the same region) */
ucs_status_t nxl_ucx_mem_map(ucp_context_h ucp, nxl_mem_t type, void *addr, size_t len,
                             ucp_mem_h *memh)
{
    ucp_mem_map_params_t mp = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
        .address = addr,
        .length = len,
    };
    if (type == NXL_VRAM) {
        mp.field_mask |= UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
        mp.memory_type = UCS_MEMORY_TYPE_CUDA;
    }
    return ucp_mem_map(ucp, &mp, memh);
}

/* VRAM (only in a build against a UCX with CUDA, NXL_UCX_CUDA): mapped
 * with its memory type, so that UCX's CUDA transports serve it to peers;
 * where this UCX cannot (no CUDA memory type at run time) it is declined
 * (NXL_ERR_NOT_SUPPORTED), and the engine leaves it to the other
 * transports. VRAM is never an AM_WRITE target (written with memcpy). */
nxl_status_t nxl_ucx_reg(void *state, nxl_mem_t type, const nxl_desc_t *d, void **out)
{
    ucx_t *u = state;
    *out = NULL;
    if (type == NXL_VRAM && !u->cuda) {
        nxlt_error(u->ctx, "UCX: cannot register VRAM 0x%lx+%zu: this UCX has no CUDA memory "
                   "support here (ucp_context_query); the CUDA transport serves VRAM",
                   (unsigned long)d->addr, d->len);
        return NXL_ERR_NOT_SUPPORTED;
    }
    ucx_md_t *m = calloc(1, sizeof(*m));
    if (!m)
        return NXL_ERR_UNKNOWN;
    /* before UCX maps it: a device that pins the pages would leave them
     * where they are */
    if (type == NXL_DRAM) {
        nxlt_thp_add(&u->thp_state, u->ctx, "UCX", u->thp, UCX_THP_SYNC_MAX, d->addr, d->len);
        m->addr = d->addr;
        m->len = d->len;
    }
    ucs_status_t st = nxl_ucx_mem_map(u->ucp, type, (void *)d->addr, d->len, &m->memh);
    if (st != UCS_OK) {
        nxlt_error(u->ctx, "UCX: ucp_mem_map of %s 0x%lx+%zu failed: %s (is the range mapped? "
                   "is the locked-memory limit, ulimit -l, large enough for RDMA devices?)",
                   nxl_mem_name(type), (unsigned long)d->addr, d->len, ucs_status_string(st));
        nxlt_thp_drop(u->thp_state, m->addr, m->len);
        free(m);
        return NXL_ERR_BACKEND;
    }
    if (type == NXL_DRAM)
        nxl_ucx_rails_reg(u, m, (void *)d->addr, d->len);
    *out = m;
    return NXL_SUCCESS;
}

void nxl_ucx_dereg(void *state, void *md)
{
    ucx_t *u = state;
    ucx_md_t *m = md;
    if (!m)
        return;
    /* nothing collapsed in it once the application may free it */
    nxlt_thp_drop(u->thp_state, m->addr, m->len);
    nxl_ucx_rails_dereg(u, m);
    ucp_mem_unmap(u->ucp, m->memh);
    free(m);
}

/* The application gave the region up. UCX does not check the address of a
 * put or get at the target (on shared memory and TCP, into malloc'd
 * memory, its software RMA copies wherever the initiator says), so the
 * peers this agent is connected to are told, ahead of anything this agent
 * sends them afterwards on the same endpoint:
 *   [u16 name length][name][u8 type][u64 dev][u64 addr][u64 len]
 * Small WRITEs into it are dropped here from now on. */
void nxl_ucx_mem_revoke(void *state, nxl_mem_t type, const nxl_desc_t *d, void *md)
{
    ucx_t *u = state;
    const char *me = nxl_agent_name(nxlt_agent(u->ctx));
    size_t nl = strlen(me), len = 2 + nl + 1 + 24;
    ucx_conn_t *c;
    LIST_FOREACH(c, &u->conns, link)
    {
        if (!c->ep || c->failed || c->fail_deferred || c->unloaded)
            continue; /* (aborted: the new endpoint is made after the close) */
        ucx_side_t *m = malloc(sizeof(*m) + len);
        if (!m) {
            nxlt_log(u->ctx, NXL_LOG_ERROR, "UCX: out of memory: agent '%s' was not told of a "
                     "deregistered region", c->name);
            continue;
        }
        unsigned char *w = nxl_ucx_name_put(m->buf, me, nl);
        *w++ = (unsigned char)type;
        ucx_ci_put(w, d->dev_id, 8), ucx_ci_put(w + 8, d->addr, 8), ucx_ci_put(w + 16, d->len, 8);
        m->len = len;
        nxl_ucx_side_send(u, c->ep, NXL_UCX_AM_REVOKE, m);
    }
}

ucs_status_t nxl_ucx_am_recv_revoke(void *arg, const void *header, size_t hlen, void *data,
                                    size_t len, const ucp_am_recv_param_t *param)
{
    ucx_t *u = arg;
    if (nxl_ucx_later(u, nxl_ucx_am_recv_revoke, data, len, param))
        return UCS_OK;
    const unsigned char *b = data;
    char from[256];
    size_t nk = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) ? 0
                                                                 : nxl_ucx_name_get(b, len, from);
    if (!nk || len != nk + 1 + 24) {
        nxlt_log(u->ctx, NXL_LOG_WARN, "UCX: malformed region revocation of %zu bytes dropped",
                 len);
        return UCS_OK;
    }
    b += nk;
    nxlt_remote_revoked(u->ctx, from, (nxl_mem_t)b[0], ucx_ci_get(b + 1, 8), ucx_ci_get(b + 9, 8),
                        ucx_ci_get(b + 17, 8));
    u->net.hit = true;
    return UCS_OK;
}

/* nxl_mem_alloc's DRAM on 2 MiB pages (thp_collapse not off). UCX
 * allocates it on System V shared memory (POSIX where that fails), which
 * the peer maps and copies with the CPU; shared memory faults in 4 KiB
 * pages wherever /sys/kernel/mm/transparent_hugepage/shmem_enabled says
 * never (Debian's default), and one thread's copy of 16-64 MiB between
 * such pages ran at 0.7-0.97 of the same copy between 2 MiB pages here
 * (bench/memcpy_ref shm against thp); one such transfer at a time ran at
 * 0.66-0.73 of that memcpy on 4 KiB pages, 0.96-1.08 on 2 MiB pages
 * (doc/perf/README.md). madvise(MADV_COLLAPSE) (Linux 6.1) puts shared
 * memory on 2 MiB pages whatever shmem_enabled says (but deny); a 2 MiB
 * page is mapped as one only at a 2 MiB-aligned address, so the segment
 * is attached at one (UCX attaches at the address it is given: a hole
 * reserved here first, PROT_NONE), one byte of each 2 MiB is written (the
 * kernel collapses no range none of whose pages exists) and the whole is
 * collapsed before the call returns (thp_collapse auto up to
 * UCX_THP_ALLOC_SYNC_MAX, and sync), or the first 2 MiB so and the rest
 * by the thread of registered DRAM (background; auto, larger: each 2 MiB
 * then copies what the application wrote there meanwhile). The memory is
 * in RAM from then on, zeroed, as the application's first writes would
 * have had it. The unit is the system's huge page size where larger
 * (UCX's System V segments try hugetlb pages first: a multiple of it, at
 * an address aligned to it). Nothing of this is an error: where the
 * kernel declines (before 6.1, no 2 MiB page free, hugetlb pages already)
 * the memory is as it would have been. The peer maps the segment where
 * its kernel chooses, 2 MiB pages there mapped 4 KiB at a time unless
 * that address is aligned.
 *
 * A peer's segment mapped here lands where the kernel chooses: the top of
 * the highest free gap that holds it, in practice right below this
 * agent's last such region, ending where it begins. One thread's copy
 * between two addresses a multiple of 256 MiB apart ran at 0.7-0.8 of the
 * same copy at distances 2 MiB more or less (AMD's level-1 data cache
 * tells lines apart by a hash of address bits 12-27: two lines that agree
 * there evict each other), and a peer's region of 256 MiB, 512 MiB or
 * 1 GiB ended right there: every byte of its puts and gets was copied at
 * that distance (0.71-0.75 of memcpy per CPU second, doc/perf). So a
 * region keeps 2 MiB of its hole reserved below it (PROT_NONE, no memory;
 * 4 MiB where its own size plus 2 MiB is a multiple of 256 MiB) until
 * nxl_mem_free: a segment of the same size then lands 2 MiB-aligned
 * (mapped by 2 MiB pages) at a distance that is not such a multiple. */
#define UCX_HUGE ((size_t)2 << 20)
#define UCX_ALIAS ((size_t)256 << 20)
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

/* the system's default huge page size (/proc/meminfo), at least 2 MiB:
 * read once, at the transport's start (ucx_t.huge_unit) */
size_t nxl_ucx_huge_unit(void)
{
    size_t unit = UCX_HUGE;
    FILE *f = fopen("/proc/meminfo", "r");
    char line[128];
    unsigned long kb;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "Hugepagesize: %lu kB", &kb) == 1) {
            if ((size_t)kb << 10 > unit && !((kb << 10) & ((kb << 10) - 1)))
                unit = (size_t)kb << 10;
            break;
        }
    if (f)
        fclose(f);
    return unit;
}

/* UCX's allocation of len bytes at an address aligned to the huge page
 * unit, then collapsed; UCS_OK with *memh, or UCX's refusal (nothing
 * left mapped: the caller allocates as before) */
static ucs_status_t ucx_alloc_huge(ucx_t *u, size_t len, ucx_md_t *m)
{
    ucp_mem_h *memh = &m->memh;
    /* asked of UCX: whole 2 MiB pages; reserved: room for whole pages of
     * the unit, where UCX gets hugetlb pages (it rounds up to them). Not
     * the unit asked: with 1 GiB hugetlb pages by default and none free,
     * 2 MiB was 1 GiB of shared memory, all of it collapsed (check_ucx
     * t_alloc_huge_unit) */
    size_t unit = u->huge_unit, alen = (len + UCX_HUGE - 1) / UCX_HUGE * UCX_HUGE,
           ulen = (len + unit - 1) / unit * unit;
    size_t gap = (alen + UCX_HUGE) % UCX_ALIAS ? UCX_HUGE : 2 * UCX_HUGE, span = gap + ulen + unit;
    char *r = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED)
        return UCS_ERR_NO_MEMORY;
    char *a = (char *)(((uintptr_t)r + gap + unit - 1) & ~(uintptr_t)(unit - 1));
    ucp_mem_map_params_t mp = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_FLAGS,
        .address = a,
        .length = alen,
        .flags = UCP_MEM_MAP_ALLOCATE | UCP_MEM_MAP_FIXED,
    };
    ucs_status_t st = ucp_mem_map(u->ucp, &mp, memh);
    ucp_mem_attr_t attr = {.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH};
    if (st == UCS_OK && ((st = ucp_mem_query(*memh, &attr)) != UCS_OK || attr.address != a ||
                         attr.length > span - (size_t)(a - r))) {
        if (st == UCS_OK)
            st = UCS_ERR_INVALID_ADDR; /* not where it was asked: not used */
        ucp_mem_unmap(u->ucp, *memh);
    }
    if (st != UCS_OK) {
        munmap(r, span); /* what is left of the hole */
        nxlt_log(u->ctx, NXL_LOG_DEBUG, "UCX: %zu bytes of shared memory at a 2 MiB-aligned "
                 "address: %s; allocated as before (4 KiB pages)", len, ucs_status_string(st));
        return st;
    }
    if (a - gap > r)
        munmap(r, (size_t)(a - gap - r));
    m->gap = a - gap; /* the rest of the hole below: unmapped at nxl_mem_free */
    m->gap_len = gap;
    if (a + attr.length < r + span)
        munmap(a + attr.length, (size_t)(r + span - (a + attr.length)));
    for (size_t o = 0; o < attr.length; o += UCX_HUGE)
        ((volatile char *)a)[o] = 0;
    bool now = u->thp_alloc == NXLT_THP_SYNC ||
               (u->thp_alloc == NXLT_THP_AUTO && attr.length <= UCX_THP_ALLOC_SYNC_MAX);
    /* in the background: the first 2 MiB here, so that where the kernel
     * cannot (EINVAL: before 6.1, hugetlb pages) nothing is queued and the
     * thread does not conclude that registered DRAM cannot either */
    if (madvise(a, now ? attr.length : UCX_HUGE, MADV_COLLAPSE) != 0) {
        nxlt_log(u->ctx, NXL_LOG_DEBUG, "UCX: %zu bytes of shared memory stay on their pages: "
                 "madvise(MADV_COLLAPSE): %s", len, strerror(errno));
    } else if (now) {
        u->huge_allocs++;
        u->huge_bytes += attr.length;
    } else if (attr.length > UCX_HUGE) {
        m->addr = (uintptr_t)a + UCX_HUGE; /* dropped at nxl_mem_free (nxl_ucx_dereg) */
        m->len = attr.length - UCX_HUGE;
        nxlt_thp_add(&u->thp_state, u->ctx, "UCX", NXLT_THP_BACKGROUND, 0, m->addr, m->len);
    }
    return UCS_OK;
}

nxl_status_t nxl_ucx_mem_alloc(void *state, nxl_mem_t type, size_t len, uint64_t dev, void **ptr,
                               void **md)
{
    ucx_t *u = state;
    if (type != NXL_DRAM) {
        /* VRAM is allocated by the CUDA transport and registered here */
        nxlt_error(u->ctx, "UCX: allocates DRAM only, not %s (the CUDA transport allocates "
                   "VRAM)", nxl_mem_name(type));
        return NXL_ERR_NOT_SUPPORTED;
    }
    /* more than the host's memory cannot be had, and UCX would find that
     * out only after writing /dev/shm full (a file a process killed
     * meanwhile leaves behind), twice with the 2 MiB attempt first */
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (pages > 0 && psz > 0 && len / (size_t)psz > (size_t)pages) {
        nxlt_error(u->ctx, "UCX: %zu bytes of DRAM asked of nxl_mem_alloc: more than this "
                   "host's memory (%zu bytes)", len, (size_t)pages * (size_t)psz);
        return NXL_ERR_BACKEND;
    }
    ucx_md_t *m = calloc(1, sizeof(*m));
    if (!m)
        return NXL_ERR_UNKNOWN;
    ucp_mem_map_params_t mp = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_FLAGS,
        .address = NULL,
        .length = len,
        .flags = UCP_MEM_MAP_ALLOCATE,
    };
    ucs_status_t st = UCS_ERR_UNSUPPORTED;
    if (u->thp_alloc != NXLT_THP_OFF && len >= UCX_HUGE)
        st = ucx_alloc_huge(u, len, m);
    if (st != UCS_OK)
        st = ucp_mem_map(u->ucp, &mp, &m->memh);
    ucp_mem_attr_t attr = {.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH};
    bool mapped = st == UCS_OK;
    if (mapped)
        st = ucp_mem_query(m->memh, &attr);
    if (st != UCS_OK) {
        nxlt_error(u->ctx, "UCX: %s(ALLOCATE, %zu bytes) failed: %s",
                   mapped ? "ucp_mem_query of ucp_mem_map" : "ucp_mem_map", len,
                   ucs_status_string(st));
        if (mapped)
            nxl_ucx_mem_free(u, NULL, m); /* UCX's memory, the gap below, a queued collapse */
        else
            free(m);
        return NXL_ERR_BACKEND;
    }
    nxl_ucx_rails_reg(u, m, attr.address, len);
    *ptr = attr.address;
    *md = m;
    return NXL_SUCCESS;
}

void nxl_ucx_mem_free(void *state, void *ptr, void *md)
{
    ucx_md_t *m = md;
    void *gap = m ? m->gap : NULL;
    size_t gap_len = m ? m->gap_len : 0;
    nxl_ucx_dereg(state, md); /* unmapping memory UCX allocated frees it */
    if (gap)
        munmap(gap, gap_len);
}

nxl_status_t nxl_ucx_pack_key(void *state, void *md, void **buf, size_t *len)
{
    ucx_t *u = state;
    ucx_md_t *m = md;
    void *rb;
    size_t rl;
    ucs_status_t st = ucp_rkey_pack(u->ucp, m->memh, &rb, &rl);
    if (st != UCS_OK) {
        nxlt_error(u->ctx, "UCX: ucp_rkey_pack failed: %s", ucs_status_string(st));
        return NXL_ERR_BACKEND;
    }
    *buf = malloc(rl);
    if (*buf)
        memcpy(*buf, rb, rl);
    *len = rl;
    ucp_rkey_buffer_release(rb);
    if (!*buf)
        return NXL_ERR_UNKNOWN;
    nxl_status_t ns = nxl_ucx_rails_pack_key(u, m, buf, len);
    if (ns != NXL_SUCCESS) {
        free(*buf);
        *buf = NULL;
    }
    return ns;
}

nxl_status_t nxl_ucx_load_key(void *state, void *conn, const void *buf, size_t len, void **rkey)
{
    ucx_t *u = state;
    ucx_conn_t *c = conn;
    /* UCX takes no length: check what it will read, and give it a padded
     * copy (wire.h) */
    size_t need = ucx_rkey_need(buf, len);
    if (!need) {
        nxlt_error(u->ctx, "UCX: a memory key of agent '%s' is malformed: %zu bytes, fewer "
                   "than the UCX key they begin says it holds (cut short or corrupt "
                   "metadata)", c->name, len);
        return NXL_ERR_MISMATCH;
    }
    ucx_rkey_t *k = calloc(1, sizeof(*k));
    unsigned char *copy = k ? malloc(len + UCX_RKEY_PAD) : NULL;
    if (!copy) {
        free(k);
        return NXL_ERR_UNKNOWN;
    }
    memcpy(copy, buf, len);
    memset(copy + len, 0xff, UCX_RKEY_PAD);
    k->packed = copy;
    nxl_status_t ns = nxl_ucx_rkey_unpack(c, k);
    if (ns != NXL_SUCCESS) {
        free(copy);
        free(k);
        return ns;
    }
    k->conn = c;
    LIST_INSERT_HEAD(&c->rkeys, k, link);
    nxl_ucx_rails_load_key(u, c, buf, len, need, k);
    *rkey = k;
    return NXL_SUCCESS;
}

/* k's key on c's endpoint (none while it has none: unpacked with the next) */
nxl_status_t nxl_ucx_rkey_unpack(ucx_conn_t *c, ucx_rkey_t *k)
{
    if (k->rk)
        ucp_rkey_destroy(k->rk);
    k->rk = NULL;
    k->mapped = -1;
    if (!c->ep)
        return NXL_SUCCESS;
    ucs_status_t st = ucp_ep_rkey_unpack(c->ep, k->packed, &k->rk);
    if (st != UCS_OK) {
        k->rk = NULL;
        nxlt_error(c->u->ctx, "UCX: ucp_ep_rkey_unpack of a key of agent '%s' failed: %s",
                   c->name, ucs_status_string(st));
        return NXL_ERR_BACKEND;
    }
    return NXL_SUCCESS;
}

void nxl_ucx_unload_key(void *state, void *rkey)
{
    ucx_rkey_t *k = rkey;
    if (k->conn)
        LIST_REMOVE(k, link);
    nxl_ucx_rails_unload_key(k);
    if (k->rk)
        ucp_rkey_destroy(k->rk);
    free(k->packed);
    free(k);
}
