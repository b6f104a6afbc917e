"""The plain-torch start: logsumexp per row, then the drafted token's logit minus it."""

import torch


def kernel(target_logits, draft_logits, draft_tokens):
    index = draft_tokens.unsqueeze(-1)
    target = target_logits.gather(-1, index).squeeze(-1) - torch.logsumexp(target_logits, dim=-1)
    draft = draft_logits.gather(-1, index).squeeze(-1) - torch.logsumexp(draft_logits, dim=-1)
    return target, draft
