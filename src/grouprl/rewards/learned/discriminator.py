"""The GAIL discriminator: a learned reward telling the logged human click from the policy's choice.

A 2-class sequence classifier (``AutoModelForSequenceClassification``: any hub id or local dir)
gives D(x) = P(expert | x) for x = (chosen item, viewer + slate + prompt) (see discriminator_text).

Per batch (Ho & Ermon, 2016, "Generative Adversarial Imitation Learning", with the policy's
wrong choices as the generated samples):
  score:   r_i = GAIL_ALPHA * D(x_i) for a parseable, in-range choice, else 0   (eval mode, no grad)
  update:  one AdamW step (lr GAIL_LR, grad-norm clip 1.0) on
           L = -mean_j [ y_j log D(x_j) + (1 - y_j) log(1 - D(x_j)) ]
           positives (y = 1): the logged click of every distinct row of the batch;
           negatives (y = 0): the policy's valid but wrong choices. Invalid completions and correct
           choices are not negatives.
Optional replay (GAIL_REPLAY > 0): examples go into a FIFO buffer of that size and each of
GAIL_UPDATES steps draws GAIL_MINIBATCH of them (a seeded generator, so every process draws the
same). Under torch.distributed every process gathers all processes' examples first, so the
update is the same everywhere and the copies stay identical (the original trains one
independent copy per GPU).
"""

from __future__ import annotations

import logging
import os
from collections import deque
from typing import Any

import torch

from grouprl.records import Episode
from grouprl.rewards.learned.gather import gather_across_processes
from grouprl.rewards.learned.discriminator_text import DiscriminatorExample, example_for
from grouprl.rewards.builtin.slate_accuracy import parse_slate_answer

log = logging.getLogger(__name__)


def pick_gail_device(setting: str = "auto") -> torch.device:
    """auto: this process's CUDA device (LOCAL_RANK) when CUDA is there, else the CPU."""
    if setting not in ("", "auto"):
        return torch.device(setting)
    if torch.cuda.is_available():
        return torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}")
    return torch.device("cpu")


def completion_of(ep: Episode) -> str:
    return ep.steps[-1].action_text if ep.steps else ""


def valid_choice(ep: Episode, allow_bare_number: bool | None = None) -> int | None:
    """The episode's parsed option number when it is within the slate, else None (bare numbers as
    ``slate_accuracy`` reads them: ``allow_bare_number``, else PUREACC_ALLOW_BARE_NUMBER)."""
    answer = parse_slate_answer(completion_of(ep), allow_bare_number)
    return answer.choice if answer.in_range(len(ep.row["slate_items"])) else None


def build_examples(
    episodes: list[Episode], show_ids: bool = False, allow_bare_number: bool | None = None
) -> list[DiscriminatorExample]:
    """Positives: each distinct row's logged click (once); negatives: valid, wrong policy choices."""
    positives: dict[str, DiscriminatorExample] = {}
    negatives: list[DiscriminatorExample] = []
    for ep in episodes:
        row = ep.row
        positives.setdefault(row["question"], example_for(row, row["gold_index"], 1, show_ids))
        choice = valid_choice(ep, allow_bare_number)
        if choice is not None and choice != row["gold_index"]:
            negatives.append(example_for(row, choice, 0, show_ids))
    return list(positives.values()) + negatives


