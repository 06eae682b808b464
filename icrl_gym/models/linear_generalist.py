"""The LINEAR generalist in-context transformer: one model for any linear bandit of d <= 8.

One pretrained model for stochastic linear bandits r_t = <x_{t,a_t}, w*> + eps_t, eps_t ~ N(0, sigma^2)
(Section 4.1 of Lin, Bai, Mei, "Transformers as Decision Makers", ICLR 2024) of any dimension d in
1..d_max (d_max = 8), any number of arms A, any horizon T, fixed or per-step action sets.  It reads
the raw trajectory (the action sets, the actions, the rewards) and scores the A arms of step t.

Tokens (fixed per-step transforms of a step's OWN data only; padding: coordinates d..d_max-1 are 0):

* history token of step s < t:  e_s = [x_{s,a_s}, r_s, 1] / sigma  in R^E, E = d_max + 2
  (dividing by the known noise level makes the Gaussian likelihood's natural parameters
  sum_s x x^T / sigma^2 and sum_s x r / sigma^2 appear as second moments of the tokens);
* arm token of arm k at step t, initialised from  f_k = [x_{t,k}, 1[i < d], phi(t, T), log sigma]
  (phi: :func:`icrl_gym.models.generalist.step_features`, the horizon features of step t).

L blocks of [linear cross-attention arm -> history -> (optional) softmax self-attention across arms
-> MLP].
The cross-attention is *linear* (unnormalised-softmax-free) attention, as in the constructions
of the paper's Section 4 (ReLU/linear attention implementing gradient descent for ridge regression,
Theorems 8-10 of Lin et al. and Bai et al. 2023): head h of arm query q_k = W_q h_k reads

    y_k = [ q_k^T (sum_{s<t} K_h^T e_s e_s^T V_h + S_h) ] / (c_h + sum_{s<t} sum_i delta_{h,i} e_{s,i}^2)

(+ u_k^T M_t u_k in the denominator with ``arm_normaliser``, u_k = W_u h_k: a per-arm, data-dependent
preconditioner; with u_k ~ x_k / sigma it is c + x_k^T G_t x_k / sigma^2, so that e.g. the head
x_k^T b_t / (c + x_k^T G_t x_k) is the one-dimensional posterior mean along x_k, exact for an arm pulled
repeatedly) with learned K_h, V_h (E x dh), a learned "sink" S_h (dh x dh, the prior's contribution: with the
tokens divided by sigma the prior precision I / v and prior term m / v are constants), a learned
c_h > 0 and delta_h >= 0 (a trace normaliser that keeps the step size of the implied iteration
below 1 for any t and sigma).  Stacked, such heads apply polynomials of the posterior precision
Lambda_t = I / v + sum_s x_s x_s^T / sigma^2 to the query's channels: L blocks represent L steps of
preconditioned gradient descent / a degree-L Krylov approximation of Lambda_t^{-1} (x_k or the
natural mean parameter), i.e. the posterior mean and the posterior width of arm k (Appendix F.1).
The history tokens are not updated by the blocks, so the attention's state is exactly the
moment matrix M_t = sum_{s<t} e_s e_s^T (E x E): :class:`LinearGeneralistCache` keeps M_t, a step
costs O(A D^2) whatever t (T = 1000 runs as fast as T = 10), and :meth:`LinearGeneralistTransformer.forward`
scores any query steps of whole trajectories from the prefix sums of e_s e_s^T (query t sees s < t only).

Arms are exchangeable (no arm positions anywhere): permuting the arms of every action set permutes
the logits.  Each block's MLP also reads m bilinear readouts x_{t,k}^T U_j h_k (the arm's features
against its token: the posterior mean <x_k, mu_t> and width x_k^T Lambda^{-1} x_k are of this form), and
the logit is  w^T LayerNorm(h_k) + b + x_{t,k}^T U_out h_k.

Second version (``features="posterior"``): the network no longer inverts the moment matrix.  Each
step computes closed-form posterior features of a grid of Gaussian priors from the same moment
matrix (float64) and from per-arm pull counts and reward sums
(:mod:`icrl_gym.models.linear_posterior`, :func:`posterior_inputs`), and a per-arm network with
attention across the arms (:class:`PosteriorArmNetwork`) turns them into logits, with the
model-averaged Bayes-UCB index as a skip connection.  It plays d > d_max on a fixed action set as
an A-armed bandit.  Same cache, same contract, a step cost independent of t.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from icrl_gym.config import Allowed, check_fields, checked
from icrl_gym.models import generalist
from icrl_gym.models.generalist import NUM_STEP_FEATURES, ArmTokenConfig, step_features
from icrl_gym.models.linear_posterior import (
    NUM_PRIORS,
    arm_posterior,
    bayes_ucb_quantile,
    estimate_noise_arms,
    linear_posterior,
    model_average,
)
from icrl_gym.models.policy import EnvInfo, PolicyOutput

D_MAX = 8
"""Largest dimension d of the arms (smaller d are zero-padded to it)."""
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
    n_heads, n_layers, mlp_ratio, d_max and noise_estimate), which also plays d > d_max on a fixed action set."""

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


