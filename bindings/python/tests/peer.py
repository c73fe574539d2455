# SPDX-License-Identifier: BSD-3-Clause
"""The other process of the two-process tests: an agent with a metadata
listener and one registered buffer (bytes i % 251), driven by asyncio.

usage: peer.py NAME BACKENDS_JSON NBYTES

Prints one JSON line {"port", "addr", "nbytes"} once ready, then answers
notifications:
  check:<off>:<len>:<sha256 hex>  -> "ok:<off>" when those bytes of its buffer
                                     have that digest, else "bad:<off>:<digest>"
  fill:<byte>                      -> fills the buffer, answers "filled"
  spam:<n>                         -> sends n notifications "n:<i>" back
  exit                             -> closes the agent and exits 0
"""

import asyncio
import ctypes
import hashlib
import json
import sys

import nxl


async def main(name, backends, nbytes):
    buf = bytearray(i % 251 for i in range(nbytes))
    with nxl.Agent(name, listen="127.0.0.1", backends=backends) as a:
        reg = a.register(buf)
        print(json.dumps({"port": a.port, "addr": reg.addr, "nbytes": reg.nbytes}), flush=True)
        async for n in a.notifications():
            msg = n.msg.decode()
            if msg.startswith("check:"):
                _, off, ln, want = msg.split(":")
                off, ln = int(off), int(ln)
                got = hashlib.sha256(buf[off:off + ln]).hexdigest()
                reply = f"ok:{off}" if got == want else f"bad:{off}:{got}"
            elif msg.startswith("fill:"):
                v = int(msg[5:])
                buf[:] = bytes([v]) * nbytes
                reply = "filled"
            elif msg.startswith("spam:"):
                k = int(msg[5:])
                try:
                    for i in range(k):
                        a.notify(n.peer, f"n:{i}")
                except nxl.Error as e:  # the initiator told us to forget it
                    print(f"peer: {type(e).__name__}: {e}", file=sys.stderr)
                continue
            elif msg == "exit":
                break
            else:
                reply = f"unknown:{msg}"
            await a.notify(n.peer, reply)


if __name__ == "__main__":
    ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL: never outlive the test
    asyncio.run(main(sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])))
