/* SPDX-License-Identifier: BSD-3-Clause */
/* nxlbench's flags: one line each in the table below, named as nixlbench's. */
#include "nxlbench.h"
#include "../../examples/cli.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *const mode_names[] = {"bandwidth", "latency", "desc_rate", "idle"};

nb_opts_t O = {
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

char **plot_inputs;
int nplot_inputs;

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
"  --backend NAME            transport: UCX, LIBFABRIC, MOONCAKE, POSIX (files, block devices),\n"
"                            CUDA (GPU), GDS (GPU memory to and from files), OBJ (S3,\n"
"                            Azure Blob)\n"
"  --backend_params K=V,...  parameters of the transport, e.g. provider=shm for LIBFABRIC,\n"
"                            tls=tcp for UCX (both sides: give them to --listen too); a\n"
"                            list value goes on after its key: rails=eth0,eth1\n"
"  --op_type READ|WRITE      direction seen from the initiator (default WRITE)\n"
"  --initiator_seg_type T    DRAM; VRAM with --backend CUDA or GDS (GDS's default)\n"
"  --target_seg_type T       DRAM; FILE or BLK with --backend POSIX; VRAM (or DRAM with\n"
"                            a VRAM initiator) with --backend CUDA; FILE with --backend GDS\n"
"                            (its default); OBJ with --backend OBJ\n"
"  --start_block_size N      first block size (default 4K; latency: 8)\n"
"  --max_block_size N        last block size, doubling (default 64M; latency: 64K; at\n"
"                            least --start_block_size)\n"
"  --block_sizes A,B,...     an explicit list instead of the doubling sweep\n"
"  --start_batch_size N      descriptors per transfer, first (default 1)\n"
"  --max_batch_size N        descriptors per transfer, last, doubling (default: the first)\n"
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
"  --strided                 desc_rate: each side one strided list (nxl_prep_strided: base,\n"
"                            block size, stride, count) instead of a descriptor per block\n"
"  --xfer_notif              bandwidth: each transfer carries a notification, as\n"
"                            nixlbench's do (default: none)\n"
"  --busy_poll_us N          agent busy polling after activity (default 0: sleep at once)\n"
"  --threads N               the initiator's agent in threaded mode; desc_rate posts from\n"
"                            N threads at once (default 0: the default mode, one thread)\n"
"  --loop libevent|fd|uv     what turns the agents: their own libevent base (default);\n"
"                            fd: NXL_LOOP_FD agents driven by an epoll_wait loop of\n"
"                            nxlbench's on nxl_agent_backend_fd(); uv: NXL_LOOP_FD agents\n"
"                            attached to a uv_loop_t (<nxl/uv.h>; when built with libuv)\n"
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
"  --cuda_peer: the target's VRAM in a second process nxlbench forks (CUDA IPC, UCX\n"
"  for the metadata), e.g. peer-process DtoD: VRAM and VRAM --cuda_peer.\n"
"GPU memory and files (--backend GDS: VRAM <-> FILE through cuFile, one process)\n"
"  The storage walk above (--filepath, --num_files, --storage_footprint,\n"
"  --storage_enable_direct: the files opened O_DIRECT, as GDS proper needs; blocks\n"
"  then multiples of 4096) with the ring in VRAM of --cuda_device N (nxl_mem_alloc;\n"
"  the CUDA and GDS transports).\n"
"  READ: file -> VRAM, WRITE: VRAM -> file. --backend_params threads=N,queue_depth=N,\n"
"  chunk=BYTES are the GDS transport's. Needs a GPU and libcufile (found at run time,\n"
"  or NXL_CUFILE_LIB); without them it stops with the reason.\n"
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
"  --backend_params K=V,...  the OBJ transport's other parameters, after the flags above\n"
"                            (which they override): timeout_s=N, retries=N; Azure Blob:\n"
"                            api=azure,connection_string=... (or AZURE_STORAGE_CONNECTION_STRING)\n"
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

/* ------------------------------------------------------------ the setters */

/* N with K, M, G (powers of 1024), an optional i and B: 4K, 4KiB, 4KB, 64 */
static const char *size_of(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || errno || *s == '-')
        return "not a size";
    unsigned long long m = 1;
    switch (toupper((unsigned char)*end)) {
    case 0: break;
    case 'K': m = KiB; end++; break;
    case 'M': m = MiB; end++; break;
    case 'G': m = GiB; end++; break;
    case 'B': break;
    default: return "not a size (suffixes: K, M, G)";
    }
    if (*end == 'i' || *end == 'I')
        end++;
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end)
        return "not a size (suffixes: K, M, G)";
    if (v > SIZE_MAX / m)
        return "too large";
    *out = (size_t)(v * m);
    return NULL;
}

