"""Chat-completion requests to a judge endpoint: overlapping, bounded, timed, retried, cached, counted.

A batch of requests runs on one asyncio loop with at most ``concurrency`` in flight (``POST
<base_url>/chat/completions`` through ``bounded_http``; any OpenAI-compatible server: vLLM, TGI,
``transformers serve``, hosted APIs). Each attempt has a total deadline, ``timeout`` (a server that
trickles its body does not keep it alive), and a body cap, ``max_bytes`` (a huge reply is abandoned
as it arrives, never buffered whole nor cached); the body is decoded by ``safe_text.safe_json_loads``
and the reply's text made ``encodable``. Connection errors, deadlines, 429 and 5xx are retried
``retries`` times after ``backoff_seconds * 2**attempt`` (plus up to 50 % jitter, so a restarted
server is not hit by every request at once); any other status (a 400: a bad model name, a prompt
too long) is final. Identical requests in a batch are sent once. A batch has a ``deadline`` (by default
0.9 x the run's ``reward_timeout``): requests still unanswered then are cancelled and become errors, so a
hung request costs its own sample, not the whole batch (the scorer's own time budget would fail them all). What did not get an answer is
returned as an error text, never as a reply.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from grouprl.bounded_http import RequestFailed, chat_completion
from grouprl.rewards.learned.judge_cache import JudgeCache, request_key


@dataclass
class Reply:
    text: str | None  # None: no answer (``error`` says why)
    error: str | None = None
    cached: bool = False
    usage: dict[str, int] = field(default_factory=dict)  # tokens, where the endpoint reports them
    finish_reason: str | None = None  # "length": the reply was cut at max_tokens (not a verdict)


@dataclass
class JudgeStats:
    """Counters since the last ``drain``: what the judge cost this batch."""

    requests: int = 0  # asked of this judge (cache hits included)
    calls: int = 0  # sent to the endpoint (retries not counted)
    cache_hits: int = 0
    retries: int = 0
    endpoint_errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latencies: list[float] = field(default_factory=list)

    def as_metrics(self, prices: tuple[float, float] | None) -> dict[str, float]:
        out = {
            "requests": float(self.requests),
            "calls": float(self.calls),
            "cache_hits": float(self.cache_hits),
            "retries": float(self.retries),
            "endpoint_errors": float(self.endpoint_errors),
            "prompt_tokens": float(self.prompt_tokens),
            "completion_tokens": float(self.completion_tokens),
        }
        if self.latencies:
            out["latency_mean_s"] = sum(self.latencies) / len(self.latencies)
            out["latency_max_s"] = max(self.latencies)
        if prices is not None:
            out["cost"] = (self.prompt_tokens * prices[0] + self.completion_tokens * prices[1]) / 1e6
        return out


MAX_BYTES = 4 << 20  # a chat completion of a few thousand tokens is a few tens of kB


class JudgeClient:
    def __init__(
        self,
        base_url: str,
        api_key: str,
        concurrency: int,
        timeout: float,
        retries: int,
        backoff_seconds: float,
        cache: JudgeCache,
        deadline: float | None = None,
        max_bytes: int = MAX_BYTES,
    ):
        self.base_url, self.api_key, self.max_bytes = base_url, api_key, max_bytes
        self.deadline = deadline  # seconds for a whole batch; what is unanswered then is an error
        self.concurrency, self.timeout, self.retries, self.backoff = concurrency, timeout, retries, backoff_seconds
        self.cache = cache
        self.stats = JudgeStats()

    def ask(self, requests: list[dict[str, Any]]) -> list[Reply]:
        """One reply per request (``model``, ``messages`` and sampling settings), overlapping."""
        return asyncio.run(self._ask_all(requests))

    def drain(self) -> JudgeStats:
        stats, self.stats = self.stats, JudgeStats()
        return stats

    async def _ask_all(self, requests: list[dict[str, Any]]) -> list[Reply]:
        keys = [request_key(r) for r in requests]
        self.stats.requests += len(requests)
        unique = {k: r for k, r in zip(keys, requests)}
        answers: dict[str, Reply] = {}
        todo = []
        for key, request in unique.items():
            hit = self.cache.get(key)
            if hit is not None:
                answers[key] = Reply(hit["text"], cached=True, finish_reason=hit.get("finish_reason"))
                self.stats.cache_hits += 1
            else:
                todo.append((key, request))
        if todo:
            client = httpx.AsyncClient(timeout=self.timeout)
            gate = asyncio.Semaphore(self.concurrency)

            async def one(key: str, request: dict[str, Any]) -> None:
                async with gate:
                    answers[key] = reply = await self._with_retries(client, request)
                if reply.text is not None:
                    self.cache.put(key, reply.text, reply.usage, reply.finish_reason)

            tasks = [asyncio.ensure_future(one(k, r)) for k, r in todo]
            try:
                _, late = await asyncio.wait(tasks, timeout=self.deadline)
                for task in late:  # past the batch's deadline: the answered samples keep their scores
                    task.cancel()
                if late:
                    await asyncio.wait(late)
                    self.stats.endpoint_errors += len(late)
            finally:
                await client.aclose()
            for key in [k for k, _ in todo if k not in answers]:
                answers[key] = Reply(None, f"endpoint error: no answer within the batch deadline of {self.deadline:g}s")
        return [answers[k] for k in keys]

    async def _with_retries(self, client: httpx.AsyncClient, request_fields: dict[str, Any]) -> Reply:
        body = {k: v for k, v in request_fields.items() if k != "extra_body"} | request_fields.get("extra_body", {})
        for attempt in range(self.retries + 1):
            self.stats.calls += attempt == 0
            self.stats.retries += attempt > 0
            start = time.perf_counter()
            try:
                reply = await chat_completion(
                    client, self.base_url, self.api_key, body, deadline_s=self.timeout, max_bytes=self.max_bytes
                )
            except RequestFailed as err:
                if attempt == self.retries or not err.transient:
                    self.stats.endpoint_errors += 1
                    tries = f" after {attempt + 1} attempts" if attempt else ""
                    return Reply(None, f"endpoint error{tries}: {err}")
                await asyncio.sleep(self.backoff * 2**attempt * (1 + random.random() / 2))
                continue
            self.stats.latencies.append(time.perf_counter() - start)
            usage = reply.usage or {}
            self.stats.prompt_tokens += usage.get("prompt_tokens", 0)
            self.stats.completion_tokens += usage.get("completion_tokens", 0)
            if reply.text is None:
                return Reply(None, "endpoint error: the reply has no message content")
            return Reply(reply.text, usage=usage, finish_reason=reply.finish_reason)
        raise AssertionError("unreachable")
