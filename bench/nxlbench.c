/* nxlbench — nxl's benchmark, shaped like NIXL's nixlbench.
 *
 * Two processes: a target that serves (registers a buffer, answers control
 * notifications) and an initiator that drives the sweep. `--spawn` forks
 * both on this host; otherwise run `--listen HOST:PORT` on one side and
 * `--connect HOST:PORT` on the other.
 *
 * Control protocol (initiator → target, as nxl notifications; the target
 * answers each with a notification of its own):
 *   "setup LEN SRC"        allocate and register LEN bytes (SRC malloc|nxl);
 *                          answer "ready ADDR"; the initiator then fetches
 *                          the target's metadata again to learn the region
 *   "fill SEED OFF LEN"    fill [OFF, OFF+LEN) with pattern SEED → "ok"
 *   "chk SEED OFF LEN"     check that range holds pattern SEED → "ok"/"bad ..."
 *   "lat B MODE"           prepare the pong: a WRITE of bytes [B, 2B) back to
 *                          the initiator's buffer with notification "q" (MODE
 *                          write), or a bare notification "q" (MODE notif)
 *   "p"                    ping: answer with the pong (no "ok")
 *   "idle0" / "idle1"      start / stop counting wake-ups and CPU time
 *   "quit"                 leave
 *
 * Modes: bandwidth (default), latency, desc_rate, idle. See --help. */
#define _GNU_SOURCE
#include <nxl.h>
#include <pthread.h>

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define T_NAME "nxlb-target"
#define I_NAME "nxlb-init"
#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

enum { M_BW, M_LAT, M_DESC, M_IDLE };
static const char *const mode_names[] = {"bandwidth", "latency", "desc_rate", "idle"};

/* ------------------------------------------------------------------ options */

static struct {
    const char *backend;
    nxl_param_t bparams[8];  /* --backend_params */
    size_t nbparams;
    const char *bparams_text;
    int op;
    const char *iseg, *tseg;
    size_t start_bs, max_bs, start_batch, max_batch;
    long num_iter, warmup_iter;
    size_t total_buf, row_bytes;
    bool check, recreate, spawn, pin, quiet;
    long depth;
    long busy_poll_us;
    long threads;           /* --threads: a threaded initiator, posting from N threads */
    bool mem_nxl;
    int cuda_dev;
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
} O = {
    .backend = "UCX",
    .op = NXL_WRITE,
    .iseg = "DRAM",
    .tseg = "DRAM",
    .start_bs = 4 * KiB,
    .max_bs = 64 * MiB,
    .start_batch = 1,
    .max_batch = 1,
    .num_iter = 1000,
    .warmup_iter = 100,
    .total_buf = 8 * GiB,
    .row_bytes = 1 * GiB,
    .depth = 1,
    .duration = 5,
    .num_files = 1,
    .footprint = 1 * GiB,
    .posix_engine = "auto",
};

static char **plot_inputs;
static int nplot_inputs;

static void usage(FILE *f)
{
    fprintf(f,
"Usage: nxlbench [options]                 (one side: --listen or --connect; both: --spawn)\n"
"       nxlbench --plot OUT.png A.json [B.json ...]\n"
"\n"
"Roles\n"
"  --spawn                   fork a target and an initiator on this host\n"
"  --listen HOST:PORT        be the target: serve until the initiator says quit\n"
"  --etcd_endpoints URL      find each other through etcd instead of TCP metadata\n"
"                            exchange (with --spawn; or run --listen etcd on one\n"
"                            side and --connect etcd on the other)\n"
"  --connect HOST:PORT       be the initiator and drive the sweep\n"
"  --pin                     pin the initiator to CPU 0 and the target to CPU 1\n"
"\n"
"What to measure (flags named as nixlbench's)\n"
"  --mode MODE               bandwidth (default) | latency | desc_rate | idle\n"
"  --backend NAME            transport: UCX, LIBFABRIC, POSIX (files, block devices),\n"
"                            CUDA (GPU), OBJ (S3)\n"
"  --backend_params K=V,...  parameters of the transport, e.g. provider=shm for LIBFABRIC,\n"
"                            tls=tcp for UCX (both sides: give them to --listen too)\n"
"  --op_type READ|WRITE      direction seen from the initiator (default WRITE)\n"
"  --initiator_seg_type T    DRAM; VRAM with --backend CUDA\n"
"  --target_seg_type T       DRAM; FILE or BLK with --backend POSIX; VRAM (or DRAM with\n"
"                            a VRAM initiator) with --backend CUDA; OBJ with --backend OBJ\n"
"  --start_block_size N      first block size (default 4K; latency: 8)\n"
"  --max_block_size N        last block size, doubling (default 64M; latency: 64K)\n"
"  --block_sizes A,B,...     an explicit list instead of the doubling sweep\n"
"  --start_batch_size N      descriptors per transfer, first (default 1)\n"
"  --max_batch_size N        descriptors per transfer, last, doubling (default 1)\n"
"                            (desc_rate: descriptors in its one transfer, default 16384)\n"
"  --num_iter N              timed iterations per row (default 1000)\n"
"  --warmup_iter N           untimed iterations first (default 100)\n"
"  --max_row_bytes N         fewer iterations for large blocks: each row moves at most\n"
"                            this much (default 1G; at least 8 iterations)\n"
"  --total_buffer_size N     buffer bound per process (default 8G, capped so both fit\n"
"                            in a quarter of MemTotal)\n"
"  --pipeline_depth N        transfers in flight (default 1)\n"
"  --recreate_xfer           make a new transfer each iteration (default: prepared once)\n"
"  --check_consistency       verify every byte after the timed part\n"
"  --busy_poll_us N          agent busy polling after activity (default 0: sleep at once)\n"
"  --threads N               the initiator's agent in threaded mode; desc_rate posts from\n"
"                            N threads at once (default 0: the default mode, one thread)\n"
"  --mem_source malloc|nxl   malloc'd memory registered (default), or nxl_mem_alloc\n"
"  --latency_reply write|notif  latency pong: WRITE+notification (default) or a notification\n"
"  --duration S              idle mode: seconds to stay idle (default 5)\n"
"\n"
"Storage (--backend POSIX --target_seg_type FILE|BLK: one process, no --spawn)\n"
"  --filepath PATH           FILE: directory for the files (default a temporary one\n"
"                            under /tmp, removed after); BLK: the device (or a file)\n"
"  --num_files N             spread the footprint over N files (default 1)\n"
"  --storage_footprint N     bytes the walk covers, sequentially, wrapping (default 1G);\n"
"                            files are created and sized first, untimed\n"
"  --storage_enable_direct   O_DIRECT (blocks must be multiples of 4096)\n"
"  --posix_api_type E        I/O engine: auto (default), uring, threads\n"
"  --storage_huge_pages 0    the DRAM ring on plain 4 KiB pages (default: 2 MiB aligned,\n"
"                            madvise(MADV_HUGEPAGE): O_DIRECT requests then carry a few\n"
"                            physically contiguous segments instead of one per page)\n"
"  --storage_prefill 0       BLK: use the data already there instead of writing the\n"
"                            footprint whole first (no --check_consistency)\n"
"  Each row walks the footprint once by default (--num_iter overrides); the DRAM side\n"
"  is a ring of pipeline_depth x batch blocks. The files are written whole with a\n"
"  known pattern first (untimed), then synced and dropped from the page cache\n"
"  before each row.\n"
"\n"
"GPU (--backend CUDA: one process, the agent is its own peer, no --spawn)\n"
"  Initiator and target memory on this host: DRAM (pinned by the transport) or VRAM of\n"
"  --cuda_device N (default 0). HtoD: --initiator_seg_type DRAM --target_seg_type VRAM\n"
"  --op_type WRITE; DtoH: the same with READ; DtoD: VRAM and VRAM. bench/compare-cuda\n"
"  puts these rows next to plain cudaMemcpyAsync (bench/cuda_memcpy_ref).\n"
"Object store (--backend OBJ --target_seg_type OBJ: one process; unset flags fall back\n"
"to AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, ... as the OBJ transport reads them)\n"
"  --obj_endpoint_override URL  the S3 server (e.g. http://127.0.0.1:9000)\n"
"  --obj_scheme http|https   when the endpoint has no scheme (default https)\n"
"  --obj_bucket_name B       the bucket (it must exist)\n"
"  --obj_region R            SigV4 region (default us-east-1)\n"
"  --obj_access_key K, --obj_secret_key S, --obj_session_token T\n"
"  --obj_use_virtual_addressing   bucket.host/key instead of host/bucket/key\n"
"  --obj_ca_bundle FILE      CA certificates for https\n"
"  --obj_max_connections N   requests in flight (default 16)\n"
"  --obj_part_size N         multipart part and ranged-GET size (default 8M)\n"
"  Each transfer moves --start_batch_size whole objects of one block size (keys\n"
"  nxlbench/<size>/<i>), one transfer at a time; READ rows write their objects first,\n"
"  untimed. Default 5 timed iterations and 1 warm-up per row.\n"
"\n"
"Output\n"
"  --json FILE               results and environment as JSON\n"
"  --plot FILE.png           bandwidth vs block size (gnuplot) of this run or of JSON files\n"
"  --quiet                   no progress line\n"
"  --help\n"
"Sizes take K, M, G suffixes (powers of 1024). Flags take `--flag value` or `--flag=value`.\n");
}

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "nxlbench: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(2);
}

static size_t parse_size(const char *flag, const char *s)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || errno || *s == '-')
        die("%s: '%s' is not a size", flag, s);
    unsigned long long m = 1;
    switch (toupper((unsigned char)*end)) {
    case 0: break;
    case 'K': m = KiB; end++; break;
    case 'M': m = MiB; end++; break;
    case 'G': m = GiB; end++; break;
    case 'B': break;
    default: die("%s: '%s' is not a size (suffixes: K, M, G)", flag, s);
    }
    if (*end == 'i' || *end == 'I')
        end++;
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end)
        die("%s: '%s' is not a size (suffixes: K, M, G)", flag, s);
    if (v > SIZE_MAX / m)
        die("%s: '%s' is too large", flag, s);
    return (size_t)(v * m);
}

static long parse_long(const char *flag, const char *s, long min)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < min)
        die("%s: '%s' is not a number >= %ld", flag, s, min);
    return v;
}

static const char *seg_check(const char *flag, const char *v)
{
    static const char *const known[] = {"DRAM", "VRAM", "FILE", "BLK", "OBJ"};
    for (size_t i = 0; i < 5; i++)
        if (!strcasecmp(v, known[i])) {
            /* FILE and BLK as the target with --backend POSIX, OBJ with --backend
             * OBJ, VRAM with --backend CUDA: checked after parsing */
            return known[i];
        }
    die("%s: unknown segment type '%s' (DRAM, VRAM, FILE, BLK, OBJ)", flag, v);
    return NULL;
}

