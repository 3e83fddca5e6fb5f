"""Judge distillation: a small reward model trained online on an LLM judge's labels, so that the judge
(slow, paid per call) is asked less and less.

``rewards: [{name: distilled_judge, options: {student: path/to/model, judge: {base_url, model, ...}}}]``

* Steps 1..``judge_steps``: every completion goes to the judge (a pointwise ``judge``, with all its
  options: template, format, cache, retries); the reward is the judge's score, and the student (a
  sequence classifier with one logit, e.g. the policy's own folder with a fresh head) learns to predict
  it (binary cross-entropy on the judge's [0, 1] score, a replay of the last ``replay_size`` labels).
* After that the reward is the student's ``sigmoid(logit)`` for every completion, and the judge sees only
  a sample: ``max(min_fraction, sample_fraction * sample_decay ** (step - judge_steps))`` of each batch;
  its labels keep training the student and measure it.
* Every step logs ``distill/agreement``: on the completions the judge labelled, how often the student
  (before learning from them) puts them on the same side of 0.5 as the judge, next to
  ``distill/judge_positive`` (the judge's share of passes: the agreement of always answering the
  majority). This is the curve that says when the judge can be dropped.

A judge error (no answer, no parsable score) is counted (``distill/judge_errors``); such a completion is
scored by the student, and past ``max_judge_error_fraction`` of a batch the run stops (``RewardFailure``).
The sample is drawn from a generator seeded by (seed, step, rank): the same on a resumed run. Several
processes: each asks the judge about its own completions; the labels are gathered so every process takes
the same student update (same initial head: ``seed``). Frozen (evaluation): the student alone scores, no
judge calls, no update. The state (student weights, optimizer, replay, step) is in every checkpoint.
"""

from __future__ import annotations

import math
import os
from typing import Any

import torch

from grouprl.config import ConfigError
from grouprl.records import Episode, Message
from grouprl.rewards.guard import RewardFailure
from grouprl.rewards.learned.gather import gather_across_processes
from grouprl.rewards.learned.judge import Judge, settings_from
from grouprl.rewards.learned.reward_model import SequenceClassifier, pick_device
from grouprl.rewards.reward_calls import episode_messages


def _load_student(path: str, device: str, seed: int) -> SequenceClassifier:
    from transformers import AutoModelForSequenceClassification

    from grouprl.tokenizer_loading import auto_tokenizer  # the policy's loader: a char tokenizer keeps its spaces

    torch.manual_seed(seed)  # the fresh head is the same on every process
    try:
        tokenizer = auto_tokenizer(path)
        model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1, dtype=torch.float32)
    except (OSError, ValueError) as err:
        raise ConfigError(
            f"distilled_judge: student '{path}' cannot be loaded as a sequence classifier "
            f"({type(err).__name__}: {str(err).splitlines()[0][:200]})"
        ) from None
    student = SequenceClassifier(
        path, device=str(pick_device(device)), model=model, tokenizer=tokenizer, max_length=512, batch_size=64
    )
    student.model.requires_grad_(True)
    return student


