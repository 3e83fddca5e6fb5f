"""open-r1 / TRL recipe keys translated onto grouprl's keys; unsupported keys fail naming themselves."""

from __future__ import annotations

import pytest

from conftest import REPO_ROOT
from grouprl.config import ConfigError
from grouprl.run_config import build_config
from grouprl.config.openr1 import RecipeKeyError, translate_recipe

# grouprl's keys the translation targets (the config's fields; checked against the real config in
# test_prompt_dataset_task.py once they are wired in).
KNOWN = {
    "model_name_or_path",
    "model_revision",
    "torch_dtype",
    "attn_implementation",
    "dataset_name_or_path",
    "dataset_config",
    "dataset_train_split",
    "dataset_test_split",
    "dataset_mixture",
    "dataset_prompt_column",
    "system_prompt",
    "chat_template",
    "rewards",
    "reward_weights",
    "normalize_weights",
    "num_generations",
    "batch_size",
    "gradient_accumulation_steps",
    "max_prompt_length",
    "max_new_tokens",
    "learning_rate",
    "lr_scheduler_type",
    "warmup_ratio",
    "num_train_epochs",
    "max_steps",
    "beta",
    "epsilon_low",
    "epsilon_high",
    "loss_type",
    "scale_rewards",
    "temperature",
    "top_p",
    "save_strategy",
    "save_steps",
    "save_total_limit",
    "eval_strategy",
    "eval_steps",
    "eval_batch_size",
    "logging_steps",
    "seed",
    "output_dir",
    "overwrite_output_dir",
    "report_to",
    "hub_model_id",
    "hub_model_revision",
    "push_to_hub",
    "push_to_hub_revision",
    "wandb_project",
    "wandb_entity",
    "wandb_run_group",
    "log_rollouts",
    "warmup_steps",
}

OPENR1_DEMO = {  # the keys of open-r1's recipes/Qwen2.5-1.5B-Instruct/grpo/config_demo.yaml, offline values
    "model_name_or_path": "Qwen/Qwen2.5-1.5B-Instruct",
    "model_revision": "main",
    "torch_dtype": "bfloat16",
    "attn_implementation": "sdpa",
    "dataset_name": "open-r1/OpenR1-Math-220k",
    "dataset_prompt_column": "problem",
    "system_prompt": "Think, then answer.",
    "bf16": True,
    "do_eval": False,
    "gradient_accumulation_steps": 4,
    "hub_model_id": "Qwen2.5-1.5B-Open-R1-GRPO",
    "hub_strategy": "every_save",
    "learning_rate": 2.0e-05,
    "log_completions": True,
    "log_level": "info",
    "logging_first_step": True,
    "logging_steps": 1,
    "logging_strategy": "steps",
    "lr_scheduler_type": "cosine",
    "max_prompt_length": 512,
    "max_completion_length": 1024,
    "max_steps": -1,
    "num_generations": 16,
    "num_train_epochs": 1,
    "output_dir": "data/Qwen2.5-1.5B-Open-R1-GRPO",
    "overwrite_output_dir": True,
    "per_device_eval_batch_size": 16,
    "per_device_train_batch_size": 16,
    "push_to_hub": True,
    "report_to": ["wandb"],
    "reward_funcs": ["accuracy", "format", "tag_count"],
    "reward_weights": [1.0, 1.0, 1.0],
    "save_strategy": "epoch",
    "save_total_limit": 1,
    "seed": 42,
    "temperature": 0.7,
    "warmup_ratio": 0.1,
}


def test_openr1_demo_recipe_translates():
    out = translate_recipe(OPENR1_DEMO, KNOWN, "config_demo.yaml")
    assert out["dataset_name_or_path"] == "open-r1/OpenR1-Math-220k"
    assert out["rewards"] == ["math_accuracy", "format", "tag_count"]
    assert out["max_new_tokens"] == 1024 and out["eval_batch_size"] == 16 and out["log_rollouts"] is True
    assert out["batch_size"] == 16 * 4 // 16  # completions per step / num_generations = prompts per step
    assert "max_steps" not in out and out["num_train_epochs"] == 1  # -1: the epochs decide
    assert out["report_to"] == "wandb" and out["eval_strategy"] == "no" and out["push_to_hub_revision"] is True
    assert out["torch_dtype"] == "bfloat16" and out["normalize_weights"] is False  # TRL's raw reward weights
    for key in ("logging_strategy", "log_level", "logging_first_step", "bf16", "do_eval", "hub_strategy"):
        assert key not in out


