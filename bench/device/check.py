"""The GPU check: grouprl's training, scoring and LM head on a CUDA device, and grouprl vs TRL there, in one run.

Parts (bench/device/parts.py), in this order, each in its own process with its own time cap:

- ``train_tiny``, ``train_qwen05b``: bf16 grouprl training steps (Trainer: HF generation, grouped scoring, the
  Learner's update) on the tiny Qwen2 and on Qwen2.5-0.5B's architecture (random weights, built there):
  step time, tokens/s, peak GPU memory (``torch.cuda.max_memory_allocated``);
- ``captured_decode``: grouprl's decode loop vs the static-cache loop, eager and captured as a CUDA graph
  (``speed.captured_decode``; bench/device/captured_decode.py): time, tokens/s, rows equal to the loop's;
- ``scoring``: grouped (block mask, prefix cache) vs padded log-probs on the device, fp32 and bf16, sdpa and eager;
- ``lm_head``: one update's peak GPU memory and time, chunked LM head vs whole logits (151,936-token vocabulary);
- ``trl_tiny``, ``trl_qwen05b``: TRL's GRPOTrainer on the same work as the ``train_*`` parts (HF generation);
- ``async_judge``: ``grouprl train`` sync vs async on SmolLM2-135M's architecture, scored by a judge server on
  127.0.0.1 answering in 0.5 s (bench/device/async_judge.py): issue 29's figure on a GPU.

A part that fails or runs past its cap is recorded with its error (and the steps it finished); the others
still run. The JSON and the markdown table are rewritten after every part, so a run cut short keeps
what it measured. On a GPU machine without the repo installed (PYTHONPATH=src; trl, datasets and pydantic
carried as wheels: bench/device/fetch_wheels.sh, docs/performance.md "GPU check"), from the repository's root:

    python3 -m bench.device.check --device cuda --out $OUT --max-seconds 420

and on a CPU, the same code paths at toy sizes in well under a minute (tests/bench/test_device_check.py):

    python -m bench.device.check --device cpu --fast --out /tmp/device_check
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

from bench.common import child_pythonpath

HERE = Path(__file__).resolve().parent
ORDER = [
    "train_tiny",
    "captured_decode",
    "scoring",
    "lm_head",
    "train_qwen05b",
    "trl_tiny",
    "trl_qwen05b",
    "async_judge",
]
CAPS_S = {
    "train_tiny": 75,
    "captured_decode": 90,
    "scoring": 60,
    "lm_head": 60,
    "train_qwen05b": 120,
    "trl_tiny": 75,
    "trl_qwen05b": 120,
    "async_judge": 150,
}
MIN_PART_S = 20  # a part is not started with less time than this left (it would only be killed)
VERSIONS = [
    "torch",
    "transformers",
    "trl",
    "datasets",
    "accelerate",
    "peft",
    "pydantic",
    "pydantic_core",
    "tokenizers",
    "huggingface_hub",
    "numpy",
    "pyarrow",
    "fsspec",
    "dill",
    "multiprocess",
    "typing_extensions",
]
COMPARED = {"tiny": ("train_tiny", "trl_tiny"), "qwen05b": ("train_qwen05b", "trl_qwen05b")}


def grouprl_overrides(parser: argparse.ArgumentParser, items: list[str]) -> dict:
    import yaml

    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"--grouprl-set {item}: expected KEY=VALUE")
        out[key] = yaml.safe_load(value)
    return out


class PartTimedOut(Exception):
    pass


def environment(device: str) -> dict:
    def version(name: str) -> str | None:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None

    import torch

    env = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "loadavg_at_start": os.getloadavg(),
        "versions": {n: version(n) for n in VERSIONS},
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
    }
    if device.startswith("cuda"):
        try:
            props = torch.cuda.get_device_properties(0)
            env.update(
                device_name=torch.cuda.get_device_name(0),
                gpu_memory_mb=props.total_memory / 2**20,
                multiprocessors=props.multi_processor_count,
                matmul_allow_tf32=torch.backends.cuda.matmul.allow_tf32,
            )
        except Exception as err:  # noqa: BLE001 -- recorded; each part then fails with its own error
            env["device_name"] = f"no CUDA device: {type(err).__name__}: {err}"
    else:
        env["device_name"] = f"cpu ({platform.processor() or platform.machine()})"
    return env


def run_in_process(name: str, spec: dict, cap: float) -> dict:
    """The part in this process, stopped at ``cap`` seconds by SIGALRM (between Python operations)."""
    import torch

    from bench.device.parts import PARTS

    partial: dict = {}
    if spec["device"].startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()

    def expire(signum, frame):
        raise PartTimedOut(f"{name} ran past its cap of {cap:.0f} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, cap)
    try:
        return {"result": PARTS[name](spec, partial.update)}
    except BaseException as err:  # noqa: BLE001 -- a part's failure is a result, the next part still runs
        if isinstance(err, KeyboardInterrupt):
            raise
        trace = "".join(traceback.format_exception(err))
        return {"result": partial or None, "error": trace[-4000:], "error_line": last_line(trace)}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        import gc

        gc.collect()


def run_in_subprocess(name: str, spec: dict, cap: float) -> dict:
    """The part in a fresh process (own CUDA context, allocator and peak memory), killed at ``cap`` seconds."""
    work = Path(spec["work"])
    spec_file, result_file, log_file = (work / f"{name}.{ext}" for ext in ("spec.json", "result.json", "log"))
    spec_file.write_text(json.dumps(spec))
    env = dict(os.environ, PYTHONPATH=child_pythonpath())
    cmd = [
        sys.executable,
        "-m",
        "bench.device.check",
        "--worker",
        name,
        "--spec",
        str(spec_file),
        "--result",
        str(result_file),
    ]
    with open(log_file, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            rc = proc.wait(timeout=cap)
            error = None if rc == 0 else f"worker exited with status {rc}"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the worker and anything it started
            proc.wait()
            error = f"{name} ran past its cap of {cap:.0f} s and was killed"
    out = read_result(result_file)
    with open(Path(spec["out"]) / "device_check_workers.log", "a") as logs:  # every worker's output, one file
        logs.write(f"\n===== {name} (exit: {error or 'ok'}) =====\n" + log_file.read_text(errors="replace"))
    if error or out.get("error"):
        tail = log_file.read_text(errors="replace")[-3000:]
        out["error_line"] = last_line(out["error"]) if out.get("error") else f"{error}: {last_line(tail)}"
        out["error"] = "\n".join(e for e in (error, out.get("error"), "log tail:\n" + tail) if e)
    return out


def read_result(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):  # no result written (the worker died first)
        return {"result": None}


def write_json(path: Path, value) -> None:
    """Whole or not at all: a worker killed while writing leaves the previous version."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(value, indent=2))
    os.replace(tmp, path)


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip()[:300] if lines else ""


