"""The ``tool`` config of bench/vs_trl/compare.py: grouprl vs TRL 1.16 on the same multi-turn tool-calling GRPO work.

Both sides run the tool recipe's conversations (``recipes/tiny/tool_arithmetic.yaml``): the same warm tiny
model (word tokenizer with one token per digit, tool-SFT'd on expert conversations by ``job/tool_sft.py``),
the same ``tool_arithmetic`` questions as [system, user] chats, Qwen2.5's tool template
(``tools/chat_template.py``) with the same two tools (``calculator``, ``lookup``: the very functions, so
the same results), K conversations per question, GRPO advantages (group-scaled), the "dapo" loss, and the
final turn's ``Answer: <n>`` judged the same way (1 when exact, else 0). TRL takes the tools as
``tools=[callables]`` and loops with ``max_tool_calling_iterations``; grouprl as ``episode_mode:
conversation``. Where the two cannot be made identical (``DIFFERENCES``), the caps are set so that a warm
model's conversations meet neither, and each side records how often it did.

Tokens are counted alike on both sides: a conversation's tokens are its one training sequence (prompt,
generated turns, tool messages and template tokens between turns); generated tokens are the model's own.

    python -m bench.vs_trl.compare --configs tool --backends hf vllm --steps 12 --rounds 3 --threads 1
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from bench.vs_trl.workers import PhaseClock, grouprl_cli, peak_rss_mb, rss_mb, wrap

TOOL_SHAPE = dict(prompts=4, k=4, max_new_tokens=64, max_model_len=2048)
N_TRAIN = 64  # the recipe's
MAX_TOOL_CALLS = 3  # grouprl: calls per conversation; TRL: tool-calling rounds (the warm model makes one call a turn)
COMPLETION_BUDGET = 3 * 64  # TRL: max_completion_length (every turn and tool message); grouprl: prompt + this
DIFFERENCES = [
    "per-turn cap: grouprl caps each turn at max_new_tokens and ends a conversation whose turn is cut; TRL caps "
    "each generate call at max_completion_length and the whole completion (turns + tool messages) at it too",
    "context cap: grouprl stops before a turn when prompt + max_new_tokens would pass max_conversation_tokens "
    "(prompt + COMPLETION_BUDGET); TRL drops a tool result that would pass max_completion_length, cuts the "
    "last turn to fit, and ends the conversation",
    "call cap: grouprl counts calls (max_tool_calls, malformed ones too); TRL counts rounds "
    "(max_tool_calling_iterations): the same for one call per turn",
    "a malformed call: grouprl answers it with an error message and the conversation goes on; TRL's parser "
    "falls back to plain text, which ends the conversation as a (wrong) final answer",
    "a failing tool: grouprl's message is 'Error: <kind>: ...'; TRL's is str({'error': ...})",
    "generation: each side's own HF generate (grouprl: prompt prefilled once per group) or vLLM engine",
]


def tool_cli(args, out_dir: str) -> dict:
    """grouprl's side: the tool recipe's conversations with TRL's GRPO (no GiGPO, no invalid-call penalty)."""
    import argparse

    base = grouprl_cli(argparse.Namespace(**{**vars(args), "config": "tiny"}), out_dir)  # tiny: no system prompt
    for key in ("rewards", "system_prompt"):  # the environment's answer check is the reward; the task's prompt
        base.pop(key)
    return {
        **base,
        "task": "tool_arithmetic",
        "n_train": args.n_train,
        "top_k": args.top_k,
        "episode_mode": "conversation",
        "tools": ["calculator", "lookup"],
        "tool_parser": "hermes",
        "max_tool_calls": MAX_TOOL_CALLS,
        "max_conversation_tokens": args.prompt_tokens + COMPLETION_BUDGET,
        "tool_anchor": "turn",
        "invalid_action_penalty": 0.0,
        "mask_truncated_completions": False,
    }


