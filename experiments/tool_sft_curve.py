"""The tool SFT warm start's learning curve: loss, step time and held-out greedy success every few steps.

Diagnoses a warm start that RL cannot build on (docs/agents.md, "The tool task and the tiny model"): the
recipe's tiny model, tokenizer and SFT (assistant tokens only, ``train/conversation_samples.py``) on
``--demos`` expert conversations, with held-out greedy conversations through the real runner and tools
every ``--eval_every`` steps, showing the first episodes' turns and tool results.

    python experiments/tool_sft_curve.py --steps 400 --eval_every 100 --n_eval 32                # word_digits
    python experiments/tool_sft_curve.py --steps 200 --eval_every 100 --n_eval 16 --tokenizer char --demos 200
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from grouprl.job.tool_sft import expert_traces, sft_update
from grouprl.models.loading import load_tokenizer
from grouprl.models.tiny import init_tiny
from grouprl.rollout.conversation import run_conversation_episodes
from grouprl.rollout.generation import HFBackend, SamplingParams
from grouprl.rollout.runner import episode_settings
from grouprl.run_config import build_config
from grouprl.tasks import load_task
from grouprl.tools.chat_template import ensure_tool_template
from grouprl.train.conversation_samples import pack_conversations

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "tiny" / "tool_arithmetic.yaml"


def held_out(model, tokenizer, task, settings, n: int, max_new_tokens: int) -> None:
    rows = task.eval_rows[:n]
    episodes = run_conversation_episodes([task.env_factory(r) for r in rows], rows, 1,
                                 HFBackend(model, tokenizer, torch.device("cpu")), tokenizer,
                                 SamplingParams(max_new_tokens=max_new_tokens, greedy=True), settings,
                                 [task.seed_of(r) for r in rows])
    kinds = collections.Counter((ep.row["kind"], ep.success) for ep in episodes)
    invalid = sum(not s.valid for ep in episodes for s in ep.steps) / sum(len(ep.steps) for ep in episodes)
    print(f"  held-out greedy success {sum(ep.success for ep in episodes)}/{len(episodes)} "
          f"(multiply {kinds['multiply', True]}/{kinds['multiply', True] + kinds['multiply', False]}, "
          f"convert {kinds['convert', True]}/{kinds['convert', True] + kinds['convert', False]}), "
          f"invalid turns {invalid:.2f}", flush=True)
    for ep in episodes[:3]:
        print(f"   {ep.row['question']} ({ep.row['ground_truth']}):",
              [(s.action_text[:80], [r["content"][:30] for r in s.tool_results or []]) for s in ep.steps], flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--eval_every", type=int, default=100)
    parser.add_argument("--n_eval", type=int, default=32)
    parser.add_argument("--demos", type=int, default=1000)
    parser.add_argument("--tokenizer", default=None, help="the task's tiny_tokenizer unless given (char, word_digits)")
    parser.add_argument("--out", default="outputs/tool_sft_curve")
    args = parser.parse_args()
    cfg = build_config(RECIPE, {"output_dir": args.out, "device": "cpu", "n_eval": args.n_eval})
    task, train = load_task(cfg), cfg.train
    tiny = init_tiny(task.tokenizer_corpus(), Path(args.out) / "tiny", cfg.model.tiny_hidden_size,
                     cfg.model.tiny_num_layers, cfg.model.tiny_num_heads, seed=0,
                     tokenizer=args.tokenizer or task.tiny_tokenizer, max_positions=task.tiny_max_positions)
    tokenizer, settings = load_tokenizer(str(tiny)), episode_settings(cfg, task)
    ensure_tool_template(tokenizer, settings.chat_template)
    model = AutoModelForCausalLM.from_pretrained(str(tiny))
    episodes = expert_traces(task, tokenizer, settings, args.demos)
    batch = pack_conversations(episodes, torch.zeros(sum(len(e.steps) for e in episodes)), tokenizer.pad_token_id,
                               mask_truncated=False).batch
    print(f"{sum(p.numel() for p in model.parameters())} parameters; tokens per conversation: "
          f"{int((batch.prompt_mask.sum(1) + batch.attention.sum(1)).float().mean())}", flush=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=train.sft_learning_rate)
    rng, order, losses, start = random.Random(0), [], [], time.perf_counter()
    model.train()
    for step in range(1, args.steps + 1):  # the same loop as job/tool_sft.py
        if len(order) < train.sft_batch_size:
            fresh = list(range(len(batch)))
            rng.shuffle(fresh)
            order += fresh
        rows, order = order[:train.sft_batch_size], order[train.sft_batch_size:]
        losses.append(sft_update(model, optimizer, batch.slice(torch.tensor(rows))))
        if step % 10 == 0:
            print(f"step {step} loss {sum(losses[-10:]) / 10:.3f} {(time.perf_counter() - start) / step:.2f} s/step "
                  f"load {os.getloadavg()[0]:.1f}", flush=True)
        if step % args.eval_every == 0:
            model.eval()
            held_out(model, tokenizer, task, settings, args.n_eval, cfg.rollout.max_new_tokens)
            model.train()


if __name__ == "__main__":
    main()
