"""Compiled candidates (torch's cpp_extension through ratchet.cuda_build): the CPU C++ rmsnorm seed is
right and passes the judge, a C++ syntax error is a compile_error that carries the compiler's own message,
builds are cached per config (in the process and on disk, across processes), and on a GPU the CUDA seeds
match the float64 reference.

Builds take 10-20 s each on two cores, so every build lands in one extensions directory for the module,
which the judge's workers inherit through the environment (judge/process.py passes os.environ on), and
each config is built once here.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch.utils import cpp_extension

from ratchet import cuda_build
from ratchet.candidate import load_candidate
from ratchet.judge import JudgeOptions, evaluate
from ratchet.judge.worker import classify_exception
from ratchet.task import load_task
from seed_files import import_seed

DATA = Path(__file__).parent / "data"
RMSNORM = load_task("rmsnorm")
SILU_MUL = load_task("silu_mul")
SOFTMAX = load_task("softmax")
CPU_SEED = Path(RMSNORM.seeds_dir) / "cpu_cpp.py"
FAST = JudgeOptions(device="cpu", time_it=False)


@pytest.fixture(scope="module", autouse=True)
def extensions_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("torch_extensions")
    patch = pytest.MonkeyPatch()
    patch.setenv("TORCH_EXTENSIONS_DIR", str(path))
    # Builds loaded in this process by earlier test modules (same worker) would be handed back without
    # touching this module's folder: start from none.
    patch.setattr(cuda_build, "_LOADED", {})
    # And as if each was built in another directory (torch then names the next build `<name>_v1`, which
    # no other process looks for): cuda_build must build the plain name every time.
    patch.setattr(cpp_extension.JIT_EXTENSION_VERSIONER, "entries", _BuiltElsewhere())
    yield path
    patch.undo()


class _BuiltElsewhere(dict):
    """torch's extension versions, with every name it has not seen built at version 0 from other files,
    until that name's entry is dropped."""

    def __init__(self):
        super().__init__()
        self.dropped = set()

    def get(self, name, default=None):
        from torch.utils._cpp_extension_versioner import Entry

        return super().get(name, default if name in self.dropped else Entry(0, -1))

    def pop(self, name, *default):
        self.dropped.add(name)
        return super().pop(name, *default)


@pytest.fixture(scope="module")
def cpu_seed(extensions_dir):
    """The CPU C++ seed with its default config built (once for the module); the .so and its mtime."""
    module = import_seed("rmsnorm", "cpu_cpp")
    x, w, eps = _rms_inputs({"T": 2, "H": 8}, torch.float32)
    module.kernel(x, w, eps)
    so = _built_libraries(extensions_dir)
    assert len(so) == 1, so
    return module, so[0], so[0].stat().st_mtime_ns


def _built_libraries(root: Path) -> list[Path]:
    return sorted(root.glob("*/*.so"))


def _rms_inputs(shape, dtype, seed=0, device="cpu"):
    return RMSNORM.make_inputs(shape, dtype, device, torch.Generator(device=device).manual_seed(seed))


def _assert_rmsnorm_close(out, inputs, dtype):
    x, weight, eps = inputs
    ref = RMSNORM.reference(x.double(), weight.double(), eps)
    assert out.dtype == dtype and out.shape == x.shape and out.device == x.device
    tol = RMSNORM.tolerances[dtype]
    torch.testing.assert_close(out.double(), ref, atol=tol.atol, rtol=tol.rtol)


# -- the CPU C++ seed -------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", RMSNORM.dtypes)
@pytest.mark.parametrize("shape", [{"T": 1, "H": 1000}, {"T": 7, "H": 333}, {"T": 64, "H": 256},
                                   {"T": 3, "H": 17}, {"T": 2, "H": 5}], ids=lambda s: f"{s['T']}x{s['H']}")
def test_cpu_cpp_seed_matches_reference(cpu_seed, shape, dtype):
    module = cpu_seed[0]
    inputs = _rms_inputs(shape, dtype, seed=1)
    before = inputs[0].clone()
    _assert_rmsnorm_close(module.kernel(*inputs), inputs, dtype)  # H % 8 != 0 exercises the tail loop
    assert torch.equal(inputs[0], before)


