"""Errors that stop a run on purpose, with a message for people (the CLI prints it, exit code 1, or
the error's ``exit_code``: 143 for a run stopped by SIGTERM).

Bad input (``ConfigError`` and its kin) exits with code 2 before any model loads where it can;
anything else is an internal error and keeps its traceback.
"""

from __future__ import annotations

from grouprl.rewards.guard import TooManyStuckRewards
from grouprl.rewards.guard import RewardFailure
from grouprl.rollout.backends.vllm_client import VLLMServerError
from grouprl.hub.revisions import HubRevisionError
from grouprl.observe.disk import DiskFull
from grouprl.train.checkpoint import CheckpointError
from grouprl.train.learner import NonFiniteUpdates
from grouprl.job.agent_failures import AgentCannotRun
from grouprl.job.preemption import Preempted
from grouprl.rollout.scheduler import RolloutProducerError, RolloutTimeout

RUN_FAILURES = (
    RewardFailure,
    CheckpointError,
    NonFiniteUpdates,
    TooManyStuckRewards,
    VLLMServerError,
    HubRevisionError,
    DiskFull,
    Preempted,
    RolloutProducerError,  # async: the producer's own failure, in sync's one-line form
    RolloutTimeout,
    AgentCannotRun,  # the agent failed its preflight episode, or every episode of N steps in a row
)
