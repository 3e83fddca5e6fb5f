"""A recipe in TRL's keys means what TRL 1.16 means (grouprl issue 40, item 7), checked against TRL's own
GRPOConfig: the step's batch over every process, the generation batch, the raw reward weights, the
adaptive entropy switch."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

trl = pytest.importorskip("trl")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")

from trl import GRPOConfig  # noqa: E402

from grouprl.algos.advantages import grpo_advantage  # noqa: E402
from grouprl.config import ConfigError  # noqa: E402
from grouprl.config.openr1 import RecipeKeyError, launch_processes, translate_recipe  # noqa: E402
from grouprl.rewards.registry import normalized_weights, weighted_score  # noqa: E402
from grouprl.run_config import build_config  # noqa: E402
from grouprl.tasks.registry import with_rewards  # noqa: E402


def trl_config(monkeypatch, tmp_path, processes: int, **keys) -> GRPOConfig:
    """TRL's GRPOConfig as ``processes`` launched processes would build it (its world_size is theirs)."""
    monkeypatch.setattr(GRPOConfig, "world_size", property(lambda self: processes))
    return GRPOConfig(output_dir=str(tmp_path / "trl"), report_to="none", bf16=False, use_cpu=True, **keys)


def grouprl_config(tmp_path, text: str, processes: int = 1):
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    return build_config(path, environ={"WORLD_SIZE": str(processes)})


def recipe_text(keys: dict) -> str:
    return "".join(f"{key}: {value}\n" for key, value in keys.items())


@pytest.mark.parametrize(
    "processes, per_device, accumulation, generations",
    [(1, 16, 4, 8), (4, 16, 4, 8), (2, 8, 2, 4), (8, 4, 1, 16)],
)
def test_batch_size_counts_every_process_as_trl_does(
    monkeypatch, tmp_path, processes, per_device, accumulation, generations
):
    keys = {
        "per_device_train_batch_size": per_device,
        "gradient_accumulation_steps": accumulation,
        "num_generations": generations,
    }
    theirs = trl_config(monkeypatch, tmp_path, processes, **keys)
    ours = grouprl_config(tmp_path, recipe_text(keys), processes)
    # TRL's default: one generation batch per optimizer step, steps_per_generation = accumulation micro-batches
    assert theirs.steps_per_generation == accumulation
    assert ours.rollout.batch_size * generations == theirs.generation_batch_size  # completions a step
    assert ours.rollout.num_generations == theirs.num_generations


def test_generation_batch_size_is_checked_against_every_process(monkeypatch, tmp_path):
    keys = {"per_device_train_batch_size": 16, "gradient_accumulation_steps": 4, "num_generations": 8}
    consistent = trl_config(monkeypatch, tmp_path, 4, **keys, generation_batch_size=256)
    assert consistent.steps_per_generation == 4  # TRL: one generation per optimizer step, as grouprl
    ours = grouprl_config(tmp_path, recipe_text({**keys, "generation_batch_size": 256}), 4)
    assert ours.rollout.batch_size * 8 == consistent.generation_batch_size
    split = trl_config(monkeypatch, tmp_path, 4, **keys, generation_batch_size=512)
    assert split.steps_per_generation == 8  # TRL: one generation spread over two optimizer steps
    with pytest.raises(ConfigError, match="key 'generation_batch_size' \\(value 512\\): TRL splits one generation"):
        grouprl_config(tmp_path, recipe_text({**keys, "generation_batch_size": 512}), 4)


def test_process_count_comes_from_world_size():
    assert launch_processes({}) == 1 and launch_processes({"WORLD_SIZE": "4"}) == 4
    with pytest.raises(RecipeKeyError, match="environment variable WORLD_SIZE: got 'x'"):
        launch_processes({"WORLD_SIZE": "x"})
    known = {"batch_size", "num_generations", "gradient_accumulation_steps", "normalize_weights"}
    recipe = {"per_device_train_batch_size": 6, "num_generations": 8}
    assert translate_recipe(recipe, known, environ={"WORLD_SIZE": "4"})["batch_size"] == 3  # 6 x 4 / 8
    with pytest.raises(RecipeKeyError, match="x 1 process\\(es\\) \\(WORLD_SIZE\\) x gradient_accumulation_steps 1"):
        translate_recipe(recipe, known, environ={})


