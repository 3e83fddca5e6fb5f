"""The asynchronous producer's generation engine: its own weights, their version, and how new ones arrive.

While the learner updates the policy, the producer keeps generating with the weights it was last
given. So the producer needs a copy the optimizer does not touch: for ``hf`` a second model object
(``GeneratorCopy.for_hf``); an engine that already holds its own copy (vLLM colocated or server) is
refreshed through its ``load_weights``.

The push never waits for a generate call (own model, ``hf``). The learner *stages* the new weights: it
copies its parameters into a preallocated staging copy under a small staging lock, records the pending
version and returns (the cost of one memory copy). The producer *installs* them at the start of its next
generate call, under the generate lock: staging -> its model, then the version. So a push never lands in
the middle of a call, every token of one call comes from one version (the completion says which), and
the turn cache, which watches the parameters' in-place version counters, drops the entries the old
weights made. Two pushes between two calls: the later one wins (its version, its weights).
Cost: one more copy of the weights in memory (the staging copy), two memory copies per update (one on
the learner's thread, one on the producer's).

The staleness bound (``rollout/scheduler.py``) still holds: the trainer stages the push of update t
(``after_update``) before it asks for its next batch, and a batch may start only after that request, so
its first generate call installs weights at least as new as update t, as an installed push did before.
An in-process engine (vLLM colocated) is staged the same way: the push copies the policy's weights under
their checkpoint names (LoRA merged; or only the LoRA adapter, ``vllm_weight_sync``) into a staging list,
and the next generate call hands that list to the engine's own load (``load_checkpoint_weights``), which
converts them into its dtype in place (or loads the adapter as a new LoRA id). An
engine in another process (``vllm_server``) keeps the locked push: its load is a step every training
process takes together (one pusher, then a barrier), which a producer thread must not run.

The behaviour log-probs (the sampled tokens' log-probs under the weights that sampled them) are the
engine's own when it reports them: vLLM, and for ``hf`` grouprl's decode loop, which records each sampled
token's log-prob under the warped distribution it drew from (``rollout/decode.py``). Where ``hf`` falls
back to ``model.generate`` (a generation config the loop does not implement, the conversation turn cache,
greedy), the copy scores its own completions once more in the same locked section, with the sampler's
temperature and top-k/top-p support. The learner's importance weights need them (``algos/importance.py``,
``docs/async.md``).
"""

from __future__ import annotations

import copy
import threading
import time
from typing import Any

import torch

from grouprl.policy.scoring import completion_logps, pack
from grouprl.rollout.sampling import Completion, GenerationBackend, SamplingParams


