"""The loop: rollout, score, gather, advantages, update (``trainer.py``), and what one step needs
(the learner, the advantage phase, step metrics, every collective in ``parallel.py``, checkpoints)."""