static void parse_args(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        char *arg = argv[i];
        if (strncmp(arg, "--", 2)) {
            if (!O.plot)
                die("unexpected argument '%s' (see --help)", arg);
            plot_inputs = realloc(plot_inputs, sizeof(char *) * (nplot_inputs + 1));
            plot_inputs[nplot_inputs++] = arg;
            continue;
        }
        char name[64];
        const char *val = NULL;
        const char *eq = strchr(arg, '=');
        size_t nl = eq ? (size_t)(eq - arg) : strlen(arg);
        if (nl >= sizeof(name))
            die("unknown flag '%s'", arg);
        memcpy(name, arg, nl);
        name[nl] = 0;
        if (eq)
            val = eq + 1;
        /* boolean flags */
        static const struct {
            const char *n;
            bool *p;
        } bools[] = {{"--check_consistency", &O.check}, {"--recreate_xfer", &O.recreate},
                     {"--spawn", &O.spawn},             {"--pin", &O.pin},
                     {"--quiet", &O.quiet},             {"--storage_enable_direct", &O.direct}};
        bool done = false;
        for (size_t k = 0; k < sizeof(bools) / sizeof(*bools); k++)
            if (!strcmp(name, bools[k].n)) {
                *bools[k].p = !val || !strcmp(val, "1") || !strcasecmp(val, "true") ||
                              !strcasecmp(val, "yes");
                done = true;
            }
        if (done)
            continue;
        if (!strcmp(name, "--help") || !strcmp(name, "-h")) {
            usage(stdout);
            exit(0);
        }
        if (!val) {
            if (i + 1 >= argc)
                die("%s needs a value (see --help)", name);
            val = argv[++i];
        }
        if (!strcmp(name, "--backend")) {
            if (!strcasecmp(val, "UCX"))
                O.backend = "UCX";
            else if (!strcasecmp(val, "LIBFABRIC"))
                O.backend = "LIBFABRIC";
            else if (!strcasecmp(val, "POSIX"))
                O.backend = "POSIX";
            else if (!strcasecmp(val, "CUDA"))
                O.backend = "CUDA";
            else if (!strcasecmp(val, "OBJ"))
                O.backend = "OBJ";
            else
                die("--backend %s: not supported yet (UCX, LIBFABRIC, POSIX for files and block "
                    "devices, CUDA for GPU memory, OBJ for S3)", val);
        } else if (!strcmp(name, "--cuda_device")) {
            O.cuda_dev = (int)parse_long(name, val, 0);
        } else if (!strcmp(name, "--obj_endpoint_override")) {
            O.obj_endpoint = val;
        } else if (!strcmp(name, "--obj_bucket_name")) {
            O.obj_bucket = val;
        } else if (!strcmp(name, "--obj_region")) {
            O.obj_region = val;
        } else if (!strcmp(name, "--obj_access_key")) {
            O.obj_access = val;
        } else if (!strcmp(name, "--obj_secret_key")) {
            O.obj_secret = val;
        } else if (!strcmp(name, "--obj_session_token")) {
            O.obj_token = val;
        } else if (!strcmp(name, "--obj_scheme")) {
            O.obj_scheme = val;
        } else if (!strcmp(name, "--obj_ca_bundle")) {
            O.obj_ca = val;
        } else if (!strcmp(name, "--obj_use_virtual_addressing")) {
            O.obj_virtual = !strcmp(val, "1") || !strcasecmp(val, "true") || !strcasecmp(val, "yes");
        } else if (!strcmp(name, "--obj_max_connections")) {
            O.obj_conns = parse_long(name, val, 1);
        } else if (!strcmp(name, "--obj_part_size")) {
            O.obj_part = val;
        } else if (!strcmp(name, "--backend_params")) {
            /* key=value,key=value: kept as given, split into the table */
            O.bparams_text = val;
            char *copy = strdup(val), *save = NULL;
            for (char *kv = strtok_r(copy, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
                char *eqs = strchr(kv, '=');
                if (!eqs || eqs == kv)
                    die("--backend_params: '%s' is not key=value", kv);
                if (O.nbparams == sizeof(O.bparams) / sizeof(O.bparams[0]))
                    die("--backend_params: at most 8 parameters");
                *eqs = 0;
                O.bparams[O.nbparams].key = kv;
                O.bparams[O.nbparams++].value = eqs + 1;
            }
        } else if (!strcmp(name, "--filepath")) {
            O.filepath = val;
        } else if (!strcmp(name, "--storage_huge_pages")) {
            O.plain_pages = !parse_long(name, val, 0);
        } else if (!strcmp(name, "--storage_prefill")) {
            O.no_prefill = !parse_long(name, val, 0);
        } else if (!strcmp(name, "--num_files")) {
            O.num_files = parse_long(name, val, 1);
        } else if (!strcmp(name, "--storage_footprint")) {
            O.footprint = parse_size(name, val);
        } else if (!strcmp(name, "--posix_api_type") || !strcmp(name, "--posix_engine")) {
            if (!strcasecmp(val, "auto"))
                O.posix_engine = "auto";
            else if (!strcasecmp(val, "uring") || !strcasecmp(val, "io_uring"))
                O.posix_engine = "uring";
            else if (!strcasecmp(val, "threads"))
                O.posix_engine = "threads";
            else
                die("%s: auto, uring or threads, not '%s'", name, val);
        } else if (!strcmp(name, "--op_type")) {
            if (!strcasecmp(val, "READ"))
                O.op = NXL_READ;
            else if (!strcasecmp(val, "WRITE"))
                O.op = NXL_WRITE;
            else
                die("--op_type: READ or WRITE, not '%s'", val);
        } else if (!strcmp(name, "--initiator_seg_type")) {
            O.iseg = seg_check(name, val);
        } else if (!strcmp(name, "--target_seg_type")) {
            O.tseg = seg_check(name, val);
        } else if (!strcmp(name, "--start_block_size")) {
            O.start_bs = parse_size(name, val);
            O.set_start_bs = true;
        } else if (!strcmp(name, "--max_block_size")) {
            O.max_bs = parse_size(name, val);
            O.set_max_bs = true;
        } else if (!strcmp(name, "--block_sizes")) {
            char *s = strdup(val), *save, *t;
            O.nsizes = 0;
            for (t = strtok_r(s, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                if (O.nsizes == sizeof(O.sizes) / sizeof(*O.sizes))
                    die("--block_sizes: at most 64 sizes");
                O.sizes[O.nsizes++] = parse_size(name, t);
            }
            free(s);
        } else if (!strcmp(name, "--start_batch_size")) {
            O.start_batch = (size_t)parse_long(name, val, 1);
            O.set_start_batch = true;
        } else if (!strcmp(name, "--max_batch_size")) {
            O.max_batch = (size_t)parse_long(name, val, 1);
            O.set_max_batch = true;
        } else if (!strcmp(name, "--num_iter")) {
            O.num_iter = parse_long(name, val, 1);
            O.set_num_iter = true;
        } else if (!strcmp(name, "--warmup_iter")) {
            O.warmup_iter = parse_long(name, val, 0);
            O.set_warmup = true;
        } else if (!strcmp(name, "--max_row_bytes")) {
            O.row_bytes = parse_size(name, val);
        } else if (!strcmp(name, "--total_buffer_size")) {
            O.total_buf = parse_size(name, val);
        } else if (!strcmp(name, "--pipeline_depth")) {
            O.depth = parse_long(name, val, 1);
        } else if (!strcmp(name, "--busy_poll_us")) {
            O.busy_poll_us = parse_long(name, val, 0);
        } else if (!strcmp(name, "--threads")) {
            O.threads = parse_long(name, val, 0);
        } else if (!strcmp(name, "--mem_source")) {
            if (!strcmp(val, "malloc"))
                O.mem_nxl = false;
            else if (!strcmp(val, "nxl"))
                O.mem_nxl = true;
            else
                die("--mem_source: malloc or nxl, not '%s'", val);
        } else if (!strcmp(name, "--latency_reply")) {
            if (!strcmp(val, "write"))
                O.reply_notif = false;
            else if (!strcmp(val, "notif"))
                O.reply_notif = true;
            else
                die("--latency_reply: write or notif, not '%s'", val);
        } else if (!strcmp(name, "--etcd_endpoints")) {
            O.etcd = val;
        } else if (!strcmp(name, "--listen")) {
            O.listen = val;
        } else if (!strcmp(name, "--connect")) {
            O.connect = val;
        } else if (!strcmp(name, "--json")) {
            O.json = val;
        } else if (!strcmp(name, "--plot")) {
            O.plot = val;
        } else if (!strcmp(name, "--mode")) {
            int m = -1;
            for (int k = 0; k < 4; k++)
                if (!strcmp(val, mode_names[k]))
                    m = k;
            if (!strcmp(val, "bw"))
                m = M_BW;
            if (!strcmp(val, "lat"))
                m = M_LAT;
            if (m < 0)
                die("--mode: bandwidth, latency, desc_rate or idle, not '%s'", val);
            O.mode = m;
        } else if (!strcmp(name, "--duration")) {
            char *end;
            O.duration = strtod(val, &end);
            if (*end || !(O.duration > 0))
                die("--duration: seconds > 0, not '%s'", val);
        } else {
            die("unknown flag '%s' (see --help)", name);
        }
    }
    /* mode defaults */
    if (O.mode == M_LAT) {
        if (!O.set_start_bs)
            O.start_bs = 8;
        if (!O.set_max_bs)
            O.max_bs = 64 * KiB;
    }
    if (O.mode == M_DESC) {
        if (!O.set_start_bs)
            O.start_bs = 4 * KiB;
        if (!O.set_max_bs)
            O.max_bs = O.start_bs;
        if (!O.set_start_batch)
            O.start_batch = 16384;
        if (!O.set_max_batch)
            O.max_batch = O.start_batch;
        if (!O.set_num_iter)
            O.num_iter = 20;
        if (!O.set_warmup)
            O.warmup_iter = 3;
    }
    bool posix = !strcmp(O.backend, "POSIX");
    bool cuda = !strcmp(O.backend, "CUDA");
    bool storage = !strcmp(O.tseg, "FILE") || !strcmp(O.tseg, "BLK");
    bool obj = !strcmp(O.backend, "OBJ");
    if (obj != !strcmp(O.tseg, "OBJ"))
        die("--backend OBJ goes with --target_seg_type OBJ (and OBJ with --backend OBJ)");
    if (obj && (O.spawn || O.listen || O.connect || O.etcd || O.mode != M_BW || O.depth != 1 ||
                O.recreate))
        die("--backend OBJ: one process, bandwidth mode, --pipeline_depth 1 (the objects of a "
            "transfer are its parallelism: --start_batch_size, bounded by "
            "--obj_max_connections)");
    bool vram = !strcmp(O.iseg, "VRAM") || !strcmp(O.tseg, "VRAM");
    if (vram && !cuda)
        die("VRAM is not supported by --backend %s (the UCX transport here has no CUDA "
            "support): use --backend CUDA", O.backend);
    if (cuda && (storage || !vram))
        die("--backend CUDA moves to and from VRAM: --initiator_seg_type and "
            "--target_seg_type DRAM or VRAM, at least one of them VRAM");
    if (cuda && (O.spawn || O.listen || O.connect || O.etcd))
        die("--backend CUDA runs as one process (the agent is its own peer): drop --spawn, "
            "--listen, --connect and --etcd_endpoints");
    if (cuda && O.mode != M_BW)
        die("--backend CUDA: bandwidth mode only (a row of --pipeline_depth 1 gives the "
            "post-to-callback latency as Avg Tx), not %s", mode_names[O.mode]);
    if (strcmp(O.iseg, "DRAM") && !cuda)
        die("--initiator_seg_type %s: the initiator's side is DRAM", O.iseg);
    if (storage && !posix)
        die("--target_seg_type %s needs --backend POSIX", O.tseg);
    if (posix && !storage)
        die("--backend POSIX moves DRAM to and from --target_seg_type FILE or BLK, not %s",
            O.tseg);
    if (posix && (O.spawn || O.listen || O.connect || O.etcd))
        die("--backend POSIX runs as one process (the agent is its own peer): drop --spawn, "
            "--listen, --connect and --etcd_endpoints");
    if (posix && O.mode != M_BW)
        die("--backend POSIX: bandwidth mode only, not %s", mode_names[O.mode]);
    if (posix && O.recreate)
        die("--backend POSIX: every transfer is made anew from prepared lists already "
            "(the file offsets advance); --recreate_xfer does not apply");
    if (posix && !strcmp(O.tseg, "BLK") && !O.filepath)
        die("--target_seg_type BLK needs --filepath /dev/DEVICE (or a file used as one)");
    if (posix && O.no_prefill && (strcmp(O.tseg, "BLK") || O.check))
        die("--storage_prefill 0: with BLK only (new files would read as holes), and without "
            "--check_consistency (which needs the known pattern)");
    if (posix && !strcmp(O.tseg, "BLK") && O.num_files != 1)
        die("--target_seg_type BLK: one device, --num_files 1");
    if (!O.start_bs || O.max_bs < O.start_bs)
        die("block sizes: need 0 < --start_block_size <= --max_block_size");
    if (O.max_batch < O.start_batch)
        die("batch sizes: need --start_batch_size <= --max_batch_size");
    for (size_t i = 0; i < O.nsizes; i++)
        if (!O.sizes[i])
            die("--block_sizes: a block size of 0");
    /* total_buffer_size: both processes in a quarter of this machine's memory */
    FILE *f = fopen("/proc/meminfo", "r");
    unsigned long long kb = 0;
    if (f) {
        char line[256];
        while (fgets(line, sizeof(line), f))
            if (sscanf(line, "MemTotal: %llu kB", &kb) == 1)
                break;
        fclose(f);
    }
    if (kb) {
        size_t cap = (size_t)(kb * 1024ull / 8);
        if (O.total_buf > cap)
            O.total_buf = cap;
    }
}

/* -------------------------------------------------------------- utilities */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

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

static void pat_fill(unsigned char *base, size_t off, size_t len, uint64_t seed)
{
    size_t o = off, end = off + len;
    while (o < end && (o & 7))
        base[o] = pat_byte(seed, o), o++;
    for (; o + 8 <= end; o += 8) {
        uint64_t w = mix64(seed * 0x100000001B3ull + (o >> 3));
        memcpy(base + o, &w, 8);
    }
    for (; o < end; o++)
        base[o] = pat_byte(seed, o);
}

/* @return the first wrong offset, or -1 */
static long long pat_check(const unsigned char *base, size_t off, size_t len, uint64_t seed)
{
    size_t o = off, end = off + len;
    for (; o < end && (o & 7); o++)
        if (base[o] != pat_byte(seed, o))
            return (long long)o;
    for (; o + 8 <= end; o += 8) {
        uint64_t w = mix64(seed * 0x100000001B3ull + (o >> 3)), v;
        memcpy(&v, base + o, 8);
        if (v != w)
            for (size_t k = 0; k < 8; k++)
                if (base[o + k] != pat_byte(seed, o + k))
                    return (long long)(o + k);
    }
    for (; o < end; o++)
        if (base[o] != pat_byte(seed, o))
            return (long long)o;
    return -1;
}

static void pin_cpu(int which)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(which % n, &s);
    if (sched_setaffinity(0, sizeof(s), &s))
        fprintf(stderr, "nxlbench: sched_setaffinity(CPU %ld): %s\n", which % n, strerror(errno));
}

static void split_hostport(const char *hp, char *host, size_t cap, uint16_t *port)
{
    const char *c = strrchr(hp, ':');
    if (!c || c == hp || (size_t)(c - hp) >= cap)
        die("'%s': expected HOST:PORT", hp);
    memcpy(host, hp, (size_t)(c - hp));
    host[c - hp] = 0;
    long p = strtol(c + 1, NULL, 10);
    if (p < 0 || p > 65535)
        die("'%s': bad port", hp);
    *port = (uint16_t)p;
}

static char transports_desc[256];
/* what a POSIX run used, for the JSON */
static size_t posix_footprint;
static long posix_nfiles;
static const char *posix_where;
static long long posix_thp;          /* bytes of the DRAM ring on huge pages */

static void log_cb(nxl_log_level_t lvl, const char *msg, void *arg)
{
    const char *role = arg;
    const char *p = strstr(msg, " is up: ");
    if (!strncmp(msg, "transport ", 10) && p) {
        snprintf(transports_desc, sizeof(transports_desc), "%s", p + 8);
        return;
    }
    if (lvl <= NXL_LOG_WARN || getenv("NXLBENCH_VERBOSE"))
        fprintf(stderr, "nxlbench %s: [nxl] %s\n", role, msg);
}

static nxl_agent_t *make_agent(const char *name, const char *host, uint16_t port, const char *role)
{
    nxl_agent_config_t c;
    nxl_agent_config_init(&c);
    c.name = name;
    c.listen_addr = O.etcd ? NULL : host;
    c.listen_port = port;
    c.etcd_endpoints = O.etcd;
    c.busy_poll_us = (unsigned)O.busy_poll_us;
    c.threaded = O.threads > 0 && !strcmp(role, "initiator");
    c.log_level = NXL_LOG_INFO;
    c.log_cb = log_cb;
    c.log_arg = (void *)role;
    nxl_agent_t *a;
    if (nxl_agent_create(&c, &a) != NXL_SUCCESS)
        die("%s: nxl_agent_create: %s", role, nxl_agent_last_error(NULL));
    if (nxl_backend_create(a, O.backend, O.bparams, O.nbparams, NULL) != NXL_SUCCESS)
        die("%s: nxl_backend_create(%s): %s", role, O.backend, nxl_agent_last_error(a));
    return a;
}

typedef struct buf {
    unsigned char *p;
    size_t len;
    bool nxl;
} buf_t;

/* malloc'd buffers on 2 MiB boundaries with MADV_HUGEPAGE (POSIX runs) */
static bool buf_huge;

static bool buf_alloc(nxl_agent_t *a, buf_t *b, size_t len, bool use_nxl)
{
    b->len = len;
    b->nxl = use_nxl;
    if (use_nxl) {
        void *p;
        if (nxl_mem_alloc(a, NXL_DRAM, len, 0, &p) != NXL_SUCCESS)
            return false;
        b->p = p;
        memset(b->p, 0, len); /* touch it, as malloc'd memory is */
        return true;
    }
    void *p;
    /* a huge page backs only a whole, aligned 2 MiB: round up, or a ring
     * smaller than 2 MiB (16 x 64 KiB) stays on plain pages */
    size_t alen = buf_huge ? (len + 2 * MiB - 1) / (2 * MiB) * (2 * MiB) : len;
    if (posix_memalign(&p, buf_huge ? 2 * MiB : 4096, alen))
        return false;
    b->p = p;
    if (buf_huge)
        madvise(p, alen, MADV_HUGEPAGE); /* a hint: where THP is off, plain pages */
    memset(b->p, 0, alen);
    nxl_desc_t d = {.addr = (uintptr_t)b->p, .len = len};
    if (nxl_mem_register(a, NXL_DRAM, &d, 1, NULL) != NXL_SUCCESS) {
        free(b->p);
        b->p = NULL;
        return false;
    }
    return true;
}

/* bytes of [p, p + len) that sit on transparent huge pages, from
 * /proc/self/smaps (the mappings that overlap it; -1 where unreadable) */
static long long thp_bytes(const void *p, size_t len)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    char line[512];
    bool in = false;
    long long sum = 0;
    uintptr_t lo = (uintptr_t)p, hi = lo + len;
    while (fgets(line, sizeof(line), f)) {
        unsigned long a, b;
        long long kb;
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2)
            in = a < hi && b > lo;
        else if (in && sscanf(line, "AnonHugePages: %lld kB", &kb) == 1)
            sum += kb * 1024;
    }
    fclose(f);
    return sum > (long long)len ? (long long)len : sum;
}

static void buf_free(nxl_agent_t *a, buf_t *b)
{
    if (!b->p)
        return;
    if (b->nxl) {
        nxl_mem_free(a, b->p);
    } else {
        nxl_desc_t d = {.addr = (uintptr_t)b->p, .len = b->len};
        nxl_mem_deregister(a, NXL_DRAM, &d, 1);
        free(b->p);
    }
    b->p = NULL;
}

static void usage_now(double *cpu_s, long *nvcsw, long *nivcsw)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    *cpu_s = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
             ru.ru_stime.tv_usec / 1e6;
    *nvcsw = ru.ru_nvcsw;
    *nivcsw = ru.ru_nivcsw;
}

/* ------------------------------------------------------------------ target */

static struct {
    nxl_agent_t *a;
    buf_t buf;
    nxl_xfer_t *pong;       /* latency: WRITE back with "q" */
    bool pong_notif;        /* answer with a bare notification */
    bool pong_pending;      /* a ping came while the pong was in flight */
    uintptr_t iaddr;
    size_t ilen;
    double cpu0;
    long nv0, niv0;
    uint64_t t0;
    bool quit;
} T;

