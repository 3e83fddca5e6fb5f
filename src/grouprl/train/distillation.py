"""On-policy distillation in the update (docs/distillation.md): the teacher built from the ``distill`` section,
its scores of the update's samples, and the terms they add to the objective.

Built only when ``distill_coef`` > 0 (the learner's ``distill``); a plain step never reaches this module. Once per
update the teacher scores every sample (``policy/teacher.py``, or ``policy/teacher_endpoint.py`` for a server);
per micro-batch :meth:`Distiller.terms` turns that into what ``algos/loss.py:policy_objective`` takes: the
per-token advantages (a reward-form objective, ``A_t + coef * r_t``) or extra per-token loss terms
(``coef * d_t``), with their statistics. Nothing is saved: a resumed run reloads the teacher from the config.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from grouprl.algos.distill_objectives import get_objective, masked_mean
from grouprl.config import Config, ConfigError
from grouprl.models.loading import Policy, load_tokenizer, pick_device, pick_dtype
from grouprl.policy.scoring import TokenBatch
from grouprl.policy.teacher import completion_logits, same_vocabulary, teacher_logits, teacher_logps
from grouprl.registry import UnknownName, options_from_config

OPTION_FIELDS = {"beta": "distill_beta", "top_k": "distill_top_k"}


def load_teacher(cfg: Config, policy: Policy):
    """The teacher model named by ``teacher``: frozen, in eval mode, on ``teacher_device`` in ``teacher_dtype``,
    refused in one line when it is missing or its tokenizer is not the student's."""
    from transformers import AutoModelForCausalLM

    d = cfg.distill
    name = str(d.teacher)
    if (name.startswith((".", "/", "~")) or name.count("/") > 1) and not Path(name).expanduser().exists():
        raise ConfigError(f"config key 'teacher': {name} does not exist; expected a local model dir or a hub id")
    try:
        tokenizer = load_tokenizer(name, d.teacher_revision)
    except (OSError, ValueError) as err:
        raise ConfigError(f"config key 'teacher': cannot load a tokenizer from {name}: {_first_line(err)}") from None
    if not same_vocabulary(policy.tokenizer, tokenizer):
        student = cfg.model.model_name_or_path or getattr(policy.tokenizer, "name_or_path", "the student")
        raise ConfigError(
            f"config key 'teacher': {name}'s tokenizer ({len(tokenizer.get_vocab())} tokens) is not the student "
            f"{student}'s ({len(policy.tokenizer.get_vocab())} tokens); on-policy distillation needs one vocabulary"
        )
    device = policy.device if d.teacher_device == "auto" else pick_device(d.teacher_device)
    dtype = pick_dtype(cfg.model.torch_dtype if d.teacher_dtype == "auto" else d.teacher_dtype, device)
    try:
        model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype, revision=d.teacher_revision)
    except (OSError, ValueError) as err:
        raise ConfigError(f"config key 'teacher': cannot load a model from {name}: {_first_line(err)}") from None
    model = model.to(device).eval()  # type: ignore[arg-type]  # transformers' wrapped .to
    model.requires_grad_(False)
    return model


def _first_line(err: Exception) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0][:200]


