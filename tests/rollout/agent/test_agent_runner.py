"""Agents the user wrote, run unchanged through the endpoint: merged and split episodes as training
samples (checked token for token against the template), 16 in flight at once, every failure counted,
the real tiny model behind the HF backend, and the recipe key."""

import asyncio
import math
from pathlib import Path

import pytest
import torch

from grouprl.config import ConfigError
from grouprl.models.tiny import build_tiny_model, build_tokenizer
from grouprl.rewards.reward_calls import episode_messages
from grouprl.rollout.agent.runner import AgentSettings, agent_metrics, run_agent_episodes
from grouprl.rollout.generation import HFBackend, SamplingParams
from grouprl.rollout.scripted import ScriptedBackend
from grouprl.tasks.tool_arithmetic import ToolAnswerEnv, ToolArithmeticTask, expert_reply, rows
from grouprl.tools import resolve_tools
from grouprl.tools.chat_template import TOOL_CHAT_TEMPLATE
from grouprl.train.conversation_samples import pack_conversations
from grouprl.user_code import import_callable

ROOT = Path(__file__).resolve().parents[3]
CALCULATOR = str(ROOT / "examples" / "agents" / "calculator_agent.py") + ":run"
COMPACTING = str(ROOT / "examples" / "agents" / "compacting_agent.py") + ":run"
SCHEMAS = [t.schema for t in resolve_tools(["calculator", "lookup"])]


class Recorded(ScriptedBackend):
    def __init__(self, tokenizer, reply=expert_reply):
        super().__init__(tokenizer, reply)
        self.batches: list[int] = []

    def generate(self, prompt_ids, params):
        self.batches.append(len(prompt_ids))
        return super().generate(prompt_ids, params)


def play(tokenizer, agent, task_rows, group_size=2, backend=None, **kw):
    settings = AgentSettings(agent=agent if callable(agent) else import_callable(agent, "agent"), **kw)
    factories = [lambda r=r: ToolAnswerEnv(r["question"], r["ground_truth"]) for r in task_rows]
    return run_agent_episodes(
        factories,
        task_rows,
        group_size,
        backend or Recorded(tokenizer),
        tokenizer,
        SamplingParams(max_new_tokens=200),
        settings,
        [r["seed"] for r in task_rows],
        policy_version=7,
    )


def trained_spans(batch, row):
    spans, current = [], []
    for token, m in zip(batch.completion_ids[row].tolist(), batch.completion_mask[row].tolist()):
        if m:
            current.append(token)
        elif current:
            spans, current = spans + [current], []
    return spans + ([current] if current else [])


def test_an_append_only_agent_makes_one_sample_per_episode_token_for_token(tokenizer):
    episodes = play(tokenizer, CALCULATOR, rows(4))
    assert all(ep.success and ep.end_reason == "answer" and ep.agent.segments == 1 for ep in episodes)
    assert [len(ep.steps) for ep in episodes[::2]] == [2 if r["kind"] == "multiply" else 3 for r in rows(4)]
    samples = pack_conversations(
        episodes, torch.ones(sum(len(ep.steps) for ep in episodes)), tokenizer.pad_token_id, mask_truncated=False
    )
    batch = samples.batch
    assert batch.prompt_ids.shape[0] == len(episodes)
    for row, ep in enumerate(episodes):
        # the sample is exactly the template's rendering of the whole chat the agent held
        text = tokenizer.apply_chat_template(episode_messages(ep), tools=SCHEMAS, tokenize=False)
        expected = tokenizer(text, add_special_tokens=False)["input_ids"]
        prompt = batch.prompt_ids[row][batch.prompt_mask[row].bool()].tolist()
        completion = batch.completion_ids[row][batch.attention[row].bool()].tolist()
        assert prompt + completion == expected[: len(prompt) + len(completion)]
        assert tokenizer.decode(expected[len(prompt) + len(completion) :]) == "\n"
        # trained: exactly the ids the engine generated, each call's, in order
        assert trained_spans(batch, row) == [s.action_ids for s in ep.steps]
        assert all(s.policy_version == 7 for s in ep.steps)
        # the anchors are the tool-interaction states, as in conversation mode
        assert ep.steps[0].anchor_state == "start" and ep.steps[1].anchor_state.startswith(
            ep.steps[0].tool_calls[0]["name"]
        )
        assert [r["content"] for r in ep.steps[0].tool_results] == [
            m["content"] for m in ep.steps[1].messages if m["role"] == "tool"
        ]
    metrics = agent_metrics(episodes)
    assert metrics["agent/merged_episodes"] == 1.0 and metrics["agent/calls_per_episode"] == 2.5


