"""The conversation episode runner: one growing chat per episode, with tool calls in the template's format.

``episode_mode: conversation`` (beside the step-wise ``window`` runner of ``rollout/runner.py``). An
episode starts from the environment's first observation (its ``messages``, or the instructions
as the system turn and the observation as the user turn) rendered with the tools' schemas
(``apply_chat_template(..., tools=...)``). Then, turn after turn, for all live episodes in one
batched ``generate`` call:

1. the assistant turn is parsed by the template's parser (``tools/parsers.py``);
2. no call: it is the final answer, which the environment judges (``env.step(answer)``), and the
   episode ends; calls: each is run in the episode's own :class:`~grouprl.tools.ToolSession`
   and its result appended as a ``tool`` message. A malformed call, an unknown tool or wrong
   arguments is answered with an error message, counted, and makes the turn invalid (charged
   ``invalid_action_penalty``, as an unparsable action is in window mode);
3. the episode also ends when a turn asks for more calls than ``max_tool_calls`` leaves
   (every attempted call counts, malformed ones too, so a model that keeps fumbling is stopped),
   when the next prompt plus ``max_new_tokens`` would pass ``max_conversation_tokens``, or when a
   turn is cut at ``max_new_tokens``.

Token ids are never re-derived from text: turn t+1's prompt is turn t's prompt ids, then the ids
the engine generated, then the template's tokens for the tool messages and the next assistant
header (:func:`continuation_text`). So each step's prompt extends the previous one, and the
episode is scored once as one sequence with a loss mask on the generated tokens only
(``train/conversation_samples.py``).

Each step's ``anchor_state`` is the tool-interaction state before the turn (:func:`tool_state`):
the set of (tool, normalised arguments, normalised result) seen so far, so GiGPO compares turns
of a group taken with the same information in hand.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from grouprl.config import Config, ConfigError
from grouprl.records import Episode, grouped_episodes, Step
from grouprl.rollout.turn_cache import episodes_ended
from grouprl.rollout.env_pool import EnvFactory, EnvPool, LocalEnvPool
from grouprl.rollout.generation import GenerationBackend, SamplingParams
from grouprl.tools import INVALID_KINDS, Tool, ToolOutcome, ToolSession, get_parser, parse_turn
from grouprl.tools.chat_template import ensure_tool_template


@dataclass
class ConversationSettings:
    tools: list[Tool] = field(default_factory=list)
    parser: str = "hermes"
    max_tool_calls: int = 4  # calls an episode may make (malformed ones count)
    max_conversation_tokens: int | None = None  # context cap: prompt + max_new_tokens
    tool_timeout_s: float = 10.0
    sandbox_backend: str = "auto"
    invalid_action_penalty: float = 0.1  # charged to a turn with a malformed call, unknown tool or wrong arguments
    anchor: str = "tool_state"  # GiGPO anchor states: tool_state | turn (the turn index alone)
    chat_template: str = "auto"  # tools/chat_template.py: auto | qwen25 | own
    chat_template_kwargs: dict[str, Any] | None = None

    @property
    def schemas(self) -> list[dict[str, Any]]:
        return [t.schema for t in self.tools]


# --- the tool-interaction state (GiGPO anchors) ----------------------------------------------------
_SPACES = re.compile(r"\s+")
_AROUND_PUNCTUATION = re.compile(r"\s*([^\w\s])\s*")


def normalise_value(value: Any) -> Any:
    """Arguments as a state: whitespace around punctuation and runs of spaces do not matter, nor
    does 3.0 vs 3; keys are sorted when dumped."""
    if isinstance(value, str):
        return _AROUND_PUNCTUATION.sub(r"\1", _SPACES.sub(" ", value.strip()))
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {str(k): normalise_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalise_value(v) for v in value]
    return value


def interaction_key(outcome: ToolOutcome) -> str:
    """``name(arguments) -> result``; an error is its kind, so two wordings of one failure match."""
    arguments = json.dumps(normalise_value(outcome.arguments), sort_keys=True, ensure_ascii=False)
    result = f"error:{outcome.error}" if outcome.error else normalise_value(outcome.content)
    return f"{outcome.name or '?'}({arguments}) -> {result}"


def tool_state(interactions: list[str]) -> str:
    """The anchor state after these interactions: the set of them, in a stable order (a repeated call
    that brings nothing new leaves the state where it was; the order of independent calls does
    not matter). ``"start"`` before any call."""
    return " | ".join(sorted(set(interactions))) or "start"


# --- the template's tokens between turns -------------------------------------------------------------
def initial_prompt(tokenizer, messages: list[dict[str, Any]], settings: ConversationSettings) -> tuple[str, list[int]]:
    text = tokenizer.apply_chat_template(
        messages,
        tools=settings.schemas or None,
        add_generation_prompt=True,
        tokenize=False,
        **(settings.chat_template_kwargs or {}),
    )
    return text, tokenizer(text, add_special_tokens=False)["input_ids"]


def continuation_text(
    tokenizer,
    history: list[dict[str, Any]],
    appended: list[dict[str, Any]],
    settings: ConversationSettings,
    end_of_turn: str,
) -> str:
    """What the template writes after an assistant turn's end of turn: the ``appended`` messages (tool
    results) and the next assistant header. Rendered with the whole conversation (templates group
    consecutive tool messages), and checked to extend the rendering without them. ``end_of_turn`` is the
    text of the stop token the model generated; a model may stop on any of its stop ids (the tokenizer's
    eos, every eos of its generation config), and when the template does not write that one the turn
    ends where the template ends it: after the last special token of its rendering of the turn."""
    kwargs = dict(tools=settings.schemas or None, tokenize=False, **(settings.chat_template_kwargs or {}))
    before = tokenizer.apply_chat_template(history, **kwargs)
    after = tokenizer.apply_chat_template(history + appended, add_generation_prompt=True, **kwargs)
    end = _turn_end(tokenizer, before, end_of_turn)
    if end < 0 or not after.startswith(before[:end]):
        raise ValueError(
            "chat template: appending a tool message changes how the earlier turns render, so the "
            "conversation cannot grow token by token; use a template whose turns are a prefix of "
            "the next rendering (e.g. tool_chat_template: qwen25)"
        )
    return after[end:]


def _turn_end(tokenizer, rendered: str, end_of_turn: str) -> int:
    """The index just after the rendered assistant turn's end of turn, or -1: the generated stop token when
    it is a special token the template wrote, else the template's own (the last special token it wrote);
    a template without special tokens: the generated stop text's last occurrence."""
    specials = set(tokenizer.all_special_tokens) | set(getattr(tokenizer, "get_added_vocab", dict)())
    if end_of_turn in specials and end_of_turn in rendered:
        return rendered.rfind(end_of_turn) + len(end_of_turn)
    found = max(((rendered.rfind(t), t) for t in specials if t), default=(-1, ""))
    if found[0] >= 0:
        return found[0] + len(found[1])
    cut = rendered.rfind(end_of_turn) if end_of_turn else -1
    return cut + len(end_of_turn) if cut >= 0 else -1