def noise_levels(
    moments: torch.Tensor, dim: torch.Tensor, noise_std: torch.Tensor, estimate: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """The noise level sigma (B, Q) used at every query and whether it was given (B, Q).

    From raw moments (B, Q, E, E), d (B,) and the given sigma (B,).

    sigma is the given one where finite; NaN means unknown: then the in-context estimate (``estimate``) or an error.
    """
    known = torch.isfinite(noise_std)
    shape = moments.shape[:2]
    if bool(known.all()):
        return noise_std.view(-1, 1).expand(shape), torch.ones(shape, device=moments.device)
    if not estimate:
        raise ValueError("this model needs the noise level sigma (it was trained without estimating it in context)")
    guess = estimate_noise(moments, dim.view(-1, 1))
    sigma = torch.where(known.view(-1, 1), noise_std.view(-1, 1).nan_to_num(1.0), guess)
    return sigma, known.view(-1, 1).expand(shape).float()


def arm_features(
    arms: torch.Tensor,
    dim: torch.Tensor,
    steps: torch.Tensor,
    horizon: torch.Tensor,
    sigma: torch.Tensor,
    noise_inputs: torch.Tensor | None = None,
) -> torch.Tensor:
    """f_k (B, Q, A, F) from arms (B, Q, A, d_max), d (B,), steps t (B, Q), T (B,), sigma (B, Q).

    A model that estimates sigma also reads ``noise_inputs`` (B, Q, 2): [sigma given, log(1 + max(n - d, 0))].
    """
    b, nq, na, dmax = arms.shape
    mask = (torch.arange(dmax, device=arms.device).view(1, -1) < dim.view(-1, 1)).float()  # (B, d_max)
    phi = step_features(steps, horizon.view(-1, 1).expand_as(steps))  # (B, Q, 4)
    parts = [mask.view(b, 1, dmax).expand(b, nq, dmax), phi, sigma.log().view(b, nq, 1)]
    per_step = torch.cat(parts + ([] if noise_inputs is None else [noise_inputs]), dim=-1)
    return torch.cat([arms, per_step.unsqueeze(2).expand(b, nq, na, per_step.shape[-1])], dim=-1)


class LinearCrossAttention(nn.Module):
    """Linear attention of the arm tokens over the moment matrix of the history (module docstring)."""

    def __init__(self, config: LinearGeneralistConfig) -> None:
        super().__init__()
        d, h, e = config.d_model, config.n_heads, config.token_dim
        self.n_heads, self.head_dim = h, d // h
        self.query = nn.Linear(d, d, bias=False)
        self.key = nn.Parameter(torch.randn(h, e, self.head_dim) / math.sqrt(e))
        self.value = nn.Parameter(torch.randn(h, e, self.head_dim) / math.sqrt(e))
        self.sink = nn.Parameter(torch.zeros(h, self.head_dim, self.head_dim))
        self.log_c = nn.Parameter(torch.zeros(h))
        delta = torch.full((h, e), -4.0)
        delta[:, : config.d_max] = 0.5  # softplus(0.5) ~ 1: the trace of the Gram matrix
        self.delta = nn.Parameter(delta)
        self.out = nn.Linear(d, d)
        nn.init.normal_(self.query.weight, std=0.3 / math.sqrt(d))
        self.token_dim = e
        self.norm_query: nn.Linear | None = None
        if config.arm_normaliser:
            self.norm_query = nn.Linear(d, h * e, bias=False)
            nn.init.normal_(self.norm_query.weight, std=0.3 / math.sqrt(d))

    def states(self, moments: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Moment matrices (..., E, E) -> per-head states K^T M V + S (..., H, dh, dh) and normalisers (..., H)."""
        state = torch.einsum("...ij,hid,hje->...hde", moments, self.key, self.value) + self.sink
        diag = torch.diagonal(moments, dim1=-2, dim2=-1)  # (..., E)
        norm = self.log_c.exp() + diag @ F.softplus(self.delta).T  # (..., H)
        return state, norm

    def forward(
        self, arms: torch.Tensor, state: torch.Tensor, norm: torch.Tensor, moments: torch.Tensor
    ) -> torch.Tensor:
        """Arm tokens (B, Q, A, D), states (B, Q, H, dh, dh), normalisers (B, Q, H), moments (B, Q, E, E).

        Returns the heads' outputs mixed back to (B, Q, A, D).
        """
        b, nq, na, d = arms.shape
        q = self.query(arms).view(b, nq, na, self.n_heads, self.head_dim)
        den = norm.view(b, nq, 1, self.n_heads)
        if self.norm_query is not None:  # + sum_s (u_k . e_s)^2 = u_k^T M u_k, per arm and head
            u = self.norm_query(arms).view(b, nq, na, self.n_heads, self.token_dim)
            mu = (u.reshape(b, nq, na * self.n_heads, -1) @ moments).view_as(u)  # (B, Q, A, H, E): M u_k
            den = den + (mu * u).sum(-1)
        y = torch.einsum("bqahd,bqhde->bqahe", q, state) / den.unsqueeze(-1)
        return self.out(y.reshape(b, nq, na, d))


class ArmSelfAttention(generalist.ArmSelfAttention):
    """Softmax attention across the A arm tokens of one step (no positions: permutation-equivariant).

    The layers are the Bernoulli generalist's; the softmax is written out so that padded arms can be masked.
    """

    def forward(self, arms: torch.Tensor, arm_mask: torch.Tensor | None = None) -> torch.Tensor:
        """(B, Q, A, D) with ``arm_mask`` (B, A) (True: a real arm) or None -> (B, Q, A, D)."""
        b, nq, na, d = arms.shape
        q, k, v = self.qkv(arms).view(b * nq, na, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        mask = None
        if arm_mask is not None:
            mask = arm_mask.view(b, 1, 1, 1, na).expand(b, nq, 1, 1, na).reshape(b * nq, 1, 1, na)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(self.head_dim)  # (BQ, H, A, A)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        y = torch.softmax(scores, dim=-1) @ v  # (BQ, H, A, dh)
        return self.out(y.transpose(1, 2).reshape(b, nq, na, d))


class Readout(nn.Module):
    """m bilinear readouts x_k^T U_j h_k (..., m) of the arm features x_k (..., d_max) against tokens h_k."""

    def __init__(self, config: LinearGeneralistConfig, outputs: int) -> None:
        super().__init__()
        self.outputs, self.d_max = outputs, config.d_max + config.encoded_dim
        self.proj = nn.Linear(config.d_model, outputs * self.d_max, bias=False)
        nn.init.normal_(self.proj.weight, std=0.1 / math.sqrt(config.d_model))

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """Arm features x (..., d_max) and tokens h (..., D) -> readouts (..., m)."""
        u = self.proj(h).view(*h.shape[:-1], self.outputs, self.d_max)
        return (u * x.unsqueeze(-2)).sum(-1)


class Block(nn.Module):
    """[linear cross-attention -> arm self-attention -> MLP(LN(h), readouts)], residual."""

    def __init__(self, config: LinearGeneralistConfig) -> None:
        super().__init__()
        d = config.d_model
        self.cross = LinearCrossAttention(config)
        self.ln_mlp = nn.LayerNorm(d)
        self.ln_self: nn.Module | None = nn.LayerNorm(d) if config.arm_attention else None
        self.self_attn: ArmSelfAttention | None = ArmSelfAttention(config) if config.arm_attention else None
        self.readout = Readout(config, config.readouts)
        hidden = config.mlp_ratio * d
        self.mlp = nn.Sequential(nn.Linear(d + config.readouts, hidden), nn.GELU(), nn.Linear(hidden, d))

    def forward(
        self,
        arms: torch.Tensor,
        x: torch.Tensor,
        moments: torch.Tensor,
        arm_mask: torch.Tensor | None,
    ) -> torch.Tensor:
        """Arm tokens (B, Q, A, D), arm features x (B, Q, A, d_max), moments (B, Q, E, E) -> (B, Q, A, D)."""
        state, norm = self.cross.states(moments)
        arms = arms + self.cross(arms, state, norm, moments)
        if self.self_attn is not None and self.ln_self is not None:
            arms = arms + self.self_attn(self.ln_self(arms), arm_mask)
        return arms + self.mlp(torch.cat([self.ln_mlp(arms), self.readout(x, arms)], dim=-1))


def _as_block(module: nn.Module) -> Block:
    if not isinstance(module, Block):
        raise TypeError(f"expected a Block, got {type(module).__name__}")
    return module


class HistoryEncoder(nn.Module):
    """Non-causal linear self-attention over the history tokens, in closed form on the moment matrix.

    Layer l maps every history token e_s (and every arm query vector z_k) to P_l e_s with

        P_l = I + sum_h A_{l,h} M_l B_{l,h} / (c_l + sum_i delta_{l,i} (M_l)_{ii}),

    which is what a linear self-attention head with query/key/value/output maps (A = W_O W_V, B = W_K^T W_Q)
    computes over the tokens s < t; so the history's moment matrix becomes M_{l+1} = P_l M_l P_l^T.  This
    is GD++ of von Oswald et al. (2023): the tokens' Gram spectrum lambda -> lambda (1 - gamma lambda)^2
    flattens in a few layers, so that P^T P approximates the inverse of the posterior precision and a
    single arm head z_k^T (M_L)_{x, r} reads <x_k, Lambda^{-1} b> (Section 4.1's ridge regression in context).
    """

    def __init__(self, config: LinearGeneralistConfig) -> None:
        super().__init__()
        n, h, e = config.history_layers, config.history_heads, config.token_dim
        self.left = nn.Parameter(torch.randn(n, h, e, e) * 0.1 / math.sqrt(e))
        self.right = nn.Parameter(torch.randn(n, h, e, e) * 0.1 / math.sqrt(e))
        self.log_c = nn.Parameter(torch.zeros(n))
        delta = torch.full((n, e), -4.0)
        delta[:, : config.d_max] = 0.5
        self.delta = nn.Parameter(delta)

    def forward(self, moments: torch.Tensor, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Moments (B, Q, E, E) and arm query vectors (B, Q, A, E) -> the encoded ones (same shapes)."""
        eye = torch.eye(moments.shape[-1], device=moments.device)
        for layer in range(self.left.shape[0]):
            diag = torch.diagonal(moments, dim1=-2, dim2=-1)
            norm = self.log_c[layer].exp() + diag @ F.softplus(self.delta[layer])  # (B, Q)
            mix = torch.einsum("hij,bqjk,hkl->bqil", self.left[layer], moments, self.right[layer])
            p = eye + mix / norm[..., None, None]  # (B, Q, E, E)
            moments = p @ moments @ p.transpose(-1, -2)
            z = z @ p.transpose(-1, -2)
        return moments, z


POSTERIOR_FEATURES = 2 * 2 * NUM_PRIORS + 3 + 2 + NUM_STEP_FEATURES + 9 + 2 * NUM_PRIORS
"""Width of an arm's input to :class:`PosteriorArmNetwork` (:func:`posterior_inputs`)."""


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
    priors.  S is the step's mean model-averaged sd over the arms.  The skip index is (u_k - max u) / S.
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
    features = torch.cat([*per_arm, *(f.unsqueeze(-1) for f in bma + pulls), step_part], -1)
    base = (index - index.max(-1, keepdim=True).values) / scale
    return features.float(), base.float()


class PosteriorArmNetwork(nn.Module):
    """The second version's network: per-arm MLP, L blocks of [attention across arms, MLP], logit + skip.

    logit_k = w^T LayerNorm(h_k) + b + alpha (u_k - max u) / S: with the head at zero (its initialisation) the
    argmax is the model-averaged Bayes-UCB index (:func:`posterior_inputs`).  Arms are exchangeable: no
    positions anywhere, so permuting the arms permutes the logits.
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

    def forward(self, features: torch.Tensor, base: torch.Tensor, arm_mask: torch.Tensor | None) -> torch.Tensor:
        """Inputs (B, Q, A, F) and skip index (B, Q, A) -> logits (B, Q, A)."""
        h = self.arm_in(features)
        for ln_a, attn, ln_m, mlp in zip(self.ln_attn, self.attn, self.ln_mlp, self.mlp, strict=True):
            h = h + attn(ln_a(h), arm_mask)
            h = h + mlp(ln_m(h))
        return self.head(self.ln_out(h)).squeeze(-1) + self.log_alpha.exp() * base


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


def _per_run(
    b: int,
    device: torch.device,
    horizon: torch.Tensor | int,
    noise_std: torch.Tensor | float,
    dim: torch.Tensor | int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """T, sigma (float32) and d as (B,) tensors from numbers or (B,) tensors."""
    horizon_t = torch.as_tensor(horizon, device=device).reshape(-1).expand(b)
    noise = torch.as_tensor(noise_std, dtype=torch.float32, device=device).reshape(-1).expand(b)
    return horizon_t, noise, torch.as_tensor(dim, device=device).reshape(-1).expand(b)


class LinearGeneralistTransformer(nn.Module):
    """Per-arm query transformer over a raw linear-bandit trajectory (see the module docstring)."""

    def __init__(self, config: LinearGeneralistConfig) -> None:
        super().__init__()
        self.config = config
        self.posterior: PosteriorArmNetwork | None = None
        if config.features == "posterior":  # the second version has none of the first's modules
            self.posterior = PosteriorArmNetwork(config)
            return
        d = config.d_model
        self.arm_in = nn.Linear(config.arm_features, d)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.ln_out = nn.LayerNorm(d)
        self.head = nn.Linear(d, 1)
        self.readout_out = Readout(config, 1)
        self.encoder: HistoryEncoder | None = HistoryEncoder(config) if config.history_layers else None

    def pad(self, arms: torch.Tensor) -> torch.Tensor:
        """Zero-pad arms (..., d) to (..., d_max) (the second version: to (..., max(d, d_max)))."""
        d = arms.shape[-1]
        if self.posterior is not None:
            return F.pad(arms.float(), (0, max(self.config.d_max - d, 0)))
        if d > self.config.d_max:
            raise ValueError(f"this model plays d <= {self.config.d_max}, got arms of dimension {d}")
        return F.pad(arms.float(), (0, self.config.d_max - d))

    def _decide(
        self,
        arms: torch.Tensor,
        raw_moments: torch.Tensor,
        steps: torch.Tensor,
        horizon: torch.Tensor | int,
        noise_std: torch.Tensor | float,
        dim: torch.Tensor | int,
        arm_mask: torch.Tensor | None,
    ) -> torch.Tensor:
        """Arms (B, Q, A, d_max), raw moments (B, Q, E, E) of the history before steps t (B, Q) -> logits (B, Q, A).

        The moments are scaled by 1 / sigma^2 here (the tokens e_s / sigma of the module docstring), sigma the
        given one or, where it is NaN, the in-context estimate (:func:`noise_levels`).
        """
        b, nq, na, _ = arms.shape
        horizon_t, noise, dims = _per_run(b, arms.device, horizon, noise_std, dim)
        sigma, known = noise_levels(raw_moments, dims, noise, self.config.noise_estimate)
        inv = (1.0 / sigma)[..., None, None]  # twice, not 1 / sigma^2: an empty history stays 0 for tiny sigma
        moments = raw_moments * inv * inv
        noise_inputs = None
        if self.config.noise_estimate:
            spare = (raw_moments[..., -1, -1] - dims.view(-1, 1)).clamp_min(0.0)
            noise_inputs = torch.stack([known, spare.log1p()], dim=-1)
        features = arm_features(arms, dims, steps, horizon_t, sigma, noise_inputs)
        if self.encoder is not None:
            z = torch.cat([arms, torch.zeros_like(arms[..., :1]), torch.ones_like(arms[..., :1])], dim=-1)
            moments, z = self.encoder(moments, z / sigma.view(b, nq, 1, 1))
            features, arms = torch.cat([features, z], dim=-1), torch.cat([arms, z], dim=-1)
        h = self.arm_in(features)
        for block in self.blocks:
            h = _as_block(block)(h, arms, moments, arm_mask)
        logits = self.head(self.ln_out(h)).squeeze(-1) + self.readout_out(arms, h).squeeze(-1)
        if arm_mask is not None:
            logits = logits.masked_fill(~arm_mask.unsqueeze(1), float("-inf"))
        return logits

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
        if self.posterior is not None:  # float64 moments, as the cache keeps them
            tokens = tokens.double()
        outer = tokens.unsqueeze(-1) * tokens.unsqueeze(-2)  # (B, S, E, E)
        prefix = F.pad(outer.cumsum(dim=1), (0, 0, 0, 0, 1, 0))  # (B, S + 1, E, E): sum over s < t
        moments = prefix[rows, query_steps]  # (B, Q, E, E)
        arms = sets[rows, query_steps]  # (B, Q, A, d_max)
        dims = action_sets.shape[-1] if dim is None else dim
        if self.posterior is None:
            return self._decide(arms, moments, query_steps, horizon, noise_std, dims, arm_mask)
        pulls = F.one_hot(actions, sets.shape[2]).float()  # (B, S, A)
        counts = F.pad(pulls.cumsum(1), (0, 0, 1, 0))[rows, query_steps]
        sums = F.pad((pulls.double() * rewards.float().double().unsqueeze(-1)).cumsum(1), (0, 0, 1, 0))
        sums = sums[rows, query_steps]
        if sets.stride(1) == 0:  # one action set per run, expanded over the steps
            fixed = torch.ones_like(query_steps, dtype=torch.bool)
        else:
            same = (sets == sets[:, :1]).flatten(2).all(-1).long().cummin(1).values.bool()  # (B, S or S + 1)
            fixed = same[rows, query_steps]
        return self._decide_posterior(arms, moments, counts, sums, fixed, query_steps, horizon, noise_std, dims)

    def _decide_posterior(
        self,
        arms: torch.Tensor,
        moments: torch.Tensor,
        counts: torch.Tensor,
        sums: torch.Tensor,
        fixed: torch.Tensor,
        steps: torch.Tensor,
        horizon: torch.Tensor | int,
        noise_std: torch.Tensor | float,
        dim: torch.Tensor | int,
    ) -> torch.Tensor:
        """The second version's logits (B, Q, A) (:func:`posterior_inputs`, :class:`PosteriorArmNetwork`)."""
        if self.posterior is None:
            raise TypeError("this model reads the moment matrix (features='moments'), not posterior features")
        horizon_t, noise, dims = _per_run(arms.shape[0], arms.device, horizon, noise_std, dim)
        with torch.no_grad():
            features, base = posterior_inputs(
                self.config, arms, moments, counts, sums, fixed, steps, horizon_t, noise, dims
            )
        return self.posterior(features, base, None)

    def new_cache(
        self, batch_size: int, env_info: EnvInfo, device: torch.device | str | None = None
    ) -> LinearGeneralistCache:
        """An empty cache (history of B runs) of the linear bandit ``env_info`` (T, sigma and d are read from it)."""
        if self.posterior is None and env_info.dim is not None and env_info.dim > self.config.d_max:
            raise ValueError(f"this model plays d <= {self.config.d_max}, got EnvInfo.dim={env_info.dim}")
        device = next(self.parameters()).device if device is None else torch.device(device)
        dtype = torch.float32 if self.posterior is None else torch.float64
        return LinearGeneralistCache(batch_size, self.config.token_dim, env_info, device, dtype)

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
        action_set: torch.Tensor,
        prev_action: torch.Tensor | None,
        prev_reward: torch.Tensor | None,
        *,
        arm_mask: torch.Tensor | None = None,
    ) -> PolicyOutput:
        """``PolicyOutput(logits (B, A), None)`` at step ``cache.steps`` for the action set (B, A, d) of that step.

        The previous step's arm ``prev_action`` (B,) (its vector read from the previous action set)
        and reward ``prev_reward`` (B,) are appended to the history first; both are None at step 0.
        A run whose sigma is NaN (unknown) is played with the in-context estimate (``noise_estimate``).
        """
        first = cache.last_action_set is None
        if (prev_action is None) != (prev_reward is None) or (prev_action is None) != first:
            raise ValueError("prev_action and prev_reward must be None exactly at the first step")
        if prev_action is not None and prev_reward is not None and cache.last_action_set is not None:
            rows = torch.arange(cache.batch_size, device=prev_action.device)
            self.append(cache, cache.last_action_set[rows, prev_action.long()], prev_reward)
            if self.posterior is not None:
                cache.count(prev_action.long(), prev_reward)
        if cache.steps >= cache.horizon:
            raise ValueError(f"the runs were started for T={cache.horizon} steps; there is no step {cache.steps + 1}")
        b = action_set.shape[0]
        if b != cache.batch_size:
            raise ValueError(f"action_set has batch size {b} but the cache holds {cache.batch_size}")
        cache.see(action_set)
        arms = self.pad(action_set).unsqueeze(1)  # (B, 1, A, d_max)
        steps = torch.full((b, 1), cache.steps, device=action_set.device)
        moments = cache.moments.unsqueeze(1)
        if self.posterior is not None:
            logits = self._decide_posterior(
                arms,
                moments,
                cache.counts.unsqueeze(1),
                cache.sums.unsqueeze(1),
                cache.fixed.unsqueeze(1),
                steps,
                cache.horizon,
                cache.noise_std,
                cache.dims,
            )[:, 0]
            return PolicyOutput(logits, None)
        logits = self._decide(arms, moments, steps, cache.horizon, cache.noise_std, cache.dims, arm_mask)[:, 0]
        return PolicyOutput(logits, None)
