"""Generating tool conversations with HF: each turn re-encoding the whole conversation vs keeping the KV cache.

The same ``tool_arithmetic`` questions, greedy, played twice through the real runner, tools and template
(``rollout/conversation.py``): (a) every turn's prompt prefilled from scratch (HF ``generate`` as is, a
group's identical first prompts prefilled once), (b) with ``rollout/turn_cache.py`` keeping each
conversation's KV cache so a turn prefills only what the last one added (tool results and the next
header). Both must produce the same episodes token for token (checked); the wall time per episode is the
median of ``--repeats`` alternating runs. Writes ``bench/agents/results/conversation_generation[_NAME].json``.

    python -m bench.agents.conversation_generation --model experiments/results/tool_gigpo_vs_grpo/warmup/sft_model
    python -m bench.agents.conversation_generation --model ~/.cache/grouprl/models/smollm2-135m-instruct --name smollm2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from grouprl.models.loading import load_tokenizer
from grouprl.rollout.conversation import ConversationSettings, run_conversation_episodes
from grouprl.rollout.generation import HFBackend, SamplingParams
from grouprl.rollout.turn_cache import TurnCache
from grouprl.tasks.tool_arithmetic import ToolAnswerEnv, rows
from grouprl.tools import resolve_tools
from grouprl.tools.chat_template import ensure_tool_template


def play(model, tokenizer, task_rows, settings, params, turn_cache):
    backend = HFBackend(model, tokenizer, torch.device("cpu"), turn_cache=turn_cache)
    start = time.perf_counter()
    episodes = run_conversation_episodes(
        [lambda r=r: ToolAnswerEnv(r["question"], r["ground_truth"]) for r in task_rows],
        task_rows,
        1,
        backend,
        tokenizer,
        params,
        settings,
    )
    return time.perf_counter() - start, episodes


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="experiments/results/tool_gigpo_vs_grpo/warmup/sft_model")
    parser.add_argument("--name", default="")
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--max_new_tokens", type=int, default=112)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    tokenizer = load_tokenizer(args.model)  # the tiny model's word tokenizer is not AutoTokenizer's class
    model = AutoModelForCausalLM.from_pretrained(args.model).eval()
    ensure_tool_template(tokenizer)
    settings = ConversationSettings(tools=resolve_tools(["calculator", "lookup"]), max_tool_calls=3)
    params = SamplingParams(max_new_tokens=args.max_new_tokens, greedy=True, batch_size=args.episodes)
    task_rows = rows(args.episodes, 3_000_000)  # seeds no run trains or evaluates on
    times: dict[str, list[float]] = {"reencode": [], "turn_cache": []}
    played: dict[str, list] = {}
    stats = None
    for repeat in range(args.repeats):
        for mode in ("reencode", "turn_cache") if repeat % 2 == 0 else ("turn_cache", "reencode"):
            cache = TurnCache() if mode == "turn_cache" else None
            seconds, played[mode] = play(model, tokenizer, task_rows, settings, params, cache)
            times[mode].append(seconds)
            stats = cache.stats.as_dict() if cache is not None else stats
    same = all(
        [s.action_ids for s in a.steps] == [s.action_ids for s in b.steps]
        for a, b in zip(played["reencode"], played["turn_cache"])
    )
    episodes = played["turn_cache"]
    result = {
        "model": args.model,
        "episodes": len(episodes),
        "turns": sum(len(ep.steps) for ep in episodes),
        "same_tokens": same,
        "turn_cache_stats_last_run": stats,
        "success_rate": sum(ep.success for ep in episodes) / len(episodes),
        "seconds_per_episode_reencode": statistics.median(times["reencode"]) / len(episodes),
        "seconds_per_episode_turn_cache": statistics.median(times["turn_cache"]) / len(episodes),
        "times": times,
        "torch_threads": torch.get_num_threads(),
        "load_average": os.getloadavg(),
    }
    result["speedup"] = result["seconds_per_episode_reencode"] / result["seconds_per_episode_turn_cache"]
    out = Path(__file__).parent / "results" / f"conversation_generation{'_' + args.name if args.name else ''}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
