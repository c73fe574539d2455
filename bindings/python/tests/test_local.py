# SPDX-License-Identifier: BSD-3-Clause
"""One agent, transfers to itself (UCX loopback): the API's edges, lifetimes,
errors, cancel, reference counting, threads, idle wake-ups."""

import asyncio
import contextlib
import gc
import mmap
import os
import socket
import sys
import threading
import time
import tracemalloc
import weakref

import numpy
import pytest

import nxl
from conftest import pattern, task_count, skip_unless


@pytest.fixture(autouse=True)
def _ucx(monkeypatch):
    skip_unless("UCX")
    monkeypatch.delenv("UCX_TLS", raising=False)  # loopback within the agent needs the default


@contextlib.contextmanager
def silent_listener():
    """A port that accepts connections and never answers."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    try:
        yield s.getsockname()[1]
    finally:
        s.close()


def agent(name="loc", **kw):
    return nxl.Agent(f"{name}-{os.getpid()}", backends={"UCX": {}}, **kw)


def test_module():
    assert nxl.version().count(".") == 2
    names = {p.name: p for p in nxl.plugins_available()}
    assert names["UCX"].available and nxl.DRAM in names["UCX"].mem_types
    assert nxl.error_class(-10) is nxl.RemoteDisconnect
    assert nxl.error_class(-11) is nxl.Canceled and nxl.Canceled.status == -11
    assert nxl.Canceled.name == "ERR_CANCELED"
    assert issubclass(nxl.InvalidParam, ValueError) and issubclass(nxl.InvalidParam, nxl.Error)
    assert issubclass(nxl.NotFound, LookupError)
    assert issubclass(nxl.RemoteDisconnect, ConnectionError)
    assert issubclass(nxl.Closed, nxl.NotAllowed)
    assert nxl.error_class(-13) is nxl.Timeout and issubclass(nxl.Timeout, TimeoutError)
    for st in range(-13, 0):
        assert nxl.error_class(st).status == st


def test_errors_carry_sentences():
    with agent("err") as a:
        with pytest.raises(nxl.NotFound) as e:
            a.backend("NO_SUCH_TRANSPORT")
        assert e.value.status == -4 and "NO_SUCH_TRANSPORT" in str(e.value)
        with pytest.raises(nxl.Mismatch) as e:
            a.load_metadata(b"{not metadata")
        assert str(e.value)
        with pytest.raises(nxl.NotFound):
            a.invalidate("nobody")
        assert not a.has_peer("nobody")
        with pytest.raises(nxl.InvalidParam):
            a.register(bytearray(0))
        src, dst = bytearray(64), bytearray(64)
        rs, rd = a.register(src), a.register(dst)
        with pytest.raises(nxl.NotFound) as e:
            a.write(rs, rd, "nobody")
        assert "nobody" in str(e.value)
        x = a.make_xfer(nxl.WRITE, [rs], [rd], a.name)
        c = x.post()
        with pytest.raises(nxl.RepostActive):  # completions show on a later turn
            x.post()
        assert c.wait(10) is None
        assert x.status == nxl.SUCCESS
        with pytest.raises(nxl.InvalidParam):
            a.write(rs, rd, a.name, notif=b"x" * (nxl.NOTIF_MAX + 1))


def test_buffers_of_every_kind():
    with agent("kinds") as a:
        arr = numpy.arange(1024, dtype=numpy.uint32)
        mm = mmap.mmap(-1, 4096)
        mm.write(pattern(4096, 1))
        ro = bytes(pattern(4096, 2))
        dst = numpy.zeros(4096, dtype=numpy.uint8)
        rd = a.register(dst)
        for src in (arr, mm, memoryview(bytearray(pattern(4096, 3))), ro):
            r = a.register(src)
            assert r.nbytes == 4096 and r.obj is src and r.kind == nxl.DRAM
            a.write(r, rd, a.name).wait(10)
            assert dst.tobytes() == bytes(memoryview(src).cast("B"))
            r.deregister()
            r.deregister()  # idempotent
            assert not r.registered
        with pytest.raises((ValueError, BufferError)):  # not C-contiguous
            a.register(numpy.zeros((8, 8))[:, 1])
        assert bytes(memoryview(rd)) == dst.tobytes()


def test_registration_keeps_object_and_export():
    """A registered buffer cannot be freed or resized while its Region (or a
    transfer using it) lives; deregister() in flight is defined."""
    class Buf(bytearray):
        pass
    with agent("keep") as a:
        src = Buf(pattern(1 << 20, 4))
        wsrc = weakref.ref(src)
        dst = bytearray(1 << 20)
        rs, rd = a.register(src), a.register(dst)
        del src
        gc.collect()
        assert wsrc() is not None  # the Region keeps it
        c = a.write(rs, rd, a.name)
        rs.deregister()  # while the transfer uses it: nxl keeps the registration
        with pytest.raises(BufferError):
            wsrc().extend(b"x")  # the export is held: no resize under nxl
        del rs
        gc.collect()
        assert wsrc() is not None  # the transfer (its Completion) keeps the Region
        c.wait(10)
        assert dst == wsrc()
        del c
        gc.collect()
        assert wsrc() is None  # all released


def test_use_after_close():
    a = agent("closed")
    buf = bytearray(4096)
    r = a.register(buf)
    x = a.make_xfer(nxl.WRITE, r.desc(0, 64), r.desc(64, 64), a.name)
    p = a.prep(r)
    b = a.backend("POSIX") if {q.name: q for q in nxl.plugins_available()}["POSIX"].available \
        else None
    a.close()
    a.close()  # idempotent
    assert a.closed and a.port == 0
    for call in (lambda: a.register(buf), lambda: a.write(r, r, a.name), lambda: x.post(),
                 lambda: x.status, lambda: a.stats(), lambda: a.metadata(),
                 lambda: a.notify("x", b"y"), lambda: a.prep(r), lambda: a.fileno(),
                 lambda: a.backend("UCX"), lambda: a.drain_notifications(),
                 lambda: a.run(0), lambda: a.make_xfer(nxl.WRITE, p, p)):
        with pytest.raises(nxl.Closed):
            call()
    r.deregister()  # nothing to do: the agent took it
    x.release()
    p.release()
    assert b is None or b.name == "POSIX"
    with pytest.raises(BufferError):
        buf.extend(b"x")  # the Region still holds its export
    r = x = p = None
    buf.extend(b"x")  # gone with it


def test_close_and_collect_with_transfers_in_flight():
    """close(), and the Agent collected, with operations in flight: they
    complete with nxl.Canceled; nothing keeps the agent alive."""
    a = agent("inflight")
    src, dst = bytearray(1 << 20), bytearray(1 << 20)
    rs, rd = a.register(src), a.register(dst)
    cs = [a.write(rs, rd, a.name) for _ in range(4)]
    a.close()
    for c in cs:
        assert c.done() and c.status == nxl.Canceled.status
        with pytest.raises(nxl.Canceled):
            c.result()
    a = agent("collected")
    wa = weakref.ref(a)
    rs, rd = a.register(src), a.register(dst)
    c = a.write(rs, rd, a.name)
    del a
    gc.collect()
    assert wa() is None
    assert c.done() and c.status == nxl.Canceled.status
    assert c.agent is None

    async def main():
        b = agent("collected-async")
        with silent_listener() as port:  # an operation that stays in flight
            c = b.fetch_metadata("127.0.0.1", port)
            t = asyncio.ensure_future(c)
            await asyncio.sleep(0.05)
            assert not t.done()
            b.close()
            with pytest.raises(nxl.Canceled):
                await t
    asyncio.run(main())


def test_completion_collected_in_flight():
    with agent("drop") as a:
        src = bytearray(pattern(1 << 16, 6))
        dst = bytearray(1 << 16)
        rs, rd = a.register(src), a.register(dst)
        for i in range(64):
            a.write(rs.desc(i * 1024, 1024), rd.desc(i * 1024, 1024), a.name)  # dropped
        x = a.make_xfer(nxl.WRITE, rs.desc(0, 8), rd.desc(0, 8), a.name)
        x.post()
        del x  # its Completion (held by nxl) keeps it: not canceled
        gc.collect()
        end = time.monotonic() + 10
        while a.stats()["xfers_succeeded"] < 65 and time.monotonic() < end:
            a.run(0.05)
        st = a.stats()
        assert st["xfers_succeeded"] == 65 and st["xfers_canceled"] == 0
        assert dst == src


def test_cancel():
    with agent("cancel") as a:
        src, dst = bytearray(8 << 20), bytearray(8 << 20)
        rs, rd = a.register(src), a.register(dst)
        c = a.write(rs, rd, a.name)
        # before the turn that shows its completion, a cancel wins (rule 3)
        assert c.cancel().wait(10) == nxl.Canceled.status
        with pytest.raises(nxl.Canceled):
            c.wait()

        x = a.make_xfer(nxl.WRITE, rs, rd, a.name)
        with pytest.raises(nxl.NotPosted):
            x.cancel()

        async def main():
            c = a.write(rs, rd, a.name)
            assert await c.cancel() == nxl.Canceled.status
            c = x.post()
            assert await x.cancel() == nxl.Canceled.status and c.status == nxl.Canceled.status
            assert x.status == nxl.Canceled.status
            # cancelling the awaiting task cancels the operation
            with silent_listener() as port:  # it stays in flight until then
                c = a.fetch_metadata("127.0.0.1", port)
                t = asyncio.ensure_future(c)
                await asyncio.sleep(0.05)
                t.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await t
                assert c.done()  # the task saw its cancel once nxl had settled it
                st = await c.cancel()  # settled
                assert st == nxl.Canceled.status and c.done()
            c = a.write(rs, rd, a.name)
            t = asyncio.ensure_future(c)
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
            st = await c.cancel()  # settled: buffers free
            # (the loop may have run the agent's turn before the task saw its cancel)
            assert st in (nxl.Canceled.status, nxl.SUCCESS) and c.done()
            # a completed one: cancel changes nothing
            c = a.write(rs, rd, a.name)
            await c
            assert await c.cancel() == nxl.SUCCESS
        asyncio.run(main())
        assert a.stats()["xfers_canceled"] in (3, 4)
        assert a.stats()["md_requests_failed"] == 1


def test_awaiting_task_runs_outside_callbacks():
    """A Task woken by a completion runs after nxl's turn returned (not in
    its callback): it may run(), wait() and close() the agent; two Tasks
    awaiting one completion both see it; the wake-up is not an asyncio
    Future but keeps its protocol (add_done_callback, context)."""
    import contextvars
    var = contextvars.ContextVar("var", default="unset")

    async def one(c, tag):
        var.set(tag)
        await c
        return var.get()

    async def main():
        a = agent("wake")
        src, dst = bytearray(pattern(1 << 16, 7)), bytearray(1 << 16)
        rs, rd = a.register(src), a.register(dst)
        c = a.write(rs, rd, a.name)
        assert await asyncio.gather(one(c, "first"), one(c, "second")) == ["first", "second"]
        assert dst == src and c.done()
        await a.write(rs, rd, a.name)
        a.run(0)                             # refused inside a callback
        a.write(rs, rd, a.name).wait(10)     # likewise
        c = a.write(rs, rd, a.name)
        await c
        a.close()                            # likewise
        assert c.done() and a.closed
        with pytest.raises(nxl.Closed):
            a.write(rs, rd, a.name)
    asyncio.run(main())


def test_cancel_message():
    """Task.cancel(msg) on a Task awaiting an nxl operation: the
    CancelledError it sees carries msg, as with an asyncio.Future."""
    async def main():
        with agent("cmsg") as a, silent_listener() as port:
            c = a.fetch_metadata("127.0.0.1", port)  # in flight until cancelled
            t = asyncio.ensure_future(c)
            await asyncio.sleep(0.05)
            assert t.cancel("deadline")
            with pytest.raises(asyncio.CancelledError) as e:
                await t
            assert e.value.args == ("deadline",) and c.done()
            c = a.fetch_metadata("127.0.0.1", port)
            t = asyncio.ensure_future(c)
            await asyncio.sleep(0.05)
            assert t.cancel()
            with pytest.raises(asyncio.CancelledError) as e:
                await t
            assert e.value.args == () and c.done()
    asyncio.run(main())


def test_loop_cycle_collected():
    """An agent attached to a loop that refers back to it (here its
    exception handler) is collected with the loop, the cycle once dropped."""
    def make():
        loop = asyncio.new_event_loop()
        a = agent("gcloop")
        rs, rd = a.register(bytearray(4096)), a.register(bytearray(4096))

        async def main():
            await a.write(rs, rd, a.name)
        loop.run_until_complete(main())
        loop.set_exception_handler(lambda loop, ctx, a=a: None)
        loop.close()
        return weakref.ref(a), weakref.ref(loop)
    wa, wl = make()
    gc.collect()
    assert wa() is None and wl() is None


def test_close_from_callback_refused():
    with agent("cb") as a:
        r = a.register(bytearray(128))
        seen = []

        def cb(c):
            try:
                a.close()
            except nxl.NotAllowed as e:
                seen.append(str(e))
            try:
                a.run(0)
            except nxl.NotAllowed as e:
                seen.append(str(e))
        c = a.write(r.desc(0, 64), r.desc(64, 64), a.name)
        c.add_done_callback(cb)
        c.wait(10)
        assert len(seen) == 2 and "callback" in seen[0]
        assert not a.closed


def rss_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def test_refcounts_and_rss_flat():
    """10^5 awaited transfers (half prepared and re-posted, half one-call
    WRITEs) leave RSS, live objects, traced allocations and the Regions' reference
    counts flat; no thread started in the asyncio mode."""
    N = int(os.environ.get("NXL_PY_LEAK_N", "100000"))
    a = agent("leak")
    src = bytearray(pattern(4096, 8))
    dst = bytearray(4096)
    rs, rd = a.register(src), a.register(dst)
    lp, rp = a.prep(rs.desc(0, 64)), a.prep(rd.desc(0, 64), a.name)
    x = a.make_xfer(nxl.WRITE, lp, rp)

    async def loop(n):  # n transfers: half re-posts, half one-call WRITEs
        for i in range(n // 2):
            await x.post()
        for i in range(n - n // 2):
            await a.write(rs.desc(64, 64), rd.desc(64, 64), a.name)

    async def main():
        await loop(N // 10)  # warm up: caches, free lists, the loop's structures
        gc.collect()
        threads0, tasks0 = threading.active_count(), task_count()
        refs0 = sys.getrefcount(rs), sys.getrefcount(x), sys.getrefcount(a)
        objs0, rss0 = len(gc.get_objects()), rss_kib()
        tracemalloc.start()
        t0 = time.perf_counter()
        snap0 = tracemalloc.get_traced_memory()[0]
        await loop(N)
        dt = time.perf_counter() - t0
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - snap0
        tracemalloc.stop()
        objs1, rss1 = len(gc.get_objects()), rss_kib()
        print(f"\n{N} transfers in {dt:.2f} s ({dt / N * 1e6:.1f} us each, traced): "
              f"RSS {rss0} -> {rss1} KiB, objects {objs0} -> {objs1}, traced +{grown} B")
        assert (sys.getrefcount(rs), sys.getrefcount(x), sys.getrefcount(a)) == refs0
        assert objs1 - objs0 < 50
        assert grown < 64 * 1024
        assert rss1 - rss0 < 4096
        assert threading.active_count() == threads0 and task_count() == tasks0
    asyncio.run(main())
    assert dst[:128] == src[:128]
    st = a.stats()
    assert st["xfers_succeeded"] == N + N // 10 and st["xfers_failed"] == 0
    a.close()


def test_no_thread_and_idle_wakeups():
    """Attached to asyncio, an idle agent wakes the loop at most twice a
    second, and the binding starts no thread."""
    async def main():
        a = agent("idle", listen="127.0.0.1")
        threads0, tasks0 = threading.active_count(), task_count()
        runs = [0]
        real = a.run

        def counting(timeout=None):
            runs[0] += 1
            return real(timeout)
        a.run = counting
        r = a.register(bytearray(128))
        await a.write(r.desc(0, 64), r.desc(64, 64), a.name)
        runs[0] = 0
        await asyncio.sleep(2.0)
        idle = runs[0]
        assert threading.active_count() == threads0 and task_count() == tasks0
        a.close()
        return idle
    idle = asyncio.run(main())
    print(f"\nidle agent: {idle} turns in 2 s")
    assert idle <= 4


def test_sync_wait_drives():
    with agent("sync") as a:
        src = bytearray(pattern(1 << 16, 12))
        dst = bytearray(1 << 16)
        rs, rd = a.register(src), a.register(dst)
        cs = [a.write(rs.desc(i * 4096, 4096), rd.desc(i * 4096, 4096), a.name)
              for i in range(16)]
        assert a.wait(*cs, timeout=10)
        assert all(c.status == nxl.SUCCESS for c in cs)
        assert dst == src
        md = a.metadata()
        assert isinstance(md, bytes) and a.name.encode() in md
        assert a.metadata(partial=[]) != md


def test_torch_tensors():
    torch = pytest.importorskip("torch")
    with agent("torch") as a:
        s = torch.arange(1024, dtype=torch.int32)
        d = torch.zeros(1024, dtype=torch.int32)
        rs, rd = a.register(s), a.register(d)
        assert rs.nbytes == 4096 and rs.kind == nxl.DRAM
        a.write(rs, rd, a.name).wait(10)
        assert torch.equal(s, d)


def test_cycles_collected_without_crash():
    """Regions inside reference cycles (an Xfer and its last Completion hold
    each other) are collected by the cycle collector; a registered memoryview
    is never cleared by it while exported."""
    with agent("gc") as a:
        for make in (lambda: memoryview(bytearray(4096)), lambda: bytearray(4096),
                     lambda: numpy.zeros(4096, dtype=numpy.uint8), lambda: mmap.mmap(-1, 4096)):
            for _ in range(20):
                src = make()
                r = a.register(src)
                x = a.make_xfer(nxl.WRITE, r, [r], a.name)
                x.post().wait(10)
                loop = [x, r]
                loop.append(loop)  # and a cycle of the application's own
                del r, x, src, loop
                gc.collect()
        assert gc.collect() == 0


def test_deadline_set():
    """Xfer.set_deadline: a deadline that does not expire changes nothing
    (the TIMEOUT itself: check_xfer t_deadline, with a stopped target)"""
    with agent("dl") as a:
        src, dst = bytearray(b"d" * 4096), bytearray(4096)
        ls, ld = a.register(src), a.register(dst)
        x = a.make_xfer(nxl.WRITE, [ls], [ld], a.name)
        x.set_deadline(30)
        a.wait(x.post(), timeout=10)
        assert x.status == 0 and dst == src
        x.set_deadline(None)
        with pytest.raises(nxl.InvalidParam):
            x.set_deadline(-1)
        x.release()


def test_auto_register():
    """auto_register=True: a WRITE from memory never registered registers it
    on first use (nxl's lazy registration), the next reuses the entry."""
    with agent("autoreg", auto_register=True) as a:
        n = 1 << 16
        src = numpy.frombuffer(pattern(n, 3), dtype=numpy.uint8).copy()  # not registered
        dst = bytearray(n)
        rd = a.register(dst)
        for _ in range(2):
            a.write([nxl.Desc(src.ctypes.data, n)], rd, a.name).wait(10)
            assert bytes(dst) == src.tobytes()
            dst[:] = bytes(n)
        st = a.stats()
        assert st["autoreg_registered"] == 1 and st["autoreg_reused"] >= 1, st
    with agent("noautoreg", auto_register=False) as a:
        rd = a.register(bytearray(64))
        buf = numpy.zeros(64, dtype=numpy.uint8)
        if os.environ.get("NXL_AUTO_REGISTER") != "1":
            with pytest.raises(nxl.NotFound):
                a.write([nxl.Desc(buf.ctypes.data, 64)], rd, a.name)
