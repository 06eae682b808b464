"""The frontier's outputs: ``uninformed.csv`` / ``.json`` (Monte Carlo), ``frontier.csv`` / ``.json`` (exact).

:func:`frontier_markdown` reads them back as the results page's section (``python -m benchmarks`` shows a
``bernoulli-frontier/`` folder of its output directory, written by
``python -m benchmarks.evaluations.bernoulli_frontier --out OUT/bernoulli-frontier --model NAME``).
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.experiments.bernoulli_frontier.cells import BETA_GRID, TOLD_GITTINS
from benchmarks.plots import png_bytes, write_images
from icrl_gym.utils.fileio import atomic_write_bytes, atomic_write_csv
from icrl_gym.utils.provenance import software_environment

MEAN_LINE, P99_LINE = 1.25, 1.5
"""The lines the heatmaps mark: a mean regret within 1.25x the told Gittins, a p99 within 1.5x its p99."""


def heatmap_name(policy: str) -> str:
    """The file of ``policy``'s heatmap: ``heatmap-<policy in lower case, words joined by '-'>.png``."""
    return "heatmap-" + re.sub(r"[^a-z0-9]+", "-", policy.lower()).strip("-") + ".png"


MEASURES = (("ratio", MEAN_LINE, "mean regret / told Gittins"), ("p99_ratio", P99_LINE, "p99 / told Gittins p99"))
"""The heatmaps' rows: a column of the Monte-Carlo rows, its line and its label."""


def over_the_lines(rows: list[dict[str, Any]]) -> set[tuple[str, int, float, float, str]]:
    """(policy, K, a, b, column) of every row whose ``ratio`` or ``p99_ratio`` is over its line (:data:`MEASURES`)."""
    return {
        (str(r["policy"]), int(r["num_arms"]), float(r["a"]), float(r["b"]), key)
        for r in rows
        for key, line, _ in MEASURES
        if float(r[key]) > line
    }


def render_heatmaps(rows: list[dict[str, Any]], run: dict[str, Any]) -> dict[str, bytes]:
    """PNG bytes by file name (:func:`heatmap_name`): one figure per policy of ``rows`` but the told Gittins.

    Top row, the ratio of the policy's mean regret to the told Gittins's; bottom row, the ratio of their 99th
    percentiles; one column per K; in each panel the Beta(a, b) prior's a down and b across.  Cells over the
    lines (:func:`over_the_lines`) are framed; the title names the run (``run``: horizon, runs,
    seed, model), so the image says what made it.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import TwoSlopeNorm
    from matplotlib.patches import Rectangle

    arms = sorted({int(r["num_arms"]) for r in rows})
    a_values = sorted({float(r["a"]) for r in rows})
    b_values = sorted({float(r["b"]) for r in rows})
    images: dict[str, bytes] = {}
    for policy in dict.fromkeys(str(r["policy"]) for r in rows):
        if policy == TOLD_GITTINS:
            continue
        mine = {(int(r["num_arms"]), float(r["a"]), float(r["b"])): r for r in rows if r["policy"] == policy}
        fig, axes = plt.subplots(
            2, len(arms), figsize=(3.2 * len(arms) + 1.5, 6.4), squeeze=False, layout="constrained"
        )
        framed = over_the_lines(list(mine.values()))
        for row, (key, line, label) in enumerate(MEASURES):
            values = [float(r[key]) for r in mine.values()]
            norm = TwoSlopeNorm(vmin=min([0.9, *values]), vcenter=1.0, vmax=max([line + 0.05, *values]))
            image = None
            for ax, k in zip(axes[row], arms, strict=True):
                grid = np.full((len(a_values), len(b_values)), np.nan)
                for (kk, a, b), r in mine.items():
                    if kk != k:
                        continue
                    i, j = a_values.index(a), b_values.index(b)
                    grid[i, j] = value = float(r[key])
                    over = (policy, k, a, b, key) in framed
                    ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=8, weight="bold" if over else None)
                    if over:
                        ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="black", lw=2))
                image = ax.imshow(np.ma.masked_invalid(grid), cmap="RdYlGn_r", norm=norm, aspect="auto")
                ax.set_xticks(range(len(b_values)), [f"{b:g}" for b in b_values])
                ax.set_yticks(range(len(a_values)), [f"{a:g}" for a in a_values])
                ax.set_xlabel("b")
                ax.set_ylabel("a")
                ax.set_title(f"K = {k}: {label}", fontsize=9)
            if image is not None:
                fig.colorbar(image, ax=axes[row].tolist(), label=f"{label} (framed: over {line:g}x)")
        fig.suptitle(
            f"{policy} ({run.get('model')}) on Beta(a, b) means, T = {run['horizon']}, {run['runs']} runs per prior, "
            f"seed {run['seed']}, common random numbers",
            fontsize=9,
        )
        images[heatmap_name(policy)] = png_bytes(fig)
    return images


def write_uninformed(out: Path, rows: list[dict[str, Any]], config: dict[str, Any]) -> None:
    """``uninformed.csv`` (the Monte-Carlo rows), ``uninformed.json`` (``config``, the priors) and the heatmaps.

    A line per row is printed; :func:`render_heatmaps` draws one figure per policy beside the told Gittins.
    """
    atomic_write_csv(out / "uninformed.csv", rows, list(rows[0]))
    run = {"arms": config["arms"], "horizon": config["horizon"], "priors": [list(p) for p in BETA_GRID]}
    run.update(runs=config["runs"], seed=config["seed"], model=config["model"], seconds=config["seconds"])
    run["software"] = software_environment()
    atomic_write_bytes(out / "uninformed.json", json.dumps(run, indent=2).encode())
    write_images(out, render_heatmaps(rows, run))
    for row in rows:
        label = f"K={row['num_arms']} Beta({row['a']:g}, {row['b']:g})"
        print(
            f"{label:>20} {row['policy']:>22} {row['mean']:8.2f} ± {row['se']:5.2f} ({row['ratio']:.3f}x ± "
            f"{row['ratio_se']:.3f} told Gittins; p99 {row['p99']:.1f}, {row['p99_ratio']:.2f}x "
            f"[{row['p99_ratio_low']:.2f}, {row['p99_ratio_high']:.2f}])"
        )


def write_frontier(out: Path, rows: list[dict[str, Any]], certificate: dict[str, Any], config: dict[str, Any]) -> None:
    """``frontier.csv`` (the exact rows) and ``frontier.json`` (the run and the certificate); the rows and c(pi)."""
    atomic_write_csv(out / "frontier.csv", rows, list(rows[0]))
    record = {
        "arms": config["arms"],
        "horizon": config["horizon"],
        "priors": [list(p) for p in BETA_GRID],
        "searches": config["searches"],
        "model": config["model"],
        "certificate": certificate,
        "seconds": config["seconds"],
        "software": software_environment(),
    }
    atomic_write_bytes(out / "frontier.json", json.dumps(record, indent=2).encode())
    for row in rows:
        print(
            f"Beta({row['a']:g}, {row['b']:g}): told Gittins {row['told_gittins']:.4f}, told DP {row['told_dp']:.4f}, "
            f"family-Bayes {row['family_bayes']:.4f} ({row['family_bayes_ratio']:.3f}x told Gittins)"
        )
    c = certificate["best"]["c"]
    print(f"certificate: every policy not told the prior is >= {c:.4f}x told Gittins in some cell")


FOLDER = "bernoulli-frontier"
"""The frontier's folder inside a benchmark output directory, shown on its results page."""


