"""What the two versions of the linear generalist share: configuration, cache, history and the model's frame.

The linear generalist (:mod:`icrl_gym.models.linear_generalist`) is one pretrained model for
stochastic linear bandits of any dimension d <= d_max, any number of arms A and any horizon T.  It
comes in two versions, chosen by its configuration's ``features``:

* ``"moments"`` (:class:`~icrl_gym.models.linear_generalist.MomentsLinearGeneralist`, the first
  version, the shipped ``linear-generalist-v1``): linear attention over the moment matrix of the history;
* ``"posterior"`` (:class:`~icrl_gym.models.linear_generalist_posterior.PosteriorLinearGeneralist`,
  the second version, the shipped ``linear-generalist``): closed-form posterior features of a grid of priors
  read by a per-arm network.

Both read the same history -- the raw moment matrix M_t = sum_{s<t} e_s e_s^T of the tokens
e_s = [x_{s,a_s}, r_s, 1] (and per-arm pull counts and reward sums) -- kept by one cache
(:class:`LinearGeneralistCache`), and play through the same frame (:class:`LinearGeneralistTransformer`:
padding, the prefix sums of ``forward``, the cache, ``step``).  ``LinearGeneralistTransformer(config)``
builds the version its ``features`` names (the checkpoint kind's model class, so every record loads
as before); the versions register themselves by importing this module
(:mod:`icrl_gym.models.linear_generalist` imports both).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from icrl_gym.config import NONNEGATIVE, POSITIVE, Allowed, check_fields, checked
from icrl_gym.models.generalist import NUM_STEP_FEATURES, ArmTokenConfig
from icrl_gym.models.policy import EnvInfo, PolicyOutput

D_MAX = 8
"""Largest dimension d of the arms (smaller d are zero-padded to it)."""
SKIP_SCHEDULES = ("bayes_ucb", "moss", "gittins")
"""The skip index's widths (:attr:`LinearGeneralistConfig.skip_schedule`)."""
FEATURES = ("moments", "posterior")
"""The models' ways of reading the history (``LinearGeneralistConfig.features``)."""


