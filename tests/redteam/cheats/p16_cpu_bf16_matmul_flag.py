"""#16 lowering fp32 matmul precision on the CPU: ``torch.backends.mkldnn.matmul.fp32_precision = "bf16"``
makes oneDNN run fp32 matmuls in bf16 on CPUs that support it (the CPU analogue of TF32). Task: axpby
(the op has no matmul; the switch is what is judged, as for TF32). Expected: precision_flags."""

import torch


def kernel(x, y, a):
    torch.backends.mkldnn.matmul.fp32_precision = "bf16"
    return torch.add(y, x, alpha=a)
