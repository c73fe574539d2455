/* SPDX-License-Identifier: BSD-3-Clause */
/* cma_ref: the kernel's cross-memory attach alone, the floor under nxl's
 * CMA path (lib/transports/ucx/cma.c) and what its choices could buy.
 * Two processes (a parent, the initiator, and a forked target), each with
 * a ring of RING blocks of BLOCK bytes; the initiator copies block after
 * block into the target (write) or out of it (read) with
 * process_vm_writev/readv, CHUNK bytes a call, for SECONDS, and prints
 * GB/s (10^9 B/s).
 *
 *   cma_ref write|read BLOCK RING CHUNK SECONDS [thp] [halves] [cpus I,T]
 *
 * thp: both rings 2 MiB-aligned with madvise(MADV_HUGEPAGE) (malloc'd
 * 4 KiB pages otherwise); halves: each block split in two, the initiator
 * copying the first half while the target copies the second one (pulls it
 * for a write, pushes it for a read) at the same time, a block done when
 * both are (the two processes handshake through pipes once a block). */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>

#include "ref_common.h"

/* copy len bytes between local l and remote r of pid, chunk bytes a call */
static int cma(pid_t pid, int wr, char *l, char *r, size_t len, size_t chunk)
{
    for (size_t at = 0; at < len; at += chunk) {
        size_t n = len - at < chunk ? len - at : chunk;
        struct iovec lv = {l + at, n}, rv = {r + at, n};
        ssize_t k = wr ? process_vm_writev(pid, &lv, 1, &rv, 1, 0)
                       : process_vm_readv(pid, &lv, 1, &rv, 1, 0);
        if (k != (ssize_t)n) {
            perror("process_vm");
            return -1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: cma_ref write|read BLOCK RING CHUNK SECONDS [thp] [halves] "
                        "[cpus I,T]\n");
        return 2;
    }
    int wr = !strcmp(argv[1], "write");
    size_t block = strtoull(argv[2], NULL, 0), ring = strtoull(argv[3], NULL, 0);
    size_t chunk = strtoull(argv[4], NULL, 0);
    double secs = atof(argv[5]);
    int thp = 0, halves = 0, ci = 0, ct = 1;
    for (int i = 6; i < argc; i++) {
        if (!strcmp(argv[i], "thp"))
            thp = 1;
        else if (!strcmp(argv[i], "halves"))
            halves = 1;
        else if (!strcmp(argv[i], "cpus") && i + 1 < argc)
            sscanf(argv[++i], "%d,%d", &ci, &ct);
    }
    if (!block || !ring || !chunk)
        return 2;
    size_t len = block * ring;
    /* each ring allocated and faulted in by its own process after the
     * fork: pages shared copy-on-write across a fork would be copied, and
     * huge pages split, by the first write */
    char *mine = NULL, *theirs = NULL;
    int up[2], down[2]; /* the rings' addresses: target -> initiator, initiator -> target */
    if (pipe(up) || pipe(down))
        return 1;
    int go[2], done[2];
    if (pipe(go) || pipe(done))
        return 1;
    pid_t pid = fork();
    if (pid == 0) { /* the target: its ring is theirs; the initiator's is mine */
        close(go[1]);
        close(done[0]);
        pin(ct);
        pid_t ppid = getppid();
        if (!(theirs = ring_alloc(len, thp)))
            _exit(1);
        memset(theirs, 2, len);
        if (write(up[1], &theirs, sizeof(theirs)) != sizeof(theirs) ||
            read(down[0], &mine, sizeof(mine)) != sizeof(mine))
            _exit(1);
        size_t i;
        while (read(go[0], &i, sizeof(i)) == sizeof(i)) {
            size_t h = block / 2;
            char *t = theirs + i * block + h, *m = mine + i * block + h;
            int rc = cma(ppid, !wr, t, m, block - h, chunk); /* a write: pull; a read: push */
            if (write(done[1], &rc, sizeof(rc)) != sizeof(rc))
                _exit(1);
        }
        _exit(0);
    }
    close(go[0]);
    close(done[1]);
    pin(ci);
    if (!(mine = ring_alloc(len, thp)))
        return 1;
    memset(mine, 1, len);
    if (read(up[0], &theirs, sizeof(theirs)) != sizeof(theirs) ||
        write(down[1], &mine, sizeof(mine)) != sizeof(mine))
        return 1;
    size_t n = 0;
    double t0 = 0, t = 0;
    for (int pass = 0; pass < 2; pass++) { /* a warm-up pass over the ring, then the timed part */
        n = 0;
        t0 = now_s();
        do {
            size_t i = n % ring, h = halves ? block / 2 : block;
            if (halves && write(go[1], &i, sizeof(i)) != sizeof(i))
                return 1;
            if (cma(pid, wr, mine + i * block, theirs + i * block, h, chunk))
                return 1;
            int rc = 0;
            if (halves && (read(done[0], &rc, sizeof(rc)) != sizeof(rc) || rc))
                return 1;
            n++;
            t = now_s();
        } while (pass ? t - t0 < secs || n < 8 : n < ring);
    }
    close(go[1]);
    waitpid(pid, NULL, 0);
    printf("%.3f GB/s %s %zu x %zu B, chunk %zu%s%s in %.3f s\n",
           (double)n * block / (t - t0) / 1e9, wr ? "write" : "read", n, block, chunk,
           thp ? ", thp" : "", halves ? ", halves" : "", t - t0);
    return 0;
}
