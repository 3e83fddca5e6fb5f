"""A generation backend that plays a scripted policy: ``reply(prompt_text) -> str``.

It answers through the same seam as HF or vLLM (token ids in, completion ids out, the end-of-turn
token appended), so a scripted solver's conversations go through the real runner, parser, tools
and chat template. Used to make expert traces for the tool SFT warm start (``job/tool_sft.py``)
and to test the conversation runner on known turns.
"""

from __future__ import annotations

from typing import Callable

from grouprl.rollout.generation import Completion, SamplingParams


class ScriptedBackend:
    def __init__(self, tokenizer, reply: Callable[[str], str]):
        self.tokenizer, self.reply = tokenizer, reply

    def generate(self, prompt_ids: list[list[int]], params: SamplingParams) -> list[Completion]:
        out = []
        for ids in prompt_ids:
            text = self.reply(self.tokenizer.decode(ids))
            tokens = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            cut = len(tokens) >= params.max_new_tokens
            tokens = tokens[: params.max_new_tokens] if cut else tokens + [self.tokenizer.eos_token_id]
            out.append(Completion(tokens, self.tokenizer.decode(tokens, skip_special_tokens=True), cut))
        return out

    def load_weights(self, model) -> None:
        pass
