"""The workloads (``ratchet.e2e.workloads``): tiny llama and deepseek on the CPU against a plain reference.

The reference below is written apart from the workloads: no registry, no KV cache, no absorbed MLA,
no grouped GEMM; every position recomputed from the whole sequence with explicit causal attention and a
per-token MoE loop. It reads the workloads' weights by name.
"""

import math
import sys
from collections import Counter

import pytest
import torch
import torch.nn.functional as F

from ratchet.task import BUILTIN_TASKS_DIR, load_task
from ratchet.e2e.workloads import GraphCaptureError, OpRegistry, build, decode, prefill
from ratchet.e2e.workloads.core import CACHE_ALIGN
from ratchet.e2e.workloads.registry import OPS, reference as op_reference

TASKS = BUILTIN_TASKS_DIR
ATOL = RTOL = 1e-4  # fp32 throughout; reductions in another order differ by ~1e-6


# -- the plain reference -------------------------------------------------------------------------------
def _norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _rope(x, theta):
    """x [S, heads, D] at positions 0..S-1, rotate-half."""
    S, _, D = x.shape
    inv = 1.0 / theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D)
    ang = torch.outer(torch.arange(S, dtype=torch.float64), inv)
    c, s = ang.cos().float()[:, None], ang.sin().float()[:, None]
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1)


