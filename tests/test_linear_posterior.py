"""The linear generalist's second version: closed-form posterior features, cache, equivariance, resume.

The features are checked against a direct per-run numpy solve (posterior mean and covariance by a
matrix inverse, the evidence as the log density of r ~ N(0, sigma^2 I + X P X^T) from scipy).
"""

import math

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal

from icrl_gym.estimators.gaussian_gittins import gaussian_gittins_table
from icrl_gym.models.linear_generalist import LinearGeneralistConfig, LinearGeneralistTransformer
from icrl_gym.models.linear_generalist_posterior import independent_arms, informed_arms, partly_informed_arms
from icrl_gym.models.linear_posterior import (
    Posterior,
    arm_posterior,
    bayes_ucb_quantile,
    estimate_noise_arms,
    grid,
    linear_posterior,
    model_average,
)
from icrl_gym.models.policy import EnvInfo
from icrl_gym.training.linear_expert import expert_z
from icrl_gym.training.linear_generalist import LinearGeneralistTrainConfig, train

TINY = {"d_model": 16, "n_heads": 2, "n_layers": 1, "mlp_ratio": 2, "d_max": 5, "features": "posterior"}


def _direct(x_hist, r, arms, d, sigma, s2, tau2):
    """Posterior mean and sd of <a_k, w> and the log evidence under w ~ N(0, s2 I + tau2 1 1^T) on d coordinates."""
    xs, a = x_hist[:, :d], arms[:, :d]
    prior = s2 * np.eye(d) + tau2 * np.ones((d, d))
    cov = np.linalg.inv(xs.T @ xs / sigma**2 + np.linalg.inv(prior))
    mu = cov @ xs.T @ r / sigma**2
    sd = np.sqrt(np.einsum("ad,de,ae->a", a, cov, a))
    if len(r) == 0:
        return a @ mu, sd, 0.0
    evidence = multivariate_normal(np.zeros(len(r)), sigma**2 * np.eye(len(r)) + xs @ prior @ xs.T).logpdf(r)
    return a @ mu, sd, evidence


