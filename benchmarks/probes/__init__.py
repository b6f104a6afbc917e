"""One-question measurements, each a module run as ``python -m benchmarks.probes.NAME``: what the L2 flush
costs, the GPU busy share the timing protocol allows, the fastest bare read of a shape's bytes, a decode
step's byte floor, what the guards cost, where the judge's time goes, per-kernel time inside a candidate,
search landscapes and the tuner's efficiency over them, the loop's throughput, a judge smoke test on a GPU,
and every seed judged (benchmarks/README.md has a line for each)."""
