"""Supervised pretraining of the generalist Bernoulli-bandit transformer on Gittins labels.

Every step draws a fresh batch in numpy: one (K, T) from the training range (K uniform in
[min_arms, max_arms], T log-uniform in [min_horizon, max_horizon]), the batch's prior of the arm
means, B instances of it and B trajectories of a behaviour policy.  The prior is U[0, 1] when
``beta_priors`` is empty (the shipped model's training); otherwise, with probability
``skewed_fraction`` a skewed prior (the first floor(K/2) arms' means ~ U[0.5, 1] and the rest
~ U[0, 0.5], or the reverse, each half the time) whose labels are the U[0, 1] expert's, else
Beta(a, b) with (a, b) drawn uniformly from ``beta_priors``, labelled by the Gittins index told
that prior (its pseudo-counts): the expert knows the batch's prior, the model only sees the
trajectory, so it learns the posterior mixture over the family (:func:`sample_prior`).  The
behaviour policy is:

* the expert with exploration: the finite-horizon Gittins policy (ties broken at random), replaced
  at every step with probability eps by a uniform arm, eps ~ U[0, max_epsilon] per trajectory, for
  coverage of the states an imperfect learner reaches;
* from ``dagger_start`` on, with probability ``dagger_fraction``, the model itself (greedy, with the
  same eps exploration): DAgger, the expert labels the states the learner visits.

At Q random query steps t of every trajectory the label is the Gittins action given the counts of
steps s < t (the expert reads them from the trajectory; the model reads the raw trajectory):
uniform over the maximisers of G(s_k, f_k, T - t) (``label_temperature = 0``) or
softmax(G / label_temperature).  The loss is the cross-entropy; the log also reports the KL to the
target (0 at a perfect imitation) and the fraction of queries whose argmax is a Gittins action.

Distillation (``teacher``): a trained Bernoulli generalist replaces the Gittins expert, as the
behaviour (eps-greedy, the same DAgger) and as the labels, its logits z at the query steps in place
of G (softmax(z / label_temperature): at 1, the teacher's own sampled policy).  It is how a policy
that is not a table -- e.g. one fine-tuned on the regret of a prior family -- moves into a smaller,
faster network.  No Gittins table is built then, so the batches may also come from the environment's
'beta_family' prior (``beta_family_fraction``: every instance its own Beta(a, b), a and b
log-uniform in [0.3, 10]), whose told expert would need one table per instance.

The family Gittins index (``family_index``): the same, with the family Gittins index of
:mod:`agents.bandit.family_gittins` in place of the teacher, as the behaviour and as the labels
(softmax(G / label_temperature), the maximisers at 0).  That index is not told the prior either: it
weighs the 16 Beta(a, b) priors of :data:`~agents.bandit.family_gittins.BETA_FAMILY` by their evidence
in the counts (raised to ``family_index_power``, 1 by default: the posterior; the agent's default tempers
it) and reads the Gittins index of each arm's moment-matched posterior, so its labels are an
uninformed policy's, which the model can copy exactly from the trajectory (told-prior labels teach at
best their posterior vote).  Its tables are built once for ``max_horizon``.  With ``skewed_told_uniform`` the
skewed batches keep the U[0, 1] expert: the skewed sets lie outside the family (one half of the arms above 1/2,
the other below; each arm's mean is U[0, 1] over the two halves), and their reference is that expert, so the
model learns its play where a history looks like theirs, a vote between it and the family index where the
histories of the two kinds overlap.  With a ``teacher`` it does the same beside the teacher.  Those labels are
softmax(G / told_uniform_temperature), G the index told U[0, 1]: the index's own scale, not the teacher's logits'.

Exact batches (``exact_fraction``): where the family-Bayes DP is computable (``exact_cells``, e.g.
K = 2 with T = 100 and 200, K = 3 with T = 50), a batch may take its (K, T) from those cells, its
instances from the uniform mixture over the 16 Beta(a, b) priors of the exact validation
(:data:`~icrl_gym.training.exact_bernoulli.BETA_FAMILY`: one prior per instance, every arm's mean
iid from it) and its labels from that mixture's Bayes-optimal DP, which no policy that is not told
the prior beats on it (:mod:`icrl_gym.training.exact_bernoulli`).  The DP plays the behaviour
(eps-greedy, the same DAgger) and its advantages A(x, k) = Q(x, k) - max_k' Q(x, k') at the query
states give the labels softmax(A / exact_temperature): an arm that loses 0.05 of expected reward
against the optimal action gets e^-5 of its weight at 0.01, so the labels are the DP's action
wherever the choice matters and spread over the arms where it does not.  With ``exact_split_share`` s > 0 the
K = 2 exact batches also cover the skewed sets: their instances come from the split prior (one arm ~ U[1/2, 1], the
other ~ U[0, 1/2], which one uniform) with probability s, and their labels from the DP of the mixture that gives
the split prior the weight s and each Beta prior (1 - s) / 16 (:mod:`icrl_gym.training.split_prior`): the
family-Bayes DP reads a split instance as a U-shaped Beta prior and pays 1.13x the Gittins told U[0, 1] there at
T = 200 (:mod:`benchmarks.evaluations.bernoulli_split_frontier` has the mixture's).

Resumable bit for bit (the fields of :attr:`GeneralistTrainConfig.resumable_changes` may change) and
data-parallel under ``torchrun``, as every generalist trainer (:mod:`icrl_gym.training.generalist_task`).
Run as::

    OMP_NUM_THREADS=1 python -m icrl_gym.training.generalist icrl_gym/pretrained/configs/bernoulli-generalist.json
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from agents.bandit.bernoulli_bayes_optimal import CompositionRanker, count_states, family_bayes_advantages
from agents.bandit.family_gittins import EVIDENCE_POWER_RANGE, FamilyGittinsIndex
from agents.bandit.gittins import Gittins
from agents.learned.generalist import GeneralistAgent
from icrl_gym.checkpoint import (
    PLAY_FIELD,
    CheckpointKind,
    find_checkpoint,
    load_checkpoint,
    read_checkpoint,
    read_record,
)
from icrl_gym.config import NONNEGATIVE, POSITIVE, POSITIVE_INT, PROBABILITY, checked
from icrl_gym.data.rollout import ModelPlay, epsilon_greedy, play
from icrl_gym.data.trajectories import evaluate_regret
from icrl_gym.envs.bandit_core import BanditBatch, BanditPrior, draw_instance_priors, sample_w_star
from icrl_gym.envs.bernoulli_bandit import bernoulli_bandit_spec
from icrl_gym.envs.validation import MAX_SCALE, check_number
from icrl_gym.estimators.gittins import GittinsTable, cached_gittins_table, warn_unusable_cache
from icrl_gym.estimators.statistics import ArmStatistics
from icrl_gym.models.generalist import Block, GeneralistConfig, GeneralistTransformer
from icrl_gym.models.policy import EnvInfo
from icrl_gym.training.distributed import DistContext
from icrl_gym.training.exact_bernoulli import BETA_FAMILY
from icrl_gym.training.generalist_task import (
    GeneralistTrainer,
    soft_label_loss,
    train_generalist,
)
from icrl_gym.training.loop import GeneralistLoopConfig, Logger
from icrl_gym.training.loop import main as run_main
from icrl_gym.training.split_prior import SplitMixture, split_weights
from icrl_gym.utils.fileio import atomic_write

EXACT_CELLS = ((2, 100), (2, 200), (3, 50))
"""The (K, T) where the acceptance evaluates exactly: the default cells of the exact batches."""

MAX_EXACT_STATES = 100_000_000
"""Largest number of count states an exact cell's DP may hold (K = 2, T = 200 has 68 million)."""

