# SPDX-License-Identifier: BSD-3-Clause
"""nxl: moving KV-cache blocks and other data between memories, processes
and hosts, with transfers as awaitables on the application's own asyncio
loop (no thread, no polling), or waited for synchronously.

    import asyncio, nxl

    async def main():
        with nxl.Agent("a", backends={"UCX": {}}) as a:
            buf = bytearray(1 << 20)
            reg = a.register(buf)
            ...
            await a.write(reg, remote_desc, "b", notif=b"done")

See API.md for the whole API.
"""

import asyncio
import atexit
import enum
import os
import weakref
from typing import NamedTuple

from . import _nxl
from ._nxl import (  # noqa: F401  (re-exported)
    Backend,
    BackendError,
    Canceled,
    Closed,
    Completion,
    Error,
    InvalidParam,
    Mismatch,
    NoTelemetry,
    Timeout,
    NotAllowed,
    NotFound,
    NotPosted,
    NotSupported,
    Prepped,
    Region,
    RemoteDisconnect,
    RepostActive,
    UnknownError,
    Xfer,
    error_class,
    version,
)

__all__ = [
    "Agent", "Backend", "Region", "Prepped", "Xfer", "Completion", "Desc", "Notification",
    "PluginInfo", "MemType", "Op", "DRAM", "VRAM", "BLK", "OBJ", "FILE", "READ", "WRITE",
    "IN_PROG", "SUCCESS", "NOTIF_MAX", "version", "plugins_available", "error_class", "Error",
    "NotPosted", "InvalidParam", "BackendError", "NotFound", "Mismatch", "NotAllowed",
    "RepostActive", "UnknownError", "NotSupported", "RemoteDisconnect", "Canceled",
    "NoTelemetry", "Timeout", "Closed",
]


class MemType(enum.IntEnum):
    """Memory types (NIXL's segment types)."""
    DRAM = _nxl.DRAM
    VRAM = _nxl.VRAM
    BLK = _nxl.BLK
    OBJ = _nxl.OBJ
    FILE = _nxl.FILE


class Op(enum.IntEnum):
    """Direction of a transfer, seen from the initiator."""
    READ = _nxl.READ
    WRITE = _nxl.WRITE


DRAM, VRAM, BLK, OBJ, FILE = MemType.DRAM, MemType.VRAM, MemType.BLK, MemType.OBJ, MemType.FILE
READ, WRITE = Op.READ, Op.WRITE
IN_PROG, SUCCESS, NOTIF_MAX = _nxl.IN_PROG, _nxl.SUCCESS, _nxl.NOTIF_MAX


class Desc(NamedTuple):
    """One descriptor: an address range (DRAM, VRAM), a file or object range
    (addr is the offset, dev the fd or id); meta what registration needs."""
    addr: int
    len: int
    dev: int = 0
    meta: bytes = b""
    kind: object = None  # MemType, or None: the list's kind


class Notification(NamedTuple):
    """A notification: the sending agent's name and the message."""
    peer: str
    msg: bytes


class PeerKind(enum.IntEnum):
    """What happened to a peer (nxl_agent_on_peer(3))."""
    UP = _nxl.PEER_UP            # first loaded
    CHANGED = _nxl.PEER_CHANGED  # loaded again, same incarnation, other regions
    DOWN = _nxl.PEER_DOWN        # lost: status and why say how
    BACK = _nxl.PEER_BACK        # the same name loaded again as a new incarnation


class PeerEvent(NamedTuple):
    """One peer event (Agent.on_peer): its kind, the peer's incarnation (1
    at UP, one more at each BACK), for DOWN nxl's status and sentence, and
    the regions known of it after the event."""
    peer: str
    kind: PeerKind
    incarnation: int
    status: int
    why: str
    nregions: int


class PluginInfo(NamedTuple):
    """A transport this build knows (plugins_available())."""
    name: str
    available: bool
    reason: str
    mem_types: tuple


def plugins_available():
    """The transports this build knows, with why one is unavailable."""
    out = []
    for name, avail, reason, mask in _nxl._plugins():
        kinds = tuple(t for t in MemType if mask & (1 << t))
        out.append(PluginInfo(name, bool(avail), reason, kinds))
    return out


# ------------------------------------------------------------------ asyncio

