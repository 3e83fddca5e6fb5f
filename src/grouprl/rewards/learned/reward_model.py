"""A sequence classifier as a reward: ``rewards: [path/or/hub-id]``.

The conversation (prompt + completion, or a whole agent episode) is rendered through the reward
model's *own* chat template (the one it was trained on, not the policy's), tokenized with its own
tokenizer, and scored in batches of ``batch_size`` in no-grad eval mode on its own device and dtype.
The score is one logit of the classification head:

* one-logit heads (the usual reward model): that logit;
* multi-label heads (a sentiment or quality classifier): the logit of ``label`` (its name in the
  model's ``id2label`` or its index), which the recipe must name, since guessing would score the wrong
  class silently.

``normalize``: ``none`` (the raw logit), ``sigmoid`` (a one-logit head's P(preferred)), ``softmax``
(the chosen label's probability among the head's labels), ``standard`` ((logit - mean) / std with the
recipe's ``mean``/``std``, e.g. measured on a calibration set). Each is a fixed function of the logit,
so a reward model has no state: scores are the same on every process, before and after a resume, in
training and in evaluation (it is never updated; see docs/rewards.md).

The conversation is cut from the left to ``max_length`` tokens (the completion, at the end, is what
is judged); a sample cut so is counted in the part's ``truncated`` metric.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any

import torch

from grouprl.config import ConfigError
from grouprl.records import EvaluateResult, MetricResult
from grouprl.rewards.kit import reward_function
from grouprl.user_code import names_code

NORMALIZE = ("none", "sigmoid", "softmax", "standard")
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
PLAIN_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n"
    "{% endfor %}"
)  # for classifiers that ship without a chat template (BERT-style)


def looks_like_model(name: str) -> bool:
    """A local folder with a ``config.json``, or a hub id ``owner/name`` (not a file, not ``module:fn``)."""
    if names_code(name):
        return False
    return (Path(name) / "config.json").is_file() or (HUB_ID.match(name) is not None and not Path(name).exists())


def pick_device(device: str) -> torch.device:
    """``auto``: this process's GPU (``LOCAL_RANK`` under accelerate) when there is one, else the CPU."""
    if device != "auto":
        return torch.device(device)
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count())
    return torch.device("cpu")


def pick_dtype(torch_dtype: str, device: torch.device) -> torch.dtype:
    if torch_dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if torch_dtype not in ("float32", "bfloat16", "float16"):
        raise ConfigError(
            f"reward model option 'torch_dtype': got {torch_dtype!r}; expected auto, float32, bfloat16 or float16"
        )
    return getattr(torch, torch_dtype)


class SequenceClassifier:
    """A tokenizer + sequence-classification model that turns conversations into logits (N, labels)."""

    def __init__(
        self,
        name_or_path: str,
        revision: str | None = None,
        device: str = "auto",
        torch_dtype: str = "auto",
        batch_size: int = 8,
        max_length: int = 1024,
        trust_remote_code: bool = False,
        model=None,
        tokenizer=None,
    ):
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.name = name_or_path
        self.device = pick_device(device)
        self.batch_size, self.max_length = int(batch_size), int(max_length)
        if self.batch_size < 1 or self.max_length < 2:
            raise ConfigError(
                f"reward model '{name_or_path}': batch_size {batch_size} and max_length {max_length}; "
                "expected batch_size >= 1 and max_length >= 2"
            )
        try:
            self.tokenizer = tokenizer or AutoTokenizer.from_pretrained(
                name_or_path, revision=revision, trust_remote_code=trust_remote_code
            )
            self.model = model or AutoModelForSequenceClassification.from_pretrained(
                name_or_path,
                revision=revision,
                trust_remote_code=trust_remote_code,
                dtype=pick_dtype(torch_dtype, self.device),
            )
        except (OSError, ValueError) as err:
            raise ConfigError(
                f"reward model '{name_or_path}': cannot be loaded as a sequence classifier "
                f"({type(err).__name__}: {str(err).splitlines()[0][:200]})"
            ) from None
        self.model.to(self.device).eval().requires_grad_(False)
        if self.tokenizer.pad_token_id is None:  # decoder reward models often ship without one
            self.tokenizer.pad_token = self.tokenizer.eos_token
        # The head reads the last non-pad token; the model must know which id is padding.
        self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.tokenizer.padding_side, self.tokenizer.truncation_side = "right", "left"
        self.template = getattr(self.tokenizer, "chat_template", None) or PLAIN_TEMPLATE

    @property
    def labels(self) -> dict[int, str]:
        return {int(i): str(n) for i, n in (self.model.config.id2label or {}).items()}

    def render(self, conversation: list[dict[str, Any]]) -> str:
        text = self.tokenizer.apply_chat_template(conversation, chat_template=self.template, tokenize=False)
        assert isinstance(text, str)  # tokenize=False renders one string
        return text

    def encode(self, texts: list[str]) -> tuple[dict[str, torch.Tensor], list[bool]]:
        full = self.tokenizer(texts, add_special_tokens=False)["input_ids"]
        batch = self.tokenizer(
            texts,
            add_special_tokens=False,
            padding=True,
            truncation=True,
            max_length=self.max_length,
            return_tensors="pt",
        )
        return {k: v.to(self.device) for k, v in batch.items()}, [len(ids) > self.max_length for ids in full]

    def forward(self, texts: list[str]) -> torch.Tensor:
        """Logits (N, labels) in float32, with gradients (the caller decides: training or no_grad)."""
        batch, _ = self.encode(texts)
        return self.model(**batch).logits.float()

    @torch.no_grad()
    def logits(self, conversations: list[list[dict[str, Any]]]) -> tuple[torch.Tensor, list[bool]]:
        """Logits (N, labels) on the CPU and whether each conversation was cut; eval mode, no grad."""
        was_training = self.model.training
        self.model.eval()
        out, cut = [], []
        try:
            texts = [self.render(c) for c in conversations]
            for start in range(0, len(texts), self.batch_size):
                batch, truncated = self.encode(texts[start : start + self.batch_size])
                out.append(self.model(**batch).logits.float().cpu())
                cut += truncated
        finally:
            self.model.train(was_training)
        labels = self.model.config.num_labels
        return (torch.cat(out) if out else torch.zeros(0, labels)), cut


