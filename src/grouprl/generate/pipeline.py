"""``grouprl generate``: completions for every row of a dataset from an OpenAI-compatible endpoint.

Each (row, generation index) is one chat-completion request (``n`` is not sent: several servers,
``transformers serve`` among them, ignore it), so a request is the unit of progress. Requests run
with at most ``concurrency`` in flight, each with a timeout, retried with exponential backoff
(plus jitter) on connection errors, timeouts, 429 and 5xx. Every finished request is appended at
once to ``requests.jsonl`` (one whole line, even if the process dies), so a rerun skips what is
already there: a killed run loses only the requests that were in flight. When every request has
an answer, ``generations.jsonl`` (the input rows with ``generations``, ``finish_reasons`` and
``model_name`` columns) and a ``datasets`` dataset (``dataset/``, ``save_to_disk``) are written.

The client is the ``openai`` package: the reference client of the protocol vLLM, TGI,
``transformers serve`` and hosted endpoints speak, async, with typed errors; distilabel (which
open-r1's generate.py builds on) wraps it in a pipeline framework whose batch-level cache and
retry rules would sit between us and the per-request resume this needs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from grouprl.observe.jsonl import JsonlAppender

log = logging.getLogger(__name__)

JOURNAL = "requests.jsonl"
OUTPUT = "generations.jsonl"


@dataclass
class GenerateSpec:
    dataset: str
    model: str
    base_url: str
    output_dir: str
    dataset_config: str | None = None
    split: str = "train"
    prompt_column: str | None = "prompt"
    prompt_template: str | None = None  # Jinja over the row's columns, e.g. "Solve: {{ instruction }}"
    system_prompt: str | None = None
    num_generations: int = 1
    temperature: float = 0.7
    top_p: float = 1.0
    max_new_tokens: int = 512
    concurrency: int = 8
    timeout: float = 120.0
    retries: int = 3
    backoff_seconds: float = 1.0
    api_key: str = "EMPTY"
    max_rows: int | None = None
    push_to_hub: str | None = None  # dataset repo id
    hub_endpoint: str | None = None
    hub_token: str | None = None
    progress: bool = True


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


def load_rows(spec: GenerateSpec) -> list[dict[str, Any]]:
    from grouprl.data.sources import load_split

    rows = list(load_split(spec.dataset, spec.dataset_config, spec.split))
    return rows[: spec.max_rows] if spec.max_rows else rows


def build_messages(spec: GenerateSpec, row: dict[str, Any], index: int) -> list[dict[str, str]]:
    from grouprl.data.prompt_rows import prompt_messages

    if spec.prompt_template:
        import jinja2

        value: Any = jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(spec.prompt_template).render(**row)
    else:
        if spec.prompt_column not in row:
            raise KeyError(f"{spec.dataset} row {index}: no prompt column {spec.prompt_column!r}; "
                           f"it has {sorted(row)} (or give --prompt_template)")
        value = row[spec.prompt_column]
    try:
        return prompt_messages(value, spec.system_prompt)
    except ValueError as err:
        raise ValueError(f"{spec.dataset} row {index}: {err}") from None


def read_journal(path: Path) -> dict[tuple[int, int], dict[str, Any]]:
    done: dict[tuple[int, int], dict[str, Any]] = {}
    if path.is_file():
        with path.open() as fh:
            for line in fh:
                if line.endswith("\n"):  # a torn last line (killed mid-write) is not a finished request
                    record = json.loads(line)
                    done[(record["row"], record["k"])] = record
    return done


def _retryable(err: Exception) -> bool:
    import openai

    if isinstance(err, (openai.APIConnectionError, openai.APITimeoutError, openai.RateLimitError,
                        openai.InternalServerError)):
        return True
    return isinstance(err, openai.APIStatusError) and err.status_code >= 500


async def _request(client, spec: GenerateSpec, messages, row: int, k: int) -> dict[str, Any]:
    for attempt in range(spec.retries + 1):
        try:
            response = await client.chat.completions.create(
                model=spec.model, messages=messages, temperature=spec.temperature, top_p=spec.top_p,
                max_tokens=spec.max_new_tokens)
            choice = response.choices[0]
            return {"row": row, "k": k, "generation": choice.message.content or "",
                    "finish_reason": choice.finish_reason, "attempts": attempt + 1}
        except Exception as err:  # noqa: BLE001 - classified just below
            if attempt == spec.retries or not _retryable(err):
                raise
            delay = spec.backoff_seconds * 2 ** attempt * (1 + random.random() / 2)
            log.info("row %d generation %d: %s; retry %d/%d in %.1fs", row, k, type(err).__name__, attempt + 1,
                     spec.retries, delay)
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")


async def _run(spec: GenerateSpec, todo: list[tuple[int, int]], messages: dict[int, list], journal: JsonlAppender,
               bar) -> tuple[int, list[str]]:
    import openai

    client = openai.AsyncOpenAI(base_url=spec.base_url, api_key=spec.api_key, timeout=spec.timeout, max_retries=0)
    pending: Iterator[tuple[int, int]] = iter(todo)
    done, errors = 0, []

    async def worker():
        nonlocal done
        for row, k in pending:  # a shared iterator: each worker takes the next request, so <= concurrency in flight
            try:
                record = await _request(client, spec, messages[row], row, k)
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
        await client.close()
    return done, errors


def generate(spec: GenerateSpec) -> GenerateResult:
    """Run (or resume) the generation; see the module docstring."""
    from tqdm.auto import tqdm

    out = Path(spec.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = load_rows(spec)
    messages = {i: build_messages(spec, row, i) for i, row in enumerate(rows)}
    done = read_journal(out / JOURNAL)
    wanted = [(i, k) for i in range(len(rows)) for k in range(spec.num_generations)]
    todo = [key for key in wanted if key not in done]
    log.info("%d rows x %d generations: %d requests, %d already done", len(rows), spec.num_generations, len(wanted),
             len(wanted) - len(todo))
    journal = JsonlAppender(out / JOURNAL)
    bar = tqdm(total=len(wanted), initial=len(wanted) - len(todo), desc="generate", unit="req",
               disable=not spec.progress)
    try:
        done_now, errors = asyncio.run(_run(spec, todo, messages, journal, bar)) if todo else (0, [])
    finally:
        bar.close()
        journal.close()
    result = GenerateResult(rows=len(rows), requests=len(wanted), done_before=len(wanted) - len(todo),
                            done_now=done_now, failed=len(errors), output=None)
    if errors:
        raise GenerationFailed(f"{len(errors)} of {len(todo)} requests failed after {spec.retries} retries "
                               f"(rerun the same command to retry only those); first: {errors[0]}")
    result.output = str(write_outputs(spec, rows, read_journal(out / JOURNAL)))
    return result


def write_outputs(spec: GenerateSpec, rows: list[dict[str, Any]], done: dict[tuple[int, int], dict]) -> Path:
    """generations.jsonl (written whole, then renamed) and dataset/ (save_to_disk); optional hub push."""
    import datasets

    out = Path(spec.output_dir)
    records = []
    for i, row in enumerate(rows):
        answers = [done[(i, k)] for k in range(spec.num_generations)]
        records.append({**row, "generations": [a["generation"] for a in answers],
                        "finish_reasons": [a["finish_reason"] for a in answers], "model_name": spec.model})
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
    info = api.upload_file(path_or_fileobj=str(path), path_in_repo=f"data/{path.name}", repo_id=repo_id,
                           repo_type="dataset", commit_message="grouprl generate")
    return info.oid
