"""#10 forging the result channel, crudely: find the worker's socket (``--fd N`` is on its command line)
and write a framed message of junk into it while the judge waits for the call's reply.
Task: axpby. The judge unpickles replies with no globals and checks each one: forged_result."""

import os
import struct
import sys

import torch

_FD = int(sys.argv[sys.argv.index("--fd") + 1])


def kernel(x, y, a):
    payload = b"\x80\x04not a reply"
    os.write(_FD, struct.pack("!i", len(payload)) + payload)
    return torch.add(y, x, alpha=a)