def _assert_direct(post, x_hist, r, arms, d, sigma):
    """Every prior of the grid: ``post`` equals the direct solve (:func:`_direct`)."""
    s2, tau2 = grid()
    for j in range(len(s2)):
        mean, sd, evidence = _direct(x_hist, r, arms, d, sigma, float(s2[j]), float(tau2[j]))
        np.testing.assert_allclose(post.mean[j].numpy(), mean, rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(post.sd[j].numpy(), sd, rtol=1e-8)
        np.testing.assert_allclose(float(post.log_evidence[j]), evidence, rtol=1e-8, atol=1e-8)


def _moments(x_hist, r, d_max):
    tokens = np.concatenate(
        [np.pad(x_hist, ((0, 0), (0, d_max - x_hist.shape[1]))), r[:, None], np.ones((len(r), 1))], 1
    )
    return torch.as_tensor(tokens.T @ tokens)


@pytest.mark.parametrize("n", [0, 3, 40])
def test_linear_posterior_equals_a_direct_solve(n):
    rng = np.random.default_rng(n)
    d, d_max, sigma = 3, 5, 0.7
    x_hist, r, arms = rng.uniform(-1, 1, (n, d)), rng.normal(0.5, 1.0, n), rng.uniform(-1, 1, (4, d))
    post = linear_posterior(
        _moments(x_hist, r, d_max),
        torch.as_tensor(np.pad(arms, ((0, 0), (0, d_max - d)))),
        torch.tensor(d),
        torch.tensor(sigma, dtype=torch.float64),
    )
    _assert_direct(post, x_hist, r, arms, d, sigma)


def test_arm_posterior_equals_the_one_hot_linear_model():
    rng = np.random.default_rng(1)
    k, n, sigma = 6, 30, 0.4
    actions = rng.integers(0, k, n)
    r = rng.normal(0.3, 1.0, n)
    x_hist, arms = np.eye(k)[actions], np.eye(k)
    counts, sums = np.bincount(actions, minlength=k), np.bincount(actions, weights=r, minlength=k)
    post = arm_posterior(
        torch.as_tensor(counts, dtype=torch.float64),
        torch.as_tensor(sums),
        torch.tensor(float(r @ r)),
        torch.tensor(float(n)),
        torch.tensor(sigma, dtype=torch.float64),
    )
    _assert_direct(post, x_hist, r, arms, k, sigma)
    linear = linear_posterior(
        _moments(x_hist, r, k), torch.as_tensor(arms), torch.tensor(k), torch.tensor(sigma, dtype=torch.float64)
    )
    torch.testing.assert_close(linear.log_evidence, post.log_evidence)


def test_model_average_is_the_mixture_of_the_valid_models():
    rng = np.random.default_rng(2)
    x_hist, r, arms = rng.uniform(-1, 1, (12, 2)), rng.normal(size=12), rng.uniform(-1, 1, (3, 2))
    sigma = torch.tensor(0.5, dtype=torch.float64)
    lin = linear_posterior(_moments(x_hist, r, 2), torch.as_tensor(arms), torch.tensor(2), sigma)
    counts = torch.tensor([4.0, 4.0, 4.0], dtype=torch.float64)
    arm = arm_posterior(
        counts, torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64), torch.tensor(9.0), torch.tensor(12.0), sigma
    )
    for valid_arm in (True, False):
        weights, mean, sd = model_average([lin, arm], [torch.tensor(True), torch.tensor(valid_arm)])
        ev = np.concatenate([lin.log_evidence.numpy(), arm.log_evidence.numpy() if valid_arm else np.full(12, -np.inf)])
        w = np.exp(ev - ev.max())
        w /= w.sum()
        means = np.concatenate([lin.mean.numpy(), arm.mean.numpy()])
        sds = np.concatenate([lin.sd.numpy(), arm.sd.numpy()])
        m = w @ means
        np.testing.assert_allclose(weights.numpy(), w, rtol=1e-10, atol=1e-300)
        np.testing.assert_allclose(mean.numpy(), m, rtol=1e-10)
        np.testing.assert_allclose(sd.numpy() ** 2, w @ (sds**2 + means**2) - m**2, rtol=1e-8)


def test_quantile_schedule_and_arm_noise_estimate():
    steps = torch.arange(6)
    expected = [expert_z(0.0, "bayes_ucb", int(t)) for t in steps]
    np.testing.assert_allclose(bayes_ucb_quantile(steps).numpy(), expected, rtol=1e-10)
    counts, sums = torch.tensor([3.0, 0.0, 2.0]), torch.tensor([3.0, 0.0, -2.0])
    r = np.array([0.5, 1.0, 1.5, -1.2, -0.8])  # arm 0: mean 1, arm 2: mean -1
    rss = ((r[:3] - 1.0) ** 2).sum() + ((r[3:] + 1.0) ** 2).sum()
    sigma = estimate_noise_arms(counts, sums, torch.tensor(float(r @ r)), torch.tensor(5.0))
    np.testing.assert_allclose(float(sigma), np.sqrt((rss + 0.25) / (5 - 2 + 1)), rtol=1e-6)


def _model(seed=0, **kw):
    torch.manual_seed(seed)
    model = LinearGeneralistTransformer(LinearGeneralistConfig(**{**TINY, **kw})).eval()
    with torch.no_grad():  # a non-zero head, so that the network (not only the skip index) is tested
        assert model.posterior is not None
        model.posterior.head.weight.normal_(0.0, 1.0)
    return model


def _trajectory(b, s, a, d, seed, per_step, one_hot=False):
    g = torch.Generator().manual_seed(seed)
    sets = torch.rand(b, s if per_step else 1, a, d, generator=g) * 2 - 1
    if one_hot:
        sets = torch.eye(a).expand(b, 1, a, a)
    return (
        sets.expand(b, s, a, sets.shape[-1]),
        torch.randint(0, a, (b, s), generator=g),
        torch.randn(b, s, generator=g),
    )


