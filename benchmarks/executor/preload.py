"""The workers' code, imported once into the process the local workers are forked from.

Workers share the pages of torch, numpy and the agents copy-on-write with the process they are
forked from, so each starts in milliseconds instead of importing everything again (about 3 s and
160 MB per spawned worker).  That process is the driver itself when it has not imported torch yet
(none of torch's thread pools runs there, so forking it is safe), else a fork server
(:mod:`benchmarks.executor.worker_preload`); :func:`benchmarks.executor.local.worker_context`
chooses.
"""

from __future__ import annotations

import gc


def preload() -> None:
    """Import torch, the learned agents, the suite's rows and the grids' slices here, then freeze them.

    Frozen objects (:func:`gc.freeze`) stay out of the workers' garbage collections, which would
    otherwise write to, and so copy, the pages the workers share with this process.
    """
    import torch  # noqa: F401

    import agents.learned  # noqa: F401  (the learned agents and their models)
    import benchmarks.executor.tasks  # noqa: F401  (the agents and the suite's rows)
    import benchmarks.experiments.grid.tasks  # noqa: F401  (the grids' slices)

    gc.freeze()
