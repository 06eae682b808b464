"""The MDP generalist's deployments (argmax, temperatures, its default schedule) side by side, next to PSRL.

What it plays and writes: the docstring of ``cli.py`` (also its ``--help``).  The folder reads top to
bottom: ``cells.py`` (the deployments, cells and seed), ``run.py``, ``checks.py`` (the cells' sizes
and memory, checked before any work), ``report.py`` (``deployment.csv``, ``config.json``) and
``cli.py`` (``python -m benchmarks.evaluations.mdp_deployment``).
"""
