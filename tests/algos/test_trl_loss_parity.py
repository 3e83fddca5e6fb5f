"""Every loss grouprl and TRL 1.16 both have, on the same random inputs: TRL's own loss code
(``GRPOTrainer._compute_loss``) against ``grouprl.algos.loss.policy_objective``, value and gradient.

TRL's loss method reads its log-probs and entropies from the model; here the trainer is a real
``GRPOTrainer`` (tiny Qwen2, built once) whose ``_get_per_token_logps_and_entropies`` returns the
test's random tensors, so the rest of the method (ratios, clipping, KL, importance weights,
aggregation, entropy bonus) is TRL's code unchanged. Each case is one micro-batch
(``current_gradient_accumulation_steps = 1``), where TRL's and grouprl's normalisers agree.

Where TRL ties a loss to one aggregation (cispo -> dapo's, sapo -> grpo's), that pairing is
compared; grouprl also lets the other aggregations be chosen (tested in test_losses.py).
"""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")

from grouprl.algos.entropy import EntropyBonus, entropy_bonus  # noqa: E402
from grouprl.algos.loss import policy_objective  # noqa: E402
from grouprl.algos.policy_losses import get_loss  # noqa: E402
from grouprl.models.loading import load_tokenizer  # noqa: E402
from grouprl.models.tiny import init_tiny  # noqa: E402

B, T = 6, 7

# name: (grouprl loss, its options, aggregation, TRL settings)
CASES = {
    "ppo_clip-grpo": (
        "ppo_clip",
        {"epsilon_low": 0.2, "epsilon_high": 0.28},
        "grpo",
        {"loss_type": "grpo", "epsilon_low": 0.2, "epsilon_high": 0.28},
    ),
    "ppo_clip-bnpo": (
        "ppo_clip",
        {"epsilon_low": 0.2, "epsilon_high": 0.28},
        "bnpo",
        {"loss_type": "bnpo", "epsilon_low": 0.2, "epsilon_high": 0.28},
    ),
    "ppo_clip-dapo": (
        "ppo_clip",
        {"epsilon_low": 0.2, "epsilon_high": 0.28},
        "dapo",
        {"loss_type": "dapo", "epsilon_low": 0.2, "epsilon_high": 0.28},
    ),
    "ppo_clip-dr_grpo": (
        "ppo_clip",
        {"epsilon_low": 0.1, "epsilon_high": 0.3},
        "dr_grpo",
        {"loss_type": "dr_grpo", "epsilon_low": 0.1, "epsilon_high": 0.3},
    ),
    "two_sided-grpo": (
        "two_sided_clip",
        {"delta": 1.25},
        "grpo",
        {"loss_type": "grpo", "epsilon_low": 0.2, "epsilon_high": 0.2, "delta": 1.25},
    ),
    "two_sided-dapo": (
        "two_sided_clip",
        {"delta": 1.25},
        "dapo",
        {"loss_type": "dapo", "epsilon_low": 0.2, "epsilon_high": 0.2, "delta": 1.25},
    ),
    "gspo-grpo": (
        "gspo",
        {"epsilon_low": 0.05, "epsilon_high": 0.08},
        "grpo",
        {"loss_type": "grpo", "epsilon_low": 0.05, "epsilon_high": 0.08, "level": "sequence"},
    ),
    "gspo-dapo": (
        "gspo",
        {"epsilon_low": 0.05, "epsilon_high": 0.08},
        "dapo",
        {"loss_type": "dapo", "epsilon_low": 0.05, "epsilon_high": 0.08, "level": "sequence"},
    ),
    "cispo-dapo": ("cispo", {"epsilon_max": 1.3}, "dapo", {"loss_type": "cispo", "epsilon_high": 1.3}),
    "sapo-grpo": ("sapo", {"temperature_pos": 1.0, "temperature_neg": 1.05}, "grpo", {"loss_type": "sapo"}),
}


