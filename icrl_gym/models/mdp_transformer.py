"""The in-context transformer for tabular MDPs (Appendix G.1), on the bandit model's decoder blocks.

Token layout of a run of K episodes of H steps, as in the paper: for step t = (k, h) a state
token carrying one-hot(s_{k,h}) and an action-reward token carrying (one-hot(a_{k,h}), r_{k,h}); at
the end of every episode an extra empty token (room for intermediate computations), so episode k
occupies tokens k(2H+1) .. k(2H+1) + 2H, the last being empty.  Every token also carries its type
(state / action-reward / empty) and the positional part (k/K, h/H) besides a learned absolute
position embedding (``positional="learned"``) or none (``"none"``).  The policy at step (k, h) is
softmax of a linear read-out of the output at its state token, so all T = K H policies come from
one forward pass, and online rollout appends tokens to the same key/value cache as the bandit model.

Beyond the paper (``prev_tokens = p > 0``): each token's input embedding also reads the raw
features of its p predecessors, x_i = W [f_i; f_{i-1}; ...; f_{i-p}] (zeros before the first
token), a causal convolution over the features.  A step's transition (s_t, a_t, r_t, s_{t+1})
spans three tokens; the paper's construction brings them together with an attention layer that
reads the positional features (i, i^2), which gradient descent finds slowly, while with p = 2 the
state token of s_{t+1} sees (s_t, a_t, r_t) from the start.  The token contents stay the paper's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from icrl_gym.models.decoder import Block, DecoderConfig, count_parameters, init_gpt_weights
from icrl_gym.models.kv_cache import KVCache
from icrl_gym.models.native import new_kv_cache
from icrl_gym.models.policy import EnvInfo, PolicyOutput, check_env_sizes
from icrl_gym.models.transformer import Positional


@dataclass
class MDPTransformerConfig(DecoderConfig):
    """Hyper-parameters of :class:`MDPTransformer`: the shared decoder fields and the MDP's sizes."""

    n_layer: int = 4
    """Number of transformer blocks L."""
    n_embd: int = 64
    """Embedding dimension D."""
    positional: Positional = Positional.LEARNED
    """"learned" absolute position embedding, or "none" (only the (k/K, h/H) features)."""
    num_states: int = 5
    """Number of states S."""
    num_actions: int = 3
    """Number of actions A."""
    horizon: int = 10
    """Steps H per episode."""
    episodes: int = 20
    """Episodes K per run."""
    prev_tokens: int = 0
    """Predecessor tokens p whose raw features each token's input embedding also reads (0: the paper's)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check_positive("num_states", "num_actions", "horizon", "episodes")
        self._check_choice("positional", Positional, (Positional.LEARNED, Positional.NONE))
        if not isinstance(self.prev_tokens, int) or self.prev_tokens < 0:
            raise ValueError(f"MDPTransformerConfig.prev_tokens must be an int >= 0, got {self.prev_tokens!r}")

    @property
    def tokens_per_episode(self) -> int:
        """2H + 1: a state and an action-reward token per step, and the empty token."""
        return 2 * self.horizon + 1

    @property
    def max_tokens(self) -> int:
        """K (2H + 1)."""
        return self.episodes * self.tokens_per_episode

    def state_token(self, t: int) -> int:
        """0-based index of the state token of step t = k H + h: k (2H + 1) + 2 h."""
        k, h = divmod(t, self.horizon)
        return k * self.tokens_per_episode + 2 * h


class MDPTransformer(nn.Module):
    """Decoder policy for tabular MDPs: (states, actions, rewards) of a run in, logits over A out."""

    TYPE_STATE, TYPE_AR, TYPE_EMPTY = 0, 1, 2

    def __init__(self, config: MDPTransformerConfig) -> None:
        super().__init__()
        self.config = config
        S, A, D = config.num_states, config.num_actions, config.n_embd
        self.n_features = A + 1 + S + 3 + 2  # one-hot a, r, one-hot s, type, (k/K, h/H)
        self.input_embed = nn.Linear(self.n_features * (1 + config.prev_tokens), D)
        self.pos_embed = nn.Embedding(config.max_tokens, D) if config.positional is Positional.LEARNED else None
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
        self.lm_head = nn.Linear(D, A)
        self.apply(init_gpt_weights)

    def num_parameters(self) -> int:
        """Number of trainable parameters."""
        return count_parameters(self)

    # ----------------------------------------------------------------- tokens
    def _token(
        self,
        kind: int,
        t: Tensor,
        state: Tensor | None = None,
        action: Tensor | None = None,
        reward: Tensor | None = None,
    ) -> Tensor:
        """Features (B, F) of one token of step index ``t`` (B,) (for the empty token: the episode's last step)."""
        cfg = self.config
        B = t.shape[0]
        dtype = self.input_embed.weight.dtype
        parts = [
            F.one_hot(action, cfg.num_actions).to(dtype)
            if action is not None
            else t.new_zeros(B, cfg.num_actions, dtype=dtype),
            reward.to(dtype)[:, None] if reward is not None else t.new_zeros(B, 1, dtype=dtype),
            F.one_hot(state, cfg.num_states).to(dtype)
            if state is not None
            else t.new_zeros(B, cfg.num_states, dtype=dtype),
            F.one_hot(torch.full_like(t, kind), 3).to(dtype),
            torch.stack([(t // cfg.horizon).to(dtype) / cfg.episodes, (t % cfg.horizon).to(dtype) / cfg.horizon], 1),
        ]
        return torch.cat(parts, dim=1)

    def token_features(self, states: Tensor, actions: Tensor, rewards: Tensor) -> Tensor:
        """All tokens up to the state token of the last step: (B, N, F), N = state_token(T-1) + 1."""
        B, T = states.shape
        tokens = []
        for t in range(T):  # T <= K H is small; the tokens are assembled once per batch
            step = torch.full((B,), t, dtype=torch.long, device=states.device)
            tokens.append(self._token(self.TYPE_STATE, step, state=states[:, t]))
            if t == T - 1:
                break
            tokens.append(self._token(self.TYPE_AR, step, action=actions[:, t], reward=rewards[:, t]))
            if (t + 1) % self.config.horizon == 0:
                tokens.append(self._token(self.TYPE_EMPTY, step))
        return torch.stack(tokens, dim=1)

    def _with_predecessors(self, features: Tensor, cache: KVCache | None) -> Tensor:
        """[f_i; f_{i-1}; ...; f_{i-p}] (B, n, (1 + p) F) for the new tokens ``features`` (B, n, F)."""
        p = self.config.prev_tokens
        if p == 0:
            return features
        B, n, F_ = features.shape
        past = cache.last_tokens if cache is not None and cache.length > 0 else None
        full = torch.cat([features.new_zeros(B, p, F_) if past is None else past, features], dim=1)
        if cache is not None:
            cache.last_tokens = full[:, -p:]
        return torch.cat([full[:, p - j : p - j + n] for j in range(p + 1)], dim=-1)

    def _run(self, features: Tensor, offset: int, cache: KVCache | None = None) -> Tensor:
        x = self.input_embed(self._with_predecessors(features, cache))
        if self.pos_embed is not None:
            x = x + self.pos_embed(torch.arange(offset, offset + features.shape[1], device=features.device))
        x = self.drop(x)
        for layer, block in enumerate(self.blocks):
            x = block(x, cache, layer)
        return x

    # ----------------------------------------------------------------- training / rollout
    def forward(self, states: Tensor, actions: Tensor, rewards: Tensor) -> PolicyOutput:
        """Logits (B, T, A) of the policy at every step from one pass (states, actions (B, T) long, rewards (B, T)).

        Returned as ``PolicyOutput(logits, None)``: the MDP model has no value head.
        """
        cfg = self.config
        B, T = states.shape
        if T > cfg.episodes * cfg.horizon:
            raise ValueError(
                f"trajectory has T={T} steps but the model was built for K H = {cfg.episodes * cfg.horizon}"
            )
        if actions.shape != (B, T) or rewards.shape != (B, T):
            raise ValueError(f"states, actions and rewards must all have shape {(B, T)}")
        if int(states.max()) >= cfg.num_states or int(actions.max()) >= cfg.num_actions:
            raise ValueError(f"states must lie in [0, {cfg.num_states}) and actions in [0, {cfg.num_actions})")
        h = self._run(self.token_features(states, actions, rewards), 0)
        index = torch.tensor([cfg.state_token(t) for t in range(T)], device=states.device)
        return PolicyOutput(self.lm_head(h[:, index]), None)

    def new_cache(self, batch_size: int, env_info: EnvInfo, device: torch.device | str | None = None) -> KVCache:
        """An empty key/value cache for ``batch_size`` runs (laid out by :func:`new_kv_cache`).

        ``env_info`` must have the model's S, A and H and at most its K episodes.
        """
        cfg = self.config
        sizes = {"num_states": cfg.num_states, "num_actions": cfg.num_actions, "horizon": cfg.horizon}
        check_env_sizes(env_info, sizes, max_steps=cfg.episodes * cfg.horizon, model="tabular-MDP")
        p = self.input_embed.weight
        device = p.device if device is None else device
        return new_kv_cache(batch_size, self.config, self.config.max_tokens, device, p.dtype)

    def env_info(self) -> EnvInfo:
        """The MDPs of the model's own sizes (its S, A, H and K): what :meth:`new_cache` takes for full runs."""
        cfg = self.config
        return EnvInfo(
            num_actions=cfg.num_actions, horizon=cfg.horizon, num_states=cfg.num_states, episodes=cfg.episodes
        )

    @torch.no_grad()
    def step(
        self, cache: KVCache, observation: Tensor, prev_action: Tensor | None, prev_reward: Tensor | None
    ) -> PolicyOutput:
        """``PolicyOutput(logits (B, A), None)`` at the next step, from the cache plus this step's new tokens.

        ``observation`` is the runs' states (B,).  Appends the previous step's action-reward token
        (and the empty token after the last step of an episode), then the new state token, to ``cache``.
        """
        cfg = self.config
        state = observation
        t = cache.steps
        if t >= cfg.episodes * cfg.horizon:
            raise ValueError(f"cache is full: {t} steps taken, the model holds K H = {cfg.episodes * cfg.horizon}")
        if (t == 0) != (prev_action is None):
            raise ValueError("prev_action and prev_reward must be None exactly at the first step")
        B = state.shape[0]
        tokens = []
        if t > 0:
            prev = torch.full((B,), t - 1, dtype=torch.long, device=state.device)
            tokens.append(self._token(self.TYPE_AR, prev, action=prev_action, reward=prev_reward))
            if t % cfg.horizon == 0:
                tokens.append(self._token(self.TYPE_EMPTY, prev))
        tokens.append(
            self._token(self.TYPE_STATE, torch.full((B,), t, dtype=torch.long, device=state.device), state=state)
        )
        x = self._run(torch.stack(tokens, dim=1), cache.length, cache)
        cache.length += len(tokens)
        cache.steps += 1
        return PolicyOutput(self.lm_head(x[:, -1]), None)
