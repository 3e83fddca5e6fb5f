"""grouprl dashboard / grouprl report on real three-step runs (single-turn arithmetic and a
GiGPO gridworld), checked through their readers and in a real headless Chromium.

The live dashboard is started (a real server process) before the runs exist and a browser page
is opened on it; the page is never reloaded, so what it shows at the end came in by polling
while the runs trained. Screenshots go to this module's tmp folder (printed with -s)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import GRID_CLI
from grouprl import cli
from grouprl.observe.dashboard import RunFolder, write_report
from grouprl.observe.dashboard.run_folder import flag_words

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SRC = Path(__file__).resolve().parents[2] / "src"


def browser_missing() -> str | None:
    if not Path(CHROMIUM).is_file():
        return f"no Chromium at {CHROMIUM} (.ci/install-system-deps installs Debian's chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install -e '.[test]')"
    return None


def _flags(options: dict) -> list[str]:
    """Flags as a person types them; values that YAML would read differently ('', "a: b") quoted."""
    return [x for k, v in options.items() for x in (f"--{k}", *flag_words(str(v) if isinstance(v, Path) else v))]


def _train(args: list[str]) -> None:
    assert cli.main(["train", *args]) == 0


class Session:
    """The server process, the runs, and (when Chromium is here) one page that watched them."""

    def __init__(self, root: Path):
        self.root = root
        self.arith, self.grid, self.shots = root / "arith", root / "grid", root / "screenshots"
        self.shots.mkdir()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
        self.server = subprocess.Popen(
            [sys.executable, "-m", "grouprl.cli", "dashboard", str(self.arith), str(self.grid), "--port", "0"],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        line = self.server.stdout.readline()
        assert line.startswith("grouprl dashboard: http://127.0.0.1:"), line
        self.url = line.split()[2]
        self.pw = self.browser = self.live_page = None
        self.errors: list[str] = []

    def open_browser(self) -> None:
        from playwright.sync_api import sync_playwright

        self.pw = sync_playwright().start()
        self.browser = self.pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        self.live_page = self.page(self.url)

    def page(self, url: str, offline: bool = False):
        page = self.browser.new_page(viewport={"width": 1400, "height": 1000})
        page.on("pageerror", lambda err: self.errors.append(f"{url}: {err}"))
        page.on("console", lambda msg: msg.type == "error" and self.errors.append(f"{url}: {msg.text}"))
        if offline:  # a report must not need the network: every request but the file itself fails
            page.route(
                "**/*",
                lambda route: (
                    route.continue_()
                    if route.request.url.startswith("file://")
                    else (self.errors.append("network: " + route.request.url), route.abort())
                ),
            )
        page.goto(url)
        page.wait_for_selector("body[data-ready='1']", timeout=30000)
        return page

    def shot(self, page, name: str) -> Path:
        path = self.shots / f"{name}.png"
        page.evaluate("window.scrollTo(0, 0)")  # a full-page shot of a scrolled page draws the sticky header mid-page
        page.screenshot(path=str(path), full_page=True)
        return path

    def close(self) -> None:
        if self.browser is not None:
            self.browser.close()
            self.pw.stop()
        self.server.terminate()
        self.server.wait(timeout=10)


@pytest.fixture(scope="module")
def session(tmp_path_factory, warm_arithmetic_dir, warm_grid_dir):
    s = Session(tmp_path_factory.mktemp("dashboard"))
    try:
        if not browser_missing():
            s.open_browser()
        common = {
            "max_steps": 3,
            "num_generations": 4,
            "device": "cpu",
            "save_trajectories_every": 1,
            "logging_steps": 1,
        }
        _train(
            _flags(
                {
                    **common,
                    "task": "arithmetic",
                    "model_name_or_path": warm_arithmetic_dir,
                    "batch_size": 4,
                    "n_train": 64,
                    "n_eval": 8,
                    "output_dir": s.arith,
                    "report_to": "tensorboard",
                }
            )
        )
        _train(
            _flags(
                {
                    **common,
                    **GRID_CLI,
                    "model_name_or_path": warm_grid_dir,
                    "advantage": "gigpo",
                    "batch_size": 2,
                    "max_episode_steps": 4,
                    "n_train": 16,
                    "n_eval": 4,
                    "output_dir": s.grid,
                }
            )
        )
        yield s
    finally:
        s.close()
        print(f"\ndashboard screenshots: {s.shots}")


@pytest.fixture
def browser(session):
    reason = browser_missing()
    if reason:
        pytest.skip(reason)
    session.errors.clear()
    yield session
    assert not session.errors, session.errors


def _rollouts(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "rollouts" / "rollouts.jsonl").read_text().splitlines()]


# -- the readers ------------------------------------------------------------------------------
def test_run_folder_reads_both_runs(session):
    for run, steps in ((session.arith, 3), (session.grid, 3)):
        folder = RunFolder(run)
        overview = folder.overview()
        assert overview["finished"] and overview["summary"]["steps"] == steps
        assert [s for s, _ in folder.steps()["rollout_steps"]] == [1, 2, 3]
        assert folder.steps()["trajectory_steps"] == [1, 2, 3]
        assert [r["step"] for r in folder.metrics()["rows"]] == [1, 2, 3]
        assert folder.metrics(since=2)["rows"][0]["step"] == 3
        assert len(folder.rollouts.records(2)) == sum(1 for r in _rollouts(run) if r["step"] == 2)
        assert all(size is not None for size in overview["files"].values()), overview["files"]


def test_reproduce_command_gives_the_same_config(session):
    """The first command on the Overview, parsed by grouprl's own CLI, is the saved config."""
    import shlex

    for run in (session.arith, session.grid):
        command = RunFolder(run).overview()["commands"][0]
        args = cli.build_parser().parse_args(shlex.split(command)[1:])
        assert cli.config_from_args(args).model_dump() == json.loads((run / "config.json").read_text())


