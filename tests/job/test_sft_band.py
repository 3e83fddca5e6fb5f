"""The warm start's success band: the line search over the last stretch of SFT lands inside [low, high]."""

from __future__ import annotations

import pytest
import torch

from grouprl.job.sft_band import SuccessBand, float_weights, into_delta, step_towards


def model_at(value: float) -> torch.nn.Module:
    model = torch.nn.Linear(3, 1)
    with torch.no_grad():
        model.weight.fill_(value)
        model.bias.fill_(-value)
    return model


def success(model, tokenizer) -> float:
    """A stand-in check whose 'success' is the weight itself: the search's arithmetic is then exact."""
    return float(model.weight.mean())


def test_the_search_moves_on_the_straight_line_between_two_checkpoints():
    below = float_weights(model_at(0.0))
    model = model_at(2.0)  # theta_above, where the model stands
    delta = into_delta(model, below)  # the one copy kept: theta_above - theta_below
    step_towards(model, delta, 0.25 - 1.0)  # a = 0.25
    assert torch.allclose(model.weight, torch.full_like(model.weight, 0.5))
    assert torch.allclose(model.bias, torch.full_like(model.bias, -0.5))
    step_towards(model, delta, 0.75 - 0.25)  # on to a = 0.75, from where it stands
    assert torch.allclose(model.weight, torch.full_like(model.weight, 1.5))


def test_under_the_band_keeps_going_and_records_the_weights_to_come_back_to():
    band = SuccessBand(success, low=0.2, high=0.4, log=lambda _: None)
    model = model_at(0.0)
    band.start(model)
    assert band(model, None) is False  # 0.0: keep training
    with torch.no_grad():
        model.weight.fill_(0.1)
    assert band(model, None) is False  # 0.1: still under; this is now the stretch's start
    with torch.no_grad():
        model.weight.fill_(0.9)  # one step overshoots the band
    assert band(model, None) is True and band.overshot
    band.settle(model, None)
    # 0.1 + a (0.9 - 0.1): a = 0.5 -> 0.5 (over), a = 0.25 -> 0.3 (inside): kept
    assert [label for label, _ in band.history] == ["check 1", "check 2", "check 3", "a = 0.5", "a = 0.25"]
    assert [value for _, value in band.history] == pytest.approx([0.0, 0.1, 0.9, 0.5, 0.3])
    assert float(model.weight.mean()) == pytest.approx(0.3)


def test_a_check_inside_the_band_stops_without_a_search():
    band = SuccessBand(success, low=0.2, high=0.4, log=lambda _: None)
    model = model_at(0.0)
    band.start(model)
    with torch.no_grad():
        model.weight.fill_(0.3)
    assert band(model, None) is True and not band.overshot
    assert [label for label, _ in band.history] == ["check 1"]
    assert float(model.weight.mean()) == pytest.approx(0.3)


def test_no_point_inside_keeps_the_smallest_step_at_or_above_the_bottom():
    # A band too narrow for 2 tries: a = 0.5 -> 0.5 (over), a = 0.25 -> 0.25 (over); keeps a = 0.25, never a
    # point under the band (RL needs some successes to have spread).
    band = SuccessBand(success, low=0.2, high=0.21, tries=2, log=lambda _: None)
    model = model_at(0.0)
    band.start(model)
    with torch.no_grad():
        model.weight.fill_(1.0)
    assert band(model, None) is True
    band.settle(model, None)
    assert float(model.weight.mean()) == pytest.approx(0.25)
    assert float(model.weight.mean()) >= band.low


def test_without_a_top_the_first_check_at_the_bottom_stops_as_it_is():
    band = SuccessBand(success, low=0.2, log=lambda _: None)
    model = model_at(0.0)
    band.start(model)
    with torch.no_grad():
        model.weight.fill_(0.9)
    assert band(model, None) is True and not band.overshot
    assert float(model.weight.mean()) == pytest.approx(0.9)


def test_a_band_upside_down_is_refused():
    with pytest.raises(ValueError, match="top"):
        SuccessBand(success, low=0.4, high=0.2)