TRAINED_ENV = {"reward": "bernoulli", "arms": "one_hot", "prior": "uniform", "prior_low": 0.0, "prior_high": 1.0}
"""The environment family of the training batches, as the checkpoint records it."""


@dataclass
class GeneralistTrainConfig(GeneralistLoopConfig):
    """Everything that defines a pretraining run of the Bernoulli generalist transformer.

    The shared fields (:class:`~icrl_gym.training.loop.GeneralistLoopConfig`) keep their defaults;
    ``model`` holds :class:`GeneralistConfig` fields, T of a batch is log-uniform in
    [min_horizon, max_horizon], and the Gittins table is built for max_horizon.
    """

    out_dir: str = "runs/bernoulli-generalist"
    cost_per_batch: float = 2.0e6
    """Trajectories per batch B = cost_per_batch / (Q K (400 + T)), within [min_batch, max_batch]:
    about constant compute per step (400 ~ the per-arm-token MLP cost in units of one history key)."""
    eval_arms: int = checked(5, POSITIVE_INT)
    """K of the in-training evaluation."""
    eval_horizon: int = checked(200, POSITIVE_INT)
    """T of the in-training evaluation."""
    init_checkpoint: str = ""
    """Start a new run from these weights (a shipped model's name, or a checkpoint of this model: e.g. another
    run's folder or its last checkpoint) instead of a random initialisation: a fine-tuning phase.  That run's
    training wall time counts towards ``time_budget_hours`` and is recorded, so the budget covers both phases
    ('': from scratch)."""
    init_grow: bool = False
    """With ``init_checkpoint``: that checkpoint may hold the same model with fewer blocks (``model.n_layers``); its
    blocks become the first ones and each added block starts as the identity (:func:`grow_blocks`), so the run
    starts from the checkpoint's policy exactly, with more capacity to fit its labels."""
    table_cache: str = "runs/cache"
    """Folder where the Gittins tables (5 min to build one for T = 500) and the exact batches' DP advantages
    (:func:`exact_advantages`) are kept between processes."""
    beta_priors: list[list[float]] = field(default_factory=list)
    """(a, b) pairs: a batch's arm means are iid Beta(a, b) for one pair drawn uniformly, labelled by the
    Gittins index told Beta(a, b) (one table per pair).  Empty: every batch's means are U[0, 1]."""
    skewed_fraction: float = checked(0.0, PROBABILITY)
    """With ``beta_priors``: the probability that a batch is skewed (module docstring)."""
    teacher: str = ""
    """A Bernoulli generalist checkpoint (shipped name or path) that plays the behaviour and labels the
    queries instead of the Gittins expert: distillation (module docstring).  '': the Gittins expert."""
    family_index: bool = False
    """Label (and play) the batches that are not exact with the family Gittins index instead of the Gittins
    expert told the batch's prior or a teacher (module docstring)."""
    skewed_reversed_share: float = checked(0.5, PROBABILITY)
    """The share of the skewed batches whose prior is the reversed one (the first floor(K/2) arms low, the others
    high); the rest draw the skewed prior (the first floor(K/2) arms high)."""
    skewed_told_uniform: bool = False
    """With ``family_index`` or a ``teacher``: the skewed batches keep the Gittins index told U[0, 1] as their
    behaviour and labels (the reference the skewed sets are judged against) instead of the family index, whose
    reading of them through the 16 Beta priors pays 1.08-1.10x that reference there, or the teacher (module
    docstring)."""
    skewed_told_halves: bool = False
    """With ``skewed_told_uniform``: the skewed batches' behaviour and labels are the Gittins index told each arm's
    half instead of U[0, 1]: Beta(6, 2) on the high arms and Beta(2, 6) on the low ones (:data:`HALF_PRIORS`, the
    first two moments of U[1/2, 1] and U[0, 1/2]).  On a reversed batch the U[0, 1] index stops trying arms once the
    low first half has shown it a fair one; the told index goes on to the high half, and among the high arms it
    keeps trying as the Gittins index told an all-high Beta prior does."""
    told_uniform_temperature: float = checked(0.01, NONNEGATIVE)
    """With ``skewed_told_uniform``: the skewed batches' labels are softmax(G / told_uniform_temperature) of the
    Gittins index G told U[0, 1] (the maximisers at 0).  G is a probability, so this temperature is in its units
    whatever labels the other batches: beside a teacher, ``label_temperature`` (1: the teacher's own policy) is in
    units of the teacher's logits, and at 1 the index's labels would be nearly uniform over the arms."""
    family_index_power: float = checked(1.0, EVIDENCE_POWER_RANGE)
    """With ``family_index``: the index's evidence power eta, w_j ∝ pi_j L_j(x)^eta (1: the posterior;
    :mod:`agents.bandit.family_gittins`)."""
    family_index_split_weight: float = checked(0.0, PROBABILITY)
    """With ``family_index``: the split member's share of the index's prior mass (0: the 16 Beta priors alone;
    "The split member" of :mod:`agents.bandit.family_gittins`)."""
    family_index_split_power: float = checked(0.0, PROBABILITY)
    """With ``family_index_split_weight``: the power of the split member's evidence in the index's weights (0: the
    Beta members' ``family_index_power``; 1: untempered, so that its weight falls as fast as the counts refute it)."""
    family_index_fresh_news: float = checked(0.0, NONNEGATIVE)
    """With ``family_index``: the scale lambda of a fresh arm's news about the other untried arms, added to their
    index (0: none; "News from a fresh arm" of :mod:`agents.bandit.family_gittins`)."""
    beta_family_fraction: float = checked(0.0, PROBABILITY)
    """With a ``teacher`` or ``family_index``: the probability that a batch's instances come from the
    'beta_family' prior."""
    exact_fraction: float = checked(0.0, PROBABILITY)
    """The probability that a batch is exact: a (K, T) of ``exact_cells``, instances from the 16 Beta priors'
    mixture, labels from its family-Bayes DP (module docstring)."""
    exact_cells: list[list[int]] = field(default_factory=lambda: [list(cell) for cell in EXACT_CELLS])
    """The (K, T) of the exact batches; each DP table is built once (K = 2, T = 200: about a minute, 0.5 GB)."""
    exact_temperature: float = checked(0.01, POSITIVE)
    """Temperature of the exact labels softmax(A / exact_temperature), in units of expected reward."""
    one_untried_arm: bool = False
    """Score each query on the tried arms and one untried arm only (:func:`untried_but_one`): the untried arms are
    exchangeable, the model gives them one logit, and the cross-entropy over all K arms lets the model's argmax
    take a tried arm where the teacher's takes an untried one, as long as the untried arms' summed mass is near the
    target's (the more untried arms, the wider the margin).  On the reduced set the loss compares the two single
    logits the greedy policy compares.  False: all K arms, as runs before it."""
    exact_split_share: float = checked(0.0, PROBABILITY)
    """The split prior's share of the exact K = 2 batches' mixture: their instances come from it with this
    probability (else from the 16 Beta priors) and their labels from the DP of that mixture
    (:mod:`icrl_gym.training.split_prior`; module docstring).  0: the family-Bayes DP alone."""

    resumable_changes: ClassVar[tuple[str, ...]] = (
        *GeneralistLoopConfig.resumable_changes,
        "eval_arms",
        "eval_horizon",
        "init_checkpoint",
        "init_grow",
        "table_cache",
        "teacher",
    )
    """Fields a resumed run may change: its length and budget, logging, evaluation, where things are kept
    (``init_checkpoint`` and ``init_grow`` only start a new run; ``teacher`` may name another checkpoint with the
    same weights, which the resumed run checks)."""

    def checkpoint_fields(self) -> dict[str, Any]:
        """The environment family (:data:`TRAINED_ENV`) and the trained range of K, T (and the priors, if widened)."""
        trained: dict[str, Any] = {
            "num_arms": [self.min_arms, self.max_arms],
            "horizon": [self.min_horizon, self.max_horizon],
        }
        if self.beta_priors:
            trained["beta_priors"] = [list(pair) for pair in self.beta_priors]
            trained["skewed_fraction"] = self.skewed_fraction
            if self.skewed_reversed_share != 0.5:
                trained["skewed_reversed_share"] = self.skewed_reversed_share
            if self.skewed_told_halves:
                trained["skewed_labels"] = {half: list(pair) for half, pair in HALF_PRIORS.items()}
        if self.beta_family_fraction:
            trained["beta_family_fraction"] = self.beta_family_fraction
        if self.one_untried_arm:
            trained["one_untried_arm"] = True
        if self.exact_fraction:
            trained["exact"] = {
                "fraction": self.exact_fraction,
                "cells": [list(cell) for cell in self.exact_cells],
                "temperature": self.exact_temperature,
                "beta_priors": [list(pair) for pair in BETA_FAMILY],
            }
            if self.exact_split_share:
                trained["exact"]["split_share_at_two_arms"] = self.exact_split_share
        fields: dict[str, Any] = {"env": TRAINED_ENV, "trained_range": trained}
        if self.teacher:
            fields["teacher"] = {"checkpoint": self.teacher, "weights_sha256": self._teacher_sha256}
        if self.family_index:
            fields["family_index"] = {
                "beta_priors": [list(pair) for pair in BETA_FAMILY],
                "evidence_power": self.family_index_power,
            }
            if self.family_index_split_weight:
                fields["family_index"]["split_weight"] = self.family_index_split_weight
            if self.family_index_split_power:
                fields["family_index"]["split_power"] = self.family_index_split_power
            if self.family_index_fresh_news:
                fields["family_index"]["fresh_news"] = self.family_index_fresh_news
        return fields

    def check(self) -> None:
        """The shared checks; the model's fields build a :class:`GeneralistConfig`."""
        super().check()
        for pair in self.beta_priors:
            if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                raise ValueError(f"GeneralistTrainConfig.beta_priors holds (a, b) pairs, got {pair!r}")
            for name, value in zip(("a", "b"), pair, strict=True):
                check_number(f"beta_priors {name}", value, 0.0, True, MAX_SCALE)
        if self.skewed_fraction > 0 and not self.beta_priors:
            raise ValueError("GeneralistTrainConfig.skewed_fraction > 0 needs beta_priors (a widened training prior)")
        if self.skewed_told_uniform and not ((self.family_index or self.teacher) and self.skewed_fraction > 0):
            raise ValueError(
                "GeneralistTrainConfig.skewed_told_uniform needs family_index or a teacher, and skewed_fraction > 0: "
                "it keeps the U[0, 1] expert on the skewed batches beside the family index or the teacher"
            )
        if self.skewed_told_halves and not self.skewed_told_uniform:
            raise ValueError(
                "GeneralistTrainConfig.skewed_told_halves needs skewed_told_uniform: it changes what the skewed "
                "batches' told index is told (each arm's half instead of U[0, 1])"
            )
        if self.exact_split_share > 0 and not (self.exact_fraction > 0 and any(k == 2 for k, _ in self.exact_cells)):
            raise ValueError(
                "GeneralistTrainConfig.exact_split_share > 0 needs exact batches (exact_fraction > 0) with a K = 2 "
                "cell in exact_cells: the split prior's DP is two-armed"
            )
        for knob in ("family_index_split_weight", "family_index_fresh_news"):
            if getattr(self, knob) and not self.family_index:
                raise ValueError(f"GeneralistTrainConfig.{knob} needs family_index (the index it joins)")
        if self.family_index_split_power and not self.family_index_split_weight:
            raise ValueError(
                "GeneralistTrainConfig.family_index_split_power needs family_index_split_weight > 0 (the split member)"
            )
        if self.family_index_split_weight == 1:
            raise ValueError(
                "GeneralistTrainConfig.family_index_split_weight must be below 1: the Beta members keep a share"
            )
        if self.teacher:  # read once: the run records these weights even if the name is later given to others
            try:
                self._teacher_sha256 = read_record(find_checkpoint(self.teacher)).meta.get("weights_sha256")
            except (FileNotFoundError, ValueError) as err:
                raise ValueError(f"GeneralistTrainConfig.teacher={self.teacher!r}: {err}") from err
        if self.teacher and self.family_index:
            raise ValueError("GeneralistTrainConfig: a teacher and family_index both label the batches; keep one")
        if self.beta_family_fraction > 0 and not (self.teacher or self.family_index):
            raise ValueError(
                "GeneralistTrainConfig.beta_family_fraction > 0 needs a teacher or family_index: the Gittins expert "
                "told each instance's own Beta prior would need a table per instance"
            )
        for cell in self.exact_cells:
            if not isinstance(cell, (list, tuple)) or len(cell) != 2 or not all(isinstance(v, int) for v in cell):
                raise ValueError(f"GeneralistTrainConfig.exact_cells holds [K, T] pairs of integers, got {cell!r}")
            k, horizon = cell
            if k < 2 or horizon < 1:
                raise ValueError(f"GeneralistTrainConfig.exact_cells: [K, T] = {cell} needs K >= 2 and T >= 1")
            states = math.comb(horizon + 2 * k, 2 * k)
            if states > MAX_EXACT_STATES:
                raise ValueError(
                    f"GeneralistTrainConfig.exact_cells: the DP of [K, T] = {cell} holds {states:,} count states, "
                    f"more than {MAX_EXACT_STATES:,}"
                )
        if self.exact_fraction > 0 and not self.exact_cells:
            raise ValueError("GeneralistTrainConfig.exact_fraction > 0 needs exact_cells")
        if self.eval_every:  # the evaluation reads the Gittins table, built for max_horizon
            self.check_order(("eval_horizon", "max_horizon"))
        try:
            GeneralistConfig.from_dict(self.model)
        except (TypeError, ValueError) as err:
            raise ValueError(f"GeneralistTrainConfig.model={self.model!r} is not a GeneralistConfig: {err}") from err


