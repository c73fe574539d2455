/* SPDX-License-Identifier: BSD-3-Clause */
/* nxlbench: rows and their statistics, the table, the JSON (built with
 * cJSON), and the plot (gnuplot, from JSON files). */
#include "nxlbench.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void stats(double *v, long n, double *avg, double *p50, double *p99)
{
    if (n <= 0) {
        *avg = *p99 = 0;
        if (p50)
            *p50 = 0;
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

row_t *report_row(void)
{
    if (RUN.nrows == (int)(sizeof(RUN.rows) / sizeof(RUN.rows[0])))
        die("more than %d rows: sweep fewer sizes", RUN.nrows);
    row_t *r = &RUN.rows[RUN.nrows++];
    memset(r, 0, sizeof(*r));
    return r;
}

row_t *report_bw_row(size_t bs, size_t n, long timed, double sec, double *prep, long nprep,
                     double *post, long npost, double *tx, long ntx)
{
    row_t *o = report_row();
    o->bs = bs;
    o->batch = n;
    o->iters = timed;
    o->bw_gbps = (double)timed * n * bs / sec / 1e9;
    o->avg_lat_us = sec * 1e6 / timed;
    stats(prep, nprep, &o->avg_prep_us, NULL, &o->p99_prep_us);
    stats(post, npost, &o->avg_post_us, NULL, &o->p99_post_us);
    stats(tx, ntx, &o->avg_tx_us, NULL, &o->p99_tx_us);
    return o;
}

static void print_table(FILE *f)
{
    if (O.mode == M_IDLE) {
        fprintf(f, "%-10s %10s %14s %12s %8s %8s\n", "Role", "Time (s)", "Wake-ups/s", "CPU (s)",
                "nvcsw", "nivcsw");
        for (int i = 0; i < RUN.nrows; i++) {
            row_t *r = &RUN.rows[i];
            fprintf(f, "%-10s %10.2f %14.2f %12.6f %8.0f %8.0f\n", r->role, r->duration_s,
                    r->wakeups_per_s, r->cpu_s, r->nvcsw, r->nivcsw);
        }
        return;
    }
    if (O.mode == M_DESC) {
        /* phases: medians of one thread's cycles; with several threads only
         * the wall clock means something (their phases overlap): "-" */
        fprintf(f, "%-10s %-8s %12s %12s %12s %12s %12s %12s %12s %10s %7s %10s %12s\n",
                "Block Size", "Descs", "Prep (us)", "Local (us)", "Remote (us)", "Make (us)",
                "Post (us)", "Compl. (us)", "Prep/desc ns", "B/W (GB/s)", "Threads", "Mdesc/s",
                O.strided ? "Held (B) str" : "Held (B)");
        for (int i = 0; i < RUN.nrows; i++) {
            row_t *r = &RUN.rows[i];
            fprintf(f, "%-10zu %-8zu ", r->bs, r->batch);
            if (r->phases)
                fprintf(f, "%12.1f %12.1f %12.1f %12.1f %12.1f %12.1f %12.1f", r->prep_us,
                        r->prep_local_us, r->prep_remote_us, r->make_us, r->post_us,
                        r->complete_us, r->prep_us * 1e3 / r->batch);
            else
                fprintf(f, "%12s %12s %12s %12s %12s %12s %12s", "-", "-", "-", "-", "-", "-",
                        "-");
            fprintf(f, " %10.3f %7ld %10.3f", r->bw_gbps, r->threads, r->mdesc_per_s);
            if (r->held_bytes >= 0)
                fprintf(f, " %12.0f\n", r->held_bytes);
            else
                fprintf(f, " %12s\n", "-");
        }
        return;
    }
    fprintf(f, "%-12s %-10s %-12s %-14s %-13s %-13s %-13s %-13s %-12s %-12s", "Block Size",
            "Batch Size", "B/W (GB/s)", "Avg Lat. (us)", "Avg Prep (us)", "P99 Prep (us)",
            "Avg Post (us)", "P99 Post (us)", "Avg Tx (us)", "P99 Tx (us)");
    if (O.mode == M_LAT)
        fprintf(f, " %-10s %-10s", "P50 (us)", "P99 (us)");
    fprintf(f, "\n");
    for (int i = 0; i < RUN.nrows; i++) {
        row_t *r = &RUN.rows[i];
        fprintf(f, "%-12zu %-10zu %-12.4f %-14.3f %-13.3f %-13.3f %-13.3f %-13.3f %-12.3f %-12.3f",
                r->bs, r->batch, r->bw_gbps, r->avg_lat_us, r->avg_prep_us, r->p99_prep_us,
                r->avg_post_us, r->p99_post_us, r->avg_tx_us, r->p99_tx_us);
        if (O.mode == M_LAT)
            fprintf(f, " %-10.3f %-10.3f", r->p50_us, r->p99_us);
        fprintf(f, "\n");
    }
}

/* ---- JSON */

/* a number with the decimals it always had (no exponent, as scripts read it) */
static void fixed(cJSON *o, const char *key, int decimals, double v)
{
    char b[64];
    snprintf(b, sizeof(b), "%.*f", decimals, isfinite(v) ? v : 0);
    cJSON_AddRawToObject(o, key, b);
}

static void whole(cJSON *o, const char *key, double v)
{
    cJSON_AddNumberToObject(o, key, v);
}

/* a row's double fields, each a key of the same name with its decimals */
typedef struct col {
    const char *key;
    int decimals;
    size_t off;
} col_t;
#define COL(field, decimals) {#field, decimals, offsetof(row_t, field)}
#define NCOLS(t) (sizeof(t) / sizeof(*(t)))

static const col_t idle_cols[] = {COL(duration_s, 3), COL(wakeups_per_s, 3), COL(cpu_s, 6),
                                  COL(nvcsw, 0),      COL(nivcsw, 0)};
static const col_t xfer_cols[] = {COL(bw_gbps, 6),     COL(avg_lat_us, 3),  COL(avg_prep_us, 3),
                                  COL(p99_prep_us, 3), COL(avg_post_us, 3), COL(p99_post_us, 3),
                                  COL(avg_tx_us, 3),   COL(p99_tx_us, 3)};
static const col_t lat_cols[] = {COL(p50_us, 3), COL(p99_us, 3)};
static const col_t desc_cols[] = {COL(wall_s, 6), COL(mdesc_per_s, 6), COL(held_bytes, 0)};
static const col_t phase_cols[] = {COL(prep_us, 3),       COL(post_us, 3),
                                   COL(complete_us, 3),   COL(prep_local_us, 3),
                                   COL(prep_remote_us, 3), COL(make_us, 3)};

static void fixed_cols(cJSON *o, const row_t *r, const col_t *c, size_t n)
{
    for (size_t i = 0; i < n; i++)
        fixed(o, c[i].key, c[i].decimals, *(const double *)((const char *)r + c[i].off));
}

static cJSON *json_row(const row_t *r)
{
    cJSON *o = cJSON_CreateObject();
    if (O.mode == M_IDLE) {
        cJSON_AddStringToObject(o, "role", r->role);
        fixed_cols(o, r, idle_cols, NCOLS(idle_cols));
        return o;
    }
    whole(o, "block_size", (double)r->bs);
    whole(o, "batch_size", (double)r->batch);
    whole(o, "iters", (double)r->iters);
    fixed_cols(o, r, xfer_cols, NCOLS(xfer_cols));
    if (O.mode == M_LAT)
        fixed_cols(o, r, lat_cols, NCOLS(lat_cols));
    if (O.mode == M_DESC) {
        whole(o, "descs", (double)r->batch);
        cJSON_AddBoolToObject(o, "strided", O.strided);
        whole(o, "threads", (double)r->threads);
        fixed_cols(o, r, desc_cols, NCOLS(desc_cols));
    }
    if (O.mode == M_DESC && r->phases)
        fixed_cols(o, r, phase_cols, NCOLS(phase_cols));
    return o;
}

/* the flags as the run used them (after the mode's defaults) */
static cJSON *json_flags(void)
{
    cJSON *f = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "mode", mode_names[O.mode]);
    cJSON_AddStringToObject(f, "backend", O.backend);
    cJSON_AddStringToObject(f, "op_type", O.op == NXL_READ ? "READ" : "WRITE");
    cJSON_AddStringToObject(f, "initiator_seg_type", O.iseg);
    cJSON_AddStringToObject(f, "target_seg_type", O.tseg);
    whole(f, "start_block_size", (double)O.start_bs);
    whole(f, "max_block_size", (double)O.max_bs);
    whole(f, "start_batch_size", (double)O.start_batch);
    whole(f, "max_batch_size", (double)O.max_batch);
    whole(f, "num_iter", (double)O.num_iter);
    whole(f, "warmup_iter", (double)O.warmup_iter);
    whole(f, "max_row_bytes", (double)O.row_bytes);
    whole(f, "total_buffer_size", (double)O.total_buf);
    cJSON_AddBoolToObject(f, "check_consistency", O.check);
    cJSON_AddBoolToObject(f, "recreate_xfer", O.recreate);
    cJSON_AddBoolToObject(f, "xfer_notif", O.xfer_notif);
    whole(f, "pipeline_depth", (double)O.depth);
    whole(f, "busy_poll_us", (double)O.busy_poll_us);
    whole(f, "threads", (double)O.threads);
    cJSON_AddStringToObject(f, "loop", loop_names[O.loop]);
    cJSON_AddStringToObject(f, "mem_source", O.mem_nxl ? "nxl" : "malloc");
    cJSON_AddStringToObject(f, "latency_reply", O.reply_notif ? "notif" : "write");
    cJSON_AddBoolToObject(f, "pin", O.pin);
    fixed(f, "duration", 3, O.duration);
    cJSON_AddBoolToObject(f, "spawn", O.spawn);
    cJSON_AddBoolToObject(f, "storage_enable_direct", O.direct);
    whole(f, "storage_footprint", (double)O.footprint);
    whole(f, "num_files", (double)O.num_files);
    cJSON_AddStringToObject(f, "posix_api_type", O.posix_engine);
    cJSON_AddBoolToObject(f, "storage_prefill", !O.no_prefill);
    cJSON_AddBoolToObject(f, "storage_huge_pages", !O.plain_pages);
    return f;
}

static cJSON *json_env(void)
{
    nxl_plugin_info_t pi[8];
    size_t np = nxl_plugins_available(pi, 8);
    char ucxv[64] = "unknown";
    for (size_t i = 0; i < np && i < 8; i++)
        if (!strcmp(pi[i].name, "UCX"))
            sscanf(pi[i].reason, "UCX %63[^: ]", ucxv);
    char hostname[128] = "";
    gethostname(hostname, sizeof(hostname) - 1);
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "ucx_version", ucxv);
    cJSON_AddStringToObject(e, "nxl_version", nxl_version());
    cJSON_AddStringToObject(e, "transports", transports_desc);
    cJSON_AddStringToObject(e, "UCX_TLS", getenv("UCX_TLS") ? getenv("UCX_TLS") : "");
    cJSON_AddStringToObject(e, "FI_PROVIDER", getenv("FI_PROVIDER") ? getenv("FI_PROVIDER") : "");
    cJSON_AddStringToObject(e, "backend_params", O.bparams_text ? O.bparams_text : "");
    cJSON_AddStringToObject(e, "host", hostname);
    bool gds = !strcmp(O.backend, "GDS");
    if (!strcmp(O.backend, "POSIX") || gds) {
        if (gds) {
            cJSON_AddStringToObject(e, "gds", transports_desc);
            whole(e, "cuda_device", (double)O.cuda_dev);
        } else {
            cJSON_AddStringToObject(e, "posix_engine", transports_desc);
        }
        cJSON_AddBoolToObject(e, "direct", O.direct);
        whole(e, "footprint", (double)posix_footprint);
        whole(e, "num_files", (double)posix_nfiles);
        cJSON_AddStringToObject(e, "filepath", posix_where ? posix_where : "");
        if (!gds) {
            cJSON_AddStringToObject(e, "dram_pages", buf_huge ? "THP (madvise)" : "plain");
            whole(e, "dram_thp_bytes", (double)posix_thp);
        }
        cJSON_AddStringToObject(e, "page_cache",
                                O.direct ? "bypassed (O_DIRECT)"
                                         : "files synced and dropped (fadvise DONTNEED) before "
                                           "each row");
    }
    whole(e, "cpus", (double)sysconf(_SC_NPROCESSORS_ONLN));
    cJSON_AddItemToObject(e, "flags", json_flags());
    return e;
}

