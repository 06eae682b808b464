"""The collection loop, written once for bandits and MDPs: run Alg_0, label every step, record.

Section 3 of the paper: the context algorithm Alg_0 acts on N fresh instances
for T steps; at every step an expert labels it (:mod:`icrl_gym.data.labels`).  Per batch of the
common-random-numbers loop (:mod:`icrl_gym.data.crn`) and per step t, in this order:

1. the environment shows the observation o_t (action sets; or state and step h);
2. the soft label and index values are read from the labeller (Alg_0 for AD, the expert for
   "expert", the posterior for Rao-Blackwellised DPT) before anyone acts;
3. Alg_0 acts, a_t; the expert proposes its own action (label "expert");
4. the environment steps; Alg_0, the expert and the posterior all see (o_t, a_t, r_t);
5. the label is a_t (AD) or the instance's optimal action at o_t (DPT).

Approximate-DPT labels are computed after the batch, from the whole trajectory.  What differs
between environments (drawing instances, observations, the arrays recorded) sits behind
:class:`Recorder`; :mod:`icrl_gym.data.trajectories` and :mod:`icrl_gym.data.mdp_rollout`
implement it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypedDict, TypeVar

import numpy as np

from icrl_gym.algorithm import Agent, BanditAgent, MDPAgent
from icrl_gym.data.crn import CRNBatch, crn_batches
from icrl_gym.data.labels import AgentSpec, Labelling, LabelMode
from icrl_gym.registry import make_agent
from icrl_gym.utils.progress import progress_bar

Algorithm = BanditAgent | MDPAgent
DataT = TypeVar("DataT", covariant=True)


@dataclass
class Step:
    """What the environment answers to one batch of actions (the recorder has recorded it)."""

    feedback: tuple[Any, ...]
    """The arguments of ``update_batch`` after (observation, actions): (rewards,) or (rewards, next states)."""
    optimal_action: np.ndarray
    """The instance's optimal action at the observation, (B,) (the DPT label)."""


@dataclass
class Labels:
    """The label arrays of N runs of T steps with A actions (those the labelling asks for)."""

    labels: np.ndarray | None
    """a-bar_t, (N, T) int16."""
    probs: np.ndarray | None
    """Soft labels, (N, T, A) float16."""
    values: np.ndarray | None
    """The labeller's per-arm index, (N, T, A) float32."""


class Recorder(Protocol[DataT]):
    """One environment kind's side of collection: instances, observations, steps and its arrays."""

    num_steps: int
    """Steps T of one run."""
    num_actions: int
    """Actions A."""
    default_batch_size: int
    """Runs per batch when the caller gives none."""

    def begin(self, batch: CRNBatch) -> None:
        """Draw the instances of ``batch`` from ``batch.env_rng`` and record them."""

    def reset(self, agent: Algorithm, rng: np.random.Generator) -> None:
        """Reset ``agent`` on the current instances with its generator."""

    def observe(self, t: int) -> tuple[Any, ...]:
        """Record the observation of step t and return it as the arguments of ``act_batch``."""

    def step(self, t: int, actions: np.ndarray) -> Step:
        """Take the actions and record step t."""

    def hindsight_labels(self, rows: slice, lam: float) -> np.ndarray:
        """Approximate-DPT labels of ``rows`` from their whole trajectories (ridge estimate with ``lam``)."""

    def result(self, labels: Labels, meta: dict[str, Any]) -> DataT:
        """The collected data set with its labels and ``meta`` (how it was made)."""


class CollectionOptions(TypedDict, total=False):
    """The keyword options of :func:`run_collection`, for the functions that pass them on."""

    seed: int
    batch_size: int | None
    approx_dpt_lam: float
    progress: Callable[[int], Any] | None
    first_batch: int


