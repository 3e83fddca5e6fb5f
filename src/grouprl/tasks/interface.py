"""The task and environment interface: what the runner, the scorer and the warm start may ask of them.

An **environment** is what an episode runs against: ``reset(seed)`` gives the first observation,
``step(action)`` the next one with a reward and ``done``. Subclass :class:`Environment` and write
those two; ``instructions`` (the task text of the system message) and ``expert_action()`` (the
next expert move, for SFT demonstrations) have defaults. Environments are built by *factories*:
zero-argument picklable callables (``functools.partial(GridWorld, size=4)``), so a remote worker
can build them where it runs.

A **task** is where episodes come from: rows to train and evaluate on, the environment of a row,
its rewards. Subclass :class:`Task` (``SingleTurnTask`` and ``EnvTask`` do); every optional hook
has a default here, so nothing asks a task whether it has one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from grouprl.records import Episode, Observation, StepResult


class Environment:
    """Write ``reset`` and ``step``; ``instructions`` and ``expert_action`` have defaults."""

    instructions: str = ""

    def reset(self, seed: int | None = None) -> Observation:
        raise NotImplementedError(f"{type(self).__name__}.reset")

    def step(self, action: str) -> StepResult:
        raise NotImplementedError(f"{type(self).__name__}.step")

    def expert_action(self) -> str | None:
        """The next expert move (SFT demonstrations); None: this environment has no expert."""
        return None


EnvFactory = Callable[[], Any]  # zero arguments, picklable; builds an Environment


def instructions_of(env: Any) -> str:
    """The environment's instructions ('' when it gives none). Tolerant of an environment that does
    not subclass :class:`Environment` (one written against the protocol alone)."""
    return getattr(env, "instructions", "") or ""


class Task:
    """Where episodes come from. A task has ``name``, ``train_rows``, ``eval_rows``, ``reward_names``,
    ``reward_weights``, ``reward_kwargs``, ``correct_reward`` and ``multi_step``, and answers
    ``env_factory(row)`` and ``tokenizer_corpus()``; the hooks below have defaults."""

    multi_step: bool = False
    # The tiny model's tokenizer for this task: "char" (one token per character) or "word".
    tiny_tokenizer: str = "char"
    # The tiny model's declared context (None: the tokenizer kind's default, 512 char / 4096 word); engines
    # such as vLLM refuse longer sequences.
    tiny_max_positions: int | None = None
    # Whether rows carry ``gold_completion`` (SFT warm start of the tiny model); environments play
    # demonstrations instead.
    has_gold_completions: bool = True
    # What a completion answered, parsed from its text (the scorer records it as the verdict's ``prediction``);
    # None: the task has no answer parser.
    predict: Callable[[str], Any] | None = None
    # A scripted solver for tool conversations, ``reply(prompt_text) -> str``: the tool SFT warm start
    # (``job/tool_sft.py``) plays it on ``sft_rows(n)``. None: the task has no solver.
    expert_reply: Callable[[str], str] | None = None

    def env_factory(self, row: dict[str, Any]) -> EnvFactory:
        raise NotImplementedError(f"{type(self).__name__}.env_factory")

    def seed_of(self, row: dict[str, Any]) -> int | None:
        """The seed ``reset`` gets for this row (None: the environment is fixed by the row)."""
        return None

    def tokenizer_corpus(self) -> str:
        raise NotImplementedError(f"{type(self).__name__}.tokenizer_corpus")

    def sft_rows(self, n: int) -> list[dict[str, Any]]:
        """``n`` rows for the scripted solver's conversations (``expert_reply``), on seeds that training
        and evaluation never use."""
        raise NotImplementedError(f"{type(self).__name__}.sft_rows")

    def eval_metrics(self, episodes: list[Episode]) -> dict[str, float]:
        """The task's own evaluation measures beside accuracy (slates: next click, opinion)."""
        return {}

    def scorer_extras(self, cfg: Any = None) -> dict[str, Any]:
        """Learned rewards and a mixer the scorer adds (GRAIL's discriminator): {} for none."""
        return {}
