"""The asynchronous producer's generation engine: its own weights, their version, and a lock.

While the learner updates the policy, the producer keeps generating with the weights it was last
given. So the producer needs a copy the optimizer does not touch: for ``hf`` a second model object
(``GeneratorCopy.for_hf``); an engine that already holds its own copy (vLLM colocated or server) is
refreshed through its ``load_weights``. Every push is versioned (the number of updates behind the
weights) and taken under the same lock as ``generate``, so a push never lands in the middle of a
generate call: every token of one call comes from one version, and the completion says which.

The behaviour log-probs (the sampled tokens' log-probs under the weights that sampled them) are the
engine's own when it reports them (vLLM); ``hf`` ``generate`` does not, so the copy scores its own
completions once more in the same locked section, with the sampler's temperature and top-k/top-p
support, before any push can change it. The learner's importance weights need them
(``algos/importance.py``, ``docs/async.md``).
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
    weights that sampled it and its behaviour log-probs; ``push`` installs new weights between calls."""

    def __init__(self, backend: GenerationBackend, version: int, own_model: Any = None, pad_id: int = 0,
                 trainer_backend: GenerationBackend | None = None):
        self.backend, self.version, self.own_model, self.pad_id = backend, version, own_model, pad_id
        self.trainer_backend = trainer_backend or backend  # the learner's own (HF: on the policy itself)
        self.lock = threading.Lock()
        self.pushes: list[float] = []  # seconds each push took (the sync's cost per step)

    @classmethod
    def for_hf(cls, hf_backend, version: int) -> "GeneratorCopy":
        """A second model object holding the generator's weights, its own HF backend around it (and its own
        turn cache: cached keys and values belong to the weights that made them)."""
        from grouprl.rollout.generation import HFBackend
        from grouprl.rollout.turn_cache import TurnCache

        model = copy.deepcopy(hf_backend.model).eval()
        for parameter in model.parameters():
            parameter.requires_grad_(False)
        cache = TurnCache() if hf_backend.turn_cache is not None else None
        backend = HFBackend(model, hf_backend.tokenizer, hf_backend.device, hf_backend.prefill_once, cache)
        return cls(backend, version, own_model=model, pad_id=hf_backend.tokenizer.pad_token_id,
                   trainer_backend=hf_backend)

    def generate(self, prompt_ids: list[list[int]], params: SamplingParams) -> list[Completion]:
        with self.lock:
            version = self.version
            completions = self.backend.generate(prompt_ids, params)
            if self.own_model is not None and completions and completions[0].logprobs is None:
                self._behaviour_logps(prompt_ids, completions, params)
        for completion in completions:
            completion.policy_version = version
        return completions

    def load_weights(self, model) -> None:
        """The backend protocol's hook: the scheduler pushes instead (``push``, with a version)."""

    @torch.no_grad()
    def _behaviour_logps(self, prompt_ids: list[list[int]], completions: list[Completion], params) -> None:
        support = (params.top_k, params.top_p) if params.top_k > 0 or params.top_p < 1 else None
        device = next(self.own_model.parameters()).device
        for start in range(0, len(prompt_ids), params.batch_size):
            part = completions[start : start + params.batch_size]
            batch = pack(prompt_ids[start : start + params.batch_size], [c.ids for c in part], self.pad_id)
            logps, _ = completion_logps(self.own_model, batch.to(device), params.temperature, support=support)
            for row, completion in enumerate(part):
                completion.logprobs = logps[row, : len(completion.ids)].float().cpu().tolist()

    def push(self, model, version: int) -> float:
        """Install ``model``'s weights as ``version``, between two generate calls; the seconds it took."""
        start = time.perf_counter()
        with self.lock:
            if self.own_model is not None:
                with torch.no_grad():
                    for mine, theirs in zip(self.own_model.state_dict().values(), model.state_dict().values()):
                        mine.copy_(theirs)
                # (the copy's turn cache sees the in-place writes and drops its entries: parameters_version)
            else:
                self.backend.load_weights(model)
            self.version = version
        seconds = time.perf_counter() - start
        self.pushes.append(seconds)
        return seconds
