"""One optimizer step of grouprl's GRPO trainer against TRL's GRPOTrainer on identical data.

Both trainers start from the same tiny Qwen2 weights and see the same prompts, the same
fixed completions (fed to TRL through ``rollout_func``) and the same rewards. After one
AdamW step (two gradient-accumulation micro-batches) the parameter updates, the clipped
gradients, the pre-clip gradient norm, the advantages and the loss must agree to float
precision, for every loss aggregation and with a KL term against a reference that differs
from the policy (TRL with ``use_bias_correction_kl=False``: grouprl's KL is the plain k3 term).

grouprl is driven through its real code path: ``build_config`` -> ``load_policy`` ->
``Trainer`` -> ``advantages`` -> ``pack_samples`` -> ``update``.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass

import pytest
import torch

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")

from grouprl.algos.loss import policy_loss  # noqa: E402
from grouprl.run_config import build_config  # noqa: E402
from grouprl.models.loading import load_policy, load_tokenizer  # noqa: E402
from grouprl.policy.scoring import completion_logps, pack  # noqa: E402
from grouprl.models.tiny import init_tiny  # noqa: E402
from grouprl.records import Episode, Step, Verdict  # noqa: E402
from grouprl.rewards.scorer import Scores  # noqa: E402
from grouprl.tasks.base import SingleTurnTask  # noqa: E402
from grouprl.train.learner import pack_samples  # noqa: E402
from grouprl.train.trainer import Trainer  # noqa: E402

CORPUS = "0123456789+-= "
K = 4  # group size
T = 6  # max_completion_length == max_new_tokens
GA = 2  # gradient accumulation micro-batches per optimizer step
LR = 1e-3
# AdamW epsilon, set the same in both. Adam's first step is lr * g / (|g| + eps): for an element whose gradient is
# ~1e-9 (some always are), float32 summation-order noise of ~1e-10 in g moves the update by ~lr * 10% with the
# default eps = 1e-8 (measured: 1.6e-5 for dapo, although the gradients agree to 3e-8). eps = 1e-6 bounds that
# amplification to lr * noise / eps ~ 1e-7, so the update comparison tests the algorithm, not float rounding.
ADAM_EPS = 1e-6
QUESTIONS = ["12+7", "30-4", "5+5-3"]
# Completion texts per group (K each), eos appended unless the entry is marked truncated.
# Lengths differ (1..T tokens); in groups 0 and 2 one completion hits T without eos (truncated).
COMPLETIONS = [
    [("19", False), ("1", False), ("190", False), ("123456", True)],
    [("26", False), ("", False), ("2600", False), ("34", False)],
    [("7", False), ("77", False), ("70000", False), ("707070", True)],
]
# Group 0: varied rewards; group 1: one winner; group 2: zero variance (advantage 0).
REWARDS = [
    [1.0, 0.0, 0.5, 0.25],
    [0.0, 0.0, 1.0, 0.0],
    [0.5, 0.5, 0.5, 0.5],
]
CASES = {
    # name: (loss_type, beta)
    "grpo": ("grpo", 0.0),
    "dapo": ("dapo", 0.0),
    "dr_grpo": ("dr_grpo", 0.0),
    "dapo_beta": ("dapo", 0.05),
    "grpo_beta": ("grpo", 0.05),
}


def _messages(question: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": question}]


@dataclass
class Fixture:
    tokenizer: object
    prompt_texts: list[str]
    prompt_ids: list[list[int]]
    completion_ids: list[list[list[int]]]  # [group][k] -> ids


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    torch.manual_seed(0)
    return str(init_tiny(CORPUS, tmp_path_factory.mktemp("tiny"), hidden=64, layers=2, heads=4, seed=0))


@pytest.fixture(scope="module")
def data(model_dir) -> Fixture:
    tok = load_tokenizer(model_dir)
    texts = [tok.apply_chat_template(_messages(q), add_generation_prompt=True, tokenize=False) for q in QUESTIONS]
    prompt_ids = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    comps = []
    for group in COMPLETIONS:
        ids = []
        for text, truncated in group:
            c = tok(text, add_special_tokens=False)["input_ids"] if text else []
            if not truncated:
                c = c + [tok.eos_token_id]
            assert 1 <= len(c) <= T
            ids.append(c)
        comps.append(ids)
    return Fixture(tok, texts, prompt_ids, comps)


def _perturb(model: torch.nn.Module, seed: int = 7, scale: float = 0.02) -> None:
    """Move the policy away from its reference (so the KL term has a gradient)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.add_(scale * torch.randn(p.shape, generator=gen, dtype=p.dtype))


