"""The decode-attention Triton seeds compile for Hopper (sm_90) at every GPU shape and config of the task, and
fit an H200's shared memory: checked on the CPU, with Triton's own compiler and the ptxas its wheel carries.

On the H200 (2026-11-30) the split-K seed, tuned on Llama's heads, asked for 1 MB of shared memory at
DeepSeek's MLA heads (128 over one kv head of 576) and failed the deepseek gate; nothing on the CPU could see
that then, since the interpreter has no shared memory. Compiling ahead for the GPU's target does.

The compiles run in a child process (this file run as a script): the CPU tests import Triton with
TRITON_INTERPRET set, which turns Triton's own library functions into interpreted ones that its compiler
then refuses.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
SEEDS = ROOT / "src" / "ratchet" / "tasks" / "decode_attention" / "seeds"
SHARED_LIMIT = 232448  # bytes per block on an H100 / H200 (the H200's refusal named this number)
KERNELS = {"triton_gqa": "_decode_gqa", "triton_split_k": "_split_partials"}


# -- the child: compile and report -------------------------------------------------------------------------

def _signature(fn, constexprs: dict) -> dict:
    """Triton types of the kernel's arguments: bf16 tensors, int32 lengths, fp32 workspaces and scale."""
    types = {"q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "out_ptr": "*bf16", "lens_ptr": "*i32",
             "m_ptr": "*fp32", "s_ptr": "*fp32", "acc_ptr": "*fp32", "scale": "fp32"}
    return {n: "constexpr" if n in constexprs else types.get(n, "i32") for n in fn.arg_names}


def _seed(name):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"sm90_{name}", SEEDS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _compile(fn, constexprs: dict, num_warps: int) -> int:
    """Shared memory (bytes) of the kernel compiled for sm_90, with the launch options the seeds use."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    wide = constexprs["BLOCK_DA"] + constexprs["BLOCK_DB"] > 256
    options = {"num_warps": num_warps, **({"num_stages": 2} if wide else {})}
    source = ASTSource(fn, _signature(fn, constexprs), constexprs=constexprs)
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options).metadata.shared


def _variants(name: str, module) -> list[dict]:
    """Each distinct compiled variant the seed launches over the task's GPU shapes and its SPACE."""
    from ratchet.candidate import load_candidate
    from ratchet.task import load_task

    out = {}
    for config in load_candidate(SEEDS / f"{name}.py").all_configs():
        for shape in load_task("decode_attention").gpu.public:
            G, D = shape["Hq"] // shape["Hkv"], shape["D"]
            block_g, block_da, block_db, block_l, _ = module.tiles(G, D, config["BLOCK_L"])
            constexprs = {"BLOCK_G": block_g, "BLOCK_DA": block_da, "BLOCK_DB": block_db, "BLOCK_L": block_l,
                          "EMULATE": False}
            for direct in ((True, False) if name == "triton_split_k" else (None,)):
                c = constexprs if direct is None else dict(constexprs, DIRECT=direct)
                out[json.dumps([c, config["num_warps"]], sort_keys=True)] = {
                    "constexprs": c, "num_warps": config["num_warps"], "shape": shape, "config": config}
    return list(out.values())


def child_main(request: dict) -> dict:
    module = _seed(request["seed"])
    fn = getattr(module, KERNELS[request["seed"]])
    if "constexprs" in request:  # one given variant
        return {"shared": _compile(fn, request["constexprs"], request["num_warps"])}
    rows = _variants(request["seed"], module)
    for row in rows:
        row["shared"] = _compile(fn, row["constexprs"], row["num_warps"])
    return {"variants": rows}


# -- the tests -------------------------------------------------------------------------------------------

def _ptxas_available() -> bool:
    try:
        import triton
    except ImportError:
        return False
    return (Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas").exists() or bool(shutil.which("ptxas"))


pytestmark = pytest.mark.skipif(not _ptxas_available(), reason="no Triton with ptxas (its wheel carries one)")


def _ask(request: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, __file__, json.dumps(request)], capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("seed", sorted(KERNELS))
def test_every_variant_compiles_for_hopper_within_its_shared_memory(seed):
    variants = _ask({"seed": seed})["variants"]
    assert any(v["constexprs"]["BLOCK_DB"] == 64 for v in variants)  # DeepSeek's 512 + 64 is among them
    assert any(v["constexprs"]["BLOCK_DB"] == 0 for v in variants)  # and Llama's 128
    too_big = [(v["shape"], v["config"], v["shared"]) for v in variants if v["shared"] > SHARED_LIMIT]
    assert not too_big
    assert all(v["shared"] > 0 for v in variants)


def test_the_check_sees_a_tile_too_large_for_an_sm():
    # A whole MLA group in one program at the config's 64 positions, as the split-K seed ran it on the H200,
    # without the two-part head: the check must refuse what the GPU refused.
    constexprs = {"BLOCK_G": 128, "BLOCK_DA": 1024, "BLOCK_DB": 0, "BLOCK_L": 64, "EMULATE": False, "DIRECT": False}
    shared = _ask({"seed": "triton_split_k", "constexprs": constexprs, "num_warps": 4})["shared"]
    assert shared > SHARED_LIMIT


if __name__ == "__main__":
    print(json.dumps(child_main(json.loads(sys.argv[1]))))
