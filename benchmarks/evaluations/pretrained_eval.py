"""Acceptance numbers of the shipped pretrained transformers.

For every shipped model: cumulative regret at T on fresh instances (seed 10**7, never used in
training: training chunks use seeds 10**6 * s + c, validation 10**6 * s + 900,000) next to its
(reduced) expert and the baselines on the same instances (common random numbers: one seed and one
batch size for every algorithm), the ratio of
the model's regret to its expert's, and the imitation error along expert rollouts (per-step
cross-entropy, KL, squared Hellinger distance, agreement; icrl_gym.data.diagnostics).

The reduced expert of algorithm distillation is the context algorithm itself; that of DPT is
posterior sampling, i.e. Beta(1,1)-Bernoulli Thompson sampling under the uniform prior.

    python -m benchmarks.evaluations.pretrained_eval [--runs 2000] [--models a,b] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from agents import make_agent
from agents.learned.transformer import TransformerAgent
from benchmarks.experiments.rows import (
    BERNOULLI_BASELINES,
    LINEAR_BASELINES,
    PAPER_TS,
    as_bandit_agent,
)
from benchmarks.stats import mean_se
from icrl_gym.checkpoint import CheckpointKind, pretrained_names
from icrl_gym.data.diagnostics import imitation_error
from icrl_gym.data.pipeline import build_agent
from icrl_gym.data.trajectories import evaluate_regret
from icrl_gym.envs import BanditReward, BanditSpec
from icrl_gym.utils.cli import doc_parser

EVAL_SEED = 10**7
BATCH = 1000
"""Runs per batch for every algorithm: the instances a seed draws depend on it (common random numbers)."""


def reduced_expert(meta: dict) -> dict:
    """The algorithm a model trained with ``meta['pretrain']`` should imitate."""
    pre = meta["pretrain"]
    if pre["label"] == "ad":
        return pre["context"]
    if pre["label"] == "expert":
        return pre["expert"]
    spec = BanditSpec.from_dict(meta["env"])
    return {"name": "bernoulli_ts"} if spec.reward is BanditReward.BERNOULLI else dict(PAPER_TS)


def baselines(spec: BanditSpec) -> dict[str, dict]:
    """The paper's comparison algorithms for a prior."""
    return dict(BERNOULLI_BASELINES if spec.reward is BanditReward.BERNOULLI else LINEAR_BASELINES)


def summarize(regret: np.ndarray) -> dict:
    """Mean and standard error of regret at T, per run totals."""
    return mean_se(regret.sum(axis=1))


def evaluate_model(name: str, runs: int, imitation_runs: int) -> dict:
    """Regret table, ratio to the expert and imitation error of one shipped model."""
    rows: dict[str, dict] = {}
    probe = TransformerAgent.pretrained(name)
    spec = BanditSpec.from_dict(probe.meta["env"])
    expert = reduced_expert(probe.meta)
    tf_totals = {}
    for greedy in (False, True):
        agent = build_agent(TransformerAgent.pretrained(name, greedy=greedy, seed=0))
        start = time.perf_counter()
        label = "TF (greedy)" if greedy else "TF (sampled)"
        regret = evaluate_regret(spec, agent, runs, seed=EVAL_SEED, batch_size=BATCH)
        tf_totals[label] = regret.sum(axis=1)
        rows[label] = {**summarize(regret), "seconds": time.perf_counter() - start}
    for label, config in baselines(spec).items():
        rows[label] = summarize(evaluate_regret(spec, config, runs, seed=EVAL_SEED, batch_size=BATCH))
    expert_regret = evaluate_regret(spec, expert, runs, seed=EVAL_SEED, batch_size=BATCH)
    rows["expert"] = {**summarize(expert_regret), "config": expert}
    paired = {}
    for label, totals in tf_totals.items():  # common random numbers: a paired difference per instance
        paired[label] = mean_se(totals - expert_regret.sum(axis=1))
    imitation = imitation_error(
        as_bandit_agent(TransformerAgent.pretrained(name, seed=1)),
        as_bandit_agent(make_agent(expert, seed=1)),
        spec,
        imitation_runs,
        seed=EVAL_SEED + 1,
    )
    training = probe.meta["training"]
    return {
        "model": name,
        "runs": runs,
        "seed": EVAL_SEED,
        "regret": rows,
        "ratio_to_expert": {k: rows[k]["mean"] / rows["expert"]["mean"] for k in ("TF (sampled)", "TF (greedy)")},
        "difference_to_expert": paired,
        "imitation": imitation,
        "training": {
            "steps": training["step"],
            "trajectories_seen": training["trajectories_seen"],
            "distinct_trajectories": training.get("distinct_trajectories"),
            "wall_minutes": training["wall_seconds"] / 60,
            "device": training["device"],
            "threads": training["threads"],
            "val": training.get("val"),
            "command": training.get("command"),
        },
        "model_config": probe.meta["model"],
        **(
            {"finetune": {k: v for k, v in probe.meta["finetune"].items() if k != "history"}}
            if "finetune" in probe.meta
            else {}
        ),
    }


