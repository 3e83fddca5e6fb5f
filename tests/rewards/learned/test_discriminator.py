"""The GAIL discriminator and the mixer on a tiny local classifier (built with save_pretrained in the
hub format; the default distilbert-base-uncased cannot be downloaded here)."""

from __future__ import annotations

import pytest
import torch

from grouprl.models.tiny_words import build_tiny_classifier
from grouprl.records import Episode, Step
from grouprl.rewards.learned.discriminator import GailDiscriminator, build_examples
from grouprl.rewards.learned.discriminator_text import choice_cut_rate, example_for
from grouprl.rewards.learned.mixer import LearnableMixer
from grouprl.tasks.slates.prompt import SYSTEM_PROMPT
from grouprl.tasks.slates.rows import prepare_rows
from grouprl.config.task_sections import GrailConfig
from grouprl.tasks.slates.settings import build_discriminator, build_mixer
from grouprl.tasks.slates.synthetic import generate_issue


@pytest.fixture(scope="module")
def rows():
    raw = generate_issue("gun_control", 40, 0, seed=0, max_prior=2)["train"]
    return prepare_rows(raw, "synthetic")[0]


@pytest.fixture(scope="module")
def disc_dir(rows, tmp_path_factory):
    corpus = SYSTEM_PROMPT + "".join(r["question"] + r["viewer"] for r in rows) + " CHOSEN VIEWER SLATE STATE: (none)"
    return build_tiny_classifier(corpus, tmp_path_factory.mktemp("disc") / "model")


def episode(row, completion, group=0, index=0) -> Episode:
    step = Step(
        prompt_text=row["question"],
        prompt_ids=[],
        action_text=completion,
        action_ids=[],
        truncated=False,
        anchor_state=None,
    )
    return Episode(group_id=group, index_in_group=index, row=row, steps=[step])


def answer(i: int) -> str:
    return f"<think>x</think><answer>{i}</answer><opinion>up</opinion>"


def wrong(row) -> int:
    return 1 if row["gold_index"] != 1 else 2


def test_positives_and_negatives(rows):
    r0, r1 = rows[0], rows[1]
    eps = [
        episode(r0, answer(r0["gold_index"])),
        episode(r0, answer(wrong(r0)), index=1),
        episode(r0, "<answer>99</answer>", index=2),
        episode(r0, "no tags", index=3),
        episode(r1, answer(wrong(r1)), group=1),
    ]
    examples = build_examples(eps)
    pos = [e for e in examples if e.label == 1]
    neg = [e for e in examples if e.label == 0]
    # one positive per distinct row (the logged click); negatives only for valid, wrong choices
    assert len(pos) == 2 and len(neg) == 2
    gold_title = r0["slate_items"][r0["gold_index"] - 1]["title"]
    assert pos[0].choice == f"CHOSEN {gold_title}"
    assert neg[0].choice == f"CHOSEN {r0['slate_items'][wrong(r0) - 1]['title']}"
    assert pos[0].context == neg[0].context and "STATE:\n" + r0["question"] in pos[0].context


def test_score_is_alpha_p_expert_for_valid_choices_only(rows, disc_dir):
    disc = GailDiscriminator(str(disc_dir), alpha=2.0, device="cpu")
    r = rows[0]
    scores = disc.score([episode(r, answer(1)), episode(r, "<answer>7</answer>"), episode(r, "1")])
    p = disc.p_expert([example_for(r, 1, 0)])[0].item()
    assert scores[0] == pytest.approx(2.0 * p) and 0 < scores[0] < 2
    assert scores[1:] == [0.0, 0.0]


def test_bare_numbers_follow_the_accuracy_reward_setting(rows, disc_dir, monkeypatch):
    """A recipe's pureacc_allow_bare_number reaches the discriminator as it reaches slate_accuracy."""
    monkeypatch.delenv("PUREACC_ALLOW_BARE_NUMBER", raising=False)
    r = rows[0]
    bare = [episode(r, str(wrong(r))), episode(r, str(r["gold_index"]), index=1)]
    off = build_discriminator(GrailConfig(gail_device="cpu"), model=str(disc_dir))
    on = build_discriminator(GrailConfig(gail_device="cpu", pureacc_allow_bare_number=True), model=str(disc_dir))
    assert off.score(bare) == [0.0, 0.0] and all(s > 0 for s in on.score(bare))
    assert [e.label for e in build_examples(bare, allow_bare_number=True)] == [1, 0]
    assert [e.label for e in build_examples(bare, allow_bare_number=False)] == [1]


