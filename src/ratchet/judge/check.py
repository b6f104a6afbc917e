"""Correctness rules, applied in the judge's own process to outputs the worker sent back.

Outputs arrive as plain descriptions (see ``worker.describe_outputs``), never as objects the
candidate could have subclassed, so nothing here runs candidate code.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any, Sequence

import torch

from ratchet.judge.verdict import Reason
from ratchet.task import Task, Tolerance

# The worker fills freed memory with 0xFF bytes before each correctness call: NaN in every float
# dtype, -1 in signed integers. An output still holding that pattern was never written.
POISON_BYTE = 0xFF


def as_tuple(value: Any) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def tensor_from_description(desc: dict, device: torch.device | str = "cpu") -> torch.Tensor:
    """The tensor a worker described, on ``device``. Large outputs are compared where the judge's
    reference lives: on the GPU a 4096 x 8192 comparison takes milliseconds, on the CPU 1.4 s."""
    dtype = getattr(torch, desc["dtype"].removeprefix("torch."))
    if not desc["data"]:
        return torch.empty(0, dtype=dtype, device=device).reshape(desc.get("data_shape", desc["shape"]))
    with warnings.catch_warnings():  # read-only bytes: the copy to the device (or clone) makes it ours
        warnings.simplefilter("ignore", UserWarning)
        flat = torch.frombuffer(desc["data"], dtype=dtype)
    flat = flat.to(device, copy=True) if torch.device(device).type != "cpu" else flat.clone()
    return flat.reshape(desc.get("data_shape", desc["shape"]))


def check_structure(descs: Sequence[dict], refs: Sequence[torch.Tensor], expected_device: str) -> list[Reason]:
    """Type, count, dtype, shape, device and density of every output against the reference's."""
    if len(descs) != len(refs):
        return [Reason("wrong_type", f"kernel returned {len(descs)} outputs, the reference {len(refs)}")]
    reasons = []
    for i, (desc, ref) in enumerate(zip(descs, refs)):
        name = f"output {i}"
        if desc["type"] != "torch.Tensor":
            code = "not_dense" if desc.get("is_tensor") else "wrong_type"
            reasons.append(Reason(code, f"{name} is {desc['type']}, not a plain torch.Tensor"))
            continue
        if not desc["dense"]:
            reasons.append(Reason("not_dense", f"{name} is a view or strided tensor without its own dense storage"))
        if desc["shape"] != list(ref.shape):
            reasons.append(Reason("wrong_shape", f"{name} has shape {desc['shape']}, expected {list(ref.shape)}"))
        if desc["device"].split(":")[0] != expected_device:
            reasons.append(Reason("wrong_device", f"{name} is on {desc['device']}, expected {expected_device}"))
        if desc.get("aliases"):
            reasons.append(Reason("not_dense", f"{name} shares storage with {desc['aliases']}"))
    return reasons


def owns_storage(t: torch.Tensor) -> bool:
    """Whether an output is dense with storage of its own: the rule against lazy or strided outputs (hack #8)
    and outputs in memory that something else holds (#1). Runs in the worker, on plain tensors only.

    Contiguous is required. The whole of its storage (offset 0, the same size) is the output's own, even
    when the kernel keeps it for its next call (an output pool: every call's values are checked, and the
    caller's copy is taken at return). A view of a larger storage is its own only when nothing but the view
    and its base tensor hold that storage and nothing but the view holds the base: a fresh buffer the
    kernel let go, as ``buf[:, :H].contiguous()`` returns at T = 1 (the slice is contiguous, so it stays a
    view). A slice of an arena the kernel keeps is refused. The holders are counted against a probe made
    the same way here, so the interpreter's own references cancel out."""
    if not t.is_contiguous():
        return False
    if t.storage_offset() == 0 and t.untyped_storage().nbytes() == t.numel() * t.element_size():
        return True
    if not hasattr(torch._C, "_storage_Use_Count"):
        return False  # no way to count the holders: only whole storages are the output's own
    mine, fresh = _holders(t), _holders(_fresh_view())
    return mine[:2] == fresh[:2] and (mine[2] is None or mine[2] == fresh[2])


