"""e2e.model_shapes: a campaign's run of a built-in task also judges the shapes the user's model runs
outside the task's own (Qwen3's hidden 2048 and head size 128 for rmsnorm), so its exported package runs
the kernel there; a task that covers them is run as it is."""

from ratchet.candidate import load_candidate
from ratchet.e2e.export import shape_ranges
from ratchet.e2e.model_shapes import MAX_ADDED, task_for_model, uncovered
from ratchet.judge import JudgeOptions, evaluate
from ratchet.task import load_task

# What `ratchet profile` of a Qwen3-30B-A3B-width model reports for rmsnorm (Ranked.shapes), time per step.
QWEN3_NORMS = {"decode": [
    {"shape": {"T": 32, "H": 2048}, "dtype": "bfloat16", "time_us": 40.0},
    {"shape": {"T": 1024, "H": 128}, "dtype": "bfloat16", "time_us": 90.0},
    {"shape": {"T": 64, "H": 4096}, "dtype": "bfloat16", "time_us": 200.0},  # inside the task's shapes
    {"shape": {"T": 32, "H": 2048}, "dtype": "bfloat16", "time_us": 40.0},  # the same shape, another layer
    {"shape": {"T": 8, "H": 2048}, "dtype": "int8", "time_us": 500.0},  # a dtype the task does not judge
    {"shape": {"T": 8}, "dtype": "bfloat16", "time_us": 500.0},  # not the task's dims
]}


def test_the_models_shapes_outside_the_tasks_box_costliest_first():
    rmsnorm = load_task("rmsnorm")
    assert uncovered(rmsnorm, "cuda", QWEN3_NORMS) == [{"T": 1024, "H": 128}, {"T": 32, "H": 2048}]
    # the CPU set's box is smaller (T <= 64, H <= 1000): every shape of the model is outside it
    assert uncovered(rmsnorm, "cpu", QWEN3_NORMS) == [{"T": 64, "H": 4096}, {"T": 1024, "H": 128},
                                                       {"T": 32, "H": 2048}]
    many = {"decode": [{"shape": {"T": 1, "H": h}, "dtype": "bfloat16", "time_us": h} for h in range(9001, 9020)]}
    assert len(uncovered(rmsnorm, "cuda", many)) == MAX_ADDED


def test_a_task_that_covers_the_model_is_run_by_its_name(tmp_path):
    inside = {"decode": [{"shape": {"T": 64, "H": 4096}, "dtype": "bfloat16", "time_us": 1.0}]}
    assert task_for_model("rmsnorm", "cuda", inside, tmp_path, "model") == "rmsnorm"
    assert task_for_model("rmsnorm", "cuda", {}, tmp_path, "model") == "rmsnorm"
    assert not list(tmp_path.iterdir())


def test_the_written_task_is_the_builtin_one_with_the_models_shapes(tmp_path):
    path = task_for_model("rmsnorm", "cuda", QWEN3_NORMS, tmp_path / "tasks", "/models/qwen3")
    task, builtin = load_task(path), load_task("rmsnorm")
    assert task.name == "rmsnorm"  # the op the gate and the package know it by
    assert list(task.gpu.public) == list(builtin.gpu.public) + [{"T": 1024, "H": 128}, {"T": 32, "H": 2048}]
    assert task.gpu.held_out == builtin.gpu.held_out and list(task.cpu.public) == list(builtin.cpu.public)
    assert [p.name for p in task.seeds_for("cuda")] == [p.name for p in builtin.seeds_for("cuda")]
    assert task.reference is not None and task.dtypes == builtin.dtypes
    # an attempt that passed every public shape: the package's ranges now hold the model's norms
    ranges = shape_ranges({"shapes": [{"shape": s, "dtype": "bfloat16"} for s in task.gpu.public]})
    assert ranges["dims"]["H"][0] == 128 and ranges["dims"]["H"][1] == 8192


def test_the_judge_passes_a_seed_at_the_added_shapes(tmp_path):
    """On the CPU set, a shape past its box (H = 2048) is judged like the task's own."""
    added = {"decode": [{"shape": {"T": 3, "H": 2048}, "dtype": "float32", "time_us": 1.0}]}
    task = load_task(task_for_model("rmsnorm", "cpu", added, tmp_path, "model"))
    seed = load_candidate(task.seeds_for("cpu")[0])
    verdict = evaluate(task, seed, {}, JudgeOptions(device="cpu", time_it=False))
    assert verdict.verdict == "pass", verdict.reasons
    judged = [dict(s.shape) for s in verdict.shapes if not s.held_out]
    assert {"T": 3, "H": 2048} in judged