def _await_threaded(c):
    """Completion.__await__ on a threaded agent: a future on the running
    loop, completed from the reactor thread through call_soon_threadsafe;
    cancelling the awaiting task cancels the operation. (Other agents'
    completions yield the C extension's _Waiter: src/waiter.c.)"""
    if not c.done():
        loop = _get_running_loop()
        fut = loop.create_future()

        def cb(_c, fut=fut, loop=loop):
            loop.call_soon_threadsafe(_wake, fut)
        c.add_done_callback(cb)
        try:
            yield from fut
        except asyncio.CancelledError:
            c._cancel()
            raise
    return c.result()


def _wake(fut):
    if not fut.done():
        fut.set_result(None)


class _Settled:
    """What Completion.cancel() returns: awaitable (and wait()-able) of the
    operation's final status, without raising; the buffers are safe then."""
    __slots__ = ("_c",)

    def __init__(self, c):
        self._c = c

    def __await__(self):
        try:
            yield from self._c.__await__()
        except Error:
            pass
        return self._c.status

    def wait(self, timeout=None):
        try:
            self._c.wait(timeout)
        except Error:
            pass
        return self._c.status

    def done(self):
        return self._c.done()


_get_running_loop = asyncio.get_running_loop
_nxl._set_hooks(_await_threaded, _Settled, lambda *t: Desc(*t[:4], MemType(t[4])))

_live_agents = weakref.WeakSet()


@atexit.register
def _close_all():
    # a threaded agent's reactor must not call into a finalising interpreter
    for a in list(_live_agents):
        try:
            a.close()
        except Exception:
            pass


def _as_params(params):
    return {str(k): (("1" if v else "0") if isinstance(v, bool) else str(v))
            for k, v in params.items()}


def _is_torch(obj):
    t = type(obj)
    return t.__module__.startswith("torch") and hasattr(obj, "data_ptr")


