"""#16 enabling TF32 through the legacy switches (on a GPU, fp32 matmuls then run at 10-bit mantissa).
The op itself is honest. Task: axpby. precision_flags."""

import torch


def kernel(x, y, a):
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.set_float32_matmul_precision("high")
    return torch.add(y, x, alpha=a)
