"""Episodes played by an agent the user already wrote, through the OpenAI-compatible endpoint.

``agent: path/to/agent.py:run`` (or ``package.module:run``; flag ``--agent``) names an
``async def run(client, row, **extras)``: ``client`` is an ``openai.AsyncOpenAI`` pointed at this
episode's endpoint URL, ``row`` the task row, and the extras are ``model``, ``base_url`` and
``api_key`` for agents that build their own client. The agent drives the model however it likes and
returns its reward -- a number, an ``EvaluateResult``-like object (``score``, ``is_score_valid``) or a
dict with ``score`` (and optionally ``success``) -- or ``None``, and then the task's environment judges
the last answer, as it judges a conversation's final turn (the recipe's reward functions score the final
messages in both cases). A returned number counts as solved when it is 1 or more, unless a dict says.

Every episode of the rollout runs at once on one event loop (in its own thread, so an agent that blocks
the loop cannot stall the run: past ``episode_timeout`` plus a grace period the thread is abandoned).
An agent that raises, outlives ``episode_timeout``, asks for more than ``max_calls`` calls, makes no
call or returns something that is not a reward gives a *failed* episode: it keeps the calls it made
(they are the policy's samples), scores 0, and its failure is counted (``agent/failed/<kind>``); the first
failure of each kind in a run is printed once, with the agent's traceback (``failures.py``).

The calls become the same ``Episode`` records conversation mode produces (``conversation=True``): GRPO
groups are the K runs of the agent on a row, GiGPO anchors the tool-interaction state of each call's
messages, and ``train/conversation_samples.py`` packs each chain of calls as one sample.
"""

from __future__ import annotations

import asyncio
import functools
import secrets
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from grouprl.config import Config, ConfigError
from grouprl.records import AgentRun, Episode, grouped_episodes, Step
from grouprl.rewards.guard import finite_score
from grouprl.rollout.turn_cache import episodes_ended
from grouprl.rollout.agent.calls import EpisodeCalls, call_segments, calls_to_steps
from grouprl.rollout.agent.endpoint import AgentEndpoint
from grouprl.rollout.agent.failures import FAILURES, agent_traceback, raised_message, report_first_failures
from grouprl.rollout.agent.run_progress import RunProgress
from grouprl.rollout.conversation import ConversationSettings, conversation_settings, initial_prompt
from grouprl.rollout.env_pool import EnvFactory
from grouprl.rollout.sampling import GenerationBackend, SamplingParams
from grouprl.tools.chat_template import ensure_tool_template

_GRACE_S = 30.0  # past episode_timeout, how long the loop's thread is waited for before it is abandoned


@dataclass
class AgentSettings(ConversationSettings):
    """Conversation settings (parser, template, anchors, penalty, the recipe's tools for the warm start)
    plus the agent and its limits."""

    agent: Callable[..., Any] | None = None
    max_calls: int = 16
    episode_timeout: float = 300.0
    model_name: str = "policy"  # the served name: the model's hub id or folder name (and always "policy")
    api_key: str = field(default_factory=lambda: "grouprl-" + secrets.token_hex(16), repr=False)
    batch_window_s: float = 0.5  # the endpoint's batch: requests arriving less than this apart (5 s at most)
    # the failure kinds and refusal codes already printed in this run (failures.report_first_failures)
    reported: set[str] = field(default_factory=set, repr=False, compare=False)
    # sees each episode's call records once it closed (grouprl agent check); None in training
    inspect: Callable[[str, list], None] | None = field(default=None, repr=False, compare=False)


def agent_settings(cfg: Config) -> AgentSettings | None:
    """The config's agent settings, or None without ``agent`` (``rollout.runner.episode_settings``)."""
    tools_config = cfg.tools
    if not tools_config.agent:
        return None
    from grouprl.user_code import import_callable

    try:
        agent = import_callable(tools_config.agent, "agent")
    except KeyError as err:
        raise ConfigError(str(err).strip("'\"")) from None
    if not asyncio.iscoroutinefunction(agent):
        raise ConfigError(
            f"config key 'agent': {tools_config.agent} is not an async function; expected "
            "'async def run(client, row, **extras)'"
        )
    base = conversation_settings(
        cfg.model_copy(update={"tools": tools_config.model_copy(update={"episode_mode": "conversation"})})
    )
    assert base is not None
    fields = {name: getattr(base, name) for name in ConversationSettings.__dataclass_fields__}
    model = str(cfg.model.model_name_or_path or "policy")  # a hub id as it is, a local folder by its name
    model_name = Path(model).name if Path(model).is_dir() else model
    return AgentSettings(
        **fields,
        agent=agent,
        max_calls=tools_config.max_calls,
        episode_timeout=tools_config.episode_timeout,
        model_name=model_name,
    )