def test_training_wrote_tensorboard_events(session):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(session.arith / "tensorboard"))
    events.Reload()
    rows = RunFolder(session.arith).metrics()["rows"]
    assert [(e.step, round(e.value, 5)) for e in events.Scalars("reward")] == [
        (r["step"], round(r["reward"], 5)) for r in rows
    ]


def test_report_is_one_file_with_no_outside_references(session):
    out = write_report([str(session.arith), str(session.grid)], session.root / "report.html")
    html = out.read_text()
    assert 'src="http' not in html and "<link" not in html and "@import" not in html
    data = json.loads(html.split('id="grouprl-data">', 1)[1].split("</script>", 1)[0])
    assert [r["overview"]["name"] for r in data["runs"]] == ["arith", "grid"]
    assert sorted(map(int, data["runs"][1]["trajectories"])) == [1, 2, 3]
    # a completion that holds markup stays data: it cannot close the script element
    assert "</script><script>" not in html.split('id="grouprl-data">', 1)[1].split("</script>", 1)[0]


# -- in the browser ---------------------------------------------------------------------------
def test_live_dashboard_followed_the_runs(browser):
    page = browser.live_page  # opened before either run existed, never reloaded
    page.wait_for_function(
        "document.querySelectorAll('#view table.grid tbody tr td:last-child')[1]?.textContent === 'finished'",
        timeout=30000,
    )
    rows = page.locator("#view table.grid").first.locator("tbody tr")
    assert rows.nth(0).locator("td").nth(3).inner_text() == "3 / 3"
    assert rows.nth(1).locator("td").nth(3).inner_text() == "3 / 3"
    browser.shot(page, "live_overview")
    page.click("#tabs button[data-view='curves']")
    page.wait_for_selector(".chart[data-metric='reward'] canvas")
    assert page.locator(".chart").count() >= 20
    browser.shot(page, "live_curves")


def _open_group_and_check(browser, page, run: Path, name: str) -> None:
    page.click("#tabs button[data-view='groups']")
    page.wait_for_selector("table.groups-list tbody tr")
    last_step = max(r["step"] for r in _rollouts(run))
    assert page.locator("#step-select").input_value() == str(last_step)
    page.locator("table.groups-list tbody tr").nth(1).click()
    page.wait_for_selector("#group-detail .completion")
    group = int(page.locator("table.groups-list tbody tr.selected").get_attribute("data-group"))
    expected = [r for r in _rollouts(run) if r["step"] == last_step and r["group"] == group]
    cards = page.locator("#group-detail .completion")
    assert cards.count() == len(expected) == 4
    for k, record in enumerate(expected):
        card = cards.nth(k)
        assert card.locator("pre.text").text_content() == record["completion"]
        assert float(card.locator(".reward").inner_text()) == pytest.approx(record["reward"], abs=6e-4)
        adv = card.locator(".advantage").inner_text()
        assert float(adv) == pytest.approx(record["advantage"], abs=6e-4)
        assert ("truncated" in card.locator(".completion-head").inner_text()) == record["truncated"]
    browser.shot(page, name)