def build_tool_model(args, path: Path) -> str:
    """The tiny tool model, warmed by tool SFT on expert conversations (``--sft-steps``)."""
    from grouprl.job.tool_sft import tool_sft
    from grouprl.models.tiny import init_tiny
    from grouprl.rollout.runner import episode_settings
    from grouprl.run_config import build_config
    from grouprl.tasks import load_task

    cfg = build_config(cli={**tool_cli(_worker_args(args, prompt_tokens=0), str(path / "cfg"))}, environ={})
    task = load_task(cfg)
    tiny = init_tiny(
        task.tokenizer_corpus(),
        path / "cold",
        hidden=128,
        layers=2,
        heads=4,
        seed=args.seed,
        tokenizer=task.tiny_tokenizer,
        max_positions=task.tiny_max_positions,
    )  # head_dim 32 for vLLM
    return str(
        tool_sft(
            str(tiny),
            task,
            episode_settings(cfg, task),
            path / "warm",
            steps=args.sft_steps,
            learning_rate=3e-3,
            batch_size=8,
            seed=args.seed,
            n_episodes=128,
        )
    )


def _worker_args(args, **extra):
    """The worker's settings: the tool shape's, under what the caller set (tests: n_train = prompts, so both
    sides draw the same questions, and top_k 1, greedy, so both play the same conversations)."""
    import argparse

    given = {k: v for k, v in vars(args).items() if v is not None}
    merged = {**TOOL_SHAPE, "n_train": N_TRAIN, "top_k": 0, "backend": "hf", **given, "config": "tool", **extra}
    merged["prompts"] = merged["prompts"] or TOOL_SHAPE["prompts"]
    return argparse.Namespace(**merged)


def trl_tools():
    """grouprl's calculator and lookup as TRL takes tools: the same functions without their return annotation,
    so transformers' schema (and so the rendered prompt) is the one grouprl renders (its schema drops the return)."""
    import functools

    from grouprl.tools import builtin

    tools = []
    for fn in (builtin.calculator, builtin.lookup):
        wrapper = functools.wraps(fn)(lambda *a, _fn=fn, **kw: _fn(*a, **kw))
        wrapper.__annotations__ = {k: v for k, v in fn.__annotations__.items() if k != "return"}
        del wrapper.__wrapped__  # inspect.signature would follow it back to the annotated original
        import inspect

        wrapper.__signature__ = inspect.signature(fn).replace(return_annotation=inspect.Signature.empty)
        tools.append(wrapper)
    return tools


def prompt_tokens(model: str) -> int:
    """The longest rendered first prompt of the bench's questions (grouprl's context cap is prompt + budget)."""
    from grouprl.models.loading import load_tokenizer
    from grouprl.tasks.tool_arithmetic import ToolArithmeticTask, rows
    from grouprl.tools.chat_template import ensure_tool_template

    tok = load_tokenizer(model)
    ensure_tool_template(tok, "auto")
    task = ToolArithmeticTask("tool_arithmetic", rows(N_TRAIN), [])
    return max(
        len(
            tok.apply_chat_template(
                task.env_factory(r)().reset().messages,
                tools=trl_tools(),
                add_generation_prompt=True,
                tokenize=True,
                return_dict=True,
            )["input_ids"]
        )
        for r in task.train_rows
    )


