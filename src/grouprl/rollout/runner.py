"""The episode runner: every live episode's next action generated in one batch.

Runs groups x G episodes; all episodes of a group come from environments built by the same
factory and reset with the same seed, so they start from the same state. At each step it
builds every live episode's prompt (instructions + history window + observation +
admissible actions), generates for all of them in one batch, parses each action, steps
the environments (in this process or on Ray workers, see ``env_pool``) and stops at done or
``max_steps``. A single-turn task is an environment that is done after one step, so it
takes this same path.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

from grouprl.data.chat_format import render_prompt_ids
from grouprl.records import Episode, Step
from grouprl.rollout.agent.runner import AgentSettings, agent_settings, run_agent_episodes
from grouprl.rollout.conversation import ConversationSettings, conversation_settings, run_conversations
from grouprl.rollout.env_pool import EnvFactory, EnvPool, LocalEnvPool
from grouprl.rollout.generation import GenerationBackend, SamplingParams
from grouprl.rollout.prompts import DEFAULT_ACTION_PATTERN, build_messages, parse_action

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


def episode_settings(cfg, task) -> EpisodeSettings | ConversationSettings:
    """The config's settings for an environment task; one plain step for single-turn rows; with
    ``episode_mode: conversation``, a growing conversation with tools (``rollout/conversation.py``); with
    ``agent``, the user's agent through the endpoint (``rollout/agent/runner.py``)."""
    agent = agent_settings(cfg)
    if agent is not None:
        return agent
    conversation = conversation_settings(cfg)
    if conversation is not None:
        return conversation
    prompts = {
        "chat_template_kwargs": cfg.prompts.chat_template_kwargs or None,
        "max_prompt_length": cfg.prompts.max_prompt_length,
    }
    if not task.multi_step:
        return dataclasses.replace(SINGLE_TURN, **prompts)
    rollout = cfg.rollout
    return EpisodeSettings(
        max_steps=rollout.max_episode_steps,
        history_length=rollout.history_length,
        action_pattern=rollout.action_pattern or None,
        invalid_action_penalty=rollout.invalid_action_penalty,
        show_admissible_actions=rollout.show_admissible_actions,
        **prompts,
    )


def run_episodes(
    factories: list[EnvFactory],
    rows: list[dict[str, Any]],
    group_size: int,
    backend: GenerationBackend,
    tokenizer,
    params: SamplingParams,
    *,
    settings: EpisodeSettings | ConversationSettings = SINGLE_TURN,
    seeds: list[int | None] | None = None,
    pool: EnvPool | None = None,
    first_group: int = 0,
    policy_version: int = 0,
) -> list[Episode]:
    """Roll out ``group_size`` episodes per group; returns them grouped and in order.

    ``factories[g]`` builds group g's environment, ``seeds[g]`` resets it, ``rows[g]`` is the
    task row its episodes carry (ground truth for reward functions). Group g's episodes are born
    with ``group_id = first_group + g``: the trainer numbers a step's groups across every process
    and round here, so nothing renumbers episodes later. Conversation settings hand the rollout to
    ``rollout/conversation.py``, agent settings to ``rollout/agent/runner.py`` (``policy_version``: the
    trainer step whose weights generate, recorded on every agent call).
    """
    if isinstance(settings, AgentSettings):
        return run_agent_episodes(
            factories, rows, group_size, backend, tokenizer, params, settings, seeds, first_group, policy_version
        )
    if isinstance(settings, ConversationSettings):
        return run_conversations(
            factories, rows, group_size, backend, tokenizer, params, settings, seeds, pool, first_group
        )
    pool = pool or LocalEnvPool()
    n_groups = len(factories)
    seeds = list(seeds) if seeds is not None else [None] * n_groups
    episodes = [
        Episode(group_id=first_group + g, index_in_group=k, row=rows[g], seed=seeds[g])
        for g in range(n_groups)
        for k in range(group_size)
    ]
    started, instructions = pool.start(
        [factories[g] for g in range(n_groups) for _ in range(group_size)],
        [seeds[g] for g in range(n_groups) for _ in range(group_size)],
    )
    observations = dict(enumerate(started))  # the episodes still running, by index: what each one sees
    history: list[list[tuple[str, str]]] = [[] for _ in episodes]

    for _ in range(settings.max_steps):
        live = list(observations)
        if not live:
            break
        # Episodes of a group often see the same prompt (always at the first step):
        # render and tokenize each distinct one once.
        cache: dict[tuple, tuple[str, list[int], bool]] = {}
        prompts = []
        for i in live:
            messages = build_messages(
                instructions[i], history[i], observations[i], settings.history_length, settings.show_admissible_actions
            )
            key = tuple((m["role"], m["content"]) for m in messages)
            if key not in cache:
                cache[key] = render_prompt_ids(
                    tokenizer, messages, settings.chat_template_kwargs, settings.max_prompt_length
                )
            prompts.append((messages, *cache[key]))
        completions = backend.generate([p[2] for p in prompts], params)

        parsed = [
            parse_action(c.text, settings.action_pattern, observations[i].admissible_actions)
            for i, c in zip(live, completions)
        ]
        to_step = [(i, p.action) for i, p in zip(live, parsed) if p.action is not None]
        results = dict(zip([i for i, _ in to_step], pool.step([i for i, _ in to_step], [a for _, a in to_step])))
        for i, (messages, text, ids, cut), comp, p in zip(live, prompts, completions, parsed):
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
            result = results.get(i)
            if result is not None and result.info.get("invalid"):  # the env refused it (and did not advance)
                p.reason, result = result.info.get("reason", "rejected by the environment"), None
            if result is None:  # invalid: the environment stays where it was
                step.valid, step.penalty = False, settings.invalid_action_penalty
                step.invalid_reason = p.reason
            else:
                step.env_reward, step.env_info = float(result.reward), dict(result.info)
                if result.done:
                    episodes[i].done = True
                if result.done or result.observation is None:  # it ended (an environment without a next view too)
                    del observations[i]
                else:
                    observations[i] = result.observation
            episodes[i].steps.append(step)
            history[i].append((obs.text, comp.text))
    if log.isEnabledFor(logging.DEBUG):  # the counts walk every step: only when they are shown
        log.debug(
            "rollout: %d episodes, %d steps, %d invalid",
            len(episodes),
            sum(len(e.steps) for e in episodes),
            sum(not s.valid for e in episodes for s in e.steps),
        )
    return episodes
