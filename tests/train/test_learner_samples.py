"""Episodes -> training samples: padding layout, advantages per step, truncated-completion masking."""

from __future__ import annotations

import torch

from grouprl.run_config import build_config
from grouprl.records import Episode, Step
from grouprl.train.learner import pack_samples
from grouprl.job.run import run_name

PAD = 0


def _episode(group: int, prompt: list[int], action: list[int], truncated: bool) -> Episode:
    ep = Episode(group_id=group, index_in_group=0, row={})
    ep.steps.append(
        Step(
            prompt_text="p",
            prompt_ids=prompt,
            action_text="a",
            action_ids=action,
            truncated=truncated,
            anchor_state=None,
        )
    )
    return ep


def test_samples_pad_prompts_left_and_completions_right():
    eps = [_episode(0, [5, 6, 7], [8, 9], False), _episode(0, [5], [8, 9, 10, 11], True)]
    s = pack_samples(eps, torch.tensor([0.5, -0.5]), PAD, mask_truncated=False)
    assert s.batch.prompt_ids.tolist() == [[5, 6, 7], [PAD, PAD, 5]]
    assert s.batch.prompt_mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert s.batch.completion_ids.tolist() == [[8, 9, PAD, PAD], [8, 9, 10, 11]]
    assert s.batch.completion_mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]
    assert torch.equal(s.advantages, torch.tensor([0.5, -0.5]))


def test_truncated_completions_are_masked_out_when_asked():
    eps = [_episode(0, [5], [8, 9], False), _episode(0, [5], [8, 9, 10], True)]
    adv = torch.tensor([1.0, -1.0])
    masked = pack_samples(eps, adv, PAD, mask_truncated=True)
    assert masked.batch.completion_mask.tolist() == [[1, 1, 0], [0, 0, 0]]
    kept = pack_samples(eps, adv, PAD, mask_truncated=False)
    assert kept.batch.completion_mask.tolist() == [[1, 1, 0], [1, 1, 1]]


def test_default_run_name_names_model_k_and_steps():
    cfg = build_config(
        None, {"model_name_or_path": "Qwen/Qwen2.5-0.5B-Instruct", "num_generations": 4, "max_steps": 50}, environ={}
    )
    assert run_name(cfg) == "grpo_Qwen2.5-0.5B-Instruct_K4_steps50"
    assert run_name(build_config(None, {"run_name": "mine"}, environ={})) == "mine"