@dataclass
class Batch:
    """One training batch: B trajectories of one (K, T) and their labels at Q query steps."""

    actions: np.ndarray
    """(B, T) arms pulled."""
    rewards: np.ndarray
    """(B, T) rewards."""
    query_steps: np.ndarray
    """(B, Q) decision steps t (0-based) of the loss."""
    targets: np.ndarray
    """(B, Q, K) target action distributions at the query steps."""
    num_arms: int
    """K."""
    horizon: int
    """T."""
    prior: tuple[float, float] = (1.0, 1.0)
    """(a, b) of the Beta prior whose Gittins index labelled the batch (:func:`sample_prior`); (1, 1) when
    every instance has its own prior or a teacher or the DP labels it."""
    dropped: np.ndarray | None = None
    """(B, Q, K) arms left out of the loss at each query (``one_untried_arm``: the untried arms but the first);
    None: none."""

    @property
    def size(self) -> int:
        """B."""
        return self.actions.shape[0]

    def rows(self, index: np.ndarray) -> Batch:
        """The batch of the trajectories ``index`` (a data-parallel rank's share)."""
        arrays = ("actions", "rewards", "query_steps", "targets")
        dropped = None if self.dropped is None else self.dropped[index]
        return dataclasses.replace(self, dropped=dropped, **{name: getattr(self, name)[index] for name in arrays})