def turn_text(tokenizer, completion) -> tuple[str, str]:
    """(the turn's text without its stop token, the stop token's text; "" for a turn cut at max_new_tokens).
    Backends decode without special tokens; a stop id that is an ordinary token would stay in the text,
    so it is cut here, whichever stop id ended the turn."""
    if completion.truncated or not completion.ids:
        return completion.text, ""
    stop = tokenizer.decode(completion.ids[-1:])
    return completion.text.removesuffix(stop), stop


# --- the runner ------------------------------------------------------------------------------------
@dataclass
class _Live:
    messages: list[dict[str, Any]]
    prompt_text: str
    prompt_ids: list[int]
    session: ToolSession
    interactions: list[str] = field(default_factory=list)
    calls_made: int = 0
    observation: str = ""


def run_conversation_episodes(
    factories: list[EnvFactory],
    rows: list[dict[str, Any]],
    group_size: int,
    backend: GenerationBackend,
    tokenizer,
    params: SamplingParams,
    settings: ConversationSettings,
    seeds: list[int | None] | None = None,
    pool: EnvPool | None = None,
    first_group: int = 0,
) -> list[Episode]:
    """``group_size`` conversation episodes per group, grouped and in order (``run_episodes``' contract)."""
    pool = pool or LocalEnvPool()
    parser = get_parser(settings.parser)
    ensure_tool_template(tokenizer, settings.chat_template)  # installed on the tokenizer: saved with checkpoints
    episodes = grouped_episodes(rows, group_size, seeds, first_group, conversation=True)
    observations, instructions = pool.start(
        [factories[ep.group_id - first_group] for ep in episodes], [ep.seed for ep in episodes]
    )
    live = _start(observations, instructions, tokenizer, settings)
    turn = 0
    while live:
        order = sorted(live)
        completions = backend.generate([live[i].prompt_ids for i in order], params)
        finals: list[tuple[int, str]] = []
        for i, completion in zip(order, completions):
            final = _take_turn(episodes[i], live, i, completion, tokenizer, parser, turn, settings, params)
            if final is not None:
                finals.append((i, final))
        if finals:
            results = pool.step([i for i, _ in finals], [answer for _, answer in finals])
            for (i, _), result in zip(finals, results):
                step = episodes[i].steps[-1]
                step.env_reward, step.env_info = float(result.reward), dict(result.info)
                episodes[i].done = True
                _end(episodes[i], live, i, "answer")
        turn += 1
    episodes_ended(backend)  # no kept conversation has another turn: its KV cache goes before the update
    return episodes