class _GradCapture:
    """Records every parameter's gradient when an optimizer steps (after clipping)."""

    def __init__(self, model: torch.nn.Module):
        self.names = {id(p): n for n, p in model.named_parameters()}
        self.grads: dict[str, torch.Tensor] = {}
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        self.handle = register_optimizer_step_pre_hook(self._hook)

    def _hook(self, optimizer, args, kwargs):
        if self.grads:
            return  # a wrapped optimizer (accelerate) fires the hook twice
        for group in optimizer.param_groups:
            for p in group["params"]:
                if id(p) in self.names and p.grad is not None:
                    self.grads[self.names[id(p)]] = p.grad.detach().clone()

    def close(self):
        self.handle.remove()


def _snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


# --- TRL -------------------------------------------------------------------------------------
def run_trl(
    model_dir: str, fx: Fixture, loss_type: str, beta: float, out_dir: str, ga: int = GA, trl_args: dict | None = None
) -> dict:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig
    from trl import GRPOTrainer as TRLGRPOTrainer

    by_question = {q: g for g, q in enumerate(QUESTIONS)}

    def rollout_func(prompts, trainer):
        # Prompts arrive repeated K times (RepeatSampler); hand out the k-th fixed completion of each.
        seen: Counter = Counter()
        prompt_ids, completion_ids, rewards = [], [], []
        for messages in prompts:
            g = by_question[messages[-1]["content"]]
            k = seen[g]
            seen[g] += 1
            prompt_ids.append(list(fx.prompt_ids[g]))
            completion_ids.append(list(fx.completion_ids[g][k]))
            rewards.append(REWARDS[g][k])
        assert all(n == K for n in seen.values())
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None, "fixed_reward": rewards}

    def fixed_reward(prompts, completions, fixed_reward, **_):
        return list(fixed_reward)

    class Recording(TRLGRPOTrainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            self.recorded.append(
                {
                    "loss": loss.detach().clone(),
                    "advantages": inputs["advantages"].clone(),
                    "num_items_in_batch": inputs["num_items_in_batch"].clone(),
                    "completion_mask": inputs["completion_mask"].clone(),
                }
            )
            return loss

    args = GRPOConfig(
        output_dir=out_dir,
        loss_type=loss_type,
        beta=beta,
        # TRL's default (True) multiplies the k3 KL by the importance ratio, which adds kl * grad(log pi) to the
        # gradient even on-policy; grouprl implements the plain k3 term (TRL's behaviour before that option).
        use_bias_correction_kl=False,
        num_generations=K,
        per_device_train_batch_size=len(QUESTIONS) * K // ga,
        gradient_accumulation_steps=ga,
        max_completion_length=T,
        temperature=1.0,
        learning_rate=LR,
        adam_epsilon=ADAM_EPS,  # betas, wd: defaults
        max_steps=1,
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        report_to="none",
        scale_rewards="group",
        shuffle_dataset=False,
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        use_vllm=False,
        seed=0,
        dataloader_num_workers=0,
        **(trl_args or {}),
    )
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if beta > 0:
        _perturb(model)
    tok = load_tokenizer(model_dir)  # AutoTokenizer would pick Qwen2Tokenizer for the char tokenizer
    dataset = Dataset.from_list([{"prompt": _messages(q)} for q in QUESTIONS])
    trainer = Recording(
        model=model,
        reward_funcs=fixed_reward,
        args=args,
        train_dataset=dataset,
        processing_class=tok,
        rollout_func=rollout_func,
    )
    trainer.recorded = []
    before = _snapshot(trainer.model)
    capture = _GradCapture(trainer.model)
    try:
        trainer.train()
    finally:
        capture.close()
    after = _snapshot(trainer.model)
    log = next(h for h in trainer.state.log_history if "grad_norm" in h)
    rec = trainer.recorded
    assert len(rec) == ga
    return {
        "before": before,
        "delta": {n: after[n] - before[n] for n in before},
        "grads": capture.grads,
        "grad_norm": float(log["grad_norm"]),
        "loss": float(sum(r["loss"] for r in rec)),
        "advantages": torch.cat([r["advantages"] for r in rec]),
        "num_items_in_batch": float(rec[0]["num_items_in_batch"]),
        "completion_tokens": float(sum(r["completion_mask"].sum() for r in rec)),
    }


# --- grouprl ---------------------------------------------------------------------------------
def grouprl_config(out_dir: str, loss_type: str, beta: float, ga: int = GA, extra: dict | None = None):
    return build_config(
        cli={
            "output_dir": out_dir,
            "num_generations": K,
            "batch_size": len(QUESTIONS),
            "max_new_tokens": T,
            "temperature": 1.0,
            "loss_type": loss_type,
            "beta": beta,
            "advantage": "grpo",
            "scale_rewards": "group",
            "learning_rate": LR,
            "weight_decay": 0.0,
            "adam_beta2": 0.999,  # TRL/HF TrainingArguments defaults
            "gradient_accumulation_steps": ga,
            "max_grad_norm": 1.0,
            "max_steps": 1,
            "lr_scheduler_type": "constant",
            "torch_dtype": "float32",
            "device": "cpu",
            "num_iterations": 1,
            "epsilon_low": 0.2,
            "epsilon_high": 0.2,
            **(extra or {}),
        },
        environ={},
    )


def build_episodes(fx: Fixture) -> list[Episode]:
    tok = fx.tokenizer
    episodes = []
    for g, q in enumerate(QUESTIONS):
        row = {"question": q, "ground_truth": "0", "gold_completion": "0"}
        for k in range(K):
            ids = fx.completion_ids[g][k]
            step = Step(
                prompt_text=fx.prompt_texts[g],
                prompt_ids=list(fx.prompt_ids[g]),
                action_text=tok.decode(ids, skip_special_tokens=True),
                action_ids=list(ids),
                truncated=tok.eos_token_id not in ids,
                anchor_state=g,
            )
            episodes.append(Episode(group_id=g, index_in_group=k, row=row, steps=[step]))
    return episodes


def verdicts_of(fx: Fixture) -> Scores:
    """The fixture's rewards as the score phase's record (one step per episode: r_0 = R)."""
    return Scores.of(
        [Verdict(score=REWARDS[g][k], step_rewards=[REWARDS[g][k]]) for g in range(len(QUESTIONS)) for k in range(K)]
    )


def run_grouprl(
    model_dir: str, fx: Fixture, loss_type: str, beta: float, out_dir: str, ga: int = GA, extra: dict | None = None
) -> dict:
    cfg = grouprl_config(out_dir, loss_type, beta, ga, extra)
    policy = load_policy(cfg.model, model_dir, torch.device("cpu"), need_reference=beta > 0)
    if beta > 0:
        _perturb(policy.model)
    rows = [{"question": q, "ground_truth": "0", "gold_completion": "0"} for q in QUESTIONS]
    task = SingleTurnTask("fixed", rows, [], None, ["arithmetic_digits"], "arithmetic_exact", [1.0])
    trainer = Trainer(cfg, policy, task)
    for group in trainer.learner.optimizer.param_groups:  # grouprl has no adam_epsilon setting (torch default 1e-8)
        group["eps"] = ADAM_EPS
    episodes = build_episodes(fx)
    advantages = trainer.advantages(episodes, verdicts_of(fx))
    samples = pack_samples(
        episodes, advantages.advantage, policy.tokenizer.pad_token_id, cfg.algorithm.mask_truncated_completions
    )

    # The full-batch loss from the pure functions, before the update (independent of accumulation).
    with torch.no_grad():
        logps, _ = completion_logps(policy.model, samples.batch, cfg.rollout.temperature)
        ref = None
        if beta > 0:
            ref, _ = completion_logps(policy.reference_model(), samples.batch, cfg.rollout.temperature)
        full_loss, _ = policy_loss(
            logps,
            logps,
            samples.advantages,
            samples.batch.completion_mask,
            loss_type=loss_type,
            beta=beta,
            ref_logps=ref,
            max_completion_length=T,
        )

    before = _snapshot(policy.model)
    capture = _GradCapture(policy.model)
    try:
        metrics = trainer.update(samples)
    finally:
        capture.close()
    after = _snapshot(policy.model)
    return {
        "before": before,
        "delta": {n: after[n] - before[n] for n in before},
        "grads": capture.grads,
        "grad_norm": metrics["grad_norm"],
        "reported_loss": metrics["loss"],
        "full_loss": float(full_loss),
        "advantages": samples.advantages,
        "completion_tokens": float(samples.batch.completion_mask.sum()),
    }


@pytest.fixture(scope="module")
def results(model_dir, data, tmp_path_factory):
    torch.set_num_threads(min(2, torch.get_num_threads()))
    cache: dict[str, tuple[dict, dict]] = {}

    def get(case: str):
        if case not in cache:
            loss_type, beta = CASES[case]
            torch.manual_seed(0)
            ours = run_grouprl(model_dir, data, loss_type, beta, str(tmp_path_factory.mktemp(f"g_{case}")))
            torch.manual_seed(0)
            theirs = run_trl(model_dir, data, loss_type, beta, str(tmp_path_factory.mktemp(f"t_{case}")))
            cache[case] = (ours, theirs)
        return cache[case]

    return get


def _max_abs(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[n] - b[n]).abs().max()) for n in a)