def test_groups_view_shows_a_groups_completions(browser, session):
    report = write_report([str(session.arith), str(session.grid)], session.root / "report.html")
    page = browser.page(report.as_uri(), offline=True)
    _open_group_and_check(browser, page, session.arith, "report_group_arith")
    # search over every step finds a prompt's group (the filters: the test below)
    last_step = max(r["step"] for r in _rollouts(session.arith))
    first = next(r for r in _rollouts(session.arith) if r["step"] == last_step)
    page.fill("#group-search", first["prompt"].split("user\n")[1].split("<")[0])
    page.click("#search-all")
    page.wait_for_selector("#search-hits tbody tr")
    hits = page.locator("#search-hits tbody tr").evaluate_all(
        "rows => rows.map(r => r.cells[0].textContent + '/' + r.cells[1].textContent)"
    )
    assert f"{last_step}/{first['group']}" in hits
    page.close()


def _doctored_copy(session) -> tuple[Path, int, list[dict]]:
    """The arithmetic run with its last step's groups 1 and 2 given what a reward can say: group 1
    one correct completion, group 2 a reward error, reasons, a truncation and a completion that is
    markup (the policy writes anything; the page must show it as text)."""
    run = session.root / "doctored"
    if not run.exists():
        shutil.copytree(session.arith, run, ignore=shutil.ignore_patterns("checkpoint-*", "tensorboard"))
        rows = _rollouts(session.arith)
        last = max(r["step"] for r in rows)
        for r in rows:
            if r["step"] != last:
                continue
            r["correct"] = r["group"] == 1 and r["completion"] == next(
                x["completion"] for x in rows if x["step"] == last and x["group"] == 1
            )
            if r["group"] == 2:
                r["reward_reasons"] = {"arithmetic_digits": f"digits right in {r['completion']!r}"}
        first = next(r for r in rows if r["step"] == last and r["group"] == 2)
        first.update(
            completion='<img src=x onerror="window.pwned=1"><b>bold</b>',
            truncated=True,
            reward_errors=["arithmetic_digits: TimeoutError: no answer within 60 s"],
        )
        (run / "rollouts" / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    rows = _rollouts(run)
    last = max(r["step"] for r in rows)
    return run, last, [r for r in rows if r["step"] == last]


def test_groups_filters_reasons_errors_and_markup_as_text(browser, session):
    run, last, rows = _doctored_copy(session)
    page = browser.page(
        write_report([str(run)], session.root / "doctored.html").as_uri() + "#view=groups", offline=True
    )
    page.wait_for_selector("table.groups-list tbody tr")
    groups = {}
    for r in rows:
        groups.setdefault(r["group"], []).append(r)

    def shown(kind: str) -> list[int]:
        page.select_option("#group-filter", kind)
        page.evaluate("() => GRL.app.queue")  # the redraw the change started
        return [
            int(x)
            for x in page.locator("table.groups-list tbody tr").evaluate_all("rows => rows.map(r => r.dataset.group)")
        ]

    assert shown("correct") == [g for g, eps in groups.items() if any(e["correct"] for e in eps)] == [1]
    assert shown("wrong") == [g for g, eps in groups.items() if not any(e["correct"] for e in eps)]
    assert shown("zero") == [
        g for g, eps in groups.items() if max(e["reward"] for e in eps) - min(e["reward"] for e in eps) < 1e-9
    ]
    assert shown("errors") == [2]
    page.locator("table.groups-list tbody tr").first.click()
    page.wait_for_selector("#group-detail .completion")
    card = page.locator("#group-detail .completion").first
    assert card.locator("pre.text").text_content() == groups[2][0]["completion"]  # the markup, as text
    assert card.locator("pre.text img, pre.text b").count() == 0 and page.evaluate("window.pwned") is None
    assert "TimeoutError: no answer within 60 s" in card.locator(".errors").inner_text()
    assert "1 reward error" in card.locator(".completion-head").inner_text()
    assert "truncated" in card.locator(".completion-head").inner_text()
    for k, e in enumerate(groups[2]):
        other = page.locator("#group-detail .completion").nth(k)
        reason, part = e["reward_reasons"]["arithmetic_digits"], e["rewards"]["arithmetic_digits"]
        assert other.locator(".reasons").inner_text() == f"arithmetic_digits: {reason}"
        assert float(other.locator("table.parts td").inner_text()) == pytest.approx(part, abs=6e-4)
    browser.shot(page, "report_group_errors")
    page.close()


def test_curves_overlay_runs_smoothing_and_eval_points(browser, session):
    out = write_report([str(session.arith), str(session.grid)], session.root / "report.html")
    page = browser.page(out.as_uri() + "#view=curves&smooth=0.6", offline=True)
    page.wait_for_selector(".chart[data-metric='reward'] canvas")
    series = page.evaluate("""() => { const u = document.querySelector(".chart[data-metric='reward']").chart;
        return u.series.slice(1).map((s, i) => ({label: s.label, ys: u.data[i + 1]})); }""")
    by_label = {s["label"]: [y for y in s["ys"] if y is not None] for s in series}
    for name, run in (("arith", session.arith), ("grid", session.grid)):
        raw = [r["reward"] for r in RunFolder(run).metrics()["rows"]]
        assert by_label[f"{name} · reward (raw)"] == pytest.approx(raw)
        smoothed, last = [], 0.0  # TensorBoard's debiased exponential moving average
        for n, y in enumerate(raw, start=1):
            last = last * 0.6 + 0.4 * y
            smoothed.append(last / (1 - 0.6**n))
        assert by_label[f"{name} · reward"] == pytest.approx(smoothed)
        evals = [
            [json.loads(line)["reward"] for line in (run / "eval" / f"{which}.jsonl").read_text().splitlines()]
            for which in ("before", "after")
        ]  # drawn at step 0 and at the last step
        assert by_label[f"{name} · held-out eval"] == pytest.approx([sum(e) / len(e) for e in evals])
    # eval points sit only on the charts of metrics a run logs: the arithmetic run has no success_rate
    labels = page.evaluate("""() => document.querySelector(".chart[data-metric='success_rate']").chart
        .series.map((s) => s.label)""")
    assert "grid · held-out eval" in labels and "arith · held-out eval" not in labels
    browser.shot(page, "report_curves_smoothed")
    page.close()


def test_live_dashboard_groups_and_env_group(browser, session):
    page = browser.live_page
    page.select_option("#run-select", "1")
    _open_group_and_check(browser, page, session.grid, "live_group_grid")
    # an environment episode's card leads to its whole trajectory
    group = int(page.locator("table.groups-list tbody tr.selected").get_attribute("data-group"))
    record = [r for r in _rollouts(session.grid) if r["step"] == 3 and r["group"] == group][-1]
    page.locator("#group-detail .completion .to-trajectory").last.click()
    page.wait_for_selector("table.traj-steps tbody tr")
    assert page.locator("table.episodes-list tr.selected").get_attribute("data-episode") == f"g{group}-e3"
    assert page.locator("table.traj-steps tbody tr").count() == record["episode_length"]
    rows = page.locator("table.traj-steps tbody tr")
    # the record's completion is the episode's last action; each row shows its own step's
    assert rows.first.locator("td").nth(2).text_content() == record["actions"][0]
    assert rows.last.locator("td").nth(2).text_content() == record["completion"] == record["actions"][-1]


def test_trajectory_view_shows_steps_and_anchor_group(browser, session):
    page = browser.live_page
    page.select_option("#run-select", "1")
    page.click("#tabs button[data-view='trajectories']")
    page.wait_for_selector("table.episodes-list tbody tr")
    by_step = {
        int(f.stem.split("_")[1]): [json.loads(line) for line in f.read_text().splitlines()]
        for f in (session.grid / "trajectories").glob("step_*.jsonl")
    }
    # the training step with the most step-level signal (nonzero A_S), and in it an episode with an
    # invalid action when there is one: what a person debugging GiGPO would open
    step = max(by_step, key=lambda s: (sum(abs(r["step_advantage"]) > 1e-9 for r in by_step[s]), s))
    rows = by_step[step]
    page.select_option("#traj-step", str(step))
    page.evaluate("() => GRL.app.queue")
    invalid = [r["episode"] for r in rows if not r["valid"]]
    episode = invalid[0] if invalid else rows[0]["episode"]
    page.locator(f"table.episodes-list tbody tr[data-episode='{episode}']").click()
    page.wait_for_selector("table.traj-steps tbody tr")
    steps = sorted((r for r in rows if r["episode"] == episode), key=lambda r: r["t"])
    table = page.locator("table.traj-steps tbody tr")
    assert table.count() == len(steps)
    for i, s in enumerate(steps):
        cells = table.nth(i).locator("td")
        assert cells.nth(2).text_content() == s["action"]
        assert (s["invalid_reason"] or "yes") in cells.nth(3).inner_text()
        assert float(cells.nth(10).inner_text()) == pytest.approx(s["advantage"], abs=6e-4)
        assert float(cells.nth(9).inner_text()) == pytest.approx(s["step_advantage"], abs=6e-4)
        assert float(cells.nth(8).inner_text()) == pytest.approx(s["episode_advantage"], abs=6e-4)
        assert cells.nth(11).inner_text() == f"{s['anchor_group']} ({s['anchor_group_size']})"
    pick = next((i for i, s in enumerate(steps) if not s["valid"]), 0)
    table.nth(pick).click()
    page.wait_for_selector("#anchor-group .completion")
    chosen = steps[pick]
    members = [r for r in rows if r["group"] == chosen["group"] and r["anchor_group"] == chosen["anchor_group"]]
    assert page.locator("#anchor-group .completion").count() == len(members) == chosen["anchor_group_size"]
    assert page.locator("#anchor-group .completion.chosen").count() == 1
    shown = page.locator("#anchor-group .completion").evaluate_all(
        "cards => cards.map(c => c.dataset.episode + '/' + c.dataset.t)"
    )
    assert sorted(shown) == sorted(f"{m['episode']}/{m['t']}" for m in members)
    browser.shot(page, "live_trajectory_grid")


def test_grail_view_without_and_with_grail_metrics(browser, session):
    """The GRAIL folder is the arithmetic run with the GRAIL metric names added to its metrics.jsonl
    (the view only reads those names; a real tiny GRAIL run, recipes/tiny/slates_grail.yaml, logs the
    same ones but builds its own models first, and logs no disc/p_expert_neg while its policy has
    no parseable answer), so both P(expert) lines are drawn without training a GRAIL run here."""
    page = browser.live_page
    page.click("#tabs button[data-view='grail']")
    page.wait_for_selector("#grail-absent")
    grail = session.root / "grail_metrics"
    shutil.copytree(session.arith, grail, ignore=shutil.ignore_patterns("checkpoint-*", "tensorboard"))
    rows = RunFolder(session.arith).metrics()["rows"]
    with open(grail / "metrics.jsonl", "w") as fh:
        for r in rows:
            t = r["step"] / 3
            fh.write(
                json.dumps(
                    {
                        **r,
                        "grail/alpha": 1 - t / 2,
                        "grail/beta": t / 2,
                        "disc/accuracy": 0.5 + t / 3,
                        "disc/p_expert_pos": 0.5 + t / 4,
                        "disc/p_expert_neg": 0.5 - t / 4,
                        "disc/loss": 0.7 - t / 5,
                    }
                )
                + "\n"
            )
    out = write_report([str(grail)], session.root / "grail.html")
    report = browser.page(out.as_uri() + "#view=grail", offline=True)
    report.wait_for_selector(".chart canvas")
    assert report.locator(".chart:not(.empty)").count() == 4
    legend = report.locator(".chart").nth(2).inner_text()
    assert "disc/p_expert_pos" in legend and "disc/p_expert_neg" in legend
    browser.shot(report, "report_grail")
    report.close()
