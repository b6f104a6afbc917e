"""Models as the user has them (ratchet.e2e.models): every decoder family from a tiny random config, its
ops routed through the registry where the math matches, decode over a static cache and prefill giving
the unadapted model's logits; transformers directories with and without weights; module:function."""

import copy
import json
import re
import textwrap

import pytest
import torch

transformers = pytest.importorskip("transformers")

from ratchet.e2e.models import ModelError, families, kind_of, load_model, model_key, wrap  # noqa: E402
from ratchet.e2e.models.adapter import adapt  # noqa: E402
from ratchet.e2e.workloads import OpRegistry  # noqa: E402
from ratchet.e2e.workloads.registry import reference  # noqa: E402

# Per family: modules the adapter must swap (norms count q/k norms too; Gemma's MLP is GELU, so it stays).
EXPECTED = {
    "llama": {"norm": 5, "mlp": 2, "rope": 1, "attention": 2, "router": 0, "experts": 0},
    "qwen2": {"norm": 5, "mlp": 2, "rope": 1, "attention": 2, "router": 0, "experts": 0},
    "qwen3": {"norm": 9, "mlp": 2, "rope": 1, "attention": 2, "router": 0, "experts": 0},
    "mistral": {"norm": 5, "mlp": 2, "rope": 1, "attention": 2, "router": 0, "experts": 0},
    "gemma": {"norm": 5, "mlp": 0, "rope": 1, "attention": 2, "router": 0, "experts": 0},
    "mixtral": {"norm": 5, "mlp": 0, "rope": 1, "attention": 2, "router": 2, "experts": 2},
    "qwen3_moe": {"norm": 9, "mlp": 0, "rope": 1, "attention": 2, "router": 2, "experts": 2},
    "deepseek_v3": {"norm": 9, "mlp": 2, "rope": 1, "attention": 2, "router": 1, "experts": 1},
}
OPS_CALLED = {
    "llama": {"rmsnorm", "silu_mul", "rope", "decode_attention"},
    "gemma": {"rmsnorm", "rope", "decode_attention"},
    "mixtral": {"rmsnorm", "silu_mul", "rope", "decode_attention", "softmax"},
    "deepseek_v3": {"rmsnorm", "silu_mul", "rope", "decode_attention", "moe_route"},
}


