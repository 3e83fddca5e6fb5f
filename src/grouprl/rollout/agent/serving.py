"""What the agent endpoint does with a checked request (``chat_request.read_request``): batch it, generate, answer.

:class:`CallBatcher` owns the one thread that touches the tokenizer and the backend: it collects
requests while they keep arriving (``window_s`` after the last, ``max_wait_s`` at most), until ``params.batch_size``,
or until every episode that may still call is waiting (``live_episodes``), renders them (``calls.render_call``, then the forced
tool-call opening when ``tool_choice`` asks for a call), makes one ``backend.generate`` call per distinct
length cap (a request with ``n`` > 1 puts its prompt in it ``n`` times), reads each completion
(``chat_answer.make_turn``: stop strings, tool calls) and records each sample as its own call of its episode.
With a ``draw_seed``, each sample draws from its own keyed stream (``rollout/keyed_draws.py``).
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from typing import Any, Callable

from grouprl.rollout.agent.chat_answer import Turn, chat_completion, forced_opening, make_turn
from grouprl.rollout.agent.calls import CallRecord, render_call
from grouprl.rollout.agent.chat_request import ChatRequest, EndpointError
from grouprl.rollout.agent.run_progress import RunProgress
from grouprl.rollout.keyed_draws import call_seed
from grouprl.rollout.sampling import Completion, SamplingParams
from grouprl.tools.parsers import get_parser

log = logging.getLogger(__name__)


class CallBatcher:
    """The endpoint's generation thread: batches requests, renders, generates, parses, records."""

    def __init__(
        self,
        backend,
        tokenizer,
        params: SamplingParams,
        parser: str,
        template_kwargs: dict | None,
        max_context: int | None,
        policy_version: int,
        window_s: float = 0.05,
        live_episodes: Callable[[], int] | None = None,
        max_wait_s: float = 5.0,
        draw_seed: int | None = None,
        progress: RunProgress | None = None,
    ):
        self.backend, self.tokenizer, self.params = backend, tokenizer, params
        self.progress = progress  # the run's progress in episodes (run_progress.py); None: params.progress as is
        self.parser, self.template_kwargs, self.max_context = get_parser(parser), template_kwargs, max_context
        self.policy_version, self.window_s, self.max_wait_s = policy_version, window_s, max_wait_s
        self.live_episodes = live_episodes  # how many episodes may still send a request (None: unknown)
        # each sample's draws keyed by (draw_seed, episode, call, sample), not by the batch it lands in, so an
        # agent's conversation does not depend on the other agents' timing (rollout/keyed_draws.py); None: torch's
        self.draw_seed = draw_seed
        self.requests: queue.Queue[ChatRequest | None] = queue.Queue()
        self.batches: list[int] = []  # the size of every batch served (the bench reads it)
        self._thread = threading.Thread(target=self._loop, name="grouprl-agent-batcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.requests.put(None)
        self._thread.join(timeout=60)

    def submit(self, request: ChatRequest, wait_s: float) -> ChatRequest:
        self.requests.put(request)
        if not request.done.wait(wait_s):
            request.finish(
                *_error(EndpointError(503, "server_timeout", f"no answer within {wait_s:.0f} s", type_="server_error"))
            )
        return request

    def _loop(self) -> None:
        stopping = False
        while not stopping:
            first = self.requests.get()
            if first is None:
                return
            # a burst of agents' requests arrives over tens of milliseconds (each client's HTTP round on one event
            # loop): wait up to window_s after each arrival, at most max_wait_s in all, so the burst is one batch
            # (served in fragments, every turn would decode once per fragment)
            batch, cap = [first], time.monotonic() + max(self.max_wait_s, self.window_s)
            while len(batch) < self.params.batch_size and not self._everyone_waits(batch):
                try:
                    wait = min(self.window_s, cap - time.monotonic())
                    item = self.requests.get(timeout=max(wait, 0.0))
                except queue.Empty:
                    break
                if item is None:
                    stopping = True
                    break
                batch.append(item)
            try:
                self._serve(batch)
            except Exception as err:  # noqa: BLE001 - a backend failure answers these requests, never kills the thread
                log.exception("agent endpoint: generation failed")
                failure = EndpointError(
                    500, "server_error", f"generation failed: {type(err).__name__}: {err}", type_="server_error"
                )
                for request in batch:
                    if not request.done.is_set():
                        _refuse(request, failure)

    def _everyone_waits(self, batch: list[ChatRequest]) -> bool:
        """Every episode that may still call has a request in this batch: waiting longer gains nothing."""
        return self.live_episodes is not None and len({id(r.episode) for r in batch}) >= self.live_episodes()

    def _serve(self, batch: list[ChatRequest]) -> None:
        self.batches.append(len(batch))
        ready: list[tuple[ChatRequest, str, list[int], bool, str]] = []
        for request in batch:
            try:
                ready.append((request, *self._render(request)))
            except EndpointError as err:
                _refuse(request, err)
        for cap in sorted({r.max_new_tokens for r, *_ in ready}):
            group = [entry for entry in ready if entry[0].max_new_tokens == cap]
            prompts = [ids for request, _, ids, _, _ in group for _ in range(request.n)]
            seeds = None
            if self.draw_seed is not None:  # (only this thread appends to an episode's calls)
                seeds = [
                    call_seed(self.draw_seed, r.episode.episode_id, len(r.episode.calls), i)
                    for r, *_ in group
                    for i in range(r.n)
                ]
            params = dataclasses.replace(self.params, max_new_tokens=cap, seeds=seeds)
            if self.progress is not None:
                params = self.progress.call_params(params)
            completions = iter(self.backend.generate(prompts, params))
            if self.progress is not None:
                self.progress.call_ended()
            for request, text, ids, extends, opening in group:
                samples = [next(completions) for _ in range(request.n)]
                self._answer(request, text, ids, extends, opening, samples)

    def _render(self, request: ChatRequest) -> tuple[str, list[int], bool, str]:
        """(prompt text, prompt ids, whether they extend an earlier call's, the forced call opening)."""
        with request.episode.lock:
            earlier = list(request.episode.calls)
        opening = forced_opening(self.parser, request)
        try:
            text, ids, extends = render_call(
                self.tokenizer, earlier, request.messages, request.tools, self.template_kwargs
            )
        except Exception as err:  # noqa: BLE001 - the template refused these messages: the request's fault
            raise EndpointError(
                400,
                "bad_request",
                f"the chat template cannot render these messages: {type(err).__name__}: {err}",
                "messages",
            ) from None
        if opening:  # prompt ids: the policy did not choose them (chat_answer.py)
            text, ids = text + opening, ids + self.tokenizer(opening, add_special_tokens=False)["input_ids"]
        if self.max_context and len(ids) + request.max_new_tokens > self.max_context:
            raise EndpointError(
                400,
                "context_length_exceeded",
                f"this model's maximum context length is {self.max_context} tokens; the messages "
                f"are {len(ids)} tokens and max_tokens is {request.max_new_tokens}",
                "messages",
            )
        return text, ids, extends, opening

    def _answer(
        self,
        request: ChatRequest,
        text: str,
        ids: list[int],
        extends: bool,
        opening: str,
        completions: list[Completion],
    ) -> None:
        episode = request.episode
        first = len(episode.calls)
        turns: list[Turn] = [
            make_turn(self.tokenizer, self.parser, request, completion, opening, first + i)
            for i, completion in enumerate(completions)
        ]
        latency = time.monotonic() - request.received
        records = [
            CallRecord(
                request.messages,
                request.tools,
                text,
                ids,
                turn.completion,
                turn.parsed,
                turn.reply,
                self.policy_version,
                extends,
                latency,
                turn.cut,
                request.params,
            )
            for turn in turns
        ]
        with episode.lock:
            if episode.closed:
                episode.refused["episode_closed"] += 1
                request.finish(*_error(EndpointError(400, "episode_closed", "this episode has ended")))
                return
            episode.calls.extend(records)
        request.finish(200, chat_completion(self.tokenizer, request, ids, turns))


def _error(err: EndpointError) -> tuple[int, dict[str, Any]]:
    return err.status, err.body()


def _refuse(request: ChatRequest, err: EndpointError) -> None:
    with request.episode.lock:
        request.episode.refused[err.kind] += 1
    request.finish(*_error(err))
