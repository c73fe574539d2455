# SPDX-License-Identifier: BSD-3-Clause
"""bench/python-overhead's program (run it through bench/python-overhead,
which sets the paths): the cost Python adds to a transfer.

For each block size, WRITEs from an initiator to a target, two processes
pinned to a CPU each, over the same UCX (UCX_TLS=self,sm unless set), one
transfer at a time, prepared once and re-posted:
  - C: bench/nxlbench --spawn --pin --pipeline_depth 1 (--loop fd: the same
    NXL_LOOP_FD agents the bindings use; and --loop libevent, C's default),
    --num_iter calibrated so that each row lasts >= --row-seconds;
  - Python: `await xfer.post()` on asyncio's loop, and `xfer.post().wait()`
    (the synchronous form), each row >= --row-seconds;
then 1 MiB with 16 transfers in flight (C: --pipeline_depth 16; Python: 16
tasks each awaiting its own Xfer), and the idle cost: the voluntary context
switches per second (getrusage, as nxlbench --mode idle counts them) of
both sides sitting idle, connected, for --idle-seconds. Medians of --rounds
rounds, with the range."""
import argparse
import asyncio
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import threading
import time

import nxl

NXLBENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nxlbench")
PARSE_SIZE = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def size_of(s):
    return int(s[:-1]) * PARSE_SIZE[s[-1].upper()] if s[-1].upper() in PARSE_SIZE else int(s)


def pin(cpu):
    os.sched_setaffinity(0, {cpu})


def ntasks():
    return len(os.listdir("/proc/self/task"))


def nvcsw():
    return resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw


async def idle_for(seconds):
    """wake-ups/s of this process while its loop sits idle"""
    v0, t0 = nvcsw(), time.monotonic()
    await asyncio.sleep(seconds)
    return (nvcsw() - v0) / (time.monotonic() - t0)


# ---- the target: serves WRITEs into its buffer until told "quit"
async def target(a):
    pin(a.cpus[1])
    with nxl.Agent("py-target", listen="127.0.0.1", backends={"UCX": {}}) as ag:
        buf = bytearray(a.max_size * a.depth)
        reg = ag.register(buf)
        print(json.dumps({"port": ag.port, "addr": reg.addr}), flush=True)
        async for n in ag.notifications():
            words = n.msg.decode().split()
            if words[0] == "idle":
                w = await idle_for(float(words[1]))
                print(json.dumps({"idle": w, "threads": len(os.listdir("/proc/self/task"))}),
                      flush=True)
            elif words[0] == "quit":
                return 0


# ---- the initiator: one round of Python rows
async def timed(post_one, seconds, batch=64):
    """calls post_one() (a coroutine function) until seconds passed: us per call, calls"""
    n, t0 = 0, time.perf_counter()
    while True:
        for _ in range(batch):
            await post_one()
        n += batch
        el = time.perf_counter() - t0
        if el >= seconds:
            return el * 1e6 / n, n


async def initiator(a, info, out):
    pin(a.cpus[0])
    ntask = [ntasks()]                          # the process's threads: before the agent,
    py_threads = threading.active_count()
    with nxl.Agent("py-initiator") as ag:
        ntask.append(ntasks())                  # with the agent,
        ag.backend("UCX")
        ntask.append(ntasks())                  # with its UCX backend (UCX's own thread),
        src = bytearray(os.urandom(a.max_size * a.depth))
        reg = ag.register(src)
        peer = await ag.fetch_metadata("127.0.0.1", info["port"])
        await ag.send_metadata("127.0.0.1", info["port"])

        def xfer(size, k=0):
            local = ag.prep([reg.desc(k * size, size)])
            remote = ag.prep([nxl.Desc(info["addr"] + k * size, size)], peer)
            return ag.make_xfer(nxl.WRITE, local, remote, peer)

        for s in a.sizes:
            x = xfer(s)
            for _ in range(a.warmup):
                await x.post()

            async def awaited():
                await x.post()

            async def waited():
                x.post().wait()
            us, n = await timed(awaited, a.row_seconds)
            out.append({"what": "py_await", "size": s, "us": us, "n": n})
            us, n = await timed(waited, a.row_seconds)
            out.append({"what": "py_wait", "size": s, "us": us, "n": n})
        # 1 MiB, depth transfers in flight: a task per Xfer, each re-posting its own
        s = 1 << 20
        xs = [xfer(s, k) for k in range(a.depth)]
        for x in xs:
            await x.post()
        count, stop = [0], [False]

        async def lane(x):
            while not stop[0]:
                await x.post()
                count[0] += 1
        t0 = time.perf_counter()
        tasks = [asyncio.create_task(lane(x)) for x in xs]
        await asyncio.sleep(a.row_seconds)
        stop[0] = True
        await asyncio.gather(*tasks)
        el = time.perf_counter() - t0
        out.append({"what": "py_bw16", "size": s, "gbps": count[0] * s / el / 1e9})
        # idle, both sides at once
        await ag.notify(peer, f"idle {a.idle_seconds}".encode())
        w = await idle_for(a.idle_seconds)
        out.append({"what": "py_idle_initiator", "v": w})
        ntask.append(ntasks())                  # after the transfers and the idle time
        out.append({"what": "py_tasks", "v": ntask})
        out.append({"what": "py_threading", "v": [py_threads, threading.active_count()]})
        await ag.notify(peer, b"quit")


