import math

import pytest
import torch
import torch.nn.functional as F

from icrl_gym.models.transformer import (
    BanditTransformer,
    CausalSelfAttention,
    KVCache,
    TransformerConfig,
)

A, D_ACT, T = 4, 3, 12
LAYOUTS = ["paper", "compact"]
ATTENTIONS = ["relu", "softmax"]


def tiny_config(**kw) -> TransformerConfig:
    base = dict(n_layer=2, n_head=2, n_embd=16, num_actions=A, dim=D_ACT, horizon=T)
    base.update(kw)
    return TransformerConfig(**base)


def tiny_model(seed: int = 0, randomize: bool = True, **kw) -> BanditTransformer:
    """A tiny model in eval mode; `randomize` uses larger weights so every input matters visibly."""
    torch.manual_seed(seed)
    model = BanditTransformer(tiny_config(**kw))
    if randomize:
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "ln_" not in name:
                    p.normal_(0.0, 0.3)
    return model.eval()


def random_batch(B: int = 3, steps: int = T, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    action_sets = torch.rand(B, steps, A, D_ACT, generator=g) * 2 - 1
    actions = torch.randint(0, A, (B, steps), generator=g)
    rewards = torch.randn(B, steps, generator=g)
    return action_sets, actions, rewards


def rollout(model: BanditTransformer, action_sets, actions, rewards):
    B, steps = actions.shape
    cache = model.new_cache(B, model.env_info())
    logits, values = [], []
    for t in range(steps):
        prev_a = None if t == 0 else actions[:, t - 1]
        prev_r = None if t == 0 else rewards[:, t - 1]
        lo, va = model.step(cache, action_sets[:, t], prev_a, prev_r)
        logits.append(lo)
        values.append(va)
    return torch.stack(logits, 1), torch.stack(values, 1), cache


# ----------------------------------------------------------------------------- attention


@pytest.mark.parametrize("n_head", [1, 2])
def test_relu_attention_matches_slow_reference(n_head):
    torch.manual_seed(0)
    cfg = tiny_config(n_head=n_head)
    layer = CausalSelfAttention(cfg)
    with torch.no_grad():
        for p in layer.parameters():
            p.normal_(0.0, 0.5)
    B, N, Dm = 2, 7, cfg.n_embd
    hs = Dm // n_head
    x = torch.randn(B, N, Dm)
    with torch.no_grad():
        out = layer(x)
        q, k, v = layer.c_attn(x).split(Dm, dim=2)
        heads = torch.zeros(B, N, Dm)
        for b in range(B):
            for m in range(n_head):
                sl = slice(m * hs, (m + 1) * hs)
                for i in range(1, N + 1):  # 1-based query position
                    acc = torch.zeros(hs)
                    for j in range(1, i + 1):
                        w = max(float(q[b, i - 1, sl] @ k[b, j - 1, sl]) / math.sqrt(hs), 0.0)
                        acc += w * v[b, j - 1, sl]
                    heads[b, i - 1, sl] = acc / i
        ref = layer.c_proj(heads)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


def test_attention_chunked_cache_matches_full():
    torch.manual_seed(0)
    for attention in ATTENTIONS:
        cfg = tiny_config(attention=attention)
        layer = CausalSelfAttention(cfg).eval()
        x = torch.randn(2, 9, cfg.n_embd)
        with torch.no_grad():
            full = layer(x)
            model = BanditTransformer(cfg)
            cache = model.new_cache(2, model.env_info())
            outs = []
            for lo, hi in [(0, 3), (3, 4), (4, 9)]:
                outs.append(layer(x[:, lo:hi], cache, 0))
                cache.length = hi
        torch.testing.assert_close(torch.cat(outs, 1), full, atol=1e-6, rtol=1e-5)


# ----------------------------------------------------------------------------- model


@pytest.mark.parametrize("layout", LAYOUTS)
def test_forward_shapes_and_init(layout):
    torch.manual_seed(0)
    model = BanditTransformer(tiny_config(layout=layout))
    logits, values = model(*random_batch(B=2, steps=5))
    assert logits.shape == (2, 5, A) and values.shape == (2, 5, A)
    assert model.num_parameters() == sum(p.numel() for p in model.parameters())
    for name, p in model.named_parameters():
        if name.endswith("bias") and "ln_" not in name:
            assert torch.all(p == 0), name
    assert model.config.max_tokens == model.config.tokens_per_step * T


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("attention", ATTENTIONS)
def test_causal_masking(layout, attention):
    model = tiny_model(layout=layout, attention=attention)
    action_sets, actions, rewards = random_batch(B=2)
    with torch.no_grad():
        base, base_v = model(action_sets, actions, rewards)
        for t in [0, 4, T - 2]:  # 0-based step index whose outcome is changed
            a2, act2, r2 = action_sets.clone(), actions.clone(), rewards.clone()
            act2[:, t] = (act2[:, t] + 1) % A
            r2[:, t] += 3.0
            a2[:, t + 1] = torch.rand(2, A, D_ACT) * 2 - 1
            out, out_v = model(a2, act2, r2)
            torch.testing.assert_close(out[:, : t + 1], base[:, : t + 1], atol=0, rtol=0)
            torch.testing.assert_close(out_v[:, : t + 1], base_v[:, : t + 1], atol=0, rtol=0)
            assert (out[:, t + 1 :] - base[:, t + 1 :]).abs().max() > 1e-4


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("attention", ATTENTIONS)
@pytest.mark.parametrize("positional", ["learned", "poly", "none"])
def test_cache_rollout_matches_forward(layout, attention, positional):
    model = tiny_model(layout=layout, attention=attention, positional=positional)
    batch = random_batch(B=3)
    with torch.no_grad():
        logits, values = model(*batch)
    step_logits, step_values, cache = rollout(model, *batch)
    assert logits.abs().max() > 0.1  # non-trivial outputs
    torch.testing.assert_close(step_logits, logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(step_values, values, atol=1e-5, rtol=1e-5)
    assert cache.steps == T
    assert cache.length == (2 * T - 1 if layout == "paper" else T)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("readout, features", [("arm", "raw"), ("linear", "quadratic"), ("arm", "quadratic")])
def test_beyond_paper_options_keep_cache_and_masking(layout, readout, features):
    model = tiny_model(layout=layout, readout=readout, features=features)
    action_sets, actions, rewards = random_batch(B=3)
    with torch.no_grad():
        logits, values = model(action_sets, actions, rewards)
        step_logits, step_values, _ = rollout(model, action_sets, actions, rewards)
        torch.testing.assert_close(step_logits, logits, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(step_values, values, atol=1e-5, rtol=1e-5)
        r2 = rewards.clone()
        r2[:, 5] += 2.0
        out, _ = model(action_sets, actions, r2)
        torch.testing.assert_close(out[:, :6], logits[:, :6], atol=0, rtol=0)
        assert (out[:, 6:] - logits[:, 6:]).abs().max() > 1e-4


def test_cache_reset_reuses_buffers():
    model = tiny_model(attention="softmax")
    batch = random_batch(B=2)
    first, _, cache = rollout(model, *batch)
    k0 = cache.k[0]
    cache.reset()
    assert cache.length == 0 and cache.steps == 0 and cache.last_action_set is None
    logits = [model.step(cache, batch[0][:, 0], None, None)[0]]
    logits.append(model.step(cache, batch[0][:, 1], batch[1][:, 0], batch[2][:, 0])[0])
    assert cache.k[0] is k0
    torch.testing.assert_close(torch.stack(logits, 1), first[:, :2], atol=1e-6, rtol=1e-6)


def test_forward_on_prefix_matches_full():
    model = tiny_model()
    batch = random_batch(B=2)
    with torch.no_grad():
        full, _ = model(*batch)
        prefix, _ = model(*(x[:, :5] for x in batch))
    torch.testing.assert_close(prefix, full[:, :5], atol=1e-6, rtol=1e-5)


def test_dropout_train_vs_eval():
    model = tiny_model(dropout=0.2)
    batch = random_batch(B=2)
    with torch.no_grad():
        e1, _ = model(*batch)
        e2, _ = model(*batch)
        model.train()
        t1, _ = model(*batch)
    torch.testing.assert_close(e1, e2)
    assert not torch.allclose(e1, t1)


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize("layout", LAYOUTS)
def test_cache_full_raises(layout):
    model = tiny_model(layout=layout)
    batch = random_batch(B=2)
    _, _, cache = rollout(model, *batch)
    with pytest.raises(ValueError, match="cache is full"):
        model.step(cache, batch[0][:, 0], batch[1][:, -1], batch[2][:, -1])


def test_shape_errors():
    model = tiny_model()
    action_sets, actions, rewards = random_batch(B=2)
    with pytest.raises(ValueError, match="d=4 but the model was built for d=3"):
        model(torch.zeros(2, T, A, 4), actions, rewards)
    with pytest.raises(ValueError, match="A=5 arms"):
        model(torch.zeros(2, T, 5, D_ACT), actions, rewards)
    long_sets = torch.zeros(2, T + 1, A, D_ACT)
    with pytest.raises(ValueError, match="horizon"):
        model(long_sets, torch.zeros(2, T + 1, dtype=torch.long), torch.zeros(2, T + 1))
    with pytest.raises(ValueError, match="actions has shape"):
        model(action_sets, actions[:, :-1], rewards)
    with pytest.raises(ValueError, match="rewards has shape"):
        model(action_sets, actions, rewards[:1])
    with pytest.raises(ValueError, match="integer"):
        model(action_sets, actions.float(), rewards)
    with pytest.raises(ValueError, match=r"lie in \[0, 4\)"):
        model(action_sets, actions + A, rewards)
    with pytest.raises(ValueError, match="must have 4 dims"):
        model(action_sets[0], actions, rewards)


def test_step_errors():
    model = tiny_model()
    action_sets, actions, rewards = random_batch(B=2)
    cache = model.new_cache(2, model.env_info())
    assert isinstance(cache, KVCache) and cache.batch_size == 2 and cache.capacity == 2 * T
    with pytest.raises(ValueError, match="must be None at the first step"):
        model.step(cache, action_sets[:, 0], actions[:, 0], rewards[:, 0])
    with pytest.raises(ValueError, match="batch size 3"):
        model.step(cache, torch.zeros(3, A, D_ACT), None, None)
    model.step(cache, action_sets[:, 0], None, None)
    with pytest.raises(ValueError, match="required at step 2"):
        model.step(cache, action_sets[:, 1], None, None)
    with pytest.raises(ValueError, match="prev_action has shape"):
        model.step(cache, action_sets[:, 1], actions[:1, 0], rewards[:, 0])
    with pytest.raises(ValueError, match="prev_reward has shape"):
        model.step(cache, action_sets[:, 1], actions[:, 0], rewards[:1, 0])
    assert cache.steps == 1  # failed calls leave the cache untouched


# ----------------------------------------------------------------------------- config


def test_config_round_trip():
    cfg = TransformerConfig(n_layer=3, attention="softmax", layout="compact", positional="poly", dropout=0.1)
    d = cfg.to_dict()
    assert d["n_layer"] == 3 and d["layout"] == "compact"
    assert TransformerConfig.from_dict(d) == cfg
    default = TransformerConfig()
    assert (default.n_layer, default.n_head, default.n_embd) == (8, 4, 32)
    assert default.tokens_per_step == 2 and default.max_tokens == 400
    assert cfg.tokens_per_step == 1 and cfg.max_tokens == 200


def test_config_errors():
    with pytest.raises(ValueError, match="unknown TransformerConfig fields"):
        TransformerConfig.from_dict({"n_layer": 2, "n_layers": 3})
    with pytest.raises(ValueError, match="divisible by n_head"):
        TransformerConfig(n_embd=30, n_head=4)
    with pytest.raises(ValueError, match="attention"):
        TransformerConfig(attention="linear")
    with pytest.raises(ValueError, match="layout"):
        TransformerConfig(layout="triple")
    with pytest.raises(ValueError, match="positional"):
        TransformerConfig(positional="rope")
    with pytest.raises(ValueError, match="horizon"):
        TransformerConfig(horizon=0)
    with pytest.raises(ValueError, match="n_layer"):
        TransformerConfig(n_layer=2.5)
    with pytest.raises(ValueError, match="dropout"):
        TransformerConfig(dropout=1.0)


# ----------------------------------------------------------------------------- training


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_tiny_overfit(attention):
    torch.manual_seed(0)
    model = BanditTransformer(tiny_config(attention=attention, n_embd=32, n_head=4)).train()
    action_sets, actions, rewards = random_batch(B=8, seed=3)
    labels = torch.randint(0, A, (8, T))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)

    def loss_fn() -> torch.Tensor:
        logits, _ = model(action_sets, actions, rewards)
        return F.cross_entropy(logits.reshape(-1, A), labels.reshape(-1))

    initial = loss_fn().item()
    for _ in range(150):
        opt.zero_grad()
        loss = loss_fn()
        loss.backward()
        opt.step()
    assert loss_fn().item() < 0.6 * initial
