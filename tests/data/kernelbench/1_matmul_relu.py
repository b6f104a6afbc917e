"""Matmul plus bias followed by ReLU: a tiny KernelBench-style problem for tests."""

import torch
import torch.nn as nn

batch_size = 8
in_features = 32
out_features = 16


class Model(nn.Module):
    """relu(x @ W.T + b) through nn.Linear."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
