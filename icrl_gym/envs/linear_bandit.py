"""ICRL-LinearBandit-v0: the stochastic linear bandit of Section 4.1 and Section 5."""

from __future__ import annotations

from icrl_gym.envs.bandit_core import ActionSet, BanditArms, BanditPrior, BanditReward, BanditSpec
from icrl_gym.envs.bandit_env import SpecFieldsEnv, SpecFieldsVectorEnv


def linear_bandit_spec(
    dim: int = 5,
    num_actions: int = 10,
    horizon: int = 200,
    noise_std: float = 1.5,
    prior: BanditPrior | str = BanditPrior.UNIFORM,
    prior_low: float = 0.0,
    prior_high: float = 1.0,
    prior_var: float = 1.0,
    action_set: ActionSet | str = ActionSet.FIXED,
    arms: BanditArms | str = BanditArms.UNIFORM,
    prior_a: float = 1.0,
    prior_b: float = 1.0,
    noise_high: float | None = None,
    noise_known: bool = True,
) -> BanditSpec:
    """The :class:`BanditSpec` of a linear bandit with Gaussian noise (keywords as the env's)."""
    return BanditSpec(
        dim=dim,
        num_actions=num_actions,
        horizon=horizon,
        arms=BanditArms.parse("arms", arms),
        reward=BanditReward.GAUSSIAN,
        noise_std=noise_std,
        prior=BanditPrior.parse("prior", prior),
        prior_low=prior_low,
        prior_high=prior_high,
        prior_var=prior_var,
        action_set=ActionSet.parse("action_set", action_set),
        prior_a=prior_a,
        prior_b=prior_b,
        noise_high=noise_high,
        noise_known=noise_known,
    )


class LinearBanditEnv(SpecFieldsEnv):
    """Stochastic linear bandit; a new instance w* is drawn from the prior at every reset.

    ## Description
    An instance is w* in R^d and an action set A_t = {a_{t,1}, ..., a_{t,A}}, rows iid
    Unif([-1, 1]^d) (or N(0, I_d / d) with ``arms="gaussian"``), fixed for the whole run
    (default) or redrawn at every step.  Pulling arm k returns r_t = <a_{t,k}, w*> + eps_t with
    eps_t ~ N(0, noise_std^2).  Defaults are the paper's experiment (Section 5): d=5,
    A=10, T=200, w* ~ Unif([0,1]^d), noise 1.5.

    ## Action Space
    ``Discrete(A)``: the index of the arm pulled.

    ## Observation Space
    ``Box(-1, 1, (A*d,), float32)`` (unbounded ``Box(-inf, inf)`` for Gaussian arms): the current
    action set flattened row-major; ``obs.reshape(A, d)`` has one arm per row.

    ## Reward
    The noisy reward r_t.  Regret uses ``info``: pseudo-regret sum_t max_k <a_{t,k}, w*> -
    <a_t, w*> is the sum of ``info["regret"]``.

    ## Episode End
    ``terminated=True`` after T pulls (one episode = one in-context run).

    ## Arguments
    - ``dim`` (5), ``num_actions`` (10), ``horizon`` (200), ``noise_std`` (1.5, finite, >= 0).
    - ``prior`` ('uniform'): 'uniform', w* ~ Unif([prior_low, prior_high]^d) (defaults 0, 1);
      'gaussian', w* ~ N(0, prior_var I_d) (Appendix F.1); or 'beta', coordinates
      iid Beta(prior_a, prior_b); 'sphere', w* uniform on the unit sphere; 'one_coordinate', w* = s e_i
      with i uniform and s ~ N(0, prior_var).
      A prior family ('hierarchical', 'box', 'sparse', 'direction', or 'family': one of them per instance)
      draws its hyperparameters per instance (:mod:`icrl_gym.envs.prior_family`).
    - ``arms`` ('uniform'): rows of the action sets iid Unif([-1, 1]^d), 'gaussian', iid N(0, I_d / d),
      'sphere', uniform on the unit sphere, or 'one_hot' (A = d: the Gaussian multi-armed bandit).
    - ``noise_high`` (None): sigma log-uniform in [noise_std, noise_high] per instance; ``noise_known``
      (True): whether agents may read sigma from the reset info (False: play as if it were unknown).
    - ``action_set`` ('fixed'): one action set per run, or 'per_step', a fresh one every step.

    - ``max_memory_gib`` (None): raises the memory limit (default 4 GiB, or ``$ICRL_GYM_MAX_MEMORY_GIB``);
      sizes whose estimated footprint exceeds it are refused before anything is allocated.

    Invalid values raise a ``ValueError`` naming the field, the value and what is allowed.  Integer
    sizes must be integers; scale parameters (prior bounds, variances, noise) at most 1e100 in magnitude.
    ``reset(options={"w_star": w, "action_set": X})`` replays a given instance.  The reset
    ``info["model"]`` is the :class:`BanditSpec` as a dict (noise_std, prior and its parameters,
    ...): Thompson sampling and Bayes-UCB read their noise level and prior from it.

    ## References
    Lin, Bai, Mei, "Transformers as Decision Makers", ICLR 2024, Sections 4.1 and 5.

    ## Version History
    v0: initial version; Gaussian arms, the Beta prior and ``info["model"]`` added without changing
    any draw of the existing settings.
    """

    make_spec = staticmethod(linear_bandit_spec)


class LinearBanditVectorEnv(SpecFieldsVectorEnv):
    """Natively batched :class:`LinearBanditEnv`: ``num_envs`` runs stepped as arrays."""

    make_spec = staticmethod(linear_bandit_spec)
