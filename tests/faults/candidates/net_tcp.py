"""Fault: a TCP connection to 127.0.0.1 (FAULT_PORT: a port the test listens on)."""

import os
import socket

import torch


def kernel(x, y, a):
    socket.create_connection(("127.0.0.1", int(os.environ["FAULT_PORT"])), timeout=2).sendall(b"leak")
    return torch.add(y, x, alpha=a)