static void t_reply(const char *msg)
{
    if (nxl_notif_send(T.a, I_NAME, msg, strlen(msg), NULL, NULL, NULL) != NXL_SUCCESS)
        fprintf(stderr, "nxlbench target: reply failed: %s\n", nxl_agent_last_error(T.a));
}

static void t_pong(void);

static void t_pong_done(nxl_future_t *f, nxl_status_t st, void *arg)
{
    if (st != NXL_SUCCESS)
        fprintf(stderr, "nxlbench target: pong failed: %s\n", nxl_future_error(f));
    if (T.pong_pending) {
        T.pong_pending = false;
        t_pong();
    }
}

static void t_pong(void)
{
    nxl_status_t st;
    if (T.pong_notif)
        st = nxl_notif_send(T.a, I_NAME, "q", 1, NULL, NULL, NULL);
    else if (!T.pong)
        st = NXL_ERR_NOT_POSTED;
    else if ((st = nxl_xfer_post(T.pong, t_pong_done, NULL, NULL)) == NXL_ERR_REPOST_ACTIVE) {
        T.pong_pending = true;
        return;
    }
    if (st != NXL_SUCCESS)
        fprintf(stderr, "nxlbench target: pong: %s\n", nxl_agent_last_error(T.a));
}

static void t_published(nxl_future_t *f, nxl_status_t st, void *arg)
{
    char out[600];
    if (st == NXL_SUCCESS)
        snprintf(out, sizeof(out), "%s", (const char *)arg);
    else
        snprintf(out, sizeof(out), "bad: %s", nxl_future_error(f));
    t_reply(out);
}

static void t_notif(nxl_agent_t *a, const char *from, const void *msg, size_t len, void *arg)
{
    if (len == 1 && *(const char *)msg == 'p') {
        t_pong();
        return;
    }
    char m[256], out[256];
    snprintf(m, sizeof(m), "%.*s", (int)(len < 255 ? len : 255), (const char *)msg);
    unsigned long long seed, off, n, addr;
    char src[16];
    if (sscanf(m, "setup %llu %15s %llu %llu", &n, src, &addr, &off) == 4) {
        if (T.pong) {
            nxl_xfer_release(T.pong);
            T.pong = NULL;
        }
        buf_free(T.a, &T.buf);
        T.iaddr = (uintptr_t)addr;
        T.ilen = (size_t)off;
        if (!buf_alloc(T.a, &T.buf, (size_t)n, !strcmp(src, "nxl"))) {
            snprintf(out, sizeof(out), "bad: %s", nxl_agent_last_error(T.a));
            t_reply(out);
            return;
        }
        snprintf(out, sizeof(out), "ready %llu", (unsigned long long)(uintptr_t)T.buf.p);
        if (O.etcd) {
            /* the initiator fetches the new buffer from etcd: answer once it is there */
            static char pending[256];
            snprintf(pending, sizeof(pending), "%s", out);
            if (nxl_md_publish(T.a, t_published, pending, NULL) != NXL_SUCCESS) {
                snprintf(out, sizeof(out), "bad: %s", nxl_agent_last_error(T.a));
                t_reply(out);
            }
            return;
        }
        t_reply(out);
    } else if (sscanf(m, "fill %llu %llu %llu", &seed, &off, &n) == 3) {
        if (!T.buf.p || off + n > T.buf.len) {
            t_reply("bad: range outside the buffer");
            return;
        }
        pat_fill(T.buf.p, (size_t)off, (size_t)n, seed);
        t_reply("ok");
    } else if (sscanf(m, "chk %llu %llu %llu", &seed, &off, &n) == 3) {
        if (!T.buf.p || off + n > T.buf.len) {
            t_reply("bad: range outside the buffer");
            return;
        }
        long long bad = pat_check(T.buf.p, (size_t)off, (size_t)n, seed);
        if (bad < 0)
            snprintf(out, sizeof(out), "ok");
        else
            snprintf(out, sizeof(out), "bad: target byte %lld of [%llu, %llu) differs", bad, off,
                     off + n);
        t_reply(out);
    } else if (sscanf(m, "lat %llu %15s", &n, src) == 2) {
        if (T.pong) {
            nxl_xfer_release(T.pong);
            T.pong = NULL;
        }
        T.pong_notif = !strcmp(src, "notif");
        if (!T.pong_notif) {
            /* the pong moves [n, 2n) back, so that its data differs from the ping's */
            nxl_desc_t ld = {.addr = (uintptr_t)T.buf.p + n, .len = (size_t)n};
            nxl_desc_t rd = {.addr = T.iaddr + n, .len = (size_t)n};
            nxl_dlist_t l = {NXL_DRAM, &ld, 1}, r = {NXL_DRAM, &rd, 1};
            nxl_xfer_opts_t o;
            nxl_xfer_opts_init(&o);
            o.notif = "q";
            o.notif_len = 1;
            if (!T.buf.p || 2 * n > T.buf.len || 2 * n > T.ilen ||
                nxl_xfer_create(T.a, NXL_WRITE, &l, &r, I_NAME, &o, &T.pong) != NXL_SUCCESS) {
                snprintf(out, sizeof(out), "bad: pong: %s", nxl_agent_last_error(T.a));
                t_reply(out);
                return;
            }
        }
        t_reply("ok");
    } else if (!strcmp(m, "idle0")) {
        usage_now(&T.cpu0, &T.nv0, &T.niv0);
        T.t0 = now_ns();
        t_reply("ok");
    } else if (!strcmp(m, "idle1")) {
        double cpu;
        long nv, niv;
        usage_now(&cpu, &nv, &niv);
        snprintf(out, sizeof(out), "idle %.9f %ld %ld %.6f", (now_ns() - T.t0) / 1e9, nv - T.nv0,
                 niv - T.niv0, cpu - T.cpu0);
        t_reply(out);
    } else if (!strcmp(m, "quit")) {
        T.quit = true;
        nxl_agent_stop(T.a);
    } else {
        snprintf(out, sizeof(out), "bad: unknown request '%.100s'", m);
        t_reply(out);
    }
}

static int target_main(const char *host, uint16_t port, int port_fd)
{
    T.a = make_agent(T_NAME, host, port, "target");
    nxl_agent_on_notif(T.a, t_notif, NULL);
    if (O.etcd) {
        /* discovery through etcd: publish ours, load the initiator's */
        nxl_future_t *f;
        nxl_status_t st = nxl_md_publish(T.a, NULL, NULL, &f);
        if (st == NXL_SUCCESS)
            st = nxl_future_wait(f, 10000);
        if (st != NXL_SUCCESS)
            die("target: publishing to etcd at %s: %s", O.etcd,
                st == NXL_IN_PROG ? "no answer" : nxl_future_error(f));
        nxl_future_release(f);
    }
    uint16_t p = nxl_agent_listen_port(T.a);
    if (port_fd >= 0) {
        if (write(port_fd, &p, sizeof(p)) != sizeof(p))
            return 3;
        close(port_fd);
    } else if (!O.etcd) {
        fprintf(stderr, "nxlbench target: listening on %s:%u\n", host, p);
    }
    if (O.etcd) {
        nxl_future_t *f;
        nxl_status_t st = nxl_md_fetch_etcd(T.a, I_NAME, NULL, 120000, NULL, NULL, &f);
        if (st == NXL_SUCCESS)
            st = nxl_future_wait(f, 125000);
        if (st != NXL_SUCCESS)
            die("target: no initiator '%s' appeared in etcd at %s: %s", I_NAME, O.etcd,
                st == NXL_IN_PROG ? "timeout" : nxl_future_error(f));
        nxl_future_release(f);
        fprintf(stderr, "nxlbench target: found the initiator through etcd at %s\n", O.etcd);
    }
    while (!T.quit)
        if (nxl_agent_run(T.a) != NXL_SUCCESS)
            break;
    /* let the last replies go out */
    if (T.pong)
        nxl_xfer_release(T.pong);
    for (int i = 0; i < 5; i++)
        nxl_agent_run_once(T.a, 0);
    buf_free(T.a, &T.buf);
    nxl_agent_destroy(T.a);
    return T.quit ? 0 : 1;
}

/* --------------------------------------------------------------- initiator */

typedef struct row {
    size_t bs, batch;
    long iters;
    double bw_gbps, avg_lat_us;
    double avg_prep_us, p99_prep_us, avg_post_us, p99_post_us, avg_tx_us, p99_tx_us;
    double p50_us, p99_us; /* latency */
    double prep_us, post_us, complete_us, prep_local_us, prep_remote_us, make_us; /* desc_rate */
    const char *role; /* idle */
    double duration_s, wakeups_per_s, cpu_s, nvcsw, nivcsw;
} row_t;

static struct {
    nxl_agent_t *a;
    char host[256];
    uint16_t port;
    buf_t buf;
    uintptr_t raddr;
    size_t rlen;
    /* control replies */
    char reply[256];
    int nreply;
    /* running a row */
    bool failed;
    char err[512];
    row_t rows[256];
    int nrows;
    uint64_t t_start;
} I;

static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(I.err, sizeof(I.err), fmt, ap);
    va_end(ap);
    I.failed = true;
}

static void wait_future(nxl_future_t *f, const char *what)
{
    nxl_status_t st = nxl_future_wait(f, 30000);
    if (st != NXL_SUCCESS)
        die("initiator: %s: %s (%s)", what, st == NXL_IN_PROG ? "timed out" : nxl_future_error(f),
            nxl_strerror(st));
    nxl_future_release(f);
}

/* One reactor turn of the initiator; a threaded one runs on its own
 * thread: sleep a millisecond (its callbacks update what the caller polls,
 * and take their own timings: a 1 ms poll here only ends a row later, and
 * leaves the 2 cores to the reactor threads). */
static void i_turn(int timeout_ms)
{
    if (!O.threads) {
        nxl_agent_run_once(I.a, timeout_ms);
        return;
    }
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
}

/* Sends a control request and waits for the target's answer. */
static const char *ask(const char *fmt, ...)
{
    char m[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof(m), fmt, ap);
    va_end(ap);
    int before = I.nreply;
    nxl_future_t *f;
    if (nxl_notif_send(I.a, T_NAME, m, strlen(m), NULL, NULL, &f) != NXL_SUCCESS)
        die("initiator: sending '%s': %s", m, nxl_agent_last_error(I.a));
    wait_future(f, "control notification");
    uint64_t end = now_ns() + 60ull * 1000000000u;
    while (I.nreply == before && now_ns() < end)
        i_turn(1000);
    if (I.nreply == before)
        die("initiator: no answer from the target to '%s' in 60 s", m);
    if (!strncmp(I.reply, "bad", 3))
        die("initiator: the target answered '%s' to '%s'", I.reply, m);
    return I.reply;
}

/* latency state */
static struct {
    nxl_xfer_t *x;
    long n, total, warm;
    uint64_t t_sent;
    double *rtt;
    double *post;
    bool got_pong, xfer_done;
} L;

static void l_ping(void);

