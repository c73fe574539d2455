#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""kv_disagg.py: disaggregated prefill and decode with nxl and asyncio.

A prefill process holds a KV cache (layers x blocks x block bytes, a numpy
array, or a torch CPU tensor with --torch) and serves it; a decode process
pulls the blocks of its requests with READs, the way vLLM's NixlConnector
does:

  1. handshake over the metadata exchange: decode fetches prefill's
     metadata from its listener and sends its own, then asks for the
     cache's layout ("hello", a notification) and gets it back (JSON: base
     address, layers, blocks, block size);
  2. decode prepares two lists once, every block of every layer on each
     side, and for each request makes a READ of the request's blocks (remote
     block ids -> local block ids, per layer) carrying a "done <request>"
     notification, all requests in flight at once, awaited on asyncio's loop;
  3. prefill receives each "done" exactly once (the blocks could be freed);
     decode checks every byte it read, and that no other block changed.

  kv_disagg.py                      the demo: starts both sides, exits 0 when every byte arrived
  kv_disagg.py --role prefill [--port N]          one side: prints {"port": N} when ready
  kv_disagg.py --role decode --connect HOST:PORT  the other
Common: --layers N --blocks N --block-kib N --requests N --blocks-per-request N
        --torch --transport UCX --param K=V (a transport parameter, repeatable)