def test_an_agent_that_rewrites_its_history_makes_one_sample_per_chain(tokenizer):
    task_rows = rows(4)
    episodes = play(tokenizer, COMPACTING, task_rows, group_size=1)
    for ep, row in zip(episodes, task_rows):
        assert ep.success and ep.steps[-1].env_reward == 1.0  # the agent's own reward
        assert ep.agent.segments == (1 if row["kind"] == "multiply" else 2)
    samples = pack_conversations(
        episodes,
        torch.arange(1.0, 1 + sum(len(ep.steps) for ep in episodes)),
        tokenizer.pad_token_id,
        mask_truncated=False,
    )
    batch = samples.batch
    assert batch.prompt_ids.shape[0] == sum(ep.agent.segments for ep in episodes)
    row, first = 0, 0
    for ep in episodes:
        chains = [[0, 1], [2]] if ep.agent.segments == 2 else [[0, 1]]
        for chain in chains:
            last = ep.steps[chain[-1]]
            # each sample is its last call's rendering plus what the model generated, nothing re-tokenised
            text = tokenizer.apply_chat_template(
                last.messages, tools=SCHEMAS, add_generation_prompt=True, tokenize=False
            )
            prompt = batch.prompt_ids[row][batch.prompt_mask[row].bool()].tolist()
            completion = batch.completion_ids[row][batch.attention[row].bool()].tolist()
            assert prompt + completion == tokenizer(text, add_special_tokens=False)["input_ids"] + last.action_ids
            assert trained_spans(batch, row) == [ep.steps[t].action_ids for t in chain]
            trained = batch.completion_mask[row].bool()
            assert sorted(set(samples.advantages[row][trained].tolist())) == [first + t + 1.0 for t in chain]
            row += 1
        first += len(ep.steps)
    metrics = agent_metrics(episodes)
    assert metrics["agent/split_episodes"] == 0.5 and metrics["agent/samples_per_episode"] == 1.5


def test_sixteen_episodes_in_flight_are_batched(tokenizer):
    in_flight, peak, everyone = [0], [0], asyncio.Event()

    async def waits_for_everyone(client, row, model, **extras):
        in_flight[0] += 1
        peak[0] = max(peak[0], in_flight[0])
        if in_flight[0] == 16:
            everyone.set()
        await everyone.wait()
        messages = [{"role": "user", "content": row["question"]}]
        response = await client.chat.completions.create(model=model, messages=messages)
        in_flight[0] -= 1
        return 1.0 if response.choices[0].message.tool_calls else 0.0

    backend = Recorded(tokenizer)
    episodes = play(tokenizer, waits_for_everyone, rows(8), group_size=2, backend=backend)
    assert peak[0] == 16 and all(ep.agent.calls == 1 and ep.agent.failure is None for ep in episodes)
    assert sum(backend.batches) == 16 and max(backend.batches) > 1


def test_no_more_agents_run_than_one_batch_holds(tokenizer):
    """16 episodes, a 4-call batch: 4 agents at a time (a waiting agent would only hold its conversation in memory),
    each next one starting as one ends; every episode is played."""
    in_flight, peak = [0], [0]

    async def counts(client, row, model, **extras):
        in_flight[0] += 1
        peak[0] = max(peak[0], in_flight[0])
        messages = [{"role": "user", "content": row["question"]}]
        response = await client.chat.completions.create(model=model, messages=messages)
        await asyncio.sleep(0.01)
        in_flight[0] -= 1
        return 1.0 if response.choices[0].message.tool_calls else 0.0

    backend = Recorded(tokenizer)
    task_rows = rows(8)
    episodes = run_agent_episodes(
        [lambda r=r: ToolAnswerEnv(r["question"], r["ground_truth"]) for r in task_rows],
        task_rows,
        2,
        backend,
        tokenizer,
        SamplingParams(max_new_tokens=200, batch_size=4),
        AgentSettings(agent=counts, batch_window_s=5.0),
        [r["seed"] for r in task_rows],
    )
    assert peak[0] == 4 and all(ep.agent.calls == 1 and ep.agent.failure is None for ep in episodes)
    assert sum(backend.batches) == 16 and max(backend.batches) <= 4


async def raises(client, row, **_):
    await client.chat.completions.create(model="policy", messages=[{"role": "user", "content": row["question"]}])
    raise RuntimeError("the agent's own bug")


async def hangs(client, row, **_):
    await asyncio.sleep(60)


async def loops(client, row, model, **_):
    for _ in range(5):
        try:
            await client.chat.completions.create(model=model, messages=[{"role": "user", "content": row["question"]}])
        except Exception:  # noqa: BLE001 - it keeps going after the refusal, then claims a reward
            pass
    return 1.0


