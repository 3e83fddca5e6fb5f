"""A prompt longer than the model's context leaves for the completion is refused in one line naming its row,
before it reaches the model (and, when its size alone proves it, before it is tokenized); with
``max_prompt_length`` it is cut from the left instead."""

import string
import time

import pytest

from grouprl.data.chat_format import PromptTooLong, prompt_room, render_prompt_ids
from grouprl.models.tiny import build_tokenizer
from grouprl.rollout.generation import SamplingParams
from grouprl.rollout.runner import SINGLE_TURN, run_episodes
from grouprl.rollout.scripted import ScriptedBackend
from grouprl.tasks.base import SingleTurnEnv


@pytest.fixture(scope="module")
def tokenizer():
    tok = build_tokenizer(string.printable)
    tok.model_max_length = 256  # a model with a 256-token context
    return tok


class Counting(ScriptedBackend):
    calls = 0

    def generate(self, prompt_ids, params):
        Counting.calls += 1
        return super().generate(prompt_ids, params)


def play(tokenizer, rows, settings=SINGLE_TURN):
    factories = [lambda r=r: SingleTurnEnv([{"role": "user", "content": r["prompt"]}]) for r in rows]
    return run_episodes(
        factories,
        rows,
        1,
        Counting(tokenizer, lambda p: "42"),
        tokenizer,
        SamplingParams(max_new_tokens=32),
        settings=settings,
    )


def test_the_room_is_the_context_less_the_completion(tokenizer):
    assert prompt_room(tokenizer, 32) == 224
    unbounded = build_tokenizer(string.printable)
    assert prompt_room(unbounded, 32) is None  # transformers' 1e30 default states no context


def test_a_30_mb_row_is_refused_at_once_naming_the_row(tokenizer):
    rows = [{"id": "q-1", "prompt": "What is 2+2?"}, {"id": "q-2", "prompt": "x" * 30_000_000}]
    Counting.calls = 0
    start = time.monotonic()
    with pytest.raises(PromptTooLong) as err:
        play(tokenizer, rows)
    assert time.monotonic() - start < 10  # never tokenized whole, never generated
    message = str(err.value)
    assert "row id='q-2'" in message and "max_prompt_length" in message and "\n" not in message
    assert Counting.calls == 0


def test_a_prompt_just_over_the_room_is_refused_after_tokenizing(tokenizer):
    with pytest.raises(PromptTooLong, match="tokens, more than the 224"):
        render_prompt_ids(tokenizer, [{"role": "user", "content": "y" * 400}], room=224)
    text, ids, cut = render_prompt_ids(tokenizer, [{"role": "user", "content": "y" * 100}], room=224)
    assert not cut and len(ids) <= 224


def test_max_prompt_length_truncates_instead(tokenizer):
    import dataclasses

    settings = dataclasses.replace(SINGLE_TURN, max_prompt_length=200)
    (episode,) = play(tokenizer, [{"id": "long", "prompt": "z" * 5000}], settings)
    step = episode.steps[0]
    assert step.prompt_truncated and len(step.prompt_ids) == 200