def _fresh_view() -> torch.Tensor:
    with torch.inference_mode(False):  # a view that records its base, as outside inference mode
        return torch.empty(2, dtype=torch.uint8)[1:]


def _holders(t: torch.Tensor) -> tuple[int, int, int | None]:
    """Holders of a view's storage beyond its base (tensors and the Python storage object), Python
    references to that storage object, and to the base (None when the view records none)."""
    storage = t.untyped_storage()
    base = t._base
    return (torch._C._storage_Use_Count(storage._cdata) - (base is not None), sys.getrefcount(storage),
            None if base is None else sys.getrefcount(base))


def check_dtypes(descs: Sequence[dict], expected: Sequence[torch.dtype]) -> list[Reason]:
    return [
        Reason("wrong_dtype", f"output {i} is {d['dtype']}, expected {e}")
        for i, (d, e) in enumerate(zip(descs, expected))
        if d["dtype"] != str(e)
    ]


def is_poison(t: torch.Tensor) -> torch.Tensor:
    """Elements whose bytes are all the poison byte."""
    if t.numel() == 0:
        return torch.zeros_like(t, dtype=torch.bool)
    raw = t.contiguous().reshape(-1).view(torch.uint8).reshape(*t.shape, t.element_size())  # 0-dim too
    return (raw == POISON_BYTE).all(dim=-1)


def compare_close(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance, label: str) -> list[Reason]:
    """Every element within ``atol + rtol * |ref|``; NaN/Inf only where the reference has them."""
    ref = ref.to(torch.float64)
    got = out.to(torch.float64)
    ref_finite = torch.isfinite(ref)
    bad_nonfinite = ~torch.isfinite(got) & ref_finite
    if bad_nonfinite.any():
        poisoned = is_poison(out) & bad_nonfinite
        if poisoned.any():
            return [Reason("unwritten_output", f"{label}: {int(poisoned.sum())} elements never written (poison left)")]
        return [Reason("nan_inf", f"{label}: {int(bad_nonfinite.sum())} NaN/Inf elements where the reference is finite")]
    if out.dtype in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool):
        wrong = got != ref
        if wrong.any():
            return [Reason("wrong_output", f"{label}: {int(wrong.sum())} of {ref.numel()} elements differ")]
        return []
    diff = (got - ref).abs()
    atol = tol.atol
    if tol.atol_of_rms:  # a fraction of the output's own scale (its finite elements' root mean square)
        finite = ref[ref_finite]
        atol = tol.atol * (float(finite.square().mean().sqrt()) if finite.numel() else 0.0)
    allowed = atol + tol.rtol * ref.abs()
    both_nonfinite = ~ref_finite
    bad = (diff > allowed) & ~both_nonfinite
    # Same non-finite value on both sides is agreement (e.g. -inf logits masked the same way).
    bad |= both_nonfinite & ~((got == ref) | (got.isnan() & ref.isnan()))
    if not bad.any():
        return []
    count = int(bad.sum())
    worst = int(torch.argmax(torch.where(bad, diff - allowed, torch.zeros_like(diff))))
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), ref.shape)) if ref.dim() else ()
    return [
        Reason(
            "wrong_output",
            f"{label}: {count} of {ref.numel()} elements beyond atol={atol:.3g}"
            f"{f' ({tol.atol:g} of the output RMS)' if tol.atol_of_rms else ''} rtol={tol.rtol:g}; "
            f"worst at {index}: got {got.flatten()[worst].item():.6g}, expected {ref.flatten()[worst].item():.6g}",
        )
    ]


