"""The family Gittins index: a Bernoulli-bandit index that infers the arms' Beta prior in context.

The arms' means are iid Beta(a_J, b_J) for a prior J of a finite family {(a_j, b_j)} (by default the 16
priors a, b in {1/2, 1, 2, 5} of :data:`BETA_FAMILY`) that the agent is not told.  Given the counts x =
(s_1, f_1, ..., s_K, f_K) the posterior of J is

    w_j(x) ∝ pi_j prod_k B(a_j + s_k, b_j + f_k) / B(a_j, b_j)

(:class:`~agents.bandit.bernoulli_bayes_optimal.FamilyPredictive`, pi uniform), and arm k's mean has the
mixture posterior sum_j w_j(x) Beta(a_j + s_k, b_j + f_k), with mean and variance

    m_k = sum_j w_j mu_jk,   v_k = sum_j w_j (sigma2_jk + mu_jk^2) - m_k^2,
    mu_jk = (a_j + s_k) / n_jk,   sigma2_jk = mu_jk (1 - mu_jk) / (n_jk + 1),   n_jk = a_j + b_j + s_k + f_k.

The index is the finite-horizon Gittins index (Gittins, Glazebrook & Weber, ch. 7) of the Beta with that
mean and variance (moment matching),

    alpha_k = m_k c_k,   beta_k = (1 - m_k) c_k,   c_k = m_k (1 - m_k) / v_k - 1,

with T - t pulls left, read from the half-integer lattice of Gittins tables
(:class:`~icrl_gym.estimators.gittins.BetaGittins`).  A one-member family is the Gittins policy told that
prior.  It is the Bernoulli sibling of the model-averaged indices of linear bandits
(:mod:`agents.bandit.model_average`): the evidence weighs the priors, the mixture's spread widens the
index while the prior is uncertain, and it narrows to the told prior's index as the evidence settles.
Two approximations separate it from the family-Bayes optimal policy
(:class:`~agents.bandit.bernoulli_bayes_optimal.BernoulliBayesOptimal` with a ``hyperprior``, computable
only for K <= 3 at short horizons): the Beta moment match of the mixture, and the index policy itself,
which ignores that one arm's pulls inform every other arm's prior.

**Tempered evidence.** The agent weighs the priors by a fractional posterior, w_j(x) ∝ pi_j L_j(x)^eta with
L_j(x) = prod_k B(a_j + s_k, b_j + f_k) / B(a_j, b_j) and eta = :data:`EVIDENCE_POWER` (``evidence_power``; 1 is
Bayes's rule).  With eta < 1 the weights settle more slowly, so a few early draws do not hand the run to a
concentrated prior whose narrow matched Beta stops exploring an arm that is in fact good; the index pays for it
with a little more exploration once the evidence is clear.  The family-Bayes policy itself uses eta = 1; the
index is not that policy (the two approximations above), and tempering is what corrects it best where it was
weakest, the U-shaped and high-mean priors at K = 20 (the results page has the measurements).

**The split member.** ``split_weight`` w > 0 adds one member that is not a Beta prior: the split prior of the
generalization grid's skewed sets (floor(K/2) or ceil(K/2) of the arms' means ~ U[1/2, 1], the rest
~ U[0, 1/2], which arms unknown; :mod:`agents.bandit.split_member`), with prior mass w and the 16 Beta members
(1 - w) pi_j.  Its tempered evidence joins the weights, and its per-arm posterior (a mixture of the two truncated
Betas, coupled across the arms by the fixed number of high arms) joins the moments.  Through the 16 Beta members
alone the index reads a skewed bandit as a U-shaped or a concentrated prior and stops exploring too early: at
K = 2 to 20 it is 0.95-1.19x the Gittins index told U[0, 1] on those sets, where the member brings it to
0.90-1.05x (1,000 runs per set; the research log on the widened Bernoulli generalist has the tables).
``split_power`` raises the member's evidence to a power of its own.  Tempered with the Beta members (eta = 1/2)
its weight lingers on bandits whose arms are all high, where it reads the arms with an early failure as the low
half; untempered (1) its weight falls as fast as the counts refute it.  At w = 0.1 under Beta(5, 1/2), K = 5, 10,
20, the index is 1.16x, 1.19x, 1.18x the told Gittins tempered, 1.11x, 1.13x, 1.11x untempered and 1.10x, 1.12x,
1.12x without the member, while on the reversed skewed set at K = 20 it is 1.06x, 1.07x and 1.17x (one draw of
1,000 runs per cell).  The member's set figures were measured while its ties among untried arms fell to float
rounding (the member reads each untried arm through the other arms' counts, by a float path of its own); the agent
now pulls the first of them, as every index agent does, which moves a set's ratio by up to 0.04 on the same runs.

**News from a fresh arm.** The index values a pull of an untried arm by that arm's own index only, so it spends a
fresh try alike where the untried arms are good and where they are bad; the family-Bayes policy also values what the
outcome says about the *other* untried arms (every member reads all arms' counts).  ``fresh_news`` lambda > 0 adds a
one-step value of that news to every untried arm's index where two or more arms are untried and two or more pulls
are left:

    bonus = lambda [p max(G_s, G_b) + (1 - p) max(G_f, G_b) - max(G_u, G_b)]^+,

with p an untried arm's predictive mean m_k, G_u the untried arms' index now, G_s and G_f another untried arm's index
after a success or a failure of that one (the family's moments with the hypothetical count, T - t - 1 pulls left),
and G_b the best pulled arm's index (0 before any pull).  The untried arms are exchangeable under every member, so
one pair of them serves all.  The bonus is the gain, in index units, of reading the next fresh arm through the
outcome of this one rather than through the counts of now; lambda is a free scale.  It costs two more evaluations of
the family's moments and tables per step.  Measured (the research log on the widened Bernoulli generalist, fifty-second
session): at K = 5 and 10 under Beta(5, 1/2) it tries more fresh arms, 0.02 of the ratio to the told Gittins lower
at w = 0.15, lambda = 20 than the index at w = 0.1, with the skewed sets level; at w = 0.2, lambda = 20 it is 0.07 of
that ratio below the same index without the news at K = 20.  Distilled into the three-block generalist it was
taken at K = 5 and only partly where the arms are many (fifty-third session).

Measured on the Bernoulli frontier's Monte-Carlo cells (K = 5, 10, 20, T = 200, the 16 priors; the
results page has the table), it is within 1.25x of the Gittins index told the prior on far more priors
than the index mixture sum_j w_j G_j, and the moment match is what makes the difference under the
concentrated priors (Beta(5, 1/2): the told prior's index once the evidence has settled, where the index
mixture keeps a share of the diffuse members' exploration).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from agents.bandit.bernoulli_bayes_optimal import FamilyPredictive, check_hyperprior, check_hyperprior_weights
from agents.bandit.index_agent import IndexAgent
from agents.bandit.split_member import SplitMember
from icrl_gym.algorithm import resolve_horizon
from icrl_gym.config import Allowed
from icrl_gym.envs.validation import check_integer, check_number
from icrl_gym.estimators.gittins import BetaGittins, gittins_cache_dir, gittins_memory_bytes
from icrl_gym.estimators.statistics import ArmStatistics

BETA_FAMILY = tuple((a, b) for a in (0.5, 1.0, 2.0, 5.0) for b in (0.5, 1.0, 2.0, 5.0))
"""The 16 Beta(a, b) priors, a, b in {1/2, 1, 2, 5}: the family of the Bernoulli frontier and its exact validation."""
EVIDENCE_POWER = 0.5
"""The agent's default eta of the tempered weights w_j ∝ pi_j L_j(x)^eta (module docstring, "Tempered evidence")."""
EVIDENCE_POWER_RANGE = Allowed(low=0, high=1, strict=True)
"""The etas allowed, (0, 1]: the agent's ``evidence_power`` and the trainer's ``family_index_power``."""


