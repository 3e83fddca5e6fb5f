"""Checkpoints to hub revisions, in the background: one branch per saved step, the final model to main.

With ``push_to_hub_revision`` each saved checkpoint goes to the branch
``<hub_model_revision>-step-<N:09d>`` of ``hub_model_id`` (open-r1's naming, so its evaluation
scripts find them); with ``push_to_hub`` the final model goes to ``main``. The repo is created
private when missing; a new branch starts from the repo's *initial* commit, so a branch holds
only its own checkpoint. Optimizer, scheduler and RNG state stay local (large, and only useful to
resume here). An existing branch is not written to unless ``overwrite_hub_revision``.

Uploads run on one background thread (training goes on while a checkpoint uploads), in order;
``wait()`` blocks until all are done and raises the first failure. ``endpoint`` is the hub URL
(default ``HF_ENDPOINT`` or huggingface.co): the tests point it at a local HTTP stand-in.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

# Local-only checkpoint state (grouprl's names and the usual torch/TRL ones).
LOCAL_ONLY = ["optimizer.pt", "scheduler.pt", "rng.pt", "rng_state*.pth", "*.pth", "global_step*/*", "checkpoint-*/*"]


class HubRevisionError(RuntimeError):
    """A push the run was asked to make that cannot be made (an existing revision, a failed upload)."""


def step_revision(base: str, step: int) -> str:
    """open-r1's branch name for the checkpoint of ``step``: ``<base>-step-<step:09d>``."""
    return f"{base}-step-{step:09d}"


@dataclass
class HubTarget:
    repo_id: str
    revision: str = "main"  # hub_model_revision: the base of the step branches
    private: bool = True
    overwrite: bool = False
    endpoint: str | None = None
    token: str | None = None


class HubPusher:
    """Uploads checkpoints in the background; see the module docstring."""

    def __init__(self, target: HubTarget):
        from huggingface_hub import HfApi

        self.target = target
        self.api = HfApi(endpoint=target.endpoint, token=target.token)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hub-push")
        self._futures: list[tuple[str, Future]] = []
        self._repo_ready = False

    def _ensure_repo(self) -> None:
        if not self._repo_ready:
            self.api.create_repo(self.target.repo_id, private=self.target.private, exist_ok=True)
            self._repo_ready = True

    def _branches(self) -> set[str]:
        return {b.name for b in self.api.list_repo_refs(self.target.repo_id).branches}

    def _prepare_branch(self, branch: str) -> None:
        self._ensure_repo()
        # main always exists (the repo's initial commit): it counts as taken once it holds more.
        taken = (
            len(self.api.list_repo_commits(self.target.repo_id)) > 1 if branch == "main" else branch in self._branches()
        )
        if taken:
            if not self.target.overwrite:
                raise HubRevisionError(
                    f"hub repo {self.target.repo_id}: revision '{branch}' exists; set "
                    "overwrite_hub_revision to push over it"
                )
            return
        if branch != "main":
            initial = self.api.list_repo_commits(self.target.repo_id)[-1].commit_id  # newest first
            self.api.create_branch(self.target.repo_id, branch=branch, revision=initial, exist_ok=True)

    def _upload(self, folder: Path, branch: str, message: str) -> str:
        self._prepare_branch(branch)
        info = self.api.upload_folder(
            repo_id=self.target.repo_id,
            folder_path=str(folder),
            revision=branch,
            commit_message=message,
            ignore_patterns=LOCAL_ONLY,
        )
        log.info("pushed %s to %s@%s (%s)", folder, self.target.repo_id, branch, info.oid)
        return info.oid

    def push_checkpoint(self, folder: str | Path, step: int) -> Future:
        """Queue ``folder`` for upload to its step branch; returns the future of the commit id."""
        branch = step_revision(self.target.revision, step)
        future = self._executor.submit(self._upload, Path(folder), branch, f"grouprl checkpoint, step {step}")
        self._futures.append((branch, future))
        return future

    def push_final(self, folder: str | Path) -> Future:
        """Queue the final model for upload to main (after every queued checkpoint)."""
        future = self._executor.submit(self._upload, Path(folder), "main", "grouprl final model")
        self._futures.append(("main", future))
        return future

    def wait(self) -> dict[str, str]:
        """Block until every queued upload is done: ``{revision: commit id}``; raises the first failure."""
        done: dict[str, str] = {}
        first_error = None
        for branch, future in self._futures:
            try:
                done[branch] = future.result()
            except Exception as err:  # noqa: BLE001 - every upload is waited for before raising
                log.error("push to %s@%s failed: %s", self.target.repo_id, branch, err)
                first_error = first_error or (branch, err)
        if first_error:
            branch, err = first_error
            if isinstance(err, HubRevisionError):
                raise err
            raise HubRevisionError(
                f"hub repo {self.target.repo_id}: push to '{branch}' failed: {type(err).__name__}: {err}"
            ) from err
        return done

    def close(self) -> None:
        self._executor.shutdown(wait=True)
