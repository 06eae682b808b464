"""The second version of the linear generalist (``features="posterior"``): posterior features, a per-arm network.

The network no longer inverts the moment matrix.  Each step computes closed-form posterior features
of a grid of Gaussian priors from the same moment matrix (float64) and from per-arm pull counts and
reward sums (:mod:`icrl_gym.models.linear_posterior`, :func:`posterior_inputs`), and a per-arm network
with attention across the arms (:class:`PosteriorArmNetwork`) turns them into logits, with the
model-averaged Bayes-UCB index as a skip connection.  It plays d > d_max on a fixed action set as an
A-armed bandit.  Same cache, same contract, a step cost independent of t as the first version's
(:mod:`icrl_gym.models.linear_generalist`; both share :mod:`icrl_gym.models.linear_generalist_core`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from icrl_gym.models.generalist import NUM_STEP_FEATURES, ArmSelfAttention, step_features
from icrl_gym.models.linear_generalist_core import (
    LinearGeneralistCache,
    LinearGeneralistConfig,
    LinearGeneralistTransformer,
    QueryInputs,
    RunSizes,
    estimate_noise,
)
from icrl_gym.models.linear_posterior import (
    NUM_PRIORS,
    Posterior,
    arm_posterior,
    bayes_ucb_quantile,
    estimate_noise_arms,
    gittins_quantile,
    linear_posterior,
    model_average,
    moss_quantile,
    ridge_arms,
    ridge_linear,
)

POSTERIOR_FEATURES = 2 * 2 * NUM_PRIORS + 3 + 2 + NUM_STEP_FEATURES + 9 + 2 * NUM_PRIORS
"""Width of an arm's input to :class:`PosteriorArmNetwork` (:func:`posterior_inputs`)."""
LOG_SD_COLUMN = 2 * 2 * NUM_PRIORS + 1
"""The column of log(sd_k / S), the model average's relative posterior sd (:func:`posterior_inputs`)."""
STEP_COLUMNS = slice(2 * 2 * NUM_PRIORS + 5, POSTERIOR_FEATURES)
"""The columns of the per-step features, the same for every arm of a step (:func:`posterior_inputs`)."""
RIDGE_COLUMNS = slice(POSTERIOR_FEATURES, POSTERIOR_FEATURES + 2)
"""With ``ridge_gate``, two columns after the network's inputs: LinUCB's ridge mean, relative to the best arm's,
and its width times sigma, both in units of S (:func:`posterior_inputs`); the gate reads them, the per-arm network
does not.  Times sigma, the width is the posterior sd under the prior N(0, sigma^2 I), so the gate's a has one
meaning at every noise level (LinUCB(alpha) is a = alpha / sigma); LinUCB's own width, unscaled, is 20 posterior
sds at sigma = 0.05, and a gate that opened there would explore wildly."""