class Agent(_nxl.Agent):
    """One named endpoint: its transports, registered memory, peers.

    Agent(name, *, listen=None, port=0, threads=False, log_level=None,
          io_timeout_ms=0, busy_poll_us=0, etcd_endpoints=None,
          etcd_prefix=None, auth_secret=None, max_queued_notifs=0,
          auto_register=False, auto_register_limit=0, backends=None)

    Without threads it runs on nxl's NXL_LOOP_FD: inside a running asyncio
    loop it attaches to it (loop.add_reader on its descriptor, call_at for
    its next timer); elsewhere wait()/run() drive it. A context manager.
    """

    def __init__(self, name, *, backends=None, log_level=None, **config):
        super().__init__(name, log_level=-1 if log_level is None else int(log_level), **config)
        self._loop = None
        self._wref = weakref.ref(self)
        self._pending = []  # notifications taken from nxl but not handed out
        self._notif_owner = None
        _live_agents.add(self)
        try:
            for bname, params in (backends or {}).items():
                self.backend(bname, **(params or {}))
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                loop = None
            if loop is not None and not self.threaded:
                self._attach_loop(loop)
        except BaseException:
            self.close()
            raise

    # -- lifetime
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def close(self):
        """Destroys the agent: pending operations complete with nxl.Canceled;
        later calls raise nxl.Closed. Idempotent. Not from its callbacks."""
        if self.closed:
            return
        if self.in_callback and not self.threaded:
            super().close()  # raises NotAllowed with the sentence
        self._detach_loop()
        super().close()
        _live_agents.discard(self)

    def __repr__(self):
        return f"<nxl.Agent {self.name!r}{' closed' if self.closed else ''}>"

    # -- asyncio
    def _attach_loop(self, loop):
        if self._loop is loop:
            return
        if self._loop is not None:
            if not self._loop.is_closed() and self._loop.is_running():
                raise NotAllowed(f"agent {self.name!r} is driven by another running loop")
            self._detach_loop()
        self._attach("asyncio", loop, self._wref)  # arms the loop's call_soon/timer
        try:
            loop.add_reader(self.fileno(), _nxl._on_readable, self._wref)
        except BaseException:
            self._attach(None)
            raise
        self._loop = loop

    def _detach_loop(self):
        loop, self._loop = self._loop, None
        if loop is None or self.closed:
            return
        try:
            if not loop.is_closed():
                loop.remove_reader(self.fileno())
        except Exception:
            pass
        try:
            self._attach(None)
        except Error:
            pass

    # -- backends, registration
    def backend(self, name, **params):
        """Creates a transport ("UCX", "LIBFABRIC", "POSIX", "OBJ", ...) with
        its parameters (values str, int or bool)."""
        return self._backend(name, _as_params(params))

    def register(self, obj, *, kind=None, dev=0, backend=None):
        """Registers a buffer-protocol object (DRAM; read-only ones can be
        WRITE sources) or a torch tensor (CUDA: VRAM). The Region keeps obj
        and a buffer export of it while it lives."""
        if _is_torch(obj):
            if not obj.is_contiguous():
                raise InvalidParam("a torch tensor must be contiguous to be registered")
            if obj.is_cuda:
                kind, dev = VRAM, obj.device.index or 0
            return self._register_desc(DRAM if kind is None else kind, obj.data_ptr(),
                                       obj.numel() * obj.element_size(), dev, None, obj, backend)
        return super().register(obj, kind=kind, dev=dev, backend=backend)

    def register_file(self, file=None, *, length, offset=0, path=None, mode="rw", id=None,
                      kind=FILE, backend=None):
        """A file range: file an fd or an object with fileno(), or path= (the
        transport opens it, mode r|w|rw|create[,direct]); dev is the fd, or
        id for a path (default: a number of the path)."""
        if file is not None:
            fd = file if isinstance(file, int) else file.fileno()
            return self._register_desc(kind, offset, length, fd, None, file, backend)
        if path is None:
            raise InvalidParam("register_file(): a file (fd, file object) or path=")
        path = os.fspath(path)
        dev = id if id is not None else (hash(path) & 0x7FFFFFFF) | 0x40000000
        return self._register_desc(kind, offset, length, dev, f"path={path};mode={mode}",
                                   path, backend)

    def register_object(self, key, length, *, id=0, backend=None):
        """An object of an object store (OBJ transport) under key."""
        return self._register_desc(OBJ, 0, length, id, key, key, backend)

    def deregister(self, region):
        region.deregister()

    # -- transfers
    def make_xfer(self, op, local, remote, peer=None, *, lidx=None, ridx=None, notif=None,
                  kind=None, remote_kind=None, backend=None):
        """A re-postable transfer: from two Prepped lists and index lists, or
        from two descriptor lists and the peer's name."""
        if isinstance(local, Prepped):
            return self._make_prepped(int(op), local, lidx, remote, ridx, notif, backend)
        if peer is None:
            raise InvalidParam("make_xfer() from descriptor lists needs the peer's name")
        return self._make_create(int(op), local, remote, peer, notif=notif, kind=kind,
                                 remote_kind=remote_kind, backend=backend)

    def prep(self, descs, peer=None, *, kind=None):
        return super().prep(descs, peer, kind=-1 if kind is None else int(kind))

    # -- peers
    def on_peer(self, cb):
        """cb(PeerEvent) for each peer event, in order per peer, each once, on
        the agent's loop (its reactor thread when threaded); None: none.
        Prepared lists and transfers to a peer that comes BACK are re-bound
        by nxl when its regions are still there: re-post the same Xfer."""
        if cb is None:
            self._on_peer(None)
        else:
            self._on_peer(lambda peer, kind, inc, st, why, n:
                          cb(PeerEvent(peer, PeerKind(kind), inc, st, why, n)))

    # -- notifications
    def drain_notifications(self):
        """The notifications waiting (none are waiting while a callback or an
        iterator takes them), in arrival order."""
        out, self._pending = self._pending, []
        out.extend(Notification(p, m) for p, m in self._drain())
        return out

    async def notifications(self):
        """Async iterator of notifications: each is delivered exactly once, to
        it or (after it ended) to drain_notifications()."""
        loop = asyncio.get_running_loop()
        q = asyncio.Queue()
        if self.threaded:
            def cb(peer, msg):
                loop.call_soon_threadsafe(q.put_nowait, Notification(peer, msg))
        else:
            self._attach_loop(loop)

            def cb(peer, msg):
                q.put_nowait(Notification(peer, msg))
        if self._notif_owner is not None:
            raise NotAllowed("another notifications() iterator is running")
        self._notif_owner = cb
        for n in self.drain_notifications():
            q.put_nowait(n)
        self.on_notification(cb)
        try:
            while True:
                yield await q.get()
        finally:
            if self._notif_owner is cb:
                self._notif_owner = None
                if not self.closed:
                    self.on_notification(None)
            while not q.empty():
                self._pending.append(q.get_nowait())

    # -- driving without a loop
    def wait(self, *completions, timeout=None):
        """Drives the agent until every completion is done: True, or False when
        timeout seconds passed first. Does not raise their errors."""
        import time
        end = None if timeout is None else time.monotonic() + timeout
        for c in completions:
            left = None if end is None else max(0.0, end - time.monotonic())
            try:
                c.wait(left)
            except Error:  # the operation's own failure (nxl.Timeout too: its deadline)
                pass
            except TimeoutError:
                return False
        return True
