"""The Bernoulli generalist (:class:`~icrl_gym.models.generalist.GeneralistTransformer`) as an algorithm: any K and T.

The model reads the raw trajectory through its cache and scores the K arms at step t from the
horizon features of step t; K comes from the runs' action sets and T from the environment
(:func:`~icrl_gym.algorithm.resolve_horizon`: the reset info, its model, then the constructor's
``horizon=``).  ``greedy=True`` (default; the model imitates the deterministic Gittins policy) takes
the argmax, ``greedy=False`` samples from softmax(logits).

``fresh_arm_floor=True`` never tries fewer fresh arms than the finite-horizon Gittins index told U[0, 1]: where that
index's choice is an arm not pulled yet (the first such arm, its ties going to the first arm) and the model's greedy
choice is an arm already pulled, the untried arm is played (its logit is raised 50 over the others, so greedy and
sampled play both take it).  A model that reads the prior from the arms it tried first can read a low prior from
low first arms and stop trying arms too early; on arms that come in an order (the generalization grid's reversed
set: ten low arms first, then ten high ones) this keeps it trying as a policy assuming nothing about the prior does.
The rule adds pulls only of untried arms and only while the U[0, 1] index wants one, so on a bandit whose arms are
all low it costs at most the index's own tries of fresh arms.  Where that index pulls an untried arm is read from
thresholds derived from its table (:mod:`icrl_gym.estimators.fresh_arm`; shipped for T <= 1,000, so no table is
built).  ``bernoulli-generalist-family``'s record asks for the floor (:func:`~icrl_gym.checkpoint.set_play`), so
its agent plays with it unless given ``fresh_arm_floor=False``; beyond T = 1,000 a floor that only the record asks
for is left out (a warning says so), since its table would take more than 5 GiB, and ``fresh_arm_floor=True`` builds
it (refused above the memory limit).

It was trained on Bernoulli arms (one-hot action sets, rewards in {0, 1}) only: it refuses a linear
bandit (non-one-hot arms, Gaussian rewards) with a ``ValueError``, at reset when the environment
states its model (the rollout's :func:`~icrl_gym.checkpoint.check_compatible`), else at the first
action.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch

from agents.learned.rollout import BanditRollout
from icrl_gym.agent_base import TIE_TOLERANCE, first_argmax
from icrl_gym.algorithm import resolve_horizon
from icrl_gym.checkpoint import CheckpointKind
from icrl_gym.estimators.fresh_arm import SHIPPED_HORIZON, FreshArmRule, fresh_arm_rule
from icrl_gym.estimators.gittins import gittins_build_bytes
from icrl_gym.models.generalist import GeneralistCache
from icrl_gym.models.policy import EnvInfo

FLOOR_MARGIN = 50.0
"""How far ``fresh_arm_floor`` raises the untried arm's logit over the largest (softmax weight e^-50 elsewhere)."""


class GeneralistAgent(BanditRollout):
    """Batched online rollout of a :class:`~icrl_gym.models.generalist.GeneralistTransformer` on Bernoulli bandits."""

    name = "generalist"
    kind = CheckpointKind.GENERALIST_TRANSFORMER
    greedy_default = True
    default_fields = ("horizon", "fresh_arm_floor")
    binary_rewards = True
    _floor_rule: FreshArmRule | None = None
    """With ``fresh_arm_floor``: where the Gittins index told U[0, 1] pulls an untried arm, looked up once per reset."""

    def _env_info(self, info: dict[str, Any]) -> EnvInfo:
        horizon = resolve_horizon(info, self.defaults.get("horizon"), "the generalist transformer")
        return EnvInfo(num_actions=self.num_actions, horizon=horizon, dim=self.dim)

    def _start(self, info: dict[str, Any]) -> None:
        super()._start(info)
        self._floor_rule = None
        if not self.defaults.get("fresh_arm_floor") or self.env_info is None:
            return
        horizon = self.env_info.horizon
        if horizon > SHIPPED_HORIZON and "fresh_arm_floor" not in self.given:
            warnings.warn(
                f"{self.checkpoint} plays without its record's fresh-arm floor at T = {horizon}: the floor's "
                f"thresholds ship for T <= {SHIPPED_HORIZON} (fresh_arm_floor=True builds them, "
                f"{gittins_build_bytes(horizon) / 2**30:.1f} GiB)",
                RuntimeWarning,
                stacklevel=2,
            )
            return
        self._floor_rule = fresh_arm_rule(horizon, self.max_memory_gib)

    def _step_logits(self, observation: np.ndarray) -> np.ndarray:
        """The model's logits, with ``fresh_arm_floor`` the untried arm raised where the rule plays it (module doc)."""
        logits = super()._step_logits(observation)
        cache, rule = self._cache, self._floor_rule
        if rule is None:
            return logits
        if not isinstance(cache, GeneralistCache) or not cache.grouped or self.env_info is None:
            raise ValueError("fresh_arm_floor reads the counts of a Bernoulli run's grouped cache")
        counts = cache.counts.cpu().numpy().astype(np.int64)  # (B, K, 2): failures, successes
        return fresh_arm_floor(logits, counts[..., 1], counts[..., 0], rule, self.env_info.horizon - cache.steps)

    def _model_input(self, observation: np.ndarray) -> torch.Tensor:
        eye = np.eye(self.num_actions, self.dim)
        if self.dim != self.num_actions or not np.array_equal(observation, np.broadcast_to(eye, observation.shape)):
            raise ValueError("the generalist transformer plays one-hot arms e_1..e_K only (not a linear bandit)")
        return super()._model_input(observation)


def fresh_arm_floor(
    logits: np.ndarray, successes: np.ndarray, failures: np.ndarray, rule: FreshArmRule, steps_left: int
) -> np.ndarray:
    """The floor of ``fresh_arm_floor`` (module docstring) on logits (B, K), in place, and returned.

    ``successes``, ``failures`` (B, K) are the runs' counts, ``rule`` the thresholds of the Gittins index told
    U[0, 1] and ``steps_left`` the pulls left, T - t.  Where G(s, f, T - t)'s first maximiser is an untried arm
    (:meth:`~icrl_gym.estimators.fresh_arm.FreshArmRule.first_untried`) and the logits' greedy choice (ties within
    :data:`~icrl_gym.agent_base.TIE_TOLERANCE` to the first) a tried one, that untried arm's logit becomes the largest
    plus :data:`FLOOR_MARGIN`.
    """
    fresh = rule.floor(successes, failures, steps_left, first_argmax(logits, TIE_TOLERANCE))
    floor = fresh >= 0
    logits[floor, fresh[floor]] = logits[floor].max(axis=1) + FLOOR_MARGIN
    return logits