def test_unknown_key_fails_naming_it():
    with pytest.raises(RecipeKeyError, match="config.yaml: key 'use_liger' \\(value True\\): not a grouprl key"):
        translate_recipe({"learning_rate": 1e-6, "use_liger": True}, KNOWN, "config.yaml")


def test_key_without_a_grouprl_counterpart_in_this_build_fails_naming_both():
    with pytest.raises(
        RecipeKeyError,
        match="key 'use_vllm' .* maps to grouprl's 'generation_backend', which this grouprl does not have",
    ):
        translate_recipe({"use_vllm": True}, KNOWN, "r.yaml")


def test_same_behaviour_keys_accept_only_that_behaviour():
    with pytest.raises(RecipeKeyError, match="key 'logging_strategy' \\(value 'epoch'\\): grouprl supports only"):
        translate_recipe({"logging_strategy": "epoch"}, KNOWN)


def test_epsilon_sets_both_bounds_unless_epsilon_high_is_given():
    assert translate_recipe({"epsilon": 0.3}, KNOWN) == {"epsilon_low": 0.3, "epsilon_high": 0.3}
    assert translate_recipe({"epsilon": 0.2, "epsilon_high": 0.28}, KNOWN) == {"epsilon_low": 0.2, "epsilon_high": 0.28}


def test_scale_rewards_booleans_and_report_to_lists():
    assert translate_recipe({"scale_rewards": False}, KNOWN)["scale_rewards"] == "none"
    assert translate_recipe({"scale_rewards": True}, KNOWN)["scale_rewards"] == "group"
    assert translate_recipe({"scale_rewards": "batch"}, KNOWN)["scale_rewards"] == "batch"
    assert translate_recipe({"report_to": []}, KNOWN)["report_to"] == "none"
    assert translate_recipe({"report_to": "none"}, KNOWN)["report_to"] == "none"
    with pytest.raises(RecipeKeyError, match="one sink"):
        translate_recipe({"report_to": ["wandb", "tensorboard"]}, KNOWN)


def test_batch_size_must_divide_into_groups():
    with pytest.raises(
        RecipeKeyError,
        match="x gradient_accumulation_steps 1 = 6 completions per step is not a multiple of num_generations 4",
    ):
        translate_recipe({"per_device_train_batch_size": 6, "num_generations": 4}, KNOWN)
    assert (
        translate_recipe({"per_device_train_batch_size": 8, "num_generations": 4, "batch_size": 5}, KNOWN)["batch_size"]
        == 5
    )  # grouprl's own key, given explicitly, wins


def test_reward_options_go_to_their_reward_and_dangling_ones_fail():
    out = translate_recipe({"reward_funcs": ["accuracy", "cosine"], "cosine_max_len": 300}, KNOWN)
    assert out["rewards"] == ["math_accuracy", {"name": "cosine_length", "options": {"max_len": 300}}]
    with pytest.raises(
        RecipeKeyError,
        match="key 'repetition_n_grams' .* configures reward 'repetition_penalty', which reward_funcs does not name",
    ):
        translate_recipe({"reward_funcs": ["accuracy"], "repetition_n_grams": 4}, KNOWN)
    with pytest.raises(RecipeKeyError, match="open-r1's reward 'code' has no grouprl equivalent"):
        translate_recipe({"reward_funcs": ["code"]}, KNOWN)
    assert translate_recipe({"reward_funcs": ["my_rewards.py:score"]}, KNOWN)["rewards"] == ["my_rewards.py:score"]


# --- through the real config loader ---------------------------------------------------------------

MATH_RECIPE = REPO_ROOT / "recipes" / "Qwen2.5-1.5B-Instruct" / "grpo" / "config_math.yaml"


