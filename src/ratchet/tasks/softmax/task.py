"""Softmax over the last dim of x [M, N]: out = exp(x - max) / sum(exp(x - max)), math in fp32, output in x's dtype."""

import torch

from ratchet.task import Cost, ShapeRange, ShapeSet, Task, Tolerance, tensor_bytes


def reference(x):
    # The meaning of the op. The judge hands it float64 for correctness; the timed baseline (its own worker,
    # native dtype) is torch's fused softmax, which accumulates half types in fp32: what a model calls.
    return torch.softmax(x, dim=-1)


def make_inputs(shape, dtype, device, generator):
    M, N = shape["M"], shape["N"]
    # Per-row spread, log-uniform in [0.5, 8]: small scales give nearly uniform rows (every element ~1/N, so
    # a wrong denominator shows everywhere), large ones give peaked rows like sampling logits, where a few
    # elements carry the mass and the max subtraction matters.
    scale = 0.5 * 16.0 ** torch.rand(M, 1, generator=generator, device=device)
    # Per-row offsets: half the rows in [-30, 30], half high, in [90, 120]. Softmax is shift-invariant, but
    # exp(x) without subtracting the max overflows fp32 (exp(89) = inf) on every high row, so even M = 1
    # catches it within a few calls; and rows normalized by another row's max are far off.
    high = torch.rand(M, 1, generator=generator, device=device) < 0.5
    offset = torch.rand(M, 1, generator=generator, device=device) * 30.0
    offset = torch.where(high, 90.0 + offset, 2.0 * offset - 30.0)
    x = torch.randn(M, N, generator=generator, device=device) * scale + offset
    return (x.to(dtype),)


def cost(shape, dtype):
    M, N = shape["M"], shape["N"]
    # Read x once, write out once; max compare, subtract, exp, add to the sum, scale: five per element.
    return Cost(bytes=tensor_bytes((M, N), dtype) * 2, flops=5.0 * M * N)


def weight(shape):
    # The sampling softmax over the vocabulary (M <= 256 rows, one per sequence of the batch) runs at every
    # decode step on the latency-critical path. Attention-score rows run standalone only in eager attention
    # paths; production attention fuses its softmax into FlashAttention-style kernels.
    return 1.0 if shape["M"] <= 256 else 0.5


# The default atol (1e-5 fp32, 1e-2 bf16) is larger than most probabilities of a 128k-wide row (1/N ~ 8e-6):
# a kernel returning zeros would pass it. Here atol is set by what the output format can hold, so nearly
# every element is judged by rtol (the defaults), which still sees fp32 math done in bf16:
# - fp32: the error of honest fp32 math is relative (~1e-6 for |x - max| <= 16, exp and sum included);
#   exp underflow (or a GPU's flush to zero) loses less than 1e-37, so atol 1e-10 costs nothing honest.
# - fp16: probabilities below 6.1e-5 are subnormal, spaced 2^-24 ~ 6e-8 apart, so rounding to fp16 alone
#   is off by up to 3e-8 absolute; atol 1e-7 covers that and nothing more.
# - bf16: has fp32's exponent range, so rounding is relative (2^-9); atol 1e-7 as for fp16.
TOLERANCES = {
    torch.float32: Tolerance(atol=1e-10, rtol=1e-5),
    torch.float16: Tolerance(atol=1e-7, rtol=1e-3),
    torch.bfloat16: Tolerance(atol=1e-7, rtol=1e-2),
}

_VOCAB = (128256, 129280, 32000)  # Llama-3, DeepSeek-V3, Llama-2/Mistral vocabularies

TASK = Task(
    name="softmax",
    reference=reference,
    make_inputs=make_inputs,
    gpu=ShapeSet(
        public=[{"M": m, "N": n} for n in _VOCAB for m in (1, 64, 256)]
        # Attention-score-like rows (prefill, eager attention): many short rows. Largest has 134M elements,
        # the size of rmsnorm's largest shape, so the judge's float64 reference stays affordable.
        + [{"M": 4096, "N": 1024}, {"M": 4096, "N": 8192}, {"M": 32768, "N": 2048}, {"M": 16384, "N": 8192}],
        # 100003 (prime) and 151937 are odd vocabularies, 1025..8191 odd attention rows: a kernel assuming a
        # power-of-two or multiple-of-8 N fails. M up to 999 keeps the largest draw near 130M elements.
        held_out=ShapeRange(dims={"M": (1, 999), "N": [100003, 128256, 129280, 151937, 1025, 3001, 8191]},
                            count=2),
    ),
    cpu=ShapeSet(
        public=[
            {"M": 1, "N": 32000},
            {"M": 2, "N": 32000},
            {"M": 7, "N": 1000},
            {"M": 64, "N": 1024},
            {"M": 31, "N": 1999},
        ],
        held_out=ShapeRange(dims={"M": (1, 40), "N": (17, 1500)}, count=2),
    ),
    dtypes=(torch.float32, torch.bfloat16, torch.float16),
    cost=cost,
    weight=weight,
    tolerances=TOLERANCES,
    # What torch.profiler lists (torch 2.13) for torch.softmax / F.softmax / Tensor.softmax / nn.Softmax
    # (softmax -> _softmax), torch.special.softmax, F.log_softmax (log_softmax -> _log_softmax, also behind
    # F.cross_entropy) and torch._safe_softmax. logsumexp stays allowed: it is a reduction, not the op.
    forbidden=("aten::softmax", "aten::_softmax", "aten::special_softmax", "aten::log_softmax",
               "aten::_log_softmax", "aten::_safe_softmax"),
    description=(
        "Softmax over the last dim of x [M, N]: out = exp(x - max(x)) / sum(exp(x - max(x))) per row, with "
        "the max, exp and sum done in fp32 and the result rounded once to x's dtype (fp32, bf16 or fp16). "
        "The main case is the sampling softmax over a vocabulary (M = 1 to 256 sequences, N = 32000, "
        "128256 for Llama-3, 129280 for DeepSeek-V3), where one row is far too wide for one program's "
        "registers and a batch of 1 leaves most of the GPU idle unless a row is split; the other is many "
        "short attention-score rows (M = 4096 to 32768, N = 1024 to 8192). It is memory-bound: read x, "
        "write out. Any M and N must work, including odd N; torch.softmax, F.softmax and log_softmax are "
        "forbidden, and small probabilities are judged too (atol is tiny, see TOLERANCES)."
    ),
)