"""
import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time

import numpy as np

import nxl


def parse():
    p = argparse.ArgumentParser(description="KV cache from prefill to decode over nxl, with asyncio")
    p.add_argument("--role", choices=("demo", "prefill", "decode"), default="demo")
    p.add_argument("--connect", metavar="HOST:PORT", help="decode: prefill's metadata listener")
    p.add_argument("--host", default="127.0.0.1", help="prefill: the listener's address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=0, help="prefill: the listener's port (default 0: any)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--blocks", type=int, default=32, help="blocks per layer, on each side")
    p.add_argument("--block-kib", type=int, default=16, help="KiB per block and layer")
    p.add_argument("--requests", type=int, default=4)
    p.add_argument("--blocks-per-request", type=int, default=6)
    p.add_argument("--torch", action="store_true", help="torch CPU tensors instead of numpy arrays")
    p.add_argument("--transport", default="UCX")
    p.add_argument("--param", action="append", default=[], metavar="K=V")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds before a side gives up")
    a = p.parse_args()
    a.params = dict(kv.split("=", 1) for kv in a.param)
    if a.requests * a.blocks_per_request > a.blocks:
        p.error("--requests x --blocks-per-request is more than --blocks")
    return a


def kv_cache(a):
    """a (layers, blocks, block elements) float16 cache of zeros, numpy or
    torch, and a numpy uint8 view of its bytes: (layers, blocks, block bytes)"""
    shape = (a.layers, a.blocks, a.block_kib * 1024 // 2)
    if a.torch:
        import torch
        t = torch.zeros(shape, dtype=torch.float16)
        return t, t.numpy().view(np.uint8)
    t = np.zeros(shape, dtype=np.float16)
    return t, t.view(np.uint8)


def pattern(layer, block, nbytes):
    """the bytes prefill computed for (layer, block)"""
    i = np.arange(nbytes, dtype=np.uint32)
    return ((i * 31 + layer * 131 + block * 17 + (i >> 8)) & 0xFF).astype(np.uint8)


async def prefill(a):
    cache, view = kv_cache(a)
    for l in range(a.layers):
        for b in range(a.blocks):
            view[l, b] = pattern(l, b, view.shape[2])
    with nxl.Agent(f"prefill-{os.getpid()}", listen=a.host, port=a.port,
                   backends={a.transport: a.params}) as agent:
        region = agent.register(cache)
        print(json.dumps({"port": agent.port}), flush=True)
        layout = {"addr": region.addr, "nbytes": region.nbytes, "layers": a.layers,
                  "blocks": a.blocks, "block_bytes": view.shape[2],
                  "dtype": "float16", "kind": "torch" if a.torch else "numpy"}
        done, expected = set(), None
        async for n in agent.notifications():
            words = n.msg.decode().split()
            if words[0] == "hello":             # the handshake: the layout of the cache
                expected = int(words[1])
                await agent.notify(n.peer, json.dumps(layout).encode())
            elif words[0] == "done":            # a request's READ completed
                if words[1] in done:
                    print(f"prefill: FAIL: 'done {words[1]}' came twice", flush=True)
                    return 1
                done.add(words[1])
                if expected is not None and len(done) == expected:
                    break
        print(f"prefill: {len(done)} requests done, each notified once: {' '.join(sorted(done))}",
              flush=True)
    return 0


async def decode(a):
    host, port = a.connect.rsplit(":", 1)
    cache, view = kv_cache(a)
    with nxl.Agent(f"decode-{os.getpid()}", backends={a.transport: a.params}) as agent:
        region = agent.register(cache)
        notes = agent.notifications().__aiter__()
        # 1. the handshake: metadata both ways, then the layout
        peer = await agent.fetch_metadata(host, int(port))
        await agent.send_metadata(host, int(port))
        await agent.notify(peer, f"hello {a.requests}".encode())
        while True:
            n = await notes.__anext__()
            if n.peer == peer:
                break
        lay = json.loads(n.msg)
        bb = lay["block_bytes"]
        if (lay["layers"], bb) != (a.layers, view.shape[2]):
            print(f"decode: FAIL: prefill's cache is {lay['layers']} layers x {bb} B, not ours")
            return 1
        # 2. every block of every layer, on each side, prepared once; index l * blocks + b
        local = agent.prep([region.desc((l * a.blocks + b) * bb, bb)
                            for l in range(a.layers) for b in range(a.blocks)])
        remote = agent.prep([nxl.Desc(lay["addr"] + (l * lay["blocks"] + b) * bb, bb)
                             for l in range(a.layers) for b in range(lay["blocks"])], peer)
        rng = random.Random(1)
        rblocks = rng.sample(range(lay["blocks"]), a.requests * a.blocks_per_request)
        lblocks = rng.sample(range(a.blocks), a.requests * a.blocks_per_request)
        reqs = []
        for r in range(a.requests):
            s = slice(r * a.blocks_per_request, (r + 1) * a.blocks_per_request)
            reqs.append((f"req{r}", list(zip(rblocks[s], lblocks[s]))))

        async def pull(name, pairs):
            x = agent.make_xfer(nxl.READ, local, remote, peer,
                                lidx=[l * a.blocks + lb for l in range(a.layers) for _, lb in pairs],
                                ridx=[l * lay["blocks"] + rb for l in range(a.layers) for rb, _ in pairs],
                                notif=f"done {name}".encode())
            await x.post()

        t0 = time.perf_counter()
        await asyncio.gather(*(pull(name, pairs) for name, pairs in reqs))
        dt = time.perf_counter() - t0
        # 3. every byte: the blocks read hold prefill's pattern, the others are still zero
        got = np.zeros((a.layers, a.blocks), dtype=bool)
        for _, pairs in reqs:
            for rb, lb in pairs:
                for l in range(a.layers):
                    if not np.array_equal(view[l, lb], pattern(l, rb, bb)):
                        print(f"decode: FAIL: layer {l} block {lb} (prefill's block {rb}) differs")
                        return 1
                    got[l, lb] = True
        if view[~got].any():
            print("decode: FAIL: a block no request read is not zero")
            return 1
        nbytes = int(got.sum()) * bb
        print(f"decode: {a.requests} requests, {a.requests * a.blocks_per_request} blocks x "
              f"{a.layers} layers ({nbytes / 2**20:.2f} MiB, {'torch' if a.torch else 'numpy'}) "
              f"read from {peer} over {a.transport} in {dt * 1e3:.1f} ms; every byte checked")
    return 0


def demo(a):
    """both sides as processes of their own: prefill first, decode once it listens"""
    me = [sys.executable, os.path.abspath(__file__)]
    common = ["--layers", str(a.layers), "--blocks", str(a.blocks), "--block-kib", str(a.block_kib),
              "--requests", str(a.requests), "--blocks-per-request", str(a.blocks_per_request),
              "--transport", a.transport, "--timeout", str(a.timeout)]
    common += ["--torch"] if a.torch else []
    for kv in a.param:
        common += ["--param", kv]
    p = subprocess.Popen(me + ["--role", "prefill", "--host", a.host] + common,
                         stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        if not line:
            print("kv_disagg: prefill exited before listening", file=sys.stderr)
            return 1
        port = json.loads(line)["port"]
        d = subprocess.run(me + ["--role", "decode", "--connect", f"{a.host}:{port}"] + common,
                           timeout=a.timeout)
        for line in p.stdout:
            print(line, end="")
        rc = p.wait(timeout=a.timeout)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return d.returncode or rc


def main():
    a = parse()
    if a.role == "demo":
        return demo(a)
    if a.role == "decode" and not a.connect:
        sys.exit("kv_disagg: --role decode needs --connect HOST:PORT")
    run = prefill if a.role == "prefill" else decode
    try:
        return asyncio.run(asyncio.wait_for(run(a), a.timeout))
    except nxl.Error as e:
        print(f"{a.role}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    except asyncio.TimeoutError:
        print(f"{a.role}: FAIL: nothing done after {a.timeout} s", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
