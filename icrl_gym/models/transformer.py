"""GPT-style decoder transformer that reads a bandit trajectory and outputs a policy at every step.

This follows "Transformers as Decision Makers: Provable In-Context RL via Supervised
Pretraining" (Lin, Bai, Mei; ICLR 2024):

* Definition 1: ReLU attention normalised by the query position,
  ``h_i + sum_m (1/i) sum_{j<=i} ReLU(<Q_m h_i, K_m h_j>) V_m h_j``; softmax attention is an option.
* Appendix B: a GPT-2 model with ReLU MLPs, L=8 layers, M=4 heads, D=32, and
  LayerNorm after each attention and MLP layer (post-LN).
* Appendix E.1: two tokens per step, a state token carrying the action set ``A_t``
  and an action-reward token carrying ``(a_t, r_t)``; the policy at step ``t`` is the softmax of a
  linear read-out of the output at the state token of step ``t``.

The whole input -> policy path lives in this file: :class:`BanditTransformer` embeds raw
trajectories ``(action_sets, actions, rewards)``, returns all ``T`` policies from one forward pass
for training, and rolls out online one step at a time with a preallocated key/value cache
(:class:`KVCache`), so a rollout step costs ``O(current length)`` instead of a recomputation of the
whole prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from icrl_gym.config import Choice
from icrl_gym.models.decoder import (
    MLP,
    Block,
    CausalSelfAttention,
    DecoderConfig,
    Norm,
    count_parameters,
    init_gpt_weights,
    relu_causal_attention,
)
from icrl_gym.models.kv_cache import Attention, KVCache
from icrl_gym.models.native import new_kv_cache
from icrl_gym.models.policy import EnvInfo, PolicyOutput, check_env_sizes

__all__ = [
    "MLP",
    "Attention",
    "BanditTransformer",
    "Block",
    "CausalSelfAttention",
    "DecoderConfig",
    "Features",
    "KVCache",
    "Layout",
    "Norm",
    "Positional",
    "Readout",
    "TransformerConfig",
    "count_parameters",
    "init_gpt_weights",
    "relu_causal_attention",
]


class Layout(Choice):
    """How a bandit step becomes tokens (:attr:`TransformerConfig.layout`)."""

    PAPER = "paper"
    COMPACT = "compact"


class Positional(Choice):
    """The position part of a token (:attr:`TransformerConfig.positional`)."""

    LEARNED = "learned"
    POLY = "poly"
    NONE = "none"


class Readout(Choice):
    """How the output h_t becomes the arm scores (:attr:`TransformerConfig.readout`)."""

    LINEAR = "linear"
    ARM = "arm"


class Features(Choice):
    """What a bandit step's tokens hold (:attr:`TransformerConfig.features`)."""

    RAW = "raw"
    QUADRATIC = "quadratic"


