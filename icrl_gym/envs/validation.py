"""The checks every environment and every algorithm applies at its boundary, written once.

- Sizes and numbers of a configuration: :func:`integer_problem` / :func:`number_problem` describe
  what is wrong with one field (a spec collects them into one error), :func:`check_integer` raises
  at once (``TypeError`` for a value of the wrong type, ``ValueError`` for one out of range).
- Arrays handed in by a caller: :func:`check_finite`, :func:`check_distribution`, :func:`check_in_range`,
  :func:`check_index_batch` (integer indices in a range, the actions of a batch of runs).
- Memory: :func:`check_memory` refuses a construction whose estimated footprint exceeds the limit
  before anything is allocated.  The limit is ``max_memory_gib`` where a constructor takes it (the
  environments; an algorithm's ``max_memory_gib`` attribute), else the innermost
  ``with memory_limit(gib):`` block (for code that builds batches deep inside, e.g. a collector),
  else the environment variable ``ICRL_GYM_MAX_MEMORY_GIB``, else :data:`DEFAULT_MAX_MEMORY_GIB`.

Every message names the argument, the value received and what is allowed.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import numpy as np

MEMORY_ENV = "ICRL_GYM_MAX_MEMORY_GIB"
"""Environment variable overriding the default memory limit (in GiB) of one environment or algorithm."""

DEFAULT_MAX_MEMORY_GIB = 4.0
"""Largest estimated footprint (GiB) of one environment batch or one algorithm's statistics allowed by default."""

GIB = 2**30

MAX_SCALE = 1e100
"""Largest magnitude of a scale parameter or a given instance entry (prior bounds, noise, w*): far beyond any
use, and small enough that no draw, mean reward or reward computed from it overflows."""

MAX_INPUT = 1e50
"""Largest magnitude of an observation entry or a reward an algorithm takes: products of a few of them and
of the statistics built from them (ridge estimates, indices, softmax arguments) stay finite."""


class MemoryLimitError(ValueError):
    """A size whose estimated memory exceeds the limit (raised before anything is allocated)."""


def plain(value: Any) -> Any:
    """A numpy scalar as the Python number it holds (bool, int or float); anything else unchanged."""
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def is_integer(value: Any) -> bool:
    """Whether ``value`` is an integer (Python or numpy), never a bool."""
    value = plain(value)
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """Whether ``value`` is a finite real number (Python or numpy), never a bool."""
    value = plain(value)
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def integer_problem(name: str, value: Any, low: int = 1, high: int | None = None) -> str | None:
    """What is wrong with ``value`` as the integer ``name`` in [low, high] (None when nothing is)."""
    if not is_integer(value):
        return f"{name} must be an integer, got {value!r} ({type(value).__name__})"
    if value < low:
        return f"{name} must be >= {low}, got {value}"
    if high is not None and value > high:
        return f"{name} must be <= {high}, got {value}"
    return None


def number_problem(
    name: str, value: Any, low: float = -math.inf, strict: bool = False, max_abs: float = math.inf
) -> str | None:
    """What is wrong with ``value`` as the finite number ``name`` above ``low``, at most ``max_abs`` in magnitude."""
    bound = "" if low == -math.inf else f" {'>' if strict else '>='} {low:g}"
    if not is_number(value) or (value <= low if strict else value < low):
        return f"{name} must be a finite number{bound}, got {value!r}"
    if abs(value) > max_abs:
        return f"{name} must be at most {max_abs:g} in magnitude, got {value!r}"
    return None


def check_integer(name: str, value: Any, low: int = 1, high: int | None = None) -> int:
    """``value`` as an int in [low, high]: ``TypeError`` when it is no integer, ``ValueError`` when out of range."""
    problem = integer_problem(name, value, low, high)
    if problem is not None:
        raise (ValueError if is_integer(value) else TypeError)(problem)
    return int(value)


def check_number(
    name: str, value: Any, low: float = -math.inf, strict: bool = False, max_abs: float = math.inf
) -> float:
    """``value`` as a finite float in range: ``TypeError`` when it is no real number, ``ValueError`` otherwise."""
    problem = number_problem(name, value, low, strict, max_abs)
    if problem is not None:
        numeric = isinstance(plain(value), (int, float)) and not isinstance(plain(value), bool)
        raise (ValueError if numeric else TypeError)(problem)
    return float(value)


def as_float_array(name: str, value: Any) -> np.ndarray:
    """``value`` as a float64 array, a ``TypeError`` naming ``name`` when it holds no numbers.

    Text is refused too, although numpy would parse it (``np.asarray("1.0", dtype=float)`` is 1.0):
    a reward or an observation that arrives as a string is a bug upstream, not a number.
    """
    if value is None:
        raise TypeError(f"{name} must be an array of numbers, got None")
    cause: Exception | None = None  # numpy's own error, kept as the TypeError's cause
    try:
        raw = np.asarray(value)
        text = raw.dtype.kind in "US" or (
            raw.dtype.kind == "O" and any(x is None or isinstance(x, (str, bytes)) for x in raw.flat)
        )
        arr = None if text else raw.astype(np.float64, copy=False)  # no copy of a float64 array, as np.asarray
    except (TypeError, ValueError) as err:
        arr, cause = None, err
    if arr is None:  # the message only now: a repr of a large array costs more than the whole check
        raise TypeError(f"{name} must be an array of numbers, got {type(value).__name__} {_short(value)}") from cause
    return arr


