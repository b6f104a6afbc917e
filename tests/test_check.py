"""`ratchet check TASK CANDIDATE --arch sm_90`: every launched Triton kernel compiled for the GPU through
Triton to PTX and ptxas on this machine without a GPU. A value shaped differently in two branches of an
`if` passes the interpreter and must fail here, in one line naming the kernel and the compiler's message."""

import json
import shutil
import textwrap

import pytest

from ratchet.cli import main

pytest.importorskip("triton")

TASK = textwrap.dedent('''
    import torch
    from ratchet.task import ShapeSet, Task

    def reference(x):
        return x * 2

    def make_inputs(shape, dtype, device, generator):
        return (torch.randn(shape["N"], generator=generator, device=device).to(dtype),)

    TASK = Task(name="twice", reference=reference, make_inputs=make_inputs,
                gpu=ShapeSet(public=[{"N": 4096}]), cpu=ShapeSet(public=[{"N": 1000}]))
''')

CANDIDATE = textwrap.dedent('''
    import torch
    import triton
    import triton.language as tl


    @triton.jit
    def _twice(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


    @triton.jit
    def _branchy(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        if n > 100:
            acc = tl.load(x_ptr + offs, mask=mask)
        else:
            acc = tl.zeros([2 * BLOCK], dtype=tl.float32)
        tl.store(out_ptr + offs, acc, mask=mask)


    def kernel(x, BLOCK=256):
        out = torch.empty_like(x)
        grid = (triton.cdiv(x.numel(), BLOCK),)
        _twice[grid](x, out, x.numel(), BLOCK=BLOCK)
        _branchy[grid](x, out, x.numel(), BLOCK=BLOCK)
        return out
''')


@pytest.mark.slow
def test_check_compiles_the_good_kernel_and_names_the_bad_one(tmp_path, capsys):
    task, cand = tmp_path / "task.py", tmp_path / "cand.py"
    task.write_text(TASK)
    cand.write_text(CANDIDATE)
    code = main(["check", str(task), str(cand), "--arch", "sm_90", "--json"])
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert code == 1 and report["arch"] == "sm_90" and report["ok"] is False and report["error"] is None
    by_name = {k["kernel"]: k for k in report["kernels"]}
    assert set(by_name) == {"_twice", "_branchy"}
    good, bad = by_name["_twice"], by_name["_branchy"]
    assert good["ok"] and good["signature"] == "(x_ptr: *fp32, out_ptr: *fp32, n: i32) [BLOCK=256]"
    # ptxas's account: a handful of registers, nothing spilled, as many blocks as an SM's 2048 threads allow
    assert 4 <= good["registers"] <= 64 and good["spill_bytes"] == 0 and good["blocks_per_sm"] == 16
    assert not bad["ok"] and "Mismatched type for acc between then block" in bad["message"]
    if_line = CANDIDATE.splitlines().index("    if n > 100:") + 1
    assert bad["message"].startswith(f"cand.py:{if_line}: ")  # the `if` line of the file
    err = captured.err.strip().splitlines()
    assert err == [f"ratchet: _branchy does not compile for sm_90: {bad['message']}"]


def test_blocks_per_sm_is_bound_by_registers_shared_memory_and_threads():
    from ratchet.agents.compile_check import blocks_per_sm

    assert blocks_per_sm(128, 4, 0, 90) == 4  # 128 x 32 x 4 registers a block: 4 fill 65536
    assert blocks_per_sm(40, 4, 0, 90) == 12  # 40 rounds up to 1280 a warp: 65536 // 5120
    assert blocks_per_sm(16, 4, 100 * 1024, 90) == 2  # 227 KiB of shared memory hold two
    assert blocks_per_sm(16, 4, 0, 90) == 16  # 2048 threads an SM
    assert blocks_per_sm(255, 32, 0, 90) == 0  # more registers than an SM has: it cannot launch


