"""``tool_arithmetic``: questions whose answers need tools, for conversation episodes.

Two kinds of question, half each, seeded and reproducible:

- *multiply*: "What is 4821 * 97?" (a 4-digit number times a 2-digit one, the product always six
  digits): a small model cannot multiply in its head, so it calls ``calculator`` and copies the result;
- *convert*: "How many feet are in 47 miles?" (a 2-digit number): the factor is not in the question, so it calls
  ``lookup`` ("1 mile = 5280 feet"), then ``calculator`` on the number and the factor.

``tool_questions: convert`` (section ``tool_arithmetic``) keeps only the conversions, ``multiply`` only the
products (``mixed``, the default, draws both): conversions alone are the task where per-turn credit matters,
since the calculator step depends on what the lookup step brought back (:func:`step_kind_metrics`
measures each step of the chain on its own).

The final answer is a turn with no tool call ending in ``Answer: <integer>``; it scores 1.0 when the
integer is the exact answer and 0.0 otherwise (``info["success"]``). Recipes run it with
``episode_mode: conversation`` and ``tools: [calculator, lookup]``. :func:`expert_reply` is the
scripted solver whose conversations warm the tiny model (``job/tool_sft.py``).
"""

from __future__ import annotations

import functools
import json
import random
import re
import string
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from pydantic import Field

from grouprl.config import Config, ConfigError, Section
from grouprl.records import Episode, Observation, StepResult, stable_id
from grouprl.tasks.interface import Environment, Task
from grouprl.tasks.registry import register_task
from grouprl.tools.builtin import UNIT_FACTORS

SYSTEM_PROMPT = "Use the tools to answer. End with: Answer: <number>"
EVAL_SEED_OFFSET = 1_000_000
SFT_SEED_OFFSET = 2_000_000
# the whole integer: "Answer: 79200.5" or "Answer: 79200e3" is not 79200 (a full stop after it is fine)
_ANSWER = re.compile(r"Answer:\s*(-?\d+)(?!\.?\d|[A-Za-z_])")
_MULTIPLY = re.compile(r"What is (\d+) \* (\d+)\?")
_CONVERT = re.compile(r"How many [\w ]+ are in (\d+) (\w+)s\?")
# the tool errors' wording (tools/execution.py, tools/schema.py, tools/parsers.py), so a word tokenizer reads them
_ERROR_WORDS = (
    "Error: tool call is not valid JSON; unknown tool available: unclosed tag argument arguments "
    "must be a object, got missing required it takes: timed out after raised the call has no name "
    "number integer string or"
)
_RESPONSE = re.compile(r"<tool_response>\n(.*?)\n</tool_response>", re.DOTALL)
QUESTION_KINDS = ("mixed", "multiply", "convert")
SECTION = "tool_arithmetic"  # cfg.tool_arithmetic: this task's own config section


class ToolArithmeticConfig(Section):
    tool_questions: Literal["mixed", "multiply", "convert"] = Field(
        "mixed",
        description="tool_arithmetic: which questions: both kinds half each (mixed), products only "
        "(multiply), or unit conversions only (convert: a lookup, then a calculator call on its result)",
    )

    former_sections = ("task",)


def make_row(seed: int, kinds: str = "mixed") -> dict[str, Any]:
    """Row ``seed``; a seed gives the same row of its kind whatever ``kinds`` is (the draw that picks the
    kind is always made, and ignored when the kind is fixed)."""
    if kinds not in QUESTION_KINDS:
        raise ValueError(f"tool_arithmetic: tool_questions is {kinds!r}; expected one of {', '.join(QUESTION_KINDS)}")
    rng = random.Random(seed)
    draw = rng.random()
    if kinds == "multiply" or (kinds == "mixed" and draw < 0.5):
        a, b = rng.randint(1000, 9999), rng.randint(10, 99)
        while a * b < 100_000:  # six digits, always: each digit of the answer sits where its twin in the result does
            a, b = rng.randint(1000, 9999), rng.randint(10, 99)
        return {"seed": seed, "kind": "multiply", "question": f"What is {a} * {b}?", "ground_truth": str(a * b)}
    unit = rng.choice(sorted(UNIT_FACTORS))
    n = rng.randint(10, 99)
    factor, smaller = UNIT_FACTORS[unit]
    return {
        "seed": seed,
        "kind": "convert",
        "question": f"How many {smaller} are in {n} {unit}s?",
        "ground_truth": str(n * factor),
    }