@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("case", ["per_step", "fixed", "one_hot_wider_than_d_max"])
def test_cached_steps_equal_the_recomputation_from_scratch(case, gated):
    skip = "moss" if gated else "bayes_ucb"  # the gated model also with the horizon-aware skip index
    scales = {"skip_scale": 0.7, "skip_scale_unpulled": 1.3} if gated else {}  # and its two constants
    model = _model(noise_estimate=True, index_width=gated, ridge_gate=gated, skip_schedule=skip, **scales)
    b, s, a, d = 3, 25, 7, 4
    if gated:  # open the gate and the width, so that the ridge columns reach the logits
        with torch.no_grad():
            model.posterior.gate[-1].bias.copy_(torch.tensor([0.6, 0.3]))
            model.posterior.width[-1].bias.fill_(-0.4)
    one_hot = case == "one_hot_wider_than_d_max"
    sets, actions, rewards = _trajectory(b, s, a, d, 3, case == "per_step", one_hot)
    if case == "fixed":
        sets = sets.contiguous()  # a materialised copy per step: the model finds that it does not change
    d = sets.shape[-1]
    sigma, dims = torch.tensor([0.5, float("nan"), 2.0]), torch.tensor([d, d, d] if one_hot else [4, 2, 3])
    full = model(sets, actions, rewards, torch.arange(s).expand(b, s), 40, sigma, dims)  # (B, S, A)
    runs = {"run_noise_std": tuple(sigma.tolist()), "run_dims": tuple(dims.tolist())}
    cache, steps = model.new_cache(b, EnvInfo(num_actions=a, horizon=40, dim=d, **runs)), []
    for t in range(s):
        prev = (None, None) if t == 0 else (actions[:, t - 1], rewards[:, t - 1])
        steps.append(model.step(cache, sets[:, t].clone(), *prev).logits)
    torch.testing.assert_close(torch.stack(steps, 1), full, atol=1e-4, rtol=1e-5)
    assert bool(cache.fixed.all()) is (case != "per_step")


def test_per_step_sets_wider_than_d_max_are_refused():
    model = _model()
    sets, actions, rewards = _trajectory(2, 5, 3, 7, 0, per_step=True)
    with pytest.raises(ValueError, match="only on a fixed action set"):
        model(sets, actions, rewards, torch.arange(5).expand(2, 5), 10, 1.0, 7)


