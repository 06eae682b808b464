"""What a pretraining trajectory is labelled with: label modes, soft labels, targets, declared once.

Section 3 of the paper: a context algorithm Alg_0 collects
D_T = (s_1, a_1, r_1, ..., s_T, a_T, r_T) on an instance M ~ Lambda and every step t gets a label
a-bar_t; the transformer is trained by maximum likelihood on the labels (Eq. (3)).  The
label modes (:class:`LabelMode`) say where a-bar_t comes from, the soft labels (:class:`SoftLabel`)
what distribution over actions is stored beside it, the targets (:class:`Target`) which of the two
the loss fits.  :class:`Labelling` bundles one choice with the algorithms it needs and checks the
combination in one place; :func:`upgrade_label_fields` reads records written before the expert
algorithm and the posterior had fields of their own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

from icrl_gym.algorithm import BanditAgent, MDPAgent

AgentSpec = BanditAgent | MDPAgent | str | Mapping[str, Any]
"""An algorithm: an agent object, a registered name, or a ``make_agent`` specification."""


C = TypeVar("C", bound="_Choice")


class _Choice(str, Enum):
    """A mode spelled as its string value (JSON configs hold the string; ``mode == "ad"`` holds)."""

    def __str__(self) -> str:
        return str(self.value)

    @classmethod
    def parse(cls: type[C], value: Any) -> C:
        """The member spelled ``value``; a ``ValueError`` naming the allowed values otherwise."""
        try:
            return cls(value)
        except ValueError:
            what = (cls.__doc__ or cls.__name__).split(":")[0].lower()  # "Label mode: ..." -> "label mode"
            raise ValueError(f"unknown {what} {value!r}; choose one of {', '.join(map(repr, cls.values()))}") from None

    @classmethod
    def values(cls: type[C]) -> tuple[str, ...]:
        """Every spelling, in declaration order."""
        return tuple(str(m.value) for m in cls)


class LabelMode(_Choice):
    """Label mode: where the label a-bar_t of step t comes from."""

    NONE = "none"
    """No labels (evaluation runs)."""
    AD = "ad"
    """Algorithm distillation: Alg_E = Alg_0, a-bar_t = a_t, the action the context algorithm took."""
    DPT = "dpt"
    """Decision-Pretrained Transformer: a-bar_t = a*_t, the instance's optimal action; for a linear
    bandit a*_t = argmax_k <a_{t,k}, w*>, for an MDP argmax_a Q*_h(s_t, a)."""
    APPROX_DPT = "approx_dpt"
    """Approximate DPT (Proposition 7): a-bar_t = argmax_k <a_{t,k}, w_hat> with
    w_hat the ridge estimate from the whole trajectory D_T (no access to w*; linear bandits only)."""
    EXPERT = "expert"
    """An expert algorithm Alg_E observes Alg_0's history D_{t-1} and a-bar_t is its own action
    (e.g. context Thompson sampling, expert LinUCB)."""


class SoftLabel(_Choice):
    """Soft label: the distribution over actions stored beside the label (``label_probs``)."""

    POLICY = "policy"
    """The labelling algorithm's action distribution Alg_E(. | D_{t-1}, s_t) (Alg_0 for AD, the expert
    for EXPERT), e.g. soft LinUCB's softmax, Thompson sampling's P by Monte-Carlo."""
    POSTERIOR = "posterior"
    """Rao-Blackwellised DPT: P(a* = a | D_{t-1}, s_t) under the prior, from a Bayesian posterior
    algorithm (PSRL by Monte-Carlo, DarkRoom's exactly).  Since E[1{a* = a} | D] is this
    probability, it is the DPT label with the instance's randomness integrated out."""


class Target(_Choice):
    """Training target: what the pretraining loss fits."""

    LABEL = "label"
    """Maximum likelihood of the label a-bar_t (Eq. (3))."""
    PROBS = "probs"
    """Cross-entropy against the stored soft label (the labeller's whole distribution)."""


@dataclass(frozen=True)
class Labelling:
    """One labelling of collected trajectories: the mode, the algorithms it needs, what is stored.

    ``expert`` is the expert algorithm Alg_E of :attr:`LabelMode.EXPERT`; ``posterior`` the
    Bayesian algorithm whose ``optimal_action_probs`` give the :attr:`SoftLabel.POSTERIOR` soft
    labels of DPT.  ``store_probs`` keeps soft labels, ``store_values`` the labeller's per-arm
    index (LinUCB's v_{t,k}, UCB's index).  Construction checks the combination.
    """

    label: LabelMode = LabelMode.NONE
    expert: AgentSpec | None = None
    posterior: AgentSpec | None = None
    store_probs: bool = False
    store_values: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "label", LabelMode.parse(self.label))
        label = self.label
        if label is LabelMode.EXPERT and self.expert is None:
            raise ValueError("label='expert' needs an expert algorithm")
        if label is not LabelMode.EXPERT and self.expert is not None:
            raise ValueError(f"an expert algorithm is only used with label='expert', not {label.value!r}")
        if self.posterior is not None and not (label is LabelMode.DPT and self.store_probs):
            raise ValueError(
                "a posterior gives the Rao-Blackwellised DPT soft labels: it needs label 'dpt' and target 'probs'"
            )
        if self.store_probs and self._soft_source() is None:
            raise ValueError(
                f"label mode {label.value!r} has no distribution to store as soft labels: target 'probs' needs "
                "label 'ad' or 'expert', or label 'dpt' with a posterior (P(a* = a | D))"
            )
        if self.store_values and label not in (LabelMode.AD, LabelMode.EXPERT):
            raise ValueError("store_values needs an index expert (LinUCB, UCB, ...) with label 'ad' or 'expert'")

    @property
    def soft_label(self) -> SoftLabel | None:
        """What the stored soft labels are (None: none stored)."""
        return self._soft_source() if self.store_probs else None

    def _soft_source(self) -> SoftLabel | None:
        """What the soft labels of this mode would be (None: it has no distribution to store)."""
        if self.label in (LabelMode.AD, LabelMode.EXPERT):
            return SoftLabel.POLICY
        if self.label is LabelMode.DPT and self.posterior is not None:
            return SoftLabel.POSTERIOR
        return None

    def check_environment(self, mdp: bool) -> None:
        """Refuse what tabular MDP collection does not support (approximate DPT, expert labels, index values)."""
        if mdp and self.label not in (LabelMode.NONE, LabelMode.AD, LabelMode.DPT):
            raise ValueError(f"MDP label mode must be 'none', 'ad' or 'dpt', got {self.label.value!r}")
        if mdp and self.store_values:
            raise ValueError("MDP collection stores no index values (store_values, value loss)")


def upgrade_label_fields(record: Mapping[str, Any]) -> dict[str, Any]:
    """A pretraining record (config or checkpoint ``pretrain``) in today's fields; old ones mean the same.

    Before ``posterior`` had its own field, an MDP record called the posterior of the
    Rao-Blackwellised DPT target ``expert`` (MDP collection has no label mode "expert", so an MDP
    expert can mean nothing else): an MDP record (its ``env`` has a ``kind``) with an ``expert`` and
    no ``posterior`` moves it there.  Bandit records keep their ``expert`` (Alg_E of label mode
    "expert", as always) and get ``posterior=None``.  The one place old field usage is mapped.
    """
    out = dict(record)
    is_mdp = "kind" in (out.get("env") or {})
    if is_mdp and out.get("posterior") is None and out.get("expert") is not None:
        out["posterior"], out["expert"] = out["expert"], None
    out.setdefault("posterior", None)
    return out
