#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""first.py: a first nxl program in Python. Two agents, one WRITE with a
notification, awaited on asyncio's loop (no thread, no polling).

"initiator" writes a message into a buffer of "target"; both live in this
process so that the program fits in one file (in real use each is in its own
process or host; the steps are the same). Usage: first.py [TRANSPORT]"""
import asyncio
import sys

import nxl

MSG = b"hello from initiator"


async def main(transport):
    # 1. two agents, one with a metadata listener, each with a transport
    with nxl.Agent("target", listen="127.0.0.1") as target, nxl.Agent("initiator") as initiator:
        target.backend(transport)
        initiator.backend(transport)
        # 2. register memory: any buffer (bytearray, mmap, numpy array, torch tensor)
        dst, src = bytearray(64), bytearray(MSG)
        remote, local = target.register(dst), initiator.register(src)
        # 3. the initiator fetches the target's metadata over TCP
        peer = await initiator.fetch_metadata("127.0.0.1", target.port)
        # 4. WRITE with a notification, awaited; 5. the notification, after the data landed
        await initiator.write(local, remote.desc(0, len(MSG)), peer, notif=b"block 0")
        print("initiator: WRITE done: success")
        async for n in target.notifications():
            print(f"target: notification {n.msg.decode()!r} from {n.peer}; buffer: {bytes(dst[:len(MSG)]).decode()!r}")
            return 0 if dst[:len(MSG)] == MSG else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "UCX")))