@pytest.fixture(scope="module")
def trl_trainer(tmp_path_factory):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(min(2, torch.get_num_threads()))
    model_dir = str(init_tiny("0123456789+ ", tmp_path_factory.mktemp("tiny"), hidden=16, layers=1, heads=2, seed=0))
    args = GRPOConfig(
        output_dir=str(tmp_path_factory.mktemp("trl")),
        num_generations=2,
        per_device_train_batch_size=2,
        max_completion_length=T,
        use_cpu=True,
        report_to="none",
        use_bias_correction_kl=False,
        save_strategy="no",
        disable_tqdm=True,
    )
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=lambda completions, **_: [0.0] * len(completions),
        args=args,
        train_dataset=Dataset.from_list([{"prompt": "1+1"}]),
        processing_class=load_tokenizer(model_dir),
    )
    trainer.current_gradient_accumulation_steps = 1
    return trainer


def random_inputs(seed: int):
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (B,), generator=gen)
    mask = (torch.arange(T) < lengths.unsqueeze(-1)).long()
    old = -torch.rand(B, T, generator=gen) * 3
    logps = (old + 0.4 * torch.randn(B, T, generator=gen)).clamp(max=-1e-3)  # ratios well outside the clip range
    ref = old + 0.3 * torch.randn(B, T, generator=gen)
    adv = torch.randn(B, generator=gen)
    entropy = torch.rand(B, T, generator=gen) * 2
    sampler = old + 0.2 * torch.randn(B, T, generator=gen)
    return logps, old, ref, adv, mask, entropy, sampler


def trl_loss(
    trainer,
    settings: dict,
    logps,
    old,
    ref,
    adv,
    mask,
    entropy,
    beta: float = 0.0,
    is_ratio: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
):
    """TRL's _compute_loss on these tensors; returns the loss (its graph reaches ``logps`` and ``entropy``)."""
    args = trainer.args
    trainer.loss_type = settings["loss_type"]
    trainer.epsilon_low = settings.get("epsilon_low", 0.2)
    trainer.epsilon_high = settings.get("epsilon_high", 0.2)
    args.delta = settings.get("delta")
    trainer.importance_sampling_level = settings.get("level", "token")
    trainer.beta = beta
    trainer.use_vllm = trainer.vllm_importance_sampling_correction = is_ratio is not None
    trainer.entropy_coef = entropy_coef
    trainer._entropy_bonus_enabled = entropy_coef != 0.0 or trainer.use_adaptive_entropy
    trainer._get_per_token_logps_and_entropies = lambda *a, **k: (logps, entropy, None)
    inputs = {
        "prompt_ids": torch.ones(B, 1, dtype=torch.long),
        "prompt_mask": torch.ones(B, 1, dtype=torch.long),
        "completion_ids": torch.ones(B, T, dtype=torch.long),
        "completion_mask": mask,
        "advantages": adv,
        "old_per_token_logps": old,
        "ref_per_token_logps": ref,
        "num_items_in_batch": mask.sum(),
    }
    if is_ratio is not None:
        inputs["importance_sampling_ratio"] = is_ratio
    return trainer._compute_loss(trainer.model, inputs)


def grouprl_loss(name, options, aggregation, logps, old, ref, adv, mask, beta=0.0, weights=None):
    return policy_objective(
        get_loss(name),
        logps,
        old,
        adv,
        mask,
        options,
        aggregation,
        beta=beta,
        ref_logps=ref,
        max_completion_length=T,
        num_items_in_batch=float(mask.sum()),
        token_weights=weights,
    )[0]


def value_and_grad(fn, logps):
    x = logps.clone().requires_grad_(True)
    value = fn(x)
    (grad,) = torch.autograd.grad(value, x)
    return float(value), grad


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("seed", [0, 1])
def test_loss_matches_trl(trl_trainer, case, seed):
    name, options, aggregation, settings = CASES[case]
    logps, old, ref, adv, mask, entropy, _ = random_inputs(seed)
    ours, g_ours = value_and_grad(lambda x: grouprl_loss(name, options, aggregation, x, old, ref, adv, mask), logps)
    theirs, g_theirs = value_and_grad(lambda x: trl_loss(trl_trainer, settings, x, old, ref, adv, mask, entropy), logps)
    assert ours == pytest.approx(theirs, rel=1e-5, abs=1e-7)
    torch.testing.assert_close(g_ours, g_theirs, rtol=1e-5, atol=1e-8)
    assert g_ours.abs().sum() > 0  # the inputs reach the loss


