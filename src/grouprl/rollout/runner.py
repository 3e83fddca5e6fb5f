"""The one entry to a rollout: ``run_episodes`` picks the runner the settings name and returns its episodes.

Three runners, one pattern (``run_<mode>_episodes``) and one contract (``group_size`` episodes per group, grouped
and in order, group g born with ``group_id = first_group + g``): the window runner (``rollout/window.py``: one
prompt a step with a history window; single-turn tasks too), the conversation runner
(``rollout/conversation.py``: one growing chat with tool calls) and the agent runner
(``rollout/agent/runner.py``: the user's agent through the OpenAI-compatible endpoint).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from grouprl.records import Episode
from grouprl.rollout.agent.runner import AgentSettings, agent_settings, run_agent_episodes
from grouprl.rollout.conversation import ConversationSettings, conversation_settings, run_conversation_episodes
from grouprl.rollout.env_pool import EnvFactory, EnvPool
from grouprl.rollout.generation import GenerationBackend, SamplingParams
from grouprl.rollout.window import SINGLE_TURN, EpisodeSettings, run_window_episodes

__all__ = ["SINGLE_TURN", "EpisodeSettings", "episode_settings", "run_episodes"]


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
        return run_conversation_episodes(
            factories, rows, group_size, backend, tokenizer, params, settings, seeds, pool, first_group
        )
    return run_window_episodes(
        factories, rows, group_size, backend, tokenizer, params, settings, seeds, pool, first_group
    )
