"""Online meta-RL baselines with Stable-Baselines3: PPO trained across the prior.

In-context pretraining is usually compared with meta-RL trained *online*: every episode is one
in-context run of T steps on a fresh instance from the prior, and PPO maximises the expected
return E[sum_t gamma^t r_t]; with gamma = 1 that minimises the Bayes regret
T E[max_k <a_k, w*>] - E[sum_t r_t] (the default gamma = 0.99 trains more stably).  The policy
sees the history in a fixed-size form (``features``, see :mod:`icrl_gym.models.meta_policy`, which also
holds the configuration :class:`MetaRLConfig`; the play-time loader is :mod:`icrl_gym.models.meta_policy_file`).

:func:`train` runs PPO on a :class:`BanditFeatureVecEnv` under a wall-clock and an
environment-step budget and :func:`export_policy` writes the policy as a safetensors + JSON
checkpoint (no pickle); the agent :class:`agents.learned.meta_rl.MetaRLAgent` plays it in the harness.

Command line: ``python -m icrl_gym.training.meta_rl CONFIG.json [--set key=value ...] --export PATH``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import VecEnv, VecNormalize

from icrl_gym.checkpoint import CheckpointKind, save_checkpoint
from icrl_gym.models.meta_policy import BanditFeatureVecEnv, MetaRLConfig, build_algorithm
from icrl_gym.training.curves import TrainingCurves
from icrl_gym.training.loop import main_with_export
from icrl_gym.utils.fileio import RunLog
from icrl_gym.utils.progress import progress_bar


class _Budget(BaseCallback):
    """Stops training at the wall-clock budget; logs the mean regret of finished runs."""

    def __init__(self, seconds: float, log: Any) -> None:
        super().__init__()
        self.seconds, self.log = seconds, log
        self.start = time.perf_counter()
        self.regrets: list[float] = []
        self.history: list[dict[str, float]] = []

    def _on_step(self) -> bool:
        for info in self.locals.get("infos", []):
            if "episode" in info:
                self.regrets.append(float(info["episode"]["regret"]))
        return time.perf_counter() - self.start < self.seconds

    def _on_rollout_end(self) -> None:
        if self.regrets:
            entry = {
                "env_steps": float(self.num_timesteps),
                "wall_seconds": time.perf_counter() - self.start,
                "regret": float(np.mean(self.regrets)),
            }
            self.history.append(entry)
            if len(self.history) % 20 == 1:
                minutes = entry["wall_seconds"] / 60
                self.log(f"{self.num_timesteps:,} steps, {minutes:.1f} min: regret {entry['regret']:.2f}")
            self.regrets = []


class _Progress(BaseCallback):
    """A progress bar of the environment steps (:func:`icrl_gym.utils.progress.progress_bar`: terminal only, not quiet).

    It only reads ``num_timesteps``, so training (and its random stream) is the same with or without it.
    """

    def __init__(self, total: int, desc: str = "meta-RL training") -> None:
        super().__init__()
        self.total, self.desc = total, desc
        self.bar: Any = None

    def _on_training_start(self) -> None:
        self.bar = progress_bar(self.total, self.desc, unit="step", initial=min(self.num_timesteps, self.total))

    def _on_step(self) -> bool:
        self.bar.update(min(self.num_timesteps, self.total) - self.bar.n)
        return True

    def _on_training_end(self) -> None:
        self.bar.close()


def train(cfg: MetaRLConfig, command: str | None = None, echo: bool = True) -> tuple[BaseAlgorithm, dict[str, Any]]:
    """Train online under the budget; returns the algorithm and the record of the run."""
    torch.set_num_threads(cfg.threads)

    log = RunLog(None, echo)

    env: VecEnv = BanditFeatureVecEnv(cfg.spec, cfg.features, cfg.num_envs, seed=cfg.seed)
    if cfg.normalize_reward:
        env = VecNormalize(env, norm_obs=False, norm_reward=True, gamma=cfg.gamma)
    algo = build_algorithm(cfg, env)
    budget = _Budget(cfg.wall_minutes * 60, log)
    algo.learn(total_timesteps=cfg.max_env_steps, callback=[budget, _Progress(cfg.max_env_steps)])
    wall = time.perf_counter() - budget.start
    log(f"done: {algo.num_timesteps:,} environment steps in {wall / 60:.1f} min")
    meta = {
        "name": cfg.name,
        "env": cfg.spec.to_dict(),
        "meta_rl": cfg.to_dict(),
        "training": {
            "env_steps": int(algo.num_timesteps),
            "wall_seconds": wall,
            "threads": cfg.threads,
            "device": str(algo.device),
            "command": command,
            "history": budget.history,
        },
    }
    return algo, meta


def export_policy(algo: BaseAlgorithm, meta: dict[str, Any], path: str | Path) -> Path:
    """Write the policy as ``<path>.safetensors`` + ``<path>.json``."""
    config = {"policy": type(algo.policy).__name__, **meta["meta_rl"]}
    saved = save_checkpoint(path, algo.policy, meta, config=config, kind=CheckpointKind.META_RL_POLICY)
    # training curve beside the policy: metrics.csv (+ TensorBoard) in <path>-curves/; step = env steps,
    # val = mean regret of the runs finished in the rollout (PPO/A2C have no held-out loss)
    curves = TrainingCurves(Path(str(path) + "-curves"), start_step=-1)  # the whole history, written anew
    lr = float(algo.lr_schedule(1.0)) if callable(getattr(algo, "lr_schedule", None)) else float("nan")
    for entry in meta["training"]["history"]:
        curves.record(int(entry["env_steps"]), float("nan"), entry["regret"], lr, entry["wall_seconds"])
    curves.close()
    return saved


def main(argv: list[str] | None = None) -> None:
    """Command line: ``python -m icrl_gym.training.meta_rl [CONFIG.json] [--set key=value ...] [--export PATH]``."""
    main_with_export(argv, __doc__, MetaRLConfig, train, export_policy)


if __name__ == "__main__":
    main()
