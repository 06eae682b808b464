"""Summary statistics of per-run values, with no dependency beyond numpy (the driver of a sweep imports them)."""

from __future__ import annotations

import numpy as np


def mean_se(values: np.ndarray) -> dict:
    """Mean and standard error of per-run values (totals, or paired differences on common random numbers).

    The standard error is std / sqrt(n) with the sample standard deviation (ddof=1).
    """
    return {"mean": float(values.mean()), "se": float(values.std(ddof=1) / np.sqrt(values.size))}