static void write_json(const char *path)
{
    cJSON *doc = cJSON_CreateObject();
    cJSON_AddStringToObject(doc, "mode", mode_names[O.mode]);
    cJSON_AddStringToObject(doc, "loop", loop_names[O.loop]);
    cJSON *rows = cJSON_AddArrayToObject(doc, "rows");
    for (int i = 0; i < RUN.nrows; i++)
        cJSON_AddItemToArray(rows, json_row(&RUN.rows[i]));
    cJSON_AddItemToObject(doc, "env", json_env());
    char *text = cJSON_Print(doc);
    cJSON_Delete(doc);
    if (!text)
        die("--json %s: out of memory", path);
    FILE *f = fopen(path, "w");
    if (!f)
        die("--json %s: %s", path, strerror(errno));
    fputs(text, f);
    fputc('\n', f);
    free(text);
    if (fclose(f))
        die("--json %s: %s", path, strerror(errno));
}

void report_note(const char *fmt, ...)
{
    size_t len = strlen(RUN.notes);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(RUN.notes + len, sizeof(RUN.notes) - len, fmt, ap);
    va_end(ap);
}

void report(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("# loop: %s\n", loop_desc());
    print_table(stdout);
    fputs(RUN.notes, stdout);
    fflush(stdout);
    if (O.json)
        write_json(O.json);
}

