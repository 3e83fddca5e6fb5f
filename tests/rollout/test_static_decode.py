"""The static-cache decode loop (rollout/static_decode.py, ``speed.captured_decode``) makes ``decode``'s tokens.

On the CPU (no graph; the step the graph would capture, eagerly): greedy completions token-identical to the
default loop's, sampled ones identical under the same seed with both draws, over several seeds and chunks (the
generator advances as in ``decode``, so a later chunk's draws match too), rows ending at different steps, prompts of
different lengths (left padding, a shared prefix, one-token prompts), the ``max_new_tokens`` cap; the behaviour
log-probs equal within float rounding; progress reported as ``decode`` reports it. And the step (forward and draw)
reads nothing back to the host when the live count is not asked for, which is what a CUDA graph and an unsynced loop
need.
"""

from __future__ import annotations

import pytest
import torch
from torch.overrides import TorchFunctionMode

from grouprl.config import Config
from grouprl.rollout.decode import decode, draw_inverse_cdf, sampling_warpers
from grouprl.rollout.generation import HFBackend, SamplingParams, captured_decode, stop_token_ids
from grouprl.rollout.static_decode import _Engine, choose, draw_inverse_cdf_static, static_decode, supports_static
from tests.rollout.test_decode import load, prompts_of

CPU = torch.device("cpu")
SAMPLERS = [(1.0, 1.0, 0), (0.7, 0.9, 0), (1.3, 1.0, 7)]  # (temperature, top_p, top_k)


@pytest.fixture(scope="module")
def tiny(tiny_arithmetic_dir):
    model, tok = load(tiny_arithmetic_dir)
    stop = tok("1").input_ids[-1]  # a frequent character as an extra stop: rows end at different steps
    model.generation_config.eos_token_id = [tok.eos_token_id, stop]
    return model, tok


def both(model, tok, prompts, params, seed=1, draw_with="inverse_cdf", record=False):
    """(default loop, static loop) completions of the same call from the same seed, and the generator's next
    number after each (the same when the static loop drew exactly the numbers ``decode`` drew)."""
    out = []
    for captured in (False, True):
        torch.manual_seed(seed)
        backend = HFBackend(model, tok, CPU, record_logprobs=record, draw_with=draw_with, captured=captured)
        out.append((backend.generate(prompts, params), torch.rand(1).item()))
    (ours, after_ours), (static, after_static) = out
    assert after_ours == after_static
    return ours, static


def assert_same(ours, static, logprobs: bool = False) -> None:
    assert [c.ids for c in static] == [c.ids for c in ours]
    assert [c.truncated for c in static] == [c.truncated for c in ours]
    assert [c.text for c in static] == [c.text for c in ours]
    for a, b in zip(ours, static):
        if not logprobs:
            assert a.logprobs is None and b.logprobs is None
            continue
        assert a.logprobs is not None and b.logprobs is not None and len(b.logprobs) == len(b.ids)
        assert torch.allclose(torch.tensor(b.logprobs), torch.tensor(a.logprobs), atol=1e-5, rtol=0)


def test_greedy_is_token_identical_with_rows_ending_at_different_steps(tiny):
    model, tok = tiny
    prompts = prompts_of(tok, [4, 1, 3, 5, 2])  # a shared prefix, then remainders of different lengths
    for cap, batch in ((16, 64), (16, 6), (3, 64)):  # one chunk, several chunks, the cap before most stops
        params = SamplingParams(max_new_tokens=cap, greedy=True, batch_size=batch)
        ours, static = both(model, tok, prompts, params)
        assert_same(ours, static)
        if cap == 16:  # the cases were exercised: rows stopped at different steps, others ran to the cap
            assert len({len(c.ids) for c in ours}) > 2 and any(c.truncated for c in ours)


@pytest.mark.parametrize("draw_with", ["inverse_cdf", "multinomial"])
@pytest.mark.parametrize("temperature, top_p, top_k", SAMPLERS)
def test_sampling_makes_the_same_draws_and_logprobs(tiny, draw_with, temperature, top_p, top_k):
    model, tok = tiny
    prompts = prompts_of(tok, [6, 3, 4, 5, 2])
    params = SamplingParams(max_new_tokens=20, temperature=temperature, top_p=top_p, top_k=top_k, batch_size=8)
    lengths = set()
    for seed in (1, 2, 3):
        ours, static = both(model, tok, prompts, params, seed, draw_with, record=True)
        assert_same(ours, static, logprobs=True)
        lengths |= {len(c.ids) for c in ours}
    assert len(lengths) > 3  # rows ended at many different steps


def test_short_prompts_and_prompts_with_nothing_in_common(tiny):
    model, tok = tiny
    prompts = [[5], [7], [5], tok("9?").input_ids, tok("12 * 3?").input_ids, [8, 9]]
    for params in (
        SamplingParams(max_new_tokens=10, greedy=True, batch_size=4),
        SamplingParams(max_new_tokens=10, temperature=0.9, batch_size=4),
    ):
        for draw_with in ("inverse_cdf", "multinomial"):
            assert_same(*both(model, tok, prompts, params, 5, draw_with))


def test_eager_attention_writes_its_additive_mask(tiny_arithmetic_dir):
    model, tok = load(tiny_arithmetic_dir)
    model.config._attn_implementation = "eager"
    params = SamplingParams(max_new_tokens=12, temperature=1.0, batch_size=16)
    assert_same(*both(model, tok, prompts_of(tok, [3, 2, 4]), params, 4, record=True), logprobs=True)


