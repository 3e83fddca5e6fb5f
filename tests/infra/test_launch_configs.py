"""recipes/accelerate_configs/*.yaml load through accelerate's own config reader with the intended
engine, and the SLURM scripts are valid bash that refuses unknown options with one clear line."""

from __future__ import annotations

import subprocess

import pytest

from launch import REPO_ROOT

CONFIGS = REPO_ROOT / "recipes" / "accelerate_configs"


@pytest.mark.parametrize("name, engine", [("ddp", "MULTI_GPU"), ("fsdp", "FSDP"), ("zero3", "DEEPSPEED")])
def test_accelerate_configs_load(name, engine):
    from accelerate.commands.config.config_args import load_config_from_file

    cfg = load_config_from_file(str(CONFIGS / f"{name}.yaml"))
    assert cfg.distributed_type.name == engine
    if name == "fsdp":  # FSDP2, full shard, one unit per decoder layer, a full state dict to save
        assert cfg.fsdp_config["fsdp_version"] == 2 and cfg.fsdp_config["fsdp_reshard_after_forward"] is True
        assert cfg.fsdp_config["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
        assert cfg.fsdp_config["fsdp_state_dict_type"] == "FULL_STATE_DICT"
    if name == "zero3":
        assert cfg.deepspeed_config["zero_stage"] == 3


@pytest.mark.parametrize("script", ["train.slurm", "generate.slurm"])
def test_slurm_scripts_parse_and_refuse_unknown_options(script, tmp_path):
    path = REPO_ROOT / "slurm" / script
    assert subprocess.run(["bash", "-n", str(path)]).returncode == 0
    proc = subprocess.run(["bash", str(path), "--bogus"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2 and f"{script.split('.')[0]}.slurm: unknown option '--bogus'" in proc.stderr
