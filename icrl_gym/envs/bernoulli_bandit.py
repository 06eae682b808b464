"""ICRL-BernoulliBandit-v0: the multi-armed Bernoulli bandit of Section 5."""

from __future__ import annotations

from icrl_gym.envs.bandit_core import BanditArms, BanditPrior, BanditReward, BanditSpec
from icrl_gym.envs.bandit_env import SpecFieldsEnv, SpecFieldsVectorEnv
from icrl_gym.envs.validation import integer_problem, is_integer


def bernoulli_bandit_spec(
    num_arms: int = 5,
    horizon: int = 200,
    prior_low: float = 0.0,
    prior_high: float = 1.0,
    prior: BanditPrior | str = BanditPrior.UNIFORM,
    prior_a: float = 1.0,
    prior_b: float = 1.0,
    dim: int | None = None,
    num_actions: int | None = None,
) -> BanditSpec:
    """The :class:`BanditSpec` of a Bernoulli bandit with one-hot arms e_1..e_K.

    ``dim`` and ``num_actions`` are accepted for symmetry with the linear bandit; both must
    equal ``num_arms`` since the arms are the standard basis vectors.
    """
    problem = integer_problem("num_arms", num_arms)
    if problem is not None:  # checked here: the spec would name its own fields dim and num_actions
        raise ValueError(f"invalid bandit specification: {problem}")
    for name, value in (("dim", dim), ("num_actions", num_actions)):
        if value is not None and not (is_integer(value) and is_integer(num_arms) and int(value) == int(num_arms)):
            raise ValueError(
                f"a Bernoulli bandit has one-hot arms, so {name} must equal num_arms={num_arms}, got {value}"
            )
    return BanditSpec(
        dim=num_arms,
        num_actions=num_arms,
        horizon=horizon,
        arms=BanditArms.ONE_HOT,
        reward=BanditReward.BERNOULLI,
        noise_std=0.0,
        prior=BanditPrior.parse("prior", prior),
        prior_low=prior_low,
        prior_high=prior_high,
        prior_a=prior_a,
        prior_b=prior_b,
    )


class BernoulliBanditEnv(SpecFieldsEnv):
    """Multi-armed Bernoulli bandit; new arm means are drawn from the prior at every reset.

    ## Description
    K arms with means w* ~ Unif([prior_low, prior_high]^K) (default Unif([0,1]^K), K=5,
    T=200 as in Section 5) or, with ``prior="beta"``, w*_k iid Beta(prior_a, prior_b), or, with
    ``prior="skewed"``, the first floor(K/2) means ~ Unif([m, prior_high]) and the others ~
    Unif([prior_low, m]), m the midpoint (``"skewed_reversed"``: the first floor(K/2) low, the others high).
    The action vectors are one-hot e_1..e_K, so this is the linear bandit with <e_k, w*> = w*_k
    and r_t ~ Bern(w*_{a_t}).

    ## Action Space
    ``Discrete(K)``.

    ## Observation Space
    ``Box(0, 1, (K*K,), float32)``: the action set, i.e. the flattened identity matrix (kept
    so every bandit shares one observation format and one transformer embedding).

    ## Reward
    0 or 1.  ``info["regret"]`` is max_k w*_k - w*_{a_t}.

    ## Episode End
    ``terminated=True`` after T pulls.

    ## Arguments
    - ``num_arms`` (5): K.  ``horizon`` (200): T.
    - ``prior`` ('uniform'): 'uniform', means iid Unif([prior_low, prior_high]) with
      0 <= prior_low < prior_high <= 1 (defaults 0, 1); or 'beta', means iid Beta(prior_a, prior_b),
      prior_a, prior_b > 0 (defaults 1, 1); or 'skewed' / 'skewed_reversed', the halves of
      [prior_low, prior_high] split between the first floor(K/2) arms and the others.
    - ``max_memory_gib`` (None): raises the memory limit (default 4 GiB, or ``$ICRL_GYM_MAX_MEMORY_GIB``).

    ``reset(options={"w_star": p})`` replays a given instance.  The reset ``info["model"]`` is the
    :class:`BanditSpec` as a dict (prior kind and parameters, horizon, ...), read by the Bayesian
    algorithms (Beta-Bernoulli Thompson sampling, Bayes-UCB, the Bayes-optimal policy).

    ## References
    Lin, Bai, Mei, "Transformers as Decision Makers", ICLR 2024, Section 5.

    ## Version History
    v0: initial version; Beta prior and ``info["model"]`` added without changing any draw of the
    uniform prior.
    """

    make_spec = staticmethod(bernoulli_bandit_spec)


class BernoulliBanditVectorEnv(SpecFieldsVectorEnv):
    """Natively batched :class:`BernoulliBanditEnv`."""

    make_spec = staticmethod(bernoulli_bandit_spec)
