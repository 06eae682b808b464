"""The benchmark harness (``python -m benchmarks``): run the experiments; write CSV, plots, summary and config.

Every algorithm of an experiment runs on the same instances with the same noise (common random
numbers: one seed draws the instances and the noise, whatever the algorithm does), so regret
differences are differences of algorithms, not of luck.  Outputs in ``--out``:

- ``regret.csv``: per experiment, algorithm and step t, mean / std / standard error of the
  cumulative regret and of the per-step suboptimality <a*_t - a_t, w*> (for MDP experiments t is
  the episode k and the suboptimality is V* - the return of episode k);
- ``<experiment>.png``: cumulative regret (+-1 standard error) and per-step suboptimality, learned
  models solid, experts dashed (:mod:`benchmarks.plots`);
  ``distribution-ratio-difference.png``: regret(TF) - regret(TS) per alpha;
- ``summary.md``: regret at T/4, T/2 and T with standard errors, next to the paper's numbers;
- ``config.json``: the configuration, seed and model records that reproduce the run, and the software that made it
  (:func:`~icrl_gym.utils.provenance.software_environment`);
- ``index.html``: the results page, one self-contained file that opens with a summary (each
  experiment's best learned agent against its best expert, the generalists first) and holds every
  figure, table and the configuration (:mod:`benchmarks.results_page`);
- ``experiments/<experiment>.json``: the stored result of each experiment (its curves and the key
  that made them: environment, algorithm specifications, runs, seed, device of the learned rows, the
  sha256 of every checkpoint file they play and the package version, plus a sha256 of the whole).

Each experiment's result is written (atomically) as soon as it finishes, and running the same
command into the same folder again reuses every stored result whose key matches (logged as
reused), so a stopped run resumes and loses at most the experiment it was in.  A stored result with
another key is run again and replaced; one that fails its checksum is reported and run again, never
used.  ``--rerun`` ignores stored results.  The combined outputs (CSV, plots, summary, config) are
then rebuilt from the results, each file written atomically, and describe exactly the experiments of
this run: plots of experiments not in it are removed (their stored results stay in ``experiments/``
for a later run).  A grid experiment keeps its own folder (``benchmarks/experiments/generalization/``).

The harness's modules, each importing only those after it: ``cli`` (the flags and the help) ->
``config`` (the options, checked) -> ``runner`` (the run: each experiment stored or played, then
the grids) -> ``retrain`` and ``store`` (stored results) -> ``report`` (``regret.csv``, plots,
``summary.md``, the page).  The experiments themselves are in :mod:`benchmarks.experiments`.
"""

from __future__ import annotations
