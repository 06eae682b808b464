"""Constructed transformers: explicit weights that run in-context ridge regression (Lemma 21).

No training: :func:`ridge_transformer` writes the weights of the package's own
:class:`~icrl_gym.models.transformer.BanditTransformer` (paper layout, ReLU attention, the paper's
(i, i^2, 1) positions, ``norm="none"`` as in Definition 3) so that layer l carries out step l
of an optimiser on

    L_t(w) = 1/(2(2t-1)) sum_{j<t} (r_j - <a_j, w>)^2 + lambda/(2(2t-1)) ||w||^2,

whose minimiser is the ridge estimate w_t = (lambda I + sum_{j<t} a_j a_j^T)^{-1} sum_{j<t} a_j r_j,
and the estimate is read from the hidden state of the state token of every step t.

- Gradient descent (part 1 of the lemma), one attention layer per step with three heads: heads 1
  and 2 give +-ReLU(+-(<w, a_j> - r_j)) a_j, whose sum is the residual (sigma(x) - sigma(-x) = x);
  head 3 attends only to the current token (ReLU(1 - i + j) = 1{j = i}) and applies the
  lambda w term.  The 1/i of ReLU attention is the 1/(2t-1) of L_t.
- Accelerated gradient descent (part 2), an attention layer and an MLP layer per step:
  w_a <- v - eta grad L(v) (a fourth head, ReLU(i - i^2 + j^2) = i 1{j = i}, adds v - w_a),
  then the MLP sets v <- w_a + beta (w_a - w_b), w_b <- w_a with beta = (sqrt(kappa)-1)/(sqrt(kappa)+1).

With eta = 1/(B_a^2 + lambda) and kappa = (2T - 1)(B_a^2 + lambda)/lambda (the lemma's bounds) the
error to the exact ridge estimate contracts geometrically in the number of layers: GD by
(1 - 1/kappa) per layer, AGD by about (1 - 1/sqrt(kappa)), so AGD needs about the square root of
GD's layers for the same error.
"""

from __future__ import annotations

import math
from typing import TypedDict

import torch
from torch import nn

from icrl_gym.models.transformer import (
    Attention,
    BanditTransformer,
    Block,
    Layout,
    Norm,
    Positional,
    TransformerConfig,
)

# Slots of the hidden state (D = 32 for d = 5); everything not listed stays zero.
_A, _R, _P1, _P2, _P3 = 0, 1, 2, 3, 4  # offsets: a (d), r, i/N, (i/N)^2, 1  (see _layout)


class _Slots(TypedDict):
    """Where each quantity sits in the hidden state: a slice for a vector, an int for a scalar."""

    a: slice
    r: int
    p1: int
    p2: int
    p3: int
    w: slice
    wb: slice
    v: slice


def _layout(d: int) -> _Slots:
    """Index of every quantity in the hidden state of width D."""
    return {
        "a": slice(0, d),
        "r": d,
        "p1": d + 1,  # i / N
        "p2": d + 2,  # (i / N)^2
        "p3": d + 3,  # 1
        "w": slice(d + 4, 2 * d + 4),  # GD iterate, or AGD's w_a
        "wb": slice(2 * d + 4, 3 * d + 4),  # AGD's w_b
        "v": slice(3 * d + 4, 4 * d + 4),  # AGD's v
    }