def py_round(a):
    env = dict(os.environ)
    t = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--role", "target",
                          "--cpus", ",".join(map(str, a.cpus)),
                          "--max-size", str(a.max_size), "--depth", str(a.depth)],
                         stdout=subprocess.PIPE, text=True, env=env)
    out = []
    try:
        info = json.loads(t.stdout.readline())
        asyncio.run(initiator(a, info, out))
        for line in t.stdout:
            d = json.loads(line)
            if "idle" in d:
                out.append({"what": "py_idle_target", "v": d["idle"]})
        if t.wait(timeout=60) != 0:
            raise SystemExit("python-overhead: the Python target exited %d" % t.returncode)
    finally:
        if t.poll() is None:
            t.kill()
            t.wait()
    return out


# ---- C: nxlbench
def nxlbench(a, loop, *args):
    cmd = ["taskset", "-c", ",".join(map(str, a.cpus)), NXLBENCH, "--spawn", "--pin", "--quiet",
           "--loop", loop, *args]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    if r.returncode:
        raise SystemExit("python-overhead: %s exited %d:\n%s" % (" ".join(cmd), r.returncode, r.stdout))
    return r.stdout


def c_row(a, loop, size, iters, depth=1):
    """(us per transfer, GB/s) of nxlbench's row"""
    out = nxlbench(a, loop, "--op_type", "WRITE", "--block_sizes", str(size), "--pipeline_depth",
                   str(depth), "--num_iter", str(iters), "--warmup_iter", str(a.warmup),
                   "--max_row_bytes", str(1 << 50), "--total_buffer_size", "64M")
    for line in out.splitlines():
        f = line.split()
        if len(f) > 3 and f[0] == str(size) and f[1].isdigit():
            return float(f[3]), float(f[2])
    raise SystemExit("python-overhead: no row in nxlbench's output:\n" + out)


def c_iters(a, loop, size, depth=1):
    """iterations for a row of >= row_seconds"""
    us, _ = c_row(a, loop, size, 2000 if size < (1 << 20) else 200, depth)
    return max(200, math.ceil(a.row_seconds * 1.1 * 1e6 * depth / us))


def c_round(a, iters):
    out = []
    for loop in a.loops:
        for s in a.sizes:
            us, gbps = c_row(a, loop, s, iters[loop, s, 1])
            out.append({"what": "c_" + loop, "size": s, "us": us, "gbps": gbps})
        _, gbps = c_row(a, loop, 1 << 20, iters[loop, 1 << 20, a.depth], a.depth)
        out.append({"what": "c_%s_bw16" % loop, "size": 1 << 20, "gbps": gbps})
    text = nxlbench(a, "fd", "--mode", "idle", "--duration", str(a.idle_seconds))
    for line in text.splitlines():
        f = line.split()
        if len(f) > 2 and f[0] in ("initiator", "target"):
            out.append({"what": "c_idle_" + f[0], "v": float(f[2])})
    return out


