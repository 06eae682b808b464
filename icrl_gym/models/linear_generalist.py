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
costs O(A D^2) whatever t (T = 1000 runs as fast as T = 10), and :meth:`MomentsLinearGeneralist.forward`
scores any query steps of whole trajectories from the prefix sums of e_s e_s^T (query t sees s < t only).

Arms are exchangeable (no arm positions anywhere): permuting the arms of every action set permutes
the logits.  Each block's MLP also reads m bilinear readouts x_{t,k}^T U_j h_k (the arm's features
against its token: the posterior mean <x_k, mu_t> and width x_k^T Lambda^{-1} x_k are of this form), and
the logit is  w^T LayerNorm(h_k) + b + x_{t,k}^T U_out h_k.

The version above is the first (``features="moments"``, :class:`MomentsLinearGeneralist`, the
shipped ``linear-generalist-v1``).  The second (``features="posterior"``, the shipped
``linear-generalist``) no longer inverts the moment matrix: it reads closed-form posterior features of a grid of priors
(:mod:`icrl_gym.models.linear_generalist_posterior`) and plays d > d_max on a fixed action set as an
A-armed bandit.  Both share the configuration, the cache and the frame of the model
(:mod:`icrl_gym.models.linear_generalist_core`, whose names this module also exports);
``LinearGeneralistTransformer(config)`` -- the checkpoint kind's model class -- builds the version
that ``config.features`` names.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from icrl_gym.models.generalist import ArmSelfAttention, step_features
from icrl_gym.models.linear_generalist_core import (
    D_MAX,
    FEATURES,
    NOISE_PRIOR_COUNT,
    NOISE_PRIOR_STD,
    NOISE_RIDGE,
    VERSIONS,
    LinearGeneralistCache,
    LinearGeneralistConfig,
    LinearGeneralistMark,
    LinearGeneralistTransformer,
    QueryInputs,
    RunSizes,
    estimate_noise,
    history_tokens,
)
from icrl_gym.models.linear_generalist_posterior import (
    POSTERIOR_FEATURES,
    PosteriorArmNetwork,
    PosteriorLinearGeneralist,
)

__all__ = [
    "D_MAX",
    "FEATURES",
    "NOISE_PRIOR_COUNT",
    "NOISE_PRIOR_STD",
    "NOISE_RIDGE",
    "POSTERIOR_FEATURES",
    "VERSIONS",
    "ArmSelfAttention",
    "Block",
    "HistoryEncoder",
    "LinearCrossAttention",
    "LinearGeneralistCache",
    "LinearGeneralistConfig",
    "LinearGeneralistMark",
    "LinearGeneralistTransformer",
    "MomentsLinearGeneralist",
    "PosteriorArmNetwork",
    "PosteriorLinearGeneralist",
    "Readout",
    "arm_features",
    "estimate_noise",
    "history_tokens",
    "noise_levels",
]


def noise_levels(
    moments: torch.Tensor, dim: torch.Tensor, noise_std: torch.Tensor, estimate: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """The noise level sigma (B, Q) used at every query and whether it was given (B, Q).

    From raw moments (B, Q, E, E), d (B,) and the given sigma (B,).

    sigma is the given one where finite; NaN means unknown: then the in-context estimate
    (:func:`estimate_noise`).  A model trained to estimate it (``estimate``) also reads whether sigma was
    given; one trained with sigma always given is handed the estimate as if it were given (a plug-in).
    """
    known = torch.isfinite(noise_std)
    shape = moments.shape[:2]
    if bool(known.all()):
        return noise_std.view(-1, 1).expand(shape), torch.ones(shape, device=moments.device)
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


class MomentsLinearGeneralist(LinearGeneralistTransformer):
    """The first version: linear attention over the moment matrix of the history (see the module docstring)."""

    features = "moments"

    def __init__(self, config: LinearGeneralistConfig) -> None:
        super().__init__(config)
        d = config.d_model
        self.arm_in = nn.Linear(config.arm_features, d)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.ln_out = nn.LayerNorm(d)
        self.head = nn.Linear(d, 1)
        self.readout_out = Readout(config, 1)
        self.encoder: HistoryEncoder | None = HistoryEncoder(config) if config.history_layers else None

    def _decide(
        self,
        arms: torch.Tensor,
        raw_moments: torch.Tensor,
        steps: torch.Tensor,
        run: RunSizes,
        arm_mask: torch.Tensor | None,
    ) -> torch.Tensor:
        """Arms (B, Q, A, d_max), raw moments (B, Q, E, E) of the history before steps t (B, Q) -> logits (B, Q, A).

        The moments are scaled by 1 / sigma^2 here (the tokens e_s / sigma of the module docstring), sigma the
        given one or, where it is NaN, the in-context estimate (:func:`noise_levels`).
        """
        b, nq, na, _ = arms.shape
        horizon_t, noise, dims = run
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

    def _decide_queries(self, inputs: QueryInputs) -> torch.Tensor:
        history, moments, query_steps, run, arm_mask = inputs
        sets = history[0]
        arms = sets[torch.arange(sets.shape[0], device=sets.device).view(-1, 1), query_steps]  # (B, Q, A, d_max)
        return self._decide(arms, moments, query_steps, run, arm_mask)

    def _decide_step(
        self, cache: LinearGeneralistCache, arms: torch.Tensor, steps: torch.Tensor, arm_mask: torch.Tensor | None
    ) -> torch.Tensor:
        return self._decide(arms, cache.moments.unsqueeze(1), steps, cache.run, arm_mask)
