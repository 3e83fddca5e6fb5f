"""LLM judges: formats, errors that are never scores, overlap, timeouts, the on-disk cache.

The endpoint is a real HTTP server on 127.0.0.1 (tests/judge_standin.py, a scripted grader behind
the chat-completions route) started and killed by each test; the requests go through grouprl's bounded
HTTP client exactly as they would to vLLM or a hosted API.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grouprl.config import ConfigError
from grouprl.records import Episode, Step
from grouprl.rewards.guard import RewardFailure
from grouprl.rewards.learned.judge import JudgeParseError, parse_group_scores, parse_score
from grouprl.rewards.scorer import Scorer
from judge_standin import free_port, standin


@pytest.fixture()
def server(tmp_path):
    servers = []

    def start(mode: str = "arithmetic", delay: float = 0.0):
        srv = standin(tmp_path / f"standin{len(servers)}.log", mode, delay, tmp_path / f"requests{len(servers)}.jsonl")
        servers.append(srv)
        srv.start()
        return srv

    yield start
    for srv in servers:
        srv.kill()


def requests_seen(srv) -> list[dict]:
    path = Path(srv.command[srv.command.index("--log") + 1])
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def episodes(pairs: list[tuple[str, str]], k: int = 2) -> list[Episode]:
    out = []
    for i, (question, answer) in enumerate(pairs):
        ep = Episode(group_id=i // k, index_in_group=i % k, row={"question": question, "ground_truth": None})
        ep.steps.append(
            Step(
                prompt_text="p",
                prompt_ids=[1],
                action_text=answer,
                action_ids=[2],
                truncated=False,
                anchor_state=None,
                messages=[{"role": "user", "content": question}],
            )
        )
        out.append(ep)
    return out


def judge_scorer(name: str, base_url: str, run_dir=None, max_error_fraction: float = 1.0, **options) -> Scorer:
    opts = {"base_url": base_url, "model": "grader", "retries": 1, "backoff_seconds": 0.05, **options}
    return Scorer(
        [name],
        [1.0],
        max_error_fraction=max_error_fraction,
        reward_kwargs={name: opts},
        run_dir=str(run_dir) if run_dir else None,
    )


def test_formats():
    assert parse_score("first SCORE: 3 ... on reflection\nScore: 7", "score_line") == 7.0
    assert parse_score('thinking {"a": 1} then {"score": 8.5, "why": "ok"}', "json") == 8.5
    assert parse_score("6 out of 10", "number") == 6.0
    assert parse_score("<grade>4</grade>", "score_line", r"<grade>(\d+)</grade>") == 4.0
    for text, fmt in [("no number here", "score_line"), ("{broken", "json"), ("none", "number")]:
        with pytest.raises(JudgeParseError):
            parse_score(text, fmt)
    assert parse_group_scores("1: 3\nResponse 2: 9\n3 - 0", "score_line", 3) == [3.0, 9.0, 0.0]
    assert parse_group_scores('{"scores": [1, 2]}', "json", 2) == [1.0, 2.0]
    with pytest.raises(JudgeParseError, match=r"response\(s\) \[2\] of 3"):
        parse_group_scores("1: 3\n3: 4", "score_line", 3)


def test_bad_options_are_one_line_each():
    with pytest.raises(ConfigError, match=r"option\(s\) \['model'\] missing"):
        Scorer(["judge"], [1.0], reward_kwargs={"judge": {"base_url": "http://127.0.0.1:9/v1"}})
    with pytest.raises(ConfigError, match=r"unknown option\(s\) \['temprature'\]"):
        judge_scorer("judge", "http://127.0.0.1:9/v1", temprature=0)
    with pytest.raises(ConfigError, match="format 'number' cannot score a group"):
        judge_scorer("group_judge", "http://127.0.0.1:9/v1", format="number")
    with pytest.raises(ConfigError, match="template line 1"):
        judge_scorer("judge", "http://127.0.0.1:9/v1", template="{% if %}")


def test_pointwise_scores_overlap_and_are_cached_on_disk(server, tmp_path):
    srv = server(delay=0.3)
    eps = episodes([("12+30", "42"), ("12+30", "41"), ("5+5", "10"), ("7+1", "9"), ("2+2", "4"), ("9+9", "18")])
    scorer = judge_scorer("judge", srv.base_url, tmp_path / "run", concurrency=4)
    scores = scorer.score(eps)
    metrics = scores.metrics
    assert [v.parts["judge"] for v in scores.verdicts] == [1.0, 0.0, 1.0, 0.0, 1.0, 1.0]
    assert metrics["judge/calls"] == 6 and metrics["judge/cache_hits"] == 0 and metrics["reward_errors"] == 0
    assert metrics["judge/prompt_tokens"] > 0 and metrics["judge/latency_mean_s"] >= 0.3
    # The calls overlapped, never more than the bound at once.
    assert max(r["in_flight"] for r in requests_seen(srv)) == 4
    # The same batch again, and a fresh scorer over the same run folder (a resumed run): nothing sent.
    assert scorer.score(eps).metrics["judge/cache_hits"] == 6
    resumed = judge_scorer("judge", srv.base_url, tmp_path / "run")
    scores = resumed.score(eps)
    again = scores.metrics
    assert again["judge/calls"] == 0 and again["judge/cache_hits"] == 6
    assert [v.parts["judge"] for v in scores.verdicts] == [1.0, 0.0, 1.0, 0.0, 1.0, 1.0]
    assert len(requests_seen(srv)) == 6
    assert len(list((tmp_path / "run" / "judge_cache" / "judge").glob("responses.rank0.jsonl"))) == 1


def test_extra_body_reaches_the_server_and_keys_the_cache(server, tmp_path):
    """Server extensions (vLLM's structured outputs, logit_bias) go into every request's body as they are,
    and into the cache key: the same prompt under other constraints is another request."""
    srv = server()
    eps = episodes([("12+30", "42"), ("5+5", "10")])
    forced = {"structured_outputs": {"regex": "SCORE: (10|[0-9])"}, "logit_bias": {"32": 100.0}}
    first = judge_scorer("judge", srv.base_url, tmp_path / "run", extra_body=forced).score(eps)
    assert [v.parts["judge"] for v in first.verdicts] == [1.0, 1.0]
    assert [r["fields"]["structured_outputs"] for r in requests_seen(srv)] == [forced["structured_outputs"]] * 2
    assert all(
        r["fields"]["logit_bias"] == {"32": 100.0} and r["fields"]["max_tokens"] == 256 for r in requests_seen(srv)
    )
    plain = judge_scorer("judge", srv.base_url, tmp_path / "run").score(eps)  # same folder: no hit
    assert plain.metrics["judge/calls"] == 2 and plain.metrics["judge/cache_hits"] == 0
    assert "structured_outputs" not in requests_seen(srv)[-1]["fields"]
    again = judge_scorer("judge", srv.base_url, tmp_path / "run", extra_body=forced).score(eps)
    assert again.metrics["judge/cache_hits"] == 2 and len(requests_seen(srv)) == 4
    with pytest.raises(ConfigError, match=r"extra_body sets \['max_tokens'\], which the judge sets itself"):
        judge_scorer("judge", srv.base_url, extra_body={"max_tokens": 1})
    with pytest.raises(ConfigError, match="option extra_body: expected a mapping of request fields, found str"):
        judge_scorer("judge", srv.base_url, extra_body="regex")


def test_group_judge_one_call_per_group_scores_mapped_back(server):
    srv = server()
    # groups of 3; wrong answers in varied positions (the prompt orders a group's answers by their text)
    eps = episodes(
        [("20+22", "42"), ("20+22", "7"), ("20+22", "42 it is"), ("3+4", "1"), ("3+4", "2"), ("3+4", "7")], k=3
    )
    scores = judge_scorer("group_judge", srv.base_url).score(eps)
    metrics = scores.metrics
    assert [v.parts["group_judge"] for v in scores.verdicts] == [1.0, 0.0, 1.0, 0.0, 0.0, 1.0]
    assert metrics["group_judge/calls"] == 2 and len(requests_seen(srv)) == 2


def test_garbage_replies_are_errors_not_zeros(server):
    srv = server(mode="garbage")
    eps = episodes([("1+1", "2"), ("1+2", "3")])
    scorer = judge_scorer("judge", srv.base_url)
    scores = scorer.score(eps)
    metrics = scores.metrics
    assert [v.parts["judge"] for v in scores.verdicts] == [None, None]
    assert all(
        "judge: parse failure: the reply's last line is not a 'SCORE: <number>' line" in v.errors[0]
        for v in scores.verdicts
    )
    assert metrics["reward_errors"] == 2 and metrics["judge/parse_failures"] == 2
    with pytest.raises(RewardFailure, match="2 of 2 samples failed"):
        judge_scorer("judge", srv.base_url, max_error_fraction=0.5).score(eps)
    with pytest.raises(RewardFailure):  # the group judge too: one garbage reply fails its whole group
        judge_scorer("group_judge", srv.base_url, max_error_fraction=0.5).score(eps)


def test_out_of_range_score_is_an_error(server):
    srv = server()
    eps = episodes([("1+1", "2")])
    v = judge_scorer("judge", srv.base_url, score_range=[0, 5]).score(eps).verdicts
    assert v[0].parts["judge"] is None and "outside score_range [0, 5]" in v[0].errors[0]


def test_unreachable_endpoint_and_timeouts_are_errors(server):
    eps = episodes([("1+1", "2"), ("2+2", "4")])
    down = f"http://127.0.0.1:{free_port()}/v1"
    scores = judge_scorer("judge", down).score(eps)
    metrics = scores.metrics
    assert all("endpoint error after 2 attempts: ConnectError" in v.errors[0] for v in scores.verdicts)
    assert metrics["judge/endpoint_errors"] == 2 and metrics["judge/retries"] == 2
    slow = server(delay=3.0)
    verdicts = judge_scorer("judge", slow.base_url, timeout=0.5, retries=0).score(eps).verdicts
    assert all("Deadline" in v.errors[0] for v in verdicts)


def test_judge_requests_overlap_the_other_rewards(server, tmp_path):
    """A judge runs in its own thread while the batch's other rewards compute: its requests reach the
    server inside the window in which a slow local reward is still working."""
    srv = server(delay=0.1)
    window = tmp_path / "window.json"
    slow = tmp_path / "slow_reward.py"
    slow.write_text(
        "import json, time\n"
        "def slow(completion, ground_truth, **row):\n"
        f"    start = time.time(); time.sleep(0.4)\n"
        f"    with open({str(window)!r}, 'a') as fh: fh.write(json.dumps([start, time.time()]) + '\\n')\n"
        "    return 1.0\n"
    )
    opts = {"base_url": srv.base_url, "model": "grader", "concurrency": 1}
    scorer = Scorer([f"{slow}:slow", "judge"], [1.0, 1.0], reward_kwargs={"judge": opts})
    eps = episodes([("1+1", "2"), ("2+2", "4"), ("3+3", "6"), ("4+4", "8")])
    assert [v.parts["judge"] for v in scorer.score(eps).verdicts] == [1.0] * 4
    spans = [json.loads(line) for line in window.read_text().splitlines()]
    begin, end = spans[0][0], spans[-1][1]
    asked = [r["t"] for r in requests_seen(srv)]
    # Run one after the other, the judge's 4 requests (0.4 s) would all come before or all after the slow
    # reward's 1.6 s; overlapping, they span into its window.
    assert len(asked) == 4 and min(asked) < end and max(asked) > begin


def test_a_hung_request_costs_its_own_sample_not_the_batch(server):
    """The batch deadline (0.9 x reward_timeout): what is answered by then keeps its score, the rest are
    errors; without it the scorer's time budget would fail every sample of the batch."""
    srv = server(delay=1.5)
    eps = episodes([("1+1", "2"), ("2+2", "4"), ("3+3", "7")])
    opts = {"base_url": srv.base_url, "model": "grader", "concurrency": 1, "timeout": 30, "retries": 0}
    scorer = Scorer(["judge"], [1.0], max_error_fraction=1.0, reward_kwargs={"judge": opts}, reward_timeout=2.5)
    scores = scorer.score(eps)
    metrics = scores.metrics
    parts = [v.parts["judge"] for v in scores.verdicts]
    assert parts[0] == 1.0 and parts[1:] == [None, None]  # one answer in 1.5 s; the deadline is 2.25 s
    assert all("no answer within the batch deadline of 2.25s" in v.errors[0] for v in scores.verdicts[1:])
    assert metrics["reward_errors"] == 2 and metrics["judge/endpoint_errors"] == 2
