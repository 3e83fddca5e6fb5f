"""Generation and prompts on a real model (SmolLM2-135M-Instruct: byte-level BPE, ChatML template):
completions stop at the template's end-of-turn token, the engine's token ids reach the loss without being
re-tokenised, and the system prompt and ``chat_template_kwargs`` reach the template."""

from __future__ import annotations

import copy

import pytest
import torch

from grouprl.data.chat_format import apply_chat_template
from grouprl.policy.scoring import completion_logps
from grouprl.rollout.generation import HFBackend, stop_token_ids
from grouprl.rollout.runner import episode_settings, run_episodes
from grouprl.rollout.sampling import Completion, SamplingParams
from grouprl.run_config import build_config
from grouprl.tasks import load_task
from grouprl.train.learner import pack_samples
from real_model import smollm2_dir  # noqa: F401 - the session fixture


@pytest.fixture(scope="module")
def real(smollm2_dir):
    from transformers import AutoModelForCausalLM

    from grouprl.models.loading import load_tokenizer

    model = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32)
    return model, load_tokenizer(str(smollm2_dir))


class EngineIds:
    """A generation backend that answers every prompt with the same token ids (as an engine would: ids first,
    the text decoded from them)."""

    def __init__(self, tokenizer, ids: list[int]):
        self.tokenizer, self.ids, self.prompts = tokenizer, ids, []

    def generate(self, prompt_ids, params):
        self.prompts.extend(prompt_ids)
        return [
            Completion(list(self.ids), self.tokenizer.decode(self.ids, skip_special_tokens=True), False)
            for _ in prompt_ids
        ]

    def load_weights(self, model) -> None:
        pass


def arithmetic(tokenizer, **cli):
    cfg = build_config(None, {"task": "arithmetic", "n_train": 4, "n_eval": 1, **cli}, environ={})
    apply_chat_template(tokenizer, cfg.prompts.chat_template)
    task = load_task(cfg)
    rows = task.train_rows[:2]
    return cfg, task, rows, [task.env_factory(r) for r in rows]


def test_generation_stops_at_the_end_of_turn_token(real):
    model, tok = real
    end = tok.convert_tokens_to_ids("<|im_end|>")
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "Say hello."}], tokenize=False, add_generation_prompt=True
    )
    prompt_ids = [tok(prompt, add_special_tokens=False)["input_ids"]] * 2
    params = SamplingParams(max_new_tokens=40, greedy=True)
    first = HFBackend(model, tok, torch.device("cpu")).generate(prompt_ids, params)
    assert all(c.ids[-1] == end and end not in c.ids[:-1] and not c.truncated for c in first)
    assert len(first[0].ids) < 40 and "<|im_end|>" not in first[0].text and first[0].text.strip()
    # A tokenizer whose eos is not the template's end of turn (as in several hub checkpoints): the model's
    # generation config still names <|im_end|>, and the turn still ends there (it used to run to the cap).
    other = copy.deepcopy(tok)
    other.eos_token = "<|endoftext|>"
    assert other.eos_token_id != end and end in stop_token_ids(other, model)
    again = HFBackend(model, other, torch.device("cpu")).generate(prompt_ids, params)
    assert [c.ids for c in again] == [c.ids for c in first] and not any(c.truncated for c in again)


def test_engine_token_ids_reach_the_loss_unchanged_across_a_bpe_merge(real):
    model, tok = real
    cfg, task, rows, factories = arithmetic(tok)
    newline = tok("\n", add_special_tokens=False)["input_ids"]
    # The prompt ends with "assistant\n" (token "\n"); a completion starting with the token "\n\n" is, as text,
    # "\n\n\n": tokenised again it becomes "\n\n" + "\n" with the boundary moved into the prompt. Only the
    # engine's ids say what was sampled.
    ids = (
        tok("\n\n", add_special_tokens=False)["input_ids"]
        + tok("125", add_special_tokens=False)["input_ids"]
        + [tok.convert_tokens_to_ids("<|im_end|>")]
    )
    assert len(ids) == 5
    engine = EngineIds(tok, ids)
    episodes = run_episodes(
        factories, rows, 2, engine, tok, SamplingParams(max_new_tokens=8), settings=episode_settings(cfg, task)
    )
    step = episodes[0].steps[0]
    assert step.prompt_ids[-1:] == newline and step.action_ids == ids
    retokenised = tok(step.prompt_text + tok.decode(ids), add_special_tokens=False)["input_ids"]
    assert retokenised != step.prompt_ids + ids  # the premise: text would merge across the boundary
    samples = pack_samples(episodes, torch.ones(len(episodes)), tok.pad_token_id, mask_truncated=False)
    for row in range(len(episodes)):
        assert samples.batch.completion_ids[row, : len(ids)].tolist() == ids
    with torch.no_grad():
        logps, _ = completion_logps(model, samples.batch)
        full = torch.tensor([step.prompt_ids + ids])
        direct = torch.log_softmax(model(input_ids=full).logits[0, -len(ids) - 1 : -1], -1)
        direct = direct.gather(-1, torch.tensor(ids).unsqueeze(-1)).squeeze(-1)
    assert float((logps[0, : len(ids)] - direct).abs().max()) < 1e-4


def test_system_prompt_and_chat_template_kwargs_reach_the_template(real, smollm2_dir, tmp_path):
    _, tok = real
    tok = copy.deepcopy(tok)
    # the model's own template, plus a kwarg it reads (as Qwen3's enable_thinking)
    template = (
        (smollm2_dir / "chat_template.jinja")
        .read_text()
        .replace("{{ '<|im_start|>assistant\n' }}", "{{ '<|im_start|>assistant\n' + (answer_prefix or '') }}")
    )
    assert "answer_prefix" in template
    (tmp_path / "template.jinja").write_text(template)
    cfg, task, rows, factories = arithmetic(
        tok,
        system_prompt="Reply with only the number.",
        chat_template=str(tmp_path / "template.jinja"),
        chat_template_kwargs={"answer_prefix": "Answer: "},
    )
    engine = EngineIds(tok, [tok.convert_tokens_to_ids("<|im_end|>")])
    episodes = run_episodes(
        factories, rows, 1, engine, tok, SamplingParams(max_new_tokens=4), settings=episode_settings(cfg, task)
    )
    text = episodes[0].steps[0].prompt_text
    assert text.startswith("<|im_start|>system\nReply with only the number.<|im_end|>\n<|im_start|>user\n")
    assert "SmolLM" not in text  # the template's default system message is replaced, not added to
    assert text.endswith("<|im_start|>assistant\nAnswer: ")
    assert engine.prompts[0] == tok(text, add_special_tokens=False)["input_ids"]
