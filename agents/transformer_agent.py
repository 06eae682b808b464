"""The pretrained in-context transformer as an algorithm (Section 2, Eq. (2)).

Alg_theta(. | D_{t-1}, s_t) = softmax(read-out of TF_theta at the state token of step t).  Online,
the agent feeds one step at a time into the model's key/value cache, so step t costs O(t)
instead of re-running the whole prefix.  ``greedy=False`` samples from the policy (the
paper's deployment); ``greedy=True`` takes its argmax.

:class:`TransformerRollout` is that cached rollout, written once for both models; an agent adds only
the adapter from its decoded observation to the model's ``step`` input: :class:`TransformerAgent`
(bandits, a :class:`~icrl_gym.models.transformer.BanditTransformer`) here, and
:class:`~agents.mdp_transformer_agent.MDPTransformerAgent` (tabular MDPs).

Shipped checkpoints live in ``icrl_gym/pretrained`` (see :func:`icrl_gym.checkpoint.pretrained_names`)
and load by name::

    agent = TransformerAgent.pretrained("bernoulli-dpt-ts-uniform")
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch

from agents.checkpoint_agent import CheckpointAgent
from icrl_gym.algorithm import BanditAgent, ObsT, logits_action, softmax_rows
from icrl_gym.checkpoint import (
    PRETRAINED_DIR,
    CheckpointKind,
    CheckpointRecord,
    load_checkpoint,
    pretrained_names,
    read_record,
    resolve_checkpoint,
)
from icrl_gym.device import resolve_device
from icrl_gym.models.mdp_transformer import MDPTransformer
from icrl_gym.models.transformer import BanditTransformer, KVCache
from icrl_gym.registry import make_agent

_SIZES = ("dim", "num_states", "num_actions", "horizon", "episodes")

RolloutT = TypeVar("RolloutT", bound="TransformerRollout[Any]")

_GENERALIST_KINDS = (CheckpointKind.GENERALIST_TRANSFORMER, CheckpointKind.LINEAR_GENERALIST_TRANSFORMER)
"""Kinds of the generalist bandit transformers, which ``TransformerAgent.pretrained`` hands to their own agents."""


class TransformerRollout(CheckpointAgent[ObsT]):
    """Batched online rollout of a pretrained transformer through its key/value cache.

    Subclasses name the checkpoint ``kind`` they play and implement :meth:`_model_input` (the
    decoded observation as the model's ``step`` input) and :meth:`_max_steps`; their batched hooks
    call :meth:`_rollout_policy`, :meth:`_rollout_act` and :meth:`_rollout_update`.
    """

    kind: ClassVar[CheckpointKind]
    """The kind of checkpoint this agent plays."""

    def __init__(self, checkpoint: str | Path, greedy: bool = False, device: str = "cpu", seed: int | None = None):
        super().__init__(seed)
        path = resolve_checkpoint(checkpoint)
        read_record(path).expect(self.kind, name=str(checkpoint))
        model, meta = load_checkpoint(path, device=resolve_device(device))
        self._setup(model, meta, str(checkpoint), greedy)

    def _setup(
        self, model: BanditTransformer | MDPTransformer, meta: dict[str, Any], checkpoint: str, greedy: bool
    ) -> None:
        self.checkpoint, self.model, self.meta = checkpoint, model, meta
        config = model.config.to_dict()
        sizes = {k: config[k] for k in _SIZES if k in config}  # an in-memory model: its own sizes
        self.record = CheckpointRecord(self.kind, {"model": config, "env": sizes, **meta})
        self.device = next(model.parameters()).device
        self.greedy = bool(greedy)
        self.deterministic = self.greedy
        self._cache: KVCache | None = None
        self._logits: np.ndarray | None = None
        self._prev: tuple[torch.Tensor, torch.Tensor] | None = None

    @classmethod
    def from_model(
        cls: type[RolloutT],
        model: BanditTransformer | MDPTransformer,
        meta: dict[str, Any] | None = None,
        greedy: bool = False,
        seed: Any = None,
    ) -> RolloutT:
        """Wrap an in-memory model (e.g. one being fine-tuned) without reading a checkpoint."""
        agent = cls.__new__(cls)
        CheckpointAgent.__init__(agent, seed)
        agent._setup(model, meta or {}, "<in-memory model>", greedy)
        return agent

    @classmethod
    def pretrained(cls: type[RolloutT], name: str, **kwargs: Any) -> RolloutT:
        """Load a checkpoint shipped with the package by name (see :func:`pretrained_names`).

        The generalist bandit transformers (any number of arms, any horizon; issue 16) load here too:
        ``TransformerAgent.pretrained("bernoulli-generalist")`` returns the agent registered for the
        checkpoint's kind (``kwargs`` go to it, e.g. ``greedy``), and so does ``"linear-generalist"``
        (agent ``"linear_generalist"``).
        """
        if cls.kind is CheckpointKind.BANDIT_TRANSFORMER and name in pretrained_names():
            kind = read_record(PRETRAINED_DIR / name).kind
            if kind in _GENERALIST_KINDS:
                return make_agent({"name": kind.agent, "checkpoint": name, **kwargs})  # type: ignore[return-value]
        shipped = pretrained_names(cls.kind)
        if name not in shipped:
            raise ValueError(f"no pretrained {cls.kind.value} {name!r}; shipped models: {shipped}")
        return cls(PRETRAINED_DIR / name, **kwargs)

    # ------------------------------------------------------------------ the per-model adapter
    def _model_input(self, observation: ObsT) -> torch.Tensor:
        """The decoded observation as the first argument of the model's ``step``."""
        raise NotImplementedError

    def _max_steps(self) -> int:
        """The number of steps the model's cache holds (from the model configuration in the record)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ the cached rollout
    def _start(self, info: dict[str, Any]) -> None:
        super()._start(info)  # checks the environment, sizes the runs
        if self._cache is not None and self._cache.batch_size == self.batch_size:
            self._cache.reset()  # keep the buffers: a fresh cache costs page faults on every episode
        else:
            self._cache = self.model.new_cache(self.batch_size, device=self.device)
        self._logits, self._prev = None, None

    def _step_logits(self, observation: ObsT) -> np.ndarray:
        """Logits (B, A) of the policy at the current step, computed once per step (cached)."""
        if self._logits is None:
            if self._cache is None:
                raise RuntimeError(f"{type(self).__name__}: call reset() before act()/policy()")
            if self._cache.steps >= self._max_steps():
                raise ValueError(
                    f"model {self.checkpoint!r} was built for T={self._max_steps()} steps; "
                    f"it cannot act at step {self._cache.steps + 1}"
                )
            prev_a, prev_r = self._prev if self._prev is not None else (None, None)
            out = self.model.step(self._model_input(observation), prev_a, prev_r, self._cache)
            self._logits = out.logits.double().cpu().numpy()
        return self._logits

    def _rollout_policy(self, observation: ObsT) -> np.ndarray:
        return softmax_rows(self._step_logits(observation))

    def _rollout_act(self, observation: ObsT) -> np.ndarray:
        return logits_action(self._step_logits(observation), self.greedy, self.rng)

    def _rollout_update(self, observation: ObsT, actions: np.ndarray, rewards: np.ndarray) -> None:
        if self._logits is None:  # the step's tokens must be in the cache before its outcome
            self._step_logits(observation)
        self._prev = (
            torch.as_tensor(np.asarray(actions, dtype=np.int64), device=self.device),
            torch.as_tensor(np.asarray(rewards, dtype=np.float32), device=self.device),
        )
        self._logits = None


class TransformerAgent(TransformerRollout[np.ndarray], BanditAgent):
    """Batched online rollout of a :class:`icrl_gym.models.transformer.BanditTransformer`."""

    name = "transformer"
    kind = CheckpointKind.BANDIT_TRANSFORMER

    def _model_input(self, observation: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(np.asarray(observation, dtype=np.float32).copy(), device=self.device)

    def _max_steps(self) -> int:
        return int(self.record.meta["model"]["horizon"])

    def _policy(self, action_sets: np.ndarray) -> np.ndarray:
        return self._rollout_policy(action_sets)

    def _act(self, action_sets: np.ndarray) -> np.ndarray:
        return self._rollout_act(action_sets)

    def _update(self, action_sets: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        self._rollout_update(action_sets, actions, rewards)
