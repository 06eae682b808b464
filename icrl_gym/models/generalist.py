"""A generalist in-context bandit transformer: one model for any number of arms K and any horizon T.

Encoder-decoder with one *query token per arm*:

* History tokens, one per past step s < t: x_s = W_in [r_s, 1].  Arm identity is not in the token.
  A stationary bandit's posterior is invariant to the order of the past steps, so there is no
  positional encoding over the history either (which lets T extrapolate).
* Arm tokens at decision step t, one per arm k, all initialised from the same per-step features
  of the horizon, phi(t, T) = (log(1 + T - t), (T - t) / T, log(1 + t), 1) (a fixed transform of the
  current step, not a statistic of the past).
* L blocks of  [cross-attention arm -> history  ->  self-attention across the K arm tokens  ->  MLP]
  (pre-LayerNorm, residual).  In the cross-attention the score of arm query k on history key s
  gets a fixed per-head bias beta_h 1[a_s = k] (the exact "same arm" relation, for any K), and
  every head also sees a learned sink key, so a head focused on arm k's n_k pulls puts weight
  c / (c + n_k) on the sink (a count) and averages the rewards of arm k (a mean).  Nothing here
  orders the arms: permuting the arm labels of the history permutes the logits.
* logit_k = w^T LayerNorm(h_k) + b.

History tokens are not updated by the blocks, so each block's key/value of step s is computed once:
:meth:`GeneralistTransformer.step` appends step t - 1 to a :class:`GeneralistCache` and scores the
K arms at step t in O(K t); :meth:`GeneralistTransformer.forward` scores a set of query steps of
whole trajectories at once (query t sees only s < t), for training.

Grouped cache (the default for rollouts).  With Bernoulli rewards a history token takes one of two
values, x(0) or x(1), so every block's history keys and values take two values too, and the score of
arm query k on step s is q_k . key(r_s) / sqrt(dh) + beta_h 1[a_s = k].  The attention of query k
over the sink and the t history steps is therefore exactly an attention over five grouped keys --
the sink, (r, a_s = k) and (r, a_s != k) for r in {0, 1} -- each with its multiplicity m added to its
score as log m (log 0 = -inf): softmax over s of (score_s) equals the grouped softmax with the equal
terms summed.  :class:`GeneralistCache` with ``grouped=True`` stores these multiplicities (how many
steps s < t had a_s = k and r_s = r) instead of t keys and values per block, so a step costs O(K)
instead of O(K t) and the cache O(K) memory instead of O(L t D); the function is unchanged (equal to
the ungrouped cache and to :meth:`GeneralistTransformer.forward` up to float rounding, checked in
``tests/test_generalist.py``).  ``grouped=False`` keeps every key (any real reward): the cache of
an environment whose :class:`~icrl_gym.models.policy.EnvInfo` says ``reward="gaussian"``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from icrl_gym.config import DictConfig
from icrl_gym.models.native import native_kernels, readable
from icrl_gym.models.policy import EnvInfo, PolicyOutput

NUM_STEP_FEATURES = 4
"""Length of phi(t, T), the per-step horizon features every arm token starts from."""

GroupedMaps = list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
"""Per block, the folded cross-attention (score map (D, 3H), score bias (3H,), output map (3H, D))."""


@dataclass
class ArmTokenConfig(DictConfig):
    """The shape both generalists share: arm tokens of width D through L blocks of H-head attention and an MLP."""

    d_model: int = 64
    """Width D of the arm (and history) tokens."""
    n_heads: int = 4
    """Attention heads H of every cross- and self-attention (D must be a multiple of H)."""
    n_layers: int = 3
    """Number L of blocks [cross-attention arm -> history, self-attention across arms, MLP]."""
    mlp_ratio: int = 4
    """Hidden width of the MLPs as a multiple of D."""

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not a multiple of n_heads={self.n_heads}")


@dataclass
class GeneralistConfig(ArmTokenConfig):
    """Architecture of :class:`GeneralistTransformer` (nothing here depends on K or T)."""

    same_arm_bias: tuple[float, ...] = (0.0, 4.0, 8.0, 16.0)
    """The same-arm score bias beta_h of each cross-attention head (fixed: a learned one makes the
    attention mask need a gradient, 4x slower on CPU).  0: a head over every arm's pulls; 16: a
    head over arm k's pulls only (and the sink)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.same_arm_bias = tuple(float(b) for b in self.same_arm_bias)
        if len(self.same_arm_bias) != self.n_heads:
            raise ValueError(f"same_arm_bias needs one value per head ({self.n_heads}), got {self.same_arm_bias}")


