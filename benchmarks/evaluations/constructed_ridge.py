"""Constructed transformers (Lemma 21): error to the exact ridge estimate per layer count.

Builds the explicit-weight GD and AGD transformers of :mod:`icrl_gym.models.constructions` with
``--max-layers`` layers, runs them once on linear-bandit trajectories (uniform actions, the
paper's prior, T = ``--horizon``) and records after every layer the largest distance
max_{runs, t} ||w_hat_t - w_ridge_t||.  Prints the layers each needs to reach 1e-1, 1e-2 and 1e-3
(with the ratio to sqrt of GD's layers) and the fitted per-layer contraction next to the lemma's
(1 - 1/kappa) and (1 - 1/sqrt(kappa)), and saves ``constructed_ridge.png`` and ``.json``.

    python -m benchmarks.evaluations.constructed_ridge [--horizon 20] [--max-layers 3000] [--out results/constructed]
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import torch

from icrl_gym.data.trajectories import collect_trajectories
from icrl_gym.envs import linear_bandit_spec
from icrl_gym.models.constructions import _layout, exact_ridge_estimates, ridge_transformer
from icrl_gym.utils.cli import doc_parser


def error_per_layer(model, sets, actions, rewards, exact) -> np.ndarray:
    """Max ||w_hat - w_ridge|| after every layer (the hidden state read at the state tokens)."""
    slot = _layout(model.config.dim)["w"]
    errors = []
    with torch.no_grad():
        x = model._embed(model.token_features(sets, actions, rewards), 0)
        for block in model.blocks:
            x = block(x)
            errors.append(float((x[:, ::2, slot] - exact).norm(dim=-1).max()))
    return np.array(errors)


def layers_to_reach(errors: np.ndarray, eps: float) -> int | None:
    """First layer count with error <= eps (None if never)."""
    hit = np.flatnonzero(errors <= eps)
    return int(hit[0]) + 1 if hit.size else None


def main(argv: list[str] | None = None) -> dict:
    """Measure, print and plot."""
    parser = doc_parser(__doc__)
    parser.add_argument("--horizon", type=int, default=20, help="steps T of the trajectories")
    parser.add_argument("--runs", type=int, default=32, help="trajectories")
    parser.add_argument("--max-layers", type=int, default=3000, help="layers of the constructed models")
    parser.add_argument("--lam", type=float, default=1.0, help="ridge parameter lambda")
    parser.add_argument("--seed", type=int, default=0, help="seed of the trajectories")
    parser.add_argument("--out", default="results/constructed", help="output folder")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    data = collect_trajectories(linear_bandit_spec(horizon=args.horizon), "uniform", args.runs, seed=args.seed)
    sets = torch.tensor(np.ascontiguousarray(data.step_action_sets()), dtype=torch.float64)
    actions = torch.tensor(data.actions.astype(np.int64))
    rewards = torch.tensor(data.rewards, dtype=torch.float64)
    exact = exact_ridge_estimates(sets, actions, rewards, args.lam)
    curves, kappa = {}, None
    for name, accelerated in (("GD", False), ("AGD", True)):
        model = ridge_transformer(5, 10, args.horizon, args.max_layers, lam=args.lam, accelerated=accelerated)
        kappa = model.construction["kappa"]
        curves[name] = error_per_layer(model, sets, actions, rewards, exact)
    assert kappa is not None  # set by both constructions
    result = {"horizon": args.horizon, "runs": args.runs, "seed": args.seed, "lam": args.lam, "kappa": kappa}
    print(f"T={args.horizon}, {args.runs} runs, lambda={args.lam}, kappa={kappa:.0f}")
    print("| error eps | GD layers | AGD layers | AGD / sqrt(GD) |\n|---|---|---|---|")
    table = []
    for eps in (1e-1, 1e-2, 1e-3):
        gd, agd = layers_to_reach(curves["GD"], eps), layers_to_reach(curves["AGD"], eps)
        ratio = agd / math.sqrt(gd) if gd and agd else None
        table.append({"eps": eps, "gd_layers": gd, "agd_layers": agd, "agd_over_sqrt_gd": ratio})
        print(f"| {eps:g} | {gd} | {agd} | {'' if ratio is None else f'{ratio:.2f}'} |")
    for name, bound in (("GD", 1 - 1 / kappa), ("AGD", 1 - 1 / math.sqrt(kappa))):
        err = curves[name]
        usable = np.flatnonzero((err > 1e-9) & (err < 1e-1))  # the geometric regime, above float noise
        rate = float(np.exp(np.polyfit(usable, np.log(err[usable]), 1)[0])) if usable.size > 2 else float("nan")
        result[f"{name}_rate"] = rate
        print(f"{name}: fitted contraction per layer {rate:.5f}; the lemma's bound {bound:.5f}")
    result["table"] = table
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for name, err in curves.items():
        ax.semilogy(np.arange(1, err.size + 1), err, label=f"{name} construction")
    ax.set(
        xlabel="layers",
        ylabel="max ||w_hat - w_ridge||",
        title=f"Lemma 21: constructed ReLU transformers\nT={args.horizon}, kappa={kappa:.0f}",
    )
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "constructed_ridge.png", dpi=110)
    result["curves"] = {k: v.tolist() for k, v in curves.items()}
    (out / "constructed_ridge.json").write_text(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
