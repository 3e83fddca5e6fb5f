"""``tests/`` mirrors ``src/``: a test named after a module sits in that module's folder, and no two test
files share a name (pytest imports them by their base name: there is no ``__init__.py`` here).

``tests/<folder>/test_<module>[_<aspect>].py`` tests ``src/grouprl/<folder>/<module>.py``; the name is
matched against the longest module name it starts with. A test named after no module (an end-to-end
or cross-cutting check) may sit in any room; ``e2e/``, ``infra/``, ``layout/``, ``docs/`` and
``workers/`` hold runs and helpers, not one module's tests.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
SRC = TESTS.parent / "src" / "grouprl"
NOT_ROOMS = {"e2e", "infra", "layout", "docs", "workers", "fixtures"}


def module_folders() -> dict[str, set[str]]:
    """Module name -> the folders (relative to the package) that hold a module of that name."""
    out: dict[str, set[str]] = {}
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC)
        if path.name != "__init__.py" and "programs" not in rel.parts:  # sandbox programs run as files
            out.setdefault(path.stem, set()).add(rel.parent.as_posix())
    return out


def misplaced(test_files: list[Path], modules: dict[str, set[str]]) -> list[str]:
    found = []
    for path in test_files:
        folder = path.relative_to(TESTS).parent.as_posix()
        if folder.split("/")[0] in NOT_ROOMS:
            continue
        name = path.stem.removeprefix("test_")
        named = sorted((m for m in modules if name == m or name.startswith(m + "_")), key=len, reverse=True)
        if named and folder not in modules[named[0]]:
            homes = ", ".join(f"tests/{f}/" for f in sorted(modules[named[0]]))
            found.append(f"tests/{folder}/{path.name} is named after {named[0]}.py: it belongs in {homes}")
    return found


def test_tests_sit_in_the_folder_of_the_module_they_are_named_after():
    found = misplaced(sorted(TESTS.rglob("test_*.py")), module_folders())
    assert not found, "\n".join(found)


def test_the_check_names_the_misplaced_test_and_its_home():
    modules = {"evaluate": {"job"}, "runner": {"rollout", "rewards/sandbox"}, "run_dir": {"job"}}
    files = [
        TESTS / "train" / "test_evaluate.py",
        TESTS / "job" / "test_evaluate_k.py",
        TESTS / "rollout" / "test_runner.py",
        TESTS / "e2e" / "test_evaluate.py",
    ]
    assert misplaced(files, modules) == [
        "tests/train/test_evaluate.py is named after evaluate.py: it belongs in tests/job/"
    ]


def test_test_file_names_are_unique():
    counts = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert not [n for n, c in counts.items() if c > 1], f"test files sharing a name: {counts.most_common(3)}"