@dataclass
class LinearGeneralistConfig(ArmTokenConfig):
    """Architecture of :class:`LinearGeneralistTransformer` (nothing here depends on d <= d_max, A or T).

    The shared shape (:class:`~icrl_gym.models.generalist.ArmTokenConfig`) with L = 4 blocks of [linear
    cross-attention, arm self-attention, MLP]; the arm tokens are the only tokens.
    """

    n_layers: int = 4
    """Number L of [linear cross-attention, arm self-attention, MLP] blocks."""
    readouts: int = 8
    """Bilinear readouts x_k^T U_j h_k fed to every MLP."""
    arm_normaliser: bool = True
    """Add the per-arm quadratic form u_k^T M_t u_k (u_k = W_u h_k) to every head's normaliser (module docstring)."""
    history_layers: int = 0
    """Layers of the history encoder (0: none): non-causal linear self-attention over the history tokens,
    which the arms' query vectors z_k = [x_k, 0, 1] / sigma pass through too (module docstring, GD++)."""
    history_heads: int = 2
    """Heads of every history-encoder layer."""
    arm_attention: bool = False
    """Softmax self-attention across the arms of a step in every block (an index policy, as the
    expert, needs none: each arm's logit then depends on its own features and the history only)."""
    d_max: int = D_MAX
    """Arms are zero-padded to this dimension."""
    noise_estimate: bool = False
    """Play bandits of unknown sigma (given as NaN): sigma is then estimated in context from the moment matrix
    (:func:`estimate_noise`), and every arm reads whether sigma was given or estimated."""
    features: str = checked("moments", Allowed(choices=FEATURES))
    """'moments': the first version, attention over the raw moment matrix (the fields above); 'posterior': the
    second version, closed-form posterior features of a grid of priors (:mod:`icrl_gym.models.linear_posterior`)
    read by a per-arm network with attention across the arms (:class:`PosteriorArmNetwork`; it uses d_model,
    n_heads, n_layers, mlp_ratio, d_max, noise_estimate, index_width and ridge_gate), which also plays d > d_max
    on a fixed action set."""
    index_width: bool = False
    """The second version: a learned width gamma(step) added to the Bayes-UCB quantile of the skip index,
    u_k = m_k + (z_t + gamma) sd_k, gamma read from the step's features by a small MLP whose output starts at
    zero (:class:`PosteriorArmNetwork`): how much to explore is the decision a prior not told moves most."""
    ridge_gate: bool = False
    """The second version: a learned gate g(step) from the model-averaged index u toward LinUCB's,
    u' = u + g (l - u), l_k = ridge mean_k + a sigma ridge width_k (lambda = 1: LinUCB(alpha = a sigma) of the
    references), g and log a read from the step's features by a small MLP that starts at the constants
    (``gate_start``, ``gate_width_start``) (:class:`PosteriorArmNetwork`): where a tuned LinUCB beats Bayes-UCB
    (short horizons, many arms), the policy can move to it."""
    gate_start: float = checked(0.0, Allowed(low=-1.0, high=1.0))
    """The gate's g before training (0: the skip index of the model without the gate)."""
    gate_width_start: float = checked(2.0, POSITIVE)
    """LinUCB's width a before training, in posterior sds (2: LinUCB(alpha = 1) at sigma = 0.5).  Not 1: at a = 1
    the ridge index under-explores, so a gate opening from 0 is pushed below 0 before a can grow."""
    skip_schedule: str = checked("bayes_ucb", Allowed(choices=SKIP_SCHEDULES))
    """The second version: the width of the skip index u_k = m_k + z sd_k.  'bayes_ucb': z_t = Phi^{-1}(1 - 1/(t + 1)),
    the same for every arm at every horizon; 'moss': the horizon-aware z_tk = c sqrt(2 log+((T - t) sd_k^2 /
    (D sigma^2))) (:func:`~icrl_gym.models.linear_posterior.moss_quantile`), which stops exploring an arm once its
    effective pulls sigma^2 / sd_k^2 reach the steps left per direction.  Only the skip index changes: the network
    reads the Bayes-UCB features either way.  'gittins': MOSS's width, except on action sets of mutually orthogonal
    arms (the Gaussian multi-armed bandit), where each arm's width is its finite-horizon Gittins index
    (:func:`~icrl_gym.models.linear_posterior.gittins_quantile`, no constant)."""
    skip_scale: float = checked(1.0, POSITIVE)
    """The constant c of the 'moss' schedule (:attr:`skip_schedule`) on the arms the history informs."""
    skip_scale_unpulled: float = checked(1.0, POSITIVE)
    """The 'moss' schedule's c on the arms the history says nothing of (orthogonal to every arm pulled so far, as an
    unpulled arm of a multi-armed bandit: their posterior is the inferred prior;
    :func:`~icrl_gym.models.linear_generalist_posterior.informed_arms`).  With a c below 1 on the informed arms it
    explores less once every promising arm has been tried, and keeps the many-armed bandits from locking on before
    they have."""
    dense_tail_budget: float = checked(0.0, NONNEGATIVE)
    """kappa of the 'moss' constant on the informed arms of an action set whose arms are not mutually orthogonal
    (dense features; :func:`~icrl_gym.models.linear_generalist_posterior.independent_arms`): there
    c_T = min(``skip_scale``, sqrt(max(0, 1 - kappa / log T))), T the run's horizon.  A width of c sqrt(2 log T)
    posterior sds leaves an arm below its index with probability about T^(-c^2), so the regret of a run locked on
    by such an arm grows as T^(1 - c^2): c_T holds that tail at e^kappa at every horizon, and a short run takes a
    narrower width than a long one (the regret tail of a width below the regret-optimal one is heavy; Fan and
    Glynn, The fragility of optimized bandit algorithms).  The arms of a multi-armed bandit keep ``skip_scale``;
    0 leaves every informed arm at ``skip_scale``."""
    skip_evidence_power: float = checked(1.0, Allowed(low=0.0, high=1.0, strict=True))
    """The power eta of the priors' evidence in the skip index's model average on the arms the history informs only
    in part (:func:`~icrl_gym.models.linear_generalist_posterior.partly_informed_arms`), weights w_j proportional to
    p_j^eta: a generalised (tempered) posterior over the grid.  The evidence was earned on the directions pulled so
    far; at eta = 1 it can make one prior so certain of an arm's unseen direction that the arm is never tried
    again, and the run locks on for good (seen at sigma = 0.1, T = 1,000).  The features keep eta = 1."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields(self)

    @property
    def token_dim(self) -> int:
        """E = d_max + 2: [x, r, 1] / sigma."""
        return self.d_max + 2

    @property
    def encoded_dim(self) -> int:
        """Width of the encoded query vector z_k appended to the arm's features (0 without an encoder)."""
        return self.token_dim if self.history_layers else 0

    @property
    def arm_features(self) -> int:
        """[x (d_max), dimension mask (d_max), phi(t, T) (4), log sigma, (sigma given, log(1 + n - d)), z_k]."""
        return 2 * self.d_max + NUM_STEP_FEATURES + 1 + 2 * self.noise_estimate + self.encoded_dim


