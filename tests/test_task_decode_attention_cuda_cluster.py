"""The decode_attention CUDA cluster seed: which inputs its kernel takes (the rest go to split-K), that every
config fits a block's shared memory, and on a GPU: values against the fp32 reference at odd lengths, pieces
that end inside a slab or are empty, strided caches, junk (NaN included) past the lengths, graph replay, the
hand-off to split-K, and the judge."""

from pathlib import Path

import pytest
import torch

from ratchet.candidate import load_candidate
from ratchet.task import ShapeSet
from seed_files import import_seed
from test_task_decode_attention import BF16, MARGIN, SEEDS, TASK, _ratio, _upcast

CONFIGS = load_candidate(SEEDS / "cuda_cluster.py").valid_configs()


@pytest.fixture(scope="module")
def seed():
    return import_seed("decode_attention", "cuda_cluster")


def _tensors(B=1, Hq=32, Hkv=8, L=64, D=128, device="cpu"):
    q = torch.zeros(B, Hq, D, dtype=BF16, device=device)
    k = torch.zeros(B, Hkv, L, D, dtype=BF16, device=device)
    return q, k, k.clone(), torch.full((B,), L, dtype=torch.int32, device=device)


def test_every_config_fits_a_blocks_shared_memory(seed):
    assert len(CONFIGS) == 28  # 2 x 7 (TILE, STAGES) rings x 2 cluster caps
    for config in CONFIGS:
        sizes = {k: v for k, v in config.items() if k != "MAX_CLUSTER"}
        for D in seed.HEAD_SIZES:
            assert seed.shared_bytes(**sizes, D=D) <= seed._SHARED_PER_BLOCK, config
    # The ring dominates: 3 stages of 128 positions, keys and values, 256 bytes a row.
    assert seed.shared_bytes(8, 128, 3) == 1024 + 3 * 2 * 128 * 256 + 4 * (8 * 128 + 16 + 128) + 48


def test_takes_llama_layouts_and_leaves_the_rest_to_split_k(seed):
    assert seed.takes(*_tensors())  # Llama-3-8B
    assert seed.takes(*_tensors(Hq=64, D=128))  # 70B: 8 heads a kv head
    assert seed.takes(*_tensors(B=3, Hq=40, Hkv=8, D=64))  # a group of 5, D 64
    assert not seed.takes(*_tensors(Hq=128, Hkv=1, D=576))  # DeepSeek's MLA: tensor-core tiles in Triton
    assert not seed.takes(*_tensors(Hq=64, Hkv=4))  # 16 heads a kv head
    q, k, v, lens = _tensors()
    assert not seed.takes(q, k, v[..., :64], lens)  # values narrower than keys (MLA's latent alone)
    assert not seed.takes(*_tensors(D=96))  # not a multiple of the 64-wide boxes
    q, k, v, lens = _tensors(L=65)
    assert seed.takes(q, k[:, :, 1:], v[:, :, 1:], lens)  # a view one row in: rows still on 16 bytes
    flat = torch.zeros(8 * 64 * 128 + 4, dtype=BF16)
    odd = flat[4:].view(1, 8, 64, 128)  # 8 bytes in: the copy engine cannot start there
    assert not seed.takes(q, odd, odd, lens)
    assert not seed.takes(q, k.expand(2, -1, -1, -1), v, lens.expand(2))  # a broadcast batch (stride 0)
    turned = k.transpose(1, 2).contiguous().transpose(1, 2)  # [B, L, Hkv, D] seen as [B, Hkv, L, D]
    assert not seed.takes(q, turned, turned, lens)  # a head's rows are not one contiguous run
    assert not seed.takes(q.float(), k, v, lens)
    assert not seed.takes(q, k, v, lens.long())


def _gpu_inputs(shape, seed=0, lengths=None):
    q, k, v, lens = TASK.make_inputs(shape, BF16, "cuda", torch.Generator(device="cuda").manual_seed(seed))
    if lengths is not None:
        lens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    return q, k, v, lens


def _assert_close(out, inputs):
    assert out.dtype == BF16 and out.shape == inputs[0].shape and out.is_cuda
    assert torch.isfinite(out).all()
    ref = TASK.reference(*_upcast(inputs, TASK.reference_dtype))
    assert _ratio(out.cpu(), ref.cpu()) < MARGIN


# Llama-3-8B and 70B at B = 1 (clusters of 8, of 16 in the last config), a batch of 3 with a group of 5
# (clusters of 5), D = 64 with a group of 8, and many pairs (one block a row, no cluster).
GPU_SHAPES = [{"B": 1, "Hq": 32, "Hkv": 8, "L": 4096, "D": 128}, {"B": 1, "Hq": 64, "Hkv": 8, "L": 9000, "D": 128},
              {"B": 3, "Hq": 40, "Hkv": 8, "L": 1001, "D": 128}, {"B": 2, "Hq": 32, "Hkv": 4, "L": 3000, "D": 64},
              {"B": 64, "Hq": 32, "Hkv": 8, "L": 700, "D": 128}]
