"""One run folder as the dashboard sees it: small files read whole (cached by size and mtime),
``metrics.jsonl`` tailed by line, ``rollouts/rollouts.jsonl`` through a byte-offset index.

Every reader copes with a run that is still starting (files missing or half written), so the
dashboard can be opened on a folder before ``grouprl train`` creates it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import threading
from pathlib import Path
from typing import Any, Sequence

import yaml

from grouprl.observe.dashboard.rollout_index import RolloutIndex, parse_lines
from grouprl.config.redact import redact

_TRAJECTORY_FILE = re.compile(r"^step_(\d+)\.jsonl$")
RUN_FILES = (
    "config.json",
    "summary.json",
    "metrics.jsonl",
    "rollouts/rollouts.jsonl",
    "eval/before.jsonl",
    "eval/after.jsonl",
)


class RunFolder:
    def __init__(self, path: str | os.PathLike, name: str | None = None):
        self.path = Path(path)
        self.name = name or self.path.name
        self.rollouts = RolloutIndex(self.path / "rollouts" / "rollouts.jsonl")
        self._metric_rows: list[dict[str, Any]] = []
        self._metrics_offset = 0
        self._metrics_identity: tuple[int, int] | None = None
        self._cache: dict[Path, tuple[tuple[int, int], Any]] = {}
        self._lock = threading.Lock()

    # -- small files ------------------------------------------------------------------------
    def _cached(self, path: Path, parse) -> Any:
        """Parse a file again only when its size or mtime changed (a live run rewrites them)."""
        try:
            st = path.stat()
        except FileNotFoundError:
            return None
        stamp = (st.st_size, st.st_mtime_ns)
        with self._lock:
            hit = self._cache.get(path)
            if hit and hit[0] == stamp:
                return hit[1]
        try:
            value = parse(path)
        except (OSError, ValueError):  # half written: try again on the next poll
            return None
        with self._lock:
            self._cache[path] = (stamp, value)
        return value

    def _json(self, relative: str) -> Any:
        return self._cached(self.path / relative, lambda p: json.loads(p.read_text()))

    def _jsonl(self, path: Path) -> list[dict[str, Any]]:
        return self._cached(path, _read_jsonl_lenient) or []

    # -- metrics ----------------------------------------------------------------------------
    def metrics(self, since: int = 0) -> dict[str, Any]:
        """Rows of metrics.jsonl from row ``since`` on (a poller passes the ``next`` it got)."""
        path = self.path / "metrics.jsonl"
        with self._lock:
            try:
                st = path.stat()
            except FileNotFoundError:
                st = None
            identity = (st.st_dev, st.st_ino) if st else None
            if st is None or st.st_size < self._metrics_offset or identity != self._metrics_identity:
                self._metric_rows, self._metrics_offset = [], 0  # a new or rewritten file
            self._metrics_identity = identity
            if st is not None and st.st_size > self._metrics_offset:
                with open(path, "rb") as fh:
                    fh.seek(self._metrics_offset)
                    data = fh.read()
                cut = data.rfind(b"\n") + 1
                self._metric_rows.extend(parse_lines(data[:cut]))
                self._metrics_offset += cut
            rows = self._metric_rows
            reset = since > len(rows)  # the poller saw a longer file than this one: it starts over
            return {"rows": rows[0 if reset else since :], "next": len(rows), "reset": reset}

    # -- trajectories -----------------------------------------------------------------------
    def trajectory_files(self) -> dict[int, Path]:
        folder = self.path / "trajectories"
        if not folder.is_dir():
            return {}
        found = {int(m.group(1)): folder / name for name in os.listdir(folder) if (m := _TRAJECTORY_FILE.match(name))}
        return dict(sorted(found.items()))

    def trajectories(self, step: int) -> list[dict[str, Any]]:
        path = self.trajectory_files().get(step)
        return self._jsonl(path) if path else []

    # -- overview ---------------------------------------------------------------------------
    def eval_rows(self) -> dict[str, list[dict[str, Any]]]:
        return {name: self._jsonl(self.path / "eval" / f"{name}.jsonl") for name in ("before", "after")}

    def steps(self) -> dict[str, Any]:
        return {"rollout_steps": self.rollouts.steps(), "trajectory_steps": list(self.trajectory_files())}

    def files(self) -> dict[str, int | None]:
        """The files the dashboard reads, with their sizes in bytes (None: not written yet)."""
        sizes: dict[str, int | None] = {}
        for relative in RUN_FILES:
            path = self.path / relative
            sizes[relative] = path.stat().st_size if path.is_file() else None
        traj = self.trajectory_files()
        sizes["trajectories/step_*.jsonl"] = sum(p.stat().st_size for p in traj.values()) if traj else None
        return sizes

    def overview(self) -> dict[str, Any]:
        config = self._json("config.json")
        config = redact(config) if config is not None else None  # a folder written before redaction, or by hand
        summary = self._json("summary.json")
        checkpoints = sorted(
            (int(p.name.split("-")[1]) for p in self.path.glob("checkpoint-*") if p.name.split("-")[1].isdigit()),
            reverse=True,
        )
        return {
            "name": self.name,
            "path": str(self.path),
            "exists": self.path.is_dir(),
            "config": config,
            "summary": summary,
            "finished": summary is not None,
            "checkpoints": checkpoints,
            "files": self.files(),
            "commands": reproduce_commands(config, self.path, checkpoints[0] if checkpoints else None),
        }


def _read_jsonl_lenient(path: Path) -> list[dict[str, Any]]:
    data = path.read_bytes()
    return parse_lines(data[: data.rfind(b"\n") + 1])


def flag_words(value: Any) -> list[str]:
    """A value as the words of a flag that ``grouprl train`` reads back (it parses each as YAML)."""
    if isinstance(value, list):
        return [flag_words(v)[0] for v in value]
    if isinstance(value, dict) or value is None:
        return [json.dumps(value)]
    if isinstance(value, bool):
        return [str(value).lower()]
    if isinstance(value, str):
        try:
            same = yaml.safe_load(value) == value
        except yaml.YAMLError:
            same = False
        return [value if same else json.dumps(value, ensure_ascii=False)]  # e.g. "a: b" would be a mapping
    return [str(value)]


def changed_fields(config: dict[str, Any]) -> dict[str, Any]:
    """The flat fields of a saved config that differ from grouprl's defaults for its task."""
    from grouprl.config import Config, ConfigError
    from grouprl.run_config import build_config

    task = (config.get("task") or {}).get("task")
    try:
        defaults = build_config(None, {"task": task} if task else {}, environ={}).model_dump()
    except (ConfigError, ValueError):  # a task this grouprl does not know: compare with the plain defaults
        defaults = Config().model_dump()
    # the task is what the defaults above were taken for: it always goes first
    changed = {"task": task} if task and task != Config().task.task else {}
    for section, fields in config.items():
        if not isinstance(fields, dict):
            continue
        for name, value in fields.items():
            if defaults.get(section, {}).get(name, object()) != value:
                changed[name] = value
    return changed


