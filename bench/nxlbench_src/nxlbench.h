/* SPDX-License-Identifier: BSD-3-Clause */
/* nxlbench: what its files share.
 *
 *   main.c     roles: --spawn forks a target and an initiator; --listen,
 *              --connect; the one-process backends
 *   opts.c     the flags (one table line each), their defaults and checks
 *   util.c     clock, data patterns, agents, buffers, the iteration count
 *              of a row, the sweep of rows
 *   pipe.c     transfers kept in flight, each slot reposted as it completes
 *              (bandwidth rows of every backend)
 *   report.c   rows → statistics, the table, the JSON (cJSON), the plot
 *   target.c   the target of a two-process run
 *   net.c      the initiator of a two-process run (UCX, LIBFABRIC): the
 *              bandwidth, latency, desc_rate and idle modes
 *   posix.c    --backend POSIX and GDS (the same walk over files, the ring in
 *              DRAM or VRAM), cuda.c --backend CUDA, obj.c --backend OBJ
 *   loop.c     --loop: what turns the agents (libevent, a bare epoll loop on
 *              the agent's backend fd, libuv) */
#ifndef NXLBENCH_H
#define NXLBENCH_H

#define _GNU_SOURCE
#include <nxl.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#define T_NAME "nxlb-target"
#define I_NAME "nxlb-init"
/* --xfer_notif: what each bandwidth transfer carries (nixlbench's text) */
#define XFER_NOTIF "0xBEEF"
#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

enum { M_BW, M_LAT, M_DESC, M_IDLE };
extern const char *const mode_names[];
enum { LOOP_LIBEVENT, LOOP_FD, LOOP_UV };
extern const char *const loop_names[];

/* ------------------------------------------------------------------ options
 * A new flag: a field here, a line in opts.c's table (and its help line in
 * usage()); to record it in the JSON, a line in report.c's json_flags(). */

typedef struct nb_opts {
    const char *backend;
    nxl_param_t bparams[8];  /* --backend_params */
    size_t nbparams;
    const char *bparams_text;
    int op;
    const char *iseg, *tseg;
    bool set_iseg, set_tseg;
    size_t start_bs, max_bs, start_batch, max_batch;
    long num_iter, warmup_iter;
    size_t total_buf, row_bytes;
    bool check, recreate, spawn, pin, quiet;
    bool xfer_notif;        /* --xfer_notif: bandwidth transfers carry XFER_NOTIF */
    bool strided;           /* --strided: desc_rate lists as one strided list a side */
    long depth;
    long busy_poll_us;
    long threads;           /* --threads: a threaded initiator, posting from N threads */
    int loop;               /* --loop: LOOP_LIBEVENT, LOOP_FD, LOOP_UV */
    bool mem_nxl;
    int cuda_dev;
    bool cuda_peer;         /* --cuda_peer: the target VRAM in another process */
    const char *listen, *connect;
    const char *etcd;       /* --etcd_endpoints: discovery through etcd */
    const char *json, *plot;
    /* POSIX storage runs */
    const char *filepath;
    long num_files;
    bool direct;
    size_t footprint;
    const char *posix_engine;
    bool no_prefill;
    bool plain_pages;
    /* OBJ runs (nixlbench's --obj_* names) */
    const char *obj_endpoint, *obj_bucket, *obj_region, *obj_access, *obj_secret, *obj_token;
    const char *obj_scheme, *obj_ca, *obj_part;
    bool obj_virtual;
    long obj_conns;
    int mode;
    double duration;
    bool reply_notif;
    size_t sizes[64];
    size_t nsizes;
    /* which were given */
    bool set_start_bs, set_max_bs, set_start_batch, set_max_batch, set_num_iter, set_warmup;
} nb_opts_t;

extern nb_opts_t O;
extern char **plot_inputs; /* JSON files after --plot OUT.png */
extern int nplot_inputs;

void parse_args(int argc, char **argv);

/* ------------------------------------------------------------------ a run */