# The default, the other consumer count with a 64-position tile, and the smallest tile with the most stages
# and the larger cluster cap.
GPU_CONFIGS = [{}, {"CONSUMERS": 4, "TILE": 64, "STAGES": 4}, {"TILE": 32, "STAGES": 6, "MAX_CLUSTER": 16}]


@pytest.mark.gpu
@pytest.mark.parametrize("config", GPU_CONFIGS, ids=str)
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=lambda s: "B{B}-Hq{Hq}-Hkv{Hkv}-L{L}-D{D}".format(**s))
def test_gpu_matches_reference(seed, shape, config):
    inputs = _gpu_inputs(shape)
    assert seed.takes(*inputs)
    _assert_close(seed.kernel(*inputs, **config), inputs)


@pytest.mark.gpu
@pytest.mark.parametrize("lengths", [(1, 4096), (4095, 129), (16, 17), (4096, 2049), (3000, 1)], ids=str)
def test_gpu_edge_lengths(seed, lengths):
    # A length of 1, one short of L, on and one past a 16-position slab, half of L, and rows that leave most
    # pieces of their cluster empty.
    inputs = _gpu_inputs({"B": 2, "Hq": 32, "Hkv": 8, "L": 4096, "D": 128}, seed=1, lengths=lengths)
    for config in GPU_CONFIGS:
        _assert_close(seed.kernel(*inputs, **config), inputs)


@pytest.mark.gpu
def test_gpu_strided_caches_and_nan_junk_past_the_lengths(seed):
    q, k, v, lens = _gpu_inputs({"B": 2, "Hq": 32, "Hkv": 8, "L": 700, "D": 128}, seed=2, lengths=(700, 333))
    # Rows of a longer cache, and a [B, L, Hkv, D] cache seen as [B, Hkv, L, D] (split-K's).
    big_k = torch.zeros(2, 8, 1400, 128, dtype=BF16, device="cuda")
    big_v = torch.zeros_like(big_k)
    big_k[:, :, :700], big_v[:, :, :700] = k, v
    sliced = (q, big_k[:, :, :700], big_v[:, :, :700], lens)
    turned = (q, k.transpose(1, 2).contiguous().transpose(1, 2), v.transpose(1, 2).contiguous().transpose(1, 2), lens)
    assert seed.takes(*sliced) and not seed.takes(*turned)  # the second goes to split-K
    for inputs in (sliced, turned):
        _assert_close(seed.kernel(*inputs), inputs)
    # NaN past a row's length: never read into the result (the reference would turn it into NaN, so the
    # expected values come from the same cache with finite junk).
    poisoned_k, poisoned_v = k.clone(), v.clone()
    poisoned_k[1, :, 333:] = float("nan")
    poisoned_v[1, :, 333:] = float("nan")
    out = seed.kernel(q, poisoned_k, poisoned_v, lens)
    _assert_close(out, (q, k, v, lens))


@pytest.mark.gpu
def test_gpu_replays_under_a_cuda_graph(seed):
    shape = {"B": 1, "Hq": 32, "Hkv": 8, "L": 8192, "D": 128}
    q, k, v, lens = _gpu_inputs(shape, seed=3)
    seed.kernel(q, k, v, lens)  # built and set up outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = seed.kernel(q, k, v, lens)
    fresh = _gpu_inputs(shape, seed=4, lengths=(5000,))
    for mine, new in zip((q, k, v, lens), fresh):
        mine.copy_(new)
    graph.replay()
    _assert_close(out, fresh)


@pytest.mark.gpu
def test_gpu_hands_mla_and_large_batches_to_split_k(seed, monkeypatch):
    calls = []
    real = seed.triton_split_k.kernel
    monkeypatch.setattr(seed.triton_split_k, "kernel", lambda *a, **k: calls.append(a[0].shape) or real(*a, **k))
    mla = _gpu_inputs({"B": 1, "Hq": 128, "Hkv": 1, "L": 1000, "D": 576}, seed=5)
    _assert_close(seed.kernel(*mla), mla)
    many = _gpu_inputs({"B": 256, "Hq": 32, "Hkv": 8, "L": 256, "D": 128}, seed=6)
    _assert_close(seed.kernel(*many), many)
    few = _gpu_inputs({"B": 8, "Hq": 32, "Hkv": 8, "L": 256, "D": 128}, seed=7)
    _assert_close(seed.kernel(*few), few)
    assert calls == [mla[0].shape, many[0].shape]  # B = 8 stays in CUDA


@pytest.mark.gpu
def test_gpu_judge_passes_it(seed):
    import dataclasses

    from ratchet.judge import evaluate
    from ratchet.judge.evaluation import JudgeOptions

    small = dataclasses.replace(TASK, gpu=ShapeSet(public=[{"B": 1, "Hq": 32, "Hkv": 8, "L": 4096, "D": 128},
                                                           {"B": 8, "Hq": 64, "Hkv": 8, "L": 2000, "D": 128}]))
    verdict = evaluate(small, load_candidate(Path(seed.__file__)), None, JudgeOptions(device="cuda", time_it=False))
    assert verdict.verdict == "pass", verdict.reasons
