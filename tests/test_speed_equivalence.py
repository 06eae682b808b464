"""The fast attention kernels equal a slow, per-head reference: losses, gradients and cached rollouts.

The reference below is the definition written out head by head (Definition 1 for ReLU:
``(1/i) sum_{j<=i} ReLU(<q_i, k_j>/sqrt(hs)) v_j``; causal softmax otherwise), with no query
blocking, no score recomputation and no folded scales, so that a bug in the blocked kernel of
:func:`icrl_gym.models.decoder.relu_causal_attention` cannot hide in both.
"""

from __future__ import annotations

import math

import pytest
import torch

from icrl_gym.models import decoder as tf
from icrl_gym.models.decoder import CausalSelfAttention
from icrl_gym.models.mdp_transformer import MDPTransformer, MDPTransformerConfig
from icrl_gym.models.transformer import BanditTransformer, TransformerConfig


def reference_attention(
    self: CausalSelfAttention, x: torch.Tensor, cache: tf.KVCache | None = None, layer: int = 0
) -> torch.Tensor:
    """Full-sequence attention, one head at a time (``cache`` must be None)."""
    assert cache is None
    B, T, D = x.shape
    hs = self.head_size
    q, k, v = self.c_attn(x).split(D, dim=2)
    i = torch.arange(1, T + 1, dtype=x.dtype)[:, None]  # 1-based query positions
    visible = torch.ones(T, T, dtype=torch.bool).tril()
    heads = []
    for h in range(self.n_head):
        part = slice(h * hs, (h + 1) * hs)
        scores = q[..., part] @ k[..., part].transpose(1, 2) / math.sqrt(hs)  # (B, T, T)
        if self.attention == "relu":
            weights = torch.where(visible, torch.relu(scores), 0.0) / i
        else:
            weights = torch.softmax(scores.masked_fill(~visible, -math.inf), dim=-1)
        heads.append(weights @ v[..., part])  # (B, T, hs)
    return self.c_proj(torch.cat(heads, dim=-1))


