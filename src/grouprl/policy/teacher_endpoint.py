"""A distillation teacher behind an OpenAI-compatible completions server that returns prompt log-probs.

Each sample is sent once as token ids, ``POST <url>/completions`` with ``{"prompt": [ids], "echo": true,
"logprobs": 0, "max_tokens": 1}``: the server echoes the prompt with each token's log-prob given the ones
before it (``choices[0].logprobs.token_logprobs``, the first ``null``), as vLLM's completions API does; vLLM's
``prompt_logprobs`` field (``choices[0].prompt_logprobs``) is read as well. The sample's completion tokens'
entries are its teacher log-probs. A group's shared prompt is the server's to reuse (vLLM's prefix cache).

Bounds, as the LLM judge's (``rewards/learned/judge_client.py``): every request under a total deadline and a
body cap (``bounded_http.py``), connection errors, deadlines, 429 and 5xx retried ``retries`` times after
``backoff * 2**attempt`` (plus up to 50 % jitter); a sample still unanswered stops the update with one line.
:meth:`EndpointTeacher.check` refuses, before training, a server that does not answer or returns no prompt
log-probs. The server's log-probs are taken as it computes them (temperature 1, no top-k / top-p).
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import httpx
import torch

from grouprl.bounded_http import RequestFailed, request, request_sync
from grouprl.config import ConfigError
from grouprl.policy.scoring import TokenBatch
from grouprl.safe_text import safe_json_loads

MAX_BYTES = 32 * 2**20  # one sample's echo with its log-probs
CONCURRENCY = 8  # requests in flight


class TeacherUnavailable(RuntimeError):
    """The teacher endpoint gave no usable answer for a sample after its retries (``kind``: the last failure's)."""

    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.kind = kind


def prompt_logprobs(body: Any, length: int) -> list[float] | None:
    """The first ``length`` prompt log-probs of a completions reply (the first token's is 0: nothing predicts
    it), or None when the reply has none."""
    choices = body.get("choices") if isinstance(body, dict) else None
    first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    logprobs = first.get("logprobs")
    values = logprobs.get("token_logprobs") if isinstance(logprobs, dict) else None
    if not isinstance(values, list) and isinstance(first.get("prompt_logprobs"), list):  # vLLM's extra field
        values = [_top_entry(e) for e in first["prompt_logprobs"]]
    if not isinstance(values, list) or len(values) < length:
        return None
    out = [0.0 if v is None and i == 0 else v for i, v in enumerate(values[:length])]
    return out if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in out) else None


def _top_entry(entry: Any) -> float | None:
    """vLLM's ``prompt_logprobs`` entry ``{token_id: {"logprob": x, ...}}`` (the prompt's own token first)."""
    if not isinstance(entry, dict) or not entry:
        return None
    value = next(iter(entry.values()))
    return value.get("logprob") if isinstance(value, dict) else None


class EndpointTeacher:
    def __init__(self, url: str, timeout: float, retries: int, backoff: float = 1.0):
        self.url, self.timeout, self.retries, self.backoff = url.rstrip("/"), timeout, retries, backoff
        self.model = "teacher"

    def _body(self, ids: list[int]) -> dict[str, Any]:
        return {"model": self.model, "prompt": ids, "echo": True, "logprobs": 0, "max_tokens": 1, "temperature": 1.0}

    def check(self) -> None:
        """One line, before training, when the server does not answer or returns no prompt log-probs."""
        try:
            listed = request_sync("GET", self.url + "/models", deadline_s=self.timeout, max_bytes=2**20)
            models = safe_json_loads(listed.body)
            data = models.get("data") if isinstance(models, dict) else None
            if isinstance(data, list) and data and isinstance(data[0], dict) and isinstance(data[0].get("id"), str):
                self.model = data[0]["id"]
            asyncio.run(self._ask_all([[0, 1]]))
        except (RequestFailed, TeacherUnavailable) as err:
            if isinstance(err, TeacherUnavailable) and err.kind in ("BadReply", "HTTPStatusError"):
                raise ConfigError(
                    f"config key 'teacher_endpoint': {self.url} returned no prompt log-probs ({err}); expected a "
                    "completions API that echoes them (vLLM: echo + logprobs, or prompt_logprobs)"
                ) from None
            raise ConfigError(f"config key 'teacher_endpoint': {self.url} did not answer: {err}") from None

    def logps(self, batch: TokenBatch) -> torch.Tensor:
        """(N, T) float32 teacher log-probs of every completion token (0 past a sample's attended tokens)."""
        sequences, starts = [], []
        for i in range(len(batch)):
            prompt = batch.prompt_ids[i][batch.prompt_mask[i].bool()].tolist()
            n = int(batch.attention[i].sum())
            sequences.append(prompt + batch.completion_ids[i, :n].tolist())
            starts.append(len(prompt))
        values = asyncio.run(self._ask_all(sequences))
        out = torch.zeros(batch.completion_ids.shape, dtype=torch.float32)
        for i, (lp, start) in enumerate(zip(values, starts)):
            out[i, : len(lp) - start] = torch.tensor(lp[start:], dtype=torch.float32)
        return out

    async def _ask_all(self, sequences: list[list[int]]) -> list[list[float]]:
        gate = asyncio.Semaphore(CONCURRENCY)
        async with httpx.AsyncClient(timeout=self.timeout) as client:

            async def one(ids: list[int]) -> list[float]:
                async with gate:
                    return await self._with_retries(client, ids)

            return list(await asyncio.gather(*(one(ids) for ids in sequences)))

    async def _with_retries(self, client: httpx.AsyncClient, ids: list[int]) -> list[float]:
        for attempt in range(self.retries + 1):
            try:
                answer = await request(
                    client, "POST", self.url + "/completions", json=self._body(ids),
                    deadline_s=self.timeout, max_bytes=MAX_BYTES,
                )  # fmt: skip
                transient = answer.status == 429 or answer.status >= 500
                if answer.status != 200:
                    raise RequestFailed("HTTPStatusError", f"{self.url}: HTTP {answer.status}", transient=transient)
                values = prompt_logprobs(safe_json_loads(answer.body), len(ids))
                if values is None:
                    raise RequestFailed("BadReply", f"{self.url}: the reply has no prompt log-probs", transient=False)
                return values
            except RequestFailed as err:
                if attempt == self.retries or not err.transient:
                    tries = f" after {attempt + 1} attempts" if attempt else ""
                    raise TeacherUnavailable(f"teacher_endpoint{tries}: {err}", err.kind) from None
                await asyncio.sleep(self.backoff * 2**attempt * (1 + random.random() / 2))
        raise AssertionError("unreachable")  # the last attempt returns or raises