def worker_main(name: str, spec_file: str, result_file: str) -> int:
    from bench.device.parts import PARTS

    spec = json.loads(Path(spec_file).read_text())
    out = Path(result_file)

    def report(partial: dict) -> None:
        write_json(out, {"result": partial})

    try:
        report(PARTS[name](spec, report))
        return 0
    except Exception as err:
        trace = "".join(traceback.format_exception(err))
        print(trace, file=sys.stderr, flush=True)
        write_json(out, {"result": read_result(out)["result"], "error": trace[-4000:]})
        return 1


def compare(parts: dict) -> dict:
    """grouprl vs TRL per model, where both sides finished: step throughput, tokens/s and peak GPU memory ratios."""
    out = {}
    for model, (ours, theirs) in COMPARED.items():
        g, t = (parts.get(p, {}).get("result") or {} for p in (ours, theirs))
        if "median_step_s" not in g or "median_step_s" not in t:
            continue
        row = {
            "throughput_ratio_grouprl_over_trl": t["median_step_s"] / g["median_step_s"],
            "tokens_per_s_ratio_grouprl_over_trl": g["tokens_per_s"] / t["tokens_per_s"],
        }
        if g.get("peak_gpu_mb") and t.get("peak_gpu_mb"):
            row["peak_gpu_ratio_grouprl_over_trl"] = g["peak_gpu_mb"] / t["peak_gpu_mb"]
        out[model] = row
    return out


