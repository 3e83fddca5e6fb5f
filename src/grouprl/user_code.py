"""User code named in a recipe: ``path/to/file.py:function`` or ``package.module:function``.

Rewards, advantage estimators and GiGPO state keys are all named this way. A file is executed
when it is named (under a private module name derived from its path), a module through the normal import system.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any, Callable


def import_callable(spec: str, what: str = "reward") -> Callable[..., Any]:
    """The callable ``spec`` names; ``KeyError`` naming the ``what``, the file/module and the function."""
    where, _, attr = spec.rpartition(":")
    if where.endswith(".py") or "/" in where:
        path = Path(where)
        if not path.is_file():
            raise KeyError(f"{what} '{spec}': no such file {path}")
        module_name = f"grouprl_user_{what.replace(' ', '_')}_{abs(hash(str(path.resolve())))}"
        module_spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[module_name] = module
        module_spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as err:
            raise KeyError(f"{what} '{spec}': cannot import module '{where}' ({err})") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise KeyError(f"{what} '{spec}': '{where}' has no function '{attr}'")
    return fn
