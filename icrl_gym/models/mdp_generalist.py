"""A generalist tabular-MDP policy: one model for any S, A, H and K, equivariant to state and action labels.

The history of a tabular-MDP run, D_{t-1} = (s_1, a_1, r_1, ..., s_{t-1}, a_{t-1}, r_{t-1}), enters
the posterior of the optimal action P(a* | D_{t-1}, s_t) under any prior that is exchangeable over
the steps of each (h, s, a) (the Dirichlet-Beta prior of ICRL-TabularMDP-v0, the DarkRoom goal prior)
only through its sufficient statistics:

- the transition counts N_h(s, a, s') (pooled over h for a stationary MDP, N(s, a, s')),
- the visit counts N_h(s, a) and reward sums R_h(s, a) (Bernoulli rewards: successes),
- the start-state counts N_start(s) (the initial distribution mu),

plus the position (h, k) of step t.  So the model's cache is this recurrent state, updated in O(1)
per step, never the list of past tokens (a step reads nothing older than the counts): Section 2's
Alg_theta(. | D_{t-1}, s_t) computed from a lossless summary of D_{t-1}.

The network is a learned, weight-tied value-iteration network over the empirical model.  With
n(s, a) = sum_s' N(s, a, s') and the empirical transitions P_emp = N / n (0 where n = 0):

* per (s, a) count features f(s, a) (log counts, the Beta(1, 1) posterior-mean reward
  (1 + R) / (2 + n), the empirical mean, the number of distinct successors ...) -> e(s, a) in R^d;
* two value channels per state at every level l = H - 1, ..., h (backward, from v_H = 0 and a learned V_H):

    scalar  q_l(s, a) = r_hat(s, a) + sum_s' P_hat(s' | s, a) v_{l+1}(s') + b_l(s, a),
            v_l(s)    = max_a q_l(s, a),
            P_hat     = w P_emp + (1 - w) / S,  w = n / (n + S alpha)   (a Dirichlet(alpha) posterior mean),

    embedded x_l(s, a) = e(s, a) + W_m sum_s' P_emp(s' | s, a) V_{l+1}(s') + W_u mean_s' V_{l+1}(s')
                         + W_x max_s' V_{l+1}(s') + W_c c_l(s, a) + W_g g_l + W_s u(s),
            z_l(s, a) = LN(x + MLP(LN(x))),   b_l(s, a) = w_b . z_l(s, a),
            V_l(s)    = LN(W_v sum_a softmax_a(w_a . z_l(s, a)) z_l(s, a)),

  where c_l are the scalar channel's messages (P_hat v, P_emp v, mean and max of v, over H - l),
  g_l the position features (steps left H - l, episodes left K - k - 1, log S, log A) and u(s) the
  start-count features; alpha > 0 is one learned number;
* logits at the current state: w_o . z_h(s_h, a) + beta q_h(s_h, a).

Why this shape.  The scalar channel is exact backward induction (Section 4.3's V*, Appendix G) on
the posterior-mean model plus a learned per-(s, a) bonus b: with b = 0 it is the certainty-
equivalent greedy policy, with b a count-based bonus a UCB-VI; the embedded channel carries what a
scalar cannot (uncertainty of the values downstream, the exploration value of rarely visited
successors, the episodes left), and the read-out approximates P(a* = a | D) rather than a value.
Every weight is shared over states and actions and every aggregation is a sum, mean, max or
softmax-pool over them, so permuting the state labels (of the counts and of s_t) leaves the logits
unchanged and permuting the action labels permutes them, exactly; nothing depends on S, A, H or K
but the loop length and the features, so one model plays every size.  A step costs
O((H - h) (S^2 A d + S A d^2)), independent of t; a training query the same.

:meth:`MDPGeneralist.forward` plans N problems that share (S, A, H, K) but each have their own
counts, state, step h and episode k (a batch of query steps of training trajectories);
:meth:`MDPGeneralist.step` plays B runs online through an :class:`MDPGeneralistCache`.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from icrl_gym.config import POSITIVE_INT, Allowed, DictConfig, check_fields, checked
from icrl_gym.models.policy import EnvInfo, PolicyOutput

NUM_COUNT_FEATURES = 8
"""Length of the per-(s, a) count features f(s, a)."""
NUM_POSITION_FEATURES = 8
"""Length of the per-level position features g_l."""
NUM_VALUE_MESSAGES = 5
"""Length of the scalar channel's messages c_l(s, a)."""
NUM_START_FEATURES = 2
"""Length of the per-state start-count features u(s)."""


