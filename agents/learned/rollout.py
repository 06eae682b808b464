"""The one rollout of a learned policy: any :class:`~icrl_gym.models.policy.InContextPolicy` as an algorithm.

Alg_theta(. | D_{t-1}, s_t) = softmax of the model's logits at step t (Section 2, Eq. (2)).  Online,
the agent feeds one step at a time into the model's cache (``model.step(cache, observation,
prev_action, prev_reward)``), so step t costs at most O(t) instead of re-running the whole prefix.
``greedy=False`` samples from the policy (the paper's deployment); ``greedy=True`` takes its argmax.

:class:`PolicyRollout` is written once for every model; a model's agent is an adapter that says
which checkpoint kind it plays, what it is told of the environment (:meth:`PolicyRollout._env_info`)
and how a decoded observation becomes the model's ``observation`` tensor
(:meth:`PolicyRollout._model_input`).  Every learned agent is checked against the environment at
reset (:func:`~icrl_gym.checkpoint.check_compatible`), refuses to act beyond the horizon it was reset
for, and refuses to act on non-finite scores (in ``act`` as in ``policy``) instead of passing on an
arbitrary arm.

One model step is one decision: ``act`` / ``policy`` at step t append the previous outcome and the
observation s_t to the cache, and the logits are kept until ``update``.  A second ``act`` or
``policy`` before ``update`` reuses them when the model reads the same input (``policy`` then
``act`` at one observation, the usual pair).  At another observation (other arms, another state)
it answers for that one, as an agent given it first would: the cache takes the step back
(:class:`~icrl_gym.models.policy.RewindableCache`, which every shipped model's cache is: O(1) for a
key/value cache, the step's own counts for the generalists) and the model steps again, so the cache
holds each step once.  A cache that cannot take a step back refuses the second observation with a
``RuntimeError`` instead of answering for the first.  A model that reads the step h from its own
step count (the MDP models) refuses an observation at another h than the run's (a stale state after
``update``) with a ``ValueError``, since it would answer for the wrong step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, TypeVar, cast

import numpy as np
import torch

from agents.learned.checkpoint_agent import CheckpointAgent
from icrl_gym.algorithm import BanditAgent, ObsT, logits_action, softmax_rows
from icrl_gym.checkpoint import (
    SIZE_FIELDS,
    CheckpointError,
    CheckpointKind,
    CheckpointRecord,
    find_checkpoint,
    load_checkpoint,
)
from icrl_gym.models.policy import EnvInfo, InContextPolicy, PolicyCache, RewindableCache
from icrl_gym.utils.device import resolve_device
from icrl_gym.utils.names import did_you_mean

RolloutT = TypeVar("RolloutT", bound="PolicyRollout[Any]")


class PolicyRollout(CheckpointAgent[ObsT]):
    """Batched online rollout of an in-context model through its cache (see the module docstring).

    ``defaults``: the adapter's own keywords, among :attr:`default_fields`: fallbacks for what the
    environment may not state (e.g. ``horizon=`` for a bandit played without an environment; the
    environment's values win), or settings of how it acts (the MDP generalist's exploring schedule).  A record may
    carry its own (:func:`~icrl_gym.checkpoint.set_play`, e.g. the Bernoulli family model's ``fresh_arm_floor``):
    they are the agent's defaults, and the keywords given here override them.
    """

    kind: ClassVar[CheckpointKind]
    """The kind of checkpoint this agent plays."""
    greedy_default: ClassVar[bool] = False
    """Whether the agent takes the argmax unless told otherwise (models that imitate an argmax expert)."""
    default_fields: ClassVar[tuple[str, ...]] = ()
    """The adapter's own constructor keywords (environment fallbacks, also ``reset`` keywords; deployment settings)."""

    def __init__(
        self,
        checkpoint: str | Path,
        greedy: bool | None = None,
        device: str = "cpu",
        seed: int | None = None,
        **defaults: Any,
    ) -> None:
        super().__init__(seed)
        model, meta = load_checkpoint(find_checkpoint(checkpoint), device=resolve_device(device), kind=self.kind)
        self._setup(model, meta, str(checkpoint), greedy, defaults)

    def _setup(
        self, model: InContextPolicy, meta: dict[str, Any], checkpoint: str, greedy: bool | None, defaults: dict
    ) -> None:
        unknown = sorted(set(defaults) - set(self.default_fields))
        if unknown:
            known = ("greedy", "device", "seed", "safety_net", *self.default_fields)
            named = "; ".join(f"{key!r}{did_you_mean(key, known)}" for key in unknown)
            raise TypeError(
                f"{type(self).__name__} takes no parameter {named}; it takes greedy, device, seed and the defaults "
                f"{', '.join(self.default_fields)} (and pretrained() takes safety_net)"
            )
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"{type(self).__name__} plays a torch model, got {type(model).__name__}")
        recommended = CheckpointRecord(self.kind, meta).play
        foreign = sorted(set(recommended) - set(self.default_fields))
        if foreign:
            raise CheckpointError(
                f"{checkpoint}'s record asks its agent to play with {', '.join(map(repr, foreign))}, which "
                f"{type(self).__name__} does not take (its defaults: {', '.join(self.default_fields) or 'none'})"
            )
        self.checkpoint, self.model, self.meta = checkpoint, model, meta
        config = model.config.to_dict()
        sizes = {k: config[k] for k in SIZE_FIELDS if k in config}
        self.record = CheckpointRecord(self.kind, {"model": config, "env": sizes, **meta})
        self.device = next(model.parameters()).device
        self.greedy = self.greedy_default if greedy is None else bool(greedy)
        self.deterministic = self.greedy
        self.given = {k: v for k, v in defaults.items() if v is not None}  # the caller's keywords, not the record's
        self.defaults = {**recommended, **self.given}
        self.env_info: EnvInfo | None = None
        """What the model was told of the environment at the last reset."""
        self._cache: PolicyCache | None = None
        self._decided = 0
        """Steps decided since the last reset (the model's step calls)."""
        self._logits: np.ndarray | None = None
        self._logits_input: torch.Tensor | None = None
        """The model input the current step's logits were computed at (a second call at another is recomputed)."""
        self._mark: Any = None
        """The cache before the current step (:class:`RewindableCache`), None where it cannot take a step back."""
        self._rewindable = False
        """Whether the cache can take a step back (set at reset)."""
        self._prev: tuple[torch.Tensor, torch.Tensor] | None = None

    @classmethod
    def from_model(
        cls: type[RolloutT],
        model: InContextPolicy,
        meta: dict[str, Any] | None = None,
        greedy: bool | None = None,
        seed: Any = None,
        **defaults: Any,
    ) -> RolloutT:
        """Wrap an in-memory model (e.g. one being trained or fine-tuned) without reading a checkpoint."""
        agent = cls.__new__(cls)
        CheckpointAgent.__init__(agent, seed)
        agent._setup(model, meta or {}, "<in-memory model>", greedy, defaults)
        return agent

    @classmethod
    def pretrained(cls, name: str, **kwargs: Any) -> PolicyRollout[Any]:
        """The agent of any in-context model shipped with the package, by name (see :func:`agents.pretrained`).

        Works from any learned agent's class, for every transformer kind (a shipped MDP transformer
        from ``TransformerAgent.pretrained`` too); ``kwargs`` go to the agent (e.g. ``greedy``).
        """
        from agents.learned import pretrained  # the entry point reads the kind table

        agent = pretrained(name, **kwargs)
        if not isinstance(agent, PolicyRollout):
            raise ValueError(f"{name!r} is a {type(agent).__name__}, not an in-context model: use agents.pretrained")
        return agent

    def config(self) -> dict[str, Any]:
        """The checkpoint, the deployment mode and the constructor fallbacks."""
        return {**super().config(), **self.defaults}

    # ------------------------------------------------------------------ the per-model adapter
    def _env_info(self, info: dict[str, Any]) -> EnvInfo:
        """What the model is told of the runs (called after the runs are sized from ``info``).

        The environment's values come first; :attr:`defaults` (the constructor's) are the fallback.
        """
        raise NotImplementedError

    def _model_input(self, observation: ObsT) -> torch.Tensor:
        """The decoded observation as the ``observation`` argument of the model's ``step``."""
        raise NotImplementedError

    def _check_step(self, observation: ObsT, step: int) -> None:
        """Refuse an observation that cannot be the run's step ``step`` (0-based); any, by default.

        An adapter whose observation names its own step (an MDP's h) checks it against the model's.
        """

    # ------------------------------------------------------------------ the cached rollout
    def _start(self, info: dict[str, Any]) -> None:
        super()._start(info)  # checks the environment, sizes the runs
        env_info = self._env_info(info)
        if self._cache is not None and self._cache.batch_size == self.batch_size and env_info == self.env_info:
            self._cache.reset()  # keep the buffers: a fresh cache costs page faults on every episode
        else:
            self._cache = self.model.new_cache(self.batch_size, env_info, self.device)
        self.env_info = env_info
        self._rewindable = isinstance(self._cache, RewindableCache)  # once per reset: a protocol check is slow
        self._logits, self._logits_input, self._mark, self._prev, self._decided = None, None, None, None, 0

    def _step_logits(self, observation: ObsT) -> np.ndarray:
        """Logits (B, A) of the policy at the current step, computed once per step and checked finite.

        A second call before ``update`` reuses them at the same model input, and at another one takes
        the step back and computes it again (module docstring): the cache holds every step once.
        """
        if self._logits is not None:
            if self._same_input(observation):
                return self._logits
            self._take_back_step()
        if self._cache is None or self.env_info is None:
            raise RuntimeError(f"{type(self).__name__}: call reset() before act()/policy()")
        if self._decided >= self.env_info.steps:
            raise ValueError(
                f"the runs were reset for T={self.env_info.steps} steps; model {self.checkpoint!r} "
                f"cannot act at step {self._decided + 1} (reset for new runs)"
            )
        self._check_step(observation, self._decided)
        model_input = self._model_input(observation)
        prev_a, prev_r = self._prev if self._prev is not None else (None, None)
        mark = cast(RewindableCache, self._cache).mark() if self._rewindable else None
        out = self.model.step(self._cache, model_input, prev_a, prev_r)
        logits = out.logits.double().cpu().numpy()
        finite = np.isfinite(logits).all(axis=1)
        if not finite.all():
            row = int(np.argmin(finite))
            raise ValueError(
                f"model {self.checkpoint!r} computed non-finite scores for run {row} at step "
                f"{self._decided + 1}: {logits[row].tolist()} (inputs outside what it can compute with, "
                f"e.g. {self.env_info})"
            )
        self._logits, self._logits_input, self._mark = logits, model_input, mark
        self._decided += 1
        return self._logits

    def _same_input(self, observation: ObsT) -> bool:
        """Whether ``observation`` is, for the model, the input the current step was computed at.

        Checked as at the first call (an observation at another step, or one the model cannot read,
        is refused), then compared exactly: the same input gives the same logits.
        """
        self._check_step(observation, self._decided - 1)
        model_input = self._model_input(observation)
        return self._logits_input is None or torch.equal(self._logits_input, model_input)

    def _take_back_step(self) -> None:
        """Undo the current step in the cache (to compute it at another observation); refused where it cannot be."""
        if self._mark is None or not isinstance(self._cache, RewindableCache):
            raise RuntimeError(
                f"{type(self).__name__} ({self.checkpoint!r}): act()/policy() already ran at step {self._decided} on "
                "another observation, and this model's cache cannot take a step back; call update() with the outcome "
                "of that action before act()/policy() on a new observation (one act, then update, per step)"
            )
        self._cache.rewind(self._mark)
        self._logits, self._logits_input, self._mark = None, None, None
        self._decided -= 1

    def _rollout_policy(self, observation: ObsT) -> np.ndarray:
        return softmax_rows(self._step_logits(observation))

    def _rollout_act(self, observation: ObsT) -> np.ndarray:
        logits = self._step_logits(observation)  # counts the step: the temperature may depend on it
        return logits_action(logits, self._temperature(), self.rng)

    def _temperature(self) -> float:
        """The temperature of the current step's draw: 0 (the argmax) when greedy, else 1 (the policy itself).

        An adapter may schedule it (e.g. over the steps left, :attr:`_decided` of ``env_info.steps``).
        """
        return 0.0 if self.greedy else 1.0

    def _rollout_update(self, observation: ObsT, actions: np.ndarray, rewards: np.ndarray) -> None:
        if self._logits is None:  # the step's tokens must be in the cache before its outcome
            self._step_logits(observation)
        self._prev = (
            torch.as_tensor(np.asarray(actions, dtype=np.int64), device=self.device),
            torch.as_tensor(np.asarray(rewards, dtype=np.float32), device=self.device),
        )
        self._logits, self._logits_input, self._mark = None, None, None


class BanditRollout(PolicyRollout[np.ndarray], BanditAgent):
    """A learned bandit agent: the action sets (B, A, d) are the observation; the bandit hooks map onto the rollout."""

    def _model_input(self, observation: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(np.asarray(observation, dtype=np.float32).copy(), device=self.device)

    def _policy(self, action_sets: np.ndarray) -> np.ndarray:
        return self._rollout_policy(action_sets)

    def _act(self, action_sets: np.ndarray) -> np.ndarray:
        return self._rollout_act(action_sets)

    def _update(self, action_sets: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        self._rollout_update(action_sets, actions, rewards)
