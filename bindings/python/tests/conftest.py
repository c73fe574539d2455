# SPDX-License-Identifier: BSD-3-Clause
"""Shared pieces of the Python suite: the transports, the peer process."""

import asyncio
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)  # bindings/python
if PKG not in sys.path:
    sys.path.insert(0, PKG)

import nxl  # noqa: E402

# name -> (backends, environment)
TRANSPORTS = {
    "ucx_shm": ({"UCX": {}}, {"UCX_TLS": "sm,self"}),  # "shm" alone: no wire-up here
    "ucx_tcp": ({"UCX": {}}, {"UCX_TLS": "tcp,self"}),
    "libfabric": ({"LIBFABRIC": {"provider": "tcp;ofi_rxm"}}, {}),
}


def available(tname):
    return {p.name: p for p in nxl.plugins_available()}.get(tname)


def skip_unless(tname):
    p = available(tname)
    if p is None or not p.available:
        pytest.skip(f"{tname} not available in this build: {p.reason if p else 'unknown'}")


class Peer:
    """The peer process (peer.py) and what it printed."""

    def __init__(self, name, backends, env, nbytes):
        e = dict(os.environ)
        e.update(env)
        e["PYTHONPATH"] = PKG + os.pathsep + e.get("PYTHONPATH", "")
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "peer.py"), name, json.dumps(backends),
             str(nbytes)], stdout=subprocess.PIPE, env=e, text=True)
        info = None
        while info is None:  # libraries may print first
            line = self.proc.stdout.readline()
            if not line:
                self.proc.wait(10)
                raise RuntimeError(f"peer {name} did not start (exit {self.proc.returncode})")
            if line.startswith("{"):
                info = json.loads(line)
        self.name = name
        self.port = info["port"]
        self.addr = info["addr"]
        self.nbytes = info["nbytes"]

    def desc(self, off=0, length=None):
        return nxl.Desc(self.addr + off, self.nbytes - off if length is None else length)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self.proc.stdout.close()


@pytest.fixture(params=list(TRANSPORTS))
def transport(request, monkeypatch):
    backends, env = TRANSPORTS[request.param]
    skip_unless(next(iter(backends)))
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return request.param, backends, env


_count = [0]


def peer_name(prefix="peer"):
    _count[0] += 1
    return f"{prefix}-{os.getpid()}-{_count[0]}"


@pytest.fixture
def peer_factory():
    peers = []

    def make(backends, env, nbytes=1 << 20):
        p = Peer(peer_name(), backends, env, nbytes)
        peers.append(p)
        return p
    yield make
    for p in peers:
        p.stop()


async def next_notif(it, timeout=20):
    return await asyncio.wait_for(it.__anext__(), timeout)


def pattern(n, seed=0):
    return bytes((i * 7 + seed) % 256 for i in range(n))


def task_count():
    return len(os.listdir("/proc/self/task"))
