"""Shared fixtures: the local GSM8K copy and tiny Qwen2 models built for a task's corpus."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest

from grouprl.config import ENV_VARS

REPO_ROOT = Path(__file__).resolve().parents[1]
GSM8K_DIR = REPO_ROOT.parent / "shared" / "data" / "gsm8k"
RECIPE = REPO_ROOT / "recipes" / "qwen2.5-0.5b-instruct" / "gsm8k_grpo.yaml"

# Small on purpose: the machine is shared and every test should stay fast.
TINY_HIDDEN, TINY_LAYERS, TINY_HEADS = 32, 1, 4


def gsm8k_available() -> bool:
    return (GSM8K_DIR / "train.jsonl").is_file() and (GSM8K_DIR / "test.jsonl").is_file()


@pytest.fixture(scope="session")
def gsm8k_dir() -> Path:
    if not gsm8k_available():
        pytest.skip(f"local GSM8K copy not found at {GSM8K_DIR} (expected train.jsonl and test.jsonl there)")
    return GSM8K_DIR


@pytest.fixture(autouse=True, scope="session")
def _clean_config_env():
    """The developer's shell must not leak seed variables (SEED, LR, ...), GROUPRL_* or WANDB_*
    into a test. Session-scoped, so it is in place before the module-scoped training runs."""
    with pytest.MonkeyPatch.context() as mp:
        for var in list(os.environ):
            if var in ENV_VARS or var.startswith(("GROUPRL_", "WANDB_")):
                mp.delenv(var)
        yield


def _collect_if_vllm(request) -> None:
    if request.module.__name__.rpartition(".")[2].startswith("test_vllm"):
        gc.unfreeze()  # vLLM freezes the heap at an engine's start: a later-released engine is frozen with it
        gc.collect()


@pytest.fixture(autouse=True, scope="module")
def _free_released_engines_per_module(request):
    """vLLM tears its process-wide parallel state down when an engine is freed, and runs the garbage collector
    itself while a new engine starts: an engine released earlier inside a reference cycle (a module fixture's,
    a test's with an HTTP endpoint around it) is then freed *under* the new one. Collected here first, before
    a module's own fixtures build their engine (autouse fixtures run first within their scope)."""
    _collect_if_vllm(request)
    yield


@pytest.fixture(autouse=True)
def _free_released_engines_per_test(request):  # the same, before an engine a test builds inside itself
    _collect_if_vllm(request)
    yield


def _build_tiny(task: str, out: Path, dataset: Path | None = None) -> Path:
    from grouprl.run_config import build_config
    from grouprl.models.tiny import init_tiny
    from grouprl.tasks import load_task

    cli = {"task": task, "n_eval": 50}
    if dataset is not None:
        cli["dataset_name_or_path"] = str(dataset)
    task_obj = load_task(build_config(None, cli, environ={}))
    return init_tiny(task_obj.tokenizer_corpus(), out, TINY_HIDDEN, TINY_LAYERS, TINY_HEADS, seed=0)


@pytest.fixture(scope="session")
def tiny_arithmetic_dir(tmp_path_factory) -> Path:
    """An untrained tiny Qwen2 model whose character vocabulary covers the arithmetic task."""
    return _build_tiny("arithmetic", tmp_path_factory.mktemp("tiny_arith") / "model")


@pytest.fixture(scope="session")
def tiny_gsm8k_dir(tmp_path_factory, gsm8k_dir) -> Path:
    """An untrained tiny Qwen2 model whose character vocabulary covers the local GSM8K copy."""
    return _build_tiny("gsm8k", tmp_path_factory.mktemp("tiny_gsm8k") / "model", gsm8k_dir)


@pytest.fixture(scope="session")
def warm_arithmetic_dir(tmp_path_factory, tiny_arithmetic_dir) -> Path:
    """The tiny arithmetic model after a few SFT steps: it answers with digits, so rewards vary
    inside a group and GRPO updates are not all zero."""
    from grouprl.run_config import build_config
    from grouprl.tasks import load_task
    from grouprl.job.sft import sft_warm_start

    task = load_task(build_config(None, {"n_train": 2000, "n_eval": 8}, environ={}))
    return sft_warm_start(
        str(tiny_arithmetic_dir),
        task.train_rows,
        task.messages,
        tmp_path_factory.mktemp("warm_arith") / "model",
        max_steps=150,
        learning_rate=1e-2,
        batch_size=32,
        seed=0,
    )


# Bare-word actions (action_pattern '') keep prompts and actions short, so the warmed model is
# quick to build; the <action> tag path is covered by test_runner with the untrained model.
GRID_PROMPT = "Move P to G, avoid H. Reply with one move: up, down, left or right."
GRID_CLI = {
    "task": "gridworld",
    "system_prompt": GRID_PROMPT,
    "history_length": 1,
    "action_pattern": "",
    "show_admissible_actions": False,
    "max_episode_steps": 6,
    "max_new_tokens": 6,
    "n_eval": 16,
}


@pytest.fixture(scope="session")
def tiny_grid_dir(tmp_path_factory) -> Path:
    """An untrained tiny Qwen2 model whose vocabulary covers the gridworld prompts."""
    from grouprl.run_config import build_config
    from grouprl.models.tiny import init_tiny
    from grouprl.tasks import load_task

    cfg = build_config(None, GRID_CLI, environ={})
    task = load_task(cfg)
    return init_tiny(
        task.tokenizer_corpus(),
        tmp_path_factory.mktemp("tiny_grid") / "model",
        TINY_HIDDEN,
        TINY_LAYERS,
        TINY_HEADS,
        seed=0,
    )


@pytest.fixture(scope="session")
def warm_grid_dir(tmp_path_factory, tiny_grid_dir) -> Path:
    """The tiny gridworld model after a short SFT on random admissible moves: it answers with a
    move, so rollouts have valid moves that change the state."""
    from grouprl.run_config import build_config
    from grouprl.tasks import load_task
    from grouprl.job.warm_start import env_demonstrations
    from grouprl.job.sft import sft_warm_start

    cfg = build_config(None, GRID_CLI, environ={})
    task = load_task(cfg)
    demos = env_demonstrations(cfg, task, task.train_rows[:200])
    return sft_warm_start(
        str(tiny_grid_dir),
        demos,
        lambda r: r["messages"],
        tmp_path_factory.mktemp("warm_grid") / "model",
        max_steps=60,
        learning_rate=1e-2,
        batch_size=32,
        seed=0,
    )


@pytest.fixture(scope="session")
def tiny_tool_model(tmp_path_factory) -> Path:
    """An untrained tiny model with the agent recipe's tool vocabulary (the agent's chats render in it)."""
    from grouprl.models.tiny import init_tiny
    from grouprl.run_config import build_config
    from grouprl.tasks import load_task

    task = load_task(build_config(REPO_ROOT / "recipes" / "tiny" / "tool_arithmetic_agent.yaml", {}, environ={}))
    return init_tiny(
        task.tokenizer_corpus(),
        tmp_path_factory.mktemp("agent_model") / "tiny",
        hidden=32,
        layers=1,
        heads=2,
        seed=0,
        tokenizer=task.tiny_tokenizer,
        max_positions=task.tiny_max_positions,
    )


@pytest.fixture(scope="session")
def ray_local():
    """A real local Ray cluster, started once for the session (2 CPUs, a small object store)."""
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            object_store_memory=100 * 1024 * 1024,
            log_to_driver=False,
            ignore_reinit_error=True,
        )
    yield ray
    if started:
        ray.shutdown()


def trajectory(env, seed: int, actions: list[str]) -> list:
    """Everything observable from a reset and a fixed action sequence (stops at done)."""
    obs = env.reset(seed)
    out: list = [(obs.text, obs.anchor_state)]
    for action in actions:
        result = env.step(action)
        out.append((result.observation.text, result.observation.anchor_state, result.reward, result.done, result.info))
        if result.done:
            break
    return out


@pytest.fixture(scope="module")
def bwrap():
    """Skip the module's sandbox tests where bubblewrap cannot start (CI installs it)."""
    from grouprl.rewards.sandbox import runner as sandbox

    usable, reason = sandbox.bwrap_available()
    if not usable:
        pytest.skip(f"bubblewrap sandbox cannot start on this machine: {reason}")


@pytest.fixture(scope="module")
def tokenizer():
    """The printable-character tokenizer with the tool chat template: the conversation, stop-id and agent
    tests' (a module that needs another tokenizer defines its own ``tokenizer`` fixture, which wins)."""
    import string

    from grouprl.models.tiny import build_tokenizer
    from grouprl.tools.chat_template import TOOL_CHAT_TEMPLATE

    tok = build_tokenizer(string.printable)
    tok.chat_template = TOOL_CHAT_TEMPLATE
    return tok
