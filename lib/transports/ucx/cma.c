/* SPDX-License-Identifier: BSD-3-Clause */
#include "config.h"
#include "ucx.h"
#include "../common/pidfd.h"

#define CMA_SLICE_US 200 /* cross-memory attach: longest run of copies before the loop's turn */
#define CMA_PID_CHECK_US 20 /* a peer's pidfd polled before a copy when older than this */
#define CMA_MAGIC 0x6e786c636d610001ull /* "nxlcma", 0, 1: before the cookie's random value */

/* ---- a peer on this host: its process, held by a pidfd
 *
 * Watched in the loop whenever the peer's identity is known (cross-memory
 * attach on or off), so that its death fails its connection at once,
 * whatever UCX's keepalive interval; cross-memory attach copies only while
 * cma is CMA_READY, and check the pidfd before every call. */

/* no more watching the peer's process (and so no cross-memory attach) */
void nxl_ucx_cma_close(ucx_conn_t *c)
{
    nxlt_io_free(c->ev_pid);
    c->ev_pid = NULL;
    if (c->pidfd >= 0)
        close(c->pidfd);
    c->pidfd = -1;
    if (c->cma == CMA_READY)
        c->cma = CMA_NONE;
}

/* ---- cross-memory attach: who we are, and may we reach a peer
 *
 * A peer advertises its boot id, pid namespace, pid and the address and
 * value of a cookie of its own. Same boot id and pid namespace: its pid
 * means the same process here. A pidfd on it, then a process_vm_readv of
 * the cookie, prove that the pid is that process (a recycled pid would
 * not hold the cookie there) and that the kernel lets us attach. */

/* has the process behind the pidfd exited? */
bool nxl_ucx_pidfd_exited(int fd)
{
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    return poll(&pf, 1, 0) > 0;
}

static bool cma_identity(ucx_ci_cma_t *me, char *why, size_t cap)
{
    char b[64] = "";
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, b, sizeof(b) - 1) : -1;
    if (fd >= 0)
        close(fd);
    size_t k = 0;
    for (ssize_t i = 0; i < n && k < 32; i++) {
        char ch = b[i];
        int v = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
        if (v < 0)
            continue;
        me->boot[k / 2] = (unsigned char)(k % 2 ? me->boot[k / 2] | v : v << 4);
        k++;
    }
    if (k != 32) {
        snprintf(why, cap, "/proc/sys/kernel/random/boot_id unreadable");
        return false;
    }
    struct stat st;
    if (stat("/proc/self/ns/pid", &st) != 0) {
        snprintf(why, cap, "/proc/self/ns/pid: %s", strerror(errno));
        return false;
    }
    me->ns_dev = (uint64_t)st.st_dev;
    me->ns_ino = (uint64_t)st.st_ino;
    me->pid = (uint32_t)getpid();
    int pf = nxl_pidfd_open(getpid());
    if (pf < 0) {
        snprintf(why, cap, "pidfd_open: %s", strerror(errno));
        return false;
    }
    close(pf);
    return true;
}

/* Our identity on this host (advertised in the connection info: peers
 * here watch our process by it, and copy into us unless cma=off) and the
 * cookie peers read to prove that they reach us; the copies' vectors
 * unless cma=off */
void nxl_ucx_cma_init(ucx_t *u)
{
    char why[160];
    uint64_t ck = 0;
    if (getrandom(&ck, sizeof(ck), GRND_NONBLOCK) != sizeof(ck))
        ck = nxlt_now_us() * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid() << 32 ^
             (uint64_t)(uintptr_t)u;
    u->cma_cookie[0] = CMA_MAGIC;
    u->cma_cookie[1] = ck | 1;
    if (!(u->cma_here = cma_identity(&u->cma_me, why, sizeof(why)))) {
        nxlt_log(u->ctx, NXL_LOG_INFO, "UCX: no identity on this host (%s): no cross-memory "
                 "attach to peers here, and they notice this process's exit by UCX's "
                 "keepalive only", why);
        return;
    }
    if (u->cma_mode == CMA_OFF)
        return;
    u->cma_liov = malloc(2 * IOV_MAX * sizeof(struct iovec));
    u->cma_riov = u->cma_liov ? u->cma_liov + IOV_MAX : NULL;
    if (!u->cma_liov)
        nxlt_log(u->ctx, NXL_LOG_WARN, "UCX: out of memory: no cross-memory attach");
}