@pytest.mark.parametrize("case", ["ppo_clip-grpo", "ppo_clip-dapo", "gspo-dapo", "cispo-dapo"])
def test_kl_and_importance_weights_match_trl(trl_trainer, case):
    """beta * k3 KL on every token (not weighted), the vLLM importance weights on the policy term."""
    name, options, aggregation, settings = CASES[case]
    logps, old, ref, adv, mask, entropy, _ = random_inputs(7)
    w = torch.rand(B, T, generator=torch.Generator().manual_seed(3)) * 2
    ours, g_ours = value_and_grad(
        lambda x: grouprl_loss(name, options, aggregation, x, old, ref, adv, mask, beta=0.04, weights=w), logps
    )
    theirs, g_theirs = value_and_grad(
        lambda x: trl_loss(trl_trainer, settings, x, old, ref, adv, mask, entropy, beta=0.04, is_ratio=w), logps
    )
    assert ours == pytest.approx(theirs, rel=1e-5, abs=1e-7)
    torch.testing.assert_close(g_ours, g_theirs, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("case", ["ppo_clip-grpo", "ppo_clip-dr_grpo", "sapo-grpo"])
def test_static_entropy_bonus_matches_trl(trl_trainer, case):
    """L - c * mean token entropy, whatever the aggregation: value and gradient w.r.t. the entropies."""
    name, options, aggregation, settings = CASES[case]
    logps, old, ref, adv, mask, entropy, _ = random_inputs(11)
    h = entropy.clone().requires_grad_(True)
    ours = grouprl_loss(name, options, aggregation, logps, old, ref, adv, mask) + entropy_bonus(h, mask, 0.05)
    (g_ours,) = torch.autograd.grad(ours, h)
    h2 = entropy.clone().requires_grad_(True)
    theirs = trl_loss(trl_trainer, settings, logps, old, ref, adv, mask, h2, entropy_coef=0.05)
    (g_theirs,) = torch.autograd.grad(theirs, h2)
    assert float(ours) == pytest.approx(float(theirs), rel=1e-5, abs=1e-7)
    torch.testing.assert_close(g_ours, g_theirs)
    assert float(g_ours[mask.bool()].max()) < 0  # more entropy lowers the loss


def test_adaptive_entropy_coefficient_follows_trl(trl_trainer):
    """Five optimizer steps with entropies around the target: the same coefficient applied at each."""
    logps, old, ref, adv, mask, entropy, _ = random_inputs(5)
    args = trl_trainer.args
    args.entropy_target, args.entropy_coef_delta, args.entropy_coef_min, args.entropy_coef_max = 0.9, 0.02, 0.0, 0.05
    trl_trainer.use_adaptive_entropy, trl_trainer._last_world_entropy = True, float("inf")
    trl_trainer._entropy_window_stats = None
    trl_trainer.model.train()  # TRL adapts only in training mode, at an optimizer-step boundary
    bonus = EntropyBonus(coef=0.01, target=0.9, delta=0.02, coef_min=0.0, coef_max=0.05)
    trl_coef = 0.01
    try:
        for level in [0.5, 1.4, 0.3, 0.6, 2.0]:
            h = entropy * 0 + level
            base = float(grouprl_loss("ppo_clip", {}, "grpo", logps, old, ref, adv, mask))
            ours = base + float(entropy_bonus(h, mask, bonus.applied_coef()))
            theirs = trl_loss(trl_trainer, {"loss_type": "grpo"}, logps, old, ref, adv, mask, h, entropy_coef=trl_coef)
            assert ours == pytest.approx(float(theirs), rel=1e-5, abs=1e-7), level
            bonus.update(level)
            trl_coef = trl_trainer.entropy_coef
            assert bonus.coef == pytest.approx(trl_coef)
    finally:
        trl_trainer.use_adaptive_entropy = False
        trl_trainer.model.eval()


# --- recipes in TRL's keys: grouprl's config from the recipe, TRL's trainer from GRPOConfig(**the same keys) ---

RECIPES = {
    "cispo": {"loss_type": "cispo"},  # TRL caps the weight at epsilon_high = epsilon = 0.2
    "cispo-epsilon": {"loss_type": "cispo", "epsilon": 1.5},
    "cispo-epsilon_high": {"loss_type": "cispo", "epsilon": 0.1, "epsilon_high": 1.3},
    "sequence-grpo": {"loss_type": "grpo", "importance_sampling_level": "sequence"},  # clip 0.2 / 0.2
    "sequence-dapo": {"importance_sampling_level": "sequence"},  # TRL's default loss_type is dapo, as grouprl's
    "sequence-epsilon": {"loss_type": "grpo", "importance_sampling_level": "sequence", "epsilon": 0.05},
    "kl-unweighted": {"loss_type": "dapo", "beta": 0.04, "use_bias_correction_kl": False},
    "vllm": {"loss_type": "dapo", "use_vllm": True},  # sequence_mask above 3.0
    "vllm-token": {
        "use_vllm": True,
        "vllm_importance_sampling_mode": "token_truncate",
        "vllm_importance_sampling_clip_max": 1.2,
    },
    "all": {
        "loss_type": "cispo",
        "epsilon": 1.1,
        "use_vllm": True,
        "beta": 0.04,
        "use_bias_correction_kl": False,
        "multi_objective_aggregation": "normalize_then_sum",
        "vllm_importance_sampling_mode": "token_mask",
        "vllm_importance_sampling_clip_max": 1.3,
    },
}


def recipe_config(tmp_path, keys: dict):
    import yaml

    from grouprl.run_config import build_config

    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(keys))
    return build_config(path, environ={})


