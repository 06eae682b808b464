"""The algorithm contract: the one interface every bandit and every tabular-MDP algorithm implements.

:class:`Agent` owns everything the two kinds share: the generator, the batch of B runs (a single
run is a batch of one, and a single environment's ``int`` actions and (A,) policies are unwrapped
from it), ``reset(info)``, ``act(obs)``, ``policy(obs)``, ``update(action, reward)`` and
``config()``.  The algorithms themselves live in ``agents/`` and are built by name through
:mod:`icrl_gym.registry`; nothing here knows any of them.  A plain Gymnasium loop drives either kind::

    obs, info = env.reset(seed=0)
    agent.reset(info)
    for _ in range(T):  # for an MDP: T = K H steps, or until terminated
        a = agent.act(obs)
        obs, r, terminated, truncated, info = env.step(a)
        agent.update(a, r)

``info`` is what the environment's ``reset`` returned: a single env gives B = 1, a vector env
B = num_envs; ``info["model"]`` (the environment's spec as a dict) is read once, by
:func:`~icrl_gym.envs.env_model.read_env_model`, and kept typed as ``env_model``.  The
two kinds differ only in how an observation is decoded and in the batched hooks a subclass implements.

Bandits
-------
An algorithm (Section 2 of the paper) maps the history D_{t-1} and the current action set
A_t to a distribution over arms.  :class:`BanditAgent` decodes an observation to the action sets
(B, A, d) and holds the history of B independent runs as incremental statistics.  ``policy(obs)``
is Alg(. | D_{t-1}, A_t), shape (A,) or (B, A), in closed form where the algorithm has one, by
Monte-Carlo for Thompson sampling.  Collectors skip the decoding with ``act_batch``,
``policy_batch`` and ``update_batch`` on (B, A, d) arrays.  Subclasses implement ``_reset``,
``_policy`` and ``_update``; ``_act`` defaults to sampling from ``_policy`` and is overridden by
deterministic (argmax) algorithms.  ``reset`` also takes the fields ``batch_size``, ``dim``,
``num_actions``, ``horizon``, ``noise_std`` and ``w_star`` as keywords (they replace those of
``info``; an algorithm reads those it uses), and
``num_arms=K`` for a K-armed bandit (arms e_1..e_K, d = A = K), so that a bandit with no
environment is a plain loop::

    agent.reset(num_arms=5, horizon=200)
    for t in range(200):
        arm = agent.act()              # no observation: the arms are e_1..e_5
        agent.update(arm, reward_of(arm))

and a linear bandit takes its (A, d) arms at every step: ``agent.act(arms)``.

Tabular MDPs (Section 4.3)
--------------------------------------------
:class:`MDPAgent` decodes an observation (the one-hot state followed by the one-hot step h) to
(states (B,), h); a transition (h, s, a, r, s') is complete when the next observation arrives (or
the episode ends, after step H, where the paper's counts record no next state).  The batched core
works on arrays: ``act_batch(states, h)``, ``policy_batch(states, h)`` and
``update_batch(states, h, actions, rewards, next_states)`` with ``next_states = -1`` after step H.
Subclasses implement ``_reset``, ``_begin_episode`` (called at h = 0, e.g. to re-plan) and the
per-step hooks.  ``episode`` counts the episodes started.

Validation
----------
Every input is checked here, once for all algorithms, by the shared validators of
:mod:`icrl_gym.envs.validation`: the sizes and the instance read at ``reset``; observations (finite
action sets of shape (A, d); a one-hot state followed by a one-hot step); the actions fed back
(integer indices in [0, A)); the rewards (finite, and 0 or 1 or inside [0, 1] where the model says
so: ``binary_rewards``, ``reward_bounds``, MDP rewards lie in [0, 1]); the batched arrays of
``act_batch``, ``policy_batch`` and ``update_batch``; and, before anything is allocated, the memory
the statistics of B runs will take (``_memory_bytes``, refused above the limit: the attribute
``max_memory_gib``, else the environment variable ``ICRL_GYM_MAX_MEMORY_GIB``).  A bad input raises
``ValueError`` or ``TypeError`` naming it, and leaves the statistics untouched; a policy is never
passed on with a NaN.
"""

from icrl_gym.agent_base import (
    Agent,
    ObsT,
    child_rng,
    first_argmax,
    logits_action,
    one_hot,
    resolve_horizon,
    sample_categorical,
    softmax_rows,
    uniform_over_maximisers,
)
from icrl_gym.bandit_agent import BanditAgent
from icrl_gym.mdp_agent import MDPAgent, MDPObservation

__all__ = [
    "Agent",
    "BanditAgent",
    "MDPAgent",
    "MDPObservation",
    "ObsT",
    "child_rng",
    "first_argmax",
    "logits_action",
    "one_hot",
    "resolve_horizon",
    "sample_categorical",
    "softmax_rows",
    "uniform_over_maximisers",
]
