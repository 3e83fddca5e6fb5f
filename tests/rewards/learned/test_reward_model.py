"""A reward model named in ``rewards:``: a sequence classifier scoring the conversation.

The hub cannot be reached from this machine, so every classifier here is built with transformers
(a small Qwen2ForSequenceClassification over the tiny character tokenizer) and saved locally with
``save_pretrained``; the reward loads it by path exactly as it would load a hub id.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from grouprl.config import ConfigError
from grouprl.records import Episode, Step
from grouprl.rewards.learned.reward_model import SequenceClassifier, looks_like_model
from grouprl.rewards.scorer import Scorer

CORPUS = "abcdefghijklmnopqrstuvwxyz0123456789+=?:. QA"
# Not the policy's ChatML: the reward model was "trained" on this layout, so it must score through it.
RM_TEMPLATE = "{% for m in messages %}{{ 'Q' if m['role'] == 'user' else 'A' }}: {{ m['content'] }}\n{% endfor %}"


def save_classifier(out: Path, num_labels: int = 1, labels: list[str] | None = None, dropout: float = 0.0) -> Path:
    from transformers import Qwen2Config, Qwen2ForSequenceClassification

    from grouprl.models.tiny import build_tokenizer

    tok = build_tokenizer(CORPUS)
    tok.chat_template = RM_TEMPLATE
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        num_labels=num_labels,
        pad_token_id=tok.pad_token_id,
        attention_dropout=dropout,
    )
    if labels:
        config.id2label = dict(enumerate(labels))
        config.label2id = {n: i for i, n in enumerate(labels)}
    model = Qwen2ForSequenceClassification(config)
    with torch.no_grad():  # a head that actually separates inputs (random init is near zero)
        model.score.weight.normal_(0, 1.0)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory) -> Path:
    return save_classifier(tmp_path_factory.mktemp("rm") / "rm")


def episodes(answers: list[str], question: str = "3+4=?") -> list[Episode]:
    out = []
    for i, answer in enumerate(answers):
        ep = Episode(group_id=i // 2, index_in_group=i % 2, row={"question": question, "ground_truth": "7"})
        ep.steps.append(
            Step(
                prompt_text="p",
                prompt_ids=[1],
                action_text=answer,
                action_ids=[2],
                truncated=False,
                anchor_state=None,
                messages=[{"role": "user", "content": question}],
            )
        )
        out.append(ep)
    return out


def one_by_one(path: Path, conversation: list[dict]) -> float:
    """The reference: the saved model and tokenizer, one unpadded text through the RM's own template."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path).eval()
    ids = tok(tok.apply_chat_template(conversation, tokenize=False), add_special_tokens=False, return_tensors="pt")
    with torch.no_grad():
        return model(**ids).logits[0, 0].item()


def test_names_that_are_models():
    assert looks_like_model("OpenAssistant/reward-model-deberta-v3-large-v2")
    assert not looks_like_model("gsm8k_final") and not looks_like_model("my/rewards.py:fn")
    assert not looks_like_model("pkg.module:fn")


def test_batched_scores_through_the_models_own_template_equal_one_by_one(rm_dir):
    answers = ["7", "seven is the answer", "8", "", "77777777"]
    scorer = Scorer([str(rm_dir)], [1.0], max_error_fraction=1.0, reward_kwargs={str(rm_dir): {"batch_size": 2}})
    eps = episodes(answers)
    scores = scorer.score(eps)
    got = [v.parts[str(rm_dir)] for v in scores.verdicts]
    want = [
        one_by_one(rm_dir, [{"role": "user", "content": "3+4=?"}, {"role": "assistant", "content": a}]) for a in answers
    ]
    # Right padding in batches of 2, read at the last real token: the same logits as unpadded, one by one.
    assert got == pytest.approx(want, abs=1e-5)
    assert len(set(round(g, 4) for g in got)) == len(got)  # the head separates the inputs
    assert scores.episode.tolist() == pytest.approx(want, abs=1e-5)
    assert scores.metrics["reward_errors"] == 0


def test_eval_mode_and_no_grad_even_with_dropout(tmp_path):
    path = save_classifier(tmp_path / "rm_dropout", dropout=0.5)
    classifier = SequenceClassifier(str(path))
    classifier.model.train()  # someone left it in training mode: scoring must still be deterministic
    conv = [[{"role": "user", "content": "1+1=?"}, {"role": "assistant", "content": "2"}]] * 3
    first, _ = classifier.logits(conv)
    second, _ = classifier.logits(conv)
    assert torch.equal(first, second) and not first.requires_grad
    assert all(not p.requires_grad for p in classifier.model.parameters())


