"""The random-weight models the GPU check's parts build: what bench/device/parts.py (the training parts) and
bench/device/async_judge.py (the ``async_judge`` part) both use, so that neither imports the other for it."""

from __future__ import annotations

from pathlib import Path


def built_once(spec: dict, name: str, build) -> str:
    """spec["work"]/models/``name``, made by ``build(folder)`` for the first part that asks (a marker file says the
    build finished; a part killed while building leaves only the ``.partial`` folder, which the next one redoes)."""
    out = Path(spec["work"]) / "models" / name
    if (out / "built").is_file():
        return str(out)
    partial = out.with_name(name + ".partial")
    build(partial)
    (partial / "built").write_text("ok\n")
    partial.rename(out)
    return str(out)


def random_weights(spec: dict, folder: Path, corpus: str, config_cls, model_cls, dims: dict) -> None:
    """``model_cls`` of ``config_cls(**dims)`` with random weights (seed 0), built on spec["device"] (a 0.5B model
    initialises slowly on a CPU), saved to ``folder`` in spec["dtype"] with grouprl's character tokenizer over
    ``corpus``."""
    import torch

    from grouprl.models.tiny import build_tokenizer

    tok = build_tokenizer(corpus)
    torch.manual_seed(0)
    config = config_cls(**dims, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=None)
    with torch.device(spec["device"]):
        model = model_cls(config)
    model.generation_config.eos_token_id, model.generation_config.pad_token_id = tok.eos_token_id, tok.pad_token_id
    model.to(getattr(torch, spec["dtype"])).save_pretrained(folder)
    tok.save_pretrained(folder)
