"""The agent endpoint's overhead per call: the same prompts through the endpoint (the real ``openai`` client,
HTTP on 127.0.0.1, the chat template, tool-call parsing, recording) vs straight into the backend.

The prompts are the example calculator agent's first call on ``tool_arithmetic`` questions (system prompt,
question, the two tool schemas). Greedy, a fixed ``max_new_tokens``, HF backend on CPU:

- ``direct``: the prompts already rendered to ids, one ``backend.generate`` call for all of them
  (concurrent) or one per prompt (sequential);
- ``endpoint``: the same prompts as chat-completion requests, all in flight at once through
  ``AsyncOpenAI`` (the endpoint batches them) or one after another; the ``*_streamed`` modes ask for
  ``stream: true`` and read every chunk (the turn is generated whole, then sent as server-sent events).

The greedy completions must be the same ids both ways (checked). The wall time is the median of
``--repeats`` alternating runs; the figure is endpoint / direct per call, and the overhead in ms.
Writes ``bench/agents/results/agent_endpoint[_NAME].json``.

    python -m bench.agents.agent_endpoint          # a tiny model built here (hidden 96, 3 layers)
    python -m bench.agents.agent_endpoint --model path/to/model --name real
    python -m bench.agents.agent_endpoint --device cuda --hidden 512 --layers 8 --name cuda_512x8
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path

import torch

from grouprl.rollout.agent.endpoint import AgentEndpoint
from grouprl.rollout.generation import HFBackend, SamplingParams
from grouprl.tasks.tool_arithmetic import SYSTEM_PROMPT, ToolArithmeticTask, rows
from grouprl.tools import resolve_tools
from grouprl.tools.chat_template import ensure_tool_template

TOOLS = [t.schema for t in resolve_tools(["calculator", "lookup"])]


def chats(n: int) -> list[list[dict]]:
    return [
        [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": r["question"]}]
        for r in rows(n, 3_000_000)
    ]


def direct(backend, tokenizer, messages, params, concurrent: bool):
    ids = [
        tokenizer(
            tokenizer.apply_chat_template(m, tools=TOOLS, add_generation_prompt=True, tokenize=False),
            add_special_tokens=False,
        )["input_ids"]
        for m in messages
    ]
    start = time.perf_counter()
    out = backend.generate(ids, params) if concurrent else [c for p in ids for c in backend.generate([p], params)]
    return time.perf_counter() - start, [c.ids for c in out]


def through_endpoint(backend, tokenizer, messages, params, concurrent: bool, stream: bool = False):
    import openai

    with AgentEndpoint(backend, tokenizer, params, api_key="bench", model_name="policy") as served:
        # every episode and its client made before the clock starts: an agent makes its client once and calls
        # through it (an AsyncOpenAI client takes ~37 ms to build, its SSL context, which is not the endpoint's
        # cost). One at a time: an episode counts as running only from its call to its close, so the batcher never
        # waits for episodes that will not call
        records = [served.open_episode(f"e{i}") for i in range(len(messages))]
        if not concurrent:
            for record in records:
                record.started = False

        async def ask(client, chat):
            answer = await client.chat.completions.create(model="policy", messages=chat, tools=TOOLS, stream=stream)
            if stream:
                async for _chunk in answer:
                    pass

        async def play():
            clients = [
                openai.AsyncOpenAI(base_url=served.base_url(f"e{i}"), api_key=r.key, max_retries=0)
                for i, r in enumerate(records)
            ]
            start = time.perf_counter()
            if concurrent:
                await asyncio.gather(*(ask(c, m) for c, m in zip(clients, messages)))
            else:
                for i, (client, chat) in enumerate(zip(clients, messages)):
                    records[i].started = True
                    await ask(client, chat)
                    served.close_episode(f"e{i}")
            seconds = time.perf_counter() - start
            for c in clients:
                await c.close()
            return seconds

        seconds = asyncio.run(play())
    return seconds, [r.calls[0].completion.ids for r in records], list(served.batcher.batches)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=None, help="a model dir (default: a tiny model built here)")
    parser.add_argument("--name", default="")
    parser.add_argument("--calls", type=int, default=16)
    parser.add_argument("--max_new_tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--hidden", type=int, default=96, help="the tiny model's width (without --model)")
    parser.add_argument("--layers", type=int, default=3, help="the tiny model's depth (without --model)")
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.model is None:
        from grouprl.models.tiny import build_tiny_model
        from grouprl.models.tiny_words import build_word_tokenizer

        task = ToolArithmeticTask("tool_arithmetic", rows(2), rows(1))
        tokenizer = build_word_tokenizer(task.tokenizer_corpus(), split_digits=True)
        model = build_tiny_model(
            tokenizer, hidden=args.hidden, layers=args.layers, heads=4, seed=0, max_positions=2048
        ).eval()
        which = f"tiny (hidden {args.hidden}, {args.layers} layers, word_digits tokenizer)"
    else:
        from transformers import AutoModelForCausalLM

        from grouprl.models.loading import load_tokenizer

        tokenizer, model = load_tokenizer(args.model), AutoModelForCausalLM.from_pretrained(args.model).eval()
        which = args.model
    ensure_tool_template(tokenizer)
    device = torch.device(args.device)
    backend = HFBackend(model.to(device), tokenizer, device)
    params = SamplingParams(max_new_tokens=args.max_new_tokens, greedy=True, batch_size=args.calls)
    messages = chats(args.calls)
    result: dict = {
        "model": which,
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "cpu_count": os.cpu_count(),
        "calls": args.calls,
        "max_new_tokens": args.max_new_tokens,
        "repeats": args.repeats,
        "load_average": os.getloadavg(),
        "torch_threads": torch.get_num_threads(),
    }
    modes = (("concurrent", True, False), ("sequential", False, False))
    modes += (("concurrent_streamed", True, True), ("sequential_streamed", False, True))
    for mode, concurrent, stream in modes:
        times: dict[str, list[float]] = {"direct": [], "endpoint": []}
        same, batches = True, []
        for _ in range(args.repeats):
            t_direct, ids_direct = direct(backend, tokenizer, messages, params, concurrent)
            t_endpoint, ids_endpoint, sizes = through_endpoint(backend, tokenizer, messages, params, concurrent, stream)
            batches.append(sizes)
            times["direct"].append(t_direct)
            times["endpoint"].append(t_endpoint)
            same = same and ids_direct == ids_endpoint
        per_call = {k: statistics.median(v) / args.calls for k, v in times.items()}
        result[mode] = {
            "seconds_per_call": per_call,
            "ratio": per_call["endpoint"] / per_call["direct"],
            "overhead_ms_per_call": 1000 * (per_call["endpoint"] - per_call["direct"]),
            "same_completions": same,
            "times": times,
            "endpoint_batches": batches,
        }
        print(
            f"{mode}: direct {1000 * per_call['direct']:.1f} ms/call, endpoint {1000 * per_call['endpoint']:.1f} "
            f"ms/call, ratio {result[mode]['ratio']:.2f}, same completions: {same}"
        )
    out = Path(__file__).parent / "results" / f"agent_endpoint{'_' + args.name if args.name else ''}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
