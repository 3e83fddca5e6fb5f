"""The folders stand in floors: a module imports only from floors below its own (docs/architecture.md).

The walk is the import-circle test's (every import, function-level ones included; ``if TYPE_CHECKING:``
bodies excluded). A room is a folder or a top-level module of the package; each room sits on one
floor, and an arrow from a room to a room on the same or a higher floor fails, naming both modules.
Inside a folder, ``INNER`` states the order of its own modules where the code has one (``rollout/``:
the generation seam, then the backends, then the rest).
"""

from __future__ import annotations

from test_import_graph import PACKAGE, SRC, import_graph

ARCHITECTURE = SRC.parent / "docs" / "architecture.md"

# ground floor first; keep docs/architecture.md ("The rooms, in import order") the same list
FLOORS: list[list[str]] = [
    ["config", "records", "user_code", "safe_text", "append_only", "tokenizer_loading"],
    ["registry", "bounded_http"],
    ["rewards", "algos", "data", "hub", "speed"],
    ["tools", "policy", "models"],
    ["tasks"],
    ["rollout"],
    ["run_config"],
    ["observe"],
    ["train"],
    ["job"],
    ["generate", "reward_preview", "run_errors"],
    ["cli"],
]

# a folder's own floors, lowest first, as module paths inside it; "*" is every module not named
INNER: dict[str, list[list[str]]] = {
    "rollout": [["sampling", "prefill"], ["backends"], ["*"]],
}


def room(module: str) -> str:
    """``grouprl.rollout.backends.vllm`` -> ``rollout``; ``grouprl.records`` -> ``records``."""
    return module.split(".")[1]


def floor_of(module: str) -> int:
    for level, rooms in enumerate(FLOORS):
        if room(module) in rooms:
            return level
    raise KeyError(module)


def inner_room(module: str, floors: list[list[str]]) -> tuple[int, str]:
    """A module's floor and room inside its folder: the longest named path that holds it, else ``*``."""
    inside = module.split(".")[2:]
    rest = next((i, "*") for i, names in enumerate(floors) if "*" in names)
    named = [
        (len(name.split(".")), i, name)
        for i, names in enumerate(floors)
        for name in names
        if name != "*" and inside[: len(name.split("."))] == name.split(".")
    ]
    return max(named)[1:] if named else rest


def upward_arrows(graph: dict[str, set[str]]) -> list[str]:
    """One line per import that does not run down: ``importer imports imported (where)``."""
    found = []
    for name, targets in sorted(graph.items()):
        if name == PACKAGE:
            continue
        for target in sorted(targets):
            if room(name) != room(target):
                a, b = floor_of(name), floor_of(target)
                if b >= a:
                    found.append(
                        f"{name} imports {target} ({room(name)}/ on floor {a} -> {room(target)}/ on floor {b})"
                    )
            elif room(name) in INNER and len(name.split(".")) > 2 and len(target.split(".")) > 2:
                (a, here), (b, there) = inner_room(name, INNER[room(name)]), inner_room(target, INNER[room(name)])
                if here != there and b >= a:
                    found.append(f"{name} imports {target} (inside {room(name)}/: floor {a} -> floor {b})")
    return found


def test_every_room_has_a_floor():
    graph = import_graph()
    missing = sorted({room(m) for m in graph if m != PACKAGE} - {r for rooms in FLOORS for r in rooms})
    assert not missing, f"rooms on no floor (add them to FLOORS and docs/architecture.md): {missing}"


def test_no_arrow_runs_back_up():
    found = upward_arrows(import_graph())
    assert not found, "imports from a lower floor to a higher one (or across one floor):\n" + "\n".join(found)


def test_the_check_fails_on_an_arrow_up_and_across():
    graph = {
        "grouprl.tools.builtin": {"grouprl.tasks.envs.calculator", "grouprl.rewards.kit"},
        "grouprl.tools.parsers": {"grouprl.models.loading"},
        "grouprl.rollout.backends.vllm_server": {
            "grouprl.rollout.generation",
            "grouprl.rollout.sampling",
            "grouprl.rollout.backends.vllm",
        },
        "grouprl.rollout.generation": {"grouprl.rollout.backends.vllm", "grouprl.rollout.turn_cache"},
        "grouprl.cli": {"grouprl.job.run", "grouprl.generate.cli"},
    }
    assert upward_arrows(graph) == [
        "grouprl.rollout.backends.vllm_server imports grouprl.rollout.generation (inside rollout/: floor 1 -> floor 2)",
        "grouprl.tools.builtin imports grouprl.tasks.envs.calculator (tools/ on floor 3 -> tasks/ on floor 4)",
        "grouprl.tools.parsers imports grouprl.models.loading (tools/ on floor 3 -> models/ on floor 3)",
    ]


def test_the_architecture_doc_states_the_same_floors():
    """The fenced list under "The rooms, in import order": one floor a line, its number then its rooms."""
    section = ARCHITECTURE.read_text().split("## The rooms, in import order", 1)[1]
    block = section.split("```", 2)[1]
    stated = [
        [name.rstrip("/").removesuffix(".py") for name in line.split()[1:]] for line in block.strip().splitlines()
    ]
    assert stated == FLOORS, f"docs/architecture.md states the floors {stated}; the test holds {FLOORS}"
