"""Probes of the agents and the training set-up: repeated ``act``, impossible Bayes priors, fine-tuning
beyond the playable range, a stray ``WORLD_SIZE``.

Each probe tries one case a new user or an adversary would, and asserts a clear error naming the
problem or a case handled correctly.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from agents import make_agent
from icrl_gym.algorithm import Agent, MDPAgent
from tests.reliability import framework as rp
from tests.reliability.framework import Outcome, Section, Verdict, probe

# ===================================================================================== learned agents
rp.surface("Learned agents: a second act() before update()")

LEARNED = {
    "bernoulli-generalist": ("generalist", "ICRL-BernoulliBandit-v0"),
    "linear-generalist-v1": ("linear_generalist", "ICRL-LinearBandit-v0"),
    "linear-bandit-ad-linucb": ("transformer", "ICRL-LinearBandit-v0"),
    "tabular-mdp-generalist": ("mdp_generalist", "ICRL-TabularMDP-v0"),
    "tabular-mdp-dpt-psrl-uniform": ("mdp_transformer", "ICRL-TabularMDP-v0"),
}
"""Shipped checkpoint -> (agent name, environment): one of every learned adapter."""

WARM_UP = 4
"""Steps played (act, then update) before the probed step, so that the policy depends on the observation."""


def _played(ckpt: str, steps: int = WARM_UP) -> tuple[Agent[Any], Any, np.ndarray]:
    """A greedy agent of ``ckpt`` (argmax: its answer is a function of the history) after ``steps`` steps of one run."""
    name, env_id = LEARNED[ckpt]
    env = gym.make(env_id).unwrapped
    obs, info = env.reset(seed=0)
    agent = make_agent({"name": name, "checkpoint": ckpt, "greedy": True}, seed=0)
    agent.reset(info)
    for _ in range(steps):
        action = agent.act(obs)
        obs, reward, *_ = env.step(action)
        agent.update(action, reward)
    return agent, env, obs


def _other_observations(agent: Agent[Any], obs: np.ndarray) -> list[np.ndarray]:
    """Other observations of the same step: another state at the same h (an MDP), the arms permuted (a bandit)."""
    if isinstance(agent, MDPAgent):
        S, state = agent.num_states, int(np.argmax(obs[: agent.num_states]))
        others = []
        for other in range(S):
            if other != state:
                moved = obs.copy()
                moved[:S] = 0.0
                moved[other] = 1.0
                others.append(moved)
        return others
    arms = np.asarray(obs).reshape(agent.num_actions, -1)
    return [np.roll(arms, k, axis=0).reshape(np.shape(obs)) for k in range(1, agent.num_actions)]


def _answer(agent: Agent[Any], obs: np.ndarray) -> Any:
    """``agent.act(obs)``, or the exception it raised."""
    try:
        return agent.act(obs)
    except Exception as err:
        return err


def _second_act(ckpt: str) -> Outcome:
    """``act(o1)``, then ``act(o2)`` without ``update``: o2's answer must be a fresh agent's, or a clear refusal.

    The fresh agent is a copy of the agent taken before ``act(o1)`` (the same history), given o2
    directly; o2 is an observation whose fresh answer differs from the first (else the case would
    not tell reuse from recomputation).
    """
    agent, _, obs = _played(ckpt)
    twin = copy.deepcopy(agent)
    first = agent.act(obs)
    for other in _other_observations(agent, obs):
        want = _answer(copy.deepcopy(twin), other)
        if isinstance(want, Exception) or want != first:
            break
    else:
        return Outcome(Verdict.PROBLEM, f"probe set-up: every other observation has the first answer {first}")
    try:
        got = agent.act(other)
    except Exception as err:
        if isinstance(want, Exception) and type(err) is type(want) and str(err) == str(want):
            return Outcome(Verdict.CLEAR, f"refused as a fresh agent: {rp.described(err)}")
        return rp.classify_error(err, ("update()", "another observation"), (RuntimeError,))
    if isinstance(want, Exception):
        return Outcome(Verdict.PROBLEM, f"answered {got} where a fresh agent refuses: {rp.described(want)}")
    if got != want:
        return Outcome(Verdict.PROBLEM, f"answered {got} (the first answer was {first}; a fresh agent plays {want})")
    return Outcome(Verdict.HANDLED, f"answered {got} for the new observation, as a fresh agent")


for _ckpt, (_name, _) in LEARNED.items():
    _what = "another state at the same step" if _name.startswith("mdp") else "permuted arms"
    rp.add_probe(
        f"{_ckpt} act() twice before update(), on {_what}", Section.SILENT, lambda tmp, c=_ckpt: _second_act(c)
    )


def _stale_state(ckpt: str, acted_on_next: bool) -> Any:
    """Act on a run's first state again after ``update`` (with ``acted_on_next``: after acting on the next one too)."""
    agent, env, obs = _played(ckpt, steps=0)
    action = agent.act(obs)
    following, reward, *_ = env.step(action)
    agent.update(action, reward)
    if acted_on_next:
        agent.act(following)
    return agent.act(obs)