def test_cpu_cpp_seed_passes_the_judge_without_rebuilding(cpu_seed):
    _, so, mtime = cpu_seed
    verdict = evaluate(RMSNORM, load_candidate(CPU_SEED), None, FAST)
    assert verdict.verdict == "pass", verdict.reasons
    assert {s.dtype for s in verdict.shapes} == {"bfloat16", "float16", "float32"}
    # The worker (another process, same TORCH_EXTENSIONS_DIR) loaded the module the fixture built.
    assert so.stat().st_mtime_ns == mtime


# -- compile errors ---------------------------------------------------------------------------------

def test_syntax_error_is_a_compile_error_with_the_compilers_message():
    broken = load_candidate(DATA / "candidates" / "rmsnorm_cpp_syntax_error.py")
    verdict = evaluate(RMSNORM, broken, None, FAST)
    assert verdict.verdict == "error"
    (reason,) = verdict.reasons
    assert reason.code == "compile_error"
    # g++'s own diagnostic, with file and line (the missing ';' is on line 8 of the generated main.cpp).
    assert "main.cpp:8:" in reason.detail and "error: expected" in reason.detail, reason.detail
    assert "Error building extension 'ratchet_test_syntax_error_" in reason.detail
    assert "-isystem" not in reason.detail  # the compiler command lines are left out
    assert len(reason.detail) <= 2000


def test_long_nvcc_failure_keeps_the_error_lines():
    # nvcc's command lines alone fill the detail's 2000 characters; the diagnostic comes after them.
    command = "/usr/local/cuda/bin/nvcc " + " ".join(f"-I/some/long/include/path/{i}" for i in range(80))
    text = (f"Error building extension 'k_0123456789ab': [1/3] {command}\nFAILED: cuda.cuda.o\n{command}\n"
            "/tmp/ext/k_0123456789ab/cuda.cu(42): error: identifier \"blockDimx\" is undefined\n"
            "1 error detected in the compilation of \"/tmp/ext/k_0123456789ab/cuda.cu\".\n"
            "ninja: build stopped: subcommand failed.\n")
    code, detail = classify_exception(RuntimeError(text), first_call=True)
    assert code == "compile_error"
    assert detail == ("RuntimeError: Error building extension 'k_0123456789ab' | "
                      "/tmp/ext/k_0123456789ab/cuda.cu(42): error: identifier \"blockDimx\" is undefined")


# -- the build cache --------------------------------------------------------------------------------

def test_same_config_is_loaded_not_rebuilt_and_a_new_config_builds_its_own(cpu_seed, extensions_dir):
    module, so, mtime = cpu_seed
    from ratchet import cuda_build

    x, w, eps = _rms_inputs({"T": 3, "H": 40}, torch.bfloat16)
    t0 = time.perf_counter()
    module.kernel(x, w, eps, LANES=8)  # the default config again: the in-process cache
    assert time.perf_counter() - t0 < 0.5
    loaded = len(cuda_build._LOADED)

    _assert_rmsnorm_close(module.kernel(x, w, eps, LANES=4), (x, w, eps), torch.bfloat16)
    assert len(cuda_build._LOADED) == loaded + 1
    built = _built_libraries(extensions_dir)
    assert len(built) == 2 and so in built  # one directory per config: the first build stays
    assert so.stat().st_mtime_ns == mtime


def test_a_fresh_process_reuses_the_build_despite_a_stale_torch_lock(cpu_seed):
    _, so, mtime = cpu_seed
    # A worker killed mid-build leaves torch's lock file behind; torch alone would wait on it forever.
    (so.parent / "lock").touch()
    script = ("import time, torch; from seed_files import import_seed; "
              "m = import_seed('rmsnorm', 'cpu_cpp'); t = time.perf_counter(); "
              "out = m.kernel(torch.ones(2, 8), torch.ones(8), 1e-6); print(time.perf_counter() - t)")
    # tests/ (for seed_files) joins the child's import path through the environment, as pytest's does here.
    path = os.pathsep.join(p for p in (str(Path(__file__).parent), os.environ.get("PYTHONPATH")) if p)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": path})
    assert proc.returncode == 0, proc.stderr
    assert float(proc.stdout.split()[-1]) < 5.0  # loaded: a build takes 10 s or more here
    assert so.stat().st_mtime_ns == mtime
    assert not (so.parent / "lock").exists()


# -- the CUDA seeds, on a GPU -----------------------------------------------------------------------