@dataclass
class MDPGeneralistConfig(DictConfig):
    """Architecture of :class:`MDPGeneralist` (nothing here depends on S, A, H or K)."""

    d_model: int = checked(32, POSITIVE_INT)
    """Width d of the (s, a) and state embeddings."""
    mlp_ratio: int = checked(2, POSITIVE_INT)
    """Hidden width of the per-(s, a) MLP as a multiple of d."""
    prior_count: float = checked(1.0, Allowed(low=0, strict=True))
    """Initial alpha of the scalar channel's P_hat (learned from there)."""

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass
class CountStats:
    """Sufficient statistics of N histories of one size: the model's input (see the module docstring).

    H' = 1 (stationary: counts pooled over h) or H (one slice per step h).
    """

    n_sas: Tensor
    """N_h(s, a, s'), (N, H', S, A, S): transitions with a next state (none after step H)."""
    n_sa: Tensor
    """N_h(s, a), (N, H', S, A): visits."""
    reward_sum: Tensor
    """R_h(s, a), (N, H', S, A): sums of rewards."""
    starts: Tensor
    """N_start(s), (N, S): episodes started in s."""

    def rows(self, index: Tensor) -> CountStats:
        """The statistics of the histories ``index``."""
        return CountStats(self.n_sas[index], self.n_sa[index], self.reward_sum[index], self.starts[index])

    def level(self, index: Tensor, h: int) -> tuple[Tensor, Tensor, Tensor]:
        """(N_h(s, a, s'), N_h(s, a), R_h(s, a)) at step h of the histories ``index`` (slice 0 if pooled)."""
        i = h if self.n_sas.shape[1] > 1 else 0
        return self.n_sas[index, i], self.n_sa[index, i], self.reward_sum[index, i]


MDPGeneralistUndo = tuple[
    "tuple[Tensor, ...] | None", "Tensor | None", "tuple[Tensor, ...] | None", "tuple[Tensor, Tensor] | None"
]
"""What one :meth:`MDPGeneralistCache.append` added: the (run, h, s, a) visited and the reward sums there before,
the (run, h, s, a, s') transition counted, the (run, s) start counted (None where it added none)."""


