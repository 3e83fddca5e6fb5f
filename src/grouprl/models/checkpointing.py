"""Gradient (activation) checkpointing switched on for a policy, whichever name its transformers version uses."""


def enable_checkpointing(model) -> None:
    """Recompute each decoder layer's activations in the backward (non-reentrant: works under DDP/FSDP)."""
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.x names it so
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if hasattr(model, "enable_input_require_grads"):  # LoRA: frozen embeddings, yet the recompute needs grads
        model.enable_input_require_grads()
