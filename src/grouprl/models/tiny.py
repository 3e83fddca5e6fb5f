"""Build a tiny Qwen2-architecture model and a character tokenizer for a task's corpus.

Saved in Hugging Face format (``save_pretrained``), so everything downstream loads it
exactly like a hub model.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from grouprl.models.chatml import CHAT_TEMPLATE, SPECIAL


def build_tokenizer(corpus: str) -> PreTrainedTokenizerFast:
    """One token per character seen in ``corpus`` plus the role names and ChatML specials."""
    chars = sorted(set(corpus) | set("assistantusersystem\n"))
    vocab = {tok: i for i, tok in enumerate(SPECIAL + chars)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<|endoftext|>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def build_tiny_model(
    tokenizer: PreTrainedTokenizerFast,
    hidden: int = 128,
    layers: int = 4,
    heads: int = 4,
    seed: int = 0,
    max_positions: int = 512,
) -> Qwen2ForCausalLM:
    import torch

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=3 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def init_tiny(
    corpus: str,
    out_dir: str | Path,
    hidden: int = 128,
    layers: int = 4,
    heads: int = 4,
    seed: int = 0,
    tokenizer: str = "char",
    max_positions: int | None = None,
) -> Path:
    """``tokenizer``: ``char`` (one token per character), ``word`` (see tiny_words: ~4x shorter prompts) or
    ``word_digits`` (words, but one token per digit: numbers the corpus never held still round-trip).
    ``max_positions``: the declared context (default 512 for char, 4096 for word); engines such as vLLM refuse
    longer sequences (tool conversations with their schemas run past 1,000 characters)."""
    out = Path(out_dir)
    if tokenizer in ("word", "word_digits"):
        from grouprl.models.tiny_words import build_word_tokenizer

        tok, default_positions = build_word_tokenizer(corpus, split_digits=tokenizer == "word_digits"), 4096
    else:
        tok, default_positions = build_tokenizer(corpus), 512
    model = build_tiny_model(tok, hidden, layers, heads, seed, max_positions=max_positions or default_positions)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out