def gittins_targets(index: np.ndarray, temperature: float) -> np.ndarray:
    """Target distributions (..., K) from scores (..., K), Gittins indices or a teacher's logits.

    Uniform over the maximisers (``temperature`` 0) or softmax(scores / temperature).
    """
    if temperature > 0:
        z = (index - index.max(axis=-1, keepdims=True)) / temperature
        p = np.exp(z)
    else:
        p = (index == index.max(axis=-1, keepdims=True)).astype(np.float64)
    return p / p.sum(axis=-1, keepdims=True)


class FamilyBayesExpert:
    """The family-Bayes DP's advantages at B runs' counts (exact batches; :func:`family_bayes_advantages`)."""

    def __init__(self, advantages: list[np.ndarray], b: int, k: int) -> None:
        self.advantages, self.stats = advantages, ArmStatistics(b, k)
        self.ranker = CompositionRanker(len(advantages), 2 * k)

    def scores(self, t: int) -> np.ndarray:
        """A(x_t, k) (B, K) before step t, x_t = (s_1, f_1, ..., s_K, f_K) of steps s < t."""
        return self.advantages[t][self.ranker.rank(count_states(self.stats))]

    def tell(self, actions: np.ndarray, rewards: np.ndarray) -> None:
        """Count step t's pulls (0/1 rewards)."""
        self.stats.update(actions, rewards)


