"""Honest axpby for sleepy_axpby at the fast one's speed, written differently: a noise-level rival."""

import time

import torch


def kernel(x, y, a):
    time.sleep(0.002)
    return y + a * x