/* ---- plot */

static cJSON *read_json(const char *path)
{
    FILE *in = fopen(path, "r");
    if (!in)
        die("--plot: %s: %s", path, strerror(errno));
    size_t cap = 1 << 16, len = 0;
    char *s = malloc(cap);
    size_t got;
    while (s && (got = fread(s + len, 1, cap - len - 1, in)) > 0) {
        len += got;
        if (len + 1 == cap)
            s = realloc(s, cap *= 2);
    }
    fclose(in);
    if (!s)
        die("--plot: %s: out of memory", path);
    s[len] = 0;
    cJSON *doc = cJSON_Parse(s);
    free(s);
    if (!doc)
        die("--plot: %s: not JSON (near '%.20s')", path,
            cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() : "");
    return doc;
}

static double json_num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* Bandwidth vs block size, one line per JSON file (rows of the first batch
 * size). Every file is read first: a missing, malformed or empty one stops
 * the plot before gnuplot is looked for or a temporary folder made. */
int plot(const char *png, char **files, int nfiles)
{
    enum { MAXF = 16 };
    if (nfiles > MAXF) {
        fprintf(stderr, "nxlbench: --plot: at most %d JSON files, not %d\n", MAXF, nfiles);
        return 2;
    }
    char *data[MAXF] = {0}, label[MAXF][160];
    int bad = 0;
    for (int i = 0; i < nfiles; i++) {
        cJSON *doc = read_json(files[i]);
        size_t cap = 4096, len = 0;
        data[i] = malloc(cap);
        if (!data[i])
            die("--plot: out of memory");
        data[i][0] = 0;
        double batch0 = -1;
        int rows = 0;
        label[i][0] = 0;
        const cJSON *fl = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(doc, "env"), "flags");
        const char *op = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(fl, "op_type"));
        const char *ms = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(fl, "mem_source"));
        if (op && ms)
            snprintf(label[i], sizeof(label[i]), " (%s, %s)", op, ms);
        const cJSON *r;
        cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(doc, "rows"))
        {
            double bs = json_num(r, "block_size"), bt = json_num(r, "batch_size"),
                   bw = json_num(r, "bw_gbps");
            if (bs < 0 || bt < 0 || bw < 0)
                continue;
            if (batch0 < 0)
                batch0 = bt;
            if (bt != batch0)
                continue;
            if (len + 64 > cap && !(data[i] = realloc(data[i], cap *= 2)))
                die("--plot: out of memory");
            len += (size_t)snprintf(data[i] + len, cap - len, "%.0f %f\n", bs, bw);
            rows++;
        }
        cJSON_Delete(doc);
        if (!rows) {
            fprintf(stderr, "nxlbench: --plot: %s has no bandwidth rows (block_size, batch_size, "
                            "bw_gbps): nothing to plot from it\n", files[i]);
            bad = 1;
        }
    }
    int rc = 2;
    if (bad || !nfiles)
        goto out;
    rc = 3;
    if (system("command -v gnuplot >/dev/null 2>&1")) {
        fprintf(stderr, "nxlbench: gnuplot is not installed; install it with:\n"
                        "  sudo apt-get install gnuplot-nox\n");
        goto out;
    }
    const char *tmp = getenv("TMPDIR");
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/nxlbench-plot-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        fprintf(stderr, "nxlbench: --plot: mkdtemp %s: %s\n", dir, strerror(errno));
        goto out;
    }
    char script[4096 + 1024 * MAXF];
    size_t so = (size_t)snprintf(script, sizeof(script),
                                 "set terminal png size 1000,600\nset output '%s'\n"
                                 "set logscale x 2\nset format x '%%.0b%%BB'\n"
                                 "set xlabel 'block size'\nset ylabel 'bandwidth (GB/s)'\n"
                                 "set key top left\nset grid\nplot ",
                                 png);
    bool written = true;
    for (int i = 0; i < nfiles; i++) {
        char dpath[600];
        snprintf(dpath, sizeof(dpath), "%s/%d.dat", dir, i);
        FILE *out = fopen(dpath, "w");
        written = written && out && fputs(data[i], out) >= 0;
        if (out && fclose(out))
            written = false;
        const char *base = strrchr(files[i], '/') ? strrchr(files[i], '/') + 1 : files[i];
        so += (size_t)snprintf(script + so, sizeof(script) - so,
                               "%s'%s' using 1:2 with linespoints title '%s%s'", i ? ", " : "",
                               dpath, base, label[i]);
    }
    so += (size_t)snprintf(script + so, sizeof(script) - so, "\n");
    char spath[600];
    snprintf(spath, sizeof(spath), "%s/plot.gp", dir);
    FILE *sf = fopen(spath, "w");
    written = written && sf && fputs(script, sf) >= 0;
    if (sf && fclose(sf))
        written = false;
    char cmd[1400];
    int grc = -1;
    if (written) {
        snprintf(cmd, sizeof(cmd), "gnuplot '%s'", spath);
        grc = system(cmd);
    } else {
        fprintf(stderr, "nxlbench: --plot: could not write into %s: %s\n", dir, strerror(errno));
    }
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd))
        fprintf(stderr, "nxlbench: --plot: could not remove %s\n", dir);
    if (grc) {
        if (written)
            fprintf(stderr, "nxlbench: gnuplot failed\n");
        goto out;
    }
    fprintf(stderr, "nxlbench: wrote %s\n", png);
    rc = 0;
out:
    for (int i = 0; i < nfiles; i++)
        free(data[i]);
    return rc;
}

int report_plot_after_run(void)
{
    if (!O.plot)
        return 0;
    if (!O.json) {
        fprintf(stderr, "nxlbench: --plot after a run needs --json FILE to plot from\n");
        return 0;
    }
    return plot(O.plot, (char **)&O.json, 1);
}
