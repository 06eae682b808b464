"""The MDP generalist (:class:`~icrl_gym.models.mdp_generalist.MDPGeneralist`) as an MDP algorithm: any S, A, H, K.

Alg_theta(. | D_{t-1}, s_t) = softmax of the model's logits at the current state, computed from the
run's counts (its cache) by a learned value iteration.  The model reads S, A, H and K from the reset
info and pools its counts over h when the environment says it is stationary (both told to it in
its :class:`~icrl_gym.models.policy.EnvInfo`, from which it makes its cache).  In a dark room it
starts from the room's moves as counts, since the prior knows them
(:func:`~icrl_gym.models.mdp_generalist.known_move_counts`).  ``greedy=True`` takes the argmax (the
model imitates P(a* | D), whose argmax is the greedy Bayes DPT policy), ``greedy=False`` samples.  By
default (:attr:`MDPGeneralistAgent.deployment`) it samples in dark rooms, and on random MDPs it follows
a schedule of temperatures set by the steps left per state-action pair, m = (steps left) / (S A): it
draws from softmax(logits / 0.7) while m >= 50 (a long run: exploring now pays for many steps), from
the sharpened softmax(logits / 0.3) while m >= 12 (enough to use what it finds: about a dozen more
visits of every pair), then takes the argmax.

The checkpoint's record states the sizes it was trained on (``trained_range``) and those it agrees
to play (``playable_range``: the trained range, or a wider one the trainer chose for out-of-range
evaluation); a size outside the playable range is refused with a ``ValueError`` naming the field,
its value and both ranges.  A model held in memory without a record plays any size.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

from agents.learned.mdp_transformer import MDPTransformerAgent
from icrl_gym.checkpoint import CheckpointKind
from icrl_gym.envs.dark_room import dark_room_successors
from icrl_gym.envs.mdp_core import MDPKind
from icrl_gym.envs.validation import MAX_SCALE, check_number
from icrl_gym.models.mdp_generalist import playable_problems
from icrl_gym.models.policy import EnvInfo, InContextPolicy


class MDPGeneralistAgent(MDPTransformerAgent):
    """Batched online rollout of an :class:`~icrl_gym.models.mdp_generalist.MDPGeneralist` checkpoint.

    The MDP transformer's adapter (the states are the model's input; S, A, H, K from the reset info)
    with the generalist's kind, the greedy default, the record's size ranges and the counts pooled
    over h when the environment is stationary.
    """

    name = "mdp_generalist"
    kind = CheckpointKind.MDP_GENERALIST
    greedy_default = True
    default_fields = ("explore_temperature", "explore_visits", "wide_temperature", "wide_visits")
    """The schedule's parameters, which the constructor may set (random MDPs, ``greedy`` not given)."""
    greedy_by_kind: ClassVar[dict[MDPKind, bool]] = {MDPKind.RANDOM: True, MDPKind.DARK_ROOM: False}
    """Whether the default ends a run with the argmax, per kind (:class:`~icrl_gym.envs.mdp_core.MDPKind`).

    The model imitates P(a* = a | D).  On random MDPs its argmax (the greedy Bayes DPT policy) has
    0.43-0.75x PSRL's regret; in a dark room the argmax oscillates between the directions that hold
    the most candidate goals, while sampling a ~ P(a* | D) explores (measured with the exact goal
    posterior, 100 rooms, seed 1: 5x5, H=20, K=10: greedy 145.35, sampled 37.83, DarkRoom PSRL 92.25;
    10x10, H=100, K=4: greedy 355.30, sampled 218.80, DarkRoom PSRL 336.14)."""
    explore_temperature: float = 0.3
    """On random MDPs by default: the temperature of the draws while there is time to explore."""
    explore_visits: float = 12.0
    """On random MDPs by default: draws at :attr:`explore_temperature` while the steps left (this one
    included) are at least ``explore_visits`` S A, then the argmax.

    The argmax alone stops exploring too early in small MDPs with long runs (it is 0.84x PSRL's
    regret at (S, A, H, K) = (3, 2, 20, 50)), and draws at temperature 1 explore too much everywhere.
    Chosen on 200 instances per cell at seed 5e7 (neither a training nor an evaluation seed), in 13
    cells of the in-range grid, against the argmax and draws at temperature 0.2, 0.3, 0.5 and 1 for
    whole runs (``python -m benchmarks.evaluations.mdp_deployment``): 0.3 then the argmax was the best
    or within 0.07x PSRL of it in every cell, e.g. 0.59x PSRL at (3, 2, 20, 50) and 0.61x at
    (5, 2, 20, 50), where the argmax has 0.84x and 0.88x, and it equals the argmax in short runs such
    as (20, 4, 5, 5).  With the :attr:`wide_temperature` phase before it, the whole schedule is the best
    or within 0.07x PSRL of it in every one of the 13 cells."""
    wide_temperature: float = 0.7
    """On random MDPs by default: the temperature of the draws while the steps left are at least
    :attr:`wide_visits` S A (before the :attr:`explore_temperature` phase).

    Locking onto a wrong action costs most in long runs of small MDPs, and the draws at 0.3 still lock
    on in a few runs there: at (S, A, H, K) = (3, 2, 20, 50) (500 instances, seed 5e7) 5.4% of the
    runs had more than 3x PSRL's regret on the same instance (and more than 20), and the 99th
    percentile of per-run regret was 2.0x PSRL's.  Drawing at 0.7 while the steps left are at least
    50 S A brought these to 2.0% and 1.31x, and the mean from 0.73x to 0.67x PSRL's
    (``python -m benchmarks.evaluations.mdp_deployment --cells 3,2,20,50 --runs 500``)."""
    wide_visits: float = 50.0
    """On random MDPs by default: draws at :attr:`wide_temperature` while the steps left are at least
    ``wide_visits`` S A."""
    deployment: ClassVar[str] = (
        f"random MDPs: softmax(logits / {wide_temperature}) while the steps left >= {wide_visits:g} S A, "
        f"softmax(logits / {explore_temperature}) while >= {explore_visits:g} S A, "
        "then the argmax; dark rooms: softmax(logits)"
    )
    """The default deployment in words (part of a stored evaluation row's key: a new default re-plays it)."""

    def _setup(
        self, model: InContextPolicy, meta: dict[str, Any], checkpoint: str, greedy: bool | None, defaults: dict
    ) -> None:
        super()._setup(model, meta, checkpoint, greedy, defaults)
        for name in self.default_fields:  # the schedule's parameters, when given
            if name in self.defaults:
                setattr(self, name, check_number(name, self.defaults[name], 0.0, False, MAX_SCALE))
        self.greedy_given = greedy
        """The constructor's ``greedy`` (None: per environment kind, :attr:`greedy_by_kind`)."""

    def _start(self, info: dict[str, Any]) -> None:
        super()._start(info)
        spec = None if self.env_model is None else self.env_model.mdp
        self.scheduled = False
        """Whether this run follows the exploring schedule (random MDPs, ``greedy`` not given)."""
        if self.greedy_given is None:
            kind = MDPKind.RANDOM if spec is None else spec.kind
            self.greedy = self.greedy_by_kind.get(kind, self.greedy_default)
            self.scheduled = kind is MDPKind.RANDOM
            self.deterministic = self.greedy and not self.scheduled

    def config(self) -> dict[str, Any]:
        """The checkpoint, ``greedy`` as given (None: the default deployment, at reset), the schedule's given values."""
        return {**super().config(), "greedy": self.greedy_given}

    def _temperature(self) -> float:
        """The schedule's temperature at the steps left per state-action pair (scheduled runs; else the base's).

        :attr:`wide_temperature` while they are at least :attr:`wide_visits`, then
        :attr:`explore_temperature` while at least :attr:`explore_visits`, then the argmax.
        """
        info = self.env_info
        if not self.scheduled or info is None or info.num_states is None:
            return super()._temperature()
        per_pair = (info.steps - self._decided + 1) / (info.num_states * info.num_actions)
        for visits, temperature in (
            (self.wide_visits, self.wide_temperature),
            (self.explore_visits, self.explore_temperature),
        ):
            if per_pair >= visits:
                return temperature
        return super()._temperature()

    def _env_info(self, info: dict[str, Any]) -> EnvInfo:
        """The MDP transformer's sizes, whether the MDP is stationary and, in a dark room, its moves (the prior's)."""
        spec = None if self.env_model is None else self.env_model.mdp
        moves = None
        if spec is not None and spec.kind is MDPKind.DARK_ROOM:  # the prior knows the room's moves
            moves = tuple(tuple(row) for row in dark_room_successors(spec.size).tolist())
        env_info = replace(super()._env_info(info), stationary=self.env_stationary, known_moves=moves)
        problems = playable_problems(self.meta, env_info)  # the record's ranges (fine-tuning checks the same)
        if problems:
            raise ValueError(f"the MDP generalist {self.checkpoint!r} cannot play this MDP: " + "; ".join(problems))
        return env_info
