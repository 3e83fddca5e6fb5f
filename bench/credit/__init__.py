"""Step credit: does GiGPO's step advantage carry information where credit is diluted (the maze task), and does
it make a tiny model learn faster than GRPO? See docs/step_credit.md."""