def rows(n: int, offset: int = 0, kinds: str = "mixed") -> list[dict[str, Any]]:
    return [make_row(offset + i, kinds) for i in range(n)]


def step_kind_metrics(row: dict[str, Any], episode: Episode) -> dict[str, bool]:
    """Each step of the chain on its own, read off the tool results the episode saw: ``lookup_right``
    (a conversion's lookup answered for the question's unit), ``compute_right`` (a calculator call returned
    the exact answer), ``answer_right`` (the final answer is it). A result only counts when the tool
    produced it, never when the model merely wrote it."""
    truth = row["ground_truth"]
    results = [r for s in episode.steps for r in (s.tool_results or []) if not r.get("error")]
    calls = {c.get("id"): c.get("name") for s in episode.steps for c in (s.tool_calls or [])}
    named = [(calls.get(r.get("tool_call_id"), r.get("name")), str(r.get("content", "")).strip()) for r in results]
    convert = _CONVERT.search(row["question"])
    unit = convert.group(2) if convert else None
    return {
        "lookup_right": unit is not None and any(n == "lookup" and c.startswith(f"1 {unit} = ") for n, c in named),
        "compute_right": any(n == "calculator" and c == truth for n, c in named),
        "answer_right": bool(episode.success),
    }


class ToolAnswerEnv(Environment):
    """The question as the first chat, and a judge of the final answer (tool calls never reach it)."""

    def __init__(self, question: str, answer: str, system_prompt: str = SYSTEM_PROMPT):
        self.question, self.answer, self.system_prompt = question, answer, system_prompt

    def reset(self, seed: int | None = None) -> Observation:
        messages = [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": self.question}]
        return Observation(text=self.question, anchor_state=stable_id(self.question), messages=messages)

    def step(self, action: str) -> StepResult:
        found = _ANSWER.findall(action)
        correct = bool(found) and found[-1] == self.answer
        return StepResult(
            None,
            1.0 if correct else 0.0,
            True,
            {"success": correct, "answered": bool(found), "prediction": found[-1] if found else None},
        )


def expert_reply(prompt_text: str, parser_format=None) -> str:
    """The scripted solver's next turn, read off the conversation so far (question and tool results)."""
    from grouprl.tools.parsers import PARSERS, ToolCall

    write = parser_format or PARSERS["hermes"].format_calls
    question = _last_question(prompt_text)
    results = _RESPONSE.findall(prompt_text)
    multiply, convert = _MULTIPLY.search(question), _CONVERT.search(question)
    if multiply:
        if not results:
            return write([ToolCall("calculator", {"expression": f"{multiply.group(1)} * {multiply.group(2)}"})])
        return f"Answer: {results[-1].strip()}"
    if convert:
        n, unit = convert.group(1), convert.group(2)
        if not results:
            return write([ToolCall("lookup", {"unit": unit})])
        if len(results) == 1:
            factor = re.search(r"= (\d+)", results[0])
            if factor is None:
                raise ValueError(
                    f"expert_reply: the lookup answered {results[0][:80]!r}; expected '1 <unit> = <n> <unit>'"
                )
            return write([ToolCall("calculator", {"expression": f"{n} * {factor.group(1)}"})])
        return f"Answer: {results[-1].strip()}"
    raise ValueError(f"expert_reply: no tool_arithmetic question in the prompt: {question[:80]!r}")


def _last_question(prompt_text: str) -> str:
    turns = [t for t in prompt_text.split("<|im_start|>user\n")[1:] if not t.startswith("<tool_response>")]
    return turns[-1] if turns else ""


@dataclass
class ToolArithmeticTask(Task):
    name: str
    train_rows: list[dict[str, Any]]
    eval_rows: list[dict[str, Any]]
    system_prompt: str = SYSTEM_PROMPT
    reward_names: list[str] = field(default_factory=list)  # the environment's answer check is the reward
    reward_weights: list[float] = field(default_factory=list)
    reward_kwargs: dict[str, dict[str, Any]] = field(default_factory=dict)
    correct_reward: str | None = None
    tools: list[str] = field(default_factory=lambda: ["calculator", "lookup"])
    expert_reply: Callable[[str], str] | None = field(default=expert_reply, repr=False)  # the module's solver
    questions: str = "mixed"  # QUESTION_KINDS: which rows sft_rows draws
    multi_step = True
    # words, one token per digit: a conversation is ~450 tokens instead of ~1,300 characters, and the model
    # copies numbers digit by digit (char tokens left the 0.3M-parameter model at 0/16 after 200 SFT steps)
    tiny_tokenizer = "word_digits"
    tiny_max_positions = 2048  # the system turn with the tool schemas alone is ~900 characters

    def env_factory(self, row: dict[str, Any]):
        return functools.partial(ToolAnswerEnv, row["question"], row["ground_truth"], self.system_prompt)

    def seed_of(self, row: dict[str, Any]) -> int | None:
        return row.get("seed")

    def tokenizer_corpus(self) -> str:
        """Printable ASCII (a char tokenizer), and the words a conversation holds (a word tokenizer): the
        system prompt, the tool template and schemas, every question and lookup result, the error messages."""
        from grouprl.tools import resolve_tools
        from grouprl.tools.chat_template import TOOL_CHAT_TEMPLATE

        schemas = "\n".join(json.dumps(t.schema) for t in resolve_tools(self.tools, False))
        units = " ".join(
            f'How many {s} are in 7 {u}s? 1 {u} = {f} {s} "{u}" "{u}s"' for u, (f, s) in UNIT_FACTORS.items()
        )
        return "\n".join(
            [
                string.printable,
                self.system_prompt,
                TOOL_CHAT_TEMPLATE.replace("\\n", "\n"),
                schemas,
                units,
                "What is 12 * 3?\nAnswer: 36",
                _ERROR_WORDS,
            ]
        )

    def sft_rows(self, n: int) -> list[dict[str, Any]]:
        """Rows for expert traces: seeds neither training nor evaluation uses."""
        return rows(n, SFT_SEED_OFFSET, self.questions)

    def eval_metrics(self, episodes: list[Episode]) -> dict[str, float]:
        """``steps/<kind>/<step>_right``: the share of episodes of each question kind whose lookup, calculator
        call and final answer were right (:func:`step_kind_metrics`); for conversions also how often the
        calculator step was right after a right lookup and after a wrong one (``compute_right_given_lookup_
        right|wrong``: how much the second call depends on the first, for a model that may know factors)."""
        out: dict[str, float] = {}
        for kind in ("multiply", "convert"):
            mine = [step_kind_metrics(ep.row, ep) for ep in episodes if (ep.row or {}).get("kind") == kind]
            for name in ("lookup_right", "compute_right", "answer_right") if mine else ():
                if kind == "convert" or name != "lookup_right":
                    out[f"steps/{kind}/{name}"] = sum(m[name] for m in mine) / len(mine)
            for lookup in ("right", "wrong") if kind == "convert" else ():
                after = [m["compute_right"] for m in mine if m["lookup_right"] == (lookup == "right")]
                if after:
                    out[f"steps/convert/compute_right_given_lookup_{lookup}"] = sum(after) / len(after)
        return out


@register_task("tool_arithmetic", max_new_tokens=96, section=(SECTION, ToolArithmeticConfig))
def build_tool_arithmetic(cfg: Config) -> ToolArithmeticTask:
    if cfg.tools.episode_mode != "conversation":
        raise ConfigError(
            f"task 'tool_arithmetic' needs episode_mode: conversation (section tools); got {cfg.tools.episode_mode!r}"
        )
    n_train, n_eval = cfg.task.n_train or 10_000, max(cfg.eval.n_eval, 1)
    kinds = getattr(cfg, SECTION).tool_questions  # a registered section: Config's type does not name it
    return ToolArithmeticTask(
        "tool_arithmetic",
        rows(n_train, 0, kinds),
        rows(n_eval, EVAL_SEED_OFFSET, kinds),
        cfg.task.system_prompt or SYSTEM_PROMPT,
        questions=kinds,
    )
