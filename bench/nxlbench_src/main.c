/* SPDX-License-Identifier: BSD-3-Clause */
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
#include "nxlbench.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    parse_args(argc, argv);
    if (O.plot && nplot_inputs)
        return plot(O.plot, plot_inputs, nplot_inputs);
    if (!strcmp(O.backend, "POSIX"))
        return posix_main();
    if (!strcmp(O.backend, "CUDA"))
        return cuda_main();
    if (!strcmp(O.backend, "GDS"))
        return gds_main();
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
    pid_t pid = fork_piped(p);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (O.pin)
            pin_cpu(1);
        fflush(stdout);
        _exit(target_main("127.0.0.1", 0, p[1]));
    }
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
