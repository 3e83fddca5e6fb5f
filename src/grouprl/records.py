"""Records passed between modules: the contract of the engine.

Everything is an episode. A single-turn question is an episode of one step; a
multi-step agent task is an episode of many. Episodes that start from the same
initial state share a ``group_id`` and are normalised against each other.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any


def stable_id(text: str) -> str:
    """A short hash that is the same across processes and runs (unlike ``hash``)."""
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


@dataclass
class Observation:
    """What the policy sees at one step.

    ``text`` is the current observation; the runner's prompt builder puts it after the
    environment's ``instructions`` and the last ``history_length`` (observation, action)
    pairs. An environment that renders its whole chat itself (a single-turn dataset row)
    sets ``messages`` instead, and the prompt builder uses them as they are.
    """

    text: str
    anchor_state: Any  # environment state without history (GiGPO groups steps on it)
    admissible_actions: list[str] | None = None
    messages: list[dict[str, str]] | None = None


@dataclass
class StepResult:
    observation: Observation | None
    reward: float
    done: bool
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Step:
    """One policy decision: the prompt it saw and the action tokens it produced."""

    prompt_text: str
    prompt_ids: list[int]
    action_text: str
    action_ids: list[int]
    truncated: bool  # hit max_new_tokens without an end-of-sequence token
    anchor_state: Any
    messages: list[dict[str, Any]] | None = None  # the prompt's chat messages (history window included)
    observation: str = ""  # the observation text of this step (without history)
    valid: bool = True  # the action parsed and was admissible (else the env was not advanced)
    invalid_reason: str = ""  # why the action was invalid (empty when valid)
    penalty: float = 0.0  # invalid-action penalty charged to this step
    env_reward: float = 0.0
    env_info: dict[str, Any] = field(default_factory=dict)  # the environment's StepResult.info
    logprobs: list[float] | None = None  # the generation engine's per-token log-probs, when it gives them
    # The policy version (updates done) whose weights sampled this step's tokens: set by the asynchronous
    # producer (rollout/scheduler.py) and by the agent endpoint (each call's); None in sync mode where it is
    # always the current one.
    policy_version: int | None = None
    prompt_truncated: bool = False  # the prompt was cut to max_prompt_length (its last tokens kept)
    # Conversation episodes (rollout/conversation.py): the calls parsed from this turn and the tool
    # messages that answered them (each with its "error" kind or None).
    tool_calls: list[dict[str, Any]] | None = None
    tool_results: list[dict[str, Any]] | None = None


@dataclass
class AgentRun:
    """How a user's agent played one episode through the endpoint (``rollout/agent/runner.py``)."""

    calls: int = 0  # chat completions served for it
    segments: int = 0  # training samples its calls make: 1 = merged (append-only chat), more = split
    failure: str | None = None  # agent_raised | timeout | max_calls | no_calls | invalid_reward (None: it finished)
    message: str = ""  # the failure in one line
    refused: dict[str, int] = field(default_factory=dict)  # requests answered with an error, by kind
    latencies: list[float] = field(default_factory=list)  # seconds per served call (request in -> answer out)


@dataclass
class Episode:
    """A whole interaction, from reset to done (or the step cap)."""

    group_id: int
    index_in_group: int
    row: dict[str, Any]  # the task row it came from (question, ground truth, ...)
    steps: list[Step] = field(default_factory=list)
    seed: int | None = None  # the reset seed (all episodes of a group share it)
    done: bool = False  # the environment ended the episode (False: cut at max_steps)
    # One growing conversation: step t+1's prompt ids extend step t's prompt + action ids, so the
    # update scores the episode once as one sequence (train/conversation_samples.py).
    conversation: bool = False
    end_reason: str = ""  # conversations: answer | max_tool_calls | context | truncated
    # Episodes played by a user's agent through the endpoint (rollout/agent/runner.py): what the run did.
    agent: AgentRun | None = None

    @property
    def prompt_id(self) -> str:
        return stable_id(self.steps[0].prompt_text) if self.steps else ""

    @property
    def success(self) -> bool:
        """The environment reported success (``info['success']`` or ``info['correct']``) on the last step."""
        if not self.steps:
            return False
        info = self.steps[-1].env_info
        return bool(info.get("success", info.get("correct", False)))

    @property
    def episode_id(self) -> str:
        return f"g{self.group_id}-e{self.index_in_group}"


def grouped_episodes(
    rows: list[dict[str, Any]],
    group_size: int,
    seeds: list[int | None] | None = None,
    first_group: int = 0,
    conversation: bool = False,
) -> list[Episode]:
    """``group_size`` fresh episodes per row, grouped and in order: group g is born ``first_group + g`` (numbered
    where born, never later) with its row's reset seed (None without ``seeds``). Every runner starts from these."""
    seeds = list(seeds) if seeds is not None else [None] * len(rows)
    return [
        Episode(group_id=first_group + g, index_in_group=k, row=row, seed=seeds[g], conversation=conversation)
        for g, row in enumerate(rows)
        for k in range(group_size)
    ]


@dataclass
class Verdict:
    """What scoring decided about one episode. The episode records what happened; its verdict, what
    that was worth. The scorer returns one per episode (``rewards/scorer.py``, ``Scores.verdicts``) and
    the verdicts flow on, in the episodes' order, to the advantages, metrics, logs and evaluation."""

    score: float = 0.0  # the episode score R (weighted rewards + env rewards - penalties, learned part mixed in)
    step_rewards: list[float] = field(default_factory=list)  # r_t per step (sum_t r_t = R without step outputs)
    parts: dict[str, float | None] = field(default_factory=dict)  # each reward's score (None: failed / no opinion)
    errors: list[str] = field(default_factory=list)  # "reward: error" for rewards that raised
    reasons: dict[str, str] = field(default_factory=dict)  # typed rewards' EvaluateResult.reason
    prediction: str | None = None  # what the completion answered (the task's parser)
    correct: bool = False  # single-turn: the judge reward is 1.0; environments: the episode succeeded


# --- reward records (the reward kit's contract) -------------------------------------------------
from pydantic import BaseModel, ConfigDict, Field  # noqa: E402


class Message(BaseModel):
    """One chat turn, as reward functions receive it."""

    model_config = ConfigDict(extra="allow")

    role: str
    content: str = ""
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: list[dict[str, Any]] | None = None


class MetricResult(BaseModel):
    """One named sub-score of a reward, in [0, 1], with why."""

    score: float = Field(ge=0.0, le=1.0)
    is_score_valid: bool = True
    reason: str | None = None


class StepOutput(BaseModel):
    """A reward for one step of a multi-step episode (``step_index`` names an assistant turn)."""

    step_index: int | str
    base_reward: float
    metrics: dict[str, Any] = Field(default_factory=dict)
    reason: str | None = None


class EvaluateResult(BaseModel):
    """What a reward function returns: the episode score, its parts, and optional per-step rewards."""

    score: float
    is_score_valid: bool = True
    reason: str | None = None
    metrics: dict[str, MetricResult] = Field(default_factory=dict)
    step_outputs: list[StepOutput] | None = None
    error: str | None = None
