"""#15 degenerate sampling: always return the most probable token (greedy). Every greedy token lies in
the nucleus, so a membership check alone passes it; the distribution test does not.
Task: redteam top_p_wide (top_p_sampling with wide batches). statistical."""

import torch


def kernel(logits, top_p):
    return logits.argmax(dim=-1)
