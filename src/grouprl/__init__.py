"""grouprl: group-relative RL post-training (GRPO, GiGPO, GRAIL) from a laptop CPU to a cluster."""

__version__ = "0.1.0"
