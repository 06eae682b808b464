"""Rollout throughput of the generalist transformers next to the shipped paper-setting models.

Each pair plays the same environment, one batch of ``instances`` runs of T steps, greedy, with
every model's key/value cache (:func:`benchmarks.experiments.grid.run.total_regret`, which also steps
the vector environment, so the figure is what a user's rollout gets):

- Bernoulli K=5, T=200: ``bernoulli-generalist`` next to ``bernoulli-ad-ucb`` (the paper's setting);
- linear d=5, A=10, T=200, sigma=1.5: ``linear-generalist`` next to ``linear-bandit-ad-linucb``;
- tabular MDP (S, A, H, K) = (5, 3, 10, 20): ``tabular-mdp-generalist`` (greedy) next to the fixed-size
  ``tabular-mdp-dpt-psrl-uniform`` (:func:`icrl_gym.data.mdp_rollout.rollout_mdp`; a run has K H steps).

The models of a pair take turns over ``repeats`` timed rounds after one warm-up round
(:func:`benchmarks.speed.timing.interleaved`), so the machine's load falls on both alike; medians are
printed as env-steps/s (instances x steps per run / seconds) and the ratio generalist / paper model.  A model
that is not shipped (or not given as ``bernoulli``/``linear``/``mdp``, e.g. ``none``) is reported as missing,
and a pair whose generalist is missing is not timed.

    OMP_NUM_THREADS=1 python -m benchmarks.speed.generalist_throughput [CONFIG.json] [--set instances=1000 threads=1]
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.experiments.grid.run import total_regret
from benchmarks.experiments.models import model_available
from benchmarks.speed.timing import TimedConfig, interleaved
from icrl_gym.config import POSITIVE_INT, checked
from icrl_gym.envs import BanditSpec, MDPSpec, bernoulli_bandit_spec, linear_bandit_spec


@dataclass
class GeneralistThroughputConfig(TimedConfig):
    """What :func:`main` measures (and the rounds and threads of :class:`TimedConfig`)."""

    repeats: int = checked(15, POSITIVE_INT)
    """Timed rounds after one warm-up round.  Not 3: on a 2-core machine a paper model's round can take up to 1.5x
    another's in the same process (the linear pair's paper model at 32,000-50,000 env-steps/s, its generalist within
    5%), so a median of 3 rounds moved the linear ratio between 0.44x and 0.69x from run to run."""
    instances: int = checked(1000, POSITIVE_INT)
    """Runs rolled out in one batch."""
    bernoulli: str = "bernoulli-generalist"
    """Bernoulli generalist checkpoint (a shipped name or a path)."""
    linear: str = "linear-generalist"
    """Linear generalist checkpoint (a shipped name or a path)."""
    mdp: str = "tabular-mdp-generalist"
    """MDP generalist checkpoint (a shipped name or a path)."""


def pairs(bernoulli: str, linear: str, mdp: str) -> list[tuple[str, BanditSpec | MDPSpec, dict[str, dict[str, Any]]]]:
    """(setting, environment, {row: agent spec}) of the three comparisons."""
    return [
        (
            "Bernoulli K=5, T=200",
            bernoulli_bandit_spec(5, 200),
            {
                "generalist": {"name": "generalist", "checkpoint": bernoulli, "greedy": True},
                "paper model (bernoulli-ad-ucb)": {"name": "transformer", "checkpoint": "bernoulli-ad-ucb"},
            },
        ),
        (
            "linear d=5, A=10, T=200, sigma=1.5",
            linear_bandit_spec(5, 10, 200, 1.5),
            {
                "generalist": {"name": "linear_generalist", "checkpoint": linear, "greedy": True},
                "paper model (linear-bandit-ad-linucb)": {
                    "name": "transformer",
                    "checkpoint": "linear-bandit-ad-linucb",
                },
            },
        ),
        (
            "tabular MDP S=5, A=3, H=10, K=20",
            MDPSpec(),
            {
                "generalist": {"name": "mdp_generalist", "checkpoint": mdp, "greedy": True},
                "paper model (tabular-mdp-dpt-psrl-uniform)": {
                    "name": "mdp_transformer",
                    "checkpoint": "tabular-mdp-dpt-psrl-uniform",
                },
            },
        ),
    ]


def measure(instances: int, repeats: int, bernoulli: str, linear: str, mdp: str) -> list[dict[str, Any]]:
    """Median env-steps/s of every available row of the three pairs."""
    rows = []
    for setting, spec, agents in pairs(bernoulli, linear, mdp):
        available = {label: model_available(a["checkpoint"]) for label, a in agents.items()}
        # without its generalist the paper model has nothing to be compared with: the pair is not timed
        timed = [label for label in agents if available[label] and available["generalist"]]
        tasks = {label: (lambda a=agents[label], s=spec: total_regret(s, a, instances, seed=0)) for label in timed}
        steps = spec.total_steps if isinstance(spec, MDPSpec) else spec.horizon
        times = interleaved(tasks, repeats)
        for label, agent in agents.items():
            if label not in timed:
                missing = not available[label]
                rows.append({"setting": setting, "model": label, "checkpoint": agent["checkpoint"], "missing": missing})
                continue
            seconds = float(np.median(times[label]))
            rows.append(
                {
                    "setting": setting,
                    "model": label,
                    "checkpoint": agent["checkpoint"],
                    "seconds": seconds,
                    "env_steps_per_s": instances * steps / seconds,
                }
            )
    return rows


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Command line: measure, print the Markdown table and the rows as JSON."""
    args = GeneralistThroughputConfig.from_command_line(argv)
    rows = measure(args.instances, args.repeats, args.bernoulli, args.linear, args.mdp)
    print(f"{args.instances} instances, {args.threads} thread(s), medians of {args.repeats} interleaved rounds\n")
    print("| setting | model | env-steps/s | ratio to the paper model |\n|---|---|---|---|")
    for setting in dict.fromkeys(r["setting"] for r in rows):
        group = [r for r in rows if r["setting"] == setting]
        base = next((r for r in group if r["model"].startswith("paper") and "seconds" in r), None)
        for r in group:
            if "seconds" not in r:
                why = f"missing: no checkpoint {r['checkpoint']!r}" if r["missing"] else "not timed: no generalist"
                print(f"| {setting} | {r['model']} | {why} | |")
                continue
            ratio = f"{base['seconds'] / r['seconds']:.2f}x" if base is not None else ""
            print(f"| {setting} | {r['model']} | {r['env_steps_per_s']:,.0f} | {ratio} |")
    print(json.dumps(rows))
    return rows


if __name__ == "__main__":
    main()