def test_multi_label_head_needs_a_label_and_reads_it(tmp_path):
    path = save_classifier(tmp_path / "sentiment", num_labels=3, labels=["negative", "neutral", "positive"])
    with pytest.raises(ConfigError, match=r"has 3 labels \['negative', 'neutral', 'positive'\]; option 'label'"):
        Scorer([str(path)], [1.0])
    with pytest.raises(ConfigError, match="option 'label' is 'happy'"):
        Scorer([str(path)], [1.0], reward_kwargs={str(path): {"label": "happy"}})
    eps = episodes(["7", "8"])
    raw = SequenceClassifier(str(path)).logits(
        [[{"role": "user", "content": "3+4=?"}, {"role": "assistant", "content": a}] for a in ["7", "8"]]
    )[0]
    for options, want in [
        ({"label": "positive"}, raw[:, 2]),
        ({"label": 0}, raw[:, 0]),
        ({"label": "positive", "normalize": "softmax"}, torch.softmax(raw, -1)[:, 2]),
    ]:
        verdicts = Scorer([str(path)], [1.0], reward_kwargs={str(path): options}).score(eps).verdicts
        assert [v.parts[str(path)] for v in verdicts] == pytest.approx(want.tolist(), abs=1e-5)


def test_normalisations(rm_dir):
    eps = episodes(["7", "8", "abc"])
    raw = [
        one_by_one(rm_dir, [{"role": "user", "content": "3+4=?"}, {"role": "assistant", "content": a}])
        for a in ["7", "8", "abc"]
    ]
    verdicts = Scorer([str(rm_dir)], [1.0], reward_kwargs={str(rm_dir): {"normalize": "sigmoid"}}).score(eps).verdicts
    assert [v.parts[str(rm_dir)] for v in verdicts] == pytest.approx(
        torch.sigmoid(torch.tensor(raw)).tolist(), abs=1e-5
    )
    opts = {"normalize": "standard", "mean": 0.5, "std": 2.0}
    verdicts = Scorer([str(rm_dir)], [1.0], reward_kwargs={str(rm_dir): opts}).score(eps).verdicts
    assert [v.parts[str(rm_dir)] for v in verdicts] == pytest.approx([(r - 0.5) / 2 for r in raw], abs=1e-5)
    with pytest.raises(ConfigError, match="option 'normalize' is 'zscore'"):
        Scorer([str(rm_dir)], [1.0], reward_kwargs={str(rm_dir): {"normalize": "zscore"}})
    with pytest.raises(ConfigError, match=r"unknown option\(s\) \['temperature'\]"):
        Scorer([str(rm_dir)], [1.0], reward_kwargs={str(rm_dir): {"temperature": 2}})


def test_long_conversation_cut_from_the_left_and_flagged(rm_dir):
    classifier = SequenceClassifier(str(rm_dir), max_length=16)
    long_question = [{"role": "user", "content": "q" * 60}, {"role": "assistant", "content": "7"}]
    short = [{"role": "user", "content": "1"}, {"role": "assistant", "content": "7"}]
    logits, cut = classifier.logits([long_question, short])
    assert cut == [True, False]
    batch, _ = classifier.encode([classifier.render(long_question)])
    kept = "".join(classifier.tokenizer.decode(batch["input_ids"][0]).split())
    assert kept.endswith("qA:7") and len(batch["input_ids"][0]) == 16  # the answer is kept, the question cut


def test_empty_episode_is_an_error_not_a_score(rm_dir):
    eps = episodes(["7", "8"])
    eps[1].steps.clear()
    v = Scorer([str(rm_dir)], [1.0], max_error_fraction=1.0).score(eps).verdicts
    assert v[0].parts[str(rm_dir)] is not None and not v[0].errors
    assert v[1].parts[str(rm_dir)] is None and "empty conversation" in v[1].errors[0]


def test_a_missing_model_is_one_clear_line(tmp_path):
    (tmp_path / "not_a_model").mkdir()
    (tmp_path / "not_a_model" / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"reward model '.*not_a_model': cannot be loaded as a sequence classifier"):
        Scorer([str(tmp_path / "not_a_model")], [1.0])