def label_index(classifier: SequenceClassifier, label: int | str | None) -> int:
    """The head's column to read: the only one, or the recipe's ``label`` (a name or an index)."""
    labels = classifier.labels or {i: str(i) for i in range(classifier.model.config.num_labels)}
    if len(labels) == 1 and label in (None, 0, labels[0]):
        return 0
    if label is None:
        raise ConfigError(
            f"reward model '{classifier.name}' has {len(labels)} labels {sorted(labels.values())}; "
            "option 'label' must name the one to reward"
        )
    for index, name in labels.items():
        if label == name or label == index or str(label) == str(index):
            return index
    raise ConfigError(
        f"reward model '{classifier.name}': option 'label' is {label!r}; expected one of "
        f"{sorted(labels.values())} or an index below {len(labels)}"
    )


def normalized(logits: torch.Tensor, index: int, normalize: str, mean: float, std: float) -> torch.Tensor:
    if normalize == "sigmoid":
        return torch.sigmoid(logits[:, index])
    if normalize == "softmax":
        return torch.softmax(logits, dim=-1)[:, index]
    if normalize == "standard":
        return (logits[:, index] - mean) / std
    return logits[:, index]


def reward_model_reward(
    name: str,
    label: int | str | None = None,
    normalize: str = "none",
    mean: float = 0.0,
    std: float = 1.0,
    **options: Any,
):
    """The typed batch reward for reward model ``name`` (options: see the module docstring and
    ``SequenceClassifier``); loaded once, here, so a bad model fails before training starts."""
    if normalize not in NORMALIZE:
        raise ConfigError(f"reward model '{name}': option 'normalize' is {normalize!r}; expected one of {NORMALIZE}")
    if normalize == "standard" and not (math.isfinite(std) and std > 0):
        raise ConfigError(f"reward model '{name}': option 'std' is {std!r}; expected a positive number")
    allowed = {"revision", "device", "torch_dtype", "batch_size", "max_length", "trust_remote_code"}
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise ConfigError(
            f"reward model '{name}': unknown option(s) {unknown}; expected label, normalize, mean, "
            f"std, {', '.join(sorted(allowed))}"
        )
    classifier = SequenceClassifier(name, **options)
    index = label_index(classifier, label)

    @reward_function(mode="batch", id=name)
    def reward_model(rollouts_messages, ground_truths=None, **kwargs) -> list[EvaluateResult]:
        conversations = [[m.model_dump(exclude_none=True) for m in messages] for messages in rollouts_messages]
        present = [i for i, c in enumerate(conversations) if c]
        logits, cut = classifier.logits([conversations[i] for i in present])
        scores = normalized(logits, index, normalize, float(mean), float(std)).tolist()
        out = [
            EvaluateResult(score=0.0, is_score_valid=False, error="empty conversation: nothing to score")
            for _ in conversations
        ]
        for i, score, truncated in zip(present, scores, cut):
            out[i] = EvaluateResult(score=score, metrics={"truncated": MetricResult(score=float(truncated))})
        return out

    return reward_model