def ridge_transformer(
    dim: int,
    num_actions: int,
    horizon: int,
    n_layers: int,
    lam: float = 1.0,
    bound_a: float | None = None,
    accelerated: bool = False,
) -> BanditTransformer:
    """A float64 BanditTransformer whose ``n_layers`` layers run GD (or AGD) on the ridge objective.

    ``bound_a`` is B_a >= ||a|| for every action (default sqrt(d), the bound for [-1, 1]^d).
    """
    d = dim
    width = 4 * d + 4
    n_head = 4
    head = math.ceil(max(width, 4 * (d + 1)) / n_head)
    cfg = TransformerConfig(
        n_layer=n_layers,
        n_head=n_head,
        n_embd=n_head * head,
        mlp_ratio=4,
        attention=Attention.RELU,
        layout=Layout.PAPER,
        positional=Positional.POLY,
        dim=dim,
        num_actions=num_actions,
        horizon=horizon,
        norm=Norm.NONE,
    )
    model = BanditTransformer(cfg).double()
    slots = _layout(d)
    n_max = float(cfg.max_tokens)
    bound_a = math.sqrt(d) if bound_a is None else float(bound_a)
    eta = 1.0 / (bound_a**2 + lam)
    kappa = (2 * horizon - 1) * (bound_a**2 + lam) / lam
    beta = (math.sqrt(kappa) - 1) / (math.sqrt(kappa) + 1)
    scale = math.sqrt(head)  # undo the attention's 1/sqrt(head_size)
    D = cfg.n_embd

    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        # embedding: paper-layout features are [a (d), r, vec(A) (A d), onehot (A), type (2)]
        emb = model.input_embed.weight  # (D, F)
        emb[slots["a"], 0:d] = torch.eye(d, dtype=emb.dtype)
        emb[slots["r"], d] = 1.0
        assert isinstance(model.pos_embed, nn.Linear)  # positional="poly"
        pos = model.pos_embed.weight  # (D, 3) acting on (i/N, (i/N)^2, 1)
        pos[slots["p1"], 0] = pos[slots["p2"], 1] = pos[slots["p3"], 2] = 1.0

        iterate = slots["v"] if accelerated else slots["w"]  # the point where the gradient is taken
        for block in model.blocks:
            assert isinstance(block, Block)  # nn.ModuleList yields nn.Module
            W = block.attn.c_attn.weight  # (3D, D): rows [q | k | v], head h at h*head:(h+1)*head
            q, k, v = W[:D], W[D : 2 * D], W[2 * D :]
            proj = block.attn.c_proj.weight  # (D, D)
            for h, sign in ((0, 1.0), (1, -1.0)):  # heads 1, 2: +-ReLU(+-(<w, a_j> - r_j)) (-+eta a_j)
                o = h * head
                q[o : o + d, iterate] = sign * scale * torch.eye(d, dtype=W.dtype)
                q[o + d, slots["p3"]] = sign * scale
                k[o : o + d, slots["a"]] = torch.eye(d, dtype=W.dtype)
                k[o + d, slots["r"]] = -1.0
                v[o : o + d, slots["a"]] = -sign * eta * torch.eye(d, dtype=W.dtype)
            o = 2 * head  # head 3: ReLU(1 - i + j) = 1{j = i}; value -eta lambda w
            q[o, slots["p3"]] = scale
            q[o + 1, slots["p1"]] = -scale * n_max
            q[o + 2, slots["p3"]] = scale
            k[o, slots["p3"]] = 1.0
            k[o + 1, slots["p3"]] = 1.0
            k[o + 2, slots["p1"]] = n_max
            v[o : o + d, iterate] = -eta * lam * torch.eye(d, dtype=W.dtype)
            for h in range(3):
                proj[slots["w"], h * head : h * head + d] = torch.eye(d, dtype=W.dtype)
            if accelerated:
                o = 3 * head  # head 4: ReLU(i - i^2 + j^2) = i 1{j = i}; after 1/i, adds v - w_a
                q[o, slots["p1"]] = scale * n_max
                q[o + 1, slots["p2"]] = -scale * n_max**2
                q[o + 2, slots["p3"]] = scale
                k[o, slots["p3"]] = 1.0
                k[o + 1, slots["p3"]] = 1.0
                k[o + 2, slots["p2"]] = n_max**2
                v[o : o + d, slots["v"]] = torch.eye(d, dtype=W.dtype)
                v[o : o + d, slots["w"]] = -torch.eye(d, dtype=W.dtype)
                proj[slots["w"], o : o + d] = torch.eye(d, dtype=W.dtype)
                # MLP: z1 = (1 + beta) w_a - beta w_b - v (increment of v), z2 = w_a - w_b (of w_b),
                # each as ReLU(z) - ReLU(-z)
                fc, out = block.mlp.c_fc.weight, block.mlp.c_proj.weight  # (4D, D), (D, 4D)
                eye = torch.eye(d, dtype=W.dtype)
                for sign, rows in ((1.0, slice(0, d)), (-1.0, slice(d, 2 * d))):
                    fc[rows, slots["w"]] = sign * (1 + beta) * eye
                    fc[rows, slots["wb"]] = -sign * beta * eye
                    fc[rows, slots["v"]] = -sign * eye
                    out[slots["v"], rows] = sign * eye
                for sign, rows in ((1.0, slice(2 * d, 3 * d)), (-1.0, slice(3 * d, 4 * d))):
                    fc[rows, slots["w"]] = sign * eye
                    fc[rows, slots["wb"]] = -sign * eye
                    out[slots["wb"], rows] = sign * eye
    model.construction = {"eta": eta, "kappa": kappa, "beta": beta, "lam": lam, "accelerated": accelerated}
    return model.eval()


def read_ridge_estimates(
    model: BanditTransformer, action_sets: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor
) -> torch.Tensor:
    """The estimate w_hat (B, T, d) held at the state token of every step after the last layer."""
    with torch.no_grad():
        feats = model.token_features(action_sets.double(), actions, rewards.double())
        hidden = model.encode(feats)[:, ::2]  # (B, T, D) state tokens
    return hidden[..., _layout(model.config.dim)["w"]]


def exact_ridge_estimates(
    action_sets: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor, lam: float
) -> torch.Tensor:
    """w_t = (lambda I + sum_{j<t} a_j a_j^T)^{-1} sum_{j<t} a_j r_j for every t, by direct solves (B, T, d)."""
    a = torch.gather(action_sets, 2, actions[..., None, None].expand(*actions.shape, 1, action_sets.shape[-1]))
    a = a[:, :, 0].double()  # (B, T, d)
    r = rewards.double()
    B, T, d = a.shape
    out = torch.zeros(B, T, d, dtype=torch.float64)
    eye = lam * torch.eye(d, dtype=torch.float64)
    for t in range(1, T):
        gram = eye + a[:, :t].transpose(1, 2) @ a[:, :t]
        out[:, t] = torch.linalg.solve(gram, (a[:, :t] * r[:, :t, None]).sum(1))
    return out