class MDPGeneralistCache:
    """The recurrent state of B runs: their :class:`CountStats`, updated one step at a time.

    ``stationary`` pools the counts over h (H' = 1); otherwise they are kept per step h.  The
    environment says which (its reset info's ``stationary``, :attr:`EnvInfo.stationary`), and which
    moves its prior knows (:attr:`EnvInfo.known_moves`, counted from the start).  Per-step counts are
    never wrong, only slower to learn from.
    """

    def __init__(
        self, batch_size: int, env_info: EnvInfo, device: torch.device, dtype: torch.dtype = torch.float32
    ) -> None:
        if env_info.num_states is None:
            raise ValueError("the MDP generalist needs the number of states S (EnvInfo.num_states)")
        self.batch_size, self.device, self.dtype = batch_size, device, dtype
        self.num_states, self.num_actions = env_info.num_states, env_info.num_actions
        self.horizon, self.episodes = env_info.horizon, env_info.episodes
        moves = env_info.known_moves
        self._configure(env_info.stationary, None if moves is None else np.asarray(moves, dtype=np.int64))

    def _allocate(self) -> None:
        B, S, A = self.batch_size, self.num_states, self.num_actions
        hs = 1 if self.stationary else self.horizon

        def zeros(*shape: int) -> Tensor:
            return torch.zeros(*shape, device=self.device, dtype=self.dtype)

        self.stats = CountStats(zeros(B, hs, S, A, S), zeros(B, hs, S, A), zeros(B, hs, S, A), zeros(B, S))
        self.steps = 0
        """Steps decided so far (the next decision is step ``steps``: h = steps mod H, k = steps // H)."""
        self.prev_state = torch.zeros(B, dtype=torch.long, device=self.device)
        self._added: MDPGeneralistUndo | None = None
        """What the last :meth:`append` added, for :meth:`rewind`."""

    def _configure(self, stationary: bool, known_successors: np.ndarray | None) -> None:
        """Pool the counts over h (``stationary``) or keep them per h, and set the moves the prior knows.

        ``known_successors`` (S, A): the deterministic successor of every (s, a) when the prior puts all
        its mass on one transition table (a dark room's moves), or None.  Allocates the empty cache
        (from its :class:`EnvInfo`'s ``stationary`` and ``known_moves``).
        """
        self.stationary = bool(stationary)
        known = None if known_successors is None else known_move_counts(known_successors)
        self.known: Tensor | None = None if known is None else torch.as_tensor(known)
        """The known moves' pseudo-counts (S, A, S), added to N(s, a, s') at every reset, or None."""
        self._allocate()
        self.reset()

    def reset(self) -> None:
        """Empty the cache for new runs of the same size (the known moves' pseudo-counts stay)."""
        for tensor in (self.stats.n_sas, self.stats.n_sa, self.stats.reward_sum, self.stats.starts):
            tensor.zero_()
        if self.known is not None:
            self.stats.n_sas += self.known.to(self.stats.n_sas)
        self.steps = 0
        self._added = None

    def mark(self) -> tuple[int, Tensor]:
        """The cache before a step, for :meth:`rewind`: the steps and the last state (the step records what it adds)."""
        self._added = None
        return self.steps, self.prev_state

    def rewind(self, mark: tuple[int, Tensor]) -> None:
        """Take back the step after :meth:`mark`, exactly.

        The counts it added are subtracted again (whole numbers, exact in floating point) and the
        reward sums it changed get their old values back (subtracting a reward would not be exact).
        """
        if self._added is not None:
            visit, old_rewards, transition, start = self._added
            minus = -torch.ones(self.batch_size, device=self.device, dtype=self.dtype)
            if visit is not None and old_rewards is not None:
                self.stats.n_sa.index_put_(visit, minus, accumulate=True)
                self.stats.reward_sum.index_put_(visit, old_rewards)
            if transition is not None:
                self.stats.n_sas.index_put_(transition, minus, accumulate=True)
            if start is not None:
                self.stats.starts.index_put_(start, minus, accumulate=True)
            self._added = None
        self.steps, self.prev_state = mark

    def append(self, states: Tensor, prev_action: Tensor | None, prev_reward: Tensor | None) -> None:
        """Add the outcome of step ``steps - 1`` (if any) and the start of step ``steps`` at ``states``.

        What it adds is recorded (the indices, and the reward sums it changes) for :meth:`rewind`.
        """
        H, rows = self.horizon, torch.arange(self.batch_size, device=self.device)
        visit = old_rewards = transition = start = None
        if self.steps > 0:
            if prev_action is None or prev_reward is None:
                raise ValueError("the MDP generalist needs the previous action and reward after the first step")
            h_prev = (self.steps - 1) % H
            i = 0 if self.stationary else h_prev
            s, a = self.prev_state, prev_action.long()
            index = (rows, torch.full_like(rows, i), s, a)
            ones = torch.ones_like(s, dtype=self.dtype)
            visit, old_rewards = index, self.stats.reward_sum[index]
            self.stats.n_sa.index_put_(index, ones, accumulate=True)
            self.stats.reward_sum.index_put_(index, prev_reward.to(self.dtype), accumulate=True)
            if h_prev < H - 1:  # no next state after the episode's last step
                transition = (*index, states)
                self.stats.n_sas.index_put_(transition, ones, accumulate=True)
        if self.steps % H == 0:
            ones = torch.ones_like(states, dtype=self.dtype)
            start = (rows, states)
            self.stats.starts.index_put_(start, ones, accumulate=True)
        self.prev_state = states
        self._added = (visit, old_rewards, transition, start)


