"""One training step opens at most 12 files, measured on every run and held to the list in docs/architecture.md.

The tiny job runs three steps under a profiler hook; every call made during the second ``Trainer.train_step``
(the first also builds caches) from one ``src/grouprl`` module into another is an edge. From the edges:

- the **path** is what a reader opens to follow the step: ``train/trainer.py`` (the table of contents), every
  module it calls directly, and every module that two of those reach (a seam shared by phases);
- a **helper** is reached from one path module only (through it or its other helpers): it is that phase's
  detail, opened only to read the phase more closely;
- the **kit** is what every phase leans on and no phase owns: the record types and registries of the lowest
  floors, the task's own code (``tasks/``: the run's input, not the loop) and the process-wide speed switches.

The test fails when the path has more than 12 modules, or when ``docs/architecture.md`` ("One step, file by
file") names another path, other helpers or another owner than the step measured.
"""

from __future__ import annotations

import re
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
TRAINER = "train/trainer.py"
MAX_PATH = 12
KIT_ROOMS = {"records.py", "registry.py", "config", "user_code.py", "safe_text.py", "tasks", "speed"}


def is_kit(module: str) -> bool:
    return module.split("/")[0] in KIT_ROOMS


def classify(edges: set[tuple[str, str]]) -> tuple[list[str], dict[str, str]]:
    """(path, helper -> its owning path module) from caller -> callee module edges."""
    callees: dict[str, set[str]] = {}
    for a, b in edges:
        if a != b:
            callees.setdefault(a, set()).add(b)
    path = {TRAINER} | {m for m in callees.get(TRAINER, ()) if not is_kit(m)}
    while True:
        owners: dict[str, set[str]] = {}
        for start in path:  # what each path module reaches without passing through another path module
            for m in _reach(start, callees, path):
                owners.setdefault(m, set()).add(start)
        shared = {m for m, by in owners.items() if len(by) > 1}
        if not shared:
            return sorted(path), {m: next(iter(by)) for m, by in sorted(owners.items())}
        # the seams first: a shared module that another shared one reaches may be that seam's helper
        path |= {m for m in shared if not any(m in _reach(s, callees, path) for s in shared - {m})}


def _reach(start: str, callees: dict[str, set[str]], path: set[str]) -> set[str]:
    stack, seen = [start], {start}
    while stack:
        for m in callees.get(stack.pop(), ()):
            if m not in seen and m not in path and not is_kit(m):
                seen.add(m)
                stack.append(m)
    return seen - {start}


def documented() -> tuple[list[str], dict[str, str]]:
    """The table under "One step, file by file": ``| `path module` | `helper`, `helper` |`` rows."""
    text = ARCHITECTURE.read_text()
    section = text.split("## One step, file by file", 1)[1].split("\n## ", 1)[0]
    path, helpers = [], {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if len(cells) < 2 or not cells[0].startswith("`"):
            continue
        module = cells[0].strip("`")
        path.append(module)
        for helper in re.findall(r"`([^`]+\.py)`", cells[1]):
            helpers[helper] = module
    return sorted(path), dict(sorted(helpers.items()))


@pytest.fixture(scope="module")
def step_edges(tmp_path_factory) -> set[tuple[str, str]]:
    import grouprl
    from grouprl import cli
    from grouprl.train.trainer import Trainer

    package = str(Path(grouprl.__file__).parent) + "/"
    edges: set[tuple[str, str]] = set()
    steps = {"n": 0}

    def tracer(frame, event, arg):
        if event != "call" or steps["n"] != 2 or not frame.f_code.co_filename.startswith(package):
            return
        caller = frame.f_back
        while caller is not None and not caller.f_code.co_filename.startswith(package):
            caller = caller.f_back  # through torch, the standard library, a lambda in a test
        if caller is not None:
            edges.add((caller.f_code.co_filename[len(package) :], frame.f_code.co_filename[len(package) :]))

    original = Trainer.train_step

    def counted(self):
        steps["n"] += 1
        try:
            return original(self)
        finally:
            steps["n"] += steps["n"] == 2  # only the second step is traced

    out = tmp_path_factory.mktemp("step_files")
    args = ["train", "--model", "tiny", "--sft_steps", "10", "--max_steps", "3", "--n_eval", "4", "--n_train", "40"]
    Trainer.train_step = counted  # type: ignore[method-assign]
    sys.setprofile(tracer)
    threading.setprofile(tracer)
    try:
        cli.main(args + ["--device", "cpu", "--output_dir", str(out), "--overwrite_output_dir", "true"])
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
        Trainer.train_step = original  # type: ignore[method-assign]
    assert steps["n"] == 4, "the run took three steps"
    return edges


def test_one_step_opens_at_most_12_files(step_edges):
    path, _ = classify(step_edges)
    assert len(path) <= MAX_PATH, f"one step opens {len(path)} files (at most {MAX_PATH}): {path}"


def test_the_architecture_doc_lists_what_a_step_runs(step_edges):
    path, helpers = classify(step_edges)
    assert documented() == (path, helpers), (
        "docs/architecture.md 'One step, file by file' disagrees with the measured step:\n"
        f"measured path {path}\nmeasured helpers {helpers}\ndocumented {documented()}"
    )


def test_the_rule_on_a_made_up_step():
    edges = {
        (TRAINER, "rollout/runner.py"),
        (TRAINER, "train/learner.py"),
        (TRAINER, "tasks/base.py"),  # the task: kit
        ("rollout/runner.py", "rollout/window.py"),
        ("rollout/window.py", "rollout/generation.py"),
        ("rollout/window.py", "records.py"),
        ("train/learner.py", "rollout/generation.py"),  # reached from two phases: on the path
        ("rollout/generation.py", "rollout/decode.py"),
        ("train/learner.py", "algos/loss.py"),
    }
    assert classify(edges) == (
        ["rollout/generation.py", "rollout/runner.py", "train/learner.py", TRAINER],
        {
            "algos/loss.py": "train/learner.py",
            "rollout/decode.py": "rollout/generation.py",
            "rollout/window.py": "rollout/runner.py",
        },
    )
