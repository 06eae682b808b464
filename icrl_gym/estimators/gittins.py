"""The finite-horizon Gittins index of a Beta-Bernoulli arm, as a compact table.

An arm with Beta(a0 + s, b0 + f) posterior (s successes, f failures) and m pulls left has index

    G(s, f, m) = sup { lambda : V_lambda(s, f, m) > 0 },
    V_lambda(s, f, m) = max(0, p - lambda + p V_lambda(s+1, f, m-1) + (1-p) V_lambda(s, f+1, m-1)),

p = (a0 + s) / (a0 + b0 + s + f), V_lambda(., ., 0) = 0: the retirement reward lambda per step
at which playing the arm for up to m more pulls (stopping at will) stops being worth it
(calibration; Gittins, Glazebrook & Weber, "Multi-armed Bandit Allocation Indices", ch. 7).

For a grid of lambda values one vectorised backward induction over m gives V_lambda(s, f, m) for
every state, and G is located between the two grid points where V_lambda changes sign (linear
interpolation).  G depends on (s, f, m) only, not on the horizon T of the game, and in a game of
T steps only states with s + f + m <= T occur (s + f pulls done, m left).  So the table stores
the tetrahedron s + f + m <= N + 1 (about N^3 / 6 floats: 84 MB at N = 500, against 500 MB for
the dense cube), and one table built for the largest horizon serves every smaller one
(:func:`gittins_table` keeps the largest built per prior and grid).  The values are computed by
exactly the same float32 operations whatever N, so a table for N >= T holds the same numbers as
one built for T.

This module is the table math; the policy playing it is ``agents.bandit.gittins.Gittins``, and the
generalist trainer's expert reads the same table (:meth:`GittinsTable.lookup`).

Building the table takes about 2 s for N = 200, 40 s for N = 500 and 7.4 min (5 GiB) for N = 1,000 on one thread
(measured 2026-12-06), so :func:`cached_gittins_table` keeps it on
disk for later processes, in a directory the caller names (nothing is written by default; the
agent reads its directory from its ``cache_dir`` argument or the ``ICRL_GYM_GITTINS_CACHE``
environment variable, :func:`gittins_cache_dir`).  A cache file is a ``.npy`` array whose name
holds the parameters (``gittins_N500_a1_b1_g256.npy``) and whose header holds the shape and dtype;
it is written atomically and checked when read (float32, the exact length for N, values in
[0, 1]): a file that fails the check is rebuilt and replaced, never trusted.
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path

import numpy as np

from icrl_gym.utils.fileio import atomic_write


class GittinsTable:
    """G(s, f, m) for s + f + m <= horizon + 1, m >= 1, stored as one flat float32 array.

    The states with m pulls left form the triangle s + f <= R - 1, R = horizon + 2 - m, stored row
    by row (s, then f): (s, f, m) sits at ``offsets[m] + s R - s (s - 1) / 2 + f``.
    """

    def __init__(self, horizon: int, prior_a: float, prior_b: float, grid: int, values: np.ndarray) -> None:
        self.horizon, self.prior_a, self.prior_b, self.grid = int(horizon), float(prior_a), float(prior_b), int(grid)
        sizes = np.array([0] + [_triangle(horizon + 2 - m) for m in range(1, horizon + 2)], dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(sizes)])[:-1]  # offsets[m], m = 0..horizon+1
        if values.shape != (int(sizes.sum()),):
            raise ValueError(f"a Gittins table for N={horizon} holds {sizes.sum()} values, got {values.shape}")
        self.values = values

    @property
    def nbytes(self) -> int:
        """Memory held by the values."""
        return int(self.values.nbytes)

    def lookup(self, s: np.ndarray | int, f: np.ndarray | int, m: np.ndarray | int) -> np.ndarray:
        """G(s, f, m) elementwise (broadcast); every state must satisfy s + f + m <= horizon + 1, m >= 1."""
        s, f, m = (np.asarray(x, dtype=np.int64) for x in (s, f, m))
        r = self.horizon + 2 - m
        if np.any(m < 1) or np.any(s < 0) or np.any(f < 0) or np.any(s + f > r - 1):
            raise IndexError(f"state outside the Gittins table (s + f + m <= {self.horizon + 1}, m >= 1)")
        return self.values[self.offsets[m] + s * r - s * (s - 1) // 2 + f]

    def __getitem__(self, key: tuple[np.ndarray | int, np.ndarray | int, np.ndarray | int]) -> np.ndarray:
        """``table[s, f, m]``, as the dense table was indexed."""
        s, f, m = key
        return self.lookup(s, f, m)


def _triangle(r: int) -> int:
    return r * (r + 1) // 2


def build_gittins_table(horizon: int, prior_a: float = 1.0, prior_b: float = 1.0, grid: int = 256) -> GittinsTable:
    """Compute G(s, f, m) for s + f + m <= horizon + 1 (the backward induction of the module docstring)."""
    n = horizon + 1
    lam = np.linspace(0.0, 1.0, grid, dtype=np.float32)[:, None, None]  # (L, 1, 1)
    s = np.arange(n, dtype=np.float32)[:, None]
    f = np.arange(n, dtype=np.float32)[None, :]
    p = ((prior_a + s) / (prior_a + prior_b + s + f)).astype(np.float32)[None]  # (1, n, n)
    ss, ff = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    pieces = [np.zeros(0, dtype=np.float32)]  # m = 0: no values
    v = np.zeros((grid, n + 1, n + 1), dtype=np.float32)  # V_lambda(., ., m - 1), padded at the far edge
    for m in range(1, n + 1):
        r = n - m + 1  # states with s + f <= T - m + 1 can occur with m pulls left: a square is enough
        cont = p[:, :r, :r] - lam + p[:, :r, :r] * v[:, 1 : r + 1, :r] + (1 - p[:, :r, :r]) * v[:, :r, 1 : r + 1]
        # index: the largest grid lambda with V > 0, refined by interpolating V's sign change
        positive = cont > 0
        k = np.clip(positive.sum(axis=0) - 1, 0, grid - 2)  # V is decreasing in lambda
        c0 = np.take_along_axis(cont, k[None], 0)[0]
        c1 = np.take_along_axis(cont, (k + 1)[None], 0)[0]
        step = lam[1, 0, 0] - lam[0, 0, 0]
        frac = np.where(c0 > c1, np.clip(c0 / np.maximum(c0 - c1, 1e-12), 0.0, 1.0), 0.0)
        square = np.where(positive[0], lam[k, 0, 0] + frac * step, 0.0).astype(np.float32)
        pieces.append(square[(ss[:r, :r] + ff[:r, :r]) <= r - 1])  # row-major: s, then f
        v[:, :r, :r] = np.maximum(cont, 0.0)
    return GittinsTable(horizon, prior_a, prior_b, grid, np.concatenate(pieces))


def gittins_build_bytes(horizon: int, grid: int = 256) -> int:
    """Memory of building the table for T = ``horizon``: 4 (grid, n, n) float32 arrays and the values, n = T + 2."""
    n = horizon + 2
    return 4 * (4 * grid * n * n + 2 * n**3 // 6)


def gittins_memory_bytes(horizon: int, tables: int) -> int:
    """Memory of ``tables`` finished tables for T = ``horizon`` while one more is built.

    Each finished table keeps about (T + 2)^3 / 6 float32 values; the build's arrays are :func:`gittins_build_bytes`.
    """
    n = horizon + 2
    return tables * 4 * (n**3 // 6) + gittins_build_bytes(horizon)


_TABLES: dict[tuple[float, float, int], GittinsTable] = {}


def gittins_table(horizon: int, prior_a: float = 1.0, prior_b: float = 1.0, grid: int = 256) -> GittinsTable:
    """The table for games of up to ``horizon`` steps: the largest built so far (per prior and grid) if it covers it."""
    key = (float(prior_a), float(prior_b), int(grid))
    table = _TABLES.get(key)
    if table is None or table.horizon < horizon:
        table = build_gittins_table(int(horizon), *key)
        _TABLES[key] = table
    return table


HALF_INTEGER_PRIORS = ((0.5, 0.5), (0.5, 1.0), (1.0, 0.5), (1.0, 1.0))
"""The four priors whose tables hold G for every half-integer Beta(alpha, beta), alpha, beta >= 1/2."""


class BetaGittins:
    """G(Beta(alpha, beta), m) for any real alpha, beta >= 1/2, from the tables of :data:`HALF_INTEGER_PRIORS`.

    The table of prior (a0, b0) holds G(Beta(a0 + s, b0 + f), m) for integers s, f >= 0, so the four priors
    a0, b0 in {1/2, 1} hold every point of the half-integer lattice (alpha, beta) in (Z / 2)^2, alpha, beta
    >= 1/2.  Between lattice points the index is interpolated bilinearly in (alpha, beta): G is continuous
    in the posterior's parameters, and the lattice's step of 1/2 pseudo-count is small beside the counts
    of an arm pulled a few times.  ``horizon`` is the largest m + alpha + beta asked for (a table for N
    holds s + f + m <= N + 1); a state beyond it keeps its mean alpha / (alpha + beta) and has its
    pseudo-counts scaled down to fit (a slightly wider posterior, never an error).  It is how an index
    policy reads the Gittins index of a posterior that is not a Beta of integer counts, e.g. the
    moment-matched posterior of a mixture (:mod:`agents.bandit.family_gittins`).
    """

    def __init__(self, tables: dict[tuple[float, float], GittinsTable]) -> None:
        if set(tables) != set(HALF_INTEGER_PRIORS):
            raise ValueError(f"BetaGittins needs the tables of the priors {HALF_INTEGER_PRIORS}, got {sorted(tables)}")
        self.tables = tables
        self.horizon = min(table.horizon for table in tables.values())

    @classmethod
    def build(cls, horizon: int, cache_dir: str | os.PathLike | None = None) -> BetaGittins:
        """The four tables for N = ``horizon`` (kept in ``cache_dir`` when given: :func:`cached_gittins_table`)."""
        if cache_dir is None:
            return cls({prior: gittins_table(horizon, *prior) for prior in HALF_INTEGER_PRIORS})
        return cls({prior: cached_gittins_table(horizon, cache_dir, *prior) for prior in HALF_INTEGER_PRIORS})

    def index(self, alpha: np.ndarray, beta: np.ndarray, remaining: int) -> np.ndarray:
        """G(Beta(alpha, beta), ``remaining``) elementwise; alpha and beta are clipped to >= 1/2."""
        if not 1 <= remaining <= self.horizon:
            raise IndexError(f"{remaining} pulls left: the tables hold 1 to {self.horizon}")
        twice_a = np.maximum(2.0 * np.asarray(alpha, dtype=np.float64), 1.0)
        twice_b = np.maximum(2.0 * np.asarray(beta, dtype=np.float64), 1.0)
        room = self.horizon + 1 - remaining  # alpha + beta + 1 (the upper lattice point) within s + f + m <= N + 1
        scale = np.minimum(1.0, 2.0 * room / (twice_a + twice_b))
        twice_a, twice_b = np.maximum(twice_a * scale, 1.0), np.maximum(twice_b * scale, 1.0)
        low_a, low_b = np.floor(twice_a), np.floor(twice_b)
        frac_a, frac_b = twice_a - low_a, twice_b - low_b
        out = np.zeros(np.broadcast(twice_a, twice_b).shape)
        for step_a, weight_a in ((0, 1.0 - frac_a), (1, frac_a)):
            for step_b, weight_b in ((0, 1.0 - frac_b), (1, frac_b)):
                out += weight_a * weight_b * self._lattice(low_a + step_a, low_b + step_b, remaining)
        return out

    def _lattice(self, twice_a: np.ndarray, twice_b: np.ndarray, remaining: int) -> np.ndarray:
        """G at the lattice points (twice_a / 2, twice_b / 2), integers twice_a, twice_b >= 1."""
        twice_a, twice_b = np.broadcast_arrays(twice_a.astype(np.int64), twice_b.astype(np.int64))
        odd_a, odd_b = twice_a % 2 == 1, twice_b % 2 == 1  # alpha = 1/2 + s, else 1 + s
        out = np.empty(twice_a.shape, dtype=np.float64)
        for prior, rows in (
            ((0.5, 0.5), odd_a & odd_b),
            ((0.5, 1.0), odd_a & ~odd_b),
            ((1.0, 0.5), ~odd_a & odd_b),
            ((1.0, 1.0), ~odd_a & ~odd_b),
        ):
            if rows.any():
                s = (twice_a[rows] - 2 * prior[0]) // 2
                f = (twice_b[rows] - 2 * prior[1]) // 2
                out[rows] = self.tables[prior].lookup(s.astype(np.int64), f.astype(np.int64), remaining)
        return out


CACHE_ENV = "ICRL_GYM_GITTINS_CACHE"
"""Environment variable naming the directory the Gittins agent keeps its tables in (unset: none)."""


def gittins_cache_dir(cache_dir: str | os.PathLike | None = None) -> Path | None:
    """The table cache directory: ``cache_dir``, else ``$ICRL_GYM_GITTINS_CACHE``, else None (no disk cache)."""
    if cache_dir is None:
        cache_dir = os.environ.get(CACHE_ENV) or None
    return None if cache_dir is None else Path(cache_dir).expanduser()


def _cache_suffix(prior_a: float, prior_b: float, grid: int) -> str:
    return f"_a{float(prior_a):g}_b{float(prior_b):g}_g{int(grid)}.npy"


def gittins_cache_path(
    cache_dir: str | os.PathLike, horizon: int, prior_a: float = 1.0, prior_b: float = 1.0, grid: int = 256
) -> Path:
    """The cache file of the table for ``horizon`` (its parameters are in the name)."""
    return Path(cache_dir) / f"gittins_N{int(horizon)}{_cache_suffix(prior_a, prior_b, grid)}"


def load_cached_table(
    path: str | os.PathLike, horizon: int, prior_a: float = 1.0, prior_b: float = 1.0, grid: int = 256
) -> GittinsTable | None:
    """The table stored at ``path`` if it is a valid one for these parameters, else None (missing or corrupt)."""
    try:
        values = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError):  # missing, truncated, not a .npy, or a pickled object
        return None
    if not isinstance(values, np.ndarray) or values.dtype != np.float32 or values.ndim != 1:
        return None
    try:
        table = GittinsTable(horizon, prior_a, prior_b, grid, values)  # checks the length for N
    except ValueError:
        return None
    if values.size and not (np.isfinite(values).all() and values.min() >= 0.0 and values.max() <= 1.0):
        return None
    return table


def cached_gittins_table(
    horizon: int, cache_dir: str | os.PathLike, prior_a: float = 1.0, prior_b: float = 1.0, grid: int = 256
) -> GittinsTable:
    """:func:`gittins_table`, kept in ``cache_dir`` as ``.npy`` for later processes (N = 500: 40 s to build).

    A cached table for a horizon N >= ``horizon`` (the smallest there is) serves; if none is valid the
    table is built and written atomically as ``gittins_cache_path(cache_dir, horizon, ...)``,
    replacing a corrupt file of that name.  A cache folder that cannot be listed or written (a file
    in its place, a read-only folder, a full disk) only costs the rebuild in a later process: the
    table is returned from memory after one ``RuntimeWarning`` per folder naming it and the cause.
    """
    key = (float(prior_a), float(prior_b), int(grid))
    path = gittins_cache_path(cache_dir, horizon, *key)
    exact_invalid = False
    if key not in _TABLES or _TABLES[key].horizon < horizon:
        suffix = _cache_suffix(*key)
        pattern = re.compile(r"gittins_N(\d+)" + re.escape(suffix))
        try:
            found = sorted(
                (int(match.group(1)), candidate)
                for candidate in (Path(cache_dir).glob(f"gittins_N*{suffix}") if Path(cache_dir).is_dir() else [])
                if (match := pattern.fullmatch(candidate.name)) is not None and int(match.group(1)) >= horizon
            )
        except OSError as err:  # a folder that cannot be listed: build in memory
            warn_unusable_cache(cache_dir, err)
            found = []
        for n, candidate in found:
            loaded = load_cached_table(candidate, n, *key)
            if loaded is not None:
                _TABLES[key] = loaded
                break
            warnings.warn(f"ignoring the corrupt Gittins table cache {candidate}", RuntimeWarning, stacklevel=2)
            exact_invalid |= candidate == path
    table = gittins_table(horizon, *key)
    try:
        if table.horizon == horizon and (exact_invalid or not path.exists()):
            atomic_write(path, lambda fh: np.save(fh, table.values))
    except OSError as err:  # a file where the folder should be, a read-only folder, a full disk
        warn_unusable_cache(cache_dir, err)
    return table


_UNUSABLE_CACHES: set[str] = set()
"""Cache folders already reported unusable in this process (each is reported once)."""


def warn_unusable_cache(
    cache_dir: str | os.PathLike,
    err: OSError,
    what: str = "Gittins table",
    kept: str = f"the table is kept in memory for this process only (set {CACHE_ENV} to a writable folder to keep it)",
) -> None:
    """One ``RuntimeWarning`` per folder: the ``what`` cache cannot be used, its contents stay in memory (``kept``).

    The cause is named: a file where the folder (or a parent) should be, else the ``OSError``'s class and message.
    """
    if str(cache_dir) in _UNUSABLE_CACHES:
        return
    _UNUSABLE_CACHES.add(str(cache_dir))
    folder = Path(cache_dir)
    try:
        is_file = any(p.exists() and not p.is_dir() for p in (folder, *folder.parents))
    except OSError:  # a parent that cannot even be looked at
        is_file = False
    reason = "a file stands where the folder should be" if is_file else f"{type(err).__name__}: {err.strerror or err}"
    warnings.warn(
        f"cannot use the {what} cache {cache_dir} ({reason}); {kept}",
        RuntimeWarning,
        stacklevel=3,
    )


def told_gittins_table(
    horizon: int, prior_a: float = 1.0, prior_b: float = 1.0, cache_dir: str | os.PathLike | None = None
) -> GittinsTable:
    """The table of the prior Beta(a, b) for ``horizon`` steps.

    Kept on disk where :func:`gittins_cache_dir` names a folder (``cache_dir``, else ``$ICRL_GYM_GITTINS_CACHE``),
    in memory otherwise.
    """
    folder = gittins_cache_dir(cache_dir)
    if folder is None:
        return gittins_table(horizon, prior_a, prior_b)
    return cached_gittins_table(horizon, folder, prior_a, prior_b)
