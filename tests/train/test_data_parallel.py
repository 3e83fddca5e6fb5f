"""Data-parallel training on CPU with the gloo backend, two real processes (torchrun / accelerate).

- The parameter update of one step with 2 processes x B/2 groups equals 1 process x B groups on
  the same fixed rollouts (to 1e-5), for ``scale_rewards: batch`` with the dapo token count and
  for per-sequence (grpo) aggregation with gradient accumulation.
- A two-process run of the (shrunk) tiny default finishes, logs each step once, resumes from its
  checkpoint with every process's RNG state, and a one-process resume of it refuses clearly.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest
import torch

from grouprl.models.tiny import init_tiny
from grouprl.train.parallel import SINGLE
from launch import REPO_ROOT, WORKERS, child_env, torchrun

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")


def _worker(name: str):
    spec = importlib.util.spec_from_file_location(name, WORKERS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(init_tiny("0123456789+-= ", tmp_path_factory.mktemp("tiny_dp"), hidden=32, layers=2, heads=4, seed=0))


@pytest.mark.parametrize("engine", ["ddp", "fsdp"])
def test_two_process_update_equals_single_process(engine, model_dir, tmp_path):
    """DDP through accelerate (gloo); FSDP2 full shard with PyTorch's fully_shard on CPU (accelerate
    runs FSDP configs as DDP without CUDA), selected as `accelerate launch` with fsdp.yaml does."""
    parity = _worker("update_parity")
    env = {"ACCELERATE_USE_FSDP": "true"} if engine == "fsdp" else {}
    torchrun([str(WORKERS / "update_parity.py"), str(tmp_path), model_dir], nproc=2, timeout=300, env=env)
    tag = "fsdp" if engine == "fsdp" else "w2"
    for case in parity.CASES:
        parity.run(case, model_dir, tmp_path, SINGLE)
        one, two = torch.load(tmp_path / f"{case}-w1.pt"), torch.load(tmp_path / f"{case}-{tag}.pt")
        assert (two["dtensors"] > 0) == (engine == "fsdp")  # FSDP really sharded the parameters
        assert torch.allclose(one["advantage"], two["advantage"], atol=1e-7), case  # the whole batch's
        moved = max(float(d.abs().max()) for d in one["delta"].values())
        assert moved > 1e-4, f"{case}: the update moved nothing ({moved})"
        worst = max(float((one["delta"][n] - two["delta"][n]).abs().max()) for n in one["delta"])
        assert worst < 1e-5, f"{case}: 2-process update differs from 1-process by {worst:.2e}"
        assert two["update"]["grad_norm"] == pytest.approx(one["update"]["grad_norm"], rel=1e-5)
        assert two["update"]["loss"] == pytest.approx(one["update"]["loss"], abs=1e-6)


def test_grail_discriminator_and_mixer_stay_identical_across_processes(tmp_path):
    """The discriminator updates on the gathered examples, the mixer on the gathered B and D: after two
    batches both processes hold the same state, equal to one process's on the whole batch."""
    from grouprl.models.tiny_words import build_tiny_classifier
    from grouprl.tasks.slates.prompt import SYSTEM_PROMPT

    grail = _worker("grail_identity")
    rows = grail.slate_rows()
    corpus = SYSTEM_PROMPT + "".join(r["question"] + r["viewer"] for r in rows) + " CHOSEN VIEWER SLATE STATE: (none)"
    disc_dir = str(build_tiny_classifier(corpus, tmp_path / "disc"))
    torchrun([str(WORKERS / "grail_identity.py"), str(tmp_path), disc_dir], nproc=2, timeout=300)
    grail.run(disc_dir, tmp_path, SINGLE)
    one, r0, r1 = (torch.load(tmp_path / f"grail-{tag}.pt") for tag in ("w1-r0", "w2-r0", "w2-r1"))
    assert torch.equal(r0["logits"], r1["logits"]) and all(
        torch.equal(r0["disc"][k], r1["disc"][k]) for k in r0["disc"]
    )
    assert torch.allclose(r0["logits"], one["logits"], atol=1e-6)
    assert max(float((r0["disc"][k] - one["disc"][k]).abs().max()) for k in one["disc"]) < 1e-5
    assert not torch.allclose(one["logits"], torch.log(torch.tensor([2 / 3, 1 / 3])), atol=1e-4)  # it did move
    assert torch.allclose(torch.cat([r0["scores"], r1["scores"]]), one["scores"], atol=1e-5)


