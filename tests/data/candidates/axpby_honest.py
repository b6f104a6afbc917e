import torch

SPACE = {"INPLACE": [False, True]}


def kernel(x, y, a, INPLACE=False):
    if INPLACE:
        out = torch.empty_like(x)
        torch.mul(x, a, out=out)
        return out.add_(y)
    return torch.add(y, x, alpha=a)