def run_collection(
    recorder: Recorder[DataT],
    context: AgentSpec,
    num_runs: int,
    labelling: Labelling | None = None,
    seed: int = 0,
    batch_size: int | None = None,
    approx_dpt_lam: float = 1.0,
    progress: Callable[[int], Any] | None = None,
    first_batch: int = 0,
) -> DataT:
    """Run Alg_0 ``context`` on ``num_runs`` instances under ``seed`` and label them (module docstring).

    Batches follow :func:`icrl_gym.data.crn.crn_batches`; ``labelling.expert`` and
    ``labelling.posterior`` (when given) are observers 0, 1, ... of :meth:`CRNBatch.observer_rng`
    in that order.  ``batch_size`` defaults to the recorder's; ``approx_dpt_lam`` is the ridge
    parameter of approximate-DPT labels; ``progress`` is called with the number of runs finished.
    ``first_batch`` plays the batches from that index on (a slice of a longer loop, played alone;
    recorded in the meta only when it is not 0).
    """
    labelling = labelling or Labelling()
    context = build_agent(context)
    expert = None if labelling.expert is None else build_agent(labelling.expert)
    posterior = None if labelling.posterior is None else build_agent(labelling.posterior)
    batch_size = batch_size or recorder.default_batch_size
    label = labelling.label
    labeller = expert if label is LabelMode.EXPERT and expert is not None else context
    if labelling.store_values and not getattr(labeller, "has_index", False):
        raise ValueError("store_values needs an index expert (LinUCB, UCB, ...) with label 'ad' or 'expert'")
    index = _method(labeller, "index") if labelling.store_values else None
    if posterior is None:
        soft = _method(labeller, "policy_batch")
    elif hasattr(posterior, "optimal_action_probs"):
        soft = _method(posterior, "optimal_action_probs")
    else:
        raise ValueError(f"posterior {posterior.name!r} has no posterior of the optimal action (optimal_action_probs)")
    n, t_max, a = num_runs, recorder.num_steps, recorder.num_actions
    out = Labels(
        labels=None if label is LabelMode.NONE else np.zeros((n, t_max), np.int16),
        probs=np.zeros((n, t_max, a), np.float16) if labelling.store_probs else None,
        values=np.zeros((n, t_max, a), np.float32) if labelling.store_values else None,
    )
    observers = [agent for agent in (expert, posterior) if agent is not None]
    bar = progress_bar(n * t_max, f"collect {type(context).__name__}", unit="step")
    for batch in crn_batches(n, batch_size, seed, first_batch):
        rows = batch.rows
        recorder.begin(batch)
        recorder.reset(context, batch.agent_rng)
        for j, observer in enumerate(observers):
            recorder.reset(observer, batch.observer_rng(j))
        for t in range(t_max):
            obs = recorder.observe(t)
            if out.values is not None and index is not None:
                out.values[rows, t] = index(*obs)
            if out.probs is not None:
                out.probs[rows, t] = soft(*obs)
            actions = context.act_batch(*obs)
            if out.labels is not None and expert is not None:
                out.labels[rows, t] = expert.act_batch(*obs)
            step = recorder.step(t, actions)
            seen: tuple[Any, ...] = (*obs, actions, *step.feedback)  # (o_t, a_t, r_t[, s_{t+1}])
            for agent in (context, *observers):
                agent.update_batch(*seen)
            if out.labels is not None and label is LabelMode.AD:
                out.labels[rows, t] = actions
            elif out.labels is not None and label is LabelMode.DPT:
                out.labels[rows, t] = step.optimal_action
            bar.update(batch.size)
        if out.labels is not None and label is LabelMode.APPROX_DPT:
            out.labels[rows] = recorder.hindsight_labels(rows, approx_dpt_lam)
        if progress is not None:
            progress(rows.stop)
    bar.close()
    meta = {
        "context": context.config(),
        "label": label.value,
        "expert": None if expert is None else expert.config(),
        "posterior": None if posterior is None else posterior.config(),
        "num_trajectories": n,
        "seed": seed,
        "batch_size": batch_size,
        "store_probs": labelling.store_probs,
        "store_values": labelling.store_values,
        "approx_dpt_lam": approx_dpt_lam if label is LabelMode.APPROX_DPT else None,
        **({"first_batch": first_batch} if first_batch else {}),
    }
    return recorder.result(out, meta)


def build_agent(spec: AgentSpec | Agent[Any]) -> Algorithm:
    """The algorithm ``spec`` names (an agent object is used as it is); ``TypeError`` unless a bandit or MDP one."""
    agent = spec if isinstance(spec, Agent) else make_agent(spec)
    if not isinstance(agent, BanditAgent | MDPAgent):
        raise TypeError(f"{spec!r} is not a bandit or MDP algorithm")
    return agent


def _method(agent: Algorithm, name: str) -> Callable[..., np.ndarray]:
    """The batched method ``name`` of ``agent`` (bandit and MDP agents take different observations)."""
    method: Callable[..., np.ndarray] = getattr(agent, name)
    return method
