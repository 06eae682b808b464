"""The online meta-RL baselines at play time: history features, their VecEnv, the policy's configuration and loading.

In-context pretraining is usually compared with meta-RL trained *online* (PPO across the prior,
:mod:`icrl_gym.training.meta_rl`).  The policy sees the history in a fixed-size form; two forms
are offered (``features``):

- ``"statistics"``: an MLP on the experts' sufficient statistics (one estimator, shared with the
  experts in :mod:`icrl_gym.estimators.statistics`).  Bernoulli (one-hot arms): per arm N_k / T, the mean
  S_k / N_k (1/2 before the first pull) and 1 / sqrt(N_k + 1), and t / T.  Linear: the action
  set, the ridge estimate w_t = V_t^{-1} b_t (lambda = 1), per arm <a_k, w_t> and
  sqrt(a_k^T V_t^{-1} a_k), and t / T.
- ``"prev_action_reward"``: RL^2 (Duan et al. 2016; Wang et al. 2016), an LSTM policy
  (sb3-contrib's RecurrentPPO) fed the action set, the previous action (one-hot), the previous
  reward and t / T; the history lives in its recurrent state.

:class:`HistoryFeatures` computes them for B runs; :class:`BanditFeatureVecEnv` is a
Stable-Baselines3 ``VecEnv`` over a :class:`BanditBatch` that serves them, so B runs step as
arrays; :func:`policy_from_weights` rebuilds an exported policy (no pickle), which the agent
:class:`agents.learned.meta_rl.MetaRLAgent` plays.  Nothing here trains.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.vec_env import VecEnv

from icrl_gym.algorithm import one_hot
from icrl_gym.config import (
    DEVICE,
    NONNEGATIVE,
    NONNEGATIVE_INT,
    POSITIVE,
    POSITIVE_INT,
    Allowed,
    DictConfig,
    check_fields,
    checked,
)
from icrl_gym.envs.bandit_core import BanditArms, BanditBatch, BanditSpec
from icrl_gym.estimators.statistics import ArmStatistics, RidgeStatistics
from icrl_gym.utils.device import resolve_device

FEATURES = ("statistics", "prev_action_reward")
ALGOS = ("ppo", "recurrent_ppo")


class HistoryFeatures:
    """Fixed-size features of the histories of B bandit runs, updated incrementally."""

    def __init__(self, spec: BanditSpec, kind: str, batch_size: int = 1) -> None:
        if kind not in FEATURES:
            raise ValueError(f"features must be one of {FEATURES}, got {kind!r}")
        self.spec, self.kind = spec, kind
        self.reset(batch_size)

    @property
    def size(self) -> int:
        """Length F of a feature vector."""
        A, d = self.spec.num_actions, self.spec.dim
        if self.kind == "prev_action_reward":
            return A * d + A + 2
        if self.spec.arms is BanditArms.ONE_HOT:
            return 3 * A + 1
        return A * d + d + 2 * A + 1

    def reset(self, batch_size: int) -> None:
        """Empty histories for ``batch_size`` runs."""
        A, d = self.spec.num_actions, self.spec.dim
        self.batch_size, self.t = batch_size, 0
        statistics, one_hot_arms = self.kind == "statistics", self.spec.arms is BanditArms.ONE_HOT
        self.arms = ArmStatistics(batch_size, A) if statistics and one_hot_arms else None
        self.ridge = RidgeStatistics(batch_size, d, reg=1.0) if statistics and not one_hot_arms else None
        self.prev_action = np.full(batch_size, -1)
        self.prev_reward = np.zeros(batch_size)

    def update(self, action_sets: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        """Add (a_t, r_t) of every run."""
        if self.arms is not None:
            self.arms.update(actions, rewards)
        if self.ridge is not None:
            self.ridge.update(action_sets[np.arange(self.batch_size), actions], rewards)
        self.prev_action, self.prev_reward = np.asarray(actions), np.asarray(rewards, dtype=np.float64)
        self.t += 1

    def features(self, action_sets: np.ndarray) -> np.ndarray:
        """(B, A, d) current action sets -> (B, F) float32 features."""
        B, T = self.batch_size, self.spec.horizon
        clock = np.full((B, 1), self.t / T)
        if self.kind == "prev_action_reward":
            prev = one_hot(np.maximum(self.prev_action, 0), self.spec.num_actions) * (self.prev_action >= 0)[:, None]
            parts = [action_sets.reshape(B, -1), prev, self.prev_reward[:, None], clock]
        elif self.arms is not None:
            counts = self.arms.counts
            means = np.nan_to_num(self.arms.means(), nan=0.5)
            parts = [counts / T, means, 1.0 / np.sqrt(counts + 1.0), clock]
        elif self.ridge is not None:
            w = self.ridge.estimate()
            parts = [
                action_sets.reshape(B, -1),
                w,
                np.einsum("bkd,bd->bk", action_sets, w),
                np.sqrt(self.ridge.widths(action_sets)),
                clock,
            ]
        else:  # unreachable: reset() sets arms or ridge for the statistics features
            raise RuntimeError("HistoryFeatures: no statistics to read; call reset() first")
        return np.concatenate(parts, axis=1).astype(np.float32)


class BanditFeatureVecEnv(VecEnv):
    """B bandit runs with history features as a Stable-Baselines3 ``VecEnv`` (arrays, no Python loop).

    All runs last T steps and end together; the step that ends them resets every run to a new
    instance and reports ``terminal_observation`` and ``episode`` (return r, length l, regret) in
    the infos, as SB3's Monitor would.
    """

    def __init__(self, spec: BanditSpec, kind: str, num_envs: int, seed: int = 0) -> None:
        self.spec = spec
        self.features = HistoryFeatures(spec, kind, num_envs)
        obs_space = spaces.Box(-np.inf, np.inf, shape=(self.features.size,), dtype=np.float32)
        self.render_mode = None  # read by VecEnv.__init__
        super().__init__(num_envs, obs_space, spaces.Discrete(spec.num_actions))
        self.rng = np.random.default_rng(seed)
        self.batch: BanditBatch | None = None
        self._actions: np.ndarray | None = None
        self._return = np.zeros(num_envs)
        self._regret = np.zeros(num_envs)

    def reset(self) -> np.ndarray:
        """New instances for every run."""
        self.batch = BanditBatch(self.spec, self.num_envs, self.rng)
        self.features.reset(self.num_envs)
        self._return[:] = 0.0
        self._regret[:] = 0.0
        return self.features.features(self.batch.action_sets)

    def step_async(self, actions: np.ndarray) -> None:
        """Store the actions of the next step."""
        self._actions = np.asarray(actions).reshape(self.num_envs).astype(np.int64)

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict]]:
        """Pull the stored arms; reset every run at the end of the horizon."""
        if self.batch is None or self._actions is None:
            raise RuntimeError("call reset() and step_async() before step_wait()")
        action_sets = self.batch.action_sets
        out = self.batch.step(self._actions)
        self.features.update(action_sets, self._actions, out["reward"])
        self._return += out["reward"]
        self._regret += out["best_expected_reward"] - out["expected_reward"]
        obs = self.features.features(self.batch.action_sets)
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        done = self.batch.done
        if done:
            for i, info in enumerate(infos):
                info["terminal_observation"] = obs[i]
                info["episode"] = {"r": self._return[i], "l": self.spec.horizon, "regret": self._regret[i]}
            obs = self.reset()
        return obs, out["reward"].astype(np.float32), np.full(self.num_envs, done), infos

    def close(self) -> None:
        """Nothing to release."""

    def seed(self, seed: int | None = None) -> list[int | None]:
        """Reseed the instance generator."""
        self.rng = np.random.default_rng(seed)
        return [seed] * self.num_envs

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        """The attribute of the (shared) batch, once per selected run."""
        return [getattr(self, attr_name)] * len(self._selected(indices))

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        """Set an attribute of the shared batch."""
        setattr(self, attr_name, value)

    def env_method(self, method_name: str, *method_args: Any, indices: Any = None, **method_kwargs: Any) -> list:
        """Call a method of the shared batch once per selected run."""
        return [getattr(self, method_name)(*method_args, **method_kwargs) for _ in self._get_indices(indices)]

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: Any = None) -> list[bool]:
        """No Gymnasium wrappers are involved."""
        return [False] * len(self._selected(indices))

    def _selected(self, indices: Any) -> list[int]:
        """The runs that ``indices`` selects (every run for None), as a list."""
        return list(self._get_indices(indices))


@dataclass
class MetaRLConfig(DictConfig):
    """A meta-RL training run (saved with the exported policy)."""

    name: str = "bernoulli-ppo-statistics"
    """Name of the exported model."""
    env: dict[str, Any] = field(default_factory=lambda: BanditSpec().to_dict())
    """The environment prior (a :class:`BanditSpec` as a dict)."""
    algo: str = checked("ppo", Allowed(choices=ALGOS))
    """"ppo" (MLP policy) or "recurrent_ppo" (sb3-contrib's LSTM policy, RL^2)."""
    features: str = checked("statistics", Allowed(choices=FEATURES))
    """"statistics" or "prev_action_reward" (see the module docstring)."""
    wall_minutes: float = checked(20.0, POSITIVE)
    """Training stops after this wall-clock time ..."""
    max_env_steps: int = checked(50_000_000, POSITIVE_INT)
    """... or this many environment steps, whichever comes first."""
    num_envs: int = checked(64, POSITIVE_INT)
    """Parallel runs per rollout."""
    n_steps: int = checked(200, POSITIVE_INT)
    """Steps per run per rollout (T: one whole in-context run)."""
    batch_size: int = checked(3200, POSITIVE_INT)
    """PPO minibatch size."""
    n_epochs: int = checked(4, POSITIVE_INT)
    """PPO epochs per rollout."""
    learning_rate: float = checked(3e-4, POSITIVE)
    """Adam learning rate."""
    gamma: float = checked(0.99, Allowed(low=0, high=1))
    """Discount.  1 is the regret's own objective, but PPO's regret oscillated between 20 and 60
    with it on the Bernoulli bandit (measured, 2.5 min runs); 0.99 with the entropy bonus
    learned steadily (12 after 2.5 min)."""
    gae_lambda: float = checked(0.95, Allowed(low=0, high=1))
    """GAE lambda."""
    ent_coef: float = checked(0.01, NONNEGATIVE)
    """Entropy bonus (keeps the policy from committing to an arm too early)."""
    normalize_reward: bool = True
    """Divide rewards by a running standard deviation of the return (SB3's VecNormalize, training
    only): undiscounted returns of ~100 otherwise give value losses whose gradients swamp the policy's
    under PPO's gradient-norm clipping."""
    net_arch: list[int] = field(default_factory=lambda: [128, 128])
    """Hidden layers of the policy and value MLPs."""
    lstm_hidden_size: int = checked(128, POSITIVE_INT)
    """LSTM width (recurrent_ppo)."""
    seed: int = checked(0, NONNEGATIVE_INT)
    """Seed of the instances and of the policy."""
    threads: int = checked(1, POSITIVE_INT)
    """torch CPU threads."""
    device: str = checked("auto", DEVICE)
    """"auto" (CUDA when present), "cpu" or "cuda"."""

    def __post_init__(self) -> None:
        check_fields(self)
        if not self.net_arch or not all(POSITIVE_INT.admits(width) for width in self.net_arch):
            raise ValueError(f"MetaRLConfig.net_arch must be a non-empty list of integers >= 1, got {self.net_arch!r}")
        _ = self.spec  # the prior checks itself

    @property
    def spec(self) -> BanditSpec:
        """The prior."""
        return BanditSpec.from_dict(self.env)

    def policy_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of the SB3 policy."""
        kwargs: dict[str, Any] = {"net_arch": list(self.net_arch)}
        if self.algo == "recurrent_ppo":
            kwargs["lstm_hidden_size"] = self.lstm_hidden_size
        return kwargs


SB3_FIELDS = ("n_steps", "batch_size", "n_epochs", "learning_rate", "gamma", "gae_lambda", "ent_coef", "seed")
"""The :class:`MetaRLConfig` fields that SB3's PPO and RecurrentPPO take under the same names."""


class PlayOnlyOptimizer:
    """The optimizer of a policy rebuilt to play: it holds nothing and refuses to step.

    SB3 builds an optimizer with every policy.  Constructing a torch optimizer imports the compiler
    stack (``torch._dynamo`` and sympy: about 70 MB and 1.5 s per process), which a policy that only
    plays never uses.
    """

    def __init__(self, params: Any, **kwargs: Any) -> None:
        self.param_groups: list[dict[str, Any]] = []

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Nothing to clear."""

    def step(self, closure: Any = None) -> None:
        """Refuse: this policy was rebuilt to play, not to train."""
        raise RuntimeError("this policy was rebuilt to play (policy_from_weights); train one with build_algorithm")


def build_algorithm(cfg: MetaRLConfig, env: VecEnv, verbose: int = 0, play_only: bool = False) -> BaseAlgorithm:
    """The SB3 algorithm of ``cfg`` on ``env`` (fresh weights); ``play_only``: without an optimizer."""
    common: dict[str, Any] = {name: getattr(cfg, name) for name in SB3_FIELDS}
    kwargs = cfg.policy_kwargs() | ({"optimizer_class": PlayOnlyOptimizer} if play_only else {})
    common.update(policy_kwargs=kwargs, device=resolve_device(cfg.device), verbose=verbose)
    if cfg.algo == "recurrent_ppo":
        from sb3_contrib import RecurrentPPO

        return RecurrentPPO("MlpLstmPolicy", env, **common)
    from stable_baselines3 import PPO

    return PPO("MlpPolicy", env, **common)


def policy_from_weights(weights: dict[str, torch.Tensor], meta: dict[str, Any], device: str = "cpu") -> BaseAlgorithm:
    """Rebuild the SB3 algorithm of an exported policy from its record's ``meta_rl`` and load its weights (no pickle).

    A record or weights that do not fit raise ``KeyError``, ``ValueError`` or ``RuntimeError``; reading the
    file is :mod:`icrl_gym.checkpoint`'s (``load_checkpoint``) or
    :func:`~icrl_gym.models.meta_policy_file.load_policy`'s.
    """
    cfg = MetaRLConfig.from_dict({**meta["meta_rl"], "device": device})
    algo = build_algorithm(cfg, BanditFeatureVecEnv(cfg.spec, cfg.features, cfg.num_envs, seed=0), play_only=True)
    algo.policy.load_state_dict(weights, strict=True)
    algo.policy.set_training_mode(False)
    return algo


def policy_module(
    weights: dict[str, torch.Tensor], meta: dict[str, Any], device: torch.device | str = "cpu"
) -> torch.nn.Module:
    """The SB3 policy network of an exported meta-RL policy (the kind table's loader)."""
    return policy_from_weights(weights, meta, device=str(device)).policy