IndexOfCounts = Callable[[np.ndarray, np.ndarray, int], np.ndarray]
"""An index (B, K) of the arms' successes, failures (B, K) and the pulls left."""


class CountIndexExpert:
    """An index of B runs' arms read from their counts (the Gittins expert and the family Gittins index).

    ``score(s, f, m)`` gives the index (B, K) from the successes s, failures f and m = T - t pulls left: a
    Gittins table's ``lookup``, or :meth:`FamilyGittinsIndex.scores`.
    """

    def __init__(self, score: IndexOfCounts, b: int, k: int, horizon: int) -> None:
        self.score, self.stats, self.horizon = score, ArmStatistics(b, k), horizon

    def scores(self, t: int) -> np.ndarray:
        """The index (B, K) before step t."""
        s = self.stats.sums.astype(np.int64)
        return self.score(s, self.stats.counts.astype(np.int64) - s, self.horizon - t)

    def tell(self, actions: np.ndarray, rewards: np.ndarray) -> None:
        """Count step t's pulls (0/1 rewards)."""
        self.stats.update(actions, rewards)


class TeacherExpert:
    """A trained generalist's logits for B runs, played through its cache (distillation)."""

    def __init__(self, teacher: GeneralistTransformer, b: int, k: int, horizon: int) -> None:
        self.play = ModelPlay(teacher, b, EnvInfo(num_actions=k, horizon=horizon))

    def scores(self, t: int) -> np.ndarray:
        """The teacher's logits (B, K) before step t."""
        return self.play.logits(None).cpu().numpy()

    def tell(self, actions: np.ndarray, rewards: np.ndarray) -> None:
        """Feed step t's outcome to the teacher's cache."""
        self.play.tell(actions, rewards)


Expert = CountIndexExpert | TeacherExpert | FamilyBayesExpert
"""What scores the arms of a batch's runs: it labels the queries and, without DAgger, plays."""


@dataclass
class Experts:
    """Where the batches' labels come from (the module docstring says which batch takes which)."""

    gittins: Callable[[float, float], GittinsTable] | None = None
    """The Gittins table of the prior Beta(a, b), built for ``max_horizon`` (no ``teacher``)."""
    teacher: GeneralistTransformer | None = None
    """The distillation's teacher, in place of the Gittins expert."""
    exact: Callable[[int, int], list[np.ndarray]] | None = None
    """The family-Bayes DP's advantages per layer of (K, T) (exact batches)."""
    family: FamilyGittinsIndex | None = None
    """The family Gittins index, in place of the Gittins expert (``family_index``)."""


def family_expert(cfg: GeneralistTrainConfig) -> FamilyGittinsIndex:
    """The family Gittins index that labels ``cfg``'s batches (``family_index``).

    The 16 priors (and the split member with ``family_index_split_weight``, its evidence at
    ``family_index_split_power``; the fresh news at ``family_index_fresh_news``), runs up to ``max_horizon``,
    evidence power ``family_index_power``, tables in ``table_cache``.
    """
    return FamilyGittinsIndex(
        cfg.max_horizon,
        BETA_FAMILY,
        cache_dir=cfg.table_cache,
        evidence_power=cfg.family_index_power,
        split_weight=cfg.family_index_split_weight,
        split_power=cfg.family_index_split_power or None,
        fresh_news=cfg.family_index_fresh_news,
    )


