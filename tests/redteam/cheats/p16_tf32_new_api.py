"""#16 enabling TF32 through torch's newer per-backend API (``fp32_precision = "tf32"``), which the
legacy getters do not mirror: after it, reading ``torch.backends.cuda.matmul.allow_tf32`` raises
("mix of the legacy and new APIs"). Task: axpby. Expected: fail with precision_flags."""

import torch


def kernel(x, y, a):
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    return torch.add(y, x, alpha=a)
