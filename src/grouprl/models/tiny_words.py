"""Word-level tiny tokenizers and a tiny sequence classifier, saved in Hugging Face format.

A slate prompt is ~1.5k characters: a character tokenizer makes that 1.5k tokens, a word
tokenizer ~350. Tokens are words with their leading space (`` word``), single punctuation
marks and single whitespace characters, so decoding is exact concatenation: every text made of
corpus words round-trips. Anything else becomes the unknown token.

The classifier (a 1-layer BERT with a 2-class head, the same files as a hub checkpoint such as
``distilbert-base-uncased``) is what the tests and the tiny recipe use as the GAIL discriminator.
"""

from __future__ import annotations

import re
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

from grouprl.models.chatml import CHAT_TEMPLATE, SPECIAL

WORD_PATTERN = r" ?[A-Za-z0-9_]+| ?[^A-Za-z0-9_\s]|\s"
# Words of letters, but every digit its own token and never joined to the space before it: numbers never seen
# in the corpus still round-trip, and a number reads the same ids wherever it stands, so a model copies it
# digit by digit (the tool task: operands into a call, a tool's result into the answer).
DIGIT_WORD_PATTERN = r" ?[A-Za-z_]+|[0-9]| ?[^A-Za-z0-9_\s]|\s"
CLASSIFIER_SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def word_pieces(corpus: str, pattern: str = WORD_PATTERN) -> list[str]:
    return sorted(set(re.findall(pattern, corpus)))


def _word_core(vocab: dict[str, int], unk: str, pattern: str = WORD_PATTERN) -> Tokenizer:
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=unk))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(pattern), behavior="isolated")
    core.decoder = decoders.Fuse()
    return core


def build_word_tokenizer(corpus: str, split_digits: bool = False) -> PreTrainedTokenizerFast:
    """A causal-LM tokenizer (ChatML specials, Qwen-style chat template) over the corpus's words;
    ``split_digits``: one token per digit (``DIGIT_WORD_PATTERN``)."""
    pattern = DIGIT_WORD_PATTERN if split_digits else WORD_PATTERN
    pieces = word_pieces(
        corpus + "\nassistant\nuser\nsystem\n" + (" 0123456789" if split_digits else ""), pattern
    )  # role names follow a newline
    vocab = {tok: i for i, tok in enumerate(SPECIAL + pieces)}
    tok = PreTrainedTokenizerFast(
        tokenizer_object=_word_core(vocab, "<|endoftext|>", pattern),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def build_classifier_tokenizer(corpus: str) -> PreTrainedTokenizerFast:
    """A BERT-style tokenizer: ``[CLS] a [SEP]`` and pairs ``[CLS] a [SEP] b [SEP]`` with segment ids."""
    vocab = {tok: i for i, tok in enumerate(CLASSIFIER_SPECIAL + word_pieces(corpus.lower()))}
    core = _word_core(vocab, "[UNK]")
    core.normalizer = normalizers.Lowercase()  # uncased, like distilbert-base-uncased
    cls, sep = vocab["[CLS]"], vocab["[SEP]"]
    core.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=512,
    )


def build_tiny_classifier(
    corpus: str,
    out_dir: str | Path,
    hidden: int = 32,
    layers: int = 1,
    heads: int = 2,
    max_positions: int = 512,
    seed: int = 0,
) -> Path:
    """A 2-class ``BertForSequenceClassification`` + tokenizer, saved with ``save_pretrained``."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    tokenizer = build_classifier_tokenizer(corpus)
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=2 * hidden,
        max_position_embeddings=max_positions,
        pad_token_id=tokenizer.pad_token_id,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    config.num_labels = 2  # PretrainedConfig's setter (id2label/label2id); BertConfig's signature omits it
    model = BertForSequenceClassification(config)
    out = Path(out_dir)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
