"""The exact frontier of Bernoulli bandit policies not told the prior (K = 2), and Monte-Carlo rows at any K.

The method and the command: the docstring of ``cli.py`` (also its ``--help``).  The folder reads top
to bottom: ``cells.py`` (the priors, seeds, output names), ``run.py`` (the exact backward passes, the
certificate, the Monte-Carlo rows), ``checks.py`` (the memory estimates checked before any table is
built), ``report.py`` (the CSV and JSON files) and ``cli.py``
(``python -m benchmarks.evaluations.bernoulli_frontier``).
"""