class GailDiscriminator:
    """A ``LearnedReward`` (see rewards/learned/protocol.py): score, update, state_dict, load_state_dict."""

    name = "gail"

    def __init__(
        self,
        model_name_or_path: str,
        learning_rate: float = 2e-5,
        alpha: float = 1.0,
        device: str = "auto",
        show_ids: bool = False,
        trainable: bool = True,
        max_length: int = 512,
        replay: int = 0,
        minibatch: int = 0,
        updates: int = 1,
        seed: int = 0,
        score_batch_size: int = 64,
        allow_bare_number: bool | None = None,
    ):
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.device = pick_gail_device(device)
        self.alpha, self.show_ids, self.trainable, self.max_length = alpha, show_ids, trainable, max_length
        self.updates, self.minibatch, self.score_batch_size = max(1, updates), minibatch, score_batch_size
        self.allow_bare_number = allow_bare_number  # None: PUREACC_ALLOW_BARE_NUMBER decides
        self.frozen = False  # eval mode: scored, never updated (the scorer sets it)
        self.tokenizer = AutoTokenizer.from_pretrained(model_name_or_path)
        # A hub checkpoint without a classification head gets a fresh one: seeded, so every process
        # (and every run with this seed) starts from the same weights.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.model = AutoModelForSequenceClassification.from_pretrained(
                model_name_or_path, num_labels=2, torch_dtype=torch.float32
            ).to(self.device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=learning_rate)
        self.buffer: deque[DiscriminatorExample] = deque(maxlen=replay) if replay > 0 else deque(maxlen=0)
        self.generator = torch.Generator().manual_seed(seed)
        self.steps = 0

    # --- the forward pass ------------------------------------------------------------------
    def _encode(self, examples: list[DiscriminatorExample]) -> dict[str, torch.Tensor]:
        batch = self.tokenizer(
            [ex.choice for ex in examples],
            [ex.context for ex in examples],
            padding=True,
            truncation="only_second",
            max_length=self.max_length,
            return_tensors="pt",
        )
        return {k: v.to(self.device) for k, v in batch.items()}

    @torch.no_grad()
    def p_expert(self, examples: list[DiscriminatorExample]) -> torch.Tensor:
        """D(x) for every example, eval mode, no grad (on the CPU)."""
        if not examples:
            return torch.zeros(0)
        was_training = self.model.training
        self.model.eval()
        try:
            out = [
                self.model(**self._encode(examples[i : i + self.score_batch_size])).logits.float().softmax(-1)[:, 1]
                for i in range(0, len(examples), self.score_batch_size)
            ]
        finally:
            self.model.train(was_training)
        return torch.cat(out).cpu()

    # --- the LearnedReward protocol ------------------------------------------------------------
    def score(self, episodes: list[Episode]) -> list[float]:
        """GAIL_ALPHA * D(chosen item) for parseable in-range choices, 0 for the rest."""
        choices = [valid_choice(ep, self.allow_bare_number) for ep in episodes]
        scored = {i: c for i, c in enumerate(choices) if c is not None}
        probs = self.p_expert([example_for(episodes[i].row, c, 0, self.show_ids) for i, c in scored.items()])
        rewards = [0.0] * len(episodes)
        for i, p in zip(scored, probs.tolist()):
            rewards[i] = self.alpha * p
        return rewards

    def _step(self, examples: list[DiscriminatorExample]) -> None:
        self.model.train()
        labels = torch.tensor([ex.label for ex in examples], device=self.device)
        loss = torch.nn.functional.cross_entropy(self.model(**self._encode(examples)).logits.float(), labels)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.steps += 1

    def _draw(self, batch: list[DiscriminatorExample]) -> list[DiscriminatorExample]:
        if self.buffer.maxlen == 0:
            return batch
        size = min(self.minibatch or len(batch), len(self.buffer))
        picks = torch.randperm(len(self.buffer), generator=self.generator)[:size].tolist()
        return [self.buffer[i] for i in picks]

    def update(self, episodes: list[Episode]) -> dict[str, float]:
        """One AdamW step (GAIL_UPDATES with replay) on this batch's positives and negatives."""
        examples = gather_across_processes(build_examples(episodes, self.show_ids, self.allow_bare_number))
        metrics = self.measure(examples)
        if self.frozen or not self.trainable or not examples:
            return metrics
        self.buffer.extend(examples)
        for _ in range(self.updates):
            self._step(self._draw(examples))
        return metrics

    def measure(self, examples: list[DiscriminatorExample]) -> dict[str, float]:
        """Before any update: loss, accuracy (threshold 0.5) and mean D on positives and negatives."""
        probs = self.p_expert(examples)
        labels = torch.tensor([ex.label for ex in examples], dtype=torch.float32)
        pos, neg = probs[labels == 1], probs[labels == 0]
        metrics = {"disc/positives": float(len(pos)), "disc/negatives": float(len(neg))}
        if len(examples):
            eps = 1e-7
            bce = -(labels * (probs + eps).log() + (1 - labels) * (1 - probs + eps).log()).mean()
            metrics.update(
                {"disc/loss": float(bce), "disc/accuracy": float(((probs > 0.5).float() == labels).float().mean())}
            )
        if len(pos):
            metrics["disc/p_expert_pos"] = float(pos.mean())
        if len(neg):
            metrics["disc/p_expert_neg"] = float(neg.mean())
        return metrics

    @torch.no_grad()
    def loss(self, examples: list[DiscriminatorExample]) -> float:
        probs = self.p_expert(examples).clamp(1e-7, 1 - 1e-7)
        labels = torch.tensor([ex.label for ex in examples], dtype=torch.float32)
        return float(-(labels * probs.log() + (1 - labels) * (1 - probs).log()).mean())

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": {k: v.detach().cpu() for k, v in self.model.state_dict().items()},
            "optimizer": self.optimizer.state_dict(),
            "buffer": [vars(ex) for ex in self.buffer],
            "generator": self.generator.get_state(),
            "steps": self.steps,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.buffer.clear()
        self.buffer.extend(DiscriminatorExample(**ex) for ex in state["buffer"])
        self.generator.set_state(state["generator"])
        self.steps = state["steps"]