@pytest.mark.skipif(cpp_extension.CUDA_HOME is not None, reason="checks a torch without a CUDA toolkit")
@pytest.mark.parametrize("task, seed, args", [("rmsnorm", "cuda_vectorized", (torch.ones(2, 8), torch.ones(8), 1e-6)),
                                              ("silu_mul", "cuda_vectorized", (torch.ones(2, 8),)),
                                              ("softmax", "cuda_cluster", (torch.ones(2, 8),)),
                                              ("top_p_sampling", "cuda_cluster", (torch.ones(2, 8), torch.ones(2))),
                                              ("decode_attention", "cuda_cluster",
                                               (torch.ones(1, 4, 64), torch.ones(1, 1, 8, 64), torch.ones(1, 1, 8, 64),
                                                torch.ones(1, dtype=torch.int32)))])
def test_cuda_seeds_build_lazily_and_fail_as_a_build_error_without_cuda(task, seed, args):
    # Importing builds nothing (the judge's import has the short time limit); without a CUDA toolkit
    # (a CPU build of torch has none) the first call is a build failure, which the judge calls
    # compile_error, not a crash in the kernel.
    module = import_seed(task, seed)
    with pytest.raises(RuntimeError, match="Error building extension") as info:
        module.kernel(*args)
    assert classify_exception(info.value, first_call=True)[0] == "compile_error"


# Odd sizes (the scalar path, and rmsnorm's scalar head and tail around an aligned body), sizes that are
# not powers of two, and a decode row.
GPU_RMS_SHAPES = [{"T": 1, "H": 4096}, {"T": 7, "H": 3003}, {"T": 33, "H": 2880}, {"T": 5, "H": 17},
                  {"T": 300, "H": 8192}]
GPU_SILU_SHAPES = [{"T": 1, "I": 14336}, {"T": 7, "I": 3003}, {"T": 33, "I": 1408}, {"T": 5, "I": 17},
                   {"T": 300, "I": 2048}]
# The default config, hints off, and the other end of THREADS / UNROLL: each is one nvcc build.
RMS_CONFIGS = [{}, {"L2_HINTS": 0}, {"THREADS": 1024}]
SILU_CONFIGS = [{}, {"L2_HINTS": 0}, {"THREADS": 128, "UNROLL": 4}]


def _silu_inputs(shape, dtype, seed=0, device="cpu"):
    return SILU_MUL.make_inputs(shape, dtype, device, torch.Generator(device=device).manual_seed(seed))


def _assert_silu_close(out, x, dtype):
    ref = SILU_MUL.reference(x.double())
    assert out.dtype == dtype and out.shape == ref.shape and out.device == x.device
    tol = SILU_MUL.tolerances[dtype]
    torch.testing.assert_close(out.double(), ref, atol=tol.atol, rtol=tol.rtol)