typedef struct row {
    size_t bs, batch;
    long iters;
    double bw_gbps, avg_lat_us;
    double avg_prep_us, p99_prep_us, avg_post_us, p99_post_us, avg_tx_us, p99_tx_us;
    double p50_us, p99_us; /* latency */
    double prep_us, post_us, complete_us, prep_local_us, prep_remote_us, make_us; /* desc_rate */
    double mdesc_per_s, wall_s; /* desc_rate: descriptors per second over the wall clock */
    long threads;               /* desc_rate: posting threads */
    bool phases;                /* desc_rate: the phase columns were measured (one thread) */
    double held_bytes;          /* desc_rate: heap bytes the first cycle's prepared lists and
                                   transfer held (mallinfo2), -1: not measured */
    const char *role; /* idle */
    double duration_s, wakeups_per_s, cpu_s, nvcsw, nivcsw;
} row_t;

/* The state every mode shares: the agent that runs the transfers, the first
 * failure seen in a callback, the rows measured. */
typedef struct run {
    nxl_agent_t *a;
    bool failed;
    char err[512];
    row_t rows[256];
    int nrows;
    char notes[8192];       /* lines printed after the table (report_note) */
    uint64_t t_start;
} run_t;

extern run_t RUN;

/* what the agent said it runs on ("transport X is up: ..."), for the JSON */
extern char transports_desc[512];
/* what a POSIX or GDS run used, for the JSON */
extern size_t posix_footprint;
extern long posix_nfiles;
extern const char *posix_where;
extern long long posix_thp;          /* bytes of the DRAM ring on huge pages */

/* ------------------------------------------------------------------ util.c */

void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* records the first failure of a callback in RUN (the row then stops) */
void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
uint64_t now_ns(void);

