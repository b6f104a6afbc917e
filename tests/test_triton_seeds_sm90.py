"""Every built-in Triton seed compiles for Hopper (sm_90) within an H200's shared memory, with its own defaults
at every GPU public shape of its task and with every config of its SPACE at the heaviest one: checked on the
CPU (``tests/hopper_compile.py``: Triton's own compiler and the ptxas its wheel carries, each launch
specialized on real arguments). ``RATCHET_HOPPER_FULL=1`` compiles every config at every shape (the
cross product took 14 minutes of the suite's 68 on two busy cores on 2026-12-02, 6.5 of them top-p's
split-row seed: 42 configs at 8 shapes).

On the H200 (2026-11-30) the split-K attention seed, tuned on Llama's heads, asked for 1 MB of shared memory
at DeepSeek's MLA heads and failed the deepseek gate; the interpreter, which the CPU tests run, has no shared
memory and could not see it. This can.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
TASKS = ROOT / "src" / "ratchet" / "tasks"
SEEDS = sorted(TASKS.glob("*/seeds/triton*.py"))
SHARED_LIMIT = 232448  # bytes per block on an H100 / H200 (the number the H200's refusal named)

TOO_BIG = '''
import torch
import triton
import triton.language as tl

SPACE = {"BLOCK": [128]}


@triton.jit
def _tile(x_ptr, out_ptr, n, BLOCK: tl.constexpr, K: tl.constexpr):
    rows = tl.arange(0, BLOCK)
    cols = tl.arange(0, K)
    acc = tl.zeros([BLOCK, BLOCK], dtype=tl.float32)
    for i in range(0, n, K):  # [128, 1024] bf16 tiles, pipelined: several 256 KB buffers
        a = tl.load(x_ptr + i + rows[:, None] * K + cols[None, :])
        b = tl.load(x_ptr + i + cols[:, None] * BLOCK + rows[None, :])
        acc += tl.dot(a, b)
    tl.store(out_ptr + rows[:, None] * BLOCK + rows[None, :], acc.to(tl.bfloat16))


def kernel(x, BLOCK=128):
    out = torch.empty((BLOCK, BLOCK), dtype=x.dtype, device=x.device)
    _tile[(1,)](x, out, x.numel(), BLOCK=BLOCK, K=1024, num_stages=3)
    return out
'''


def _ptxas_available() -> bool:
    try:
        import triton
    except ImportError:
        return False
    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    return bundled.exists() or shutil.which("ptxas") is not None


pytestmark = pytest.mark.skipif(not _ptxas_available(), reason="no Triton with ptxas (its wheel carries one)")


def compile_for_hopper(task: str, path: Path, *extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if os.environ.get("RATCHET_HOPPER_FULL") == "1":
        extra = (*extra, "--full")
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "hopper_compile.py"), task, str(path), *extra],
                          capture_output=True, text=True, timeout=580, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("seed", SEEDS, ids=lambda p: f"{p.parent.parent.name}/{p.stem}")
def test_every_launch_compiles_for_hopper_within_its_shared_memory(seed):
    out = compile_for_hopper(seed.parent.parent.name, seed)
    assert out["errors"] == []
    assert out["launches"], "the seed launched no Triton kernel"
    too_big = [(x["kernel"], x["shape"], x["config"], x["shared"]) for x in out["launches"]
               if x["shared"] > SHARED_LIMIT]
    assert not too_big


def test_the_mla_heads_are_among_the_compiled_launches():
    out = compile_for_hopper("decode_attention", TASKS / "decode_attention" / "seeds" / "triton_split_k.py")
    mla = [x for x in out["launches"] if x["shape"]["D"] == 576]
    assert mla and all(x["shared"] <= SHARED_LIMIT for x in mla)


def test_a_tile_too_large_for_an_sm_is_seen(tmp_path):
    path = tmp_path / "too_big.py"
    path.write_text(TOO_BIG)
    out = compile_for_hopper("silu_mul", path)
    assert out["errors"] == [] and out["launches"]
    assert all(x["shared"] > SHARED_LIMIT for x in out["launches"])


def test_split_k_with_one_cache_for_keys_and_values_fits_and_uses_wgmma_tiles():
    # The deepseek workload passes its MLA cache as k_cache and v_cache: the split-K seed then loads each
    # tile once and takes 64 positions (on the H200 this ran the 32k step 1.27x over torch.compile with
    # CUDA graphs, against 1.12x at 32 positions; docs/NOTES.md, 2026-11-30 (wgmma MLA tiles)). The tiles must
    # still fit, and MLA's must be the 64-head, 8-warp ones.
    seed = TASKS / "decode_attention" / "seeds" / "triton_split_k.py"
    out = compile_for_hopper("decode_attention", seed, "--alias", "2=1")
    assert out["errors"] == []
    partials = [x for x in out["launches"] if x["kernel"] == "_split_partials"]
    mla = [x for x in partials if x["shape"]["Hkv"] == 1]
    assert mla and all(x["num_warps"] == 8 for x in mla)
    assert all(x["shared"] <= SHARED_LIMIT for x in partials)
