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
from icrl_gym.training.pretrain import pretrain
from tests.helpers import tiny_finetune_config, tiny_generalist_config, tiny_pretrain_config


def _config(out_dir, env, context):
    model = {"n_layer": 2, "n_head": 2, "n_embd": 16}
    return tiny_pretrain_config(out_dir, env=env, context=context, model=model, steps=4, threads=1)


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


# --- every other trainer under torchrun: the same update as one process -------------------------

GENERALIST = {"d_model": 16, "n_heads": 2, "n_layers": 1, "mlp_ratio": 2, "same_arm_bias": [0.0, 8.0]}
LINEAR = {"d_model": 8, "n_heads": 2, "n_layers": 1, "mlp_ratio": 2, "readouts": 2}


SHARED = dict(steps=4, max_arms=4, min_horizon=8, max_horizon=16, min_batch=3, dagger_start=2, dagger_fraction=0.5)
"""Both generalist runs: odd batch sizes (the two ranks take shares differing by one row), DAgger from step 2."""
SCHEDULE = dict(warmup_steps=1, lr=1e-2, log_every=2, checkpoint_every=2, eval_every=0, device="cpu")


def _generalist_config(out_dir, cache):
    sizes = dict(queries=3, cost_per_batch=1e4, max_batch=7)
    return tiny_generalist_config(out_dir, cache, model=GENERALIST, **sizes, **SHARED, **SCHEDULE)


def _linear_config(out_dir, cache):
    from icrl_gym.training.linear_generalist import LinearGeneralistTrainConfig

    return LinearGeneralistTrainConfig(
        out_dir=str(out_dir),
        model=LINEAR,
        queries=2,
        cost_per_batch=100.0,
        max_batch=5,
        dagger_max_batch=5,
        **SHARED,
        **SCHEDULE,
    )


def _finetune_config(out_dir, cache):
    # 5 runs an iteration, an odd number: shares of 3 and 2 runs
    return tiny_finetune_config(
        cache / "base", out_dir, iterations=3, runs_per_iteration=5, kl_weight=0.1, eval_every=3
    )


def _tiny_base(cache):
    from icrl_gym.training.pretrain import export

    model, meta = pretrain(
        _config(cache / "pre", bernoulli_bandit_spec(horizon=6).to_dict(), {"name": "ucb"}), echo=False
    )
    export(model, meta, cache / "base")


def _initial_weights(module, cfg):
    """The weights a run of ``cfg`` starts from."""
    import torch

    from icrl_gym.checkpoint import read_checkpoint
    from icrl_gym.models.generalist import GeneralistConfig, GeneralistTransformer
    from icrl_gym.models.linear_generalist import LinearGeneralistConfig, LinearGeneralistTransformer

    if module == "finetune":
        return read_checkpoint(cfg.base)[0]
    torch.manual_seed(cfg.seed)
    if module == "generalist":
        return GeneralistTransformer(GeneralistConfig.from_dict(cfg.model)).state_dict()
    return LinearGeneralistTransformer(LinearGeneralistConfig.from_dict(cfg.model)).state_dict()


def _policy(module, cfg, weights):
    """Log-probabilities (..., K) of the model with ``weights`` on a fixed batch of ``cfg``'s kind."""
    import torch

    from icrl_gym.checkpoint import load_checkpoint

    rng = np.random.default_rng(123)
    if module == "generalist":
        from icrl_gym.estimators.gittins import cached_gittins_table
        from icrl_gym.models.generalist import GeneralistConfig, GeneralistTransformer
        from icrl_gym.training.generalist import Experts, sample_batch

        model = GeneralistTransformer(GeneralistConfig.from_dict(cfg.model))
        tables = Experts(gittins=lambda a, b: cached_gittins_table(cfg.max_horizon, cfg.table_cache, a, b))
        batch = sample_batch(cfg, tables, rng)
        args = (torch.as_tensor(batch.actions), torch.as_tensor(batch.rewards, dtype=torch.float32))
        inputs = (*args, torch.as_tensor(batch.query_steps), batch.horizon, batch.num_arms)
    elif module == "linear_generalist":
        from icrl_gym.models.linear_generalist import LinearGeneralistConfig, LinearGeneralistTransformer
        from icrl_gym.training.linear_generalist import sample_batch

        model = LinearGeneralistTransformer(LinearGeneralistConfig.from_dict(cfg.model))
        batch = sample_batch(cfg, rng)
        inst = batch.inst
        inputs = (
            torch.as_tensor(inst.sets).expand(-1, inst.horizon, -1, -1),
            torch.as_tensor(batch.actions),
            torch.as_tensor(batch.rewards, dtype=torch.float32),
            torch.as_tensor(batch.query_steps),
            inst.horizon,
            torch.as_tensor(inst.sigma, dtype=torch.float32),
            torch.as_tensor(inst.dim),
        )
    else:
        model, _ = load_checkpoint(cfg.base)
        sets = torch.eye(5).expand(8, 6, 5, 5)
        inputs = (sets, torch.as_tensor(rng.integers(0, 5, (8, 6))), torch.as_tensor(rng.random((8, 6)) < 0.5).float())
    model.load_state_dict(weights)
    with torch.no_grad():
        out = model(*inputs)
    return torch.log_softmax(out[0] if isinstance(out, tuple) else out, dim=-1).numpy()


@pytest.mark.parametrize(
    "module, make",
    [("generalist", _generalist_config), ("linear_generalist", _linear_config), ("finetune", _finetune_config)],
)
def test_every_trainer_under_torchrun_matches_one_process(tmp_path, module, make):
    """2 gloo processes sharing the rows of every batch take the single-process steps (to float round-off).

    The policies are compared, not every weight: parameters the loss does not depend on (a bias
    added to every arm's logit, the key bias of attention) have a gradient that is round-off only,
    and Adam scales that noise up to steps of size lr, differently in every summation order.
    """
    import importlib

    from icrl_gym.training.state import RunState

    trainer = importlib.import_module(f"icrl_gym.training.{module}")
    cache = tmp_path / "cache"
    cache.mkdir()
    if module == "finetune":
        _tiny_base(cache)
    single = make(tmp_path / "single", cache)
    (trainer.finetune if module == "finetune" else trainer.train)(single, echo=False)
    expected = RunState(single.out_dir).load()

    config_file = tmp_path / "ddp.json"
    config_file.write_text(json.dumps(make(tmp_path / "ddp", cache).to_dict()))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    command += ["-m", f"icrl_gym.training.{module}", str(config_file)]
    env_vars = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env_vars)
    assert done.returncode == 0, done.stderr[-3000:]
    got = RunState(tmp_path / "ddp").load()
    planned = single.to_dict().get("steps", single.to_dict().get("iterations"))
    assert expected is not None and got is not None and got.step == expected.step == planned
    assert got.weights.keys() == expected.weights.keys()
    want = _policy(module, single, expected.weights)
    np.testing.assert_allclose(_policy(module, single, got.weights), want, atol=2e-4)
    assert np.abs(want - _policy(module, single, _initial_weights(module, single))).max() > 1e-2  # it trained
    assert "DDP: 2 processes" in (tmp_path / "ddp" / "train.log").read_text()
