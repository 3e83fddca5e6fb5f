"""Levers inside one training step: scoring layouts, the LM head's memory, generation paths (bench/README.md)."""
