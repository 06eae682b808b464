"""The linear generalist (a :class:`~icrl_gym.models.linear_generalist.LinearGeneralistTransformer`): any d, A, T.

The model reads the raw trajectory (the action sets, the arms pulled, the rewards) through its
cache -- the linear attention's state, O(1) per step whatever t -- and scores the A arms of the
current action set.  It needs the horizon T (:func:`~icrl_gym.algorithm.resolve_horizon`) and the
noise level sigma of the environment, read from the reset info or its ``info["model"]`` (each
instance's own where the environment draws them, ``info["model"]["instance"]``), or given to the
constructor / ``reset`` (``horizon=``, ``noise_std=``); d and A come from the action sets.  Where sigma
is not stated (no ``noise_std``, or an environment that marks it unknown, ``noise_known=False``) the model
estimates it in context (a model trained with sigma always given reads the estimate as if it were given).
``greedy=True`` (default; the model imitates a deterministic index policy) takes the argmax.  The
shipped model was trained on Gaussian rewards, w* ~ U[0, 1]^d, d in 2..8, A in 2..20, T <= 500,
sigma in [0.4, 2.5] (its record's ``trained_range``); it refuses d > d_max and Bernoulli bandits
with a ``ValueError`` (a second-version model, ``features="posterior"``, plays d > d_max on a fixed action
set as an A-armed bandit), and plays any A and T and one-hot arms (the Gaussian multi-armed bandit;
outside the trained range, an out-of-distribution use).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.learned.rollout import BanditRollout
from icrl_gym.algorithm import resolve_horizon
from icrl_gym.checkpoint import CheckpointKind
from icrl_gym.envs.validation import check_number
from icrl_gym.models.policy import EnvInfo


class LinearGeneralistAgent(BanditRollout):
    """Batched online rollout of a :class:`~icrl_gym.models.linear_generalist.LinearGeneralistTransformer`."""

    name = "linear_generalist"
    kind = CheckpointKind.LINEAR_GENERALIST_TRANSFORMER
    greedy_default = True
    default_fields = ("horizon", "noise_std")

    def trained_prior(self) -> tuple[float, float] | None:
        """(mean, variance) of every coordinate of w* under the training prior its record names (None: unnamed).

        U[lo, hi]^d gives ((lo + hi) / 2, (hi - lo)^2 / 12), a Gaussian N(m, v I) gives (m, v): the anchor of
        the :class:`~agents.safety_net.SafetyNet` around this model.
        """
        env = self.record.meta.get("env", {})
        if env.get("prior") == "uniform":
            low, high = float(env.get("prior_low", 0.0)), float(env.get("prior_high", 1.0))
            return 0.5 * (low + high), (high - low) ** 2 / 12.0
        if env.get("prior") == "gaussian":
            return float(env.get("prior_mean", 0.0)), float(env.get("prior_var", 1.0))
        return None

    def _noise_known(self, info: dict[str, Any]) -> bool:
        """False for an environment that marks its sigma unknown (and no sigma given to ``reset``)."""
        spec = None if self.env_model is None else self.env_model.bandit
        return "noise_std" in info or spec is None or spec.noise_known

    def _per_run_noise(self, info: dict[str, Any]) -> np.ndarray | None:
        """The noise level sigma (B,) of an environment that draws it per instance (None otherwise)."""
        instance = (None if self.env_model is None else self.env_model.instance) or {}
        if "noise_std" in info or "noise_std" not in instance or not self._noise_known(info):
            return None
        return np.broadcast_to(
            np.asarray(instance["noise_std"], dtype=np.float64).reshape(-1), (self.batch_size,)
        ).copy()

    def _env_info(self, info: dict[str, Any]) -> EnvInfo:
        """T, d, A and sigma: the environment's, or each instance's own (``run_noise_std``), absent where unknown.

        Called after the base's checks at reset (which refuse Bernoulli rewards: the record's reward).
        """
        d_max = int(self.record.meta["model"]["d_max"])
        if self.dim > d_max and self.record.meta["model"].get("features", "moments") != "posterior":
            raise ValueError(f"the linear generalist plays d <= {d_max}, this bandit has d={self.dim}")
        horizon = resolve_horizon(info, self.defaults.get("horizon"), "the linear generalist transformer")
        spec = None if self.env_model is None else self.env_model.bandit
        noise = info.get("noise_std", self.defaults.get("noise_std") if spec is None else spec.noise_std)
        per_run = self._per_run_noise(info)
        if not self._noise_known(info) or per_run is not None:
            noise = None  # unknown (estimated in context), or given per run
        sigma = None if noise is None else check_number("noise_std", noise, low=0.0, strict=True, max_abs=1e6)
        run_noise = None if per_run is None else tuple(per_run.tolist())
        return EnvInfo(
            num_actions=self.num_actions, horizon=horizon, dim=self.dim, noise_std=sigma, run_noise_std=run_noise
        )