def test_one_step_lowers_the_loss_on_a_fixed_batch(rows, disc_dir):
    disc = GailDiscriminator(str(disc_dir), learning_rate=1e-3, device="cpu")
    eps = [episode(r, answer(wrong(r)), group=g) for g, r in enumerate(rows[:8])]
    examples = build_examples(eps)
    before = disc.loss(examples)
    metrics = disc.update(eps)
    assert metrics["disc/positives"] == 8 and metrics["disc/negatives"] == 8
    assert metrics["disc/loss"] == pytest.approx(before, rel=1e-4)
    assert disc.loss(examples) < before
    assert set(metrics) >= {"disc/accuracy", "disc/p_expert_pos", "disc/p_expert_neg"}


def test_choice_survives_truncation(rows, disc_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(disc_dir)
    cut = choice_cut_rate(rows, tok, max_length=64)
    assert cut["original_choice_cut"] == 1.0 and cut["pair_choice_cut"] == 0.0
    long_enough = choice_cut_rate(rows, tok, max_length=4096)
    assert long_enough["original_choice_cut"] == 0.0


def test_mixer_moves_toward_the_larger_mean():
    mixer = LearnableMixer(1.0, 0.5, learning_rate=0.05)
    assert mixer.weights() == pytest.approx((2 / 3, 1 / 3))
    base, learned = torch.tensor([0.0, 0.5, 0.0]), torch.tensor([0.6, 0.7, 0.8])
    mixed = mixer.mix(base, learned)
    assert torch.allclose(mixed, 2 / 3 * base + 1 / 3 * learned)
    m = mixer.update(base, learned)
    assert m["grail/beta"] > 1 / 3 and m["grail/alpha"] + m["grail/beta"] == pytest.approx(1.0)
    for _ in range(5):
        m2 = mixer.update(learned, base)  # now the base has the larger mean
    assert m2["grail/alpha"] > m["grail/alpha"]


def test_eval_mode_freezes_both(rows, disc_dir):
    disc = GailDiscriminator(str(disc_dir), learning_rate=1e-3, device="cpu")
    mixer = LearnableMixer()
    disc.frozen = mixer.frozen = True
    weights = {k: v.clone() for k, v in disc.model.state_dict().items()}
    eps = [episode(r, answer(wrong(r)), group=g) for g, r in enumerate(rows[:4])]
    metrics = disc.update(eps)
    assert "disc/accuracy" in metrics  # still measured
    assert all(torch.equal(weights[k], v) for k, v in disc.model.state_dict().items())
    assert mixer.update(torch.zeros(3), torch.ones(3))["grail/alpha"] == pytest.approx(2 / 3)
    assert disc.steps == 0


def test_checkpoint_round_trip(rows, disc_dir, tmp_path):
    settings = GrailConfig(gail_lr=1e-3, gail_replay=16, gail_minibatch=4, gail_updates=2, gail_device="cpu")
    disc, mixer = build_discriminator(settings, model=str(disc_dir)), build_mixer(settings)
    eps = [episode(r, answer(wrong(r)), group=g) for g, r in enumerate(rows[:6])]
    disc.update(eps)
    mixer.update(torch.zeros(4), torch.ones(4))
    assert disc.steps == 2 and len(disc.buffer) == 12
    torch.save({"disc": disc.state_dict(), "mixer": mixer.state_dict()}, tmp_path / "learned.pt")
    state = torch.load(tmp_path / "learned.pt", weights_only=False)
    disc2, mixer2 = build_discriminator(settings, model=str(disc_dir)), build_mixer(settings)
    disc2.load_state_dict(state["disc"])
    mixer2.load_state_dict(state["mixer"])
    assert mixer2.weights() == mixer.weights()
    # the restored pair continues exactly like the original
    more = [episode(r, answer(wrong(r)), group=g) for g, r in enumerate(rows[6:10])]
    disc.update(more), disc2.update(more)
    mixer.update(torch.ones(2), torch.zeros(2)), mixer2.update(torch.ones(2), torch.zeros(2))
    assert all(torch.equal(a, b) for a, b in zip(disc.model.state_dict().values(), disc2.model.state_dict().values()))
    assert disc.score(more) == disc2.score(more) and mixer.weights() == mixer2.weights()


def test_word_tokenizer_round_trips_chat_prompts(rows):
    from grouprl.models.tiny_words import build_word_tokenizer

    tok = build_word_tokenizer(SYSTEM_PROMPT + "".join(r["question"] + r["gold_completion"] for r in rows))
    chat = tok.apply_chat_template(
        [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": rows[0]["question"]}],
        add_generation_prompt=True,
        tokenize=False,
    )
    ids = tok(chat)["input_ids"]
    assert tok.decode(ids) == chat
    assert len(ids) < len(chat) / 3  # words, not characters
    gold = tok(rows[0]["gold_completion"])["input_ids"]
    assert tok.decode(gold) == rows[0]["gold_completion"] and tok.unk_token_id not in gold
