"""A red-team task: the built-in top_p_sampling with wide CPU batches. The built-in CPU set starts with
B = 1, which needs 2048 calls to reach the statistical rule's 2048 draws (20 s on two cores); with
B = 256 rows a shape needs 8 calls. Same reference, inputs and statistical rule."""

from dataclasses import replace

from ratchet.task import ShapeSet, load_task

TASK = replace(
    load_task("top_p_sampling"),
    name="top_p_wide",
    cpu=ShapeSet(public=[{"B": 256, "V": 1000}, {"B": 512, "V": 777}]),
    source_path=None,
    seeds_dir=None,
)