def write(record: dict, out_dir: Path) -> None:
    """The JSON, then the markdown (a failure to render it never costs the JSON: it is written in its place)."""
    try:
        record["comparison"] = compare(record["parts"])
    except Exception:  # noqa: BLE001
        record["comparison"] = {"error": traceback.format_exc()}
    write_json(out_dir / "device_check.json", record)
    try:
        from bench.device.report import render

        text = render(record)
    except Exception:  # noqa: BLE001
        text = "# grouprl GPU check: the table could not be rendered\n\n```\n" + traceback.format_exc() + "```\n"
    (out_dir / "device_check.md").write_text(text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", help="cuda (the check) or cpu (the code paths, with --fast)")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32", "float16"])
    p.add_argument("--fast", action="store_true", help="toy sizes: the code paths in well under a minute on a CPU")
    p.add_argument("--parts", nargs="+", choices=ORDER, default=ORDER)
    p.add_argument("--max-seconds", type=float, default=420, help="the whole run's budget; parts past it are skipped")
    p.add_argument(
        "--isolate",
        choices=["auto", "process", "none"],
        default="auto",
        help="each part in its own process (auto: on a GPU; --fast on a CPU runs them in this one)",
    )
    p.add_argument("--out", default=os.environ.get("OUT") or str(HERE / "results"))
    p.add_argument(
        "--cap",
        action="append",
        default=[],
        metavar="PART=SECONDS",
        help="override a part's time cap (repeatable); defaults: " + ", ".join(f"{k}={v}" for k, v in CAPS_S.items()),
    )
    p.add_argument(
        "--grouprl-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a grouprl config value for the grouprl training parts (YAML value), e.g. grouped_layout=prefix_cache",
    )
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads in the training parts (0: half the cores)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--spec", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    caps = dict(CAPS_S)
    for item in args.cap:
        part, _, seconds = item.partition("=")
        if part not in caps or not seconds.replace(".", "", 1).isdigit():
            p.error(f"--cap {item}: expected PART=SECONDS with PART one of {', '.join(ORDER)}")
        caps[part] = float(seconds)
    if args.worker:
        return worker_main(args.worker, args.spec, args.result)
    start = time.monotonic()
    # nothing is downloaded (the models are built from configs): never wait on a hub the machine cannot reach
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        os.environ.setdefault(var, "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    isolate = args.isolate if args.isolate != "auto" else ("none" if args.fast and args.device == "cpu" else "process")
    threads = args.threads or max(1, int(os.environ.get("OMP_NUM_THREADS") or (os.cpu_count() or 2) // 2))
    work = Path(tempfile.mkdtemp(prefix="device_check_"))
    spec = {
        "device": args.device,
        "dtype": args.dtype,
        "fast": args.fast,
        "work": str(work),
        "threads": threads,
        "out": str(out_dir),
        "grouprl_set": grouprl_overrides(p, args.grouprl_set),
    }
    (out_dir / "device_check_workers.log").unlink(missing_ok=True)
    env = environment(args.device)
    print(
        f"device: {env['device_name']} | torch {env['torch']} (CUDA {env['cuda_runtime']}) | transformers "
        f"{env['versions']['transformers']} | trl {env['versions']['trl']} | python {env['python']}",
        flush=True,
    )
    record = {
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "environment": env,
        "settings": {
            **{k: v for k, v in vars(args).items() if k not in ("worker", "spec", "result")},
            "isolate": isolate,
            "threads": threads,
            "caps_s": caps,
        },
        "parts": {},
    }
    try:
        for name in [n for n in ORDER if n in args.parts]:
            left = args.max_seconds - (time.monotonic() - start)
            if left < (5 if args.fast else MIN_PART_S):
                skipped = f"skipped: {left:.0f} s of --max-seconds left"
                record["parts"][name] = {"result": None, "error": skipped, "error_line": skipped}
            else:
                cap = min(caps[name], left)
                began = time.monotonic()
                run = run_in_process if isolate == "none" else run_in_subprocess
                record["parts"][name] = {**run(name, spec, cap), "seconds": time.monotonic() - began, "cap_s": cap}
            part = record["parts"][name]
            status = "ok" if not part.get("error") else "FAILED: " + part.get("error_line", "")
            print(f"[{time.monotonic() - start:6.1f} s] {name}: {status}", flush=True)
            record["total_seconds"] = time.monotonic() - start
            write(record, out_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    record["total_seconds"] = time.monotonic() - start
    record["loadavg_at_end"] = os.getloadavg()
    write(record, out_dir)
    print((out_dir / "device_check.md").read_text())
    print(f"wrote {out_dir / 'device_check.json'} and device_check.md in {record['total_seconds']:.0f} s")
    return 0 if all(not part.get("error") for part in record["parts"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