def family_moments(
    model: FamilyPredictive,
    s: np.ndarray,
    f: np.ndarray,
    power: float = 1.0,
    split: SplitMember | None = None,
    split_weight: float = 0.0,
    split_power: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Mean and variance (B, K) of every arm's mixture posterior sum_j w_j(x) Beta(a_j + s_k, b_j + f_k).

    ``s``, ``f`` (B, K) integer successes and failures; w_j(x) ∝ pi_j L_j(x)^power from every arm's counts
    (module docstring; ``power`` 1 is the posterior).  With ``split`` the split member
    (:mod:`agents.bandit.split_member`) holds ``split_weight`` of the prior mass, the Beta members the rest, and
    its weight (its evidence raised to ``split_power``, None: ``power``) and per-arm moments join the mixture.
    """
    log_w = model.log_joint(np.stack([s, f], axis=-1).reshape(len(s), -1), power)  # (B, J)
    if split is not None:
        log_split, pi = split.high_probability(s, f)
        member_power = power if split_power is None else split_power
        log_w = np.concatenate(
            [log_w + np.log1p(-split_weight), (np.log(split_weight) + member_power * log_split)[:, None]], axis=1
        )
    w = np.exp(log_w - log_w.max(axis=1, keepdims=True))
    w /= w.sum(axis=1, keepdims=True)
    a = model.priors[:, 0] + s[..., None]
    n = model.priors.sum(axis=1) + (s + f)[..., None]  # (B, K, J)
    mu = a / n
    beta_w = w[:, None, : len(model.priors)]
    mean = (beta_w * mu).sum(axis=-1)
    second = (beta_w * (mu * (1.0 - mu) / (n + 1.0) + mu**2)).sum(axis=-1)
    if split is not None:
        split_mean, split_second = split.moments(s, f, pi)
        mean = mean + w[:, -1, None] * split_mean
        second = second + w[:, -1, None] * split_second
    return mean, np.maximum(second - mean**2, 0.0)


def matched_beta(mean: np.ndarray, var: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Beta(alpha, beta) with the given mean in (0, 1) and variance: c = mean (1 - mean) / var - 1 pseudo-counts.

    A variance at or above a Bernoulli's, mean (1 - mean), has no Beta; it and a zero variance are clipped to
    c in [1e-6, 1e9] (the lattice reader clips alpha, beta >= 1/2 and to its room in any case).
    """
    c = np.clip(mean * (1.0 - mean) / np.maximum(var, 1e-300) - 1.0, 1e-6, 1e9)
    return mean * c, (1.0 - mean) * c


def check_evidence_power(value: Any, name: str = "evidence_power") -> float:
    """The tempering eta as a float in :data:`EVIDENCE_POWER_RANGE` (a ``TypeError`` or ``ValueError`` naming it)."""
    eta = check_number(name, value)
    if not EVIDENCE_POWER_RANGE.admits(eta):
        raise ValueError(f"{name} must be {EVIDENCE_POWER_RANGE} (1: the posterior, below 1: tempered), got {eta}")
    return eta


def check_split_weight(value: Any) -> float:
    """The split member's share of the prior mass as a float in [0, 1) (a ``ValueError`` naming it)."""
    share = check_number("split_weight", value)
    if not 0.0 <= share < 1.0:
        raise ValueError(f"split_weight must be in [0, 1) (the split member's share of the prior mass), got {share}")
    return share


def check_split_power(value: Any) -> float | None:
    """The split member's evidence power: None (the Beta members' eta) or a float in :data:`EVIDENCE_POWER_RANGE`."""
    return None if value is None else check_evidence_power(value, "split_power")


def check_fresh_news(value: Any) -> float:
    """The fresh-news scale lambda as a float >= 0 (a ``ValueError`` naming it; module docstring)."""
    scale = check_number("fresh_news", value)
    if not scale >= 0.0:
        raise ValueError(f"fresh_news must be >= 0 (the scale of a fresh arm's news about the others), got {scale}")
    return scale


class FamilyGittinsIndex:
    """The family Gittins index of B runs' arms from their counts (module docstring).

    ``priors`` (J, 2) the family, ``weights`` (J,) its prior mass pi (None: uniform), ``horizon`` the longest
    run, ``evidence_power`` eta of the tempered weights w_j ∝ pi_j L_j(x)^eta (module docstring); the Gittins
    tables are built for ``horizon`` plus the largest prior strength a_j + b_j (the matched Beta's
    pseudo-counts never exceed it plus the pulls), kept in ``cache_dir`` when given.  ``split_weight`` > 0 adds
    the split member (:mod:`agents.bandit.split_member`) with that share of the prior mass, its evidence raised to
    ``split_power`` (None: eta; "The split member").  ``fresh_news`` lambda > 0 adds the value of a fresh arm's
    outcome to the other untried arms ("News from a fresh arm").
    """

    def __init__(
        self,
        horizon: int,
        priors: Any = BETA_FAMILY,
        weights: Any = None,
        cache_dir: str | os.PathLike | None = None,
        evidence_power: float = 1.0,
        split_weight: float = 0.0,
        split_power: float | None = None,
        fresh_news: float = 0.0,
    ) -> None:
        grid = np.asarray(check_hyperprior(priors, "priors"), dtype=np.float64)
        self.evidence_power = check_evidence_power(evidence_power)
        self.split_weight = check_split_weight(split_weight)
        self.split_power = check_split_power(split_power)
        self.fresh_news = check_fresh_news(fresh_news)
        self.model = FamilyPredictive(grid, np.ones(len(grid)) if weights is None else np.asarray(weights), horizon)
        self.split = SplitMember(horizon) if self.split_weight > 0 else None
        self.horizon = int(horizon)
        self.tables = BetaGittins.build(self.table_horizon(horizon, grid), cache_dir)

    @staticmethod
    def table_horizon(horizon: int, priors: np.ndarray) -> int:
        """N of the lattice's tables for runs of ``horizon`` steps: T + max_j ceil(a_j + b_j) + 1."""
        return int(horizon + np.ceil(np.asarray(priors, dtype=np.float64).sum(axis=1).max()) + 1)

    def moments(self, s: np.ndarray, f: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every arm's mixture posterior mean and variance (B, K) for counts ``s``, ``f`` (:func:`family_moments`)."""
        return family_moments(self.model, s, f, self.evidence_power, self.split, self.split_weight, self.split_power)

    def plain_scores(self, s: np.ndarray, f: np.ndarray, remaining: int) -> np.ndarray:
        """G(Beta(alpha_k, beta_k), ``remaining``) (B, K) for counts ``s``, ``f`` (B, K), without the fresh news."""
        return self.tables.index(*matched_beta(*self.moments(s, f)), remaining)

    def scores(self, s: np.ndarray, f: np.ndarray, remaining: int) -> np.ndarray:
        """The index (B, K) for counts ``s``, ``f`` (B, K): :meth:`plain_scores` plus the fresh news, if any."""
        if not self.fresh_news or remaining < 2:
            return self.plain_scores(s, f, remaining)
        mean, var = self.moments(s, f)
        g = self.tables.index(*matched_beta(mean, var), remaining)
        untried = (s + f) == 0
        rows = np.nonzero(untried.sum(axis=1) >= 2)[0]
        if len(rows) == 0:
            return g
        s_r, f_r, fresh = s[rows], f[rows], untried[rows]
        at = np.arange(len(rows))
        first = fresh.argmax(axis=1)  # the arm tried; every untried arm is alike (module docstring)
        other = np.where(np.arange(s.shape[1]) == first[:, None], False, fresh).argmax(axis=1)
        best_pulled = np.where(fresh, -np.inf, g[rows]).max(axis=1)
        best_pulled = np.where(np.isfinite(best_pulled), best_pulled, 0.0)
        succeeded, failed = s_r.copy(), f_r.copy()
        succeeded[at, first] += 1
        failed[at, first] += 1
        after_success = self.plain_scores(succeeded, f_r, remaining - 1)[at, other]
        after_failure = self.plain_scores(s_r, failed, remaining - 1)[at, other]
        p = mean[rows, first]
        news = (
            p * np.maximum(after_success, best_pulled)
            + (1.0 - p) * np.maximum(after_failure, best_pulled)
            - np.maximum(g[rows, first], best_pulled)
        )
        g[rows] += np.where(fresh, self.fresh_news * np.maximum(news, 0.0)[:, None], 0.0)
        return g


class FamilyGittins(IndexAgent):
    """Pulls the arm with the largest family Gittins index (module docstring): not told the arms' prior.

    ``hyperprior`` the family of Beta priors (default :data:`BETA_FAMILY`), ``hyperprior_weights`` their
    prior mass (default uniform), ``split_weight`` the split member's share of it (0: none; "The split member" of
    the module docstring) and ``split_power`` the power of its evidence (None: ``evidence_power``), ``fresh_news``
    the scale of a fresh arm's news about the others (0: none; "News from a fresh arm"); T is the
    environment's (the constructor's ``horizon`` for runs whose environment states none).  ``cache_dir`` (else
    ``$ICRL_GYM_GITTINS_CACHE``) keeps the four lattice tables between processes (a few minutes to build at
    T = 500).
    """

    name = "family_gittins"
    binary_rewards = True
    stats: ArmStatistics
    """Successes and pulls of every arm of every run (set by ``reset``)."""
    family: FamilyGittinsIndex
    """The index of the family for this reset's horizon (set by ``reset``)."""

    def __init__(
        self,
        horizon: int | None = None,
        hyperprior: list[list[float]] | None = None,
        hyperprior_weights: list[float] | None = None,
        seed: int | None = None,
        cache_dir: str | os.PathLike | None = None,
        evidence_power: float = EVIDENCE_POWER,
        split_weight: float = 0.0,
        split_power: float | None = None,
        fresh_news: float = 0.0,
    ) -> None:
        super().__init__(temperature=0.0, seed=seed)
        self.evidence_power = check_evidence_power(evidence_power)
        self.split_weight = check_split_weight(split_weight)
        self.split_power = check_split_power(split_power)
        self.fresh_news = check_fresh_news(fresh_news)
        self.default_horizon = None if horizon is None else check_integer("horizon", horizon)
        self.horizon = self.default_horizon or 0
        self.hyperprior = check_hyperprior(BETA_FAMILY if hyperprior is None else hyperprior)
        self.hyperprior_weights = (
            None
            if hyperprior_weights is None
            else check_hyperprior_weights(hyperprior_weights, len(self.hyperprior), "hyperprior_weights")
        )
        self.cache_dir = gittins_cache_dir(cache_dir)
        self._built: FamilyGittinsIndex | None = None

    def _start(self, info: dict[str, Any]) -> None:
        self.horizon = resolve_horizon(info, self.default_horizon, "FamilyGittins")
        super()._start(info)

    def _memory_bytes(self) -> int:
        """The base statistics and the four lattice tables: one being built while the other three are held."""
        n = FamilyGittinsIndex.table_horizon(self.horizon, np.asarray(self.hyperprior))
        return super()._memory_bytes() + gittins_memory_bytes(n, 3)

    def _reset(self, w_star: np.ndarray | None) -> None:
        self.stats = ArmStatistics(self.batch_size, self.num_actions)
        if self._built is None or self._built.horizon < self.horizon:  # one index serves every shorter horizon
            self._built = FamilyGittinsIndex(
                self.horizon,
                self.hyperprior,
                self.hyperprior_weights,
                self.cache_dir,
                self.evidence_power,
                self.split_weight,
                self.split_power,
                self.fresh_news,
            )
        self.family = self._built

    def index(self, action_sets: np.ndarray) -> np.ndarray:
        """The family Gittins index of every arm with T - t pulls left."""
        remaining = self.horizon - self.t
        if remaining < 1:
            raise ValueError(f"the family Gittins index was built for T={self.horizon} steps")
        s = self.stats.sums.astype(np.int64)
        return self.family.scores(s, self.stats.counts.astype(np.int64) - s, remaining)

    def _update(self, action_sets: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        self.stats.update(actions, rewards)

    def config(self) -> dict[str, Any]:
        """Hyper-parameters (horizon None: the environment's)."""
        return {
            "name": self.name,
            "horizon": self.default_horizon,
            "hyperprior": self.hyperprior,
            "hyperprior_weights": self.hyperprior_weights,
            "evidence_power": self.evidence_power,
            "split_weight": self.split_weight,
            "split_power": self.split_power,
            "fresh_news": self.fresh_news,
        }