def _start(observations, instructions, tokenizer, settings: ConversationSettings) -> dict[int, _Live]:
    """Every episode's opening chat and its prompt; a group's episodes share their first prompt (rendered once)."""
    live: dict[int, _Live] = {}
    rendered: dict[tuple, tuple[str, list[int]]] = {}
    for i, obs in enumerate(observations):
        messages = (
            [dict(m) for m in obs.messages]
            if obs.messages is not None
            else (
                ([{"role": "system", "content": instructions[i]}] if instructions[i] else [])
                + [{"role": "user", "content": obs.text}]
            )
        )
        key = tuple((m["role"], m["content"]) for m in messages)
        if key not in rendered:
            rendered[key] = initial_prompt(tokenizer, messages, settings)
        text, ids = rendered[key]
        live[i] = _Live(
            messages,
            text,
            list(ids),
            ToolSession(settings.tools, settings.tool_timeout_s, settings.sandbox_backend),
            observation=obs.text,
        )
    return live


def _take_turn(
    episode: Episode, live: dict[int, _Live], i: int, completion, tokenizer, parser, turn: int, settings, params
) -> str | None:
    """One generated turn recorded as a step; its tool calls run and the chat grows, or the episode ends.
    Returns the final answer when the turn made no call (the environment then judges it)."""
    state = live[i]
    text, stop = turn_text(tokenizer, completion)
    parsed = parse_turn(text, parser, turn)
    step = Step(
        prompt_text=state.prompt_text,
        prompt_ids=state.prompt_ids,
        action_text=text,
        action_ids=completion.ids,
        truncated=completion.truncated,
        anchor_state=tool_state(state.interactions) if settings.anchor == "tool_state" else turn,
        messages=[dict(m) for m in state.messages],
        observation=state.observation,
        logprobs=completion.logprobs,
        policy_version=completion.policy_version,
    )
    episode.steps.append(step)
    attempted = len(parsed.calls) + len(parsed.malformed)
    if completion.truncated:
        _end(episode, live, i, "truncated")
    elif not parsed.has_calls:
        return parsed.content
    elif state.calls_made + attempted > settings.max_tool_calls:
        _end(episode, live, i, "max_tool_calls")
    else:
        _call_tools(step, state, parsed, settings)
        _grow(tokenizer, state, step, completion, (text, stop), parsed, settings)
        cap = settings.max_conversation_tokens
        if cap and len(state.prompt_ids) + params.max_new_tokens > cap:
            _end(episode, live, i, "context")
    return None


def _end(episode: Episode, live: dict[int, _Live], i: int, reason: str) -> None:
    episode.end_reason = reason
    del live[i]


def _call_tools(step: Step, state: _Live, parsed, settings: ConversationSettings) -> None:
    outcomes = [state.session.malformed(reason) for reason in parsed.malformed]
    outcomes += [state.session.call(call) for call in parsed.calls]
    state.calls_made += len(outcomes)
    step.tool_calls = [{"id": c.id, "name": c.name, "arguments": c.arguments, "form": c.form} for c in parsed.calls]
    step.tool_results = [{**o.as_message(), "error": o.error} for o in outcomes]
    invalid = [o for o in outcomes if o.error in INVALID_KINDS]
    if invalid:
        step.valid, step.penalty = False, settings.invalid_action_penalty
        step.invalid_reason = invalid[0].content[len("Error: ") :][:120]
    state.interactions += [interaction_key(o) for o in outcomes]


def _grow(
    tokenizer, state: _Live, step: Step, completion, turn: tuple[str, str], parsed, settings: ConversationSettings
) -> None:
    """Append the assistant turn and its tool messages: to the messages, and to the ids without
    re-tokenising what the model generated (its stop token included, whichever stop id it was)."""
    assistant = {"role": "assistant", "content": parsed.content}
    if parsed.calls:
        assistant["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in parsed.calls
        ]
    tool_messages = [{k: v for k, v in r.items() if k != "error"} for r in step.tool_results or []]
    text, end_of_turn = turn
    suffix = continuation_text(tokenizer, state.messages + [assistant], tool_messages, settings, end_of_turn)
    suffix_ids = tokenizer(suffix, add_special_tokens=False)["input_ids"]
    state.messages += [assistant] + tool_messages
    state.prompt_ids = state.prompt_ids + list(completion.ids) + suffix_ids
    state.prompt_text = state.prompt_text + text + end_of_turn + suffix
    state.observation = "\n".join(m["content"] for m in tool_messages)


def conversation_settings(cfg: Config) -> ConversationSettings | None:
    """The config's conversation settings, or None in window mode (``rollout.runner.episode_settings``)."""
    tools_config = cfg.tools
    if tools_config.episode_mode != "conversation":
        return None
    from grouprl.tools import resolve_tools

    try:
        tools = resolve_tools(tools_config.tools, tools_config.tool_sandbox)
        get_parser(tools_config.tool_parser)
    except KeyError as err:
        raise ConfigError(str(err).strip("'\"")) from None
    return ConversationSettings(
        tools=tools,
        parser=tools_config.tool_parser,
        max_tool_calls=tools_config.max_tool_calls,
        max_conversation_tokens=tools_config.max_conversation_tokens,
        tool_timeout_s=tools_config.tool_timeout,
        invalid_action_penalty=cfg.rollout.invalid_action_penalty,
        anchor=tools_config.tool_anchor,
        chat_template=tools_config.tool_chat_template,
        chat_template_kwargs=cfg.prompts.chat_template_kwargs or None,
    )