def trl_args(base, config_class, keys: dict):
    """The trainer's args with every GRPOConfig field at TRL's own default, then the recipe's keys (a new
    GRPOConfig would reset accelerate's state under the built trainer)."""
    import copy
    import dataclasses

    from transformers import TrainingArguments

    args = copy.copy(base)
    inherited = {f.name for f in dataclasses.fields(TrainingArguments)}
    for f in dataclasses.fields(config_class):
        if f.name not in inherited and f.default is not dataclasses.MISSING:
            setattr(args, f.name, f.default)
    for key, value in keys.items():
        setattr(args, key, value)
    return args


def adopt(trainer, args) -> None:
    """The trainer, as if built with ``args`` (TRL's own GRPOConfig defaults); vLLM cannot start on CPU, so
    its switches are copied over rather than passed to the constructor."""
    trainer.args = args
    trainer.loss_type, trainer.beta, trainer.importance_sampling_level = (
        args.loss_type,
        args.beta,
        args.importance_sampling_level,
    )
    trainer.epsilon_low = args.epsilon
    trainer.epsilon_high = args.epsilon_high if args.epsilon_high is not None else args.epsilon
    trainer.use_vllm, trainer.vllm_importance_sampling_correction = (
        args.use_vllm,
        args.vllm_importance_sampling_correction,
    )
    trainer._entropy_bonus_enabled = False
    for logged in trainer._metrics.values():
        logged.clear()


def trl_sampling_ratio(args, old, sampler, mask):
    """TRL's vLLM importance ratio as its GRPOConfig documents the four modes: exp(old - sampler) per token,
    or of the sum over the sequence; truncated at, or zeroed above, vllm_importance_sampling_clip_max."""
    diff = (old - sampler) * mask
    if args.vllm_importance_sampling_mode.startswith("sequence"):
        diff = diff.sum(-1, keepdim=True)
    ratio, cap = diff.exp(), args.vllm_importance_sampling_clip_max
    return (
        ratio.clamp(max=cap)
        if args.vllm_importance_sampling_mode.endswith("truncate")
        else ratio.masked_fill(ratio > cap, 0.0)
    )