def run_agent_episodes(
    factories: list[EnvFactory],
    rows: list[dict[str, Any]],
    group_size: int,
    backend: GenerationBackend,
    tokenizer,
    params: SamplingParams,
    settings: AgentSettings,
    seeds: list[int | None] | None = None,
    first_group: int = 0,
    policy_version: int = 0,
) -> list[Episode]:
    """``group_size`` runs of the agent per row, grouped and in order (``run_episodes``' contract)."""
    if settings.agent is None:
        raise ValueError("AgentSettings.agent is not set")
    ensure_tool_template(tokenizer, settings.chat_template)
    episodes = grouped_episodes(rows, group_size, seeds, first_group, conversation=True)
    progress = RunProgress(params.progress, len(episodes)) if params.progress is not None else None
    with AgentEndpoint(
        backend,
        tokenizer,
        params,
        api_key=settings.api_key,
        model_name=settings.model_name,
        parser=settings.parser,
        template_kwargs=settings.chat_template_kwargs,
        max_context=settings.max_conversation_tokens,
        max_calls=settings.max_calls,
        policy_version=policy_version,
        window_s=settings.batch_window_s,
        # drawn here, in the caller's order: each call's sample then depends on the seed, not on other agents' timing
        draw_seed=None if params.greedy else int(torch.randint(0, 2**62, ()).item()),
        progress=progress,  # counted in episodes, not in each call's rows
    ) as endpoint:
        records = [endpoint.open_episode(ep.episode_id) for ep in episodes]
        # at most one batch of agents at a time: the endpoint serves no more calls at once, and an agent waiting
        # for a batch holds its conversation (and, with the turn cache, its keys and values) in memory
        in_flight = max(params.batch_size, 1)
        for record in records[in_flight:]:
            record.started = False
        outcomes = _play_all(
            settings,
            [endpoint.base_url(ep.episode_id) for ep in episodes],
            [record.key for record in records],
            [ep.row for ep in episodes],
            [functools.partial(_close, endpoint, ep.episode_id, progress) for ep in episodes],
            [functools.partial(setattr, record, "started", True) for record in records],
            in_flight,
        )
        for ep in episodes:
            endpoint.close_episode(ep.episode_id)
    episodes_ended(backend)  # no kept conversation has another turn: its KV cache goes before the update
    for g, ep in enumerate(episodes):
        _finish(ep, records[g], outcomes[g], factories[g // group_size], tokenizer, settings)
        if settings.inspect is not None:
            settings.inspect(ep.episode_id, list(records[g].calls))
    report_first_failures(episodes, [o.trace for o in outcomes], settings.reported)
    return episodes


def _close(endpoint: AgentEndpoint, episode_id: str, progress: RunProgress | None) -> None:
    endpoint.close_episode(episode_id)
    if progress is not None:
        progress.episode_ended()


# --- playing -----------------------------------------------------------------------------------------
@dataclass
class _Outcome:
    result: Any = None
    failure: str | None = "timeout"  # until the agent's coroutine ends
    message: str = "the agent did not finish within episode_timeout"
    trace: str = ""  # the agent's traceback when it raised (failures.agent_traceback)


def _play_all(
    settings: AgentSettings,
    base_urls: list[str],
    keys: list[str],
    rows: list[dict[str, Any]],
    finished: list[Callable[[], Any]],
    started: list[Callable[[], Any]],
    in_flight: int,
) -> list[_Outcome]:
    """Every agent run, ``in_flight`` at a time (each marked ``started[i]`` as it begins); each episode closes
    (``finished[i]``) the moment its agent returns, raises or times out, so a thread it left behind cannot add calls
    to it. Each agent holds its own episode's key; its ``episode_timeout`` counts from its start."""
    outcomes = [_Outcome() for _ in base_urls]
    slots: asyncio.Semaphore | None = None

    async def play(i: int) -> None:
        assert slots is not None
        async with slots:
            started[i]()
            await play_one(i)

    async def play_one(i: int) -> None:
        import openai

        client = openai.AsyncOpenAI(
            base_url=base_urls[i], api_key=keys[i], max_retries=0, timeout=settings.episode_timeout
        )
        try:
            result = await asyncio.wait_for(
                settings.agent(
                    client,
                    dict(rows[i]),
                    model=settings.model_name,  # type: ignore[misc]
                    base_url=base_urls[i],
                    api_key=keys[i],
                ),
                settings.episode_timeout,
            )
            outcomes[i] = _Outcome(result, None, "")
        except asyncio.TimeoutError:
            outcomes[i] = _Outcome(None, "timeout", f"the agent ran past episode_timeout={settings.episode_timeout}s")
        except Exception as err:  # noqa: BLE001 - the agent's bug fails its episode, never the run
            outcomes[i] = _Outcome(None, "agent_raised", raised_message(err), agent_traceback(err))
        finally:
            finished[i]()
            await client.close()

    async def play_all() -> None:
        nonlocal slots
        slots = asyncio.Semaphore(in_flight)
        await asyncio.gather(*(play(i) for i in range(len(base_urls))))

    thread = threading.Thread(target=asyncio.run, args=(play_all(),), name="grouprl-agents", daemon=True)
    thread.start()
    waves = -(-len(base_urls) // in_flight)
    thread.join(waves * settings.episode_timeout + _GRACE_S)  # an agent that blocks the loop is abandoned here
    return outcomes


# --- from what happened to an episode -----------------------------------------------------------------
def _finish(
    ep: Episode, record: EpisodeCalls, outcome: _Outcome, factory: EnvFactory, tokenizer, settings: AgentSettings
) -> None:
    with record.lock:
        calls = list(record.calls)
        refused = dict(record.refused)
        over_limit = record.over_limit
    failure, message = outcome.failure, outcome.message
    if failure is None and over_limit:
        failure, message = "max_calls", f"the agent asked for more than max_calls={settings.max_calls} calls"
    if failure is None and not calls:
        failure, message = "no_calls", "the agent returned without calling the model"
    ep.steps = calls_to_steps(calls, settings.anchor, settings.invalid_action_penalty)
    score: float | None = None
    success = False
    if failure is None and outcome.result is not None:
        score, success, problem = _reward(outcome.result)
        if problem:
            failure, message = "invalid_reward", problem
    if not ep.steps:  # nothing was generated: the episode's first prompt stands in, with nothing to train
        ep.steps = [_placeholder_step(factory, ep.seed, tokenizer, settings)]
    last = ep.steps[-1]
    if failure is not None:
        last.env_reward, last.env_info = 0.0, {"success": False, "agent_failure": failure}
        ep.end_reason = failure
    elif score is None:  # the agent returned nothing: the environment judges its last answer
        env = factory()
        env.reset(ep.seed)
        result = env.step(calls[-1].reply.get("content") or "")
        last.env_reward, last.env_info = float(result.reward), dict(result.info)
        ep.done, ep.end_reason = True, "answer"
    else:
        last.env_reward, last.env_info = score, {"success": success}
        ep.done, ep.end_reason = True, "answer"
    ep.agent = AgentRun(
        calls=len(calls),
        segments=len(call_segments(ep.steps)) if calls else 0,
        failure=failure,
        message=message if failure else "",
        refused=refused,
        latencies=[c.latency_s for c in calls],
    )


def _reward(result: Any) -> tuple[float, bool, str | None]:
    """(score, success, what is wrong with it) from what the agent returned."""
    success = None
    if isinstance(result, dict):
        if "score" not in result:
            return 0.0, False, f"the agent returned a dict without 'score' (keys: {sorted(result)[:6]})"
        success, result = result.get("success"), result["score"]
    elif hasattr(result, "score") and hasattr(result, "is_score_valid"):  # an EvaluateResult
        if not result.is_score_valid:
            return 0.0, False, f"the agent's result is marked invalid: {getattr(result, 'reason', '')}"
        result = result.score
    if isinstance(result, bool) or not isinstance(result, (int, float)):
        return (
            0.0,
            False,
            f"the agent returned {type(result).__name__}; expected a number, an EvaluateResult, "
            "a dict with 'score', or None",
        )
    score, problem = finite_score("the agent's reward", result)  # the reward functions' rule: finite, sane size
    if problem is not None or score is None:
        return 0.0, False, problem or "the agent returned no score"
    return score, bool(success) if success is not None else score >= 1.0, None


def _placeholder_step(factory: EnvFactory, seed: int | None, tokenizer, settings: AgentSettings) -> Step:
    env = factory()
    obs = env.reset(seed)
    messages = (
        [dict(m) for m in obs.messages]
        if obs.messages is not None
        else (
            ([{"role": "system", "content": env.instructions}] if getattr(env, "instructions", "") else [])
            + [{"role": "user", "content": obs.text}]
        )
    )
    text, ids = initial_prompt(tokenizer, messages, settings)
    return Step(
        prompt_text=text,
        prompt_ids=ids,
        action_text="",
        action_ids=[],
        truncated=False,
        anchor_state="start",
        messages=messages,
        observation=obs.text,
    )


def agent_metrics(episodes: list[Episode]) -> dict[str, float]:
    """``agent/...``: calls per episode, merged and split episodes, failures and refused requests by kind,
    latency per call. Empty for episodes no agent played."""
    runs = [ep.agent for ep in episodes if ep.agent is not None]
    if not runs:
        return {}
    n = len(runs)
    latencies = [s for r in runs for s in r.latencies]
    m = {
        "agent/calls_per_episode": sum(r.calls for r in runs) / n,
        "agent/samples_per_episode": sum(r.segments for r in runs) / n,
        "agent/merged_episodes": sum(r.segments == 1 for r in runs) / n,
        "agent/split_episodes": sum(r.segments > 1 for r in runs) / n,
        "agent/failed_episodes": sum(r.failure is not None for r in runs) / n,
        "agent/latency_s": sum(latencies) / max(len(latencies), 1),
        "agent/latency_max_s": max(latencies, default=0.0),
    }
    m.update({f"agent/failed/{kind}": float(sum(r.failure == kind for r in runs)) for kind in FAILURES})
    kinds = sorted({k for r in runs for k in r.refused})
    m.update({f"agent/refused/{k}": float(sum(r.refused.get(k, 0) for r in runs)) for k in kinds})
    return m
