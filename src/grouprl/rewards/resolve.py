"""A reward name to the function the scorer calls: resolved from the registry, a user file run in the
sandbox (never imported here) or a ``package.module:function``, with its recipe options bound."""

from __future__ import annotations

import functools

from grouprl.rewards.kit import with_options
from grouprl.rewards.registry import get_reward, is_typed
from grouprl.user_code import code_ref


def sandboxed_file(name: str, sandbox_user_rewards: bool) -> str | None:
    """The file of a 'path/to/file.py:function' reward that must run in the sandbox, else None."""
    ref = code_ref(name)
    return ref.where if sandbox_user_rewards and ref is not None and ref.is_source else None


def resolve_reward(name: str, sandbox_user_rewards: bool = False):
    """The reward function for ``name``; a sandboxed file is wrapped, never imported here, and with
    ``sandbox_user_rewards`` anything that would be imported instead is refused (``KeyError``)."""
    if sandbox_user_rewards:
        from grouprl.rewards.registry import REWARDS
        from grouprl.rewards.sandbox.user_reward import refuse_unsandboxed, user_reward_in_sandbox

        refuse_unsandboxed(name, REWARDS)
        if sandboxed_file(name, sandbox_user_rewards):
            return user_reward_in_sandbox(name)
    return get_reward(name)


def bind_options(fn, options: dict | None):
    """The reward with recipe options bound as keyword arguments (typed rewards stay typed)."""
    if not options:
        return fn
    return with_options(fn, **options) if is_typed(fn) else functools.partial(fn, **options)
