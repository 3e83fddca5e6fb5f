"""The dashboard page (one HTML file with every script and style inlined) and the offline report.

The live dashboard and the report run the same scripts; only the data source differs: the
live page asks the server (``window.GROUPRL_LIVE``), the report carries its data in a JSON
script element. Everything is inlined, so a report opens from disk with no network at all.
"""

from __future__ import annotations

import json
import re
import time
from importlib import resources
from pathlib import Path
from typing import Any, Iterable

from grouprl.observe.dashboard.run_folder import RUN_FILES, RunFolder, open_runs

# Order matters: uPlot first, then the helpers the views use, the views, and the app last.
SCRIPTS = (
    "uPlot.iife.min.js",
    "dom.js",
    "data.js",
    "charts.js",
    "overview.js",
    "curves.js",
    "groups.js",
    "trajectories.js",
    "app.js",
)
STYLES = ("uPlot.min.css", "style.css")


def _asset(name: str) -> str:
    return resources.files("grouprl.observe.dashboard").joinpath("assets").joinpath(name).read_text(encoding="utf-8")


def _script_safe(text: str) -> str:
    """Text that cannot close the <script> element it sits in."""
    return text.replace("</", "<\\/")


def json_for_html(value: Any) -> str:
    """JSON that is safe inside <script type="application/json">: the policy's completions are
    untrusted text, so '<', '>' and '&' are escaped and cannot end the element."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=str)
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def render_page(title: str, data: dict[str, Any] | None) -> str:
    """The app; ``data`` None makes the live page (it polls the server it came from)."""
    styles = "\n".join(_asset(name) for name in STYLES)
    scripts = "\n".join(f"<script>/* {name} */\n{_script_safe(_asset(name))}\n</script>" for name in SCRIPTS)
    payload = (
        "<script>window.GROUPRL_LIVE = true;</script>"
        if data is None
        else f'<script type="application/json" id="grouprl-data">{json_for_html(data)}</script>'
    )
    parts = {"title": _html_escape(title), "styles": styles, "data": payload, "scripts": scripts}
    # One pass over the template alone: what is put in (a completion saying "{{scripts}}") is never read as a slot.
    return re.sub(r"\{\{(title|styles|data|scripts)\}\}", lambda m: parts[m.group(1)], _asset("index.html"))


def _html_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def finite_json(value: Any) -> Any:
    """NaN and infinities become None: JSON has no such numbers (a NaN loss must still show)."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite_json(v) for v in value]
    return value


def pick_steps(steps: list[int], sizes: dict[int, int], budget_bytes: int) -> list[int]:
    """As many steps as fit the budget, evenly spaced from the first to the last (one: the last)."""

    def spread(n: int) -> list[int]:
        if n == 1:
            return [steps[-1]]
        return sorted({steps[round(i * (len(steps) - 1) / (n - 1))] for i in range(n)})

    if not steps:
        return []
    mean = max(1, sum(sizes.get(s, 0) for s in steps) // len(steps))
    n = max(1, min(len(steps), budget_bytes // mean))
    while n > 1 and sum(sizes.get(s, 0) for s in spread(n)) > budget_bytes:
        n -= 1
    return spread(n)


def report_data(folders: Iterable[RunFolder], budget_bytes: int = 24 << 20) -> dict[str, Any]:
    """Everything a report shows; rollout and trajectory records of at most ``budget_bytes`` per
    run (whole steps, spread over the run), so a report of a long run stays small enough to open."""
    runs = []
    for folder in folders:
        rollout_steps = folder.rollouts.steps()
        spans = folder.rollouts.spans
        rollout_pick = pick_steps(
            [s for s, _ in rollout_steps],
            {s: spans[s].end - spans[s].start for s, _ in rollout_steps},
            budget_bytes // 2,
        )
        traj_files = folder.trajectory_files()
        traj_pick = pick_steps(
            list(traj_files), {s: p.stat().st_size for s, p in traj_files.items()}, budget_bytes // 2
        )
        runs.append(
            finite_json(
                {
                    "overview": folder.overview(),
                    "metrics": folder.metrics()["rows"],
                    "eval": folder.eval_rows(),
                    "steps": {"rollout_steps": rollout_steps, "trajectory_steps": list(traj_files)},
                    "rollouts": {str(s): folder.rollouts.records(s) for s in rollout_pick},
                    "trajectories": {str(s): folder.trajectories(s) for s in traj_pick},
                }
            )
        )
    return {"generated": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "runs": runs}


def write_report(dirs: list[str], out: str | Path, budget_mb: float = 24.0) -> Path:
    """The report of ``dirs``; ``ConfigError`` (one line) for a folder that holds no run, an ``out``
    that is a folder, a budget that is no positive number."""
    from grouprl.config import ConfigError

    if not (isinstance(budget_mb, (int, float)) and 0 < budget_mb < float("inf")):
        raise ConfigError(f"--max_mb: got {budget_mb}; expected a positive number of MiB")
    out = Path(out)
    if out.is_dir():
        raise ConfigError(f"--out {out} is a folder; expected the HTML file to write, e.g. {out / 'report.html'}")
    folders = open_runs(dirs)
    missing = [str(f.path) for f in folders if not f.path.exists()]
    if missing:
        raise FileNotFoundError(f"no run folder at {', '.join(missing)}")
    for folder in folders:
        if not folder.path.is_dir():
            raise ConfigError(f"{folder.path} is a file; expected a run folder (the output_dir of grouprl train)")
        if not any((folder.path / name).exists() for name in RUN_FILES) and not folder.trajectory_files():
            raise ConfigError(
                f"{folder.path} holds no grouprl run (none of {', '.join(RUN_FILES)}); expected the "
                "output_dir of grouprl train"
            )
    data = report_data(folders, int(budget_mb * (1 << 20)))
    title = "grouprl report: " + ", ".join(f.name for f in folders)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_page(title, data), encoding="utf-8")
    return out