static inline uint64_t mix64(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* byte at absolute offset o of pattern seed */
static inline unsigned char pat_byte(uint64_t seed, size_t o)
{
    return (unsigned char)(mix64(seed * 0x100000001B3ull + (o >> 3)) >> (8 * (o & 7)));
}

void pat_fill(unsigned char *base, size_t off, size_t len, uint64_t seed);
/* @return the first wrong offset, or -1 */
long long pat_check(const unsigned char *base, size_t off, size_t len, uint64_t seed);
/* a fresh seed for a row's data */
uint64_t next_seed(void);

void pin_cpu(int which);
void split_hostport(const char *hp, char *host, size_t cap, uint16_t *port);
void log_cb(nxl_log_level_t lvl, const char *msg, void *arg);
nxl_agent_t *make_agent(const char *name, const char *host, uint16_t port, const char *role);
/* an agent of its own, for the one-process backends (no listener) */
nxl_agent_t *make_local_agent(const char *name, nxl_log_cb log, const char *role);

typedef struct buf {
    unsigned char *p;
    size_t len;
    bool nxl;
} buf_t;

/* malloc'd buffers on 2 MiB boundaries with MADV_HUGEPAGE (POSIX runs) */
extern bool buf_huge;
bool buf_alloc(nxl_agent_t *a, buf_t *b, size_t len, bool use_nxl);
void buf_free(nxl_agent_t *a, buf_t *b);
/* bytes of [p, p + len) on transparent huge pages (-1: unknown) */
long long thp_bytes(const void *p, size_t len);
void usage_now(double *cpu_s, long *nvcsw, long *nivcsw);

/* runs RUN.a until *counter reaches target, failing after stall_s without progress */
void run_until(long *counter, long target, int stall_s);
void agent_turn(int timeout_ms);
/* timed iterations of a row moving bytes_per_iter each; *warm: its warm-up */
long row_iters(size_t bytes_per_iter, long *warm);
/* the block sizes of the sweep */
void size_list(size_t *v, size_t *nv);
/* size_list's sizes into v[*nv]; returns the rows of the sweep (sizes x
 * batches from --start_batch to --max_batch, doubling) */
int sweep_rows(size_t *v, size_t *nv);
/* pipe(p) and fork(), dying when either fails; the child (0 returned)
 * keeps only p[1], the parent only p[0] */
pid_t fork_piped(int p[2]);
/* bytes each side needs for the largest row */
size_t need_bytes(void);
/* need_bytes(), or dies when --total_buffer_size is smaller: "<head> N
 * bytes<tail> but --total_buffer_size is M<note>" */
size_t need_fits(const char *head, const char *tail, const char *note);
/* calls row(block size, batch) for every row of the sweep, with progress */
void run_rows(void (*row)(size_t bs, size_t n));
void progress(int i, int n, const char *what);

/* ------------------------------------------------------------------ loop.c
 * Every turn of an agent goes through loop_turn(). An agent is made with
 * loop_config() on its configuration, loop_attach() after nxl_agent_create()
 * and loop_detach() before nxl_agent_destroy(). */

/* sets c->loop from --loop */
void loop_config(nxl_agent_config_t *c);
void loop_attach(nxl_agent_t *a);
void loop_detach(nxl_agent_t *a);
/* one turn: runs what is ready, waiting at most ms for something (0: no
 * wait; -1: until something happens) */
void loop_turn(nxl_agent_t *a, int ms);
/* a line saying which loop runs, for the report */
const char *loop_desc(void);
/* --loop uv is available (configure found libuv) */
bool loop_uv_built(void);

/* ------------------------------------------------------------------ pipe.c
 * Transfers in flight: nslots slots, each posted again as it completes,
 * until `total` are posted. Times (us) of the iterations from `warm` on
 * go to prep[], post[] and tx[] (post to completion). */

typedef struct pipe_slot pipe_slot_t;
typedef struct pipe {
    long total, posted, completed, warm;
    double *prep, *post, *tx;
    long nprep;
    bool record;                      /* false: an untimed pass (verification) */
    int stall_s;                      /* fail after this long without a completion */
    /* untimed, before each make (may be NULL) */
    void (*before)(pipe_slot_t *s);
    /* makes s->x before each post, timed as prep (NULL: the slots' transfers
     * are made once, before the row: pipe_made) */
    bool (*make)(pipe_slot_t *s);
    /* after each completion (NULL: nothing) */
    bool (*done)(pipe_slot_t *s);
    pipe_slot_t *slots;
    long nslots;
    void *user;
} pipe_t;

struct pipe_slot {
    nxl_xfer_t *x;
    uint64_t t_post;
    pipe_t *p;
    size_t i;       /* which slot */
    size_t g;       /* the mode's own (POSIX: first footprint block in flight) */
};

/* slots and timing arrays for `timed` iterations */
void pipe_init(pipe_t *p, long nslots, long timed, long warm);
void pipe_free(pipe_t *p);
/* times making a slot's transfer once, before the row (prep[]) */
void pipe_made(pipe_t *p, uint64_t t0, uint64_t t1);
/* posts `count` more transfers, at most nslots in flight, and waits for them */
void pipe_pass(pipe_t *p, long count);
/* warm passes, then timed ones: the seconds those took; dies ("<who>block B batch N: why")
 * when a transfer failed */
double pipe_timed(pipe_t *p, long warm, long timed, const char *who, size_t bs, size_t n);

/* ------------------------------------------------------------------ report.c */

/* a bandwidth row: `timed` iterations of n blocks of bs bytes in sec seconds;
 * the statistics of the arrays given (any count may be 0) */
row_t *report_bw_row(size_t bs, size_t n, long timed, double sec, double *prep, long nprep,
                     double *post, long npost, double *tx, long ntx);
row_t *report_row(void);
void stats(double *v, long n, double *avg, double *p50, double *p99);
/* prints the header line given, the table, the notes, and writes --json;
 * once, at the end of a run */
void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* a line printed after the table */
void report_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* after a run: --plot from --json */
int report_plot_after_run(void);
int plot(const char *png, char **files, int nfiles);

/* ------------------------------------------------------------------ modes */

int target_main(const char *host, uint16_t port, int port_fd);
int initiator_main(const char *host, uint16_t port);
int posix_main(void);
int gds_main(void);
int cuda_main(void);
int obj_main(void);

#endif
