# SPDX-License-Identifier: BSD-3-Clause
"""Storage transports: POSIX files (by fd and by path), OBJ against s3rver
(started as the C suite starts it; skipped, with the reason, without node
or its packages)."""

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest

import nxl
from conftest import pattern, skip_unless

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))  # the source tree


def test_posix_fd_and_path(tmp_path):
    skip_unless("POSIX")
    path = tmp_path / "kv.bin"
    size = 1 << 20
    with nxl.Agent(f"px-{os.getpid()}", backends={"POSIX": {}}) as a, \
            open(path, "w+b") as f:
        f.truncate(size)
        src = bytearray(pattern(size, 13))
        dst = bytearray(size)
        rs, rd = a.register(src), a.register(dst)
        rf = a.register_file(f, length=size)
        assert rf.kind == nxl.FILE and rf.dev == f.fileno()

        async def main():
            # blocks 0..15 of 64 KiB to the file in reverse order
            bs = 65536
            await a.write([rs.desc(i * bs, bs) for i in range(16)],
                          [rf.desc((15 - i) * bs, bs) for i in range(16)], a.name)
            for i in range(16):
                assert os.pread(f.fileno(), bs, (15 - i) * bs) == src[i * bs:(i + 1) * bs]
            await a.read(rd, rf, a.name)
            for i in range(16):
                assert dst[(15 - i) * bs:(16 - i) * bs] == src[i * bs:(i + 1) * bs]
            # a cancel settles once the I/O already started has ended
            c = a.write(rs, rf, a.name)
            assert await c.cancel() in (nxl.Canceled.status, nxl.SUCCESS)
        asyncio.run(main())

        # by path: the transport opens (and creates) the file itself
        p2 = tmp_path / "made.bin"
        rp = a.register_file(path=p2, length=4096, mode="create")
        a.write(rs.desc(0, 4096), rp, a.name).wait(20)
        assert p2.read_bytes()[:4096] == src[:4096]
        # errors carry the transport's sentence
        with pytest.raises(nxl.Error) as e:
            a.register_file(path=tmp_path / "no" / "such", length=10, mode="r")
        assert str(e.value)
        assert a.stats("POSIX")["xfers_succeeded"] >= 3


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture
def s3rver():
    """s3rver through tests/s3rver-run.js, with the npm packages the C suite
    installed (<builddir>/tests/node, or $NXL_TEST_NODE_DIR)."""
    node = shutil.which("node")
    if not node:
        pytest.skip("node is needed to run s3rver (apt-get install nodejs npm)")
    cands = [os.environ.get("NXL_TEST_NODE_DIR"), os.path.join(os.getcwd(), "tests", "node"),
             os.path.join(TOP, "tests", "node")]
    mods = next((os.path.join(c, "node_modules") for c in cands if c and
                 os.path.exists(os.path.join(c, "node_modules", "s3rver", "package.json"))), None)
    if not mods:
        pytest.skip("s3rver is not installed: run the C suite's check_obj once (it installs it "
                    "into tests/node), or set NXL_TEST_NODE_DIR")
    d = tempfile.mkdtemp(prefix="nxl-py-s3-")
    port = free_port()
    env = dict(os.environ, NODE_PATH=mods)
    proc = subprocess.Popen([node, os.path.join(TOP, "tests", "s3rver-run.js"), d, str(port),
                             "nxl"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    end = time.monotonic() + 20
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            if proc.poll() is not None:
                pytest.skip(f"s3rver exited at once ({proc.returncode})")
            time.sleep(0.1)
    yield f"http://127.0.0.1:{port}"
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
    shutil.rmtree(d, ignore_errors=True)


def test_obj_against_s3rver(s3rver):
    skip_unless("OBJ")
    obj = {"endpoint": s3rver, "bucket": "nxl", "region": "us-east-1",
           "access_key": "S3RVER", "secret_key": "S3RVER"}
    with nxl.Agent(f"obj-{os.getpid()}", backends={"OBJ": obj}) as a:
        size = 256 * 1024
        src = bytearray(pattern(size, 17))
        dst = bytearray(size)
        rs, rd = a.register(src), a.register(dst)
        ro = a.register_object("py/kv-block", size, id=7)
        assert ro.kind == nxl.OBJ

        async def main():
            await a.write(rs, ro, a.name)
            await a.read(rd, ro, a.name)
            assert dst == src
        asyncio.run(main())
        # a key that is not there: the READ fails with a sentence
        rm = a.register_object("py/missing", 4096, id=8)
        with pytest.raises(nxl.Error) as e:
            a.read(rd.desc(0, 4096), rm, a.name).wait(20)
        assert str(e.value)
        print(f"\nOBJ missing key: {type(e.value).__name__}: {e.value}")


@pytest.fixture
def etcd():
    """A real etcd on free loopback ports, as tests/etcd_util.h starts it."""
    binary = shutil.which("etcd")
    if not binary:
        pytest.skip("etcd is not installed (apt-get install etcd-server)")
    d = tempfile.mkdtemp(prefix="nxl-py-etcd-")
    cport, pport = free_port(), free_port()
    curl, purl = f"http://127.0.0.1:{cport}", f"http://127.0.0.1:{pport}"
    with open(os.path.join(d, "etcd.log"), "w") as log:
        proc = subprocess.Popen([binary, "--data-dir", os.path.join(d, "data"),
                                 "--listen-client-urls", curl, "--advertise-client-urls", curl,
                                 "--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
                                 "--initial-cluster", f"default={purl}"],
                                stdout=log, stderr=subprocess.STDOUT)
    end = time.monotonic() + 15
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", cport), 0.2).close()
            break
        except OSError:
            if proc.poll() is not None:
                pytest.skip(f"etcd exited at once ({proc.returncode})")
            time.sleep(0.1)
    time.sleep(0.2)  # its HTTP gateway follows the listener
    yield curl
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
    shutil.rmtree(d, ignore_errors=True)


def test_etcd_publish_fetch(etcd):
    """Two agents of one process meet through etcd; a transfer between them."""
    skip_unless("UCX")
    pid = os.getpid()

    async def main():
        with nxl.Agent(f"et-a-{pid}", backends={"UCX": {}}, etcd_endpoints=etcd) as a, \
                nxl.Agent(f"et-b-{pid}", backends={"UCX": {}}, etcd_endpoints=etcd) as b:
            dst = bytearray(4096)
            rb = b.register(dst)
            await b.publish()
            assert await a.fetch_etcd(b.name, timeout=10) == b.name
            src = bytearray(pattern(4096, 19))
            ra = a.register(src)
            await a.write(ra, rb.desc(), b.name)
            assert dst == src
            with pytest.raises(nxl.NotFound):
                await a.fetch_etcd(f"nobody-{pid}", timeout=0.5)
            await b.unpublish()
    asyncio.run(main())