def posterior_inputs(
    config: LinearGeneralistConfig,
    arms: torch.Tensor,
    raw_moments: torch.Tensor,
    counts: torch.Tensor,
    sums: torch.Tensor,
    fixed: torch.Tensor,
    steps: torch.Tensor,
    horizon: torch.Tensor,
    noise: torch.Tensor,
    dims: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The second version's arm inputs (B, Q, A, F) and skip index (B, Q, A) (:mod:`~icrl_gym.models.linear_posterior`).

    Arms (B, Q, A, W) (W >= d_max; coordinates from d_max on are read only by the arms model), raw moments
    (B, Q, E, E), per-arm pull counts and reward sums (B, Q, A) by position in the action set, ``fixed``
    (B, Q): the action set has not changed so far (else the arms model is off), steps t (B, Q), T, sigma
    (NaN: unknown) and d (B,).  The linear model is off for runs with d > d_max.

    Per arm: for each prior of both grids asinh((m_jk - max_k m_jk) / S) and log(sd_jk / S) (0 where the
    model is off), the model average's same two and asinh((u_k - max u) / S) of its Bayes-UCB index u,
    log(1 + n_k) and n_k / t; per step: phi(t, T), z_t, log S, log sigma, sigma given, fixed set, linear
    model on, log(1 + max(n - d, 0)), d / d_max, log A / log 50, and the log posterior weights of the
    priors.  S is the step's mean model-averaged sd over the arms.  The skip index is (u_k - max u) / S; with
    ``config.skip_schedule == "moss"`` its u_k = m_k + c z_tk sd_k takes MOSS's horizon-aware width
    (:func:`~icrl_gym.models.linear_posterior.moss_quantile`, c = ``skip_scale`` on the arms the history informs
    (the horizon's c_T of ``dense_tail_budget`` where the arms are not mutually orthogonal,
    :func:`independent_arms`) and ``skip_scale_unpulled`` on the others (:func:`informed_arms`), D = min(d, A))
    while the features keep Bayes-UCB's.  With ``config.skip_evidence_power`` eta < 1, the skip index's mean and sd
    on the partly informed arms (:func:`partly_informed_arms`) are those of the model average with weights
    proportional to p_j^eta.  With ``config.ridge_gate`` two last columns hold LinUCB's ridge mean and width
    (:data:`RIDGE_COLUMNS`).
    """
    b, nq, na, _ = arms.shape
    dmax = config.d_max
    linear_ok = (dims <= dmax).view(b, 1).expand(b, nq)
    if not bool((linear_ok | fixed).all()):
        raise ValueError(
            f"this model plays d > d_max={dmax} (the arms as a {na}-armed bandit) only on a fixed action set"
        )
    x = arms[..., :dmax]
    dims_lin = dims.clamp(max=dmax).view(b, 1).expand(b, nq)
    # Every run's arms and history are zero beyond its d: the arm tests below read the first max d coordinates only.
    x_used = x[..., : min(dmax, int(dims.max()))] if dims.numel() else x
    rr, n = raw_moments[..., dmax, dmax], raw_moments[..., -1, -1]
    stat_mask = fixed.unsqueeze(-1).to(counts.dtype)
    counts, sums = counts * stat_mask, sums * stat_mask
    known = torch.isfinite(noise).view(b, 1).expand(b, nq)
    given = noise.double().nan_to_num(1.0).view(b, 1).expand(b, nq)
    if bool(known.all()):
        sigma = given
    elif not config.noise_estimate:
        raise ValueError("this model needs the noise level sigma (it was trained without estimating it in context)")
    else:
        guess = torch.where(
            linear_ok, estimate_noise(raw_moments, dims_lin).double(), estimate_noise_arms(counts, sums, rr, n)
        )
        sigma = torch.where(known, given, guess)
    posts = [linear_posterior(raw_moments, x, dims_lin, sigma), arm_posterior(counts, sums, rr, n, sigma)]
    valid = [linear_ok, fixed]
    weights, mean, sd = model_average(posts, valid)
    z = bayes_ucb_quantile(steps)
    index = mean + z.unsqueeze(-1) * sd
    scale = sd.mean(-1, keepdim=True)  # (B, Q, 1)

    def relative(v: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return torch.asinh((v - v.max(-1, keepdim=True).values) / s)

    per_prior = []
    for post, ok in zip(posts, valid, strict=True):
        on = ok[..., None, None]
        sc = scale.unsqueeze(-2)
        per_prior += [torch.where(on, relative(post.mean, sc), 0.0), torch.where(on, (post.sd / sc).log(), 0.0)]
    per_arm = [p.transpose(-1, -2) for p in per_prior]  # (B, Q, A, J) each
    t = steps.double()
    pulls = [counts.log1p(), counts / t.clamp_min(1.0).unsqueeze(-1)]
    bma = [relative(mean, scale), (sd / scale).log(), relative(index, scale)]
    spare = (n - dims_lin.double()).clamp_min(0.0).log1p()
    per_step = [
        step_features(steps, horizon.view(-1, 1).expand_as(steps)).double(),
        torch.stack(
            [
                z,
                scale[..., 0].log(),
                sigma.log(),
                known.double(),
                fixed.double(),
                linear_ok.double(),
                spare,
                dims_lin.double() / dmax * linear_ok,
                torch.full_like(z, math.log(na) / math.log(50.0)),
            ],
            -1,
        ),
        (weights + 1e-8).log(),
    ]
    step_part = torch.cat(per_step, -1).unsqueeze(-2).expand(b, nq, na, -1)
    ridge: list[torch.Tensor] = []
    if config.ridge_gate:  # LinUCB's mean and width, relative and in units of S (RIDGE_COLUMNS)
        lin_mean, lin_width = ridge_linear(raw_moments, x, dims_lin)
        arm_mean, arm_width = ridge_arms(counts, sums)
        on = linear_ok.unsqueeze(-1)
        ridge_mean, ridge_width = torch.where(on, lin_mean, arm_mean), torch.where(on, lin_width, arm_width)
        ridge = [
            (ridge_mean - ridge_mean.max(-1, keepdim=True).values) / scale,
            ridge_width * sigma.unsqueeze(-1) / scale,
        ]
    columns = [*per_arm, *(f.unsqueeze(-1) for f in bma + pulls), step_part, *(f.unsqueeze(-1) for f in ridge)]
    features = torch.cat(columns, -1)
    if config.skip_evidence_power != 1.0:  # the tempered model average on the partly informed arms
        eta = config.skip_evidence_power
        _, hot_mean, hot_sd = model_average([Posterior(p.mean, p.sd, eta * p.log_evidence) for p in posts], valid)
        partly = partly_informed_arms(raw_moments, x_used, linear_ok)
        mean, sd = torch.where(partly, hot_mean, mean), torch.where(partly, hot_sd, sd)
    if config.skip_schedule in ("moss", "gittins"):
        horizon_q = horizon.view(-1, 1).expand_as(steps)
        directions = dims.clamp(max=na).view(-1, 1).expand_as(steps)
        c: torch.Tensor | float = config.skip_scale
        own = None  # (B, Q, 1): whether the arms are a multi-armed bandit's, computed where a rule needs it
        if config.dense_tail_budget > 0.0 or config.skip_schedule == "gittins":
            own = independent_arms(x_used, linear_ok).unsqueeze(-1)
        if own is not None and config.dense_tail_budget > 0.0:  # dense arms: the horizon's tail-budget constant c_T
            budget = 1.0 - config.dense_tail_budget / horizon_q.double().clamp_min(2.0).log()
            dense = budget.clamp_min(0.0).sqrt().clamp_max(config.skip_scale)
            c = torch.where(own, config.skip_scale, dense.unsqueeze(-1))
        if config.skip_scale_unpulled != config.skip_scale or config.dense_tail_budget > 0.0:
            # one constant for every arm needs no G x_k
            informed = informed_arms(raw_moments, x_used, counts, linear_ok)
            c = torch.where(informed, c, config.skip_scale_unpulled)
        width = c * moss_quantile(sd, sigma, steps, horizon_q, directions)
        if own is not None and config.skip_schedule == "gittins":
            width = torch.where(own, gittins_quantile(sd, sigma, steps, horizon_q), width)
        index = mean + width * sd
    elif config.skip_evidence_power != 1.0:  # Bayes-UCB's width on the tempered mean and sd
        index = mean + z.unsqueeze(-1) * sd
    base = (index - index.max(-1, keepdim=True).values) / scale
    return features.float(), base.float()


def independent_arms(arms: torch.Tensor, linear_ok: torch.Tensor) -> torch.Tensor:
    """Whether each action set's arms (B, Q, A, d_max) are mutually orthogonal, or the linear model is off (B, Q).

    Then a pull informs, under each zero-centred prior of the grid, only the arm pulled (one-hot arms: the
    Gaussian multi-armed bandit), the case the Gittins index of one arm is written for.  Orthogonal means every
    off-diagonal entry of X X^T is at most 1e-9 of its largest diagonal entry (and of 1).
    """
    gram = torch.einsum("bqad,bqcd->bqac", arms.double(), arms.double())
    diagonal = torch.diagonal(gram, dim1=-2, dim2=-1)
    off = (gram - torch.diag_embed(diagonal)).abs().amax((-2, -1))
    return ~linear_ok | (off <= 1e-9 * diagonal.amax(-1).clamp_min(1.0))


def informed_arms(
    raw_moments: torch.Tensor, arms: torch.Tensor, counts: torch.Tensor, linear_ok: torch.Tensor
) -> torch.Tensor:
    """Whether the history says anything of each arm's reward (B, Q, A) beyond what the prior does.

    Under the linear model arm x_k is informed iff G x_k != 0 (G = sum_s x_s x_s^T, the history's Gram block of
    the raw moments (B, Q, E, E)): an arm orthogonal to every arm pulled so far keeps the prior's posterior in
    every model of the grid (up to the centre and the evidence), as an unpulled arm of a multi-armed bandit
    does.  Where the linear model is off (d > d_max, a fixed action set) an arm is informed once it was pulled
    (``counts`` (B, Q, A)).  ``arms`` (B, Q, A, d_max).
    """
    dmax = arms.shape[-1]
    reach = torch.einsum("bqde,bqae->bqad", raw_moments[..., :dmax, :dmax].double(), arms.double())
    return torch.where(linear_ok.unsqueeze(-1), reach.abs().amax(-1) > 0, counts > 0)


def partly_informed_arms(raw_moments: torch.Tensor, arms: torch.Tensor, linear_ok: torch.Tensor) -> torch.Tensor:
    """Under the linear model, the arms (B, Q, A) the history informs only in part.

    That is x_k = p_k + r_k with both p_k, in the span of the arms pulled so far (the range of the Gram block G of
    the raw moments (B, Q, E, E)), and r_k, orthogonal to it, non-zero.  The history fits such an arm's reward
    along p_k; along r_k only the prior speaks, and the grid's evidence, earned on the pulled directions,
    extrapolates there.  False where the linear model is off.  ``arms`` (B, Q, A, d_max); G's null space is where
    its eigenvalues are below 1e-9 of the largest (and of 1).
    """
    dmax = arms.shape[-1]
    gram = raw_moments[..., :dmax, :dmax].double()
    values, vectors = torch.linalg.eigh(gram)
    null = values < 1e-9 * values[..., -1:].clamp_min(1.0)  # (B, Q, D)
    coords = torch.einsum("bqde,bqad->bqae", vectors, arms.double()).pow(2)  # (B, Q, A, D): x_k on G's eigenvectors
    outside = (coords * null.unsqueeze(-2)).sum(-1)
    inside = (coords * (~null).unsqueeze(-2)).sum(-1)
    total = coords.sum(-1).clamp_min(1e-300)
    return linear_ok.unsqueeze(-1) & (outside > 1e-12 * total) & (inside > 1e-12 * total)


def step_mlp(hidden: int, outputs: int, start: tuple[float, ...] = ()) -> nn.Sequential:
    """An MLP of a step's features (:data:`STEP_COLUMNS`) whose outputs start at the constants ``start``.

    Its last layer's weight is zero and its bias is ``start`` (zero when not given).
    """
    out = nn.Linear(hidden, outputs)
    nn.init.zeros_(out.weight)
    nn.init.zeros_(out.bias)
    if start:
        with torch.no_grad():
            out.bias.copy_(torch.tensor(start))
    return nn.Sequential(nn.Linear(STEP_COLUMNS.stop - STEP_COLUMNS.start, hidden), nn.GELU(), out)


class PosteriorArmNetwork(nn.Module):
    """The second version's network: per-arm MLP, L blocks of [attention across arms, MLP], logit + skip.

    logit_k = w^T LayerNorm(h_k) + b + alpha (u_k - max u) / S: with the head at zero (its initialisation) the
    argmax is the model-averaged Bayes-UCB index (:func:`posterior_inputs`).  With ``index_width`` the skip
    index is widened by gamma sd_k / S, gamma = MLP(the step's features), so u_k = m_k + (z_t + gamma) sd_k
    (gamma starts at 0).  With ``ridge_gate`` the skip index then moves toward LinUCB's by a gate g(step),
    u' = u + g (l - u), l_k = (ridge mean_k + a sigma ridge width_k) / S (:data:`RIDGE_COLUMNS`), with g and
    a = exp(log a) read from the step's features; they start at the configuration's ``gate_start`` and
    ``gate_width_start``.  Arms are exchangeable: no positions anywhere, so permuting the arms permutes the
    logits.
    """

    def __init__(self, config: LinearGeneralistConfig) -> None:
        super().__init__()
        d, hidden = config.d_model, config.mlp_ratio * config.d_model
        self.arm_in = nn.Sequential(nn.Linear(POSTERIOR_FEATURES, hidden), nn.GELU(), nn.Linear(hidden, d))
        self.ln_attn = nn.ModuleList(nn.LayerNorm(d) for _ in range(config.n_layers))
        self.attn = nn.ModuleList(ArmSelfAttention(config) for _ in range(config.n_layers))
        self.ln_mlp = nn.ModuleList(nn.LayerNorm(d) for _ in range(config.n_layers))
        self.mlp = nn.ModuleList(
            nn.Sequential(nn.Linear(d, hidden), nn.GELU(), nn.Linear(hidden, d)) for _ in range(config.n_layers)
        )
        self.ln_out = nn.LayerNorm(d)
        self.head = nn.Linear(d, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(4.0)))
        self.width = step_mlp(hidden, 1) if config.index_width else None
        gate_start = (config.gate_start, math.log(config.gate_width_start))
        self.gate = step_mlp(hidden, 2, gate_start) if config.ridge_gate else None

    def forward(self, features: torch.Tensor, base: torch.Tensor, arm_mask: torch.Tensor | None) -> torch.Tensor:
        """Inputs (B, Q, A, F) and skip index (B, Q, A) -> logits (B, Q, A)."""
        h = self.arm_in(features[..., :POSTERIOR_FEATURES])
        for ln_a, attn, ln_m, mlp in zip(self.ln_attn, self.attn, self.ln_mlp, self.mlp, strict=True):
            h = h + attn(ln_a(h), arm_mask)
            h = h + mlp(ln_m(h))
        if self.width is not None:
            gamma = self.width(features[..., 0, STEP_COLUMNS])  # (B, Q, 1): one width per step
            base = base + gamma * features[..., LOG_SD_COLUMN].exp()
        if self.gate is not None:
            g, log_a = self.gate(features[..., 0, STEP_COLUMNS]).unsqueeze(-2).unbind(-1)  # (B, Q, 1) each
            ridge = features[..., RIDGE_COLUMNS.start] + log_a.exp() * features[..., RIDGE_COLUMNS.start + 1]
            base = base + g * (ridge - base)
        return self.head(self.ln_out(h)).squeeze(-1) + self.log_alpha.exp() * base


class PosteriorLinearGeneralist(LinearGeneralistTransformer):
    """The second version: :func:`posterior_inputs` read by a :class:`PosteriorArmNetwork` (module docstring).

    Its weights are the network's (``posterior.*``), none of the first version's modules.
    """

    features = "posterior"
    plays_wide = True
    moments_dtype = torch.float64
    counts_arms = True

    def __init__(self, config: LinearGeneralistConfig) -> None:
        super().__init__(config)
        self.posterior = PosteriorArmNetwork(config)
        self.input_log: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        """When a list, every decision appends its network inputs (features, skip index): the inputs hold
        no parameter, so regret fine-tuning replays :attr:`posterior` on those of its cached rollout with
        gradient instead of recomputing the posterior features of every prefix."""

    def _decide_queries(self, inputs: QueryInputs) -> torch.Tensor:
        history, moments, query_steps, run, arm_mask = inputs
        sets, actions, rewards = history
        rows = torch.arange(sets.shape[0], device=sets.device).view(-1, 1)
        arms = sets[rows, query_steps]  # (B, Q, A, W)
        pulls = F.one_hot(actions, sets.shape[2]).float()  # (B, S, A)
        counts = F.pad(pulls.cumsum(1), (0, 0, 1, 0))[rows, query_steps]
        sums = F.pad((pulls.double() * rewards.float().double().unsqueeze(-1)).cumsum(1), (0, 0, 1, 0))
        sums = sums[rows, query_steps]
        if sets.stride(1) == 0:  # one action set per run, expanded over the steps
            fixed = torch.ones_like(query_steps, dtype=torch.bool)
        else:
            same = (sets == sets[:, :1]).flatten(2).all(-1).long().cummin(1).values.bool()  # (B, S or S + 1)
            fixed = same[rows, query_steps]
        return self._decide(arms, moments, counts, sums, fixed, query_steps, run)

    def _decide_step(
        self, cache: LinearGeneralistCache, arms: torch.Tensor, steps: torch.Tensor, arm_mask: torch.Tensor | None
    ) -> torch.Tensor:
        return self._decide(
            arms,
            cache.moments.unsqueeze(1),
            cache.counts.unsqueeze(1),
            cache.sums.unsqueeze(1),
            cache.fixed.unsqueeze(1),
            steps,
            cache.run,
        )

    def _decide(
        self,
        arms: torch.Tensor,
        moments: torch.Tensor,
        counts: torch.Tensor,
        sums: torch.Tensor,
        fixed: torch.Tensor,
        steps: torch.Tensor,
        run: RunSizes,
    ) -> torch.Tensor:
        """The logits (B, Q, A) (:func:`posterior_inputs`, :class:`PosteriorArmNetwork`)."""
        with torch.no_grad():
            features, base = posterior_inputs(
                self.config, arms, moments, counts, sums, fixed, steps, run.horizon, run.noise, run.dims
            )
        if self.input_log is not None:
            self.input_log.append((features, base))
        return self.posterior(features, base, None)
