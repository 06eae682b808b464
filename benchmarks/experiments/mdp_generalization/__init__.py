"""The ``mdp-generalization`` grid: the MDP generalist against PSRL and the Bayes DPT policy over MDP sizes.

What it plays and writes: the docstring of ``cli.py`` (also its ``--help``).  The folder reads top to
bottom: ``cells.py`` (sizes, rows, cells), ``run.py``, ``checks.py`` (the acceptance bounds),
``report.py`` (``cells.csv``, ``summary.md``, the heatmaps) and ``cli.py`` (the command
``python -m benchmarks.evaluations.mdp_generalization``); ``python -m benchmarks --experiments
mdp-generalization`` runs it too.
"""