static const char *set_size(const cli_opt_t *opt, const char *val)
{
    return size_of(val, opt->field);
}

/* the option's value read as cli_set_long() reads it, into v */
static const char *long_of(const cli_opt_t *opt, const char *val, long *v)
{
    cli_opt_t o = *opt;
    o.field = v;
    return cli_set_long(&o, val);
}

/* a count stored as size_t (batch sizes) */
static const char *set_count(const cli_opt_t *opt, const char *val)
{
    long v;
    const char *why = long_of(opt, val, &v);
    if (!why)
        *(size_t *)opt->field = (size_t)v;
    return why;
}

static const char *set_int(const cli_opt_t *opt, const char *val)
{
    long v;
    const char *why = long_of(opt, val, &v);
    if (!why)
        *(int *)opt->field = (int)v;
    return why;
}

/* --storage_huge_pages 0, --storage_prefill 0: the field says "not" */
static const char *set_not(const cli_opt_t *opt, const char *val)
{
    long v;
    const char *why = long_of(opt, val, &v);
    if (!why)
        *(bool *)opt->field = !v;
    return why;
}

/* one of the names, case-insensitive: the field points at the name as listed */
static const char *one_of(const char *val, const char *const *names, size_t n, const char **out)
{
    for (size_t i = 0; i < n; i++)
        if (!strcasecmp(val, names[i])) {
            *out = names[i];
            return NULL;
        }
    return "unknown";
}

static const char *set_backend(const cli_opt_t *opt, const char *val)
{
    static const char *const known[] = {"UCX", "LIBFABRIC", "POSIX", "CUDA", "GDS", "OBJ",
                                        "MOONCAKE"};
    if (one_of(val, known, 7, opt->field))
        return "not supported yet (UCX, LIBFABRIC, MOONCAKE, POSIX for files and block devices, "
               "CUDA for GPU memory, GDS for GPU memory to and from files, OBJ for S3)";
    return NULL;
}

static const char *set_seg(const cli_opt_t *opt, const char *val)
{
    /* FILE and BLK as the target with --backend POSIX, OBJ with --backend OBJ,
     * VRAM with --backend CUDA: checked after parsing */
    static const char *const known[] = {"DRAM", "VRAM", "FILE", "BLK", "OBJ"};
    if (one_of(val, known, 5, opt->field))
        return "unknown segment type (DRAM, VRAM, FILE, BLK, OBJ)";
    return NULL;
}

static const char *set_engine(const cli_opt_t *opt, const char *val)
{
    static const char *const known[] = {"auto", "uring", "threads"};
    if (!strcasecmp(val, "io_uring"))
        val = "uring";
    if (one_of(val, known, 3, opt->field))
        return "auto, uring or threads";
    return NULL;
}

static const char *set_op(const cli_opt_t *opt, const char *val)
{
    if (!strcasecmp(val, "READ"))
        *(int *)opt->field = NXL_READ;
    else if (!strcasecmp(val, "WRITE"))
        *(int *)opt->field = NXL_WRITE;
    else
        return "READ or WRITE";
    return NULL;
}

static const char *set_loop(const cli_opt_t *opt, const char *val)
{
    for (int k = 0; k < 3; k++)
        if (!strcmp(val, loop_names[k])) {
            *(int *)opt->field = k;
            return NULL;
        }
    if (!strcmp(val, "libuv")) {
        *(int *)opt->field = LOOP_UV;
        return NULL;
    }
    return "libevent, fd or uv";
}

