"""The linear generalist (a :class:`~icrl_gym.models.linear_generalist.LinearGeneralistTransformer`): any d, A, T.

The model reads the raw trajectory (the action sets, the arms pulled, the rewards) through its
cache -- the linear attention's state, O(1) per step whatever t -- and scores the A arms of the
current action set.  It needs the horizon T (:func:`~icrl_gym.algorithm.resolve_horizon`) and the
noise level sigma of the environment, read from the reset info or its ``info["model"]``, or given
to the constructor / ``reset`` (``horizon=``, ``noise_std=``); d and A come from the action sets.
``greedy=True`` (default; the model imitates a deterministic index policy) takes the argmax.  The
shipped model was trained on Gaussian rewards, w* ~ U[0, 1]^d, d in 2..8, A in 2..20, T <= 500,
sigma in [0.4, 2.5] (its record's ``trained_range``); it refuses d > 8 and Bernoulli (one-hot)
bandits with a ``ValueError``, and plays any A and T (outside the trained range, an
out-of-distribution use).
"""

from __future__ import annotations

from typing import Any

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

    def _start(self, info: dict[str, Any]) -> None:
        model = info.get("model") or {}
        if model.get("reward", "gaussian") != "gaussian" or model.get("arms") == "one_hot":
            raise ValueError(
                "the linear generalist transformer plays linear bandits with Gaussian rewards only; this environment "
                f"has reward={model.get('reward')!r}, arms={model.get('arms')!r}"
            )
        super()._start(info)

    def _env_info(self, info: dict[str, Any]) -> EnvInfo:
        d_max = int(self.record.meta["model"]["d_max"])
        if self.dim > d_max:
            raise ValueError(f"the linear generalist plays d <= {d_max}, this bandit has d={self.dim}")
        horizon = resolve_horizon(info, self.defaults.get("horizon"), "the linear generalist transformer")
        model = info.get("model") or {}
        noise = info.get("noise_std", model.get("noise_std", self.defaults.get("noise_std")))
        if noise is None:
            raise ValueError(
                "the linear generalist transformer needs the noise level sigma: reset with the environment's info "
                "(info['model']) or pass noise_std= to reset or to its constructor"
            )
        sigma = check_number("noise_std", noise, low=0.0, strict=True, max_abs=1e6)
        return EnvInfo(num_actions=self.num_actions, horizon=horizon, dim=self.dim, noise_std=sigma)
