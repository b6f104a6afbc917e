"""Datasheet facts for the GPUs Ratchet is run on: datasheet leads, not measurements.

Every number here is a public datasheet or whitepaper value (dense, i.e. without structured sparsity);
where a value was not certain it is ``None`` rather than a guess. These are leads for a kernel writer
(what the generation offers, which instructions to reach for); the judge measures the real ceilings
(see :mod:`ratchet.hardware.ceilings`) and never trusts these.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Sheet:
    """One device's datasheet lead. Memory is as the datasheet quotes it (GB); bandwidth in TB/s (1e12)."""

    name: str
    vendor: str
    architecture: str
    compute_capability: str  # "9.0" on NVIDIA, the gfx target (e.g. "gfx942") on AMD
    sms: int | None  # streaming multiprocessors (NVIDIA) or compute units (AMD)
    memory_gb: float | None
    memory_bandwidth_tbps: float | None
    l2_mib: float | None  # L2, or the last-level cache (Infinity Cache) on AMD
    shared_memory_per_sm_kib: int | None  # most a kernel can use per SM (LDS per CU on AMD)
    registers_per_sm: int | None  # 32-bit registers
    warp_size: int
    tensor_core_family: str
    tma: bool
    clusters: bool  # thread-block clusters / distributed shared memory
    fp8: bool
    fp4: bool
    bf16_dense_tflops: float | None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict:
        out = asdict(self)
        out["notes"] = list(self.notes)
        return out


_HOPPER_NOTES = (
    "wgmma: warpgroup (4 warps) async MMA reading operands from shared memory",
    "TMA: bulk async tensor copies global<->shared, with multicast across a cluster",
    "thread-block clusters with distributed shared memory; 228 KiB shared memory per SM",
    "FP8 (e4m3/e5m2) tensor cores; no FP4",
)

SHEETS: dict[str, Sheet] = {s.name: s for s in [
    Sheet("A100", "NVIDIA", "Ampere", "8.0", 108, 80, 2.039, 40, 164, 65536, 32, "mma.sync",
          tma=False, clusters=False, fp8=False, fp4=False, bf16_dense_tflops=312, notes=(
              "A100 SXM 80GB sheet (the 40GB and PCIe parts differ in memory and bandwidth)",
              "warp-level mma.sync tensor cores; cp.async for global->shared pipelining",
              "no FP8, no TMA, no clusters; bf16/tf32 tensor cores",
          )),
    Sheet("L40S", "NVIDIA", "Ada Lovelace", "8.9", 142, 48, 0.864, 96, 100, 65536, 32, "mma.sync",
          tma=False, clusters=False, fp8=True, fp4=False, bf16_dense_tflops=362.05, notes=(
              "Ada: mma.sync tensor cores gain FP8 (e4m3/e5m2)",
              "GDDR6 at 864 GB/s with a large 96 MB L2: memory-bound kernels gain from L2 reuse",
              "no TMA, no wgmma, no clusters (those start with Hopper)",
          )),
    Sheet("RTX 4090", "NVIDIA", "Ada Lovelace", "8.9", 128, 24, 1.008, 72, 100, 65536, 32, "mma.sync",
          tma=False, clusters=False, fp8=True, fp4=False, bf16_dense_tflops=165.2, notes=(
              "bf16 rate is with FP32 accumulate (GeForce runs FP16-accumulate at twice that)",
              "Ada: mma.sync tensor cores with FP8; 100 KiB shared memory per SM",
              "no TMA, no wgmma, no clusters",
          )),
    Sheet("H100", "NVIDIA", "Hopper", "9.0", 132, 80, 3.35, 50, 228, 65536, 32, "wgmma",
          tma=True, clusters=True, fp8=True, fp4=False, bf16_dense_tflops=989, notes=(
              "H100 SXM sheet (PCIe and NVL parts have fewer SMs and other memory)", *_HOPPER_NOTES)),
    Sheet("H200", "NVIDIA", "Hopper", "9.0", 132, 141, 4.8, 50, 228, 65536, 32, "wgmma",
          tma=True, clusters=True, fp8=True, fp4=False, bf16_dense_tflops=989, notes=(
              "same Hopper SM as H100 SXM; 141 GB HBM3e at 4.8 TB/s moves memory-bound rooflines up",
              *_HOPPER_NOTES)),
    Sheet("B200", "NVIDIA", "Blackwell", "10.0", 148, 180, 8.0, None, 228, 65536, 32,
          "tcgen05 (tensor memory)", tma=True, clusters=True, fp8=True, fp4=True, bf16_dense_tflops=2250, notes=(
              "tcgen05 MMA issued by one thread, accumulating in tensor memory (TMEM), not registers",
              "2-SM (CTA pair) MMA across a cluster; TMA as on Hopper",
              "FP4/FP6 and block-scaled (MX) formats on the tensor cores",
          )),
    Sheet("GB200", "NVIDIA", "Blackwell", "10.0", None, None, 8.0, None, 228, 65536, 32,
          "tcgen05 (tensor memory)", tma=True, clusters=True, fp8=True, fp4=True, bf16_dense_tflops=2500, notes=(
              "Blackwell GPU of a Grace-Blackwell superchip; same SM generation as B200",
              "tcgen05 MMA accumulating in tensor memory (TMEM); 2-SM MMA; TMA",
              "FP4/FP6 and block-scaled (MX) formats; NVLink-C2C to the Grace CPU",
          )),
    Sheet("RTX 5090", "NVIDIA", "Blackwell (sm_120)", "12.0", 170, 32, 1.792, 96, 100, 65536, 32,
          "mma.sync (block-scaled FP4/FP6/FP8)", tma=True, clusters=True, fp8=True, fp4=True,
          bf16_dense_tflops=None, notes=(
              "consumer Blackwell (sm_120): no tcgen05, no tensor memory, no wgmma",
              "warp-level mma.sync extended with FP4/FP6 and block-scaled formats",
              "100 KiB shared memory per SM, as on Ada; GDDR7",
          )),
    Sheet("RTX PRO 6000 Blackwell", "NVIDIA", "Blackwell (sm_120)", "12.0", 188, 96, 1.792, 128, 100, 65536, 32,
          "mma.sync (block-scaled FP4/FP6/FP8)", tma=True, clusters=True, fp8=True, fp4=True,
          bf16_dense_tflops=None, notes=(
              "workstation/server Blackwell (sm_120), same SM as RTX 5090: no tcgen05/TMEM, no wgmma",
              "warp-level mma.sync extended with FP4/FP6 and block-scaled formats",
              "96 GB GDDR7 with ECC; 100 KiB shared memory per SM",
          )),
    Sheet("MI300X", "AMD", "CDNA 3", "gfx942", 304, 192, 5.3, 256, 64, None, 64, "MFMA",
          tma=False, clusters=False, fp8=True, fp4=False, bf16_dense_tflops=1307.4, notes=(
              "wavefronts of 64 lanes: warp-size assumptions from NVIDIA code break",
              "MFMA matrix instructions; 64 KiB LDS per CU; 256 MB Infinity Cache as last-level cache",
              "FP8 is the FNUZ variant (e4m3fnuz/e5m2fnuz); 8 XCDs, each with its own L2",
          )),
]}


def find_sheet(name: str | None) -> Sheet | None:
    """The sheet whose key occurs in ``name`` (case-insensitive); the longest matching key wins."""
    if not name:
        return None
    text = " ".join(name.lower().replace("_", " ").split())
    hits = [key for key in SHEETS if key.lower() in text]
    if not hits:
        return None
    return SHEETS[max(hits, key=len)]
