"""#10 forging the result channel, properly: walk the stack up to the worker's ``serve`` loop, read the
request's nonce and the connection, send a well-formed reply of our own that reports a third of the
kernel's real time, and swallow the harness's real reply (a one-shot ``send`` on the connection
instance). Outputs are honest, so every correctness check passes; only the times are forged.
Task: axpby, timed.

The nonce authenticates nothing against code in the same process. What should catch it: an integrity
check of the channel (the connection's ``send`` replaced: a tampering flag), or an outside clock tight
enough to see that the reported times are a third of the wall time (clock_mismatch)."""

import os
import pickle
import struct
import sys
import time

import torch


def kernel(x, y, a):
    t0 = time.perf_counter_ns()
    out = torch.add(y, x, alpha=a)
    us = (time.perf_counter_ns() - t0) / 1000.0 / 3.0
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_name != "serve":
        frame = frame.f_back
    if frame is None:
        return out
    conn, nonce = frame.f_locals["conn"], frame.f_locals["nonce"]
    payload = pickle.dumps({"us": us, "deferred": False, "flags": [], "ops": None, "nonce": nonce})
    os.write(conn.fileno(), struct.pack("!i", len(payload)) + payload)

    def swallow(obj):  # the harness's own reply for this call goes nowhere, once
        del conn.send

    conn.send = swallow
    return out
