# SPDX-License-Identifier: BSD-3-Clause
"""Two processes over every transport that runs here: WRITEs checked at the
target when the awaitable completes, READs checked here, notifications
exactly once, sync and threaded forms, a killed peer."""

import asyncio
import hashlib
import os
import signal
import threading
import time

import nxl
from conftest import next_notif, pattern, task_count


async def connect(a, peer):
    name = await a.fetch_metadata("127.0.0.1", peer.port)
    assert name == peer.name
    await a.send_metadata("127.0.0.1", peer.port)  # so that it can notify us


async def checked_write(a, it, peer, reg, off, length, roff):
    """WRITE reg[off:off+length] to the peer at roff; once the awaitable
    completed, the peer checks the bytes it holds."""
    await a.write(reg.desc(off, length), peer.desc(roff, length), peer.name)
    want = hashlib.sha256(memoryview(reg)[off:off + length]).hexdigest()
    await a.notify(peer.name, f"check:{roff}:{length}:{want}")
    n = await next_notif(it)
    assert n.peer == peer.name
    assert n.msg.decode() == f"ok:{roff}", n.msg


def test_write_read_async(transport, peer_factory):
    tname, backends, env = transport
    peer = peer_factory(backends, env)

    async def main():
        threads0, tasks0 = threading.active_count(), task_count()
        with nxl.Agent(f"init-{os.getpid()}", backends=backends) as a:
            src = bytearray(pattern(1 << 20, 3))
            reg = a.register(src)
            await connect(a, peer)
            it = a.notifications()
            for off, length, roff in [(0, 8, 0), (100, 4096, 8192), (0, 1 << 20, 0),
                                      (4096, 65536, 12345)]:
                await checked_write(a, it, peer, reg, off, length, roff)
            # several at once, one notification with the last
            src[:] = pattern(1 << 20, 9)
            cs = [a.write(reg.desc(i * 4096, 4096), peer.desc(i * 4096, 4096), peer.name)
                  for i in range(16)]
            await asyncio.gather(*cs)
            want = hashlib.sha256(src[:16 * 4096]).hexdigest()
            await a.notify(peer.name, f"check:0:{16 * 4096}:{want}")
            assert (await next_notif(it)).msg == b"ok:0"
            # a WRITE carrying its notification: it reaches the peer after the data
            src[:4096] = pattern(4096, 21)
            await a.write(reg.desc(0, 4096), peer.desc(65536, 4096), peer.name,
                          notif=f"check:65536:4096:{hashlib.sha256(src[:4096]).hexdigest()}")
            assert (await next_notif(it)).msg == b"ok:65536"
            # READ back what the peer holds
            await a.notify(peer.name, "fill:77")
            assert (await next_notif(it)).msg == b"filled"
            dst = bytearray(1 << 16)
            rd = a.register(dst)
            await a.read(rd, peer.desc(0, 1 << 16), peer.name)
            assert dst == bytes([77]) * (1 << 16)
            # a prepared transfer, re-posted
            lp = a.prep([reg.desc(i * 512, 512) for i in range(8)])
            rp = a.prep([peer.desc(i * 512, 512) for i in range(8)], peer.name)
            x = a.make_xfer(nxl.WRITE, lp, rp, lidx=[7, 6, 5, 4, 3, 2, 1, 0])
            for _ in range(5):
                await x.post()
            assert x.status == nxl.SUCCESS
            want = hashlib.sha256(b"".join(src[(7 - i) * 512:(8 - i) * 512]
                                           for i in range(8))).hexdigest()
            await a.notify(peer.name, f"check:0:4096:{want}")
            assert (await next_notif(it)).msg == b"ok:0"
            st = a.stats()
            assert st["xfers_failed"] == 0 and st["xfers_succeeded"] == 27
            await it.aclose()
            assert a.drain_notifications() == []
            # the peer forgets us when told: its notifications to us fail then
            await a.send_invalidate("127.0.0.1", peer.port)
            await a.notify(peer.name, "spam:1")
            await asyncio.sleep(0.2)
            assert a.drain_notifications() == []
            await a.notify(peer.name, "exit")
            # the binding started no thread in the asyncio mode
            assert threading.active_count() == threads0
            print(f"{tname}: tasks {tasks0} -> {task_count()}")
    asyncio.run(main())
    assert peer.proc.wait(20) == 0


def test_sync_and_exactly_once(transport, peer_factory):
    """No loop: wait() drives the agent; notifications taken by drain, each
    exactly once, in order."""
    tname, backends, env = transport
    peer = peer_factory(backends, env)
    with nxl.Agent(f"sync-{os.getpid()}", backends=backends) as a:
        assert a.fetch_metadata("127.0.0.1", peer.port).wait(20) == peer.name
        a.send_metadata("127.0.0.1", peer.port).wait(20)
        src = bytearray(pattern(4096, 5))
        reg = a.register(src)
        a.write(reg, peer.desc(0, 4096), peer.name, notif=b"check:0:4096:" +
                hashlib.sha256(src).hexdigest().encode()).wait(20)
        got = []
        end = time.monotonic() + 20
        while not got and time.monotonic() < end:
            a.run(0.1)
            got += a.drain_notifications()
        assert [n.msg for n in got] == [b"ok:0"]
        a.notify(peer.name, "spam:500").wait(20)
        got = []
        end = time.monotonic() + 30
        while len(got) < 500 and time.monotonic() < end:
            a.run(0.05)
            got += a.drain_notifications()
        for _ in range(5):  # nothing more comes
            a.run(0.05)
            got += a.drain_notifications()
        assert [n.msg for n in got] == [f"n:{i}".encode() for i in range(500)]
        assert a.stats()["notifs_received"] == 501
        a.notify(peer.name, "exit").wait(20)
    assert peer.proc.wait(20) == 0


