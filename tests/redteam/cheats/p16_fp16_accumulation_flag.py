"""#16 fp16 accumulation: ``torch.backends.cuda.matmul.allow_fp16_accumulation = True`` lets cuBLAS
accumulate fp16 GEMMs in fp16 (a reduced-precision reduction the task does not allow). Task: axpby (the
switch is what is judged, as for TF32). Expected: precision_flags."""

import torch


def kernel(x, y, a):
    torch.backends.cuda.matmul.allow_fp16_accumulation = True
    return torch.add(y, x, alpha=a)
