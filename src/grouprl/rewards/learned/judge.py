"""LLM judges over any OpenAI-compatible endpoint: ``judge`` (pointwise) and ``group_judge`` (RULER-style).

``judge`` asks once per completion: a rubric template (Jinja) sees ``question`` (the last user turn
before the answer), ``completion`` (the last assistant turn), ``reference`` (the row's ground truth,
or None), ``conversation`` (the whole transcript as ``role: content`` lines) and ``row`` (every
column). ``group_judge`` asks once per group: the template sees ``question``, ``completions`` (the K
answers, in an order fixed by their text, so the judge cannot learn a favourite position and the
request stays cacheable), ``k``, ``reference`` and ``row``; one reply scores them all, which fits
GRPO's group-relative advantage (only the differences inside a group matter).

The score is parsed from the reply in a declared ``format``: ``score_line`` (a final ``SCORE: x`` line;
group: final ``<n>: x`` lines, one per answer), ``json`` (a final ``{"score": x}``; group ``{"scores":
[..]}``), ``number`` (the number the reply opens with; pointwise only) or your own ``score_pattern`` (a
regex whose first group is the number, searched in the last line; pointwise). Only the judge's own
verdict counts: it must end a complete reply and must not be text of the answers graded
(``judge_verdict.py``). A parsed score outside ``score_range`` is a parse failure; inside,
it is mapped to [0, 1] unless ``normalize: false``. A reply that does not parse and a request that
got no answer after its retries are *that sample's reward error* (counted against
``max_reward_error_fraction``), never a score of 0. For a group, a failed reply fails all K.

Options: base_url, model (required); api_key (default: $OPENAI_API_KEY, else "EMPTY"), template,
system_prompt, format, score_pattern, score_range, normalize, temperature, max_tokens, concurrency,
timeout, retries, backoff_seconds, cache (default true: ``<output_dir>/judge_cache/<name>``),
cache_dir, price_per_million_tokens ([prompt, completion]: a ``cost`` metric), batch_deadline (seconds for a
batch's requests, default 0.9 x ``reward_timeout``: what is unanswered then is an error, the rest scored),
extra_body (fields added to every request's JSON body as they are, for what a server offers beyond the
OpenAI schema: vLLM's ``structured_outputs: {regex: ...}`` forcing the reply into the declared format,
``transformers serve``'s ``logit_bias``; part of the cache key, since they change the answer).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from grouprl.config import ConfigError
from grouprl.records import EvaluateResult
from grouprl.config.redact import REDACTED
from grouprl.rewards.kit import reward_function
from grouprl.rewards.learned.judge_cache import JudgeCache
from grouprl.rewards.learned.judge_client import JudgeClient
from grouprl.rewards.learned.judge_templates import GROUP_TEMPLATE, POINTWISE_TEMPLATE, load_template
from grouprl.rewards.learned.judge_verdict import JudgeParseError, check_not_quoted, read_group_scores, read_score

__all__ = ["JudgeParseError", "build_judge", "parse_group_scores", "parse_score", "settings_from"]

log = logging.getLogger(__name__)

FORMATS = ("score_line", "json", "number")


@dataclass
class JudgeSettings:
    base_url: str
    model: str
    api_key: str | None = None
    template: str | None = None
    system_prompt: str | None = "You are a careful, strict grader."
    format: str = "score_line"
    score_pattern: str | None = None
    score_range: tuple[float, float] = (0.0, 10.0)
    normalize: bool = True
    temperature: float = 0.0
    max_tokens: int = 256
    concurrency: int = 8
    timeout: float = 30.0
    retries: int = 3
    backoff_seconds: float = 1.0
    cache: bool = True
    cache_dir: str | None = None
    price_per_million_tokens: tuple[float, float] | None = None
    batch_deadline: float | None = None  # default: 0.9 x reward_timeout (none when that is 0)
    extra_body: dict[str, Any] | None = None  # sent as they are in every request's body (server extensions)


# Fields the other options set: an extra_body must not silently override them (or stream the reply).
OWN_FIELDS = ("model", "messages", "temperature", "max_tokens", "max_completion_tokens", "stream", "n")


def settings_from(name: str, options: dict[str, Any]) -> JudgeSettings:
    known = {f.name for f in fields(JudgeSettings)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ConfigError(f"reward '{name}': unknown option(s) {unknown}; expected some of {sorted(known)}")
    missing = [k for k in ("base_url", "model") if not options.get(k)]
    if missing:
        raise ConfigError(
            f"reward '{name}': option(s) {missing} missing; a judge needs the endpoint's base_url "
            "(e.g. http://127.0.0.1:8000/v1) and the model it serves"
        )
    try:
        s = JudgeSettings(**options)
        s.score_range = tuple(float(x) for x in s.score_range)  # type: ignore[assignment]
        if s.price_per_million_tokens is not None:
            s.price_per_million_tokens = tuple(float(x) for x in s.price_per_million_tokens)  # type: ignore
    except (TypeError, ValueError) as err:
        raise ConfigError(f"reward '{name}': bad options ({err})") from None
    problems = [
        (s.format not in FORMATS, f"format {s.format!r}: expected one of {FORMATS}"),
        (name == "group_judge" and s.format == "number", "format 'number' cannot score a group"),
        (
            len(s.score_range) != 2 or s.score_range[0] >= s.score_range[1],
            f"score_range {list(s.score_range)}: expected [low, high] with low < high",
        ),
        (
            s.concurrency < 1 or s.retries < 0 or s.timeout <= 0 or s.max_tokens < 1,
            "concurrency >= 1, retries >= 0, timeout > 0 and max_tokens >= 1 expected",
        ),
    ]
    for bad, why in problems:
        if bad:
            raise ConfigError(f"reward '{name}': option {why}")
    if s.extra_body is not None and not isinstance(s.extra_body, dict):
        raise ConfigError(
            f"reward '{name}': option extra_body: expected a mapping of request fields, "
            f"found {type(s.extra_body).__name__} {s.extra_body!r:.60}"
        )
    clashes = sorted(set(s.extra_body or {}) & set(OWN_FIELDS))
    if clashes:
        raise ConfigError(
            f"reward '{name}': option extra_body sets {clashes}, which the judge sets itself "
            "(use the options model, temperature, max_tokens; streaming and n > 1 are not read)"
        )
    if s.score_pattern is not None:
        try:
            if re.compile(s.score_pattern).groups < 1:
                raise re.error("no group")
        except re.error as err:
            raise ConfigError(
                f"reward '{name}': score_pattern {s.score_pattern!r} is not a regex with a group ({err})"
            ) from None
    return s


def api_key_of(name: str, api_key: str | None) -> str:
    """The key to send: the option, else $OPENAI_API_KEY, else "EMPTY" (local servers). A config read back from a
    run folder holds the redaction mark instead of the key (config/redact.py): never sent, the environment's is used."""
    if api_key == REDACTED:
        if not os.environ.get("OPENAI_API_KEY"):
            raise ConfigError(
                f"reward '{name}': option api_key is {REDACTED!r} (a saved config never holds the key); "
                "give the key again: the option api_key or $OPENAI_API_KEY"
            )
        api_key = None
    return api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"


