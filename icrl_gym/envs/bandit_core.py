"""Batched stochastic bandit simulator shared by the linear and Bernoulli environments.

Section 4.1 and Section 5 of the paper: an instance is a parameter
w* in R^d and action sets A_t = {a_{t,1}, ..., a_{t,A}} in R^d; pulling arm k at step t returns
r_t = <a_{t,k}, w*> + eps_t (Gaussian noise) or r_t ~ Bern(<a_{t,k}, w*>) (one-hot arms).

:class:`BanditBatch` holds B independent instances as arrays and advances all of them in one
call, so that a single environment is a batch of one and thousands of instances step at numpy
speed.  It never owns randomness: the caller passes a ``np.random.Generator`` (the
environment's ``self.np_random``).  The noise of step t is drawn as one number per instance,
independently of the arm pulled, so two algorithms run under the same seed see the same
instances *and* the same noise (common random numbers).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from icrl_gym.config import Choice, DictConfig
from icrl_gym.envs.prior_family import FAMILY_PRIORS, sample_beta_priors, sample_noise, sample_prior, sample_sphere
from icrl_gym.envs.run_batch import RunBatch
from icrl_gym.envs.validation import (
    MAX_SCALE,
    as_float_array,
    check_finite,
    check_in_range,
    integer_problem,
    number_problem,
    plain,
)


class BanditArms(Choice):
    """The action vectors of a bandit (:attr:`BanditSpec.arms`)."""

    UNIFORM = "uniform"
    """Rows iid Unif([-1, 1]^d)."""
    ONE_HOT = "one_hot"
    """The standard basis e_1..e_d (A = d): a K-armed bandit."""
    GAUSSIAN = "gaussian"
    """Rows iid N(0, I_d / d), so E ||a||^2 = 1."""
    SPHERE = "sphere"
    """Rows uniform on the unit sphere."""


class BanditReward(Choice):
    """The reward model of a bandit (:attr:`BanditSpec.reward`)."""

    GAUSSIAN = "gaussian"
    """r = <a, w*> + N(0, sigma^2)."""
    BERNOULLI = "bernoulli"
    """r ~ Bern(<a, w*>) (one-hot arms, means in [0, 1])."""


class BanditPrior(Choice):
    """The prior over w* of a bandit (:attr:`BanditSpec.prior`)."""

    UNIFORM = "uniform"
    """w* ~ Unif([prior_low, prior_high]^d)."""
    GAUSSIAN = "gaussian"
    """w* ~ N(0, prior_var I_d)."""
    BETA = "beta"
    """Coordinates of w* iid Beta(prior_a, prior_b)."""
    SPHERE = "sphere"
    """w* uniform on the unit sphere S^{d-1}."""
    ONE_COORDINATE = "one_coordinate"
    """w* = s e_i: one coordinate i ~ Unif{1..d} is s ~ N(0, prior_var), the others 0."""
    HIERARCHICAL = "hierarchical"
    """A member of the prior family of :mod:`icrl_gym.envs.prior_family`, hyperparameters drawn per instance."""
    BOX = "box"
    """A member of the prior family, hyperparameters drawn per instance."""
    SPARSE = "sparse"
    """A member of the prior family, hyperparameters drawn per instance."""
    DIRECTION = "direction"
    """A member of the prior family, hyperparameters drawn per instance."""
    FAMILY = "family"
    """One of the four members above per instance."""
    BETA_FAMILY = "beta_family"
    """Bernoulli arm means iid Beta(a, b), a and b drawn per instance."""
    SKEWED = "skewed"
    """Split halves of [prior_low, prior_high] at its midpoint m: the first floor(d / 2) coordinates of w* ~
    Unif([m, prior_high]), the others ~ Unif([prior_low, m]) (Bernoulli arms: a few good arms first)."""
    SKEWED_REVERSED = "skewed_reversed"
    """The reverse of 'skewed': the first floor(d / 2) coordinates ~ Unif([prior_low, m]), the others ~
    Unif([m, prior_high])."""

    @property
    def skewed(self) -> bool:
        """Whether the prior splits the coordinates of w* between the two halves of [prior_low, prior_high]."""
        return self in (BanditPrior.SKEWED, BanditPrior.SKEWED_REVERSED)

    @property
    def of_family(self) -> bool:
        """Whether the prior is (a member of) the Gaussian-reward family of per-instance priors."""
        return self.value in FAMILY_PRIORS

    @property
    def per_instance(self) -> bool:
        """Whether the prior's hyperparameters are drawn per instance."""
        return self.of_family or self is BanditPrior.BETA_FAMILY


