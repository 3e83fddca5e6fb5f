"""User code named in a recipe: ``path/to/file.py:function`` or ``package.module:function``.

Every plug-in table (``registry.py``), GiGPO's state keys and environments from a file are named this
way, and this module is the one place that reads such a name (:func:`code_ref`). A file is executed when
it is named (under a private module name derived from its path), a module through the normal import system.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable


@dataclass(frozen=True)
class CodeRef:
    """What ``path/to/file.py:function`` or ``package.module:function`` names."""

    where: str  # the file's path or the module's dotted name
    function: str

    @property
    def is_file(self) -> bool:
        """A file to execute (``.py`` or a path with a folder), not a module to import."""
        return self.is_source or "/" in self.where

    @property
    def is_source(self) -> bool:
        """A ``.py`` source file: the only kind of file the sandbox can run without importing it here."""
        return self.where.endswith(".py")


def code_ref(spec: str) -> CodeRef | None:
    """The file or module and the function ``spec`` names; None for a plain name (no ``where:``)."""
    where, colon, function = spec.rpartition(":")
    return CodeRef(where, function) if colon and where else None


def names_code(spec: str) -> bool:
    """``spec`` names user code: ``where:function`` or a bare Python file (``path/to/file.py``)."""
    return code_ref(spec) is not None or CodeRef(spec, "").is_source


def short_name(spec: str) -> str:
    """The function's name of ``where:function`` (for metric keys and table columns), else ``spec``."""
    ref = code_ref(spec)
    return ref.function if ref else spec


def import_callable(spec: str, what: str = "reward") -> Callable[..., Any]:
    """The callable ``spec`` names; ``KeyError`` naming the ``what``, the file/module and the function."""
    ref = code_ref(spec) or CodeRef("", spec)  # no 'where:': an import of module '' fails, naming it
    where, attr = ref.where, ref.function
    if ref.is_file:
        path = Path(where)
        if not path.is_file():
            raise KeyError(f"{what} '{spec}': no such file {path}")
        module_name = f"grouprl_user_{what.replace(' ', '_')}_{abs(hash(str(path.resolve())))}"
        module_spec = importlib.util.spec_from_file_location(module_name, path)
        if module_spec is None or module_spec.loader is None:
            raise KeyError(f"{what} '{spec}': {path} is not a Python file; expected 'path/to/file.py:function'")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[module_name] = module
        try:
            module_spec.loader.exec_module(module)
        except (Exception, SystemExit) as err:  # noqa: BLE001 - the user's file failed at import: name it
            sys.modules.pop(module_name, None)
            if isinstance(err, SystemExit):  # sys.exit(0) at import must not end the run as a success
                raise KeyError(
                    f"{what} '{spec}': importing {path} called sys.exit({err.code!r}) "
                    f"{_where(err, path)}a {what} file must define its function, not exit"
                ) from None
            raise KeyError(
                f"{what} '{spec}': importing {path} raised {_where(err, path)}{type(err).__name__}: {err}"
            ) from err
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as err:
            raise KeyError(f"{what} '{spec}': cannot import module '{where}' ({err})") from None
        except (Exception, SystemExit) as err:  # noqa: BLE001
            raise KeyError(f"{what} '{spec}': importing module '{where}' raised {type(err).__name__}: {err}") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise KeyError(f"{what} '{spec}': '{where}' has no function '{attr}'")
    return fn


def _where(err: BaseException, path: Path) -> str:
    """'line N: ' of the user's file in the traceback (or a syntax error), else ''."""
    if isinstance(err, SyntaxError) and err.lineno:
        return f"at line {err.lineno}: "
    tb, line = err.__traceback__, None
    while tb is not None:
        if Path(tb.tb_frame.f_code.co_filename).resolve() == path.resolve():
            line = tb.tb_lineno
        tb = tb.tb_next
    return f"at line {line}: " if line else ""