static const char *set_mode(const cli_opt_t *opt, const char *val)
{
    int m = -1;
    for (int k = 0; k < 4; k++)
        if (!strcmp(val, mode_names[k]))
            m = k;
    if (!strcmp(val, "bw"))
        m = M_BW;
    if (!strcmp(val, "lat"))
        m = M_LAT;
    if (m < 0)
        return "bandwidth, latency, desc_rate or idle";
    *(int *)opt->field = m;
    return NULL;
}

/* --mem_source malloc|nxl, --latency_reply write|notif: the second means true */
static const char *set_pair(const cli_opt_t *opt, const char *val)
{
    const char *no = opt->field == &O.mem_nxl ? "malloc" : "write";
    const char *yes = opt->field == &O.mem_nxl ? "nxl" : "notif";
    if (!strcmp(val, no))
        *(bool *)opt->field = false;
    else if (!strcmp(val, yes))
        *(bool *)opt->field = true;
    else
        return cli_why("%s or %s", no, yes);
    return NULL;
}

static const char *set_duration(const cli_opt_t *opt, const char *val)
{
    char *end;
    double d = strtod(val, &end);
    if (end == val || *end || !(d > 0))
        return "seconds > 0";
    *(double *)opt->field = d;
    return NULL;
}

/* key=value,key=value: kept as given, split into the table */
static const char *set_bparams(const cli_opt_t *opt, const char *val)
{
    (void)opt;
    O.bparams_text = val;
    O.nbparams = 0;
    char *copy = strdup(val), *save = NULL;
    for (char *kv = strtok_r(copy, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eqs = strchr(kv, '=');
        if (!eqs && O.nbparams) { /* a list value goes on: rails=eth0,eth1 */
            kv[-1] = ',';
            continue;
        }
        if (!eqs || eqs == kv)
            return cli_why("'%s' is not key=value", kv);
        if (O.nbparams == sizeof(O.bparams) / sizeof(O.bparams[0]))
            return "at most 8 parameters";
        *eqs = 0;
        O.bparams[O.nbparams].key = kv;
        O.bparams[O.nbparams++].value = eqs + 1;
    }
    return NULL; /* copy: the table points into it */
}

static const char *set_sizes(const cli_opt_t *opt, const char *val)
{
    (void)opt;
    char *s = strdup(val), *save, *t;
    O.nsizes = 0;
    for (t = strtok_r(s, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (O.nsizes == sizeof(O.sizes) / sizeof(*O.sizes)) {
            free(s);
            return "at most 64 sizes";
        }
        const char *why = size_of(t, &O.sizes[O.nsizes++]);
        if (why) {
            why = cli_why("'%s' is %s", t, why);
            free(s);
            return why;
        }
    }
    free(s);
    return NULL;
}

/* ------------------------------------------------------------- the table */

#define SWITCH(n, f) {.name = n, .arg = CLI_OPTIONAL, .set = cli_set_bool, .field = f}
#define VALUE(n, s, f, ...) {.name = n, .arg = CLI_VALUE, .set = s, .field = f, __VA_ARGS__}

static const cli_opt_t opts[] = {
    /* roles */
    SWITCH("spawn", &O.spawn),
    VALUE("listen", cli_set_str, &O.listen),
    VALUE("connect", cli_set_str, &O.connect),
    VALUE("etcd_endpoints", cli_set_str, &O.etcd),
    SWITCH("pin", &O.pin),
    /* what to measure */
    VALUE("mode", set_mode, &O.mode),
    VALUE("backend", set_backend, &O.backend),
    VALUE("backend_params", set_bparams, NULL),
    VALUE("op_type", set_op, &O.op),
    VALUE("initiator_seg_type", set_seg, &O.iseg, .given = &O.set_iseg),
    VALUE("target_seg_type", set_seg, &O.tseg, .given = &O.set_tseg),
    VALUE("start_block_size", set_size, &O.start_bs, .given = &O.set_start_bs),
    VALUE("max_block_size", set_size, &O.max_bs, .given = &O.set_max_bs),
    VALUE("block_sizes", set_sizes, NULL),
    VALUE("start_batch_size", set_count, &O.start_batch, .min = 1, .given = &O.set_start_batch),
    VALUE("max_batch_size", set_count, &O.max_batch, .min = 1, .given = &O.set_max_batch),
    VALUE("num_iter", cli_set_long, &O.num_iter, .min = 1, .given = &O.set_num_iter),
    VALUE("warmup_iter", cli_set_long, &O.warmup_iter, .min = 0, .given = &O.set_warmup),
    VALUE("max_row_bytes", set_size, &O.row_bytes),
    VALUE("total_buffer_size", set_size, &O.total_buf),
    VALUE("pipeline_depth", cli_set_long, &O.depth, .min = 1),
    SWITCH("recreate_xfer", &O.recreate),
    SWITCH("check_consistency", &O.check),
    SWITCH("xfer_notif", &O.xfer_notif),
    SWITCH("strided", &O.strided),
    VALUE("busy_poll_us", cli_set_long, &O.busy_poll_us, .min = 0),
    VALUE("threads", cli_set_long, &O.threads, .min = 0, .max = 256),
    VALUE("loop", set_loop, &O.loop),
    VALUE("mem_source", set_pair, &O.mem_nxl),
    VALUE("latency_reply", set_pair, &O.reply_notif),
    VALUE("duration", set_duration, &O.duration),
    /* storage */
    VALUE("filepath", cli_set_str, &O.filepath),
    VALUE("num_files", cli_set_long, &O.num_files, .min = 1),
    VALUE("storage_footprint", set_size, &O.footprint),
    SWITCH("storage_enable_direct", &O.direct),
    VALUE("posix_api_type", set_engine, &O.posix_engine),
    VALUE("posix_engine", set_engine, &O.posix_engine),
    VALUE("storage_huge_pages", set_not, &O.plain_pages, .min = 0),
    VALUE("storage_prefill", set_not, &O.no_prefill, .min = 0),
    /* GPU */
    VALUE("cuda_device", set_int, &O.cuda_dev, .min = 0, .max = 1 << 20),
    SWITCH("cuda_peer", &O.cuda_peer),
    /* object store */
    VALUE("obj_endpoint_override", cli_set_str, &O.obj_endpoint),
    VALUE("obj_scheme", cli_set_str, &O.obj_scheme),
    VALUE("obj_bucket_name", cli_set_str, &O.obj_bucket),
    VALUE("obj_region", cli_set_str, &O.obj_region),
    VALUE("obj_access_key", cli_set_str, &O.obj_access),
    VALUE("obj_secret_key", cli_set_str, &O.obj_secret),
    VALUE("obj_session_token", cli_set_str, &O.obj_token),
    VALUE("obj_use_virtual_addressing", cli_set_bool, &O.obj_virtual),
    VALUE("obj_ca_bundle", cli_set_str, &O.obj_ca),
    VALUE("obj_max_connections", cli_set_long, &O.obj_conns, .min = 1),
    VALUE("obj_part_size", cli_set_str, &O.obj_part),
    /* output */
    VALUE("json", cli_set_str, &O.json),
    VALUE("plot", cli_set_str, &O.plot),
    SWITCH("quiet", &O.quiet),
    {0},
};

static const cli_t cli = {.prog = "nxlbench", .opts = opts, .usage = usage, .help_h = true};

void parse_args(int argc, char **argv)
{
    int first = cli_parse(&cli, argc, argv);
    for (int i = first; i < argc; i++) {
        /* nxlbench --plot OUT.png A.json B.json ... */
        if (!O.plot)
            die("unexpected argument '%s' (see --help)", argv[i]);
        plot_inputs = realloc(plot_inputs, sizeof(char *) * (nplot_inputs + 1));
        plot_inputs[nplot_inputs++] = argv[i];
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
    if (O.loop == LOOP_UV && !loop_uv_built())
        die("--loop uv: this nxlbench was built without libuv (configure did not find "
            "libuv >= 1.18; install libuv1-dev and configure again), use --loop fd or libevent");
    if (O.loop != LOOP_LIBEVENT && O.threads)
        die("--loop %s with --threads: a threaded agent runs on a reactor thread of its own, "
            "not on the application's loop; drop one of them", loop_names[O.loop]);
    bool posix = !strcmp(O.backend, "POSIX");
    bool cuda = !strcmp(O.backend, "CUDA");
    bool gds = !strcmp(O.backend, "GDS");
    /* GDS: VRAM and FILE unless told otherwise (then checked below) */
    if (gds && !O.set_iseg)
        O.iseg = "VRAM";
    if (gds && !O.set_tseg)
        O.tseg = "FILE";
    if (gds && (strcmp(O.iseg, "VRAM") || strcmp(O.tseg, "FILE")))
        die("--backend GDS moves VRAM to and from files: --initiator_seg_type VRAM "
            "--target_seg_type FILE (DRAM and files: --backend POSIX)");
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
    if (vram && !cuda && !gds)
        die("VRAM is not supported by --backend %s (the UCX transport here has no CUDA "
            "support): use --backend CUDA (or GDS for files)", O.backend);
    if (cuda && (storage || !vram))
        die("--backend CUDA moves to and from VRAM: --initiator_seg_type and "
            "--target_seg_type DRAM or VRAM, at least one of them VRAM");
    if (cuda && (O.spawn || O.listen || O.connect || O.etcd))
        die("--backend CUDA runs as one process (the agent is its own peer): drop --spawn, "
            "--listen, --connect and --etcd_endpoints");
    if (cuda && O.mode != M_BW)
        die("--backend CUDA: bandwidth mode only (a row of --pipeline_depth 1 gives the "
            "post-to-callback latency as Avg Tx), not %s", mode_names[O.mode]);
    if (strcmp(O.iseg, "DRAM") && !cuda && !gds)
        die("--initiator_seg_type %s: the initiator's side is DRAM", O.iseg);
    if (storage && !posix && !gds)
        die("--target_seg_type %s needs --backend POSIX (or GDS, FILE from VRAM)", O.tseg);
    /* GDS runs POSIX's walk over files: the same rules */
    bool files = posix || gds;
    if (posix && !storage)
        die("--backend POSIX moves DRAM to and from --target_seg_type FILE or BLK, not %s",
            O.tseg);
    if (files && (O.spawn || O.listen || O.connect || O.etcd))
        die("--backend %s runs as one process (the agent is its own peer): drop --spawn, "
            "--listen, --connect and --etcd_endpoints", O.backend);
    if (files && O.mode != M_BW)
        die("--backend %s: bandwidth mode only, not %s", O.backend, mode_names[O.mode]);
    if (files && O.recreate)
        die("--backend %s: every transfer is made anew from prepared lists already "
            "(the file offsets advance); --recreate_xfer does not apply", O.backend);
    if (gds && O.no_prefill)
        die("--storage_prefill 0: with --backend POSIX and BLK only");
    if (posix && !strcmp(O.tseg, "BLK") && !O.filepath)
        die("--target_seg_type BLK needs --filepath /dev/DEVICE (or a file used as one)");
    if (posix && O.no_prefill && (strcmp(O.tseg, "BLK") || O.check))
        die("--storage_prefill 0: with BLK only (new files would read as holes), and without "
            "--check_consistency (which needs the known pattern)");
    if (posix && !strcmp(O.tseg, "BLK") && O.num_files != 1)
        die("--target_seg_type BLK: one device, --num_files 1");
    /* a first size or batch given alone: the last one follows it up (as
     * desc_rate's batch does) instead of refusing a sweep that ends below
     * where it starts */
    if (O.set_start_bs && !O.set_max_bs && O.max_bs < O.start_bs)
        O.max_bs = O.start_bs;
    if (O.set_start_batch && !O.set_max_batch && O.max_batch < O.start_batch)
        O.max_batch = O.start_batch;
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