class ActionSet(Choice):
    """How often a bandit's action set is drawn (:attr:`BanditSpec.action_set`)."""

    FIXED = "fixed"
    """One action set for the whole run."""
    PER_STEP = "per_step"
    """A fresh action set every step."""


_KIND_FIELDS: tuple[tuple[str, type[Choice]], ...] = (
    ("arms", BanditArms),
    ("reward", BanditReward),
    ("prior", BanditPrior),
    ("action_set", ActionSet),
)


@dataclass(frozen=True)
class BanditSpec(DictConfig):
    """The prior over bandit instances: everything needed to draw and simulate one.

    Defaults are the paper's linear-bandit experiment (Section 5): d=5, A=10,
    T=200, w* ~ Unif([0,1]^d), one action set per run with rows iid Unif([-1,1]^d),
    Gaussian noise with standard deviation 1.5.
    """

    dim: int = 5
    """Dimension d of w* and of every action vector."""
    num_actions: int = 10
    """Number of arms A in every action set."""
    horizon: int = 200
    """Number of steps T of one in-context run (one Gymnasium episode)."""
    arms: BanditArms = BanditArms.UNIFORM
    """'uniform': action vectors iid Unif([-1,1]^d); 'one_hot': the standard basis (A = d);
    'gaussian': action vectors iid N(0, I_d / d) (so E ||a||^2 = 1); 'sphere': uniform on the unit sphere."""
    reward: BanditReward = BanditReward.GAUSSIAN
    """'gaussian': r = <a, w*> + N(0, noise_std^2); 'bernoulli': r ~ Bern(<a, w*>)."""
    noise_std: float = 1.5
    """Standard deviation of the Gaussian reward noise (ignored for Bernoulli rewards)."""
    prior: BanditPrior = BanditPrior.UNIFORM
    """'uniform': w* ~ Unif([prior_low, prior_high]^d); 'gaussian': w* ~ N(0, prior_var I_d);
    'beta': coordinates of w* iid Beta(prior_a, prior_b) (the conjugate prior of Bernoulli arms);
    'sphere': w* uniform on the unit sphere; 'one_coordinate': w* = s e_i, i uniform, s ~ N(0, prior_var);
    'hierarchical', 'box', 'sparse', 'direction' or 'family' (one of those four per instance): a prior whose
    hyperparameters are drawn per instance (:mod:`icrl_gym.envs.prior_family`); 'beta_family': Bernoulli
    arm means iid Beta(a, b) with a, b drawn per instance.  The drawn hyperparameters are reported in
    the reset ``info["model"]["instance"]``.  'skewed': with m = (prior_low + prior_high) / 2, the first
    floor(d / 2) coordinates ~ Unif([m, prior_high]) and the others ~ Unif([prior_low, m]);
    'skewed_reversed': the first floor(d / 2) ~ Unif([prior_low, m]), the others ~ Unif([m, prior_high])
    (both for Bernoulli rewards only: the Gaussian references' matched prior is one mean and variance
    for every coordinate, which a split prior does not have)."""
    prior_low: float = 0.0
    """Lower end of the uniform prior on each coordinate of w*."""
    prior_high: float = 1.0
    """Upper end of the uniform prior on each coordinate of w*."""
    prior_var: float = 1.0
    """Variance lambda of the Gaussian prior N(0, lambda I_d) (Appendix F.1), and of the non-zero coordinate
    of the 'one_coordinate' prior."""
    action_set: ActionSet = ActionSet.FIXED
    """'fixed': one action set for the whole run; 'per_step': a fresh set every step."""
    prior_a: float = 1.0
    """First parameter a of the Beta(a, b) prior (prior='beta'); Beta(1, 1) is Unif([0, 1])."""
    prior_b: float = 1.0
    """Second parameter b of the Beta(a, b) prior (prior='beta')."""
    noise_high: float | None = None
    """None: every instance has noise_std; else sigma is log-uniform in [noise_std, noise_high] per instance."""
    noise_known: bool = True
    """Whether an agent may read sigma from the reset info (False: a user's bandit of unknown noise; the
    info still reports sigma, for the references that know the truth, with this flag)."""

    def __post_init__(self) -> None:
        for f in fields(self):  # numpy scalars become the Python numbers they hold (JSON-ready, one type)
            object.__setattr__(self, f.name, plain(getattr(self, f.name)))
        problems = [
            p for name in ("dim", "num_actions", "horizon") if (p := integer_problem(name, getattr(self, name)))
        ]
        for field, kinds in _KIND_FIELDS:  # a word becomes its member (records and configs hold the words)
            value = getattr(self, field)
            if (member := kinds.lookup(value)) is None:
                problems.append(kinds.problem(field, value))
            object.__setattr__(self, field, member)
        # (field, number, smallest allowed value, whether that value itself is refused); at most MAX_SCALE in
        # magnitude, so that no draw, mean or reward overflows
        for field, number, low, strict in (
            ("noise_std", self.noise_std, 0.0, False),
            ("prior_var", self.prior_var, 0.0, True),
            ("prior_a", self.prior_a, 0.0, True),
            ("prior_b", self.prior_b, 0.0, True),
            ("prior_low", self.prior_low, -np.inf, False),
            ("prior_high", self.prior_high, -np.inf, False),
        ):
            if (problem := number_problem(field, number, low, strict, MAX_SCALE)) is not None:
                problems.append(problem)
        if self.noise_high is not None and (p := number_problem("noise_high", self.noise_high, 0.0, True, MAX_SCALE)):
            problems.append(p)
        if not isinstance(self.noise_known, bool):
            problems.append(f"noise_known must be true or false, got {self.noise_known!r}")
        if problems:  # the checks below compare the fields: only once each has the right type
            raise ValueError("invalid bandit specification: " + "; ".join(problems))
        if not self.prior_low < self.prior_high:
            problems.append(f"prior_low must be < prior_high, got [{self.prior_low}, {self.prior_high}]")
        if self.noise_high is not None and not 0 < self.noise_std <= self.noise_high:
            problems.append(
                f"a noise range needs 0 < noise_std <= noise_high, got [{self.noise_std}, {self.noise_high}]"
            )
        if self.arms is BanditArms.ONE_HOT and self.num_actions != self.dim:
            problems.append(
                f"one-hot arms need num_actions == dim (one arm per basis vector e_i), "
                f"got num_actions={self.num_actions}, dim={self.dim}"
            )
        if self.arms is BanditArms.ONE_HOT and self.action_set is ActionSet.PER_STEP:
            problems.append("one-hot arms form a single fixed action set; use action_set='fixed'")
        beta_family = self.prior is BanditPrior.BETA_FAMILY
        if beta_family != (self.reward is BanditReward.BERNOULLI) and self.prior.per_instance:
            problems.append(
                f"prior={self.prior!r} is for {'Bernoulli' if beta_family else 'Gaussian'} rewards, "
                f"got reward={self.reward!r}"
            )
        if self.prior.skewed and self.reward is not BanditReward.BERNOULLI:
            problems.append(
                f"prior={self.prior!r} is for Bernoulli rewards (it has no common mean and variance per "
                f"coordinate for a Gaussian reference to match), got reward={self.reward!r}"
            )
        if self.reward is BanditReward.BERNOULLI:
            if self.arms is not BanditArms.ONE_HOT:
                problems.append("Bernoulli rewards need one-hot arms so that <a, w*> is a probability")
            bounded = self.prior is BanditPrior.UNIFORM or self.prior.skewed
            if self.prior in (BanditPrior.GAUSSIAN, BanditPrior.SPHERE, BanditPrior.ONE_COORDINATE) or (
                bounded and (self.prior_low < 0 or self.prior_high > 1)
            ):
                problems.append(
                    "Bernoulli rewards need arm means in [0, 1]: prior must be 'beta', or 'uniform' or 'skewed' "
                    f"inside [0, 1], got prior={self.prior!r} on [{self.prior_low}, {self.prior_high}]"
                )
        if problems:
            raise ValueError("invalid bandit specification: " + "; ".join(problems))

    @property
    def action_set_shape(self) -> tuple[int, int]:
        """Shape (A, d) of one action set, the observation of the environments."""
        return (self.num_actions, self.dim)

    @property
    def action_bounds(self) -> tuple[float, float]:
        """Elementwise bounds of the action vectors (unbounded for Gaussian arms)."""
        return {BanditArms.ONE_HOT: (0.0, 1.0), BanditArms.GAUSSIAN: (-np.inf, np.inf)}.get(self.arms, (-1.0, 1.0))

    @property
    def per_instance(self) -> bool:
        """Whether prior hyperparameters or sigma are drawn per instance."""
        return self.prior.per_instance or self.noise_high is not None

    def prior_moments(self) -> tuple[float, float]:
        """Mean and variance of every coordinate of w* under the prior (the moment-matched Gaussian).

        Unif([l, h]): ((l + h) / 2, (h - l)^2 / 12); N(0, lambda): (0, lambda);
        Beta(a, b): (a / (a + b), a b / ((a + b)^2 (a + b + 1))); the unit sphere: (0, 1 / d) (the d squared
        coordinates sum to 1 and are exchangeable); one coordinate s e_i: (0, lambda / d) (E w_j^2 = P(i = j) E s^2).
        A skewed prior has none (its halves differ): a ``ValueError``.
        """
        if self.prior.skewed:
            raise ValueError(f"prior={self.prior!r} has no common mean and variance per coordinate of w*")
        if self.prior is BanditPrior.GAUSSIAN:
            return 0.0, self.prior_var
        if self.prior is BanditPrior.SPHERE:
            return 0.0, 1.0 / self.dim
        if self.prior is BanditPrior.ONE_COORDINATE:
            return 0.0, self.prior_var / self.dim
        if self.prior is BanditPrior.BETA:
            a, b = self.prior_a, self.prior_b
            return a / (a + b), a * b / ((a + b) ** 2 * (a + b + 1.0))
        return (self.prior_low + self.prior_high) / 2, (self.prior_high - self.prior_low) ** 2 / 12

    def memory_bytes(self, batch_size: int) -> int:
        """Estimated peak memory of a :class:`BanditBatch` of ``batch_size`` instances (bytes).

        The action sets (B, A, d) twice (the current ones and a fresh draw, with ``per_step``), their
        float32 observation, w* and the per-arm means, best arms and rewards.
        """
        a, d = self.num_actions, self.dim
        return batch_size * (a * d * (8 + 8 + 4) + 8 * d + 4 * 8 * a)


