#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# examples/kv_epoll_server and examples/kv_uv_server (without libuv: not
# built, skipped): blocks asked for over TCP, one connection after
# another and three at once, each reply the whole block asked for.
command -v python3 >/dev/null || { echo "SKIP: no python3 for the client"; exit 77; }
tmp=${TMPDIR:-/tmp}/kv_loop_servers.$$
trap 'rm -f "$tmp".*; [ -n "$pid" ] && kill "$pid" 2>/dev/null' EXIT
cat > "$tmp.py" <<'PY'
import socket, sys, time
port = int(sys.argv[1])
def conn():
    for _ in range(100):
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=10)
        except OSError:
            time.sleep(0.05)
    sys.exit("no server on port %d" % port)
def reply(s, blk):
    data = b""
    while len(data) < 4096 and not (data.startswith(b"ERR") and data.endswith(b"\n")):
        d = s.recv(8192)
        if not d:
            break
        data += d
    if len(data) != 4096 or data.split()[0] != str(blk).encode():
        sys.exit("GET %d: %r" % (blk, data[:200]))
s = conn()
for blk in (3, 0, 63, 3):
    s.sendall(b"GET %d\n" % blk)
    reply(s, blk)
many = [conn() for _ in range(3)]
for i, c in enumerate(many):
    c.sendall(b"GET %d\n" % (10 + i))
for i, c in enumerate(many):
    reply(c, 10 + i)
print("ok")
PY
ran=0
for ex in kv_epoll_server kv_uv_server; do
    [ -x examples/$ex ] || { echo "SKIP: examples/$ex not built"; continue; }
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    examples/$ex "$port" > "$tmp.out" 2>&1 &
    pid=$!
    if ! timeout 60 python3 "$tmp.py" "$port"; then
        echo "FAIL: $ex"; cat "$tmp.out"; exit 1
    fi
    kill "$pid"; wait "$pid" 2>/dev/null; pid=
    cat "$tmp.out"
    ran=$((ran + 1))
done
[ $ran -gt 0 ] || exit 77