def _loss_and_grads(model: torch.nn.Module, batch: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, dict]:
    model.zero_grad(set_to_none=True)
    logits = model(*batch[:3])[0]
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch[3].flatten())
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _assert_same(model: torch.nn.Module, batch: tuple[torch.Tensor, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    loss, grads = _loss_and_grads(model, batch)
    with monkeypatch.context() as m:
        m.setattr(CausalSelfAttention, "forward", reference_attention)
        ref_loss, ref_grads = _loss_and_grads(model, batch)
    assert grads.keys() == ref_grads.keys() and len(grads) > 10
    torch.testing.assert_close(loss, ref_loss, rtol=1e-12, atol=1e-12)
    for name, g in grads.items():
        torch.testing.assert_close(g, ref_grads[name], rtol=1e-9, atol=1e-12, msg=name)


def _bandit_batch(cfg: TransformerConfig, B: int, T: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    sets = torch.rand(B, T, cfg.num_actions, cfg.dim, generator=g, dtype=torch.float64) * 2 - 1
    actions = torch.randint(0, cfg.num_actions, (B, T), generator=g)
    rewards = torch.randn(B, T, generator=g, dtype=torch.float64)
    labels = torch.randint(0, cfg.num_actions, (B, T), generator=g)
    return sets, actions, rewards, labels


@pytest.mark.parametrize("attention", ["relu", "softmax"])
@pytest.mark.parametrize("T", [1, 7, 24, 61])  # 2T-1 tokens: below, across and over several query blocks
def test_bandit_loss_and_gradients_match_reference(attention: str, T: int, monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    cfg = TransformerConfig(n_layer=3, attention=attention, horizon=64)
    model = BanditTransformer(cfg).double()
    _assert_same(model, _bandit_batch(cfg, 3, T), monkeypatch)


@pytest.mark.parametrize("attention", ["relu", "softmax"])
def test_mdp_loss_and_gradients_match_reference(attention: str, monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(1)
    cfg = MDPTransformerConfig(n_layer=2, n_embd=32, attention=attention, horizon=4, episodes=6, prev_tokens=2)
    model = MDPTransformer(cfg).double()
    g = torch.Generator().manual_seed(1)
    B, T = 3, cfg.horizon * cfg.episodes
    batch = (
        torch.randint(0, cfg.num_states, (B, T), generator=g),
        torch.randint(0, cfg.num_actions, (B, T), generator=g),
        torch.rand(B, T, generator=g, dtype=torch.float64),
        torch.randint(0, cfg.num_actions, (B, T), generator=g),
    )
    _assert_same(model, batch, monkeypatch)


def test_relu_kernel_gradcheck() -> None:
    """Autograd's numerical check of the hand-written backward, over several query blocks."""
    g = torch.Generator().manual_seed(2)
    T = tf._QUERY_BLOCK * 2 + 5
    q, k, v = (torch.randn(2, T, 3, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    assert torch.autograd.gradcheck(tf.relu_causal_attention, (q, k, v))


def test_relu_kernel_strided_inputs_match_definition() -> None:
    """Non-contiguous q, k, v (views of one projection, as the attention module passes them) give the
    same values and gradients as ``ReLU(q k^T)`` masked causally, times ``v``, in float64."""
    g = torch.Generator().manual_seed(5)
    T = tf._QUERY_BLOCK + 9
    qkv = torch.randn(3, T, 4, 3, generator=g, dtype=torch.float64).requires_grad_()
    q, k, v = (qkv[i].transpose(0, 1) for i in range(3))  # (4, T, 3) strided views
    dy = torch.randn(4, T, 3, generator=g, dtype=torch.float64)
    y = tf.relu_causal_attention(q, k, v)
    (grad,) = torch.autograd.grad(y, qkv, dy)
    scores = torch.einsum("nid,njd->nij", q, k)  # independent of the kernel's transposed layout
    ref_y = torch.einsum("nij,njd->nid", torch.relu(scores) * torch.ones(T, T, dtype=torch.bool).tril(), v)
    (ref_grad,) = torch.autograd.grad(ref_y, qkv, dy)
    torch.testing.assert_close(y, ref_y, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-12, atol=1e-12)


def test_training_step_matches_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """One AdamW step of the paper model (ReLU, two tokens per step, 3 query blocks) from the fast
    kernel and from the per-head reference leaves the same parameters, in float64."""
    cfg = TransformerConfig(n_layer=2, horizon=2 * tf._QUERY_BLOCK)
    batch = _bandit_batch(cfg, 2, cfg.horizon, seed=6)
    params = []
    for reference in (False, True):
        torch.manual_seed(6)
        model = BanditTransformer(cfg).double()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        with monkeypatch.context() as m:
            if reference:
                m.setattr(CausalSelfAttention, "forward", reference_attention)
            _loss_and_grads(model, batch)
        opt.step()
        params.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    torch.testing.assert_close(params[0], params[1], rtol=1e-12, atol=1e-12)


def test_relu_kernel_float32_matches_reference() -> None:
    """In float32, at the paper's size (T = 399 tokens), the blocked kernel equals the plain one to rounding."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(8, 399, 8, generator=g, requires_grad=True) for _ in range(3))
    dy = torch.randn(8, 399, 8, generator=g)
    y = tf.relu_causal_attention(q, k, v)
    grads = torch.autograd.grad(y, (q, k, v), dy)
    ref_y = torch.relu(q @ k.transpose(1, 2)).tril() @ v
    ref_grads = torch.autograd.grad(ref_y, (q, k, v), dy)
    torch.testing.assert_close(y, ref_y, rtol=1e-5, atol=1e-4)
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("layout", ["paper", "compact"])
@pytest.mark.parametrize("attention", ["relu", "softmax"])
def test_cached_rollout_equals_full_forward(layout: str, attention: str) -> None:
    torch.manual_seed(4)
    cfg = TransformerConfig(n_layer=2, attention=attention, layout=layout, horizon=40)
    model = BanditTransformer(cfg).double().eval()
    sets, actions, rewards, _ = _bandit_batch(cfg, 3, 40, seed=4)
    with torch.no_grad():
        full = model(sets, actions, rewards)[0]
    cache = model.new_cache(3, model.env_info())
    steps = []
    for t in range(40):
        prev = (None, None) if t == 0 else (actions[:, t - 1], rewards[:, t - 1])
        steps.append(model.step(cache, sets[:, t], *prev)[0])
    torch.testing.assert_close(torch.stack(steps, dim=1), full, rtol=1e-10, atol=1e-12)