def rollout(
    expert: Expert,
    means: np.ndarray,
    horizon: int,
    epsilon: np.ndarray,
    rng: np.random.Generator,
    model: GeneralistTransformer | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Trajectories of the eps-expert (``model`` None) or of eps-greedy model play on arms ``means`` (B, K).

    The bandits are a :class:`~icrl_gym.envs.bandit_core.BanditBatch` of Bernoulli arms with means
    ``means`` drawing from ``rng``; the expert scores every step whoever plays (the Gittins index of
    the arms' counts, or a teacher's logits).  Returns actions (B, T), rewards (B, T) and the expert's
    scores (B, T, K) before every step.
    """
    b, k = means.shape
    bandits = BanditBatch(bernoulli_bandit_spec(num_arms=k, horizon=horizon), b, rng, w_star=means)
    index = np.zeros((b, horizon, k), dtype=np.float32)
    player = None if model is None else ModelPlay(model, b, EnvInfo(num_actions=k, horizon=horizon))

    def choose(t: int) -> np.ndarray:
        index[:, t] = expert.scores(t)
        if player is None:  # the expert, ties broken at random
            best = index[:, t] == index[:, t].max(axis=1, keepdims=True)
            greedy = (best * rng.random((b, k))).argmax(axis=1)
        else:
            greedy = player.greedy(None)
        return epsilon_greedy(greedy, epsilon, k, rng)

    def on_step(t: int, actions: np.ndarray, outcome: dict[str, Any]) -> None:
        expert.tell(actions, outcome["reward"])
        if player is not None:
            player.tell(actions, outcome["reward"])

    runs = play(bandits, horizon, choose, on_step)
    return runs.actions, runs.rewards, index


def family_mixture_means(rng: np.random.Generator, b: int, k: int) -> np.ndarray:
    """Arm means (B, K) of an exact batch, from the mixture the family-Bayes DP is optimal for.

    Each instance draws one (a, b) of :data:`BETA_FAMILY` uniformly and its K arms' means iid Beta(a, b).
    """
    pairs = np.array(BETA_FAMILY)[rng.integers(len(BETA_FAMILY), size=b)]
    return rng.beta(pairs[:, :1], pairs[:, 1:], (b, k))


def skewed_draw(
    rng: np.random.Generator, b: int, k: int, reversed_share: float = 0.5
) -> tuple[np.ndarray, BanditPrior]:
    """B instances (B, K) of the skewed priors, the environment's own draws, and the prior drawn.

    The reversed prior (the first floor(K/2) arms low) with probability ``reversed_share``, else the skewed one.
    """
    skewed = BanditPrior.SKEWED_REVERSED if rng.random() < reversed_share else BanditPrior.SKEWED
    return sample_w_star(bernoulli_bandit_spec(k, prior=skewed), rng, b), skewed


HALF_PRIORS = {"high": (6.0, 2.0), "low": (2.0, 6.0)}
"""Beta priors with the mean and variance of U[1/2, 1] (3/4, 1/48) and of U[0, 1/2] (1/4, 1/48): a + b + 1 =
m (1 - m) / v = 9."""


def halves_index(tables: Callable[[float, float], GittinsTable], prior: BanditPrior, k: int) -> IndexOfCounts:
    """The Gittins index told each arm's half of a skewed prior (``skewed_told_halves``), as a function of the counts.

    The first floor(K/2) arms are high under 'skewed' and low under 'skewed_reversed' (:data:`HALF_PRIORS`).
    """
    first = "high" if prior == BanditPrior.SKEWED else "low"
    rest = "low" if first == "high" else "high"
    head, tail = tables(*HALF_PRIORS[first]), tables(*HALF_PRIORS[rest])
    half = k // 2

    def score(s: np.ndarray, f: np.ndarray, m: int) -> np.ndarray:
        return np.concatenate([head.lookup(s[:, :half], f[:, :half], m), tail.lookup(s[:, half:], f[:, half:], m)], 1)

    return score


def sample_prior(
    cfg: GeneralistTrainConfig, rng: np.random.Generator, b: int, k: int
) -> tuple[np.ndarray, tuple[float, float], BanditPrior | None]:
    """The arm means (B, K) of a batch, the (a, b) of the Gittins prior that labels it and its skewed prior (or None).

    The skewed and Beta means are the environment's own draws (:func:`~icrl_gym.envs.bandit_core.sample_w_star`).
    """
    if cfg.beta_family_fraction and rng.random() < cfg.beta_family_fraction:  # no draw when 0: old runs replay
        draw = draw_instance_priors(bernoulli_bandit_spec(k, prior=BanditPrior.BETA_FAMILY), rng, b) or {}
        return draw["w"], (1.0, 1.0), None  # each instance's arms iid Beta(a, b), its own (a, b)
    if not cfg.beta_priors:
        return rng.random((b, k)), (1.0, 1.0), None
    if rng.random() < cfg.skewed_fraction:
        means, skewed = skewed_draw(rng, b, k, cfg.skewed_reversed_share)
        return means, (1.0, 1.0), skewed
    a, beta = (float(x) for x in cfg.beta_priors[int(rng.integers(len(cfg.beta_priors)))])
    means = sample_w_star(bernoulli_bandit_spec(k, prior=BanditPrior.BETA, prior_a=a, prior_b=beta), rng, b)
    return means, (a, beta), None


def exact_means(cfg: GeneralistTrainConfig, rng: np.random.Generator, b: int, k: int) -> np.ndarray:
    """The arm means (B, K) of an exact batch.

    At K = 2, with probability ``exact_split_share``, the split prior's (one arm ~ U[1/2, 1], the other
    ~ U[0, 1/2], which one uniform per batch), else the 16 Beta priors' mixture.
    """
    if k == 2 and cfg.exact_split_share and rng.random() < cfg.exact_split_share:  # no draw when 0: old runs replay
        return skewed_draw(rng, b, k)[0]
    return family_mixture_means(rng, b, k)


def exact_advantages(split_share: float, k: int, horizon: int, cache_dir: str | None = None) -> list[np.ndarray]:
    """The exact batches' labels per layer (the advantages A(x, k) over the layer's ranked states).

    The family-Bayes DP's, or at K = 2 with ``split_share`` > 0 those of the DP of the mixture with the split
    prior (:func:`~icrl_gym.training.split_prior.split_weights`).  With ``cache_dir`` they are kept there
    between processes (:func:`exact_cache_path`): the DP takes minutes at K = 2, T = 200 (about 6 min of one
    core, 0.55 GB) and K = 3, T = 50 (1.5 min, 0.35 GB), which every start of a run would otherwise spend again.
    A missing, truncated or inconsistent file is rebuilt and replaced atomically; a folder that cannot be
    written costs only the rebuild in a later process (one ``RuntimeWarning`` per folder, as the Gittins tables').
    """
    path = None if cache_dir is None else exact_cache_path(cache_dir, split_share, k, horizon)
    if path is not None:
        cached = load_exact_advantages(path, k, horizon)
        if cached is not None:
            return cached
        if path.exists():
            warnings.warn(f"ignoring the corrupt exact-batch cache {path}", RuntimeWarning, stacklevel=2)
    if k == 2 and split_share:
        layers = SplitMixture(horizon).advantages(split_weights(split_share))
    else:
        layers = family_bayes_advantages(k, horizon, np.array(BETA_FAMILY))
    if path is not None:
        try:
            atomic_write(path, lambda fh: np.savez(fh, *layers))
        except OSError as err:  # a file where the folder should be, a read-only folder, a full disk
            kept = "the advantages are kept in memory for this process only"
            warn_unusable_cache(path.parent, err, "exact-batch", kept)
    return layers


EXACT_CACHE_VERSION = 1
"""Part of every exact-batch cache file's name: raised when the DP or the split prior changes what it returns
(the test suite holds the DP to its values on small cells under each version, so such a change fails until it is)."""


def exact_cache_path(cache_dir: str | os.PathLike, split_share: float, k: int, horizon: int) -> Path:
    """The cache file of the exact advantages of (K, T) (the split share only where it applies: K = 2)."""
    share = f"_split{float(split_share):g}" if k == 2 and split_share else ""
    return Path(cache_dir) / f"exact_advantages_K{int(k)}_T{int(horizon)}{share}_v{EXACT_CACHE_VERSION}.npz"


def load_exact_advantages(path: str | os.PathLike, k: int, horizon: int) -> list[np.ndarray] | None:
    """The advantages stored at ``path`` if they are a whole, valid set for (K, T), else None.

    Valid: T layers of float32 (N_n, K) with N_n = C(n + 2K - 1, 2K - 1) count states in layer n, finite and
    at most 0 (an advantage is Q(x, k) - max_k' Q(x, k')).  Read without pickles.
    """
    try:
        with np.load(path, allow_pickle=False) as stored:
            if len(stored.files) != horizon:  # another horizon's set: nothing read
                return None
            layers = [stored[f"arr_{n}"] for n in range(horizon)]
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile):  # missing, truncated, another set
        return None
    for n, layer in enumerate(layers):
        if layer.dtype != np.float32 or layer.shape != (math.comb(n + 2 * k - 1, 2 * k - 1), k):
            return None
        if layer.size and not (np.isfinite(layer).all() and layer.max() <= 0.0):
            return None
    return layers


def sample_batch(
    cfg: GeneralistTrainConfig,
    experts: Experts,
    rng: np.random.Generator,
    model: GeneralistTransformer | None = None,
) -> Batch:
    """Draw (K, T), the prior, B instances and their trajectories (the expert's, or the model's when given).

    ``experts``: the Gittins tables, or the teacher (distillation), and the exact DP's advantages.
    """

    def size(k: int, horizon: int) -> int:
        b = round(cfg.cost_per_batch / (cfg.queries * k * (400 + horizon)))
        return int(np.clip(b, cfg.min_batch, cfg.max_batch))

    expert: Expert
    temperature, prior = cfg.label_temperature, (1.0, 1.0)
    if cfg.exact_fraction and rng.random() < cfg.exact_fraction:  # no draw when 0: old runs replay
        k, horizon = (int(v) for v in cfg.exact_cells[int(rng.integers(len(cfg.exact_cells)))])
        b = size(k, horizon)
        means = exact_means(cfg, rng, b, k)
        if experts.exact is None:
            raise ValueError("an exact batch needs the family-Bayes DP (Experts.exact)")
        expert, temperature = FamilyBayesExpert(experts.exact(k, horizon), b, k), cfg.exact_temperature
    else:
        k = int(rng.integers(cfg.min_arms, cfg.max_arms + 1))
        horizon = int(round(math.exp(rng.uniform(math.log(cfg.min_horizon), math.log(cfg.max_horizon)))))
        b = size(k, horizon)
        means, prior, skewed = sample_prior(cfg, rng, b, k)
        told_uniform = skewed is not None and cfg.skewed_told_uniform  # the told expert's batch whatever else labels
        if told_uniform:
            temperature = cfg.told_uniform_temperature
        if experts.teacher is not None and not told_uniform:
            expert = TeacherExpert(experts.teacher, b, k, horizon)
        elif experts.family is not None and not told_uniform:
            expert = CountIndexExpert(experts.family.scores, b, k, horizon)
        elif told_uniform and cfg.skewed_told_halves and skewed is not None and experts.gittins is not None:
            expert = CountIndexExpert(halves_index(experts.gittins, skewed, k), b, k, horizon)
        elif experts.gittins is not None:
            expert = CountIndexExpert(experts.gittins(*prior).lookup, b, k, horizon)
        else:
            raise ValueError("a batch needs the Gittins tables or a teacher (Experts)")
    epsilon = rng.uniform(0.0, cfg.max_epsilon, b)
    actions, rewards, index = rollout(expert, means, horizon, epsilon, rng, model)
    query_steps = rng.integers(0, horizon, (b, cfg.queries))
    scores = index[np.arange(b)[:, None], query_steps].astype(np.float64)
    dropped = untried_but_one(actions, query_steps, k) if cfg.one_untried_arm else None
    if dropped is not None:
        scores[dropped] = -np.inf
    targets = gittins_targets(scores, temperature)
    return Batch(actions, rewards, query_steps, targets, k, horizon, prior, dropped)


def untried_but_one(actions: np.ndarray, query_steps: np.ndarray, num_arms: int) -> np.ndarray:
    """(B, Q, K): the untried arms at each query but the first of them, the arms ``one_untried_arm`` leaves out.

    An arm is untried at query step t (``query_steps``, (B, Q)) if ``actions`` (B, T) holds no pull of it before t;
    the first untried arm (the lowest index) stays, so the tried arms and one untried arm remain.
    """
    pulled = actions[:, :, None] == np.arange(num_arms)  # (B, T, K)
    first_pull = np.where(pulled.any(axis=1), pulled.argmax(axis=1), actions.shape[1])  # (B, K)
    untried = first_pull[:, None, :] >= query_steps[:, :, None]  # (B, Q, K)
    kept = untried.argmax(axis=-1)  # the first untried arm (0 where none: nothing is dropped then)
    return untried & (np.arange(num_arms) != kept[..., None])


def batch_loss(
    model: GeneralistTransformer | torch.nn.Module, batch: Batch, device: torch.device
) -> tuple[torch.Tensor, dict[str, float]]:
    """The model's forward pass for training: cross-entropy to the targets, and the KL and argmax-agreement metrics.

    ``model`` may be the DistributedDataParallel wrapper of a :class:`GeneralistTransformer`.
    """
    logits = model(
        torch.as_tensor(batch.actions, device=device),
        torch.as_tensor(batch.rewards, dtype=torch.float32, device=device),
        torch.as_tensor(batch.query_steps, device=device),
        batch.horizon,
        batch.num_arms,
    )  # (B, Q, K)
    if batch.dropped is not None:  # out of the softmax; their target mass is 0, so -1e4 adds 0 x finite
        logits = logits.masked_fill(torch.as_tensor(batch.dropped, device=device), -1e4)
    return soft_label_loss(logits, torch.as_tensor(batch.targets, dtype=torch.float32, device=device))


def evaluate_against_gittins(
    model: GeneralistTransformer, num_arms: int, horizon: int, instances: int, seed: int, table_cache: str
) -> tuple[float, float, float]:
    """Mean regret (and its s.e.) of the greedy model and the Gittins agent's mean regret, on common instances.

    Both play :func:`icrl_gym.data.trajectories.evaluate_regret` with the same ``seed``: the same
    instances and the same reward noise (common random numbers).
    """
    spec = bernoulli_bandit_spec(num_arms=num_arms, horizon=horizon)
    learned = GeneralistAgent.from_model(model, greedy=True)
    expert = Gittins(horizon=horizon, cache_dir=table_cache)
    ours = evaluate_regret(spec, learned, instances, seed=seed, batch_size=instances).sum(axis=1)
    gittins = evaluate_regret(spec, expert, instances, seed=seed, batch_size=instances).sum(axis=1)
    return float(ours.mean()), float(ours.std(ddof=1) / math.sqrt(instances)), float(gittins.mean())


def grow_blocks(model: GeneralistTransformer, state: dict[str, torch.Tensor], layers: int) -> None:
    """Load ``state``, the weights of the same model with ``layers`` blocks, into ``model``'s first blocks.

    Each further block starts as the identity: a pre-LayerNorm block adds x + W_o f(LN(x)) per sublayer, so with
    the three output projections W_o (the cross-attention's, the arms' self-attention's and the MLP's second
    layer) and their biases at zero it returns its input, and the grown model's logits are the checkpoint's
    (Zhang, Dauphin & Ma 2019, "Fixup": a residual branch that starts at zero).  The gradients of those
    projections are not zero, so the blocks learn from the first step.
    """
    keys = set(model.state_dict())
    added = {key for key in keys if key.startswith("blocks.") and int(key.split(".")[1]) >= layers}
    if set(state) != keys - added:
        raise ValueError(f"the checkpoint does not hold this model's first {layers} blocks and its other weights")
    model.load_state_dict(state, strict=False)
    with torch.no_grad():
        for block in list(model.blocks)[layers:]:
            assert isinstance(block, Block)
            for projection in (block.cross.out, block.self_attn.out, block.mlp[-1]):
                assert isinstance(projection, torch.nn.Linear)
                projection.weight.zero_()
                projection.bias.zero_()


def _init_from(
    model: GeneralistTransformer, checkpoint: str, grow: bool = False
) -> tuple[float, str | None, dict[str, Any] | None]:
    """Load ``checkpoint``'s weights into ``model``; its training wall seconds, weights' SHA-256 and play defaults.

    The play defaults are the record's ``play`` field (:func:`~icrl_gym.checkpoint.set_play`; None where it has
    none).  The architecture must be the same.

    ``checkpoint`` is anything :func:`~icrl_gym.checkpoint.find_checkpoint` reads: a shipped model's name, a
    checkpoint stem or file, or a training run's folder (its last checkpoint).  With ``grow`` it may hold fewer
    blocks (:func:`grow_blocks`).
    """
    state, meta = read_checkpoint(find_checkpoint(checkpoint))
    ours = json.loads(json.dumps(model.config.to_dict()))  # as stored: tuples are lists
    stored = meta.get("model")
    depth = ours["n_layers"]
    if grow and isinstance(stored, dict) and {**stored, "n_layers": depth} == ours and stored["n_layers"] < depth:
        grow_blocks(model, state, int(stored["n_layers"]))
    elif stored != ours:
        raise ValueError(
            f"init_checkpoint {checkpoint} holds a model {stored}, not this run's {model.config.to_dict()}"
        )
    else:
        model.load_state_dict(state)
    return float(meta.get("training", {}).get("wall_time_s", 0.0)), meta.get("weights_sha256"), meta.get(PLAY_FIELD)


def train(cfg: GeneralistTrainConfig, echo: bool = True) -> GeneralistTransformer:
    """Train (or resume) the run in ``cfg.out_dir``; returns the model.  See the module docstring."""

    def build(device: torch.device, ctx: DistContext) -> GeneralistTrainer[GeneralistTransformer, Any]:
        model = GeneralistTransformer(GeneralistConfig.from_dict(cfg.model)).to(device)

        def tables(a: float, b: float) -> GittinsTable:  # built once per prior, then kept in memory and on disk
            return cached_gittins_table(cfg.max_horizon, cfg.table_cache, a, b)

        def evaluate(step: int, log: Logger) -> dict[str, Any]:
            mean, se, eval_gittins = evaluate_against_gittins(
                model, cfg.eval_arms, cfg.eval_horizon, cfg.eval_instances, 1, cfg.table_cache
            )
            log(
                f"eval step {step}: K={cfg.eval_arms} T={cfg.eval_horizon} regret {mean:.2f} +- {se:.2f} "
                f"(Gittins {eval_gittins:.2f}, {cfg.eval_instances} instances, seed 1)"
            )
            return {"step": step, "eval_regret": round(mean, 4), "eval_gittins": round(eval_gittins, 4)}

        def init() -> tuple[float, str, dict[str, Any] | None]:
            if not cfg.init_checkpoint:
                return 0.0, "", None
            wall, sha256, play = _init_from(model, cfg.init_checkpoint, cfg.init_grow)
            carried = f"; its play defaults carried: {play['defaults']}" if play else ""
            return (
                wall,
                f"initialised from {cfg.init_checkpoint} ({wall / 3600:.2f} h of training counted in the budget"
                f"{carried})",
                {"checkpoint": cfg.init_checkpoint, "weights_sha256": sha256, **({PLAY_FIELD: play} if play else {})},
            )

        # built once per (K, T), kept in the table cache between starts
        exact = functools.cache(partial(exact_advantages, cfg.exact_split_share, cache_dir=cfg.table_cache))
        experts = Experts(gittins=tables, exact=exact)
        if cfg.family_index:
            experts.family = family_expert(cfg)
        if cfg.teacher:
            experts.teacher, _ = load_checkpoint(
                find_checkpoint(cfg.teacher), device, kind=CheckpointKind.GENERALIST_TRANSFORMER
            )
        return GeneralistTrainer(model, partial(sample_batch, cfg, experts), batch_loss, evaluate, init=init)

    return train_generalist(cfg, echo, build)


def main(argv: list[str] | None = None) -> None:
    """``python -m icrl_gym.training.generalist CONFIG.json [key=value ...]`` (see :func:`.loop.main`)."""
    run_main(argv, __doc__, GeneralistTrainConfig, train)


if __name__ == "__main__":
    main()