def test_tool_sft_line_searches_the_real_last_step_and_keeps_its_checks(tmp_path):
    """The band inside the real tool SFT (tiny model, expert conversations): the step-2 check overshoots, the
    optimizer's moments are freed, and the saved model is the blend the search kept, between the step-1 and step-2
    weights; every check is in warm_start_checks.json."""
    import json
    from pathlib import Path

    from transformers import AutoModelForCausalLM

    import grouprl.tasks  # noqa: F401
    from grouprl.job.tool_sft import tool_sft
    from grouprl.models.tiny import init_tiny
    from grouprl.rollout.runner import episode_settings
    from grouprl.run_config import build_config
    from grouprl.tasks import load_task

    recipe = Path(__file__).resolve().parents[2] / "recipes" / "tiny" / "tool_arithmetic.yaml"
    cfg = build_config(recipe, {"output_dir": str(tmp_path)}, environ={})
    task = load_task(cfg)
    tiny = init_tiny(task.tokenizer_corpus(), tmp_path / "tiny", hidden=16, layers=1, heads=2, seed=0,
                     tokenizer=task.tiny_tokenizer, max_positions=task.tiny_max_positions)  # fmt: skip
    readings = iter([0.0, 0.9, 0.6, 0.3])  # step 1 under, step 2 over, then a = 0.5 over, a = 0.25 inside
    seen: list[dict[str, torch.Tensor]] = []

    def measure(model, tokenizer) -> float:
        seen.append(float_weights(model))
        return next(readings)

    band = SuccessBand(measure, low=0.2, high=0.4, log=lambda _: None)
    out = tool_sft(str(tiny), task, episode_settings(cfg, task), tmp_path / "sft", steps=5, learning_rate=1e-2,
                   batch_size=4, seed=0, n_episodes=8, stop_when=band, check_every=1)  # fmt: skip
    assert [label for label, _ in band.history] == ["check 1", "check 2", "a = 0.5", "a = 0.25"]
    saved = AutoModelForCausalLM.from_pretrained(out).state_dict()
    step1, step2 = seen[0], seen[1]
    name = next(k for k in step1 if not torch.equal(step1[k], step2[k]))  # a weight the second step moved
    assert torch.allclose(saved[name], torch.lerp(step1[name], step2[name], 0.25), atol=1e-6)
    assert json.loads((out / "warm_start_checks.json").read_text())[-1] == ["a = 0.25", 0.3]


def test_a_first_check_that_overshoots_searches_back_to_the_step_before_it(tmp_path):
    """first_check = 3: the check at step 3 overshoots, and the line search runs between the step-2 weights (taken as
    under the band, never checked) and the step-3 weights, not from the weights SFT started from."""
    from pathlib import Path

    from transformers import AutoModelForCausalLM

    import grouprl.tasks  # noqa: F401
    from grouprl.job.tool_sft import tool_sft
    from grouprl.models.tiny import init_tiny
    from grouprl.rollout.runner import episode_settings
    from grouprl.run_config import build_config
    from grouprl.tasks import load_task

    recipe = Path(__file__).resolve().parents[2] / "recipes" / "tiny" / "tool_arithmetic.yaml"
    cfg = build_config(recipe, {"output_dir": str(tmp_path)}, environ={})
    task = load_task(cfg)
    tiny = init_tiny(task.tokenizer_corpus(), tmp_path / "tiny", hidden=16, layers=1, heads=2, seed=0,
                     tokenizer=task.tiny_tokenizer, max_positions=task.tiny_max_positions)  # fmt: skip
    readings = iter([0.9, 0.3])  # step 3 over the band, a = 0.5 inside it
    seen: list[dict[str, torch.Tensor]] = []

    def measure(model, tokenizer) -> float:
        seen.append(float_weights(model))
        return next(readings)

    common = dict(learning_rate=1e-2, batch_size=4, seed=0, n_episodes=8)
    settings = episode_settings(cfg, task)
    band = SuccessBand(measure, low=0.2, high=0.4, log=lambda _: None)
    out = tool_sft(str(tiny), task, settings, tmp_path / "sft", steps=5, stop_when=band, check_every=1, first_check=3,
                   **common)  # fmt: skip
    two = AutoModelForCausalLM.from_pretrained(tool_sft(str(tiny), task, settings, tmp_path / "two", steps=2, **common))
    assert [label for label, _ in band.history] == ["check 1", "a = 0.5"]
    saved, step2, step3 = AutoModelForCausalLM.from_pretrained(out).state_dict(), two.state_dict(), seen[0]
    name = next(k for k in step3 if not torch.equal(step2[k], step3[k]))
    assert torch.allclose(saved[name], torch.lerp(step2[name], step3[name], 0.5), atol=1e-6)


