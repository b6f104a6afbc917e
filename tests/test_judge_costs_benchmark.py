"""benchmarks/probes/judge_costs.py's table: attempts by class with their judge seconds, and where those
seconds went by phase (the verdict's phases_s), so a slow failed attempt says whether it waited on its
start, its checks or its timing."""

from benchmarks.probes.judge_costs import make_files, table


def attempt(file, kind, wall, start, first, correctness, timing=None, wait=0.0):
    phases = {"start": start, "first call": first, "correctness": correctness, "waiting for the GPU": wait,
              **({"timing": timing} if timing is not None else {})}
    return {"file": file, "class": kind, "judge_wall_s": wall, "phases_s": phases}


def test_each_class_gets_its_count_files_seconds_and_phases():
    rows = [attempt("wrong_seed.py", "failed", 50.0, 4.0, 36.0, 10.0, wait=7.0),
            attempt("wrong_seed.py", "failed", 52.0, 4.0, 40.0, 8.0, wait=3.0),
            attempt("seed_seed.py", "kept", 150.0, 4.0, 36.0, 30.0, 80.0)]
    lines = table({"this tree": rows}).splitlines()
    assert "mean s by phase (start / first call / correctness / timing; of these waiting for the GPU)" in lines[0]
    failed = next(line for line in lines if line.startswith("| failed |"))
    assert failed == "| failed | 2 (2 wrong), 51.0, 51.0, 4.0 / 38.0 / 9.0 / 0.0; 5.0 |"
    assert next(line for line in lines if line.startswith("| kept |")) == "| kept | 1 (1 seed), 150.0, 150.0, 4.0 / 36.0 / 30.0 / 80.0; 0.0 |"
    assert next(line for line in lines if line.startswith("| raced |")) == "| raced | - |"


def test_the_three_files_are_the_seed_a_slow_twin_and_a_wrong_twin(tmp_path):
    seed = tmp_path / "s.py"
    seed.write_text("def kernel(x):\n    return x")
    files = make_files(seed, tmp_path)
    assert [f.name for f in files] == ["seed_s.py", "slow_s.py", "wrong_s.py"]
    space = {}
    exec(files[1].read_text(), space)
    assert space["kernel"](2) == 2
    exec(files[2].read_text(), space)
    import torch

    assert torch.equal(space["kernel"](torch.tensor([2.0])), torch.tensor([4.0]))  # 2 * 1.5 + 1


def test_a_run_limited_by_seconds_ends_by_itself_and_classes_every_attempt(tmp_path):
    """--seconds stops the run's proposals (a device call's limit would cut a --budget run before its
    table); a task given by a relative path is found from the run's own folder. Every wrong twin fails
    and no honest file does."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.probes.judge_costs", "--task", "tests/data/tasks/axpby.py",
                           "--device", "cpu", "--seconds", "8", "--seed", "tests/data/candidates/axpby_tunable.py",
                           "--out", str(out)], cwd=root, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert "8 s of proposals" in proc.stdout
    import json
    attempts = json.loads((out / "judge_costs.json").read_text())["this tree"]
    assert attempts, "the run judged nothing"
    for a in attempts:
        assert (a["class"] == "failed") == a["file"].startswith("wrong_"), a
