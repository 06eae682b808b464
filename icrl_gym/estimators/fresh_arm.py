r"""Where the finite-horizon Gittins index told U[0, 1] pulls an untried arm: a table of thresholds, shipped.

An untried Beta(1, 1) arm with m pulls left has index lambda*_m = G(0, 0, m) (:mod:`icrl_gym.estimators.gittins`).
Whether the index's first maximiser over K arms is an untried arm depends on each tried arm's G(s, f, m) only
through two comparisons with lambda*_m: the first maximiser is the first untried arm u exactly when no tried arm
has G(s, f, m) > lambda*_m and no tried arm before u has G(s, f, m) = lambda*_m (a tie goes to the first arm).
For n = s + f pulls, G(s, n - s, m) grows with s (a success raises the posterior, Gittins, Glazebrook & Weber,
"Multi-armed Bandit Allocation Indices", ch. 7; checked on every table this module reads), so both comparisons are
thresholds on s:

    G(s, n - s, m) >  lambda*_m  <=>  s >= above[n, m],
    G(s, n - s, m) >= lambda*_m  <=>  s >= reach[n, m]      (n + 1 where no s qualifies).

Two (N + 1) x (N + 2) integer tables replace the table's N^3 / 6 floats, and they are exact: derived from the table
itself, so :meth:`FreshArmRule.first_untried` decides as a ``first_argmax`` over the table's values does.  The
package ships them for N = :data:`SHIPPED_HORIZON` (``fresh_arm_N1000.npz``, 165 KB), whose table takes 5 GiB and
7.4 min of one thread to build; a game of T <= N reads them in milliseconds, and a longer one builds its own from
the table (:func:`fresh_arm_rule`).  A table built for N >= T holds the same values for every state of a
game of T steps, so the shipped thresholds are those of any smaller table (a test checks it).

The file was made by ``python -m icrl_gym.estimators.fresh_arm 1000`` (12 s from a cached table; its arrays record
the horizon, the prior, the table's grid, that command and the software that ran it); it is read with
``allow_pickle=False`` and checked (shape, dtype, range), never trusted.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import zipfile
from pathlib import Path

import numpy as np

from icrl_gym.envs.validation import check_memory
from icrl_gym.estimators.gittins import GittinsTable, gittins_build_bytes, told_gittins_table
from icrl_gym.utils.command import portable
from icrl_gym.utils.fileio import atomic_write_bytes
from icrl_gym.utils.provenance import software_environment

SHIPPED_HORIZON = 1000
"""The largest T whose thresholds ship with the package."""
SHIPPED_PATH = Path(__file__).resolve().parent / "data" / f"fresh_arm_N{SHIPPED_HORIZON}.npz"
"""The shipped thresholds (:func:`build_fresh_arm_rule` of the table told U[0, 1] for T = :data:`SHIPPED_HORIZON`)."""


class FreshArmRule:
    """The thresholds ``above``, ``reach`` (N + 1, N + 2) of one Gittins table (module docstring), indexed [n, m]."""

    def __init__(self, horizon: int, grid: int, above: np.ndarray, reach: np.ndarray) -> None:
        n = int(horizon) + 1
        for name, array in (("above", above), ("reach", reach)):
            if array.shape != (n, n + 1) or not np.issubdtype(array.dtype, np.integer):
                raise ValueError(f"fresh-arm thresholds for N={horizon}: {name} must be ({n}, {n + 1}) integers")
            if array.min() < 0 or np.any(array > np.arange(n)[:, None] + 1):
                raise ValueError(f"fresh-arm thresholds for N={horizon}: {name} holds a value outside [0, n + 1]")
        if np.any(reach > above):
            raise ValueError(f"fresh-arm thresholds for N={horizon}: reach must not exceed above")
        self.horizon, self.grid = int(horizon), int(grid)
        self.above, self.reach = above.astype(np.int64), reach.astype(np.int64)

    def first_untried(self, successes: np.ndarray, failures: np.ndarray, steps_left: int) -> np.ndarray:
        """(B,) the first untried arm where the index's first maximiser is one, else -1; counts (B, K).

        ``steps_left`` is m = T - t >= 1; every tried arm's s + f + m must be at most N + 1, as the table's.
        """
        pulls = successes + failures
        m = int(steps_left)
        if m < 1 or np.any(pulls + m > self.horizon + 1):
            raise IndexError(f"state outside the fresh-arm thresholds (s + f + m <= {self.horizon + 1}, m >= 1)")
        untried = pulls == 0
        first = untried.argmax(axis=1)
        before = np.arange(pulls.shape[1])[None, :] < first[:, None]
        tried = ~untried
        above = successes >= self.above[pulls, m]
        reach = successes >= self.reach[pulls, m]
        blocked = np.any(tried & (above | (before & reach)), axis=1)
        return np.where(untried.any(axis=1) & ~blocked, first, -1)

    def floor(self, successes: np.ndarray, failures: np.ndarray, steps_left: int, chosen: np.ndarray) -> np.ndarray:
        """(B,) the untried arm the floor plays in place of ``chosen`` (B,), else -1; counts (B, K).

        The fresh-arm floor: where the index's first maximiser is an untried arm (:meth:`first_untried`) and the
        policy's choice an arm already pulled, that untried arm; so the floor only adds tries of fresh arms.
        """
        fresh = self.first_untried(successes, failures, steps_left)
        tried = (successes + failures)[np.arange(fresh.shape[0]), chosen] > 0
        return np.where(tried, fresh, -1)


def build_fresh_arm_rule(table: GittinsTable) -> FreshArmRule:
    """The thresholds of ``table`` (module docstring); raises if G(s, n - s, m) is not monotone in s somewhere."""
    n_max = table.horizon + 1
    above = np.zeros((n_max, n_max + 1), dtype=np.int64)
    reach = np.zeros((n_max, n_max + 1), dtype=np.int64)
    for m in range(1, n_max + 1):
        fresh = table.lookup(0, 0, m)
        for n in range(1, n_max - m + 1):
            s = np.arange(n + 1)
            g = table.lookup(s, n - s, m)
            if np.any(np.diff(g) < 0):
                raise ValueError(f"G(s, {n} - s, {m}) of the N={table.horizon} table is not monotone in s")
            above[n, m] = int(np.searchsorted(g, fresh, side="right"))
            reach[n, m] = int(np.searchsorted(g, fresh, side="left"))
    return FreshArmRule(table.horizon, table.grid, above, reach)


def save_fresh_arm_rule(rule: FreshArmRule, path: str | os.PathLike, command: str = "") -> Path:
    """Write ``rule`` as a compressed ``.npz``, atomically.

    The file holds uint16 arrays, the horizon, prior and grid, and as text the ``command`` that made it and the
    software that ran it (:func:`~icrl_gym.utils.provenance.software_environment`).
    """
    buffer = io.BytesIO()
    np.savez_compressed(
        buffer,
        above=rule.above.astype(np.uint16),
        reach=rule.reach.astype(np.uint16),
        horizon=np.int64(rule.horizon),
        grid=np.int64(rule.grid),
        prior=np.array([1.0, 1.0]),
        command=np.array(command),
        software=np.array(json.dumps(software_environment(), sort_keys=True)),
    )
    atomic_write_bytes(Path(path), buffer.getvalue())
    return Path(path)


def load_fresh_arm_rule(path: str | os.PathLike) -> FreshArmRule:
    """The rule stored at ``path``, checked (a file that is not one, or for another prior, raises ``ValueError``)."""
    try:
        with np.load(Path(path), allow_pickle=False) as data:
            arrays = {key: data[key] for key in ("above", "reach", "horizon", "grid", "prior")}
    except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise ValueError(f"{path} is not a file of fresh-arm thresholds: {err}") from err
    if not np.array_equal(arrays["prior"], [1.0, 1.0]):
        raise ValueError(f"{path} holds thresholds for the prior Beta{tuple(arrays['prior'])}, not U[0, 1]")
    return FreshArmRule(int(arrays["horizon"]), int(arrays["grid"]), arrays["above"], arrays["reach"])


_RULES: dict[int, FreshArmRule] = {}


def fresh_arm_rule(horizon: int, max_memory_gib: float | None = None) -> FreshArmRule:
    """The rule for games of up to ``horizon`` steps: the shipped one where it covers them, else built and kept.

    Beyond :data:`SHIPPED_HORIZON` the table told U[0, 1] is built (:func:`~icrl_gym.estimators.gittins.
    told_gittins_table`, kept on disk where ``$ICRL_GYM_GITTINS_CACHE`` names a folder): more than 5 GiB and 7 min,
    refused above the memory limit (:func:`~icrl_gym.envs.validation.check_memory`; ``max_memory_gib``) before any of
    it is allocated.
    """
    covering = [rule for n, rule in _RULES.items() if n >= horizon]
    if covering:
        return min(covering, key=lambda rule: rule.horizon)
    if horizon <= SHIPPED_HORIZON:
        rule = load_fresh_arm_rule(SHIPPED_PATH)
    else:
        what = f"the fresh-arm floor at T = {horizon} (the Gittins table told U[0, 1]; fresh_arm_floor=False skips it)"
        check_memory(gittins_build_bytes(int(horizon)), what, max_memory_gib)
        rule = build_fresh_arm_rule(told_gittins_table(int(horizon)))
    _RULES[rule.horizon] = rule
    return rule


def main(argv: list[str] | None = None) -> None:
    """``python -m icrl_gym.estimators.fresh_arm N [--out PATH]``: build the thresholds of the table for T = N."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("horizon", type=int)
    parser.add_argument("--out", type=Path, default=None, help="the .npz to write (default: the shipped file's place)")
    args = parser.parse_args(argv)
    out = args.out or SHIPPED_PATH.with_name(f"fresh_arm_N{args.horizon}.npz")
    command = portable(" ".join(["python -m icrl_gym.estimators.fresh_arm", *(sys.argv[1:] if argv is None else argv)]))
    print(save_fresh_arm_rule(build_fresh_arm_rule(told_gittins_table(args.horizon)), out, command))


if __name__ == "__main__":
    main()
