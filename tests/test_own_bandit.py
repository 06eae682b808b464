"""The README's "Your own bandit" loops run verbatim, for learned agents and experts, with no environment."""

import re
from pathlib import Path

import numpy as np
import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _loops() -> list[str]:
    """The six-line loops of the README section: its import line and the lines from ``agent = ...`` on.

    The lines between them simulate a bandit for the documentation test; here the test brings its own.
    """
    section = README.read_text().split("### Your own bandit", 1)[1].split("\n### ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    return [
        re.search(r"^from agents import .*$", b, re.M).group(0) + "\n" + b[b.index("\nagent = ") + 1 :] for b in blocks
    ]


def _run(code: str, agent_line: str | None, namespace: dict) -> dict:
    if agent_line is not None:  # the alternative the comment names, in place of the agent line
        code = re.sub(r"^agent = .*$", agent_line, code, count=1, flags=re.M)
    exec(compile(code, str(README), "exec"), namespace)
    return namespace


def test_the_readme_has_two_six_line_loops():
    loops = _loops()
    assert len(loops) == 2 and all(len(code.strip().splitlines()) == 6 for code in loops)


@pytest.mark.parametrize("agent_line", [None, 'agent = make_agent("ucb")', 'agent = make_agent("gittins")'])
def test_the_multi_armed_loop(agent_line):
    means = np.array([0.1, 0.2, 0.3, 0.4, 0.9])
    rng = np.random.default_rng(0)
    pulls = []

    def pull(arm):
        assert isinstance(arm, int) and 0 <= arm < 5
        pulls.append(arm)
        return float(rng.random() < means[arm])

    _run(_loops()[0], agent_line, {"pull": pull})
    assert len(pulls) == 200
    assert np.mean(np.array(pulls[100:]) == 4) > 0.6  # it found the best arm


@pytest.mark.parametrize("agent_line", [None, 'agent = make_agent("linucb")'])
def test_the_linear_loop(agent_line):
    rng = np.random.default_rng(1)
    arms = rng.uniform(-1, 1, size=(10, 5))
    w = rng.uniform(0, 1, size=5)
    best = int(np.argmax(arms @ w))
    chosen = []

    def pull(x):
        assert x.shape == (5,)
        chosen.append(int(np.flatnonzero((arms == x).all(axis=1))[0]))
        return float(x @ w + 0.5 * rng.standard_normal())

    _run(_loops()[1], agent_line, {"pull": pull, "arms": arms})
    assert len(chosen) == 200
    means = arms @ w
    regret = (means[best] - means[chosen]).sum()
    assert regret < 0.5 * 200 * (means[best] - means.mean())  # well below a uniform choice


def test_act_without_an_observation_needs_a_multi_armed_bandit():
    from agents import make_agent

    agent = make_agent("linucb")
    agent.reset(dim=3, num_actions=4, horizon=10)
    with pytest.raises(TypeError, match=r"needs the action set: an \(A, d\) array"):
        agent.act()
    with pytest.raises(ValueError, match="num_arms=3 is a K-armed bandit .* but dim=4"):
        agent.reset(num_arms=3, dim=4)