class Distiller:
    """The teacher, the objective and its options; the teacher's time and memory of the last update."""

    def __init__(self, cfg: Config, policy: Policy):
        d = cfg.distill
        try:
            self.objective = get_objective(d.distill_objective)
        except UnknownName as err:
            raise ConfigError(f"config key 'distill_objective': {err}") from None
        self.options = options_from_config(
            d, OPTION_FIELDS, self.objective.options, "distill objective", self.objective.name
        )
        self.coef, self.chunk, self.temperature = d.distill_coef, d.teacher_chunk, cfg.rollout.temperature
        self.model, self.endpoint = None, None
        if d.teacher_endpoint:
            from grouprl.policy.teacher_endpoint import EndpointTeacher

            if self.objective.inputs == "logits":
                raise ConfigError(
                    f"config key 'distill_objective': {self.objective.name} needs the teacher's full-vocabulary "
                    "logits, which teacher_endpoint does not return; use reverse_kl_reward or k3, or a local teacher"
                )
            self.endpoint = EndpointTeacher(d.teacher_endpoint, d.teacher_timeout, d.teacher_retries)
            self.endpoint.check()
        elif d.teacher:
            self.model = load_teacher(cfg, policy)
        else:
            raise ConfigError(
                "config key 'distill_coef' > 0 needs a teacher: set teacher (a model) or teacher_endpoint"
            )
        self.step_metrics: dict[str, float] = {}
        self.tokenizer = policy.tokenizer
        # per sample, its completion tokens' (id, student log-prob, teacher log-prob), filled by the first pass of
        # the update over the micro-batches: what the dashboard's Groups view shows token by token
        self._tokens: list[list[tuple[int, float, float]] | None] = []

    def score(self, tokens: TokenBatch) -> torch.Tensor:
        """The teacher's signal for every sample: (N, T) token log-probs, or (N, T, V) logits for a logits
        objective; the time and memory it took go to :attr:`step_metrics`."""
        start, cuda = time.perf_counter(), self._cuda_device()
        self._tokens = [None] * len(tokens)
        if cuda is not None:
            torch.cuda.reset_peak_memory_stats(cuda)
            base = torch.cuda.memory_allocated(cuda)
        if self.endpoint is not None:
            signal = self.endpoint.logps(tokens).to(tokens.completion_ids.device)
        elif self.objective.inputs == "logits":
            signal = teacher_logits(self.model, tokens, self.temperature, self.chunk)
        else:
            signal = teacher_logps(self.model, tokens, self.temperature, self.chunk)
        held = signal.numel() * signal.element_size()
        weights = 0 if self.model is None else sum(p.numel() * p.element_size() for p in self.model.parameters())
        peak = torch.cuda.max_memory_allocated(cuda) - base if cuda is not None else weights + held
        self.step_metrics = {
            "distill/teacher_time": time.perf_counter() - start,
            "distill/teacher_memory_mb": peak / 2**20,
            "distill/signal_mb": held / 2**20,
        }
        return signal

    def _cuda_device(self) -> torch.device | None:
        if self.model is None:
            return None
        device = next(self.model.parameters()).device
        return device if device.type == "cuda" else None

    def terms(
        self,
        model,
        part: TokenBatch,
        logps: torch.Tensor,
        pi_old: torch.Tensor,
        advantages: torch.Tensor,
        signal,
        rows: slice | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None, dict[str, torch.Tensor]]:
        """One micro-batch's (advantages, extra per-token loss terms or None, statistics); ``signal``: the
        teacher's for this micro-batch (a slice of :meth:`score`'s); ``rows``: which samples it holds."""
        mask, obj = part.completion_mask, self.objective
        if obj.inputs == "logits":
            teacher_tok = torch.log_softmax(signal, dim=-1).gather(-1, part.completion_ids.unsqueeze(-1)).squeeze(-1)
        else:
            teacher_tok = signal
        if rows is not None and self._tokens and self._tokens[rows.start] is None:
            self._keep_tokens(rows, part, pi_old, teacher_tok)
        stats = {"distill/kl_mean": masked_mean(pi_old.detach() - teacher_tok, mask)}  # k1 of KL(student || teacher)
        if obj.form == "reward":
            reward = obj(pi_old.detach(), teacher_tok, **self.options)
            stats["distill/reward_mean"] = masked_mean(reward, mask)
            per_token = advantages if advantages.dim() == 2 else advantages.unsqueeze(-1)
            return per_token + self.coef * reward, None, stats
        student = logps if obj.inputs == "logps" else completion_logits(model, part, self.temperature)
        d = obj(student, signal, **self.options)
        stats["distill/loss"] = masked_mean(d.detach(), mask)
        return advantages, self.coef * d, stats

    def _keep_tokens(self, rows: slice, part: TokenBatch, student: torch.Tensor, teacher: torch.Tensor) -> None:
        keep = part.completion_mask.bool().cpu()
        ids, student, teacher = part.completion_ids.cpu(), student.detach().float().cpu(), teacher.float().cpu()
        for j, i in enumerate(range(rows.start, rows.stop)):
            self._tokens[i] = list(
                zip(ids[j][keep[j]].tolist(), student[j][keep[j]].tolist(), teacher[j][keep[j]].tolist())
            )

    def token_signal(self) -> list[list[list]] | None:
        """The last update's samples token by token: ``[text, student log-prob, teacher log-prob]`` for every
        trained (generated) token; ``None`` before the first update. ``student - teacher`` is the token's k1 term
        of KL(student || teacher): positive where the student is surer of its token than the teacher."""
        samples = [t for t in self._tokens if t is not None]
        if not samples or len(samples) < len(self._tokens):
            return None
        texts = self.tokenizer.batch_decode([[i] for sample in samples for i, _, _ in sample])
        out, k = [], 0
        for sample in samples:
            out.append([[texts[k + n], round(s, 4), round(t, 4)] for n, (_, s, t) in enumerate(sample)])
            k += len(sample)
        return out
