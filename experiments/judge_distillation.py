"""Judge distillation on the tiny arithmetic task: the agreement curve of a student reward model with its judge.

A training run whose only reward is ``distilled_judge``: for the first ``--judge_steps`` steps every
completion goes to the judge (an OpenAI-compatible endpoint; by default the scripted grader of
bench/common/judge_standin.py, started here) and the student (the policy's own folder with a fresh one-logit
head) learns its labels; then the student is the reward and the judge sees a shrinking sample. Writes
``<out>/agreement.json`` (per step: agreement, the judge's pass rate, the share judged, judge calls) and
``<out>/agreement.png``, and prints the table.

    python experiments/judge_distillation.py --model runs/arithmetic_judge/tiny_model/sft_model --out runs/distill
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the scripted grader: bench.common.judge_standin


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True, help="a warm tiny arithmetic model folder (policy and student)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--judge_url", default=None, help="an endpoint; default: start the scripted grader")
    parser.add_argument("--judge_model", default="grader")
    parser.add_argument("--judge_mode", default="digits", help="the scripted grader's mode (arithmetic: 0/10, "
                        "digits: partial credit)")
    parser.add_argument("--max_steps", type=int, default=40)
    parser.add_argument("--judge_steps", type=int, default=15)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--learning_rate", type=float, default=1e-3, help="the student's")
    parser.add_argument("--updates_per_step", type=int, default=4, help="the student's")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    server = None
    if args.judge_url is None:
        from bench.common.judge_standin import standin

        server = standin(out / "grader.log", mode=args.judge_mode)
        args.judge_url = server.start()
    recipe = {"rewards": [{"name": "distilled_judge", "options": {
        "student": args.model, "device": "cpu", "judge_steps": args.judge_steps, "sample_fraction": 0.5,
        "sample_decay": 0.85, "min_fraction": 0.1, "learning_rate": args.learning_rate,
        "updates_per_step": args.updates_per_step, "seed": args.seed,
        "judge": {"base_url": args.judge_url, "model": args.judge_model, "concurrency": 16}}}],
        "max_steps": args.max_steps, "batch_size": 8, "num_generations": 8, "n_eval": 100, "seed": args.seed,
        "output_dir": str(out / "run")}
    (out / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    from grouprl.cli import main as grouprl

    start = time.time()
    try:
        code = grouprl(["train", "--config", str(out / "recipe.yaml"), "--model_name_or_path", args.model])
    finally:
        if server is not None:
            server.kill()
    rows = [json.loads(line) for line in (out / "run" / "metrics.jsonl").read_text().splitlines()]
    curve = [{"step": r["step"], "agreement": r.get("distill/agreement"), "judge_positive": r.get("distill/judge_positive"),
              "judge_fraction": r.get("distill/judge_fraction"), "judged": r.get("distill/judged"),
              "judge_calls": r.get("distilled_judge/calls"), "student_loss": r.get("distill/student_loss"),
              "reward": r.get("reward")} for r in rows]
    summary = json.loads((out / "run" / "summary.json").read_text()) if (out / "run" / "summary.json").is_file() else {}
    result = {"exit_code": code, "wall_seconds": time.time() - start, "curve": curve,
              "accuracy_before": summary.get("accuracy_before"), "accuracy_after": summary.get("accuracy_after")}
    (out / "agreement.json").write_text(json.dumps(result, indent=1))
    print("step  agreement  judge_pass  judged  calls")
    for c in curve:
        print(f"{c['step']:>4}  {c['agreement'] if c['agreement'] is not None else float('nan'):9.3f}  "
              f"{c['judge_positive'] if c['judge_positive'] is not None else float('nan'):10.3f}  "
              f"{c['judged'] or 0:6.0f}  {c['judge_calls'] or 0:5.0f}")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [c["step"] for c in curve if c["agreement"] is not None]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(steps, [c["agreement"] for c in curve if c["agreement"] is not None], label="student agrees with judge")
    ax.plot(steps, [max(c["judge_positive"], 1 - c["judge_positive"]) for c in curve if c["agreement"] is not None],
            "--", label="majority baseline")
    ax.plot([c["step"] for c in curve], [c["judge_fraction"] for c in curve], ":", label="share sent to the judge")
    ax.axvline(args.judge_steps + 0.5, color="grey", lw=0.5)
    ax.set_xlabel("step")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "agreement.png", dpi=120)
    print(f"wrote {out / 'agreement.json'} and {out / 'agreement.png'}; exit code {code}")


if __name__ == "__main__":
    main()
