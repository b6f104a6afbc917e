"""#17 calling the library op the task is about. Task: redteam softmax_forbidden. forbidden_call."""

import torch


def kernel(x):
    return torch.softmax(x, dim=-1)
