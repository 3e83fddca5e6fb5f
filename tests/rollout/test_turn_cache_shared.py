"""The prefix a call's distinct prompts share (an agent's system prompt and tool schemas) kept across calls: a
later conversation's first turn prefills only its own question, and generates the same tokens as re-encoding."""

import torch

from grouprl.rollout.generation import SamplingParams, generate
from grouprl.rollout.turn_cache import MIN_SHARED_PREFIX, TurnCache
from real_model import smollm2_dir  # noqa: F401 - the session fixture
from test_turn_cache import ids, tiny

SYSTEM = (
    "<|im_start|>system\nUse the tools to answer. End with: Answer: <number>\n\n# Tools\n\n<tools>\n"
    '{"name": "calculator", "description": "Evaluate arithmetic exactly."}\n</tools><|im_end|>\n'
)


def first_turns(tokenizer, questions):
    return [ids(tokenizer, f"{SYSTEM}<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n") for q in questions]


def shared_prefix_is_reused_with_the_same_tokens(model, tokenizer, params):
    cpu = torch.device("cpu")
    store = TurnCache()
    first = first_turns(tokenizer, ["What is 4821 * 97?", "What is 12 * 3?", "What is 12 * 3?"])
    assert [c.ids for c in generate(model, tokenizer, first, params, cpu, turn_cache=store)] == [
        c.ids for c in generate(model, tokenizer, first, params, cpu)
    ]
    # the first call already prefilled the common prefix once and every row rode it
    system = ids(tokenizer, SYSTEM + "<|im_start|>user\nWhat is ")
    assert len(store.shared) == 1
    shared = store.shared[0].ids  # the system prompt and "What is ", the prefix all three share
    assert list(shared) == first[0][: len(shared)] and len(shared) >= max(len(system) - 1, MIN_SHARED_PREFIX)
    assert store.stats.reused_tokens == 3 * len(shared)
    # a later call: new conversations (one of them a group of two copies) ride the kept prefix
    later = first_turns(tokenizer, ["How many feet are in 47 miles?", "What is 7 * 8?", "What is 7 * 8?"])
    before = store.stats.reused_tokens
    again = generate(model, tokenizer, later, params, cpu, turn_cache=store)
    assert [c.ids for c in again] == [c.ids for c in generate(model, tokenizer, later, params, cpu)]
    # the conversion asks "How many": it rides the kept prefix as far as it matches (the system prompt and the
    # user header), nothing is prefilled twice, no shorter prefix is seeded
    system_and_header = len(ids(tokenizer, SYSTEM + "<|im_start|>user\n"))
    assert store.stats.reused_tokens - before == 2 * len(shared) + system_and_header
    assert len(store.shared) == 1
    third = first_turns(tokenizer, ["How many inches are in 3 yards?"])  # rides "How many " of the conversion
    before = store.stats.reused_tokens
    assert [c.ids for c in generate(model, tokenizer, third, params, cpu, turn_cache=store)] == [
        c.ids for c in generate(model, tokenizer, third, params, cpu)
    ]
    assert store.stats.reused_tokens - before > system_and_header


def test_the_shared_prefix_is_kept_and_reused():
    model, tokenizer = tiny()
    shared_prefix_is_reused_with_the_same_tokens(model, tokenizer, SamplingParams(max_new_tokens=8, greedy=True))


def test_a_real_model_reuses_the_shared_prefix(smollm2_dir):  # noqa: F811
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    model = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32).eval()
    shared_prefix_is_reused_with_the_same_tokens(model, tokenizer, SamplingParams(max_new_tokens=6, greedy=True))


def test_a_weight_update_drops_the_shared_prefix():
    model, tokenizer = tiny()
    cpu, params = torch.device("cpu"), SamplingParams(max_new_tokens=4, greedy=True)
    store = TurnCache()
    generate(
        model, tokenizer, first_turns(tokenizer, ["What is 1 * 2?", "What is 3 * 4?"]), params, cpu, turn_cache=store
    )
    assert store.shared
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(1.5)
    later, before = first_turns(tokenizer, ["What is 5 * 6?"]), store.stats.reused_tokens
    assert [c.ids for c in generate(model, tokenizer, later, params, cpu, turn_cache=store)] == [
        c.ids for c in generate(model, tokenizer, later, params, cpu)
    ]
    assert store.stats.reused_tokens == before and not store.shared  # the stale prefix was dropped, not ridden
