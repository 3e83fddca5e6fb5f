"""The two workers of bench/vs_trl/compare.py (one trainer per subprocess) and the clock both share.

``PhaseClock`` splits a step the same way for grouprl and TRL: generation (each side's own
generate call, which for TRL includes its weight push into vLLM), weight push (grouprl's
``load_weights`` after the update), decoder forward with and without grad (hooks on the
decoder module), backward (``Tensor.backward``), optimizer (torch's global optimizer-step
hooks); "other" is the rest of the step (rewards, LM head and log-softmax, advantages,
padding, clipping, logging).
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import sys
import tempfile
import time
from collections import defaultdict

BENCH_SYSTEM_PROMPT = {  # gsm8k shape: a system prompt that brings the arithmetic prompts to ~150 tokens
    "tiny": None,
    "gsm8k": (
        "You are a careful math tutor. Think step by step, show the work, and give the final answer as "
        "a number. Keep the reasoning short and exact.\n"
    ),
    "smollm2": "Add the two numbers. Show your working in one or two short sentences, then give the sum.",
}


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


class PhaseClock:
    def __init__(self, decoder):
        import torch
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        self.seconds: dict[str, float] = defaultdict(float)
        self.quiet = False  # inside generation: decoder calls belong to generation
        self._starts: list[float] = []
        decoder.register_forward_pre_hook(lambda m, a: self._starts.append(time.perf_counter()))
        decoder.register_forward_hook(self._forward_done)
        register_optimizer_step_pre_hook(lambda *a: self._starts.append(time.perf_counter()))
        register_optimizer_step_post_hook(lambda *a: self._add("optimizer"))
        original = torch.Tensor.backward

        def timed_backward(tensor, *args, **kwargs):
            start = time.perf_counter()
            try:
                return original(tensor, *args, **kwargs)
            finally:
                self.seconds["backward"] += time.perf_counter() - start

        torch.Tensor.backward = timed_backward

    def _add(self, name: str) -> None:
        start = self._starts.pop()
        if not self.quiet:
            self.seconds[name] += time.perf_counter() - start

    def _forward_done(self, module, args, out) -> None:
        import torch

        self._add("forward" if torch.is_grad_enabled() else "forward_no_grad")

    @contextlib.contextmanager
    def phase(self, name: str):
        start, self.quiet = time.perf_counter(), True
        try:
            yield
        finally:
            self.quiet = False
            self.seconds[name] += time.perf_counter() - start

    def take(self, step_seconds: float) -> dict[str, float]:
        out = dict(self.seconds)
        out["other"] = step_seconds - sum(out.values())
        self.seconds.clear()
        return out


def wrap(obj, name: str, clock: PhaseClock, phase: str) -> None:
    method = getattr(obj, name)

    def timed(*args, **kwargs):
        with clock.phase(phase):
            return method(*args, **kwargs)

    setattr(obj, name, timed)


def grouprl_cli(args, out_dir: str) -> dict:
    return {
        "output_dir": out_dir,
        "task": "arithmetic",
        "n_train": 4000,
        "n_eval": 1,
        "num_generations": args.k,
        "batch_size": args.prompts,
        "max_new_tokens": args.max_new_tokens,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,
        "generation_batch_size": args.k * args.prompts,
        "loss_type": "dapo",
        "beta": 0.0,
        "advantage": "grpo",
        "scale_rewards": "group",
        "learning_rate": args.lr,
        "weight_decay": 0.0,
        "adam_beta2": 0.999,
        "max_grad_norm": 1.0,
        "gradient_accumulation_steps": 1,
        "max_steps": args.steps,
        "lr_scheduler_type": "constant",
        # bench/device/check.py sets device and dtype (cuda, bfloat16); bench/vs_trl/compare.py runs on the CPU in fp32
        "torch_dtype": getattr(args, "dtype", "float32"),
        "device": getattr(args, "device", "cpu"),
        "num_threads": args.threads,
        "seed": args.seed,
        # TRL never skips an update; grouprl would skip one whose advantages are all zero (on random weights every
        # completion scores 0): off, so that both sides do the same work. updates_skipped records it stays 0.
        "skip_zero_advantage_updates": False,
        "rewards": ["arithmetic_digits"],
        "log_rollouts": False,
        "system_prompt": BENCH_SYSTEM_PROMPT[args.config],
        "generation_backend": args.backend,
        "grouped_scoring": not args.no_grouped,
        "prefill_once": not getattr(args, "no_prefill_once", False),
        "grouped_layout": getattr(args, "grouped_layout", "auto"),
        "vllm_max_model_len": args.max_model_len,
        "sampling_correction_cap": 2.0,
        # TRL builds its engine with dtype "auto", which vLLM resolves for an fp32 checkpoint to the
        # platform's half type (bfloat16 on this CPU): grouprl's engine gets the same dtype.
        "vllm_dtype": getattr(args, "vllm_dtype", "bfloat16"),
        **getattr(args, "overrides", {}),  # bench/device/check.py --grouprl-set: a variant of grouprl's side only
    }


def gpu_sync_and_peak_mb(device: str) -> float | None:
    """Waits for the GPU's queued work (so a step's time is its own), and gives the peak allocated GPU memory
    (MiB, torch's caching allocator) since the process began; None on the CPU."""
    import torch

    if not device.startswith("cuda"):
        return None
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() / 2**20


def trl_vllm_kwargs(args) -> dict:
    """TRL's colocated vLLM set as grouprl's engine runs (token-level truncated IS, cap 2, no sleep); {} on hf."""
    if args.backend != "vllm":
        return {}
    return dict(
        vllm_mode="colocate",
        vllm_importance_sampling_correction=True,
        vllm_importance_sampling_mode="token_truncate",
        vllm_importance_sampling_clip_max=2.0,
        vllm_max_model_length=args.max_model_len,
        vllm_enable_sleep_mode=False,
    )


def timed_trl(trainer_cls, clock: "PhaseClock", device: str = "cpu"):
    """``trainer_cls`` (TRL's GRPOTrainer) with its generation timed as a phase and each training step's start
    (wall and process CPU) kept for ``step_timer``."""

    class Timed(trainer_cls):
        def _generate(self, prompts):
            with clock.phase("generation"):
                return super()._generate(prompts)

        def training_step(self, *a, **kw):
            gpu_sync_and_peak_mb(device)
            start, cpu = time.perf_counter(), time.process_time()
            try:
                return super().training_step(*a, **kw)
            finally:
                self._bench_start, self._bench_cpu = start, cpu

    return Timed


def step_timer(trainer, res: dict, clock: "PhaseClock", device: str = "cpu", report=None):
    """A callback recording each step's wall and CPU seconds (``training_step`` .. optimizer step done), its
    phases and the peak GPU memory into ``res``; ``report`` (optional) gets the results so far."""
    from transformers import TrainerCallback

    class StepEnd(TrainerCallback):
        def on_step_end(self, a, state, control, **kw):
            res["peak_gpu_mb"] = gpu_sync_and_peak_mb(device)
            elapsed = time.perf_counter() - trainer._bench_start
            res["step_times"].append(elapsed)
            res["cpu_times"].append(time.process_time() - trainer._bench_cpu)
            res["phases"].append(clock.take(elapsed))
            if report:
                report({**res, "peak_rss_mb": peak_rss_mb()})

    return StepEnd()


def worker_grouprl(args, report=None) -> dict:
    """``report`` (optional) gets the results so far after every step (bench/device/check.py keeps them if a
    later step runs past its time)."""
    import torch

    from grouprl.run_config import build_config
    from grouprl.models.loading import load_policy
    from grouprl.tasks import load_task
    from grouprl.train.trainer import Trainer

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    out = tempfile.mkdtemp(prefix="bench_grouprl_")
    try:
        cfg = build_config(cli=grouprl_cli(args, out), environ={})
        if cfg.runtime.tune_malloc:  # as `grouprl train` does (job/malloc_tuning.py); TRL runs glibc's defaults
            from grouprl.job.malloc_tuning import tune_malloc

            tune_malloc()
        task = load_task(cfg)
        device = getattr(args, "device", "cpu")
        policy = load_policy(cfg.model, args.model, torch.device(device), need_reference=False)
        trainer = Trainer(cfg, policy, task)
        clock = PhaseClock(policy.model.get_decoder())
        wrap(trainer.backend, "generate", clock, "generation")
        wrap(trainer.backend, "load_weights", clock, "weight_push")
        setup_rss = rss_mb()
        res = defaultdict(list)
        for _ in range(args.steps):
            start, cpu = time.perf_counter(), time.process_time()
            record = trainer.train_step()
            peak_gpu = gpu_sync_and_peak_mb(device)
            elapsed = time.perf_counter() - start
            res["step_times"].append(elapsed)
            res["cpu_times"].append(time.process_time() - cpu)
            res["phases"].append(clock.take(elapsed))
            trainer.step += 1
            steps = [s for ep in record.episodes for s in ep.steps]
            n_comp = sum(len(s.action_ids) for s in steps)
            res["tokens"].append(sum(len(s.prompt_ids) for s in steps) + n_comp)
            res["completion_tokens"].append(n_comp)
            res["update_stats"].append({k: v for k, v in record.update.items() if k.startswith("importance")})
            res["skipped_updates"].append(record.update.get("skipped_zero_advantage", 0.0))
            if report:
                report({**res, "peak_gpu_mb": peak_gpu, "peak_rss_mb": peak_rss_mb()})
        return {
            **res,
            "setup_rss_mb": setup_rss,
            "peak_rss_mb": peak_rss_mb(),
            "peak_gpu_mb": peak_gpu,
            "engine_dtype": _engine_dtype(getattr(trainer.backend, "llm", None)),
        }
    finally:
        shutil.rmtree(out, ignore_errors=True)


def _engine_dtype(llm) -> str | None:
    """The dtype a vLLM engine actually runs in (None: no engine)."""
    return None if llm is None else str(llm.llm_engine.model_config.dtype)


def _trl_vllm_cpu_sync(trainer) -> None:
    """TRL's colocated weight push calls the vLLM model's ``load_weights`` directly; vLLM's CPU build has
    repacked its linear weights for oneDNN (their parameters are empty), so that cannot work there. Route
    it through vLLM's in-place ``reload_weights`` (what grouprl's backend does); the rest is TRL's."""
    vg = trainer.vllm_generation

    def sync_weights():
        weights = [(n, p.detach()) for n, p in trainer.model.state_dict().items()]
        vg.llm.collective_rpc(
            "reload_weights", kwargs={"weights_iterator": iter(weights), "is_checkpoint_format": True}
        )
        vg.llm.reset_prefix_cache()

    vg.sync_weights = sync_weights


def worker_trl(args, report=None) -> dict:
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from grouprl.run_config import build_config
    from grouprl.models.loading import load_tokenizer
    from grouprl.rewards.builtin.number_answer import arithmetic_digits
    from grouprl.tasks import load_task

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    out = tempfile.mkdtemp(prefix="bench_trl_")
    try:
        task = load_task(build_config(cli=grouprl_cli(args, out), environ={}))  # the very same rows and prompts
        dataset = Dataset.from_list(
            [{"prompt": task.messages(r), "ground_truth": r["ground_truth"]} for r in task.train_rows]
        )

        def arithmetic_digits_reward(completions, ground_truth, **_):
            return [
                arithmetic_digits(c[-1]["content"] if isinstance(c, list) else c, gt)
                for c, gt in zip(completions, ground_truth)
            ]

        n = args.k * args.prompts
        device, dtype = getattr(args, "device", "cpu"), getattr(args, "dtype", "float32")
        use_vllm = args.backend == "vllm"
        config = GRPOConfig(
            output_dir=out,
            loss_type="dapo",
            beta=0.0,
            num_generations=args.k,
            per_device_train_batch_size=n,
            gradient_accumulation_steps=1,
            max_completion_length=args.max_new_tokens,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            learning_rate=args.lr,
            weight_decay=0.0,
            lr_scheduler_type="constant",
            max_grad_norm=1.0,
            max_steps=args.steps,
            scale_rewards="group",
            use_cpu=device == "cpu",
            bf16=dtype == "bfloat16",
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
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=getattr(torch, dtype))
        tokenizer = load_tokenizer(args.model)  # AutoTokenizer picks Qwen2Tokenizer for the char tokenizer
        clock = PhaseClock(model.get_decoder())
        res = defaultdict(list)

        class Timed(timed_trl(GRPOTrainer, clock, device)):
            def _generate_and_score_completions(self, inputs):
                batch = super()._generate_and_score_completions(inputs)
                res["tokens"].append(int(batch["prompt_mask"].sum() + batch["completion_mask"].sum()))
                res["completion_tokens"].append(int(batch["completion_mask"].sum()))
                return batch

        trainer = Timed(
            model=model,
            reward_funcs=arithmetic_digits_reward,
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
        )
        trainer.remove_callback(PrinterCallback)
        if use_vllm and not torch.cuda.is_available():
            _trl_vllm_cpu_sync(trainer)
        trainer.add_callback(step_timer(trainer, res, clock, device, report))
        setup_rss = rss_mb()
        trainer.train()
        engine = getattr(getattr(trainer, "vllm_generation", None), "llm", None) if use_vllm else None
        return {**res, "setup_rss_mb": setup_rss, "peak_rss_mb": peak_rss_mb(), "engine_dtype": _engine_dtype(engine)}
    finally:
        shutil.rmtree(out, ignore_errors=True)
