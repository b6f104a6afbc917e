"""Fault: a UDP datagram to 127.0.0.1 (FAULT_PORT: a port the test listens on)."""

import os
import socket

import torch


def kernel(x, y, a):
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"leak", ("127.0.0.1", int(os.environ["FAULT_PORT"])))
    return torch.add(y, x, alpha=a)
