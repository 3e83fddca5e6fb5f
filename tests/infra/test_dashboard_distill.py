"""On-policy distillation in the dashboard: every rollout record carries its trained tokens with the student's and
the teacher's log-prob (``distill_tokens``), and the Groups view shades each completion's tokens by their
difference, in a real headless Chromium on the single-file report. A real two-step run on the tiny model, the
teacher an SFT-warmed tiny checkpoint."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from run_helpers import train
from grouprl.observe.dashboard import write_report
from grouprl.observe.step_logs import episode_token_signal
from test_dashboard import FLAGS, CHROMIUM, browser_missing


@pytest.fixture(scope="module")
def distilled(tmp_path_factory, tiny_arithmetic_dir, warm_arithmetic_dir) -> Path:
    out = tmp_path_factory.mktemp("distill_dash") / "run"
    args = ("--teacher", str(warm_arithmetic_dir), "--distill_coef", "1.0", "--max_steps", "2", "--max_new_tokens", "6")
    assert train(tiny_arithmetic_dir, out, *args) == 0
    return out


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "rollouts" / "rollouts.jsonl").read_text().splitlines()]


def test_every_rollout_carries_its_tokens_teacher_and_student(distilled):
    records = _records(distilled)
    metrics = [json.loads(line) for line in (distilled / "metrics.jsonl").read_text().splitlines()]
    assert {r["step"] for r in records} == {1, 2}
    for step in (1, 2):
        rows = [r for r in records if r["step"] == step]
        tokens = [t for r in rows for t in r["distill_tokens"]]
        for r in rows:
            assert len(r["distill_tokens"]) == r["new_tokens"]  # every generated token, nothing else
            texts = "".join(text for text, _, _ in r["distill_tokens"])
            assert re.sub(r"<\|[a-z_]+\|>", "", texts) == r["completion"]  # its text shows no special tokens
        assert all(s <= 0 and t <= 0 for _, s, t in tokens)  # log-probs
        # one micro-batch: the token mean of student - teacher is the step's logged k1 estimate of the KL
        kl = sum(s - t for _, s, t in tokens) / len(tokens)
        assert kl == pytest.approx(metrics[step - 1]["distill/kl_mean"], abs=2e-3)
        assert kl > 0.05  # the untrained student is far from the warmed teacher: the view has something to show


def test_the_signal_regroups_per_episode():
    """A conversation is one sample; any other episode one sample per step; episodes past this process's
    share (only process 0 writes logs) get none."""
    conv = SimpleNamespace(conversation=True, steps=[1, 2, 3])
    env = SimpleNamespace(conversation=False, steps=[1, 2])
    signal = [[["a", -1, -2]], [["b", -1, -1]], [["c", 0, -1], ["d", 0, 0]], [["e", -3, -1]]]
    assert episode_token_signal([conv, env, env], signal) == [
        [["a", -1, -2]],
        [["b", -1, -1], ["c", 0, -1], ["d", 0, 0]],
        None,
    ]
    assert episode_token_signal([env], None) == [None]


def test_groups_view_shades_each_token_by_teacher_and_student(distilled, tmp_path):
    reason = browser_missing()
    if reason:
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    report = write_report([str(distilled)], tmp_path / "report.html")
    errors: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.on("pageerror", lambda err: errors.append(str(err)))
        page.goto(report.as_uri())
        page.wait_for_selector("body[data-ready='1']", timeout=30000)
        page.click("#tabs button[data-view='groups']")
        page.wait_for_selector("table.groups-list tbody tr")
        assert "KL to teacher" in page.locator("table.groups-list thead").inner_text()
        page.locator("table.groups-list tbody tr").nth(0).click()
        page.wait_for_selector("#group-detail .completion .teacher-tokens")
        group = int(page.locator("table.groups-list tbody tr.selected").get_attribute("data-group"))
        expected = [r for r in _records(distilled) if r["step"] == 2 and r["group"] == group]
        cards = page.locator("#group-detail .completion")
        assert cards.count() == len(expected)
        for k, record in enumerate(expected):
            spans = cards.nth(k).locator(".teacher-tokens .tok")
            assert spans.count() == len(record["distill_tokens"])
            shown = spans.evaluate_all("xs => xs.map(x => [x.textContent, Number(x.dataset.kl), x.style.background])")
            for (text, kl, colour), (want, s, t) in zip(shown, record["distill_tokens"]):
                assert text == want and kl == pytest.approx(s - t, abs=1e-4)
                assert ("220, 38, 38" if s - t > 0 else "37, 99, 235") in colour  # red: student surer; blue: less
        page.screenshot(path=str(tmp_path / "groups_distill.png"), full_page=True)
        browser.close()
    assert not errors, errors