RANGE_FIELDS = ("num_states", "num_actions", "horizon", "episodes")
"""The sizes a checkpoint record's ranges bound, :class:`EnvInfo`'s names."""


def range_problems(env_info: EnvInfo, playable: Mapping[str, Any], trained: Mapping[str, Any]) -> list[str]:
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


def playable_problems(meta: Mapping[str, Any], env_info: EnvInfo) -> list[str]:
    """The sizes of ``env_info`` that the checkpoint record ``meta`` does not agree to play (empty: it plays them).

    The record's ``playable_range`` bounds them, or its ``trained_range`` where it states no playable
    one; a record with neither (a model held in memory) plays any size.  The one rule of the MDP
    generalist's agent at reset and of fine-tuning's check of its ``env`` (a fine-tuned model keeps
    its base's record, so a size its base refuses would be refused by the fine-tuned model's agent).
    """
    trained = meta.get("trained_range") or {}
    playable = meta.get("playable_range") or trained
    return range_problems(env_info, playable, trained)


KNOWN_MOVE_COUNT = 1.0
"""Pseudo-count of a transition the prior knows for certain (a dark room's moves), added to N(s, a, s')."""


def known_move_counts(successors: np.ndarray) -> np.ndarray:
    """(S, A, S) pseudo-counts ``KNOWN_MOVE_COUNT`` on the known successor of every (s, a) (``successors`` (S, A)).

    A dark room's prior puts all its mass on its moves (DarkRoom PSRL reads them too), but a model
    equivariant to state labels cannot know which unvisited cell is next to which: the moves enter
    as counts, the one input it has.  The rewards stay unknown until visited.
    """
    successors = np.asarray(successors, dtype=np.int64)
    S, A = successors.shape
    out = np.zeros((S, A, S), dtype=np.float32)
    out[np.arange(S)[:, None], np.arange(A), successors] = KNOWN_MOVE_COUNT
    return out


def count_features(n_sas: Tensor, n_sa: Tensor, reward_sum: Tensor) -> Tensor:
    """f(s, a) (..., S, A, 8) from the counts of one level (module docstring)."""
    n_next = n_sas.sum(-1)
    distinct = (n_sas > 0).sum(-1).float()
    return torch.stack(
        [
            torch.log1p(n_sa) / 3.0,
            1.0 / (1.0 + n_sa),
            (1.0 + reward_sum) / (2.0 + n_sa),
            reward_sum / n_sa.clamp_min(1.0),
            (n_sa > 0).float(),
            torch.log1p(n_next) / 3.0,
            torch.log1p(distinct) / 2.0,
            distinct / (1.0 + n_next),
        ],
        dim=-1,
    )


