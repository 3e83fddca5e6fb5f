"""HF generation keeping each conversation's KV cache between turns: the same tokens as re-encoding."""

import torch

from grouprl.models.tiny import build_tiny_model, build_tokenizer
from grouprl.rollout.generation import HFBackend, SamplingParams, generate
from grouprl.rollout.turn_cache import TurnCache
from grouprl.tasks.tool_arithmetic import ToolArithmeticTask, rows
from real_model import smollm2_dir  # noqa: F401 - the session fixture


def tiny():
    task = ToolArithmeticTask("tool_arithmetic", rows(4), rows(1))
    tokenizer = build_tokenizer(task.tokenizer_corpus())
    model = build_tiny_model(tokenizer, hidden=64, layers=2, heads=4, seed=3, max_positions=1024)
    return model.eval(), tokenizer


def ids(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_turns_reuse_the_kept_cache_and_generate_the_same_tokens():
    model, tokenizer = tiny()
    three_turns_equal_reencoding(model, tokenizer, SamplingParams(max_new_tokens=12, greedy=True, batch_size=8))


def test_a_real_model_reuses_the_cache_with_the_same_tokens(smollm2_dir):  # noqa: F811
    """SmolLM2-135M-Instruct (llama layers, its BPE tokenizer): the same check on a real model."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    model = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32).eval()
    three_turns_equal_reencoding(model, tokenizer, SamplingParams(max_new_tokens=6, greedy=True, batch_size=8))


def three_turns_equal_reencoding(model, tokenizer, params):
    torch.manual_seed(0)
    cpu = torch.device("cpu")
    questions = ["What is 4821 * 97?", "How many feet are in 47 miles?", "What is 12 * 3?"]
    # a group of two copies (shared prefill), prompts of different lengths
    first = [ids(tokenizer, f"<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n") for q in questions]
    first = [first[0], first[0], first[1], first[2]]
    store = TurnCache()
    cached = generate(model, tokenizer, first, params, cpu, turn_cache=store)
    assert [c.ids for c in cached] == [c.ids for c in generate(model, tokenizer, first, params, cpu)]
    assert store.stats.reused_tokens == 0 and len(store.entries) == 4

    # turn 2: each prompt is the last prompt, what was generated, then tool results of different lengths;
    # one new conversation has no kept cache
    results = [
        "<tool_response>\n467637\n</tool_response>",
        "<tool_response>\n1 mile = 5280 feet\n</tool_response>",
        "x",
        "<tool_response>\n36\n</tool_response>",
    ]
    second = [
        p + c.ids + ids(tokenizer, f"\n<|im_start|>user\n{r}<|im_end|>\n<|im_start|>assistant\n")
        for p, c, r in zip(first, cached, results)
    ]
    second.append(first[2])
    again = generate(model, tokenizer, second, params, cpu, turn_cache=store)
    reference = generate(model, tokenizer, second, params, cpu)
    assert [c.ids for c in again] == [c.ids for c in reference]  # token by token
    assert [c.truncated for c in again] == [c.truncated for c in reference]
    # every conversation rode its own whole history (and more: prefixes shared across conversations count too)
    assert store.stats.reused_tokens >= sum(len(p) + len(c.ids) - 1 for p, c in zip(first, cached))

    # turn 3 rides on turn 2's caches (turn 1's were dropped)
    third = [
        p + c.ids + ids(tokenizer, "\n<|im_start|>user\nok<|im_end|>\n<|im_start|>assistant\n")
        for p, c in zip(second, again)
    ]
    before = store.stats.reused_tokens
    assert [c.ids for c in generate(model, tokenizer, third, params, cpu, turn_cache=store)] == [
        c.ids for c in generate(model, tokenizer, third, params, cpu)
    ]
    assert store.stats.reused_tokens - before >= sum(len(p) + len(c.ids) - 1 for p, c in zip(second, again))


def test_a_weight_update_drops_the_kept_caches():
    model, tokenizer = tiny()
    cpu = torch.device("cpu")
    params = SamplingParams(max_new_tokens=6, greedy=True)
    prompt = [ids(tokenizer, "<|im_start|>user\nWhat is 12 * 3?<|im_end|>\n<|im_start|>assistant\n")]
    backend = HFBackend(model, tokenizer, cpu, turn_cache=TurnCache())
    out = backend.generate(prompt, params)
    nxt = [prompt[0] + out[0].ids + ids(tokenizer, "\nok")]
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(1.5)  # what an optimizer step does: parameters written in place
    assert [c.ids for c in backend.generate(nxt, params)] == [
        c.ids for c in generate(model, tokenizer, nxt, params, cpu)
    ]
    assert backend.turn_cache.stats.reused_tokens == 0  # the stale cache was not used


def test_the_byte_cap_keeps_what_fits():
    model, tokenizer = tiny()
    cpu = torch.device("cpu")
    prompts = [ids(tokenizer, f"<|im_start|>user\nWhat is {n} * 3?<|im_end|>\n") for n in (10, 200, 3000)]
    store = TurnCache(max_bytes=1)
    generate(model, tokenizer, prompts, SamplingParams(max_new_tokens=4, greedy=True), cpu, turn_cache=store)
    assert store.entries == []


def test_the_hf_backend_keeps_turn_caches_for_conversations_only():
    from types import SimpleNamespace

    from grouprl.rollout.generation import make_backend
    from grouprl.run_config import build_config

    model, tokenizer = tiny()
    policy = SimpleNamespace(model=model, tokenizer=tokenizer, device=torch.device("cpu"))
    conversation = {"task": "tool_arithmetic", "episode_mode": "conversation", "tools": ["calculator", "lookup"]}
    assert make_backend(policy, build_config(None, conversation, environ={})).turn_cache is not None
    off = build_config(None, {**conversation, "turn_kv_cache": False}, environ={})
    assert make_backend(policy, off).turn_cache is None
    assert make_backend(policy, build_config(None, {"task": "arithmetic"}, environ={})).turn_cache is None


class _Producer:
    """A long-lived thread that runs the calls it is handed, one at a time (an async rollout producer)."""

    def __init__(self):
        import queue
        import threading

        self.calls: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while (item := self.calls.get()) is not None:
            function, args, done = item
            done.append(function(*args))

    def run(self, function, *args):
        done: list = []
        self.calls.put((function, args, done))
        while not done:
            self.thread.join(timeout=0.01)
        return done[0]

    def stop(self):
        self.calls.put(None)
        self.thread.join()


def test_two_producers_taking_turns_each_keep_their_conversations_caches():
    """max_inflight 2: two producer threads share the generator copy and alternate at its lock. Each turn
    rides on its own conversation's kept cache (keeping only the last call's let the other producer's call
    evict it: no turn reused anything), with the tokens re-encoding gives; a push drops every kept cache."""
    import copy

    from grouprl.rollout.weight_sync import GeneratorCopy

    model, tokenizer = tiny()
    cpu = torch.device("cpu")
    params = SamplingParams(max_new_tokens=8, greedy=True, batch_size=8)
    generator = GeneratorCopy.for_hf(HFBackend(model, tokenizer, cpu, turn_cache=TurnCache()), version=0)
    store = generator.backend.turn_cache
    first = {
        "a": [
            ids(tokenizer, f"<|im_start|>user\nWhat is {n} * 3?<|im_end|>\n<|im_start|>assistant\n") for n in (12, 48)
        ],
        "b": [
            ids(tokenizer, f"<|im_start|>user\nHow many feet are in {n} miles?<|im_end|>\n<|im_start|>assistant\n")
            for n in (47, 12)
        ],
    }
    producers = {"a": _Producer(), "b": _Producer()}
    try:
        turn1 = {k: producers[k].run(generator.generate, first[k], params) for k in ("a", "b")}  # a, then b
        tail = ids(tokenizer, "\n<|im_start|>user\nok<|im_end|>\n<|im_start|>assistant\n")
        second = {k: [p + c.ids + tail for p, c in zip(first[k], turn1[k])] for k in ("a", "b")}
        for k in ("a", "b"):  # a's second turn comes after b's first call, b's after a's second
            before = store.stats.reused_tokens
            again = producers[k].run(generator.generate, second[k], params)
            assert [c.ids for c in again] == [c.ids for c in generate(model, tokenizer, second[k], params, cpu)]
            assert store.stats.reused_tokens - before == sum(
                len(p) + len(c.ids) - 1 for p, c in zip(first[k], turn1[k])
            )

        updated = copy.deepcopy(model)
        with torch.no_grad():
            for parameter in updated.parameters():
                parameter.add_(0.05 * torch.randn_like(parameter))
        generator.push(updated, 1)  # the learner's update lands between two turns
        third = [p + tail for p in second["a"]]
        before = store.stats.reused_tokens
        after_push = producers["a"].run(generator.generate, third, params)
        assert store.stats.reused_tokens == before  # nothing made with the old weights was reused
        assert [c.ids for c in after_push] == [c.ids for c in generate(updated, tokenizer, third, params, cpu)]
        assert {c.policy_version for c in after_push} == {1}
    finally:
        for producer in producers.values():
            producer.stop()


def test_a_prompt_rides_a_kept_entry_as_far_as_it_matches():
    """The endpoint may render the assistant's reply otherwise than the tokens sampled: the next turn still rides
    everything before the first difference, with the tokens re-encoding gives; the conversation's old entry is
    dropped once ridden past its prompt, an entry no call rides for ``max_idle_calls`` calls goes."""
    model, tokenizer = tiny()
    cpu = torch.device("cpu")
    params = SamplingParams(max_new_tokens=8, greedy=True, batch_size=8)
    store = TurnCache(max_idle_calls=1)
    first = [ids(tokenizer, f"<|im_start|>user\nWhat is {n} * 3?<|im_end|>\n<|im_start|>assistant\n") for n in (12, 48)]
    turn1 = generate(model, tokenizer, first, params, cpu, turn_cache=store)
    kept = {e.ids: e for e in store.own}
    assert set(kept) == {tuple(p + c.ids[:-1]) for p, c in zip(first, turn1)}
    # conversation 0 goes on with its reply rendered otherwise (its last sampled tokens replaced)
    rendered = first[0] + turn1[0].ids[:2] + ids(tokenizer, "calculator 36") + ids(tokenizer, "<|im_end|>\nok")
    before = store.stats.reused_tokens
    again = generate(model, tokenizer, [rendered], params, cpu, turn_cache=store)
    assert [c.ids for c in again] == [c.ids for c in generate(model, tokenizer, [rendered], params, cpu)]
    ridden = store.stats.reused_tokens - before
    assert len(first[0]) + 2 <= ridden < len(rendered)
    assert tuple(first[0] + turn1[0].ids[:-1]) not in {e.ids for e in store.own}  # ridden past its prompt: gone
    assert tuple(first[1] + turn1[1].ids[:-1]) in {e.ids for e in store.own}  # conversation 1's waits
    generate(model, tokenizer, [first[0][:5] + ids(tokenizer, "x")], params, cpu, turn_cache=store)
    assert tuple(first[1] + turn1[1].ids[:-1]) not in {e.ids for e in store.own}  # idle for 2 calls: forgotten


def test_sampled_turns_carry_their_log_probs():
    """The asynchronous producer's copy samples with the turn cache and needs each token's behaviour log-prob:
    the decode loop records them on this path too, the same as without the store for the same draws."""
    model, tokenizer = tiny()
    cpu = torch.device("cpu")
    params = SamplingParams(max_new_tokens=8, temperature=0.9, batch_size=8)
    prompts = [ids(tokenizer, f"<|im_start|>user\nWhat is {n} * 3?<|im_end|>\n<|im_start|>assistant\n") for n in (1, 2)]
    torch.manual_seed(5)
    with_store = generate(model, tokenizer, prompts, params, cpu, turn_cache=TurnCache(), record_logprobs=True)
    torch.manual_seed(5)
    plain = generate(model, tokenizer, prompts, params, cpu, record_logprobs=True)
    assert [c.ids for c in with_store] == [c.ids for c in plain]
    for a, b in zip(with_store, plain):
        assert a.logprobs is not None and len(a.logprobs) == len(a.ids)
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)


def test_ended_episodes_free_their_conversations_and_keep_the_shared_prefix():
    """After a rollout no kept conversation has another turn: ``episodes_ended`` drops them before the update (the
    agent main job's peak was the update beside a rollout's caches), the shared system prefix stays."""
    from grouprl.rollout.turn_cache import episodes_ended

    model, tokenizer = tiny()
    cpu = torch.device("cpu")
    backend = HFBackend(model, tokenizer, cpu, turn_cache=TurnCache())
    system = "<|im_start|>system\n" + "Use the tools to answer. End with: Answer: <number> " * 4 + "<|im_end|>\n"
    prompts = [ids(tokenizer, f"{system}<|im_start|>user\nWhat is {n} * 3?<|im_end|>\n") for n in (10, 20)]
    backend.generate(prompts, SamplingParams(max_new_tokens=4, greedy=True))
    assert backend.turn_cache.own and backend.turn_cache.shared
    episodes_ended(backend)
    assert backend.turn_cache.own == [] and backend.turn_cache.shared