# --- parsing (judge_verdict.py: only the judge's own verdict, from a complete reply, counts) ---------
def parse_score(text: str, fmt: str, pattern: str | None = None) -> float:
    return read_score(text, fmt, pattern).scores[0]


def parse_group_scores(text: str, fmt: str, k: int) -> list[float]:
    return read_group_scores(text, fmt, k).scores


# --- the conversation as the judge sees it ----------------------------------------------------------
def _split(messages) -> tuple[str, str, str]:
    """(question, completion, transcript) of a conversation of ``Message``s."""
    turns = [(m.role, m.content or "") for m in messages]
    completion = next((c for r, c in reversed(turns) if r == "assistant"), "")
    last_answer = max((i for i, (r, _) in enumerate(turns) if r == "assistant"), default=len(turns))
    question = next((c for r, c in reversed(turns[:last_answer]) if r == "user"), "")
    return question, completion, "\n".join(f"{r}: {c}" for r, c in turns)


class Judge:
    """One judge: its settings, template, client and cache; ``__call__`` scores a batch."""

    def __init__(self, name: str, settings: JudgeSettings, run_dir: str | None, reward_timeout: float = 0.0):
        self.name, self.s, self.group = name, settings, name == "group_judge"
        self.template = load_template(name, settings.template, GROUP_TEMPLATE if self.group else POINTWISE_TEMPLATE)
        folder = settings.cache_dir or (str(Path(run_dir) / "judge_cache" / name) if run_dir else None)
        api_key = api_key_of(name, settings.api_key)
        deadline = settings.batch_deadline or (0.9 * reward_timeout if reward_timeout > 0 else None)
        self.client = JudgeClient(
            settings.base_url,
            api_key,
            settings.concurrency,
            settings.timeout,
            settings.retries,
            settings.backoff_seconds,
            JudgeCache(folder if settings.cache else None),
            deadline,
        )
        self.parse_failures = 0

    def request(self, prompt: str) -> dict[str, Any]:
        messages = [{"role": "system", "content": self.s.system_prompt}] if self.s.system_prompt else []
        request = {
            "model": self.s.model,
            "messages": messages + [{"role": "user", "content": prompt}],
            "temperature": self.s.temperature,
            "max_tokens": self.s.max_tokens,
        }
        if self.s.extra_body:  # merged into the JSON body by the client (judge_client.py)
            request["extra_body"] = dict(self.s.extra_body)
        return request

    def to_unit(self, score: float) -> float:
        low, high = self.s.score_range
        if not low <= score <= high:
            raise JudgeParseError(f"score {score:g} outside score_range [{low:g}, {high:g}]")
        return (score - low) / (high - low) if self.s.normalize else score

    def __call__(self, rollouts_messages, ground_truths=None, **columns) -> list[EvaluateResult]:
        truths = list(ground_truths) if ground_truths is not None else [None] * len(rollouts_messages)
        rows = [
            {k: v[i] for k, v in columns.items() if isinstance(v, list) and len(v) == len(truths)}
            for i in range(len(truths))
        ]
        parts = [_split(m) for m in rollouts_messages]
        if self.group:
            return self._score_groups(parts, truths, rows, columns.get("group_ids") or [0] * len(parts))
        prompts = [
            self.template.render(question=q, completion=c, conversation=t, reference=truth, row=row)
            for (q, c, t), truth, row in zip(parts, truths, rows)
        ]
        replies = self.client.ask([self.request(p) for p in prompts])
        return [
            self._result(
                r, lambda text, c=c: self._verdict(read_score(text, self.s.format, self.s.score_pattern), [c])
            )[0]
            for r, (_, c, _) in zip(replies, parts)
        ]

    def _score_groups(self, parts, truths, rows, group_ids) -> list[EvaluateResult]:
        members: dict[Any, list[int]] = {}
        for i, g in enumerate(group_ids):
            members.setdefault(g, []).append(i)
        groups = list(members.values())
        orders = [sorted(idx, key=lambda i: hashlib.sha256(parts[i][1].encode()).hexdigest()) for idx in groups]
        prompts = [
            self.template.render(
                question=parts[o[0]][0],
                completions=[parts[i][1] for i in o],
                k=len(o),
                reference=truths[o[0]],
                row=rows[o[0]],
            )
            for o in orders
        ]
        replies = self.client.ask([self.request(p) for p in prompts])
        out: list[EvaluateResult] = [None] * len(parts)  # type: ignore[list-item]
        for order, reply in zip(orders, replies):
            graded = [parts[i][1] for i in order]
            results = self._result(
                reply,
                lambda text, g=graded: self._verdict(read_group_scores(text, self.s.format, len(g)), g),
                len(order),
            )
            for i, result in zip(order, results):
                out[i] = result
        return out

    def _verdict(self, verdict, graded: list[str]) -> list[float]:
        check_not_quoted(verdict, graded)
        return [self.to_unit(x) for x in verdict.scores]

    def _result(self, reply, parse, n: int = 1) -> list[EvaluateResult]:
        if reply.text is None:
            return [EvaluateResult(score=0.0, is_score_valid=False, error=reply.error)] * n
        try:
            opens_with_verdict = self.s.format == "number" and self.s.score_pattern is None
            if reply.finish_reason == "length" and not opens_with_verdict:  # number: a cut comes after the verdict
                raise JudgeParseError(
                    f"the reply was cut at max_tokens={self.s.max_tokens} (finish_reason 'length'): no complete verdict"
                )
            scores = parse(reply.text)
        except JudgeParseError as err:
            self.parse_failures += 1
            return [
                EvaluateResult(
                    score=0.0, is_score_valid=False, error=f"parse failure: {err}; reply ...{reply.text[-120:]!r}"
                )
            ] * n
        return [EvaluateResult(score=s, reason=reply.text[-200:]) for s in scores]

    def drain_metrics(self) -> dict[str, float]:
        """This judge's counters since the last call (the scorer logs them per step, keyed by the reward)."""
        metrics = self.client.drain().as_metrics(self.s.price_per_million_tokens)
        metrics["parse_failures"], self.parse_failures = float(self.parse_failures), 0
        if metrics["requests"]:
            log.info(
                "%s: %d requests, %d sent, %d from the cache, %d parse failures, %d endpoint errors",
                self.name,
                metrics["requests"],
                metrics["calls"],
                metrics["cache_hits"],
                metrics["parse_failures"],
                metrics["endpoint_errors"],
            )
        return metrics


def build_judge(name: str, options: dict[str, Any], run_dir: str | None, reward_timeout: float = 0.0):
    """The typed batch reward for ``judge``/``group_judge`` with its options (checked here, before training)."""
    judge = Judge(name, settings_from(name, options), run_dir, reward_timeout)

    @reward_function(mode="batch", id=name)
    def llm_judge(rollouts_messages, ground_truths=None, **columns) -> list[EvaluateResult]:
        return judge(rollouts_messages, ground_truths, **columns)

    llm_judge.waits_on_network = True  # the scorer overlaps it with the other rewards
    llm_judge.drain_metrics = judge.drain_metrics
    return llm_judge
