"""A distillation teacher's scores (policy/teacher.py): chunked, grouped where the model allows, they equal the
padded scorer's; the full-vocabulary logits agree across layouts; vocabularies are compared token by token."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM

from grouprl.models.loading import load_tokenizer
from grouprl.models.tiny import build_tokenizer, init_tiny
from grouprl.policy.scoring import completion_logps, pack
from grouprl.policy.teacher import (
    completion_logits,
    grouped_completion_logits,
    same_vocabulary,
    teacher_logits,
    teacher_logps,
)

CORPUS = "0123456789+-*= abcdefgh"


def _model(tmp_path, seed=1):
    path = init_tiny(CORPUS, tmp_path / f"m{seed}", hidden=32, layers=1, heads=4, seed=seed)
    return AutoModelForCausalLM.from_pretrained(path).eval(), path


def _batch():
    # two groups of three samples, uneven completions, one all-masked (truncated) sample
    prompts = [[3, 4, 5]] * 3 + [[6, 7]] * 3
    completions = [[8, 9], [10], [11, 12, 13], [14, 15, 16], [8], [9, 9]]
    return pack(prompts, completions, pad_id=0)


def test_teacher_logps_equal_the_padded_scorer_in_any_chunk(tmp_path):
    model, _ = _model(tmp_path)
    batch = _batch()
    with torch.no_grad():
        padded = completion_logps(model, batch)[0]
    mask = batch.completion_mask.bool()
    for chunk in (1, 4, 16):
        got = teacher_logps(model, batch, chunk=chunk)
        assert not got.requires_grad
        torch.testing.assert_close(got[mask], padded[mask], atol=1e-5, rtol=1e-5)


def test_teacher_logits_match_across_layouts_and_give_the_token_logps(tmp_path):
    model, _ = _model(tmp_path)
    batch = _batch()
    mask = batch.completion_mask.bool()
    with torch.no_grad():
        padded = completion_logits(model, batch, temperature=0.7)
        grouped = grouped_completion_logits(model, batch, temperature=0.7)
        tokens = completion_logps(model, batch, temperature=0.7)[0]
    torch.testing.assert_close(grouped[mask], padded[mask].float(), atol=1e-5, rtol=1e-5)
    chunked = teacher_logits(model, batch, temperature=0.7, chunk=2)
    torch.testing.assert_close(chunked[mask], padded[mask].float(), atol=1e-5, rtol=1e-5)
    picked = torch.log_softmax(chunked, -1).gather(-1, batch.completion_ids.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(picked[mask], tokens[mask], atol=1e-5, rtol=1e-5)


def test_the_student_logits_carry_their_gradient(tmp_path):
    model, _ = _model(tmp_path)
    logits = completion_logits(model, _batch())
    assert logits.requires_grad and logits.shape[:2] == _batch().completion_ids.shape


def test_vocabularies_are_compared_token_by_token(tmp_path):
    _, path = _model(tmp_path)
    same = load_tokenizer(str(path))
    assert same_vocabulary(same, load_tokenizer(str(path)))
    assert not same_vocabulary(same, build_tokenizer(CORPUS + "xyz"))  # three more tokens


def test_a_conversation_is_scored_on_the_padded_path_with_its_tool_tokens_read(tmp_path):
    """Tool results and template tokens are attended (``completion_attention``), not trained (``completion_mask``):
    the teacher reads them as the student does, and only the generated tokens' scores count."""
    model, _ = _model(tmp_path)
    batch = pack([[3, 4, 5], [3, 4, 5]], [[8, 9, 10, 11], [12, 13, 14]], pad_id=0)
    batch.completion_attention = batch.completion_mask.clone()
    batch.completion_mask = batch.completion_mask * torch.tensor([[1, 0, 0, 1]])  # tokens 1-2: a tool's reply
    with torch.no_grad():
        want = completion_logps(model, batch)[0]
    mask = batch.completion_mask.bool()
    torch.testing.assert_close(teacher_logps(model, batch, chunk=1)[mask], want[mask], atol=1e-5, rtol=1e-5)
    logits = teacher_logits(model, batch)
    picked = torch.log_softmax(logits, -1).gather(-1, batch.completion_ids.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(picked[mask], want[mask], atol=1e-5, rtol=1e-5)
