"""HF generation paths on the main job's model and shapes, alternated, in CPU seconds and wall seconds.

Paths: ``generate`` (HF ``model.generate`` on the left-padded batch), ``shared`` (the previous default: a
group's prompt prefilled once, then ``generate``), ``loop`` (rollout/decode.py, the default now). Shapes:
``eval`` (the main job's held-out evaluation: 200 prompts, greedy, 12 new tokens, one batch), ``step`` (a
main-job step: 2 prompts x 8, temperature 0.7, 12 new tokens), ``long`` (bench/vs_trl/compare.py's smollm2 config:
1 prompt x 8, temperature 1.0, 96 new tokens, asked to show its working). Every path's completions are
checked equal to ``generate``'s (greedy; sampled under the same seed).

    OMP_NUM_THREADS=1 python -m bench.levers.generation_paths --threads 1 --rounds 2
    OMP_NUM_THREADS=1 python -m bench.levers.generation_paths --threads 1 --profile --shapes eval step --paths shared loop

``--profile``: one more run of each path under ``torch.profiler``, printing its top operators by self CPU time.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import time
from pathlib import Path

import torch

from grouprl.rollout.generation import SamplingParams, _hf_generate, stop_token_ids
from grouprl.rollout.decode import decode, sampling_warpers

MODEL = Path.home() / ".cache" / "grouprl" / "models" / "smollm2-135m-instruct"


def chat(tokenizer, text: str) -> list[int]:
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True, return_dict=False
    )


def shapes(tokenizer) -> dict[str, tuple[list[list[int]], SamplingParams]]:
    rng = random.Random(0)
    question = lambda: f"Compute {rng.randint(10, 99)} + {rng.randint(10, 99)}. Reply with only the number."  # noqa: E731
    held_out = [chat(tokenizer, question()) for _ in range(200)]
    step = [p for p in (chat(tokenizer, question()) for _ in range(2)) for _ in range(8)]
    long = [chat(tokenizer, "What is 47 * 38? Show your working briefly, then give the answer.")] * 8
    return {
        "eval": (held_out, SamplingParams(max_new_tokens=12, greedy=True, batch_size=200)),
        "step": (step, SamplingParams(max_new_tokens=12, temperature=0.7)),
        "long": (long, SamplingParams(max_new_tokens=96, temperature=1.0)),
    }


def run_path(path: str, model, tokenizer, prompts, params) -> list[list[int]]:
    stops, pad, cpu = stop_token_ids(tokenizer, model), tokenizer.pad_token_id, torch.device("cpu")
    torch.manual_seed(0)
    with torch.inference_mode():
        if path == "loop":
            rows = decode(model, prompts, params, sampling_warpers(model, params) or [], stops, pad, cpu)
        else:
            rows = _hf_generate(model, prompts, params, stops, pad, cpu, prefill_once=path == "shared")
    cut = []
    for row in rows:
        end = next((j for j, t in enumerate(row) if t in stops), None)
        cut.append(row if end is None else row[: end + 1])
    return cut


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(MODEL))
    parser.add_argument("--shapes", nargs="+", default=["eval", "step", "long"])
    parser.add_argument("--paths", nargs="+", default=["generate", "shared", "loop"])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None)
    parser.add_argument("--profile", action="store_true", help="print each path's top operators (one more run)")
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM

    from grouprl.models.loading import load_tokenizer

    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    tokenizer = load_tokenizer(args.model)
    results: dict[str, dict[str, dict]] = {}
    for shape, (prompts, params) in shapes(tokenizer).items():
        if shape not in args.shapes:
            continue
        runs: dict[str, list[tuple[float, float]]] = {p: [] for p in args.paths}
        outputs: dict[str, list[list[int]]] = {}
        for r in range(args.rounds):
            for path in args.paths if r % 2 == 0 else list(reversed(args.paths)):
                cpu, wall = time.process_time(), time.perf_counter()
                outputs[path] = run_path(path, model, tokenizer, prompts, params)
                runs[path].append((time.process_time() - cpu, time.perf_counter() - wall))
        reference = outputs.get("generate")
        results[shape] = {
            path: {
                "cpu_s": min(c for c, _ in times),
                "wall_s": min(w for _, w in times),
                "tokens": sum(len(o) for o in outputs[path]),
                "same_as_generate": None if reference is None else outputs[path] == reference,
            }
            for path, times in runs.items()
        }
        print(shape, json.dumps(results[shape]), flush=True)
        for path in args.paths if args.profile else []:
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                run_path(path, model, tokenizer, prompts, params)
            print(f"{shape} / {path}: top operators by self CPU time")
            print(
                prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.top, max_name_column_width=40),
                flush=True,
            )
    print("peak RSS MiB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