@pytest.mark.parametrize("case", list(CASES))
def test_one_step_matches_trl(case, results):
    ours, theirs = results(case)
    # Same starting point.
    assert _max_abs(ours["before"], theirs["before"]) == 0.0

    # Advantages: TRL shuffles the generation batch before splitting it into micro-batches, so compare as multisets.
    a, b = torch.sort(ours["advantages"]).values, torch.sort(theirs["advantages"]).values
    assert torch.allclose(a, b, atol=1e-6), (a, b)

    # dapo normaliser: TRL's num_items_in_batch is the loss-mask token count of the whole generation batch
    # (gathered over processes; one process here) == grouprl's total_tokens.
    assert theirs["num_items_in_batch"] == theirs["completion_tokens"] == ours["completion_tokens"]

    # Gradients (after clipping) and the pre-clip norm: these see the loss scale, the Adam update barely does.
    gmax = max(float(g.abs().max()) for g in theirs["grads"].values())
    grad_diff = _max_abs(ours["grads"], theirs["grads"])
    assert grad_diff <= 1e-4 * gmax + 1e-7, f"{case}: grad max abs diff {grad_diff:.3e} (max |g| {gmax:.3e})"
    assert ours["grad_norm"] == pytest.approx(theirs["grad_norm"], rel=1e-4)

    # Parameter updates after one AdamW step.
    upd_diff = _max_abs(ours["delta"], theirs["delta"])
    moved = max(float(d.abs().max()) for d in theirs["delta"].values())
    assert moved > 0.5 * LR, f"{case}: TRL did not update the parameters ({moved:.2e})"
    assert upd_diff < 1e-5, f"{case}: parameter update max abs diff {upd_diff:.3e}"

    # Loss: TRL's summed micro-batch losses == the full-batch loss of grouprl.algos.loss.policy_loss.
    assert ours["full_loss"] == pytest.approx(theirs["loss"], rel=1e-4, abs=1e-6)


