"""The markdown of bench/device/check.py's record: one table per part, the grouprl / TRL ratios, the errors."""

from __future__ import annotations

from bench.device.captured_decode import table as captured_table


def _f(value, fmt: str = "{:.3f}") -> str:
    return "" if value is None else fmt.format(value)


def _training(parts: dict, comparison: dict) -> list[str]:
    lines = [
        "## Training steps (HF generation), grouprl and TRL on the same work",
        "",
        "| model | trainer | prompts x K x new tokens | steps timed | median step (s) | of which generation (s) | "
        "tokens/s | completion tokens/step | peak GPU (MiB) | peak RSS (MiB) | updates skipped |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in ("train_tiny", "trl_tiny", "train_qwen05b", "trl_qwen05b"):
        r = (parts.get(name) or {}).get("result") or {}
        if "median_step_s" not in r:
            lines.append(f"| {name} | | | | (no result) | | | | | | |")
            continue
        lines.append(
            f"| {r['model']} | {r['trainer']} | {r['prompts']} x {r['k']} x {r['max_new_tokens']} | "
            f"{r['steps_timed']} | {_f(r['median_step_s'])} | {_f(r.get('median_phase_s', {}).get('generation'))} | "
            f"{_f(r['tokens_per_s'], '{:.0f}')} | "
            f"{_f(r['mean_completion_tokens_per_step'], '{:.0f}')} | {_f(r.get('peak_gpu_mb'), '{:.0f}')} | "
            f"{_f(r.get('peak_rss_mb'), '{:.0f}')} | {r.get('updates_skipped', '')} |"
        )
    lines += [
        "",
        "| model | step throughput grouprl / TRL | tokens/s grouprl / TRL | peak GPU grouprl / TRL |",
        "|---|---|---|---|",
    ]
    for model, c in comparison.items():
        lines.append(
            f"| {model} | {_f(c['throughput_ratio_grouprl_over_trl'], '{:.2f}x')} | "
            f"{_f(c['tokens_per_s_ratio_grouprl_over_trl'], '{:.2f}x')} | "
            f"{_f(c.get('peak_gpu_ratio_grouprl_over_trl'), '{:.2f}')} |"
        )
    return lines


def _scoring(part: dict) -> list[str]:
    r = part.get("result") or {}
    lines = ["## Grouped vs padded scoring (max |difference| over completion tokens, temperature 0.7)", ""]
    if "batch" in r:
        b = r["batch"]
        lines += [
            f"{b['samples']} samples, {b['completion_tokens']} completion tokens; tolerance fp32 "
            f"{r['tolerance']['fp32']}, bf16 {r['tolerance']['bf16']}",
            "",
        ]
    lines += [
        "| attention | dtype | layout | max diff log-prob | mean diff | max diff entropy | bf16 vs fp32 (padded) | "
        "tolerance | within | padded log-prob std |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in r.get("rows", []):
        lines.append(
            f"| {row['attention']} | {row['dtype']} | {row['layout']} | {row['max_abs_diff_logp']:.2e} | "
            f"{row['mean_abs_diff_logp']:.2e} | {row['max_abs_diff_entropy']:.2e} | {_f(row['bf16_floor_vs_fp32'], '{:.2e}')} | "
            f"{row['tolerance']:.2e} | "
            f"{'yes' if row['within_tolerance'] and row['padding_zero'] else 'NO'} | "
            f"{row['padded_logp_std']:.2f} |"
        )
    return lines


def _lm_head(part: dict) -> list[str]:
    r = part.get("result") or {}
    lines = ["## One update's scoring forward + backward: chunked LM head vs whole logits", ""]
    if "completions" in r:
        lines += [
            f"{r['completions']} completions x {r['length']} tokens, vocabulary {r['vocab']}, {r['layers']} "
            f"layers, {r['dtype']}; whole logits would be {r['whole_logits_mb']:.0f} MiB; memory: {r['memory']}",
            "",
        ]
    lines += [
        "| head | update peak above before (MiB) | allocated before (MiB) | seconds | loss |",
        "|---|---|---|---|---|",
    ]
    for variant, v in (r.get("variants") or {}).items():
        lines.append(
            f"| {variant} | {v['update_peak_mb']:.0f} | {v['allocated_before_mb']:.0f} | {v['seconds']:.3f} | "
            f"{v['loss']:.5f} |"
        )
    return lines


def render(record: dict) -> str:
    env, parts = record["environment"], record["parts"]
    versions = ", ".join(f"{k} {v}" for k, v in env["versions"].items() if v)
    lines = [
        f"# grouprl GPU check: {env['device_name']}",
        "",
        f"Started {record['started']}, {record.get('total_seconds', 0):.0f} s; python {env['python']}, "
        f"CUDA {env.get('cuda_runtime')}; {versions}.",
        "",
    ]
    lines += _training(parts, record.get("comparison", {})) + [""]
    lines += captured_table(parts.get("captured_decode") or {}) + [""]
    lines += _scoring(parts.get("scoring") or {}) + [""]
    lines += _lm_head(parts.get("lm_head") or {}) + [""]
    lines += _async(parts.get("async_judge") or {}) + [""]
    lines += ["## Parts", "", "| part | seconds | cap (s) | status |", "|---|---|---|---|"]
    for name, part in parts.items():
        status = "ok" if not part.get("error") else "FAILED: " + part.get("error_line", "").replace("|", "/")
        lines.append(f"| {name} | {_f(part.get('seconds'), '{:.1f}')} | {_f(part.get('cap_s'), '{:.0f}')} | {status} |")
    return "\n".join(lines) + "\n"


def _async(part: dict) -> list[str]:
    r = part.get("result") or {}
    lines = ["## Asynchronous rollouts: the main job's work scored by a judge over HTTP", ""]
    if "steps" in r:
        lines += [
            f"{r['model']}; judge {r['judge_delay']} s per answer; {r['steps']} steps a run, "
            f"{r['threads']} torch threads; throughput over the steps after the first",
            "",
        ]
    lines += [
        "| mode | steps/s | step (s) | rollout wait (s) | generation (s) | score (s) | update (s) | updates skipped |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for mode in ("sync", "async"):
        m = r.get(mode)
        if not m:
            continue
        means = m["means"]
        lines.append(
            f"| {mode} | {m['steps_per_s']:.3f} | {_f(means.get('step_time'))} | "
            f"{_f(means.get('rollout_wait_time'))} | "
            f"{_f(means.get('generation_time', means.get('async/producer_generation_time')))} | "
            f"{_f(means.get('score_time', means.get('async/producer_score_time')))} | "
            f"{_f(means.get('update_time'))} | {m['updates_skipped']} |"
        )
    if "ratio_async_over_sync" in r:
        lines += ["", f"**async / sync step throughput: {r['ratio_async_over_sync']:.2f}x**"]
    return lines
