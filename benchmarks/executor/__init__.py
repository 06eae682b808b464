"""Where the rows of a sweep are played: one task per (experiment, algorithm row), on local processes or on Ray.

:mod:`tasks` holds the task model (a task, its result, the merge in the experiments' row order),
:mod:`local` the default executor (worker processes on this machine) and :mod:`ray_executor` the
one that runs the same tasks on a Ray cluster.
"""