class DistilledJudge:
    """A ``LearnedReward``: score, update, frozen, state_dict, load_state_dict."""

    name = "distilled_judge"

    def __init__(
        self,
        judge: Judge,
        student: SequenceClassifier,
        judge_steps: int = 10,
        sample_fraction: float = 0.5,
        sample_decay: float = 0.8,
        min_fraction: float = 0.05,
        learning_rate: float = 1e-3,
        updates_per_step: int = 4,
        replay_size: int = 512,
        minibatch: int = 64,
        max_judge_error_fraction: float = 0.1,
        seed: int = 0,
    ):
        self.judge, self.student = judge, student
        self.judge_steps, self.sample_fraction, self.sample_decay = judge_steps, sample_fraction, sample_decay
        self.min_fraction, self.updates_per_step, self.replay_size = min_fraction, updates_per_step, replay_size
        self.minibatch, self.max_judge_error_fraction, self.seed = minibatch, max_judge_error_fraction, seed
        self.optimizer = torch.optim.AdamW(student.model.parameters(), lr=learning_rate)
        self.replay: list[tuple[str, float]] = []
        self.step = 0  # updates taken
        self.frozen = False
        self._labelled: list[tuple[str, float, float]] = []  # this batch: (text, judge label, student before)
        self._errors = 0

    def fraction(self) -> float:
        if self.step < self.judge_steps:
            return 1.0
        return max(self.min_fraction, self.sample_fraction * self.sample_decay ** (self.step - self.judge_steps))

    def _student_scores(self, conversations: list[list[dict[str, Any]]]) -> list[float]:
        logits, _ = self.student.logits(conversations)
        return torch.sigmoid(logits[:, 0]).tolist()

    def score(self, episodes: list[Episode]) -> list[float]:
        conversations = [episode_messages(ep) for ep in episodes]
        student = self._student_scores(conversations)
        self._labelled, self._errors = [], 0
        if self.frozen or not episodes:
            return student
        rng = torch.Generator().manual_seed(self.seed * 1_000_003 + self.step * 101 + int(os.environ.get("RANK", 0)))
        n = max(1, math.ceil(self.fraction() * len(episodes)))
        sample = sorted(torch.randperm(len(episodes), generator=rng)[:n].tolist())
        results = self.judge(
            [[Message.model_validate(m) for m in conversations[i]] for i in sample],
            [episodes[i].row.get("ground_truth") for i in sample],
            group_ids=[episodes[i].group_id for i in sample],
        )
        scores = list(student)
        for i, result in zip(sample, results):
            if result.error is not None or not result.is_score_valid:
                self._errors += 1
                continue
            self._labelled.append((self.student.render(conversations[i]), float(result.score), student[i]))
            if self.step < self.judge_steps:
                scores[i] = float(result.score)
        if self._errors > self.max_judge_error_fraction * len(episodes):  # of the batch, as documented
            raise RewardFailure(
                f"distilled_judge: the judge failed on {self._errors} of the {len(sample)} completions "
                f"it was asked about, more than max_judge_error_fraction="
                f"{self.max_judge_error_fraction} of the batch's {len(episodes)}; first: "
                f"{next(r.error for r in results if r.error)}"
            )
        return scores

    def update(self, episodes: list[Episode]) -> dict[str, float]:
        labelled = gather_across_processes(self._labelled)
        errors = sum(gather_across_processes([self._errors]))
        metrics = {
            "distill/judge_fraction": self.fraction(),
            "distill/judged": float(len(labelled)),
            "distill/judge_errors": float(errors),
        }
        if labelled:
            metrics["distill/agreement"] = sum((s > 0.5) == (y > 0.5) for _, y, s in labelled) / len(labelled)
            metrics["distill/judge_positive"] = sum(y > 0.5 for _, y, _ in labelled) / len(labelled)
            metrics["distill/abs_error"] = sum(abs(s - y) for _, y, s in labelled) / len(labelled)
        metrics.update({f"{self.name}/{k}": v for k, v in self.judge.drain_metrics().items()})
        if self.frozen:
            return metrics
        self.replay = (self.replay + [(text, y) for text, y, _ in labelled])[-self.replay_size :]
        losses = []
        rng = torch.Generator().manual_seed(self.seed * 7_919 + self.step)
        self.student.model.train()
        for _ in range(self.updates_per_step if self.replay else 0):
            pick = torch.randperm(len(self.replay), generator=rng)[: self.minibatch].tolist()
            texts, labels = [self.replay[i][0] for i in pick], torch.tensor([self.replay[i][1] for i in pick])
            logits = self.student.forward(texts)[:, 0].cpu()
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            losses.append(loss.item())
        self.student.model.eval()
        self.step += 1
        if losses:
            metrics["distill/student_loss"] = sum(losses) / len(losses)
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "model": {k: v.detach().cpu().clone() for k, v in self.student.model.state_dict().items()},
            "optimizer": self.optimizer.state_dict(),
            "replay": list(self.replay),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step, self.replay = int(state["step"]), list(state["replay"])
        self.student.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])


def build_distilled_judge(options: dict[str, Any], run_dir: str | None, reward_timeout: float = 0.0) -> DistilledJudge:
    """The learned reward, its judge with the run's batch deadline (0.9 x ``reward_timeout``, as a plain judge's:
    a learned reward's score is not under the scorer's time budget, so this is what bounds a hung request)."""
    options = dict(options)
    judge_options, student = options.pop("judge", None), options.pop("student", None)
    device = options.pop("device", "auto")
    if not isinstance(judge_options, dict) or not student:
        raise ConfigError(
            "distilled_judge: options 'student' (a model folder or hub id) and 'judge' (the judge's "
            "options: base_url, model, ...) are required"
        )
    known = set(DistilledJudge.__init__.__code__.co_varnames[3 : DistilledJudge.__init__.__code__.co_argcount])
    unknown = sorted(set(options) - known)
    if unknown:
        raise ConfigError(
            f"distilled_judge: unknown option(s) {unknown}; expected student, judge, device, {', '.join(sorted(known))}"
        )
    judge = Judge("judge", settings_from("judge", judge_options), run_dir, reward_timeout)
    return DistilledJudge(judge, _load_student(student, device, int(options.get("seed", 0))), **options)