async def never_calls(client, row, **_):
    return 1.0


async def odd_reward(client, row, model, **_):
    await client.chat.completions.create(model=model, messages=[{"role": "user", "content": row["question"]}])
    return "great"


async def nan_reward(client, row, model, **_):
    await client.chat.completions.create(model=model, messages=[{"role": "user", "content": row["question"]}])
    return {"score": math.nan}


async def huge_reward(client, row, model, **_):  # finite, but its square is inf: the group's std would be
    await client.chat.completions.create(model=model, messages=[{"role": "user", "content": row["question"]}])
    return 1e300


@pytest.mark.parametrize(
    "agent, kind, calls",
    [
        (raises, "agent_raised", 1),
        (hangs, "timeout", 0),
        (loops, "max_calls", 2),
        (never_calls, "no_calls", 0),
        (odd_reward, "invalid_reward", 1),
        (nan_reward, "invalid_reward", 1),
        (huge_reward, "invalid_reward", 1),
    ],
)
def test_every_agent_failure_is_a_counted_failed_episode(tokenizer, agent, kind, calls):
    episodes = play(tokenizer, agent, rows(1), group_size=2, max_calls=2, episode_timeout=1.0)
    for ep in episodes:
        assert ep.agent.failure == kind and ep.end_reason == kind and ep.agent.calls == calls and ep.agent.message
        assert ep.steps[-1].env_reward == 0.0 and not ep.success
    if kind == "max_calls":
        assert episodes[0].agent.refused == {"max_calls_exceeded": 3}
    metrics = agent_metrics(episodes)
    assert metrics[f"agent/failed/{kind}"] == 2.0 and metrics["agent/failed_episodes"] == 1.0
    # the batch still packs: a failed episode's calls are samples, one without calls trains nothing
    samples = pack_conversations(
        episodes, torch.ones(sum(len(ep.steps) for ep in episodes)), tokenizer.pad_token_id, mask_truncated=False
    )
    assert int(samples.batch.completion_mask.sum()) == sum(len(s.action_ids) for ep in episodes for s in ep.steps)


def test_the_tiny_model_drives_the_agent_through_the_hf_backend():
    task = ToolArithmeticTask("tool_arithmetic", rows(4), rows(1))
    tokenizer = build_tokenizer(task.tokenizer_corpus())
    model = build_tiny_model(tokenizer, hidden=32, layers=1, heads=4, seed=0, max_positions=2048)
    backend = HFBackend(model, tokenizer, torch.device("cpu"))
    task_rows = rows(2)
    episodes = play(tokenizer, CALCULATOR, task_rows, group_size=2, backend=backend)
    assert tokenizer.chat_template == TOOL_CHAT_TEMPLATE  # installed for the tools (tool_chat_template: auto)
    for ep in episodes:
        assert ep.agent.failure is None and ep.agent.calls >= 1 and ep.end_reason == "answer"
        first = ep.steps[0]
        text = tokenizer.apply_chat_template(first.messages, tools=SCHEMAS, add_generation_prompt=True, tokenize=False)
        assert first.prompt_ids == tokenizer(text, add_special_tokens=False)["input_ids"]
        assert all(len(s.action_ids) <= 200 and s.action_ids for s in ep.steps)


def test_the_recipe_key_names_the_agent(tmp_path):
    from grouprl.rollout.runner import episode_settings
    from grouprl.run_config import build_config
    from grouprl.tasks import load_task

    cli = {
        "task": "tool_arithmetic",
        "episode_mode": "conversation",
        "tools": ["calculator", "lookup"],
        "agent": CALCULATOR,
        "max_calls": 5,
        "episode_timeout": 9.0,
        "max_conversation_tokens": 900,
    }
    cfg = build_config(None, cli, environ={})
    settings = episode_settings(cfg, load_task(cfg))
    assert isinstance(settings, AgentSettings) and settings.agent.__name__ == "run"
    assert (settings.max_calls, settings.episode_timeout, settings.max_conversation_tokens) == (5, 9.0, 900)
    assert settings.api_key.startswith("grouprl-") and len(settings.api_key) > 30
    assert settings.model_name == "policy"  # no model named yet (the tiny model is built at run time)
    for model, served in [(str(tmp_path), tmp_path.name), ("Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct")]:
        named = build_config(None, {**cli, "model_name_or_path": model}, environ={})
        assert episode_settings(named, load_task(named)).model_name == served
    sync = tmp_path / "sync_agent.py"
    sync.write_text("def run(client, row):\n    return 1.0\n")
    for spec, words in [(f"{sync}:run", "not an async function"), (f"{tmp_path}/none.py:run", "no such file")]:
        with pytest.raises(ConfigError, match=words):
            episode_settings(build_config(None, {**cli, "agent": spec}, environ={}), load_task(cfg))


