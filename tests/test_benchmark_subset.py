"""benchmarks/common.py's task subsets: the smaller tasks a device session times (which shapes, which dtypes)."""

import pytest

from benchmarks.common import describe_subset, parse_where, subset_task
from ratchet.task import load_task


def test_where_keeps_only_the_public_shapes_with_those_sizes():
    task = load_task("decode_attention")
    mla = subset_task(task, "cuda", where={"Hkv": 1})
    public = mla.shape_set("cuda").public
    assert public and all(s["Hkv"] == 1 and s["Hq"] == 128 and s["D"] == 576 for s in public)
    assert mla.shape_set("cuda").held_out == task.shape_set("cuda").held_out  # the judge still draws them
    first = subset_task(task, "cuda", shapes=1, where={"Hkv": 1}).shape_set("cuda").public
    assert first == public[:1]


def test_where_that_matches_nothing_is_an_error_naming_the_task():
    with pytest.raises(ValueError, match="decode_attention.*Hkv"):
        subset_task(load_task("decode_attention"), "cuda", where={"Hkv": 3})


def test_where_items_parse_and_bad_ones_say_what_was_wanted():
    assert parse_where(["Hkv=1", "B=32"]) == {"Hkv": 1, "B": 32}
    assert parse_where(None) == {}
    for bad in ("Hkv", "Hkv=x", "=1"):
        with pytest.raises(ValueError, match="SIZE=INTEGER"):
            parse_where([bad])
    assert describe_subset(2, True, {"Hkv": 1}) == "public shapes with Hkv=1, first 2 public shapes, first dtype only"