@dataclass
class TransformerConfig(DecoderConfig):
    """Hyper-parameters of :class:`BanditTransformer` (defaults: the paper's Appendix B)."""

    layout: Layout = Layout.PAPER
    """"paper": two tokens per step (Appendix E.1); "compact": one token per step."""
    positional: Positional = Positional.LEARNED
    """"learned": absolute embedding; "poly": the paper's (i, i^2, 1) projected; "none": no positional part."""
    dim: int = 5
    """Action feature dimension d."""
    num_actions: int = 10
    """Number of arms A in every action set."""
    horizon: int = 200
    """Maximum number of steps T of a trajectory."""
    readout: Readout = Readout.LINEAR
    """"linear": the paper's extraction map Linear(D, A); "arm": a per-arm scorer of (h_t, a_{t,k})."""
    features: Features = Features.RAW
    """"raw": the paper's token contents; "quadratic": also a a^T (upper triangle) and r a per step."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check_positive("dim", "num_actions", "horizon")
        for name, kinds in (
            ("layout", Layout),
            ("positional", Positional),
            ("readout", Readout),
            ("features", Features),
        ):
            self._check_choice(name, kinds)

    @property
    def tokens_per_step(self) -> int:
        """Number of tokens per environment step: 2 for the "paper" layout, 1 for "compact"."""
        return 2 if self.layout is Layout.PAPER else 1

    @property
    def max_tokens(self) -> int:
        """Maximum sequence length, ``tokens_per_step * horizon``."""
        return self.tokens_per_step * self.horizon


def _chosen_vectors(action_sets: Tensor, actions: Tensor) -> Tensor:
    """Return the chosen action vectors ``action_sets[..., actions, :]``: (..., A, d), (...) -> (..., d)."""
    d = action_sets.shape[-1]
    idx = actions[..., None, None].expand(*actions.shape, 1, d)
    return torch.gather(action_sets, -2, idx).squeeze(-2)


class BanditTransformer(nn.Module):
    """Decoder transformer policy for (linear) bandits: trajectory in, logits over A arms out.

    Embedding (Appendix E.1). Each token is a raw feature vector of fixed size ``F``
    mapped by ``input_embed = Linear(F, D)``, plus a positional part.

    * layout "paper", two tokens per step ``t``, features ``[a (d), r (1), vec(A) (A*d), onehot (A),
      type (2)]``: the state token ``h_{2t-1} = [0, 0, vec(A_t), 0, (1, 0)]`` and the action-reward
      token ``h_{2t} = [a_t, r_t, 0, onehot(arm of a_t), (0, 1)]``. The policy at step ``t`` is read
      at the state token (0-based index ``2t-2``), which sees ``A_1..A_t`` and ``(a, r)_1..(a, r)_{t-1}``.
      The action-reward token of the last step influences no policy and is not fed by ``forward``.
    * layout "compact", one token per step, features ``[vec(A_t), a_{t-1}, r_{t-1},
      onehot(arm of a_{t-1}), 1{t>1}]`` (zeros for ``t=1``); the policy at step ``t`` is read at token
      ``t-1``. The same information as "paper" with half the tokens.

    Positional part: "learned" adds ``nn.Embedding(max_tokens, D)``; "poly" adds a bias-free linear
    map of the paper's ``(i, i^2, 1)`` with ``i`` (1-based) divided by ``max_tokens`` (a linear map of
    the concatenated vector ``[features, p_i]`` equals this sum).

    Read-out (the paper's extraction map): ``lm_head = Linear(D, A)`` gives the logits, so
    ``Alg_theta(.|D_{t-1}, s_t) = softmax(logits_t)``. ``value_head = Linear(D, A)`` is an auxiliary
    head that can be trained to regress an expert's per-arm index values.

    Options beyond the paper (the defaults are the paper's reference configuration):

    * ``readout="arm"`` scores every arm with one shared function of the output ``h_t`` and the
      arm's vector ``x_k``: ``s_k = <U h_t, x_k> + w^T ReLU(W_h h_t + W_x x_k + b)`` (two outputs:
      logit and value). The scorer is shared by all arms and sees ``x_k`` directly, so the trunk
      only has to carry the statistics of the history (for LinUCB: w_t and V_t^{-1}).
    * ``features="quadratic"`` adds the upper triangle of ``a_t a_t^T`` and ``r_t a_t`` to the
      action-reward features; one averaging attention head then holds
      ``(V_t - lambda I)/t`` and ``b_t/t``, the ridge-regression statistics (Lemma 21).
    """

    _triu: Tensor
    """Row/column indices (2, d(d+1)/2) of the upper triangle of a d x d matrix (a non-persistent buffer)."""
    construction: dict[str, float]
    """Only on models built by :func:`~icrl_gym.models.constructions.ridge_transformer`: its parameters."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = config
        A, d, D = config.num_actions, config.dim, config.n_embd
        self.n_quadratic = d * (d + 1) // 2 + d if config.features is Features.QUADRATIC else 0
        if config.layout is Layout.PAPER:
            self.n_features = d + 1 + A * d + A + 2 + self.n_quadratic
        else:
            self.n_features = A * d + d + 1 + A + 1 + self.n_quadratic
        self.register_buffer("_triu", torch.triu_indices(d, d), persistent=False)
        self.input_embed = nn.Linear(self.n_features, D)
        # "none": time enters only through attention (extrapolates)
        self.pos_embed: nn.Embedding | nn.Linear | None = None
        if config.positional is Positional.LEARNED:
            self.pos_embed = nn.Embedding(config.max_tokens, D)
        elif config.positional is Positional.POLY:
            self.pos_embed = nn.Linear(3, D, bias=False)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
        if config.readout is Readout.LINEAR:
            self.lm_head = nn.Linear(D, A)
            self.value_head = nn.Linear(D, A)
        else:
            hidden = config.mlp_ratio * D
            self.arm_bilinear = nn.Linear(D, 2 * d, bias=False)  # U: logit and value coefficients
            self.arm_h = nn.Linear(D, hidden)
            self.arm_x = nn.Linear(d, hidden, bias=False)
            self.arm_out = nn.Linear(hidden, 2)
        self.apply(init_gpt_weights)

    def num_parameters(self) -> int:
        """Return the number of trainable parameters."""
        return count_parameters(self)

    # ----------------------------------------------------------------- embedding
    def _quadratic(self, a_vec: Tensor, r: Tensor) -> list[Tensor]:
        """``[triu(a a^T), r a]`` when ``features="quadratic"``, else nothing: (..., d), (..., 1)."""
        if self.n_quadratic == 0:
            return []
        outer = a_vec[..., :, None] * a_vec[..., None, :]  # (..., d, d)
        return [outer[..., self._triu[0], self._triu[1]], r * a_vec]

    def _state_features(self, action_sets: Tensor) -> Tensor:
        """Paper-layout state-token features: (..., A, d) -> (..., F)."""
        A, d = self.config.num_actions, self.config.dim
        z = action_sets.new_zeros(action_sets.shape[:-2])[..., None]  # (..., 1)
        parts = [z.expand(*z.shape[:-1], d + 1), action_sets.flatten(-2), z.expand(*z.shape[:-1], A), z + 1, z]
        if self.n_quadratic:
            parts.append(z.expand(*z.shape[:-1], self.n_quadratic))
        return torch.cat(parts, dim=-1)

    def _action_reward_features(self, action_sets: Tensor, actions: Tensor, rewards: Tensor) -> Tensor:
        """Paper-layout action-reward-token features: (..., A, d), (...), (...) -> (..., F)."""
        A, d = self.config.num_actions, self.config.dim
        a_vec = _chosen_vectors(action_sets, actions)  # (..., d)
        onehot = F.one_hot(actions, A).to(action_sets.dtype)  # (..., A)
        r = rewards[..., None]  # (..., 1)
        zeros = r.new_zeros(*r.shape[:-1], A * d + 1)  # vec(A) slot and the first type bit
        parts = [a_vec, r, zeros[..., : A * d], onehot, zeros[..., A * d :], torch.ones_like(r)]
        return torch.cat(parts + self._quadratic(a_vec, r), dim=-1)

    def _compact_features(
        self, action_sets: Tensor, prev_actions: Tensor, prev_rewards: Tensor, prev_action_sets: Tensor
    ) -> Tensor:
        """Compact-layout features; ``prev_*`` are ignored (zeroed) where ``prev_actions < 0``."""
        A = self.config.num_actions
        has_prev = prev_actions >= 0  # (...)
        safe = prev_actions.clamp(min=0)
        flag = has_prev.to(action_sets.dtype)[..., None]  # (..., 1)
        a_vec = _chosen_vectors(prev_action_sets, safe) * flag  # (..., d)
        onehot = F.one_hot(safe, A).to(action_sets.dtype) * flag  # (..., A)
        r = prev_rewards[..., None] * flag  # (..., 1)
        parts = [action_sets.flatten(-2), a_vec, r, onehot, flag, *self._quadratic(a_vec, r)]
        return torch.cat(parts, dim=-1)

    def _embed(self, features: Tensor, offset: int) -> Tensor:
        """Map raw features (B, n, F) at absolute token offset ``offset`` to embeddings (B, n, D)."""
        n = features.shape[1]
        pos = torch.arange(offset, offset + n, device=features.device)  # (n,)
        if self.pos_embed is None:  # positional == "none"
            return self.drop(self.input_embed(features))
        if self.config.positional is Positional.LEARNED:
            p = self.pos_embed(pos)  # (n, D)
        else:
            i = (pos + 1).to(features.dtype) / self.config.max_tokens
            p = self.pos_embed(torch.stack([i, i * i, torch.ones_like(i)], dim=-1))  # (n, D)
        return self.drop(self.input_embed(features) + p)

    def _readout(self, h: Tensor, action_sets: Tensor) -> tuple[Tensor, Tensor]:
        """Logits and values (..., A) from outputs h (..., D) and the action sets (..., A, d)."""
        if self.config.readout is Readout.LINEAR:
            return self.lm_head(h), self.value_head(h)
        d = self.config.dim
        coef = self.arm_bilinear(h).unflatten(-1, (2, d))  # (..., 2, d)
        bilinear = (action_sets[..., None, :, :] * coef[..., :, None, :]).sum(-1)  # (..., 2, A)
        hidden = F.relu(self.arm_h(h)[..., None, :] + self.arm_x(action_sets))  # (..., A, hidden)
        scores = bilinear + self.arm_out(hidden).transpose(-1, -2)  # (..., 2, A)
        return scores[..., 0, :], scores[..., 1, :]

    # ----------------------------------------------------------------- validation
    def _check_action_set(self, name: str, x: Tensor, ndim: int) -> None:
        A, d = self.config.num_actions, self.config.dim
        if x.dim() != ndim:
            raise ValueError(f"{name} must have {ndim} dims, got shape {tuple(x.shape)}")
        if x.shape[-1] != d:
            raise ValueError(f"{name} has d={x.shape[-1]} but the model was built for d={d}")
        if x.shape[-2] != A:
            raise ValueError(f"{name} has A={x.shape[-2]} arms but the model was built for A={A}")

    def _check_actions(self, name: str, actions: Tensor, shape: tuple[int, ...]) -> None:
        if tuple(actions.shape) != shape:
            raise ValueError(f"{name} has shape {tuple(actions.shape)}, expected {shape}")
        if actions.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
            raise ValueError(f"{name} must be an integer (long) tensor of arm indices, got {actions.dtype}")
        if actions.numel() and (int(actions.min()) < 0 or int(actions.max()) >= self.config.num_actions):
            raise ValueError(f"{name} must lie in [0, {self.config.num_actions}), got values outside")

    # ----------------------------------------------------------------- training
    def forward(self, action_sets: Tensor, actions: Tensor, rewards: Tensor) -> PolicyOutput:
        """Return ``PolicyOutput(logits, values)``, both (B, T, A): the policy at every step from one pass.

        Args:
            action_sets: float (B, T, A, d), the action set ``A_t`` at each step.
            actions: long (B, T), the arm index taken at each step.
            rewards: float (B, T), the observed rewards.

        ``logits[:, t-1]`` depends only on ``A_1..A_t`` and ``(a, r)_1..(a, r)_{t-1}``.
        """
        cfg = self.config
        self._check_action_set("action_sets", action_sets, 4)
        B, T = action_sets.shape[:2]
        if T > cfg.horizon:
            raise ValueError(f"trajectory has T={T} steps but the model was built for horizon={cfg.horizon}")
        if T == 0:
            raise ValueError("trajectory has T=0 steps")
        self._check_actions("actions", actions, (B, T))
        if tuple(rewards.shape) != (B, T):
            raise ValueError(f"rewards has shape {tuple(rewards.shape)}, expected {(B, T)}")
        feats = self.token_features(action_sets, actions, rewards)
        h = self.encode(feats)
        if cfg.layout is Layout.PAPER:
            h = h[:, ::2]  # (B, T, D) outputs at the state tokens
        return PolicyOutput(*self._readout(h, action_sets))

    def token_features(self, action_sets: Tensor, actions: Tensor, rewards: Tensor) -> Tensor:
        """Raw token features (B, N, F) of whole trajectories in the model's layout (N = 2T-1 or T)."""
        cfg = self.config
        B, T = action_sets.shape[:2]
        dtype = self.input_embed.weight.dtype
        action_sets, rewards, actions = action_sets.to(dtype), rewards.to(dtype), actions.long()

        if cfg.layout is Layout.PAPER:
            s = self._state_features(action_sets)  # (B, T, F)
            ar = self._action_reward_features(action_sets, actions, rewards)  # (B, T, F)
            feats = torch.stack([s, ar], dim=2).view(B, 2 * T, self.n_features)[:, :-1]  # (B, 2T-1, F)
        else:
            pad = actions.new_full((B, 1), -1)
            prev_actions = torch.cat([pad, actions[:, :-1]], dim=1)  # (B, T)
            prev_rewards = torch.cat([rewards.new_zeros(B, 1), rewards[:, :-1]], dim=1)  # (B, T)
            prev_sets = torch.cat([action_sets[:, :1], action_sets[:, :-1]], dim=1)  # (B, T, A, d)
            feats = self._compact_features(action_sets, prev_actions, prev_rewards, prev_sets)  # (B, T, F)

        return feats

    def encode(self, features: Tensor) -> Tensor:
        """Run the decoder on raw token features (B, N, F) from position 0: hidden states (B, N, D)."""
        x = self._embed(features, 0)  # (B, N, D)
        for block in self.blocks:
            x = block(x)
        return x

    # ----------------------------------------------------------------- rollout
    def new_cache(self, batch_size: int, env_info: EnvInfo, device: torch.device | str | None = None) -> KVCache:
        """An empty key/value cache for ``batch_size`` trajectories (default: the model's device; its dtype).

        ``env_info`` (:class:`~icrl_gym.models.policy.EnvInfo`) must have the model's A and d and at
        most its T steps.  Laid out for the compiled decode kernel where it applies and works (see
        :func:`~icrl_gym.models.native.new_kv_cache`).
        """
        cfg = self.config
        check_env_sizes(
            env_info, {"num_actions": cfg.num_actions, "dim": cfg.dim}, max_steps=cfg.horizon, model="bandit"
        )
        p = self.input_embed.weight
        device = p.device if device is None else torch.device(device)
        return new_kv_cache(batch_size, cfg, cfg.max_tokens, device, p.dtype)

    def env_info(self) -> EnvInfo:
        """The environment of the model's own sizes (its A, d and T): what :meth:`new_cache` takes for full runs."""
        cfg = self.config
        return EnvInfo(num_actions=cfg.num_actions, horizon=cfg.horizon, dim=cfg.dim)

    @torch.no_grad()
    def step(
        self,
        cache: KVCache,
        observation: Tensor,
        prev_action: Tensor | None,
        prev_reward: Tensor | None,
    ) -> PolicyOutput:
        """Advance an online rollout by one step and return ``PolicyOutput(logits, values)``, both (B, A).

        ``observation`` is the action sets (B, A, d) of step ``t``.  Appends this step's tokens to
        ``cache`` (paper layout: the action-reward token of step ``t-1``, then the state token of
        step ``t``; compact: one token) and returns the policy at step ``t``. ``prev_action`` (B,)
        long and ``prev_reward`` (B,) are the arm taken and reward observed at step ``t-1``: ``None``
        at the first step and required afterwards; the vector of ``prev_action`` is read from the
        action set of the previous call, kept in the cache. The result agrees with :meth:`forward` on
        the same trajectory. Runs without autograd.
        """
        cfg = self.config
        action_set_t = observation
        self._check_action_set("action_set_t", action_set_t, 3)
        B = action_set_t.shape[0]
        if B != cache.batch_size:
            raise ValueError(f"action_set_t has batch size {B} but the cache holds {cache.batch_size}")
        if cache.steps >= cfg.horizon:
            raise ValueError(f"cache is full: {cache.steps} steps taken, model horizon is {cfg.horizon}")
        dtype = cache.k[0].dtype
        action_set_t = action_set_t.to(dtype)
        first = cache.steps == 0
        if first:
            if prev_action is not None or prev_reward is not None:
                raise ValueError("prev_action and prev_reward must be None at the first step of a rollout")
            prev_a = torch.full((B,), -1, dtype=torch.long, device=action_set_t.device)
            prev_r, prev_set = action_set_t.new_zeros(B), action_set_t
        else:
            if prev_action is None or prev_reward is None or cache.last_action_set is None:
                raise ValueError(f"prev_action and prev_reward are required at step {cache.steps + 1} > 1")
            self._check_actions("prev_action", prev_action, (B,))
            if tuple(prev_reward.shape) != (B,):
                raise ValueError(f"prev_reward has shape {tuple(prev_reward.shape)}, expected {(B,)}")
            prev_a, prev_r, prev_set = prev_action.long(), prev_reward.to(dtype), cache.last_action_set

        if cfg.layout is Layout.PAPER:
            parts = [] if first else [self._action_reward_features(prev_set, prev_a, prev_r)]
            parts.append(self._state_features(action_set_t))
            feats = torch.stack(parts, dim=1)  # (B, n_new, F), n_new = 1 at t=1 and 2 afterwards
        else:
            feats = self._compact_features(action_set_t, prev_a, prev_r, prev_set)[:, None]  # (B, 1, F)

        n_new = feats.shape[1]
        x = self._embed(feats, cache.length)  # (B, n_new, D)
        for layer, block in enumerate(self.blocks):
            x = block(x, cache, layer)
        cache.length += n_new
        cache.steps += 1
        cache.last_action_set = action_set_t
        h = x[:, -1]  # (B, D) output at the state token of step t
        return PolicyOutput(*self._readout(h, action_set_t))