def _attend(q, k, v, scale):
    """Causal attention, q [S, Hq, d], k [S, Hkv, d], v [S, Hkv, dv], kv heads repeated for GQA."""
    S, Hq = q.shape[:2]
    k = k.repeat_interleave(Hq // k.shape[1], dim=1)
    v = v.repeat_interleave(Hq // v.shape[1], dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, k) * scale
    future = torch.ones(S, S, dtype=torch.bool).triu(1)
    probs = scores.masked_fill(future, float("-inf")).softmax(-1)
    return torch.einsum("hqk,khd->qhd", probs, v)


def _swiglu(x, w_gate_up, w_down):
    gate, up = (x @ w_gate_up.T).chunk(2, dim=-1)
    return (F.silu(gate) * up) @ w_down.T


def _llama_attention(attn, x, c):
    S = x.shape[0]
    q = _rope((x @ attn.wq.T).view(S, c.n_heads, c.head_dim), c.rope_theta)
    k = _rope((x @ attn.wk.T).view(S, c.n_kv_heads, c.head_dim), c.rope_theta)
    v = (x @ attn.wv.T).view(S, c.n_kv_heads, c.head_dim)
    return _attend(q, k, v, c.head_dim ** -0.5).reshape(S, -1) @ attn.wo.T


def _mla_attention(attn, x, c):
    S, H, dn, R = x.shape[0], c.n_heads, c.qk_nope_dim, c.kv_lora_rank
    q = (_norm(x @ attn.wq_a.T, attn.q_norm, c.eps) @ attn.wq_b.T).view(S, H, -1)
    ckv = x @ attn.wkv_a.T
    kv = (_norm(ckv[:, :R], attn.kv_norm, c.eps) @ attn.wkv_b.T).view(S, H, -1)
    k_pe = _rope(ckv[:, None, R:], c.rope_theta).expand(S, H, c.qk_rope_dim)
    q = torch.cat([q[..., :dn], _rope(q[..., dn:], c.rope_theta)], dim=-1)
    k = torch.cat([kv[..., :dn], k_pe], dim=-1)
    out = _attend(q, k, kv[..., dn:], (dn + c.qk_rope_dim) ** -0.5)
    return out.reshape(S, -1) @ attn.wo.T


def _moe(moe, x, c):
    out = _swiglu(x, moe.shared.w_gate_up, moe.shared.w_down)
    for t in range(x.shape[0]):
        scores = torch.sigmoid(moe.gate @ x[t])
        choice = scores + moe.bias
        groups = choice.view(8, 32).topk(2).values.sum(-1).topk(4).indices
        allowed = torch.full_like(choice, float("-inf")).view(8, 32)
        allowed[groups] = choice.view(8, 32)[groups]
        ids = allowed.flatten().topk(8).indices
        weights = scores[ids] / scores[ids].sum() * 2.5
        for w, e in zip(weights, ids):
            out[t] += w * _swiglu(x[t], moe.w_gate_up[e], moe.w_down[e])
    return out


def reference_logits(model, tokens):
    """fp32 logits [S, V] for one sequence [S], every position recomputed from scratch."""
    c = model.config
    h = model.embed[tokens]
    for i, layer in enumerate(model.layers):
        x = _norm(h, layer.attn_norm, c.eps)
        h = h + (_llama_attention if model.name == "llama" else _mla_attention)(layer.attn, x, c)
        x = _norm(h, layer.mlp_norm, c.eps)
        if hasattr(layer.mlp, "gate"):
            h = h + _moe(layer.mlp, x, c)
        else:
            h = h + _swiglu(x, layer.mlp.w_gate_up, layer.mlp.w_down)
    return _norm(h, model.final_norm, c.eps) @ model.lm_head.T


@pytest.fixture(scope="module", params=["llama", "deepseek"])
def model(request):
    return build(request.param, "tiny", registry=OpRegistry())


def _close(a, b, atol=ATOL):
    torch.testing.assert_close(a, b, atol=atol, rtol=RTOL)


# -- correctness of the workloads ----------------------------------------------------------------------
def test_tiny_models_are_small_fp32_and_route_like_deepseek_v3(model):
    c = model.config
    assert c.dtype == torch.float32 and c.n_layers == 2 and c.vocab == 512
    if model.name == "deepseek":
        assert sum(hasattr(layer.mlp, "gate") for layer in model.layers) == 1  # one dense, one MoE layer
        assert (c.n_experts, c.n_groups, c.topk_groups, c.topk, c.route_scale) == (256, 8, 4, 8, 2.5)


def test_decode_logits_match_the_plain_reference(model):
    context, steps = 10, 6
    result = decode(model, batch=2, context_len=context, steps=steps, cuda_graphs=True)  # no graph on a CPU
    assert not result.cuda_graph and result.logits.shape == (steps, 2, model.config.vocab)
    sequence = torch.cat([result.prompt, result.fed], dim=1)
    for b in range(2):
        ref = reference_logits(model, sequence[b])
        _close(result.logits[:, b], ref[context:])
        # Greedy: each step consumed the argmax of the previous position's logits.
        assert torch.equal(result.fed[b], ref[context - 1:-1].argmax(-1))
        assert torch.equal(result.next_tokens[b], ref[-1].argmax())
    assert int(result.cache.seq_lens[0]) == context + steps


def test_prefill_then_decode_equals_prefill_of_the_longer_sequence(model):
    context, steps = 7, 4
    result = decode(model, batch=2, context_len=context, steps=steps, cuda_graphs=False)
    longer = torch.cat([result.prompt, result.fed], dim=1)
    full = prefill(model, batch=2, seq_len=context + steps, tokens=longer, all_logits=True)
    _close(full.logits[:, context:], result.logits.transpose(0, 1))
    last = prefill(model, batch=2, seq_len=context + steps, tokens=longer)  # default: last position only
    _close(last.logits, full.logits[:, -1])


def test_rows_of_one_batch_decode_at_different_lengths(model):
    # A causal prefill's first 5 positions are exactly the cache of the first 5 tokens, so row 1 can be
    # cut back to 5 and decode from there while row 0 continues at 9.
    tokens = torch.randint(0, model.config.vocab, (2, 9), generator=torch.Generator().manual_seed(3))
    cache = model.new_cache(2, 12)
    model.prefill(tokens, cache)
    cache.seq_lens.copy_(torch.tensor([9, 5], dtype=torch.int32))
    nxt = torch.tensor([11, 22])
    logits = model.decode_step(nxt, cache)
    _close(logits[0], reference_logits(model, torch.cat([tokens[0], nxt[:1]]))[-1])
    _close(logits[1], reference_logits(model, torch.cat([tokens[1, :5], nxt[1:]]))[-1])
    assert cache.seq_lens.tolist() == [10, 6]


def test_top_p_decode_samples_through_the_registry():
    m = build("llama", "tiny", registry=OpRegistry())
    with m.ops.record() as calls:
        torch.manual_seed(0)
        result = decode(m, batch=3, context_len=4, steps=3, top_p=0.5, cuda_graphs=False)
    sampled = [c for c in calls if c.task == "top_p_sampling"]
    assert len(sampled) == 4 and sampled[0].shape == {"B": 3, "V": 512}  # after the prefill and each step
    # Every sampled token is in its row's nucleus (top_p 0.5 of the softmax of its logits).
    for logits, token in zip(result.logits, torch.cat([result.fed[:, 1:], result.next_tokens[:, None]], 1).T):
        probs = logits.softmax(-1)
        above = (probs * (probs > probs.gather(1, token[:, None]))).sum(-1)
        assert (above < 0.5).all()


# -- the registry: swapping kernels and recording shapes ---------------------------------------------------
def _logits(model, **kw):
    torch.manual_seed(0)
    return decode(model, batch=2, context_len=6, steps=3, cuda_graphs=False, **kw).logits


WRONG_RMSNORM = '''
import torch
SPACE = {"SCALE": [1.0]}

def kernel(x, weight, eps, SCALE=1.0):
    # Forgets the weight.
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * SCALE
'''


def test_a_wrong_installed_kernel_changes_the_logits_and_restore_undoes_it(model, tmp_path):
    base = _logits(model)
    path = tmp_path / "wrong_rmsnorm.py"
    path.write_text(WRONG_RMSNORM)
    with model.ops.install("rmsnorm", path, {"SCALE": 1.0}) as kernel:
        assert model.ops.get("rmsnorm") is kernel
        wrong = _logits(model)
    assert (wrong - base).abs().max() > 1e-2
    assert model.ops.get("rmsnorm") is op_reference("rmsnorm")
    _close(_logits(model), base, atol=0)


@pytest.mark.parametrize("op", ["rmsnorm", "add_rmsnorm", "silu_mul", "rope", "decode_attention", "moe_route"])
def test_the_cpu_seeds_swap_in_without_changing_the_logits(op):
    # The deepseek workload calls all six ops; a seed that runs them differently but correctly agrees.
    m = build("deepseek", "tiny", registry=OpRegistry())
    base = _logits(m)
    seed = TASKS / op / "seeds" / "cpu_torch.py"
    calls = []
    with m.ops.install(op, seed) as kernel, m.ops.use(op, lambda *a: calls.append(1) or kernel(*a)):
        swapped = _logits(m)
    assert calls, f"the installed {op} kernel never ran"
    _close(swapped, base, atol=2e-5)


def test_a_loaded_kernel_runs_as_judged_inside_torch_compile():
    # Dynamo must not trace an installed kernel (Inductor would recompile it with its own argument types:
    # on the H200 the split-K attention seed got its scale as fp64 and failed to compile): without an op
    # name, one graph break per call, and the kernel's own output.
    from ratchet.e2e.workloads import load_kernel

    kernel = load_kernel(TASKS / "rmsnorm" / "seeds" / "cpu_torch.py")
    x, w = torch.randn(4, 64), torch.randn(64)

    def step(x, w):
        return kernel(x.relu(), w, 1e-6) * 2.0

    explained = torch._dynamo.explain(step)(x, w)
    assert explained.graph_break_count == 1
    _close(step(x, w), op_reference("rmsnorm")(x.relu(), w, 1e-6) * 2.0, atol=1e-6)


def test_a_kernel_loaded_for_an_op_is_one_custom_op_in_the_compiled_graph():
    # With the op named, the kernel is a torch custom op: no graph break, its outputs' shapes from the
    # reference on fake tensors, and the kernel's own values; tuples come back as tuples.
    from ratchet.e2e.workloads import load_kernel

    kernel = load_kernel(TASKS / "rmsnorm" / "seeds" / "cpu_torch.py", op="rmsnorm")
    x, w = torch.randn(4, 64), torch.randn(64)

    def step(x, w):
        return kernel(x.relu(), w, 1e-6) * 2.0

    explained = torch._dynamo.explain(step)(x, w)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    assert any("ratchet." in str(node.target) for graph in explained.graphs for node in graph.graph.nodes)
    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    _close(compiled(x, w), op_reference("rmsnorm")(x.relu(), w, 1e-6) * 2.0, atol=1e-6)
    assert load_kernel(TASKS / "rmsnorm" / "seeds" / "cpu_torch.py", op="rmsnorm") is kernel  # defined once

    pair = load_kernel(TASKS / "add_rmsnorm" / "seeds" / "cpu_torch.py", op="add_rmsnorm")
    r = torch.randn(4, 64)
    out = torch.compile(lambda x, r, w: pair(x, r, w, 1e-6), backend="aot_eager", fullgraph=True)(x, r, w)
    assert isinstance(out, tuple) and len(out) == 2
    for got, want in zip(out, op_reference("add_rmsnorm")(x, r, w, 1e-6)):
        _close(got, want, atol=1e-5)


def test_use_swaps_a_function_for_a_block():
    m = build("deepseek", "tiny", registry=OpRegistry())
    base = _logits(m)
    route = op_reference("moe_route")
    with m.ops.use("moe_route", lambda logits, bias: (route(logits, bias)[0] / 2.5, route(logits, bias)[1])):
        unscaled = _logits(m)  # routed weights without DeepSeek-V3's 2.5
    assert (unscaled - base).abs().max() > 1e-3
    _close(_logits(m), base, atol=0)
    with pytest.raises(KeyError):
        m.ops.set("flash_attention", route)


def test_configs_keep_the_real_widths_and_refuse_a_router_the_op_cannot_run():
    from ratchet.e2e.workloads import config_for

    llama, ds = config_for("llama", "full"), config_for("deepseek", "full", n_layers=2)
    assert (llama.hidden, llama.n_heads, llama.n_kv_heads, llama.head_dim, llama.ffn, llama.vocab) == (
        4096, 32, 8, 128, 14336, 128256)
    assert (ds.hidden, ds.expert_ffn, ds.n_experts, ds.vocab, ds.n_layers) == (7168, 2048, 256, 129280, 2)
    assert llama.dtype == ds.dtype == torch.bfloat16
    with pytest.raises(ValueError):
        config_for("deepseek", "tiny", n_experts=64)
    with pytest.raises(KeyError):
        config_for("mixtral")


def test_the_cache_length_is_rounded_up_to_an_aligned_multiple(model):
    # 32768 + a few steps of slack left the reference's score rows unaligned (3-5x slower attention under
    # torch.compile on the H200): every cache holds a multiple of CACHE_ALIGN positions.
    assert CACHE_ALIGN == 64
    for asked, held in ((70, 128), (64, 64), (1, 64)):
        cache = model.new_cache(2, asked)
        assert {k.shape[-2] for k, v in cache.layers} == {held}
        assert all(v.shape[-2] == held for k, v in cache.layers)


def test_the_record_hook_lists_each_op_call_with_the_tasks_shape_names(model):
    B, c = 3, model.config
    cache = model.new_cache(B, 8)
    L = CACHE_ALIGN  # the cache's length: 8 positions asked for, rounded up
    model.prefill(torch.zeros(B, 4, dtype=torch.int64), cache)
    with model.ops.record() as calls:
        model.decode_step(torch.zeros(B, dtype=torch.int64), cache)
    got = Counter((call.task, tuple(sorted(call.shape.items()))) for call in calls)

    def key(task, **shape):
        return task, tuple(sorted(shape.items()))

    H, n = c.hidden, c.n_layers
    want = Counter({key("rmsnorm", T=B, H=H): 1, key("add_rmsnorm", T=B, H=H): 2 * n})
    if model.name == "llama":
        want[key("rope", T=B, Hq=c.n_heads, Hkv=c.n_kv_heads, D=c.head_dim)] = n
        want[key("decode_attention", B=B, Hq=c.n_heads, Hkv=c.n_kv_heads, L=L, D=c.head_dim)] = n
        want[key("silu_mul", T=B, I=c.ffn)] = n
    else:
        want[key("rmsnorm", T=B, H=c.q_lora_rank)] = n  # q_norm and kv_norm: 32 wide each here
        want[key("rmsnorm", T=B, H=c.kv_lora_rank)] += n
        want[key("rope", T=B, Hq=c.n_heads, Hkv=1, D=c.qk_rope_dim)] = n
        # Keys are the whole cache entry (latent and rope), values the latent alone (MLA's absorbed decode).
        want[key("decode_attention", B=B, Hq=c.n_heads, Hkv=1, L=L, D=c.kv_lora_rank + c.qk_rope_dim,
                 Dv=c.kv_lora_rank)] = n
        want[key("silu_mul", T=B, I=c.dense_ffn)] = 1
        want[key("moe_route", T=B, E=256)] = 1
        want[key("silu_mul", T=B * 8, I=c.expert_ffn)] = 1  # routed experts: 8 token-slots per token
        want[key("silu_mul", T=B, I=c.expert_ffn)] = 1  # the shared expert
    assert got == want
    assert all(call.dtype == torch.float32 for call in calls)
    for call in calls:  # the names are the task's own: its input maker takes the recorded shape
        task = load_task(call.task)
        assert set(call.shape) in [set(shape) for shape in task.cpu.public]
    assert set(OPS) >= {call.task for call in calls}


# -- the transformers adapter --------------------------------------------------------------------------
def test_hf_adapter_routes_a_llama_model_through_the_registry():
    transformers = pytest.importorskip("transformers")
    from ratchet.e2e.workloads import hf_adapter

    config = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):  # trained norms are not all ones; a dropped weight must show
                p.add_(0.2 * torch.randn_like(p))
    ids = torch.randint(0, 256, (2, 9), generator=torch.Generator().manual_seed(1))

    def logits():
        with torch.no_grad():
            return model(ids, use_cache=False).logits

    base = logits()
    modeling = sys.modules[type(model.model.layers[0].self_attn).__module__]
    original_rope = modeling.apply_rotary_pos_emb
    reg = OpRegistry()
    with hf_adapter.patch(model, ops=("rmsnorm", "silu_mul", "rope"), registry=reg) as patch:
        assert patch.counts == {"rmsnorm": 5, "silu_mul": 2, "rope": 1}
        with reg.record() as calls:
            patched = logits()
        with reg.use("silu_mul", lambda x: op_reference("silu_mul")(x) * 1.1):
            wrong = logits()
    _close(patched, base, atol=1e-5)
    assert (wrong - base).abs().max() > 1e-3
    got = Counter((c.task, tuple(sorted(c.shape.items()))) for c in calls)
    assert got == Counter({("rmsnorm", (("H", 64), ("T", 18))): 5, ("silu_mul", (("I", 96), ("T", 18))): 2,
                           ("rope", (("D", 16), ("Hkv", 2), ("Hq", 4), ("T", 18))): 2})
    # Restored: the modules' own forwards and the module-wide rope function are back.
    assert modeling.apply_rotary_pos_emb is original_rope
    assert "forward" not in model.model.norm.__dict__ and "forward" not in model.model.layers[0].mlp.__dict__
    with reg.record() as calls:
        _close(logits(), base, atol=0)
    assert calls == []


# -- CUDA graphs (GPU only) --------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("name", ["llama", "deepseek"])
def test_graph_decode_matches_eager_decode(name):
    # bf16: torch's grouped GEMM on CUDA takes bf16 only.
    m = build(name, "tiny", device="cuda", dtype=torch.bfloat16, registry=OpRegistry())
    eager = decode(m, batch=4, context_len=33, steps=5, cuda_graphs=False)
    graphed = decode(m, batch=4, context_len=33, steps=5, cuda_graphs=True)
    assert graphed.cuda_graph and not eager.cuda_graph
    assert torch.equal(graphed.prompt, eager.prompt)
    torch.testing.assert_close(graphed.logits, eager.logits, atol=2e-2, rtol=2e-2)
    assert (graphed.fed == eager.fed).float().mean() > 0.9  # greedy picks; bf16 near-ties may flip one


@pytest.mark.gpu
def test_top_p_sampling_runs_inside_the_graph():
    m = build("llama", "tiny", device="cuda", dtype=torch.bfloat16, registry=OpRegistry())
    torch.manual_seed(0)
    result = decode(m, batch=8, context_len=16, steps=6, cuda_graphs=True, top_p=0.9)
    assert result.cuda_graph
    assert ((result.fed >= 0) & (result.fed < m.config.vocab)).all()
    assert len(set(result.fed.flatten().tolist())) > 6  # draws, not one repeated token


@pytest.mark.gpu
def test_an_op_that_syncs_breaks_the_capture_loudly():
    m = build("llama", "tiny", device="cuda", dtype=torch.bfloat16, registry=OpRegistry())
    rmsnorm = op_reference("rmsnorm")

    def syncing(x, weight, eps):
        _ = float(x.abs().max())  # a host read: illegal while a graph is captured
        return rmsnorm(x, weight, eps)

    with m.ops.use("rmsnorm", syncing):
        with pytest.raises(GraphCaptureError) as info:
            decode(m, batch=2, context_len=8, steps=2, cuda_graphs=True)
    assert info.value.op == "rmsnorm" and "rmsnorm" in str(info.value)


@pytest.mark.gpu
@pytest.mark.parametrize("name,layers", [("llama", 2), ("deepseek", 2)])
def test_full_width_decode_runs_in_a_graph(name, layers):
    m = build(name, "full", device="cuda", n_layers=layers, registry=OpRegistry())
    result = decode(m, batch=2, context_len=64, steps=3, cuda_graphs=True, keep_logits="last")
    assert result.cuda_graph and torch.isfinite(result.logits).all()
    assert result.logits.shape == (1, 2, m.config.vocab)
    assert math.isfinite(float(result.logits.std())) and float(result.logits.std()) > 0


def test_a_compiled_decode_step_is_one_graph_with_and_without_an_installed_kernel():
    # The registry's lookups must not break dynamo's graph: a glob in the reference lookup broke it at
    # every op, which weakened the torch.compile baseline of the e2e tables; an installed kernel is one
    # custom op in the graph (torch.compiler.disable broke it at every call).
    import functools

    model = build("llama", "tiny", registry=OpRegistry())
    cache = model.new_cache(2, 16)
    cache.seq_lens.fill_(5)
    tokens = torch.randint(0, 100, (2,), generator=torch.Generator().manual_seed(0))
    step = functools.partial(type(model).decode_step.__wrapped__, model)

    def explain():
        torch._dynamo.reset()
        with torch.no_grad():
            return torch._dynamo.explain(step)(tokens, cache)

    plain = explain()
    assert (plain.graph_count, plain.graph_break_count) == (1, 0), plain.break_reasons[:1]
    with model.ops.install("decode_attention", TASKS / "decode_attention" / "seeds" / "cpu_torch.py"):
        swapped = explain()
    assert (swapped.graph_count, swapped.graph_break_count) == (1, 0), swapped.break_reasons[:1]
    targets = {str(node.target) for graph in swapped.graphs for node in graph.graph.nodes}
    assert any(t.startswith("ratchet.decode_attention_") for t in targets), sorted(targets)[:5]


def test_the_compiled_deepseek_step_writes_its_cache_in_place():
    # The decode step writes one cache entry per row. Written through `cache[rows, 0, pos]`, Inductor
    # lowered the index_put through that select view to a copy of the whole cache (one kv head: all of
    # it) and a copy back, every layer (2.8 ms per step at 32k on the H200): no buffer of the generated
    # code may be as large as a layer's cache.
    import functools
    import re

    from torch._inductor.utils import run_and_get_code

    model = build("deepseek", "tiny", registry=OpRegistry(), dtype=torch.bfloat16, n_layers=1)
    cache = model.new_cache(2, 4096)
    cache.seq_lens.fill_(5)
    tokens = torch.randint(0, 100, (2,), generator=torch.Generator().manual_seed(0))
    step = torch.compile(functools.partial(type(model).decode_step.__wrapped__, model), dynamic=False)
    torch._dynamo.reset()
    with torch.no_grad():
        _, codes = run_and_get_code(step, tokens, cache)
    layer_cache = cache.layers[0][0].numel()
    sizes = [math.prod(int(d) for d in dims.split(",") if d.strip())
             for code in codes for dims in re.findall(r"empty_strided_\w+\(\(([\d, ]*)\)", code)]
    assert sizes and max(sizes) < layer_cache, (max(sizes), layer_cache)


@pytest.mark.parametrize("op", OPS)
def test_every_op_is_a_custom_op_that_compiles_whole_with_the_kernels_values(op):
    # Each op's schema and fake (the task's reference on fake tensors) carry its outputs' shapes and dtypes
    # through a whole-graph compile; the values are the kernel's own (same RNG seed for the sampler).
    from ratchet.e2e.workloads import load_kernel

    task = load_task(op)
    seeds = sorted((TASKS / op / "seeds").glob("cpu_*.py"))
    kernel = load_kernel(seeds[0], op=op)
    inputs = task.make_inputs(task.cpu.public[0], task.dtypes[0], "cpu", torch.Generator().manual_seed(0))
    torch._dynamo.reset()
    compiled = torch.compile(lambda *args: kernel(*args), backend="aot_eager", fullgraph=True)
    torch.manual_seed(0)
    got = compiled(*inputs)
    torch.manual_seed(0)
    want = kernel(*inputs)
    got, want = (got if isinstance(got, tuple) else (got,)), (want if isinstance(want, tuple) else (want,))
    assert len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(got, want))