def skewed_high(spec: BanditSpec) -> np.ndarray:
    """(d,) which coordinates of w* a skewed prior draws from the upper half [m, prior_high] of its range.

    'skewed': the first floor(d / 2); 'skewed_reversed': the others (the last ceil(d / 2)).
    """
    first = np.arange(spec.dim) < spec.dim // 2
    return first if spec.prior is BanditPrior.SKEWED else ~first


def sample_w_star(spec: BanditSpec, rng: np.random.Generator, n: int) -> np.ndarray:
    """Draw n parameters w* from the prior, shape (n, d).

    A skewed prior draws u ~ Unif([0, 1]) per coordinate, as the uniform prior does, and maps it to
    prior_low + (prior_high - prior_low) (u + h) / 2, h = 1 on the upper-half coordinates (:func:`skewed_high`).
    """
    if spec.prior.skewed:
        u = rng.random(size=(n, spec.dim))
        return spec.prior_low + (spec.prior_high - spec.prior_low) * (u + skewed_high(spec)) / 2
    if spec.prior is BanditPrior.GAUSSIAN:
        return rng.normal(0.0, np.sqrt(spec.prior_var), size=(n, spec.dim))
    if spec.prior is BanditPrior.BETA:
        return rng.beta(spec.prior_a, spec.prior_b, size=(n, spec.dim))
    if spec.prior is BanditPrior.SPHERE:
        return sample_sphere(rng, (n, spec.dim), spec.dim)
    if spec.prior is BanditPrior.ONE_COORDINATE:
        w = np.zeros((n, spec.dim))
        w[np.arange(n), rng.integers(0, spec.dim, n)] = rng.normal(0.0, np.sqrt(spec.prior_var), n)
        return w
    return rng.uniform(spec.prior_low, spec.prior_high, size=(n, spec.dim))