static void i_notif(nxl_agent_t *a, const char *from, const void *msg, size_t len, void *arg)
{
    if (len == 1 && *(const char *)msg == 'q') {
        uint64_t t = now_ns();
        if (L.n >= L.warm)
            L.rtt[L.n - L.warm] = (t - L.t_sent) / 1e3;
        L.n++;
        L.got_pong = true;
        if (L.n < L.total && L.xfer_done)
            l_ping();
        return;
    }
    snprintf(I.reply, sizeof(I.reply), "%.*s", (int)(len < 255 ? len : 255), (const char *)msg);
    I.nreply++;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void stats(double *v, long n, double *avg, double *p50, double *p99)
{
    if (n <= 0) {
        *avg = *p50 = *p99 = 0;
        return;
    }
    double s = 0;
    for (long i = 0; i < n; i++)
        s += v[i];
    *avg = s / n;
    qsort(v, (size_t)n, sizeof(*v), cmp_d);
    if (p50)
        *p50 = v[(n - 1) / 2];
    long k = (long)ceil(0.99 * n) - 1;
    *p99 = v[k < 0 ? 0 : k];
}

static void progress(int i, int n, const char *what)
{
    if (O.quiet)
        return;
    double el = (now_ns() - I.t_start) / 1e9;
    if (isatty(2))
        fprintf(stderr, "\r\033[Knxlbench: %d/%d %s (%.0f s)%s", i, n, what, el,
                i == n ? "\n" : "");
    else if (el > 2 && i < n)
        fprintf(stderr, "nxlbench: %d/%d %s (%.0f s)\n", i, n, what, el);
}

/* ---- bandwidth */

typedef struct slot {
    nxl_xfer_t *x;
    nxl_desc_t *ld, *rd;
    uint64_t t_post;
    struct bwrow *r;
} slot_t;

typedef struct bwrow {
    size_t bs, n;
    long total, posted, completed, warm;
    double *prep, *post, *tx;
    long nprep;
    slot_t *slots;
} bwrow_t;

static void bw_post(slot_t *s);

static void bw_done(nxl_future_t *f, nxl_status_t st, void *arg)
{
    slot_t *s = arg;
    bwrow_t *r = s->r;
    uint64_t t = now_ns();
    if (st != NXL_SUCCESS) {
        fail("transfer failed: %s", nxl_future_error(f));
        return;
    }
    long k = r->completed++ - r->warm;
    if (k >= 0)
        r->tx[k] = (t - s->t_post) / 1e3;
    if (O.recreate) {
        nxl_xfer_release(s->x);
        s->x = NULL;
    }
    if (r->posted < r->total && !I.failed)
        bw_post(s);
}

static void bw_make(slot_t *s)
{
    bwrow_t *r = s->r;
    uint64_t t0 = now_ns();
    nxl_status_t st;
    if (O.recreate) {
        nxl_dlist_t l = {NXL_DRAM, s->ld, r->n}, rm = {NXL_DRAM, s->rd, r->n};
        st = nxl_xfer_create(I.a, O.op, &l, &rm, T_NAME, NULL, &s->x);
    } else {
        nxl_prepped_t *lp = NULL, *rp = NULL;
        st = nxl_prep(I.a, NULL, NXL_DRAM, s->ld, r->n, &lp);
        if (st == NXL_SUCCESS)
            st = nxl_prep(I.a, T_NAME, NXL_DRAM, s->rd, r->n, &rp);
        if (st == NXL_SUCCESS)
            st = nxl_xfer_make(I.a, O.op, lp, NULL, rp, NULL, r->n, NULL, &s->x);
        nxl_prepped_release(lp);
        nxl_prepped_release(rp);
    }
    uint64_t t1 = now_ns();
    if (st != NXL_SUCCESS) {
        fail("making the transfer: %s", nxl_agent_last_error(I.a));
        return;
    }
    long k = r->posted - r->warm;
    if (!O.recreate || k >= 0)
        r->prep[r->nprep++] = (t1 - t0) / 1e3;
}

static void bw_post(slot_t *s)
{
    bwrow_t *r = s->r;
    if (O.recreate)
        bw_make(s);
    if (I.failed)
        return;
    long k = r->posted - r->warm;
    uint64_t t0 = now_ns();
    s->t_post = t0;
    nxl_status_t st = nxl_xfer_post(s->x, bw_done, s, NULL);
    uint64_t t1 = now_ns();
    if (st != NXL_SUCCESS) {
        fail("nxl_xfer_post: %s", nxl_agent_last_error(I.a));
        return;
    }
    r->posted++;
    if (k >= 0)
        r->post[k] = (t1 - t0) / 1e3;
}

static void run_until(long *counter, long target)
{
    uint64_t last = now_ns();
    long seen = *counter;
    while (*counter < target && !I.failed) {
        i_turn(1000);
        if (*counter != seen) {
            seen = *counter;
            last = now_ns();
        } else if (now_ns() - last > 30ull * 1000000000u) {
            fail("no transfer completed in 30 s (%ld of %ld done)", *counter, target);
        }
    }
}

static long row_iters(size_t bytes_per_iter, long *warm)
{
    long it = O.num_iter;
    if (bytes_per_iter && (double)it * bytes_per_iter > (double)O.row_bytes) {
        it = (long)(O.row_bytes / bytes_per_iter);
        if (it < 8)
            it = 8;
        if (it > O.num_iter)
            it = O.num_iter;
    }
    long w = O.warmup_iter;
    if (w > it / 4 + 1 && it < O.num_iter)
        w = it / 4 + 1;
    *warm = w;
    return it;
}

static uint64_t seed_counter = 1;

/* Fills the source of a row with one pattern and the destination with another. */
static uint64_t consistency_prepare(size_t len)
{
    uint64_t seed = (uint64_t)getpid() * 1000 + seed_counter++;
    if (O.op == NXL_WRITE) {
        pat_fill(I.buf.p, 0, len, seed);
        ask("fill %llu 0 %zu", (unsigned long long)(seed ^ 0x5a5a5a5a), len);
    } else {
        ask("fill %llu 0 %zu", (unsigned long long)seed, len);
        pat_fill(I.buf.p, 0, len, seed ^ 0x5a5a5a5a);
    }
    return seed;
}

static void consistency_verify(uint64_t seed, size_t len)
{
    if (O.op == NXL_WRITE) {
        ask("chk %llu 0 %zu", (unsigned long long)seed, len); /* dies on "bad" */
    } else {
        long long bad = pat_check(I.buf.p, 0, len, seed);
        if (bad >= 0)
            die("consistency: READ: initiator byte %lld of [0, %zu) differs from the target's",
                bad, len);
    }
}

static void run_bw_row(size_t bs, size_t n)
{
    bwrow_t r = {.bs = bs, .n = n};
    long P = O.depth;
    size_t span = (size_t)P * n * bs;
    r.total = row_iters(n * bs, &r.warm);
    long timed = r.total;
    r.total += r.warm;
    r.prep = calloc((size_t)(O.recreate ? timed : P) + 1, sizeof(double));
    r.post = calloc((size_t)timed, sizeof(double));
    r.tx = calloc((size_t)timed, sizeof(double));
    r.slots = calloc((size_t)P, sizeof(slot_t));
    for (long s = 0; s < P; s++) {
        slot_t *sl = &r.slots[s];
        sl->r = &r;
        sl->ld = calloc(n, sizeof(nxl_desc_t));
        sl->rd = calloc(n, sizeof(nxl_desc_t));
        for (size_t i = 0; i < n; i++) {
            size_t off = ((size_t)s * n + i) * bs;
            sl->ld[i] = (nxl_desc_t){.addr = (uintptr_t)I.buf.p + off, .len = bs};
            sl->rd[i] = (nxl_desc_t){.addr = I.raddr + off, .len = bs};
        }
    }
    uint64_t seed = O.check ? consistency_prepare(span) : 0;
    if (!O.recreate)
        for (long s = 0; s < P && !I.failed; s++)
            bw_make(&r.slots[s]);
    /* warm-up, then the timed part */
    long first = r.warm < P ? r.warm : P;
    for (long s = 0; s < first && !I.failed; s++)
        bw_post(&r.slots[s]);
    /* the warm-up completions repost up to r.total; stop them at r.warm */
    long saved_total = r.total;
    r.total = r.warm;
    run_until(&r.completed, r.warm);
    r.total = saved_total;
    uint64_t t0 = now_ns();
    for (long s = 0; s < P && r.posted < r.total && !I.failed; s++)
        bw_post(&r.slots[s]);
    run_until(&r.completed, r.total);
    uint64_t t1 = now_ns();
    if (I.failed)
        die("initiator: block %zu batch %zu: %s", bs, n, I.err);
    if (O.check)
        consistency_verify(seed, span);
    row_t *o = &I.rows[I.nrows++];
    double sec = (t1 - t0) / 1e9;
    o->bs = bs;
    o->batch = n;
    o->iters = timed;
    o->bw_gbps = (double)timed * n * bs / sec / 1e9;
    o->avg_lat_us = sec * 1e6 / timed;
    stats(r.prep, r.nprep, &o->avg_prep_us, NULL, &o->p99_prep_us);
    stats(r.post, timed, &o->avg_post_us, NULL, &o->p99_post_us);
    stats(r.tx, timed, &o->avg_tx_us, NULL, &o->p99_tx_us);
    for (long s = 0; s < P; s++) {
        nxl_xfer_release(r.slots[s].x);
        free(r.slots[s].ld);
        free(r.slots[s].rd);
    }
    free(r.slots);
    free(r.prep);
    free(r.post);
    free(r.tx);
}

static void size_list(size_t *v, size_t *nv)
{
    *nv = 0;
    if (O.nsizes) {
        memcpy(v, O.sizes, O.nsizes * sizeof(*v));
        *nv = O.nsizes;
        return;
    }
    for (size_t b = O.start_bs; b <= O.max_bs && *nv < 64; b *= 2)
        v[(*nv)++] = b;
}

static size_t need_bytes(void)
{
    size_t v[64], nv, need = 4096;
    size_list(v, &nv);
    for (size_t i = 0; i < nv; i++) {
        size_t b = v[i];
        size_t m = O.mode == M_BW ? b * O.max_batch * (size_t)O.depth
                   : O.mode == M_DESC ? b * O.max_batch * (size_t)(O.threads > 1 ? O.threads : 1)
                   : O.mode == M_LAT  ? 2 * b
                                      : 4096;
        if (m > need)
            need = m;
    }
    return need;
}

static void run_bw_rows(void (*row)(size_t bs, size_t n))
{
    size_t v[64], nv;
    size_list(v, &nv);
    int nrows = 0, k = 0;
    for (size_t n = O.start_batch; n <= O.max_batch; n *= 2)
        nrows += (int)nv;
    for (size_t n = O.start_batch; n <= O.max_batch; n *= 2)
        for (size_t i = 0; i < nv; i++) {
            char what[96];
            snprintf(what, sizeof(what), "block %zu batch %zu", v[i], n);
            progress(k, nrows, what);
            row(v[i], n);
            progress(++k, nrows, what);
        }
}

static void run_bw(void)
{
    run_bw_rows(run_bw_row);
}

/* ---- latency */

static void l_done(nxl_future_t *f, nxl_status_t st, void *arg)
{
    if (st != NXL_SUCCESS) {
        fail("ping failed: %s", nxl_future_error(f));
        return;
    }
    L.xfer_done = true;
    if (L.got_pong && L.n < L.total)
        l_ping();
}

static void l_ping(void)
{
    long k = L.n - L.warm;
    L.got_pong = L.xfer_done = false;
    uint64_t t0 = now_ns();
    L.t_sent = t0;
    nxl_status_t st = nxl_xfer_post(L.x, l_done, NULL, NULL);
    if (st != NXL_SUCCESS) {
        fail("ping post: %s", nxl_agent_last_error(I.a));
        return;
    }
    if (k >= 0)
        L.post[k] = (now_ns() - t0) / 1e3;
}

static void run_lat(void)
{
    size_t v[64], nv;
    size_list(v, &nv);
    for (size_t i = 0; i < nv; i++) {
        size_t bs = v[i];
        char what[64];
        snprintf(what, sizeof(what), "latency, block %zu", bs);
        progress((int)i, (int)nv, what);
        uint64_t seed = 0;
        if (O.check) {
            seed = (uint64_t)getpid() * 1000 + seed_counter++;
            pat_fill(I.buf.p, 0, bs, seed);
            pat_fill(I.buf.p, bs, bs, seed + 9);
            ask("fill %llu 0 %zu", (unsigned long long)(seed + 7), 2 * bs);
        }
        ask("lat %zu %s", bs, O.reply_notif ? "notif" : "write");
        long warm, it = row_iters(bs * 2, &warm);
        memset(&L, 0, sizeof(L));
        L.warm = warm;
        L.total = it + warm;
        L.rtt = calloc((size_t)it, sizeof(double));
        L.post = calloc((size_t)it, sizeof(double));
        nxl_desc_t ld = {.addr = (uintptr_t)I.buf.p, .len = bs}, rd = {.addr = I.raddr, .len = bs};
        nxl_dlist_t l = {NXL_DRAM, &ld, 1}, r = {NXL_DRAM, &rd, 1};
        nxl_xfer_opts_t o;
        nxl_xfer_opts_init(&o);
        o.notif = "p";
        o.notif_len = 1;
        uint64_t p0 = now_ns();
        if (nxl_xfer_create(I.a, NXL_WRITE, &l, &r, T_NAME, &o, &L.x) != NXL_SUCCESS)
            die("initiator: latency transfer: %s", nxl_agent_last_error(I.a));
        double prep = (now_ns() - p0) / 1e3;
        uint64_t t0 = now_ns();
        l_ping();
        run_until(&L.n, L.total);
        uint64_t t1 = now_ns();
        if (I.failed)
            die("initiator: latency, block %zu: %s", bs, I.err);
        /* the last ping's own completion */
        for (int k = 0; k < 100 && nxl_xfer_status(L.x) == NXL_IN_PROG; k++)
            i_turn(10);
        nxl_xfer_release(L.x);
        if (O.check) {
            ask("chk %llu 0 %zu", (unsigned long long)seed, bs);
            if (!O.reply_notif && pat_check(I.buf.p, bs, bs, seed + 7) >= 0)
                die("consistency: latency: the pong's data did not arrive intact");
        }
        row_t *w = &I.rows[I.nrows++];
        w->bs = bs;
        w->batch = 1;
        w->iters = it;
        double avg, p50, p99;
        stats(L.rtt, it, &avg, &p50, &p99);
        w->avg_lat_us = avg / 2;
        w->p50_us = p50 / 2;
        w->p99_us = p99 / 2;
        w->avg_tx_us = avg;
        w->p99_tx_us = p99;
        w->bw_gbps = bs / (avg / 2 * 1e-6) / 1e9;
        w->avg_prep_us = w->p99_prep_us = prep;
        stats(L.post, it, &w->avg_post_us, NULL, &w->p99_post_us);
        (void)t0;
        (void)t1;
        free(L.rtt);
        free(L.post);
        progress((int)i + 1, (int)nv, what);
    }
}

/* ---- desc_rate */

static long d_done_count;
static uint64_t d_t_done;
static void d_done(nxl_future_t *f, nxl_status_t st, void *arg)
{
    d_t_done = now_ns();
    if (st != NXL_SUCCESS)
        fail("transfer failed: %s", nxl_future_error(f));
    d_done_count++;
}

/* desc_rate --threads N: N threads each run the cycle of run_desc (prep
 * both lists, make, post, wait, release) against the threaded agent; the
 * rate is every thread's descriptors over the wall-clock time of the timed
 * iterations (after a barrier that ends the warm-up). */
typedef struct {
    size_t n;
    long warm, it;
    const nxl_desc_t *ld, *rd;
    pthread_barrier_t *bar;
    uint64_t t0, t1;
} dthr_t;

static void *desc_thread(void *arg)
{
    dthr_t *d = arg;
    for (long t = 0; t < d->warm + d->it; t++) {
        if (t == d->warm) {
            pthread_barrier_wait(d->bar);
            d->t0 = now_ns();
        }
        nxl_prepped_t *lp = NULL, *rp = NULL;
        nxl_xfer_t *x = NULL;
        nxl_future_t *f = NULL;
        if (nxl_prep(I.a, NULL, NXL_DRAM, d->ld, d->n, &lp) != NXL_SUCCESS ||
            nxl_prep(I.a, T_NAME, NXL_DRAM, d->rd, d->n, &rp) != NXL_SUCCESS ||
            nxl_xfer_make(I.a, O.op, lp, NULL, rp, NULL, d->n, NULL, &x) != NXL_SUCCESS ||
            nxl_xfer_post(x, NULL, NULL, &f) != NXL_SUCCESS)
            die("initiator: desc_rate thread: %s", nxl_agent_last_error(I.a));
        nxl_status_t st = nxl_future_wait(f, 30000);
        if (st != NXL_SUCCESS)
            die("initiator: desc_rate thread: transfer %s", nxl_status_name(st));
        nxl_future_release(f);
        nxl_xfer_release(x);
        nxl_prepped_release(lp);
        nxl_prepped_release(rp);
    }
    d->t1 = now_ns();
    return NULL;
}

static void run_desc_threads(size_t n, size_t bs, long warm, long it)
{
    int nt = (int)O.threads;
    pthread_t th[256];
    dthr_t d[256];
    pthread_barrier_t bar;
    if (nt > 256)
        die("--threads: at most 256");
    /* each thread its own part of the buffers */
    size_t per = n * bs;
    if (per * nt > I.rlen || per * nt > I.buf.len)
        die("desc_rate --threads %d: %d x %zu x %zu B do not fit in the %zu B buffer "
            "(--total_buffer_size)", nt, nt, n, bs, I.buf.len);
    pthread_barrier_init(&bar, NULL, (unsigned)nt);
    for (int k = 0; k < nt; k++) {
        nxl_desc_t *ld = calloc(n, sizeof(*ld)), *rd = calloc(n, sizeof(*rd));
        for (size_t j = 0; j < n; j++) {
            ld[j] = (nxl_desc_t){.addr = (uintptr_t)I.buf.p + k * per + j * bs, .len = bs};
            rd[j] = (nxl_desc_t){.addr = I.raddr + k * per + j * bs, .len = bs};
        }
        d[k] = (dthr_t){.n = n, .warm = warm, .it = it, .ld = ld, .rd = rd, .bar = &bar};
        pthread_create(&th[k], NULL, desc_thread, &d[k]);
    }
    uint64_t t0 = UINT64_MAX, t1 = 0;
    for (int k = 0; k < nt; k++) {
        pthread_join(th[k], NULL);
        t0 = d[k].t0 < t0 ? d[k].t0 : t0;
        t1 = d[k].t1 > t1 ? d[k].t1 : t1;
        free((void *)d[k].ld);
        free((void *)d[k].rd);
    }
    pthread_barrier_destroy(&bar);
    double sec = (t1 - t0) / 1e9;
    printf("# desc_rate %zu x %zu B, %d threads x %ld iterations: %.3f s, %.3f Mdesc/s "
           "(prep + make + post + completion + release, wall clock)\n", n, bs, nt, it, sec,
           (double)n * it * nt / sec / 1e6);
}

static void run_desc(void)
{
    size_t v[64], nv;
    size_list(v, &nv);
    int k = 0, nrows = 0;
    for (size_t n = O.start_batch; n <= O.max_batch; n *= 2)
        nrows += (int)nv;
    for (size_t n = O.start_batch; n <= O.max_batch; n *= 2)
        for (size_t i = 0; i < nv; i++) {
            size_t bs = v[i];
            char what[96];
            snprintf(what, sizeof(what), "desc_rate, %zu x %zu B", n, bs);
            progress(k, nrows, what);
            nxl_desc_t *ld = calloc(n, sizeof(*ld)), *rd = calloc(n, sizeof(*rd));
            for (size_t j = 0; j < n; j++) {
                ld[j] = (nxl_desc_t){.addr = (uintptr_t)I.buf.p + j * bs, .len = bs};
                rd[j] = (nxl_desc_t){.addr = I.raddr + j * bs, .len = bs};
            }
            uint64_t seed = O.check ? consistency_prepare(n * bs) : 0;
            long warm, it = row_iters(n * bs, &warm);
            if (it < 3 && O.num_iter >= 3)
                it = 3;
            if (O.threads) {
                run_desc_threads(n, bs, warm, it);
                free(ld), free(rd);
                progress(++k, nrows, what);
                continue;
            }
            uint64_t w0 = 0;
            double *pl = calloc((size_t)it, sizeof(double)), *pr = calloc((size_t)it, sizeof(double)),
                   *mk = calloc((size_t)it, sizeof(double)), *pp = calloc((size_t)it, sizeof(double)),
                   *po = calloc((size_t)it, sizeof(double)), *cp = calloc((size_t)it, sizeof(double));
            for (long t = 0; t < warm + it; t++) {
                nxl_prepped_t *lp, *rp;
                nxl_xfer_t *x;
                uint64_t t0 = now_ns();
                if (t == warm)
                    w0 = t0;
                if (nxl_prep(I.a, NULL, NXL_DRAM, ld, n, &lp) != NXL_SUCCESS)
                    die("initiator: nxl_prep (local): %s", nxl_agent_last_error(I.a));
                uint64_t t1 = now_ns();
                if (nxl_prep(I.a, T_NAME, NXL_DRAM, rd, n, &rp) != NXL_SUCCESS)
                    die("initiator: nxl_prep (remote): %s", nxl_agent_last_error(I.a));
                uint64_t t2 = now_ns();
                if (nxl_xfer_make(I.a, O.op, lp, NULL, rp, NULL, n, NULL, &x) != NXL_SUCCESS)
                    die("initiator: nxl_xfer_make: %s", nxl_agent_last_error(I.a));
                uint64_t t3 = now_ns();
                long before = d_done_count;
                if (nxl_xfer_post(x, d_done, NULL, NULL) != NXL_SUCCESS)
                    die("initiator: nxl_xfer_post: %s", nxl_agent_last_error(I.a));
                uint64_t t4 = now_ns();
                run_until(&d_done_count, before + 1);
                if (I.failed)
                    die("initiator: desc_rate: %s", I.err);
                long j = t - warm;
                if (j >= 0) {
                    pl[j] = (t1 - t0) / 1e3;
                    pr[j] = (t2 - t1) / 1e3;
                    mk[j] = (t3 - t2) / 1e3;
                    pp[j] = (t3 - t0) / 1e3;
                    po[j] = (t4 - t3) / 1e3;
                    cp[j] = (d_t_done - t3) / 1e3;
                }
                nxl_xfer_release(x);
                nxl_prepped_release(lp);
                nxl_prepped_release(rp);
            }
            double wsec = (now_ns() - w0) / 1e9;
            printf("# desc_rate %zu x %zu B, 1 thread x %ld iterations: %.3f s, %.3f Mdesc/s "
                   "(prep + make + post + completion + release, wall clock)\n", n, bs, it, wsec,
                   (double)n * it / wsec / 1e6);
            if (O.check)
                consistency_verify(seed, n * bs);
            row_t *w = &I.rows[I.nrows++];
            double p50, d;
            w->bs = bs;
            w->batch = n;
            w->iters = it;
            stats(pl, it, &d, &w->prep_local_us, &d);
            stats(pr, it, &d, &w->prep_remote_us, &d);
            stats(mk, it, &d, &w->make_us, &d);
            stats(pp, it, &w->avg_prep_us, &w->prep_us, &w->p99_prep_us);
            stats(po, it, &w->avg_post_us, &w->post_us, &w->p99_post_us);
            stats(cp, it, &w->avg_tx_us, &w->complete_us, &w->p99_tx_us);
            (void)p50;
            w->bw_gbps = (double)n * bs / (w->complete_us * 1e-6) / 1e9;
            w->avg_lat_us = w->avg_prep_us + w->avg_tx_us;
            free(pl), free(pr), free(mk), free(pp), free(po), free(cp);
            free(ld), free(rd);
            progress(++k, nrows, what);
        }
}

/* ---- idle */

static void run_idle(void)
{
    ask("idle0");
    double c0, c1;
    long nv0, niv0, nv1, niv1;
    usage_now(&c0, &nv0, &niv0);
    uint64_t t0 = now_ns(), end = t0 + (uint64_t)(O.duration * 1e9);
    uint64_t t;
    while ((t = now_ns()) < end) {
        uint64_t left_ms = (end - t + 999999) / 1000000;
        nxl_agent_run_once(I.a, left_ms > 1000000 ? 1000000 : (int)left_ms);
    }
    usage_now(&c1, &nv1, &niv1);
    double sec = (now_ns() - t0) / 1e9;
    const char *r = ask("idle1");
    double tsec, tcpu;
    long tnv, tniv;
    if (sscanf(r, "idle %lf %ld %ld %lf", &tsec, &tnv, &tniv, &tcpu) != 4)
        die("initiator: unexpected idle answer '%s'", r);
    row_t *w = &I.rows[I.nrows++];
    w->role = "initiator";
    w->duration_s = sec;
    w->nvcsw = nv1 - nv0;
    w->nivcsw = niv1 - niv0;
    w->wakeups_per_s = w->nvcsw / sec;
    w->cpu_s = c1 - c0;
    w = &I.rows[I.nrows++];
    w->role = "target";
    w->duration_s = tsec;
    w->nvcsw = tnv;
    w->nivcsw = tniv;
    w->wakeups_per_s = tnv / tsec;
    w->cpu_s = tcpu;
}

/* ---- output */

static void print_table(FILE *f)
{
    if (O.mode == M_IDLE) {
        fprintf(f, "%-10s %10s %14s %12s %8s %8s\n", "Role", "Time (s)", "Wake-ups/s", "CPU (s)",
                "nvcsw", "nivcsw");
        for (int i = 0; i < I.nrows; i++) {
            row_t *r = &I.rows[i];
            fprintf(f, "%-10s %10.2f %14.2f %12.6f %8.0f %8.0f\n", r->role, r->duration_s,
                    r->wakeups_per_s, r->cpu_s, r->nvcsw, r->nivcsw);
        }
        return;
    }
    if (O.mode == M_DESC) {
        fprintf(f, "%-10s %-8s %12s %12s %12s %12s %12s %12s %12s %10s\n", "Block Size",
                "Descs", "Prep (us)", "Local (us)", "Remote (us)", "Make (us)", "Post (us)",
                "Compl. (us)", "Prep/desc ns", "B/W (GB/s)");
        for (int i = 0; i < I.nrows; i++) {
            row_t *r = &I.rows[i];
            fprintf(f, "%-10zu %-8zu %12.1f %12.1f %12.1f %12.1f %12.1f %12.1f %12.1f %10.3f\n",
                    r->bs, r->batch, r->prep_us, r->prep_local_us, r->prep_remote_us, r->make_us,
                    r->post_us, r->complete_us, r->prep_us * 1e3 / r->batch, r->bw_gbps);
        }
        return;
    }
    fprintf(f, "%-12s %-10s %-12s %-14s %-13s %-13s %-13s %-13s %-12s %-12s", "Block Size",
            "Batch Size", "B/W (GB/s)", "Avg Lat. (us)", "Avg Prep (us)", "P99 Prep (us)",
            "Avg Post (us)", "P99 Post (us)", "Avg Tx (us)", "P99 Tx (us)");
    if (O.mode == M_LAT)
        fprintf(f, " %-10s %-10s", "P50 (us)", "P99 (us)");
    fprintf(f, "\n");
    for (int i = 0; i < I.nrows; i++) {
        row_t *r = &I.rows[i];
        fprintf(f, "%-12zu %-10zu %-12.4f %-14.3f %-13.3f %-13.3f %-13.3f %-13.3f %-12.3f %-12.3f",
                r->bs, r->batch, r->bw_gbps, r->avg_lat_us, r->avg_prep_us, r->p99_prep_us,
                r->avg_post_us, r->p99_post_us, r->avg_tx_us, r->p99_tx_us);
        if (O.mode == M_LAT)
            fprintf(f, " %-10.3f %-10.3f", r->p50_us, r->p99_us);
        fprintf(f, "\n");
    }
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static void write_json(const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        die("--json %s: %s", path, strerror(errno));
    fprintf(f, "{\"mode\": \"%s\",\n\"rows\": [\n", mode_names[O.mode]);
    for (int i = 0; i < I.nrows; i++) {
        row_t *r = &I.rows[i];
        fprintf(f, "  {");
        if (O.mode == M_IDLE) {
            fprintf(f, "\"role\": \"%s\", \"duration_s\": %.3f, \"wakeups_per_s\": %.3f, "
                       "\"cpu_s\": %.6f, \"nvcsw\": %.0f, \"nivcsw\": %.0f",
                    r->role, r->duration_s, r->wakeups_per_s, r->cpu_s, r->nvcsw, r->nivcsw);
        } else {
            fprintf(f, "\"block_size\": %zu, \"batch_size\": %zu, \"iters\": %ld, "
                       "\"bw_gbps\": %.6f, \"avg_lat_us\": %.3f, \"avg_prep_us\": %.3f, "
                       "\"p99_prep_us\": %.3f, \"avg_post_us\": %.3f, \"p99_post_us\": %.3f, "
                       "\"avg_tx_us\": %.3f, \"p99_tx_us\": %.3f",
                    r->bs, r->batch, r->iters, r->bw_gbps, r->avg_lat_us, r->avg_prep_us,
                    r->p99_prep_us, r->avg_post_us, r->p99_post_us, r->avg_tx_us, r->p99_tx_us);
            if (O.mode == M_LAT)
                fprintf(f, ", \"p50_us\": %.3f, \"p99_us\": %.3f", r->p50_us, r->p99_us);
            if (O.mode == M_DESC)
                fprintf(f, ", \"descs\": %zu, \"prep_us\": %.3f, \"post_us\": %.3f, "
                           "\"complete_us\": %.3f, \"prep_local_us\": %.3f, "
                           "\"prep_remote_us\": %.3f, \"make_us\": %.3f",
                        r->batch, r->prep_us, r->post_us, r->complete_us, r->prep_local_us,
                        r->prep_remote_us, r->make_us);
        }
        fprintf(f, "}%s\n", i + 1 < I.nrows ? "," : "");
    }
    nxl_plugin_info_t pi[8];
    size_t np = nxl_plugins_available(pi, 8);
    char ucxv[64] = "unknown";
    for (size_t i = 0; i < np && i < 8; i++)
        if (!strcmp(pi[i].name, "UCX"))
            sscanf(pi[i].reason, "UCX %63[^: ]", ucxv);
    char hostname[128] = "";
    gethostname(hostname, sizeof(hostname) - 1);
    fprintf(f, "],\n\"env\": {\"ucx_version\": ");
    json_str(f, ucxv);
    fprintf(f, ", \"nxl_version\": ");
    json_str(f, nxl_version());
    fprintf(f, ", \"transports\": ");
    json_str(f, transports_desc);
    fprintf(f, ", \"UCX_TLS\": ");
    json_str(f, getenv("UCX_TLS") ? getenv("UCX_TLS") : "");
    fprintf(f, ", \"FI_PROVIDER\": ");
    json_str(f, getenv("FI_PROVIDER") ? getenv("FI_PROVIDER") : "");
    fprintf(f, ", \"backend_params\": ");
    json_str(f, O.bparams_text ? O.bparams_text : "");
    fprintf(f, ", \"host\": ");
    json_str(f, hostname);
    if (!strcmp(O.backend, "POSIX")) {
        fprintf(f, ", \"posix_engine\": ");
        json_str(f, transports_desc);
        fprintf(f, ", \"direct\": %s, \"footprint\": %zu, \"num_files\": %ld, \"filepath\": ",
                O.direct ? "true" : "false", posix_footprint, posix_nfiles);
        json_str(f, posix_where);
        fprintf(f, ", \"dram_pages\": \"%s\", \"dram_thp_bytes\": %lld",
                buf_huge ? "THP (madvise)" : "plain", posix_thp);
        fprintf(f, ", \"page_cache\": \"%s\"",
                O.direct ? "bypassed (O_DIRECT)"
                         : "files synced and dropped (fadvise DONTNEED) before each row");
    }
    fprintf(f, ", \"cpus\": %ld,\n  \"flags\": {\"mode\": \"%s\", \"backend\": \"%s\", "
               "\"op_type\": \"%s\", \"initiator_seg_type\": \"%s\", \"target_seg_type\": \"%s\", "
               "\"start_block_size\": %zu, \"max_block_size\": %zu, \"start_batch_size\": %zu, "
               "\"max_batch_size\": %zu, \"num_iter\": %ld, \"warmup_iter\": %ld, "
               "\"max_row_bytes\": %zu, \"total_buffer_size\": %zu, \"check_consistency\": %s, "
               "\"recreate_xfer\": %s, \"pipeline_depth\": %ld, \"busy_poll_us\": %ld, "
               "\"mem_source\": \"%s\", \"latency_reply\": \"%s\", \"pin\": %s, "
               "\"duration\": %.3f, \"spawn\": %s, \"storage_enable_direct\": %s, "
               "\"storage_footprint\": %zu, \"num_files\": %ld, \"posix_api_type\": \"%s\", "
               "\"storage_prefill\": %s, \"storage_huge_pages\": %s}}}\n",
            sysconf(_SC_NPROCESSORS_ONLN), mode_names[O.mode], O.backend,
            O.op == NXL_READ ? "READ" : "WRITE", O.iseg, O.tseg, O.start_bs, O.max_bs,
            O.start_batch, O.max_batch, O.num_iter, O.warmup_iter, O.row_bytes, O.total_buf,
            O.check ? "true" : "false", O.recreate ? "true" : "false", O.depth, O.busy_poll_us,
            O.mem_nxl ? "nxl" : "malloc", O.reply_notif ? "notif" : "write",
            O.pin ? "true" : "false", O.duration, O.spawn ? "true" : "false",
            O.direct ? "true" : "false", O.footprint, O.num_files, O.posix_engine,
            O.no_prefill ? "false" : "true", O.plain_pages ? "false" : "true");
    if (fclose(f))
        die("--json %s: %s", path, strerror(errno));
}

/* Bandwidth vs block size, one line per JSON file (rows of the first batch size). */
static int plot(const char *png, char **files, int nfiles)
{
    if (system("command -v gnuplot >/dev/null 2>&1")) {
        fprintf(stderr, "nxlbench: gnuplot is not installed; install it with:\n"
                        "  sudo apt-get install gnuplot-nox\n");
        return 3;
    }
    char dir[] = "/tmp/nxlbench-plot-XXXXXX";
    if (!mkdtemp(dir))
        die("--plot: mkdtemp: %s", strerror(errno));
    char script[4096 + 512 * 16];
    size_t so = (size_t)snprintf(script, sizeof(script),
                                 "set terminal png size 1000,600\nset output '%s'\n"
                                 "set logscale x 2\nset format x '%%.0b%%BB'\n"
                                 "set xlabel 'block size'\nset ylabel 'bandwidth (GB/s)'\n"
                                 "set key top left\nset grid\nplot ",
                                 png);
    for (int i = 0; i < nfiles && i < 16; i++) {
        FILE *in = fopen(files[i], "r");
        if (!in)
            die("--plot: %s: %s", files[i], strerror(errno));
        char dpath[512];
        snprintf(dpath, sizeof(dpath), "%s/%d.dat", dir, i);
        FILE *out = fopen(dpath, "w");
        char line[4096];
        size_t batch0 = 0;
        int rows = 0;
        char label[160] = "";
        while (fgets(line, sizeof(line), in)) {
            char *fl = strstr(line, "\"op_type\": \""), *ms = strstr(line, "\"mem_source\": \"");
            if (fl && ms)
                snprintf(label, sizeof(label), " (%.*s, %.*s)", (int)strcspn(fl + 12, "\""), fl + 12,
                         (int)strcspn(ms + 15, "\""), ms + 15);
            char *b = strstr(line, "\"block_size\": "), *n = strstr(line, "\"batch_size\": "),
                 *w = strstr(line, "\"bw_gbps\": ");
            if (!b || !w || !n)
                continue;
            size_t bs = strtoull(b + 14, NULL, 10), bt = strtoull(n + 14, NULL, 10);
            if (!batch0)
                batch0 = bt;
            if (bt != batch0)
                continue;
            fprintf(out, "%zu %s", bs, "");
            fprintf(out, "%f\n", strtod(w + 11, NULL));
            rows++;
        }
        fclose(in);
        fclose(out);
        if (!rows)
            fprintf(stderr, "nxlbench: --plot: %s has no bandwidth rows\n", files[i]);
        const char *base = strrchr(files[i], '/') ? strrchr(files[i], '/') + 1 : files[i];
        so += (size_t)snprintf(script + so, sizeof(script) - so,
                               "%s'%s' using 1:2 with linespoints title '%s%s'", i ? ", " : "",
                               dpath, base, label);
    }
    so += (size_t)snprintf(script + so, sizeof(script) - so, "\n");
    char spath[512];
    snprintf(spath, sizeof(spath), "%s/plot.gp", dir);
    FILE *s = fopen(spath, "w");
    fputs(script, s);
    fclose(s);
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "gnuplot '%s'", spath);
    int rc = system(cmd);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd)) {
    }
    if (rc) {
        fprintf(stderr, "nxlbench: gnuplot failed\n");
        return 3;
    }
    fprintf(stderr, "nxlbench: wrote %s\n", png);
    return 0;
}