def models_parser(doc: str | None, kind: CheckpointKind, threads: int) -> argparse.ArgumentParser:
    """The command line of an evaluation of shipped models of ``kind``: ``--runs``, ``--models``, ``--threads``."""
    parser = doc_parser(doc)
    parser.add_argument("--runs", type=int, default=2000, help="fresh instances per algorithm")
    parser.add_argument("--models", default=",".join(pretrained_names(kind)), help="comma-separated model names")
    parser.add_argument("--threads", type=int, default=threads, help="torch CPU threads")
    return parser


def selected_models(args: argparse.Namespace) -> list[str]:
    """The models named by ``--models``, after setting torch's CPU threads to ``--threads``."""
    torch.set_num_threads(args.threads)
    return [m for m in args.models.split(",") if m]


def paired_difference(diff: dict) -> str:
    """The paired differences TF - expert of the sampled and the greedy model, as mean +- s.e."""
    sampled, greedy = diff["TF (sampled)"], diff["TF (greedy)"]
    return (
        f"paired difference TF - expert: sampled {sampled['mean']:.2f} +- {sampled['se']:.2f}, "
        f"greedy {greedy['mean']:.2f} +- {greedy['se']:.2f}"
    )


def main(argv: list[str] | None = None) -> list[dict]:
    """Evaluate the shipped models and print a Markdown table and JSON."""
    parser = models_parser(__doc__, CheckpointKind.BANDIT_TRANSFORMER, threads=2)
    parser.add_argument("--imitation-runs", type=int, default=500, help="expert rollouts for the imitation error")
    args = parser.parse_args(argv)
    results = []
    for name in selected_models(args):
        res = evaluate_model(name, args.runs, args.imitation_runs)
        results.append(res)
        print(f"\n### {name} ({args.runs} fresh instances, seed {EVAL_SEED})\n")
        print("| algorithm | regret at T (mean +- s.e.) |\n|---|---|")
        for label, row in res["regret"].items():
            print(f"| {label} | {row['mean']:.2f} +- {row['se']:.2f} |")
        ratio = res["ratio_to_expert"]
        im = res["imitation"]
        tr = res["training"]
        print(
            f"\nratio to expert: sampled {ratio['TF (sampled)']:.3f}, greedy {ratio['TF (greedy)']:.3f}; "
            + paired_difference(res["difference_to_expert"])
        )
        print(
            f"imitation along expert rollouts: CE {im['ce_per_step']:.4f}, KL {im['kl_per_step']:.4f} "
            f"+- {im['kl_per_step_se']:.4f}, Hellinger^2 {im['hellinger2_per_step']:.4f}, "
            f"agreement {im['agreement_per_step']:.4f}"
        )
        print(
            f"training: {tr['steps']} steps, {tr['trajectories_seen']:,} trajectories seen, "
            f"{tr['wall_minutes']:.1f} min on {tr['device']} ({tr['threads']} thread(s))"
        )
        if "finetune" in res:
            ft = res["finetune"]
            print(
                f"then fine-tuned online from {ft['base_name']}: best of {ft['config']['iterations']} iterations "
                f"x {ft['config']['runs_per_iteration']} runs at iteration {ft['best']['iteration']} "
                f"(validation regret {ft['best']['val_regret']:.2f}), {ft['wall_seconds'] / 60:.1f} min"
            )
    print("\n" + json.dumps(results))
    return results


if __name__ == "__main__":
    main()