@pytest.mark.gpu
@pytest.mark.parametrize("config", RMS_CONFIGS, ids=str)
def test_cuda_rmsnorm_seed_matches_reference(config):
    module = import_seed("rmsnorm", "cuda_vectorized")
    for dtype in RMSNORM.dtypes:
        for shape in GPU_RMS_SHAPES:
            inputs = _rms_inputs(shape, dtype, seed=2, device="cuda")
            _assert_rmsnorm_close(module.kernel(*inputs, **config), inputs, dtype)
        # A base pointer off the 16-byte grid: the all-scalar path.
        x, w, eps = _rms_inputs({"T": 9, "H": 4096}, dtype, seed=3, device="cuda")
        shifted = torch.cat([x.new_zeros(1), x.flatten()])[1:].view(9, 4096)
        assert shifted.data_ptr() % 16 != 0
        _assert_rmsnorm_close(module.kernel(shifted, w, eps, **config), (shifted, w, eps), dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("config", SILU_CONFIGS, ids=str)
def test_cuda_silu_mul_seed_matches_reference(config):
    module = import_seed("silu_mul", "cuda_vectorized")
    for dtype in SILU_MUL.dtypes:
        for shape in GPU_SILU_SHAPES:
            (x,) = _silu_inputs(shape, dtype, seed=2, device="cuda")
            _assert_silu_close(module.kernel(x, **config), x, dtype)
        (x,) = _silu_inputs({"T": 9, "I": 2048}, dtype, seed=3, device="cuda")
        shifted = torch.cat([x.new_zeros(1), x.flatten()])[1:].view(9, 4096)
        assert shifted.data_ptr() % 16 != 0
        _assert_silu_close(module.kernel(shifted, **config), shifted, dtype)


@pytest.mark.gpu
def test_cuda_seeds_replay_under_a_cuda_graph():
    # The judge times microsecond shapes under CUDA-graph replay: the launch must go to the current stream.
    rms, silu = import_seed("rmsnorm", "cuda_vectorized"), import_seed("silu_mul", "cuda_vectorized")
    x, w, eps = _rms_inputs({"T": 4, "H": 4096}, torch.bfloat16, device="cuda")
    (g,) = _silu_inputs({"T": 4, "I": 3003}, torch.bfloat16, device="cuda")
    rms.kernel(x, w, eps), silu.kernel(g)  # built and warm before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = rms.kernel(x, w, eps), silu.kernel(g)
    x.copy_(_rms_inputs({"T": 4, "H": 4096}, torch.bfloat16, seed=9, device="cuda")[0])
    g.copy_(_silu_inputs({"T": 4, "I": 3003}, torch.bfloat16, seed=9, device="cuda")[0])
    graph.replay()
    torch.cuda.synchronize()
    _assert_rmsnorm_close(outs[0], (x, w, eps), torch.bfloat16)
    _assert_silu_close(outs[1], g, torch.bfloat16)


# The cluster softmax: odd N (the one-element path), a row wider than a cluster's registers (151937: the
# rounds path), short rows (one block), a decode row, and every build of its SPACE.
GPU_SOFTMAX_SHAPES = [{"M": 64, "N": 128256}, {"M": 1, "N": 129280}, {"M": 7, "N": 3001}, {"M": 5, "N": 100003},
                      {"M": 3, "N": 151937}, {"M": 300, "N": 1024}, {"M": 2, "N": 17}, {"M": 1, "N": 1}]


def _assert_softmax_close(out, x):
    tol = SOFTMAX.tolerances[x.dtype]
    assert out.dtype == x.dtype and out.shape == x.shape
    torch.testing.assert_close(out.double(), SOFTMAX.reference(x.double()), atol=tol.atol, rtol=tol.rtol)


@pytest.mark.gpu
def test_cuda_softmax_cluster_seed_matches_reference():
    module = import_seed("softmax", "cuda_cluster")
    configs = load_candidate(Path(SOFTMAX.seeds_dir) / "cuda_cluster.py").valid_configs()
    assert len(configs) == 16  # 8 builds (THREADS x PER_THREAD x SMEM_PER_THREAD), clusters of at most 8 and 4
    gen = torch.Generator(device="cuda").manual_seed(0)
    for config in configs:
        for shape in GPU_SOFTMAX_SHAPES:
            for dtype in SOFTMAX.dtypes:
                (x,) = SOFTMAX.make_inputs(shape, dtype, "cuda", gen)
                _assert_softmax_close(module.kernel(x, **config), x)
        # A base pointer off the 16-byte grid: the one-element path on an even N.
        (x,) = SOFTMAX.make_inputs({"M": 9, "N": 4096}, torch.bfloat16, "cuda", gen)
        shifted = torch.cat([x.new_zeros(1), x.flatten()])[1:].view(9, 4096)
        assert shifted.data_ptr() % 16 != 0
        _assert_softmax_close(module.kernel(shifted, **config), shifted)


@pytest.mark.gpu
def test_cuda_softmax_cluster_replays_under_a_cuda_graph():
    module = import_seed("softmax", "cuda_cluster")
    gen = torch.Generator(device="cuda").manual_seed(1)
    # 8 blocks per row (with a shared-memory part, and without), and 4 for a config that caps clusters there.
    registers_only = {"PER_THREAD": 64, "SMEM_PER_THREAD": 0}
    for shape, config in (({"M": 64, "N": 128256}, {}), ({"M": 64, "N": 128256}, registers_only),
                          ({"M": 2, "N": 128256}, {"MAX_CLUSTER": 4})):
        (x,) = SOFTMAX.make_inputs(shape, torch.float32, "cuda", gen)
        module.kernel(x, **config)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = module.kernel(x, **config)
        x.copy_(SOFTMAX.make_inputs(shape, torch.float32, "cuda", gen)[0])
        graph.replay()
        torch.cuda.synchronize()
        _assert_softmax_close(out, x)
