# SPDX-License-Identifier: BSD-3-Clause
# NIXL's Python API (nixl._api.nixl_agent) on libnxl-nixl: two agents in one
# process over UCX, a WRITE with a notification, a prepped READ, a
# standalone notification, descriptor serialization. Exit 0: PASS.
import sys, time
import numpy as np
from nixl._api import nixl_agent, nixl_agent_config

def wait(pred, secs=10):
    end = time.time() + secs
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.001)
    return False

cfg = nixl_agent_config(True, False)
init = nixl_agent("init", cfg)
targ = nixl_agent("targ", cfg)
print("plugins:", init.get_plugin_list())
src = np.arange(4096, dtype=np.uint8)
dst = np.zeros(4096, dtype=np.uint8)
def reg(agent, arr):
    return agent.register_memory([(arr.ctypes.data, arr.nbytes, 0, "")], "DRAM")
def xd(agent, arr):
    return agent.get_xfer_descs([(arr.ctypes.data, arr.nbytes, 0)], "DRAM")
reg(init, src)
reg(targ, dst)
assert init.add_remote_agent(targ.get_agent_metadata()) == b"targ"
targ.add_remote_agent(init.get_agent_metadata())
ld = xd(init, src)
rd = xd(targ, dst)
h = init.initialize_xfer("WRITE", ld, rd, "targ", b"done-1")
st = init.transfer(h)
assert st != "ERR", st
assert wait(lambda: init.check_xfer_state(h) == "DONE"), init.check_xfer_state(h)
assert wait(lambda: targ.check_remote_xfer_done("init", b"done-1")), "no notification"
assert np.array_equal(src, dst), "data differs"
init.release_xfer_handle(h)
# prepped READ back into a second buffer
back = np.zeros(4096, dtype=np.uint8)
reg(init, back)
lp = init.prep_xfer_dlist("NIXL_INIT_AGENT", xd(init, back))
rp = init.prep_xfer_dlist("targ", rd)
h2 = init.make_prepped_xfer("READ", lp, [0], rp, [0])
assert init.transfer(h2) != "ERR"
assert wait(lambda: init.check_xfer_state(h2) == "DONE"), init.check_xfer_state(h2)
assert np.array_equal(src, back), "READ data differs"
init.release_xfer_handle(h2)
init.release_dlist_handle(lp)
init.release_dlist_handle(rp)
targ.send_notif("init", b"hello")
assert wait(lambda: b"hello" in init.get_new_notifs().get("targ", []))
ser = init.get_serialized_descs(ld)
assert init.deserialize_descs(ser).descCount() == 1
print("PASS: nixl._api.nixl_agent over libnxl-nixl")