class MDPGeneralist(nn.Module):
    """The learned value-iteration policy of the module docstring."""

    def __init__(self, config: MDPGeneralistConfig) -> None:
        super().__init__()
        self._config = config
        d, hidden = config.d_model, config.d_model * config.mlp_ratio
        self.count_in = nn.Linear(NUM_COUNT_FEATURES, d)
        self.position_in = nn.Linear(NUM_POSITION_FEATURES, d)
        self.start_in = nn.Linear(NUM_START_FEATURES, d, bias=False)
        self.value_in = nn.Linear(NUM_VALUE_MESSAGES, d, bias=False)
        self.msg_emp = nn.Linear(d, d, bias=False)
        self.msg_mean = nn.Linear(d, d, bias=False)
        self.msg_max = nn.Linear(d, d, bias=False)
        self.norm_in = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, hidden), nn.GELU(), nn.Linear(hidden, d))
        self.norm_out = nn.LayerNorm(d)
        self.readout = nn.Linear(d, 3)
        """z -> (bonus b, pool score, policy logit): one matmul for the three per-(s, a) read-outs."""
        self.pool_out = nn.Linear(d, d)
        self.norm_value = nn.LayerNorm(d)
        self.terminal = nn.Parameter(torch.zeros(d))
        self.beta = nn.Parameter(torch.tensor(1.0))
        self.log_alpha = nn.Parameter(torch.tensor(math.log(config.prior_count)))
        with torch.no_grad():  # start as the certainty-equivalent planner: no bonus
            self.readout.weight[0].zero_()
            self.readout.bias[0] = 0.0

    @property
    def config(self) -> MDPGeneralistConfig:
        """The architecture (the checkpoint record's ``model``)."""
        return self._config

    # ------------------------------------------------------------------ planning
    def _position(self, level: int, k: Tensor, S: int, A: int, H: int, K: int) -> Tensor:
        """g_l (N, 8): steps left H - l, episodes left, the sizes."""
        left = torch.full_like(k, float(H - level), dtype=torch.float32)
        episodes_left = (K - 1 - k).float()
        const = torch.tensor(
            [math.log(S) / 3.0, math.log(A) / 2.0, math.log1p(H) / 4.0, math.log1p(K) / 4.0], device=k.device
        ).expand(k.shape[0], 4)
        varying = [left / H, torch.log1p(left) / 4.0, torch.log1p(episodes_left) / 4.0, (k + 1).float() / K]
        return torch.cat([torch.stack(varying, 1), const], dim=1)

    def forward(self, stats: CountStats, states: Tensor, h: Tensor, k: Tensor, horizon: int, episodes: int) -> Tensor:
        """Logits (N, A) of N problems of one size at their states ``states`` (N,), steps ``h`` and episodes ``k`` (N,).

        Level l = H - 1, ..., min h is computed for the problems with h <= l only (sorted by h, a
        shrinking prefix), so a problem costs H - h levels.
        """
        N, S, A = stats.n_sa.shape[0], stats.n_sa.shape[2], stats.n_sa.shape[3]
        H, K = horizon, episodes
        if N == 0:
            return torch.zeros(0, A, device=states.device)
        order = torch.argsort(h, stable=True)
        h_sorted = h[order].tolist()
        lowest = h_sorted[0]
        starts = stats.starts[order]
        total = starts.sum(1, keepdim=True).clamp_min(1.0)
        start_emb = self.start_in(torch.stack([torch.log1p(starts) / 3.0, starts / total], -1))  # (N, S, d)
        alpha = self.log_alpha.exp()
        v = torch.zeros(N, S, device=states.device, dtype=stats.n_sa.dtype)
        V = self.terminal.expand(N, S, -1)
        logits: list[Tensor] = []
        static: tuple[Tensor, Tensor, Tensor, Tensor] | None = None
        active = N
        for level in range(H - 1, lowest - 1, -1):
            while active > 0 and h_sorted[active - 1] > level:
                active -= 1
            index = order[:active]
            if static is None or stats.n_sas.shape[1] > 1:  # pooled counts: the same at every level
                n_sas, n_sa, reward_sum = stats.level(index, level)
                n_next = n_sas.sum(-1, keepdim=True)
                p_emp = n_sas / n_next.clamp_min(1.0)
                e = self.count_in(count_features(n_sas, n_sa, reward_sum))
                r_hat = (1.0 + reward_sum) / (2.0 + n_sa)
                static = (p_emp, n_next.squeeze(-1), e, r_hat)
            p_emp, n_next, e, r_hat = (x[:active] for x in static)
            v, V = v[:active], V[:active]
            w = n_next / (n_next + S * alpha)
            emp_v = torch.einsum("nsat,nt->nsa", p_emp, v)
            mean_v = v.mean(1)
            pv = w * emp_v + (1.0 - w) * mean_v[:, None, None]
            scale = float(H - level)
            messages = torch.stack(
                [
                    pv / scale,
                    emp_v / scale,
                    mean_v[:, None, None].expand_as(pv) / scale,
                    v.max(1).values[:, None, None].expand_as(pv) / scale,
                    (v.max(1).values[:, None, None] - pv) / scale,
                ],
                dim=-1,
            )
            glob = (
                self.msg_mean(V.mean(1))
                + self.msg_max(V.max(1).values)
                + self.position_in(self._position(level, k[index], S, A, H, K).to(v.dtype))
            )
            x = (
                e
                + torch.einsum("nsat,ntd->nsad", p_emp, self.msg_emp(V))  # W (P V) = P (V W^T): S d^2, not S A d^2
                + self.value_in(messages)
                + glob[:, None, None, :]
                + start_emb[:active, :, None, :]
            )
            x = x + self.mlp(self.norm_in(x))
            z = self.norm_out(x)  # (n, S, A, d)
            bonus, score, head = self.readout(z).unbind(-1)  # (n, S, A) each
            q = r_hat + pv + bonus
            done = active - bisect.bisect_left(h_sorted, level, 0, active)  # the problems with h == level
            if done:
                rows = torch.arange(active - done, active, device=states.device)
                s_now = states[index[active - done :]]
                out = head[rows, s_now] + self.beta * q[rows, s_now]
                logits.append(out)
            v = q.max(-1).values
            pool = torch.softmax(score, dim=-1)  # (n, S, A)
            V = self.norm_value(self.pool_out(torch.einsum("nsa,nsad->nsd", pool, z)))
        # the problems finished in the order of decreasing h: undo it
        ordered = torch.cat(logits[::-1], dim=0)  # now in the order of increasing h (the sorted order)
        result = torch.empty_like(ordered)
        result[order] = ordered
        return result

    # ------------------------------------------------------------------ the learned-policy contract
    def new_cache(
        self, batch_size: int, env_info: EnvInfo, device: torch.device | str | None = None
    ) -> MDPGeneralistCache:
        """An empty cache of B runs of the MDPs ``env_info`` describes (S, A, H, K).

        Its counts are pooled over h where ``env_info.stationary``, and start from ``env_info.known_moves``.
        """
        device = self.beta.device if device is None else torch.device(device)
        return MDPGeneralistCache(batch_size, env_info, device, self.beta.dtype)

    @torch.no_grad()
    def step(
        self,
        cache: MDPGeneralistCache,
        observation: Tensor,
        prev_action: Tensor | None,
        prev_reward: Tensor | None,
    ) -> PolicyOutput:
        """``PolicyOutput(logits (B, A), None)`` at the runs' states ``observation`` (B,), after the last step."""
        states = observation.long().to(cache.device)
        if states.shape != (cache.batch_size,):
            shape = tuple(states.shape)
            raise ValueError(f"the MDP generalist takes the states (B,) = ({cache.batch_size},), got {shape}")
        if cache.steps >= cache.horizon * cache.episodes:
            raise ValueError(f"the runs have ended after T = K H = {cache.horizon * cache.episodes} steps")
        cache.append(states, prev_action, prev_reward)
        h, k = cache.steps % cache.horizon, cache.steps // cache.horizon
        B = cache.batch_size
        logits = self(
            cache.stats,
            states,
            torch.full((B,), h, dtype=torch.long, device=cache.device),
            torch.full((B,), k, dtype=torch.long, device=cache.device),
            cache.horizon,
            cache.episodes,
        )
        cache.steps += 1
        return PolicyOutput(logits, None)