def _pair(family):
    """A random tiny model of ``family`` and an unadapted copy with the same weights and its own config."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    config = families.config(family)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    plain = AutoModelForCausalLM.from_config(copy.deepcopy(config), dtype=torch.float32).eval()
    plain.load_state_dict(model.state_dict())
    return model, plain


@pytest.mark.parametrize("family", families.FAMILIES)
def test_every_family_is_adapted_and_decodes_the_unadapted_logits(family):
    model, plain = _pair(family)
    registry = OpRegistry()
    decoder = wrap(model, registry)
    assert decoder.adaptation.swapped == EXPECTED[family]
    tokens = torch.randint(0, 256, (2, 7), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = plain(input_ids=tokens).logits.float()  # the whole sequence at once, no cache
    cache = decoder.new_cache(2, 16)
    assert cache.max_len == 64 and cache.seq_lens.tolist() == [0, 0]
    with registry.record() as calls:
        last = decoder.prefill(tokens[:, :5], cache)
        step1 = decoder.decode_step(tokens[:, 5].clone(), cache)
        step2 = decoder.decode_step(tokens[:, 6].clone(), cache)
    assert cache.seq_lens.tolist() == [7, 7]
    for got, position in ((last, 4), (step1, 5), (step2, 6)):
        torch.testing.assert_close(got, want[:, position], atol=2e-5, rtol=1e-4)
    if family in OPS_CALLED:
        assert {c.task for c in calls} == OPS_CALLED[family]
    decode_attention = [c for c in calls if c.task == "decode_attention"]
    assert len(decode_attention) == 2 * 2  # two layers, two decode steps; prefill keeps the original path
    decoder.adaptation.restore()
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=tokens).logits, want, atol=0, rtol=0)


@pytest.mark.parametrize("family", families.CACHE_LAYOUTS)
@pytest.mark.parametrize("prefill", [2, 6])
def test_sliding_windows_and_linear_attention_decode_the_unadapted_logits(family, prefill):
    """Decoding past a 4-position window (and a prefill longer than it), and through gated delta nets'
    conv and recurrent states, gives the logits of the whole sequence at once."""
    model, plain = _pair(family)
    decoder = wrap(model, OpRegistry())
    tokens = torch.randint(0, 256, (2, 10), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = plain(input_ids=tokens).logits.float()
    cache = decoder.new_cache(2, 10)
    assert cache.max_len == 64  # the cache's own length, whatever a sliding layer holds
    got = [decoder.prefill(tokens[:, :prefill], cache)]
    got += [decoder.decode_step(tokens[:, i].clone(), cache) for i in range(prefill, 9)]
    assert cache.seq_lens.tolist() == [9, 9] and cache.host_len == 9
    for position, logits in enumerate(got, start=prefill - 1):
        torch.testing.assert_close(logits, want[:, position], atol=2e-5, rtol=1e-4)
    # A second prefill starts every state afresh: the same logits again.
    torch.testing.assert_close(decoder.prefill(tokens[:, :prefill], cache), got[0], atol=0, rtol=0)


@pytest.mark.parametrize("family", families.CACHE_LAYOUTS)
def test_decode_after_a_random_fill_past_the_window(family):
    """The gate fills the cache at a context without prefilling it: a sliding layer then rolls its full
    window, a linear layer steps its states, and the KVCache view holds the attention layers only."""
    from ratchet.e2e.workloads.runner import fill_random

    model, _ = _pair(family)
    decoder = wrap(model, OpRegistry())
    cache = decoder.new_cache(2, 32)
    attention = sum(1 for t in model.config.layer_types if t != "linear_attention")
    assert len(cache.layers) == attention
    fill_random(decoder, cache, 20)
    first = decoder.decode_step(torch.tensor([3, 5]), cache)
    second = decoder.decode_step(torch.tensor([7, 9]), cache)
    assert cache.seq_lens.tolist() == [22, 22] and torch.isfinite(first).all() and torch.isfinite(second).all()
    for layer in cache.static.layers:
        if hasattr(layer, "cumulative_length_int"):  # a sliding window: full, so every step rolled it
            assert layer.cumulative_length_int == 22 and layer.keys.shape[2] == 4


def test_a_swapped_op_runs_what_the_registry_holds():
    """The registry is really in the path: a kernel that doubles rmsnorm's output changes the logits,
    and setting the reference back restores them."""
    model, _ = _pair("llama")
    registry = OpRegistry()
    decoder = wrap(model, registry)
    tokens = torch.randint(0, 256, (1, 6), generator=torch.Generator().manual_seed(2))
    base = decoder.prefill(tokens, decoder.new_cache(1, 8))
    with registry.use("rmsnorm", lambda x, w, eps: 2 * reference("rmsnorm")(x, w, eps)):
        doubled = decoder.prefill(tokens, decoder.new_cache(1, 8))
    assert (doubled - base).abs().max() > 1e-3
    torch.testing.assert_close(decoder.prefill(tokens, decoder.new_cache(1, 8)), base, atol=0, rtol=0)


def test_gemma_norm_is_matched_as_one_plus_weight():
    model, _ = _pair("gemma")
    norm = model.model.norm
    with torch.no_grad():
        norm.weight.normal_(0.0, 0.3)
    registry = OpRegistry()
    seen = []
    adaptation = adapt(model, registry, ("norm",))
    with registry.use("rmsnorm", lambda x, w, eps: seen.append(w.clone()) or reference("rmsnorm")(x, w, eps)):
        x = torch.randn(3, 64)
        out = norm(x)
    torch.testing.assert_close(seen[-1], 1.0 + norm.weight.detach())
    adaptation.restore()
    torch.testing.assert_close(out, norm(x))


def test_a_module_whose_math_differs_keeps_its_own_forward():
    """Matching is by math: a norm scaled by 2, an MLP with GELU and a router that does not renormalize
    all look like the real thing by their attributes and are left alone."""
    from torch import nn

    class ScaledNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.rand(8) + 0.5)  # 2w is neither w nor 1 + w
            self.variance_epsilon = 1e-6

        def forward(self, x):
            return 2 * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight

    class GeluMLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_proj, self.up_proj, self.down_proj = nn.Linear(8, 16), nn.Linear(8, 16), nn.Linear(16, 8)

        def forward(self, x):
            return self.down_proj(nn.functional.gelu(self.gate_proj(x)) * self.up_proj(x))

    holder = nn.Module()
    holder.norm, holder.mlp = ScaledNorm(), GeluMLP()
    result = adapt(holder, OpRegistry(), ("norm", "mlp"))
    assert result.swapped["norm"] == 0 and result.swapped["mlp"] == 0
    assert {k for _, k, _ in result.kept} == {"norm", "mlp"}
    assert "forward" not in holder.norm.__dict__ and "forward" not in holder.mlp.__dict__


def test_a_gated_norm_is_not_taken_for_a_plain_one():
    """A norm whose optional ``gate`` is absent computes plain RMSNorm (GraniteMoE-Hybrid's Mamba norm),
    so a probe on the input alone matches; the model passes the gate, so it keeps its own forward."""
    from torch import nn

    class GatedNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight, self.variance_epsilon = nn.Parameter(torch.rand(8) + 0.5), 1e-6

        def forward(self, x, gate=None):
            if gate is not None:
                x = x * nn.functional.silu(gate)
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight

    holder = nn.Module()
    holder.norm = GatedNorm()
    result = adapt(holder, OpRegistry(), ("norm",))
    assert result.swapped["norm"] == 0
    assert result.kept == [("norm", "norm", "its forward takes more than the input")]
    x, gate = torch.randn(3, 8), torch.randn(3, 8)
    want = x * nn.functional.silu(gate)
    want = want * torch.rsqrt(want.pow(2).mean(-1, keepdim=True) + 1e-6) * holder.norm.weight
    torch.testing.assert_close(holder.norm(x, gate), want)


def test_attention_with_another_scale_stays_on_the_original():
    model, plain = _pair("llama")
    for layer in model.model.layers:
        layer.self_attn.scaling = 0.5  # not 1/sqrt(head_dim): decode_attention's math does not cover it
    for layer in plain.model.layers:
        layer.self_attn.scaling = 0.5
    registry = OpRegistry()
    decoder = wrap(model, registry)
    assert decoder.adaptation.swapped["attention"] == 0
    tokens = torch.randint(0, 256, (1, 5), generator=torch.Generator().manual_seed(3))
    cache = decoder.new_cache(1, 8)
    decoder.prefill(tokens[:, :4], cache)
    with registry.record() as calls:
        got = decoder.decode_step(tokens[:, 4].clone(), cache)
    assert "decode_attention" not in {c.task for c in calls}
    with torch.no_grad():
        torch.testing.assert_close(got, plain(input_ids=tokens).logits[:, -1].float(), atol=2e-5, rtol=1e-4)


def test_config_directory_random_and_saved_weights(tmp_path):
    folder = families.write("qwen3", tmp_path / "random")
    assert kind_of(str(folder)) == kind_of(str(folder / "config.json")) == "transformers"
    a = load_model(str(folder), device="cpu", seed=5)
    b = load_model(str(folder / "config.json"), device="cpu", seed=5)
    tokens = torch.randint(0, 256, (1, 6), generator=torch.Generator().manual_seed(4))
    torch.testing.assert_close(a.prefill(tokens, a.new_cache(1, 8)), b.prefill(tokens, b.new_cache(1, 8)))
    # With weights saved next to the config they are loaded (not drawn): other seed, same logits.
    saved = tmp_path / "saved"
    a.adaptation.restore()
    a.hf.save_pretrained(saved)
    assert list(saved.glob("*.safetensors"))
    c = load_model(str(saved), device="cpu", seed=99)
    torch.testing.assert_close(c.prefill(tokens, c.new_cache(1, 8)), b.prefill(tokens, b.new_cache(1, 8)),
                               atol=1e-5, rtol=1e-5)


def test_module_function_models(tmp_path):
    source = tmp_path / "my_models.py"
    source.write_text(textwrap.dedent("""
        import torch
        from transformers import AutoModelForCausalLM
        from ratchet.e2e.models import families

        def lm():
            torch.manual_seed(0)
            return AutoModelForCausalLM.from_config(families.config("mistral")), (torch.zeros(1, 4, dtype=torch.long),)

        def block():
            return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.SiLU()), torch.randn(4, 8)

        def not_a_module():
            return 42
    """))
    decoder = load_model(f"{source}:lm")
    assert decoder.adaptation.swapped["attention"] == 2 and decoder.config.vocab == 256
    workload = load_model(f"{source}:block")
    assert workload.name.endswith(":block") and not workload.decodes
    with pytest.raises(ModelError, match="not a torch.nn.Module"):
        load_model(f"{source}:not_a_module")
    with pytest.raises(ModelError, match="has no function"):
        load_model(f"{source}:missing")


def test_bad_model_arguments_are_one_line(tmp_path):
    with pytest.raises(ModelError, match="neither a built-in workload"):
        kind_of("no-such-model")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match="no config.json"):
        load_model(str(tmp_path / "empty"))
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({"model_type": "no_such_family"}))
    with pytest.raises(ModelError, match="not a transformers config"):
        load_model(str(bad))
    assert model_key("llama") == "llama" and model_key(str(bad)).startswith("bad_")
    # A module:function refused from its text alone, before anything is imported or recorded.
    from ratchet.e2e.models import check_spec

    for spec, words in (('{"BLOCK": 1}', "' 1}' is not a function name"),
                        ('{"BLOCK":build', 'cannot import {"BLOCK" (no such module)'),
                        ("no_such_module_here:build", "cannot import no_such_module_here (no such module)"),
                        (f"{tmp_path / 'missing.py'}:build", "no file"),
                        ("json:", "is not a function name")):
        with pytest.raises(ModelError, match=re.escape(words)):
            check_spec(spec)
    assert check_spec("json:dumps") == "module"  # found, not imported by the check


@pytest.mark.parametrize("family", families.FAMILIES)
def test_every_family_profiles_with_its_ops_mapped_to_tasks(family, tmp_path):
    from ratchet.e2e.profile import amdahl, profile_workload

    folder = families.write(family, tmp_path / family)
    prof = profile_workload(str(folder), "tiny", "cpu", batch=1, context=8, prefill_len=8, steps=1)
    assert [p.name for p in prof.phases] == ["decode", "prefill"]
    tasks = {r.task for r in prof.worth_a_run}
    assert OPS_CALLED.get(family, {"rmsnorm", "rope", "decode_attention"}) <= tasks
    for phase in prof.phases:
        assert sum(o.share for o in phase.ops) + phase.other_share == pytest.approx(1.0, abs=1e-6)
        for op in phase.ops:
            assert op.speedup_if_free == pytest.approx(amdahl(op.share))
    assert "aten::linear" in {r.name for r in prof.no_task}  # the GEMMs: extractable, no built-in task


def test_profile_names_the_modules_no_task_can_be_made_of(tmp_path, capsys):
    """Qwen3-Next's gated delta nets run most of its step in ops no task covers, and their forward takes
    the cache: the profile says so, for them and not for the decoder layers around them."""
    from ratchet.cli import main
    from ratchet.e2e.profile import profile_workload

    folder = families.write("qwen3_next", tmp_path / "qwen3_next")
    prof = profile_workload(str(folder), "tiny", "cpu", batch=1, context=8, prefill_len=8, steps=1)
    named = {name.rsplit(".", 1)[-1]: (paths, score, why) for name, paths, score, why in prof.modules_not_remade}
    assert set(named) == {"Qwen3NextGatedDeltaNet"}, named
    paths, score, why = named["Qwen3NextGatedDeltaNet"]
    assert paths == tuple(f"model.layers.{i}.linear_attn" for i in range(3))
    assert score > 0.05 and re.fullmatch(r"takes a \w*Cache \(\w+\)", why), why
    chosen = {m.name.rsplit(".", 1)[-1] for m in prof.modules_no_task}
    assert "Qwen3NextSparseMoeBlock" in chosen and not chosen & set(named)
    assert main(["profile", str(folder), "--device", "cpu", "--steps", "1", "--batch", "1", "--context", "8"]) == 0
    out = capsys.readouterr().out
    assert "Modules no task can be made of" in out and f"its forward {why}" in out


def test_profile_cli_on_a_forward_only_module(tmp_path, capsys):
    from ratchet.cli import main

    source = tmp_path / "block.py"
    source.write_text(textwrap.dedent("""
        import torch
        from torch import nn

        class Norm(nn.Module):
            def __init__(self):
                super().__init__()
                self.weight, self.eps = nn.Parameter(torch.rand(64) + 0.5), 1e-6

            def forward(self, x):
                return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight

        def block():
            return nn.Sequential(nn.Linear(64, 64), Norm()), (torch.randn(32, 64),)
    """))
    assert main(["profile", f"{source}:block", "--device", "cpu", "--steps", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [p["name"] for p in out["phases"]] == ["prefill"]
    assert out["phases"][0]["setting"] == {"forward_inputs": [[32, 64]]}
    assert [r["task"] for r in out["worth_a_run"]] == ["rmsnorm"]
    assert main(["profile", "nothing-here", "--device", "cpu"]) == 2
    assert "neither a built-in workload" in capsys.readouterr().err


@pytest.mark.gpu
@pytest.mark.parametrize("family", ["llama", "qwen3_moe", "deepseek_v3", *families.CACHE_LAYOUTS])
def test_a_transformers_decode_step_is_captured_in_a_cuda_graph(family):
    """On a GPU: the adapted model's decode step captured as a CUDA graph gives the eager step's logits."""
    from transformers import AutoModelForCausalLM

    from ratchet.e2e.step_timing import DecodeBench

    torch.manual_seed(0)
    config = families.config(family)
    if family in ("qwen3_moe", "deepseek_v3", "gpt_oss", "qwen3_next"):  # transformers 5.25 refuses it elsewhere
        config._experts_implementation = "grouped_mm"
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()
    decoder = wrap(model, OpRegistry())
    bench = DecodeBench(decoder, 4, 256, slack=16)
    eager = bench.runner(cuda_graph=False).step().float().clone()
    graphed = bench.runner(cuda_graph=True)
    bench.reset()
    torch.testing.assert_close(graphed.step().float(), eager, atol=2e-2, rtol=2e-2)


def _granite_dir(tmp_path, multiplier: float):
    """A tiny Granite config folder (no weights): its attention scales scores by ``attention_multiplier``."""
    from transformers import GraniteConfig

    config = GraniteConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, attention_multiplier=multiplier)
    folder = tmp_path / f"granite_{multiplier}"
    config.save_pretrained(folder)
    return folder


def test_attention_scaled_otherwise_than_decode_attention_is_kept_and_says_why(tmp_path):
    """Granite's attention_multiplier (0.0078 here; 1/sqrt(16) = 0.25 is decode_attention's scale): the
    attention stays the model's, the adaptation says why, and the model still decodes its own logits."""
    own = load_model(str(_granite_dir(tmp_path, 0.0078125)), size="tiny", device="cpu", registry=OpRegistry())
    assert own.adaptation.swapped["attention"] == 0 and own.adaptation.swapped["norm"] == 5
    assert own.adaptation.kept == [(f"model.layers.{i}.self_attn", "attention",
                                    "its scores are scaled by 0.0078125, not 1/sqrt(head_dim) = 0.25 as "
                                    "decode_attention's are") for i in range(2)]
    usual = load_model(str(_granite_dir(tmp_path, 0.25)), size="tiny", device="cpu", registry=OpRegistry())
    assert usual.adaptation.swapped["attention"] == 2 and usual.adaptation.kept == []