def test_shipped_math_recipe_loads_onto_grouprl_sections():
    cfg = build_config(MATH_RECIPE, environ={})
    assert cfg.task.task == "prompt_dataset" and cfg.data.dataset_prompt_column == "problem"
    assert cfg.task.dataset_name_or_path == "DigitalLearningGmbH/MATH-lighteval"
    assert cfg.task.rewards == ["math_accuracy", "format", "tag_count"]
    assert "<think>" in cfg.task.system_prompt and "<answer>" in cfg.task.system_prompt
    assert cfg.rollout.batch_size == 16 * 4 // 8 and cfg.rollout.max_new_tokens == 1024
    assert cfg.prompts.max_prompt_length == 512 and cfg.model.torch_dtype == "bfloat16"
    assert cfg.algorithm.epsilon_low == 0.2 and cfg.algorithm.epsilon_high == 0.28
    assert cfg.train.num_train_epochs == 1 and cfg.train.warmup_ratio == 0.1
    assert cfg.eval.eval_strategy == "steps" and cfg.train.save_total_limit == 2
    assert cfg.hub.hub_model_revision == "v00.00" and cfg.model.attn_implementation == "sdpa"
    assert "max_steps" not in cfg.train.model_fields_set  # -1: the epochs decide


def test_unknown_key_in_a_recipe_file_fails_naming_it(tmp_path):
    recipe = tmp_path / "config_x.yaml"
    recipe.write_text(MATH_RECIPE.read_text() + "neftune_noise_alpha: 5\n")
    with pytest.raises(ConfigError, match="config_x.yaml: key 'neftune_noise_alpha' \\(value 5\\): not a grouprl key"):
        build_config(recipe, environ={})
    recipe.write_text(MATH_RECIPE.read_text() + "use_liger_kernel: true\n")  # a TRL key: what grouprl does instead
    with pytest.raises(
        ConfigError,
        match="key 'use_liger_kernel' \\(value True\\): grouprl accepts only False "
        "here: grouprl computes log-probs chunk by chunk without Liger",
    ):
        build_config(recipe, environ={})
    recipe.write_text(MATH_RECIPE.read_text() + "vllm_mode: remote\n")
    with pytest.raises(
        ConfigError,
        match="config_x.yaml: key 'vllm_mode' \\(value 'remote'\\): expected one of \\['colocate', 'server'\\]",
    ):
        build_config(recipe, environ={})


def test_use_vllm_and_vllm_mode_pick_the_generation_backend():
    known = KNOWN | {"generation_backend", "sampling_correction", "sampling_correction_cap"}
    assert translate_recipe({"use_vllm": True}, known)["generation_backend"] == "vllm"
    assert translate_recipe({"use_vllm": True, "vllm_mode": "colocate"}, known)["generation_backend"] == "vllm"
    assert translate_recipe({"vllm_mode": "server", "use_vllm": True}, known)["generation_backend"] == "vllm_server"
    assert translate_recipe({"use_vllm": False, "vllm_mode": "server"}, known)["generation_backend"] == "hf"
    assert translate_recipe({"vllm_mode": "colocate"}, known) == {}  # without use_vllm: no effect, as in TRL


def test_null_dataset_config_and_non_integer_batch_keys():
    assert "dataset_config" not in translate_recipe({"dataset_config": None}, KNOWN)  # the dataset's default
    with pytest.raises(RecipeKeyError, match="key 'num_generations' \\(value None\\): expected a positive integer"):
        translate_recipe({"per_device_train_batch_size": 8, "num_generations": None}, KNOWN)


