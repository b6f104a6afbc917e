"""RoPE applied to the new keys while they and the values are written into a paged KV cache (vLLM's
reshape_and_cache after its rotary embedding, fused).

Caches are [NB, BS, Hkv, D] (NB blocks of BS token slots); token t goes to slot slot_mapping[t] (block
slot // BS, offset slot % BS); a slot of -1 is padding and writes nothing. Keys are rotated rotate-half
(NeoX) style with cos, sin [T, D/2] in fp32 math; values are copied.

The judge forbids changing inputs (a cheat could zero them so both sides agree), so the kernel returns the
updated caches as new tensors: (k_cache_out, v_cache_out), equal to the inputs outside the written slots.
The cache pool of a shape holds the blocks its tokens use plus a few, so copying the untouched slots is a
bounded part of the work and counted in the cost model.
"""

import torch

from ratchet.task import Cost, DEFAULT_TOLERANCES, ShapeRange, ShapeSet, Task, decode_weight, tensor_bytes

BLOCK_SIZE = 16  # vLLM's default block size
_SPARE_BLOCKS = 4
_MAX_POSITION = 131072
_THETA = 500000.0  # Llama-3's rotary base


def reference(key, value, cos, sin, k_cache, v_cache, slot_mapping):
    half = key.shape[-1] // 2
    wide = torch.float64 if key.dtype == torch.float64 else torch.float32
    k = key.to(wide)
    c, s = cos.to(wide).unsqueeze(1), sin.to(wide).unsqueeze(1)
    rotated = torch.cat((k[..., :half] * c - k[..., half:] * s, k[..., half:] * c + k[..., :half] * s), dim=-1)
    valid = slot_mapping >= 0
    slots = slot_mapping[valid]
    k_out, v_out = k_cache.clone(), v_cache.clone()
    NB, BS, H, D = k_cache.shape
    k_out.view(NB * BS, H, D)[slots] = rotated[valid].to(k_cache.dtype)
    v_out.view(NB * BS, H, D)[slots] = value[valid]
    return k_out, v_out


def _blocks(shape):
    """Blocks in the pool: the sequences' blocks (decode: one per token; prefill: the tokens in order)."""
    T, seqs = shape["T"], shape["S"]
    per_seq = -(-T // seqs)
    return seqs * -(-per_seq // BLOCK_SIZE) + _SPARE_BLOCKS


def make_inputs(shape, dtype, device, generator):
    """T new tokens spread over S sequences (decode: S = T, one token each; prefill: S < T), each
    sequence in blocks of its own at random places of the pool; one token in 16 is padding (slot -1)
    when T >= 16. Caches hold random data (earlier tokens) that must survive."""
    T, S, H, D = shape["T"], shape["S"], shape["Hkv"], shape["D"]
    NB = _blocks(shape)
    k_cache = torch.randn(NB, BLOCK_SIZE, H, D, generator=generator, device=device)
    v_cache = torch.randn(NB, BLOCK_SIZE, H, D, generator=generator, device=device)
    per_seq = -(-T // S)
    blocks_per_seq = -(-per_seq // BLOCK_SIZE)
    order = torch.randperm(NB, generator=generator, device=device)[: S * blocks_per_seq].reshape(S, blocks_per_seq)
    tok = torch.arange(T, device=device)
    if per_seq == 1:  # decode: token t is the next token of sequence t, at a random offset of its block
        seq = tok
        local = torch.randint(0, BLOCK_SIZE, (S,), generator=generator, device=device)[seq]
    else:  # prefill: each sequence's chunk of tokens in order, from the start of its first block
        seq = tok // per_seq
        local = tok - seq * per_seq
    slots = order[seq, local // BLOCK_SIZE] * BLOCK_SIZE + local % BLOCK_SIZE
    if T >= 16:
        pad = torch.rand(T, generator=generator, device=device) < 1.0 / 16
        slots = torch.where(pad, torch.full_like(slots, -1), slots)
    half = D // 2
    positions = torch.randint(0, _MAX_POSITION, (T,), generator=generator, device=device)
    inv_freq = _THETA ** (-torch.arange(half, dtype=torch.float64, device=device) * 2.0 / D)
    angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    key = torch.randn(T, H, D, generator=generator, device=device)
    key = key * 10.0 ** (torch.rand(T, H, 1, generator=generator, device=device) - 0.5)
    value = torch.randn(T, H, D, generator=generator, device=device)
    return (key.to(dtype), value.to(dtype), angles.cos().to(torch.float32), angles.sin().to(torch.float32),
            k_cache.to(dtype), v_cache.to(dtype), slots.to(torch.int64))


def cost(shape, dtype):
    T, H, D = shape["T"], shape["Hkv"], shape["D"]
    cache = tensor_bytes((_blocks(shape), BLOCK_SIZE, H, D), dtype)
    # Read key, value, the cos/sin rows and the slots; read and write both caches (the outputs are new
    # tensors; the written slots need not be read, a bound kept simple by counting them).
    new = 2 * tensor_bytes((T, H, D), dtype) + 2 * tensor_bytes((T, D // 2), torch.float32) + 8 * T
    return Cost(bytes=new + 4 * cache, flops=3.0 * T * H * D)


# (Hkv, D): Llama-3-8B and -70B (8, 128); Qwen3-30B-A3B (4, 128); Mistral-style 8 x 128 covered by the first.
_MODELS = ((8, 128), (4, 128))

TASK = Task(
    name="rope_paged_kv",
    reference=reference,
    make_inputs=make_inputs,
    gpu=ShapeSet(
        public=[{"T": t, "S": t, "Hkv": h, "D": d} for h, d in _MODELS for t in (1, 64, 256)]
        + [{"T": 2048, "S": 1, "Hkv": 8, "D": 128}, {"T": 8192, "S": 4, "Hkv": 4, "D": 128}],
        held_out=ShapeRange(dims={"T": (1, 4095), "S": [1, 3], "Hkv": [8, 4, 2, 1], "D": [128, 64]}),
    ),
    cpu=ShapeSet(
        public=[{"T": 1, "S": 1, "Hkv": 2, "D": 64}, {"T": 16, "S": 16, "Hkv": 2, "D": 64},
                {"T": 40, "S": 2, "Hkv": 1, "D": 32}],
        held_out=ShapeRange(dims={"T": (1, 60), "S": [1, 3], "Hkv": [1, 2], "D": [32, 64]}),
    ),
    dtypes=(torch.bfloat16, torch.float16),
    cost=cost,
    weight=lambda shape: decode_weight(shape["T"]),
    tolerances=dict(DEFAULT_TOLERANCES),
    description=(
        "RoPE on the new keys fused with writing keys and values into a paged KV cache (vLLM's rotary "
        "embedding + reshape_and_cache): key, value [T, Hkv, D] (bf16/fp16), cos, sin [T, D/2] fp32 "
        "(rotate-half, NeoX style: k1 = k[..., :D/2], k2 = k[..., D/2:], rotated = cat(k1 cos - k2 sin, "
        "k2 cos + k1 sin), fp32 math), k_cache, v_cache [NB, 16, Hkv, D], slot_mapping [T] int64 (slot = "
        "block * 16 + offset; -1 = padding, written nowhere). Returns (k_cache_out, v_cache_out): new "
        "tensors equal to the caches with the T slots written (inputs must not change). Decode writes one "
        "token per sequence at scattered slots; prefill writes contiguous runs."
    ),
)
