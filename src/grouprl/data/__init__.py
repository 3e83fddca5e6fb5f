"""Prompt datasets: sources, rows, mixtures, chat formatting."""
