"""How the profiler records a module's call: what it can remake, and why not otherwise."""

import torch

from ratchet.e2e.module_times import record_call


def test_ids_keep_their_range_and_floats_their_shape():
    call = record_call((torch.randn(2, 1, 8),), {"position_ids": torch.tensor([[3], [7]])})
    assert call.why is None
    hidden, positions = call.args
    assert (hidden.kind, hidden.shape, hidden.dtype, hidden.low) == ("tensor", (2, 1, 8), "float32", None)
    assert (positions.key, positions.low, positions.high, positions.dtype) == ("position_ids", 3, 7, "int64")


def test_a_complex_argument_is_a_reason_not_a_crash():
    # DeepSeek-V2 hands its layers rotary frequencies as one complex tensor.
    call = record_call((torch.randn(2, 1, 8), torch.polar(torch.ones(4), torch.zeros(4))), {})
    assert call.why == "a complex tensor argument"
    assert call.args == ()


def test_an_argument_that_is_not_a_tensor_or_a_constant_is_named():
    call = record_call((torch.randn(2, 8),), {"cache": object()})
    assert call.why == "takes a object (cache)"
