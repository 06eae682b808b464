"""The decoder both transformers share: its configuration, ReLU or softmax causal attention, blocks, initialisation.

:class:`~icrl_gym.models.transformer.BanditTransformer` and
:class:`~icrl_gym.models.mdp_transformer.MDPTransformer` stack the :class:`Block` s of this module
(post-LN GPT-2 blocks, Appendix B of Lin, Bai, Mei, ICLR 2024); :func:`relu_causal_attention` is
Definition 1's attention normalised by the query position, computed in query blocks with a
hand-written backward pass.
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


class Norm(Choice):
    """Where the decoder normalises (:attr:`DecoderConfig.norm` says what each word means)."""

    POST = "post"
    NONE = "none"


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
