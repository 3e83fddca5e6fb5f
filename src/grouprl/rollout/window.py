"""The window runner: every live episode's next action generated in one batch (``episode_mode: window``).

Runs groups x G episodes; all episodes of a group come from environments built by the same factory and reset
with the same seed, so they start from the same state. At each step it builds every live episode's prompt
(instructions + history window + observation + admissible actions), generates for all of them in one batch,
parses each action, steps the environments (in this process or on Ray workers, see ``env_pool``) and stops at
done or ``max_steps``. A single-turn task is an environment that is done after one step, so it takes this same
path. ``rollout/runner.py:run_episodes`` is the one entry that picks this runner, the conversation runner or
the agent runner.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from grouprl.data.chat_format import PromptTooLong, prompt_room, render_prompt_ids
from grouprl.records import Episode, grouped_episodes, Observation, Step, StepResult
from grouprl.rollout.env_pool import EnvFactory, EnvPool, LocalEnvPool
from grouprl.rollout.generation import GenerationBackend, SamplingParams
from grouprl.rollout.prompts import DEFAULT_ACTION_PATTERN, ParsedAction, build_messages, parse_action
from grouprl.rollout.sampling import Completion

log = logging.getLogger(__name__)


@dataclass
class EpisodeSettings:
    """How the runner plays an episode: its step cap, prompt window and action rules."""

    max_steps: int = 1  # step cap per episode (the env may end it sooner)
    history_length: int = 2  # past (observation, action) pairs shown in the prompt
    action_pattern: str | None = DEFAULT_ACTION_PATTERN  # regex whose first group is the action; None = whole text
    invalid_action_penalty: float = 0.1  # charged to a step whose action does not parse or is inadmissible
    show_admissible_actions: bool = True
    chat_template_kwargs: dict[str, Any] | None = None  # passed to apply_chat_template (e.g. enable_thinking)
    max_prompt_length: int | None = None  # keep the last N prompt tokens (left truncation)


SINGLE_TURN = EpisodeSettings(max_steps=1, history_length=0, action_pattern=None, invalid_action_penalty=0.0)


Prompt = tuple[list[dict[str, Any]], str, list[int], bool]  # messages, text, ids, truncated


def run_window_episodes(
    factories: list[EnvFactory],
    rows: list[dict[str, Any]],
    group_size: int,
    backend: GenerationBackend,
    tokenizer,
    params: SamplingParams,
    settings: EpisodeSettings,
    seeds: list[int | None] | None = None,
    pool: EnvPool | None = None,
    first_group: int = 0,
) -> list[Episode]:
    """``group_size`` windowed episodes per group, grouped and in order (``run_episodes``' contract)."""
    pool = pool or LocalEnvPool()
    episodes = grouped_episodes(rows, group_size, seeds, first_group)
    started, instructions = pool.start(
        [factories[ep.group_id - first_group] for ep in episodes], [ep.seed for ep in episodes]
    )
    observations = dict(enumerate(started))  # the episodes still running, by index: what each one sees
    history: list[list[tuple[str, str]]] = [[] for _ in episodes]
    for _ in range(settings.max_steps):
        live = list(observations)
        if not live:
            break
        prompts = _prompts(live, instructions, history, observations, tokenizer, settings, params, episodes)
        completions = backend.generate([p[2] for p in prompts], params)
        parsed = [
            parse_action(c.text, settings.action_pattern, observations[i].admissible_actions)
            for i, c in zip(live, completions)
        ]
        to_step = [(i, p.action) for i, p in zip(live, parsed) if p.action is not None]
        results = dict(zip([i for i, _ in to_step], pool.step([i for i, _ in to_step], [a for _, a in to_step])))
        for i, prompt, comp, p in zip(live, prompts, completions, parsed):
            obs = observations[i]
            _record_step(episodes[i], observations, i, prompt, comp, p, results.get(i), settings)
            history[i].append((obs.text, comp.text))
    if log.isEnabledFor(logging.DEBUG):  # the counts walk every step: only when they are shown
        log.debug(
            "rollout: %d episodes, %d steps, %d invalid",
            len(episodes),
            sum(len(e.steps) for e in episodes),
            sum(not s.valid for e in episodes for s in e.steps),
        )
    return episodes


def _prompts(
    live, instructions, history, observations, tokenizer, settings: EpisodeSettings, params, episodes
) -> list[Prompt]:
    """Every live episode's prompt. Episodes of a group often see the same prompt (always at the first step):
    each distinct one is rendered and tokenized once. One longer than the model's context leaves for the
    completion is refused naming its row (``max_prompt_length`` truncates instead)."""
    room = prompt_room(tokenizer, params.max_new_tokens)
    cache: dict[tuple, tuple[str, list[int], bool]] = {}
    prompts = []
    for i in live:
        messages = build_messages(
            instructions[i], history[i], observations[i], settings.history_length, settings.show_admissible_actions
        )
        key = tuple((m["role"], m["content"]) for m in messages)
        if key not in cache:
            try:
                cache[key] = render_prompt_ids(
                    tokenizer, messages, settings.chat_template_kwargs, settings.max_prompt_length, room
                )
            except PromptTooLong as err:
                raise PromptTooLong(
                    f"{_row_label(episodes[i].row)}: {err} (max_completion_length {params.max_new_tokens}); set "
                    "max_prompt_length (section prompts) to keep its last tokens, or drop the row"
                ) from None
        prompts.append((messages, *cache[key]))
    return prompts


def _record_step(
    episode: Episode,
    observations: dict[int, Observation],
    i: int,
    prompt: Prompt,
    comp: Completion,
    parsed: ParsedAction,
    result: StepResult | None,
    settings: EpisodeSettings,
) -> None:
    """One step of episode ``i`` recorded; the episode advances (or ends) where the environment took it."""
    messages, text, ids, cut = prompt
    obs = observations[i]
    step = Step(
        prompt_text=text,
        prompt_ids=ids,
        action_text=comp.text,
        action_ids=comp.ids,
        truncated=comp.truncated,
        anchor_state=obs.anchor_state,
        messages=messages,
        observation=obs.text,
        logprobs=comp.logprobs,
        prompt_truncated=cut,
        policy_version=comp.policy_version,
    )
    if result is not None and result.info.get("invalid"):  # the env refused it (and did not advance)
        parsed.reason, result = result.info.get("reason", "rejected by the environment"), None
    if result is None:  # invalid: the environment stays where it was
        step.valid, step.penalty = False, settings.invalid_action_penalty
        step.invalid_reason = parsed.reason
    else:
        step.env_reward, step.env_info = float(result.reward), dict(result.info)
        if result.done:
            episode.done = True
        if result.done or result.observation is None:  # it ended (an environment without a next view too)
            del observations[i]
        else:
            observations[i] = result.observation
    episode.steps.append(step)


def _row_label(row: dict[str, Any]) -> str:
    """The row as an error line names it: its id where it has one, else its first fields, shortened."""
    for key in ("id", "_id", "row_id", "index"):
        if key in row:
            return f"row {key}={row[key]!r}"
    shown = ", ".join(f"{k}={str(v)[:40]!r}" for k, v in list(row.items())[:2])
    return f"row ({shown})"
