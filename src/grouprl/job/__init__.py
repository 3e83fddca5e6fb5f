"""The whole run around the loop: the run folder, setup, the warm start, evaluation, observers."""
