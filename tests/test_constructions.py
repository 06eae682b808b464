import numpy as np
import torch

from icrl_gym.data.trajectories import collect_trajectories
from icrl_gym.envs import linear_bandit_spec
from icrl_gym.models.constructions import exact_ridge_estimates, read_ridge_estimates, ridge_transformer

T = 12


def _data():
    data = collect_trajectories(linear_bandit_spec(horizon=T), "uniform", 6, seed=0)
    sets = torch.tensor(np.ascontiguousarray(data.step_action_sets()), dtype=torch.float64)
    return sets, torch.tensor(data.actions.astype(np.int64)), torch.tensor(data.rewards, dtype=torch.float64)


def _numpy_descent(sets, actions, rewards, layers, lam, eta, beta=None):
    """GD (beta None) or AGD on L_t(w) = |r - A w|^2 / (2(2t-1)) + lam |w|^2 / (2(2t-1)), from zero."""
    a = np.take_along_axis(sets.numpy(), actions.numpy()[..., None, None], 2)[:, :, 0]  # (B, T, d)
    r = rewards.numpy()
    B, _, d = a.shape
    out = np.zeros((B, T, d))
    for t in range(1, T + 1):
        A, y = a[:, : t - 1], r[:, : t - 1]

        def grad(w, A=A, y=y, t=t):
            return (np.einsum("bjd,bj->bd", A, np.einsum("bjd,bd->bj", A, w) - y) + lam * w) / (2 * t - 1)

        w = np.zeros((B, d))
        w_b, v = np.zeros((B, d)), np.zeros((B, d))
        for _ in range(layers):
            if beta is None:
                w = w - eta * grad(w)
            else:
                w = v - eta * grad(v)
                v, w_b = w + beta * (w - w_b), w
        out[:, t - 1] = w
    return out


def test_gd_construction_is_gradient_descent():
    sets, actions, rewards = _data()
    model = ridge_transformer(5, 10, T, n_layers=7, lam=0.5)
    ours = read_ridge_estimates(model, sets, actions, rewards).numpy()
    ref = _numpy_descent(sets, actions, rewards, 7, 0.5, model.construction["eta"])
    np.testing.assert_allclose(ours, ref, atol=1e-9)


def test_agd_construction_is_accelerated_gradient_descent():
    sets, actions, rewards = _data()
    model = ridge_transformer(5, 10, T, n_layers=9, accelerated=True)
    c = model.construction
    ours = read_ridge_estimates(model, sets, actions, rewards).numpy()
    ref = _numpy_descent(sets, actions, rewards, 9, 1.0, c["eta"], beta=c["beta"])
    np.testing.assert_allclose(ours, ref, atol=1e-9)


def test_error_obeys_the_lemma_rate_and_agd_is_faster():
    sets, actions, rewards = _data()
    exact = exact_ridge_estimates(sets, actions, rewards, 1.0).numpy()

    def errors(layers, accelerated):
        model = ridge_transformer(5, 10, T, n_layers=layers, accelerated=accelerated)
        est = read_ridge_estimates(model, sets, actions, rewards).numpy()
        return np.linalg.norm(est - exact, axis=-1), model.construction["kappa"]

    norms = np.linalg.norm(exact, axis=-1)
    previous = np.inf
    for layers in (10, 40, 160):
        err, kappa = errors(layers, False)
        # gradient descent with eta = 1/(B_a^2 + lambda) contracts by at least (1 - 1/kappa) per layer
        assert np.all(err <= (1 - 1 / kappa) ** layers * norms + 1e-12)
        assert err.max() < previous
        previous = err.max()
    agd_40, _ = errors(40, True)
    gd_160, _ = errors(160, False)
    assert agd_40.max() < gd_160.max()  # a quarter of the layers already does better
    assert errors(160, True)[0].max() < 1e-5