static int initiator_main(const char *host, uint16_t port)
{
    snprintf(I.host, sizeof(I.host), "%s", host);
    I.port = port;
    I.t_start = now_ns();
    size_t need = need_bytes();
    if (need > O.total_buf)
        die("the sweep needs %zu bytes per process (largest block x batch x pipeline depth) but "
            "--total_buffer_size is %zu (capped at an eighth of MemTotal)", need, O.total_buf);
    I.a = make_agent(I_NAME, NULL, 0, "initiator");
    nxl_agent_on_notif(I.a, i_notif, NULL);
    if (!buf_alloc(I.a, &I.buf, need, O.mem_nxl))
        die("initiator: %zu bytes (%s): %s", need, O.mem_nxl ? "nxl_mem_alloc" : "malloc",
            nxl_agent_last_error(I.a));
    nxl_future_t *f;
    if (O.etcd) {
        if (nxl_md_publish(I.a, NULL, NULL, &f) != NXL_SUCCESS)
            die("initiator: nxl_md_publish: %s", nxl_agent_last_error(I.a));
        wait_future(f, "publishing to etcd");
        if (nxl_md_fetch_etcd(I.a, T_NAME, NULL, 120000, NULL, NULL, &f) != NXL_SUCCESS)
            die("initiator: nxl_md_fetch_etcd: %s", nxl_agent_last_error(I.a));
        wait_future(f, "fetching the target's metadata from etcd");
    } else {
        if (nxl_md_fetch(I.a, T_NAME, host, port, NULL, NULL, &f) != NXL_SUCCESS)
            die("initiator: nxl_md_fetch: %s", nxl_agent_last_error(I.a));
        wait_future(f, "fetching the target's metadata");
        if (nxl_md_send(I.a, host, port, NULL, NULL, &f) != NXL_SUCCESS)
            die("initiator: nxl_md_send: %s", nxl_agent_last_error(I.a));
        wait_future(f, "sending metadata to the target");
    }
    const char *r = ask("setup %zu %s %llu %zu", need, O.mem_nxl ? "nxl" : "malloc",
                        (unsigned long long)(uintptr_t)I.buf.p, need);
    unsigned long long ra;
    if (sscanf(r, "ready %llu", &ra) != 1)
        die("initiator: unexpected answer '%s' to setup", r);
    I.raddr = (uintptr_t)ra;
    I.rlen = need;
    if (O.etcd) {
        if (nxl_md_fetch_etcd(I.a, T_NAME, NULL, 10000, NULL, NULL, &f) != NXL_SUCCESS)
            die("initiator: nxl_md_fetch_etcd: %s", nxl_agent_last_error(I.a));
    } else if (nxl_md_fetch(I.a, T_NAME, host, port, NULL, NULL, &f) != NXL_SUCCESS) {
        die("initiator: nxl_md_fetch: %s", nxl_agent_last_error(I.a));
    }
    wait_future(f, "fetching the target's metadata (with its buffer)");

    switch (O.mode) {
    case M_BW: run_bw(); break;
    case M_LAT: run_lat(); break;
    case M_DESC: run_desc(); break;
    case M_IDLE: run_idle(); break;
    }

    if (nxl_notif_send(I.a, T_NAME, "quit", 4, NULL, NULL, &f) == NXL_SUCCESS)
        wait_future(f, "telling the target to quit");
    printf("# nxlbench %s, %s, %s, %s, mem_source %s, pipeline_depth %ld, busy_poll_us %ld%s",
           mode_names[O.mode], O.backend, O.op == NXL_READ ? "READ" : "WRITE",
           O.iseg, O.mem_nxl ? "nxl" : "malloc", O.depth, O.busy_poll_us,
           O.recreate ? ", recreate_xfer" : "");
    if (O.threads)
        printf(", threaded initiator, %ld threads", O.threads);
    printf("\n");
    print_table(stdout);
    fflush(stdout);
    if (O.json)
        write_json(O.json);
    buf_free(I.a, &I.buf);
    nxl_agent_destroy(I.a);
    if (O.plot) {
        if (!O.json)
            fprintf(stderr, "nxlbench: --plot after a run needs --json FILE to plot from\n");
        else
            return plot(O.plot, (char **)&O.json, 1);
    }
    return 0;
}