def reproduce_commands(config: dict[str, Any] | None, folder: Path, last_checkpoint: int | None) -> list[str]:
    """Shell commands that train the same run again, continue it, and look at it."""
    quoted = shlex.quote(str(folder))
    commands = [f"grouprl dashboard {quoted}"]
    if not isinstance(config, dict):
        return commands
    flags = []
    for name, value in changed_fields(config).items():
        flags.append(f"--{name} " + " ".join(shlex.quote(v) for v in flag_words(value)))
    commands.insert(0, "grouprl train " + " ".join(flags) if flags else "grouprl train")
    commands.insert(1, f"grouprl train --config {shlex.quote(str(folder / 'config.json'))}")
    if last_checkpoint is not None:
        commands.insert(
            2,
            f"grouprl train --config {shlex.quote(str(folder / 'config.json'))} "
            f"--resume_from_checkpoint {shlex.quote(str(folder / f'checkpoint-{last_checkpoint}'))}",
        )
    return commands


def open_runs(dirs: Sequence[str | os.PathLike]) -> list[RunFolder]:
    """Run folders named by their last path part, or by more parts where two would share a name."""
    paths = [Path(d).resolve() for d in dirs]
    depth = 1
    while depth < 8:
        names = ["/".join(p.parts[-depth:]) for p in paths]
        if len(set(names)) == len(names):
            break
        depth += 1
    return [RunFolder(p, "/".join(p.parts[-depth:])) for p in paths]
