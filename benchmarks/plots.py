"""Figures of the regret benchmark: one PNG per experiment that a reader can read without the code.

Conventions, the same in every figure:

- learned models (transformers, meta-RL policies) are solid lines, experts and references dashed;
- every row name has its own colour, the same in every figure where it appears (a greedy colouring
  of the rows over all experiments: two rows that share a figure never share a colour);
- bands are +-1 standard error of the mean (not the spread of single runs), on the cumulative
  regret only: the per-step curves are running means, whose scatter already shows their noise;
- the legend sits right of the axes, each group ordered by the regret at the horizon, with its value;
- the caption states the environment, the horizon, the number of runs and the seed;
- a curve far above all others (RL^2 on the Bernoulli bandit) leaves the axes with its final value
  written at the exit, so that it does not squash the rest into the bottom of the panel.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from benchmarks.experiments.rows import LEARNED
from benchmarks.experiments.suite.cells import EXPERIMENTS, Experiment
from icrl_gym.envs import BanditPrior, BanditReward, BanditSpec, MDPKind, MDPSpec
from icrl_gym.utils.fileio import atomic_write_bytes

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

Curves = dict[str, dict[str, np.ndarray]]

PALETTE = (
    "#1f77b4",  # blue
    "#ff7f0e",  # orange
    "#2ca02c",  # green
    "#d62728",  # red
    "#9467bd",  # purple
    "#8c564b",  # brown
    "#e377c2",  # pink
    "#bcbd22",  # olive
    "#17becf",  # cyan
    "#000000",  # black
    "#7f7f7f",  # grey
    "#ff9896",  # salmon
    "#98df8a",  # light green
    "#c5b0d5",  # lavender
    "#ffbb78",  # light orange
)
"""Enough distinct colours for the largest experiment (12 rows); matplotlib's default cycle has 10."""

LEARNED_STYLE = {"lw": 2.0}
EXPERT_STYLE = {"lw": 1.5, "ls": (0, (5, 2))}

OUTLIER_RATIO = 2.0
"""A curve whose final regret exceeds this multiple of every other curve's is drawn off-scale."""


def assign_colours(experiments: Iterable[Experiment]) -> dict[str, str]:
    """One colour per row name, distinct within every experiment, stable across figures.

    Rows are coloured in order of first appearance, each with the first palette colour that no
    already coloured row of a shared experiment holds, so a row keeps its colour from figure to
    figure (UCB, TS and Emp look the same everywhere) and no figure repeats a colour.
    """
    experiments = list(experiments)
    colour: dict[str, int] = {}
    for exp in experiments:
        for label in exp.algorithms:
            if label in colour:
                continue
            shared = {other for e in experiments if label in e.algorithms for other in e.algorithms}
            taken = {colour[other] for other in shared if other in colour}
            colour[label] = next(i for i in range(len(PALETTE) * 4) if i not in taken)
    return {label: PALETTE[i % len(PALETTE)] for label, i in colour.items()}


COLOURS = assign_colours(EXPERIMENTS.values())


def _figure_colours(labels: list[str]) -> dict[str, str]:
    """The stable colours of ``labels``; rows no registered experiment names take unused colours."""
    known = {label: COLOURS[label] for label in labels if label in COLOURS}
    free = iter(c for c in PALETTE if c not in known.values())
    return {label: known.get(label) or next(free, PALETTE[-1]) for label in labels}


def is_learned(exp: Experiment, label: str) -> bool:
    """Whether a row is a learned model (a shipped checkpoint) rather than an expert or reference."""
    spec = exp.algorithms.get(label)
    return spec["name"] in LEARNED if spec is not None else label.startswith("TF")


def describe_env(spec: BanditSpec | MDPSpec) -> str:
    """The environment and its prior in one line, for a caption."""
    if isinstance(spec, MDPSpec):
        dark = spec.kind is MDPKind.DARK_ROOM
        size = f"{spec.size}x{spec.size}" if dark else f"S={spec.num_states}, A={spec.num_actions}"
        name = "ICRL-DarkRoom-v0" if dark else "ICRL-TabularMDP-v0"
        return f"{name} ({size}, H={spec.horizon}, K={spec.episodes} episodes: T={spec.total_steps} steps)"
    low, high, mid = spec.prior_low, spec.prior_high, (spec.prior_low + spec.prior_high) / 2
    if spec.prior is BanditPrior.BETA:
        prior = f"Beta({spec.prior_a:g}, {spec.prior_b:g})"
    elif spec.prior.skewed:
        halves = (f"U[{mid:g}, {high:g}]", f"U[{low:g}, {mid:g}]")
        first, rest = halves if spec.prior is BanditPrior.SKEWED else halves[::-1]
        prior = f"{first} (first {spec.dim // 2}), {rest} (the others)"
    elif spec.prior is BanditPrior.GAUSSIAN:
        prior = f"N(0, {spec.prior_var:g} I)"
    else:
        prior = f"U[{low:g}, {high:g}]"
    w_star = {
        BanditPrior.SPHERE: "w* uniform on the unit sphere",
        BanditPrior.ONE_COORDINATE: f"w* = s e_i, i uniform, s ~ N(0, {spec.prior_var:g})",
    }.get(spec.prior, f"w* coordinates ~ {prior}")
    if spec.reward is BanditReward.BERNOULLI:
        return f"ICRL-BernoulliBandit-v0 (A={spec.num_actions}, means ~ {prior}, T={spec.horizon})"
    return (
        f"ICRL-LinearBandit-v0 (d={spec.dim}, A={spec.num_actions}, noise sigma={spec.noise_std:g}, "
        f"{w_star}, T={spec.horizon})"
    )


