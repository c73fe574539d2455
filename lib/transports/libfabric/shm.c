/* SPDX-License-Identifier: BSD-3-Clause */
/* LIBFABRIC: the shm endpoints of this process (retired, not closed,
 * while another one is open) and shm's leftover regions */
#include "lf.h"

/* libfabric 1.17's shm provider reaches a peer of the same process through
 * that peer's own mapping of its region (smr_map_to_region finds the peer,
 * by name, in the provider's list of the process's endpoints), and closing
 * an endpoint unmaps its region (smr_free) under every other endpoint of
 * the process that knows it: their next post to it, or their progress
 * answering a command it left in their queue (inside fi_cq_read), faults.
 * A peer in another process has a mapping of its own, which outlives the
 * peer's close. So while another shm endpoint of this process is open, a
 * destroyed agent's endpoint is retired instead of closed: kept open (its
 * region mapped), never progressed again, with its completion queue,
 * address vector, domain and receive buffers, until the last shm endpoint
 * of the process closes and closes the retired ones after itself. The
 * agents still open learn of it (shm_gen) at their next post or loop turn
 * and fail their operations to it with NXL_ERR_REMOTE_DISCONNECT; an
 * address of this process that is not open anymore is refused at
 * load_conn (the provider would map the closed region). */
typedef struct lf_shm_ep {
    LIST_ENTRY(lf_shm_ep) link;
    bool live;
    /* retired: what stays open */
    lf_fids_t fids;
    unsigned char *rxmem;
    size_t len;
    unsigned char name[256];
} lf_shm_ep_t;

static pthread_mutex_t shm_lock = PTHREAD_MUTEX_INITIALIZER;
static lf_shm_list_t shm_eps = LIST_HEAD_INITIALIZER(shm_eps);
static unsigned shm_live;   /* open (not retired) entries of shm_eps */
static unsigned long shm_gen; /* bumped at every retirement */

/* Is this shm address ("[fi_shm://]PID:D:E") one of this process's? */
static bool shm_name_ours(const unsigned char *name, size_t len)
{
    char own[32];
    if (len >= 9 && !memcmp(name, "fi_shm://", 9)) {
        name += 9;
        len -= 9;
    }
    int k = snprintf(own, sizeof(own), "%ld:", (long)getpid());
    return k > 0 && len > (size_t)k && !memcmp(name, own, (size_t)k);
}

/* An address of this process whose endpoint is not open anymore? */
bool nxl_lf_shm_name_closed(const unsigned char *name, size_t len)
{
    if (!shm_name_ours(name, len))
        return false;
    bool open = false;
    lf_shm_ep_t *e;
    pthread_mutex_lock(&shm_lock);
    LIST_FOREACH(e, &shm_eps, link)
    if (e->live && e->len == len && !memcmp(e->name, name, len)) {
        open = true;
        break;
    }
    pthread_mutex_unlock(&shm_lock);
    return !open;
}

bool nxl_lf_shm_register(lf_t *u)
{
    lf_shm_ep_t *e = calloc(1, sizeof(*e));
    if (!e || u->name_len > sizeof(e->name)) {
        free(e);
        return false;
    }
    e->live = true;
    e->len = u->name_len;
    memcpy(e->name, u->name, u->name_len);
    pthread_mutex_lock(&shm_lock);
    LIST_INSERT_HEAD(&shm_eps, e, link);
    shm_live++;
    u->shm_gen_seen = shm_gen;
    pthread_mutex_unlock(&shm_lock);
    u->shm_ep = e;
    return true;
}

/* Connections to agents of this process whose endpoints were retired since
 * this agent last looked: failed from the loop (fail_deferred). */
void nxl_lf_shm_notice_closed(lf_t *u)
{
    if (!u->shm_ep)
        return;
    if (!nxl_netop_gen_moved(&shm_gen, &u->shm_gen_seen))
        return;
    lf_conn_t *c;
    LIST_FOREACH(c, &u->conns, link)
    {
        if (c->self || !c->av_entry || c->failed || c->fail_deferred)
            continue;
        if (nxl_lf_shm_name_closed(c->av_entry->name, c->av_entry->len)) {
            c->peer_closed = true;
            c->fail_deferred = FI_ESHUTDOWN;
            nxl_lf_kick(u);
        }
    }
}

/* Teardown of an shm endpoint: with another one of this process open, the
 * endpoint and what it needs are handed to its entry, which stays on
 * shm_eps (true); the last one takes the retired entries into @p reap, to
 * close after itself (false). */
bool nxl_lf_shm_unregister(lf_t *u, lf_shm_list_t *reap)
{
    lf_shm_ep_t *e = u->shm_ep, *r;
    u->shm_ep = NULL;
    pthread_mutex_lock(&shm_lock);
    e->live = false;
    bool retire = --shm_live > 0;
    if (retire) {
        e->fids = u->fids;
        e->rxmem = u->rxmem;
        u->fids = (lf_fids_t){0};
        u->rxmem = NULL;
        __atomic_add_fetch(&shm_gen, 1, __ATOMIC_RELEASE);
    } else {
        LIST_REMOVE(e, link);
        while ((r = LIST_FIRST(&shm_eps))) {
            LIST_REMOVE(r, link);
            LIST_INSERT_HEAD(reap, r, link);
        }
    }
    pthread_mutex_unlock(&shm_lock);
    if (!retire)
        free(e);
    return retire;
}

void nxl_lf_shm_close_retired(lf_shm_list_t *reap)
{
    lf_shm_ep_t *r;
    while ((r = LIST_FIRST(reap))) {
        LIST_REMOVE(r, link);
        nxl_lf_close_fids(&r->fids);
        free(r->rxmem);
        free(r);
    }
}

/* shm names its endpoint after the process ("fi_shm://PID:D:E") and creates
 * /dev/shm/PID:D:E exclusively at fi_enable. A process killed with SIGKILL
 * leaves its region behind, and once pids wrap around (pid_max is 32768 by
 * default) a process given the same pid cannot start its endpoint (EBUSY).
 * A region named with this process's pid that exists before this process
 * enabled its endpoint is such a leftover: removed, and logged. */
void nxl_lf_shm_clear_stale(lf_t *u)
{
    char name[256], own[32], path[300];
    size_t len = sizeof(name) - 1;
    if (fi_getname(&u->fids.ep->fid, name, &len) || len >= sizeof(name))
        return;
    name[len] = 0;
    const char *n = strncmp(name, "fi_shm://", 9) ? name : name + 9;
    int k = snprintf(own, sizeof(own), "%ld:", (long)getpid());
    if (strncmp(n, own, (size_t)k) || strchr(n, '/'))
        return;
    snprintf(path, sizeof(path), "/dev/shm/%s", n);
    if (!unlink(path))
        nxlt_log(u->ctx, NXL_LOG_INFO,
                 "LIBFABRIC: removed %s, left by a process that had this pid (killed before shm "
                 "could remove it)", path);
}
