"""``grouprl generate``: completions for every row of a dataset from an OpenAI-compatible endpoint.

Each (row, generation index) is one chat-completion request (``n`` is not sent: several servers,
``transformers serve`` among them, ignore it), so a request is the unit of progress. Requests run
with at most ``concurrency`` in flight, each within a total deadline (``timeout``) and a body cap
(``bounded_http``: a server trickling its body cannot hold a request), retried with exponential backoff
(plus jitter) on connection errors, timeouts, 429 and 5xx. Every finished request is appended at
once to ``requests.jsonl`` (one whole line, even if the process dies), keyed on the request itself
(the messages, the model and the sampling settings, hashed, with the generation index), so a rerun
skips exactly the requests already answered: a killed run loses only the requests that were in
flight, and an edited prompt or another ``--model`` is asked afresh, never answered from the journal. When every request has
an answer, ``generations.jsonl`` (the input rows with ``generations``, ``finish_reasons`` and
``model_name`` columns) and a ``datasets`` dataset (``dataset/``, ``save_to_disk``) are written.

The client is ``bounded_http.chat_completion`` (httpx, the protocol vLLM, TGI, ``transformers serve``
and hosted endpoints speak): the openai package bounds each read, not the request, and reads any body
whole; distilabel (which open-r1's generate.py builds on) wraps it in a pipeline framework whose
batch-level cache and retry rules would sit between us and the per-request resume this needs.

The run's flags, their checks and the rows' messages are ``spec.py``'s.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from grouprl.bounded_http import RequestFailed, chat_completion
from grouprl.generate.spec import GenerateSpec, build_messages, check_spec, load_rows
from grouprl.observe.jsonl import JsonlAppender

log = logging.getLogger(__name__)

JOURNAL = "requests.jsonl"
OUTPUT = "generations.jsonl"


@dataclass
class GenerateResult:
    rows: int
    requests: int
    done_before: int  # found in the journal (skipped)
    done_now: int
    failed: int
    output: str | None  # generations.jsonl, when complete


class GenerationFailed(RuntimeError):
    """Requests that still failed after every retry (rerun to try them again)."""


def request_keys(spec: GenerateSpec, messages: dict[int, list[dict[str, str]]]) -> dict[int, str]:
    """Each row's request key: what makes two requests the same (the messages, the model, the sampling
    settings), hashed, and which occurrence of that request in the dataset the row is (a prompt that
    appears twice gets two sets of samples). The journal is keyed on it with the generation index, so an
    edited prompt, another model or other sampling is asked again, never answered from the journal."""
    sampling = {"temperature": spec.temperature, "top_p": spec.top_p, "max_tokens": spec.max_new_tokens}
    seen: dict[str, int] = {}
    keys = {}
    for i, row_messages in messages.items():
        body = json.dumps(
            {"model": spec.model, "messages": row_messages, **sampling}, sort_keys=True, ensure_ascii=False
        )
        digest = hashlib.sha256(body.encode("utf-8")).hexdigest()
        seen[digest] = seen.get(digest, -1) + 1
        keys[i] = f"{digest}#{seen[digest]}"
    return keys


def read_journal(path: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """Finished requests by (request key, generation index). A line that is not a finished request (torn
    by a kill, edited by hand, from a version that kept no key) is skipped: that request is asked again."""
    done: dict[tuple[str, int], dict[str, Any]] = {}
    if path.is_file():
        with path.open("rb") as fh:
            for line in fh:
                if not line.endswith(b"\n"):  # a torn last line (killed mid-write) is not a finished request
                    continue
                try:
                    record = json.loads(line)
                    key = (record["key"], record["k"])
                    if isinstance(key[0], str) and isinstance(key[1], int) and isinstance(record["generation"], str):
                        done[key] = record
                except (ValueError, KeyError, TypeError):
                    continue
    return done


MAX_BYTES = 16 << 20  # a chat completion is some kB a thousand tokens


async def _request(client, spec: GenerateSpec, messages, row: int, k: int, key: str) -> dict[str, Any]:
    body = {
        "model": spec.model,
        "messages": messages,
        "temperature": spec.temperature,
        "top_p": spec.top_p,
        "max_tokens": spec.max_new_tokens,
    }
    for attempt in range(spec.retries + 1):
        try:
            reply = await chat_completion(
                client, spec.base_url, spec.api_key, body, deadline_s=spec.timeout, max_bytes=MAX_BYTES
            )
            return {
                "key": key,
                "k": k,
                "row": row,
                "model": spec.model,
                "generation": reply.text or "",
                "finish_reason": reply.finish_reason,
                "attempts": attempt + 1,
            }
        except RequestFailed as err:
            if attempt == spec.retries or not err.transient:
                raise
            delay = spec.backoff_seconds * 2**attempt * (1 + random.random() / 2)
            log.info(
                "row %d generation %d: %s; retry %d/%d in %.1fs", row, k, err.kind, attempt + 1, spec.retries, delay
            )
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")


async def _run(
    spec: GenerateSpec,
    todo: list[tuple[int, int]],
    messages: dict[int, list],
    keys: dict[int, str],
    journal: JsonlAppender,
    bar,
) -> tuple[int, list[str]]:
    import httpx

    client = httpx.AsyncClient(timeout=spec.timeout)
    pending: Iterator[tuple[int, int]] = iter(todo)
    done, errors = 0, []

    async def worker():
        nonlocal done
        for row, k in pending:  # a shared iterator: each worker takes the next request, so <= concurrency in flight
            try:
                record = await _request(client, spec, messages[row], row, k, keys[row])
            except Exception as err:  # noqa: BLE001 - counted, the run goes on, a rerun retries it
                errors.append(f"row {row} generation {k}: {type(err).__name__}: {str(err)[:200]}")
                bar.update(0)
                continue
            journal.write(record)
            done += 1
            bar.update(1)

    try:
        await asyncio.gather(*(worker() for _ in range(max(1, spec.concurrency))))
    finally:
        await client.aclose()
    return done, errors


def generate(spec: GenerateSpec) -> GenerateResult:
    """Run (or resume) the generation; see the module docstring."""
    from tqdm.auto import tqdm

    check_spec(spec)
    out = Path(spec.output_dir)
    rows = load_rows(spec)
    messages = {i: build_messages(spec, row, i) for i, row in enumerate(rows)}
    keys = request_keys(spec, messages)
    out.mkdir(parents=True, exist_ok=True)
    done = read_journal(out / JOURNAL)
    wanted = [(i, k) for i in range(len(rows)) for k in range(spec.num_generations)]
    todo = [(i, k) for i, k in wanted if (keys[i], k) not in done]
    log.info(
        "%d rows x %d generations: %d requests, %d already done",
        len(rows),
        spec.num_generations,
        len(wanted),
        len(wanted) - len(todo),
    )
    journal = JsonlAppender(out / JOURNAL)
    bar = tqdm(
        total=len(wanted), initial=len(wanted) - len(todo), desc="generate", unit="req", disable=not spec.progress
    )
    try:
        done_now, errors = asyncio.run(_run(spec, todo, messages, keys, journal, bar)) if todo else (0, [])
    finally:
        bar.close()
        journal.close()
    result = GenerateResult(
        rows=len(rows),
        requests=len(wanted),
        done_before=len(wanted) - len(todo),
        done_now=done_now,
        failed=len(errors),
        output=None,
    )
    if errors:
        raise GenerationFailed(
            f"{len(errors)} of {len(todo)} requests failed after {spec.retries} retries "
            f"(rerun the same command to retry only those); first: {errors[0]}"
        )
    result.output = str(write_outputs(spec, rows, keys, read_journal(out / JOURNAL)))
    return result


def write_outputs(
    spec: GenerateSpec, rows: list[dict[str, Any]], keys: dict[int, str], done: dict[tuple[str, int], dict]
) -> Path:
    """generations.jsonl (written whole, then renamed) and dataset/ (save_to_disk); optional hub push."""
    import datasets

    out = Path(spec.output_dir)
    records = []
    for i, row in enumerate(rows):
        answers = [done[(keys[i], k)] for k in range(spec.num_generations)]
        records.append(
            {
                **row,
                "generations": [a["generation"] for a in answers],
                "finish_reasons": [a["finish_reason"] for a in answers],
                "model_name": spec.model,
            }
        )
    tmp = out / (OUTPUT + ".tmp")
    tmp.unlink(missing_ok=True)
    with JsonlAppender(tmp) as sink:
        sink.write_many(records)
    tmp.replace(out / OUTPUT)
    dataset = datasets.Dataset.from_list(records)
    dataset.save_to_disk(str(out / "dataset"))
    if spec.push_to_hub:
        push_dataset(out / OUTPUT, spec.push_to_hub, spec.hub_endpoint, spec.hub_token)
    return out / OUTPUT


def push_dataset(path: Path, repo_id: str, endpoint: str | None, token: str | None) -> str:
    """Upload generations.jsonl to a private dataset repo (the hub's viewer reads JSONL as it is)."""
    from huggingface_hub import HfApi

    api = HfApi(endpoint=endpoint, token=token)
    api.create_repo(repo_id, repo_type="dataset", private=True, exist_ok=True)
    info = api.upload_file(
        path_or_fileobj=str(path),
        path_in_repo=f"data/{path.name}",
        repo_id=repo_id,
        repo_type="dataset",
        commit_message="grouprl generate",
    )
    return info.oid
