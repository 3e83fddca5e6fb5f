"""The core sections: what model, which task, how episodes are generated, the algorithm, how a step is
computed (``speed``), and tool-calling conversations (``tools``). Typed here, in one place; the objective (loss,
KL estimator, entropy bonus, dynamic sampling, curriculum) is in ``objective_sections.py``, a task's own fields
in ``task_sections.py``, the run around the loop (schedule, evaluation, logging) in ``run_sections.py``.

Names (task, generation backend, advantage estimator, loss, reward) are plain strings here: they
are checked against their registries where the run is assembled (``grouprl/run_config.py``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from grouprl.config.base import Section


class ModelConfig(Section):
    model_name_or_path: str | None = Field(
        None, description="Hub id or local dir of a causal LM; empty = build the task's tiny model and SFT-warm it"
    )
    torch_dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="auto = bfloat16 on CUDA, float32 elsewhere"
    )
    use_peft: bool = Field(False, description="train LoRA adapters; the reference is the base with adapters off")
    lora_r: int = Field(16, gt=0, description="LoRA rank")
    lora_alpha: int = Field(32, gt=0, description="LoRA alpha")
    lora_dropout: float = Field(0.05, ge=0, lt=1, description="LoRA dropout")
    lora_target_modules: list[str] = Field(["q_proj", "k_proj", "v_proj", "o_proj"], description="modules to adapt")
    tiny_hidden_size: int = Field(128, gt=0, description="tiny model: hidden size")
    tiny_num_layers: int = Field(4, gt=0, description="tiny model: decoder layers")
    tiny_num_heads: int = Field(4, gt=0, description="tiny model: attention heads")
    # from the former ``loading`` section
    model_revision: str = Field("main", description="hub revision (branch, tag or commit) of model_name_or_path")
    attn_implementation: str | None = Field(
        None, description="attention kernel for from_pretrained (eager, sdpa, flash_attention_2; empty = default)"
    )
    cudnn_attention: bool = Field(
        False,
        description="CUDA only: let sdpa use cuDNN's attention kernel (off: it plans each new shape, ~1 ms of "
        "host time a layer, and RL batches change shape at every decode step; torch's flash / efficient kernels run)",
    )

    former_sections = ("loading",)


class RewardSpec(Section):
    """One reward in a recipe: ``{name: accuracy, weight: 2, options: {max_len: 500}}``."""

    name: str = Field(description="built-in name, 'path/to/file.py:function' or 'package.module:function'")
    weight: float = Field(1.0, description="share of the score (normalized unless normalize_weights is false)")
    options: dict[str, Any] = Field(default_factory=dict, description="keyword options bound to the function")


class TaskConfig(Section):
    task: str = Field(
        "arithmetic",
        description="where episodes come from: a registered task (tasks/registry.py): "
        "arithmetic, gsm8k, gridworld, sokoban, calculator, ..., or your own "
        "as 'path/to/file.py:make_task' (make_task(cfg) -> Task)",
    )
    env: str | None = Field(
        None,
        description="an environment of your own: 'path/to/file.py:make_env' (make_env() -> "
        "Environment), played on seeded levels (task 'env', implied)",
    )
    dataset_name_or_path: str | None = Field(
        None, description="gsm8k: hub id (openai/gsm8k) or a dir with train.jsonl/test.jsonl"
    )
    dataset_config: str = Field("main", description="hub dataset config")
    n_train: int | None = Field(
        None, gt=0, description="use the first N training rows; environments: N training seeds (empty = task default)"
    )
    system_prompt: str | None = Field(None, description="override the task's system message")
    rewards: list[str | RewardSpec] | None = Field(
        None, description="reward functions: names, or {name, weight, options} (empty = the task's default)"
    )
    reward_weights: list[float] | None = Field(None, description="one weight per reward function (default all 1)")
    normalize_weights: bool = Field(True, description="divide the weights by their sum")
    sandbox_user_rewards: bool = Field(False, description="run 'path/to/file.py:function' rewards in the sandbox")
    max_reward_error_fraction: float = Field(
        0.1, ge=0, le=1, description="stop when more than this share of a batch fails in reward functions"
    )
    reward_timeout: float = Field(60.0, ge=0, description="seconds a reward call may take, then errors (0 = no limit)")
    default_step_reward: float = Field(
        0.0, description="step reward for steps a reward function's step_outputs do not name"
    )


class RolloutConfig(Section):
    num_generations: int = Field(8, ge=2, description="K completions per prompt (the group size)")
    batch_size: int = Field(16, gt=0, description="prompts per training step (groups per step)")
    max_new_tokens: int | None = Field(
        None,
        gt=0,
        description="completion length cap per step (empty = the task's: arithmetic 6, gsm8k 512, "
        "gridworld/sokoban 24, calculator 48)",
    )
    generation_backend: str = Field(
        "hf",
        description="generation engine (BACKENDS): hf = transformers generate, vllm = a colocated engine, "
        "vllm_server = a `grouprl vllm-serve` process, or your own factory 'path/to/file.py:make_backend' / "
        "'package.module:make_backend' ((policy, cfg) -> backend)",
    )
    temperature: float = Field(1.0, gt=0, description="sampling temperature (also scales logits in the loss)")
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling")
    top_k: int = Field(0, ge=0, description="top-k sampling (0 = off)")
    generation_batch_size: int = Field(256, gt=0, description="sequences per generate call")
    max_episode_steps: int = Field(10, gt=0, description="environments: step cap per episode")
    history_length: int = Field(2, ge=0, description="environments: past (observation, action) pairs in the prompt")
    action_pattern: str = Field(
        r"<action>(.*?)</action>",
        description="environments: regex whose first group is the action ('' = the whole completion)",
    )
    invalid_action_penalty: float = Field(
        0.1, ge=0, description="environments: reward subtracted for an unparsable or inadmissible action"
    )
    invalid_penalty: Literal["in_returns", "on_step"] = Field(
        "in_returns",
        description="environments: penalty as a "
        "step reward (in returns and score), or on the invalid step's own row before the group and anchor "
        "statistics (on_step: verl-agent's flow exactly)",
    )
    show_admissible_actions: bool = Field(True, description="environments: list admissible actions in the prompt")
    env_workers: int = Field(1, ge=1, description="environments: N > 1 runs them in N Ray actors")
    rollout_mode: Literal["sync", "one_step_off", "async"] = Field(
        "sync",
        description="sync = generate, then learn (bit for bit the plain loop); one_step_off = generate batch t+1 "
        "while the learner trains on batch t; async = max_inflight batches generated at once, up to "
        "max_staleness policy versions ahead (docs/async.md)",
    )
    max_staleness: int = Field(
        1, ge=0, description="async: how many policy versions a trained token may lag the weights being updated"
    )
    max_inflight: int = Field(
        2, ge=1, description="async: batches of groups generated (and scored) at once by the producer's workers"
    )
    rollout_timeout: float = Field(
        600.0, gt=0, description="one_step_off/async: seconds the learner waits for a finished batch before it stops"
    )
    ray_address: str | None = Field(None, description="Ray cluster to connect to (empty = start a local one)")


class AlgorithmConfig(Section):
    advantage: str = Field(
        "grpo",
        description="advantage estimator: grpo, dr_grpo, rloo, gigpo, or your own as "
        "'path/to/file.py:function' / 'package.module:function'",
    )
    advantage_options: dict[str, Any] = Field(
        default_factory=dict,
        description="the estimator's keyword options "
        "(undeclared = error); built-ins read scale_rewards, gamma, step_advantage_weight, gigpo_norm, episode_stats",
    )
    scale_rewards: Literal["group", "batch", "none"] = Field("group", description="grpo: divide by group/batch std")
    loss_type: Literal["grpo", "bnpo", "dapo", "dr_grpo"] = Field("dapo", description="token aggregation of the loss")
    epsilon_low: float = Field(0.2, ge=0, description="PPO clip: lower bound 1 - epsilon_low")
    epsilon_high: float = Field(0.2, ge=0, description="PPO clip: upper bound 1 + epsilon_high")
    beta: float = Field(0.0, ge=0, description="KL-to-reference coefficient (k3 estimator); 0 = no reference model")
    num_iterations: int = Field(1, ge=1, description="mu: optimizer passes over one generation batch")
    mask_truncated_completions: bool = Field(False, description="drop completions that hit max_new_tokens")
    skip_zero_advantage_updates: bool = Field(
        True,
        description="skip the optimizer step of an update whose trained tokens all have advantage 0 and no "
        "KL/entropy term (AdamW would move the weights on momentum alone); false: step anyway, as TRL does",
    )
    gamma: float = Field(0.95, ge=0, le=1, description="gigpo: discount of step returns")
    step_advantage_weight: float = Field(1.0, ge=0, description="gigpo: omega, weight of the step-level advantage")
    gigpo_norm: Literal["mean_norm", "mean_std_norm"] = Field(
        "mean_norm", description="gigpo: F = 1 (mean_norm) or std + 1e-6 (mean_std_norm)"
    )
    episode_stats: Literal["episode", "per_step"] = Field(
        "episode", description="gigpo: episode-level mean/std over episodes, or over steps (verl-agent)"
    )
    anchor_mode: Literal["exact", "similarity"] = Field(
        "exact", description="gigpo: group steps by equal anchor states, or by text similarity"
    )
    similarity_threshold: float = Field(0.95, gt=0, le=1, description="gigpo: similarity mode's threshold")
    state_key: str | None = Field(
        None, description="gigpo: 'module:function' or 'file.py:function' mapping an anchor state to its key"
    )


class SpeedConfig(Section):
    grouped_scoring: bool = Field(
        True,
        description="score each group's prompt once with its K completions (block mask; same gradients); "
        "off, or a model whose attention cannot take a 4-D mask: one padded row per completion",
    )
    grouped_layout: Literal["auto", "prefix_cache", "block_mask"] = Field(
        "auto",
        description="how a group is scored once: prefix_cache (the prompt's keys/values reused by its K "
        "completions; attention K*T*(p+T)), block_mask (one row, 4-D mask; attention "
        "(p+K*T)^2); auto = per batch, the one a FLOP estimate finds cheaper "
        "(block_mask under gradient_checkpointing)",
    )
    prefill_once: bool = Field(
        True,
        description="hf generation: prefill a group's prompt once and fork its KV cache to the K samples "
        "(same tokens; off: HF generate prefills every copy)",
    )
    turn_kv_cache: bool = Field(
        True,
        description="hf generation, conversation episodes: keep each conversation's KV cache between turns "
        "and prefill only what the last turn added (same tokens; off: every turn re-encodes the "
        "whole conversation)",
    )
    skip_zero_advantage_samples: bool = Field(
        True,
        description="leave samples whose trained tokens all have advantage 0 out of the update's forward and "
        "backward where their gradient is zero (no KL/entropy term, a built-in loss, not bnpo; one process); "
        "the loss keeps the whole batch's denominators, so the gradient is unchanged",
    )
    onednn_generation: bool = Field(
        True,
        description="hf generation on CPU: fp32 linear layers through oneDNN (1.2-1.3x faster decoding than "
        "ATen's MKL path at generation's row counts; same fp32 math, another summation order); off: ATen",
    )
    sampling_draw: Literal["inverse_cdf", "multinomial"] = Field(
        "inverse_cdf",
        description="hf decode loop: how a token is drawn from the warped probabilities: inverse_cdf (one "
        "uniform number a row, the cumulative sum inverted) or multinomial (torch.multinomial: one "
        "exponential per vocabulary entry, HF generate's own draws, so a seed gives generate's tokens); "
        "the same distribution",
    )
    captured_decode: Literal["auto", "on", "off"] = Field(
        "off",
        description="hf decode loop: a static KV cache with every row kept to the end, the one-token step replayed "
        "as a CUDA graph on CUDA (same tokens as the default loop; tested on CPU, its GPU speed not yet "
        "measured, so off by default until bench/device/check.py has); auto = on for a policy on CUDA, off on CPU",
    )
    sampling_correction: Literal["token_truncate", "token_mask", "sequence_truncate", "sequence_mask", "none"] = Field(
        "token_truncate",
        description="when the backend reports sampling log-probs (vllm): weight each token's "
        "loss by min(pi_old / pi_sampler, cap) (token_truncate, TIS), or 0 above cap "
        "(token_mask, MIS); sequence_*: one weight per sequence from the product of "
        "its tokens' ratios",
    )
    sampling_correction_cap: float = Field(2.0, gt=0, description="the cap C of the importance weights")
    vllm_dtype: str = Field("auto", description="vllm: engine dtype (auto = the policy's)")
    vllm_max_model_len: int = Field(2048, gt=0, description="vllm: longest prompt + completion the engine serves")
    vllm_gpu_memory_utilization: float = Field(0.3, gt=0, le=1, description="vllm on GPU: the engine's memory share")
    vllm_enforce_eager: bool = Field(
        True, description="vllm: no CUDA graphs / torch.compile (fast start, small runs); false on a GPU for speed"
    )
    vllm_sleep_during_update: bool = Field(True, description="vllm on GPU: free the engine's memory during the update")
    vllm_cpu_kv_cache_gb: int = Field(1, gt=0, description="vllm on CPU: KV-cache size in GiB")
    vllm_weight_sync: Literal["auto", "adapter", "merged"] = Field(
        "auto",
        description="vllm, vllm_server, LoRA policies: what a push sends after each update: adapter (the LoRA "
        "weights alone, served with vLLM's LoRA; a server needs max_lora_rank), merged (every weight, the adapter "
        "merged in); auto = adapter where the engine runs on a GPU and can serve it, else merged (on CPU vLLM's "
        "LoRA generates ~2x slower), the reason logged",
    )
    vllm_server_host: str = Field("127.0.0.1", description="vllm_server: address of `grouprl vllm-serve`")
    vllm_server_port: int = Field(8000, gt=0, lt=65536, description="vllm_server: port of `grouprl vllm-serve`")
    vllm_server_timeout: float = Field(
        240.0, gt=0, description="vllm_server: seconds to wait at start for the server to answer /health"
    )
    vllm_server_weights_dir: str = Field(
        "",
        description="vllm_server: directory, seen by trainer and server, for the weight file pushed after "
        "each update (empty: a fresh one under /dev/shm, else the temp dir; same node only)",
    )


AGENT_CONTEXT = 4096  # an agent's default context limit (max_conversation_tokens)


class ToolsConfig(Section):
    episode_mode: Literal["window", "conversation"] = Field(
        "window",
        description="window = one prompt per step with a history window (rollout/runner.py); "
        "conversation = one growing chat with tool calls (rollout/conversation.py)",
    )
    tools: list[str] = Field(
        default_factory=list,
        description="conversation: tools by built-in name (calculator, "
        "lookup, python) or 'path/to/file.py:function' / 'package.module:function'",
    )
    tool_parser: str = Field(
        "hermes",
        description="conversation: how tool calls are read from a turn: hermes "
        "(<tool_call>{json}</tool_call>, Qwen), hermes_lenient (hermes, or a turn of bare JSON calls "
        "without the tags, as untrained Qwen2.5 models answer), mistral ([TOOL_CALLS]), llama3_json",
    )
    tool_chat_template: Literal["auto", "qwen25", "own"] = Field(
        "auto",
        description="conversation: auto = a ChatML template in Qwen2.5's tool format when the tokenizer's "
        "template declares no tools; qwen25 = always; own = the tokenizer's as it is",
    )
    max_tool_calls: int = Field(
        4,
        ge=0,
        description="conversation: tool calls per episode (malformed ones count); "
        "a turn asking for more ends the episode",
    )
    max_conversation_tokens: int | None = Field(
        None,
        gt=0,
        description="conversation: context cap; the episode ends when the next prompt plus max_new_tokens "
        f"would pass it (empty = no cap); an agent's endpoint refuses such a request ({AGENT_CONTEXT} unless given)",
    )
    tool_timeout: float = Field(
        10.0,
        gt=0,
        description="conversation: seconds per tool call (an overrun is an error message to the model, counted)",
    )
    tool_sandbox: bool = Field(
        False,
        description="conversation: no user tool code in the trainer's process: tools named by a .py file "
        "run in the bubblewrap sandbox, other user forms are refused (the python tool always runs there)",
    )
    agent: str | None = Field(
        None,
        description="an agent you wrote, 'path/to/agent.py:run' or 'package.module:run': async run(client, row, "
        "**extras) drives the policy through an OpenAI-compatible endpoint (rollout/agent/runner.py; empty = off)",
    )
    max_calls: int = Field(
        16, gt=0, description="agent: chat completions per episode; the next one is refused and the episode fails"
    )
    episode_timeout: float = Field(
        300.0, gt=0, description="agent: seconds an episode may run; past it the episode fails"
    )
    max_failed_agent_steps: int = Field(
        3,
        ge=0,
        description="agent: steps in a row in which every episode failed before the run stops (exit 1; "
        "0 = never); such a step takes no optimizer step",
    )
    tool_anchor: Literal["tool_state", "turn"] = Field(
        "tool_state",
        description="conversation: GiGPO anchor state of a turn: the set of (tool, normalised "
        "arguments, result) seen before it, or the turn index alone",
    )

    @model_validator(mode="before")
    @classmethod
    def _agent_defaults(cls, data: Any) -> Any:
        """An agent plays conversations (``episode_mode: conversation``), and its context limit is
        ``AGENT_CONTEXT`` unless one is given: the common agent frameworks' system prompts alone are 1.5k
        to 2.5k tokens (smolagents')."""
        if not isinstance(data, dict) or not data.get("agent"):
            return data
        data = {**data, "episode_mode": "conversation"}
        data.setdefault("max_conversation_tokens", AGENT_CONTEXT)
        return data