def test_progress_is_reported_as_the_default_loop_reports_it(tiny):
    model, tok = tiny
    prompts = prompts_of(tok, [3, 2, 4])
    params = SamplingParams(max_new_tokens=14, temperature=1.0)
    warpers, stops, pad = sampling_warpers(model, params), stop_token_ids(tok, model), tok.pad_token_id
    seen: dict[str, list] = {"decode": [], "static": []}
    with torch.inference_mode():
        for name, loop in (("decode", decode), ("static", static_decode)):
            torch.manual_seed(7)
            loop(model, prompts, params, warpers, stops, pad, CPU, lambda *a, n=name: seen[n].append(a))
    assert seen["static"] == seen["decode"] and seen["decode"][-1][0] == len(prompts)


def test_inverse_cdf_gives_each_live_row_decodes_number():
    """Row i of the static draw, live, gets the number ``decode`` draws for it among the live rows only, and the
    generator ends where ``decode``'s does (the live count read on the host); an invalid live row is flagged."""
    torch.manual_seed(0)
    probs = torch.softmax(torch.randn(6, 40) * 3, dim=-1)
    live = torch.tensor([True, False, True, True, False, True])
    torch.manual_seed(11)
    expected, after = draw_inverse_cdf(probs[live]), torch.rand(1)
    torch.manual_seed(11)
    got, bad = draw_inverse_cdf_static(probs, live, host_count=True)
    assert torch.equal(got[live], expected) and torch.equal(torch.rand(1), after) and not bool(bad)
    broken = probs.clone()
    broken[1] = float("nan")  # a finished row's garbage is not checked; a live row's is
    assert not bool(draw_inverse_cdf_static(broken, live, True)[1])
    assert bool(draw_inverse_cdf_static(broken, ~live, True)[1])


class HostReads(TorchFunctionMode):
    """Records the tensor calls that read a value back to the host (on CUDA: a synchronisation, forbidden while
    a graph is captured)."""

    READS = {"__bool__", "__int__", "__float__", "__index__", "item", "tolist", "nonzero", "numpy", "unique"}

    def __init__(self):
        super().__init__()
        self.seen: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", str(func))
        if name in self.READS:
            self.seen.append(name)
        if name == "__getitem__" and any(isinstance(a, torch.Tensor) and a.dtype == torch.bool for a in args[1:]):
            self.seen.append("boolean indexing")
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("draw_with", ["inverse_cdf", "multinomial"])
def test_the_step_reads_nothing_back_to_the_host(tiny, draw_with):
    model, tok = tiny
    prompts = prompts_of(tok, [2, 3])
    params = SamplingParams(max_new_tokens=4, temperature=0.8, top_p=0.9, top_k=5)
    warpers = sampling_warpers(model, params)
    from grouprl.rollout.decode import prefill

    with torch.inference_mode():
        cache, mask, tokens, positions = prefill(model, prompts, tok.pad_token_id, CPU)
        engine = _Engine(model, len(prompts), mask.shape[1] + 4, CPU)
        engine.load(cache, mask, tokens, positions)
        live = torch.ones(len(prompts), dtype=torch.bool)
        with HostReads() as reads:
            for step in range(3):
                chosen, _, _ = choose(engine.step(model, mask.shape[1] + step), warpers, params, draw_with, live, False)
                engine.feed(chosen)
                live &= chosen != 3
    assert reads.seen == []


def test_the_speed_option_picks_the_loop():
    assert Config().speed.captured_decode == "off"  # until a GPU session has measured it (docs/performance.md)
    assert not captured_decode("auto", CPU) and captured_decode("auto", torch.device("cuda"))
    assert captured_decode("on", CPU) and not captured_decode("off", torch.device("cuda"))


def test_a_model_the_static_loop_does_not_fit_keeps_the_default_loop(tiny_arithmetic_dir):
    model, tok = load(tiny_arithmetic_dir)
    assert supports_static(model)
    model.config._attn_implementation = "flex_attention"  # (only read here: nothing runs under it)
    assert not supports_static(model)
    model.config._attn_implementation = "sdpa"
    model.config.layer_types = ["sliding_attention"] * model.config.num_hidden_layers
    assert not supports_static(model)


def test_a_kept_engine_serves_later_chunks_and_calls(tiny, monkeypatch):
    """The captured path keeps one engine per (rows, rounded cache length) and reloads it for each chunk, over the
    previous chunk's stale keys and values; a step the capture refuses runs eagerly, with a warning. (Nothing is
    captured on a CPU: ``capture`` is stubbed, the rest of the captured path runs.)"""
    import grouprl.rollout.static_decode as static

    model, tok = tiny
    built: list[int] = []
    real_init = static._Engine.__init__

    def counting_init(self, *args, **kwargs):
        built.append(1)
        real_init(self, *args, **kwargs)

    def refuse(self, model):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(static._Engine, "__init__", counting_init)
    monkeypatch.setattr(static._Engine, "capture", lambda self, model: None)
    monkeypatch.setattr(static, "can_capture", lambda model, device: True)
    monkeypatch.setattr("grouprl.rollout.generation.can_capture", lambda model, device: True)
    prompts = prompts_of(tok, [4, 4, 4, 4, 4])  # five chunks of 4 rows, prompt widths within one bucket
    params = SamplingParams(max_new_tokens=12, temperature=1.0, batch_size=4)
    for seed in (1, 2):
        assert_same(*both(model, tok, prompts, params, seed, record=True), logprobs=True)
    # ten chunks, two engines: the short prompts' cache rounds up to 64 positions, the long ones' to 128
    assert len(built) == len(static._ENGINES[model]) == 2
    static.release(model)
    monkeypatch.setattr(static._Engine, "capture", refuse)
    with pytest.warns(UserWarning, match="could not be captured"):
        assert_same(*both(model, tok, prompts, params, 3))
    static.release(model)
