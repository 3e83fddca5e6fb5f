"""The ``speed`` config section: how a step is computed, not what it computes.

Registered (``register_section``) like a task's own section and imported by ``grouprl/__init__``,
so its fields are flags, environment variables and recipe keys (``--grouped_scoring false``,
``speed: {vllm_max_model_len: 1024}``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from grouprl.config import Section, register_section


class SpeedConfig(Section):
    grouped_scoring: bool = Field(
        True, description="score each group's prompt once with its K completions (block mask; same gradients); "
                          "off, or a model whose attention cannot take a 4-D mask: one padded row per completion")
    grouped_layout: Literal["auto", "prefix_cache", "block_mask"] = Field(
        "auto", description="how a group is scored once: prefix_cache (the prompt's keys/values reused by its K "
                            "completions; attention K*T*(p+T)), block_mask (one row, 4-D mask; attention "
                            "(p+K*T)^2); auto = per batch, the one a FLOP estimate finds cheaper "
                            "(block_mask under gradient_checkpointing)")
    prefill_once: bool = Field(
        True, description="hf generation: prefill a group's prompt once and fork its KV cache to the K samples "
                          "(same tokens; off: HF generate prefills every copy)")
    sampling_correction: Literal["token_truncate", "token_mask", "sequence_truncate", "sequence_mask", "none"] = Field(
        "token_truncate", description="when the backend reports sampling log-probs (vllm): weight each token's "
                                      "loss by min(pi_old / pi_sampler, cap) (token_truncate, TIS), or 0 above cap "
                                      "(token_mask, MIS); sequence_*: one weight per sequence from the product of "
                                      "its tokens' ratios")
    sampling_correction_cap: float = Field(2.0, gt=0, description="the cap C of the importance weights")
    vllm_dtype: str = Field("auto", description="vllm: engine dtype (auto = the policy's)")
    vllm_max_model_len: int = Field(2048, gt=0, description="vllm: longest prompt + completion the engine serves")
    vllm_gpu_memory_utilization: float = Field(0.3, gt=0, le=1, description="vllm on GPU: the engine's memory share")
    vllm_enforce_eager: bool = Field(
        True, description="vllm: no CUDA graphs / torch.compile (fast start, small runs); false on a GPU for speed")
    vllm_sleep_during_update: bool = Field(True, description="vllm on GPU: free the engine's memory during the update")
    vllm_cpu_kv_cache_gb: int = Field(1, gt=0, description="vllm on CPU: KV-cache size in GiB")
    vllm_server_host: str = Field("127.0.0.1", description="vllm_server: address of `grouprl vllm-serve`")
    vllm_server_port: int = Field(8000, gt=0, lt=65536, description="vllm_server: port of `grouprl vllm-serve`")
    vllm_server_timeout: float = Field(
        240.0, gt=0, description="vllm_server: seconds to wait at start for the server to answer /health")
    vllm_server_weights_dir: str = Field(
        "", description="vllm_server: directory, seen by trainer and server, for the weight file pushed after "
                        "each update (empty: a fresh one under /dev/shm, else the temp dir; same node only)")


register_section("speed", SpeedConfig)
