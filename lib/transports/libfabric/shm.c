/* SPDX-License-Identifier: BSD-3-Clause */
/* LIBFABRIC: the shm endpoints of this process (retired, not closed,
 * while another one is open) and shm's leftover regions */
#include "lf.h"
#include "../common/pidfd.h"

#include <sched.h>

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

/* an shm address ("[fi_shm://]PID:D:E") without its scheme: the name of
 * the region in /dev/shm */
static void shm_addr_region(const unsigned char **name, size_t *len)
{
    if (*len >= 9 && !memcmp(*name, "fi_shm://", 9)) {
        *name += 9;
        *len -= 9;
    }
}

/* Is this shm address ("[fi_shm://]PID:D:E") one of this process's? */
static bool shm_name_ours(const unsigned char *name, size_t len)
{
    char own[32];
    shm_addr_region(&name, &len);
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

/* ---- an shm peer in another process: its process, held by a pidfd
 *
 * libfabric 1.17's shm provider takes a spinlock in the peer's region
 * (shared memory) for every post to it (fi_writemsg, fi_readmsg, fi_send),
 * and the peer takes the same lock in its own progress. A peer killed while
 * it held the lock leaves it held for good: the next post to it spins in
 * pthread_spin_lock for ever, on whichever thread made it — in a threaded
 * agent the reactor or a thread acting for it, holding the agent's lock, so
 * that every call of the agent waits too, and the stall timeout, a timer
 * of that reactor, never fires. Posts are kept out of such a lock below
 * (nxl_lf_shm_lock_stuck); the peer's process is watched here, so that its
 * death fails the connection at once (NXL_ERR_REMOTE_DISCONNECT, "its
 * process exited"), not after the stall timeout: its address names it
 * ("fi_shm://PID:D:E"); a pidfd on that pid, whose process is proved to be
 * the peer by mapping the peer's region (/dev/shm/PID:D:E in
 * /proc/PID/maps: a peer in another pid namespace has a pid that names
 * another process here, or none), is watched in the loop. A peer not
 * proved keeps the stall timeout alone. The pidfd is not polled before
 * each post: it reads exited only once the exit is through (a millisecond
 * or more after SIGKILL), too late to keep posts out of a dead holder's
 * lock, and a poll(2) every 20 us cost a few percent of a pipelined 4 KiB
 * stream. */

/* Does the maps file @p maps (/proc/PID/maps) list a mapping of
 * /dev/shm/@p region (@p rl bytes)? With @p lo: the mapping of the region's
 * start (offset 0) longer than @p min bytes, its address in *lo. */
static bool region_mapped(const char *maps, const unsigned char *region, size_t rl, size_t min,
                          unsigned long *lo)
{
    char line[512], want[300];
    int n = snprintf(want, sizeof(want), " /dev/shm/%.*s\n",
                     (int)strnlen((const char *)region, rl), (const char *)region);
    if (n <= 0 || (size_t)n >= sizeof(want))
        return false;
    FILE *f = fopen(maps, "re");
    if (!f)
        return false;
    unsigned long start = 0, end = 0, off = 1;
    size_t wl = (size_t)n;
    bool found = false;
    while (!found && fgets(line, sizeof(line), f)) {
        size_t ll = strlen(line);
        found = ll >= wl && !memcmp(line + ll - wl, want, wl) &&
                (!lo || (sscanf(line, "%lx-%lx %*s %lx", &start, &end, &off) == 3 && off == 0 &&
                         end - start > min));
    }
    fclose(f);
    if (found && lo)
        *lo = start;
    return found;
}

static void on_pid_exit(nxlt_io_t *io, int fd, unsigned ready, void *arg)
{
    lf_conn_t *c = arg;
    nxl_lf_shm_watch_end(c); /* frees io: allowed from its own callback */
    if (!c->failed) {
        c->refs++;
        nxl_lf_conn_fail(c, FI_ESHUTDOWN, LF_PEER_EXITED, false);
        nxl_lf_conn_put(c);
    }
}

/* At load_conn: the process of the peer at shm address @p name, when it is
 * another process of this host and proved to be the peer. */
void nxl_lf_shm_watch_peer(lf_t *u, lf_conn_t *c, const unsigned char *name, size_t len)
{
    char region[256];
    if (!u->shm_ep || shm_name_ours(name, len))
        return;
    shm_addr_region(&name, &len);
    size_t rl = strnlen((const char *)name, len);
    if (!rl || rl >= sizeof(region))
        return;
    memcpy(region, name, rl);
    region[rl] = 0;
    char *end;
    long pid = strtol(region, &end, 10);
    if (end == region || *end != ':' || pid <= 0 || strchr(region, '/'))
        return;
    if (c->av_entry && fi_version() == FI_VERSION(1, 17))
        c->av_entry->shm_pid = pid; /* its lock is looked at before posts (below) */
    int fd = nxl_pidfd_open((pid_t)pid);
    if (fd < 0)
        return;
    /* after the pidfd: the process it holds is the one that maps it */
    char maps[64];
    snprintf(maps, sizeof(maps), "/proc/%ld/maps", pid);
    if (!region_mapped(maps, (const unsigned char *)region, rl, 0, NULL) ||
        !(c->ev_pid = nxlt_io_new(u->ctx, fd, on_pid_exit, c)) ||
        nxlt_io_start(c->ev_pid, NXLT_IO_READ | NXLT_IO_ONCE)) {
        nxlt_io_free(c->ev_pid);
        c->ev_pid = NULL;
        close(fd);
        nxlt_log(u->ctx, NXL_LOG_DEBUG, "LIBFABRIC: the process of agent '%s' (shm address "
                 "%s) is not watched (another pid namespace, or /proc unreadable): its loss is "
                 "noticed by stall_timeout", c->name, region);
        return;
    }
    c->pidfd = fd;
}

void nxl_lf_shm_watch_end(lf_conn_t *c)
{
    nxlt_io_free(c->ev_pid);
    c->ev_pid = NULL;
    if (c->pidfd >= 0)
        close(c->pidfd);
    c->pidfd = -1;
}

/* ---- a peer's region lock, held by a dead peer
 *
 * The pidfd says a process exited only once its exit is through (its
 * memory unmapped, its files closed: a millisecond or more after SIGKILL),
 * and a post made meanwhile to a peer that died holding its region lock
 * spins for good. So before each post to an shm peer of another process
 * the transport reads that lock, and when it is held, waits for it up to
 * SHM_LOCK_WAIT_US: spinning a little as the provider would, then yielding
 * the CPU (the peer's critical sections last microseconds; a holder
 * preempted on a busy host gets its turn). A lock held longer is taken for
 * a dead holder's: the post is held back as a refused one (-FI_EAGAIN) and
 * retried from the loop, without waiting again until the lock was seen
 * free, while the pidfd or the stall timeout fails the connection. Left: a
 * peer killed holding the lock while a post of ours already spins on it in
 * the provider (the post came within the peer's critical section, a few
 * microseconds). The lock's place is
 * libfabric 1.17's layout of the region (struct smr_region: a version
 * byte, 4, a reserved byte, 16 bits of flags, the owner's pid at offset 4,
 * two bytes of cross-memory attach state, a pointer, then the lock at
 * offset 24): looked at only under libfabric 1.17, in our own mapping of
 * the region (/proc/self/maps), and only when its version byte and pid
 * are those expected. */
#define SMR17_VERSION 4
#define SMR17_PID_OFF 4
#define SMR17_LOCK_OFF 24
#define SHM_LOOK_EVERY_US 100000 /* the region not mapped yet: searched again after */

/* An unlocked pthread_spinlock_t's value here (glibc: 1 on x86, 0
 * elsewhere): the lock is read, never written, so that the peer's cache
 * line is not taken from it for nothing (an atomic add of 0 on it before
 * each post, tried, slowed a pipelined stream of 4 KiB WRITEs, 16 in
 * flight, by about a third) */
static pthread_once_t unlocked_once = PTHREAD_ONCE_INIT;
static int unlocked_value;

static void unlocked_learn(void)
{
    pthread_spinlock_t l;
    pthread_spin_init(&l, PTHREAD_PROCESS_SHARED);
    unlocked_value = (int)*(volatile int *)&l;
    pthread_spin_destroy(&l);
}

static bool lock_free(pthread_spinlock_t *l)
{
    return __atomic_load_n((int *)l, __ATOMIC_ACQUIRE) == unlocked_value;
}

/* our mapping of the peer's region, found and checked */
static bool lock_find(lf_t *u, lf_addr_t *e)
{
    uint64_t now = nxlt_now_us();
    if (e->shm_look_us && now - e->shm_look_us < SHM_LOOK_EVERY_US)
        return false;
    e->shm_look_us = now;
    const unsigned char *name = e->name;
    size_t len = e->len;
    shm_addr_region(&name, &len);
    /* the mapping of the region's start */
    unsigned long lo;
    if (!region_mapped("/proc/self/maps", name, len, SMR17_LOCK_OFF + 8, &lo))
        return false;
    const unsigned char *r = (const unsigned char *)lo;
    int pid;
    memcpy(&pid, r + SMR17_PID_OFF, sizeof(pid));
    if (r[0] != SMR17_VERSION || pid != e->shm_pid) {
        nxlt_log(u->ctx, NXL_LOG_DEBUG, "LIBFABRIC: shm region /dev/shm/%.*s is not laid out as "
                 "expected (version %u, pid %d): its lock is not looked at",
                 (int)strnlen((const char *)name, len), (const char *)name, r[0], pid);
        e->shm_pid = 0;
        return false;
    }
    pthread_once(&unlocked_once, unlocked_learn);
    e->shm_lock = (pthread_spinlock_t *)(uintptr_t)(lo + SMR17_LOCK_OFF);
    return true;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

#define SHM_LOCK_SPIN_US 20 /* held: spun on (as the provider would), then waited for yielding */

/* true: hold the post back (the peer's region lock is held by a dead peer,
 * as far as can be told) */
bool nxl_lf_shm_lock_stuck(lf_conn_t *c)
{
    lf_addr_t *e = c->av_entry;
    if (!e || !e->shm_pid || (!e->shm_lock && !lock_find(c->u, e)))
        return false;
    if (lock_free(e->shm_lock)) {
        e->shm_stuck = false;
        return false;
    }
    if (e->shm_stuck)
        return true;
    uint64_t t0 = nxlt_now_us(), t;
    for (unsigned i = 1;; i++) {
        cpu_relax();
        if (lock_free(e->shm_lock))
            return false;
        if (i % 64)
            continue;
        t = nxlt_now_us() - t0;
        if (t >= SHM_LOCK_WAIT_US)
            break;
        if (t >= SHM_LOCK_SPIN_US)
            sched_yield();
    }
    e->shm_stuck = true;
    nxlt_log(c->u->ctx, NXL_LOG_INFO, "LIBFABRIC: the shm region lock of agent '%s' (pid %ld) "
             "was held for %d ms: its process died holding it, or hangs; posts to it are "
             "held back", c->name, e->shm_pid, SHM_LOCK_WAIT_US / 1000);
    return true;
}
