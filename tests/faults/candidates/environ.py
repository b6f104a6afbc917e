"""Survivable: the kernel rewrites its environment (paths, the device list, the ledger's variable)."""

import os

import torch


def kernel(x, y, a):
    os.environ.update(PATH="/nonexistent", CUDA_VISIBLE_DEVICES="", RATCHET_LEDGER="/tmp/elsewhere.sqlite",
                      PYTHONPATH="/nonexistent")
    return torch.add(y, x, alpha=a)
