"""The CUDA path: every shipped model plays the same policy on the GPU as on the CPU.

Skipped without CUDA (CI has none); run on a GPU machine with ``python -m pytest tests/test_cuda.py``
(on an H200, 2026-11-26: the 16 transformers passed; the 3 meta-RL policies need ``sb3_contrib``).
Both agents see the same runs and the same actions (the CPU agent's greedy choice, fed to both), so
their action probabilities pi(. | D_{t-1}, s_t) must agree at every step up to float32 rounding.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import agents
from icrl_gym.checkpoint import PRETRAINED_DIR, CheckpointKind, pretrained_names, read_record
from tests.helpers import shipped_model_env

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.parametrize("name", pretrained_names())
def test_every_shipped_model_plays_the_same_policy_on_cuda_as_on_cpu(name):
    if read_record(PRETRAINED_DIR / name).kind is CheckpointKind.META_RL_POLICY:
        pytest.importorskip("sb3_contrib")  # a GPU image may lack the meta-RL policies' packages
    cpu, gpu = (agents.pretrained(name, seed=0, device=device) for device in ("cpu", "cuda"))
    env = shipped_model_env(name, num_envs=16)
    obs, info = env.reset(seed=5)
    cpu.reset(info)
    gpu.reset(info)
    steps, worst, done = 0, 0.0, False
    while not done:
        p_cpu, p_gpu = cpu.policy(obs), gpu.policy(obs)
        assert p_gpu.shape == p_cpu.shape
        worst = max(worst, float(np.abs(p_cpu - p_gpu).max()))
        a = p_cpu.argmax(axis=1)
        acted_on = obs
        obs, r, terminated, truncated, info = env.step(a)
        cpu.update(a, r, acted_on)
        gpu.update(a, r, acted_on)
        steps += 1
        done = bool(np.all(terminated | truncated))
    assert steps > 1 and worst < 2e-3, f"{name}: max |p_cpu - p_cuda| = {worst:.2e} over {steps} steps"