def test_steps_before_the_first_check_only_train(tmp_path):
    """first_check = 3, every 2: checks after steps 3 and 5 of 6, and the first sees exactly the weights three
    uninterrupted SFT steps make."""
    from pathlib import Path

    from transformers import AutoModelForCausalLM

    import grouprl.tasks  # noqa: F401
    from grouprl.job.tool_sft import tool_sft
    from grouprl.models.tiny import init_tiny
    from grouprl.rollout.runner import episode_settings
    from grouprl.run_config import build_config
    from grouprl.tasks import load_task

    recipe = Path(__file__).resolve().parents[2] / "recipes" / "tiny" / "tool_arithmetic.yaml"
    cfg = build_config(recipe, {"output_dir": str(tmp_path)}, environ={})
    task = load_task(cfg)
    tiny = init_tiny(task.tokenizer_corpus(), tmp_path / "tiny", hidden=16, layers=1, heads=2, seed=0,
                     tokenizer=task.tiny_tokenizer, max_positions=task.tiny_max_positions)  # fmt: skip
    seen: list[dict[str, torch.Tensor]] = []

    def never(model, tokenizer) -> bool:
        seen.append(float_weights(model))
        return False

    common = dict(learning_rate=1e-2, batch_size=4, seed=0, n_episodes=8)
    settings = episode_settings(cfg, task)
    tool_sft(str(tiny), task, settings, tmp_path / "checked", steps=6, stop_when=never, check_every=2, first_check=3,
             **common)  # fmt: skip
    three = tool_sft(str(tiny), task, settings, tmp_path / "three", steps=3, **common)
    assert len(seen) == 2  # steps 3 and 5
    after_three = AutoModelForCausalLM.from_pretrained(three).state_dict()
    assert all(torch.equal(seen[0][k], after_three[k]) for k in seen[0])
    assert any(not torch.equal(seen[1][k], after_three[k]) for k in seen[1])


def test_every_check_draws_the_same_numbers_and_leaves_the_generator_alone():
    from grouprl.job.tool_sft import common_draws

    check = common_draws(lambda model, tokenizer: torch.rand(4), seed=7)
    torch.manual_seed(0)
    state = torch.random.get_rng_state()
    first, second = check(None, None), check(None, None)
    assert torch.equal(first, second)
    assert torch.equal(torch.random.get_rng_state(), state)  # training's draws go on as if no check ran
    assert not torch.equal(common_draws(lambda m, t: torch.rand(4), seed=8)(None, None), first)


def test_a_check_that_calls_tools_in_a_loop_counts_as_under_the_band():
    """Seed 0's third SFT step (docs/agent_main_job.md): 9 % sampled success, but 2.41 tool calls per conversation
    against the expert's 1.52. Counted as 0 %, the band trains on; then the line search treats a looping point as
    under the band and moves towards the next check."""
    from grouprl.job.tool_sft import counted_success

    quiet = lambda _: None  # noqa: E731
    assert counted_success(0.09, 2.41, 1.52, 1.4, quiet) == 0.0
    assert counted_success(0.16, 1.81, 1.52, 1.4, quiet) == 0.16  # seed 2's third step: a start RL moves
    assert counted_success(0.16, 2.12, 1.52, 1.4, quiet) == 0.16  # at the limit: kept

    calls = {0.1: 2.4, 0.9: 1.0, 0.5: 1.9, 0.3: 2.3, 0.4: 1.4}  # calls per conversation fall as SFT learns to answer

    def looping_aware(model, tokenizer) -> float:
        value = round(float(model.weight.mean()), 6)
        return counted_success(value, calls[value], 1.5, 1.4, quiet)

    band = SuccessBand(looping_aware, low=0.05, high=0.4, log=quiet)
    model = model_at(0.1)
    band.start(model)
    assert band(model, None) is False  # 10 % success but looping: under the band, training goes on
    with torch.no_grad():
        model.weight.fill_(0.9)
    assert band(model, None) is True and band.overshot
    band.settle(model, None)
    # a = 0.5 -> 0.5 (over), a = 0.25 -> 0.3 but looping (under), a = 0.375 -> 0.4 (inside)
    assert [value for _, value in band.history] == pytest.approx([0.0, 0.9, 0.5, 0.0, 0.4])
