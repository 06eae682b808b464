"""Acceptance numbers of the shipped tabular-MDP transformers.

For every shipped MDP model: Bayes regret over the K episodes (sum of V* - return) on fresh
instances (seed 10**7; training uses seeds 10**6 * s + c), next to its reduced expert and the
baselines on the same instances (common random numbers), the ratio TF / expert, the paired
difference per instance, and the mean return of every episode next to the optimal value V*.

The reduced expert of algorithm distillation is the context algorithm (soft UCB-VI); that of
DPT is posterior sampling, i.e. PSRL under the training prior (DarkRoom: its uniform goal prior).
DPT models are also set against the Bayes-optimal DPT policy, P(a* = a | D) of that posterior,
sampled and greedy (:class:`agents.mdp.posterior_dpt.PosteriorOptimalAction`): the policy a perfect
fit of the DPT loss would be.

    python -m benchmarks.evaluations.mdp_pretrained_eval [--runs 2000] [--models a,b]
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np

from agents import make_agent
from agents.learned.mdp_transformer import MDPTransformerAgent
from benchmarks.evaluations.pretrained_eval import EVAL_SEED, mean_se, models_parser, paired_difference, selected_models
from icrl_gym.checkpoint import CheckpointKind
from icrl_gym.data.mdp_rollout import rollout_mdp
from icrl_gym.data.pipeline import build_agent
from icrl_gym.envs import MDPKind, MDPSpec

BATCH = 500
"""Runs per batch for every algorithm (the instances a seed draws depend on it)."""


def posterior_sampling(spec: MDPSpec) -> dict:
    """PSRL under the prior of ``spec``: the DarkRoom one (known moves, uniform goal) or the Dirichlet-Beta one."""
    return {"name": "dark_room_psrl"} if spec.kind is MDPKind.DARK_ROOM else {"name": "psrl"}


def reduced_expert(meta: dict) -> dict:
    """The algorithm an MDP model trained with ``meta['pretrain']`` should imitate."""
    if meta["pretrain"]["label"] == "ad":
        return meta["pretrain"]["context"]
    return posterior_sampling(MDPSpec.from_dict(meta["env"]))


def evaluate_model(name: str, runs: int) -> dict:
    """Regret, ratio to the expert and returns per episode of one shipped MDP model."""
    probe = make_agent({"name": "mdp_transformer", "checkpoint": name})
    if not isinstance(probe, MDPTransformerAgent):
        raise TypeError(f"{name!r} is played by {type(probe).__name__}, not by an MDP transformer agent")
    spec = MDPSpec.from_dict(probe.meta["env"])
    expert = reduced_expert(probe.meta)
    algorithms: dict[str, dict[str, Any]] = {
        "TF (sampled)": {"name": "mdp_transformer", "checkpoint": name},
        "TF (greedy)": {"name": "mdp_transformer", "checkpoint": name, "greedy": True},
        "expert": expert,
        "PSRL": posterior_sampling(spec),
        "Uniform": {"name": "mdp_uniform"},
        "Optimal": {"name": "mdp_optimal"},
    }
    if probe.meta["pretrain"]["label"] == "dpt":
        posterior = algorithms["PSRL"]
        algorithms["Bayes DPT (sampled)"] = {"name": "posterior_optimal_action", "posterior": posterior}
        algorithms["Bayes DPT (greedy)"] = {"name": "posterior_optimal_action", "posterior": posterior, "greedy": True}
    rows: dict[str, dict[str, Any]] = {}
    totals: dict[str, np.ndarray] = {}
    v_star = None
    for label, config in algorithms.items():
        same = next((done for done in rows if rows[done]["config"] == config), None)
        if same is not None:  # e.g. PSRL, the reduced expert of DPT: same algorithm, same instances, same result
            rows[label], totals[label] = rows[same], totals[same]
            continue
        start = time.perf_counter()
        out = rollout_mdp(spec, build_agent(make_agent(config, seed=0)), runs, seed=EVAL_SEED, batch_size=BATCH)
        regret = out.episode_regret
        totals[label] = regret.sum(axis=1)
        v_star = out.v_star
        rows[label] = {
            **mean_se(totals[label]),
            "return_per_episode": out.episode_returns.mean(axis=0).round(3).tolist(),
            "seconds": time.perf_counter() - start,
            "config": config,
        }
    paired = {}
    for label in ("TF (sampled)", "TF (greedy)"):
        paired[label] = mean_se(totals[label] - totals["expert"])
    training = probe.meta["training"]
    assert v_star is not None  # set by the first row, which is always played
    return {
        "model": name,
        "runs": runs,
        "seed": EVAL_SEED,
        "env": spec.to_dict(),
        "mean_v_star": float(v_star.mean()),
        "regret": rows,
        "ratio_to_expert": {k: rows[k]["mean"] / rows["expert"]["mean"] for k in ("TF (sampled)", "TF (greedy)")},
        "difference_to_expert": paired,
        "training": {
            "steps": training["step"],
            "wall_minutes": training["wall_seconds"] / 60,
            "val": training.get("val"),
            "command_history": training.get("command_history"),
        },
    }


def main(argv: list[str] | None = None) -> list[dict]:
    """Evaluate the shipped MDP models; print Markdown tables and JSON."""
    args = models_parser(__doc__, CheckpointKind.MDP_TRANSFORMER, threads=1).parse_args(argv)
    results = []
    for name in selected_models(args):
        res = evaluate_model(name, args.runs)
        results.append(res)
        K = res["env"]["episodes"]
        ks = sorted({1, max(K // 2, 1), K})
        print(f"\n### {name} ({args.runs} fresh instances, seed {EVAL_SEED}; mean V* = {res['mean_v_star']:.2f})\n")
        print("| algorithm | regret over K episodes | " + " | ".join(f"return, episode {k}" for k in ks) + " |")
        print("|---|---|" + "---|" * len(ks))
        for label, row in res["regret"].items():
            returns = " | ".join(f"{row['return_per_episode'][k - 1]:.2f}" for k in ks)
            print(f"| {label} | {row['mean']:.2f} +- {row['se']:.2f} | {returns} |")
        ratio = res["ratio_to_expert"]
        print(
            f"\nexpert: {res['regret']['expert']['config']}; ratio TF / expert: sampled "
            f"{ratio['TF (sampled)']:.3f}, greedy {ratio['TF (greedy)']:.3f}; "
            + paired_difference(res["difference_to_expert"])
        )
    print("\n" + json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