def step_features(t: torch.Tensor, horizon: torch.Tensor) -> torch.Tensor:
    """phi(t, T) (..., 4) for steps t (0-based: t steps done) of runs of T steps (both (...) tensors)."""
    t = t.float()
    horizon = horizon.float().expand_as(t)
    left = horizon - t
    return torch.stack([torch.log1p(left) / 5.0, left / horizon, torch.log1p(t) / 5.0, torch.ones_like(t)], dim=-1)


class CrossAttention(nn.Module):
    """Arm queries attend to the history with a per-head same-arm bias and a learned sink."""

    def __init__(self, config: GeneralistConfig) -> None:
        super().__init__()
        d, h = config.d_model, config.n_heads
        self.n_heads, self.head_dim = h, d // h
        self.query = nn.Linear(d, d)
        self.key = nn.Linear(d, d)
        self.value = nn.Linear(d, d)
        self.out = nn.Linear(d, d)
        self.sink_key = nn.Parameter(torch.randn(h, self.head_dim) / math.sqrt(self.head_dim))
        self.sink_value = nn.Parameter(torch.zeros(h, self.head_dim))

    def keys_values(self, history: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """History tokens (B, S, D) -> keys and values (B, H, S, dh)."""
        b, s, _ = history.shape
        k = self.key(history).view(b, s, self.n_heads, self.head_dim).transpose(1, 2)
        v = self.value(history).view(b, s, self.n_heads, self.head_dim).transpose(1, 2)
        return k, v

    def forward(self, arms: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """Attend.

        arms (B, Q, K, D) arm tokens at Q steps; k, v (B, H, S, dh) the history; bias (B, H, QK, 1 + S)
        the scores' additive bias: 0 on the sink, beta_h 1[a_s = k] on s < t_q, -inf on s >= t_q.
        Returns (B, Q, K, D).
        """
        b, nq, na, d = arms.shape
        q = self.query(arms).view(b, nq * na, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, QK, dh)
        keys = torch.cat([self.sink_key.view(1, -1, 1, self.head_dim).expand(b, -1, 1, -1), k], dim=2)
        values = torch.cat([self.sink_value.view(1, -1, 1, self.head_dim).expand(b, -1, 1, -1), v], dim=2)
        y = F.scaled_dot_product_attention(q, keys, values, attn_mask=bias)  # (B, H, QK, dh)
        return self.out(y.transpose(1, 2).reshape(b, nq, na, d))

    def grouped_maps(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The attention over the sink and two history tokens, folded into two linear maps.

        ``tokens`` (1, 2, D) are x(0) and x(1).  With kappa_hj and nu_hj head h's key and value of
        j in (sink, x(0), x(1)), the score of query token x is (W_q x + b_q)_h . kappa_hj / sqrt(dh)
        = x . a_hj + c_hj, and the output of weights w_hj is W_o sum_j w_hj nu_hj + b_o
        = sum_hj w_hj e_hj + b_o with e_hj = W_o,h nu_hj.  Returns a (D, 3H), c (3H,) and e (3H, D),
        index h * 3 + j.
        """
        h, dh = self.n_heads, self.head_dim
        k, v = self.keys_values(tokens)  # (1, H, 2, dh)
        keys = torch.cat([self.sink_key.view(h, 1, dh), k[0]], dim=1) / math.sqrt(dh)  # (H, 3, dh)
        values = torch.cat([self.sink_value.view(h, 1, dh), v[0]], dim=1)
        score_map = torch.einsum("hed,hje->dhj", self.query.weight.view(h, dh, -1), keys).reshape(-1, 3 * h)
        score_bias = torch.einsum("he,hje->hj", self.query.bias.view(h, dh), keys).reshape(3 * h)
        out_map = torch.einsum("dhe,hje->hjd", self.out.weight.view(-1, h, dh), values).reshape(3 * h, -1)
        return score_map, score_bias, out_map


class ArmSelfAttention(nn.Module):
    """Softmax attention across the K arm tokens of one step (no positions: permutation-equivariant).

    The softmax is written out, as exp(s - max s) / sum, so that padded arms can be masked (the linear generalist's
    action sets of different sizes) and because ``torch.softmax`` is slow on rows this short: on one thread it took
    4.8 ms over rows of about ten arms at B = 1,000, H = 4, and the whole written-out attention 2.4 ms (outputs equal
    to 5e-7).  Over K = 5 arms (B = 1,000, D = 32) the written-out attention and ``scaled_dot_product_attention``
    both took about 2.0-2.3 ms a call; q, k and v made contiguous before the products, 2.0 ms where the strided
    views took 2.3 (q k^T 0.24 ms against 0.74), with the same outputs.
    """

    def __init__(self, config: ArmTokenConfig) -> None:
        super().__init__()
        d, h = config.d_model, config.n_heads
        self.n_heads, self.head_dim = h, d // h
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, arms: torch.Tensor, arm_mask: torch.Tensor | None = None) -> torch.Tensor:
        """(B, Q, K, D) with ``arm_mask`` (B, K) (True: a real arm) or None -> (B, Q, K, D).

        Where no gradient is asked for (a rollout) of float32 tokens on the CPU, the compiled kernel
        (:meth:`~icrl_gym.models.native_build.NativeKernels.arm_attention`) computes the attention in one
        pass over the arms, the same function to float rounding: over K = 5 arms at B = 1,000 it took
        0.9 ms a call where this written-out path took 2.7-4.8 ms (one thread).
        """
        b, nq, na, d = arms.shape
        qkv = self.qkv(arms)
        kernels = native_kernels() if not qkv.requires_grad and readable(qkv) else None
        if kernels is not None:
            rows = None if arm_mask is None else arm_mask.view(b, 1, na).expand(b, nq, na).reshape(b * nq, na)
            y = kernels.arm_attention(qkv.reshape(b * nq, na, 3 * d), self.n_heads, rows)
            return self.out(y.view(b, nq, na, d))
        qkv = qkv.view(b * nq, na, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.contiguous()  # the batched products over a few arms run 1.5-3x faster on contiguous heads
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(self.head_dim)  # (BQ, H, K, K)
        if arm_mask is not None:
            mask = arm_mask.view(b, 1, 1, 1, na).expand(b, nq, 1, 1, na).reshape(b * nq, 1, 1, na)
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = (scores - scores.amax(-1, keepdim=True)).exp()
        y = (weights / weights.sum(-1, keepdim=True)) @ v  # (BQ, H, K, dh)
        return self.out(y.transpose(1, 2).reshape(b, nq, na, d))


class Block(nn.Module):
    """[cross-attention to the history -> self-attention across arms -> MLP], pre-LayerNorm residuals."""

    def __init__(self, config: GeneralistConfig) -> None:
        super().__init__()
        d = config.d_model
        self.ln_cross, self.ln_self, self.ln_mlp = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.cross = CrossAttention(config)
        self.self_attn = ArmSelfAttention(config)
        self.mlp = nn.Sequential(nn.Linear(d, config.mlp_ratio * d), nn.GELU(), nn.Linear(config.mlp_ratio * d, d))

    def forward(self, arms: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """(B, Q, K, D) arm tokens -> (B, Q, K, D); see :meth:`CrossAttention.forward` for the rest."""
        arms = arms + self.cross(self.ln_cross(arms), k, v, bias)
        arms = arms + self.self_attn(self.ln_self(arms))
        return arms + self.mlp(self.ln_mlp(arms))


def _as_block(module: nn.Module) -> Block:
    """An entry of ``GeneralistTransformer.blocks`` as its :class:`Block` (``nn.ModuleList`` yields ``nn.Module``)."""
    if not isinstance(module, Block):
        raise TypeError(f"expected a Block, got {type(module).__name__}")
    return module


class GeneralistCache:
    """The history of B runs, filled one step at a time (capacity ``horizon`` steps).

    ``grouped=False``: every block's keys/values (B, H, T, dh) and the actions (B, T).  ``grouped=True``
    (rewards in {0, 1} only): the multiplicities ``counts`` (B, K, 2) of (arm, reward) pairs and their
    totals over arms (B, 2) -- see the module docstring.
    """

    def __init__(
        self,
        model: GeneralistTransformer,
        batch_size: int,
        num_arms: int,
        horizon: int,
        device: torch.device,
        grouped: bool = True,
    ) -> None:
        cfg = model.config
        h, dh = cfg.n_heads, cfg.d_model // cfg.n_heads
        self.grouped = grouped
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        if not grouped:
            shape = (batch_size, h, horizon, dh)
            self.keys = [torch.zeros(shape, device=device) for _ in model.blocks]
            self.values = [torch.zeros(shape, device=device) for _ in model.blocks]
            self.actions = torch.full((batch_size, horizon), -1, dtype=torch.long, device=device)
        self.counts = torch.zeros(batch_size, num_arms, 2, device=device)
        """(B, K, 2) with grouped=True: steps s < t with a_s = k and r_s = r."""
        self.totals = torch.zeros(batch_size, 2, device=device)
        """(B, 2) with grouped=True: steps s < t with r_s = r, over all arms."""
        self.batch_size, self.device = batch_size, device
        self.num_arms = num_arms
        """K, the arms of the runs."""
        self.horizon = horizon
        """T, the steps of a run (the cache's capacity)."""
        self.steps = 0
        """Number of history steps stored (the next decision is at step ``steps``)."""
        self._counted: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        """(runs, arms, rewards) counted since the last :meth:`mark` (grouped), for :meth:`rewind`."""
        self.maps: GroupedMaps | None = None
        """With grouped=True: every block's folded cross-attention (:meth:`GeneralistTransformer.grouped_maps`),
        computed at the first decision of the runs and kept until :meth:`reset` (the weights do not change within
        a rollout)."""

    def reset(self) -> None:
        """Empty the cache for new runs of the same size (stale keys beyond ``steps`` are never read)."""
        self.counts.zero_()
        self.totals.zero_()
        self.steps = 0
        self._counted = None
        self.maps = None

    def mark(self) -> int:
        """The cache before a step, for :meth:`rewind`: the steps stored (the step records the counts it adds)."""
        self._counted = None
        return self.steps

    def rewind(self, mark: int) -> None:
        """Take back the step after :meth:`mark`, exactly.

        Grouped: its counts are subtracted again (whole numbers, exact in floating point); not
        grouped: the keys, values and action of step ``mark`` become stale (written again by the next step).
        """
        if self._counted is not None:
            rows, actions, r = self._counted
            self.counts[rows, actions, r] -= 1.0
            self.totals[rows, r] -= 1.0
            self._counted = None
        self.steps = mark

    def append_grouped(self, actions: torch.Tensor, rewards: torch.Tensor) -> None:
        """Count step ``steps`` (actions (B,) in [0, K), rewards (B,) in {0, 1}) in the grouped cache."""
        if not bool(((rewards == 0) | (rewards == 1)).all()):
            raise ValueError(
                "a grouped generalist cache takes rewards in {0, 1} only; make it for EnvInfo(reward='gaussian')"
            )
        if bool(((actions < 0) | (actions >= self.num_arms)).any()):
            raise ValueError(f"actions must lie in [0, {self.num_arms}), got {actions.tolist()}")
        r = rewards.long()
        rows = torch.arange(self.batch_size, device=self.device)
        self.counts[rows, actions, r] += 1.0
        self.totals[rows, r] += 1.0
        self._counted = (rows, actions, r)


class GeneralistTransformer(nn.Module):
    """Per-arm query transformer over a raw bandit trajectory (see the module docstring)."""

    def __init__(self, config: GeneralistConfig) -> None:
        super().__init__()
        self.config = config
        d = config.d_model
        self.history_in = nn.Linear(2, d)  # [r_s, 1] -> x_s
        self.arm_in = nn.Linear(NUM_STEP_FEATURES, d)  # phi(t, T) -> initial arm token
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.ln_out = nn.LayerNorm(d)
        self.head = nn.Linear(d, 1)

    def _history(self, rewards: torch.Tensor) -> torch.Tensor:
        """Rewards (B, S) -> history tokens (B, S, D)."""
        return self.history_in(torch.stack([rewards.float(), torch.ones_like(rewards, dtype=torch.float)], dim=-1))

    def _decide(
        self,
        features: torch.Tensor,
        num_arms: int,
        kv: list[tuple[torch.Tensor, torch.Tensor]],
        actions: torch.Tensor,
        visible: torch.Tensor,
    ) -> torch.Tensor:
        """Features (B, Q, 4) -> logits (B, Q, K), given every block's history keys/values and actions (B, S)."""
        b, nq, _ = features.shape
        s = actions.shape[1]
        arms = self.arm_in(features).unsqueeze(2).expand(b, nq, num_arms, -1)  # (B, Q, K, D)
        same = actions.unsqueeze(1) == torch.arange(num_arms, device=actions.device).view(1, -1, 1)  # (B, K, S)
        beta = torch.tensor(self.config.same_arm_bias, device=actions.device).view(1, -1, 1, 1, 1)
        bias = (beta * same.view(b, 1, 1, num_arms, s)).masked_fill(~visible.view(b, 1, nq, 1, s), float("-inf"))
        bias = bias.reshape(b, len(self.config.same_arm_bias), nq * num_arms, s)
        bias = F.pad(bias, (1, 0))  # (B, H, QK, 1 + S): the sink first
        for block, (k, v) in zip(self.blocks, kv, strict=True):
            arms = block(arms, k, v, bias)
        return self.head(self.ln_out(arms)).squeeze(-1)  # (B, Q, K)

    def forward(
        self,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        query_steps: torch.Tensor,
        horizon: torch.Tensor | int,
        num_arms: int,
    ) -> torch.Tensor:
        """Logits (B, Q, K) of the policy at steps ``query_steps`` (B, Q) of trajectories (B, S).

        actions (B, S) long in [0, K) and rewards (B, S) are the trajectory; the decision at step t
        (0-based, t steps done) sees steps s < t only; ``horizon`` is T (an int or (B,)).
        """
        b, s = actions.shape
        horizon_t = torch.as_tensor(horizon, device=actions.device).reshape(-1, 1).expand(b, 1)
        features = step_features(query_steps, horizon_t)  # (B, Q, 4)
        history = self._history(rewards)
        kv = [_as_block(block).cross.keys_values(history) for block in self.blocks]
        visible = (torch.arange(s, device=actions.device).view(1, 1, s) < query_steps.unsqueeze(-1)).unsqueeze(2)
        return self._decide(features, num_arms, kv, actions, visible)  # visible: (B, Q, 1, S)

    def new_cache(
        self, batch_size: int, env_info: EnvInfo, device: torch.device | str | None = None
    ) -> GeneralistCache:
        """An empty cache for B runs of K = ``env_info.num_actions`` arms and T = ``env_info.horizon`` steps.

        Grouped (Bernoulli rewards, O(K) per step) unless ``env_info.reward`` is 'gaussian' (every
        key kept: any real reward).
        """
        device = self.head.weight.device if device is None else torch.device(device)
        grouped = env_info.reward != "gaussian"
        return GeneralistCache(self, batch_size, env_info.num_actions, env_info.steps, device, grouped)

    @torch.no_grad()
    def step(
        self,
        cache: GeneralistCache,
        observation: torch.Tensor | None,
        prev_action: torch.Tensor | None,
        prev_reward: torch.Tensor | None,
    ) -> PolicyOutput:
        """``PolicyOutput(logits (B, K), None)`` at step ``cache.steps``, after appending the previous step.

        ``observation`` is the action sets (B, K, d) of the step (checked for K only: the arms are
        e_1..e_K, so the model reads nothing from them) or None.
        """
        num_arms, horizon = cache.num_arms, cache.horizon
        if observation is not None and (observation.dim() != 3 or observation.shape[1] != num_arms):
            raise ValueError(
                f"the cache holds runs of K={num_arms} arms; got action sets of shape {tuple(observation.shape)}"
            )
        if (prev_action is None) != (prev_reward is None):
            raise ValueError("prev_action and prev_reward go together (both None at the first step)")
        if prev_action is not None and prev_reward is not None:
            t = cache.steps
            if t >= horizon:
                raise ValueError(f"the cache holds {horizon} steps; it cannot take step {t + 1}")
            if cache.grouped:
                cache.append_grouped(prev_action, prev_reward)
            else:
                token = self._history(prev_reward.view(-1, 1))  # (B, 1, D)
                for i, block in enumerate(self.blocks):
                    k, v = _as_block(block).cross.keys_values(token)
                    cache.keys[i][:, :, t : t + 1] = k
                    cache.values[i][:, :, t : t + 1] = v
                cache.actions[:, t] = prev_action
            cache.steps = t + 1
        if cache.steps >= horizon:
            raise ValueError(f"the runs were started for T={horizon} steps; there is no step {cache.steps + 1}")
        if cache.grouped:
            if cache.maps is None:
                cache.maps = self.grouped_maps()
            return PolicyOutput(self.decide_counts(cache.counts, cache.totals, cache.steps, horizon, cache.maps), None)
        t = cache.steps
        b = cache.actions.shape[0]
        device = cache.actions.device
        features = step_features(torch.full((b, 1), t, device=device), torch.full((b, 1), horizon, device=device))
        kv = [(k[:, :, :t], v[:, :, :t]) for k, v in zip(cache.keys, cache.values, strict=True)]
        visible = torch.ones(b, 1, 1, t, dtype=torch.bool, device=device)
        return PolicyOutput(self._decide(features, num_arms, kv, cache.actions[:, :t], visible)[:, 0], None)

    @torch.no_grad()
    def grouped_maps(self) -> GroupedMaps:
        """Every block's cross-attention folded over the sink and x(0), x(1) (:meth:`CrossAttention.grouped_maps`)."""
        tokens = self._history(torch.tensor([[0.0, 1.0]], device=self.head.weight.device))  # (1, 2, D): x(0), x(1)
        return [_as_block(block).cross.grouped_maps(tokens) for block in self.blocks]

    @torch.no_grad()
    def decide_counts(
        self, counts: torch.Tensor, totals: torch.Tensor, t: int, horizon: int, maps: GroupedMaps | None = None
    ) -> torch.Tensor:
        """Logits (B, K) at step t of T = ``horizon`` from the grouped counts (module docstring: grouped keys).

        ``counts`` (B, K, 2): the steps s < t with a_s = k and r_s = r; ``totals`` (B, 2): their sums
        over the arms.  The grouped cache's decision, which is a function of the counts and (t, T) only.
        ``maps``: :meth:`grouped_maps` of these weights, computed here when not given (a rollout keeps them).

        Each cross-attention is computed in its folded form (:meth:`CrossAttention.grouped_maps`): the
        five grouped keys collapse to three per head, the sink and x(r) with multiplicity
        mu_hr = e^{beta_h} n_kr + (N_r - n_kr) (the same-arm steps' biased terms and the other arms'
        terms share one exponent), so head h's weights are softmax_j(x . a_hj + c_hj + log mu_hj), and
        the output is W_o y + b_o = sum_hj w_hj e_hj + b_o.  Two maps, D -> 3H and 3H -> D, replace the
        query and output projections and the per-head products with the grouped keys and values.  The
        arm tokens enter the first block equal (they depend on (t, T) only), so that block's scores are
        computed once.
        """
        b, num_arms = counts.shape[:2]
        device = counts.device
        h = self.config.n_heads
        features = step_features(torch.full((1,), t, device=device), torch.full((1,), horizon, device=device))
        arms = self.arm_in(features).view(1, 1, -1)  # (1, 1, D), broadcast over runs and arms until block 1 adds
        beta = torch.tensor(self.config.same_arm_bias, device=device).view(1, 1, h, 1)
        same = counts.unsqueeze(2).log()  # (B, K, 1, 2): log n_kr, -inf for none
        other = (totals.view(b, 1, 1, 2) - counts.unsqueeze(2)).log()  # log (N_r - n_kr)
        log_mu = torch.logaddexp(same + beta, other)  # (B, K, H, 2)
        for block, (score_map, score_bias, out_map) in zip(self.blocks, maps or self.grouped_maps(), strict=True):
            blk = _as_block(block)
            x = blk.ln_cross(arms)
            scores = (x @ score_map + score_bias).view(x.shape[0], -1, h, 3)
            scores = torch.cat([scores[..., :1].expand(b, num_arms, h, 1), scores[..., 1:] + log_mu], dim=-1)
            w = (scores - scores.amax(dim=-1, keepdim=True)).exp()  # a softmax over 3 values, written out:
            w = w / w.sum(dim=-1, keepdim=True)  # torch.softmax is several times slower on so short a dim
            arms = arms + torch.addmm(blk.cross.out.bias, w.view(b * num_arms, 3 * h), out_map).view(b, num_arms, -1)
            arms = arms + blk.self_attn(blk.ln_self(arms).unsqueeze(1)).squeeze(1)
            arms = arms + blk.mlp(blk.ln_mlp(arms))
        return self.head(self.ln_out(arms)).squeeze(-1)