@probe("MDP agents act() on a stale state after update()", Section.SILENT)
def _stale_states(tmp: Path) -> Outcome:
    cases = {
        f"{ckpt}{' (after acting on the next state)' if next_too else ''}": (
            lambda ckpt=ckpt, next_too=next_too: _stale_state(ckpt, next_too)
        )
        for ckpt, (name, _) in LEARNED.items()
        if name.startswith("mdp")
        for next_too in (False, True)
    }
    return rp.refused_by_each("stale observations", cases, "h=0", "h=1", "update()", kinds=(ValueError,))


# ===================================================================================== Bayes-optimal priors
rp.surface("Bernoulli Bayes-optimal agent: impossible priors")


def _bayes(**kwargs: Any) -> Any:
    """The agent built from a ``config()``-style specification (the way benchmark files give it)."""
    return make_agent({"name": "bernoulli_bayes_optimal", **kwargs})


def _prior_cases(values: tuple[float, ...]) -> dict[str, tuple[Callable[[], Any], tuple[str, ...]]]:
    """prior_a = v (prior_b = 1), then prior_b = v (prior_a = 1), for every v: each must name its argument and v."""
    cases = {}
    for value in values:
        for name, other in (("prior_a", "prior_b"), ("prior_b", "prior_a")):
            spec = {name: value, other: 1.0}
            cases[f"{name}={value}"] = (lambda spec=spec: _bayes(**spec), (name, str(value)))
    return cases


@probe("bernoulli_bayes_optimal with prior_a or prior_b NaN or infinite", Section.SILENT)
def _bayes_nonfinite_prior(tmp: Path) -> Outcome:
    return rp.refused_naming("priors", _prior_cases((math.nan, math.inf)), kinds=(ValueError,))


@probe("bernoulli_bayes_optimal with prior_a or prior_b 0 or negative", Section.SILENT)
def _bayes_nonpositive_prior(tmp: Path) -> Outcome:
    return rp.refused_naming("priors", _prior_cases((0.0, -2.0)), kinds=(ValueError,))


@probe("bernoulli_bayes_optimal with a hyperprior entry NaN, infinite, 0 or negative", Section.SILENT)
def _bayes_bad_hyperprior_entry(tmp: Path) -> Outcome:
    cases = {
        f"hyperprior={family}": (lambda family=family: _bayes(hyperprior=family), ("hyperprior[1]", str(value)))
        for value in (math.inf, math.nan, 0.0, -1.0)
        for family in ([[1.0, 1.0], [2.0, value]],)
    }
    return rp.refused_naming("hyperpriors", cases, kinds=(ValueError,))


@probe("bernoulli_bayes_optimal with hyperprior weights NaN, infinite, negative or all 0", Section.SILENT)
def _bayes_bad_weights(tmp: Path) -> Outcome:
    cases = {
        f"hyperprior_weights={weights}": (
            lambda weights=weights: _bayes(hyperprior=[[1.0, 1.0], [2.0, 2.0]], hyperprior_weights=weights),
            ("hyperprior_weights", rp.short(str(weights[-1]))),
        )
        for weights in ([1.0, math.nan], [1.0, math.inf], [1.0, -0.5], [0.0, 0.0])
    }
    return rp.refused_naming("weights", cases, kinds=(ValueError,))