NOISE_PRIOR_STD, NOISE_PRIOR_COUNT, NOISE_RIDGE = 0.5, 1.0, 1e-2
"""The in-context noise estimate's prior guess s0, its weight nu0 (pseudo-observations) and ridge (module docstring)."""


def history_tokens(chosen: torch.Tensor, rewards: torch.Tensor) -> torch.Tensor:
    """Raw e_s = [x_{s,a_s}, r_s, 1] (B, S, E) from the chosen arms (B, S, d_max) and rewards (B, S)."""
    ones = torch.ones_like(rewards)
    return torch.cat([chosen, rewards.unsqueeze(-1), ones.unsqueeze(-1)], dim=-1)


def estimate_noise(moments: torch.Tensor, dim: torch.Tensor) -> torch.Tensor:
    """In-context sigma (...) from raw moment matrices (..., E, E) of runs of dimension d (broadcast to ...).

    With G = sum x x^T, b = sum x r, rr = sum r^2, n = steps (all blocks of M), the residual sum of squares
    of ridge regression is RSS = rr - b^T (G + c I)^{-1} b (c = NOISE_RIDGE), and

        sigma_hat^2 = (RSS + nu0 s0^2) / (max(n - d, 0) + nu0),

    the posterior-mean-like estimate with nu0 pseudo-observations of variance s0^2 (NOISE_PRIOR_COUNT,
    NOISE_PRIOR_STD): s0 before the data outnumber the parameters, the unbiased residual variance after.
    Computed in float64 (RSS is a difference of large sums when sigma is small).
    """
    m = moments.double()
    dmax = m.shape[-1] - 2
    gram = m[..., :dmax, :dmax] + NOISE_RIDGE * torch.eye(dmax, dtype=m.dtype, device=m.device)
    b = m[..., :dmax, dmax]
    fit = (b * torch.linalg.solve(gram, b.unsqueeze(-1)).squeeze(-1)).sum(-1)
    rss = (m[..., dmax, dmax] - fit).clamp_min(0.0)
    dof = (m[..., dmax + 1, dmax + 1] - dim.double()).clamp_min(0.0) + NOISE_PRIOR_COUNT
    return ((rss + NOISE_PRIOR_COUNT * NOISE_PRIOR_STD**2) / dof).sqrt().float()


class RunSizes(NamedTuple):
    """The horizon T, the noise level sigma (float32) and the arms' dimension d of every run, each (B,)."""

    horizon: torch.Tensor
    noise: torch.Tensor
    dims: torch.Tensor


def per_run(
    b: int,
    device: torch.device,
    horizon: torch.Tensor | int,
    noise_std: torch.Tensor | float,
    dim: torch.Tensor | int,
) -> RunSizes:
    """T, sigma (float32) and d as (B,) tensors from numbers or (B,) tensors.

    Made once for both versions, by the frame (:meth:`LinearGeneralistTransformer.forward`) and by the cache
    (:attr:`LinearGeneralistCache.run`, read at every step): a version decides from these tensors, whatever form
    the caller gave T, sigma and d in.
    """
    horizon_t = torch.as_tensor(horizon, device=device).reshape(-1).expand(b)
    noise = torch.as_tensor(noise_std, dtype=torch.float32, device=device).reshape(-1).expand(b)
    return RunSizes(horizon_t, noise, torch.as_tensor(dim, device=device).reshape(-1).expand(b))


LinearGeneralistMark = tuple[int, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, "torch.Tensor | None"]
"""A :class:`LinearGeneralistCache` before a step: steps, moments, counts, sums, fixed, last action sets."""