def check_values(task: Task, inputs: tuple, outs: Sequence[torch.Tensor], refs: Sequence[torch.Tensor],
                 dtype: torch.dtype, label: str) -> list[Reason]:
    """The task's rule: a custom check if it has one, else the tolerance table for ``dtype``."""
    if callable(task.check):
        details = task.check(inputs, tuple(outs), tuple(refs), dtype)
        return [Reason("wrong_output", f"{label}: {d}") for d in details]
    tol = task.tolerances.get(dtype) or Tolerance(0.0, 0.0)
    reasons = []
    for i, (out, ref) in enumerate(zip(outs, refs)):
        reasons += compare_close(out, ref, tol, f"{label} output {i}")
    return reasons


# Inputs at least this large come back from the worker as a fingerprint, not as bytes: decode
# attention's KV caches are 1 GiB per call, which took seconds through the pipe. On a GPU the
# fingerprint is a few kernels, while bytes cross to the host, the pipe and back to the judge's GPU, so
# it starts far lower there (a top-p call's 512 KB of logits, thousands of times an evaluation); on a
# CPU its random weights cost more than the copy (2.7 ms against 0.1 ms for 512 KB, 2026-12-03).
FINGERPRINT_MIN_BYTES = 16 << 20
FINGERPRINT_MIN_BYTES_GPU = 64 << 10


def fingerprinted(t: torch.Tensor) -> bool:
    """Does this input come back as a fingerprint (rather than its bytes)?"""
    least = FINGERPRINT_MIN_BYTES if t.device.type == "cpu" else FINGERPRINT_MIN_BYTES_GPU
    return t.numel() * t.element_size() >= least
_FINGERPRINT_CHUNK_WORDS = 8 << 20


def input_fingerprint(t: torch.Tensor, seed: int) -> int:
    """A keyed checksum of a tensor's bytes: the sum of its 32-bit words times random weights drawn
    from ``seed`` on the tensor's device, modulo 2**64. Integer sums are exact in any order, so the
    worker and the judge agree on equal bytes; any change of the bytes changes it except with
    probability ~2**-31 for weights the kernel does not know (the seed comes with the call)."""
    raw = t.detach().contiguous().view(-1).view(torch.uint8)
    pad = (-raw.numel()) % 4
    if pad:
        raw = torch.cat([raw, raw.new_zeros(pad)])
    words = raw.view(torch.int32)
    generator = torch.Generator(device=t.device).manual_seed(seed)
    total = torch.zeros((), dtype=torch.int64, device=t.device)
    for start in range(0, words.numel(), _FINGERPRINT_CHUNK_WORDS):
        chunk = words[start:start + _FINGERPRINT_CHUNK_WORDS].to(torch.int64)
        weights = torch.randint(-(1 << 31), 1 << 31, chunk.shape, generator=generator, device=t.device,
                                dtype=torch.int64)
        total += (chunk * weights).sum()  # |product| < 2**62; the sum wraps modulo 2**64
    return int(total)


def inputs_unchanged(before: Sequence, after_descs: Sequence[dict | None], label: str,
                     fingerprint_seed: int | None = None) -> list[Reason]:
    """Inputs after the call, as the worker sent them back (bytes, or a fingerprint for large ones,
    keyed with the seed the judge sent), must equal what the judge made."""
    for i, (orig, desc) in enumerate(zip(before, after_descs)):
        if desc is None or not isinstance(orig, torch.Tensor):
            continue
        if "fingerprint" in desc:
            same = (fingerprint_seed is not None and list(desc["shape"]) == list(orig.shape)
                    and desc["fingerprint"] == input_fingerprint(orig, fingerprint_seed))
            if not same:
                return [Reason("input_mutated", f"{label}: input {i} was modified by the kernel")]
            continue
        after = tensor_from_description(desc, orig.device)
        same = after.shape == orig.shape and torch.equal(
            after.reshape(-1).view(torch.uint8) if after.numel() else after,  # reshape: a 0-dim one too
            orig.contiguous().reshape(-1).view(torch.uint8) if orig.numel() else orig,
        )
        if not same:
            return [Reason("input_mutated", f"{label}: input {i} was modified by the kernel")]
    return []