def worker_grouprl_tools(args) -> dict:
    import torch

    from grouprl.models.loading import load_policy
    from grouprl.run_config import build_config
    from grouprl.tasks import load_task
    from grouprl.train.trainer import Trainer

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    args = _worker_args(args, prompt_tokens=prompt_tokens(args.model))
    out = tempfile.mkdtemp(prefix="bench_grouprl_tools_")
    try:
        cfg = build_config(cli=tool_cli(args, out), environ={})
        task = load_task(cfg)
        policy = load_policy(cfg.model, args.model, torch.device("cpu"), need_reference=False)
        trainer = Trainer(cfg, policy, task)
        clock = PhaseClock(policy.model.get_decoder())
        wrap(trainer.backend, "generate", clock, "generation")
        wrap(trainer.backend, "load_weights", clock, "weight_push")
        setup_rss, res = rss_mb(), defaultdict(list)
        for _ in range(args.steps):
            start, cpu = time.perf_counter(), time.process_time()
            record = trainer.train_step()
            elapsed = time.perf_counter() - start
            res["step_times"].append(elapsed)
            res["cpu_times"].append(time.process_time() - cpu)
            res["phases"].append(clock.take(elapsed))
            trainer.step += 1
            for key, value in grouprl_work(record.episodes).items():
                res[key].append(value)
            res["update_stats"].append({k: v for k, v in record.update.items() if k.startswith("importance")})
        return {**res, "setup_rss_mb": setup_rss, "peak_rss_mb": peak_rss_mb()}
    finally:
        shutil.rmtree(out, ignore_errors=True)


def grouprl_work(episodes) -> dict:
    """One step's work, counted as ``trl_work`` counts TRL's."""
    steps = [s for ep in episodes for s in ep.steps]
    return {
        "conversations": len(episodes),
        "turns": len(steps),
        "tool_calls": sum(len(s.tool_results or []) for s in steps),
        "tokens": sum(len(ep.steps[-1].prompt_ids) + len(ep.steps[-1].action_ids) for ep in episodes),
        "completion_tokens": sum(len(s.action_ids) for s in steps),
        "conversation_tokens": sorted(len(ep.steps[-1].prompt_ids) + len(ep.steps[-1].action_ids) for ep in episodes),
        "truncated_turns": sum(bool(s.truncated) for s in steps),
        "ended_by_cap": sum(ep.end_reason in ("max_tool_calls", "context") for ep in episodes),
        "reward_mean": sum(float(ep.steps[-1].env_reward or 0.0) for ep in episodes) / len(episodes),
    }


def trl_work(batch: dict, completions: list, tool_calls: int, rewards: list[float]) -> dict:
    prompt, completion = batch["prompt_mask"], batch["completion_mask"]
    generated = completion * batch["tool_mask"] if "tool_mask" in batch else completion
    return {
        "conversations": int(prompt.shape[0]),
        "turns": sum(sum(m["role"] == "assistant" for m in c) for c in completions),
        "tool_calls": tool_calls,
        "tokens": int(prompt.sum() + completion.sum()),
        "completion_tokens": int(generated.sum()),
        "conversation_tokens": sorted((prompt.sum(1) + completion.sum(1)).tolist()),
        "reward_mean": sum(rewards) / max(len(rewards), 1),
    }


