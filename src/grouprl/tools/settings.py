"""The ``tools`` config section (which tools, which parser, how a conversation episode runs) is typed
with the other core sections in ``config/sections.py``; this name stays for code that imports it here."""

from grouprl.config.sections import ToolsConfig

__all__ = ["ToolsConfig"]