def _read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def frontier_markdown(folder: Path) -> str | None:
    """Markdown tables of the frontier's outputs in ``folder`` (``None`` when it holds neither).

    Exact rows (``frontier.csv``): per Beta(a, b) prior the told Gittins, the family-Bayes DP (the
    best policy not told the prior) and, when a model was evaluated, the model played greedily, with
    the sums over the priors and the certificate c (every uninformed policy is >= c x told Gittins in
    some cell).  Monte-Carlo rows (``uninformed.csv``): every policy's ratio to the told Gittins.
    """
    parts: list[str] = []
    exact_csv, exact_json = folder / "frontier.csv", folder / "frontier.json"
    if exact_csv.is_file() and exact_json.is_file():
        rows, record = _read(exact_csv), json.loads(exact_json.read_text())
        model = "model" in rows[0]
        head = "| prior | told Gittins | family-Bayes DP | ratio to told |"
        rule = "|---|---|---|---|"
        if model:
            head += f" {record.get('model')} | to family-Bayes |"
            rule += "---|---|"
        parts += [
            f"**Exact, K = {record['arms']}, T = {record['horizon']}** (every value computed exactly, no sampling):",
            "",
            head,
            rule,
        ]
        for r in rows:
            line = f"| Beta({float(r['a']):g}, {float(r['b']):g}) | {float(r['told_gittins']):.3f} | "
            line += f"{float(r['family_bayes']):.3f} | {float(r['family_bayes_ratio']):.3f} |"
            if model:
                line += f" {float(r['model']):.3f} | {float(r['model_to_family_bayes']):.3f} |"
            parts.append(line)
        told, family = (sum(float(r[k]) for r in rows) for k in ("told_gittins", "family_bayes"))
        total = f"| sum | {told:.3f} | {family:.3f} | {family / told:.3f} |"
        if model:
            ours = sum(float(r["model"]) for r in rows)
            total += f" {ours:.3f} | {ours / family:.3f} |"
        c = record["certificate"]["best"]["c"]
        parts += [
            total,
            "",
            f"Certificate: every policy not told the prior is at least {c:.4f}x the told Gittins in some prior.",
            "",
        ]
    mc_csv, mc_json = folder / "uninformed.csv", folder / "uninformed.json"
    if mc_csv.is_file() and mc_json.is_file():
        rows, run = _read(mc_csv), json.loads(mc_json.read_text())
        policies = list(dict.fromkeys(r["policy"] for r in rows))
        cells = list(dict.fromkeys((r["num_arms"], r["a"], r["b"]) for r in rows))
        ratio = {(r["num_arms"], r["a"], r["b"], r["policy"]): float(r["ratio"]) for r in rows}
        parts += [
            f"**Monte Carlo, T = {run['horizon']}, {run['runs']} runs per prior, seed {run['seed']}** (ratio of mean "
            "regret to the told Gittins, common random numbers):",
            "",
            "| K | prior | " + " | ".join(policies) + " |",
            "|---|---|" + "---|" * len(policies),
        ]
        for k, a, b in cells:
            values = " | ".join(f"{ratio.get((k, a, b, p), float('nan')):.2f}" for p in policies)
            parts.append(f"| {k} | Beta({float(a):g}, {float(b):g}) | {values} |")
    return "\n".join(parts) if parts else None