/* Yama's ptrace_scope, in words, for the sentence of a refusal */
static const char *ptrace_scope_words(char *buf, size_t cap)
{
    int fd = open("/proc/sys/kernel/yama/ptrace_scope", O_RDONLY | O_CLOEXEC);
    char b[8] = "";
    ssize_t n = fd >= 0 ? read(fd, b, sizeof(b) - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return "Yama is not active here (no /proc/sys/kernel/yama/ptrace_scope)";
    switch (b[0]) {
    case '0':
        return "/proc/sys/kernel/yama/ptrace_scope is 0 (the classic rules)";
    case '1':
        return "/proc/sys/kernel/yama/ptrace_scope is 1: only a process's ancestors may attach, "
               "or a process it named with prctl(PR_SET_PTRACER, ...)";
    case '2':
        return "/proc/sys/kernel/yama/ptrace_scope is 2: only with CAP_SYS_PTRACE";
    default:
        snprintf(buf, cap, "/proc/sys/kernel/yama/ptrace_scope is %c: attaching is off", b[0]);
        return buf;
    }
}

/* The kernel refused to let us reach the peer: its transfers go through
 * UCX from now on. Said once as a warning, then as info. */
static void cma_refused(ucx_t *u, ucx_conn_t *c, int err, const char *when)
{
    char sb[96];
    nxlt_log(u->ctx, u->cma_refusal_said ? NXL_LOG_INFO : NXL_LOG_WARN,
             "UCX: cross-memory attach to agent '%s' (pid %d, this host) refused %s: "
             "process_vm_readv/writev: %s; its transfers go through UCX instead. The kernel "
             "allows it to a process of the same uid that stayed dumpable, or with "
             "CAP_SYS_PTRACE; %s. Parameter cma=off stops trying",
             c->name, (int)c->pid, when, strerror(err), ptrace_scope_words(sb, sizeof(sb)));
    u->cma_refusal_said = true;
    c->cma = CMA_REFUSED; /* its process stays watched */
}

static void on_pid_exit(nxlt_io_t *io, int fd, unsigned ready, void *arg)
{
    ucx_conn_t *c = arg;
    nxlt_log(c->u->ctx, NXL_LOG_INFO, "UCX: the process of agent '%s' (pid %d) exited",
             c->name, (int)c->pid);
    if (!c->failed)
        nxl_ucx_conn_fail(c, UCS_ERR_CONNECTION_RESET, false); /* says the process exited */
    nxl_ucx_cma_close(c);
}

/* A peer that advertised its identity: on this host and in this pid
 * namespace, its pid is held by a pidfd and watched, so that its exit
 * fails the connection at once; with @p copies (cma not off here, nor at
 * the peer) its transfers go by cross-memory attach.
 *
 * The cookie read proves that the pid is the agent's process. Where the
 * kernel refuses the read (ptrace rules: Yama's ptrace_scope, another
 * uid, a process not dumpable, seccomp) the pid is watched all the same:
 * on the same boot and in the same pid namespace, a live agent's pid is
 * its process, and another process can hold that pid only once the
 * agent's has exited. At worst (stale metadata: the agent is gone and its
 * pid reused) the watch waits for the wrong process, and UCX's keepalive
 * notices the dead peer as before; it never fails a live one. No copy
 * goes to an unproved pid. A pid that does not hold the cookie is not the
 * agent's process: not watched. */
void nxl_ucx_cma_connect(ucx_t *u, ucx_conn_t *c, const ucx_ci_cma_t *p, bool copies)
{
    if (memcmp(p->boot, u->cma_me.boot, 16) || p->ns_dev != u->cma_me.ns_dev ||
        p->ns_ino != u->cma_me.ns_ino) {
        nxlt_log(u->ctx, NXL_LOG_DEBUG, "UCX: agent '%s' is on another host or in another pid "
                 "namespace: no cross-memory attach; its death is noticed by UCX", c->name);
        return;
    }
    c->pid = (pid_t)p->pid;
    if (c->pid <= 0 || c->pid == (pid_t)u->cma_me.pid)
        return; /* this process's own agents are live ones (c->local): a stale info */
    int fd = nxl_pidfd_open(c->pid);
    if (fd < 0) {
        nxlt_log(u->ctx, NXL_LOG_INFO, "UCX: agent '%s': pidfd_open(%d): %s; its process is not "
                 "watched, no cross-memory attach (the process is gone?)", c->name, (int)c->pid,
                 strerror(errno));
        return;
    }
    /* the magic and the random value side by side: what only an nxl
     * agent's own memory holds, at an address only it announced */
    uint64_t v[2] = {0, 0};
    struct iovec l = {v, sizeof(v)}, r = {(void *)(uintptr_t)p->cookie_addr, sizeof(v)};
    ssize_t k = process_vm_readv(c->pid, &l, 1, &r, 1, 0);
    int err = errno;
    bool proved = k == (ssize_t)sizeof(v) && v[0] == CMA_MAGIC && v[1] == p->cookie;
    if (!proved && !(k < 0 && (err == EPERM || err == EACCES))) {
        close(fd);
        nxlt_log(u->ctx, NXL_LOG_WARN, "UCX: pid %d on this host is not agent '%s' any more "
                 "(%s): its process is not watched, no cross-memory attach; its metadata is "
                 "stale?", (int)c->pid, c->name,
                 k < 0 ? strerror(err) : "its cookie is not there");
        return;
    }
    c->pidfd = fd;
    c->ev_pid = nxlt_io_new(u->ctx, fd, on_pid_exit, c);
    if (!c->ev_pid || nxlt_io_start(c->ev_pid, NXLT_IO_READ | NXLT_IO_ONCE)) {
        nxl_ucx_cma_close(c); /* not watched: not used */
        return;
    }
    if (!proved) {
        if (copies)
            cma_refused(u, c, err, "at connection"); /* the pidfd stays watched */
        nxlt_log(u->ctx, NXL_LOG_DEBUG, "UCX: agent '%s' (pid %d, this host): its process is "
                 "watched, unproved (process_vm_readv: %s)", c->name, (int)c->pid,
                 strerror(err));
    } else {
        c->cma = copies ? CMA_READY : CMA_NONE;
        nxlt_log(u->ctx, NXL_LOG_DEBUG, "UCX: agent '%s' (pid %d): its process is watched%s",
                 c->name, (int)c->pid, copies ? ", reached by cross-memory attach" : "");
    }
}

/* ---- cross-memory attach: the copies
 *
 * A transfer to a peer reached by cross-memory attach is queued and copied
 * with process_vm_writev / process_vm_readv, up to IOV_MAX elements and
 * cma_chunk bytes a call. Transfers posted between turns of the loop wait
 * for the next turn (or for a call's worth of them), so that a window
 * posted in a row goes in one call; those posted from callbacks are
 * copied once this pass's callbacks have run. Copies then run from a
 * zero-delay timer, each run at most CMA_SLICE_US long, so that a 16 MiB
 * transfer does not hold the loop for its whole copy. When the last byte
 * has landed, the notification goes out as a UCX message, as after a
 * flush. */

static void cma_start(ucx_t *u)
{
    if (!u->cma_on) {
        u->cma_on = true;
        nxlt_timer_start(u->ev_cma, 0);
    }
}

static void cma_kick(ucx_t *u)
{
    u->cma_defer = true;
    cma_start(u);
}

/* Which transfers go this way: DRAM on both sides, to a peer reached by
 * cross-memory attach, into regions UCX does not map here itself (with
 * cma=auto: memory UCX allocated, on shared memory, it writes one-sided
 * and faster) */
bool nxl_ucx_cma_usable(ucx_t *u, ucx_conn_t *c, const nxlt_xfer_t *x)
{
    if (c->cma != CMA_READY || x->ltype != NXL_DRAM || x->rtype != NXL_DRAM || !x->n)
        return false;
    if (u->cma_max) {
        size_t total = 0;
        for (size_t i = 0; i < x->n && total <= u->cma_max; i++)
            total += x->iov[i].len;
        if (total > u->cma_max)
            return false;
    }
    if (u->cma_mode == CMA_AUTO)
        for (size_t i = 0; i < x->n; i++) {
            ucx_rkey_t *k = x->iov[i].rkey;
            if (k->mapped < 0 && k->rk) {
                void *ptr;
                k->mapped = ucp_rkey_ptr(k->rk, x->iov[i].raddr, &ptr) == UCS_OK;
            }
            if (k->mapped)
                return false;
        }
    return true;
}

static void cma_fail(ucx_op_t *o, ucs_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void cma_fail(ucx_op_t *o, ucs_status_t st, const char *fmt, ...)
{
    char b[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b, sizeof(b), fmt, ap);
    va_end(ap);
    free(o->why);
    o->why = strdup(b);
    nxl_ucx_op_finish(o, st);
}

/* The peer's process is gone: the transfer fails, and the connection
 * with it, from the loop */
static void cma_peer_gone(ucx_op_t *o)
{
    ucx_conn_t *c = o->conn;
    pid_t pid = c->pid;
    nxl_ucx_cma_close(c);
    c->cma = CMA_NONE;
    if (!c->fail_deferred && !c->failed) {
        c->fail_deferred = true;
        c->why = UCS_ERR_CONNECTION_RESET;
    }
    nxl_ucx_kick(o->u);
    cma_fail(o, UCS_ERR_CONNECTION_RESET, "UCX: transfer to agent '%s' failed: its process "
             "(pid %d) exited during the transfer; nothing more was written to that pid",
             c->name, (int)pid);
}

/* the rest of o through UCX (the peer refused cross-memory attach) */
static void cma_to_ucx(ucx_t *u, ucx_op_t *o)
{
    TAILQ_REMOVE(&u->cma_q, o, cq);
    o->queued = false;
    if (!o->conn->ep) {
        nxl_ucx_op_finish(o, UCS_ERR_CANCELED);
        return;
    }
    u->in_ucx++;
    ucs_status_t st = nxl_ucx_post_rma(u, o, !o->read, o->iov + o->at, o->n - o->at, o->off);
    u->in_ucx--;
    if (st != UCS_OK)
        nxl_ucx_op_finish(o, st);
    nxl_ucx_kick(u); /* its flush completes from progress */
}

/* every byte of o is there: the notification, or the op is done */
static void cma_complete(ucx_t *u, ucx_op_t *o)
{
    TAILQ_REMOVE(&u->cma_q, o, cq);
    o->queued = false;
    if (!o->op)
        nxl_ucx_op_free(o);
    else if (o->notif && !nxlt_op_canceled(o->op))
        nxl_ucx_send_notif(o);
    else
        nxl_ucx_op_finish(o, UCS_OK);
}

/* One system call: the head of the queue and the transfers behind it to
 * the same peer in the same direction (transfers posted in one turn go in
 * one call), up to IOV_MAX pieces and cma_chunk bytes. */
static void cma_step(ucx_t *u, uint64_t now)
{
    ucx_op_t *h = TAILQ_FIRST(&u->cma_q), *o;
    ucx_conn_t *c = h->conn;
    size_t cnt = 0, bytes = 0;
    for (o = h; o && cnt < IOV_MAX && bytes < u->cma_chunk; o = TAILQ_NEXT(o, cq)) {
        if (o->conn != c || o->read != h->read || !o->op)
            break;
        size_t i = o->at, off = o->off;
        while (i < o->n && cnt < IOV_MAX && bytes < u->cma_chunk) {
            const nxlt_iov_t *v = &o->iov[i];
            size_t take = v->len - off;
            if (take > u->cma_chunk - bytes)
                take = u->cma_chunk - bytes;
            char *la = (char *)v->laddr + off;
            char *ra = (char *)(uintptr_t)(v->raddr + off);
            if (take && cnt && (char *)u->cma_liov[cnt - 1].iov_base +
                                       u->cma_liov[cnt - 1].iov_len == la &&
                (char *)u->cma_riov[cnt - 1].iov_base + u->cma_riov[cnt - 1].iov_len == ra) {
                /* adjacent on both sides (blocks of one region in order):
                 * one piece, so the kernel pins the pages in batches, not
                 * one page a piece (16,384 x 4 KiB: 3.7 -> 4.6 GB/s) */
                u->cma_liov[cnt - 1].iov_len += take;
                u->cma_riov[cnt - 1].iov_len += take;
            } else if (take) {
                u->cma_liov[cnt] = (struct iovec){la, take};
                u->cma_riov[cnt] = (struct iovec){ra, take};
                cnt++;
            }
            bytes += take;
            off += take;
            if (off == v->len)
                i++, off = 0;
        }
        if (i < o->n)
            break; /* o is the last one in this call */
    }
    ssize_t k = 0;
    if (cnt) {
        /* never a pid whose process has exited: it may be another one now.
         * Its pidfd is polled when the last poll is CMA_PID_CHECK_US old
         * (a system call of its own: polled before every copy it took a
         * tenth of a 4 KiB transfer's time), and the reactor watches it */
        if (c->pidfd < 0 ||
            (now - c->pid_seen_us >= CMA_PID_CHECK_US && nxl_ucx_pidfd_exited(c->pidfd))) {
            cma_peer_gone(h);
            return;
        }
        if (now - c->pid_seen_us >= CMA_PID_CHECK_US)
            c->pid_seen_us = now;
        k = nxl_ucx_split_copy(u, c->pid, h->read, u->cma_liov, u->cma_riov, cnt, bytes);
        if (k <= 0) { /* the first piece, the head's, failed */
            int err = k < 0 ? errno : EFAULT;
            if (err == EPERM || err == EACCES) {
                cma_refused(u, c, err, "at a transfer"); /* the pump sends them to UCX */
            } else if (err == ESRCH) {
                cma_peer_gone(h);
            } else {
                cma_fail(h, err == EFAULT ? UCS_ERR_INVALID_ADDR : UCS_ERR_IO_ERROR,
                         "UCX: %s agent '%s' by cross-memory attach failed: %s: %s",
                         h->read ? "READ from" : "WRITE to", c->name,
                         h->read ? "process_vm_readv" : "process_vm_writev",
                         err == EFAULT ? "an address is not mapped (at the peer: a region freed "
                                         "without being deregistered?)"
                                       : strerror(err));
            }
            return;
        }
        u->cma_bytes += (uint64_t)k;
    }
    /* advance by what was copied (short: the next call names the fault) */
    size_t left = (size_t)k;
    for (o = h; o;) {
        ucx_op_t *next = TAILQ_NEXT(o, cq);
        while (o->at < o->n) {
            size_t rest = o->iov[o->at].len - o->off;
            if (left < rest) {
                o->off += left;
                left = 0;
                break;
            }
            left -= rest;
            o->at++;
            o->off = 0;
        }
        if (o->at < o->n)
            break;
        cma_complete(u, o);
        o = next;
        if (!left && o && o->iov[o->at].len)
            break; /* nothing of it was in this call */
    }
}

/* copies queued transfers until the queue is empty or the slice is used */
static void cma_pump(ucx_t *u, uint64_t now, uint64_t end)
{
    ucx_op_t *o;
    u->cma_wait_bytes = u->cma_wait_pieces = 0;
    while ((o = TAILQ_FIRST(&u->cma_q))) {
        if (!o->op) { /* reported already: its connection failed */
            nxl_ucx_op_free(o);
            continue;
        }
        if (nxlt_op_canceled(o->op)) {
            /* NXLT_CAP_CANCEL_WAITS: between two calls no copy of it is in
             * the kernel, so it ends here, its notification not sent */
            nxl_ucx_op_finish(o, UCS_OK);
            continue;
        }
        if (o->conn->unloaded) {
            cma_fail(o, UCS_ERR_CANCELED, "UCX: transfer to agent '%s' canceled: its metadata "
                     "was unloaded during the transfer", o->conn->name);
            continue;
        }
        if (o->conn->cma != CMA_READY) { /* refused, or the peer went, meanwhile */
            if (o->conn->cma == CMA_REFUSED)
                cma_to_ucx(u, o);
            else
                cma_peer_gone(o);
            continue;
        }
        cma_step(u, now);
        if (TAILQ_EMPTY(&u->cma_q) || (now = nxlt_now_us()) >= end)
            break;
    }
    if (!TAILQ_EMPTY(&u->cma_q))
        cma_kick(u);
}

/* one slice of copies from the loop */
static void cma_slice(ucx_t *u)
{
    /* the copies' completions are not the worker's: their deliveries are
     * activated on the loop already, and progress() that took them for
     * its own (net.hit) would put off arming the worker, turn after turn
     * while transfers keep coming, its fd left readable (each turn then
     * polls it and progresses the worker: ~0.2 us a transfer) */
    bool hit = u->net.hit;
    u->in_ucx++;
    uint64_t now = nxlt_now_us();
    cma_pump(u, now, now + CMA_SLICE_US);
    u->in_ucx--;
    u->net.hit = hit;
    nxl_ucx_deferred_failures(u);
}

void nxl_ucx_on_cma(nxlt_timer_t *t, void *arg)
{
    ucx_t *u = arg;
    u->cma_on = false;
    u->cma_defer = false;
    u->cma_now_used = false;
    cma_slice(u);
}

/* the copies posted by callbacks of this pass (ev_cma_now) */
void nxl_ucx_on_cma_now(nxlt_timer_t *t, void *arg)
{
    ucx_t *u = arg;
    u->cma_now_on = false;
    cma_slice(u);
}

nxl_status_t nxl_ucx_post_cma(ucx_t *u, nxlt_op_t *op, ucx_conn_t *c, const nxlt_xfer_t *x)
{
    ucx_op_t *o = nxl_ucx_op_new(u, op, c, nxl_agent_name(nxlt_agent(u->ctx)), x->notif,
                                 x->notif_len, x->notif != NULL);
    nxlt_iov_t *iov = NULL;
    if (o && o->iov_cap >= x->n) {
        iov = o->iov;
    } else if (o && (iov = malloc(x->n * sizeof(*iov)))) {
        free(o->iov);
        o->iov = iov;
        o->iov_cap = x->n;
    }
    if (!iov) {
        if (o)
            nxl_ucx_op_drop(o);
        return NXL_ERR_UNKNOWN;
    }
    memcpy(iov, x->iov, x->n * sizeof(*iov));
    o->n = x->n;
    o->read = x->op == NXL_READ;
    o->queued = true;
    TAILQ_INSERT_TAIL(&u->cma_q, o, cq);
    u->cma_xfers++;
    bool in_cb = nxlt_in_callback(u->ctx);
    if (!in_cb && !nxlt_threaded(u->ctx)) {
        /* posted by the application between turns of the loop (a NIXL
         * program posts a window of transfers, then polls their status,
         * each poll a turn): copied on the next turn, with the others
         * posted until then, in one call, as callbacks' posts are; at once
         * when a call's worth is waiting. A single post awaited with
         * nxl_future_wait() or run_once loses nothing: its completion
         * waited for that turn anyway. (Threaded agents' posts from other
         * threads copy at once: settled when the call returns.) */
        for (size_t i = 0; i < x->n; i++)
            u->cma_wait_bytes += x->iov[i].len;
        u->cma_wait_pieces += x->n;
        if (u->cma_wait_bytes < u->cma_chunk && u->cma_wait_pieces < IOV_MAX) {
            cma_start(u); /* started, not activated: progress() would take it
                             for work of this turn */
            return NXL_SUCCESS;
        }
    }
    /* start now, unless this turn's slice is spent, or this is posted from
     * a callback: then with the others posted in this turn, in one call */
    if (!u->cma_defer && !in_cb) {
        uint64_t now = nxlt_now_us();
        if (now >= u->cma_burst_end)
            u->cma_burst_end = now + CMA_SLICE_US;
        u->in_ucx++;
        cma_pump(u, now, u->cma_burst_end);
        u->in_ucx--;
    } else if (u->cma_now_on) {
        /* goes with the others posted by this pass's callbacks */
    } else if (!u->cma_defer && !u->cma_now_used) {
        /* posted from a callback: copied once the callbacks of this pass
         * have run (a window refilled goes in one call) in this same pass,
         * not a loop turn later. The completions that brings are delivered
         * in the pass too, and what their callbacks post waits for the
         * next turn (ev_cma): a chain of re-posts gets two steps a pass */
        u->cma_now_on = u->cma_now_used = true;
        nxlt_timer_activate(u->ev_cma_now);
    } else {
        cma_kick(u);
    }
    return NXL_SUCCESS;
}
