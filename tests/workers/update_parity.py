"""One update on fixed rollouts, as run by tests/train/test_data_parallel.py: in the test process (one
process, the whole batch) and under ``torchrun --nproc_per_node 2`` (each process half the groups).
Writes each parameter's change (rank 0) and the logged update statistics to OUT/<case>-w<N>.pt."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from grouprl.run_config import build_config
from grouprl.models.loading import load_policy
from grouprl.records import Episode, Step, Verdict
from grouprl.rewards.scorer import Scores
from grouprl.tasks.base import SingleTurnTask
from grouprl.train.parallel import DataParallel, end_processes
from grouprl.train.trainer import Trainer

K = 4
# Four groups (two per process with two processes); completions of different lengths, one
# truncated, rewards varied, one group with zero variance. Characters are in the tiny vocabulary.
QUESTIONS = ["12+7", "30-4", "5+5-3", "9+9"]
COMPLETIONS = [
    ["19", "1", "190", "123456"],
    ["26", "", "2600", "34"],
    ["7", "77", "70000", "707070"],
    ["18", "81", "8", "1818"],
]
TRUNCATED = [[False, False, False, True], [False] * 4, [False, False, False, True], [False] * 4]
REWARDS = [[1.0, 0.0, 0.5, 0.25], [0.0, 0.0, 1.0, 0.0], [0.5, 0.5, 0.5, 0.5], [1.0, 0.0, 0.0, 0.0]]
CASES = {  # name: config overrides
    "dapo-batch": {"loss_type": "dapo", "scale_rewards": "batch"},
    "grpo-group": {"loss_type": "grpo", "scale_rewards": "group"},
    # LoRA adapters only (DDP/FSDP sync the trainable parameters), activations recomputed.
    "lora-checkpointing": {
        "loss_type": "dr_grpo",
        "use_peft": True,
        "lora_dropout": 0.0,  # dropout draws differ
        "gradient_checkpointing": True,
    },
}


def episodes_for(groups: list[int], tokenizer) -> tuple[list[Episode], Scores]:
    out, verdicts = [], []
    for g in groups:
        messages = [{"role": "user", "content": QUESTIONS[g]}]
        prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        for k in range(K):
            text = COMPLETIONS[g][k]
            ids = tokenizer(text, add_special_tokens=False)["input_ids"] if text else []
            if not TRUNCATED[g][k]:
                ids = ids + [tokenizer.eos_token_id]
            step = Step(
                prompt_text=prompt,
                prompt_ids=prompt_ids,
                action_text=text,
                action_ids=ids,
                truncated=TRUNCATED[g][k],
                anchor_state=None,
            )
            # groups numbered across processes where born (as Trainer.rollout numbers them)
            out.append(Episode(group_id=g, index_in_group=k, row={"question": QUESTIONS[g]}, steps=[step]))
            verdicts.append(Verdict(score=REWARDS[g][k], step_rewards=[REWARDS[g][k]]))
    return out, Scores.of(verdicts)


def run(case: str, model_dir: str, out: Path, parallel: DataParallel) -> None:
    cfg = build_config(
        None,
        {
            "batch_size": len(QUESTIONS),
            "num_generations": K,
            "gradient_accumulation_steps": 2,
            "learning_rate": 1e-3,
            "max_new_tokens": 6,
            "output_dir": str(out / case),
            "device": "cpu",
            **CASES[case],
        },
        environ={},
    )
    torch.manual_seed(0)  # LoRA's initial A matrices: the same in every run (as run_training seeds them)
    policy = load_policy(cfg.model, model_dir, torch.device("cpu"), need_reference=False)
    rows = [{"question": q, "ground_truth": "0", "gold_completion": "0"} for q in QUESTIONS]
    task = SingleTurnTask("fixed", rows, [], None, ["arithmetic_digits"], "arithmetic_exact", [1.0])
    trainer = Trainer(cfg, policy, task, parallel=parallel)
    for group in trainer.learner.optimizer.param_groups:
        group["eps"] = 1e-6  # bounds Adam's amplification of float noise in near-zero gradients (see parity test)
    before = full_parameters(trainer.learner.model)
    mine = parallel.rows(list(range(len(QUESTIONS))))
    batch, scores = trainer.gather(*episodes_for(mine, policy.tokenizer))  # the step's phases after scoring
    advantages = trainer.advantages(batch.episodes, scores)
    update = trainer.update(trainer.samples(batch, advantages))
    after = full_parameters(trainer.learner.model)  # collective under FSDP
    if parallel.is_main:
        tag = "fsdp" if parallel.sharded else f"w{parallel.info.world_size}"
        dtensors = sum(hasattr(p, "full_tensor") for p in trainer.learner.model.parameters())
        torch.save(
            {
                "delta": {n: after[n] - before[n] for n in before},
                "update": update,
                "dtensors": dtensors,
                "advantage": advantages.advantage,
            },
            out / f"{case}-{tag}.pt",
        )


def full_parameters(model) -> dict[str, torch.Tensor]:
    """Every parameter whole (FSDP2 holds shards: DTensor.full_tensor gathers them)."""
    return {
        n.removeprefix("module."): (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone()
        for n, p in model.named_parameters()
    }  # DDP names its parameters module.<name>


if __name__ == "__main__":
    parallel = DataParallel.start()
    for name in CASES:
        run(name, sys.argv[2], Path(sys.argv[1]), parallel)
    end_processes(exit_process=True)