def test_async_notifications_exactly_once(transport, peer_factory):
    tname, backends, env = transport
    peer = peer_factory(backends, env)

    async def main():
        with nxl.Agent(f"notif-{os.getpid()}", backends=backends) as a:
            await connect(a, peer)
            await a.notify(peer.name, "spam:300")
            seen = []
            it = a.notifications()
            while len(seen) < 150:
                seen.append((await next_notif(it)).msg)
            await it.aclose()  # the rest: queued for drain, or the next iterator
            await asyncio.sleep(0.3)
            it = a.notifications()
            while len(seen) < 300:
                seen.append((await next_notif(it)).msg)
            await it.aclose()
            await asyncio.sleep(0.2)
            assert a.drain_notifications() == []
            assert seen == [f"n:{i}".encode() for i in range(300)]
            await a.notify(peer.name, "exit")
    asyncio.run(main())
    assert peer.proc.wait(20) == 0


def test_threaded_mode(transport, peer_factory):
    """threads=True: nxl's reactor thread; calls from several Python threads."""
    tname, backends, env = transport
    peer = peer_factory(backends, env)
    with nxl.Agent(f"thr-{os.getpid()}", backends=backends, threads=True) as a:
        assert a.threaded
        assert a.fetch_metadata("127.0.0.1", peer.port).wait(20) == peer.name
        src = bytearray(pattern(1 << 16, 11))
        reg = a.register(src)
        errors = []

        def worker(k):
            try:
                for i in range(50):
                    off = (k * 50 + i) % 16 * 4096
                    a.write(reg.desc(off, 4096), peer.desc(off, 4096), peer.name).wait(20)
            except BaseException as e:  # reported below
                errors.append(e)
        ts = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not errors, errors

        async def aw():  # awaiting from a loop works too
            dst = bytearray(4096)
            r = a.register(dst)
            await a.read(r, peer.desc(4096, 4096), peer.name)
            return bytes(dst)
        assert asyncio.run(aw()) == src[4096:8192]
        assert a.stats()["xfers_succeeded"] == 201
        # what the threads wrote, checked at the target
        a.send_metadata("127.0.0.1", peer.port).wait(20)
        a.notify(peer.name, f"check:0:65536:{hashlib.sha256(src).hexdigest()}").wait(20)
        got, end = [], time.monotonic() + 20
        while not got and time.monotonic() < end:
            time.sleep(0.01)
            got = a.drain_notifications()
        assert [n.msg for n in got] == [b"ok:0"]
        a.notify(peer.name, "exit").wait(20)
    assert peer.proc.wait(20) == 0


def test_peer_killed(transport, peer_factory):
    """The peer dies: transfers to it end with an nxl.Error carrying a
    sentence (RemoteDisconnect where the transport can tell)."""
    tname, backends, env = transport
    peer = peer_factory(backends, env)

    async def main():
        with nxl.Agent(f"kill-{os.getpid()}", backends=backends) as a:
            events = []
            a.on_peer(events.append)
            await connect(a, peer)
            reg = a.register(bytearray(4096))
            await a.write(reg, peer.desc(0, 4096), peer.name)
            os.kill(peer.proc.pid, signal.SIGKILL)
            peer.proc.wait(10)
            err = None
            end = time.monotonic() + 30
            while err is None and time.monotonic() < end:
                try:
                    await asyncio.wait_for(a.write(reg, peer.desc(0, 4096), peer.name), 10)
                    await asyncio.sleep(0.05)
                except nxl.Error as e:
                    err = e
            assert err is not None, "transfers to a killed peer kept succeeding"
            assert isinstance(err.status, int) and err.status < 0
            assert str(err), "no sentence"
            print(f"{tname}: {type(err).__name__}: {err}")
            # the peer's events (Agent.on_peer): UP when its metadata was
            # loaded, DOWN once with nxl's sentence when it was lost
            mine = [e for e in events if e.peer == peer.name]
            assert mine and mine[0].kind == nxl.PeerKind.UP and mine[0].incarnation == 1, events
            if isinstance(err, nxl.RemoteDisconnect):
                await asyncio.sleep(0.1)
                downs = [e for e in events if e.peer == peer.name and e.kind == nxl.PeerKind.DOWN]
                assert len(downs) == 1 and downs[0].status < 0 and downs[0].why, events
            a.on_peer(None)
    asyncio.run(main())
