"""The LM head, log-softmax and pick as one autograd function, a chunk of rows at a time, its backward written out.

``lm_head.head_scores`` keeps the (rows, vocab) logits from ever existing whole by making each chunk a checkpoint:
the backward reruns the chunk's forward (head matmul, logsumexp, pick, and the entropy metric again) and then
autograd's generic backward of each op, which allocates a vocabulary-wide tensor at every step (logsumexp's
``exp(z - lse)``, the gather's zeros, their sum). With 151,936 tokens those elementwise passes cost as much as the
head's matmuls (the GSM8K shape: ~20 % of an update). The gradient of a picked log-prob is closed-form,

    d log p(y) / d z_v = 1[v = y] - softmax(z)_v,

so the backward here reruns only the head matmul, turns those logits into softmax in place with the saved
logsumexp, scales by the incoming gradient and adds it at the picked token (two in-place passes and a scatter),
then the two matmuls of the head's own gradient. The forward keeps one float per row (the logsumexp); the
entropy metric (no gradient) comes from the same logits as H = -sum_v p_v log p_v.

Used by ``head_scores`` where the head is a plain ``nn.Linear`` and nothing renormalises the logits (no top-k /
top-p support replay, no entropy bonus with a gradient); the checkpointed path covers those. The same chunks and
the same matmul give the same log-probs bit for bit (``tests/policy/test_fused_head.py``).
"""

from __future__ import annotations

import torch


def _logits(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, temperature: float) -> torch.Tensor:
    z = torch.nn.functional.linear(h, weight, bias)
    if temperature != 1.0:
        z = z / temperature
    return z.float()


class _HeadLogProbs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature, chunk, with_entropy, keep):
        logps, lses, entropies, kept = [], [], [], []
        for h, ids in zip(hidden.split(chunk), targets.split(chunk)):
            z = _logits(h, weight, bias, temperature)
            lse = torch.logsumexp(z, dim=-1)
            logps.append(z.gather(-1, ids.unsqueeze(-1)).squeeze(-1) - lse)
            lses.append(lse)
            if with_entropy or keep:
                logp_all = z.sub_(lse.unsqueeze(-1))  # z is this chunk's own float copy: reused in place
            if with_entropy:
                entropies.append(-torch.linalg.vecdot(logp_all.exp(), logp_all))
            if keep:
                kept.append(logp_all)
        ctx.save_for_backward(hidden, weight, bias, targets, torch.cat(lses))
        ctx.temperature, ctx.chunk, ctx.kept = temperature, chunk, kept
        entropy = torch.cat(entropies) if with_entropy else hidden.new_zeros(0, dtype=torch.float32)
        ctx.mark_non_differentiable(entropy)
        return torch.cat(logps), entropy

    @staticmethod
    def backward(ctx, grad_logp, _grad_entropy):
        hidden, weight, bias, targets, lse = ctx.saved_tensors
        temperature, chunk = ctx.temperature, ctx.chunk
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        grad_h = torch.empty_like(hidden) if need_h else None
        grad_w = torch.zeros_like(weight, dtype=torch.float32) if need_w else None
        grad_b = torch.zeros_like(bias, dtype=torch.float32) if need_b else None
        start = 0
        for h, ids in zip(hidden.split(chunk), targets.split(chunk)):
            rows = slice(start, start + h.size(0))
            start += h.size(0)
            g = grad_logp[rows].float()
            if ctx.kept:
                grad_z = ctx.kept.pop(0).exp_()
            else:
                grad_z = _logits(h, weight, bias, temperature).sub_(lse[rows].unsqueeze(-1)).exp_()  # softmax
            grad_z.mul_(-g.unsqueeze(-1)).scatter_add_(-1, ids.unsqueeze(-1), g.unsqueeze(-1))
            if temperature != 1.0:
                grad_z.div_(temperature)
            grad_z = grad_z.to(weight.dtype)
            if need_h:
                grad_h[rows] = grad_z @ weight
            if need_w and weight.dtype == torch.float32:
                grad_w.addmm_(grad_z.t(), h)
            elif need_w:  # accumulated over chunks in float32 (a bf16 head: each chunk's product rounded once)
                grad_w.add_((grad_z.t() @ h).float())
            if need_b:
                grad_b.add_(grad_z.float().sum(0))
        grad_w = grad_w.to(weight.dtype) if grad_w is not None else None
        grad_b = grad_b.to(bias.dtype) if grad_b is not None else None
        return grad_h, grad_w, grad_b, None, None, None, None, None


def fused_head_scores(
    hidden: torch.Tensor,
    head: torch.nn.Linear,
    targets: torch.Tensor,
    temperature: float,
    with_entropy: bool,
    chunk: int,
    keep: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(log pi(target), entropy metric or None) per row of ``hidden`` (N, H) through ``head``, ``chunk`` rows at a
    time; ``keep``: the chunks' log-softmax held from the forward for the backward instead of made again."""
    logps, entropy = _HeadLogProbs.apply(
        hidden, head.weight, head.bias, targets, float(temperature), int(chunk), bool(with_entropy), bool(keep)
    )
    return logps, (entropy if with_entropy else None)
