"""The configuration of the MDP generalist's training (:mod:`icrl_gym.training.mdp_generalist`).

:class:`MDPGeneralistTrainConfig`: the model, the prior of the training MDPs, the expert, the
evaluation cells (each read by :func:`eval_spec`) and the loop's fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from icrl_gym.config import POSITIVE, POSITIVE_INT, PROBABILITY, Allowed, checked
from icrl_gym.envs.dark_room import dark_room_spec
from icrl_gym.envs.mdp_core import MDPSpec
from icrl_gym.models.mdp_generalist import (
    MDPGeneralistConfig,
)
from icrl_gym.training.generalist_task import (
    GeneralistLoopConfig,
)

DEFAULT_EVAL_CELLS = (
    {"num_states": 5, "num_actions": 3, "horizon": 10, "episodes": 20},
    {"num_states": 10, "num_actions": 4, "horizon": 10, "episodes": 20},
    {"kind": "dark_room", "size": 5, "horizon": 20, "episodes": 10},
)
"""The in-training evaluation: today's fixed size, a larger random MDP, a small dark room."""


@dataclass
class MDPGeneralistTrainConfig(GeneralistLoopConfig):
    """Everything that defines a pretraining run of the MDP generalist (the module docstring).

    The shared fields keep their meaning with the MDP's names: ``min_arms``/``max_arms`` bound A,
    ``min_horizon``/``max_horizon`` bound H (steps per episode); ``model`` holds
    :class:`~icrl_gym.models.mdp_generalist.MDPGeneralistConfig` fields.
    """

    out_dir: str = "runs/mdp-generalist"
    max_arms: int = 6
    min_horizon: int = 2
    max_horizon: int = 30
    queries: int = 8
    min_batch: int = 4
    max_batch: int = 64
    max_epsilon: float = 0.3
    cost_per_batch: float = 3.0e7
    """B = cost_per_batch / (queries H S A (S + 64)), within [min_batch, max_batch]: about constant
    compute per step (the training forward costs ~ H S A (S + 2 d) per query)."""
    min_states: int = checked(2, Allowed(low=2, integer=True))
    """Smallest S of a random MDP."""
    max_states: int = checked(20, POSITIVE_INT)
    """Largest S of a random MDP."""
    max_episodes: int = checked(50, POSITIVE_INT)
    """Largest K of a random MDP."""
    max_steps: int = checked(1000, POSITIVE_INT)
    """Largest T = K H of a run (K is drawn in [1, min(max_episodes, max_steps // H)])."""
    min_concentration: float = checked(0.1, POSITIVE)
    """Smallest Dirichlet concentration c (sparse transitions); c is log-uniform."""
    max_concentration: float = checked(5.0, POSITIVE)
    """Largest Dirichlet concentration c (dense transitions)."""
    random_start_fraction: float = checked(0.3, PROBABILITY)
    """Probability that a batch's MDPs start from mu ~ Dirichlet(1) instead of state 0."""
    nonstationary_fraction: float = checked(0.3, PROBABILITY)
    """Probability that a batch's MDPs have one P_h, R_h per step h."""
    dark_room_fraction: float = checked(0.15, PROBABILITY)
    """Probability that a batch is dark rooms."""
    min_room: int = checked(4, Allowed(low=2, integer=True))
    """Smallest side of a dark room."""
    max_room: int = checked(12, POSITIVE_INT)
    """Largest side of a dark room."""
    room_max_horizon: int = checked(30, POSITIVE_INT)
    """Largest H of a dark room batch."""
    room_max_episodes: int = checked(10, POSITIVE_INT)
    """Largest K of a dark room batch."""
    posterior_samples: int = checked(8, POSITIVE_INT)
    """M, PSRL's posterior draws per label: the Monte-Carlo estimate of P(a* | D) of random MDPs.  The
    loss is linear in the label, so an unbiased estimate leaves the expected gradient (and the
    minimiser) unchanged: a few draws suffice, and the first draw of the posterior dominates a
    batch's sampling time (M B H' S^2 A gamma variates)."""
    eval_posterior_samples: int = checked(32, POSITIVE_INT)
    """M of the greedy Bayes DPT reference of the evaluation (its argmax needs a sharper estimate)."""
    dagger_start: int = 1000
    dagger_fraction: float = 0.1
    dagger_max_steps: int = checked(200, POSITIVE_INT)
    """A DAgger batch (rolled out by the model, ~T (H - h) planning levels) keeps K <= dagger_max_steps // H."""
    eval_every: int = 500
    eval_instances: int = 100
    eval_cells: list[dict[str, Any]] = field(default_factory=lambda: [dict(c) for c in DEFAULT_EVAL_CELLS])
    """MDPSpec fields of the evaluation's priors (a dark room: kind, size, horizon, episodes)."""
    playable_range: dict[str, list[int]] = field(
        default_factory=lambda: {
            "num_states": [2, 144],
            "num_actions": [2, 8],
            "horizon": [1, 100],
            "episodes": [1, 100],
        }
    )
    """The sizes the checkpoint's agent agrees to play (beyond the trained range: out-of-distribution use)."""

    resumable_changes: ClassVar[tuple[str, ...]] = (
        *GeneralistLoopConfig.resumable_changes,
        "eval_cells",
        "eval_posterior_samples",
        "playable_range",
    )
    """Fields a resumed run may change: its length and budget, logging, evaluation and the playable range."""

    def checkpoint_fields(self) -> dict[str, Any]:
        """The priors, the trained range (per family and overall) and the playable range."""
        families: dict[str, dict[str, list[float]]] = {
            "random": {
                "num_states": [self.min_states, self.max_states],
                "num_actions": [self.min_arms, self.max_arms],
                "horizon": [self.min_horizon, self.max_horizon],
                "episodes": [1, self.max_episodes],
                "steps": [1, self.max_steps],
                "concentration": [self.min_concentration, self.max_concentration],
            }
        }
        if self.dark_room_fraction > 0:
            families["dark_room"] = {
                "size": [self.min_room, self.max_room],
                "num_states": [self.min_room**2, self.max_room**2],
                "num_actions": [5, 5],
                "horizon": [max(self.min_horizon, 2), self.room_max_horizon],
                "episodes": [1, self.room_max_episodes],
            }
        overall = {
            name: [min(f[name][0] for f in families.values()), max(f[name][1] for f in families.values())]
            for name in ("num_states", "num_actions", "horizon", "episodes")
        }
        return {
            "env": {"kind": sorted(families), "reward": "bernoulli"},
            "trained_range": {**overall, **families},
            "playable_range": self.playable_range,
        }

    def check(self) -> None:
        """The ranges are ordered; the model's fields build an :class:`MDPGeneralistConfig`; T fits H."""
        super().check()
        self.check_order(
            ("min_states", "max_states"),
            ("min_concentration", "max_concentration"),
            ("min_room", "max_room"),
            ("min_horizon", "room_max_horizon"),
            ("max_horizon", "max_steps"),
        )
        if self.min_arms < 2:
            raise ValueError(f"MDPGeneralistTrainConfig.min_arms={self.min_arms} must be >= 2 (actions of an MDP)")
        try:
            MDPGeneralistConfig.from_dict(self.model)
        except (TypeError, ValueError) as err:
            problem = f"MDPGeneralistTrainConfig.model={self.model!r} is not an MDPGeneralistConfig: {err}"
            raise ValueError(problem) from err
        for cell in self.eval_cells:
            eval_spec(cell)


def eval_spec(cell: dict[str, Any]) -> MDPSpec:
    """The prior of an evaluation cell (a dark room from its side, else :class:`MDPSpec` fields)."""
    cell = dict(cell)
    if cell.get("kind") == "dark_room":
        return dark_room_spec(int(cell["size"]), int(cell["horizon"]), int(cell["episodes"]))
    return MDPSpec(**cell)
