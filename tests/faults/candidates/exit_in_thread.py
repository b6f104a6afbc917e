"""Survivable: sys.exit in a thread (it ends that thread only), then the honest answer."""

import sys
import threading

import torch


def kernel(x, y, a):
    t = threading.Thread(target=sys.exit, args=(3,))
    t.start()
    t.join()
    return torch.add(y, x, alpha=a)
