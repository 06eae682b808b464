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

import functools
import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from icrl_gym.config import Choice, DictConfig
from icrl_gym.models.kv_cache import Attention, KVCache, future_mask
from icrl_gym.models.native import new_kv_cache
from icrl_gym.models.policy import EnvInfo, PolicyOutput, check_env_sizes


class Norm(Choice):
    """Where the decoder normalises (:attr:`DecoderConfig.norm` says what each word means)."""

    POST = "post"
    NONE = "none"


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
class DecoderConfig(DictConfig):
    """The decoder's hyper-parameters, shared by the bandit and the MDP transformers (Appendix B)."""

    n_layer: int = 8
    """Number of transformer blocks L."""
    n_head: int = 4
    """Number of attention heads M."""
    n_embd: int = 32
    """Embedding (token) dimension D."""
    mlp_ratio: int = 4
    """Hidden width of the MLP as a multiple of D."""
    attention: Attention = Attention.RELU
    """"relu" (Definition 1) or "softmax" (standard causal attention)."""
    dropout: float = 0.0
    """Dropout probability on embeddings, attention weights and residual branches."""
    norm: Norm = Norm.POST
    """"post": LayerNorm after each sub-layer (Appendix B); "none": Definition 3 as in the theory."""

    def _check_positive(self, *names: str) -> None:
        for name in names:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{type(self).__name__}.{name} must be a positive int, got {value!r}")

    def _check_choice(self, name: str, kinds: type[Choice], allowed: tuple[Choice, ...] = ()) -> None:
        """Field ``name`` as its member of ``kinds`` (one of ``allowed``, if given); records hold the words."""
        value = getattr(self, name)
        member = kinds.lookup(value)
        words = tuple(str(m) for m in allowed) if allowed else kinds.words()
        if member is None or str(member) not in words:
            raise ValueError(f"{type(self).__name__}.{name} must be one of {words}, got {value!r}")
        setattr(self, name, member)

    def __post_init__(self) -> None:
        self._check_positive("n_layer", "n_head", "n_embd", "mlp_ratio")
        if self.n_embd % self.n_head != 0:
            raise ValueError(f"{type(self).__name__}.n_embd={self.n_embd} must be divisible by n_head={self.n_head}")
        self._check_choice("attention", Attention)
        self._check_choice("norm", Norm)
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)):
            raise ValueError(f"{type(self).__name__}.dropout must be a float, got {self.dropout!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"{type(self).__name__}.dropout must be in [0, 1), got {self.dropout!r}")


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


_QUERY_BLOCK = 32
"""Query columns per block of :func:`relu_causal_attention` (tuned on a 2-core CPU for T = 399 tokens, hs = 8)."""


@functools.lru_cache(maxsize=4096)
def _relu_query_scale(n_past: int, n_new: int, hs: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """``1/(sqrt(hs) * i)`` (n_new, 1) for the 1-based query positions ``i = n_past+1 .. n_past+n_new``."""
    q_pos = torch.arange(n_past, n_past + n_new, device=device)
    return (1.0 / (math.sqrt(hs) * (q_pos + 1).to(dtype)))[:, None]


_THRESHOLD_BACKWARD = torch.ops.aten.threshold_backward.grad_input
"""``out = grad * 1[x > 0]`` in one pass (``torch.where``/``masked_fill_`` on ``x == 0`` are many times slower)."""


def _relu_scores_t(k: Tensor, qT: Tensor, r0: int, r1: int, workspace: Tensor) -> Tensor:
    """Transposed causal ReLU scores of query columns r0..r1-1 and keys 0..r1-1: (N, r1, r1-r0).

    ``P[n, j, i] = ReLU(<k[n, j], q[n, :, r0+i]>)`` for ``j <= r0+i`` and 0 after (the diagonal
    block is masked), from ``k`` (N, T, hs) and ``qT`` (N, hs, T); written into the front of the
    flat, reused ``workspace``, so that no block allocates (a fresh tensor of a few MB per block costs
    page faults comparable to the product).
    """
    N = k.shape[0]
    att = workspace[: N * r1 * (r1 - r0)].view(N, r1, r1 - r0)
    torch.bmm(k[:, :r1], qT[:, :, r0:r1], out=att).relu_()
    att[:, r0:].triu_()  # the diagonal block: keys after the query are masked
    return att


class _ReLUCausalAttention(torch.autograd.Function):
    """``y_i = sum_{j<=i} ReLU(<q_i, k_j>) v_j`` over (N, T, hs) inputs, in blocks of query positions.

    A query block ``[r0, r1)`` only meets keys ``0 .. r1-1`` (the rest are masked), which skips
    about half of the T x T score matrix.  The work is done in the transposed layout: with
    ``P = S^T`` the block's masked scores (keys x queries, ``P[j, i] = ReLU(<q_i, k_j>)``),

        forward:   y^T[:, r0:r1] = V[:r1]^T P
        backward:  dP = (V[:r1] dy^T[:, r0:r1]) * 1[P > 0]   (ReLU' and the causal mask at once;
                                                             the ReLU derivative at 0 is 0)
                   dV^T[:, :r1] += dy^T[:, r0:r1] P^T,  dQ^T[:, r0:r1] = K[:r1]^T dP,
                   dK^T[:, :r1] += Q^T[:, r0:r1] dP^T

    so every product that has the head size hs (8 in the paper model) as a dimension has it as its
    row count: with ``bmm`` on a CPU that is about twice as fast as hs output columns.  The scores
    are recomputed in backward instead of being stored (one product against the write and re-read of
    an (N, T, T) tensor); they and their gradients go into two workspaces allocated once per call.
    Every product writes a contiguous workspace that is then added or copied into its slice of the
    result: a ``bmm`` or ``baddbmm_`` into a strided slice falls back to one matrix product per batch
    item (N of them per block).  The results are transposed views of (N, hs, T) tensors.
    """

    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        N, T, hs = q.shape
        R = min(_QUERY_BLOCK, T)
        qT, vT = q.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()  # (N, hs, T)
        yT = q.new_empty(N, hs, T)
        workspace, block = q.new_empty(N * T * R), q.new_empty(N * hs * R)
        for r0 in range(0, T, R):
            r1 = min(r0 + R, T)
            out = block[: N * hs * (r1 - r0)].view(N, hs, r1 - r0)
            yT[:, :, r0:r1] = torch.bmm(vT[:, :, :r1], _relu_scores_t(k, qT, r0, r1, workspace), out=out)
        ctx.save_for_backward(qT, k, v)
        return yT.transpose(1, 2)

    @staticmethod
    def backward(ctx: Any, dy: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        qT, k, v = ctx.saved_tensors
        N, hs, T = qT.shape
        R = min(_QUERY_BLOCK, T)
        kT, dyT = k.transpose(1, 2).contiguous(), dy.transpose(1, 2).contiguous()  # (N, hs, T)
        dqT, dkT, dvT = qT.new_empty(N, hs, T), qT.new_zeros(N, hs, T), qT.new_zeros(N, hs, T)
        scores, grads, part = qT.new_empty(N * T * R), qT.new_empty(N * T * R), qT.new_empty(N * hs * T)
        for r0 in range(0, T, R):
            r1 = min(r0 + R, T)
            att = _relu_scores_t(k, qT, r0, r1, scores)  # (N, r1, r1-r0)
            acc = part[: N * hs * r1].view(N, hs, r1)
            dvT[:, :, :r1] += torch.bmm(dyT[:, :, r0:r1], att.transpose(1, 2), out=acc)
            datt = torch.bmm(v[:, :r1], dyT[:, :, r0:r1], out=grads[: att.numel()].view(att.shape))
            _THRESHOLD_BACKWARD(datt, att, 0.0, grad_input=datt)
            dqT[:, :, r0:r1] = torch.bmm(kT[:, :, :r1], datt, out=part[: N * hs * (r1 - r0)].view(N, hs, r1 - r0))
            dkT[:, :, :r1] += torch.bmm(qT[:, :, r0:r1], datt.transpose(1, 2), out=acc)
        return dqT.transpose(1, 2), dkT.transpose(1, 2), dvT.transpose(1, 2)


def relu_causal_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Causal ReLU attention without normalisation, (N, T, hs) x3 -> (N, T, hs); scale ``q`` beforehand.

    ``y_i = sum_{j<=i} ReLU(<q_i, k_j>) v_j``; the result is a transposed view of an (N, hs, T) tensor.
    """
    out: Tensor = _ReLUCausalAttention.apply(q, k.contiguous(), v)
    return out


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention, ReLU (Definition 1) or softmax.

    ReLU attention, for query position ``i`` (1-based, absolute) and each head::

        out_i = (1/i) * sum_{j<=i} ReLU(<q_i, k_j> / sqrt(hs)) v_j

    The ``1/sqrt(hs)`` scale is ours (for optimisation; the paper has none). Heads are concatenated
    and projected by ``c_proj``, which equals the paper's sum over heads with ``V_m`` the product of
    a head's value map and its block of ``c_proj``. Because ``i > 0``, ``(1/i) ReLU(x) = ReLU(x/i)``,
    so the ``1/i`` and ``1/sqrt(hs)`` factors are folded into the queries (cheaper, less memory).
    The residual connection and LayerNorm are applied in :class:`Block`.
    """

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.head_size = config.n_embd // config.n_head
        self.attention = config.attention
        self.dropout = config.dropout
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)  # q, k, v projections
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor, cache: KVCache | None = None, layer: int = 0) -> Tensor:
        """Attend from the new tokens ``x`` (B, n_new, D) to themselves and to the cached past.

        With a ``cache`` holding ``n_past = cache.length`` tokens, the keys/values of ``x`` are
        written into ``cache.k[layer], cache.v[layer]`` at slots ``n_past .. n_past + n_new - 1``
        (the caller advances ``cache.length``), and the result equals the rows of the full forward
        pass over the concatenated sequence.
        """
        B, n_new, D = x.shape
        nh, hs = self.n_head, self.head_size
        n_past = 0 if cache is None else cache.length
        q, k, v = self.c_attn(x).split(D, dim=2)
        q = q.view(B, n_new, nh, hs).transpose(1, 2)  # (B, nh, n_new, hs)
        if cache is None:
            k = k.view(B, n_new, nh, hs).transpose(1, 2)  # (B, nh, n_new, hs)
            v = v.view(B, n_new, nh, hs).transpose(1, 2)  # (B, nh, n_new, hs)
        else:
            cache.write(layer, k.view(B, n_new, nh, hs), v.view(B, n_new, nh, hs))
        p = self.dropout if self.training else 0.0
        if cache is not None and (self.attention is not Attention.RELU or p > 0.0):  # these paths read the whole cache
            k, v = cache.keys_values(layer, n_past + n_new)  # (B, nh, n_past + n_new, hs)

        if self.attention is Attention.RELU:
            # 1/(sqrt(hs) * i) for the 1-based query positions i = n_past+1 .. n_past+n_new, (n_new, 1)
            scale = _relu_query_scale(n_past, n_new, hs, q.dtype, x.device)
            if cache is None and p == 0.0 and not torch.is_autocast_enabled(x.device.type):
                # training / full forward: blocked, causal-skipping kernel that recomputes att in backward
                flat = (B * nh, n_new, hs)
                y = relu_causal_attention((q * scale).reshape(flat), k.reshape(flat), v.reshape(flat))
                y = y.unflatten(0, (B, nh))  # (B, nh, n_new, hs), a view of the kernel's transposed result
            elif cache is not None and p == 0.0:
                # cached decode: the compiled kernel, or scores in the cache's workspace
                y = cache.relu_attend(layer, q * scale, n_past + n_new)
            else:
                att = (q * scale) @ k.transpose(-2, -1)  # (B, nh, n_new, n_tot)
                # causal mask: ReLU first, then zero the keys after each query (equal to adding -inf first)
                att.relu_()
                if n_new > 1:
                    att.masked_fill_(future_mask(n_past, n_new, x.device), 0.0)
                att = self.attn_dropout(att)
                y = att @ v  # (B, nh, n_new, hs)
        elif n_past == 0:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        elif n_new == 1:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=~future_mask(n_past, n_new, x.device), dropout_p=p)
        # y: (B, nh, n_new, hs)
        y = y.transpose(1, 2).contiguous().view(B, n_new, D)  # (B, n_new, D)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    """Two-layer ReLU MLP (Definition 2): ``W_2 ReLU(W_1 h)``."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, config.mlp_ratio * config.n_embd)
        self.c_proj = nn.Linear(config.mlp_ratio * config.n_embd, config.n_embd)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor) -> Tensor:
        """Apply the MLP token-wise to ``x`` of shape (B, N, D).

        The ReLU is in place where no graph is recorded (one (B, N, 4D) tensor fewer per layer: a
        rollout 1.06x faster), out of place with autograd (training 1.04x faster that way).
        """
        return self.dropout(self.c_proj(F.relu(self.c_fc(x), inplace=not torch.is_grad_enabled())))


class Block(nn.Module):
    """Post-LN transformer block: ``x = LN1(x + attn(x)); x = LN2(x + mlp(x))`` (Appendix B)."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.attn = CausalSelfAttention(config)
        self.mlp = MLP(config)
        # norm="none" is the theory's residual network (Definition 3), used by the constructions
        norm = nn.LayerNorm if config.norm is Norm.POST else (lambda _: nn.Identity())
        self.ln_1 = norm(config.n_embd)
        self.ln_2 = norm(config.n_embd)

    def forward(self, x: Tensor, cache: KVCache | None = None, layer: int = 0) -> Tensor:
        """Transform ``x`` (B, n_new, D), attending to ``cache`` when one is given."""
        x = self.ln_1(x + self.attn(x, cache, layer))
        return self.ln_2(x + self.mlp(x))


def init_gpt_weights(module: nn.Module) -> None:
    """GPT-2 style initialisation: N(0, 0.02) weights, zero biases, identity LayerNorm."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
        bias = getattr(module, "bias", None)  # nn.Embedding has none, nn.Linear(bias=False) has None
        if bias is not None:
            nn.init.zeros_(bias)
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


def count_parameters(module: nn.Module) -> int:
    """Number of trainable parameters of ``module``."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


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
