"""The MDP generalist (:class:`~icrl_gym.models.mdp_generalist.MDPGeneralist`) as an MDP algorithm: any S, A, H, K.

Alg_theta(. | D_{t-1}, s_t) = softmax of the model's logits at the current state, computed from the
run's counts (its cache) by a learned value iteration.  The model reads S, A, H and K from the reset
info and pools its counts over h when the environment says it is stationary.  In a dark room it
starts from the room's moves as counts, since the prior knows them
(:func:`~icrl_gym.models.mdp_generalist.known_move_counts`).  ``greedy=True`` takes the argmax (the
model imitates P(a* | D), whose argmax is the greedy Bayes DPT policy), ``greedy=False`` samples; by
default it is greedy on random MDPs and samples in dark rooms
(:attr:`MDPGeneralistAgent.greedy_by_kind`).

The checkpoint's record states the sizes it was trained on (``trained_range``) and those it agrees
to play (``playable_range``: the trained range, or a wider one the trainer chose for out-of-range
evaluation); a size outside the playable range is refused with a ``ValueError`` naming the field,
its value and both ranges.  A model held in memory without a record plays any size.
"""

from __future__ import annotations

from typing import Any, ClassVar

from agents.learned.mdp_transformer import MDPTransformerAgent
from icrl_gym.checkpoint import CheckpointKind
from icrl_gym.envs.dark_room import dark_room_successors
from icrl_gym.envs.mdp_core import MDPKind
from icrl_gym.models.mdp_generalist import MDPGeneralistCache
from icrl_gym.models.policy import EnvInfo, InContextPolicy

RANGE_FIELDS = ("num_states", "num_actions", "horizon", "episodes")
"""The sizes a record's ranges bound, EnvInfo's names."""


def range_problems(env_info: EnvInfo, playable: dict[str, Any], trained: dict[str, Any]) -> list[str]:
    """The sizes of ``env_info`` outside ``playable`` ({field: [low, high]}), each naming the field and both ranges."""
    problems = []
    for name in RANGE_FIELDS:
        if name not in playable:
            continue
        low, high = playable[name]
        value = getattr(env_info, name)
        if not low <= value <= high:
            problems.append(f"{name}={value} is outside [{low}, {high}] (trained on {trained.get(name, '?')})")
    return problems


class MDPGeneralistAgent(MDPTransformerAgent):
    """Batched online rollout of an :class:`~icrl_gym.models.mdp_generalist.MDPGeneralist` checkpoint.

    The MDP transformer's adapter (the states are the model's input; S, A, H, K from the reset info)
    with the generalist's kind, the greedy default, the record's size ranges and the counts pooled
    over h when the environment is stationary.
    """

    name = "mdp_generalist"
    kind = CheckpointKind.MDP_GENERALIST
    greedy_default = True
    greedy_by_kind: ClassVar[dict[MDPKind, bool]] = {MDPKind.RANDOM: True, MDPKind.DARK_ROOM: False}
    """The deployment when ``greedy`` is not given, per environment kind (:class:`~icrl_gym.envs.mdp_core.MDPKind`).

    The model imitates P(a* = a | D).  On random MDPs its argmax (the greedy Bayes DPT policy) has
    0.43-0.75x PSRL's regret; in a dark room the argmax oscillates between the directions that hold
    the most candidate goals, while sampling a ~ P(a* | D) explores (measured with the exact goal
    posterior, 100 rooms, seed 1: 5x5, H=20, K=10: greedy 145.35, sampled 37.83, DarkRoom PSRL 92.25;
    10x10, H=100, K=4: greedy 355.30, sampled 218.80, DarkRoom PSRL 336.14)."""

    def _setup(
        self, model: InContextPolicy, meta: dict[str, Any], checkpoint: str, greedy: bool | None, defaults: dict
    ) -> None:
        super()._setup(model, meta, checkpoint, greedy, defaults)
        self.greedy_given = greedy
        """The constructor's ``greedy`` (None: per environment kind, :attr:`greedy_by_kind`)."""

    def _start(self, info: dict[str, Any]) -> None:
        super()._start(info)
        spec = None if self.env_model is None else self.env_model.mdp
        if self.greedy_given is None:
            kind = MDPKind.RANDOM if spec is None else spec.kind
            self.greedy = self.deterministic = self.greedy_by_kind.get(kind, self.greedy_default)
        if isinstance(self._cache, MDPGeneralistCache):
            moves = None
            if spec is not None and spec.kind is MDPKind.DARK_ROOM:  # the prior knows the room's moves
                moves = dark_room_successors(spec.size)
            self._cache.configure(self.env_stationary, moves)

    def _env_info(self, info: dict[str, Any]) -> EnvInfo:
        env_info = super()._env_info(info)
        trained = self.meta.get("trained_range") or {}
        playable = self.meta.get("playable_range") or trained
        problems = range_problems(env_info, playable, trained)
        if problems:
            raise ValueError(f"the MDP generalist {self.checkpoint!r} cannot play this MDP: " + "; ".join(problems))
        return env_info