# Every open-r1 key issue 11 lists, with plausible values, in one flat recipe.
EVERY_LISTED_KEY = """
model_name_or_path: Qwen/Qwen2.5-1.5B-Instruct
model_revision: main
torch_dtype: bfloat16
attn_implementation: sdpa
dataset_name: open-r1/OpenR1-Math-220k
dataset_config: null
dataset_train_split: train
dataset_test_split: test
dataset_prompt_column: problem
system_prompt: "Think, then answer."
chat_template: "{% for m in messages %}{{ m['content'] }}{% endfor %}"
reward_funcs: [accuracy, format, tag_count]
reward_weights: [1.0, 0.5, 0.5]
num_generations: 4
per_device_train_batch_size: 8
gradient_accumulation_steps: 2
max_prompt_length: 256
max_completion_length: 128
learning_rate: 1.0e-6
lr_scheduler_type: cosine
warmup_ratio: 0.1
num_train_epochs: 2
max_steps: -1
beta: 0.04
use_bias_correction_kl: false
epsilon: 0.2
epsilon_high: 0.28
loss_type: dapo
scale_rewards: false
temperature: 0.9
top_p: 0.95
save_strategy: steps
save_steps: 10
save_total_limit: 2
eval_strategy: steps
eval_steps: 5
per_device_eval_batch_size: 16
logging_steps: 1
seed: 3
output_dir: data/run
overwrite_output_dir: true
report_to: [none]
hub_model_id: me/model
hub_model_revision: v01
push_to_hub: false
push_to_hub_revision: true
wandb_project: proj
wandb_entity: team
wandb_run_group: group
gradient_checkpointing: false
use_vllm: true
vllm_mode: server
"""


def test_every_key_the_issue_lists_loads(tmp_path):
    recipe = tmp_path / "config_all.yaml"
    recipe.write_text(EVERY_LISTED_KEY)
    cfg = build_config(recipe, environ={})
    assert cfg.task.task == "prompt_dataset" and cfg.task.dataset_name_or_path == "open-r1/OpenR1-Math-220k"
    assert "dataset_config" not in cfg.task.model_fields_set and cfg.data.dataset_test_split == "test"
    assert cfg.prompts.chat_template.startswith("{%") and cfg.prompts.max_prompt_length == 256
    assert cfg.rollout.batch_size == 8 * 2 // 4 and cfg.rollout.max_new_tokens == 128
    assert cfg.rollout.generation_backend == "vllm_server" and cfg.rollout.top_p == 0.95
    assert cfg.algorithm.scale_rewards == "none" and cfg.algorithm.loss_type == "dapo"
    assert (cfg.algorithm.epsilon_low, cfg.algorithm.epsilon_high) == (0.2, 0.28)
    assert cfg.train.num_train_epochs == 2 and "max_steps" not in cfg.train.model_fields_set
    assert cfg.eval.eval_steps == 5 and cfg.eval.eval_batch_size == 16
    assert cfg.hub.hub_model_revision == "v01" and cfg.hub.push_to_hub_revision is True
    assert cfg.logging.wandb_entity == "team" and cfg.logging.wandb_run_group == "group"
    assert cfg.model.model_revision == "main" and cfg.model.attn_implementation == "sdpa"
    recipe.write_text(EVERY_LISTED_KEY + "num_generation: 8\n")  # a typo is an error naming it
    with pytest.raises(ConfigError, match="config_all.yaml: key 'num_generation' \\(value 8\\): not a grouprl key"):
        build_config(recipe, environ={})


def test_gradient_checkpointing_as_open_r1_writes_it():
    out = translate_recipe(
        {"gradient_checkpointing": True, "gradient_checkpointing_kwargs": {"use_reentrant": False}},
        KNOWN | {"gradient_checkpointing"},
    )
    assert out == {"gradient_checkpointing": True}
    with pytest.raises(RecipeKeyError, match="key 'gradient_checkpointing_kwargs'"):
        translate_recipe(
            {"gradient_checkpointing": True, "gradient_checkpointing_kwargs": {"use_reentrant": True}},
            KNOWN | {"gradient_checkpointing"},
        )


def test_epochs_and_ratios_become_steps(tmp_path):
    from grouprl.config import resolve_schedule

    cfg = build_config(MATH_RECIPE, {"save_strategy": "epoch"}, environ={})
    assert resolve_schedule(cfg, n_train_rows=1000) == {"max_steps": 125, "warmup_steps": 13, "save_steps": 125}
    fixed = build_config(MATH_RECIPE, {"max_steps": 10, "save_strategy": "no"}, environ={})
    assert resolve_schedule(fixed, n_train_rows=1000) == {"max_steps": 10, "warmup_steps": 1, "save_steps": 0}
