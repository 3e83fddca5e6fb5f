"""SFT warm start on gold solutions with TRL's SFTTrainer (completion-only loss)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable


def sft_warm_start(
    model_dir: str,
    rows: list[dict[str, Any]],
    messages_fn,
    out_dir: str | Path,
    *,
    max_steps: int,
    learning_rate: float,
    batch_size: int,
    seed: int,
    stop_when: Callable[[Any, Any], bool] | None = None,
    check_every: int = 10,
) -> Path:
    """Fine-tune ``model_dir`` on (prompt, gold completion) pairs; save to ``out_dir``.

    Stops after ``max_steps`` steps, or earlier at the first multiple of ``check_every`` where
    ``stop_when(model, tokenizer)`` is true (the embedded default stops at a target accuracy,
    so every seed starts RL from a comparable, deliberately unfinished model).
    """
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl import SFTConfig, SFTTrainer

    data = Dataset.from_list(
        [
            {"prompt": messages_fn(r), "completion": [{"role": "assistant", "content": r["gold_completion"]}]}
            for r in rows
        ]
    )
    from grouprl.models.loading import auto_tokenizer

    tokenizer = auto_tokenizer(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    args = SFTConfig(
        output_dir=str(Path(out_dir) / "trainer"),
        max_steps=max_steps,
        per_device_train_batch_size=batch_size,
        learning_rate=learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        logging_steps=max(1, max_steps // 5),
        save_strategy="no",
        report_to="none",
        seed=seed,
        data_seed=seed,
        use_cpu=not __import__("torch").cuda.is_available(),
        dataloader_num_workers=0,
        disable_tqdm=False,
        **_checkpointing_option(SFTConfig),
    )
    callbacks = [] if stop_when is None else [_StopWhen(stop_when, tokenizer, check_every)]
    trainer = SFTTrainer(model=model, args=args, train_dataset=data, processing_class=tokenizer, callbacks=callbacks)
    trainer.train()
    out = Path(out_dir)
    model.save_pretrained(out)  # trained in place (no peft_config: SFTTrainer keeps the model it was given)
    tokenizer.save_pretrained(out)
    return out


def _checkpointing_option(config_class) -> dict:
    """TRL's default (activation checkpointing on) under the name transformers >= 5.24 reads: left to
    TRL's ``gradient_checkpointing`` default, transformers warns that the name is deprecated."""
    import dataclasses

    names = {f.name for f in dataclasses.fields(config_class)}
    return {"activation_checkpointing": True} if "activation_checkpointing" in names else {}


def _StopWhen(predicate, tokenizer, every: int):
    from transformers import TrainerCallback

    class StopWhen(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            if state.global_step % every == 0 and predicate(model, tokenizer):
                control.should_training_stop = True
            model.train()

    return StopWhen()
