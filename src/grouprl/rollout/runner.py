"""The episode runner: every live episode's next action generated in one batch.

Runs groups x G episodes; all episodes of a group come from environments reset with
the same seed, so they start from the same state. A single-turn task is an
environment that is done after one step, so it takes this same path.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

from grouprl.records import Episode, Observation, Step, StepResult
from grouprl.rollout.generation import SamplingParams, generate


class Environment(Protocol):
    def reset(self, seed: int | None = None) -> Observation: ...

    def step(self, action: str) -> StepResult: ...


def render_prompt(tokenizer, observation: Observation) -> str:
    return tokenizer.apply_chat_template(observation.messages, add_generation_prompt=True, tokenize=False)


def run_episodes(
    make_env: Callable[[int], Environment],
    group_rows: list[dict[str, Any]],
    group_size: int,
    policy_model,
    tokenizer,
    params: SamplingParams,
    device,
    max_steps: int = 1,
    seeds: list[int] | None = None,
) -> list[Episode]:
    """Roll out ``group_size`` episodes for each row; returns them grouped and in order.

    ``make_env(i)`` builds the environment for ``group_rows[i]``.
    """
    episodes: list[Episode] = []
    envs: list[Environment] = []
    observations: list[Observation | None] = []
    for g, row in enumerate(group_rows):
        seed = seeds[g] if seeds else None
        for k in range(group_size):
            env = make_env(g)
            envs.append(env)
            observations.append(env.reset(seed))
            episodes.append(Episode(group_id=g, index_in_group=k, row=row))

    for _ in range(max_steps):
        live = [i for i, obs in enumerate(observations) if obs is not None]
        if not live:
            break
        # Episodes of a group often see the same observation (always at the first step):
        # render and tokenize each distinct one once.
        cache: dict[tuple, tuple[str, list[int]]] = {}
        texts, prompt_ids = [], []
        for i in live:
            key = tuple((m["role"], m["content"]) for m in observations[i].messages)
            if key not in cache:
                text = render_prompt(tokenizer, observations[i])
                cache[key] = (text, tokenizer(text, add_special_tokens=False)["input_ids"])
            texts.append(cache[key][0])
            prompt_ids.append(cache[key][1])
        completions = generate(policy_model, tokenizer, prompt_ids, params, device)
        for i, text, ids, comp in zip(live, texts, prompt_ids, completions):
            obs = observations[i]
            result = envs[i].step(comp.text)
            episodes[i].steps.append(
                Step(prompt_text=text, prompt_ids=ids, action_text=comp.text, action_ids=comp.ids,
                     truncated=comp.truncated, anchor_state=obs.anchor_state, env_reward=result.reward,
                     messages=obs.messages)
            )
            observations[i] = None if result.done else result.observation
    return episodes