def test_profile_notes_say_which_modules_stay_the_models_and_why(tmp_path):
    from ratchet.e2e.profile import profile_workload

    prof = profile_workload(str(_granite_dir(tmp_path, 0.0078125)), size="tiny", device="cpu", steps=1,
                            prefill_len=0)
    assert ("attention not run through its built-in task in 2 module(s) (model.layers.0.self_attn, "
            "model.layers.1.self_attn): its scores are scaled by 0.0078125, not 1/sqrt(head_dim) = 0.25 as "
            "decode_attention's are") in prof.notes
    assert "aten::scaled_dot_product_attention" in {op.name for op in prof.phases[0].ops}



@pytest.mark.parametrize("family", ["exaone4", "olmo3"])
def test_a_sliding_window_layer_keeps_its_attention_and_says_why(family, tmp_path):
    """Layer 0 slides over the last 8 positions, layer 1 attends to all: decode_attention (the whole cache)
    takes layer 1 only, and the adaptation says why layer 0 stays the model's. EXAONE-4's attention
    module carries its window; OLMo-3's does not, and its config's layer_types and window say it."""
    from transformers import AutoConfig

    config = AutoConfig.for_model(family, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, vocab_size=256, sliding_window=8,
                                  layer_types=["sliding_attention", "full_attention"])
    config.save_pretrained(tmp_path / family)
    model = load_model(str(tmp_path / family), size="tiny", device="cpu", registry=OpRegistry())
    assert model.adaptation.swapped["attention"] == 1
    assert [k for k in model.adaptation.kept if k[1] == "attention"] == [
        ("model.layers.0.self_attn", "attention",
         "sliding-window attention (the last 8 positions), where decode_attention attends to the whole cache")]
