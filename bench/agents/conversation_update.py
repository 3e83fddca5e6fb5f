"""Scoring a conversation once as one sequence vs once per turn (each turn re-encoding its whole prompt).

The same expert tool conversations (``tool_arithmetic``, 2-3 assistant turns each) and the recipe's tiny
model: the update's forward + backward over the generated tokens, (a) with each episode packed as one
sequence and a loss mask (what grouprl does, ``train/conversation_samples.py``), (b) with each turn as
its own sample, prompt re-encoded (what a per-turn trainer does). Median of ``--repeats``; writes
``bench/agents/results/conversation_update.json``.

    python -m bench.agents.conversation_update --episodes 16
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch

from grouprl.policy.scoring import completion_logps, pack
from grouprl.models.tiny import build_tiny_model
from grouprl.models.tiny_words import build_word_tokenizer
from grouprl.rollout.conversation import ConversationSettings, run_conversation_episodes
from grouprl.rollout.generation import SamplingParams
from grouprl.rollout.scripted import ScriptedBackend
from grouprl.tasks.tool_arithmetic import ToolAnswerEnv, ToolArithmeticTask, expert_reply, rows
from grouprl.tools import resolve_tools
from grouprl.tools.chat_template import TOOL_CHAT_TEMPLATE
from grouprl.train.conversation_samples import pack_conversations


def timed(model, batch, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        logps, _ = completion_logps(model, batch)
        (-(logps * batch.completion_mask).sum()).backward()
        model.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    task_rows = rows(args.episodes)
    tok = build_word_tokenizer(
        ToolArithmeticTask("tool_arithmetic", task_rows, []).tokenizer_corpus(), split_digits=True
    )  # the recipe's tiny tokenizer (word_digits)
    tok.chat_template = TOOL_CHAT_TEMPLATE
    episodes = run_conversation_episodes(
        [lambda r=r: ToolAnswerEnv(r["question"], r["ground_truth"]) for r in task_rows],
        task_rows,
        1,
        ScriptedBackend(tok, expert_reply),
        tok,
        SamplingParams(max_new_tokens=200),
        ConversationSettings(tools=resolve_tools(["calculator", "lookup"])),
    )
    model = build_tiny_model(tok, hidden=96, layers=3, heads=4, seed=0, max_positions=2048)
    steps = [s for ep in episodes for s in ep.steps]
    once = pack_conversations(episodes, torch.zeros(len(steps)), tok.pad_token_id, False).batch
    per_turn = pack([s.prompt_ids for s in steps], [s.action_ids for s in steps], tok.pad_token_id)
    result = {
        "episodes": len(episodes),
        "turns": len(steps),
        "tokens_scored_once": int(once.prompt_mask.sum() + once.attention.sum()),
        "tokens_scored_per_turn": int(per_turn.prompt_mask.sum() + per_turn.completion_mask.sum()),
        "seconds_once": timed(model, once, args.repeats),
        "seconds_per_turn": timed(model, per_turn, args.repeats),
        "torch_threads": torch.get_num_threads(),
        "load_average": os.getloadavg(),
    }
    result["speedup"] = result["seconds_per_turn"] / result["seconds_once"]
    out = Path(__file__).parent / "results" / "conversation_update.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