def draw_instance_priors(spec: BanditSpec, rng: np.random.Generator, n: int) -> dict[str, Any] | None:
    """The per-instance priors of n instances and their w* ("w"), or None for a fixed prior.

    Gaussian rewards: the matched Gaussian prior ``prior_mean``, ``prior_var`` (n, d), the member of the
    family (``prior_member``, an index into :data:`~icrl_gym.envs.prior_family.FAMILY_MEMBERS`) and the
    hyperparameters drawn (:func:`~icrl_gym.envs.prior_family.sample_prior`); Bernoulli rewards
    ('beta_family'): ``prior_a``, ``prior_b`` (n,), the Beta prior of every arm of the instance.
    """
    if spec.prior is BanditPrior.BETA_FAMILY:
        a, b = sample_beta_priors(rng, n)
        return {"w": rng.beta(a[:, None], b[:, None], (n, spec.dim)), "prior_a": a, "prior_b": b}
    if not spec.prior.of_family:
        return None
    draw = sample_prior(rng, spec.prior, np.full(n, spec.dim), spec.dim)
    return {
        "w": draw.w,
        "prior_mean": draw.mean,
        "prior_var": draw.var,
        "prior_member": draw.member,
        **{f"hyper_{k}": v for k, v in draw.hyper.items()},
    }


