"""``@reward_function``: typed reward functions usable in grouprl, in TRL, and standalone.

Pointwise: ``fn(messages: list[Message], ground_truth=None, **kwargs) -> EvaluateResult``.
Batch: ``fn(rollouts_messages: list[list[Message]], ground_truths=None, **kwargs) -> list[EvaluateResult]``.
Works bare (``@reward_function``) or with arguments (``@reward_function(mode="batch", id="x")``),
on ``def`` and ``async def``. Dicts are coerced to ``Message``; a wrong return type or a
function without ``**kwargs`` fails with an error naming the function.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from typing import Any, Awaitable, Callable, Protocol, cast

from grouprl.records import EvaluateResult, Message

MODES = ("pointwise", "batch")


class RewardFunction(Protocol):
    """What ``@reward_function`` returns: the checked function with its declaration attached."""

    __name__: str
    reward_mode: str  # "pointwise" or "batch"
    reward_id: str
    budget: str  # "per_call" or "per_sample"
    requirements: list[str]
    as_trl: Callable[..., Callable[..., list[float | None]]]

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...


class RewardFunctionError(TypeError):
    """A reward function that is declared or behaves against the contract."""


def _coerce_messages(fn_name: str, messages: Any) -> list[Message]:
    if not isinstance(messages, (list, tuple)):
        raise RewardFunctionError(
            f"reward '{fn_name}': messages must be a list of messages, got {type(messages).__name__}"
        )
    out = []
    for i, m in enumerate(messages):
        if isinstance(m, Message):
            out.append(m)
        elif isinstance(m, dict):
            out.append(Message.model_validate(m))
        else:
            raise RewardFunctionError(
                f"reward '{fn_name}': message {i} must be a dict or Message, got {type(m).__name__}"
            )
    return out


def _check_result(fn_name: str, value: Any) -> EvaluateResult:
    if isinstance(value, EvaluateResult):
        return value
    raise RewardFunctionError(f"reward '{fn_name}' returned {type(value).__name__}; expected EvaluateResult")


async def _awaited(value: Awaitable[Any]) -> Any:
    return await value


def _call(fn: Callable, *args, **kwargs) -> Any:
    result = fn(*args, **kwargs)
    if inspect.isawaitable(result):
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(_awaited(result))
        raise RewardFunctionError(
            f"reward '{fn.__name__}' is async and was called inside a running event loop; "
            "call it from a thread that runs none (grouprl's scorer does)"
        )
    return result


def reward_function(
    fn: Callable | None = None,
    *,
    mode: str = "pointwise",
    id: str | None = None,
    requirements: list[str] | None = None,
    budget: str = "per_call",
):
    """Declare a reward function (see the module docstring for the two contracts). ``budget``:
    ``per_call`` (the scorer's ``reward_timeout`` bounds one call) or ``per_sample`` (a batch reward
    that bounds each sample itself: it gets ``sample_timeout=reward_timeout`` and a call budget of
    ``reward_timeout`` per sample)."""

    def decorate(func: Callable) -> RewardFunction:
        name = id or func.__name__
        if mode not in MODES:
            raise RewardFunctionError(f"reward '{name}': mode must be one of {MODES}, got {mode!r}")
        if budget not in ("per_call", "per_sample"):
            raise RewardFunctionError(f"reward '{name}': budget must be 'per_call' or 'per_sample', got {budget!r}")
        params = inspect.signature(func).parameters.values()
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            raise RewardFunctionError(
                f"reward '{name}' must accept **kwargs (extra fields of the sample are passed to every reward)"
            )

        if mode == "pointwise":

            @functools.wraps(func)
            def wrapper(messages, ground_truth=None, **kwargs) -> EvaluateResult:
                msgs = _coerce_messages(name, messages)
                return _check_result(name, _call(func, msgs, ground_truth=ground_truth, **kwargs))
        else:

            @functools.wraps(func)
            def wrapper(rollouts_messages, ground_truths=None, **kwargs) -> list[EvaluateResult]:
                batches = [_coerce_messages(name, m) for m in rollouts_messages]
                results = _call(func, batches, ground_truths=ground_truths, **kwargs)
                if not isinstance(results, list) or len(results) != len(batches):
                    got = f"{len(results)} result(s)" if isinstance(results, (list, tuple)) else type(results).__name__
                    raise RewardFunctionError(
                        f"reward '{name}' (batch) returned {got} for {len(batches)} samples; it "
                        f"must return a list of {len(batches)} EvaluateResult, one per "
                        "sample, in order"
                    )
                return [_check_result(name, r) for r in results]

        typed = cast(RewardFunction, wrapper)  # the declaration is attached here
        typed.reward_mode = mode
        typed.reward_id = name
        typed.budget = budget
        typed.requirements = list(requirements or [])
        typed.as_trl = functools.partial(to_trl, typed)
        return typed

    return decorate(fn) if fn is not None else decorate


def score_batch(
    fn: RewardFunction, rollouts_messages: list[list[Any]], ground_truths: list[Any] | None = None, **kwargs
) -> list[EvaluateResult]:
    """Call a typed reward on many samples, whatever its mode."""
    if fn.reward_mode == "batch":
        return fn(rollouts_messages, ground_truths=ground_truths, **kwargs)
    truths = ground_truths if ground_truths is not None else [None] * len(rollouts_messages)
    per_sample = [{k: v[i] for k, v in kwargs.items()} for i in range(len(rollouts_messages))] if kwargs else None
    return [
        fn(m, ground_truth=t, **(per_sample[i] if per_sample else {}))
        for i, (m, t) in enumerate(zip(rollouts_messages, truths))
    ]


def conversation(prompt: Any, completion: Any) -> list[dict[str, Any]]:
    """Prompt (a string or messages) followed by the completion (a string or messages)."""
    msgs = list(prompt) if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}]
    if isinstance(completion, list):
        return msgs + list(completion)
    return msgs + [{"role": "assistant", "content": str(completion)}]


def to_trl(fn: RewardFunction, truth_key: str | None = None) -> Callable[..., list[float | None]]:
    """A TRL ``GRPOTrainer`` reward: ``(prompts, completions, **kwargs) -> list[float | None]``.

    The ground truth is the dataset column ``truth_key`` (default: the first of
    ``ground_truth``, ``answer``, ``solution`` that TRL passes). A result whose
    ``is_score_valid`` is false becomes ``None`` (TRL's "no opinion").
    """

    def trl_reward(prompts, completions, **kwargs) -> list[float | None]:
        key = truth_key or next((k for k in ("ground_truth", "answer", "solution") if k in kwargs), None)
        truths = kwargs.pop(key) if key else None
        extra = {k: v for k, v in kwargs.items() if isinstance(v, list) and len(v) == len(completions)}
        results = score_batch(fn, [conversation(p, c) for p, c in zip(prompts, completions)], truths, **extra)
        return [r.score if r.is_score_valid else None for r in results]

    trl_reward.__name__ = fn.reward_id
    return trl_reward


def with_options(fn: RewardFunction, **options: Any) -> RewardFunction:
    """A copy of the typed reward ``fn`` with ``options`` bound (they override same-named kwargs).

    The result is itself a ``@reward_function`` (same mode and id), so ``score_batch``,
    ``.as_trl()`` and the pipeline accept it.
    """

    def bound_batch(rollouts_messages, ground_truths=None, **kwargs):
        return fn(rollouts_messages, ground_truths=ground_truths, **{**kwargs, **options})

    def bound_pointwise(messages, ground_truth=None, **kwargs):
        return fn(messages, ground_truth=ground_truth, **{**kwargs, **options})

    bound = bound_batch if fn.reward_mode == "batch" else bound_pointwise
    bound.__name__ = fn.__name__
    bound.__doc__ = fn.__doc__
    return reward_function(bound, mode=fn.reward_mode, id=fn.reward_id, requirements=fn.requirements, budget=fn.budget)
