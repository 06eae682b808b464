"""The experiments, one folder (package) each, read top to bottom: ``cells`` -> ``run`` -> ``checks`` -> ``report``.

- ``cells.py``: the settings (which environments, which rows), plain data;
- ``run.py``: plays the cells (every row of an experiment on the same instances) and stores what it played;
- ``checks.py``: the acceptance thresholds (the frontier's and the deployments': the checks made before any work);
- ``report.py``: the tables, CSV files and figures;
- ``cli.py``: a command's flags (``python -m benchmarks.evaluations.<name>`` calls it).

Families: ``suite`` (the curve experiments of ``python -m benchmarks``: the paper's figures, the
generalists, OOD shifts, MDPs), ``generalization`` (the bandit grid), ``mdp_generalization`` (the
MDP grid), ``bernoulli_frontier`` (the exact frontier of policies not told the prior) and
``mdp_deployment`` (the MDP generalist's deployments).  ``grid`` holds what both grids share (cells
and their statistics, the row store, the tables and heatmaps), ``rows`` the agent specifications of
the rows and ``models`` what the learned rows' checkpoint records say.  A module imports only
modules below it: ``cells`` imports no other layer, ``report`` never imports ``run``.
"""
