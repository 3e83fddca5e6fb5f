"""Asynchronous rollouts end to end on the tiny model: every trained token within the staleness bound
(read from the rollout log), the off-policy correction against the generator's recorded log-probs (a hand
computation on a fixed batch; per token on a conversation that spans a weight push), a resumed run that
neither loses nor repeats a prompt, and the combinations refused in one line."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from grouprl.models.loading import load_policy
from grouprl.policy.scoring import completion_logps, pack
from grouprl.records import Episode, Step
from grouprl.rollout.generation import HFBackend
from grouprl.rollout.sampling import SamplingParams
from grouprl.rollout.weight_sync import GeneratorCopy
from grouprl.run_config import build_config
from grouprl.algos.importance import token_truncated_weights
from grouprl.train.scheduling import staleness_metrics
from grouprl.train.conversation_samples import pack_conversations
from grouprl.train.learner import Learner
from grouprl.train.step_samples import StepSamples
from tests.e2e.test_tool_training import warm_tool_model  # noqa: F401 - a fixture
from tests.run_helpers import rows, train

CPU = torch.device("cpu")


def _questions_by_step(path) -> dict[int, list[str]]:
    by_step: dict[int, list[str]] = {}
    for record in rows(path):
        if record["episode"].endswith("-e0"):  # one per group
            by_step.setdefault(record["step"], []).append(record["question"])
    return by_step


@pytest.mark.parametrize("mode", ["one_step_off", "async"])
def test_every_trained_token_is_within_the_staleness_bound(warm_arithmetic_dir, tmp_path, mode):
    out = tmp_path / mode
    assert (
        train(
            warm_arithmetic_dir,
            out,
            "--max_steps",
            "4",
            "--rollout_mode",
            mode,
            "--max_staleness",
            "1",
            "--max_inflight",
            "2",
            "--eval_strategy",
            "steps",
            "--eval_steps",
            "2",
            "--n_eval",
            "4",
        )
        == 0
    )
    records = rows(out / "rollouts" / "rollouts.jsonl")
    assert len(records) == 4 * 2 * 4
    for record in records:  # logged at step s = trained by the weights of s - 1 updates
        assert len(record["policy_versions"]) == 1
        assert 0 <= record["step"] - 1 - record["policy_versions"][0] <= 1, record
    logged = rows(out / "metrics.jsonl")
    assert sum("eval/accuracy" in m for m in logged) == 2  # evaluated at steps 2 and 4 while the producers ran
    metrics = [m for m in logged if "loss" in m]
    assert [m["step"] for m in metrics] == [1, 2, 3, 4]
    assert all(0 <= m["async/staleness_max"] <= 1 and m["async/dropped_stale_batches"] == 0 for m in metrics)
    assert all(
        ("importance_sampling/ratio_mean" in m or m.get("skipped_zero_advantage") == 1.0)
        and m["async/weight_sync_time"] >= 0
        for m in metrics
    )  # a zero-advantage step is skipped
    assert all(m["async/producer_weight_install_time"] >= 0 for m in metrics)  # hf: the producer installs pushes
    assert metrics[0]["async/staleness_max"] == 0  # the first batch: nothing to be behind yet
    for m in metrics:  # the histogram covers every trained token
        assert abs(m["async/staleness_share/0"] + m["async/staleness_share/1"] - 1) < 1e-9


def test_sync_mode_keeps_the_plain_loop_records(warm_arithmetic_dir, tmp_path):
    assert train(warm_arithmetic_dir, tmp_path / "sync") == 0
    (metrics,) = rows(tmp_path / "sync" / "metrics.jsonl")
    assert not [k for k in metrics if k.startswith(("async/", "importance_sampling/"))] and "generation_time" in metrics
    assert all("policy_versions" not in r for r in rows(tmp_path / "sync" / "rollouts" / "rollouts.jsonl"))


def test_resume_mid_run_loses_and_duplicates_no_prompt(warm_arithmetic_dir, tmp_path):
    """6 training rows, 2 a step: steps 1-3 are one epoch, 4-6 the next. The async run stops after step 2 with
    batches in flight; the resumed run regenerates them: the same prompts, step by step, as a sync run."""
    common = ("--n_train", "6", "--rollout_mode", "async", "--max_staleness", "2", "--max_inflight", "2")
    assert train(warm_arithmetic_dir, tmp_path / "sync", "--max_steps", "6", "--n_train", "6") == 0
    assert train(warm_arithmetic_dir, tmp_path / "a", "--max_steps", "2", *common) == 0
    assert (
        train(
            warm_arithmetic_dir,
            tmp_path / "b",
            "--max_steps",
            "6",
            *common,
            "--resume_from_checkpoint",
            str(tmp_path / "a" / "checkpoint-2"),
        )
        == 0
    )
    expected = _questions_by_step(tmp_path / "sync" / "rollouts" / "rollouts.jsonl")
    got = {
        **_questions_by_step(tmp_path / "a" / "rollouts" / "rollouts.jsonl"),
        **_questions_by_step(tmp_path / "b" / "rollouts" / "rollouts.jsonl"),
    }
    assert got == expected and sorted(got) == [1, 2, 3, 4, 5, 6]
    for epoch in ([1, 2, 3], [4, 5, 6]):  # every row once per epoch
        trained = [q for step in epoch for q in got[step]]
        assert len(trained) == 6 and len(set(trained)) == 6


def test_unsafe_combinations_are_refused_in_one_line(warm_arithmetic_dir, tmp_path, capsys):
    code = train(warm_arithmetic_dir, tmp_path / "r", "--rollout_mode", "async", "--curriculum", "{skip_steps: 2}")
    err = capsys.readouterr().err
    assert code == 2 and "config key 'rollout_mode': async cannot run here: a curriculum reorders rows" in err


def _policy(model_dir):
    return load_policy(build_config(None, {}, environ={}).model, str(model_dir), CPU, need_reference=False)


def test_the_correction_equals_a_hand_computation(warm_arithmetic_dir):
    """mu = 1: the PPO ratio against pi_old is 1, so each token's loss is -w_t A with w_t = min(pi_old / mu, C),
    mu the generator's recorded log-prob; dapo averages over the batch's 6 tokens."""
    policy = _policy(warm_arithmetic_dir)
    tok = policy.tokenizer
    prompts = [tok("12+3=").input_ids, tok("7+5=").input_ids]
    batch = pack(
        prompts, [tok("15").input_ids + [tok.eos_token_id], tok("12").input_ids + [tok.eos_token_id]], tok.pad_token_id
    )
    assert batch.completion_mask.sum() == 6
    with torch.no_grad():
        pi_old, _ = completion_logps(policy.model, batch)
    rho = torch.tensor([[0.5, 1.5, 3.0], [1.0, 4.0, 0.25]])
    advantages = torch.tensor([1.0, -0.5])
    samples = StepSamples(batch, advantages, (pi_old - rho.log()).float())
    expected = {
        "token_truncate": -((0.5 + 1.5 + 2.0) * 1.0 + (1.0 + 2.0 + 0.25) * -0.5) / 6,
        "none": -(3 * 1.0 + 3 * -0.5) / 6,
    }
    seen = {}
    for correction, loss in expected.items():
        cfg = build_config(
            None,
            {
                "rollout_mode": "one_step_off",
                "loss_type": "dapo",
                "sampling_correction": correction,
                "sampling_correction_cap": 2.0,
            },
            environ={},
        )
        stats = Learner(cfg, _policy(warm_arithmetic_dir)).update(samples)  # fresh weights: the same pi_old
        assert math.isclose(stats["loss"], loss, abs_tol=1e-5), (correction, stats["loss"], loss)
        seen[correction] = stats
    assert math.isclose(seen["token_truncate"]["importance_sampling/ratio_max"], 4.0, rel_tol=1e-4)
    assert math.isclose(seen["token_truncate"]["importance_sampling/truncated_fraction"], 2 / 6, rel_tol=1e-4)
    assert "importance_sampling/ratio_max" not in seen["none"]


def test_a_conversation_spanning_a_push_carries_two_versions_and_is_corrected_per_token(warm_arithmetic_dir):
    policy = _policy(warm_arithmetic_dir)
    tok = policy.tokenizer
    generator = GeneratorCopy.for_hf(HFBackend(policy.model, tok, CPU), version=0)
    params = SamplingParams(max_new_tokens=4, temperature=1.0)
    torch.manual_seed(0)
    prompt = tok("12+3=").input_ids
    (turn1,) = generator.generate([prompt], params)
    updated = copy.deepcopy(policy.model)
    with torch.no_grad():
        for p in updated.parameters():
            p.add_(0.05 * torch.randn_like(p))
    generator.push(updated, 1)  # the learner's update lands between the two turns
    prompt2 = prompt + turn1.ids + tok(" ok ").input_ids
    (turn2,) = generator.generate([prompt2], params)
    assert (turn1.policy_version, turn2.policy_version) == (0, 1)
    for model, p, turn in ((policy.model, prompt, turn1), (updated, prompt2, turn2)):  # each turn's own weights
        with torch.no_grad():
            mine, _ = completion_logps(model, pack([p], [turn.ids], tok.pad_token_id))
        assert torch.allclose(mine[0], torch.tensor(turn.logprobs), atol=1e-4)

    ep = Episode(group_id=0, index_in_group=0, row={}, conversation=True)
    for p, turn in ((prompt, turn1), (prompt2, turn2)):
        ep.steps.append(
            Step(
                prompt_text="",
                prompt_ids=p,
                action_text="",
                action_ids=turn.ids,
                truncated=False,
                anchor_state=None,
                logprobs=turn.logprobs,
                policy_version=turn.policy_version,
            )
        )
    stats, stale = staleness_metrics([ep], version=2, max_staleness=2)
    n1, n2 = len(turn1.ids), len(turn2.ids)
    assert not stale and stats["async/staleness_max"] == 2
    assert math.isclose(stats["async/staleness_mean"], (2 * n1 + 1 * n2) / (n1 + n2))
    assert stats["async/staleness_share/0"] == 0 and math.isclose(stats["async/staleness_share/2"], n1 / (n1 + n2))
    assert staleness_metrics([ep], version=2, max_staleness=1)[1]  # past the bound: never trained

    samples = pack_conversations([ep], torch.tensor([1.0, 1.0]), tok.pad_token_id, mask_truncated=False)
    mask = samples.batch.completion_mask
    assert samples.sampler_logps is not None
    trained = samples.sampler_logps[mask.bool()]
    assert torch.allclose(trained, torch.tensor(turn1.logprobs + turn2.logprobs))
    with torch.no_grad():  # the learner's pi_old: the updated weights
        pi_old, _ = completion_logps(updated, samples.batch)
    weights, _ = token_truncated_weights(pi_old, samples.sampler_logps, mask, cap=2.0)
    w = weights[mask.bool()]
    assert torch.allclose(w[n1:], torch.ones(n2), atol=1e-4)  # turn 2 came from these weights: no correction
    expected = (pi_old[mask.bool()][:n1] - torch.tensor(turn1.logprobs)).exp().clamp(max=2.0)
    assert torch.allclose(w[:n1], expected, atol=1e-5) and not torch.allclose(w[:n1], torch.ones(n1), atol=1e-3)


def test_gigpo_environment_episodes_run_one_step_off(tiny_grid_dir, tmp_path):
    from conftest import GRID_CLI
    from grouprl.job.run import run_training

    cli = {
        **GRID_CLI,
        "model_name_or_path": str(tiny_grid_dir),
        "output_dir": str(tmp_path / "run"),
        "max_steps": 3,
        "batch_size": 2,
        "num_generations": 4,
        "max_episode_steps": 3,
        "advantage": "gigpo",
        "n_eval": 0,
        "n_train": 20,
        "rollout_mode": "one_step_off",
    }
    run_training(build_config(None, cli, environ={}))
    records = rows(tmp_path / "run" / "rollouts" / "rollouts.jsonl")
    assert {r["step"] for r in records} == {1, 2, 3}
    for r in records:  # every step of a multi-step episode carries its version, within the bound
        assert len(r["policy_versions"]) == r["episode_length"] >= 1
        assert all(0 <= r["step"] - 1 - v <= 1 for v in r["policy_versions"]), r


def test_dynamic_sampling_refills_from_the_stream(warm_arithmetic_dir, tmp_path):
    out = tmp_path / "run"
    # K = 2: a group of two 0/1 scores agrees with probability >= 1/2, so a step whose first batch has no
    # agreeing group (of its two) has probability <= 1/4, and four such steps <= 0.4 % (was K = 4 and 3
    # steps: about 1 run in 10 never refilled, as the producers' threads interleave their draws)
    assert (
        train(
            warm_arithmetic_dir,
            out,
            "--max_steps",
            "4",
            "--num_generations",
            "2",
            "--rollout_mode",
            "async",
            "--max_staleness",
            "1",
            "--dynamic_sampling",
            "{metric: score, max_batches: 3}",
            "--temperature",
            "1.2",
        )
        == 0
    )
    metrics = rows(out / "metrics.jsonl")
    assert sum(m["dynamic_sampling/batches"] for m in metrics) > 4  # some step took more than one batch
    # and exactly where it must: a step with an agreeing group refilled from the stream
    assert all(m["dynamic_sampling/batches"] > 1 or m["dynamic_sampling/zero_variance_fraction"] == 0 for m in metrics)
    assert all(m["async/staleness_max"] <= 1 for m in metrics)
    for r in rows(out / "rollouts" / "rollouts.jsonl"):
        assert 0 <= r["step"] - 1 - r["policy_versions"][0] <= 1, r


def test_tool_conversations_run_async_with_a_version_per_turn(warm_tool_model, tmp_path):
    from tests.e2e.test_tool_training import RECIPE

    from grouprl.cli import main

    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--config",
                str(RECIPE),
                "--model_name_or_path",
                str(warm_tool_model),
                "--output_dir",
                str(out),
                "--max_steps",
                "3",
                "--batch_size",
                "2",
                "--num_generations",
                "2",
                "--n_eval",
                "0",
                "--max_tool_calls",
                "2",
                "--seed",
                "5",
                "--device",
                "cpu",
                "--rollout_mode",
                "async",
                "--max_staleness",
                "1",
                "--max_inflight",
                "2",
                "--temperature",  # the 40-step warm model's turns: about half of them invalid calls at 0.4, each
                "0.4",  # penalized, so groups disagree and the update runs (at 1.0 nearly every reward is 0)
            ]
        )
        == 0
    )
    metrics = rows(out / "metrics.jsonl")
    assert [m["samples"] for m in metrics] == [4, 4, 4]  # one sequence per conversation
    # the correction's statistics on every update (a step whose advantages are all zero takes none: skipped)
    assert all(
        ("importance_sampling/ratio_mean" in m or m.get("skipped_zero_advantage") == 1.0)
        and m["async/staleness_max"] <= 1
        for m in metrics
    )
    assert any("importance_sampling/ratio_mean" in m for m in metrics)
    for r in rows(out / "rollouts" / "rollouts.jsonl"):  # one version per assistant turn
        assert len(r["policy_versions"]) == r["episode_length"]
        assert all(0 <= r["step"] - 1 - v <= 1 for v in r["policy_versions"]), r