def test_an_agent_that_blocks_the_event_loop_is_abandoned_at_the_deadline(tokenizer, monkeypatch):
    import time

    from grouprl.rollout.agent import runner as agent_runner

    async def blocks(client, row, **_):
        time.sleep(4)  # synchronous: no asyncio timeout can interrupt it

    monkeypatch.setattr(agent_runner, "_GRACE_S", 0.5)
    start = time.monotonic()
    episodes = play(tokenizer, blocks, rows(1), group_size=2, episode_timeout=0.5)
    assert time.monotonic() - start < 3.5  # the run went on without waiting for the blocked agents
    assert [ep.agent.failure for ep in episodes] == ["timeout", "timeout"]


def test_a_sub_agent_s_calls_are_their_own_sample_between_the_main_chat_s(tokenizer):
    from grouprl.rollout.agent.calls import call_segments

    calculator = import_callable(CALCULATOR, "agent")
    tool = calculator.__globals__["call_tool"]

    async def with_sub_agent(client, row, model, **_):
        chat = [
            {"role": "system", "content": "Use the tools to answer. End with: Answer: <number>"},
            {"role": "user", "content": row["question"]},
        ]
        first = (await client.chat.completions.create(model=model, messages=chat, tools=SCHEMAS)).choices[0].message
        # a sub-agent asks the same question in a chat of its own, in between
        await client.chat.completions.create(model=model, messages=list(chat), tools=SCHEMAS)
        call = first.tool_calls[0]
        chat += [
            first.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": tool(call.function.name, call.function.arguments)},
        ]
        await client.chat.completions.create(model=model, messages=chat, tools=SCHEMAS)
        return 1.0

    (episode,) = play(tokenizer, with_sub_agent, [r for r in rows(4) if r["kind"] == "convert"][:1], group_size=1)
    assert call_segments(episode.steps) == [[0, 2], [1]] and episode.agent.segments == 2
    samples = pack_conversations([episode], torch.ones(3), tokenizer.pad_token_id, mask_truncated=False)
    assert trained_spans(samples.batch, 0) == [episode.steps[0].action_ids, episode.steps[2].action_ids]
    assert trained_spans(samples.batch, 1) == [episode.steps[1].action_ids]


# --- episode integrity: a sample trains on exactly the calls its own agent made while its episode was open ---
async def leaves_a_thread_behind(client, row, model, base_url, api_key, **_):
    """One real call, then a thread that keeps calling after the agent has returned (a leaked worker)."""
    import threading
    import time

    import openai

    await client.chat.completions.create(model=model, messages=[{"role": "user", "content": row["question"]}])

    def keep_calling():
        late = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=30)
        for _ in range(24):
            try:
                late.chat.completions.create(model=model, messages=[{"role": "user", "content": "again"}])
            except openai.APIError:
                pass
            time.sleep(0.01)

    threading.Thread(target=keep_calling, daemon=True).start()
    time.sleep(0.05)  # it has started calling before the agent returns
    return 1.0


async def writes_into_a_sibling(client, row, model, base_url, api_key, **_):
    """Its own call, then calls with its own key on every guessable sibling route (g<G>-e<K>)."""
    import openai

    await client.chat.completions.create(model=model, messages=[{"role": "user", "content": row["question"]}])
    root = base_url.split("/ep/")[0]
    for sibling in ("g0-e0", "g0-e1", "g1-e0", "g1-e1"):
        if f"/ep/{sibling}/" in base_url + "/":
            continue
        other = openai.AsyncOpenAI(base_url=f"{root}/ep/{sibling}/v1", api_key=api_key, max_retries=0)
        try:
            await other.chat.completions.create(model=model, messages=[{"role": "user", "content": "hijack"}])
        except openai.PermissionDeniedError:
            pass
        await other.close()
    return 1.0


@pytest.mark.parametrize("agent", [leaves_a_thread_behind, writes_into_a_sibling])
def test_an_episode_trains_only_on_its_own_agent_s_calls_while_open(tokenizer, agent):
    task_rows = rows(2)
    episodes = play(tokenizer, agent, task_rows, group_size=2)
    assert all(ep.agent.failure is None and ep.agent.calls == 1 for ep in episodes)
    assert all(len(ep.steps) == 1 for ep in episodes)  # the one call each agent made itself
    for ep, row in zip(episodes, [r for r in task_rows for _ in range(2)]):
        assert ep.steps[0].messages[-1]["content"] == row["question"]
    if agent is writes_into_a_sibling:
        assert all(ep.agent.refused == {"episode_mismatch": 3} for ep in episodes)
