"""The ``generalization`` experiment: generalist agents against references over grids of sizes.

Bernoulli cells are (K, T) with arm means ~ U[0, 1] (plus K and T beyond the trained range, and
Beta priors at T=200); linear cells are (d, A) at T=200, sigma=1.5, and single changes at d=5, A=10.
Two opt-in families (``families``; the harness's ``--grid-families``) are played by the linear
generalist: ``gaussian-mab``, Gaussian multi-armed bandits (one-hot arms, A = d = K) with arm means
~ U[0, 1] or N(0, 1), K x T, sigma=0.5, against Bayes-UCB and TS told the prior (the best of these two
is the cell's best reference), LinUCB (alpha 1 and 2) and UCB; ``held-out``, priors of w* never
used in training (N(0, I), uniform on the unit sphere, one non-zero coordinate s e_i) at d=5, A=10,
T=200, sigma=1.5, against the matched Bayes-UCB and LinUCB (alpha 1 and 2; the best of these three is
the best reference) and the matched TS; ``in-family``, w* from the training prior family
(:mod:`icrl_gym.envs.prior_family`: a member and its hyperparameters drawn per instance), d x A x T at
sigma=0.5 and sigma variants x T at d=5, A=10, against Bayes-UCB and TS told each instance's matched
Gaussian prior (the best of these two is the best reference) and LinUCB (alpha 1 and 2).
One more opt-in family is played by the Bernoulli generalist: ``bernoulli-beta``, arm means ~ Beta(a, b)
for every a, b in ``exp.beta_params`` and the two skewed priors (the first floor(K/2) arms' means ~
U[0.5, 1], the others ~ U[0, 0.5], and the reverse), each at K in ``exp.beta_arms``, T=200, against
the finite-horizon Gittins index, Thompson sampling and Bayes-UCB told the cell's Beta prior, UCB, and
at K=2 the exact Bayes-optimal DP told the prior.  A skewed prior is no Beta prior (each arm's mean is
uniform on its own half), so on the skewed cells the Beta-Bernoulli references are told Beta(1, 1) =
U[0, 1] and the DP, Bayes-optimal only for that prior, is left out.  The cell's best reference is the
matched-prior Gittins, the reference of the acceptance threshold (<= 1.05 x its mean in every cell).
In every cell each row plays the same instances with the same noise (common random numbers,
:func:`icrl_gym.data.crn.crn_batches` through :func:`~icrl_gym.data.trajectories.evaluate_regret`
in the same batches), so per-run regret differences are paired.  For every row: the mean and
standard error of the cumulative regret R_T over the runs, the paired difference R_T(row) -
R_T(best reference) with its standard error, and the ratio of the means; the best reference is the
reference with the lowest mean in the cell (of the compared ones).  Tails, per row: the 99th
percentile of per-run regret (p99, :func:`regret_quantile`), its ratio to the best reference's p99,
and the fraction of runs whose regret exceeds both 3x the best reference's on the same instance and
20 (:func:`~benchmarks.experiments.grid.cells.failure_fraction`).  The acceptance thresholds
(``checks.py``) are checked for the generalist.

Outputs in ``<out>/generalization/``: ``cells.csv`` (one line per cell and row), ``checks.csv``,
``summary.md``, ``heatmap-<family>.png`` (ratio generalist / best reference, out-of-range cells
hatched) and ``config.json``.  A missing checkpoint leaves its rows out and says so.  Every row of
every cell is played in slices of ``slice_runs`` runs (one common-random-numbers batch of the cell's
seed each; ``benchmarks.experiments.grid.tasks``), the tasks of the harness's executor (``--workers``,
``--ray``), and joined in a fixed order, so the outputs do not depend on the number of workers.  Each
finished slice is written at once to ``cells/<cell>/slices/``, each finished row to
``cells/<cell>/<row>.json`` (per-run totals with what made them: environment, agent, runs, seed,
slice size, model weights' sha256); running the same command again reuses every matching row and
slice, so a stopped grid resumes where it was.
The tables, checks and heatmaps are rebuilt from the cells of the current run only (a heatmap of a
family not in the run is removed).

The folder reads top to bottom: ``cells.py`` (the grid's sizes and rows, and the cells they make),
``run.py`` (the references of a cell, the models, the run), ``checks.py`` (the thresholds) and
``report.py`` (``cells.csv``, ``summary.md``, the heatmaps); ``benchmarks.experiments.grid`` holds
what the MDP grid shares.  ``python -m benchmarks --experiments generalization`` runs it.
"""