def trl_advantages(rewards_per_func: torch.Tensor, cfg: GRPOConfig, generations: int) -> torch.Tensor:
    """TRL 1.16's GRPOTrainer._generate_and_score_completions: weights as given (ones without reward_weights)."""
    n = rewards_per_func.shape[1]
    weights = torch.tensor(cfg.reward_weights) if cfg.reward_weights is not None else torch.ones(n)
    rewards = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
    grouped = rewards.view(-1, generations)
    advantages = rewards - grouped.mean(dim=1).repeat_interleave(generations)
    if cfg.scale_rewards != "none":
        advantages = advantages / (grouped.std(dim=1).repeat_interleave(generations) + 1e-4)
    return advantages


def grouprl_advantages(rewards_per_func: torch.Tensor, cfg, generations: int) -> torch.Tensor:
    """grouprl's path: the task's weights (``with_rewards``), normalised or not, summed, then the GRPO estimator."""
    task = with_rewards(cfg, SimpleNamespace(reward_names=[], reward_kwargs={}))
    weights = normalized_weights(task.reward_weights, cfg.task.normalize_weights)
    names = [f"r{i}" for i in range(len(weights))]
    scores = torch.tensor(
        [weighted_score(dict(zip(names, row.tolist())), dict(zip(names, weights))) for row in rewards_per_func]
    )
    groups = torch.arange(len(scores)) // generations
    return grpo_advantage(scores, groups, scale=cfg.algorithm.scale_rewards)


@pytest.mark.parametrize("weights", [[1.0, 1.0], [1.0, 2.0], None])
def test_reward_weights_are_trls_raw_weights(monkeypatch, tmp_path, weights):
    generations = 4
    keys = {"num_generations": generations, "scale_rewards": False}
    theirs = trl_config(monkeypatch, tmp_path, 1, **keys, reward_weights=weights)
    text = "reward_funcs: [format, tag_count]\nnum_generations: 4\nscale_rewards: false\n"  # open-r1's names
    text += f"reward_weights: {weights}\n" if weights else ""
    ours = grouprl_config(tmp_path, text)
    assert ours.algorithm.scale_rewards == theirs.scale_rewards == "none"  # Dr. GRPO: nothing cancels the weights
    rewards = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]] * 2) * torch.tensor([[1.0, 0.5]])
    torch.testing.assert_close(
        grouprl_advantages(rewards, ours, generations), trl_advantages(rewards, theirs, generations)
    )
    # grouprl's own key, set in the recipe, still wins; rewards named by grouprl's key keep grouprl's shares
    assert grouprl_config(tmp_path, text + "normalize_weights: true\n").task.normalize_weights is True
    own = grouprl_config(tmp_path, "rewards: [format, tag_count]\nreward_weights: [1.0, 2.0]\nscale_rewards: none\n")
    assert own.task.normalize_weights is True


def test_entropy_target_acts_only_with_use_adaptive_entropy(monkeypatch, tmp_path):
    keys = {"entropy_coef": 0.01, "entropy_target": 0.5}
    theirs = trl_config(monkeypatch, tmp_path, 1, **keys)
    ours = grouprl_config(tmp_path, recipe_text({**keys, "reward_funcs": "[format]"}))  # open-r1's rewards
    # TRL: a static bonus at entropy_coef (the target is read only by adaptive control, off by default)
    assert theirs.use_adaptive_entropy is False and ours.objective.entropy_target is None
    assert ours.objective.entropy_coef == theirs.entropy_coef
    adaptive = trl_config(monkeypatch, tmp_path, 1, **keys, use_adaptive_entropy=True)
    ours = grouprl_config(tmp_path, recipe_text({**keys, "reward_funcs": "[format]", "use_adaptive_entropy": "true"}))
    assert ours.objective.entropy_target == adaptive.entropy_target == 0.5
    # a recipe in grouprl's own keys: entropy_target alone turns grouprl's adaptation on
    assert grouprl_config(tmp_path, "entropy_coef: 0.01\nentropy_target: 0.5\n").objective.entropy_target == 0.5


def test_steps_per_generation_at_trls_default_is_accepted(monkeypatch, tmp_path):
    keys = {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 4, "num_generations": 8}
    theirs = trl_config(monkeypatch, tmp_path, 1, **keys)  # TRL fills steps_per_generation = accumulation
    cfg = grouprl_config(tmp_path, recipe_text({**keys, "steps_per_generation": theirs.steps_per_generation}))
    assert cfg.rollout.batch_size * 8 == theirs.generation_batch_size
    with pytest.raises(ConfigError, match="steps_per_generation"):  # one generation over two optimizer steps
        grouprl_config(tmp_path, recipe_text({**keys, "steps_per_generation": 8}))
