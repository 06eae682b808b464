"""Two-process DistributedDataParallel pretraining (gloo, CPU) equals one process with the same global batch."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from icrl_gym.checkpoint import read_checkpoint
from icrl_gym.envs import MDPSpec, bernoulli_bandit_spec
from icrl_gym.training.distributed import DistContext
from icrl_gym.training.pretrain import PretrainConfig, pretrain


def _config(out_dir, env, context):
    return PretrainConfig(
        name="ddp-tiny",
        env=env,
        context=context,
        label="ad",
        model={"n_layer": 2, "n_head": 2, "n_embd": 16},
        trajectories_per_chunk=64,
        steps=4,
        batch_size=8,
        lr=1e-2,
        warmup_steps=1,
        val_trajectories=16,
        eval_every=2,
        device="cpu",
        threads=1,
        out_dir=str(out_dir),
    )


@pytest.mark.parametrize(
    "env, context",
    [
        (bernoulli_bandit_spec(horizon=10).to_dict(), {"name": "ucb"}),
        (MDPSpec(num_states=3, num_actions=2, horizon=3, episodes=3).to_dict(), {"name": "mdp_uniform"}),
    ],
    ids=["bandit", "mdp"],
)
def test_two_processes_match_one_process(tmp_path, env, context):
    single = _config(tmp_path / "single", env, context)
    model, _ = pretrain(single, echo=False)
    expected = {k: v.detach().numpy() for k, v in model.state_dict().items()}

    config_file = tmp_path / "ddp.json"
    config_file.write_text(json.dumps(_config(tmp_path / "ddp", env, context).to_dict()))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    command += ["-m", "icrl_gym.training.pretrain", str(config_file)]
    env_vars = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env_vars)
    assert done.returncode == 0, done.stderr[-3000:]
    weights, meta = read_checkpoint(tmp_path / "ddp" / "checkpoint")
    assert meta["training"]["world_size"] == 2 and meta["training"]["step"] == 4
    assert weights.keys() == expected.keys()
    for name, value in weights.items():
        # all-reduce sums gradients in another order: float32 round-off of a few 1e-5 after 4 Adam steps
        np.testing.assert_allclose(value.numpy(), expected[name], rtol=1e-4, atol=5e-5, err_msg=name)
    log = (tmp_path / "ddp" / "train.log").read_text()
    assert "DDP: 2 processes, 4 trajectories each" in log and log.count("step 4 val") == 1  # rank 0 logs alone


def test_shard_splits_the_global_batch():
    index = np.arange(12)
    shards = [DistContext(rank=r, world_size=3).shard(index) for r in range(3)]
    np.testing.assert_array_equal(np.concatenate(shards), index)
    with pytest.raises(ValueError, match="not divisible"):
        DistContext(rank=0, world_size=5).shard(index)