def caption(exp: Experiment, runs: int, seed: int) -> str:
    """Title and configuration: the experiment, its environment, runs and seed."""
    return f"{exp.title}\n{describe_env(exp.spec)}; {runs} runs, seed {seed}, the same instances for every row"


def _running_mean(x: np.ndarray, window: int) -> np.ndarray:
    """Trailing mean over ``window`` steps (shorter at the start)."""
    if window <= 1:
        return x
    c = np.concatenate([[0.0], np.cumsum(x)])
    t = np.arange(1, x.size + 1)
    lo = np.maximum(t - window, 0)
    return (c[t] - c[lo]) / (t - lo)


def _outliers(finals: dict[str, float]) -> list[str]:
    """Rows whose final regret exceeds OUTLIER_RATIO times that of every other row (at most a third of them)."""
    order = sorted(finals, key=finals.__getitem__, reverse=True)
    out: list[str] = []
    for i, label in enumerate(order[: len(order) // 3]):
        rest = finals[order[i + 1]]
        if rest <= 0 or finals[label] <= OUTLIER_RATIO * rest:
            break
        out.append(label)
    return out


def _legend(
    fig: Figure,
    exp: Experiment,
    lines: dict[str, Line2D],
    finals: dict[str, tuple[float, float]],
    unit: str,
    horizon: int,
) -> None:
    """Legend right of the axes: learned rows, then experts, each ordered by final regret."""
    from matplotlib.lines import Line2D

    handles: list[Line2D] = []
    texts: list[str] = []
    headers: list[int] = []
    groups = (
        ("learned models (solid)", [lbl for lbl in lines if is_learned(exp, lbl)]),
        ("experts and references (dashed)", [lbl for lbl in lines if not is_learned(exp, lbl)]),
    )
    for header, labels in groups:
        if not labels:
            continue
        headers.append(len(texts))
        handles.append(Line2D([], [], linestyle="none"))
        texts.append(header)
        for label in sorted(labels, key=lambda lbl: finals[lbl][0]):
            mean, se = finals[label]
            handles.append(lines[label])
            texts.append(f"{mean:6.2f} +- {se:.2f}  {label}")
    legend = fig.legend(
        handles,
        texts,
        loc="center left",
        bbox_to_anchor=(1.0, 0.5),
        fontsize=8.5,
        title=f"regret at {unit}={horizon} (mean +- s.e.)",
        title_fontsize=9,
        frameon=False,
        handlelength=3.2,
    )
    for i in headers:
        legend.get_texts()[i].set_fontweight("bold")
        legend.get_texts()[i].set_x(-40)


def plot_files(exp: Experiment) -> list[str]:
    """The names of the files :func:`plot` writes for ``exp``."""
    return [f"{exp.name}.png", *([f"{exp.name}-difference.png"] if exp.difference else [])]


def png_bytes(fig: Figure) -> bytes:
    """``fig`` as PNG bytes; the figure is closed."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def write_images(out: Path, images: dict[str, bytes]) -> list[Path]:
    """Write each ``name: PNG bytes`` of ``images`` to ``out/name`` atomically (a stopped run leaves no torn image)."""
    for name, data in images.items():
        atomic_write_bytes(out / name, data)
    return [out / name for name in images]


def render(exp: Experiment, curves: Curves, runs: int, seed: int) -> dict[str, bytes]:
    """``<name>.png``: cumulative regret and per-step regret; ``<name>-difference.png`` where defined.

    Returns the PNG bytes of the files of :func:`plot_files`, by name: drawn anywhere (a worker
    process, a Ray node), written by the caller.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

    mdp = isinstance(exp.spec, MDPSpec)
    unit = "k" if mdp else "t"
    colours = _figure_colours(list(curves))
    horizon = next(iter(curves.values()))["cumulative_regret_mean"].size
    t = np.arange(1, horizon + 1)
    window = 1 if mdp else max(1, horizon // 20)
    finals = {
        label: (float(c["cumulative_regret_mean"][-1]), float(c["cumulative_regret_se"][-1]))
        for label, c in curves.items()
    }
    off_scale = _outliers({label: m for label, (m, _) in finals.items()})

    fig, (ax_cum, ax_step) = plt.subplots(1, 2, figsize=(12.5, 4.6))
    lines = {}
    for label, c in curves.items():
        style = dict(LEARNED_STYLE if is_learned(exp, label) else EXPERT_STYLE)
        if horizon <= 30:  # few episodes: mark the points
            style.update(marker="o", markersize=3)
        mean, se = c["cumulative_regret_mean"], c["cumulative_regret_se"]
        (lines[label],) = ax_cum.plot(t, mean, color=colours[label], **style)
        ax_cum.fill_between(t, mean - se, mean + se, color=colours[label], alpha=0.15, lw=0)
        ax_step.plot(t, _running_mean(c["suboptimality_mean"], window), color=colours[label], **style)

    if off_scale:
        kept = [curves[lbl] for lbl in curves if lbl not in off_scale]
        top = 1.3 * max(float((c["cumulative_regret_mean"] + c["cumulative_regret_se"]).max()) for c in kept)
        ax_cum.set_ylim(top=top)
        for label in off_scale:
            mean = curves[label]["cumulative_regret_mean"]
            exit_t = int(t[np.argmax(mean > top)])
            ax_cum.annotate(
                f"{label}: {finals[label][0]:.1f} at {unit}={horizon} (off scale)",
                xy=(exit_t, top),
                xytext=(10, -12),
                textcoords="offset points",
                color=colours[label],
                fontsize=8,
            )

    xlabel = "episode k" if mdp else "time t"
    ax_cum.set(xlabel=xlabel, ylabel="cumulative regret", title="Cumulative regret (bands: +-1 standard error)")
    if mdp:
        ax_step.set(xlabel=xlabel, ylabel="V* - return of episode k", title="Regret per episode (mean over runs)")
    else:
        smoothing = f", running mean over {window} steps" if window > 1 else ""
        title = f"Per-step suboptimality (mean over runs{smoothing})"
        ax_step.set(xlabel=xlabel, ylabel="<a*_t - a_t, w*> (log scale)", title=title, yscale="log")
        ax_step.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax_step.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
        ax_step.yaxis.set_minor_formatter(NullFormatter())
    for ax in (ax_cum, ax_step):
        ax.grid(alpha=0.3)
        ax.title.set_fontsize(10)
        ax.set_xlim(1, horizon)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.suptitle(caption(exp, runs, seed), fontsize=10)
    fig.tight_layout()
    _legend(fig, exp, lines, finals, unit, horizon)
    names = plot_files(exp)
    images = {names[0]: png_bytes(fig)}
    if exp.difference:
        images[names[1]] = render_difference(exp, curves, runs, seed)
    return images


def render_difference(exp: Experiment, curves: Curves, runs: int, seed: int) -> bytes:
    """``<name>-difference.png``: regret of each ``exp.difference`` row minus the regret of ``exp.reference``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = _figure_colours(list(curves))
    ref = curves[exp.reference]["cumulative_regret_mean"]
    t = np.arange(1, ref.size + 1)
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    diffs = {label: curves[label]["cumulative_regret_mean"] - ref for label in exp.difference}
    for label in sorted(diffs, key=lambda lbl: -diffs[lbl][-1]):
        ax.plot(t, diffs[label], color=colours[label], lw=2.0, label=f"{diffs[label][-1]:5.2f}  {label}")
    ax.axhline(0, color="k", lw=0.8)
    ax.set(
        xlabel="time t",
        ylabel=f"regret(TF) - regret({exp.reference})",
        title=f"Regret minus the regret of {exp.reference}, paired on the same instances",
        xlim=(1, ref.size),
    )
    ax.title.set_fontsize(9)
    ax.grid(alpha=0.3)
    fig.suptitle(caption(exp, runs, seed), fontsize=9)
    note = "Means over runs. No bands: the rows' own standard errors overstate that of a paired difference."
    ax.text(0, -0.17, note, transform=ax.transAxes, fontsize=8, va="top")
    fig.tight_layout()
    ax.legend(
        loc="center left",
        bbox_to_anchor=(1.02, 0.5),
        fontsize=8.5,
        frameon=False,
        title=f"difference at t={ref.size}",
        title_fontsize=9,
    )
    return png_bytes(fig)
