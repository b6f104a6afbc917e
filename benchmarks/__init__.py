"""Ratchet's benchmarks, one tool run from the repository root as ``python -m benchmarks.NAME``.

The two main entries: ``benchmarks.suite`` (every task and shape: eager, torch.compile, Liger-Kernel,
the best kernel of a run, the roofline) with its parts ``suite_table`` and ``suite_runs``, and
``benchmarks.e2e_stack`` (run -> gate -> stack, decode tokens/s against torch.compile with CUDA graphs).
``benchmarks.probes`` holds the one-question measurements (what the flush costs, the busy share the
protocol allows, the fastest bare read, ...). Shared helpers, and the one results file every benchmark
appends to, are in ``benchmarks.common``. ``tasks/`` and ``peers/`` are task and candidate files that the
benchmarks load by path. benchmarks/README.md lists them all with a line each.
"""
