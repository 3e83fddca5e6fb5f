"""grouprl: group-relative RL post-training (GRPO, GiGPO, GRAIL) from a laptop CPU to a cluster."""

__version__ = "0.1.0"

# The ``speed`` config section (grouped scoring, vLLM engine, sampling correction) registers itself
# with grouprl.config like a task's section; imported here so that every build_config knows it.
import grouprl.speed_config  # noqa: E402,F401
import grouprl.objective_config  # noqa: E402,F401  (loss, entropy bonus, dynamic sampling, curriculum)