@pytest.mark.parametrize(
    "case",
    [
        "grpo",
        "dr_grpo",
        "dapo",
    ],
)
def test_reported_loss_matches_trl(case, results):
    ours, theirs = results(case)
    assert ours["reported_loss"] == pytest.approx(theirs["loss"], rel=1e-4, abs=1e-6)


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo"])
def test_gradient_accumulation_invariance(loss_type, model_dir, data, tmp_path):
    """TRL only allows equal micro-batches; grouprl splits any batch into ``gradient_accumulation_steps`` parts.
    The gradient and the reported loss must not depend on the split (12 samples in 5 uneven micro-batches)."""
    one = run_grouprl(model_dir, data, loss_type, 0.0, str(tmp_path / "ga1"), ga=1)
    five = run_grouprl(model_dir, data, loss_type, 0.0, str(tmp_path / "ga5"), ga=5)
    gmax = max(float(g.abs().max()) for g in one["grads"].values())
    assert _max_abs(one["grads"], five["grads"]) <= 1e-4 * gmax + 1e-7
    assert five["grad_norm"] == pytest.approx(one["grad_norm"], rel=1e-4)
    assert five["reported_loss"] == pytest.approx(one["full_loss"], rel=1e-4, abs=1e-6)


def test_rope_positions_from_mask_match_arange(model_dir, data):
    """grouprl scores with positions from the attention mask, TRL with arange positions over the left-padded row.
    RoPE depends only on relative positions, so the completion log-probs must agree to float precision."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    _perturb(model, seed=3, scale=0.05)  # make logits non-trivial
    prompts = [data.prompt_ids[g] for g in range(len(QUESTIONS)) for _ in range(K)]
    comps = [c for group in data.completion_ids for c in group]
    batch = pack(prompts, comps, data.tokenizer.pad_token_id)
    assert (batch.prompt_mask == 0).any(), "prompts of different lengths are needed to exercise left padding"
    with torch.no_grad():
        ours, _ = completion_logps(model, batch)
        ids = torch.cat([batch.prompt_ids, batch.completion_ids], 1)
        att = torch.cat([batch.prompt_mask, batch.completion_mask], 1)
        Tb = batch.completion_ids.size(1)
        logits = model(input_ids=ids, attention_mask=att, use_cache=False).logits[:, -Tb - 1 : -1].float()
        arange = torch.log_softmax(logits, -1).gather(-1, batch.completion_ids.unsqueeze(-1)).squeeze(-1)
    m = batch.completion_mask.bool()
    assert float((ours - arange)[m].abs().max()) < 1e-5


# Objectives beyond PPO-clip through the whole learner (the loss registry, the entropy bonus's scorer path):
# name: (TRL loss_type, grouprl aggregation, grouprl keys, TRL arguments, micro-batches). The entropy bonus runs
# on one micro-batch: TRL takes each micro-batch's own mean entropy, grouprl the whole batch's (equal on one).
OBJECTIVES = {
    "gspo": (
        "grpo",
        "grpo",
        {"loss": "gspo", "epsilon_low": 3e-4, "epsilon_high": 4e-4},
        {"importance_sampling_level": "sequence", "epsilon": 3e-4, "epsilon_high": 4e-4},
        GA,
    ),
    "cispo": ("cispo", "dapo", {"loss": "cispo", "loss_options": {"epsilon_max": 5.0}}, {"epsilon_high": 5.0}, GA),
    "sapo": ("sapo", "grpo", {"loss": "sapo"}, {}, GA),
    "entropy_bonus": ("grpo", "grpo", {"entropy_coef": 0.05}, {"entropy_coef": 0.05}, 1),
}


@pytest.mark.parametrize("case", list(OBJECTIVES))
def test_objective_one_step_matches_trl(case, model_dir, data, tmp_path):
    trl_loss, aggregation, ours_keys, trl_args, ga = OBJECTIVES[case]
    torch.set_num_threads(min(2, torch.get_num_threads()))
    torch.manual_seed(0)
    ours = run_grouprl(model_dir, data, aggregation, 0.0, str(tmp_path / "g"), ga=ga, extra=ours_keys)
    torch.manual_seed(0)
    theirs = run_trl(model_dir, data, trl_loss, 0.0, str(tmp_path / "t"), ga=ga, trl_args=trl_args)
    gmax = max(float(g.abs().max()) for g in theirs["grads"].values())
    assert _max_abs(ours["grads"], theirs["grads"]) <= 1e-4 * gmax + 1e-7
    assert ours["grad_norm"] == pytest.approx(theirs["grad_norm"], rel=1e-4)
    assert _max_abs(ours["delta"], theirs["delta"]) < 1e-5
    assert ours["reported_loss"] == pytest.approx(theirs["loss"], rel=1e-4, abs=1e-6)
    if case == "entropy_bonus":  # the bonus has a gradient of its own (not a detached metric)
        plain = run_grouprl(model_dir, data, aggregation, 0.0, str(tmp_path / "plain"), ga=ga)
        assert _max_abs(plain["grads"], ours["grads"]) > 1e-3 * gmax
