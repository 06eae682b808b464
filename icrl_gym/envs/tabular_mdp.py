"""ICRL-TabularMDP-v0: finite-horizon tabular MDPs drawn from a Dirichlet prior (Section 4.3)."""

from __future__ import annotations

from typing import Any

from icrl_gym.envs.mdp_core import MDPKind
from icrl_gym.envs.mdp_env import TabularMDPEnv, TabularMDPVectorEnv


class RandomMDPEnv(TabularMDPEnv):
    """Tabular MDP; a new instance is drawn from the prior at every reset.

    ## Description
    S states, A actions, H steps per episode, K episodes per run (T = K H).  Per (h, s, a):
    P_h(. | s, a) ~ Dirichlet(concentration 1_S) and mean reward R_h(s, a) ~ Unif[0, 1]; rewards are
    Bernoulli(R_h(s, a)).  Every episode starts in state 0 (or from mu ~ Dirichlet(1) with
    ``random_start=True``).  Defaults S=5, A=3, H=10, K=20 are small enough to pretrain on a CPU.

    ## Action Space
    ``Discrete(A)``.

    ## Observation Space
    ``Box(0, 1, (S + H,), float32)``: one-hot state, then one-hot step h.

    ## Reward
    0 or 1.  Bayes regret of a run: K V*_1(mu) - sum of rewards, with ``info["v_star"]``.

    ## Episode End
    ``terminated=True`` after K MDP episodes (one Gymnasium episode is one in-context run).

    ## Arguments
    num_states, num_actions, horizon, episodes (integers >= 1), concentration (finite, > 0), random_start,
    stationary.  ``max_memory_gib`` raises the memory limit (default 4 GiB, or ``$ICRL_GYM_MAX_MEMORY_GIB``).
    Invalid values raise a ``ValueError`` (``TypeError`` for a value of the wrong type) naming the field.
    ``reset(options={"P": P, "R": R, "mu": mu})`` replays a given instance.

    ## References
    Lin, Bai, Mei, "Transformers as Decision Makers", ICLR 2024, Section 4.3 and Appendix G.

    ## Version History
    v0: initial version.
    """

    def __init__(self, **kwargs: Any) -> None:
        """``MDPSpec(kind="random", **fields)``; ``max_memory_gib`` and ``render_mode`` as :class:`TabularMDPEnv`'s."""
        super().__init__(kind=MDPKind.RANDOM, **kwargs)


class RandomMDPVectorEnv(TabularMDPVectorEnv):
    """Natively batched :class:`RandomMDPEnv`."""

    def __init__(self, num_envs: int = 1, **kwargs: Any) -> None:
        """``num_envs`` runs of ``MDPSpec(kind="random", **fields)``; the other keywords are the vector options."""
        super().__init__(num_envs, kind=MDPKind.RANDOM, **kwargs)
