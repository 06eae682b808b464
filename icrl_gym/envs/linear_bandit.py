"""ICRL-LinearBandit-v0: the stochastic linear bandit of Section LinUCB-statement and Section experiments."""

from __future__ import annotations

from icrl_gym.envs.bandit_core import BanditSpec
from icrl_gym.envs.bandit_env import BanditEnv, BanditVectorEnv


def linear_bandit_spec(
    dim: int = 5,
    num_actions: int = 10,
    horizon: int = 200,
    noise_std: float = 1.5,
    prior: str = "uniform",
    prior_low: float = 0.0,
    prior_high: float = 1.0,
    prior_var: float = 1.0,
    action_set: str = "fixed",
) -> BanditSpec:
    """The :class:`BanditSpec` of a linear bandit with Gaussian noise (keywords as the env's)."""
    return BanditSpec(
        dim=dim,
        num_actions=num_actions,
        horizon=horizon,
        arms="uniform",
        reward="gaussian",
        noise_std=noise_std,
        prior=prior,
        prior_low=prior_low,
        prior_high=prior_high,
        prior_var=prior_var,
        action_set=action_set,
    )


class LinearBanditEnv(BanditEnv):
    """Stochastic linear bandit; a new instance w* is drawn from the prior at every reset.

    ## Description
    An instance is w* in R^d and an action set A_t = {a_{t,1}, ..., a_{t,A}}, rows iid
    Unif([-1, 1]^d), fixed for the whole run (default) or redrawn at every step.  Pulling arm
    k returns r_t = <a_{t,k}, w*> + eps_t with eps_t ~ N(0, noise_std^2).  Defaults are the
    paper's experiment (Section experiments): d=5, A=10, T=200, w* ~ Unif([0,1]^d), noise 1.5.

    ## Action Space
    ``Discrete(A)``: the index of the arm pulled.

    ## Observation Space
    ``Box(-1, 1, (A*d,), float32)``: the current action set flattened row-major;
    ``obs.reshape(A, d)`` has one arm per row.

    ## Reward
    The noisy reward r_t.  Regret uses ``info``: pseudo-regret sum_t max_k <a_{t,k}, w*> -
    <a_t, w*> is the sum of ``info["regret"]``.

    ## Episode End
    ``terminated=True`` after T pulls (one episode = one in-context run).

    ## Arguments
    dim, num_actions, horizon, noise_std; ``prior`` 'uniform' (w* ~ Unif([prior_low,
    prior_high]^d)) or 'gaussian' (w* ~ N(0, prior_var I_d), Appendix ts_algorithm_formula);
    ``action_set`` 'fixed' or 'per_step'.  ``reset(options={"w_star": w, "action_set": X})``
    replays a given instance.

    ## References
    Lin, Bai, Mei, "Transformers as Decision Makers", ICLR 2024, Sections 4.1 and 5.

    ## Version History
    v0: initial version.
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(linear_bandit_spec(**kwargs))


class LinearBanditVectorEnv(BanditVectorEnv):
    """Natively batched :class:`LinearBanditEnv`: ``num_envs`` runs stepped as arrays."""

    def __init__(self, num_envs: int = 1, **kwargs) -> None:
        super().__init__(num_envs, linear_bandit_spec(**kwargs))
