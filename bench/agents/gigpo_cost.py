"""What GiGPO's grouping and advantages cost next to the training iteration they feed.

Batch: 16 groups x 8 episodes x 50 steps of real GridWorld random walks (8x8 map without
holes; moves onto the goal are skipped so every walk lasts 50 steps; all episodes of a group
share a seed). Two timings on
this batch:

- ``compute_advantage_record`` (the trainer's advantage phase): anchor grouping of every step, discounted
  returns, A_E, A_S, writing them onto the steps; median of several runs;
- one optimizer update (``Trainer.update``: forward, backward, step) of the recipe's tiny
  model (``recipes/tiny/gridworld_gigpo.yaml``) on the same 6,400 step samples, prompts
  rendered by the runner's prompt builder. Generation is left out, so the ratio is an upper
  bound on GiGPO's share of a real iteration.

    python -m bench.agents.gigpo_cost         # writes bench/agents/results/gigpo_cost.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

import torch

from grouprl.run_config import build_config
from grouprl.models.loading import load_policy
from grouprl.models.tiny import init_tiny
from grouprl.records import Episode, Observation, Step
from grouprl.rollout.prompts import build_messages
from grouprl.tasks import load_task
from grouprl.tasks.envs import GridWorld
from grouprl.tasks.envs.grid_base import MOVES
from grouprl.algos.advantages import get_estimator
from grouprl.train.advantages import compute_advantage_record, estimator_options
from grouprl.train.learner import pack_samples
from grouprl.train.trainer import Trainer

from bench.common import ROOT

RECIPE = ROOT / "recipes" / "tiny" / "gridworld_gigpo.yaml"


def random_walks(n_groups: int, group_size: int, steps: int, seed: int = 0) -> list[Episode]:
    rng = random.Random(seed)
    episodes = []
    for g in range(n_groups):
        for k in range(group_size):
            env = GridWorld(size=8, hole_fraction=0.0, max_steps=steps)
            obs = env.reset(g)
            ep = Episode(group_id=g, index_in_group=k, row={"seed": g}, seed=g)
            goal = env.goal
            for _ in range(steps):
                moves = [
                    m for m in obs.admissible_actions if (env.pos[0] + MOVES[m][0], env.pos[1] + MOVES[m][1]) != goal
                ]
                move = rng.choice(moves)
                result = env.step(move)
                ep.steps.append(
                    Step(
                        prompt_text="",
                        prompt_ids=[],
                        action_text=f"<action>{move}</action>",
                        action_ids=[],
                        truncated=False,
                        anchor_state=obs.anchor_state,
                        observation=obs.text,
                        env_reward=result.reward,
                    )
                )
                if result.done:
                    break
                obs = result.observation
            episodes.append(ep)
    return episodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=16)
    parser.add_argument("--group_size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "gigpo_cost.json"))
    args = parser.parse_args()
    torch.manual_seed(0)

    # 6,400 samples are accumulated over 16 micro-batches (memory), as a user would run them.
    cfg = build_config(
        RECIPE, {"advantage": "gigpo", "output_dir": "/tmp/grouprl_gigpo_cost", "gradient_accumulation_steps": 16}
    )
    episodes = random_walks(args.groups, args.group_size, args.steps)
    n_steps = sum(len(ep.steps) for ep in episodes)
    estimator = get_estimator("gigpo")
    options = estimator_options(cfg.algorithm, estimator)
    step_rewards = [[s.env_reward for s in ep.steps] for ep in episodes]  # no reward functions: r_t = env reward
    scores = torch.tensor([sum(r) for r in step_rewards])
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        record = compute_advantage_record(episodes, scores, step_rewards, cfg.algorithm, estimator, options)
        times.append(time.perf_counter() - start)
    gigpo_s = statistics.median(times)
    share = int((record.anchor_size > 1).sum()) / n_steps

    task = load_task(cfg)
    model_dir = init_tiny(
        task.tokenizer_corpus(),
        Path(cfg.train.output_dir) / "tiny",
        cfg.model.tiny_hidden_size,
        cfg.model.tiny_num_layers,
        cfg.model.tiny_num_heads,
        seed=0,
    )
    policy = load_policy(cfg.model, str(model_dir), torch.device("cpu"), need_reference=False)
    tok = policy.tokenizer
    instructions = GridWorld(instructions=cfg.task.system_prompt).instructions
    cache: dict[str, list[int]] = {}
    for ep in episodes:
        for s in ep.steps:
            if s.observation not in cache:
                msgs = build_messages(instructions, [], Observation(text=s.observation, anchor_state=None), 0, False)
                cache[s.observation] = tok(
                    tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False), add_special_tokens=False
                )["input_ids"]
            s.prompt_ids = cache[s.observation]
            s.action_ids = tok(s.action_text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    trainer = Trainer(cfg, policy, task)
    samples = pack_samples(episodes, record.advantage, tok.pad_token_id, False)
    start = time.perf_counter()
    trainer.update(samples)
    update_s = time.perf_counter() - start

    result = {
        "batch": {
            "groups": args.groups,
            "group_size": args.group_size,
            "max_steps": args.steps,
            "steps": n_steps,
            "non_singleton_anchor_share": round(share, 3),
        },
        "gigpo_seconds_median": gigpo_s,
        "gigpo_seconds_all": times,
        "update_seconds": update_s,
        "gigpo_share_of_update": gigpo_s / update_s,
        "threads": torch.get_num_threads(),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(
        f"{n_steps} steps ({args.groups} groups x {args.group_size} episodes, up to {args.steps} steps); "
        f"{100 * share:.1f} % of steps in non-singleton anchor groups"
    )
    print(f"grouping + GiGPO advantages: {1000 * gigpo_s:.1f} ms (median of {args.repeats})")
    print(f"one optimizer update on the same {n_steps} samples: {update_s:.1f} s")
    print(f"GiGPO share of the update alone: {100 * gigpo_s / update_s:.3f} %")


if __name__ == "__main__":
    main()