TINY = [
    "--model",
    "tiny",
    "--sft_steps",
    "10",
    "--sft_batch_size",
    "16",
    "--n_train",
    "200",
    "--n_eval",
    "4",
    "--batch_size",
    "2",
    "--num_generations",
    "4",
    "--logging_steps",
    "1",
    "--device",
    "cpu",
]


def _steps(run) -> list[int]:
    return [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_two_process_tiny_run_logs_once_and_resumes(tmp_path):
    run, resumed = tmp_path / "run", tmp_path / "resumed"
    # accelerate launch with the DDP config (gloo on CPU): 3 steps, a checkpoint after step 2.
    accelerate = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(REPO_ROOT / "recipes" / "accelerate_configs" / "ddp.yaml"),
        "--num_processes",
        "2",
        "--main_process_port",
        "0",
        "--dynamo_backend",
        "no",
        "-m",
        "grouprl.cli",
        "train",
    ]
    proc = subprocess.run(
        accelerate + TINY + ["--max_steps", "3", "--save_steps", "2", "--output_dir", str(run)],
        capture_output=True,
        text=True,
        timeout=400,
        env=child_env(),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert _steps(run) == [1, 2, 3]  # each step logged once, by process 0
    printed = proc.stdout + proc.stderr
    assert printed.count("summary written to") == 1 and printed.count("grouprl run summary") == 1  # process 0 alone
    rollouts = _rows(run / "rollouts" / "rollouts.jsonl")
    assert [r["step"] for r in rollouts] == [1] * 8 + [2] * 8 + [3] * 8  # both processes' groups, once each
    assert [r["group"] for r in rollouts[:8]] == [0] * 4 + [1] * 4
    assert len({r["prompt"] for r in rollouts[:8]}) == 2  # the two processes generated for different rows
    ckpt = run / "checkpoint-2"
    state = json.loads((ckpt / "trainer_state.json").read_text())
    assert state["data_position"] == 4 and state["world_size"] == 2
    rng = torch.load(ckpt / "rng.pt", weights_only=False)
    assert rng["world_size"] == 2 and not torch.equal(rng["states"][0]["torch"], rng["states"][1]["torch"])

    # Resumed under plain torchrun: step 3 is the uninterrupted run's step 3 (rows, samples, rewards).
    torchrun(
        [
            "-m",
            "grouprl.cli",
            "train",
            *TINY,
            "--max_steps",
            "3",
            "--output_dir",
            str(resumed),
            "--resume_from_checkpoint",
            str(ckpt),
        ],
        nproc=2,
        timeout=400,
        cwd=tmp_path,
    )
    assert _steps(resumed) == [3]
    again = _rows(resumed / "rollouts" / "rollouts.jsonl")
    fields = ("group", "prompt", "completion", "reward", "advantage")
    assert [[r[f] for f in fields] for r in again] == [[r[f] for f in fields] for r in rollouts[16:]]
    assert json.loads((resumed / "checkpoint-3" / "trainer_state.json").read_text())["data_position"] == 6

    one = subprocess.run(
        [
            sys.executable,
            "-m",
            "grouprl.cli",
            "train",
            *TINY,
            "--max_steps",
            "4",
            "--output_dir",
            str(tmp_path / "one"),
            "--resume_from_checkpoint",
            str(ckpt),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=child_env(),
        cwd=tmp_path,
    )
    assert one.returncode != 0
    assert (
        "grouprl: error: --resume_from_checkpoint" in one.stderr
        and "written by 2 process(es), this run has 1" in one.stderr
        and "Traceback" not in one.stderr
    )  # one line, before any model loads

    # With reshard_on_resume one process continues the same data order (its RNG stream is new).
    torchrun(
        [
            "-m",
            "grouprl.cli",
            "train",
            *TINY,
            "--max_steps",
            "3",
            "--output_dir",
            str(tmp_path / "one"),
            "--resume_from_checkpoint",
            str(ckpt),
            "--reshard_on_resume",
            "true",
        ],
        nproc=1,
        timeout=300,
        cwd=tmp_path,
    )
    alone = _rows(tmp_path / "one" / "rollouts" / "rollouts.jsonl")
    assert [(r["group"], r["prompt"]) for r in alone] == [(r["group"], r["prompt"]) for r in rollouts[16:]]


def test_deepspeed_config_is_refused_in_one_line(tmp_path):
    """zero3.yaml sets ACCELERATE_USE_DEEPSPEED; accelerate's prepare_model would leave the model
    unwrapped (no gradient averaging), so grouprl refuses before any work."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "grouprl.cli",
            "train",
            "--model",
            "tiny",
            "--max_steps",
            "1",
            "--output_dir",
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env({"ACCELERATE_USE_DEEPSPEED": "true"}),
        cwd=tmp_path,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "grouprl: error: accelerate config: DeepSpeed (zero3.yaml) is not driven" in proc.stderr


def _rows(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_two_process_gridworld_with_ray_env_workers(tmp_path):
    """Multi-step episodes (uneven step counts per process) with Ray env workers: each trainer process
    holds its own pool of actors (measured here: each starts its own local Ray instance; with
    --ray_address both join one cluster). About 5 minutes on 2 busy cores: slow."""
    run = tmp_path / "grid"
    torchrun(
        [
            "-m",
            "grouprl.cli",
            "train",
            "--task",
            "gridworld",
            "--history_length",
            "1",
            "--max_episode_steps",
            "4",
            "--n_eval",
            "0",
            "--sft_steps",
            "10",
            "--sft_demo_episodes",
            "20",
            "--batch_size",
            "2",
            "--num_generations",
            "2",
            "--max_steps",
            "2",
            "--env_workers",
            "2",
            "--device",
            "cpu",
            "--output_dir",
            str(run),
        ],
        nproc=2,
        timeout=900,
        cwd=tmp_path,
    )
    assert _steps(run) == [1, 2]
    lines = _rows(run / "trajectories" / "step_000001.jsonl")
    assert {r["group"] for r in lines} == {0, 1}  # both processes' groups, in one file written by process 0


@pytest.mark.slow
def test_two_process_fsdp_tiny_run_resumes_exactly(tmp_path):
    """FSDP2 on CPU end to end: generation on sharded parameters (transformers' synced_gpus), full
    state dicts gathered into an HF checkpoint, each process's optimizer shard reloaded on resume."""
    run, resumed = tmp_path / "run", tmp_path / "resumed"
    fsdp = {"ACCELERATE_USE_FSDP": "true"}
    torchrun(
        ["-m", "grouprl.cli", "train", *TINY, "--max_steps", "3", "--save_steps", "2", "--output_dir", str(run)],
        nproc=2,
        timeout=600,
        env=fsdp,
        cwd=tmp_path,
    )
    torchrun(
        [
            "-m",
            "grouprl.cli",
            "train",
            *TINY,
            "--max_steps",
            "3",
            "--output_dir",
            str(resumed),
            "--resume_from_checkpoint",
            str(run / "checkpoint-2"),
        ],
        nproc=2,
        timeout=600,
        env=fsdp,
        cwd=tmp_path,
    )
    fields = ("group", "prompt", "completion", "reward", "advantage")
    want = [[r[f] for f in fields] for r in _rows(run / "rollouts" / "rollouts.jsonl")[16:]]
    assert [[r[f] for f in fields] for r in _rows(resumed / "rollouts" / "rollouts.jsonl")] == want
    from safetensors.torch import load_file

    a, b = (load_file(d / "checkpoint-3" / "model.safetensors") for d in (run, resumed))
    assert "model.embed_tokens.weight" in a and max(float((a[k] - b[k]).abs().max()) for k in a) == 0.0