/* --------------------------------------------- POSIX: DRAM ↔ files, one process
 *
 * As nixlbench runs its storage backends: one agent, its own peer. The DRAM
 * side is a ring of pipeline_depth × batch blocks, reused; the file side is
 * a footprint of at least --storage_footprint bytes spread over
 * --num_files files (or one block device), walked sequentially: each
 * transfer takes the next `batch` blocks, file after file, and the walk
 * wraps at the end. So a row measures the storage, not one small region
 * that the page cache holds. Each transfer is made from the two lists
 * prepared once per row (nxl_xfer_make by index; its time is "prep"). */

#include <fcntl.h>
#include <limits.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

typedef struct sfile {
    int fd;
    char path[PATH_MAX + 64];
    bool made;
} sfile_t;

static struct {
    nxl_agent_t *a;
    char dir[PATH_MAX];
    bool made_dir;
    sfile_t *f;
    long nf;
    size_t fsize;        /* bytes of each file used */
    bool blk_dev;        /* BLK on a real block device */
    buf_t ring;
    uint64_t seed;       /* READ: the files' pattern (seed + file index, by file offset) */
    bool filled;
} P;

typedef struct pslot {
    nxl_xfer_t *x;
    size_t ring0;        /* first ring block of this slot */
    size_t g;            /* first footprint block of the transfer in flight */
    uint64_t t_post;
    struct prow *r;
} pslot_t;

typedef struct prow {
    size_t bs, n, bpf, nblk;
    nxl_prepped_t *lp, *rp;
    size_t next;         /* next footprint block */
    long total, posted, completed, warm;
    double *prep, *post, *tx;
    long nprep;
    pslot_t *slots;
    size_t *lidx, *ridx;
    uint32_t *writer;    /* WRITE, --check_consistency: ring block of each block's last write */
    bool verify;         /* READ verification pass: check every buffer as it completes */
    size_t nverified;
} prow_t;

static void p_cleanup(void)
{
    for (long i = 0; i < P.nf; i++)
        if (P.f[i].made)
            unlink(P.f[i].path);
    if (P.made_dir)
        rmdir(P.dir);
}