@pytest.mark.parametrize("per_step", [True, False])
def test_permuting_the_arms_permutes_the_logits(per_step):
    model, (b, s, a, d) = _model(n_layers=2), (2, 20, 6, 3)
    sets, actions, rewards = _trajectory(b, s, a, d, 1, per_step)
    perm = torch.randperm(a, generator=torch.Generator().manual_seed(2))
    inverse = torch.argsort(perm)
    queries = torch.arange(s).expand(b, s)
    logits = model(sets, actions, rewards, queries, 30, 0.8, d)
    permuted = model(sets[:, :, perm], inverse[actions], rewards, queries, 30, 0.8, d)
    torch.testing.assert_close(permuted, logits[..., perm], atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("fields", [{}, {"skip_schedule": "moss", "skip_evidence_power": 0.7, "ridge_gate": True}])
def test_negating_every_feature_leaves_the_logits_unchanged(fields):
    """The grid's priors are symmetric (w* and -w* equally likely), so the history (-x, r) with arms -x is the
    history (x, r) seen through w -> -w: every posterior feature, the skip index and so the logits are the same
    (the symmetry the paper cell's study rests on, benchmarks.evaluations.paper_cell_symmetry)."""
    model, (b, s, a, d) = _model(n_layers=2, **fields), (2, 20, 6, 3)
    sets, actions, rewards = _trajectory(b, s, a, d, 4, per_step=False)
    queries = torch.arange(s).expand(b, s)
    logits = model(sets, actions, rewards, queries, 30, 0.8, d)
    torch.testing.assert_close(model(-sets, actions, rewards, queries, 30, 0.8, d), logits, atol=1e-4, rtol=1e-5)


def _tiny_run(folder, **kw):
    base = {
        "out_dir": str(folder),
        "model": {**TINY, "noise_estimate": True},
        "prior": "family",
        "max_dim": 5,
        "one_hot_fraction": 0.3,
        "unknown_noise_fraction": 0.3,
        "min_noise": 0.05,
        "max_noise": 3.0,
        "expert_schedule": "bayes_ucb",
        "steps": 6,
        "queries": 3,
        "cost_per_batch": 200.0,
        "min_batch": 2,
        "max_batch": 5,
        "max_horizon": 24,
        "max_arms": 8,
        "warmup_steps": 50,  # the learning rate depends on the step only (not on ``steps``) in the warm-up
        "dagger_start": 2,
        "dagger_fraction": 0.5,
        "dagger_max_batch": 3,
        "checkpoint_every": 3,
        "eval_every": 0,
    }
    return LinearGeneralistTrainConfig.from_dict({**base, **kw})


def test_a_resumed_tiny_run_ends_with_the_weights_of_an_uninterrupted_one(tmp_path):
    straight = train(_tiny_run(tmp_path / "a"), echo=False)
    train(_tiny_run(tmp_path / "b", steps=3), echo=False)
    resumed = train(_tiny_run(tmp_path / "b"), echo=False)
    for (name, p), q in zip(straight.state_dict().items(), resumed.state_dict().values(), strict=True):
        assert torch.equal(p, q), name


def test_resampled_behaviour_prior_keeps_the_expert_labels_and_wide_one_hot_rows():
    """behaviour_prior='resampled': the actions come from another prior's index (they are not all the
    expert's argmax), the labels are still the instance's own matched posterior index (a direct solve), and
    one-hot rows with A > d_max are A wide."""
    from icrl_gym.training.linear_generalist import sample_batch

    cfg = _tiny_run("unused", min_arms=8, max_arms=8, min_horizon=30, max_horizon=30, per_step_fraction=0.0)
    cfg.behaviour_prior, cfg.max_epsilon, cfg.one_hot_fraction, cfg.min_batch = "resampled", 0.0, 0.5, 5
    batch = sample_batch(cfg, np.random.default_rng(3))
    inst = batch.inst
    assert inst.sets.shape[-1] == 8 and (inst.dim == 8).any()  # one-hot rows, wider than d_max = 5
    played_argmax = []
    for i in range(len(inst.dim)):
        arms = inst.sets[i, 0].astype(np.float64)
        for q, t in enumerate(batch.query_steps[i]):
            x = arms[batch.actions[i, :t]]
            cov = np.linalg.inv(np.diag(1 / inst.prior_var[i]) + x.T @ x / inst.sigma[i] ** 2)
            mu = cov @ (inst.prior_mean[i] / inst.prior_var[i] + x.T @ batch.rewards[i, :t] / inst.sigma[i] ** 2)
            z = expert_z(0.0, "bayes_ucb", int(t))
            expected = arms @ mu + z * np.sqrt(np.einsum("ad,de,ae->a", arms, cov, arms))
            np.testing.assert_allclose(batch.index[i, q], expected, rtol=1e-4, atol=1e-4)
            played_argmax.append(batch.actions[i, t] == expected.argmax())
    assert 0 < np.mean(played_argmax) < 1


@pytest.mark.parametrize("per_step", [0.0, 1.0])
def test_optimal_action_labels_are_the_argmax_of_the_true_means(per_step):
    from icrl_gym.training.linear_generalist import sample_batch

    cfg = _tiny_run("unused", labels="optimal", per_step_fraction=per_step, min_batch=4)
    batch = sample_batch(cfg, np.random.default_rng(4))
    inst, rows = batch.inst, np.arange(batch.size)[:, None]
    sets = inst.sets[rows, batch.query_steps] if per_step else inst.sets[:, :1].repeat(cfg.queries, 1)
    best = np.einsum("bqad,bd->bqa", sets, inst.w).argmax(-1)
    assert batch.targets.shape == batch.index.shape
    np.testing.assert_array_equal(batch.targets.argmax(-1), best)
    assert (batch.targets.sum(-1) == 1).all() and (batch.targets.max(-1) == 1).all()


def test_dagger_batches_play_the_model_on_one_hot_rows_wider_than_d_max():
    """The model's own rollouts (DAgger) take one-hot rows with A > d_max: the cache is as wide as the rows."""
    from icrl_gym.training.linear_generalist import sample_batch

    cfg = _tiny_run("unused", min_arms=8, max_arms=8, min_horizon=10, max_horizon=10, per_step_fraction=0.0)
    cfg.one_hot_fraction, cfg.min_batch = 0.9, 4
    model = LinearGeneralistTransformer(LinearGeneralistConfig(**{**TINY, "noise_estimate": True}))
    batch = sample_batch(cfg, np.random.default_rng(5), model)
    assert (batch.inst.dim == 8).any() and batch.actions.shape == (batch.size, 10)


def _slow_moss(sd, sigma, left, directions):
    """MOSS's width sqrt(2 log+(left sd_k^2 / (D sigma^2))) arm by arm, in plain floats."""
    return [math.sqrt(2.0 * max(math.log(left * float(v) ** 2 / (directions * sigma**2)), 0.0)) for v in sd]


def _untrained_logits(config, arms, actions, rewards, horizon, sigma, width=0.0):
    """An untrained model's logits (A,) after the history, and its model-averaged posterior computed directly.

    The learned width's output (its bias) is set to ``width`` when the model has one.  Returns the logits, the
    model's alpha, the averaged mean and sd (A,) of both grids (computed on the float32 inputs the model reads)
    and sigma as the model sees it.
    """
    n, d = len(actions), arms.shape[1]
    d_max = config.d_max
    model = LinearGeneralistTransformer(config).eval()
    if config.index_width:
        with torch.no_grad():
            model.posterior.width[-1].bias.fill_(width)
    logits = model(
        torch.as_tensor(arms, dtype=torch.float32)[None],
        torch.as_tensor(actions)[None],
        torch.as_tensor(rewards, dtype=torch.float32)[None],
        torch.tensor([[n]]),
        horizon,
        sigma,
        d,
    )[0, 0]
    posts, sig = _direct_posteriors(arms, actions, rewards, sigma, d_max)
    _, mean, sd = model_average(posts, [torch.tensor(True)] * len(posts))
    return logits, model.posterior.log_alpha.exp().item(), mean, sd, float(sig)


def _direct_posteriors(arms, actions, rewards, sigma, d_max):
    """Both grids' posteriors after the history (the linear model's first, where d <= d_max), computed on the
    float32 inputs the model reads, and sigma as the model sees it."""
    n, (num_arms, d) = len(actions), arms.shape
    x_hist, r = arms[actions].astype(np.float32).astype(np.float64), rewards.astype(np.float32).astype(np.float64)
    sig = torch.tensor(sigma, dtype=torch.float32).double()
    counts = np.bincount(actions, minlength=num_arms).astype(float)
    sums = np.bincount(actions, weights=r, minlength=num_arms)
    total, steps = torch.tensor(r @ r), torch.tensor(float(n))
    posts = [arm_posterior(torch.as_tensor(counts), torch.as_tensor(sums), total, steps, sig)]
    if d <= d_max:  # the linear model is on
        padded = torch.as_tensor(np.pad(arms.astype(np.float32), ((0, 0), (0, d_max - d)))).double()
        posts.insert(0, linear_posterior(_moments(x_hist, r, d_max), padded, torch.tensor(d), sig))
    return posts, sig


@pytest.mark.parametrize(("gamma", "skip"), [(0.0, "bayes_ucb"), (-0.7, "bayes_ucb"), (0.0, "moss"), (-0.3, "moss")])
def test_untrained_logits_are_the_widened_model_averaged_bayes_ucb(gamma, skip):
    """Head at zero: logits = alpha (u_k - max u) / S with u_k = m_k + (z + gamma) sd_k, the model average
    of both grids computed directly (gamma: the learned width's output, here its bias); z is Bayes-UCB's z_t,
    or with ``skip_schedule="moss"`` c times MOSS's width on the steps left, computed arm by arm."""
    rng = np.random.default_rng(7)
    d, num_arms, n, sigma = 3, 4, 9, 0.6
    arms = rng.uniform(-1, 1, (num_arms, d))
    actions = rng.integers(0, num_arms, n)
    rewards = rng.normal(0.2, 1.0, n)
    config = LinearGeneralistConfig(**{**TINY, "index_width": True, "skip_schedule": skip, "skip_scale": 0.8})
    logits, alpha, mean, sd, sig = _untrained_logits(config, arms, actions, rewards, 50, sigma, gamma)
    if skip == "moss":  # T = 50, n steps played, D = min(d, A) = 3
        z = 0.8 * torch.tensor(_slow_moss(sd, sig, 50 - n, min(d, num_arms)), dtype=torch.float64)
    else:
        z = bayes_ucb_quantile(torch.tensor(n))
    u = mean + (z + gamma) * sd
    expected = alpha * (u - u.max()) / sd.mean()
    torch.testing.assert_close(logits - logits.max(), expected.float(), rtol=1e-4, atol=1e-4)


def _assert_moss_constants(fields, arms, horizon, c, seed):
    """An untrained model of ``fields`` after 8 pulls alternating arms 0 and 1 (rewards N(0.4, 0.5^2) drawn from
    ``seed``, sigma = 0.5): its logits are the MOSS index with the per-arm constants ``c``, m_k + c_k z_tk sd_k
    (:func:`_slow_moss`, D = min(d, A)), computed arm by arm.  Returns the widths z_tk."""
    n, sigma = 8, 0.5
    actions = np.array([0, 1] * (n // 2))
    rewards = np.random.default_rng(seed).normal(0.4, 0.5, n)
    logits, alpha, mean, sd, sig = _untrained_logits(
        LinearGeneralistConfig(**{**TINY, **fields}), arms, actions, rewards, horizon, sigma
    )
    width = _slow_moss(sd, sig, horizon - n, min(arms.shape))
    u = mean + torch.tensor([ck * wk for ck, wk in zip(c, width, strict=True)], dtype=torch.float64) * sd
    torch.testing.assert_close(logits - logits.max(), (alpha * (u - u.max()) / sd.mean()).float(), rtol=1e-4, atol=1e-4)
    return width


@pytest.mark.parametrize("num_arms", [4, 7])
def test_arms_the_history_says_nothing_of_take_their_own_scale(num_arms):
    """One-hot arms, only arms 0 and 1 pulled: the MOSS width is c = 0.7 times on those two and 1.3 times on the
    others, computed arm by arm; with 4 arms the linear model is on (d <= d_max = 5) and reads G x_k = 0 for the
    unpulled arms, with 7 the arms model alone counts their pulls."""
    fields = {"skip_schedule": "moss", "skip_scale": 0.7, "skip_scale_unpulled": 1.3}
    width = _assert_moss_constants(fields, np.eye(num_arms), 60, [0.7 if k < 2 else 1.3 for k in range(num_arms)], 3)
    assert min(width[2:]) > 0  # the unpulled arms' scale reaches the index


@pytest.mark.parametrize(
    ("one_hot", "horizon", "kappa"), [(True, 60, 2.0), (False, 60, 2.0), (False, 60, 4.5), (False, 10**6, 2.7)]
)
def test_dense_arms_take_the_horizons_tail_budget_width(one_hot, horizon, kappa):
    """c = 0.8 on the informed arms, 1.3 on the others, and a tail budget kappa: on dense arms (four arms in R^3,
    the history on two of them) every arm is informed and takes c_T = min(0.8, sqrt(max(0, 1 - kappa / log T))):
    0.715 at T = 60 with kappa = 2, 0 (the posterior mean) with kappa = 4.5 > log 60, and 0.8 at T = 10^6; on
    one-hot arms the budget changes nothing (c = 0.8 on the two pulled arms, 1.3 on the others).  Arm by arm."""
    arms = np.eye(4) if one_hot else np.random.default_rng(5).normal(size=(4, 3))
    fields = {"skip_schedule": "moss", "skip_scale": 0.8, "skip_scale_unpulled": 1.3, "dense_tail_budget": kappa}
    dense = min(0.8, math.sqrt(max(0.0, 1.0 - kappa / math.log(horizon))))
    c = [0.8 if k < 2 else 1.3 for k in range(4)] if one_hot else [dense] * 4
    width = _assert_moss_constants(fields, arms, horizon, c, 5)
    assert min(width) > 0  # every arm's constant reaches the index


def test_informed_arms_is_whether_the_gram_matrix_reaches_the_arm():
    """Dense arms: an arm in the span of the unpulled directions is uninformed, any other informed (G x != 0);
    where the linear model is off, the pull counts decide."""
    d_max = 4
    pulled = np.array([[1.0, 0.5, 0.0, 0.0], [0.3, -1.0, 0.0, 0.0]])  # the history spans e_0, e_1
    arms = np.array([[0.0, 0.0, 0.7, -0.2], [0.1, 0.0, 0.9, 0.0], [0.0, 0.0, 0.0, 1.0], [0.0, 0.2, 0.0, 0.0]])
    moments = _moments(pulled, np.array([0.3, -0.1]), d_max)[None, None]
    got = informed_arms(moments, torch.as_tensor(arms)[None, None], torch.zeros(1, 1, 4), torch.tensor([[True]]))
    expected = np.abs(pulled.T @ pulled @ arms.T).max(0) > 0
    assert got[0, 0].tolist() == expected.tolist() == [False, True, False, True]
    counts = torch.tensor([[[0.0, 2.0, 1.0, 0.0]]])
    off = informed_arms(moments, torch.as_tensor(arms)[None, None], counts, torch.tensor([[False]]))
    assert off[0, 0].tolist() == [False, True, True, False]


def test_partly_informed_arms_straddle_the_span_of_the_pulls():
    """Dense arms in R^4, a history spanning a random plane: an arm in the plane or orthogonal to it is not partly
    informed, a generic arm is; checked against the projection onto the pulled arms' span by least squares.  One-hot
    arms never are, and where the linear model is off no arm is."""
    rng = np.random.default_rng(11)
    pulled = rng.normal(size=(2, 4))
    _, _, vt = np.linalg.svd(pulled)
    inside, outside = 0.6 * pulled[0] - 1.1 * pulled[1], vt[2] + 0.3 * vt[3]
    arms = np.stack([inside, outside, rng.normal(size=4), rng.normal(size=4)])
    moments = _moments(np.repeat(pulled, 3, 0), rng.normal(size=6), 4)[None, None]
    got = partly_informed_arms(moments, torch.as_tensor(arms)[None, None], torch.tensor([[True]]))
    coef = np.linalg.lstsq(pulled.T, arms.T, rcond=None)[0]
    residual = np.linalg.norm(arms.T - pulled.T @ coef, axis=0) / np.linalg.norm(arms, axis=1)
    projected = np.linalg.norm(pulled.T @ coef, axis=0) / np.linalg.norm(arms, axis=1)
    expected = (residual > 1e-6) & (projected > 1e-6)
    assert got[0, 0].tolist() == expected.tolist() == [False, False, True, True]
    off = partly_informed_arms(moments, torch.as_tensor(arms)[None, None], torch.tensor([[False]]))
    assert not off.any()
    one_hot = _moments(np.eye(4)[[0, 2, 2]], rng.normal(size=3), 4)[None, None]
    eye = torch.eye(4, dtype=torch.float64)[None, None]
    assert not partly_informed_arms(one_hot, eye, torch.tensor([[True]])).any()


@pytest.mark.parametrize("one_hot", [False, True])
def test_tempered_evidence_widens_the_partly_informed_arms_only(one_hot):
    """skip_evidence_power = eta: on the partly informed arms the skip index takes the model average with weights
    proportional to p_j^eta, computed directly, on the others eta = 1's, and the scale S stays eta = 1's.  On
    one-hot arms no arm is partly informed and the logits are eta = 1's."""
    rng = np.random.default_rng(5)
    d, num_arms, n, sigma, horizon, eta = 3, 4, 6, 0.3, 80, 0.6
    arms = np.eye(3)[[0, 1, 2, 0]] if one_hot else rng.uniform(-1, 1, (num_arms, d))
    actions = np.array([0, 1] * (n // 2))  # two directions of three
    rewards = rng.normal(0.3, 1.0, n)
    fields = {**TINY, "skip_schedule": "moss", "skip_scale": 0.9}
    history = (arms, actions, rewards, horizon, sigma)
    plain, alpha, mean, sd, sig = _untrained_logits(LinearGeneralistConfig(**fields), *history)
    config = LinearGeneralistConfig(**{**fields, "skip_evidence_power": eta})
    logits, *_ = _untrained_logits(config, *history)
    if one_hot:
        torch.testing.assert_close(logits, plain)
        return
    posts, _ = _direct_posteriors(arms, actions, rewards, sigma, TINY["d_max"])
    hot = [Posterior(p.mean, p.sd, eta * p.log_evidence) for p in posts]
    _, hot_mean, hot_sd = model_average(hot, [torch.tensor(True)] * len(hot))
    partly = torch.tensor([False, False, True, True])  # arms 0 and 1 were pulled; 2 and 3 leave their plane
    m, s = torch.where(partly, hot_mean, mean), torch.where(partly, hot_sd, sd)
    u = m + 0.9 * torch.tensor(_slow_moss(s, sig, horizon - n, d), dtype=torch.float64) * s
    torch.testing.assert_close(logits - logits.max(), (alpha * (u - u.max()) / sd.mean()).float(), rtol=1e-4, atol=1e-4)
    assert not torch.allclose(logits, plain)


@pytest.mark.parametrize("one_hot", [False, True])
def test_the_gittins_schedule_reads_the_table_on_orthogonal_arms_and_moss_elsewhere(one_hot):
    """skip_schedule = "gittins": on one-hot arms u_k = m_k + z(sigma^2 / sd_k^2, T - t) sd_k, the table read at
    each arm's effective pulls (no constant); on dense arms the logits are the 'moss' schedule's."""
    rng = np.random.default_rng(9)
    num_arms, n, sigma, horizon = 4, 6, 0.4, 70
    arms = np.eye(num_arms) if one_hot else rng.uniform(-1, 1, (num_arms, 3))
    actions = np.array([0, 1, 2] * (n // 3))
    rewards = rng.normal(0.3, 0.5, n)
    history = (arms, actions, rewards, horizon, sigma)
    fields = {**TINY, "skip_scale": 0.9}
    gittins, alpha, mean, sd, sig = _untrained_logits(
        LinearGeneralistConfig(**fields, skip_schedule="gittins"), *history
    )
    moss, *_ = _untrained_logits(LinearGeneralistConfig(**fields, skip_schedule="moss"), *history)
    assert independent_arms(torch.as_tensor(arms)[None, None], torch.tensor([[True]])).item() == one_hot
    if not one_hot:
        torch.testing.assert_close(gittins, moss)
        return
    width = gaussian_gittins_table(horizon).width((sig / sd).square().numpy(), np.full(num_arms, horizon - n))
    u = mean + torch.as_tensor(width) * sd
    torch.testing.assert_close(
        gittins - gittins.max(), (alpha * (u - u.max()) / sd.mean()).float(), rtol=1e-4, atol=1e-4
    )
    assert not torch.allclose(gittins, moss)