class GeneratorCopy:
    """A backend the producer generates with: ``generate`` tags every completion with the version of the
    weights that sampled it and its behaviour log-probs; ``push`` hands it new weights between calls."""

    def __init__(
        self,
        backend: GenerationBackend,
        version: int,
        own_model: Any = None,
        pad_id: int = 0,
        trainer_backend: GenerationBackend | None = None,
    ):
        self.backend, self.version, self.own_model, self.pad_id = backend, version, own_model, pad_id
        self.trainer_backend = trainer_backend or backend  # the learner's own (HF: on the policy itself)
        self.lock = threading.Lock()  # held by every generate call (and an install at its start)
        self.pushes: list[float] = []  # the learner's seconds per push (staging; vLLM: the whole load)
        self.installs: list[float] = []  # the producer's seconds per install of staged weights
        self._staging_lock = threading.Lock()
        self._pending: int | None = None  # the staged version not installed yet
        self._unread = 0.0  # install seconds not yet reported (``take_install_seconds``)
        self._slots: list[int] = []  # the state-dict entries staged (by position: a wrapper's keys differ)
        self._staged: list[torch.Tensor] = []
        # an in-process engine (vLLM colocated) is staged too: its weights under checkpoint names, made at 1st push
        self._stages_engine = own_model is None and hasattr(backend, "load_checkpoint_weights")
        self._engine_staged: list[tuple[str, torch.Tensor]] = []
        self._entries = 0
        if own_model is not None:  # one staging tensor per distinct tensor (tied weights copied once)
            seen: set[tuple[int, int]] = set()
            state = own_model.state_dict()
            self._entries = len(state)
            for slot, tensor in enumerate(state.values()):
                key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset())
                if key not in seen:
                    seen.add(key)
                    self._slots.append(slot)
                    self._staged.append(torch.empty_like(tensor, requires_grad=False))

    @classmethod
    def for_hf(cls, hf_backend, version: int) -> "GeneratorCopy":
        """A second model object holding the generator's weights, its own HF backend around it (its own turn
        cache: cached keys and values belong to the weights that made them; the decode loop's log-probs on)."""
        from grouprl.rollout.generation import HFBackend
        from grouprl.rollout.turn_cache import TurnCache

        model = copy.deepcopy(hf_backend.model).eval()
        for parameter in model.parameters():
            parameter.requires_grad_(False)
        cache = TurnCache() if hf_backend.turn_cache is not None else None
        backend = HFBackend(
            model,
            hf_backend.tokenizer,
            hf_backend.device,
            hf_backend.prefill_once,
            cache,
            record_logprobs=True,
            onednn=hf_backend.onednn,
            draw_with=hf_backend.draw_with,
            captured=hf_backend.captured,
        )
        return cls(
            backend, version, own_model=model, pad_id=hf_backend.tokenizer.pad_token_id, trainer_backend=hf_backend
        )

    def generate(self, prompt_ids: list[list[int]], params: SamplingParams) -> list[Completion]:
        with self.lock:
            self._install()
            version = self.version
            completions = self.backend.generate(prompt_ids, params)
            if self.own_model is not None:
                self._behaviour_logps(prompt_ids, completions, params)
        for completion in completions:
            completion.policy_version = version
        return completions

    def load_weights(self, model) -> None:
        """The backend protocol's hook: the scheduler pushes instead (``push``, with a version)."""

    @torch.no_grad()
    def _behaviour_logps(self, prompt_ids: list[list[int]], completions: list[Completion], params) -> None:
        """Score the completions the engine gave no log-probs (``model.generate``'s paths) with these weights."""
        missing = [i for i, c in enumerate(completions) if c.logprobs is None]
        support = (params.top_k, params.top_p) if params.top_k > 0 or params.top_p < 1 else None
        device = next(self.own_model.parameters()).device
        for start in range(0, len(missing), params.batch_size):
            rows = missing[start : start + params.batch_size]
            part = [completions[i] for i in rows]
            batch = pack([prompt_ids[i] for i in rows], [c.ids for c in part], self.pad_id)
            logps, _ = completion_logps(self.own_model, batch.to(device), params.temperature, support=support)
            for row, completion in enumerate(part):
                completion.logprobs = logps[row, : len(completion.ids)].float().cpu().tolist()

    def push(self, model, version: int) -> float:
        """Hand ``model``'s weights over as ``version``; the learner's seconds. Own model: staged, never waiting
        for a generate call (the next call installs them); an engine's own copy: loaded between two calls."""
        start = time.perf_counter()
        if self.own_model is not None:
            theirs = list(model.state_dict().values())
            if len(theirs) != self._entries:
                raise ValueError(
                    f"push: the model has {len(theirs)} state-dict entries, the generator's copy "
                    f"{self._entries} (expected the policy the copy was made from)"
                )
            with self._staging_lock, torch.no_grad():
                for slot, staged in zip(self._slots, self._staged):
                    staged.copy_(theirs[slot])
                self._pending = version
        elif self._stages_engine:
            engine: Any = self.backend  # a VLLMBackend
            weights = engine.weights_to_push(model)  # live views (LoRA: merged copies, or the adapter alone)
            with self._staging_lock, torch.no_grad():
                if [name for name, _ in self._engine_staged] != [name for name, _ in weights]:
                    self._engine_staged = [(name, t.detach().clone()) for name, t in weights]
                else:
                    for (_, staged), (_, t) in zip(self._engine_staged, weights):
                        staged.copy_(t)
                self._pending = version
        else:  # an engine in another process (vllm_server): its load is a collective step of every process
            with self.lock:
                self.backend.load_weights(model)
                self.version = version
        seconds = time.perf_counter() - start
        self.pushes.append(seconds)
        return seconds

    def _install(self) -> None:
        """The staged weights into the model (the caller holds the generate lock); a no-op when none is pending.
        In-place copies: the turn cache sees the parameters' version counters move and drops its entries."""
        with self._staging_lock:
            if self._pending is None:
                return
            start = time.perf_counter()
            if self._stages_engine:  # the engine loads the staged copy (converting to its dtype)
                engine: Any = self.backend  # a VLLMBackend
                engine.load_checkpoint_weights(self._engine_staged)
            else:
                mine = list(self.own_model.state_dict().values())
                with torch.no_grad():
                    for slot, staged in zip(self._slots, self._staged):
                        mine[slot].copy_(staged)
            self.version, self._pending = self._pending, None
            seconds = time.perf_counter() - start
            self._unread += seconds
        self.installs.append(seconds)

    def take_install_seconds(self) -> float | None:
        """Seconds spent installing pushes since anyone last asked, on whatever thread generated (a producer, an
        agent endpoint's batcher): the scheduler reports them with the batch that finishes next, so their sum
        over a run is exact; None: nothing is staged (an engine in another process loads under the lock)."""
        if self.own_model is None and not self._stages_engine:
            return None
        with self._staging_lock:
            seconds, self._unread = self._unread, 0.0
        return seconds