def worker_trl_tools(args) -> dict:
    import os

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, PrinterCallback
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen3_template

    from grouprl.models.loading import load_tokenizer
    from grouprl.tasks.tool_arithmetic import ToolArithmeticTask, rows
    from grouprl.tools.chat_template import ensure_tool_template

    from bench.vs_trl.workers import _trl_vllm_cpu_sync, step_timer, timed_trl, trl_vllm_kwargs

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    args = _worker_args(args)
    out = tempfile.mkdtemp(prefix="bench_trl_tools_")
    try:
        task = ToolArithmeticTask("tool_arithmetic", rows(args.n_train), [])  # grouprl's rows
        dataset = Dataset.from_list(
            [
                {"prompt": task.env_factory(r)().reset().messages, "ground_truth": r["ground_truth"]}
                for r in task.train_rows
            ]
        )
        seen: dict[str, list] = {"rewards": []}

        def answer_reward(completions, ground_truth, **_):
            """The environment's judge (ToolAnswerEnv.step) on the conversation's last assistant turn."""
            envs = [task.env_factory({"question": "", "ground_truth": gt})() for gt in ground_truth]
            last = [next((m["content"] for m in reversed(c) if m["role"] == "assistant"), "") for c in completions]
            scores = [env.step(text or "").reward for env, text in zip(envs, last)]
            seen["rewards"], seen["completions"] = scores, completions
            return scores

        use_vllm = args.backend == "vllm"
        config = GRPOConfig(
            output_dir=out,
            loss_type="dapo",
            beta=0.0,
            num_generations=args.k,
            per_device_train_batch_size=args.k * args.prompts,
            gradient_accumulation_steps=1,
            max_completion_length=COMPLETION_BUDGET,
            max_tool_calling_iterations=MAX_TOOL_CALLS,
            temperature=1.0,
            top_p=1.0,
            top_k=args.top_k,
            learning_rate=args.lr,
            weight_decay=0.0,
            lr_scheduler_type="constant",
            max_grad_norm=1.0,
            max_steps=args.steps,
            scale_rewards="group",
            use_cpu=True,
            gradient_checkpointing=False,
            use_vllm=use_vllm,
            report_to="none",
            logging_steps=1,
            save_strategy="no",
            disable_tqdm=True,
            seed=args.seed,
            dataloader_num_workers=0,
            log_completions=False,
            **trl_vllm_kwargs(args),
        )
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
        tokenizer = load_tokenizer(args.model)
        ensure_tool_template(tokenizer, "auto")  # grouprl's rendering of Qwen2.5's tool format
        tokenizer.response_template = qwen3_template  # TRL's parser for <tool_call> JSON blocks (Qwen2.5/3's)
        clock = PhaseClock(model.get_decoder())
        res: dict = defaultdict(list)

        class Timed(timed_trl(GRPOTrainer, clock)):
            def _tool_call_loop(self, *a, **kw):
                out = super()._tool_call_loop(*a, **kw)
                self._bench_tool_calls = out[4]
                return out

            def _generate_and_score_completions(self, inputs):
                self._bench_tool_calls = 0
                batch = super()._generate_and_score_completions(inputs)
                for key, value in trl_work(batch, seen["completions"], self._bench_tool_calls, seen["rewards"]).items():
                    res[key].append(value)
                return batch

        trainer = Timed(
            model=model,
            reward_funcs=answer_reward,
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
            tools=trl_tools(),
        )
        trainer.remove_callback(PrinterCallback)
        if use_vllm and not torch.cuda.is_available():
            _trl_vllm_cpu_sync(trainer)
        trainer.add_callback(step_timer(trainer, res, clock))
        setup_rss = rss_mb()
        trainer.train()
        return {**res, "setup_rss_mb": setup_rss, "peak_rss_mb": peak_rss_mb()}
    finally:
        shutil.rmtree(out, ignore_errors=True)


WORK_KEYS = ("conversations", "turns", "tool_calls", "truncated_turns", "ended_by_cap", "reward_mean")


def work_per_step(runs: list[dict], warmup: int) -> dict:
    """The tool config's work per step (mean over the timed steps); {} for the other configs."""
    out = {}
    for key in WORK_KEYS:
        values = [v for r in runs for v in r.get(key, [])[warmup:]]
        if values:
            out[f"mean_{key}_per_step"] = sum(values) / len(values)
    return out


def main(argv: list[str] | None = None) -> None:
    """One worker, for tests: ``python -m bench.vs_trl.tools --which grouprl --model M --result-file F ...``."""
    import argparse
    import json

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("--which", choices=["grouprl", "trl"], required=True)
    p.add_argument("--backend", choices=["hf", "vllm"], default="hf")
    p.add_argument("--model", required=True)
    p.add_argument("--result-file", required=True)
    for name, default in [
        ("steps", 1),
        ("threads", 1),
        ("seed", 0),
        ("prompts", 0),
        ("k", None),
        ("max-new-tokens", None),
        ("n-train", None),
        ("top-k", None),
    ]:
        p.add_argument(f"--{name}", type=int, default=default)
    p.add_argument("--lr", type=float, default=1e-6)
    args = p.parse_args(argv)
    args.no_grouped, args.vllm_dtype = False, "bfloat16"
    result = (worker_grouprl_tools if args.which == "grouprl" else worker_trl_tools)(args)
    Path(args.result_file).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