def check_finite(name: str, arr: np.ndarray, bound: float = math.inf) -> None:
    """Refuse NaN and infinite entries (and, given a ``bound``, entries larger in magnitude), naming the first."""
    with np.errstate(over="ignore"):  # a bound beyond float32's range compares as infinity: only "finite" is left
        bad = ~(np.abs(arr) <= bound) if bound < math.inf else ~np.isfinite(arr)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        allowed = "finite" if bound == math.inf else f"finite with magnitude <= {bound:g}"
        raise ValueError(f"{name} must be {allowed}, got {plain(arr[where])!r} at index {list(where)}")


def check_in_range(name: str, arr: np.ndarray, low: float, high: float, symbol: str | None = None) -> None:
    """Refuse entries outside [low, high], naming the first as ``symbol[index] = value`` (``symbol``: ``name``)."""
    bad = (arr < low) | (arr > high)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        shown = f"{symbol or name}{list(where)} = {plain(arr[where])!r}"
        raise ValueError(f"{name} must lie in [{low:g}, {high:g}], got {shown}")


def check_distribution(name: str, arr: np.ndarray, what: str) -> None:
    """Refuse anything but probability vectors along the last axis: finite, >= 0, summing to 1."""
    check_finite(name, arr)
    if arr.size and arr.min() < 0:
        where = tuple(int(i) for i in np.argwhere(arr < 0)[0])
        raise ValueError(
            f"{name} must be a probability distribution {what}: {name}{list(where)} = {plain(arr[where])!r} < 0"
        )
    sums = arr.sum(axis=-1)
    off = ~np.isclose(sums, 1.0)
    if off.any():
        where = tuple(int(i) for i in np.argwhere(off)[0])
        raise ValueError(
            f"{name} must be a probability distribution {what}: the entries of {name}{list(where)} sum to "
            f"{plain(sums[where])!r}, not 1"
        )


def check_index_batch(
    values: Any, batch_size: int, size: int, name: str = "actions", kind: str = "indices", what: str = "", low: int = 0
) -> np.ndarray:
    """A batch of indices: shape (B,), integer-valued (integral floats accepted), each in [low, size); as int64.

    ``name`` and ``kind`` make the message ("actions must be integer arm indices in [0, 5), got 7 ...").
    """
    arr = np.asarray(values)
    where = f" ({what})" if what else ""
    allowed = f"{name} must be integer {kind} in [{low}, {size})"
    if arr.dtype == object and arr.size and all(is_integer(v) for v in arr.flat):  # Python ints beyond int64
        outside = [v for v in arr.flat if not low <= v < size]
        if outside:
            raise ValueError(f"{allowed}, got {outside[0]}, outside the range{where}")
        arr = arr.astype(np.int64)
    if arr.shape != (batch_size,):
        raise ValueError(f"expected {name} of shape ({batch_size},), got shape {arr.shape}{where}")
    if arr.dtype.kind == "f":
        bad = ~np.isfinite(arr) | (arr != np.round(arr))
        if bad.any():
            raise ValueError(f"{allowed}, got {plain(arr[bad][0])!r}{where}")
    elif arr.dtype.kind not in "iu":
        raise ValueError(f"{allowed}, got dtype {arr.dtype}: {_short(values)}{where}")
    bad = (arr < low) | (arr >= size)  # before any cast: a huge float stays itself in the message
    if bad.any():
        raise ValueError(f"{allowed}, got {plain(arr[bad][0])!r}, outside the range{where}")
    return arr.astype(np.int64, copy=False)


_LIMIT: ContextVar[float | None] = ContextVar("icrl_gym_max_memory_gib", default=None)


@contextlib.contextmanager
def memory_limit(max_memory_gib: float | None) -> Iterator[None]:
    """Within the block, constructions without an explicit limit use ``max_memory_gib`` (None: no change)."""
    if max_memory_gib is not None:
        check_number("max_memory_gib", max_memory_gib, low=0.0, strict=True)
    token = _LIMIT.set(max_memory_gib if max_memory_gib is not None else _LIMIT.get())
    try:
        yield
    finally:
        _LIMIT.reset(token)


def max_memory_bytes(max_memory_gib: float | None = None) -> float:
    """The memory limit in bytes: the argument, else :func:`memory_limit`'s, else the variable's, else the default."""
    if max_memory_gib is None:
        max_memory_gib = _LIMIT.get()
    if max_memory_gib is not None:
        return check_number("max_memory_gib", max_memory_gib, low=0.0, strict=True) * GIB
    text = os.environ.get(MEMORY_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_MEMORY_GIB * GIB
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{MEMORY_ENV} must be a finite number of GiB > 0, got {text!r}")
    return value * GIB


def check_memory(nbytes: float, what: str, max_memory_gib: float | None = None) -> None:
    """Refuse, before allocating, a construction that needs about ``nbytes`` bytes beyond the limit."""
    limit = max_memory_bytes(max_memory_gib)
    if nbytes > limit:
        raise MemoryLimitError(
            f"{what} needs about {nbytes / GIB:,.2f} GiB (estimate), above the limit of {limit / GIB:g} GiB; to allow "
            f"it, pass max_memory_gib (an environment's argument, an algorithm's attribute), run it inside "
            f"icrl_gym.envs.validation.memory_limit(gib) or set {MEMORY_ENV}"
        )


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
