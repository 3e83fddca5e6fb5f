"""Score episodes: each reward function on the episode's final answer, weighted into one score."""

from __future__ import annotations

from grouprl.records import Episode
from grouprl.rewards.registry import get_reward, weighted_score
from grouprl.rewards import arithmetic, gsm8k

_PREDICTORS = {"gsm8k_final": gsm8k.extract_final, "arithmetic_exact": arithmetic.parse_answer}


def score_episodes(episodes: list[Episode], reward_names: list[str], weights: list[float],
                   correct_reward: str) -> None:
    """Fill ``reward_parts``, ``score``, ``prediction`` and ``correct`` on every episode in place.

    The episode's answer is its last action; environment rewards add to the score.
    """
    fns = {name: get_reward(name) for name in reward_names}
    wmap = dict(zip(reward_names, weights))
    judge = get_reward(correct_reward)
    predictor = _PREDICTORS.get(correct_reward)
    for ep in episodes:
        answer = ep.steps[-1].action_text if ep.steps else ""
        truth = ep.row.get("ground_truth")
        extra = {k: v for k, v in ep.row.items() if k != "ground_truth"}
        ep.reward_parts = {name: fn(answer, truth, **extra) for name, fn in fns.items()}
        env_total = sum(s.env_reward for s in ep.steps)
        ep.score = weighted_score(ep.reward_parts, wmap) + env_total
        ep.correct = judge(answer, truth) == 1.0
        ep.prediction = predictor(answer) if predictor else None