def test_check_refuses_a_bad_arch_in_one_line(tmp_path, capsys):
    task, cand = tmp_path / "task.py", tmp_path / "cand.py"
    task.write_text(TASK)
    cand.write_text(CANDIDATE)
    assert main(["check", str(task), str(cand), "--arch", "hopper"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not an architecture like sm_90" in err


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc: CUDA C++ cannot be checked here")
def test_check_compiles_cuda_cpp_with_nvcc(tmp_path, capsys):
    task = tmp_path / "task.py"
    task.write_text(TASK)
    source = textwrap.dedent('''
        import torch
        from ratchet.cuda_build import load_cached

        CUDA = r"""
        #include <cuda_runtime.h>
        __global__ void twice(const float* x, float* y, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) y[i] = 2.0f * x[i]MISSING
        }
        """

        def kernel(x):
            mod = load_cached("twice_ext", CUDA, "void run(at::Tensor x);", ["run"], no_implicit_headers=True)
            mod.run(x)
            return x * 2
    ''')
    (tmp_path / "ok.py").write_text(source.replace("MISSING", ";"))
    (tmp_path / "broken.py").write_text(source.replace("MISSING", ""))
    assert main(["check", str(task), str(tmp_path / "ok.py"), "--json"]) == 0
    ok = json.loads(capsys.readouterr().out)
    assert [(k["kernel"], k["ok"]) for k in ok["kernels"]] == [("cuda:twice_ext", True)]
    assert main(["check", str(task), str(tmp_path / "broken.py"), "--json"]) == 1
    broken = json.loads(capsys.readouterr().out)
    assert "error" in broken["kernels"][0]["message"] and "twice_ext.cu" in broken["kernels"][0]["message"]


GPU_ONLY_BRANCH = CANDIDATE.replace('''    _branchy[grid](x, out, x.numel(), BLOCK=BLOCK)''', '''    if x.numel() > 2048:  # only the GPU shape (N 4096) takes this path; the CPU one (N 1000) does not
        _branchy[grid](x, out, x.numel(), BLOCK=BLOCK)''')
assert GPU_ONLY_BRANCH != CANDIDATE


@pytest.mark.slow
def test_a_path_taken_only_at_gpu_sizes_is_compiled_with_gpu_shapes(tmp_path, capsys):
    """By default only the CPU shapes' launches are compiled; --shapes gpu launches the GPU's shapes too."""
    task, cand = tmp_path / "task.py", tmp_path / "cand.py"
    task.write_text(TASK)
    cand.write_text(GPU_ONLY_BRANCH)
    assert main(["check", str(task), str(cand), "--json"]) == 0
    on_cpu = json.loads(capsys.readouterr().out)
    assert [k["kernel"] for k in on_cpu["kernels"]] == ["_twice"] and on_cpu["ok"]
    assert main(["check", str(task), str(cand), "--shapes", "gpu", "--json"]) == 1
    on_gpu = json.loads(capsys.readouterr().out)
    by_name = {k["kernel"]: k for k in on_gpu["kernels"]}
    assert set(by_name) == {"_twice", "_branchy"} and by_name["_twice"]["ok"]
    assert "Mismatched type for acc between then block" in by_name["_branchy"]["message"]


HELD_OUT_TASK = TASK.replace("from ratchet.task import ShapeSet, Task", "from ratchet.task import Cost, ShapeRange, ShapeSet, Task").replace(
    'gpu=ShapeSet(public=[{"N": 4096}])',
    'gpu=ShapeSet(public=[{"N": 4096}], held_out=ShapeRange({"N": (100, 200001)})),\n'
    '                cost=lambda s, d: Cost(bytes=8 * s["N"], flops=s["N"])')
assert HELD_OUT_TASK != TASK
HELD_OUT_ONLY_BRANCH = CANDIDATE.replace('''    _branchy[grid](x, out, x.numel(), BLOCK=BLOCK)''', '''    if x.numel() > 100000:  # only held-out draws (up to 200001) reach this path; no public shape does
        _branchy[grid](x, out, x.numel(), BLOCK=BLOCK)''')


@pytest.mark.slow
def test_gpu_shapes_also_launch_the_held_out_ranges_corners(tmp_path, capsys, monkeypatch):
    """A path only held-out shapes reach is compiled by --shapes gpu at the ranges' highest corner; a corner
    whose inputs the cost model puts over the host-memory bound is named in a note and not made."""
    from ratchet.agents import compile_check

    task, cand = tmp_path / "task.py", tmp_path / "cand.py"
    task.write_text(HELD_OUT_TASK)
    cand.write_text(HELD_OUT_ONLY_BRANCH)
    assert main(["check", str(task), str(cand), "--shapes", "gpu", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    by_name = {k["kernel"]: k for k in report["kernels"]}
    assert set(by_name) == {"_twice", "_branchy"}
    assert "Mismatched type for acc between then block" in by_name["_branchy"]["message"]

    from ratchet.task import load_task

    loaded = load_task(str(task))
    monkeypatch.setattr(compile_check, "CORNER_BYTES", 2**20)  # N 200001 costs 1.6 MB, over a bound of 1 MiB
    notes = []
    assert compile_check._held_out_corners(loaded, notes) == [{"N": 100}]
    assert notes == ["held-out corner {'N': 200001} not launched: its inputs would take 2 MiB of host memory, over 1 MiB"]


@pytest.mark.slow
def test_chosen_shapes_compile_only_the_path_they_take(tmp_path, capsys):
    """--shape launches the chosen shapes of the set alone: a size under the held-out-only branch compiles
    one kernel, a size over it compiles the broken one too; a dim the set lacks is one line, exit 2."""
    task, cand = tmp_path / "task.py", tmp_path / "cand.py"
    task.write_text(HELD_OUT_TASK)
    cand.write_text(HELD_OUT_ONLY_BRANCH)
    assert main(["check", str(task), str(cand), "--shapes", "gpu", "--shape", '{"N": 4096}', "--json"]) == 0
    assert [k["kernel"] for k in json.loads(capsys.readouterr().out)["kernels"]] == ["_twice"]
    assert main(["check", str(task), str(cand), "--shapes", "gpu", "--shape", '{"N": 150000}', "--json"]) == 1
    assert {k["kernel"] for k in json.loads(capsys.readouterr().out)["kernels"]} == {"_twice", "_branchy"}
    assert main(["check", str(task), str(cand), "--shape", '{"M": 3}']) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "twice's cpu shapes have no dim M" in err
