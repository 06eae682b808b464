"""The MDP grid's settings (:data:`MDP_GENERALIZATION`: sizes, rooms, rows) and the cells they make."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from benchmarks.experiments.grid.cells import SLICE_RUNS, Cell, GridSettings
from benchmarks.experiments.rows import SOFT_UCBVI, bayes_dpt, mdp_generalist
from icrl_gym.envs import MDPKind, MDPSpec, dark_room_spec


@dataclass(frozen=True)
class MDPGridExperiment(GridSettings):
    """The MDP generalist against PSRL and the Bayes DPT policy over sizes (``run.py`` runs it).

    Every cell is one MDP prior; all rows of a cell play the same instances with the same noise
    (common random numbers).  Cell groups: ``in-range`` (random MDPs, S x A x H x K with K H <=
    ``max_steps``), ``fixed`` (today's fixed size, ``fixed_runs_factor`` times the runs), ``dark``
    (dark rooms at their documented H and K) and ``beyond`` (S beyond the trained range).
    """

    states: tuple[int, ...]
    """S of the in-range random MDPs."""
    actions: tuple[int, ...]
    """A of the in-range random MDPs."""
    horizons: tuple[int, ...]
    """H (steps per episode) of the in-range random MDPs."""
    episodes: tuple[int, ...]
    """K (episodes) of the in-range random MDPs."""
    max_steps: int
    """In-range cells keep T = K H <= max_steps."""
    fixed: tuple[int, int, int, int]
    """(S, A, H, K) of the fixed-size MDP transformers."""
    fixed_runs_factor: int
    rooms: tuple[tuple[int, int, int], ...]
    """(size, H, K) of the dark rooms."""
    beyond_states: tuple[int, ...]
    beyond: tuple[int, int, int]
    """(A, H, K) of the cells beyond the trained range."""
    references: dict[str, dict[str, Any]]
    """Rows of the random-MDP cells (the Bayes DPT rows are left out beyond the range: see ``beyond_references``)."""
    fixed_references: dict[str, dict[str, Any]]
    """Rows added at the fixed size."""
    beyond_references: tuple[str, ...]
    """The ``references`` played beyond the range (the Bayes DPT policy solves 32 posterior MDPs per step)."""
    room_references: dict[str, dict[str, Any]]
    compared: tuple[str, ...]
    """Rows that compete for a cell's best reference (not uniform or optimal play)."""
    psrl: tuple[str, str]
    """Row names of PSRL in random MDPs and in dark rooms (the acceptance ratios' denominators)."""
    bayes_dpt: str
    """Row name of the greedy Bayes DPT policy (random MDPs and dark rooms)."""
    model: dict[str, Any]
    """The MDP generalist row (its checkpoint is an option of the harness)."""
    groups: tuple[str, ...] = ("in-range", "fixed", "dark", "beyond")
    seed_offset: int = 40_000_000
    """Evaluation seeds start here, disjoint from every training seed."""
    default: bool = False
    slice_runs: int = SLICE_RUNS
    """Runs per task of a row (a cell's runs are played in slices of this many, one CRN batch each)."""


MDP_GENERALIZATION = MDPGridExperiment(
    name="mdp-generalization",
    title="One MDP generalist across tabular MDP sizes and dark rooms",
    states=(3, 5, 10, 20),
    actions=(2, 4, 6),
    horizons=(5, 10, 20),
    episodes=(5, 20, 50),
    max_steps=1000,
    fixed=(5, 3, 10, 20),
    fixed_runs_factor=2,
    rooms=((5, 20, 10), (8, 50, 4), (10, 100, 4), (12, 100, 4)),
    beyond_states=(30, 50),
    beyond=(3, 50, 100),
    references={
        "PSRL": {"name": "psrl"},
        "Bayes DPT policy (greedy)": bayes_dpt("psrl", greedy=True),
        "UCB-VI (bonus x0.01)": {"name": "ucbvi", "bonus_scale": 0.01},
        "soft UCB-VI (tau=0.1, bonus x0.01)": SOFT_UCBVI,
        "Uniform": {"name": "mdp_uniform"},
        "Optimal": {"name": "mdp_optimal"},
    },
    fixed_references={"Bayes DPT policy (sampled)": bayes_dpt("psrl", greedy=False)},
    beyond_references=("PSRL", "UCB-VI (bonus x0.01)", "soft UCB-VI (tau=0.1, bonus x0.01)", "Uniform", "Optimal"),
    room_references={
        "PSRL (DarkRoom prior)": {"name": "dark_room_psrl"},
        "Bayes DPT policy (greedy)": bayes_dpt("dark_room_psrl", greedy=True),
        "Bayes DPT policy (sampled)": bayes_dpt("dark_room_psrl", greedy=False),
        "UCB-VI (bonus x0.01)": {"name": "ucbvi", "bonus_scale": 0.01},
        "Uniform": {"name": "mdp_uniform"},
        "Optimal": {"name": "mdp_optimal"},
    },
    compared=(
        "PSRL",
        "PSRL (DarkRoom prior)",
        "Bayes DPT policy (greedy)",
        "Bayes DPT policy (sampled)",
        "UCB-VI (bonus x0.01)",
        "soft UCB-VI (tau=0.1, bonus x0.01)",
    ),
    psrl=("PSRL", "PSRL (DarkRoom prior)"),
    bayes_dpt="Bayes DPT policy (greedy)",
    model=mdp_generalist(),
)

MDP_GRID_EXPERIMENTS: dict[str, MDPGridExperiment] = {MDP_GENERALIZATION.name: MDP_GENERALIZATION}
"""MDP grid experiments (opt-in: hundreds of runs in each of ~40 MDPs)."""


def _random_cell(panel: str, row: str, size: tuple[int, int, int, int], in_range: bool = True) -> Cell:
    """The cell of the random-MDP prior of size (S, A, H, K), the other prior fields at their defaults."""
    S, A, H, K = size
    spec = MDPSpec(num_states=S, num_actions=A, horizon=H, episodes=K)
    return Cell("mdp", panel, row, f"H={H}, K={K}", spec, in_range, True)


def mdp_cells(exp: MDPGridExperiment, groups: tuple[str, ...] | list[str]) -> list[Cell]:
    """The cells of ``groups`` (the docstring of ``cli.py``), family 'mdp'."""
    out: list[Cell] = []
    for group in groups:
        if group == "in-range":
            out += [
                _random_cell(f"random MDPs, A={A}", f"S={S}", (S, A, H, K))
                for A in exp.actions
                for S in exp.states
                for H in exp.horizons
                for K in exp.episodes
                if K * H <= exp.max_steps
            ]
        elif group == "fixed":
            S, A = exp.fixed[:2]
            out.append(_random_cell(FIXED_PANEL, f"S={S}, A={A}", exp.fixed))
        elif group == "dark":
            out += [
                Cell("mdp", "dark rooms", f"{n}x{n}", f"H={H}, K={K}", dark_room_spec(n, H, K), True, True)
                for n, H, K in exp.rooms
            ]
        elif group == "beyond":
            A, H, K = exp.beyond
            out += [
                _random_cell(f"beyond the range (A={A})", f"S={S}", (S, A, H, K), in_range=False)
                for S in exp.beyond_states
            ]
        else:
            raise ValueError(f"unknown cell group {group!r}; the groups are {exp.groups}")
    return out


FIXED_PANEL = "fixed size"
"""Panel of the fixed-size cell (played with ``fixed_runs_factor`` times the runs)."""


def cell_runs(exp: MDPGridExperiment, cell: Cell, runs: int) -> int:
    """Runs of ``cell``: ``runs``, times ``fixed_runs_factor`` at the fixed size."""
    return runs * (exp.fixed_runs_factor if cell.panel == FIXED_PANEL else 1)


def is_room(cell: Cell) -> bool:
    """Whether ``cell`` is a dark room."""
    return isinstance(cell.spec, MDPSpec) and cell.spec.kind is MDPKind.DARK_ROOM


def references(exp: MDPGridExperiment, cell: Cell) -> dict[str, dict[str, Any]]:
    """The reference rows of a cell (the docstring of ``cli.py``)."""
    if is_room(cell):
        return dict(exp.room_references)
    if not cell.in_range:
        return {k: v for k, v in exp.references.items() if k in exp.beyond_references}
    return {**exp.references, **(exp.fixed_references if cell.panel == FIXED_PANEL else {})}


def psrl_row(exp: MDPGridExperiment, cell: Cell) -> str:
    """PSRL's row name in the cell (DarkRoom PSRL in dark rooms)."""
    return exp.psrl[1] if is_room(cell) else exp.psrl[0]
