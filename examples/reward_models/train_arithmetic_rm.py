"""Train a small reward model for the tiny arithmetic task and save it as a sequence-classifier folder.

The hub cannot be reached here, so the worked example builds its own: a 2-layer Qwen2 sequence classifier
over the tiny model's character tokenizer, trained to tell a right sum from a near miss (one digit changed,
off by one or ten, digits swapped), on the task's training questions only. It scores the conversation
rendered through its own chat template (ChatML), as ``rewards: [path/to/this/folder]`` will.

    python examples/reward_models/train_arithmetic_rm.py --out runs/arithmetic_rm [--steps 800] [--units_only]

Prints its accuracy on held-out questions (the task's evaluation rows, never trained on).
"""

from __future__ import annotations

import argparse
import random

import torch
from transformers import AutoTokenizer, Qwen2Config, Qwen2ForSequenceClassification

from grouprl.models.tiny import build_tokenizer
from grouprl.run_config import build_config
from grouprl.tasks import load_task


def near_miss(answer: str, rng: random.Random, units_only: bool = False) -> str:
    value = int(answer)
    if units_only:  # the last digit changed: an easier rule to learn (it depends on the operands' last digits)
        return answer[:-1] + str((int(answer[-1]) + rng.randrange(1, 10)) % 10)
    kind = rng.randrange(4)
    if kind == 0 and len(answer) > 1:
        return answer[::-1] if answer[::-1] != answer else str(value + 1)
    if kind == 1:
        digits = list(answer)
        i = rng.randrange(len(digits))
        digits[i] = str((int(digits[i]) + rng.randrange(1, 10)) % 10)
        miss = "".join(digits).lstrip("0") or "0"
        return miss if miss != answer else str(value + 1)
    return str(max(0, value + rng.choice([-10, -1, 1, 10])))


def examples(rows, tok, rng: random.Random, units_only: bool = False, even: bool = False) -> list[tuple[str, float]]:
    out = []
    for row in rows:
        pairs = [(row["ground_truth"], 1.0), (near_miss(row["ground_truth"], rng, units_only), 0.0)]
        if even:  # a taste, not a check: any 2-3 digit answer, preferred when its last digit is even
            pairs = [(a, float(int(a[-1]) % 2 == 0)) for a in (str(rng.randrange(10, 199)), str(rng.randrange(10, 199)))]
        for answer, label in pairs:
            messages = [{"role": "user", "content": row["question"]}, {"role": "assistant", "content": answer}]
            out.append((tok.apply_chat_template(messages, tokenize=False), label))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--batch_size", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--units_only", action="store_true", help="near misses differ in the last digit only")
    parser.add_argument("--even", action="store_true", help="a preference instead of a check: even last digits "
                        "(learned in ~100 steps; a tiny classifier does not learn to verify sums in minutes)")
    parser.add_argument("--init_from", default=None, help="start from this causal-LM folder (e.g. the SFT-warmed "
                        "policy), as reward models usually are; its tokenizer is used")
    parser.add_argument("--learning_rate", type=float, default=2e-3)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    task = load_task(build_config(None, {"n_eval": 400}, environ={}))
    tok = build_tokenizer(task.tokenizer_corpus())
    if args.init_from:
        from transformers import AutoModelForSequenceClassification

        tok = AutoTokenizer.from_pretrained(args.init_from)
        model = AutoModelForSequenceClassification.from_pretrained(args.init_from, num_labels=1)
        model.config.pad_token_id = tok.pad_token_id
    config = Qwen2Config(vocab_size=len(tok), hidden_size=64, intermediate_size=192, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, num_labels=1,
                         pad_token_id=tok.pad_token_id, tie_word_embeddings=False)
    if not args.init_from:
        model = Qwen2ForSequenceClassification(config)
    # Train on the tokenizer exactly as scoring will load it: AutoTokenizer on the finished folder, where
    # config.json (a qwen2 model) makes it a Qwen2Tokenizer, which drops the tiny tokenizer's newlines.
    model.config.save_pretrained(args.out)
    tok.save_pretrained(args.out)
    tok = AutoTokenizer.from_pretrained(args.out)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=args.learning_rate, total_steps=args.steps,
                                                   pct_start=0.1)
    held_out = examples(task.eval_rows, tok, random.Random(args.seed + 1), args.units_only, args.even)

    def accuracy(pairs) -> float:
        model.eval()
        with torch.no_grad():
            batch = tok([t for t, _ in pairs], padding=True, return_tensors="pt", add_special_tokens=False)
            logits = model(**batch).logits[:, 0]
        model.train()
        return float(((logits > 0).float() == torch.tensor([y for _, y in pairs])).float().mean())

    for step in range(1, args.steps + 1):
        pairs = examples(rng.sample(task.train_rows, args.batch_size // 2), tok, rng, args.units_only, args.even)
        batch = tok([t for t, _ in pairs], padding=True, return_tensors="pt", add_special_tokens=False)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model(**batch).logits[:, 0],
                                                                     torch.tensor([y for _, y in pairs]))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        if step % 50 == 0 or step == args.steps:
            print(f"step {step}: loss {loss.item():.3f}, held-out accuracy {accuracy(held_out):.3f}", flush=True)
    model.save_pretrained(args.out)
    tok.save_pretrained(args.out)
    print(f"saved {args.out}; held-out accuracy {accuracy(held_out):.3f} on {len(held_out)} examples")


if __name__ == "__main__":
    main()
