"""Keyed draws: a row with a seed samples the same tokens whichever batch it is in, from the right distribution,
and the agent endpoint's samples no longer depend on how the agents' requests were batched."""

from __future__ import annotations

import torch

from grouprl.models.tiny import build_tiny_model, build_tokenizer
from grouprl.rollout.decode import draw_inverse_cdf
from grouprl.rollout.generation import HFBackend, SamplingParams
from grouprl.rollout.keyed_draws import call_seed, keyed_uniform
from grouprl.rollout.turn_cache import TurnCache
from grouprl.tasks.tool_arithmetic import ToolArithmeticTask, rows
from grouprl.rollout.agent.runner import AgentSettings, run_agent_episodes
from grouprl.tasks.tool_arithmetic import ToolAnswerEnv
from grouprl.user_code import import_callable
from tests.rollout.agent.test_agent_runner import CALCULATOR


def test_keyed_uniforms_are_uniform_and_independent_of_their_neighbours():
    seeds = torch.arange(20_000, dtype=torch.int64) * 7919 - 10_000  # negative seeds too
    u0, u1 = keyed_uniform(seeds, 0), keyed_uniform(seeds, 1)
    assert u0.dtype == torch.float64 and bool((u0 >= 0).all() and (u0 < 1).all())
    torch.testing.assert_close(u0, keyed_uniform(seeds.flip(0), 0).flip(0))  # a row's number is its own
    counts = torch.histc(u0, bins=20, min=0, max=1)
    chi2 = float(((counts - 1000) ** 2 / 1000).sum())
    assert chi2 < 45  # 19 degrees of freedom: p < 0.001 beyond 43.8
    assert abs(float(torch.corrcoef(torch.stack([u0, u1]))[0, 1])) < 0.03  # counter k and k+1 unrelated
    assert abs(float(torch.corrcoef(torch.stack([u0[:-1], u0[1:]]))[0, 1])) < 0.03  # seeds s and s+7919 too
    assert call_seed(1, "g0-e0", 0) != call_seed(1, "g0-e1", 0) != call_seed(1, "g0-e0", 1)
    assert call_seed(1, "g0-e0", 0) == call_seed(1, "g0-e0", 0) < 2**63


def test_keyed_draws_sample_the_distribution():
    probs = torch.tensor([0.5, 0.25, 0.125, 0.125, 0.0])
    n = 40_000
    chosen = draw_inverse_cdf(probs.expand(n, -1), keyed_uniform(torch.arange(n), 3))
    counts = torch.bincount(chosen, minlength=5).double()
    assert counts[4] == 0  # a zero-probability token is never drawn
    expected = probs.double()[:4] * n
    assert float(((counts[:4] - expected) ** 2 / expected).sum()) < 16.3  # 3 degrees of freedom, p = 0.001


def _tiny():
    task = ToolArithmeticTask("tool_arithmetic", rows(4), rows(1))
    tokenizer = build_tokenizer(task.tokenizer_corpus())
    model = build_tiny_model(tokenizer, hidden=32, layers=2, heads=4, seed=0, max_positions=512)
    return model, tokenizer


def test_a_seeded_row_samples_the_same_tokens_in_any_batch():
    model, tokenizer = _tiny()
    a, b, c = (tokenizer(t, add_special_tokens=False)["input_ids"] for t in ["12 * 7 =", "what is", "3 + 4 + 5 ="])
    params = SamplingParams(max_new_tokens=24, temperature=1.0)
    for turn_cache in [None, TurnCache()]:
        backend = HFBackend(model, tokenizer, torch.device("cpu"), turn_cache=turn_cache)
        first = backend.generate([a, b], SamplingParams(**{**params.__dict__, "seeds": [11, 12]}))
        torch.manual_seed(123)  # the global generator plays no part
        second = backend.generate([c, b, a, a], SamplingParams(**{**params.__dict__, "seeds": [13, 12, 11, 14]}))
        assert second[2].ids == first[0].ids and second[1].ids == first[1].ids
        assert second[3].ids != second[2].ids  # the same prompt under another seed: another sample
        split = backend.generate([a, b], SamplingParams(**{**params.__dict__, "seeds": [11, 12], "batch_size": 1}))
        assert [s.ids for s in split] == [s.ids for s in first]  # chunks take their own prompts' seeds


def test_agent_samples_do_not_depend_on_how_the_requests_were_batched(tokenizer):
    """The same run seed, the agents' calls served 2 at a time or 8 at a time: the same conversations. Without keyed
    draws the j-th request of a batch took the j-th number of torch's stream, so every sample moved."""
    model = build_tiny_model(tokenizer, hidden=32, layers=1, heads=4, seed=0, max_positions=2048)
    backend = HFBackend(model, tokenizer, torch.device("cpu"))
    task_rows = rows(4)
    factories = [lambda r=r: ToolAnswerEnv(r["question"], r["ground_truth"]) for r in task_rows]
    settings = AgentSettings(agent=import_callable(CALCULATOR, "agent"), batch_window_s=0.05)
    runs = []
    for in_flight in [8, 2]:
        torch.manual_seed(0)
        params = SamplingParams(max_new_tokens=40, temperature=1.0, batch_size=in_flight)
        episodes = run_agent_episodes(
            factories, task_rows, 2, backend, tokenizer, params, settings, [r["seed"] for r in task_rows]
        )
        runs.append([[s.action_ids for s in ep.steps] for ep in episodes])
    assert runs[0] == runs[1]
    assert len({str(ep) for ep in runs[0]}) > 1  # the episodes differ from each other


def test_the_vllm_server_reads_one_seed_per_prompt():
    import pytest

    from grouprl.rollout.backends.vllm_server import BadRequest, parse_generate

    body = {"prompts": [[1, 2], [3]], "eos_token_id": 0, "max_new_tokens": 4}
    assert parse_generate(body)[1].seeds is None  # absent: the engine's own generator
    assert parse_generate({**body, "seeds": [5, 2**62]})[1].seeds == [5, 2**62]
    for bad in ([5], [5, "6"], [5, True], 7):
        with pytest.raises(BadRequest, match="field 'seeds'"):
            parse_generate({**body, "seeds": bad})
