"""The benchmark tasks in benchmarks/tasks/: a built-in task cut to the shapes a device call can afford,
everything else (reference, inputs, rule, seeds) the built-in's own."""

from pathlib import Path

import torch

from ratchet.task import load_task

TASKS = Path(__file__).parent.parent / "benchmarks" / "tasks"


def _same_as_builtin(task, parent):
    # Each load imports the task file afresh, so compare where the functions come from, not identity.
    assert task.seeds_dir == parent.seeds_dir
    assert task.reference.__code__.co_filename == parent.reference.__code__.co_filename
    assert task.make_inputs.__code__.co_filename == parent.make_inputs.__code__.co_filename
    assert type(task.check).__name__ == type(parent.check).__name__


def test_rmsnorm_decode_is_rmsnorm_at_decode_sizes():
    task, parent = load_task(str(TASKS / "rmsnorm_decode.py")), load_task("rmsnorm")
    assert task.name == "rmsnorm_decode" and task.dtypes == (torch.bfloat16,)
    assert {s["T"] for s in task.gpu.public} == {1, 256} and {s["H"] for s in task.gpu.public} == {4096, 8192}
    _same_as_builtin(task, parent)


def test_rmsnorm_one_shape_is_rmsnorm_at_one_decode_shape_with_none_held_out():
    task, parent = load_task(str(TASKS / "rmsnorm_one_shape.py")), load_task("rmsnorm")
    assert task.name == "rmsnorm_one_shape" and task.dtypes == (torch.bfloat16,)
    assert task.gpu.public == [{"T": 64, "H": 4096}] and task.gpu.held_out is None
    _same_as_builtin(task, parent)


def test_top_p_b64_is_top_p_at_the_goal_shape():
    task, parent = load_task(str(TASKS / "top_p_b64.py")), load_task("top_p_sampling")
    assert task.name == "top_p_b64" and task.gpu.public == [{"B": 64, "V": 129280}]
    _same_as_builtin(task, parent)
    assert task.dtypes == parent.dtypes == (torch.float32,)
    assert task.cpu == parent.cpu  # the CPU shape set is the built-in's: the task still runs without a GPU
