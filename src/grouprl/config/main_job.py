"""The built-in jobs ``grouprl train`` runs when no recipe says otherwise: ``--model NAME``.

``smollm2-135m-instruct`` (the default of a bare ``grouprl train``): SmolLM2-135M-Instruct,
materialised once from its package, taught 2-digit addition with GRPO on a laptop CPU. Its settings
were chosen by measurement (``docs/grpo.md``, "The main job"); the same job as a recipe is
``recipes/SmolLM2-135M-Instruct/grpo/config_arithmetic.yaml`` (a test keeps the two equal).

``tiny``: the field defaults, i.e. the 0.8 M-parameter model grouprl builds and SFT-warms itself,
fully offline. A recipe (``--config``), a model (``--model_name_or_path``, ``MODEL_NAME``) or a task
(``--task``) given without ``--model`` also starts from the field defaults, as before this job existed.
"""

from __future__ import annotations

from typing import Any

MAIN_MODEL = "smollm2-135m-instruct"

MAIN_JOBS: dict[str, dict[str, Any]] = {
    "tiny": {},
    "smollm2-135m-instruct": {
        "model_name_or_path": "smollm2-135m-instruct",
        "task": "arithmetic",
        "arithmetic_prompt": "Compute {question}. Reply with only the number.",
        "arithmetic_answer": "last_number",
        "max_new_tokens": 12,
        "temperature": 0.7,
        "num_generations": 8,
        "batch_size": 2,
        "learning_rate": 5.0e-6,
        "lr_scheduler_type": "constant",
        "max_steps": 20,
        "n_eval": 200,
        "logging_steps": 5,
        "num_completions_to_print": 2,
        "completions_print_steps": 5,
        "output_dir": "outputs/smollm2-arithmetic",
    },
}