def med(vals):
    vals = sorted(vals)
    if not vals:
        return "nan"
    return "%s (%s-%s)" % tuple(fmt(v) for v in (statistics.median(vals), vals[0], vals[-1]))


def fmt(v):
    return "%.3g" % v if abs(v) < 100 else "%.0f" % v


def driver(a):
    if not os.access(NXLBENCH, os.X_OK):
        raise SystemExit("python-overhead: build first (%s missing)" % NXLBENCH)
    iters = {}
    for loop in a.loops:
        for s in a.sizes:
            iters[loop, s, 1] = c_iters(a, loop, s)
        iters[loop, 1 << 20, a.depth] = c_iters(a, loop, 1 << 20, a.depth)
    rows = []
    for r in range(a.rounds):
        print("round %d of %d" % (r + 1, a.rounds), file=sys.stderr, flush=True)
        rows += c_round(a, iters)
        rows += py_round(a)

    def get(what, size=None, key="us"):
        return [x[key] for x in rows if x["what"] == what and (size is None or x["size"] == size)]
    print("# bench/python-overhead: WRITE, one in flight, UCX_TLS=%s, CPUs %s, rows >= %g s, "
          "medians of %d rounds (min-max)" % (os.environ.get("UCX_TLS"), a.cpus, a.row_seconds,
                                              a.rounds))
    cols = ["C %s us" % l for l in a.loops] + ["Py await us", "Py wait() us", "await - C fd us"]
    print("| block | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for s in a.sizes:
        cells = [med(get("c_" + l, s)) for l in a.loops]
        pa, pw = get("py_await", s), get("py_wait", s)
        cells += [med(pa), med(pw)]
        cfd = get("c_fd", s)
        cells.append(fmt(statistics.median(pa) - statistics.median(cfd)) if pa and cfd else "nan")
        print("| %s | %s |" % (s, " | ".join(cells)))
    mib = 1 << 20
    print()
    print("| 1 MiB bandwidth, GB/s | C fd | Py await | Py / C fd |")
    print("|---|---|---|---|")
    c1 = get("c_fd", mib, "gbps")
    p1 = [mib / (u * 1e-6) / 1e9 for u in get("py_await", mib)]
    c16, p16 = get("c_fd_bw16", mib, "gbps"), get("py_bw16", mib, "gbps")
    for name, c, p in (("one in flight", c1, p1), ("%d in flight" % a.depth, c16, p16)):
        ratio = "%.2f" % (statistics.median(p) / statistics.median(c)) if c and p else "nan"
        print("| %s | %s | %s | %s |" % (name, med(c), med(p), ratio))
    print()
    print("| idle %g s, wake-ups/s | C fd | Python |" % a.idle_seconds)
    print("|---|---|---|")
    for side in ("initiator", "target"):
        print("| %s | %s | %s |" % (side, med(get("c_idle_" + side, key="v")),
                                    med(get("py_idle_" + side, key="v"))))
    print()
    print("the Python initiator's threads (/proc/self/task) before the agent, with it, with its UCX "
          "backend, after the transfers: %s; threading.active_count() before and after: %s" %
          (" ".join("/".join(map(str, v)) for v in get("py_tasks", key="v")),
           " ".join("/".join(map(str, v)) for v in get("py_threading", key="v"))))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--role", choices=("driver", "target"), default="driver")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--sizes", default="8,4K,64K,1M", help="block sizes, one transfer in flight")
    p.add_argument("--row-seconds", type=float, default=1.0)
    p.add_argument("--idle-seconds", type=float, default=3.0)
    p.add_argument("--depth", type=int, default=16, help="transfers in flight for the 1 MiB bandwidth")
    p.add_argument("--loops", default="fd,libevent", help="nxlbench --loop values for C's rows")
    p.add_argument("--cpus", default="0,1", help="initiator,target CPUs")
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--max-size", type=int, default=0)
    a = p.parse_args()
    a.sizes = [size_of(s) for s in a.sizes.split(",")]
    a.loops = a.loops.split(",")
    a.cpus = [int(c) for c in a.cpus.split(",")]
    a.max_size = a.max_size or max(a.sizes + [1 << 20])
    os.environ.setdefault("UCX_TLS", "self,sm")
    if a.role == "target":
        return asyncio.run(target(a))
    driver(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