def sample_action_sets(spec: BanditSpec, rng: np.random.Generator, n: int) -> np.ndarray:
    """Draw n action sets, shape (n, A, d)."""
    if spec.arms is BanditArms.ONE_HOT:
        return np.broadcast_to(np.eye(spec.dim), (n, spec.dim, spec.dim)).copy()
    if spec.arms is BanditArms.GAUSSIAN:
        return rng.normal(0.0, 1.0 / np.sqrt(spec.dim), size=(n, spec.num_actions, spec.dim))
    if spec.arms is BanditArms.SPHERE:
        return sample_sphere(rng, (n, spec.num_actions, spec.dim), spec.dim)
    return rng.uniform(-1.0, 1.0, size=(n, spec.num_actions, spec.dim))


class BanditBatch(RunBatch[BanditSpec]):
    """B independent bandit instances advanced together (the batched core of every bandit env).

    Attributes:
        w_star: (B, d) instance parameters.
        action_sets: (B, A, d) the current action set of every instance.
        t: number of steps already taken (0 <= t <= T), shared by the whole batch.
    """

    action_indices = "arm indices"

    def __init__(
        self,
        spec: BanditSpec,
        batch_size: int,
        rng: np.random.Generator,
        w_star: np.ndarray | None = None,
        action_sets: np.ndarray | None = None,
    ) -> None:
        """The memory limit is :func:`~icrl_gym.envs.validation.memory_limit`'s (or the environment variable's)."""
        super().__init__(spec, batch_size, rng, "bandit instances")
        batch_size = self.batch_size  # the checked integer
        drawn = draw_instance_priors(spec, rng, batch_size)
        self.w_star = self._given_or_sampled(
            w_star, (batch_size, spec.dim), "w_star", sample_w_star if drawn is None else lambda *_: drawn.pop("w")
        )
        self.action_sets = self._given_or_sampled(
            action_sets, (batch_size, *spec.action_set_shape), "action_set", sample_action_sets
        )
        noise = sample_noise(rng, spec.noise_std, spec.noise_high, batch_size) if spec.noise_high is not None else None
        self.noise_std: np.ndarray = np.full(batch_size, spec.noise_std) if noise is None else noise
        """(B,) the noise level sigma of every instance."""
        self.instance: dict[str, Any] | None = None
        """The per-instance prior hyperparameters and sigma (None when the spec draws none): the reset
        ``info["model"]["instance"]``."""
        if spec.per_instance:
            drawn = {} if drawn is None else {k: v for k, v in drawn.items() if k != "w"}
            if spec.reward is BanditReward.GAUSSIAN:
                mean, var = spec.prior_moments()
                drawn.setdefault("prior_mean", np.full((batch_size, spec.dim), mean))
                drawn.setdefault("prior_var", np.full((batch_size, spec.dim), var))
                drawn["noise_std"] = self.noise_std.copy()
            self.instance = drawn
        if spec.reward is BanditReward.BERNOULLI:
            check_in_range("Bernoulli arm means w_star", self.w_star, 0.0, 1.0, "w_star")
        self.t = 0
        self._refresh_means()

    def _given_or_sampled(self, value: np.ndarray | None, shape: tuple[int, ...], name: str, sampler: Any):
        if value is None:
            return sampler(self.spec, self.rng, self.batch_size)
        arr = as_float_array(name, value)
        if arr.shape == shape[1:]:
            arr = np.broadcast_to(arr, shape)
        if arr.shape != shape:
            raise ValueError(f"{name} has shape {arr.shape}, expected {shape[1:]} or {shape}")
        check_finite(name, arr, MAX_SCALE)
        if name == "action_set":
            low, high = self.spec.action_bounds
            if self.spec.arms is BanditArms.ONE_HOT and not (arr == np.eye(self.spec.dim)).all():
                raise ValueError("action_set of one-hot arms must be the identity matrix (arm k is e_k)")
            if arr.min() < low or arr.max() > high:
                raise ValueError(
                    f"action_set entries must lie in [{low:g}, {high:g}] ({self.spec.arms!r} arms), "
                    f"got [{arr.min():g}, {arr.max():g}]"
                )
        return arr.copy()

    def model_info(self, single: bool = False) -> dict[str, Any]:
        """The reset ``info["model"]``: the spec as a dict, and ``"instance"`` when priors or sigma are per instance.

        ``"instance"`` holds arrays with one row per run (``single``: the one run's row): ``noise_std`` and the
        matched Gaussian prior ``prior_mean``, ``prior_var`` (linear), or ``prior_a``, ``prior_b`` (Bernoulli),
        and the drawn hyperparameters.
        """
        out = self.spec.to_dict()
        if self.instance is not None:
            out["instance"] = {k: (v[0] if single else v).copy() for k, v in self.instance.items()}
        return out

    def _refresh_means(self) -> None:
        # (B, A): expected reward of every arm of the current action set.
        self.means = np.einsum("bad,bd->ba", self.action_sets, self.w_star)
        self.best_arm = self.means.argmax(axis=1)
        self.best_mean = self.means[np.arange(self.batch_size), self.best_arm]

    @property
    def done(self) -> bool:
        """Whether the T steps of the run have all been taken."""
        return self.t >= self.spec.horizon

    def step(self, actions: Any) -> dict[str, np.ndarray]:
        """Pull arm ``actions[b]`` in instance b; returns rewards and regret quantities.

        Returns a dict of (B,) arrays: ``reward``, ``expected_reward`` <a_t, w*>,
        ``best_expected_reward`` max_k <a_{t,k}, w*>, ``optimal_action``.
        """
        if self.done:
            raise RuntimeError(f"the run has ended after T={self.spec.horizon} steps; call reset() first")
        actions = self.check_actions(actions)
        idx = np.arange(self.batch_size)
        expected = self.means[idx, actions]
        # One noise draw per instance per step, whatever the arm (common random numbers).
        if self.spec.reward is BanditReward.BERNOULLI:
            reward = (self.rng.random(self.batch_size) < expected).astype(np.float64)
        else:
            reward = expected + self.noise_std * self.rng.standard_normal(self.batch_size)
        out = {
            "reward": reward,
            "expected_reward": expected,
            "best_expected_reward": self.best_mean,
            "optimal_action": self.best_arm,
        }
        self.t += 1
        if self.spec.action_set is ActionSet.PER_STEP and not self.done:
            self.action_sets = sample_action_sets(self.spec, self.rng, self.batch_size)
            self._refresh_means()
        return out