@pytest.mark.parametrize("name", list(RECIPES))
def test_trl_recipe_gives_trls_loss_gradient_and_clip_ratios(trl_trainer, tmp_path, name):
    from trl import GRPOConfig

    from grouprl.algos.importance import sampling_correction
    from grouprl.train.objective import resolve_loss

    keys = RECIPES[name]
    cfg = recipe_config(tmp_path, keys)
    args = trl_args(trl_trainer.args, GRPOConfig, keys)
    adopt(trl_trainer, args)
    logps, old, ref, adv, mask, entropy, sampler = random_inputs(13)
    is_ratio = trl_sampling_ratio(args, old, sampler, mask) if args.use_vllm else None
    loss, options = resolve_loss(cfg)
    correct = cfg.rollout.generation_backend != "hf" and cfg.speed.sampling_correction != "none"
    weights = (
        sampling_correction(cfg.speed.sampling_correction)(old, sampler, mask, cap=cfg.speed.sampling_correction_cap)[0]
        if correct
        else None
    )
    stats = {}

    def ours(x):
        value, s = policy_objective(
            loss,
            x,
            old,
            adv,
            mask,
            options,
            cfg.algorithm.loss_type,
            beta=cfg.algorithm.beta,
            ref_logps=ref,
            kl_estimator=cfg.objective.kl_estimator,
            max_completion_length=T,
            num_items_in_batch=float(mask.sum()),
            token_weights=weights,
        )
        stats.update(s)
        return value

    mine, g_mine = value_and_grad(ours, logps)
    x = logps.clone().requires_grad_(True)
    trl_trainer._get_per_token_logps_and_entropies = lambda *a, **k: (x, entropy, None)
    inputs = {
        "prompt_ids": torch.ones(B, 1, dtype=torch.long),
        "prompt_mask": torch.ones(B, 1, dtype=torch.long),
        "completion_ids": torch.ones(B, T, dtype=torch.long),
        "completion_mask": mask,
        "advantages": adv,
        "old_per_token_logps": old,
        "ref_per_token_logps": ref,
        "num_items_in_batch": mask.sum(),
        "importance_sampling_ratio": is_ratio,
    }
    theirs_t = trl_trainer._compute_loss(trl_trainer.model, inputs)
    (g_theirs,) = torch.autograd.grad(theirs_t, x)
    assert mine == pytest.approx(float(theirs_t), rel=1e-5, abs=1e-7)
    torch.testing.assert_close(g_mine, g_theirs, rtol=1e-5, atol=1e-8)
    assert g_mine.abs().sum() > 0
    logged = {k: v[-1] for mode in trl_trainer._metrics.values() for k, v in mode.items() if "clip_ratio" in k}
    for key in ("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean", "cispo_clip_ratio"):
        assert (key in stats) == (key in logged), key
        if key in logged:
            assert float(stats[key]) == pytest.approx(logged[key], abs=1e-6), key
    if keys.get("multi_objective_aggregation") == "normalize_then_sum":
        assert cfg.algorithm.advantage == "gdpo"


def test_gdpo_is_trls_normalize_then_sum():
    """multi_objective_aggregation: normalize_then_sum -> grouprl's gdpo: TRL's advantages (with TRL's nanstd)."""
    from trl.trainer.utils import nanstd

    from grouprl.algos.advantages import RewardParts, get_estimator, run_estimator

    gen = torch.Generator().manual_seed(2)
    per_func = torch.stack([torch.randint(0, 2, (12,), generator=gen).float(), torch.rand(12, generator=gen) * 30], 1)
    w = torch.tensor([1.0, 0.3])
    grouped = per_func.view(-1, 4, 2)
    k = (grouped - grouped.nanmean(1, keepdim=True)) / (nanstd(grouped, dim=1, keepdim=True) + 1e-4)
    summed = (k.view(-1, 2) * w).nansum(1)
    trl_adv = (summed - summed.nanmean()) / (nanstd(summed) + 1e-4)
    parts = RewardParts({"a": per_func[:, 0], "b": per_func[:, 1]}, {"a": 1.0, "b": 0.3})
    ours = run_estimator(get_estimator("gdpo"), per_func @ w, torch.arange(12) // 4, None, parts)
    torch.testing.assert_close(ours, trl_adv, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "keys, named",
    [
        ({"loss_type": "cispo", "importance_sampling_level": "sequence"}, "importance_sampling_level"),
        ({"loss_type": "dapo", "beta": 0.04, "use_bias_correction_kl": True}, "use_bias_correction_kl"),
        ({"max_completion_length": 7, "beta": 0.04}, "use_bias_correction_kl"),  # TRL's default: true
        ({"use_vllm": True, "vllm_importance_sampling_clip_min": 0.5}, "vllm_importance_sampling_clip_min"),
        ({"multi_objective_aggregation": "normalize_then_sum", "advantage": "rloo"}, "multi_objective_aggregation"),
        ({"loss_type": "luspo"}, "loss_type"),
    ],
)
def test_what_grouprl_cannot_do_as_trl_is_refused_in_one_line(tmp_path, keys, named):
    from grouprl.config import ConfigError

    with pytest.raises(ConfigError) as info:
        recipe_config(tmp_path, keys)
    assert f"key '{named}'" in str(info.value) and "\n" not in str(info.value)
