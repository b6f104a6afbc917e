"""GeGLU: tanh-approximated GELU of the gate times the up projection, as in Gemma's MLPs.

For x [T, 2I] (gate and up projections concatenated, as a fused gate_up GEMM writes them),
out = gelu_tanh(x[:, :I]) * x[:, I:], with the math in fp32 and out rounded once to x's dtype.
"""

import math

import torch

from ratchet.task import Cost, DEFAULT_TOLERANCES, ShapeRange, ShapeSet, Task, decode_weight, tensor_bytes


def reference(x):
    half = x.shape[-1] // 2
    wide = torch.float64 if x.dtype == torch.float64 else torch.float32
    gate, up = x[:, :half].to(wide), x[:, half:].to(wide)
    inner = math.sqrt(2.0 / math.pi) * (gate + 0.044715 * gate * gate * gate)
    return (0.5 * gate * (1.0 + torch.tanh(inner)) * up).to(x.dtype)


def make_inputs(shape, dtype, device, generator):
    # Rows of different magnitude (log-uniform scale in [0.3, 3]): gates far into both tails of GELU, where
    # a sigmoid or erf GELU, or swapped halves, are visibly wrong.
    T, I = shape["T"], shape["I"]
    scale = 10.0 ** (torch.rand(T, 1, generator=generator, device=device) - 0.5)
    x = torch.randn(T, 2 * I, generator=generator, device=device) * 2.0 * scale
    return (x.to(dtype),)


def cost(shape, dtype):
    T, I = shape["T"], shape["I"]
    # Read gate and up, write out; ~12 flops per output (cube, fma, tanh, products).
    return Cost(bytes=tensor_bytes((T, 3 * I), dtype), flops=12.0 * T * I)


# Intermediate sizes: Gemma-2-2B 9216, Gemma-2-9B 14336, Gemma-7B 24576.
_INTERMEDIATE = (9216, 14336, 24576)

TASK = Task(
    name="geglu",
    reference=reference,
    make_inputs=make_inputs,
    gpu=ShapeSet(
        public=[{"T": t, "I": i} for i in _INTERMEDIATE for t in (1, 64, 256, 4096)],
        held_out=ShapeRange(dims={"T": (1, 8191), "I": [9216, 14336, 24576, 11008, 5461]}),
    ),
    cpu=ShapeSet(
        public=[{"T": 1, "I": 1024}, {"T": 16, "I": 1000}, {"T": 64, "I": 513}],
        held_out=ShapeRange(dims={"T": (1, 40), "I": (100, 3000)}),
    ),
    dtypes=(torch.bfloat16, torch.float16, torch.float32),
    cost=cost,
    weight=lambda shape: decode_weight(shape["T"]),
    tolerances=dict(DEFAULT_TOLERANCES),
    forbidden=("aten::gelu",),
    description=(
        "GeGLU of Gemma-style MLPs: for x [T, 2I] (gate and up projections side by side), out [T, I] = "
        "gelu_tanh(x[:, :I]) * x[:, I:], where gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 "
        "g^3))); math in fp32, out rounded once to x's dtype (bf16, fp16, fp32). Memory-bound: read 2I and "
        "write I values per row; decode T is 1 to 256 rows. Any T and I, odd I included; "
        "torch.nn.functional.gelu is forbidden."
    ),
)