static void p_die_cleanup(int sig)
{
    p_cleanup();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* compares len bytes at p with pattern seed at offsets o0 .. o0+len; @return the first wrong offset or -1 */
static long long pat_cmp(const unsigned char *p, size_t o0, size_t len, uint64_t seed)
{
    size_t i = 0;
    for (; i < len && ((o0 + i) & 7); i++)
        if (p[i] != pat_byte(seed, o0 + i))
            return (long long)(o0 + i);
    for (; i + 8 <= len; i += 8) {
        uint64_t w = mix64(seed * 0x100000001B3ull + ((o0 + i) >> 3)), v;
        memcpy(&v, p + i, 8);
        if (v != w)
            break;
    }
    for (; i < len; i++)
        if (p[i] != pat_byte(seed, o0 + i))
            return (long long)(o0 + i);
    return -1;
}

static void pat_fill_at(unsigned char *p, size_t o0, size_t len, uint64_t seed)
{
    size_t i = 0;
    for (; i < len && ((o0 + i) & 7); i++)
        p[i] = pat_byte(seed, o0 + i);
    for (; i + 8 <= len; i += 8) {
        uint64_t w = mix64(seed * 0x100000001B3ull + ((o0 + i) >> 3));
        memcpy(p + i, &w, 8);
    }
    for (; i < len; i++)
        p[i] = pat_byte(seed, o0 + i);
}

/* untimed: written data on its way to the storage, and none of the files in the page cache */
static void p_settle(void)
{
    for (long i = 0; i < P.nf; i++) {
        fdatasync(P.f[i].fd);
        posix_fadvise(P.f[i].fd, 0, 0, POSIX_FADV_DONTNEED);
    }
}

static void p_files(void)
{
    bool blk = !strcmp(O.tseg, "BLK");
    if (blk) {
        P.nf = 1;
        P.f = calloc(1, sizeof(sfile_t));
        snprintf(P.f[0].path, sizeof(P.f[0].path), "%s", O.filepath);
        P.f[0].fd = open(O.filepath, O_RDWR | O_CLOEXEC);
        if (P.f[0].fd < 0)
            die("--filepath %s: %s", O.filepath, strerror(errno));
        struct stat sb;
        fstat(P.f[0].fd, &sb);
        uint64_t size = (uint64_t)sb.st_size;
        if (S_ISBLK(sb.st_mode)) {
            P.blk_dev = true;
            if (ioctl(P.f[0].fd, BLKGETSIZE64, &size))
                die("--filepath %s: BLKGETSIZE64: %s", O.filepath, strerror(errno));
            if (size < O.footprint) {
                fprintf(stderr, "nxlbench: %s holds %llu bytes: the footprint is that, not %zu\n",
                        O.filepath, (unsigned long long)size, O.footprint);
                O.footprint = (size_t)size;
            }
        } else if (!S_ISREG(sb.st_mode)) {
            die("--filepath %s: neither a block device nor a regular file", O.filepath);
        } else if (size < O.footprint && ftruncate(P.f[0].fd, (off_t)O.footprint)) {
            die("--filepath %s: extending to %zu bytes: %s", O.filepath, O.footprint,
                strerror(errno));
        }
        P.fsize = O.footprint;
        return;
    }
    if (O.filepath) {
        snprintf(P.dir, sizeof(P.dir), "%s", O.filepath);
        struct stat sb;
        if (stat(P.dir, &sb) || !S_ISDIR(sb.st_mode))
            die("--filepath %s: not a directory (FILE runs make their files there)", P.dir);
    } else {
        snprintf(P.dir, sizeof(P.dir), "/tmp/nxlbench-XXXXXX");
        if (!mkdtemp(P.dir))
            die("mkdtemp: %s", strerror(errno));
        P.made_dir = true;
    }
    P.nf = O.num_files;
    P.f = calloc((size_t)P.nf, sizeof(sfile_t));
    P.fsize = (O.footprint / (size_t)P.nf + 4095) & ~(size_t)4095;
    atexit(p_cleanup);
    signal(SIGINT, p_die_cleanup);
    signal(SIGTERM, p_die_cleanup);
    for (long i = 0; i < P.nf; i++) {
        sfile_t *f = &P.f[i];
        snprintf(f->path, sizeof(f->path), "%s/nxlbench-%d-%ld.dat", P.dir, (int)getpid(), i);
        f->fd = open(f->path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (f->fd < 0)
            die("creating %s: %s", f->path, strerror(errno));
        f->made = true;
        int e = posix_fallocate(f->fd, 0, (off_t)P.fsize);
        if (e && ftruncate(f->fd, (off_t)P.fsize))
            die("sizing %s to %zu bytes: %s", f->path, P.fsize, strerror(e));
    }
}

/* Before the first row (untimed), every file is written whole with a known
 * pattern: READs then read real data (not the holes or unwritten extents of
 * a new file, which cost the storage nothing) and can be verified, and
 * WRITEs overwrite allocated blocks, as in a file in use and as fio does
 * once its file is laid out. */
static void p_prefill(void)
{
    if (P.filled || O.no_prefill)
        return;
    P.filled = true;
    P.seed = (uint64_t)getpid() * 7919 + 17;
    size_t cb = 4 * MiB;
    unsigned char *b = malloc(cb);
    for (long i = 0; i < P.nf; i++)
        for (size_t o = 0; o < P.fsize; o += cb) {
            size_t l = P.fsize - o < cb ? P.fsize - o : cb;
            pat_fill_at(b, o, l, P.seed + (uint64_t)i);
            for (size_t d = 0; d < l;) {
                ssize_t w = pwrite(P.f[i].fd, b + d, l - d, (off_t)(o + d));
                if (w <= 0)
                    die("filling %s: %s", P.f[i].path, w < 0 ? strerror(errno) : "short write");
                d += (size_t)w;
            }
        }
    free(b);
}

static void p_post(pslot_t *s);

static void p_done(nxl_future_t *f, nxl_status_t st, void *arg)
{
    pslot_t *s = arg;
    prow_t *r = s->r;
    uint64_t t = now_ns();
    if (st != NXL_SUCCESS) {
        fail("transfer failed: %s", nxl_future_error(f));
        return;
    }
    long k = r->completed++ - r->warm;
    if (k >= 0 && !r->verify)
        r->tx[k] = (t - s->t_post) / 1e3;
    nxl_xfer_release(s->x);
    s->x = NULL;
    if (r->verify) {
        for (size_t j = 0; j < r->n; j++) {
            size_t g = (s->g + j) % r->nblk, fi = g / r->bpf, off = (g % r->bpf) * r->bs;
            long long bad = pat_cmp(P.ring.p + (s->ring0 + j) * r->bs, off, r->bs,
                                    P.seed + (uint64_t)fi);
            if (bad >= 0) {
                fail("consistency: READ of %s at offset %zu (block %zu B) differs from the file's "
                     "pattern at offset %lld", P.f[fi].path, off, r->bs, bad);
                return;
            }
            r->nverified++;
        }
    }
    if (r->posted < r->total && !I.failed)
        p_post(s);
}

static void p_post(pslot_t *s)
{
    prow_t *r = s->r;
    s->g = r->next;
    for (size_t j = 0; j < r->n; j++) {
        r->lidx[j] = s->ring0 + j;
        r->ridx[j] = (r->next + j) % r->nblk;
        if (r->writer)
            r->writer[r->ridx[j]] = (uint32_t)(s->ring0 + j);
    }
    r->next = (r->next + r->n) % r->nblk;
    long k = r->posted - r->warm;
    uint64_t t0 = now_ns();
    nxl_status_t st = nxl_xfer_make(P.a, O.op, r->lp, r->lidx, r->rp, r->ridx, r->n, NULL, &s->x);
    uint64_t t1 = now_ns();
    if (st != NXL_SUCCESS) {
        fail("nxl_xfer_make: %s", nxl_agent_last_error(P.a));
        return;
    }
    s->t_post = t1;
    st = nxl_xfer_post(s->x, p_done, s, NULL);
    uint64_t t2 = now_ns();
    if (st != NXL_SUCCESS) {
        fail("nxl_xfer_post: %s", nxl_agent_last_error(P.a));
        return;
    }
    r->posted++;
    if (k >= 0 && !r->verify) {
        r->prep[k] = (t1 - t0) / 1e3;
        r->post[k] = (t2 - t1) / 1e3;
    }
}

static void p_run_until(prow_t *r, long target)
{
    uint64_t last = now_ns();
    long seen = r->completed;
    while (r->completed < target && !I.failed) {
        nxl_agent_run_once(P.a, 1000);
        if (r->completed != seen) {
            seen = r->completed;
            last = now_ns();
        } else if (now_ns() - last > 60ull * 1000000000u) {
            fail("no transfer completed in 60 s (%ld of %ld done)", r->completed, target);
        }
    }
}

/* posts `count` transfers from r->next on, at most pipeline_depth in flight */
static void p_pass(prow_t *r, long count)
{
    long P_ = O.depth;
    r->total = r->posted + count;
    for (long s = 0; s < P_ && r->posted < r->total && !I.failed; s++)
        p_post(&r->slots[s]);
    p_run_until(r, r->total);
}

static void p_verify_write(prow_t *r, size_t first, size_t nblocks)
{
    unsigned char *tmp;
    if (posix_memalign((void **)&tmp, 4096, r->bs))
        die("out of memory");
    for (size_t b = 0; b < nblocks; b++) {
        size_t g = (first + b) % r->nblk, fi = g / r->bpf, off = (g % r->bpf) * r->bs;
        for (size_t d = 0; d < r->bs;) {
            ssize_t got = pread(P.f[fi].fd, tmp + d, r->bs - d, (off_t)(off + d));
            if (got <= 0)
                die("consistency: reading back %s at %zu: %s", P.f[fi].path, off + d,
                    got < 0 ? strerror(errno) : "end of file");
            d += (size_t)got;
        }
        if (r->writer[g] == UINT32_MAX)
            continue;
        const unsigned char *want = P.ring.p + (size_t)r->writer[g] * r->bs;
        if (memcmp(tmp, want, r->bs)) {
            size_t k = 0;
            while (tmp[k] == want[k])
                k++;
            die("consistency: WRITE: %s byte %zu differs from what was written there "
                "(block %zu B)", P.f[fi].path, off + k, r->bs);
        }
    }
    free(tmp);
}

static void p_row(size_t bs, size_t n)
{
    prow_t r = {.bs = bs, .n = n};
    long Pd = O.depth;
    r.bpf = P.fsize / bs;
    r.nblk = r.bpf * (size_t)P.nf;
    if (r.nblk < (size_t)Pd * n * 2)
        die("--storage_footprint %zu holds %zu blocks of %zu B; a walk needs at least twice "
            "pipeline_depth × batch (%zu)", O.footprint, r.nblk, bs, (size_t)Pd * n * 2);
    /* default: one pass over the footprint */
    size_t per = bs * n;
    long timed = O.set_num_iter ? O.num_iter : (long)((r.nblk * bs + per - 1) / per);
    if (timed < 1)
        timed = 1;
    r.warm = O.set_warmup ? O.warmup_iter : (timed / 64 < 8 ? timed / 64 : 8);
    r.prep = calloc((size_t)timed + 1, sizeof(double));
    r.post = calloc((size_t)timed + 1, sizeof(double));
    r.tx = calloc((size_t)timed + 1, sizeof(double));
    r.slots = calloc((size_t)Pd, sizeof(pslot_t));
    r.lidx = calloc(n, sizeof(size_t));
    r.ridx = calloc(n, sizeof(size_t));
    /* the two lists, prepared once per row */
    size_t nring = (size_t)Pd * n;
    nxl_desc_t *ld = calloc(nring, sizeof(*ld)), *rd = calloc(r.nblk, sizeof(*rd));
    for (size_t i = 0; i < nring; i++)
        ld[i] = (nxl_desc_t){.addr = (uintptr_t)P.ring.p + i * bs, .len = bs};
    for (size_t g = 0; g < r.nblk; g++)
        rd[g] = (nxl_desc_t){.addr = (g % r.bpf) * bs, .len = bs,
                             .dev_id = (uint64_t)P.f[g / r.bpf].fd};
    nxl_mem_t ft = !strcmp(O.tseg, "BLK") ? NXL_BLK : NXL_FILE;
    if (nxl_prep(P.a, NULL, NXL_DRAM, ld, nring, &r.lp) != NXL_SUCCESS ||
        nxl_prep(P.a, nxl_agent_name(P.a), ft, rd, r.nblk, &r.rp) != NXL_SUCCESS)
        die("nxl_prep: %s", nxl_agent_last_error(P.a));
    free(ld);
    free(rd);
    for (long s = 0; s < Pd; s++)
        r.slots[s] = (pslot_t){.ring0 = (size_t)s * n, .r = &r};
    p_prefill();
    if (O.op == NXL_WRITE)
        pat_fill(P.ring.p, 0, nring * bs, (uint64_t)getpid() * 1000 + seed_counter++);
    if (O.check && O.op == NXL_WRITE) {
        r.writer = malloc(r.nblk * sizeof(uint32_t));
        memset(r.writer, 0xff, r.nblk * sizeof(uint32_t));
    }
    p_settle();
    size_t start = r.next;
    p_pass(&r, r.warm);
    uint64_t t0 = now_ns();
    long before = r.completed;
    p_pass(&r, timed);
    uint64_t t1 = now_ns();
    if (I.failed)
        die("block %zu batch %zu: %s", bs, n, I.err);
    (void)before;
    size_t moved_blocks = (size_t)(r.warm + timed) * n;
    size_t touched = moved_blocks < r.nblk ? moved_blocks : r.nblk;
    size_t first = moved_blocks < r.nblk ? start : 0;
    if (O.check) {
        if (O.op == NXL_WRITE) {
            p_verify_write(&r, first, touched);
        } else {
            /* read every touched block again, checking each buffer as it arrives */
            r.verify = true;
            r.next = first;
            long passes = (long)((touched + n - 1) / n);
            r.warm = r.completed = r.posted = 0;
            p_pass(&r, passes);
            if (I.failed)
                die("block %zu batch %zu: %s", bs, n, I.err);
        }
    }
    row_t *o = &I.rows[I.nrows++];
    double sec = (t1 - t0) / 1e9;
    o->bs = bs;
    o->batch = n;
    o->iters = timed;
    o->bw_gbps = (double)timed * n * bs / sec / 1e9;
    o->avg_lat_us = sec * 1e6 / timed;
    stats(r.prep, timed, &o->avg_prep_us, NULL, &o->p99_prep_us);
    stats(r.post, timed, &o->avg_post_us, NULL, &o->p99_post_us);
    stats(r.tx, timed, &o->avg_tx_us, NULL, &o->p99_tx_us);
    nxl_prepped_release(r.lp);
    nxl_prepped_release(r.rp);
    free(r.writer);
    free(r.slots);
    free(r.lidx);
    free(r.ridx);
    free(r.prep);
    free(r.post);
    free(r.tx);
}

static int posix_main(void)
{
    I.t_start = now_ns();
    size_t need = need_bytes();
    if (need > O.total_buf)
        die("the DRAM ring needs %zu bytes (largest block x batch x pipeline depth) but "
            "--total_buffer_size is %zu", need, O.total_buf);
    if (O.direct) {
        size_t v[64], nv;
        size_list(v, &nv);
        for (size_t i = 0; i < nv; i++)
            if (v[i] % 4096)
                fprintf(stderr, "nxlbench: --storage_enable_direct: blocks of %zu B are not "
                                "multiples of 4096; the transport moves them buffered\n", v[i]);
    }
    nxl_agent_config_t c;
    nxl_agent_config_init(&c);
    c.name = "nxlb-posix";
    c.busy_poll_us = (unsigned)O.busy_poll_us;
    c.log_level = NXL_LOG_INFO;
    c.log_cb = log_cb;
    c.log_arg = (void *)"posix";
    if (nxl_agent_create(&c, &P.a) != NXL_SUCCESS)
        die("nxl_agent_create: %s", nxl_agent_last_error(NULL));
    I.a = P.a;
    char qd[32];
    snprintf(qd, sizeof(qd), "%zu", (size_t)O.depth * O.max_batch < 256 ? 256
                                     : (size_t)O.depth * O.max_batch > 32768 ? 32768
                                     : (size_t)O.depth * O.max_batch);
    nxl_param_t prm[] = {{"engine", O.posix_engine}, {"direct", O.direct ? "1" : "0"},
                         {"queue_depth", qd}};
    if (nxl_backend_create(P.a, "POSIX", prm, 3, NULL) != NXL_SUCCESS)
        die("nxl_backend_create(POSIX): %s", nxl_agent_last_error(P.a));
    p_files();
    nxl_mem_t ft = !strcmp(O.tseg, "BLK") ? NXL_BLK : NXL_FILE;
    for (long i = 0; i < P.nf; i++) {
        nxl_desc_t d = {.addr = 0, .len = P.fsize, .dev_id = (uint64_t)P.f[i].fd};
        if (nxl_mem_register(P.a, ft, &d, 1, NULL) != NXL_SUCCESS)
            die("registering %s: %s", P.f[i].path, nxl_agent_last_error(P.a));
    }
    buf_huge = !O.plain_pages && !O.mem_nxl;
    if (!buf_alloc(P.a, &P.ring, need, O.mem_nxl))
        die("%zu bytes of DRAM: %s", need, nxl_agent_last_error(P.a));
    posix_footprint = P.fsize * (size_t)P.nf;
    posix_nfiles = P.nf;
    posix_where = !strcmp(O.tseg, "BLK") ? O.filepath : P.dir;
    posix_thp = thp_bytes(P.ring.p, P.ring.len);
    run_bw_rows(p_row);
    printf("# nxlbench bandwidth, POSIX, %s, DRAM ↔ %s (%s), %ld file(s), footprint %zu B, %s, "
           "pipeline_depth %ld, engine: %s; DRAM ring %zu B, %lld B of it on huge pages\n",
           O.op == NXL_READ ? "READ" : "WRITE", O.tseg, !strcmp(O.tseg, "BLK") ? O.filepath
           : P.dir, P.nf, P.fsize * (size_t)P.nf, O.direct ? "O_DIRECT" : "buffered", O.depth,
           transports_desc, P.ring.len, posix_thp);
    print_table(stdout);
    fflush(stdout);
    if (O.json)
        write_json(O.json);
    buf_free(P.a, &P.ring);
    nxl_agent_destroy(P.a);
    for (long i = 0; i < P.nf; i++)
        close(P.f[i].fd);
    if (O.plot) {
        if (!O.json)
            fprintf(stderr, "nxlbench: --plot after a run needs --json FILE to plot from\n");
        else
            return plot(O.plot, (char **)&O.json, 1);
    }
    return 0;
}

/* --------------------------------------------- CUDA: DRAM and VRAM, one process
 *
 * One agent with the CUDA transport, its own peer: the initiator's and the
 * target's buffers (DRAM, pinned by the transport, or VRAM) are regions of
 * the same agent. The transport's remote side is always VRAM, so a VRAM
 * initiator writing to a DRAM target runs as a READ into the DRAM from the
 * VRAM (the same copy, DtoH). Each slot's transfer is made once per row and
 * posted again; Avg Tx is the post-to-callback time. */

#ifdef NXLBENCH_CUDA
#include "transports/cuda/cudart.h"
#endif

static struct {
    nxl_agent_t *a;
    void *ibuf, *tbuf;
    bool ivram, tvram;
    size_t len;
} C;

typedef struct cslot {
    nxl_xfer_t *x;
    uint64_t t_post;
    struct crow *r;
} cslot_t;

typedef struct crow {
    long total, posted, completed, warm;
    double *prep, *post, *tx;
    long nprep;
} crow_t;

static void c_post(cslot_t *s);

static void c_done(nxl_future_t *f, nxl_status_t st, void *arg)
{
    cslot_t *s = arg;
    crow_t *r = s->r;
    uint64_t t = now_ns();
    if (st != NXL_SUCCESS) {
        fail("transfer failed: %s", nxl_future_error(f));
        return;
    }
    long k = r->completed++ - r->warm;
    if (k >= 0)
        r->tx[k] = (t - s->t_post) / 1e3;
    if (r->posted < r->total && !I.failed)
        c_post(s);
}

static void c_post(cslot_t *s)
{
    crow_t *r = s->r;
    long k = r->posted - r->warm;
    uint64_t t0 = now_ns();
    s->t_post = t0;
    nxl_status_t st = nxl_xfer_post(s->x, c_done, s, NULL);
    uint64_t t1 = now_ns();
    if (st != NXL_SUCCESS) {
        fail("nxl_xfer_post: %s", nxl_agent_last_error(C.a));
        return;
    }
    r->posted++;
    if (k >= 0)
        r->post[k] = (t1 - t0) / 1e3;
}

#ifdef NXLBENCH_CUDA
static const nxl_cuda_rt_t *crt;

/* a pattern into a buffer of either kind (through a host copy for VRAM) */
static void c_fill(void *p, bool vram, size_t len, uint64_t seed)
{
    if (!vram) {
        pat_fill(p, 0, len, seed);
        return;
    }
    unsigned char *h = malloc(len);
    if (!h)
        die("out of memory");
    pat_fill(h, 0, len, seed);
    if (crt->cudaMemcpy(p, h, len, cudaMemcpyHostToDevice) != cudaSuccess)
        die("consistency: cudaMemcpy to VRAM failed");
    free(h);
}

static long long c_check(void *p, bool vram, size_t len, uint64_t seed)
{
    if (!vram)
        return pat_check(p, 0, len, seed);
    unsigned char *h = malloc(len);
    if (!h)
        die("out of memory");
    if (crt->cudaMemcpy(h, p, len, cudaMemcpyDeviceToHost) != cudaSuccess)
        die("consistency: cudaMemcpy from VRAM failed");
    long long bad = pat_check(h, 0, len, seed);
    free(h);
    return bad;
}
#endif

static void c_row(size_t bs, size_t n)
{
    crow_t r = {0};
    long Pd = O.depth;
    size_t span = (size_t)Pd * n * bs;
    long timed = row_iters(n * bs, &r.warm);
    r.total = timed + r.warm;
    r.prep = calloc((size_t)Pd + 1, sizeof(double));
    r.post = calloc((size_t)timed, sizeof(double));
    r.tx = calloc((size_t)timed, sizeof(double));
    cslot_t *slots = calloc((size_t)Pd, sizeof(*slots));
    nxl_desc_t *ld = calloc(n, sizeof(*ld)), *rd = calloc(n, sizeof(*rd));
    /* the transport's remote side is VRAM: a DRAM target is its local side */
    bool swap = !C.tvram;
    nxl_op_t op = swap ? (O.op == NXL_WRITE ? NXL_READ : NXL_WRITE) : (nxl_op_t)O.op;
    unsigned char *lbase = swap ? C.tbuf : C.ibuf, *rbase = swap ? C.ibuf : C.tbuf;
    nxl_mem_t lt = (swap ? C.tvram : C.ivram) ? NXL_VRAM : NXL_DRAM;
    uint64_t dev = (uint64_t)O.cuda_dev;
#ifdef NXLBENCH_CUDA
    uint64_t seed = 0;
    if (O.check) {
        seed = (uint64_t)getpid() * 1000 + seed_counter++;
        bool iw = O.op == NXL_WRITE; /* the initiator's buffer is the source */
        c_fill(iw ? C.ibuf : C.tbuf, iw ? C.ivram : C.tvram, span, seed);
        c_fill(iw ? C.tbuf : C.ibuf, iw ? C.tvram : C.ivram, span, seed ^ 0x5a5a5a5a);
    }
#endif
    for (long s = 0; s < Pd && !I.failed; s++) {
        slots[s].r = &r;
        for (size_t i = 0; i < n; i++) {
            size_t off = ((size_t)s * n + i) * bs;
            ld[i] = (nxl_desc_t){.addr = (uintptr_t)lbase + off, .len = bs,
                                 .dev_id = lt == NXL_VRAM ? dev : 0};
            rd[i] = (nxl_desc_t){.addr = (uintptr_t)rbase + off, .len = bs, .dev_id = dev};
        }
        uint64_t t0 = now_ns();
        nxl_prepped_t *lp = NULL, *rp = NULL;
        nxl_status_t st = nxl_prep(C.a, NULL, lt, ld, n, &lp);
        if (st == NXL_SUCCESS)
            st = nxl_prep(C.a, nxl_agent_name(C.a), NXL_VRAM, rd, n, &rp);
        if (st == NXL_SUCCESS)
            st = nxl_xfer_make(C.a, op, lp, NULL, rp, NULL, n, NULL, &slots[s].x);
        nxl_prepped_release(lp);
        nxl_prepped_release(rp);
        if (st != NXL_SUCCESS)
            die("making the transfer: %s", nxl_agent_last_error(C.a));
        r.prep[r.nprep++] = (now_ns() - t0) / 1e3;
    }
    long first = r.warm < Pd ? r.warm : Pd;
    long saved_total = r.total;
    r.total = r.warm;
    for (long s = 0; s < first && !I.failed; s++)
        c_post(&slots[s]);
    run_until(&r.completed, r.warm);
    r.total = saved_total;
    uint64_t t0 = now_ns();
    for (long s = 0; s < Pd && r.posted < r.total && !I.failed; s++)
        c_post(&slots[s]);
    run_until(&r.completed, r.total);
    uint64_t t1 = now_ns();
    if (I.failed)
        die("block %zu batch %zu: %s", bs, n, I.err);
#ifdef NXLBENCH_CUDA
    if (O.check) {
        bool iw = O.op == NXL_WRITE;
        long long bad = c_check(iw ? C.tbuf : C.ibuf, iw ? C.tvram : C.ivram, span, seed);
        if (bad >= 0)
            die("consistency: %s byte %lld of [0, %zu) differs from its source", iw ? "target"
                : "initiator", bad, span);
    }
#endif
    row_t *o = &I.rows[I.nrows++];
    double sec = (t1 - t0) / 1e9;
    o->bs = bs;
    o->batch = n;
    o->iters = timed;
    o->bw_gbps = (double)timed * n * bs / sec / 1e9;
    o->avg_lat_us = sec * 1e6 / timed;
    stats(r.prep, r.nprep, &o->avg_prep_us, NULL, &o->p99_prep_us);
    stats(r.post, timed, &o->avg_post_us, NULL, &o->p99_post_us);
    stats(r.tx, timed, &o->avg_tx_us, NULL, &o->p99_tx_us);
    for (long s = 0; s < Pd; s++)
        nxl_xfer_release(slots[s].x);
    free(slots);
    free(ld);
    free(rd);
    free(r.prep);
    free(r.post);
    free(r.tx);
}

static void *c_alloc(bool vram, size_t len)
{
    void *p = NULL;
    if (vram || O.mem_nxl) {
        if (nxl_mem_alloc(C.a, vram ? NXL_VRAM : NXL_DRAM, len, (uint64_t)O.cuda_dev, &p) !=
            NXL_SUCCESS)
            die("%zu bytes of %s: %s", len, vram ? "VRAM" : "DRAM", nxl_agent_last_error(C.a));
        return p;
    }
    if (posix_memalign(&p, 2 * MiB, len))
        die("out of memory for %zu bytes", len);
    memset(p, 0, len);
    nxl_desc_t d = {.addr = (uintptr_t)p, .len = len};
    if (nxl_mem_register(C.a, NXL_DRAM, &d, 1, NULL) != NXL_SUCCESS)
        die("registering %zu bytes of DRAM: %s", len, nxl_agent_last_error(C.a));
    return p;
}

static int cuda_main(void)
{
    I.t_start = now_ns();
#ifdef NXLBENCH_CUDA
    char why[160];
    if (O.check && !(crt = nxl_cuda_rt_get(NULL, why, sizeof(why))))
        die("--check_consistency: %s", why);
#else
    if (O.check)
        die("--check_consistency with --backend CUDA: nxlbench was built without CUDA");
#endif
    size_t need = need_bytes();
    if (need > O.total_buf)
        die("the buffers need %zu bytes each (largest block x batch x pipeline depth) but "
            "--total_buffer_size is %zu", need, O.total_buf);
    nxl_agent_config_t c;
    nxl_agent_config_init(&c);
    c.name = "nxlb-cuda";
    c.busy_poll_us = (unsigned)O.busy_poll_us;
    c.log_level = NXL_LOG_INFO;
    c.log_cb = log_cb;
    c.log_arg = (void *)"cuda";
    if (nxl_agent_create(&c, &C.a) != NXL_SUCCESS)
        die("nxl_agent_create: %s", nxl_agent_last_error(NULL));
    I.a = C.a;
    if (nxl_backend_create(C.a, "CUDA", NULL, 0, NULL) != NXL_SUCCESS)
        die("nxl_backend_create(CUDA): %s", nxl_agent_last_error(C.a));
    C.ivram = !strcmp(O.iseg, "VRAM");
    C.tvram = !strcmp(O.tseg, "VRAM");
    C.len = need;
    C.ibuf = c_alloc(C.ivram, need);
    C.tbuf = c_alloc(C.tvram, need);
    run_bw_rows(c_row);
    printf("# nxlbench bandwidth, CUDA, %s, initiator %s, target %s (device %d), "
           "pipeline_depth %ld; %s\n", O.op == NXL_READ ? "READ" : "WRITE", O.iseg, O.tseg,
           O.cuda_dev, O.depth, transports_desc);
    print_table(stdout);
    fflush(stdout);
    if (O.json)
        write_json(O.json);
    nxl_agent_destroy(C.a); /* frees what nxl_mem_alloc gave */
    if (!C.ivram && !O.mem_nxl)
        free(C.ibuf);
    if (!C.tvram && !O.mem_nxl)
        free(C.tbuf);
    return 0;
}

/* ------------------------------------------ OBJ: DRAM ↔ an S3 server, one process */

static struct {
    nxl_agent_t *a;
    buf_t ring;
    uint64_t next_id;
    char stats[512];
} B;

static void obj_log_cb(nxl_log_level_t lvl, const char *msg, void *arg)
{
    if (strstr(msg, "statistics"))
        snprintf(B.stats, sizeof(B.stats), "%s", msg);
    log_cb(lvl, msg, arg);
}

typedef struct {
    int done;
    nxl_status_t st;
    char why[1024];
} ores_t;

static void obj_done(nxl_future_t *f, nxl_status_t st, void *arg)
{
    ores_t *r = arg;
    r->done = 1;
    r->st = st;
    snprintf(r->why, sizeof(r->why), "%s", nxl_future_error(f));
}

/* one transfer, waited for; its seconds */
static double obj_run(nxl_xfer_t *x, const char *what)
{
    ores_t r = {0};
    uint64_t t0 = now_ns();
    if (nxl_xfer_post(x, obj_done, &r, NULL) != NXL_SUCCESS)
        die("%s: nxl_xfer_post: %s", what, nxl_agent_last_error(B.a));
    while (!r.done)
        nxl_agent_run_once(B.a, 100);
    if (r.st != NXL_SUCCESS)
        die("%s: %s", what, r.why);
    return (now_ns() - t0) / 1e9;
}

static void o_key(char *key, size_t cap, size_t bs, size_t i)
{
    snprintf(key, cap, "nxlbench/%zu/%zu", bs, i);
}

static void o_row(size_t bs, size_t n)
{
    nxl_desc_t *ld = calloc(n, sizeof(*ld)), *rd = calloc(n, sizeof(*rd));
    uint64_t id0 = B.next_id;
    B.next_id += n;
    char key[96];
    for (size_t i = 0; i < n; i++) {
        o_key(key, sizeof(key), bs, i);
        nxl_desc_t d = {.addr = 0, .len = bs, .dev_id = id0 + i, .meta = key,
                        .meta_len = strlen(key)};
        if (nxl_mem_register(B.a, NXL_OBJ, &d, 1, NULL) != NXL_SUCCESS)
            die("registering object %s: %s", key, nxl_agent_last_error(B.a));
        ld[i] = (nxl_desc_t){.addr = (uintptr_t)B.ring.p + i * bs, .len = bs};
        rd[i] = (nxl_desc_t){.addr = 0, .len = bs, .dev_id = id0 + i};
    }
    nxl_dlist_t l = {NXL_DRAM, ld, n}, r = {NXL_OBJ, rd, n};
    nxl_xfer_t *w = NULL, *x = NULL;
    if (nxl_xfer_create(B.a, NXL_WRITE, &l, &r, nxl_agent_name(B.a), NULL, &w) != NXL_SUCCESS ||
        nxl_xfer_create(B.a, O.op, &l, &r, nxl_agent_name(B.a), NULL, &x) != NXL_SUCCESS)
        die("nxl_xfer_create: %s", nxl_agent_last_error(B.a));
    uint64_t seed = (uint64_t)getpid() * 1000 + seed_counter++;
    pat_fill(B.ring.p, 0, n * bs, seed);
    if (O.op == NXL_READ) {
        obj_run(w, "writing the objects first");
        memset(B.ring.p, 0, n * bs);
    }
    long timed = O.set_num_iter ? O.num_iter : 5, warm = O.set_warmup ? O.warmup_iter : 1;
    for (long i = 0; i < warm; i++)
        obj_run(x, "warm-up");
    double *t = calloc((size_t)timed, sizeof(double)), sum = 0;
    for (long i = 0; i < timed; i++)
        sum += t[i] = obj_run(x, O.op == NXL_READ ? "READ" : "WRITE");
    if (O.check) {
        unsigned char *want = malloc(n * bs);
        pat_fill(want, 0, n * bs, seed);
        if (O.op == NXL_WRITE) {
            nxl_xfer_t *rb = NULL;
            memset(B.ring.p, 0, n * bs);
            if (nxl_xfer_create(B.a, NXL_READ, &l, &r, nxl_agent_name(B.a), NULL, &rb) !=
                NXL_SUCCESS)
                die("nxl_xfer_create: %s", nxl_agent_last_error(B.a));
            obj_run(rb, "reading back");
            nxl_xfer_release(rb);
        }
        if (memcmp(B.ring.p, want, n * bs))
            die("consistency: block %zu batch %zu: the objects differ from what was written",
                bs, n);
        free(want);
    }
    row_t *o = &I.rows[I.nrows++];
    memset(o, 0, sizeof(*o));
    o->bs = bs;
    o->batch = n;
    o->iters = timed;
    o->bw_gbps = (double)timed * n * bs / sum / 1e9;
    o->avg_lat_us = sum * 1e6 / timed;
    for (long i = 0; i < timed; i++)
        t[i] *= 1e6;
    stats(t, timed, &o->avg_tx_us, NULL, &o->p99_tx_us);
    free(t);
    nxl_xfer_release(w);
    nxl_xfer_release(x);
    for (size_t i = 0; i < n; i++) {
        o_key(key, sizeof(key), bs, i);
        nxl_desc_t d = {.addr = 0, .len = bs, .dev_id = id0 + i, .meta = key,
                        .meta_len = strlen(key)};
        nxl_mem_deregister(B.a, NXL_OBJ, &d, 1);
    }
    free(ld);
    free(rd);
}

static int obj_main(void)
{
    I.t_start = now_ns();
    size_t need = need_bytes();
    if (need > O.total_buf)
        die("the DRAM buffer needs %zu bytes (largest block x batch) but --total_buffer_size "
            "is %zu", need, O.total_buf);
    nxl_agent_config_t c;
    nxl_agent_config_init(&c);
    c.name = "nxlb-obj";
    c.busy_poll_us = (unsigned)O.busy_poll_us;
    c.log_level = NXL_LOG_INFO;
    c.log_cb = obj_log_cb;
    c.log_arg = (void *)"obj";
    if (nxl_agent_create(&c, &B.a) != NXL_SUCCESS)
        die("nxl_agent_create: %s", nxl_agent_last_error(NULL));
    I.a = B.a;
    nxl_param_t p[12];
    size_t np = 0;
    char ep[512], conns[32];
    if (O.obj_endpoint) {
        bool has = strstr(O.obj_endpoint, "://") != NULL;
        snprintf(ep, sizeof(ep), "%s%s%s", has ? "" : O.obj_scheme ? O.obj_scheme : "https",
                 has ? "" : "://", O.obj_endpoint);
        p[np++] = (nxl_param_t){"endpoint", ep};
    }
    if (O.obj_bucket)
        p[np++] = (nxl_param_t){"bucket", O.obj_bucket};
    if (O.obj_region)
        p[np++] = (nxl_param_t){"region", O.obj_region};
    if (O.obj_access)
        p[np++] = (nxl_param_t){"access_key", O.obj_access};
    if (O.obj_secret)
        p[np++] = (nxl_param_t){"secret_key", O.obj_secret};
    if (O.obj_token)
        p[np++] = (nxl_param_t){"session_token", O.obj_token};
    if (O.obj_ca)
        p[np++] = (nxl_param_t){"ca_file", O.obj_ca};
    if (O.obj_part)
        p[np++] = (nxl_param_t){"part_size", O.obj_part};
    if (O.obj_virtual)
        p[np++] = (nxl_param_t){"addressing", "virtual"};
    snprintf(conns, sizeof(conns), "%ld", O.obj_conns ? O.obj_conns : 16);
    p[np++] = (nxl_param_t){"max_connections", conns};
    if (nxl_backend_create(B.a, "OBJ", p, np, NULL) != NXL_SUCCESS)
        die("nxl_backend_create(OBJ): %s", nxl_agent_last_error(B.a));
    if (!buf_alloc(B.a, &B.ring, need, O.mem_nxl))
        die("%zu bytes of DRAM: %s", need, nxl_agent_last_error(B.a));
    B.next_id = 1;
    run_bw_rows(o_row);
    nxl_backend_t *b = nxl_backend_get(B.a, "OBJ");
    const char *d = b ? nxl_backend_name(b) : "";
    printf("# nxlbench bandwidth, OBJ, %s, DRAM ↔ OBJ (%s%s%s); batch = whole objects per "
           "transfer, one transfer at a time\n",
           O.op == NXL_READ ? "READ" : "WRITE", d, transports_desc[0] ? ": " : "",
           transports_desc);
    print_table(stdout);
    fflush(stdout);
    if (O.json)
        write_json(O.json);
    buf_free(B.a, &B.ring);
    nxl_agent_destroy(B.a);
    if (B.stats[0])
        printf("# %s\n", B.stats);
    return 0;
}

int main(int argc, char **argv)
{
    parse_args(argc, argv);
    if (O.plot && nplot_inputs)
        return plot(O.plot, plot_inputs, nplot_inputs);
    if (!strcmp(O.backend, "POSIX"))
        return posix_main();
    if (!strcmp(O.backend, "CUDA"))
        return cuda_main();
    if (!strcmp(O.backend, "OBJ"))
        return obj_main();
    int roles = !!O.spawn + !!O.listen + !!O.connect;
    if (roles != 1)
        die("choose one of --spawn, --listen HOST:PORT, --connect HOST:PORT (see --help)");
    signal(SIGPIPE, SIG_IGN);
    char host[256];
    uint16_t port;
    if (O.etcd && (O.listen || O.connect)) {
        /* roles through etcd: the address given is not used */
        snprintf(host, sizeof(host), "127.0.0.1");
        port = 0;
        if (O.pin)
            pin_cpu(O.listen ? 1 : 0);
        return O.listen ? target_main(host, port, -1) : initiator_main(host, port);
    }
    if (O.listen) {
        split_hostport(O.listen, host, sizeof(host), &port);
        if (O.pin)
            pin_cpu(1);
        return target_main(host, port, -1);
    }
    if (O.connect) {
        split_hostport(O.connect, host, sizeof(host), &port);
        if (O.pin)
            pin_cpu(0);
        return initiator_main(host, port);
    }
    int p[2];
    if (pipe(p))
        die("pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        close(p[0]);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (O.pin)
            pin_cpu(1);
        fflush(stdout);
        _exit(target_main("127.0.0.1", 0, p[1]));
    }
    close(p[1]);
    if (O.pin)
        pin_cpu(0);
    if (read(p[0], &port, sizeof(port)) != sizeof(port)) {
        int st;
        waitpid(pid, &st, 0);
        die("the target did not start");
    }
    close(p[0]);
    int rc = initiator_main("127.0.0.1", port);
    int st = 0;
    for (int i = 0; i < 100; i++) {
        if (waitpid(pid, &st, WNOHANG) == pid)
            break;
        if (i == 99) {
            kill(pid, SIGTERM);
            waitpid(pid, &st, 0);
            fprintf(stderr, "nxlbench: the target did not quit; terminated it\n");
            return rc ? rc : 1;
        }
        usleep(50000);
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st)) {
        fprintf(stderr, "nxlbench: the target failed (status %d)\n", st);
        return rc ? rc : 1;
    }
    return rc;
}