@probe("bernoulli_bayes_optimal with a hyperprior of the wrong shape", Section.CRASH)
def _bayes_hyperprior_shape(tmp: Path) -> Outcome:
    cases = {
        f"hyperprior={family!r}": (lambda family=family: _bayes(hyperprior=family), ("hyperprior", "[a, b] pair"))
        for family in ([1.0, 2.0], [[1.0, 2.0, 3.0]], [[1.0]], [], 3.0)
    }
    cases["2 weights for 3 pairs"] = (
        lambda: _bayes(hyperprior=[[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]], hyperprior_weights=[0.5, 0.5]),
        ("hyperprior_weights", "3 numbers"),
    )
    return rp.refused_naming("shapes", cases, kinds=(ValueError,))


# ===================================================================================== training set-up
rp.surface("Training set-up: fine-tuning sizes, torchrun's variables")


@probe("fine-tune tabular-mdp-generalist on S=200 (it plays S <= 144)", Section.LOST)
def _finetune_beyond_playable(tmp: Path) -> Outcome:
    from icrl_gym.training import finetune as ft
    from icrl_gym.training import trainer

    def run(num_states: int) -> Any:
        env = {"num_states": num_states, "num_actions": 3, "horizon": 5, "episodes": 2}
        cfg = ft.FinetuneConfig(
            base="tabular-mdp-generalist", env=env, out_dir=str(tmp / f"run-{num_states}"), iterations=1
        )
        with rp.replaced(trainer, "resume", rp.never_started):  # the run's first read: the check must come before it
            return ft.finetune(cfg, echo=False)

    try:
        run(20)  # within the range: the check lets it through to the work
    except rp.Accepted:
        pass
    except Exception as err:
        return Outcome(Verdict.PROBLEM, f"an in-range env (S=20) was refused: {rp.described(err)}")
    outcome = rp.refused(lambda: run(200), "num_states=200", "[2, 144]", kinds=(ValueError,))
    left = sorted(p.name for p in tmp.iterdir())
    if outcome.verdict is not Verdict.PROBLEM and left:
        return Outcome(Verdict.PROBLEM, f"{outcome.behaviour}; and left {left} behind")
    return outcome


@contextlib.contextmanager
def torchrun_environment(**variables: str) -> Iterator[None]:
    """``WORLD_SIZE``, ``RANK`` and ``LOCAL_RANK`` set to ``variables`` (the others unset) inside the block."""
    names = ("WORLD_SIZE", "RANK", "LOCAL_RANK")
    saved = {name: os.environ.get(name) for name in names}
    for name in names:
        os.environ.pop(name, None)
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _join(**variables: str) -> Any:
    """Join torchrun's process group (CPU) as a trainer does, with the variables ``variables``."""
    import torch

    from icrl_gym.training.distributed import init_distributed

    with torchrun_environment(**variables):
        return init_distributed(torch.device("cpu"))[0]


@probe("WORLD_SIZE=2 without RANK (and WORLD_SIZE=1 without RANK)", Section.CRASH)
def _world_size_without_rank(tmp: Path) -> Outcome:
    outcome = rp.refused(lambda: _join(WORLD_SIZE="2"), "WORLD_SIZE", "RANK", "torchrun", kinds=(ValueError,))
    if outcome.verdict is Verdict.PROBLEM:
        return outcome
    try:
        single = _join(WORLD_SIZE="1")
    except Exception as err:
        return Outcome(Verdict.PROBLEM, f"WORLD_SIZE=1: raw {rp.described(err)}")
    if single.enabled or single.rank != 0:
        return Outcome(Verdict.PROBLEM, f"WORLD_SIZE=1 without RANK gave {single}, not one process")
    return Outcome(Verdict.CLEAR, f"{outcome.behaviour} (WORLD_SIZE=1 alone: one process)")


@probe("WORLD_SIZE not an integer ('two', '', '2.5')", Section.CRASH)
def _world_size_not_integer(tmp: Path) -> Outcome:
    cases = {repr(value): (lambda value=value: _join(WORLD_SIZE=value, RANK="0")) for value in ("two", "", "2.5")}
    return rp.refused_by_each("values", cases, "WORLD_SIZE", "integer", "torchrun", kinds=(ValueError,))
