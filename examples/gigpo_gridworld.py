"""GiGPO on a text gridworld, end to end, on a laptop CPU in a few minutes.

The whole loop with the library's own parts; each training step is the trainer's four phases:

1. a tiny Qwen2 model, SFT-warmed on a few BFS-optimal demonstrations (stopped unfinished on purpose);
2. rollouts: 8 groups x 8 episodes; every episode of a group starts on the same map;
3. rewards: the environment's (1 at the goal) minus 0.1 per invalid action, plus a reward-kit
   function, ``step_cost`` below, that charges each move a little through ``step_outputs``;
4. GiGPO advantages: episode-level A_E plus step-level A_S over anchor states (same map cell);
5. a real clipped policy-gradient (PPO) update of the weights.

    python examples/gigpo_gridworld.py                 # ~3-5 minutes on 2 CPU cores
    python examples/gigpo_gridworld.py --steps 3 --sft_steps 30 --out /tmp/ex   # a smoke run
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from rich.console import Console

from grouprl.run_config import build_config
from grouprl.models.loading import load_policy
from grouprl.records import EvaluateResult, StepOutput
from grouprl.rewards.kit import reward_function
from grouprl.rewards.scorer import Scorer
from grouprl.tasks import load_task
from grouprl.job.run import seed_everything
from grouprl.train.trainer import Trainer
from grouprl.job.warm_start import prepare_tiny

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "tiny" / "gridworld_gigpo.yaml"


@reward_function
def step_cost(messages, ground_truth=None, cost: float = 0.01, **kwargs) -> EvaluateResult:
    """-cost on every move (assistant turn i is step i), so shorter paths earn more."""
    moves = [i for i, m in enumerate(m for m in messages if m.role == "assistant")]
    return EvaluateResult(score=0.0, reason=f"{len(moves)} moves",
                          step_outputs=[StepOutput(step_index=i, base_reward=-cost) for i in moves])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=25, help="GiGPO training steps")
    parser.add_argument("--sft_steps", type=int, default=600, help="most SFT warm-up steps")
    parser.add_argument("--out", default="outputs/gigpo_gridworld")
    args = parser.parse_args()
    console = Console()

    # The recipe, plus the reward-kit function above (named by file path, as a user would).
    cfg = build_config(RECIPE, {"output_dir": args.out, "max_steps": args.steps, "sft_steps": args.sft_steps,
                                "rewards": [{"name": f"{__file__}:step_cost", "weight": 1.0,
                                             "options": {"cost": 0.01}}]})
    seed_everything(cfg.train.seed)
    task = load_task(cfg)
    scorer = Scorer.from_config(cfg, task)
    model_dir = prepare_tiny(cfg, task, scorer, console)  # 1. tiny model + SFT on demonstrations
    policy = load_policy(cfg.model, model_dir, torch.device("cpu"), need_reference=False)
    trainer = Trainer(cfg, policy, task, scorer, console=console)
    before = {k: v.detach().clone() for k, v in policy.model.named_parameters()}

    for step in range(1, args.steps + 1):
        record = trainer.train_step()  # 2. rollout -> 3. score -> 4. GiGPO advantages -> 5. PPO-clip update
        trainer.step = step
        episodes, adv = record.episodes, record.advantages
        n_steps = adv.advantage.numel()
        console.log(f"step {step:3d}: success {sum(ep.success for ep in episodes) / len(episodes):.2f}  "
                    f"mean score {float(record.scores.episode.mean()):+.3f}  "
                    f"invalid {sum(not s.valid for ep in episodes for s in ep.steps) / n_steps:.2f}  "
                    f"non-singleton anchors {int((adv.anchor_size > 1).sum()) / n_steps:.2f}  "
                    f"mean |A_S| {float(adv.step_advantage.abs().mean()):.3f}  "
                    f"loss {record.update['loss']:+.4f}")

    changed = sum(not torch.equal(before[k], v) for k, v in policy.model.named_parameters())
    console.log(f"{changed} of {len(before)} weight tensors changed")
    ep, verdict = episodes[0], record.scores.verdicts[0]  # the advantage record's first rows are this episode's
    console.log(f"last batch, episode {ep.episode_id} (score {verdict.score:+.3f}):")
    for t, s in enumerate(ep.steps):
        console.log(f"  t={t} {s.action_text!r:28} valid={s.valid} r={verdict.step_rewards[t]:+.2f} R_t={float(adv.returns[t]):+.3f} "
                    f"A_E={float(adv.episode_advantage[t]):+.3f} A_S={float(adv.step_advantage[t]):+.3f} "
                    f"anchor size {int(adv.anchor_size[t])}")
    path = trainer.checkpoint()
    console.log(f"checkpoint written to {path}")


if __name__ == "__main__":
    main()
