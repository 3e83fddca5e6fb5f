"""Adapter-only weight sync's choices, without vLLM (``rollout/backends/vllm_lora.py``): the config key, which
LoRA policies can be pushed as an adapter and why not, the adapter's names and files, and which directories
are kept. The engine's side (the adapter's tokens and log-probs equal the merged weights') is
``tests/infra/test_vllm_backend_lora_sync.py``, in the vLLM venv."""

from __future__ import annotations

import json
import logging
import os
import string

import pytest
import torch
from peft import LoraConfig, get_peft_model

from grouprl.config import ConfigError
from grouprl.models.tiny import build_tiny_model, build_tokenizer
from grouprl.rollout.backends.vllm_lora import (
    AdapterFiles,
    adapter_config,
    adapter_problem,
    adapter_tensors,
    choose_adapter_rank,
    engine_rank,
)
from grouprl.run_config import build_config


def _model(**lora):
    model = build_tiny_model(build_tokenizer(string.digits), hidden=32, layers=1, heads=2)
    if not lora:
        return model
    return get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", **lora))


def test_the_config_key_takes_auto_adapter_merged_and_nothing_else():
    assert build_config(None, None, environ={}).speed.vllm_weight_sync == "auto"
    assert build_config(None, {"vllm_weight_sync": "adapter"}, environ={}).speed.vllm_weight_sync == "adapter"
    with pytest.raises(ConfigError, match="vllm_weight_sync"):
        build_config(None, {"vllm_weight_sync": "lora"}, environ={})


def test_engine_ranks_round_up_to_one_vllm_accepts():
    assert [engine_rank(r) for r in (1, 2, 8, 9, 16, 300, 512)] == [1, 8, 8, 16, 16, 320, 512]
    with pytest.raises(ValueError, match="above vLLM's largest"):
        engine_rank(513)


def test_a_plain_lora_is_pushed_as_an_adapter_on_a_gpu_and_on_cpu_only_when_asked(caplog):
    model = _model(r=4, target_modules=["q_proj", "v_proj", "down_proj"])
    assert adapter_problem(model) is None
    assert choose_adapter_rank("auto", model, on_gpu=True) == 8
    assert choose_adapter_rank("adapter", model, on_gpu=True) == 8
    assert choose_adapter_rank("adapter", model, on_gpu=False) == 8
    assert choose_adapter_rank("merged", model, on_gpu=True) == 0
    with caplog.at_level(logging.INFO, logger="grouprl.rollout.backends.vllm_lora"):
        assert choose_adapter_rank("auto", model, on_gpu=False) == 0  # vLLM's CPU LoRA kernels generate slowly
    assert "the engine runs on CPU" in caplog.text


@pytest.mark.parametrize(
    "lora, reason",
    [
        (dict(r=4, target_modules=["q_proj"], modules_to_save=["lm_head"]), "modules_to_save"),
        (dict(r=4, target_modules=["embed_tokens", "q_proj"]), "linear layers only"),
        (dict(r=4, target_modules=["q_proj"], use_dora=True), "DoRA"),
        (dict(r=4, target_modules=["q_proj"], bias="lora_only"), "biases"),
    ],
)
def test_what_vllm_cannot_serve_is_refused_in_adapter_mode_and_merged_in_auto(lora, reason, caplog):
    model = _model(**lora)
    assert reason in adapter_problem(model)
    with pytest.raises(ConfigError) as err:
        choose_adapter_rank("adapter", model, on_gpu=True)
    assert "\n" not in str(err.value) and reason in str(err.value) and "vllm_weight_sync: merged" in str(err.value)
    with caplog.at_level(logging.INFO, logger="grouprl.rollout.backends.vllm_lora"):
        assert choose_adapter_rank("auto", model, on_gpu=True) == 0
    assert reason in caplog.text


def test_a_full_model_is_merged_quietly_in_auto_and_refused_in_adapter_mode(caplog):
    model = _model()
    with caplog.at_level(logging.INFO):
        assert choose_adapter_rank("auto", model, on_gpu=True) == 0
        assert choose_adapter_rank("auto", model, on_gpu=False) == 0
    assert "vllm_weight_sync" not in caplog.text
    with pytest.raises(ConfigError, match="not a peft LoRA model"):
        choose_adapter_rank("adapter", model, on_gpu=True)


def test_a_parameter_trained_outside_the_adapter_is_refused():
    model = _model(r=4, target_modules=["q_proj"])
    model.base_model.model.model.norm.weight.requires_grad_(True)
    assert "model.norm.weight is trained outside the adapter" in adapter_problem(model)


def test_a_server_serving_lower_ranks_says_which_flag_would_serve_it():
    model = _model(r=16, target_modules=["q_proj"])
    assert choose_adapter_rank("auto", model, on_gpu=True, engine_limit=16) == 16
    assert choose_adapter_rank("auto", model, on_gpu=True, engine_limit=0) == 0
    with pytest.raises(ConfigError, match="--max_lora_rank 16"):
        choose_adapter_rank("adapter", model, on_gpu=False, engine_limit=8)


def test_the_adapter_goes_under_peft_saved_names_as_views_with_a_json_config():
    model = _model(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    tensors = adapter_tensors(model)
    names = [name for name, _ in tensors]
    assert names == [
        "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
        "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight",
        "base_model.model.model.layers.0.self_attn.v_proj.lora_A.weight",
        "base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight",
    ]
    live = model.base_model.model.model.layers[0].self_attn.q_proj.lora_A["default"].weight
    assert tensors[0][1].data_ptr() == live.data_ptr()  # no copy until written
    config = adapter_config(model)
    assert config["r"] == 4 and config["lora_alpha"] == 8 and sorted(config["target_modules"]) == ["q_proj", "v_proj"]
    assert config["init_lora_weights"] is True
    json.dumps(config)


def test_the_served_adapter_directory_is_kept_until_the_next_one_loads(tmp_path):
    model = _model(r=4, target_modules=["q_proj"])
    files = AdapterFiles(adapter_config(model), str(tmp_path))
    loaded = []
    first = files.push(adapter_tensors(model), lambda path: loaded.append(path) or path)
    assert sorted(os.listdir(first)) == ["adapter_config.json", "adapter_model.safetensors"]
    second = files.push(adapter_tensors(model), lambda path: loaded.append(path) or path)
    assert loaded == [first, second] and not os.path.exists(first) and os.path.isdir(second)

    def refuse(path):
        raise ValueError("no")

    with pytest.raises(ValueError):
        files.push(adapter_tensors(model), refuse)
    assert os.listdir(tmp_path) == [os.path.basename(second)]  # the refused one is gone, the served one kept
    files.close()
    assert os.listdir(tmp_path) == []


def test_the_written_adapter_holds_the_live_values(tmp_path):
    from safetensors.torch import load_file

    model = _model(r=4, target_modules=["q_proj"])
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.fill_(0.5)
    files = AdapterFiles(adapter_config(model), str(tmp_path))
    path = files.push(adapter_tensors(model), lambda p: p)
    saved = load_file(os.path.join(path, "adapter_model.safetensors"))
    assert float(saved["base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"].min()) == 0.5