class LinearGeneralistCache:
    """The history of B runs as the linear attention's state: the raw moment matrices M_t (B, E, E) and t.

    It also holds what every step reads: the horizon T, the noise level sigma and the arms' dimension
    d of every run (``noise_std`` and ``dims``, (B,): from the :class:`EnvInfo`, per run where it
    gives ``run_noise_std`` / ``run_dims``, as for a batch that mixes instances in training), and the
    action sets of the latest step (from which the next step's ``prev_action`` is read).
    """

    def __init__(
        self,
        batch_size: int,
        token_dim: int,
        env_info: EnvInfo,
        device: torch.device,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        if env_info.dim is None:
            raise ValueError("the linear generalist needs the arms' dimension d (EnvInfo.dim), got None")
        self.batch_size = batch_size
        self.moments = torch.zeros(batch_size, token_dim, token_dim, device=device, dtype=dtype)
        """The raw moments (float64 for the second version: its posterior inverts them at small sigma)."""
        self.horizon = env_info.horizon
        for name in ("run_noise_std", "run_dims"):
            values = getattr(env_info, name)
            if values is not None and len(values) != batch_size:
                raise ValueError(f"EnvInfo.{name} has {len(values)} values for a cache of {batch_size} runs")
        if env_info.run_noise_std is not None:
            self.noise_std = torch.tensor(env_info.run_noise_std, dtype=torch.float32, device=device)
        else:
            sigma = float("nan") if env_info.noise_std is None else float(env_info.noise_std)
            self.noise_std = torch.full((batch_size,), sigma, dtype=torch.float32, device=device)
        """sigma (B,) of every run (NaN: unknown, estimated in context by a model trained to)."""
        if env_info.run_dims is not None:
            self.dims = torch.tensor(env_info.run_dims, dtype=torch.long, device=device)
        else:
            self.dims = torch.full((batch_size,), env_info.dim, dtype=torch.long, device=device)
        """d (B,) of every run (its arms are zero-padded to ``d_max``)."""
        self.last_action_set: torch.Tensor | None = None
        """The action sets (B, A, d) of the latest step."""
        self.steps = 0
        """Steps in the history (the next decision is at step ``steps``)."""
        self.counts = torch.zeros(batch_size, env_info.num_actions, device=device)
        """Pulls of every arm (B, A), by position in the action set (read by the second version)."""
        self.sums = torch.zeros(batch_size, env_info.num_actions, device=device, dtype=dtype)
        """Reward sums of every arm (B, A)."""
        self.fixed = torch.ones(batch_size, dtype=torch.bool, device=device)
        """Whether the action set has been the same at every step so far (B,)."""

    @property
    def run(self) -> RunSizes:
        """T, sigma and d of every run as (B,) tensors (:func:`per_run`): what every step of a version reads."""
        return per_run(self.batch_size, self.noise_std.device, self.horizon, self.noise_std, self.dims)

    def append(self, tokens: torch.Tensor) -> None:
        """Add raw history tokens e_s = [x, r, 1] (B, E) of one step."""
        tokens = tokens.to(self.moments.dtype)
        self.moments += tokens.unsqueeze(-1) * tokens.unsqueeze(-2)
        self.steps += 1

    def count(self, action: torch.Tensor, reward: torch.Tensor) -> None:
        """Add one pull per run to the per-arm statistics: arm positions (B,) and rewards (B,)."""
        rows = torch.arange(self.batch_size, device=action.device)
        self.counts[rows, action] += 1.0
        self.sums[rows, action] += reward.to(self.sums.dtype)

    def see(self, action_set: torch.Tensor) -> None:
        """Record the action sets (B, A, d) of the new step (``fixed`` turns False where they changed)."""
        last = self.last_action_set
        if last is not None:
            if last.shape != action_set.shape:
                self.fixed.zero_()
                self.counts = torch.zeros(action_set.shape[:2], device=self.counts.device)
                self.sums = torch.zeros_like(self.counts, dtype=self.sums.dtype)
            elif last is not action_set:
                self.fixed &= (last == action_set).flatten(1).all(1)
        self.last_action_set = action_set

    def reset(self) -> None:
        """Empty the history for new runs of the same environment."""
        self.moments.zero_()
        self.counts.zero_()
        self.sums.zero_()
        self.fixed.fill_(True)
        self.last_action_set = None
        self.steps = 0

    def mark(self) -> LinearGeneralistMark:
        """The cache before a step, for :meth:`rewind`: copies of what a step changes (O(B E^2), less than a step)."""
        return (
            self.steps,
            self.moments.clone(),
            self.counts.clone(),
            self.sums.clone(),
            self.fixed.clone(),
            self.last_action_set,
        )

    def rewind(self, mark: LinearGeneralistMark) -> None:
        """Take back the step after :meth:`mark`, exactly (restored from the copies: subtracting floats is inexact)."""
        self.steps, moments, self.counts, self.sums, self.fixed, self.last_action_set = mark
        self.moments.copy_(moments)


VERSIONS: dict[str, type[LinearGeneralistTransformer]] = {}
"""The versions by their ``features`` (each registers itself when its module is imported)."""


class QueryInputs(NamedTuple):
    """What a version decides from at the query steps (:meth:`LinearGeneralistTransformer._decide_queries`)."""

    history: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    moments: torch.Tensor
    query_steps: torch.Tensor
    run: RunSizes
    arm_mask: torch.Tensor | None


class LinearGeneralistTransformer(nn.Module):
    """Per-arm query transformer over a raw linear-bandit trajectory: the frame both versions share.

    ``LinearGeneralistTransformer(config)`` builds the version ``config.features`` names
    (:data:`VERSIONS`).  A version says how it decides from the history (:meth:`_decide_queries` for
    whole trajectories, :meth:`_decide_step` for a cached step); the frame pads the arms, sums the
    moments of every prefix, makes the cache and appends to it.
    """

    features: ClassVar[str]
    """The ``LinearGeneralistConfig.features`` of the version."""
    plays_wide: ClassVar[bool] = False
    """Whether the version plays d > d_max (on a fixed action set, as an A-armed bandit)."""
    moments_dtype: ClassVar[torch.dtype] = torch.float32
    """The dtype of the raw moments (float64 where the version inverts them at small sigma)."""
    counts_arms: ClassVar[bool] = False
    """Whether the version reads per-arm pull counts and reward sums from the cache."""

    def __new__(cls, *args: Any, **kwargs: Any) -> LinearGeneralistTransformer:
        """The version ``config.features`` names, when called on this class (else the subclass itself)."""
        config = args[0] if args else kwargs.get("config")
        if cls is LinearGeneralistTransformer and config is not None:  # the kind's class: build the version
            if config.features not in VERSIONS:
                module = "icrl_gym.models.linear_generalist"
                raise ValueError(f"no linear generalist version {config.features!r} is loaded: import {module}")
            cls = VERSIONS[config.features]
        return super().__new__(cls)

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        VERSIONS[cls.features] = cls

    def __init__(self, config: LinearGeneralistConfig) -> None:
        super().__init__()
        if config.features != self.features:
            raise ValueError(f"a {type(self).__name__} has features={self.features!r}, got {config.features!r}")
        self.config = config

    def pad(self, arms: torch.Tensor) -> torch.Tensor:
        """Zero-pad arms (..., d) to (..., d_max) (a version that plays wider arms: to (..., max(d, d_max)))."""
        d = arms.shape[-1]
        if self.plays_wide:
            return F.pad(arms.float(), (0, max(self.config.d_max - d, 0)))
        if d > self.config.d_max:
            raise ValueError(f"this model plays d <= {self.config.d_max}, got arms of dimension {d}")
        return F.pad(arms.float(), (0, self.config.d_max - d))

    def forward(
        self,
        action_sets: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        query_steps: torch.Tensor,
        horizon: torch.Tensor | int,
        noise_std: torch.Tensor | float,
        dim: torch.Tensor | int | None = None,
        arm_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits (B, Q, A) of the policy at steps ``query_steps`` (B, Q) of whole trajectories.

        action_sets (B, S, A, d) (per step; a fixed set may be an expanded view) or (B, A, d) (fixed),
        actions (B, S) long, rewards (B, S): the trajectory; query step t (0-based, t steps done) sees
        steps s < t only and scores the action set of step t (t < S, or t <= S with a fixed set).
        ``horizon`` T, ``noise_std`` sigma (NaN: unknown, estimated in context) and ``dim`` d (default: the
        arms' width) are ints/floats or (B,).
        ``arm_mask`` (B, A): False marks padding arms (their logits are -inf; the others do not see them).
        """
        b, s = actions.shape
        device = actions.device
        sets = self.pad(action_sets)
        if sets.dim() == 3:
            sets = sets.unsqueeze(1).expand(b, s + 1, *sets.shape[1:])
        rows = torch.arange(b, device=device).view(-1, 1)
        chosen = sets[rows, torch.arange(s, device=device).view(1, -1), actions]  # (B, S, d_max)
        tokens = history_tokens(chosen[..., : self.config.d_max], rewards.float())  # (B, S, E)
        tokens = tokens.to(self.moments_dtype)  # as the cache keeps them
        outer = tokens.unsqueeze(-1) * tokens.unsqueeze(-2)  # (B, S, E, E)
        prefix = F.pad(outer.cumsum(dim=1), (0, 0, 0, 0, 1, 0))  # (B, S + 1, E, E): sum over s < t
        moments = prefix[rows, query_steps]  # (B, Q, E, E)
        run = per_run(b, sets.device, horizon, noise_std, action_sets.shape[-1] if dim is None else dim)
        history = (sets, actions, rewards)
        return self._decide_queries(QueryInputs(history, moments, query_steps, run, arm_mask))

    def _decide_queries(self, inputs: QueryInputs) -> torch.Tensor:
        """The version's logits (B, Q, A) at ``query_steps`` (B, Q) (:meth:`forward`).

        ``inputs.history``: the padded action sets (B, S or S + 1, A, W), actions (B, S) and rewards (B, S);
        ``inputs.moments`` (B, Q, E, E): the raw moments of the history before every query step.
        """
        raise NotImplementedError

    def _decide_step(
        self, cache: LinearGeneralistCache, arms: torch.Tensor, steps: torch.Tensor, arm_mask: torch.Tensor | None
    ) -> torch.Tensor:
        """The version's logits (B, 1, A) at step ``cache.steps`` for the padded arms (B, 1, A, W) (:meth:`step`)."""
        raise NotImplementedError

    def new_cache(
        self, batch_size: int, env_info: EnvInfo, device: torch.device | str | None = None
    ) -> LinearGeneralistCache:
        """An empty cache (history of B runs) of the linear bandit ``env_info`` (T, sigma and d are read from it)."""
        if not self.plays_wide and env_info.dim is not None and env_info.dim > self.config.d_max:
            raise ValueError(f"this model plays d <= {self.config.d_max}, got EnvInfo.dim={env_info.dim}")
        device = next(self.parameters()).device if device is None else torch.device(device)
        return LinearGeneralistCache(batch_size, self.config.token_dim, env_info, device, self.moments_dtype)

    @torch.no_grad()
    def append(self, cache: LinearGeneralistCache, chosen: torch.Tensor, rewards: torch.Tensor) -> None:
        """Append one step: the chosen arms (B, d) and rewards (B,) to the cache (O(E^2) per run)."""
        b = chosen.shape[0]
        x = self.pad(chosen)[..., : self.config.d_max]
        cache.append(history_tokens(x.unsqueeze(1), rewards.float().view(b, 1))[:, 0])

    @torch.no_grad()
    def step(
        self,
        cache: LinearGeneralistCache,
        observation: torch.Tensor,
        prev_action: torch.Tensor | None,
        prev_reward: torch.Tensor | None,
        *,
        arm_mask: torch.Tensor | None = None,
    ) -> PolicyOutput:
        """``PolicyOutput(logits (B, A), None)`` at step ``cache.steps`` for the action set (B, A, d) of that step.

        ``observation`` is that action set.  The previous step's arm ``prev_action`` (B,) (its vector
        read from the previous action set) and reward ``prev_reward`` (B,) are appended to the history
        first; both are None at step 0.  A run whose sigma is NaN (unknown) is played with the
        in-context estimate (``noise_estimate``).
        """
        action_set = observation
        first = cache.last_action_set is None
        if (prev_action is None) != (prev_reward is None) or (prev_action is None) != first:
            raise ValueError("prev_action and prev_reward must be None exactly at the first step")
        if prev_action is not None and prev_reward is not None and cache.last_action_set is not None:
            rows = torch.arange(cache.batch_size, device=prev_action.device)
            self.append(cache, cache.last_action_set[rows, prev_action.long()], prev_reward)
            if self.counts_arms:
                cache.count(prev_action.long(), prev_reward)
        if cache.steps >= cache.horizon:
            raise ValueError(f"the runs were started for T={cache.horizon} steps; there is no step {cache.steps + 1}")
        b = action_set.shape[0]
        if b != cache.batch_size:
            raise ValueError(f"action_set has batch size {b} but the cache holds {cache.batch_size}")
        cache.see(action_set)
        arms = self.pad(action_set).unsqueeze(1)  # (B, 1, A, d_max)
        steps = torch.full((b, 1), cache.steps, device=action_set.device)
        return PolicyOutput(self._decide_step(cache, arms, steps, arm_mask)[:, 0], None)
