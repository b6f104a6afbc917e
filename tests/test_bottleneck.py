"""The bottleneck class of a judged shape, and where users see it (`ratchet show`, `ratchet eval`)."""

import json

from ratchet.diagnose.bottleneck import COMPUTE, MEMORY, OVERHEAD, UNKNOWN, classify, classify_row, ridge_point
from ratchet.cli import main
from ratchet.run.ledger import Ledger
from test_ledger import SOURCE, make_verdict, new_run

H200 = {"copy_tbps": 4.27, "matmul_tflops": 788.0}  # measured on an H200 (docs/NOTES.md): ridge ~185 FLOP/B


def test_classes_follow_the_stated_rule():
    ridge = ridge_point(H200)
    assert abs(ridge - 788.0 / 4.27) < 1e-9
    # rmsnorm at prefill size: 1 FLOP/B, 94% of the floor: memory-bound
    assert classify(4.0 * 16384 * 8192, 2 * 2 * 16384 * 8192, ridge, median_us=134.0, floor_us=126.0) == MEMORY
    # a big bf16 GEMM: ~2700 FLOP/B: compute-bound
    n = 8192
    assert classify(2.0 * n ** 3, 3 * 2 * n * n, ridge, median_us=1500.0, floor_us=1395.0) == COMPUTE
    # a decode-size rmsnorm: 4.4 us against a 0.01 us floor: overhead-bound whatever its intensity
    assert classify(4.0 * 4096, 2 * 2 * 4096, ridge, median_us=4.4, floor_us=0.0039) == OVERHEAD
    # not tiny, but a CUDA graph made it 2x faster: the launch path dominated the eager time
    assert classify(1e6, 1e8, ridge, median_us=40.0, floor_us=23.0, eager_us=80.0, graph_us=40.0) == OVERHEAD
    assert classify(1e6, 1e8, ridge, median_us=40.0, floor_us=23.0, eager_us=44.0, graph_us=40.0) == MEMORY
    # unknown ceilings: below 1 FLOP/B is memory-bound on any device, above it nothing can be said
    assert classify(0.5e8, 1e8, None) == MEMORY and classify(5e8, 1e8, None) == UNKNOWN
    assert classify(None, 1e8, ridge) == UNKNOWN and classify(0.0, 1e8, ridge) == MEMORY


def test_rows_recover_bytes_and_flops_from_the_achieved_rates():
    row = {"median_us": 134.0, "floor_us": 126.0, "achieved_tbps": 4.0, "achieved_tflops": 4.0 / 1.0,
           "eager_median_us": None, "graph_median_us": None}
    assert classify_row(row, H200) == MEMORY  # 1 FLOP/B
    row_gemm = dict(row, achieved_tflops=700.0, achieved_tbps=0.26)  # ~2700 FLOP/B
    assert classify_row(row_gemm, H200) == COMPUTE
    assert classify_row(dict(row, median_us=None), H200) == UNKNOWN


def test_show_gives_the_best_attempts_classes(tmp_path, capsys):
    ledger = str(tmp_path / "l.sqlite")
    verdict = make_verdict(speedup=1.5)
    verdict["ceilings"] = H200
    verdict["shapes"][0].update(floor_us=0.01, achieved_tbps=0.0016, achieved_tflops=0.0032)
    with Ledger(ledger) as led:
        run = new_run(led)
        led.set_best(run, led.record_attempt(run, "c.py", SOURCE, {"BLOCK": 256}, verdict, "tune"))
    assert main(["show", run, "--ledger", ledger, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    (row,) = shown["best_bottlenecks"]  # the held-out row is untimed
    assert row["shape"] == {"T": 7, "H": 4096} and row["class"] == OVERHEAD  # 10 us against a 0.01 us floor
    assert main(["show", run, "--ledger", ledger]) == 0
    assert "overhead-bound" in capsys.readouterr().out
