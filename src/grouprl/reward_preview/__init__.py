"""Preview reward functions on a JSONL of samples, without a model: ``grouprl rewards preview``.

Each line of the samples file is one of

* ``{"messages": [..., {"role": "assistant", "content": ...}], "ground_truth": ...}``
* ``{"prompt": str | messages, "completion": str, "answer": ...}`` (``answer`` may be a full
  GSM8K answer field: the gold number after ``####`` is taken)

plus any other fields, which are passed to every reward as keyword arguments. Plain built-ins
are called as ``fn(completion, ground_truth, **other_fields)``; typed ``@reward_function``s get
the messages. Scoring is the training scorer's (``rewards/scorer.py``): the same failure rule
(an exception is recorded for that sample only) and error format; a malformed line is
recorded as an error naming the line.

- ``samples.py``: the samples file read into samples (or errors naming their line).
- ``score_table.py``: ``preview``: the samples scored, one row each, printed as a table, written as JSONL.
- ``command.py``: the ``rewards list`` / ``rewards preview`` sub-commands, the reward list, a recipe's scorer.
"""

from grouprl.reward_preview.command import (
    add_rewards_parser,
    cmd_rewards_list,
    cmd_rewards_preview,
    list_rewards,
    run_scorer,
)
from grouprl.reward_preview.samples import SampleError, load_samples
from grouprl.reward_preview.score_table import preview

__all__ = [
    "preview",
    "list_rewards",
    "load_samples",
    "add_rewards_parser",
    "cmd_rewards_list",
    "cmd_rewards_preview",
    "run_scorer",
    "SampleError",
]
